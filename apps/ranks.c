/* Data parallelism for the command: a process that mpirun started as one rank of several
 * joins the group through exapt_mpi, and `exapt --ranks N` starts such a group on this
 * machine. */
#define _GNU_SOURCE /* dladdr */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#ifdef EXAPT_HAVE_MPI
#include "exapt/comm_mpi.h"
#endif
#ifdef EXAPT_HAVE_NCCL
#include <dlfcn.h>

#include "exapt/comm_nccl.h"

/* exapt_nccl's functions, from the module libexapt-nccl.so beside libexapt.so */
typedef struct nccl_api {
    ex_status (*id)(unsigned char *, char *, size_t);
    ex_status (*comm_new)(int, int, const unsigned char *, int, double, ex_nccl_comm **, char *,
                          size_t);
    const ex_comm *(*get)(const ex_nccl_comm *);
    void (*free)(ex_nccl_comm *);
} nccl_api;
#endif

/* The group's communicators: MPI's, and NCCL's once a CUDA run asked for it. */
struct cli_ranks {
#ifdef EXAPT_HAVE_MPI
    ex_mpi_comm *mpi;
#endif
#ifdef EXAPT_HAVE_NCCL
    nccl_api nccl_fn;
    ex_nccl_comm *nccl;
    bool nccl_tried; /* the module was looked for (it may be absent: host-staged sums) */
#endif
    int unused; /* a struct needs a member in builds with neither */
};

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

#ifdef EXAPT_HAVE_MPI
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
#endif

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
    if (!(g->ranks = calloc(1, sizeof *g->ranks)) ||
        ex_mpi_comm_new(MPI_COMM_WORLD, comm_timeout(), &c, msg, sizeof msg) != EX_OK) {
        MPI_Abort(MPI_COMM_WORLD, CLI_EXIT_FAIL);
        return cli_fail("exapt", "%s", g->ranks ? msg : "out of memory");
    }
    g->ranks->mpi = c;
    g->comm = ex_mpi_comm_get(c);
    return 0;
#else
    return cli_fail("exapt",
                    "started as one of %d ranks, but this exapt was built without MPI "
                    "(install libopenmpi-dev and rebuild)",
                    size);
#endif
}

#ifdef EXAPT_HAVE_NCCL
/* Loads libexapt-nccl.so from libexapt.so's folder (or EXAPT_MODULE_PATH); false, with
 * the reason in msg, where it or NCCL cannot be loaded. */
static bool nccl_load(nccl_api *f, char *msg, size_t len)
{
    char dir[400] = ".", path[440];
    Dl_info info;
    const char *env = getenv("EXAPT_MODULE_PATH");
    if (env && *env)
        snprintf(dir, sizeof dir, "%s", env);
    else if (dladdr((void *)ex_backend_open, &info) && info.dli_fname &&
             strrchr(info.dli_fname, '/'))
        snprintf(dir, sizeof dir, "%.*s", (int)(strrchr(info.dli_fname, '/') - info.dli_fname),
                 info.dli_fname);
    snprintf(path, sizeof path, "%s/libexapt-nccl.so", dir);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        snprintf(msg, len, "%s", why ? why : path);
        return false;
    }
    /* the module stays loaded: NCCL and the CUDA runtime register exit handlers */
    *(void **)&f->id = dlsym(h, "ex_nccl_id");
    *(void **)&f->comm_new = dlsym(h, "ex_nccl_comm_new");
    *(void **)&f->get = dlsym(h, "ex_nccl_comm_get");
    *(void **)&f->free = dlsym(h, "ex_nccl_comm_free");
    if (!f->id || !f->comm_new || !f->get || !f->free) {
        snprintf(msg, len, "%s lacks the ex_nccl_* functions", path);
        return false;
    }
    return true;
}

/* An NCCL group of the MPI group's ranks, on this rank's GPU (EXAPT_CUDA_DEVICE). Every
 * rank loads the module; their verdicts are summed, so all take NCCL or none does. */
static int nccl_join(const cli_global *g, const ex_comm **out)
{
    struct cli_ranks *r = g->ranks;
    char msg[512] = "";
    r->nccl_tried = true;
    int loaded = nccl_load(&r->nccl_fn, msg, sizeof msg), all = 0;
    if (MPI_Allreduce(&loaded, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS)
        return cli_fail("exapt", "nccl: cannot agree over MPI whether NCCL loads");
    if (all != g->comm->size) {
        if (cli_lead(g))
            fprintf(stderr,
                    "exapt: NCCL does not load on every rank (%s): the sums go through host "
                    "memory over MPI\n",
                    loaded ? "another rank's" : msg);
        return 0;
    }
    unsigned char id[EX_NCCL_ID_BYTES] = {0};
    int ok = g->comm->rank != 0 || r->nccl_fn.id(id, msg, sizeof msg) == EX_OK;
    /* rank 0's verdict travels with the id, so that no rank waits for a group never made */
    unsigned char packet[EX_NCCL_ID_BYTES + 1];
    memcpy(packet, id, sizeof id);
    packet[EX_NCCL_ID_BYTES] = (unsigned char)ok;
    if (MPI_Bcast(packet, (int)sizeof packet, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
        return cli_fail("exapt", "nccl: cannot pass the group's id over MPI");
    if (!packet[EX_NCCL_ID_BYTES])
        return cli_fail("exapt", "%s", msg[0] ? msg : "nccl: rank 0 could not make the group");
    const char *dev = getenv("EXAPT_CUDA_DEVICE");
    if (r->nccl_fn.comm_new(g->comm->size, g->comm->rank, packet, dev ? atoi(dev) : 0,
                            comm_timeout(), &r->nccl, msg, sizeof msg) != EX_OK)
        return cli_fail("exapt", "%s", msg);
    *out = r->nccl_fn.get(r->nccl);
    return 0;
}
#endif

int cli_ranks_comm(const cli_global *g, ex_backend *be, const ex_comm **out)
{
    *out = g->comm;
#ifdef EXAPT_HAVE_NCCL
    if (g->comm && g->ranks && !strcmp(ex_backend_get_caps(be)->name, "cuda")) {
        if (g->ranks->nccl)
            *out = g->ranks->nccl_fn.get(g->ranks->nccl);
        else if (!g->ranks->nccl_tried)
            return nccl_join(g, out);
    }
#else
    (void)be;
#endif
    return 0;
}

int cli_ranks_finish(cli_global *g, int rc)
{
#ifdef EXAPT_HAVE_MPI
    if (g->comm) {
        if (rc) /* the others would wait for this rank's next collective */
            MPI_Abort(MPI_COMM_WORLD, rc);
#ifdef EXAPT_HAVE_NCCL
        if (g->ranks->nccl)
            g->ranks->nccl_fn.free(g->ranks->nccl);
#endif
        ex_mpi_comm_free(g->ranks->mpi);
        MPI_Finalize();
        g->comm = NULL;
    }
#endif
    free(g->ranks);
    g->ranks = NULL;
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
