/* exapt quantize: saved weights to int8, activations calibrated on training images. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "options.h"
#include "run.h"

static const char quantize_usage[] =
    "usage: exapt quantize RUN|WEIGHTS --out FILE [options]\n"
    "  RUN|WEIGHTS      f32 weights, or a run directory (its weights.safetensors, or\n"
    "                   train/weights.safetensors of a search)\n"
    "  --out FILE       the int8 weights to write (replaced atomically); exapt eval and\n"
    "                   predict run them, as does ex_network_open()\n"
    "  --images N       calibration images, the first N of the training split (1000)\n"
    "  --data DIR       the dataset's folder (as exapt train)\n"
    "  --dataset NAME   fashion-mnist, mnist or cifar10 (as exapt train)\n"
    "  --backend NAME   where the calibration runs (the global --backend)\n";

/* The first count training images of ds as pixels in [0, 1]; NULL when out of memory. */
static float *first_images(const ex_dataset *ds, int64_t count)
{
    size_t img = (size_t)ex_dataset_channels(ds) * (size_t)ex_dataset_height(ds) *
                 (size_t)ex_dataset_width(ds);
    float *x = malloc((size_t)count * img * sizeof *x);
    for (int64_t i = 0; x && i < count; i++)
        if (ex_dataset_sample(ds, i, x + (size_t)i * img, NULL) != EX_OK) {
            free(x);
            return NULL;
        }
    return x;
}

int cli_quantize(const cli_global *g, int argc, char **argv)
{
    const char *out = NULL, *data = NULL, *dataset = NULL, *backend = NULL, *arg = NULL;
    long images = 1000;
    const opt_spec specs[] = {
        {"--out", OPT_STRING, &out, 0, 0, NULL},
        {"--images", OPT_INT, &images, 1, 1e6, NULL},
        {"--data", OPT_STRING, &data, 0, 0, NULL},
        {"--dataset", OPT_STRING, &dataset, 0, 0, NULL},
        {"--backend", OPT_STRING, &backend, 0, 0, NULL},
    };
    int nargs = 0;
    int rc = opt_parse_args("quantize", quantize_usage, specs,
                            (int)(sizeof specs / sizeof specs[0]), argc, argv, &arg, 1, &nargs);
    if (rc)
        return rc < 0 ? CLI_EXIT_OK : rc;
    if (!nargs)
        return cli_usage_error("quantize", "which weights? give a weights file or a run directory");
    if (!out)
        return cli_usage_error("quantize", "--out FILE is required");
    char path[4096], dir[4096], msg[512];
    if ((rc = run_find_weights(arg, path, sizeof path, dir, sizeof dir, "quantize")))
        return rc;
    ex_dataset *ds = NULL;
    ex_backend *be = NULL;
    ex_network *net = NULL;
    float *x = NULL;
    run_catch_signals();
    rc = run_load(data, dataset, EX_SPLIT_TRAIN, images, &ds, "quantize");
    if (!rc && ex_backend_open(backend ? backend : g->backend, &be, msg, sizeof msg) != EX_OK)
        rc = cli_fail("quantize", "%s", msg);
    if (!rc && ex_network_open(path, be, 1, &net, msg, sizeof msg) != EX_OK)
        rc = cli_fail("quantize", "%s", msg);
    int64_t count = ds ? ex_dataset_count(ds) : 0;
    if (!rc && !(x = first_images(ds, count)))
        rc = cli_fail("quantize", "out of memory for %lld images", (long long)count);
    if (!rc && ex_network_quantize(net, x, count, out) != EX_OK)
        rc = cli_fail("quantize", "%s", ex_network_error(net));
    if (!rc)
        printf("quantize: %s written from %s (int8, calibrated on %lld %s training images)\n", out,
               path, (long long)count, ex_dataset_name(ds));
    free(x);
    ex_network_free(net);
    ex_backend_close(be);
    ex_dataset_free(ds);
    return rc;
}
