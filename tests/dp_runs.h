/* The data-parallel tests' runs, shared by test_data_parallel (ranks are MPI processes)
 * and test_data_parallel_threads (ranks are threads of one process): a small search and
 * a derived network's training on the same global batches, each rank on its share. */
#ifndef EXAPT_TESTS_DP_RUNS_H
#define EXAPT_TESTS_DP_RUNS_H

#include <stdbool.h>

#include "exapt/exapt.h"

#define DP_STEPS 20
/* The bound holds while the rounding-level differences of the group's sums (added in another
 * order) change no discrete decision of the step: a ReLU input or a max-pooling tie that
 * rounding flips sends the trajectories apart, as it does in one process. Measured with the
 * network of dp_run_network: label smoothing 0.1 added, one such flip at step 13 took the
 * NMSE to 2e-2; in one process, every input pixel moved by one ulp gave 0.97. */
#define DP_NMSE_BOUND 1e-5

/** Called before each search step with the rank and the step (the failure tests' way in). */
typedef void (*dp_step_hook)(int rank, int step);

/** DP_STEPS search steps on backend on this rank's share (comm NULL: one process, the whole
 *  batch), then the state saved to path. Returns false after printing why on failure. */
bool dp_run_search(const char *backend, const ex_comm *comm, const char *path, dp_step_hook hook);

/** The same for DP_STEPS training steps of DARTS_V2 (4 channels, auxiliary head). */
bool dp_run_network(const char *backend, const ex_comm *comm, const char *path);

/** The worst NMSE over the f32 tensors of two saved states (each over DP_NMSE_BOUND is
 *  printed), or a negative value, printed, when they cannot be compared. */
double dp_worst_nmse(const char *pa, const char *pb);

/** Whether the files at pa and pb hold the same bytes. */
bool dp_same_file(const char *pa, const char *pb);

#endif
