/* How fast a backend runs many independent copies of one op, as a DARTS step's rounds do
 * (the candidates of an edge, the edges into a node side by side): COPIES copies of the
 * op on the step's shapes (batch 64; 16 channels at 32x32, 32 at 16x16, 64 at 8x8, and
 * the same at 28x28, 14x14, 7x7),
 * forward alone and forward with backward. The backward runs from the loss
 * sum(y_1 r_1 + ... + y_n r_n), the r_i inputs, so every copy's output gradient is a
 * real tensor. Prints one JSON object per case with what a copy adds: the median run of
 * COPIES copies less that of one, per copy, and the minimal traffic it adds (the plan's
 * nodes', the loss's included) over the time it adds.
 *
 * usage: bench_wide [BACKEND] [COPIES] [ITERS] [OP] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_time.h"
#include "exapt/exapt.h"

enum { MIX_INPUTS = 7, MAX_ONES = 256 }; /* DARTS's candidates less `none` */

/* What a case builds, and the tensors to set to one after planning (mixed-sum masks). */
typedef struct builder {
    ex_ctx *ctx;
    int64_t ne[4];
    ex_tensor *ones[MAX_ONES];
    int nones;
} builder;

typedef ex_tensor *(*op_fn)(builder *b, ex_tensor *x);

static ex_tensor *op_pw(builder *b, ex_tensor *x)
{
    return ex_pwconv(b->ctx, x, ex_param(b->ctx, 2, (int64_t[]){b->ne[1], b->ne[1]}, NULL));
}

static ex_tensor *dw(builder *b, ex_tensor *x, int k, int d)
{
    ex_conv_params p = {{1, 1}, {d * (k - 1) / 2, d * (k - 1) / 2}, {d, d}};
    ex_tensor *w = ex_param(b->ctx, 4, (int64_t[]){b->ne[1], 1, k, k}, NULL);
    return ex_dwconv2d_relu(b->ctx, x, w, &p);
}

static ex_tensor *op_dw3(builder *b, ex_tensor *x)
{
    return dw(b, x, 3, 1);
}

static ex_tensor *op_dw5(builder *b, ex_tensor *x)
{
    return dw(b, x, 5, 1);
}

static ex_tensor *op_dil3(builder *b, ex_tensor *x)
{
    return dw(b, x, 3, 2);
}

static const ex_pool_params POOL3 = {{3, 3}, {1, 1}, {1, 1}};

static ex_tensor *op_max(builder *b, ex_tensor *x)
{
    return ex_max_pool(b->ctx, x, &POOL3);
}

static ex_tensor *op_avg(builder *b, ex_tensor *x)
{
    return ex_avg_pool(b->ctx, x, &POOL3);
}

static ex_tensor *op_bn(builder *b, ex_tensor *x)
{
    ex_tensor *rm = ex_state(b->ctx, EX_F32, 1, &b->ne[1], NULL);
    ex_tensor *rv = ex_state(b->ctx, EX_F32, 1, &b->ne[1], NULL);
    return ex_batch_norm(b->ctx, x, NULL, NULL, rm, rv, true, 1e-5f, 0.1f);
}

/* An edge's sum: the copy's input and six more inputs of its shape, every mask entry 1. */
static ex_tensor *op_mix(builder *b, ex_tensor *x)
{
    int64_t k = MIX_INPUTS + 1;
    ex_tensor *xs[MIX_INPUTS] = {x};
    int idx[MIX_INPUTS];
    for (int j = 0; j < MIX_INPUTS; j++) {
        if (j > 0)
            xs[j] = ex_requires_grad(b->ctx, ex_input(b->ctx, EX_F32, 4, b->ne, NULL));
        idx[j] = j + 1;
    }
    ex_tensor *mask = ex_input(b->ctx, EX_F32, 1, &k, NULL);
    if (b->nones < MAX_ONES)
        b->ones[b->nones++] = mask;
    return ex_mixed_sum(b->ctx, ex_param(b->ctx, 1, &k, NULL), mask, MIX_INPUTS, xs, idx);
}

typedef struct op_case {
    const char *name;
    op_fn fn;
} op_case;

static const op_case OPS[] = {
    {"pwconv", op_pw},           {"dwconv_relu_3x3", op_dw3},
    {"dwconv_relu_5x5", op_dw5}, {"dilconv_relu_3x3", op_dil3},
    {"max_pool_3x3", op_max},    {"avg_pool_3x3", op_avg},
    {"batch_norm", op_bn},       {"mixed_sum", op_mix},
};

/* copies copies of op on inputs of shape b->ne; with backward, the gradients of the loss
 * sum(y_1 * r_1 + ... + y_n * r_n): one reduction however many copies. */
static ex_status build(builder *b, const op_case *op, int copies, int backward)
{
    ex_ctx *ctx = b->ctx;
    ex_tensor *acc = NULL;
    for (int i = 0; i < copies; i++) {
        ex_tensor *x = ex_requires_grad(ctx, ex_input(ctx, EX_F32, 4, b->ne, NULL));
        ex_tensor *y = op->fn(b, x);
        if (!backward) {
            ex_keep(ctx, y);
            continue;
        }
        ex_tensor *yr = ex_mul(ctx, y, ex_input(ctx, EX_F32, 4, b->ne, NULL));
        acc = acc ? ex_add(ctx, acc, yr) : yr;
    }
    return backward ? ex_graph_backward(ctx, ex_sum(ctx, acc, 0xFu)) : EX_OK;
}

typedef struct result {
    double ms, bytes;
    int64_t nodes;
} result;

static ex_status run_case(ex_backend *be, const op_case *op, const int64_t *ne, int copies,
                          int backward, int iters, result *r)
{
    builder b = {.ctx = ex_ctx_new()};
    if (!b.ctx)
        return EX_ERR_NOMEM;
    memcpy(b.ne, ne, sizeof b.ne);
    ex_plan *plan = NULL;
    ex_status st = build(&b, op, copies, backward);
    if (st == EX_OK)
        st = ex_graph_plan(b.ctx, be, NULL, &plan);
    const float one[MIX_INPUTS + 1] = {1, 1, 1, 1, 1, 1, 1, 1};
    for (int i = 0; st == EX_OK && i < b.nones; i++)
        st = ex_plan_write(plan, b.ones[i], one, sizeof one);
    if (st == EX_OK)
        st = bench_median_run(plan, iters, &r->ms);
    r->bytes = 0;
    r->nodes = plan ? ex_plan_node_count(plan) : 0;
    for (int64_t i = 0; st == EX_OK && i < r->nodes; i++) {
        ex_node_info in;
        if (ex_plan_node_info(plan, i, &in) == EX_OK)
            r->bytes += (double)in.min_bytes;
    }
    if (st != EX_OK)
        fprintf(stderr, "bench_wide: %s: %s\n", op->name,
                plan ? ex_plan_error(plan) : ex_ctx_error(b.ctx));
    ex_plan_free(plan);
    ex_ctx_free(b.ctx);
    return st;
}

int main(int argc, char **argv)
{
    const char *name = argc > 1 ? argv[1] : "auto";
    int copies = argc > 2 ? atoi(argv[2]) : 16;
    int iters = argc > 3 ? atoi(argv[3]) : 20;
    const char *only = argc > 4 ? argv[4] : NULL;
    if (copies < 2 || copies > MAX_ONES || iters < 1) {
        fprintf(stderr, "usage: bench_wide [BACKEND] [COPIES 2..%d] [ITERS] [OP]\n", MAX_ONES);
        return 2;
    }
    ex_backend *be = NULL;
    char msg[256];
    if (ex_backend_open(name, &be, msg, sizeof msg) != EX_OK) {
        fprintf(stderr, "bench_wide: %s\n", msg);
        return 1;
    }
    static const int64_t shapes[][4] = {{64, 16, 32, 32}, {64, 32, 16, 16}, {64, 64, 8, 8},
                                        {64, 16, 28, 28}, {64, 32, 14, 14}, {64, 64, 7, 7}};
    const size_t nshapes = sizeof shapes / sizeof shapes[0];
    int rc = 0;
    for (size_t o = 0; !rc && o < sizeof OPS / sizeof OPS[0]; o++)
        for (size_t s = 0; !rc && (!only || !strcmp(only, OPS[o].name)) && s < nshapes; s++)
            for (int bwd = 0; !rc && bwd < 2; bwd++) {
                result one, r;
                if (run_case(be, &OPS[o], shapes[s], 1, bwd, iters, &one) != EX_OK ||
                    run_case(be, &OPS[o], shapes[s], copies, bwd, iters, &r) != EX_OK) {
                    rc = 1;
                    break;
                }
                double ms = r.ms - one.ms, bytes = r.bytes - one.bytes;
                printf("{\"backend\": \"%s\", \"device\": \"%s\", \"op\": \"%s\", "
                       "\"shape\": \"%lldx%lldx%lldx%lld\", \"backward\": %s, \"copies\": %d, "
                       "\"nodes\": %lld, \"run_ms\": %.4f, \"one_copy_ms\": %.4f, "
                       "\"us_per_copy\": %.2f, \"gbs\": %.1f}\n",
                       ex_backend_get_caps(be)->name, ex_backend_get_caps(be)->device, OPS[o].name,
                       (long long)shapes[s][0], (long long)shapes[s][1], (long long)shapes[s][2],
                       (long long)shapes[s][3], bwd ? "true" : "false", copies, (long long)r.nodes,
                       r.ms, one.ms, ms * 1e3 / (copies - 1), ms > 0 ? bytes / (ms * 1e6) : 0.0);
                fflush(stdout);
            }
    ex_backend_close(be);
    return rc;
}
