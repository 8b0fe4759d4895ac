/* Average, max and global average pooling on the CPU, with their backward passes.
 *
 * The reference path walks each window with double accumulators. The fast path runs in
 * parallel over (n, c) planes; each plane belongs to one thread and is summed in a fixed
 * order, so results do not depend on the thread count. Windows are clipped to the input:
 * padding never counts, neither in an average nor as a maximum. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "cpu.h"

#ifdef _OPENMP
#include <omp.h>
#endif

static inline int pool_threads(const cpu_exec *e)
{
#ifdef _OPENMP
    return e->threads > 0 ? e->threads : omp_get_max_threads();
#else
    (void)e;
    return 1;
#endif
}

typedef struct pool_geom {
    int64_t n, c, h, w, ho, wo;
    int64_t kh, kw, sh, sw, ph, pw;
} pool_geom;

/** One (n, c) plane of a 4-d operand: element 0 and the row and column strides. */
typedef struct pool_plane {
    float *p;
    int64_t sr, sc;
} pool_plane;

static pool_plane pool_plane_of(const ex_tdesc *t, int64_t p, int64_t c)
{
    int64_t nb = p / c, ch = p % c;
    return (pool_plane){cpu_f32(t) + nb * t->st[0] + ch * t->st[1], t->st[2], t->st[3]};
}

/** The input rows (or columns) [*a, *b) of the window of output o, clipped to [0, in). */
static void pool_span(int64_t o, int64_t s, int64_t p, int64_t k, int64_t in, int64_t *a,
                      int64_t *b)
{
    int64_t lo = o * s - p, hi = o * s - p + k;
    *a = lo < 0 ? 0 : lo;
    *b = hi > in ? in : hi;
}

/** Whether v replaces best as the window maximum: the first maximum wins, and a NaN wins
 *  once and then stays, so NaNs propagate. */
static inline int pool_better(float v, float best)
{
    return (v > best) | ((v != v) & (best == best));
}

static ex_status pool_check_types(const cpu_exec *e, const ex_node_exec *nd, int nsrc,
                                  const char *name)
{
    if (nd->nsrc != nsrc)
        return cpu_fail(e, EX_ERR_ARG, "%s: expected %d sources, got %d", name, nsrc, nd->nsrc);
    for (int i = 0; i <= nsrc; i++) {
        const ex_tdesc *t = i < nsrc ? &nd->src[i] : &nd->dst;
        if (t->dtype != EX_F32 || t->ndim != 4)
            return cpu_fail(e, EX_ERR_ARG, "%s: operand %d must be a 4-d f32 tensor", name, i);
    }
    return EX_OK;
}

/** Reads the geometry of input in and output out and checks that they agree. Padding must
 *  stay below the window, so that every window holds at least one input element. */
static ex_status pool_geom_of(const cpu_exec *e, const ex_node_exec *nd, const ex_tdesc *in,
                              const ex_tdesc *out, const char *name, pool_geom *g)
{
    const int32_t *ip = nd->ip;
    if (ip[0] < 1 || ip[1] < 1 || ip[2] < 1 || ip[3] < 1 || ip[4] < 0 || ip[5] < 0 ||
        ip[4] >= ip[0] || ip[5] >= ip[1])
        return cpu_fail(e, EX_ERR_ARG, "%s: bad geometry kernel %dx%d stride %dx%d pad %dx%d", name,
                        ip[0], ip[1], ip[2], ip[3], ip[4], ip[5]);
    *g = (pool_geom){.n = in->ne[0],
                     .c = in->ne[1],
                     .h = in->ne[2],
                     .w = in->ne[3],
                     .kh = ip[0],
                     .kw = ip[1],
                     .sh = ip[2],
                     .sw = ip[3],
                     .ph = ip[4],
                     .pw = ip[5]};
    int64_t sh = g->h + 2 * g->ph - g->kh, sw = g->w + 2 * g->pw - g->kw;
    g->ho = sh < 0 ? -1 : sh / g->sh + 1;
    g->wo = sw < 0 ? -1 : sw / g->sw + 1;
    if (g->ho < 1 || g->wo < 1 || out->ne[0] != g->n || out->ne[1] != g->c || out->ne[2] != g->ho ||
        out->ne[3] != g->wo)
        return cpu_fail(e, EX_ERR_SHAPE,
                        "%s: input [%lld,%lld,%lld,%lld] and output [%lld,%lld,%lld,%lld] do "
                        "not fit kernel %dx%d stride %dx%d pad %dx%d",
                        name, (long long)in->ne[0], (long long)in->ne[1], (long long)in->ne[2],
                        (long long)in->ne[3], (long long)out->ne[0], (long long)out->ne[1],
                        (long long)out->ne[2], (long long)out->ne[3], ip[0], ip[1], ip[2], ip[3],
                        ip[4], ip[5]);
    return EX_OK;
}

static ex_status pool_same_shape(const cpu_exec *e, const ex_tdesc *a, const ex_tdesc *b,
                                 const char *name)
{
    for (int d = 0; d < 4; d++)
        if (a->ne[d] != b->ne[d])
            return cpu_fail(e, EX_ERR_SHAPE, "%s: x and dx differ in dimension %d", name, d);
    return EX_OK;
}

/** Window of output (oh, ow): rows [*h0, *h1), columns [*w0, *w1). */
static void pool_window(const pool_geom *g, int64_t oh, int64_t ow, int64_t *h0, int64_t *h1,
                        int64_t *w0, int64_t *w1)
{
    pool_span(oh, g->sh, g->ph, g->kh, g->h, h0, h1);
    pool_span(ow, g->sw, g->pw, g->kw, g->w, w0, w1);
}

/** The outputs o in [*lo, *hi) whose column o * s + off lies in [0, in). */
static void pool_valid(int64_t off, int64_t s, int64_t in, int64_t out, int64_t *lo, int64_t *hi)
{
    int64_t a = off < 0 ? (-off + s - 1) / s : 0;
    int64_t b = off < in ? (in - 1 - off) / s + 1 : 0;
    if (b > out)
        b = out;
    *lo = a < b ? a : b;
    *hi = b;
}

/* ---- average pooling ---- */

static void avg_ref(const pool_geom *g, const ex_tdesc *x, const ex_tdesc *y)
{
    for (int64_t p = 0; p < g->n * g->c; p++) {
        pool_plane xp = pool_plane_of(x, p, g->c), yp = pool_plane_of(y, p, g->c);
        for (int64_t oh = 0; oh < g->ho; oh++)
            for (int64_t ow = 0; ow < g->wo; ow++) {
                int64_t h0, h1, w0, w1;
                pool_window(g, oh, ow, &h0, &h1, &w0, &w1);
                double acc = 0.0;
                for (int64_t ih = h0; ih < h1; ih++)
                    for (int64_t iw = w0; iw < w1; iw++)
                        acc += xp.p[ih * xp.sr + iw * xp.sc];
                yp.p[oh * yp.sr + ow * yp.sc] = (float)(acc / (double)((h1 - h0) * (w1 - w0)));
            }
    }
}

static void avg_row_add(float *restrict y, int64_t ys, const float *restrict x, int64_t xs,
                        int64_t cnt)
{
    if (ys == 1 && xs == 1) {
        for (int64_t i = 0; i < cnt; i++)
            y[i] += x[i];
        return;
    }
    for (int64_t i = 0; i < cnt; i++)
        y[i * ys] += x[i * xs];
}

/** The outputs whose window holds tap (kh, kw) inside the input, rows [oh0, oh1) and
 *  columns [ow0, ow1), and the input element (ih0, iw0) of output (oh0, ow0). Computed once
 *  per tap and plane, so the row loops carry no bounds tests and no divisions. */
typedef struct pool_tap {
    int64_t oh0, oh1, ow0, ow1, ih0, iw0;
} pool_tap;

static pool_tap pool_tap_of(const pool_geom *g, int64_t kh, int64_t kw)
{
    pool_tap t;
    pool_valid(kh - g->ph, g->sh, g->h, g->ho, &t.oh0, &t.oh1);
    pool_valid(kw - g->pw, g->sw, g->w, g->wo, &t.ow0, &t.ow1);
    t.ih0 = t.oh0 * g->sh + kh - g->ph;
    t.iw0 = t.ow0 * g->sw + kw - g->pw;
    return t;
}

static void pool_set(const pool_plane *p, int64_t rows, int64_t cols, float v)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            p->p[r * p->sr + c * p->sc] = v;
}

/** One plane: sums the window tap by tap over whole rows (so the inner loop vectorizes),
 *  then divides by each window's clipped size. */
static void avg_fast_plane(const pool_geom *g, const pool_plane *xp, const pool_plane *yp)
{
    pool_set(yp, g->ho, g->wo, 0.0f);
    for (int64_t kh = 0; kh < g->kh; kh++)
        for (int64_t kw = 0; kw < g->kw; kw++) {
            pool_tap t = pool_tap_of(g, kh, kw);
            for (int64_t oh = t.oh0; oh < t.oh1; oh++) {
                int64_t ih = t.ih0 + (oh - t.oh0) * g->sh;
                avg_row_add(yp->p + oh * yp->sr + t.ow0 * yp->sc, yp->sc,
                            xp->p + ih * xp->sr + t.iw0 * xp->sc, g->sw * xp->sc, t.ow1 - t.ow0);
            }
        }
    for (int64_t oh = 0; oh < g->ho; oh++)
        for (int64_t ow = 0; ow < g->wo; ow++) {
            int64_t h0, h1, w0, w1;
            pool_window(g, oh, ow, &h0, &h1, &w0, &w1);
            yp->p[oh * yp->sr + ow * yp->sc] /= (float)((h1 - h0) * (w1 - w0));
        }
}

static void avg_fast(const cpu_exec *e, const pool_geom *g, const ex_tdesc *x, const ex_tdesc *y)
{
    (void)e; /* read by the OpenMP pragma only */
    int64_t planes = g->n * g->c;
#pragma omp parallel for schedule(static) num_threads(pool_threads(e))
    for (int64_t p = 0; p < planes; p++) {
        pool_plane xp = pool_plane_of(x, p, g->c), yp = pool_plane_of(y, p, g->c);
        avg_fast_plane(g, &xp, &yp);
    }
}

/** Spreads each dy evenly over its window, scattering in output order into a double plane
 *  (buf, h * w) before the plane is written. */
static void avg_bwd_ref(const pool_geom *g, const ex_tdesc *dy, const ex_tdesc *dx, double *buf)
{
    for (int64_t p = 0; p < g->n * g->c; p++) {
        pool_plane dyp = pool_plane_of(dy, p, g->c), dxp = pool_plane_of(dx, p, g->c);
        for (int64_t i = 0; i < g->h * g->w; i++)
            buf[i] = 0.0;
        for (int64_t oh = 0; oh < g->ho; oh++)
            for (int64_t ow = 0; ow < g->wo; ow++) {
                int64_t h0, h1, w0, w1;
                pool_window(g, oh, ow, &h0, &h1, &w0, &w1);
                double v = dyp.p[oh * dyp.sr + ow * dyp.sc] / (double)((h1 - h0) * (w1 - w0));
                for (int64_t ih = h0; ih < h1; ih++)
                    for (int64_t iw = w0; iw < w1; iw++)
                        buf[ih * g->w + iw] += v;
            }
        for (int64_t ih = 0; ih < g->h; ih++)
            for (int64_t iw = 0; iw < g->w; iw++)
                dxp.p[ih * dxp.sr + iw * dxp.sc] = (float)buf[ih * g->w + iw];
    }
}

static void avg_bwd_plane(const pool_geom *g, const pool_plane *dyp, pool_plane *dxp)
{
    pool_set(dxp, g->h, g->w, 0.0f);
    for (int64_t oh = 0; oh < g->ho; oh++)
        for (int64_t ow = 0; ow < g->wo; ow++) {
            int64_t h0, h1, w0, w1;
            pool_window(g, oh, ow, &h0, &h1, &w0, &w1);
            float v = dyp->p[oh * dyp->sr + ow * dyp->sc] / (float)((h1 - h0) * (w1 - w0));
            for (int64_t ih = h0; ih < h1; ih++) {
                float *r = dxp->p + ih * dxp->sr;
                for (int64_t iw = w0; iw < w1; iw++)
                    r[iw * dxp->sc] += v;
            }
        }
}

static void avg_bwd_fast(const cpu_exec *e, const pool_geom *g, const ex_tdesc *dy,
                         const ex_tdesc *dx)
{
    (void)e; /* read by the OpenMP pragma only */
    int64_t planes = g->n * g->c;
#pragma omp parallel for schedule(static) num_threads(pool_threads(e))
    for (int64_t p = 0; p < planes; p++) {
        pool_plane dyp = pool_plane_of(dy, p, g->c), dxp = pool_plane_of(dx, p, g->c);
        avg_bwd_plane(g, &dyp, &dxp);
    }
}

CPU_OP(avg_pool)
{
    pool_geom g;
    ex_status st = pool_check_types(e, n, 1, "avg_pool");
    if (st == EX_OK)
        st = pool_geom_of(e, n, &n->src[0], &n->dst, "avg_pool", &g);
    if (st != EX_OK)
        return st;
    if (e->reference)
        avg_ref(&g, &n->src[0], &n->dst);
    else
        avg_fast(e, &g, &n->src[0], &n->dst);
    return EX_OK;
}

CPU_OP(avg_pool_bwd)
{
    pool_geom g;
    ex_status st = pool_check_types(e, n, 1, "avg_pool_bwd");
    if (st == EX_OK)
        st = pool_geom_of(e, n, &n->dst, &n->src[0], "avg_pool_bwd", &g);
    if (st != EX_OK)
        return st;
    if (!e->reference) {
        avg_bwd_fast(e, &g, &n->src[0], &n->dst);
        return EX_OK;
    }
    double *buf = malloc((size_t)(g.h * g.w) * sizeof(double) + 1);
    if (!buf)
        return cpu_fail(e, EX_ERR_NOMEM, "avg_pool_bwd: no memory for a plane");
    avg_bwd_ref(&g, &n->src[0], &n->dst, buf);
    free(buf);
    return EX_OK;
}

/* ---- max pooling ---- */

/** The first maximum of the window of output (oh, ow): its value and its position. */
static float max_window(const pool_geom *g, const pool_plane *xp, int64_t oh, int64_t ow,
                        int64_t *at_h, int64_t *at_w)
{
    int64_t h0, h1, w0, w1;
    pool_window(g, oh, ow, &h0, &h1, &w0, &w1);
    float best = -INFINITY;
    int64_t bh = h0, bw = w0;
    for (int64_t ih = h0; ih < h1; ih++)
        for (int64_t iw = w0; iw < w1; iw++) {
            /* selects rather than branches: on real data the outcome is unpredictable */
            float v = xp->p[ih * xp->sr + iw * xp->sc];
            int take = pool_better(v, best);
            best = take ? v : best;
            bh = take ? ih : bh;
            bw = take ? iw : bw;
        }
    *at_h = bh;
    *at_w = bw;
    return best;
}

static void max_ref(const pool_geom *g, const ex_tdesc *x, const ex_tdesc *y)
{
    for (int64_t p = 0; p < g->n * g->c; p++) {
        pool_plane xp = pool_plane_of(x, p, g->c), yp = pool_plane_of(y, p, g->c);
        for (int64_t oh = 0; oh < g->ho; oh++)
            for (int64_t ow = 0; ow < g->wo; ow++) {
                int64_t ah, aw;
                yp.p[oh * yp.sr + ow * yp.sc] = max_window(g, &xp, oh, ow, &ah, &aw);
            }
    }
}

static void max_row(float *restrict y, int64_t ys, const float *restrict x, int64_t xs, int64_t cnt)
{
    if (ys == 1 && xs == 1) {
        for (int64_t i = 0; i < cnt; i++)
            y[i] = pool_better(x[i], y[i]) ? x[i] : y[i];
        return;
    }
    for (int64_t i = 0; i < cnt; i++) {
        float v = x[i * xs], b = y[i * ys];
        y[i * ys] = pool_better(v, b) ? v : b;
    }
}

/** One plane, tap by tap over whole rows. Each output meets its window's elements in
 *  row-major order under the same rule as max_window, so both paths agree bit for bit. */
static void max_fast_plane(const pool_geom *g, const pool_plane *xp, const pool_plane *yp)
{
    pool_set(yp, g->ho, g->wo, -INFINITY);
    for (int64_t kh = 0; kh < g->kh; kh++)
        for (int64_t kw = 0; kw < g->kw; kw++) {
            pool_tap t = pool_tap_of(g, kh, kw);
            for (int64_t oh = t.oh0; oh < t.oh1; oh++) {
                int64_t ih = t.ih0 + (oh - t.oh0) * g->sh;
                max_row(yp->p + oh * yp->sr + t.ow0 * yp->sc, yp->sc,
                        xp->p + ih * xp->sr + t.iw0 * xp->sc, g->sw * xp->sc, t.ow1 - t.ow0);
            }
        }
}

static void max_fast(const cpu_exec *e, const pool_geom *g, const ex_tdesc *x, const ex_tdesc *y)
{
    (void)e; /* read by the OpenMP pragma only */
    int64_t planes = g->n * g->c;
#pragma omp parallel for schedule(static) num_threads(pool_threads(e))
    for (int64_t p = 0; p < planes; p++) {
        pool_plane xp = pool_plane_of(x, p, g->c), yp = pool_plane_of(y, p, g->c);
        max_fast_plane(g, &xp, &yp);
    }
}

/** Routes each dy to its window's first maximum, in output order, into buf (h * w
 *  doubles) before the plane is written. */
static void max_bwd_ref(const pool_geom *g, const ex_tdesc *x, const ex_tdesc *dy,
                        const ex_tdesc *dx, double *buf)
{
    for (int64_t p = 0; p < g->n * g->c; p++) {
        pool_plane xp = pool_plane_of(x, p, g->c), dyp = pool_plane_of(dy, p, g->c);
        pool_plane dxp = pool_plane_of(dx, p, g->c);
        for (int64_t i = 0; i < g->h * g->w; i++)
            buf[i] = 0.0;
        for (int64_t oh = 0; oh < g->ho; oh++)
            for (int64_t ow = 0; ow < g->wo; ow++) {
                int64_t ah, aw;
                max_window(g, &xp, oh, ow, &ah, &aw);
                buf[ah * g->w + aw] += dyp.p[oh * dyp.sr + ow * dyp.sc];
            }
        for (int64_t ih = 0; ih < g->h; ih++)
            for (int64_t iw = 0; iw < g->w; iw++)
                dxp.p[ih * dxp.sr + iw * dxp.sc] = (float)buf[ih * g->w + iw];
    }
}

/** One output row's running maxima and their positions (the fast backward's scratch). */
typedef struct max_arg {
    float *best;
    int32_t *ih, *iw; /* 32-bit like the floats, so compare and select vectorize together */
} max_arg;

static inline int pool_tid(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/** Folds one window tap into the running maxima of cnt outputs: x[i * xs] sits at row ih,
 *  column iw0 + i * sw. The take mask is spelled out in integers so the compare and the three
 *  selects vectorize; the rule is pool_better's. */
static void max_arg_tap(const max_arg *m, int64_t o0, const float *restrict x, int64_t xs,
                        int32_t ih, int32_t iw0, int32_t sw, int64_t cnt)
{
    float *restrict best = m->best + o0;
    int32_t *restrict bh = m->ih + o0, *restrict bw = m->iw + o0;
    if (xs == 1) {
        for (int64_t i = 0; i < cnt; i++) {
            float v = x[i], b = best[i];
            int32_t take = -(int32_t)((v > b) | ((v != v) & (b == b)));
            best[i] = take ? v : b;
            bh[i] = (bh[i] & ~take) | (ih & take);
            bw[i] = (bw[i] & ~take) | ((iw0 + (int32_t)i * sw) & take);
        }
        return;
    }
    for (int64_t i = 0; i < cnt; i++) {
        float v = x[i * xs], b = best[i];
        int32_t take = -(int32_t)((v > b) | ((v != v) & (b == b)));
        best[i] = take ? v : b;
        bh[i] = (bh[i] & ~take) | (ih & take);
        bw[i] = (bw[i] & ~take) | ((iw0 + (int32_t)i * sw) & take);
    }
}

/** The first maximum of every window of output row oh, tap by tap across the row. Each
 *  output meets its window in row-major order under max_window's rule, so the positions
 *  are the same as the reference's. */
static void max_arg_row(const pool_geom *g, const pool_plane *xp, int64_t oh, const max_arg *m)
{
    int64_t h0, h1;
    pool_span(oh, g->sh, g->ph, g->kh, g->h, &h0, &h1);
    for (int64_t ow = 0; ow < g->wo; ow++) {
        int64_t w0 = ow * g->sw - g->pw;
        m->best[ow] = -INFINITY;
        m->ih[ow] = (int32_t)h0;
        m->iw[ow] = (int32_t)(w0 < 0 ? 0 : w0);
    }
    for (int64_t ih = h0; ih < h1; ih++)
        for (int64_t kw = 0; kw < g->kw; kw++) {
            int64_t off = kw - g->pw, lo, hi;
            pool_valid(off, g->sw, g->w, g->wo, &lo, &hi);
            const float *xr = xp->p + ih * xp->sr + (lo * g->sw + off) * xp->sc;
            max_arg_tap(m, lo, xr, g->sw * xp->sc, (int32_t)ih, (int32_t)(lo * g->sw + off),
                        (int32_t)g->sw, hi - lo);
        }
}

static ex_status max_bwd_fast(const cpu_exec *e, const pool_geom *g, const ex_tdesc *x,
                              const ex_tdesc *dy, const ex_tdesc *dx)
{
    if (g->h > INT32_MAX || g->w > INT32_MAX)
        return cpu_fail(e, EX_ERR_UNSUPPORTED, "max_pool_bwd: planes beyond 2^31 rows or columns");
    int nt = pool_threads(e);
    size_t per = (size_t)g->wo * (sizeof(float) + 2 * sizeof(int32_t));
    char *scratch = malloc((size_t)nt * per + 1);
    if (!scratch)
        return cpu_fail(e, EX_ERR_NOMEM, "max_pool_bwd: no memory for row scratch");
    int64_t planes = g->n * g->c;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t p = 0; p < planes; p++) {
        char *mine = scratch + (size_t)pool_tid() * per;
        max_arg m = {(float *)mine, (int32_t *)(mine + sizeof(float) * (size_t)g->wo),
                     (int32_t *)(mine + sizeof(float) * (size_t)g->wo) + g->wo};
        pool_plane xp = pool_plane_of(x, p, g->c), dyp = pool_plane_of(dy, p, g->c);
        pool_plane dxp = pool_plane_of(dx, p, g->c);
        pool_set(&dxp, g->h, g->w, 0.0f);
        for (int64_t oh = 0; oh < g->ho; oh++) {
            max_arg_row(g, &xp, oh, &m);
            for (int64_t ow = 0; ow < g->wo; ow++)
                dxp.p[m.ih[ow] * dxp.sr + m.iw[ow] * dxp.sc] += dyp.p[oh * dyp.sr + ow * dyp.sc];
        }
    }
    free(scratch);
    return EX_OK;
}

CPU_OP(max_pool)
{
    pool_geom g;
    ex_status st = pool_check_types(e, n, 1, "max_pool");
    if (st == EX_OK)
        st = pool_geom_of(e, n, &n->src[0], &n->dst, "max_pool", &g);
    if (st != EX_OK)
        return st;
    if (e->reference)
        max_ref(&g, &n->src[0], &n->dst);
    else
        max_fast(e, &g, &n->src[0], &n->dst);
    return EX_OK;
}

CPU_OP(max_pool_bwd)
{
    pool_geom g;
    ex_status st = pool_check_types(e, n, 2, "max_pool_bwd");
    if (st == EX_OK)
        st = pool_geom_of(e, n, &n->src[0], &n->src[1], "max_pool_bwd", &g);
    if (st == EX_OK)
        st = pool_same_shape(e, &n->src[0], &n->dst, "max_pool_bwd");
    if (st != EX_OK)
        return st;
    if (!e->reference)
        return max_bwd_fast(e, &g, &n->src[0], &n->src[1], &n->dst);
    double *buf = malloc((size_t)(g.h * g.w) * sizeof(double) + 1);
    if (!buf)
        return cpu_fail(e, EX_ERR_NOMEM, "max_pool_bwd: no memory for a plane");
    max_bwd_ref(&g, &n->src[0], &n->src[1], &n->dst, buf);
    free(buf);
    return EX_OK;
}

/* ---- global average pooling ---- */

/** Sum of one plane: each row in eight fixed lanes (vectorizable without reassociation),
 *  rows added in order in double. */
static double gap_plane_sum(const pool_plane *xp, int64_t h, int64_t w)
{
    double acc = 0.0;
    for (int64_t ih = 0; ih < h; ih++) {
        const float *r = xp->p + ih * xp->sr;
        float lane[8] = {0};
        int64_t iw = 0;
        if (xp->sc == 1)
            for (; iw + 8 <= w; iw += 8)
                for (int j = 0; j < 8; j++)
                    lane[j] += r[iw + j];
        for (; iw < w; iw++)
            acc += r[iw * xp->sc];
        for (int j = 0; j < 8; j++)
            acc += lane[j];
    }
    return acc;
}

static void gap_ref(const ex_tdesc *x, const ex_tdesc *y, double inv)
{
    for (int64_t p = 0; p < x->ne[0] * x->ne[1]; p++) {
        pool_plane xp = pool_plane_of(x, p, x->ne[1]);
        double acc = 0.0;
        for (int64_t ih = 0; ih < x->ne[2]; ih++)
            for (int64_t iw = 0; iw < x->ne[3]; iw++)
                acc += xp.p[ih * xp.sr + iw * xp.sc];
        *pool_plane_of(y, p, y->ne[1]).p = (float)(acc * inv);
    }
}

CPU_OP(global_avg_pool)
{
    ex_status st = pool_check_types(e, n, 1, "global_avg_pool");
    if (st != EX_OK)
        return st;
    const ex_tdesc *x = &n->src[0], *y = &n->dst;
    if (y->ne[0] != x->ne[0] || y->ne[1] != x->ne[1] || y->ne[2] != 1 || y->ne[3] != 1 ||
        x->ne[2] * x->ne[3] < 1)
        return cpu_fail(
            e, EX_ERR_SHAPE, "global_avg_pool: x [%lld,%lld,%lld,%lld] -> y [%lld,%lld,%lld,%lld]",
            (long long)x->ne[0], (long long)x->ne[1], (long long)x->ne[2], (long long)x->ne[3],
            (long long)y->ne[0], (long long)y->ne[1], (long long)y->ne[2], (long long)y->ne[3]);
    int64_t planes = x->ne[0] * x->ne[1], c = x->ne[1], h = x->ne[2], w = x->ne[3];
    double inv = 1.0 / (double)(h * w);
    if (e->reference) {
        gap_ref(x, y, inv);
        return EX_OK;
    }
#pragma omp parallel for schedule(static) num_threads(pool_threads(e))
    for (int64_t p = 0; p < planes; p++) {
        pool_plane xp = pool_plane_of(x, p, c);
        *pool_plane_of(y, p, c).p = (float)(gap_plane_sum(&xp, h, w) * inv);
    }
    return EX_OK;
}
