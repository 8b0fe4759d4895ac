/* Data parallelism for the command: a process that mpirun started as one rank of several
 * joins the group through exapt_mpi, and `exapt --ranks N` starts such a group on this
 * machine. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#ifdef EXAPT_HAVE_MPI
#include "exapt/comm_mpi.h"
#endif

/* What the launchers put in a rank's environment: its world size, and its rank among the
 * processes of its machine. */
static int env_int(const char *const *names, int fallback)
{
    for (int i = 0; names[i]; i++) {
        const char *v = getenv(names[i]);
        if (v && *v)
            return atoi(v);
    }
    return fallback;
}

static int world_size(void)
{
    static const char *const names[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", NULL};
    return env_int(names, 1);
}

static int local_rank(void)
{
    static const char *const names[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                        "PMI_LOCAL_RANK", NULL};
    return env_int(names, 0);
}

/* Collectives that wait longer than this end the run: a rank died or hangs. The issue's
 * bound is an error within 60 s; a step's ranks wait for each other only as long as their
 * work differs (rank 0 writes the checkpoints). */
static double comm_timeout(void)
{
    const char *v = getenv("EXAPT_COMM_TIMEOUT");
    double t = v ? atof(v) : 0.0;
    return t > 0.0 ? t : 45.0;
}

int cli_ranks_start(cli_global *g)
{
    g->comm = NULL;
    int size = world_size();
    if (size <= 1)
        return 0;
#ifdef EXAPT_HAVE_MPI
    char dev[16];
    snprintf(dev, sizeof dev, "%d", local_rank());
    setenv("EXAPT_CUDA_DEVICE", dev, 0);
    int argc = 0;
    char **argv = NULL;
    if (MPI_Init(&argc, &argv) != MPI_SUCCESS)
        return cli_fail("exapt", "mpirun started %d ranks, but MPI_Init failed", size);
    ex_mpi_comm *c = NULL;
    char msg[256];
    if (ex_mpi_comm_new(MPI_COMM_WORLD, comm_timeout(), &c, msg, sizeof msg) != EX_OK) {
        MPI_Abort(MPI_COMM_WORLD, CLI_EXIT_FAIL);
        return cli_fail("exapt", "%s", msg);
    }
    g->comm = ex_mpi_comm_get(c);
    return 0;
#else
    return cli_fail("exapt",
                    "started as one of %d ranks, but this exapt was built without MPI "
                    "(install libopenmpi-dev and rebuild)",
                    size);
#endif
}

int cli_ranks_finish(cli_global *g, int rc)
{
#ifdef EXAPT_HAVE_MPI
    if (g->comm) {
        if (rc) /* the others would wait for this rank's next collective */
            MPI_Abort(MPI_COMM_WORLD, rc);
        ex_mpi_comm_free((ex_mpi_comm *)g->comm->user);
        MPI_Finalize();
        g->comm = NULL;
    }
#else
    (void)g;
#endif
    return rc;
}

bool cli_lead(const cli_global *g)
{
    return !g->comm || g->comm->rank == 0;
}

int cli_ranks_launch(int ranks, int argc, char **argv)
{
    char n[16];
    snprintf(n, sizeof n, "%d", ranks);
    /* mpirun, -n N, --oversubscribe (more ranks than cores is the user's choice), the
     * command line without --ranks N */
    char **v = calloc((size_t)argc + 5, sizeof *v);
    if (!v)
        return cli_fail("exapt", "out of memory");
    int k = 0;
    v[k++] = "mpirun";
    v[k++] = "-n";
    v[k++] = n;
    v[k++] = "--oversubscribe";
    for (int i = 0; i < argc; i++) {
        if (i > 0 && !strcmp(argv[i], "--ranks") && i + 1 < argc) {
            i++;
            continue;
        }
        if (i > 0 && !strncmp(argv[i], "--ranks=", 8))
            continue;
        v[k++] = argv[i];
    }
    v[k] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        free(v);
        return cli_fail("exapt", "--ranks %d: cannot start mpirun", ranks);
    }
    if (pid == 0) {
        execvp(v[0], v);
        fprintf(stderr, "exapt: --ranks %d: cannot run mpirun (install openmpi-bin)\n", ranks);
        _exit(127);
    }
    free(v);
    int status = 0;
    if (waitpid(pid, &status, 0) < 0)
        return cli_fail("exapt", "--ranks %d: lost mpirun", ranks);
    return WIFEXITED(status) ? WEXITSTATUS(status) : CLI_EXIT_FAIL;
}
