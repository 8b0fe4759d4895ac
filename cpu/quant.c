/* The quantized inference ops on the CPU. Integer GEMMs (pointwise and dense
 * convolutions, linear) go to oneDNN's s8s8s32 GEMM, which picks AVX2, AVX-512 or VNNI
 * kernels for the CPU it runs on; the reference path and the other ops are plain loops.
 * Every result is exact integer arithmetic or one f32 rounding (docs/ops.md), so both
 * paths give the same bits. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#include "cpu.h"

#ifdef _OPENMP
#include <omp.h>

/* The threads of a parallel loop (the pragmas that name it vanish without OpenMP). */
static inline int q_threads(const cpu_exec *e)
{
    return e->reference ? 1 : e->threads > 0 ? e->threads : omp_get_max_threads();
}
#else
static inline int q_threads(const cpu_exec *e)
{
    (void)e;
    return 1;
}
#endif

static inline int8_t *cpu_i8(const ex_tdesc *t)
{
    return (int8_t *)cpu_ptr(t);
}

/* clamp(rne(v)) to [lo, 127]; NaN gives lo. Adding and taking away 1.5 * 2^23 rounds a
 * float below 2^22 in magnitude to an integer, ties to even, in plain float arithmetic
 * (which vectorizes, where rintf does not on baseline x86-64). */
static inline int8_t q_round(float v, float lo)
{
    v = v > lo ? v : lo; /* NaN fails the test */
    v = v < 127.0f ? v : 127.0f;
    return (int8_t)(int)((v + 12582912.0f) - 12582912.0f);
}

/* Dense rows of the element-wise ops, built for AVX2 and for the baseline and picked at
 * run time: the loops vectorize where the strided walk below does not. */
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default"))) static void
rq_row32(const int32_t *restrict x, float m, float lo, int8_t *restrict y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = q_round((float)x[i] * m, lo);
}

__attribute__((target_clones("arch=x86-64-v4", "avx2", "default"))) static void
rq_row8(const int8_t *restrict x, float m, float lo, int8_t *restrict y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = q_round((float)x[i] * m, lo);
}

__attribute__((target_clones("arch=x86-64-v4", "avx2", "default"))) static void
qadd_row(const int8_t *restrict a, float ma, const int8_t *restrict b, float mb, float lo,
         int8_t *restrict y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float ta = (float)a[i] * ma, tb = (float)b[i] * mb;
        y[i] = q_round(ta + tb, lo);
    }
}

__attribute__((target_clones("arch=x86-64-v4", "avx2", "default"))) static void
qrelu_row(const int8_t *restrict x, int8_t *restrict y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] > 0 ? x[i] : 0;
}

/* An element-wise op's operands as dst's padded shape, merged where every operand steps
 * over dims as one (ex_td_merge_dims): 0 dst, 1 x, 2 the second source or the
 * per-channel vector (as a broadcast along x's channel dim), 3 unused. */
typedef struct q_walk {
    int64_t ne[4], st[3][4];
} q_walk;

static ex_status q_need(const cpu_exec *e, const ex_node_exec *n, int nsrc)
{
    if (n->nsrc != nsrc || n->src == NULL)
        return cpu_fail(e, EX_ERR_ARG, "cpu: %s: %d sources, not %d", ex_op_name(n->op), n->nsrc,
                        nsrc);
    return EX_OK;
}

/* The node checked (core/tdesc.h) and its walk. */
static ex_status q_walk_of(const cpu_exec *e, const ex_node_exec *n, q_walk *w)
{
    char why[96];
    memset(w, 0, sizeof *w);
    ex_status st = ex_td_qew_of(n, w->ne, w->st, why, sizeof why);
    if (st != EX_OK)
        return cpu_fail(e, st, "%s: %s", ex_op_name(n->op), why);
    ex_td_merge_dims(n->nsrc + 1, w->ne, w->st, 1);
    return EX_OK;
}

/* Elements of a row of the walk one thread takes at a time: a dense tensor merges into
 * one row, which is thus split across the threads. */
#define Q_RUN 16384

/* The runs of the walk: each row of its outer three dims in pieces of up to Q_RUN. */
static inline int64_t q_runs(const q_walk *w)
{
    return w->ne[0] * w->ne[1] * w->ne[2] * ((w->ne[3] + Q_RUN - 1) / Q_RUN);
}

/* Run t of the walk: its first element's storage index in each operand (o), its length. */
static inline int64_t q_run_at(const q_walk *w, int64_t t, int64_t o[3])
{
    int64_t per = (w->ne[3] + Q_RUN - 1) / Q_RUN, r = t / per, c0 = t % per * Q_RUN;
    int64_t ix[3] = {r / (w->ne[1] * w->ne[2]), r / w->ne[2] % w->ne[1], r % w->ne[2]};
    for (int k = 0; k < 3; k++)
        o[k] = ix[0] * w->st[k][0] + ix[1] * w->st[k][1] + ix[2] * w->st[k][2] + c0 * w->st[k][3];
    return w->ne[3] - c0 < Q_RUN ? w->ne[3] - c0 : Q_RUN;
}

/* Whether dst and the nsrc sources step by 1 along the walk's rows (the row kernels);
 * in place (dst one of the sources) too, as each element is read before it is written. */
static inline bool q_dense_rows(const q_walk *w, int nsrc)
{
    for (int k = 0; k <= nsrc; k++)
        if (w->st[k][3] != 1)
            return false;
    return true;
}

/* Runs the body for every element, runs of rows of the outer three dims in parallel: p0 is dst's
 * storage index, p1 and p2 the first two operands'. Rows of dense dst and x with the third
 * operand dense or constant along them take loops the compiler vectorizes. */
#define Q_ROW(n_, s0, s1, s2, ...)                                                                 \
    for (int64_t q = 0; q < (n_); q++) {                                                           \
        int64_t p0 = o[0] + q * (s0), p1 = o[1] + q * (s1), p2 = o[2] + q * (s2);                  \
        (void)p2;                                                                                  \
        __VA_ARGS__;                                                                               \
    }
#define Q_FOR_EACH(e, w, ...)                                                                      \
    _Pragma("omp parallel for schedule(static) num_threads(q_threads(e))") for (int64_t t = 0;     \
                                                                                t < q_runs(&(w));  \
                                                                                t++)               \
    {                                                                                              \
        int64_t o[3], len = q_run_at(&(w), t, o);                                                  \
        int64_t s0 = (w).st[0][3], s1 = (w).st[1][3], s2 = (w).st[2][3];                           \
        if (s0 == 1 && s1 == 1 && s2 == 0)                                                         \
            Q_ROW(len, 1, 1, 0, __VA_ARGS__)                                                       \
        else if (s0 == 1 && s1 == 1 && s2 == 1)                                                    \
            Q_ROW(len, 1, 1, 1, __VA_ARGS__)                                                       \
        else                                                                                       \
            Q_ROW(len, s0, s1, s2, __VA_ARGS__)                                                    \
    }

CPU_OP(quantize)
{
    q_walk w;
    ex_status st = q_walk_of(e, n, &w);
    if (st != EX_OK)
        return st;
    const float *x = cpu_f32(&n->src[0]), *v = cpu_f32(&n->src[1]);
    int8_t *y = cpu_i8(&n->dst);
    Q_FOR_EACH(e, w, y[p0] = q_round(x[p1] * v[p2], -127.0f));
    return EX_OK;
}

CPU_OP(dequantize)
{
    q_walk w;
    ex_status st = q_walk_of(e, n, &w);
    if (st != EX_OK)
        return st;
    const float *v = cpu_f32(&n->src[1]);
    float *y = cpu_f32(&n->dst);
    if (n->src[0].dtype == EX_I8) {
        const int8_t *x = cpu_i8(&n->src[0]);
        Q_FOR_EACH(e, w, y[p0] = (float)x[p1] * v[p2]);
    } else {
        const int32_t *x = cpu_i32(&n->src[0]);
        Q_FOR_EACH(e, w, y[p0] = (float)x[p1] * v[p2]);
    }
    return EX_OK;
}

CPU_OP(requantize)
{
    q_walk w;
    ex_status st = q_walk_of(e, n, &w);
    if (st != EX_OK)
        return st;
    float lo = n->ip[0] ? 0.0f : -127.0f;
    const float *v = cpu_f32(&n->src[1]);
    int8_t *y = cpu_i8(&n->dst);
    bool i8 = n->src[0].dtype == EX_I8;
    if (w.st[0][3] == 1 && w.st[1][3] == 1 && w.st[2][3] == 0) {
        /* rows along which the multiplier is one value: the row kernels */
#pragma omp parallel for schedule(static) num_threads(q_threads(e))
        for (int64_t t = 0; t < q_runs(&w); t++) {
            int64_t o[3], len = q_run_at(&w, t, o);
            if (i8)
                rq_row8(cpu_i8(&n->src[0]) + o[1], v[o[2]], lo, y + o[0], len);
            else
                rq_row32(cpu_i32(&n->src[0]) + o[1], v[o[2]], lo, y + o[0], len);
        }
    } else if (i8) {
        const int8_t *x = cpu_i8(&n->src[0]);
        Q_FOR_EACH(e, w, y[p0] = q_round((float)x[p1] * v[p2], lo));
    } else {
        const int32_t *x = cpu_i32(&n->src[0]);
        Q_FOR_EACH(e, w, y[p0] = q_round((float)x[p1] * v[p2], lo));
    }
    return EX_OK;
}

CPU_OP(qadd)
{
    q_walk w;
    ex_status st = q_walk_of(e, n, &w);
    if (st != EX_OK)
        return st;
    float lo = n->ip[0] ? 0.0f : -127.0f;
    const int8_t *pa = cpu_i8(&n->src[0]), *pb = cpu_i8(&n->src[1]);
    int8_t *y = cpu_i8(&n->dst);
    float ma = n->fp[0], mb = n->fp[1];
    if (q_dense_rows(&w, 2)) {
#pragma omp parallel for schedule(static) num_threads(q_threads(e))
        for (int64_t t = 0; t < q_runs(&w); t++) {
            int64_t o[3], len = q_run_at(&w, t, o);
            qadd_row(pa + o[1], ma, pb + o[2], mb, lo, y + o[0], len);
        }
        return EX_OK;
    }
    Q_FOR_EACH(e, w, {
        float ta = (float)pa[p1] * ma, tb = (float)pb[p2] * mb;
        y[p0] = q_round(ta + tb, lo);
    });
    return EX_OK;
}

CPU_OP(qrelu)
{
    q_walk w;
    ex_status st = q_walk_of(e, n, &w);
    if (st != EX_OK)
        return st;
    const int8_t *x = cpu_i8(&n->src[0]);
    int8_t *y = cpu_i8(&n->dst);
    if (q_dense_rows(&w, 1)) {
#pragma omp parallel for schedule(static) num_threads(q_threads(e))
        for (int64_t t = 0; t < q_runs(&w); t++) {
            int64_t o[3], len = q_run_at(&w, t, o);
            qrelu_row(x + o[1], y + o[0], len);
        }
        return EX_OK;
    }
    Q_FOR_EACH(e, w, y[p0] = x[p1] > 0 ? x[p1] : 0);
    return EX_OK;
}

/* Part x into its channels of y (from channel at) requantized by mul: the element-wise
 * walk over x and its place in y, dense runs through the row kernel. */
static void q_concat_part(const cpu_exec *e, const ex_tdesc *x, const ex_tdesc *y, int64_t at,
                          float mul)
{
    q_walk w;
    int64_t yne[4];
    memset(&w, 0, sizeof w);
    ex_td_shape4(x, w.ne, w.st[1]);
    ex_td_shape4(y, yne, w.st[0]); /* y's strides over x's shape: its channels from at */
    ex_td_merge_dims(2, w.ne, w.st, 1);
    (void)e; /* read by the OpenMP pragmas only */
    const int8_t *xv = cpu_i8(x);
    int8_t *yv = cpu_i8(y) + at * y->st[1];
    if (q_dense_rows(&w, 1)) {
#pragma omp parallel for schedule(static) num_threads(q_threads(e))
        for (int64_t t = 0; t < q_runs(&w); t++) {
            int64_t o[3], len = q_run_at(&w, t, o);
            rq_row8(xv + o[1], mul, -127.0f, yv + o[0], len);
        }
        return;
    }
    Q_FOR_EACH(e, w, yv[p0] = q_round((float)xv[p1] * mul, -127.0f));
}

CPU_OP(qconcat)
{
    char why[96];
    ex_status st = ex_td_qconcat_of(n, why, sizeof why);
    if (st != EX_OK)
        return cpu_fail(e, st, "qconcat: %s", why);
    int parts = n->nsrc - 1;
    const ex_tdesc *m = &n->src[parts], *d = &n->dst;
    int64_t at = 0;
    for (int p = 0; p < parts; p++) {
        q_concat_part(e, &n->src[p], d, at, cpu_f32(m)[p * m->st[0]]);
        at += n->src[p].ne[1];
    }
    return EX_OK;
}

/* ---- convolutions ---- */

typedef struct q_conv {
    int64_t n, ci, h, w, co, kh, kw, ho, wo;
    int sh, sw, ph, pw, dh, dw;
} q_conv;

static q_conv q_conv_of(const ex_node_exec *n)
{
    const ex_tdesc *x = &n->src[0], *w = &n->src[1];
    return (q_conv){x->ne[0], x->ne[1], x->ne[2],     x->ne[3],     n->dst.ne[1],
                    w->ne[2], w->ne[3], n->dst.ne[2], n->dst.ne[3], n->ip[0],
                    n->ip[1], n->ip[2], n->ip[3],     n->ip[4],     n->ip[5]};
}

/* The output of an int8 sum of products: the i32 sums, or with the fused requantize
 * (ex_td_qconv_rq) i8 clamp(rne(sum * m[c])), as REQUANTIZE computes it. */
typedef struct q_out {
    bool rq;
    const float *m;
    int64_t ms; /* the multiplier's stride over channels: 0 for one for all */
    float lo;
} q_out;

static q_out q_out_of(const ex_node_exec *n)
{
    if (n->nsrc < 4)
        return (q_out){.rq = false};
    const ex_tdesc *m = &n->src[3];
    return (q_out){true, cpu_f32(m), m->ne[0] == 1 ? 0 : m->st[0], n->ip[7] ? 0.0f : -127.0f};
}

static inline float q_mult(const q_out *o, int64_t c)
{
    return o->m[c * o->ms];
}

/* Element at of y (i32, or i8 requantized) for channel c. */
static inline void q_put(const q_out *o, const ex_tdesc *y, int64_t at, int64_t c, int32_t acc)
{
    if (o->rq)
        cpu_i8(y)[at] = q_round((float)acc * q_mult(o, c), o->lo);
    else
        cpu_i32(y)[at] = acc;
}

/* Dense i32 rows [rows, cols] of channels c0 + r into y's rows (element offset at, row
 * stride ys) through o. */
static void q_put_rows(const q_out *o, const ex_tdesc *y, int64_t at, int64_t ys, int64_t c0,
                       const int32_t *acc, int64_t rows, int64_t cols)
{
    for (int64_t r = 0; r < rows; r++) {
        if (o->rq)
            rq_row32(acc + r * cols, q_mult(o, c0 + r), o->lo, cpu_i8(y) + at + r * ys, cols);
        else
            memcpy(cpu_i32(y) + at + r * ys, acc + r * cols, (size_t)cols * sizeof *acc);
    }
}

/* The shape of a 2-d or 4-d operand as 4 dims: [a, b] as [a, b, 1, 1]. */
static void q_dims4(const ex_tdesc *t, int64_t ne[4])
{
    for (int d = 0; d < 4; d++)
        ne[d] = d < t->ndim ? t->ne[d] : 1;
}

static ex_status q_conv_check(const cpu_exec *e, const ex_node_exec *n, int xdims, int wdims)
{
    int rq = n->op == EX_OP_QLINEAR ? (n->nsrc == 3 ? 0 : -1) : ex_td_qconv_rq(n);
    if (rq < 0)
        return cpu_fail(e, EX_ERR_ARG,
                        "cpu: %s: %d sources: 3 for the i32 sums, or 4 (the multiplier f32 [Co] "
                        "or [1], ip7 0 or 1) for i8",
                        ex_op_name(n->op), n->nsrc);
    const ex_tdesc *x = &n->src[0], *w = &n->src[1], *b = &n->src[2];
    if (!ex_td_valid(x, EX_I8) || !ex_td_valid(w, EX_I8) || !ex_td_valid(b, EX_I32) ||
        !ex_td_valid(&n->dst, rq ? EX_I8 : EX_I32) || (rq && !ex_td_valid(&n->src[3], EX_F32)) ||
        x->ndim != xdims || w->ndim != wdims)
        return cpu_fail(e, EX_ERR_ARG, "cpu: %s: operands of the wrong dtype or rank",
                        ex_op_name(n->op));
    /* the window; QPWCONV's and QLINEAR's 2-d operands [a, b] as [a, b, 1, 1] */
    static const int32_t unit[6] = {1, 1, 0, 0, 1, 1};
    int64_t xn[4], wn[4], yn[4];
    q_dims4(x, xn);
    q_dims4(w, wn);
    q_dims4(&n->dst, yn);
    bool window = n->op == EX_OP_QCONV2D || n->op == EX_OP_QDWCONV2D;
    ex_td_conv_geom g;
    char why[320];
    ex_status st = ex_td_qconv_geom_of(window ? n->ip : unit, xn, wn, yn, b->ne[0],
                                       n->op == EX_OP_QDWCONV2D, &g, why, sizeof why);
    if (st != EX_OK)
        return cpu_fail(e, st, "cpu: %s: %s", ex_op_name(n->op), why);
    return EX_OK;
}

/* Element (n, c, h, w) of a 4-dim i8 tensor, 0 outside its rows and columns. */
static inline int32_t q_at(const ex_tdesc *t, const int8_t *v, int64_t n, int64_t c, int64_t h,
                           int64_t w)
{
    if (h < 0 || w < 0 || h >= t->ne[2] || w >= t->ne[3])
        return 0;
    return v[n * t->st[0] + c * t->st[1] + h * t->st[2] + w * t->st[3]];
}

/* The reference of QCONV2D and QDWCONV2D: every output a plain sum. */
static void q_conv_ref(const ex_node_exec *nd, bool dw)
{
    q_conv g = q_conv_of(nd);
    q_out out = q_out_of(nd);
    const ex_tdesc *x = &nd->src[0], *w = &nd->src[1], *b = &nd->src[2], *y = &nd->dst;
    const int8_t *xv = cpu_i8(x), *wv = cpu_i8(w);
    int64_t cin = dw ? 1 : g.ci;
    for (int64_t n = 0; n < g.n; n++)
        for (int64_t o = 0; o < g.co; o++)
            for (int64_t i = 0; i < g.ho; i++)
                for (int64_t j = 0; j < g.wo; j++) {
                    int32_t acc = cpu_i32(b)[o * b->st[0]];
                    for (int64_t c = 0; c < cin; c++)
                        for (int64_t p = 0; p < g.kh; p++)
                            for (int64_t q = 0; q < g.kw; q++) {
                                int64_t h = i * g.sh - g.ph + p * g.dh,
                                        v = j * g.sw - g.pw + q * g.dw;
                                int32_t wt =
                                    wv[o * w->st[0] + c * w->st[1] + p * w->st[2] + q * w->st[3]];
                                acc += wt * q_at(x, xv, n, dw ? o : c, h, v);
                            }
                    q_put(&out, y, n * y->st[0] + o * y->st[1] + i * y->st[2] + j * y->st[3], o,
                          acc);
                }
}

/* C [m, nn] (row stride ldc) = A [m, k] (row stride lda) B [k, nn] + bias per row; with
 * tb, B is given as [nn, k] and the bias is per column. */
static ex_status q_gemm(const cpu_exec *e, bool tb, int64_t m, int64_t nn, int64_t k,
                        const int8_t *a, int64_t lda, const int8_t *b, int64_t ldb, int32_t *c,
                        int64_t ldc, const int32_t *bias)
{
    dnnl_status_t s = dnnl_gemm_s8s8s32('N', tb ? 'T' : 'N', tb ? 'R' : 'C', m, nn, k, 1.0f, a, lda,
                                        0, b, ldb, 0, 0.0f, c, ldc, bias);
    if (s != dnnl_success)
        return cpu_fail(e, s == dnnl_out_of_memory ? EX_ERR_NOMEM : EX_ERR_DEVICE,
                        "cpu: oneDNN's int8 GEMM failed (status %d)", (int)s);
    return EX_OK;
}

/* A dense copy of the 2-dim i8 t (or t itself when it is one); NULL when out of memory. */
static const int8_t *q_dense2(const cpu_exec *e, const ex_tdesc *t, int8_t **owned)
{
    *owned = NULL;
    if (cpu_contiguous(t))
        return cpu_i8(t);
    int64_t r = t->ne[0], k = ex_td_numel(t) / r;
    int8_t *d = cpu_alloc(e, (size_t)(r * k));
    if (!d)
        return NULL;
    int64_t ne[4], st[4];
    ex_td_shape4(t, ne, st);
    int64_t i = 0;
    for (int64_t a = 0; a < ne[0]; a++)
        for (int64_t b = 0; b < ne[1]; b++)
            for (int64_t c = 0; c < ne[2]; c++)
                for (int64_t q = 0; q < ne[3]; q++)
                    d[i++] = cpu_i8(t)[a * st[0] + b * st[1] + c * st[2] + q * st[3]];
    *owned = d;
    return d;
}

/* The bias as a dense array (copied when strided). */
static const int32_t *q_bias(const cpu_exec *e, const ex_tdesc *b, int32_t **owned)
{
    *owned = NULL;
    if (b->st[0] == 1 || b->ne[0] == 1)
        return cpu_i32(b);
    int32_t *d = cpu_alloc(e, (size_t)b->ne[0] * sizeof *d);
    for (int64_t i = 0; d && i < b->ne[0]; i++)
        d[i] = cpu_i32(b)[i * b->st[0]];
    *owned = d;
    return d;
}

/* Image n's columns of a dense convolution: col [ci * kh * kw, ho * wo]. Each row of
 * outputs reads the columns [lo, hi) of one input row (zero outside), the run found once
 * per filter column, so the inner loop has no bounds test. */
static void q_im2col(const ex_tdesc *x, const q_conv *g, int64_t n, int8_t *col)
{
    const int8_t *xv = cpu_i8(x);
    int64_t plane = g->ho * g->wo;
    for (int64_t c = 0; c < g->ci; c++)
        for (int64_t p = 0; p < g->kh; p++)
            for (int64_t q = 0; q < g->kw; q++) {
                int8_t *row = col + ((c * g->kh + p) * g->kw + q) * plane;
                int64_t off = q * g->dw - g->pw, lo = off >= 0 ? 0 : (-off + g->sw - 1) / g->sw,
                        hi = g->w - off <= 0 ? 0 : (g->w - off - 1) / g->sw + 1;
                hi = hi < g->wo ? hi : g->wo;
                lo = lo < hi ? lo : hi;
                for (int64_t i = 0; i < g->ho; i++) {
                    int8_t *r = row + i * g->wo;
                    int64_t h = i * g->sh - g->ph + p * g->dh;
                    if (h < 0 || h >= g->h) {
                        memset(r, 0, (size_t)g->wo);
                        continue;
                    }
                    const int8_t *xr = xv + n * x->st[0] + c * x->st[1] + h * x->st[2];
                    memset(r, 0, (size_t)lo);
                    for (int64_t j = lo; j < hi; j++)
                        r[j] = xr[(j * g->sw + off) * x->st[3]];
                    memset(r + hi, 0, (size_t)(g->wo - hi));
                }
            }
}

/* The im2col space of qconv2d on the VNNI path, in bytes. */
#define Q_COL_BYTES ((int64_t)32 << 20)

/* Whether y's image planes are dense [co, ho * wo] rows, as the GEMM writes them. */
static bool q_dense_planes(const ex_tdesc *y)
{
    return y->st[3] == 1 && y->st[2] == y->ne[3] && y->st[1] == y->ne[2] * y->ne[3];
}

/* y's images [i0, i0 + count) = bias + w B_i through o, B_i = b + (i - i0) sb with rows
 * ldb apart: the VNNI GEMM where the CPU has it, else oneDNN's image by image (requantized
 * from scratch rows). */
static ex_status q_gemm_images(const cpu_exec *e, const ex_node_exec *n, const q_out *o,
                               const int8_t *w, const int32_t *bias, int64_t k, const int8_t *b,
                               int64_t ldb, int64_t sb, int64_t i0, int64_t count)
{
    const ex_tdesc *y = &n->dst;
    int64_t co = y->ne[1], plane = y->ne[2] * y->ne[3], at = i0 * y->st[0];
    if (e->vnni) {
        cpu_qgemm q = {.a = w,
                       .b = b,
                       .bias = bias,
                       .m = co,
                       .n = plane,
                       .k = k,
                       .lda = k,
                       .ldb = ldb,
                       .ldc = plane,
                       .sb = sb,
                       .sc = y->st[0],
                       .images = count};
        if (o->rq)
            q.c8 = cpu_i8(y) + at, q.mult = o->m, q.ms = o->ms, q.lo = o->lo;
        else
            q.c = cpu_i32(y) + at;
        return cpu_qgemm_run(e, &q, q_threads(e))
                   ? EX_OK
                   : cpu_fail(e, EX_ERR_NOMEM, "cpu: %s: out of host memory", ex_op_name(n->op));
    }
    int32_t *tmp = o->rq ? cpu_alloc(e, (size_t)(co * plane) * sizeof *tmp + 1) : NULL;
    if (o->rq && !tmp)
        return cpu_fail(e, EX_ERR_NOMEM, "cpu: %s: out of host memory", ex_op_name(n->op));
    ex_status st = EX_OK;
    for (int64_t i = 0; st == EX_OK && i < count; i++) {
        int32_t *c = o->rq ? tmp : cpu_i32(y) + at + i * y->st[0];
        st = q_gemm(e, false, co, plane, k, w, k, b + i * sb, ldb, c, plane, bias);
        if (st == EX_OK && o->rq)
            q_put_rows(o, y, at + i * y->st[0], plane, 0, tmp, co, plane);
    }
    free(tmp);
    return st;
}

CPU_OP(qconv2d)
{
    ex_status st = q_conv_check(e, n, 4, 4);
    if (st != EX_OK)
        return st;
    if (e->reference || !q_dense_planes(&n->dst)) {
        q_conv_ref(n, false);
        return EX_OK;
    }
    q_conv g = q_conv_of(n);
    q_out out = q_out_of(n);
    int64_t k = g.ci * g.kh * g.kw, plane = g.ho * g.wo;
    /* the columns of up to Q_COL_BYTES of images at once */
    int64_t chunk = Q_COL_BYTES / (k * plane > 0 ? k * plane : 1);
    chunk = chunk < 1 ? 1 : chunk > g.n ? g.n : chunk;
    int8_t *wown, *col = cpu_alloc(e, (size_t)(chunk * k * plane) + 1);
    int32_t *bown;
    const int8_t *w = q_dense2(e, &n->src[1], &wown);
    const int32_t *bias = q_bias(e, &n->src[2], &bown);
    if (!col || !w || !bias)
        st = cpu_fail(e, EX_ERR_NOMEM, "cpu: qconv2d: out of host memory");
    for (int64_t i0 = 0; st == EX_OK && i0 < g.n; i0 += chunk) {
        int64_t c = g.n - i0 < chunk ? g.n - i0 : chunk;
#pragma omp parallel for schedule(static) num_threads(q_threads(e)) if (c > 1)
        for (int64_t i = 0; i < c; i++)
            q_im2col(&n->src[0], &g, i0 + i, col + i * k * plane);
        st = q_gemm_images(e, n, &out, w, bias, k, col, plane, k * plane, i0, c);
    }
    free(col);
    free(wown);
    free(bown);
    return st;
}

/* Depthwise kernels and output rows the CPU kernel takes (DARTS's are up to 5x5 and
 * 32 wide). */
#define Q_DW_TAPS 64
#define Q_DW_ROW 4096

/* Row oh of a depthwise output plane from its sums: i32, or i8 through o with multiplier m. */
static inline void dw_store(const q_out *o, float m, const int32_t *acc, void *yp, int64_t at,
                            int64_t ysw, int64_t wo)
{
    if (o->rq && ysw == 1)
        rq_row32(acc, m, o->lo, (int8_t *)yp + at, wo);
    else if (o->rq)
        for (int64_t ow = 0; ow < wo; ow++)
            ((int8_t *)yp)[at + ow * ysw] = q_round((float)acc[ow] * m, o->lo);
    else
        for (int64_t ow = 0; ow < wo; ow++)
            ((int32_t *)yp)[at + ow * ysw] = acc[ow];
}

/* One (n, c) plane of a depthwise convolution: each output row summed in int32 over the
 * taps, each tap's run of columns clipped to the input so the inner loop has no bounds
 * test. Built for AVX2 and for the baseline, picked at run time (the AVX2 clone widens
 * int8 and multiplies 8 lanes at a time). */
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default"))) static void
dw_plane(const q_conv *g, const int8_t *restrict xp, int64_t xsh, int64_t xsw,
         const int8_t *restrict taps, int32_t bias, const q_out *o, float m, void *yp, int64_t ysh,
         int64_t ysw)
{
    /* per column tap: its offset and the outputs ow with 0 <= ow * sw + off < w */
    int64_t off[Q_DW_TAPS], lo[Q_DW_TAPS], hi[Q_DW_TAPS];
    for (int64_t q = 0; q < g->kw; q++) {
        off[q] = q * g->dw - g->pw;
        lo[q] = off[q] >= 0 ? 0 : (-off[q] + g->sw - 1) / g->sw;
        hi[q] = g->w - off[q] <= 0 ? 0 : (g->w - off[q] - 1) / g->sw + 1;
        hi[q] = hi[q] < g->wo ? hi[q] : g->wo;
    }
    int32_t acc[Q_DW_ROW];
    for (int64_t oh = 0; oh < g->ho; oh++) {
        for (int64_t ow = 0; ow < g->wo; ow++)
            acc[ow] = bias;
        for (int64_t p = 0; p < g->kh; p++) {
            int64_t ih = oh * g->sh - g->ph + p * g->dh;
            if (ih < 0 || ih >= g->h)
                continue;
            const int8_t *restrict xr = xp + ih * xsh;
            for (int64_t q = 0; q < g->kw; q++) {
                int32_t wt = taps[p * g->kw + q];
                if (xsw == 1 && g->sw == 1)
                    for (int64_t ow = lo[q]; ow < hi[q]; ow++)
                        acc[ow] += wt * xr[ow + off[q]];
                else
                    for (int64_t ow = lo[q]; ow < hi[q]; ow++)
                        acc[ow] += wt * xr[(ow * g->sw + off[q]) * xsw];
            }
        }
        dw_store(o, m, acc, yp, oh * ysh, ysw, g->wo);
    }
}

/* Bytes of the zero-padded plane dw_padded() keeps on the stack. */
#define Q_DW_PAD_BYTES 32768

/* dw_plane() over a zero-padded copy of the plane with rows of outputs rounded up to 8:
 * no clipping, so every tap is whole vectors (most DARTS planes are 7 to 32 wide, where
 * the clipped runs' remainders dominate). 0 when the plane does not fit the buffer. */
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default"))) static int
dw_padded(const q_conv *g, const int8_t *restrict xp, int64_t xsh, int64_t xsw,
          const int8_t *restrict taps, int32_t bias, const q_out *o, float m, void *yp, int64_t ysh,
          int64_t ysw)
{
    int64_t wo8 = (g->wo + 7) / 8 * 8, hp = (g->ho - 1) * g->sh + (g->kh - 1) * g->dh + 1,
            wp = (wo8 - 1) * g->sw + (g->kw - 1) * g->dw + 1;
    if (hp * wp > Q_DW_PAD_BYTES || wo8 > Q_DW_ROW)
        return 0;
    int8_t pad[Q_DW_PAD_BYTES];
    memset(pad, 0, (size_t)(hp * wp));
    for (int64_t h = 0; h < g->h; h++) {
        int64_t ph = h + g->ph;
        if (ph >= hp)
            break;
        int64_t cols = g->w < wp - g->pw ? g->w : wp - g->pw;
        if (xsw == 1)
            memcpy(pad + ph * wp + g->pw, xp + h * xsh, (size_t)(cols > 0 ? cols : 0));
        else
            for (int64_t v = 0; v < cols; v++)
                pad[ph * wp + v + g->pw] = xp[h * xsh + v * xsw];
    }
    int32_t acc[Q_DW_ROW];
    for (int64_t oh = 0; oh < g->ho; oh++) {
        for (int64_t ow = 0; ow < wo8; ow++)
            acc[ow] = bias;
        for (int64_t p = 0; p < g->kh; p++) {
            const int8_t *restrict row = pad + (oh * g->sh + p * g->dh) * wp;
            for (int64_t q = 0; q < g->kw; q++) {
                int16_t wt = taps[p * g->kw + q];
                const int8_t *restrict base = row + q * g->dw;
                /* an int8 product fits int16: 16-bit multiplies, then widened */
                if (g->sw == 1)
                    for (int64_t ow = 0; ow < wo8; ow += 8)
                        for (int k = 0; k < 8; k++)
                            acc[ow + k] += (int16_t)(wt * base[ow + k]);
                else
                    for (int64_t ow = 0; ow < wo8; ow += 8)
                        for (int k = 0; k < 8; k++)
                            acc[ow + k] += (int16_t)(wt * base[(ow + k) * 2]);
            }
        }
        dw_store(o, m, acc, yp, oh * ysh, ysw, g->wo);
    }
    return 1;
}

CPU_OP(qdwconv2d)
{
    ex_status st = q_conv_check(e, n, 4, 4);
    if (st != EX_OK)
        return st;
    if (e->reference) {
        q_conv_ref(n, true);
        return EX_OK;
    }
    q_conv g = q_conv_of(n);
    q_out out = q_out_of(n);
    const ex_tdesc *x = &n->src[0], *w = &n->src[1], *b = &n->src[2], *y = &n->dst;
    if (g.kh * g.kw > Q_DW_TAPS || g.wo > Q_DW_ROW)
        return cpu_fail(e, EX_ERR_UNSUPPORTED,
                        "cpu: qdwconv2d: kernels up to %d taps and rows up "
                        "to %d outputs",
                        Q_DW_TAPS, Q_DW_ROW);
    /* the VNNI kernel takes stride 1 over dense rows */
    bool vnni = e->vnni && g.sh == 1 && g.sw == 1 && x->st[3] == 1 && y->st[3] == 1;
#pragma omp parallel for schedule(static) num_threads(q_threads(e))
    for (int64_t nc = 0; nc < g.n * g.co; nc++) {
        int64_t i = nc / g.co, c = nc % g.co;
        int8_t taps[Q_DW_TAPS];
        for (int64_t p = 0; p < g.kh; p++)
            for (int64_t q = 0; q < g.kw; q++)
                taps[p * g.kw + q] = cpu_i8(w)[c * w->st[0] + p * w->st[2] + q * w->st[3]];
        const int8_t *xp = cpu_i8(x) + i * x->st[0] + c * x->st[1];
        int64_t at = i * y->st[0] + c * y->st[1];
        void *yp = out.rq ? (void *)(cpu_i8(y) + at) : (void *)(cpu_i32(y) + at);
        int32_t bias = cpu_i32(b)[c * b->st[0]];
        float m = out.rq ? q_mult(&out, c) : 0.0f;
        cpu_qdw d = {xp,
                     taps,
                     out.rq ? NULL : yp,
                     out.rq ? yp : NULL,
                     g.h,
                     g.w,
                     x->st[2],
                     g.ho,
                     g.wo,
                     y->st[2],
                     g.kh,
                     g.kw,
                     g.dh,
                     g.dw,
                     g.ph,
                     g.pw,
                     bias,
                     m,
                     out.lo};
        if (vnni && cpu_qdw_vnni(&d))
            continue;
        if (g.sw > 2 ||
            !dw_padded(&g, xp, x->st[2], x->st[3], taps, bias, &out, m, yp, y->st[2], y->st[3]))
            dw_plane(&g, xp, x->st[2], x->st[3], taps, bias, &out, m, yp, y->st[2], y->st[3]);
    }
    return EX_OK;
}

/* The reference of QPWCONV. */
static void q_pw_ref(const ex_node_exec *nd)
{
    const ex_tdesc *x = &nd->src[0], *w = &nd->src[1], *b = &nd->src[2], *y = &nd->dst;
    const int8_t *xv = cpu_i8(x), *wv = cpu_i8(w);
    q_out out = q_out_of(nd);
    for (int64_t n = 0; n < y->ne[0]; n++)
        for (int64_t o = 0; o < y->ne[1]; o++)
            for (int64_t i = 0; i < y->ne[2]; i++)
                for (int64_t j = 0; j < y->ne[3]; j++) {
                    int32_t acc = cpu_i32(b)[o * b->st[0]];
                    for (int64_t c = 0; c < x->ne[1]; c++)
                        acc += (int32_t)wv[o * w->st[0] + c * w->st[1]] *
                               xv[n * x->st[0] + c * x->st[1] + i * x->st[2] + j * x->st[3]];
                    q_put(&out, y, n * y->st[0] + o * y->st[1] + i * y->st[2] + j * y->st[3], o,
                          acc);
                }
}

CPU_OP(qpwconv)
{
    ex_status st = q_conv_check(e, n, 4, 2);
    if (st != EX_OK)
        return st;
    const ex_tdesc *x = &n->src[0], *y = &n->dst;
    bool x_rows = x->st[3] == 1 && x->st[2] == x->ne[3]; /* each channel's pixels dense */
    if (e->reference || !x_rows || !q_dense_planes(y)) {
        q_pw_ref(n);
        return EX_OK;
    }
    q_out out = q_out_of(n);
    int8_t *wown;
    int32_t *bown;
    const int8_t *w = q_dense2(e, &n->src[1], &wown);
    const int32_t *bias = q_bias(e, &n->src[2], &bown);
    if (!w || !bias)
        st = cpu_fail(e, EX_ERR_NOMEM, "cpu: qpwconv: out of host memory");
    else
        st = q_gemm_images(e, n, &out, w, bias, x->ne[1], cpu_i8(x), x->st[1], x->st[0], 0,
                           x->ne[0]);
    free(wown);
    free(bown);
    return st;
}

CPU_OP(qlinear)
{
    ex_status st = q_conv_check(e, n, 2, 2);
    if (st != EX_OK)
        return st;
    const ex_tdesc *x = &n->src[0], *w = &n->src[1], *b = &n->src[2], *y = &n->dst;
    if (e->reference || x->st[1] != 1 || y->st[1] != 1) {
        for (int64_t i = 0; i < y->ne[0]; i++)
            for (int64_t o = 0; o < y->ne[1]; o++) {
                int32_t acc = cpu_i32(b)[o * b->st[0]];
                for (int64_t k = 0; k < x->ne[1]; k++)
                    acc += (int32_t)cpu_i8(x)[i * x->st[0] + k * x->st[1]] *
                           cpu_i8(w)[o * w->st[0] + k * w->st[1]];
                cpu_i32(y)[i * y->st[0] + o * y->st[1]] = acc;
            }
        return EX_OK;
    }
    int8_t *wown;
    int32_t *bown;
    const int8_t *wd = q_dense2(e, w, &wown);
    const int32_t *bias = q_bias(e, b, &bown);
    if (!wd || !bias)
        st = cpu_fail(e, EX_ERR_NOMEM, "cpu: qlinear: out of host memory");
    else
        st = q_gemm(e, true, y->ne[0], y->ne[1], x->ne[1], cpu_i8(x), x->st[0], wd, x->ne[1],
                    cpu_i32(y), y->st[0], bias);
    free(wown);
    free(bown);
    return st;
}

/* ---- pooling ---- */

/* sign(s) * ((|s| + k / 2) / k): the average rounded half away from zero. */
static inline int8_t q_avg(int32_t s, int32_t k)
{
    int32_t a = s < 0 ? -s : s, r = (a + k / 2) / k;
    return (int8_t)(s < 0 ? -r : r);
}

/* Bytes of a padded row q_max_plane() keeps on the stack. */
#define Q_POOL_ROW 1024

/* One plane of max pooling over dense rows: each output row's window rows reduced to one
 * row padded with -128 at the sides (the start of the clipped window's maximum, which any
 * element equals or passes), then each output the maximum of its kw columns. The
 * column loops vectorize. 0 when a padded row does not fit the buffer. */
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default"))) static int
q_max_plane(const int8_t *restrict xp, int64_t xsh, int64_t h, int64_t w, int8_t *restrict yp,
            int64_t ysh, int64_t ho, int64_t wo, int kh, int kw, int sh, int sw, int ph, int pw)
{
    int64_t wp = (wo - 1) * sw + kw;
    if (wp > Q_POOL_ROW || pw + w > Q_POOL_ROW)
        return 0;
    int8_t v[Q_POOL_ROW];
    for (int64_t i = 0; i < ho; i++) {
        int64_t h0 = i * sh - ph, h1 = h0 + kh;
        h0 = h0 < 0 ? 0 : h0;
        h1 = h1 > h ? h : h1;
        memset(v, -128, (size_t)wp);
        for (int64_t r = h0; r < h1; r++) {
            const int8_t *restrict xr = xp + r * xsh;
            int8_t *restrict vr = v + pw;
            int64_t n = w < wp - pw ? w : wp - pw;
            for (int64_t c = 0; c < n; c++)
                vr[c] = xr[c] > vr[c] ? xr[c] : vr[c];
        }
        int8_t *restrict yr = yp + i * ysh;
        for (int64_t j = 0; j < wo; j++) {
            int8_t m = v[j * sw];
            for (int q = 1; q < kw; q++)
                m = v[j * sw + q] > m ? v[j * sw + q] : m;
            yr[j] = m;
        }
    }
    return 1;
}

static ex_status q_pool(const cpu_exec *e, const ex_node_exec *nd, bool max)
{
    ex_status st = q_need(e, nd, 1);
    if (st != EX_OK)
        return st;
    const ex_tdesc *x = &nd->src[0], *y = &nd->dst;
    if (!ex_td_valid(x, EX_I8) || !ex_td_valid(y, EX_I8) || x->ndim != 4 || y->ndim != 4)
        return cpu_fail(e, EX_ERR_ARG, "cpu: %s: x and y must be i8 [N, C, H, W]",
                        ex_op_name(nd->op));
    ex_td_pool_geom g;
    char why[256];
    st = ex_td_pool_geom_of(nd->ip, x->ne, y->ne, &g, why, sizeof why);
    if (st != EX_OK)
        return cpu_fail(e, st, "cpu: %s: %s", ex_op_name(nd->op), why);
    int kh = nd->ip[0], kw = nd->ip[1], sh = nd->ip[2], sw = nd->ip[3], ph = nd->ip[4],
        pw = nd->ip[5];
    const int8_t *xv = cpu_i8(x);
    /* the row kernel: max pooling over dense rows, windows that overlap x */
    bool dense = max && !e->reference && x->st[3] == 1 && y->st[3] == 1;
#pragma omp parallel for schedule(static) num_threads(q_threads(e))
    for (int64_t nc = 0; nc < y->ne[0] * y->ne[1]; nc++) {
        int64_t n = nc / y->ne[1], c = nc % y->ne[1];
        const int8_t *xp = xv + n * x->st[0] + c * x->st[1];
        int8_t *yp = cpu_i8(y) + n * y->st[0] + c * y->st[1];
        cpu_qpool pl = {xp,       yp, x->ne[2], x->ne[3], x->st[2], y->ne[2], y->ne[3],
                        y->st[2], kh, kw,       sh,       sw,       ph,       pw};
        if (dense && e->vnni && cpu_qmax_vnni(&pl))
            continue;
        if (dense && q_max_plane(xp, x->st[2], x->ne[2], x->ne[3], yp, y->st[2], y->ne[2], y->ne[3],
                                 kh, kw, sh, sw, ph, pw))
            continue;
        for (int64_t i = 0; i < y->ne[2]; i++) {
            int64_t h0 = i * sh - ph, h1 = h0 + kh;
            h0 = h0 < 0 ? 0 : h0;
            h1 = h1 > x->ne[2] ? x->ne[2] : h1;
            for (int64_t j = 0; j < y->ne[3]; j++) {
                int64_t w0 = j * sw - pw, w1 = w0 + kw;
                w0 = w0 < 0 ? 0 : w0;
                w1 = w1 > x->ne[3] ? x->ne[3] : w1;
                int32_t acc = max ? -128 : 0;
                for (int64_t h = h0; h < h1; h++)
                    for (int64_t v = w0; v < w1; v++) {
                        int32_t t = xp[h * x->st[2] + v * x->st[3]];
                        acc = max ? (t > acc ? t : acc) : acc + t;
                    }
                int32_t k = (int32_t)((h1 - h0) * (w1 - w0));
                yp[i * y->st[2] + j * y->st[3]] = max ? (int8_t)acc : q_avg(acc, k);
            }
        }
    }
    return EX_OK;
}

CPU_OP(qmax_pool)
{
    return q_pool(e, n, true);
}

CPU_OP(qavg_pool)
{
    return q_pool(e, n, false);
}

CPU_OP(qglobal_avg_pool)
{
    ex_status st = q_need(e, n, 1);
    if (st != EX_OK)
        return st;
    const ex_tdesc *x = &n->src[0];
    if (x->ndim != 4 || n->dst.ndim != 4)
        return cpu_fail(e, EX_ERR_ARG, "cpu: qglobal_avg_pool: x and y must be [N, C, H, W]");
    char why[160];
    if ((st = ex_td_gap_of(n, why, sizeof why)) != EX_OK)
        return cpu_fail(e, st, "cpu: qglobal_avg_pool: %s", why);
    ex_node_exec g = *n;
    g.ip[0] = (int32_t)x->ne[2];
    g.ip[1] = (int32_t)x->ne[3];
    g.ip[2] = g.ip[3] = 1;
    g.ip[4] = g.ip[5] = 0;
    return q_pool(e, &g, false);
}
