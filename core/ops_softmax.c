/* Builders of softmax, log-softmax, cross-entropy and accuracy. */
#include "core/engine.h"

#define INERT(ctx) ((ctx) ? &(ctx)->inert : NULL)

static ex_tensor *rowwise(ex_ctx *ctx, ex_op op, ex_tensor *x)
{
    if (!ex__check(ctx, ex_op_name(op), 1, &x))
        return INERT(ctx);
    if (x->dtype != EX_F32) {
        char s[64];
        return ex__fail(ctx, EX_ERR_ARG, "%s: x %s is %s, f32 needed", ex_op_name(op),
                        ex__shape(x, s), ex_dtype_name(x->dtype));
    }
    return ex__node(ctx, op, EX_F32, x->ndim, x->ne, 1, &x);
}

ex_tensor *ex_softmax(ex_ctx *ctx, ex_tensor *x)
{
    return rowwise(ctx, EX_OP_SOFTMAX, x);
}

ex_tensor *ex_log_softmax(ex_ctx *ctx, ex_tensor *x)
{
    return rowwise(ctx, EX_OP_LOG_SOFTMAX, x);
}

static ex_tensor *classify(ex_ctx *ctx, ex_op op, ex_tensor *logits, ex_tensor *labels)
{
    const char *name = ex_op_name(op);
    ex_tensor *s[2] = {logits, labels};
    if (!ex__check(ctx, name, 2, s))
        return INERT(ctx);
    char sl[64], sy[64];
    bool dtypes = logits->dtype == EX_F32 && labels->dtype == EX_I32;
    if (!dtypes || logits->ndim != 2 || labels->ndim != 1 || labels->ne[0] != logits->ne[0])
        return ex__fail(ctx, dtypes ? EX_ERR_SHAPE : EX_ERR_ARG,
                        "%s: logits %s (%s) and labels %s (%s): need f32 [N, K] and i32 [N]", name,
                        ex__shape(logits, sl), ex_dtype_name(logits->dtype), ex__shape(labels, sy),
                        ex_dtype_name(labels->dtype));
    int64_t one = 1;
    return ex__node(ctx, op, EX_F32, 1, &one, 2, s);
}

ex_tensor *ex_cross_entropy(ex_ctx *ctx, ex_tensor *logits, ex_tensor *labels)
{
    return classify(ctx, EX_OP_CROSS_ENTROPY, logits, labels);
}

ex_tensor *ex_cross_entropy_smoothed(ex_ctx *ctx, ex_tensor *logits, ex_tensor *labels,
                                     float smoothing)
{
    ex_tensor *ce = ex_cross_entropy(ctx, logits, labels);
    if (ex__is_inert(ce) || smoothing == 0.0f)
        return ce;
    if (!(smoothing > 0.0f && smoothing < 1.0f))
        return ex__fail(ctx, EX_ERR_ARG, "cross_entropy_smoothed: smoothing %g outside [0, 1)",
                        (double)smoothing);
    /* the uniform target's cross-entropy is the mean of -log p over every class and row */
    int64_t one = 1;
    ex_tensor *mean_logp = ex_reshape(ctx, ex_mean(ctx, ex_log_softmax(ctx, logits), 3u), 1, &one);
    return ex_axpy(ctx, -smoothing, mean_logp, ex_scale(ctx, ce, 1.0f - smoothing));
}

ex_tensor *ex_accuracy(ex_ctx *ctx, ex_tensor *logits, ex_tensor *labels)
{
    return classify(ctx, EX_OP_ACCURACY, logits, labels);
}
