/* Data parallelism on CUDA through NCCL (exapt_nccl), the ranks as processes forked here
 * and joined through an id file:
 *   test_data_parallel_nccl [--ranks R] [--one-gpu] [compare|die|hang|misuse]
 * compare: every rank ends the search and the derived network's training of dp_runs.c with
 *   the same bits, within DP_NMSE_BOUND of one process on the same global batches;
 * die | hang: rank 1 is killed, or stops, before its fourth search step: rank 0 must end
 *   with an error within 60 s (the communicator's timeout here is 10 s).
 * --one-gpu puts every rank on GPU 0: NCCL refuses two ranks of one host on one GPU, so
 * each rank then names itself a host of its own (NCCL_HOSTID) and they talk over the
 * loopback interface; otherwise rank r takes GPU r. Needs a GPU: by hand (label cuda),
 * except misuse: the communicator's functions given bad arguments, which need none. */
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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "dp_runs.h"
#include "exapt/comm_nccl.h"

#define MAX_RANKS 8
#define TIMEOUT_S 10.0
#define FAILURE_BOUND_S 60.0

typedef struct setup {
    int ranks;
    bool one_gpu;
    const char *mode;
    char dir[256];
} setup;

static const char *g_mode = "compare";
static char g_step_file[320]; /* where rank 0 notes the step it begins */

static void failure_hook(int rank, int step)
{
    FILE *f = rank == 0 ? fopen(g_step_file, "w") : NULL;
    if (f) {
        fprintf(f, "%d\n", step);
        fclose(f);
    }
    if (step == 3 && rank == 1 && !strcmp(g_mode, "die"))
        raise(SIGKILL);
    if (step == 3 && rank == 1 && !strcmp(g_mode, "hang"))
        sleep(600);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* One rank, in its own process: join, run both, exit 0 on success. */
static int rank_main(const setup *su, int rank)
{
    char v[64], path[320];
    snprintf(v, sizeof v, "%d", su->one_gpu ? 0 : rank);
    setenv("EXAPT_CUDA_DEVICE", v, 1);
    if (su->one_gpu) {
        snprintf(v, sizeof v, "exapt-test-rank-%d", rank);
        setenv("NCCL_HOSTID", v, 1);
        setenv("NCCL_SOCKET_IFNAME", "lo", 1);
    }
    char msg[512];
    ex_nccl_comm *c = NULL;
    snprintf(path, sizeof path, "%s/nccl-id", su->dir);
    if (ex_nccl_comm_new_file(path, su->ranks, rank, su->one_gpu ? 0 : rank, TIMEOUT_S, &c, msg,
                              sizeof msg) != EX_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, msg);
        return 2;
    }
    const ex_comm *comm = ex_nccl_comm_get(c);
    snprintf(path, sizeof path, "%s/search%d.safetensors", su->dir, rank);
    bool ok = dp_run_search("cuda", comm, path, failure_hook);
    snprintf(path, sizeof path, "%s/network%d.safetensors", su->dir, rank);
    ok = ok && dp_run_network("cuda", comm, path);
    ex_nccl_comm_free(c);
    return ok ? 0 : 1;
}

/* Forks the ranks; returns how each ended (waitpid status) and when rank 0 ended. */
static void run_ranks(const setup *su, int status[MAX_RANKS], double *rank0_s)
{
    pid_t pid[MAX_RANKS];
    fflush(NULL);
    for (int r = 0; r < su->ranks; r++) {
        pid[r] = fork();
        assert_true(pid[r] >= 0);
        if (pid[r] == 0)
            _exit(rank_main(su, r));
    }
    double t0 = now_s();
    *rank0_s = -1.0;
    for (int left = su->ranks; left > 0;) {
        int st;
        pid_t p = waitpid(-1, &st, WNOHANG);
        if (p > 0) {
            for (int r = 0; r < su->ranks; r++)
                if (pid[r] == p) {
                    status[r] = st;
                    if (r == 0)
                        *rank0_s = now_s() - t0;
                }
            left--;
            continue;
        }
        if (*rank0_s >= 0.0 && strcmp(su->mode, "compare")) { /* the hung rank: end it */
            for (int r = 1; r < su->ranks; r++)
                kill(pid[r], SIGKILL);
        }
        if (now_s() - t0 > 600.0) {
            for (int r = 0; r < su->ranks; r++)
                kill(pid[r], SIGKILL);
        }
        nanosleep(&(struct timespec){0, 10000000L}, NULL);
    }
}

static void compare(void **state)
{
    setup *su = *state;
    int status[MAX_RANKS];
    double t;
    run_ranks(su, status, &t);
    for (int r = 0; r < su->ranks; r++)
        if (!WIFEXITED(status[r]) || WEXITSTATUS(status[r]) != 0)
            fail_msg("rank %d ended badly (status %d)", r, status[r]);
    const char *what[] = {"search", "network"};
    for (int k = 0; k < 2; k++) {
        char first[320], mine[320], alone[320];
        snprintf(first, sizeof first, "%s/%s0.safetensors", su->dir, what[k]);
        for (int r = 1; r < su->ranks; r++) {
            snprintf(mine, sizeof mine, "%s/%s%d.safetensors", su->dir, what[k], r);
            if (!dp_same_file(mine, first))
                fail_msg("%s: rank %d's state differs from rank 0's", what[k], r);
            remove(mine);
        }
        snprintf(alone, sizeof alone, "%s/%s-alone.safetensors", su->dir, what[k]);
        assert_true(k == 0 ? dp_run_search("cuda", NULL, alone, NULL)
                           : dp_run_network("cuda", NULL, alone));
        double worst = dp_worst_nmse(first, alone);
        print_message("%s on cuda through NCCL: %d ranks%s against one process after %d steps: "
                      "worst NMSE %.3g over every f32 tensor saved (bound %g)\n",
                      what[k], su->ranks, su->one_gpu ? " on one GPU" : "", DP_STEPS, worst,
                      DP_NMSE_BOUND);
        assert_true(worst >= 0.0 && worst <= DP_NMSE_BOUND);
        remove(first);
        remove(alone);
    }
}

static void failure(void **state)
{
    setup *su = *state;
    int status[MAX_RANKS];
    double t;
    run_ranks(su, status, &t);
    /* rank 0 must have failed in the step where rank 1 went, not before it */
    int step = -1;
    FILE *f = fopen(g_step_file, "r");
    if (f) {
        if (fscanf(f, "%d", &step) != 1)
            step = -1;
        fclose(f);
    }
    print_message("%s: rank 0 ended in step %d after %.1f s with status %d\n", su->mode, step, t,
                  status[0]);
    assert_int_equal(step, 3);
    assert_true(WIFEXITED(status[0]) && WEXITSTATUS(status[0]) != 0);
    assert_true(t >= 0.0 && t < FAILURE_BOUND_S);
}

static void misuse(void **state)
{
    setup *su = *state;
    unsigned char id[EX_NCCL_ID_BYTES] = {0};
    ex_nccl_comm *c = (ex_nccl_comm *)&c; /* must come back NULL */
    char msg[256] = "", path[320];
    assert_int_equal(ex_nccl_id(NULL, msg, sizeof msg), EX_ERR_ARG);
    assert_int_equal(ex_nccl_comm_new(2, 0, id, 0, 10.0, NULL, msg, sizeof msg), EX_ERR_ARG);
    assert_int_equal(ex_nccl_comm_new(2, 0, NULL, 0, 10.0, &c, msg, sizeof msg), EX_ERR_ARG);
    assert_null(c);
    const struct {
        int size, rank, device;
        double timeout;
        const char *what;
    } bad[] = {{0, 0, 0, 10.0, "size"},    {2, 2, 0, 10.0, "rank"},   {2, -1, 0, 10.0, "rank"},
               {2, 1, -1, 10.0, "device"}, {2, 1, 0, 0.0, "timeout"}, {2, 1, 0, NAN, "timeout"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(ex_nccl_comm_new(bad[i].size, bad[i].rank, id, bad[i].device,
                                          bad[i].timeout, &c, msg, sizeof msg),
                         EX_ERR_ARG);
        assert_non_null(strstr(msg, bad[i].what));
    }
    snprintf(path, sizeof path, "%s/nccl-id", su->dir);
    assert_int_equal(ex_nccl_comm_new_file(NULL, 2, 0, 0, 10.0, &c, msg, sizeof msg), EX_ERR_ARG);
    assert_int_equal(ex_nccl_comm_new_file(path, 2, 0, 0, -1.0, &c, msg, sizeof msg), EX_ERR_ARG);
    /* an id file left by another job: rank 0 refuses it rather than let others read it */
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(ex_nccl_comm_new_file(path, 2, 0, 0, 10.0, &c, msg, sizeof msg), EX_ERR_ARG);
    assert_non_null(strstr(msg, "exists"));
    /* a short file is no id; a missing one times out */
    assert_int_equal(ex_nccl_comm_new_file(path, 2, 1, 0, 0.2, &c, msg, sizeof msg), EX_ERR_IO);
    assert_non_null(strstr(msg, "too short"));
    remove(path);
    assert_int_equal(ex_nccl_comm_new_file(path, 2, 1, 0, 0.2, &c, msg, sizeof msg), EX_ERR_IO);
    assert_non_null(strstr(msg, "in time"));
    assert_null(c);
    assert_null(ex_nccl_comm_get(NULL));
    ex_nccl_comm_free(NULL);
}

int main(int argc, char **argv)
{
    setup su = {.ranks = 2, .mode = "compare"};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--ranks") && i + 1 < argc)
            su.ranks = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--one-gpu"))
            su.one_gpu = true;
        else if (!strcmp(argv[i], "compare") || !strcmp(argv[i], "die") ||
                 !strcmp(argv[i], "hang") || !strcmp(argv[i], "misuse"))
            su.mode = argv[i];
        else {
            fprintf(stderr, "usage: %s [--ranks R] [--one-gpu] [compare|die|hang|misuse]\n",
                    argv[0]);
            return 2;
        }
    }
    if (su.ranks < 2 || su.ranks > MAX_RANKS || 8 % su.ranks) {
        fprintf(stderr, "--ranks must be 2, 4 or 8\n");
        return 2;
    }
    g_mode = su.mode;
    const char *tmp = getenv("TMPDIR");
    snprintf(su.dir, sizeof su.dir, "%s/exapt-nccl-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(su.dir)) {
        perror(su.dir);
        return 2;
    }
    snprintf(g_step_file, sizeof g_step_file, "%s/rank0-step", su.dir);
    const struct CMUnitTest compare_tests[] = {cmocka_unit_test_prestate(compare, &su)};
    const struct CMUnitTest failure_tests[] = {cmocka_unit_test_prestate(failure, &su)};
    const struct CMUnitTest misuse_tests[] = {cmocka_unit_test_prestate(misuse, &su)};
    int failed = !strcmp(su.mode, "compare")  ? cmocka_run_group_tests(compare_tests, NULL, NULL)
                 : !strcmp(su.mode, "misuse") ? cmocka_run_group_tests(misuse_tests, NULL, NULL)
                                              : cmocka_run_group_tests(failure_tests, NULL, NULL);
    char p[320];
    snprintf(p, sizeof p, "%s/nccl-id", su.dir);
    remove(p);
    remove(g_step_file);
    for (int r = 0; r < su.ranks; r++)
        for (int k = 0; k < 2; k++) {
            snprintf(p, sizeof p, "%s/%s%d.safetensors", su.dir, k ? "network" : "search", r);
            remove(p);
        }
    rmdir(su.dir);
    return failed ? 1 : 0;
}
