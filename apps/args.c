/* Option parsing for the exapt tool: a few strict helpers instead of getopt_long, which
 * is not in C11 or POSIX and keeps its state in globals. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

cli_match cli_option_value(int argc, char **argv, int *i, const char *name, const char **value)
{
    const char *arg = argv[*i];
    size_t n = strlen(name);
    if (strncmp(arg, name, n) != 0)
        return CLI_NO_MATCH;
    if (arg[n] == '=') {
        *value = arg + n + 1;
        return CLI_MATCHED;
    }
    if (arg[n] != '\0')
        return CLI_NO_MATCH; /* "--backends" is not "--backend" */
    if (*i + 1 >= argc)
        return CLI_MISSING_VALUE;
    *i += 1;
    *value = argv[*i];
    return CLI_MATCHED;
}

int cli_parse_long(const char *s, long lo, long hi, long *out)
{
    if (s == NULL || *s == '\0')
        return -1;
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    /* Trailing junk ("10x"), overflow and out-of-range values are all typos. */
    if (errno != 0 || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "exapt %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nTry 'exapt %s --help'.\n", cmd);
    va_end(ap);
    return CLI_EXIT_USAGE;
}

int cli_fail(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "exapt %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return CLI_EXIT_FAIL;
}

char *cli_join_args(int argc, char **argv)
{
    size_t len = 1;
    for (int i = 0; i < argc; i++)
        len += strlen(argv[i]) + 1;
    char *s = malloc(len);
    if (s == NULL)
        return NULL;
    s[0] = '\0';
    for (int i = 0; i < argc; i++) {
        if (i)
            strcat(s, " ");
        strcat(s, argv[i]);
    }
    return s;
}
