/* Training a derived network: shared by `exapt train` and `exapt search --preset quick`. */
#ifndef EXAPT_APPS_TRAIN_RUN_H
#define EXAPT_APPS_TRAIN_RUN_H

#include <stdbool.h>
#include <stdint.h>

#include "exapt/exapt.h"
#include "exapt/network.h"

typedef struct train_job {
    const char *cmd;     /* for messages */
    const char *backend; /* backend name (NULL: EXAPT_BACKEND or auto), when be is NULL */
    ex_backend *be;      /* an open backend to use, or NULL */
    const char *data_dir, *dataset;
    const char *out;     /* output directory */
    const char *resume;  /* directory of an interrupted run, or NULL */
    const char *run_dir; /* what `exapt CMD --resume` takes to continue: out, or the search's
                            run directory (NULL: out) */
    int64_t limit;       /* training images used (0: all) */
    int epochs;
    float lr, lr_min;
    float drop_path; /* final drop-path probability, reached linearly */
    int cutout;
    bool flip;       /* mirror training images left-right with probability 1/2 */
    bool tta;        /* evaluation averages the logits of each image and its mirror image */
    int64_t holdout; /* the last N training images are not trained on: each epoch is scored
                        on them (for choices), the test split once at the end (0: test each
                        epoch) */
    ex_network_config net;
    ex_genotype genotype;
    const ex_comm *comm;        /* the data-parallel group (NULL: alone): each rank trains on its
                                   share of every batch; rank 0 writes the files and prints */
    const struct cli_global *g; /* with be NULL: where the group's communicator for the
                                   backend opened here comes from (cli_ranks_comm) */
    const char *argv_json;      /* the command's options as a JSON array of strings, recorded in
                                   the metrics log's header for --resume (NULL: [], a search's
                                   training, which its search's record reproduces) */
} train_job;

/** DARTS's evaluation settings. */
void train_job_default(train_job *j);

/** Trains (learning rate on a cosine over the steps), evaluates each epoch (on the test
 *  split, or the held-out images) and writes weights.safetensors,
 *  checkpoint.safetensors and metrics.jsonl into j->out. Returns an exit code; when
 *  test_acc is not NULL, stores the final test accuracy. */
int train_run(const train_job *j, double *test_acc);

#endif
