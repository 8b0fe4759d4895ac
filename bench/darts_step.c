/* bench_darts_step: the DARTS search step of exapt, timed, with the files a PyTorch
 * reference (bench/darts_step.py) needs to repeat the same step: the batch, the
 * weights and alpha before the step, everything after it, and the step's figures.
 *
 *   bench_darts_step --backend cuda --input 32x32x3 --batch 64 --channels 16 --layers 8
 *                    --iters 20 --out DIR
 *
 * writes DIR/batch.bin, DIR/init.safetensors, DIR/step1.safetensors, DIR/step1.json and
 * DIR/exapt.json (docs/bench.md, "DARTS search step against PyTorch"). */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, gmtime_r, mkdir */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "bench_time.h"
#include "exapt/exapt.h"
#include "exapt/search.h"

#define WARMUP 3
#define STEP_LR 0.025f /* DARTS's initial weight learning rate */
#define STEP_TAU 1.0f  /* ignored in darts mode */
#define DATA_SEED 0x5eedda7aULL
#define TWO_PI 6.283185307179586

typedef struct opts {
    const char *backend, *out, *input;
    int height, width, in_channels;
    int batch, channels, layers, iters;
    int profile;   /* also time one step node by node and report it by op */
    int recompute; /* ex_search_config.recompute; -1: the backend's default */
    int group;     /* 0: ex_search_config.no_group (every node launched on its own) */
    int mode;      /* ex_search_mode; -1: the default (darts) */
    int ncand;     /* 0: the default candidates */
    ex_cand cand[EX_MAX_CANDIDATES];
} opts;

typedef struct batch {
    float *train_x, *valid_x;
    int32_t *train_y, *valid_y;
    size_t pixels; /* floats of one x array */
    int n;
} batch;

typedef struct timing {
    double *ms;
    double median, min, mean;
    double syncs_per_step;
    double setup_ms, first_ms; /* building and planning the search; its first step (the
                                  backend records, or captures, the step there) */
    ex_search_setup phases;    /* setup_ms by phase */
} timing;

static void usage(FILE *f)
{
    fprintf(f, "usage: bench_darts_step [--backend NAME] [--input HxWxC] [--batch N] "
               "[--channels C]\n"
               "                        [--layers L] [--iters N] [--profile 0|1] "
               "[--mode darts|gdas|topk]\n"
               "                        [--cands NAME,NAME,...] [--recompute 0|1|2]\n"
               "                        [--group 0|1] --out DIR\n"
               "defaults: --backend auto --input 32x32x3 --batch 64 --channels 16 "
               "--layers 8 --iters 20 --profile 0 --mode darts, DARTS's 8 candidates\n"
               "--profile 1 times one more step node by node and reports it by op\n"
               "--recompute 0|1|2 keeps everything for the backward pass, recomputes the depthwise "
               "convolutions' outputs (1), or those and the batch norms' outputs that are cheap to "
               "make again (2; ex_graph_set_recompute_level); default: 1 where the backend says it "
               "is cheap (CUDA), else 0\n"
               "--group 0 launches every node on its own (default 1: the plan's groups)\n");
}

/* ---- arguments ---- */

static int parse_int(const char *s, int lo, int hi, int *v)
{
    char *end = NULL;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (errno || end == s || *end || x < lo || x > hi)
        return -1;
    *v = (int)x;
    return 0;
}

static int parse_input(const char *s, opts *o)
{
    char tail;
    if (sscanf(s, "%dx%dx%d%c", &o->height, &o->width, &o->in_channels, &tail) != 3)
        return -1;
    bool ok = o->height >= 4 && o->height <= 4096 && o->width >= 4 && o->width <= 4096 &&
              o->in_channels >= 1 && o->in_channels <= 64;
    return ok ? 0 : -1;
}

/* A comma-separated list of candidate names (genotype.h's). */
static int parse_cands(const char *s, opts *o)
{
    char buf[512];
    if (snprintf(buf, sizeof buf, "%s", s) >= (int)sizeof buf)
        return -1;
    o->ncand = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int c = ex_cand_parse(t);
        if (c < 0 || o->ncand == EX_MAX_CANDIDATES)
            return -1;
        o->cand[o->ncand++] = (ex_cand)c;
    }
    return o->ncand >= 2 ? 0 : -1;
}

static int parse_option(const char *key, const char *val, opts *o)
{
    if (!strcmp(key, "--backend"))
        o->backend = val;
    else if (!strcmp(key, "--out"))
        o->out = val;
    else if (!strcmp(key, "--input"))
        return (o->input = val, parse_input(val, o));
    else if (!strcmp(key, "--batch"))
        return parse_int(val, 2, 65536, &o->batch);
    else if (!strcmp(key, "--channels"))
        return parse_int(val, 2, 4096, &o->channels);
    else if (!strcmp(key, "--layers"))
        return parse_int(val, 1, 64, &o->layers);
    else if (!strcmp(key, "--iters"))
        return parse_int(val, 1, 100000, &o->iters);
    else if (!strcmp(key, "--profile"))
        return parse_int(val, 0, 1, &o->profile);
    else if (!strcmp(key, "--recompute"))
        return parse_int(val, 0, 2, &o->recompute);
    else if (!strcmp(key, "--group"))
        return parse_int(val, 0, 1, &o->group);
    else if (!strcmp(key, "--mode"))
        return (o->mode = ex_search_mode_parse(val)) < 0 ? -1 : 0;
    else if (!strcmp(key, "--cands"))
        return parse_cands(val, o);
    else
        return -1;
    return 0;
}

static int parse_args(int argc, char **argv, opts *o)
{
    *o = (opts){.backend = "auto",
                .input = "32x32x3",
                .height = 32,
                .width = 32,
                .in_channels = 3,
                .batch = 64,
                .channels = 16,
                .layers = 8,
                .iters = 20,
                .recompute = -1,
                .group = 1,
                .mode = -1};
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc || parse_option(argv[i], argv[i + 1], o)) {
            fprintf(stderr, "bench_darts_step: bad or incomplete option '%s'\n", argv[i]);
            return -1;
        }
        i++;
    }
    if (!o->out) {
        fprintf(stderr, "bench_darts_step: --out DIR is required\n");
        return -1;
    }
    return 0;
}

/* ---- the batch: fixed pseudo-random images ~ N(0, 1) and labels in [0, classes) ---- */

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform in (0, 1): never 0, so the logarithm below is finite. */
static double uniform(uint64_t *s)
{
    return ((double)(splitmix64(s) >> 11) + 0.5) * 0x1.0p-53;
}

static void fill_normal(float *x, size_t n, uint64_t *s)
{
    for (size_t i = 0; i < n; i += 2) {
        double r = sqrt(-2.0 * log(uniform(s))), t = TWO_PI * uniform(s);
        x[i] = (float)(r * cos(t));
        if (i + 1 < n)
            x[i + 1] = (float)(r * sin(t));
    }
}

static void fill_labels(int32_t *y, int n, int classes, uint64_t *s)
{
    for (int i = 0; i < n; i++)
        y[i] = (int32_t)(splitmix64(s) % (uint64_t)classes);
}

static void batch_free(batch *b)
{
    free(b->train_x);
    free(b->valid_x);
    free(b->train_y);
    free(b->valid_y);
}

static int batch_make(const ex_search_config *c, batch *b)
{
    b->n = c->batch;
    b->pixels = (size_t)c->batch * (size_t)c->in_channels * (size_t)c->height * (size_t)c->width;
    b->train_x = malloc(b->pixels * sizeof *b->train_x);
    b->valid_x = malloc(b->pixels * sizeof *b->valid_x);
    b->train_y = malloc((size_t)b->n * sizeof *b->train_y);
    b->valid_y = malloc((size_t)b->n * sizeof *b->valid_y);
    if (!b->train_x || !b->valid_x || !b->train_y || !b->valid_y)
        return -1;
    uint64_t s = DATA_SEED;
    fill_normal(b->train_x, b->pixels, &s);
    fill_labels(b->train_y, b->n, c->classes, &s);
    fill_normal(b->valid_x, b->pixels, &s);
    fill_labels(b->valid_y, b->n, c->classes, &s);
    return 0;
}

/* ---- files ---- */

static int path_in(char *buf, size_t len, const char *dir, const char *name)
{
    int n = snprintf(buf, len, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= len) {
        fprintf(stderr, "bench_darts_step: path %s/%s too long\n", dir, name);
        return -1;
    }
    return 0;
}

static int batch_write(const char *dir, const batch *b)
{
    char path[4096];
    if (path_in(path, sizeof path, dir, "batch.bin"))
        return -1;
    FILE *f = fopen(path, "wb");
    size_t n = (size_t)b->n;
    bool ok = f && fwrite(b->train_x, sizeof(float), b->pixels, f) == b->pixels &&
              fwrite(b->train_y, sizeof(int32_t), n, f) == n &&
              fwrite(b->valid_x, sizeof(float), b->pixels, f) == b->pixels &&
              fwrite(b->valid_y, sizeof(int32_t), n, f) == n;
    if (f && fclose(f))
        ok = false;
    if (!ok)
        fprintf(stderr, "bench_darts_step: writing %s: %s\n", path, strerror(errno));
    return ok ? 0 : -1;
}

static int json_write(const char *dir, const char *name, json_t *doc)
{
    char path[4096];
    int rc = doc ? path_in(path, sizeof path, dir, name) : -1;
    if (!rc && json_dump_file(doc, path, JSON_INDENT(2) | JSON_REAL_PRECISION(10))) {
        fprintf(stderr, "bench_darts_step: writing %s failed\n", path);
        rc = -1;
    }
    json_decref(doc);
    return rc;
}

static int save(ex_search *s, const char *dir, const char *name)
{
    char path[4096];
    if (path_in(path, sizeof path, dir, name))
        return -1;
    ex_status st = ex_search_save(s, path, NULL);
    if (st != EX_OK) {
        fprintf(stderr, "bench_darts_step: saving %s: %s\n", path, ex_search_error(s));
        return -1;
    }
    return 0;
}

/* ---- the step ---- */

static int step(ex_search *s, const batch *b, ex_search_stats *st)
{
    ex_status rc =
        ex_search_step(s, b->train_x, b->train_y, b->valid_x, b->valid_y, STEP_LR, STEP_TAU, st);
    if (rc != EX_OK) {
        fprintf(stderr, "bench_darts_step: step: %s\n", ex_search_error(s));
        return -1;
    }
    return 0;
}

/* The weights before, one step, everything after: what the PyTorch reference compares. */
static int first_step(ex_search *s, const batch *b, const char *dir, double *ms)
{
    ex_search_stats st;
    if (save(s, dir, "init.safetensors"))
        return -1;
    double t0 = now_ms();
    if (step(s, b, &st))
        return -1;
    *ms = now_ms() - t0;
    if (save(s, dir, "step1.safetensors"))
        return -1;
    json_t *doc = json_pack("{s:f, s:f, s:f, s:f, s:f, s:f}", "train_loss", (double)st.train_loss,
                            "valid_loss", (double)st.valid_loss, "train_acc", (double)st.train_acc,
                            "valid_acc", (double)st.valid_acc, "lr", (double)STEP_LR, "tau",
                            (double)STEP_TAU);
    return json_write(dir, "step1.json", doc);
}

static void summarise(timing *t, int iters)
{
    double *sorted = malloc((size_t)iters * sizeof *sorted), sum = 0;
    for (int i = 0; i < iters; i++)
        sum += t->ms[i];
    t->mean = sum / iters;
    if (!sorted) { /* the median needs a copy; without memory the mean stands in */
        t->median = t->min = t->mean;
        return;
    }
    memcpy(sorted, t->ms, (size_t)iters * sizeof *sorted);
    qsort(sorted, (size_t)iters, sizeof *sorted, cmp_double);
    t->min = sorted[0];
    t->median = iters % 2 ? sorted[iters / 2] : 0.5 * (sorted[iters / 2 - 1] + sorted[iters / 2]);
    free(sorted);
}

/* Whole steps as a caller sees them: upload of the batch, the planned step, the read-back
 * of the four figures. */
static int time_steps(ex_search *s, ex_backend *be, const batch *b, int iters, timing *t)
{
    ex_search_stats st;
    for (int i = 0; i < WARMUP; i++)
        if (step(s, b, &st))
            return -1;
    t->ms = malloc((size_t)iters * sizeof *t->ms);
    if (!t->ms)
        return -1;
    uint64_t syncs0 = ex_backend_host_syncs(be);
    for (int i = 0; i < iters; i++) {
        double t0 = now_ms();
        if (step(s, b, &st))
            return -1;
        t->ms[i] = now_ms() - t0;
    }
    t->syncs_per_step = (double)(ex_backend_host_syncs(be) - syncs0) / iters;
    summarise(t, iters);
    return 0;
}

/* ---- one step node by node ---- */

typedef struct op_row {
    int op, calls;
    double ms, bytes, flops;
} op_row;

static int cmp_row_ms(const void *a, const void *b)
{
    double x = ((const op_row *)a)->ms, y = ((const op_row *)b)->ms;
    return (x < y) - (x > y);
}

/* Sums the last profiled step's node times by engine op, slowest first. */
static int profile_rows(ex_plan *p, op_row *rows, double *total_ms)
{
    int n = 0, slot[EX_OP_COUNT];
    for (int o = 0; o < EX_OP_COUNT; o++)
        slot[o] = -1;
    *total_ms = 0;
    for (int64_t i = 0; i < ex_plan_node_count(p); i++) {
        ex_node_info in;
        if (ex_plan_node_info(p, i, &in) != EX_OK)
            return -1;
        if (in.skipped || in.ms <= 0)
            continue;
        if (slot[in.op] < 0)
            rows[slot[in.op] = n++] = (op_row){(int)in.op, 0, 0, 0, 0};
        op_row *r = &rows[slot[in.op]];
        r->calls++;
        r->ms += in.ms;
        r->bytes += (double)in.min_bytes;
        r->flops += (double)in.flops;
        *total_ms += in.ms;
    }
    qsort(rows, (size_t)n, sizeof *rows, cmp_row_ms);
    return n;
}

static int cmp_node_info(const void *a, const void *b)
{
    const ex_node_info *x = a, *y = b;
    if (x->op != y->op)
        return (x->op > y->op) - (x->op < y->op);
    return (x->min_bytes > y->min_bytes) - (x->min_bytes < y->min_bytes);
}

/* The profiled step's node times by op and size (the nodes' minimal traffic stands for
 * their shape): which shapes of an op are slow. */
static json_t *profile_by_size(ex_plan *p)
{
    int64_t n = ex_plan_node_count(p), m = 0;
    ex_node_info *in = malloc((size_t)(n > 0 ? n : 1) * sizeof *in);
    json_t *rows = json_array();
    for (int64_t i = 0; in && i < n; i++)
        if (ex_plan_node_info(p, i, &in[m]) == EX_OK && !in[m].skipped && in[m].ms > 0)
            m++;
    if (in)
        qsort(in, (size_t)m, sizeof *in, cmp_node_info);
    for (int64_t i = 0, j; i < m; i = j) {
        double ms = 0;
        for (j = i; j < m && !cmp_node_info(&in[i], &in[j]); j++)
            ms += in[j].ms;
        json_array_append_new(rows, json_pack("{s:s, s:I, s:I, s:f}", "op", ex_op_name(in[i].op),
                                              "min_bytes", (json_int_t)in[i].min_bytes, "calls",
                                              (json_int_t)(j - i), "ms", ms));
    }
    free(in);
    return rows;
}

/* One more step with every node timed (GPU backends launch node by node then, so the
 * sum exceeds a replayed step by the launch gaps): where the step's time goes. */
static json_t *profile_step(ex_search *s, const batch *b, double peak_gbs)
{
    ex_plan *p = ex_search_plan(s);
    op_row rows[EX_OP_COUNT];
    ex_search_stats st;
    double total = 0;
    if (ex_plan_set_profile(p, true) != EX_OK || step(s, b, &st))
        return NULL;
    ex_plan_set_profile(p, false);
    int n = profile_rows(p, rows, &total);
    if (n < 0)
        return NULL;
    json_t *ops = json_array();
    printf("%-22s %7s %10s %6s %9s %7s\n", "op", "calls", "ms", "share", "GB/s", "of peak");
    for (int i = 0; i < n; i++) {
        const op_row *r = &rows[i];
        double gbs = r->ms > 0 ? r->bytes / (r->ms * 1e6) : 0;
        printf("%-22s %7d %10.3f %5.1f%% %9.1f %6.1f%%\n", ex_op_name((ex_op)r->op), r->calls,
               r->ms, 100 * r->ms / total, gbs, peak_gbs > 0 ? 100 * gbs / peak_gbs : 0);
        json_array_append_new(ops,
                              json_pack("{s:s, s:i, s:f, s:f, s:f, s:f}", "op",
                                        ex_op_name((ex_op)r->op), "calls", r->calls, "ms", r->ms,
                                        "min_bytes", r->bytes, "flops", r->flops, "gbs", gbs));
    }
    printf("%-22s %7s %10.3f\n", "sum of nodes", "", total);
    return json_pack("{s:f, s:f, s:o, s:o}", "sum_ms", total, "peak_gbs", peak_gbs, "by_op", ops,
                     "by_op_size", profile_by_size(p));
}

/* ---- the step's floor ---- */

/* The backend's GEMM rate in GFLOP/s: the median of 10 square products of side n. */
static double gemm_gflops(ex_backend *be, int64_t n)
{
    ex_ctx *ctx = ex_ctx_new();
    int64_t ne[2] = {n, n};
    ex_tensor *a = ex_input(ctx, EX_F32, 2, ne, "a"), *b = ex_input(ctx, EX_F32, 2, ne, "b");
    ex_keep(ctx, ex_matmul(ctx, a, b));
    ex_plan *p = NULL;
    float *v = malloc((size_t)(n * n) * sizeof *v);
    double ms = 0;
    for (int64_t i = 0; v && i < n * n; i++)
        v[i] = (float)((i * 2654435761u) % 1000) / 500.0f - 1.0f; /* not zeros */
    bool ok = v && ex_graph_plan(ctx, be, NULL, &p) == EX_OK &&
              ex_plan_write(p, a, v, (size_t)(n * n) * sizeof *v) == EX_OK &&
              ex_plan_write(p, b, v, (size_t)(n * n) * sizeof *v) == EX_OK &&
              bench_median_run(p, 10, &ms) == EX_OK && ms > 0;
    free(v);
    ex_plan_free(p);
    ex_ctx_free(ctx);
    return ok ? 2.0 * (double)n * (double)n * (double)n / (ms * 1e6) : 0;
}

/* The fewest milliseconds the step could take on this device: each node's minimal traffic
 * (every input read once, every output written once) at the measured copy rate, or its
 * arithmetic at the measured GEMM rate, whichever is longer, summed over the nodes; and
 * the measured median step as a multiple of it. */
static json_t *floor_json(ex_backend *be, ex_search *s, double step_ms)
{
    double gbs = 0;
    if (ex_backend_measure_bandwidth(be, (uint64_t)256 << 20, &gbs) != EX_OK || gbs <= 0)
        return json_null();
    bool gpu = strcmp(ex_backend_get_caps(be)->name, "cpu") &&
               strcmp(ex_backend_get_caps(be)->name, "cpu-ref");
    int64_t side = gpu ? 4096 : 1024;
    double gflops = gemm_gflops(be, side);
    if (gflops <= 0)
        return json_null();
    ex_plan *p = ex_search_plan(s);
    double bytes = 0, flops = 0, bytes_ms = 0, flops_ms = 0, floor_ms = 0;
    int64_t nodes = 0;
    for (int64_t i = 0; i < ex_plan_node_count(p); i++) {
        ex_node_info in;
        if (ex_plan_node_info(p, i, &in) != EX_OK || in.skipped)
            continue;
        double b = (double)in.min_bytes / (gbs * 1e6), f = (double)in.flops / (gflops * 1e6);
        bytes += (double)in.min_bytes;
        flops += (double)in.flops;
        bytes_ms += b;
        flops_ms += f;
        floor_ms += b > f ? b : f;
        nodes++;
    }
    printf("floor: %lld nodes, %.1f MB at %.0f GB/s (%.3f ms), %.1f GFLOP at %.0f GFLOP/s "
           "(%.3f ms; GEMM of side %lld); per node the longer: %.3f ms; the step is %.1fx it\n",
           (long long)nodes, bytes / 1e6, gbs, bytes_ms, flops / 1e9, gflops, flops_ms,
           (long long)side, floor_ms, step_ms / floor_ms);
    return json_pack("{s:I, s:f, s:f, s:f, s:f, s:I, s:f, s:f, s:f, s:f}", "nodes",
                     (json_int_t)nodes, "min_bytes", bytes, "flops", flops, "peak_copy_gbs", gbs,
                     "gemm_gflops", gflops, "gemm_side", (json_int_t)side, "bytes_ms", bytes_ms,
                     "flops_ms", flops_ms, "floor_ms", floor_ms, "step_over_floor",
                     step_ms / floor_ms);
}

/* ---- the report ---- */

static json_t *config_json(const ex_search_config *c)
{
    json_t *cands = json_array();
    for (int k = 0; k < c->ncand; k++)
        json_array_append_new(cands, json_string(ex_cand_name(c->cand[k])));
    return json_pack(
        "{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:o, s:s, s:i, s:f, "
        "s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:I, s:b, s:b}",
        "in_channels", c->in_channels, "height", c->height, "width", c->width, "classes",
        c->classes, "batch", c->batch, "channels", c->channels, "layers", c->layers, "steps",
        c->steps, "multiplier", c->multiplier, "stem_multiplier", c->stem_multiplier, "candidates",
        cands, "mode", ex_search_mode_name(c->mode), "order", c->order, "lr", (double)STEP_LR,
        "momentum", (double)c->momentum, "weight_decay", (double)c->weight_decay, "grad_clip",
        (double)c->grad_clip, "arch_lr", (double)c->arch_lr, "arch_beta1", (double)c->arch_beta1,
        "arch_beta2", (double)c->arch_beta2, "arch_weight_decay", (double)c->arch_weight_decay,
        "seed", (json_int_t)c->seed, "recompute", c->recompute, "group", !c->no_group);
}

static json_t *timing_json(const timing *t, int iters)
{
    json_t *all = json_array();
    for (int i = 0; i < iters; i++)
        json_array_append_new(all, json_real(t->ms[i]));
    return json_pack("{s:i, s:i, s:f, s:f, s:f, s:f, s:o, s:f, s:f, s:f, s:f, s:f}", "warmup",
                     WARMUP, "iters", iters, "ms_median", t->median, "ms_min", t->min, "ms_mean",
                     t->mean, "host_syncs_per_step", t->syncs_per_step, "ms_all", all, "setup_ms",
                     t->setup_ms, "build_ms", t->phases.build_ms, "plan_ms", t->phases.plan_ms,
                     "init_ms", t->phases.init_ms, "first_step_ms", t->first_ms);
}

static json_t *memory_json(ex_search *s)
{
    ex_plan_stats ps;
    if (ex_plan_get_stats(ex_search_plan(s), &ps) != EX_OK)
        return json_null();
    return json_pack("{s:I, s:I, s:I, s:I, s:I}", "arena_bytes", (json_int_t)ps.arena_bytes,
                     "persistent_bytes", (json_int_t)ps.persistent_bytes, "planned_bytes",
                     (json_int_t)(ps.arena_bytes + ps.persistent_bytes), "nodes",
                     (json_int_t)ps.nodes, "launches",
                     (json_int_t)ex_plan_launch_count(ex_search_plan(s)));
}

/* What the backend holds and what recording the step took, where it counts them
 * (ex_backend_get_counters: Vulkan; CUDA device memory only): the device memory held,
 * descriptor sets, dispatches, barriers, host time. */
static json_t *counters_json(const ex_backend *be)
{
    ex_backend_counters k;
    if (ex_backend_get_counters(be, &k) != EX_OK)
        return json_null();
    return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f}", "device_allocations",
                     (json_int_t)k.device_allocations, "device_bytes", (json_int_t)k.device_bytes,
                     "device_objects", (json_int_t)k.device_objects, "descriptor_sets",
                     (json_int_t)k.descriptor_sets, "dispatches", (json_int_t)k.dispatches,
                     "barriers", (json_int_t)k.barriers, "inexact_bindings",
                     (json_int_t)k.inexact_bindings, "record_ms", k.record_ms);
}

static void utc_now(char *buf, size_t len)
{
    time_t t = time(NULL);
    struct tm tm;
    if (!gmtime_r(&t, &tm) || !strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm))
        snprintf(buf, len, "unknown");
}

static char *join_args(int argc, char **argv)
{
    size_t len = 1;
    for (int i = 0; i < argc; i++)
        len += strlen(argv[i]) + 1;
    char *s = calloc(len, 1);
    for (int i = 0; s && i < argc; i++) {
        if (i)
            strcat(s, " ");
        strcat(s, argv[i]);
    }
    return s;
}

static int report(const opts *o, const ex_search_config *c, ex_backend *be, ex_search *s,
                  const timing *t, json_t *profile, const char *date, const char *command)
{
    const ex_backend_caps *caps = ex_backend_get_caps(be);
    json_t *backend = json_pack("{s:s, s:s, s:i}", "name", caps->name, "device", caps->device,
                                "threads", caps->threads);
    json_t *doc = json_pack("{s:s, s:i, s:s, s:o, s:s, s:s, s:s, s:o, s:o, s:o}", "format",
                            "exapt-darts-step", "version", 1, "exapt_version", ex_version(),
                            "backend", backend, "date", date, "command", command ? command : "",
                            "input", o->input, "config", config_json(c), "timing",
                            timing_json(t, o->iters), "memory", memory_json(s));
    if (doc && profile)
        json_object_set(doc, "profile", profile);
    if (doc) {
        json_object_set_new(doc, "counters", counters_json(be));
        json_object_set_new(doc, "floor", floor_json(be, s, t->median));
    }
    return json_write(o->out, "exapt.json", doc);
}

/* ---- main ---- */

static int make_dir(const char *dir)
{
    if (mkdir(dir, 0777) && errno != EEXIST) {
        fprintf(stderr, "bench_darts_step: mkdir %s: %s\n", dir, strerror(errno));
        return -1;
    }
    return 0;
}

/* The search's settings; recompute as the search resolves its default on be, so that the
 * report says what ran. */
static void configure(const opts *o, const ex_backend *be, ex_search_config *c)
{
    ex_search_config_default(c); /* DARTS: first order, darts mode, 8 candidates */
    c->in_channels = o->in_channels;
    c->height = o->height;
    c->width = o->width;
    c->batch = o->batch;
    c->channels = o->channels;
    c->layers = o->layers;
    if (o->mode >= 0)
        c->mode = (ex_search_mode)o->mode;
    c->no_group = !o->group;
    c->recompute = o->recompute >= 0 ? o->recompute
                                     : !!(ex_backend_get_caps(be)->features & EX_FEAT_RECOMPUTE);
    if (o->ncand) {
        c->ncand = o->ncand;
        memcpy(c->cand, o->cand, (size_t)o->ncand * sizeof *c->cand);
    }
}

/* With --profile 1: the bandwidth to compare with, then the profiled step. */
static int profile_run(const opts *o, ex_backend *be, ex_search *s, const batch *b, json_t **out)
{
    double gbs = 0;
    if (!o->profile)
        return 0;
    if (ex_backend_measure_bandwidth(be, (uint64_t)256 << 20, &gbs) != EX_OK)
        gbs = 0; /* the table then shows GB/s alone */
    *out = profile_step(s, b, gbs);
    if (!*out)
        fprintf(stderr, "bench_darts_step: profiled step: %s\n", ex_search_error(s));
    return *out ? 0 : -1;
}

static int run(const opts *o, ex_backend *be, const char *date, const char *command)
{
    ex_search_config c;
    configure(o, be, &c);
    batch b = {0};
    timing t = {0};
    json_t *prof = NULL;
    ex_search *s = NULL;
    char msg[512];
    int rc = -1;
    double t0 = now_ms();
    if (batch_make(&c, &b)) {
        fprintf(stderr, "bench_darts_step: out of host memory\n");
    } else if (t0 = now_ms(), ex_search_new(&c, be, &s, msg, sizeof msg) != EX_OK) {
        fprintf(stderr, "bench_darts_step: %s\n", msg);
    } else if ((t.setup_ms = now_ms() - t0, t.phases = ex_search_setup_times(s),
                !batch_write(o->out, &b)) &&
               !first_step(s, &b, o->out, &t.first_ms) && !time_steps(s, be, &b, o->iters, &t) &&
               !profile_run(o, be, s, &b, &prof) &&
               !report(o, &c, be, s, &t, prof, date, command)) {
        printf("exapt %s %s %s, %d candidates: %.3f ms/step median (min %.3f), %.1f host "
               "syncs/step; setup %.1f ms (build %.1f, plan %.1f, initialise %.1f), first "
               "step %.1f ms\n",
               ex_backend_get_caps(be)->name, o->input, ex_search_mode_name(c.mode), c.ncand,
               t.median, t.min, t.syncs_per_step, t.setup_ms, t.phases.build_ms, t.phases.plan_ms,
               t.phases.init_ms, t.first_ms);
        rc = 0;
    }
    json_decref(prof);
    free(t.ms);
    ex_search_free(s);
    batch_free(&b);
    return rc;
}

int main(int argc, char **argv)
{
    opts o;
    if (parse_args(argc, argv, &o)) {
        usage(stderr);
        return 2;
    }
    char date[32], msg[512];
    utc_now(date, sizeof date);
    if (make_dir(o.out))
        return 1;
    ex_backend *be = NULL;
    if (ex_backend_open(o.backend, &be, msg, sizeof msg) != EX_OK) {
        fprintf(stderr, "bench_darts_step: backend %s: %s\n", o.backend, msg);
        return 1;
    }
    char *command = join_args(argc, argv);
    int rc = run(&o, be, date, command);
    free(command);
    ex_backend_close(be);
    return rc ? 1 : 0;
}
