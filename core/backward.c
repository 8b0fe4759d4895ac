/* The gradient rule of every differentiable op. Backward nodes are ordinary ops built
 * with the context's tag and gate set to the forward node's. */
#include <string.h>

#include "core/engine.h"
#include "core/tdesc.h"

/* A backward node shaped like `like`, carrying the forward node's parameters. */
static ex_tensor *bnode(ex_ctx *ctx, ex_op op, const ex_tensor *fwd, const ex_tensor *like, int n,
                        ex_tensor *const *src)
{
    ex_tensor *r = ex__node(ctx, op, EX_F32, like->ndim, like->ne, n, src);
    if (!ex__is_inert(r)) {
        memcpy(r->ip, fwd->ip, sizeof r->ip);
        memcpy(r->fp, fwd->fp, sizeof r->fp);
    }
    return r;
}

/* Sources of a node the backward pass makes again, at most. */
#define REMAKE_SRC 4

/* Whether t is a node with storage of its own that no caller keeps. */
static bool plain_node(const ex_tensor *t)
{
    return t->kind == EX_K_NODE && t->storage == t && !t->keep && t->nsrc <= REMAKE_SRC;
}

static bool remakeable(const ex_ctx *ctx, const ex_tensor *x);
static ex_tensor *recomputed(ex_ctx *ctx, ex_tensor *x);

/* Level 2: whether y, an affine-free batch norm's input, is cheap to make again with it
 * from tensors the backward pass keeps anyway: a pooling of one, or a pointwise
 * convolution of a depthwise convolution of one. */
static bool cheap_bn_input(const ex_ctx *ctx, const ex_tensor *y)
{
    if (!plain_node(y))
        return false;
    if (y->op == EX_OP_MAX_POOL || y->op == EX_OP_AVG_POOL)
        return !remakeable(ctx, y->src[0]);
    if (y->op != EX_OP_PWCONV)
        return false;
    const ex_tensor *dw = y->src[0];
    return plain_node(dw) && dw->op == EX_OP_DWCONV2D && !remakeable(ctx, dw->src[0]);
}

/* Whether the backward pass makes x again instead of reading it (ex_graph_set_recompute_level):
 * level 1, a depthwise convolution's output or a strided copy; level 2 also an affine-free
 * batch norm's output whose input is cheap to make again (cheap_bn_input). */
static bool remakeable(const ex_ctx *ctx, const ex_tensor *x)
{
    if (ctx->recompute < 1 || !plain_node(x))
        return false;
    if (x->op == EX_OP_DWCONV2D || x->op == EX_OP_COPY)
        return true;
    return ctx->recompute >= 2 && x->op == EX_OP_BN_APPLY && x->nsrc == 2 &&
           cheap_bn_input(ctx, x->src[0]);
}

/* x made again under x's own tag and gate (a skipped candidate's is skipped too), once per
 * backward walk: every reader shares it (ctx->remade). Its sources are those made again
 * where they are (a depthwise convolution's input may be a batch norm's output made
 * again), a batch norm's cheap input always. */
static ex_tensor *remake(ex_ctx *ctx, ex_tensor *x)
{
    bool memo = x->id < ctx->nremade;
    if (memo && ctx->remade[x->id])
        return ctx->remade[x->id];
    ex_tensor *src[REMAKE_SRC];
    for (int i = 0; i < x->nsrc; i++)
        src[i] = recomputed(ctx, x->src[i]);
    if (x->op == EX_OP_BN_APPLY) /* its input, made again only with it */
        src[0] = remake(ctx, x->src[0]);
    int32_t tag[3];
    memcpy(tag, ctx->tag, sizeof tag);
    ex_tensor *gate = ctx->gate;
    int64_t gate_index = ctx->gate_index;
    memcpy(ctx->tag, x->tag, sizeof tag);
    ctx->gate = x->gate;
    ctx->gate_index = x->gate_index;
    ex_tensor *r = bnode(ctx, x->op, x, x, x->nsrc, src);
    memcpy(ctx->tag, tag, sizeof tag);
    ctx->gate = gate;
    ctx->gate_index = gate_index;
    if (memo && !ex__is_inert(r))
        ctx->remade[x->id] = r;
    return r;
}

/* x as the backward pass reads it: made again (remakeable) when it is cheap to and its
 * sources outlive the forward pass anyway, so that the forward pass's x dies at once;
 * otherwise x itself. */
static ex_tensor *recomputed(ex_ctx *ctx, ex_tensor *x)
{
    return remakeable(ctx, x) ? remake(ctx, x) : x;
}

static ex_tensor *bcast(ex_ctx *ctx, ex_tensor *g, const ex_tensor *like)
{
    return ex_broadcast(ctx, g, like->ndim, like->ne);
}

static void conv_rule(ex_ctx *ctx, ex_tensor *t, ex_tensor *g, ex_grad_sink give, void *u,
                      ex_op data, ex_op filter)
{
    ex_tensor *x = t->src[0], *w = t->src[1];
    /* ip6 = 1 (depthwise): the node convolved max(x, 0). Both passes inherit the flag; the
     * data pass also reads x, for the mask x > 0 on dx. */
    int relu = t->ip[6];
    if (relu != 0 && (relu != 1 || t->op != EX_OP_DWCONV2D)) {
        ex__fail(ctx, EX_ERR_ARG, "%s: ip6 (fused ReLU) is %d; only dwconv2d takes it, as 0 or 1",
                 ex_op_name(t->op), relu);
        return;
    }
    ex_tensor *xr = recomputed(ctx, x);
    ex_tensor *a[3] = {g, w, xr}, *b[2] = {xr, g};
    give(ctx, x, bnode(ctx, data, t, x, relu ? 3 : 2, a), u);
    give(ctx, w, bnode(ctx, filter, t, w, 2, b), u);
}

static void linear_rule(ex_ctx *ctx, ex_tensor *t, ex_tensor *g, ex_grad_sink give, void *u)
{
    ex_tensor *x = t->src[0], *w = t->src[1];
    give(ctx, x, ex_matmul(ctx, g, w), u);
    give(ctx, w, ex_matmul(ctx, ex_transpose(ctx, g, 0, 1), x), u);
    if (t->nsrc == 3) {
        int64_t m = w->ne[0];
        give(ctx, t->src[2], ex_reshape(ctx, ex_sum(ctx, g, 1u), 1, &m), u);
    }
}

/* Without gamma and beta the output is x̂ itself: both passes read it (ip1 = 1) instead of
 * x, so that x dies after the forward pass. DARTS' candidate batch norms are affine-free,
 * and this halves what a convolution and its batch norm keep for the backward pass.
 * Statistics synchronized over R ranks (BN_STATS ip1 = 2) make dx depend on the whole
 * group: its reductions are summed over the ranks and divided by the group's count
 * (BN_BWD_DATA ip2 = R). gamma's and beta's gradients keep the rank's own reductions: the
 * weight gradients' average over the ranks then gives the whole batch's. */
static void bn_rule(ex_ctx *ctx, ex_tensor *t, ex_tensor *g, ex_grad_sink give, void *u)
{
    ex_tensor *x = t->src[0], *stats = t->src[1];
    bool affine = t->nsrc == 4;
    bool synced = stats->op == EX_OP_BN_STATS && stats->ip[1] == EX_BN_STATS_FINISH;
    ex_tensor *xs = affine ? x : recomputed(ctx, t);
    ex_tensor *r[3] = {xs, stats, g};
    int64_t c = x->ne[1], ne2[2] = {2, c};
    ex_tensor *red = ex__node(ctx, EX_OP_BN_BWD_REDUCE, EX_F32, 2, ne2, 3, r);
    ex_tensor *group = synced ? ex_allreduce(ctx, red, 1.0f) : red;
    ex_tensor *d[5] = {xs, stats, g, group, affine ? t->src[2] : NULL};
    ex_tensor *dx = bnode(ctx, EX_OP_BN_BWD_DATA, t, x, affine ? 5 : 4, d);
    if (!ex__is_inert(red) && !ex__is_inert(dx)) {
        red->ip[1] = dx->ip[1] = !affine;
        dx->ip[2] = synced ? ctx->ranks : 0;
    }
    give(ctx, x, dx, u);
    if (affine) {
        give(ctx, t->src[2], ex_reshape(ctx, ex_slice(ctx, red, 0, 0, 1), 1, &c), u);
        give(ctx, t->src[3], ex_reshape(ctx, ex_slice(ctx, red, 0, 1, 1), 1, &c), u);
    }
}

static void mixed_sum_rule(ex_ctx *ctx, ex_tensor *t, ex_tensor *g, ex_grad_sink give, void *u)
{
    ex_tensor *w = t->src[0], *mask = t->src[1];
    int n = t->nsrc - 2;
    ex_tensor *s[EX_MAX_CANDIDATES + 2] = {g, mask};
    for (int j = 0; j < n; j++)
        s[2 + j] = recomputed(ctx, t->src[2 + j]);
    give(ctx, w, bnode(ctx, EX_OP_MIXED_SUM_BWD_W, t, w, n + 2, s), u);
    ex_tensor *gate = ctx->gate;
    int64_t gate_index = ctx->gate_index;
    for (int j = 0; j < n; j++) {
        /* candidate j's gradient exists only while it is active */
        ctx->gate = mask;
        ctx->gate_index = t->ip[j];
        ex_tensor *wj = ex_slice(ctx, w, 0, t->ip[j], 1);
        give(ctx, t->src[2 + j], ex_mul(ctx, g, wj), u);
    }
    ctx->gate = gate;
    ctx->gate_index = gate_index;
}

void ex__backward_rule(ex_ctx *ctx, ex_tensor *t, ex_tensor *g, ex_grad_sink give, void *u)
{
    ex_tensor **s = t->src;
    switch (t->op) {
    case EX_OP_ADD:
        give(ctx, s[0], g, u);
        give(ctx, s[1], g, u);
        break;
    case EX_OP_SUB:
        give(ctx, s[0], g, u);
        give(ctx, s[1], ex_scale(ctx, g, -1.0f), u);
        break;
    case EX_OP_MUL:
        give(ctx, s[0], ex_mul(ctx, g, s[1]), u);
        give(ctx, s[1], ex_mul(ctx, g, s[0]), u);
        break;
    case EX_OP_SCALE: give(ctx, s[0], ex_scale(ctx, g, t->fp[0]), u); break;
    case EX_OP_AXPY:
        give(ctx, s[0], ex_scale(ctx, g, t->fp[0]), u);
        give(ctx, s[1], g, u);
        break;
    case EX_OP_RELU: {
        ex_tensor *a[2] = {t, g}; /* the output's sign is the input's: x may be overwritten */
        give(ctx, s[0], bnode(ctx, EX_OP_RELU_BWD, t, t, 2, a), u);
        break;
    }
    case EX_OP_COPY: give(ctx, s[0], g, u); break;
    case EX_OP_DROP_PATH: {
        ex_tensor *a[2] = {g, s[1]}; /* the same key and counter draw the same mask */
        give(ctx, s[0], bnode(ctx, EX_OP_DROP_PATH, t, t, 2, a), u);
        break;
    }
    case EX_OP_SUM: give(ctx, s[0], bcast(ctx, g, s[0]), u); break;
    case EX_OP_MEAN: {
        double count = (double)ex__numel(s[0]) / (double)ex__numel(t);
        give(ctx, s[0], ex_scale(ctx, bcast(ctx, g, s[0]), (float)(1.0 / count)), u);
        break;
    }
    case EX_OP_MAX: {
        ex_tensor *a[3] = {s[0], bcast(ctx, t, s[0]), bcast(ctx, g, s[0])};
        give(ctx, s[0], bnode(ctx, EX_OP_MAX_BWD, t, s[0], 3, a), u);
        break;
    }
    case EX_OP_SOFTMAX:
    case EX_OP_LOG_SOFTMAX: {
        ex_tensor *a[2] = {t, g};
        ex_op op = t->op == EX_OP_SOFTMAX ? EX_OP_SOFTMAX_BWD : EX_OP_LOG_SOFTMAX_BWD;
        give(ctx, s[0], bnode(ctx, op, t, t, 2, a), u);
        break;
    }
    case EX_OP_CROSS_ENTROPY: {
        ex_tensor *a[3] = {s[0], s[1], g};
        give(ctx, s[0], bnode(ctx, EX_OP_CROSS_ENTROPY_BWD, t, s[0], 3, a), u);
        break;
    }
    case EX_OP_CONV2D:
        conv_rule(ctx, t, g, give, u, EX_OP_CONV2D_BWD_DATA, EX_OP_CONV2D_BWD_FILTER);
        break;
    case EX_OP_DWCONV2D:
        conv_rule(ctx, t, g, give, u, EX_OP_DWCONV2D_BWD_DATA, EX_OP_DWCONV2D_BWD_FILTER);
        break;
    case EX_OP_PWCONV: {
        ex_tensor *a[2] = {recomputed(ctx, s[0]), g};
        give(ctx, s[0], ex_pwconv(ctx, g, ex_transpose(ctx, s[1], 0, 1)), u);
        give(ctx, s[1], bnode(ctx, EX_OP_PWCONV_BWD_FILTER, t, s[1], 2, a), u);
        break;
    }
    case EX_OP_MATMUL:
        give(ctx, s[0], ex_matmul(ctx, g, ex_transpose(ctx, s[1], 0, 1)), u);
        give(ctx, s[1], ex_matmul(ctx, ex_transpose(ctx, s[0], 0, 1), g), u);
        break;
    case EX_OP_LINEAR: linear_rule(ctx, t, g, give, u); break;
    case EX_OP_AVG_POOL: give(ctx, s[0], bnode(ctx, EX_OP_AVG_POOL_BWD, t, s[0], 1, &g), u); break;
    case EX_OP_MAX_POOL: {
        ex_tensor *a[2] = {s[0], g};
        give(ctx, s[0], bnode(ctx, EX_OP_MAX_POOL_BWD, t, s[0], 2, a), u);
        break;
    }
    case EX_OP_GLOBAL_AVG_POOL: {
        float inv = (float)(1.0 / (double)(s[0]->ne[2] * s[0]->ne[3]));
        give(ctx, s[0], ex_scale(ctx, bcast(ctx, g, s[0]), inv), u);
        break;
    }
    case EX_OP_BN_APPLY: bn_rule(ctx, t, g, give, u); break;
    case EX_OP_MIXED_SUM: mixed_sum_rule(ctx, t, g, give, u); break;
    case EX_OP_GUMBEL_SOFTMAX: {
        ex_tensor *a[3] = {t, g, s[1]};
        give(ctx, s[0], bnode(ctx, EX_OP_GUMBEL_SOFTMAX_BWD, t, t, 3, a), u);
        break;
    }
    case EX_OP_HARDMAX_ST: give(ctx, s[0], g, u); break; /* straight through */
    case EX_OP_ENTROPY: {
        ex_tensor *a[2] = {s[0], bcast(ctx, g, s[0])};
        give(ctx, s[0], bnode(ctx, EX_OP_ENTROPY_BWD, t, s[0], 2, a), u);
        break;
    }
    default: break; /* no gradient: the op table marks these non-differentiable */
    }
}
