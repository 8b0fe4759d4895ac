/* The metrics log: every record kind round-trips, the header rule, the parser on every
 * class of malformed line, the reader's tolerance (empty file, torn last line, unknown
 * types, over-long lines), live following, and resume's crash-safe cut. */
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
#include <sys/stat.h>
#include <unistd.h>

#include "exapt/metrics.h"

typedef struct scratch {
    char dir[64];
    char path[128];
} scratch;

static int setup(void **state)
{
    scratch *s = calloc(1, sizeof *s);
    snprintf(s->dir, sizeof s->dir, "/tmp/exapt-mt-XXXXXX");
    if (!s || !mkdtemp(s->dir))
        return -1;
    snprintf(s->path, sizeof s->path, "%s/metrics.jsonl", s->dir);
    *state = s;
    return 0;
}

static int teardown(void **state)
{
    scratch *s = *state;
    char p[200];
    const char *names[] = {"metrics.jsonl", "metrics.jsonl.tmp", "other.jsonl"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        snprintf(p, sizeof p, "%s/%s", s->dir, names[i]);
        remove(p);
    }
    assert_int_equal(rmdir(s->dir), 0);
    free(s);
    return 0;
}

static void append_raw(const char *path, const char *text)
{
    FILE *f = fopen(path, "ab");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = calloc(1, (size_t)n + 1);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    return buf;
}

/* ---- sample records ---- */

static const char *const cands[8] = {"none",         "max_pool_3x3", "avg_pool_3x3",
                                     "skip_connect", "sep_conv_3x3", "sep_conv_5x5",
                                     "dil_conv_3x3", "dil_conv_5x5"};

static void sample_header(ex_metrics_header *h)
{
    memset(h, 0, sizeof *h);
    snprintf(h->config, sizeof h->config, "{\"batch\":64,\"lr\":0.025,\"mode\":\"darts\"}");
    h->n_candidates = 8;
    for (int i = 0; i < 8; i++)
        snprintf(h->candidates[i], sizeof h->candidates[i], "%s", cands[i]);
    for (int node = 0, e = 0; node < 4; node++)
        for (int in = 0; in < 2 + node; in++, e++) {
            h->edges[e][0] = node;
            h->edges[e][1] = in;
            h->n_edges = e + 1;
        }
    snprintf(h->backend, sizeof h->backend, "cpu");
    snprintf(h->device, sizeof h->device, "Intel® Xeon \"quoted\"");
    h->peak_gbs = 12.5;
    snprintf(h->mode, sizeof h->mode, "darts");
}

static void sample_step(ex_metrics_step *s, int64_t gs, bool cells)
{
    memset(s, 0, sizeof *s);
    s->epoch = gs / 10;
    s->step = gs % 10;
    s->global_step = gs;
    s->lr = 0.025;
    s->train_loss = 2.302585f;
    s->train_acc = 0.125;
    s->has_valid = gs % 2 == 0;
    s->valid_loss = 2.25;
    s->valid_acc = 0.0625;
    s->images_per_s = 1234.5;
    s->step_ms = 51.75;
    s->has_tau = gs % 3 == 0;
    s->tau = 10.0;
    if (cells) { /* and a data-parallel step of three ranks */
        s->n_ranks = 3;
        for (int r = 0; r < 3; r++)
            s->rank_step_ms[r] = 50.5 + r;
        s->has_alphas = s->has_active = true;
        s->n_edges = 14;
        s->n_cands = 8;
        for (int e = 0; e < 14; e++)
            for (int c = 0; c < 8; c++) {
                s->alpha_normal[e][c] = 1.0f / 8 + (float)(e - c) * 1e-4f;
                s->alpha_reduce[e][c] = 1.0f / 3 + (float)c * 1e-3f;
                s->active_normal[e][c] = (uint8_t)((e + c) % 2);
                s->active_reduce[e][c] = 1;
            }
    }
}

static void sample_profile(ex_metrics_profile *p, int64_t gs)
{
    memset(p, 0, sizeof *p);
    p->global_step = gs;
    p->n_ops = 2;
    snprintf(p->ops[0].op, sizeof p->ops[0].op, "conv2d");
    p->ops[0].ms = 3.5;
    p->ops[0].gbs = 250.25;
    p->ops[0].calls = 17;
    snprintf(p->ops[1].op, sizeof p->ops[1].op, "mixed_sum");
    p->ops[1].ms = 0.75;
    p->ops[1].gbs = 900;
    p->ops[1].calls = 28;
    p->n_candidates = 1;
    snprintf(p->candidates[0].candidate, sizeof p->candidates[0].candidate, "sep_conv_3x3");
    p->candidates[0].ms = 1.5;
    p->candidates[0].gbs = 300;
}

static const char genotype_text[] =
    "Genotype(normal=[('sep_conv_3x3', 0), ('sep_conv_3x3', 1)], normal_concat=[2], "
    "reduce=[('max_pool_3x3', 0), ('max_pool_3x3', 1)], reduce_concat=[2])";
static const char genotype_json[] =
    "{\"format\":\"exapt-genotype\",\"version\":1,\"steps\":1,\"normal\":[[\"sep_conv_3x3\",0],"
    "[\"sep_conv_3x3\",1]],\"normal_concat\":[2],\"reduce\":[[\"max_pool_3x3\",0],"
    "[\"max_pool_3x3\",1]],\"reduce_concat\":[2]}";

/* ---- collecting what a read delivers ---- */

typedef struct seen {
    int n;
    ex_metrics_record rec[40];
    int64_t line[40];
    int stop_after;
} seen;

static int collect(const ex_metrics_record *rec, int64_t line, void *user)
{
    seen *s = user;
    if (s->n < 40) {
        s->rec[s->n] = *rec;
        s->line[s->n] = line;
    }
    s->n++;
    return s->stop_after && s->n >= s->stop_after;
}

static seen *read_all(const char *path, ex_metrics_stats *st)
{
    seen *s = calloc(1, sizeof *s);
    char msg[256];
    ex_status r = ex_metrics_read(path, collect, s, st, msg, sizeof msg);
    if (r != EX_OK)
        fail_msg("read: %s", msg);
    return s;
}

/* ---- round trip ---- */

static void write_sample_log(const char *path)
{
    ex_metrics_writer *w = NULL;
    char msg[256];
    assert_int_equal(ex_metrics_open(path, EX_METRICS_NEW, &w, msg, sizeof msg), EX_OK);
    assert_true(ex_metrics_needs_header(w));
    ex_metrics_header h;
    sample_header(&h);
    assert_int_equal(ex_metrics_write_header(w, &h, msg, sizeof msg), EX_OK);
    assert_false(ex_metrics_needs_header(w));
    ex_metrics_step *s = malloc(sizeof *s);
    sample_step(s, 0, true);
    s->train_loss = NAN;
    s->tau = INFINITY;
    assert_int_equal(ex_metrics_write_step(w, s, msg, sizeof msg), EX_OK);
    sample_step(s, 1, false);
    assert_int_equal(ex_metrics_write_step(w, s, msg, sizeof msg), EX_OK);
    free(s);
    ex_metrics_profile *p = malloc(sizeof *p);
    sample_profile(p, 1);
    assert_int_equal(ex_metrics_write_profile(w, p, msg, sizeof msg), EX_OK);
    free(p);
    ex_metrics_epoch e = {0, 2.0, 0.25, 2.1, 0.2, 61.5, ""};
    snprintf(e.genotype, sizeof e.genotype, "%s", genotype_text);
    assert_int_equal(ex_metrics_write_epoch(w, &e, msg, sizeof msg), EX_OK);
    ex_metrics_genotype g = {0, "", ""};
    snprintf(g.text, sizeof g.text, "%s", genotype_text);
    snprintf(g.json, sizeof g.json, "%s", genotype_json);
    assert_int_equal(ex_metrics_write_genotype(w, &g, msg, sizeof msg), EX_OK);
    assert_int_equal(ex_metrics_sync(w, msg, sizeof msg), EX_OK);
    assert_int_equal(ex_metrics_close(w, msg, sizeof msg), EX_OK);
}

static void check_header(const ex_metrics_header *got)
{
    ex_metrics_header want;
    sample_header(&want);
    assert_int_equal(got->version, 1);
    assert_string_equal(got->config, want.config);
    assert_int_equal(got->n_candidates, 8);
    for (int i = 0; i < 8; i++)
        assert_string_equal(got->candidates[i], cands[i]);
    assert_int_equal(got->n_edges, 14);
    assert_memory_equal(got->edges, want.edges, sizeof want.edges);
    assert_string_equal(got->backend, "cpu");
    assert_string_equal(got->device, want.device);
    assert_true(got->peak_gbs == 12.5);
    assert_string_equal(got->mode, "darts");
    /* the writer's clock: YYYY-MM-DDTHH:MM:SSZ */
    assert_int_equal(strlen(got->time), 20);
    assert_true(got->time[4] == '-' && got->time[10] == 'T' && got->time[19] == 'Z');
}

static void check_steps(const ex_metrics_step *a, const ex_metrics_step *b)
{
    ex_metrics_step *want = malloc(sizeof *want);
    sample_step(want, 0, true);
    assert_int_equal(a->global_step, 0);
    assert_true(isnan(a->train_loss)); /* NaN and infinity come back as NaN */
    assert_true(a->has_tau && isnan(a->tau));
    assert_true(a->has_valid && a->valid_acc == 0.0625);
    assert_true(a->lr == 0.025 && a->images_per_s == 1234.5 && a->step_ms == 51.75);
    assert_true(a->has_alphas && a->has_active);
    assert_int_equal(a->n_edges, 14);
    assert_int_equal(a->n_cands, 8);
    assert_int_equal(a->n_ranks, 3);
    assert_true(a->rank_step_ms[0] == 50.5 && a->rank_step_ms[2] == 52.5);
    /* float32 values survive their 9 digits exactly */
    assert_memory_equal(a->alpha_normal, want->alpha_normal, sizeof want->alpha_normal);
    assert_memory_equal(a->alpha_reduce, want->alpha_reduce, sizeof want->alpha_reduce);
    assert_memory_equal(a->active_normal, want->active_normal, sizeof want->active_normal);
    assert_memory_equal(a->active_reduce, want->active_reduce, sizeof want->active_reduce);
    assert_true(b->global_step == 1 && b->epoch == 0 && b->step == 1);
    assert_true((float)b->train_loss == 2.302585f && b->train_acc == 0.125);
    assert_false(b->has_valid || b->has_tau || b->has_alphas || b->has_active);
    assert_int_equal(b->n_ranks, 0);
    assert_int_equal(b->n_edges, 0);
    free(want);
}

static void round_trip(void **state)
{
    scratch *sc = *state;
    write_sample_log(sc->path);
    ex_metrics_stats st;
    seen *s = read_all(sc->path, &st);
    assert_int_equal(s->n, 6);
    assert_int_equal(st.records, 6);
    assert_int_equal(st.lines, 6);
    assert_int_equal(st.bad + st.unknown, 0);
    assert_false(st.truncated);
    const ex_metrics_kind kinds[6] = {EX_METRICS_HEADER,  EX_METRICS_STEP,  EX_METRICS_STEP,
                                      EX_METRICS_PROFILE, EX_METRICS_EPOCH, EX_METRICS_GENOTYPE};
    for (int i = 0; i < 6; i++) {
        assert_int_equal(s->rec[i].kind, kinds[i]);
        assert_int_equal(s->line[i], i + 1);
    }
    assert_string_equal(s->rec[1].type, "step");
    check_header(&s->rec[0].header);
    check_steps(&s->rec[1].step, &s->rec[2].step);
    ex_metrics_profile want;
    sample_profile(&want, 1);
    const ex_metrics_profile *p = &s->rec[3].profile;
    assert_int_equal(p->n_ops, 2);
    assert_string_equal(p->ops[1].op, "mixed_sum");
    assert_true(p->ops[0].ms == 3.5 && p->ops[0].gbs == 250.25 && p->ops[1].calls == 28);
    assert_string_equal(p->candidates[0].candidate, "sep_conv_3x3");
    assert_true(p->candidates[0].gbs == 300);
    const ex_metrics_epoch *e = &s->rec[4].epoch;
    assert_true(e->seconds == 61.5 && e->valid_loss == 2.1);
    assert_string_equal(e->genotype, genotype_text);
    assert_string_equal(s->rec[5].genotype.text, genotype_text);
    assert_string_equal(s->rec[5].genotype.json, genotype_json);
    char *all = slurp(sc->path);
    size_t n = strlen(all);
    assert_true(n > 0 && all[n - 1] == '\n');
    assert_int_equal(st.end_offset, (int64_t)n);
    free(all);
    free(s);
}

/* Records whose value is fixed by the spec, byte for byte. */
static void exact_lines(void **state)
{
    scratch *sc = *state;
    ex_metrics_writer *w = NULL;
    char msg[256];
    assert_int_equal(ex_metrics_open(sc->path, EX_METRICS_NEW, &w, msg, sizeof msg), EX_OK);
    ex_metrics_header h;
    memset(&h, 0, sizeof h);
    snprintf(h.backend, sizeof h.backend, "cpu");
    snprintf(h.mode, sizeof h.mode, "train");
    snprintf(h.time, sizeof h.time, "2024-01-02T03:04:05Z");
    assert_int_equal(ex_metrics_write_header(w, &h, msg, sizeof msg), EX_OK);
    ex_metrics_step *s = calloc(1, sizeof *s);
    s->epoch = 1;
    s->step = 2;
    s->global_step = 3;
    s->lr = 0.1;
    s->train_loss = 1.5;
    s->images_per_s = 100;
    s->step_ms = NAN;
    assert_int_equal(ex_metrics_write_step(w, s, msg, sizeof msg), EX_OK);
    free(s);
    assert_int_equal(ex_metrics_close(w, msg, sizeof msg), EX_OK);
    char *all = slurp(sc->path);
    assert_string_equal(
        all, "{\"type\":\"header\",\"format\":\"exapt-metrics\",\"version\":1,\"config\":{},"
             "\"candidates\":[],\"edges\":[],\"backend\":\"cpu\",\"device\":\"\",\"peak_gbs\":0.0,"
             "\"mode\":\"train\",\"time\":\"2024-01-02T03:04:05Z\"}\n"
             "{\"type\":\"step\",\"epoch\":1,\"step\":2,\"global_step\":3,\"lr\":0.1,"
             "\"train_loss\":1.5,\"train_acc\":0.0,\"images_per_s\":100.0,\"step_ms\":null}\n");
    free(all);
}

/* ---- writer rules ---- */

static void writer_rules(void **state)
{
    scratch *sc = *state;
    ex_metrics_writer *w = NULL;
    char msg[256];
    assert_int_equal(ex_metrics_open(sc->path, EX_METRICS_NEW, &w, msg, sizeof msg), EX_OK);
    ex_metrics_step *s = malloc(sizeof *s);
    sample_step(s, 0, false);
    assert_int_equal(ex_metrics_write_step(w, s, msg, sizeof msg), EX_ERR_STATE);
    assert_non_null(strstr(msg, "header"));
    ex_metrics_header h;
    sample_header(&h);
    h.n_edges = EX_METRICS_MAX_EDGES + 1;
    assert_int_equal(ex_metrics_write_header(w, &h, msg, sizeof msg), EX_ERR_ARG);
    sample_header(&h);
    snprintf(h.config, sizeof h.config, "[1]");
    assert_int_equal(ex_metrics_write_header(w, &h, msg, sizeof msg), EX_ERR_ARG);
    assert_non_null(strstr(msg, "config"));
    sample_header(&h);
    memset(h.backend, 'x', sizeof h.backend); /* no terminating NUL */
    assert_int_equal(ex_metrics_write_header(w, &h, msg, sizeof msg), EX_ERR_ARG);
    sample_header(&h);
    snprintf(h.device, sizeof h.device, "bad \xff utf-8");
    assert_int_equal(ex_metrics_write_header(w, &h, msg, sizeof msg), EX_ERR_ARG);
    assert_non_null(strstr(msg, "device"));
    sample_header(&h);
    h.n_candidates = -1;
    assert_int_equal(ex_metrics_write_header(w, &h, msg, sizeof msg), EX_ERR_ARG);
    sample_header(&h);
    assert_int_equal(ex_metrics_write_header(w, &h, msg, sizeof msg), EX_OK);
    assert_int_equal(ex_metrics_write_header(w, &h, msg, sizeof msg), EX_ERR_STATE);
    sample_step(s, 0, true);
    s->n_cands = 13;
    assert_int_equal(ex_metrics_write_step(w, s, msg, sizeof msg), EX_ERR_ARG);
    ex_metrics_genotype g = {0, "x", "not json"};
    assert_int_equal(ex_metrics_write_genotype(w, &g, msg, sizeof msg), EX_ERR_ARG);
    ex_metrics_profile *p = malloc(sizeof *p);
    sample_profile(p, 0);
    p->n_ops = EX_METRICS_MAX_OPS + 1;
    assert_int_equal(ex_metrics_write_profile(w, p, msg, sizeof msg), EX_ERR_ARG);
    assert_int_equal(ex_metrics_write_step(NULL, s, msg, sizeof msg), EX_ERR_ARG);
    assert_int_equal(ex_metrics_write_step(w, NULL, msg, sizeof msg), EX_ERR_ARG);
    free(p);
    free(s);
    assert_int_equal(ex_metrics_close(w, msg, sizeof msg), EX_OK);
    assert_int_equal(ex_metrics_close(NULL, msg, sizeof msg), EX_OK);
    /* only the one good header reached the file */
    ex_metrics_stats st;
    free(read_all(sc->path, &st));
    assert_int_equal(st.lines, 1);
    assert_int_equal(st.records, 1);
    /* a new log truncates the old one */
    assert_int_equal(ex_metrics_open(sc->path, EX_METRICS_NEW, &w, msg, sizeof msg), EX_OK);
    assert_int_equal(ex_metrics_close(w, msg, sizeof msg), EX_OK);
    free(read_all(sc->path, &st));
    assert_int_equal(st.lines, 0);
    assert_int_equal(ex_metrics_open(sc->path, -2, &w, msg, sizeof msg), EX_ERR_ARG);
    assert_null(w);
    assert_int_equal(ex_metrics_open(sc->dir, EX_METRICS_NEW, &w, msg, sizeof msg), EX_ERR_IO);
}

/* A full disk fails the record with an I/O error instead of tearing the log. */
static void disk_full(void **state)
{
    (void)state;
    ex_metrics_writer *w = NULL;
    char msg[256];
    assert_int_equal(ex_metrics_open("/dev/full", EX_METRICS_NEW, &w, msg, sizeof msg), EX_OK);
    ex_metrics_header h;
    sample_header(&h);
    assert_int_equal(ex_metrics_write_header(w, &h, msg, sizeof msg), EX_ERR_IO);
    assert_non_null(strstr(msg, "/dev/full"));
    assert_true(ex_metrics_needs_header(w));
    ex_metrics_close(w, msg, sizeof msg); /* syncing a device may fail too; either is fine */
}

/* ---- parser ---- */

typedef struct bad_line {
    const char *line;
    ex_status want;
    const char *needle;
} bad_line;

#define HDR                                                                                        \
    "\"type\":\"header\",\"format\":\"exapt-metrics\",\"version\":1,\"config\":{},"                \
    "\"candidates\":[],\"edges\":[],\"backend\":\"cpu\",\"device\":\"d\",\"peak_gbs\":1,"          \
    "\"mode\":\"darts\",\"time\":\"t\""
#define STEP                                                                                       \
    "\"type\":\"step\",\"epoch\":0,\"step\":0,\"global_step\":0,\"lr\":0.1,\"train_loss\":1,"      \
    "\"train_acc\":0,\"images_per_s\":1,\"step_ms\":1"

static void parser_rejects(void **state)
{
    (void)state;
    char long_name[64], long_config[EX_METRICS_CONFIG_MAX + 160], many_ops[8192];
    memset(long_name, 'n', 40);
    long_name[40] = 0;
    char cand_line[256];
    snprintf(cand_line, sizeof cand_line,
             "{\"type\":\"header\",\"format\":\"exapt-metrics\",\"version\":1,\"config\":{},"
             "\"candidates\":[\"%s\"],\"edges\":[],\"backend\":\"\",\"device\":\"\","
             "\"peak_gbs\":1,\"mode\":\"\",\"time\":\"\"}",
             long_name);
    int k = snprintf(long_config, sizeof long_config,
                     "{\"type\":\"header\",\"format\":\"exapt-metrics\",\"version\":1,"
                     "\"config\":{\"x\":\"");
    memset(long_config + k, 'c', EX_METRICS_CONFIG_MAX);
    snprintf(long_config + k + EX_METRICS_CONFIG_MAX, 64, "\"},\"candidates\":[]}");
    k = snprintf(many_ops, sizeof many_ops, "{\"type\":\"profile\",\"global_step\":1,\"ops\":[");
    for (int i = 0; i <= EX_METRICS_MAX_OPS; i++)
        k += snprintf(many_ops + k, sizeof many_ops - (size_t)k,
                      "%s{\"op\":\"a\",\"ms\":1,\"gbs\":1,\"calls\":1}", i ? "," : "");
    snprintf(many_ops + k, sizeof many_ops - (size_t)k, "],\"candidates\":[]}");
    char rows[8192];
    k = snprintf(rows, sizeof rows, "{" STEP ",\"alphas\":{\"normal\":[");
    for (int i = 0; i <= EX_METRICS_MAX_EDGES; i++)
        k += snprintf(rows + k, sizeof rows - (size_t)k, "%s[0.5]", i ? "," : "");
    snprintf(rows + k, sizeof rows - (size_t)k, "],\"reduce\":[]}}");

    const bad_line cases[] = {
        {"", EX_ERR_FORMAT, "not JSON"},
        {"{\"type\":\"step\"", EX_ERR_FORMAT, "not JSON"},
        {"[1]", EX_ERR_FORMAT, "not a JSON object"},
        {"{}", EX_ERR_FORMAT, "type"},
        {"{\"type\":3}", EX_ERR_FORMAT, "type"},
        {"{\"type\":\"checkpoint\",\"path\":\"x\"}", EX_ERR_UNSUPPORTED, "checkpoint"},
        {"{\"type\":\"header\",\"format\":\"exapt-metrics\",\"version\":2}", EX_ERR_UNSUPPORTED,
         "version 2"},
        {"{\"type\":\"header\",\"format\":\"exapt-metrics\",\"version\":0}", EX_ERR_FORMAT,
         "version 0"},
        {"{\"type\":\"header\",\"format\":\"other\",\"version\":1}", EX_ERR_FORMAT, "format"},
        {"{" HDR ",\"config\":[]}", EX_ERR_FORMAT, "duplicate"},
        {"{\"type\":\"header\",\"format\":\"exapt-metrics\",\"version\":1,\"config\":[]}",
         EX_ERR_FORMAT, "config"},
        {cand_line, EX_ERR_FORMAT, "candidates"},
        {long_config, EX_ERR_FORMAT, "config"},
        {"{\"type\":\"header\",\"format\":\"exapt-metrics\",\"version\":1,\"config\":{},"
         "\"candidates\":[],\"edges\":[[0]]}",
         EX_ERR_FORMAT, "edges"},
        {"{\"type\":\"header\",\"format\":\"exapt-metrics\",\"version\":1,\"config\":{},"
         "\"candidates\":[],\"edges\":[],\"backend\":7}",
         EX_ERR_FORMAT, "backend"},
        {"{\"type\":\"step\",\"epoch\":0}", EX_ERR_FORMAT, "\"step\""},
        {"{\"type\":\"step\",\"epoch\":0.5,\"step\":0}", EX_ERR_FORMAT, "epoch"},
        {"{" STEP ",\"lr\":\"fast\"}", EX_ERR_FORMAT, "duplicate"},
        {"{\"type\":\"step\",\"epoch\":0,\"step\":0,\"global_step\":0,\"lr\":\"fast\"}",
         EX_ERR_FORMAT, "lr"},
        {"{" STEP ",\"valid_loss\":1}", EX_ERR_FORMAT, "valid_acc"},
        {"{" STEP ",\"tau\":\"hot\"}", EX_ERR_FORMAT, "tau"},
        {"{" STEP ",\"rank_step_ms\":[]}", EX_ERR_FORMAT, "rank_step_ms"},
        {"{" STEP ",\"rank_step_ms\":5}", EX_ERR_FORMAT, "rank_step_ms"},
        {"{" STEP ",\"rank_step_ms\":[1,\"slow\"]}", EX_ERR_FORMAT, "rank_step_ms"},
        {"{" STEP ",\"alphas\":[]}", EX_ERR_FORMAT, "alphas"},
        {"{" STEP ",\"alphas\":{\"normal\":[[1,2],[3]],\"reduce\":[[1,2],[3,4]]}}", EX_ERR_FORMAT,
         "alphas"},
        {"{" STEP ",\"alphas\":{\"normal\":[[1,2]],\"reduce\":[[1,2],[3,4]]}}", EX_ERR_FORMAT,
         "alphas"},
        {"{" STEP ",\"alphas\":{\"normal\":[[1,2,3,4,5,6,7,8,9,10,11,12,13]],\"reduce\":[]}}",
         EX_ERR_FORMAT, "alphas"},
        {"{" STEP ",\"alphas\":{\"normal\":[[\"x\"]],\"reduce\":[[1]]}}", EX_ERR_FORMAT, "alphas"},
        {"{" STEP ",\"alphas\":{\"normal\":[[1]]}}", EX_ERR_FORMAT, "alphas"},
        {rows, EX_ERR_FORMAT, "alphas"},
        {"{" STEP ",\"alphas\":{\"normal\":[[1]],\"reduce\":[[1]]},"
         "\"active\":{\"normal\":[[1,1]],\"reduce\":[[1,1]]}}",
         EX_ERR_FORMAT, "active"},
        {"{" STEP ",\"active\":{\"normal\":[[2]],\"reduce\":[[1]]}}", EX_ERR_FORMAT, "active"},
        {"{\"type\":\"epoch\",\"epoch\":1,\"train_loss\":1,\"train_acc\":1,\"valid_loss\":1,"
         "\"valid_acc\":1,\"seconds\":1,\"genotype\":5}",
         EX_ERR_FORMAT, "genotype"},
        {"{\"type\":\"epoch\",\"epoch\":1,\"train_loss\":1}", EX_ERR_FORMAT, "train_acc"},
        {"{\"type\":\"profile\",\"global_step\":1,\"ops\":[1],\"candidates\":[]}", EX_ERR_FORMAT,
         "ops"},
        {"{\"type\":\"profile\",\"global_step\":1,\"ops\":[{\"op\":\"a\",\"ms\":1,\"gbs\":1}],"
         "\"candidates\":[]}",
         EX_ERR_FORMAT, "calls"},
        {"{\"type\":\"profile\",\"global_step\":1,\"ops\":[]}", EX_ERR_FORMAT, "candidates"},
        {many_ops, EX_ERR_FORMAT, "ops"},
        {"{\"type\":\"genotype\",\"epoch\":1,\"text\":\"x\",\"json\":\"{}\"}", EX_ERR_FORMAT,
         "json"},
        {"{\"type\":\"genotype\",\"epoch\":1,\"json\":{}}", EX_ERR_FORMAT, "text"},
        {"{\"type\":\"step\",\"a\":\"\\u0000\"}", EX_ERR_FORMAT, "not JSON"},
    };
    ex_metrics_record *rec = malloc(sizeof *rec);
    char msg[256];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        msg[0] = 0;
        ex_status st =
            ex_metrics_parse_line(cases[i].line, strlen(cases[i].line), rec, msg, sizeof msg);
        if (st != cases[i].want || !strstr(msg, cases[i].needle))
            fail_msg("case %zu: status %d (want %d), message '%s'", i, st, cases[i].want, msg);
    }
    ex_status st = ex_metrics_parse_line("{\"type\":\"checkpoint\"}", 21, rec, msg, sizeof msg);
    assert_int_equal(st, EX_ERR_UNSUPPORTED);
    assert_int_equal(rec->kind, EX_METRICS_UNKNOWN);
    assert_string_equal(rec->type, "checkpoint");
    /* the good lines pass, and every proper prefix of them fails cleanly */
    const char *good[] = {"{" HDR "}", "{" STEP ",\"alphas\":{\"normal\":[[0.5,null]],"
                                       "\"reduce\":[[1,2]]},\"active\":{\"normal\":[[true,0]],"
                                       "\"reduce\":[[1,false]]}}"};
    for (size_t g = 0; g < 2; g++) {
        assert_int_equal(ex_metrics_parse_line(good[g], strlen(good[g]), rec, msg, sizeof msg),
                         EX_OK);
        for (size_t n = 0; n < strlen(good[g]); n++)
            assert_int_equal(ex_metrics_parse_line(good[g], n, rec, msg, sizeof msg),
                             EX_ERR_FORMAT);
    }
    assert_int_equal(ex_metrics_parse_line(good[1], strlen(good[1]), rec, msg, sizeof msg), EX_OK);
    assert_true(isnan(rec->step.alpha_normal[0][1]));
    assert_int_equal(rec->step.active_normal[0][0], 1);
    assert_int_equal(rec->step.active_reduce[0][1], 0);
    free(rec);
}

/* ---- reader ---- */

static void reader_tolerates(void **state)
{
    scratch *sc = *state;
    char msg[256];
    ex_metrics_stats st;
    /* missing and empty files */
    assert_int_equal(ex_metrics_read(sc->path, NULL, NULL, &st, msg, sizeof msg), EX_ERR_IO);
    assert_non_null(strstr(msg, sc->path));
    append_raw(sc->path, "");
    free(read_all(sc->path, &st));
    assert_true(st.lines == 0 && st.records == 0 && !st.truncated && st.end_offset == 0);

    append_raw(sc->path, "{" HDR "}\n");
    append_raw(sc->path, "{" STEP "}\n");
    append_raw(sc->path, "this is not json\n");
    append_raw(sc->path, "\n");
    append_raw(sc->path, "{\"type\":\"future_kind\",\"x\":1}\n");
    append_raw(sc->path, "{" STEP ",\"global_step\":1}\n"); /* duplicate key: bad */
    append_raw(sc->path, "{" STEP "}\r\n");
    char *whole = slurp(sc->path);
    int64_t complete = (int64_t)strlen(whole);
    free(whole);
    append_raw(sc->path, "{\"type\":\"step\",\"epo"); /* a torn write */
    seen *s = read_all(sc->path, &st);
    assert_int_equal(st.lines, 7);
    assert_int_equal(st.records, 3);
    assert_int_equal(s->n, 3);
    assert_int_equal(s->line[2], 7);
    assert_int_equal(st.unknown, 1);
    assert_int_equal(st.bad, 2);
    assert_int_equal(st.first_bad_line, 3);
    assert_non_null(strstr(st.first_bad_msg, "not JSON"));
    assert_true(st.truncated);
    assert_int_equal(st.end_offset, complete);
    free(s);

    /* the callback can stop the read */
    s = calloc(1, sizeof *s);
    s->stop_after = 2;
    assert_int_equal(ex_metrics_read(sc->path, collect, s, &st, msg, sizeof msg), EX_OK);
    assert_int_equal(s->n, 2);
    free(s);

    /* following: finish the torn line, read on from end_offset */
    append_raw(sc->path, "ch\":0}\n{" STEP "}\n");
    s = calloc(1, sizeof *s);
    assert_int_equal(ex_metrics_read_from(sc->path, complete, collect, s, &st, msg, sizeof msg),
                     EX_OK);
    assert_int_equal(st.lines, 2);
    assert_int_equal(st.bad, 1); /* the completed torn line lacks fields */
    assert_int_equal(s->n, 1);
    assert_int_equal(s->line[0], 2);
    assert_false(st.truncated);
    free(s);
    assert_int_equal(ex_metrics_read_from(sc->path, -1, NULL, NULL, &st, msg, sizeof msg),
                     EX_ERR_ARG);
    assert_int_equal(ex_metrics_read_from(sc->path, 1 << 30, NULL, NULL, &st, msg, sizeof msg),
                     EX_OK);
    assert_int_equal(st.lines, 0);
}

static void reader_long_lines_and_versions(void **state)
{
    scratch *sc = *state;
    char msg[256];
    ex_metrics_stats st;
    size_t n = EX_METRICS_LINE_MAX + 100;
    char *huge = malloc(n + 2);
    memset(huge, ' ', n);
    huge[0] = '{';
    huge[n - 1] = '}';
    huge[n] = '\n';
    huge[n + 1] = 0;
    append_raw(sc->path, "{" STEP "}\n");
    append_raw(sc->path, huge);
    append_raw(sc->path, "{" STEP "}\n");
    free(huge);
    seen *s = read_all(sc->path, &st);
    assert_int_equal(st.lines, 3);
    assert_int_equal(st.records, 2);
    assert_int_equal(st.bad, 1);
    assert_int_equal(st.first_bad_line, 2);
    assert_non_null(strstr(st.first_bad_msg, "longer than"));
    free(s);
    /* a newer log version stops the read with an error naming the line */
    append_raw(sc->path, "{\"type\":\"header\",\"format\":\"exapt-metrics\",\"version\":7}\n");
    assert_int_equal(ex_metrics_read(sc->path, NULL, NULL, &st, msg, sizeof msg),
                     EX_ERR_UNSUPPORTED);
    assert_non_null(strstr(msg, "line 4"));
    assert_int_equal(ex_metrics_read(sc->dir, NULL, NULL, &st, msg, sizeof msg), EX_ERR_IO);
}

/* ---- resume ---- */

static void write_run(const char *path)
{
    ex_metrics_writer *w = NULL;
    char msg[256];
    assert_int_equal(ex_metrics_open(path, EX_METRICS_NEW, &w, msg, sizeof msg), EX_OK);
    ex_metrics_header h;
    sample_header(&h);
    assert_int_equal(ex_metrics_write_header(w, &h, msg, sizeof msg), EX_OK);
    ex_metrics_step *s = malloc(sizeof *s);
    ex_metrics_profile *p = malloc(sizeof *p);
    for (int64_t gs = 0; gs < 10; gs++) {
        sample_step(s, gs, gs % 4 == 0);
        assert_int_equal(ex_metrics_write_step(w, s, msg, sizeof msg), EX_OK);
        if (gs % 3 == 2) {
            sample_profile(p, gs);
            assert_int_equal(ex_metrics_write_profile(w, p, msg, sizeof msg), EX_OK);
        }
        if (gs == 4 || gs == 9) {
            ex_metrics_epoch e = {gs / 5, 1, 0.5, 1, 0.5, 3, ""};
            assert_int_equal(ex_metrics_write_epoch(w, &e, msg, sizeof msg), EX_OK);
        }
    }
    free(s);
    free(p);
    assert_int_equal(ex_metrics_close(w, msg, sizeof msg), EX_OK);
    append_raw(path, "{\"type\":\"step\",\"epoch\":1,\"st"); /* killed mid-write */
}

static void resume_cuts_cleanly(void **state)
{
    scratch *sc = *state;
    write_run(sc->path);
    ex_metrics_writer *w = NULL;
    char msg[256];
    assert_int_equal(ex_metrics_open(sc->path, 6, &w, msg, sizeof msg), EX_OK);
    assert_false(ex_metrics_needs_header(w));
    ex_metrics_step *s = malloc(sizeof *s);
    for (int64_t gs = 7; gs < 9; gs++) {
        sample_step(s, gs, false);
        assert_int_equal(ex_metrics_write_step(w, s, msg, sizeof msg), EX_OK);
    }
    free(s);
    assert_int_equal(ex_metrics_close(w, msg, sizeof msg), EX_OK);
    ex_metrics_stats st;
    seen *r = read_all(sc->path, &st);
    assert_int_equal(st.bad + st.unknown, 0);
    assert_false(st.truncated);
    /* header; steps 0..6 with profiles after 2 and 5 and an epoch after 4; then 7, 8 */
    const char *want = "HSSSPSSESPSSS";
    assert_int_equal(r->n, (int)strlen(want));
    int64_t next = 0;
    for (int i = 0; i < r->n; i++) {
        const char *k = "?HSEP";
        assert_int_equal(k[r->rec[i].kind], want[i]);
        if (r->rec[i].kind == EX_METRICS_STEP)
            assert_int_equal(r->rec[i].step.global_step, next++);
    }
    assert_int_equal(next, 9);
    free(r);
    char tmp[160];
    snprintf(tmp, sizeof tmp, "%s.tmp", sc->path);
    assert_int_equal(access(tmp, F_OK), -1);
}

static void resume_edge_cases(void **state)
{
    scratch *sc = *state;
    ex_metrics_writer *w = NULL;
    char msg[256];
    /* no log yet: starts empty and wants a header */
    assert_int_equal(ex_metrics_open(sc->path, 5, &w, msg, sizeof msg), EX_OK);
    assert_true(ex_metrics_needs_header(w));
    assert_int_equal(ex_metrics_close(w, msg, sizeof msg), EX_OK);
    /* resuming past the end keeps everything but the torn line */
    write_run(sc->path);
    assert_int_equal(ex_metrics_open(sc->path, 1000, &w, msg, sizeof msg), EX_OK);
    assert_int_equal(ex_metrics_close(w, msg, sizeof msg), EX_OK);
    ex_metrics_stats st;
    free(read_all(sc->path, &st));
    assert_int_equal(st.records, 1 + 10 + 3 + 2);
    assert_false(st.truncated);
    /* resuming from step 0 keeps the header and step 0 */
    assert_int_equal(ex_metrics_open(sc->path, 0, &w, msg, sizeof msg), EX_OK);
    assert_int_equal(ex_metrics_close(w, msg, sizeof msg), EX_OK);
    free(read_all(sc->path, &st));
    assert_int_equal(st.records, 2);
    /* a resume that cannot write its temporary leaves the log alone */
    write_run(sc->path);
    char *before = slurp(sc->path);
    char tmp[160];
    snprintf(tmp, sizeof tmp, "%s.tmp", sc->path);
    assert_int_equal(mkdir(tmp, 0755), 0);
    assert_int_equal(ex_metrics_open(sc->path, 3, &w, msg, sizeof msg), EX_ERR_IO);
    assert_null(w);
    assert_non_null(strstr(msg, sc->path));
    assert_int_equal(rmdir(tmp), 0);
    char *after = slurp(sc->path);
    assert_string_equal(before, after);
    free(before);
    free(after);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(exact_lines, setup, teardown),
        cmocka_unit_test_setup_teardown(writer_rules, setup, teardown),
        cmocka_unit_test(disk_full),
        cmocka_unit_test(parser_rejects),
        cmocka_unit_test_setup_teardown(reader_tolerates, setup, teardown),
        cmocka_unit_test_setup_teardown(reader_long_lines_and_versions, setup, teardown),
        cmocka_unit_test_setup_teardown(resume_cuts_cleanly, setup, teardown),
        cmocka_unit_test_setup_teardown(resume_edge_cases, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
