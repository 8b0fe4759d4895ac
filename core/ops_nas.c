/* Builders of the NAS ops: mixed sum, Gumbel-softmax, hardmax, entropy, top-k mask. */
#include "core/engine.h"

#define INERT(ctx) ((ctx) ? &(ctx)->inert : NULL)

static bool vec_f32(ex_ctx *ctx, const char *op, const char *what, ex_tensor *t)
{
    if (t->dtype == EX_F32 && t->ndim == 1)
        return true;
    char s[64];
    ex__fail(ctx, t->dtype == EX_F32 ? EX_ERR_SHAPE : EX_ERR_ARG,
             "%s: %s %s (%s) must be an f32 vector", op, what, ex__shape(t, s),
             ex_dtype_name(t->dtype));
    return false;
}

static bool candidates_ok(ex_ctx *ctx, ex_tensor *w, ex_tensor *mask, int n, ex_tensor *const *x,
                          const int *idx)
{
    char a[64], b[64];
    if (n < 1 || n > EX_MAX_CANDIDATES || !x || !idx) {
        ex__fail(ctx, EX_ERR_ARG, "mixed_sum: %d candidates (1 to %d, with outputs and indices)", n,
                 EX_MAX_CANDIDATES);
        return false;
    }
    if (!ex__check(ctx, "mixed_sum", n, x))
        return false;
    if (!vec_f32(ctx, "mixed_sum", "w", w) || !vec_f32(ctx, "mixed_sum", "mask", mask))
        return false;
    if (mask->ne[0] != w->ne[0]) {
        ex__fail(ctx, EX_ERR_SHAPE, "mixed_sum: w %s and mask %s differ", ex__shape(w, a),
                 ex__shape(mask, b));
        return false;
    }
    for (int j = 0; j < n; j++) {
        if (x[j]->dtype != EX_F32 || !ex__same_shape(x[j], x[0])) {
            ex__fail(ctx, EX_ERR_SHAPE, "mixed_sum: candidate %d is %s, candidate 0 %s", j,
                     ex__shape(x[j], a), ex__shape(x[0], b));
            return false;
        }
        bool dup = false;
        for (int i = 0; i < j; i++)
            dup |= idx[i] == idx[j];
        if (idx[j] < 0 || idx[j] >= w->ne[0] || dup) {
            ex__fail(ctx, EX_ERR_ARG,
                     "mixed_sum: weight index %d of candidate %d (w %s, "
                     "indices must be distinct)",
                     idx[j], j, ex__shape(w, a));
            return false;
        }
    }
    return true;
}

ex_tensor *ex_mixed_sum(ex_ctx *ctx, ex_tensor *w, ex_tensor *mask, int n, ex_tensor *const *x,
                        const int *idx)
{
    ex_tensor *wm[2] = {w, mask};
    if (!ex__check(ctx, "mixed_sum", 2, wm))
        return INERT(ctx);
    if (!candidates_ok(ctx, w, mask, n, x, idx))
        return &ctx->inert;
    ex_tensor *s[EX_MAX_CANDIDATES + 2] = {w, mask};
    for (int j = 0; j < n; j++)
        s[2 + j] = x[j];
    ex_tensor *y = ex__node(ctx, EX_OP_MIXED_SUM, EX_F32, x[0]->ndim, x[0]->ne, n + 2, s);
    if (!ex__is_inert(y))
        for (int j = 0; j < n; j++)
            y->ip[j] = idx[j];
    return y;
}

static bool matrix_f32(ex_ctx *ctx, const char *op, ex_tensor *t)
{
    if (t->dtype == EX_F32 && t->ndim == 2)
        return true;
    char s[64];
    ex__fail(ctx, t->dtype == EX_F32 ? EX_ERR_SHAPE : EX_ERR_ARG, "%s: %s (%s) must be f32 [E, K]",
             op, ex__shape(t, s), ex_dtype_name(t->dtype));
    return false;
}

ex_tensor *ex_gumbel_softmax(ex_ctx *ctx, ex_tensor *logits, ex_tensor *tau, ex_tensor *counter,
                             bool hard)
{
    ex_tensor *s[3] = {logits, tau, counter};
    if (!ex__check(ctx, "gumbel_softmax", 3, s))
        return INERT(ctx);
    if (!matrix_f32(ctx, "gumbel_softmax", logits))
        return &ctx->inert;
    char sh[64];
    if (tau->dtype != EX_F32 || ex__numel(tau) != 1)
        return ex__fail(ctx, EX_ERR_ARG, "gumbel_softmax: tau %s (%s) must be f32 [1]",
                        ex__shape(tau, sh), ex_dtype_name(tau->dtype));
    if (counter->dtype != EX_I32 || ex__numel(counter) != 2)
        return ex__fail(ctx, EX_ERR_ARG, "gumbel_softmax: counter %s (%s) must be i32 [2]",
                        ex__shape(counter, sh), ex_dtype_name(counter->dtype));
    ex_tensor *y = ex__node(ctx, EX_OP_GUMBEL_SOFTMAX, EX_F32, 2, logits->ne, 3, s);
    if (ex__is_inert(y))
        return y;
    ex__random_key(ctx, y);
    return hard ? ex_hardmax_st(ctx, y) : y;
}

ex_tensor *ex_hardmax_st(ex_ctx *ctx, ex_tensor *x)
{
    if (!ex__check(ctx, "hardmax_st", 1, &x))
        return INERT(ctx);
    if (!matrix_f32(ctx, "hardmax_st", x))
        return &ctx->inert;
    return ex__node(ctx, EX_OP_HARDMAX_ST, EX_F32, 2, x->ne, 1, &x);
}

ex_tensor *ex_entropy(ex_ctx *ctx, ex_tensor *p)
{
    if (!ex__check(ctx, "entropy", 1, &p))
        return INERT(ctx);
    if (!matrix_f32(ctx, "entropy", p))
        return &ctx->inert;
    int64_t ne[2] = {p->ne[0], 1};
    return ex__node(ctx, EX_OP_ENTROPY, EX_F32, 2, ne, 1, &p);
}

ex_tensor *ex_topk_mask(ex_ctx *ctx, ex_tensor *w, int k, float threshold)
{
    if (!ex__check(ctx, "topk_mask", 1, &w))
        return INERT(ctx);
    if (!matrix_f32(ctx, "topk_mask", w))
        return &ctx->inert;
    if (k < 1) {
        char s[64];
        return ex__fail(ctx, EX_ERR_ARG, "topk_mask: k %d < 1 for w %s", k, ex__shape(w, s));
    }
    ex_tensor *m = ex__node(ctx, EX_OP_TOPK_MASK, EX_F32, 2, w->ne, 1, &w);
    if (!ex__is_inert(m)) {
        m->ip[0] = k;
        m->fp[0] = threshold;
    }
    return m;
}
