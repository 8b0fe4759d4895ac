/* What a node costs a backend beyond its memory traffic: N scalings of E floats, either
 * side by side (every node reads the same input, nothing orders them: "wide") or one after
 * another (each reads the last one's output: "chain", so a GPU backend must finish one
 * before it starts the next). The time of a run with N nodes less that of a run with one,
 * divided by N - 1, is a node's cost; at small E it is the launch or dispatch itself, at
 * larger E its traffic shows. Prints one JSON object per case, with the backend's
 * dispatch and barrier counts where it keeps them.
 *
 * usage: bench_dispatch [BACKEND] [NODES] [ITERS] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_time.h"
#include "exapt/exapt.h"

/* The graph: n scalings of an input of e floats, side by side or chained. */
static ex_status build(ex_ctx *ctx, ex_backend *be, int n, int64_t e, int chain, ex_plan **plan)
{
    ex_tensor *x = ex_input(ctx, EX_F32, 1, &e, "x"), *y = x;
    for (int i = 0; i < n; i++) {
        y = ex_scale(ctx, chain ? y : x, 1.0f + 1e-3f * (float)(i % 7));
        if (!chain)
            ex_keep(ctx, y);
    }
    ex_keep(ctx, y);
    return ex_graph_plan(ctx, be, NULL, plan);
}

typedef struct result {
    double ms;
    ex_backend_counters c;
} result;

static ex_status run_case(ex_backend *be, int n, int64_t e, int chain, int iters, result *r)
{
    ex_ctx *ctx = ex_ctx_new();
    ex_plan *plan = NULL;
    if (!ctx)
        return EX_ERR_NOMEM;
    ex_status st = build(ctx, be, n, e, chain, &plan);
    if (st == EX_OK)
        st = bench_median_run(plan, iters, &r->ms);
    memset(&r->c, 0, sizeof r->c);
    if (st == EX_OK)
        ex_backend_get_counters(be, &r->c); /* absent counters stay 0 */
    if (st != EX_OK)
        fprintf(stderr, "bench_dispatch: %s\n", plan ? ex_plan_error(plan) : ex_ctx_error(ctx));
    ex_plan_free(plan);
    ex_ctx_free(ctx);
    return st;
}

int main(int argc, char **argv)
{
    const char *name = argc > 1 ? argv[1] : "auto";
    int nodes = argc > 2 ? atoi(argv[2]) : 1000;
    int iters = argc > 3 ? atoi(argv[3]) : 20;
    ex_backend *be = NULL;
    char msg[256];
    if (nodes < 2 || iters < 1) {
        fprintf(stderr, "bench_dispatch: NODES must be at least 2, ITERS positive\n");
        return 1;
    }
    if (ex_backend_open(name, &be, msg, sizeof msg) != EX_OK) {
        fprintf(stderr, "bench_dispatch: %s\n", msg);
        return 1;
    }
    static const int64_t elems[] = {256, 65536, 1048576};
    int rc = 0;
    for (int chain = 0; !rc && chain < 2; chain++)
        for (size_t k = 0; !rc && k < sizeof elems / sizeof elems[0]; k++) {
            result one, many;
            if (run_case(be, 1, elems[k], chain, iters, &one) != EX_OK ||
                run_case(be, nodes, elems[k], chain, iters, &many) != EX_OK) {
                rc = 1;
                break;
            }
            printf("{\"backend\": \"%s\", \"device\": \"%s\", \"shape\": \"%s\", "
                   "\"elems\": %lld, \"nodes\": %d, \"run_ms\": %.4f, \"one_node_ms\": %.4f, "
                   "\"us_per_node\": %.3f, \"dispatches\": %llu, \"barriers\": %llu}\n",
                   ex_backend_get_caps(be)->name, ex_backend_get_caps(be)->device,
                   chain ? "chain" : "wide", (long long)elems[k], nodes, many.ms, one.ms,
                   (many.ms - one.ms) * 1e3 / (nodes - 1), (unsigned long long)many.c.dispatches,
                   (unsigned long long)many.c.barriers);
            fflush(stdout);
        }
    ex_backend_close(be);
    return rc;
}
