/* Reductions: SUM, MEAN and MAX over a mask of axes with kept dims (reduce/reduce.comp,
 * one workgroup per output, a fixed-order tree: bitwise repeatable), and MAX_BWD
 * (reduce/max_bwd.comp, element-wise). Checks mirror the CPU backend's. */
#include <string.h>

#include "shaders/reduce/variants.h"
#include "vulkan/vk.h"

/* Mirrors reduce.comp's push constants. */
typedef struct red_pc {
    uint32_t gate, x, d, m;
    uint32_t nout, r0, r1, r2;
    uint32_t kne[4], kxs[4], kds[4];
    uint32_t rne[4], rxs[4];
} red_pc;

/* Mirrors max_bwd.comp's push constants. */
typedef struct mb_pc {
    uint32_t gate, d, x, y;
    uint32_t dy, n, r0, r1;
    uint32_t ne[4], sd[4], sx[4], sy[4], sdy[4];
} mb_pc;

_Static_assert(sizeof(red_pc) <= VK_PC_BYTES, "reduce.comp's push constants");
_Static_assert(sizeof(mb_pc) <= VK_PC_BYTES, "max_bwd.comp's push constants");

/* Kept dims fill kne/kxs/kds from the right, reduced ones rne/rxs; unused entries are
 * size 1, stride 0. */
static ex_status red_setup(vk_exec *e, const ex_node_exec *n, red_pc *pc)
{
    ex_td_reduce r;
    char why[256];
    ex_status st = ex_td_reduce_of(n, &r, why, sizeof why);
    if (st != EX_OK)
        return vk_fail(e, st, "%s", why);
    const ex_tdesc *x = &n->src[0], *d = &n->dst;
    const int64_t *kne = r.kne, *kxs = r.kxs, *kds = r.kds, *rne = r.rne, *rxs = r.rxs;
    int nk = r.nk, nr = r.nr;
    int64_t nout = r.nout, m = r.m;
    if (!vk_fits32(kne, kxs) || !vk_fits32(kne, kds) || !vk_fits32(rne, rxs))
        return vk_fail(e, EX_ERR_UNSUPPORTED, "x is beyond 32-bit indexing");
    memset(pc, 0, sizeof *pc);
    /* coords4() walks row-major with the last entry fastest: shift the lists right */
    for (int k = 0; k < 4; k++) {
        int ki = k - (4 - nk), ri = k - (4 - nr);
        pc->kne[k] = ki >= 0 ? (uint32_t)kne[ki] : 1;
        pc->kxs[k] = ki >= 0 ? (uint32_t)kxs[ki] : 0;
        pc->kds[k] = ki >= 0 ? (uint32_t)kds[ki] : 0;
        pc->rne[k] = ri >= 0 ? (uint32_t)rne[ri] : 1;
        pc->rxs[k] = ri >= 0 ? (uint32_t)rxs[ri] : 0;
    }
    pc->x = vk_ref(e, x);
    pc->d = vk_ref(e, d);
    pc->m = (uint32_t)m;
    pc->nout = (uint32_t)nout;
    return EX_OK;
}

static ex_status reduce(vk_exec *e, const ex_node_exec *n, int variant)
{
    red_pc pc;
    ex_status st = red_setup(e, n, &pc);
    if (st != EX_OK)
        return st;
    return vk_dispatch(e, VK_SH_reduce_reduce, variant, &pc, sizeof pc, vk_groups(pc.nout, 1), 1,
                       1);
}

static int align_f32(const ex_tdesc *t, const int64_t ne[4], int64_t st[4])
{
    return t->dtype == EX_F32 && ex_td_align(t, ne, st) && vk_fits32(ne, st);
}

static ex_status max_bwd(vk_exec *e, const ex_node_exec *n)
{
    if (n->nsrc != 3 || n->src == NULL)
        return vk_fail(e, EX_ERR_ARG, "%d sources, expected 3", n->nsrc);
    if (n->dst.ndim < 1 || n->dst.ndim > 4 || n->dst.dtype != EX_F32)
        return vk_fail(e, EX_ERR_ARG, "dst must be f32 with 1 to 4 dims");
    int64_t ne[4], s[4][4]; /* dst, x, y, dy */
    ex_td_shape4(&n->dst, ne, s[0]);
    if (!ex_td_dst_ok(ne, s[0]) || !vk_fits32(ne, s[0]))
        return vk_fail(e, EX_ERR_ARG, "dst broadcasts (stride 0) or is beyond 32-bit indexing");
    for (int i = 0; i < 3; i++)
        if (!align_f32(&n->src[i], ne, s[1 + i]))
            return vk_fail(e, EX_ERR_SHAPE, "source %d is not f32 of dst's shape", i);
    mb_pc pc;
    memset(&pc, 0, sizeof pc);
    pc.d = vk_ref(e, &n->dst);
    pc.x = vk_ref(e, &n->src[0]);
    pc.y = vk_ref(e, &n->src[1]);
    pc.dy = vk_ref(e, &n->src[2]);
    pc.n = (uint32_t)ex_td_numel(&n->dst);
    for (int d = 0; d < 4; d++) {
        pc.ne[d] = (uint32_t)ne[d];
        pc.sd[d] = (uint32_t)s[0][d];
        pc.sx[d] = (uint32_t)s[1][d];
        pc.sy[d] = (uint32_t)s[2][d];
        pc.sdy[d] = (uint32_t)s[3][d];
    }
    return vk_dispatch(e, VK_SH_reduce_max_bwd, 0, &pc, sizeof pc, vk_groups(pc.n, 128), 1, 1);
}

ex_status vk_reduce_all(vk_exec *e, const ex_tdesc *x, uint32_t xref, uint32_t dst, int variant)
{
    int64_t ne[4], st[4];
    ex_td_shape4(x, ne, st);
    if (!vk_fits32(ne, st))
        return vk_fail(e, EX_ERR_UNSUPPORTED, "a source is beyond 32-bit indexing");
    red_pc pc;
    memset(&pc, 0, sizeof pc);
    pc.x = xref;
    pc.d = dst;
    pc.m = (uint32_t)ex_td_numel(x);
    pc.nout = 1;
    for (int k = 0; k < 4; k++) {
        pc.kne[k] = 1;
        pc.rne[k] = (uint32_t)ne[k];
        pc.rxs[k] = (uint32_t)st[k];
    }
    return vk_dispatch(e, VK_SH_reduce_reduce, variant, &pc, sizeof pc, 1, 1, 1);
}

ex_status vk_run_reduce(vk_exec *e, const ex_node_exec *n)
{
    switch (n->op) {
    case EX_OP_SUM: return reduce(e, n, RED_SUM);
    case EX_OP_MEAN: return reduce(e, n, RED_MEAN);
    case EX_OP_MAX: return reduce(e, n, RED_MAX);
    case EX_OP_MAX_BWD: return max_bwd(e, n);
    default: return vk_fail(e, EX_ERR_UNSUPPORTED, "not a reduction");
    }
}

ex_status vk_reduce_flat(vk_exec *e, uint32_t src, uint32_t n, uint32_t stride, uint32_t dst,
                         int variant)
{
    red_pc pc;
    memset(&pc, 0, sizeof pc);
    pc.x = src;
    pc.d = dst;
    pc.m = n;
    pc.nout = 1;
    for (int k = 0; k < 4; k++) {
        pc.kne[k] = 1;
        pc.rne[k] = k == 3 ? n : 1;
        pc.rxs[k] = k == 3 ? stride : 0;
    }
    return vk_dispatch(e, VK_SH_reduce_reduce, variant, &pc, sizeof pc, 1, 1, 1);
}
