/* exapt eval: the accuracy, loss and confusion matrix of saved weights on a dataset. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "options.h"
#include "run.h"
#include "run_record.h"
#include "score.h"

static const char eval_usage[] =
    "usage: exapt eval RUN|WEIGHTS [options]\n"
    "  RUN|WEIGHTS      a weights file, or a run directory (its weights.safetensors, or\n"
    "                   train/weights.safetensors of a search)\n"
    "  --backend NAME   backend (beats EXAPT_BACKEND)\n"
    "  --data DIR       dataset directory (default /usr/share/datasets/fashion-mnist)\n"
    "  --dataset NAME   fashion-mnist, mnist, cifar10 or auto\n"
    "  --split NAME     test (default) or train\n"
    "  --limit N        the first N images of the split (0: all)\n"
    "  --tta            score each image and its mirror image, logits averaged (the default\n"
    "                   for a run directory whose training did)\n"
    "  --no-tta         score the images alone\n"
    "  --json           print the result as a JSON document\n";

typedef struct eval_args {
    const char *backend, *data, *dataset, *split;
    long limit;
    bool tta, no_tta, json;
} eval_args;

typedef struct eval_state {
    ex_network *net;
    ex_network_config cfg;
    ex_dataset *ds;
    float *x, *logits;
    int32_t *y;
    bool tta;
    run_score score;
} eval_state;

/* The logits of one batch (padded with zeros to the network's batch), with the mirror
 * images' averaged in under test-time flip. */
static ex_status batch_logits(eval_state *e, int count)
{
    const ex_network_config *c = &e->cfg;
    size_t img = (size_t)c->in_channels * (size_t)c->height * (size_t)c->width,
           nl = (size_t)c->eval_batch * (size_t)c->classes;
    memset(e->x + (size_t)count * img, 0, (size_t)(c->eval_batch - count) * img * sizeof *e->x);
    ex_status st = ex_network_predict(e->net, e->x, e->logits);
    if (st != EX_OK || !e->tta)
        return st;
    run_mirror(e->x, (int64_t)c->eval_batch * c->in_channels * c->height, c->width);
    st = ex_network_predict(e->net, e->x, e->logits + nl);
    for (size_t i = 0; st == EX_OK && i < nl; i++)
        e->logits[i] = 0.5f * (e->logits[i] + e->logits[nl + i]);
    return st;
}

static int score_all(eval_state *e, const char *path)
{
    ex_loader_opts o;
    ex_loader_opts_default(&o, e->ds, false);
    o.batch = e->cfg.eval_batch;
    o.normalize = e->cfg.input;
    o.prefetch = 2;
    ex_loader *l = NULL;
    char msg[512];
    if (ex_loader_new(e->ds, &o, &l, msg, sizeof msg) != EX_OK)
        return cli_fail("eval", "%s", msg);
    int rc = 0;
    for (int64_t b = 0; !rc && b < ex_loader_batches_per_epoch(l); b++) {
        int count = 0;
        if (run_stop_requested())
            rc = RUN_EXIT_INTERRUPTED;
        else if (ex_loader_next(l, e->x, e->y, &count) != EX_OK)
            rc = cli_fail("eval", "the data loader failed");
        else if (batch_logits(e, count) != EX_OK)
            rc = cli_fail("eval", "%s: %s", path, ex_network_error(e->net));
        else
            run_score_add(&e->score, e->logits, e->y, count);
    }
    ex_loader_free(l);
    return rc;
}

/* The dataset must be what the network takes. */
static int check_fit(const eval_state *e, const char *path)
{
    const ex_network_config *c = &e->cfg;
    const ex_dataset *d = e->ds;
    if (ex_dataset_channels(d) != c->in_channels || ex_dataset_height(d) != c->height ||
        ex_dataset_width(d) != c->width || ex_dataset_classes(d) != c->classes)
        return cli_fail("eval",
                        "%s takes %dx%dx%d images of %d classes; %s has %dx%dx%d of %d classes",
                        path, c->in_channels, c->height, c->width, c->classes, ex_dataset_name(d),
                        ex_dataset_channels(d), ex_dataset_height(d), ex_dataset_width(d),
                        ex_dataset_classes(d));
    return 0;
}

static void print_text(const eval_state *e, const char *path, const char *split)
{
    const run_score *s = &e->score;
    int k = s->classes;
    printf("eval: %s on %s %s (%lld images)%s\n", path, ex_dataset_name(e->ds), split,
           (long long)s->seen, e->tta ? ", each with its mirror image" : "");
    printf("accuracy %.2f%%  loss %.4f\n", 100.0 * (double)s->right / (double)s->seen,
           s->loss_sum / (double)s->seen);
    printf("confusion matrix (rows: true class, columns: predicted)\n      ");
    for (int j = 0; j < k; j++)
        printf(" %5d", j);
    printf("\n");
    for (int i = 0; i < k; i++) {
        printf("%5d ", i);
        for (int j = 0; j < k; j++)
            printf(" %5lld", (long long)s->confusion[(size_t)i * (size_t)k + (size_t)j]);
        printf("\n");
    }
}

static int print_json(const eval_state *e, const char *path, const char *split, const char *be)
{
    const run_score *s = &e->score;
    json_t *rows = json_array();
    for (int i = 0; rows && i < s->classes; i++) {
        json_t *r = json_array();
        for (int j = 0; r && j < s->classes; j++)
            json_array_append_new(
                r, json_integer(s->confusion[(size_t)i * (size_t)s->classes + (size_t)j]));
        json_array_append_new(rows, r);
    }
    json_t *doc = json_pack("{s:s,s:s,s:s,s:s,s:I,s:b,s:f,s:f,s:o}", "weights", path, "dataset",
                            ex_dataset_name(e->ds), "split", split, "backend", be, "images",
                            (json_int_t)s->seen, "tta", e->tta, "accuracy",
                            (double)s->right / (double)s->seen, "loss",
                            s->loss_sum / (double)s->seen, "confusion", rows);
    char *text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    if (!text)
        return cli_fail("eval", "out of memory");
    printf("%s\n", text);
    free(text);
    return 0;
}

/* Whether the training of the weights in dir scored with test-time flip. */
static bool recorded_tta(const char *dir)
{
    json_t *rec = run_record_peek(dir);
    bool tta = json_is_true(json_object_get(rec, "tta"));
    json_decref(rec);
    return tta;
}

static int run(const eval_args *a, const char *arg, const char *backend)
{
    char path[4096], dir[4096], msg[512];
    int rc = run_find_weights(arg, path, sizeof path, dir, sizeof dir, "eval");
    bool test = !a->split || !strcmp(a->split, "test");
    if (!rc && !test && strcmp(a->split, "train"))
        return cli_usage_error("eval", "--split takes test or train, not '%s'", a->split);
    eval_state e = {.tta = a->tta || (!a->no_tta && recorded_tta(dir))};
    ex_backend *be = NULL;
    if (!rc)
        rc = run_load(a->data, a->dataset, test ? EX_SPLIT_TEST : EX_SPLIT_TRAIN, a->limit, &e.ds,
                      "eval");
    if (!rc && ex_backend_open(backend, &be, msg, sizeof msg) != EX_OK)
        rc = cli_fail("eval", "%s", msg);
    int64_t n = e.ds ? ex_dataset_count(e.ds) : 0;
    int batch = run_eval_batch(n, 250); /* the batches of exapt train's evaluation */
    if (!rc && ex_network_open(path, be, batch < 50 ? 250 : batch, &e.net, msg, sizeof msg))
        rc = cli_fail("eval", "%s", msg);
    if (!rc) {
        ex_network_config_default(&e.cfg);
        ex_network_get_config(e.net, &e.cfg);
        rc = check_fit(&e, path);
    }
    size_t img = (size_t)e.cfg.in_channels * (size_t)e.cfg.height * (size_t)e.cfg.width;
    e.score.classes = e.cfg.classes;
    if (!rc) {
        e.x = malloc((size_t)e.cfg.eval_batch * img * sizeof *e.x);
        e.y = malloc((size_t)e.cfg.eval_batch * sizeof *e.y);
        e.logits = malloc(2 * (size_t)e.cfg.eval_batch * (size_t)e.cfg.classes * sizeof *e.logits);
        e.score.confusion = calloc((size_t)e.cfg.classes * (size_t)e.cfg.classes, sizeof(int64_t));
        if (!e.x || !e.y || !e.logits || !e.score.confusion)
            rc = cli_fail("eval", "out of memory");
    }
    if (!rc)
        rc = score_all(&e, path);
    const char *split = test ? "test" : "train";
    if (!rc && a->json)
        rc = print_json(&e, path, split, ex_backend_get_caps(be)->name);
    else if (!rc)
        print_text(&e, path, split);
    ex_network_free(e.net);
    ex_dataset_free(e.ds);
    ex_backend_close(be);
    free(e.x);
    free(e.y);
    free(e.logits);
    free(e.score.confusion);
    return rc;
}

int cli_eval(const cli_global *g, int argc, char **argv)
{
    eval_args a = {0};
    const opt_spec specs[] = {
        {"--backend", OPT_STRING, &a.backend, 0, 0, NULL},
        {"--data", OPT_STRING, &a.data, 0, 0, NULL},
        {"--dataset", OPT_STRING, &a.dataset, 0, 0, NULL},
        {"--split", OPT_STRING, &a.split, 0, 0, NULL},
        {"--limit", OPT_INT, &a.limit, 0, 1e9, NULL},
        {"--tta", OPT_FLAG, &a.tta, 0, 0, NULL},
        {"--no-tta", OPT_FLAG, &a.no_tta, 0, 0, NULL},
        {"--json", OPT_FLAG, &a.json, 0, 0, NULL},
    };
    const char *arg = NULL;
    int nargs = 0;
    int rc = opt_parse_args("eval", eval_usage, specs, (int)(sizeof specs / sizeof specs[0]), argc,
                            argv, &arg, 1, &nargs);
    if (rc)
        return rc < 0 ? CLI_EXIT_OK : rc;
    if (!nargs)
        return cli_usage_error("eval", "which weights? give a weights file or a run directory");
    if (a.tta && a.no_tta)
        return cli_usage_error("eval", "--tta and --no-tta contradict each other");
    run_catch_signals();
    return run(&a, arg, a.backend ? a.backend : g->backend);
}
