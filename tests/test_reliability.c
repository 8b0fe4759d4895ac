/* Reliability of the search (docs/reliability.md): non-finite steps are undone and
 * counted, and every allocation failure during a search's creation and first step gives
 * an error (the sanitizer build checks that nothing leaks). Runs on the backend given as
 * `--backend NAME` (cpu by default), so a new backend is one more ctest line. */
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
#include "exapt/metrics.h"
#include "exapt/search.h"
#include "nas/faults.h"

#define B 4
#define HW 8
#define PIX (HW * HW)

static const char *backend_name = "cpu";

static void batch(int step, int salt, float *x, int32_t *y)
{
    for (int i = 0; i < B; i++) {
        y[i] = (i + step + salt) % 2;
        for (int p = 0; p < PIX; p++)
            x[i * PIX + p] = (float)((p < PIX / 2) == (y[i] == 1)) +
                             0.1f * (float)((p * 7 + i * 3 + step * 5 + salt) % 5);
    }
}

/* One cell, one node, three candidates: every kind of op, small enough to sweep. */
static void tiny_config(ex_search_config *c)
{
    ex_search_config_default(c);
    c->in_channels = 1;
    c->height = c->width = HW;
    c->classes = 2;
    c->batch = B;
    c->channels = 2;
    c->layers = 1;
    c->steps = c->multiplier = 1;
    c->ncand = 3;
    c->cand[0] = EX_CAND_SKIP_CONNECT;
    c->cand[1] = EX_CAND_MAX_POOL_3X3;
    c->cand[2] = EX_CAND_SEP_CONV_3X3;
    c->arch_lr = 3e-2f;
}

static ex_backend *open_backend(void)
{
    ex_backend *be = NULL;
    char msg[256];
    if (ex_backend_open(backend_name, &be, msg, sizeof msg) != EX_OK)
        fail_msg("backend %s: %s", backend_name, msg);
    return be;
}

/* The whole state as bytes: a checkpoint holds every weight, alpha, optimizer state and
 * running statistic, and the step count. */
typedef struct blob {
    char *data;
    long size;
} blob;

static blob state_of(ex_search *s)
{
    char path[] = "/tmp/exapt-rel-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    if (ex_search_save(s, path, NULL) != EX_OK)
        fail_msg("save: %s", ex_search_error(s));
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    blob b = {NULL, ftell(f)};
    fseek(f, 0, SEEK_SET);
    b.data = malloc((size_t)b.size);
    assert_non_null(b.data);
    assert_int_equal(fread(b.data, 1, (size_t)b.size, f), (size_t)b.size);
    fclose(f);
    unlink(path);
    return b;
}

static bool same_state(blob a, blob b)
{
    return a.size == b.size && memcmp(a.data, b.data, (size_t)a.size) == 0;
}

typedef enum poison { CLEAN, NAN_TRAIN, INF_VALID } poison;

static ex_status step(ex_search *s, int k, poison what, float lr, ex_search_stats *st)
{
    float xt[B * PIX], xv[B * PIX];
    int32_t yt[B], yv[B];
    batch(k, 0, xt, yt);
    batch(k, 1, xv, yv);
    if (what == NAN_TRAIN)
        xt[5] = NAN;
    if (what == INF_VALID)
        xv[PIX + 3] = INFINITY;
    return ex_search_step(s, xt, yt, xv, yv, lr, 1.0f, st);
}

/* NaN in the training batch or infinity in the validation batch: the step reports it,
 * the state is bitwise that before it, and a clean step afterwards moves on. */
static void nonfinite_step_is_undone(void **state)
{
    (void)state;
    ex_backend *be = open_backend();
    ex_search_config c;
    tiny_config(&c);
    ex_search *s = NULL;
    char msg[512];
    assert_int_equal(ex_search_new(&c, be, &s, msg, sizeof msg), EX_OK);
    ex_search_stats st;
    for (int k = 0; k < 2; k++) {
        assert_int_equal(step(s, k, CLEAN, 0.05f, &st), EX_OK);
        assert_false(st.skipped);
    }
    blob good = state_of(s);
    assert_int_equal(step(s, 2, NAN_TRAIN, 0.05f, &st), EX_OK);
    assert_true(st.skipped);
    assert_int_equal(st.nonfinite_run, 1);
    assert_false(isfinite(st.train_loss));
    blob after = state_of(s);
    assert_true(same_state(good, after));
    free(after.data);
    assert_int_equal(step(s, 3, INF_VALID, 0.05f, &st), EX_OK);
    assert_true(st.skipped);
    assert_int_equal(st.nonfinite_run, 2);
    after = state_of(s);
    assert_true(same_state(good, after));
    free(after.data);
    assert_int_equal(step(s, 4, CLEAN, 0.05f, &st), EX_OK);
    assert_false(st.skipped);
    assert_int_equal(st.nonfinite_run, 0);
    after = state_of(s);
    assert_false(same_state(good, after));
    free(after.data);
    free(good.data);
    ex_search_free(s);
    ex_backend_close(be);
}

/* More non-finite steps in a row than config.nonfinite_limit: EX_ERR_NONFINITE with a
 * message, and the state is still the last good one. */
static void nonfinite_run_stops(void **state)
{
    (void)state;
    ex_backend *be = open_backend();
    ex_search_config c;
    tiny_config(&c);
    c.nonfinite_limit = 2;
    ex_search *s = NULL;
    char msg[512];
    assert_int_equal(ex_search_new(&c, be, &s, msg, sizeof msg), EX_OK);
    ex_search_stats st;
    assert_int_equal(step(s, 0, CLEAN, 0.05f, &st), EX_OK);
    blob good = state_of(s);
    assert_int_equal(step(s, 1, NAN_TRAIN, 0.05f, &st), EX_OK);
    assert_int_equal(step(s, 2, NAN_TRAIN, 0.05f, &st), EX_OK);
    assert_int_equal(step(s, 3, NAN_TRAIN, 0.05f, &st), EX_ERR_NONFINITE);
    assert_true(st.skipped);
    assert_int_equal(st.nonfinite_run, 3);
    assert_non_null(strstr(ex_search_error(s), "non-finite"));
    blob after = state_of(s);
    assert_true(same_state(good, after));
    free(after.data);
    free(good.data);
    /* a non-finite learning rate is a bad argument, refused before anything runs */
    assert_int_equal(step(s, 4, CLEAN, NAN, &st), EX_ERR_ARG);
    assert_non_null(strstr(ex_search_error(s), "not finite"));
    ex_search_free(s);
    ex_backend_close(be);
}

/* A learning rate so large that the weights overflow: the search skips the steps that
 * follow and stops with EX_ERR_NONFINITE instead of training on infinities. */
static void huge_learning_rate_stops(void **state)
{
    (void)state;
    ex_backend *be = open_backend();
    ex_search_config c;
    tiny_config(&c);
    ex_search *s = NULL;
    char msg[512];
    assert_int_equal(ex_search_new(&c, be, &s, msg, sizeof msg), EX_OK);
    ex_search_stats st;
    ex_status r = EX_OK;
    int k = 0, skipped = 0;
    for (; k < 20 && r == EX_OK; k++) {
        r = step(s, k, CLEAN, 1e38f, &st);
        skipped += st.skipped;
    }
    assert_int_equal(r, EX_ERR_NONFINITE);
    assert_int_equal(skipped, c.nonfinite_limit + 1);
    ex_search_free(s);
    ex_backend_close(be);
}

/* Creation and one step, with the n-th allocation failing: an error (never a crash, never
 * a success that swallowed the failure). */
static void alloc_fault_sweep(void **state)
{
    (void)state;
    ex_backend *be = open_backend();
    ex_search_config c;
    tiny_config(&c);
    ex_search *s = NULL;
    char msg[512];
    ex_search_stats st;
    assert_int_equal(ex_search_new(&c, be, &s, msg, sizeof msg), EX_OK);
    assert_int_equal(step(s, 0, CLEAN, 0.05f, &st), EX_OK);
    uint64_t total = ex_search_alloc_count(s);
    ex_search_free(s);
    assert_true(total > 100);
    uint64_t in_new = 0, in_step = 0;
    for (uint64_t n = 1; n <= total; n++) {
        s = NULL;
        msg[0] = '\0';
        ex_status r = ex__search_new_faulty(&c, be, n, &s, msg, sizeof msg);
        if (r != EX_OK) {
            assert_null(s);
            if (msg[0] == '\0')
                fail_msg("allocation %llu: creation failed without a message",
                         (unsigned long long)n);
            in_new++;
            continue;
        }
        r = step(s, 0, CLEAN, 0.05f, &st);
        if (r == EX_OK)
            fail_msg("allocation %llu of %llu failed, yet creation and the step succeeded",
                     (unsigned long long)n, (unsigned long long)total);
        assert_true(ex_search_error(s)[0] != '\0');
        in_step++;
        ex_search_free(s);
    }
    fprintf(stderr, "alloc sweep: %llu allocations, %llu failures in creation, %llu in the step\n",
            (unsigned long long)total, (unsigned long long)in_new, (unsigned long long)in_step);
    assert_int_equal(in_new + in_step, total);
    ex_backend_close(be);
}

/* The metrics log's "skipped" field: written only when true, read back, absent means
 * false (older logs), anything but a boolean is malformed. */
static void skipped_step_in_metrics(void **state)
{
    (void)state;
    char path[] = "/tmp/exapt-rel-metrics-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    char m[256];
    ex_metrics_writer *w = NULL;
    assert_int_equal(ex_metrics_open(path, EX_METRICS_NEW, &w, m, sizeof m), EX_OK);
    ex_metrics_header *h = calloc(1, sizeof *h);
    assert_non_null(h);
    snprintf(h->mode, sizeof h->mode, "darts");
    if (ex_metrics_write_header(w, h, m, sizeof m) != EX_OK)
        fail_msg("header: %s", m);
    free(h);
    ex_metrics_step *st = calloc(1, sizeof *st);
    assert_non_null(st);
    st->train_loss = NAN;
    st->skipped = true;
    assert_int_equal(ex_metrics_write_step(w, st, m, sizeof m), EX_OK);
    st->global_step = 1;
    st->train_loss = 1.0;
    st->skipped = false;
    assert_int_equal(ex_metrics_write_step(w, st, m, sizeof m), EX_OK);
    assert_int_equal(ex_metrics_close(w, m, sizeof m), EX_OK);
    free(st);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[4096];
    ex_metrics_record *rec = calloc(1, sizeof *rec);
    assert_non_null(rec);
    bool want[2] = {true, false};
    assert_non_null(fgets(line, sizeof line, f)); /* the header */
    for (int i = 0; i < 2; i++) {
        assert_non_null(fgets(line, sizeof line, f));
        assert_int_equal((strstr(line, "\"skipped\":true") != NULL), want[i]);
        assert_int_equal(ex_metrics_parse_line(line, strcspn(line, "\n"), rec, m, sizeof m), EX_OK);
        assert_int_equal(rec->kind, EX_METRICS_STEP);
        assert_int_equal(rec->step.skipped, want[i]);
    }
    fclose(f);
    unlink(path);
    const char *bad = "{\"type\":\"step\",\"epoch\":0,\"step\":0,\"global_step\":0,\"lr\":0.1,"
                      "\"train_loss\":null,\"train_acc\":0,\"images_per_s\":1,\"step_ms\":1,"
                      "\"skipped\":1}";
    assert_int_equal(ex_metrics_parse_line(bad, strlen(bad), rec, m, sizeof m), EX_ERR_FORMAT);
    assert_non_null(strstr(m, "skipped"));
    free(rec);
}

/* A plan bigger than the device's memory is refused when planned, before any allocation
 * or run, with the planned and the available bytes in the message. */
static void plan_larger_than_memory_is_refused(void **state)
{
    (void)state;
    ex_backend *be = open_backend();
    const ex_backend_caps *caps = ex_backend_get_caps(be);
    assert_true(caps->memory_bytes > 0);
    ex_ctx *ctx = ex_ctx_new();
    /* tensors that each fit a buffer binding and the memory, together more than the
     * memory: 3/4 of it each where bindings allow (two do), else half-binding ones */
    uint64_t each = caps->memory_bytes / 4 * 3;
    if (caps->max_binding_bytes && each > caps->max_binding_bytes / 2)
        each = caps->max_binding_bytes / 2; /* half: room for a chunk's alignment */
    int64_t n = (int64_t)(each / sizeof(float)), count = (int64_t)(caps->memory_bytes / each) + 1;
    for (int64_t i = 0; i < count; i++) {
        ex_tensor *x = ex_input(ctx, EX_F32, 1, &n, "x");
        ex_keep(ctx, ex_relu(ctx, x));
    }
    ex_plan *p = NULL;
    ex_plan_opts o; /* the backend's own chunk limit */
    ex_plan_opts_default(&o);
    assert_int_equal(ex_graph_plan(ctx, be, &o, &p), EX_ERR_NOMEM);
    assert_null(p);
    char avail[32];
    snprintf(avail, sizeof avail, "%llu", (unsigned long long)caps->memory_bytes);
    const char *m = ex_ctx_error(ctx);
    assert_non_null(strstr(m, "needs"));
    assert_non_null(strstr(m, avail));
    ex_ctx_free(ctx);
    ex_backend_close(be);
}

/* A label outside [0, K), which the GPU backends find on the device: ex_plan_run returns
 * it; after ex_plan_submit_stage the next read or sync does, once, with the CPU's
 * message; a run with good labels afterwards succeeds. */
static void device_failure_surfaces(void **state)
{
    (void)state;
    ex_backend *be = open_backend();
    ex_ctx *c = ex_ctx_new();
    int64_t ne[2] = {3, 5}, three = 3;
    ex_tensor *x = ex_input(c, EX_F32, 2, ne, "x"), *y = ex_input(c, EX_I32, 1, &three, "y");
    ex_tensor *loss = ex_keep(c, ex_cross_entropy(c, x, y));
    ex_plan *p = NULL;
    assert_int_equal(ex_graph_plan(c, be, NULL, &p), EX_OK);
    float xv[15] = {0}, l = 0;
    int32_t bad[3] = {1, 7, 0}, good[3] = {1, 4, 0};
    assert_int_equal(ex_plan_write(p, x, xv, sizeof xv), EX_OK);
    assert_int_equal(ex_plan_write(p, y, bad, sizeof bad), EX_OK);
    assert_int_equal(ex_plan_run(p), EX_ERR_ARG);
    assert_non_null(strstr(ex_plan_error(p), "label 7 of row 1"));
    /* queued: the read reports it (the CPU backend already at the submit) */
    ex_status st = ex_plan_submit_stage(p, 0);
    if (st == EX_OK)
        st = ex_plan_read(p, loss, &l, sizeof l);
    assert_int_equal(st, EX_ERR_ARG);
    assert_non_null(strstr(ex_plan_error(p), "label 7 of row 1"));
    assert_int_equal(ex_plan_sync(p), EX_OK); /* reported once */
    st = ex_plan_submit_stage(p, 0);
    if (st == EX_OK)
        st = ex_plan_sync(p);
    assert_int_equal(st, EX_ERR_ARG);
    assert_int_equal(ex_plan_write(p, y, good, sizeof good), EX_OK);
    assert_int_equal(ex_plan_submit_stage(p, 0), EX_OK);
    assert_int_equal(ex_plan_read(p, loss, &l, sizeof l), EX_OK);
    assert_float_equal(l, 1.6094379f, 1e-5); /* log 5 */
    ex_plan_free(p);
    ex_ctx_free(c);
    ex_backend_close(be);
}

int main(int argc, char **argv)
{
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--backend"))
            backend_name = argv[i + 1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(nonfinite_step_is_undone),
        cmocka_unit_test(nonfinite_run_stops),
        cmocka_unit_test(huge_learning_rate_stops),
        cmocka_unit_test(alloc_fault_sweep),
        cmocka_unit_test(plan_larger_than_memory_is_refused),
        cmocka_unit_test(skipped_step_in_metrics),
        cmocka_unit_test(device_failure_surfaces),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
