/* Table-driven option parsing. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "options.h"

static int store(const char *cmd, const opt_spec *s, const char *v)
{
    char *end = NULL;
    errno = 0;
    if (s->type == OPT_STRING) {
        *(const char **)s->dest = v;
    } else if (s->type == OPT_INT) {
        long x = strtol(v, &end, 10);
        if (errno || end == v || *end || x < s->lo || x > s->hi)
            return cli_usage_error(cmd, "%s needs a whole number from %.0f to %.0f, not '%s'",
                                   s->name, s->lo, s->hi, v);
        *(long *)s->dest = x;
    } else {
        double x = strtod(v, &end);
        if (errno || end == v || *end || !(x >= s->lo && x <= s->hi))
            return cli_usage_error(cmd, "%s needs a number from %g to %g, not '%s'", s->name, s->lo,
                                   s->hi, v);
        *(double *)s->dest = x;
    }
    if (s->set)
        *s->set = true;
    return 0;
}

int opt_parse(const char *cmd, const char *usage, const opt_spec *specs, int n, int argc,
              char **argv)
{
    return opt_parse_args(cmd, usage, specs, n, argc, argv, NULL, 0, NULL);
}

int opt_parse_args(const char *cmd, const char *usage, const opt_spec *specs, int n, int argc,
                   char **argv, const char **args, int max_args, int *nargs)
{
    if (nargs)
        *nargs = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage, stdout);
            return -1;
        }
        if (argv[i][0] != '-' || !argv[i][1]) {
            if (!nargs || *nargs >= max_args)
                return cli_usage_error(cmd, "unexpected argument '%s'", argv[i]);
            args[(*nargs)++] = argv[i];
            continue;
        }
        int k = 0;
        for (; k < n; k++) {
            const opt_spec *s = &specs[k];
            if (s->type == OPT_FLAG) {
                if (strcmp(argv[i], s->name))
                    continue;
                *(bool *)s->dest = true;
                if (s->set)
                    *s->set = true;
                break;
            }
            const char *v = NULL;
            cli_match m = cli_option_value(argc, argv, &i, s->name, &v);
            if (m == CLI_MISSING_VALUE)
                return cli_usage_error(cmd, "%s needs a value", s->name);
            if (m == CLI_MATCHED) {
                int rc = store(cmd, s, v);
                if (rc)
                    return rc;
                break;
            }
        }
        if (k == n)
            return cli_usage_error(cmd, "unknown option '%s'", argv[i]);
    }
    return 0;
}
