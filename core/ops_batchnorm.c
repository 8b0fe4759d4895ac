/* Builders of batch norm: a statistics node, then an apply node; and the node forms of a
 * synchronized (data-parallel) batch norm, which the engine assembles around its all-reduces. */
#include <stdint.h>

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

/* Training statistics over a group of ranks, by Chan's parallel variance: each rank's mean
 * and variance (BN_STATS ip1 = 1) averaged over the group, plus the group's average of
 * (rank mean - group mean)^2, give the group's variance without the cancellation of
 * E[x^2] - mean^2; the finish (ip1 = 2) turns them into the statistics and the running
 * update of the group's M values per channel. */
static ex_tensor *bn_stats_synced(ex_ctx *ctx, ex_tensor *const s[3], float eps, float momentum)
{
    ex_tensor *x = s[0];
    int64_t c = x->ne[1], ne[2] = {2, c}, m = x->ne[0] * x->ne[2] * x->ne[3] * ctx->ranks;
    float share = 1.0f / (float)ctx->ranks;
    ex_tensor *local = ex__bn_moments(ctx, x, s[1], s[2]);
    ex_tensor *group = ex_allreduce(ctx, local, share);
    ex_tensor *mean = ex_slice(ctx, group, 0, 0, 1);
    ex_tensor *d = ex_sub(ctx, ex_slice(ctx, local, 0, 0, 1), mean);
    ex_tensor *spread = ex_allreduce(ctx, ex_mul(ctx, d, d), share);
    ex_tensor *both = ex__unwritten(ctx, 2, ne);
    ex_copy_into(ctx, mean, ex_slice(ctx, both, 0, 0, 1));
    ex__add_into(ctx, ex_slice(ctx, group, 0, 1, 1), spread, ex_slice(ctx, both, 0, 1, 1));
    return ex__bn_finish(ctx, both, s[1], s[2], m, eps, momentum);
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
    if (train && x->ne[0] * x->ne[2] * x->ne[3] * ctx->ranks < 2)
        return ex__fail(ctx, EX_ERR_SHAPE,
                        "batch_norm: training needs more than one value per "
                        "channel, x is %s on %d rank(s)",
                        ex__shape(x, sx), ctx->ranks);
    int64_t ne[2] = {2, c};
    ex_tensor *stats;
    if (train && ctx->ranks > 1) {
        stats = bn_stats_synced(ctx, s, eps, momentum);
    } else {
        stats = ex__node(ctx, EX_OP_BN_STATS, EX_F32, 2, ne, 3, s);
        if (!ex__is_inert(stats)) {
            stats->ip[0] = train;
            stats->fp[0] = eps;
            stats->fp[1] = momentum;
        }
    }
    if (ex__is_inert(stats))
        return stats;
    ex_tensor *a[4] = {x, stats, gamma, beta};
    ex_tensor *y = ex__node(ctx, EX_OP_BN_APPLY, EX_F32, 4, x->ne, gamma ? 4 : 2, a);
    if (!ex__is_inert(y))
        y->ip[0] = train;
    return y;
}

/* ---- synchronized (data-parallel) batch norm's node forms ----
 * Each rank's moments node gives its mean and biased variance; the engine averages them
 * over the R ranks (A), averages each rank's (mean_r - A0)^2 (S, element-wise ops in each
 * rank's graph), and hands [A0; A1 + S], the group's mean and biased variance, to the
 * finish (Chan's parallel variance: no E[x^2] - mean^2 cancellation anywhere). */

/* t is f32 [rows, C] (rows 2) or [C] (rows 1); names what for the message of op. */
static bool bn_rows(ex_ctx *ctx, const char *op, ex_tensor *t, int rows, int64_t c,
                    const char *what)
{
    if (t->dtype == EX_F32 && (rows == 1 ? t->ndim == 1 && t->ne[0] == c
                                         : t->ndim == 2 && t->ne[0] == rows && t->ne[1] == c))
        return true;
    char st[64];
    ex__fail(ctx, t->dtype == EX_F32 ? EX_ERR_SHAPE : EX_ERR_ARG,
             "%s: %s %s (%s) must be f32 [%s%lld]", op, what, ex__shape(t, st),
             ex_dtype_name(t->dtype), rows == 1 ? "" : "2, ", (long long)c);
    return false;
}

/* t is a 4-d f32 tensor (shaped like `like` when given). */
static bool bn_4d(ex_ctx *ctx, const char *op, ex_tensor *t, const ex_tensor *like,
                  const char *what)
{
    if (t->dtype == EX_F32 && t->ndim == 4 && (!like || ex__same_shape(t, like)))
        return true;
    char st[64];
    ex__fail(ctx, t->dtype == EX_F32 ? EX_ERR_SHAPE : EX_ERR_ARG,
             "%s: %s %s (%s) must be f32 [N, C, H, W]%s", op, what, ex__shape(t, st),
             ex_dtype_name(t->dtype), like ? " shaped like x" : "");
    return false;
}

/* The running statistics of a statistics node: f32 [C] state tensors. */
static bool bn_running(ex_ctx *ctx, const char *op, ex_tensor *rm, ex_tensor *rv, int64_t c)
{
    if (!bn_rows(ctx, op, rm, 1, c, "running_mean") || !bn_rows(ctx, op, rv, 1, c, "running_var"))
        return false;
    if (rm->kind == EX_K_STATE && rv->kind == EX_K_STATE)
        return true;
    ex__fail(ctx, EX_ERR_ARG, "%s: running statistics must be ex_state tensors", op);
    return false;
}

/* BN_STATS ip1 = 1: dst [2, C] = x's mean and biased variance per channel. */
ex_tensor *ex__bn_moments(ex_ctx *ctx, ex_tensor *x, ex_tensor *running_mean,
                          ex_tensor *running_var)
{
    ex_tensor *s[3] = {x, running_mean, running_var};
    if (!ex__check(ctx, "bn_moments", 3, s))
        return INERT(ctx);
    if (!bn_4d(ctx, "bn_moments", x, NULL, "x") ||
        !bn_running(ctx, "bn_moments", running_mean, running_var, x->ne[1]))
        return &ctx->inert;
    int64_t ne[2] = {2, x->ne[1]};
    ex_tensor *r = ex__node(ctx, EX_OP_BN_STATS, EX_F32, 2, ne, 3, s);
    if (!ex__is_inert(r)) {
        r->ip[0] = 1;
        r->ip[1] = 1;
    }
    return r;
}

/* BN_STATS ip1 = 2: dst [2, C] = mean and invstd from the group's mean and biased variance
 * (moments), with the running statistics moved over count values. */
ex_tensor *ex__bn_finish(ex_ctx *ctx, ex_tensor *moments, ex_tensor *running_mean,
                         ex_tensor *running_var, int64_t count, float eps, float momentum)
{
    ex_tensor *s[3] = {moments, running_mean, running_var};
    if (!ex__check(ctx, "bn_finish", 3, s))
        return INERT(ctx);
    int64_t c = moments->ndim == 2 ? moments->ne[1] : 0;
    if (!bn_rows(ctx, "bn_finish", moments, 2, c, "moments") ||
        !bn_running(ctx, "bn_finish", running_mean, running_var, c))
        return &ctx->inert;
    if (count < 2 || count > INT32_MAX)
        return ex__fail(ctx, EX_ERR_ARG, "bn_finish: the global count %lld must be in [2, 2^31)",
                        (long long)count);
    if (!(eps > 0.0f) || !(momentum >= 0.0f && momentum <= 1.0f))
        return ex__fail(ctx, EX_ERR_ARG, "bn_finish: eps %g must be > 0, momentum %g in [0, 1]",
                        (double)eps, (double)momentum);
    int64_t ne[2] = {2, c};
    ex_tensor *r = ex__node(ctx, EX_OP_BN_STATS, EX_F32, 2, ne, 3, s);
    if (!ex__is_inert(r)) {
        r->ip[0] = 1;
        r->ip[1] = 2;
        r->ip[2] = (int32_t)count;
        r->fp[0] = eps;
        r->fp[1] = momentum;
    }
    return r;
}

ex_tensor *ex__bn_bwd_reduce(ex_ctx *ctx, ex_tensor *xs, ex_tensor *stats, ex_tensor *dy, bool xhat)
{
    ex_tensor *s[3] = {xs, stats, dy};
    if (!ex__check(ctx, "bn_bwd_reduce", 3, s))
        return INERT(ctx);
    if (!bn_4d(ctx, "bn_bwd_reduce", xs, NULL, "x") ||
        !bn_rows(ctx, "bn_bwd_reduce", stats, 2, xs->ne[1], "stats") ||
        !bn_4d(ctx, "bn_bwd_reduce", dy, xs, "dy"))
        return &ctx->inert;
    int64_t ne[2] = {2, xs->ne[1]};
    ex_tensor *r = ex__node(ctx, EX_OP_BN_BWD_REDUCE, EX_F32, 2, ne, 3, s);
    if (!ex__is_inert(r)) {
        r->ip[0] = 1;
        r->ip[1] = xhat;
    }
    return r;
}

ex_tensor *ex__bn_bwd_data(ex_ctx *ctx, ex_tensor *xs, ex_tensor *stats, ex_tensor *dy,
                           ex_tensor *red, ex_tensor *gamma, bool xhat, int ranks)
{
    ex_tensor *s[5] = {xs, stats, dy, red, gamma};
    int ns = gamma ? 5 : 4;
    if (!ex__check(ctx, "bn_bwd_data", ns, s))
        return INERT(ctx);
    int64_t c = xs->ndim == 4 ? xs->ne[1] : 0;
    if (!bn_4d(ctx, "bn_bwd_data", xs, NULL, "x") ||
        !bn_rows(ctx, "bn_bwd_data", stats, 2, c, "stats") ||
        !bn_4d(ctx, "bn_bwd_data", dy, xs, "dy") ||
        !bn_rows(ctx, "bn_bwd_data", red, 2, c, "red") ||
        (gamma && !bn_rows(ctx, "bn_bwd_data", gamma, 1, c, "gamma")))
        return &ctx->inert;
    if (ranks < 1)
        return ex__fail(ctx, EX_ERR_ARG, "bn_bwd_data: ranks %d must be >= 1", ranks);
    ex_tensor *r = ex__node(ctx, EX_OP_BN_BWD_DATA, EX_F32, 4, xs->ne, ns, s);
    if (!ex__is_inert(r)) {
        r->ip[0] = 1;
        r->ip[1] = xhat;
        r->ip[2] = ranks;
    }
    return r;
}
