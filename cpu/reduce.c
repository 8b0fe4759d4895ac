/* Reductions: SUM, MEAN and MAX over a mask of axes with kept dims, and MAX_BWD.
 *
 * For each output element the reduced elements are visited in row-major order of the
 * reduced dims and cut into chunks of CPU_CHUNK. Each chunk is summed in double in order,
 * then the chunk sums are added in order. That order depends only on the shape, so a sum
 * is bitwise the same for any thread count and on the reference path, which runs the same
 * loops on one thread. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "cpu/cpu.h"

#ifdef _OPENMP
#include <omp.h>

/* Threads for a parallel loop: the backend's count, or OpenMP's default when it sets none. */
static int red_threads(const cpu_exec *e)
{
    return e->threads > 0 ? e->threads : omp_get_max_threads();
}
#endif

typedef enum red_kind { RED_SUM, RED_MEAN, RED_MAX } red_kind;

/** Source dims split into kept ones (one output each) and reduced ones, decoded in core
 *  (core/tdesc.h); size-1 dims are dropped, and an empty list stands as one dim of size 1. */
typedef ex_td_reduce red_geom;

static ex_status red_setup(const cpu_exec *e, const ex_node_exec *n, const char *op, red_geom *g)
{
    char why[256];
    ex_status st = ex_td_reduce_of(n, g, why, sizeof why);
    if (st != EX_OK)
        return cpu_fail(e, st, "%s: %s", op, why);
    g->nr += g->nr == 0;
    g->nk += g->nk == 0;
    return EX_OK;
}

/* Where output o reads x and writes dst. */
static void red_out(const red_geom *g, int64_t o, int64_t *xoff, int64_t *doff)
{
    *xoff = *doff = 0;
    for (int k = g->nk - 1; k >= 0; k--) {
        int64_t i = o % g->kne[k];
        o /= g->kne[k];
        *xoff += i * g->kxs[k];
        *doff += i * g->kds[k];
    }
}

/* NaN wins, so a poisoned or diverged input shows in the maximum. */
static double red_max2(double a, double b)
{
    return (b > a || b != b) ? b : a;
}

static double red_run_sum(const float *p, int64_t len, int64_t s)
{
    double acc = 0.0;
    if (s == 1)
        for (int64_t j = 0; j < len; j++)
            acc += p[j];
    else
        for (int64_t j = 0; j < len; j++)
            acc += p[j * s];
    return acc;
}

static double red_run_max(const float *p, int64_t len, int64_t s, double acc)
{
    for (int64_t j = 0; j < len; j++)
        acc = red_max2(acc, p[j * s]);
    return acc;
}

/* Reduces the elements [k0, k1) of the reduced index space starting at x: runs along the
 * innermost reduced dim, carrying into the outer ones like an odometer. */
static double red_chunk(const red_geom *g, const float *x, int64_t k0, int64_t k1, int is_max)
{
    int last = g->nr - 1;
    int64_t c[4], off = 0, k = k0, left = k1 - k0;
    for (int d = last; d >= 0; d--) {
        c[d] = k % g->rne[d];
        k /= g->rne[d];
        off += c[d] * g->rxs[d];
    }
    double acc = is_max ? -INFINITY : 0.0;
    while (left > 0) {
        int64_t len = g->rne[last] - c[last] < left ? g->rne[last] - c[last] : left;
        if (is_max)
            acc = red_run_max(x + off, len, g->rxs[last], acc);
        else
            acc += red_run_sum(x + off, len, g->rxs[last]);
        left -= len;
        off += len * g->rxs[last];
        c[last] += len;
        for (int d = last; d > 0 && c[d] == g->rne[d]; d--) {
            off += g->rxs[d - 1] - c[d] * g->rxs[d];
            c[d] = 0;
            c[d - 1]++;
        }
    }
    return acc;
}

static float red_finish(const red_geom *g, red_kind kind, double acc)
{
    return (float)(kind == RED_MEAN ? acc / (double)g->m : acc);
}

/* Each output's chunks are independent work items; their results are combined in
 * chunk order afterwards. */
static ex_status red_chunked(const cpu_exec *e, const red_geom *g, const float *x, float *dst,
                             red_kind kind, int64_t nch)
{
    double *part = cpu_alloc(e, sizeof(double) * (size_t)(g->nout * nch));
    if (part == NULL)
        return cpu_fail(e, EX_ERR_NOMEM, "reduce: no memory for %lld partial sums",
                        (long long)(g->nout * nch));
    int is_max = kind == RED_MAX;
#pragma omp parallel for if (!e->reference) num_threads(red_threads(e)) schedule(static)
    for (int64_t it = 0; it < g->nout * nch; it++) {
        int64_t o = it / nch, c = it % nch, xoff, doff;
        int64_t k1 = (c + 1) * CPU_CHUNK < g->m ? (c + 1) * CPU_CHUNK : g->m;
        red_out(g, o, &xoff, &doff);
        part[it] = red_chunk(g, x + xoff, c * CPU_CHUNK, k1, is_max);
    }
#pragma omp parallel for if (!e->reference) num_threads(red_threads(e)) schedule(static)
    for (int64_t o = 0; o < g->nout; o++) {
        int64_t xoff, doff;
        double acc = is_max ? -INFINITY : 0.0;
        for (int64_t c = 0; c < nch; c++)
            acc = is_max ? red_max2(acc, part[o * nch + c]) : acc + part[o * nch + c];
        red_out(g, o, &xoff, &doff);
        dst[doff] = red_finish(g, kind, acc);
    }
    free(part);
    return EX_OK;
}

static ex_status red_exec(const cpu_exec *e, const ex_node_exec *n, const char *op, red_kind kind)
{
    red_geom g;
    ex_status st = red_setup(e, n, op, &g);
    if (st != EX_OK)
        return st;
    const float *x = cpu_f32(&n->src[0]);
    float *dst = cpu_f32(&n->dst);
    int64_t nch = (g.m + CPU_CHUNK - 1) / CPU_CHUNK;
    if (nch > 1)
        return red_chunked(e, &g, x, dst, kind, nch);
#pragma omp parallel for if (!e->reference) num_threads(red_threads(e)) schedule(static)
    for (int64_t o = 0; o < g.nout; o++) {
        int64_t xoff, doff;
        red_out(&g, o, &xoff, &doff);
        dst[doff] = red_finish(&g, kind, red_chunk(&g, x + xoff, 0, g.m, kind == RED_MAX));
    }
    return EX_OK;
}

CPU_OP(sum)
{
    return red_exec(e, n, "sum", RED_SUM);
}

CPU_OP(mean)
{
    return red_exec(e, n, "mean", RED_MEAN);
}

CPU_OP(max)
{
    return red_exec(e, n, "max", RED_MAX);
}

/* Strides of t read as the padded shape ne (size-1 dims broadcast); 0 when it does not fit. */
static int red_align(const ex_tdesc *t, const int64_t ne[4], int64_t st[4])
{
    int64_t tne[4];
    if (t->ndim < 1 || t->ndim > 4 || t->dtype != EX_F32)
        return 0;
    ex_td_shape4(t, tne, st);
    for (int d = 0; d < 4; d++) {
        if (tne[d] != ne[d] && tne[d] != 1)
            return 0;
        if (tne[d] != ne[d])
            st[d] = 0;
    }
    return 1;
}

CPU_OP(max_bwd)
{
    if (n->nsrc != 3 || n->src == NULL)
        return cpu_fail(e, EX_ERR_ARG, "max_bwd: %d sources, expected 3", n->nsrc);
    if (n->dst.ndim < 1 || n->dst.ndim > 4 || n->dst.dtype != EX_F32)
        return cpu_fail(e, EX_ERR_ARG, "max_bwd: dst must be f32 with 1 to 4 dims");
    int64_t ne[4], s[4][4]; /* dst, x, y, dy */
    ex_td_shape4(&n->dst, ne, s[0]);
    for (int k = 0; k < 4; k++)
        if (ne[k] > 1 && s[0][k] == 0)
            return cpu_fail(e, EX_ERR_ARG, "max_bwd: dst broadcasts (stride 0)");
    for (int i = 0; i < 3; i++)
        if (!red_align(&n->src[i], ne, s[1 + i]))
            return cpu_fail(e, EX_ERR_SHAPE, "max_bwd: source %d is not f32 of dst's shape", i);
    float *d = cpu_f32(&n->dst);
    const float *x = cpu_f32(&n->src[0]), *y = cpu_f32(&n->src[1]), *g = cpu_f32(&n->src[2]);
    int64_t rows = ne[0] * ne[1] * ne[2];
#pragma omp parallel for if (!e->reference) num_threads(red_threads(e)) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        int64_t i[3] = {r / (ne[1] * ne[2]), (r / ne[2]) % ne[1], r % ne[2]}, o[4] = {0};
        for (int k = 0; k < 4; k++)
            o[k] = i[0] * s[k][0] + i[1] * s[k][1] + i[2] * s[k][2];
        for (int64_t j = 0; j < ne[3]; j++) {
            float xv = x[o[1] + j * s[1][3]], yv = y[o[2] + j * s[2][3]];
            d[o[0] + j * s[0][3]] = xv == yv ? g[o[3] + j * s[3][3]] : 0.0f;
        }
    }
    return EX_OK;
}
