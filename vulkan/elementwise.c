/* Element-wise ops: ADD, SUB, MUL, SCALE, AXPY, RELU, RELU_BWD, FILL, COPY, DROP_PATH,
 * all through shaders/elementwise/ew.comp with the op as its variant. Every source is
 * aligned to dst's shape padded to 4 dims (a size-1 dim broadcasts by stride 0), checked
 * as the CPU backend checks it. Each invocation reads its elements before it writes its
 * own, so dst == src[0] (in place) is safe. */
#include <string.h>

#include "shaders/elementwise/variants.h"
#include "vulkan/vk.h"

/* Mirrors ew.comp's push constants. */
typedef struct ew_pc {
    uint32_t gate, d, a, b;
    uint32_t ne[4], sd[4], sa[4], sb[4], ane[4];
    uint32_t bits, n, k0, k1;
    uint32_t pdim, cst, r0, r1;
} ew_pc;

_Static_assert(sizeof(ew_pc) <= VK_PC_BYTES, "ew.comp's push constants");

static void put4(uint32_t out[4], const int64_t v[4])
{
    for (int d = 0; d < 4; d++)
        out[d] = (uint32_t)v[d];
}

static ex_status need(vk_exec *e, const ex_tdesc *t, ex_dtype dt, const char *what)
{
    if (t->dtype != dt)
        return vk_fail(e, EX_ERR_ARG, "%s must be %s", what, dt == EX_F32 ? "f32" : "i32");
    return EX_OK;
}

/* Checks the source count, aligns dst and the first nalign sources into pc. */
static ex_status setup(vk_exec *e, const ex_node_exec *n, int nsrc, int nalign, ew_pc *pc)
{
    int64_t ne[4], st[3][4];
    memset(pc, 0, sizeof *pc);
    char why[160];
    ex_status s = ex_td_ew_of(n, nsrc, nalign, ne, st, why, sizeof why);
    if (s != EX_OK)
        return vk_fail(e, s, "%s", why);
    for (int i = 0; i <= nalign; i++)
        if (!vk_fits32(ne, st[i]))
            return vk_fail(e, EX_ERR_UNSUPPORTED, "operand %d is beyond 32-bit indexing", i);
    put4(pc->ne, ne);
    put4(pc->sd, st[0]);
    pc->n = (uint32_t)ex_td_numel(&n->dst);
    pc->d = vk_ref(e, &n->dst);
    pc->a = nalign > 0 ? vk_ref(e, &n->src[0]) : VK_NOREF;
    pc->b = nalign > 1 ? vk_ref(e, &n->src[1]) : VK_NOREF;
    if (nalign > 0)
        put4(pc->sa, st[1]);
    if (nalign > 1)
        put4(pc->sb, st[2]);
    return EX_OK;
}

/* Whether ew.comp takes 4 neighbours of a row an invocation (its main()). */
static int ew_quads(int variant, const ew_pc *pc)
{
    return variant != EW_COPY_RESHAPE && variant != EW_DROP_PATH && pc->ne[3] % 4 == 0;
}

/* Merges the dims every operand steps over as one (ex_td_merge_dims), so that a dense
 * tensor is one row: its rows then hold a multiple of 4 elements wherever its element
 * count does (14x14 and 7x7 planes took one invocation an element, each decoding 4
 * coordinates), and the index arithmetic is shorter. Not for COPY_RESHAPE and DROP_PATH,
 * whose coordinates mean something (the source's shape, the sample). */
static void ew_collapse(int variant, ew_pc *pc)
{
    if (variant == EW_COPY_RESHAPE || variant == EW_DROP_PATH)
        return;
    vk_merge_dims3(pc->ne, pc->sd, pc->sa, pc->sb);
}

static ex_status go(vk_exec *e, int variant, ew_pc *pc)
{
    ew_collapse(variant, pc);
    uint32_t items = ew_quads(variant, pc) ? pc->n / 4 : pc->n;
    return vk_dispatch(e, VK_SH_elementwise_ew, variant, pc, sizeof *pc, vk_groups(items, 128), 1,
                       1);
}

static ex_status f32_op(vk_exec *e, const ex_node_exec *n, int nsrc, int variant)
{
    ew_pc pc;
    ex_status st = setup(e, n, nsrc, nsrc, &pc);
    if (st == EX_OK)
        st = need(e, &n->dst, EX_F32, "dst");
    for (int i = 0; i < nsrc && st == EX_OK; i++)
        st = need(e, &n->src[i], EX_F32, "every source");
    memcpy(&pc.bits, &n->fp[0], 4);
    return st == EX_OK ? go(e, variant, &pc) : st;
}

static ex_status fill(vk_exec *e, const ex_node_exec *n)
{
    ew_pc pc;
    ex_status st = setup(e, n, 0, 0, &pc);
    if (st != EX_OK)
        return st;
    int unwritten = ex_td_fill_unwritten(n);
    if (unwritten)
        return unwritten < 0 ? vk_fail(e, EX_ERR_ARG, "ip0 %d, expected 0 or 1", n->ip[0]) : EX_OK;
    if (n->dst.dtype == EX_F32) {
        memcpy(&pc.bits, &n->fp[0], 4);
    } else if (n->dst.dtype == EX_I32) {
        int32_t v = ex_td_fill_i32(n->fp[0]);
        memcpy(&pc.bits, &v, 4);
    } else {
        return vk_fail(e, EX_ERR_ARG, "dst must be f32 or i32");
    }
    return go(e, EW_FILL, &pc);
}

/* A copy between shapes of one element count pairs elements by row-major index. */
static ex_status copy(vk_exec *e, const ex_node_exec *n)
{
    if (n->nsrc != 1 || n->src == NULL)
        return vk_fail(e, EX_ERR_ARG, "%d sources, expected 1", n->nsrc);
    const ex_tdesc *s = &n->src[0];
    if (n->dst.ndim < 1 || n->dst.ndim > 4 || !n->dst.buf || s->ndim < 1 || s->ndim > 4 || !s->buf)
        return vk_fail(e, EX_ERR_ARG, "bad dst or source");
    if (n->dst.dtype != s->dtype || (s->dtype != EX_F32 && s->dtype != EX_I32))
        return vk_fail(e, EX_ERR_ARG, "source and dst must both be f32 or both i32");
    int64_t ne[4], st4[4], sne[4], sst[4];
    ex_td_shape4(&n->dst, ne, st4);
    if (ex_td_align(s, ne, sst)) {
        ew_pc pc;
        ex_status st = setup(e, n, 1, 1, &pc);
        return st == EX_OK ? go(e, EW_COPY, &pc) : st;
    }
    if (ex_td_numel(s) != ex_td_numel(&n->dst))
        return vk_fail(e, EX_ERR_SHAPE, "%lld elements into %lld", (long long)ex_td_numel(s),
                       (long long)ex_td_numel(&n->dst));
    ew_pc pc;
    ex_status st = setup(e, n, 1, 0, &pc);
    if (st != EX_OK)
        return st;
    ex_td_shape4(s, sne, sst);
    if (!vk_fits32(sne, sst))
        return vk_fail(e, EX_ERR_UNSUPPORTED, "source is beyond 32-bit indexing");
    put4(pc.ane, sne);
    put4(pc.sa, sst);
    pc.a = vk_ref(e, s);
    return go(e, EW_COPY_RESHAPE, &pc);
}

static ex_status drop_path(vk_exec *e, const ex_node_exec *n)
{
    ew_pc pc;
    ex_status st = setup(e, n, 2, 1, &pc);
    if (st == EX_OK)
        st = need(e, &n->dst, EX_F32, "dst");
    if (st == EX_OK)
        st = need(e, &n->src[0], EX_F32, "x");
    if (st == EX_OK)
        st = need(e, &n->src[1], EX_I32, "counter");
    if (st != EX_OK)
        return st;
    const ex_tdesc *ct = &n->src[1];
    if (!ex_td_counter_ok(ct))
        return vk_fail(e, EX_ERR_SHAPE, "counter needs 2 elements");
    pc.b = vk_ref_small(e, ct);
    pc.cst = (uint32_t)ex_td_at(ct, 1);
    memcpy(&pc.bits, &n->fp[0], 4);
    pc.k0 = (uint32_t)n->ip[0];
    pc.k1 = (uint32_t)n->ip[1];
    pc.pdim = (uint32_t)(4 - n->dst.ndim);
    return go(e, EW_DROP_PATH, &pc);
}

ex_status vk_run_elementwise(vk_exec *e, const ex_node_exec *n)
{
    switch (n->op) {
    case EX_OP_ADD: return f32_op(e, n, 2, EW_ADD);
    case EX_OP_SUB: return f32_op(e, n, 2, EW_SUB);
    case EX_OP_MUL: return f32_op(e, n, 2, EW_MUL);
    case EX_OP_SCALE: return f32_op(e, n, 1, EW_SCALE);
    case EX_OP_AXPY: return f32_op(e, n, 2, EW_AXPY);
    case EX_OP_RELU: return f32_op(e, n, 1, EW_RELU);
    case EX_OP_RELU_BWD: return f32_op(e, n, 2, EW_RELU_BWD);
    case EX_OP_FILL: return fill(e, n);
    case EX_OP_COPY: return copy(e, n);
    case EX_OP_DROP_PATH: return drop_path(e, n);
    default: return vk_fail(e, EX_ERR_UNSUPPORTED, "not an element-wise op");
    }
}
