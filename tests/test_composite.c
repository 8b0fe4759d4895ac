/* Composite networks end to end on the CPU backend: a DARTS SepConv block against a
 * hand-written double-precision forward and backward, and small networks that must learn
 * (an MLP on XOR, a CNN on generated images). Only the public API is used. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exapt/exapt.h"
#include "exapt/network.h"

/* ---- helpers ---- */

/* splitmix64: a seeded generator of our own, so initial values never depend on the
 * library under test. */
typedef struct rng {
    uint64_t s;
} rng;

static uint64_t rng_next(rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float rng_uniform(rng *r, float lo, float hi)
{
    return lo + (hi - lo) * (float)((rng_next(r) >> 40) * 0x1.0p-24);
}

static void fill_uniform(rng *r, float *v, int64_t n, float lo, float hi)
{
    for (int64_t i = 0; i < n; i++)
        v[i] = rng_uniform(r, lo, hi);
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    assert_non_null(p);
    return p;
}

static void check_ok(ex_status st, const char *what, const char *msg)
{
    if (st != EX_OK)
        fail_msg("%s: %s (%s)", what, ex_status_str(st), msg ? msg : "");
}

static void check_ctx(ex_ctx *ctx, const char *what)
{
    check_ok(ex_ctx_status(ctx), what, ex_ctx_error(ctx));
}

static ex_backend *open_cpu(void)
{
    char msg[256] = "";
    ex_backend *be = NULL;
    check_ok(ex_backend_open("cpu", &be, msg, sizeof msg), "ex_backend_open(cpu)", msg);
    assert_non_null(be);
    return be;
}

static ex_plan *plan_graph(ex_ctx *ctx, ex_backend *be)
{
    ex_plan_opts opts;
    ex_plan_opts_default(&opts);
    ex_plan *plan = NULL;
    check_ok(ex_graph_plan(ctx, be, &opts, &plan), "ex_graph_plan", ex_ctx_error(ctx));
    assert_non_null(plan);
    return plan;
}

static void write_t(ex_plan *plan, ex_tensor *t, const void *data)
{
    size_t bytes = (size_t)ex_tensor_numel(t) * (size_t)ex_dtype_size(ex_tensor_dtype(t));
    check_ok(ex_plan_write(plan, t, data, bytes), "ex_plan_write", ex_plan_error(plan));
}

static void read_t(ex_plan *plan, ex_tensor *t, void *data)
{
    size_t bytes = (size_t)ex_tensor_numel(t) * (size_t)ex_dtype_size(ex_tensor_dtype(t));
    check_ok(ex_plan_read(plan, t, data, bytes), "ex_plan_read", ex_plan_error(plan));
}

static void run_plan(ex_plan *plan)
{
    check_ok(ex_plan_run(plan), "ex_plan_run", ex_plan_error(plan));
}

static float read_scalar(ex_plan *plan, ex_tensor *t)
{
    float v = NAN;
    assert_int_equal(ex_tensor_numel(t), 1);
    read_t(plan, t, &v);
    return v;
}

/* Normalized mean squared error sum (y - ref)^2 / sum ref^2. */
static double nmse(const float *y, const double *ref, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)y[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    return den > 0 ? num / den : num;
}

static void check_nmse(const char *what, const float *y, const double *ref, int64_t n, double bound)
{
    double e = nmse(y, ref, n);
    printf("  %-14s nmse %.3e (bound %.0e)\n", what, e, bound);
    if (!(e <= bound))
        fail_msg("%s: nmse %.3e above %.1e", what, e, bound);
}

static ex_tensor *param(ex_ctx *ctx, int ndim, int64_t a, int64_t b, int64_t c, int64_t d,
                        const char *name)
{
    const int64_t ne[4] = {a, b, c, d};
    return ex_param(ctx, ndim, ne, name);
}

static ex_tensor *state1(ex_ctx *ctx, int64_t n, const char *name)
{
    return ex_state(ctx, EX_F32, 1, &n, name);
}

/* ---- the DARTS SepConv block, double-precision reference ---- */

typedef struct dims {
    int n, c, h, w;
} dims;

static int64_t numel(dims d)
{
    return (int64_t)d.n * d.c * d.h * d.w;
}

static int64_t at(dims d, int n, int c, int i, int j)
{
    return (((int64_t)n * d.c + c) * d.h + i) * d.w + j;
}

static void ref_relu(const double *x, double *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] > 0 ? x[i] : 0;
}

static void ref_relu_bwd(const double *x, const double *dy, double *dx, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dx[i] = x[i] > 0 ? dy[i] : 0;
}

/* Depthwise 3x3, stride 1, pad 1: y[n,c,i,j] = sum_ab w[c,a,b] x[n,c,i+a-1,j+b-1]. */
static void ref_dw3(const double *x, const double *w, double *y, dims d)
{
    for (int n = 0; n < d.n; n++)
        for (int c = 0; c < d.c; c++)
            for (int i = 0; i < d.h; i++)
                for (int j = 0; j < d.w; j++) {
                    double s = 0;
                    for (int a = 0; a < 3; a++)
                        for (int b = 0; b < 3; b++) {
                            int ii = i + a - 1, jj = j + b - 1;
                            if (ii >= 0 && ii < d.h && jj >= 0 && jj < d.w)
                                s += w[c * 9 + a * 3 + b] * x[at(d, n, c, ii, jj)];
                        }
                    y[at(d, n, c, i, j)] = s;
                }
}

/* The chain rule through ref_dw3: every product w * x sends dy to both factors. */
static void ref_dw3_bwd(const double *x, const double *w, const double *dy, double *dx, double *dw,
                        dims d)
{
    memset(dx, 0, sizeof *dx * (size_t)numel(d));
    memset(dw, 0, sizeof *dw * (size_t)d.c * 9);
    for (int n = 0; n < d.n; n++)
        for (int c = 0; c < d.c; c++)
            for (int i = 0; i < d.h; i++)
                for (int j = 0; j < d.w; j++) {
                    double g = dy[at(d, n, c, i, j)];
                    for (int a = 0; a < 3; a++)
                        for (int b = 0; b < 3; b++) {
                            int ii = i + a - 1, jj = j + b - 1;
                            if (ii < 0 || ii >= d.h || jj < 0 || jj >= d.w)
                                continue;
                            dx[at(d, n, c, ii, jj)] += w[c * 9 + a * 3 + b] * g;
                            dw[c * 9 + a * 3 + b] += x[at(d, n, c, ii, jj)] * g;
                        }
                }
}

/* Pointwise: y[n,o,p] = sum_c w[o,c] x[n,c,p], x of dims d, y with co channels. */
static void ref_pw(const double *x, const double *w, double *y, dims d, int co)
{
    int64_t hw = (int64_t)d.h * d.w;
    for (int n = 0; n < d.n; n++)
        for (int o = 0; o < co; o++)
            for (int64_t p = 0; p < hw; p++) {
                double s = 0;
                for (int c = 0; c < d.c; c++)
                    s += w[o * d.c + c] * x[((int64_t)n * d.c + c) * hw + p];
                y[((int64_t)n * co + o) * hw + p] = s;
            }
}

static void ref_pw_bwd(const double *x, const double *w, const double *dy, double *dx, double *dw,
                       dims d, int co)
{
    int64_t hw = (int64_t)d.h * d.w;
    memset(dx, 0, sizeof *dx * (size_t)numel(d));
    memset(dw, 0, sizeof *dw * (size_t)co * d.c);
    for (int n = 0; n < d.n; n++)
        for (int o = 0; o < co; o++)
            for (int64_t p = 0; p < hw; p++) {
                double g = dy[((int64_t)n * co + o) * hw + p];
                for (int c = 0; c < d.c; c++) {
                    int64_t xi = ((int64_t)n * d.c + c) * hw + p;
                    dx[xi] += w[o * d.c + c] * g;
                    dw[o * d.c + c] += x[xi] * g;
                }
            }
}

#define BN_EPS 1e-5
#define BN_MOMENTUM 0.1

/* Training batch norm: per channel, biased batch variance; mean and var are returned for
 * the backward pass and the running-statistics check. */
static void ref_bn(const double *x, const double *g, const double *b, double *y, double *mean,
                   double *var, dims d)
{
    int64_t hw = (int64_t)d.h * d.w, m = (int64_t)d.n * hw;
    for (int c = 0; c < d.c; c++) {
        double s = 0, ss = 0;
        for (int n = 0; n < d.n; n++)
            for (int64_t p = 0; p < hw; p++)
                s += x[((int64_t)n * d.c + c) * hw + p];
        mean[c] = s / (double)m;
        for (int n = 0; n < d.n; n++)
            for (int64_t p = 0; p < hw; p++) {
                double t = x[((int64_t)n * d.c + c) * hw + p] - mean[c];
                ss += t * t;
            }
        var[c] = ss / (double)m;
        double inv = 1.0 / sqrt(var[c] + BN_EPS);
        for (int n = 0; n < d.n; n++)
            for (int64_t p = 0; p < hw; p++) {
                int64_t i = ((int64_t)n * d.c + c) * hw + p;
                y[i] = (x[i] - mean[c]) * inv * g[c] + b[c];
            }
    }
}

/* Backward of training batch norm, derived by hand: with xh = (x - mean) invstd,
 * dbeta = sum dy, dgamma = sum dy xh, dx = gamma invstd (dy - dbeta/M - xh dgamma/M). */
static void ref_bn_bwd(const double *x, const double *g, const double *mean, const double *var,
                       const double *dy, double *dx, double *dg, double *db, dims d)
{
    int64_t hw = (int64_t)d.h * d.w, m = (int64_t)d.n * hw;
    for (int c = 0; c < d.c; c++) {
        double inv = 1.0 / sqrt(var[c] + BN_EPS), sg = 0, sb = 0;
        for (int n = 0; n < d.n; n++)
            for (int64_t p = 0; p < hw; p++) {
                int64_t i = ((int64_t)n * d.c + c) * hw + p;
                sb += dy[i];
                sg += dy[i] * (x[i] - mean[c]) * inv;
            }
        dg[c] = sg;
        db[c] = sb;
        for (int n = 0; n < d.n; n++)
            for (int64_t p = 0; p < hw; p++) {
                int64_t i = ((int64_t)n * d.c + c) * hw + p;
                double xh = (x[i] - mean[c]) * inv;
                dx[i] = g[c] * inv * (dy[i] - sb / (double)m - xh * sg / (double)m);
            }
    }
}

/* The leaves of the block: x and every parameter, in one order for host and graph. */
enum { P_X, P_DW1, P_PW1, P_G1, P_B1, P_DW2, P_PW2, P_G2, P_B2, P_COUNT };
static const char *const p_names[P_COUNT] = {"x",   "dw1", "pw1",    "gamma1", "beta1",
                                             "dw2", "pw2", "gamma2", "beta2"};

typedef struct sep_ref {
    dims d; /* of x and every inner activation */
    int co; /* output channels */
    double *v[P_COUNT];
    double *r; /* loss = sum y r */
    double *a[7], *y;
    double mean[2][16], var[2][16];
    double *dv[P_COUNT];
} sep_ref;

static void sep_ref_forward(sep_ref *s)
{
    dims d = s->d, dout = {d.n, s->co, d.h, d.w};
    int64_t n = numel(d);
    ref_relu(s->v[P_X], s->a[0], n);
    ref_dw3(s->a[0], s->v[P_DW1], s->a[1], d);
    ref_pw(s->a[1], s->v[P_PW1], s->a[2], d, d.c);
    ref_bn(s->a[2], s->v[P_G1], s->v[P_B1], s->a[3], s->mean[0], s->var[0], d);
    ref_relu(s->a[3], s->a[4], n);
    ref_dw3(s->a[4], s->v[P_DW2], s->a[5], d);
    ref_pw(s->a[5], s->v[P_PW2], s->a[6], d, s->co);
    ref_bn(s->a[6], s->v[P_G2], s->v[P_B2], s->y, s->mean[1], s->var[1], dout);
}

/* Backward from dy = r (the gradient of sum y r), stage by stage in reverse. */
static void sep_ref_backward(sep_ref *s)
{
    dims d = s->d, dout = {d.n, s->co, d.h, d.w};
    int64_t n = numel(d);
    double *d6 = xcalloc((size_t)numel(dout), sizeof *d6);
    double *t1 = xcalloc((size_t)n, sizeof *t1), *t2 = xcalloc((size_t)n, sizeof *t2);
    ref_bn_bwd(s->a[6], s->v[P_G2], s->mean[1], s->var[1], s->r, d6, s->dv[P_G2], s->dv[P_B2],
               dout);
    ref_pw_bwd(s->a[5], s->v[P_PW2], d6, t1, s->dv[P_PW2], d, s->co);
    ref_dw3_bwd(s->a[4], s->v[P_DW2], t1, t2, s->dv[P_DW2], d);
    ref_relu_bwd(s->a[3], t2, t1, n);
    ref_bn_bwd(s->a[2], s->v[P_G1], s->mean[0], s->var[0], t1, t2, s->dv[P_G1], s->dv[P_B1], d);
    ref_pw_bwd(s->a[1], s->v[P_PW1], t2, t1, s->dv[P_PW1], d, d.c);
    ref_dw3_bwd(s->a[0], s->v[P_DW1], t1, t2, s->dv[P_DW1], d);
    ref_relu_bwd(s->v[P_X], t2, s->dv[P_X], n);
    free(d6);
    free(t1);
    free(t2);
}

/* ---- the same block as an exapt graph ---- */

typedef struct sep_graph {
    ex_tensor *leaf[P_COUNT];
    ex_tensor *rm[2], *rv[2];
    ex_tensor *r, *y, *loss;
} sep_graph;

static ex_tensor *bn_train(ex_ctx *ctx, ex_tensor *x, ex_tensor *g, ex_tensor *b, ex_tensor *rm,
                           ex_tensor *rv)
{
    return ex_batch_norm(ctx, x, g, b, rm, rv, true, (float)BN_EPS, (float)BN_MOMENTUM);
}

static void sep_graph_build(ex_ctx *ctx, sep_graph *g, dims d, int co)
{
    const ex_conv_params cp = {{1, 1}, {1, 1}, {1, 1}};
    ex_tensor **p = g->leaf;
    p[P_X] = param(ctx, 4, d.n, d.c, d.h, d.w, p_names[P_X]);
    p[P_DW1] = param(ctx, 4, d.c, 1, 3, 3, p_names[P_DW1]);
    p[P_PW1] = param(ctx, 2, d.c, d.c, 0, 0, p_names[P_PW1]);
    p[P_G1] = param(ctx, 1, d.c, 0, 0, 0, p_names[P_G1]);
    p[P_B1] = param(ctx, 1, d.c, 0, 0, 0, p_names[P_B1]);
    p[P_DW2] = param(ctx, 4, d.c, 1, 3, 3, p_names[P_DW2]);
    p[P_PW2] = param(ctx, 2, co, d.c, 0, 0, p_names[P_PW2]);
    p[P_G2] = param(ctx, 1, co, 0, 0, 0, p_names[P_G2]);
    p[P_B2] = param(ctx, 1, co, 0, 0, 0, p_names[P_B2]);
    g->rm[0] = state1(ctx, d.c, "rm1");
    g->rv[0] = state1(ctx, d.c, "rv1");
    g->rm[1] = state1(ctx, co, "rm2");
    g->rv[1] = state1(ctx, co, "rv2");
    const int64_t rne[4] = {d.n, co, d.h, d.w};
    g->r = ex_input(ctx, EX_F32, 4, rne, "r");

    ex_tensor *h = ex_relu(ctx, p[P_X]);
    h = ex_dwconv2d(ctx, h, p[P_DW1], &cp);
    h = ex_pwconv(ctx, h, p[P_PW1]);
    h = bn_train(ctx, h, p[P_G1], p[P_B1], g->rm[0], g->rv[0]);
    h = ex_relu(ctx, h);
    h = ex_dwconv2d(ctx, h, p[P_DW2], &cp);
    h = ex_pwconv(ctx, h, p[P_PW2]);
    g->y = ex_keep(ctx, bn_train(ctx, h, p[P_G2], p[P_B2], g->rm[1], g->rv[1]));
    g->loss = ex_keep(ctx, ex_sum(ctx, ex_mul(ctx, g->y, g->r), 0xFu));
    check_ctx(ctx, "building the SepConv block");
}

/* Initial values: x spans both signs so both ReLUs cut; gammas away from zero. */
static void sep_init(rng *r, float *f[P_COUNT], const int64_t *sz)
{
    for (int i = 0; i < P_COUNT; i++) {
        bool gamma = i == P_G1 || i == P_G2, beta = i == P_B1 || i == P_B2;
        float lo = gamma ? 0.5f : beta ? -0.5f : i == P_X ? -1.0f : -0.6f;
        float hi = gamma ? 1.5f : beta ? 0.5f : i == P_X ? 1.0f : 0.6f;
        fill_uniform(r, f[i], sz[i], lo, hi);
    }
}

/* Running statistics after one training step, as PyTorch: momentum 0.1 and the unbiased
 * variance var M / (M - 1). */
static void check_running_stats(ex_plan *plan, sep_graph *g, sep_ref *s, const float rm0[2][16],
                                const float rv0[2][16])
{
    int64_t m = (int64_t)s->d.n * s->d.h * s->d.w;
    for (int k = 0; k < 2; k++) {
        int c = k == 0 ? s->d.c : s->co;
        float rm[16], rv[16];
        double em[16], ev[16];
        read_t(plan, g->rm[k], rm);
        read_t(plan, g->rv[k], rv);
        for (int i = 0; i < c; i++) {
            em[i] = (1 - BN_MOMENTUM) * rm0[k][i] + BN_MOMENTUM * s->mean[k][i];
            ev[i] = (1 - BN_MOMENTUM) * rv0[k][i] +
                    BN_MOMENTUM * s->var[k][i] * (double)m / (double)(m - 1);
        }
        check_nmse(k == 0 ? "running_mean1" : "running_mean2", rm, em, c, 1e-11);
        check_nmse(k == 0 ? "running_var1" : "running_var2", rv, ev, c, 1e-11);
    }
}

static void sep_ref_alloc(sep_ref *s, const int64_t *sz, float *const f[P_COUNT])
{
    int64_t n = numel(s->d), nout = (int64_t)s->d.n * s->co * s->d.h * s->d.w;
    for (int i = 0; i < P_COUNT; i++) {
        s->v[i] = xcalloc((size_t)sz[i], sizeof(double));
        s->dv[i] = xcalloc((size_t)sz[i], sizeof(double));
        for (int64_t j = 0; j < sz[i]; j++)
            s->v[i][j] = f[i][j];
    }
    for (int i = 0; i < 6; i++)
        s->a[i] = xcalloc((size_t)n, sizeof(double));
    s->a[6] = xcalloc((size_t)nout, sizeof(double));
    s->y = xcalloc((size_t)nout, sizeof(double));
    s->r = xcalloc((size_t)nout, sizeof(double));
}

static void sep_ref_free(sep_ref *s)
{
    for (int i = 0; i < P_COUNT; i++) {
        free(s->v[i]);
        free(s->dv[i]);
    }
    for (int i = 0; i < 7; i++)
        free(s->a[i]);
    free(s->y);
    free(s->r);
}

/* Forward output, loss, the gradients of x and of every parameter, and the running
 * statistics of one training step of the block against the double-precision reference. */
/* The host side of one step: the f32 values written to the plan. */
typedef struct sep_host {
    int64_t sz[P_COUNT], nout;
    float *f[P_COUNT], *r;
    float rm0[2][16], rv0[2][16];
} sep_host;

static void sep_host_make(sep_host *h, const sep_graph *g)
{
    rng r = {20240601u};
    for (int i = 0; i < P_COUNT; i++) {
        h->sz[i] = ex_tensor_numel(g->leaf[i]);
        h->f[i] = xcalloc((size_t)h->sz[i], sizeof(float));
    }
    sep_init(&r, h->f, h->sz);
    h->nout = ex_tensor_numel(g->r);
    h->r = xcalloc((size_t)h->nout, sizeof(float));
    fill_uniform(&r, h->r, h->nout, -1, 1);
    for (int k = 0; k < 2; k++) {
        fill_uniform(&r, h->rm0[k], 16, -0.3f, 0.3f);
        fill_uniform(&r, h->rv0[k], 16, 0.5f, 2.0f);
    }
}

static void sep_host_write(ex_plan *plan, const sep_graph *g, sep_host *h)
{
    for (int i = 0; i < P_COUNT; i++)
        write_t(plan, g->leaf[i], h->f[i]);
    write_t(plan, g->r, h->r);
    for (int k = 0; k < 2; k++) {
        write_t(plan, g->rm[k], h->rm0[k]);
        write_t(plan, g->rv[k], h->rv0[k]);
    }
}

static void sep_host_free(sep_host *h)
{
    for (int i = 0; i < P_COUNT; i++)
        free(h->f[i]);
    free(h->r);
}

/* Bounds: the errors of a correct f32 block are near 1e-13; the bounds leave room for
 * backends that sum the M = 297 batch-norm elements per channel in plain f32, whose
 * rounding alone can reach ~1e-10 on the gamma and beta gradients. */
static void sep_check(ex_plan *plan, sep_graph *g, ex_tensor *const *grad, sep_ref *s,
                      const sep_host *h)
{
    float *y = xcalloc((size_t)h->nout, sizeof(float));
    read_t(plan, g->y, y);
    check_nmse("y", y, s->y, h->nout, 1e-10);
    free(y);
    double loss_ref = 0, loss_mag = 0;
    for (int64_t i = 0; i < h->nout; i++) {
        loss_ref += s->y[i] * s->r[i];
        loss_mag += fabs(s->y[i] * s->r[i]);
    }
    float loss = read_scalar(plan, g->loss);
    printf("  loss %.7g, reference %.7g\n", (double)loss, loss_ref);
    /* f32 summation of nout terms: the error scales with sum |y r|, not with the sum. */
    assert_true(fabs((double)loss - loss_ref) <= 1e-5 * loss_mag);
    for (int i = 0; i < P_COUNT; i++) {
        char what[32];
        float *got = xcalloc((size_t)h->sz[i], sizeof(float));
        snprintf(what, sizeof what, "d %s", p_names[i]);
        read_t(plan, grad[i], got);
        check_nmse(what, got, s->dv[i], h->sz[i], 1e-9);
        free(got);
    }
    check_running_stats(plan, g, s, (const float(*)[16])h->rm0, (const float(*)[16])h->rv0);
}

/* Forward output, loss, the gradients of x and of every parameter, and the running
 * statistics of one training step of the block against the double-precision reference. */
static void test_sepconv_block(void **state)
{
    (void)state;
    const dims d = {3, 5, 9, 11};
    const int co = 7;
    ex_ctx *ctx = ex_ctx_new();
    assert_non_null(ctx);
    sep_graph g;
    sep_graph_build(ctx, &g, d, co);
    ex_tensor *grad[P_COUNT];
    check_ok(ex_graph_backward(ctx, g.loss), "ex_graph_backward", ex_ctx_error(ctx));
    for (int i = 0; i < P_COUNT; i++) {
        grad[i] = ex_grad(ctx, g.leaf[i]);
        if (!grad[i])
            fail_msg("no gradient for %s", p_names[i]);
        assert_int_equal(ex_tensor_numel(grad[i]), ex_tensor_numel(g.leaf[i]));
    }
    ex_backend *be = open_cpu();
    ex_plan *plan = plan_graph(ctx, be);
    sep_host h;
    sep_host_make(&h, &g);
    sep_host_write(plan, &g, &h);
    run_plan(plan);

    sep_ref s = {.d = d, .co = co};
    sep_ref_alloc(&s, h.sz, h.f);
    for (int64_t i = 0; i < h.nout; i++)
        s.r[i] = h.r[i];
    sep_ref_forward(&s);
    sep_ref_backward(&s);
    printf("SepConv block x %dx%dx%dx%d -> %d channels\n", d.n, d.c, d.h, d.w, co);
    sep_check(plan, &g, grad, &s, &h);

    sep_ref_free(&s);
    sep_host_free(&h);
    ex_plan_free(plan);
    ex_backend_close(be);
    ex_ctx_free(ctx);
}

/* ---- an MLP learns XOR ---- */

/* ---- label smoothing: value and gradient against double precision and against
 * central finite differences of the plan's own loss ---- */

enum { LS_N = 6, LS_K = 5 };

static double ls_ref(const float *z, const int32_t *y, float eps, double *grad)
{
    double loss = 0;
    for (int i = 0; i < LS_N; i++) {
        const float *r = z + i * LS_K;
        double mx = r[0], sum = 0, logp_sum = 0;
        for (int k = 1; k < LS_K; k++)
            mx = r[k] > mx ? r[k] : mx;
        for (int k = 0; k < LS_K; k++)
            sum += exp(r[k] - mx);
        double lse = mx + log(sum);
        for (int k = 0; k < LS_K; k++) {
            double target = (1.0 - eps) * (k == y[i]) + eps / LS_K;
            logp_sum += r[k] - lse;
            grad[i * LS_K + k] = (exp(r[k] - lse) - target) / LS_N;
        }
        loss += -(1.0 - eps) * (r[y[i]] - lse) - eps * logp_sum / LS_K;
    }
    return loss / LS_N;
}

static void test_label_smoothing(void **state)
{
    (void)state;
    const float eps = 0.1f;
    ex_ctx *ctx = ex_ctx_new();
    assert_non_null(ctx);
    const int64_t n = LS_N;
    ex_tensor *z = param(ctx, 2, LS_N, LS_K, 0, 0, "logits");
    ex_tensor *y = ex_input(ctx, EX_I32, 1, &n, "labels");
    ex_tensor *loss = ex_keep(ctx, ex_cross_entropy_smoothed(ctx, z, y, eps));
    check_ok(ex_graph_backward(ctx, loss), "ex_graph_backward", ex_ctx_error(ctx));
    ex_tensor *g = ex_grad(ctx, z);
    assert_non_null(g);
    ex_keep(ctx, g);
    check_ctx(ctx, "building the smoothed loss");
    ex_backend *be = open_cpu();
    ex_plan *plan = plan_graph(ctx, be);
    rng r = {11};
    float logits[LS_N * LS_K], grad[LS_N * LS_K];
    int32_t labels[LS_N] = {0, 4, 2, 2, 1, 3};
    double ref_grad[LS_N * LS_K];
    fill_uniform(&r, logits, LS_N * LS_K, -3.0f, 3.0f);
    write_t(plan, y, labels);
    write_t(plan, z, logits);
    run_plan(plan);
    double ref = ls_ref(logits, labels, eps, ref_grad);
    assert_true(fabs(read_scalar(plan, loss) - ref) <= 1e-5 * (1 + ref));
    read_t(plan, g, grad);
    check_nmse("smoothed cross-entropy gradient", grad, ref_grad, LS_N * LS_K, 1e-10);
    /* every logit: the central difference of the loss the plan computes */
    const float h = 1e-2f;
    for (int i = 0; i < LS_N * LS_K; i++) {
        float keep = logits[i], f[2];
        for (int side = 0; side < 2; side++) {
            logits[i] = keep + (side ? -h : h);
            write_t(plan, z, logits);
            run_plan(plan);
            f[side] = read_scalar(plan, loss);
        }
        logits[i] = keep;
        double fd = ((double)f[0] - (double)f[1]) / (2.0 * h);
        if (fabs(fd - (double)grad[i]) > 2e-4)
            fail_msg("logit %d: finite difference %g, gradient %g", i, fd, (double)grad[i]);
    }
    /* smoothing 0 is the plain cross-entropy, the same node */
    ex_tensor *plain = ex_cross_entropy_smoothed(ctx, z, y, 0.0f);
    assert_int_equal(ex_tensor_ndim(plain), 1);
    ex_plan_free(plan);
    ex_backend_close(be);
    ex_ctx_free(ctx);
}

/* DARTS_V2 at 4 channels on nb single-channel hw x hw images of nk classes, layers cells,
 * no auxiliary head. */
static void small_network(ex_network_config *c, ex_genotype *g, int nb, int hw, int nk, int layers)
{
    ex_network_config_default(c);
    c->in_channels = 1;
    c->height = c->width = hw;
    c->classes = nk;
    c->batch = nb;
    c->channels = 4;
    c->layers = layers;
    c->auxiliary = false;
    assert_int_equal(ex_genotype_builtin("DARTS_V2", g), EX_OK);
}

/* A derived network trained with label smoothing: it learns, and ex_network_predict's
 * logits give exactly the loss and count that ex_network_eval reports. */
static void test_network_predict(void **state)
{
    (void)state;
    enum { NB = 8, HW = 8, NK = 2 };
    ex_network_config c;
    ex_genotype g;
    small_network(&c, &g, NB, HW, NK, 2);
    c.label_smoothing = 0.1f;
    ex_backend *be = open_cpu();
    ex_network *n = NULL;
    char msg[512] = "";
    check_ok(ex_network_new(&g, &c, be, &n, msg, sizeof msg), "ex_network_new", msg);
    float x[NB * HW * HW], logits[NB * NK];
    int32_t y[NB];
    rng r = {5};
    ex_network_stats first = {0}, st = {0};
    for (int step = 0; step < 30; step++) {
        for (int i = 0; i < NB; i++) { /* class: the bright half, top or bottom */
            y[i] = (i + step) % 2;
            for (int p = 0; p < HW * HW; p++)
                x[i * HW * HW + p] = (float)((p < HW * HW / 2) == (y[i] == 1)) +
                                     0.3f * (float)(rng_next(&r) >> 40) / 16777216.0f;
        }
        check_ok(ex_network_step(n, x, y, 0.05f, &st), "ex_network_step", ex_network_error(n));
        if (!step)
            first = st;
    }
    assert_true(st.loss < 0.5f * first.loss);
    float loss = 0;
    int correct = -1;
    check_ok(ex_network_eval(n, x, y, &loss, &correct), "ex_network_eval", ex_network_error(n));
    check_ok(ex_network_predict(n, x, logits), "ex_network_predict", ex_network_error(n));
    double ce = 0;
    int right = 0;
    for (int i = 0; i < NB; i++) {
        double a = logits[2 * i], b = logits[2 * i + 1], mx = a > b ? a : b;
        ce -= (y[i] ? b : a) - (mx + log(exp(a - mx) + exp(b - mx)));
        right += (b > a) == (y[i] == 1);
    }
    assert_true(fabs(ce / NB - (double)loss) <= 1e-5 * (1 + ce / NB));
    assert_int_equal(right, correct);
    assert_int_equal(correct, NB);
    ex_network_free(n);
    ex_backend_close(be);
}

/* The evaluation pass in chunks (eval_chunk) gives every image the logits one pass of the
 * whole batch gives (up to the last bits: a BLAS library may order a product's sums by its
 * size), and the same count and loss; a chunk that does not divide the batch is refused. */
static void test_network_chunks(void **state)
{
    (void)state;
    enum { NB = 12, HW = 8, NK = 3 };
    ex_network_config c;
    ex_genotype g;
    small_network(&c, &g, NB, HW, NK, 3);
    c.seed = 11;
    ex_backend *be = open_cpu();
    float x[NB * HW * HW], logits[2][NB * NK], loss[2];
    int32_t y[NB];
    int correct[2];
    rng r = {9};
    fill_uniform(&r, x, NB * HW * HW, -2.0f, 2.0f);
    for (int i = 0; i < NB; i++)
        y[i] = i % NK;
    const int chunk[2] = {NB, 3};
    for (int k = 0; k < 2; k++) {
        ex_network *n = NULL;
        char msg[512] = "";
        c.eval_chunk = chunk[k];
        check_ok(ex_network_new(&g, &c, be, &n, msg, sizeof msg), "ex_network_new", msg);
        ex_network_config got;
        ex_network_config_default(&got);
        ex_network_get_config(n, &got);
        assert_int_equal(got.eval_chunk, chunk[k]);
        check_ok(ex_network_predict(n, x, logits[k]), "ex_network_predict", ex_network_error(n));
        check_ok(ex_network_eval(n, x, y, &loss[k], &correct[k]), "ex_network_eval",
                 ex_network_error(n));
        ex_network_free(n);
    }
    for (int i = 0; i < NB * NK; i++)
        assert_true(fabsf(logits[0][i] - logits[1][i]) <= 1e-5f * (1.0f + fabsf(logits[0][i])));
    assert_int_equal(correct[0], correct[1]);
    assert_true(fabsf(loss[0] - loss[1]) <= 1e-5f * fabsf(loss[0]));
    ex_network *n = NULL;
    char msg[512] = "";
    c.eval_chunk = 5;
    assert_int_equal(ex_network_new(&g, &c, be, &n, msg, sizeof msg), EX_ERR_ARG);
    assert_null(n);
    assert_non_null(strstr(msg, "eval_chunk 5 does not divide eval_batch 12"));
    c.eval_chunk = 0; /* the backend's choice divides the batch */
    check_ok(ex_network_new(&g, &c, be, &n, msg, sizeof msg), "ex_network_new", msg);
    ex_network_config got;
    ex_network_config_default(&got);
    ex_network_get_config(n, &got);
    assert_true(got.eval_chunk >= 1 && NB % got.eval_chunk == 0);
    ex_network_free(n);
    ex_backend_close(be);
}

enum opt_kind { OPT_SGD, OPT_ADAM };

typedef struct mlp {
    ex_tensor *x, *labels, *p[4], *slot[2][4], *hyper;
    ex_tensor *logits, *loss, *acc;
} mlp;

static void mlp_build(ex_ctx *ctx, mlp *m, enum opt_kind opt)
{
    const int64_t xne[2] = {4, 2}, lne = 4;
    m->x = ex_input(ctx, EX_F32, 2, xne, "x");
    m->labels = ex_input(ctx, EX_I32, 1, &lne, "labels");
    m->p[0] = param(ctx, 2, 16, 2, 0, 0, "w1");
    m->p[1] = param(ctx, 1, 16, 0, 0, 0, "b1");
    m->p[2] = param(ctx, 2, 2, 16, 0, 0, "w2");
    m->p[3] = param(ctx, 1, 2, 0, 0, 0, "b2");
    ex_tensor *h = ex_relu(ctx, ex_linear(ctx, m->x, m->p[0], m->p[1]));
    m->logits = ex_keep(ctx, ex_linear(ctx, h, m->p[2], m->p[3]));
    m->loss = ex_keep(ctx, ex_cross_entropy(ctx, m->logits, m->labels));
    m->acc = ex_keep(ctx, ex_accuracy(ctx, m->logits, m->labels));
    check_ok(ex_graph_backward(ctx, m->loss), "ex_graph_backward", ex_ctx_error(ctx));
    const int64_t hne = opt == OPT_ADAM ? 2 : 1;
    m->hyper = ex_input(ctx, EX_F32, 1, &hne, "hyper");
    for (int i = 0; i < 4; i++) {
        ex_tensor *g = ex_grad(ctx, m->p[i]);
        assert_non_null(g);
        int nd = ex_tensor_ndim(m->p[i]);
        int64_t ne[4];
        for (int k = 0; k < nd; k++)
            ne[k] = ex_tensor_dim(m->p[i], k);
        m->slot[0][i] = ex_state(ctx, EX_F32, nd, ne, "m");
        m->slot[1][i] = ex_state(ctx, EX_F32, nd, ne, "v");
        if (opt == OPT_SGD)
            ex_sgd(ctx, m->p[i], g, m->slot[0][i], m->hyper, 0.9f, 0.0f, false);
        else
            ex_adam(ctx, m->p[i], g, m->slot[0][i], m->slot[1][i], m->hyper, 0.9f, 0.999f, 1e-8f,
                    0.0f);
    }
    check_ctx(ctx, "building the MLP");
}

static void mlp_init(ex_plan *plan, mlp *m)
{
    static const float x[8] = {0, 0, 0, 1, 1, 0, 1, 1};
    static const int32_t labels[4] = {0, 1, 1, 0};
    rng r = {7};
    float w1[32], b1[16], w2[32], b2[2] = {0, 0}, zero[32] = {0};
    fill_uniform(&r, w1, 32, -1, 1);
    fill_uniform(&r, b1, 16, 0.0f, 0.1f);
    fill_uniform(&r, w2, 32, -0.5f, 0.5f);
    write_t(plan, m->x, x);
    write_t(plan, m->labels, labels);
    write_t(plan, m->p[0], w1);
    write_t(plan, m->p[1], b1);
    write_t(plan, m->p[2], w2);
    write_t(plan, m->p[3], b2);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 4; i++)
            write_t(plan, m->slot[k][i], zero);
}

/* The loss and accuracy the plan reported, recomputed on the host from its logits. */
static void mlp_check_heads(const float *logits, float loss, float acc)
{
    static const int labels[4] = {0, 1, 1, 0};
    double ce = 0;
    int right = 0;
    for (int i = 0; i < 4; i++) {
        double a = logits[2 * i], b = logits[2 * i + 1], mx = a > b ? a : b;
        double lse = mx + log(exp(a - mx) + exp(b - mx));
        ce -= (labels[i] ? b : a) - lse;
        right += ((b > a) ? 1 : 0) == labels[i];
    }
    ce /= 4;
    assert_true(fabs(ce - (double)loss) <= 1e-5 * (1 + ce));
    assert_true(acc == (float)right);
}

static void xor_train(enum opt_kind opt)
{
    ex_ctx *ctx = ex_ctx_new();
    assert_non_null(ctx);
    mlp m;
    mlp_build(ctx, &m, opt);
    ex_backend *be = open_cpu();
    ex_plan *plan = plan_graph(ctx, be);
    mlp_init(plan, &m);
    float loss = INFINITY, acc = 0, first = NAN, logits[8];
    int step;
    for (step = 1; step <= 2000; step++) {
        float hyper[2] = {opt == OPT_ADAM ? 0.02f : 0.1f, (float)step};
        write_t(plan, m.hyper, hyper);
        run_plan(plan);
        loss = read_scalar(plan, m.loss);
        acc = read_scalar(plan, m.acc);
        if (step == 1)
            first = loss;
        assert_true(isfinite(loss));
        if (loss < 0.05f && acc == 4)
            break;
    }
    read_t(plan, m.logits, logits);
    mlp_check_heads(logits, loss, acc);
    printf("XOR with %s: loss %.4f at step 1, %.4f at step %d, %g of 4 right\n",
           opt == OPT_ADAM ? "Adam" : "SGD", (double)first, (double)loss, step, (double)acc);
    assert_true(loss < 0.05f);
    assert_true(acc == 4.0f);
    ex_plan_free(plan);
    ex_backend_close(be);
    ex_ctx_free(ctx);
}

static void test_xor_sgd(void **state)
{
    (void)state;
    xor_train(OPT_SGD);
}

static void test_xor_adam(void **state)
{
    (void)state;
    xor_train(OPT_ADAM);
}

/* ---- a small CNN's loss falls ---- */

#define CNN_N 16
#define CNN_C 4
#define CNN_S 8

typedef struct cnn {
    ex_tensor *x, *labels, *lr, *p[5], *mom[5], *rm, *rv, *loss;
} cnn;

static void cnn_build(ex_ctx *ctx, cnn *m)
{
    const ex_conv_params cp = {{1, 1}, {1, 1}, {1, 1}};
    const int64_t xne[4] = {CNN_N, 1, CNN_S, CNN_S}, lne = CNN_N, one = 1;
    const int64_t flat[2] = {CNN_N, CNN_C};
    m->x = ex_input(ctx, EX_F32, 4, xne, "x");
    m->labels = ex_input(ctx, EX_I32, 1, &lne, "labels");
    m->lr = ex_input(ctx, EX_F32, 1, &one, "lr");
    m->p[0] = param(ctx, 4, CNN_C, 1, 3, 3, "conv");
    m->p[1] = param(ctx, 1, CNN_C, 0, 0, 0, "gamma");
    m->p[2] = param(ctx, 1, CNN_C, 0, 0, 0, "beta");
    m->p[3] = param(ctx, 2, 2, CNN_C, 0, 0, "fc_w");
    m->p[4] = param(ctx, 1, 2, 0, 0, 0, "fc_b");
    m->rm = state1(ctx, CNN_C, "rm");
    m->rv = state1(ctx, CNN_C, "rv");
    ex_tensor *h = ex_conv2d(ctx, m->x, m->p[0], &cp);
    h = bn_train(ctx, h, m->p[1], m->p[2], m->rm, m->rv);
    h = ex_global_avg_pool(ctx, ex_relu(ctx, h));
    h = ex_linear(ctx, ex_reshape(ctx, h, 2, flat), m->p[3], m->p[4]);
    m->loss = ex_keep(ctx, ex_cross_entropy(ctx, h, m->labels));
    check_ok(ex_graph_backward(ctx, m->loss), "ex_graph_backward", ex_ctx_error(ctx));
    for (int i = 0; i < 5; i++) {
        int nd = ex_tensor_ndim(m->p[i]);
        int64_t ne[4];
        for (int k = 0; k < nd; k++)
            ne[k] = ex_tensor_dim(m->p[i], k);
        m->mom[i] = ex_state(ctx, EX_F32, nd, ne, "mom");
        ex_sgd(ctx, m->p[i], ex_grad(ctx, m->p[i]), m->mom[i], m->lr, 0.9f, 0.0f, false);
    }
    check_ctx(ctx, "building the CNN");
}

/* Two classes the network can only tell apart by orientation: a horizontal bar (0) or a
 * vertical bar (1) at a random position, plus noise. Global average pooling forgets
 * where things are, so orientation (which a 3x3 filter sees) is what it must learn. */
static void cnn_batch(rng *r, float *x, int32_t *labels)
{
    for (int n = 0; n < CNN_N; n++) {
        float *img = x + n * CNN_S * CNN_S;
        int cls = (int)(rng_next(r) & 1), pos = 1 + (int)(rng_next(r) % (CNN_S - 2));
        labels[n] = cls;
        for (int i = 0; i < CNN_S; i++)
            for (int j = 0; j < CNN_S; j++)
                img[i * CNN_S + j] = rng_uniform(r, -0.4f, 0.4f) + ((cls ? j : i) == pos);
    }
}

static void cnn_init(ex_plan *plan, cnn *m)
{
    rng r = {99};
    float conv[CNN_C * 9], gamma[CNN_C], beta[CNN_C] = {0}, fw[2 * CNN_C], fb[2] = {0};
    float rv[CNN_C], zero[CNN_C * 9] = {0}, lr = 0.1f;
    fill_uniform(&r, conv, CNN_C * 9, -0.5f, 0.5f);
    fill_uniform(&r, fw, 2 * CNN_C, -0.5f, 0.5f);
    for (int c = 0; c < CNN_C; c++)
        gamma[c] = rv[c] = 1;
    const float *init[5] = {conv, gamma, beta, fw, fb};
    for (int i = 0; i < 5; i++) {
        write_t(plan, m->p[i], init[i]);
        write_t(plan, m->mom[i], zero);
    }
    write_t(plan, m->rm, zero);
    write_t(plan, m->rv, rv);
    write_t(plan, m->lr, &lr);
}

static void test_cnn_learns(void **state)
{
    (void)state;
    enum { STEPS = 120 };
    ex_ctx *ctx = ex_ctx_new();
    assert_non_null(ctx);
    cnn m;
    cnn_build(ctx, &m);
    ex_backend *be = open_cpu();
    ex_plan *plan = plan_graph(ctx, be);
    cnn_init(plan, &m);
    rng r = {12345};
    float x[CNN_N * CNN_S * CNN_S], loss[STEPS];
    int32_t labels[CNN_N];
    for (int s = 0; s < STEPS; s++) {
        cnn_batch(&r, x, labels);
        write_t(plan, m.x, x);
        write_t(plan, m.labels, labels);
        run_plan(plan);
        loss[s] = read_scalar(plan, m.loss);
        assert_true(isfinite(loss[s]));
    }
    double last = 0;
    for (int s = STEPS - 10; s < STEPS; s++)
        last += loss[s] / 10.0;
    printf("CNN: loss %.4f at step 1, mean of the last 10 steps %.4f\n", (double)loss[0], last);
    assert_true(last < 0.5 * loss[0]);
    ex_plan_free(plan);
    ex_backend_close(be);
    ex_ctx_free(ctx);
}

/* ---- the clip folded into SGD: bitwise the clip, then SGD ---- */

/* Three weights as in a network's weight step: a [5, 7, 11] channel slice of a [5, 9, 11]
 * parameter (its momentum a slice too), a [3000] vector and a [6] bias; the gradients are
 * computed tensors (copies of inputs), their global norm taken in the graph. */
enum { SC_W = 3 };
static const int64_t sc_numel[SC_W] = {5 * 7 * 11, 3000, 6};

typedef struct sc_cfg {
    float momentum, wd, max_norm;
    bool nesterov;
} sc_cfg;

typedef struct sc_graph {
    ex_ctx *ctx;
    ex_plan *plan;
    ex_tensor *root[SC_W], *mroot[SC_W], *gin[SC_W], *lr;
} sc_graph;

static void sc_build(sc_graph *gr, ex_backend *be, const sc_cfg *c, bool fused)
{
    ex_ctx *ctx = gr->ctx = ex_ctx_new();
    assert_non_null(ctx);
    const int64_t one = 1;
    ex_tensor *w[SC_W], *m[SC_W], *g[SC_W];
    gr->root[0] = param(ctx, 3, 5, 9, 11, 0, "w0");
    gr->mroot[0] = ex_state(ctx, EX_F32, 3, (const int64_t[]){5, 9, 11}, "m0");
    w[0] = ex_slice(ctx, gr->root[0], 1, 1, 7);
    m[0] = ex_slice(ctx, gr->mroot[0], 1, 2, 7);
    for (int i = 1; i < SC_W; i++) {
        w[i] = gr->root[i] = param(ctx, 1, sc_numel[i], 0, 0, 0, "w");
        m[i] = gr->mroot[i] = state1(ctx, sc_numel[i], "m");
    }
    for (int i = 0; i < SC_W; i++) {
        int nd = ex_tensor_ndim(w[i]);
        int64_t ne[4];
        for (int k = 0; k < nd; k++)
            ne[k] = ex_tensor_dim(w[i], k);
        gr->gin[i] = ex_input(ctx, EX_F32, nd, ne, "g");
        g[i] = ex_copy(ctx, gr->gin[i]);
    }
    gr->lr = ex_input(ctx, EX_F32, 1, &one, "lr");
    ex_tensor *norm = ex_grad_norm(ctx, SC_W, g);
    for (int i = 0; i < SC_W; i++) {
        if (fused)
            ex_sgd_clip(ctx, w[i], g[i], m[i], gr->lr, norm, c->max_norm, c->momentum, c->wd,
                        c->nesterov);
        else
            ex_sgd(ctx, w[i], ex_clip(ctx, g[i], norm, c->max_norm), m[i], gr->lr, c->momentum,
                   c->wd, c->nesterov);
    }
    check_ctx(ctx, fused ? "building sgd_clip" : "building clip and sgd");
    gr->plan = plan_graph(ctx, be);
}

enum { SC_STEPS = 12 };

/* SC_STEPS steps from the same start on the same gradients, uniform in ±(0.5 + step / 4)
 * (global norms from about 17 to 110: a different clip coefficient each step); the roots
 * of the weights and momenta after each step go to out, one after the other. */
static void sc_steps(ex_backend *be, const sc_cfg *c, bool fused, float *out, int64_t per_step)
{
    sc_graph gr;
    sc_build(&gr, be, c, fused);
    rng r = {11};
    float lr = 0.05f;
    for (int i = 0; i < SC_W; i++) {
        int64_t n = ex_tensor_numel(gr.root[i]);
        float *v = xcalloc((size_t)n, sizeof *v);
        fill_uniform(&r, v, n, -0.1f, 0.1f);
        write_t(gr.plan, gr.root[i], v);
        fill_uniform(&r, v, n, -0.5f, 0.5f);
        write_t(gr.plan, gr.mroot[i], v);
        free(v);
    }
    write_t(gr.plan, gr.lr, &lr);
    for (int step = 0; step < SC_STEPS; step++) {
        float gscale = 0.5f + 0.25f * (float)step;
        for (int i = 0; i < SC_W; i++) {
            float *v = xcalloc((size_t)sc_numel[i], sizeof *v);
            fill_uniform(&r, v, sc_numel[i], -gscale, gscale);
            write_t(gr.plan, gr.gin[i], v);
            free(v);
        }
        run_plan(gr.plan);
        float *o = out + step * per_step;
        for (int i = 0; i < SC_W; i++) {
            read_t(gr.plan, gr.root[i], o);
            o += ex_tensor_numel(gr.root[i]);
            read_t(gr.plan, gr.mroot[i], o);
            o += ex_tensor_numel(gr.mroot[i]);
        }
    }
    ex_plan_free(gr.plan);
    ex_ctx_free(gr.ctx);
}

/* ex_sgd_clip gives bitwise the parameters and momenta of ex_clip then ex_sgd, clipping
 * (max_norm 5) or not (max_norm 200), with and without momentum, weight decay and
 * Nesterov, on the CPU's fast and reference paths. */
static void test_sgd_clip_bitwise(void **state)
{
    (void)state;
    static const sc_cfg cfgs[] = {
        {0.9f, 3e-4f, 5.0f, false},   {0.9f, 0.5f, 5.0f, true},   {0.0f, 0.0f, 5.0f, false},
        {0.9f, 3e-4f, 200.0f, false}, {0.9f, 0.5f, 200.0f, true}, {0.0f, 0.5f, 200.0f, false},
    };
    static const char *const backends[] = {"cpu", "cpu-ref"};
    int64_t per_step = 2 * (5 * 9 * 11 + sc_numel[1] + sc_numel[2]);
    float *a = xcalloc((size_t)(SC_STEPS * per_step), sizeof *a);
    float *b = xcalloc((size_t)(SC_STEPS * per_step), sizeof *b);
    for (int k = 0; k < 2; k++) {
        char msg[256] = "";
        ex_backend *be = NULL;
        check_ok(ex_backend_open(backends[k], &be, msg, sizeof msg), backends[k], msg);
        for (size_t i = 0; i < sizeof cfgs / sizeof *cfgs; i++) {
            sc_steps(be, &cfgs[i], false, a, per_step);
            sc_steps(be, &cfgs[i], true, b, per_step);
            for (int step = 0; step < SC_STEPS; step++)
                if (memcmp(a + step * per_step, b + step * per_step, (size_t)per_step * sizeof *a))
                    fail_msg("%s, momentum %g, weight decay %g, max_norm %g%s: step %d differs",
                             backends[k], (double)cfgs[i].momentum, (double)cfgs[i].wd,
                             (double)cfgs[i].max_norm, cfgs[i].nesterov ? ", nesterov" : "",
                             step + 1);
        }
        ex_backend_close(be);
    }
    free(a);
    free(b);
}

/* The depthwise convolution of max(x, 0) (DWCONV2D's fused ReLU) with an infinite weight,
 * on the CPU's fast path and on its reference loops: the same values (to float rounding:
 * the reference sums in double), NaN where a clipped input meets the infinity. The fast path clips
 * the inputs as it pads the planes, and runs a plane whose weights are not finite through its row
 * loops. */
static void test_dwconv_relu_nonfinite(void **state)
{
    (void)state;
    static const char *const backends[] = {"cpu", "cpu-ref"};
    int64_t xne[4] = {2, 3, 9, 10}, wne[4] = {3, 1, 3, 3}, nx = 2 * 3 * 9 * 10, ny = nx;
    float x[2 * 3 * 9 * 10], w[27], y[2][2 * 3 * 9 * 10];
    rng r = {11};
    fill_uniform(&r, x, nx, -1.0f, 1.0f);
    fill_uniform(&r, w, 27, -1.0f, 1.0f);
    w[9 + 4] = INFINITY; /* channel 1's centre tap */
    for (int k = 0; k < 2; k++) {
        char msg[256] = "";
        ex_backend *be = NULL;
        check_ok(ex_backend_open(backends[k], &be, msg, sizeof msg), backends[k], msg);
        ex_ctx *ctx = ex_ctx_new();
        ex_tensor *tx = ex_input(ctx, EX_F32, 4, xne, "x"),
                  *tw = ex_input(ctx, EX_F32, 4, wne, "w");
        ex_conv_params p = {{1, 1}, {1, 1}, {1, 1}};
        ex_tensor *ty = ex_keep(ctx, ex_dwconv2d_relu(ctx, tx, tw, &p));
        check_ctx(ctx, "dwconv2d_relu");
        ex_plan *plan = plan_graph(ctx, be);
        check_ok(ex_plan_write(plan, tx, x, sizeof x), "write x", ex_plan_error(plan));
        check_ok(ex_plan_write(plan, tw, w, sizeof w), "write w", ex_plan_error(plan));
        check_ok(ex_plan_run(plan), "run", ex_plan_error(plan));
        check_ok(ex_plan_read(plan, ty, y[k], sizeof y[k]), "read y", ex_plan_error(plan));
        ex_plan_free(plan);
        ex_ctx_free(ctx);
        ex_backend_close(be);
    }
    int nan = 0;
    for (int64_t i = 0; i < ny; i++) {
        nan += isnan(y[1][i]) != 0;
        bool same = (isnan(y[0][i]) && isnan(y[1][i])) || y[0][i] == y[1][i];
        if (!same && !(fabsf(y[0][i] - y[1][i]) <= 1e-5f * (1.0f + fabsf(y[1][i]))))
            fail_msg("element %lld: cpu %g, cpu-ref %g", (long long)i, (double)y[0][i],
                     (double)y[1][i]);
    }
    assert_true(nan > 0); /* some clipped input met the infinity */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sepconv_block),
        cmocka_unit_test(test_xor_sgd),
        cmocka_unit_test(test_xor_adam),
        cmocka_unit_test(test_cnn_learns),
        cmocka_unit_test(test_sgd_clip_bitwise),
        cmocka_unit_test(test_label_smoothing),
        cmocka_unit_test(test_network_predict),
        cmocka_unit_test(test_network_chunks),
        cmocka_unit_test(test_dwconv_relu_nonfinite),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
