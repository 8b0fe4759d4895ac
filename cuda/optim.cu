/* Optimizer kernels: SGD (with CLIP's scaling folded in when it has the norm as a 5th
 * source), ADAM, GRAD_NORM, CLIP.
 *
 * SGD and ADAM write the parameter through dst (which is src[0]) and their moments through
 * their own source descriptors; each thread reads its element of every operand before it
 * writes, so the in-place update is safe. Scalars (lr, Adam's {lr, t}, the norm) are read
 * on the device, so a schedule changes them without a re-capture. GRAD_NORM sums squares
 * in fixed chunks of CU_CHUNK elements per tensor, each chunk a block's fixed tree, and
 * one block adds the chunk partials in a fixed order: the norm is repeatable. */
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda.h"

#define OPT_MAX_OPS 5

/** dst and the sources it updates from, aligned to dst's padded shape. */
typedef struct opt_args {
    int nop;
    int dense; /**< every operand row-major dense: element i is at i */
    int64_t ne[4], numel;
    int64_t st[OPT_MAX_OPS][4];
    float *p[OPT_MAX_OPS];
    const float *s0, *s1; /**< scalars: lr (SGD), lr and t (ADAM), norm (CLIP); s1 is
                               the norm of a clipped SGD */
    float f[4];           /**< the node's float parameters */
    int nesterov;
} opt_args;

static int opt_dense(const int64_t ne[4], const int64_t st[4])
{
    int64_t s = 1;
    for (int d = 3; d >= 0; d--) {
        if (ne[d] != 1 && st[d] != s)
            return 0;
        s *= ne[d];
    }
    return 1;
}

/* Operand 0 is dst; operands 1..nalign are sources 0..nalign−1, checked in core
 * (ex_td_update_of; bit k of written: operand k is updated). */
static ex_status opt_setup(cu_exec *e, const ex_node_exec *n, const char *op, int nsrc, int nalign,
                           unsigned written, opt_args *o)
{
    char why[96];
    memset(o, 0, sizeof *o);
    ex_status st = ex_td_update_of(n, nsrc, nalign, written, o->ne, o->st, why, sizeof why);
    if (st != EX_OK)
        return cu_fail(e, st, "%s: %s", op, why);
    o->nop = 1 + nalign;
    o->numel = o->ne[0] * o->ne[1] * o->ne[2] * o->ne[3];
    o->p[0] = cu_f32(&n->dst);
    o->dense = opt_dense(o->ne, o->st[0]);
    for (int i = 0; i < nalign; i++) {
        o->p[1 + i] = cu_f32(&n->src[i]);
        o->dense = o->dense && opt_dense(o->ne, o->st[1 + i]);
    }
    for (int k = 0; k < 4; k++)
        o->f[k] = n->fp[k];
    return EX_OK;
}

/* A small f32 source read by logical index (lr, hyper, norm): where element i lies. */
static ex_status opt_scalars(cu_exec *e, const char *op, const ex_tdesc *t, int count,
                             const float **p0, const float **p1)
{
    if (!ex_td_valid(t, EX_F32) || ex_td_numel(t) != count)
        return cu_fail(e, EX_ERR_SHAPE, "%s: expected an f32 source of %d element(s)", op, count);
    *p0 = cu_f32(t) + ex_td_at(t, 0);
    if (p1)
        *p1 = cu_f32(t) + ex_td_at(t, 1);
    return EX_OK;
}

enum opt_kind { OPT_SGD, OPT_SGD_CLIP, OPT_ADAM, OPT_CLIP };

/* CLIP's coefficient min(1, max_norm / (norm + 1e-6)), one expression for CLIP and the
 * clipped SGD, so both scale by the same f32 number. */
__device__ __forceinline__ float opt_clip_coef(float max_norm, float norm)
{
    return fminf(1.0f, max_norm / (norm + 1e-6f));
}

/* Element f of an SGD update: p[0] the parameter written, p[1] read, p[2] the gradient,
 * p[3] the momentum; c the clip's coefficient (1: none). */
template <int K>
__device__ __forceinline__ void sgd_elem(float *const *p, const int64_t *f, float lr, float mu,
                                         float wd, float c, int nesterov)
{
    /* the clipped gradient rounded on its own (no fused multiply-add), as CLIP stores it */
    float gc = K == OPT_SGD_CLIP ? __fmul_rn(p[2][f[2]], c) : p[2][f[2]];
    float x = p[1][f[1]], g = gc + wd * x;
    float m = mu * p[3][f[3]] + g;
    p[3][f[3]] = m;
    p[0][f[0]] = x - lr * (nesterov ? g + mu * m : m);
}

/* Element f of an Adam update: p[3], p[4] the moments; bc the bias corrections. */
__device__ __forceinline__ void adam_elem(float *const *p, const int64_t *f, float lr,
                                          const float *hp, const float *bc)
{
    float b1 = hp[0], b2 = hp[1], eps = hp[2], wd = hp[3];
    float x = p[1][f[1]], g = p[2][f[2]] + wd * x;
    float m = b1 * p[3][f[3]] + (1.0f - b1) * g;
    float v = b2 * p[4][f[4]] + (1.0f - b2) * g * g;
    p[3][f[3]] = m;
    p[4][f[4]] = v;
    p[0][f[0]] = x - lr * (m / bc[0]) / (sqrtf(v / bc[1]) + eps);
}

/* Adam's bias corrections 1 − β^t into shared bc, by thread 0, in double: β^t for large t
 * is far below f32 resolution of 1. */
__device__ __forceinline__ void adam_corrections(const float *hp, float t, float *bc)
{
    if (threadIdx.x == 0) {
        bc[0] = (float)(1.0 - pow((double)hp[0], (double)t));
        bc[1] = (float)(1.0 - pow((double)hp[1], (double)t));
    }
    __syncthreads();
}

template <int K> __global__ void opt_kernel(opt_args a, const float *gate)
{
    __shared__ float bc[2];
    if (cu_gated_off(gate))
        return;
    if (K == OPT_ADAM)
        adam_corrections(a.f, *a.s1, bc);
    const float c = K == OPT_SGD_CLIP ? opt_clip_coef(a.f[2], *a.s1) : 1.0f;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < a.numel;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t f[OPT_MAX_OPS];
        for (int k = 0; k < OPT_MAX_OPS; k++)
            f[k] = a.dense ? i : k < a.nop ? cu_off4(a.ne, a.st[k], i) : 0;
        if (K == OPT_SGD || K == OPT_SGD_CLIP)
            sgd_elem<K>(a.p, f, *a.s0, a.f[0], a.f[1], c, a.nesterov);
        else if (K == OPT_ADAM)
            adam_elem(a.p, f, *a.s0, a.f, bc);
        else
            a.p[0][f[0]] = a.p[1][f[1]] * opt_clip_coef(a.f[0], *a.s0);
    }
}

template <int K> static ex_status opt_launch(cu_exec *e, const opt_args *o, const char *op)
{
    if (e->dry)
        return EX_OK;
    cu_launch(e, opt_kernel<K>, cu_blocks(o->numel, CU_THREADS), CU_THREADS, 0, *o, e->gate);
    return cu_launched(e, op);
}

CU_OP(sgd)
{
    opt_args o;
    int clipped = n->nsrc == 5;
    char why[96];
    ex_status st = ex_td_sgd_check(n, why, sizeof why);
    if (st != EX_OK)
        return cu_fail(e, st, "sgd: %s", why);
    st = opt_setup(e, n, "sgd", n->nsrc, 3, 1u | 1u << 3, &o);
    if (st == EX_OK)
        st = opt_scalars(e, "sgd", &n->src[3], 1, &o.s0, NULL);
    if (st != EX_OK)
        return st;
    if (clipped)
        o.s1 = cu_f32(&n->src[4]) + ex_td_at(&n->src[4], 0);
    o.nesterov = n->ip[0] != 0;
    return clipped ? opt_launch<OPT_SGD_CLIP>(e, &o, "sgd") : opt_launch<OPT_SGD>(e, &o, "sgd");
}

CU_OP(adam)
{
    opt_args o;
    ex_status st = opt_setup(e, n, "adam", 5, 4, 1u | 1u << 3 | 1u << 4, &o);
    if (st == EX_OK)
        st = opt_scalars(e, "adam", &n->src[4], 2, &o.s0, &o.s1);
    if (st != EX_OK)
        return st;
    return opt_launch<OPT_ADAM>(e, &o, "adam");
}

/* ---- groups of SGD or ADAM nodes (core/group.h) ---- */

/* Nodes per launch: their pointers and sizes travel as the kernel's parameters (about
 * 14 KB of them). */
#define UPD_PER_LAUNCH 256

/** Up to UPD_PER_LAUNCH dense updates of one kind that share their scalars and float
 *  parameters. Node k has numel[k] elements at p[k][...] and blocks [first[k],
 *  first[k + 1]) of CU_THREADS threads. */
typedef struct upd_group {
    int count;
    int64_t first[UPD_PER_LAUNCH + 1];
    int64_t numel[UPD_PER_LAUNCH];
    float *p[UPD_PER_LAUNCH][OPT_MAX_OPS];
    const float *s0, *s1; /**< as opt_args */
    float f[4];
    int nesterov;
} upd_group;

template <int K> __global__ void upd_group_kernel(upd_group a)
{
    __shared__ float bc[2];
    cu_pdl_sync();
    int lo = 0, hi = a.count - 1; /* the node of this block */
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (a.first[mid] <= (int64_t)blockIdx.x)
            lo = mid;
        else
            hi = mid - 1;
    }
    if (K == OPT_ADAM)
        adam_corrections(a.f, *a.s1, bc);
    int64_t i = ((int64_t)blockIdx.x - a.first[lo]) * blockDim.x + threadIdx.x;
    if (i >= a.numel[lo])
        return;
    const int64_t f[OPT_MAX_OPS] = {i, i, i, i, i};
    if (K == OPT_ADAM)
        adam_elem(a.p[lo], f, *a.s0, a.f, bc);
    else
        sgd_elem<K>(a.p[lo], f, *a.s0, a.f[0], a.f[1],
                    K == OPT_SGD_CLIP ? opt_clip_coef(a.f[2], *a.s1) : 1.0f, a.nesterov);
}

/* Node n of a group, set up as on its own (checked the same way), into o. */
static ex_status upd_setup(cu_exec *e, const ex_node_exec *n, opt_args *o)
{
    if (n->op == EX_OP_ADAM) {
        ex_status st = opt_setup(e, n, "adam", 5, 4, 1u | 1u << 3 | 1u << 4, o);
        return st == EX_OK ? opt_scalars(e, "adam", &n->src[4], 2, &o->s0, &o->s1) : st;
    }
    char why[96];
    ex_status st = ex_td_sgd_check(n, why, sizeof why);
    if (st != EX_OK)
        return cu_fail(e, st, "sgd: %s", why);
    st = opt_setup(e, n, "sgd", n->nsrc, 3, 1u | 1u << 3, o);
    if (st == EX_OK)
        st = opt_scalars(e, "sgd", &n->src[3], 1, &o->s0, NULL);
    if (st == EX_OK && n->nsrc == 5)
        o->s1 = cu_f32(&n->src[4]) + ex_td_at(&n->src[4], 0);
    o->nesterov = n->ip[0] != 0;
    return st;
}

/* One launch of count <= UPD_PER_LAUNCH nodes of the group, described in *a. */
static ex_status upd_launch(cu_exec *e, const ex_node_exec *n, int count, const opt_args *head,
                            upd_group *a)
{
    a->count = count;
    a->s0 = head->s0;
    a->s1 = head->s1;
    memcpy(a->f, head->f, sizeof a->f);
    a->nesterov = head->nesterov;
    a->first[0] = 0;
    for (int k = 0; k < count; k++) {
        opt_args o;
        ex_status st = upd_setup(e, &n[k], &o);
        if (st != EX_OK)
            return st;
        if (!o.dense || o.s0 != a->s0 || o.s1 != a->s1)
            return cu_fail(e, EX_ERR_ARG,
                           "%s: a group's nodes must be dense and share their scalars",
                           ex_op_name(n->op));
        memcpy(a->p[k], o.p, sizeof a->p[k]);
        a->numel[k] = o.numel;
        a->first[k + 1] = a->first[k] + (o.numel + CU_THREADS - 1) / CU_THREADS;
    }
    if (e->dry || a->first[count] == 0)
        return EX_OK;
    unsigned blocks = (unsigned)a->first[count];
    if (n->op == EX_OP_ADAM)
        cu_launch(e, upd_group_kernel<OPT_ADAM>, blocks, CU_THREADS, 0, *a);
    else if (n->nsrc == 5)
        cu_launch(e, upd_group_kernel<OPT_SGD_CLIP>, blocks, CU_THREADS, 0, *a);
    else
        cu_launch(e, upd_group_kernel<OPT_SGD>, blocks, CU_THREADS, 0, *a);
    return cu_launched(e, ex_op_name(n->op));
}

ex_status cu_update_group(cu_exec *e, const ex_node_exec *n, int32_t count)
{
    opt_args head;
    ex_status st = upd_setup(e, n, &head);
    upd_group *a = st == EX_OK ? (upd_group *)malloc(sizeof *a) : NULL;
    if (st == EX_OK && !a)
        return cu_fail(e, EX_ERR_NOMEM, "%s: out of host memory", ex_op_name(n->op));
    for (int32_t b = 0; b < count && st == EX_OK; b += UPD_PER_LAUNCH)
        st =
            upd_launch(e, n + b, count - b < UPD_PER_LAUNCH ? count - b : UPD_PER_LAUNCH, &head, a);
    free(a);
    return st;
}

CU_OP(clip)
{
    opt_args o;
    ex_status st = opt_setup(e, n, "clip", 2, 1, 1u, &o);
    if (st == EX_OK)
        st = opt_scalars(e, "clip", &n->src[1], 1, &o.s0, NULL);
    if (st != EX_OK)
        return st;
    return opt_launch<OPT_CLIP>(e, &o, "clip");
}

/* ---- GRAD_NORM ---- */

/* Tensors per launch: their descriptors travel as kernel parameters. */
#define NORM_BATCH 16

/** Up to NORM_BATCH tensors; chunk c of the launch belongs to the last tensor t with
 *  first[t] <= c, and its partial goes to part[base + c]. */
typedef struct norm_args {
    int nt;
    cu_t4 t[NORM_BATCH];
    int64_t numel[NORM_BATCH];
    int64_t first[NORM_BATCH + 1];
    int64_t base;
} norm_args;

__global__ void norm_chunk_kernel(norm_args a, double *part, const float *gate)
{
    __shared__ double sh[32];
    if (cu_gated_off(gate))
        return;
    int64_t c = blockIdx.x;
    int t = 0;
    while (t + 1 < a.nt && a.first[t + 1] <= c)
        t++;
    const cu_t4 &x = a.t[t];
    int64_t k0 = (c - a.first[t]) * CU_CHUNK, m = a.numel[t];
    int64_t k1 = k0 + CU_CHUNK < m ? k0 + CU_CHUNK : m;
    double acc = 0.0;
    for (int64_t k = k0 + threadIdx.x; k < k1; k += blockDim.x) {
        double v = ((const float *)x.p)[cu_off4(x.ne, x.st, k)];
        acc += v * v;
    }
    acc = cu_block_sum(acc, sh);
    if (threadIdx.x == 0)
        part[a.base + c] = acc;
}

__global__ void norm_sum_kernel(const double *part, int64_t count, float *dst, const float *gate)
{
    __shared__ double sh[32];
    if (cu_gated_off(gate))
        return;
    double acc = 0.0;
    for (int64_t i = threadIdx.x; i < count; i += blockDim.x)
        acc += part[i];
    acc = cu_block_sum(acc, sh);
    if (threadIdx.x == 0)
        *dst = (float)sqrt(acc);
}

CU_OP(grad_norm)
{
    char why[96];
    ex_status st = ex_td_grad_norm_check(n, why, sizeof why);
    if (st != EX_OK)
        return cu_fail(e, st, "grad_norm: %s", why);
    int64_t chunks = 0;
    for (int i = 0; i < n->nsrc; i++)
        chunks += (ex_td_numel(&n->src[i]) + CU_CHUNK - 1) / CU_CHUNK;
    void *ws = NULL;
    st = cu_scratch(e, sizeof(double) * (size_t)(chunks + 1), &ws);
    if (st != EX_OK || e->dry)
        return st;
    int64_t base = 0;
    for (int i0 = 0; i0 < n->nsrc; i0 += NORM_BATCH) {
        norm_args a;
        memset(&a, 0, sizeof a);
        a.base = base;
        for (int i = i0; i < n->nsrc && a.nt < NORM_BATCH; i++, a.nt++) {
            a.t[a.nt] = cu_t4_of(&n->src[i]);
            a.numel[a.nt] = ex_td_numel(&n->src[i]);
            a.first[a.nt + 1] = a.first[a.nt] + (a.numel[a.nt] + CU_CHUNK - 1) / CU_CHUNK;
        }
        int64_t cnt = a.first[a.nt];
        if (cnt > 0x7fffffff)
            return cu_fail(e, EX_ERR_UNSUPPORTED, "grad_norm: too many chunks");
        if (cnt > 0)
            cu_launch(e, norm_chunk_kernel, (unsigned)cnt, CU_THREADS, 0, a, (double *)ws, e->gate);
        base += cnt;
    }
    cu_launch(e, norm_sum_kernel, 1, 1024, 0, (const double *)ws, base, cu_f32(&n->dst), e->gate);
    return cu_launched(e, "grad_norm");
}
