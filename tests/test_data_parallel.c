/* Data parallelism through MPI on the CPU backend, run under mpirun:
 *   test_data_parallel compare  every rank ends 20 search steps, and 20 training steps of
 *                               a derived network, with the same bits, and those match
 *                               one process's on the same global batches (NMSE at most
 *                               1e-5 per tensor);
 *   test_data_parallel die|hang rank 1 is killed, or stops answering, after 3 steps: the
 *                               others must end with an error (data_parallel_failure.sh
 *                               checks how and how fast). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
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

#include "exapt/comm_mpi.h"
#include "exapt/exapt.h"

#define B 8
#define HW 12
#define PIX (HW * HW)
#define NHW 20
#define STEPS 20
/* The bound holds while the rounding-level differences of the group's sums (added in another
 * order) change no discrete decision of the step: a ReLU input or a max-pooling tie that
 * rounding flips sends the trajectories apart, as it does in one process. Measured with the
 * network below: label smoothing 0.1 added, one such flip at step 13 took the NMSE to 2e-2;
 * in one process, every input pixel moved by one ulp gave 0.97. */
#define NMSE_BOUND 1e-5

static const char *mode = "compare";

/* The global batch of a step: two classes told apart by a faint bright top or bottom half
 * under pseudo-random noise, so that the loss stays well above 0 for the 20 steps (a task
 * learnt to a vanishing loss stops the weights, and so would hide a wrong gradient). */
static void global_batch(int step, int salt, int pix, float *x, int32_t *y)
{
    for (int i = 0; i < B; i++) {
        y[i] = (i * 5 + step + salt) % 2;
        for (int p = 0; p < pix; p++) {
            uint32_t h = (uint32_t)(p * 2654435761u) ^ (uint32_t)(i * 40503 + step * 977 + salt);
            h *= 2246822519u;
            h ^= h >> 15;
            x[i * pix + p] =
                0.2f * (float)((p < pix / 2) == (y[i] == 1)) + (float)(h >> 8) / 16777216.0f - 0.5f;
        }
    }
}

static void config(ex_search_config *c, const ex_comm *comm)
{
    ex_search_config_default(c);
    c->in_channels = 1;
    c->height = c->width = HW;
    c->classes = 2;
    c->batch = B;
    c->channels = 4;
    c->layers = 3;
    c->steps = 2;
    c->multiplier = 2;
    c->arch_lr = 3e-2f;
    c->seed = 11;
    c->comm = comm;
}

static ex_backend *open_cpu(void)
{
    ex_backend *be = NULL;
    char msg[512];
    if (ex_backend_open("cpu", &be, msg, sizeof msg) != EX_OK)
        fail_msg("cpu backend: %s", msg);
    return be;
}

/* STEPS search steps on this rank's share of each global batch, then the state into path. */
static void run_search(const ex_comm *comm, const char *path)
{
    ex_backend *be = open_cpu();
    char msg[512];
    ex_search_config c;
    config(&c, comm);
    ex_search *s = NULL;
    if (ex_search_new(&c, be, &s, msg, sizeof msg) != EX_OK)
        fail_msg("search: %s", msg);
    int ranks = comm ? comm->size : 1, rank = comm ? comm->rank : 0, share = B / ranks;
    float xt[B * PIX], xv[B * PIX];
    int32_t yt[B], yv[B];
    for (int step = 0; step < STEPS; step++) {
        if (step == 3 && rank == 1 && !strcmp(mode, "die"))
            raise(SIGKILL);
        if (step == 3 && rank == 1 && !strcmp(mode, "hang"))
            sleep(600);
        global_batch(step, 0, PIX, xt, yt);
        global_batch(step, 1, PIX, xv, yv);
        size_t at = (size_t)rank * (size_t)share;
        ex_search_stats st;
        ex_status rc =
            ex_search_step(s, xt + at * PIX, yt + at, xv + at * PIX, yv + at, 0.02f, 1.0f, &st);
        if (rc != EX_OK) {
            fprintf(stderr, "rank %d: step %d: %s\n", rank, step, ex_search_error(s));
            MPI_Abort(MPI_COMM_WORLD, 3); /* the job ends: the others may wait on us */
        }
        assert_false(st.skipped);
    }
    if (ex_search_save(s, path, NULL) != EX_OK)
        fail_msg("save %s: %s", path, ex_search_error(s));
    ex_search_free(s);
    ex_backend_close(be);
}

/* The same for the training of a derived network: DARTS_V2 at 4 channels with its
 * auxiliary head (which needs 20x20 images); affine batch norms, unlike the search's. */
static void run_network(const ex_comm *comm, const char *path)
{
    ex_backend *be = open_cpu();
    char msg[512];
    ex_network_config c;
    ex_network_config_default(&c);
    c.in_channels = 1;
    c.height = c.width = NHW;
    c.classes = 2;
    c.batch = B;
    c.channels = 4;
    c.layers = 3;
    c.auxiliary = true;
    c.seed = 5;
    c.comm = comm;
    ex_genotype g;
    assert_int_equal(ex_genotype_builtin("DARTS_V2", &g), EX_OK);
    ex_network *n = NULL;
    if (ex_network_new(&g, &c, be, &n, msg, sizeof msg) != EX_OK)
        fail_msg("network: %s", msg);
    int ranks = comm ? comm->size : 1, rank = comm ? comm->rank : 0, share = B / ranks;
    float x[B * NHW * NHW];
    int32_t y[B];
    for (int step = 0; step < STEPS; step++) {
        global_batch(step, 2, NHW * NHW, x, y);
        size_t at = (size_t)rank * (size_t)share;
        if (ex_network_step(n, x + at * NHW * NHW, y + at, 0.005f, NULL) != EX_OK) {
            fprintf(stderr, "rank %d: step %d: %s\n", rank, step, ex_network_error(n));
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
    }
    if (ex_network_save(n, path, true) != EX_OK)
        fail_msg("save %s: %s", path, ex_network_error(n));
    ex_network_free(n);
    ex_backend_close(be);
}

static char *slurp(const char *path, long *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *len = ftell(f);
    rewind(f);
    char *b = malloc((size_t)*len + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)*len, f), (size_t)*len);
    fclose(f);
    return b;
}

/* Every tensor of a within NMSE_BOUND of b's; returns the worst NMSE. */
static double worst_nmse(const char *pa, const char *pb)
{
    ex_safetensors *a = NULL, *b = NULL;
    char msg[256];
    assert_int_equal(ex_safetensors_open(pa, &a, msg, sizeof msg), EX_OK);
    assert_int_equal(ex_safetensors_open(pb, &b, msg, sizeof msg), EX_OK);
    double worst = 0.0;
    int tensors = 0;
    for (size_t i = 0; ex_safetensors_name(a, i); i++, tensors++) {
        const char *name = ex_safetensors_name(a, i);
        ex_st_info ia, ib;
        assert_int_equal(ex_safetensors_info(a, name, &ia, msg, sizeof msg), EX_OK);
        assert_int_equal(ex_safetensors_info(b, name, &ib, msg, sizeof msg), EX_OK);
        assert_int_equal(ia.nbytes, ib.nbytes);
        if (ia.dtype != EX_ST_F32)
            continue; /* counters: compared with the file's bytes elsewhere */
        size_t n = ia.nbytes / sizeof(float);
        float *va = malloc(ia.nbytes + 1), *vb = malloc(ib.nbytes + 1);
        assert_non_null(va);
        assert_non_null(vb);
        assert_int_equal(ex_safetensors_read(a, name, va, ia.nbytes, msg, sizeof msg), EX_OK);
        assert_int_equal(ex_safetensors_read(b, name, vb, ib.nbytes, msg, sizeof msg), EX_OK);
        double num = 0.0, den = 0.0;
        for (size_t k = 0; k < n; k++) {
            num += ((double)va[k] - vb[k]) * ((double)va[k] - vb[k]);
            den += (double)vb[k] * vb[k];
        }
        double e = den > 0.0 ? num / den : num;
        if (e > NMSE_BOUND)
            print_error("%s: NMSE %.3g\n", name, e);
        worst = e > worst ? e : worst;
        free(va);
        free(vb);
    }
    assert_true(tensors > 10);
    ex_safetensors_close(a);
    ex_safetensors_close(b);
    return worst;
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
    long la, lb;
    char *a = slurp(mine, &la), *b = slurp(first, &lb);
    bool same = la == lb && !memcmp(a, b, (size_t)la);
    free(a);
    free(b);
    if (!same)
        print_error("rank %d: the state differs from rank 0's\n", comm->rank);
    assert_true(agree(comm, same));
    if (comm->rank != 0)
        return;
    /* and that state is one process's on the same global batches */
    run(NULL, alone);
    double worst = worst_nmse(mine, alone);
    print_message("%s: %d ranks against one process after %d steps: worst NMSE %.3g over "
                  "every f32 tensor saved (bound %g)\n",
                  what, comm->size, STEPS, worst, NMSE_BOUND);
    assert_true(worst <= NMSE_BOUND);
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
