/* Reductions: SUM, MEAN and MAX over a mask of axes with kept dims, and MAX_BWD.
 *
 * The reduced elements of each output, in row-major order of the reduced dims, are cut
 * into chunks of CU_CHUNK. A block reduces one chunk in double with a fixed tree; when an
 * output has several chunks their partials are added in chunk order by a second kernel.
 * Short reductions (at most RED_SHORT elements) run one output per thread in index order.
 * Every order depends on the shape only, so results are bitwise repeatable. */
#include <string.h>

#include "cuda/cuda.h"

#define RED_SHORT 32

typedef enum red_kind { RED_SUM, RED_MEAN, RED_MAX } red_kind;

/** Source dims split into kept ones (one output each) and reduced ones (ex_td_reduce);
 *  size-1 dims are dropped and an empty list stands as one dim of size 1. Then what the
 *  kernels need besides. */
typedef struct red_geom {
    int nk, nr;
    int64_t kne[4], kxs[4], kds[4]; /**< kept: size, x stride, dst stride */
    int64_t rne[4], rxs[4];         /**< reduced: size, x stride */
    int64_t nout, m, nch;           /**< outputs, elements per output, chunks per output */
    const float *x;
    float *dst;
    int kind;
} red_geom;

static ex_status red_setup(cu_exec *e, const ex_node_exec *n, const char *op, red_geom *g)
{
    ex_td_reduce r;
    char why[256];
    ex_status st = ex_td_reduce_of(n, &r, why, sizeof why);
    if (st != EX_OK)
        return cu_fail(e, st, "%s: %s", op, why);
    g->nk = r.nk + (r.nk == 0);
    g->nr = r.nr + (r.nr == 0);
    for (int k = 0; k < 4; k++) {
        g->kne[k] = r.kne[k];
        g->kxs[k] = r.kxs[k];
        g->kds[k] = r.kds[k];
        g->rne[k] = r.rne[k];
        g->rxs[k] = r.rxs[k];
    }
    g->nout = r.nout;
    g->m = r.m;
    g->nch = (g->m + CU_CHUNK - 1) / CU_CHUNK;
    g->x = cu_f32(&n->src[0]);
    g->dst = cu_f32(&n->dst);
    return EX_OK;
}

/* Where output o reads x and writes dst. */
__device__ void red_out(const red_geom &g, int64_t o, int64_t *xoff, int64_t *doff)
{
    *xoff = *doff = 0;
    for (int k = g.nk - 1; k >= 0; k--) {
        int64_t i = o % g.kne[k];
        o /= g.kne[k];
        *xoff += i * g.kxs[k];
        *doff += i * g.kds[k];
    }
}

/* Offset of the reduced element k (row-major over the reduced dims). */
__device__ __forceinline__ int64_t red_in(const red_geom &g, int64_t k)
{
    int64_t off = 0;
    for (int d = g.nr - 1; d >= 0; d--) {
        off += (k % g.rne[d]) * g.rxs[d];
        k /= g.rne[d];
    }
    return off;
}

__device__ __forceinline__ float red_finish(const red_geom &g, double acc)
{
    return (float)(g.kind == RED_MEAN ? acc / (double)g.m : acc);
}

/* One output per thread, its elements in index order. */
__global__ void red_short_kernel(red_geom g, const float *gate)
{
    if (cu_gated_off(gate))
        return;
    for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < g.nout;
         o += (int64_t)gridDim.x * blockDim.x) {
        int64_t xoff, doff;
        red_out(g, o, &xoff, &doff);
        double acc = g.kind == RED_MAX ? -INFINITY : 0.0;
        for (int64_t k = 0; k < g.m; k++) {
            double v = g.x[xoff + red_in(g, k)];
            acc = g.kind == RED_MAX ? cu_max2(acc, v) : acc + v;
        }
        g.dst[doff] = red_finish(g, acc);
    }
}

/* Block (o, c) reduces chunk c of output o: into dst when it is the only chunk, else
 * into part[o * nch + c]. */
__global__ void red_chunk_kernel(red_geom g, double *part, const float *gate)
{
    __shared__ double sh[32];
    if (cu_gated_off(gate))
        return;
    int64_t it = blockIdx.x, o = it / g.nch, c = it % g.nch;
    int64_t k0 = c * CU_CHUNK, k1 = k0 + CU_CHUNK < g.m ? k0 + CU_CHUNK : g.m;
    int64_t xoff, doff;
    red_out(g, o, &xoff, &doff);
    int is_max = g.kind == RED_MAX;
    double acc = is_max ? -INFINITY : 0.0;
    for (int64_t k = k0 + threadIdx.x; k < k1; k += blockDim.x) {
        double v = g.x[xoff + red_in(g, k)];
        acc = is_max ? cu_max2(acc, v) : acc + v;
    }
    acc = is_max ? cu_block_max(acc, sh) : cu_block_sum(acc, sh);
    if (threadIdx.x != 0)
        return;
    if (g.nch == 1)
        g.dst[doff] = red_finish(g, acc);
    else
        part[it] = acc;
}

/* Each output adds (or takes the maximum of) its chunk partials in chunk order. */
__global__ void red_combine_kernel(red_geom g, const double *part, const float *gate)
{
    if (cu_gated_off(gate))
        return;
    for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < g.nout;
         o += (int64_t)gridDim.x * blockDim.x) {
        int64_t xoff, doff;
        red_out(g, o, &xoff, &doff);
        double acc = g.kind == RED_MAX ? -INFINITY : 0.0;
        for (int64_t c = 0; c < g.nch; c++)
            acc = g.kind == RED_MAX ? cu_max2(acc, part[o * g.nch + c]) : acc + part[o * g.nch + c];
        g.dst[doff] = red_finish(g, acc);
    }
}

static ex_status red_exec(cu_exec *e, const ex_node_exec *n, const char *op, red_kind kind)
{
    red_geom g = {};
    ex_status st = red_setup(e, n, op, &g);
    if (st != EX_OK)
        return st;
    g.kind = kind;
    void *ws = NULL;
    if (g.m > RED_SHORT && g.nch > 1)
        st = cu_scratch(e, sizeof(double) * (size_t)(g.nout * g.nch), &ws);
    if (st != EX_OK || e->dry)
        return st;
    if (g.m <= RED_SHORT) {
        cu_launch(e, red_short_kernel, cu_blocks(g.nout, CU_THREADS), CU_THREADS, 0, g, e->gate);
        return cu_launched(e, op);
    }
    int64_t blocks = g.nout * g.nch;
    if (blocks > 0x7fffffff)
        return cu_fail(e, EX_ERR_UNSUPPORTED, "%s: %lld blocks exceed the grid", op,
                       (long long)blocks);
    cu_launch(e, red_chunk_kernel, (unsigned)blocks, CU_THREADS, 0, g, (double *)ws, e->gate);
    if (g.nch > 1)
        cu_launch(e, red_combine_kernel, cu_blocks(g.nout, CU_THREADS), CU_THREADS, 0, g,
                  (const double *)ws, e->gate);
    return cu_launched(e, op);
}

CU_OP(sum)
{
    return red_exec(e, n, "sum", RED_SUM);
}

CU_OP(mean)
{
    return red_exec(e, n, "mean", RED_MEAN);
}

CU_OP(max)
{
    return red_exec(e, n, "max", RED_MAX);
}

/** MAX_BWD's operands aligned to dst's padded shape: dst, x, y, dy. */
typedef struct mb_args {
    int64_t ne[4];
    int64_t st[4][4];
    float *p[4];
} mb_args;

__global__ void max_bwd_kernel(mb_args a, int64_t n, const float *gate)
{
    if (cu_gated_off(gate))
        return;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float xv = a.p[1][cu_off4(a.ne, a.st[1], i)], yv = a.p[2][cu_off4(a.ne, a.st[2], i)];
        float g = a.p[3][cu_off4(a.ne, a.st[3], i)];
        a.p[0][cu_off4(a.ne, a.st[0], i)] = xv == yv ? g : 0.0f;
    }
}

CU_OP(max_bwd)
{
    if (n->nsrc != 3 || n->src == NULL)
        return cu_fail(e, EX_ERR_ARG, "max_bwd: %d sources, expected 3", n->nsrc);
    if (n->dst.ndim < 1 || n->dst.ndim > 4 || n->dst.dtype != EX_F32)
        return cu_fail(e, EX_ERR_ARG, "max_bwd: dst must be f32 with 1 to 4 dims");
    mb_args a;
    ex_td_shape4(&n->dst, a.ne, a.st[0]);
    if (!ex_td_dst_ok(a.ne, a.st[0]))
        return cu_fail(e, EX_ERR_ARG, "max_bwd: dst broadcasts (stride 0)");
    a.p[0] = cu_f32(&n->dst);
    for (int i = 0; i < 3; i++) {
        if (n->src[i].dtype != EX_F32 || !ex_td_align(&n->src[i], a.ne, a.st[1 + i]))
            return cu_fail(e, EX_ERR_SHAPE, "max_bwd: source %d is not f32 of dst's shape", i);
        a.p[1 + i] = cu_f32(&n->src[i]);
    }
    if (e->dry)
        return EX_OK;
    int64_t numel = a.ne[0] * a.ne[1] * a.ne[2] * a.ne[3];
    cu_launch(e, max_bwd_kernel, cu_blocks(numel, CU_THREADS), CU_THREADS, 0, a, numel, e->gate);
    return cu_launched(e, "max_bwd");
}
