/* exapt bench: times every op of the catalogue (or the ones asked for) on one backend
 * and writes the exapt-bench JSON report (docs/bench.md), with a table on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cli.h"

static const char bench_usage[] =
    "usage: exapt bench [--backend NAME] [--op NAME[,NAME...]] [--shape small|paper|large]\n"
    "                   [--iters N] [--out FILE]\n"
    "  --backend NAME  backend to run on (beats EXAPT_BACKEND; default auto)\n"
    "  --op LIST       ops to time, by name (see docs/ops.md); default: every op\n"
    "  --shape SET     paper: the DARTS search batch 64x16x32x32 (default);\n"
    "                  small: 8x16x8x8, for a quick run;\n"
    "                  large: 256x64x32x32, where bandwidth goals are measured\n"
    "  --iters N       timed runs per op (default 20), after 3 warm-up runs\n"
    "  --out FILE      write the JSON report to FILE (default, or '-': stdout)\n";

#define BENCH_WARMUP 3

typedef struct bench_opts {
    const char *backend;
    const char *out;
    const bench_dims *dims;
    long iters;
    unsigned char want[EX_OP_COUNT]; /**< ops asked for */
    int any_wanted;
} bench_opts;

static int op_by_name(const char *name, size_t len)
{
    for (int op = 0; op < EX_OP_COUNT; op++) {
        const char *n = ex_op_name((ex_op)op);
        if (strlen(n) == len && strncmp(n, name, len) == 0)
            return op;
    }
    return -1;
}

/* Marks the ops of a comma-separated list; returns -1 after a usage error. */
static int parse_op_list(bench_opts *o, const char *list)
{
    const char *p = list;
    for (;;) {
        size_t len = strcspn(p, ",");
        int op = op_by_name(p, len);
        if (op < 0) {
            cli_usage_error("bench", "unknown op '%.*s'", (int)len, p);
            return -1;
        }
        o->want[op] = 1;
        o->any_wanted = 1;
        if (p[len] == '\0')
            return 0;
        p += len + 1;
    }
}

/* Setters of the options that take a value: 0, or -1 after a usage error. */
static int set_backend(bench_opts *o, const char *v)
{
    o->backend = v;
    return 0;
}

static int set_shape(bench_opts *o, const char *v)
{
    if ((o->dims = bench_dims_get(v)) != NULL)
        return 0;
    cli_usage_error("bench", "unknown shape set '%s'", v);
    return -1;
}

static int set_iters(bench_opts *o, const char *v)
{
    if (cli_parse_long(v, 1, 1000000, &o->iters) == 0)
        return 0;
    cli_usage_error("bench", "--iters wants a whole number in 1..1000000, not '%s'", v);
    return -1;
}

static int set_out(bench_opts *o, const char *v)
{
    if (v[0] != '\0') {
        o->out = v;
        return 0;
    }
    cli_usage_error("bench", "--out needs a file name");
    return -1;
}

static const struct {
    const char *name;
    int (*set)(bench_opts *o, const char *v);
} valued_options[] = {
    {"--backend", set_backend}, {"--op", parse_op_list}, {"--shape", set_shape},
    {"--iters", set_iters},     {"--out", set_out},
};

/* Handles one option taking a value; returns 1 if argv[*i] was one, 0 if not, and
 * -1 after a usage error. */
static int parse_valued(int argc, char **argv, int *i, bench_opts *o)
{
    for (size_t k = 0; k < sizeof valued_options / sizeof valued_options[0]; k++) {
        const char *v = NULL;
        cli_match m = cli_option_value(argc, argv, i, valued_options[k].name, &v);
        if (m == CLI_MISSING_VALUE) {
            cli_usage_error("bench", "%s needs a value", valued_options[k].name);
            return -1;
        }
        if (m == CLI_MATCHED)
            return valued_options[k].set(o, v) == 0 ? 1 : -1;
    }
    return 0;
}

/* Returns -1 to go on, or the exit code. */
static int parse_options(int argc, char **argv, bench_opts *o)
{
    for (int i = 1; i < argc; i++) {
        int r = parse_valued(argc, argv, &i, o);
        if (r < 0)
            return CLI_EXIT_USAGE;
        if (r > 0)
            continue;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(bench_usage, stdout);
            return CLI_EXIT_OK;
        }
        return cli_usage_error("bench", "unknown option '%s'", argv[i]);
    }
    return -1;
}

/* argv joined by spaces, for the record; NULL when out of memory. */
/* Times the selected ops; fills results and *n. Returns an exit code. */
static int run_cases(ex_backend *be, const bench_opts *o, double peak, bench_result *results,
                     int *n)
{
    *n = 0;
    bench_table_header(stderr);
    for (int op = 0; op < EX_OP_COUNT; op++) {
        if (o->any_wanted && !o->want[op])
            continue;
        const bench_case *c = bench_case_get((ex_op)op);
        if (c == NULL) {
            if (o->any_wanted)
                return cli_fail("bench", "no benchmark case for op %s", ex_op_name((ex_op)op));
            fprintf(stderr, "%-20s (no benchmark case yet)\n", ex_op_name((ex_op)op));
            continue;
        }
        char msg[512];
        bench_result *r = &results[*n];
        if (bench_run_case(be, (ex_op)op, c, o->dims, BENCH_WARMUP, (int)o->iters, r, msg,
                           sizeof msg) != EX_OK)
            return cli_fail("bench", "%s: %s", ex_op_name((ex_op)op), msg);
        bench_table_row(stderr, r, peak);
        *n += 1;
    }
    return CLI_EXIT_OK;
}

/* Writes the report to o->out (atomically) or stdout. Returns an exit code. */
static int emit(const bench_opts *o, json_t *doc)
{
    char *text = json_dumps(doc, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
    if (text == NULL)
        return cli_fail("bench", "cannot format the report (out of memory?)");
    int rc = CLI_EXIT_OK;
    if (o->out != NULL && strcmp(o->out, "-") != 0) {
        char msg[1024];
        if (cli_write_file_atomic(o->out, text, msg, sizeof msg) != 0)
            rc = cli_fail("bench", "%s", msg);
    } else if (puts(text) == EOF || fflush(stdout) != 0) {
        rc = cli_fail("bench", "cannot write the report to stdout");
    }
    free(text);
    return rc;
}

static int report(const cli_global *g, const bench_opts *o, const ex_backend *be, const char *date,
                  double peak, const bench_result *results, int n)
{
    char *command = cli_join_args(g->argc, g->argv);
    if (command == NULL)
        return cli_fail("bench", "out of memory");
    bench_meta meta = {.caps = ex_backend_get_caps(be),
                       .peak_gbs = peak,
                       .date = date,
                       .command = command,
                       .shape_set = o->dims->name};
    json_t *doc = bench_report_json(&meta, results, n);
    int rc = doc ? emit(o, doc) : cli_fail("bench", "cannot build the report (out of memory?)");
    json_decref(doc);
    free(command);
    return rc;
}

/* Opens the backend and measures its peak copy bandwidth. Returns an exit code. */
static int open_backend(const char *name, ex_backend **be, double *peak)
{
    char msg[512] = "";
    if (ex_backend_open(name, be, msg, sizeof msg) != EX_OK) {
        /* Without --backend the name came from EXAPT_BACKEND or "auto"; msg names it. */
        if (name)
            return cli_fail("bench", "cannot open backend '%s': %s", name, msg);
        return cli_fail("bench", "cannot open a backend: %s", msg);
    }
    const ex_backend_caps *caps = ex_backend_get_caps(*be);
    ex_status st = EX_OK;
    int rc = CLI_EXIT_OK;
    if (!(caps->features & EX_FEAT_TIMESTAMPS)) {
        rc = cli_fail("bench", "backend %s cannot time nodes (no timestamps on %s)", caps->name,
                      caps->device);
    } else if ((st = cli_measure_peak(*be, peak)) != EX_OK) {
        const char *m = ex_backend_error(*be);
        rc = cli_fail("bench", "measuring bandwidth: %s", m[0] ? m : ex_status_str(st));
    }
    if (rc == CLI_EXIT_OK)
        return rc;
    ex_backend_close(*be);
    *be = NULL;
    return rc;
}

int cli_bench(const cli_global *g, int argc, char **argv)
{
    bench_opts o = {.backend = g->backend, .dims = bench_dims_get("paper"), .iters = 20};
    int rc = parse_options(argc, argv, &o);
    if (rc >= 0)
        return rc;
    char date[32];
    bench_utc_now(date, sizeof date);
    ex_backend *be = NULL;
    double peak = 0;
    if ((rc = open_backend(o.backend, &be, &peak)) != CLI_EXIT_OK)
        return rc;
    const ex_backend_caps *caps = ex_backend_get_caps(be);
    fprintf(stderr, "exapt bench: %s (%s), %d threads, peak copy %.1f GB/s; shapes %s, %ld runs\n",
            caps->name, caps->device, caps->threads, peak, o.dims->name, o.iters);

    bench_result *results = calloc(EX_OP_COUNT, sizeof *results);
    int n = 0;
    if (results == NULL)
        rc = cli_fail("bench", "out of memory");
    else if ((rc = run_cases(be, &o, peak, results, &n)) == CLI_EXIT_OK)
        rc = report(g, &o, be, date, peak, results, n);
    free(results);
    ex_backend_close(be);
    return rc;
}
