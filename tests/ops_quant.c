/* Op suite: the quantized inference ops, each against an integer reference written here
 * from docs/ops.md, bit for bit, on odd shapes, strided views and the rounding ties. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/backend_iface.h"
#include "ops_harness.h"

/* A host view of an operand: the root's data and the view's shape and strides, padded on
 * the left to 4 dims. */
typedef struct hview {
    ex_dtype dt;
    const void *data;
    int nd;
    int64_t ne[4], st[4], off;
} hview;

/* A case: its context, the roots' host data, and the checks failed. */
typedef struct qcase {
    suite *s;
    const char *name;
    ex_ctx *ctx;
    rng r;
    ex_tensor *root[8];
    void *data[8];
    int nroots;
    int failures;
    int *failed; /* the family's count of failed checks */
} qcase;

static void qfail(qcase *q, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void qfail(qcase *q, const char *fmt, ...)
{
    char m[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    print_error("[%s] %s: %s\n", q->s->backend_name, q->name, m);
    q->failures++;
}

/* The family: every case runs, and the family fails at the end if any check failed. */
typedef struct qfam {
    suite *s;
    int failed;
} qfam;

static void q_open(qcase *q, qfam *f, const char *name)
{
    memset(q, 0, sizeof *q);
    q->failed = &f->failed;
    q->s = f->s;
    q->name = name;
    q->ctx = ex_ctx_new();
    q->r = rng_from(name);
    assert_non_null(q->ctx);
}

static void q_close(qcase *q)
{
    for (int i = 0; i < q->nroots; i++)
        free(q->data[i]);
    ex_ctx_free(q->ctx);
    *q->failed += q->failures;
}

/* A root input of dtype dt, filled: i8 uniform in [lo, hi], i32 likewise, f32 uniform
 * [lo, hi) (fhalf: multiples of 0.5 there, so that products hit rounding ties). */
static hview q_root(qcase *q, ex_dtype dt, int nd, const int64_t *ne, double lo, double hi,
                    bool fhalf, ex_tensor **t)
{
    int64_t n = numel_of(nd, ne);
    int k = q->nroots++;
    char name[16];
    snprintf(name, sizeof name, "r%d", k);
    q->root[k] = *t = ex_input(q->ctx, dt, nd, ne, name);
    void *d = xcalloc((size_t)n, (size_t)ex_dtype_size(dt));
    for (int64_t i = 0; i < n; i++) {
        if (dt == EX_I8)
            ((int8_t *)d)[i] = (int8_t)(lo + (double)rng_below(&q->r, (int64_t)(hi - lo) + 1));
        else if (dt == EX_I32)
            ((int32_t *)d)[i] = (int32_t)(lo + (double)rng_below(&q->r, (int64_t)(hi - lo) + 1));
        else
            ((float *)d)[i] = fhalf ? (float)(0.5 * floor(2.0 * rng_uniform(&q->r, lo, hi)))
                                    : (float)rng_uniform(&q->r, lo, hi);
    }
    q->data[k] = d;
    hview v = {dt, d, nd, {1, 1, 1, 1}, {0, 0, 0, 0}, 0};
    int64_t s = 1;
    for (int i = nd - 1; i >= 0; i--) {
        v.ne[4 - nd + i] = ne[i];
        v.st[4 - nd + i] = s;
        s *= ne[i];
    }
    return v;
}

/* The slice [start, start + len) of dimension dim (of the operand's own dims). */
static hview hv_slice(hview v, int dim, int64_t start, int64_t len)
{
    int d = 4 - v.nd + dim;
    v.off += start * v.st[d];
    v.ne[d] = len;
    return v;
}

static double hv_get(const hview *v, int64_t a, int64_t b, int64_t c, int64_t d)
{
    int64_t k = v->off + a * v->st[0] + b * v->st[1] + c * v->st[2] + d * v->st[3];
    return v->dt == EX_I8    ? ((const int8_t *)v->data)[k]
           : v->dt == EX_I32 ? ((const int32_t *)v->data)[k]
                             : ((const float *)v->data)[k];
}

/* clamp(rne(f)) to [lo, 127] of an f32 value */
static int q_rne(float f, int lo)
{
    double r = nearbyint((double)f);
    return r < lo ? lo : r > 127 ? 127 : (int)r;
}

/* Plans y, writes the roots, runs, and compares y's bytes with want (dst's dtype, dense). */
static void q_check(qcase *q, ex_tensor *y, const void *want)
{
    ex_plan *plan = NULL;
    char msg[512] = "";
    ex_keep(q->ctx, y);
    if (plan_graph(q->s, q->ctx, &plan, msg, sizeof msg) != EX_OK) {
        qfail(q, "plan: %s", msg);
        return;
    }
    for (int i = 0; i < q->nroots; i++) {
        size_t bytes = (size_t)ex_tensor_numel(q->root[i]) *
                       (size_t)ex_dtype_size(ex_tensor_dtype(q->root[i]));
        if (ex_plan_write(plan, q->root[i], q->data[i], bytes) != EX_OK)
            qfail(q, "write: %s", ex_plan_error(plan));
    }
    size_t n = (size_t)ex_tensor_numel(y), es = (size_t)ex_dtype_size(ex_tensor_dtype(y));
    unsigned char *got = xcalloc(n, es);
    if (ex_plan_run(plan) != EX_OK || ex_plan_read(plan, y, got, n * es) != EX_OK) {
        qfail(q, "run: %s", ex_plan_error(plan));
    } else if (memcmp(got, want, n * es)) {
        size_t i = 0;
        while (i < n && !memcmp(got + i * es, (const unsigned char *)want + i * es, es))
            i++;
        double g = 0, w = 0;
        if (ex_tensor_dtype(y) == EX_I8) {
            g = ((int8_t *)got)[i];
            w = ((const int8_t *)want)[i];
        } else if (ex_tensor_dtype(y) == EX_I32) {
            g = ((int32_t *)got)[i];
            w = ((const int32_t *)want)[i];
        } else {
            g = ((float *)got)[i];
            w = ((const float *)want)[i];
        }
        qfail(q, "element %zu of %zu is %.9g, the reference %.9g", i, n, g, w);
    }
    free(got);
    ex_plan_free(plan);
}

/* The y dims padded to 4 and their count. */
static int64_t dims4(const ex_tensor *y, int64_t ne[4])
{
    int nd = ex_tensor_ndim(y);
    for (int d = 0; d < 4; d++)
        ne[d] = d < 4 - nd ? 1 : ex_tensor_dim(y, d - (4 - nd));
    return ne[0] * ne[1] * ne[2] * ne[3];
}

/* Per-channel value of v (f32 [C] or [1]) for channel c. */
static float chan(const hview *v, int64_t c)
{
    return (float)hv_get(v, 0, 0, 0, v->ne[3] == 1 ? 0 : c);
}

/* ---- element-wise: quantize, dequantize, requantize, qadd, qrelu ---- */

enum { K_QUANTIZE, K_DEQUANTIZE, K_REQUANTIZE, K_QADD, K_QRELU };

/* The reference of an element-wise case on operands a (and b) into a dense y. */
static void ew_ref(int kind, const hview *a, const hview *b, int cdim, float ma, float mb, int lo,
                   const int64_t ne[4], void *y)
{
    int64_t i = 0;
    for (int64_t i0 = 0; i0 < ne[0]; i0++)
        for (int64_t i1 = 0; i1 < ne[1]; i1++)
            for (int64_t i2 = 0; i2 < ne[2]; i2++)
                for (int64_t i3 = 0; i3 < ne[3]; i3++, i++) {
                    int64_t ix[4] = {i0, i1, i2, i3};
                    float x = (float)hv_get(a, i0, i1, i2, i3);
                    switch (kind) {
                    case K_QUANTIZE: {
                        float p = x * chan(b, ix[cdim]);
                        ((int8_t *)y)[i] = (int8_t)q_rne(p, -127);
                        break;
                    }
                    case K_DEQUANTIZE: ((float *)y)[i] = x * chan(b, ix[cdim]); break;
                    case K_REQUANTIZE: {
                        float p = x * chan(b, ix[cdim]);
                        ((int8_t *)y)[i] = (int8_t)q_rne(p, lo);
                        break;
                    }
                    case K_QADD: {
                        float pa = x * ma, pb = (float)hv_get(b, i0, i1, i2, i3) * mb;
                        float s = pa + pb;
                        ((int8_t *)y)[i] = (int8_t)q_rne(s, lo);
                        break;
                    }
                    default: ((int8_t *)y)[i] = (int8_t)(x > 0 ? x : 0); break;
                    }
                }
}

static void ew_case(qfam *s, const char *name, int kind, ex_dtype in, int nd, const int64_t *ne,
                    bool slice, bool per_channel, bool relu)
{
    qcase q;
    q_open(&q, s, name);
    ex_tensor *ta, *tb = NULL;
    hview a, b = {0};
    double lo = in == EX_F32 ? -4.0 : in == EX_I32 ? -3000000 : -128, hi = -lo - (in == EX_I8);
    a = q_root(&q, in, nd, ne, lo, hi, kind == K_QUANTIZE, &ta);
    if (slice) { /* channels [1, C - 1) of the root: strides of a view, an offset */
        a = hv_slice(a, 1, 1, ne[1] - 2);
        ta = ex_slice(q.ctx, ta, 1, 1, ne[1] - 2);
    }
    int64_t c = ex_tensor_dim(ta, 1), one = per_channel ? c : 1;
    float ma = 0.37f, mb = 1.7f;
    if (kind == K_QADD) {
        int64_t bne[4];
        for (int d = 0; d < nd; d++)
            bne[d] = ex_tensor_dim(ta, d);
        b = q_root(&q, EX_I8, nd, bne, -128, 127, false, &tb);
    } else if (kind != K_QRELU) {
        /* quantize: 1/scale; requantize: accumulator to int8; dequantize: a scale */
        double v0 = kind == K_QUANTIZE     ? 8
                    : kind == K_REQUANTIZE ? (in == EX_I32 ? 2e-5 : 0.3)
                                           : 0.01;
        b = q_root(&q, EX_F32, 1, &one, v0, 4 * v0, false, &tb);
        if (kind == K_QUANTIZE) /* one channel with r = 1: the halves of x are ties */
            ((float *)q.data[1])[0] = 1.0f;
    }
    ex_tensor *y = kind == K_QUANTIZE     ? ex_quantize(q.ctx, ta, tb)
                   : kind == K_DEQUANTIZE ? ex_dequantize(q.ctx, ta, tb)
                   : kind == K_REQUANTIZE ? ex_requantize(q.ctx, ta, tb, relu)
                   : kind == K_QADD       ? ex_qadd(q.ctx, ta, ma, tb, mb, relu)
                                          : ex_qrelu(q.ctx, ta);
    assert_int_equal(ex_ctx_status(q.ctx), EX_OK);
    int64_t yne[4], n = dims4(y, yne);
    void *want = xcalloc((size_t)n, 4);
    ew_ref(kind, &a, &b, 4 - nd + 1, ma, mb, relu ? 0 : -127, yne, want);
    q_check(&q, y, want);
    free(want);
    q_close(&q);
}

static void elementwise(qfam *s)
{
    int64_t x4[4] = {3, 7, 5, 9}, x2[2] = {13, 11};
    ew_case(s, "quantize per channel", K_QUANTIZE, EX_F32, 4, x4, false, true, false);
    ew_case(s, "quantize per tensor, 2-dim slice", K_QUANTIZE, EX_F32, 2, x2, true, false, false);
    ew_case(s, "dequantize i8 per channel", K_DEQUANTIZE, EX_I8, 4, x4, true, true, false);
    ew_case(s, "dequantize i32 per tensor", K_DEQUANTIZE, EX_I32, 2, x2, false, false, false);
    ew_case(s, "requantize i32 per channel", K_REQUANTIZE, EX_I32, 4, x4, false, true, false);
    ew_case(s, "requantize i32 relu", K_REQUANTIZE, EX_I32, 4, x4, true, true, true);
    ew_case(s, "requantize i8 per tensor", K_REQUANTIZE, EX_I8, 2, x2, true, false, false);
    ew_case(s, "qadd", K_QADD, EX_I8, 4, x4, false, false, false);
    ew_case(s, "qadd relu of a slice", K_QADD, EX_I8, 4, x4, true, false, true);
    ew_case(s, "qrelu of a slice", K_QRELU, EX_I8, 4, x4, true, false, false);
}

/* ---- qconcat ---- */

static void concat(qfam *s)
{
    qcase q;
    q_open(&q, s, "qconcat of three parts, one a slice");
    int64_t ne[3][4] = {{2, 3, 5, 7}, {2, 6, 5, 7}, {2, 2, 5, 7}}, three = 3;
    ex_tensor *t[3], *tm;
    hview v[3];
    for (int i = 0; i < 3; i++)
        v[i] = q_root(&q, EX_I8, 4, ne[i], -128, 127, false, &t[i]);
    v[1] = hv_slice(v[1], 1, 2, 4);
    t[1] = ex_slice(q.ctx, t[1], 1, 2, 4);
    hview m = q_root(&q, EX_F32, 1, &three, 0.3, 1.9, false, &tm);
    ((float *)q.data[3])[0] = 1.0f;
    ((float *)q.data[3])[2] = 0.5f; /* ties */
    ex_tensor *y = ex_qconcat(q.ctx, 3, t, tm);
    assert_int_equal(ex_ctx_status(q.ctx), EX_OK);
    int64_t yne[4], n = dims4(y, yne);
    int8_t *want = xcalloc((size_t)n, 1);
    for (int64_t a = 0; a < yne[0]; a++)
        for (int64_t c = 0; c < yne[1]; c++)
            for (int64_t h = 0; h < yne[2]; h++)
                for (int64_t w = 0; w < yne[3]; w++) {
                    int p = c < 3 ? 0 : c < 7 ? 1 : 2;
                    int64_t pc = c - (p == 0 ? 0 : p == 1 ? 3 : 7);
                    float f = (float)hv_get(&v[p], a, pc, h, w) * chan(&m, p);
                    want[((a * yne[1] + c) * yne[2] + h) * yne[3] + w] = (int8_t)q_rne(f, -127);
                }
    q_check(&q, y, want);
    free(want);
    q_close(&q);
}

/* ---- convolutions and linear ---- */

enum { C_DENSE, C_DEPTH, C_POINT };

/* The fused requantize of a convolution case: none (i32 sums), per channel, or one
 * multiplier for all with ReLU. */
enum { RQ_NONE, RQ_CHANNEL, RQ_TENSOR_RELU };

static void conv_case_rq(qfam *s, const char *name, int kind, const int64_t xne[4], int64_t co,
                         int kh, int kw, ex_conv_params p, bool slice, int rq)
{
    qcase q;
    q_open(&q, s, name);
    ex_tensor *tx, *tw, *tb;
    hview x = q_root(&q, EX_I8, 4, xne, -128, 127, false, &tx);
    if (slice) {
        x = hv_slice(x, 1, 1, xne[1] - 1);
        tx = ex_slice(q.ctx, tx, 1, 1, xne[1] - 1);
    }
    int64_t ci = ex_tensor_dim(tx, 1), cout = kind == C_DEPTH ? ci : co;
    int64_t wne[4] = {cout, kind == C_DEPTH ? 1 : ci, kh, kw};
    hview w = q_root(&q, EX_I8, kind == C_POINT ? 2 : 4, wne, -128, 127, false, &tw);
    hview b = q_root(&q, EX_I32, 1, &cout, -100000, 100000, false, &tb);
    ex_tensor *y, *tm = NULL;
    hview m = {0};
    bool relu = rq == RQ_TENSOR_RELU;
    if (rq != RQ_NONE) { /* sums of up to a few 10^5 to the int8 range and past it */
        int64_t mc = rq == RQ_CHANNEL ? cout : 1;
        m = q_root(&q, EX_F32, 1, &mc, 2e-4, 8e-4, false, &tm);
    }
    if (rq == RQ_NONE)
        y = kind == C_DENSE   ? ex_qconv2d(q.ctx, tx, tw, tb, &p)
            : kind == C_DEPTH ? ex_qdwconv2d(q.ctx, tx, tw, tb, &p)
                              : ex_qpwconv(q.ctx, tx, tw, tb);
    else
        y = kind == C_DENSE   ? ex_qconv2d_rq(q.ctx, tx, tw, tb, &p, tm, relu)
            : kind == C_DEPTH ? ex_qdwconv2d_rq(q.ctx, tx, tw, tb, &p, tm, relu)
                              : ex_qpwconv_rq(q.ctx, tx, tw, tb, tm, relu);
    assert_int_equal(ex_ctx_status(q.ctx), EX_OK);
    int64_t yne[4], n = dims4(y, yne);
    int32_t *want = xcalloc((size_t)n, 4);
    int64_t i = 0;
    for (int64_t a = 0; a < yne[0]; a++)
        for (int64_t o = 0; o < yne[1]; o++)
            for (int64_t oh = 0; oh < yne[2]; oh++)
                for (int64_t ow = 0; ow < yne[3]; ow++, i++) {
                    int64_t acc = (int64_t)hv_get(&b, 0, 0, 0, o);
                    for (int64_t c = 0; c < (kind == C_DEPTH ? 1 : ci); c++)
                        for (int r = 0; r < kh; r++)
                            for (int t = 0; t < kw; t++) {
                                int64_t h = oh * p.stride[0] - p.pad[0] + r * p.dilation[0],
                                        v = ow * p.stride[1] - p.pad[1] + t * p.dilation[1];
                                if (h < 0 || v < 0 || h >= x.ne[2] || v >= x.ne[3])
                                    continue;
                                double wt = kind == C_POINT ? hv_get(&w, 0, 0, o, c)
                                                            : hv_get(&w, o, c, r, t);
                                acc += (int64_t)wt *
                                       (int64_t)hv_get(&x, a, kind == C_DEPTH ? o : c, h, v);
                            }
                    if (rq == RQ_NONE)
                        want[i] = (int32_t)acc;
                    else
                        ((int8_t *)want)[i] =
                            (int8_t)q_rne((float)(int32_t)acc * chan(&m, o), relu ? 0 : -127);
                }
    q_check(&q, y, want);
    free(want);
    q_close(&q);
}

static void conv_case(qfam *s, const char *name, int kind, const int64_t xne[4], int64_t co, int kh,
                      int kw, ex_conv_params p, bool slice)
{
    conv_case_rq(s, name, kind, xne, co, kh, kw, p, slice, RQ_NONE);
}

static void linear(qfam *s)
{
    qcase q;
    q_open(&q, s, "qlinear");
    int64_t xne[2] = {5, 37}, wne[2] = {11, 37}, m = 11;
    ex_tensor *tx, *tw, *tb;
    hview x = q_root(&q, EX_I8, 2, xne, -128, 127, false, &tx);
    hview w = q_root(&q, EX_I8, 2, wne, -128, 127, false, &tw);
    hview b = q_root(&q, EX_I32, 1, &m, -100000, 100000, false, &tb);
    ex_tensor *y = ex_qlinear(q.ctx, tx, tw, tb);
    assert_int_equal(ex_ctx_status(q.ctx), EX_OK);
    int32_t want[5 * 11];
    for (int64_t i = 0; i < 5; i++)
        for (int64_t o = 0; o < m; o++) {
            int64_t acc = (int64_t)hv_get(&b, 0, 0, 0, o);
            for (int64_t k = 0; k < 37; k++)
                acc += (int64_t)hv_get(&x, 0, 0, i, k) * (int64_t)hv_get(&w, 0, 0, o, k);
            want[i * m + o] = (int32_t)acc;
        }
    q_check(&q, y, want);
    q_close(&q);
}

static void convolutions(qfam *s)
{
    int64_t x[4] = {2, 5, 9, 11}, xp[4] = {3, 7, 6, 5};
    conv_case(s, "qconv2d 3x3", C_DENSE, x, 4, 3, 3, (ex_conv_params){{1, 1}, {1, 1}, {1, 1}},
              false);
    conv_case(s, "qconv2d 1x7 stride 2 dilation 2 of a slice", C_DENSE, x, 3, 1, 7,
              (ex_conv_params){{2, 1}, {0, 5}, {2, 2}}, true);
    conv_case(s, "qdwconv2d 3x3", C_DEPTH, x, 0, 3, 3, (ex_conv_params){{1, 1}, {1, 1}, {1, 1}},
              false);
    conv_case(s, "qdwconv2d 5x5 stride 2 of a slice", C_DEPTH, x, 0, 5, 5,
              (ex_conv_params){{2, 2}, {2, 2}, {1, 1}}, true);
    conv_case(s, "qdwconv2d 3x3 dilation 2", C_DEPTH, x, 0, 3, 3,
              (ex_conv_params){{1, 1}, {2, 2}, {2, 2}}, false);
    conv_case(s, "qpwconv", C_POINT, xp, 9, 1, 1, (ex_conv_params){{1, 1}, {0, 0}, {1, 1}}, false);
    conv_case(s, "qpwconv of a slice", C_POINT, xp, 4, 1, 1,
              (ex_conv_params){{1, 1}, {0, 0}, {1, 1}}, true);
    /* the blocked GEMMs' tails: channels, rows and pixels past whole blocks */
    int64_t xw[4] = {2, 70, 9, 9}, x8[4] = {2, 8, 7, 10}, x3[4] = {2, 3, 9, 11};
    conv_case(s, "qpwconv of 70 channels, 81 pixels", C_POINT, xw, 13, 1, 1,
              (ex_conv_params){{1, 1}, {0, 0}, {1, 1}}, false);
    conv_case(s, "qconv2d 3x3 of 8 channels", C_DENSE, x8, 12, 3, 3,
              (ex_conv_params){{1, 1}, {1, 1}, {1, 1}}, false);
    /* fewer channels than a dot product of 4 takes (Vulkan's integer-dot path) */
    conv_case(s, "qconv2d 3x3 of 3 channels", C_DENSE, x3, 5, 3, 3,
              (ex_conv_params){{1, 1}, {1, 1}, {1, 1}}, false);
    /* the requantize fused in: i8 out */
    ex_conv_params one = {{1, 1}, {0, 0}, {1, 1}}, same3 = {{1, 1}, {1, 1}, {1, 1}};
    conv_case_rq(s, "qconv2d_rq 3x3 of 8 channels", C_DENSE, x8, 12, 3, 3, same3, false,
                 RQ_CHANNEL);
    conv_case_rq(s, "qconv2d_rq 1x7 stride 2 dilation 2 of a slice, relu", C_DENSE, x, 3, 1, 7,
                 (ex_conv_params){{2, 1}, {0, 5}, {2, 2}}, true, RQ_TENSOR_RELU);
    conv_case_rq(s, "qdwconv2d_rq 3x3", C_DEPTH, x, 0, 3, 3, same3, false, RQ_CHANNEL);
    conv_case_rq(s, "qdwconv2d_rq 5x5 stride 2 of a slice, relu", C_DEPTH, x, 0, 5, 5,
                 (ex_conv_params){{2, 2}, {2, 2}, {1, 1}}, true, RQ_TENSOR_RELU);
    conv_case_rq(s, "qpwconv_rq of 70 channels, 81 pixels", C_POINT, xw, 13, 1, 1, one, false,
                 RQ_CHANNEL);
    conv_case_rq(s, "qpwconv_rq of a slice, relu", C_POINT, xp, 4, 1, 1, one, true, RQ_TENSOR_RELU);
    /* one image of few pixels: the threads split the rows, the last block short */
    int64_t x1[4] = {1, 70, 9, 9};
    conv_case(s, "qpwconv of one image, 81 pixels", C_POINT, x1, 13, 1, 1, one, false);
    conv_case_rq(s, "qpwconv_rq of one image, 81 pixels", C_POINT, x1, 13, 1, 1, one, false,
                 RQ_CHANNEL);
    /* planes of whole words, of fewer bytes than a word, and an odd channel count over
     * planes of 2 mod 4 bytes (Vulkan's i8 words, docs/vulkan.md) */
    int64_t xq[4] = {2, 8, 4, 7}, xt[4] = {2, 6, 1, 3}, xo[4] = {2, 3, 5, 6};
    conv_case_rq(s, "qpwconv_rq of 28-pixel planes", C_POINT, xq, 12, 1, 1, one, false, RQ_CHANNEL);
    conv_case_rq(s, "qdwconv2d_rq of 3-pixel planes, relu", C_DEPTH, xt, 0, 1, 3,
                 (ex_conv_params){{1, 1}, {0, 1}, {1, 1}}, false, RQ_TENSOR_RELU);
    conv_case_rq(s, "qconv2d_rq of 5 channels over 30-pixel planes", C_DENSE, xo, 5, 3, 3, same3,
                 false, RQ_CHANNEL);
    /* the stride-1 depthwise kernel's flat planes: wide rows with the filter's span, no
     * padding, an even filter height, and a slice's channels */
    int64_t xd[4] = {2, 3, 28, 30};
    conv_case_rq(s, "qdwconv2d_rq 5x5 dilation 2 over 28x30 planes", C_DEPTH, xd, 0, 5, 5,
                 (ex_conv_params){{1, 1}, {4, 4}, {2, 2}}, false, RQ_CHANNEL);
    conv_case(s, "qdwconv2d 2x3 without padding of a slice", C_DEPTH, xd, 0, 2, 3,
              (ex_conv_params){{1, 1}, {0, 0}, {1, 1}}, true);
    /* enough planes for the kernel's blocks of channels, the last one short */
    int64_t xc[4] = {4, 37, 7, 7};
    conv_case_rq(s, "qdwconv2d_rq 3x3 of 37 channels over 7x7 planes", C_DEPTH, xc, 0, 3, 3, same3,
                 false, RQ_CHANNEL);
    conv_case(s, "qdwconv2d 3x3 dilation 2 of 37 channels", C_DEPTH, xc, 0, 3, 3,
              (ex_conv_params){{1, 1}, {2, 2}, {2, 2}}, false);
    conv_case_rq(s, "qdwconv2d_rq 3x5 padding 2x1 over 6x5 planes, relu", C_DEPTH, xp, 0, 3, 5,
                 (ex_conv_params){{1, 1}, {2, 1}, {1, 1}}, false, RQ_TENSOR_RELU);
    linear(s);
}

/* ---- pooling ---- */

static void pool_case(qfam *s, const char *name, ex_op op, const int64_t xne[4], int k, int stride,
                      int pad, bool slice)
{
    qcase q;
    q_open(&q, s, name);
    ex_tensor *tx;
    hview x = q_root(&q, EX_I8, 4, xne, -128, 127, false, &tx);
    if (slice) {
        x = hv_slice(x, 3, 1, xne[3] - 1);
        tx = ex_slice(q.ctx, tx, 3, 1, xne[3] - 1);
    }
    ex_pool_params p = {{k, k}, {stride, stride}, {pad, pad}};
    ex_tensor *y = op == EX_OP_QMAX_POOL   ? ex_qmax_pool(q.ctx, tx, &p)
                   : op == EX_OP_QAVG_POOL ? ex_qavg_pool(q.ctx, tx, &p)
                                           : ex_qglobal_avg_pool(q.ctx, tx);
    assert_int_equal(ex_ctx_status(q.ctx), EX_OK);
    if (op == EX_OP_QGLOBAL_AVG_POOL) {
        k = (int)x.ne[2];
        p = (ex_pool_params){{(int)x.ne[2], (int)x.ne[3]}, {1, 1}, {0, 0}};
    }
    int64_t yne[4], n = dims4(y, yne), i = 0;
    int8_t *want = xcalloc((size_t)n, 1);
    for (int64_t a = 0; a < yne[0]; a++)
        for (int64_t c = 0; c < yne[1]; c++)
            for (int64_t oh = 0; oh < yne[2]; oh++)
                for (int64_t ow = 0; ow < yne[3]; ow++, i++) {
                    int64_t sum = 0, cnt = 0, best = -128;
                    for (int r = 0; r < p.kernel[0]; r++)
                        for (int t = 0; t < p.kernel[1]; t++) {
                            int64_t h = oh * p.stride[0] - p.pad[0] + r,
                                    v = ow * p.stride[1] - p.pad[1] + t;
                            if (h < 0 || v < 0 || h >= x.ne[2] || v >= x.ne[3])
                                continue;
                            int64_t e = (int64_t)hv_get(&x, a, c, h, v);
                            sum += e;
                            cnt++;
                            best = e > best ? e : best;
                        }
                    /* |sum| / cnt rounded half up: floor(|sum| / cnt + 1 / 2) */
                    int64_t r = (2 * llabs(sum) + cnt) / (2 * cnt);
                    want[i] = (int8_t)(op == EX_OP_QMAX_POOL ? best : sum < 0 ? -r : r);
                }
    q_check(&q, y, want);
    free(want);
    q_close(&q);
}

static void pools(qfam *s)
{
    int64_t x[4] = {2, 3, 8, 9}, g[4] = {3, 4, 5, 7};
    pool_case(s, "qmax_pool 3x3", EX_OP_QMAX_POOL, x, 3, 1, 1, false);
    pool_case(s, "qmax_pool 3x3 stride 2 of a slice", EX_OP_QMAX_POOL, x, 3, 2, 1, true);
    int64_t xl[4] = {2, 3, 28, 27};
    pool_case(s, "qmax_pool 3x3 stride 2 over 28x27 planes", EX_OP_QMAX_POOL, xl, 3, 2, 1, false);
    pool_case(s, "qmax_pool 2x2 stride 2", EX_OP_QMAX_POOL, x, 2, 2, 0, false);
    pool_case(s, "qavg_pool 3x3", EX_OP_QAVG_POOL, x, 3, 1, 1, false);
    pool_case(s, "qavg_pool 3x3 stride 2 of a slice", EX_OP_QAVG_POOL, x, 3, 2, 1, true);
    pool_case(s, "qavg_pool 2x2 stride 2 (ties)", EX_OP_QAVG_POOL, x, 2, 2, 0, false);
    pool_case(s, "qglobal_avg_pool", EX_OP_QGLOBAL_AVG_POOL, g, 0, 1, 0, false);
    pool_case(s, "qglobal_avg_pool of a slice", EX_OP_QGLOBAL_AVG_POOL, g, 0, 1, 0, true);
}

/* ---- malformed fused requantize (sources, dst dtype, ip7), given to the backend directly ---- */

/* Byte offsets in one buffer: x i8 [2, 4, 8, 8], w i8 (up to [4, 4, 3, 3]), bias i32 [4],
 * multiplier f32 [4], y [2, 4, 8, 8] (i32, or i8 at the same place). */
enum { RE_X = 0, RE_W = 512, RE_B = 672, RE_M = 688, RE_Y = 704, RE_END = RE_Y + 2048 };

typedef struct re_case {
    ex_op op;
    int nsrc, ip7, mlen;
    ex_dtype ydt;
    ex_status want;
} re_case;

/* One node of that layout, stride 1 and padding 1 (0 for the pointwise one). */
static ex_status re_run(const suite *s, ex_buffer *buf, const re_case *c)
{
    const ex_backend_iface *f = ex__backend_iface_of(s->be);
    void *im = ex__backend_impl_of(s->be);
    bool dw = c->op == EX_OP_QDWCONV2D, pw = c->op == EX_OP_QPWCONV;
    int64_t xne[4] = {2, 4, 8, 8}, wne[4] = {4, dw ? 1 : 4, 3, 3}, four = 4, mlen = c->mlen;
    ex_tdesc src[4] = {
        dense_desc(buf, RE_X, EX_I8, 4, xne), dense_desc(buf, RE_W, EX_I8, pw ? 2 : 4, wne),
        dense_desc(buf, RE_B, EX_I32, 1, &four), dense_desc(buf, RE_M, EX_F32, 1, &mlen)};
    int p = pw ? 0 : 1;
    ex_node_exec n = {.op = c->op,
                      .nsrc = c->nsrc,
                      .src = src,
                      .dst = dense_desc(buf, RE_Y, c->ydt, 4, xne),
                      .ip = {1, 1, p, p, 1, 1, 0, c->ip7},
                      .tag = {-1, -1, -1}};
    ex_status st = f->compute(im, &n, 1, NULL);
    return st == EX_OK ? f->synchronize(im) : st;
}

void qconv_rq_errors(void **state)
{
    suite *s = *state;
    const ex_backend_iface *f = ex__backend_iface_of(s->be);
    void *im = ex__backend_impl_of(s->be);
    ex_buffer *buf = NULL;
    assert_int_equal(f->buffer_alloc(im, RE_END, &buf), EX_OK);
    assert_int_equal(f->fill(im, buf, 0, RE_END, 0x3c003c00u), EX_OK); /* small i8, f32 */
    /* per op: the two forms are well formed, the rest fail for their sources, dst dtype
     * or ip7 alone; the last case shows the backend runs the next node */
    static const re_case forms[] = {
        {0, 3, 0, 4, EX_I32, EX_OK},     {0, 4, 0, 4, EX_I8, EX_OK},
        {0, 4, 1, 1, EX_I8, EX_OK},      {0, 4, 0, 4, EX_I32, EX_ERR_ARG},
        {0, 3, 0, 4, EX_I8, EX_ERR_ARG}, {0, 3, 1, 4, EX_I32, EX_ERR_ARG},
        {0, 4, 2, 4, EX_I8, EX_ERR_ARG}, {0, 4, 0, 3, EX_I8, EX_ERR_ARG},
        {0, 4, 1, 4, EX_I8, EX_OK},
    };
    static const ex_op ops[] = {EX_OP_QCONV2D, EX_OP_QDWCONV2D, EX_OP_QPWCONV};
    int failed = 0;
    for (size_t o = 0; o < sizeof ops / sizeof *ops; o++)
        for (size_t i = 0; i < sizeof forms / sizeof *forms; i++) {
            re_case c = forms[i];
            c.op = ops[o];
            ex_status st = re_run(s, buf, &c);
            const char *msg = f->error(im);
            bool named = c.want == EX_OK || (msg && strstr(msg, "ip7"));
            if (st != c.want || !named) {
                print_error("FAIL [%s] %s with %d sources, dst %s, ip7 %d, multiplier [%d]: %s "
                            "(%s), expected %s with a message naming ip7\n",
                            s->backend_name, ex_op_name(c.op), c.nsrc, ex_dtype_name(c.ydt), c.ip7,
                            c.mlen, ex_status_str(st), msg ? msg : "no message",
                            ex_status_str(c.want));
                failed++;
            }
        }
    f->buffer_free(im, buf);
    if (failed)
        fail_msg("%d malformed or valid fused-requantize nodes were handled wrongly on %s", failed,
                 s->backend_name);
}

/* ---- malformed windows of the int8 convolutions and pools, given to the backend directly ---- */

typedef struct win_case {
    ex_op op;
    int stride, pad, wci, ho, nbias;
    ex_status want;
} win_case;

/* One node of the RE_* layout giving the i32 sums: x [2, 4, 8, 8], w [4, wci, 3, 3] ([4, 4]
 * for the pointwise one), bias [nbias], y [2, 4, ho, 8]. */
static ex_status win_run(const suite *s, ex_buffer *buf, const win_case *c)
{
    const ex_backend_iface *f = ex__backend_iface_of(s->be);
    void *im = ex__backend_impl_of(s->be);
    bool pw = c->op == EX_OP_QPWCONV;
    int64_t xne[4] = {2, 4, 8, 8}, wne[4] = {4, c->wci, 3, 3}, yne[4] = {2, 4, c->ho, 8},
            nb = c->nbias;
    ex_tdesc src[3] = {dense_desc(buf, RE_X, EX_I8, 4, xne),
                       dense_desc(buf, RE_W, EX_I8, pw ? 2 : 4, wne),
                       dense_desc(buf, RE_B, EX_I32, 1, &nb)};
    ex_node_exec n = {.op = c->op,
                      .nsrc = 3,
                      .src = src,
                      .dst = dense_desc(buf, RE_Y, EX_I32, 4, yne),
                      .ip = {c->stride, c->stride, c->pad, c->pad, 1, 1},
                      .tag = {-1, -1, -1}};
    ex_status st = f->compute(im, &n, 1, NULL);
    return st == EX_OK ? f->synchronize(im) : st;
}

typedef struct pwin_case {
    ex_op op;
    int k, stride, pad, ho;
    ex_status want;
} pwin_case;

/* One pooling node of the RE_* layout: x i8 [2, 4, 8, 8] into y i8 [2, 4, ho, 8]. */
static ex_status pwin_run(const suite *s, ex_buffer *buf, const pwin_case *c)
{
    const ex_backend_iface *f = ex__backend_iface_of(s->be);
    void *im = ex__backend_impl_of(s->be);
    int64_t xne[4] = {2, 4, 8, 8}, yne[4] = {2, 4, c->ho, 8};
    ex_tdesc x = dense_desc(buf, RE_X, EX_I8, 4, xne);
    ex_node_exec n = {.op = c->op,
                      .nsrc = 1,
                      .src = &x,
                      .dst = dense_desc(buf, RE_Y, EX_I8, 4, yne),
                      .ip = {c->k, c->k, c->stride, c->stride, c->pad, c->pad},
                      .tag = {-1, -1, -1}};
    ex_status st = f->compute(im, &n, 1, NULL);
    return st == EX_OK ? f->synchronize(im) : st;
}

/* The pools' part of qconv_window_errors: the number of cases handled wrongly. */
static int qpool_window_errors(const suite *s, ex_buffer *buf)
{
    const ex_backend_iface *f = ex__backend_iface_of(s->be);
    void *im = ex__backend_impl_of(s->be);
    static const pwin_case cases[] = {
        {EX_OP_QMAX_POOL, 3, 1, 1, 8, EX_OK},        {EX_OP_QAVG_POOL, 3, 1, 1, 8, EX_OK},
        {EX_OP_QAVG_POOL, 0, 1, 0, 8, EX_ERR_ARG},   {EX_OP_QMAX_POOL, 3, 0, 1, 8, EX_ERR_ARG},
        {EX_OP_QMAX_POOL, 3, 1, 3, 8, EX_ERR_ARG},   {EX_OP_QAVG_POOL, 3, 1, 0, 8, EX_ERR_SHAPE},
        {EX_OP_QMAX_POOL, 3, 2, 1, 8, EX_ERR_SHAPE}, {EX_OP_QAVG_POOL, 3, 1, 1, 8, EX_OK},
    };
    int failed = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const pwin_case *c = &cases[i];
        ex_status st = pwin_run(s, buf, c);
        const char *msg = f->error(im);
        if (st != c->want || (st != EX_OK && (!msg || !*msg))) {
            print_error("FAIL [%s] %s, kernel %d, stride %d, pad %d, y [2, 4, %d, 8]: %s (%s), "
                        "expected %s\n",
                        s->backend_name, ex_op_name(c->op), c->k, c->stride, c->pad, c->ho,
                        ex_status_str(st), msg ? msg : "no message", ex_status_str(c->want));
            failed++;
        }
    }
    return failed;
}

void qconv_window_errors(void **state)
{
    suite *s = *state;
    const ex_backend_iface *f = ex__backend_iface_of(s->be);
    void *im = ex__backend_impl_of(s->be);
    ex_buffer *buf = NULL;
    assert_int_equal(f->buffer_alloc(im, RE_END, &buf), EX_OK);
    assert_int_equal(f->fill(im, buf, 0, RE_END, 0x01010101u), EX_OK);
    /* the first three and the last are well formed; every backend refuses the others alike
     * (core/tdesc.h decodes the window for all of them) */
    static const win_case cases[] = {
        {EX_OP_QCONV2D, 1, 1, 4, 8, 4, EX_OK},
        {EX_OP_QDWCONV2D, 1, 1, 1, 8, 4, EX_OK},
        {EX_OP_QPWCONV, 1, 1, 4, 8, 4, EX_OK},
        {EX_OP_QCONV2D, 0, 1, 4, 8, 4, EX_ERR_ARG},
        {EX_OP_QCONV2D, 1, -1, 4, 8, 4, EX_ERR_ARG},
        {EX_OP_QCONV2D, 1, 0, 4, 8, 4, EX_ERR_SHAPE},
        {EX_OP_QCONV2D, 1, 1, 3, 8, 4, EX_ERR_SHAPE},
        {EX_OP_QCONV2D, 1, 1, 4, 8, 3, EX_ERR_SHAPE},
        {EX_OP_QDWCONV2D, 1, 1, 4, 8, 4, EX_ERR_SHAPE},
        {EX_OP_QDWCONV2D, 2, 1, 1, 8, 4, EX_ERR_SHAPE},
        {EX_OP_QPWCONV, 1, 1, 4, 7, 4, EX_ERR_SHAPE},
        {EX_OP_QPWCONV, 1, 1, 3, 8, 4, EX_ERR_SHAPE},
        {EX_OP_QPWCONV, 1, 1, 4, 8, 2, EX_ERR_SHAPE},
        {EX_OP_QCONV2D, 1, 1, 4, 8, 4, EX_OK},
    };
    int failed = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const win_case *c = &cases[i];
        ex_status st = win_run(s, buf, c);
        const char *msg = f->error(im);
        if (st != c->want || (st != EX_OK && (!msg || !*msg))) {
            print_error("FAIL [%s] %s, stride %d, pad %d, w [4, %d, 3, 3], y [2, 4, %d, 8], "
                        "bias [%d]: %s (%s), expected %s\n",
                        s->backend_name, ex_op_name(c->op), c->stride, c->pad, c->wci, c->ho,
                        c->nbias, ex_status_str(st), msg ? msg : "no message",
                        ex_status_str(c->want));
            failed++;
        }
    }
    failed += qpool_window_errors(s, buf);
    f->buffer_free(im, buf);
    if (failed)
        fail_msg("%d malformed or valid int8 convolution or pooling windows were handled wrongly "
                 "on %s",
                 failed, s->backend_name);
}

void family_quant(void **state)
{
    qfam f = {*state, 0};
    elementwise(&f);
    concat(&f);
    convolutions(&f);
    pools(&f);
    assert_int_equal(f.failed, 0);
}

/* ---- QCONCAT nodes, well formed and malformed, given to the backend directly: every
 * backend refuses the same nodes with the same words (core/tdesc.h), before it writes ---- */

/* Bytes of one buffer: part 0 i8 [2, 3, 4, 4] (ones), part 1 i8 [2, 5, 4, 4] (twos), the
 * multipliers f32 [3] (1), dst i8 [2, 9, 4, 4] and bytes after it; dst's bytes and those
 * after start as 0x55. */
enum { QC_X0 = 0, QC_X1 = 128, QC_M = 320, QC_Y = 384, QC_END = 768 };

typedef struct qc_case {
    const char *what;
    int parts;       /* sources: parts + 1 */
    int dst_c, x1_h; /* dst's channels, part 1's height */
    int nm;          /* multipliers */
    ex_dtype x0dt;   /* part 0's dtype */
    int dst_bcast;   /* dst's first dim at stride 0 */
    ex_status want;  /* with a needle in the message of a failure */
    const char *needle;
} qc_case;

static ex_status qc_run(const suite *s, ex_buffer *buf, const qc_case *c, int8_t *out, char *msg,
                        size_t len)
{
    const ex_backend_iface *f = ex__backend_iface_of(s->be);
    void *im = ex__backend_impl_of(s->be);
    uint8_t host[QC_END];
    memset(host, 0x55, sizeof host);
    memset(host + QC_X0, 1, 96);
    memset(host + QC_X1, 2, 160);
    float one = 1.0f;
    for (int i = 0; i < 3; i++)
        memcpy(host + QC_M + 4 * i, &one, 4);
    ex_status st = f->upload(im, buf, 0, host, sizeof host);
    int64_t x0[4] = {2, 3, 4, 4}, x1[4] = {2, 5, c->x1_h, 4}, y[4] = {2, c->dst_c, 4, 4},
            nm = c->nm;
    ex_tdesc src[3] = {dense_desc(buf, QC_X0, c->x0dt, 4, x0), dense_desc(buf, QC_X1, EX_I8, 4, x1),
                       dense_desc(buf, QC_M, EX_F32, 1, &nm)};
    if (c->parts == 1)
        src[1] = src[2];
    ex_node_exec n = {.op = EX_OP_QCONCAT,
                      .nsrc = c->parts + 1,
                      .src = src,
                      .dst = dense_desc(buf, QC_Y, EX_I8, 4, y),
                      .tag = {-1, -1, -1}};
    if (c->dst_bcast)
        n.dst.st[0] = 0;
    if (st == EX_OK)
        st = node_run(s, &n, msg, len);
    ex_status rd = f->download(im, buf, QC_Y, out, QC_END - QC_Y);
    return st != EX_OK ? st : rd;
}

/* A well-formed concatenation: part 0's 3 channels of ones, part 1's 5 of twos, per image,
 * and nothing after them; a refused node writes nothing at all. */
static bool qc_value(const qc_case *c, const int8_t *out)
{
    int written = c->want == EX_OK ? 2 * 8 * 16 : 0;
    for (int i = 0; i < QC_END - QC_Y; i++)
        if (out[i] != (i >= written ? 0x55 : (i / 16) % 8 < 3 ? 1 : 2))
            return false;
    return true;
}

void qconcat_node_errors(void **state)
{
    suite *s = *state;
    const ex_backend_iface *f = ex__backend_iface_of(s->be);
    void *im = ex__backend_impl_of(s->be);
    ex_buffer *buf = NULL;
    assert_int_equal(f->buffer_alloc(im, QC_END, &buf), EX_OK);
    static const qc_case cases[] = {
        {"two parts", 2, 8, 4, 2, EX_I8, 0, EX_OK, NULL},
        {"dst of 9 channels", 2, 9, 4, 2, EX_I8, 0, EX_ERR_SHAPE, "parts hold 8 channels, dst 9"},
        {"dst of 7 channels", 2, 7, 4, 2, EX_I8, 0, EX_ERR_SHAPE, "parts hold 8 channels, dst 7"},
        {"part 1 of height 2", 2, 8, 2, 2, EX_I8, 0, EX_ERR_SHAPE, "part 1 differs from dst"},
        {"3 multipliers", 2, 8, 4, 3, EX_I8, 0, EX_ERR_SHAPE, "must be f32 [2], one per part"},
        {"an f32 part", 2, 8, 4, 2, EX_F32, 0, EX_ERR_ARG, "part 0 must be i8"},
        {"no parts", 0, 8, 4, 2, EX_I8, 0, EX_ERR_ARG, "1 sources, expected 2 to 11"},
        {"dst broadcasts", 2, 8, 4, 2, EX_I8, 1, EX_ERR_ARG, "dst broadcasts"},
        {"two parts again", 2, 8, 4, 2, EX_I8, 0, EX_OK, NULL},
    };
    int failed = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const qc_case *c = &cases[i];
        int8_t out[QC_END - QC_Y];
        char msg[512];
        ex_status st = qc_run(s, buf, c, out, msg, sizeof msg);
        bool value = qc_value(c, out);
        failed += !node_case_ok(s, EX_OP_QCONCAT, c->what, st, msg, c->want, c->needle, value,
                                value ? "" : "; wrong bytes");
    }
    f->buffer_free(im, buf);
    if (failed)
        fail_msg("%d QCONCAT nodes were handled wrongly on %s", failed, s->backend_name);
}

/* ---- int8 element-wise nodes, well formed and malformed, given to the backend directly:
 * every backend refuses the same nodes with the same words (core/tdesc.h), before it reads
 * a source as a dtype it is not ---- */

/* Bytes of one buffer: x as f32, i8 and i32 [4, 3] (0 .. 11), the per-channel operand
 * f32 [3] (1), dst and the bytes after it (0x55). */
enum { QW_F = 0, QW_I8 = 64, QW_I32 = 128, QW_V = 192, QW_Y = 256, QW_END = 384 };

typedef struct qw_case {
    const char *what;
    ex_op op;
    int nsrc;
    ex_dtype xdt, ydt; /* x's dtype (it lies at QW_F, QW_I8 or QW_I32), dst's */
    int ydims;         /* dst [4, 3], or [4, 3, 1] */
    int nv, bcols;     /* the per-channel operand's values; QADD's b [4, bcols] */
    int ybcast;        /* dst's first dim at stride 0 */
    ex_status want;    /* with a needle in the message of a failure */
    const char *needle;
} qw_case;

static ex_status qw_run(const suite *s, ex_buffer *buf, const qw_case *c, uint8_t *out, char *msg,
                        size_t len)
{
    const ex_backend_iface *f = ex__backend_iface_of(s->be);
    void *im = ex__backend_impl_of(s->be);
    uint8_t host[QW_END];
    memset(host, 0x55, sizeof host);
    for (int i = 0; i < 12; i++) {
        float v = (float)i;
        int32_t w = i;
        memcpy(host + QW_F + 4 * i, &v, 4);
        host[QW_I8 + i] = (uint8_t)i;
        memcpy(host + QW_I32 + 4 * i, &w, 4);
    }
    float one = 1.0f;
    for (int i = 0; i < 3; i++)
        memcpy(host + QW_V + 4 * i, &one, 4);
    ex_status st = f->upload(im, buf, 0, host, sizeof host);
    uint64_t at = c->xdt == EX_F32 ? QW_F : c->xdt == EX_I8 ? QW_I8 : QW_I32;
    int64_t x[2] = {4, 3}, b[2] = {4, c->bcols}, y[3] = {4, 3, 1}, nv = c->nv;
    ex_tdesc src[2] = {dense_desc(buf, at, c->xdt, 2, x),
                       c->op == EX_OP_QADD || c->op == EX_OP_QRELU
                           ? dense_desc(buf, QW_I8, EX_I8, 2, b)
                           : dense_desc(buf, QW_V, EX_F32, 1, &nv)};
    ex_node_exec n = {.op = c->op,
                      .nsrc = c->nsrc,
                      .src = src,
                      .dst = dense_desc(buf, QW_Y, c->ydt, c->ydims, y),
                      .fp = {1.0f, 0.0f},
                      .tag = {-1, -1, -1}};
    if (c->ybcast)
        n.dst.st[0] = 0;
    if (st == EX_OK)
        st = node_run(s, &n, msg, len);
    ex_status rd = f->download(im, buf, QW_Y, out, QW_END - QW_Y);
    return st != EX_OK ? st : rd;
}

/* A well-formed node writes x's values 0 .. 11 (x times 1, in dst's dtype) and nothing
 * after them; a refused one writes nothing at all. */
static bool qw_value(const qw_case *c, const uint8_t *out)
{
    int size = c->ydt == EX_F32 ? 4 : 1, written = c->want == EX_OK ? 12 * size : 0;
    for (int i = 0; i < written; i += size) {
        float v = (float)(i / size);
        if (size == 4 ? memcmp(out + i, &v, 4) != 0 : out[i] != i)
            return false;
    }
    for (int i = written; i < QW_END - QW_Y; i++)
        if (out[i] != 0x55)
            return false;
    return true;
}

void qew_node_errors(void **state)
{
    suite *s = *state;
    const ex_backend_iface *f = ex__backend_iface_of(s->be);
    void *im = ex__backend_impl_of(s->be);
    ex_buffer *buf = NULL;
    assert_int_equal(f->buffer_alloc(im, QW_END, &buf), EX_OK);
    const ex_op q = EX_OP_QUANTIZE, dq = EX_OP_DEQUANTIZE, rq = EX_OP_REQUANTIZE;
    const ex_op add = EX_OP_QADD, relu = EX_OP_QRELU;
    const ex_dtype f32 = EX_F32, i8 = EX_I8, i32 = EX_I32;
    static const char *arg = "source 0 must be f32";
    const qw_case cases[] = {
        {"quantize", q, 2, f32, i8, 2, 3, 3, 0, EX_OK, NULL},
        {"one multiplier", q, 2, f32, i8, 2, 1, 3, 0, EX_OK, NULL},
        {"an i8 x", q, 2, i8, i8, 2, 3, 3, 0, EX_ERR_ARG, arg},
        {"an f32 dst", q, 2, f32, f32, 2, 3, 3, 0, EX_ERR_ARG, "dst must be i8 [N, C] or"},
        {"a 3-d dst", q, 2, f32, i8, 3, 3, 3, 0, EX_ERR_ARG, "dst must be i8 [N, C] or"},
        {"two multipliers", q, 2, f32, i8, 2, 2, 3, 0, EX_ERR_SHAPE, "must be f32 [3] or [1]"},
        {"dst broadcasts", q, 2, f32, i8, 2, 3, 3, 1, EX_ERR_ARG, "dst broadcasts"},
        {"i32 to f32", dq, 2, i32, f32, 2, 3, 3, 0, EX_OK, NULL},
        {"f32 x", rq, 2, f32, i8, 2, 3, 3, 0, EX_ERR_ARG, "source 0 must be i8 or i32"},
        {"i32 to i8", rq, 2, i32, i8, 2, 3, 3, 0, EX_OK, NULL},
        {"b [4, 2]", add, 2, i8, i8, 2, 3, 2, 0, EX_ERR_SHAPE, "source 1 does not fit dst"},
        {"two sources", relu, 2, i8, i8, 2, 3, 3, 0, EX_ERR_ARG, "2 sources, expected 1"},
        {"relu", relu, 1, i8, i8, 2, 3, 3, 0, EX_OK, NULL},
    };
    int failed = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const qw_case *c = &cases[i];
        uint8_t out[QW_END - QW_Y];
        char msg[512];
        ex_status st = qw_run(s, buf, c, out, msg, sizeof msg);
        bool value = qw_value(c, out);
        failed += !node_case_ok(s, c->op, c->what, st, msg, c->want, c->needle, value,
                                value ? "" : "; wrong bytes");
    }
    f->buffer_free(im, buf);
    if (failed)
        fail_msg("%d int8 element-wise nodes were handled wrongly on %s", failed, s->backend_name);
}
