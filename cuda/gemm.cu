/* GEMM-shaped ops: pointwise convolution (and PWCONV_BN, its fused inference form with a
 * ReLU before and batch norm in eval mode after) and its filter gradient, matmul and linear.
 *
 * cuBLAS (column-major) runs every product whose operands it can describe: a matrix with
 * unit row stride is an untransposed operand with its column stride as leading dimension,
 * one with unit column stride a transposed one, and a product whose output has unit
 * column stride is computed transposed (C^T = B^T A^T). Samples of a pointwise convolution
 * are one strided-batched call. An operand cuBLAS cannot take (a stride-0 broadcast,
 * overlapping rows, H and W that do not fold into one stride) goes to a tiled kernel of
 * our own that reads any strides. The filter gradient is a batched product into per-sample
 * partials that a second kernel adds in sample order, so it is repeatable. */
#include <limits.h>
#include <string.h>

#include "cuda/cuda.h"

/** A rows x cols f32 matrix: element (i, j) at p[i * sr + j * sc]. */
typedef struct gm_mat {
    float *p;
    int64_t rows, cols, sr, sc;
} gm_mat;

/** A matrix as cuBLAS takes it: op(stored) with the stored matrix column-major at ld. */
typedef struct gm_blas {
    float *p;
    int ld;
    cublasOperation_t op;
} gm_blas;

/** A batch of products C_b = A_b B_b (+ beta C_b), matrices b apart by the strides. */
typedef struct gm_job {
    gm_mat a, b, c;
    int64_t batch, sa, sb, sc;
    float beta;
} gm_job;

static gm_mat gm_transpose(gm_mat m)
{
    gm_mat t = {m.p, m.cols, m.rows, m.sc, m.sr};
    return t;
}

/* Untransposed: (i, j) at i + j * ld; transposed: (i, j) at i * ld + j. */
static int gm_describe(const gm_mat *m, gm_blas *b)
{
    int64_t r = m->rows, c = m->cols, ld;
    b->p = m->p;
    if ((r == 1 || m->sr == 1) && (c == 1 || m->sc >= (r > 1 ? r : 1))) {
        b->op = CUBLAS_OP_N;
        ld = c == 1 ? (r > 1 ? r : 1) : m->sc;
    } else if ((c == 1 || m->sc == 1) && (r == 1 || m->sr >= (c > 1 ? c : 1))) {
        b->op = CUBLAS_OP_T;
        ld = r == 1 ? (c > 1 ? c : 1) : m->sr;
    } else {
        return 0;
    }
    b->ld = (int)ld;
    return ld <= INT_MAX;
}

static int gm_fits_int(const gm_job *j)
{
    return j->c.rows <= INT_MAX && j->c.cols <= INT_MAX && j->a.cols <= INT_MAX &&
           j->batch <= INT_MAX && j->a.cols > 0;
}

/* Runs j through cuBLAS when every operand can be described; *done says whether it did. */
static ex_status gm_blas_run(cu_exec *e, gm_job j, int *done)
{
    gm_blas ba, bb, bc;
    *done = 0;
    if (!gm_fits_int(&j) || !gm_describe(&j.c, &bc))
        return EX_OK;
    if (bc.op == CUBLAS_OP_T) { /* C^T = B^T A^T, with C^T untransposed */
        gm_mat a = gm_transpose(j.b), b = gm_transpose(j.a);
        int64_t sa = j.sb;
        j.sb = j.sa;
        j.sa = sa;
        j.a = a;
        j.b = b;
        j.c = gm_transpose(j.c);
        if (!gm_describe(&j.c, &bc) || bc.op != CUBLAS_OP_N)
            return EX_OK;
    }
    if (!gm_describe(&j.a, &ba) || !gm_describe(&j.b, &bb))
        return EX_OK;
    *done = 1;
    if (e->dry)
        return EX_OK;
    int m = (int)j.c.rows, nn = (int)j.c.cols, k = (int)j.a.cols;
    float one = 1.0f;
    cublasStatus_t s;
    if (j.batch == 1)
        s = cublasSgemm(e->blas, ba.op, bb.op, m, nn, k, &one, ba.p, ba.ld, bb.p, bb.ld, &j.beta,
                        bc.p, bc.ld);
    else
        s = cublasSgemmStridedBatched(e->blas, ba.op, bb.op, m, nn, k, &one, ba.p, ba.ld, j.sa,
                                      bb.p, bb.ld, j.sb, &j.beta, bc.p, bc.ld, j.sc, (int)j.batch);
    return cu_blas_check(e, s, "sgemm");
}

/* ---- the tiled kernel for any strides ---- */

#define GT 16

/* Block (bx, by) computes a 16x16 tile of C for batches z, z + gridDim.z, ...; k in
 * order, so the result depends on the shape only. */
__global__ void gm_kernel(gm_job j, const float *gate)
{
    __shared__ float as[GT][GT + 1], bs[GT][GT + 1];
    if (cu_gated_off(gate))
        return;
    int tx = threadIdx.x, ty = threadIdx.y;
    int64_t row = blockIdx.y * (int64_t)GT + ty, col = blockIdx.x * (int64_t)GT + tx;
    int64_t kk = j.a.cols;
    for (int64_t bt = blockIdx.z; bt < j.batch; bt += gridDim.z) {
        const float *a = j.a.p + bt * j.sa, *b = j.b.p + bt * j.sb;
        float acc = 0.0f;
        for (int64_t k0 = 0; k0 < kk; k0 += GT) {
            int64_t ar = blockIdx.y * (int64_t)GT + ty, ak = k0 + tx;
            int64_t bk = k0 + ty, bc = blockIdx.x * (int64_t)GT + tx;
            as[ty][tx] = ar < j.c.rows && ak < kk ? a[ar * j.a.sr + ak * j.a.sc] : 0.0f;
            bs[ty][tx] = bk < kk && bc < j.c.cols ? b[bk * j.b.sr + bc * j.b.sc] : 0.0f;
            __syncthreads();
            int64_t lim = kk - k0 < GT ? kk - k0 : GT;
            for (int64_t t = 0; t < lim; t++)
                acc += as[ty][t] * bs[t][tx];
            __syncthreads();
        }
        if (row < j.c.rows && col < j.c.cols) {
            float *c = j.c.p + bt * j.sc + row * j.c.sr + col * j.c.sc;
            *c = j.beta != 0.0f ? acc + j.beta * *c : acc;
        }
    }
}

static ex_status gm_kernel_run(cu_exec *e, const gm_job *j)
{
    if (e->dry || j->c.rows == 0 || j->c.cols == 0 || j->batch == 0)
        return EX_OK;
    int64_t gx = (j->c.cols + GT - 1) / GT, gy = (j->c.rows + GT - 1) / GT;
    if (gx > 0x7fffffff || gy > 65535)
        return cu_fail(e, EX_ERR_UNSUPPORTED, "gemm: a %lldx%lld product exceeds the grid",
                       (long long)j->c.rows, (long long)j->c.cols);
    dim3 grid((unsigned)gx, (unsigned)gy, (unsigned)(j->batch < 65535 ? j->batch : 65535));
    cu_launch(e, gm_kernel, grid, dim3(GT, GT), 0, *j, e->gate);
    return cu_launched(e, "gemm");
}

/* cuBLAS when it can take the operands, the tiled kernel otherwise. */
static ex_status gm_run(cu_exec *e, const gm_job *j)
{
    if (j->c.rows == 0 || j->c.cols == 0 || j->batch == 0)
        return EX_OK;
    int done = 0;
    ex_status st = gm_blas_run(e, *j, &done);
    if (st != EX_OK || done)
        return st;
    return gm_kernel_run(e, j);
}

static gm_job gm_single(gm_mat a, gm_mat b, gm_mat c)
{
    gm_job j;
    memset(&j, 0, sizeof j);
    j.a = a;
    j.b = b;
    j.c = c;
    j.batch = 1;
    return j;
}

static gm_mat gm_mat2(const ex_tdesc *t)
{
    gm_mat m = {cu_f32(t), t->ne[0], t->ne[1], t->st[0], t->st[1]};
    return m;
}

/* ---- pointwise convolution: per sample, y_n [Co, HW] = w [Co, Ci] x_n [Ci, HW] ---- */

/** Sample 0 of a 4-d tensor as a [C, H*W] matrix; 0 when H and W do not fold into one
 *  stride. */
static int gm_sample(const ex_tdesc *t, gm_mat *m)
{
    const int64_t *ne = t->ne, *st = t->st;
    int64_t s;
    if (ne[3] == 1)
        s = ne[2] == 1 ? 1 : st[2];
    else if (ne[2] == 1 || st[2] == ne[3] * st[3])
        s = st[3];
    else
        return 0;
    gm_mat r = {cu_f32(t), ne[1], ne[2] * ne[3], st[1], s};
    *m = r;
    return 1;
}

/* Checks a node of the GEMM family (ex_td_gemm_of); name prefixes a refusal. */
static ex_status gm_check(cu_exec *e, const ex_node_exec *nd, const char *name)
{
    char why[320];
    ex_status st = ex_td_gemm_of(nd, why, sizeof why);
    return st == EX_OK ? EX_OK : cu_fail(e, st, "%s: %s", name, why);
}

/* x and y (dy) with the filter w as pointwise.cu takes them; 0 when H and W do not fold. */
static int pw_args(const ex_tdesc *x, const ex_tdesc *w, const ex_tdesc *y, cu_pw_args *a)
{
    gm_mat xm, ym, wm = gm_mat2(w);
    if (!gm_sample(x, &xm) || !gm_sample(y, &ym))
        return 0;
    const int big = 1 << 30; /* past every limit of cu_pw_small_fits */
    *a = cu_pw_args{};       /* no ReLU, no batch norm: PWCONV_BN sets them */
    a->x = cu_t4_of(x);
    a->y = cu_t4_of(y);
    a->x_sp = xm.sc;
    a->y_sp = ym.sc;
    a->w = wm.p;
    a->w_sr = wm.sr;
    a->w_sc = wm.sc;
    a->n = x->ne[0];
    a->hw = xm.cols < big ? (int)xm.cols : big;
    a->ci = x->ne[1] < big ? (int)x->ne[1] : big;
    a->co = y->ne[1] < big ? (int)y->ne[1] : big;
    return 1;
}

static int pwbn_uses_blas(const ex_node_exec *n);

int cu_node_uses_blas(const ex_node_exec *n)
{
    cu_pw_args a;
    if (n->op == EX_OP_PWCONV)
        return pw_args(&n->src[0], &n->src[1], &n->dst, &a) && !cu_pw_small_fits(&a);
    if (n->op == EX_OP_PWCONV_BN)
        return pwbn_uses_blas(n);
    if (n->op == EX_OP_PWCONV_BWD_FILTER)
        return n->src[0].ne[0] > 0 && pw_args(&n->src[0], &n->dst, &n->src[1], &a);
    return n->op == EX_OP_MATMUL || n->op == EX_OP_LINEAR;
}

/* When H and W do not fold: one output element per thread, Σ_ci in order. */
__global__ void pw_direct_kernel(cu_t4 x, gm_mat w, cu_t4 y, const float *gate)
{
    if (cu_gated_off(gate))
        return;
    int64_t total = y.ne[0] * y.ne[1] * y.ne[2] * y.ne[3];
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t ww = i % y.ne[3], h = i / y.ne[3] % y.ne[2], co = i / (y.ne[3] * y.ne[2]) % y.ne[1];
        int64_t nb = i / (y.ne[3] * y.ne[2] * y.ne[1]);
        const float *xp = (const float *)x.p + nb * x.st[0] + h * x.st[2] + ww * x.st[3];
        float acc = 0.0f;
        for (int64_t ci = 0; ci < x.ne[1]; ci++)
            acc += w.p[co * w.sr + ci * w.sc] * xp[ci * x.st[1]];
        ((float *)y.p)[nb * y.st[0] + co * y.st[1] + h * y.st[2] + ww * y.st[3]] = acc;
    }
}

/* y = w x per sample, the shapes checked: the direct kernel when H and W do not fold,
 * pointwise.cu's kernel for few channels, cuBLAS (or the tiled kernel) otherwise. */
static ex_status pw_forward(cu_exec *e, const ex_tdesc *x, const ex_tdesc *w, const ex_tdesc *y,
                            const char *name)
{
    gm_mat xm, ym;
    if (!gm_sample(x, &xm) || !gm_sample(y, &ym)) {
        if (e->dry)
            return EX_OK;
        int64_t total = ex_td_numel(y);
        cu_launch(e, pw_direct_kernel, cu_blocks(total, CU_THREADS), CU_THREADS, 0, cu_t4_of(x),
                  gm_mat2(w), cu_t4_of(y), e->gate);
        return cu_launched(e, name);
    }
    ex_status st = EX_OK;
    cu_pw_args pa;
    if (pw_args(x, w, y, &pa) && cu_pw_small(e, &pa, name, &st))
        return st;
    gm_job j = gm_single(gm_mat2(w), xm, ym);
    j.batch = x->ne[0];
    j.sb = x->st[0];
    j.sc = y->st[0];
    return gm_run(e, &j);
}

CU_OP(pwconv)
{
    ex_status st = gm_check(e, n, "pwconv");
    if (st != EX_OK)
        return st;
    const ex_tdesc *x = &n->src[0], *w = &n->src[1], *y = &n->dst;
    return pw_forward(e, x, w, y, "pwconv");
}

/* ---- PWCONV_BN: ReLU, pointwise convolution and batch norm in eval mode, forward only ----
 * With few channels pointwise.cu's kernel does all three in one launch (the ReLU on its
 * loads, the batch norm on its sums). Otherwise the unfused ops' own steps: max(x, 0)
 * into a dense copy in scratch (x is never written), pw_forward into y, and the batch norm
 * in place on y. Either way the arithmetic is PWCONV's, BN_STATS's (eval) and BN_APPLY's
 * (cu_bn_eval_coefs, cu_bn_affine), so fused and unfused agree. */

static cu_bn_eval pwbn_eval(const ex_node_exec *n)
{
    cu_bn_eval bn = {};
    bn.mean = cu_f32(&n->src[2]);
    bn.mean_s = n->src[2].st[0];
    bn.var = cu_f32(&n->src[3]);
    bn.var_s = n->src[3].st[0];
    if (n->nsrc == 6) {
        bn.gamma = cu_f32(&n->src[4]);
        bn.gamma_s = n->src[4].st[0];
        bn.beta = cu_f32(&n->src[5]);
        bn.beta_s = n->src[5].st[0];
    }
    bn.eps = (double)n->fp[0];
    return bn;
}

/* Whether the one fused kernel takes the node: x and y fold, few channels. */
static int pwbn_fused(const ex_node_exec *n, cu_pw_args *a)
{
    if (!pw_args(&n->src[0], &n->src[1], &n->dst, a) || !cu_pw_small_fits(a))
        return 0;
    a->relu = n->ip[6];
    a->bn = pwbn_eval(n);
    return 1;
}

/* x described as its dense ReLU copy at p (the unfused path's product input); rb holds p. */
static ex_tdesc pwbn_relu_desc(const ex_tdesc *x, cu_buffer *rb, void *p)
{
    ex_tdesc r = *x;
    rb->ptr = p;
    rb->bytes = sizeof(float) * (uint64_t)ex_td_numel(x);
    r.buf = (ex_buffer *)rb;
    r.offset = 0;
    r.st[3] = 1;
    r.st[2] = x->ne[3];
    r.st[1] = x->ne[2] * x->ne[3];
    r.st[0] = x->ne[1] * r.st[1];
    return r;
}

/* The unfused path calls cuBLAS where PWCONV would on its product input and y. The
 * sizing pass asks about a node whose check failed too: such a node runs nothing. */
static int pwbn_uses_blas(const ex_node_exec *n)
{
    char why[256];
    cu_pw_args a;
    if (ex_td_pwconv_bn_check(n, why, sizeof why) != EX_OK || pwbn_fused(n, &a))
        return 0;
    cu_buffer rb;
    ex_tdesc rx = pwbn_relu_desc(&n->src[0], &rb, NULL);
    const ex_tdesc *x = n->ip[6] ? &rx : &n->src[0];
    return pw_args(x, &n->src[1], &n->dst, &a) && !cu_pw_small_fits(&a);
}

/* out[i] = max(x[i], 0) in x's row-major order, NaN kept (as RELU). */
__global__ void pwbn_relu_kernel(cu_t4 x, float *out, int64_t total, const float *gate)
{
    if (cu_gated_off(gate))
        return;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        float v = ((const float *)x.p)[cu_off4(x.ne, x.st, i)];
        out[i] = v < 0.0f ? 0.0f : v;
    }
}

/* y = BN(y) in place, plane by plane: each plane's coefficients once, as BN_APPLY's. */
__global__ void pwbn_apply_kernel(cu_t4 y, cu_bn_eval bn, const float *gate)
{
    if (cu_gated_off(gate))
        return;
    int64_t hw = y.ne[2] * y.ne[3];
    CU_PLANE_LOOP(y.ne[0] * y.ne[1])
    {
        int64_t c = plane % y.ne[1];
        float k, b;
        cu_bn_eval_coefs(bn, c, &k, &b);
        float *q = (float *)y.p + plane / y.ne[1] * y.st[0] + c * y.st[1];
        for (int64_t p = blockIdx.y * (int64_t)blockDim.x + threadIdx.x; p < hw;
             p += (int64_t)gridDim.y * blockDim.x) {
            float *v = q + p / y.ne[3] * y.st[2] + p % y.ne[3] * y.st[3];
            *v = cu_bn_affine(*v, k, b);
        }
    }
}

/* Bytes of the ReLU copy at a time: it lives in scratch, whose ring is several times the
 * largest need, so a large batch is copied and multiplied a chunk of samples at a time. */
#define PWBN_COPY_BYTES ((int64_t)64 << 20)

/* Samples [n0, n0 + cnt) of a 4-d f32 tensor. */
static ex_tdesc pwbn_samples(const ex_tdesc *t, int64_t n0, int64_t cnt)
{
    ex_tdesc s = *t;
    s.ne[0] = cnt;
    s.offset += (uint64_t)(n0 * t->st[0] * (int64_t)sizeof(float));
    return s;
}

/* max(x, 0) into the dense copy at out. */
static ex_status pwbn_relu(cu_exec *e, const ex_tdesc *x, float *out)
{
    int64_t total = ex_td_numel(x);
    if (e->dry || total == 0)
        return EX_OK;
    cu_launch(e, pwbn_relu_kernel, cu_blocks(total, CU_THREADS), CU_THREADS, 0, cu_t4_of(x), out,
              total, e->gate);
    return cu_launched(e, "pwconv_bn");
}

/* With the ReLU (ip6): each chunk of samples' copy of max(x, 0), then its product. */
static ex_status pwbn_relu_product(cu_exec *e, const ex_node_exec *n)
{
    const ex_tdesc *x = &n->src[0];
    int64_t per = x->ne[1] * x->ne[2] * x->ne[3] * (int64_t)sizeof(float);
    int64_t chunk = per > 0 && PWBN_COPY_BYTES / per < x->ne[0] ? PWBN_COPY_BYTES / per : x->ne[0];
    chunk = chunk > 0 ? chunk : 1;
    void *ws = NULL;
    ex_status st = cu_scratch(e, (size_t)(chunk * per), &ws);
    for (int64_t n0 = 0; st == EX_OK && n0 < x->ne[0]; n0 += chunk) {
        int64_t cnt = chunk < x->ne[0] - n0 ? chunk : x->ne[0] - n0;
        ex_tdesc xs = pwbn_samples(x, n0, cnt), ys = pwbn_samples(&n->dst, n0, cnt);
        cu_buffer rb;
        ex_tdesc rx = pwbn_relu_desc(&xs, &rb, ws);
        st = pwbn_relu(e, &xs, (float *)ws);
        if (st == EX_OK)
            st = pw_forward(e, &rx, &n->src[1], &ys, "pwconv_bn");
    }
    return st;
}

/* The unfused path: the ReLU copy and the product, then the batch norm in place. */
static ex_status pwbn_unfused(cu_exec *e, const ex_node_exec *n)
{
    const ex_tdesc *y = &n->dst;
    ex_status st =
        n->ip[6] ? pwbn_relu_product(e, n) : pw_forward(e, &n->src[0], &n->src[1], y, "pwconv_bn");
    if (st != EX_OK || e->dry || ex_td_numel(y) == 0)
        return st;
    cu_launch(e, pwbn_apply_kernel, cu_plane_grid(y->ne[0] * y->ne[1], y->ne[2] * y->ne[3]),
              CU_THREADS, 0, cu_t4_of(y), pwbn_eval(n), e->gate);
    return cu_launched(e, "pwconv_bn");
}

CU_OP(pwconv_bn)
{
    char why[256];
    ex_status st = ex_td_pwconv_bn_check(n, why, sizeof why);
    if (st != EX_OK)
        return cu_fail(e, st, "pwconv_bn: %s", why);
    cu_pw_args a;
    if (pwbn_fused(n, &a) && cu_pw_small(e, &a, "pwconv_bn", &st))
        return st;
    return pwbn_unfused(e, n);
}

/* dw[co, ci] = Σ_n part[n, co, ci], in sample order. */
__global__ void pw_sum_kernel(const float *part, int64_t nb, gm_mat dw, const float *gate)
{
    if (cu_gated_off(gate))
        return;
    int64_t per = dw.rows * dw.cols;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < per;
         i += (int64_t)gridDim.x * blockDim.x) {
        double acc = 0.0;
        for (int64_t s = 0; s < nb; s++)
            acc += part[s * per + i];
        dw.p[i / dw.cols * dw.sr + i % dw.cols * dw.sc] = (float)acc;
    }
}

/* When H and W do not fold: one block per weight, Σ over (n, h, w) in a fixed tree. */
__global__ void pw_filter_direct_kernel(cu_t4 x, cu_t4 dy, gm_mat dw, const float *gate)
{
    __shared__ double sh[32];
    if (cu_gated_off(gate))
        return;
    int64_t co = blockIdx.x / dw.cols, ci = blockIdx.x % dw.cols;
    int64_t hw = x.ne[2] * x.ne[3], total = x.ne[0] * hw;
    double acc = 0.0;
    for (int64_t p = threadIdx.x; p < total; p += blockDim.x) {
        int64_t nb = p / hw, h = p % hw / x.ne[3], w = p % x.ne[3];
        float a =
            ((const float *)dy.p)[nb * dy.st[0] + co * dy.st[1] + h * dy.st[2] + w * dy.st[3]];
        float b = ((const float *)x.p)[nb * x.st[0] + ci * x.st[1] + h * x.st[2] + w * x.st[3]];
        acc += (double)a * b;
    }
    acc = cu_block_sum(acc, sh);
    if (threadIdx.x == 0)
        dw.p[co * dw.sr + ci * dw.sc] = (float)acc;
}

CU_OP(pwconv_bwd_filter)
{
    ex_status st = gm_check(e, n, "pwconv_bwd_filter");
    if (st != EX_OK)
        return st;
    const ex_tdesc *x = &n->src[0], *dy = &n->src[1], *dw = &n->dst;
    gm_mat xm, dym, dwm = gm_mat2(dw);
    if (!gm_sample(x, &xm) || !gm_sample(dy, &dym) || x->ne[0] == 0) {
        if (e->dry || dwm.rows * dwm.cols == 0)
            return EX_OK;
        if (dwm.rows * dwm.cols > 0x7fffffff)
            return cu_fail(e, EX_ERR_UNSUPPORTED, "pwconv_bwd_filter: too many weights");
        cu_launch(e, pw_filter_direct_kernel, (unsigned)(dwm.rows * dwm.cols), CU_THREADS, 0,
                  cu_t4_of(x), cu_t4_of(dy), dwm, e->gate);
        return cu_launched(e, "pwconv_bwd_filter");
    }
    /* part[n] = dy_n x_n^T, dense [Co, Ci] per sample */
    int64_t per = dwm.rows * dwm.cols;
    void *ws = NULL;
    st = cu_scratch(e, sizeof(float) * (size_t)(x->ne[0] * per), &ws);
    if (st != EX_OK)
        return st;
    gm_mat part = {(float *)ws, dwm.rows, dwm.cols, dwm.cols, 1};
    gm_job j = gm_single(dym, gm_transpose(xm), part);
    j.batch = x->ne[0];
    j.sa = dy->st[0];
    j.sb = x->st[0];
    j.sc = per;
    st = gm_run(e, &j);
    if (st != EX_OK || e->dry)
        return st;
    cu_launch(e, pw_sum_kernel, cu_blocks(per, CU_THREADS), CU_THREADS, 0, (const float *)ws,
              x->ne[0], dwm, e->gate);
    return cu_launched(e, "pwconv_bwd_filter");
}

/* ---- matmul and linear ---- */

CU_OP(matmul)
{
    ex_status st = gm_check(e, n, "matmul");
    if (st != EX_OK)
        return st;
    gm_mat a = gm_mat2(&n->src[0]), b = gm_mat2(&n->src[1]), c = gm_mat2(&n->dst);
    gm_job j = gm_single(a, b, c);
    return gm_run(e, &j);
}

/* y[i, j] += b[j] after the product, as the CPU backend adds it. */
__global__ void bias_kernel(gm_mat y, const float *b, int64_t bs, const float *gate)
{
    if (cu_gated_off(gate))
        return;
    int64_t total = y.rows * y.cols;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / y.cols, c = i % y.cols;
        y.p[r * y.sr + c * y.sc] += b[c * bs];
    }
}

CU_OP(linear)
{
    ex_status st = gm_check(e, n, "linear");
    if (st != EX_OK)
        return st;
    gm_mat x = gm_mat2(&n->src[0]), wt = gm_transpose(gm_mat2(&n->src[1])), y = gm_mat2(&n->dst);
    gm_job j = gm_single(x, wt, y);
    st = gm_run(e, &j);
    if (st != EX_OK || e->dry || n->nsrc != 3)
        return st;
    const ex_tdesc *b = &n->src[2];
    cu_launch(e, bias_kernel, cu_blocks(y.rows * y.cols, CU_THREADS), CU_THREADS, 0, y, cu_f32(b),
              b->st[0], e->gate);
    return cu_launched(e, "linear");
}
