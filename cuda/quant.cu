/* The quantized inference ops (docs/ops.md, "Quantized inference"): QUANTIZE,
 * DEQUANTIZE, REQUANTIZE, QADD, QCONCAT, QCONV2D, QDWCONV2D, QPWCONV, QLINEAR, QRELU,
 * QMAX_POOL, QAVG_POOL and QGLOBAL_AVG_POOL.
 *
 * Every result must match cpu/quant.c bit for bit. Integer sums are exact, so their order
 * is free; the f32 arithmetic is one rounding per product or sum, so every product and sum
 * goes through __fmul_rn / __fadd_rn, which nvcc never contracts into a multiply-add (its
 * default -fmad=true would fuse a plain a * b + c, and the CPU rounds twice).
 *
 * Element-wise ops walk rows, a thread taking a few elements of one; pools and the
 * depthwise convolution give each output to one thread. The dense convolution (as an
 * implicit GEMM), the pointwise convolution and the linear op share one tiled integer
 * GEMM: tiles staged in shared memory with four consecutive k values packed into an int,
 * multiplied by __dp4a. The convolutions' fused requantize (i8 out) is REQUANTIZE's
 * arithmetic (q_requant) in their store, so the int32 sums never go through memory. */
#include <stdio.h>
#include <string.h>

#include "cuda/cuda.h"

/* ---- shared host checks ---- */

static const char *q_name(const ex_node_exec *n)
{
    return ex_op_name(n->op);
}

static ex_status q_need(cu_exec *e, const ex_node_exec *n, int nsrc)
{
    if (n->nsrc != nsrc || n->src == NULL)
        return cu_fail(e, EX_ERR_ARG, "%s: %d sources, expected %d", q_name(n), n->nsrc, nsrc);
    return EX_OK;
}

/* t is in a buffer, of dtype dt (or also), with ndim dims (0: any of 1 to 4). */
static ex_status q_operand(cu_exec *e, const ex_node_exec *n, const ex_tdesc *t, const char *what,
                           ex_dtype dt, ex_dtype also, int ndim)
{
    if (t->buf == NULL || t->ndim < 1 || t->ndim > 4 || (t->dtype != dt && t->dtype != also))
        return cu_fail(e, EX_ERR_ARG, "%s: %s must be %s%s%s in a buffer (it is %s, %d dims)",
                       q_name(n), what, ex_dtype_name(dt), also != dt ? " or " : "",
                       also != dt ? ex_dtype_name(also) : "", ex_dtype_name(t->dtype), t->ndim);
    if (ndim > 0 && t->ndim != ndim)
        return cu_fail(e, EX_ERR_SHAPE, "%s: %s has %d dims, expected %d", q_name(n), what, t->ndim,
                       ndim);
    return EX_OK;
}

/* clamp(rne(v)) to [lo, 127] as the CPU does it: NaN gives lo. */
__device__ __forceinline__ int8_t q_round(float v, int lo)
{
    if (!(v >= (float)lo))
        return (int8_t)lo;
    return (int8_t)(v > 127.0f ? 127 : __float2int_rn(v));
}

/* REQUANTIZE's arithmetic, shared with the convolutions' fused requantize so that the two
 * give the same bits: clamp(rne(f32(f32(x) * m))), the int32 converted rounding to nearest
 * (an int8 converts exactly). */
__device__ __forceinline__ int8_t q_requant(int32_t x, float m, int lo)
{
    return q_round(__fmul_rn(__int2float_rn(x), m), lo);
}

/* sign(s) * ((|s| + k / 2) / k): the average rounded half away from zero. */
__device__ __forceinline__ int8_t q_avg(int32_t s, int32_t k)
{
    int32_t a = s < 0 ? -s : s, r = k > 0 ? (a + k / 2) / k : 0;
    return (int8_t)(s < 0 ? -r : r);
}

/* ---- element-wise: QUANTIZE, DEQUANTIZE, REQUANTIZE, QADD, QRELU ----
 * As on the CPU, the sources are aligned to dst's shape padded to 4 dims; the channel of
 * a per-channel operand is padded dim 1 (4-dim x) or 3 (2-dim x). A block takes a row
 * (the three outer dims, decoded once, with the channel where that is dim 1) and its
 * threads the row's elements, so an element costs no division; dims that every operand
 * steps over as one run first merge into the row (never a per-channel dim). Each thread
 * reads its sources before it writes, so dst may be src[0] (QADD, QRELU run in place). */

enum q_kind { Q_QUANT, Q_DEQ8, Q_DEQ32, Q_REQ8, Q_REQ32, Q_ADD, Q_RELU };

typedef struct q_ew {
    char *y, *a, *b;
    int64_t ne[4], sy[4], sa[4], sb[4];
    const float *ch; /**< the per-channel operand */
    int64_t ch_st;   /**< its stride; 0 for [1] */
    int cdim;        /**< the padded dim of the channel: 1 or 3 */
    int lo;          /**< the clamp's floor: -127, or 0 with ReLU */
    float ma, mb;    /**< QADD's multipliers */
} q_ew;

/* Merges dims 2, 1, 0 in turn into dim 3 while every one of the nop operands steps over
 * the pair as one run; stops at dim keep (3: merges nothing). */
static void q_merge(int nop, int64_t ne[4], int64_t *const *st, int keep)
{
    for (int d = 2; d >= 0 && d != keep && keep != 3; d--) {
        bool ok = true;
        for (int k = 0; k < nop; k++) {
            if (ne[3] == 1) /* a dim of one element: its stride is free */
                st[k][3] = st[k][d];
            ok = ok && (ne[d] == 1 || st[k][d] == st[k][3] * ne[3]);
        }
        if (!ok)
            return;
        ne[3] *= ne[d];
        ne[d] = 1;
        for (int k = 0; k < nop; k++)
            st[k][d] = 0;
    }
}

/* Elements a thread of a row kernel takes at most: enough to pay for its start (the gate,
 * the row's decoding), few enough to leave long rows several blocks. */
#define Q_ROW_PER_THREAD 8

/* n blocks clamped to [1, most] (the kernels loop over what the grid does not cover). */
static unsigned q_clamp(int64_t n, int64_t most)
{
    return (unsigned)(n < 1 ? 1 : n < most ? n : most);
}

/* The grid of a row kernel: rows along x, a row's elements along y and the threads. */
static void q_row_grid(const int64_t ne[4], dim3 *grid, unsigned *threads)
{
    int64_t rows = ne[0] * ne[1] * ne[2], cols = ne[3];
    *threads = cols >= CU_THREADS ? CU_THREADS : (unsigned)((cols + 31) / 32 * 32);
    if (*threads < 32)
        *threads = 32;
    int64_t per = (int64_t)*threads * Q_ROW_PER_THREAD, tiles = (cols + per - 1) / per;
    *grid = dim3(q_clamp(rows, 0x7fffffff), q_clamp(tiles, 65535));
}

/* The outer coordinates of row r, in 32 bits when the rows allow (64-bit division is a
 * long subroutine on the GPU). */
__device__ __forceinline__ void q_row_coords(const int64_t *ne, int64_t r, int64_t *i0, int64_t *i1,
                                             int64_t *i2)
{
    if (ne[0] * ne[1] * ne[2] <= 0x7fffffff) {
        uint32_t u = (uint32_t)r, n2 = (uint32_t)ne[2], n1 = (uint32_t)ne[1];
        *i2 = u % n2;
        u /= n2;
        *i1 = u % n1;
        *i0 = u / n1;
    } else {
        *i2 = r % ne[2];
        r /= ne[2];
        *i1 = r % ne[1];
        *i0 = r / ne[1];
    }
}

/* Row r's offset under strides st (its three outer dims). */
__device__ __forceinline__ int64_t q_row_off(const int64_t *st, int64_t i0, int64_t i1, int64_t i2)
{
    return i0 * st[0] + i1 * st[1] + i2 * st[2];
}

template <int K>
__device__ __forceinline__ void q_ew_one(const q_ew &a, int64_t oy, int64_t ox, int64_t ob, float m)
{
    int8_t *y8 = (int8_t *)a.y + oy;
    if (K == Q_QUANT) {
        *y8 = q_round(__fmul_rn(((const float *)a.a)[ox], m), -127);
    } else if (K == Q_DEQ8 || K == Q_DEQ32) {
        float x = K == Q_DEQ8 ? (float)((const int8_t *)a.a)[ox]
                              : __int2float_rn(((const int32_t *)a.a)[ox]);
        ((float *)a.y)[oy] = __fmul_rn(x, m);
    } else if (K == Q_REQ8 || K == Q_REQ32) {
        int32_t x = K == Q_REQ8 ? ((const int8_t *)a.a)[ox] : ((const int32_t *)a.a)[ox];
        *y8 = q_requant(x, m, a.lo);
    } else if (K == Q_ADD) {
        float x = (float)((const int8_t *)a.a)[ox], z = (float)((const int8_t *)a.b)[ob];
        *y8 = q_round(__fadd_rn(__fmul_rn(x, a.ma), __fmul_rn(z, a.mb)), a.lo);
    } else { /* Q_RELU */
        int8_t x = ((const int8_t *)a.a)[ox];
        *y8 = x > 0 ? x : 0;
    }
}

template <int K> __global__ void q_ew_kernel(q_ew a, const float *gate)
{
    if (cu_gated_off(gate))
        return;
    const bool chan = K != Q_ADD && K != Q_RELU;
    int64_t rows = a.ne[0] * a.ne[1] * a.ne[2];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        int64_t i0, i1, i2;
        q_row_coords(a.ne, r, &i0, &i1, &i2);
        int64_t oy = q_row_off(a.sy, i0, i1, i2), ox = q_row_off(a.sa, i0, i1, i2),
                ob = K == Q_ADD ? q_row_off(a.sb, i0, i1, i2) : 0;
        float m = chan && a.cdim == 1 ? a.ch[i1 * a.ch_st] : 0.0f;
        for (int64_t c = blockIdx.y * (int64_t)blockDim.x + threadIdx.x; c < a.ne[3];
             c += (int64_t)gridDim.y * blockDim.x) {
            if (chan && a.cdim == 3)
                m = a.ch[c * a.ch_st];
            q_ew_one<K>(a, oy + c * a.sy[3], ox + c * a.sa[3], K == Q_ADD ? ob + c * a.sb[3] : 0,
                        m);
        }
    }
}

/* The node checked (core/tdesc.h) into o: dst, x (QADD's a and b), the per-channel operand. */
static ex_status q_ew_prep(cu_exec *e, const ex_node_exec *n, q_ew *o)
{
    int64_t st[3][4];
    char why[96];
    memset(o, 0, sizeof *o);
    ex_status s = ex_td_qew_of(n, o->ne, st, why, sizeof why);
    if (s != EX_OK)
        return cu_fail(e, s, "%s: %s", q_name(n), why);
    bool add = n->op == EX_OP_QADD, chan = !add && n->op != EX_OP_QRELU;
    memcpy(o->sy, st[0], sizeof o->sy);
    memcpy(o->sa, st[1], sizeof o->sa);
    if (add)
        memcpy(o->sb, st[2], sizeof o->sb);
    o->y = cu_ptr(&n->dst);
    o->a = cu_ptr(&n->src[0]);
    o->b = add ? cu_ptr(&n->src[1]) : NULL;
    o->lo = -127;
    if (chan) {
        const ex_tdesc *v = &n->src[1];
        o->ch = cu_f32(v);
        o->ch_st = v->ne[0] == 1 ? 0 : v->st[0];
        o->cdim = n->dst.ndim == 4 ? 1 : 3;
    }
    return EX_OK;
}

template <int K> static ex_status q_ew_launch(cu_exec *e, const ex_node_exec *n, q_ew &o)
{
    if (e->dry)
        return EX_OK;
    bool chan = K != Q_ADD && K != Q_RELU;
    if (chan && o.ch_st == 0)
        o.cdim = 1; /* one value for every channel: any index reads it */
    int64_t *st[3] = {o.sy, o.sa, o.sb};
    q_merge(K == Q_ADD ? 3 : 2, o.ne, st, chan && o.ch_st != 0 ? o.cdim : -1);
    dim3 grid;
    unsigned threads;
    q_row_grid(o.ne, &grid, &threads);
    cu_launch(e, q_ew_kernel<K>, grid, threads, 0, o, e->gate);
    return cu_launched(e, q_name(n));
}

CU_OP(quantize)
{
    q_ew o;
    ex_status st = q_ew_prep(e, n, &o);
    return st != EX_OK ? st : q_ew_launch<Q_QUANT>(e, n, o);
}

CU_OP(dequantize)
{
    q_ew o;
    ex_status st = q_ew_prep(e, n, &o);
    if (st != EX_OK)
        return st;
    return n->src[0].dtype == EX_I8 ? q_ew_launch<Q_DEQ8>(e, n, o) : q_ew_launch<Q_DEQ32>(e, n, o);
}

CU_OP(requantize)
{
    q_ew o;
    ex_status st = q_ew_prep(e, n, &o);
    if (st != EX_OK)
        return st;
    o.lo = n->ip[0] ? 0 : -127;
    return n->src[0].dtype == EX_I8 ? q_ew_launch<Q_REQ8>(e, n, o) : q_ew_launch<Q_REQ32>(e, n, o);
}

CU_OP(qadd)
{
    q_ew o;
    ex_status st = q_ew_prep(e, n, &o);
    if (st != EX_OK)
        return st;
    o.lo = n->ip[0] ? 0 : -127;
    o.ma = n->fp[0];
    o.mb = n->fp[1];
    return q_ew_launch<Q_ADD>(e, n, o);
}

CU_OP(qrelu)
{
    q_ew o;
    ex_status st = q_ew_prep(e, n, &o);
    return st != EX_OK ? st : q_ew_launch<Q_RELU>(e, n, o);
}

/* ---- QCONCAT: rows as the element-wise ops; a row's channel picks its part ---- */

#define Q_CAT_MAX 10
static_assert(Q_CAT_MAX >= EX_MAX_QCONCAT, "qconcat: room for every part");

typedef struct q_cat {
    int parts;
    char *x[Q_CAT_MAX];
    int64_t xs[Q_CAT_MAX][4];
    int64_t at[Q_CAT_MAX + 1]; /**< part i holds dst channels [at[i], at[i + 1]) */
    const float *m;
    int64_t m_st;
    char *y;
    int64_t ne[4], sy[4];
} q_cat;

__global__ void q_cat_kernel(q_cat a, const float *gate)
{
    if (cu_gated_off(gate))
        return;
    int64_t rows = a.ne[0] * a.ne[1] * a.ne[2];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        int64_t i0, i1, i2;
        q_row_coords(a.ne, r, &i0, &i1, &i2);
        int p = 0;
        while (p + 1 < a.parts && i1 >= a.at[p + 1])
            p++;
        const int8_t *x = (const int8_t *)a.x[p] + q_row_off(a.xs[p], i0, i1 - a.at[p], i2);
        int8_t *y = (int8_t *)a.y + q_row_off(a.sy, i0, i1, i2);
        int64_t xc = a.xs[p][3];
        float m = a.m[p * a.m_st];
        for (int64_t c = blockIdx.y * (int64_t)blockDim.x + threadIdx.x; c < a.ne[3];
             c += (int64_t)gridDim.y * blockDim.x)
            y[c * a.sy[3]] = q_round(__fmul_rn((float)x[c * xc], m), -127);
    }
}

CU_OP(qconcat)
{
    char why[96];
    ex_status st = ex_td_qconcat_of(n, why, sizeof why);
    if (st != EX_OK)
        return cu_fail(e, st, "qconcat: %s", why);
    int parts = n->nsrc - 1;
    const ex_tdesc *d = &n->dst, *m = &n->src[parts];
    q_cat a;
    memset(&a, 0, sizeof a);
    a.parts = parts;
    for (int p = 0; p < parts; p++) {
        const ex_tdesc *x = &n->src[p];
        a.x[p] = cu_ptr(x);
        for (int k = 0; k < 4; k++)
            a.xs[p][k] = x->st[k];
        a.at[p + 1] = a.at[p] + x->ne[1];
    }
    for (int k = 0; k < 4; k++) {
        a.ne[k] = d->ne[k];
        a.sy[k] = d->st[k];
    }
    a.m = cu_f32(m);
    a.m_st = m->st[0];
    a.y = cu_ptr(d);
    if (e->dry)
        return EX_OK;
    int64_t *strides[Q_CAT_MAX + 1];
    strides[0] = a.sy;
    for (int p = 0; p < parts; p++)
        strides[p + 1] = a.xs[p];
    q_merge(parts + 1, a.ne, strides, 1);
    dim3 grid;
    unsigned threads;
    q_row_grid(a.ne, &grid, &threads);
    cu_launch(e, q_cat_kernel, grid, threads, 0, a, e->gate);
    return cu_launched(e, "qconcat");
}

/* ---- pooling: one thread per output of an (n, c) plane ---- */

/* Outputs of a plane a thread takes (at most, with the grid's y at its full size): a few,
 * so that its plane's decoding is paid once for them. */
#define Q_POS_PER_THREAD 4

typedef struct q_pool_g {
    int h, w, ho, wo, kh, kw, sh, sw, ph, pw;
    int64_t planes, c;
} q_pool_g;

/* Whether every in-plane offset (dims 2 and 3) of a 4-dim t fits in 32 bits: the kernels
 * then index inside a plane in 32 bits, which costs a fraction of 64-bit arithmetic. */
static bool q_plane32(const ex_tdesc *t)
{
    int64_t reach = 0;
    for (int d = 2; d < 4; d++)
        reach += (t->ne[d] - 1) * (t->st[d] < 0 ? -t->st[d] : t->st[d]);
    return reach < (int64_t)1 << 31;
}

/* The sample and channel of plane `plane` (of c channels), in 32 bits when they fit:
 * every thread decodes its plane, and a 64-bit division costs it more than its outputs. */
__device__ __forceinline__ void q_split(int64_t plane, int64_t c, int64_t *n, int64_t *ch)
{
    if (plane <= 0x7fffffff && c <= 0x7fffffff) {
        uint32_t q = (uint32_t)plane / (uint32_t)c;
        *n = q;
        *ch = plane - (int64_t)q * c;
    } else {
        *n = plane / c;
        *ch = plane - *n * c;
    }
}

/* Element (0, 0) of plane (n, ch) of a tensor of T. */
template <typename T> __device__ __forceinline__ T *q_plane(const cu_t4 &t, int64_t n, int64_t ch)
{
    return (T *)t.p + n * t.st[0] + ch * t.st[1];
}

template <int MAX, typename I>
__global__ void q_pool_kernel(q_pool_g g, cu_t4 x, cu_t4 y, const float *gate)
{
    if (cu_gated_off(gate))
        return;
    const I xs2 = (I)x.st[2], xs3 = (I)x.st[3], ys2 = (I)y.st[2], ys3 = (I)y.st[3];
    CU_PLANE_LOOP(g.planes)
    {
        int64_t n, ch;
        q_split(plane, g.c, &n, &ch);
        const int8_t *xp = q_plane<const int8_t>(x, n, ch);
        int8_t *yp = q_plane<int8_t>(y, n, ch);
        CU_POS_LOOP(p, g.ho * g.wo)
        {
            int oh = p / g.wo, ow = p % g.wo;
            int h0 = oh * g.sh - g.ph, w0 = ow * g.sw - g.pw;
            int h1 = min(h0 + g.kh, g.h), w1 = min(w0 + g.kw, g.w);
            h0 = max(h0, 0);
            w0 = max(w0, 0);
            int32_t acc = MAX ? -128 : 0;
            for (int ih = h0; ih < h1; ih++)
                for (int iw = w0; iw < w1; iw++) {
                    int32_t v = xp[ih * xs2 + iw * xs3];
                    acc = MAX ? max(acc, v) : acc + v;
                }
            yp[oh * ys2 + ow * ys3] =
                MAX ? (int8_t)acc : q_avg(acc, max(h1 - h0, 0) * max(w1 - w0, 0));
        }
    }
}

static ex_status q_pool(cu_exec *e, const ex_node_exec *n, int max)
{
    ex_status st = q_need(e, n, 1);
    if (st == EX_OK)
        st = q_operand(e, n, &n->src[0], "x", EX_I8, EX_I8, 4);
    if (st == EX_OK)
        st = q_operand(e, n, &n->dst, "dst", EX_I8, EX_I8, 4);
    if (st != EX_OK)
        return st;
    const ex_tdesc *x = &n->src[0], *y = &n->dst;
    const int32_t *ip = n->ip;
    ex_td_pool_geom pg;
    char why[256];
    st = ex_td_pool_geom_of(ip, x->ne, y->ne, &pg, why, sizeof why);
    if (st != EX_OK)
        return cu_fail(e, st, "%s: %s", q_name(n), why);
    int64_t ho = pg.ho, wo = pg.wo;
    const int64_t lim = (int64_t)1 << 30;
    if (x->ne[2] * x->ne[3] >= lim || ho * wo >= lim)
        return cu_fail(e, EX_ERR_UNSUPPORTED, "%s: planes of 2^30 elements or more", q_name(n));
    if (e->dry)
        return EX_OK;
    q_pool_g g;
    g.h = (int)x->ne[2];
    g.w = (int)x->ne[3];
    g.ho = (int)ho;
    g.wo = (int)wo;
    g.kh = ip[0];
    g.kw = ip[1];
    g.sh = ip[2];
    g.sw = ip[3];
    g.ph = ip[4];
    g.pw = ip[5];
    g.planes = x->ne[0] * x->ne[1];
    g.c = x->ne[1];
    dim3 grid = cu_plane_grid(g.planes, (ho * wo + Q_POS_PER_THREAD - 1) / Q_POS_PER_THREAD);
    cu_t4 xt = cu_t4_of(x), yt = cu_t4_of(y);
    bool i32 = q_plane32(x) && q_plane32(y);
    if (max && i32)
        cu_launch(e, q_pool_kernel<1, int>, grid, CU_THREADS, 0, g, xt, yt, e->gate);
    else if (max)
        cu_launch(e, q_pool_kernel<1, int64_t>, grid, CU_THREADS, 0, g, xt, yt, e->gate);
    else if (i32)
        cu_launch(e, q_pool_kernel<0, int>, grid, CU_THREADS, 0, g, xt, yt, e->gate);
    else
        cu_launch(e, q_pool_kernel<0, int64_t>, grid, CU_THREADS, 0, g, xt, yt, e->gate);
    return cu_launched(e, q_name(n));
}

CU_OP(qmax_pool)
{
    return q_pool(e, n, 1);
}

CU_OP(qavg_pool)
{
    return q_pool(e, n, 0);
}

/* One warp per (n, c) plane: an exact int32 sum (|sum| < 2^30 for planes up to 2^23). */
__global__ void q_gap_kernel(cu_t4 x, cu_t4 y, int64_t planes, const float *gate)
{
    if (cu_gated_off(gate))
        return;
    int lane = threadIdx.x & 31;
    int64_t p = blockIdx.x * (int64_t)(blockDim.x >> 5) + (threadIdx.x >> 5);
    if (p >= planes)
        return;
    int64_t n, ch;
    q_split(p, x.ne[1], &n, &ch);
    const int8_t *xp = q_plane<const int8_t>(x, n, ch);
    int w = (int)x.ne[3], hw = (int)(x.ne[2] * x.ne[3]);
    int32_t acc = 0;
    if (x.st[3] == 1 && x.st[2] == w)
        for (int i = lane; i < hw; i += 32)
            acc += xp[i];
    else
        for (int i = lane; i < hw; i += 32)
            acc += xp[(i / w) * x.st[2] + (i % w) * x.st[3]];
    acc = cu_warp_sum(acc);
    if (lane == 0)
        *q_plane<int8_t>(y, n, ch) = q_avg(acc, hw);
}

CU_OP(qglobal_avg_pool)
{
    ex_status st = q_need(e, n, 1);
    if (st == EX_OK)
        st = q_operand(e, n, &n->src[0], "x", EX_I8, EX_I8, 4);
    if (st == EX_OK)
        st = q_operand(e, n, &n->dst, "dst", EX_I8, EX_I8, 4);
    if (st != EX_OK)
        return st;
    const ex_tdesc *x = &n->src[0], *y = &n->dst;
    char why[160];
    if ((st = ex_td_gap_of(n, why, sizeof why)) != EX_OK)
        return cu_fail(e, st, "qglobal_avg_pool: %s", why);
    if (e->dry)
        return EX_OK;
    int64_t planes = x->ne[0] * x->ne[1], per = CU_THREADS / 32;
    unsigned blocks = (unsigned)((planes + per - 1) / per);
    cu_launch(e, q_gap_kernel, blocks ? blocks : 1, CU_THREADS, 0, cu_t4_of(x), cu_t4_of(y), planes,
              e->gate);
    return cu_launched(e, "qglobal_avg_pool");
}

/* ---- convolution geometry (QCONV2D, QDWCONV2D) ---- */

typedef struct q_conv_g {
    int h, w, ho, wo, kh, kw, sh, sw, ph, pw, dh, dw;
    int64_t n, ci, co;
} q_conv_g;

/* The requantize fused into an int8 convolution (ex_td_qconv_rq): m is NULL where the
 * node makes the i32 sums; else each sum goes out as REQUANTIZE's i8 of it, computed in
 * the kernel's store, so that no int32 sum goes through memory. */
typedef struct q_rq {
    const float *m;
    int64_t m_st; /**< 0: one multiplier for every channel */
    int lo;       /**< the clamp's floor: -127, or 0 with ReLU (ip7) */
} q_rq;

/* Channel c's multiplier (0 unfused, where the store does not use it). */
__device__ __forceinline__ float q_rq_mult(const q_rq &rq, int64_t c)
{
    return rq.m ? rq.m[c * rq.m_st] : 0.0f;
}

/* Sum acc of a channel of multiplier m out to element at of y: i32, or i8 requantized.
 * Every thread of a launch takes the same side of the branch. */
__device__ __forceinline__ void q_store(const q_rq &rq, float m, char *y, int64_t at, int32_t acc)
{
    if (rq.m)
        ((int8_t *)y)[at] = q_requant(acc, m, rq.lo);
    else
        ((int32_t *)y)[at] = acc;
}

/* Reads the fused requantize of a convolution node into rq; refuses a malformed one (the
 * check every backend shares, so that each refuses the same nodes). */
static ex_status q_rq_prep(cu_exec *e, const ex_node_exec *n, q_rq *rq)
{
    memset(rq, 0, sizeof *rq);
    int fused = n->src != NULL ? ex_td_qconv_rq(n) : -1;
    if (fused < 0)
        return cu_fail(e, EX_ERR_ARG,
                       "%s: %d sources, dst %s, ip7 %d: expected 3 sources and an i32 dst for "
                       "the sums, or 4 (the multiplier f32 [Co] or [1]), an i8 dst and ip7 0 or "
                       "1 for them requantized",
                       q_name(n), n->nsrc, ex_dtype_name(n->dst.dtype), n->ip[7]);
    if (fused == 0)
        return EX_OK;
    const ex_tdesc *m = &n->src[3];
    ex_status st = q_operand(e, n, m, "the multiplier", EX_F32, EX_F32, 1);
    if (st != EX_OK)
        return st;
    rq->m = cu_f32(m);
    rq->m_st = m->ne[0] == 1 ? 0 : m->st[0];
    rq->lo = n->ip[7] ? 0 : -127;
    return EX_OK;
}

/* The operands of the integer convolutions and linear: i8 x and w of xdims and wdims
 * dims, an i32 bias [Co], a dst of xdims dims: i32, or i8 where a convolution (rq not
 * NULL; QLINEAR passes NULL) requantizes its sums (q_rq_prep). */
static ex_status q_acc_operands(cu_exec *e, const ex_node_exec *n, int xdims, int wdims, q_rq *rq)
{
    ex_status st = rq != NULL ? q_rq_prep(e, n, rq) : q_need(e, n, 3);
    ex_dtype ydt = rq != NULL && rq->m != NULL ? EX_I8 : EX_I32;
    if (st == EX_OK)
        st = q_operand(e, n, &n->src[0], "x", EX_I8, EX_I8, xdims);
    if (st == EX_OK)
        st = q_operand(e, n, &n->src[1], "w", EX_I8, EX_I8, wdims);
    if (st == EX_OK)
        st = q_operand(e, n, &n->src[2], "bias", EX_I32, EX_I32, 1);
    if (st == EX_OK)
        st = q_operand(e, n, &n->dst, "dst", ydt, ydt, xdims);
    return st;
}

/* Checks x i8 [N, Ci, H, W], w i8 [Co, Ci (1 for depthwise), Kh, Kw], bias i32 [Co] and
 * dst [N, Co, Ho, Wo] (i32, or i8 through rq) against the geometry in ip0..5
 * (ex_td_qconv_geom_of). */
static ex_status q_conv_prep(cu_exec *e, const ex_node_exec *n, q_conv_g *g, q_rq *rq)
{
    ex_status st = q_acc_operands(e, n, 4, 4, rq);
    if (st != EX_OK)
        return st;
    ex_td_conv_geom c;
    char why[320];
    const ex_tdesc *x = &n->src[0];
    st = ex_td_qconv_geom_of(n->ip, x->ne, n->src[1].ne, n->dst.ne, n->src[2].ne[0],
                             n->op == EX_OP_QDWCONV2D, &c, why, sizeof why);
    if (st != EX_OK)
        return cu_fail(e, st, "%s: %s", q_name(n), why);
    const int32_t *ip = n->ip;
    int64_t kh = c.kh, kw = c.kw, ho = c.ho, wo = c.wo;
    const int64_t lim = (int64_t)1 << 30;
    if (x->ne[2] * x->ne[3] >= lim || ho * wo >= lim || kh * kw >= lim || ip[2] >= lim / 2 ||
        ip[3] >= lim / 2 || ip[4] * kh >= lim || ip[5] * kw >= lim)
        return cu_fail(e, EX_ERR_UNSUPPORTED, "%s: planes or filters of 2^30 elements or more",
                       q_name(n));
    q_conv_g r = {(int)x->ne[2], (int)x->ne[3], (int)ho, (int)wo, (int)kh,  (int)kw,  ip[0], ip[1],
                  ip[2],         ip[3],         ip[4],   ip[5],   x->ne[0], x->ne[1], c.co};
    *g = r;
    return EX_OK;
}

/* ---- QDWCONV2D: one thread per output; square 3, 5 and 7 filters unrolled ----
 * A plane's outputs share a channel, so its bias and multiplier are read once. */

template <int K, typename I>
__global__ void q_dw_kernel(q_conv_g g, cu_t4 x, cu_t4 w, const int32_t *bias, int64_t bias_st,
                            q_rq rq, cu_t4 y, const float *gate)
{
    if (cu_gated_off(gate))
        return;
    const int kh = K ? K : g.kh, kw = K ? K : g.kw;
    const I xs2 = (I)x.st[2], xs3 = (I)x.st[3], ws2 = (I)w.st[2], ws3 = (I)w.st[3],
            ys2 = (I)y.st[2], ys3 = (I)y.st[3];
    CU_PLANE_LOOP(g.n * g.co)
    {
        int64_t n, c;
        q_split(plane, g.co, &n, &c);
        const int8_t *xp = q_plane<const int8_t>(x, n, c);
        const int8_t *wp = (const int8_t *)w.p + c * w.st[0];
        int64_t yo = n * y.st[0] + c * y.st[1]; /* in elements: y is i32 or i8 */
        int32_t b0 = bias[c * bias_st];
        float m = q_rq_mult(rq, c);
        CU_POS_LOOP(p, g.ho * g.wo)
        {
            int oh = p / g.wo, ow = p % g.wo;
            int h0 = oh * g.sh - g.ph, w0 = ow * g.sw - g.pw;
            int32_t acc = b0;
#pragma unroll
            for (int i = 0; i < kh; i++) {
                int ih = h0 + i * g.dh;
                if (ih < 0 || ih >= g.h)
                    continue;
#pragma unroll
                for (int j = 0; j < kw; j++) {
                    int iw = w0 + j * g.dw;
                    if (iw >= 0 && iw < g.w)
                        acc += (int32_t)wp[i * ws2 + j * ws3] * (int32_t)xp[ih * xs2 + iw * xs3];
                }
            }
            q_store(rq, m, y.p, yo + (oh * ys2 + ow * ys3), acc);
        }
    }
}

CU_OP(qdwconv2d)
{
    q_conv_g g;
    q_rq rq;
    ex_status st = q_conv_prep(e, n, &g, &rq);
    if (st != EX_OK || e->dry)
        return st;
    cu_t4 x = cu_t4_of(&n->src[0]), w = cu_t4_of(&n->src[1]), y = cu_t4_of(&n->dst);
    const int32_t *b = (const int32_t *)cu_ptr(&n->src[2]);
    int64_t bs = n->src[2].st[0];
    int64_t pos = (int64_t)g.ho * g.wo;
    dim3 grid = cu_plane_grid(g.n * g.co, (pos + Q_POS_PER_THREAD - 1) / Q_POS_PER_THREAD);
    bool i32 = q_plane32(&n->src[0]) && q_plane32(&n->src[1]) && q_plane32(&n->dst);
    int k = g.kh == g.kw && i32 ? g.kh : 0;
    if (k == 3)
        cu_launch(e, q_dw_kernel<3, int>, grid, CU_THREADS, 0, g, x, w, b, bs, rq, y, e->gate);
    else if (k == 5)
        cu_launch(e, q_dw_kernel<5, int>, grid, CU_THREADS, 0, g, x, w, b, bs, rq, y, e->gate);
    else if (k == 7)
        cu_launch(e, q_dw_kernel<7, int>, grid, CU_THREADS, 0, g, x, w, b, bs, rq, y, e->gate);
    else if (i32)
        cu_launch(e, q_dw_kernel<0, int>, grid, CU_THREADS, 0, g, x, w, b, bs, rq, y, e->gate);
    else
        cu_launch(e, q_dw_kernel<0, int64_t>, grid, CU_THREADS, 0, g, x, w, b, bs, rq, y, e->gate);
    return cu_launched(e, "qdwconv2d");
}

/* ---- the integer GEMM: QLINEAR, QPWCONV, QCONV2D ----
 * out[i, j] = bias + Σ_k A(i, k) · B(k, j), in tiles of QG_BM rows by QG_BN columns by
 * QG_BK values of k, 256 threads each holding 4 x 4 adjacent outputs (4 rows by 4
 * columns: one 128-bit shared load gives each operand's four words, so the shared memory
 * keeps up with __dp4a). The next tile's words are loaded into registers while the
 * current one is multiplied (qg_fetch, qg_stage say who loads what), and the finished tile
 * goes out through shared memory, so that neighbouring lanes write neighbouring columns
 * (QPWCONV and QCONV2D requantize each sum there when fused: q_store).
 *   QLINEAR: i = sample, j = output feature: A = x [N, K], B(k, j) = w[j, k], bias[j].
 *   QPWCONV: i = output channel, j = (n, h, w): A = w [Co, Ci], B(k, j) = x[n, k, h, w].
 *   QCONV2D: as QPWCONV with k = (ci, kh, kw) and B the input under the tap (im2col on
 *   the fly, 0 in the padding). */
#define QG_BM 64
#define QG_BN 64
#define QG_BK 32
#define QG_KW (QG_BK / 4) /* packed words of k per tile */
#define QG_THREADS 256

/* QG_PW4: QG_PW where every load can be an aligned 32-bit word (q_pw4_fits). */
enum q_gemm_mode { QG_LINEAR, QG_PW, QG_PW4, QG_CONV };

typedef struct q_gemm {
    int rows, cols, k;
    const int8_t *a, *b;
    int64_t as[4], bs[4]; /**< strides: A's row and k (linear, pw) or w's 4 (conv); B's */
    const int32_t *bias;
    int64_t bias_st;
    q_rq rq; /**< pw, conv: the requantize fused into the store (m NULL: i32 out) */
    char *y;
    int64_t ys[4]; /**< linear: row and column; else the 4 of [N, Co, Ho, Wo] */
    q_conv_g g;    /**< pw: h = ho, w = wo; conv: the geometry */
    int a_flat;    /**< conv: w's rows are dense over (ci, kh, kw), so A(i, k) = a[i, k] */
} q_gemm;

/* Four consecutive k values from p (stride s), valid of them in range (the rest 0), packed
 * little-endian as __dp4a takes them; one 32-bit load where they lie aligned together. */
__device__ __forceinline__ int q_word(const int8_t *p, int64_t s, int valid)
{
    if (valid >= 4 && s == 1 && ((uintptr_t)p & 3) == 0)
        return *(const int *)p;
    unsigned v = 0;
#pragma unroll
    for (int b = 0; b < 4; b++)
        if (b < valid)
            v |= (unsigned)(uint8_t)p[b * s] << (8 * b);
    return (int)v;
}

/* A loader's column j of B: whether it exists, and where it starts (conv: the sample's
 * offset and the window's corner). */
typedef struct qg_col {
    bool on;
    int64_t off;
    int ih0, iw0;
} qg_col;

template <int MODE> __device__ __forceinline__ qg_col qg_col_of(const q_gemm &q, int j)
{
    qg_col c = {j < q.cols, 0, 0, 0};
    if (!c.on)
        return c;
    if (MODE == QG_LINEAR) {
        c.off = j * q.bs[0];
        return c;
    }
    int hw = q.g.ho * q.g.wo, n = j / hw, r = j - n * hw, oh = r / q.g.wo, ow = r - oh * q.g.wo;
    if (MODE == QG_PW || MODE == QG_PW4) {
        c.off = n * q.bs[0] + oh * q.bs[2] + ow * q.bs[3];
    } else {
        c.off = n * q.bs[0];
        c.ih0 = oh * q.g.sh - q.g.ph;
        c.iw0 = ow * q.g.sw - q.g.pw;
    }
    return c;
}

/* Where (k, p, s) steps over a dense convolution's k = (ci, kh, kw) one at a time. */
__device__ __forceinline__ void qg_tap_next(const q_gemm &q, int *ci, int *p, int *s)
{
    if (++*s == q.g.kw) {
        *s = 0;
        if (++*p == q.g.kh) {
            *p = 0;
            ++*ci;
        }
    }
}

/* A's packed word at k of the row at a_off (0 past the rows or K). */
template <int MODE>
__device__ __forceinline__ int qg_word_a(const q_gemm &q, bool on, int64_t a_off, int k)
{
    int valid = min(q.k - k, 4);
    if (!on || valid <= 0)
        return 0;
    if (MODE != QG_CONV)
        return q_word(q.a + a_off + k * q.as[1], q.as[1], valid);
    if (q.a_flat)
        return q_word(q.a + a_off + k, 1, valid);
    int khw = q.g.kh * q.g.kw, ci = k / khw, r = k - ci * khw, p = r / q.g.kw, s = r - p * q.g.kw;
    unsigned v = 0;
#pragma unroll
    for (int b = 0; b < 4; b++) {
        if (b < valid)
            v |= (unsigned)(uint8_t)q.a[a_off + ci * q.as[1] + p * q.as[2] + s * q.as[3]]
                 << (8 * b);
        qg_tap_next(q, &ci, &p, &s);
    }
    return (int)v;
}

/* B's packed word at k of column c (0 past the columns or K; conv: 0 in the padding). */
template <int MODE>
__device__ __forceinline__ int qg_word_b(const q_gemm &q, const qg_col &c, int k)
{
    int valid = min(q.k - k, 4);
    if (!c.on || valid <= 0)
        return 0;
    if (MODE != QG_CONV)
        return q_word(q.b + c.off + k * q.bs[1], q.bs[1], valid);
    int khw = q.g.kh * q.g.kw, ci = k / khw, r = k - ci * khw, p = r / q.g.kw, s = r - p * q.g.kw;
    unsigned v = 0;
#pragma unroll
    for (int b = 0; b < 4; b++) {
        int ih = c.ih0 + p * q.g.dh, iw = c.iw0 + s * q.g.dw;
        if (b < valid && ih >= 0 && ih < q.g.h && iw >= 0 && iw < q.g.w)
            v |= (unsigned)(uint8_t)q.b[c.off + ci * q.bs[1] + ih * q.bs[2] + iw * q.bs[3]]
                 << (8 * b);
        qg_tap_next(q, &ci, &p, &s);
    }
    return (int)v;
}

/* QG_PW4: x's pixels lie in runs of 4 aligned bytes, so B is loaded as 4 x 4 byte blocks
 * (4 channels of 4 pixels, one 32-bit load each) and each is transposed with byte
 * permutes into the 4 pixels' words of 4 channels. */
__device__ __forceinline__ int4 qg_transpose4(const int w[4])
{
    int t0 = __byte_perm(w[0], w[1], 0x5140), t1 = __byte_perm(w[0], w[1], 0x7362);
    int t2 = __byte_perm(w[2], w[3], 0x5140), t3 = __byte_perm(w[2], w[3], 0x7362);
    return make_int4(__byte_perm(t0, t2, 0x5410), __byte_perm(t0, t2, 0x7632),
                     __byte_perm(t1, t3, 0x5410), __byte_perm(t1, t3, 0x7632));
}

/* Who stages what. Each operand is loaded so that neighbouring lanes read neighbouring
 * bytes: a tile row of A (and of B in QG_LINEAR, whose B is w's rows) is 8 words along k,
 * so thread t takes word t % 8 of rows t / 8 and t / 8 + 32; B of QG_PW and QG_CONV runs
 * along the pixels, so thread t takes column t % 64, words t / 64 and t / 64 + 4; in
 * QG_PW4 threads 0 .. 127 each take one 4 x 4 block of B. Shared rows are padded by
 * QG_PAD words, so that the k-major stores fall in distinct banks. */
#define QG_PAD 4
#define QG_B_KMAJOR(MODE) ((MODE) == QG_LINEAR)

typedef struct qg_loader {
    int64_t a_off[2];
    bool a_on[2];
    qg_col col[2]; /**< B's columns for the two words (the same one when B runs along j) */
    int wa[2], wb[4];
} qg_loader;

template <int MODE> __device__ __forceinline__ void qg_fetch(const q_gemm &q, qg_loader &l, int k0)
{
    int t = threadIdx.x;
#pragma unroll
    for (int h = 0; h < 2; h++)
        l.wa[h] = qg_word_a<MODE>(q, l.a_on[h], l.a_off[h], k0 + 4 * (t % QG_KW));
    if (MODE == QG_PW4) {
        if (t < QG_THREADS / 2) { /* channels k .. k + 3 of pixels col .. col + 3 */
            int k = k0 + 4 * (t / (QG_BN / 4));
#pragma unroll
            for (int r = 0; r < 4; r++)
                l.wb[r] = l.col[0].on && k + r < q.k
                              ? *(const int *)(q.b + l.col[0].off + (k + r) * q.bs[1])
                              : 0;
        }
    } else {
#pragma unroll
        for (int h = 0; h < 2; h++)
            l.wb[h] = qg_word_b<MODE>(
                q, l.col[h],
                k0 + 4 * (QG_B_KMAJOR(MODE) ? t % QG_KW : t / QG_BN + h * (QG_KW / 2)));
    }
}

template <int MODE>
__device__ __forceinline__ void qg_stage(const qg_loader &l, int (*sa)[QG_BM + QG_PAD],
                                         int (*sb)[QG_BN + QG_PAD])
{
    int t = threadIdx.x;
#pragma unroll
    for (int h = 0; h < 2; h++)
        sa[t % QG_KW][t / QG_KW + 32 * h] = l.wa[h];
    if (MODE == QG_PW4) {
        if (t < QG_THREADS / 2)
            *(int4 *)&sb[t / (QG_BN / 4)][4 * (t % (QG_BN / 4))] = qg_transpose4(l.wb);
    } else {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            if (QG_B_KMAJOR(MODE))
                sb[t % QG_KW][t / QG_KW + 32 * h] = l.wb[h];
            else
                sb[t / QG_BN + h * (QG_KW / 2)][t % QG_BN] = l.wb[h];
        }
    }
}

template <int MODE>
__global__ void __launch_bounds__(QG_THREADS) q_gemm_kernel(q_gemm q, const float *gate)
{
    __shared__ __align__(16) int sa[QG_KW][QG_BM + QG_PAD];
    __shared__ __align__(16) int sb[QG_KW][QG_BN + QG_PAD];
    __shared__ __align__(16) int so[QG_BM][QG_BN + QG_PAD]; /* the output tile */
    __shared__ int64_t ycol[QG_BN];                         /* its columns' offsets in y */
    if (cu_gated_off(gate))
        return;
    int t = threadIdx.x, tx = t & 15, ty = t >> 4;
    int i0 = blockIdx.y * QG_BM, j0 = blockIdx.x * QG_BN;
    qg_loader l;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int i = i0 + t / QG_KW + 32 * h;
        l.a_on[h] = i < q.rows;
        l.a_off[h] = (int64_t)i * q.as[0];
        if (QG_B_KMAJOR(MODE))
            l.col[h] = qg_col_of<MODE>(q, j0 + t / QG_KW + 32 * h);
    }
    if (MODE == QG_PW4)
        l.col[0] = qg_col_of<MODE>(q, j0 + 4 * (t % (QG_BN / 4)));
    else if (!QG_B_KMAJOR(MODE))
        l.col[0] = l.col[1] = qg_col_of<MODE>(q, j0 + t % QG_BN);
    int acc[4][4] = {};
    qg_fetch<MODE>(q, l, 0);
    for (int k0 = 0; k0 < q.k; k0 += QG_BK) {
        qg_stage<MODE>(l, sa, sb);
        __syncthreads();
        if (k0 + QG_BK < q.k)
            qg_fetch<MODE>(q, l, k0 + QG_BK);
#pragma unroll
        for (int kq = 0; kq < QG_KW; kq++) {
            /* the thread's 4 rows and 4 columns lie side by side: one 128-bit load each */
            int4 av = *(const int4 *)&sa[kq][4 * ty], bv = *(const int4 *)&sb[kq][4 * tx];
            int a[4] = {av.x, av.y, av.z, av.w}, b[4] = {bv.x, bv.y, bv.z, bv.w};
#pragma unroll
            for (int u = 0; u < 4; u++)
#pragma unroll
                for (int v = 0; v < 4; v++)
                    acc[u][v] = __dp4a(a[u], b[v], acc[u][v]);
        }
        __syncthreads();
    }
    /* out through shared memory: whole sectors of y rather than every fourth int */
    if (t < QG_BN) {
        int j = j0 + t;
        int64_t off = 0;
        if (j < q.cols && MODE == QG_LINEAR) {
            off = j * q.ys[1];
        } else if (j < q.cols) {
            int hw = q.g.ho * q.g.wo, n = j / hw, r = j - n * hw, oh = r / q.g.wo,
                ow = r - oh * q.g.wo;
            off = n * q.ys[0] + oh * q.ys[2] + ow * q.ys[3];
        }
        ycol[t] = off;
    }
#pragma unroll
    for (int u = 0; u < 4; u++)
        *(int4 *)&so[4 * ty + u][4 * tx] = make_int4(acc[u][0], acc[u][1], acc[u][2], acc[u][3]);
    __syncthreads();
    int64_t yr = MODE == QG_LINEAR ? q.ys[0] : q.ys[1]; /* between rows */
    for (int at = t; at < QG_BM * QG_BN; at += QG_THREADS) {
        int r = at / QG_BN, c = at % QG_BN, i = i0 + r, j = j0 + c;
        int ch = MODE == QG_LINEAR ? j : i; /* the output channel: bias and multiplier */
        if (i < q.rows && j < q.cols)
            q_store(q.rq, q_rq_mult(q.rq, ch), q.y, ycol[c] + i * yr,
                    so[r][c] + q.bias[ch * q.bias_st]);
    }
}

/* Checks the GEMM's extent against the grid and 32-bit indices, and launches it. */
template <int MODE>
static ex_status q_gemm_run(cu_exec *e, const ex_node_exec *n, q_gemm *q, int64_t rows,
                            int64_t cols, int64_t k)
{
    if (cols >= (int64_t)1 << 31 || k > (int64_t)1 << 30 || (rows + QG_BM - 1) / QG_BM > 65535)
        return cu_fail(e, EX_ERR_UNSUPPORTED,
                       "%s: a GEMM of %lld rows, %lld columns and %lld terms exceeds the grid",
                       q_name(n), (long long)rows, (long long)cols, (long long)k);
    if (e->dry || rows == 0 || cols == 0)
        return EX_OK;
    q->rows = (int)rows;
    q->cols = (int)cols;
    q->k = (int)k;
    q->bias = (const int32_t *)cu_ptr(&n->src[2]);
    q->bias_st = n->src[2].st[0];
    q->y = cu_ptr(&n->dst);
    dim3 grid((unsigned)((cols + QG_BN - 1) / QG_BN), (unsigned)((rows + QG_BM - 1) / QG_BM));
    cu_launch(e, q_gemm_kernel<MODE>, grid, QG_THREADS, 0, *q, e->gate);
    return cu_launched(e, q_name(n));
}

/* Whether QG_PW4 takes a pointwise convolution: each image's pixels one dense run of a
 * multiple of 4 (so a group of 4 columns never spans two images), w's rows dense over a
 * multiple of 4 channels, and every run starting 4-byte aligned. */
static bool q_pw4_fits(const ex_tdesc *x, const ex_tdesc *w)
{
    int64_t hw = x->ne[2] * x->ne[3];
    bool xd = (x->st[3] == 1 || x->ne[3] == 1) && (x->st[2] == x->ne[3] || x->ne[2] == 1) &&
              hw % 4 == 0 && x->st[1] % 4 == 0 && x->st[0] % 4 == 0 &&
              (uintptr_t)cu_ptr(x) % 4 == 0;
    bool wd = (w->st[1] == 1 || w->ne[1] == 1) && w->ne[1] % 4 == 0 && w->st[0] % 4 == 0 &&
              (uintptr_t)cu_ptr(w) % 4 == 0;
    return xd && wd;
}

static void q_strides(int64_t *to, const ex_tdesc *t)
{
    for (int d = 0; d < 4; d++)
        to[d] = d < t->ndim ? t->st[d] : 0;
}

CU_OP(qconv2d)
{
    q_conv_g g;
    q_gemm q;
    memset(&q, 0, sizeof q);
    ex_status st = q_conv_prep(e, n, &g, &q.rq);
    if (st != EX_OK)
        return st;
    const ex_tdesc *x = &n->src[0], *w = &n->src[1];
    q.a = (const int8_t *)cu_ptr(w);
    q.b = (const int8_t *)cu_ptr(x);
    q_strides(q.as, w);
    q_strides(q.bs, x);
    q_strides(q.ys, &n->dst);
    q.g = g;
    q.a_flat = w->st[3] == 1 && w->st[2] == g.kw && w->st[1] == (int64_t)g.kh * g.kw;
    return q_gemm_run<QG_CONV>(e, n, &q, g.co, g.n * g.ho * g.wo, g.ci * g.kh * g.kw);
}

CU_OP(qpwconv)
{
    q_gemm q;
    memset(&q, 0, sizeof q);
    ex_status st = q_acc_operands(e, n, 4, 2, &q.rq);
    if (st != EX_OK)
        return st;
    const ex_tdesc *x = &n->src[0], *w = &n->src[1], *b = &n->src[2], *y = &n->dst;
    if (w->ne[1] != x->ne[1] || b->ne[0] != w->ne[0] || y->ne[0] != x->ne[0] ||
        y->ne[1] != w->ne[0] || y->ne[2] != x->ne[2] || y->ne[3] != x->ne[3])
        return cu_fail(e, EX_ERR_SHAPE,
                       "qpwconv: x [%lld,%lld,%lld,%lld], w [%lld,%lld], bias [%lld] and y "
                       "[%lld,%lld,%lld,%lld] do not fit",
                       (long long)x->ne[0], (long long)x->ne[1], (long long)x->ne[2],
                       (long long)x->ne[3], (long long)w->ne[0], (long long)w->ne[1],
                       (long long)b->ne[0], (long long)y->ne[0], (long long)y->ne[1],
                       (long long)y->ne[2], (long long)y->ne[3]);
    if (x->ne[2] * x->ne[3] >= (int64_t)1 << 30)
        return cu_fail(e, EX_ERR_UNSUPPORTED, "qpwconv: planes of 2^30 elements or more");
    q.a = (const int8_t *)cu_ptr(w);
    q.b = (const int8_t *)cu_ptr(x);
    q_strides(q.as, w);
    q_strides(q.bs, x);
    q_strides(q.ys, y);
    q.g.h = q.g.ho = (int)x->ne[2];
    q.g.w = q.g.wo = (int)x->ne[3];
    int64_t co = w->ne[0], cols = x->ne[0] * x->ne[2] * x->ne[3], ci = x->ne[1];
    if (q_pw4_fits(x, w))
        return q_gemm_run<QG_PW4>(e, n, &q, co, cols, ci);
    return q_gemm_run<QG_PW>(e, n, &q, co, cols, ci);
}

CU_OP(qlinear)
{
    ex_status st = q_acc_operands(e, n, 2, 2, NULL); /* never fused: i32 out */
    if (st != EX_OK)
        return st;
    const ex_tdesc *x = &n->src[0], *w = &n->src[1], *b = &n->src[2], *y = &n->dst;
    if (w->ne[1] != x->ne[1] || b->ne[0] != w->ne[0] || y->ne[0] != x->ne[0] ||
        y->ne[1] != w->ne[0])
        return cu_fail(e, EX_ERR_SHAPE,
                       "qlinear: x [%lld,%lld], w [%lld,%lld], bias [%lld] and y [%lld,%lld] do "
                       "not fit",
                       (long long)x->ne[0], (long long)x->ne[1], (long long)w->ne[0],
                       (long long)w->ne[1], (long long)b->ne[0], (long long)y->ne[0],
                       (long long)y->ne[1]);
    q_gemm q;
    memset(&q, 0, sizeof q);
    q.a = (const int8_t *)cu_ptr(x);
    q.b = (const int8_t *)cu_ptr(w);
    q_strides(q.as, x);
    q_strides(q.bs, w);
    q_strides(q.ys, y);
    return q_gemm_run<QG_LINEAR>(e, n, &q, x->ne[0], w->ne[0], x->ne[1]);
}
