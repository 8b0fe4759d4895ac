/* The viewer's API misuse: every ex_viz_* function called with NULL and out-of-range
 * arguments returns its documented failure value (EX_ERR_ARG with a message, or 0, false,
 * "" and nothing done) and never crashes. Runs with no display: SDL's dummy video driver,
 * and software renderers on surfaces; the window functions given bad arguments must fail
 * before SDL video starts. tests/api_coverage.sh reads this file with test_misuse.c. */
#define _POSIX_C_SOURCE 200809L

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exapt/viz.h"

static char msg[512];

/* A status call that takes msg: the status, and a message. */
#define FAILS_MSG(call, want)                                                                      \
    do {                                                                                           \
        msg[0] = '\0';                                                                             \
        assert_int_equal((call), (want));                                                          \
        if (msg[0] == '\0')                                                                        \
            fail_msg("%s: no message", #call);                                                     \
    } while (0)

static ex_viz_model *new_model(void)
{
    ex_viz_model *m = NULL;
    assert_int_equal(ex_viz_model_new(&m, msg, sizeof msg), EX_OK);
    return m;
}

/* One step record with a 2 x 3 α, so the geometry queries have something to answer. */
static void add_step(ex_viz_model *m)
{
    static ex_metrics_record rec; /* large: kept off the stack */
    memset(&rec, 0, sizeof rec);
    rec.kind = EX_METRICS_STEP;
    rec.step.train_loss = 1.5;
    rec.step.step_ms = 3;
    rec.step.has_alphas = true;
    rec.step.n_edges = 2;
    rec.step.n_cands = 3;
    ex_viz_model_add(m, &rec);
}

static void models(void **state)
{
    (void)state;
    FAILS_MSG(ex_viz_model_new(NULL, msg, sizeof msg), EX_ERR_ARG);
    assert_int_equal(ex_viz_model_new(NULL, NULL, 0), EX_ERR_ARG);
    ex_viz_model_free(NULL);
    ex_viz_model_reset(NULL);
    ex_viz_model_add(NULL, NULL);
    ex_viz_model_note(NULL, "x");
    ex_viz_model_set_finished(NULL, true);
    ex_viz_model_set_paused(NULL, true);
    assert_int_equal(ex_viz_model_steps(NULL), 0);
    assert_int_equal(ex_viz_model_snapshots(NULL), 0);
    assert_int_equal(ex_viz_model_notes(NULL), 0);
    assert_int_equal(ex_viz_model_version(NULL), 0);
    assert_false(ex_viz_model_finished(NULL));
    assert_false(ex_viz_model_paused(NULL));
    assert_false(ex_viz_model_wait_paused(NULL, 10));
    char buf[32] = "x";
    ex_viz_model_note_text(NULL, 0, buf, sizeof buf);
    assert_string_equal(buf, "");

    ex_viz_model *m = new_model();
    ex_viz_model_add(m, NULL);
    ex_viz_model_note(m, NULL);
    assert_int_equal(ex_viz_model_notes(m), 0);
    ex_viz_model_note(m, "a note");
    strcpy(buf, "x");
    ex_viz_model_note_text(m, -1, buf, sizeof buf);
    assert_string_equal(buf, "");
    ex_viz_model_note_text(m, 1, buf, sizeof buf);
    assert_string_equal(buf, "");
    ex_viz_model_note_text(m, 0, NULL, 8);
    ex_viz_model_note_text(m, 0, buf, 0);
    assert_string_equal(buf, "");

    /* records claiming more than their arrays hold are dropped with a note, not read */
    static ex_metrics_record rec;
    memset(&rec, 0, sizeof rec);
    rec.kind = EX_METRICS_STEP;
    rec.step.has_alphas = true;
    rec.step.n_edges = EX_METRICS_MAX_EDGES + 1000;
    rec.step.n_cands = EX_METRICS_MAX_CANDS;
    ex_viz_model_add(m, &rec);
    rec.step.n_edges = 2;
    rec.step.n_cands = -3;
    ex_viz_model_add(m, &rec);
    memset(&rec, 0, sizeof rec);
    rec.kind = EX_METRICS_HEADER;
    rec.header.n_candidates = EX_METRICS_MAX_CANDS + 1;
    ex_viz_model_add(m, &rec);
    memset(&rec, 0, sizeof rec);
    rec.kind = EX_METRICS_PROFILE;
    rec.profile.n_ops = -1;
    ex_viz_model_add(m, &rec);
    assert_int_equal(ex_viz_model_steps(m), 0);
    assert_int_equal(ex_viz_model_snapshots(m), 0);
    assert_int_equal(ex_viz_model_notes(m), 2);

    /* a negative timeout does not wait */
    ex_viz_model_set_paused(m, true);
    assert_true(ex_viz_model_wait_paused(m, -5));
    assert_true(ex_viz_model_wait_paused(m, INT32_MIN));
    ex_viz_model_set_paused(m, false);
    ex_viz_model_reset(m);
    ex_viz_model_free(m);
}

static void follows(void **state)
{
    (void)state;
    ex_viz_model *m = new_model();
    ex_viz_follow *f = (ex_viz_follow *)&f; /* not NULL: must be cleared */
    FAILS_MSG(ex_viz_follow_new(NULL, m, &f, msg, sizeof msg), EX_ERR_ARG);
    assert_null(f);
    FAILS_MSG(ex_viz_follow_new("", m, &f, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_viz_follow_new("log.jsonl", NULL, &f, msg, sizeof msg), EX_ERR_ARG);
    assert_null(f);
    FAILS_MSG(ex_viz_follow_new("log.jsonl", m, NULL, msg, sizeof msg), EX_ERR_ARG);
    assert_int_equal(ex_viz_follow_new("log.jsonl", m, NULL, NULL, 0), EX_ERR_ARG);
    ex_viz_follow_free(NULL);

    int64_t added = 7;
    FAILS_MSG(ex_viz_follow_poll(NULL, &added, msg, sizeof msg), EX_ERR_ARG);
    assert_int_equal(ex_viz_follow_new("/nonexistent/log.jsonl", m, &f, msg, sizeof msg), EX_OK);
    FAILS_MSG(ex_viz_follow_poll(f, NULL, msg, sizeof msg), EX_ERR_ARG);
    assert_int_equal(ex_viz_follow_poll(f, NULL, NULL, 0), EX_ERR_ARG);
    /* a file that does not exist yet is not an error */
    assert_int_equal(ex_viz_follow_poll(f, &added, msg, sizeof msg), EX_OK);
    assert_int_equal(added, 0);
    ex_viz_follow_free(f);
    ex_viz_model_free(m);
}

static void colours_and_layout(void **state)
{
    (void)state;
    ex_viz_layout_compute(100, 100, NULL);
    ex_viz_layout l;
    ex_viz_layout_compute(-50, INT32_MIN, &l);
    for (int i = 0; i < EX_VIZ_PANEL_COUNT; i++) {
        assert_true(l.panel[i].x >= 0 && l.panel[i].x <= 6);
        assert_true(l.panel[i].w <= 0);
    }
    SDL_Color lo = ex_viz_colormap(0), hi = ex_viz_colormap(1);
    SDL_Color c = ex_viz_colormap(NAN);
    assert_memory_equal(&c, &lo, sizeof c);
    c = ex_viz_colormap(-INFINITY);
    assert_memory_equal(&c, &lo, sizeof c);
    c = ex_viz_colormap(INFINITY);
    assert_memory_equal(&c, &hi, sizeof c);
    c = ex_viz_colormap(1e30f);
    assert_memory_equal(&c, &hi, sizeof c);
    /* constants: take no arguments, so only their values can be checked */
    SDL_Color fill = ex_viz_pruned_fill(), mark = ex_viz_pruned_mark();
    assert_memory_not_equal(&fill, &mark, sizeof fill);
    SDL_Color bad = ex_viz_series_color((ex_viz_series)EX_VIZ_SERIES_COUNT);
    SDL_Color neg = ex_viz_series_color((ex_viz_series)-1);
    assert_memory_equal(&bad, &neg, sizeof bad);
    assert_int_equal(bad.a, 255);
    ex_viz_view v = ex_viz_view_default();
    assert_int_equal(v.cursor, -1);
    assert_int_equal(v.mouse_x, -1);
}

static void geometry(void **state)
{
    (void)state;
    ex_viz_model *m = new_model();
    add_step(m);
    assert_int_equal(ex_viz_model_snapshots(m), 1);
    ex_viz_layout l;
    ex_viz_layout_compute(1400, 860, &l);
    SDL_Rect r;
    assert_true(ex_viz_heatmap_rect(m, &l, EX_VIZ_NORMAL, 1, 2, &r));
    assert_false(ex_viz_heatmap_rect(NULL, &l, EX_VIZ_NORMAL, 0, 0, &r));
    assert_false(ex_viz_heatmap_rect(m, NULL, EX_VIZ_NORMAL, 0, 0, &r));
    assert_false(ex_viz_heatmap_rect(m, &l, EX_VIZ_NORMAL, 0, 0, NULL));
    assert_false(ex_viz_heatmap_rect(m, &l, (ex_viz_cell)2, 0, 0, &r));
    assert_false(ex_viz_heatmap_rect(m, &l, (ex_viz_cell)-1, 0, 0, &r));
    assert_false(ex_viz_heatmap_rect(m, &l, EX_VIZ_REDUCE, 2, 0, &r));
    assert_false(ex_viz_heatmap_rect(m, &l, EX_VIZ_REDUCE, 0, 3, &r));
    assert_false(ex_viz_heatmap_rect(m, &l, EX_VIZ_REDUCE, -1, 0, &r));
    assert_false(ex_viz_heatmap_rect(m, &l, EX_VIZ_REDUCE, 0, INT32_MIN, &r));

    int x, y;
    assert_true(ex_viz_curve_point(m, &l, EX_VIZ_TRAIN_LOSS, 0, &x, &y));
    assert_false(ex_viz_curve_point(NULL, &l, EX_VIZ_TRAIN_LOSS, 0, &x, &y));
    assert_false(ex_viz_curve_point(m, NULL, EX_VIZ_TRAIN_LOSS, 0, &x, &y));
    assert_false(ex_viz_curve_point(m, &l, EX_VIZ_TRAIN_LOSS, 0, NULL, &y));
    assert_false(ex_viz_curve_point(m, &l, EX_VIZ_TRAIN_LOSS, 0, &x, NULL));
    assert_false(ex_viz_curve_point(m, &l, (ex_viz_series)EX_VIZ_SERIES_COUNT, 0, &x, &y));
    assert_false(ex_viz_curve_point(m, &l, (ex_viz_series)-1, 0, &x, &y));
    assert_false(ex_viz_curve_point(m, &l, EX_VIZ_TRAIN_LOSS, 1, &x, &y));
    assert_false(ex_viz_curve_point(m, &l, EX_VIZ_TRAIN_LOSS, -1, &x, &y));
    assert_false(ex_viz_curve_point(m, &l, EX_VIZ_VALID_LOSS, 0, &x, &y)); /* NaN: no valid */
    ex_viz_model_free(m);
}

static void renderers(void **state)
{
    (void)state;
    ex_viz_renderer *r = (ex_viz_renderer *)&r;
    FAILS_MSG(ex_viz_renderer_new(NULL, NULL, &r, msg, sizeof msg), EX_ERR_ARG);
    assert_null(r);
    SDL_Surface *s = SDL_CreateRGBSurfaceWithFormat(0, 64, 48, 32, SDL_PIXELFORMAT_RGB888);
    assert_non_null(s);
    SDL_Renderer *sr = SDL_CreateSoftwareRenderer(s);
    assert_non_null(sr);
    FAILS_MSG(ex_viz_renderer_new(sr, NULL, NULL, msg, sizeof msg), EX_ERR_ARG);
    assert_int_equal(ex_viz_renderer_new(sr, NULL, NULL, NULL, 0), EX_ERR_ARG);
    ex_viz_renderer_free(NULL);

    char why[128] = "";
    assert_string_equal(ex_viz_renderer_font(NULL, why, sizeof why), "");
    assert_true(why[0] != '\0');
    assert_string_equal(ex_viz_renderer_font(NULL, NULL, 0), "");

    /* a font file that does not exist: drawn without text, with the reason */
    assert_int_equal(ex_viz_renderer_new(sr, "/nonexistent/font.ttf", &r, msg, sizeof msg), EX_OK);
    assert_string_equal(ex_viz_renderer_font(r, why, sizeof why), "");
    assert_true(why[0] != '\0');
    assert_string_equal(ex_viz_renderer_font(r, NULL, 0), "");

    ex_viz_model *m = new_model();
    add_step(m);
    ex_viz_view v = ex_viz_view_default();
    ex_viz_draw(NULL, m, &v, 64, 48);
    ex_viz_draw(r, NULL, &v, 64, 48);
    ex_viz_draw(r, m, NULL, 64, 48);
    ex_viz_draw(r, m, &v, 0, 48);
    ex_viz_draw(r, m, &v, -64, -48);
    /* a view with nothing sensible in it: out-of-range cell and cursor, no state word */
    v.cell = (ex_viz_cell)99;
    v.cursor = INT64_MAX;
    v.mouse_x = INT32_MAX;
    v.mouse_y = INT32_MIN;
    v.state = NULL;
    ex_viz_draw(r, m, &v, 64, 48);
    v.cursor = INT64_MIN;
    ex_viz_draw(r, m, &v, 64, 48);
    ex_viz_renderer_free(r);
    SDL_DestroyRenderer(sr);
    SDL_FreeSurface(s);
    ex_viz_model_free(m);
}

static void snapshots(void **state)
{
    (void)state;
    ex_viz_model *m = new_model();
    ex_viz_view v = ex_viz_view_default();
    char png[64];
    snprintf(png, sizeof png, "viz_misuse_%ld.png", (long)getpid());
    FAILS_MSG(ex_viz_snapshot(NULL, &v, 64, 48, png, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_viz_snapshot(m, &v, 64, 48, NULL, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_viz_snapshot(m, &v, 64, 48, "", msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_viz_snapshot(m, &v, 0, 48, png, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_viz_snapshot(m, &v, 64, -1, png, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_viz_snapshot(m, &v, INT32_MAX, INT32_MAX, png, msg, sizeof msg), EX_ERR_ARG);
    assert_int_equal(ex_viz_snapshot(NULL, NULL, 0, 0, NULL, NULL, 0), EX_ERR_ARG);
    assert_int_equal(access(png, F_OK), -1); /* nothing written */
    /* an unwritable path is an I/O error, NULL v the default view */
    FAILS_MSG(ex_viz_snapshot(m, NULL, 64, 48, "/nonexistent/dir/x.png", msg, sizeof msg),
              EX_ERR_IO);
    ex_viz_model_free(m);
}

/* Bad arguments fail before SDL video starts: no window, no display needed. */
static void windows(void **state)
{
    (void)state;
    ex_viz_window_opts o = {.title = "misuse"};
    ex_viz_window *w = (ex_viz_window *)&w;
    FAILS_MSG(ex_viz_window_open(NULL, &w, msg, sizeof msg), EX_ERR_ARG);
    assert_null(w);
    FAILS_MSG(ex_viz_window_open(&o, NULL, msg, sizeof msg), EX_ERR_ARG);
    o.width = -1;
    FAILS_MSG(ex_viz_window_open(&o, &w, msg, sizeof msg), EX_ERR_ARG);
    o.width = 0;
    o.height = INT32_MAX;
    FAILS_MSG(ex_viz_window_open(&o, &w, msg, sizeof msg), EX_ERR_ARG);
    assert_int_equal(ex_viz_window_open(NULL, NULL, NULL, 0), EX_ERR_ARG);
    assert_null(w);
    assert_int_equal(SDL_WasInit(SDL_INIT_VIDEO), 0);

    ex_viz_model *m = new_model();
    FAILS_MSG(ex_viz_window_run(NULL, m, NULL, msg, sizeof msg), EX_ERR_ARG);
    assert_int_equal(ex_viz_window_run(NULL, NULL, NULL, NULL, 0), EX_ERR_ARG);
    FAILS_MSG(ex_viz_window_screenshot(NULL, "x.png", msg, sizeof msg), EX_ERR_ARG);
    assert_int_equal(ex_viz_window_screenshot(NULL, NULL, NULL, 0), EX_ERR_ARG);
    assert_int_equal(ex_viz_window_frames(NULL), 0);
    assert_string_equal(ex_viz_window_renderer(NULL), "");
    ex_viz_window_frame(NULL, m);
    ex_viz_window_close(NULL);
    assert_int_equal(SDL_WasInit(SDL_INIT_VIDEO), 0);
    ex_viz_model_free(m);
}

/* A window on SDL's dummy driver, for the arguments that need a real window. */
static void window_arguments(void **state)
{
    (void)state;
    ex_viz_window_opts o = {.title = "misuse", .width = 320, .height = 200};
    ex_viz_window *w = NULL;
    if (ex_viz_window_open(&o, &w, msg, sizeof msg) != EX_OK)
        fail_msg("dummy video driver: %s", msg);
    FAILS_MSG(ex_viz_window_run(w, NULL, NULL, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_viz_window_screenshot(w, NULL, msg, sizeof msg), EX_ERR_ARG);
    FAILS_MSG(ex_viz_window_screenshot(w, "", msg, sizeof msg), EX_ERR_ARG);
    ex_viz_window_frame(w, NULL);
    assert_int_equal(ex_viz_window_frames(w), 0);
    assert_true(ex_viz_window_renderer(w)[0] != 0);
    ex_viz_window_close(w);
}

int main(void)
{
    /* no display: the dummy driver, even where a DISPLAY is set */
    setenv("SDL_VIDEODRIVER", "dummy", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(models),
        cmocka_unit_test(follows),
        cmocka_unit_test(colours_and_layout),
        cmocka_unit_test(geometry),
        cmocka_unit_test(renderers),
        cmocka_unit_test(snapshots),
        cmocka_unit_test(windows),
        cmocka_unit_test(window_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
