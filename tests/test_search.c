/* The search end to end on small generated data: repeatability, resume, every mode. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "exapt/exapt.h"
#include "exapt/search.h"

#define B 8
#define HW 12
#define PIX (HW * HW)

/* Two classes: a bright top or bottom half, plus a little structured noise. */
static void batch(int step, int salt, float *x, int32_t *y)
{
    for (int i = 0; i < B; i++) {
        y[i] = (i + step + salt) % 2;
        for (int p = 0; p < PIX; p++)
            x[i * PIX + p] = (float)((p < PIX / 2) == (y[i] == 1)) +
                             0.1f * (float)((p * 7 + i * 3 + step * 5 + salt) % 5);
    }
}

static void small_config(ex_search_config *c, ex_search_mode mode, int order)
{
    ex_search_config_default(c);
    c->in_channels = 1;
    c->height = c->width = HW;
    c->classes = 2;
    c->batch = B;
    c->channels = 4;
    c->layers = 3;
    c->steps = 2;
    c->multiplier = 2;
    c->mode = mode;
    c->order = order;
    c->arch_lr = 3e-2f; /* alpha must move in a few steps */
}

static ex_backend *cpu(void)
{
    ex_backend *be = NULL;
    char msg[256];
    if (ex_backend_open("cpu", &be, msg, sizeof msg) != EX_OK)
        fail_msg("cpu backend: %s", msg);
    return be;
}

static ex_search *make(const ex_search_config *c, ex_backend *be)
{
    ex_search *s = NULL;
    char msg[512];
    if (ex_search_new(c, be, &s, msg, sizeof msg) != EX_OK)
        fail_msg("search: %s", msg);
    /* every phase of the setup took some time */
    ex_search_setup t = ex_search_setup_times(s);
    assert_true(t.build_ms > 0.0 && t.plan_ms > 0.0 && t.init_ms > 0.0);
    return s;
}

static void steps(ex_search *s, int from, int to, ex_search_stats *last)
{
    float xt[B * PIX], xv[B * PIX];
    int32_t yt[B], yv[B];
    for (int k = from; k < to; k++) {
        batch(k, 0, xt, yt);
        batch(k, 1, xv, yv);
        if (ex_search_step(s, xt, yt, xv, yv, 0.025f, 1.0f, last) != EX_OK)
            fail_msg("step %d: %s", k, ex_search_error(s));
        assert_true(isfinite(last->train_loss) && isfinite(last->valid_loss));
    }
}

enum { EDGES = 5, K = 8 }; /* 2 steps: 2 + 3 edges; DARTS's 8 candidates */

static void alphas(ex_search *s, float *a)
{
    assert_int_equal(ex_search_edges(s), EDGES);
    if (ex_search_alphas(s, a, a + EDGES * K) != EX_OK)
        fail_msg("alphas: %s", ex_search_error(s));
}

/* Same seed, same build, same thread count: bitwise the same alpha and genotype. */
static void repeatable(void **state)
{
    (void)state;
    ex_backend *be = cpu();
    ex_search_config c;
    small_config(&c, EX_SEARCH_DARTS, 1);
    float a[2][2 * EDGES * K];
    char text[2][EX_GENOTYPE_TEXT_MAX];
    for (int run = 0; run < 2; run++) {
        ex_search *s = make(&c, be);
        ex_search_stats st;
        steps(s, 0, 6, &st);
        alphas(s, a[run]);
        ex_genotype g;
        assert_int_equal(ex_search_genotype(s, &g), EX_OK);
        ex_genotype_format(&g, text[run], sizeof text[run]);
        ex_search_free(s);
    }
    assert_memory_equal(a[0], a[1], sizeof a[0]);
    assert_string_equal(text[0], text[1]);
    /* and alpha did move */
    float init[2 * EDGES * K];
    ex_search *s = make(&c, be);
    alphas(s, init);
    ex_search_free(s);
    assert_memory_not_equal(init, a[0], sizeof init);
    ex_backend_close(be);
}

/* A search saved after 3 steps and resumed in a new search object ends bitwise where an
 * uninterrupted one does. */
static void resume_is_bitwise(void **state)
{
    (void)state;
    ex_backend *be = cpu();
    const char *path = "test_search_resume.safetensors";
    for (int mode = EX_SEARCH_DARTS; mode <= EX_SEARCH_TOPK; mode++) {
        ex_search_config c;
        small_config(&c, (ex_search_mode)mode, 1);
        float whole[2 * EDGES * K], parts[2 * EDGES * K];
        ex_search_stats st;
        ex_search *s = make(&c, be);
        steps(s, 0, 6, &st);
        alphas(s, whole);
        ex_search_free(s);

        s = make(&c, be);
        steps(s, 0, 3, &st);
        if (ex_search_save(s, path, "{}") != EX_OK)
            fail_msg("save: %s", ex_search_error(s));
        ex_search_free(s);
        s = make(&c, be);
        if (ex_search_load(s, path) != EX_OK)
            fail_msg("load: %s", ex_search_error(s));
        steps(s, 3, 6, &st);
        alphas(s, parts);
        ex_search_free(s);
        if (memcmp(whole, parts, sizeof whole))
            fail_msg("%s: resumed alpha differs", ex_search_mode_name((ex_search_mode)mode));
    }
    remove(path);
    ex_backend_close(be);
}

/* Nodes that ran in the last step, counting only those of candidate operations. */
static int64_t candidate_nodes_run(ex_search *s)
{
    ex_plan *p = ex_search_plan(s);
    int64_t n = 0;
    for (int64_t i = 0; i < ex_plan_node_count(p); i++) {
        ex_node_info in;
        assert_int_equal(ex_plan_node_info(p, i, &in), EX_OK);
        n += in.tag[2] >= 0 && !in.skipped;
    }
    return n;
}

/* The runs every_mode and no_clip_nodes go through: each mode, and the second order. */
static const struct {
    ex_search_mode mode;
    int order;
} mode_runs[] = {
    {EX_SEARCH_DARTS, 1}, {EX_SEARCH_DARTS, 2}, {EX_SEARCH_GDAS, 1}, {EX_SEARCH_TOPK, 1}};

/* Every mode and the second order run; gdas and top-k compute fewer candidates than
 * darts, as the profiler counts them. */
static void every_mode(void **state)
{
    (void)state;
    ex_backend *be = cpu();
    int64_t ran[4];
    for (int r = 0; r < 4; r++) {
        ex_search_config c;
        small_config(&c, mode_runs[r].mode, mode_runs[r].order);
        c.topk_k = 2;
        ex_search *s = make(&c, be);
        ex_search_stats st;
        steps(s, 0, 2, &st);
        assert_int_equal(ex_plan_set_profile(ex_search_plan(s), true), EX_OK);
        steps(s, 2, 3, &st);
        ran[r] = candidate_nodes_run(s);
        float m[2 * EDGES * K];
        assert_int_equal(ex_search_masks(s, m, m + EDGES * K), EX_OK);
        for (int e = 0; e < 2 * EDGES; e++) {
            int active = 0;
            for (int k = 0; k < K; k++)
                active += m[e * K + k] != 0.0f;
            if (mode_runs[r].mode == EX_SEARCH_DARTS)
                assert_int_equal(active, K);
            else if (mode_runs[r].mode == EX_SEARCH_GDAS)
                assert_int_equal(active, 1);
            else
                assert_int_equal(active, 2);
        }
        ex_genotype g;
        assert_int_equal(ex_search_genotype(s, &g), EX_OK);
        float loss;
        int correct;
        float xv[B * PIX];
        int32_t yv[B];
        batch(0, 1, xv, yv);
        assert_int_equal(ex_search_eval(s, xv, yv, &loss, &correct), EX_OK);
        assert_true(isfinite(loss) && correct >= 0 && correct <= B);
        ex_search_free(s);
    }
    assert_true(ran[3] < ran[0]); /* top-2 of 8 */
    assert_true(ran[2] < ran[3]); /* one per edge */
    assert_true(ran[1] > ran[0]); /* the unrolled step runs the network more often */
    ex_backend_close(be);
}

/* Recomputing in the backward passes (level 1: the depthwise convolutions' outputs; level
 * 2: also the batch norms' outputs that are cheap to make again) changes memory and node
 * count, never a result: alpha and the losses are bitwise those of keeping everything, in
 * every mode (GDAS's and top-k's gated candidates), the second order and with partial
 * channels; each level plans
 * less memory in more nodes than the one below. */
static void recompute_is_bitwise(void **state)
{
    (void)state;
    ex_backend *be = cpu();
    for (int r = 0; r < 5; r++) { /* the modes, then PC-DARTS (its channel slices' copies) */
        int mr = r < 4 ? r : 0;
        float a[3][2 * EDGES * K];
        ex_search_stats st[3];
        ex_plan_stats ps[3];
        for (int level = 0; level < 3; level++) {
            ex_search_config c;
            small_config(&c, mode_runs[mr].mode, mode_runs[mr].order);
            c.partial_channels = r < 4 ? 1 : 2;
            c.recompute = level;
            ex_search *s = make(&c, be);
            assert_int_equal(ex_plan_get_stats(ex_search_plan(s), &ps[level]), EX_OK);
            steps(s, 0, 3, &st[level]);
            alphas(s, a[level]);
            ex_search_free(s);
        }
        const char *m = r < 4 ? ex_search_mode_name(mode_runs[mr].mode) : "pc-darts";
        for (int l = 1; l < 3; l++) {
            if (memcmp(a[0], a[l], sizeof a[0]) != 0 || st[0].train_loss != st[l].train_loss ||
                st[0].valid_loss != st[l].valid_loss)
                fail_msg("%s order %d: recomputing at level %d changed alpha or a loss", m,
                         mode_runs[mr].order, l);
            if (!(ps[l].arena_bytes < ps[l - 1].arena_bytes && ps[l].nodes > ps[l - 1].nodes))
                fail_msg("%s order %d: level %d planned %llu arena bytes in %lld nodes, level %d "
                         "%llu in %lld",
                         m, mode_runs[mr].order, l, (unsigned long long)ps[l].arena_bytes,
                         (long long)ps[l].nodes, l - 1, (unsigned long long)ps[l - 1].arena_bytes,
                         (long long)ps[l - 1].nodes);
        }
    }
    ex_backend_close(be);
}

/* The weight step folds the gradient clip into its SGD nodes: a first-order step has no
 * CLIP node at all (the second-order one keeps those of its alpha gradient's weight
 * perturbation, one per weight), and every SGD node is the clipped form, 6 FLOPs per
 * element instead of 5 (bytes written: parameter and momentum, 8 per element). */
static void no_clip_nodes(void **state)
{
    (void)state;
    ex_backend *be = cpu();
    for (int r = 0; r < 4; r++) {
        ex_search_config c;
        small_config(&c, mode_runs[r].mode, mode_runs[r].order);
        ex_search *s = make(&c, be);
        ex_plan *p = ex_search_plan(s);
        int64_t clips = 0, sgds = 0;
        for (int64_t i = 0; i < ex_plan_node_count(p); i++) {
            ex_node_info in;
            assert_int_equal(ex_plan_node_info(p, i, &in), EX_OK);
            clips += in.op == EX_OP_CLIP;
            if (in.op != EX_OP_SGD)
                continue;
            sgds++;
            if (in.flops * 8 != 6 * in.bytes_written)
                fail_msg("%s order %d: node %lld is an SGD without the clip (%llu FLOPs, %llu "
                         "bytes written)",
                         ex_search_mode_name(mode_runs[r].mode), mode_runs[r].order, (long long)i,
                         (unsigned long long)in.flops, (unsigned long long)in.bytes_written);
        }
        assert_true(sgds > 0);
        if (clips != (mode_runs[r].order == 2 ? sgds : 0))
            fail_msg("%s order %d: %lld CLIP nodes for %lld SGD nodes",
                     ex_search_mode_name(mode_runs[r].mode), mode_runs[r].order, (long long)clips,
                     (long long)sgds);
        ex_search_free(s);
    }
    ex_backend_close(be);
}

/* A search learns the generated task (architecture and weights together). */
static void learns(void **state)
{
    (void)state;
    ex_backend *be = cpu();
    ex_search_config c;
    small_config(&c, EX_SEARCH_DARTS, 1);
    ex_search *s = make(&c, be);
    ex_search_stats first, last;
    steps(s, 0, 1, &first);
    steps(s, 1, 25, &last);
    assert_true(last.train_loss < 0.5f * first.train_loss);
    assert_true(last.valid_acc >= 0.875f);
    ex_search_free(s);
    ex_backend_close(be);
}

/* PC-DARTS's partial channels: half of each edge's channels through the candidates; the
 * search still learns, repeats bitwise, and alpha moves. */
static void partial_channels(void **state)
{
    (void)state;
    ex_backend *be = cpu();
    ex_search_config c;
    small_config(&c, EX_SEARCH_DARTS, 1);
    c.partial_channels = 2;
    float a[2][2 * EDGES * K], init[2 * EDGES * K];
    ex_search_stats first, last[2];
    for (int run = 0; run < 2; run++) {
        ex_search *s = make(&c, be);
        if (!run)
            alphas(s, init);
        steps(s, 0, 1, &first);
        steps(s, 1, 25, &last[run]);
        alphas(s, a[run]);
        ex_search_free(s);
    }
    assert_memory_equal(a[0], a[1], sizeof a[0]);
    assert_memory_equal(&last[0].train_loss, &last[1].train_loss, sizeof(float));
    assert_memory_not_equal(init, a[0], sizeof init);
    assert_true(last[0].train_loss < 0.5f * first.train_loss);
    assert_true(last[0].valid_acc >= 0.875f);
    /* the candidates' weights are half as wide: a checkpoint of all channels is refused */
    char path[] = "/tmp/exapt-pc-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    ex_search *s = make(&c, be);
    assert_int_equal(ex_search_save(s, path, NULL), EX_OK);
    ex_search_free(s);
    c.partial_channels = 1;
    s = make(&c, be);
    assert_int_not_equal(ex_search_load(s, path), EX_OK);
    assert_non_null(strstr(ex_search_error(s), "shape"));
    ex_search_free(s);
    remove(path);
    ex_backend_close(be);
}

static void bad_config(void **state)
{
    (void)state;
    ex_backend *be = cpu();
    ex_search_config c;
    small_config(&c, EX_SEARCH_GDAS, 2); /* second order is darts only */
    ex_search *s = (ex_search *)&c;
    char msg[256] = "";
    assert_int_equal(ex_search_new(&c, be, &s, msg, sizeof msg), EX_ERR_ARG);
    assert_null(s);
    assert_non_null(strstr(msg, "order"));
    small_config(&c, EX_SEARCH_DARTS, 1);
    c.cand[1] = c.cand[2];
    assert_int_equal(ex_search_new(&c, be, &s, msg, sizeof msg), EX_ERR_ARG);
    assert_int_equal(ex_search_new(NULL, be, &s, msg, sizeof msg), EX_ERR_ARG);
    small_config(&c, EX_SEARCH_DARTS, 1);
    c.partial_channels = 3; /* does not divide 4 channels */
    assert_int_equal(ex_search_new(&c, be, &s, msg, sizeof msg), EX_ERR_ARG);
    assert_non_null(strstr(msg, "partial_channels"));
    c.partial_channels = 0;
    assert_int_equal(ex_search_new(&c, be, &s, msg, sizeof msg), EX_ERR_ARG);
    ex_backend_close(be);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(repeatable),           cmocka_unit_test(resume_is_bitwise),
        cmocka_unit_test(every_mode),           cmocka_unit_test(no_clip_nodes),
        cmocka_unit_test(recompute_is_bitwise), cmocka_unit_test(learns),
        cmocka_unit_test(partial_channels),     cmocka_unit_test(bad_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
