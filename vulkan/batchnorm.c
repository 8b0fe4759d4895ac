/* Batch norm 2d: BN_STATS (with the running-statistics update), BN_APPLY, BN_BWD_REDUCE and
 * BN_BWD_DATA, and a synchronized batch norm's forms of them (docs/ops.md): BN_STATS's
 * moments (ip1 = 1) take the statistics' passes, its finish (ip1 = 2) a pass over the
 * channels like eval's, BN_BWD_DATA's count over R ranks (ip2) a push-constant factor.
 * The per-channel sums go through batchnorm/channel.comp: one workgroup per segment of a
 * channel (a fixed-order sum), then the channel's segments merged in order (no float
 * atomics, repeatable). In one dispatch where the partials fit a zone slot (vk_zone) and
 * the operands four bindings: the last segment of a channel to finish merges them, so a
 * node's sums take one round of a step, not two (a DARTS step has about 3,600 of them).
 * Otherwise in two: the partials into scratch, then a workgroup per channel merging them.
 * Apply and backward-data are element-wise through batchnorm/pointwise.comp. Checks mirror
 * the CPU backend's, so a bad node fails with the same status before anything is
 * submitted. */
#include <string.h>

#include "shaders/batchnorm/variants.h"
#include "vulkan/vk.h"

/* Mirrors channel.comp's push constants. */
typedef struct bn_red_pc {
    uint32_t gate, d, x, y;
    uint32_t a, b, m, c;
    uint32_t part, nseg, r0, r1;
    float eps, mom;
    uint32_t flag, tick; /* BN_SEG_RED: x-hat source; statistics: the moments only */
    uint32_t ne[4], sx[4], sy[4];
    uint32_t sv[4];
} bn_red_pc;

/* Mirrors pointwise.comp's push constants. */
typedef struct bn_pw_pc {
    uint32_t gate, d, x, s;
    uint32_t y, r, g, b;
    uint32_t ne[4], sx[4], sd[4], sy[4];
    uint32_t sv[4];
    uint32_t gs, bs, flags, n;
} bn_pw_pc;

_Static_assert(sizeof(bn_red_pc) <= VK_PC_BYTES, "channel.comp's push constants");
_Static_assert(sizeof(bn_pw_pc) <= VK_PC_BYTES, "pointwise.comp's push constants");

static void put4(uint32_t out[4], const int64_t v[4])
{
    for (int d = 0; d < 4; d++)
        out[d] = (uint32_t)v[d];
}

/* A per-channel operand: [C] (rows 1) or [2, C]; written ones may not broadcast. */
static ex_status check_c(vk_exec *e, const ex_tdesc *t, int rows, int64_t c, const char *what,
                         int written)
{
    int ok = t->dtype == EX_F32 && t->buf != NULL &&
             (rows == 1 ? t->ndim == 1 && t->ne[0] == c
                        : t->ndim == 2 && t->ne[0] == rows && t->ne[1] == c);
    if (!ok)
        return vk_fail(e, EX_ERR_SHAPE, "%s must be an f32 [%s%lld] tensor", what,
                       rows == 1 ? "" : "2, ", (long long)c);
    int64_t ne[4], st[4];
    ex_td_shape4(t, ne, st);
    if (written && !ex_td_dst_ok(ne, st))
        return vk_fail(e, EX_ERR_ARG, "%s broadcasts (stride 0)", what);
    if (!vk_fits32(ne, st))
        return vk_fail(e, EX_ERR_UNSUPPORTED, "%s is beyond 32-bit indexing", what);
    return EX_OK;
}

/* The source count and x (source 0): a 4-d f32 tensor whose indices fit 32 bits. */
static ex_status begin(vk_exec *e, const ex_node_exec *n, int nmin, int nmax)
{
    if (n->nsrc < nmin || n->nsrc > nmax || n->src == NULL)
        return vk_fail(e, EX_ERR_ARG, "unexpected source count %d", n->nsrc);
    const ex_tdesc *x = &n->src[0];
    if (x->dtype != EX_F32 || x->ndim != 4 || x->buf == NULL)
        return vk_fail(e, EX_ERR_ARG, "x must be a 4-d f32 tensor");
    if (!vk_fits32(x->ne, x->st))
        return vk_fail(e, EX_ERR_UNSUPPORTED, "x is beyond 32-bit indexing");
    return EX_OK;
}

/* A BN_APPLY, BN_BWD_REDUCE or BN_BWD_DATA node checked as every backend checks it
 * (ex_td_bn_of), with each operand within the shaders' 32-bit indexing. */
static ex_status checked(vk_exec *e, const ex_node_exec *n)
{
    ex_td_bn g;
    char why[256];
    ex_status st = ex_td_bn_of(n, &g, why, sizeof why);
    if (st != EX_OK)
        return vk_fail(e, st, "%s", why);
    for (int i = 0; i <= n->nsrc; i++) {
        int64_t ne[4], sts[4];
        ex_td_shape4(i < n->nsrc ? &n->src[i] : &n->dst, ne, sts);
        if (!vk_fits32(ne, sts))
            return vk_fail(e, EX_ERR_UNSUPPORTED, "operand %d is beyond 32-bit indexing", i);
    }
    return EX_OK;
}

/* Whether the rows of t's planes are dense (h and w fold into one index): the segment
 * pass then splits no position into h and w. */
static uint32_t dense_rows(const ex_tdesc *t)
{
    return t->st[2] == t->ne[3] * t->st[3];
}

/* The column stride of a [C] operand or of one row of a [2, C] one. */
static uint32_t col_st(const ex_tdesc *t)
{
    return (uint32_t)t->st[t->ndim - 1];
}

/* Binds what the one-pass reduction touches (x, for the backward stats and dy; dst and,
 * for the statistics, the running statistics as one binding; a zone slot): 0 when its
 * partials or tickets do not fit a slot or its operands four bindings. */
static int one_pass_bind(vk_exec *e, const ex_node_exec *n, int64_t items, bn_red_pc *pc)
{
    int red = n->op == EX_OP_BN_BWD_REDUCE;
    if (pc->c > VK_ZONE_TICKETS || (uint64_t)items * 8 > VK_ZONE_SLOT - 4 * VK_ZONE_TICKETS)
        return 0;
    uint32_t run[2] = {VK_NOREF, VK_NOREF};
    vk_bind_reset(e);
    if (!red && !pc->flag && !vk_ref_pair(e, &n->src[1], &n->src[2], run))
        return 0;
    pc->a = red ? vk_ref_small(e, &n->src[1]) : run[0];
    pc->b = run[1];
    pc->d = vk_ref(e, &n->dst);
    vk_zone(e, &pc->tick, &pc->part);
    pc->x = vk_ref(e, &n->src[0]);
    pc->y = red ? vk_ref(e, &n->src[2]) : VK_NOREF;
    return !e->ref_error;
}

/* The sums in one dispatch (one_pass_bind) or two: the segment pass (x and, for the
 * backward, stats and dy into scratch), then the finishing pass (scratch into dst and, for
 * the statistics, the running statistics), each binding only what it touches. */
static ex_status channels(vk_exec *e, const ex_node_exec *n, int seg, int fin, bn_red_pc *pc)
{
    int64_t nseg = (pc->m + BN_SEG - 1) / BN_SEG, items = (int64_t)pc->c * nseg;
    if (items > INT32_MAX / 2)
        return vk_fail(e, EX_ERR_UNSUPPORTED, "%lld channel segments are beyond 32-bit indexing",
                       (long long)items);
    int red = seg == BN_SEG_RED;
    pc->nseg = (uint32_t)nseg;
    if (one_pass_bind(e, n, items, pc))
        return vk_dispatch(e, VK_SH_batchnorm_channel, red ? BN_ONE_RED : BN_ONE_STATS, pc,
                           sizeof *pc, vk_groups(items, 1), 1, 1);
    vk_bind_reset(e);
    pc->a = pc->b = pc->d = pc->tick = VK_NOREF;
    ex_status st = vk_scratch(e, (uint64_t)items * 8, &pc->part);
    if (st != EX_OK)
        return st;
    pc->x = vk_ref(e, &n->src[0]);
    pc->a = red ? vk_ref_small(e, &n->src[1]) : VK_NOREF;
    pc->y = red ? vk_ref(e, &n->src[2]) : VK_NOREF;
    st = vk_dispatch(e, VK_SH_batchnorm_channel, seg, pc, sizeof *pc, vk_groups(items, 1), 1, 1);
    if (st != EX_OK)
        return st;
    vk_barrier(e);
    vk_bind_reset(e);
    int run = fin == BN_FIN_STATS && !pc->flag; /* not the moments */
    pc->part = vk_ref_rebind_read(e, pc->part, 0);
    pc->x = pc->y = VK_NOREF;
    pc->d = vk_ref(e, &n->dst);
    pc->a = run ? vk_ref(e, &n->src[1]) : VK_NOREF;
    pc->b = run ? vk_ref(e, &n->src[2]) : VK_NOREF;
    return vk_dispatch(e, VK_SH_batchnorm_channel, fin, pc, sizeof *pc, vk_groups(pc->c, 1), 1, 1);
}

/* The finish of a synchronized batch norm (BN_FINISH): one invocation a channel, the
 * moments read where the eval form reads the running statistics' pair. */
static ex_status bn_finish(vk_exec *e, const ex_node_exec *n, bn_red_pc *pc)
{
    const ex_tdesc *mo = &n->src[0];
    pc->m = (uint32_t)n->ip[2];
    pc->sy[0] = (uint32_t)mo->st[0];
    pc->sy[1] = (uint32_t)mo->st[1];
    pc->d = vk_ref(e, &n->dst);
    pc->a = vk_ref(e, &n->src[1]);
    pc->b = vk_ref(e, &n->src[2]);
    pc->x = vk_ref_small(e, mo);
    return vk_dispatch(e, VK_SH_batchnorm_channel, BN_FINISH, pc, sizeof *pc, vk_groups(pc->c, 128),
                       1, 1);
}

static ex_status bn_stats(vk_exec *e, const ex_node_exec *n)
{
    char why[256];
    int form;
    int64_t c;
    ex_status st = ex_td_bn_stats_check(n, &form, &c, why, sizeof why);
    if (st != EX_OK)
        return vk_fail(e, st, "%s", why);
    st =
        form == EX_BN_STATS_FINISH ? check_c(e, &n->src[0], 2, c, "moments", 0) : begin(e, n, 3, 3);
    if (st == EX_OK)
        st = check_c(e, &n->src[1], 1, c, "running_mean", 1);
    if (st == EX_OK)
        st = check_c(e, &n->src[2], 1, c, "running_var", 1);
    if (st == EX_OK)
        st = check_c(e, &n->dst, 2, c, "dst", 1);
    if (st != EX_OK)
        return st;
    const ex_tdesc *x = &n->src[0];
    bn_red_pc pc;
    memset(&pc, 0, sizeof pc);
    pc.c = (uint32_t)c;
    pc.eps = n->fp[0];
    pc.mom = n->fp[1];
    pc.sv[0] = (uint32_t)n->dst.st[0];
    pc.sv[1] = (uint32_t)n->dst.st[1];
    pc.sv[2] = col_st(&n->src[1]);
    pc.sv[3] = col_st(&n->src[2]);
    if (form == EX_BN_STATS_FINISH)
        return bn_finish(e, n, &pc);
    pc.m = (uint32_t)(x->ne[0] * x->ne[2] * x->ne[3]);
    pc.flag = form == EX_BN_STATS_MOMENTS;
    put4(pc.ne, x->ne);
    put4(pc.sx, x->st);
    pc.r0 = dense_rows(x);
    if (n->ip[0])
        return channels(e, n, BN_SEG_STATS, BN_FIN_STATS, &pc);
    pc.d = vk_ref(e, &n->dst);
    pc.a = vk_ref_small(e, &n->src[1]);
    pc.b = vk_ref_small(e, &n->src[2]);
    return vk_dispatch(e, VK_SH_batchnorm_channel, BN_EVAL, &pc, sizeof pc, vk_groups(c, 128), 1,
                       1);
}

static ex_status bn_bwd_reduce(vk_exec *e, const ex_node_exec *n)
{
    ex_status st = checked(e, n);
    if (st != EX_OK)
        return st;
    int64_t c = n->src[0].ne[1];
    const ex_tdesc *x = &n->src[0], *s = &n->src[1];
    bn_red_pc pc;
    memset(&pc, 0, sizeof pc);
    pc.flag = (uint32_t)n->ip[1];
    pc.m = (uint32_t)(x->ne[0] * x->ne[2] * x->ne[3]);
    pc.c = (uint32_t)c;
    put4(pc.ne, x->ne);
    put4(pc.sx, x->st);
    put4(pc.sy, n->src[2].st);
    pc.r0 = dense_rows(x);
    pc.r1 = dense_rows(&n->src[2]);
    pc.sv[0] = (uint32_t)n->dst.st[0];
    pc.sv[1] = (uint32_t)n->dst.st[1];
    pc.sv[2] = (uint32_t)s->st[0];
    pc.sv[3] = (uint32_t)s->st[1];
    return channels(e, n, BN_SEG_RED, BN_FIN_RED, &pc);
}

/* x, stats and dst of the element-wise pair; the caller adds its own operands. */
static void pw_common(vk_exec *e, const ex_node_exec *n, bn_pw_pc *pc)
{
    const ex_tdesc *x = &n->src[0], *s = &n->src[1];
    memset(pc, 0, sizeof *pc);
    pc->d = vk_ref(e, &n->dst);
    pc->x = vk_ref(e, x);
    pc->s = vk_ref_small(e, s);
    pc->y = pc->r = pc->g = pc->b = VK_NOREF;
    put4(pc->ne, x->ne);
    put4(pc->sx, x->st);
    put4(pc->sd, n->dst.st);
    pc->sv[0] = (uint32_t)s->st[0];
    pc->sv[1] = (uint32_t)s->st[1];
    pc->n = (uint32_t)ex_td_numel(x);
}

/* Whether strides s (x's, dst's or dy's) are unit along rows, and with dense planes
 * also a row's width between rows. */
static int bn_unit(const uint32_t *s, const uint32_t *ne, int dense)
{
    return s[3] == 1 && (!dense || s[2] == ne[3]);
}

/* Four neighbours an invocation where the layout allows it (BN_QUAD): rows of 4m
 * elements, or dense planes of 4m (14x14), whose 4 neighbours may span two rows. */
static ex_status pointwise(vk_exec *e, int variant, bn_pw_pc *pc)
{
    int dense = pc->ne[3] % 4 != 0;
    if ((pc->ne[3] % 4 == 0 || (pc->ne[2] * pc->ne[3]) % 4 == 0) &&
        bn_unit(pc->sx, pc->ne, dense) && bn_unit(pc->sd, pc->ne, dense) &&
        (variant == BN_APPLY || bn_unit(pc->sy, pc->ne, dense)))
        pc->flags |= BN_QUAD;
    uint32_t items = pc->flags & BN_QUAD ? pc->n / 4 : pc->n;
    return vk_dispatch(e, VK_SH_batchnorm_pointwise, variant, pc, sizeof *pc, vk_groups(items, 128),
                       1, 1);
}

static ex_status bn_apply(vk_exec *e, const ex_node_exec *n)
{
    ex_status st = checked(e, n);
    if (st != EX_OK)
        return st;
    bn_pw_pc pc;
    pw_common(e, n, &pc);
    if (n->nsrc == 4) {
        pc.g = vk_ref_small(e, &n->src[2]);
        pc.b = vk_ref_small(e, &n->src[3]);
        pc.gs = col_st(&n->src[2]);
        pc.bs = col_st(&n->src[3]);
    }
    return pointwise(e, BN_APPLY, &pc);
}

static ex_status bn_bwd_data(vk_exec *e, const ex_node_exec *n)
{
    ex_status st = checked(e, n);
    if (st != EX_OK)
        return st;
    int ranks = ex_td_bn_ranks(n);
    const ex_tdesc *x = &n->src[0];
    if ((uint64_t)ranks >= 1u << (32 - BN_RANKS) ||
        (uint64_t)ranks * (uint64_t)(x->ne[0] * x->ne[2] * x->ne[3]) > UINT32_MAX)
        return vk_fail(e, EX_ERR_UNSUPPORTED, "%d ranks of N*H*W %lld are beyond 32-bit counts",
                       ranks, (long long)(x->ne[0] * x->ne[2] * x->ne[3]));
    bn_pw_pc pc;
    pw_common(e, n, &pc);
    pc.y = vk_ref(e, &n->src[2]);
    pc.r = vk_ref_small(e, &n->src[3]);
    put4(pc.sy, n->src[2].st);
    pc.sv[2] = (uint32_t)n->src[3].st[0];
    pc.sv[3] = (uint32_t)n->src[3].st[1];
    if (n->nsrc == 5) {
        pc.g = vk_ref_small(e, &n->src[4]);
        pc.gs = col_st(&n->src[4]);
    }
    pc.flags =
        (n->ip[0] != 0 ? BN_TRAIN : 0u) | (n->ip[1] ? BN_XHAT : 0u) | (uint32_t)ranks << BN_RANKS;
    return pointwise(e, BN_DATA, &pc);
}

ex_status vk_run_batchnorm(vk_exec *e, const ex_node_exec *n)
{
    switch (n->op) {
    case EX_OP_BN_STATS: return bn_stats(e, n);
    case EX_OP_BN_APPLY: return bn_apply(e, n);
    case EX_OP_BN_BWD_REDUCE: return bn_bwd_reduce(e, n);
    case EX_OP_BN_BWD_DATA: return bn_bwd_data(e, n);
    default: return vk_fail(e, EX_ERR_UNSUPPORTED, "not a batch-norm op");
    }
}
