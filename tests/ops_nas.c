/* Op suite: the NAS ops (mixed sum, Gumbel-softmax, hardmax, entropy, top-k mask). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ops_harness.h"
#include "ref.h"

/* ---- mixed sum: roots alpha [E, K], mask [K], candidates; ip[0..n-1] = weight index of
 * each candidate, ip[6] = alpha's row, ip[7] = mask bits (mask[i] = (i + 1) / 2 where set:
 * any non-zero value switches a candidate on, and must not scale it) ---- */

static int n_candidates(const env *e)
{
    return e->c->nr - 2;
}

static ex_tensor *b_mixed_sum(env *e, ex_tensor *const *x)
{
    int64_t k = ex_tensor_dim(x[0], 1), st = 1;
    ex_tensor *w = ex_view(e->ctx, x[0], 1, &k, &st, e->c->ip[6] * k);
    return ex_mixed_sum(e->ctx, w, x[1], n_candidates(e), x + 2, e->c->ip);
}

static void r_mixed_sum(const env *e, double *y)
{
    const double *w = e->od[0] + e->c->ip[6] * e->one[0][1];
    ref_mixed_sum(w, e->od[1], n_candidates(e), (const double *const *)(e->od + 2), e->c->ip,
                  e->on[2], y);
}

/* The candidates in the reverse of their roots' order: roots made one after another lie
 * at rising addresses, so these lie at falling ones (Vulkan binds them lowest first, or
 * each would take a binding of its own). */
static ex_tensor *b_mixed_sum_rev(env *e, ex_tensor *const *x)
{
    int n = n_candidates(e);
    ex_tensor *c[EX_MAX_CANDIDATES];
    for (int q = 0; q < n; q++)
        c[q] = x[2 + n - 1 - q];
    int64_t k = ex_tensor_dim(x[0], 1), st = 1;
    ex_tensor *w = ex_view(e->ctx, x[0], 1, &k, &st, e->c->ip[6] * k);
    return ex_mixed_sum(e->ctx, w, x[1], n, c, e->c->ip);
}

static void r_mixed_sum_rev(const env *e, double *y)
{
    int n = n_candidates(e);
    const double *c[EX_MAX_CANDIDATES];
    for (int q = 0; q < n; q++)
        c[q] = e->od[2 + n - 1 - q];
    const double *w = e->od[0] + e->c->ip[6] * e->one[0][1];
    ref_mixed_sum(w, e->od[1], n, c, e->c->ip, e->on[2], y);
}

static void i_mixed_sum(env *e)
{
    for (int64_t i = 0; i < e->rn[1]; i++)
        e->rd[1][i] = (e->c->ip[7] >> i) & 1 ? (double)(i + 1) / 2 : 0;
}

#define XM SHAPE(3, 5, 7, 9)

static const tcase mixed_sum_cases[] = {
    /* candidates 1 and 3 are inactive and hold NaN: reading them shows; weight index 1 is
     * a `none` candidate (active, never materialized) */
    {CASE("mixed_sum with inactive candidates", EX_OP_MIXED_SUM, b_mixed_sum, r_mixed_sum, 6),
     .r = {{PAR("alpha"), SHAPE(3, 5), UNI(-1, 1)},
           {IN("mask"), SHAPE(5), CONST(0)},
           {GIN("x0"), XM, UNI(-1, 1)},
           {GIN("x1"), XM, POISON, .nocheck = true},
           {GIN("x2"), SHAPE(3, 8, 7, 9), UNI(-1, 1), SLICE(1, 2, 5)},
           {GIN("x3"), XM, POISON, .nocheck = true}},
     .ip = {0, 2, 3, 4, 0, 0, 1, 0xb}, .bwd = B_FD, .init = i_mixed_sum},
    {CASE("mixed_sum all active", EX_OP_MIXED_SUM, b_mixed_sum, r_mixed_sum, 5),
     .r = {{PAR("alpha"), SHAPE(2, 3), UNI(-1, 1)},
           {IN("mask"), SHAPE(3), CONST(0)},
           {GIN("x0"), SHAPE(2, 3, 5, 7), UNI(-1, 1)},
           {GIN("x1"), SHAPE(2, 3, 7, 5), UNI(-1, 1), TRANS(2, 3)},
           {GIN("x2"), SHAPE(2, 3, 5, 7), UNI(-1, 1)}},
     .ip = {2, 0, 1, 0, 0, 0, 0, 0x7}, .bwd = B_FD, .init = i_mixed_sum},
    /* 2592 elements: the weight gradient's dot products span several chunks of the
     * backends that split dy (CUDA: 1024) */
    {CASE("mixed_sum over several chunks", EX_OP_MIXED_SUM, b_mixed_sum, r_mixed_sum, 5),
     .r = {{PAR("alpha"), SHAPE(2, 4), UNI(-1, 1)},
           {IN("mask"), SHAPE(4), CONST(0)},
           {GIN("x0"), SHAPE(4, 8, 9, 9), UNI(-1, 1)},
           {GIN("x1"), SHAPE(4, 8, 9, 9), POISON, .nocheck = true},
           {GIN("x2"), SHAPE(4, 8, 9, 9), UNI(-1, 1), TRANS(2, 3)}},
     .ip = {3, 1, 0, 0, 0, 0, 1, 0xd}, .bwd = B_FD, .init = i_mixed_sum},
    /* an edge of DARTS' first cells at batch 8: six candidates, `none` (weight 0) and a
     * pruned one (weight 6), 131072 elements (Vulkan: 32 chunks of 4096), one candidate a
     * transposed view */
    {CASE("mixed_sum, 8x16x32x32, 6 candidates", EX_OP_MIXED_SUM, b_mixed_sum, r_mixed_sum, 8),
     .r = {{PAR("alpha"), SHAPE(1, 8), UNI(-1, 1)},
           {IN("mask"), SHAPE(8), CONST(0)},
           {GIN("x0"), SHAPE(8, 16, 32, 32), UNI(-1, 1)},
           {GIN("x1"), SHAPE(8, 16, 32, 32), UNI(-1, 1)},
           {GIN("x2"), SHAPE(8, 16, 32, 32), UNI(-1, 1)},
           {GIN("x3"), SHAPE(8, 16, 32, 32), UNI(-1, 1), TRANS(2, 3)},
           {GIN("x4"), SHAPE(8, 16, 32, 32), UNI(-1, 1)},
           {GIN("x5"), SHAPE(8, 16, 32, 32), UNI(-1, 1)}},
     .ip = {1, 2, 3, 4, 5, 7, 0, 0xbf}, .bwd = B_FD, .init = i_mixed_sum},
    /* dense candidates of a multiple of 4 elements: the forward reads the weights and the
     * mask itself (Vulkan: mixd.comp, no table); two inactive candidates hold NaN */
    {CASE("mixed_sum dense, weights read directly", EX_OP_MIXED_SUM, b_mixed_sum, r_mixed_sum, 7),
     .r = {{PAR("alpha"), SHAPE(3, 6), UNI(-1, 1)},
           {IN("mask"), SHAPE(6), CONST(0)},
           {GIN("x0"), SHAPE(2, 4, 6, 8), UNI(-1, 1)},
           {GIN("x1"), SHAPE(2, 4, 6, 8), POISON, .nocheck = true},
           {GIN("x2"), SHAPE(2, 4, 6, 8), UNI(-1, 1)},
           {GIN("x3"), SHAPE(2, 4, 6, 8), UNI(-1, 1)},
           {GIN("x4"), SHAPE(2, 4, 6, 8), POISON, .nocheck = true}},
     .ip = {5, 0, 3, 1, 4, 0, 2, 0x2a}, .bwd = B_FD, .init = i_mixed_sum},
    /* dense candidates with gaps between them (slices along the batch): more of them than
     * a dispatch has bindings, so a group widens a binding over the gaps (Vulkan), in the
     * forward and in the weight gradient's dot products */
    {CASE("mixed_sum of batch slices, bindings widened", EX_OP_MIXED_SUM, b_mixed_sum, r_mixed_sum,
          7),
     .r = {{PAR("alpha"), SHAPE(2, 6), UNI(-1, 1)},
           {IN("mask"), SHAPE(6), CONST(0)},
           {GIN("x0"), SHAPE(4, 4, 4, 4), UNI(-1, 1), SLICE(0, 1, 2)},
           {GIN("x1"), SHAPE(4, 4, 4, 4), UNI(-1, 1), SLICE(0, 2, 2)},
           {GIN("x2"), SHAPE(4, 4, 4, 4), POISON, SLICE(0, 1, 2), .nocheck = true},
           {GIN("x3"), SHAPE(4, 4, 4, 4), UNI(-1, 1), SLICE(0, 0, 2)},
           {GIN("x4"), SHAPE(4, 4, 4, 4), UNI(-1, 1), SLICE(0, 1, 2)}},
     .ip = {1, 2, 0, 4, 5, 0, 1, 0x36}, .bwd = B_FD, .init = i_mixed_sum},
    /* six dense candidates at falling addresses, as a DARTS edge's may lie: bound in their
     * order each needs a binding of its own (Vulkan: two groups), lowest first they share
     * one */
    {CASE("mixed_sum, candidates at falling addresses", EX_OP_MIXED_SUM, b_mixed_sum_rev,
          r_mixed_sum_rev, 8),
     .r = {{PAR("alpha"), SHAPE(1, 6), UNI(-1, 1)},
           {IN("mask"), SHAPE(6), CONST(0)},
           {GIN("x0"), SHAPE(2, 4, 6, 8), UNI(-1, 1)},
           {GIN("x1"), SHAPE(2, 4, 6, 8), UNI(-1, 1)},
           {GIN("x2"), SHAPE(2, 4, 6, 8), UNI(-1, 1)},
           {GIN("x3"), SHAPE(2, 4, 6, 8), UNI(-1, 1)},
           {GIN("x4"), SHAPE(2, 4, 6, 8), UNI(-1, 1)},
           {GIN("x5"), SHAPE(2, 4, 6, 8), UNI(-1, 1)}},
     .ip = {3, 0, 5, 1, 4, 2, 0, 0x3f}, .bwd = B_FD, .init = i_mixed_sum},
    /* channel slices of whole samples, as a cell's concatenated output holds its nodes:
     * the forward still reads the weights itself (Vulkan: mixd.comp) when every slice
     * steps from sample to sample alike, and takes the table when they do not */
    {CASE("mixed_sum, channel-slice candidates", EX_OP_MIXED_SUM, b_mixed_sum, r_mixed_sum, 6),
     .r = {{PAR("alpha"), SHAPE(2, 4), UNI(-1, 1)},
           {IN("mask"), SHAPE(4), CONST(0)},
           {GIN("x0"), SHAPE(3, 4, 4, 4), UNI(-1, 1)},
           {GIN("x1"), SHAPE(3, 8, 4, 4), UNI(-1, 1), SLICE(1, 2, 4)},
           {GIN("x2"), SHAPE(3, 8, 4, 4), UNI(-1, 1), SLICE(1, 4, 4)},
           {GIN("x3"), SHAPE(3, 4, 4, 4), POISON, .nocheck = true}},
     .ip = {1, 3, 0, 2, 0, 0, 1, 0xb}, .bwd = B_FD, .init = i_mixed_sum},
    {CASE("mixed_sum, channel slices of two strides", EX_OP_MIXED_SUM, b_mixed_sum, r_mixed_sum, 5),
     .r = {{PAR("alpha"), SHAPE(1, 3), UNI(-1, 1)},
           {IN("mask"), SHAPE(3), CONST(0)},
           {GIN("x0"), SHAPE(3, 8, 4, 4), UNI(-1, 1), SLICE(1, 2, 4)},
           {GIN("x1"), SHAPE(3, 4, 4, 4), UNI(-1, 1)},
           {GIN("x2"), SHAPE(3, 6, 4, 4), UNI(-1, 1), SLICE(1, 1, 4)}},
     .ip = {2, 0, 1, 0, 0, 0, 0, 0x7}, .bwd = B_FD, .init = i_mixed_sum},
    /* 532480 elements: more than 128 chunks (Vulkan's last pass loads 128 at a time) */
    {CASE("mixed_sum over 130 chunks", EX_OP_MIXED_SUM, b_mixed_sum, r_mixed_sum, 3),
     .r = {{PAR("alpha"), SHAPE(1, 2), UNI(-1, 1)},
           {IN("mask"), SHAPE(2), CONST(0)},
           {GIN("x0"), SHAPE(2, 8, 128, 260), UNI(-1, 1)}},
     .ip = {1, 0, 0, 0, 0, 0, 0, 0x2}, .bwd = B_FD, .init = i_mixed_sum},
};

/* ---- Gumbel-softmax: roots logits [E, K], tau [1], counter (i32 [2]); ip0 = hard.
 *
 * The noise comes from a key private to the node, so it is read off a soft output y:
 * tau log y - logits = g - c_row, the noise up to a constant per row, which softmax
 * ignores. The forward check proper then changes the logits and the temperature under
 * the same counter: y must be softmax((logits' + g) / tau') with that same noise. ---- */

typedef struct gumbel_noise {
    double tau;
    double g[]; /* E x K, shifted per row */
} gumbel_noise;

static ex_tensor *b_gumbel(env *e, ex_tensor *const *x)
{
    return ex_gumbel_softmax(e->ctx, x[0], x[1], x[2], e->c->ip[0] != 0);
}

static void r_gumbel_soft(const env *e, double *y)
{
    const gumbel_noise *n = e->scratch;
    ref_gumbel_softmax(e->od[0], n->g, n->tau, e->one[0][0], e->one[0][1], y);
}

static void r_gumbel_hard(const env *e, double *y)
{
    r_gumbel_soft(e, y);
    ref_hardmax(y, e->one[0][0], e->one[0][1], y);
}

/* Rows sum to 1, every element inside (0, 1); then the noise. */
static gumbel_noise *recover_noise(env *e, const double *y, const double *logits, double tau)
{
    int64_t rows = e->one[0][0], cols = e->one[0][1];
    gumbel_noise *n = xcalloc(1, sizeof *n + (size_t)(rows * cols) * sizeof(double));
    n->tau = tau;
    for (int64_t r = 0; r < rows; r++) {
        double sum = 0;
        for (int64_t j = 0; j < cols; j++) {
            double v = y[r * cols + j];
            sum += v;
            if (!(v > 0 && v < 1))
                case_fail(e, "soft sample %.9g at (%lld, %lld) outside (0, 1)", v, (long long)r,
                          (long long)j);
            n->g[r * cols + j] = tau * log(v) - logits[r * cols + j];
        }
        if (!(fabs(sum - 1) <= 1e-5))
            case_fail(e, "row %lld sums to %.9g", (long long)r, sum);
    }
    return n;
}

static void p_gumbel_soft(env *e)
{
    e->scratch = recover_noise(e, e->yv, e->od[0], e->od[1][0]);
}

/* Same logits, temperature and counter in a second context with the same seed, where the
 * Gumbel-softmax is the first random op too: the same stream, as a reproducible run
 * needs. Returns its soft output (rows x cols), or NULL after recording a failure. */
static double *soft_twin(env *e)
{
    static const tcase twin = {.name = "gumbel_softmax soft twin", .op = EX_OP_GUMBEL_SOFTMAX};
    env t;
    env_open(&t, e->s, &twin);
    ex_ctx_set_seed(t.ctx, e->seed);
    int64_t one = 1, two = 2;
    ex_tensor *l = ex_input(t.ctx, EX_F32, 2, e->one[0], "logits");
    ex_tensor *tau = ex_input(t.ctx, EX_F32, 1, &one, "tau");
    ex_tensor *ctr = ex_input(t.ctx, EX_I32, 1, &two, "counter");
    ex_tensor *y = ex_keep(t.ctx, ex_gumbel_softmax(t.ctx, l, tau, ctr, false));
    double *ys = xcalloc((size_t)e->on[0], sizeof *ys);
    char msg[512];
    bool ok = plan_graph(e->s, t.ctx, &t.plan, msg, sizeof msg) == EX_OK;
    if (!ok)
        case_fail(e, "twin plan: %s", msg);
    ok = ok && write_f(&t, l, e->od[0], e->on[0]) && write_f(&t, tau, e->od[1], 1) &&
         write_i(&t, ctr, e->oi[2], 2) && run_plan(&t) && read_f(&t, y, ys, e->on[0]);
    e->failures += t.failures;
    env_close(&t);
    if (!ok) {
        free(ys);
        return NULL;
    }
    return ys;
}

/* Hard: exactly one 1 per row, at the first argmax of the soft twin; the noise for the
 * straight-through gradient comes from the twin. */
static void p_gumbel_hard(env *e)
{
    int64_t rows = e->one[0][0], cols = e->one[0][1];
    for (int64_t r = 0; r < rows; r++) {
        int ones = 0;
        for (int64_t j = 0; j < cols; j++) {
            double v = e->yv[r * cols + j];
            ones += v == 1;
            if (v != 0 && v != 1)
                case_fail(e, "hard sample %.9g at (%lld, %lld)", v, (long long)r, (long long)j);
        }
        if (ones != 1)
            case_fail(e, "hard row %lld has %d ones", (long long)r, ones);
    }
    double *ys = soft_twin(e);
    if (!ys) {
        e->scratch = recover_noise(e, e->yv, e->od[0], e->od[1][0]); /* keeps the ref usable */
        return;
    }
    e->scratch = recover_noise(e, ys, e->od[0], e->od[1][0]);
    double *onehot = xcalloc((size_t)e->on[0], sizeof *onehot);
    ref_hardmax(ys, rows, cols, onehot);
    if (memcmp(onehot, e->yv, (size_t)e->on[0] * sizeof *onehot) != 0)
        case_fail(e, "the hard sample is not the one-hot of its soft sample's argmax");
    free(onehot);
    free(ys);
}

/* Rewrites logits (and tau) under the same or another counter, runs, reads y. */
static bool rerun_with(env *e, const double *logits, double tau, const int32_t *counter, double *y)
{
    return write_f(e, e->root[0], logits, e->on[0]) && write_f(e, e->root[1], &tau, 1) &&
           write_i(e, e->root[2], counter, 2) && run_plan(e) && read_f(e, e->y, y, e->ny);
}

/* The soft forward with the recovered noise: new logits, a new temperature, another
 * counter, and logits so far apart that the sample is the one-hot of the largest. */
static void a_gumbel_soft(env *e)
{
    int64_t n = e->on[0], rows = e->one[0][0], cols = e->one[0][1];
    gumbel_noise *g = e->scratch;
    double *l2 = xcalloc((size_t)n, sizeof *l2), *y = xcalloc((size_t)n, sizeof *y),
           *ref = xcalloc((size_t)n, sizeof *ref), tau2 = (double)1.9f;
    for (int64_t i = 0; i < n; i++)
        l2[i] = (double)(float)rng_uniform(&e->rng, -2, 2);
    int32_t ctr[2] = {e->oi[2][0], e->oi[2][1]}, other[2] = {ctr[0] + 1, ctr[1]};
    double taus[2] = {g->tau, tau2};
    for (int t = 0; t < 2; t++) {
        if (!rerun_with(e, l2, taus[t], ctr, y))
            goto done;
        ref_gumbel_softmax(l2, g->g, taus[t], rows, cols, ref);
        check_nmse(e, t ? "forward, new logits and tau" : "forward, new logits", y, ref, n,
                   ex_op_tolerance(EX_OP_GUMBEL_SOFTMAX));
    }
    if (!rerun_with(e, l2, tau2, other, y))
        goto done;
    double diff = 0;
    for (int64_t i = 0; i < n; i++)
        diff = fmax(diff, fabs(y[i] - ref[i]));
    if (!(diff > 1e-3))
        case_fail(e, "counters %d and %d gave the same sample (max difference %.3g)", ctr[0],
                  other[0], diff);
    for (int64_t r = 0; r < rows; r++) /* gaps of 1e4: no noise can turn the row */
        l2[r * cols + (r * 5) % cols] += 1e4;
    if (!rerun_with(e, l2, tau2, other, y))
        goto done;
    for (int64_t i = 0; i < n; i++)
        if (!(fabs(y[i] - ((i % cols) == ((i / cols) * 5) % cols)) <= 1e-6)) {
            case_fail(e, "logit gaps of 1e4: %.9g at %lld, not one-hot", y[i], (long long)i);
            break;
        }
    rerun_with(e, e->od[0], g->tau, ctr, y); /* back to the first inputs for the rerun check */
done:
    free(l2);
    free(y);
    free(ref);
}

#define GUMBEL_ROOTS                                                                               \
    {                                                                                              \
        {GIN("logits"), SHAPE(7, 6), UNI(-2, 2)}, {IN("tau"), SHAPE(1), CONST(0.7)},               \
        {                                                                                          \
            I32("counter"), SHAPE(2), CONST(11)                                                    \
        }                                                                                          \
    }

static const tcase gumbel_cases[] = {
    {CASE("gumbel_softmax soft", EX_OP_GUMBEL_SOFTMAX, b_gumbel, r_gumbel_soft, 3),
     .r = GUMBEL_ROOTS, .bwd = B_FD, .prepare = p_gumbel_soft, .after = a_gumbel_soft},
    {CASE("gumbel_softmax hard", EX_OP_HARDMAX_ST, b_gumbel, r_gumbel_hard, 3), .r = GUMBEL_ROOTS,
     .dref = r_gumbel_soft, .ip = {1}, .bwd = B_FD, .prepare = p_gumbel_hard},
};

/* The Gumbel-max property: over many rows of equal logits, the hard sample picks column j
 * with probability softmax(logits)_j. Noise of the wrong sign or scale fails this. */
static void gumbel_distribution(suite *s, int *failed)
{
    static const tcase c = {.name = "gumbel_softmax hard, argmax frequencies",
                            .op = EX_OP_GUMBEL_SOFTMAX};
    enum { ROWS = 20000, COLS = 3 };
    static const double logits[COLS] = {0, 1, 2};
    env e;
    env_open(&e, s, &c);
    int64_t ne[2] = {ROWS, COLS}, one = 1, two = 2;
    ex_tensor *l = ex_input(e.ctx, EX_F32, 2, ne, "logits");
    ex_tensor *tau = ex_input(e.ctx, EX_F32, 1, &one, "tau");
    ex_tensor *ctr = ex_input(e.ctx, EX_I32, 1, &two, "counter");
    ex_tensor *y = ex_keep(e.ctx, ex_gumbel_softmax(e.ctx, l, tau, ctr, true));
    double *lv = xcalloc(ROWS * COLS, sizeof *lv), *yv = xcalloc(ROWS * COLS, sizeof *yv);
    double tv = 0.5;
    int32_t cv[2] = {3, 9};
    for (int i = 0; i < ROWS * COLS; i++)
        lv[i] = logits[i % COLS];
    char msg[512];
    if (plan_graph(s, e.ctx, &e.plan, msg, sizeof msg) != EX_OK)
        case_fail(&e, "plan: %s", msg);
    else if (write_f(&e, l, lv, ROWS * COLS) && write_f(&e, tau, &tv, 1) &&
             write_i(&e, ctr, cv, 2) && run_plan(&e) && read_f(&e, y, yv, ROWS * COLS)) {
        double p[COLS], z = 0, count[COLS] = {0};
        for (int j = 0; j < COLS; j++)
            z += p[j] = exp(logits[j]);
        for (int i = 0; i < ROWS * COLS; i++)
            count[i % COLS] += yv[i];
        for (int j = 0; j < COLS; j++) {
            double mu = ROWS * p[j] / z, sd = sqrt(mu * (1 - p[j] / z));
            if (!(fabs(count[j] - mu) <= 5 * sd)) /* 5 sigma: false alarm below 1e-6 */
                case_fail(&e, "column %d chosen %.0f times in %d rows, expected %.0f +- %.0f", j,
                          count[j], ROWS, mu, 5 * sd);
        }
    }
    *failed += e.failures > 0;
    free(lv);
    free(yv);
    env_close(&e);
}

/* ---- hardmax, entropy, top-k ---- */

static int64_t rows_of(const env *e)
{
    return e->one[0][0];
}
static int64_t cols_of(const env *e)
{
    return e->one[0][1];
}

static ex_tensor *b_hardmax(env *e, ex_tensor *const *x)
{
    return ex_hardmax_st(e->ctx, x[0]);
}
static void r_hardmax(const env *e, double *y)
{
    ref_hardmax(e->od[0], rows_of(e), cols_of(e), y);
}

/* Ties: every third row's maximum also sits in a later and an earlier column. */
static void i_ties(env *e)
{
    gather_root(e, 0);
    int64_t cols = cols_of(e);
    for (int64_t r = 0; r < rows_of(e); r += 3) {
        double *row = e->od[0] + r * cols;
        int64_t a = 0;
        for (int64_t j = 1; j < cols; j++)
            a = row[j] > row[a] ? j : a;
        row[(a + 2) % cols] = row[a];
        row[(a + cols - 1) % cols] = row[a];
    }
    scatter_root(e, 0);
}

static ex_tensor *b_entropy(env *e, ex_tensor *const *x)
{
    return ex_entropy(e->ctx, x[0]);
}
static void r_entropy(const env *e, double *y)
{
    ref_entropy(e->od[0], rows_of(e), cols_of(e), y);
}

/* Exact zeros (p log p is 0 there, by the 1e-30 floor) in every other row, and tiny
 * probabilities, whose terms the floor must leave alone, in every third. */
static void i_tiny(env *e)
{
    gather_root(e, 0);
    int64_t cols = cols_of(e);
    for (int64_t r = 0; r < rows_of(e); r++) {
        if (r % 2 == 0)
            e->od[0][r * cols + r % cols] = 0;
        if (r % 3 == 0) {
            e->od[0][r * cols + (r + 1) % cols] = (double)1e-4f;
            e->od[0][r * cols + (r + 3) % cols] = (double)3e-7f;
        }
    }
    scatter_root(e, 0);
}

/* Ties as above, and on every fourth row the maximum set to exactly the threshold (which
 * passes: >= threshold). */
static void i_topk(env *e)
{
    i_ties(e);
    gather_root(e, 0);
    int64_t cols = cols_of(e);
    for (int64_t r = 1; r < rows_of(e); r += 4) {
        double *row = e->od[0] + r * cols;
        int64_t a = 0;
        for (int64_t j = 1; j < cols; j++)
            a = row[j] > row[a] ? j : a;
        row[a] = (double)(float)e->c->fp[0];
    }
    scatter_root(e, 0);
}

/* ip0 = k, fp0 = threshold */
static ex_tensor *b_topk(env *e, ex_tensor *const *x)
{
    return ex_topk_mask(e->ctx, x[0], e->c->ip[0], (float)e->c->fp[0]);
}
static void r_topk(const env *e, double *y)
{
    ref_topk_mask(e->od[0], rows_of(e), cols_of(e), e->c->ip[0], (double)(float)e->c->fp[0], y);
}

static const tcase nas_cases[] = {
    {CASE("hardmax_st", EX_OP_HARDMAX_ST, b_hardmax, r_hardmax, 1),
     .r = {{GIN("x"), SHAPE(9, 6), UNI(-1, 1)}}, .bwd = B_IDENTITY, .init = i_ties},
    {CASE("hardmax_st of a transposed view", EX_OP_HARDMAX_ST, b_hardmax, r_hardmax, 1),
     .r = {{GIN("x"), SHAPE(6, 9), UNI(-1, 1), TRANS(0, 1)}}, .bwd = B_IDENTITY, .init = i_ties},
    /* p >= 0.05 and step 1e-4: the differences' truncation error stays near 1e-13 */
    {CASE("entropy", EX_OP_ENTROPY, b_entropy, r_entropy, 1),
     .r = {{GIN("p"), SHAPE(8, 7), UNI(0.05, 1)}}, .bwd = B_FD, .step = 1e-4},
    {CASE("entropy of a transposed view", EX_OP_ENTROPY, b_entropy, r_entropy, 1),
     .r = {{GIN("p"), SHAPE(7, 8), UNI(0.05, 1), TRANS(0, 1)}}, .bwd = B_FD, .step = 1e-4},
    {CASE("entropy with zeros and tiny p", EX_OP_ENTROPY, b_entropy, r_entropy, 1),
     .r = {{IN("p"), SHAPE(8, 7), UNI(0.05, 1)}}, .init = i_tiny},
    {CASE("topk_mask k 3", EX_OP_TOPK_MASK, b_topk, r_topk, 1),
     .r = {{IN("w"), SHAPE(9, 8), UNI(-1, 1)}}, .ip = {3}, .fp = {-0.5}, .init = i_topk},
    {CASE("topk_mask k 2 threshold 0.3", EX_OP_TOPK_MASK, b_topk, r_topk, 1),
     .r = {{IN("w"), SHAPE(9, 8), UNI(-1, 1)}}, .ip = {2}, .fp = {0.3}, .init = i_topk},
    {CASE("topk_mask k 9 > K", EX_OP_TOPK_MASK, b_topk, r_topk, 1),
     .r = {{IN("w"), SHAPE(9, 8), UNI(-1, 1)}}, .ip = {9}, .fp = {0}, .init = i_topk},
    {CASE("topk_mask k 3 of a transposed view", EX_OP_TOPK_MASK, b_topk, r_topk, 1),
     .r = {{IN("w"), SHAPE(8, 9), UNI(-1, 1), TRANS(0, 1)}}, .ip = {3}, .fp = {0.1},
     .init = i_topk},
};

static int run_all(suite *s, const tcase *c, int n)
{
    int failed = 0;
    for (int i = 0; i < n; i++)
        failed += run_case(s, &c[i]) > 0;
    return failed;
}

void family_nas(void **state)
{
    suite *s = *state;
    int failed = run_all(s, mixed_sum_cases, sizeof mixed_sum_cases / sizeof *mixed_sum_cases);
    failed += run_all(s, gumbel_cases, sizeof gumbel_cases / sizeof *gumbel_cases);
    failed += run_all(s, nas_cases, sizeof nas_cases / sizeof *nas_cases);
    gumbel_distribution(s, &failed);
    if (failed)
        fail_msg("%d NAS cases failed on backend %s", failed, s->backend_name);
}

/* ---- the search's own nodes (the NAS family, GRAD_NORM, the random draws), well formed
 * and malformed, given to the backend directly: every backend refuses the same nodes with
 * the same words (core/tdesc.h) ---- */

/* Regions of one buffer, in 32-bit words: weights [3] (0.5, 2, 3), mask [3] (1, 0, 1),
 * candidates x0 [4, 5] (i) and x1 (2i), a [4, 4] misfit, dst [4, 5], the weight
 * gradient [3], probabilities [4, 5] (0.2), tau (1), the Gumbel counter i32 [2], the norm. */
enum {
    NN_W = 0,
    NN_MASK = 8,
    NN_X0 = 16,
    NN_X1 = 48,
    NN_XS = 80,
    NN_DST = 112,
    NN_DW = 144,
    NN_P = 152,
    NN_TAU = 184,
    NN_CTR = 188,
    NN_NORM = 192,
    NN_WORDS = 200
};

/** What a case changes in its op's well-formed node. */
enum nn_mut {
    NN_NONE,
    NN_INDEX,        /* candidate 1's weight index 3 */
    NN_WEIGHTS,      /* 4 weights */
    NN_DST_BCAST,    /* dst's first dim at stride 0 */
    NN_BAD_ACTIVE,   /* candidate 1 the [4, 4] misfit, its mask entry 1 */
    NN_BAD_INACTIVE, /* the same misfit at weight index 1, whose mask entry is 0 */
    NN_SOURCES,      /* one source */
    NN_DW_SIZE,      /* a weight gradient of 4 entries */
    NN_TAU2,         /* tau of 2 elements */
    NN_COUNTER,      /* the counter f32 */
    NN_ROW_DST,      /* dst [4, 4] */
    NN_ROW_SRC,      /* source 1 [4, 4] */
    NN_TOPK,         /* k = -1 */
};

typedef struct nn_case {
    const char *what;
    ex_op op;
    enum nn_mut mut;
    ex_status want; /* with a needle in the message of a failure */
    const char *needle;
} nn_case;

static ex_tdesc nn_desc(ex_buffer *buf, int64_t at, ex_dtype dt, int64_t rows, int64_t cols)
{
    int64_t ne[2] = {rows, cols};
    return dense_desc(buf, (uint64_t)at * 4, dt, cols ? 2 : 1, cols ? ne : &ne[0]);
}

static void nn_host(uint32_t *host)
{
    float f[NN_WORDS] = {[NN_W] = 0.5f, 2.0f, 3.0f, [NN_MASK] = 1.0f, 0.0f, 1.0f};
    for (int i = 0; i < 20; i++) {
        f[NN_X0 + i] = (float)i;
        f[NN_X1 + i] = 2.0f * (float)i;
        f[NN_P + i] = 0.2f;
    }
    f[NN_TAU] = 1.0f;
    memcpy(host, f, sizeof f);
    host[NN_CTR] = 7;
    host[NN_CTR + 1] = 0;
}

/* The mixed sum's node: forward (weights, mask, x0, x1 into dst) or the weight gradient
 * (dy = x0, mask, x0, x1 into [3]). */
static void nn_mix(ex_buffer *buf, const nn_case *c, ex_tdesc *src, ex_node_exec *n)
{
    bool fwd = c->op == EX_OP_MIXED_SUM;
    src[0] = fwd ? nn_desc(buf, NN_W, EX_F32, c->mut == NN_WEIGHTS ? 4 : 3, 0)
                 : nn_desc(buf, NN_X0, EX_F32, 4, 5);
    src[1] = nn_desc(buf, NN_MASK, EX_F32, 3, 0);
    src[2] = nn_desc(buf, NN_X0, EX_F32, 4, 5);
    bool misfit = c->mut == NN_BAD_ACTIVE || c->mut == NN_BAD_INACTIVE;
    src[3] = misfit ? nn_desc(buf, NN_XS, EX_F32, 4, 4) : nn_desc(buf, NN_X1, EX_F32, 4, 5);
    n->nsrc = c->mut == NN_SOURCES ? 1 : 4;
    n->ip[0] = 0;
    n->ip[1] = c->mut == NN_INDEX ? 3 : c->mut == NN_BAD_INACTIVE ? 1 : 2;
    n->dst = fwd ? nn_desc(buf, NN_DST, EX_F32, 4, 5)
                 : nn_desc(buf, NN_DW, EX_F32, c->mut == NN_DW_SIZE ? 4 : 3, 0);
}

/* The row ops' node over the [4, 5] probabilities; GRAD_NORM over x0 and x1; a random draw
 * into dst from the counter. */
static void nn_rows(ex_buffer *buf, const nn_case *c, ex_tdesc *src, ex_node_exec *n)
{
    src[0] = nn_desc(buf, c->op == EX_OP_GRAD_NORM ? NN_X0 : NN_P, EX_F32, 4, 5);
    src[1] = nn_desc(buf, c->op == EX_OP_GRAD_NORM ? NN_X1 : NN_P, EX_F32, 4,
                     c->mut == NN_ROW_SRC ? 4 : 5);
    src[2] = nn_desc(buf, NN_CTR, c->mut == NN_COUNTER ? EX_F32 : EX_I32, 2, 0);
    n->dst = nn_desc(buf, NN_DST, EX_F32, 4, c->mut == NN_ROW_DST ? 4 : 5);
    switch (c->op) {
    case EX_OP_GUMBEL_SOFTMAX:
        src[1] = nn_desc(buf, NN_TAU, EX_F32, c->mut == NN_TAU2 ? 2 : 1, 0);
        n->nsrc = 3;
        break;
    case EX_OP_GUMBEL_SOFTMAX_BWD:
        src[2] = nn_desc(buf, NN_TAU, EX_F32, c->mut == NN_TAU2 ? 2 : 1, 0);
        n->nsrc = 3;
        break;
    case EX_OP_ENTROPY:
        n->dst = nn_desc(buf, NN_DST, EX_F32, 4, c->mut == NN_ROW_DST ? 5 : 1);
        n->nsrc = 1;
        break;
    case EX_OP_ENTROPY_BWD: n->nsrc = 2; break;
    case EX_OP_RAND_UNIFORM:
    case EX_OP_RAND_NORMAL:
        src[0] = src[2];
        src[1] = src[2];
        n->nsrc = c->mut == NN_SOURCES ? 2 : 1;
        n->fp[0] = -1.0f;
        n->fp[1] = 1.0f;
        break;
    case EX_OP_GRAD_NORM:
        n->nsrc = c->mut == NN_SOURCES ? 0 : 2;
        if (c->mut != NN_ROW_DST)
            n->dst = nn_desc(buf, NN_NORM, EX_F32, 1, 0);
        break;
    default: n->nsrc = 1; break;
    }
    n->ip[0] = c->op == EX_OP_TOPK_MASK ? (c->mut == NN_TOPK ? -1 : 2) : 5;
    n->ip[1] = 11;
}

/* What a well-formed mixed sum or norm writes; true for the other ops. */
static bool nn_value(const nn_case *c, const float *out)
{
    double want[20], got = out[NN_NORM], sq = 0.0;
    for (int i = 0; i < 20; i++) {
        want[i] = c->mut == NN_BAD_INACTIVE ? 0.5 * i : 6.5 * i; /* 0.5 x0 + 3 x1 */
        sq += (double)i * i;
    }
    switch (c->op) {
    case EX_OP_MIXED_SUM:
        for (int i = 0; i < 20; i++)
            if (out[NN_DST + i] != (float)want[i])
                return false;
        return true;
    case EX_OP_MIXED_SUM_BWD_W: /* x0·x0, 0 (inactive), x0·x1 */
        return out[NN_DW] == (float)sq && out[NN_DW + 1] == 0.0f &&
               out[NN_DW + 2] == (float)(2.0 * sq);
    case EX_OP_GRAD_NORM: return fabs(got - sqrt(5.0 * sq)) < 1e-4 * sqrt(5.0 * sq);
    case EX_OP_RAND_UNIFORM: /* in [-1, 1), not all alike */
    case EX_OP_RAND_NORMAL:  /* N(-1, 1): finite */
        for (int i = 0; i < 20; i++)
            if (!isfinite(out[NN_DST + i]) ||
                (c->op == EX_OP_RAND_UNIFORM && !(out[NN_DST + i] >= -1 && out[NN_DST + i] < 1)))
                return false;
        return out[NN_DST] != out[NN_DST + 1];
    default: return true;
    }
}

static ex_status nn_run(const suite *s, ex_buffer *buf, const nn_case *c, float *out, char *msg,
                        size_t len)
{
    const ex_backend_iface *f = ex__backend_iface_of(s->be);
    void *im = ex__backend_impl_of(s->be);
    uint32_t host[NN_WORDS] = {0};
    nn_host(host);
    ex_status st = f->upload(im, buf, 0, host, sizeof host);
    ex_tdesc src[4];
    ex_node_exec n = {.op = c->op, .src = src, .tag = {-1, -1, -1}};
    if (c->op == EX_OP_MIXED_SUM || c->op == EX_OP_MIXED_SUM_BWD_W)
        nn_mix(buf, c, src, &n);
    else
        nn_rows(buf, c, src, &n);
    if (c->mut == NN_DST_BCAST)
        n.dst.st[0] = 0;
    if (st == EX_OK)
        st = node_run(s, &n, msg, len);
    ex_status rd = f->download(im, buf, 0, out, NN_WORDS * 4);
    return st != EX_OK ? st : rd;
}

void search_node_errors(void **state)
{
    suite *s = *state;
    const ex_backend_iface *f = ex__backend_iface_of(s->be);
    void *im = ex__backend_impl_of(s->be);
    ex_buffer *buf = NULL;
    assert_int_equal(f->buffer_alloc(im, NN_WORDS * 4, &buf), EX_OK);
    const ex_op ms = EX_OP_MIXED_SUM, mw = EX_OP_MIXED_SUM_BWD_W, gs = EX_OP_GUMBEL_SOFTMAX;
    const ex_op gb = EX_OP_GUMBEL_SOFTMAX_BWD, en = EX_OP_ENTROPY, eb = EX_OP_ENTROPY_BWD;
    const ex_op gn = EX_OP_GRAD_NORM;
    static const char *shape = "candidate 1 is not f32 of dst's shape";
    const nn_case cases[] = {
        {"mixed sum", ms, NN_NONE, EX_OK, NULL},
        {"index 3 of 3", ms, NN_INDEX, EX_ERR_ARG, "weight index 3 outside [0, 3)"},
        {"4 weights", ms, NN_WEIGHTS, EX_ERR_SHAPE, "4 weights, 3 mask entries"},
        {"dst broadcasts", ms, NN_DST_BCAST, EX_ERR_ARG, "dst broadcasts"},
        {"an active misfit", ms, NN_BAD_ACTIVE, EX_ERR_SHAPE, shape},
        {"an inactive misfit", ms, NN_BAD_INACTIVE, EX_OK, NULL},
        {"one source", ms, NN_SOURCES, EX_ERR_ARG, "1 sources, expected 2 to"},
        {"weight gradient", mw, NN_NONE, EX_OK, NULL},
        {"gradient of 4", mw, NN_DW_SIZE, EX_ERR_SHAPE, "one entry per mask entry"},
        {"gradient broadcasts", mw, NN_DST_BCAST, EX_ERR_ARG, "dst broadcasts"},
        {"an active misfit", mw, NN_BAD_ACTIVE, EX_ERR_SHAPE, "candidate 1 is not f32 of dy's"},
        {"gumbel", gs, NN_NONE, EX_OK, NULL},
        {"tau of 2", gs, NN_TAU2, EX_ERR_SHAPE, "tau must be one f32 element"},
        {"f32 counter", gs, NN_COUNTER, EX_ERR_ARG, "counter must be i32"},
        {"backward, tau of 2", gb, NN_TAU2, EX_ERR_SHAPE, "tau must be one f32 element"},
        {"entropy", en, NN_NONE, EX_OK, NULL},
        {"entropy into [4, 5]", en, NN_ROW_DST, EX_ERR_SHAPE, "last dim 1"},
        {"dy [4, 4]", eb, NN_ROW_SRC, EX_ERR_SHAPE, "source 1 is not f32 of the rows' shape"},
        {"dst [4, 4]", EX_OP_HARDMAX_ST, NN_ROW_DST, EX_ERR_SHAPE, "source 0 is not f32 of the"},
        {"entropy's dst broadcasts", en, NN_DST_BCAST, EX_ERR_SHAPE, "dst does not fit the rows"},
        {"k -1", EX_OP_TOPK_MASK, NN_TOPK, EX_ERR_ARG, "k is -1"},
        {"top 2", EX_OP_TOPK_MASK, NN_NONE, EX_OK, NULL},
        {"norm", gn, NN_NONE, EX_OK, NULL},
        {"norm of nothing", gn, NN_SOURCES, EX_ERR_ARG, "0 sources, expected 1 or more"},
        {"norm into [4, 5]", gn, NN_ROW_DST, EX_ERR_SHAPE, "dst must be one f32 element"},
        {"uniform", EX_OP_RAND_UNIFORM, NN_NONE, EX_OK, NULL},
        {"f32 counter", EX_OP_RAND_UNIFORM, NN_COUNTER, EX_ERR_ARG, "counter must be i32 [2]"},
        {"two sources", EX_OP_RAND_UNIFORM, NN_SOURCES, EX_ERR_ARG, "expected the counter"},
        {"dst broadcasts", EX_OP_RAND_NORMAL, NN_DST_BCAST, EX_ERR_ARG, "dst broadcasts"},
        {"normal", EX_OP_RAND_NORMAL, NN_NONE, EX_OK, NULL},
        {"mixed sum again", ms, NN_NONE, EX_OK, NULL},
    };
    int failed = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const nn_case *c = &cases[i];
        float out[NN_WORDS] = {0};
        char msg[512];
        ex_status st = nn_run(s, buf, c, out, msg, sizeof msg);
        bool value = c->want != EX_OK || nn_value(c, out);
        failed += !node_case_ok(s, c->op, c->what, st, msg, c->want, c->needle, value,
                                value ? "" : "; wrong values");
    }
    f->buffer_free(im, buf);
    if (failed)
        fail_msg("%d of the search's nodes were handled wrongly on %s", failed, s->backend_name);
}
