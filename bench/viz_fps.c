/* The viewer's benchmark (not a test), on a display or Xvfb. Three parts, each in the JSON:
 *
 * 1. frames per second of a real window drawing both α matrices and 10,000 steps of history;
 * 2. the live viewer's CPU cost, measured as CPU time (robust to the machine's load): a
 *    thread feeds the model like a live search (a step record with α and masks every
 *    --step-ms, a profile every 50 steps) while the window runs as `exapt search --viz`
 *    runs it; the viewer's CPU seconds (this process less the feeding thread, and the X
 *    server's) per second, and how long the feeding thread waited for the model's lock;
 * 3. a real search with and without `--viz`, in alternated pairs: the epoch's wall time of
 *    each, the median and spread of the per-pair slowdowns, and the CPU seconds the
 *    viewer's threads took per second of search.
 *
 *   bench_viz_fps [--exapt PATH] [--frames N] [--live-seconds S] [--step-ms M]
 *                 [--history N] [--pairs N] [--out FILE] [-- search options]
 *
 * Linux: per-thread CPU times come from /proc.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "exapt/viz.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double clock_s(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double rusage_cpu(int who)
{
    struct rusage u;
    getrusage(who, &u);
    return (double)u.ru_utime.tv_sec + 1e-6 * (double)u.ru_utime.tv_usec +
           (double)u.ru_stime.tv_sec + 1e-6 * (double)u.ru_stime.tv_usec;
}

/* ---- records as a search writes them ---- */

static const char *const cands[8] = {"none",         "max_pool_3x3", "avg_pool_3x3",
                                     "skip_connect", "sep_conv_3x3", "sep_conv_5x5",
                                     "dil_conv_3x3", "dil_conv_5x5"};

static void header_rec(ex_metrics_record *r)
{
    memset(r, 0, sizeof *r);
    r->kind = EX_METRICS_HEADER;
    ex_metrics_header *h = &r->header;
    snprintf(h->config, sizeof h->config, "{\"epochs\":50}");
    h->n_candidates = 8;
    for (int i = 0; i < 8; i++)
        snprintf(h->candidates[i], sizeof h->candidates[i], "%s", cands[i]);
    for (int node = 0; node < 4; node++)
        for (int in = 0; in < 2 + node; in++, h->n_edges++) {
            h->edges[h->n_edges][0] = 2 + node;
            h->edges[h->n_edges][1] = in;
        }
    snprintf(h->backend, sizeof h->backend, "cpu");
    snprintf(h->device, sizeof h->device, "bench");
    snprintf(h->mode, sizeof h->mode, "topk");
    h->peak_gbs = 20;
}

static void step_rec(ex_metrics_record *r, int g, bool alphas)
{
    memset(r, 0, sizeof *r);
    r->kind = EX_METRICS_STEP;
    ex_metrics_step *s = &r->step;
    s->epoch = g / 200;
    s->step = g % 200;
    s->global_step = g;
    s->train_loss = 2.3 * exp(-g / 3000.0) + 0.1 * sin(g * 0.1);
    s->train_acc = 1 - exp(-g / 2000.0);
    s->has_valid = true;
    s->valid_loss = s->train_loss * 1.1;
    s->valid_acc = s->train_acc * 0.95;
    s->images_per_s = 1000;
    s->step_ms = 50 + 5 * sin(g * 0.01);
    if (!alphas)
        return;
    s->has_alphas = s->has_active = true;
    s->n_edges = 14;
    s->n_cands = 8;
    for (int e = 0; e < 14; e++)
        for (int k = 0; k < 8; k++) {
            float w = (float)(1 + (e * 8 + k + g / 10) % 17);
            s->alpha_normal[e][k] = w / 80.0f;
            s->alpha_reduce[e][k] = (18 - w) / 80.0f;
            s->active_normal[e][k] = s->active_reduce[e][k] = (uint8_t)(w > 6);
        }
}

static void profile_rec(ex_metrics_record *r, int g)
{
    memset(r, 0, sizeof *r);
    r->kind = EX_METRICS_PROFILE;
    r->profile.global_step = g;
    r->profile.n_candidates = 8;
    for (int k = 0; k < 8; k++) {
        snprintf(r->profile.candidates[k].candidate, EX_METRICS_NAME_MAX, "%s", cands[k]);
        r->profile.candidates[k].gbs = 2 + k;
        r->profile.candidates[k].ms = 1;
    }
    r->profile.n_ops = 12;
    for (int o = 0; o < 12; o++) {
        snprintf(r->profile.ops[o].op, EX_METRICS_NAME_MAX, "op%d", o);
        r->profile.ops[o].gbs = 1 + o;
        r->profile.ops[o].ms = 12 - o;
    }
}

/* A run of `steps` steps as a search logs it without --viz: α every 10 steps, a profile
 * every 50. */
static void fill(ex_viz_model *m, int steps)
{
    ex_metrics_record *r = malloc(sizeof *r);
    if (!r)
        exit(1);
    header_rec(r);
    ex_viz_model_add(m, r);
    for (int g = 0; g < steps; g++) {
        step_rec(r, g, g % 10 == 0);
        ex_viz_model_add(m, r);
        if (g % 50 == 0) {
            profile_rec(r, g);
            ex_viz_model_add(m, r);
        }
    }
    free(r);
}

/* ---- 1. frames per second ---- */

/* Frames per second of the window; the mouse moves each frame so the hover is drawn too. */
static double window_fps(ex_viz_model *m, int frames, char *renderer, size_t rlen, char *err,
                         size_t len)
{
    ex_viz_window_opts o = {.title = "exapt viz benchmark"};
    ex_viz_window *w = NULL;
    if (ex_viz_window_open(&o, &w, err, len) != EX_OK)
        return -1;
    snprintf(renderer, rlen, "%s", ex_viz_window_renderer(w));
    for (int i = 0; i < 10; i++)
        ex_viz_window_frame(w, m);
    double t0 = now();
    for (int i = 0; i < frames; i++) {
        SDL_Event e;
        while (SDL_PollEvent(&e))
            ;
        ex_viz_window_frame(w, m);
    }
    double fps = frames / (now() - t0);
    ex_viz_window_close(w);
    return fps;
}

/* Frames per second drawn offscreen by the software renderer: the drawing alone, without
 * the display's cost of showing the frame. */
static double offscreen_fps(ex_viz_model *m, int frames)
{
    SDL_Surface *s = SDL_CreateRGBSurfaceWithFormat(0, 1400, 860, 32, SDL_PIXELFORMAT_RGB888);
    SDL_Renderer *sr = s ? SDL_CreateSoftwareRenderer(s) : NULL;
    ex_viz_renderer *r = NULL;
    char msg[256];
    if (!sr || ex_viz_renderer_new(sr, NULL, &r, msg, sizeof msg) != EX_OK)
        return -1;
    ex_viz_view v = ex_viz_view_default();
    for (int i = 0; i < 10; i++)
        ex_viz_draw(r, m, &v, 1400, 860);
    double t0 = now();
    for (int i = 0; i < frames; i++) {
        ex_viz_draw(r, m, &v, 1400, 860);
        SDL_RenderPresent(sr);
    }
    double fps = frames / (now() - t0);
    ex_viz_renderer_free(r);
    SDL_DestroyRenderer(sr);
    SDL_FreeSurface(s);
    return fps;
}

/* ---- CPU time of other processes and threads, from /proc ---- */

/* utime + stime of a /proc stat file in seconds, and its comm; -1 when unreadable. */
static double proc_cpu(const char *path, char *comm, size_t comm_len)
{
    char buf[1024];
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = 0;
    char *l = strchr(buf, '('), *r = strrchr(buf, ')');
    unsigned long ut, st;
    /* after ") ": state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime */
    if (!l || !r ||
        sscanf(r + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return -1;
    if (comm)
        snprintf(comm, comm_len, "%.*s", (int)(r - l - 1), l + 1);
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* The pid of the X server of $DISPLAY (an Xvfb, Xorg or Xwayland whose command line names
 * the display), or -1: its CPU time is the viewer's too. */
static int x_server_pid(void)
{
    const char *d = getenv("DISPLAY");
    DIR *dir = d && d[0] == ':' ? opendir("/proc") : NULL;
    int found = -1;
    struct dirent *e;
    while (dir && found < 0 && (e = readdir(dir))) {
        char path[300], comm[64], args[4096];
        int pid = atoi(e->d_name);
        snprintf(path, sizeof path, "/proc/%d/stat", pid);
        if (pid <= 0 || proc_cpu(path, comm, sizeof comm) < 0 ||
            (strcmp(comm, "Xvfb") && strcmp(comm, "Xorg") && strcmp(comm, "Xwayland")))
            continue;
        snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
        FILE *f = fopen(path, "r");
        size_t n = f ? fread(args, 1, sizeof args - 1, f) : 0;
        if (f)
            fclose(f);
        for (size_t i = 0; i < n;) { /* NUL-separated arguments */
            if (!strcmp(args + i, d))
                found = pid;
            i += strlen(args + i) + 1;
        }
    }
    if (dir)
        closedir(dir);
    return found;
}

static double x_server_cpu(int pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    return pid > 0 ? proc_cpu(path, NULL, 0) : -1;
}

/* ---- 2. the live viewer's cost, with a thread feeding the model ---- */

typedef struct feeder {
    ex_viz_model *m;
    double seconds, step_ms;
    int history;
    /* results */
    int64_t adds;
    double add_s, add_max_s, cpu_s;
} feeder;

static void *feed(void *p)
{
    feeder *f = p;
    ex_metrics_record *r = malloc(sizeof *r);
    double cpu0 = clock_s(CLOCK_THREAD_CPUTIME_ID), end = now() + f->seconds;
    for (int g = f->history; r && now() < end; g++) {
        for (int k = 0; k < 1 + (g % 50 == 0); k++) {
            if (k == 0)
                step_rec(r, g, true); /* --viz logs α and masks every step */
            else
                profile_rec(r, g);
            double t = now();
            ex_viz_model_add(f->m, r);
            t = now() - t;
            f->add_s += t;
            f->add_max_s = t > f->add_max_s ? t : f->add_max_s;
            f->adds++;
        }
        double ns = f->step_ms * 1e6;
        struct timespec ts = {(time_t)(ns / 1e9), (long)fmod(ns, 1e9)};
        nanosleep(&ts, NULL);
    }
    free(r);
    f->cpu_s = clock_s(CLOCK_THREAD_CPUTIME_ID) - cpu0;
    ex_viz_model_set_finished(f->m, true);
    return NULL;
}

typedef struct live_cost {
    char renderer[256];
    double wall_s, viewer_cpu_s, main_cpu_s, x_cpu_s;
    int64_t frames;
    feeder f;
} live_cost;

/* The window as `exapt search --viz` runs it, fed by a thread for f->seconds. */
static int measure_live(live_cost *c, char *err, size_t len)
{
    ex_viz_model *m = NULL;
    ex_viz_window *w = NULL;
    ex_viz_window_opts o = {.title = "exapt viz benchmark (live)", .exit_when_done = true};
    if (ex_viz_model_new(&m, err, len) != EX_OK)
        return -1;
    fill(m, c->f.history);
    if (ex_viz_window_open(&o, &w, err, len) != EX_OK) {
        ex_viz_model_free(m);
        return -1;
    }
    snprintf(c->renderer, sizeof c->renderer, "%s", ex_viz_window_renderer(w));
    int xpid = x_server_pid();
    double x0 = x_server_cpu(xpid), p0 = rusage_cpu(RUSAGE_SELF),
           m0 = clock_s(CLOCK_THREAD_CPUTIME_ID), t0 = now();
    c->f.m = m;
    pthread_t t;
    if (pthread_create(&t, NULL, feed, &c->f)) {
        snprintf(err, len, "cannot start the feeding thread");
        ex_viz_window_close(w);
        ex_viz_model_free(m);
        return -1;
    }
    ex_status st = ex_viz_window_run(w, m, NULL, err, len);
    pthread_join(t, NULL);
    c->wall_s = now() - t0;
    c->main_cpu_s = clock_s(CLOCK_THREAD_CPUTIME_ID) - m0;
    c->viewer_cpu_s = rusage_cpu(RUSAGE_SELF) - p0 - c->f.cpu_s;
    c->x_cpu_s = xpid > 0 ? x_server_cpu(xpid) - x0 : -1;
    c->frames = ex_viz_window_frames(w);
    ex_viz_window_close(w);
    ex_viz_model_free(m);
    return st == EX_OK ? 0 : -1;
}

/* ---- 3. a real search with and without the viewer ---- */

typedef struct search_run {
    double epoch_s, median_step_ms, wall_s, cpu_s, load;
    /* live runs: the window thread's CPU while the search ran (exapt says it on stderr),
     * the GL driver's threads', the X server's, and the frames drawn */
    double window_cpu_s, window_s, driver_cpu_s, x_cpu_s;
    long long frames;
} search_run;

/* The viewer's line of a live search's stderr: "viewer: N frames (renderer), X s of CPU
 * on its thread in Y s". */
static int viewer_line(const char *log, search_run *out)
{
    FILE *f = fopen(log, "r");
    char line[1024];
    int found = -1;
    while (f && fgets(line, sizeof line, f)) {
        const char *a = strstr(line, "viewer: "), *b = strstr(line, " s of CPU on its thread");
        const char *c = b;
        while (c && c > line && c[-1] != ' ')
            c--;
        if (a && b && sscanf(a, "viewer: %lld frames", &out->frames) == 1 &&
            sscanf(c, "%lf s of CPU on its thread in %lf s", &out->window_cpu_s, &out->window_s) ==
                2)
            found = 0;
    }
    if (f)
        fclose(f);
    return found;
}

/* Seconds of the log's epochs and the median step time, its first two steps left out. */
typedef struct speed {
    double ms[100000];
    int n;
    double epoch_s;
} speed;

static int on_rec(const ex_metrics_record *r, int64_t line, void *user)
{
    (void)line;
    speed *s = user;
    if (r->kind == EX_METRICS_STEP && r->step.global_step >= 2 && s->n < 100000)
        s->ms[s->n++] = r->step.step_ms;
    if (r->kind == EX_METRICS_EPOCH)
        s->epoch_s += r->epoch.seconds;
    return 0;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp);
    return n ? (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2])) : NAN;
}

/* The 1-minute load average: on a shared machine it says how much the figures can be trusted. */
static double loadavg(void)
{
    FILE *f = fopen("/proc/loadavg", "r");
    double l = -1;
    if (f && fscanf(f, "%lf", &l) != 1)
        l = -1;
    if (f)
        fclose(f);
    return l;
}

/* CPU seconds of the GL driver's threads of a live search (Mesa names its rasterizer
 * threads llvmpipe-N), sampled while they run, so a thread that ends between two samples
 * loses at most a sampling period. */
typedef struct threads {
    int tid[256];
    double cpu[256];
    bool driver[256];
    int n;
} threads;

static void sample_threads(int pid, threads *t)
{
    char path[300], comm[64];
    snprintf(path, sizeof path, "/proc/%d/task", pid);
    DIR *dir = opendir(path);
    struct dirent *e;
    while (dir && (e = readdir(dir))) {
        int tid = atoi(e->d_name), i = 0;
        snprintf(path, sizeof path, "/proc/%d/task/%d/stat", pid, tid);
        double c = tid > 0 ? proc_cpu(path, comm, sizeof comm) : -1;
        if (c < 0)
            continue;
        while (i < t->n && t->tid[i] != tid)
            i++;
        if (i == t->n && t->n == 256)
            continue;
        t->n += i == t->n;
        t->tid[i] = tid;
        t->cpu[i] = c;
        t->driver[i] = !strncmp(comm, "llvmpipe", 8);
    }
    if (dir)
        closedir(dir);
}

static int run_search(const char *exapt, const char *extra, const char *dir, bool viz,
                      search_run *out)
{
    char cmd[4096], path[1200], msg[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", dir, dir);
    if (system(cmd) != 0)
        return -1;
    snprintf(cmd, sizeof cmd, "exec %s search %s --out %s%s > %s.log 2>&1", exapt, extra, dir,
             viz ? " --viz --viz-exit" : "", dir);
    int xpid = x_server_pid();
    double x0 = x_server_cpu(xpid), t0 = now();
    out->load = loadavg();
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    threads t = {.n = 0};
    int status = 0;
    struct rusage u;
    while (pid > 0 && wait4(pid, &status, WNOHANG, &u) == 0) {
        sample_threads(pid, &t);
        nanosleep(&(struct timespec){0, 20000000}, NULL);
    }
    out->wall_s = now() - t0;
    out->x_cpu_s = xpid > 0 ? x_server_cpu(xpid) - x0 : -1;
    if (pid < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "bench_viz_fps: failed: %s (see %s.log)\n", cmd, dir);
        return -1;
    }
    out->cpu_s = (double)u.ru_utime.tv_sec + 1e-6 * (double)u.ru_utime.tv_usec +
                 (double)u.ru_stime.tv_sec + 1e-6 * (double)u.ru_stime.tv_usec;
    out->driver_cpu_s = 0;
    for (int i = 0; viz && i < t.n; i++)
        out->driver_cpu_s += t.driver[i] ? t.cpu[i] : 0;
    snprintf(path, sizeof path, "%s.log", dir);
    if (viz && viewer_line(path, out)) {
        fprintf(stderr, "bench_viz_fps: no viewer line in %s\n", path);
        return -1;
    }
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    speed *s = calloc(1, sizeof *s);
    if (!s || ex_metrics_read(path, on_rec, s, NULL, msg, sizeof msg) != EX_OK || s->n == 0) {
        free(s);
        return -1;
    }
    out->median_step_ms = median(s->ms, s->n);
    out->epoch_s = s->epoch_s;
    free(s);
    return 0;
}

/* ---- output ---- */

static void machine(char *buf, size_t len)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    int cores = 0;
    snprintf(buf, len, "unknown CPU");
    while (f && fgets(line, sizeof line, f)) {
        if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
            snprintf(buf, len, "%s", strchr(line, ':') + 2);
            buf[strcspn(buf, "\n")] = 0;
        }
        cores += !strncmp(line, "processor", 9);
    }
    if (f)
        fclose(f);
    size_t n = strlen(buf);
    snprintf(buf + n, len - n, ", %d logical cores", cores);
}

static void print_live(FILE *f, const live_cost *c, double step_ms)
{
    const feeder *d = &c->f;
    fprintf(f,
            "  \"live\": {\n    \"what\": \"a thread adds a step record with alpha and masks "
            "every step_ms (a profile every 50 steps) while the window runs as exapt search "
            "--viz runs it; CPU seconds per second of wall time\",\n"
            "    \"renderer\": \"%s\",\n    \"step_ms\": %.1f,\n    \"history_steps\": %d,\n    "
            "\"seconds\": %.2f,\n"
            "    \"frames\": %lld,\n    \"viewer_cpu_s\": %.3f,\n    \"main_thread_cpu_s\": %.3f,\n"
            "    \"x_server_cpu_s\": %.3f,\n    \"viewer_cpu_per_s\": %.4f,\n"
            "    \"viewer_and_x_cpu_per_s\": %.4f,\n    \"cpu_ms_per_frame\": %.2f,\n"
            "    \"model_adds\": %lld,\n    \"model_add_mean_us\": %.2f,\n"
            "    \"model_add_max_us\": %.1f,\n    \"feeder_cpu_s\": %.3f\n  },\n",
            c->renderer, step_ms, d->history, c->wall_s, (long long)c->frames, c->viewer_cpu_s,
            c->main_cpu_s, c->x_cpu_s, c->viewer_cpu_s / c->wall_s,
            (c->viewer_cpu_s + (c->x_cpu_s > 0 ? c->x_cpu_s : 0)) / c->wall_s,
            c->frames
                ? 1e3 * (c->viewer_cpu_s + (c->x_cpu_s > 0 ? c->x_cpu_s : 0)) / (double)c->frames
                : 0.0,
            (long long)d->adds, d->adds ? 1e6 * d->add_s / (double)d->adds : 0.0,
            1e6 * d->add_max_s, d->cpu_s);
}

/* The pairs: each run, then the median, quartiles and range of the per-pair slowdowns. */
static void print_pairs(FILE *f, const char *extra, const search_run *off, const search_run *on,
                        int n)
{
    double slow[512], step[512], vcpu[512];
    fprintf(f, "  \"search\": \"exapt search %s\",\n  \"pairs\": %d,\n  \"runs\": [\n", extra, n);
    for (int i = 0; i < n; i++) {
        fprintf(f,
                "    {\"pair\": %d, \"first\": \"%s\", \"epoch_s_without\": %.3f, "
                "\"epoch_s_live\": %.3f, \"median_step_ms_without\": %.2f, "
                "\"median_step_ms_live\": %.2f, \"process_cpu_s_without\": %.2f, "
                "\"process_cpu_s_live\": %.2f, \"wall_s_live\": %.2f, \"frames\": %lld, "
                "\"window_cpu_s\": %.3f, \"window_s\": %.2f, \"gl_driver_cpu_s\": %.3f, "
                "\"x_server_cpu_s\": %.3f, "
                "\"load_without\": %.2f, \"load_live\": %.2f}%s\n",
                i + 1, i % 2 ? "live" : "without", off[i].epoch_s, on[i].epoch_s,
                off[i].median_step_ms, on[i].median_step_ms, off[i].cpu_s, on[i].cpu_s,
                on[i].wall_s, on[i].frames, on[i].window_cpu_s, on[i].window_s, on[i].driver_cpu_s,
                on[i].x_cpu_s, off[i].load, on[i].load, i + 1 < n ? "," : "");
        slow[i] = 100.0 * (on[i].epoch_s / off[i].epoch_s - 1);
        step[i] = 100.0 * (on[i].median_step_ms / off[i].median_step_ms - 1);
        /* per second of the window's life: it opens before the search and closes after */
        vcpu[i] =
            (on[i].window_cpu_s + on[i].driver_cpu_s + (on[i].x_cpu_s > 0 ? on[i].x_cpu_s : 0)) /
            on[i].window_s;
    }
    double tot_off = 0, tot_on = 0;
    int slower = 0;
    for (int i = 0; i < n; i++) {
        tot_off += off[i].epoch_s;
        tot_on += on[i].epoch_s;
        slower += slow[i] > 0;
    }
    /* quartiles by nearest rank */
    double med = median(slow, n), q1 = slow[n / 4], q3 = slow[(3 * n) / 4];
    fprintf(f,
            "  ],\n  \"slowdown_percent_median\": %.2f,\n  \"slowdown_percent_q1\": %.2f,\n"
            "  \"slowdown_percent_q3\": %.2f,\n  \"slowdown_percent_min\": %.2f,\n"
            "  \"slowdown_percent_max\": %.2f,\n  \"slowdown_percent_of_totals\": %.2f,\n"
            "  \"pairs_live_slower\": %d,\n",
            med, q1, q3, slow[0], slow[n - 1], 100.0 * (tot_on / tot_off - 1), slower);
    fprintf(f, "  \"median_step_slowdown_percent_median\": %.2f,\n", median(step, n));
    fprintf(f, "  \"viewer_cpu_s_per_search_s_median\": %.4f,\n", median(vcpu, n));
}

typedef struct opts {
    const char *exapt, *out;
    int frames, pairs, history;
    double live_s, step_ms;
    char extra[2048];
} opts;

static int parse(int argc, char **argv, opts *o)
{
    *o = (opts){.frames = 300, .pairs = 0, .history = 10000, .live_s = 20, .step_ms = 100};
    snprintf(o->extra, sizeof o->extra,
             "--backend cpu --channels 4 --layers 3 --steps 2 --batch 16 --epochs 1 "
             "--limit 640 --train-epochs 0");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--")) {
            o->extra[0] = 0;
            for (i++; i < argc; i++)
                snprintf(o->extra + strlen(o->extra), sizeof o->extra - strlen(o->extra), "%s%s",
                         o->extra[0] ? " " : "", argv[i]);
        } else if (!v) {
            return -1;
        } else if (!strcmp(a, "--exapt")) {
            o->exapt = v;
        } else if (!strcmp(a, "--out")) {
            o->out = v;
        } else if (!strcmp(a, "--frames")) {
            o->frames = atoi(v);
        } else if (!strcmp(a, "--pairs")) {
            o->pairs = atoi(v);
        } else if (!strcmp(a, "--history")) {
            o->history = atoi(v);
        } else if (!strcmp(a, "--live-seconds")) {
            o->live_s = atof(v);
        } else if (!strcmp(a, "--step-ms")) {
            o->step_ms = atof(v);
        } else {
            return -1;
        }
        i += strcmp(a, "--") != 0;
    }
    if (o->exapt && o->pairs == 0)
        o->pairs = 10;
    bool ok = o->frames >= 0 && o->pairs >= 0 && o->pairs <= 512 && o->history >= 0 &&
              o->history <= 1000000 && o->live_s >= 0 && o->step_ms >= 0;
    return ok ? 0 : -1;
}

int main(int argc, char **argv)
{
    opts o;
    if (parse(argc, argv, &o)) {
        fprintf(stderr, "usage: bench_viz_fps [--exapt PATH] [--frames N] [--live-seconds S] "
                        "[--step-ms M] [--history N] [--pairs N] [--out FILE] "
                        "[-- search options]\n");
        return 2;
    }
    char err[512] = "", cpu[256], command[4096] = "", renderer[256] = "";
    for (int i = 0; i < argc; i++)
        snprintf(command + strlen(command), sizeof command - strlen(command), "%s%s", i ? " " : "",
                 argv[i]);
    machine(cpu, sizeof cpu);
    double load0 = loadavg(), fps = 0, off = 0;
    if (o.frames > 0) {
        ex_viz_model *m = NULL;
        if (ex_viz_model_new(&m, err, sizeof err) != EX_OK)
            return 1;
        fill(m, 10000);
        fps = window_fps(m, o.frames, renderer, sizeof renderer, err, sizeof err);
        if (fps < 0) {
            fprintf(stderr, "bench_viz_fps: %s\n", err);
            return 1;
        }
        off = offscreen_fps(m, o.frames);
        fprintf(stderr, "window (%s): %.1f frames/s, offscreen drawing alone %.1f frames/s\n",
                renderer, fps, off);
        ex_viz_model_free(m);
    }
    live_cost live = {.f = {.seconds = o.live_s, .step_ms = o.step_ms, .history = o.history}};
    if (o.live_s > 0) {
        if (measure_live(&live, err, sizeof err)) {
            fprintf(stderr, "bench_viz_fps: live: %s\n", err);
            return 1;
        }
        fprintf(stderr,
                "live: %lld frames in %.1f s; viewer %.3f CPU s (main thread %.3f), X server "
                "%.3f; model adds mean %.1f us, max %.0f us\n",
                (long long)live.frames, live.wall_s, live.viewer_cpu_s, live.main_cpu_s,
                live.x_cpu_s, live.f.adds ? 1e6 * live.f.add_s / (double)live.f.adds : 0.0,
                1e6 * live.f.add_max_s);
    }
    /* alternated, the first of each pair swapping, so a drift in the machine's load hits
     * both alike */
    search_run *runs = calloc(2 * (size_t)(o.pairs ? o.pairs : 1), sizeof *runs);
    search_run *base = runs, *on = runs + o.pairs;
    for (int p = 0; o.exapt && p < o.pairs; p++) {
        for (int k = 0; k < 2; k++) {
            bool viz = (k == 0) == (p % 2 == 1);
            if (run_search(o.exapt, o.extra, viz ? "runs/bench-viz-live" : "runs/bench-viz-off",
                           viz, viz ? &on[p] : &base[p]))
                return 1;
        }
        fprintf(stderr,
                "pair %d: epoch %.2f s without the viewer, %.2f s with it (%+.1f %%); window "
                "thread %.3f CPU s for %lld frames, GL driver %.3f, X server %.2f; load %.2f\n",
                p + 1, base[p].epoch_s, on[p].epoch_s,
                100.0 * (on[p].epoch_s / base[p].epoch_s - 1), on[p].window_cpu_s, on[p].frames,
                on[p].driver_cpu_s, on[p].x_cpu_s, on[p].load);
    }
    FILE *f = o.out ? fopen(o.out, "w") : stdout;
    if (!f)
        return 1;
    fprintf(f,
            "{\n  \"benchmark\": \"viz_fps\",\n  \"command\": \"%s\",\n"
            "  \"machine\": \"%s\",\n  \"loadavg_start\": %.2f,\n"
            "  \"display\": \"%s\",\n  \"render_driver\": \"%s\",\n",
            command, cpu, load0, getenv("DISPLAY") ? getenv("DISPLAY") : "",
            getenv("SDL_RENDER_DRIVER") ? getenv("SDL_RENDER_DRIVER") : "");
    if (o.frames > 0)
        fprintf(f,
                "  \"window_renderer\": \"%s\",\n"
                "  \"window_fps\": %.1f,\n  \"offscreen_draw_fps\": %.1f,\n  \"frames\": %d,\n"
                "  \"history_steps\": 10000,\n"
                "  \"alpha\": \"both cells, 14 edges x 8 candidates\",\n",
                renderer, fps, off, o.frames);
    if (o.live_s > 0)
        print_live(f, &live, o.step_ms);
    if (o.exapt && o.pairs > 0)
        print_pairs(f, o.extra, base, on, o.pairs);
    fprintf(f, "  \"loadavg_end\": %.2f\n}\n", loadavg());
    free(runs);
    if (o.out)
        fclose(f);
    return 0;
}
