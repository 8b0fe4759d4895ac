/* Batch norm 2d: statistics (with the running-statistics update), apply, and the two
 * backward passes.
 *
 * Per-channel sums run in double as on the CPU, grouped by block (bn_group_kernel) and
 * finished by the grid's last block. No atomics, so results are repeatable.
 * Apply and backward-data are element-wise with the CPU fast path's float arithmetic. */
#include "cuda/cuda.h"

/** x's shape and M = N*H*W, the count behind every per-channel statistic, decoded in core
 *  (core/tdesc.h). */
typedef ex_td_bn bn_geom;

/** A per-channel vector: a [C] tensor or one row of a [2, C] one. */
typedef struct bn_vec {
    float *p;
    int64_t s;
} bn_vec;

static bn_vec bn_vec_of(const ex_tdesc *t)
{
    bn_vec v = {cu_f32(t), t->st[0]};
    return v;
}

static bn_vec bn_row(const ex_tdesc *t, int r)
{
    bn_vec v = {cu_f32(t) + r * t->st[0], t->st[1]};
    return v;
}

static bn_vec bn_none(void)
{
    bn_vec v = {NULL, 0};
    return v;
}

/** Everything a batch-norm kernel reads besides x and dy. */
typedef struct bn_args {
    bn_geom g = {};
    cu_t4 x, dy, out;      /**< out: y, dx, or unused */
    bn_vec mean, inv;      /**< stats rows */
    bn_vec gamma, beta;    /**< p NULL when absent */
    bn_vec red0, red1;     /**< BN_BWD_DATA's reductions */
    bn_vec rm, rv, d0, d1; /**< BN_STATS: running statistics and dst rows */
    int train;
    int form; /**< BN_STATS's ip1: plain, moments or finish (mean, inv hold the moments) */
    int xhat; /**< backward: source 0 is x̂ itself (ip1), read with mean 0 and inv 1 */
    int vec4; /**< x, dy, out dense NCHW, 16-byte aligned, H·W % 4 == 0: float4 per thread */
    double eps, mom;
} bn_args;

/* Whether t is a dense NCHW tensor of g's shape whose float4s each lie in one plane. */
static bool bn_dense4(const cu_t4 &t, const bn_geom &g)
{
    int64_t hw = g.h * g.w;
    return t.p && hw % 4 == 0 && (uintptr_t)t.p % 16 == 0 && t.st[3] == 1 && t.st[2] == g.w &&
           t.st[1] == hw && t.st[0] == g.c * hw;
}

/* Four consecutive elements of a dense tensor (bn_dense4). */
__device__ __forceinline__ float4 bn_ld4(const cu_t4 &t, int64_t i4)
{
    return ((const float4 *)t.p)[i4];
}

/* dx of one element, the same arithmetic on both paths (see bn_bwd_data_kernel). */
__device__ __forceinline__ float bn_dx(float x, float d, float k, float c1, float c2, float mean,
                                       float inv)
{
    return k * (d - c1 - (x - mean) * inv * c2);
}

/** Checks a BN_APPLY, BN_BWD_REDUCE or BN_BWD_DATA node (ex_td_bn_of) and fills g. */
static ex_status bn_of(cu_exec *e, const ex_node_exec *nd, const char *name, bn_geom *g)
{
    char why[256];
    ex_status st = ex_td_bn_of(nd, g, why, sizeof why);
    return st == EX_OK ? EX_OK : cu_fail(e, st, "%s: %s", name, why);
}

__device__ __forceinline__ float bn_get(bn_vec v, int64_t c)
{
    return v.p[c * v.s];
}

/* The mean and inv that turn source 0 into x̂ = (x − mean)·inv: the statistics, or 0 and 1
 * when the source is x̂ already. */
__device__ __forceinline__ void bn_xhat_coefs(const bn_args &a, int64_t c, float *mean, float *inv)
{
    *mean = a.xhat ? 0.0f : bn_get(a.mean, c);
    *inv = a.xhat ? 1.0f : bn_get(a.inv, c);
}

__device__ __forceinline__ void bn_set(bn_vec v, int64_t c, float x)
{
    v.p[c * v.s] = x;
}

__device__ __forceinline__ float bn_px(const cu_t4 &t, int64_t nb, int64_t c, int64_t i, int64_t w)
{
    return ((const float *)t.p)[nb * t.st[0] + c * t.st[1] + i / w * t.st[2] + i % w * t.st[3]];
}

/* ---- per-channel sums: block (group, channel) over a group of samples ----
 * Every block sums one channel over BN_GROUP_WARPS-multiple samples into a double partial
 * (each warp its samples in order, then the warps in order), and the grid's last block
 * adds each channel's partials in group order: a handful per channel, so the finish is
 * one round trip, not a walk over N partials. No atomics, so results are repeatable. */
#define BN_GROUP_WARPS 8
/** Blocks the grouping aims at (several per multiprocessor of a large GPU). */
#define BN_TARGET_BLOCKS 2048

/** Samples per group: enough blocks to fill the GPU, whole warps' worth each. */
static int64_t bn_group_size(const bn_geom &g)
{
    int64_t groups = (BN_TARGET_BLOCKS + g.c - 1) / g.c;
    int64_t per = (g.n + groups - 1) / groups;
    per = (per + BN_GROUP_WARPS - 1) / BN_GROUP_WARPS * BN_GROUP_WARPS;
    return per > 0 ? per : BN_GROUP_WARPS;
}

/* The sums over the groups' partials of BN_FINISH_CH channels from c0 on, for one warp
 * (every lane gets them): their loads go out together. */
#define BN_FINISH_CH 4
__device__ __forceinline__ void bn_channel_sums(const bn_args &a, const double *part, int64_t c0,
                                                int64_t groups, double *s1, double *s2)
{
#pragma unroll
    for (int u = 0; u < BN_FINISH_CH; u++) {
        int64_t c = c0 + u < a.g.c ? c0 + u : c0;
        double x = 0.0, y = 0.0;
        for (int64_t grp = threadIdx.x % 32; grp < groups; grp += 32) {
            x += __ldcg(&part[2 * (grp * a.g.c + c)]);
            y += __ldcg(&part[2 * (grp * a.g.c + c) + 1]);
        }
        s1[u] = x;
        s2[u] = y;
    }
#pragma unroll
    for (int u = 0; u < BN_FINISH_CH; u++) {
        s1[u] = cu_warp_sum(s1[u]);
        s2[u] = cu_warp_sum(s2[u]);
    }
}

/* Channel c's statistics from its sums s, q (or, in eval, from the running ones), and
 * in training the running statistics moved towards the batch's (variance unbiased). */
__device__ void bn_stats_one(const bn_args &a, double s, double q, int64_t c)
{
    double mean, var;
    if (a.form == EX_BN_STATS_FINISH) {
        mean = bn_get(a.mean, c);
        var = bn_get(a.inv, c);
        var = var < 0.0 ? 0.0 : var; /* a NaN passes */
    } else if (a.train) {
        mean = s / (double)a.g.m;
        var = q / (double)a.g.m - mean * mean;
        var = var > 0.0 ? var : 0.0;
    } else {
        mean = bn_get(a.rm, c);
        var = bn_get(a.rv, c);
    }
    bn_set(a.d0, c, (float)mean);
    if (a.form == EX_BN_STATS_MOMENTS) {
        bn_set(a.d1, c, (float)var);
        return;
    }
    bn_set(a.d1, c, cu_bn_invstd(var, a.eps));
    if (!a.train)
        return;
    double unbiased = var * (double)a.g.m / (double)(a.g.m - 1);
    bn_set(a.rm, c, (float)((1.0 - a.mom) * bn_get(a.rm, c) + a.mom * mean));
    bn_set(a.rv, c, (float)((1.0 - a.mom) * bn_get(a.rv, c) + a.mom * unbiased));
}

/* The last block finishes every channel, BN_FINISH_CH a warp: statistics, or the two
 * reductions of the backward pass. */
__device__ void bn_finish(const bn_args &a, int stats, const double *part, int64_t groups)
{
    const int64_t step = blockDim.x / 32 * BN_FINISH_CH;
    for (int64_t c0 = threadIdx.x / 32 * BN_FINISH_CH; c0 < a.g.c; c0 += step) {
        double s1[BN_FINISH_CH], s2[BN_FINISH_CH];
        bn_channel_sums(a, part, c0, groups, s1, s2);
        for (int u = 0; u < BN_FINISH_CH && c0 + u < a.g.c && threadIdx.x % 32 == 0; u++) {
            if (stats) {
                bn_stats_one(a, s1[u], s2[u], c0 + u);
            } else {
                bn_set(a.d0, c0 + u, (float)s1[u]);
                bn_set(a.d1, c0 + u, (float)s2[u]);
            }
        }
    }
}

/* One float4 of a plane into the two sums, in element order. stats: sum and sum of
 * squares of x; otherwise Σ dy·x̂ and Σ dy with x̂ = (x − mean)·invstd. */
__device__ __forceinline__ void bn_acc4(float4 x, float4 d, int stats, float mean, float inv,
                                        double *s1, double *s2)
{
    float v[4] = {x.x, x.y, x.z, x.w}, g[4] = {d.x, d.y, d.z, d.w};
#pragma unroll
    for (int q = 0; q < 4; q++) {
        if (stats) {
            *s1 += v[q];
            *s2 += (double)v[q] * v[q];
        } else {
            *s1 += (double)g[q] * ((v[q] - mean) * inv);
            *s2 += g[q];
        }
    }
}

/* One plane into a lane's sums: float4s on dense tensors, all of a lane's loads of
 * the plane in flight for up to 32·U float4s (U: 8 reading x alone, 4 reading x and dy). */
template <int STATS>
__device__ __forceinline__ void bn_plane4(const bn_args &a, int64_t p, float mean, float inv,
                                          double *s1, double *s2)
{
    const int U = STATS ? 8 : 4;
    int64_t hw4 = a.g.h * a.g.w / 4, i = threadIdx.x % 32;
    const float4 *xp = (const float4 *)a.x.p + p * hw4;
    const float4 *dp = STATS ? xp : (const float4 *)a.dy.p + p * hw4;
    for (; i + 32 * (U - 1) < hw4; i += 32 * U) {
        float4 x[U], d[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            x[u] = xp[i + 32 * u];
            d[u] = STATS ? x[u] : dp[i + 32 * u];
        }
#pragma unroll
        for (int u = 0; u < U; u++)
            bn_acc4(x[u], d[u], STATS, mean, inv, s1, s2);
    }
    for (; i < hw4; i += 32)
        bn_acc4(xp[i], STATS ? xp[i] : dp[i], STATS, mean, inv, s1, s2);
}

/* The same for any strides, by row and column. */
__device__ __forceinline__ void bn_plane1(const bn_args &a, int stats, int64_t nb, int64_t c,
                                          float mean, float inv, double *s1, double *s2)
{
    int64_t hw = a.g.h * a.g.w;
    for (int64_t i = threadIdx.x % 32; i < hw; i += 32) {
        float v = bn_px(a.x, nb, c, i, a.g.w);
        if (stats) {
            *s1 += v;
            *s2 += (double)v * v;
        } else {
            float d = bn_px(a.dy, nb, c, i, a.g.w);
            *s1 += (double)d * ((v - mean) * inv);
            *s2 += d;
        }
    }
}

/* Block (group, channel): warp w takes samples n0 + w, n0 + w + BN_GROUP_WARPS, ... of
 * the group; the partial goes to part[2 (group C + c)], and the last block finishes. */
template <int STATS>
__global__ void bn_group_kernel(bn_args a, int64_t per, int64_t groups, double *part,
                                unsigned *ticket, const float *gate)
{
    const int stats = STATS;
    __shared__ double sh[2][BN_GROUP_WARPS];
    if (cu_gated_off(gate))
        return;
    int64_t grp = blockIdx.x / a.g.c, c = blockIdx.x % a.g.c;
    int64_t n1 = (grp + 1) * per < a.g.n ? (grp + 1) * per : a.g.n;
    int warp = threadIdx.x / 32;
    float mean = 0.0f, inv = 0.0f;
    if (!stats)
        bn_xhat_coefs(a, c, &mean, &inv);
    double s1 = 0.0, s2 = 0.0;
    for (int64_t nb = grp * per + warp; nb < n1; nb += BN_GROUP_WARPS) {
        if (a.vec4)
            bn_plane4<STATS>(a, nb * a.g.c + c, mean, inv, &s1, &s2);
        else
            bn_plane1(a, stats, nb, c, mean, inv, &s1, &s2);
    }
    s1 = cu_warp_sum(s1);
    s2 = cu_warp_sum(s2);
    if (threadIdx.x % 32 == 0) {
        sh[0][warp] = s1;
        sh[1][warp] = s2;
    }
    __syncthreads();
    if (threadIdx.x < 2) {
        double v = 0.0;
        for (int w = 0; w < BN_GROUP_WARPS; w++)
            v += sh[threadIdx.x][w];
        part[2 * blockIdx.x + threadIdx.x] = v;
    }
    if (cu_last_block(ticket))
        bn_finish(a, stats, part, groups);
}

/* The per-channel sums and the channels' results. */
static ex_status bn_groups(cu_exec *e, const bn_args &a, int stats, const char *name)
{
    int64_t per = bn_group_size(a.g), groups = (a.g.n + per - 1) / per;
    groups = groups > 0 ? groups : 1; /* with no samples the channels still get their zeros */
    if (groups * a.g.c > 0x7fffffff)
        return cu_fail(e, EX_ERR_UNSUPPORTED, "%s: %lld channels exceed the grid", name,
                       (long long)a.g.c);
    void *ws = NULL;
    ex_status st = cu_scratch(e, sizeof(double) * 2 * (size_t)(groups * a.g.c), &ws);
    if (st != EX_OK || e->dry)
        return st;
    unsigned blocks = (unsigned)(groups * a.g.c);
    if (stats)
        cu_launch(e, bn_group_kernel<1>, blocks, BN_GROUP_WARPS * 32, 0, a, per, groups,
                  (double *)ws, e->ticket, e->gate);
    else
        cu_launch(e, bn_group_kernel<0>, blocks, BN_GROUP_WARPS * 32, 0, a, per, groups,
                  (double *)ws, e->ticket, e->gate);
    return cu_launched(e, name);
}

/* Statistics with no pass over x: eval's from the running ones, or a synchronized batch
 * norm's finish from the group's moments (over a.g.m = the global count). */
__global__ void bn_stats_channels_kernel(bn_args a, const float *gate)
{
    if (cu_gated_off(gate))
        return;
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < a.g.c;
         c += (int64_t)gridDim.x * blockDim.x)
        bn_stats_one(a, 0.0, 0.0, c);
}

CU_OP(bn_stats)
{
    char why[256];
    int form;
    int64_t c;
    ex_status st = ex_td_bn_stats_check(n, &form, &c, why, sizeof why);
    if (st != EX_OK)
        return cu_fail(e, st, "bn_stats: %s", why);
    const ex_tdesc *x = &n->src[0];
    bn_geom g = {x->ne[0], c, x->ne[2], x->ne[3], x->ne[0] * x->ne[2] * x->ne[3]};
    if (form == EX_BN_STATS_FINISH)
        g = (bn_geom){0, c, 0, 0, n->ip[2]};
    int train = n->ip[0] != 0;
    bn_args a = {};
    a.g = g;
    a.form = form;
    if (form == EX_BN_STATS_FINISH) {
        a.mean = bn_row(&n->src[0], 0);
        a.inv = bn_row(&n->src[0], 1);
    } else {
        a.x = cu_t4_of(&n->src[0]);
    }
    a.rm = bn_vec_of(&n->src[1]);
    a.rv = bn_vec_of(&n->src[2]);
    a.d0 = bn_row(&n->dst, 0);
    a.d1 = bn_row(&n->dst, 1);
    a.train = train;
    a.eps = n->fp[0];
    a.mom = n->fp[1];
    a.vec4 = form != EX_BN_STATS_FINISH && bn_dense4(a.x, g);
    if (train && cu_bn_stats_cluster(e, n, &st))
        return st;
    if (train && form != EX_BN_STATS_FINISH)
        return bn_groups(e, a, 1, "bn_stats");
    if (e->dry)
        return EX_OK;
    cu_launch(e, bn_stats_channels_kernel, cu_blocks(g.c, CU_THREADS), CU_THREADS, 0, a, e->gate);
    return cu_launched(e, "bn_stats");
}

/* ---- apply ---- */

__global__ void bn_apply_kernel(bn_args a, const float *gate)
{
    if (cu_gated_off(gate))
        return;
    int64_t hw = a.g.h * a.g.w, total = a.g.n * a.g.c * hw;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; a.vec4 && i < total / 4;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c = i * 4 / hw % a.g.c;
        float gm = a.gamma.p ? bn_get(a.gamma, c) : 1.0f;
        float bt = a.beta.p ? bn_get(a.beta, c) : 0.0f, k, b;
        cu_bn_coefs(bn_get(a.mean, c), bn_get(a.inv, c), gm, bt, &k, &b);
        float4 x = bn_ld4(a.x, i);
        ((float4 *)a.out.p)[i] = make_float4(cu_bn_affine(x.x, k, b), cu_bn_affine(x.y, k, b),
                                             cu_bn_affine(x.z, k, b), cu_bn_affine(x.w, k, b));
    }
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; !a.vec4 && i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i % hw, c = i / hw % a.g.c, nb = i / (hw * a.g.c);
        float gm = a.gamma.p ? bn_get(a.gamma, c) : 1.0f;
        float bt = a.beta.p ? bn_get(a.beta, c) : 0.0f, k, b;
        cu_bn_coefs(bn_get(a.mean, c), bn_get(a.inv, c), gm, bt, &k, &b);
        float *y = (float *)a.out.p + nb * a.out.st[0] + c * a.out.st[1] + r / a.g.w * a.out.st[2] +
                   r % a.g.w * a.out.st[3];
        *y = cu_bn_affine(bn_px(a.x, nb, c, r, a.g.w), k, b);
    }
}

CU_OP(bn_apply)
{
    bn_geom g = {};
    ex_status st = bn_of(e, n, "bn_apply", &g);
    if (st != EX_OK || e->dry)
        return st;
    bn_args a = {};
    a.g = g;
    a.x = cu_t4_of(&n->src[0]);
    a.out = cu_t4_of(&n->dst);
    a.mean = bn_row(&n->src[1], 0);
    a.inv = bn_row(&n->src[1], 1);
    a.gamma = n->nsrc == 4 ? bn_vec_of(&n->src[2]) : bn_none();
    a.beta = n->nsrc == 4 ? bn_vec_of(&n->src[3]) : bn_none();
    a.vec4 = bn_dense4(a.x, g) && bn_dense4(a.out, g);
    int64_t total = g.n * g.c * g.h * g.w;
    cu_launch(e, bn_apply_kernel, cu_blocks(a.vec4 ? total / 4 : total, CU_THREADS), CU_THREADS, 0,
              a, e->gate);
    return cu_launched(e, "bn_apply");
}

/* ---- backward ---- */

CU_OP(bn_bwd_reduce)
{
    bn_geom g = {};
    ex_status st = bn_of(e, n, "bn_bwd_reduce", &g);
    if (st != EX_OK)
        return st;
    bn_args a = {};
    a.g = g;
    a.x = cu_t4_of(&n->src[0]);
    a.dy = cu_t4_of(&n->src[2]);
    a.mean = bn_row(&n->src[1], 0);
    a.inv = bn_row(&n->src[1], 1);
    a.d0 = bn_row(&n->dst, 0);
    a.d1 = bn_row(&n->dst, 1);
    a.xhat = n->ip[1];
    a.vec4 = bn_dense4(a.x, g) && bn_dense4(a.dy, g);
    return bn_groups(e, a, 0, "bn_bwd_reduce");
}

/* dx = k (dy − c1 − x̂ c2) with k = invstd·gamma, c1 = red1 / M, c2 = red0 / M in
 * training; c1 = c2 = 0 in eval. */
__global__ void bn_bwd_data_kernel(bn_args a, const float *gate)
{
    if (cu_gated_off(gate))
        return;
    int64_t hw = a.g.h * a.g.w, total = a.g.n * a.g.c * hw;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; a.vec4 && i < total / 4;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c = i * 4 / hw % a.g.c;
        float mean, inv;
        bn_xhat_coefs(a, c, &mean, &inv);
        float k = (float)((double)bn_get(a.inv, c) * (a.gamma.p ? bn_get(a.gamma, c) : 1.0f));
        float c1 = a.train ? (float)(bn_get(a.red1, c) / (double)a.g.m) : 0.0f;
        float c2 = a.train ? (float)(bn_get(a.red0, c) / (double)a.g.m) : 0.0f;
        float4 x = bn_ld4(a.x, i), d = bn_ld4(a.dy, i);
        ((float4 *)a.out.p)[i] = make_float4(
            bn_dx(x.x, d.x, k, c1, c2, mean, inv), bn_dx(x.y, d.y, k, c1, c2, mean, inv),
            bn_dx(x.z, d.z, k, c1, c2, mean, inv), bn_dx(x.w, d.w, k, c1, c2, mean, inv));
    }
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; !a.vec4 && i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i % hw, c = i / hw % a.g.c, nb = i / (hw * a.g.c);
        float mean, inv;
        bn_xhat_coefs(a, c, &mean, &inv);
        float k = (float)((double)bn_get(a.inv, c) * (a.gamma.p ? bn_get(a.gamma, c) : 1.0f));
        float c1 = a.train ? (float)(bn_get(a.red1, c) / (double)a.g.m) : 0.0f;
        float c2 = a.train ? (float)(bn_get(a.red0, c) / (double)a.g.m) : 0.0f;
        float x = bn_px(a.x, nb, c, r, a.g.w), d = bn_px(a.dy, nb, c, r, a.g.w);
        float *dx = (float *)a.out.p + nb * a.out.st[0] + c * a.out.st[1] +
                    r / a.g.w * a.out.st[2] + r % a.g.w * a.out.st[3];
        *dx = bn_dx(x, d, k, c1, c2, mean, inv);
    }
}

CU_OP(bn_bwd_data)
{
    bn_geom g = {};
    ex_status st = bn_of(e, n, "bn_bwd_data", &g);
    if (st != EX_OK || e->dry)
        return st;
    /* red holds sums over every rank's batch (ip2 = R): the statistics count R times the
     * local values */
    g.m *= ex_td_bn_ranks(n);
    bn_args a = {};
    a.g = g;
    a.x = cu_t4_of(&n->src[0]);
    a.dy = cu_t4_of(&n->src[2]);
    a.out = cu_t4_of(&n->dst);
    a.mean = bn_row(&n->src[1], 0);
    a.inv = bn_row(&n->src[1], 1);
    a.red0 = bn_row(&n->src[3], 0);
    a.red1 = bn_row(&n->src[3], 1);
    a.gamma = n->nsrc == 5 ? bn_vec_of(&n->src[4]) : bn_none();
    a.train = n->ip[0] != 0;
    a.xhat = n->ip[1];
    a.vec4 = bn_dense4(a.x, g) && bn_dense4(a.dy, g) && bn_dense4(a.out, g);
    int64_t total = g.n * g.c * g.h * g.w;
    cu_launch(e, bn_bwd_data_kernel, cu_blocks(a.vec4 ? total / 4 : total, CU_THREADS), CU_THREADS,
              0, a, e->gate);
    return cu_launched(e, "bn_bwd_data");
}
