/* Optimizer ops: SGD (with CLIP's scaling folded in when the norm is a 5th source), ADAM
 * and CLIP through optim/update.comp (element-wise, in place:
 * dst must be src[0], as docs/ops.md says), GRAD_NORM as a sum of squares per tensor
 * into scratch (reduce/reduce.comp, one fixed-order tree each) and the square root of
 * their sum in order. Checks mirror the CPU backend's. */
#include <string.h>

#include "shaders/optim/variants.h"
#include "shaders/reduce/variants.h"
#include "vulkan/vk.h"

/* Mirrors update.comp's push constants. */
typedef struct opt_pc {
    uint32_t gate, p, g, m;
    uint32_t v, sc, sc1, n;
    float f[4];
    uint32_t ne[4], sp[4], sg[4], sm[4];
    uint32_t sv[4];
} opt_pc;

_Static_assert(sizeof(opt_pc) <= VK_PC_BYTES, "update.comp's push constants");

static void put4(uint32_t out[4], const int64_t v[4])
{
    for (int d = 0; d < 4; d++)
        out[d] = (uint32_t)v[d];
}

static int same(const ex_tdesc *a, const ex_tdesc *b)
{
    if (a->buf != b->buf || a->offset != b->offset || a->ndim != b->ndim)
        return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->ne[d] != b->ne[d] || a->st[d] != b->st[d])
            return 0;
    return 1;
}

/* The node checked in core (ex_td_update_of; bit k of written: operand k, 0 dst and 1 + i
 * source i, is updated); here dst must be src[0] and every source within 32-bit indexing. */
static ex_status setup(vk_exec *e, const ex_node_exec *n, int nsrc, int nalign, unsigned written,
                       opt_pc *pc)
{
    int64_t ne[4], st[5][4];
    char why[96];
    ex_status r = ex_td_update_of(n, nsrc, nalign, written, ne, st, why, sizeof why);
    if (r != EX_OK)
        return vk_fail(e, r, "%s", why);
    int64_t(*s)[4] = st + 1; /* the sources' strides */
    for (int i = 0; i < nalign; i++)
        if (!vk_fits32(ne, s[i]))
            return vk_fail(e, EX_ERR_UNSUPPORTED, "source %d is beyond 32-bit indexing", i);
    if (!same(&n->dst, &n->src[0]))
        return vk_fail(e, EX_ERR_ARG, "dst must be src[0] (the update is in place)");
    memset(pc, 0, sizeof *pc);
    put4(pc->ne, ne);
    pc->n = (uint32_t)ex_td_numel(&n->dst);
    pc->p = vk_ref(e, &n->src[0]);
    put4(pc->sp, s[0]);
    if (nalign > 1) { /* CLIP (nalign 1) reads p as its g */
        pc->g = vk_ref(e, &n->src[1]);
        put4(pc->sg, s[1]);
    }
    if (nalign > 2) {
        pc->m = vk_ref(e, &n->src[2]);
        put4(pc->sm, s[2]);
    }
    if (nalign > 3) {
        pc->v = vk_ref(e, &n->src[3]);
        put4(pc->sv, s[3]);
    }
    return EX_OK;
}

/* A small f32 source read by logical index (lr, hyper, norm). */
static ex_status scalars(vk_exec *e, const ex_tdesc *t, int count, opt_pc *pc)
{
    if (!ex_td_valid(t, EX_F32) || ex_td_numel(t) != count)
        return vk_fail(e, EX_ERR_SHAPE, "expected an f32 source of %d element(s)", count);
    pc->sc = vk_ref_small(e, t);
    pc->sc1 = count > 1 ? (uint32_t)ex_td_at(t, 1) : 0;
    return EX_OK;
}

static ex_status go(vk_exec *e, int variant, const opt_pc *pc)
{
    return vk_dispatch(e, VK_SH_optim_update, variant, pc, sizeof *pc, vk_groups(pc->n, 128), 1, 1);
}

static ex_status sgd(vk_exec *e, const ex_node_exec *n)
{
    opt_pc pc;
    int clipped = n->nsrc == 5;
    char why[96];
    ex_status st = ex_td_sgd_check(n, why, sizeof why);
    if (st != EX_OK)
        return vk_fail(e, st, "%s", why);
    st = setup(e, n, n->nsrc, 3, 1u | 1u << 3, &pc);
    if (st == EX_OK)
        st = scalars(e, &n->src[3], 1, &pc);
    if (st != EX_OK)
        return st;
    if (clipped) { /* the norm (read only) through v, max_norm in f2 */
        pc.v = vk_ref_small(e, &n->src[4]);
        pc.f[2] = n->fp[2];
    }
    pc.f[0] = n->fp[0];
    pc.f[1] = n->fp[1];
    if (clipped)
        return go(e, n->ip[0] ? OPT_SGD_NESTEROV_CLIP : OPT_SGD_CLIP, &pc);
    return go(e, n->ip[0] ? OPT_SGD_NESTEROV : OPT_SGD, &pc);
}

static ex_status adam(vk_exec *e, const ex_node_exec *n)
{
    opt_pc pc;
    ex_status st = setup(e, n, 5, 4, 1u | 1u << 3 | 1u << 4, &pc);
    if (st == EX_OK)
        st = scalars(e, &n->src[4], 2, &pc);
    if (st != EX_OK)
        return st;
    memcpy(pc.f, n->fp, sizeof pc.f);
    return go(e, OPT_ADAM, &pc);
}

static ex_status clip(vk_exec *e, const ex_node_exec *n)
{
    opt_pc pc;
    ex_status st = setup(e, n, 2, 1, 1u, &pc);
    if (st != EX_OK)
        return st;
    pc.g = pc.p;
    memcpy(pc.sg, pc.sp, sizeof pc.sg);
    st = scalars(e, &n->src[1], 1, &pc);
    if (st != EX_OK)
        return st;
    pc.f[0] = n->fp[0];
    return go(e, OPT_CLIP, &pc);
}

/* One sum of squares per tensor into a word of scratch of its own, VK_ALIGN bytes apart
 * so that no two bindings share bytes (a binding starts at the device's offset
 * alignment): the dispatches need no barrier between them. Then the square root of their
 * sum in order. */
static ex_status grad_norm(vk_exec *e, const ex_node_exec *n)
{
    char why[96];
    ex_status st = ex_td_grad_norm_check(n, why, sizeof why);
    if (st != EX_OK)
        return vk_fail(e, st, "%s", why);
    uint64_t at = e->scratch_at;
    uint32_t part = 0;
    st = vk_scratch(e, VK_ALIGN * (uint64_t)n->nsrc, &part);
    for (int i = 0; i < n->nsrc && st == EX_OK; i++) {
        vk_bind_reset(e);
        uint32_t p = vk_scratch_ref(e, at + VK_ALIGN * (uint64_t)i, 4, VK_WRITE);
        st = vk_reduce_all(e, &n->src[i], vk_ref(e, &n->src[i]), p, RED_SUMSQ);
    }
    if (st != EX_OK)
        return st;
    vk_barrier(e);
    vk_bind_reset(e);
    uint32_t p = vk_scratch_ref(e, at, VK_ALIGN * (uint64_t)(n->nsrc - 1) + 4, VK_READ);
    return vk_reduce_flat(e, p, (uint32_t)n->nsrc, VK_ALIGN / 4, vk_ref(e, &n->dst), RED_SQRT_SUM);
}

ex_status vk_run_optim(vk_exec *e, const ex_node_exec *n)
{
    switch (n->op) {
    case EX_OP_SGD: return sgd(e, n);
    case EX_OP_ADAM: return adam(e, n);
    case EX_OP_CLIP: return clip(e, n);
    case EX_OP_GRAD_NORM: return grad_norm(e, n);
    default: return vk_fail(e, EX_ERR_UNSUPPORTED, "not an optimizer op");
    }
}
