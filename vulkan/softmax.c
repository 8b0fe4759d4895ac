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

static int align_f32(const ex_tdesc *t, const int64_t ne[4], int64_t st[4])
{
    return t->dtype == EX_F32 && ex_td_align(t, ne, st) && vk_fits32(ne, st);
}

static ex_status go(vk_exec *e, int variant, const sm_pc *pc)
{
    return vk_dispatch(e, VK_SH_softmax_rows, variant, pc, sizeof *pc, vk_groups(pc->rows, 1), 1,
                       1);
}

/* SOFTMAX, LOG_SOFTMAX (x) and their backwards (y, dy): every operand of dst's shape. */
static ex_status rowwise(vk_exec *e, const ex_node_exec *n, int nsrc, int variant)
{
    if (n->nsrc != nsrc || n->src == NULL)
        return vk_fail(e, EX_ERR_ARG, "%d sources, expected %d", n->nsrc, nsrc);
    if (n->dst.ndim < 1 || n->dst.ndim > 4 || n->dst.dtype != EX_F32)
        return vk_fail(e, EX_ERR_ARG, "dst must be f32 with 1 to 4 dims");
    int64_t ne[4], sd[4], s[2][4];
    ex_td_shape4(&n->dst, ne, sd);
    for (int d = 0; d < 4; d++)
        if (ne[d] < 1)
            return vk_fail(e, EX_ERR_SHAPE, "dst has an empty dim");
    if (!ex_td_dst_ok(ne, sd))
        return vk_fail(e, EX_ERR_ARG, "dst broadcasts (stride 0)");
    if (!vk_fits32(ne, sd))
        return vk_fail(e, EX_ERR_UNSUPPORTED, "dst is beyond 32-bit indexing");
    for (int i = 0; i < nsrc; i++)
        if (!align_f32(&n->src[i], ne, s[i]))
            return vk_fail(e, EX_ERR_SHAPE, "source %d is not f32 of dst's shape", i);
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
    if (n->nsrc != nsrc || n->src == NULL)
        return vk_fail(e, EX_ERR_ARG, "%d sources, expected %d", n->nsrc, nsrc);
    const ex_tdesc *x = &n->src[0], *l = &n->src[1];
    if (x->ndim < 1 || x->ndim > 4 || x->dtype != EX_F32)
        return vk_fail(e, EX_ERR_ARG, "logits must be f32 with 1 to 4 dims");
    if (l->ndim < 1 || l->ndim > 4 || l->dtype != EX_I32)
        return vk_fail(e, EX_ERR_ARG, "labels must be i32");
    int64_t ne[4], st[4], lne[4], lst[4];
    ex_td_shape4(x, ne, st);
    ex_td_shape4(l, lne, lst);
    int64_t rows = ne[0] * ne[1] * ne[2];
    if (ne[3] < 1 || rows < 1)
        return vk_fail(e, EX_ERR_SHAPE, "logits have no elements");
    if (ex_td_numel(l) != rows)
        return vk_fail(e, EX_ERR_SHAPE, "%lld labels for %lld rows", (long long)ex_td_numel(l),
                       (long long)rows);
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
    if (dl->ndim < 1 || dl->ndim > 4 || dl->dtype != EX_F32 || ex_td_numel(dl) != 1)
        return vk_fail(e, EX_ERR_SHAPE, "dloss must be one f32 element");
    if (n->dst.ndim != n->src[0].ndim || n->dst.dtype != EX_F32)
        return vk_fail(e, EX_ERR_SHAPE, "dst must be f32 like logits");
    int64_t ne[4], sd[4];
    ex_td_shape4(&n->dst, ne, sd);
    for (int d = 0; d < 4; d++)
        if (ne[d] != (int64_t)pc.ne[d] || (ne[d] > 1 && sd[d] == 0))
            return vk_fail(e, EX_ERR_SHAPE, "dst must have logits' shape");
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
