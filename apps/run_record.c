/* A run's configuration as its metrics log's header records it: the command line, the
 * version and commit, and every setting; and, for --resume, read back from there. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "run_record.h"

#ifndef EXAPT_COMMIT
#define EXAPT_COMMIT "unknown"
#endif

json_t *run_record_new(const cli_global *g, int argc, char **argv)
{
    char *command = cli_join_args(g->argc, g->argv);
    json_t *args = json_array(), *rec = json_object();
    for (int i = 1; args && i < argc; i++)
        json_array_append_new(args, json_string(argv[i]));
    if (!command || !args || !rec || json_object_set_new(rec, "command", json_string(command)) ||
        json_object_set_new(rec, "argv", args) ||
        json_object_set_new(rec, "version", json_string(ex_version())) ||
        json_object_set_new(rec, "commit", json_string(EXAPT_COMMIT))) {
        free(command);
        json_decref(rec);
        return NULL;
    }
    free(command);
    return rec;
}

static int take_header(const ex_metrics_record *rec, int64_t line, void *user)
{
    (void)line;
    if (rec->kind == EX_METRICS_HEADER)
        *(json_t **)user = json_loads(rec->header.config, 0, NULL);
    return 1; /* the header is the first line: nothing after it is needed */
}

json_t *run_record_peek(const char *dir)
{
    char path[4096], msg[512];
    run_path(path, sizeof path, dir, "metrics.jsonl");
    json_t *rec = NULL;
    if (ex_metrics_read(path, take_header, &rec, NULL, msg, sizeof msg) != EX_OK) {
        json_decref(rec);
        return NULL;
    }
    return rec;
}

int run_record_load(const char *dir, json_t **out, const char *cmd)
{
    char path[4096], msg[512];
    run_path(path, sizeof path, dir, "metrics.jsonl");
    json_t *rec = NULL;
    if (ex_metrics_read(path, take_header, &rec, NULL, msg, sizeof msg) != EX_OK)
        return cli_fail(cmd, "--resume %s: %s", dir, msg);
    if (!json_is_array(json_object_get(rec, "argv"))) {
        json_decref(rec);
        return cli_fail(cmd,
                        "--resume %s: %s has no recorded configuration (a run of an older "
                        "exapt, or not a run directory)",
                        dir, path);
    }
    *out = rec;
    return 0;
}

int run_record_argv(json_t *rec, const char *name, int *argc, char ***argv)
{
    json_t *args = json_object_get(rec, "argv");
    size_t n = json_array_size(args);
    char **v = calloc(n + 2, sizeof *v);
    if (!v)
        return -1;
    v[0] = (char *)name;
    for (size_t i = 0; i < n; i++) {
        const char *s = json_string_value(json_array_get(args, i));
        if (!s) {
            free(v);
            return -1;
        }
        v[i + 1] = (char *)s;
    }
    *argc = (int)n + 1;
    *argv = v;
    return 0;
}

int run_record_resume_only(int argc, char **argv, const char *const *allowed, const char *cmd)
{
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "--", 2))
            continue;
        size_t len = strcspn(argv[i], "=");
        bool ok = false;
        for (int k = 0; allowed[k] && !ok; k++)
            ok = strlen(allowed[k]) == len && !strncmp(argv[i], allowed[k], len);
        if (!ok)
            return cli_fail(cmd,
                            "%.*s cannot be given with --resume: the run's configuration is "
                            "taken from it",
                            (int)len, argv[i]);
    }
    return 0;
}
