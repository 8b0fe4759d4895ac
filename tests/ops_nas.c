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
