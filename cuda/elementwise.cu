/* Element-wise kernels: ADD, SUB, MUL, SCALE, AXPY, RELU, RELU_BWD, FILL, COPY, DROP_PATH,
 * and the backend's buffer fill.
 *
 * As on the CPU, every source is aligned to dst's shape padded to 4 dims (a size-1 dim
 * broadcasts) and dims that lie back to back in every operand are merged, so dense
 * tensors become one run and the kernel needs no index arithmetic. Each thread reads its
 * element of every source before it writes dst's, which makes dst == src[0] safe. */
#include <string.h>

#include "core/philox.h"
#include "cuda/cuda.h"

#define EW_MAX_OP 3 /* dst and two sources */

/** dst (operand 0) and its sources aligned to one padded shape. */
typedef struct ew_args {
    int nop;
    int nd; /**< dims left after merging (the innermost nd of ne) */
    int64_t ne[4];
    int64_t st[EW_MAX_OP][4];
    char *base[EW_MAX_OP];
    float p0;      /**< the op's float parameter */
    uint32_t bits; /**< FILL's 32-bit pattern */
} ew_args;

enum ew_kind { EW_ADD, EW_SUB, EW_MUL, EW_SCALE, EW_AXPY, EW_RELU, EW_RELU_BWD, EW_FILL, EW_COPY };

template <int K> __device__ __forceinline__ float ew_f(float x, float y, float p)
{
    switch (K) {
    case EW_ADD: return x + y;
    case EW_SUB: return x - y;
    case EW_MUL: return x * y;
    case EW_SCALE: return p * x;
    case EW_AXPY: return p * x + y;
    /* NaN passes through (x < 0 is false), so a poisoned input still shows downstream. */
    case EW_RELU: return x < 0.0f ? 0.0f : x;
    default: return x > 0.0f ? y : 0.0f; /* EW_RELU_BWD */
    }
}

template <int K> __global__ void ew_kernel(ew_args a, int64_t n, const float *gate)
{
    if (cu_gated_off(gate))
        return;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t off[EW_MAX_OP], c[4];
        if (a.nd > 1)
            cu_coords4(a.ne, i, c);
        for (int k = 0; k < EW_MAX_OP; k++)
            off[k] = a.nd == 1 ? i * a.st[k][3] : cu_dot4(c, a.st[k]);
        uint32_t *d = (uint32_t *)a.base[0] + off[0];
        if (K == EW_FILL) {
            *d = a.bits;
        } else if (K == EW_COPY) {
            *d = ((const uint32_t *)a.base[1])[off[1]];
        } else {
            float x = ((const float *)a.base[1])[off[1]];
            float y = a.nop > 2 ? ((const float *)a.base[2])[off[2]] : 0.0f;
            *(float *)d = ew_f<K>(x, y, a.p0);
        }
    }
}

/* Dense operands (one run of stride 1, 16-byte aligned; a source may also be one value
 * broadcast, stride 0, as a weight times a gradient): four elements a thread through
 * 128-bit loads and stores, which is what it takes to approach the copy bandwidth; the
 * tail of n % 4 elements is done by thread 0 of block 0. Reads come before the write, as
 * above, so dst == src stays safe. */
__device__ __forceinline__ float4 ew_load4(const ew_args &a, int k, int64_t i)
{
    if (a.st[k][3] == 0) {
        float v = *(const float *)a.base[k];
        return make_float4(v, v, v, v);
    }
    return ((const float4 *)a.base[k])[i];
}

__device__ __forceinline__ float ew_load1(const ew_args &a, int k, int64_t i)
{
    return ((const float *)a.base[k])[i * a.st[k][3]];
}

template <int K> __device__ __forceinline__ float4 ew_f4(float4 x, float4 y, float p)
{
    return make_float4(ew_f<K>(x.x, y.x, p), ew_f<K>(x.y, y.y, p), ew_f<K>(x.z, y.z, p),
                       ew_f<K>(x.w, y.w, p));
}

template <int K> __global__ void ew_dense_kernel(ew_args a, int64_t n, const float *gate)
{
    if (cu_gated_off(gate))
        return;
    int64_t n4 = n / 4;
    float4 *d = (float4 *)a.base[0];
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n4;
         i += (int64_t)gridDim.x * blockDim.x) {
        if (K == EW_FILL) {
            float f = __uint_as_float(a.bits);
            d[i] = make_float4(f, f, f, f);
        } else if (K == EW_COPY) {
            d[i] = ew_load4(a, 1, i);
        } else {
            float4 xv = ew_load4(a, 1, i),
                   yv = a.nop > 2 ? ew_load4(a, 2, i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            d[i] = ew_f4<K>(xv, yv, a.p0);
        }
    }
    if (blockIdx.x == 0 && threadIdx.x == 0)
        for (int64_t i = n4 * 4; i < n; i++) {
            uint32_t *o = (uint32_t *)a.base[0] + i;
            if (K == EW_FILL)
                *o = a.bits;
            else if (K == EW_COPY)
                *o = ((const uint32_t *)a.base[1])[i * a.st[1][3]];
            else
                *(float *)o =
                    ew_f<K>(ew_load1(a, 1, i), a.nop > 2 ? ew_load1(a, 2, i) : 0.0f, a.p0);
        }
}

/* Whether every operand is one dense, 16-byte-aligned run after collapsing (a source may
 * be a broadcast value instead). */
static bool ew_dense(const ew_args *o)
{
    if (o->nd != 1)
        return false;
    for (int k = 0; k < o->nop; k++) {
        bool scalar = k > 0 && o->st[k][3] == 0;
        if (!scalar && (o->st[k][3] != 1 || (uintptr_t)o->base[k] % 16 != 0))
            return false;
    }
    return true;
}

/* Checks the source count and aligns dst and the first nalign sources. */
static ex_status ew_setup(cu_exec *e, const ex_node_exec *n, const char *op, int nsrc, int nalign,
                          ew_args *o)
{
    memset(o, 0, sizeof *o);
    char why[160];
    ex_status st = ex_td_ew_of(n, nsrc, nalign, o->ne, o->st, why, sizeof why);
    if (st != EX_OK)
        return cu_fail(e, st, "%s: %s", op, why);
    o->nop = 1 + nalign;
    o->nd = 4;
    o->base[0] = cu_ptr(&n->dst);
    for (int i = 0; i < nalign; i++)
        o->base[1 + i] = cu_ptr(&n->src[i]);
    return EX_OK;
}

static ex_status ew_need(cu_exec *e, const char *op, const ex_tdesc *t, ex_dtype dt,
                         const char *what)
{
    if (t->dtype != dt)
        return cu_fail(e, EX_ERR_ARG, "%s: %s must be %s", op, what, dt == EX_F32 ? "f32" : "i32");
    return EX_OK;
}

/* Drops size-1 dims and merges a dim into its inner neighbour when every operand steps
 * over the pair with one stride; the result is right-aligned in the 4 dims (the strides of
 * operands past nop stay 0). */
static void ew_collapse(ew_args *o)
{
    o->nd = ex_td_merge_dims(o->nop, o->ne, o->st, 1);
}

template <int K> static ex_status ew_launch(cu_exec *e, ew_args *o, const char *op)
{
    if (e->dry)
        return EX_OK;
    int64_t numel = o->ne[0] * o->ne[1] * o->ne[2] * o->ne[3];
    ew_collapse(o);
    if (ew_dense(o))
        cu_launch(e, ew_dense_kernel<K>, cu_blocks((numel + 3) / 4, CU_THREADS), CU_THREADS, 0, *o,
                  numel, e->gate);
    else
        cu_launch(e, ew_kernel<K>, cu_blocks(numel, CU_THREADS), CU_THREADS, 0, *o, numel, e->gate);
    return cu_launched(e, op);
}

template <int K>
static ex_status ew_f32(cu_exec *e, const ex_node_exec *n, const char *op, int nsrc)
{
    ew_args o;
    ex_status st = ew_setup(e, n, op, nsrc, nsrc, &o);
    if (st == EX_OK)
        st = ew_need(e, op, &n->dst, EX_F32, "dst");
    for (int i = 0; i < nsrc && st == EX_OK; i++)
        st = ew_need(e, op, &n->src[i], EX_F32, "every source");
    if (st != EX_OK)
        return st;
    o.p0 = n->fp[0];
    return ew_launch<K>(e, &o, op);
}

CU_OP(add)
{
    return ew_f32<EW_ADD>(e, n, "add", 2);
}

CU_OP(sub)
{
    return ew_f32<EW_SUB>(e, n, "sub", 2);
}

CU_OP(mul)
{
    return ew_f32<EW_MUL>(e, n, "mul", 2);
}

CU_OP(scale)
{
    return ew_f32<EW_SCALE>(e, n, "scale", 1);
}

CU_OP(axpy)
{
    return ew_f32<EW_AXPY>(e, n, "axpy", 2);
}

CU_OP(relu)
{
    return ew_f32<EW_RELU>(e, n, "relu", 1);
}

CU_OP(relu_bwd)
{
    return ew_f32<EW_RELU_BWD>(e, n, "relu_bwd", 2);
}

CU_OP(fill)
{
    ew_args o;
    ex_status st = ew_setup(e, n, "fill", 0, 0, &o);
    if (st != EX_OK)
        return st;
    int unwritten = ex_td_fill_unwritten(n);
    if (unwritten)
        return unwritten < 0 ? cu_fail(e, EX_ERR_ARG, "fill: ip0 %d, expected 0 or 1", n->ip[0])
                             : EX_OK;
    if (n->dst.dtype == EX_F32) {
        memcpy(&o.bits, &n->fp[0], 4);
    } else if (n->dst.dtype == EX_I32) {
        int32_t v = ex_td_fill_i32(n->fp[0]);
        memcpy(&o.bits, &v, 4);
    } else {
        return cu_fail(e, EX_ERR_ARG, "fill: dst must be f32 or i32");
    }
    return ew_launch<EW_FILL>(e, &o, "fill");
}

/* A copy between different shapes of one element count pairs elements by their row-major
 * logical index. */
__global__ void copy_reshape_kernel(cu_t4 d, cu_t4 s, int64_t n, const float *gate)
{
    if (cu_gated_off(gate))
        return;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        ((uint32_t *)d.p)[cu_off4(d.ne, d.st, i)] = ((const uint32_t *)s.p)[cu_off4(s.ne, s.st, i)];
}

static ex_status copy_reshape(cu_exec *e, const ex_node_exec *n)
{
    int64_t ne[4], st[4];
    ex_td_shape4(&n->dst, ne, st);
    if (ex_td_numel(&n->src[0]) != ex_td_numel(&n->dst))
        return cu_fail(e, EX_ERR_SHAPE, "copy: %lld elements into %lld",
                       (long long)ex_td_numel(&n->src[0]), (long long)ex_td_numel(&n->dst));
    if (!ex_td_dst_ok(ne, st))
        return cu_fail(e, EX_ERR_ARG, "copy: dst broadcasts (stride 0)");
    if (e->dry)
        return EX_OK;
    int64_t m = ex_td_numel(&n->dst);
    cu_launch(e, copy_reshape_kernel, cu_blocks(m, CU_THREADS), CU_THREADS, 0, cu_t4_of(&n->dst),
              cu_t4_of(&n->src[0]), m, e->gate);
    return cu_launched(e, "copy");
}

CU_OP(copy)
{
    if (n->nsrc != 1 || n->src == NULL)
        return cu_fail(e, EX_ERR_ARG, "copy: %d sources, expected 1", n->nsrc);
    const ex_tdesc *d = &n->dst, *s = &n->src[0];
    if (d->ndim < 1 || d->ndim > 4 || d->buf == NULL || s->ndim < 1 || s->ndim > 4 ||
        s->buf == NULL)
        return cu_fail(e, EX_ERR_ARG, "copy: bad dst or source");
    if (d->dtype != s->dtype || (d->dtype != EX_F32 && d->dtype != EX_I32))
        return cu_fail(e, EX_ERR_ARG, "copy: source and dst must both be f32 or both i32");
    int64_t ne[4], st[4];
    ex_td_shape4(d, ne, st);
    if (!ex_td_align(s, ne, st))
        return copy_reshape(e, n);
    ew_args o;
    ex_status r = ew_setup(e, n, "copy", 1, 1, &o);
    if (r == EX_OK)
        r = ew_launch<EW_COPY>(e, &o, "copy");
    return r;
}

/** DROP_PATH's stream: the key, where the counter's two words lie, and keep. */
typedef struct dp_args {
    uint32_t k0, k1;
    const int32_t *c0, *c1;
    float keep;
    int p;    /**< the padded dim that indexes samples (dst's dim 0) */
    int vec4; /**< dense operands, samples of a multiple of 4 elements */
} dp_args;

__global__ void drop_path_kernel(ew_args a, dp_args r, int64_t n, const float *gate)
{
    if (cu_gated_off(gate))
        return;
    uint32_t c0 = (uint32_t)*r.c0, c1 = (uint32_t)*r.c1;
    int64_t span = 1; /* elements per step of dim p */
    for (int d = r.p + 1; d < 4; d++)
        span *= a.ne[d];
    if (r.vec4) { /* four elements of one sample a thread: a quarter of the draws */
        for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n / 4;
             i += (int64_t)gridDim.x * blockDim.x) {
            int64_t s = (i * 4 / span) % a.ne[r.p];
            float u = ex_philox_uniform(r.k0, r.k1, c0, c1, (uint64_t)s);
            float f = u < r.keep ? 1.0f / r.keep : 0.0f;
            float4 x = ((const float4 *)a.base[1])[i];
            ((float4 *)a.base[0])[i] = make_float4(x.x * f, x.y * f, x.z * f, x.w * f);
        }
        return;
    }
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t s = (i / span) % a.ne[r.p];
        float u = ex_philox_uniform(r.k0, r.k1, c0, c1, (uint64_t)s);
        float f = u < r.keep ? 1.0f / r.keep : 0.0f;
        float x = ((const float *)a.base[1])[cu_off4(a.ne, a.st[1], i)];
        ((float *)a.base[0])[cu_off4(a.ne, a.st[0], i)] = x * f;
    }
}

CU_OP(drop_path)
{
    ew_args o;
    ex_status st = ew_setup(e, n, "drop_path", 2, 1, &o);
    if (st == EX_OK)
        st = ew_need(e, "drop_path", &n->dst, EX_F32, "dst");
    if (st == EX_OK)
        st = ew_need(e, "drop_path", &n->src[0], EX_F32, "x");
    if (st == EX_OK)
        st = ew_need(e, "drop_path", &n->src[1], EX_I32, "counter");
    if (st != EX_OK)
        return st;
    const ex_tdesc *ct = &n->src[1];
    if (!ex_td_counter_ok(ct))
        return cu_fail(e, EX_ERR_SHAPE, "drop_path: counter needs 2 elements");
    if (e->dry)
        return EX_OK;
    const int32_t *cnt = (const int32_t *)cu_ptr(ct);
    dp_args r = {(uint32_t)n->ip[0],
                 (uint32_t)n->ip[1],
                 cnt + ex_td_at(ct, 0),
                 cnt + ex_td_at(ct, 1),
                 n->fp[0],
                 4 - n->dst.ndim,
                 0};
    int64_t numel = o.ne[0] * o.ne[1] * o.ne[2] * o.ne[3], span = 1;
    for (int d = r.p + 1; d < 4; d++)
        span *= o.ne[d];
    ew_args flat = o;
    ew_collapse(&flat);
    r.vec4 = ew_dense(&flat) && span % 4 == 0;
    cu_launch(e, drop_path_kernel, cu_blocks(r.vec4 ? numel / 4 : numel, CU_THREADS), CU_THREADS, 0,
              o, r, numel, e->gate);
    return cu_launched(e, "drop_path");
}

__global__ void fill_words_kernel(uint32_t *p, uint64_t n, uint32_t pattern)
{
    cu_pdl_sync();
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
         i += (uint64_t)gridDim.x * blockDim.x)
        p[i] = pattern;
}

ex_status cu_fill_words(cu_exec *e, void *p, uint64_t n, uint32_t pattern)
{
    if (n == 0)
        return EX_OK;
    cu_launch(e, fill_words_kernel, cu_blocks((int64_t)n, CU_THREADS), CU_THREADS, 0, (uint32_t *)p,
              n, pattern);
    return cu_launched(e, "fill");
}
