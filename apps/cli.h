/* The exapt tool's shared pieces: subcommand entry points, exit codes, option parsing
 * and the few helpers every subcommand needs. Nothing here is part of the library. */
#ifndef EXAPT_APPS_CLI_H
#define EXAPT_APPS_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "exapt/exapt.h"

/* Exit codes: a script can tell a typo (2) from a failure of the library or the
 * system (1). */
enum { CLI_EXIT_OK = 0, CLI_EXIT_FAIL = 1, CLI_EXIT_USAGE = 2 };

/** What main() parsed before the subcommand, and the whole command line. */
typedef struct cli_global {
    const char *backend; /**< --backend NAME given before the subcommand, or NULL */
    int argc;            /**< the process's whole argv, for records of the command */
    char **argv;
    const ex_comm *comm;     /**< the data-parallel group when started by mpirun (ranks.c), or
                                  NULL: alone */
    struct cli_ranks *ranks; /**< ranks.c's communicators (NULL: alone) */
} cli_global;

/* ---- data parallelism (ranks.c) ---- */

/** Joins the group when mpirun (Open MPI, MPICH, PMIx) started this process as one of
 *  several ranks: MPI initialised, g->comm set, and each rank on its own GPU of the
 *  machine (EXAPT_CUDA_DEVICE = the local rank, unless set). Alone: nothing. Fails when
 *  started as a rank but built without MPI. */
int cli_ranks_start(cli_global *g);

/** The communicator a command's search or training on backend be sums through: g->comm
 *  (MPI, host-staged), or on the cuda backend, where exapt_nccl is built, an NCCL group
 *  of the same ranks (made on first use, its id passed by MPI) whose sums run in the
 *  step on the GPU. Every rank must call it at the same point. Returns an exit code. */
int cli_ranks_comm(const cli_global *g, ex_backend *be, const ex_comm **out);

/** Leaves the group: after a failure (rc != 0) it ends every rank (MPI_Abort), since the
 *  others would wait for this one; else MPI_Finalize. Returns rc. */
int cli_ranks_finish(cli_global *g, int rc);

/** `exapt --ranks N ...`: runs the same command line (without --ranks) as N ranks on this
 *  machine through mpirun, and returns its exit code; a failure to start it, with a
 *  message. */
int cli_ranks_launch(int ranks, int argc, char **argv);

/** Whether this process writes the run's files and prints its progress: rank 0, or alone. */
bool cli_lead(const cli_global *g);

/** A subcommand: argv[0] is its name, the rest its own options. Returns an exit code. */
typedef int (*cli_command_fn)(const cli_global *g, int argc, char **argv);

int cli_info(const cli_global *g, int argc, char **argv);
int cli_bench(const cli_global *g, int argc, char **argv);
int cli_search(const cli_global *g, int argc, char **argv);
int cli_train(const cli_global *g, int argc, char **argv);
int cli_viz(const cli_global *g, int argc, char **argv);
int cli_eval(const cli_global *g, int argc, char **argv);
int cli_predict(const cli_global *g, int argc, char **argv);
int cli_export(const cli_global *g, int argc, char **argv);
int cli_quantize(const cli_global *g, int argc, char **argv);

/* ---- the live viewer of `exapt search --viz` (cmd_viz.c) ---- */

/** A viewer window fed by a search on another thread. */
typedef struct cli_live cli_live;

/** Opens the window on this (the main) thread; fails when there is no display or when
 *  the viewer was not built. */
int cli_live_open(cli_live **out, const char *title, bool exit_when_done);

/* Without the viewer cli_live_open() fails, so the rest only ever see NULL. */
/** Hands one record of the metrics log to the viewer (NULL l: nothing). */
void cli_live_record(cli_live *l, const ex_metrics_record *rec);
/** Loads what a resumed run's log already holds. */
int cli_live_load(cli_live *l, const char *path);
/** Blocks while the viewer has paused the search, or until Ctrl-C (NULL l: returns). */
void cli_live_wait(cli_live *l);
/** Runs job(arg) on a worker thread and the window here until it is closed; the job runs
 *  on after that. Returns the job's exit code. */
int cli_live_run(cli_live *l, int (*job)(void *), void *arg);
/** Closes the window and frees the viewer. NULL is a no-op. */
void cli_live_close(cli_live *l);

/* ---- options (args.c) ---- */

/** Result of matching one argument against an option that takes a value. */
typedef enum cli_match { CLI_NO_MATCH = 0, CLI_MATCHED, CLI_MISSING_VALUE } cli_match;

/** Matches argv[*i] against "--name VALUE" or "--name=VALUE". On a match stores the
 *  value, advances *i past what was consumed (minus one, so a for loop's ++ lands on the
 *  next option) and returns CLI_MATCHED. */
cli_match cli_option_value(int argc, char **argv, int *i, const char *name, const char **value);

/** The arguments joined by single spaces, malloc'ed (NULL when out of memory). */
char *cli_join_args(int argc, char **argv);

/** Parses a whole decimal integer in [lo, hi]. Returns 0 on success, -1 otherwise. */
int cli_parse_long(const char *s, long lo, long hi, long *out);

/** Prints "exapt CMD: <message>" and a pointer to "exapt CMD --help" to stderr (the
 *  problem, not the whole usage text); returns CLI_EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/** Prints "exapt CMD: <message>" to stderr; returns CLI_EXIT_FAIL. */
int cli_fail(const char *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* ---- backends (backend_util.c) ---- */

/** Measures be's peak copy bandwidth with copies of at most 256 MiB (fewer when the
 *  backend's largest allocation is smaller). Returns the library's status. */
ex_status cli_measure_peak(ex_backend *be, double *gbs);

/** Bytes as a short human string ("7.8 GiB") in buf. Returns buf. */
char *cli_bytes_str(uint64_t bytes, char *buf, size_t len);

/* ---- files (atomic_file.c) ---- */

/** Replaces the file at path with text: writes path.tmp, flushes it to disk and renames
 *  it over path (the engine's writer, core/fileio.c, which syncs the file and its
 *  directory), so path holds either its old content or all of the new. An existing
 *  path that is not a regular file (a device, a FIFO) is written directly. On failure
 *  removes the temporary file, writes a message into msg and returns -1. */
int cli_write_file_atomic(const char *path, const char *text, char *msg, size_t msg_len);

#endif
