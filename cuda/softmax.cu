/* Softmax family over the last dim: SOFTMAX, SOFTMAX_BWD, LOG_SOFTMAX, LOG_SOFTMAX_BWD,
 * CROSS_ENTROPY, CROSS_ENTROPY_BWD, ACCURACY.
 *
 * One warp per row; sums run in double (as on the CPU) through a fixed shuffle tree, so
 * each row's result is repeatable. The loss adds its row losses in a second kernel, one
 * block over all rows in a fixed order. Labels are checked on the device by one block
 * that reports the first bad row in the status words (compute() turns that into
 * EX_ERR_ARG); kernels never read a logit through a bad label. */
#include <string.h>

#include "cuda/cuda.h"

#define SM_MAX_SRC 3
#define SM_ROWS_PER_BLOCK (CU_THREADS / 32)

/** dst and its sources aligned to dst's padded shape; dims 0..2 index rows. */
typedef struct sm_args {
    int nsrc;
    int64_t ne[4];
    int64_t st[1 + SM_MAX_SRC][4];
    float *base[1 + SM_MAX_SRC];
} sm_args;

enum sm_kind { SM_SOFTMAX, SM_SOFTMAX_BWD, SM_LOG_SOFTMAX, SM_LOG_SOFTMAX_BWD };

static ex_status sm_setup(cu_exec *e, const ex_node_exec *n, const char *op, int nsrc, sm_args *o)
{
    char why[96];
    memset(o, 0, sizeof *o);
    ex_status st = ex_td_rows_of(n, nsrc, o->ne, o->st, why, sizeof why);
    if (st != EX_OK)
        return cu_fail(e, st, "%s: %s", op, why);
    o->nsrc = nsrc;
    o->base[0] = cu_f32(&n->dst);
    for (int i = 0; i < nsrc; i++)
        o->base[1 + i] = cu_f32(&n->src[i]);
    return EX_OK;
}

__device__ __forceinline__ float warp_maxf(float v)
{
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = w > v ? w : v;
    }
    return v;
}

/* The maximum of a row as the CPU's sequential scan finds it: the first element, then any
 * larger one. NaN never replaces a number, a number after a leading NaN never replaces it
 * either; so NaN rows stay NaN and the result does not depend on the order. */
__device__ __forceinline__ float row_max(const float *x, int64_t s, int64_t k, int lane)
{
    float m = x[0];
    for (int64_t j = lane; j < k; j += 32) {
        float v = x[j * s];
        m = v > m ? v : m;
    }
    return warp_maxf(m);
}

__device__ __forceinline__ double row_expsum(const float *x, int64_t s, int64_t k, double m,
                                             int lane)
{
    double sum = 0.0;
    for (int64_t j = lane; j < k; j += 32)
        sum += exp((double)x[j * s] - m);
    return cu_warp_sum(sum);
}

template <int K> __global__ void sm_kernel(sm_args a, int64_t rows, const float *gate)
{
    if (cu_gated_off(gate))
        return;
    int lane = threadIdx.x & 31;
    int64_t r = blockIdx.x * (int64_t)SM_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    if (r >= rows)
        return;
    int64_t k = a.ne[3], sd = a.st[0][3], s0 = a.st[1][3], s1 = a.st[2][3];
    float *d = a.base[0] + cu_row_off(a.ne, a.st[0], r);
    const float *x = a.base[1] + cu_row_off(a.ne, a.st[1], r);
    if (K == SM_SOFTMAX || K == SM_LOG_SOFTMAX) {
        double m = row_max(x, s0, k, lane), sum = row_expsum(x, s0, k, m, lane);
        double lse = log(sum);
        for (int64_t j = lane; j < k; j += 32)
            d[j * sd] = K == SM_SOFTMAX ? (float)(exp((double)x[j * s0] - m) / sum)
                                        : (float)((double)x[j * s0] - m - lse);
        return;
    }
    const float *dy = a.base[2] + cu_row_off(a.ne, a.st[2], r);
    double acc = 0.0;
    for (int64_t j = lane; j < k; j += 32)
        acc += K == SM_SOFTMAX_BWD ? (double)dy[j * s1] * x[j * s0] : (double)dy[j * s1];
    acc = cu_warp_sum(acc);
    for (int64_t j = lane; j < k; j += 32)
        d[j * sd] = K == SM_SOFTMAX_BWD ? (float)(x[j * s0] * ((double)dy[j * s1] - acc))
                                        : (float)(dy[j * s1] - exp((double)x[j * s0]) * acc);
}

static unsigned row_blocks(int64_t rows)
{
    return (unsigned)((rows + SM_ROWS_PER_BLOCK - 1) / SM_ROWS_PER_BLOCK);
}

template <int K>
static ex_status sm_run(cu_exec *e, const ex_node_exec *n, const char *op, int nsrc)
{
    sm_args o;
    ex_status st = sm_setup(e, n, op, nsrc, &o);
    if (st != EX_OK || e->dry)
        return st;
    int64_t rows = o.ne[0] * o.ne[1] * o.ne[2];
    cu_launch(e, sm_kernel<K>, row_blocks(rows), CU_THREADS, 0, o, rows, e->gate);
    return cu_launched(e, op);
}

CU_OP(softmax)
{
    return sm_run<SM_SOFTMAX>(e, n, "softmax", 1);
}

CU_OP(softmax_bwd)
{
    return sm_run<SM_SOFTMAX_BWD>(e, n, "softmax_bwd", 2);
}

CU_OP(log_softmax)
{
    return sm_run<SM_LOG_SOFTMAX>(e, n, "log_softmax", 1);
}

CU_OP(log_softmax_bwd)
{
    return sm_run<SM_LOG_SOFTMAX_BWD>(e, n, "log_softmax_bwd", 2);
}

/* ---- losses over logits [N, K] (any leading dims count as rows) and labels [N] ---- */

/** Logits as rows of K and the labels, read by row index through their own shape. */
typedef struct ce_args {
    int64_t ne[4], st[4];
    int64_t rows, k;
    const float *x;
    cu_t4 lab;          /**< labels (i32) */
    float *d;           /**< CROSS_ENTROPY_BWD: dst (logits' shape) */
    int64_t dst4[4];    /**< its strides, padded to 4 dims */
    const float *dloss; /**< CROSS_ENTROPY_BWD: the loss gradient */
} ce_args;

static ex_status ce_setup(cu_exec *e, const ex_node_exec *n, const char *op, int nsrc, ce_args *c)
{
    char why[96];
    memset(c, 0, sizeof *c);
    ex_status st = ex_td_ce_of(n, nsrc, c->ne, c->st, &c->rows, why, sizeof why);
    if (st != EX_OK)
        return cu_fail(e, st, "%s: %s", op, why);
    c->k = c->ne[3];
    c->x = cu_f32(&n->src[0]);
    c->lab = cu_t4_of(&n->src[1]);
    return EX_OK;
}

static ex_status ce_scalar_dst(cu_exec *e, const char *op, const ex_tdesc *d)
{
    if (d->ndim < 1 || d->ndim > 4 || d->dtype != EX_F32 || ex_td_numel(d) != 1 || d->buf == NULL)
        return cu_fail(e, EX_ERR_SHAPE, "%s: dst must be one f32 element", op);
    return EX_OK;
}

__device__ __forceinline__ int32_t ce_label(const ce_args &c, int64_t r)
{
    return ((const int32_t *)c.lab.p)[cu_off4(c.lab.ne, c.lab.st, r)];
}

/* One block finds the first row whose label is outside [0, K) and reports it. */
__global__ void ce_check_kernel(ce_args c, long long *status, long long node, const float *gate)
{
    __shared__ long long sh[32];
    if (cu_gated_off(gate))
        return;
    long long first = c.rows;
    for (int64_t r = threadIdx.x; r < c.rows && first == c.rows; r += blockDim.x) {
        int32_t y = ce_label(c, r);
        if (y < 0 || y >= c.k)
            first = r;
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1) {
        long long v = __shfl_xor_sync(0xffffffffu, first, o);
        first = v < first ? v : first;
    }
    if (lane == 0)
        sh[warp] = first;
    __syncthreads();
    if (threadIdx.x != 0)
        return;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++)
        first = sh[w] < first ? sh[w] : first;
    if (first < c.rows)
        cu_report(status, node, CU_STATUS_LABEL, first, ce_label(c, first));
}

static ex_status ce_check(cu_exec *e, const ce_args *c)
{
    cu_launch(e, ce_check_kernel, 1, CU_THREADS, 0, *c, e->status, (long long)e->node, e->gate);
    return cu_launched(e, "label check");
}

/* Row r's loss log Σ exp(x − m) + m − x[y] into part[r]; NaN for a bad label (the node
 * fails anyway, and no logit is read through it). */
__global__ void ce_rows_kernel(ce_args c, double *part, const float *gate)
{
    if (cu_gated_off(gate))
        return;
    int lane = threadIdx.x & 31;
    int64_t r = blockIdx.x * (int64_t)SM_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    if (r >= c.rows)
        return;
    const float *x = c.x + cu_row_off(c.ne, c.st, r);
    int64_t s = c.st[3];
    double m = row_max(x, s, c.k, lane), sum = row_expsum(x, s, c.k, m, lane);
    int32_t y = ce_label(c, r);
    if (lane == 0)
        part[r] = y < 0 || y >= c.k ? (double)NAN : log(sum) + m - x[y * s];
}

/* The mean of the row losses: one block, a fixed order. */
__global__ void ce_mean_kernel(ce_args c, const double *part, float *dst, const float *gate)
{
    __shared__ double sh[32];
    if (cu_gated_off(gate))
        return;
    double acc = 0.0;
    for (int64_t r = threadIdx.x; r < c.rows; r += blockDim.x)
        acc += part[r];
    acc = cu_block_sum(acc, sh);
    if (threadIdx.x == 0)
        *dst = (float)(acc / (double)c.rows);
}

CU_OP(cross_entropy)
{
    ce_args c;
    ex_status st = ce_setup(e, n, "cross_entropy", 2, &c);
    if (st == EX_OK)
        st = ce_scalar_dst(e, "cross_entropy", &n->dst);
    void *ws = NULL;
    if (st == EX_OK)
        st = cu_scratch(e, sizeof(double) * (size_t)c.rows, &ws);
    if (st != EX_OK || e->dry)
        return st;
    if ((st = ce_check(e, &c)) != EX_OK)
        return st;
    cu_launch(e, ce_rows_kernel, row_blocks(c.rows), CU_THREADS, 0, c, (double *)ws, e->gate);
    cu_launch(e, ce_mean_kernel, 1, 1024, 0, c, (const double *)ws, cu_f32(&n->dst), e->gate);
    return cu_launched(e, "cross_entropy");
}

/* (softmax(x) − onehot(y)) · dloss / N for one row per warp. */
__global__ void ce_bwd_kernel(ce_args c, const float *gate)
{
    if (cu_gated_off(gate))
        return;
    int lane = threadIdx.x & 31;
    int64_t r = blockIdx.x * (int64_t)SM_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    if (r >= c.rows)
        return;
    const float *x = c.x + cu_row_off(c.ne, c.st, r);
    float *d = c.d + cu_row_off(c.ne, c.dst4, r);
    int64_t s = c.st[3], sd = c.dst4[3], y = ce_label(c, r);
    double g = (double)*c.dloss / (double)c.rows;
    double m = row_max(x, s, c.k, lane), sum = row_expsum(x, s, c.k, m, lane);
    for (int64_t j = lane; j < c.k; j += 32) {
        double p = exp((double)x[j * s] - m) / sum;
        d[j * sd] = (float)((p - (j == y ? 1.0 : 0.0)) * g);
    }
}

CU_OP(cross_entropy_bwd)
{
    ce_args c;
    ex_status st = ce_setup(e, n, "cross_entropy_bwd", 3, &c);
    if (st != EX_OK)
        return st;
    const ex_tdesc *dl = &n->src[2];
    char why[96];
    if ((st = ex_td_ce_bwd_of(n, c.ne, c.dst4, why, sizeof why)) != EX_OK)
        return cu_fail(e, st, "cross_entropy_bwd: %s", why);
    if (e->dry)
        return EX_OK;
    c.d = cu_f32(&n->dst);
    c.dloss = cu_f32(dl);
    if ((st = ce_check(e, &c)) != EX_OK)
        return st;
    cu_launch(e, ce_bwd_kernel, row_blocks(c.rows), CU_THREADS, 0, c, e->gate);
    return cu_launched(e, "cross_entropy_bwd");
}

__global__ void acc_rows_kernel(ce_args c, int *hit, const float *gate)
{
    if (cu_gated_off(gate))
        return;
    int lane = threadIdx.x & 31;
    int64_t r = blockIdx.x * (int64_t)SM_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    if (r >= c.rows)
        return;
    int64_t best = cu_row_argmax(c.x + cu_row_off(c.ne, c.st, r), c.st[3], c.k, lane);
    if (lane == 0)
        hit[r] = best == ce_label(c, r);
}

__global__ void acc_count_kernel(ce_args c, const int *hit, float *dst, const float *gate)
{
    __shared__ long long sh[32];
    if (cu_gated_off(gate))
        return;
    long long cnt = 0;
    for (int64_t r = threadIdx.x; r < c.rows; r += blockDim.x)
        cnt += hit[r];
    cnt = cu_block_sum(cnt, sh);
    if (threadIdx.x == 0)
        *dst = (float)cnt;
}

CU_OP(accuracy)
{
    ce_args c;
    ex_status st = ce_setup(e, n, "accuracy", 2, &c);
    if (st == EX_OK)
        st = ce_scalar_dst(e, "accuracy", &n->dst);
    void *ws = NULL;
    if (st == EX_OK)
        st = cu_scratch(e, sizeof(int) * (size_t)c.rows, &ws);
    if (st != EX_OK || e->dry)
        return st;
    cu_launch(e, acc_rows_kernel, row_blocks(c.rows), CU_THREADS, 0, c, (int *)ws, e->gate);
    cu_launch(e, acc_count_kernel, 1, 1024, 0, c, (const int *)ws, cu_f32(&n->dst), e->gate);
    return cu_launched(e, "accuracy");
}
