/* Average, max and global average pooling on the CPU, with their backward passes.
 *
 * The reference path walks each window with double accumulators. The fast path runs in
 * parallel over (n, c) planes; each plane belongs to one thread and is summed in a fixed
 * order, so results do not depend on the thread count. Windows are clipped to the input:
 * padding never counts, neither in an average nor as a maximum. Planes with unit column
 * strides and windows up to 7 run vector kernels over a padded copy of the plane; others
 * take tap-by-tap row loops. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

static inline int pool_tid(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/** A pooling window, decoded in core (core/tdesc.h). */
typedef ex_td_pool_geom pool_geom;

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

/** Reads the window of input in and output out (ex_td_pool_geom_of). */
static ex_status pool_geom_of(const cpu_exec *e, const ex_node_exec *nd, const ex_tdesc *in,
                              const ex_tdesc *out, const char *name, pool_geom *g)
{
    char why[256];
    ex_status st = ex_td_pool_geom_of(nd->ip, in->ne, out->ne, g, why, sizeof why);
    return st == EX_OK ? EX_OK : cpu_fail(e, st, "%s: %s", name, why);
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

/* ---- fast path: vector kernels over padded planes ---- */

/* Each plane is first copied into a margin of fill values: zeros for sums, -inf for maxima.
 * A zero adds nothing to a sum begun at +0 (such a sum is never -0) and -inf never wins a
 * maximum, so every output then reads its whole window without bounds tests and gets the
 * bits of the clipped window. Averages divide by the clipped count afterwards; the first
 * maximum's position starts at the window's first element inside the plane, as in the
 * reference. Planes with strided columns or larger windows run the loops above. */

#define PL_KMAX 7
/* The block functions must be inlined with constant sizes, or their accumulators live in
 * memory. */
#if defined(__GNUC__) || defined(__clang__)
#define PL_INLINE static inline __attribute__((always_inline))
#else
#define PL_INLINE static inline
#endif
#define PL_TMAX (PL_KMAX * PL_KMAX)
/** Vectors of accumulators per block: each waits on its last operation once per tap. */
#define PL_NV 8

/* Vectors of PL_W floats: 8 where the compiler targets AVX, else 4. With gcc and clang the
 * compilers' vector extension (plain-C lane loops leave gcc 12 splitting accumulators into
 * scalars); elsewhere plain structs, run element by element. */
#if defined(__AVX__)
#define PL_W 8
#else
#define PL_W 4
#endif
#if defined(__GNUC__) || defined(__clang__)
typedef float pl_v __attribute__((vector_size(4 * PL_W)));
typedef int32_t pl_iv __attribute__((vector_size(4 * PL_W)));
static inline pl_v pl_add(pl_v a, pl_v b)
{
    return a + b;
}
static inline pl_v pl_div(pl_v a, pl_v b)
{
    return a / b;
}
/** Lanes where v > best: pool_better's rule where no NaN is involved. */
static inline pl_iv pl_gt(pl_v v, pl_v best)
{
    return v > best;
}
static inline pl_v pl_sel(pl_iv t, pl_v a, pl_v b)
{
    return (pl_v)(((pl_iv)a & t) | ((pl_iv)b & ~t));
}
static inline pl_iv pl_seli(pl_iv t, pl_iv a, pl_iv b)
{
    return (a & t) | (b & ~t);
}
#else
typedef struct pl_v {
    float f[PL_W];
} pl_v;
typedef struct pl_iv {
    int32_t f[PL_W];
} pl_iv;
static inline pl_v pl_add(pl_v a, pl_v b)
{
    for (int j = 0; j < PL_W; j++)
        a.f[j] += b.f[j];
    return a;
}
static inline pl_v pl_div(pl_v a, pl_v b)
{
    for (int j = 0; j < PL_W; j++)
        a.f[j] /= b.f[j];
    return a;
}
static inline pl_iv pl_gt(pl_v v, pl_v best)
{
    pl_iv t;
    for (int j = 0; j < PL_W; j++)
        t.f[j] = v.f[j] > best.f[j] ? -1 : 0;
    return t;
}
static inline pl_v pl_sel(pl_iv t, pl_v a, pl_v b)
{
    for (int j = 0; j < PL_W; j++)
        a.f[j] = t.f[j] ? a.f[j] : b.f[j];
    return a;
}
static inline pl_iv pl_seli(pl_iv t, pl_iv a, pl_iv b)
{
    for (int j = 0; j < PL_W; j++)
        a.f[j] = t.f[j] ? a.f[j] : b.f[j];
    return a;
}
#endif

static inline pl_v pl_splat(float x)
{
    float f[PL_W];
    for (int j = 0; j < PL_W; j++)
        f[j] = x;
    pl_v v;
    memcpy(&v, f, sizeof v);
    return v;
}

static inline pl_iv pl_spliti(int32_t x)
{
    int32_t f[PL_W];
    for (int j = 0; j < PL_W; j++)
        f[j] = x;
    pl_iv v;
    memcpy(&v, f, sizeof v);
    return v;
}

/** p[0], p[s], ..., p[(PL_W - 1) * s]. */
static inline pl_v pl_ld(const float *p, int64_t s)
{
    pl_v v;
    if (s == 1) {
        memcpy(&v, p, sizeof v);
        return v;
    }
    float f[PL_W];
    for (int j = 0; j < PL_W; j++)
        f[j] = p[j * s];
    memcpy(&v, f, sizeof v);
    return v;
}

/** The window taps, each a source pointer for output 0 and its index kh * Kw + kw. */
typedef struct pl_taps {
    int n;
    const float *p[PL_TMAX];
    int32_t id[PL_TMAX];
} pl_taps;

enum { PL_SUM, PL_MAX };

/** One output of pl_block (arg NULL) or pl_block_arg, without vectors. */
static void pl_point(int mode, float *out, int32_t *arg, const int32_t *init, int64_t i,
                     const pl_taps *t, int64_t scs)
{
    float acc = mode == PL_SUM ? 0.0f : -INFINITY;
    int32_t at = arg ? init[i] : 0;
    for (int k = 0; k < t->n; k++) {
        float x = t->p[k][i * scs];
        int take = mode == PL_SUM || pool_better(x, acc);
        acc = mode == PL_SUM ? acc + x : take ? x : acc;
        at = take ? t->id[k] : at;
    }
    if (arg)
        arg[i] = at;
    else
        out[i] = acc;
}

/** Whether any lane of the nv vectors is NaN. */
static inline int pl_any_nan(const pl_v *v, int nv)
{
    float f[PL_W * PL_NV];
    memcpy(f, v, (size_t)nv * sizeof(pl_v));
    int any = 0;
    for (int j = 0; j < PL_W * nv; j++)
        any |= f[j] != f[j];
    return any;
}

/** Outputs [i, i + PL_W * nv): the sum (PL_SUM) or first maximum (PL_MAX) over the taps in
 *  order, held in registers. Maxima take v > best only; a NaN makes the window's running
 *  sum (chk) NaN, and such blocks are done again by pool_better's rule (an infinite sum
 *  does too, needlessly but rightly). Returns whether that is needed. */
PL_INLINE int pl_block(int mode, float *out, int64_t i, int nv, const pl_taps *t, int64_t scs)
{
    pl_v acc[PL_NV], chk[PL_NV];
    for (int v = 0; v < nv; v++) {
        acc[v] = pl_splat(mode == PL_SUM ? 0.0f : -INFINITY);
        chk[v] = pl_splat(0.0f);
    }
    for (int k = 0; k < t->n; k++)
        for (int v = 0; v < nv; v++) {
            pl_v x = pl_ld(t->p[k] + (i + PL_W * v) * scs, scs);
            if (mode == PL_SUM) {
                acc[v] = pl_add(acc[v], x);
                continue;
            }
            acc[v] = pl_sel(pl_gt(x, acc[v]), x, acc[v]);
            chk[v] = pl_add(chk[v], x);
        }
    memcpy(out + i, acc, (size_t)nv * sizeof(pl_v));
    return mode == PL_MAX && pl_any_nan(chk, nv);
}

/** The window index of the first maximum of outputs [i, i + PL_W * nv), starting from
 *  init's (the first tap inside the plane); NaNs as in pl_block. */
PL_INLINE int pl_block_arg(int32_t *arg, const int32_t *init, int64_t i, int nv, const pl_taps *t,
                           int64_t scs)
{
    pl_v best[PL_NV], chk[PL_NV];
    pl_iv at[PL_NV];
    for (int v = 0; v < nv; v++) {
        best[v] = pl_splat(-INFINITY);
        chk[v] = pl_splat(0.0f);
        memcpy(&at[v], init + i + PL_W * v, sizeof at[v]);
    }
    for (int k = 0; k < t->n; k++) {
        pl_iv id = pl_spliti(t->id[k]);
        for (int v = 0; v < nv; v++) {
            pl_v x = pl_ld(t->p[k] + (i + PL_W * v) * scs, scs);
            pl_iv take = pl_gt(x, best[v]);
            best[v] = pl_sel(take, x, best[v]);
            at[v] = pl_seli(take, id, at[v]);
            chk[v] = pl_add(chk[v], x);
        }
    }
    memcpy(arg + i, at, (size_t)nv * sizeof(pl_iv));
    return pl_any_nan(chk, nv);
}

/** Outputs [i, i + cnt) again by pool_better's rule, where a block saw a NaN. */
static void pl_redo(int mode, float *out, int32_t *arg, const int32_t *init, int64_t i, int64_t cnt,
                    const pl_taps *t, int64_t scs)
{
    for (int64_t j = i; j < i + cnt; j++)
        pl_point(mode, out, arg, init, j, t, scs);
}

/** Blocks of nv vectors from *i while they fit in n. */
PL_INLINE void pl_stage(int mode, float *out, int32_t *arg, const int32_t *init, int64_t *i,
                        int64_t n, int nv, const pl_taps *t, int64_t scs)
{
    for (; *i + PL_W * nv <= n; *i += PL_W * nv)
        if (arg ? pl_block_arg(arg, init, *i, nv, t, scs) : pl_block(mode, out, *i, nv, t, scs))
            pl_redo(mode, out, arg, init, *i, PL_W * nv, t, scs);
}

/** Outputs i < n of pl_block (arg NULL) or pl_block_arg: blocks of PL_NV, 2 and 1 vectors,
 *  and a last partial vector done again overlapping the one before, which rewrites some
 *  outputs with their own values. */
PL_INLINE void pl_kern(int mode, float *out, int32_t *arg, const int32_t *init, int64_t n,
                       const pl_taps *t, int64_t scs)
{
    int64_t i = 0;
    pl_stage(mode, out, arg, init, &i, n, PL_NV, t, scs);
    pl_stage(mode, out, arg, init, &i, n, 2, t, scs);
    pl_stage(mode, out, arg, init, &i, n, 1, t, scs);
    if (i < n && n >= PL_W) {
        i = n - PL_W;
        pl_stage(mode, out, arg, init, &i, n, 1, t, scs);
        return;
    }
    pl_redo(mode, out, arg, init, i, n - i, t, scs);
}

static void pl_kern_any(int mode, float *out, int32_t *arg, const int32_t *init, int64_t n,
                        const pl_taps *t, int64_t scs)
{
    if (arg && scs == 1)
        pl_kern(PL_MAX, NULL, arg, init, n, t, 1);
    else if (arg)
        pl_kern(PL_MAX, NULL, arg, init, n, t, scs);
    else if (mode == PL_SUM && scs == 1)
        pl_kern(PL_SUM, out, NULL, NULL, n, t, 1);
    else if (mode == PL_SUM)
        pl_kern(PL_SUM, out, NULL, NULL, n, t, scs);
    else if (scs == 1)
        pl_kern(PL_MAX, out, NULL, NULL, n, t, 1);
    else
        pl_kern(PL_MAX, out, NULL, NULL, n, t, scs);
}

/* -- the padded plane -- */

/** pt rows and pl columns of margin before the source, hp x wp in all, the same for every
 *  plane of a node; to: rows of the output grid. */
typedef struct pl_padg {
    int64_t pt, pl, hp, wp, to;
} pl_padg;

/** The taps i < k of one dimension that reach input residue class r of stride s, in order,
 *  with their offsets into the output gradient: input r + s * j is in the window of output
 *  j + off. */
static int pl_class_taps(int64_t r, int64_t s, int64_t p, int64_t k, int64_t *off, int *tap)
{
    int n = 0;
    for (int i = 0; i < k; i++)
        if ((r + p - i) % s == 0) {
            off[n] = (r + p - i) / s;
            tap[n++] = i;
        }
    return n;
}

/** Source extent [*lo, *hi) of one dimension: what the windows of n outputs reach in an
 *  input of in elements (forward), or what the residue classes of an input of in elements
 *  reach in an output gradient of n elements (backward). */
static void pl_reach(int bwd, int64_t k, int64_t s, int64_t p, int64_t in, int64_t n, int64_t *lo,
                     int64_t *hi)
{
    if (!bwd) {
        *lo = -p;
        *hi = (n - 1) * s + k - p > in ? (n - 1) * s + k - p : in;
        return;
    }
    *lo = 0;
    *hi = n;
    for (int64_t r = 0; r < s && r < in; r++) {
        int64_t off[PL_KMAX], cnt = (in - r + s - 1) / s;
        int tap[PL_KMAX];
        for (int i = 0, m = pl_class_taps(r, s, p, k, off, tap); i < m; i++) {
            *lo = off[i] < *lo ? off[i] : *lo;
            *hi = cnt + off[i] > *hi ? cnt + off[i] : *hi;
        }
    }
}

static pl_padg pl_padg_of(const pool_geom *g, int bwd)
{
    int64_t rl, rh, cl, ch;
    pl_reach(bwd, g->kh, g->sh, g->ph, g->h, g->ho, &rl, &rh);
    pl_reach(bwd, g->kw, g->sw, g->pw, g->w, g->wo, &cl, &ch);
    return (pl_padg){-rl, -cl, rh - rl, ch - cl, bwd ? (g->h + g->sh - 1) / g->sh : g->ho};
}

/** dst[i] = src[i] / div[i] (div may be NULL), or fill where src is NULL, by vectors: rows
 *  here are short, and gcc would otherwise call memcpy and memset for each. */
static inline void pl_copy(float *dst, const float *src, const float *div, float fill, int64_t n)
{
    int64_t i = 0;
    for (; i + PL_W <= n; i += PL_W) {
        pl_v v = src ? pl_ld(src + i, 1) : pl_splat(fill);
        v = div ? pl_div(v, pl_ld(div + i, 1)) : v;
        memcpy(dst + i, &v, sizeof v);
    }
    for (; i < n; i++)
        dst[i] = src ? (div ? src[i] / div[i] : src[i]) : fill;
}

/** pp = the plane src [h, w] (row step srs), each element divided by div's (row length w)
 *  when div is not NULL, inside margins of fill. */
static void pl_fill(float *pp, const pl_padg *pg, const float *src, int64_t srs, int64_t h,
                    int64_t w, const float *div, float fill)
{
    int64_t wp = pg->wp;
    pl_copy(pp, NULL, NULL, fill, pg->pt * wp + pg->pl);
    for (int64_t i = 0; i < h; i++) {
        float *row = pp + (pg->pt + i) * wp + pg->pl;
        pl_copy(row, src + i * srs, div ? div + i * w : NULL, fill, w);
        pl_copy(row + w, NULL, NULL, fill, i + 1 < h ? wp - w : wp - w - pg->pl);
    }
    pl_copy(pp + (pg->pt + h) * wp, NULL, NULL, fill, (pg->hp - pg->pt - h) * wp);
}

/** The window taps over the padded plane pp for output (0, 0). */
static void pl_taps_of(const pool_geom *g, const pl_padg *pg, const float *pp, pl_taps *t)
{
    t->n = 0;
    for (int64_t a = 0; a < g->kh; a++)
        for (int64_t b = 0; b < g->kw; b++) {
            t->p[t->n] = pp + (pg->pt + a - g->ph) * pg->wp + pg->pl + b - g->pw;
            t->id[t->n++] = (int32_t)(a * g->kw + b);
        }
}

/** The output grid [oh, ow] into tmp (or arg), rows the padded row length apart: with unit
 *  strides one stretch through the rows' ends, else row by row. */
static void pl_grid(int mode, const pl_taps *t, const pl_padg *pg, int64_t sh, int64_t sw,
                    float *tmp, int32_t *arg, const int32_t *init, int64_t oh, int64_t ow)
{
    if (sh == 1 && sw == 1) {
        pl_kern_any(mode, tmp, arg, init, (oh - 1) * pg->wp + ow, t, 1);
        return;
    }
    pl_taps row = *t;
    for (int64_t q = 0; q < oh; q++) {
        for (int k = 0; k < t->n; k++)
            row.p[k] = t->p[k] + q * sh * pg->wp;
        pl_kern_any(mode, tmp ? tmp + q * pg->wp : NULL, arg ? arg + q * pg->wp : NULL,
                    init ? init + q * pg->wp : NULL, ow, &row, sw);
    }
}

/* -- planes -- */

/** Whether the fast path takes these planes: unit column strides, a small window. */
static int pl_fast_ok(const pool_geom *g, const ex_tdesc *a, const ex_tdesc *b)
{
    return a->st[3] == 1 && b->st[3] == 1 && g->kh <= PL_KMAX && g->kw <= PL_KMAX;
}

/** cnt[q * wo + r]: the size of output (q, r)'s window inside the plane. */
static float *pl_counts(const cpu_exec *e, const pool_geom *g)
{
    float *c = cpu_alloc(e, (size_t)(g->ho * g->wo) * sizeof(float) + 1);
    for (int64_t q = 0; c && q < g->ho; q++)
        for (int64_t r = 0; r < g->wo; r++) {
            int64_t h0, h1, w0, w1;
            pool_window(g, q, r, &h0, &h1, &w0, &w1);
            c[q * g->wo + r] = (float)((h1 - h0) * (w1 - w0));
        }
    return c;
}

/** first[q * wp + r]: the index of output (q, r)'s first window tap inside the plane. */
static int32_t *pl_firsts(const cpu_exec *e, const pool_geom *g, const pl_padg *pg)
{
    int32_t *f = cpu_alloc(e, (size_t)(pg->to * pg->wp) * sizeof(int32_t) + 1);
    for (int64_t q = 0; f && q < pg->to; q++)
        for (int64_t r = 0; r < pg->wp; r++) {
            int64_t a = g->ph - q * g->sh, b = g->pw - r * g->sw;
            f[q * pg->wp + r] = (int32_t)((a > 0 ? a : 0) * g->kw + (b > 0 ? b : 0));
        }
    return f;
}

/** A stride-1 window over the padded plane pp as two passes into tmp: along the rows into
 *  hrow (every padded row), then down the columns. A maximum is the first in row-major
 *  order either way (ties and NaNs go to the earlier row, then column); a sum is added in
 *  that order, which the tolerance allows. */
static void pl_separable(int mode, const pool_geom *g, const pl_padg *pg, const float *pp,
                         float *hrow, float *tmp)
{
    pl_taps th = {.n = 0}, tv = {.n = 0};
    for (int64_t b = 0; b < g->kw; b++) {
        th.p[th.n] = pp + pg->pl - g->pw + b;
        th.id[th.n++] = (int32_t)b;
    }
    for (int64_t a = 0; a < g->kh; a++) {
        tv.p[tv.n] = hrow + (pg->pt - g->ph + a) * pg->wp;
        tv.id[tv.n++] = (int32_t)a;
    }
    pl_kern_any(mode, hrow, NULL, NULL, (pg->hp - 1) * pg->wp + g->wo, &th, 1);
    pl_kern_any(mode, tmp, NULL, NULL, (g->ho - 1) * pg->wp + g->wo, &tv, 1);
}

/** Average (cnt given) or maximum (cnt NULL) of one plane. */
static void pl_fwd_plane(const pool_geom *g, const pl_padg *pg, const float *cnt,
                         const pool_plane *xp, const pool_plane *yp, float *scratch)
{
    float *pp = scratch, *tmp = scratch + pg->hp * pg->wp, *hrow = tmp + pg->to * pg->wp;
    int mode = cnt ? PL_SUM : PL_MAX;
    pl_fill(pp, pg, xp->p, xp->sr, g->h, g->w, NULL, cnt ? 0.0f : -INFINITY);
    if (g->sh == 1 && g->sw == 1) {
        pl_separable(mode, g, pg, pp, hrow, tmp);
    } else {
        pl_taps t;
        pl_taps_of(g, pg, pp, &t);
        pl_grid(mode, &t, pg, g->sh, g->sw, tmp, NULL, NULL, g->ho, g->wo);
    }
    for (int64_t q = 0; q < g->ho; q++)
        pl_copy(yp->p + q * yp->sr, tmp + q * pg->wp, cnt ? cnt + q * g->wo : NULL, 0.0f, g->wo);
}

/** dx of one plane: each dy added to its window's first maximum, in output order. */
static void pl_max_bwd_plane(const pool_geom *g, const pl_padg *pg, const int32_t *first,
                             const pool_plane *xp, const pool_plane *dyp, const pool_plane *dxp,
                             float *scratch)
{
    float *pp = scratch;
    int32_t *arg = (int32_t *)(scratch + pg->hp * pg->wp), off[PL_TMAX];
    pl_fill(pp, pg, xp->p, xp->sr, g->h, g->w, NULL, -INFINITY);
    pl_taps t;
    pl_taps_of(g, pg, pp, &t);
    pl_grid(PL_MAX, &t, pg, g->sh, g->sw, NULL, arg, first, g->ho, g->wo);
    for (int64_t i = 0; i < g->h; i++)
        pl_copy(dxp->p + i * dxp->sr, NULL, NULL, 0.0f, g->w);
    for (int64_t k = 0; k < g->kh * g->kw; k++)
        off[k] = (int32_t)(k / g->kw * dxp->sr + k % g->kw);
    for (int64_t q = 0; q < g->ho; q++) {
        int64_t base = (q * g->sh - g->ph) * dxp->sr - g->pw;
        for (int64_t r = 0; r < g->wo; r++)
            dxp->p[base + r * g->sw + off[arg[q * pg->wp + r]]] += dyp->p[q * dyp->sr + r];
    }
}

/** dx at rows rh + sh * i and columns rw + sw * j: the sum of g = dy / cnt (padded in pp)
 *  over the windows that hold them, through the taps that reach that residue class. */
static void pl_avg_bwd_class(const pool_geom *g, const pl_padg *pg, const float *pp, float *tmp,
                             const pool_plane *dxp, int64_t rh, int64_t rw)
{
    int64_t eh[PL_KMAX], ew[PL_KMAX];
    int th[PL_KMAX], tw[PL_KMAX];
    int nr = pl_class_taps(rh, g->sh, g->ph, g->kh, eh, th);
    int nc = pl_class_taps(rw, g->sw, g->pw, g->kw, ew, tw);
    pl_taps t = {.n = 0};
    for (int a = 0; a < nr; a++)
        for (int b = 0; b < nc; b++) {
            t.p[t.n] = pp + (pg->pt + eh[a]) * pg->wp + pg->pl + ew[b];
            t.id[t.n++] = th[a] * (int32_t)g->kw + tw[b];
        }
    int64_t oh = (g->h - rh + g->sh - 1) / g->sh, ow = (g->w - rw + g->sw - 1) / g->sw;
    if (oh <= 0 || ow <= 0)
        return;
    pl_grid(PL_SUM, &t, pg, 1, 1, tmp, NULL, NULL, oh, ow);
    float *out = dxp->p + rh * dxp->sr + rw;
    for (int64_t q = 0; q < oh; q++)
        for (int64_t r = 0; r < ow; r++)
            out[q * g->sh * dxp->sr + r * g->sw] = tmp[q * pg->wp + r];
}

static void pl_avg_bwd_plane(const pool_geom *g, const pl_padg *pg, const float *cnt,
                             const pool_plane *dyp, const pool_plane *dxp, float *scratch)
{
    float *pp = scratch, *tmp = scratch + pg->hp * pg->wp;
    pl_fill(pp, pg, dyp->p, dyp->sr, g->ho, g->wo, cnt, 0.0f);
    for (int64_t rh = 0; rh < g->sh && rh < g->h; rh++)
        for (int64_t rw = 0; rw < g->sw && rw < g->w; rw++)
            pl_avg_bwd_class(g, pg, pp, tmp, dxp, rh, rw);
}

/* -- drivers: one (n, c) plane per task -- */

/** Each thread's padded plane, output grid and row pass, *per floats apart. */
static float *pl_scratch(const cpu_exec *e, const pl_padg *pg, int64_t *per)
{
    *per = (2 * pg->hp + pg->to) * pg->wp + PL_W;
    return cpu_alloc(e, (size_t)(*per * pool_threads(e)) * sizeof(float));
}

/** Average (avg) or maximum pooling of every plane. */
static ex_status pl_fwd(const cpu_exec *e, const pool_geom *g, int avg, const ex_tdesc *x,
                        const ex_tdesc *y)
{
    pl_padg pg = pl_padg_of(g, 0);
    int64_t per, planes = g->n * g->c;
    float *scratch = pl_scratch(e, &pg, &per), *cnt = avg ? pl_counts(e, g) : NULL;
    if (!scratch || (avg && !cnt)) {
        free(scratch);
        free(cnt);
        return cpu_fail(e, EX_ERR_NOMEM, "%s: no memory for padded planes",
                        avg ? "avg_pool" : "max_pool");
    }
#pragma omp parallel for schedule(static) num_threads(pool_threads(e))
    for (int64_t p = 0; p < planes; p++) {
        pool_plane xp = pool_plane_of(x, p, g->c), yp = pool_plane_of(y, p, g->c);
        pl_fwd_plane(g, &pg, cnt, &xp, &yp, scratch + pool_tid() * per);
    }
    free(scratch);
    free(cnt);
    return EX_OK;
}

static ex_status pl_avg_bwd(const cpu_exec *e, const pool_geom *g, const ex_tdesc *dy,
                            const ex_tdesc *dx)
{
    pl_padg pg = pl_padg_of(g, 1);
    int64_t per, planes = g->n * g->c;
    float *scratch = pl_scratch(e, &pg, &per), *cnt = pl_counts(e, g);
    if (!scratch || !cnt) {
        free(scratch);
        free(cnt);
        return cpu_fail(e, EX_ERR_NOMEM, "avg_pool_bwd: no memory for padded planes");
    }
#pragma omp parallel for schedule(static) num_threads(pool_threads(e))
    for (int64_t p = 0; p < planes; p++) {
        pool_plane dyp = pool_plane_of(dy, p, g->c), dxp = pool_plane_of(dx, p, g->c);
        pl_avg_bwd_plane(g, &pg, cnt, &dyp, &dxp, scratch + pool_tid() * per);
    }
    free(scratch);
    free(cnt);
    return EX_OK;
}

static ex_status pl_max_bwd(const cpu_exec *e, const pool_geom *g, const ex_tdesc *x,
                            const ex_tdesc *dy, const ex_tdesc *dx)
{
    pl_padg pg = pl_padg_of(g, 0);
    int64_t per, planes = g->n * g->c;
    float *scratch = pl_scratch(e, &pg, &per);
    int32_t *first = pl_firsts(e, g, &pg);
    if (!scratch || !first) {
        free(scratch);
        free(first);
        return cpu_fail(e, EX_ERR_NOMEM, "max_pool_bwd: no memory for padded planes");
    }
#pragma omp parallel for schedule(static) num_threads(pool_threads(e))
    for (int64_t p = 0; p < planes; p++) {
        pool_plane xp = pool_plane_of(x, p, g->c), dyp = pool_plane_of(dy, p, g->c);
        pool_plane dxp = pool_plane_of(dx, p, g->c);
        pl_max_bwd_plane(g, &pg, first, &xp, &dyp, &dxp, scratch + pool_tid() * per);
    }
    free(scratch);
    free(first);
    return EX_OK;
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
    else if (pl_fast_ok(&g, &n->src[0], &n->dst))
        return pl_fwd(e, &g, 1, &n->src[0], &n->dst);
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
    if (!e->reference && pl_fast_ok(&g, &n->src[0], &n->dst))
        return pl_avg_bwd(e, &g, &n->src[0], &n->dst);
    if (!e->reference) {
        avg_bwd_fast(e, &g, &n->src[0], &n->dst);
        return EX_OK;
    }
    double *buf = cpu_alloc(e, (size_t)(g.h * g.w) * sizeof(double) + 1);
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
    char *scratch = cpu_alloc(e, (size_t)nt * per + 1);
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
    else if (pl_fast_ok(&g, &n->src[0], &n->dst))
        return pl_fwd(e, &g, 0, &n->src[0], &n->dst);
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
    if (!e->reference && pl_fast_ok(&g, &n->src[0], &n->src[1]) && n->dst.st[3] == 1)
        return pl_max_bwd(e, &g, &n->src[0], &n->src[1], &n->dst);
    if (!e->reference)
        return max_bwd_fast(e, &g, &n->src[0], &n->src[1], &n->dst);
    double *buf = cpu_alloc(e, (size_t)(g.h * g.w) * sizeof(double) + 1);
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
    char why[160];
    if ((st = ex_td_gap_of(n, why, sizeof why)) != EX_OK)
        return cpu_fail(e, st, "global_avg_pool: %s", why);
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
