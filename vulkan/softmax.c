/* Softmax family over the last dim: SOFTMAX, SOFTMAX_BWD, LOG_SOFTMAX, LOG_SOFTMAX_BWD,
 * CROSS_ENTROPY, CROSS_ENTROPY_BWD, ACCURACY, all through softmax/rows.comp (one
 * workgroup per row). The losses and the count write one value per row into scratch,
 * which reduce/reduce.comp then folds in a fixed order. Labels are checked on the device
 * (the host never reads them): a bad one is reported through the status words and
 * compute() fails with the CPU backend's message. */
#include <string.h>

#include "shaders/reduce/variants.h"
#include "shaders/softmax/variants.h"
#include "vulkan/vk.h"

/* Mirrors rows.comp's push constants. */
typedef struct sm_pc {
    uint32_t gate, d, a, b;
    uint32_t k, rows, node, sref;
    uint32_t ne[4], sd[4], sa[4], sb[4]; /* sb[0]: dloss ref for CE_BWD */
    uint32_t lne[4], lst[4];
} sm_pc;

_Static_assert(sizeof(sm_pc) <= VK_PC_BYTES, "rows.comp's push constants");

static void put4(uint32_t out[4], const int64_t v[4])
{
    for (int d = 0; d < 4; d++)
        out[d] = (uint32_t)v[d];
}

static ex_status go(vk_exec *e, int variant, const sm_pc *pc)
{
    return vk_dispatch(e, VK_SH_softmax_rows, variant, pc, sizeof *pc, vk_groups(pc->rows, 1), 1,
                       1);
}

/* SOFTMAX, LOG_SOFTMAX (x) and their backwards (y, dy): every operand of dst's shape. */
static ex_status rowwise(vk_exec *e, const ex_node_exec *n, int nsrc, int variant)
{
    int64_t ne[4], st[3][4];
    char why[96];
    ex_status r = ex_td_rows_of(n, nsrc, ne, st, why, sizeof why);
    if (r != EX_OK)
        return vk_fail(e, r, "%s", why);
    int64_t *sd = st[0], (*s)[4] = st + 1;
    for (int i = 0; i <= nsrc; i++)
        if (!vk_fits32(ne, st[i]))
            return vk_fail(e, EX_ERR_UNSUPPORTED, "%s is beyond 32-bit indexing",
                           i ? "a source" : "dst");
    sm_pc pc;
    memset(&pc, 0, sizeof pc);
    pc.d = vk_ref(e, &n->dst);
    pc.a = vk_ref(e, &n->src[0]);
    pc.b = nsrc > 1 ? vk_ref(e, &n->src[1]) : VK_NOREF;
    pc.k = (uint32_t)ne[3];
    pc.rows = (uint32_t)(ne[0] * ne[1] * ne[2]);
    put4(pc.ne, ne);
    put4(pc.sd, sd);
    put4(pc.sa, s[0]);
    if (nsrc > 1)
        put4(pc.sb, s[1]);
    return go(e, variant, &pc);
}

/* Logits [.., K] as rows and the i32 labels read by row index. */
static ex_status ce_setup(vk_exec *e, const ex_node_exec *n, int nsrc, sm_pc *pc)
{
    int64_t ne[4], st[4], lne[4], lst[4], rows = 0;
    char why[96];
    ex_status r = ex_td_ce_of(n, nsrc, ne, st, &rows, why, sizeof why);
    if (r != EX_OK)
        return vk_fail(e, r, "%s", why);
    const ex_tdesc *x = &n->src[0], *l = &n->src[1];
    ex_td_shape4(l, lne, lst);
    if (!vk_fits32(ne, st) || !vk_fits32(lne, lst))
        return vk_fail(e, EX_ERR_UNSUPPORTED, "logits are beyond 32-bit indexing");
    memset(pc, 0, sizeof *pc);
    pc->a = vk_ref(e, x);
    pc->b = vk_ref_small(e, l);
    pc->k = (uint32_t)ne[3];
    pc->rows = (uint32_t)rows;
    pc->node = (uint32_t)e->index;
    put4(pc->ne, ne);
    put4(pc->sa, st);
    put4(pc->lne, lne);
    put4(pc->lst, lst);
    return vk_status_ref(e, &pc->sref);
}

static ex_status scalar_dst(vk_exec *e, const ex_tdesc *d)
{
    if (d->ndim < 1 || d->ndim > 4 || d->dtype != EX_F32 || ex_td_numel(d) != 1)
        return vk_fail(e, EX_ERR_SHAPE, "dst must be one f32 element");
    return EX_OK;
}

/* Per-row values into scratch, then their mean (loss) or sum (count) into dst. */
static ex_status per_row(vk_exec *e, const ex_node_exec *n, int variant)
{
    sm_pc pc;
    ex_status st = ce_setup(e, n, 2, &pc);
    if (st == EX_OK)
        st = scalar_dst(e, &n->dst);
    uint32_t rows_ref = 0;
    if (st == EX_OK)
        st = vk_scratch(e, (uint64_t)pc.rows * 4, &rows_ref);
    if (st != EX_OK)
        return st;
    pc.d = rows_ref;
    st = go(e, variant, &pc);
    if (st != EX_OK)
        return st;
    vk_barrier(e);
    vk_bind_reset(e);
    rows_ref = vk_ref_rebind_read(e, rows_ref, 0);
    return vk_reduce_flat(e, rows_ref, pc.rows, 1, vk_ref(e, &n->dst),
                          variant == SM_CE_ROWS ? RED_MEAN : RED_SUM);
}

static ex_status ce_bwd(vk_exec *e, const ex_node_exec *n)
{
    sm_pc pc;
    ex_status st = ce_setup(e, n, 3, &pc);
    if (st != EX_OK)
        return st;
    const ex_tdesc *dl = &n->src[2];
    int64_t ne[4], sd[4];
    char why[96];
    for (int d = 0; d < 4; d++)
        ne[d] = (int64_t)pc.ne[d];
    if ((st = ex_td_ce_bwd_of(n, ne, sd, why, sizeof why)) != EX_OK)
        return vk_fail(e, st, "%s", why);
    if (!vk_fits32(ne, sd))
        return vk_fail(e, EX_ERR_UNSUPPORTED, "dst is beyond 32-bit indexing");
    pc.d = vk_ref(e, &n->dst);
    put4(pc.sd, sd);
    pc.sb[0] = vk_ref_small(e, dl);
    return go(e, SM_CE_BWD, &pc);
}

ex_status vk_run_softmax(vk_exec *e, const ex_node_exec *n)
{
    switch (n->op) {
    case EX_OP_SOFTMAX: return rowwise(e, n, 1, SM_SOFTMAX);
    case EX_OP_LOG_SOFTMAX: return rowwise(e, n, 1, SM_LOG_SOFTMAX);
    case EX_OP_SOFTMAX_BWD: return rowwise(e, n, 2, SM_SOFTMAX_BWD);
    case EX_OP_LOG_SOFTMAX_BWD: return rowwise(e, n, 2, SM_LOG_SOFTMAX_BWD);
    case EX_OP_CROSS_ENTROPY: return per_row(e, n, SM_CE_ROWS);
    case EX_OP_CROSS_ENTROPY_BWD: return ce_bwd(e, n);
    case EX_OP_ACCURACY: return per_row(e, n, SM_ACC_ROWS);
    default: return vk_fail(e, EX_ERR_UNSUPPORTED, "not a softmax-family op");
    }
}
