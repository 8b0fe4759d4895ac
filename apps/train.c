/* exapt train: trains the network of a genotype from scratch, evaluates it on the test
 * split each epoch, and saves its weights for PyTorch and for inference. */
#include <jansson.h>
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
    ex_dataset *train_set, *test_set;
    ex_loader *train;
    ex_metrics_writer *log;
    float *x;
    int32_t *y;
    int epoch;
    int64_t step, global_step;
} train_state;

static int test_accuracy(train_state *t, double *loss, double *acc)
{
    ex_loader *l = NULL;
    int eb = t->j->net.eval_batch;
    int rc = run_loader(t->test_set, false, eb, 0, 0, false, &l, t->j->cmd);
    if (rc)
        return rc;
    double sum = 0;
    int64_t correct = 0, seen = 0;
    for (int64_t b = 0; b < ex_loader_batches_per_epoch(l); b++) {
        int count = 0, c = 0;
        float lb = 0;
        if (ex_loader_next(l, t->x, t->y, &count) != EX_OK ||
            ex_network_eval(t->net, t->x, t->y, &lb, &c) != EX_OK) {
            ex_loader_free(l);
            return cli_fail(t->j->cmd, "evaluation: %s", ex_network_error(t->net));
        }
        sum += (double)lb * count;
        correct += c;
        seen += count;
    }
    ex_loader_free(l);
    *loss = seen ? sum / (double)seen : 0;
    *acc = seen ? (double)correct / (double)seen : 0;
    return 0;
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
             "\"drop_path\":%g,\"cutout\":%d,\"lr\":%g,\"seed\":%llu,\"genotype\":%s}",
             c->channels, c->layers, c->batch, t->j->epochs, c->auxiliary ? "true" : "false",
             (double)t->j->drop_path, t->j->cutout, (double)t->j->lr, (unsigned long long)c->seed,
             genotype);
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
    float lr = run_cosine(j->lr, j->lr_min, t->epoch, j->epochs);
    double t0 = run_now(), loss = 0, acc = 0;
    int64_t done = 0;
    for (; t->step < steps; t->step++, t->global_step++, done++) {
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
    int rc = test_accuracy(t, &tl, &ta);
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
            "train epoch %d/%d done in %.0f s | train loss %.4f acc %.4f | test loss "
            "%.4f acc %.4f\n",
            t->epoch + 1, j->epochs, e.seconds, e.train_loss, e.train_acc, tl, ta);
    *test_acc = ta;
    return 0;
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
    if (rc)
        return rc;
    ex_network_config c = j->net;
    c.in_channels = ex_dataset_channels(t->train_set);
    c.height = ex_dataset_height(t->train_set);
    c.width = ex_dataset_width(t->train_set);
    c.classes = ex_dataset_classes(t->train_set);
    c.eval_batch = run_eval_batch(ex_dataset_count(t->test_set), 250);
    ((train_job *)j)->net = c; /* the job records what ran */
    if ((rc = run_loader(t->train_set, true, c.batch, c.seed, j->cutout, j->flip, &t->train,
                         j->cmd)))
        return rc;
    size_t img = (size_t)c.in_channels * (size_t)c.height * (size_t)c.width;
    size_t most = (size_t)(c.batch > c.eval_batch ? c.batch : c.eval_batch);
    t->x = malloc(most * img * sizeof *t->x);
    t->y = malloc(most * sizeof *t->y);
    if (!t->x || !t->y)
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
    if (!rc && !measured) /* resumed after its last epoch */
        rc = test_accuracy(&t, &loss, &acc);
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
    ex_dataset_free(t.test_set);
    if (t.own_be)
        ex_backend_close(t.be);
    free(t.x);
    free(t.y);
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
    double lr = j.lr, lr_min = j.lr_min, drop = j.drop_path;
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
        {"--out", OPT_STRING, &j.out, 0, 0, NULL},
        {"--resume", OPT_STRING, &j.resume, 0, 0, NULL},
    };
    int rc =
        opt_parse("train", train_usage, specs, (int)(sizeof specs / sizeof specs[0]), argc, argv);
    if (rc)
        return rc < 0 ? CLI_EXIT_OK : rc;
    if (!genotype)
        return cli_usage_error("train", train_usage, "--genotype is required");
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
