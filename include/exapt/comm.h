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
    void *user; /**< handed to allreduce_sum and the device functions below */
    /* Optional (NULL when absent): sums in a GPU backend's own queue, so that they run in
     * order with the step, inside its recorded graph, with no trip through the host (the
     * exapt_nccl communicator fills them for the "cuda" backend). A backend of another
     * name, or a communicator without them, sums through the host with allreduce_sum. */
    const char *device_backend; /**< the backend whose memory and queue these take */
    /** Queues the sum of n floats over all ranks from src into dst (device pointers of
     *  device_backend, dense; src == dst allowed) on queue (for "cuda" a cudaStream_t,
     *  possibly capturing). Returns EX_OK once queued, or EX_ERR_COMM with a message. */
    ex_status (*allreduce_device)(void *user, const float *src, float *dst, size_t n, void *queue,
                                  char *msg, size_t msg_len);
    /** Asked every millisecond or so by a backend waiting for device work that may hold
     *  sums, with the seconds the wait has lasted: EX_OK to go on waiting, or EX_ERR_COMM
     *  with a message once a rank failed or the wait passed the communicator's timeout,
     *  after the communicator has aborted its sums so that the device work ends. */
    ex_status (*device_waiting)(void *user, double waited_s, char *msg, size_t msg_len);
} ex_comm;

/** Whether c describes a usable group: not NULL, size >= 1, 0 <= rank < size, an
 *  allreduce_sum function, and either none or all of device_backend, allreduce_device and
 *  device_waiting. On failure a message in msg (may be NULL). */
bool ex_comm_valid(const ex_comm *c, char *msg, size_t msg_len);

#ifdef __cplusplus
}
#endif
#endif
