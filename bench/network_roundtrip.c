/* Trains a derived network on Fashion-MNIST for a number of steps and checks that saving
 * and loading its weights preserves what it evaluates: the test accuracy measured in the
 * training process, after ex_network_save, and in a second network that loaded the file
 * must agree. Prints one JSON object per checkpoint.
 *
 * usage: bench_network_roundtrip BACKEND DATA_DIR GENOTYPE STEPS EVERY [OUT.safetensors]
 * With STEPS 0, loads OUT and prints its accuracy on the whole test set; with STEPS -1,
 * prints a fresh network's losses on the first test and training batches, which every
 * backend must reproduce (EVAL_BATCH overrides the evaluation batch of 250). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exapt/exapt.h"

typedef struct probe {
    ex_backend *be;
    ex_genotype g;
    ex_network_config cfg;
    ex_dataset *train, *test;
    float *x;
    int32_t *y;
    const char *path;
} probe;

/* Accuracy of n on the first `images` test images. */
static int test_acc(probe *p, ex_network *n, int64_t images, double *acc)
{
    ex_loader_opts o;
    ex_loader_opts_default(&o, p->test, false);
    o.batch = p->cfg.eval_batch;
    o.prefetch = 0;
    ex_loader *l = NULL;
    char msg[256];
    if (ex_loader_new(p->test, &o, &l, msg, sizeof msg) != EX_OK) {
        fprintf(stderr, "loader: %s\n", msg);
        return 1;
    }
    int64_t correct = 0, seen = 0;
    while (seen < images) {
        int count = 0, c = 0;
        float loss = 0;
        if (ex_loader_next(l, p->x, p->y, &count) != EX_OK ||
            ex_network_eval(n, p->x, p->y, &loss, &c) != EX_OK) {
            fprintf(stderr, "eval: %s\n", ex_network_error(n));
            ex_loader_free(l);
            return 1;
        }
        correct += c;
        seen += count;
    }
    ex_loader_free(l);
    *acc = (double)correct / (double)seen;
    return 0;
}

/* Loads the saved file into a fresh network and evaluates it. */
static int reload_acc(probe *p, int64_t images, double *acc)
{
    ex_network *m = NULL;
    char msg[256];
    if (ex_network_new(&p->g, &p->cfg, p->be, &m, msg, sizeof msg) != EX_OK) {
        fprintf(stderr, "network: %s\n", msg);
        return 1;
    }
    int rc = ex_network_load(m, p->path, false) != EX_OK;
    if (rc)
        fprintf(stderr, "load: %s\n", ex_network_error(m));
    else
        rc = test_acc(p, m, images, acc);
    ex_network_free(m);
    return rc;
}

static int run(probe *p, long steps, long every)
{
    ex_network *n = NULL;
    char msg[256];
    if (ex_network_new(&p->g, &p->cfg, p->be, &n, msg, sizeof msg) != EX_OK) {
        fprintf(stderr, "network: %s\n", msg);
        return 1;
    }
    ex_loader_opts o;
    ex_loader_opts_default(&o, p->train, true);
    o.batch = p->cfg.batch;
    o.drop_last = true;
    ex_loader *l = NULL;
    int rc = ex_loader_new(p->train, &o, &l, msg, sizeof msg) != EX_OK;
    for (long s = 1; !rc && s <= steps; s++) {
        int count = 0;
        ex_network_stats st;
        rc = ex_loader_next(l, p->x, p->y, &count) != EX_OK ||
             ex_network_step(n, p->x, p->y, 0.05f, &st) != EX_OK;
        if (rc || s % every)
            continue;
        double live = 0, after = 0, reload = 0;
        rc = test_acc(p, n, 2000, &live) || ex_network_save(n, p->path, false) != EX_OK ||
             test_acc(p, n, 2000, &after) || reload_acc(p, 2000, &reload);
        if (!rc)
            printf("{\"step\": %ld, \"loss\": %.5f, \"live\": %.4f, \"after_save\": %.4f, "
                   "\"reloaded\": %.4f}\n",
                   s, st.loss, live, after, reload);
        fflush(stdout);
    }
    if (rc)
        fprintf(stderr, "failed: %s\n", ex_network_error(n));
    ex_loader_free(l);
    ex_network_free(n);
    return rc;
}

/* The losses of a fresh network on the first test batch (eval) and the first training
 * batch (a step with learning rate 0): the same on every backend. */
static int first_losses(probe *p)
{
    ex_network *n = NULL;
    char msg[256];
    if (ex_network_new(&p->g, &p->cfg, p->be, &n, msg, sizeof msg) != EX_OK) {
        fprintf(stderr, "network: %s\n", msg);
        return 1;
    }
    ex_loader_opts o;
    ex_loader_opts_default(&o, p->test, false);
    o.batch = p->cfg.eval_batch;
    o.prefetch = 0;
    ex_loader *l = NULL;
    float eval = 0;
    int c = 0, count = 0,
        rc = ex_loader_new(p->test, &o, &l, msg, sizeof msg) != EX_OK ||
             ex_loader_next(l, p->x, p->y, &count) != EX_OK ||
             ex_network_eval(n, p->x, p->y, &eval, &c) != EX_OK;
    ex_loader_free(l);
    ex_network_stats st = {0};
    o.batch = p->cfg.batch;
    rc = rc || ex_loader_new(p->test, &o, &l, msg, sizeof msg) != EX_OK ||
         ex_loader_next(l, p->x, p->y, &count) != EX_OK ||
         ex_network_step(n, p->x, p->y, 0.0f, &st) != EX_OK;
    ex_loader_free(l);
    if (!rc)
        printf("{\"eval_loss\": %.7f, \"train_loss\": %.7f}\n", eval, st.loss);
    else
        fprintf(stderr, "failed: %s\n", ex_network_error(n));
    ex_network_free(n);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: %s BACKEND DATA_DIR GENOTYPE STEPS EVERY [OUT]\n", argv[0]);
        return 2;
    }
    probe p = {.path = argc > 6 ? argv[6] : "roundtrip.safetensors"};
    char msg[256];
    if (ex_backend_open(argv[1], &p.be, msg, sizeof msg) != EX_OK ||
        ex_genotype_load(argv[3], &p.g, msg, sizeof msg) != EX_OK ||
        ex_dataset_load(argv[2], "auto", EX_SPLIT_TRAIN, &p.train, msg, sizeof msg) != EX_OK ||
        ex_dataset_load(argv[2], "auto", EX_SPLIT_TEST, &p.test, msg, sizeof msg) != EX_OK) {
        fprintf(stderr, "%s\n", msg);
        return 1;
    }
    ex_network_config_default(&p.cfg);
    p.cfg.in_channels = ex_dataset_channels(p.train);
    p.cfg.height = ex_dataset_height(p.train);
    p.cfg.width = ex_dataset_width(p.train);
    p.cfg.classes = ex_dataset_classes(p.train);
    p.cfg.batch = 64;
    p.cfg.eval_batch = getenv("EVAL_BATCH") ? atoi(getenv("EVAL_BATCH")) : 250;
    p.cfg.channels = 12;
    p.cfg.layers = 5;
    p.cfg.auxiliary = false;
    p.cfg.seed = 2;
    size_t px = (size_t)p.cfg.in_channels * p.cfg.height * p.cfg.width;
    p.x = malloc(sizeof *p.x * px * 250);
    p.y = malloc(sizeof *p.y * 250);
    int rc = !p.x || !p.y;
    double acc = 0;
    if (!rc && atol(argv[4]) < 0) {
        rc = first_losses(&p);
    } else if (!rc && atol(argv[4]) == 0) {
        rc = reload_acc(&p, ex_dataset_count(p.test), &acc);
        if (!rc)
            printf("{\"file\": \"%s\", \"test_acc\": %.4f}\n", p.path, acc);
    } else if (!rc) {
        rc = run(&p, atol(argv[4]), atol(argv[5]));
    }
    free(p.x);
    free(p.y);
    ex_dataset_free(p.train);
    ex_dataset_free(p.test);
    ex_backend_close(p.be);
    return rc;
}
