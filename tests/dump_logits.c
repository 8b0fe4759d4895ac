/* Writes the first COUNT images of an IDX file, normalized as the weights' training did,
 * and exapt's logits for them, as raw float32 files: what tests/onnx_runtime.js gives to
 * onnxruntime and compares with.
 * Usage: dump_logits WEIGHTS IDX COUNT INPUTS_OUT LOGITS_OUT [BACKEND] */
#include <stdio.h>
#include <stdlib.h>

#include "exapt/exapt.h"

static int write_floats(const char *path, const float *v, size_t n)
{
    FILE *f = fopen(path, "wb");
    int bad = !f || fwrite(v, sizeof *v, n, f) != n;
    if (f)
        bad |= fclose(f) != 0;
    return bad;
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: dump_logits WEIGHTS IDX COUNT INPUTS_OUT LOGITS_OUT [BACKEND]\n");
        return 2;
    }
    char msg[512];
    ex_backend *be = NULL;
    ex_network *net = NULL;
    ex_dataset *ds = NULL;
    enum { BATCH = 100 };
    if (ex_backend_open(argc > 6 ? argv[6] : "cpu", &be, msg, sizeof msg) != EX_OK ||
        ex_network_open(argv[1], be, BATCH, &net, msg, sizeof msg) != EX_OK ||
        ex_images_load(argv[2], &ds, msg, sizeof msg) != EX_OK) {
        fprintf(stderr, "dump_logits: %s\n", msg);
        return 1;
    }
    ex_network_config c;
    ex_network_config_default(&c);
    ex_network_get_config(net, &c);
    long count = atol(argv[3]);
    count = count < ex_dataset_count(ds) ? count : ex_dataset_count(ds);
    count -= count % BATCH;
    size_t img = (size_t)c.in_channels * (size_t)c.height * (size_t)c.width;
    float *x = malloc((size_t)count * img * sizeof *x),
          *logits = malloc((size_t)count * (size_t)c.classes * sizeof *logits);
    int rc = !x || !logits;
    for (long i = 0; !rc && i < count; i++) {
        float *p = x + (size_t)i * img;
        ex_dataset_sample(ds, i, p, NULL);
        for (size_t k = 0; c.input.enabled && k < img; k++)
            p[k] = (p[k] - c.input.mean[0]) / c.input.std[0];
    }
    for (long b = 0; !rc && b < count; b += BATCH)
        rc = ex_network_predict(net, x + (size_t)b * img, logits + (size_t)b * (size_t)c.classes) !=
             EX_OK;
    if (!rc)
        rc = write_floats(argv[4], x, (size_t)count * img) ||
             write_floats(argv[5], logits, (size_t)count * (size_t)c.classes);
    if (rc)
        fprintf(stderr, "dump_logits: %s\n", ex_network_error(net));
    else
        printf("%ld images, %d classes\n", count, c.classes);
    free(x);
    free(logits);
    ex_dataset_free(ds);
    ex_network_free(net);
    ex_backend_close(be);
    return rc;
}
