/* Engine mechanics the op suite does not reach: the Philox stream, gated candidates,
 * gradients summed from many contributions, writes into views (concatenation) and their
 * gradients, profiling figures. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/philox.h"
#include "exapt/exapt.h"

static void philox_known_answers(void **state)
{
    (void)state;
    /* the known-answer vectors of Salmon et al.'s Random123 for Philox 4x32-10 */
    static const uint32_t in[3][6] = {
        {0, 0, 0, 0, 0, 0},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0},
    };
    static const uint32_t out[3][4] = {
        {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1},
    };
    for (int v = 0; v < 3; v++) {
        uint32_t c[4] = {in[v][0], in[v][1], in[v][2], in[v][3]};
        ex_philox4x32(c, in[v][4], in[v][5]);
        for (int i = 0; i < 4; i++)
            assert_int_equal(c[i], out[v][i]);
    }
}

typedef struct fixture {
    ex_ctx *ctx;
    ex_backend *be;
    ex_plan *plan;
} fixture;

static void open_cpu(fixture *f)
{
    char msg[256];
    f->ctx = ex_ctx_new();
    assert_non_null(f->ctx);
    assert_int_equal(ex_backend_open("cpu", &f->be, msg, sizeof msg), EX_OK);
}

static void plan(fixture *f, bool profile)
{
    ex_plan_opts o;
    ex_plan_opts_default(&o);
    o.poison = true;
    o.profile = profile;
    ex_status st = ex_graph_plan(f->ctx, f->be, &o, &f->plan);
    if (st != EX_OK)
        fail_msg("plan: %s", ex_ctx_error(f->ctx));
}

static void close_all(fixture *f)
{
    ex_plan_free(f->plan);
    ex_backend_close(f->be);
    ex_ctx_free(f->ctx);
}

static void put(fixture *f, ex_tensor *t, const float *v, size_t n)
{
    if (ex_plan_write(f->plan, t, v, n * sizeof *v) != EX_OK)
        fail_msg("write: %s", ex_plan_error(f->plan));
}

static void get(fixture *f, ex_tensor *t, float *v, size_t n)
{
    if (ex_plan_read(f->plan, t, v, n * sizeof *v) != EX_OK)
        fail_msg("read: %s", ex_plan_error(f->plan));
}

static void run(fixture *f)
{
    if (ex_plan_run(f->plan) != EX_OK)
        fail_msg("run: %s", ex_plan_error(f->plan));
}

#define NX 24 /* x is [2, 3, 2, 2] */

static float value(int i)
{
    return (float)((i * 37 % 23) - 11) / 7.0f; /* no zeros, mixed signs */
}

/* A pointwise filter stored as [CO, CI, 1, 1] and used as its [CO, CI] reshape (as the
 * NAS cells do): its gradient is the filter gradient itself, with no zero-filled
 * accumulator and no add, and its value is dy·xᵀ. */
static void reshaped_weight_gradient(void **state)
{
    (void)state;
    fixture f = {0};
    open_cpu(&f);
    int64_t xs[4] = {2, 3, 2, 2}, ws[4] = {4, 3, 1, 1}, w2[2] = {4, 3}, ys[4] = {2, 4, 2, 2};
    ex_tensor *x = ex_input(f.ctx, EX_F32, 4, xs, "x");
    ex_tensor *r = ex_input(f.ctx, EX_F32, 4, ys, "r");
    ex_tensor *w = ex_param(f.ctx, 4, ws, "w");
    ex_tensor *y = ex_pwconv(f.ctx, x, ex_reshape(f.ctx, w, 2, w2));
    ex_tensor *loss = ex_sum(f.ctx, ex_mul(f.ctx, y, r), 0xf);
    assert_int_equal(ex_graph_backward(f.ctx, loss), EX_OK);
    plan(&f, false);
    int fills = 0, adds = 0; /* one fill: the loss's seed of 1 */
    for (int64_t i = 0; i < ex_plan_node_count(f.plan); i++) {
        ex_node_info info;
        assert_int_equal(ex_plan_node_info(f.plan, i, &info), EX_OK);
        fills += info.op == EX_OP_FILL;
        adds += info.op == EX_OP_ADD;
    }
    assert_int_equal(fills, 1);
    assert_int_equal(adds, 0);
    float xv[NX], rv[32], wv[12], gw[12];
    for (int i = 0; i < NX; i++)
        xv[i] = value(i);
    for (int i = 0; i < 32; i++)
        rv[i] = value(i + 3);
    for (int i = 0; i < 12; i++)
        wv[i] = value(i + 7);
    put(&f, x, xv, NX);
    put(&f, r, rv, 32);
    put(&f, w, wv, 12);
    run(&f);
    get(&f, ex_grad(f.ctx, w), gw, 12);
    for (int co = 0; co < 4; co++)
        for (int ci = 0; ci < 3; ci++) {
            double want = 0.0; /* dL/dw[co, ci] = sum over n, p of r[n, co, p] x[n, ci, p] */
            for (int n = 0; n < 2; n++)
                for (int p = 0; p < 4; p++)
                    want += (double)rv[(n * 4 + co) * 4 + p] * xv[(n * 3 + ci) * 4 + p];
            assert_float_equal(gw[co * 3 + ci], want, 1e-5);
        }
    close_all(&f);
}

/* y = sum_j active_j w_j c_j(x), c = {relu(x), 2x, x*x}, each candidate built under its
 * gate; loss = sum(y * r). Checks values, gradients and which nodes ran. */
static void gated_candidates(void **state)
{
    (void)state;
    fixture f = {0};
    open_cpu(&f);
    int64_t xs[4] = {2, 3, 2, 2}, k = 3;
    ex_tensor *x = ex_requires_grad(f.ctx, ex_input(f.ctx, EX_F32, 4, xs, "x"));
    ex_tensor *r = ex_input(f.ctx, EX_F32, 4, xs, "r");
    ex_tensor *w = ex_param(f.ctx, 1, &k, "w");
    ex_tensor *mask = ex_input(f.ctx, EX_F32, 1, &k, "mask");
    ex_tensor *c[3];
    ex_ctx_set_gate(f.ctx, mask, 0);
    c[0] = ex_relu(f.ctx, x);
    ex_ctx_set_gate(f.ctx, mask, 1);
    c[1] = ex_scale(f.ctx, x, 2.0f);
    ex_ctx_set_gate(f.ctx, mask, 2);
    c[2] = ex_mul(f.ctx, x, x);
    ex_ctx_set_gate(f.ctx, NULL, 0);
    int idx[3] = {0, 1, 2};
    ex_tensor *y = ex_mixed_sum(f.ctx, w, mask, 3, c, idx);
    ex_tensor *loss = ex_sum(f.ctx, ex_mul(f.ctx, y, r), 0xf);
    assert_int_equal(ex_graph_backward(f.ctx, loss), EX_OK);
    ex_keep(f.ctx, y);
    plan(&f, true);

    float xv[NX], rv[NX], wv[3] = {0.5f, -1.5f, 0.25f}, yv[NX], gx[NX], gw[3];
    for (int i = 0; i < NX; i++) {
        xv[i] = value(i);
        rv[i] = value(i + 5);
    }
    put(&f, x, xv, NX);
    put(&f, r, rv, NX);
    put(&f, w, wv, 3);
    static const float masks[2][3] = {{1, 0, 1}, {0, 1, 0}};
    for (int m = 0; m < 2; m++) {
        put(&f, mask, masks[m], 3);
        run(&f);
        get(&f, y, yv, NX);
        get(&f, ex_grad(f.ctx, x), gx, NX);
        get(&f, ex_grad(f.ctx, w), gw, 3);
        double sw[3] = {0, 0, 0};
        for (int i = 0; i < NX; i++) {
            double a = masks[m][0], b = masks[m][1], cc = masks[m][2], xi = xv[i];
            double relu = xi > 0 ? xi : 0;
            double ey = a * wv[0] * relu + b * wv[1] * 2 * xi + cc * wv[2] * xi * xi;
            double eg = rv[i] * (a * wv[0] * (xi > 0) + b * wv[1] * 2 + cc * wv[2] * 2 * xi);
            assert_float_equal(yv[i], ey, 1e-5);
            assert_float_equal(gx[i], eg, 1e-5);
            sw[0] += a * rv[i] * relu;
            sw[1] += b * rv[i] * 2 * xi;
            sw[2] += cc * rv[i] * xi * xi;
        }
        for (int j = 0; j < 3; j++)
            assert_float_equal(gw[j], sw[j], 1e-4);
        /* the inactive candidates' nodes, forward and backward, did not run */
        int skipped = 0, scale_ran = 0;
        for (int64_t i = 0; i < ex_plan_node_count(f.plan); i++) {
            ex_node_info info;
            assert_int_equal(ex_plan_node_info(f.plan, i, &info), EX_OK);
            skipped += info.skipped;
            if (info.op == EX_OP_SCALE && !info.skipped)
                scale_ran++;
        }
        assert_true(skipped >= (m == 0 ? 2 : 4));
        if (m == 0)
            assert_int_equal(scale_ran, 0);
    }
    close_all(&f);
}

/* sum(t * r) added to *loss (one element, so the adds of the loss are not x-shaped). */
static void add_loss(ex_ctx *ctx, ex_tensor **loss, ex_tensor *t, ex_tensor *r)
{
    ex_tensor *l = ex_sum(ctx, ex_mul(ctx, t, r), 0xf);
    *loss = *loss ? ex_add(ctx, *loss, l) : l;
}

/* x's gradient from 150 ungated uses (more than twelve full mixed sums of terms), twelve
 * gated ones under the rows of one mask matrix (a DARTS cell's edges) and one under a gate
 * of its own: summed by mixed sums side by side, with no x-shaped add, and right whichever
 * candidates are active. */
static void many_contributions(void **state)
{
    (void)state;
    enum { UNGATED = 150, ROWS = 3, K = 4 };
    fixture f = {0};
    open_cpu(&f);
    int64_t xs[4] = {2, 3, 2, 2}, ms[2] = {ROWS, K}, k = K, one = 1;
    ex_tensor *x = ex_requires_grad(f.ctx, ex_input(f.ctx, EX_F32, 4, xs, "x"));
    ex_tensor *r = ex_input(f.ctx, EX_F32, 4, xs, "r");
    ex_tensor *mask = ex_input(f.ctx, EX_F32, 2, ms, "mask");
    ex_tensor *single = ex_input(f.ctx, EX_F32, 1, &one, "single");
    ex_tensor *loss = NULL;
    for (int u = 0; u < UNGATED; u++)
        add_loss(f.ctx, &loss, ex_scale(f.ctx, x, 0.01f * (float)(u + 1)), r);
    for (int e = 0; e < ROWS; e++) {
        ex_tensor *row = ex_reshape(f.ctx, ex_slice(f.ctx, mask, 0, e, 1), 1, &k), *y[K];
        int idx[K];
        for (int j = 0; j < K; j++) {
            ex_ctx_set_gate(f.ctx, row, j);
            y[j] = ex_scale(f.ctx, x, (float)(e * K + j + 1));
            idx[j] = j;
        }
        ex_ctx_set_gate(f.ctx, NULL, 0);
        add_loss(f.ctx, &loss, ex_mixed_sum(f.ctx, ex_fill(f.ctx, 1, &k, 1.0f), row, K, y, idx), r);
    }
    ex_ctx_set_gate(f.ctx, single, 0);
    ex_tensor *y1 = ex_scale(f.ctx, x, -7.0f);
    ex_ctx_set_gate(f.ctx, NULL, 0);
    int idx0 = 0;
    add_loss(f.ctx, &loss,
             ex_mixed_sum(f.ctx, ex_fill(f.ctx, 1, &one, 1.0f), single, 1, &y1, &idx0), r);
    assert_int_equal(ex_graph_backward(f.ctx, loss), EX_OK);
    plan(&f, false);
    for (int64_t i = 0; i < ex_plan_node_count(f.plan); i++) {
        ex_node_info info;
        assert_int_equal(ex_plan_node_info(f.plan, i, &info), EX_OK);
        if (info.op == EX_OP_ADD && info.bytes_written == NX * sizeof(float))
            fail_msg("node %lld adds x-shaped terms", (long long)i);
    }
    float xv[NX], rv[NX], gx[NX], mv[ROWS * K];
    for (int i = 0; i < NX; i++) {
        xv[i] = value(i);
        rv[i] = value(i + 5);
    }
    put(&f, x, xv, NX);
    put(&f, r, rv, NX);
    for (int m = 0; m < 2; m++) {
        double factor = 0;
        for (int u = 0; u < UNGATED; u++)
            factor += 0.01 * (u + 1);
        for (int i = 0; i < ROWS * K; i++) {
            mv[i] = (float)((i + m) % 3 != 0);
            factor += mv[i] * (i + 1);
        }
        float sv = (float)m;
        factor -= 7.0 * sv;
        put(&f, mask, mv, ROWS * K);
        put(&f, single, &sv, 1);
        run(&f);
        get(&f, ex_grad(f.ctx, x), gx, NX);
        for (int i = 0; i < NX; i++)
            assert_float_equal(gx[i], rv[i] * factor, 1e-3 * fabs(rv[i] * factor) + 1e-5);
    }
    close_all(&f);
}

/* Concatenation without a copy: two results written into channel slices of one buffer;
 * the gradient of each comes back from its slice. */
static void concat_into_views(void **state)
{
    (void)state;
    fixture f = {0};
    open_cpu(&f);
    int64_t hs[4] = {2, 3, 2, 2}, cs[4] = {2, 6, 2, 2};
    ex_tensor *a = ex_requires_grad(f.ctx, ex_input(f.ctx, EX_F32, 4, hs, "a"));
    ex_tensor *b = ex_requires_grad(f.ctx, ex_input(f.ctx, EX_F32, 4, hs, "b"));
    ex_tensor *r = ex_input(f.ctx, EX_F32, 4, cs, "r");
    ex_tensor *cat = ex_fill(f.ctx, 4, cs, 0.0f);
    ex_copy_into(f.ctx, ex_relu(f.ctx, a), ex_slice(f.ctx, cat, 1, 0, 3));
    ex_copy_into(f.ctx, ex_scale(f.ctx, b, 3.0f), ex_slice(f.ctx, cat, 1, 3, 3));
    ex_tensor *prod = ex_keep(f.ctx, ex_mul(f.ctx, cat, r));
    assert_int_equal(ex_graph_backward(f.ctx, ex_sum(f.ctx, prod, 0xf)), EX_OK);
    plan(&f, false);
    float av[NX], bv[NX], rv[2 * NX], pv[2 * NX], ga[NX], gb[NX];
    for (int i = 0; i < NX; i++) {
        av[i] = value(i);
        bv[i] = value(i + 3);
    }
    for (int i = 0; i < 2 * NX; i++)
        rv[i] = value(i + 7);
    put(&f, a, av, NX);
    put(&f, b, bv, NX);
    put(&f, r, rv, 2 * NX);
    run(&f);
    get(&f, prod, pv, 2 * NX);
    get(&f, ex_grad(f.ctx, a), ga, NX);
    get(&f, ex_grad(f.ctx, b), gb, NX);
    for (int n = 0; n < 2; n++)
        for (int c = 0; c < 3; c++)
            for (int p = 0; p < 4; p++) {
                int h = (n * 3 + c) * 4 + p, lo = (n * 6 + c) * 4 + p, hi = lo + 12;
                float relu = av[h] > 0 ? av[h] : 0;
                assert_float_equal(pv[lo], relu * rv[lo], 1e-6);
                assert_float_equal(pv[hi], 3 * bv[h] * rv[hi], 1e-5);
                assert_float_equal(ga[h], av[h] > 0 ? rv[lo] : 0, 1e-6);
                assert_float_equal(gb[h], 3 * rv[hi], 1e-5);
            }
    close_all(&f);
}

/* Profiling fills every node's time and cost figures. */
static void profile_figures(void **state)
{
    (void)state;
    fixture f = {0};
    open_cpu(&f);
    int64_t xs[4] = {4, 8, 16, 16}, ws[4] = {8, 8, 3, 3};
    ex_tensor *x = ex_input(f.ctx, EX_F32, 4, xs, "x");
    ex_tensor *w = ex_param(f.ctx, 4, ws, "w");
    ex_conv_params p = {{1, 1}, {1, 1}, {1, 1}};
    ex_tensor *y = ex_relu(f.ctx, ex_conv2d(f.ctx, x, w, &p));
    assert_int_equal(ex_graph_backward(f.ctx, ex_sum(f.ctx, y, 0xf)), EX_OK);
    plan(&f, true);
    static float xv[4 * 8 * 16 * 16], wv[8 * 8 * 9];
    for (size_t i = 0; i < sizeof xv / sizeof *xv; i++)
        xv[i] = value((int)i);
    for (size_t i = 0; i < sizeof wv / sizeof *wv; i++)
        wv[i] = value((int)i + 1) / 10;
    put(&f, x, xv, sizeof xv / sizeof *xv);
    put(&f, w, wv, sizeof wv / sizeof *wv);
    run(&f);
    double total = 0;
    bool saw_conv = false;
    for (int64_t i = 0; i < ex_plan_node_count(f.plan); i++) {
        ex_node_info info;
        assert_int_equal(ex_plan_node_info(f.plan, i, &info), EX_OK);
        assert_true(info.ms >= 0);
        total += info.ms;
        assert_true(info.min_bytes >= info.bytes_written);
        if (info.op == EX_OP_CONV2D) {
            saw_conv = true;
            assert_int_equal(info.flops, 2ull * 4 * 8 * 16 * 16 * 8 * 9);
            assert_int_equal(info.bytes_read, (4ull * 8 * 16 * 16 + 8 * 8 * 9) * 4);
        }
    }
    assert_true(saw_conv);
    assert_true(total > 0);
    ex_plan_stats st;
    assert_int_equal(ex_plan_get_stats(f.plan, &st), EX_OK);
    assert_int_equal(st.nodes, ex_plan_node_count(f.plan));
    assert_true(st.arena_bytes > 0 && st.persistent_bytes > 0);
    close_all(&f);
}

/* A training stage and an evaluation stage share one parameter; each runs alone. A
 * stage reading another stage's transient tensor is refused at planning. */
static void stages_share_parameters(void **state)
{
    (void)state;
    fixture f = {0};
    open_cpu(&f);
    int64_t one = 1, three = 3;
    ex_tensor *p = ex_param(f.ctx, 1, &three, "p");
    ex_tensor *mom = ex_state(f.ctx, EX_F32, 1, &three, "mom");
    ex_tensor *lr = ex_input(f.ctx, EX_F32, 1, &one, "lr");
    ex_tensor *x = ex_input(f.ctx, EX_F32, 1, &three, "x");
    ex_tensor *loss = ex_sum(f.ctx, ex_mul(f.ctx, p, x), 1u); /* d loss / d p = x */
    ex_tensor *g = NULL;
    assert_int_equal(ex_graph_gradients(f.ctx, loss, 1, &p, &g), EX_OK);
    assert_non_null(g);
    ex_sgd(f.ctx, p, g, mom, lr, 0.0f, 0.0f, false);
    assert_int_equal(ex_ctx_begin_stage(f.ctx), 1);
    ex_tensor *y = ex_keep(f.ctx, ex_scale(f.ctx, p, 2.0f));
    plan(&f, false);
    float pv[3] = {1, 2, 3}, xv[3] = {0.5f, -1, 2}, lv = 0.1f, mv[3] = {0}, yv[3];
    put(&f, p, pv, 3);
    put(&f, mom, mv, 3);
    put(&f, x, xv, 3);
    put(&f, lr, &lv, 1);
    assert_int_equal(ex_plan_run_stage(f.plan, 1), EX_OK);
    get(&f, y, yv, 3);
    for (int i = 0; i < 3; i++)
        assert_float_equal(yv[i], 2 * pv[i], 1e-6);
    assert_int_equal(ex_plan_run_stage(f.plan, 0), EX_OK);
    assert_int_equal(ex_plan_run_stage(f.plan, 1), EX_OK);
    get(&f, y, yv, 3);
    for (int i = 0; i < 3; i++)
        assert_float_equal(yv[i], 2 * (pv[i] - 0.1f * xv[i]), 1e-6);
    assert_int_not_equal(ex_plan_run_stage(f.plan, 2), EX_OK);
    close_all(&f);

    open_cpu(&f);
    ex_tensor *a = ex_input(f.ctx, EX_F32, 1, &three, "a");
    ex_tensor *t = ex_relu(f.ctx, a);
    ex_ctx_begin_stage(f.ctx);
    ex_keep(f.ctx, ex_scale(f.ctx, t, 2.0f));
    ex_plan_opts o;
    ex_plan_opts_default(&o);
    assert_int_equal(ex_graph_plan(f.ctx, f.be, &o, &f.plan), EX_ERR_ARG);
    assert_non_null(strstr(ex_ctx_error(f.ctx), "stage"));
    close_all(&f);
}

/* Two losses in one plan: gradients with respect to chosen tensors, per loss. */
static void gradients_per_loss(void **state)
{
    (void)state;
    fixture f = {0};
    open_cpu(&f);
    int64_t three = 3;
    ex_tensor *a = ex_param(f.ctx, 1, &three, "a");
    ex_tensor *b = ex_param(f.ctx, 1, &three, "b");
    ex_tensor *l1 = ex_sum(f.ctx, ex_mul(f.ctx, a, b), 1u);
    ex_tensor *l2 = ex_sum(f.ctx, ex_mul(f.ctx, a, a), 1u);
    ex_tensor *g1[2], *g2[2], *wrt[2] = {a, b};
    assert_int_equal(ex_graph_gradients(f.ctx, l1, 2, wrt, g1), EX_OK);
    assert_int_equal(ex_graph_gradients(f.ctx, l2, 2, wrt, g2), EX_OK);
    assert_non_null(g1[0]);
    assert_non_null(g1[1]);
    assert_non_null(g2[0]);
    assert_null(g2[1]); /* l2 does not depend on b */
    ex_keep(f.ctx, g1[0]);
    ex_keep(f.ctx, g1[1]);
    ex_keep(f.ctx, g2[0]);
    plan(&f, false);
    float av[3] = {1, -2, 3}, bv[3] = {4, 5, -6}, out[3];
    put(&f, a, av, 3);
    put(&f, b, bv, 3);
    run(&f);
    get(&f, g1[0], out, 3);
    for (int i = 0; i < 3; i++)
        assert_float_equal(out[i], bv[i], 1e-6);
    get(&f, g1[1], out, 3);
    for (int i = 0; i < 3; i++)
        assert_float_equal(out[i], av[i], 1e-6);
    get(&f, g2[0], out, 3);
    for (int i = 0; i < 3; i++)
        assert_float_equal(out[i], 2 * av[i], 1e-6);
    close_all(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(philox_known_answers),     cmocka_unit_test(gated_candidates),
        cmocka_unit_test(reshaped_weight_gradient), cmocka_unit_test(concat_into_views),
        cmocka_unit_test(profile_figures),          cmocka_unit_test(stages_share_parameters),
        cmocka_unit_test(gradients_per_loss),       cmocka_unit_test(many_contributions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
