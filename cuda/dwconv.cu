/* The depthwise convolution's staged path: a square K x K filter (K 3, 5 or 7), equal
 * strides of 1 or 2, any dilation, any operand strides. A block copies whole (n, c)
 * planes of its source, with the zero border the windows reach, into shared memory once,
 * then every output reads its K*K taps from there: no bounds checks and no 64-bit index
 * arithmetic in the inner loop, and each source element comes from device memory once.
 * Planes too large for shared memory go to the general kernels of conv.cu.
 *
 * Forward and backward-data give each output element to one thread (fixed tap order).
 * The filter gradient has block (channel, group of samples) keep all K*K taps per thread
 * in registers, reduce them over the block through warp shuffles and a fixed order over
 * the warps into double partials, and the grid's last block adds the groups in order.
 * No floating-point atomics: results are repeatable. */
#include "cuda/cuda.h"

/** Shared memory a block may take (several blocks share a multiprocessor). */
#define DW_SMEM_BYTES (24 * 1024)
/** Outputs a block aims to have in flight, so small planes share a block. */
#define DW_BLOCK_OUTPUTS 1024
/** Outputs one filter-gradient block works through before its reduction, and the blocks
 *  that should be there at least (where the work allows). */
#define DW_FILTER_OUTPUTS 4096
#define DW_FILTER_BLOCKS 256

/** The launch geometry, all in-plane figures 32-bit (conv.cu checked the plane sizes). */
typedef struct dw_geo {
    int n, c, h, w, ho, wo;
    int ph, pw, dh, dw;
    int sr, sc;    /**< staged rows and columns */
    int r0, c0;    /**< where the staged region starts, in source coordinates */
    int ppb;       /**< planes staged at once */
    int per_group; /**< samples of one filter-gradient block */
    int64_t items; /**< blocks' work items */
    int relu;      /**< ip6: x staged as max(x, 0); dx stored 0 where the mask x <= 0 */
} dw_geo;

/** Most planes a block stages at once (the per-plane base offsets live in shared memory). */
#define DW_MAX_PPB 64

/** j / d for 0 <= j < 2^22 through d's float reciprocal, corrected to the exact quotient:
 *  the product is off by less than one, so one step either way fixes it. */
__device__ __forceinline__ int dw_div(int j, int d, float inv)
{
    int q = __float2int_rz((float)j * inv), r = j - q * d;
    return r >= d ? q + 1 : r < 0 ? q - 1 : q;
}

/* Element offsets of the np planes' origins in t: plane p0 + i in (n, c) order, or, with
 * fixed_c >= 0, sample p0 + i of channel fixed_c. Computed once per block item, so the
 * 64-bit index arithmetic stays out of the per-element loops. */
__device__ __forceinline__ void dw_bases(int64_t *dst, const cu_t4 &t, int c, int64_t p0, int np,
                                         int fixed_c)
{
    for (int i = threadIdx.x; i < np; i += blockDim.x) {
        int64_t pl = p0 + i;
        int64_t nb = fixed_c >= 0 ? pl : pl / c, ch = fixed_c >= 0 ? fixed_c : pl % c;
        dst[i] = nb * t.st[0] + ch * t.st[1];
    }
}

static int floor_div(int a, int b)
{
    return a >= 0 ? a / b : -((-a + b - 1) / b);
}

/* Copies np planes of src (origins in base) into dst with zeros outside the plane; relu:
 * max(v, 0) of each (the fused ReLU of x, a flag uniform over the grid). */
__device__ __forceinline__ void dw_stage(float *dst, const dw_geo &g, const cu_t4 &src,
                                         const int64_t *base, int src_h, int src_w, int np,
                                         bool relu)
{
    const int plane = g.sr * g.sc;
    const float inv_plane = 1.0f / (float)plane, inv_sc = 1.0f / (float)g.sc;
    for (int i = threadIdx.x; i < np * plane; i += blockDim.x) {
        int pi = dw_div(i, plane, inv_plane), q = i - pi * plane;
        int r = dw_div(q, g.sc, inv_sc), col = q - r * g.sc;
        int ih = g.r0 + r, iw = g.c0 + col;
        float v = 0.0f;
        if (ih >= 0 && ih < src_h && iw >= 0 && iw < src_w)
            v = ((const float *)src.p)[base[pi] + ih * src.st[2] + iw * src.st[3]];
        dst[i] = relu && v < 0.0f ? 0.0f : v;
    }
}

/* The K*K filter taps of the np planes' channels. */
template <int K>
__device__ __forceinline__ void dw_stage_filter(float *dst, const dw_geo &g, const cu_t4 &w,
                                                int64_t p0, int np)
{
    for (int i = threadIdx.x; i < np * K * K; i += blockDim.x) {
        int pi = i / (K * K), t = i - pi * (K * K);
        int64_t ch = (p0 + pi) % g.c;
        dst[i] = ((const float *)w.p)[ch * w.st[0] + (t / K) * w.st[2] + (t % K) * w.st[3]];
    }
}

/* y[n, c, oh, ow] = Σ_a,b x[n, c, oh*S - ph + a*dh, ow*S - pw + b*dw] · w[c, a, b] */
template <int K, int S>
__global__ void dw_fwd_kernel(dw_geo g, cu_t4 x, cu_t4 w, cu_t4 y, const float *gate)
{
    extern __shared__ float sm[];
    __shared__ int64_t xb[DW_MAX_PPB], yb[DW_MAX_PPB];
    if (cu_gated_off(gate))
        return;
    const int plane = g.sr * g.sc, outs = g.ho * g.wo;
    const float inv_outs = 1.0f / (float)outs, inv_wo = 1.0f / (float)g.wo;
    float *sw = sm + g.ppb * plane;
    const int64_t planes = (int64_t)g.n * g.c;
    for (int64_t item = blockIdx.x; item < g.items; item += gridDim.x) {
        int64_t p0 = item * g.ppb;
        int np = (int)(planes - p0 < g.ppb ? planes - p0 : g.ppb);
        dw_bases(xb, x, g.c, p0, np, -1);
        dw_bases(yb, y, g.c, p0, np, -1);
        dw_stage_filter<K>(sw, g, w, p0, np);
        __syncthreads();
        dw_stage(sm, g, x, xb, g.h, g.w, np, g.relu);
        __syncthreads();
        for (int j = threadIdx.x; j < np * outs; j += blockDim.x) {
            int pi = dw_div(j, outs, inv_outs), q = j - pi * outs;
            int oh = dw_div(q, g.wo, inv_wo), ow = q - oh * g.wo;
            const float *s = sm + pi * plane + oh * S * g.sc + ow * S;
            const float *wk = sw + pi * K * K;
            float acc = 0.0f;
#pragma unroll
            for (int a = 0; a < K; a++)
#pragma unroll
                for (int b = 0; b < K; b++)
                    acc += s[a * g.dh * g.sc + b * g.dw] * wk[a * K + b];
            ((float *)y.p)[yb[pi] + oh * y.st[2] + ow * y.st[3]] = acc;
        }
        __syncthreads();
    }
}

/* dx as stored: v, or with the fused ReLU 0 where the input x is not above 0 (mp: the
 * row of x's plane, NULL without the ReLU). */
__device__ __forceinline__ float dw_masked(const float *mp, int64_t at, float v)
{
    return mp && !(mp[at] > 0.0f) ? 0.0f : v;
}

/* dx[n, c, ih, iw] = Σ over the taps (a, b) whose window position (ih + ph - a*dh)/S,
 * (iw + pw - b*dw)/S is whole and inside dy, of dy there · w[c, a, b]. The staged dy
 * starts at row r0 and column c0 (multiples of S below the lowest position reached),
 * so t - S*r0 is never negative and its parity is t's. With the fused ReLU, masked by
 * m (x) > 0. */
template <int K, int S>
__global__ void dw_bwd_data_kernel(dw_geo g, cu_t4 dy, cu_t4 w, cu_t4 dx, cu_t4 m,
                                   const float *gate)
{
    extern __shared__ float sm[];
    __shared__ int64_t yb[DW_MAX_PPB], xb[DW_MAX_PPB], mb[DW_MAX_PPB];
    if (cu_gated_off(gate))
        return;
    const int plane = g.sr * g.sc, outs = g.h * g.w;
    const float inv_outs = 1.0f / (float)outs, inv_w = 1.0f / (float)g.w;
    float *sw = sm + g.ppb * plane;
    const int64_t planes = (int64_t)g.n * g.c;
    for (int64_t item = blockIdx.x; item < g.items; item += gridDim.x) {
        int64_t p0 = item * g.ppb;
        int np = (int)(planes - p0 < g.ppb ? planes - p0 : g.ppb);
        dw_bases(yb, dy, g.c, p0, np, -1);
        dw_bases(xb, dx, g.c, p0, np, -1);
        if (g.relu)
            dw_bases(mb, m, g.c, p0, np, -1);
        dw_stage_filter<K>(sw, g, w, p0, np);
        __syncthreads();
        dw_stage(sm, g, dy, yb, g.ho, g.wo, np, false);
        __syncthreads();
        for (int j = threadIdx.x; j < np * outs; j += blockDim.x) {
            int pi = dw_div(j, outs, inv_outs), q = j - pi * outs;
            int ih = dw_div(q, g.w, inv_w), iw = q - ih * g.w;
            const float *mp = g.relu ? (const float *)m.p + mb[pi] + ih * m.st[2] : NULL;
            const float *s = sm + pi * plane;
            const float *wk = sw + pi * K * K;
            int t0 = ih + g.ph - S * g.r0, u0 = iw + g.pw - S * g.c0;
            float acc = 0.0f;
#pragma unroll
            for (int a = 0; a < K; a++) {
                int t = t0 - a * g.dh;
                if (S == 2 && (t & 1))
                    continue;
#pragma unroll
                for (int b = 0; b < K; b++) {
                    int u = u0 - b * g.dw;
                    if (S == 2 && (u & 1))
                        continue;
                    acc += s[(t / S) * g.sc + u / S] * wk[a * K + b];
                }
            }
            ((float *)dx.p)[xb[pi] + ih * dx.st[2] + iw * dx.st[3]] =
                dw_masked(mp, iw * m.st[3], acc);
        }
        __syncthreads();
    }
}

/* Outputs one thread of a strip kernel computes, side by side in a row. */
#define DW_STRIP 4

/* The forward with a dilation D known at compile time: thread (plane, row, strip) computes
 * DW_STRIP neighbouring outputs, and the taps they share are read from shared memory
 * once (the offsets v*S + b*D repeat). Same sums, in the same order, as dw_fwd_kernel. */
template <int K, int S, int D>
__global__ void dw_fwd_strip_kernel(dw_geo g, cu_t4 x, cu_t4 w, cu_t4 y, const float *gate)
{
    extern __shared__ float sm[];
    __shared__ int64_t xb[DW_MAX_PPB], yb[DW_MAX_PPB];
    if (cu_gated_off(gate))
        return;
    const int plane = g.sr * g.sc, strips = (g.wo + DW_STRIP - 1) / DW_STRIP;
    const int outs = g.ho * strips;
    const float inv_outs = 1.0f / (float)outs, inv_strips = 1.0f / (float)strips;
    float *sw = sm + g.ppb * plane;
    const int64_t planes = (int64_t)g.n * g.c;
    for (int64_t item = blockIdx.x; item < g.items; item += gridDim.x) {
        int64_t p0 = item * g.ppb;
        int np = (int)(planes - p0 < g.ppb ? planes - p0 : g.ppb);
        dw_bases(xb, x, g.c, p0, np, -1);
        dw_bases(yb, y, g.c, p0, np, -1);
        dw_stage_filter<K>(sw, g, w, p0, np);
        __syncthreads();
        dw_stage(sm, g, x, xb, g.h, g.w, np, g.relu);
        __syncthreads();
        for (int j = threadIdx.x; j < np * outs; j += blockDim.x) {
            int pi = dw_div(j, outs, inv_outs), q = j - pi * outs;
            int oh = dw_div(q, strips, inv_strips), ow = (q - oh * strips) * DW_STRIP;
            const float *sp = sm + pi * plane + oh * S * g.sc + ow * S;
            const float *wk = sw + pi * K * K;
            float acc[DW_STRIP] = {};
#pragma unroll
            for (int a = 0; a < K; a++) {
                const float *r = sp + a * D * g.sc;
#pragma unroll
                for (int b = 0; b < K; b++) {
                    float wv = wk[a * K + b];
#pragma unroll
                    for (int v = 0; v < DW_STRIP; v++)
                        acc[v] += r[v * S + b * D] * wv;
                }
            }
            float *yp = (float *)y.p + yb[pi] + oh * y.st[2];
#pragma unroll
            for (int v = 0; v < DW_STRIP; v++)
                if (ow + v < g.wo)
                    yp[(ow + v) * y.st[3]] = acc[v];
        }
        __syncthreads();
    }
}

/* The data gradient for stride 1 with a dilation D known at compile time, DW_STRIP
 * inputs a thread: with stride 1 every tap lands, so dx is dy correlated with the
 * flipped filter, row ih + (K-1-a)*D and column iw + (K-1-b)*D of the staged dy. */
template <int K, int D>
__global__ void dw_bwd_data_strip_kernel(dw_geo g, cu_t4 dy, cu_t4 w, cu_t4 dx, cu_t4 m,
                                         const float *gate)
{
    extern __shared__ float sm[];
    __shared__ int64_t yb[DW_MAX_PPB], xb[DW_MAX_PPB], mb[DW_MAX_PPB];
    if (cu_gated_off(gate))
        return;
    const int plane = g.sr * g.sc, strips = (g.w + DW_STRIP - 1) / DW_STRIP;
    const int outs = g.h * strips;
    const float inv_outs = 1.0f / (float)outs, inv_strips = 1.0f / (float)strips;
    float *sw = sm + g.ppb * plane;
    const int64_t planes = (int64_t)g.n * g.c;
    for (int64_t item = blockIdx.x; item < g.items; item += gridDim.x) {
        int64_t p0 = item * g.ppb;
        int np = (int)(planes - p0 < g.ppb ? planes - p0 : g.ppb);
        dw_bases(yb, dy, g.c, p0, np, -1);
        dw_bases(xb, dx, g.c, p0, np, -1);
        if (g.relu)
            dw_bases(mb, m, g.c, p0, np, -1);
        dw_stage_filter<K>(sw, g, w, p0, np);
        __syncthreads();
        dw_stage(sm, g, dy, yb, g.ho, g.wo, np, false);
        __syncthreads();
        for (int j = threadIdx.x; j < np * outs; j += blockDim.x) {
            int pi = dw_div(j, outs, inv_outs), q = j - pi * outs;
            int ih = dw_div(q, strips, inv_strips), iw = (q - ih * strips) * DW_STRIP;
            const float *mp = g.relu ? (const float *)m.p + mb[pi] + ih * m.st[2] : NULL;
            /* row ih + ph - a*D - r0 = ih + (K-1-a)*D since r0 = ph - (K-1)*D; columns alike */
            const float *sp = sm + pi * plane + ih * g.sc + iw;
            const float *wk = sw + pi * K * K;
            float acc[DW_STRIP] = {};
#pragma unroll
            for (int a = 0; a < K; a++) {
                const float *r = sp + (K - 1 - a) * D * g.sc;
#pragma unroll
                for (int b = 0; b < K; b++) {
                    float wv = wk[a * K + b];
#pragma unroll
                    for (int v = 0; v < DW_STRIP; v++)
                        acc[v] += r[v + (K - 1 - b) * D] * wv;
                }
            }
            float *xp = (float *)dx.p + xb[pi] + ih * dx.st[2];
#pragma unroll
            for (int v = 0; v < DW_STRIP; v++)
                if (iw + v < g.w)
                    xp[(iw + v) * dx.st[3]] = dw_masked(mp, (iw + v) * m.st[3], acc[v]);
        }
        __syncthreads();
    }
}

/* dw[c, 0, a, b] = Σ over groups, in order, of the partials (the grid's last block). */
template <int K>
__device__ void dw_filter_sum(const dw_geo &g, const double *part, int groups, const cu_t4 &dw)
{
    for (int i = threadIdx.x; i < g.c * K * K; i += blockDim.x) {
        int c = i / (K * K), t = i - c * (K * K);
        double acc = 0.0, v[8];
        int grp = 0;
        for (; grp + 8 <= groups; grp += 8) { /* eight loads in flight, added in order */
#pragma unroll
            for (int u = 0; u < 8; u++)
                v[u] = __ldcg(&part[((int64_t)(grp + u) * g.c + c) * (K * K) + t]);
#pragma unroll
            for (int u = 0; u < 8; u++)
                acc += v[u];
        }
        for (; grp < groups; grp++)
            acc += __ldcg(&part[((int64_t)grp * g.c + c) * (K * K) + t]);
        ((float *)dw.p)[c * dw.st[0] + (t / K) * dw.st[2] + (t % K) * dw.st[3]] = (float)acc;
    }
}

/* The block's K*K tap sums into part[0 .. K*K): each warp's sums by shuffles, then the
 * warps in order in double (red: K*K floats a warp of shared memory). */
template <int K>
__device__ __forceinline__ void dw_filter_partial(const float *acc, float *red, double *part)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
    for (int t = 0; t < K * K; t++) {
        float v = cu_warp_sum(acc[t]);
        if (lane == 0)
            red[warp * K * K + t] = v;
    }
    __syncthreads();
    if (threadIdx.x < K * K) {
        double v = 0.0;
        for (int i = 0; i < nw; i++)
            v += (double)red[i * K * K + threadIdx.x];
        part[threadIdx.x] = v;
    }
}

/* One strip's DW_STRIP outputs into every tap; past the row's end (wo not a multiple
 * of DW_STRIP) only the outputs that exist. */
template <int K, int S, int D, bool FULL>
__device__ __forceinline__ void dw_filter_strip(const float *r0, const float *d, int sc, int left,
                                                float *acc)
{
#pragma unroll
    for (int a = 0; a < K; a++) {
        const float *r = r0 + a * D * sc;
#pragma unroll
        for (int b = 0; b < K; b++) {
            float t = 0.0f;
#pragma unroll
            for (int v = 0; v < DW_STRIP; v++)
                if (FULL || v < left)
                    t += d[v] * r[v * S + b * D];
            acc[a * K + b] += t;
        }
    }
}

/* The staged planes' outputs, DW_STRIP side by side a thread, into acc: the taps the
 * strip's outputs share are read once. */
template <int K, int S, int D>
__device__ __forceinline__ void dw_filter_strips(const dw_geo &g, const cu_t4 &dy,
                                                 const int64_t *yb, const float *sm, int np,
                                                 float *acc)
{
    const int plane = g.sr * g.sc, strips = (g.wo + DW_STRIP - 1) / DW_STRIP;
    const int outs = g.ho * strips;
    const float inv_outs = 1.0f / (float)outs, inv_strips = 1.0f / (float)strips;
    for (int j = threadIdx.x; j < np * outs; j += blockDim.x) {
        int pi = dw_div(j, outs, inv_outs), q = j - pi * outs;
        int oh = dw_div(q, strips, inv_strips), ow = (q - oh * strips) * DW_STRIP;
        int left = g.wo - ow;
        const float *dp = (const float *)dy.p + yb[pi] + oh * dy.st[2];
        float d[DW_STRIP];
#pragma unroll
        for (int v = 0; v < DW_STRIP; v++)
            d[v] = v < left ? dp[(ow + v) * dy.st[3]] : 0.0f;
        const float *r0 = sm + pi * plane + oh * S * g.sc + ow * S;
        if (left >= DW_STRIP)
            dw_filter_strip<K, S, D, true>(r0, d, g.sc, left, acc);
        else
            dw_filter_strip<K, S, D, false>(r0, d, g.sc, left, acc);
    }
}

/* Block (channel c, group) sums dy · x over the group's samples for every tap at once,
 * into part[(group * C + c) * K*K + tap]. */
template <int K, int S, int D>
__global__ void dw_filter_kernel(dw_geo g, cu_t4 x, cu_t4 dy, cu_t4 dw, double *part,
                                 unsigned *ticket, const float *gate)
{
    extern __shared__ float sm[];
    __shared__ float red[(CU_THREADS / 32) * K * K];
    __shared__ int64_t xb[DW_MAX_PPB], yb[DW_MAX_PPB];
    if (cu_gated_off(gate))
        return;
    const int plane = g.sr * g.sc, outs = g.ho * g.wo;
    const float inv_outs = 1.0f / (float)outs, inv_wo = 1.0f / (float)g.wo;
    const int c = blockIdx.x, grp = blockIdx.y;
    const int n0 = grp * g.per_group, n1 = min(n0 + g.per_group, g.n);
    float acc[K * K];
#pragma unroll
    for (int t = 0; t < K * K; t++)
        acc[t] = 0.0f;
    for (int s0 = n0; s0 < n1; s0 += g.ppb) {
        int np = min(g.ppb, n1 - s0);
        dw_bases(xb, x, g.c, s0, np, c);
        dw_bases(yb, dy, g.c, s0, np, c);
        __syncthreads();
        dw_stage(sm, g, x, xb, g.h, g.w, np, g.relu);
        __syncthreads();
        if (D > 0)
            dw_filter_strips<K, S, D>(g, dy, yb, sm, np, acc);
        else
            for (int j = threadIdx.x; j < np * outs; j += blockDim.x) {
                int pi = dw_div(j, outs, inv_outs), q = j - pi * outs;
                int oh = dw_div(q, g.wo, inv_wo), ow = q - oh * g.wo;
                float d = ((const float *)dy.p)[yb[pi] + oh * dy.st[2] + ow * dy.st[3]];
                const float *s = sm + pi * plane + oh * S * g.sc + ow * S;
#pragma unroll
                for (int a = 0; a < K; a++)
#pragma unroll
                    for (int b = 0; b < K; b++)
                        acc[a * K + b] += d * s[a * g.dh * g.sc + b * g.dw];
            }
        __syncthreads();
    }
    dw_filter_partial<K>(acc, red, part + ((int64_t)grp * g.c + c) * (K * K));
    if (cu_last_block(ticket))
        dw_filter_sum<K>(g, part, (int)gridDim.y, dw);
}

/* The staged region of the source for pass `which`, and how many planes fit at once. */
static int dw_plan(const cu_dw_args *a, int which, dw_geo *g)
{
    int k = a->k, s = a->s;
    *g = dw_geo{};
    g->n = (int)a->n;
    g->c = (int)a->c;
    g->h = a->h;
    g->w = a->w;
    g->ho = a->ho;
    g->wo = a->wo;
    g->ph = a->ph;
    g->pw = a->pw;
    g->dh = a->dh;
    g->dw = a->dw;
    g->relu = a->relu;
    if (which == 1) { /* dy rows reached by the inputs 0 .. h-1 */
        g->r0 = floor_div(a->ph - (k - 1) * a->dh, s);
        g->c0 = floor_div(a->pw - (k - 1) * a->dw, s);
        g->sr = floor_div(a->h - 1 + a->ph, s) - g->r0 + 1;
        g->sc = floor_div(a->w - 1 + a->pw, s) - g->c0 + 1;
    } else { /* x rows read by the outputs 0 .. ho-1 */
        g->r0 = -a->ph;
        g->c0 = -a->pw;
        g->sr = (a->ho - 1) * s + (k - 1) * a->dh + 1;
        g->sc = (a->wo - 1) * s + (k - 1) * a->dw + 1;
    }
    int64_t plane_bytes = ((int64_t)g->sr * g->sc + k * k) * (int64_t)sizeof(float);
    if (plane_bytes + 2 * DW_STRIP * (int64_t)sizeof(float) > DW_SMEM_BYTES)
        return 0;
    int64_t outs = which == 1 ? (int64_t)a->h * a->w : (int64_t)a->ho * a->wo;
    int64_t fit = (DW_SMEM_BYTES - 2 * DW_STRIP * (int64_t)sizeof(float)) / plane_bytes;
    int64_t want = (DW_BLOCK_OUTPUTS + outs - 1) / outs;
    g->ppb = (int)(want < fit ? want : fit);
    g->ppb = g->ppb < DW_MAX_PPB ? g->ppb : DW_MAX_PPB;
    if (which == 2) {
        /* about DW_FILTER_OUTPUTS outputs a block, but blocks enough to fill the GPU */
        int64_t per = (DW_FILTER_OUTPUTS + outs - 1) / outs, fill = a->n * a->c / DW_FILTER_BLOCKS;
        per = per < fill ? per : fill > 1 ? fill : 1;
        g->per_group = (int)(per < a->n ? per : a->n);
        g->ppb = g->ppb < g->per_group ? g->ppb : g->per_group;
        g->items = (a->n + g->per_group - 1) / g->per_group;
    } else {
        g->items = (a->n * a->c + g->ppb - 1) / g->ppb;
    }
    return 1;
}

/* The staged planes, then (forward and data gradient) their filters; a strip past the
 * end of the last row reads up to DW_STRIP * 2 floats beyond the planes, into the
 * filters or the padding, and never stores what it computed from them. */
static size_t dw_smem(const dw_geo &g, int k, int which)
{
    size_t filters = which == 2 ? 0 : (size_t)g.ppb * k * k;
    return sizeof(float) * ((size_t)g.ppb * g.sr * g.sc + filters + 2 * DW_STRIP);
}

template <int K, int S>
static ex_status dw_launch(cu_exec *e, int which, const dw_geo &g, const cu_dw_args *a,
                           const char *name)
{
    size_t smem = dw_smem(g, K, which);
    if (which == 2) {
        void *ws = NULL;
        ex_status st = cu_scratch(e, sizeof(double) * (size_t)(g.items * g.c * K * K), &ws);
        if (st != EX_OK || e->dry)
            return st;
        dim3 grid((unsigned)g.c, (unsigned)g.items);
        int d = g.dh == g.dw && (g.dh == 1 || g.dh == 2) ? g.dh : 0;
        double *part = (double *)ws;
        if (d == 1)
            cu_launch(e, dw_filter_kernel<K, S, 1>, grid, CU_THREADS, smem, g, a->x, a->y, a->wt,
                      part, e->ticket, e->gate);
        else if (d == 2)
            cu_launch(e, dw_filter_kernel<K, S, 2>, grid, CU_THREADS, smem, g, a->x, a->y, a->wt,
                      part, e->ticket, e->gate);
        else
            cu_launch(e, dw_filter_kernel<K, S, 0>, grid, CU_THREADS, smem, g, a->x, a->y, a->wt,
                      part, e->ticket, e->gate);
        return cu_launched(e, name);
    }
    if (e->dry)
        return EX_OK;
    unsigned blocks = (unsigned)(g.items < (1 << 20) ? g.items : (1 << 20));
    int d = g.dh == g.dw && (g.dh == 1 || g.dh == 2) ? g.dh : 0; /* a strip kernel's dilation */
    if (which == 0 && d == 1)
        cu_launch(e, dw_fwd_strip_kernel<K, S, 1>, blocks, CU_THREADS, smem, g, a->x, a->wt, a->y,
                  e->gate);
    else if (which == 0 && d == 2)
        cu_launch(e, dw_fwd_strip_kernel<K, S, 2>, blocks, CU_THREADS, smem, g, a->x, a->wt, a->y,
                  e->gate);
    else if (which == 0)
        cu_launch(e, dw_fwd_kernel<K, S>, blocks, CU_THREADS, smem, g, a->x, a->wt, a->y, e->gate);
    else if (S == 1 && d == 1)
        cu_launch(e, dw_bwd_data_strip_kernel<K, 1>, blocks, CU_THREADS, smem, g, a->y, a->wt, a->x,
                  a->mask, e->gate);
    else if (S == 1 && d == 2)
        cu_launch(e, dw_bwd_data_strip_kernel<K, 2>, blocks, CU_THREADS, smem, g, a->y, a->wt, a->x,
                  a->mask, e->gate);
    else
        cu_launch(e, dw_bwd_data_kernel<K, S>, blocks, CU_THREADS, smem, g, a->y, a->wt, a->x,
                  a->mask, e->gate);
    return cu_launched(e, name);
}

template <int K>
static ex_status dw_launch_k(cu_exec *e, int which, const dw_geo &g, const cu_dw_args *a,
                             const char *name)
{
    return a->s == 1 ? dw_launch<K, 1>(e, which, g, a, name)
                     : dw_launch<K, 2>(e, which, g, a, name);
}

/* ---- stride 1, rows of up to 32 columns: warp rows (cuda.h) ----
 * An output (or, for the data gradient, an input) belongs to its column's lane: each
 * filter row is one load of the source row, and its taps come from the neighbouring
 * lanes. The taps run in the staged kernels' order, but taps outside the source are
 * skipped, as on the CPU, rather than added as zeros. */

/** The plane of this lane's (n, c) in t, c channels. */
__device__ __forceinline__ float *dw_rows_plane(const cu_t4 &t, int64_t plane, int64_t c)
{
    return (float *)t.p + plane / c * t.st[0] + plane % c * t.st[1];
}

/* Destination rows a warp computes after one round of loads (see pool.cu). */
#define DW_ROWS 4

/* Source rows t = 0 .. DW_ROWS + (K-1)*D - 1 from row `first` on, zero outside [0, h)
 * or for lanes that hold no column; relu: max(v, 0) (NaN stays). */
template <int K, int D>
__device__ __forceinline__ void dw_rows_load(float *v, const float *p, const cu_t4 &t, int first,
                                             int h, int col, bool load, bool relu)
{
#pragma unroll
    for (int i = 0; i < DW_ROWS + (K - 1) * D; i++) {
        int row = first + i;
        float x = load && row >= 0 && row < h ? p[row * t.st[2] + col * t.st[3]] : 0.0f;
        v[i] = relu && x < 0.0f ? 0.0f : x;
    }
}

/* which 0: y = x ⋆ w (x read as max(x, 0) with the fused ReLU). which 1: dx = dy ⋆ the
 * flipped w, zero where the mask x is not above 0 with the fused ReLU. D: the dilation
 * of both axes. */
template <int K, int D, int WHICH>
__global__ void dw_rows_kernel(cu_dw_args a, int seg, const float *gate)
{
    if (cu_gated_off(gate))
        return;
    cu_wrow r = cu_wrow_of(seg);
    bool on = r.plane < a.n * a.c;
    int64_t pl = on ? r.plane : 0;
    const cu_t4 &src = WHICH ? a.y : a.x, &dst = WHICH ? a.x : a.y;
    const float *sp = dw_rows_plane(src, pl, a.c);
    float *dp = dw_rows_plane(dst, pl, a.c);
    const float *mp = WHICH && a.relu ? dw_rows_plane(a.mask, pl, a.c) : NULL;
    int sh = WHICH ? a.ho : a.h, sw = WHICH ? a.wo : a.w, dh = WHICH ? a.h : a.ho,
        dw = WHICH ? a.w : a.wo;
    float wk[K * K];
    const float *wp = (const float *)a.wt.p + pl % a.c * a.wt.st[0];
#pragma unroll
    for (int t = 0; t < K * K; t++)
        wk[t] = wp[(t / K) * a.wt.st[2] + (t % K) * a.wt.st[3]];
    bool load = on && r.col < sw, store = on && r.col < dw;
    /* tap (p, q) of destination (i, j) reads source (i - ph + p D, j - pw + q D) forward,
       (i + ph - p D, j + pw - q D) for the data gradient: rows from i0 - ph, or from
       i0 + ph - (K-1) D, on; the tap's row is u + p D, or u + (K-1-p) D. A source row's
       K column shifts are taken once and go to every destination row that reads it, in
       tap order (p ascending: source rows ascending forward, descending backward). */
    const int NR = DW_ROWS + (K - 1) * D;
    bool col_ok[K];
#pragma unroll
    for (int q = 0; q < K; q++) {
        int sj = WHICH ? r.col + a.pw - q * D : r.col - a.pw + q * D;
        col_ok[q] = sj >= 0 && sj < sw;
    }
    for (int i0 = 0; i0 < dh; i0 += DW_ROWS) {
        float v[NR], acc[DW_ROWS];
        int first = WHICH ? i0 + a.ph - (K - 1) * D : i0 - a.ph;
        dw_rows_load<K, D>(v, sp, src, first, sh, r.col, load, !WHICH && a.relu);
#pragma unroll
        for (int u = 0; u < DW_ROWS; u++)
            acc[u] = 0.0f;
#pragma unroll
        for (int k = 0; k < NR; k++) {
            int t = WHICH ? NR - 1 - k : k;
            if (first + t < 0 || first + t >= sh)
                continue;
            float x[K];
#pragma unroll
            for (int q = 0; q < K; q++)
                x[q] =
                    cu_wrow_get(r, v[t], WHICH ? r.col + a.pw - q * D : r.col - a.pw + q * D, seg);
#pragma unroll
            for (int u = 0; u < DW_ROWS; u++) {
                int off = t - u; /* (K-1-p) D backward, p D forward */
                if (off < 0 || off % D != 0 || off / D >= K)
                    continue;
                int p = WHICH ? K - 1 - off / D : off / D;
#pragma unroll
                for (int q = 0; q < K; q++)
                    if (col_ok[q])
                        acc[u] += x[q] * wk[p * K + q];
            }
        }
#pragma unroll
        for (int u = 0; u < DW_ROWS; u++) {
            int i = i0 + u;
            if (!store || i >= dh)
                continue;
            float y = acc[u];
            if (mp && !(mp[i * a.mask.st[2] + r.col * a.mask.st[3]] > 0.0f))
                y = 0.0f;
            dp[i * dst.st[2] + r.col * dst.st[3]] = y;
        }
    }
}

/* The warp-row and quad filter gradients' end: block (c, grp)'s partial, and the last
 * block's ordered sum of the groups' partials into dw. */
template <int K>
__device__ __forceinline__ void dw_rows_filter_finish(const cu_dw_args &a, const float *acc,
                                                      float *red, double *part, int grp, int c,
                                                      unsigned *ticket)
{
    dw_filter_partial<K>(acc, red, part + ((int64_t)grp * a.c + c) * (K * K));
    if (cu_last_block(ticket)) {
        dw_geo g = {};
        g.c = (int)a.c;
        dw_filter_sum<K>(g, part, (int)gridDim.y, a.wt);
    }
}

/* The filter gradient: block (channel c, group) has its warps hold 32 / S samples of c
 * at once and sum dy · x for every tap in registers, then as dw_filter_kernel: warp
 * sums, the warps in order into a double partial, the last block adds the groups. */
template <int K, int D>
__global__ void dw_rows_filter_kernel(cu_dw_args a, int seg, int per, double *part,
                                      unsigned *ticket, const float *gate)
{
    __shared__ float red[(CU_THREADS / 32) * K * K];
    if (cu_gated_off(gate))
        return;
    const int c = blockIdx.x, grp = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int spw = 32 >> seg, nw = blockDim.x >> 5; /* samples a warp holds at once */
    const int64_t n1 = min((int64_t)(grp + 1) * per, a.n);
    cu_wrow r = {0, lane & ((1 << seg) - 1), lane & ~((1 << seg) - 1)};
    float acc[K * K];
#pragma unroll
    for (int t = 0; t < K * K; t++)
        acc[t] = 0.0f;
    for (int64_t s0 = (int64_t)grp * per + warp * spw; s0 < n1; s0 += nw * spw) {
        int64_t nb = s0 + (lane >> seg);
        bool on = nb < n1;
        int64_t pl = (on ? nb : 0) * a.c + c;
        const float *xp = dw_rows_plane(a.x, pl, a.c), *yp = dw_rows_plane(a.y, pl, a.c);
        bool load = on && r.col < a.w, out = on && r.col < a.wo;
        for (int i0 = 0; i0 < a.ho; i0 += DW_ROWS) {
            float v[DW_ROWS + (K - 1) * D], d[DW_ROWS];
            dw_rows_load<K, D>(v, xp, a.x, i0 - a.ph, a.h, r.col, load, a.relu);
#pragma unroll
            for (int u = 0; u < DW_ROWS; u++)
                d[u] = out && i0 + u < a.ho ? yp[(i0 + u) * a.y.st[2] + r.col * a.y.st[3]] : 0.0f;
#pragma unroll
            for (int u = 0; u < DW_ROWS; u++) {
                if (i0 + u >= a.ho)
                    break;
#pragma unroll
                for (int p = 0; p < K; p++) {
                    int si = i0 + u - a.ph + p * D;
                    if (si < 0 || si >= a.h)
                        continue;
#pragma unroll
                    for (int q = 0; q < K; q++) {
                        int sj = r.col - a.pw + q * D;
                        float x = cu_wrow_get(r, v[u + p * D], sj, seg);
                        if (out && sj >= 0 && sj < a.w)
                            acc[p * K + q] += d[u] * x;
                    }
                }
            }
        }
    }
    dw_rows_filter_finish<K>(a, acc, red, part, grp, c, ticket);
}

/** Blocks the filter gradient's grouping aims at. */
#define DW_ROWS_FILTER_BLOCKS 1024

/* ---- the filter gradient for stride 1, "same" padding, rows of 4k columns ----
 * Column quads: a thread holds four adjacent columns of a plane (one float4 of x and
 * one of dy a row), a segment of W/4 lanes (rounded up to a power of two) a plane, and
 * walks the plane's rows once. Each x row, widened by the halo HA = (K-1) D / 2 columns
 * that its neighbouring lanes hold (2 HA shuffles for four columns, not K a column),
 * meets at once the K dy rows that read it, which wait in a ring of (K-1) D + 1 rows in
 * registers: every x and dy element is loaded once, as part of a float4. */

/** Widest rows the quads take (a segment is at most a warp). */
#define DW_QUAD_MAX_W 128

/* Columns 4q - HA .. 4q + 3 + HA of an x row into xs, the halo from the neighbouring
 * lanes of the segment (2^seg lanes), zero beyond the row. */
template <int HA>
__device__ __forceinline__ void dw_quad_halo(float4 x, int q, int quads, int seg, float *xs)
{
    const float own[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
    for (int k = 0; k < HA; k++) {
        float l = __shfl_up_sync(0xffffffffu, own[4 - HA + k], 1, 1 << seg);
        float r = __shfl_down_sync(0xffffffffu, own[k], 1, 1 << seg);
        xs[k] = q > 0 ? l : 0.0f;
        xs[4 + HA + k] = q + 1 < quads ? r : 0.0f;
    }
#pragma unroll
    for (int v = 0; v < 4; v++)
        xs[HA + v] = own[v];
}

/* max(x, 0) of a row of x with the fused ReLU, as dw_rows_load: a NaN stays. */
__device__ __forceinline__ float4 dw_quad_relu(float4 x, bool relu)
{
    if (!relu)
        return x;
    return make_float4(x.x < 0.0f ? 0.0f : x.x, x.y < 0.0f ? 0.0f : x.y, x.z < 0.0f ? 0.0f : x.z,
                       x.w < 0.0f ? 0.0f : x.w);
}

/* One plane's taps into acc. Step t brings dy row t into the ring and x row t - HA,
 * which dy rows t - p D (tap row p) read; the next step's rows are loaded before this
 * one's arithmetic, so a load is always in flight. */
template <int K, int D>
__device__ __forceinline__ void dw_quad_plane(const cu_dw_args &a, const float *xp, const float *yp,
                                              bool on, int q, int quads, int seg, float *acc)
{
    const int HA = (K - 1) * D / 2, R = (K - 1) * D + 1, steps = a.h + HA;
    float4 ring[R];
#pragma unroll
    for (int u = 0; u < R; u++)
        ring[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float4 dn = cu_quad_row(yp, a.y.st[2], 0, a.h, on),
           xn = cu_quad_row(xp, a.x.st[2], -HA, a.h, on);
    for (int t0 = 0; t0 < steps; t0 += R) {
#pragma unroll
        for (int u = 0; u < R; u++) {
            const int t = t0 + u;
            if (t >= steps)
                break;
            float4 x = xn;
            ring[u] = dn;
            dn = cu_quad_row(yp, a.y.st[2], t + 1, a.h, on);
            xn = cu_quad_row(xp, a.x.st[2], t + 1 - HA, a.h, on);
            if (t < HA)
                continue;
            float xs[4 + 2 * HA];
            dw_quad_halo<HA>(dw_quad_relu(x, a.relu), q, quads, seg, xs);
#pragma unroll
            for (int p = 0; p < K; p++) {
                const float4 d = ring[(u - p * D + R) % R];
#pragma unroll
                for (int b = 0; b < K; b++) {
                    float s = acc[p * K + b];
                    s += d.x * xs[b * D];
                    s += d.y * xs[b * D + 1];
                    s += d.z * xs[b * D + 2];
                    s += d.w * xs[b * D + 3];
                    acc[p * K + b] = s;
                }
            }
        }
    }
}

/* The filter gradient on column quads: block (channel c, group) has its warps hold
 * 32 / 2^seg samples of c at once; then as dw_filter_kernel: warp sums, the warps in
 * order into a double partial, the last block adds the groups. */
/* Blocks a multiprocessor should hold: 4 for the common 3x3 (64 registers, all of the
 * grid resident at 256x64x32x32), 2 for the larger windows (few spills), 1 for 7x7. */
#define DW_QUAD_MIN_BLOCKS(K, D) ((K) == 3 && (D) == 1 ? 4 : (K) == 7 ? 1 : 2)

template <int K, int D>
__global__ void __launch_bounds__(CU_THREADS, DW_QUAD_MIN_BLOCKS(K, D))
    dw_quad_filter_kernel(cu_dw_args a, int seg, int per, double *part, unsigned *ticket,
                          const float *gate)
{
    __shared__ float red[(CU_THREADS / 32) * K * K];
    if (cu_gated_off(gate))
        return;
    const int c = blockIdx.x, grp = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int spw = 32 >> seg, nw = blockDim.x >> 5, q = lane & ((1 << seg) - 1), quads = a.w / 4;
    const int64_t n1 = min((int64_t)(grp + 1) * per, a.n);
    float acc[K * K];
#pragma unroll
    for (int t = 0; t < K * K; t++)
        acc[t] = 0.0f;
    for (int64_t s0 = (int64_t)grp * per + warp * spw; s0 < n1; s0 += nw * spw) {
        int64_t nb = s0 + (lane >> seg);
        int64_t pl = (nb < n1 ? nb : 0) * a.c + c;
        const float *xp = dw_rows_plane(a.x, pl, a.c) + 4 * q * a.x.st[3];
        const float *yp = dw_rows_plane(a.y, pl, a.c) + 4 * q * a.y.st[3];
        dw_quad_plane<K, D>(a, xp, yp, nb < n1 && q < quads, q, quads, seg, acc);
    }
    dw_rows_filter_finish<K>(a, acc, red, part, grp, c, ticket);
}

/* ---- the forward and the data gradient for stride 1, "same" padding, rows of 4k ----
 * Column quads as the filter gradient: a thread holds four adjacent columns of a plane
 * and walks the source's rows once, top down for the forward (tap row p reads x row
 * i - HA + p D) and bottom up for the data gradient (dy row i + HA - p D), so that every
 * destination row meets its source rows in tap order. A source row, widened by its halo
 * from the neighbouring lanes, is added into the K destination rows that read it, which
 * wait in a ring of (K-1) D + 1 float4 accumulators; the row that took its last tap is
 * stored (dx masked with the fused ReLU) and its slot starts the next row. */

/** Source rows whose loads a quad thread keeps in flight ahead of the row it adds. */
#define DW_QUAD_AHEAD 2

/* Adds source row ds (4 + 2 HA columns, the halo included) into the K accumulators of
 * the destination rows that read it: slot (u - p D) mod R takes tap row p. Columns
 * beyond the row (left: this lane holds the first quad, right: the last) are skipped,
 * not added as zeros, as on warp rows. */
template <int K, int D, int WHICH>
__device__ __forceinline__ void dw_quad_scatter(float4 *acc, const float *ds, const float *wk,
                                                int u, bool left, bool right)
{
    const int HA = (K - 1) * D / 2, R = (K - 1) * D + 1;
#pragma unroll
    for (int p = 0; p < K; p++) {
        float4 &c = acc[(u - p * D + R) % R];
        float s[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
        for (int v = 0; v < 4; v++)
#pragma unroll
            for (int b = 0; b < K; b++) {
                const int o = WHICH ? v + HA - b * D : v - HA + b * D; /* column 4q + o */
                if ((o < 0 && left) || (o >= 4 && right))
                    continue;
                s[v] += ds[o + HA] * wk[p * K + b];
            }
        c = make_float4(s[0], s[1], s[2], s[3]);
    }
}

/* A dx row as stored: with the fused ReLU, 0 where the mask m (x) is not above 0 (NaN
 * included, as dw_masked). */
__device__ __forceinline__ float4 dw_quad_masked(float4 v, float4 m, bool relu)
{
    if (!relu)
        return v;
    return make_float4(m.x > 0.0f ? v.x : 0.0f, m.y > 0.0f ? v.y : 0.0f, m.z > 0.0f ? v.z : 0.0f,
                       m.w > 0.0f ? v.w : 0.0f);
}

/* One plane. Step t adds source row s (t, or h - 1 - t for the data gradient; none once
 * t >= h) and completes destination row s -+ HA (from step HA on); the loads of the rows
 * DW_QUAD_AHEAD steps on are issued before this step's arithmetic. */
template <int K, int D, int WHICH, bool RELU>
__device__ __forceinline__ void dw_quad_conv_plane(const cu_dw_args &a, const float *sp,
                                                   const float *mp, float *dp, const float *wk,
                                                   bool on, int q, int quads, int seg)
{
    const int HA = (K - 1) * D / 2, R = (K - 1) * D + 1, steps = a.h + HA, h = a.h;
    const int dir = WHICH ? -1 : 1, s0 = WHICH ? h - 1 : 0;
    const int64_t src_sr = WHICH ? a.y.st[2] : a.x.st[2], dst_sr = WHICH ? a.x.st[2] : a.y.st[2];
    const bool left = q == 0, right = q + 1 == quads, mon = WHICH && RELU && on;
    float4 acc[R], sn[DW_QUAD_AHEAD], mn[DW_QUAD_AHEAD];
#pragma unroll
    for (int u = 0; u < R; u++)
        acc[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int k = 0; k < DW_QUAD_AHEAD; k++) {
        sn[k] = cu_quad_row(sp, src_sr, s0 + dir * k, h, on);
        mn[k] = cu_quad_row(mp, a.mask.st[2], s0 + dir * k + HA, h, mon);
    }
    for (int t0 = 0; t0 < steps; t0 += R) {
#pragma unroll
        for (int u = 0; u < R; u++) {
            const int t = t0 + u, s = s0 + dir * t;
            if (t >= steps)
                break;
            const float4 x = sn[0], m = mn[0];
#pragma unroll
            for (int k = 0; k + 1 < DW_QUAD_AHEAD; k++) {
                sn[k] = sn[k + 1];
                mn[k] = mn[k + 1];
            }
            sn[DW_QUAD_AHEAD - 1] = cu_quad_row(sp, src_sr, s + dir * DW_QUAD_AHEAD, h, on);
            mn[DW_QUAD_AHEAD - 1] = cu_quad_row(mp, a.mask.st[2], s - DW_QUAD_AHEAD + HA, h, mon);
            if (t < h) { /* the same for the whole warp: the shuffles see every lane */
                float xs[4 + 2 * HA];
                dw_quad_halo<HA>(dw_quad_relu(x, !WHICH && RELU), q, quads, seg, xs);
                dw_quad_scatter<K, D, WHICH>(acc, xs, wk, u, left, right);
            }
            float4 &c = acc[(u + 1) % R]; /* destination row s - dir HA took tap row K - 1 */
            if (on && t >= HA)            /* below HA the row lies past the plane */
                *(float4 *)(dp + (s - dir * HA) * dst_sr) = dw_quad_masked(c, m, WHICH && RELU);
            c = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    }
}

/* The forward (WHICH 0) or data gradient (1) on column quads: a segment of 2^seg lanes a
 * plane, as warp rows. The mask's rows cost the 3x3 data gradient its fourth block (it
 * would spill at 64 registers). */
template <int K, int D, int WHICH, bool RELU>
__global__ void
__launch_bounds__(CU_THREADS, (WHICH && RELU && K == 3 && D == 1) ? 3 : DW_QUAD_MIN_BLOCKS(K, D))
    dw_quad_conv_kernel(cu_dw_args a, int seg, const float *gate)
{
    if (cu_gated_off(gate))
        return;
    cu_wrow r = cu_wrow_of(seg);
    const int quads = a.w / 4;
    bool on = r.plane < a.n * a.c && r.col < quads;
    int64_t pl = r.plane < a.n * a.c ? r.plane : 0;
    float wk[K * K];
    const float *wp = (const float *)a.wt.p + pl % a.c * a.wt.st[0];
#pragma unroll
    for (int t = 0; t < K * K; t++)
        wk[t] = wp[(t / K) * a.wt.st[2] + (t % K) * a.wt.st[3]];
    const float *sp = dw_rows_plane(WHICH ? a.y : a.x, pl, a.c) + 4 * r.col;
    const float *mp = WHICH && RELU ? dw_rows_plane(a.mask, pl, a.c) + 4 * r.col : NULL;
    float *dp = dw_rows_plane(WHICH ? a.x : a.y, pl, a.c) + 4 * r.col;
    dw_quad_conv_plane<K, D, WHICH, RELU>(a, sp, mp, dp, wk, on, r.col, quads, seg);
}

/* The samples each filter-gradient block takes (a multiple of step, the samples a
 * block holds at once) and the groups that makes, about DW_ROWS_FILTER_BLOCKS blocks. */
static void dw_filter_groups(const cu_dw_args *a, int64_t step, int64_t *per, int64_t *groups)
{
    int64_t g = (DW_ROWS_FILTER_BLOCKS + a->c - 1) / a->c;
    int64_t p = (a->n + g - 1) / g;
    p = p < 1 ? step : (p + step - 1) / step * step;
    *per = p;
    *groups = a->n > 0 ? (a->n + p - 1) / p : 1;
}

/* A filter-gradient kernel (warp rows or quads): block (channel, group of samples, in
 * steps of those a block holds at once), the groups' partials in scratch. */
template <int K>
static ex_status dw_rows_filter_launch(cu_exec *e, const cu_dw_args *a, int seg,
                                       void (*k)(cu_dw_args, int, int, double *, unsigned *,
                                                 const float *),
                                       const char *name)
{
    int64_t per, groups;
    dw_filter_groups(a, (int64_t)(CU_THREADS / 32) << (5 - seg), &per, &groups);
    void *ws = NULL;
    ex_status st = cu_scratch(e, sizeof(double) * (size_t)(groups * a->c * K * K), &ws);
    if (st != EX_OK || e->dry)
        return st;
    cu_launch(e, k, dim3((unsigned)a->c, (unsigned)groups), CU_THREADS, 0, *a, seg, (int)per,
              (double *)ws, e->ticket, e->gate);
    return cu_launched(e, name);
}

template <int K, int D, int WHICH>
static ex_status dw_quad_launch_conv(cu_exec *e, const cu_dw_args *a, int seg, const char *name)
{
    if (e->dry)
        return EX_OK;
    unsigned b = cu_wrow_blocks(a->n * a->c, seg);
    if (a->relu) /* the ReLU's loads and registers only where it is fused */
        cu_launch(e, dw_quad_conv_kernel<K, D, WHICH, true>, b, CU_THREADS, 0, *a, seg, e->gate);
    else
        cu_launch(e, dw_quad_conv_kernel<K, D, WHICH, false>, b, CU_THREADS, 0, *a, seg, e->gate);
    return cu_launched(e, name);
}

template <int K, int D>
static ex_status dw_quad_pass(cu_exec *e, int which, const cu_dw_args *a, int seg, const char *name)
{
    return which == 2   ? dw_rows_filter_launch<K>(e, a, seg, dw_quad_filter_kernel<K, D>, name)
           : which == 1 ? dw_quad_launch_conv<K, D, 1>(e, a, seg, name)
                        : dw_quad_launch_conv<K, D, 0>(e, a, seg, name);
}

/* Runs pass which on column quads when they apply: stride 1, equal dilations D of 1 or
 * 2, "same" padding of at most 4, rows of 4k columns up to DW_QUAD_MAX_W that are runs
 * of float4s in x and dy (and the mask). */
static int dw_quad(cu_exec *e, int which, const cu_dw_args *a, const char *name, ex_status *st)
{
    int d = a->dh, ha = (a->k - 1) * d / 2;
    if (a->s != 1 || a->dw != d || (d != 1 && d != 2) || ha > 4 || a->ph != ha || a->pw != ha ||
        a->ho != a->h || a->wo != a->w || a->w % 4 != 0 || a->w < 4 || a->w > DW_QUAD_MAX_W ||
        a->n > 0x3fffffff || a->c > 65535 || !cu_quad_rows(a->x) || !cu_quad_rows(a->y) ||
        (which == 1 && a->relu && !cu_quad_rows(a->mask)) ||
        (which != 2 && cu_wrow_blocks(a->n * a->c, cu_wrow_seg(a->w / 4)) > 0x7fffffffu))
        return 0;
    int seg = cu_wrow_seg(a->w / 4);
    if (a->k == 3 && d == 1)
        *st = dw_quad_pass<3, 1>(e, which, a, seg, name);
    else if (a->k == 3)
        *st = dw_quad_pass<3, 2>(e, which, a, seg, name);
    else if (a->k == 5 && d == 1)
        *st = dw_quad_pass<5, 1>(e, which, a, seg, name);
    else if (a->k == 5)
        *st = dw_quad_pass<5, 2>(e, which, a, seg, name);
    else if (a->k == 7 && d == 1)
        *st = dw_quad_pass<7, 1>(e, which, a, seg, name);
    else
        return 0;
    return 1;
}

template <int K, int D>
static ex_status dw_rows_launch(cu_exec *e, int which, const cu_dw_args *a, int seg,
                                const char *name)
{
    if (which == 2)
        return dw_rows_filter_launch<K>(e, a, seg, dw_rows_filter_kernel<K, D>, name);
    if (e->dry)
        return EX_OK;
    unsigned b = cu_wrow_blocks(a->n * a->c, seg);
    if (which == 0)
        cu_launch(e, dw_rows_kernel<K, D, 0>, b, CU_THREADS, 0, *a, seg, e->gate);
    else
        cu_launch(e, dw_rows_kernel<K, D, 1>, b, CU_THREADS, 0, *a, seg, e->gate);
    return cu_launched(e, name);
}

template <int K>
static ex_status dw_rows_launch_d(cu_exec *e, int which, const cu_dw_args *a, int seg,
                                  const char *name)
{
    return a->dh == 1 ? dw_rows_launch<K, 1>(e, which, a, seg, name)
                      : dw_rows_launch<K, 2>(e, which, a, seg, name);
}

/* Runs pass which on warp rows when they apply (stride 1, rows up to 32 wide, equal
 * dilations of 1 or 2). */
static int dw_rows(cu_exec *e, int which, const cu_dw_args *a, const char *name, ex_status *st)
{
    int seg = cu_wrow_seg(a->w > a->wo ? a->w : a->wo);
    if (a->s != 1 || seg < 0 || (a->k != 3 && a->k != 5 && a->k != 7) || a->dh != a->dw ||
        (a->dh != 1 && a->dh != 2) || a->n > 0x3fffffff || a->c > 65535 ||
        cu_wrow_blocks(a->n * a->c, seg) > 0x7fffffffu)
        return 0;
    *st = a->k == 3   ? dw_rows_launch_d<3>(e, which, a, seg, name)
          : a->k == 5 ? dw_rows_launch_d<5>(e, which, a, seg, name)
                      : dw_rows_launch_d<7>(e, which, a, seg, name);
    return 1;
}

int cu_dw_staged(cu_exec *e, int which, const cu_dw_args *a, const char *name, ex_status *st)
{
    if (dw_quad(e, which, a, name, st))
        return 1;
    if (dw_rows(e, which, a, name, st))
        return 1;
    dw_geo g;
    if ((a->k != 3 && a->k != 5 && a->k != 7) || (a->s != 1 && a->s != 2) || a->n > 65535 ||
        a->c > 65535 || !dw_plan(a, which, &g))
        return 0;
    *st = a->k == 3   ? dw_launch_k<3>(e, which, g, a, name)
          : a->k == 5 ? dw_launch_k<5>(e, which, g, a, name)
                      : dw_launch_k<7>(e, which, g, a, name);
    return 1;
}
