/* Random kernels: RAND_UNIFORM, RAND_NORMAL. Element i (row-major logical index of dst)
 * takes draw i of the Philox stream (key ip0, ip1; counter source), so every backend and
 * any thread count give the same tensor. */
#include <stdint.h>

#include "core/philox.h"
#include "cpu/cpu.h"

#ifdef _OPENMP
#include <omp.h>

/* Threads for a parallel loop: the backend's count, or OpenMP's default when it sets none. */
static int rnd_threads(const cpu_exec *e)
{
    return e->threads > 0 ? e->threads : omp_get_max_threads();
}
#endif

/** A Philox stream: key and counter. */
typedef struct rnd_stream {
    uint32_t k0, k1, c0, c1;
} rnd_stream;

static ex_status rnd_setup(const cpu_exec *e, const ex_node_exec *n, const char *op, rnd_stream *s)
{
    char why[96];
    ex_status st = ex_td_rand_check(n, why, sizeof why);
    if (st != EX_OK)
        return cpu_fail(e, st, "%s: %s", op, why);
    const ex_tdesc *c = &n->src[0];
    s->k0 = (uint32_t)n->ip[0];
    s->k1 = (uint32_t)n->ip[1];
    s->c0 = (uint32_t)cpu_i32(c)[ex_td_at(c, 0)];
    s->c1 = (uint32_t)cpu_i32(c)[ex_td_at(c, 1)];
    return EX_OK;
}

/* The draw dominates the cost, so a strided dst simply locates each element. */
static ex_status rnd_fill(const cpu_exec *e, const ex_node_exec *n, const char *op, int normal)
{
    rnd_stream s = {0};
    ex_status st = rnd_setup(e, n, op, &s);
    if (st != EX_OK)
        return st;
    const ex_tdesc *t = &n->dst;
    float *d = cpu_f32(t), a = n->fp[0], b = n->fp[1];
    int64_t m = ex_td_numel(t);
    int dense = cpu_contiguous(t);
#pragma omp parallel for if (!e->reference) num_threads(rnd_threads(e)) schedule(static)
    for (int64_t i = 0; i < m; i++) {
        float v = normal ? a + b * ex_philox_normal(s.k0, s.k1, s.c0, s.c1, (uint64_t)i)
                         : a + (b - a) * ex_philox_uniform(s.k0, s.k1, s.c0, s.c1, (uint64_t)i);
        d[dense ? i : ex_td_at(t, i)] = v;
    }
    return EX_OK;
}

CPU_OP(rand_uniform)
{
    return rnd_fill(e, n, "rand_uniform", 0);
}

CPU_OP(rand_normal)
{
    return rnd_fill(e, n, "rand_normal", 1);
}
