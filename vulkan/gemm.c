/* GEMM-shaped ops: MATMUL, LINEAR, PWCONV, PWCONV_BWD_FILTER, all through one tiled
 * shared-memory shader (gemm/gemm.comp) sized to the portable limits. Each op only says
 * how its tensors map onto C[z][i][j] = sum_k A[z][i][k] B[z][k][j]: strides for every
 * level of i, j and k, so transposed views and strided samples need no copy. Checks
 * mirror the CPU backend's. */
#include <string.h>

#include "vulkan/vk.h"

/* Mirrors gemm.comp's push constants. */
typedef struct gm_pc {
    uint32_t gate, a, b, c;
    uint32_t bias, bias_st, m, n;
    uint32_t k, k1, k0, j0;
    uint32_t a_i, a_k2, a_k1, a_k0;
    uint32_t b_k2, b_k1, b_k0, b_j1;
    uint32_t b_j0, c_i, c_j1, c_j0;
    uint32_t za, zb, zc, r0;
} gm_pc;

_Static_assert(sizeof(gm_pc) <= VK_PC_BYTES, "gemm.comp's push constants");

/* Sizes and strides as the shader takes them (the host checks 32-bit fit). */
typedef struct gm_geom {
    int64_t m, n, k, k1, k0, j0, batch;
    int64_t a_i, a_k2, a_k1, a_k0, b_k2, b_k1, b_k0, b_j1, b_j0, c_i, c_j1, c_j0, za, zb, zc;
} gm_geom;

static int fits(const gm_geom *g)
{
    const int64_t v[] = {g->m,    g->n,    g->k,    g->k1,   g->k0,   g->j0,   g->batch, g->a_i,
                         g->a_k2, g->a_k1, g->a_k0, g->b_k2, g->b_k1, g->b_k0, g->b_j1,  g->b_j0,
                         g->c_i,  g->c_j1, g->c_j0, g->za,   g->zb,   g->zc};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        if (v[i] < 0 || v[i] > INT32_MAX)
            return 0;
    return g->m * g->k <= INT32_MAX && g->k * g->n <= INT32_MAX;
}

static ex_status run_refs(vk_exec *e, const gm_geom *g, uint32_t a, uint32_t b, uint32_t c,
                          const ex_tdesc *bias)
{
    if (!fits(g))
        return vk_fail(e, EX_ERR_UNSUPPORTED, "operands are beyond 32-bit indexing");
    int64_t gx = (g->n + 31) / 32, gy = (g->m + 31) / 32;
    if (gx > VK_MAX_GROUPS || gy > VK_MAX_GROUPS || g->batch > VK_MAX_GROUPS)
        return vk_fail(e, EX_ERR_UNSUPPORTED, "a %lldx%lld product in %lld batches is too large",
                       (long long)g->m, (long long)g->n, (long long)g->batch);
    gm_pc pc = {.a = a,
                .b = b,
                .c = c,
                .bias = VK_NOREF,
                .m = (uint32_t)g->m,
                .n = (uint32_t)g->n,
                .k = (uint32_t)g->k,
                .k1 = (uint32_t)g->k1,
                .k0 = (uint32_t)g->k0,
                .j0 = (uint32_t)g->j0,
                .a_i = (uint32_t)g->a_i,
                .a_k2 = (uint32_t)g->a_k2,
                .a_k1 = (uint32_t)g->a_k1,
                .a_k0 = (uint32_t)g->a_k0,
                .b_k2 = (uint32_t)g->b_k2,
                .b_k1 = (uint32_t)g->b_k1,
                .b_k0 = (uint32_t)g->b_k0,
                .b_j1 = (uint32_t)g->b_j1,
                .b_j0 = (uint32_t)g->b_j0,
                .c_i = (uint32_t)g->c_i,
                .c_j1 = (uint32_t)g->c_j1,
                .c_j0 = (uint32_t)g->c_j0,
                .za = (uint32_t)g->za,
                .zb = (uint32_t)g->zb,
                .zc = (uint32_t)g->zc};
    if (bias) {
        pc.bias = vk_ref(e, bias);
        pc.bias_st = (uint32_t)bias->st[0];
    }
    return vk_dispatch(e, VK_SH_gemm_gemm, 0, &pc, sizeof pc, (uint32_t)(gx ? gx : 1),
                       (uint32_t)(gy ? gy : 1), (uint32_t)g->batch);
}

static ex_status run(vk_exec *e, const gm_geom *g, const ex_tdesc *a, const ex_tdesc *b,
                     const ex_tdesc *c, const ex_tdesc *bias)
{
    return run_refs(e, g, vk_ref(e, a), vk_ref(e, b), vk_ref(e, c), bias);
}

static ex_status check(vk_exec *e, const ex_node_exec *nd, int nsrc_min, int nsrc_max,
                       const int *ndims)
{
    if (nd->nsrc < nsrc_min || nd->nsrc > nsrc_max || nd->src == NULL)
        return vk_fail(e, EX_ERR_ARG, "unexpected source count %d", nd->nsrc);
    for (int i = 0; i <= nd->nsrc; i++) {
        const ex_tdesc *t = i < nd->nsrc ? &nd->src[i] : &nd->dst;
        if (t->dtype != EX_F32 || t->ndim != ndims[i] || !t->buf)
            return vk_fail(e, EX_ERR_ARG, "operand %d must be a %d-d f32 tensor", i, ndims[i]);
    }
    const ex_tdesc *d = &nd->dst;
    for (int k = 0; k < d->ndim; k++)
        if (d->ne[k] > 1 && d->st[k] == 0)
            return vk_fail(e, EX_ERR_ARG, "dst broadcasts (stride 0)");
    return EX_OK;
}

/* A plain matrix product: no batch, no split levels. */
static gm_geom plain(int64_t m, int64_t n, int64_t k)
{
    gm_geom g;
    memset(&g, 0, sizeof g);
    g.m = m;
    g.n = n;
    g.k = k;
    g.k1 = 1;
    g.k0 = k > 0 ? k : 1;
    g.j0 = n > 0 ? n : 1;
    g.batch = 1;
    return g;
}

static ex_status matmul(vk_exec *e, const ex_node_exec *n)
{
    static const int dims[3] = {2, 2, 2};
    ex_status st = check(e, n, 2, 2, dims);
    if (st != EX_OK)
        return st;
    const ex_tdesc *a = &n->src[0], *b = &n->src[1], *c = &n->dst;
    if (a->ne[1] != b->ne[0] || c->ne[0] != a->ne[0] || c->ne[1] != b->ne[1])
        return vk_fail(e, EX_ERR_SHAPE, "[%lld,%lld] x [%lld,%lld] -> [%lld,%lld]",
                       (long long)a->ne[0], (long long)a->ne[1], (long long)b->ne[0],
                       (long long)b->ne[1], (long long)c->ne[0], (long long)c->ne[1]);
    gm_geom g = plain(a->ne[0], b->ne[1], a->ne[1]);
    g.a_i = a->st[0];
    g.a_k0 = a->st[1];
    g.b_k0 = b->st[0];
    g.b_j0 = b->st[1];
    g.c_i = c->st[0];
    g.c_j0 = c->st[1];
    return run(e, &g, a, b, c, NULL);
}

static ex_status linear(vk_exec *e, const ex_node_exec *n)
{
    static const int dims[4] = {2, 2, 1, 2};
    static const int dims_nb[3] = {2, 2, 2};
    ex_status st = check(e, n, 2, 3, n->nsrc == 3 ? dims : dims_nb);
    if (st != EX_OK)
        return st;
    const ex_tdesc *x = &n->src[0], *w = &n->src[1], *y = &n->dst;
    int ok = x->ne[1] == w->ne[1] && y->ne[0] == x->ne[0] && y->ne[1] == w->ne[0];
    if (!ok || (n->nsrc == 3 && n->src[2].ne[0] != w->ne[0]))
        return vk_fail(e, EX_ERR_SHAPE, "x [%lld,%lld], w [%lld,%lld] -> [%lld,%lld]",
                       (long long)x->ne[0], (long long)x->ne[1], (long long)w->ne[0],
                       (long long)w->ne[1], (long long)y->ne[0], (long long)y->ne[1]);
    gm_geom g = plain(x->ne[0], w->ne[0], x->ne[1]);
    g.a_i = x->st[0];
    g.a_k0 = x->st[1];
    g.b_k0 = w->st[1]; /* B = w^T */
    g.b_j0 = w->st[0];
    g.c_i = y->st[0];
    g.c_j0 = y->st[1];
    return run(e, &g, x, w, y, n->nsrc == 3 ? &n->src[2] : NULL);
}

static ex_status pw_check(vk_exec *e, const ex_node_exec *nd, const ex_tdesc *x, const ex_tdesc *w,
                          const ex_tdesc *y)
{
    static const int fwd_dims[3] = {4, 2, 4}, filter_dims[3] = {4, 4, 2};
    ex_status st = check(e, nd, 2, 2, w == &nd->dst ? filter_dims : fwd_dims);
    if (st != EX_OK)
        return st;
    if (y->ne[0] != x->ne[0] || y->ne[2] != x->ne[2] || y->ne[3] != x->ne[3] ||
        w->ne[0] != y->ne[1] || w->ne[1] != x->ne[1])
        return vk_fail(e, EX_ERR_SHAPE,
                       "x [%lld,%lld,%lld,%lld], w [%lld,%lld], y [%lld,%lld,%lld,%lld] do not fit",
                       (long long)x->ne[0], (long long)x->ne[1], (long long)x->ne[2],
                       (long long)x->ne[3], (long long)w->ne[0], (long long)w->ne[1],
                       (long long)y->ne[0], (long long)y->ne[1], (long long)y->ne[2],
                       (long long)y->ne[3]);
    return EX_OK;
}

/* Per sample z: y_z [Co, H*W] = w [Co, Ci] x_z [Ci, H*W], j split as (h, w). */
static ex_status pwconv(vk_exec *e, const ex_node_exec *n)
{
    if (n->nsrc != 2 || n->src == NULL)
        return vk_fail(e, EX_ERR_ARG, "expected 2 sources, got %d", n->nsrc);
    const ex_tdesc *x = &n->src[0], *w = &n->src[1], *y = &n->dst;
    ex_status st = pw_check(e, n, x, w, y);
    if (st != EX_OK)
        return st;
    gm_geom g = plain(y->ne[1], y->ne[2] * y->ne[3], x->ne[1]);
    g.j0 = y->ne[3];
    g.batch = y->ne[0];
    g.a_i = w->st[0];
    g.a_k0 = w->st[1];
    g.b_k0 = x->st[1];
    g.b_j1 = x->st[2];
    g.b_j0 = x->st[3];
    g.c_i = y->st[1];
    g.c_j1 = y->st[2];
    g.c_j0 = y->st[3];
    g.zb = x->st[0];
    g.zc = y->st[0];
    return run(e, &g, w, x, y, NULL);
}

/* Below this many 32x32 output tiles a filter gradient is split by sample: each sample's
 * product goes to scratch in its own workgroups, then a fixed-order sum over samples. */
#define VK_SPLIT_TILES 64
#define VK_SPLIT_BYTES ((int64_t)64 << 20)

static ex_status pwconv_bwd_filter_split(vk_exec *e, const ex_tdesc *x, const ex_tdesc *dy,
                                         const ex_tdesc *dw)
{
    int64_t nb = x->ne[0], co = dw->ne[0], ci = dw->ne[1];
    uint32_t part = 0;
    ex_status st = vk_scratch(e, (uint64_t)(nb * co * ci * 4), &part);
    if (st != EX_OK)
        return st;
    gm_geom g = plain(co, ci, x->ne[2] * x->ne[3]);
    g.k1 = x->ne[2];
    g.k0 = x->ne[3];
    g.batch = nb;
    g.a_i = dy->st[1];
    g.a_k1 = dy->st[2];
    g.a_k0 = dy->st[3];
    g.b_k1 = x->st[2];
    g.b_k0 = x->st[3];
    g.b_j0 = x->st[1];
    g.c_i = ci;
    g.c_j0 = 1;
    g.za = dy->st[0];
    g.zb = x->st[0];
    g.zc = co * ci;
    st = run_refs(e, &g, vk_ref(e, dy), vk_ref(e, x), part, NULL);
    if (st != EX_OK)
        return st;
    vk_barrier(e);
    if (dw->st[0] > INT32_MAX || dw->st[1] > INT32_MAX || dw->st[0] < 0 || dw->st[1] < 0)
        return vk_fail(e, EX_ERR_UNSUPPORTED, "dw is beyond 32-bit indexing");
    vk_bind_reset(e);
    part = vk_ref_rebind_read(e, part, 0);
    return vk_reduce_batch(e, part, (uint32_t)nb, (uint32_t)co, (uint32_t)ci, vk_ref(e, dw),
                           (uint32_t)dw->st[0], (uint32_t)dw->st[1]);
}

/* dw [Co, Ci] = dy [Co, (n, h, w)] x^T [(n, h, w), Ci]: k split in three levels. */
static ex_status pwconv_bwd_filter(vk_exec *e, const ex_node_exec *n)
{
    if (n->nsrc != 2 || n->src == NULL)
        return vk_fail(e, EX_ERR_ARG, "expected 2 sources, got %d", n->nsrc);
    const ex_tdesc *x = &n->src[0], *dy = &n->src[1], *dw = &n->dst;
    ex_status st = pw_check(e, n, x, dw, dy);
    if (st != EX_OK)
        return st;
    int64_t nb = x->ne[0], co = dw->ne[0], ci = dw->ne[1];
    if (nb > 1 && ((co + 31) / 32) * ((ci + 31) / 32) < VK_SPLIT_TILES &&
        nb * co * ci * 4 <= VK_SPLIT_BYTES)
        return pwconv_bwd_filter_split(e, x, dy, dw);
    gm_geom g = plain(dw->ne[0], dw->ne[1], x->ne[0] * x->ne[2] * x->ne[3]);
    g.k1 = x->ne[2];
    g.k0 = x->ne[3];
    g.a_i = dy->st[1];
    g.a_k2 = dy->st[0];
    g.a_k1 = dy->st[2];
    g.a_k0 = dy->st[3];
    g.b_k2 = x->st[0];
    g.b_k1 = x->st[2];
    g.b_k0 = x->st[3];
    g.b_j0 = x->st[1];
    g.c_i = dw->st[0];
    g.c_j0 = dw->st[1];
    return run(e, &g, dy, x, dw, NULL);
}

ex_status vk_run_gemm(vk_exec *e, const ex_node_exec *n)
{
    switch (n->op) {
    case EX_OP_MATMUL: return matmul(e, n);
    case EX_OP_LINEAR: return linear(e, n);
    case EX_OP_PWCONV: return pwconv(e, n);
    case EX_OP_PWCONV_BWD_FILTER: return pwconv_bwd_filter(e, n);
    default: return vk_fail(e, EX_ERR_UNSUPPORTED, "not a GEMM-shaped op");
    }
}
