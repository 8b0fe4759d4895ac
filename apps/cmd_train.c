/* exapt train: trains the network of a genotype from scratch, evaluates it each epoch (on
 * the test split, or on held-out training images), and saves its weights for PyTorch and
 * for inference. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "options.h"
#include "run.h"
#include "train_run.h"

static const char train_usage[] =
    "usage: exapt train --genotype FILE|NAME [options]\n"
    "  --genotype G     genotype.json, genotype.txt, or a built-in cell (DARTS_V1, DARTS_V2)\n"
    "  --backend NAME   backend (beats EXAPT_BACKEND)\n"
    "  --data DIR       dataset directory (default /usr/share/datasets/fashion-mnist)\n"
    "  --dataset NAME   fashion-mnist, mnist, cifar10 or auto\n"
    "  --limit N        use the first N training images (0: all)\n"
    "  --epochs N       (default 20 for 28x28 data, 600 for CIFAR-10, as DARTS)\n"
    "  --batch N --channels N --layers N --lr X --lr-min X --seed N\n"
    "  --drop-path P    final drop-path probability (0.2), reached linearly\n"
    "  --cutout N       cutout length (16; 0: off)\n"
    "  --flip           mirror training images left-right at random\n"
    "  --label-smoothing X  targets smoothed towards uniform by X (0: off)\n"
    "  --tta            evaluate each image and its mirror image, logits averaged\n"
    "  --holdout N      keep the last N training images out: each epoch is scored on\n"
    "                   them, the test split once at the end (0: test each epoch)\n"
    "  --no-auxiliary   no auxiliary head (it needs at least 5x5 at 2/3 depth)\n"
    "  --out DIR        where weights.safetensors, checkpoint.safetensors, metrics.jsonl go\n"
    "  --resume DIR     continue an interrupted training from its last checkpoint\n";

void train_job_default(train_job *j)
{
    memset(j, 0, sizeof *j);
    j->cmd = "train";
    j->out = "train";
    j->epochs = 600;
    j->lr = 0.025f;
    j->lr_min = 0.0f;
    j->drop_path = 0.2f;
    j->cutout = 16;
    ex_network_config_default(&j->net);
}

typedef struct train_state {
    const train_job *j;
    ex_backend *be;
    bool own_be;
    ex_network *net;
    ex_dataset *train_set, *valid_set, *test_set; /* valid_set: the held-out images */
    ex_loader *train;
    ex_metrics_writer *log;
    float *x, *logits; /* logits: two eval batches' (test-time flip) */
    int32_t *y;
    int epoch;
    int64_t step, global_step;
} train_state;

/* Mirrors each image of a batch left-right in place (NCHW). */
static void mirror(float *x, int64_t rows, int width)
{
    for (int64_t r = 0; r < rows; r++)
        for (int a = 0, b = width - 1; a < b; a++, b--) {
            float v = x[r * width + a];
            x[r * width + a] = x[r * width + b];
            x[r * width + b] = v;
        }
}

/* Mean loss and fraction correct from logits [n, k] (summed over two views with tta). */
static void score(const float *logits, const int32_t *y, int n, int k, double *sum, int64_t *right)
{
    for (int i = 0; i < n; i++) {
        const float *r = logits + (size_t)i * (size_t)k;
        int best = 0;
        for (int c = 1; c < k; c++)
            if (r[c] > r[best])
                best = c;
        double mx = r[best], e = 0;
        for (int c = 0; c < k; c++)
            e += exp((double)r[c] - mx);
        *sum += mx + log(e) - (double)r[y[i]];
        *right += best == y[i];
    }
}

/* One batch with test-time flip: the logits of the images and of their mirror images,
 * averaged. */
static ex_status tta_batch(train_state *t, float *x, const int32_t *y, double *sum, int64_t *right)
{
    const ex_network_config *c = &t->j->net;
    size_t nl = (size_t)c->eval_batch * (size_t)c->classes;
    float *a = t->logits, *b = t->logits + nl;
    ex_status st = ex_network_predict(t->net, x, a);
    mirror(x, (int64_t)c->eval_batch * c->in_channels * c->height, c->width);
    if (st == EX_OK)
        st = ex_network_predict(t->net, x, b);
    for (size_t i = 0; st == EX_OK && i < nl; i++)
        a[i] = 0.5f * (a[i] + b[i]);
    if (st == EX_OK)
        score(a, y, c->eval_batch, c->classes, sum, right);
    return st;
}

/* Mean loss and accuracy on every image of ds, batch norm in eval mode. */
static int accuracy_on(train_state *t, const ex_dataset *ds, double *loss, double *acc)
{
    ex_loader *l = NULL;
    int eb = t->j->net.eval_batch;
    int rc = run_loader(ds, false, eb, 0, 0, false, &l, t->j->cmd);
    if (rc)
        return rc;
    double sum = 0;
    int64_t correct = 0, seen = 0;
    for (int64_t b = 0; b < ex_loader_batches_per_epoch(l); b++) {
        int count = 0, c = 0;
        float lb = 0;
        ex_status st = ex_loader_next(l, t->x, t->y, &count);
        if (st == EX_OK && t->j->tta) {
            st = tta_batch(t, t->x, t->y, &sum, &correct);
        } else if (st == EX_OK && (st = ex_network_eval(t->net, t->x, t->y, &lb, &c)) == EX_OK) {
            sum += (double)lb * count;
            correct += c;
        }
        if (st != EX_OK) {
            ex_loader_free(l);
            return cli_fail(t->j->cmd, "evaluation: %s", ex_network_error(t->net));
        }
        seen += count;
    }
    ex_loader_free(l);
    *loss = seen ? sum / (double)seen : 0;
    *acc = seen ? (double)correct / (double)seen : 0;
    return 0;
}

/* What each epoch is scored on: the held-out images, or else the test split. */
static int epoch_accuracy(train_state *t, double *loss, double *acc)
{
    return accuracy_on(t, t->valid_set ? t->valid_set : t->test_set, loss, acc);
}

static int checkpoint(train_state *t)
{
    char path[4096];
    run_path(path, sizeof path, t->j->out, "checkpoint.safetensors");
    run_keep_previous(path);
    ex_loader_state s = ex_loader_get_state(t->train);
    char meta[256];
    snprintf(meta, sizeof meta, "%d %lld %lld %lld %lld", t->epoch, (long long)t->step,
             (long long)t->global_step, (long long)s.epoch, (long long)s.position);
    if (ex_network_save(t->net, path, true) != EX_OK)
        return cli_fail(t->j->cmd, "checkpoint: %s", ex_network_error(t->net));
    char pos[4200], msg[256];
    snprintf(pos, sizeof pos, "%s/position", t->j->out);
    if (cli_write_file_atomic(pos, meta, msg, sizeof msg) != 0)
        return cli_fail(t->j->cmd, "%s", msg);
    return 0;
}

static int resume(train_state *t)
{
    char path[4096], pos[4200], msg[256];
    run_path(path, sizeof path, t->j->out, "checkpoint.safetensors");
    snprintf(pos, sizeof pos, "%s/position", t->j->out);
    FILE *f = fopen(pos, "r");
    long long e = 0, s = 0, g = 0, le = 0, lp = 0;
    int ok = f && fscanf(f, "%lld %lld %lld %lld %lld", &e, &s, &g, &le, &lp) == 5;
    if (f)
        fclose(f);
    if (!ok)
        return cli_fail(t->j->cmd, "%s: no resume position", pos);
    t->epoch = (int)e;
    t->step = s;
    t->global_step = g;
    float p = t->j->drop_path * (float)t->epoch / (float)t->j->epochs;
    if (ex_network_set_drop_path(t->net, p) != EX_OK ||
        ex_network_load(t->net, path, true) != EX_OK)
        return cli_fail(t->j->cmd, "%s: %s", path, ex_network_error(t->net));
    if (ex_loader_set_state(t->train, (ex_loader_state){le, lp}, msg, sizeof msg) != EX_OK)
        return cli_fail(t->j->cmd, "%s", msg);
    return 0;
}

static int open_log(train_state *t, bool resuming)
{
    char path[4096], msg[512];
    run_path(path, sizeof path, t->j->out, "metrics.jsonl");
    if (ex_metrics_open(path, resuming ? t->global_step : EX_METRICS_NEW, &t->log, msg,
                        sizeof msg) != EX_OK)
        return cli_fail(t->j->cmd, "%s", msg);
    if (!ex_metrics_needs_header(t->log))
        return 0;
    ex_metrics_header *h = calloc(1, sizeof *h);
    if (!h)
        return cli_fail(t->j->cmd, "out of memory");
    char genotype[EX_GENOTYPE_TEXT_MAX];
    ex_genotype_format_json(&t->j->genotype, genotype, sizeof genotype);
    const ex_network_config *c = &t->j->net;
    snprintf(h->config, sizeof h->config,
             "{\"channels\":%d,\"layers\":%d,\"batch\":%d,\"epochs\":%d,\"auxiliary\":%s,"
             "\"drop_path\":%g,\"cutout\":%d,\"flip\":%s,\"lr\":%g,\"lr_min\":%g,"
             "\"label_smoothing\":%g,\"tta\":%s,\"holdout\":%lld,\"seed\":%llu,"
             "\"genotype\":%s}",
             c->channels, c->layers, c->batch, t->j->epochs, c->auxiliary ? "true" : "false",
             (double)t->j->drop_path, t->j->cutout, t->j->flip ? "true" : "false", (double)t->j->lr,
             (double)t->j->lr_min, (double)c->label_smoothing, t->j->tta ? "true" : "false",
             (long long)t->j->holdout, (unsigned long long)c->seed, genotype);
    const ex_backend_caps *caps = ex_backend_get_caps(t->be);
    snprintf(h->backend, sizeof h->backend, "%s", caps->name);
    snprintf(h->device, sizeof h->device, "%s", caps->device);
    h->peak_gbs = caps->peak_copy_gbs;
    snprintf(h->mode, sizeof h->mode, "train");
    ex_status st = ex_metrics_write_header(t->log, h, msg, sizeof msg);
    free(h);
    return st == EX_OK ? 0 : cli_fail(t->j->cmd, "%s", msg);
}

static int one_epoch(train_state *t, double *test_acc)
{
    const train_job *j = t->j;
    int64_t steps = ex_loader_batches_per_epoch(t->train);
    double t0 = run_now(), loss = 0, acc = 0;
    int64_t done = 0;
    for (; t->step < steps; t->step++, t->global_step++, done++) {
        float lr = run_cosine(j->lr, j->lr_min, (double)(t->epoch * steps + t->step),
                              (double)(j->epochs * steps));
        if (run_stop_requested()) {
            int rc = checkpoint(t);
            fprintf(stderr,
                    "exapt %s: interrupted; checkpoint written, continue with --resume %s\n",
                    j->cmd, j->out);
            return rc ? rc : 130;
        }
        int n = 0;
        ex_network_stats st;
        if (ex_loader_next(t->train, t->x, t->y, &n) != EX_OK)
            return cli_fail(j->cmd, "data loader failed");
        if (ex_network_step(t->net, t->x, t->y, lr, &st) != EX_OK)
            return cli_fail(j->cmd, "%s", ex_network_error(t->net));
        loss += st.loss;
        acc += st.accuracy;
        double el = run_now() - t0, ips = (double)j->net.batch * (double)(done + 1) / el;
        ex_metrics_step m = {.epoch = t->epoch,
                             .step = t->step,
                             .global_step = t->global_step,
                             .lr = lr,
                             .train_loss = st.loss,
                             .train_acc = st.accuracy,
                             .images_per_s = ips,
                             .step_ms = st.step_ms};
        char msg[256];
        if (ex_metrics_write_step(t->log, &m, msg, sizeof msg) != EX_OK)
            return cli_fail(j->cmd, "metrics: %s", msg);
        if (t->step % 50 == 0 || t->step + 1 == steps) {
            char fig[96];
            snprintf(fig, sizeof fig, "loss %.3f acc %.3f", st.loss, st.accuracy);
            double left = (double)(steps - t->step - 1 + (j->epochs - t->epoch - 1) * steps);
            run_progress("train", t->epoch, j->epochs, t->step + 1, steps, fig, ips,
                         left * el / (double)(done + 1));
        }
    }
    double tl = 0, ta = 0;
    int rc = epoch_accuracy(t, &tl, &ta);
    if (rc)
        return rc;
    ex_metrics_epoch e = {.epoch = t->epoch,
                          .train_loss = done ? loss / done : 0,
                          .train_acc = done ? acc / done : 0,
                          .valid_loss = tl,
                          .valid_acc = ta,
                          .seconds = run_now() - t0};
    char msg[256];
    if (ex_metrics_write_epoch(t->log, &e, msg, sizeof msg) != EX_OK ||
        ex_metrics_sync(t->log, msg, sizeof msg) != EX_OK)
        return cli_fail(j->cmd, "metrics: %s", msg);
    fprintf(stderr,
            "train epoch %d/%d done in %.0f s | train loss %.4f acc %.4f | %s loss "
            "%.4f acc %.4f\n",
            t->epoch + 1, j->epochs, e.seconds, e.train_loss, e.train_acc,
            t->valid_set ? "held-out" : "test", tl, ta);
    *test_acc = ta;
    return 0;
}

/* The last j->holdout training images become the held-out set. */
static int hold_out(train_state *t)
{
    int64_t n = ex_dataset_count(t->train_set), keep = n - t->j->holdout;
    if (keep < t->j->net.batch)
        return cli_fail(t->j->cmd, "--holdout %lld leaves %lld of %lld training images",
                        (long long)t->j->holdout, (long long)keep, (long long)n);
    ex_dataset *all = t->train_set, *rest = NULL;
    char msg[512];
    /* floor(portion * n) must come out at keep exactly */
    double portion = ((double)keep + 0.5) / (double)n;
    ex_status st = ex_dataset_split(all, portion, &t->train_set, &rest, msg, sizeof msg);
    ex_dataset_free(all);
    t->valid_set = rest;
    if (st != EX_OK)
        return cli_fail(t->j->cmd, "%s", msg);
    return 0;
}

/* The largest batch up to 250 that divides the test split and the held-out images: a
 * divisor of their greatest common divisor. */
static int eval_batch(const train_state *t)
{
    int64_t a = ex_dataset_count(t->test_set),
            b = t->valid_set ? ex_dataset_count(t->valid_set) : a;
    while (b) {
        int64_t r = a % b;
        a = b;
        b = r;
    }
    return run_eval_batch(a, 250);
}

static int setup(train_state *t)
{
    const train_job *j = t->j;
    char msg[512];
    if (j->be) {
        t->be = j->be;
    } else {
        if (ex_backend_open(j->backend, &t->be, msg, sizeof msg) != EX_OK)
            return cli_fail(j->cmd, "%s", msg);
        t->own_be = true;
        double peak = 0;
        cli_measure_peak(t->be, &peak);
    }
    int rc = run_load(j->data_dir, j->dataset, EX_SPLIT_TRAIN, j->limit, &t->train_set, j->cmd);
    if (!rc)
        rc = run_load(j->data_dir, j->dataset, EX_SPLIT_TEST, 0, &t->test_set, j->cmd);
    if (!rc && j->holdout)
        rc = hold_out(t);
    if (rc)
        return rc;
    ex_network_config c = j->net;
    c.in_channels = ex_dataset_channels(t->train_set);
    c.height = ex_dataset_height(t->train_set);
    c.width = ex_dataset_width(t->train_set);
    c.classes = ex_dataset_classes(t->train_set);
    c.eval_batch = eval_batch(t);
    ((train_job *)j)->net = c; /* the job records what ran */
    if ((rc = run_loader(t->train_set, true, c.batch, c.seed, j->cutout, j->flip, &t->train,
                         j->cmd)))
        return rc;
    size_t img = (size_t)c.in_channels * (size_t)c.height * (size_t)c.width;
    size_t most = (size_t)(c.batch > c.eval_batch ? c.batch : c.eval_batch);
    t->x = malloc(most * img * sizeof *t->x);
    t->y = malloc(most * sizeof *t->y);
    t->logits = malloc(2 * (size_t)c.eval_batch * (size_t)c.classes * sizeof *t->logits);
    if (!t->x || !t->y || !t->logits)
        return cli_fail(j->cmd, "out of memory");
    if (ex_network_new(&j->genotype, &c, t->be, &t->net, msg, sizeof msg) != EX_OK)
        return cli_fail(j->cmd, "%s", msg);
    return run_mkdir(j->out, j->cmd);
}

int train_run(const train_job *j, double *test_acc)
{
    train_state t = {.j = j};
    int rc = setup(&t);
    if (!rc && j->resume)
        rc = resume(&t);
    if (!rc)
        rc = open_log(&t, j->resume != NULL);
    if (!rc) {
        char text[EX_GENOTYPE_TEXT_MAX];
        ex_genotype_format(&j->genotype, text, sizeof text);
        fprintf(stderr,
                "train: %s\n  C=%d, %d cells, %lld parameters, %lld training images, %d "
                "epochs on %s\n",
                text, j->net.channels, j->net.layers, (long long)ex_network_param_count(t.net),
                (long long)ex_dataset_count(t.train_set), j->epochs,
                ex_backend_get_caps(t.be)->name);
    }
    double acc = 0;
    bool measured = false;
    for (; !rc && t.epoch < j->epochs; t.epoch++, t.step = 0) {
        float p = j->drop_path * (float)t.epoch / (float)j->epochs;
        if (ex_network_set_drop_path(t.net, p) != EX_OK)
            rc = cli_fail(j->cmd, "%s", ex_network_error(t.net));
        if (!rc)
            rc = one_epoch(&t, &acc);
        measured = true;
        if (!rc) {
            t.epoch++;
            t.step = 0;
            rc = checkpoint(&t);
            t.epoch--;
        }
    }
    double loss = 0;
    if (!rc && (!measured || t.valid_set)) /* resumed after its last epoch, or held out */
        rc = accuracy_on(&t, t.test_set, &loss, &acc);
    char path[4096], msg[256];
    if (!rc && ex_network_save(t.net, run_path(path, sizeof path, j->out, "weights.safetensors"),
                               false) != EX_OK)
        rc = cli_fail(j->cmd, "%s", ex_network_error(t.net));
    if (!rc && test_acc)
        *test_acc = acc;
    if (!rc)
        fprintf(stderr, "train: test accuracy %.2f%%; weights in %s\n", 100.0 * acc, path);
    if (t.log)
        ex_metrics_close(t.log, msg, sizeof msg);
    ex_network_free(t.net);
    ex_loader_free(t.train);
    ex_dataset_free(t.train_set);
    ex_dataset_free(t.valid_set);
    ex_dataset_free(t.test_set);
    if (t.own_be)
        ex_backend_close(t.be);
    free(t.x);
    free(t.y);
    free(t.logits);
    return rc;
}

static int load_genotype(const char *spec, ex_genotype *g)
{
    if (ex_genotype_builtin(spec, g) == EX_OK)
        return 0;
    char msg[512];
    if (ex_genotype_load(spec, g, msg, sizeof msg) != EX_OK)
        return cli_fail("train", "--genotype %s: not a built-in cell, and %s", spec, msg);
    return 0;
}

int cli_train(const cli_global *g, int argc, char **argv)
{
    train_job j;
    train_job_default(&j);
    const char *genotype = NULL;
    long epochs = 0, batch = 0, channels = 0, layers = 0, seed = 0, cutout = 16, limit = 0;
    double lr = j.lr, lr_min = j.lr_min, drop = j.drop_path, smoothing = 0;
    long holdout = 0;
    bool set_epochs = false, set_batch = false, set_channels = false, set_layers = false,
         no_aux = false;
    const opt_spec specs[] = {
        {"--genotype", OPT_STRING, &genotype, 0, 0, NULL},
        {"--backend", OPT_STRING, &j.backend, 0, 0, NULL},
        {"--data", OPT_STRING, &j.data_dir, 0, 0, NULL},
        {"--dataset", OPT_STRING, &j.dataset, 0, 0, NULL},
        {"--limit", OPT_INT, &limit, 0, 1e9, NULL},
        {"--epochs", OPT_INT, &epochs, 1, 100000, &set_epochs},
        {"--batch", OPT_INT, &batch, 2, 65536, &set_batch},
        {"--channels", OPT_INT, &channels, 2, 4096, &set_channels},
        {"--layers", OPT_INT, &layers, 1, 1000, &set_layers},
        {"--lr", OPT_FLOAT, &lr, 0, 10, NULL},
        {"--lr-min", OPT_FLOAT, &lr_min, 0, 10, NULL},
        {"--seed", OPT_INT, &seed, 0, 2147483647, NULL},
        {"--drop-path", OPT_FLOAT, &drop, 0, 0.99, NULL},
        {"--cutout", OPT_INT, &cutout, 0, 1024, NULL},
        {"--no-auxiliary", OPT_FLAG, &no_aux, 0, 0, NULL},
        {"--flip", OPT_FLAG, &j.flip, 0, 0, NULL},
        {"--label-smoothing", OPT_FLOAT, &smoothing, 0, 0.99, NULL},
        {"--tta", OPT_FLAG, &j.tta, 0, 0, NULL},
        {"--holdout", OPT_INT, &holdout, 0, 1e9, NULL},
        {"--out", OPT_STRING, &j.out, 0, 0, NULL},
        {"--resume", OPT_STRING, &j.resume, 0, 0, NULL},
    };
    int rc =
        opt_parse("train", train_usage, specs, (int)(sizeof specs / sizeof specs[0]), argc, argv);
    if (rc)
        return rc < 0 ? CLI_EXIT_OK : rc;
    if (!genotype)
        return cli_usage_error("train", "--genotype is required");
    if ((rc = load_genotype(genotype, &j.genotype)))
        return rc;
    if (!j.backend)
        j.backend = g->backend;
    if (j.resume)
        j.out = j.resume;
    j.limit = limit;
    j.lr = (float)lr;
    j.lr_min = (float)lr_min;
    j.drop_path = (float)drop;
    j.cutout = (int)cutout;
    j.net.seed = (uint64_t)seed;
    j.net.auxiliary = !no_aux;
    j.net.label_smoothing = (float)smoothing;
    j.holdout = holdout;
    if (set_batch)
        j.net.batch = (int)batch;
    if (set_channels)
        j.net.channels = (int)channels;
    if (set_layers)
        j.net.layers = (int)layers;
    /* DARTS trains CIFAR-10 600 epochs; the 28x28 sets need far fewer */
    bool cifar = j.dataset && !strcmp(j.dataset, "cifar10");
    j.epochs = set_epochs ? (int)epochs : cifar ? 600 : 20;
    run_catch_signals();
    return train_run(&j, NULL);
}
