/* Batch norm's two passes in one launch, on GPUs with thread-block clusters (sm_90).
 *
 * A training step runs BN_STATS and then BN_APPLY on the same x, and BN_BWD_REDUCE and
 * then BN_BWD_DATA: each pair needs per-channel sums over the whole batch between its
 * halves, so as two kernels it is two graph nodes. Here a cluster of BNC_BLOCKS blocks
 * takes one channel: every block sums its share of the channel in double (fixed order,
 * fixed tree), the cluster barrier waits for all of them, every block reads the blocks'
 * partials from their shared memory in rank order (the same order in every block, so
 * all agree bitwise), and then each block applies or back-propagates over its share.
 * The hardware schedules a cluster's blocks together, so the barrier cannot deadlock
 * whatever else runs. The second node's work, outputs and arithmetic are those of
 * batchnorm.cu's kernels; only the grouping of the sums differs. capture() asks
 * cu_bn_pair() which node pairs qualify and launches them here as one node. A training
 * BN_STATS without its BN_APPLY runs here too (the first half alone): each channel
 * finishes in its own cluster, with no grid-wide last block to wait for. */
#include <cooperative_groups.h>

#include "cuda/cuda.h"

namespace cg = cooperative_groups;

/** Blocks of a channel's cluster (8 is the portable cluster size). */
#define BNC_BLOCKS 8
#define BNC_THREADS 256
/** A channel's elements (N*H*W) must index in 32 bits with the float-reciprocal division. */
#define BNC_MAX_M (1 << 22)

typedef struct bnc_vec {
    float *p;
    int64_t s;
} bnc_vec;

typedef struct bnc_args {
    cu_t4 x, dy, out; /**< out: y (forward) or dx (backward) */
    int n, c, w, hw, m;
    bnc_vec mean, inv;   /**< the stats rows (read in backward, written in forward) */
    bnc_vec gamma, beta; /**< p NULL when absent */
    bnc_vec rm, rv;      /**< forward: running statistics */
    bnc_vec red0, red1;  /**< backward: the reductions' rows */
    double eps, mom;
    int train; /**< backward: training-mode data gradient */
    int xhat;  /**< backward: x is x̂ itself (ip1), read with mean 0 and inv 1 */
    int v4;    /**< x, dy, out dense NCHW, 16-byte aligned, H*W % 4 == 0: float4 accesses */
} bnc_args;

__device__ __forceinline__ float bnc_get(bnc_vec v, int c)
{
    return v.p[c * v.s];
}

__device__ __forceinline__ void bnc_set(bnc_vec v, int c, float x)
{
    v.p[c * v.s] = x;
}

/* Element q (sample q / hw, position q % hw) of channel c of t. */
__device__ __forceinline__ float *bnc_at(const cu_t4 &t, int c, int q, int hw, int w, float inv_hw,
                                         float inv_w)
{
    int nb = __float2int_rz((float)q * inv_hw);
    nb += (q - nb * hw >= hw) - (q - nb * hw < 0);
    int p = q - nb * hw, h = __float2int_rz((float)p * inv_w);
    h += (p - h * w >= w) - (p - h * w < 0);
    return (float *)t.p + (int64_t)nb * t.st[0] + (int64_t)c * t.st[1] + (int64_t)h * t.st[2] +
           (int64_t)(p - h * w) * t.st[3];
}

/* Float4 number j (elements 4j .. 4j+3, inside one plane) of channel c of a dense t. */
__device__ __forceinline__ float4 *bnc_at4(const cu_t4 &t, int c, int j, int hw4, int ch,
                                           float inv_hw4)
{
    int nb = __float2int_rz((float)j * inv_hw4);
    nb += (j - nb * hw4 >= hw4) - (j - nb * hw4 < 0);
    return (float4 *)t.p + ((int64_t)nb * ch + c) * hw4 + (j - nb * hw4);
}

/* A block's share of its channel: elements [q0, q1) of the channel's N*H*W. */
__device__ __forceinline__ void bnc_share(int m, int *q0, int *q1)
{
    int rank = blockIdx.x % BNC_BLOCKS;
    *q0 = (int)((int64_t)m * rank / BNC_BLOCKS);
    *q1 = (int)((int64_t)m * (rank + 1) / BNC_BLOCKS);
}

/* The cluster's two sums for its channel: this block's share into part, the barrier,
 * then every block adds the partials in rank order. */
__device__ __forceinline__ void bnc_cluster_sums(double s1, double s2, double *part, double *sh,
                                                 double *t1, double *t2)
{
#if __CUDA_ARCH__ >= 900
    cg::cluster_group cl = cg::this_cluster();
    s1 = cu_block_sum(s1, sh);
    s2 = cu_block_sum(s2, sh);
    if (threadIdx.x == 0) {
        part[0] = s1;
        part[1] = s2;
    }
    cl.sync();
    double a = 0.0, b = 0.0;
    for (unsigned r = 0; r < BNC_BLOCKS; r++) {
        const double *o = cl.map_shared_rank(part, r);
        a += o[0];
        b += o[1];
    }
    cl.sync(); /* no block leaves while another still reads its partials */
    *t1 = a;
    *t2 = b;
#else
    (void)s1, (void)s2, (void)part, (void)sh;
    *t1 = *t2 = 0.0;               /* never launched below sm_90: cu_bn_pair() says no */
#endif
}

/* The forward's statistics sums over this block's share, in element order per thread. */
__device__ __forceinline__ void bnc_forward_sums(const bnc_args &a, int c, double *s1, double *s2)
{
    int q0, q1;
    bnc_share(a.m, &q0, &q1);
    double x1 = 0.0, x2 = 0.0;
    if (a.v4) { /* shares are split on float4 boundaries: m and hw are multiples of 4 */
        const int hw4 = a.hw / 4;
        const float inv = 1.0f / (float)hw4;
#pragma unroll 4
        for (int j = q0 / 4 + threadIdx.x; j < q1 / 4; j += blockDim.x) {
            float4 v = *bnc_at4(a.x, c, j, hw4, a.c, inv);
            x1 += v.x;
            x2 += (double)v.x * v.x;
            x1 += v.y;
            x2 += (double)v.y * v.y;
            x1 += v.z;
            x2 += (double)v.z * v.z;
            x1 += v.w;
            x2 += (double)v.w * v.w;
        }
    } else {
        const float inv_hw = 1.0f / (float)a.hw, inv_w = 1.0f / (float)a.w;
        for (int q = q0 + threadIdx.x; q < q1; q += blockDim.x) {
            float v = *bnc_at(a.x, c, q, a.hw, a.w, inv_hw, inv_w);
            x1 += v;
            x2 += (double)v * v;
        }
    }
    *s1 = x1;
    *s2 = x2;
}

/* Channel c's mean and biased variance (at least 0) from its sum s and sum of squares sq. */
__device__ __forceinline__ void bnc_moments(const bnc_args &a, double s, double sq, double *mean,
                                            double *var)
{
    *mean = s / (double)a.m;
    *var = sq / (double)a.m - *mean * *mean;
    *var = *var > 0.0 ? *var : 0.0;
}

/* Channel c's statistics, and the running ones moved towards the batch's (the variance
 * unbiased), as bn_stats_one() of batchnorm.cu. */
__device__ __forceinline__ void bnc_stats_store(const bnc_args &a, int c, double mean, double var)
{
    bnc_set(a.mean, c, (float)mean);
    bnc_set(a.inv, c, (float)(1.0 / sqrt(var + a.eps)));
    double unbiased = var * (double)a.m / (double)(a.m - 1);
    bnc_set(a.rm, c, (float)((1.0 - a.mom) * bnc_get(a.rm, c) + a.mom * mean));
    bnc_set(a.rv, c, (float)((1.0 - a.mom) * bnc_get(a.rv, c) + a.mom * unbiased));
}

/* BN_STATS (training) and BN_APPLY: statistics and running statistics as bn_stats_one(),
 * y = x·k + b with k = invstd·gamma, b = beta − mean·k, all as batchnorm.cu computes
 * them. With out NULL, BN_STATS alone. */
__global__ void bnc_forward_kernel(bnc_args a, const float *gate)
{
    __shared__ double sh[32], part[2];
    __shared__ float kb[2];
    if (cu_gated_off(gate))
        return;
    const int c = blockIdx.x / BNC_BLOCKS, rank = blockIdx.x % BNC_BLOCKS;
    double s1, s2, s, sq;
    bnc_forward_sums(a, c, &s1, &s2);
    bnc_cluster_sums(s1, s2, part, sh, &s, &sq);
    if (threadIdx.x == 0) {
        double mean, var;
        bnc_moments(a, s, sq, &mean, &var);
        float mf = (float)mean, inv = (float)(1.0 / sqrt(var + a.eps));
        float gm = a.gamma.p ? bnc_get(a.gamma, c) : 1.0f;
        float bt = a.beta.p ? bnc_get(a.beta, c) : 0.0f;
        kb[0] = inv * gm;
        kb[1] = bt - mf * kb[0];
        if (rank == 0)
            bnc_stats_store(a, c, mean, var);
    }
    __syncthreads();
    if (a.out.p == NULL) /* BN_STATS alone */
        return;
    const float k = kb[0], b = kb[1];
    int q0, q1;
    bnc_share(a.m, &q0, &q1);
    if (a.v4) {
        const int hw4 = a.hw / 4;
        const float inv = 1.0f / (float)hw4;
#pragma unroll 4
        for (int j = q0 / 4 + threadIdx.x; j < q1 / 4; j += blockDim.x) {
            float4 v = *bnc_at4(a.x, c, j, hw4, a.c, inv);
            *bnc_at4(a.out, c, j, hw4, a.c, inv) =
                make_float4(v.x * k + b, v.y * k + b, v.z * k + b, v.w * k + b);
        }
        return;
    }
    const float inv_hw = 1.0f / (float)a.hw, inv_w = 1.0f / (float)a.w;
    for (int q = q0 + threadIdx.x; q < q1; q += blockDim.x)
        *bnc_at(a.out, c, q, a.hw, a.w, inv_hw, inv_w) =
            *bnc_at(a.x, c, q, a.hw, a.w, inv_hw, inv_w) * k + b;
}

/* ---- a training BN_STATS alone, in the tensor's memory order ----
 * Block n reads sample n's C planes, one contiguous run, a warp a plane at a time
 * (float4 loads, all of a lane's loads of a plane in flight): each plane's sum and sum
 * of squares in double (a lane's elements in order, then a fixed tree over the warp).
 * A cluster of BNC_BLOCKS samples adds its blocks' plane sums per channel in rank order
 * (distributed shared memory) into one partial per channel, and the grid's last block
 * adds the clusters' partials per channel (a fixed tree) and finishes the statistics as
 * bnc_forward_kernel does: 1 / (8 N) of the partials of one per plane to read there. The
 * same sums as the pair's in another grouping, so the last bits may differ from a
 * graph replay's (where BN_STATS runs with its BN_APPLY). */
#define BNR_THREADS 512
/** Most channels a block holds the plane sums of (16 KB of shared memory). */
#define BNR_MAX_C 1024
/** Smallest planes taken: a warp's 32 lanes get a float4 each at least. */
#define BNR_MIN_HW 128
#define BNR_UNROLL 8

/* One float4 into a lane's sum and sum of squares, in element order. */
__device__ __forceinline__ void bnr_acc4(float4 v, double *s1, double *s2)
{
    *s1 += v.x;
    *s2 += (double)v.x * v.x;
    *s1 += v.y;
    *s2 += (double)v.y * v.y;
    *s1 += v.z;
    *s2 += (double)v.z * v.z;
    *s1 += v.w;
    *s2 += (double)v.w * v.w;
}

/* A dense plane of hw4 float4s at p: its two sums, in every lane of the warp. */
__device__ __forceinline__ void bnr_plane(const float4 *p, int hw4, double *s1, double *s2)
{
    double x1 = 0.0, x2 = 0.0;
    int i = threadIdx.x & 31;
    for (; i + 32 * (BNR_UNROLL - 1) < hw4; i += 32 * BNR_UNROLL) {
        float4 v[BNR_UNROLL];
#pragma unroll
        for (int u = 0; u < BNR_UNROLL; u++)
            v[u] = __ldcs(p + i + 32 * u); /* read once: do not keep it in the caches */
#pragma unroll
        for (int u = 0; u < BNR_UNROLL; u++)
            bnr_acc4(v[u], &x1, &x2);
    }
    for (; i < hw4; i += 32)
        bnr_acc4(__ldcs(p + i), &x1, &x2);
    *s1 = cu_warp_sum(x1);
    *s2 = cu_warp_sum(x2);
}

/* The cluster's per-channel sums of its blocks' plane sums ps (2 C doubles a block), in
 * rank order, into the cluster's partials part[2 (cluster C + c)]: block rank r adds
 * the channels c = r mod BNC_BLOCKS. */
__device__ __forceinline__ void bnr_cluster_partials(const bnc_args &a, double *ps, double *part)
{
#if __CUDA_ARCH__ >= 900
    cg::cluster_group cl = cg::this_cluster();
    cl.sync();
    const int rank = blockIdx.x % BNC_BLOCKS;
    double *dst = part + 2 * (int64_t)(blockIdx.x / BNC_BLOCKS) * a.c;
    for (int c = rank + BNC_BLOCKS * threadIdx.x; c < a.c; c += BNC_BLOCKS * blockDim.x) {
        double s1 = 0.0, s2 = 0.0;
        for (unsigned r = 0; r < BNC_BLOCKS; r++) {
            const double *o = cl.map_shared_rank(ps, r);
            s1 += o[2 * c];
            s2 += o[2 * c + 1];
        }
        dst[2 * c] = s1;
        dst[2 * c + 1] = s2;
    }
    cl.sync(); /* no block leaves while another still reads its plane sums */
#else
    (void)a, (void)ps, (void)part; /* never launched below sm_90: bnc_fits() says no */
#endif
}

/* The last block: each channel's sums over the clusters' partials, tpc threads a channel
 * (a power of two up to a warp: every cluster's partial loaded at once where it can),
 * each over the clusters g = its index mod tpc in order, then a fixed tree. */
__device__ void bnr_finish(const bnc_args &a, const double *part, int clusters)
{
    int tpc = 32;
    while (tpc > 1 && tpc * a.c > (int)blockDim.x)
        tpc >>= 1;
    const int sub = threadIdx.x % tpc, round = blockDim.x / tpc;
    for (int c0 = 0; c0 < a.c; c0 += round) { /* uniform: the tree's shuffles */
        const int c = c0 + threadIdx.x / tpc;
        double s1 = 0.0, s2 = 0.0;
#pragma unroll 8
        for (int grp = sub; c < a.c && grp < clusters; grp += tpc) {
            s1 += __ldcg(&part[2 * ((int64_t)grp * a.c + c)]);
            s2 += __ldcg(&part[2 * ((int64_t)grp * a.c + c) + 1]);
        }
        for (int o = 1; o < tpc; o <<= 1) {
            s1 += __shfl_xor_sync(0xffffffffu, s1, o);
            s2 += __shfl_xor_sync(0xffffffffu, s2, o);
        }
        if (c < a.c && sub == 0) {
            double mean, var;
            bnc_moments(a, s1, s2, &mean, &var);
            bnc_stats_store(a, c, mean, var);
        }
    }
}

/* Block n: sample n's planes (none past the last sample), the cluster's partials, and
 * the last block's finish. */
__global__ void __launch_bounds__(BNR_THREADS)
    bnr_stats_kernel(bnc_args a, double *part, unsigned *ticket, const float *gate)
{
    __shared__ double ps[2 * BNR_MAX_C];
    if (cu_gated_off(gate))
        return;
    const int warp = threadIdx.x >> 5, nw = blockDim.x >> 5, hw4 = a.hw / 4;
    const float4 *xs = (const float4 *)a.x.p + (int64_t)blockIdx.x * a.c * hw4;
    for (int c = warp; c < a.c; c += nw) {
        double s1 = 0.0, s2 = 0.0;
        if ((int)blockIdx.x < a.n)
            bnr_plane(xs + (int64_t)c * hw4, hw4, &s1, &s2);
        if ((threadIdx.x & 31) == 0) {
            ps[2 * c] = s1;
            ps[2 * c + 1] = s2;
        }
    }
    bnr_cluster_partials(a, ps, part);
    if (cu_last_block(ticket))
        bnr_finish(a, part, (int)gridDim.x / BNC_BLOCKS);
}

/* dx of one element, as batchnorm.cu's bn_dx. */
__device__ __forceinline__ float bnc_dx(float x, float d, float k, float c1, float c2, float mean,
                                        float inv)
{
    return k * (d - c1 - (x - mean) * inv * c2);
}

/* BN_BWD_REDUCE and BN_BWD_DATA: red0 = Σ dy·x̂, red1 = Σ dy with x̂ = (x − mean)·invstd,
 * then dx = k (dy − c1 − x̂ c2) as bn_bwd_data_kernel computes it. */
__global__ void bnc_backward_kernel(bnc_args a, const float *gate)
{
    __shared__ double sh[32], part[2];
    __shared__ float cc[2];
    if (cu_gated_off(gate))
        return;
    const int c = blockIdx.x / BNC_BLOCKS, rank = blockIdx.x % BNC_BLOCKS;
    const float mean = a.xhat ? 0.0f : bnc_get(a.mean, c);
    const float inv = a.xhat ? 1.0f : bnc_get(a.inv, c);
    const int hw4 = a.hw / 4;
    const float inv_hw4 = 1.0f / (float)hw4;
    const float inv_hw = 1.0f / (float)a.hw, inv_w = 1.0f / (float)a.w;
    int q0, q1;
    bnc_share(a.m, &q0, &q1);
    double s1 = 0.0, s2 = 0.0;
    if (a.v4) {
#pragma unroll 4
        for (int j = q0 / 4 + threadIdx.x; j < q1 / 4; j += blockDim.x) {
            float4 v = *bnc_at4(a.x, c, j, hw4, a.c, inv_hw4);
            float4 d = *bnc_at4(a.dy, c, j, hw4, a.c, inv_hw4);
            s1 += (double)d.x * ((v.x - mean) * inv);
            s2 += d.x;
            s1 += (double)d.y * ((v.y - mean) * inv);
            s2 += d.y;
            s1 += (double)d.z * ((v.z - mean) * inv);
            s2 += d.z;
            s1 += (double)d.w * ((v.w - mean) * inv);
            s2 += d.w;
        }
    } else {
        for (int q = q0 + threadIdx.x; q < q1; q += blockDim.x) {
            float v = *bnc_at(a.x, c, q, a.hw, a.w, inv_hw, inv_w);
            float d = *bnc_at(a.dy, c, q, a.hw, a.w, inv_hw, inv_w);
            s1 += (double)d * ((v - mean) * inv);
            s2 += d;
        }
    }
    double sxh, sdy;
    bnc_cluster_sums(s1, s2, part, sh, &sxh, &sdy);
    if (threadIdx.x == 0) {
        float r0 = (float)sxh, r1 = (float)sdy; /* what BN_BWD_REDUCE stores */
        if (rank == 0) {
            bnc_set(a.red0, c, r0);
            bnc_set(a.red1, c, r1);
        }
        cc[0] = a.train ? (float)(r1 / (double)a.m) : 0.0f;
        cc[1] = a.train ? (float)(r0 / (double)a.m) : 0.0f;
    }
    __syncthreads();
    const float k = (float)((double)bnc_get(a.inv, c) * (a.gamma.p ? bnc_get(a.gamma, c) : 1.0f));
    const float c1 = cc[0], c2 = cc[1];
    if (a.v4) {
#pragma unroll 4
        for (int j = q0 / 4 + threadIdx.x; j < q1 / 4; j += blockDim.x) {
            float4 v = *bnc_at4(a.x, c, j, hw4, a.c, inv_hw4);
            float4 d = *bnc_at4(a.dy, c, j, hw4, a.c, inv_hw4);
            *bnc_at4(a.out, c, j, hw4, a.c, inv_hw4) = make_float4(
                bnc_dx(v.x, d.x, k, c1, c2, mean, inv), bnc_dx(v.y, d.y, k, c1, c2, mean, inv),
                bnc_dx(v.z, d.z, k, c1, c2, mean, inv), bnc_dx(v.w, d.w, k, c1, c2, mean, inv));
        }
        return;
    }
    for (int q = q0 + threadIdx.x; q < q1; q += blockDim.x) {
        float v = *bnc_at(a.x, c, q, a.hw, a.w, inv_hw, inv_w);
        float d = *bnc_at(a.dy, c, q, a.hw, a.w, inv_hw, inv_w);
        *bnc_at(a.out, c, q, a.hw, a.w, inv_hw, inv_w) = bnc_dx(v, d, k, c1, c2, mean, inv);
    }
}

/* ---- which pairs, and the launch ---- */

static int same_desc(const ex_tdesc *a, const ex_tdesc *b)
{
    if (a->buf != b->buf || a->offset != b->offset || a->ndim != b->ndim || a->dtype != b->dtype)
        return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->ne[d] != b->ne[d] || a->st[d] != b->st[d])
            return 0;
    return 1;
}

/* Dense NCHW of x's shape, 16-byte aligned, planes of whole float4s. */
static int bnc_dense4(const cu_t4 &t, const bnc_args &g)
{
    return t.p && g.hw % 4 == 0 && (uintptr_t)t.p % 16 == 0 && t.st[3] == 1 && t.st[2] == g.w &&
           t.st[1] == g.hw && t.st[0] == (int64_t)g.c * g.hw;
}

static bnc_vec bnc_row(const ex_tdesc *t, int r)
{
    bnc_vec v = {cu_f32(t) + r * t->st[0], t->st[1]};
    return v;
}

static bnc_vec bnc_vec_of(const ex_tdesc *t)
{
    bnc_vec v = {cu_f32(t), t->st[0]};
    return v;
}

/* Whether x fits a cluster launch: channels along the grid, a channel's N*H*W within
 * BNC_MAX_M and above 1; and BN_STATS node a's own form (training, 3 sources). */
static int bnc_fits(const ex_tdesc *x, int cc_major)
{
    return cc_major >= 9 && x->ndim == 4 && x->dtype == EX_F32 && x->ne[1] >= 1 &&
           x->ne[1] <= 65535 && x->ne[0] * x->ne[2] * x->ne[3] < BNC_MAX_M &&
           x->ne[0] * x->ne[2] * x->ne[3] >= 2;
}

/* Whether a is a training BN_STATS node of the usual form (3 sources; not a synchronized
 * batch norm's moments or finish, ip1, which batchnorm.cu refuses). */
static int bnc_stats_node(const ex_node_exec *a)
{
    return a->op == EX_OP_BN_STATS && a->nsrc == 3 && a->ip[0] != 0 &&
           a->ip[1] == EX_BN_STATS_PLAIN;
}

int cu_bn_pair(const ex_node_exec *a, const ex_node_exec *b, int cc_major)
{
    if (a->gate != b->gate || a->gate_index != b->gate_index || !bnc_fits(&a->src[0], cc_major))
        return 0;
    const ex_tdesc *x = &a->src[0];
    if (bnc_stats_node(a) && b->op == EX_OP_BN_APPLY)
        return (b->nsrc == 2 || b->nsrc == 4) && same_desc(&b->src[0], x) &&
               same_desc(&b->src[1], &a->dst);
    if (a->op == EX_OP_BN_BWD_REDUCE && b->op == EX_OP_BN_BWD_DATA)
        return a->nsrc == 3 && (b->nsrc == 4 || b->nsrc == 5) && a->ip[1] == b->ip[1] &&
               ex_td_bn_xhat(a) >= 0 && ex_td_bn_ranks(b) == 1 && same_desc(&b->src[0], x) &&
               same_desc(&b->src[1], &a->src[1]) && same_desc(&b->src[2], &a->src[2]) &&
               same_desc(&b->src[3], &a->dst);
    return 0;
}

/* The geometry of x for the cluster kernels. */
static bnc_args bnc_geometry(const ex_tdesc *x)
{
    bnc_args g = {};
    g.x = cu_t4_of(x);
    g.n = (int)x->ne[0];
    g.c = (int)x->ne[1];
    g.w = (int)x->ne[3];
    g.hw = (int)(x->ne[2] * x->ne[3]);
    g.m = g.n * g.hw;
    return g;
}

/* BN_STATS node a's operands into g: running statistics, dst rows, eps and momentum. */
static void bnc_stats_args(const ex_node_exec *a, bnc_args *g)
{
    g->rm = bnc_vec_of(&a->src[1]);
    g->rv = bnc_vec_of(&a->src[2]);
    g->mean = bnc_row(&a->dst, 0);
    g->inv = bnc_row(&a->dst, 1);
    g->eps = a->fp[0];
    g->mom = a->fp[1];
}

/* One cluster of BNC_BLOCKS blocks per channel. */
/* A launch of `blocks` blocks of `threads` in clusters of BNC_BLOCKS on e's stream; the
 * cluster attribute lives in *attr, which must outlive the launch. */
static cudaLaunchConfig_t bnc_config(const cu_exec *e, unsigned blocks, unsigned threads,
                                     cudaLaunchAttribute *attr)
{
    cudaLaunchConfig_t cfg = {};
    attr->id = cudaLaunchAttributeClusterDimension;
    attr->val.clusterDim.x = BNC_BLOCKS;
    attr->val.clusterDim.y = 1;
    attr->val.clusterDim.z = 1;
    cfg.gridDim = dim3(blocks);
    cfg.blockDim = dim3(threads);
    cfg.stream = e->stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cfg;
}

static ex_status bnc_launch(cu_exec *e, void (*k)(bnc_args, const float *), const bnc_args &g,
                            const char *name)
{
    cudaLaunchAttribute attr;
    cudaLaunchConfig_t cfg = bnc_config(e, (unsigned)(g.c * BNC_BLOCKS), BNC_THREADS, &attr);
    ex_status st =
        cu_check(e, cudaLaunchKernelEx(&cfg, k, g, e->gate), "batch norm cluster launch");
    return st != EX_OK ? st : cu_launched(e, name);
}

ex_status cu_bn_pair_run(cu_exec *e, const ex_node_exec *a, const ex_node_exec *b)
{
    const ex_tdesc *x = &a->src[0];
    bnc_args g = bnc_geometry(x);
    g.out = cu_t4_of(&b->dst);
    if (a->op == EX_OP_BN_STATS) {
        bnc_stats_args(a, &g);
        g.gamma = b->nsrc == 4 ? bnc_vec_of(&b->src[2]) : bnc_vec{NULL, 0};
        g.beta = b->nsrc == 4 ? bnc_vec_of(&b->src[3]) : bnc_vec{NULL, 0};
        g.v4 = bnc_dense4(g.x, g) && bnc_dense4(g.out, g);
        return bnc_launch(e, bnc_forward_kernel, g, ex_op_name(b->op));
    }
    g.dy = cu_t4_of(&a->src[2]);
    g.mean = bnc_row(&a->src[1], 0);
    g.inv = bnc_row(&a->src[1], 1);
    g.red0 = bnc_row(&a->dst, 0);
    g.red1 = bnc_row(&a->dst, 1);
    g.gamma = b->nsrc == 5 ? bnc_vec_of(&b->src[4]) : bnc_vec{NULL, 0};
    g.train = b->ip[0] != 0;
    g.xhat = b->ip[1];
    g.v4 = bnc_dense4(g.x, g) && bnc_dense4(g.dy, g) && bnc_dense4(g.out, g);
    return bnc_launch(e, bnc_backward_kernel, g, ex_op_name(b->op));
}

/* BN_STATS alone in memory order (bnr_stats_kernel): a cluster of BNC_BLOCKS samples,
 * the grid rounded up to whole clusters, and the clusters' partials in scratch. */
static ex_status bnr_launch(cu_exec *e, const bnc_args &g)
{
    int64_t clusters = (g.n + BNC_BLOCKS - 1) / BNC_BLOCKS;
    void *ws = NULL;
    ex_status st = cu_scratch(e, sizeof(double) * 2 * (size_t)(clusters * g.c), &ws);
    if (st != EX_OK || e->dry)
        return st;
    cudaLaunchAttribute attr;
    cudaLaunchConfig_t cfg = bnc_config(e, (unsigned)(clusters * BNC_BLOCKS), BNR_THREADS, &attr);
    st =
        cu_check(e, cudaLaunchKernelEx(&cfg, bnr_stats_kernel, g, (double *)ws, e->ticket, e->gate),
                 "batch norm statistics launch");
    return st != EX_OK ? st : cu_launched(e, "bn_stats");
}

int cu_bn_stats_cluster(cu_exec *e, const ex_node_exec *n, ex_status *st)
{
    if (!bnc_stats_node(n) || !bnc_fits(&n->src[0], e->cc_major))
        return 0;
    bnc_args g = bnc_geometry(&n->src[0]);
    bnc_stats_args(n, &g);
    g.v4 = bnc_dense4(g.x, g);
    if (g.v4 && g.c <= BNR_MAX_C && g.hw >= BNR_MIN_HW) {
        *st = bnr_launch(e, g);
        return 1;
    }
    *st = EX_OK;
    if (!e->dry)
        *st = bnc_launch(e, bnc_forward_kernel, g, "bn_stats");
    return 1;
}
