/* Running one bench case: build, plan with profiling, fill the leaves with random data,
 * warm up, then time the op's nodes over many runs and keep the median. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cli.h"

/* splitmix64: a tiny generator for input data; the values only need to be ordinary
 * finite numbers, the same on every run. */
typedef struct bench_rng {
    uint64_t s;
} bench_rng;

static uint64_t rng_next(bench_rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 24 bits, exact in f32. */
static float rng_unit(bench_rng *r)
{
    return (float)(rng_next(r) >> 40) * (1.0f / 16777216.0f);
}

static void fill_leaf(const bench_leaf *l, void *data, int64_t n, bench_rng *r)
{
    float *f = data;
    int32_t *i32 = data;
    for (int64_t i = 0; i < n; i++) {
        switch (l->fill) {
        case BENCH_UNIFORM: f[i] = 2.0f * rng_unit(r) - 1.0f; break;
        case BENCH_POSITIVE: f[i] = 0.01f + 0.99f * rng_unit(r); break;
        case BENCH_VALUES: f[i] = l->v[i % l->nv]; break;
        case BENCH_LABELS: i32[i] = (int32_t)(rng_next(r) % (uint64_t)l->v[0]); break;
        case BENCH_COUNTER: i32[i] = i == 0 ? 1 : 0; break;
        }
    }
}

static ex_status write_leaves(ex_plan *plan, const bench_graph *g, uint64_t seed)
{
    bench_rng rng = {seed};
    for (int k = 0; k < g->nleaf; k++) {
        const bench_leaf *l = &g->leaf[k];
        int64_t n = ex_tensor_numel(l->t);
        size_t bytes = (size_t)n * (size_t)ex_dtype_size(ex_tensor_dtype(l->t));
        void *data = malloc(bytes ? bytes : 1);
        if (data == NULL)
            return EX_ERR_NOMEM;
        fill_leaf(l, data, n, &rng);
        ex_status st = ex_plan_write(plan, l->t, data, bytes);
        free(data);
        if (st != EX_OK)
            return st;
    }
    return EX_OK;
}

/* Builds the case's graph; a backward case appends the gradient of sum(y * r), whose
 * incoming gradient r is a dense random tensor like a real network's (the gradient of a
 * bare sum(y) would reach the op as a stride-0 broadcast of one number). */
static ex_status build_graph(bench_graph *g, const bench_case *c)
{
    ex_tensor *y = c->build(g);
    if (ex_ctx_status(g->ctx) != EX_OK)
        return ex_ctx_status(g->ctx);
    if (!c->backward) {
        ex_keep(g->ctx, y); /* an output nobody reads must still be computed */
        return ex_ctx_status(g->ctx);
    }
    int nd = ex_tensor_ndim(y);
    int64_t ne[EX_MAX_DIMS];
    for (int d = 0; d < nd; d++)
        ne[d] = ex_tensor_dim(y, d);
    ex_tensor *r = bench_leaf_new(g, BENCH_INPUT, BENCH_UNIFORM, EX_F32, nd, ne, "r");
    ex_tensor *loss = ex_sum(g->ctx, ex_mul(g->ctx, y, r), (1u << nd) - 1);
    return ex_graph_backward(g->ctx, loss);
}

/* The indices of the plan's nodes that run op, and their traffic and work per run. */
static ex_status find_nodes(const ex_plan *plan, ex_op op, int64_t **idx, bench_result *res)
{
    int64_t n = ex_plan_node_count(plan);
    *idx = malloc((size_t)(n > 0 ? n : 1) * sizeof **idx);
    if (*idx == NULL)
        return EX_ERR_NOMEM;
    for (int64_t i = 0; i < n; i++) {
        ex_node_info info;
        ex_status st = ex_plan_node_info(plan, i, &info);
        if (st != EX_OK)
            return st;
        if (info.op != op)
            continue;
        (*idx)[res->nodes++] = i;
        res->min_bytes += info.min_bytes;
        res->flops += info.flops;
    }
    return EX_OK;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Runs the plan warmup + iters times; ms[k] is the op's time in timed run k. */
static ex_status time_runs(ex_plan *plan, const int64_t *idx, int nodes, int warmup, int iters,
                           double *ms)
{
    for (int k = 0; k < warmup + iters; k++) {
        ex_status st = ex_plan_run(plan);
        if (st != EX_OK)
            return st;
        if (k < warmup)
            continue;
        double sum = 0;
        for (int j = 0; j < nodes; j++) {
            ex_node_info info;
            st = ex_plan_node_info(plan, idx[j], &info);
            if (st != EX_OK)
                return st;
            sum += info.skipped ? 0.0 : info.ms;
        }
        ms[k - warmup] = sum;
    }
    return EX_OK;
}

/* The first message there is: the plan's, the backend's, or the status's name. */
static void plan_message(const ex_plan *plan, const ex_backend *be, ex_status st, char *msg,
                         size_t len)
{
    const char *m = plan ? ex_plan_error(plan) : "";
    if (m == NULL || m[0] == '\0')
        m = ex_backend_error(be);
    snprintf(msg, len, "%s", m[0] ? m : ex_status_str(st));
}

static ex_status measure(const ex_backend *be, ex_plan *plan, const bench_graph *g, ex_op op,
                         int warmup, int iters, bench_result *res, char *msg, size_t len)
{
    int64_t *idx = NULL;
    double *ms = malloc((size_t)iters * sizeof *ms);
    if (ms == NULL) {
        snprintf(msg, len, "out of memory");
        return EX_ERR_NOMEM;
    }
    ex_status st = find_nodes(plan, op, &idx, res);
    if (st == EX_OK && res->nodes == 0) {
        /* The library built the op differently from what this case expects. */
        snprintf(msg, len, "the graph built for %s has no %s node", ex_op_name(op), ex_op_name(op));
        st = EX_ERR_STATE;
    } else {
        if (st == EX_OK)
            st = write_leaves(plan, g, 0x5EEDull + (uint64_t)op);
        if (st == EX_OK)
            st = time_runs(plan, idx, res->nodes, warmup, iters, ms);
        if (st != EX_OK) {
            plan_message(plan, be, st, msg, len);
        } else {
            qsort(ms, (size_t)iters, sizeof *ms, cmp_double);
            res->ms = iters % 2 ? ms[iters / 2] : 0.5 * (ms[iters / 2 - 1] + ms[iters / 2]);
        }
    }
    free(ms);
    free(idx);
    return st;
}

ex_status bench_run_case(ex_backend *be, ex_op op, const bench_case *c, const bench_dims *d,
                         int warmup, int iters, bench_result *res, char *msg, size_t msg_len)
{
    memset(res, 0, sizeof *res);
    res->op = op;
    res->about = c->about;
    res->iters = iters;
    bench_graph g = {.ctx = ex_ctx_new(), .d = d, .backward = c->backward};
    if (g.ctx == NULL) {
        snprintf(msg, msg_len, "out of memory");
        return EX_ERR_NOMEM;
    }
    ex_plan *plan = NULL;
    ex_plan_opts opts;
    ex_plan_opts_default(&opts);
    opts.profile = true;
    ex_status st = build_graph(&g, c);
    if (st == EX_OK)
        st = ex_graph_plan(g.ctx, be, &opts, &plan);
    if (st != EX_OK) {
        const char *m = ex_ctx_error(g.ctx);
        if (m == NULL || m[0] == '\0')
            m = ex_backend_error(be);
        snprintf(msg, msg_len, "%s", m[0] ? m : ex_status_str(st));
    } else {
        ex_tensor_shape_str(g.subject, res->shape, (int)sizeof res->shape);
        st = measure(be, plan, &g, op, warmup, iters, res, msg, msg_len);
    }
    ex_plan_free(plan);
    ex_ctx_free(g.ctx);
    return st;
}
