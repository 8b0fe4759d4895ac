/* Dense and depthwise 2-D convolution, forward and both backward passes, as direct
 * kernels (dense convolution only appears in stems and factorized reductions, where the
 * channel counts are small; a direct kernel also honours every stride of every operand).
 *
 * Forward and backward-data give each output element to one thread, which sums its taps
 * in a fixed order; blocks work on one (n, c) plane at a time, so the index arithmetic
 * inside a plane is 32-bit, and the 3x3, 5x5 and 7x7 depthwise filters are unrolled.
 * Backward-filter gives each filter tap to one block, which sums over (n, oh, ow) in
 * double with a fixed tree; a square depthwise filter instead has each block walk one
 * channel of a group of samples once for all taps, and a second kernel adds the groups'
 * partials in order. No atomics, so results are repeatable. */
#include "cuda/cuda.h"

/** The window of a convolution, decoded in core (core/tdesc.h). */
typedef ex_td_conv_geom conv_geom;

/** The operands in their roles: x input, w filter, y output, whichever is the node's dst;
 *  and the fused ReLU's mask source (the data gradient's input x). */
typedef struct conv_ops {
    conv_geom g;
    cu_t4 x, w, y, mask;
} conv_ops;

/* Checks the node (ex_td_conv_of) and reads its operands in their roles. */
static ex_status conv_prepare(cu_exec *e, const ex_node_exec *nd, const char *name, conv_ops *o)
{
    ex_td_conv c;
    char why[320];
    ex_status st = ex_td_conv_of(nd, &c, why, sizeof why);
    if (st != EX_OK)
        return cu_fail(e, st, "%s: %s", name, why);
    o->g = c.g;
    o->x = cu_t4_of(c.x);
    o->w = cu_t4_of(c.w);
    o->y = cu_t4_of(c.y);
    if (c.mask)
        o->mask = cu_t4_of(c.mask);
    return EX_OK;
}

__device__ __forceinline__ float *ptr4(const cu_t4 &t, int64_t a, int64_t b, int64_t c, int64_t d)
{
    return (float *)t.p + a * t.st[0] + b * t.st[1] + c * t.st[2] + d * t.st[3];
}

/** The output index that input i meets through filter tap k, or -1 when none does. */
__device__ __forceinline__ int conv_src(int i, int k, int s, int p, int d, int out)
{
    int t = i + p - k * d;
    if (t < 0 || t % s != 0 || t / s >= out)
        return -1;
    return t / s;
}

/** The in-plane geometry in 32 bits (conv_fits checked it), and the plane counts. */
typedef struct conv_g32 {
    int h, w, ho, wo, kh, kw, sh, sw, ph, pw, dh, dw;
    int64_t n, ci, co;
    int depthwise;
    int relu; /**< read max(x, 0); the data gradient masks dx by x > 0 */
} conv_g32;

/** An input element as the convolution reads it: max(v, 0) with the fused ReLU. */
__device__ __forceinline__ float conv_in(const conv_g32 &g, float v)
{
    return g.relu && v < 0.0f ? 0.0f : v;
}

static int conv_fits(const conv_geom *g)
{
    const int64_t lim = (int64_t)1 << 30;
    return g->h * g->w < lim && g->ho * g->wo < lim && g->kh * g->kw < lim && g->ph < lim &&
           g->pw < lim && g->dh * g->kh < lim && g->dw * g->kw < lim;
}

static conv_g32 conv_g32_of(const conv_geom *g)
{
    conv_g32 r = {(int)g->h,  (int)g->w,  (int)g->ho, (int)g->wo,   (int)g->kh, (int)g->kw,
                  (int)g->sh, (int)g->sw, (int)g->ph, (int)g->pw,   (int)g->dh, (int)g->dw,
                  g->n,       g->ci,      g->co,      g->depthwise, g->relu};
    return r;
}

/* y[n, co, oh, ow] = Σ_ci,kh,kw x · w (depthwise: ci = co, filter channel 0). K > 0: a
 * square K x K filter known at compile time. */
template <int K>
__global__ void conv_fwd_kernel(conv_g32 g, cu_t4 x, cu_t4 w, cu_t4 y, const float *gate)
{
    if (cu_gated_off(gate))
        return;
    const int kh = K ? K : g.kh, kw = K ? K : g.kw;
    CU_PLANE_LOOP(g.n * g.co)
    {
        int64_t nb = plane / g.co, co = plane % g.co;
        int64_t c0 = g.depthwise ? co : 0, c1 = g.depthwise ? co + 1 : g.ci;
        float *yp = (float *)y.p + nb * y.st[0] + co * y.st[1];
        CU_POS_LOOP(p, g.ho * g.wo)
        {
            int oh = p / g.wo, ow = p % g.wo;
            float acc = 0.0f;
            for (int64_t ci = c0; ci < c1; ci++) {
                const float *xp = (const float *)x.p + nb * x.st[0] + ci * x.st[1];
                const float *wp =
                    (const float *)w.p + co * w.st[0] + (g.depthwise ? 0 : ci) * w.st[1];
#pragma unroll
                for (int a = 0; a < kh; a++) {
                    int ih = oh * g.sh - g.ph + a * g.dh;
                    if (ih < 0 || ih >= g.h)
                        continue;
#pragma unroll
                    for (int b = 0; b < kw; b++) {
                        int iw = ow * g.sw - g.pw + b * g.dw;
                        if (iw >= 0 && iw < g.w)
                            acc += conv_in(g, xp[ih * x.st[2] + iw * x.st[3]]) *
                                   wp[a * w.st[2] + b * w.st[3]];
                    }
                }
            }
            yp[oh * y.st[2] + ow * y.st[3]] = acc;
        }
    }
}

/* dx[n, ci, ih, iw] = Σ_co,kh,kw dy · w over the outputs that read (ih, iw); with the
 * fused ReLU 0 where the input m is not above 0. */
template <int K>
__global__ void conv_bwd_data_kernel(conv_g32 g, cu_t4 dy, cu_t4 w, cu_t4 dx, cu_t4 m,
                                     const float *gate)
{
    if (cu_gated_off(gate))
        return;
    const int kh = K ? K : g.kh, kw = K ? K : g.kw;
    CU_PLANE_LOOP(g.n * g.ci)
    {
        int64_t nb = plane / g.ci, ci = plane % g.ci;
        int64_t c0 = g.depthwise ? ci : 0, c1 = g.depthwise ? ci + 1 : g.co;
        float *xp = (float *)dx.p + nb * dx.st[0] + ci * dx.st[1];
        const float *mp = g.relu ? (const float *)m.p + nb * m.st[0] + ci * m.st[1] : NULL;
        CU_POS_LOOP(p, g.h * g.w)
        {
            int ih = p / g.w, iw = p % g.w;
            float acc = 0.0f;
            for (int64_t co = c0; co < c1; co++) {
                const float *dp = (const float *)dy.p + nb * dy.st[0] + co * dy.st[1];
                const float *wp =
                    (const float *)w.p + co * w.st[0] + (g.depthwise ? 0 : ci) * w.st[1];
#pragma unroll
                for (int a = 0; a < kh; a++) {
                    int oh = conv_src(ih, a, g.sh, g.ph, g.dh, g.ho);
                    if (oh < 0)
                        continue;
#pragma unroll
                    for (int b = 0; b < kw; b++) {
                        int ow = conv_src(iw, b, g.sw, g.pw, g.dw, g.wo);
                        if (ow >= 0)
                            acc +=
                                dp[oh * dy.st[2] + ow * dy.st[3]] * wp[a * w.st[2] + b * w.st[3]];
                    }
                }
            }
            if (mp && !(mp[ih * m.st[2] + iw * m.st[3]] > 0.0f))
                acc = 0.0f;
            xp[ih * dx.st[2] + iw * dx.st[3]] = acc;
        }
    }
}

/* Block b computes filter tap b = (co, wc, kh, kw): Σ over (n, oh, ow) of dy · x in
 * double, each thread's share in order, then a fixed tree. */
__global__ void conv_bwd_filter_kernel(conv_g32 g, cu_t4 x, cu_t4 dy, cu_t4 dw, const float *gate)
{
    __shared__ double sh[32];
    if (cu_gated_off(gate))
        return;
    int64_t cin = g.depthwise ? 1 : g.ci, b = blockIdx.x;
    int kw = (int)(b % g.kw), kh = (int)(b / g.kw % g.kh);
    int64_t wc = b / (g.kw * g.kh) % cin, co = b / (g.kw * g.kh * cin);
    int64_t ci = g.depthwise ? co : wc;
    double acc = 0.0;
    for (int64_t nb = 0; nb < g.n; nb++) {
        const float *xp = (const float *)x.p + nb * x.st[0] + ci * x.st[1];
        const float *dp = (const float *)dy.p + nb * dy.st[0] + co * dy.st[1];
        for (int q = threadIdx.x; q < g.ho * g.wo; q += blockDim.x) {
            int oh = q / g.wo, ow = q % g.wo;
            int ih = oh * g.sh - g.ph + kh * g.dh, iw = ow * g.sw - g.pw + kw * g.dw;
            if (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w)
                acc += (double)dp[oh * dy.st[2] + ow * dy.st[3]] *
                       conv_in(g, xp[ih * x.st[2] + iw * x.st[3]]);
        }
    }
    acc = cu_block_sum(acc, sh);
    if (threadIdx.x == 0)
        *ptr4(dw, co, wc, kh, kw) = (float)acc;
}

/* Depthwise filter gradient for a K x K filter: block (c, group) walks the positions of
 * its group of samples once, every thread keeping all K*K taps, and reduces each tap with
 * a fixed tree into part[(group * C + c) * K*K + tap]. */
template <int K>
__global__ void dw_filter_part_kernel(conv_g32 g, cu_t4 x, cu_t4 dy, int64_t per_group,
                                      double *part, const float *gate)
{
    __shared__ double sh[32];
    if (cu_gated_off(gate))
        return;
    int64_t c = blockIdx.x, grp = blockIdx.y, n0 = grp * per_group;
    int64_t n1 = n0 + per_group < g.n ? n0 + per_group : g.n;
    float acc[K * K];
#pragma unroll
    for (int t = 0; t < K * K; t++)
        acc[t] = 0.0f;
    for (int64_t nb = n0; nb < n1; nb++) {
        const float *xp = (const float *)x.p + nb * x.st[0] + c * x.st[1];
        const float *dp = (const float *)dy.p + nb * dy.st[0] + c * dy.st[1];
        for (int q = threadIdx.x; q < g.ho * g.wo; q += blockDim.x) {
            int oh = q / g.wo, ow = q % g.wo;
            float d = dp[oh * dy.st[2] + ow * dy.st[3]];
#pragma unroll
            for (int a = 0; a < K; a++) {
                int ih = oh * g.sh - g.ph + a * g.dh;
                bool hin = ih >= 0 && ih < g.h;
#pragma unroll
                for (int b = 0; b < K; b++) {
                    int iw = ow * g.sw - g.pw + b * g.dw;
                    if (hin && iw >= 0 && iw < g.w)
                        acc[a * K + b] += d * conv_in(g, xp[ih * x.st[2] + iw * x.st[3]]);
                }
            }
        }
    }
#pragma unroll
    for (int t = 0; t < K * K; t++) {
        double v = cu_block_sum((double)acc[t], sh);
        if (threadIdx.x == 0)
            part[(grp * g.ci + c) * (K * K) + t] = v;
    }
}

/* dw[c, 0, kh, kw] = Σ over groups, in order, of the partials. */
__global__ void dw_filter_sum_kernel(conv_g32 g, const double *part, int64_t groups, cu_t4 dw,
                                     const float *gate)
{
    if (cu_gated_off(gate))
        return;
    int64_t kk = (int64_t)g.kh * g.kw;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < g.ci * kk;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t c = i / kk, t = i % kk;
        double acc = 0.0;
        for (int64_t grp = 0; grp < groups; grp++)
            acc += part[(grp * g.ci + c) * kk + t];
        *ptr4(dw, c, 0, t / g.kw, t % g.kw) = (float)acc;
    }
}

/* The compile-time filter size of a square depthwise filter, or 0. */
static int conv_k(const conv_geom *g)
{
    if (!g->depthwise || g->kh != g->kw)
        return 0;
    return g->kh == 3 || g->kh == 5 || g->kh == 7 ? (int)g->kh : 0;
}

template <int K> static void conv_launch(cu_exec *e, int which, const conv_g32 &g, conv_ops *o)
{
    if (which == 0)
        cu_launch(e, conv_fwd_kernel<K>, cu_plane_grid(g.n * g.co, (int64_t)g.ho * g.wo),
                  CU_THREADS, 0, g, o->x, o->w, o->y, e->gate);
    else
        cu_launch(e, conv_bwd_data_kernel<K>, cu_plane_grid(g.n * g.ci, (int64_t)g.h * g.w),
                  CU_THREADS, 0, g, o->y, o->w, o->x, o->mask, e->gate);
}

/* The depthwise filter gradient through per-group partials; groups so that there are
 * about 512 blocks (a shape-only choice, so the sums are repeatable). */
template <int K>
static ex_status dw_filter_launch(cu_exec *e, const conv_g32 &g, conv_ops *o, const char *name)
{
    int64_t per_group = g.n * g.ci / 512 > 1 ? g.n * g.ci / 512 : 1;
    int64_t groups = (g.n + per_group - 1) / per_group;
    void *ws = NULL;
    ex_status st = cu_scratch(e, sizeof(double) * (size_t)(groups * g.ci * K * K), &ws);
    if (st != EX_OK || e->dry)
        return st;
    cu_launch(e, dw_filter_part_kernel<K>, dim3((unsigned)g.ci, (unsigned)groups), CU_THREADS, 0, g,
              o->x, o->y, per_group, (double *)ws, e->gate);
    cu_launch(e, dw_filter_sum_kernel, cu_blocks(g.ci * K * K, CU_THREADS), CU_THREADS, 0, g,
              (const double *)ws, groups, o->w, e->gate);
    return cu_launched(e, name);
}

static ex_status conv_run(cu_exec *e, const ex_node_exec *nd, int which, int depthwise,
                          const char *name)
{
    conv_ops o = {};
    ex_status st = conv_prepare(e, nd, name, &o);
    if (st != EX_OK)
        return st;
    if (!conv_fits(&o.g))
        return cu_fail(e, EX_ERR_UNSUPPORTED, "%s: planes of 2^30 elements or more", name);
    conv_g32 g = conv_g32_of(&o.g);
    int k = conv_k(&o.g);
    if (k && g.sh == g.sw) {
        cu_dw_args a = {g.n,  g.ci, g.h,  g.w, g.ho, g.wo, k,      g.sh,  g.ph,
                        g.pw, g.dh, g.dw, o.x, o.w,  o.y,  g.relu, o.mask};
        ex_status st2 = EX_OK;
        if (cu_dw_staged(e, which, &a, name, &st2))
            return st2;
    }
    if (which == 2 && k && g.ci <= 65535 && g.n <= 65535) {
        if (k == 3)
            return dw_filter_launch<3>(e, g, &o, name);
        return k == 5 ? dw_filter_launch<5>(e, g, &o, name) : dw_filter_launch<7>(e, g, &o, name);
    }
    if (e->dry)
        return EX_OK;
    if (which == 2) {
        int64_t taps = g.co * (depthwise ? 1 : g.ci) * g.kh * g.kw;
        if (taps > 0x7fffffff)
            return cu_fail(e, EX_ERR_UNSUPPORTED, "%s: %lld filter taps exceed the grid", name,
                           (long long)taps);
        cu_launch(e, conv_bwd_filter_kernel, (unsigned)taps, CU_THREADS, 0, g, o.x, o.y, o.w,
                  e->gate);
    } else if (k == 3) {
        conv_launch<3>(e, which, g, &o);
    } else if (k == 5) {
        conv_launch<5>(e, which, g, &o);
    } else if (k == 7) {
        conv_launch<7>(e, which, g, &o);
    } else {
        conv_launch<0>(e, which, g, &o);
    }
    return cu_launched(e, name);
}

CU_OP(conv2d)
{
    return conv_run(e, n, 0, 0, "conv2d");
}

CU_OP(conv2d_bwd_data)
{
    return conv_run(e, n, 1, 0, "conv2d_bwd_data");
}

CU_OP(conv2d_bwd_filter)
{
    return conv_run(e, n, 2, 0, "conv2d_bwd_filter");
}

CU_OP(dwconv2d)
{
    return conv_run(e, n, 0, 1, "dwconv2d");
}

CU_OP(dwconv2d_bwd_data)
{
    return conv_run(e, n, 1, 1, "dwconv2d_bwd_data");
}

CU_OP(dwconv2d_bwd_filter)
{
    return conv_run(e, n, 2, 1, "dwconv2d_bwd_filter");
}
