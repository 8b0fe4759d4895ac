/* The search: the supernet's architecture step and weight step as one planned stage,
 * and an evaluation pass as a second stage sharing the parameters. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/abi.h"
#include "core/clock.h"
#include "core/engine.h"
#include "core/philox.h"
#include "nas/faults.h"
#include "nas/store.h"
#include "nas/supernet.h"

struct ex_search {
    ex_search_config cfg;
    ex_ctx *ctx;
    ex_backend *be;
    ex_plan *plan;
    nas_net net;
    int edges;
    ex_tensor *alpha[2], *adam_m[2], *adam_v[2];
    ex_tensor **mom; /* SGD momentum per weight */
    ex_tensor *xt, *yt, *xv, *yv, *xe, *ye;
    ex_tensor *lr, *ahyper, *counter, *tau, *ones;
    ex_tensor *loss_t, *acc_t, *loss_v, *acc_v, *loss_e, *acc_e;
    ex_tensor *report, *report_e; /* the step's and the evaluation's figures, packed so
                                     one transfer reads them */
    ex_tensor *mask[2];           /* masks of the weight step, kept */
    ex_tensor *gnorm_w, *gnorm_a; /* gradient norms of the weights and alpha: finite or not */
    int64_t steps_done;
    int nonfinite_run;     /* steps skipped in a row */
    ex_search_setup setup; /* what ex_search_new spent, by phase */
    char msg[512];
};

static const ex_cand darts_space[] = {
    EX_CAND_NONE,         EX_CAND_MAX_POOL_3X3, EX_CAND_AVG_POOL_3X3, EX_CAND_SKIP_CONNECT,
    EX_CAND_SEP_CONV_3X3, EX_CAND_SEP_CONV_5X5, EX_CAND_DIL_CONV_3X3, EX_CAND_DIL_CONV_5X5,
};

/* This library's defaults, all fields. */
static void search_defaults(ex_search_config *c)
{
    memset(c, 0, sizeof *c);
    c->size = sizeof *c;
    c->in_channels = 3;
    c->height = c->width = 32;
    c->classes = 10;
    c->batch = 64;
    c->channels = 16;
    c->layers = 8;
    c->steps = 4;
    c->multiplier = 4;
    c->stem_multiplier = 3;
    c->ncand = (int)(sizeof darts_space / sizeof darts_space[0]);
    memcpy(c->cand, darts_space, sizeof darts_space);
    c->mode = EX_SEARCH_DARTS;
    c->order = 1;
    c->momentum = 0.9f;
    c->weight_decay = 3e-4f;
    c->grad_clip = 5.0f;
    c->arch_lr = 3e-4f;
    c->arch_beta1 = 0.5f;
    c->arch_beta2 = 0.999f;
    c->arch_weight_decay = 1e-3f;
    c->tau_max = 10.0f;
    c->tau_min = 0.1f;
    c->topk_k = 3;
    c->topk_threshold = 0.0f;
    c->seed = 2;
    c->recompute = -1;
    c->nonfinite_limit = 3;
    c->max_param_free = -1;
    c->partial_channels = 1;
}

void ex_search_config_init(ex_search_config *c, size_t size)
{
    if (!c)
        return;
    ex_search_config d;
    search_defaults(&d);
    ex__give_config(c, size, &d, sizeof d);
}

const char *ex_search_mode_name(ex_search_mode m)
{
    switch (m) {
    case EX_SEARCH_DARTS: return "darts";
    case EX_SEARCH_GDAS: return "gdas";
    case EX_SEARCH_TOPK: return "topk";
    }
    return "?";
}

int ex_search_mode_parse(const char *name)
{
    for (int m = EX_SEARCH_DARTS; name && m <= EX_SEARCH_TOPK; m++)
        if (!strcmp(name, ex_search_mode_name((ex_search_mode)m)))
            return m;
    return -1;
}

static ex_status fail(ex_search *s, ex_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static ex_status fail(ex_search *s, ex_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->msg, sizeof s->msg, fmt, ap);
    va_end(ap);
    return st;
}

static ex_status check_config(const ex_search_config *c, char *msg, size_t len)
{
    const char *why = NULL;
    if (c->in_channels < 1 || c->height < 4 || c->width < 4 || c->classes < 2 || c->batch < 2)
        why = "input shape, classes (>= 2) or batch (>= 2)";
    else if (c->channels < 2 || c->channels % 2 || c->layers < 1 || c->stem_multiplier < 1)
        why = "channels (even, >= 2), layers or stem multiplier";
    else if (c->steps < 1 || c->steps > EX_MAX_STEPS || c->multiplier < 1 ||
             c->multiplier > c->steps)
        why = "steps (1 to 8) or multiplier (1 to steps)";
    else if (c->ncand < 2 || c->ncand > EX_MAX_CANDIDATES)
        why = "number of candidates (2 to 12)";
    else if (c->order != 1 && !(c->order == 2 && c->mode == EX_SEARCH_DARTS))
        why = "order (1, or 2 in darts mode)";
    else if ((unsigned)c->mode > EX_SEARCH_TOPK || c->topk_k < 1)
        why = "mode or top-k";
    else if (c->nonfinite_limit < 0)
        why = "nonfinite_limit (>= 0)";
    else if (c->recompute < -1 || c->recompute > 2)
        why = "recompute (-1, 0, 1 or 2)";
    else if (c->arch_warmup < 0 || c->max_param_free < -1)
        why = "arch_warmup (>= 0) or max_param_free (>= -1)";
    else if (c->partial_channels < 1 || c->channels % c->partial_channels)
        why = "partial_channels (>= 1, dividing channels)";
    else if (c->comm && !ex_comm_valid(c->comm, NULL, 0))
        why = "communicator (size >= 1, 0 <= rank < size, an allreduce_sum function)";
    else if (c->comm && (c->batch % c->comm->size || c->batch / c->comm->size < 1 ||
                         (c->comm->size > 1 && c->order != 1)))
        why = "batch (must divide by the communicator's size) or order (1 on several ranks)";
    for (int k = 0; !why && k < c->ncand; k++) {
        if ((unsigned)c->cand[k] >= EX_CAND_COUNT)
            why = "candidate operation";
        for (int j = 0; !why && j < k; j++)
            if (c->cand[j] == c->cand[k])
                why = "candidates (each at most once)";
    }
    if (!why)
        return EX_OK;
    if (msg && len)
        snprintf(msg, len, "search: bad configuration: %s", why);
    return EX_ERR_ARG;
}

/* ---- graph building ---- */

static int ranks(const ex_search *s)
{
    return s->cfg.comm ? s->cfg.comm->size : 1;
}

/* The gradients' average over the group (each rank's loss is the mean over its share), in
 * buckets, last parameter first (ex__allreduce_buckets). */
static void average(ex_search *s, int n, ex_tensor **g)
{
    if (ranks(s) > 1)
        ex__allreduce_buckets(s->ctx, n, g, 1.0f / (float)ranks(s));
}

/* Architecture weights and candidate masks of both cell kinds, as the mode draws them.
 * Evaluation draws no noise: gdas takes each edge's most likely candidate. */
static void arch_weights(ex_search *s, ex_tensor *w[2], ex_tensor *m[2], bool eval)
{
    for (int r = 0; r < 2; r++) {
        ex_tensor *a = s->alpha[r];
        if (s->cfg.mode == EX_SEARCH_DARTS) {
            w[r] = ex_softmax(s->ctx, a);
            m[r] = s->ones;
        } else if (s->cfg.mode == EX_SEARCH_GDAS) {
            w[r] = eval ? ex_hardmax_st(s->ctx, a)
                        : ex_gumbel_softmax(s->ctx, a, s->tau, s->counter, true);
            m[r] = w[r]; /* one-hot: only the chosen candidate runs */
        } else {
            w[r] = ex_softmax(s->ctx, a);
            m[r] = ex_topk_mask(s->ctx, w[r], s->cfg.topk_k, s->cfg.topk_threshold);
        }
    }
}

/* The first call builds and registers the weights; later calls rebuild the same network
 * (with substitute weights when given). */
static ex_tensor *forward(ex_search *s, ex_tensor *x, ex_tensor *const *subst, bool eval)
{
    ex_tensor *w[2], *m[2];
    arch_weights(s, w, m, eval);
    bool first = !s->net.built;
    if (!first)
        nas_net_rebuild(&s->net, subst);
    s->net.train = !eval;
    bool gated = s->cfg.mode != EX_SEARCH_DARTS;
    ex_tensor *logits = nas_supernet_forward(&s->net, &s->cfg, x, w, m, gated);
    if (first) {
        s->net.built = true;
        s->mom = nas_net_momentum(&s->net);
    }
    if (!eval) {
        s->mask[0] = m[0];
        s->mask[1] = m[1];
    }
    return logits;
}

static int nweights(const ex_search *s)
{
    return s->net.nparams;
}

static ex_tensor **weight_list(ex_search *s)
{
    ex_tensor **w = ex__malloc(s->ctx, (size_t)nweights(s) * sizeof *w);
    for (int i = 0; w && i < nweights(s); i++)
        w[i] = s->net.params[i].t;
    return w;
}

static ex_tensor *entropy_term(ex_search *s, ex_tensor *loss)
{
    if (s->cfg.entropy_weight <= 0.0f)
        return loss;
    ex_tensor *h =
        ex_add(s->ctx, ex_sum(s->ctx, ex_entropy(s->ctx, ex_softmax(s->ctx, s->alpha[0])), 3u),
               ex_sum(s->ctx, ex_entropy(s->ctx, ex_softmax(s->ctx, s->alpha[1])), 3u));
    int64_t one = 1;
    h = ex_reshape(s->ctx, h, 1, &one);
    return ex_add(s->ctx, loss, ex_scale(s->ctx, h, s->cfg.entropy_weight / (2.0f * s->edges)));
}

/* d alpha of the unrolled objective (DARTS's second-order step): the validation loss at
 * w' = w - lr (momentum buffer + dL_train/dw + wd w), minus lr times the finite-difference
 * Hessian-vector product at w +- 0.01 dw'/|dw'|. */
static void unrolled_alpha_grads(ex_search *s, ex_tensor *dalpha[2])
{
    ex_ctx *ctx = s->ctx;
    ex_tensor *lt = ex_cross_entropy(ctx, forward(s, s->xt, NULL, false), s->yt);
    int n = nweights(s); /* known once the first build has registered the weights */
    ex_tensor **w = weight_list(s), **g = ex__calloc(s->ctx, (size_t)n, sizeof *g),
              **wp = ex__calloc(s->ctx, (size_t)n, sizeof *wp),
              **wrt = ex__calloc(s->ctx, (size_t)n + 2, sizeof *wrt),
              **gv = ex__calloc(s->ctx, (size_t)n + 2, sizeof *gv),
              **wplus = ex__calloc(s->ctx, (size_t)n, sizeof *wplus),
              **wminus = ex__calloc(s->ctx, (size_t)n, sizeof *wminus);
    if (!w || !g || !wp || !wrt || !gv || !wplus || !wminus || !s->mom) {
        ex_ctx_set_error(ctx, EX_ERR_NOMEM, "search: out of host memory");
        goto out;
    }
    ex_graph_gradients(ctx, lt, n, w, g);
    for (int i = 0; i < n; i++) {
        ex_tensor *d = g[i] ? ex_axpy(ctx, s->cfg.momentum, s->mom[i], g[i])
                            : ex_scale(ctx, s->mom[i], s->cfg.momentum);
        d = ex_axpy(ctx, s->cfg.weight_decay, w[i], d);
        wp[i] = ex_sub(ctx, w[i], ex_mul(ctx, d, s->lr));
    }
    ex_tensor *logits = forward(s, s->xv, wp, false);
    s->loss_v = ex_cross_entropy(ctx, logits, s->yv);
    s->acc_v = ex_accuracy(ctx, logits, s->yv);
    wrt[0] = s->alpha[0];
    wrt[1] = s->alpha[1];
    memcpy(wrt + 2, wp, (size_t)n * sizeof *wp);
    ex_graph_gradients(ctx, entropy_term(s, s->loss_v), n + 2, wrt, gv);
    int live = 0;
    for (int i = 0; i < n; i++)
        if (gv[2 + i])
            wrt[live++] = gv[2 + i];
    ex_tensor *norm = ex_grad_norm(ctx, live, wrt);
    ex_tensor *norm6 = ex_scale(ctx, norm, 1e6f);
    for (int i = 0; i < n; i++) {
        /* 0.01 dw'/|dw'| through clip's max/(norm): scaled so the norm always exceeds
         * the cap, exact to 1e-12 relative for |dw'| > 1e-8 */
        ex_tensor *u =
            gv[2 + i] ? ex_clip(ctx, ex_scale(ctx, gv[2 + i], 1e6f), norm6, 0.01f) : NULL;
        wplus[i] = u ? ex_add(ctx, w[i], u) : w[i];
        wminus[i] = u ? ex_sub(ctx, w[i], u) : w[i];
    }
    ex_tensor *gp[2], *gn[2];
    ex_tensor *lp = ex_cross_entropy(ctx, forward(s, s->xt, wplus, false), s->yt);
    ex_graph_gradients(ctx, lp, 2, s->alpha, gp);
    ex_tensor *ln = ex_cross_entropy(ctx, forward(s, s->xt, wminus, false), s->yt);
    ex_graph_gradients(ctx, ln, 2, s->alpha, gn);
    for (int r = 0; r < 2; r++) {
        /* (gp - gn) / (2R) with R = 0.01 / |dw'|: times 50 |dw'| */
        ex_tensor *hv = ex_scale(ctx, ex_mul(ctx, ex_sub(ctx, gp[r], gn[r]), norm), 50.0f);
        dalpha[r] = ex_sub(ctx, gv[r], ex_mul(ctx, hv, s->lr));
    }
out:
    free(w);
    free(g);
    free(wp);
    free(wrt);
    free(gv);
    free(wplus);
    free(wminus);
}

static void arch_step(ex_search *s)
{
    ex_ctx *ctx = s->ctx;
    ex_tensor *dalpha[2] = {NULL, NULL};
    if (s->cfg.order == 2) {
        unrolled_alpha_grads(s, dalpha);
    } else {
        ex_tensor *logits = forward(s, s->xv, NULL, false);
        s->loss_v = ex_cross_entropy(ctx, logits, s->yv);
        s->acc_v = ex_accuracy(ctx, logits, s->yv);
        ex_graph_gradients(ctx, entropy_term(s, s->loss_v), 2, s->alpha, dalpha);
        average(s, 2, dalpha);
    }
    ex_tensor *live[2];
    int count = 0;
    for (int r = 0; r < 2; r++)
        if (dalpha[r])
            live[count++] = dalpha[r];
    s->gnorm_a = count ? ex_grad_norm(ctx, count, live) : NULL;
    for (int r = 0; r < 2; r++) {
        if (!dalpha[r])
            continue;
        ex_adam(ctx, s->alpha[r], dalpha[r], s->adam_m[r], s->adam_v[r], s->ahyper,
                s->cfg.arch_beta1, s->cfg.arch_beta2, 1e-8f, s->cfg.arch_weight_decay);
    }
}

static void weight_step(ex_search *s)
{
    ex_ctx *ctx = s->ctx;
    ex_tensor *logits = forward(s, s->xt, NULL, false);
    s->loss_t = ex_cross_entropy(ctx, logits, s->yt);
    s->acc_t = ex_accuracy(ctx, logits, s->yt);
    int n = nweights(s);
    ex_tensor **w = weight_list(s), **g = ex__calloc(s->ctx, (size_t)n, sizeof *g),
              **live = ex__calloc(s->ctx, (size_t)n, sizeof *live);
    if (!w || !g || !live || !s->mom) {
        ex_ctx_set_error(ctx, EX_ERR_NOMEM, "search: out of host memory");
    } else {
        ex_graph_gradients(ctx, s->loss_t, n, w, g);
        average(s, n, g);
        int count = 0;
        for (int i = 0; i < n; i++)
            if (g[i])
                live[count++] = g[i];
        ex_tensor *norm = count ? ex_grad_norm(ctx, count, live) : NULL;
        s->gnorm_w = norm;
        for (int i = 0; i < n; i++) {
            if (!g[i])
                continue; /* a weight the loss does not reach (a pruned-only path) */
            /* the clip folded into the update: one node per weight, g[i] left unscaled */
            ex_sgd_clip(ctx, w[i], g[i], s->mom[i], s->lr, norm, s->cfg.grad_clip, s->cfg.momentum,
                        s->cfg.weight_decay, false);
        }
    }
    free(w);
    free(g);
    free(live);
}

static void make_leaves(ex_search *s)
{
    ex_ctx *ctx = s->ctx;
    const ex_search_config *c = &s->cfg;
    int64_t local = c->batch / ranks(s);
    int64_t xs[4] = {local, c->in_channels, c->height, c->width}, ys = local;
    int64_t eb = c->eval_batch > 0 ? c->eval_batch : local;
    int64_t xes[4] = {eb, c->in_channels, c->height, c->width};
    int64_t one = 1, two = 2, es[2] = {s->edges, c->ncand};
    s->xt = ex_input(ctx, EX_F32, 4, xs, "train_x");
    s->yt = ex_input(ctx, EX_I32, 1, &ys, "train_y");
    s->xv = ex_input(ctx, EX_F32, 4, xs, "valid_x");
    s->yv = ex_input(ctx, EX_I32, 1, &ys, "valid_y");
    s->xe = ex_input(ctx, EX_F32, 4, xes, "eval_x");
    s->ye = ex_input(ctx, EX_I32, 1, &eb, "eval_y");
    s->lr = ex_input(ctx, EX_F32, 1, &one, "lr");
    s->ahyper = ex_input(ctx, EX_F32, 1, &two, "arch_hyper");
    s->counter = ex_input(ctx, EX_I32, 1, &two, "counter");
    s->tau = ex_input(ctx, EX_F32, 1, &one, "tau");
    s->ones = ex_input(ctx, EX_F32, 2, es, "ones");
    static const char *const names[2] = {"alphas_normal", "alphas_reduce"};
    for (int r = 0; r < 2; r++) {
        char n1[48], n2[48];
        s->alpha[r] = ex_param(ctx, 2, es, names[r]);
        snprintf(n1, sizeof n1, "%s.adam_m", names[r]);
        snprintf(n2, sizeof n2, "%s.adam_v", names[r]);
        s->adam_m[r] = ex_state(ctx, EX_F32, 2, es, n1);
        s->adam_v[r] = ex_state(ctx, EX_F32, 2, es, n2);
    }
}

/* One kept vector of n one-element figures. */
static ex_tensor *pack(ex_ctx *ctx, int n, ex_tensor *const *figures)
{
    int64_t len = n;
    ex_tensor *v = ex_keep(ctx, ex_fill(ctx, 1, &len, 0.0f));
    for (int i = 0; i < n; i++)
        ex_copy_into(ctx, figures[i], ex_slice(ctx, v, 0, i, 1));
    return v;
}

/* Stage 0: the architecture step, then the weight step. Stage 1: evaluation. */
static ex_status build(ex_search *s)
{
    ex_ctx *ctx = s->ctx;
    make_leaves(s);
    nas_net_init(&s->net, ctx);
    arch_step(s);
    weight_step(s);
    for (int r = 0; r < 2; r++)
        ex_keep(ctx, s->mask[r]);
    /* a norm that does not exist (nothing reaches it) stands in as a loss: finite alike */
    ex_tensor *figures[6] = {s->loss_t,
                             s->acc_t,
                             s->loss_v,
                             s->acc_v,
                             s->gnorm_w ? s->gnorm_w : s->loss_t,
                             s->gnorm_a ? s->gnorm_a : s->loss_v};
    s->report = pack(ctx, 6, figures);
    if (ranks(s) > 1) /* the group's figures: mean losses and correct counts, equal norms */
        s->report = ex_keep(ctx, ex_allreduce(ctx, s->report, 1.0f / (float)ranks(s)));
    ex_ctx_begin_stage(ctx);
    ex_tensor *logits = forward(s, s->xe, NULL, true);
    s->loss_e = ex_cross_entropy(ctx, logits, s->ye);
    s->acc_e = ex_accuracy(ctx, logits, s->ye);
    ex_tensor *eval[2] = {s->loss_e, s->acc_e};
    s->report_e = pack(ctx, 2, eval);
    return ex_ctx_status(ctx);
}

/* ---- the object ---- */

static ex_status write_zeros(ex_search *s, ex_tensor *t)
{
    ex_plan *p = s->plan;
    size_t n = (size_t)ex_tensor_numel(t);
    float *z = ex__calloc(s->ctx, n, sizeof *z);
    if (!z)
        return EX_ERR_NOMEM;
    ex_status st = ex_plan_write(p, t, z, n * sizeof *z);
    free(z);
    return st;
}

static ex_status write_value(ex_search *s, ex_tensor *t, float v)
{
    ex_plan *p = s->plan;
    size_t n = (size_t)ex_tensor_numel(t);
    float *z = ex__malloc(s->ctx, n * sizeof *z);
    if (!z)
        return EX_ERR_NOMEM;
    for (size_t i = 0; i < n; i++)
        z[i] = v;
    ex_status st = ex_plan_write(p, t, z, n * sizeof *z);
    free(z);
    return st;
}

static ex_status initialise(ex_search *s)
{
    ex_plan *p = s->plan;
    ex_status st = nas_net_initialise(&s->net, p, s->cfg.seed);
    size_t e = (size_t)s->edges * (size_t)s->cfg.ncand;
    float *a = ex__malloc(s->ctx, e * sizeof *a);
    if (!a)
        return EX_ERR_NOMEM;
    for (int r = 0; st == EX_OK && r < 2; r++) {
        uint32_t k0 = (uint32_t)s->cfg.seed, k1 = (uint32_t)(s->cfg.seed >> 32);
        for (size_t i = 0; i < e; i++)
            a[i] = 1e-3f * ex_philox_normal(k0, k1, 0xA1FA, (uint32_t)r, i);
        st = ex_plan_write(p, s->alpha[r], a, e * sizeof *a);
        if (st == EX_OK)
            st = write_zeros(s, s->adam_m[r]);
        if (st == EX_OK)
            st = write_zeros(s, s->adam_v[r]);
    }
    free(a);
    for (int i = 0; st == EX_OK && i < nweights(s); i++)
        st = write_zeros(s, s->mom[i]);
    if (st == EX_OK)
        st = write_value(s, s->ones, 1.0f);
    return st;
}

ex_status ex__search_new_faulty(const ex_search_config *caller, ex_backend *be,
                                uint64_t fail_alloc_after, ex_search **out, char *msg,
                                size_t msg_len)
{
    if (!out || !caller || !be) {
        if (msg && msg_len)
            snprintf(msg, msg_len, "search: NULL %s",
                     !out      ? "out"
                     : !caller ? "config"
                               : "backend");
        return EX_ERR_ARG;
    }
    *out = NULL;
    ex_search_config cfg, *c = &cfg;
    ex_search_config_default(c);
    ex_status st = ex__adopt_config(c, sizeof *c, caller, "search", msg, msg_len);
    if (st == EX_OK)
        st = check_config(c, msg, msg_len);
    if (st != EX_OK)
        return st;
    /* the context first, so its allocation hook sees the search's own memory too */
    ex_ctx *ctx = ex_ctx_new();
    if (ctx) {
        ex_ctx_fail_alloc_after(ctx, fail_alloc_after);
        bool cheap = ex_backend_get_caps(be)->features & EX_FEAT_RECOMPUTE;
        ex_graph_set_recompute_level(ctx, c->recompute < 0 ? cheap : c->recompute);
    }
    ex_search *s = ctx ? ex__calloc(ctx, 1, sizeof *s) : NULL;
    if (s)
        s->ctx = ctx;
    if (!s) {
        ex_ctx_free(ctx);
        if (msg && msg_len)
            snprintf(msg, msg_len, "search: out of host memory");
        return EX_ERR_NOMEM;
    }
    s->cfg = *c;
    s->be = be;
    s->edges = nas_cell_edges(c->steps);
    ex_ctx_set_seed(s->ctx, c->seed);
    ex_ctx_set_ranks(s->ctx, c->comm ? c->comm->size : 1);
    double t0 = ex__clock_ms();
    st = build(s);
    double t1 = ex__clock_ms();
    /* the snapshot lets a step with non-finite values be undone on the device */
    ex_plan_opts po;
    ex_plan_opts_default(&po);
    po.snapshot = true;
    po.no_group = c->no_group;
    if (st == EX_OK)
        st = ex_graph_plan(s->ctx, be, &po, &s->plan);
    if (st == EX_OK && c->comm && (st = ex_plan_set_comm(s->plan, c->comm)) != EX_OK)
        ex_ctx_set_error(s->ctx, st, "%s", ex_plan_error(s->plan));
    double t2 = ex__clock_ms();
    s->setup.build_ms = t1 - t0;
    s->setup.plan_ms = t2 - t1;
    if (st != EX_OK) {
        if (msg && msg_len)
            snprintf(msg, msg_len, "search: %s", ex_ctx_error(s->ctx));
        ex_search_free(s);
        return st;
    }
    st = initialise(s);
    s->setup.init_ms = ex__clock_ms() - t2;
    if (st != EX_OK) {
        if (msg && msg_len)
            snprintf(msg, msg_len, "search: initialising: %s", ex_plan_error(s->plan));
        ex_search_free(s);
        return st;
    }
    *out = s;
    return EX_OK;
}

ex_status ex_search_new(const ex_search_config *c, ex_backend *be, ex_search **out, char *msg,
                        size_t msg_len)
{
    return ex__search_new_faulty(c, be, 0, out, msg, msg_len);
}

ex_search_setup ex_search_setup_times(const ex_search *s)
{
    ex_search_setup none = {0.0, 0.0, 0.0};
    return s ? s->setup : none;
}

void ex_search_free(ex_search *s)
{
    if (!s)
        return;
    ex_plan_free(s->plan);
    nas_net_free(&s->net);
    free(s->mom);
    ex_ctx_free(s->ctx);
    free(s);
}

static ex_status write_batch(ex_search *s, ex_tensor *x, const float *xv, ex_tensor *y,
                             const int32_t *yv)
{
    return nas_write_batch(s->plan, x, xv, y, yv, s->cfg.classes, "search", s->msg, sizeof s->msg);
}

static ex_status read_figures(ex_search *s, ex_tensor *t, float *v, int n)
{
    ex_status st = ex_plan_read(s->plan, t, v, (size_t)n * sizeof *v);
    return st == EX_OK ? EX_OK : fail(s, st, "search: %s", ex_plan_error(s->plan));
}

static bool finite_figures(const float *f, int n)
{
    for (int i = 0; i < n; i++)
        if (!isfinite(f[i]))
            return false;
    return true;
}

/* After a step whose figures are not all finite: back to the snapshot, and an error once
 * more than the allowed run of such steps happened. */
static ex_status undo_step(ex_search *s, ex_search_stats *r)
{
    ex_status st = ex_plan_restore(s->plan);
    if (st != EX_OK)
        return fail(s, st, "search: %s", ex_plan_error(s->plan));
    r->skipped = true;
    r->nonfinite_run = ++s->nonfinite_run;
    if (s->nonfinite_run > s->cfg.nonfinite_limit)
        return fail(s, EX_ERR_NONFINITE,
                    "search: %d steps in a row with a non-finite loss or gradient (after step "
                    "%lld; at most %d are skipped); the state is that of the last good step",
                    s->nonfinite_run, (long long)s->steps_done, s->cfg.nonfinite_limit);
    return EX_OK;
}

static ex_status write_step_inputs(ex_search *s, const float *train_x, const int32_t *train_y,
                                   const float *valid_x, const int32_t *valid_y, float lr,
                                   float tau)
{
    ex_status st = write_batch(s, s->xt, train_x, s->yt, train_y);
    if (st == EX_OK)
        st = write_batch(s, s->xv, valid_x, s->yv, valid_y);
    float arch_lr = s->steps_done < s->cfg.arch_warmup ? 0.0f : s->cfg.arch_lr;
    float hyper[2] = {arch_lr, (float)(s->steps_done + 1)};
    int32_t counter[2] = {(int32_t)s->steps_done, (int32_t)(s->steps_done >> 31)};
    if (st == EX_OK)
        st = ex_plan_write(s->plan, s->lr, &lr, sizeof lr);
    if (st == EX_OK)
        st = ex_plan_write(s->plan, s->tau, &tau, sizeof tau);
    if (st == EX_OK)
        st = ex_plan_write(s->plan, s->ahyper, hyper, sizeof hyper);
    if (st == EX_OK)
        st = ex_plan_write(s->plan, s->counter, counter, sizeof counter);
    return st;
}

ex_status ex_search_step(ex_search *s, const float *train_x, const int32_t *train_y,
                         const float *valid_x, const int32_t *valid_y, float lr, float tau,
                         ex_search_stats *out)
{
    if (!s)
        return EX_ERR_ARG;
    if (!isfinite(lr) || !isfinite(tau))
        return fail(s, EX_ERR_ARG, "search: learning rate %g or temperature %g is not finite",
                    (double)lr, (double)tau);
    double t0 = ex__clock_ms();
    s->msg[0] = '\0';
    /* the step is queued, and its figures' read is the one wait for the device */
    ex_status st = write_step_inputs(s, train_x, train_y, valid_x, valid_y, lr, tau);
    float f[6];
    bool snapped = st == EX_OK && (st = ex_plan_snapshot(s->plan)) == EX_OK;
    if (snapped && (st = ex_plan_submit_stage(s->plan, 0)) == EX_OK)
        st = ex_plan_read(s->plan, s->report, f, sizeof f);
    if (st != EX_OK && !s->msg[0]) /* the step's failure, before the restore's can hide it */
        fail(s, st, "search: %s", ex_plan_error(s->plan));
    if (st != EX_OK && snapped)
        ex_plan_restore(s->plan); /* a step that failed half-way leaves the last good state */
    if (st != EX_OK)
        return st;
    ex_search_stats r = {0};
    r.train_loss = f[0];
    /* a rank's share of correct answers, averaged over the group: times the ranks */
    r.train_acc = f[1] * (float)ranks(s) / (float)s->cfg.batch;
    r.valid_loss = f[2];
    r.valid_acc = f[3] * (float)ranks(s) / (float)s->cfg.batch;
    if (finite_figures(f, 6)) {
        s->steps_done++;
        s->nonfinite_run = 0;
    } else {
        st = undo_step(s, &r);
    }
    r.step_ms = ex__clock_ms() - t0;
    if (out)
        *out = r;
    return st;
}

ex_status ex_search_eval(ex_search *s, const float *x, const int32_t *y, float *loss, int *correct)
{
    if (!s)
        return EX_ERR_ARG;
    ex_status st = write_batch(s, s->xe, x, s->ye, y);
    if (st == EX_OK && (st = ex_plan_submit_stage(s->plan, 1)) != EX_OK)
        return fail(s, st, "search: %s", ex_plan_error(s->plan));
    float f[2] = {0, 0};
    if (st == EX_OK)
        st = read_figures(s, s->report_e, f, 2);
    if (st == EX_OK && loss)
        *loss = f[0];
    if (st == EX_OK && correct)
        *correct = (int)f[1];
    return st;
}

int ex_search_edges(const ex_search *s)
{
    return s ? s->edges : 0;
}

ex_status ex_search_weights(ex_search *s, float *normal, float *reduce)
{
    if (!s)
        return EX_ERR_ARG;
    int k = s->cfg.ncand;
    float *out[2] = {normal, reduce};
    for (int r = 0; r < 2; r++) {
        if (!out[r])
            continue;
        ex_status st = ex_plan_read(s->plan, s->alpha[r], out[r],
                                    (size_t)s->edges * (size_t)k * sizeof(float));
        if (st != EX_OK)
            return fail(s, st, "search: %s", ex_plan_error(s->plan));
        for (int e = 0; e < s->edges; e++) {
            float *row = out[r] + (size_t)e * (size_t)k, mx = row[0];
            double sum = 0;
            for (int j = 1; j < k; j++)
                mx = row[j] > mx ? row[j] : mx;
            for (int j = 0; j < k; j++)
                sum += exp((double)row[j] - mx);
            for (int j = 0; j < k; j++)
                row[j] = (float)(exp((double)row[j] - mx) / sum);
        }
    }
    return EX_OK;
}

ex_status ex_search_alphas(ex_search *s, float *normal, float *reduce)
{
    if (!s)
        return EX_ERR_ARG;
    float *out[2] = {normal, reduce};
    for (int r = 0; r < 2; r++) {
        size_t n = (size_t)s->edges * (size_t)s->cfg.ncand * sizeof(float);
        ex_status st = out[r] ? ex_plan_read(s->plan, s->alpha[r], out[r], n) : EX_OK;
        if (st != EX_OK)
            return fail(s, st, "search: %s", ex_plan_error(s->plan));
    }
    return EX_OK;
}

ex_status ex_search_masks(ex_search *s, float *normal, float *reduce)
{
    if (!s)
        return EX_ERR_ARG;
    float *out[2] = {normal, reduce};
    for (int r = 0; r < 2; r++) {
        if (!out[r])
            continue;
        ex_status st = ex_plan_read(s->plan, s->mask[r], out[r],
                                    (size_t)s->edges * (size_t)s->cfg.ncand * sizeof(float));
        if (st != EX_OK)
            return fail(s, st, "search: %s", ex_plan_error(s->plan));
    }
    return EX_OK;
}

ex_status ex_search_genotype(ex_search *s, ex_genotype *g)
{
    if (!s || !g)
        return EX_ERR_ARG;
    size_t n = (size_t)s->edges * (size_t)s->cfg.ncand;
    float *w = ex__malloc(s->ctx, 2 * n * sizeof *w);
    if (!w)
        return fail(s, EX_ERR_NOMEM, "search: out of host memory");
    ex_status st = ex_search_weights(s, w, w + n);
    if (st == EX_OK)
        st = ex_genotype_derive(w, w + n, s->cfg.steps, s->cfg.multiplier, s->cfg.ncand,
                                s->cfg.cand, g, s->msg, sizeof s->msg);
    if (st == EX_OK)
        st = ex_genotype_cap_param_free(g, w, s->cfg.ncand, s->cfg.cand, s->cfg.max_param_free,
                                        s->msg, sizeof s->msg);
    free(w);
    return st;
}

uint64_t ex_search_alloc_count(const ex_search *s)
{
    return s ? ex_ctx_alloc_count(s->ctx) : 0;
}

const char *ex_search_error(const ex_search *s)
{
    return s ? s->msg : "no search (NULL)";
}

struct ex_plan *ex_search_plan(ex_search *s)
{
    return s ? s->plan : NULL;
}

/* ---- checkpoints ---- */

/* Every tensor a bitwise resume needs: weights, statistics, alpha, optimizer states. */
static nas_entry *entries(ex_search *s, int *count)
{
    int n = s->net.nparams + s->net.nstates;
    nas_entry *e = ex__malloc(s->ctx, (size_t)(2 * n + 6) * sizeof *e);
    if (!e)
        return NULL;
    int c = nas_net_entries(&s->net, e);
    for (int r = 0; r < 2; r++) {
        e[c++] = (nas_entry){ex_tensor_name(s->alpha[r]), s->alpha[r]};
        e[c++] = (nas_entry){ex_tensor_name(s->adam_m[r]), s->adam_m[r]};
        e[c++] = (nas_entry){ex_tensor_name(s->adam_v[r]), s->adam_v[r]};
    }
    for (int i = 0; i < s->net.nparams; i++)
        e[c++] = (nas_entry){ex_tensor_name(s->mom[i]), s->mom[i]};
    *count = c;
    return e;
}

ex_status ex_search_save(ex_search *s, const char *path, const char *metadata_json)
{
    if (!s || !path)
        return EX_ERR_ARG;
    int count;
    nas_entry *e = entries(s, &count);
    if (!e)
        return fail(s, EX_ERR_NOMEM, "search: out of host memory");
    char steps[32];
    snprintf(steps, sizeof steps, "%lld", (long long)s->steps_done);
    ex_st_meta meta[3] = {
        {"format", "exapt-search"}, {"steps", steps}, {"user", metadata_json ? metadata_json : ""}};
    ex_status st =
        nas_store_save(s->plan, e, count, s->steps_done, meta, 3, path, s->msg, sizeof s->msg);
    free(e);
    return st;
}

ex_status ex_search_load(ex_search *s, const char *path)
{
    if (!s || !path)
        return EX_ERR_ARG;
    int count;
    nas_entry *e = entries(s, &count);
    if (!e)
        return fail(s, EX_ERR_NOMEM, "search: out of host memory");
    ex_status st = nas_store_load(s->plan, e, count, path, s->msg, sizeof s->msg);
    free(e);
    if (st != EX_OK)
        return st;
    return nas_store_steps(path, &s->steps_done, s->msg, sizeof s->msg);
}
