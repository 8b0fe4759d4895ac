/* exapt predict: classes and probabilities of images (PNG files, IDX image files) under
 * saved weights, batch by batch, on standard output. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "options.h"
#include "run.h"

static const char predict_usage[] =
    "usage: exapt predict RUN|WEIGHTS IMAGE... [options]\n"
    "  RUN|WEIGHTS      a weights file, or a run directory (its weights.safetensors, or\n"
    "                   train/weights.safetensors of a search)\n"
    "  IMAGE            a PNG file of the network's size (colour or grey, converted to its\n"
    "                   channels), or an IDX file of images (MNIST's format, gzipped or raw)\n"
    "  --backend NAME   backend (beats EXAPT_BACKEND)\n"
    "  --top K          the K most probable classes of each image (default 1)\n"
    "  --batch N        images per pass (default 64)\n"
    "  --json           one JSON object per image and line\n"
    "Each image gives a line: its name (an IDX file's with [index]), then class and\n"
    "probability pairs, most probable first.\n";

#define MAX_IMAGES 4096 /* files on one command line */

typedef struct predict_state {
    ex_network *net;
    ex_network_config cfg;
    size_t img; /* floats per image */
    float *pixels, *probs;
    char (*names)[4200];
    int held, top;
    bool json;
} predict_state;

/* The line of image i: its name, then the top classes and their probabilities. */
static int print_one(const predict_state *p, int i)
{
    int k = p->cfg.classes;
    const float *pr = p->probs + (size_t)i * (size_t)k;
    bool *taken = calloc((size_t)k, sizeof *taken);
    json_t *doc = json_pack("{s:s,s:[]}", "image", p->names[i], "top");
    if (!taken || !doc) {
        free(taken);
        json_decref(doc);
        return cli_fail("predict", "out of memory");
    }
    if (!p->json)
        printf("%s", p->names[i]);
    for (int t = 0; t < p->top; t++) {
        int best = -1;
        for (int c = 0; c < k; c++)
            if (!taken[c] && (best < 0 || pr[c] > pr[best]))
                best = c;
        taken[best] = true;
        if (p->json)
            json_array_append_new(
                json_object_get(doc, "top"),
                json_pack("{s:i,s:f}", "class", best, "probability", (double)pr[best]));
        else
            printf("  %d %.4f", best, (double)pr[best]);
    }
    char *text = p->json ? json_dumps(doc, JSON_COMPACT) : NULL;
    if (text)
        printf("%s", text);
    printf("\n");
    free(text);
    free(taken);
    json_decref(doc);
    return 0;
}

/* Classifies the images held and prints their lines. */
static int flush(predict_state *p)
{
    if (!p->held)
        return 0;
    if (ex_network_classify(p->net, p->pixels, p->held, p->probs) != EX_OK)
        return cli_fail("predict", "%s", ex_network_error(p->net));
    for (int i = 0; i < p->held; i++)
        if (print_one(p, i))
            return CLI_EXIT_FAIL;
    fflush(stdout);
    p->held = 0;
    return run_stop_requested() ? RUN_EXIT_INTERRUPTED : 0;
}

/* The next free slot of the batch, flushing a full one first; NULL after a failure. */
static float *slot(predict_state *p, int *rc)
{
    if (p->held == p->cfg.eval_batch && (*rc = flush(p)))
        return NULL;
    return p->pixels + (size_t)p->held * p->img;
}

static int add_png(predict_state *p, const char *path)
{
    int rc = 0;
    float *dst = slot(p, &rc);
    if (!dst)
        return rc;
    char msg[512];
    const ex_network_config *c = &p->cfg;
    if (ex_image_load_png(path, c->in_channels, c->height, c->width, dst, msg, sizeof msg))
        return cli_fail("predict", "%s", msg);
    snprintf(p->names[p->held++], sizeof p->names[0], "%s", path);
    return 0;
}

static int add_idx(predict_state *p, const char *path)
{
    char msg[512];
    ex_dataset *ds = NULL;
    if (ex_images_load(path, &ds, msg, sizeof msg) != EX_OK)
        return cli_fail("predict", "%s", msg);
    const ex_network_config *c = &p->cfg;
    int rc = 0;
    if (ex_dataset_channels(ds) != c->in_channels || ex_dataset_height(ds) != c->height ||
        ex_dataset_width(ds) != c->width)
        rc = cli_fail("predict", "%s: holds %dx%dx%d images, the network takes %dx%dx%d", path,
                      ex_dataset_channels(ds), ex_dataset_height(ds), ex_dataset_width(ds),
                      c->in_channels, c->height, c->width);
    for (int64_t i = 0; !rc && i < ex_dataset_count(ds); i++) {
        float *dst = slot(p, &rc);
        if (!dst)
            break;
        ex_dataset_sample(ds, i, dst, NULL);
        snprintf(p->names[p->held++], sizeof p->names[0], "%s[%lld]", path, (long long)i);
    }
    ex_dataset_free(ds);
    return rc;
}

/* A PNG file starts with its 8-byte signature; anything else is taken for IDX. */
static bool is_png(const char *path)
{
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    unsigned char head[8] = {0};
    FILE *f = fopen(path, "rb");
    size_t got = f ? fread(head, 1, sizeof head, f) : 0;
    if (f)
        fclose(f);
    return got == sizeof head && !memcmp(head, sig, sizeof sig);
}

static int setup(predict_state *p, const char *weights, const char *backend, int batch,
                 ex_backend **be)
{
    char path[4096], dir[4096], msg[512];
    int rc = run_find_weights(weights, path, sizeof path, dir, sizeof dir, "predict");
    if (!rc && ex_backend_open(backend, be, msg, sizeof msg) != EX_OK)
        rc = cli_fail("predict", "%s", msg);
    if (!rc && ex_network_open(path, *be, batch, &p->net, msg, sizeof msg) != EX_OK)
        rc = cli_fail("predict", "%s", msg);
    if (rc)
        return rc;
    ex_network_config_default(&p->cfg);
    ex_network_get_config(p->net, &p->cfg);
    if (p->top > p->cfg.classes)
        return cli_usage_error("predict", "--top %d: the network knows %d classes", p->top,
                               p->cfg.classes);
    p->img = (size_t)p->cfg.in_channels * (size_t)p->cfg.height * (size_t)p->cfg.width;
    p->pixels = malloc((size_t)batch * p->img * sizeof *p->pixels);
    p->probs = malloc((size_t)batch * (size_t)p->cfg.classes * sizeof *p->probs);
    p->names = malloc((size_t)batch * sizeof *p->names);
    if (!p->pixels || !p->probs || !p->names)
        return cli_fail("predict", "out of memory");
    return 0;
}

int cli_predict(const cli_global *g, int argc, char **argv)
{
    const char *backend = NULL, **args = calloc(MAX_IMAGES + 1, sizeof *args);
    long top = 1, batch = 64;
    bool json = false;
    const opt_spec specs[] = {
        {"--backend", OPT_STRING, &backend, 0, 0, NULL},
        {"--top", OPT_INT, &top, 1, 4096, NULL},
        {"--batch", OPT_INT, &batch, 1, 65536, NULL},
        {"--json", OPT_FLAG, &json, 0, 0, NULL},
    };
    int nargs = 0;
    int rc = args ? opt_parse_args("predict", predict_usage, specs,
                                   (int)(sizeof specs / sizeof specs[0]), argc, argv, args,
                                   MAX_IMAGES + 1, &nargs)
                  : cli_fail("predict", "out of memory");
    if (!rc && nargs < 2)
        rc = cli_usage_error("predict", "give the weights (or a run directory) and images");
    predict_state p = {.top = (int)top, .json = json};
    ex_backend *be = NULL;
    if (!rc)
        rc = setup(&p, args[0], backend ? backend : g->backend, (int)batch, &be);
    if (!rc)
        run_catch_signals();
    for (int i = 1; !rc && i < nargs; i++)
        rc = is_png(args[i]) ? add_png(&p, args[i]) : add_idx(&p, args[i]);
    if (!rc)
        rc = flush(&p);
    ex_network_free(p.net);
    ex_backend_close(be);
    free(p.pixels);
    free(p.probs);
    free(p.names);
    free(args);
    return rc < 0 ? CLI_EXIT_OK : rc;
}
