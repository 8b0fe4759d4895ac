/* ex_comm over MPI: non-blocking all-reduces polled against a deadline, so that a dead or
 * hung rank turns into an error on the others rather than a hang. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "exapt/comm_mpi.h"

struct ex_mpi_comm {
    ex_comm comm;
    MPI_Comm mpi;
    double timeout_s;
};

static void say(char *msg, size_t len, const char *what, int err)
{
    char text[MPI_MAX_ERROR_STRING] = "";
    int n = 0;
    MPI_Error_string(err, text, &n);
    if (msg && len)
        snprintf(msg, len, "mpi: %s: %s", what, text);
}

/* Polls req until it completes or the deadline passes: busy at first (a step's
 * collectives mostly complete within microseconds), then in 100 µs sleeps. */
static ex_status wait_for(const ex_mpi_comm *c, MPI_Request *req, char *msg, size_t len)
{
    double deadline = MPI_Wtime() + c->timeout_s;
    for (long polls = 0;; polls++) {
        int done = 0, err = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (err != MPI_SUCCESS) {
            say(msg, len, "allreduce", err);
            return EX_ERR_COMM;
        }
        if (done)
            return EX_OK;
        if (MPI_Wtime() > deadline) {
            if (msg && len)
                snprintf(msg, len,
                         "mpi: rank %d of %d: no answer from the other ranks in %g s (a rank "
                         "died, hangs or is far behind)",
                         c->comm.rank, c->comm.size, c->timeout_s);
            return EX_ERR_COMM; /* the request stays pending: the job must end */
        }
        if (polls > 10000)
            nanosleep(&(struct timespec){0, 100000}, NULL);
    }
}

static ex_status allreduce_sum(void *user, float *buf, size_t n, char *msg, size_t len)
{
    ex_mpi_comm *c = user;
    MPI_Request req;
    for (size_t done = 0; done < n;) {
        /* MPI counts are int */
        int part = n - done > (size_t)1 << 30 ? 1 << 30 : (int)(n - done);
        int err = MPI_Iallreduce(MPI_IN_PLACE, buf + done, part, MPI_FLOAT, MPI_SUM, c->mpi, &req);
        if (err != MPI_SUCCESS) {
            say(msg, len, "allreduce", err);
            return EX_ERR_COMM;
        }
        ex_status st = wait_for(c, &req, msg, len);
        if (st != EX_OK)
            return st;
        done += (size_t)part;
    }
    return EX_OK;
}

ex_status ex_mpi_comm_new(MPI_Comm comm, double timeout_s, ex_mpi_comm **out, char *msg,
                          size_t msg_len)
{
    if (!out || !(timeout_s > 0.0)) {
        if (msg && msg_len)
            snprintf(msg, msg_len, "mpi: %s", !out ? "out is NULL" : "timeout must be above 0");
        return EX_ERR_ARG;
    }
    *out = NULL;
    ex_mpi_comm *c = calloc(1, sizeof *c);
    if (!c) {
        if (msg && msg_len)
            snprintf(msg, msg_len, "mpi: out of host memory");
        return EX_ERR_NOMEM;
    }
    int err = MPI_Comm_dup(comm, &c->mpi);
    if (err == MPI_SUCCESS)
        err = MPI_Comm_set_errhandler(c->mpi, MPI_ERRORS_RETURN);
    if (err == MPI_SUCCESS)
        err = MPI_Comm_rank(c->mpi, &c->comm.rank);
    if (err == MPI_SUCCESS)
        err = MPI_Comm_size(c->mpi, &c->comm.size);
    if (err != MPI_SUCCESS) {
        say(msg, msg_len, "setting up the communicator", err);
        free(c);
        return EX_ERR_COMM;
    }
    c->timeout_s = timeout_s;
    c->comm.allreduce_sum = allreduce_sum;
    c->comm.user = c;
    *out = c;
    return EX_OK;
}

const ex_comm *ex_mpi_comm_get(const ex_mpi_comm *c)
{
    return c ? &c->comm : NULL;
}

void ex_mpi_comm_free(ex_mpi_comm *c)
{
    if (!c)
        return;
    MPI_Comm_free(&c->mpi);
    free(c);
}
