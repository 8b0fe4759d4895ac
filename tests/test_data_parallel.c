/* Data parallelism through MPI on the CPU backend, run under mpirun:
 *   test_data_parallel compare  every rank ends 20 search steps, and 20 training steps of
 *                               a derived network, with the same bits, and those match
 *                               one process's on the same global batches (NMSE at most
 *                               1e-5 per tensor);
 *   test_data_parallel die|hang rank 1 is killed, or stops answering, after 3 steps: the
 *                               others must end with an error (data_parallel_failure.sh
 *                               checks how and how fast). */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "dp_runs.h"
#include "exapt/comm_mpi.h"
#include "exapt/exapt.h"

static const char *mode = "compare";

/* die or hang: rank 1 is killed, or stops answering, before its fourth step */
static void failure_hook(int rank, int step)
{
    if (step == 3 && rank == 1 && !strcmp(mode, "die"))
        raise(SIGKILL);
    if (step == 3 && rank == 1 && !strcmp(mode, "hang"))
        sleep(600);
}

/* A run on the CPU backend; a failing rank ends the job, since the others may wait on it. */
static void run_search(const ex_comm *comm, const char *path)
{
    if (!dp_run_search("cpu", comm, path, failure_hook))
        MPI_Abort(MPI_COMM_WORLD, 3);
}

static void run_network(const ex_comm *comm, const char *path)
{
    if (!dp_run_network("cpu", comm, path))
        MPI_Abort(MPI_COMM_WORLD, 3);
}

/* Whether every rank says ok: a sum through the communicator, whose timeout ends the wait
 * for a rank that failed an assertion and left (MPI_Barrier would wait forever). */
static bool agree(const ex_comm *comm, bool ok)
{
    float bad = ok ? 0.0f : 1.0f;
    char msg[256];
    if (comm->allreduce_sum(comm->user, &bad, 1, msg, sizeof msg) != EX_OK)
        fail_msg("rank %d: %s", comm->rank, msg);
    return bad == 0.0f;
}

/* run on every rank, then: the same bits everywhere, and within NMSE_BOUND of run alone */
static void check_against_one_process(const ex_comm *comm, const char *what,
                                      void (*run)(const ex_comm *, const char *))
{
    /* rank 0 names a fresh folder for everyone */
    char dir[256] = "";
    if (comm->rank == 0) {
        const char *tmp = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/exapt-dp-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(dir)) { /* the others wait in the broadcast: end the job */
            perror(dir);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
    char mine[300], first[300], alone[300];
    snprintf(mine, sizeof mine, "%s/%s%d.safetensors", dir, what, comm->rank);
    snprintf(first, sizeof first, "%s/%s0.safetensors", dir, what);
    snprintf(alone, sizeof alone, "%s/alone.safetensors", dir);
    run(comm, mine);
    assert_true(agree(comm, true)); /* every rank saved */
    /* every rank holds the same state, to the bit */
    bool same = dp_same_file(mine, first);
    if (!same)
        print_error("rank %d: the state differs from rank 0's\n", comm->rank);
    assert_true(agree(comm, same));
    if (comm->rank != 0)
        return;
    /* and that state is one process's on the same global batches */
    run(NULL, alone);
    double worst = dp_worst_nmse(mine, alone);
    print_message("%s: %d ranks against one process after %d steps: worst NMSE %.3g over "
                  "every f32 tensor saved (bound %g)\n",
                  what, comm->size, DP_STEPS, worst, DP_NMSE_BOUND);
    assert_true(worst >= 0.0 && worst <= DP_NMSE_BOUND);
    for (int r = 0; r < comm->size; r++) {
        char p[300];
        snprintf(p, sizeof p, "%s/%s%d.safetensors", dir, what, r);
        remove(p);
    }
    remove(alone);
    rmdir(dir);
}

/* The MPI communicator's wrapper given bad arguments. */
static void mpi_misuse(void **state)
{
    (void)state;
    ex_mpi_comm *c = NULL;
    char msg[256] = "";
    assert_int_equal(ex_mpi_comm_new(MPI_COMM_WORLD, 0.0, &c, msg, sizeof msg), EX_ERR_ARG);
    assert_non_null(strstr(msg, "timeout"));
    assert_null(c);
    assert_int_equal(ex_mpi_comm_new(MPI_COMM_WORLD, 1.0, NULL, msg, sizeof msg), EX_ERR_ARG);
    assert_null(ex_mpi_comm_get(NULL));
    ex_mpi_comm_free(NULL);
}

/* alpha, weights, optimizer states and running statistics of the search */
static void data_parallel_search(void **state)
{
    check_against_one_process(*state, "search", run_search);
}

/* weights, momentum and running statistics of a derived network's training */
static void data_parallel_network(void **state)
{
    check_against_one_process(*state, "network", run_network);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        mode = argv[1];
    double timeout = argc > 2 ? atof(argv[2]) : 30.0;
    MPI_Init(&argc, &argv);
    ex_mpi_comm *mc = NULL;
    char msg[256];
    if (ex_mpi_comm_new(MPI_COMM_WORLD, timeout, &mc, msg, sizeof msg) != EX_OK) {
        fprintf(stderr, "%s\n", msg);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const ex_comm *comm = ex_mpi_comm_get(mc);
    int failed;
    if (!strcmp(mode, "compare")) {
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(mpi_misuse),
            cmocka_unit_test_prestate(data_parallel_search, (void *)comm),
            cmocka_unit_test_prestate(data_parallel_network, (void *)comm),
        };
        failed = cmocka_run_group_tests(tests, NULL, NULL);
    } else {
        run_search(comm, "/dev/null"); /* die or hang: rank 0 must not get this far */
        failed = 1;
    }
    ex_mpi_comm_free(mc);
    MPI_Finalize();
    return failed ? 1 : 0;
}
