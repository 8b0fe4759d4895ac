/* Builder of batch norm: a statistics node, then an apply node. */
#include "core/engine.h"

#define INERT(ctx) ((ctx) ? &(ctx)->inert : NULL)

static bool vec_c(ex_ctx *ctx, ex_tensor *t, int64_t c, const char *what, const ex_tensor *x)
{
    if (t->dtype == EX_F32 && t->ndim == 1 && t->ne[0] == c)
        return true;
    char st[64], sx[64];
    ex__fail(ctx, t->dtype == EX_F32 ? EX_ERR_SHAPE : EX_ERR_ARG,
             "batch_norm: %s %s (%s) must be f32 [C] for x %s", what, ex__shape(t, st),
             ex_dtype_name(t->dtype), ex__shape(x, sx));
    return false;
}

ex_tensor *ex_batch_norm(ex_ctx *ctx, ex_tensor *x, ex_tensor *gamma, ex_tensor *beta,
                         ex_tensor *running_mean, ex_tensor *running_var, bool train, float eps,
                         float momentum)
{
    ex_tensor *s[3] = {x, running_mean, running_var};
    if (!ex__check(ctx, "batch_norm", 3, s))
        return INERT(ctx);
    char sx[64];
    if (x->dtype != EX_F32 || x->ndim != 4)
        return ex__fail(ctx, x->dtype == EX_F32 ? EX_ERR_SHAPE : EX_ERR_ARG,
                        "batch_norm: x %s (%s) must be f32 [N, C, H, W]", ex__shape(x, sx),
                        ex_dtype_name(x->dtype));
    if ((gamma == NULL) != (beta == NULL))
        return ex__fail(ctx, EX_ERR_ARG,
                        "batch_norm: gamma and beta must both be given or both NULL");
    ex_tensor *ab[2] = {gamma, beta};
    if (gamma && !ex__check(ctx, "batch_norm", 2, ab))
        return &ctx->inert;
    int64_t c = x->ne[1];
    if (!vec_c(ctx, running_mean, c, "running_mean", x) ||
        !vec_c(ctx, running_var, c, "running_var", x) ||
        (gamma && (!vec_c(ctx, gamma, c, "gamma", x) || !vec_c(ctx, beta, c, "beta", x))))
        return &ctx->inert;
    if (running_mean->kind != EX_K_STATE || running_var->kind != EX_K_STATE)
        return ex__fail(ctx, EX_ERR_ARG, "batch_norm: running statistics must be ex_state tensors");
    if (!(eps > 0.0f) || !(momentum >= 0.0f && momentum <= 1.0f))
        return ex__fail(ctx, EX_ERR_ARG, "batch_norm: eps %g must be > 0, momentum %g in [0, 1]",
                        (double)eps, (double)momentum);
    if (train && x->ne[0] * x->ne[2] * x->ne[3] < 2)
        return ex__fail(ctx, EX_ERR_SHAPE,
                        "batch_norm: training needs more than one value per "
                        "channel, x is %s",
                        ex__shape(x, sx));
    int64_t ne[2] = {2, c};
    ex_tensor *stats = ex__node(ctx, EX_OP_BN_STATS, EX_F32, 2, ne, 3, s);
    if (ex__is_inert(stats))
        return stats;
    stats->ip[0] = train;
    stats->fp[0] = eps;
    stats->fp[1] = momentum;
    ex_tensor *a[4] = {x, stats, gamma, beta};
    ex_tensor *y = ex__node(ctx, EX_OP_BN_APPLY, EX_F32, 4, x->ne, gamma ? 4 : 2, a);
    if (!ex__is_inert(y))
        y->ip[0] = train;
    return y;
}
