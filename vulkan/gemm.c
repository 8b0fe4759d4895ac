/* GEMM-shaped ops. MATMUL and LINEAR go through one tiled shared-memory shader
 * (gemm/gemm.comp) sized to the portable limits: each says how its tensors map onto
 * C[i][j] = sum_k A[i][k] B[k][j] by strides, so transposed views need no copy. The 1x1
 * convolutions of a search have few channels and many positions, so they have shaders of
 * their own that stream the positions: PWCONV (gemm/pw.comp; PWCONV_BN, the inference
 * form with the eval batch norm and an input ReLU fused, is a variant of it) and
 * PWCONV_BWD_FILTER (gemm/wgrad.comp, partial sums over ranges of positions, then their
 * ordered sum). Every operand keeps its own strides. Checks mirror the CPU backend's. */
#include <string.h>

#include "shaders/gemm/variants.h"
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

/* Checks a node of the GEMM family (ex_td_gemm_of). */
static ex_status check(vk_exec *e, const ex_node_exec *nd)
{
    char why[320];
    ex_status st = ex_td_gemm_of(nd, why, sizeof why);
    return st == EX_OK ? EX_OK : vk_fail(e, st, "%s", why);
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
    ex_status st = check(e, n);
    if (st != EX_OK)
        return st;
    const ex_tdesc *a = &n->src[0], *b = &n->src[1], *c = &n->dst;
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
    ex_status st = check(e, n);
    if (st != EX_OK)
        return st;
    const ex_tdesc *x = &n->src[0], *w = &n->src[1], *y = &n->dst;
    gm_geom g = plain(x->ne[0], w->ne[0], x->ne[1]);
    g.a_i = x->st[0];
    g.a_k0 = x->st[1];
    g.b_k0 = w->st[1]; /* B = w^T */
    g.b_j0 = w->st[0];
    g.c_i = y->st[0];
    g.c_j0 = y->st[1];
    return run(e, &g, x, w, y, n->nsrc == 3 ? &n->src[2] : NULL);
}

/* Mirrors pw.comp's push constants. */
typedef struct pw_pc {
    uint32_t gate, x, w, y;
    uint32_t npos, hw, wd, ci;
    uint32_t co, blocks, swo, swi;
    uint32_t sx[4], sy[4];
    uint32_t m, v, g, b; /* PW_BN: running mean, running var, gamma, beta */
    uint32_t sm, sv, sg, sb;
    float eps;
} pw_pc;

/* Mirrors wgrad.comp's push constants. */
typedef struct wg_pc {
    uint32_t gate, a, b, d;
    uint32_t m, n, k, hw;
    uint32_t wd, len, parts, dpart;
    uint32_t drow, dcol, r0, r1;
    uint32_t sa[4], sb[4];
} wg_pc;

_Static_assert(sizeof(pw_pc) <= VK_PC_BYTES, "pw.comp's push constants");
_Static_assert(sizeof(wg_pc) <= VK_PC_BYTES, "wgrad.comp's push constants");

/* Whether an operand's sizes and strides fit the shaders' 32-bit indexing; its padded
 * strides into out (when not NULL). */
static int pw_fits(const ex_tdesc *t, uint32_t out[4])
{
    int64_t ne[4], st[4];
    ex_td_shape4(t, ne, st);
    if (!vk_fits32(ne, st))
        return 0;
    for (int d = 0; d < 4 && out; d++)
        out[d] = (uint32_t)st[d];
    return 1;
}

/* y [N, Co, H, W] = w [Co, Ci] x [N, Ci, H, W] through pw.comp (x, w and y checked): one
 * invocation per position, a block of 16 or 32 output channels per workgroup row (grid
 * y). Binds x, w and y; variant adds PW_BN and PW_RELU, whose operands pc holds already. */
static ex_status pw_run(vk_exec *e, const ex_node_exec *n, pw_pc *pc, int variant)
{
    const ex_tdesc *x = &n->src[0], *w = &n->src[1], *y = &n->dst;
    int64_t npos = x->ne[0] * x->ne[2] * x->ne[3], co = y->ne[1];
    if (!pw_fits(x, pc->sx) || !pw_fits(y, pc->sy) || !pw_fits(w, NULL) || npos > INT32_MAX - 128)
        return vk_fail(e, EX_ERR_UNSUPPORTED, "operands beyond 32-bit indexing");
    int wide = co > 16;
    int64_t blocks = (npos + 127) / 128, tiles = (co + (wide ? 31 : 15)) / (wide ? 32 : 16);
    if (tiles > VK_MAX_GROUPS)
        return vk_fail(e, EX_ERR_UNSUPPORTED, "%lld output channels", (long long)co);
    pc->x = vk_ref(e, x);
    pc->w = vk_ref(e, w);
    pc->y = vk_ref(e, y);
    pc->npos = (uint32_t)npos;
    pc->hw = (uint32_t)(x->ne[2] * x->ne[3]);
    pc->wd = (uint32_t)x->ne[3];
    pc->ci = (uint32_t)x->ne[1];
    pc->co = (uint32_t)co;
    pc->blocks = (uint32_t)blocks;
    pc->swo = (uint32_t)w->st[0];
    pc->swi = (uint32_t)w->st[1];
    return vk_dispatch(e, VK_SH_gemm_pw, variant | (wide ? PW_CT32 : 0), pc, sizeof *pc,
                       vk_groups(npos, 128), (uint32_t)tiles, 1);
}

static ex_status pwconv(vk_exec *e, const ex_node_exec *n)
{
    ex_status st = check(e, n);
    if (st != EX_OK)
        return st;
    pw_pc pc;
    memset(&pc, 0, sizeof pc);
    pc.m = pc.v = pc.g = pc.b = VK_NOREF;
    return pw_run(e, n, &pc, 0);
}

/* Source i of PWCONV_BN (a [Co] statistic, or gamma or beta; VK_NOREF where absent) as a
 * small operand (a uniform buffer where it fits), its stride into *stride; 0 when its
 * stride is beyond 32 bits. */
static int pwbn_ref(vk_exec *e, const ex_node_exec *n, int i, uint32_t *ref, uint32_t *stride)
{
    *ref = VK_NOREF;
    *stride = 0;
    if (i >= n->nsrc)
        return 1;
    uint32_t st[4];
    if (!pw_fits(&n->src[i], st))
        return 0;
    *ref = vk_ref_small(e, &n->src[i]);
    *stride = st[3];
    return 1;
}

/* One folding pass of pwbn_folded over the Co channels, after the bindings are freed. */
static ex_status pwbn_fold(vk_exec *e, pw_pc *f, int variant)
{
    ex_status st =
        vk_dispatch(e, VK_SH_gemm_pw, variant, f, sizeof *f, vk_groups(f->co, 128), 1, 1);
    vk_barrier(e);
    vk_bind_reset(e);
    f->x = f->w = f->y = f->m = f->v = f->g = f->b = VK_NOREF;
    return st;
}

/* PWCONV_BN where the [Co] vectors do not fit one dispatch's bindings with x, w and y (they
 * are beyond a uniform buffer's 16 KB): a = invstd gamma (PW_FOLD_A), then b = beta - mean a
 * (PW_FOLD_B) into 2 Co floats of scratch, then the product reads them (PW_FOLDED), with
 * the arithmetic of the one-dispatch form. No pass binds more than four storage ranges. */
static ex_status pwbn_folded(vk_exec *e, const ex_node_exec *n, pw_pc *pc, int variant)
{
    uint64_t co = (uint64_t)n->dst.ne[1], at = e->scratch_at, bytes = 4 * co;
    uint32_t all;
    pw_pc f = *pc; /* the strides and eps; every reference is taken anew */
    f.co = (uint32_t)co;
    vk_bind_reset(e);
    ex_status st = vk_scratch(e, 2 * bytes, &all);
    vk_bind_reset(e);
    f.x = f.w = f.m = f.b = VK_NOREF;
    f.y = vk_scratch_ref(e, at, bytes, VK_WRITE);
    f.v = vk_ref_small(e, &n->src[3]);
    f.g = n->nsrc == 6 ? vk_ref_small(e, &n->src[4]) : VK_NOREF;
    if (st == EX_OK)
        st = pwbn_fold(e, &f, PW_FOLD_A);
    f.x = vk_scratch_ref(e, at, bytes, VK_READ);
    f.y = vk_scratch_ref(e, at + bytes, bytes, VK_WRITE);
    f.m = vk_ref_small(e, &n->src[2]);
    f.b = n->nsrc == 6 ? vk_ref_small(e, &n->src[5]) : VK_NOREF;
    if (st == EX_OK)
        st = pwbn_fold(e, &f, PW_FOLD_B);
    if (st != EX_OK)
        return st;
    all = vk_scratch_ref(e, at, 2 * bytes, VK_READ_SMALL);
    pc->m = pc->v = VK_NOREF;
    pc->g = all;
    pc->b = all == VK_NOREF ? VK_NOREF : all + (uint32_t)co;
    pc->sg = pc->sb = 1;
    return pw_run(e, n, pc, variant | PW_FOLDED);
}

/* PWCONV followed by BN_STATS (eval) and BN_APPLY, in one dispatch of pw.comp (PW_BN):
 * each output channel's scale and shift are folded once per workgroup from the running
 * statistics (and gamma, beta), and applied as y is stored; with ip6 the ReLU is applied to
 * x as it is loaded (PW_RELU). x, w and y take three storage bindings, the four [Co]
 * vectors uniform buffers while they fit 16 KB (the gate takes one too, so then beta falls
 * back to the fourth storage binding); beyond that pwbn_folded. */
static ex_status pwconv_bn(vk_exec *e, const ex_node_exec *n)
{
    char why[256];
    ex_status st = ex_td_pwconv_bn_check(n, why, sizeof why);
    if (st != EX_OK)
        return vk_fail(e, st, "%s", why);
    if (!ex_td_dst_ok(n->dst.ne, n->dst.st))
        return vk_fail(e, EX_ERR_ARG, "dst broadcasts (stride 0)");
    pw_pc pc;
    memset(&pc, 0, sizeof pc);
    pc.eps = n->fp[0];
    int ok = pwbn_ref(e, n, 2, &pc.m, &pc.sm) && pwbn_ref(e, n, 3, &pc.v, &pc.sv) &&
             pwbn_ref(e, n, 4, &pc.g, &pc.sg) && pwbn_ref(e, n, 5, &pc.b, &pc.sb);
    if (!ok)
        return vk_fail(e, EX_ERR_UNSUPPORTED, "statistics beyond 32-bit indexing");
    int variant = PW_BN | (n->ip[6] ? PW_RELU : 0);
    const ex_tdesc *xwy[3] = {&n->src[0], &n->src[1], &n->dst};
    if (e->ref_error || !vk_room(e, xwy, 3))
        return pwbn_folded(e, n, &pc, variant);
    return pw_run(e, n, &pc, variant);
}

/* Ranges the filter gradient's positions are split into: enough workgroups to fill a GPU,
 * while the partials (parts x Co x Ci) stay below a quarter of what the ranges read
 * (K x (Co + Ci)) and below 4M floats. From the shape alone, so the sum is repeatable. */
static int64_t wg_parts(int64_t k, int64_t co, int64_t ci, int64_t kc, int64_t *len)
{
    int64_t parts = k * (co + ci) / (4 * co * ci), cap = ((int64_t)1 << 22) / (co * ci);
    parts = parts > WG_PARTS ? WG_PARTS : parts;
    parts = parts > cap ? cap : parts;
    parts = parts < 1 ? 1 : parts;
    *len = ((k + parts - 1) / parts + kc - 1) / kc * kc; /* whole stages of kc positions */
    return (k + *len - 1) / *len;
}

/* dw [Co, Ci] = the sum over positions (n, h, w) of dy [n, :, h, w] x [n, :, h, w]^T through
 * wgrad.comp: partials of position ranges into scratch, then their sum in order (one
 * range writes dw directly). Each pass binds only what it touches: dy, x and the scratch
 * it writes, then the scratch it reads and dw. */
static ex_status pwconv_bwd_filter(vk_exec *e, const ex_node_exec *n)
{
    ex_status st = check(e, n);
    if (st != EX_OK)
        return st;
    const ex_tdesc *x = &n->src[0], *dy = &n->src[1], *dw = &n->dst;
    wg_pc pc;
    memset(&pc, 0, sizeof pc);
    int64_t co = dw->ne[0], ci = dw->ne[1], k = x->ne[0] * x->ne[2] * x->ne[3];
    if (!pw_fits(dy, pc.sa) || !pw_fits(x, pc.sb) || !pw_fits(dw, NULL) || k > INT32_MAX - 64 ||
        co * ci > INT32_MAX / WG_PARTS)
        return vk_fail(e, EX_ERR_UNSUPPORTED, "operands beyond 32-bit indexing");
    int variant = (co > 16 ? WG_TI32 : 0) | (ci > 16 ? WG_TJ32 : 0);
    int64_t ti = co > 16 ? 32 : 16, tj = ci > 16 ? 32 : 16, len = 0;
    int64_t parts = wg_parts(k, co, ci, ti + tj > 32 ? 32 : 64, &len);
    int64_t gy = (co + ti - 1) / ti, gz = (ci + tj - 1) / tj;
    if (gy > VK_MAX_GROUPS || gz > VK_MAX_GROUPS)
        return vk_fail(e, EX_ERR_UNSUPPORTED, "a %lldx%lld filter", (long long)co, (long long)ci);
    pc.m = (uint32_t)co;
    pc.n = (uint32_t)ci;
    pc.k = (uint32_t)k;
    pc.hw = (uint32_t)(x->ne[2] * x->ne[3]);
    pc.wd = (uint32_t)x->ne[3];
    pc.len = (uint32_t)len;
    pc.parts = (uint32_t)parts;
    if (parts == 1) {
        pc.a = vk_ref(e, dy);
        pc.b = vk_ref(e, x);
        pc.d = vk_ref(e, dw);
        pc.drow = (uint32_t)dw->st[0];
        pc.dcol = (uint32_t)dw->st[1];
        return vk_dispatch(e, VK_SH_gemm_wgrad, variant, &pc, sizeof pc, 1, (uint32_t)gy,
                           (uint32_t)gz);
    }
    st = vk_scratch(e, 4 * (uint64_t)(parts * co * ci), &pc.d);
    if (st != EX_OK)
        return st;
    pc.a = vk_ref(e, dy);
    pc.b = vk_ref(e, x);
    pc.dpart = (uint32_t)(co * ci);
    pc.drow = (uint32_t)ci;
    pc.dcol = 1;
    st = vk_dispatch(e, VK_SH_gemm_wgrad, variant, &pc, sizeof pc, (uint32_t)parts, (uint32_t)gy,
                     (uint32_t)gz);
    if (st != EX_OK)
        return st;
    vk_barrier(e);
    vk_bind_reset(e);
    pc.a = vk_ref_rebind_read(e, pc.d, 0);
    pc.b = VK_NOREF;
    pc.d = vk_ref(e, dw);
    pc.drow = (uint32_t)dw->st[0];
    pc.dcol = (uint32_t)dw->st[1];
    return vk_dispatch(e, VK_SH_gemm_wgrad, WG_SUM, &pc, sizeof pc, vk_groups(co * ci, 8), 1, 1);
}

ex_status vk_run_gemm(vk_exec *e, const ex_node_exec *n)
{
    switch (n->op) {
    case EX_OP_MATMUL: return matmul(e, n);
    case EX_OP_LINEAR: return linear(e, n);
    case EX_OP_PWCONV: return pwconv(e, n);
    case EX_OP_PWCONV_BN: return pwconv_bn(e, n);
    case EX_OP_PWCONV_BWD_FILTER: return pwconv_bwd_filter(e, n);
    default: return vk_fail(e, EX_ERR_UNSUPPORTED, "not a GEMM-shaped op");
    }
}
