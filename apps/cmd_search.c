/* exapt search: a differentiable architecture search on a dataset, with a metrics log,
 * checkpoints, resume, and (presets quick and fashion) the training of the network it finds. */
#define _POSIX_C_SOURCE 200809L /* strtok_r */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "exapt/search.h"
#include "options.h"
#include "run.h"
#include "run_record.h"
#include "train_run.h"

static const char search_usage[] =
    "usage: exapt search [options]\n"
    "  --preset NAME        darts (DARTS's search, default); quick (a small search on a\n"
    "                       subset, then training of the network found; minutes on a CPU);\n"
    "                       fashion (search, then training of the network found at\n"
    "                       evaluation size; the whole job on a GPU)\n"
    "  --backend NAME       backend (beats EXAPT_BACKEND)\n"
    "  --mode MODE          darts, gdas or topk\n"
    "  --order N            1 or 2 (second-order DARTS)\n"
    "  --data DIR           dataset directory (default /usr/share/datasets/fashion-mnist)\n"
    "  --dataset NAME       fashion-mnist, mnist, cifar10 or auto\n"
    "  --limit N            use the first N training images (0: all)\n"
    "  --train-portion P    share of them for weights; the rest updates alpha (0.5)\n"
    "  --epochs N --batch N --channels N --layers N --steps N\n"
    "  --lr X --lr-min X --arch-lr X --topk K --entropy W --seed N\n"
    "  --candidates LIST    comma-separated candidate operations (default DARTS's eight:\n"
    "                       none,max_pool_3x3,avg_pool_3x3,skip_connect,sep_conv_3x3,...;\n"
    "                       sep_conv_7x7 and conv_7x1_1x7 are accepted too)\n"
    "  --tau-max X --tau-min X  gdas temperature, annealed linearly over the epochs\n"
    "  --arch-warmup E      epochs (a fraction is fine) before alpha starts to move (0)\n"
    "  --max-param-free N   collapse guard: at most N parameter-free operations (poolings,\n"
    "                       skip_connect) in the derived normal cell (-1: no cap)\n"
    "  --partial-channels K PC-DARTS: a 1/K share of each edge's channels goes through the\n"
    "                       candidates, the rest passes by (1: all; K divides --channels)\n"
    "  --out DIR            where genotype.txt/json, metrics.jsonl, checkpoints go (run);\n"
    "                       a DIR that holds a run is refused unless --force\n"
    "  --force              replace the run in --out DIR (its files are removed first)\n"
    "  --gpus N             N data-parallel ranks on this machine, one per GPU (through\n"
    "                       mpirun; the global --ranks N)\n"
    "  --resume DIR         continue an interrupted run from its last checkpoint, with the\n"
    "                       configuration recorded in DIR/metrics.jsonl; only --backend,\n"
    "                       the --viz options, --profile-every, --checkpoint-every, and a\n"
    "                       longer --epochs or --train-epochs may be given with it\n"
    "  --train-epochs N     after searching, train the derived network N epochs (quick: 3,\n"
    "                       fashion: 24; 0: no training)\n"
    "  --train-limit N --train-channels N --train-layers N --train-batch N --train-lr X\n"
    "  --train-cutout N --train-drop-path P --train-flip 0|1 --train-auxiliary 0|1\n"
    "  --train-label-smoothing X --train-tta 0|1 --train-holdout N\n"
    "                       the derived network's size and training recipe\n"
    "  --profile-every N    profile one step in N (metrics profile records; 0: off)\n"
    "  --checkpoint-every N also checkpoint every N steps (default: at each epoch's end)\n"
    "  --viz                watch the search live in a window (exapt_viz); closing it leaves\n"
    "                       the search running; space pauses the search\n"
    "  --viz-every N        log alpha and masks every N steps (with --viz 1, else 10)\n"
    "  --viz-exit           close the window when the search ends\n";

typedef struct search_args {
    const char *preset, *backend, *mode, *data, *dataset, *out, *resume, *candidates;
    long order, epochs, batch, channels, layers, steps, topk, seed, limit, train_epochs,
        profile_every, checkpoint_every, viz_every, max_free, partial, train_channels, train_layers,
        train_batch, train_cutout, train_flip, train_aux, train_limit, train_tta, train_holdout;
    bool viz, viz_exit, force;
    double portion, lr, lr_min, arch_lr, entropy, tau_max, tau_min, warmup, train_lr,
        train_drop_path, train_smoothing;
    bool set_order, set_epochs, set_batch, set_channels, set_layers, set_steps, set_topk, set_seed,
        set_limit, set_portion, set_lr, set_lr_min, set_arch_lr, set_entropy, set_train_epochs,
        set_tau_max, set_tau_min, set_warmup, set_max_free, set_partial, set_train_channels,
        set_train_layers, set_train_batch, set_train_cutout, set_train_flip, set_train_aux,
        set_train_lr, set_train_drop_path, set_train_limit, set_train_tta, set_train_holdout,
        set_train_smoothing;
} search_args;

/* The search proper: configuration, data, and where it stands. */
typedef struct search_run {
    ex_search_config cfg;
    int epochs;
    float lr, lr_min;
    int64_t limit;
    double portion;
    double arch_warmup;  /* epochs */
    train_job train_cfg; /* the derived network's training (train_cfg.epochs 0: none) */
    long profile_every, checkpoint_every, alpha_every;
    cli_live *live; /* the live viewer, or NULL */
    const char *out;
    ex_backend *be;
    ex_search *s;
    ex_dataset *train_set, *valid_set;
    ex_loader *train, *valid;
    ex_metrics_writer *log;
    json_t *record; /* the run's configuration, as its metrics log's header holds it */
    int epoch;
    int64_t step, global_step;
    double syncs_per_step; /* the device waits of the host in the last epoch's steps,
                              profiled ones left out (they run node by node) */
    int64_t synced_steps;  /* the steps behind syncs_per_step */
    float *xt, *xv;
    int32_t *yt, *yv;
    bool lead;             /* this process writes the run's files and prints: rank 0, or alone */
    ex_metrics_step times; /* the ranks' times of the last step (run_rank_times) */
} search_run;

/* Settings of a preset; 0 for an unknown name. */
static int preset(search_run *r, const char *name)
{
    ex_search_config_default(&r->cfg);
    r->epochs = 50;
    r->lr = 0.025f;
    r->lr_min = 0.001f;
    r->portion = 0.5;
    r->limit = 0;
    r->arch_warmup = 0;
    train_job *t = &r->train_cfg;
    train_job_default(t);
    t->epochs = 0;
    t->net.seed = r->cfg.seed;
    if (!strcmp(name, "darts"))
        return 1;
    /* the guard against the collapse to parameter-free cells: the weights learn before
     * alpha moves, and the derived normal cell keeps at most half its operations free */
    r->cfg.arch_lr = 3e-3f; /* alpha moves visibly within a short search */
    t->flip = true;
    if (!strcmp(name, "quick")) {
        /* small and cheap, for two CPU cores in under 10 minutes: 3x3 candidates only,
         * half the channels through them, then 3 short epochs of a thin network at a
         * high learning rate (the choices and their held-out figures: bench/results) */
        static const ex_cand cheap[] = {EX_CAND_NONE,         EX_CAND_MAX_POOL_3X3,
                                        EX_CAND_AVG_POOL_3X3, EX_CAND_SKIP_CONNECT,
                                        EX_CAND_SEP_CONV_3X3, EX_CAND_DIL_CONV_3X3};
        r->cfg.ncand = (int)(sizeof cheap / sizeof cheap[0]);
        memcpy(r->cfg.cand, cheap, sizeof cheap);
        r->cfg.channels = 6;
        r->cfg.layers = 5;
        r->cfg.steps = r->cfg.multiplier = 3;
        r->cfg.max_param_free = 3;
        r->cfg.partial_channels = 2;
        r->arch_warmup = 0.5;
        r->epochs = 1;
        r->limit = 4000;
        t->epochs = 3;
        t->net.channels = 8;
        t->net.layers = 5;
        t->net.batch = 64;
        t->net.auxiliary = false;
        t->lr = 0.1f;
        t->drop_path = 0.0f;
        t->cutout = 0;
        t->flip = false; /* regularizing 3 epochs costs accuracy */
        return 1;
    }
    if (!strcmp(name, "fashion")) {
        /* DARTS's supernet on a third of the training images, then the found cell at
         * DARTS's evaluation size trained on all 60,000: 15 minutes on one H200 */
        r->cfg.max_param_free = 4;
        r->arch_warmup = 4;
        r->epochs = 10;
        r->limit = 20000;
        t->epochs = 24;
        t->net.channels = 36;
        t->net.layers = 20;
        t->net.batch = 96;
        t->net.auxiliary = true;
        t->lr = 0.05f;
        t->drop_path = 0.1f;
        t->cutout = 8;
        t->net.label_smoothing = 0.1f; /* with tta: +0.4 point held out (bench/results) */
        t->tta = true;
        return 1;
    }
    return 0;
}

/* "none,sep_conv_3x3,..." into the configuration; -1 when a name is unknown or repeated. */
static int parse_candidates(ex_search_config *c, const char *list)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", list);
    int n = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        int k = ex_cand_parse(tok);
        if (k < 0 || n == EX_MAX_CANDIDATES)
            return -1;
        for (int j = 0; j < n; j++)
            if (c->cand[j] == (ex_cand)k)
                return -1;
        c->cand[n++] = (ex_cand)k;
    }
    if (n < 2)
        return -1;
    c->ncand = n;
    return 0;
}

static int apply_args(search_run *r, const search_args *a)
{
    const char *cmd = "search";
    if (a->mode) {
        int m = ex_search_mode_parse(a->mode);
        if (m < 0)
            return cli_usage_error(cmd, "unknown mode '%s'", a->mode);
        r->cfg.mode = (ex_search_mode)m;
    }
    if (a->set_order)
        r->cfg.order = (int)a->order;
    if (a->set_epochs)
        r->epochs = (int)a->epochs;
    if (a->set_batch)
        r->cfg.batch = (int)a->batch;
    if (a->set_channels)
        r->cfg.channels = (int)a->channels;
    if (a->set_layers)
        r->cfg.layers = (int)a->layers;
    if (a->set_steps)
        r->cfg.steps = r->cfg.multiplier = (int)a->steps;
    if (a->set_topk)
        r->cfg.topk_k = (int)a->topk;
    if (a->set_seed)
        r->cfg.seed = r->train_cfg.net.seed = (uint64_t)a->seed;
    if (a->set_limit)
        r->limit = a->limit;
    if (a->set_portion)
        r->portion = a->portion;
    if (a->set_lr)
        r->lr = (float)a->lr;
    if (a->set_lr_min)
        r->lr_min = (float)a->lr_min;
    if (a->set_arch_lr)
        r->cfg.arch_lr = (float)a->arch_lr;
    if (a->set_entropy)
        r->cfg.entropy_weight = (float)a->entropy;
    train_job *t = &r->train_cfg;
    if (a->set_train_epochs)
        t->epochs = (int)a->train_epochs;
    if (a->set_train_limit)
        t->limit = a->train_limit;
    if (a->set_train_channels)
        t->net.channels = (int)a->train_channels;
    if (a->set_train_layers)
        t->net.layers = (int)a->train_layers;
    if (a->set_train_batch)
        t->net.batch = (int)a->train_batch;
    if (a->set_train_lr)
        t->lr = (float)a->train_lr;
    if (a->set_train_cutout)
        t->cutout = (int)a->train_cutout;
    if (a->set_train_drop_path)
        t->drop_path = (float)a->train_drop_path;
    if (a->set_train_flip)
        t->flip = a->train_flip != 0;
    if (a->set_train_aux)
        t->net.auxiliary = a->train_aux != 0;
    if (a->set_train_tta)
        t->tta = a->train_tta != 0;
    if (a->set_train_holdout)
        t->holdout = a->train_holdout;
    if (a->set_train_smoothing)
        t->net.label_smoothing = (float)a->train_smoothing;
    if (a->set_warmup)
        r->arch_warmup = a->warmup;
    if (a->set_max_free)
        r->cfg.max_param_free = (int)a->max_free;
    if (a->set_partial)
        r->cfg.partial_channels = (int)a->partial;
    if (a->set_tau_max)
        r->cfg.tau_max = (float)a->tau_max;
    if (a->set_tau_min)
        r->cfg.tau_min = (float)a->tau_min;
    if (a->candidates && parse_candidates(&r->cfg, a->candidates))
        return cli_usage_error(cmd,
                               "--candidates: unknown, repeated or too many "
                               "operations in '%s'",
                               a->candidates);
    r->profile_every = a->profile_every;
    r->checkpoint_every = a->checkpoint_every;
    r->alpha_every = a->viz_every > 0 ? a->viz_every : a->viz ? 1 : 10;
    r->out = a->resume ? a->resume : a->out;
    return 0;
}

/* ---- data ---- */

static int64_t steps_per_epoch(const search_run *r)
{
    int64_t a = ex_loader_batches_per_epoch(r->train), b = ex_loader_batches_per_epoch(r->valid);
    return a < b ? a : b;
}

static int open_data(search_run *r, const search_args *a)
{
    const char *cmd = "search";
    ex_dataset *all = NULL;
    int rc = run_load(a->data, a->dataset, EX_SPLIT_TRAIN, r->limit, &all, cmd);
    if (rc)
        return rc;
    char msg[512];
    ex_status st = ex_dataset_split(all, r->portion, &r->train_set, &r->valid_set, msg, sizeof msg);
    ex_dataset_free(all);
    if (st != EX_OK)
        return cli_fail(cmd, "%s", msg);
    r->cfg.in_channels = ex_dataset_channels(r->train_set);
    r->cfg.height = ex_dataset_height(r->train_set);
    r->cfg.width = ex_dataset_width(r->train_set);
    r->cfg.classes = ex_dataset_classes(r->train_set);
    r->cfg.eval_batch = run_eval_batch(ex_dataset_count(r->valid_set), 256);
    if ((rc =
             run_loader(r->train_set, true, r->cfg.batch, r->cfg.seed, 0, false, &r->train, cmd)) ||
        (rc = run_loader(r->valid_set, true, r->cfg.batch, r->cfg.seed + 1, 0, false, &r->valid,
                         cmd)))
        return rc;
    r->cfg.arch_warmup = (int64_t)(r->arch_warmup * (double)steps_per_epoch(r) + 0.5);
    size_t img = (size_t)r->cfg.in_channels * (size_t)r->cfg.height * (size_t)r->cfg.width;
    size_t big = (size_t)(r->cfg.batch > r->cfg.eval_batch ? r->cfg.batch : r->cfg.eval_batch);
    r->xt = malloc(big * img * sizeof *r->xt);
    r->xv = malloc(big * img * sizeof *r->xv);
    r->yt = malloc(big * sizeof *r->yt);
    r->yv = malloc(big * sizeof *r->yv);
    if (!r->xt || !r->xv || !r->yt || !r->yv)
        return cli_fail(cmd, "out of memory");
    return 0;
}

/* ---- checkpoints ---- */

static int save_checkpoint(search_run *r)
{
    if (!r->lead)
        return 0;
    ex_loader_state t = ex_loader_get_state(r->train), v = ex_loader_get_state(r->valid);
    char meta[512], path[4096];
    snprintf(meta, sizeof meta,
             "{\"epoch\":%d,\"step\":%lld,\"global_step\":%lld,\"train\":[%lld,%lld],"
             "\"valid\":[%lld,%lld]}",
             r->epoch, (long long)r->step, (long long)r->global_step, (long long)t.epoch,
             (long long)t.position, (long long)v.epoch, (long long)v.position);
    run_path(path, sizeof path, r->out, "checkpoint.safetensors");
    run_keep_previous(path);
    if (ex_search_save(r->s, path, meta) != EX_OK)
        return cli_fail("search", "checkpoint: %s", ex_search_error(r->s));
    return 0;
}

static int restore_state(search_run *r, const char *path)
{
    char msg[512];
    ex_safetensors *f = NULL;
    if (ex_safetensors_open(path, &f, msg, sizeof msg) != EX_OK)
        return cli_fail("search", "%s", msg);
    const char *user = ex_safetensors_metadata(f, "user");
    json_error_t jerr;
    json_t *j = user ? json_loads(user, 0, &jerr) : NULL;
    json_int_t e = 0, s = 0, g = 0, te = 0, tp = 0, ve = 0, vp = 0;
    int bad = !j || json_unpack(j, "{s:I,s:I,s:I,s:[II],s:[II]}", "epoch", &e, "step", &s,
                                "global_step", &g, "train", &te, &tp, "valid", &ve, &vp);
    json_decref(j);
    ex_safetensors_close(f);
    if (bad)
        return cli_fail("search", "%s: no resume position in its metadata", path);
    r->epoch = (int)e;
    r->step = s;
    r->global_step = g;
    if (ex_loader_set_state(r->train, (ex_loader_state){te, tp}, msg, sizeof msg) != EX_OK ||
        ex_loader_set_state(r->valid, (ex_loader_state){ve, vp}, msg, sizeof msg) != EX_OK)
        return cli_fail("search", "%s", msg);
    return 0;
}

/* The newest complete checkpoint: the last one, or the one before it. */
static int resume(search_run *r)
{
    char path[4096], prev[4200];
    run_path(path, sizeof path, r->out, "checkpoint.safetensors");
    snprintf(prev, sizeof prev, "%s.prev", path);
    const char *tries[2] = {path, prev};
    for (int i = 0; i < 2; i++) {
        if (ex_search_load(r->s, tries[i]) != EX_OK) {
            fprintf(stderr, "exapt search: %s: %s\n", tries[i], ex_search_error(r->s));
            continue;
        }
        if (restore_state(r, tries[i]) == 0) {
            if (r->lead)
                fprintf(stderr, "exapt search: resuming from %s at epoch %d step %lld\n", tries[i],
                        r->epoch + 1, (long long)r->step);
            return 0;
        }
    }
    return cli_fail("search", "no usable checkpoint in %s", r->out);
}

/* ---- the metrics log ---- */

/* One number into a record object. */
static void put(json_t *o, const char *key, double v)
{
    json_object_set_new(o, key,
                        v == (double)(json_int_t)v && fabs(v) < 9e15 ? json_integer((json_int_t)v)
                                                                     : json_real(v));
}

/* Every setting of the run into its record, the ones a preset chose included. */
static int record_settings(search_run *r, const search_args *a, const char *backend)
{
    const ex_search_config *c = &r->cfg;
    const train_job *t = &r->train_cfg;
    json_t *search = json_object(), *train = json_object(), *cands = json_array();
    for (int k = 0; cands && k < c->ncand; k++)
        json_array_append_new(cands, json_string(ex_cand_name(c->cand[k])));
    if (!search || !train || !cands) {
        json_decref(search);
        json_decref(train);
        json_decref(cands);
        return cli_fail("search", "out of memory");
    }
    json_object_set_new(search, "mode", json_string(ex_search_mode_name(c->mode)));
    json_object_set_new(search, "candidates", cands);
    const struct {
        const char *key;
        double v;
    } sv[] = {{"order", c->order},
              {"epochs", r->epochs},
              {"batch", c->batch},
              {"channels", c->channels},
              {"layers", c->layers},
              {"steps", c->steps},
              {"multiplier", c->multiplier},
              {"stem_multiplier", c->stem_multiplier},
              {"in_channels", c->in_channels},
              {"height", c->height},
              {"width", c->width},
              {"classes", c->classes},
              {"limit", (double)r->limit},
              {"train_portion", r->portion},
              {"lr", r->lr},
              {"lr_min", r->lr_min},
              {"momentum", c->momentum},
              {"weight_decay", c->weight_decay},
              {"grad_clip", c->grad_clip},
              {"arch_lr", c->arch_lr},
              {"arch_beta1", c->arch_beta1},
              {"arch_beta2", c->arch_beta2},
              {"arch_weight_decay", c->arch_weight_decay},
              {"arch_warmup", r->arch_warmup},
              {"arch_warmup_steps", (double)c->arch_warmup},
              {"max_param_free", c->max_param_free},
              {"partial_channels", c->partial_channels},
              {"entropy", c->entropy_weight},
              {"tau_max", c->tau_max},
              {"tau_min", c->tau_min},
              {"topk", c->topk_k},
              {"topk_threshold", c->topk_threshold},
              {"seed", (double)c->seed}};
    for (size_t i = 0; i < sizeof sv / sizeof sv[0]; i++)
        put(search, sv[i].key, sv[i].v);
    json_object_set_new(train, "auxiliary", json_boolean(t->net.auxiliary));
    json_object_set_new(train, "flip", json_boolean(t->flip));
    json_object_set_new(train, "tta", json_boolean(t->tta));
    const struct {
        const char *key;
        double v;
    } tv[] = {{"epochs", t->epochs},
              {"limit", (double)t->limit},
              {"channels", t->net.channels},
              {"layers", t->net.layers},
              {"batch", t->net.batch},
              {"aux_weight", t->net.aux_weight},
              {"lr", t->lr},
              {"lr_min", t->lr_min},
              {"momentum", t->net.momentum},
              {"weight_decay", t->net.weight_decay},
              {"grad_clip", t->net.grad_clip},
              {"drop_path", t->drop_path},
              {"cutout", t->cutout},
              {"label_smoothing", t->net.label_smoothing},
              {"holdout", (double)t->holdout},
              {"seed", (double)t->net.seed}};
    for (size_t i = 0; i < sizeof tv / sizeof tv[0]; i++)
        put(train, tv[i].key, tv[i].v);
    json_t *o = r->record;
    if (json_object_set_new(o, "preset", json_string(a->preset ? a->preset : "darts")) ||
        json_object_set_new(o, "data",
                            json_string(a->data && *a->data ? a->data : EX_DATA_DEFAULT_DIR)) ||
        json_object_set_new(o, "dataset", json_string(ex_dataset_name(r->train_set))) ||
        json_object_set_new(o, "backend", backend ? json_string(backend) : json_null()) ||
        json_object_set_new(o, "search", search) || json_object_set_new(o, "train", train))
        return cli_fail("search", "out of memory");
    return 0;
}

static int open_log(search_run *r, bool resuming)
{
    char path[4096], msg[512];
    run_path(path, sizeof path, r->out, "metrics.jsonl");
    if (ex_metrics_open(path, resuming ? r->global_step : EX_METRICS_NEW, &r->log, msg,
                        sizeof msg) != EX_OK)
        return cli_fail("search", "%s", msg);
    if (!ex_metrics_needs_header(r->log))
        return r->live ? cli_live_load(r->live, path) : 0;
    ex_metrics_record *rec = calloc(1, sizeof *rec);
    if (!rec)
        return cli_fail("search", "out of memory");
    rec->kind = EX_METRICS_HEADER;
    ex_metrics_header *h = &rec->header;
    const ex_search_config *c = &r->cfg;
    char *config = json_dumps(r->record, JSON_COMPACT);
    if (!config || strlen(config) >= sizeof h->config) {
        free(config);
        free(rec);
        return cli_fail("search", "the run's configuration does not fit the metrics header");
    }
    snprintf(h->config, sizeof h->config, "%s", config);
    free(config);
    h->n_candidates = c->ncand;
    for (int k = 0; k < c->ncand; k++)
        snprintf(h->candidates[k], sizeof h->candidates[k], "%s", ex_cand_name(c->cand[k]));
    for (int i = 0, e = 0; i < c->steps; i++)
        for (int j = 0; j < 2 + i && e < EX_METRICS_MAX_EDGES; j++, e++) {
            h->edges[e][0] = 2 + i;
            h->edges[e][1] = j;
            h->n_edges = e + 1;
        }
    const ex_backend_caps *caps = ex_backend_get_caps(r->be);
    snprintf(h->backend, sizeof h->backend, "%s", caps->name);
    snprintf(h->device, sizeof h->device, "%s", caps->device);
    h->peak_gbs = caps->peak_copy_gbs;
    snprintf(h->mode, sizeof h->mode, "%s", ex_search_mode_name(c->mode));
    ex_status st = ex_metrics_write_header(r->log, h, msg, sizeof msg);
    cli_live_record(r->live, rec);
    free(rec);
    return st == EX_OK ? 0 : cli_fail("search", "%s", msg);
}

static void log_step(search_run *r, const ex_search_stats *st, float lr, float tau, double ips,
                     bool alphas)
{
    if (!r->log)
        return;
    ex_metrics_record *rec = calloc(1, sizeof *rec);
    if (!rec)
        return;
    rec->kind = EX_METRICS_STEP;
    ex_metrics_step *m = &rec->step;
    *m = (ex_metrics_step){.epoch = r->epoch,
                           .step = r->step,
                           .global_step = r->global_step,
                           .lr = lr,
                           .train_loss = st->train_loss,
                           .train_acc = st->train_acc,
                           .has_valid = true,
                           .valid_loss = st->valid_loss,
                           .valid_acc = st->valid_acc,
                           .images_per_s = ips,
                           .step_ms = st->step_ms,
                           .skipped = st->skipped};
    m->has_tau = r->cfg.mode == EX_SEARCH_GDAS;
    m->tau = tau;
    m->n_ranks = r->times.n_ranks;
    memcpy(m->rank_step_ms, r->times.rank_step_ms, sizeof m->rank_step_ms);
    int edges = ex_search_edges(r->s), k = r->cfg.ncand;
    if (alphas && edges <= EX_METRICS_MAX_EDGES && k <= EX_METRICS_MAX_CANDS) {
        float *buf = malloc(4 * (size_t)edges * (size_t)k * sizeof *buf);
        size_t n = (size_t)edges * (size_t)k;
        if (buf && ex_search_weights(r->s, buf, buf + n) == EX_OK &&
            ex_search_masks(r->s, buf + 2 * n, buf + 3 * n) == EX_OK) {
            m->n_edges = edges;
            m->n_cands = k;
            m->has_alphas = m->has_active = true;
            for (int e = 0; e < edges; e++)
                for (int j = 0; j < k; j++) {
                    m->alpha_normal[e][j] = buf[e * k + j];
                    m->alpha_reduce[e][j] = buf[n + e * k + j];
                    m->active_normal[e][j] = buf[2 * n + e * k + j] != 0.0f;
                    m->active_reduce[e][j] = buf[3 * n + e * k + j] != 0.0f;
                }
        }
        free(buf);
    }
    char msg[256];
    if (ex_metrics_write_step(r->log, m, msg, sizeof msg) != EX_OK)
        fprintf(stderr, "exapt search: metrics: %s\n", msg);
    cli_live_record(r->live, rec);
    free(rec);
}

/* Time and bandwidth of the last (profiled) step by engine op and by candidate. */
static void log_profile(search_run *r)
{
    if (!r->log)
        return;
    ex_plan *p = ex_search_plan(r->s);
    ex_metrics_record *rec = calloc(1, sizeof *rec);
    ex_metrics_profile *m = rec ? &rec->profile : NULL;
    double *bytes = calloc(EX_OP_COUNT + EX_MAX_CANDIDATES, sizeof *bytes);
    if (!rec || !bytes) {
        free(rec);
        free(bytes);
        return;
    }
    m->global_step = r->global_step;
    int slot[EX_OP_COUNT];
    for (int o = 0; o < EX_OP_COUNT; o++)
        slot[o] = -1;
    for (int64_t i = 0; i < ex_plan_node_count(p); i++) {
        ex_node_info in;
        if (ex_plan_node_info(p, i, &in) != EX_OK || in.skipped || in.ms <= 0)
            continue;
        if (slot[in.op] < 0 && m->n_ops < EX_METRICS_MAX_OPS) {
            slot[in.op] = m->n_ops++;
            snprintf(m->ops[slot[in.op]].op, EX_METRICS_NAME_MAX, "%s", ex_op_name(in.op));
        }
        if (slot[in.op] >= 0) {
            m->ops[slot[in.op]].ms += in.ms;
            m->ops[slot[in.op]].calls++;
            bytes[slot[in.op]] += (double)in.min_bytes;
        }
        int c = in.tag[2];
        if (c >= 0 && c < r->cfg.ncand && c < EX_METRICS_MAX_PROF_CANDS) {
            m->candidates[c].ms += in.ms;
            bytes[EX_OP_COUNT + c] += (double)in.min_bytes;
        }
    }
    for (int o = 0; o < m->n_ops; o++)
        m->ops[o].gbs = m->ops[o].ms > 0 ? bytes[o] / (m->ops[o].ms * 1e6) : 0;
    for (int c = 0; c < r->cfg.ncand && c < EX_METRICS_MAX_PROF_CANDS; c++) {
        snprintf(m->candidates[c].candidate, EX_METRICS_NAME_MAX, "%s",
                 ex_cand_name(r->cfg.cand[c]));
        double ms = m->candidates[c].ms;
        m->candidates[c].gbs = ms > 0 ? bytes[EX_OP_COUNT + c] / (ms * 1e6) : 0;
        m->n_candidates = c + 1;
    }
    char msg[256];
    if (ex_metrics_write_profile(r->log, m, msg, sizeof msg) != EX_OK)
        fprintf(stderr, "exapt search: metrics: %s\n", msg);
    rec->kind = EX_METRICS_PROFILE;
    cli_live_record(r->live, rec);
    free(rec);
    free(bytes);
}

/* ---- epochs ---- */

/* The supernet on the whole validation split, batch norm in eval mode. */
static int evaluate(search_run *r, double *loss, double *acc)
{
    ex_loader *l = NULL;
    int rc = run_loader(r->valid_set, false, r->cfg.eval_batch, 0, 0, false, &l, "search");
    if (rc)
        return rc;
    double sum = 0;
    int64_t correct = 0, seen = 0;
    for (int64_t b = 0; b < ex_loader_batches_per_epoch(l); b++) {
        int count = 0;
        float lb = 0;
        int cb = 0;
        if (run_stop_requested()) {
            ex_loader_free(l);
            return RUN_EXIT_INTERRUPTED;
        }
        if (ex_loader_next(l, r->xv, r->yv, &count) != EX_OK ||
            ex_search_eval(r->s, r->xv, r->yv, &lb, &cb) != EX_OK) {
            ex_loader_free(l);
            return cli_fail("search", "evaluation: %s", ex_search_error(r->s));
        }
        sum += (double)lb * count;
        correct += cb;
        seen += count;
    }
    ex_loader_free(l);
    *loss = seen ? sum / (double)seen : 0;
    *acc = seen ? (double)correct / (double)seen : 0;
    return 0;
}

/* The epoch's records to the live viewer. */
static void live_epoch(search_run *r, const ex_metrics_epoch *e, const ex_metrics_genotype *g)
{
    ex_metrics_record *rec = r->live ? calloc(1, sizeof *rec) : NULL;
    if (!rec)
        return;
    rec->kind = EX_METRICS_EPOCH;
    rec->epoch = *e;
    cli_live_record(r->live, rec);
    rec->kind = EX_METRICS_GENOTYPE;
    rec->genotype = *g;
    cli_live_record(r->live, rec);
    free(rec);
}

static int end_epoch(search_run *r, double seconds, double train_loss, double train_acc)
{
    double vloss = 0, vacc = 0;
    int rc = evaluate(r, &vloss, &vacc);
    if (rc)
        return rc;
    ex_genotype g;
    char text[EX_GENOTYPE_TEXT_MAX], json[EX_GENOTYPE_TEXT_MAX], path[4096], msg[512];
    if (ex_search_genotype(r->s, &g) != EX_OK)
        return cli_fail("search", "genotype: %s", ex_search_error(r->s));
    if (!r->lead)
        return 0;
    ex_genotype_format(&g, text, sizeof text);
    ex_genotype_format_json(&g, json, sizeof json);
    if (ex_genotype_save_text(run_path(path, sizeof path, r->out, "genotype.txt"), &g, msg,
                              sizeof msg) != EX_OK ||
        ex_genotype_save_json(run_path(path, sizeof path, r->out, "genotype.json"), &g, msg,
                              sizeof msg) != EX_OK)
        return cli_fail("search", "%s", msg);
    ex_metrics_epoch e = {.epoch = r->epoch,
                          .train_loss = train_loss,
                          .train_acc = train_acc,
                          .valid_loss = vloss,
                          .valid_acc = vacc,
                          .seconds = seconds};
    snprintf(e.genotype, sizeof e.genotype, "%s", text);
    ex_metrics_genotype mg = {.epoch = r->epoch};
    snprintf(mg.text, sizeof mg.text, "%s", text);
    snprintf(mg.json, sizeof mg.json, "%s", json);
    if (ex_metrics_write_epoch(r->log, &e, msg, sizeof msg) != EX_OK ||
        ex_metrics_write_genotype(r->log, &mg, msg, sizeof msg) != EX_OK ||
        ex_metrics_sync(r->log, msg, sizeof msg) != EX_OK)
        return cli_fail("search", "metrics: %s", msg);
    live_epoch(r, &e, &mg);
    fprintf(stderr,
            "search epoch %d/%d done in %.0f s | train loss %.4f acc %.4f | valid loss "
            "%.4f acc %.4f | %.1f host synchronizations per unprofiled step\n%s\n",
            r->epoch + 1, r->epochs, seconds, train_loss, train_acc, vloss, vacc, r->syncs_per_step,
            text);
    return 0;
}

/* A stop asked for by a signal: a checkpoint where the search stands, and the way on. */
static int interrupted(search_run *r)
{
    int rc = save_checkpoint(r);
    if (r->lead)
        fprintf(stderr,
                "exapt search: interrupted; checkpoint written, continue with --resume %s\n",
                r->out);
    return rc ? rc : RUN_EXIT_INTERRUPTED;
}

static int run_epochs(search_run *r)
{
    int64_t steps = steps_per_epoch(r);
    if (steps < 1)
        return cli_fail("search", "the split gives no full batch of %d", r->cfg.batch);
    for (; r->epoch < r->epochs; r->epoch++, r->step = 0) {
        float lr = run_cosine(r->lr, r->lr_min, r->epoch, r->epochs);
        float tau = r->epochs > 1 ? r->cfg.tau_max - (r->cfg.tau_max - r->cfg.tau_min) *
                                                         (float)r->epoch / (float)(r->epochs - 1)
                                  : r->cfg.tau_max;
        double t0 = run_now(), loss = 0, acc = 0;
        int64_t done = 0;
        r->syncs_per_step = 0;
        r->synced_steps = 0;
        for (; r->step < steps; r->step++, r->global_step++, done++) {
            if (run_stop_requested())
                return interrupted(r);
            cli_live_wait(r->live);
            int nt = 0, nv = 0;
            ex_search_stats st;
            bool profile = r->profile_every > 0 && r->global_step % r->profile_every == 0;
            ex_plan_set_profile(ex_search_plan(r->s), profile);
            if (ex_loader_next(r->train, r->xt, r->yt, &nt) != EX_OK ||
                ex_loader_next(r->valid, r->xv, r->yv, &nv) != EX_OK)
                return cli_fail("search", "data loader failed");
            uint64_t syncs = ex_backend_host_syncs(r->be);
            size_t img = (size_t)r->cfg.in_channels * (size_t)r->cfg.height * (size_t)r->cfg.width,
                   x0 = run_share_start(r->cfg.comm, r->cfg.batch, img),
                   y0 = run_share_start(r->cfg.comm, r->cfg.batch, 1);
            if (ex_search_step(r->s, r->xt + x0, r->yt + y0, r->xv + x0, r->yv + y0, lr, tau,
                               &st) != EX_OK)
                return cli_fail("search", "%s", ex_search_error(r->s));
            int failed = run_rank_times(r->cfg.comm, st.step_ms, &r->times, "search");
            if (failed)
                return failed;
            if (!profile)
                r->syncs_per_step +=
                    ((double)(ex_backend_host_syncs(r->be) - syncs) - r->syncs_per_step) /
                    (double)++r->synced_steps;
            if (st.skipped && r->lead) {
                fprintf(stderr,
                        "exapt search: step %lld: non-finite loss or gradients; update undone "
                        "(%d in a row)\n",
                        (long long)r->global_step, st.nonfinite_run);
            } else {
                loss += st.train_loss;
                acc += st.train_acc;
            }
            double el = run_now() - t0, ips = 2.0 * r->cfg.batch * (double)(done + 1) / el;
            log_step(r, &st, lr, tau, ips, r->step % r->alpha_every == 0 || r->step + 1 == steps);
            if (profile)
                log_profile(r);
            if (r->checkpoint_every > 0 && (r->step + 1) % r->checkpoint_every == 0 &&
                r->step + 1 < steps) {
                r->step++;
                r->global_step++;
                int rc = save_checkpoint(r);
                r->step--;
                r->global_step--;
                if (rc)
                    return rc;
            }
            if (r->lead && (r->step % 10 == 0 || r->step + 1 == steps)) {
                char fig[160];
                snprintf(fig, sizeof fig, "train loss %.3f acc %.3f | valid loss %.3f acc %.3f",
                         st.train_loss, st.train_acc, st.valid_loss, st.valid_acc);
                double left = (double)(steps - r->step - 1 + (r->epochs - r->epoch - 1) * steps);
                run_progress("search", r->epoch, r->epochs, r->step + 1, steps, fig, ips,
                             left * el / (double)(done + 1));
            }
        }
        /* a stop during the evaluation checkpoints at the epoch's last step: a resume
         * evaluates again */
        int rc = end_epoch(r, run_now() - t0, done ? loss / done : 0, done ? acc / done : 0);
        if (rc == RUN_EXIT_INTERRUPTED)
            return interrupted(r);
        if (rc)
            return rc;
        /* the epoch is complete: its checkpoint resumes at the start of the next */
        r->epoch++;
        r->step = 0;
        rc = save_checkpoint(r);
        r->epoch--;
        if (rc)
            return rc;
    }
    return 0;
}

static void free_run(search_run *r)
{
    char msg[256];
    if (r->log)
        ex_metrics_close(r->log, msg, sizeof msg);
    ex_search_free(r->s);
    ex_loader_free(r->train);
    ex_loader_free(r->valid);
    ex_dataset_free(r->train_set);
    ex_dataset_free(r->valid_set);
    ex_backend_close(r->be);
    cli_live_close(r->live);
    json_decref(r->record);
    free(r->xt);
    free(r->xv);
    free(r->yt);
    free(r->yv);
}

/* Whether the training in dir was of genotype g, as its metrics log's header records it. */
static bool trained_on(const char *dir, const ex_genotype *g)
{
    json_t *rec = run_record_peek(dir);
    char *json = rec ? json_dumps(json_object_get(rec, "genotype"), JSON_COMPACT) : NULL;
    ex_genotype old;
    char msg[256], a[EX_GENOTYPE_TEXT_MAX], b[EX_GENOTYPE_TEXT_MAX];
    bool same = json && ex_genotype_parse_json(json, strlen(json), &old, msg, sizeof msg) == EX_OK;
    if (same) {
        ex_genotype_format(&old, a, sizeof a);
        ex_genotype_format(g, b, sizeof b);
        same = strcmp(a, b) == 0;
    }
    free(json);
    json_decref(rec);
    return same;
}

static int train_found(search_run *r, const search_args *a, const char *backend)
{
    train_job j = r->train_cfg;
    j.cmd = "search";
    j.backend = backend;
    j.be = r->be;
    j.data_dir = a->data;
    j.dataset = a->dataset;
    char out[4096], ckpt[4200];
    j.out = run_path(out, sizeof out, r->out, "train");
    j.run_dir = r->out;
    j.comm = r->cfg.comm;
    /* a resumed run whose training had begun continues it; one stopped at the boundary
     * (or before it) starts it, and so does one whose search ran on (a longer --epochs)
     * and found another network: that network's training replaces the earlier one's */
    if (ex_search_genotype(r->s, &j.genotype) != EX_OK)
        return cli_fail("search", "genotype: %s", ex_search_error(r->s));
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint.safetensors", j.out);
    j.resume = a->resume && access(ckpt, F_OK) == 0 ? j.out : NULL;
    if (j.resume && !trained_on(j.out, &j.genotype)) {
        fprintf(stderr, "search: the training in %s was of another network; it starts again\n",
                j.out);
        int rc = run_claim_dir(j.out, true, "search");
        if (rc)
            return rc;
        j.resume = NULL;
    }
    double acc = 0;
    return train_run(&j, &acc);
}

/* The search and the training of what it found: on this thread, or on a worker while the
 * live viewer has the main one. */
typedef struct search_job {
    search_run *r;
    const search_args *a;
    const char *backend;
} search_job;

/* The search's result on standard output (progress went to standard error). */
static int print_result(search_run *r)
{
    if (!r->lead)
        return 0;
    ex_genotype g;
    char text[EX_GENOTYPE_TEXT_MAX], path[4096];
    if (ex_search_genotype(r->s, &g) != EX_OK)
        return cli_fail("search", "genotype: %s", ex_search_error(r->s));
    ex_genotype_format(&g, text, sizeof text);
    printf("genotype: %s\nsaved in %s\n", text,
           run_path(path, sizeof path, r->out, "genotype.json"));
    fflush(stdout);
    return 0;
}

static int search_job_run(void *p)
{
    search_job *j = p;
    int rc = run_epochs(j->r);
    if (!rc)
        rc = print_result(j->r);
    if (!rc && j->r->train_cfg.epochs > 0)
        rc = train_found(j->r, j->a, j->backend);
    return rc;
}

/* The options of a command line into *a (only those given change it); -1 for --help. */
static int parse_args(search_args *a, int argc, char **argv)
{
    const opt_spec specs[] = {
        {"--preset", OPT_STRING, &a->preset, 0, 0, NULL},
        {"--backend", OPT_STRING, &a->backend, 0, 0, NULL},
        {"--mode", OPT_STRING, &a->mode, 0, 0, NULL},
        {"--order", OPT_INT, &a->order, 1, 2, &a->set_order},
        {"--data", OPT_STRING, &a->data, 0, 0, NULL},
        {"--dataset", OPT_STRING, &a->dataset, 0, 0, NULL},
        {"--limit", OPT_INT, &a->limit, 0, 1e9, &a->set_limit},
        {"--train-portion", OPT_FLOAT, &a->portion, 0.01, 0.99, &a->set_portion},
        {"--epochs", OPT_INT, &a->epochs, 1, 100000, &a->set_epochs},
        {"--batch", OPT_INT, &a->batch, 2, 65536, &a->set_batch},
        {"--channels", OPT_INT, &a->channels, 2, 4096, &a->set_channels},
        {"--layers", OPT_INT, &a->layers, 1, 1000, &a->set_layers},
        {"--steps", OPT_INT, &a->steps, 1, EX_MAX_STEPS, &a->set_steps},
        {"--lr", OPT_FLOAT, &a->lr, 0, 10, &a->set_lr},
        {"--lr-min", OPT_FLOAT, &a->lr_min, 0, 10, &a->set_lr_min},
        {"--arch-lr", OPT_FLOAT, &a->arch_lr, 0, 10, &a->set_arch_lr},
        {"--topk", OPT_INT, &a->topk, 1, EX_MAX_CANDIDATES, &a->set_topk},
        {"--entropy", OPT_FLOAT, &a->entropy, 0, 100, &a->set_entropy},
        {"--seed", OPT_INT, &a->seed, 0, 2147483647, &a->set_seed},
        {"--candidates", OPT_STRING, &a->candidates, 0, 0, NULL},
        {"--tau-max", OPT_FLOAT, &a->tau_max, 1e-3, 1e3, &a->set_tau_max},
        {"--tau-min", OPT_FLOAT, &a->tau_min, 1e-3, 1e3, &a->set_tau_min},
        {"--out", OPT_STRING, &a->out, 0, 0, NULL},
        {"--resume", OPT_STRING, &a->resume, 0, 0, NULL},
        {"--force", OPT_FLAG, &a->force, 0, 0, NULL},
        {"--train-epochs", OPT_INT, &a->train_epochs, 0, 100000, &a->set_train_epochs},
        {"--train-limit", OPT_INT, &a->train_limit, 0, 1e9, &a->set_train_limit},
        {"--train-channels", OPT_INT, &a->train_channels, 2, 4096, &a->set_train_channels},
        {"--train-layers", OPT_INT, &a->train_layers, 1, 1000, &a->set_train_layers},
        {"--train-batch", OPT_INT, &a->train_batch, 2, 65536, &a->set_train_batch},
        {"--train-lr", OPT_FLOAT, &a->train_lr, 0, 10, &a->set_train_lr},
        {"--train-cutout", OPT_INT, &a->train_cutout, 0, 1024, &a->set_train_cutout},
        {"--train-drop-path", OPT_FLOAT, &a->train_drop_path, 0, 0.99, &a->set_train_drop_path},
        {"--train-flip", OPT_INT, &a->train_flip, 0, 1, &a->set_train_flip},
        {"--train-auxiliary", OPT_INT, &a->train_aux, 0, 1, &a->set_train_aux},
        {"--train-label-smoothing", OPT_FLOAT, &a->train_smoothing, 0, 0.99,
         &a->set_train_smoothing},
        {"--train-tta", OPT_INT, &a->train_tta, 0, 1, &a->set_train_tta},
        {"--train-holdout", OPT_INT, &a->train_holdout, 0, 1e9, &a->set_train_holdout},
        {"--arch-warmup", OPT_FLOAT, &a->warmup, 0, 1e6, &a->set_warmup},
        {"--max-param-free", OPT_INT, &a->max_free, -1, 2 * EX_MAX_STEPS, &a->set_max_free},
        {"--partial-channels", OPT_INT, &a->partial, 1, 64, &a->set_partial},
        {"--profile-every", OPT_INT, &a->profile_every, 0, 1e9, NULL},
        {"--checkpoint-every", OPT_INT, &a->checkpoint_every, 0, 1e9, NULL},
        {"--viz", OPT_FLAG, &a->viz, 0, 0, NULL},
        {"--viz-every", OPT_INT, &a->viz_every, 1, 1e9, NULL},
        {"--viz-exit", OPT_FLAG, &a->viz_exit, 0, 0, NULL},
    };
    return opt_parse("search", search_usage, specs, (int)(sizeof specs / sizeof specs[0]), argc,
                     argv);
}

/* A resume's settings: those recorded in the run, then the options given with --resume,
 * which may only change where it runs, what it shows, and extend it. */
static int recall_args(search_run *r, search_args *a, const cli_global *g, int argc, char **argv)
{
    static const char *const allowed[] = {
        "--resume",        "--backend",          "--viz",    "--viz-every",    "--viz-exit",
        "--profile-every", "--checkpoint-every", "--epochs", "--train-epochs", NULL};
    const char *dir = a->resume;
    int rc = run_record_resume_only(argc, argv, allowed, "search");
    if (!rc)
        rc = run_record_load(dir, &r->record, "search");
    int n = 0;
    char **v = NULL;
    if (!rc && run_record_argv(r->record, "search", &n, &v))
        rc = cli_fail("search", "--resume %s: the recorded options are malformed", dir);
    *a = (search_args){.out = "run", .profile_every = 50};
    if (!rc && parse_args(a, n, v))
        rc = cli_fail("search", "--resume %s: the recorded options do not parse", dir);
    free(v);
    if (!rc && a->resume)
        rc = cli_fail("search", "--resume %s: the recorded options resume another run", dir);
    if (!rc && a->backend == NULL && g->backend == NULL)
        a->backend = json_string_value(json_object_get(r->record, "backend"));
    if (!rc)
        rc = parse_args(a, argc, argv) ? CLI_EXIT_USAGE : 0;
    return rc;
}

/* The search (and the training of what it found) of settings a. */
static int run_search(search_run *r, const search_args *a, const cli_global *g)
{
    if (!preset(r, a->preset ? a->preset : "darts"))
        return cli_usage_error("search", "unknown preset '%s'", a->preset);
    int rc = apply_args(r, a);
    if (rc)
        return rc;
    if (a->viz && cli_lead(g) && (rc = cli_live_open(&r->live, "exapt search", a->viz_exit)))
        return rc;
    const char *backend = a->backend ? a->backend : g->backend;
    char msg[512];
    if (ex_backend_open(backend, &r->be, msg, sizeof msg) != EX_OK)
        return cli_fail("search", "%s", msg);
    double peak = 0;
    cli_measure_peak(r->be, &peak);
    if ((rc = cli_ranks_comm(g, r->be, &r->cfg.comm)))
        return rc;
    r->lead = cli_lead(g);
    if (!a->resume && r->lead)
        rc = run_claim_dir(r->out, a->force, "search");
    if (!rc && !(rc = open_data(r, a)) && !(rc = r->lead ? run_mkdir(r->out, "search") : 0)) {
        if (ex_search_new(&r->cfg, r->be, &r->s, msg, sizeof msg) != EX_OK)
            rc = cli_fail("search", "%s", msg);
    }
    if (!rc && a->resume)
        rc = resume(r);
    /* until here nothing was written but the folder: a signal's default action ends the
     * process at once (reading the data takes about a second); from here on a signal stops
     * the search at its next step with a checkpoint */
    if (!rc)
        run_catch_signals();
    if (!rc && !a->resume && r->lead)
        rc = record_settings(r, a, backend);
    if (!rc && r->lead)
        rc = open_log(r, a->resume != NULL);
    if (rc || !r->lead)
        return rc ? rc : search_job_run(&(search_job){r, a, backend});
    fprintf(stderr,
            "search: %s mode, order %d, %lld images (%lld for weights, %lld for alpha), %d "
            "epochs on %s (%s)\n",
            ex_search_mode_name(r->cfg.mode), r->cfg.order,
            (long long)(ex_dataset_count(r->train_set) + ex_dataset_count(r->valid_set)),
            (long long)ex_dataset_count(r->train_set), (long long)ex_dataset_count(r->valid_set),
            r->epochs, ex_backend_get_caps(r->be)->name, ex_backend_get_caps(r->be)->device);
    search_job job = {r, a, backend};
    return r->live ? cli_live_run(r->live, search_job_run, &job) : search_job_run(&job);
}

int cli_search(const cli_global *g, int argc, char **argv)
{
    search_args a = {.out = "run", .profile_every = 50};
    int rc = parse_args(&a, argc, argv);
    if (rc)
        return rc < 0 ? CLI_EXIT_OK : rc;
    search_run r = {0};
    if (a.resume)
        rc = recall_args(&r, &a, g, argc, argv);
    else if (!(r.record = run_record_new(g, argc, argv)))
        rc = cli_fail("search", "out of memory");
    if (!rc)
        rc = run_search(&r, &a, g);
    free_run(&r);
    return rc;
}
