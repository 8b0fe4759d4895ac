/* NAS ops: MIXED_SUM, MIXED_SUM_BWD_W, GUMBEL_SOFTMAX, GUMBEL_SOFTMAX_BWD, HARDMAX_ST,
 * ENTROPY, ENTROPY_BWD, TOPK_MASK.
 *
 * The mixed sum reads its mask on the device, so a search whose active set changes from
 * step to step replays one recorded step: nas/mixtab.comp first writes a table of each
 * candidate's coefficient, activity and weight index into scratch, and nas/mix.comp then
 * sums groups of consecutive candidates that share their strides, the first group
 * writing dst and the others adding to it (candidates in index order, as on the CPU).
 * The weight gradient dots each chunk of dy with every active candidate (a fixed tree
 * per chunk into scratch) and nas/mixdw.comp adds the chunks by a fixed tree: no float
 * atomics, repeatable. A forward whose candidates all fit and are dense, like dst, of a
 * multiple of 4 elements goes through nas/mixd.comp instead, which reads the weights and
 * the mask itself: no table, no barrier before the first group. Each dispatch binds only
 * what it touches, so the candidates may lie anywhere; a group takes as many candidates
 * as find storage bindings (the table and the weights are small and come as uniform
 * buffers).
 *
 * The row ops (nas/rows.comp) give each row of K to one invocation. Checks mirror the
 * CPU backend's; a candidate that does not fit fails the node only if its mask entry is
 * active, which the device reports through the status words. */
#include <string.h>

#include "shaders/nas/variants.h"
#include "vulkan/vk.h"

#define MIX_MAX EX_NODE_IPARAMS

_Static_assert(MIX_MAX <= 16, "mixtab.comp packs 16 weight indices, mixdw.comp totals 16");

/* Mirrors mixtab.comp's push constants. */
typedef struct mixtab_pc {
    uint32_t gate, tab, w, mask;
    uint32_t n, bad, node, sref;
    uint32_t wne[4], wst[4], mne[4], mst[4];
    uint32_t idx[8];
} mixtab_pc;

/* Mirrors mix.comp's push constants. */
typedef struct mix_pc {
    uint32_t gate, d, tab, part;
    uint32_t n, nch, j0, cnt;
    uint32_t ne[4], sd[4], sx[4];
    uint32_t x[MIX_GROUP];
} mix_pc;

/* Mirrors mixd.comp's push constants. */
typedef struct mixd_pc {
    uint32_t gate, d, w, mask;
    uint32_t n, cnt, inner, outer;
    uint32_t at[MIX_GROUP], x[MIX_GROUP];
} mixd_pc;

/* Mirrors mixdw.comp's push constants. */
typedef struct mixdw_pc {
    uint32_t gate, d, tab, part;
    uint32_t n, nch, k, r0;
    uint32_t dne[4], dst[4];
} mixdw_pc;

/* Mirrors rows.comp's push constants. */
typedef struct rows_pc {
    uint32_t gate, d, a, b;
    uint32_t k, rows, tau, ctr;
    uint32_t cst, k0, k1, topk;
    float thr;
    uint32_t r0, r1, r2;
    uint32_t ne[4], sd[4], sa[4], sb[4];
} rows_pc;

_Static_assert(sizeof(mixtab_pc) <= VK_PC_BYTES, "mixtab.comp's push constants");
_Static_assert(sizeof(mix_pc) <= VK_PC_BYTES, "mix.comp's push constants");
_Static_assert(MIX_GROUP <= VK_REFS_ASCENDING, "a group's candidates bound at once");
_Static_assert(sizeof(mixd_pc) <= VK_PC_BYTES, "mixd.comp's push constants");
_Static_assert(sizeof(mixdw_pc) <= VK_PC_BYTES, "mixdw.comp's push constants");
_Static_assert(sizeof(rows_pc) <= VK_PC_BYTES, "rows.comp's push constants");

static void put4(uint32_t out[4], const int64_t v[4])
{
    for (int d = 0; d < 4; d++)
        out[d] = (uint32_t)v[d];
}

/* f32 with 1 to 4 dims whose indices fit 32 bits; strides as read (padded) in st. */
static int fits(const ex_tdesc *t, int64_t ne[4], int64_t st[4])
{
    if (!ex_td_valid(t, EX_F32))
        return 0;
    ex_td_shape4(t, ne, st);
    return vk_fits32(ne, st);
}

/* ---- the mixed sum ---- */

/** A mixed op's operands: d is dst (forward) or dy (weight gradient), ne its padded shape;
 *  candidate j is src[2 + j] with strides st[j], unless bit j of bad says it does not
 *  fit (checked only if active, on the device). The scratch holds the table from at,
 *  then (weight gradient) one row of nch partials per candidate, rows MIX_ROW(nch) words
 *  apart so that each group's rows have bytes of their own. */
typedef struct mix_ops {
    int n;
    unsigned bad;
    int64_t k, numel, nch;
    int64_t ne[4], sd[4];
    int64_t st[MIX_MAX][4];
    uint64_t at; /**< the table's place in the node's scratch; the partials follow */
} mix_ops;

/* The table's bytes of scratch: 256, so the partials after it start on any device's
 * offset alignment. */
#define MIX_TAB_BYTES ((uint64_t)256)
_Static_assert(MIX_TAB *MIX_MAX * 4 <= 256, "the table fits its scratch");

/* The node checked (core/tdesc.h) into m, then this backend's limits: the weights and the
 * mask within 2^16 entries and 32-bit indexing; a candidate beyond 32-bit indexing counts
 * as one that does not fit. */
static ex_status mix_select(vk_exec *e, const ex_node_exec *n, mix_ops *m)
{
    ex_td_mix g;
    char why[96];
    memset(m, 0, sizeof *m);
    ex_status st = ex_td_mix_of(n, &g, why, sizeof why);
    if (st != EX_OK)
        return vk_fail(e, st, "%s", why);
    m->n = g.n;
    m->bad = g.bad;
    m->k = g.k;
    memcpy(m->ne, g.ne, sizeof m->ne);
    memcpy(m->sd, g.st[0], sizeof m->sd);
    for (int j = 0; j < m->n; j++) {
        memcpy(m->st[j], g.st[1 + j], sizeof m->st[j]);
        if (!vk_fits32(m->ne, m->st[j]))
            m->bad |= 1u << j;
    }
    int64_t ne[4], sw[4];
    bool fwd = n->op == EX_OP_MIXED_SUM;
    if (!fits(&n->src[1], ne, sw) || (fwd && !fits(&n->src[0], ne, sw)) || m->k > 0xFFFF)
        return vk_fail(e, EX_ERR_UNSUPPORTED, "more than 65535 weights, or beyond 32-bit indexing");
    if (!vk_fits32(m->ne, m->sd))
        return vk_fail(e, EX_ERR_UNSUPPORTED, "%s is beyond 32-bit indexing", fwd ? "dst" : "dy");
    m->numel = ex_td_numel(fwd ? &n->dst : &n->src[0]);
    return EX_OK;
}

/* Bytes of partials row j starts at, from the table's start. */
static uint64_t mix_row(const mix_ops *m, int j)
{
    return MIX_TAB_BYTES + 4 * (uint64_t)j * (uint64_t)MIX_ROW(m->nch);
}

/* Scratch (table, then the partials) and the table from weights w (NULL: 1). */
static ex_status mix_table(vk_exec *e, const ex_node_exec *n, const ex_tdesc *w, mix_ops *m)
{
    uint32_t ref;
    m->at = e->scratch_at;
    ex_status st = vk_scratch(e, mix_row(m, m->n), &ref);
    if (st != EX_OK)
        return st;
    vk_bind_reset(e);
    mixtab_pc pc;
    memset(&pc, 0, sizeof pc);
    pc.tab = vk_scratch_ref(e, m->at, MIX_TAB_BYTES, VK_WRITE);
    st = vk_status_ref(e, &pc.sref);
    if (st != EX_OK)
        return st;
    int64_t ne[4], sw[4];
    pc.w = w ? vk_ref_small(e, w) : VK_NOREF;
    if (w) {
        ex_td_shape4(w, ne, sw);
        put4(pc.wne, ne);
        put4(pc.wst, sw);
    }
    pc.mask = vk_ref_small(e, &n->src[1]);
    ex_td_shape4(&n->src[1], ne, sw);
    put4(pc.mne, ne);
    put4(pc.mst, sw);
    pc.n = (uint32_t)m->n;
    pc.bad = m->bad;
    pc.node = (uint32_t)e->index;
    for (int j = 0; j < m->n; j++)
        pc.idx[j / 2] |= (uint32_t)n->ip[j] << (16 * (j % 2));
    st = vk_dispatch(e, VK_SH_nas_mixtab, 0, &pc, sizeof pc, 1, 1, 1);
    vk_barrier(e);
    return st;
}

/* Fills pc with the group that starts at good candidate j0: the good candidates after it
 * that share its strides, at most MIX_GROUP, as many as find bindings (lowest address
 * first: vk_ref_ascending). Returns the candidate after the group. */
static int mix_group(vk_exec *e, const ex_node_exec *n, const mix_ops *m, int j0, mix_pc *pc)
{
    const ex_tdesc *x[MIX_GROUP];
    uint32_t ref[MIX_GROUP];
    int cnt = 0;
    for (int j = j0; j < m->n && cnt < MIX_GROUP && !((m->bad >> j) & 1) &&
                     !memcmp(m->st[j], m->st[j0], sizeof m->st[j]);
         j++)
        x[cnt++] = &n->src[2 + j];
    while (cnt > 0 && !vk_ref_ascending(e, x, cnt, ref))
        cnt--;
    for (int q = 0; q < cnt; q++)
        pc->x[q] = ref[q];
    pc->cnt = (uint32_t)cnt;
    pc->j0 = (uint32_t)j0;
    put4(pc->sx, m->st[j0 < m->n ? j0 : 0]);
    return j0 + cnt;
}

/* Whether strides st lay out shape ne row-major without gaps (sizes of 1 take any
 * stride): mix.comp's contiguous(). */
static int mix_dense(const uint32_t *ne, const uint32_t *st)
{
    uint32_t p = 1;
    for (int k = 3; k >= 0; k--) {
        if (ne[k] > 1 && st[k] != p)
            return 0;
        p *= ne[k];
    }
    return 1;
}

/* The forward's invocations: one per element, or per 4 where mix.comp takes quads. */
static uint32_t mix_items(const mix_pc *pc)
{
    int quads = pc->n % 4 == 0 && mix_dense(pc->ne, pc->sd) && mix_dense(pc->ne, pc->sx);
    return quads ? pc->n / 4 : pc->n;
}

/* The groups' dispatches of variant (MIX_FWD, then MIX_FWD_ACC; or MIX_DOT into the
 * group's rows of partials) over the operand d of n elements, each binding only its
 * candidates. Forward, a first dispatch runs even without a good candidate, so dst is
 * written. */
static ex_status mix_groups(vk_exec *e, const ex_node_exec *n, mix_ops *m, const ex_tdesc *d,
                            int dot)
{
    int j = 0, first = 1;
    while (j < m->n && ((m->bad >> j) & 1))
        j++;
    while (j < m->n || (first && !dot)) {
        vk_bind_reset(e);
        mix_pc pc;
        memset(&pc, 0, sizeof pc);
        pc.tab = vk_scratch_ref(e, m->at, MIX_TAB_BYTES, VK_READ_SMALL);
        pc.d = vk_ref(e, d);
        pc.n = (uint32_t)m->numel;
        pc.nch = (uint32_t)m->nch;
        put4(pc.ne, m->ne);
        put4(pc.sd, m->sd);
        /* one row first, to hold a binding; widened to the group's rows below */
        uint64_t row = m->at + mix_row(m, j), rowb = 4 * (uint64_t)m->nch;
        if (dot)
            pc.part = vk_scratch_ref(e, row, rowb, VK_WRITE);
        int j0 = j;
        j = mix_group(e, n, m, j, &pc);
        if (j < m->n && pc.cnt == 0 && !((m->bad >> j) & 1))
            return vk_fail(e, EX_ERR_UNSUPPORTED, "candidate %d finds no binding left", j);
        if (dot)
            pc.part = vk_scratch_ref(e, row, mix_row(m, j) - mix_row(m, j0), VK_WRITE);
        ex_status st =
            dot ? vk_dispatch(e, VK_SH_nas_mix, MIX_DOT, &pc, sizeof pc, vk_groups(m->nch, 1), 1, 1)
                : vk_dispatch(e, VK_SH_nas_mix, first ? MIX_FWD : MIX_FWD_ACC, &pc, sizeof pc,
                              vk_groups(mix_items(&pc), 128), 1, 1);
        if (st != EX_OK)
            return st;
        if (!dot)
            vk_barrier(e); /* the next group adds to what this one wrote */
        first = 0;
        while (j < m->n && ((m->bad >> j) & 1))
            j++;
    }
    return EX_OK;
}

/* Whether candidate j lies as a slice of whole samples would: dense from dim 1 on, with
 * samples `outer` elements apart (a channel slice of a cell's concatenated output). */
static int mix_sliced(const mix_ops *m, int j, int64_t inner, int64_t *outer)
{
    const int64_t *ne = m->ne, *st = m->st[j];
    *outer = st[0];
    return ne[0] > 1 && st[3] == 1 && st[2] == ne[3] && st[1] == ne[2] * ne[3] && st[0] > inner &&
           st[0] <= INT32_MAX;
}

/* Whether the forward can do without the table (mixd.comp): every candidate fits, dst is
 * dense, of a multiple of 4 elements, the candidates too or all sliced the same way (whole
 * samples of a multiple of 4 elements, mix_sliced: slice says which), and each
 * candidate's weight and mask entry lie within 2^16 elements of their tensors' first. */
static int mix_direct(const ex_node_exec *n, const mix_ops *m, unsigned *slice, int64_t *outer)
{
    uint32_t ne[4], st[4];
    int64_t inner = m->ne[1] * m->ne[2] * m->ne[3], o = 0;
    put4(ne, m->ne);
    put4(st, m->sd);
    *slice = 0;
    *outer = 0;
    if (m->bad || m->numel % 4 != 0 || !mix_dense(ne, st))
        return 0;
    for (int j = 0; j < m->n; j++) {
        put4(st, m->st[j]);
        if (ex_td_at(&n->src[0], n->ip[j]) > 0xFFFF || ex_td_at(&n->src[1], n->ip[j]) > 0xFFFF)
            return 0;
        if (mix_dense(ne, st))
            continue;
        if (inner % 4 != 0 || !mix_sliced(m, j, inner, &o) || (*slice && o != *outer))
            return 0;
        *slice |= 1u << j;
        *outer = o;
    }
    return 1;
}

/* Binds mixd.comp's operands for the group of cnt candidates from j: dst, the weights and
 * the mask, then the candidates lowest address first (a DARTS edge's seven, bound in index
 * order, took two groups and a barrier between them). 0 when they do not all find
 * bindings. */
static int mix_direct_bind(vk_exec *e, const ex_node_exec *n, const mix_ops *m, int j, int cnt,
                           unsigned slice, mixd_pc *pc)
{
    const ex_tdesc *x[MIX_GROUP];
    uint32_t ref[MIX_GROUP];
    vk_bind_reset(e);
    memset(pc, 0, sizeof *pc);
    pc->d = vk_ref(e, &n->dst);
    pc->w = vk_ref_small(e, &n->src[0]);
    pc->mask = vk_ref_small(e, &n->src[1]);
    pc->n = (uint32_t)m->numel;
    for (int q = 0; q < cnt; q++)
        x[q] = &n->src[2 + j + q];
    if (!vk_ref_ascending(e, x, cnt, ref))
        return 0;
    for (int q = 0; q < cnt; q++) {
        pc->x[q] = ref[q];
        pc->at[q] = (uint32_t)ex_td_at(&n->src[0], n->ip[j + q]) |
                    (uint32_t)ex_td_at(&n->src[1], n->ip[j + q]) << 16;
    }
    pc->cnt = (uint32_t)cnt | ((slice >> j) & ((1u << cnt) - 1u)) << 16;
    return 1;
}

/* The forward through mixd.comp: groups of consecutive candidates, each of as many as find
 * bindings, the first writing dst (even without candidates) and the others adding to it. */
static ex_status mix_direct_groups(vk_exec *e, const ex_node_exec *n, const mix_ops *m,
                                   unsigned slice, int64_t outer)
{
    int j = 0, first = 1;
    while (j < m->n || first) {
        mixd_pc pc;
        int cnt = m->n - j < MIX_GROUP ? m->n - j : MIX_GROUP;
        while (!mix_direct_bind(e, n, m, j, cnt, slice, &pc))
            if (--cnt == 0)
                return vk_fail(e, EX_ERR_UNSUPPORTED, "candidate %d finds no binding left", j);
        j += cnt;
        pc.inner = (uint32_t)(m->ne[1] * m->ne[2] * m->ne[3]);
        pc.outer = (uint32_t)outer;
        ex_status st = vk_dispatch(e, VK_SH_nas_mixd, first ? MIX_FWD : MIX_FWD_ACC, &pc, sizeof pc,
                                   vk_groups(m->numel / 4, 128), 1, 1);
        if (st != EX_OK)
            return st;
        if (j < m->n)
            vk_barrier(e); /* the next group adds to what this one wrote */
        first = 0;
    }
    return EX_OK;
}

static ex_status mixed_sum(vk_exec *e, const ex_node_exec *n)
{
    mix_ops m;
    ex_status st = mix_select(e, n, &m);
    if (st != EX_OK)
        return st;
    unsigned slice;
    int64_t outer;
    if (mix_direct(n, &m, &slice, &outer))
        return mix_direct_groups(e, n, &m, slice, outer);
    st = mix_table(e, n, &n->src[0], &m);
    return st == EX_OK ? mix_groups(e, n, &m, &n->dst, 0) : st;
}

static ex_status mixed_sum_bwd_w(vk_exec *e, const ex_node_exec *n)
{
    mix_ops m;
    ex_status st = mix_select(e, n, &m);
    if (st != EX_OK)
        return st;
    const ex_tdesc *dy = &n->src[0], *d = &n->dst;
    int64_t dne[4], dst[4];
    ex_td_shape4(d, dne, dst);
    m.nch = (m.numel + MIX_CHUNK - 1) / MIX_CHUNK;
    if (!vk_fits32(dne, dst) || m.nch > 0xFFFFFF)
        return vk_fail(e, EX_ERR_UNSUPPORTED, "dy or dst is beyond 32-bit indexing");
    st = mix_table(e, n, NULL, &m);
    if (st == EX_OK)
        st = mix_groups(e, n, &m, dy, 1);
    if (st != EX_OK)
        return st;
    vk_barrier(e);
    vk_bind_reset(e);
    mixdw_pc pc;
    memset(&pc, 0, sizeof pc);
    pc.tab = vk_scratch_ref(e, m.at, MIX_TAB_BYTES, VK_READ_SMALL);
    pc.part = vk_scratch_ref(e, m.at + MIX_TAB_BYTES, mix_row(&m, m.n) - MIX_TAB_BYTES, VK_READ);
    pc.d = vk_ref(e, d);
    pc.n = (uint32_t)m.n;
    pc.nch = (uint32_t)m.nch;
    pc.k = (uint32_t)m.k;
    put4(pc.dne, dne);
    put4(pc.dst, dst);
    return vk_dispatch(e, VK_SH_nas_mixdw, 0, &pc, sizeof pc, 1, 1, 1);
}

/* ---- row ops over [E, K] ---- */

/* The node checked (core/tdesc.h), then 32-bit indexing; dst and its aligned sources as
 * rows.comp reads them: dims 0..2 index rows, dim 3 runs along a row. */
static ex_status rows_setup(vk_exec *e, const ex_node_exec *n, rows_pc *pc)
{
    int64_t ne[4], s[3][4];
    int nalign = 0;
    char why[96];
    ex_status st = ex_td_nas_rows_of(n, ne, s, &nalign, why, sizeof why);
    if (st != EX_OK)
        return vk_fail(e, st, "%s", why);
    for (int i = 0; i <= nalign; i++)
        if (!vk_fits32(ne, s[i]))
            return vk_fail(e, EX_ERR_UNSUPPORTED, "operands beyond 32-bit indexing");
    memset(pc, 0, sizeof *pc);
    pc->d = vk_ref(e, &n->dst);
    pc->a = vk_ref(e, &n->src[0]);
    pc->b = nalign > 1 ? vk_ref(e, &n->src[1]) : VK_NOREF;
    pc->tau = pc->ctr = VK_NOREF;
    pc->k = (uint32_t)ne[3];
    pc->rows = (uint32_t)(ne[0] * ne[1] * ne[2]);
    put4(pc->ne, ne);
    put4(pc->sd, s[0]);
    put4(pc->sa, s[1]);
    if (nalign > 1)
        put4(pc->sb, s[2]);
    return EX_OK;
}

static ex_status rows_run(vk_exec *e, int variant, const rows_pc *pc)
{
    return vk_dispatch(e, VK_SH_nas_rows, variant, pc, sizeof *pc, vk_groups(pc->rows, 128), 1, 1);
}

/* A one-element f32 source such as tau (checked in core). */
static uint32_t scalar(vk_exec *e, const ex_tdesc *t)
{
    return vk_ref_small(e, t) + (uint32_t)ex_td_at(t, 0);
}

static ex_status gumbel_softmax(vk_exec *e, const ex_node_exec *n)
{
    rows_pc pc;
    ex_status st = rows_setup(e, n, &pc);
    if (st != EX_OK)
        return st;
    const ex_tdesc *ct = &n->src[2];
    int64_t ne[4], cs[4];
    ex_td_shape4(ct, ne, cs);
    if (!vk_fits32(ne, cs) || (int64_t)pc.rows * pc.k > UINT32_MAX)
        return vk_fail(e, EX_ERR_UNSUPPORTED, "beyond 32-bit indexing");
    pc.tau = scalar(e, &n->src[1]);
    pc.ctr = vk_ref_small(e, ct);
    pc.cst = (uint32_t)ex_td_at(ct, 1);
    pc.k0 = (uint32_t)n->ip[0];
    pc.k1 = (uint32_t)n->ip[1];
    return rows_run(e, ROW_GUMBEL, &pc);
}

static ex_status gumbel_softmax_bwd(vk_exec *e, const ex_node_exec *n)
{
    rows_pc pc;
    ex_status st = rows_setup(e, n, &pc);
    if (st != EX_OK)
        return st;
    pc.tau = scalar(e, &n->src[2]);
    return rows_run(e, ROW_GUMBEL_BWD, &pc);
}

static ex_status topk_mask(vk_exec *e, const ex_node_exec *n)
{
    rows_pc pc;
    ex_status st = rows_setup(e, n, &pc);
    if (st != EX_OK)
        return st;
    pc.topk = (uint32_t)n->ip[0];
    pc.thr = n->fp[0];
    return rows_run(e, ROW_TOPK, &pc);
}

/* HARDMAX_ST, ENTROPY and ENTROPY_BWD: nothing beyond their rows. */
static ex_status rows_plain(vk_exec *e, const ex_node_exec *n, int variant)
{
    rows_pc pc;
    ex_status st = rows_setup(e, n, &pc);
    return st == EX_OK ? rows_run(e, variant, &pc) : st;
}

ex_status vk_run_nas(vk_exec *e, const ex_node_exec *n)
{
    switch (n->op) {
    case EX_OP_MIXED_SUM: return mixed_sum(e, n);
    case EX_OP_MIXED_SUM_BWD_W: return mixed_sum_bwd_w(e, n);
    case EX_OP_GUMBEL_SOFTMAX: return gumbel_softmax(e, n);
    case EX_OP_GUMBEL_SOFTMAX_BWD: return gumbel_softmax_bwd(e, n);
    case EX_OP_HARDMAX_ST: return rows_plain(e, n, ROW_HARDMAX);
    case EX_OP_ENTROPY: return rows_plain(e, n, ROW_ENTROPY);
    case EX_OP_ENTROPY_BWD: return rows_plain(e, n, ROW_ENTROPY_BWD);
    case EX_OP_TOPK_MASK: return topk_mask(e, n);
    default: return vk_fail(e, EX_ERR_UNSUPPORTED, "not a NAS op");
    }
}
