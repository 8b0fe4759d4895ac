/* GEMM-shaped ops on the CPU: pointwise convolution and its filter gradient, matmul and
 * linear.
 *
 * The reference path is plain loops with double accumulators. The fast path hands each
 * product to cblas_sgemm from the serial part of the code, describing strided operands
 * through leading dimensions and transposition flags, and packs an operand into a dense
 * copy only when no such description exists (e.g. a stride-0 broadcast). */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "cpu.h"

#ifdef _OPENMP
#include <omp.h>

/* Only the OpenMP pragmas read it; without OpenMP every loop runs on the calling thread. */
static int gm_threads(const cpu_exec *e)
{
    return e->threads > 0 ? e->threads : omp_get_max_threads();
}
#endif

/** A logical rows x cols f32 matrix: element (i, j) at p[i * sr + j * sc]. */
typedef struct gm_mat {
    float *p;
    int64_t rows, cols, sr, sc;
} gm_mat;

static float gm_at(const gm_mat *m, int64_t i, int64_t j)
{
    return m->p[i * m->sr + j * m->sc];
}

/** A matrix as sgemm takes it (row-major storage, leading dimension, transposition);
 *  own is the dense copy to free when the matrix had to be packed. */
typedef struct gm_blas {
    float *p;
    int ld;
    int trans;
    float *own;
} gm_blas;

/** Describes m to BLAS without copying: directly (unit column stride) or as the transpose
 *  of a row-major matrix (unit row stride). Returns 0 when neither fits. */
static int gm_describe(const gm_mat *m, gm_blas *b)
{
    b->p = m->p;
    b->own = NULL;
    if ((m->cols == 1 || m->sc == 1) && (m->rows == 1 || m->sr >= m->cols) && m->sr <= INT_MAX) {
        b->trans = 0;
        b->ld = (int)(m->rows == 1 ? (m->cols > 0 ? m->cols : 1) : m->sr);
        return b->ld >= 1;
    }
    if ((m->rows == 1 || m->sr == 1) && (m->cols == 1 || m->sc >= m->rows) && m->sc <= INT_MAX) {
        b->trans = 1;
        b->ld = (int)(m->cols == 1 ? (m->rows > 0 ? m->rows : 1) : m->sc);
        return b->ld >= 1;
    }
    return 0;
}

/** Copies m into or out of the dense row-major buf. */
static void gm_pack(const cpu_exec *e, const gm_mat *m, float *buf, int to_buf)
{
    (void)e; /* read by the OpenMP pragma only */
#pragma omp parallel for schedule(static) num_threads(gm_threads(e))
    for (int64_t i = 0; i < m->rows; i++) {
        for (int64_t j = 0; j < m->cols; j++) {
            if (to_buf)
                buf[i * m->cols + j] = gm_at(m, i, j);
            else
                m->p[i * m->sr + j * m->sc] = buf[i * m->cols + j];
        }
    }
}

/** The BLAS form of m, packing it when it cannot be described (load: copy its values in,
 *  which an output only needs when beta != 0). */
static ex_status gm_blas_of(const cpu_exec *e, const gm_mat *m, int load, gm_blas *b)
{
    if (gm_describe(m, b))
        return EX_OK;
    if (m->cols > INT_MAX)
        return cpu_fail(e, EX_ERR_UNSUPPORTED, "gemm: %lld columns exceed the BLAS int range",
                        (long long)m->cols);
    b->own = cpu_alloc(e, (size_t)(m->rows * m->cols) * sizeof(float) + 1);
    if (!b->own)
        return cpu_fail(e, EX_ERR_NOMEM, "gemm: no memory to pack a %lldx%lld matrix",
                        (long long)m->rows, (long long)m->cols);
    if (load)
        gm_pack(e, m, b->own, 1);
    b->p = b->own;
    b->ld = (int)(m->cols > 0 ? m->cols : 1);
    b->trans = 0;
    return EX_OK;
}

/** Largest inner dimension of one sgemm call. OpenBLAS blocks the inner dimension
 *  differently in its threaded and single-threaded drivers once it exceeds its GEMM_Q
 *  (168 and up on x86), so longer products are cut into chunks of this size, added in
 *  order. With kernels that sum each inner block in one pass (the AVX-512 ones) the result
 *  then no longer depends on the BLAS thread count; others (Haswell, Zen) still round
 *  differently per tile partition, so there only a fixed BLAS thread count repeats. */
#define GM_KC 128

/** c = op(a) op(b) + beta c (row-major) as a chain of sgemm calls of inner size at most
 *  GM_KC, each added to the last in index order. */
static void gm_sgemm(int ta, int tb, int m, int nn, int k, const float *a, int lda, const float *b,
                     int ldb, float beta, float *c, int ldc)
{
    for (int k0 = 0; k0 == 0 || k0 < k; k0 += GM_KC) {
        int kc = k - k0 < GM_KC ? k - k0 : GM_KC;
        const float *ap = ta ? a + (size_t)k0 * (size_t)lda : a + k0;
        const float *bp = tb ? b + k0 : b + (size_t)k0 * (size_t)ldb;
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    m, nn, kc, 1.0f, ap, lda, bp, ldb, k0 == 0 ? beta : 1.0f, c, ldc);
    }
}

/** c = a b + beta c through sgemm; c stored transposed is computed as c^T = b^T a^T. */
static ex_status gm_gemm(const cpu_exec *e, const gm_mat *a, const gm_mat *b, const gm_mat *c,
                         float beta)
{
    if (a->rows > INT_MAX || a->cols > INT_MAX || b->cols > INT_MAX)
        return cpu_fail(e, EX_ERR_UNSUPPORTED, "gemm: dimensions exceed the BLAS int range");
    gm_blas ba = {0}, bb = {0}, bc = {0};
    ex_status st = gm_blas_of(e, a, 1, &ba);
    if (st == EX_OK)
        st = gm_blas_of(e, b, 1, &bb);
    if (st == EX_OK)
        st = gm_blas_of(e, c, beta != 0.0f, &bc);
    if (st == EX_OK && c->rows > 0 && c->cols > 0) {
        int m = (int)c->rows, nn = (int)c->cols, k = (int)a->cols;
        if (!bc.trans)
            gm_sgemm(ba.trans, bb.trans, m, nn, k, ba.p, ba.ld, bb.p, bb.ld, beta, bc.p, bc.ld);
        else
            gm_sgemm(!bb.trans, !ba.trans, nn, m, k, bb.p, bb.ld, ba.p, ba.ld, beta, bc.p, bc.ld);
        if (bc.own)
            gm_pack(e, c, bc.own, 0);
    }
    free(ba.own);
    free(bb.own);
    free(bc.own);
    return st;
}

/** c = a b with double accumulators (the reference). */
static void gm_ref(const gm_mat *a, const gm_mat *b, const gm_mat *c)
{
    for (int64_t i = 0; i < c->rows; i++) {
        for (int64_t j = 0; j < c->cols; j++) {
            double acc = 0.0;
            for (int64_t k = 0; k < a->cols; k++)
                acc += (double)gm_at(a, i, k) * gm_at(b, k, j);
            c->p[i * c->sr + j * c->sc] = (float)acc;
        }
    }
}

static gm_mat gm_mat2(const ex_tdesc *t)
{
    return (gm_mat){cpu_f32(t), t->ne[0], t->ne[1], t->st[0], t->st[1]};
}

static gm_mat gm_transpose(gm_mat m)
{
    return (gm_mat){m.p, m.cols, m.rows, m.sc, m.sr};
}

/* ---- pointwise convolution: per sample, y_n [Co, HW] = w [Co, Ci] x_n [Ci, HW] ---- */

/** Sample nb of a 4-d tensor as a [C, H*W] matrix. Returns 0 when H and W do not fold
 *  into one stride (then only the reference loops apply). */
static int gm_sample(const ex_tdesc *t, int64_t nb, gm_mat *m)
{
    const int64_t *ne = t->ne, *st = t->st;
    int64_t s;
    if (ne[3] == 1)
        s = ne[2] == 1 ? 1 : st[2];
    else if (ne[2] == 1 || st[2] == ne[3] * st[3])
        s = st[3];
    else
        return 0;
    *m = (gm_mat){cpu_f32(t) + nb * st[0], ne[1], ne[2] * ne[3], st[1], s};
    return 1;
}

/** Element (c, hw) of sample nb, whatever the strides (for the reference loops). */
static float gm_ref_at4(const ex_tdesc *t, int64_t nb, int64_t c, int64_t hw)
{
    int64_t h = hw / t->ne[3], w = hw % t->ne[3];
    return cpu_f32(t)[nb * t->st[0] + c * t->st[1] + h * t->st[2] + w * t->st[3]];
}

static void pw_ref(const ex_tdesc *x, const ex_tdesc *w, const ex_tdesc *y)
{
    gm_mat wm = gm_mat2(w);
    int64_t hw = y->ne[2] * y->ne[3];
    for (int64_t nb = 0; nb < y->ne[0]; nb++)
        for (int64_t co = 0; co < y->ne[1]; co++)
            for (int64_t p = 0; p < hw; p++) {
                double acc = 0.0;
                for (int64_t ci = 0; ci < x->ne[1]; ci++)
                    acc += (double)gm_at(&wm, co, ci) * gm_ref_at4(x, nb, ci, p);
                int64_t h = p / y->ne[3], ww = p % y->ne[3];
                cpu_f32(y)[nb * y->st[0] + co * y->st[1] + h * y->st[2] + ww * y->st[3]] =
                    (float)acc;
            }
}

static void pw_ref_bwd_filter(const ex_tdesc *x, const ex_tdesc *dy, const ex_tdesc *dw)
{
    gm_mat d = gm_mat2(dw);
    int64_t hw = x->ne[2] * x->ne[3];
    for (int64_t co = 0; co < d.rows; co++)
        for (int64_t ci = 0; ci < d.cols; ci++) {
            double acc = 0.0;
            for (int64_t nb = 0; nb < x->ne[0]; nb++)
                for (int64_t p = 0; p < hw; p++)
                    acc += (double)gm_ref_at4(dy, nb, co, p) * gm_ref_at4(x, nb, ci, p);
            d.p[co * d.sr + ci * d.sc] = (float)acc;
        }
}

/* Checks a node of the GEMM family (ex_td_gemm_of); name prefixes a refusal. */
static ex_status gm_check(const cpu_exec *e, const ex_node_exec *nd, const char *name)
{
    char why[320];
    ex_status st = ex_td_gemm_of(nd, why, sizeof why);
    return st == EX_OK ? EX_OK : cpu_fail(e, st, "%s: %s", name, why);
}

/** y = w r(x) (r: the ReLU where relu is set), then with scale row c of y times scale[c]
 *  plus shift[c], on the AVX-512 kernels where the CPU has them and the pixels of each
 *  sample of x and y (xm, ym: sample 0) are dense. */
static int pw_avx512(const cpu_exec *e, const gm_mat *wm, const ex_tdesc *x, const gm_mat *xm,
                     const ex_tdesc *y, const gm_mat *ym, int relu, const float *scale,
                     const float *shift)
{
    if (xm->sc != 1 || ym->sc != 1)
        return 0;
    cpu_sgemm q = {wm->p,  xm->p,  ym->p,    ym->rows, ym->cols, xm->rows, wm->sr, wm->sc,
                   xm->sr, ym->sr, x->st[0], y->st[0], y->ne[0], scale,    shift,  relu};
    return cpu_sgemm512_run(e, &q);
}

/** y = w x per sample through BLAS. */
static ex_status pw_blas(const cpu_exec *e, const gm_mat *wm, const ex_tdesc *x, const ex_tdesc *y)
{
    /* one small GEMM per sample, the samples across threads: inside a parallel region the
     * OpenMP build of OpenBLAS runs each call on its own thread, which beats threading
     * every small call (measured 3x on two cores) */
    int failed = 0;
#pragma omp parallel for schedule(static) num_threads(gm_threads(e)) reduction(| : failed)
    for (int64_t nb = 0; nb < x->ne[0]; nb++) {
        gm_mat xs = {0}, ys = {0};
        gm_sample(x, nb, &xs);
        gm_sample(y, nb, &ys);
        failed |= gm_gemm(e, wm, &xs, &ys, 0.0f) != EX_OK;
    }
    return failed ? cpu_fail(e, EX_ERR_NOMEM, "pwconv: out of memory for packing") : EX_OK;
}

CPU_OP(pwconv)
{
    ex_status st = gm_check(e, n, "pwconv");
    if (st != EX_OK)
        return st;
    const ex_tdesc *x = &n->src[0], *w = &n->src[1], *y = &n->dst;
    gm_mat xm, ym, wm = gm_mat2(w);
    if (e->reference || !gm_sample(x, 0, &xm) || !gm_sample(y, 0, &ym)) {
        pw_ref(x, w, y);
        return EX_OK;
    }
    if (pw_avx512(e, &wm, x, &xm, y, &ym, 0, NULL, NULL))
        return EX_OK;
    return pw_blas(e, &wm, x, y);
}

/* ---- PWCONV_BN: batch norm in eval mode on the product, a ReLU on its input ---- */

/** The batch norm per output channel as BN_STATS (eval) and BN_APPLY compute it:
 *  y = s * a[c] + b[c], a = invstd * gamma, b = beta - mean * a. */
static void pwbn_fold(const ex_node_exec *n, float *a, float *b)
{
    const ex_tdesc *rm = &n->src[2], *rv = &n->src[3];
    for (int64_t c = 0; c < n->dst.ne[1]; c++) {
        float mean = cpu_f32(rm)[c * rm->st[0]];
        float inv = (float)(1.0 / sqrt((double)cpu_f32(rv)[c * rv->st[0]] + (double)n->fp[0]));
        float gm = n->nsrc == 6 ? cpu_f32(&n->src[4])[c * n->src[4].st[0]] : 1.0f;
        float bt = n->nsrc == 6 ? cpu_f32(&n->src[5])[c * n->src[5].st[0]] : 0.0f;
        a[c] = inv * gm;
        b[c] = bt - mean * a[c];
    }
}

/** y = y * a[c] + b[c] over every plane of y. */
static void pwbn_apply(const cpu_exec *e, const ex_tdesc *y, const float *a, const float *b)
{
    (void)e; /* read by the OpenMP pragma only */
    const int64_t *ne = y->ne, *st = y->st;
#pragma omp parallel for schedule(static) num_threads(gm_threads(e))
    for (int64_t p = 0; p < ne[0] * ne[1]; p++) {
        float *q = cpu_f32(y) + p / ne[1] * st[0] + p % ne[1] * st[1];
        for (int64_t i = 0; i < ne[2]; i++)
            for (int64_t j = 0; j < ne[3]; j++)
                q[i * st[2] + j * st[3]] = q[i * st[2] + j * st[3]] * a[p % ne[1]] + b[p % ne[1]];
    }
}

/** max(x, 0) into a dense copy described at *r, by the RELU op's own kernel; the copy's
 *  memory (to free) or NULL. */
static float *pwbn_relu_copy(const cpu_exec *e, const ex_tdesc *x, ex_tdesc *r, cpu_buffer *buf)
{
    buf->bytes = (uint64_t)ex_td_numel(x) * sizeof(float);
    if (!(buf->data = cpu_alloc(e, (size_t)buf->bytes + 1)))
        return NULL;
    *r = *x;
    r->buf = (ex_buffer *)buf;
    r->offset = 0;
    r->st[3] = 1;
    r->st[2] = x->ne[3];
    r->st[1] = x->ne[2] * x->ne[3];
    r->st[0] = x->ne[1] * r->st[1];
    ex_node_exec relu = {.op = EX_OP_RELU, .nsrc = 1, .src = x, .dst = *r};
    if (cpu_relu(e, &relu) != EX_OK) {
        free(buf->data);
        return buf->data = NULL;
    }
    return buf->data;
}

CPU_OP(pwconv_bn)
{
    char why[256];
    ex_status st = ex_td_pwconv_bn_check(n, why, sizeof why);
    if (st != EX_OK)
        return cpu_fail(e, st, "pwconv_bn: %s", why);
    const ex_tdesc *x = &n->src[0], *w = &n->src[1], *y = &n->dst;
    int64_t co = y->ne[1];
    float *ab = cpu_alloc(e, (size_t)(2 * co) * sizeof *ab + 1);
    if (!ab)
        return cpu_fail(e, EX_ERR_NOMEM, "pwconv_bn: out of host memory");
    pwbn_fold(n, ab, ab + co);
    gm_mat xm, ym, wm = gm_mat2(w);
    int fast = !e->reference && gm_sample(x, 0, &xm) && gm_sample(y, 0, &ym);
    if (fast && pw_avx512(e, &wm, x, &xm, y, &ym, n->ip[6], ab, ab + co)) {
        free(ab);
        return EX_OK;
    }
    /* elsewhere the three steps one after the other */
    ex_tdesc rx;
    cpu_buffer rbuf = {0};
    if (n->ip[6]) {
        if (!pwbn_relu_copy(e, x, &rx, &rbuf)) {
            free(ab);
            return cpu_fail(e, EX_ERR_NOMEM, "pwconv_bn: out of host memory");
        }
        x = &rx;
    }
    if (fast && gm_sample(x, 0, &xm))
        st = pw_blas(e, &wm, x, y);
    else
        pw_ref(x, w, y);
    if (st == EX_OK)
        pwbn_apply(e, y, ab, ab + co);
    free(rbuf.data);
    free(ab);
    return st;
}

/** dw = sum over samples, in index order, of dy_n x_n^T (sgemm with beta 1). */
CPU_OP(pwconv_bwd_filter)
{
    ex_status st = gm_check(e, n, "pwconv_bwd_filter");
    if (st != EX_OK)
        return st;
    const ex_tdesc *x = &n->src[0], *dy = &n->src[1], *dw = &n->dst;
    gm_mat xm, dym;
    if (e->reference || !gm_sample(x, 0, &xm) || !gm_sample(dy, 0, &dym) || x->ne[0] == 0) {
        pw_ref_bwd_filter(x, dy, dw);
        return EX_OK;
    }
    /* each sample's product on its own thread into its own slice, then the slices added
     * in sample order: the same sum for any thread count */
    int64_t co = dw->ne[0], ci = dw->ne[1], ns = x->ne[0];
    float *part = cpu_alloc(e, (size_t)(ns * co * ci) * sizeof *part);
    if (!part)
        return cpu_fail(e, EX_ERR_NOMEM, "pwconv_bwd_filter: out of memory");
    int failed = 0;
#pragma omp parallel for schedule(static) num_threads(gm_threads(e)) reduction(| : failed)
    for (int64_t nb = 0; nb < ns; nb++) {
        gm_mat xs = {0}, dys = {0};
        gm_sample(x, nb, &xs);
        gm_sample(dy, nb, &dys);
        gm_mat xt = gm_transpose(xs);
        gm_mat pm = {part + nb * co * ci, co, ci, ci, 1};
        failed |= gm_gemm(e, &dys, &xt, &pm, 0.0f) != EX_OK;
    }
    for (int64_t i = 0; i < co && !failed; i++)
        for (int64_t j = 0; j < ci; j++) {
            float acc = 0.0f;
            for (int64_t nb = 0; nb < ns; nb++)
                acc += part[(nb * co + i) * ci + j];
            cpu_f32(dw)[i * dw->st[0] + j * dw->st[1]] = acc;
        }
    free(part);
    return failed ? cpu_fail(e, EX_ERR_NOMEM, "pwconv_bwd_filter: out of memory for packing")
                  : EX_OK;
}

/* ---- matmul and linear ---- */

CPU_OP(matmul)
{
    ex_status st = gm_check(e, n, "matmul");
    if (st != EX_OK)
        return st;
    gm_mat a = gm_mat2(&n->src[0]), b = gm_mat2(&n->src[1]), c = gm_mat2(&n->dst);
    if (e->reference) {
        gm_ref(&a, &b, &c);
        return EX_OK;
    }
    return gm_gemm(e, &a, &b, &c, 0.0f);
}

static void lin_ref(const gm_mat *x, const gm_mat *wt, const gm_mat *y, const ex_tdesc *b)
{
    for (int64_t i = 0; i < y->rows; i++)
        for (int64_t j = 0; j < y->cols; j++) {
            double acc = 0.0;
            for (int64_t k = 0; k < x->cols; k++)
                acc += (double)gm_at(x, i, k) * gm_at(wt, k, j);
            if (b)
                acc += cpu_f32(b)[j * b->st[0]];
            y->p[i * y->sr + j * y->sc] = (float)acc;
        }
}

CPU_OP(linear)
{
    ex_status st = gm_check(e, n, "linear");
    if (st != EX_OK)
        return st;
    const ex_tdesc *b = n->nsrc == 3 ? &n->src[2] : NULL;
    gm_mat x = gm_mat2(&n->src[0]), wt = gm_transpose(gm_mat2(&n->src[1])), y = gm_mat2(&n->dst);
    if (e->reference) {
        lin_ref(&x, &wt, &y, b);
        return EX_OK;
    }
    st = gm_gemm(e, &x, &wt, &y, 0.0f);
    if (st != EX_OK || !b)
        return st;
    const float *bp = cpu_f32(b);
    int64_t bs = b->st[0];
#pragma omp parallel for schedule(static) num_threads(gm_threads(e))
    for (int64_t i = 0; i < y.rows; i++)
        for (int64_t j = 0; j < y.cols; j++)
            y.p[i * y.sr + j * y.sc] += bp[j * bs];
    return EX_OK;
}
