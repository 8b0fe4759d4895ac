/* exapt info: the library's version, the backends compiled in, and for each one that
 * opens what its device offers, its measured copy bandwidth and the ops it runs. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char info_usage[] =
    "usage: exapt info [--backend NAME] [--json]\n"
    "  --backend NAME  describe only this backend (e.g. auto); default: every one compiled in\n"
    "  --json          print the same as a JSON document\n";

/* What we learned about one backend. */
typedef struct backend_report {
    const char *name; /**< as asked for; caps.name says what "auto" became */
    int opened;
    char error[512]; /**< why it did not open, or why measuring failed */
    ex_backend_caps caps;
    double peak_gbs; /**< 0 when not measured */
    int nsupported;
    unsigned char supported[EX_OP_COUNT];
} backend_report;

static const struct {
    unsigned bit;
    const char *name;
} feature_names[] = {
    {EX_FEAT_TIMESTAMPS, "timestamps"},
    {EX_FEAT_REFERENCE, "reference"},
    {EX_FEAT_RECOMPUTE, "recompute"},
};
#define NFEATURES (sizeof feature_names / sizeof feature_names[0])

static void probe_backend(const char *name, backend_report *r)
{
    memset(r, 0, sizeof *r);
    r->name = name;
    ex_backend *be = NULL;
    if (ex_backend_open(name, &be, r->error, sizeof r->error) != EX_OK) {
        if (r->error[0] == '\0')
            snprintf(r->error, sizeof r->error, "cannot open");
        return;
    }
    r->opened = 1;
    ex_status st = cli_measure_peak(be, &r->peak_gbs);
    if (st != EX_OK) {
        r->peak_gbs = 0;
        const char *msg = ex_backend_error(be);
        snprintf(r->error, sizeof r->error, "measuring bandwidth: %s",
                 msg[0] ? msg : ex_status_str(st));
    }
    r->caps = *ex_backend_get_caps(be);
    for (int op = 0; op < EX_OP_COUNT; op++) {
        r->supported[op] = ex_backend_supports(r->caps.name, (ex_op)op) != 0;
        r->nsupported += r->supported[op];
    }
    ex_backend_close(be);
}

static void features_str(unsigned features, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < NFEATURES; i++) {
        if (!(features & feature_names[i].bit))
            continue;
        used += snprintf(buf + used, len - used, "%s%s", used ? ", " : "", feature_names[i].name);
        features &= ~feature_names[i].bit;
        if (used >= len)
            return;
    }
    /* Bits a newer library knows and this tool does not still show up. */
    if (features)
        snprintf(buf + used, len - used, "%s0x%x", used ? ", " : "", features);
    else if (used == 0)
        snprintf(buf, len, "none");
}

/* "all 54 ops", or the count and the names of the ops missing. */
static void print_ops(const backend_report *r)
{
    if (r->nsupported == EX_OP_COUNT) {
        printf("  ops             all %d ops\n", EX_OP_COUNT);
        return;
    }
    printf("  ops             %d of %d; missing:", r->nsupported, EX_OP_COUNT);
    for (int op = 0; op < EX_OP_COUNT; op++)
        if (!r->supported[op])
            printf(" %s", ex_op_name((ex_op)op));
    printf("\n");
}

static void print_report(const backend_report *r)
{
    if (!r->opened) {
        printf("\n%s: cannot open: %s\n", r->name, r->error);
        return;
    }
    char b[3][32], feat[128];
    printf("\n%s: %s\n", r->caps.name, r->caps.device);
    printf("  memory          %s\n", cli_bytes_str(r->caps.memory_bytes, b[0], sizeof b[0]));
    printf("  max allocation  %s\n", cli_bytes_str(r->caps.max_alloc_bytes, b[1], sizeof b[1]));
    printf("  max binding     %s\n", cli_bytes_str(r->caps.max_binding_bytes, b[2], sizeof b[2]));
    if (r->caps.threads > 0) /* host threads: GPU backends have none to speak of */
        printf("  threads         %d\n", r->caps.threads);
    features_str(r->caps.features, feat, sizeof feat);
    printf("  features        %s\n", feat);
    char devs[1024];
    if (ex_backend_devices(r->caps.name, devs, sizeof devs) == EX_OK) /* Vulkan: all devices */
        for (char *line = strtok(devs, "\n"), *first = line; line; line = strtok(NULL, "\n"))
            printf("  %-15s %s\n", line == first ? "devices" : "", line);
    if (r->error[0])
        printf("  peak copy       unknown (%s)\n", r->error);
    else
        printf("  peak copy       %.1f GB/s (measured)\n", r->peak_gbs);
    print_ops(r);
}

static json_t *features_json(unsigned features)
{
    json_t *a = json_array();
    for (size_t i = 0; i < NFEATURES; i++)
        if (features & feature_names[i].bit)
            json_array_append_new(a, json_string(feature_names[i].name));
    return a;
}

static json_t *ops_json(const backend_report *r)
{
    json_t *missing = json_array();
    for (int op = 0; op < EX_OP_COUNT; op++)
        if (!r->supported[op])
            json_array_append_new(missing, json_string(ex_op_name((ex_op)op)));
    return json_pack("{s:i, s:i, s:o}", "supported", r->nsupported, "total", EX_OP_COUNT, "missing",
                     missing);
}

static json_t *report_json(const backend_report *r)
{
    if (!r->opened)
        return json_pack("{s:s, s:b, s:s}", "name", r->name, "opened", 0, "error", r->error);
    const ex_backend_caps *c = &r->caps;
    json_t *o = json_pack(
        "{s:s, s:b, s:s, s:I, s:I, s:I, s:i, s:o, s:o}", "name", c->name, "opened", 1, "device",
        c->device, "memory_bytes", (json_int_t)c->memory_bytes, "max_alloc_bytes",
        (json_int_t)c->max_alloc_bytes, "max_binding_bytes", (json_int_t)c->max_binding_bytes,
        "threads", c->threads, "features", features_json(c->features), "ops", ops_json(r));
    if (o == NULL)
        return NULL;
    if (r->error[0]) {
        json_object_set_new(o, "peak_copy_gbs", json_null());
        json_object_set_new(o, "error", json_string(r->error));
    } else {
        json_object_set_new(o, "peak_copy_gbs", json_real(r->peak_gbs));
    }
    return o;
}

static int print_json(const backend_report *reports, int n)
{
    json_t *compiled = json_array(), *backends = json_array();
    for (const char *const *name = ex_backend_list(); *name; name++)
        json_array_append_new(compiled, json_string(*name));
    for (int i = 0; i < n; i++)
        json_array_append_new(backends, report_json(&reports[i]));
    json_t *root =
        json_pack("{s:s, s:i, s:s, s:o, s:o}", "format", "exapt-info", "version", 1,
                  "exapt_version", ex_version(), "compiled", compiled, "backends", backends);
    char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(6)) : NULL;
    json_decref(root);
    if (text == NULL)
        return cli_fail("info", "cannot build the JSON document (out of memory?)");
    puts(text);
    free(text);
    return CLI_EXIT_OK;
}

static void print_text(const backend_report *reports, int n)
{
    printf("exapt %s\nbackends compiled in:", ex_version());
    for (const char *const *name = ex_backend_list(); *name; name++)
        printf(" %s", *name);
    printf("\n");
    for (int i = 0; i < n; i++)
        print_report(&reports[i]);
}

/* Parses info's options; returns -1 to go on, or an exit code. */
static int parse_options(int argc, char **argv, const char **backend, int *json)
{
    for (int i = 1; i < argc; i++) {
        cli_match m = cli_option_value(argc, argv, &i, "--backend", backend);
        if (m == CLI_MISSING_VALUE)
            return cli_usage_error("info", "--backend needs a name");
        if (m == CLI_MATCHED)
            continue;
        if (strcmp(argv[i], "--json") == 0) {
            *json = 1;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(info_usage, stdout);
            return CLI_EXIT_OK;
        } else {
            return cli_usage_error("info", "unknown option '%s'", argv[i]);
        }
    }
    return -1;
}

int cli_info(const cli_global *g, int argc, char **argv)
{
    const char *backend = g->backend;
    int json = 0;
    int rc = parse_options(argc, argv, &backend, &json);
    if (rc >= 0)
        return rc;

    /* One named backend, or every backend compiled in. */
    const char *only[2] = {backend, NULL};
    const char *const *names = backend ? only : ex_backend_list();
    int n = 0;
    while (names[n])
        n++;
    backend_report *reports = calloc(n ? (size_t)n : 1, sizeof *reports);
    if (reports == NULL)
        return cli_fail("info", "out of memory");
    rc = CLI_EXIT_OK;
    for (int i = 0; i < n; i++) {
        probe_backend(names[i], &reports[i]);
        /* A failure is an error when the user asked for that backend, or when an open
         * device failed; an absent device among all compiled in is just information. */
        if ((backend && !reports[i].opened) || (reports[i].opened && reports[i].error[0]))
            rc = CLI_EXIT_FAIL;
    }
    if (json) {
        if (print_json(reports, n) != CLI_EXIT_OK)
            rc = CLI_EXIT_FAIL;
    } else {
        print_text(reports, n);
    }
    free(reports);
    if (fflush(stdout) != 0 || ferror(stdout))
        return cli_fail("info", "cannot write the output");
    return rc;
}
