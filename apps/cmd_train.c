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
#include "run_record.h"
#include "score.h"
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
    "                   (train); a DIR that holds a run is refused unless --force\n"
    "  --force          replace the run in --out DIR (its files are removed first)\n"
    "  --gpus N         N data-parallel ranks on this machine, one per GPU (through mpirun;\n"
    "                   the global --ranks N)\n"
    "  --resume DIR     continue an interrupted training from its last checkpoint, with the\n"
    "                   configuration recorded in DIR/metrics.jsonl; only --backend and a\n"
    "                   longer --epochs may be given with it\n";

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
    bool lead; /* this process writes the files and prints: rank 0, or alone */
} train_state;

/* One batch with test-time flip: the logits of the images and of their mirror images,
 * averaged. */
static ex_status tta_batch(train_state *t, float *x, const int32_t *y, run_score *s)
{
    const ex_network_config *c = &t->j->net;
    size_t nl = (size_t)c->eval_batch * (size_t)c->classes;
    float *a = t->logits, *b = t->logits + nl;
    ex_status st = ex_network_predict(t->net, x, a);
    run_mirror(x, (int64_t)c->eval_batch * c->in_channels * c->height, c->width);
    if (st == EX_OK)
        st = ex_network_predict(t->net, x, b);
    for (size_t i = 0; st == EX_OK && i < nl; i++)
        a[i] = 0.5f * (a[i] + b[i]);
    if (st == EX_OK)
        run_score_add(s, a, y, c->eval_batch);
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
    run_score s = {.classes = t->j->net.classes};
    for (int64_t b = 0; b < ex_loader_batches_per_epoch(l); b++) {
        int count = 0, c = 0;
        float lb = 0;
        if (run_stop_requested()) {
            ex_loader_free(l);
            return RUN_EXIT_INTERRUPTED;
        }
        ex_status st = ex_loader_next(l, t->x, t->y, &count);
        if (st == EX_OK && t->j->tta) {
            st = tta_batch(t, t->x, t->y, &s);
        } else if (st == EX_OK && (st = ex_network_eval(t->net, t->x, t->y, &lb, &c)) == EX_OK) {
            s.loss_sum += (double)lb * count;
            s.right += c;
            s.seen += count;
        }
        if (st != EX_OK) {
            ex_loader_free(l);
            return cli_fail(t->j->cmd, "evaluation: %s", ex_network_error(t->net));
        }
    }
    ex_loader_free(l);
    *loss = s.seen ? s.loss_sum / (double)s.seen : 0;
    *acc = s.seen ? (double)s.right / (double)s.seen : 0;
    return 0;
}

/* What each epoch is scored on: the held-out images, or else the test split. */
static int epoch_accuracy(train_state *t, double *loss, double *acc)
{
    return accuracy_on(t, t->valid_set ? t->valid_set : t->test_set, loss, acc);
}

/* The weights, the optimizer and where the training stands, in one file replaced
 * atomically; the one before it is kept as .prev. */
static int checkpoint(train_state *t)
{
    if (!t->lead)
        return 0;
    char path[4096], meta[256];
    run_path(path, sizeof path, t->j->out, "checkpoint.safetensors");
    run_keep_previous(path);
    ex_loader_state s = ex_loader_get_state(t->train);
    snprintf(meta, sizeof meta,
             "{\"epoch\":%d,\"step\":%lld,\"global_step\":%lld,\"train\":[%lld,%lld]}", t->epoch,
             (long long)t->step, (long long)t->global_step, (long long)s.epoch,
             (long long)s.position);
    if (ex_network_checkpoint(t->net, path, meta) != EX_OK)
        return cli_fail(t->j->cmd, "checkpoint: %s", ex_network_error(t->net));
    return 0;
}

/* Where the checkpoint at path says the training stands; a message in msg if it cannot. */
static bool read_position(const char *path, int64_t pos[5], char *msg, size_t len)
{
    ex_safetensors *f = NULL;
    if (ex_safetensors_open(path, &f, msg, len) != EX_OK)
        return false;
    const char *user = ex_safetensors_metadata(f, "user");
    json_t *j = user ? json_loads(user, 0, NULL) : NULL;
    json_int_t v[5] = {0};
    bool ok = j && !json_unpack(j, "{s:I,s:I,s:I,s:[II]}", "epoch", &v[0], "step", &v[1],
                                "global_step", &v[2], "train", &v[3], &v[4]);
    json_decref(j);
    ex_safetensors_close(f);
    for (int i = 0; i < 5; i++)
        pos[i] = v[i];
    if (!ok)
        snprintf(msg, len,
                 "%s: no training position in its metadata (a checkpoint of exapt before 0.1.0 "
                 "kept it in a separate file; that run cannot be resumed)",
                 path);
    return ok;
}

/* Loads the checkpoint at path and the position it holds. */
static bool load_checkpoint(train_state *t, const char *path, char *msg, size_t len)
{
    int64_t pos[5];
    if (!read_position(path, pos, msg, len))
        return false;
    float p = t->j->drop_path * (float)pos[0] / (float)t->j->epochs;
    if (ex_network_set_drop_path(t->net, p) != EX_OK ||
        ex_network_load(t->net, path, true) != EX_OK) {
        snprintf(msg, len, "%s: %s", path, ex_network_error(t->net));
        return false;
    }
    if (ex_loader_set_state(t->train, (ex_loader_state){pos[3], pos[4]}, msg, len) != EX_OK)
        return false;
    t->epoch = (int)pos[0];
    t->step = pos[1];
    t->global_step = pos[2];
    return true;
}

/* The newest complete checkpoint: the last one, or the one before it. */
static int resume(train_state *t)
{
    char path[4096], prev[4200], msg[512];
    run_path(path, sizeof path, t->j->out, "checkpoint.safetensors");
    snprintf(prev, sizeof prev, "%s.prev", path);
    const char *tries[2] = {path, prev};
    for (int i = 0; i < 2; i++) {
        if (!load_checkpoint(t, tries[i], msg, sizeof msg)) {
            fprintf(stderr, "exapt %s: %s\n", t->j->cmd, msg);
            continue;
        }
        if (t->lead)
            fprintf(stderr, "exapt %s: resuming the training from %s at epoch %d step %lld\n",
                    t->j->cmd, tries[i], t->epoch + 1, (long long)t->step);
        return 0;
    }
    return cli_fail(t->j->cmd, "no usable training checkpoint in %s", t->j->out);
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
    int n = snprintf(h->config, sizeof h->config,
                     "{\"channels\":%d,\"layers\":%d,\"batch\":%d,\"epochs\":%d,\"auxiliary\":%s,"
                     "\"drop_path\":%g,\"cutout\":%d,\"flip\":%s,\"lr\":%g,\"lr_min\":%g,"
                     "\"label_smoothing\":%g,\"tta\":%s,\"holdout\":%lld,\"seed\":%llu,"
                     "\"genotype\":%s,\"version\":\"%s\",\"argv\":%s}",
                     c->channels, c->layers, c->batch, t->j->epochs,
                     c->auxiliary ? "true" : "false", (double)t->j->drop_path, t->j->cutout,
                     t->j->flip ? "true" : "false", (double)t->j->lr, (double)t->j->lr_min,
                     (double)c->label_smoothing, t->j->tta ? "true" : "false",
                     (long long)t->j->holdout, (unsigned long long)c->seed, genotype, ex_version(),
                     t->j->argv_json ? t->j->argv_json : "[]");
    if (n < 0 || (size_t)n >= sizeof h->config) {
        free(h);
        return cli_fail(t->j->cmd, "the command line is too long to record (%d bytes)", n);
    }
    const ex_backend_caps *caps = ex_backend_get_caps(t->be);
    snprintf(h->backend, sizeof h->backend, "%s", caps->name);
    snprintf(h->device, sizeof h->device, "%s", caps->device);
    h->peak_gbs = caps->peak_copy_gbs;
    snprintf(h->mode, sizeof h->mode, "train");
    ex_status st = ex_metrics_write_header(t->log, h, msg, sizeof msg);
    free(h);
    return st == EX_OK ? 0 : cli_fail(t->j->cmd, "%s", msg);
}

/* A stop asked for by a signal: a checkpoint where the training stands, and the way on. */
static int interrupted(train_state *t)
{
    int rc = checkpoint(t);
    if (t->lead)
        fprintf(stderr, "exapt %s: interrupted; checkpoint written, continue with --resume %s\n",
                t->j->cmd, t->j->run_dir ? t->j->run_dir : t->j->out);
    return rc ? rc : RUN_EXIT_INTERRUPTED;
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
        if (run_stop_requested())
            return interrupted(t);
        int n = 0;
        ex_network_stats st;
        if (ex_loader_next(t->train, t->x, t->y, &n) != EX_OK)
            return cli_fail(j->cmd, "data loader failed");
        const ex_network_config *c = &j->net;
        size_t img = (size_t)c->in_channels * (size_t)c->height * (size_t)c->width;
        if (ex_network_step(t->net, t->x + run_share_start(j->comm, c->batch, img),
                            t->y + run_share_start(j->comm, c->batch, 1), lr, &st) != EX_OK)
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
        int rc = run_rank_times(j->comm, st.step_ms, &m, j->cmd);
        if (rc)
            return rc;
        char msg[256];
        if (t->log && ex_metrics_write_step(t->log, &m, msg, sizeof msg) != EX_OK)
            return cli_fail(j->cmd, "metrics: %s", msg);
        if (t->lead && (t->step % 50 == 0 || t->step + 1 == steps)) {
            char fig[96];
            snprintf(fig, sizeof fig, "loss %.3f acc %.3f", st.loss, st.accuracy);
            double left = (double)(steps - t->step - 1 + (j->epochs - t->epoch - 1) * steps);
            run_progress("train", t->epoch, j->epochs, t->step + 1, steps, fig, ips,
                         left * el / (double)(done + 1));
        }
    }
    /* a stop during the evaluation checkpoints at the epoch's last step: a resume
     * evaluates again */
    double tl = 0, ta = 0;
    int rc = epoch_accuracy(t, &tl, &ta);
    if (rc == RUN_EXIT_INTERRUPTED)
        return interrupted(t);
    if (rc)
        return rc;
    ex_metrics_epoch e = {.epoch = t->epoch,
                          .train_loss = done ? loss / done : 0,
                          .train_acc = done ? acc / done : 0,
                          .valid_loss = tl,
                          .valid_acc = ta,
                          .seconds = run_now() - t0};
    *test_acc = ta;
    if (!t->lead)
        return 0;
    char msg[256];
    if (ex_metrics_write_epoch(t->log, &e, msg, sizeof msg) != EX_OK ||
        ex_metrics_sync(t->log, msg, sizeof msg) != EX_OK)
        return cli_fail(j->cmd, "metrics: %s", msg);
    fprintf(stderr,
            "train epoch %d/%d done in %.0f s | train loss %.4f acc %.4f | %s loss "
            "%.4f acc %.4f\n",
            t->epoch + 1, j->epochs, e.seconds, e.train_loss, e.train_acc,
            t->valid_set ? "held-out" : "test", tl, ta);
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

/* A stop asked for while the data and the network are being made: nothing to save yet. */
static bool stopped_early(const train_job *j)
{
    if (!run_stop_requested())
        return false;
    fprintf(stderr, "exapt %s: interrupted while setting up, before any step\n", j->cmd);
    return true;
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
        int rc = j->g ? cli_ranks_comm(j->g, t->be, &((train_job *)j)->comm) : 0;
        if (rc)
            return rc;
    }
    int rc = run_load(j->data_dir, j->dataset, EX_SPLIT_TRAIN, j->limit, &t->train_set, j->cmd);
    if (!rc && stopped_early(j))
        return RUN_EXIT_INTERRUPTED;
    if (!rc)
        rc = run_load(j->data_dir, j->dataset, EX_SPLIT_TEST, 0, &t->test_set, j->cmd);
    if (!rc && j->holdout)
        rc = hold_out(t);
    if (rc)
        return rc;
    if (stopped_early(j))
        return RUN_EXIT_INTERRUPTED;
    ex_network_config c = j->net;
    c.in_channels = ex_dataset_channels(t->train_set);
    c.height = ex_dataset_height(t->train_set);
    c.width = ex_dataset_width(t->train_set);
    c.classes = ex_dataset_classes(t->train_set);
    c.eval_batch = eval_batch(t);
    ex_loader_opts lo;
    ex_loader_opts_default(&lo, t->train_set, false);
    c.input = lo.normalize; /* what run_loader gives */
    c.comm = j->comm;
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
    if (stopped_early(j))
        return RUN_EXIT_INTERRUPTED;
    return t->lead ? run_mkdir(j->out, j->cmd) : 0;
}

int train_run(const train_job *j, double *test_acc)
{
    train_state t = {.j = j, .lead = !j->comm || j->comm->rank == 0};
    int rc = setup(&t);
    if (!rc && j->resume)
        rc = resume(&t);
    /* until here nothing was written: a signal's default action ends the process at once
     * (a dataset being read would hold it longer than a second); from here on a signal
     * stops the training at its next step or evaluation batch, with a checkpoint */
    if (!rc)
        run_catch_signals();
    if (!rc && t.lead)
        rc = open_log(&t, j->resume != NULL);
    if (!rc && t.lead) {
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
    if (!rc && (!measured || t.valid_set)) { /* resumed after its last epoch, or held out */
        rc = accuracy_on(&t, t.test_set, &loss, &acc);
        if (rc == RUN_EXIT_INTERRUPTED && t.lead) /* the last epoch's checkpoint leads back here */
            fprintf(stderr, "exapt %s: interrupted; continue with --resume %s\n", j->cmd,
                    j->run_dir ? j->run_dir : j->out);
    }
    char path[4096], msg[256];
    if (!rc && t.lead &&
        ex_network_save(t.net, run_path(path, sizeof path, j->out, "weights.safetensors"), false) !=
            EX_OK)
        rc = cli_fail(j->cmd, "%s", ex_network_error(t.net));
    if (!rc && test_acc)
        *test_acc = acc;
    if (!rc && t.lead)
        printf("train: test accuracy %.2f%%; weights in %s\n", 100.0 * acc, path);
    fflush(stdout);
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

typedef struct train_args {
    const char *genotype, *backend, *data, *dataset, *out, *resume;
    long epochs, batch, channels, layers, seed, cutout, limit, holdout;
    double lr, lr_min, drop, smoothing;
    bool set_epochs, set_batch, set_channels, set_layers, no_aux, flip, tta, force;
} train_args;

static train_args train_args_default(void)
{
    train_job j;
    train_job_default(&j);
    return (train_args){.lr = j.lr, .lr_min = j.lr_min, .drop = j.drop_path, .cutout = 16};
}

/* The options of a command line into *a (only those given change it); -1 for --help. */
static int parse_args(train_args *a, int argc, char **argv)
{
    const opt_spec specs[] = {
        {"--genotype", OPT_STRING, &a->genotype, 0, 0, NULL},
        {"--backend", OPT_STRING, &a->backend, 0, 0, NULL},
        {"--data", OPT_STRING, &a->data, 0, 0, NULL},
        {"--dataset", OPT_STRING, &a->dataset, 0, 0, NULL},
        {"--limit", OPT_INT, &a->limit, 0, 1e9, NULL},
        {"--epochs", OPT_INT, &a->epochs, 1, 100000, &a->set_epochs},
        {"--batch", OPT_INT, &a->batch, 2, 65536, &a->set_batch},
        {"--channels", OPT_INT, &a->channels, 2, 4096, &a->set_channels},
        {"--layers", OPT_INT, &a->layers, 1, 1000, &a->set_layers},
        {"--lr", OPT_FLOAT, &a->lr, 0, 10, NULL},
        {"--lr-min", OPT_FLOAT, &a->lr_min, 0, 10, NULL},
        {"--seed", OPT_INT, &a->seed, 0, 2147483647, NULL},
        {"--drop-path", OPT_FLOAT, &a->drop, 0, 0.99, NULL},
        {"--cutout", OPT_INT, &a->cutout, 0, 1024, NULL},
        {"--no-auxiliary", OPT_FLAG, &a->no_aux, 0, 0, NULL},
        {"--flip", OPT_FLAG, &a->flip, 0, 0, NULL},
        {"--label-smoothing", OPT_FLOAT, &a->smoothing, 0, 0.99, NULL},
        {"--tta", OPT_FLAG, &a->tta, 0, 0, NULL},
        {"--holdout", OPT_INT, &a->holdout, 0, 1e9, NULL},
        {"--out", OPT_STRING, &a->out, 0, 0, NULL},
        {"--resume", OPT_STRING, &a->resume, 0, 0, NULL},
        {"--force", OPT_FLAG, &a->force, 0, 0, NULL},
    };
    return opt_parse("train", train_usage, specs, (int)(sizeof specs / sizeof specs[0]), argc,
                     argv);
}

/* A resume's settings: those recorded in the run, then the options given with --resume,
 * which may only change where it runs and extend it. */
static int recall_args(train_args *a, json_t **rec, int argc, char **argv)
{
    static const char *const allowed[] = {"--resume", "--backend", "--epochs", NULL};
    const char *dir = a->resume;
    int rc = run_record_resume_only(argc, argv, allowed, "train");
    if (!rc)
        rc = run_record_load(dir, rec, "train");
    int n = 0;
    char **v = NULL;
    if (!rc && run_record_argv(*rec, "train", &n, &v))
        rc = cli_fail("train", "--resume %s: the recorded options are malformed", dir);
    *a = train_args_default();
    if (!rc && parse_args(a, n, v))
        rc = cli_fail("train", "--resume %s: the recorded options do not parse", dir);
    free(v);
    if (!rc && a->resume)
        rc = cli_fail("train", "--resume %s: the recorded options resume another run", dir);
    if (!rc)
        rc = parse_args(a, argc, argv) ? CLI_EXIT_USAGE : 0;
    return rc;
}

/* The job of settings a. */
static int make_job(train_job *j, const train_args *a, const cli_global *g)
{
    train_job_default(j);
    if (!a->genotype)
        return cli_usage_error("train", "--genotype is required");
    int rc = load_genotype(a->genotype, &j->genotype);
    if (rc)
        return rc;
    j->backend = a->backend ? a->backend : g->backend;
    j->data_dir = a->data;
    j->dataset = a->dataset;
    j->out = a->resume ? a->resume : a->out ? a->out : j->out;
    j->resume = a->resume;
    j->limit = a->limit;
    j->lr = (float)a->lr;
    j->lr_min = (float)a->lr_min;
    j->drop_path = (float)a->drop;
    j->cutout = (int)a->cutout;
    j->flip = a->flip;
    j->tta = a->tta;
    j->net.seed = (uint64_t)a->seed;
    j->net.auxiliary = !a->no_aux;
    j->net.label_smoothing = (float)a->smoothing;
    j->holdout = a->holdout;
    j->comm = g->comm;
    j->g = g;
    if (a->set_batch)
        j->net.batch = (int)a->batch;
    if (a->set_channels)
        j->net.channels = (int)a->channels;
    if (a->set_layers)
        j->net.layers = (int)a->layers;
    /* DARTS trains CIFAR-10 600 epochs; the 28x28 sets need far fewer */
    bool cifar = j->dataset && !strcmp(j->dataset, "cifar10");
    j->epochs = a->set_epochs ? (int)a->epochs : cifar ? 600 : 20;
    return 0;
}

int cli_train(const cli_global *g, int argc, char **argv)
{
    train_args a = train_args_default();
    int rc = parse_args(&a, argc, argv);
    if (rc)
        return rc < 0 ? CLI_EXIT_OK : rc;
    json_t *rec = NULL;
    if (a.resume)
        rc = recall_args(&a, &rec, argc, argv);
    else if (!(rec = run_record_new(g, argc, argv)))
        rc = cli_fail("train", "out of memory");
    train_job j;
    if (!rc)
        rc = make_job(&j, &a, g);
    if (!rc && !a.resume && cli_lead(g))
        rc = run_claim_dir(j.out, a.force, "train");
    char *argv_json = NULL;
    if (!rc && !(argv_json = json_dumps(json_object_get(rec, "argv"), JSON_COMPACT)))
        rc = cli_fail("train", "out of memory");
    if (!rc) {
        j.argv_json = argv_json;
        rc = train_run(&j, NULL);
    }
    free(argv_json);
    json_decref(rec);
    return rc;
}
