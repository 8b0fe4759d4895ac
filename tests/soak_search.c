/* Soak: many search steps on one process must not grow its resident memory, nor, on a
 * backend that counts them (ex_backend_get_counters: Vulkan), its device allocations and
 * objects. The search runs on Fashion-MNIST batches through the prefetching loader, as
 * `exapt search` does; resident memory (/proc/self/statm) is sampled after a warm-up and
 * at the end and may grow by less than 1%; the device counters (allocations held, their
 * bytes, other objects held, and objects ever made) must not change at all after the
 * warm-up.
 *   soak_search [--backend NAME] [--size quick|small|tiny] [--steps N] [--batch N]
 * quick: the quick preset's supernet (label long, 10000 steps by hand on the CPU); small:
 * 3 cells of 2 nodes, 4 channels, batch 4 (label long, 1000 steps on Vulkan); tiny: one
 * cell of 1 node, 4 channels, batch 4 (label unit, a few hundred steps). --batch changes
 * the size's batch only (the supernet stays), so a long soak fits a small machine's day.
 * Progress goes to stderr every 5% (at most every 50 steps) so a run cut short still shows
 * its trend. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "exapt/backend.h"
#include "exapt/data.h"
#include "exapt/search.h"

typedef struct soak_opts {
    const char *backend, *size;
    long steps;
    int batch; /* 0: the size's own */
} soak_opts;

static soak_opts opts = {"cpu", "tiny", 300, 0};

static long rss_kb(void)
{
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return -1;
    int got = fscanf(f, "%ld %ld", &pages, &resident);
    fclose(f);
    return got == 2 ? resident * (sysconf(_SC_PAGESIZE) / 1024) : -1;
}

static void configure(ex_search_config *c, const ex_dataset *ds)
{
    ex_search_config_default(c);
    c->in_channels = ex_dataset_channels(ds);
    c->height = ex_dataset_height(ds);
    c->width = ex_dataset_width(ds);
    c->classes = ex_dataset_classes(ds);
    if (!strcmp(opts.size, "quick")) {
        /* apps/cmd_search.c's quick preset */
        c->channels = 6;
        c->layers = 5;
        c->steps = c->multiplier = 3;
        c->arch_lr = 3e-3f;
    } else if (!strcmp(opts.size, "small")) {
        c->batch = 4;
        c->channels = 4;
        c->layers = 3;
        c->steps = c->multiplier = 2;
        c->arch_lr = 3e-3f;
    } else {
        c->batch = 4;
        c->channels = 4;
        c->layers = 1;
        c->steps = c->multiplier = 1;
        c->arch_lr = 3e-3f;
    }
    if (opts.batch > 0)
        c->batch = opts.batch;
}

/* The device counters (0 when the backend keeps none): what a leak would grow. */
typedef struct device_use {
    int kept;
    ex_backend_counters c;
} device_use;

static device_use device_now(const ex_backend *be)
{
    device_use u;
    u.kept = ex_backend_get_counters(be, &u.c) == EX_OK;
    return u;
}

static void device_print(const char *when, const device_use *u)
{
    if (!u->kept) {
        fprintf(stderr, "soak: %s: the backend keeps no device counters\n", when);
        return;
    }
    fprintf(stderr,
            "soak: %s: %llu device allocations (%llu bytes), %llu other device objects (%llu "
            "descriptor sets), %llu made since opening; the step recorded last: %llu "
            "dispatches, %llu barriers, %llu inexact bindings, recorded in %.1f ms\n",
            when, (unsigned long long)u->c.device_allocations,
            (unsigned long long)u->c.device_bytes, (unsigned long long)u->c.device_objects,
            (unsigned long long)u->c.descriptor_sets, (unsigned long long)u->c.created,
            (unsigned long long)u->c.dispatches, (unsigned long long)u->c.barriers,
            (unsigned long long)u->c.inexact_bindings, u->c.record_ms);
}

static ex_loader *loader(const ex_dataset *ds, int batch, uint64_t seed)
{
    ex_loader_opts o;
    ex_loader_opts_default(&o, ds, true);
    o.batch = batch;
    o.seed = seed;
    o.drop_last = true;
    o.prefetch = 2;
    ex_loader *l = NULL;
    char msg[256];
    if (ex_loader_new(ds, &o, &l, msg, sizeof msg) != EX_OK)
        fail_msg("loader: %s", msg);
    return l;
}

static void soak(void **state)
{
    (void)state;
    char msg[512];
    ex_dataset *all = NULL, *train = NULL, *valid = NULL;
    ex_status st = ex_dataset_load(NULL, "fashion-mnist", EX_SPLIT_TRAIN, &all, msg, sizeof msg);
    if (st != EX_OK)
        fail_msg("%s", msg);
    assert_int_equal(ex_dataset_split(all, 0.5, &train, &valid, msg, sizeof msg), EX_OK);
    ex_dataset_free(all);
    ex_backend *be = NULL;
    if (ex_backend_open(opts.backend, &be, msg, sizeof msg) != EX_OK)
        fail_msg("backend %s: %s", opts.backend, msg);
    ex_search_config c;
    configure(&c, train);
    ex_search *s = NULL;
    if (ex_search_new(&c, be, &s, msg, sizeof msg) != EX_OK)
        fail_msg("%s", msg);
    ex_loader *lt = loader(train, c.batch, 1), *lv = loader(valid, c.batch, 2);
    size_t img = (size_t)c.batch * (size_t)c.in_channels * (size_t)c.height * (size_t)c.width;
    float *xt = malloc(img * sizeof *xt), *xv = malloc(img * sizeof *xv);
    int32_t *yt = malloc((size_t)c.batch * sizeof *yt), *yv = malloc((size_t)c.batch * sizeof *yv);
    assert_non_null(xt);
    assert_non_null(xv);
    assert_non_null(yt);
    assert_non_null(yv);
    /* warm-up: allocator pools, the loader's threads and the plan's first runs settle */
    long warm = opts.steps / 10 > 20 ? opts.steps / 10 : 20, base = 0, every = opts.steps / 20;
    device_use dev_warm = {0};
    every = every > 50 ? 50 : every > 0 ? every : 1;
    for (long i = 0; i < opts.steps; i++) {
        int nt = 0, nv = 0;
        ex_search_stats r;
        assert_int_equal(ex_loader_next(lt, xt, yt, &nt), EX_OK);
        assert_int_equal(ex_loader_next(lv, xv, yv, &nv), EX_OK);
        st = ex_search_step(s, xt, yt, xv, yv, 0.025f, 1.0f, &r);
        if (st != EX_OK)
            fail_msg("step %ld: %s", i, ex_search_error(s));
        if (i + 1 == warm) {
            base = rss_kb();
            dev_warm = device_now(be);
        }
        if ((i + 1) % every == 0) {
            device_use d = device_now(be);
            fprintf(stderr,
                    "soak: step %ld/%ld rss %ld kB (after warm-up %ld kB) loss %.4f device "
                    "allocations %llu objects %llu made %llu\n",
                    i + 1, opts.steps, rss_kb(), base, r.train_loss,
                    (unsigned long long)d.c.device_allocations,
                    (unsigned long long)d.c.device_objects, (unsigned long long)d.c.created);
        }
    }
    long end = rss_kb();
    device_use dev_end = device_now(be);
    device_print("after warm-up", &dev_warm);
    device_print("at the end", &dev_end);
    fprintf(stderr,
            "soak: %ld steps, rss after warm-up (step %ld) %ld kB, at the end %ld kB "
            "(%+.2f%%)\n",
            opts.steps, warm, base, end, 100.0 * (double)(end - base) / (double)base);
    assert_true(base > 0);
    assert_true((double)end < 1.01 * (double)base);
    if (dev_warm.kept) {
        assert_int_equal(dev_end.c.device_allocations, dev_warm.c.device_allocations);
        assert_int_equal(dev_end.c.device_bytes, dev_warm.c.device_bytes);
        assert_int_equal(dev_end.c.device_objects, dev_warm.c.device_objects);
        assert_int_equal(dev_end.c.created, dev_warm.c.created);
    }
    free(xt);
    free(xv);
    free(yt);
    free(yv);
    ex_loader_free(lt);
    ex_loader_free(lv);
    ex_search_free(s);
    ex_backend_close(be);
    ex_dataset_free(train);
    ex_dataset_free(valid);
}

int main(int argc, char **argv)
{
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--backend"))
            opts.backend = argv[i + 1];
        else if (!strcmp(argv[i], "--size"))
            opts.size = argv[i + 1];
        else if (!strcmp(argv[i], "--steps"))
            opts.steps = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--batch"))
            opts.batch = atoi(argv[i + 1]);
    }
    if (opts.steps < 1 || opts.batch < 0 ||
        (strcmp(opts.size, "quick") && strcmp(opts.size, "small") && strcmp(opts.size, "tiny"))) {
        fprintf(stderr, "usage: soak_search [--backend NAME] [--size quick|small|tiny] "
                        "[--steps N] [--batch N]\n");
        return 2;
    }
    const struct CMUnitTest tests[] = {cmocka_unit_test(soak)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
