/* The catalogue of bench cases: for every engine op, a small graph in which it runs on
 * the shapes a DARTS search gives it. Backward ops are reached through autodiff, as in a
 * real step, rather than built by hand. */
#include <assert.h>
#include <string.h>

#include "bench.h"

/* DARTS search (Liu et al. 2019): batch 64 of 32x32 CIFAR images with C = 16 channels
 * in the first cells, 10 classes, 14 edges of 8 candidates, 256 features before the
 * classifier. "small" keeps the channels and shrinks the rest for quick runs; "large"
 * (256x64x32x32, 64 MiB a tensor) is where memory-bound kernels are held to bandwidth. */
static const bench_dims dims_table[] = {
    {"paper", 64, 16, 32, 32, 10, 256, 14, 8, 1 << 20, 1024, 256, 256},
    {"large", 256, 64, 32, 32, 10, 256, 14, 8, 1 << 24, 1024, 256, 256},
    {"small", 8, 16, 8, 8, 10, 64, 14, 8, 1 << 13, 64, 64, 64},
};

const bench_dims *bench_dims_get(const char *name)
{
    for (size_t i = 0; i < sizeof dims_table / sizeof dims_table[0]; i++)
        if (strcmp(dims_table[i].name, name) == 0)
            return &dims_table[i];
    return NULL;
}

ex_tensor *bench_leaf_new(bench_graph *g, bench_role role, bench_fill fill, ex_dtype dtype,
                          int ndim, const int64_t *ne, const char *name)
{
    /* The cases below are fixed; more leaves than the table holds is a bug here. */
    assert(g->nleaf < BENCH_MAX_LEAVES);
    if (role == BENCH_DIFF)
        role = g->backward ? BENCH_PARAM : BENCH_INPUT;
    ex_tensor *t;
    if (role == BENCH_PARAM)
        t = ex_param(g->ctx, ndim, ne, name);
    else if (role == BENCH_STATE)
        t = ex_state(g->ctx, dtype, ndim, ne, name);
    else
        t = ex_input(g->ctx, dtype, ndim, ne, name);
    g->leaf[g->nleaf++] = (bench_leaf){.t = t, .fill = fill};
    return t;
}

/* ---- leaves the cases share ---- */

static ex_tensor *subject(bench_graph *g, ex_tensor *t)
{
    g->subject = t;
    return t;
}

static ex_tensor *act(bench_graph *g, bench_role role, const char *name)
{
    const bench_dims *d = g->d;
    int64_t ne[4] = {d->n, d->c, d->h, d->w};
    return bench_leaf_new(g, role, BENCH_UNIFORM, EX_F32, 4, ne, name);
}

static ex_tensor *mat(bench_graph *g, bench_role role, bench_fill fill, int64_t r, int64_t c,
                      const char *name)
{
    int64_t ne[2] = {r, c};
    return bench_leaf_new(g, role, fill, EX_F32, 2, ne, name);
}

static ex_tensor *vec(bench_graph *g, bench_role role, bench_fill fill, int64_t n, const char *name)
{
    return bench_leaf_new(g, role, fill, EX_F32, 1, &n, name);
}

/* A constant input: v[0..nv-1] repeated. */
static ex_tensor *constant(bench_graph *g, int64_t n, int nv, const float *v, const char *name)
{
    ex_tensor *t = bench_leaf_new(g, BENCH_INPUT, BENCH_VALUES, EX_F32, 1, &n, name);
    bench_leaf *l = &g->leaf[g->nleaf - 1];
    l->nv = nv;
    memcpy(l->v, v, (size_t)nv * sizeof *v);
    return t;
}

static ex_tensor *counter(bench_graph *g)
{
    int64_t two = 2;
    return bench_leaf_new(g, BENCH_INPUT, BENCH_COUNTER, EX_I32, 1, &two, "counter");
}

static ex_tensor *labels(bench_graph *g)
{
    ex_tensor *t = bench_leaf_new(g, BENCH_INPUT, BENCH_LABELS, EX_I32, 1, &g->d->n, "labels");
    g->leaf[g->nleaf - 1].v[0] = (float)g->d->classes;
    return t;
}

static ex_tensor *logits(bench_graph *g, bench_role role)
{
    return subject(g, mat(g, role, BENCH_UNIFORM, g->d->n, g->d->classes, "logits"));
}

static ex_tensor *alpha(bench_graph *g, bench_role role, bench_fill fill)
{
    return subject(g, mat(g, role, fill, g->d->edges, g->d->cands, "alpha"));
}

/* ---- element-wise ---- */

static ex_tensor *build_add(bench_graph *g)
{
    ex_tensor *a = subject(g, act(g, BENCH_INPUT, "a"));
    return ex_add(g->ctx, a, act(g, BENCH_INPUT, "b"));
}

static ex_tensor *build_sub(bench_graph *g)
{
    ex_tensor *a = subject(g, act(g, BENCH_INPUT, "a"));
    return ex_sub(g->ctx, a, act(g, BENCH_INPUT, "b"));
}

static ex_tensor *build_mul(bench_graph *g)
{
    ex_tensor *a = subject(g, act(g, BENCH_INPUT, "a"));
    return ex_mul(g->ctx, a, act(g, BENCH_INPUT, "b"));
}

static ex_tensor *build_scale(bench_graph *g)
{
    return ex_scale(g->ctx, subject(g, act(g, BENCH_INPUT, "x")), 0.5f);
}

static ex_tensor *build_axpy(bench_graph *g)
{
    ex_tensor *x = subject(g, act(g, BENCH_INPUT, "x"));
    return ex_axpy(g->ctx, 0.5f, x, act(g, BENCH_INPUT, "y"));
}

static ex_tensor *build_relu(bench_graph *g)
{
    return ex_relu(g->ctx, subject(g, act(g, BENCH_DIFF, "x")));
}

static ex_tensor *build_fill(bench_graph *g)
{
    const bench_dims *d = g->d;
    int64_t ne[4] = {d->n, d->c, d->h, d->w};
    return subject(g, ex_fill(g->ctx, 4, ne, 1.0f));
}

static ex_tensor *build_copy(bench_graph *g)
{
    return ex_copy(g->ctx, subject(g, act(g, BENCH_INPUT, "x")));
}

static ex_tensor *build_drop_path(bench_graph *g)
{
    ex_tensor *x = subject(g, act(g, BENCH_INPUT, "x"));
    return ex_drop_path(g->ctx, x, counter(g), 0.8f);
}

/* ---- reductions (over H and W, as global pooling and per-sample statistics do) ---- */

#define AXES_HW ((1u << 2) | (1u << 3))

static ex_tensor *build_sum(bench_graph *g)
{
    return ex_sum(g->ctx, subject(g, act(g, BENCH_INPUT, "x")), AXES_HW);
}

static ex_tensor *build_mean(bench_graph *g)
{
    return ex_mean(g->ctx, subject(g, act(g, BENCH_INPUT, "x")), AXES_HW);
}

static ex_tensor *build_max(bench_graph *g)
{
    return ex_max(g->ctx, subject(g, act(g, BENCH_DIFF, "x")), AXES_HW);
}

/* ---- softmax family, on the classifier's logits ---- */

static ex_tensor *build_softmax(bench_graph *g)
{
    return ex_softmax(g->ctx, logits(g, BENCH_DIFF));
}

static ex_tensor *build_log_softmax(bench_graph *g)
{
    return ex_log_softmax(g->ctx, logits(g, BENCH_DIFF));
}

static ex_tensor *build_cross_entropy(bench_graph *g)
{
    ex_tensor *x = logits(g, BENCH_DIFF);
    return ex_cross_entropy(g->ctx, x, labels(g));
}

static ex_tensor *build_accuracy(bench_graph *g)
{
    ex_tensor *x = logits(g, BENCH_INPUT);
    return ex_accuracy(g->ctx, x, labels(g));
}

/* ---- convolution and GEMM ---- */

static ex_tensor *build_conv2d(bench_graph *g)
{
    const bench_dims *d = g->d;
    ex_tensor *x = subject(g, act(g, BENCH_DIFF, "x"));
    int64_t wne[4] = {d->c, d->c, 3, 3};
    ex_tensor *w = bench_leaf_new(g, BENCH_DIFF, BENCH_UNIFORM, EX_F32, 4, wne, "w");
    ex_conv_params p = {{1, 1}, {1, 1}, {1, 1}};
    return ex_conv2d(g->ctx, x, w, &p);
}

static ex_tensor *build_dwconv2d(bench_graph *g)
{
    const bench_dims *d = g->d;
    ex_tensor *x = subject(g, act(g, BENCH_DIFF, "x"));
    int64_t wne[4] = {d->c, 1, 3, 3};
    ex_tensor *w = bench_leaf_new(g, BENCH_DIFF, BENCH_UNIFORM, EX_F32, 4, wne, "w");
    ex_conv_params p = {{1, 1}, {1, 1}, {1, 1}};
    return ex_dwconv2d(g->ctx, x, w, &p);
}

static ex_tensor *build_pwconv(bench_graph *g)
{
    ex_tensor *x = subject(g, act(g, BENCH_DIFF, "x"));
    ex_tensor *w = mat(g, BENCH_DIFF, BENCH_UNIFORM, g->d->c, g->d->c, "w");
    return ex_pwconv(g->ctx, x, w);
}

static ex_tensor *build_matmul(bench_graph *g)
{
    const bench_dims *d = g->d;
    ex_tensor *a = subject(g, mat(g, BENCH_INPUT, BENCH_UNIFORM, d->gemm_m, d->gemm_k, "a"));
    ex_tensor *b = mat(g, BENCH_INPUT, BENCH_UNIFORM, d->gemm_k, d->gemm_n, "b");
    return ex_matmul(g->ctx, a, b);
}

static ex_tensor *build_linear(bench_graph *g)
{
    const bench_dims *d = g->d;
    ex_tensor *x = subject(g, mat(g, BENCH_INPUT, BENCH_UNIFORM, d->n, d->features, "x"));
    ex_tensor *w = mat(g, BENCH_INPUT, BENCH_UNIFORM, d->classes, d->features, "w");
    return ex_linear(g->ctx, x, w, vec(g, BENCH_INPUT, BENCH_UNIFORM, d->classes, "b"));
}

/* ---- pooling ---- */

static const ex_pool_params pool3 = {{3, 3}, {1, 1}, {1, 1}};

static ex_tensor *build_avg_pool(bench_graph *g)
{
    return ex_avg_pool(g->ctx, subject(g, act(g, BENCH_DIFF, "x")), &pool3);
}

static ex_tensor *build_max_pool(bench_graph *g)
{
    return ex_max_pool(g->ctx, subject(g, act(g, BENCH_DIFF, "x")), &pool3);
}

static ex_tensor *build_global_avg_pool(bench_graph *g)
{
    return ex_global_avg_pool(g->ctx, subject(g, act(g, BENCH_INPUT, "x")));
}

/* ---- batch norm: training mode without affine, as in the DARTS search cells ---- */

static ex_tensor *build_batch_norm(bench_graph *g)
{
    ex_tensor *x = subject(g, act(g, BENCH_DIFF, "x"));
    ex_tensor *rm = vec(g, BENCH_STATE, BENCH_UNIFORM, g->d->c, "running_mean");
    ex_tensor *rv = vec(g, BENCH_STATE, BENCH_POSITIVE, g->d->c, "running_var");
    return ex_batch_norm(g->ctx, x, NULL, NULL, rm, rv, true, 1e-5f, 0.1f);
}

/* ---- NAS ---- */

/* One edge: the 7 materialized candidates of the DARTS space (`none` is not passed). */
static ex_tensor *build_mixed_sum(bench_graph *g)
{
    enum { NX = 7 };
    static const float one = 1.0f;
    ex_tensor *w = vec(g, BENCH_DIFF, BENCH_UNIFORM, g->d->cands, "w");
    ex_tensor *mask = constant(g, g->d->cands, 1, &one, "mask");
    ex_tensor *x[NX];
    int idx[NX];
    for (int j = 0; j < NX; j++) {
        x[j] = act(g, BENCH_INPUT, "candidate");
        idx[j] = j + 1;
    }
    subject(g, x[0]);
    return ex_mixed_sum(g->ctx, w, mask, NX, x, idx);
}

static ex_tensor *build_gumbel_softmax(bench_graph *g)
{
    static const float tau = 1.0f;
    ex_tensor *a = alpha(g, BENCH_DIFF, BENCH_UNIFORM);
    return ex_gumbel_softmax(g->ctx, a, constant(g, 1, 1, &tau, "tau"), counter(g), false);
}

static ex_tensor *build_hardmax_st(bench_graph *g)
{
    return ex_hardmax_st(g->ctx, alpha(g, BENCH_INPUT, BENCH_UNIFORM));
}

static ex_tensor *build_entropy(bench_graph *g)
{
    return ex_entropy(g->ctx, alpha(g, BENCH_DIFF, BENCH_POSITIVE));
}

static ex_tensor *build_topk_mask(bench_graph *g)
{
    return ex_topk_mask(g->ctx, alpha(g, BENCH_INPUT, BENCH_UNIFORM), 2, 0.0f);
}

/* ---- optimizer: the weight step (SGD) and the architecture step (Adam) of DARTS ---- */

static ex_tensor *build_sgd(bench_graph *g)
{
    static const float lr = 0.025f;
    int64_t n = g->d->flat;
    ex_tensor *p = subject(g, vec(g, BENCH_PARAM, BENCH_UNIFORM, n, "p"));
    ex_tensor *grad = vec(g, BENCH_STATE, BENCH_UNIFORM, n, "g");
    ex_tensor *mom = vec(g, BENCH_STATE, BENCH_UNIFORM, n, "mom");
    return ex_sgd(g->ctx, p, grad, mom, constant(g, 1, 1, &lr, "lr"), 0.9f, 3e-4f, false);
}

static ex_tensor *build_adam(bench_graph *g)
{
    static const float hyper[2] = {3e-4f, 1.0f}; /* lr, step */
    int64_t n = g->d->flat;
    ex_tensor *p = subject(g, vec(g, BENCH_PARAM, BENCH_UNIFORM, n, "p"));
    ex_tensor *grad = vec(g, BENCH_STATE, BENCH_UNIFORM, n, "g");
    ex_tensor *m = vec(g, BENCH_STATE, BENCH_UNIFORM, n, "m");
    ex_tensor *v = vec(g, BENCH_STATE, BENCH_POSITIVE, n, "v");
    ex_tensor *h = constant(g, 2, 2, hyper, "hyper");
    return ex_adam(g->ctx, p, grad, m, v, h, 0.5f, 0.999f, 1e-8f, 1e-3f);
}

static ex_tensor *build_grad_norm(bench_graph *g)
{
    enum { NG = 4 };
    ex_tensor *t[NG];
    for (int i = 0; i < NG; i++)
        t[i] = vec(g, BENCH_STATE, BENCH_UNIFORM, g->d->flat / NG, "g");
    subject(g, t[0]);
    return ex_grad_norm(g->ctx, NG, t);
}

static ex_tensor *build_clip(bench_graph *g)
{
    ex_tensor *grad = subject(g, vec(g, BENCH_STATE, BENCH_UNIFORM, g->d->flat, "g"));
    return ex_clip(g->ctx, grad, ex_grad_norm(g->ctx, 1, &grad), 5.0f);
}

/* ---- random ---- */

static ex_tensor *build_rand_uniform(bench_graph *g)
{
    const bench_dims *d = g->d;
    int64_t ne[4] = {d->n, d->c, d->h, d->w};
    return subject(g, ex_rand_uniform(g->ctx, counter(g), 4, ne, 0.0f, 1.0f));
}

static ex_tensor *build_rand_normal(bench_graph *g)
{
    const bench_dims *d = g->d;
    int64_t ne[4] = {d->n, d->c, d->h, d->w};
    return subject(g, ex_rand_normal(g->ctx, counter(g), 4, ne, 0.0f, 1.0f));
}

/* Indexed by op, so a case sits next to nothing but its op; backward ops reuse their
 * forward op's builder. */
static const bench_case cases[EX_OP_COUNT] = {
    [EX_OP_ADD] = {build_add, 0, "a + b"},
    [EX_OP_SUB] = {build_sub, 0, "a - b"},
    [EX_OP_MUL] = {build_mul, 0, "a * b"},
    [EX_OP_SCALE] = {build_scale, 0, "0.5 x"},
    [EX_OP_AXPY] = {build_axpy, 0, "0.5 x + y"},
    [EX_OP_RELU] = {build_relu, 0, "max(x, 0)"},
    [EX_OP_RELU_BWD] = {build_relu, 1, "gradient of relu"},
    [EX_OP_FILL] = {build_fill, 0, "constant 1"},
    [EX_OP_COPY] = {build_copy, 0, "contiguous copy"},
    [EX_OP_DROP_PATH] = {build_drop_path, 0, "keep 0.8"},
    [EX_OP_SUM] = {build_sum, 0, "over H, W"},
    [EX_OP_MEAN] = {build_mean, 0, "over H, W"},
    [EX_OP_MAX] = {build_max, 0, "over H, W"},
    [EX_OP_MAX_BWD] = {build_max, 1, "gradient of max over H, W"},
    [EX_OP_SOFTMAX] = {build_softmax, 0, "logits"},
    [EX_OP_SOFTMAX_BWD] = {build_softmax, 1, "gradient of softmax"},
    [EX_OP_LOG_SOFTMAX] = {build_log_softmax, 0, "logits"},
    [EX_OP_LOG_SOFTMAX_BWD] = {build_log_softmax, 1, "gradient of log_softmax"},
    [EX_OP_CROSS_ENTROPY] = {build_cross_entropy, 0, "logits, i32 labels"},
    [EX_OP_CROSS_ENTROPY_BWD] = {build_cross_entropy, 1, "gradient of cross_entropy"},
    [EX_OP_ACCURACY] = {build_accuracy, 0, "logits, i32 labels"},
    [EX_OP_CONV2D] = {build_conv2d, 0, "3x3 s1 p1, C->C"},
    [EX_OP_CONV2D_BWD_DATA] = {build_conv2d, 1, "3x3 s1 p1, C->C"},
    [EX_OP_CONV2D_BWD_FILTER] = {build_conv2d, 1, "3x3 s1 p1, C->C"},
    [EX_OP_DWCONV2D] = {build_dwconv2d, 0, "3x3 s1 p1"},
    [EX_OP_DWCONV2D_BWD_DATA] = {build_dwconv2d, 1, "3x3 s1 p1"},
    [EX_OP_DWCONV2D_BWD_FILTER] = {build_dwconv2d, 1, "3x3 s1 p1"},
    [EX_OP_PWCONV] = {build_pwconv, 0, "C->C"},
    [EX_OP_PWCONV_BWD_FILTER] = {build_pwconv, 1, "C->C"},
    [EX_OP_MATMUL] = {build_matmul, 0, "a [m, k] x b [k, k]; shape is a's"},
    [EX_OP_LINEAR] = {build_linear, 0, "classifier, 10 outputs, bias"},
    [EX_OP_AVG_POOL] = {build_avg_pool, 0, "3x3 s1 p1"},
    [EX_OP_AVG_POOL_BWD] = {build_avg_pool, 1, "3x3 s1 p1"},
    [EX_OP_MAX_POOL] = {build_max_pool, 0, "3x3 s1 p1"},
    [EX_OP_MAX_POOL_BWD] = {build_max_pool, 1, "3x3 s1 p1"},
    [EX_OP_GLOBAL_AVG_POOL] = {build_global_avg_pool, 0, ""},
    [EX_OP_BN_STATS] = {build_batch_norm, 0, "train, no affine"},
    [EX_OP_BN_APPLY] = {build_batch_norm, 0, "train, no affine"},
    [EX_OP_BN_BWD_REDUCE] = {build_batch_norm, 1, "train, no affine"},
    [EX_OP_BN_BWD_DATA] = {build_batch_norm, 1, "train, no affine"},
    [EX_OP_MIXED_SUM] = {build_mixed_sum, 0, "7 candidates"},
    [EX_OP_MIXED_SUM_BWD_W] = {build_mixed_sum, 1, "7 candidates"},
    [EX_OP_GUMBEL_SOFTMAX] = {build_gumbel_softmax, 0, "soft, tau 1"},
    [EX_OP_GUMBEL_SOFTMAX_BWD] = {build_gumbel_softmax, 1, "soft, tau 1"},
    [EX_OP_HARDMAX_ST] = {build_hardmax_st, 0, ""},
    [EX_OP_ENTROPY] = {build_entropy, 0, ""},
    [EX_OP_ENTROPY_BWD] = {build_entropy, 1, ""},
    [EX_OP_TOPK_MASK] = {build_topk_mask, 0, "k 2, threshold 0"},
    [EX_OP_SGD] = {build_sgd, 0, "momentum 0.9, weight decay 3e-4"},
    [EX_OP_ADAM] = {build_adam, 0, "betas 0.5, 0.999, weight decay 1e-3"},
    [EX_OP_GRAD_NORM] = {build_grad_norm, 0, "4 tensors, shape is each one's"},
    [EX_OP_CLIP] = {build_clip, 0, "max norm 5"},
    [EX_OP_RAND_UNIFORM] = {build_rand_uniform, 0, "[0, 1)"},
    [EX_OP_RAND_NORMAL] = {build_rand_normal, 0, "N(0, 1)"},
};

const bench_case *bench_case_get(ex_op op)
{
    if ((int)op < 0 || op >= EX_OP_COUNT || cases[op].build == NULL)
        return NULL;
    return &cases[op];
}
