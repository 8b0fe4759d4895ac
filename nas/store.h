/* Data into and out of a plan: its named tensors saved and loaded as safetensors,
 * PyTorch-style, and a batch of images and labels written to its inputs. */
#ifndef EXAPT_NAS_STORE_H
#define EXAPT_NAS_STORE_H

#include "exapt/exapt.h"
#include "exapt/safetensors.h"
#include "nas/layers.h"

typedef struct nas_entry {
    const char *name;
    ex_tensor *t;
} nas_entry;

/** Appends the network's parameters, then its states, to e (room for nparams +
 *  nstates); returns the count. */
int nas_net_entries(const nas_net *n, nas_entry *e);

/** Writes the entries' current values from plan into path, atomically. Every batch norm
 *  (a `*.running_mean` entry) also gets PyTorch's `*.num_batches_tracked` = batches. */
ex_status nas_store_save(ex_plan *plan, const nas_entry *e, int count, int64_t batches,
                         const ex_st_meta *meta, int nmeta, const char *path, char *msg,
                         size_t msg_len);

/** Reads every entry from path (names and shapes must match) into plan. */
ex_status nas_store_load(ex_plan *plan, const nas_entry *e, int count, const char *path, char *msg,
                         size_t msg_len);

/** Writes a batch into plan: the images xv into x and the labels yv into y, after checking
 *  every label is a class in [0, classes). `what` names the caller in messages ("search"). */
ex_status nas_write_batch(ex_plan *plan, ex_tensor *x, const float *xv, ex_tensor *y,
                          const int32_t *yv, int classes, const char *what, char *msg,
                          size_t msg_len);

/** The step count that nas_store_save() wrote into path's "steps" metadata, into *steps;
 *  EX_ERR_FORMAT when it is missing or not a count. */
ex_status nas_store_steps(const char *path, int64_t *steps, char *msg, size_t msg_len);

#endif
