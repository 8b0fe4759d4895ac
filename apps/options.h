/* A table-driven parser for the options of the longer subcommands. */
#ifndef EXAPT_APPS_OPTIONS_H
#define EXAPT_APPS_OPTIONS_H

#include <stdbool.h>

typedef enum opt_type { OPT_STRING, OPT_INT, OPT_FLOAT, OPT_FLAG } opt_type;

/** One option: "--name VALUE" stored into dest (const char *, long, double or bool),
 *  numbers checked against [lo, hi]; `set` (optional) records that it was given. */
typedef struct opt_spec {
    const char *name;
    opt_type type;
    void *dest;
    double lo, hi;
    bool *set;
} opt_spec;

/** Parses argv[1..argc-1] against the table. On a bad or unknown option prints the
 *  problem in one line, and returns the usage exit code; "--help" prints usage and
 *  returns -1 (the caller exits 0); otherwise 0. */
int opt_parse(const char *cmd, const char *usage, const opt_spec *specs, int n, int argc,
              char **argv);

/** opt_parse, and the arguments that are not options (those not starting with '-', and
 *  "-") into args, at most max_args of them (more: the usage exit code); *nargs says how
 *  many came. */
int opt_parse_args(const char *cmd, const char *usage, const opt_spec *specs, int n, int argc,
                   char **argv, const char **args, int max_args, int *nargs);

#endif
