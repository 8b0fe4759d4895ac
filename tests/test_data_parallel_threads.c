/* Data parallelism with ranks as threads of one process, on any backend:
 *   test_data_parallel_threads [--backend NAME] [--ranks R]
 * R threads (2 by default), each with its own backend instance, run the search and the
 * derived network's training of dp_runs.c through a communicator over shared memory; every
 * rank must end with the same bits, within DP_NMSE_BOUND of one rank on the same global
 * batches. It tests the engine's data parallelism where no MPI is (a GPU backend's two
 * ranks share one device), and shows that ex_comm needs nothing but its sum. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "dp_runs.h"

#define MAX_RANKS 8
/* a rank that does not arrive within this ends the sum with an error on the others */
#define WAIT_S 120

/* The group: every rank leaves its buffer; the last to arrive sums them in rank order into
 * every rank's buffer, so that all ranks get the same bits, and wakes the others. */
typedef struct group {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int size, arrived;
    unsigned round;
    bool broken; /* a rank timed out or gave a bad count: every later sum fails */
    float *buf[MAX_RANKS];
    size_t n[MAX_RANKS];
} group;

typedef struct member {
    group *g;
    ex_comm comm;
    const char *backend, *path;
    bool (*run)(const char *backend, const ex_comm *comm, const char *path);
    bool ok;
} member;

static void sum_into_all(group *g)
{
    for (size_t k = 0; k < g->n[0]; k++) {
        float s = g->buf[0][k];
        for (int r = 1; r < g->size; r++)
            s += g->buf[r][k];
        for (int r = 0; r < g->size; r++)
            g->buf[r][k] = s;
    }
}

static ex_status group_sum(void *user, float *buf, size_t n, char *msg, size_t len)
{
    member *m = user;
    group *g = m->g;
    pthread_mutex_lock(&g->mu);
    unsigned round = g->round;
    g->buf[m->comm.rank] = buf;
    g->n[m->comm.rank] = n;
    if (++g->arrived == g->size) {
        for (int r = 1; r < g->size; r++)
            g->broken |= g->n[r] != g->n[0];
        if (!g->broken)
            sum_into_all(g);
        g->arrived = 0;
        g->round++;
        pthread_cond_broadcast(&g->cv);
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += WAIT_S;
    while (g->round == round && !g->broken)
        if (pthread_cond_timedwait(&g->cv, &g->mu, &until) == ETIMEDOUT) {
            g->broken = true;
            pthread_cond_broadcast(&g->cv);
        }
    bool broken = g->broken;
    pthread_mutex_unlock(&g->mu);
    if (broken)
        snprintf(msg, len,
                 "rank %d: the group is broken (a rank left, hung or summed another "
                 "count)",
                 m->comm.rank);
    return broken ? EX_ERR_COMM : EX_OK;
}

static void *member_main(void *arg)
{
    member *m = arg;
    m->ok = m->run(m->backend, &m->comm, m->path);
    if (!m->ok) { /* the others must not wait for this rank's sums */
        pthread_mutex_lock(&m->g->mu);
        m->g->broken = true;
        pthread_cond_broadcast(&m->g->cv);
        pthread_mutex_unlock(&m->g->mu);
    }
    return NULL;
}

typedef struct setup {
    const char *backend;
    int ranks;
} setup;

static bool search_run(const char *backend, const ex_comm *comm, const char *path)
{
    return dp_run_search(backend, comm, path, NULL);
}

static void check(const setup *su, const char *what,
                  bool (*run)(const char *backend, const ex_comm *comm, const char *path))
{
    char dir[256];
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/exapt-dpt-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    assert_non_null(mkdtemp(dir));
    group g = {.size = su->ranks};
    pthread_mutex_init(&g.mu, NULL);
    pthread_cond_init(&g.cv, NULL);
    member m[MAX_RANKS];
    pthread_t t[MAX_RANKS];
    char path[MAX_RANKS][300], alone[300];
    for (int r = 0; r < su->ranks; r++) {
        snprintf(path[r], sizeof path[r], "%s/%s%d.safetensors", dir, what, r);
        m[r] = (member){.g = &g,
                        .comm = {.size = su->ranks, .rank = r, .allreduce_sum = group_sum},
                        .backend = su->backend,
                        .path = path[r],
                        .run = run};
        m[r].comm.user = &m[r];
        assert_int_equal(pthread_create(&t[r], NULL, member_main, &m[r]), 0);
    }
    bool ok = true;
    for (int r = 0; r < su->ranks; r++) {
        pthread_join(t[r], NULL);
        ok &= m[r].ok;
    }
    pthread_cond_destroy(&g.cv);
    pthread_mutex_destroy(&g.mu);
    assert_true(ok);
    for (int r = 1; r < su->ranks; r++)
        if (!dp_same_file(path[r], path[0]))
            fail_msg("%s: rank %d's state differs from rank 0's", what, r);
    snprintf(alone, sizeof alone, "%s/alone.safetensors", dir);
    assert_true(run(su->backend, NULL, alone));
    double worst = dp_worst_nmse(path[0], alone);
    print_message("%s on %s: %d ranks (threads) against one rank after %d steps: worst NMSE "
                  "%.3g over every f32 tensor saved (bound %g)\n",
                  what, su->backend, su->ranks, DP_STEPS, worst, DP_NMSE_BOUND);
    assert_true(worst >= 0.0 && worst <= DP_NMSE_BOUND);
    for (int r = 0; r < su->ranks; r++)
        remove(path[r]);
    remove(alone);
    rmdir(dir);
}

static void threads_search(void **state)
{
    check(*state, "search", search_run);
}

/* weights, momentum and running statistics of a derived network's training */
static void threads_network(void **state)
{
    check(*state, "network", dp_run_network);
}

int main(int argc, char **argv)
{
    setup su = {.backend = "cpu", .ranks = 2};
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--backend")) {
            su.backend = argv[i + 1];
        } else if (!strcmp(argv[i], "--ranks")) {
            su.ranks = atoi(argv[i + 1]);
        } else {
            fprintf(stderr, "usage: %s [--backend NAME] [--ranks R]\n", argv[0]);
            return 2;
        }
    }
    /* the global batch of 8 images must split evenly */
    if (su.ranks < 2 || su.ranks > MAX_RANKS || 8 % su.ranks) {
        fprintf(stderr, "--ranks must be 2, 4 or 8\n");
        return 2;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate(threads_search, &su),
        cmocka_unit_test_prestate(threads_network, &su),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
