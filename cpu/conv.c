/* Dense 2-D convolution on the CPU, forward and both backward passes, and what the
 * depthwise one (cpu/dwconv.c) shares with it: the geometry, the operand checks and the
 * reference loops.
 *
 * The reference path is one plain loop nest per op (shared by dense and depthwise) with
 * double accumulators. The fast path lowers dense convolution to im2col + sgemm over groups
 * of samples. Every parallel loop gives each output to one thread with a fixed summation
 * order, so results do not depend on the thread count. */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/conv.h"

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
#endif

int conv_threads(const cpu_exec *e)
{
#ifdef _OPENMP
    return e->threads > 0 ? e->threads : omp_get_max_threads();
#else
    (void)e;
    return 1;
#endif
}

void conv_valid(int64_t off, int64_t s, int64_t in, int64_t out, int64_t *lo, int64_t *hi)
{
    int64_t a = off < 0 ? (-off + s - 1) / s : 0;
    int64_t b = off < in ? (in - 1 - off) / s + 1 : 0;
    if (b > out)
        b = out;
    *lo = a < b ? a : b;
    *hi = b;
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

void conv_ref_fwd(const conv_geom *g, conv_t4 x, conv_t4 w, conv_t4 y)
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
void conv_ref_bwd_data(const conv_geom *g, conv_t4 dy, conv_t4 w, conv_t4 dx, const conv_t4 *mask)
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

void conv_ref_bwd_filter(const conv_geom *g, conv_t4 x, conv_t4 dy, conv_t4 dw)
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

/* ---- entry points ---- */

ex_status conv_prepare(const cpu_exec *e, const ex_node_exec *nd, const char *name, conv_ops *o)
{
    ex_td_conv c;
    char why[320];
    ex_status st = ex_td_conv_of(nd, &c, why, sizeof why);
    if (st != EX_OK)
        return cpu_fail(e, st, "%s: %s", name, why);
    o->g = c.g;
    o->x = conv_t4_of(c.x);
    o->w = conv_t4_of(c.w);
    o->y = conv_t4_of(c.y);
    if (c.mask)
        o->mask = conv_t4_of(c.mask);
    return EX_OK;
}

/** Runs one dense pass on the fast path: which is 0 forward, 1 data gradient, 2 filter
 *  gradient. */
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
    ex_status st = conv_prepare(e, n, "conv2d", &o);
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
    ex_status st = conv_prepare(e, n, "conv2d_bwd_data", &o);
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
    ex_status st = conv_prepare(e, n, "conv2d_bwd_filter", &o);
    if (st != EX_OK)
        return st;
    if (!e->reference)
        return conv_fast(e, &o, 2, "conv2d_bwd_filter");
    conv_ref_bwd_filter(&o.g, o.x, o.y, o.w);
    return EX_OK;
}
