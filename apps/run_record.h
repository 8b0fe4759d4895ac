/* A run's configuration, recorded in its metrics log's header and read back by --resume,
 * so that a run reproduces from itself. Application code, not part of the library. */
#ifndef EXAPT_APPS_RUN_RECORD_H
#define EXAPT_APPS_RUN_RECORD_H

#include <jansson.h>

#include "cli.h"
#include "run.h"

/** A new record: {"command": the whole command line, "argv": the subcommand's options
 *  (argv[1..]), "version", "commit"}; the caller adds the settings. NULL when out of
 *  memory. */
json_t *run_record_new(const cli_global *g, int argc, char **argv);

/** Reads the record from DIR/metrics.jsonl's header into *out (the caller frees it).
 *  Returns an exit code, with a message when the log is missing or holds no record. */
int run_record_load(const char *dir, json_t **out, const char *cmd);

/** The record of DIR/metrics.jsonl's header (the caller frees it), or NULL when there is
 *  none: for reading a setting where its absence is no error. */
json_t *run_record_peek(const char *dir);

/** The recorded options as an argv (argv[0] = name) for the subcommand's parser; the
 *  strings belong to rec, the array is malloc'ed. -1 when out of memory or malformed. */
int run_record_argv(json_t *rec, const char *name, int *argc, char ***argv);

/** Checks that argv[1..] holds only options named in allowed (NULL-terminated): what may
 *  change on a resume. Returns an exit code. */
int run_record_resume_only(int argc, char **argv, const char *const *allowed, const char *cmd);

#endif
