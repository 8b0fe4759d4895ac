/* The viewer's benchmark (not a test): frames per second of a real window (a display or
 * Xvfb) drawing both α matrices and 10,000 steps of history, and the speed of a search
 * with the live viewer against the same search without it. Writes JSON.
 *
 *   bench_viz_fps --exapt build/apps/exapt [--frames N] [--pairs N] [--out FILE]
 *                 [-- extra search options]
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exapt/viz.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A run of `steps` steps as a search would log it: α every 10 steps, a profile every 50. */
static void fill(ex_viz_model *m, int steps)
{
    static const char *const cands[8] = {"none",         "max_pool_3x3", "avg_pool_3x3",
                                         "skip_connect", "sep_conv_3x3", "sep_conv_5x5",
                                         "dil_conv_3x3", "dil_conv_5x5"};
    ex_metrics_record *r = calloc(1, sizeof *r);
    if (!r)
        exit(1);
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
    ex_viz_model_add(m, r);
    for (int g = 0; g < steps; g++) {
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
        if (g % 10 == 0) {
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
        ex_viz_model_add(m, r);
        if (g % 50 == 0) {
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
            ex_viz_model_add(m, r);
        }
    }
    free(r);
}

/* Frames per second of the window; the mouse moves each frame so the hover is drawn too. */
static double window_fps(ex_viz_model *m, int frames, char *err, size_t len)
{
    ex_viz_window_opts o = {.title = "exapt viz benchmark"};
    ex_viz_window *w = NULL;
    if (ex_viz_window_open(&o, &w, err, len) != EX_OK)
        return -1;
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

/* Median step time (ms) and mean images/s of a log, its first two steps left out. */
typedef struct speed {
    double ms[100000];
    int n;
    double ips;
} speed;

static int on_rec(const ex_metrics_record *r, int64_t line, void *user)
{
    (void)line;
    speed *s = user;
    if (r->kind == EX_METRICS_STEP && r->step.global_step >= 2 && s->n < 100000) {
        s->ms[s->n++] = r->step.step_ms;
        s->ips += r->step.images_per_s;
    }
    return 0;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int run_search(const char *exapt, const char *extra, const char *dir, bool viz,
                      double *median_ms)
{
    char cmd[4096], path[1200], msg[256];
    snprintf(cmd, sizeof cmd, "mkdir -p runs && rm -rf %s && %s search %s --out %s%s > %s.log 2>&1",
             dir, exapt, extra, dir, viz ? " --viz --viz-exit" : "", dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "bench_viz_fps: failed: %s (see %s.log)\n", cmd, dir);
        return -1;
    }
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    speed *s = calloc(1, sizeof *s);
    if (!s || ex_metrics_read(path, on_rec, s, NULL, msg, sizeof msg) != EX_OK || s->n == 0) {
        free(s);
        return -1;
    }
    qsort(s->ms, (size_t)s->n, sizeof s->ms[0], cmp);
    *median_ms = s->ms[s->n / 2];
    free(s);
    return 0;
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

int main(int argc, char **argv)
{
    const char *exapt = NULL, *out = NULL;
    int frames = 300, pairs = 2;
    char extra[2048] = "--backend cpu --channels 4 --layers 3 --steps 2 --batch 16 --epochs 1 "
                       "--limit 640 --train-epochs 0";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--exapt") && i + 1 < argc)
            exapt = argv[++i];
        else if (!strcmp(argv[i], "--out") && i + 1 < argc)
            out = argv[++i];
        else if (!strcmp(argv[i], "--frames") && i + 1 < argc)
            frames = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--pairs") && i + 1 < argc)
            pairs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--")) {
            extra[0] = 0;
            for (i++; i < argc; i++)
                snprintf(extra + strlen(extra), sizeof extra - strlen(extra), "%s ", argv[i]);
        } else {
            fprintf(stderr, "usage: bench_viz_fps --exapt PATH [--frames N] [--pairs N] "
                            "[--out FILE] [-- search options]\n");
            return 2;
        }
    }
    char err[512] = "", cpu[256], command[4096] = "";
    for (int i = 0; i < argc; i++)
        snprintf(command + strlen(command), sizeof command - strlen(command), "%s%s", i ? " " : "",
                 argv[i]);
    double load0 = loadavg();
    ex_viz_model *m = NULL;
    if (ex_viz_model_new(&m, err, sizeof err) != EX_OK)
        return 1;
    fill(m, 10000);
    double fps = window_fps(m, frames, err, sizeof err);
    if (fps < 0) {
        fprintf(stderr, "bench_viz_fps: %s\n", err);
        return 1;
    }
    double off = offscreen_fps(m, frames);
    fprintf(stderr, "window: %.1f frames/s, offscreen drawing alone %.1f frames/s\n", fps, off);
    ex_viz_model_free(m);
    /* alternate the two so a change in the machine's load hits both alike */
    double base = 0, live = 0;
    int done = 0;
    for (int p = 0; exapt && p < pairs; p++, done++) {
        double a, b;
        if (run_search(exapt, extra, "runs/bench-viz-off", false, &a) ||
            run_search(exapt, extra, "runs/bench-viz-live", true, &b))
            return 1;
        fprintf(stderr, "pair %d: median step %.1f ms without the viewer, %.1f ms with it\n", p + 1,
                a, b);
        base += a;
        live += b;
    }
    machine(cpu, sizeof cpu);
    FILE *f = out ? fopen(out, "w") : stdout;
    if (!f)
        return 1;
    fprintf(f,
            "{\n  \"benchmark\": \"viz_fps\",\n  \"command\": \"%s\",\n"
            "  \"machine\": \"%s\",\n  \"loadavg_start\": %.2f,\n  \"loadavg_end\": %.2f,\n"
            "  \"display\": \"%s\",\n  \"window_fps\": %.1f,\n  \"offscreen_draw_fps\": %.1f,\n"
            "  \"frames\": %d,\n"
            "  \"history_steps\": 10000,\n  \"alpha\": \"both cells, 14 edges x 8 candidates\",\n",
            command, cpu, load0, loadavg(), getenv("DISPLAY") ? getenv("DISPLAY") : "", fps, off,
            frames);
    if (done)
        fprintf(f,
                "  \"search\": \"exapt search %s\",\n  \"pairs\": %d,\n"
                "  \"median_step_ms_without_viewer\": %.2f,\n"
                "  \"median_step_ms_with_live_viewer\": %.2f,\n"
                "  \"live_viewer_slowdown_percent\": %.2f\n",
                extra, done, base / done, live / done, 100.0 * (live - base) / base);
    else
        fprintf(f, "  \"search\": null\n");
    fprintf(f, "}\n");
    if (out)
        fclose(f);
    return 0;
}
