/* The memory planner: reuse, in-place ops and arena chunks must not change a single bit of
 * a training step; reuse must cut the memory of a deep step well below the sum of its
 * tensors; and a plan that cannot fit is refused up front with a message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exapt/exapt.h"

/* ---- helpers ---- */

typedef struct rng {
    uint64_t s;
} rng;

/* splitmix64, so the data never depends on the library under test. */
static uint64_t rng_next(rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void fill_uniform(rng *r, float *v, int64_t n, float lo, float hi)
{
    for (int64_t i = 0; i < n; i++)
        v[i] = lo + (hi - lo) * (float)((rng_next(r) >> 40) * 0x1.0p-24);
}

static void check_ok(ex_status st, const char *what, const char *msg)
{
    if (st != EX_OK)
        fail_msg("%s: %s (%s)", what, ex_status_str(st), msg ? msg : "");
}

static ex_backend *open_cpu(void)
{
    char msg[256] = "";
    ex_backend *be = NULL;
    check_ok(ex_backend_open("cpu", &be, msg, sizeof msg), "ex_backend_open(cpu)", msg);
    assert_non_null(be);
    return be;
}

static size_t tensor_bytes(ex_tensor *t)
{
    return (size_t)ex_tensor_numel(t) * (size_t)ex_dtype_size(ex_tensor_dtype(t));
}

static void write_t(ex_plan *plan, ex_tensor *t, const float *data)
{
    check_ok(ex_plan_write(plan, t, data, tensor_bytes(t)), "ex_plan_write", ex_plan_error(plan));
}

static void read_t(ex_plan *plan, ex_tensor *t, float *data)
{
    check_ok(ex_plan_read(plan, t, data, tensor_bytes(t)), "ex_plan_read", ex_plan_error(plan));
}

static ex_tensor *tensor_like(ex_ctx *ctx, ex_tensor *t, bool is_param, const char *name)
{
    int nd = ex_tensor_ndim(t);
    int64_t ne[EX_MAX_DIMS];
    for (int d = 0; d < nd; d++)
        ne[d] = ex_tensor_dim(t, d);
    return is_param ? ex_param(ctx, nd, ne, name) : ex_state(ctx, EX_F32, nd, ne, name);
}

/* ---- a network of SepConv blocks with its whole training step ---- */

#define MAX_PARAMS 256
#define MAX_STATES 256

typedef struct net_cfg {
    int n, c, h, w, blocks;
    bool residual; /* y = x + block(x): gives the planner in-place adds and gradient sums */
} net_cfg;

typedef struct net {
    ex_tensor *x, *r, *lr, *loss;
    int np, ns;
    ex_tensor *p[MAX_PARAMS], *grad[MAX_PARAMS], *mom[MAX_PARAMS];
    ex_tensor *st[MAX_STATES]; /* batch-norm running statistics */
} net;

static ex_tensor *add_param(ex_ctx *ctx, net *m, int ndim, int64_t a, int64_t b, int64_t c,
                            int64_t d)
{
    const int64_t ne[4] = {a, b, c, d};
    char name[32];
    snprintf(name, sizeof name, "p%d", m->np);
    assert_true(m->np < MAX_PARAMS);
    return m->p[m->np++] = ex_param(ctx, ndim, ne, name);
}

static ex_tensor *add_bn(ex_ctx *ctx, net *m, ex_tensor *x, int64_t c)
{
    ex_tensor *g = add_param(ctx, m, 1, c, 0, 0, 0), *b = add_param(ctx, m, 1, c, 0, 0, 0);
    assert_true(m->ns + 2 <= MAX_STATES);
    ex_tensor *rm = ex_state(ctx, EX_F32, 1, &c, "rm"), *rv = ex_state(ctx, EX_F32, 1, &c, "rv");
    m->st[m->ns++] = rm;
    m->st[m->ns++] = rv;
    return ex_batch_norm(ctx, x, g, b, rm, rv, true, 1e-5f, 0.1f);
}

/* The DARTS SepConv: (ReLU, depthwise 3x3, pointwise, BN) twice. */
static ex_tensor *sep_block(ex_ctx *ctx, net *m, ex_tensor *x, int64_t c)
{
    const ex_conv_params cp = {{1, 1}, {1, 1}, {1, 1}};
    ex_tensor *h = x;
    for (int half = 0; half < 2; half++) {
        h = ex_dwconv2d(ctx, ex_relu(ctx, h), add_param(ctx, m, 4, c, 1, 3, 3), &cp);
        h = ex_pwconv(ctx, h, add_param(ctx, m, 2, c, c, 0, 0));
        h = add_bn(ctx, m, h, c);
    }
    return h;
}

/* Forward, loss = sum(y r), backward, and SGD with momentum and weight decay on every
 * parameter: one whole training step as one graph. */
static void net_build(ex_ctx *ctx, net *m, net_cfg cfg)
{
    memset(m, 0, sizeof *m);
    const int64_t ne[4] = {cfg.n, cfg.c, cfg.h, cfg.w}, one = 1;
    m->x = ex_input(ctx, EX_F32, 4, ne, "x");
    m->r = ex_input(ctx, EX_F32, 4, ne, "r");
    m->lr = ex_input(ctx, EX_F32, 1, &one, "lr");
    ex_tensor *h = m->x;
    for (int b = 0; b < cfg.blocks; b++) {
        ex_tensor *y = sep_block(ctx, m, h, cfg.c);
        h = cfg.residual ? ex_add(ctx, y, h) : y;
    }
    m->loss = ex_keep(ctx, ex_sum(ctx, ex_mul(ctx, h, m->r), 0xFu));
    check_ok(ex_graph_backward(ctx, m->loss), "ex_graph_backward", ex_ctx_error(ctx));
    for (int i = 0; i < m->np; i++) {
        m->grad[i] = ex_grad(ctx, m->p[i]);
        assert_non_null(m->grad[i]);
        m->mom[i] = tensor_like(ctx, m->p[i], false, "mom");
        ex_sgd(ctx, m->p[i], m->grad[i], m->mom[i], m->lr, 0.9f, 1e-4f, false);
    }
    check_ok(ex_ctx_status(ctx), "building the network", ex_ctx_error(ctx));
}

/* Parameters (gammas near 1, the rest small), zero momenta, running stats (0, 1). */
static void net_init(ex_plan *plan, net *m, uint64_t seed)
{
    rng r = {seed};
    for (int i = 0; i < m->np; i++) {
        int64_t n = ex_tensor_numel(m->p[i]);
        float *v = calloc((size_t)n, sizeof *v), *z = calloc((size_t)n, sizeof *z);
        assert_true(v && z);
        bool vec = ex_tensor_ndim(m->p[i]) == 1;
        fill_uniform(&r, v, n, vec ? -0.2f : -0.5f, vec ? 0.2f : 0.5f);
        if (vec && i % 2 == 0) /* the gamma of each add_bn pair */
            for (int64_t k = 0; k < n; k++)
                v[k] += 1;
        write_t(plan, m->p[i], v);
        write_t(plan, m->mom[i], z);
        free(v);
        free(z);
    }
    for (int i = 0; i < m->ns; i++) {
        float v[256];
        int64_t n = ex_tensor_numel(m->st[i]);
        assert_true(n <= 256);
        for (int64_t k = 0; k < n; k++)
            v[k] = i % 2 ? 1.0f : 0.0f;
        write_t(plan, m->st[i], v);
    }
    float lr = 0.01f;
    write_t(plan, m->lr, &lr);
}

/* ---- 1. bitwise identical with and without reuse, in-place ops and chunks ---- */

static const net_cfg small_net = {4, 6, 10, 10, 3, true};

typedef struct result {
    float *v;
    size_t n, cap;
} result;

static void result_push(result *res, ex_plan *plan, ex_tensor *t)
{
    size_t n = (size_t)ex_tensor_numel(t);
    if (res->n + n > res->cap) {
        res->cap = 2 * (res->n + n);
        res->v = realloc(res->v, res->cap * sizeof *res->v);
        assert_non_null(res->v);
    }
    read_t(plan, t, res->v + res->n);
    res->n += n;
}

/* Runs three steps with fresh data each and records the losses, then the last step's
 * gradients, the updated parameters, their momenta and the running statistics. */
static result train_three_steps(ex_backend *be, const ex_plan_opts *opts, ex_plan_stats *st)
{
    ex_ctx *ctx = ex_ctx_new();
    assert_non_null(ctx);
    net m;
    net_build(ctx, &m, small_net);
    ex_plan *plan = NULL;
    check_ok(ex_graph_plan(ctx, be, opts, &plan), "ex_graph_plan", ex_ctx_error(ctx));
    check_ok(ex_plan_get_stats(plan, st), "ex_plan_get_stats", ex_plan_error(plan));
    net_init(plan, &m, 42);
    int64_t nx = ex_tensor_numel(m.x);
    float *x = calloc((size_t)nx, sizeof *x), *r = calloc((size_t)nx, sizeof *r);
    assert_true(x && r);
    rng g = {1234};
    result res = {0};
    for (int step = 0; step < 3; step++) {
        fill_uniform(&g, x, nx, -1, 1);
        fill_uniform(&g, r, nx, -1, 1);
        write_t(plan, m.x, x);
        write_t(plan, m.r, r);
        check_ok(ex_plan_run(plan), "ex_plan_run", ex_plan_error(plan));
        result_push(&res, plan, m.loss);
    }
    ex_tensor **groups[3] = {m.grad, m.p, m.mom};
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < m.np; i++)
            result_push(&res, plan, groups[k][i]);
    for (int i = 0; i < m.ns; i++)
        result_push(&res, plan, m.st[i]);
    free(x);
    free(r);
    ex_plan_free(plan);
    ex_ctx_free(ctx);
    return res;
}

static void print_stats(const char *name, const ex_plan_stats *st)
{
    printf("  %-10s arena %8" PRIu64 " B in %d chunk(s), persistent %8" PRIu64
           " B, tensors %8" PRIu64 " B, %" PRId64 " nodes, %" PRId64 " in place\n",
           name, st->arena_bytes, st->arena_chunks, st->persistent_bytes, st->total_tensor_bytes,
           st->nodes, st->inplace_nodes);
}

static void test_bitwise_identical(void **state)
{
    (void)state;
    /* The largest transient tensor of small_net is one activation (4*6*10*10 floats);
     * this limit holds it but forces the arena into several chunks. */
    const uint64_t chunk = 4u * 6 * 10 * 10 * 4 * 2;
    const struct {
        const char *name;
        ex_plan_opts o;
    } cfg[] = {
        {"default", {.no_reuse = false}},
        {"no_reuse", {.no_reuse = true}},
        {"no_inplace", {.no_inplace = true}},
        {"chunked", {.chunk_limit = chunk}},
        {"poison", {.poison = true}},
        {"all", {.no_inplace = true, .chunk_limit = chunk, .poison = true}},
        {"reuse at once", {.reuse_after = -1}},
        {"reuse after 8", {.reuse_after = 8}},
    };
    enum { NCFG = sizeof cfg / sizeof cfg[0] };
    ex_backend *be = open_cpu();
    ex_plan_stats st[NCFG];
    result res[NCFG];
    for (int k = 0; k < NCFG; k++) {
        ex_plan_opts o = cfg[k].o;
        o.size = sizeof o;
        res[k] = train_three_steps(be, &o, &st[k]);
        print_stats(cfg[k].name, &st[k]);
    }
    for (size_t i = 0; i < res[0].n; i++)
        if (!isfinite(res[0].v[i]))
            fail_msg("value %zu of the default plan is not finite", i);
    for (int k = 1; k < NCFG; k++) {
        assert_int_equal(res[k].n, res[0].n);
        if (memcmp(res[k].v, res[0].v, res[0].n * sizeof(float)) != 0) {
            size_t i = 0;
            while (memcmp(&res[k].v[i], &res[0].v[i], sizeof(float)) == 0)
                i++;
            fail_msg("plan %s differs from default at value %zu: %.9g vs %.9g", cfg[k].name, i,
                     (double)res[k].v[i], (double)res[0].v[i]);
        }
    }
    /* The options must really have changed the plan, or the comparison proves nothing. */
    assert_true(st[0].inplace_nodes > 0);
    assert_true(st[2].inplace_nodes < st[0].inplace_nodes);
    assert_true(st[1].arena_bytes > st[0].arena_bytes);
    assert_true(st[3].arena_chunks >= 2);
    assert_true(st[5].arena_chunks >= 2);
    /* reusing sooner needs less memory: at once < after 8 < the default's 128 tensors */
    assert_true(st[6].arena_bytes < st[7].arena_bytes);
    assert_true(st[7].arena_bytes < st[0].arena_bytes);
    for (int k = 0; k < NCFG; k++)
        free(res[k].v);
    ex_backend_close(be);
}

/* ---- 2. reuse keeps a deep training step far below the sum of its tensors ---- */

static void test_memory_ratio(void **state)
{
    (void)state;
    const net_cfg deep = {8, 16, 16, 16, 20, false};
    ex_ctx *ctx = ex_ctx_new();
    assert_non_null(ctx);
    net m;
    net_build(ctx, &m, deep);
    ex_backend *be = open_cpu();
    ex_plan_opts opts, flat;
    ex_plan_opts_default(&opts);
    ex_plan_opts_default(&flat);
    flat.no_reuse = true;
    ex_plan *plan = NULL, *plain = NULL;
    ex_plan_stats st, st_plain;
    check_ok(ex_graph_plan(ctx, be, &opts, &plan), "ex_graph_plan", ex_ctx_error(ctx));
    check_ok(ex_plan_get_stats(plan, &st), "ex_plan_get_stats", ex_plan_error(plan));
    check_ok(ex_graph_plan(ctx, be, &flat, &plain), "ex_graph_plan(no_reuse)", ex_ctx_error(ctx));
    check_ok(ex_plan_get_stats(plain, &st_plain), "ex_plan_get_stats", ex_plan_error(plain));
    double ratio = (double)(st.arena_bytes + st.persistent_bytes) / (double)st.total_tensor_bytes;
    printf("20 SepConv blocks, x 8x16x16x16, forward + backward + SGD:\n");
    print_stats("reuse", &st);
    print_stats("no_reuse", &st_plain);
    printf("  (arena + persistent) / tensors = %.3f (at most 0.6)\n", ratio);
    assert_true(st.total_tensor_bytes > 0);
    assert_true(st.total_tensor_bytes == st_plain.total_tensor_bytes);
    assert_true(st_plain.arena_bytes + st_plain.persistent_bytes >= st.total_tensor_bytes);
    assert_true(ratio <= 0.6);

    /* The planned step must also run. */
    net_init(plan, &m, 5);
    int64_t nx = ex_tensor_numel(m.x);
    float *x = calloc((size_t)nx, sizeof *x), loss = NAN;
    assert_non_null(x);
    rng g = {77};
    fill_uniform(&g, x, nx, -1, 1);
    write_t(plan, m.x, x);
    fill_uniform(&g, x, nx, -1, 1);
    write_t(plan, m.r, x);
    check_ok(ex_plan_run(plan), "ex_plan_run", ex_plan_error(plan));
    read_t(plan, m.loss, &loss);
    assert_true(isfinite(loss));
    free(x);
    ex_plan_free(plain);
    ex_plan_free(plan);
    ex_backend_close(be);
    ex_ctx_free(ctx);
}

/* ---- 3. a plan that cannot fit is refused ---- */

static void test_chunk_too_small(void **state)
{
    (void)state;
    /* Small inputs, one large transient: the pointwise expansion to 64 channels,
     * 2*64*8*8 floats = 32768 bytes, more than the 20000-byte chunk limit. */
    const int64_t xne[4] = {2, 3, 8, 8}, wne[2] = {64, 3};
    ex_ctx *ctx = ex_ctx_new();
    assert_non_null(ctx);
    ex_tensor *x = ex_input(ctx, EX_F32, 4, xne, "x");
    ex_tensor *w = ex_param(ctx, 2, wne, "w");
    ex_tensor *big = ex_relu(ctx, ex_pwconv(ctx, x, w));
    ex_keep(ctx, ex_sum(ctx, big, 0xFu));
    assert_int_equal(ex_ctx_status(ctx), EX_OK);
    ex_backend *be = open_cpu();
    ex_plan_opts opts;
    ex_plan_opts_default(&opts);
    opts.chunk_limit = 20000;
    ex_plan *plan = NULL;
    ex_status s = ex_graph_plan(ctx, be, &opts, &plan);
    const char *msg = ex_ctx_error(ctx);
    printf("  refused: %s: %s\n", ex_status_str(s), msg);
    assert_int_not_equal(s, EX_OK);
    assert_null(plan);
    assert_non_null(msg);
    /* The message names the limit and the tensor that does not fit (bytes or shape). */
    assert_non_null(strstr(msg, "20000"));
    assert_true(strstr(msg, "32768") != NULL || strstr(msg, "2x64x8x8") != NULL);

    /* With room for the largest tensor the same graph plans. */
    ex_ctx_clear_error(ctx);
    opts.chunk_limit = 32768;
    check_ok(ex_graph_plan(ctx, be, &opts, &plan), "ex_graph_plan", ex_ctx_error(ctx));
    assert_non_null(plan);
    ex_plan_free(plan);
    ex_backend_close(be);
    ex_ctx_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bitwise_identical),
        cmocka_unit_test(test_memory_ratio),
        cmocka_unit_test(test_chunk_too_small),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
