/* Op suite: element-wise ops, reductions and the softmax family. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ops_harness.h"
#include "ref.h"

#define ALL(nd) ((1u << (nd)) - 1)

/* ---- element-wise ---- */

static ex_tensor *b_add(env *e, ex_tensor *const *x)
{
    return ex_add(e->ctx, x[0], x[1]);
}
static ex_tensor *b_sub(env *e, ex_tensor *const *x)
{
    return ex_sub(e->ctx, x[0], x[1]);
}
static ex_tensor *b_mul(env *e, ex_tensor *const *x)
{
    return ex_mul(e->ctx, x[0], x[1]);
}

static void r_binary(const env *e, double *y, ref_binop op)
{
    int64_t an[4], bn[4], yn[4];
    shape4(e, 0, an);
    shape4(e, 1, bn);
    yshape4(e, yn);
    ref_binary(op, e->od[0], an, e->od[1], bn, y, yn);
}
static void r_add(const env *e, double *y)
{
    r_binary(e, y, REF_ADD);
}
static void r_sub(const env *e, double *y)
{
    r_binary(e, y, REF_SUB);
}
static void r_mul(const env *e, double *y)
{
    r_binary(e, y, REF_MUL);
}

static ex_tensor *b_scale(env *e, ex_tensor *const *x)
{
    return ex_scale(e->ctx, x[0], (float)e->c->fp[0]);
}
static void r_scale(const env *e, double *y)
{
    ref_scale(e->od[0], e->on[0], (double)(float)e->c->fp[0], y);
}

/* a group of one rank: the plan's allreduce is a scaled copy */
static ex_tensor *b_allreduce(env *e, ex_tensor *const *x)
{
    return ex_allreduce(e->ctx, x[0], (float)e->c->fp[0]);
}

static ex_tensor *b_axpy(env *e, ex_tensor *const *x)
{
    return ex_axpy(e->ctx, (float)e->c->fp[0], x[0], x[1]);
}
static void r_axpy(const env *e, double *y)
{
    ref_axpy((double)(float)e->c->fp[0], e->od[0], e->od[1], e->on[0], y);
}

static ex_tensor *b_relu(env *e, ex_tensor *const *x)
{
    return ex_relu(e->ctx, x[0]);
}
static void r_relu(const env *e, double *y)
{
    ref_relu(e->od[0], e->on[0], y);
}

/* fill has no operand: shape in ip[0..3], value in fp[0] */
/* relu and axpy on an intermediate with one reader, which the planner may overwrite in
 * place (dst == src[0]) */
static ex_tensor *b_relu_inplace(env *e, ex_tensor *const *x)
{
    return ex_relu(e->ctx, ex_scale(e->ctx, x[0], 1.5f));
}
static void r_relu_inplace(const env *e, double *y)
{
    ref_scale(e->od[0], e->on[0], 1.5, y);
    ref_relu(y, e->on[0], y);
}

static ex_tensor *b_axpy_inplace(env *e, ex_tensor *const *x)
{
    return ex_axpy(e->ctx, (float)e->c->fp[0], ex_scale(e->ctx, x[0], -2.0f), x[1]);
}
static void r_axpy_inplace(const env *e, double *y)
{
    ref_scale(e->od[0], e->on[0], -2.0, y);
    ref_axpy((double)(float)e->c->fp[0], y, e->od[1], e->on[0], y);
}

static ex_tensor *b_fill(env *e, ex_tensor *const *x)
{
    (void)x;
    int64_t ne[4] = {e->c->ip[0], e->c->ip[1], e->c->ip[2], e->c->ip[3]};
    return ex_fill(e->ctx, 4, ne, (float)e->c->fp[0]);
}
static void r_fill(const env *e, double *y)
{
    for (int64_t i = 0; i < e->ny; i++)
        y[i] = (double)(float)e->c->fp[0];
}

static ex_tensor *b_copy(env *e, ex_tensor *const *x)
{
    return ex_copy(e->ctx, x[0]);
}
static void r_copy(const env *e, double *y)
{
    memcpy(y, e->od[0], (size_t)e->on[0] * sizeof *y);
}

/* copy_into: x [N, c, H, W] written into channels [ip0, ip0 + c) of a [N, ip1, H, W]
 * buffer filled with fp0; the whole buffer is the output. */
static ex_tensor *b_copy_into(env *e, ex_tensor *const *x)
{
    int64_t ne[4] = {ex_tensor_dim(x[0], 0), e->c->ip[1], ex_tensor_dim(x[0], 2),
                     ex_tensor_dim(x[0], 3)};
    ex_tensor *cat = ex_fill(e->ctx, 4, ne, (float)e->c->fp[0]);
    ex_copy_into(e->ctx, x[0], ex_slice(e->ctx, cat, 1, e->c->ip[0], ex_tensor_dim(x[0], 1)));
    return cat;
}
static void r_copy_into(const env *e, double *y)
{
    int64_t n = e->yne[0], c = e->yne[1], hw = e->yne[2] * e->yne[3], cx = e->one[0][1];
    for (int64_t i = 0; i < e->ny; i++)
        y[i] = (double)(float)e->c->fp[0];
    for (int64_t b = 0; b < n; b++)
        for (int64_t ch = 0; ch < cx; ch++)
            memcpy(y + (b * c + ch + e->c->ip[0]) * hw, e->od[0] + (b * cx + ch) * hw,
                   (size_t)hw * sizeof *y);
}

/* drop_path: x [N, ...], counter; keep probability fp0. The key is private to the node,
 * so the kept samples are read off the output (a sample is all zero or x / keep; x has
 * no zeros) and everything else is checked against that mask. */
static ex_tensor *b_drop_path(env *e, ex_tensor *const *x)
{
    return ex_drop_path(e->ctx, x[0], x[1], (float)e->c->fp[0]);
}

static int infer_kept(const env *e, const double *y, int *kept)
{
    int64_t n = e->one[0][0], inner = e->on[0] / n;
    int count = 0;
    for (int64_t s = 0; s < n; s++) {
        kept[s] = 0;
        for (int64_t i = 0; i < inner; i++)
            kept[s] |= y[s * inner + i] != 0;
        count += kept[s];
    }
    return count;
}

static void p_drop_path(env *e)
{
    int64_t n = e->one[0][0];
    e->scratch = xcalloc((size_t)n, sizeof(int));
    int kept = infer_kept(e, e->yv, e->scratch);
    /* binomial(n, keep): the counts outside 5 sigma have probability < 1e-6 */
    double keep = e->c->fp[0], mu = (double)n * keep, sd = sqrt((double)n * keep * (1 - keep));
    if (fabs(kept - mu) > 5 * sd)
        case_fail(e, "%d of %lld samples kept at keep %.2f", kept, (long long)n, keep);
}

static void r_drop_path(const env *e, double *y)
{
    int64_t n = e->one[0][0];
    ref_drop_path(e->od[0], n, e->on[0] / n, e->scratch, (double)(float)e->c->fp[0], y);
}

/* Another counter draws another mask, which is again all-or-nothing per sample. */
static void a_drop_path(env *e)
{
    int64_t n = e->one[0][0];
    int32_t other[2] = {(int32_t)e->rd[1][0] + 1, (int32_t)e->rd[1][1]};
    int32_t first[2] = {(int32_t)e->rd[1][0], (int32_t)e->rd[1][1]};
    int *kept = xcalloc((size_t)n, sizeof *kept);
    double *y = xcalloc((size_t)e->ny, sizeof *y), *ref = xcalloc((size_t)e->ny, sizeof *ref);
    if (write_i(e, e->root[1], other, 2) && run_plan(e) && read_f(e, e->y, y, e->ny)) {
        infer_kept(e, y, kept);
        ref_drop_path(e->od[0], n, e->on[0] / n, kept, (double)(float)e->c->fp[0], ref);
        check_nmse(e, "forward, other counter", y, ref, e->ny, ex_op_tolerance(EX_OP_DROP_PATH));
        if (memcmp(kept, e->scratch, (size_t)n * sizeof *kept) == 0)
            case_fail(e, "counters %d and %d drew the same mask", first[0], other[0]);
    }
    write_i(e, e->root[1], first, 2); /* for the rerun check */
    free(kept);
    free(y);
    free(ref);
}

#define X4 SHAPE(5, 7, 11, 13)

static const tcase elementwise_cases[] = {
    {CASE("add", EX_OP_ADD, b_add, r_add, 2),
     .r = {{GIN("a"), X4, UNI(-1, 1)}, {GIN("b"), X4, UNI(-1, 1)}}, .bwd = B_FD},
    {CASE("add broadcast b [7,1,13]", EX_OP_ADD, b_add, r_add, 2),
     .r = {{GIN("a"), X4, UNI(-1, 1)}, {GIN("b"), SHAPE(7, 1, 13), UNI(-1, 1)}}, .bwd = B_FD},
    {CASE("sub", EX_OP_SUB, b_sub, r_sub, 2),
     .r = {{GIN("a"), X4, UNI(-1, 1)}, {GIN("b"), SHAPE(5, 13, 11, 7), UNI(-1, 1), TRANS(1, 3)}},
     .bwd = B_FD},
    {CASE("sub broadcast a [5,1,11,1]", EX_OP_SUB, b_sub, r_sub, 2),
     .r = {{GIN("a"), SHAPE(5, 1, 11, 1), UNI(-1, 1)}, {GIN("b"), X4, UNI(-1, 1)}}, .bwd = B_FD},
    {CASE("mul", EX_OP_MUL, b_mul, r_mul, 2),
     .r = {{GIN("a"), SHAPE(5, 7, 13, 11), UNI(-2, 2), TRANS(2, 3)}, {GIN("b"), X4, UNI(-2, 2)}},
     .bwd = B_FD},
    {CASE("mul broadcast b [11,13]", EX_OP_MUL, b_mul, r_mul, 2),
     .r = {{GIN("a"), X4, UNI(-2, 2)}, {GIN("b"), SHAPE(11, 13), UNI(-2, 2)}}, .bwd = B_FD},
    /* Vulkan merges the dims every operand steps over as one: 7x7 planes times a scalar
     * become one row of 4m elements (4 an invocation), a channel slice of 14x14 planes one
     * row a sample */
    {CASE("mul of 7x7 planes by a scalar", EX_OP_MUL, b_mul, r_mul, 2),
     .r = {{GIN("a"), SHAPE(4, 4, 7, 7), UNI(-2, 2)}, {GIN("b"), SHAPE(1), UNI(-2, 2)}},
     .bwd = B_FD},
    {CASE("add of a channel slice of 14x14 planes", EX_OP_ADD, b_add, r_add, 2),
     .r = {{GIN("a"), SHAPE(2, 6, 14, 14), UNI(-1, 1), SLICE(1, 1, 4)},
           {GIN("b"), SHAPE(2, 4, 14, 14), UNI(-1, 1)}},
     .bwd = B_FD},
    {CASE("scale", EX_OP_SCALE, b_scale, r_scale, 1), .r = {{GIN("x"), X4, UNI(-3, 3)}},
     .fp = {-1.7}, .bwd = B_FD},
    {CASE("scale channel slice", EX_OP_SCALE, b_scale, r_scale, 1),
     .r = {{GIN("x"), SHAPE(5, 9, 11, 13), UNI(-3, 3), SLICE(1, 1, 7)}}, .fp = {0.3}, .bwd = B_FD},
    {CASE("allreduce of a transposed view, one rank", EX_OP_ALLREDUCE, b_allreduce, r_scale, 1),
     .r = {{IN("x"), SHAPE(5, 9, 11, 13), UNI(-3, 3), TRANS(1, 3)}}, .fp = {0.25}, .bwd = B_NONE},
    {CASE("allreduce of a channel slice, one rank", EX_OP_ALLREDUCE, b_allreduce, r_scale, 1),
     .r = {{IN("x"), SHAPE(3, 7, 5, 5), UNI(-3, 3), SLICE(1, 2, 4)}}, .fp = {1.0}, .bwd = B_NONE},
    {CASE("axpy", EX_OP_AXPY, b_axpy, r_axpy, 2),
     .r = {{GIN("x"), X4, UNI(-1, 1)}, {GIN("y"), SHAPE(13, 7, 11, 5), UNI(-1, 1), TRANS(0, 3)}},
     .fp = {0.6}, .bwd = B_FD},
    {CASE("relu", EX_OP_RELU, b_relu, r_relu, 1), .r = {{GIN("x"), X4, AWAY(0.05, 2)}},
     .bwd = B_FD},
    {CASE("relu channel slice", EX_OP_RELU, b_relu, r_relu, 1),
     .r = {{GIN("x"), SHAPE(5, 10, 11, 13), AWAY(0.05, 2), SLICE(1, 2, 7)}}, .bwd = B_FD},
    {CASE("relu of an intermediate (in place)", EX_OP_RELU, b_relu_inplace, r_relu_inplace, 1),
     .r = {{GIN("x"), X4, AWAY(0.05, 2)}}, .bwd = B_FD},
    {CASE("axpy of an intermediate (in place)", EX_OP_AXPY, b_axpy_inplace, r_axpy_inplace, 2),
     .r = {{GIN("x"), X4, UNI(-1, 1)}, {GIN("y"), X4, UNI(-1, 1)}}, .fp = {0.7}, .bwd = B_FD},
    {CASE("fill", EX_OP_FILL, b_fill, r_fill, 0), .r = {{0}}, .ip = {5, 7, 11, 13}, .fp = {2.5}},
    {CASE("copy of a transposed view", EX_OP_COPY, b_copy, r_copy, 1),
     .r = {{GIN("x"), SHAPE(5, 13, 11, 7), UNI(-1, 1), TRANS(1, 3)}}, .bwd = B_FD},
    {CASE("copy_into channel slice", EX_OP_COPY, b_copy_into, r_copy_into, 1),
     .r = {{GIN("x"), SHAPE(3, 2, 7, 9), UNI(-1, 1)}}, .ip = {1, 5}, .fp = {0.5}, .bwd = B_FD},
    {CASE("copy_into from a transposed view", EX_OP_COPY, b_copy_into, r_copy_into, 1),
     .r = {{GIN("x"), SHAPE(3, 2, 9, 7), UNI(-1, 1), TRANS(2, 3)}}, .ip = {3, 5}, .fp = {-1},
     .bwd = B_FD},
    {CASE("drop_path on a transposed view", EX_OP_DROP_PATH, b_drop_path, r_drop_path, 2),
     .r = {{GIN("x"), SHAPE(3, 37, 5, 7), AWAY(0.1, 1), TRANS(0, 1)},
           {I32("counter"), SHAPE(2), CONST(7)}},
     .fp = {0.6}, .bwd = B_FD, .prepare = p_drop_path, .after = a_drop_path},
};

void family_elementwise(void **state)
{
    run_table(*state, elementwise_cases, sizeof elementwise_cases / sizeof *elementwise_cases);
}

/* ---- reductions: axes mask in ip[0] ---- */

static ex_tensor *b_sum(env *e, ex_tensor *const *x)
{
    return ex_sum(e->ctx, x[0], (unsigned)e->c->ip[0]);
}
static ex_tensor *b_mean(env *e, ex_tensor *const *x)
{
    return ex_mean(e->ctx, x[0], (unsigned)e->c->ip[0]);
}
static ex_tensor *b_max(env *e, ex_tensor *const *x)
{
    return ex_max(e->ctx, x[0], (unsigned)e->c->ip[0]);
}

static void r_reduce(const env *e, double *y, ref_reduce_kind kind)
{
    int64_t ne[4];
    shape4(e, 0, ne);
    unsigned axes = (unsigned)e->c->ip[0] << (4 - e->ond[0]);
    ref_reduce(kind, e->od[0], ne, axes, y);
}
static void r_sum(const env *e, double *y)
{
    r_reduce(e, y, REF_SUM);
}
static void r_mean(const env *e, double *y)
{
    r_reduce(e, y, REF_MEAN);
}
static void r_max(const env *e, double *y)
{
    r_reduce(e, y, REF_MAX);
}

/* Values on a grid of 0.25 in [-1, 1]: ties in every reduced group. */
static void i_quantize(env *e)
{
    for (int64_t i = 0; i < e->rn[0]; i++)
        e->rd[0][i] = round(e->rd[0][i] * 4) / 4;
}

/* max's gradient at ties: d loss / d x = r of its group wherever x equals the group's
 * maximum, every tied element alike (max_bwd: "dy where x == y"). */
static void a_max_ties(env *e)
{
    int64_t ne[4], i[4], k = 0, ties = 0;
    shape4(e, 0, ne);
    unsigned axes = (unsigned)e->c->ip[0] << (4 - e->ond[0]);
    double *want = xcalloc((size_t)e->on[0], sizeof *want);
    for (i[0] = 0; i[0] < ne[0]; i[0]++)
        for (i[1] = 0; i[1] < ne[1]; i[1]++)
            for (i[2] = 0; i[2] < ne[2]; i[2]++)
                for (i[3] = 0; i[3] < ne[3]; i[3]++, k++) {
                    int64_t o = 0;
                    for (int d = 0; d < 4; d++)
                        o = o * ((axes >> d) & 1 ? 1 : ne[d]) + ((axes >> d) & 1 ? 0 : i[d]);
                    bool top = e->od[0][k] == e->yr[o];
                    want[k] = top ? e->rv[o] : 0;
                    ties += top;
                }
    if (ties <= e->ny)
        case_fail(e, "the data has no ties");
    check_nmse(e, "gradient at ties", e->gv[0], want, e->on[0], ex_op_tolerance(EX_OP_MAX_BWD));
    free(want);
}

#define RED(nm, op_, build_, ref_, axes)                                                           \
    {                                                                                              \
        CASE(nm, op_, build_, ref_, 1), .r = {{GIN("x"), X4, UNI(-1, 1)}}, .ip = {axes},           \
                                        .bwd = B_FD                                                \
    }
/* max: a shuffled grid with spacing 1e-3, so no two elements of a window are within the
 * finite-difference reach of each other (step 1e-5 * max(1, |x|) <= 2.6e-5) */
#define RMAX(nm, axes)                                                                             \
    {                                                                                              \
        CASE(nm, EX_OP_MAX, b_max, r_max, 1), .r = {{GIN("x"), X4, DISTINCT(1e-3)}}, .ip = {axes}, \
                                              .bwd = B_FD, .step = 1e-5                            \
    }

static const tcase reduce_cases[] = {
    RED("sum axes 0x1", EX_OP_SUM, b_sum, r_sum, 0x1),
    RED("sum axes 0x6", EX_OP_SUM, b_sum, r_sum, 0x6),
    RED("sum axes 0x9", EX_OP_SUM, b_sum, r_sum, 0x9),
    RED("sum axes 0x8", EX_OP_SUM, b_sum, r_sum, 0x8),
    RED("sum axes 0xe", EX_OP_SUM, b_sum, r_sum, 0xe),
    RED("sum axes 0xf", EX_OP_SUM, b_sum, r_sum, 0xf),
    {CASE("sum axes 0x5 of a transposed view", EX_OP_SUM, b_sum, r_sum, 1),
     .r = {{GIN("x"), SHAPE(5, 13, 11, 7), UNI(-1, 1), TRANS(1, 3)}}, .ip = {0x5}, .bwd = B_FD},
    {CASE("sum axes 0x2 of a 2-d slice", EX_OP_SUM, b_sum, r_sum, 1),
     .r = {{GIN("x"), SHAPE(23, 19), UNI(-1, 1), SLICE(1, 3, 14)}}, .ip = {0x2}, .bwd = B_FD},
    RED("mean axes 0x2", EX_OP_MEAN, b_mean, r_mean, 0x2),
    RED("mean axes 0x5", EX_OP_MEAN, b_mean, r_mean, 0x5),
    RED("mean axes 0xb", EX_OP_MEAN, b_mean, r_mean, 0xb),
    RED("mean axes 0xc", EX_OP_MEAN, b_mean, r_mean, 0xc),
    RED("mean axes 0xf", EX_OP_MEAN, b_mean, r_mean, 0xf),
    {CASE("mean axes 0xa of a channel slice", EX_OP_MEAN, b_mean, r_mean, 1),
     .r = {{GIN("x"), SHAPE(5, 9, 11, 13), UNI(-1, 1), SLICE(1, 2, 7)}}, .ip = {0xa}, .bwd = B_FD},
    RMAX("max axes 0x8", 0x8),
    RMAX("max axes 0x3", 0x3),
    RMAX("max axes 0xc", 0xc),
    RMAX("max axes 0x6", 0x6),
    RMAX("max axes 0xf", 0xf),
    {CASE("max axes 0x8 with ties", EX_OP_MAX, b_max, r_max, 1), .r = {{GIN("x"), X4, UNI(-1, 1)}},
     .ip = {0x8}, .bwd = B_HOOK, .init = i_quantize, .after = a_max_ties},
    {CASE("max axes 0x5 with ties", EX_OP_MAX, b_max, r_max, 1), .r = {{GIN("x"), X4, UNI(-1, 1)}},
     .ip = {0x5}, .bwd = B_HOOK, .init = i_quantize, .after = a_max_ties},
    {CASE("max axes 0x9 of a transposed view", EX_OP_MAX, b_max, r_max, 1),
     .r = {{GIN("x"), SHAPE(5, 13, 11, 7), DISTINCT(1e-3), TRANS(1, 3)}}, .ip = {0x9}, .bwd = B_FD,
     .step = 1e-5},
};

void family_reduce(void **state)
{
    run_table(*state, reduce_cases, sizeof reduce_cases / sizeof *reduce_cases);
}

/* ---- softmax family ---- */

static int64_t last_dim(const env *e, int k)
{
    return e->one[k][e->ond[k] - 1];
}

static ex_tensor *b_softmax(env *e, ex_tensor *const *x)
{
    return ex_softmax(e->ctx, x[0]);
}
static void r_softmax(const env *e, double *y)
{
    ref_softmax(e->od[0], e->on[0] / last_dim(e, 0), last_dim(e, 0), y);
}

static ex_tensor *b_log_softmax(env *e, ex_tensor *const *x)
{
    return ex_log_softmax(e->ctx, x[0]);
}
static void r_log_softmax(const env *e, double *y)
{
    ref_log_softmax(e->od[0], e->on[0] / last_dim(e, 0), last_dim(e, 0), y);
}

static ex_tensor *b_cross_entropy(env *e, ex_tensor *const *x)
{
    return ex_cross_entropy(e->ctx, x[0], x[1]);
}
static void r_cross_entropy(const env *e, double *y)
{
    y[0] = ref_cross_entropy(e->od[0], e->oi[1], e->one[0][0], e->one[0][1]);
}

static ex_tensor *b_accuracy(env *e, ex_tensor *const *x)
{
    return ex_accuracy(e->ctx, x[0], x[1]);
}
static void r_accuracy(const env *e, double *y)
{
    y[0] = ref_accuracy(e->od[0], e->oi[1], e->one[0][0], e->one[0][1]);
}

/* Labels that hit on about half the rows, and rows whose maximum is tied between two
 * columns, labelled with the later of the two (a miss: the first maximum counts). */
static void i_accuracy(env *e)
{
    gather_root(e, 0);
    gather_root(e, 1);
    int64_t n = e->one[0][0], k = e->one[0][1];
    for (int64_t r = 0; r < n; r++) {
        double *row = e->od[0] + r * k;
        int64_t a = 0, b = (r * 3 + 1) % k;
        for (int64_t j = 1; j < k; j++)
            a = row[j] > row[a] ? j : a;
        bool tie = r % 3 == 0 && b != a;
        if (tie)
            row[b] = row[a];
        if (r % 2 == 0)
            e->od[1][r] = (double)(tie && b < a ? b : a);
        else if (tie)
            e->od[1][r] = (double)(b < a ? a : b);
    }
    scatter_root(e, 0);
    scatter_root(e, 1);
}

static const tcase softmax_cases[] = {
    {CASE("softmax", EX_OP_SOFTMAX, b_softmax, r_softmax, 1), .r = {{GIN("x"), X4, UNI(-4, 4)}},
     .bwd = B_FD},
    {CASE("softmax of a transposed view", EX_OP_SOFTMAX, b_softmax, r_softmax, 1),
     .r = {{GIN("x"), SHAPE(5, 7, 13, 11), UNI(-4, 4), TRANS(2, 3)}}, .bwd = B_FD},
    {CASE("softmax 2-d, large logits", EX_OP_SOFTMAX, b_softmax, r_softmax, 1),
     .r = {{GIN("x"), SHAPE(37, 10), UNI(60, 90)}}, .bwd = B_FD, .step = 1e-5},
    {CASE("log_softmax", EX_OP_LOG_SOFTMAX, b_log_softmax, r_log_softmax, 1),
     .r = {{GIN("x"), X4, UNI(-4, 4)}}, .bwd = B_FD},
    {CASE("log_softmax of a slice", EX_OP_LOG_SOFTMAX, b_log_softmax, r_log_softmax, 1),
     .r = {{GIN("x"), SHAPE(5, 7, 11, 17), UNI(-4, 4), SLICE(3, 2, 13)}}, .bwd = B_FD},
    {CASE("cross_entropy", EX_OP_CROSS_ENTROPY, b_cross_entropy, r_cross_entropy, 2),
     .r = {{GIN("logits"), SHAPE(37, 10), UNI(-3, 3)}, {I32("labels"), SHAPE(37), INTS(0, 10)}},
     .bwd = B_FD},
    {CASE("cross_entropy of transposed logits", EX_OP_CROSS_ENTROPY, b_cross_entropy,
          r_cross_entropy, 2),
     .r = {{GIN("logits"), SHAPE(10, 37), UNI(-3, 3), TRANS(0, 1)},
           {I32("labels"), SHAPE(37), INTS(0, 10)}},
     .bwd = B_FD},
    {CASE("accuracy", EX_OP_ACCURACY, b_accuracy, r_accuracy, 2),
     .r = {{IN("logits"), SHAPE(37, 10), UNI(-3, 3)}, {I32("labels"), SHAPE(37), INTS(0, 10)}},
     .init = i_accuracy},
    {CASE("accuracy of transposed logits", EX_OP_ACCURACY, b_accuracy, r_accuracy, 2),
     .r = {{IN("logits"), SHAPE(10, 37), UNI(-3, 3), TRANS(0, 1)},
           {I32("labels"), SHAPE(37), INTS(0, 10)}},
     .init = i_accuracy},
};

void family_softmax(void **state)
{
    run_table(*state, softmax_cases, sizeof softmax_cases / sizeof *softmax_cases);
}

/* ---- softmax-family nodes, well formed and malformed, given to the backend directly:
 * every backend refuses the same nodes with the same words (core/tdesc.h) ---- */

/* Regions of one buffer, in 32-bit words: logits [4, 5] (zeros), labels [4] (0..3), dloss
 * [2], the loss, and a [4, 5] dst. */
enum { SN_X = 0, SN_LAB = 64, SN_DL = 96, SN_LOSS = 128, SN_DST = 160, SN_WORDS = 192 };

static ex_tdesc sn_desc(ex_buffer *buf, int64_t at, ex_dtype dt, int64_t rows, int64_t cols)
{
    ex_tdesc t = {.dtype = dt, .ndim = cols ? 2 : 1, .buf = buf, .offset = (uint64_t)at * 4};
    t.ne[0] = rows;
    t.ne[1] = cols ? cols : 1;
    t.st[0] = cols ? cols : 1;
    t.st[1] = cols ? 1 : 0;
    return t;
}

typedef struct sn_case {
    const char *what;
    ex_op op;
    int nsrc;
    int labels;     /* how many labels (4: one a row) */
    ex_dtype ldt;   /* their dtype */
    int dloss;      /* dloss elements */
    int dst_cols;   /* the [4, n] dst of the row ops and the backward pass */
    int dst_bcast;  /* dst's rows at stride 0 */
    int src1_cols;  /* SOFTMAX_BWD's dy columns */
    ex_status want; /* with a needle in the message of a failure */
    const char *needle;
} sn_case;

/* The node of case c over buf. */
static ex_status sn_run(const suite *s, ex_buffer *buf, const sn_case *c, float *loss, char *msg,
                        size_t len)
{
    const ex_backend_iface *f = ex__backend_iface_of(s->be);
    void *im = ex__backend_impl_of(s->be);
    uint32_t host[SN_WORDS] = {0};
    for (uint32_t i = 0; i < 4; i++)
        host[SN_LAB + i] = i;
    float one = 1.0f;
    memcpy(&host[SN_DL], &one, 4);
    memcpy(&host[SN_DL + 1], &one, 4);
    ex_status st = f->upload(im, buf, 0, host, sizeof host);
    ex_tdesc src[3], dst = sn_desc(buf, SN_DST, EX_F32, 4, c->dst_cols);
    if (c->dst_bcast)
        dst.st[0] = 0;
    if (c->op == EX_OP_CROSS_ENTROPY || c->op == EX_OP_CROSS_ENTROPY_BWD) {
        src[0] = sn_desc(buf, SN_X, EX_F32, 4, 5);
        src[1] = sn_desc(buf, SN_LAB, c->ldt, c->labels, 0);
        src[2] = sn_desc(buf, SN_DL, EX_F32, c->dloss, 0);
        if (c->op == EX_OP_CROSS_ENTROPY)
            dst = sn_desc(buf, SN_LOSS, EX_F32, 1, 0);
    } else {
        src[0] = sn_desc(buf, SN_X, EX_F32, 4, 5);
        src[1] = sn_desc(buf, SN_X, EX_F32, 4, c->src1_cols);
        src[2] = src[1];
    }
    ex_node_exec n = {.op = c->op, .nsrc = c->nsrc, .src = src, .dst = dst, .tag = {-1, -1, -1}};
    if (st == EX_OK)
        st = node_run(s, &n, msg, len);
    ex_status rd = f->download(im, buf, SN_LOSS * 4, loss, sizeof *loss);
    return st != EX_OK ? st : rd;
}

void softmax_node_errors(void **state)
{
    suite *s = *state;
    const ex_backend_iface *f = ex__backend_iface_of(s->be);
    void *im = ex__backend_impl_of(s->be);
    ex_buffer *buf = NULL;
    assert_int_equal(f->buffer_alloc(im, SN_WORDS * 4, &buf), EX_OK);
    static const sn_case cases[] = {
        {"cross entropy", EX_OP_CROSS_ENTROPY, 2, 4, EX_I32, 1, 5, 0, 5, EX_OK, NULL},
        {"3 labels for 4 rows", EX_OP_CROSS_ENTROPY, 2, 3, EX_I32, 1, 5, 0, 5, EX_ERR_SHAPE,
         "labels for"},
        {"f32 labels", EX_OP_CROSS_ENTROPY, 2, 4, EX_F32, 1, 5, 0, 5, EX_ERR_ARG, "labels"},
        {"3 sources", EX_OP_CROSS_ENTROPY, 3, 4, EX_I32, 1, 5, 0, 5, EX_ERR_ARG, "sources"},
        {"dloss of 2", EX_OP_CROSS_ENTROPY_BWD, 3, 4, EX_I32, 2, 5, 0, 5, EX_ERR_SHAPE, "dloss"},
        {"dst of 4 columns", EX_OP_CROSS_ENTROPY_BWD, 3, 4, EX_I32, 1, 4, 0, 5, EX_ERR_SHAPE,
         "logits' shape"},
        {"softmax", EX_OP_SOFTMAX, 1, 4, EX_I32, 1, 5, 0, 5, EX_OK, NULL},
        {"softmax, dst broadcasts", EX_OP_SOFTMAX, 1, 4, EX_I32, 1, 5, 1, 5, EX_ERR_ARG,
         "broadcasts"},
        {"softmax_bwd, dy of 4 columns", EX_OP_SOFTMAX_BWD, 2, 4, EX_I32, 1, 5, 0, 4, EX_ERR_SHAPE,
         "not f32 of dst's shape"},
        {"cross entropy again", EX_OP_CROSS_ENTROPY, 2, 4, EX_I32, 1, 5, 0, 5, EX_OK, NULL},
    };
    int failed = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const sn_case *c = &cases[i];
        float loss = 0;
        char msg[512];
        ex_status st = sn_run(s, buf, c, &loss, msg, sizeof msg);
        /* zero logits: each row's loss is log 5 */
        bool value = c->want != EX_OK || c->op != EX_OP_CROSS_ENTROPY ||
                     fabs((double)loss - log(5.0)) < 1e-5;
        char note[64];
        snprintf(note, sizeof note, "; loss %.7g", (double)loss);
        failed += !node_case_ok(s, c->op, c->what, st, msg, c->want, c->needle, value, note);
    }
    f->buffer_free(im, buf);
    if (failed)
        fail_msg("%d softmax-family nodes were handled wrongly on %s", failed, s->backend_name);
}
