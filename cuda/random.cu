/* Random kernels: RAND_UNIFORM, RAND_NORMAL. Element i (row-major logical index of dst)
 * takes draw i of the Philox stream (key ip0, ip1; counter read on the device), the
 * arithmetic of core/philox.h, so every backend gives the same stream for a seed (the
 * normal's log, sqrt and cos may differ from the host's in the last bit). */
#include "core/philox.h"
#include "cuda/cuda.h"

typedef struct rnd_args {
    uint32_t k0, k1;
    const int32_t *c0, *c1;
    float a, b;
    cu_t4 d;
    int dense;
    int normal;
} rnd_args;

__global__ void rnd_kernel(rnd_args r, int64_t m, const float *gate)
{
    if (cu_gated_off(gate))
        return;
    uint32_t c0 = (uint32_t)*r.c0, c1 = (uint32_t)*r.c1;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < m;
         i += (int64_t)gridDim.x * blockDim.x) {
        float v = r.normal ? r.a + r.b * ex_philox_normal(r.k0, r.k1, c0, c1, (uint64_t)i)
                           : r.a + (r.b - r.a) * ex_philox_uniform(r.k0, r.k1, c0, c1, (uint64_t)i);
        ((float *)r.d.p)[r.dense ? i : cu_off4(r.d.ne, r.d.st, i)] = v;
    }
}

static int rnd_contiguous(const ex_tdesc *t)
{
    int64_t s = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->ne[d] != 1 && t->st[d] != s)
            return 0;
        s *= t->ne[d];
    }
    return 1;
}

static ex_status rnd_fill(cu_exec *e, const ex_node_exec *n, const char *op, int normal)
{
    char why[96];
    ex_status st = ex_td_rand_check(n, why, sizeof why);
    if (st != EX_OK)
        return cu_fail(e, st, "%s: %s", op, why);
    const ex_tdesc *c = &n->src[0], *d = &n->dst;
    if (e->dry)
        return EX_OK;
    rnd_args r;
    r.k0 = (uint32_t)n->ip[0];
    r.k1 = (uint32_t)n->ip[1];
    r.c0 = (const int32_t *)cu_ptr(c) + ex_td_at(c, 0);
    r.c1 = (const int32_t *)cu_ptr(c) + ex_td_at(c, 1);
    r.a = n->fp[0];
    r.b = n->fp[1];
    r.d = cu_t4_of(d);
    r.dense = rnd_contiguous(d);
    r.normal = normal;
    int64_t m = ex_td_numel(d);
    cu_launch(e, rnd_kernel, cu_blocks(m, CU_THREADS), CU_THREADS, 0, r, m, e->gate);
    return cu_launched(e, op);
}

CU_OP(rand_uniform)
{
    return rnd_fill(e, n, "rand_uniform", 0);
}

CU_OP(rand_normal)
{
    return rnd_fill(e, n, "rand_normal", 1);
}
