/* Dense and depthwise 2-D convolution on the CPU, forward and both backward passes.
 *
 * The reference path is one plain loop nest per op (shared by dense and depthwise) with
 * double accumulators. The fast path lowers dense convolution to im2col + sgemm over groups
 * of samples. Depthwise convolution runs per (n, c) plane: forward and backward data as
 * vector correlations over a zero-padded copy of the plane (no bounds tests), the filter
 * gradient as float-lane dot products over whole planes; strided columns, large filters
 * and non-finite filters take general row loops. Every parallel loop gives each output to
 * one thread with a fixed summation order, so results do not depend on the thread count. */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

/** Largest inner dimension of one sgemm call. OpenBLAS blocks the inner dimension
 *  differently in its threaded and single-threaded drivers once it exceeds its GEMM_Q
 *  (168 and up on x86), so longer products are cut into chunks of this size, added in
 *  order. With kernels that sum each inner block in one pass (the AVX-512 ones) the result
 *  then no longer depends on the BLAS thread count; others (Haswell, Zen) still round
 *  differently per tile partition, so there only a fixed BLAS thread count repeats. */
#define CONV_KC 128

/** Work-space budget (floats) for one group of im2col columns and packed outputs: bounds
 *  memory, and depends on shapes only, so the summation order in sgemm does too. */
#define CONV_WS_FLOATS ((int64_t)1 << 23)

#ifdef _OPENMP
#include <omp.h>

/* Only the OpenMP pragmas read it; without OpenMP every loop runs on the calling thread. */
static int conv_threads(const cpu_exec *e)
{
    return e->threads > 0 ? e->threads : omp_get_max_threads();
}
#endif

/** A 4-d f32 operand: element 0 and NCHW shape and strides. */
typedef struct conv_t4 {
    float *p;
    int64_t ne[4];
    int64_t st[4];
} conv_t4;

static conv_t4 conv_t4_of(const ex_tdesc *t)
{
    conv_t4 v;
    v.p = cpu_f32(t);
    ex_td_shape4(t, v.ne, v.st);
    return v;
}

static inline float *conv_plane(const conv_t4 *t, int64_t a, int64_t b)
{
    return t->p + a * t->st[0] + b * t->st[1];
}

typedef struct conv_geom {
    int64_t n, ci, co, h, w, kh, kw, ho, wo;
    int64_t sh, sw, ph, pw, dh, dw;
    int depthwise;
    int relu; /* ip6: the input is max(x, 0) (depthwise only) */
} conv_geom;

/** Output extent of one spatial dimension, or -1 when not even one window fits. */
static int64_t conv_out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d)
{
    int64_t span = in + 2 * p - d * (k - 1) - 1;
    return span < 0 ? -1 : span / s + 1;
}

/** The outputs o in [*lo, *hi) whose input o * s + off lies in [0, in): the part of a row
 *  that needs no bounds test. */
static void conv_valid(int64_t off, int64_t s, int64_t in, int64_t out, int64_t *lo, int64_t *hi)
{
    int64_t a = off < 0 ? (-off + s - 1) / s : 0;
    int64_t b = off < in ? (in - 1 - off) / s + 1 : 0;
    if (b > out)
        b = out;
    *lo = a < b ? a : b;
    *hi = b;
}

static ex_status conv_check_types(const cpu_exec *e, const ex_node_exec *nd, const char *name)
{
    const ex_tdesc *t[3] = {&nd->src[0], &nd->src[1], &nd->dst};
    for (int i = 0; i < 3; i++) {
        if (t[i]->dtype != EX_F32 || t[i]->ndim != 4)
            return cpu_fail(e, EX_ERR_ARG, "%s: operand %d must be a 4-d f32 tensor", name, i);
    }
    const int32_t *ip = nd->ip;
    if (ip[0] < 1 || ip[1] < 1 || ip[2] < 0 || ip[3] < 0 || ip[4] < 1 || ip[5] < 1)
        return cpu_fail(e, EX_ERR_ARG, "%s: bad geometry stride %dx%d pad %dx%d dilation %dx%d",
                        name, ip[0], ip[1], ip[2], ip[3], ip[4], ip[5]);
    return EX_OK;
}

/** Reads the geometry from the operands in their roles (x input, w filter, y output;
 *  whichever of them is the node's dst) and checks that the three shapes agree. */
static ex_status conv_geom_of(const cpu_exec *e, const ex_node_exec *nd, const ex_tdesc *x,
                              const ex_tdesc *w, const ex_tdesc *y, int depthwise, const char *name,
                              conv_geom *g)
{
    ex_status st = conv_check_types(e, nd, name);
    if (st != EX_OK)
        return st;
    const int32_t *ip = nd->ip;
    *g = (conv_geom){.n = x->ne[0],
                     .ci = x->ne[1],
                     .h = x->ne[2],
                     .w = x->ne[3],
                     .co = w->ne[0],
                     .kh = w->ne[2],
                     .kw = w->ne[3],
                     .sh = ip[0],
                     .sw = ip[1],
                     .ph = ip[2],
                     .pw = ip[3],
                     .dh = ip[4],
                     .dw = ip[5],
                     .depthwise = depthwise};
    g->ho = conv_out_size(g->h, g->kh, g->sh, g->ph, g->dh);
    g->wo = conv_out_size(g->w, g->kw, g->sw, g->pw, g->dw);
    int ok = g->ho > 0 && g->wo > 0 && g->kh > 0 && g->kw > 0 && y->ne[0] == g->n &&
             y->ne[1] == g->co && y->ne[2] == g->ho && y->ne[3] == g->wo;
    ok = ok && (depthwise ? w->ne[1] == 1 && g->co == g->ci : w->ne[1] == g->ci);
    if (!ok)
        return cpu_fail(e, EX_ERR_SHAPE,
                        "%s: x [%lld,%lld,%lld,%lld], w [%lld,%lld,%lld,%lld] and y "
                        "[%lld,%lld,%lld,%lld] do not fit stride %dx%d pad %dx%d dilation %dx%d",
                        name, (long long)x->ne[0], (long long)x->ne[1], (long long)x->ne[2],
                        (long long)x->ne[3], (long long)w->ne[0], (long long)w->ne[1],
                        (long long)w->ne[2], (long long)w->ne[3], (long long)y->ne[0],
                        (long long)y->ne[1], (long long)y->ne[2], (long long)y->ne[3], ip[0], ip[1],
                        ip[2], ip[3], ip[4], ip[5]);
    return EX_OK;
}

/* ---- reference: one loop nest per pass, dense and depthwise alike ---- */

/** Input channels that output channel co reads, output channels that read input channel
 *  ci, and the filter's channel index for ci. */
static void conv_ref_cin(const conv_geom *g, int64_t co, int64_t *c0, int64_t *c1)
{
    *c0 = g->depthwise ? co : 0;
    *c1 = g->depthwise ? co + 1 : g->ci;
}
static void conv_ref_cout(const conv_geom *g, int64_t ci, int64_t *c0, int64_t *c1)
{
    *c0 = g->depthwise ? ci : 0;
    *c1 = g->depthwise ? ci + 1 : g->co;
}
static int64_t conv_ref_wc(const conv_geom *g, int64_t ci)
{
    return g->depthwise ? 0 : ci;
}

static float conv_ref_at(const conv_t4 *t, int64_t a, int64_t b, int64_t c, int64_t d)
{
    return t->p[a * t->st[0] + b * t->st[1] + c * t->st[2] + d * t->st[3]];
}

/** An element of the input x as the convolution sees it: max(x, 0) with the fused ReLU. */
static float conv_ref_in(const conv_geom *g, const conv_t4 *x, int64_t a, int64_t b, int64_t c,
                         int64_t d)
{
    float v = conv_ref_at(x, a, b, c, d);
    return g->relu && v < 0.0f ? 0.0f : v;
}

static double conv_ref_point(const conv_geom *g, const conv_t4 *x, const conv_t4 *w, int64_t nb,
                             int64_t co, int64_t oh, int64_t ow)
{
    int64_t c0, c1;
    conv_ref_cin(g, co, &c0, &c1);
    double acc = 0.0;
    for (int64_t ci = c0; ci < c1; ci++) {
        for (int64_t kh = 0; kh < g->kh; kh++) {
            int64_t ih = oh * g->sh - g->ph + kh * g->dh;
            if (ih < 0 || ih >= g->h)
                continue;
            for (int64_t kw = 0; kw < g->kw; kw++) {
                int64_t iw = ow * g->sw - g->pw + kw * g->dw;
                if (iw >= 0 && iw < g->w)
                    acc += (double)conv_ref_in(g, x, nb, ci, ih, iw) *
                           conv_ref_at(w, co, conv_ref_wc(g, ci), kh, kw);
            }
        }
    }
    return acc;
}

static void conv_ref_fwd(const conv_geom *g, conv_t4 x, conv_t4 w, conv_t4 y)
{
    for (int64_t nb = 0; nb < g->n; nb++)
        for (int64_t co = 0; co < g->co; co++)
            for (int64_t oh = 0; oh < g->ho; oh++)
                for (int64_t ow = 0; ow < g->wo; ow++)
                    conv_plane(&y, nb, co)[oh * y.st[2] + ow * y.st[3]] =
                        (float)conv_ref_point(g, &x, &w, nb, co, oh, ow);
}

/** The output index that input i meets through filter tap k, or -1 when none does. */
static int64_t conv_ref_src(int64_t i, int64_t k, int64_t s, int64_t p, int64_t d, int64_t out)
{
    int64_t t = i + p - k * d;
    if (t < 0 || t % s != 0 || t / s >= out)
        return -1;
    return t / s;
}

static double conv_ref_dpoint(const conv_geom *g, const conv_t4 *dy, const conv_t4 *w, int64_t nb,
                              int64_t ci, int64_t ih, int64_t iw)
{
    int64_t c0, c1;
    conv_ref_cout(g, ci, &c0, &c1);
    double acc = 0.0;
    for (int64_t co = c0; co < c1; co++) {
        for (int64_t kh = 0; kh < g->kh; kh++) {
            int64_t oh = conv_ref_src(ih, kh, g->sh, g->ph, g->dh, g->ho);
            if (oh < 0)
                continue;
            for (int64_t kw = 0; kw < g->kw; kw++) {
                int64_t ow = conv_ref_src(iw, kw, g->sw, g->pw, g->dw, g->wo);
                if (ow >= 0)
                    acc += (double)conv_ref_at(dy, nb, co, oh, ow) *
                           conv_ref_at(w, co, conv_ref_wc(g, ci), kh, kw);
            }
        }
    }
    return acc;
}

/** dx; with the fused ReLU, zero where the input x (mask) is not above 0. */
static void conv_ref_bwd_data(const conv_geom *g, conv_t4 dy, conv_t4 w, conv_t4 dx,
                              const conv_t4 *mask)
{
    for (int64_t nb = 0; nb < g->n; nb++)
        for (int64_t ci = 0; ci < g->ci; ci++)
            for (int64_t ih = 0; ih < g->h; ih++)
                for (int64_t iw = 0; iw < g->w; iw++) {
                    float v = (float)conv_ref_dpoint(g, &dy, &w, nb, ci, ih, iw);
                    if (g->relu && !(conv_ref_at(mask, nb, ci, ih, iw) > 0.0f))
                        v = 0.0f;
                    conv_plane(&dx, nb, ci)[ih * dx.st[2] + iw * dx.st[3]] = v;
                }
}

static double conv_ref_wpoint(const conv_geom *g, const conv_t4 *x, const conv_t4 *dy, int64_t co,
                              int64_t ci, int64_t kh, int64_t kw)
{
    double acc = 0.0;
    for (int64_t nb = 0; nb < g->n; nb++) {
        for (int64_t oh = 0; oh < g->ho; oh++) {
            int64_t ih = oh * g->sh - g->ph + kh * g->dh;
            if (ih < 0 || ih >= g->h)
                continue;
            for (int64_t ow = 0; ow < g->wo; ow++) {
                int64_t iw = ow * g->sw - g->pw + kw * g->dw;
                if (iw >= 0 && iw < g->w)
                    acc +=
                        (double)conv_ref_at(dy, nb, co, oh, ow) * conv_ref_in(g, x, nb, ci, ih, iw);
            }
        }
    }
    return acc;
}

static void conv_ref_bwd_filter(const conv_geom *g, conv_t4 x, conv_t4 dy, conv_t4 dw)
{
    for (int64_t co = 0; co < g->co; co++) {
        int64_t c0, c1;
        conv_ref_cin(g, co, &c0, &c1);
        for (int64_t ci = c0; ci < c1; ci++)
            for (int64_t kh = 0; kh < g->kh; kh++)
                for (int64_t kw = 0; kw < g->kw; kw++)
                    conv_plane(&dw, co, conv_ref_wc(g, ci))[kh * dw.st[2] + kw * dw.st[3]] =
                        (float)conv_ref_wpoint(g, &x, &dy, co, ci, kh, kw);
    }
}

/* ---- fast dense: im2col + sgemm over groups of samples ---- */

/** The im2col work space of one group of samples: col [K, G*P] with K = Ci*Kh*Kw and
 *  P = Ho*Wo, mat [Co, G*P] (packed y or dy), wm [Co, K] (packed w or dw). */
typedef struct conv_ws {
    int64_t k, p, g;
    float *col, *mat, *wm;
} conv_ws;

static ex_status conv_ws_alloc(const cpu_exec *e, const conv_geom *g, conv_ws *ws, const char *name)
{
    ws->k = g->ci * g->kh * g->kw;
    ws->p = g->ho * g->wo;
    int64_t per = (ws->k + g->co) * ws->p;
    ws->g = per > 0 ? CONV_WS_FLOATS / per : g->n;
    ws->g = ws->g < 1 ? 1 : ws->g > g->n ? g->n : ws->g;
    int64_t gp = ws->g * ws->p;
    if (ws->k > INT_MAX || gp > INT_MAX || g->co > INT_MAX)
        return cpu_fail(e, EX_ERR_UNSUPPORTED, "%s: GEMM dimensions exceed the BLAS int range",
                        name);
    size_t floats = (size_t)((ws->k + g->co) * gp + g->co * ws->k);
    ws->col = cpu_alloc(e, floats * sizeof(float) + 1);
    if (!ws->col)
        return cpu_fail(e, EX_ERR_NOMEM, "%s: no memory for %zu bytes of im2col space", name,
                        floats * sizeof(float));
    ws->mat = ws->col + ws->k * gp;
    ws->wm = ws->mat + g->co * gp;
    return EX_OK;
}

/** Row r = (ci, kh, kw) of sample n0 + gi, for every output position. */
static void conv_im2col_row(const conv_geom *g, const conv_t4 *x, int64_t n0, int64_t gi, int64_t r,
                            float *restrict d)
{
    int64_t ci = r / (g->kh * g->kw), kh = r / g->kw % g->kh, kw = r % g->kw;
    const float *xp = conv_plane(x, n0 + gi, ci);
    int64_t off = kw * g->dw - g->pw, lo, hi;
    conv_valid(off, g->sw, g->w, g->wo, &lo, &hi);
    for (int64_t oh = 0; oh < g->ho; oh++, d += g->wo) {
        int64_t ih = oh * g->sh - g->ph + kh * g->dh;
        if (ih < 0 || ih >= g->h) {
            memset(d, 0, (size_t)g->wo * sizeof(float));
            continue;
        }
        const float *xr = xp + ih * x->st[2] + (lo * g->sw + off) * x->st[3];
        int64_t step = g->sw * x->st[3];
        for (int64_t ow = 0; ow < lo; ow++)
            d[ow] = 0.0f;
        for (int64_t i = 0; i < hi - lo; i++)
            d[lo + i] = xr[i * step];
        for (int64_t ow = hi; ow < g->wo; ow++)
            d[ow] = 0.0f;
    }
}

static void conv_im2col(const cpu_exec *e, const conv_geom *g, const conv_t4 *x, int64_t n0,
                        int64_t gn, const conv_ws *ws)
{
    (void)e; /* read by the OpenMP pragma only */
    int64_t items = ws->k * gn, gp = gn * ws->p;
#pragma omp parallel for schedule(static) num_threads(conv_threads(e))
    for (int64_t it = 0; it < items; it++) {
        int64_t r = it / gn, gi = it % gn;
        conv_im2col_row(g, x, n0, gi, r, ws->col + r * gp + gi * ws->p);
    }
}

/** Adds every column row of sample n0 + gi that lands in input channel ci into dx. */
static void conv_col2im_plane(const conv_geom *g, const conv_t4 *dx, int64_t n0, int64_t gi,
                              int64_t ci, const conv_ws *ws, int64_t gp)
{
    float *xp = conv_plane(dx, n0 + gi, ci);
    for (int64_t ih = 0; ih < g->h; ih++)
        for (int64_t iw = 0; iw < g->w; iw++)
            xp[ih * dx->st[2] + iw * dx->st[3]] = 0.0f;
    int64_t step = g->sw * dx->st[3];
    for (int64_t kh = 0; kh < g->kh; kh++) {
        for (int64_t kw = 0; kw < g->kw; kw++) {
            const float *s = ws->col + ((ci * g->kh + kh) * g->kw + kw) * gp + gi * ws->p;
            int64_t off = kw * g->dw - g->pw, lo, hi;
            conv_valid(off, g->sw, g->w, g->wo, &lo, &hi);
            for (int64_t oh = 0; oh < g->ho; oh++) {
                int64_t ih = oh * g->sh - g->ph + kh * g->dh;
                if (ih < 0 || ih >= g->h)
                    continue;
                float *xr = xp + ih * dx->st[2] + (lo * g->sw + off) * dx->st[3];
                const float *sr = s + oh * g->wo + lo;
                for (int64_t i = 0; i < hi - lo; i++)
                    xr[i * step] += sr[i];
            }
        }
    }
}

static void conv_col2im(const cpu_exec *e, const conv_geom *g, const conv_t4 *dx, int64_t n0,
                        int64_t gn, const conv_ws *ws)
{
    (void)e; /* read by the OpenMP pragma only */
    int64_t items = gn * g->ci;
#pragma omp parallel for schedule(static) num_threads(conv_threads(e))
    for (int64_t it = 0; it < items; it++)
        conv_col2im_plane(g, dx, n0, it / g->ci, it % g->ci, ws, gn * ws->p);
}

/** Copies samples [n0, n0 + gn) of t [N, C, Ho, Wo] to or from mat [C, gn*P]. */
static void conv_pack_out(const cpu_exec *e, const conv_geom *g, const conv_t4 *t, int64_t n0,
                          int64_t gn, float *mat, int to_mat)
{
    (void)e; /* read by the OpenMP pragma only */
    int64_t items = g->co * gn, gp = gn * g->ho * g->wo;
#pragma omp parallel for schedule(static) num_threads(conv_threads(e))
    for (int64_t it = 0; it < items; it++) {
        int64_t c = it / gn, gi = it % gn;
        float *tp = conv_plane(t, n0 + gi, c);
        float *m = mat + c * gp + gi * g->ho * g->wo;
        for (int64_t oh = 0; oh < g->ho; oh++) {
            float *tr = tp + oh * t->st[2];
            float *mr = m + oh * g->wo;
            for (int64_t ow = 0; ow < g->wo; ow++) {
                if (to_mat)
                    mr[ow] = tr[ow * t->st[3]];
                else
                    tr[ow * t->st[3]] = mr[ow];
            }
        }
    }
}

/** Copies the filter [Co, Ci, Kh, Kw] to or from wm [Co, K]. */
static void conv_pack_w(const conv_geom *g, const conv_t4 *w, float *wm, int to_mat)
{
    int64_t kk = g->kh * g->kw;
    for (int64_t co = 0; co < g->co; co++)
        for (int64_t r = 0; r < g->ci * kk; r++) {
            float *p =
                conv_plane(w, co, r / kk) + r / g->kw % g->kh * w->st[2] + r % g->kw * w->st[3];
            if (to_mat)
                wm[co * g->ci * kk + r] = *p;
            else
                *p = wm[co * g->ci * kk + r];
        }
}

/** c = op(a) op(b) + beta c (row-major) as a chain of sgemm calls of inner size at most
 *  CONV_KC, each added to the last in index order. */
static void conv_sgemm(int ta, int tb, int m, int nn, int k, const float *a, int lda,
                       const float *b, int ldb, float beta, float *c, int ldc)
{
    for (int k0 = 0; k0 == 0 || k0 < k; k0 += CONV_KC) {
        int kc = k - k0 < CONV_KC ? k - k0 : CONV_KC;
        const float *ap = ta ? a + (size_t)k0 * (size_t)lda : a + k0;
        const float *bp = tb ? b + k0 : b + (size_t)k0 * (size_t)ldb;
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    m, nn, kc, 1.0f, ap, lda, bp, ldb, k0 == 0 ? beta : 1.0f, c, ldc);
    }
}

static void conv_fast_fwd(const cpu_exec *e, const conv_geom *g, const conv_t4 *x, const conv_t4 *w,
                          const conv_t4 *y, const conv_ws *ws)
{
    conv_pack_w(g, w, ws->wm, 1);
    for (int64_t n0 = 0; n0 < g->n; n0 += ws->g) {
        int64_t gn = g->n - n0 < ws->g ? g->n - n0 : ws->g;
        int gp = (int)(gn * ws->p);
        conv_im2col(e, g, x, n0, gn, ws);
        conv_sgemm(0, 0, (int)g->co, gp, (int)ws->k, ws->wm, (int)ws->k, ws->col, gp, 0.0f, ws->mat,
                   gp);
        conv_pack_out(e, g, y, n0, gn, ws->mat, 0);
    }
}

static void conv_fast_bwd_data(const cpu_exec *e, const conv_geom *g, const conv_t4 *dy,
                               const conv_t4 *w, const conv_t4 *dx, const conv_ws *ws)
{
    conv_pack_w(g, w, ws->wm, 1);
    for (int64_t n0 = 0; n0 < g->n; n0 += ws->g) {
        int64_t gn = g->n - n0 < ws->g ? g->n - n0 : ws->g;
        int gp = (int)(gn * ws->p);
        conv_pack_out(e, g, dy, n0, gn, ws->mat, 1);
        conv_sgemm(1, 0, (int)ws->k, gp, (int)g->co, ws->wm, (int)ws->k, ws->mat, gp, 0.0f, ws->col,
                   gp);
        conv_col2im(e, g, dx, n0, gn, ws);
    }
}

/** dw = sum over groups, in group order, of dy_g col_g^T; the group size depends on shapes
 *  only, so the order of the sum does too. */
static void conv_fast_bwd_filter(const cpu_exec *e, const conv_geom *g, const conv_t4 *x,
                                 const conv_t4 *dy, const conv_t4 *dw, const conv_ws *ws)
{
    if (g->n == 0)
        memset(ws->wm, 0, (size_t)(g->co * ws->k) * sizeof(float));
    for (int64_t n0 = 0; n0 < g->n; n0 += ws->g) {
        int64_t gn = g->n - n0 < ws->g ? g->n - n0 : ws->g;
        int gp = (int)(gn * ws->p);
        conv_im2col(e, g, x, n0, gn, ws);
        conv_pack_out(e, g, dy, n0, gn, ws->mat, 1);
        conv_sgemm(0, 1, (int)g->co, (int)ws->k, gp, ws->mat, gp, ws->col, gp,
                   n0 == 0 ? 0.0f : 1.0f, ws->wm, (int)ws->k);
    }
    conv_pack_w(g, dw, ws->wm, 0);
}

/* ---- depthwise, general: tap by tap over whole rows, any strides and filter size ---- */

static void dw_axpy(float *restrict y, int64_t ys, const float *restrict x, int64_t xs, float a,
                    int64_t cnt)
{
    if (ys == 1 && xs == 1) {
        for (int64_t i = 0; i < cnt; i++)
            y[i] += a * x[i];
        return;
    }
    for (int64_t i = 0; i < cnt; i++)
        y[i * ys] += a * x[i * xs];
}

/** A dot product in eight fixed lanes, so the compiler may vectorize it without
 *  reassociating; the lanes are combined in a fixed order. */
static double dw_dot(const float *restrict a, int64_t as, const float *restrict b, int64_t bs,
                     int64_t cnt)
{
    float lane[8] = {0};
    int64_t i = 0;
    if (as == 1 && bs == 1) {
        for (; i + 8 <= cnt; i += 8)
            for (int j = 0; j < 8; j++)
                lane[j] += a[i + j] * b[i + j];
    }
    double acc = 0.0;
    for (; i < cnt; i++)
        acc += (double)a[i * as] * b[i * bs];
    for (int j = 0; j < 8; j++)
        acc += lane[j];
    return acc;
}

/** The outputs that filter tap (kh, kw) meets inside the input, rows [oh0, oh1) and
 *  columns [ow0, ow1), and the input element (ih0, iw0) of output (oh0, ow0). Computed once
 *  per tap and plane, so the row loops carry no bounds tests and no divisions. */
typedef struct dw_tap {
    int64_t oh0, oh1, ow0, ow1, ih0, iw0;
} dw_tap;

static dw_tap dw_tap_of(const conv_geom *g, int64_t kh, int64_t kw)
{
    dw_tap t;
    int64_t offh = kh * g->dh - g->ph, offw = kw * g->dw - g->pw;
    conv_valid(offh, g->sh, g->h, g->ho, &t.oh0, &t.oh1);
    conv_valid(offw, g->sw, g->w, g->wo, &t.ow0, &t.ow1);
    t.ih0 = t.oh0 * g->sh + offh;
    t.iw0 = t.ow0 * g->sw + offw;
    return t;
}

static void dw_zero(float *p, const int64_t *st, int64_t rows, int64_t cols)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            p[r * st[2] + c * st[3]] = 0.0f;
}

/** One (n, c) plane: y = the channel's filter over x, tap by tap over whole rows. */
static void dw_fwd_plane(const conv_geom *g, const float *xp, const int64_t *xs, float *yp,
                         const int64_t *ys, const float *wp, const int64_t *wst)
{
    dw_zero(yp, ys, g->ho, g->wo);
    for (int64_t kh = 0; kh < g->kh; kh++)
        for (int64_t kw = 0; kw < g->kw; kw++) {
            dw_tap t = dw_tap_of(g, kh, kw);
            float wv = wp[kh * wst[2] + kw * wst[3]];
            for (int64_t oh = t.oh0; oh < t.oh1; oh++) {
                int64_t ih = t.ih0 + (oh - t.oh0) * g->sh;
                dw_axpy(yp + oh * ys[2] + t.ow0 * ys[3], ys[3], xp + ih * xs[2] + t.iw0 * xs[3],
                        g->sw * xs[3], wv, t.ow1 - t.ow0);
            }
        }
}

/** Scatters one dy plane back through the filter: each dx element receives its terms in
 *  the fixed (kh, kw, oh) order. */
static void dw_bwd_data_plane(const conv_geom *g, const float *dyp, const int64_t *ds, float *dxp,
                              const int64_t *xs, const float *wp, const int64_t *wst)
{
    dw_zero(dxp, xs, g->h, g->w);
    for (int64_t kh = 0; kh < g->kh; kh++)
        for (int64_t kw = 0; kw < g->kw; kw++) {
            dw_tap t = dw_tap_of(g, kh, kw);
            float wv = wp[kh * wst[2] + kw * wst[3]];
            for (int64_t oh = t.oh0; oh < t.oh1; oh++) {
                int64_t ih = t.ih0 + (oh - t.oh0) * g->sh;
                dw_axpy(dxp + ih * xs[2] + t.iw0 * xs[3], g->sw * xs[3],
                        dyp + oh * ds[2] + t.ow0 * ds[3], ds[3], wv, t.ow1 - t.ow0);
            }
        }
}

/** The filter gradient of one (n, c) plane: part[kh*Kw + kw]. */
static void dw_bwd_filter_plane(const conv_geom *g, const float *xp, const int64_t *xs,
                                const float *dyp, const int64_t *ds, double *part)
{
    for (int64_t kh = 0; kh < g->kh; kh++)
        for (int64_t kw = 0; kw < g->kw; kw++) {
            dw_tap t = dw_tap_of(g, kh, kw);
            double acc = 0.0;
            for (int64_t oh = t.oh0; oh < t.oh1; oh++) {
                int64_t ih = t.ih0 + (oh - t.oh0) * g->sh;
                acc += dw_dot(dyp + oh * ds[2] + t.ow0 * ds[3], ds[3],
                              xp + ih * xs[2] + t.iw0 * xs[3], g->sw * xs[3], t.ow1 - t.ow0);
            }
            part[kh * g->kw + kw] = acc;
        }
}

/* ---- depthwise, fast: vector kernels over zero-padded planes ---- */

/** Largest filter side of the fast path; larger filters run the general loops. */
#define DW_KMAX 7
#define DW_TMAX (DW_KMAX * DW_KMAX)
/* The block functions must be inlined with constant sizes, or their accumulators live in
 * memory. */
#if defined(__GNUC__) || defined(__clang__)
#define DW_INLINE static inline __attribute__((always_inline))
#else
#define DW_INLINE static inline
#endif
/** Vectors of accumulators per block of the correlation kernel: each waits on its last
 *  addition once per tap, so eight keep the adder busy. */
#define DW_NV 8
/** Vectors of lanes per filter-gradient tap, and the rows they sum in float before their
 *  sums go into doubles. */
#define DW_FV 2
#define DW_FLUSH 8

static int64_t dw_floordiv(int64_t a, int64_t b)
{
    return a >= 0 ? a / b : -((-a + b - 1) / b);
}

/** The outputs [*lo, *hi) of n at which every offset off[0..k) reaches into [0, in) with
 *  source index o * step + off; an empty span is [0, 0). */
static void dw_span(const int64_t *off, int k, int64_t step, int64_t in, int64_t n, int64_t *lo,
                    int64_t *hi)
{
    int64_t mn = 0, mx = 0;
    for (int i = 0; i < k; i++) {
        mn = i == 0 || off[i] < mn ? off[i] : mn;
        mx = i == 0 || off[i] > mx ? off[i] : mx;
    }
    int64_t a = dw_floordiv(step - 1 - mn, step), b = dw_floordiv(in - 1 - mx, step) + 1;
    a = a < 0 ? 0 : a;
    b = b > n ? n : b;
    *lo = a < b ? a : 0;
    *hi = a < b ? b : 0;
}

/* Vectors of DW_W floats: 8 where the compiler targets AVX, else 4 (SSE2, NEON). With gcc
 * and clang they are the compilers' vector extension, as the lane loops of plain C leave
 * gcc 12 splitting accumulators into scalars; elsewhere plain structs, run element by
 * element. The width fixes the order of the filter gradient's float lanes, so results
 * repeat for a given build. */
#if defined(__AVX__)
#define DW_W 8
#else
#define DW_W 4
#endif
#if defined(__GNUC__) || defined(__clang__)
typedef float dw_v __attribute__((vector_size(4 * DW_W)));
typedef int32_t dw_iv __attribute__((vector_size(4 * DW_W)));
static inline dw_v dw_add(dw_v a, dw_v b)
{
    return a + b;
}
static inline dw_v dw_mul(dw_v a, dw_v b)
{
    return a * b;
}
/** v with the lanes whose m is 0 zeroed, bitwise, so that a NaN there goes too. */
static inline dw_v dw_and(dw_v v, const int32_t *m)
{
    dw_iv k;
    memcpy(&k, m, sizeof k);
    return (dw_v)((dw_iv)v & k);
}
#else
typedef struct dw_v {
    float f[DW_W];
} dw_v;
static inline dw_v dw_add(dw_v a, dw_v b)
{
    for (int j = 0; j < DW_W; j++)
        a.f[j] += b.f[j];
    return a;
}
static inline dw_v dw_mul(dw_v a, dw_v b)
{
    for (int j = 0; j < DW_W; j++)
        a.f[j] *= b.f[j];
    return a;
}
static inline dw_v dw_and(dw_v v, const int32_t *m)
{
    for (int j = 0; j < DW_W; j++)
        v.f[j] = m[j] ? v.f[j] : 0.0f;
    return v;
}
#endif

static inline dw_v dw_splat(float w)
{
    float f[DW_W];
    for (int j = 0; j < DW_W; j++)
        f[j] = w;
    dw_v v;
    memcpy(&v, f, sizeof v);
    return v;
}

/** p[0], p[s], ..., p[(DW_W - 1) * s]. */
static inline dw_v dw_ld(const float *p, int64_t s)
{
    dw_v v;
    if (s == 1) {
        memcpy(&v, p, sizeof v);
        return v;
    }
    float f[DW_W];
    for (int j = 0; j < DW_W; j++)
        f[j] = p[j * s];
    memcpy(&v, f, sizeof v);
    return v;
}

static inline void dw_st(float *p, int64_t s, dw_v v)
{
    float f[DW_W];
    memcpy(s == 1 ? p : f, &v, sizeof v);
    for (int j = 0; s != 1 && j < DW_W; j++)
        p[j * s] = f[j];
}

/* -- the correlation kernel -- */

/** Taps, each a source pointer for output 0 and a weight. */
typedef struct dw_taps {
    int n;
    const float *p[DW_TMAX];
    float w[DW_TMAX];
} dw_taps;

/** Outputs [i, i + DW_W * nv) of dw_kern, their accumulators held in registers over the taps.
 *  Each output is the taps' products added in list order to +0. */
DW_INLINE void dw_block(float *out, int64_t ocs, int64_t i, int nv, const dw_taps *t, int64_t scs)
{
    dw_v acc[DW_NV];
    for (int v = 0; v < nv; v++)
        acc[v] = dw_splat(0.0f);
    for (int k = 0; k < t->n; k++) {
        const float *p = t->p[k] + i * scs;
        dw_v w = dw_splat(t->w[k]);
        for (int v = 0; v < nv; v++)
            acc[v] = dw_add(acc[v], dw_mul(w, dw_ld(p + DW_W * v * scs, scs)));
    }
    for (int v = 0; v < nv; v++)
        dw_st(out + (i + DW_W * v) * ocs, ocs, acc[v]);
}

/** out[i * ocs] = sum over the taps of w * p[i * scs], i < n. Inlined with constant steps
 *  so that loads and stores are plain vector moves. A last partial vector is done again
 *  overlapping the one before: the outputs it repeats get the same values. */
static inline void dw_kern(float *out, int64_t ocs, int64_t n, const dw_taps *t, int64_t scs)
{
    int64_t i = 0;
    for (; i + DW_W * DW_NV <= n; i += DW_W * DW_NV)
        dw_block(out, ocs, i, DW_NV, t, scs);
    for (; i + 2 * DW_W <= n; i += 2 * DW_W)
        dw_block(out, ocs, i, 2, t, scs);
    for (; i + DW_W <= n; i += DW_W)
        dw_block(out, ocs, i, 1, t, scs);
    if (i < n && n >= DW_W) {
        dw_block(out, ocs, n - DW_W, 1, t, scs);
        return;
    }
    for (; i < n; i++) {
        float acc = 0.0f;
        for (int k = 0; k < t->n; k++)
            acc += t->w[k] * t->p[k][i * scs];
        out[i * ocs] = acc;
    }
}

/* -- forward and backward data: correlations over a zero-padded plane -- */

/* A zero tap adds +-0 when the weight is finite, which leaves any sum begun at +0 as it
 * was (such a sum is never -0): over the padded plane the kernel gives, bit for bit, the
 * sums that leave out-of-bounds taps out. Planes whose filter is not finite run the
 * general loops instead. */

/** The padded source plane: pt rows and pl columns of zeros before the source, hp x wp in
 *  all, the same for every plane of a node. */
typedef struct dw_padg {
    int64_t pt, pl, hp, wp, to; /* to: rows of the stride-1 output stretch */
} dw_padg;

/** Source extent [*lo, *hi) that outputs o < n reach through offsets e = k * d - p (forward
 *  over an input of in elements). */
static void dw_reach_fwd(int64_t k, int64_t s, int64_t p, int64_t d, int64_t in, int64_t n,
                         int64_t *lo, int64_t *hi)
{
    int64_t last = (n - 1) * s + (k - 1) * d - p + 1;
    *lo = -p < 0 ? -p : 0;
    *hi = last > in ? last : in;
}

/** The taps k of one dimension that reach input residue class r of stride s, in order, with
 *  their offsets into the output gradient: input r + s * i meets output i + off. */
static int dw_class_taps(int64_t r, int64_t s, int64_t p, int64_t k, int64_t d, int64_t *off,
                         int *tap)
{
    int n = 0;
    for (int i = 0; i < k; i++) {
        int64_t v = r + p - i * d;
        if (v % s == 0) {
            off[n] = v / s;
            tap[n++] = i;
        }
    }
    return n;
}

/** Output-gradient extent [*lo, *hi) that the residue classes of an input of n elements
 *  reach (backward data; the output gradient has out elements). */
static void dw_reach_bwd(int64_t k, int64_t s, int64_t p, int64_t d, int64_t n, int64_t out,
                         int64_t *lo, int64_t *hi)
{
    *lo = 0;
    *hi = out;
    for (int64_t r = 0; r < s && r < n; r++) {
        int64_t off[DW_KMAX], cnt = (n - r + s - 1) / s;
        int tap[DW_KMAX];
        for (int i = 0, m = dw_class_taps(r, s, p, k, d, off, tap); i < m; i++) {
            *lo = off[i] < *lo ? off[i] : *lo;
            *hi = cnt + off[i] > *hi ? cnt + off[i] : *hi;
        }
    }
}

static dw_padg dw_padg_of(const conv_geom *g, int bwd)
{
    int64_t rl, rh, cl, ch;
    if (bwd) {
        dw_reach_bwd(g->kh, g->sh, g->ph, g->dh, g->h, g->ho, &rl, &rh);
        dw_reach_bwd(g->kw, g->sw, g->pw, g->dw, g->w, g->wo, &cl, &ch);
    } else {
        dw_reach_fwd(g->kh, g->sh, g->ph, g->dh, g->h, g->ho, &rl, &rh);
        dw_reach_fwd(g->kw, g->sw, g->pw, g->dw, g->w, g->wo, &cl, &ch);
    }
    return (dw_padg){-rl, -cl, rh - rl, ch - cl, bwd ? (g->h + g->sh - 1) / g->sh : g->ho};
}

/** dst[i] = src[i] or 0 (src NULL), i < n, by vector moves: rows here are short, and gcc
 *  would otherwise call memcpy and memset for each. */
static inline void dw_copy(float *dst, const float *src, int64_t n)
{
    int64_t i = 0;
    for (; i + DW_W <= n; i += DW_W)
        dw_st(dst + i, 1, src ? dw_ld(src + i, 1) : dw_splat(0.0f));
    for (; i < n; i++)
        dst[i] = src ? src[i] : 0.0f;
}

/** dst[i] = max(src[i], 0), i < n (a NaN stays, as in the reference). */
static inline void dw_copy_relu(float *restrict dst, const float *restrict src, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = src[i] < 0.0f ? 0.0f : src[i];
}

/** pp = the source (with relu, max(source, 0)) with zeros around it; only the margins
 *  are cleared. */
static void dw_pad_fill(float *pp, const dw_padg *pg, const float *src, int64_t srs, int64_t h,
                        int64_t w, int relu)
{
    int64_t wp = pg->wp;
    dw_copy(pp, NULL, pg->pt * wp + pg->pl);
    for (int64_t i = 0; i < h; i++) {
        float *row = pp + (pg->pt + i) * wp + pg->pl;
        if (relu)
            dw_copy_relu(row, src + i * srs, w);
        else
            dw_copy(row, src + i * srs, w);
        dw_copy(row + w, NULL, i + 1 < h ? wp - w : wp - w - pg->pl);
    }
    dw_copy(pp + (pg->pt + h) * wp, NULL, (pg->hp - pg->pt - h) * wp);
}

/** out rows (row step ors, column step ocs) = tmp rows of the padded row length. */
static void dw_copy_out(const float *tmp, int64_t wp, float *out, int64_t ors, int64_t ocs,
                        int64_t oh, int64_t ow)
{
    for (int64_t q = 0; q < oh; q++) {
        if (ocs == 1) {
            dw_copy(out + q * ors, tmp + q * wp, ow);
            continue;
        }
        for (int64_t r = 0; r < ow; r++)
            out[q * ors + r * ocs] = tmp[q * wp + r];
    }
}

static int dw_finite(const conv_geom *g, const conv_t4 *w, int64_t ch)
{
    const float *wp = conv_plane(w, ch, 0);
    int ok = 1;
    for (int64_t a = 0; a < g->kh; a++)
        for (int64_t b = 0; b < g->kw; b++)
            ok &= isfinite(wp[a * w->st[2] + b * w->st[3]]) != 0;
    return ok;
}

/** out [oh, ow] (row step ors, column step ocs) from the taps over the padded plane, one
 *  output per padded element: the rows run as one stretch of the padded row length into
 *  tmp, which is then copied out. */
static void dw_pad_run(const dw_taps *t, const dw_padg *pg, float *tmp, float *out, int64_t ors,
                       int64_t ocs, int64_t oh, int64_t ow)
{
    if (oh <= 0 || ow <= 0)
        return;
    dw_kern(tmp, 1, (oh - 1) * pg->wp + ow, t, 1);
    dw_copy_out(tmp, pg->wp, out, ors, ocs, oh, ow);
}

static void dw_fwd_pad(const conv_geom *g, const dw_padg *pg, const conv_t4 *x, const conv_t4 *w,
                       const conv_t4 *y, int64_t nb, int64_t ch, float *scratch)
{
    float *pp = scratch, *tmp = scratch + pg->hp * pg->wp;
    dw_pad_fill(pp, pg, conv_plane(x, nb, ch), x->st[2], g->h, g->w, g->relu);
    const float *wp = conv_plane(w, ch, 0);
    dw_taps t = {.n = 0};
    for (int64_t a = 0; a < g->kh; a++)
        for (int64_t b = 0; b < g->kw; b++) {
            t.p[t.n] = pp + (pg->pt + a * g->dh - g->ph) * pg->wp + pg->pl + b * g->dw - g->pw;
            t.w[t.n++] = wp[a * w->st[2] + b * w->st[3]];
        }
    dw_pad_run(&t, pg, tmp, conv_plane(y, nb, ch), y->st[2], 1, g->ho, g->wo);
}

/** dx at rows rh + sh * i and columns rw + sw * j: a stride-1 correlation of the padded dy
 *  with the taps that reach that residue class. */
static void dw_bwd_class(const conv_geom *g, const dw_padg *pg, const float *pp, const float *wp,
                         const int64_t *wst, float *tmp, float *dxp, int64_t xrs, int64_t rh,
                         int64_t rw)
{
    int64_t eh[DW_KMAX], ew[DW_KMAX];
    int th[DW_KMAX], tw[DW_KMAX];
    int nr = dw_class_taps(rh, g->sh, g->ph, g->kh, g->dh, eh, th);
    int nc = dw_class_taps(rw, g->sw, g->pw, g->kw, g->dw, ew, tw);
    dw_taps t = {.n = 0};
    for (int a = 0; a < nr; a++)
        for (int b = 0; b < nc; b++) {
            t.p[t.n] = pp + (pg->pt + eh[a]) * pg->wp + pg->pl + ew[b];
            t.w[t.n++] = wp[th[a] * wst[2] + tw[b] * wst[3]];
        }
    dw_pad_run(&t, pg, tmp, dxp + rh * xrs + rw, g->sh * xrs, g->sw,
               (g->h - rh + g->sh - 1) / g->sh, (g->w - rw + g->sw - 1) / g->sw);
}

static void dw_bwd_pad(const conv_geom *g, const dw_padg *pg, const conv_t4 *dy, const conv_t4 *w,
                       const conv_t4 *dx, int64_t nb, int64_t ch, float *scratch)
{
    float *pp = scratch, *tmp = scratch + pg->hp * pg->wp;
    dw_pad_fill(pp, pg, conv_plane(dy, nb, ch), dy->st[2], g->ho, g->wo, 0);
    for (int64_t rh = 0; rh < g->sh && rh < g->h; rh++)
        for (int64_t rw = 0; rw < g->sw && rw < g->w; rw++)
            dw_bwd_class(g, pg, pp, conv_plane(w, ch, 0), w->st, tmp, conv_plane(dx, nb, ch),
                         dx->st[2], rh, rw);
}

/* -- filter gradient: dot products per filter row, each dy vector shared by its taps -- */

/** One plane's filter gradient: dy [oh, ow] under x [h, w] (unit column strides) through
 *  row offsets roff and column offsets coff (source index o * step + off). */
typedef struct dw_fg {
    const float *x, *dy;
    int64_t xrs, drs, h, w, oh, ow, steph, stepw;
    int nr, nc;
    int64_t roff[DW_KMAX], coff[DW_KMAX];
    int64_t clo, chi;    /* dy columns under which every filter column lies inside x */
    const int32_t *mask; /* flat planes: see dw_fg_masks; else NULL */
    int64_t fl, fr;      /* flat planes: each row's columns [fl, fr) are safe for all taps */
} dw_fg;

/** Float lanes of the taps of one filter row, and a tail per tap. */
typedef struct dw_facc {
    dw_v v[DW_KMAX][DW_FV];
    float tail[DW_KMAX];
} dw_facc;

/** Columns [i, i + DW_W * nv) of one row into the K taps' lanes. */
DW_INLINE void dw_fg_cols(dw_facc *f, int K, int nv, const float *dr, const float *xr,
                          const int64_t *coff, int64_t stepw, int64_t i)
{
    dw_v d[DW_FV];
    for (int v = 0; v < nv; v++)
        d[v] = dw_ld(dr + i + DW_W * v, 1);
    for (int b = 0; b < K; b++)
        for (int v = 0; v < nv; v++) {
            dw_v x = dw_ld(xr + (i + DW_W * v) * stepw + coff[b], stepw);
            f->v[b][v] = dw_add(f->v[b][v], dw_mul(d[v], x));
        }
}

/** Columns [r0, r1) of one row, each tap where its source lies inside x, into the tails. */
static inline void dw_fg_points(dw_facc *f, const dw_fg *g, int K, const float *dr, const float *xr,
                                int64_t r0, int64_t r1)
{
    for (int64_t r = r0; r < r1; r++)
        for (int b = 0; b < K; b++) {
            int64_t iw = r * g->stepw + g->coff[b];
            if (iw >= 0 && iw < g->w)
                f->tail[b] += dr[r] * xr[iw];
        }
}

/** dy row q under filter row a: the columns under which every tap lies inside x by
 *  vectors, the rest point by point. */
static inline void dw_fg_row(dw_facc *f, const dw_fg *g, int K, int64_t stepw, int a, int64_t q)
{
    const float *dr = g->dy + q * g->drs, *xr = g->x + (q * g->steph + g->roff[a]) * g->xrs;
    int64_t i = g->clo;
    for (; i + DW_W * DW_FV <= g->chi; i += DW_W * DW_FV)
        dw_fg_cols(f, K, DW_FV, dr, xr, g->coff, stepw, i);
    for (; i + DW_W <= g->chi; i += DW_W)
        dw_fg_cols(f, K, 1, dr, xr, g->coff, stepw, i);
    dw_fg_points(f, g, K, dr, xr, i, g->chi);
    dw_fg_points(f, g, K, dr, xr, 0, g->clo);
    dw_fg_points(f, g, K, dr, xr, g->chi > g->clo ? g->chi : 0, g->ow);
}

/** Positions [i, i + DW_W * nv) of a flat stretch into the K taps' lanes, each tap's products
 *  masked by where its source lies inside x. */
DW_INLINE void dw_fg_mcols(dw_facc *f, const dw_fg *g, int K, int nv, const float *dr,
                           const float *xr, int64_t i)
{
    dw_v d[DW_FV];
    for (int v = 0; v < nv; v++)
        d[v] = dw_ld(dr + i + DW_W * v, 1);
    for (int b = 0; b < K; b++)
        for (int v = 0; v < nv; v++) {
            dw_v prod = dw_mul(d[v], dw_ld(xr + i + DW_W * v + g->coff[b], 1));
            const int32_t *m = g->mask + b * g->oh * g->ow + i + DW_W * v;
            f->v[b][v] = dw_add(f->v[b][v], dw_and(prod, m));
        }
}

/** dy rows [qa, qb) under filter row a of a flat plane (dy and x rows continue each other
 *  with one row length): one stretch from column fl of row qa to column fr of row qb - 1,
 *  where every tap's source lies within the plane, then the two ends point by point. */
static inline void dw_fg_flat(dw_facc *f, const dw_fg *g, int K, int a, int64_t qa, int64_t qb)
{
    const float *xr = g->x + g->roff[a] * g->xrs;
    int64_t s0 = qa * g->ow + g->fl, s1 = (qb - 1) * g->ow + g->fr, i = s0;
    if (s1 - s0 < DW_W) {
        for (int64_t q = qa; q < qb; q++)
            dw_fg_points(f, g, K, g->dy + q * g->drs, xr + q * g->xrs, 0, g->ow);
        return;
    }
    for (; i + DW_W * DW_FV <= s1; i += DW_W * DW_FV)
        dw_fg_mcols(f, g, K, DW_FV, g->dy, xr, i);
    for (; i + DW_W <= s1; i += DW_W)
        dw_fg_mcols(f, g, K, 1, g->dy, xr, i);
    for (; i < s1; i++)
        for (int b = 0; b < K; b++)
            if (g->mask[b * g->oh * g->ow + i])
                f->tail[b] += g->dy[i] * xr[i + g->coff[b]];
    dw_fg_points(f, g, K, g->dy + qa * g->drs, xr + qa * g->xrs, 0, g->fl);
    dw_fg_points(f, g, K, g->dy + (qb - 1) * g->drs, xr + (qb - 1) * g->xrs, g->fr, g->ow);
}

/** part[a * K + b] for the K taps of filter row a: float lanes over DW_FLUSH rows at a time
 *  (a fixed order, whatever the alignment), added to double totals in between. */
static inline void dw_fg_filter_row(const dw_fg *g, int K, int64_t stepw, int a, double *part)
{
    int64_t q0, q1;
    dw_span(&g->roff[a], 1, g->steph, g->h, g->oh, &q0, &q1);
    for (int b = 0; b < K; b++)
        part[a * K + b] = 0.0;
    for (int64_t qb = q0; qb < q1; qb += DW_FLUSH) {
        int64_t qe = q1 < qb + DW_FLUSH ? q1 : qb + DW_FLUSH;
        dw_facc f;
        memset(&f, 0, sizeof f);
        if (g->mask)
            dw_fg_flat(&f, g, K, a, qb, qe);
        for (int64_t q = qb; q < qe && !g->mask; q++)
            dw_fg_row(&f, g, K, stepw, a, q);
        for (int b = 0; b < K; b++) {
            float l[DW_W * DW_FV];
            memcpy(l, f.v[b], sizeof l);
            double s = f.tail[b];
            for (int j = 0; j < DW_W * DW_FV; j++)
                s += l[j];
            part[a * K + b] += s;
        }
    }
}

static void dw_fg_plane(const dw_fg *g, double *part)
{
    for (int a = 0; a < g->nr; a++) {
        if (g->nc == 3 && g->stepw == 1)
            dw_fg_filter_row(g, 3, 1, a, part);
        else if (g->nc == 3 && g->stepw == 2)
            dw_fg_filter_row(g, 3, 2, a, part);
        else if (g->nc == 5 && g->stepw == 1)
            dw_fg_filter_row(g, 5, 1, a, part);
        else if (g->nc == 5 && g->stepw == 2)
            dw_fg_filter_row(g, 5, 2, a, part);
        else
            dw_fg_filter_row(g, g->nc, g->stepw, a, part);
    }
}

/** The problem of plane (nb, ch) but for its mask, which dw_fg_masks adds. */
static dw_fg dw_fg_of(const conv_geom *g, const conv_t4 *x, const conv_t4 *dy, int64_t nb,
                      int64_t ch)
{
    dw_fg f = {.x = conv_plane(x, nb, ch),
               .dy = conv_plane(dy, nb, ch),
               .xrs = x->st[2],
               .drs = dy->st[2],
               .h = g->h,
               .w = g->w,
               .oh = g->ho,
               .ow = g->wo,
               .steph = g->sh,
               .stepw = g->sw,
               .nr = (int)g->kh,
               .nc = (int)g->kw};
    for (int a = 0; a < f.nr; a++)
        f.roff[a] = a * g->dh - g->ph;
    for (int b = 0; b < f.nc; b++)
        f.coff[b] = b * g->dw - g->pw;
    dw_span(f.coff, f.nc, f.stepw, f.w, f.ow, &f.clo, &f.chi);
    return f;
}

/** For planes that run as flat stretches (stride 1, dy rows continuing each other, x rows
 *  in step with them): mask[b * oh * ow + i] = -1 where filter column b lies inside x
 *  under dy element i, else 0; fl and fr as in dw_fg. NULL for other planes, and when
 *  memory ran out (*bad). */
static int32_t *dw_fg_masks(const cpu_exec *e, const conv_geom *g, const conv_t4 *x,
                            const conv_t4 *dy, dw_fg *proto, int *bad)
{
    *bad = 0;
    if (g->sh != 1 || g->sw != 1 || x->st[2] != dy->st[2] || dy->st[2] != g->wo)
        return NULL;
    int64_t n = g->ho * g->wo;
    int32_t *m = cpu_alloc(e, (size_t)(g->kw * n) * sizeof(int32_t) + 1);
    *bad = m == NULL;
    proto->fl = 0;
    proto->fr = g->wo;
    for (int b = 0; m && b < g->kw; b++) {
        int64_t off = proto->coff[b], lo = -off, hi = g->w - off;
        proto->fl = lo > proto->fl ? lo : proto->fl;
        proto->fr = hi < proto->fr ? hi : proto->fr;
        for (int64_t i = 0; i < n; i++)
            m[b * n + i] = i % g->wo >= lo && i % g->wo < hi ? -1 : 0;
    }
    if (m && (proto->fl > g->wo || proto->fr < 0)) {
        /* no stretch can start and end inside the plane for every tap */
        free(m);
        return NULL;
    }
    return m;
}

/* ---- depthwise drivers: one (n, c) plane per task, one thread per plane ---- */

/** Whether the fast path takes these planes: unit column strides, a small filter. */
static int dw_fast_ok(const conv_geom *g, const conv_t4 *a, const conv_t4 *b)
{
    return a->st[3] == 1 && b->st[3] == 1 && g->kh <= DW_KMAX && g->kw <= DW_KMAX;
}

static int dw_nthreads(const cpu_exec *e)
{
#ifdef _OPENMP
    return conv_threads(e);
#else
    (void)e;
    return 1;
#endif
}

static int dw_tid(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/** Each thread's padded plane and output stretch, per floats apart. */
static float *dw_scratch(const cpu_exec *e, const dw_padg *pg, int64_t *per)
{
    *per = (pg->hp + pg->to) * pg->wp + DW_W;
    return cpu_alloc(e, (size_t)(*per * dw_nthreads(e)) * sizeof(float));
}

/** Plane (nb, c) of x as max(x, 0) into dst, dense [h, w]. */
static void dw_relu_plane(const conv_geom *g, const conv_t4 *x, int64_t nb, int64_t c, float *dst)
{
    const float *src = conv_plane(x, nb, c);
    for (int64_t i = 0; i < g->h; i++)
        for (int64_t j = 0; j < g->w; j++) {
            float v = src[i * x->st[2] + j * x->st[3]];
            dst[i * g->w + j] = v < 0.0f ? 0.0f : v;
        }
}

/** Whether the forward pass runs over padded planes (strided outputs skip most of a
 *  padded plane: the row loops do better there). */
static int dw_fwd_padded(const conv_geom *g, const conv_t4 *x, const conv_t4 *y)
{
    return dw_fast_ok(g, x, y) && g->sh == 1 && g->sw == 1;
}

/** The forward pass of one plane by the row loops, on max(x, 0) with g->relu (copied
 *  into scratch, which holds a padded plane). */
static void dw_fwd_rows(const conv_geom *g, const conv_t4 *x, const conv_t4 *w, const conv_t4 *y,
                        int64_t nb, int64_t c, float *scratch)
{
    const float *xp = conv_plane(x, nb, c);
    const int64_t *xs = x->st, dense[4] = {0, 0, g->w, 1};
    if (g->relu) {
        dw_relu_plane(g, x, nb, c, scratch);
        xp = scratch;
        xs = dense;
    }
    dw_fwd_plane(g, xp, xs, conv_plane(y, nb, c), y->st, conv_plane(w, c, 0), w->st);
}

/** With g->relu the planes are read as max(x, 0): only where dw_fwd_padded() holds. */
static ex_status dw_fast_fwd(const cpu_exec *e, const conv_geom *g, const conv_t4 *x,
                             const conv_t4 *w, const conv_t4 *y)
{
    int64_t planes = g->n * g->ci, per = 0;
    int fast = dw_fwd_padded(g, x, y);
    dw_padg pg = dw_padg_of(g, 0);
    float *scratch = fast ? dw_scratch(e, &pg, &per) : NULL;
    if (fast && !scratch)
        return cpu_fail(e, EX_ERR_NOMEM, "dwconv2d: no memory for padded planes");
#pragma omp parallel for schedule(static) num_threads(dw_nthreads(e))
    for (int64_t p = 0; p < planes; p++) {
        int64_t nb = p / g->ci, c = p % g->ci;
        if (fast && dw_finite(g, w, c))
            dw_fwd_pad(g, &pg, x, w, y, nb, c, scratch + dw_tid() * per);
        else
            dw_fwd_rows(g, x, w, y, nb, c, fast ? scratch + dw_tid() * per : NULL);
    }
    free(scratch);
    return EX_OK;
}

static ex_status dw_fast_bwd_data(const cpu_exec *e, const conv_geom *g, const conv_t4 *dy,
                                  const conv_t4 *w, const conv_t4 *dx)
{
    int64_t planes = g->n * g->ci, per = 0;
    int fast = dw_fast_ok(g, dy, dx);
    dw_padg pg = dw_padg_of(g, 1);
    float *scratch = fast ? dw_scratch(e, &pg, &per) : NULL;
    if (fast && !scratch)
        return cpu_fail(e, EX_ERR_NOMEM, "dwconv2d_bwd_data: no memory for padded planes");
#pragma omp parallel for schedule(static) num_threads(dw_nthreads(e))
    for (int64_t p = 0; p < planes; p++) {
        int64_t nb = p / g->ci, c = p % g->ci;
        if (fast && dw_finite(g, w, c))
            dw_bwd_pad(g, &pg, dy, w, dx, nb, c, scratch + dw_tid() * per);
        else
            dw_bwd_data_plane(g, conv_plane(dy, nb, c), dy->st, conv_plane(dx, nb, c), dx->st,
                              conv_plane(w, c, 0), w->st);
    }
    free(scratch);
    return EX_OK;
}

/** Each filter tap's sum over n of its per-plane partials, in index order. */
static void dw_filter_combine(const cpu_exec *e, const conv_geom *g, const double *part,
                              const conv_t4 *dw)
{
    (void)e; /* read by the OpenMP pragma only */
    int64_t kk = g->kh * g->kw, taps = g->ci * kk;
#pragma omp parallel for schedule(static) num_threads(dw_nthreads(e))
    for (int64_t t = 0; t < taps; t++) {
        int64_t c = t / kk, k = t % kk;
        double acc = 0.0;
        for (int64_t nb = 0; nb < g->n; nb++)
            acc += part[(nb * g->ci + c) * kk + k];
        conv_plane(dw, c, 0)[k / g->kw * dw->st[2] + k % g->kw * dw->st[3]] = (float)acc;
    }
}

/** Per-plane partial sums in parallel, then combined over n in index order: no result
 *  depends on how planes were spread over threads. */
static ex_status dw_fast_bwd_filter(const cpu_exec *e, const conv_geom *g, const conv_t4 *x,
                                    const conv_t4 *dy, const conv_t4 *dw)
{
    int64_t planes = g->n * g->ci, kk = g->kh * g->kw;
    double *part = cpu_alloc(e, (size_t)(planes * kk) * sizeof(double) + 1);
    int fast = dw_fast_ok(g, x, dy), bad = 0;
    dw_fg proto = dw_fg_of(g, x, dy, 0, 0);
    int32_t *mask = fast ? dw_fg_masks(e, g, x, dy, &proto, &bad) : NULL;
    if (!part || bad) {
        free(part);
        free(mask);
        return cpu_fail(e, EX_ERR_NOMEM, "dwconv2d_bwd_filter: no memory for partial sums");
    }
#pragma omp parallel for schedule(static) num_threads(dw_nthreads(e))
    for (int64_t p = 0; p < planes; p++) {
        int64_t nb = p / g->ci, c = p % g->ci;
        if (fast) {
            dw_fg f = dw_fg_of(g, x, dy, nb, c);
            f.mask = mask;
            f.fl = proto.fl;
            f.fr = proto.fr;
            dw_fg_plane(&f, part + p * kk);
        } else {
            dw_bwd_filter_plane(g, conv_plane(x, nb, c), x->st, conv_plane(dy, nb, c), dy->st,
                                part + p * kk);
        }
    }
    dw_filter_combine(e, g, part, dw);
    free(part);
    free(mask);
    return EX_OK;
}

/* -- the fused ReLU (ip6): the padded forward planes take max(x, 0) as they are filled;
 * elsewhere the fast kernels run unchanged on a copy, then a mask -- */

/** Replaces x by a contiguous copy of max(x, 0), which *copy owns (free it). */
static ex_status dw_relu_copy(const cpu_exec *e, const conv_geom *g, conv_t4 *x, float **copy,
                              const char *name)
{
    int64_t planes = g->n * g->ci, hw = g->h * g->w;
    float *c = cpu_alloc(e, (size_t)(planes * hw) * sizeof(float) + 1);
    *copy = c;
    if (!c)
        return cpu_fail(e, EX_ERR_NOMEM, "%s: no memory for max(x, 0)", name);
#pragma omp parallel for schedule(static) num_threads(dw_nthreads(e))
    for (int64_t p = 0; p < planes; p++)
        dw_relu_plane(g, x, p / g->ci, p % g->ci, c + p * hw);
    *x = (conv_t4){c, {g->n, g->ci, g->h, g->w}, {g->ci * hw, hw, g->w, 1}};
    return EX_OK;
}

/** dx = 0 where the input x is not above 0 (RELU_BWD's mask). */
static void dw_relu_mask(const cpu_exec *e, const conv_geom *g, const conv_t4 *x, const conv_t4 *dx)
{
    (void)e; /* read by the OpenMP pragma only */
    int64_t planes = g->n * g->ci;
#pragma omp parallel for schedule(static) num_threads(dw_nthreads(e))
    for (int64_t p = 0; p < planes; p++) {
        const float *xp = conv_plane(x, p / g->ci, p % g->ci);
        float *dp = conv_plane(dx, p / g->ci, p % g->ci);
        for (int64_t i = 0; i < g->h; i++)
            for (int64_t j = 0; j < g->w; j++)
                if (!(xp[i * x->st[2] + j * x->st[3]] > 0.0f))
                    dp[i * dx->st[2] + j * dx->st[3]] = 0.0f;
    }
}

/* ---- entry points ---- */

/** The three roles of one node's operands, and the fused ReLU's mask source (the
 *  data gradient's input x). */
typedef struct conv_ops {
    conv_geom g;
    conv_t4 x, w, y, mask;
} conv_ops;

/** The data gradient's third source (fused ReLU): x, shaped like dx. */
static ex_status conv_mask_of(const cpu_exec *e, const ex_node_exec *nd, const char *name,
                              conv_t4 *mask)
{
    if (!ex_td_relu_mask_ok(nd))
        return cpu_fail(e, EX_ERR_SHAPE, "%s: " EX_TD_RELU_MASK_MSG, name);
    *mask = conv_t4_of(&nd->src[2]);
    return EX_OK;
}

static ex_status conv_prepare(const cpu_exec *e, const ex_node_exec *nd, int which, int depthwise,
                              const char *name, conv_ops *o)
{
    int relu = ex_td_conv_relu(nd);
    if (relu < 0 || nd->src == NULL)
        return cpu_fail(e, EX_ERR_ARG, "%s: " EX_TD_CONV_RELU_MSG, name, nd->ip[6], nd->nsrc);
    /* which: 0 forward (x, w -> y), 1 backward data (dy, w -> dx), 2 filter (x, dy -> dw) */
    const ex_tdesc *x = which == 1 ? &nd->dst : &nd->src[0];
    const ex_tdesc *w = which == 2 ? &nd->dst : &nd->src[1];
    const ex_tdesc *y = which == 0 ? &nd->dst : which == 1 ? &nd->src[0] : &nd->src[1];
    ex_status st = conv_geom_of(e, nd, x, w, y, depthwise, name, &o->g);
    if (st == EX_OK && relu && which == 1)
        st = conv_mask_of(e, nd, name, &o->mask);
    if (st != EX_OK)
        return st;
    o->g.relu = relu;
    o->x = conv_t4_of(x);
    o->w = conv_t4_of(w);
    o->y = conv_t4_of(y);
    return EX_OK;
}

/** A depthwise pass on the fast path (which as in conv_prepare), the fused ReLU around it. */
static ex_status dw_fast(const cpu_exec *e, conv_ops *o, int which, const char *name)
{
    float *copy = NULL;
    ex_status st = EX_OK;
    conv_geom fwd = o->g; /* the forward pass's: relu off once x is the copy */
    if (o->g.relu && which != 1 && !(which == 0 && dw_fwd_padded(&o->g, &o->x, &o->y))) {
        st = dw_relu_copy(e, &o->g, &o->x, &copy, name);
        fwd.relu = 0;
    }
    if (st == EX_OK && which == 0)
        st = dw_fast_fwd(e, &fwd, &o->x, &o->w, &o->y);
    else if (st == EX_OK && which == 1)
        st = dw_fast_bwd_data(e, &o->g, &o->y, &o->w, &o->x);
    else if (st == EX_OK)
        st = dw_fast_bwd_filter(e, &o->g, &o->x, &o->y, &o->w);
    if (st == EX_OK && o->g.relu && which == 1)
        dw_relu_mask(e, &o->g, &o->mask, &o->x);
    free(copy);
    return st;
}

/** Runs one dense pass on the fast path: which as in conv_prepare. */
static ex_status conv_fast(const cpu_exec *e, conv_ops *o, int which, const char *name)
{
    conv_ws ws;
    ex_status st = conv_ws_alloc(e, &o->g, &ws, name);
    if (st != EX_OK)
        return st;
    if (which == 0)
        conv_fast_fwd(e, &o->g, &o->x, &o->w, &o->y, &ws);
    else if (which == 1)
        conv_fast_bwd_data(e, &o->g, &o->y, &o->w, &o->x, &ws);
    else
        conv_fast_bwd_filter(e, &o->g, &o->x, &o->y, &o->w, &ws);
    free(ws.col);
    return EX_OK;
}

CPU_OP(conv2d)
{
    conv_ops o;
    ex_status st = conv_prepare(e, n, 0, 0, "conv2d", &o);
    if (st != EX_OK)
        return st;
    if (!e->reference)
        return conv_fast(e, &o, 0, "conv2d");
    conv_ref_fwd(&o.g, o.x, o.w, o.y);
    return EX_OK;
}

CPU_OP(conv2d_bwd_data)
{
    conv_ops o;
    ex_status st = conv_prepare(e, n, 1, 0, "conv2d_bwd_data", &o);
    if (st != EX_OK)
        return st;
    if (!e->reference)
        return conv_fast(e, &o, 1, "conv2d_bwd_data");
    conv_ref_bwd_data(&o.g, o.y, o.w, o.x, NULL);
    return EX_OK;
}

CPU_OP(conv2d_bwd_filter)
{
    conv_ops o;
    ex_status st = conv_prepare(e, n, 2, 0, "conv2d_bwd_filter", &o);
    if (st != EX_OK)
        return st;
    if (!e->reference)
        return conv_fast(e, &o, 2, "conv2d_bwd_filter");
    conv_ref_bwd_filter(&o.g, o.x, o.y, o.w);
    return EX_OK;
}

CPU_OP(dwconv2d)
{
    conv_ops o;
    ex_status st = conv_prepare(e, n, 0, 1, "dwconv2d", &o);
    if (st != EX_OK)
        return st;
    if (!e->reference)
        return dw_fast(e, &o, 0, "dwconv2d");
    conv_ref_fwd(&o.g, o.x, o.w, o.y);
    return EX_OK;
}

CPU_OP(dwconv2d_bwd_data)
{
    conv_ops o;
    ex_status st = conv_prepare(e, n, 1, 1, "dwconv2d_bwd_data", &o);
    if (st != EX_OK)
        return st;
    if (!e->reference)
        return dw_fast(e, &o, 1, "dwconv2d_bwd_data");
    conv_ref_bwd_data(&o.g, o.y, o.w, o.x, &o.mask);
    return EX_OK;
}

CPU_OP(dwconv2d_bwd_filter)
{
    conv_ops o;
    ex_status st = conv_prepare(e, n, 2, 1, "dwconv2d_bwd_filter", &o);
    if (st != EX_OK)
        return st;
    if (!e->reference)
        return dw_fast(e, &o, 2, "dwconv2d_bwd_filter");
    conv_ref_bwd_filter(&o.g, o.x, o.y, o.w);
    return EX_OK;
}
