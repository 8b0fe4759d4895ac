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

/* Copies np planes of src (origins in base) into dst with zeros outside the plane. */
__device__ __forceinline__ void dw_stage(float *dst, const dw_geo &g, const cu_t4 &src,
                                         const int64_t *base, int src_h, int src_w, int np)
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
        dst[i] = v;
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
        dw_stage(sm, g, x, xb, g.h, g.w, np);
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

/* dx[n, c, ih, iw] = Σ over the taps (a, b) whose window position (ih + ph - a*dh)/S,
 * (iw + pw - b*dw)/S is whole and inside dy, of dy there · w[c, a, b]. The staged dy
 * starts at row r0 and column c0 (multiples of S below the lowest position reached),
 * so t - S*r0 is never negative and its parity is t's. */
template <int K, int S>
__global__ void dw_bwd_data_kernel(dw_geo g, cu_t4 dy, cu_t4 w, cu_t4 dx, const float *gate)
{
    extern __shared__ float sm[];
    __shared__ int64_t yb[DW_MAX_PPB], xb[DW_MAX_PPB];
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
        dw_stage_filter<K>(sw, g, w, p0, np);
        __syncthreads();
        dw_stage(sm, g, dy, yb, g.ho, g.wo, np);
        __syncthreads();
        for (int j = threadIdx.x; j < np * outs; j += blockDim.x) {
            int pi = dw_div(j, outs, inv_outs), q = j - pi * outs;
            int ih = dw_div(q, g.w, inv_w), iw = q - ih * g.w;
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
            ((float *)dx.p)[xb[pi] + ih * dx.st[2] + iw * dx.st[3]] = acc;
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
        dw_stage(sm, g, x, xb, g.h, g.w, np);
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
__global__ void dw_bwd_data_strip_kernel(dw_geo g, cu_t4 dy, cu_t4 w, cu_t4 dx, const float *gate)
{
    extern __shared__ float sm[];
    __shared__ int64_t yb[DW_MAX_PPB], xb[DW_MAX_PPB];
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
        dw_stage_filter<K>(sw, g, w, p0, np);
        __syncthreads();
        dw_stage(sm, g, dy, yb, g.ho, g.wo, np);
        __syncthreads();
        for (int j = threadIdx.x; j < np * outs; j += blockDim.x) {
            int pi = dw_div(j, outs, inv_outs), q = j - pi * outs;
            int ih = dw_div(q, strips, inv_strips), iw = (q - ih * strips) * DW_STRIP;
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
                    xp[(iw + v) * dx.st[3]] = acc[v];
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
        double acc = 0.0;
        for (int grp = 0; grp < groups; grp++)
            acc += __ldcg(&part[((int64_t)grp * g.c + c) * (K * K) + t]);
        ((float *)dw.p)[c * dw.st[0] + (t / K) * dw.st[2] + (t % K) * dw.st[3]] = (float)acc;
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
        dw_stage(sm, g, x, xb, g.h, g.w, np);
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
        part[((int64_t)grp * g.c + c) * (K * K) + threadIdx.x] = v;
    }
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
            dw_filter_kernel<K, S, 1><<<grid, CU_THREADS, smem, e->stream>>>(
                g, a->x, a->y, a->wt, part, e->ticket, e->gate);
        else if (d == 2)
            dw_filter_kernel<K, S, 2><<<grid, CU_THREADS, smem, e->stream>>>(
                g, a->x, a->y, a->wt, part, e->ticket, e->gate);
        else
            dw_filter_kernel<K, S, 0><<<grid, CU_THREADS, smem, e->stream>>>(
                g, a->x, a->y, a->wt, part, e->ticket, e->gate);
        return cu_launched(e, name);
    }
    if (e->dry)
        return EX_OK;
    unsigned blocks = (unsigned)(g.items < (1 << 20) ? g.items : (1 << 20));
    int d = g.dh == g.dw && (g.dh == 1 || g.dh == 2) ? g.dh : 0; /* a strip kernel's dilation */
    cudaStream_t st = e->stream;
    if (which == 0 && d == 1)
        dw_fwd_strip_kernel<K, S, 1>
            <<<blocks, CU_THREADS, smem, st>>>(g, a->x, a->wt, a->y, e->gate);
    else if (which == 0 && d == 2)
        dw_fwd_strip_kernel<K, S, 2>
            <<<blocks, CU_THREADS, smem, st>>>(g, a->x, a->wt, a->y, e->gate);
    else if (which == 0)
        dw_fwd_kernel<K, S><<<blocks, CU_THREADS, smem, st>>>(g, a->x, a->wt, a->y, e->gate);
    else if (S == 1 && d == 1)
        dw_bwd_data_strip_kernel<K, 1>
            <<<blocks, CU_THREADS, smem, st>>>(g, a->y, a->wt, a->x, e->gate);
    else if (S == 1 && d == 2)
        dw_bwd_data_strip_kernel<K, 2>
            <<<blocks, CU_THREADS, smem, st>>>(g, a->y, a->wt, a->x, e->gate);
    else
        dw_bwd_data_kernel<K, S><<<blocks, CU_THREADS, smem, st>>>(g, a->y, a->wt, a->x, e->gate);
    return cu_launched(e, name);
}

template <int K>
static ex_status dw_launch_k(cu_exec *e, int which, const dw_geo &g, const cu_dw_args *a,
                             const char *name)
{
    return a->s == 1 ? dw_launch<K, 1>(e, which, g, a, name)
                     : dw_launch<K, 2>(e, which, g, a, name);
}

int cu_dw_staged(cu_exec *e, int which, const cu_dw_args *a, const char *name, ex_status *st)
{
    dw_geo g;
    if ((a->k != 3 && a->k != 5 && a->k != 7) || (a->s != 1 && a->s != 2) || a->n > 65535 ||
        a->c > 65535 || !dw_plan(a, which, &g))
        return 0;
    *st = a->k == 3   ? dw_launch_k<3>(e, which, g, a, name)
          : a->k == 5 ? dw_launch_k<5>(e, which, g, a, name)
                      : dw_launch_k<7>(e, which, g, a, name);
    return 1;
}
