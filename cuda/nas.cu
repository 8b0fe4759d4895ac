/* NAS kernels: MIXED_SUM, MIXED_SUM_BWD_W, GUMBEL_SOFTMAX, GUMBEL_SOFTMAX_BWD, HARDMAX_ST,
 * ENTROPY, ENTROPY_BWD, TOPK_MASK.
 *
 * The mixed sum reads its mask on the device, so a search that changes the active set
 * from step to step replays one captured graph: an inactive candidate is never read. Its
 * backward computes the gradient of every weight in one pass over dy: each block dots its
 * chunk of dy with every active candidate and reduces the products with a fixed tree,
 * and one block adds each candidate's chunk partials with a fixed tree (no atomics,
 * repeatable).
 *
 * The row ops treat all dims but the last as rows of K (an edge's candidates), one warp
 * per row, summing in double as the CPU does. */
#include <string.h>

#include "core/philox.h"
#include "cuda/cuda.h"

/* Candidates per mixed op: one weight index per candidate lives in ip[]. */
#define MIX_MAX EX_NODE_IPARAMS
#define ROWS_PER_BLOCK (CU_THREADS / 32)
/* Elements of dy per block of the weight gradient: at least this many, and more for
 * large tensors so that a block's reduction of its partials is paid over enough loads
 * while the grid (about MIX_BLOCKS blocks) still fills the GPU. A function of the size
 * alone, so results stay repeatable. */
#define MIX_CHUNK 1024
#define MIX_BLOCKS 2048

/** A mixed op's candidates as kernels take them. A candidate whose shape does not fit
 *  (bit j of bad) fails the node only if its mask entry turns out to be active. */
typedef struct mix_args {
    int n;
    unsigned bad;
    int64_t ne[4];
    int64_t st[1 + MIX_MAX][4]; /**< operand 0: dst (forward) or dy (backward) */
    float *p[1 + MIX_MAX];
    const float *mask[MIX_MAX]; /**< candidate j's mask entry */
    const float *w[MIX_MAX];    /**< candidate j's weight (forward) */
    int idx[MIX_MAX];           /**< candidate j's weight index */
    int64_t numel, nch;         /**< elements; backward: chunks of dy */
    int64_t chunk;              /**< backward: elements per chunk, a multiple of MIX_CHUNK */
    int dense;                  /**< every operand row-major dense: element i is at i */
    int vec4; /**< dense, numel % 4 == 0 and every pointer 16-byte aligned: float4 loads */
    cu_t4 dw; /**< backward: dst [K] */
    int64_t k;
} mix_args;

/* The node checked (core/tdesc.h) into m, with each candidate's weight and mask entry. */
static ex_status mix_select(cu_exec *e, const ex_node_exec *n, const char *op, mix_args *m)
{
    ex_td_mix g;
    char why[96];
    memset(m, 0, sizeof *m);
    ex_status st = ex_td_mix_of(n, &g, why, sizeof why);
    if (st != EX_OK)
        return cu_fail(e, st, "%s: %s", op, why);
    m->n = g.n;
    m->bad = g.bad;
    m->k = g.k;
    memcpy(m->ne, g.ne, sizeof m->ne);
    memcpy(m->st, g.st, sizeof m->st);
    const ex_tdesc *mask = &n->src[1], *w = n->op == EX_OP_MIXED_SUM ? &n->src[0] : NULL;
    for (int j = 0; j < m->n; j++) {
        m->idx[j] = n->ip[j];
        m->mask[j] = cu_f32(mask) + ex_td_at(mask, n->ip[j]);
        m->w[j] = w ? cu_f32(w) + ex_td_at(w, n->ip[j]) : NULL;
    }
    return EX_OK;
}

/* The operands' addresses and how the kernels may read them. */
static void mix_align(const ex_node_exec *n, mix_args *m)
{
    m->dense = cu_dense4(m->ne, m->st[0]);
    for (int j = 0; j < m->n; j++) {
        const ex_tdesc *x = &n->src[2 + j];
        m->p[1 + j] = x->buf ? cu_f32(x) : NULL;
        m->dense = m->dense && cu_dense4(m->ne, m->st[1 + j]);
    }
    int64_t numel = m->ne[0] * m->ne[1] * m->ne[2] * m->ne[3];
    m->vec4 = m->dense && numel % 4 == 0 && (uintptr_t)m->p[0] % 16 == 0;
    for (int j = 0; j < m->n; j++)
        m->vec4 = m->vec4 && (uintptr_t)m->p[1 + j] % 16 == 0;
}

/* Element q of a float4. */
__device__ __forceinline__ float f4_at(const float4 &v, int q)
{
    return q == 0 ? v.x : q == 1 ? v.y : q == 2 ? v.z : v.w;
}

/* Offsets of element i in operand 0 and every candidate: one decomposition for all. */
__device__ __forceinline__ void mix_offsets(const mix_args &a, int64_t i, int64_t *off)
{
    int64_t c[4];
    if (!a.dense)
        cu_coords4(a.ne, i, c);
#pragma unroll
    for (int k = 0; k <= MIX_MAX; k++)
        off[k] = a.dense ? i : cu_dot4(c, a.st[k]);
}

/* Which candidates are active (bit j), with their coefficients; a bad active candidate
 * is reported once, by thread 0 of block 0. */
__device__ unsigned mix_active(const mix_args &a, float *coef, long long *status, long long node)
{
    unsigned act = 0;
    for (int j = 0; j < a.n; j++) {
        if (*a.mask[j] == 0.0f)
            continue;
        act |= 1u << j;
        coef[j] = a.w[j] ? *a.w[j] : 1.0f;
    }
    unsigned bad = act & a.bad;
    if (bad && blockIdx.x == 0 && threadIdx.x == 0)
        cu_report(status, node, CU_STATUS_SHAPE, __ffs(bad) - 1, 0);
    return act & ~a.bad;
}

__global__ void mix_kernel(mix_args a, long long *status, long long node, const float *gate)
{
    if (cu_gated_off(gate))
        return;
    float coef[MIX_MAX];
    unsigned act = mix_active(a, coef, status, node);
    if (a.vec4) { /* the same sums in the same order, four lanes at a time */
        for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < a.numel / 4;
             i += (int64_t)gridDim.x * blockDim.x) {
            float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
            for (int j = 0; j < MIX_MAX; j++)
                if ((act >> j) & 1) {
                    float4 x = ((const float4 *)a.p[1 + j])[i];
                    acc.x += coef[j] * x.x;
                    acc.y += coef[j] * x.y;
                    acc.z += coef[j] * x.z;
                    acc.w += coef[j] * x.w;
                }
            ((float4 *)a.p[0])[i] = acc;
        }
        return;
    }
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < a.numel;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t off[1 + MIX_MAX];
        mix_offsets(a, i, off);
        float acc = 0.0f;
#pragma unroll
        for (int j = 0; j < MIX_MAX; j++)
            if ((act >> j) & 1)
                acc += coef[j] * a.p[1 + j][off[1 + j]];
        a.p[0][off[0]] = acc;
    }
}

CU_OP(mixed_sum)
{
    mix_args m;
    ex_status st = mix_select(e, n, "mixed_sum", &m);
    if (st != EX_OK)
        return st;
    if (e->dry)
        return EX_OK;
    m.p[0] = cu_f32(&n->dst);
    mix_align(n, &m);
    m.numel = m.ne[0] * m.ne[1] * m.ne[2] * m.ne[3];
    cu_launch(e, mix_kernel, cu_blocks(m.vec4 ? m.numel / 4 : m.numel, CU_THREADS), CU_THREADS, 0,
              m, e->status, (long long)e->node, e->gate);
    return cu_launched(e, "mixed_sum");
}

/* Block c dots chunk c of dy with every active candidate: part[j * nch + c]. */
__global__ void mix_dot_kernel(mix_args a, double *part, long long *status, long long node,
                               const float *gate)
{
    __shared__ double sh[32];
    if (cu_gated_off(gate))
        return;
    float coef[MIX_MAX];
    unsigned act = mix_active(a, coef, status, node);
    int64_t c = blockIdx.x, k0 = c * a.chunk;
    int64_t k1 = k0 + a.chunk < a.numel ? k0 + a.chunk : a.numel;
    double s[MIX_MAX];
#pragma unroll
    for (int j = 0; j < MIX_MAX; j++)
        s[j] = 0.0;
    for (int64_t i = k0 / 4 + threadIdx.x; a.vec4 && i < k1 / 4; i += blockDim.x) {
        float4 dy = ((const float4 *)a.p[0])[i];
#pragma unroll
        for (int j = 0; j < MIX_MAX; j++)
            if ((act >> j) & 1) {
                float4 x = ((const float4 *)a.p[1 + j])[i];
                for (int q = 0; q < 4; q++)
                    s[j] += (double)f4_at(dy, q) * f4_at(x, q);
            }
    }
    for (int64_t i = k0 + threadIdx.x; !a.vec4 && i < k1; i += blockDim.x) {
        int64_t off[1 + MIX_MAX];
        mix_offsets(a, i, off);
        double dy = a.p[0][off[0]];
#pragma unroll
        for (int j = 0; j < MIX_MAX; j++)
            if ((act >> j) & 1)
                s[j] += dy * a.p[1 + j][off[1 + j]];
    }
#pragma unroll
    for (int j = 0; j < MIX_MAX; j++) {
        if (!((act >> j) & 1))
            continue; /* act is the same in every thread of the block */
        double v = cu_block_sum(s[j], sh);
        if (threadIdx.x == 0)
            part[j * a.nch + c] = v;
    }
}

/* One block: each active candidate's chunk partials added with a fixed tree, then
 * dst[k] = Σ over the active candidates with weight index k, in candidate order; 0 for
 * every other entry. */
__global__ void mix_dw_kernel(mix_args a, const double *part, const float *gate)
{
    __shared__ double sh[32], tot[MIX_MAX];
    if (cu_gated_off(gate))
        return;
    unsigned act = 0;
    for (int j = 0; j < a.n; j++)
        act |= (unsigned)(*a.mask[j] != 0.0f) << j;
    act &= ~a.bad;
    for (int j = 0; j < a.n; j++) {
        if (!((act >> j) & 1))
            continue; /* the same in every thread */
        double v = 0.0;
        for (int64_t c = threadIdx.x; c < a.nch; c += blockDim.x)
            v += part[j * a.nch + c];
        v = cu_block_sum(v, sh);
        if (threadIdx.x == 0)
            tot[j] = v;
    }
    __syncthreads();
    for (int64_t k = threadIdx.x; k < a.k; k += blockDim.x) {
        double acc = 0.0;
        for (int j = 0; j < a.n; j++)
            if (((act >> j) & 1) && a.idx[j] == k)
                acc += tot[j];
        ((float *)a.dw.p)[cu_off4(a.dw.ne, a.dw.st, k)] = (float)acc;
    }
}

CU_OP(mixed_sum_bwd_w)
{
    mix_args m;
    ex_status st = mix_select(e, n, "mixed_sum_bwd_w", &m);
    if (st != EX_OK)
        return st;
    const ex_tdesc *dy = &n->src[0], *d = &n->dst;
    m.numel = m.ne[0] * m.ne[1] * m.ne[2] * m.ne[3];
    int64_t per = (m.numel + MIX_BLOCKS - 1) / MIX_BLOCKS;
    m.chunk = (per + MIX_CHUNK - 1) / MIX_CHUNK * MIX_CHUNK;
    m.chunk = m.chunk > MIX_CHUNK ? m.chunk : MIX_CHUNK;
    m.nch = (m.numel + m.chunk - 1) / m.chunk;
    void *ws = NULL;
    st = cu_scratch(e, sizeof(double) * (size_t)(MIX_MAX * m.nch + 1), &ws);
    if (st != EX_OK || e->dry)
        return st;
    if (m.nch > 0x7fffffff)
        return cu_fail(e, EX_ERR_UNSUPPORTED, "mixed_sum_bwd_w: dy is too large");
    m.p[0] = cu_f32(dy);
    mix_align(n, &m);
    m.dw = cu_t4_of(d);
    if (m.nch > 0)
        cu_launch(e, mix_dot_kernel, (unsigned)m.nch, CU_THREADS, 0, m, (double *)ws, e->status,
                  (long long)e->node, e->gate);
    cu_launch(e, mix_dw_kernel, 1, 1024, 0, m, (const double *)ws, e->gate);
    return cu_launched(e, "mixed_sum_bwd_w");
}

/* ---- row ops over [E, K] ---- */

/** dst and the first nalign sources aligned to one padded shape; dims 0..2 index rows. */
typedef struct rows_args {
    int64_t ne[4];
    int64_t st[3][4];
    float *base[3];
    int64_t rows;
    /* op parameters */
    const float *tau;
    const int32_t *c0, *c1;
    uint32_t k0, k1;
    int64_t topk;
    float threshold;
} rows_args;

/* The node checked (core/tdesc.h): dst and its aligned sources as the rows read them. */
static ex_status rows_setup(cu_exec *e, const ex_node_exec *n, const char *op, rows_args *o)
{
    char why[96];
    int nalign = 0;
    memset(o, 0, sizeof *o);
    ex_status st = ex_td_nas_rows_of(n, o->ne, o->st, &nalign, why, sizeof why);
    if (st != EX_OK)
        return cu_fail(e, st, "%s: %s", op, why);
    o->rows = o->ne[0] * o->ne[1] * o->ne[2];
    o->base[0] = cu_f32(&n->dst);
    for (int i = 0; i < nalign; i++)
        o->base[1 + i] = cu_f32(&n->src[i]);
    return EX_OK;
}

enum rows_kind { ROW_GUMBEL, ROW_GUMBEL_BWD, ROW_HARDMAX, ROW_ENTROPY, ROW_ENTROPY_BWD, ROW_TOPK };

/* log(max(p, 1e-30)): a zero probability adds nothing instead of 0 · −inf. */
__device__ __forceinline__ double safe_log(float p)
{
    return log(p > 1e-30f ? (double)p : 1e-30);
}

/** One row for one warp: dst, the sources and their strides along the row. */
typedef struct row_view {
    int64_t r, k, sd, s0, s1;
    float *d;
    const float *x, *y;
} row_view;

__device__ void row_gumbel(const rows_args &a, const row_view &v, int lane)
{
    uint32_t c0 = (uint32_t)*a.c0, c1 = (uint32_t)*a.c1;
    float tau = *a.tau, m = -INFINITY;
    for (int64_t j = lane; j < v.k; j += 32) {
        float u = ex_philox_uniform(a.k0, a.k1, c0, c1, (uint64_t)(v.r * v.k + j));
        u = fminf(fmaxf(u, 1e-10f), 1.0f - 1e-7f);
        float z = (v.x[j * v.s0] - logf(-logf(u))) / tau;
        v.d[j * v.sd] = z; /* staged in dst, which no source aliases */
        m = z > m ? z : m;
    }
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, m, o);
        m = w > m ? w : m;
    }
    double sum = 0.0;
    for (int64_t j = lane; j < v.k; j += 32)
        sum += exp((double)v.d[j * v.sd] - m);
    sum = cu_warp_sum(sum);
    for (int64_t j = lane; j < v.k; j += 32)
        v.d[j * v.sd] = (float)(exp((double)v.d[j * v.sd] - m) / sum);
}

__device__ void row_gumbel_bwd(const rows_args &a, const row_view &v, int lane)
{
    double dot = 0.0, tau = *a.tau;
    for (int64_t j = lane; j < v.k; j += 32)
        dot += (double)v.y[j * v.s1] * v.x[j * v.s0];
    dot = cu_warp_sum(dot);
    for (int64_t j = lane; j < v.k; j += 32)
        v.d[j * v.sd] = (float)(v.x[j * v.s0] * ((double)v.y[j * v.s1] - dot) / tau);
}

/* Rank of j = how many entries beat it (larger, or equal at a lower index); NaN beats
 * nothing and is never kept. */
__device__ void row_topk(const rows_args &a, const row_view &v, int lane)
{
    for (int64_t j = lane; j < v.k; j += 32) {
        float x = v.x[j * v.s0];
        int64_t rank = 0;
        for (int64_t i = 0; i < v.k && rank < a.topk; i++) {
            float w = v.x[i * v.s0];
            rank += w > x || (w == x && i < j);
        }
        v.d[j * v.sd] = rank < a.topk && x >= a.threshold ? 1.0f : 0.0f;
    }
}

template <int K> __global__ void rows_kernel(rows_args a, const float *gate)
{
    if (cu_gated_off(gate))
        return;
    int lane = threadIdx.x & 31;
    row_view v;
    v.r = blockIdx.x * (int64_t)ROWS_PER_BLOCK + (threadIdx.x >> 5);
    if (v.r >= a.rows)
        return;
    v.k = a.ne[3];
    v.sd = a.st[0][3];
    v.s0 = a.st[1][3];
    v.s1 = a.st[2][3];
    v.d = a.base[0] + cu_row_off(a.ne, a.st[0], v.r);
    v.x = a.base[1] + cu_row_off(a.ne, a.st[1], v.r);
    v.y = a.base[2] ? a.base[2] + cu_row_off(a.ne, a.st[2], v.r) : NULL;
    if (K == ROW_GUMBEL) {
        row_gumbel(a, v, lane);
    } else if (K == ROW_GUMBEL_BWD) {
        row_gumbel_bwd(a, v, lane);
    } else if (K == ROW_HARDMAX) {
        int64_t best = cu_row_argmax(v.x, v.s0, v.k, lane);
        for (int64_t j = lane; j < v.k; j += 32)
            v.d[j * v.sd] = j == best ? 1.0f : 0.0f;
    } else if (K == ROW_ENTROPY) {
        double h = 0.0;
        for (int64_t j = lane; j < v.k; j += 32)
            h -= v.x[j * v.s0] * safe_log(v.x[j * v.s0]);
        h = cu_warp_sum(h);
        if (lane == 0)
            v.d[0] = (float)h;
    } else if (K == ROW_ENTROPY_BWD) {
        for (int64_t j = lane; j < v.k; j += 32)
            v.d[j * v.sd] = (float)(-v.y[j * v.s1] * (safe_log(v.x[j * v.s0]) + 1.0));
    } else {
        row_topk(a, v, lane);
    }
}

template <int K> static ex_status rows_run(cu_exec *e, const rows_args *o, const char *op)
{
    if (e->dry)
        return EX_OK;
    int64_t blocks = (o->rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
    if (blocks > 0x7fffffff)
        return cu_fail(e, EX_ERR_UNSUPPORTED, "%s: %lld rows exceed the grid", op,
                       (long long)o->rows);
    cu_launch(e, rows_kernel<K>, (unsigned)blocks, CU_THREADS, 0, *o, e->gate);
    return cu_launched(e, op);
}

CU_OP(gumbel_softmax)
{
    rows_args o;
    ex_status st = rows_setup(e, n, "gumbel_softmax", &o);
    if (st != EX_OK)
        return st;
    const ex_tdesc *ct = &n->src[2];
    o.tau = cu_f32(&n->src[1]);
    o.c0 = (const int32_t *)cu_ptr(ct) + ex_td_at(ct, 0);
    o.c1 = (const int32_t *)cu_ptr(ct) + ex_td_at(ct, 1);
    o.k0 = (uint32_t)n->ip[0];
    o.k1 = (uint32_t)n->ip[1];
    return rows_run<ROW_GUMBEL>(e, &o, "gumbel_softmax");
}

CU_OP(gumbel_softmax_bwd)
{
    rows_args o;
    ex_status st = rows_setup(e, n, "gumbel_softmax_bwd", &o);
    if (st != EX_OK)
        return st;
    o.tau = cu_f32(&n->src[2]);
    return rows_run<ROW_GUMBEL_BWD>(e, &o, "gumbel_softmax_bwd");
}

CU_OP(hardmax_st)
{
    rows_args o;
    ex_status st = rows_setup(e, n, "hardmax_st", &o);
    return st == EX_OK ? rows_run<ROW_HARDMAX>(e, &o, "hardmax_st") : st;
}

CU_OP(entropy)
{
    rows_args o;
    ex_status st = rows_setup(e, n, "entropy", &o);
    return st == EX_OK ? rows_run<ROW_ENTROPY>(e, &o, "entropy") : st;
}

CU_OP(entropy_bwd)
{
    rows_args o;
    ex_status st = rows_setup(e, n, "entropy_bwd", &o);
    return st == EX_OK ? rows_run<ROW_ENTROPY_BWD>(e, &o, "entropy_bwd") : st;
}

CU_OP(topk_mask)
{
    rows_args o;
    ex_status st = rows_setup(e, n, "topk_mask", &o);
    if (st != EX_OK)
        return st;
    o.topk = n->ip[0];
    o.threshold = n->fp[0];
    return rows_run<ROW_TOPK>(e, &o, "topk_mask");
}
