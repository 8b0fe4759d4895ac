/* The CUDA backend's internals: buffers, what a node's host function needs to launch its
 * kernels, tensors as kernels take them, device helpers shared by the kernel families, and
 * one host function per op. Included by the .cu files of cuda/ only.
 *
 * Every op runs in two passes over the same host function. The sizing pass (dry) checks
 * the node exactly as the CPU backend does and asks for scratch memory; it launches
 * nothing. The launch pass then enqueues kernels on e->stream, which may be capturing
 * into a CUDA graph: so no host function may allocate, copy synchronously or read device
 * memory while launching. */
#ifndef EXAPT_CUDA_CUDA_H
#define EXAPT_CUDA_CUDA_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "core/tdesc.h"
#include "exapt/backend.h"

/** A device allocation. ex_buffer handles of this backend point to one. */
typedef struct cu_buffer {
    void *ptr;
    uint64_t bytes;
} cu_buffer;

/** Threads per block of every kernel that does not say otherwise. */
#define CU_THREADS 256
/** Elements one block reduces into one partial: fixed, so sums do not depend on the grid. */
#define CU_CHUNK 4096

/** Device status words, written by kernels that find bad data (a label out of range, an
 *  active mixed-sum candidate of the wrong shape) and read back by compute() after the
 *  step: [0] code, [1] row (label) or candidate (shape), [2] the label; each holds the
 *  reporting node in its high half (cu_report), 0 when nothing was reported. */
#define CU_STATUS_WORDS 4
/** Last-block tickets of a captured step: node i takes slot i % CU_SCHED_TICKETS. */
#define CU_SCHED_TICKETS 1024
/** The status allocation: the words, then the last-block tickets (cu_exec.ticket). */
#define CU_STATUS_BYTES (CU_STATUS_WORDS * sizeof(long long) + CU_SCHED_TICKETS * sizeof(unsigned))
enum cu_status_code { CU_STATUS_OK = 0, CU_STATUS_LABEL = 1, CU_STATUS_SHAPE = 2 };

/** The status word for node's report of value: the node inverted in the high half, so
 *  that the largest word is the earliest node's. */
__host__ __device__ __forceinline__ unsigned long long cu_status_word(long long node,
                                                                      long long value)
{
    return ((unsigned long long)(0xffffffffu - (unsigned)node) << 32) | (unsigned)value;
}

/** Node `node` reports bad data: a code and two details. One thread of the node calls it.
 *  atomicMax on every word keeps the earliest failing node's report whatever order the
 *  kernels ran in, so the schedule need not order the nodes that may report. */
__device__ __forceinline__ void cu_report(long long *status, long long node, int code, long long d1,
                                          long long d2)
{
    unsigned long long *w = (unsigned long long *)status;
    atomicMax(&w[0], cu_status_word(node, code));
    atomicMax(&w[1], cu_status_word(node, d1));
    atomicMax(&w[2], cu_status_word(node, d2));
}

/** What a node's host function needs. */
typedef struct cu_exec {
    cudaStream_t stream; /**< where the node's work goes (may be capturing) */
    cublasHandle_t blas; /**< bound to stream */
    const float *gate;   /**< the node's gate element, or NULL: kernels return when it is 0 */
    long long *status;   /**< device status words */
    unsigned *ticket;    /**< zero before and after the node: cu_last_block() counts on it */
    int64_t node;        /**< the node's index in the list (for status reports) */
    int dry;             /**< sizing pass: check and ask for scratch, launch nothing */
    char *scratch;       /**< device work space shared by all nodes (run one at a time) */
    size_t scratch_bytes;
    size_t need; /**< the most scratch any node asked for (sizing pass) */
    char *msg;   /**< where a failure's message goes */
    size_t msg_len;
    int pdl;             /**< launch kernels with programmatic stream serialization (cu_launch) */
    int cc_major;        /**< the device's compute capability */
    const ex_comm *comm; /**< a communicator whose device sums serve CUDA, or NULL */
} cu_exec;

/** A tensor as kernels take it: element 0 and the shape padded on the left to 4 dims
 *  (size 1, stride 0), in elements. */
typedef struct cu_t4 {
    char *p;
    int64_t ne[4];
    int64_t st[4];
} cu_t4;

/* ---- host helpers (util.cu) ---- */

/** Writes a message for the failing node and returns st. */
ex_status cu_fail(const cu_exec *e, ex_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/** EX_OK, or the CUDA error as a status with a message naming what failed. */
ex_status cu_check(const cu_exec *e, cudaError_t err, const char *what);
/** Checks the launches just made (cudaGetLastError). */
ex_status cu_launched(const cu_exec *e, const char *what);
/** EX_OK, or the cuBLAS error as a status with a message. */
ex_status cu_blas_check(const cu_exec *e, cublasStatus_t s, const char *what);
/** Asks for bytes of scratch: *out is the scratch (NULL in the sizing pass). */
ex_status cu_scratch(cu_exec *e, size_t bytes, void **out);

/** Device address of t's element 0. */
static inline char *cu_ptr(const ex_tdesc *t)
{
    return (char *)((cu_buffer *)t->buf)->ptr + t->offset;
}
static inline float *cu_f32(const ex_tdesc *t)
{
    return (float *)cu_ptr(t);
}

static inline cu_t4 cu_t4_of(const ex_tdesc *t)
{
    cu_t4 v;
    v.p = cu_ptr(t);
    ex_td_shape4(t, v.ne, v.st);
    return v;
}

/** Whether t's rows are runs of float4s (the column-quad kernels of dwconv.cu and
 *  pool.cu): unit column stride, every row 16-byte aligned. */
static inline bool cu_quad_rows(const cu_t4 &t)
{
    return t.st[3] == 1 && (uintptr_t)t.p % 16 == 0 && t.st[0] % 4 == 0 && t.st[1] % 4 == 0 &&
           t.st[2] % 4 == 0;
}

/** Row `row` of a plane at p as a float4 (this lane's quad of columns; row stride sr),
 *  or zeros outside [0, rows) or where the lane is off. */
__device__ __forceinline__ float4 cu_quad_row(const float *p, int64_t sr, int row, int rows,
                                              bool on)
{
    return on && row >= 0 && row < rows ? *(const float4 *)(p + row * sr)
                                        : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
}

/** Blocks for a grid-stride loop over n items. */
static inline unsigned cu_blocks(int64_t n, int threads)
{
    int64_t b = (n + threads - 1) / threads;
    return (unsigned)(b < 1 ? 1 : b > (1 << 20) ? (1 << 20) : b);
}

/** Kernels over (n, c) planes: planes along grid x, positions inside a plane along grid y
 *  (32-bit: the host checks that a plane holds fewer than 2^30 elements), both
 *  grid-stride. */
#define CU_PLANE_LOOP(planes) for (int64_t plane = blockIdx.x; plane < (planes); plane += gridDim.x)
#define CU_POS_LOOP(p, count)                                                                      \
    for (int p = blockIdx.y * blockDim.x + threadIdx.x; p < (count); p += gridDim.y * blockDim.x)

/** The grid of a plane kernel. */
static inline dim3 cu_plane_grid(int64_t planes, int64_t positions)
{
    int64_t tiles = (positions + CU_THREADS - 1) / CU_THREADS;
    unsigned gx = (unsigned)(planes < 0x7fffffff ? (planes > 0 ? planes : 1) : 0x7fffffff);
    unsigned gy = (unsigned)(tiles < 65535 ? (tiles > 0 ? tiles : 1) : 65535);
    return dim3(gx, gy);
}

/** Launches kernel k on e's stream; with e->pdl, as a programmatic dependent launch: its
 *  launch overlaps the previous kernel's tail, and the kernel must call cu_pdl_sync()
 *  before it touches memory. Errors are left for cu_launched(). */
template <typename... P, typename... A>
static inline void cu_launch(const cu_exec *e, void (*k)(P...), dim3 grid, dim3 block, size_t smem,
                             A &&...args)
{
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t c = {};
    c.gridDim = grid;
    c.blockDim = block;
    c.dynamicSmemBytes = smem;
    c.stream = e->stream;
    c.attrs = at;
    c.numAttrs = e->pdl ? 1 : 0;
    (void)cudaLaunchKernelEx(&c, k, static_cast<A &&>(args)...);
}

/* ---- device helpers ---- */

/** Programmatic dependent launch (sm_90): waits until the kernels before this one on its
 *  stream have finished and their writes are visible, then lets the next kernel launch.
 *  cu_launch() lets a kernel start before its predecessor ends, so every kernel it
 *  launches calls this before touching memory (cu_gated_off() does). A no-op for a
 *  kernel launched without the attribute, and below sm_90. */
__device__ __forceinline__ void cu_pdl_sync(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/** Whether the node's gate says skip; every thread of every kernel asks first (after
 *  cu_pdl_sync()). */
__device__ __forceinline__ bool cu_gated_off(const float *gate)
{
    cu_pdl_sync();
    return gate != NULL && *gate == 0.0f;
}

/** Offset of the row-major logical index i in a padded 4-d shape. */
__device__ __forceinline__ int64_t cu_off4(const int64_t *ne, const int64_t *st, int64_t i)
{
    int64_t i3 = i % ne[3];
    i /= ne[3];
    int64_t i2 = i % ne[2];
    i /= ne[2];
    int64_t i1 = i % ne[1];
    return (i / ne[1]) * st[0] + i1 * st[1] + i2 * st[2] + i3 * st[3];
}

/** The coordinates of the row-major logical index i in a padded 4-d shape. */
__device__ __forceinline__ void cu_coords4(const int64_t *ne, int64_t i, int64_t *c)
{
    c[3] = i % ne[3];
    i /= ne[3];
    c[2] = i % ne[2];
    i /= ne[2];
    c[1] = i % ne[1];
    c[0] = i / ne[1];
}

__device__ __forceinline__ int64_t cu_dot4(const int64_t *c, const int64_t *st)
{
    return c[0] * st[0] + c[1] * st[1] + c[2] * st[2] + c[3] * st[3];
}

/** Whether strides st walk the padded shape ne densely in row-major order (host). */
static inline int cu_dense4(const int64_t ne[4], const int64_t st[4])
{
    int64_t s = 1;
    for (int d = 3; d >= 0; d--) {
        if (ne[d] != 1 && st[d] != s)
            return 0;
        s *= ne[d];
    }
    return 1;
}

/** Offset of row r (the three outer dims) of a padded 4-d shape. */
__device__ __forceinline__ int64_t cu_row_off(const int64_t *ne, const int64_t *st, int64_t r)
{
    return (r / (ne[1] * ne[2])) * st[0] + ((r / ne[2]) % ne[1]) * st[1] + (r % ne[2]) * st[2];
}

template <typename T> __device__ __forceinline__ T cu_warp_sum(T v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/** NaN wins, so a poisoned or diverged input shows in a maximum. */
__device__ __forceinline__ double cu_max2(double a, double b)
{
    return (b > a || b != b) ? b : a;
}

/** Sum over the block (blockDim.x a multiple of 32, at most 1024) in a fixed tree; every
 *  thread gets the result. sh holds 32 values. */
template <typename T> __device__ T cu_block_sum(T v, T *sh)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = cu_warp_sum(v);
    __syncthreads(); /* sh may still be read by a previous call */
    if (lane == 0)
        sh[warp] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : (T)0;
    return cu_warp_sum(v);
}

/** Whether this block is the grid's last to get here, so it can finish what every block
 *  wrote before (the partials of a reduction) in a fixed order, in the same kernel. Every
 *  thread of every block must call it once; the last block then reads the others' writes
 *  with __ldcg, and the ticket is zero again for the next kernel. */
__device__ __forceinline__ bool cu_last_block(unsigned *ticket)
{
    __shared__ bool last;
    /* The barrier orders the block's writes before thread 0's fence, which makes them
     * visible device-wide before the ticket (as cooperative groups' grid sync does): one
     * fence a block, not one a thread. */
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        unsigned blocks = gridDim.x * gridDim.y * gridDim.z;
        last = atomicAdd(ticket, 1u) == blocks - 1;
        if (last) {
            *ticket = 0;
            __threadfence(); /* the others' writes before the block's reads */
        }
    }
    __syncthreads();
    return last;
}

/* ---- warp rows: stride-1 stencils over planes at most 32 wide ----
 * A warp holds 32 / S planes side by side (S, a power of two, at least as wide as every
 * row the kernel touches): lane l holds column l % S of plane l / S, and the warp walks
 * its planes a row at a time. A row is then one coalesced access, a window's columns come
 * from neighbouring lanes by shuffles, and nothing is staged, divided or waited for at a
 * barrier. Every lane of the warp runs the same loops (the shuffles need all of them);
 * lanes past the last plane or the row's end only load and store nothing. */

/** This lane's plane (warp-major) and column for segments of 2^seg_log2 lanes. */
typedef struct cu_wrow {
    int64_t plane;
    int col;  /**< the column this lane holds */
    int base; /**< the segment's first lane */
} cu_wrow;

__device__ __forceinline__ cu_wrow cu_wrow_of(int seg_log2)
{
    int lane = threadIdx.x & 31;
    int64_t warp = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
    cu_wrow r = {(warp << (5 - seg_log2)) + (lane >> seg_log2), lane & ((1 << seg_log2) - 1),
                 lane & ~((1 << seg_log2) - 1)};
    return r;
}

/** v of the lane holding column col of this lane's plane (any value where col is not a
 *  column of the segment: callers test col first). */
__device__ __forceinline__ float cu_wrow_get(const cu_wrow &r, float v, int col, int seg_log2)
{
    return __shfl_sync(0xffffffffu, v, r.base + (col & ((1 << seg_log2) - 1)));
}

/** The segment width's log2 for rows of up to `widest` columns, or -1 above 32. */
static inline int cu_wrow_seg(int widest)
{
    int s = 0;
    while ((1 << s) < widest)
        s++;
    return s <= 5 ? s : -1;
}

/** Blocks of CU_THREADS for planes planes in segments of 2^seg_log2 lanes. */
static inline unsigned cu_wrow_blocks(int64_t planes, int seg_log2)
{
    int64_t per_block = (int64_t)(CU_THREADS / 32) << (5 - seg_log2);
    int64_t b = (planes + per_block - 1) / per_block;
    return (unsigned)(b < 1 ? 1 : b);
}

/** Maximum over the block, NaN winning; as cu_block_sum. */
__device__ inline double cu_block_max(double v, double *sh)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1)
        v = cu_max2(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if (lane == 0)
        sh[warp] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -INFINITY;
    for (int o = 16; o > 0; o >>= 1)
        v = cu_max2(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* The first index of the row's maximum as the CPU's scan finds it: a number beats NaN,
 * a larger number beats a smaller one, and on a tie (or two NaNs) the lower index wins. */
__device__ __forceinline__ void cu_argmax_merge(float *bv, int64_t *bi, float v, int64_t i)
{
    bool bnan = *bv != *bv, vnan = v != v;
    bool take = (bnan && !vnan) || (!bnan && !vnan && (v > *bv || (v == *bv && i < *bi))) ||
                (bnan && vnan && i < *bi);
    if (take) {
        *bv = v;
        *bi = i;
    }
}

/** The row's first argmax for one warp; every lane gets it. */
__device__ inline int64_t cu_row_argmax(const float *x, int64_t s, int64_t k, int lane)
{
    float bv = x[0];
    int64_t bi = 0;
    for (int64_t j = lane; j < k; j += 32)
        cu_argmax_merge(&bv, &bi, x[j * s], j);
    for (int o = 16; o > 0; o >>= 1) {
        float v = __shfl_xor_sync(0xffffffffu, bv, o);
        int64_t i = __shfl_xor_sync(0xffffffffu, bi, o);
        cu_argmax_merge(&bv, &bi, v, i);
    }
    return bi;
}

/* ---- batch norm in eval mode, shared by BN_STATS/BN_APPLY and PWCONV_BN ----
 * One definition of the arithmetic, so that PWCONV_BN's epilogue rounds exactly as the
 * unfused PWCONV, BN_STATS (eval) and BN_APPLY do. */

/** BN_STATS's invstd: computed in double, rounded to float once. */
__device__ __forceinline__ float cu_bn_invstd(double var, double eps)
{
    return (float)(1.0 / sqrt(var + eps));
}

/** BN_APPLY's per-channel scale k and shift b from BN_STATS's mean and invstd. */
__device__ __forceinline__ void cu_bn_coefs(float mean, float inv, float gm, float bt, float *k,
                                            float *b)
{
    *k = inv * gm;
    *b = bt - mean * *k;
}

/** BN_APPLY's output for x (one expression, so the compiler contracts it alike). */
__device__ __forceinline__ float cu_bn_affine(float x, float k, float b)
{
    return x * k + b;
}

/** Batch norm in eval mode on C channels: the running statistics and, when gamma is not
 *  NULL, gamma and beta; element c of each at p[c * s]. */
typedef struct cu_bn_eval {
    const float *mean, *var, *gamma, *beta;
    int64_t mean_s, var_s, gamma_s, beta_s;
    double eps;
} cu_bn_eval;

/** Channel c's k and b as BN_STATS (eval) then BN_APPLY compute them. */
__device__ __forceinline__ void cu_bn_eval_coefs(const cu_bn_eval &bn, int64_t c, float *k,
                                                 float *b)
{
    float inv = cu_bn_invstd((double)bn.var[c * bn.var_s], bn.eps);
    float gm = bn.gamma ? bn.gamma[c * bn.gamma_s] : 1.0f;
    float bt = bn.beta ? bn.beta[c * bn.beta_s] : 0.0f;
    cu_bn_coefs(bn.mean[c * bn.mean_s], inv, gm, bt, k, b);
}

/* ---- one host function per op; backend.cu holds the switch ---- */
#define CU_OP(name) ex_status cu_##name(cu_exec *e, const ex_node_exec *n)
/* comm.cu */
CU_OP(allreduce);
/* elementwise.cu */
CU_OP(add);
CU_OP(sub);
CU_OP(mul);
CU_OP(scale);
CU_OP(axpy);
CU_OP(relu);
CU_OP(relu_bwd);
CU_OP(fill);
CU_OP(copy);
CU_OP(drop_path);
/* reduce.cu */
CU_OP(sum);
CU_OP(mean);
CU_OP(max);
CU_OP(max_bwd);
/* softmax.cu */
CU_OP(softmax);
CU_OP(softmax_bwd);
CU_OP(log_softmax);
CU_OP(log_softmax_bwd);
CU_OP(cross_entropy);
CU_OP(cross_entropy_bwd);
CU_OP(accuracy);
/* conv.cu */
CU_OP(conv2d);
CU_OP(conv2d_bwd_data);
CU_OP(conv2d_bwd_filter);
CU_OP(dwconv2d);
CU_OP(dwconv2d_bwd_data);
CU_OP(dwconv2d_bwd_filter);
/* gemm.cu */
CU_OP(pwconv);
CU_OP(pwconv_bwd_filter);
CU_OP(pwconv_bn);
CU_OP(matmul);
CU_OP(linear);
/* pool.cu */
CU_OP(avg_pool);
CU_OP(avg_pool_bwd);
CU_OP(max_pool);
CU_OP(max_pool_bwd);
CU_OP(global_avg_pool);
/* batchnorm.cu */
CU_OP(bn_stats);
CU_OP(bn_apply);
CU_OP(bn_bwd_reduce);
CU_OP(bn_bwd_data);
/* nas.cu */
CU_OP(mixed_sum);
CU_OP(mixed_sum_bwd_w);
CU_OP(gumbel_softmax);
CU_OP(gumbel_softmax_bwd);
CU_OP(hardmax_st);
CU_OP(entropy);
CU_OP(entropy_bwd);
CU_OP(topk_mask);
/* optim.cu */
CU_OP(sgd);
CU_OP(adam);
/** Runs count SGD or ADAM nodes, a group of the plan (core/group.h), in as few launches as
 *  their pointers fit (UPD_PER_LAUNCH nodes each). The sizing pass has checked each node
 *  as alone before (backend.cu), so no node fails after another has run. */
ex_status cu_update_group(cu_exec *e, const ex_node_exec *n, int32_t count);
CU_OP(grad_norm);
CU_OP(clip);
/* random.cu */
CU_OP(rand_uniform);
CU_OP(rand_normal);
/* quant.cu */
CU_OP(quantize);
CU_OP(dequantize);
CU_OP(requantize);
CU_OP(qadd);
CU_OP(qconcat);
CU_OP(qconv2d);
CU_OP(qdwconv2d);
CU_OP(qpwconv);
CU_OP(qlinear);
CU_OP(qrelu);
CU_OP(qmax_pool);
CU_OP(qavg_pool);
CU_OP(qglobal_avg_pool);

/** A depthwise convolution in its roles for the staged path: x input, wt filter, y output
 *  (backward-data: y is dy, x is dx; filter gradient: wt is dw). k is the square filter's
 *  size, s the stride of both dimensions. */
typedef struct cu_dw_args {
    int64_t n, c;
    int h, w, ho, wo, k, s, ph, pw, dh, dw;
    cu_t4 x, wt, y;
    int relu; /**< ip6: read max(x, 0); backward-data zeroes dx where mask (x) <= 0 */
    cu_t4 mask;
} cu_dw_args;

/** The staged depthwise kernels (dwconv.cu) for pass which (0 forward, 1 backward-data, 2
 *  filter gradient): returns 1 and sets *st when they apply (k 3/5/7, s 1 or 2, planes
 *  that fit in shared memory), 0 when the caller must use the general kernels. */
int cu_dw_staged(cu_exec *e, int which, const cu_dw_args *a, const char *name, ex_status *st);

/** A pointwise convolution for pointwise.cu: x [N, CI, H, W] and y [N, CO, H, W] whose H
 *  and W fold into one position stride (x_sp, y_sp), and the [CO, CI] filter with (co, ci)
 *  at w[co * w_sr + ci * w_sc]. PWCONV_BN fuses its ReLU and batch norm into the kernel:
 *  relu reads max(x, 0), and bn (bn.mean not NULL) applies the batch norm to the sums. */
typedef struct cu_pw_args {
    cu_t4 x, y;
    int64_t x_sp, y_sp;
    float *w;
    int64_t w_sr, w_sc;
    int64_t n;
    int hw, ci, co;
    int relu;
    cu_bn_eval bn;
} cu_pw_args;

/** Whether pointwise.cu's kernels take a (channels up to 256, N up to 65535). */
int cu_pw_small_fits(const cu_pw_args *a);

/** Runs a pointwise convolution on pointwise.cu's kernel: returns 1 and sets *st when it
 *  takes it, 0 otherwise. */
int cu_pw_small(cu_exec *e, const cu_pw_args *a, const char *name, ex_status *st);

/** Whether nodes a and b (the next) run as one launch on a device of compute capability
 *  cc_major (bncluster.cu): BN_STATS (training) then BN_APPLY, or BN_BWD_REDUCE then
 *  BN_BWD_DATA, on the same x, b reading what a wrote, under the same gate; sm_90. */
int cu_bn_pair(const ex_node_exec *a, const ex_node_exec *b, int cc_major);

/** Launches a pair that cu_bn_pair() accepted: one cluster of blocks per channel. */
ex_status cu_bn_pair_run(cu_exec *e, const ex_node_exec *a, const ex_node_exec *b);

/** A training BN_STATS node alone as the pair's first half (clusters, no global finish):
 *  returns 1 and sets *st when it takes the node (sm_90, the pair's shape limits), 0 when
 *  the caller must use batchnorm.cu's kernels. */
int cu_bn_stats_cluster(cu_exec *e, const ex_node_exec *n, ex_status *st);

/** Whether node n's launch pass calls cuBLAS (gemm.cu), so a gated one needs a
 *  conditional graph node around it. */
int cu_node_uses_blas(const ex_node_exec *n);

/** Where node i of a captured step runs (schedule.cu). */
typedef struct cu_sched_node {
    int stream;    /**< index into the backend's streams */
    int record;    /**< a node on another stream waits for this one: record its event */
    int32_t nwait; /**< earlier nodes to wait for: cu_sched.waits[wait0 .. wait0 + nwait) */
    int64_t wait0;
    uint64_t scratch_off, scratch_bytes; /**< the node's slice of the scratch ring */
} cu_sched_node;

/** A node list spread over streams by its dependencies. */
typedef struct cu_sched {
    cu_sched_node *node;
    int64_t *waits;
    int64_t nwaits;
} cu_sched;

/** Per-node facts the schedule needs: scratch from the sizing pass, whether the node runs
 *  as a conditional graph node, and which nodes are launched as one: a BN pair
 *  (cu_bn_pair) or a group of the plan (ex_node_exec.group). */
typedef struct cu_node_flags {
    size_t need;
    unsigned char conditional;
    int32_t span; /**< nodes launched as one with this one first (1: alone); 0: launched with
                       the node `back` places before */
    int32_t back;
} cu_node_flags;

/** Schedules count nodes over nstreams streams from their dependencies (ex_node_exec.dep)
 *  and the resources they share, with ring the scratch ring's bytes (at least the largest
 *  need). The later nodes of a launch (cu_node_flags.span) are no nodes of their own: the
 *  first waits for what any of them waits for, and stands for them in what waits for
 *  them. EX_ERR_NOMEM when host memory ran out. */
ex_status cu_schedule(const ex_node_exec *nodes, int64_t count, const cu_node_flags *flags,
                      int nstreams, uint64_t ring, cu_sched *out);

/** Frees a schedule's arrays. */
void cu_sched_free(cu_sched *s);

/** Fills n 32-bit words at p with pattern on stream (the backend's fill). */
ex_status cu_fill_words(cu_exec *e, void *p, uint64_t n, uint32_t pattern);

#endif
