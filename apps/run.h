/* What `exapt search` and `exapt train` share: data, schedules, progress, checkpoints
 * and the interrupt flag. Application code, not part of the library. */
#ifndef EXAPT_APPS_RUN_H
#define EXAPT_APPS_RUN_H

#include <stdbool.h>
#include <stdint.h>

#include "exapt/exapt.h"

/** Loads split of dataset name from dir, keeping its first `limit` samples (0: all). */
int run_load(const char *dir, const char *name, ex_data_split split, int64_t limit,
             ex_dataset **out, const char *cmd);

/** The largest divisor of n that is at most cap: an evaluation batch that covers a
 *  dataset exactly. */
int run_eval_batch(int64_t n, int cap);

/** The first image of this rank's share of a global batch of `batch` images, each of `img`
 *  floats (comm NULL: 0); every rank draws the same global batch and takes its share. */
size_t run_share_start(const ex_comm *comm, int batch, size_t img);

/** Each rank's wall time of the step just done (step_ms on this rank) into m->rank_step_ms
 *  and m->n_ranks, on every rank (a collective: every rank calls it after every step);
 *  alone, m->n_ranks = 0. A failed collective: a message naming cmd, and the exit code. */
int run_rank_times(const ex_comm *comm, double step_ms, ex_metrics_step *m, const char *cmd);

/** A loader over ds in its training or evaluation configuration; a training loader
 *  adds cutout (0: off) and, with flip, left-right mirroring to the dataset's default
 *  augmentation. */
int run_loader(const ex_dataset *ds, bool train, int batch, uint64_t seed, int cutout, bool flip,
               ex_loader **out, const char *cmd);

/** Cosine schedule from hi (done 0) to lo (done total): per epoch in the search, as
 *  DARTS; per step in training. */
float run_cosine(float hi, float lo, double done, double total);

/** Installs SIGINT/SIGTERM handlers that ask the run to stop at the next step. */
void run_catch_signals(void);
/** Whether a stop was asked for. */
bool run_stop_requested(void);

/** The exit code of a run stopped by a signal (128 + SIGINT, as a shell reports Ctrl-C). */
enum { RUN_EXIT_INTERRUPTED = 130 };

/** Seconds on the monotonic clock. */
double run_now(void);

/** Makes dir ready for a new run: one that holds a run's files (a metrics log, a
 *  checkpoint, a genotype, weights, a training in train/) is refused with a message naming
 *  --resume and --force; with force those files are removed (nothing else in dir is). */
int run_claim_dir(const char *dir, bool force, const char *cmd);

/** Creates dir (and its parents) if missing. */
int run_mkdir(const char *dir, const char *cmd);

/** Joins dir and name into buf. */
const char *run_path(char *buf, size_t len, const char *dir, const char *name);

/** The weights that arg names: the file itself, or in a run directory its
 *  weights.safetensors, else its train/weights.safetensors (a search's training). dir gets
 *  the folder that holds them, whose metrics.jsonl describes their training. */
int run_find_weights(const char *arg, char *path, size_t len, char *dir, size_t dir_len,
                     const char *cmd);

/** Prints a progress line: what, epoch, step, figures, throughput and time left. */
void run_progress(const char *what, int epoch, int epochs, int64_t step, int64_t steps,
                  const char *figures, double images_per_s, double eta_s);

/** Keeps the checkpoint at path as path.prev (path itself is untouched), before a save
 *  replaces path: a crash at any moment leaves a complete checkpoint. */
void run_keep_previous(const char *path);

#endif
