/* Builders of the optimizer updates and of the random ops. */
#include "core/engine.h"

#define INERT(ctx) ((ctx) ? &(ctx)->inert : NULL)

static bool persistent(const ex_tensor *t)
{
    ex_kind k = t->storage->kind;
    return k == EX_K_PARAM || k == EX_K_STATE || k == EX_K_INPUT;
}

static bool like(ex_ctx *ctx, const char *op, ex_tensor *p, ex_tensor *t, const char *what,
                 bool must_persist)
{
    char sp[64], st[64];
    if (t->dtype != EX_F32 || !ex__same_shape(p, t)) {
        ex__fail(ctx, t->dtype == EX_F32 ? EX_ERR_SHAPE : EX_ERR_ARG,
                 "%s: %s %s (%s) must match param %s (f32)", op, what, ex__shape(t, st),
                 ex_dtype_name(t->dtype), ex__shape(p, sp));
        return false;
    }
    if (must_persist && !persistent(t)) {
        ex__fail(ctx, EX_ERR_ARG, "%s: %s %s must be a parameter or state tensor", op, what,
                 t->name);
        return false;
    }
    return true;
}

static bool scalars(ex_ctx *ctx, const char *op, ex_tensor *t, int64_t n, const char *what)
{
    if (t->dtype == EX_F32 && ex__numel(t) == n)
        return true;
    char s[64];
    ex__fail(ctx, EX_ERR_ARG, "%s: %s %s (%s) must be f32 with %lld elements", op, what,
             ex__shape(t, s), ex_dtype_name(t->dtype), (long long)n);
    return false;
}

/* SGD's node: sources param, grad, mom, lr and, clipped, the gradient norm as a fifth
 * (fp2 = max_norm). */
static ex_tensor *sgd_node(ex_ctx *ctx, bool clipped, ex_tensor *param, ex_tensor *grad,
                           ex_tensor *mom, ex_tensor *lr, ex_tensor *norm, float max_norm,
                           float momentum, float weight_decay, bool nesterov)
{
    ex_tensor *s[5] = {param, grad, mom, lr, norm};
    const char *op = clipped ? "sgd_clip" : "sgd";
    int nsrc = clipped ? 5 : 4;
    if (!ex__check(ctx, op, nsrc, s))
        return INERT(ctx);
    if (!like(ctx, op, param, param, "param", true) || !like(ctx, op, param, grad, "grad", false) ||
        !like(ctx, op, param, mom, "momentum buffer", true) || !scalars(ctx, op, lr, 1, "lr") ||
        (nsrc == 5 && !scalars(ctx, op, norm, 1, "norm")))
        return &ctx->inert;
    if (!(momentum >= 0.0f) || !(weight_decay >= 0.0f))
        return ex__fail(ctx, EX_ERR_ARG, "%s: momentum %g and weight decay %g must be >= 0", op,
                        (double)momentum, (double)weight_decay);
    if (nsrc == 5 && !(max_norm > 0.0f))
        return ex__fail(ctx, EX_ERR_ARG, "%s: max_norm %g must be > 0", op, (double)max_norm);
    ex_tensor *r = ex__node_into(ctx, EX_OP_SGD, param, nsrc, s);
    if (!ex__is_inert(r)) {
        r->fp[0] = momentum;
        r->fp[1] = weight_decay;
        r->fp[2] = nsrc == 5 ? max_norm : 0.0f;
        r->ip[0] = nesterov;
    }
    return r;
}

ex_tensor *ex_sgd(ex_ctx *ctx, ex_tensor *param, ex_tensor *grad, ex_tensor *mom, ex_tensor *lr,
                  float momentum, float weight_decay, bool nesterov)
{
    return sgd_node(ctx, false, param, grad, mom, lr, NULL, 0.0f, momentum, weight_decay, nesterov);
}

ex_tensor *ex_sgd_clip(ex_ctx *ctx, ex_tensor *param, ex_tensor *grad, ex_tensor *mom,
                       ex_tensor *lr, ex_tensor *norm, float max_norm, float momentum,
                       float weight_decay, bool nesterov)
{
    return sgd_node(ctx, true, param, grad, mom, lr, norm, max_norm, momentum, weight_decay,
                    nesterov);
}

ex_tensor *ex_adam(ex_ctx *ctx, ex_tensor *param, ex_tensor *grad, ex_tensor *m, ex_tensor *v,
                   ex_tensor *hyper, float beta1, float beta2, float eps, float weight_decay)
{
    ex_tensor *s[5] = {param, grad, m, v, hyper};
    if (!ex__check(ctx, "adam", 5, s))
        return INERT(ctx);
    if (!like(ctx, "adam", param, param, "param", true) ||
        !like(ctx, "adam", param, grad, "grad", false) || !like(ctx, "adam", param, m, "m", true) ||
        !like(ctx, "adam", param, v, "v", true) ||
        !scalars(ctx, "adam", hyper, 2, "hyper {lr, step}"))
        return &ctx->inert;
    if (!(beta1 >= 0.0f && beta1 < 1.0f) || !(beta2 >= 0.0f && beta2 < 1.0f) || !(eps > 0.0f) ||
        !(weight_decay >= 0.0f))
        return ex__fail(ctx, EX_ERR_ARG,
                        "adam: betas %g, %g in [0, 1), eps %g > 0, weight decay %g >= 0",
                        (double)beta1, (double)beta2, (double)eps, (double)weight_decay);
    ex_tensor *r = ex__node_into(ctx, EX_OP_ADAM, param, 5, s);
    if (!ex__is_inert(r)) {
        r->fp[0] = beta1;
        r->fp[1] = beta2;
        r->fp[2] = eps;
        r->fp[3] = weight_decay;
    }
    return r;
}

ex_tensor *ex_grad_norm(ex_ctx *ctx, int n, ex_tensor *const *g)
{
    if (!ex__check(ctx, "grad_norm", 0, NULL))
        return INERT(ctx);
    if (n < 1 || !g)
        return ex__fail(ctx, EX_ERR_ARG, "grad_norm: %d tensors", n);
    if (!ex__check(ctx, "grad_norm", n, g))
        return &ctx->inert;
    for (int i = 0; i < n; i++)
        if (g[i]->dtype != EX_F32)
            return ex__fail(ctx, EX_ERR_ARG, "grad_norm: tensor %d is %s", i,
                            ex_dtype_name(g[i]->dtype));
    int64_t one = 1;
    return ex__node(ctx, EX_OP_GRAD_NORM, EX_F32, 1, &one, n, g);
}

ex_tensor *ex_clip(ex_ctx *ctx, ex_tensor *g, ex_tensor *norm, float max_norm)
{
    ex_tensor *s[2] = {g, norm};
    if (!ex__check(ctx, "clip", 2, s))
        return INERT(ctx);
    if (g->dtype != EX_F32)
        return ex__fail(ctx, EX_ERR_ARG, "clip: g %s is %s, f32 needed", g->name,
                        ex_dtype_name(g->dtype));
    if (!scalars(ctx, "clip", norm, 1, "norm"))
        return &ctx->inert;
    if (!(max_norm > 0.0f))
        return ex__fail(ctx, EX_ERR_ARG, "clip: max_norm %g must be > 0", (double)max_norm);
    for (int d = 0; d < g->ndim; d++)
        if (g->st[d] == 0 && g->ne[d] > 1)
            return ex__fail(ctx, EX_ERR_ARG, "clip: g is a broadcast view");
    ex_tensor *r = ex__node_into(ctx, EX_OP_CLIP, g, 2, s);
    if (!ex__is_inert(r))
        r->fp[0] = max_norm;
    return r;
}

static ex_tensor *rand_node(ex_ctx *ctx, ex_op op, ex_tensor *counter, int ndim, const int64_t *ne,
                            float a, float b)
{
    const char *name = ex_op_name(op);
    if (!ex__check(ctx, name, 1, &counter))
        return INERT(ctx);
    if (counter->dtype != EX_I32 || ex__numel(counter) != 2) {
        char s[64];
        return ex__fail(ctx, EX_ERR_ARG, "%s: counter %s (%s) must be i32 [2]", name,
                        ex__shape(counter, s), ex_dtype_name(counter->dtype));
    }
    bool ok = op == EX_OP_RAND_UNIFORM ? b > a : b >= 0.0f;
    if (!ok)
        return ex__fail(ctx, EX_ERR_ARG, "%s: parameters %g, %g", name, (double)a, (double)b);
    ex_tensor *r = ex__node(ctx, op, EX_F32, ndim, ne, 1, &counter);
    if (!ex__is_inert(r)) {
        ex__random_key(ctx, r);
        r->fp[0] = a;
        r->fp[1] = b;
    }
    return r;
}

ex_tensor *ex_rand_uniform(ex_ctx *ctx, ex_tensor *counter, int ndim, const int64_t *ne, float lo,
                           float hi)
{
    return rand_node(ctx, EX_OP_RAND_UNIFORM, counter, ndim, ne, lo, hi);
}

ex_tensor *ex_rand_normal(ex_ctx *ctx, ex_tensor *counter, int ndim, const int64_t *ne, float mean,
                          float std)
{
    return rand_node(ctx, EX_OP_RAND_NORMAL, counter, ndim, ne, mean, std);
}
