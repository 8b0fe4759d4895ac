/* The mixed sum of one DARTS edge, forward and backward, as a search runs it: y = Σ w_i·x_i
 * over 7 candidate outputs, then, from an upstream gradient g, the gradients of w and of
 * every x_i. bench/mixed_sum.py times PyTorch's formulations of the same thing
 * (y.backward(g)). The graph reaches g through a loss Σ y·g, and its x_i are parameters
 * that sum their gated gradients: those nodes are not the mixed sum's, so the edge's
 * nodes are tagged and timed apart. Prints one JSON object per shape: the median ms of a
 * whole planned run (a host wait included) and the edge's ms (forward, α-gradient and
 * the candidates' gradients) from a profiled run.
 *
 * usage: bench_mixed_sum [BACKEND] [ITERS]   (BENCH_NODES=1: each node's time on stderr) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_time.h"
#include "exapt/exapt.h"

enum { NX = 7, K = 8 };

/* Fills t with a deterministic pattern. */
static ex_status fill(ex_plan *p, ex_tensor *t, int seed)
{
    int64_t n = ex_tensor_numel(t);
    float *v = malloc((size_t)n * sizeof *v);
    if (!v)
        return EX_ERR_NOMEM;
    for (int64_t i = 0; i < n; i++)
        v[i] = (float)((i * 2654435761u + (uint64_t)seed * 97u) % 2001) / 1000.0f - 1.0f;
    ex_status st = ex_plan_write(p, t, v, (size_t)n * sizeof *v);
    free(v);
    return st;
}

typedef struct bench {
    ex_ctx *ctx;
    ex_plan *plan;
    ex_tensor *w, *mask, *g, *x[NX];
} bench;

static ex_status build(bench *b, ex_backend *be, const int64_t ne[4])
{
    b->ctx = ex_ctx_new();
    if (!b->ctx)
        return EX_ERR_NOMEM;
    int64_t k = K;
    b->w = ex_param(b->ctx, 1, &k, "w");
    b->mask = ex_input(b->ctx, EX_F32, 1, &k, "mask");
    b->g = ex_input(b->ctx, EX_F32, 4, ne, "g");
    int idx[NX];
    for (int j = 0; j < NX; j++) {
        b->x[j] = ex_param(b->ctx, 4, ne, "x");
        idx[j] = j + 1; /* weight 0 is `none`, never materialized */
    }
    ex_ctx_set_tag(b->ctx, 0, 0, -1); /* the edge; its backward nodes inherit the tag */
    ex_tensor *y = ex_mixed_sum(b->ctx, b->w, b->mask, NX, b->x, idx);
    ex_ctx_set_tag(b->ctx, -1, -1, -1);
    ex_tensor *loss = ex_sum(b->ctx, ex_mul(b->ctx, y, b->g), 0xF);
    ex_status st = ex_graph_backward(b->ctx, loss);
    if (st == EX_OK)
        st = ex_graph_plan(b->ctx, be, NULL, &b->plan);
    if (st != EX_OK)
        return st;
    float ones[K];
    for (int i = 0; i < K; i++)
        ones[i] = 1.0f;
    st = ex_plan_write(b->plan, b->mask, ones, sizeof ones);
    if (st == EX_OK)
        st = fill(b->plan, b->w, 1);
    if (st == EX_OK)
        st = fill(b->plan, b->g, 2);
    for (int j = 0; st == EX_OK && j < NX; j++)
        st = fill(b->plan, b->x[j], 3 + j);
    return st;
}

/* Median ms of a whole run, and of the edge's nodes in a profiled run. */
static ex_status time_runs(bench *b, int iters, double *run_ms, double *mix_ms)
{
    double *t = malloc((size_t)iters * sizeof *t);
    if (!t)
        return EX_ERR_NOMEM;
    ex_status st = EX_OK;
    for (int i = 0; st == EX_OK && i < 3; i++)
        st = ex_plan_run(b->plan);
    for (int i = 0; st == EX_OK && i < iters; i++) {
        double t0 = now_ms();
        st = ex_plan_run(b->plan);
        t[i] = now_ms() - t0;
    }
    qsort(t, (size_t)iters, sizeof *t, cmp_double);
    *run_ms = t[iters / 2];
    free(t);
    if (st == EX_OK)
        st = ex_plan_set_profile(b->plan, true);
    if (st == EX_OK)
        st = ex_plan_run(b->plan);
    *mix_ms = 0;
    bool backward = false; /* past the weight gradient */
    for (int64_t i = 0; st == EX_OK && i < ex_plan_node_count(b->plan); i++) {
        ex_node_info info;
        st = ex_plan_node_info(b->plan, i, &info);
        /* the parameters' gradient sums carry the tag too (built last; mixed sums of
         * weight 1 when the candidates' gradients are gated): not the edge's */
        bool tagged = info.tag[0] == 0 && info.tag[1] == 0;
        bool edge = tagged && ((info.op == EX_OP_MIXED_SUM && !backward) ||
                               info.op == EX_OP_MIXED_SUM_BWD_W || info.op == EX_OP_MUL);
        backward |= tagged && info.op == EX_OP_MIXED_SUM_BWD_W;
        if (st == EX_OK && edge)
            *mix_ms += info.ms;
        if (st == EX_OK && getenv("BENCH_NODES"))
            fprintf(stderr, "  node %3lld %-20s %8.4f ms%s\n", (long long)i, ex_op_name(info.op),
                    info.ms, edge ? " (edge)" : "");
    }
    return st;
}

int main(int argc, char **argv)
{
    const char *name = argc > 1 ? argv[1] : "auto";
    int iters = argc > 2 ? atoi(argv[2]) : 50;
    ex_backend *be = NULL;
    char msg[256];
    if (iters < 1 || ex_backend_open(name, &be, msg, sizeof msg) != EX_OK) {
        fprintf(stderr, "bench_mixed_sum: %s\n", iters < 1 ? "ITERS must be positive" : msg);
        return 1;
    }
    static const int64_t shapes[][4] = {{64, 16, 32, 32}, {256, 64, 32, 32}};
    int rc = 0;
    for (size_t s = 0; !rc && s < sizeof shapes / sizeof shapes[0]; s++) {
        bench b = {0};
        double run = 0, mix = 0;
        ex_status st = build(&b, be, shapes[s]);
        if (st == EX_OK)
            st = time_runs(&b, iters, &run, &mix);
        if (st != EX_OK) {
            fprintf(stderr, "bench_mixed_sum: %s\n",
                    b.plan  ? ex_plan_error(b.plan)
                    : b.ctx ? ex_ctx_error(b.ctx)
                            : "no memory");
            rc = 1;
        } else {
            printf("{\"framework\": \"exapt\", \"backend\": \"%s\", \"device\": \"%s\", "
                   "\"shape\": [%lld, %lld, %lld, %lld], \"candidates\": %d, "
                   "\"run_ms\": %.4f, \"edge_ms\": %.4f}\n",
                   ex_backend_get_caps(be)->name, ex_backend_get_caps(be)->device,
                   (long long)shapes[s][0], (long long)shapes[s][1], (long long)shapes[s][2],
                   (long long)shapes[s][3], NX, run, mix);
        }
        ex_plan_free(b.plan);
        ex_ctx_free(b.ctx);
    }
    ex_backend_close(be);
    return rc;
}
