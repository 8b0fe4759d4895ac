/* exapt — an ex_comm over NCCL for the CUDA backend (library exapt_nccl, built where CUDA
 * and NCCL are found; the core never links NCCL). Its sums run on the GPU inside the
 * step's captured graph; the host-side sums (a step's figures) go through the GPU too. */
#ifndef EXAPT_COMM_NCCL_H
#define EXAPT_COMM_NCCL_H

#include "exapt/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Bytes of a group's id (NCCL's unique id). */
#define EX_NCCL_ID_BYTES 128

/** A communicator of one GPU per rank. */
typedef struct ex_nccl_comm ex_nccl_comm;

/** Makes a new group's id, on one rank (rank 0), for every rank to join with: hand it over
 *  with MPI_Bcast or a file (ex_nccl_comm_new_file). EX_ERR_ARG for a NULL id; EX_ERR_COMM
 *  when NCCL fails; messages in msg. */
ex_status ex_nccl_id(unsigned char id[EX_NCCL_ID_BYTES], char *msg, size_t msg_len);

/** Joins the group id of size ranks as rank, on CUDA device `device` (the CUDA backend's:
 *  EXAPT_CUDA_DEVICE), every rank on its own GPU. Joining and every sum wait at most
 *  timeout_s seconds for the other ranks; past that, or when NCCL reports that a rank
 *  failed, the communicator aborts its sums (the GPU work waiting in them ends) and
 *  fails with EX_ERR_COMM, as does every later call. The abort (ncclCommAbort, which can
 *  wait without end once a peer is gone) runs on a detached thread of its own.
 *  EX_ERR_ARG for a NULL out or id, size below 1, a rank outside 0 .. size - 1, a negative
 *  device or a timeout not above 0; EX_ERR_COMM when CUDA or NCCL fail; messages in msg.
 *  *out is NULL on failure. */
ex_status ex_nccl_comm_new(int size, int rank, const unsigned char id[EX_NCCL_ID_BYTES], int device,
                           double timeout_s, ex_nccl_comm **out, char *msg, size_t msg_len);

/** ex_nccl_comm_new with the id passed through a file that every rank can read: rank 0
 *  makes the id and writes it to path (a temporary file renamed into place), the others
 *  wait up to timeout_s for it. The path must be new to the job (EX_ERR_ARG on rank 0 when
 *  it exists: another rank could read an old group's id); rank 0 removes it again in
 *  ex_nccl_comm_free. EX_ERR_IO when the file cannot be written or read in time. */
ex_status ex_nccl_comm_new_file(const char *path, int size, int rank, int device, double timeout_s,
                                ex_nccl_comm **out, char *msg, size_t msg_len);

/** The ex_comm to hand to ex_search_config.comm, ex_network_config.comm or
 *  ex_plan_set_comm (device_backend "cuda"); valid until ex_nccl_comm_free, which must come
 *  after the searches, networks, plans and backends that use it are freed. */
const ex_comm *ex_nccl_comm_get(const ex_nccl_comm *c);

/** Leaves the group and frees the communicator. NULL: no-op. */
void ex_nccl_comm_free(ex_nccl_comm *c);

#ifdef __cplusplus
}
#endif
#endif
