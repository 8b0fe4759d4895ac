/* Another backend against the CPU on a whole search: 20 steps of a small supernet on
 * fixed generated data with one seed, then alpha and every saved tensor (weights,
 * optimizer states, running statistics) must match the CPU's within normalized squared
 * error 1e-5, and the genotypes must agree wherever the CPU's choice is clear: on every
 * edge whose top-2 alpha margin exceeds ten times the largest alpha difference (the
 * edge's operation), and on every node whose second and third edges differ by more than
 * ten times the largest weight difference (the node's two inputs).
 *
 *   test_backend_search [--backend NAME] [--reference NAME] [--steps N]
 *                       [--partial-channels K] [--recompute L]
 *                                      (default vulkan, cpu, 20, 1, each backend's own)
 *
 * --recompute sets ex_search_config.recompute on both sides (the levels' results are bitwise
 * the same on the CPU: test_search).
 *
 * --reference cpu-ref compares with the CPU backend's double-accumulating reference path:
 * the fast CPU path's float sums follow the machine's BLAS kernels, and over 20 steps two
 * machines' fast paths drift apart by more than the bound (README, "GPU tests").
 *
 * A backend that cannot be opened is a failure, never a skip. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "exapt/exapt.h"
#include "exapt/safetensors.h"
#include "exapt/search.h"

#define B 4
#define HW 8
#define PIX (HW * HW)
#define NMSE_MAX 1e-5
#define MAX_E 64

static const char *other_backend = "vulkan", *reference = "cpu";
static int nsteps = 20, partial = 1, recompute = -1;

/* Two classes: a bright top or bottom half, plus a little hashed noise of 65,536 levels.
 * Noise of five levels made many equal values, and where two values tie (a max-pooling
 * window's largest) the last bit of sums that backends may order differently decides:
 * after a change of the order of gradient sums, one flip at step 3 grew to an alpha NMSE
 * of 6.7e-5 by step 5 on lavapipe (5e-11 after 20 steps with this data). */
static void batch(int step, int salt, float *x, int32_t *y)
{
    for (int i = 0; i < B; i++) {
        y[i] = (i + step + salt) % 2;
        for (int p = 0; p < PIX; p++) {
            uint32_t h = (uint32_t)(p + PIX * (i + B * (step * 2 + salt))) * 2654435761u;
            x[i * PIX + p] =
                (float)((p < PIX / 2) == (y[i] == 1)) + 0.4f * (float)(h >> 16) / 65536.0f;
        }
    }
}

static void small_config(ex_search_config *c)
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
    c->mode = EX_SEARCH_DARTS;
    c->order = 1;
    c->arch_lr = 3e-2f; /* alpha must move in a few steps */
    c->seed = 12345;
    c->partial_channels = partial;
    c->recompute = recompute;
}

/** What one run leaves behind. */
typedef struct run_result {
    int edges, ncand;
    float alpha[2 * MAX_E * EX_MAX_CANDIDATES];
    float w[2 * MAX_E * EX_MAX_CANDIDATES];
    char path[64];
} run_result;

static void run(const char *backend, run_result *r)
{
    ex_backend *be = NULL;
    char msg[512] = "";
    if (ex_backend_open(backend, &be, msg, sizeof msg) != EX_OK)
        fail_msg("cannot open backend %s: %s", backend, msg);
    ex_search_config c;
    small_config(&c);
    ex_search *s = NULL;
    if (ex_search_new(&c, be, &s, msg, sizeof msg) != EX_OK)
        fail_msg("%s: search: %s", backend, msg);
    float xt[B * PIX], xv[B * PIX];
    int32_t yt[B], yv[B];
    ex_search_stats st;
    for (int k = 0; k < nsteps; k++) {
        batch(k, 0, xt, yt);
        batch(k, 1, xv, yv);
        if (ex_search_step(s, xt, yt, xv, yv, 0.025f, 1.0f, &st) != EX_OK)
            fail_msg("%s: step %d: %s", backend, k, ex_search_error(s));
    }
    r->edges = ex_search_edges(s);
    r->ncand = c.ncand;
    assert_true(r->edges > 0 && r->edges <= MAX_E);
    int half = r->edges * r->ncand;
    if (ex_search_alphas(s, r->alpha, r->alpha + half) != EX_OK ||
        ex_search_weights(s, r->w, r->w + half) != EX_OK)
        fail_msg("%s: alphas: %s", backend, ex_search_error(s));
    /* the process id keeps concurrent runs (ctest -j, one per backend) apart */
    snprintf(r->path, sizeof r->path, "test_backend_search_%s_%ld.safetensors", backend,
             (long)getpid());
    if (ex_search_save(s, r->path, "{}") != EX_OK)
        fail_msg("%s: save: %s", backend, ex_search_error(s));
    ex_search_free(s);
    ex_backend_close(be);
}

static double nmse_f(const float *y, const float *ref, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num += ((double)y[i] - ref[i]) * ((double)y[i] - ref[i]);
        den += (double)ref[i] * ref[i];
    }
    return num / (den > 1e-30 ? den : 1e-30);
}

static float max_abs_diff(const float *a, const float *b, int64_t n)
{
    float m = 0.0f;
    for (int64_t i = 0; i < n; i++)
        if (fabsf(a[i] - b[i]) > m || a[i] != a[i] || b[i] != b[i])
            m = a[i] != a[i] || b[i] != b[i] ? INFINITY : fabsf(a[i] - b[i]);
    return m;
}

/* Every tensor of the CPU's file, read from both files, as one vector each. */
static void compare_files(const char *cpu_path, const char *other_path)
{
    char msg[512] = "";
    ex_safetensors *fa = NULL, *fb = NULL;
    if (ex_safetensors_open(cpu_path, &fa, msg, sizeof msg) != EX_OK ||
        ex_safetensors_open(other_path, &fb, msg, sizeof msg) != EX_OK)
        fail_msg("open: %s", msg);
    size_t n = ex_safetensors_count(fa);
    assert_int_equal(n, ex_safetensors_count(fb));
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        ex_st_info ia, ib;
        const char *name = ex_safetensors_name(fa, i);
        assert_non_null(name);
        if (ex_safetensors_info(fa, name, &ia, msg, sizeof msg) != EX_OK ||
            ex_safetensors_info(fb, name, &ib, msg, sizeof msg) != EX_OK)
            fail_msg("%s: %s", name, msg);
        assert_int_equal(ia.nbytes, ib.nbytes);
        if (ia.dtype != EX_ST_F32)
            continue;
        size_t cnt = ia.nbytes / sizeof(float);
        float *a = malloc(ia.nbytes ? ia.nbytes : 1), *b = malloc(ib.nbytes ? ib.nbytes : 1);
        assert_true(a && b);
        if (ex_safetensors_read(fa, name, a, ia.nbytes, msg, sizeof msg) != EX_OK ||
            ex_safetensors_read(fb, name, b, ib.nbytes, msg, sizeof msg) != EX_OK)
            fail_msg("%s: %s", name, msg);
        for (size_t k = 0; k < cnt; k++) {
            num += ((double)b[k] - a[k]) * ((double)b[k] - a[k]);
            den += (double)a[k] * a[k];
        }
        free(a);
        free(b);
    }
    ex_safetensors_close(fa);
    ex_safetensors_close(fb);
    double err = num / (den > 1e-30 ? den : 1e-30);
    print_message("every saved tensor: NMSE %.3g (bound %.3g)\n", err, NMSE_MAX);
    assert_true(err <= NMSE_MAX);
}

/* The largest and second largest entries of a row (k = -1 when absent). */
static void top2(const float *row, int n, const int *skip, int *k1, int *k2)
{
    *k1 = *k2 = -1;
    for (int k = 0; k < n; k++) {
        if (skip && skip[k])
            continue;
        if (*k1 < 0 || row[k] > row[*k1]) {
            *k2 = *k1;
            *k1 = k;
        } else if (*k2 < 0 || row[k] > row[*k2]) {
            *k2 = k;
        }
    }
}

/* Each edge's operation, where the CPU's top-2 alpha margin (non-`none` candidates) is
 * clear. Returns how many edges were checked. */
static int compare_ops(const run_result *cpu, const run_result *oth, const int *none, float tol)
{
    int checked = 0;
    for (int e = 0; e < 2 * cpu->edges; e++) {
        const float *a = cpu->alpha + e * cpu->ncand, *b = oth->alpha + e * cpu->ncand;
        int c1, c2, o1, o2;
        top2(a, cpu->ncand, none, &c1, &c2);
        top2(b, cpu->ncand, none, &o1, &o2);
        if (c2 < 0 || a[c1] - a[c2] <= tol)
            continue;
        checked++;
        if (c1 != o1)
            fail_msg("edge %d: the CPU picks candidate %d by %.3g, %s picks %d", e, c1,
                     a[c1] - a[c2], other_backend, o1);
    }
    return checked;
}

/* Each node's two inputs, ranked by their edges' strongest non-`none` weight, where the
 * CPU's gap between its second and third edge is clear. */
static int compare_inputs(const run_result *cpu, const run_result *oth, const int *none, int steps,
                          float tol)
{
    int checked = 0;
    for (int cell = 0; cell < 2; cell++) {
        int first = cell * cpu->edges;
        for (int i = 0; i < steps; i++, first += 2 + i - 1) {
            int nin = 2 + i;
            float sa[EX_MAX_STEPS + 2], sb[EX_MAX_STEPS + 2];
            for (int j = 0; j < nin; j++) {
                int c1, c2;
                top2(cpu->w + (first + j) * cpu->ncand, cpu->ncand, none, &c1, &c2);
                sa[j] = cpu->w[(first + j) * cpu->ncand + c1];
                top2(oth->w + (first + j) * cpu->ncand, cpu->ncand, none, &c1, &c2);
                sb[j] = oth->w[(first + j) * cpu->ncand + c1];
            }
            int a1, a2, b1, b2;
            top2(sa, nin, NULL, &a1, &a2);
            top2(sb, nin, NULL, &b1, &b2);
            float third = -INFINITY;
            for (int j = 0; j < nin; j++)
                if (j != a1 && j != a2 && sa[j] > third)
                    third = sa[j];
            if (nin > 2 && sa[a2] - third <= tol)
                continue;
            checked++;
            int same = (a1 == b1 && a2 == b2) || (a1 == b2 && a2 == b1);
            if (!same)
                fail_msg("cell %d node %d: the CPU keeps inputs %d and %d, %s %d and %d", cell, i,
                         a1, a2, other_backend, b1, b2);
        }
    }
    return checked;
}

/* The two runs; their files are removed by forget_runs, whatever the test's outcome. */
static run_result cpu, oth;

static int forget_runs(void **state)
{
    (void)state;
    if (cpu.path[0])
        remove(cpu.path);
    if (oth.path[0])
        remove(oth.path);
    return 0;
}

static void agrees_with_cpu(void **state)
{
    (void)state;
    run(reference, &cpu);
    run(other_backend, &oth);
    assert_int_equal(cpu.edges, oth.edges);
    int n = 2 * cpu.edges * cpu.ncand;
    double ea = nmse_f(oth.alpha, cpu.alpha, n);
    print_message("alpha: NMSE %.3g (bound %.3g)\n", ea, NMSE_MAX);
    assert_true(ea <= NMSE_MAX);
    compare_files(cpu.path, oth.path);

    ex_search_config c;
    small_config(&c);
    int none[EX_MAX_CANDIDATES] = {0};
    for (int k = 0; k < c.ncand; k++)
        none[k] = c.cand[k] == EX_CAND_NONE;
    float da = max_abs_diff(cpu.alpha, oth.alpha, n), dw = max_abs_diff(cpu.w, oth.w, n);
    int ops = compare_ops(&cpu, &oth, none, 10.0f * da);
    int ins = compare_inputs(&cpu, &oth, none, c.steps, 10.0f * dw);
    print_message("genotype: %d of %d edges and %d of %d nodes clear enough to compare; all "
                  "agree\n",
                  ops, 2 * cpu.edges, ins, 2 * c.steps);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc) {
            other_backend = argv[++i];
        } else if (strcmp(argv[i], "--reference") == 0 && i + 1 < argc) {
            reference = argv[++i];
        } else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0) {
            nsteps = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--partial-channels") == 0 && i + 1 < argc &&
                   atoi(argv[i + 1]) > 0) {
            partial = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--recompute") == 0 && i + 1 < argc) {
            recompute = atoi(argv[++i]);
        } else {
            fprintf(stderr,
                    "usage: %s [--backend NAME] [--reference NAME] [--steps N] "
                    "[--partial-channels K] [--recompute L]\n",
                    argv[0]);
            return 2;
        }
    }
    const struct CMUnitTest tests[] = {cmocka_unit_test_teardown(agrees_with_cpu, forget_runs)};
    return cmocka_run_group_tests_name(other_backend, tests, NULL, NULL);
}
