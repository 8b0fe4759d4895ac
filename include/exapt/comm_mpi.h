/* exapt — an ex_comm over MPI (library exapt_mpi, built where Open MPI or another MPI is
 * found; the core never links MPI). */
#ifndef EXAPT_COMM_MPI_H
#define EXAPT_COMM_MPI_H

#include <mpi.h>

#include "exapt/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/** A communicator of the ranks of an MPI communicator. */
typedef struct ex_mpi_comm ex_mpi_comm;

/** Wraps comm (MPI must be initialised; the wrapper works on its own duplicate of comm).
 *  Its allreduce_sum is MPI_Iallreduce with MPI_SUM, waited for at most timeout_s seconds:
 *  a rank that died or hangs makes the others' collectives fail with EX_ERR_COMM instead
 *  of waiting forever (the caller then ends the job, e.g. with MPI_Abort). EX_ERR_ARG for
 *  a NULL out or a timeout not above 0; EX_ERR_COMM when MPI fails; messages in msg. */
ex_status ex_mpi_comm_new(MPI_Comm comm, double timeout_s, ex_mpi_comm **out, char *msg,
                          size_t msg_len);

/** The ex_comm to hand to ex_search_config.comm or ex_plan_set_comm; valid until
 *  ex_mpi_comm_free. */
const ex_comm *ex_mpi_comm_get(const ex_mpi_comm *c);

/** Frees the wrapper and its duplicate communicator (before MPI_Finalize). NULL: no-op. */
void ex_mpi_comm_free(ex_mpi_comm *c);

#ifdef __cplusplus
}
#endif
#endif
