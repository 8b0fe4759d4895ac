/* exapt — data parallelism: a group of processes (ranks) that run the same graph, each on
 * its own share of every batch, and sum what must be summed through a communicator. */
#ifndef EXAPT_COMM_H
#define EXAPT_COMM_H

#include <stdbool.h>
#include <stddef.h>

#include "exapt/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/** A communicator. The library does not depend on a transport: the caller fills this with
 *  its own (the exapt command's is MPI: `--gpus N` or `mpirun`). Every rank builds the
 *  same graph, so every rank reaches the same collectives in the same order. */
typedef struct ex_comm {
    int size; /**< ranks in the group (1: alone) */
    int rank; /**< this process's rank, 0 .. size - 1 */
    /** Sums n floats element by element over all ranks into buf, on every rank, adding in
     *  an order that does not depend on the rank (so every rank gets the same bits).
     *  Returns EX_OK, or EX_ERR_COMM with a message in msg when a rank failed or the
     *  collective timed out: it must return, never hang. */
    ex_status (*allreduce_sum)(void *user, float *buf, size_t n, char *msg, size_t msg_len);
    void *user; /**< handed to allreduce_sum */
} ex_comm;

/** Whether c describes a usable group: not NULL, size >= 1, 0 <= rank < size, and an
 *  allreduce_sum function. On failure a message in msg (may be NULL). */
bool ex_comm_valid(const ex_comm *c, char *msg, size_t msg_len);

#ifdef __cplusplus
}
#endif
#endif
