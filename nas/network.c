/* The derived network object: a training stage and an evaluation stage in one plan, or
 * for inference (ex_network_open) the evaluation stage alone. */
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/abi.h"
#include "core/clock.h"
#include "core/engine.h"
#include "core/fileio.h"
#include "exapt/safetensors.h"
#include "nas/derived.h"
#include "nas/export.h"
#include "nas/quant.h"
#include "nas/store.h"
#include "nas/supernet.h"

struct ex_network {
    ex_network_config cfg;
    ex_genotype genotype;
    ex_backend *be;
    ex_ctx *ctx;
    ex_plan *plan;
    nas_net net;
    ex_tensor **mom;
    ex_tensor *x, *y, *lr, *counter, *xe, *ye;
    ex_tensor *loss, *acc, *loss_e, *acc_e, *logits_e;
    int32_t *no_labels; /* eval_chunk zeros: ex_network_predict's labels */
    float drop_prob;
    bool inference;              /* only the evaluation stage: opened from a file */
    const ex_safetensors *qfile; /* int8 weights being built from (NULL: f32) */
    bool int8;
    nas_qbuild qdata; /* the int8 pass's weights, written once planned */
    int eval_stage;
    int64_t steps_done;
    char msg[512];
};

/* This library's defaults, all fields. */
static void network_defaults(ex_network_config *c)
{
    memset(c, 0, sizeof *c);
    c->size = sizeof *c;
    c->in_channels = 3;
    c->height = c->width = 32;
    c->classes = 10;
    c->batch = 96;
    c->channels = 36;
    c->layers = 20;
    c->stem_multiplier = 3;
    c->auxiliary = true;
    c->aux_weight = 0.4f;
    c->momentum = 0.9f;
    c->weight_decay = 3e-4f;
    c->grad_clip = 5.0f;
    c->seed = 0;
}

void ex_network_config_init(ex_network_config *c, size_t size)
{
    if (!c)
        return;
    ex_network_config d;
    network_defaults(&d);
    ex__give_config(c, size, &d, sizeof d);
}

static ex_status fail(ex_network *n, ex_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static ex_status fail(ex_network *n, ex_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(n->msg, sizeof n->msg, fmt, ap);
    va_end(ap);
    return st;
}

static int ranks(const ex_network *n)
{
    return n->cfg.comm ? n->cfg.comm->size : 1;
}

/* The average over the group of t (a gradient, or a figure to report); t alone. */
static ex_tensor *group_mean(ex_network *n, ex_tensor *t)
{
    return ranks(n) > 1 ? ex_allreduce(n->ctx, t, 1.0f / (float)ranks(n)) : t;
}

static void train_step(ex_network *n)
{
    ex_ctx *ctx = n->ctx;
    ex_tensor *aux = NULL;
    n->net.train = true;
    ex_tensor *logits = nas_derived_forward(&n->net, &n->genotype, &n->cfg, n->x, n->counter,
                                            1.0f - n->drop_prob, &aux);
    n->net.built = true;
    n->mom = nas_net_momentum(&n->net);
    ex_tensor *loss = ex_cross_entropy(ctx, logits, n->y);
    /* the group's mean loss and mean count of correct answers */
    n->loss = ex_keep(ctx, group_mean(n, loss));
    n->acc = ex_keep(ctx, group_mean(n, ex_accuracy(ctx, logits, n->y)));
    float ls = n->cfg.label_smoothing;
    ex_tensor *total = ls > 0.0f ? ex_cross_entropy_smoothed(ctx, logits, n->y, ls) : loss;
    if (aux)
        total =
            ex_axpy(ctx, n->cfg.aux_weight, ex_cross_entropy_smoothed(ctx, aux, n->y, ls), total);
    int count = n->net.nparams;
    ex_tensor **w = calloc((size_t)count + 1, sizeof *w),
              **g = calloc((size_t)count + 1, sizeof *g),
              **live = calloc((size_t)count + 1, sizeof *live);
    if (!w || !g || !live || !n->mom) {
        ex_ctx_set_error(ctx, EX_ERR_NOMEM, "network: out of host memory");
    } else {
        for (int i = 0; i < count; i++)
            w[i] = n->net.params[i].t;
        ex_graph_gradients(ctx, total, count, w, g);
        if (ranks(n) > 1) /* in buckets, last parameter first */
            ex__allreduce_buckets(ctx, count, g, 1.0f / (float)ranks(n));
        int nl = 0;
        for (int i = 0; i < count; i++)
            if (g[i])
                live[nl++] = g[i];
        ex_tensor *norm = nl ? ex_grad_norm(ctx, nl, live) : NULL;
        for (int i = 0; i < count; i++)
            if (g[i])
                ex_sgd_clip(ctx, w[i], g[i], n->mom[i], n->lr, norm, n->cfg.grad_clip,
                            n->cfg.momentum, n->cfg.weight_decay, false);
    }
    free(w);
    free(g);
    free(live);
}

static ex_status build(ex_network *n)
{
    ex_ctx *ctx = n->ctx = ex_ctx_new();
    if (!ctx)
        return fail(n, EX_ERR_NOMEM, "network: out of host memory");
    const ex_network_config *c = &n->cfg;
    /* each rank its own drop-path masks (the only random draws) */
    int rank = c->comm ? c->comm->rank : 0;
    ex_ctx_set_seed(ctx, c->seed + 0x9E3779B97F4A7C15ull * (uint64_t)rank);
    ex_ctx_set_ranks(ctx, ranks(n));
    int64_t local = c->batch / ranks(n);
    int64_t xs[4] = {local, c->in_channels, c->height, c->width}, ys = local, one = 1, two = 2,
            eb = c->eval_chunk;
    int64_t xes[4] = {eb, c->in_channels, c->height, c->width};
    n->xe = ex_input(ctx, EX_F32, 4, xes, "eval_x");
    n->ye = ex_input(ctx, EX_I32, 1, &eb, "eval_y");
    nas_net_init(&n->net, ctx);
    if (!n->inference) {
        n->x = ex_input(ctx, EX_F32, 4, xs, "x");
        n->y = ex_input(ctx, EX_I32, 1, &ys, "y");
        n->lr = ex_input(ctx, EX_F32, 1, &one, "lr");
        n->counter = ex_input(ctx, EX_I32, 1, &two, "counter");
        train_step(n);
        ex_ctx_begin_stage(ctx);
        nas_net_rebuild(&n->net, NULL);
        n->eval_stage = 1;
    }
    n->net.train = false;
    ex_tensor *logits =
        n->int8 ? nas_quant_forward(ctx, n->qfile, &n->genotype, c, n->xe, &n->qdata)
                : nas_derived_forward(&n->net, &n->genotype, c, n->xe, n->counter, 1.0f, NULL);
    n->net.built = true;
    n->logits_e = ex_keep(ctx, logits);
    n->loss_e = ex_keep(ctx, ex_cross_entropy(ctx, logits, n->ye));
    n->acc_e = ex_keep(ctx, ex_accuracy(ctx, logits, n->ye));
    ex_status st = ex_graph_plan(ctx, n->be, NULL, &n->plan);
    if (st != EX_OK)
        return fail(n, st, "network: %s", ex_ctx_error(ctx));
    if (c->comm && (st = ex_plan_set_comm(n->plan, c->comm)) != EX_OK)
        return fail(n, st, "network: %s", ex_plan_error(n->plan));
    return EX_OK;
}

static ex_status zero_momentum(ex_network *n)
{
    for (int i = 0; i < n->net.nparams; i++) {
        size_t count = (size_t)ex_tensor_numel(n->mom[i]);
        float *z = calloc(count, sizeof *z);
        ex_status st = z ? ex_plan_write(n->plan, n->mom[i], z, count * sizeof *z) : EX_ERR_NOMEM;
        free(z);
        if (st != EX_OK)
            return fail(n, st, "network: %s", ex_plan_error(n->plan));
    }
    return EX_OK;
}

static void teardown(ex_network *n)
{
    ex_plan_free(n->plan);
    nas_net_free(&n->net);
    nas_qbuild_free(&n->qdata);
    free(n->mom);
    ex_ctx_free(n->ctx);
    n->plan = NULL;
    n->mom = NULL;
    n->ctx = NULL;
}

/** eval_chunk's default: see its documentation in exapt/network.h. */
static int auto_chunk(ex_backend *be, int eval_batch)
{
    const ex_backend_caps *caps = ex_backend_get_caps(be);
    if (strncmp(caps->name, "cpu", 3) != 0)
        return eval_batch;
    int most = 2 * (caps->threads > 0 ? caps->threads : 1),
        d = most < eval_batch ? most : eval_batch;
    while (eval_batch % d)
        d--;
    return d;
}

/* A network of genotype g and the caller's configuration c on be, weights from the seed,
 * or int8 from the quantized weights qfile. */
static ex_status create(const ex_genotype *g, const ex_network_config *caller, ex_backend *be,
                        bool inference, const ex_safetensors *qfile, ex_network **out, char *msg,
                        size_t msg_len)
{
    if (!out || !g || !caller || !be) {
        if (msg && msg_len)
            snprintf(msg, msg_len, "network: NULL argument");
        return EX_ERR_ARG;
    }
    *out = NULL;
    ex_network_config cfg, *c = &cfg;
    ex_network_config_default(c);
    ex_status adopted = ex__adopt_config(c, sizeof *c, caller, "network", msg, msg_len);
    if (adopted != EX_OK)
        return adopted;
    if (c->batch < 2 || c->channels < 2 || c->channels % 2 || c->layers < 1 || c->classes < 2 ||
        c->stem_multiplier < 1 || g->steps < 1 || g->steps > EX_MAX_STEPS ||
        !(c->label_smoothing >= 0.0f && c->label_smoothing < 1.0f) ||
        (c->comm && (!ex_comm_valid(c->comm, NULL, 0) || c->batch % c->comm->size))) {
        if (msg && msg_len)
            snprintf(msg, msg_len,
                     "network: bad configuration (batch, channels, layers, "
                     "classes, genotype steps, label smoothing, or a communicator whose "
                     "size does not divide batch)");
        return EX_ERR_ARG;
    }
    if (c->eval_batch <= 0)
        c->eval_batch = c->batch;
    if (c->eval_chunk <= 0)
        c->eval_chunk = auto_chunk(be, c->eval_batch);
    if (c->eval_batch % c->eval_chunk) {
        if (msg && msg_len)
            snprintf(msg, msg_len, "network: eval_chunk %d does not divide eval_batch %d",
                     c->eval_chunk, c->eval_batch);
        return EX_ERR_ARG;
    }
    ex_network *n = calloc(1, sizeof *n);
    if (!n)
        return EX_ERR_NOMEM;
    n->cfg = *c;
    n->genotype = *g;
    n->be = be;
    n->inference = inference;
    n->qfile = qfile;
    n->int8 = qfile != NULL;
    ex_status st = build(n);
    n->qfile = NULL;
    if (st == EX_OK && n->int8 && (st = nas_qbuild_write(&n->qdata, n->plan)) != EX_OK)
        fail(n, st, "network: %s", ex_plan_error(n->plan));
    if (st == EX_OK && (st = nas_net_initialise(&n->net, n->plan, c->seed)) != EX_OK)
        fail(n, st, "network: %s", ex_plan_error(n->plan));
    if (st == EX_OK && !inference)
        st = zero_momentum(n);
    if (st != EX_OK) {
        if (msg && msg_len)
            snprintf(msg, msg_len, "%s", n->msg);
        ex_network_free(n);
        return st;
    }
    *out = n;
    return EX_OK;
}

ex_status ex_network_new(const ex_genotype *g, const ex_network_config *c, ex_backend *be,
                         ex_network **out, char *msg, size_t msg_len)
{
    return create(g, c, be, false, NULL, out, msg, msg_len);
}

void ex_network_free(ex_network *n)
{
    if (!n)
        return;
    teardown(n);
    free(n->no_labels);
    free(n);
}

/* Every tensor the state of training consists of, in build order. */
static nas_entry *entries(ex_network *n, bool optimizer, int *count)
{
    int total = n->net.nparams * 2 + n->net.nstates;
    nas_entry *e = malloc((size_t)total * sizeof *e + 1);
    if (!e)
        return NULL;
    int c = nas_net_entries(&n->net, e);
    for (int i = 0; optimizer && i < n->net.nparams; i++)
        e[c++] = (nas_entry){ex_tensor_name(n->mom[i]), n->mom[i]};
    *count = c;
    return e;
}

ex_status ex_network_set_drop_path(ex_network *n, float prob)
{
    if (!n)
        return EX_ERR_ARG;
    if (!(prob >= 0.0f && prob < 1.0f))
        return fail(n, EX_ERR_ARG, "network: drop-path probability %g outside [0, 1)",
                    (double)prob);
    if (prob == n->drop_prob)
        return EX_OK;
    if (n->inference)
        return fail(n, EX_ERR_STATE, "network: opened for inference, it has no training pass");
    /* the keep probability is part of the graph: carry the state across a rebuild */
    int count;
    nas_entry *e = entries(n, true, &count);
    size_t bytes = 0;
    for (int i = 0; e && i < count; i++)
        bytes += (size_t)ex_tensor_numel(e[i].t) * 4;
    char *saved = e ? malloc(bytes + 1) : NULL;
    if (!saved) {
        free(e);
        return fail(n, EX_ERR_NOMEM, "network: out of host memory");
    }
    ex_status st = EX_OK;
    size_t at = 0;
    for (int i = 0; st == EX_OK && i < count; i++) {
        size_t sz = (size_t)ex_tensor_numel(e[i].t) * 4;
        st = ex_plan_read(n->plan, e[i].t, saved + at, sz);
        at += sz;
    }
    free(e);
    if (st != EX_OK) {
        free(saved);
        return fail(n, st, "network: %s", ex_plan_error(n->plan));
    }
    float old = n->drop_prob;
    teardown(n);
    n->drop_prob = prob;
    st = build(n);
    if (st != EX_OK) {
        /* put the old graph back so the network stays usable */
        teardown(n);
        n->drop_prob = old;
        if (build(n) != EX_OK) {
            free(saved);
            return st;
        }
    }
    e = entries(n, true, &count);
    at = 0;
    for (int i = 0; e && i < count; i++) {
        size_t sz = (size_t)ex_tensor_numel(e[i].t) * 4;
        ex_status wst = ex_plan_write(n->plan, e[i].t, saved + at, sz);
        if (wst != EX_OK && st == EX_OK)
            st = fail(n, wst, "network: %s", ex_plan_error(n->plan));
        at += sz;
    }
    if (!e && st == EX_OK)
        st = fail(n, EX_ERR_NOMEM, "network: out of host memory");
    free(e);
    free(saved);
    return st;
}

static ex_status write_batch(ex_network *n, ex_tensor *x, const float *xv, ex_tensor *y,
                             const int32_t *yv)
{
    return nas_write_batch(n->plan, x, xv, y, yv, n->cfg.classes, "network", n->msg, sizeof n->msg);
}

static ex_status read2(ex_network *n, ex_tensor *a, float *va, ex_tensor *b, float *vb)
{
    ex_status st = ex_plan_read(n->plan, a, va, sizeof *va);
    if (st == EX_OK)
        st = ex_plan_read(n->plan, b, vb, sizeof *vb);
    return st == EX_OK ? EX_OK : fail(n, st, "network: %s", ex_plan_error(n->plan));
}

ex_status ex_network_step(ex_network *n, const float *x, const int32_t *y, float lr,
                          ex_network_stats *out)
{
    if (!n)
        return EX_ERR_ARG;
    if (n->inference)
        return fail(n, EX_ERR_STATE, "network: opened for inference, it has no training pass");
    double t0 = ex__clock_ms();
    ex_status st = write_batch(n, n->x, x, n->y, y);
    int32_t counter[2] = {(int32_t)n->steps_done, (int32_t)(n->steps_done >> 31)};
    if (st == EX_OK &&
        ((st = ex_plan_write(n->plan, n->lr, &lr, sizeof lr)) != EX_OK ||
         (st = ex_plan_write(n->plan, n->counter, counter, sizeof counter)) != EX_OK ||
         (st = ex_plan_run_stage(n->plan, 0)) != EX_OK))
        return fail(n, st, "network: %s", ex_plan_error(n->plan));
    if (st != EX_OK)
        return st;
    n->steps_done++;
    float loss = 0, correct = 0;
    st = read2(n, n->loss, &loss, n->acc, &correct);
    if (st == EX_OK && out)
        *out = (ex_network_stats){loss, correct * (float)ranks(n) / (float)n->cfg.batch,
                                  ex__clock_ms() - t0};
    return st;
}

/* Runs the evaluation pass on eval_chunk images x with labels y. */
static ex_status eval_pass(ex_network *n, const float *x, const int32_t *y)
{
    ex_status st = write_batch(n, n->xe, x, n->ye, y);
    if (st == EX_OK && (st = ex_plan_run_stage(n->plan, n->eval_stage)) != EX_OK)
        return fail(n, st, "network: %s", ex_plan_error(n->plan));
    return st;
}

/* Chunk i's first image in x. */
static const float *chunk_images(const ex_network *n, const float *x, int i)
{
    const ex_network_config *c = &n->cfg;
    return x + (size_t)i * (size_t)c->eval_chunk * (size_t)c->in_channels * (size_t)c->height *
                   (size_t)c->width;
}

ex_status ex_network_eval(ex_network *n, const float *x, const int32_t *y, float *loss,
                          int *correct)
{
    if (!n)
        return EX_ERR_ARG;
    if (!x || !y)
        return fail(n, EX_ERR_ARG, "network: eval needs images and labels");
    int chunks = n->cfg.eval_batch / n->cfg.eval_chunk;
    double loss_sum = 0;
    int64_t right = 0;
    ex_status st = EX_OK;
    for (int i = 0; st == EX_OK && i < chunks; i++) {
        float l = 0, c = 0;
        st = eval_pass(n, chunk_images(n, x, i), y + (size_t)i * (size_t)n->cfg.eval_chunk);
        if (st == EX_OK && (st = read2(n, n->loss_e, &l, n->acc_e, &c)) == EX_OK) {
            loss_sum += l;
            right += (int64_t)c;
        }
    }
    /* one chunk gives the pass's own f32 mean, bit for bit */
    if (st == EX_OK && loss)
        *loss = chunks == 1 ? (float)loss_sum : (float)(loss_sum / chunks);
    if (st == EX_OK && correct)
        *correct = (int)right;
    return st;
}

ex_status ex_network_predict(ex_network *n, const float *x, float *logits)
{
    if (!n)
        return EX_ERR_ARG;
    if (!x || !logits)
        return fail(n, EX_ERR_ARG, "network: predict needs images and room for the logits");
    int64_t eb = n->cfg.eval_chunk;
    if (!n->no_labels && !(n->no_labels = calloc((size_t)eb, sizeof *n->no_labels)))
        return fail(n, EX_ERR_NOMEM, "network: out of host memory");
    size_t bytes = (size_t)ex_tensor_numel(n->logits_e) * sizeof *logits;
    ex_status st = EX_OK;
    for (int i = 0; st == EX_OK && i < n->cfg.eval_batch / n->cfg.eval_chunk; i++) {
        st = eval_pass(n, chunk_images(n, x, i), n->no_labels);
        if (st == EX_OK &&
            (st = ex_plan_read(n->plan, n->logits_e, (char *)logits + i * bytes, bytes)) != EX_OK)
            return fail(n, st, "network: %s", ex_plan_error(n->plan));
    }
    return st;
}

/* The architecture and input normalization as the "network" metadata's JSON (malloc'ed). */
static char *architecture_json(const ex_network_config *c)
{
    json_t *j = json_pack("{s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:b}", "in_channels", c->in_channels,
                          "height", c->height, "width", c->width, "classes", c->classes, "channels",
                          c->channels, "layers", c->layers, "stem_multiplier", c->stem_multiplier,
                          "auxiliary", c->auxiliary);
    if (j && c->input.enabled) {
        json_t *mean = json_array(), *std = json_array();
        for (int i = 0; i < c->in_channels && i < EX_DATA_MAX_CHANNELS; i++) {
            json_array_append_new(mean, json_real(c->input.mean[i]));
            json_array_append_new(std, json_real(c->input.std[i]));
        }
        json_object_set_new(j, "mean", mean);
        json_object_set_new(j, "std", std);
    }
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    return text;
}

static ex_status save(ex_network *n, const char *path, bool optimizer, const char *user)
{
    if (!n || !path)
        return EX_ERR_ARG;
    if (optimizer && n->inference)
        return fail(n, EX_ERR_STATE, "network: opened for inference, it has no optimizer state");
    if (n->int8)
        return fail(n, EX_ERR_STATE, "network: int8; its weights are the file it was opened from");
    int count = 0;
    nas_entry *e = entries(n, optimizer, &count);
    char *arch = architecture_json(&n->cfg);
    if (!e || !arch) {
        free(e);
        free(arch);
        return fail(n, EX_ERR_NOMEM, "network: out of host memory");
    }
    char genotype[2048], steps[32];
    ex_genotype_format(&n->genotype, genotype, sizeof genotype);
    snprintf(steps, sizeof steps, "%lld", (long long)n->steps_done);
    ex_st_meta meta[5] = {{"format", "exapt-network"},
                          {"genotype", genotype},
                          {"network", arch},
                          {"steps", steps},
                          {"user", user ? user : ""}};
    ex_status st = nas_store_save(n->plan, e, count, n->steps_done, meta, user ? 5 : 4, path,
                                  n->msg, sizeof n->msg);
    free(e);
    free(arch);
    return st;
}

ex_status ex_network_save(ex_network *n, const char *path, bool optimizer)
{
    return save(n, path, optimizer, NULL);
}

ex_status ex_network_checkpoint(ex_network *n, const char *path, const char *user_json)
{
    return save(n, path, true, user_json);
}

ex_status ex_network_load(ex_network *n, const char *path, bool optimizer)
{
    if (!n || !path)
        return EX_ERR_ARG;
    if (n->int8)
        return fail(n, EX_ERR_STATE, "network: int8; open the other weights with ex_network_open");
    int count;
    nas_entry *e = entries(n, optimizer, &count);
    if (!e)
        return fail(n, EX_ERR_NOMEM, "network: out of host memory");
    ex_status st = nas_store_load(n->plan, e, count, path, n->msg, sizeof n->msg);
    free(e);
    /* a checkpoint resumes the step count too: it drives drop path's random stream */
    if (st == EX_OK && optimizer)
        st = nas_store_steps(path, &n->steps_done, n->msg, sizeof n->msg);
    return st;
}

/* The configuration the "network" metadata j records, over c's defaults. */
static bool parse_architecture(json_t *j, ex_network_config *c)
{
    int aux = 0;
    if (!j || json_unpack(j, "{s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:b}", "in_channels", &c->in_channels,
                          "height", &c->height, "width", &c->width, "classes", &c->classes,
                          "channels", &c->channels, "layers", &c->layers, "stem_multiplier",
                          &c->stem_multiplier, "auxiliary", &aux))
        return false;
    c->auxiliary = aux;
    /* the bounds of exapt train's options: a file cannot ask for more */
    if (c->in_channels < 1 || c->in_channels > EX_DATA_MAX_CHANNELS || c->height < 1 ||
        c->width < 1 || (int64_t)c->height * c->width > (1 << 24) || c->classes < 2 ||
        c->classes > 65536 || c->channels < 2 || c->channels > 4096 || c->channels % 2 ||
        c->layers < 1 || c->layers > 1000 || c->stem_multiplier < 1 || c->stem_multiplier > 64)
        return false;
    json_t *mean = json_object_get(j, "mean"), *std = json_object_get(j, "std");
    if (!mean && !std)
        return true;
    if (json_array_size(mean) != (size_t)c->in_channels ||
        json_array_size(std) != (size_t)c->in_channels)
        return false;
    for (int i = 0; i < c->in_channels; i++) {
        c->input.mean[i] = (float)json_number_value(json_array_get(mean, (size_t)i));
        c->input.std[i] = (float)json_number_value(json_array_get(std, (size_t)i));
        if (!json_is_number(json_array_get(mean, (size_t)i)) || !isfinite(c->input.mean[i]) ||
            !(c->input.std[i] > 0.0f) || !isfinite(c->input.std[i]))
            return false;
    }
    c->input.enabled = true;
    return true;
}

/* Whether f holds a tensor called name of dtype dt and the given shape. */
static bool has_tensor(const ex_safetensors *f, const char *name, ex_st_dtype dt, int ndim,
                       const int64_t *shape)
{
    ex_st_info info;
    if (ex_safetensors_info(f, name, &info, NULL, 0) != EX_OK || info.dtype != dt ||
        info.ndim != ndim)
        return false;
    for (int d = 0; d < ndim; d++)
        if (info.shape[d] != shape[d])
            return false;
    return true;
}

/* The first and the last layer's weights are those of the architecture c records: a file
 * whose metadata claims another network is refused before any is built. */
static bool ends_fit(const ex_safetensors *f, const ex_genotype *g, const ex_network_config *c)
{
    int64_t stem[4] = {(int64_t)c->stem_multiplier * c->channels, c->in_channels, 3, 3};
    int64_t cc = c->channels, out = 0;
    for (int i = 0; i < c->layers; i++) {
        bool red = nas_is_reduction(i, c->layers);
        cc *= red ? 2 : 1;
        out = cc * (red ? g->n_reduce_concat : g->n_normal_concat);
    }
    int64_t cls[2] = {c->classes, out};
    /* an int8 file holds the weights as int8 */
    ex_st_dtype dt = ex_safetensors_metadata(f, NAS_QUANT_META) ? EX_ST_I8 : EX_ST_F32;
    return has_tensor(f, "stem.0.weight", dt, 4, stem) &&
           has_tensor(f, "classifier.weight", dt, 2, cls);
}

/* The genotype and configuration that the file f (at path) records. */
static ex_status recorded(ex_safetensors *f, const char *path, ex_genotype *g, ex_network_config *c,
                          char *msg, size_t msg_len)
{
    const char *format = ex_safetensors_metadata(f, "format");
    const char *genotype = ex_safetensors_metadata(f, "genotype");
    const char *arch = ex_safetensors_metadata(f, "network");
    if (!format || strcmp(format, "exapt-network") || !genotype)
        return ex__msg(msg, msg_len, EX_ERR_FORMAT,
                       "%s: not the weights of a network exapt trained (no exapt-network "
                       "format and genotype in its metadata)",
                       path);
    if (!arch)
        return ex__msg(msg, msg_len, EX_ERR_FORMAT,
                       "%s: its architecture is not recorded (weights saved by exapt before "
                       "0.2.0); train it again",
                       path);
    char gm[256];
    if (ex_genotype_parse(genotype, strlen(genotype), g, gm, sizeof gm) != EX_OK)
        return ex__msg(msg, msg_len, EX_ERR_FORMAT, "%s: its genotype: %s", path, gm);
    json_t *j = json_loads(arch, 0, NULL);
    bool ok = parse_architecture(j, c);
    json_decref(j);
    if (!ok)
        return ex__msg(msg, msg_len, EX_ERR_FORMAT,
                       "%s: its \"network\" metadata is not a valid architecture", path);
    if (!ends_fit(f, g, c))
        return ex__msg(msg, msg_len, EX_ERR_FORMAT,
                       "%s: its stem or classifier weights do not fit the architecture its "
                       "metadata records",
                       path);
    return EX_OK;
}

ex_status ex_network_open(const char *path, ex_backend *be, int batch, ex_network **out, char *msg,
                          size_t msg_len)
{
    if (out)
        *out = NULL;
    if (!path || !be || !out)
        return ex__msg(msg, msg_len, EX_ERR_ARG, "ex_network_open: NULL argument");
    if (batch < 1)
        return ex__msg(msg, msg_len, EX_ERR_ARG, "ex_network_open: batch %d below 1", batch);
    ex_safetensors *f = NULL;
    ex_status st = ex_safetensors_open(path, &f, msg, msg_len);
    ex_genotype g;
    ex_network_config c;
    ex_network_config_default(&c);
    if (st == EX_OK)
        st = recorded(f, path, &g, &c, msg, msg_len);
    bool int8 = st == EX_OK && ex_safetensors_metadata(f, NAS_QUANT_META);
    if (st != EX_OK) {
        ex_safetensors_close(f);
        return st;
    }
    c.batch = batch < 2 ? 2 : batch; /* the training batch: not planned */
    c.eval_batch = batch;
    ex_network *n = NULL;
    st = create(&g, &c, be, true, int8 ? f : NULL, &n, msg, msg_len);
    ex_safetensors_close(f);
    if (st != EX_OK)
        return st;
    if (!int8 && (st = ex_network_load(n, path, false)) != EX_OK) {
        ex__msg(msg, msg_len, st == EX_ERR_NOMEM ? st : EX_ERR_FORMAT, "%s", n->msg);
        ex_network_free(n);
        return st == EX_ERR_NOMEM ? st : EX_ERR_FORMAT;
    }
    *out = n;
    return EX_OK;
}

void ex_network_get_config(const ex_network *n, ex_network_config *c)
{
    if (n && c)
        ex__give_config(c, c->size, &n->cfg, sizeof n->cfg);
}

/* Writes count images of pixels, normalized as the network's input says and padded with
 * zeros to the evaluation batch, into x. */
static void normalized_batch(const ex_network *n, const float *pixels, int count, float *x)
{
    const ex_network_config *c = &n->cfg;
    size_t plane = (size_t)c->height * (size_t)c->width, img = plane * (size_t)c->in_channels;
    memset(x, 0, img * (size_t)c->eval_batch * sizeof *x);
    for (size_t i = 0; i < (size_t)count * img; i++) {
        int ch = (int)(i / plane % (size_t)c->in_channels);
        x[i] = c->input.enabled ? (pixels[i] - c->input.mean[ch]) / c->input.std[ch] : pixels[i];
    }
}

ex_status ex_network_classify(ex_network *n, const float *pixels, int count, float *probs)
{
    if (!n)
        return EX_ERR_ARG;
    const ex_network_config *c = &n->cfg;
    if (!pixels || !probs || count < 1 || count > c->eval_batch)
        return fail(n, EX_ERR_ARG,
                    "network: classify takes 1 to %d images, pixels and room for the "
                    "probabilities (%d images given)",
                    c->eval_batch, count);
    size_t img = (size_t)c->in_channels * (size_t)c->height * (size_t)c->width;
    float *x = malloc(img * (size_t)c->eval_batch * sizeof *x),
          *logits = malloc((size_t)c->eval_batch * (size_t)c->classes * sizeof *logits);
    ex_status st = x && logits ? EX_OK : fail(n, EX_ERR_NOMEM, "network: out of host memory");
    if (st == EX_OK) {
        normalized_batch(n, pixels, count, x);
        st = ex_network_predict(n, x, logits);
    }
    for (int i = 0; st == EX_OK && i < count; i++) {
        const float *r = logits + (size_t)i * (size_t)c->classes;
        float *p = probs + (size_t)i * (size_t)c->classes;
        float top = r[0];
        for (int k = 1; k < c->classes; k++)
            top = r[k] > top ? r[k] : top;
        double sum = 0;
        for (int k = 0; k < c->classes; k++)
            sum += exp((double)r[k] - (double)top);
        for (int k = 0; k < c->classes; k++)
            p[k] = (float)(exp((double)r[k] - (double)top) / sum);
    }
    free(x);
    free(logits);
    return st;
}

int64_t ex_network_param_count(const ex_network *n)
{
    int64_t total = 0;
    for (int i = 0; n && i < n->net.nparams; i++)
        total += ex_tensor_numel(n->net.params[i].t);
    return total;
}

struct ex_plan *ex_network_plan(ex_network *n)
{
    return n ? n->plan : NULL;
}

const char *ex_network_error(const ex_network *n)
{
    return n ? n->msg : "no network (NULL)";
}

const ex_genotype *nas_network_genotype(const ex_network *n)
{
    return &n->genotype;
}

const ex_network_config *nas_network_config(const ex_network *n)
{
    return &n->cfg;
}

float *nas_network_read(ex_network *n, const char *name, int64_t *count)
{
    ex_tensor *t = NULL;
    for (int i = 0; !t && i < n->net.nparams; i++)
        if (!strcmp(n->net.params[i].name, name))
            t = n->net.params[i].t;
    for (int i = 0; !t && i < n->net.nstates; i++)
        if (!strcmp(n->net.states[i].name, name))
            t = n->net.states[i].t;
    if (!t) {
        fail(n, EX_ERR_STATE, "network: no tensor %s", name);
        return NULL;
    }
    *count = ex_tensor_numel(t);
    float *v = malloc((size_t)*count * sizeof *v + 1);
    ex_status st = v ? ex_plan_read(n->plan, t, v, (size_t)*count * sizeof *v) : EX_ERR_NOMEM;
    if (st != EX_OK) {
        free(v);
        fail(n, st, "network: reading %s: %s", name,
             st == EX_ERR_NOMEM ? "out of host memory" : ex_plan_error(n->plan));
        return NULL;
    }
    return v;
}

ex_status nas_network_fail(ex_network *n, ex_status st, const char *what)
{
    return fail(n, st, "%s", what);
}

char *nas_network_architecture(const ex_network *n)
{
    return architecture_json(&n->cfg);
}

ex_backend *nas_network_backend(const ex_network *n)
{
    return n->be;
}

bool nas_network_is_int8(const ex_network *n)
{
    return n->int8;
}
