/* exapt viz (replay, follow, snapshot) and the live viewer of exapt search --viz. Built
 * with the viewer when EXAPT_VIZ is on; without it both say so and fail. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, CLOCK_THREAD_CPUTIME_ID */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "options.h"
#include "run.h"

static const char viz_usage[] =
    "usage: exapt viz RUN_DIR [options]\n"
    "  RUN_DIR              a run directory (its metrics.jsonl is read) or a metrics log\n"
    "  --follow             keep reading the log while a search appends to it (a search on\n"
    "                       another machine can be watched through a copied or mounted dir)\n"
    "  --snapshot FILE      render the final state to FILE (PNG) with no display, and exit\n"
    "  --width N --height N window or snapshot size (1400 x 860)\n"
    "  --exit-when-done     close the window once the run's last epoch is in the log\n"
    "  --screenshot FILE    write the window to FILE (PNG) when it closes\n"
    "keys: space pause, tab other cell, left/right scrub (shift: 10 steps), home/end,\n"
    "      s screenshot (PNG in the current directory), q or escape close\n";

#define NOT_BUILT                                                                                  \
    "the viewer was not built: this exapt was configured without EXAPT_VIZ (it needs the "         \
    "development files of SDL2, SDL2_ttf, SDL2_image and fontconfig)"

#ifdef EXAPT_HAVE_VIZ
#include <pthread.h>
#include <time.h>

#include "exapt/viz.h"

/* The log of RUN: RUN itself when it is a file or named *.jsonl, else RUN/metrics.jsonl
 * (a run directory that a search may not have created yet). */
static void log_path(const char *run, char *buf, size_t len)
{
    struct stat sb;
    size_t n = strlen(run);
    if ((stat(run, &sb) == 0 && S_ISREG(sb.st_mode)) || (n > 6 && !strcmp(run + n - 6, ".jsonl")))
        snprintf(buf, len, "%s", run);
    else
        run_path(buf, len, run, "metrics.jsonl");
}

static void print_notes(ex_viz_model *m)
{
    char t[256];
    for (int i = 0; i < ex_viz_model_notes(m); i++) {
        ex_viz_model_note_text(m, i, t, sizeof t);
        fprintf(stderr, "exapt viz: %s\n", t);
    }
}

typedef struct viz_args {
    const char *snapshot, *screenshot;
    bool follow, exit_when_done;
    long width, height;
} viz_args;

static int snapshot(ex_viz_model *m, ex_viz_follow *f, const viz_args *a)
{
    char msg[512];
    int64_t added = 0;
    if (ex_viz_follow_poll(f, &added, msg, sizeof msg) != EX_OK)
        return cli_fail("viz", "%s", msg);
    print_notes(m);
    ex_viz_view v = ex_viz_view_default();
    if (ex_viz_snapshot(m, &v, (int)a->width, (int)a->height, a->snapshot, msg, sizeof msg) !=
        EX_OK)
        return cli_fail("viz", "%s", msg);
    fprintf(stderr, "exapt viz: %lld steps drawn into %s\n", (long long)ex_viz_model_steps(m),
            a->snapshot);
    return CLI_EXIT_OK;
}

static int window(ex_viz_model *m, ex_viz_follow *f, const viz_args *a, const char *path)
{
    char msg[512], title[600];
    snprintf(title, sizeof title, "exapt viz: %.500s", path);
    ex_viz_window_opts o = {.title = title,
                            .width = (int)a->width,
                            .height = (int)a->height,
                            .shot_on_exit = a->screenshot,
                            .exit_when_done = a->exit_when_done,
                            .follow = a->follow};
    ex_viz_window *w = NULL;
    if (ex_viz_window_open(&o, &w, msg, sizeof msg) != EX_OK)
        return cli_fail("viz", "%s (--snapshot FILE renders without a display)", msg);
    ex_status st = ex_viz_window_run(w, m, f, msg, sizeof msg);
    ex_viz_window_close(w);
    print_notes(m);
    return st == EX_OK ? CLI_EXIT_OK : cli_fail("viz", "%s", msg);
}

int cli_viz(const cli_global *g, int argc, char **argv)
{
    (void)g;
    viz_args a = {.width = 1400, .height = 860};
    const opt_spec specs[] = {
        {"--follow", OPT_FLAG, &a.follow, 0, 0, NULL},
        {"--snapshot", OPT_STRING, &a.snapshot, 0, 0, NULL},
        {"--screenshot", OPT_STRING, &a.screenshot, 0, 0, NULL},
        {"--exit-when-done", OPT_FLAG, &a.exit_when_done, 0, 0, NULL},
        {"--width", OPT_INT, &a.width, 320, 8192, NULL},
        {"--height", OPT_INT, &a.height, 240, 8192, NULL},
    };
    bool has_run = argc > 1 && argv[1][0] != '-';
    int rc = opt_parse("viz", viz_usage, specs, (int)(sizeof specs / sizeof specs[0]),
                       has_run ? argc - 1 : argc, has_run ? argv + 1 : argv);
    if (rc)
        return rc < 0 ? CLI_EXIT_OK : rc;
    if (!has_run)
        return cli_usage_error("viz", "which run? give its directory");
    char path[4096], msg[512];
    log_path(argv[1], path, sizeof path);
    struct stat sb;
    if (!a.follow && stat(path, &sb) != 0)
        return cli_fail("viz", "%s: no metrics log there", path);
    ex_viz_model *m = NULL;
    ex_viz_follow *f = NULL;
    if (ex_viz_model_new(&m, msg, sizeof msg) != EX_OK ||
        ex_viz_follow_new(path, m, &f, msg, sizeof msg) != EX_OK) {
        ex_viz_model_free(m);
        return cli_fail("viz", "%s", msg);
    }
    rc = a.snapshot ? snapshot(m, f, &a) : window(m, f, &a, path);
    ex_viz_follow_free(f);
    ex_viz_model_free(m);
    return rc;
}

/* ---- the live viewer of exapt search --viz ---- */

struct cli_live {
    ex_viz_model *m;
    ex_viz_window *w;
    int (*job)(void *);
    void *arg;
    int rc;
};

int cli_live_open(cli_live **out, const char *title, bool exit_when_done)
{
    char msg[512];
    cli_live *l = calloc(1, sizeof *l);
    if (!l)
        return cli_fail("search", "out of memory");
    ex_viz_window_opts o = {.title = title, .exit_when_done = exit_when_done};
    if (ex_viz_model_new(&l->m, msg, sizeof msg) != EX_OK ||
        ex_viz_window_open(&o, &l->w, msg, sizeof msg) != EX_OK) {
        cli_live_close(l);
        return cli_fail("search", "--viz: %s", msg);
    }
    *out = l;
    return CLI_EXIT_OK;
}

void cli_live_close(cli_live *l)
{
    if (!l)
        return;
    ex_viz_window_close(l->w);
    ex_viz_model_free(l->m);
    free(l);
}

void cli_live_record(cli_live *l, const ex_metrics_record *rec)
{
    if (l)
        ex_viz_model_add(l->m, rec);
}

int cli_live_load(cli_live *l, const char *path)
{
    char msg[512];
    ex_viz_follow *f = NULL;
    int64_t added = 0;
    ex_status st = ex_viz_follow_new(path, l->m, &f, msg, sizeof msg);
    if (st == EX_OK)
        st = ex_viz_follow_poll(f, &added, msg, sizeof msg);
    ex_viz_follow_free(f);
    return st == EX_OK ? CLI_EXIT_OK : cli_fail("search", "--viz: %s", msg);
}

void cli_live_wait(cli_live *l)
{
    while (l && !run_stop_requested() && ex_viz_model_wait_paused(l->m, 200))
        ;
}

static double thread_cpu_s(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return 0;
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *worker(void *p)
{
    cli_live *l = p;
    l->rc = l->job(l->arg);
    ex_viz_model_set_finished(l->m, true);
    if (l->rc != CLI_EXIT_OK) {
        /* interrupted or failed: the window closes too */
        SDL_Event e = {.type = SDL_QUIT};
        SDL_PushEvent(&e);
    }
    return NULL;
}

int cli_live_run(cli_live *l, int (*job)(void *), void *arg)
{
    l->job = job;
    l->arg = arg;
    pthread_t t;
    if (pthread_create(&t, NULL, worker, l))
        return cli_fail("search", "--viz: cannot start the search thread");
    char msg[512];
    /* what the window cost while the search ran: its thread's CPU time (a benchmark reads
     * this line; bench/viz_fps.c) */
    double t0 = run_now(), c0 = thread_cpu_s();
    if (ex_viz_window_run(l->w, l->m, NULL, msg, sizeof msg) != EX_OK)
        fprintf(stderr, "exapt search: viewer: %s\n", msg);
    fprintf(stderr,
            "exapt search: viewer: %lld frames (%s), %.3f s of CPU on its thread in %.1f s\n",
            (long long)ex_viz_window_frames(l->w), ex_viz_window_renderer(l->w),
            thread_cpu_s() - c0, run_now() - t0);
    if (!ex_viz_model_finished(l->m))
        fprintf(stderr, "exapt search: viewer closed; the search goes on (Ctrl-C stops it)\n");
    ex_viz_window_close(l->w);
    l->w = NULL;
    pthread_join(t, NULL);
    return l->rc;
}

#else /* !EXAPT_HAVE_VIZ */

int cli_viz(const cli_global *g, int argc, char **argv)
{
    (void)g;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(viz_usage, stdout);
            return CLI_EXIT_OK;
        }
    return cli_fail("viz", NOT_BUILT);
}

int cli_live_open(cli_live **out, const char *title, bool exit_when_done)
{
    (void)title;
    (void)exit_when_done;
    *out = NULL;
    return cli_fail("search", "--viz: " NOT_BUILT);
}

/* cli_live_open() never succeeds here, so these only ever see NULL. */
void cli_live_record(cli_live *l, const ex_metrics_record *rec)
{
    (void)l;
    (void)rec;
}

int cli_live_load(cli_live *l, const char *path)
{
    (void)l;
    (void)path;
    return cli_fail("search", "--viz: " NOT_BUILT);
}

void cli_live_wait(cli_live *l)
{
    (void)l;
}

int cli_live_run(cli_live *l, int (*job)(void *), void *arg)
{
    (void)l;
    (void)job;
    (void)arg;
    return cli_fail("search", "--viz: " NOT_BUILT);
}

void cli_live_close(cli_live *l)
{
    (void)l;
}

#endif
