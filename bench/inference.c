/* Inference speed of a derived network: batch-1 latency and batch-256 throughput of
 * ex_network_predict (host images in, host logits out: the upload and the read-back
 * included), on one backend. The weights come from a file, or are a fresh network's saved
 * first (--save), which --export also writes as ONNX for the same timing elsewhere.
 * Prints one JSON object.
 *
 * usage: bench_inference --backend NAME (--weights FILE | --save FILE [--genotype G]
 *        [--channels C] [--layers L]) [--export FILE.onnx] [--dump DIR] [--seconds S]
 * --dump DIR writes the batch-256 input and this backend's logits (raw float32) there. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_time.h"
#include "exapt/exapt.h"

typedef struct args {
    const char *backend, *weights, *save, *genotype, *export, *dump;
    int channels, layers, profile;
    double seconds;
} args;

static int parse(int argc, char **argv, args *a)
{
    *a = (args){
        .backend = "auto", .genotype = "DARTS_V2", .channels = 36, .layers = 20, .seconds = 3.0};
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--backend"))
            a->backend = v;
        else if (!strcmp(k, "--weights"))
            a->weights = v;
        else if (!strcmp(k, "--save"))
            a->save = v;
        else if (!strcmp(k, "--genotype"))
            a->genotype = v;
        else if (!strcmp(k, "--export"))
            a->export = v;
        else if (!strcmp(k, "--dump"))
            a->dump = v;
        else if (!strcmp(k, "--channels"))
            a->channels = atoi(v);
        else if (!strcmp(k, "--layers"))
            a->layers = atoi(v);
        else if (!strcmp(k, "--profile"))
            a->profile = atoi(v);
        else if (!strcmp(k, "--seconds"))
            a->seconds = atof(v);
        else
            return 1;
    }
    return (argc % 2 == 0) || (!a->weights && !a->save);
}

/* A fresh network of Fashion-MNIST's shape (28x28x1, 10 classes, its normalization),
 * saved at a->save: the weights of the timing. */
static int make_weights(const args *a, ex_backend *be)
{
    ex_genotype g;
    char msg[512];
    if (ex_genotype_builtin(a->genotype, &g) != EX_OK &&
        ex_genotype_load(a->genotype, &g, msg, sizeof msg) != EX_OK) {
        fprintf(stderr, "bench_inference: %s\n", msg);
        return 1;
    }
    ex_network_config c;
    ex_network_config_default(&c);
    c.in_channels = 1;
    c.height = c.width = 28;
    c.channels = a->channels;
    c.layers = a->layers;
    c.auxiliary = false;
    c.batch = 2;
    c.input = (ex_normalize){.enabled = true, .mean = {0.2860f}, .std = {0.3530f}};
    ex_network *n = NULL;
    if (ex_network_new(&g, &c, be, &n, msg, sizeof msg) != EX_OK) {
        fprintf(stderr, "bench_inference: %s\n", msg);
        return 1;
    }
    int rc = ex_network_save(n, a->save, false) != EX_OK;
    if (rc)
        fprintf(stderr, "bench_inference: %s\n", ex_network_error(n));
    ex_network_free(n);
    return rc;
}

/* One profiled predict of n on x (batch b): milliseconds by op, largest first, a JSON
 * line. The plan keeps the times of its last pass, one chunk of the batch (eval_chunk),
 * which stand for the batch's passes multiplied by their number. */
static int profile_ops(ex_network *n, int b, const float *x, float *logits)
{
    ex_plan *plan = ex_network_plan(n);
    ex_network_config c;
    ex_network_config_default(&c);
    ex_network_get_config(n, &c);
    int passes = b / c.eval_chunk;
    double ms[EX_OP_COUNT] = {0};
    int count[EX_OP_COUNT] = {0};
    if (ex_plan_set_profile(plan, true) != EX_OK || ex_network_predict(n, x, logits) != EX_OK) {
        fprintf(stderr, "bench_inference: profile: %s\n", ex_network_error(n));
        return 1;
    }
    for (int64_t i = 0; i < ex_plan_node_count(plan); i++) {
        ex_node_info info;
        if (ex_plan_node_info(plan, i, &info) == EX_OK && (int)info.op < EX_OP_COUNT) {
            ms[info.op] += info.ms;
            count[info.op]++;
        }
    }
    printf("{\"bench\":\"inference_profile\",\"batch\":%d,\"chunk\":%d,\"ops\":[", b, c.eval_chunk);
    for (int first = 1;; first = 0) {
        int best = -1;
        for (int op = 0; op < EX_OP_COUNT; op++)
            if (count[op] && (best < 0 || ms[op] > ms[best]))
                best = op;
        if (best < 0)
            break;
        printf("%s{\"op\":\"%s\",\"nodes\":%d,\"ms\":%.3f}", first ? "" : ",",
               ex_op_name((ex_op)best), count[best], ms[best] * passes);
        count[best] = 0;
    }
    printf("]}\n");
    return ex_plan_set_profile(plan, false) != EX_OK;
}

/* Median ms of one predict call at batch b, over a->seconds of calls (at least 5). */
static int time_batch(const args *a, ex_backend *be, const char *path, int b, double *ms,
                      int64_t *params)
{
    char msg[512];
    ex_network *n = NULL;
    if (ex_network_open(path, be, b, &n, msg, sizeof msg) != EX_OK) {
        fprintf(stderr, "bench_inference: %s\n", msg);
        return 1;
    }
    ex_network_config c;
    ex_network_config_default(&c);
    ex_network_get_config(n, &c);
    *params = ex_network_param_count(n);
    size_t img = (size_t)c.in_channels * c.height * c.width;
    float *x = malloc((size_t)b * img * sizeof *x), *logits = malloc((size_t)b * c.classes * 4);
    double *t = malloc(100000 * sizeof *t);
    int rc = !x || !logits || !t;
    for (size_t i = 0; !rc && i < (size_t)b * img; i++) /* fixed pseudo-random inputs */
        x[i] = (float)((i * 2654435761u) % 1000) / 250.0f - 2.0f;
    int done = 0;
    double start = now_ms();
    for (int i = -3; !rc && (done < 5 || now_ms() - start < 1e3 * a->seconds) && done < 100000;
         i++) {
        double t0 = now_ms();
        rc = ex_network_predict(n, x, logits) != EX_OK;
        if (i >= 0)
            t[done++] = now_ms() - t0;
        if (i == -1)
            start = now_ms();
    }
    if (rc)
        fprintf(stderr, "bench_inference: %s\n", ex_network_error(n));
    if (!rc && a->profile)
        rc = profile_ops(n, b, x, logits);
    qsort(t, (size_t)done, sizeof *t, cmp_double);
    *ms = done ? t[done / 2] : 0;
    if (!rc && a->dump && b > 1) {
        char p[4096];
        snprintf(p, sizeof p, "%s/input-%d.f32", a->dump, b);
        FILE *f = fopen(p, "wb");
        rc = !f || fwrite(x, 4, (size_t)b * img, f) != (size_t)b * img;
        if (f)
            fclose(f);
        snprintf(p, sizeof p, "%s/logits-%s-%d.f32", a->dump, a->backend, b);
        f = fopen(p, "wb");
        rc |= !f || fwrite(logits, 4, (size_t)b * c.classes, f) != (size_t)b * c.classes;
        if (f)
            fclose(f);
    }
    free(x);
    free(logits);
    free(t);
    ex_network_free(n);
    return rc;
}

int main(int argc, char **argv)
{
    args a;
    if (parse(argc, argv, &a)) {
        fprintf(stderr, "usage: bench_inference --backend NAME (--weights FILE | --save FILE "
                        "[--genotype G] [--channels C] [--layers L]) [--export FILE.onnx] "
                        "[--dump DIR] [--seconds S] [--profile 1]\n");
        return 2;
    }
    char msg[512];
    ex_backend *be = NULL;
    if (ex_backend_open(a.backend, &be, msg, sizeof msg) != EX_OK) {
        fprintf(stderr, "bench_inference: %s\n", msg);
        return 1;
    }
    const char *path = a.weights ? a.weights : a.save;
    int rc = a.weights ? 0 : make_weights(&a, be);
    if (!rc && a.export) {
        ex_network *n = NULL;
        rc = ex_network_open(path, be, 1, &n, msg, sizeof msg) != EX_OK ||
             ex_network_export_onnx(n, a.export) != EX_OK;
        if (rc)
            fprintf(stderr, "bench_inference: export: %s\n", n ? ex_network_error(n) : msg);
        ex_network_free(n);
    }
    double ms1 = 0, ms256 = 0;
    int64_t params = 0;
    if (!rc)
        rc = time_batch(&a, be, path, 1, &ms1, &params) ||
             time_batch(&a, be, path, 256, &ms256, &params);
    const ex_backend_caps *caps = ex_backend_get_caps(be);
    if (!rc)
        printf("{\"bench\":\"inference\",\"backend\":\"%s\",\"device\":\"%s\",\"weights\":\"%s\","
               "\"params\":%lld,\"batch1_ms\":%.4f,\"batch256_ms\":%.3f,"
               "\"batch256_images_per_s\":%.1f}\n",
               caps->name, caps->device, path, (long long)params, ms1, ms256,
               256.0 / (ms256 / 1e3));
    ex_backend_close(be);
    return rc;
}
