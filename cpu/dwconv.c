/* Depthwise 2-D convolution on the CPU, forward and both backward passes, per (n, c)
 * plane: forward and backward data as vector correlations over a zero-padded copy of the
 * plane (no bounds tests), the filter gradient as float-lane dot products over whole
 * planes; strided columns, large filters and non-finite filters take general row loops.
 * The fused ReLU (ip6) is read as the forward planes are padded, elsewhere from a copy.
 * Where the CPU has AVX-512 (cpu_exec.avx512) the padded-plane passes run 16 lanes wide
 * instead of the build's 4 or 8, with the same sums bit for bit.
 * Every parallel loop gives each output to one thread with a fixed summation order, so
 * results do not depend on the thread count. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu/conv.h"

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
    int wide;                   /* the 16-lane AVX-512 kernels run (cpu_exec.avx512) */
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

static dw_padg dw_padg_of(const conv_geom *g, int bwd, int wide)
{
    int64_t rl, rh, cl, ch;
    if (bwd) {
        dw_reach_bwd(g->kh, g->sh, g->ph, g->dh, g->h, g->ho, &rl, &rh);
        dw_reach_bwd(g->kw, g->sw, g->pw, g->dw, g->w, g->wo, &cl, &ch);
    } else {
        dw_reach_fwd(g->kh, g->sh, g->ph, g->dh, g->h, g->ho, &rl, &rh);
        dw_reach_fwd(g->kw, g->sw, g->pw, g->dw, g->w, g->wo, &cl, &ch);
    }
    return (dw_padg){-rl, -cl, rh - rl, ch - cl, bwd ? (g->h + g->sh - 1) / g->sh : g->ho, wide};
}

/* -- the same on 16 lanes, where the CPU has AVX-512 (chosen at run time, as the library
 * is built for baseline x86-64 and dw_v has 4 lanes there). Each output is still its taps'
 * products added in list order to +0 by separate multiplies and adds, so the results are
 * those of the 4-lane kernels bit for bit; row ends are masked instead of overlapped. -- */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define DW_X16 1
#define DW_T16 __attribute__((target("avx512f,avx512bw,avx512vl")))

/** The first n lanes (none for n <= 0, all for n >= 16). */
static inline __mmask16 dw16_lanes(int64_t n)
{
    return n <= 0 ? 0 : n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1);
}

/** Outputs [i, i + 16 * nv) of dw16_kern, the last vector's lanes limited to last (the
 *  others neither read nor written); as dw_block. */
DW_T16 DW_INLINE void dw16_block(float *out, int64_t i, int nv, __mmask16 last, const dw_taps *t)
{
    __m512 acc[DW_NV];
    for (int v = 0; v < nv; v++)
        acc[v] = _mm512_setzero_ps();
    for (int k = 0; k < t->n; k++) {
        const float *p = t->p[k] + i;
        __m512 w = _mm512_set1_ps(t->w[k]);
        for (int v = 0; v + 1 < nv; v++)
            acc[v] = _mm512_add_ps(acc[v], _mm512_mul_ps(w, _mm512_loadu_ps(p + 16 * v)));
        __m512 x = _mm512_maskz_loadu_ps(last, p + 16 * (nv - 1));
        acc[nv - 1] = _mm512_add_ps(acc[nv - 1], _mm512_mul_ps(w, x));
    }
    for (int v = 0; v + 1 < nv; v++)
        _mm512_storeu_ps(out + i + 16 * v, acc[v]);
    _mm512_mask_storeu_ps(out + i + 16 * (nv - 1), last, acc[nv - 1]);
}

/** dw_kern with unit steps. The rest after the full blocks is one block, its vector count a
 *  constant in each case so that its accumulators stay in registers. */
DW_T16 static void dw16_kern(float *out, int64_t n, const dw_taps *t)
{
    int64_t i = 0;
    for (; i + 16 * DW_NV <= n; i += 16 * DW_NV)
        dw16_block(out, i, DW_NV, 0xFFFF, t);
    __mmask16 m = dw16_lanes((n - i - 1) % 16 + 1); /* of the rest's last vector */
    switch ((n - i + 15) / 16) {
    case 0: break;
    case 1: dw16_block(out, i, 1, m, t); break;
    case 2: dw16_block(out, i, 2, m, t); break;
    case 3: dw16_block(out, i, 3, m, t); break;
    case 4: dw16_block(out, i, 4, m, t); break;
    case 5: dw16_block(out, i, 5, m, t); break;
    case 6: dw16_block(out, i, 6, m, t); break;
    case 7: dw16_block(out, i, 7, m, t); break;
    default: dw16_block(out, i, 8, m, t); break;
    }
}

/** dst[i] = src[i] (or 0 where src is NULL), i < n; with relu as dw_copy_relu (src < 0 by
 *  the same comparison, so a NaN and -0 stay). */
DW_T16 static inline void dw16_copy(float *dst, const float *src, int64_t n, int relu)
{
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = dw16_lanes(n - i);
        __m512 z = _mm512_setzero_ps(), v = src ? _mm512_maskz_loadu_ps(m, src + i) : z;
        if (relu)
            v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, z, _CMP_LT_OQ), z);
        _mm512_mask_storeu_ps(dst + i, m, v);
    }
}

/** dw_pad_fill on 16 lanes. */
DW_T16 static void dw16_pad_fill(float *pp, const dw_padg *pg, const float *src, int64_t srs,
                                 int64_t h, int64_t w, int relu)
{
    int64_t wp = pg->wp;
    dw16_copy(pp, NULL, pg->pt * wp + pg->pl, 0);
    for (int64_t i = 0; i < h; i++) {
        float *row = pp + (pg->pt + i) * wp + pg->pl;
        if (relu) /* a constant in each call, so that the lane loop tests nothing */
            dw16_copy(row, src + i * srs, w, 1);
        else
            dw16_copy(row, src + i * srs, w, 0);
        dw16_copy(row + w, NULL, i + 1 < h ? wp - w : wp - w - pg->pl, 0);
    }
    dw16_copy(pp + (pg->pt + h) * wp, NULL, (pg->hp - pg->pt - h) * wp, 0);
}

/** dst[2 i] = src[i], i < n, dst[2 i + 1] untouched: a stride-2 data gradient's residue
 *  class into its every other column, 8 a vector, where one by one cost more than the
 *  correlation. */
DW_T16 static inline void dw16_copy2(float *dst, const float *src, int64_t n)
{
    for (int64_t i = 0; i < n; i += 8) {
        __m512 v = _mm512_maskz_loadu_ps(dw16_lanes(n - i < 8 ? n - i : 8), src + i);
        __mmask16 m = 0x5555 & dw16_lanes(2 * (n - i) - 1);
        _mm512_mask_storeu_ps(dst + 2 * i, m, _mm512_maskz_expand_ps(0x5555, v));
    }
}

/** dw_pad_run on 16 lanes; columns at steps above 2 (the data gradient's only) are copied
 *  out one by one, as there. */
DW_T16 static void dw16_pad_run(const dw_taps *t, int64_t wp, float *tmp, float *out, int64_t ors,
                                int64_t ocs, int64_t oh, int64_t ow)
{
    dw16_kern(tmp, (oh - 1) * wp + ow, t);
    for (int64_t q = 0; q < oh; q++) {
        if (ocs == 1)
            dw16_copy(out + q * ors, tmp + q * wp, ow, 0);
        else if (ocs == 2)
            dw16_copy2(out + q * ors, tmp + q * wp, ow);
        for (int64_t r = 0; ocs > 2 && r < ow; r++)
            out[q * ors + r * ocs] = tmp[q * wp + r];
    }
}
#endif

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
#ifdef DW_X16
    if (pg->wide) {
        dw16_pad_fill(pp, pg, src, srs, h, w, relu);
        return;
    }
#endif
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
#ifdef DW_X16
    if (pg->wide) {
        dw16_pad_run(t, pg->wp, tmp, out, ors, ocs, oh, ow);
        return;
    }
#endif
    dw_kern(tmp, 1, (oh - 1) * pg->wp + ow, t, 1);
    dw_copy_out(tmp, pg->wp, out, ors, ocs, oh, ow);
}

static void dw_fwd_pad(const conv_geom *g, const dw_padg *pg, const conv_t4 *x, const conv_t4 *w,
                       const conv_t4 *y, int64_t nb, int64_t ch, float *scratch)
{
    float *pp = scratch, *tmp = scratch + pg->hp * pg->wp;
    dw_pad_fill(pp, pg, conv_plane(x, nb, ch), x->st[2], g->h, g->w, g->relu);
    const float *wp = conv_plane(w, ch, 0);
    /* not cleared whole: only t.n taps are read, and clearing all DW_TMAX cost a 7x7 plane
     * a tenth of its time */
    dw_taps t;
    t.n = 0;
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
    dw_taps t;
    t.n = 0;
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
    return cpu_alloc(e, (size_t)(*per * conv_threads(e)) * sizeof(float));
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
    dw_padg pg = dw_padg_of(g, 0, e->avx512);
    float *scratch = fast ? dw_scratch(e, &pg, &per) : NULL;
    if (fast && !scratch)
        return cpu_fail(e, EX_ERR_NOMEM, "dwconv2d: no memory for padded planes");
#pragma omp parallel for schedule(static) num_threads(conv_threads(e))
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
    dw_padg pg = dw_padg_of(g, 1, e->avx512);
    float *scratch = fast ? dw_scratch(e, &pg, &per) : NULL;
    if (fast && !scratch)
        return cpu_fail(e, EX_ERR_NOMEM, "dwconv2d_bwd_data: no memory for padded planes");
#pragma omp parallel for schedule(static) num_threads(conv_threads(e))
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
#pragma omp parallel for schedule(static) num_threads(conv_threads(e))
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
#pragma omp parallel for schedule(static) num_threads(conv_threads(e))
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
#pragma omp parallel for schedule(static) num_threads(conv_threads(e))
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
#pragma omp parallel for schedule(static) num_threads(conv_threads(e))
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

/** A depthwise pass on the fast path (which: 0 forward, 1 data gradient, 2 filter
 *  gradient), the fused ReLU around it. */
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

CPU_OP(dwconv2d)
{
    conv_ops o;
    ex_status st = conv_prepare(e, n, "dwconv2d", &o);
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
    ex_status st = conv_prepare(e, n, "dwconv2d_bwd_data", &o);
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
    ex_status st = conv_prepare(e, n, "dwconv2d_bwd_filter", &o);
    if (st != EX_OK)
        return st;
    if (!e->reference)
        return dw_fast(e, &o, 2, "dwconv2d_bwd_filter");
    conv_ref_bwd_filter(&o.g, o.x, o.y, o.w);
    return EX_OK;
}
