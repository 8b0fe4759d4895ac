/* Batch norm 2d on the CPU: statistics (with the running-statistics update), apply, and the
 * two backward passes; and the forms of a synchronized batch norm (docs/ops.md): the local
 * mean and biased variance (BN_STATS, ip1 = 1) from the same sums as the statistics, the
 * finish from the group's (ip1 = 2), and backward-data over R ranks' count (ip2).
 *
 * Per-channel sums end in double. The fast path computes one partial sum per (n, c) plane
 * in parallel, as float vector lanes over fixed chunks of a plane's contiguous runs added
 * into doubles, and then adds each channel's partials over n in index order, so results do
 * not depend on the thread count; the reference path sums each channel in one plain loop
 * (two passes for the variance). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

#ifdef _OPENMP
#include <omp.h>

/* Only the OpenMP pragmas read it; without OpenMP every loop runs on the calling thread. */
static int bn_threads(const cpu_exec *e)
{
    return e->threads > 0 ? e->threads : omp_get_max_threads();
}
#endif

/** A per-channel vector: a [C] tensor or one row of a [2, C] one. */
typedef struct bn_vec {
    float *p;
    int64_t s;
} bn_vec;

static bn_vec bn_vec_of(const ex_tdesc *t)
{
    return (bn_vec){cpu_f32(t), t->st[0]};
}
static bn_vec bn_row(const ex_tdesc *t, int r)
{
    return (bn_vec){cpu_f32(t) + r * t->st[0], t->st[1]};
}
static inline float bn_get(bn_vec v, int64_t c)
{
    return v.p[c * v.s];
}
static inline void bn_set(bn_vec v, int64_t c, float x)
{
    v.p[c * v.s] = x;
}

/** One (n, c) plane of a 4-d operand. */
typedef struct bn_plane {
    float *p;
    int64_t sr, sc;
} bn_plane;

static bn_plane bn_plane_of(const ex_tdesc *t, int64_t nb, int64_t c)
{
    return (bn_plane){cpu_f32(t) + nb * t->st[0] + c * t->st[1], t->st[2], t->st[3]};
}

static inline float *bn_px(const bn_plane *p, int64_t h, int64_t w)
{
    return p->p + h * p->sr + w * p->sc;
}

/** x's shape and M = N*H*W, the count behind every per-channel statistic, decoded in core
 *  (core/tdesc.h). */
typedef ex_td_bn bn_geom;

/* ---- contiguous runs and float vectors for the fast path ---- */

/** Elements a float lane sums before its sum goes into a double: long planes keep double
 *  precision, and the order is fixed by the plane's shape alone. */
#define BN_CHUNK 256

/* Vectors of BN_W floats: 8 where the compiler targets AVX, else 4. With gcc and clang the
 * compilers' vector extension (plain-C lane loops leave gcc 12 splitting accumulators into
 * scalars); elsewhere plain structs, run element by element. */
#if defined(__AVX__)
#define BN_W 8
#else
#define BN_W 4
#endif
#if defined(__GNUC__) || defined(__clang__)
typedef float bn_v __attribute__((vector_size(4 * BN_W)));
static inline bn_v bn_add(bn_v a, bn_v b)
{
    return a + b;
}
static inline bn_v bn_sub(bn_v a, bn_v b)
{
    return a - b;
}
static inline bn_v bn_mul(bn_v a, bn_v b)
{
    return a * b;
}
#else
typedef struct bn_v {
    float f[BN_W];
} bn_v;
static inline bn_v bn_add(bn_v a, bn_v b)
{
    for (int j = 0; j < BN_W; j++)
        a.f[j] += b.f[j];
    return a;
}
static inline bn_v bn_sub(bn_v a, bn_v b)
{
    for (int j = 0; j < BN_W; j++)
        a.f[j] -= b.f[j];
    return a;
}
static inline bn_v bn_mul(bn_v a, bn_v b)
{
    for (int j = 0; j < BN_W; j++)
        a.f[j] *= b.f[j];
    return a;
}
#endif

static inline bn_v bn_splat(float x)
{
    float f[BN_W];
    for (int j = 0; j < BN_W; j++)
        f[j] = x;
    bn_v v;
    memcpy(&v, f, sizeof v);
    return v;
}

static inline bn_v bn_ld(const float *p)
{
    bn_v v;
    memcpy(&v, p, sizeof v);
    return v;
}

/** Adds the lanes of two vectors to tot in a fixed order. */
static inline void bn_flush(double *tot, bn_v a, bn_v b)
{
    float f[2 * BN_W];
    memcpy(f, &a, sizeof a);
    memcpy(f + BN_W, &b, sizeof b);
    double s = 0.0;
    for (int j = 0; j < 2 * BN_W; j++)
        s += f[j];
    *tot += s;
}

/** How the planes ps[0..np) of [h, w] split into runs of contiguous elements: *nruns runs of
 *  *len, run k of plane i at ps[i].p + k * ps[i].sr. One run for the whole plane where rows
 *  continue each other. 0 where a plane has strided columns. */
static int bn_runs(const bn_plane *ps, int np, int64_t h, int64_t w, int64_t *nruns, int64_t *len)
{
    int flat = 1;
    for (int i = 0; i < np; i++) {
        if (ps[i].sc != 1)
            return 0;
        flat &= h == 1 || ps[i].sr == w;
    }
    *nruns = flat ? 1 : h;
    *len = flat ? h * w : w;
    return 1;
}

/* ---- shape checks ---- */

/** Checks a BN_APPLY, BN_BWD_REDUCE or BN_BWD_DATA node (ex_td_bn_of) and fills g. */
static ex_status bn_of(const cpu_exec *e, const ex_node_exec *nd, const char *name, bn_geom *g)
{
    char why[256];
    ex_status st = ex_td_bn_of(nd, g, why, sizeof why);
    return st == EX_OK ? EX_OK : cpu_fail(e, st, "%s: %s", name, why);
}

/** x [n, c, h, w] of a BN_STATS node that ex_td_bn_stats_check accepted, as g. */
static void bn_stats_geom(const ex_node_exec *nd, bn_geom *g)
{
    const ex_tdesc *x = &nd->src[0];
    *g = (bn_geom){x->ne[0], x->ne[1], x->ne[2], x->ne[3], x->ne[0] * x->ne[2] * x->ne[3]};
}

/* ---- statistics ---- */

/** Sum and sum of squares of one plane, rows in four fixed double lanes when unit-stride
 *  so the compiler may vectorize without reassociating. */
static void bn_plane_moments(const bn_plane *x, int64_t h, int64_t w, double *s1, double *s2)
{
    double a[4] = {0}, b[4] = {0}, r1 = 0.0, r2 = 0.0;
    for (int64_t ih = 0; ih < h; ih++) {
        const float *r = bn_px(x, ih, 0);
        int64_t iw = 0;
        if (x->sc == 1)
            for (; iw + 4 <= w; iw += 4)
                for (int j = 0; j < 4; j++) {
                    a[j] += r[iw + j];
                    b[j] += (double)r[iw + j] * r[iw + j];
                }
        for (; iw < w; iw++) {
            double v = r[iw * x->sc];
            r1 += v;
            r2 += v * v;
        }
    }
    *s1 = r1 + ((a[0] + a[1]) + (a[2] + a[3]));
    *s2 = r2 + ((b[0] + b[1]) + (b[2] + b[3]));
}

/** Writes channel c's result from its mean and biased variance over m values: the moments
 *  (ip1 = 1: the mean and the biased variance themselves, nothing else), or mean and invstd
 *  and, in training, the running statistics moved towards the batch's (the variance
 *  unbiased, PyTorch's convention). */
static void bn_finish(const ex_node_exec *nd, int64_t m, int64_t c, double mean, double var)
{
    int train = nd->ip[0] != 0;
    double eps = nd->fp[0], mom = nd->fp[1];
    bn_set(bn_row(&nd->dst, 0), c, (float)mean);
    if (nd->ip[1] == EX_BN_STATS_MOMENTS) {
        bn_set(bn_row(&nd->dst, 1), c, (float)var);
        return;
    }
    bn_set(bn_row(&nd->dst, 1), c, (float)(1.0 / sqrt(var + eps)));
    if (!train)
        return;
    bn_vec rm = bn_vec_of(&nd->src[1]), rv = bn_vec_of(&nd->src[2]);
    double unbiased = var * (double)m / (double)(m - 1);
    bn_set(rm, c, (float)((1.0 - mom) * bn_get(rm, c) + mom * mean));
    bn_set(rv, c, (float)((1.0 - mom) * bn_get(rv, c) + mom * unbiased));
}

static void bn_stats_ref(const ex_node_exec *nd, const bn_geom *g)
{
    for (int64_t c = 0; c < g->c; c++) {
        double s = 0.0, q = 0.0;
        for (int64_t nb = 0; nb < g->n; nb++) {
            bn_plane x = bn_plane_of(&nd->src[0], nb, c);
            for (int64_t ih = 0; ih < g->h; ih++)
                for (int64_t iw = 0; iw < g->w; iw++)
                    s += *bn_px(&x, ih, iw);
        }
        double mean = s / (double)g->m;
        for (int64_t nb = 0; nb < g->n; nb++) {
            bn_plane x = bn_plane_of(&nd->src[0], nb, c);
            for (int64_t ih = 0; ih < g->h; ih++)
                for (int64_t iw = 0; iw < g->w; iw++) {
                    double d = *bn_px(&x, ih, iw) - mean;
                    q += d * d;
                }
        }
        bn_finish(nd, g->m, c, mean, q / (double)g->m);
    }
}

/** Adds the sums of d = x - shift and of d * d over n contiguous floats to s[0] and s[1]:
 *  float lanes over BN_CHUNK elements at a time, then into the doubles. */
static void bn_run_moments(const float *x, int64_t n, float shift, double *s)
{
    bn_v sh = bn_splat(shift);
    for (int64_t c0 = 0; c0 < n; c0 += BN_CHUNK) {
        int64_t c1 = n - c0 < BN_CHUNK ? n : c0 + BN_CHUNK, i = c0;
        bn_v a0 = bn_splat(0.0f), a1 = a0, b0 = a0, b1 = a0;
        for (; i + 2 * BN_W <= c1; i += 2 * BN_W) {
            bn_v d0 = bn_sub(bn_ld(x + i), sh), d1 = bn_sub(bn_ld(x + i + BN_W), sh);
            a0 = bn_add(a0, d0);
            a1 = bn_add(a1, d1);
            b0 = bn_add(b0, bn_mul(d0, d0));
            b1 = bn_add(b1, bn_mul(d1, d1));
        }
        for (; i < c1; i++) {
            float d = x[i] - shift;
            s[0] += d;
            s[1] += d * d;
        }
        bn_flush(&s[0], a0, a1);
        bn_flush(&s[1], b0, b1);
    }
}

/** part = {shift, sum of x - shift, sum of its square} over one plane. The shift is the
 *  plane's first element (0 if not finite), so that float squares do not cancel away the
 *  variance when the mean is large. */
static void bn_plane_stats(const bn_plane *x, int64_t h, int64_t w, double *part)
{
    int64_t nr, len;
    float shift = isfinite(x->p[0]) ? x->p[0] : 0.0f;
    part[0] = shift;
    part[1] = part[2] = 0.0;
    if (!bn_runs(x, 1, h, w, &nr, &len)) {
        part[0] = 0.0;
        bn_plane_moments(x, h, w, &part[1], &part[2]);
        return;
    }
    for (int64_t k = 0; k < nr; k++)
        bn_run_moments(x->p + k * x->sr, len, shift, part + 1);
}

/** Each channel's mean and biased variance from its planes' shifted sums, over n in index
 *  order: sum (x - mean)^2 = s2 + 2 (shift - mean) s1 + H W (shift - mean)^2 per plane. */
static void bn_stats_combine(const ex_node_exec *nd, const bn_geom *g, const double *part)
{
    double hw = (double)(g->h * g->w), m = (double)g->m;
    for (int64_t c = 0; c < g->c; c++) {
        double sum = 0.0, q = 0.0;
        for (int64_t nb = 0; nb < g->n; nb++) {
            const double *pp = part + 3 * (nb * g->c + c);
            sum += hw * pp[0] + pp[1];
        }
        double mean = sum / m;
        for (int64_t nb = 0; nb < g->n; nb++) {
            const double *pp = part + 3 * (nb * g->c + c);
            double dd = pp[0] - mean;
            q += pp[2] + 2.0 * dd * pp[1] + hw * dd * dd;
        }
        /* rounding may take q below 0; a NaN passes, as in the reference */
        bn_finish(nd, g->m, c, mean, q < 0.0 ? 0.0 : q / m);
    }
}

static ex_status bn_stats_fast(const cpu_exec *e, const ex_node_exec *nd, const bn_geom *g)
{
    int64_t planes = g->n * g->c;
    double *part = cpu_alloc(e, (size_t)(3 * planes) * sizeof(double) + 1);
    if (!part)
        return cpu_fail(e, EX_ERR_NOMEM, "bn_stats: no memory for partial sums");
#pragma omp parallel for schedule(static) num_threads(bn_threads(e))
    for (int64_t p = 0; p < planes; p++) {
        bn_plane x = bn_plane_of(&nd->src[0], p / g->c, p % g->c);
        bn_plane_stats(&x, g->h, g->w, part + 3 * p);
    }
    bn_stats_combine(nd, g, part);
    free(part);
    return EX_OK;
}

/** The finish of a synchronized batch norm (ip1 = 2): each channel's statistics from the
 *  group's mean and biased variance (source 0, combined over the ranks by the engine), the
 *  variance taken as 0 where below (a NaN passes), over ip2 values. A pass over C values,
 *  the same on both paths. */
static void bn_stats_from_moments(const ex_node_exec *nd, int64_t c)
{
    bn_vec m0 = bn_row(&nd->src[0], 0), m1 = bn_row(&nd->src[0], 1);
    for (int64_t k = 0; k < c; k++) {
        double mean = bn_get(m0, k), var = bn_get(m1, k);
        bn_finish(nd, nd->ip[2], k, mean, var < 0.0 ? 0.0 : var);
    }
}

CPU_OP(bn_stats)
{
    char why[256];
    int form;
    int64_t c;
    ex_status st = ex_td_bn_stats_check(n, &form, &c, why, sizeof why);
    if (st != EX_OK)
        return cpu_fail(e, st, "bn_stats: %s", why);
    if (form == EX_BN_STATS_FINISH) {
        bn_stats_from_moments(n, c);
        return EX_OK;
    }
    bn_geom g;
    bn_stats_geom(n, &g);
    if (!n->ip[0]) {
        bn_vec rm = bn_vec_of(&n->src[1]), rv = bn_vec_of(&n->src[2]);
        for (int64_t k = 0; k < g.c; k++)
            bn_finish(n, g.m, k, bn_get(rm, k), bn_get(rv, k));
        return EX_OK;
    }
    if (!e->reference)
        return bn_stats_fast(e, n, &g);
    bn_stats_ref(n, &g);
    return EX_OK;
}

/* ---- apply ---- */

/** Channel c's affine map y = x * a + b (the fast path folds stats, gamma and beta). */
static void bn_fold(const ex_node_exec *nd, int64_t c, float *a, float *b)
{
    float mean = bn_get(bn_row(&nd->src[1], 0), c), inv = bn_get(bn_row(&nd->src[1], 1), c);
    float gm = nd->nsrc == 4 ? bn_get(bn_vec_of(&nd->src[2]), c) : 1.0f;
    float bt = nd->nsrc == 4 ? bn_get(bn_vec_of(&nd->src[3]), c) : 0.0f;
    *a = inv * gm;
    *b = bt - mean * *a;
}

static void bn_run_apply(const float *x, float *y, int64_t n, float a, float b)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] * a + b;
}

static void bn_apply_plane(const bn_plane *x, const bn_plane *y, int64_t h, int64_t w, float a,
                           float b)
{
    bn_plane ps[2] = {*x, *y};
    int64_t nr, len;
    if (bn_runs(ps, 2, h, w, &nr, &len)) {
        for (int64_t k = 0; k < nr; k++)
            bn_run_apply(x->p + k * x->sr, y->p + k * y->sr, len, a, b);
        return;
    }
    for (int64_t ih = 0; ih < h; ih++) {
        const float *xr = bn_px(x, ih, 0);
        float *yr = bn_px(y, ih, 0);
        for (int64_t iw = 0; iw < w; iw++)
            yr[iw * y->sc] = xr[iw * x->sc] * a + b;
    }
}

static void bn_apply_ref(const ex_node_exec *nd, const bn_geom *g)
{
    bn_vec mean = bn_row(&nd->src[1], 0), inv = bn_row(&nd->src[1], 1);
    for (int64_t nb = 0; nb < g->n; nb++)
        for (int64_t c = 0; c < g->c; c++) {
            double gm = nd->nsrc == 4 ? bn_get(bn_vec_of(&nd->src[2]), c) : 1.0;
            double bt = nd->nsrc == 4 ? bn_get(bn_vec_of(&nd->src[3]), c) : 0.0;
            bn_plane x = bn_plane_of(&nd->src[0], nb, c), y = bn_plane_of(&nd->dst, nb, c);
            for (int64_t ih = 0; ih < g->h; ih++)
                for (int64_t iw = 0; iw < g->w; iw++) {
                    double xh = ((double)*bn_px(&x, ih, iw) - bn_get(mean, c)) * bn_get(inv, c);
                    *bn_px(&y, ih, iw) = (float)(xh * gm + bt);
                }
        }
}

CPU_OP(bn_apply)
{
    bn_geom g;
    ex_status st = bn_of(e, n, "bn_apply", &g);
    if (st != EX_OK)
        return st;
    if (e->reference) {
        bn_apply_ref(n, &g);
        return EX_OK;
    }
    int64_t planes = g.n * g.c;
#pragma omp parallel for schedule(static) num_threads(bn_threads(e))
    for (int64_t p = 0; p < planes; p++) {
        float a, b;
        bn_fold(n, p % g.c, &a, &b);
        bn_plane x = bn_plane_of(&n->src[0], p / g.c, p % g.c);
        bn_plane y = bn_plane_of(&n->dst, p / g.c, p % g.c);
        bn_apply_plane(&x, &y, g.h, g.w, a, b);
    }
    return EX_OK;
}

/* ---- backward ---- */

/** Sums of dy * xhat and dy over one plane, xhat = (x - mean) * inv. */
static void bn_plane_dot(const bn_plane *x, const bn_plane *dy, int64_t h, int64_t w, float mean,
                         float inv, double *sxh, double *sdy)
{
    double a[4] = {0}, b[4] = {0}, r1 = 0.0, r2 = 0.0;
    for (int64_t ih = 0; ih < h; ih++) {
        const float *xr = bn_px(x, ih, 0), *dr = bn_px(dy, ih, 0);
        int64_t iw = 0;
        if (x->sc == 1 && dy->sc == 1)
            for (; iw + 4 <= w; iw += 4)
                for (int j = 0; j < 4; j++) {
                    a[j] += (double)dr[iw + j] * ((xr[iw + j] - mean) * inv);
                    b[j] += dr[iw + j];
                }
        for (; iw < w; iw++) {
            float d = dr[iw * dy->sc];
            r1 += (double)d * ((xr[iw * x->sc] - mean) * inv);
            r2 += d;
        }
    }
    *sxh = r1 + ((a[0] + a[1]) + (a[2] + a[3]));
    *sdy = r2 + ((b[0] + b[1]) + (b[2] + b[3]));
}

/** Adds the sums of dy * xhat and of dy over n contiguous elements to s[0] and s[1], xhat =
 *  (x - mean) * inv: float lanes over BN_CHUNK elements at a time, then into the doubles. */
static void bn_run_dot(const float *x, const float *dy, int64_t n, float mean, float inv, double *s)
{
    bn_v mv = bn_splat(mean), iv = bn_splat(inv);
    for (int64_t c0 = 0; c0 < n; c0 += BN_CHUNK) {
        int64_t c1 = n - c0 < BN_CHUNK ? n : c0 + BN_CHUNK, i = c0;
        bn_v a0 = bn_splat(0.0f), a1 = a0, b0 = a0, b1 = a0;
        for (; i + 2 * BN_W <= c1; i += 2 * BN_W) {
            bn_v d0 = bn_ld(dy + i), d1 = bn_ld(dy + i + BN_W);
            bn_v h0 = bn_mul(bn_sub(bn_ld(x + i), mv), iv);
            bn_v h1 = bn_mul(bn_sub(bn_ld(x + i + BN_W), mv), iv);
            a0 = bn_add(a0, bn_mul(d0, h0));
            a1 = bn_add(a1, bn_mul(d1, h1));
            b0 = bn_add(b0, d0);
            b1 = bn_add(b1, d1);
        }
        for (; i < c1; i++) {
            s[0] += dy[i] * ((x[i] - mean) * inv);
            s[1] += dy[i];
        }
        bn_flush(&s[0], a0, a1);
        bn_flush(&s[1], b0, b1);
    }
}

/** bn_plane_dot by contiguous runs where the planes allow. */
static void bn_plane_dot_runs(const bn_plane *x, const bn_plane *dy, int64_t h, int64_t w,
                              float mean, float inv, double *s)
{
    bn_plane ps[2] = {*x, *dy};
    int64_t nr, len;
    if (!bn_runs(ps, 2, h, w, &nr, &len)) {
        bn_plane_dot(x, dy, h, w, mean, inv, &s[0], &s[1]);
        return;
    }
    s[0] = s[1] = 0.0;
    for (int64_t k = 0; k < nr; k++)
        bn_run_dot(x->p + k * x->sr, dy->p + k * dy->sr, len, mean, inv, s);
}

/** Channel c's mean and inv that turn source 0 into x̂ = (src0 - mean) * inv: the
 *  statistics, or 0 and 1 when the source is x̂ already (ip1). */
static void bn_xhat_coefs(const ex_node_exec *nd, int64_t c, float *mean, float *inv)
{
    bool xhat = nd->ip[1] == 1;
    *mean = xhat ? 0.0f : bn_get(bn_row(&nd->src[1], 0), c);
    *inv = xhat ? 1.0f : bn_get(bn_row(&nd->src[1], 1), c);
}

static void bn_reduce_ref(const ex_node_exec *nd, const bn_geom *g)
{
    for (int64_t c = 0; c < g->c; c++) {
        float mean, inv;
        bn_xhat_coefs(nd, c, &mean, &inv);
        double sxh = 0.0, sdy = 0.0;
        for (int64_t nb = 0; nb < g->n; nb++) {
            bn_plane x = bn_plane_of(&nd->src[0], nb, c), dy = bn_plane_of(&nd->src[2], nb, c);
            for (int64_t ih = 0; ih < g->h; ih++)
                for (int64_t iw = 0; iw < g->w; iw++) {
                    double d = *bn_px(&dy, ih, iw);
                    sxh += d * (((double)*bn_px(&x, ih, iw) - mean) * inv);
                    sdy += d;
                }
        }
        bn_set(bn_row(&nd->dst, 0), c, (float)sxh);
        bn_set(bn_row(&nd->dst, 1), c, (float)sdy);
    }
}

static ex_status bn_reduce_fast(const cpu_exec *e, const ex_node_exec *nd, const bn_geom *g)
{
    int64_t planes = g->n * g->c;
    double *part = cpu_alloc(e, (size_t)(2 * planes) * sizeof(double) + 1);
    if (!part)
        return cpu_fail(e, EX_ERR_NOMEM, "bn_bwd_reduce: no memory for partial sums");
#pragma omp parallel for schedule(static) num_threads(bn_threads(e))
    for (int64_t p = 0; p < planes; p++) {
        int64_t nb = p / g->c, c = p % g->c;
        float mean, inv;
        bn_xhat_coefs(nd, c, &mean, &inv);
        bn_plane x = bn_plane_of(&nd->src[0], nb, c), dy = bn_plane_of(&nd->src[2], nb, c);
        bn_plane_dot_runs(&x, &dy, g->h, g->w, mean, inv, &part[2 * p]);
    }
    for (int64_t c = 0; c < g->c; c++) {
        double sxh = 0.0, sdy = 0.0;
        for (int64_t nb = 0; nb < g->n; nb++) {
            sxh += part[2 * (nb * g->c + c)];
            sdy += part[2 * (nb * g->c + c) + 1];
        }
        bn_set(bn_row(&nd->dst, 0), c, (float)sxh);
        bn_set(bn_row(&nd->dst, 1), c, (float)sdy);
    }
    free(part);
    return EX_OK;
}

CPU_OP(bn_bwd_reduce)
{
    bn_geom g;
    ex_status st = bn_of(e, n, "bn_bwd_reduce", &g);
    if (st != EX_OK)
        return st;
    if (!e->reference)
        return bn_reduce_fast(e, n, &g);
    bn_reduce_ref(n, &g);
    return EX_OK;
}

/** Channel c's constants of dx = k * (dy - c1 - xhat * c2), xhat = (src0 - mean) * inv;
 *  eval mode has c1 = c2 = 0. */
typedef struct bn_bwd_k {
    double mean, inv, k, c1, c2;
} bn_bwd_k;

static bn_bwd_k bn_bwd_consts(const ex_node_exec *nd, const bn_geom *g, int64_t c)
{
    bn_bwd_k k;
    float mean, inv;
    bn_xhat_coefs(nd, c, &mean, &inv);
    k.mean = mean;
    k.inv = inv;
    k.k = (double)bn_get(bn_row(&nd->src[1], 1), c) *
          (nd->nsrc == 5 ? bn_get(bn_vec_of(&nd->src[4]), c) : 1.0f);
    int train = nd->ip[0] != 0;
    k.c1 = train ? bn_get(bn_row(&nd->src[3], 1), c) / (double)g->m : 0.0;
    k.c2 = train ? bn_get(bn_row(&nd->src[3], 0), c) / (double)g->m : 0.0;
    return k;
}

static void bn_bwd_data_ref(const ex_node_exec *nd, const bn_geom *g)
{
    for (int64_t nb = 0; nb < g->n; nb++)
        for (int64_t c = 0; c < g->c; c++) {
            bn_bwd_k k = bn_bwd_consts(nd, g, c);
            bn_plane x = bn_plane_of(&nd->src[0], nb, c), dy = bn_plane_of(&nd->src[2], nb, c);
            bn_plane dx = bn_plane_of(&nd->dst, nb, c);
            for (int64_t ih = 0; ih < g->h; ih++)
                for (int64_t iw = 0; iw < g->w; iw++) {
                    double xh = ((double)*bn_px(&x, ih, iw) - k.mean) * k.inv;
                    double v = k.k * ((double)*bn_px(&dy, ih, iw) - k.c1 - xh * k.c2);
                    *bn_px(&dx, ih, iw) = (float)v;
                }
        }
}

static void bn_run_bwd(const float *x, const float *dy, float *dx, int64_t n, float mean, float inv,
                       float k, float c1, float c2)
{
    for (int64_t i = 0; i < n; i++)
        dx[i] = k * (dy[i] - c1 - (x[i] - mean) * inv * c2);
}

static void bn_bwd_data_plane(const bn_plane *x, const bn_plane *dy, const bn_plane *dx, int64_t h,
                              int64_t w, const bn_bwd_k *kd)
{
    float mean = (float)kd->mean, inv = (float)kd->inv, k = (float)kd->k;
    float c1 = (float)kd->c1, c2 = (float)kd->c2;
    bn_plane ps[3] = {*x, *dy, *dx};
    int64_t nr, len;
    if (bn_runs(ps, 3, h, w, &nr, &len)) {
        for (int64_t r = 0; r < nr; r++)
            bn_run_bwd(x->p + r * x->sr, dy->p + r * dy->sr, dx->p + r * dx->sr, len, mean, inv, k,
                       c1, c2);
        return;
    }
    for (int64_t ih = 0; ih < h; ih++) {
        const float *xr = bn_px(x, ih, 0), *dr = bn_px(dy, ih, 0);
        float *dxr = bn_px(dx, ih, 0);
        for (int64_t iw = 0; iw < w; iw++)
            dxr[iw * dx->sc] = k * (dr[iw * dy->sc] - c1 - (xr[iw * x->sc] - mean) * inv * c2);
    }
}

CPU_OP(bn_bwd_data)
{
    bn_geom g;
    ex_status st = bn_of(e, n, "bn_bwd_data", &g);
    if (st != EX_OK)
        return st;
    /* red holds sums over every rank's batch (ip2 = R): the statistics count R times the
     * local values */
    g.m *= ex_td_bn_ranks(n);
    if (e->reference) {
        bn_bwd_data_ref(n, &g);
        return EX_OK;
    }
    int64_t planes = g.n * g.c;
#pragma omp parallel for schedule(static) num_threads(bn_threads(e))
    for (int64_t p = 0; p < planes; p++) {
        int64_t nb = p / g.c, c = p % g.c;
        bn_bwd_k k = bn_bwd_consts(n, &g, c);
        bn_plane x = bn_plane_of(&n->src[0], nb, c), dy = bn_plane_of(&n->src[2], nb, c);
        bn_plane dx = bn_plane_of(&n->dst, nb, c);
        bn_bwd_data_plane(&x, &dy, &dx, g.h, g.w, &k);
    }
    return EX_OK;
}
