/* Builders of the pooling ops. */
#include "core/engine.h"

#define INERT(ctx) ((ctx) ? &(ctx)->inert : NULL)

/* The dtype a pooling op reads and writes. */
static ex_dtype pool_dtype(ex_op op)
{
    return op == EX_OP_QMAX_POOL || op == EX_OP_QAVG_POOL || op == EX_OP_QGLOBAL_AVG_POOL ? EX_I8
                                                                                          : EX_F32;
}

static bool nchw_ok(ex_ctx *ctx, const char *name, ex_tensor *x, ex_dtype dt)
{
    if (x->dtype == dt && x->ndim == 4)
        return true;
    char s[64];
    ex__fail(ctx, x->dtype == dt ? EX_ERR_SHAPE : EX_ERR_ARG,
             "%s: x %s (%s) must be %s [N, C, H, W]", name, ex__shape(x, s),
             ex_dtype_name(x->dtype), ex_dtype_name(dt));
    return false;
}

static ex_tensor *pool(ex_ctx *ctx, ex_op op, ex_tensor *x, const ex_pool_params *p)
{
    const char *name = ex_op_name(op);
    if (!ex__check(ctx, name, 1, &x))
        return INERT(ctx);
    char s[64];
    if (!nchw_ok(ctx, name, x, pool_dtype(op)))
        return &ctx->inert;
    if (!p)
        return ex__fail(ctx, EX_ERR_ARG, "%s: params NULL", name);
    int64_t out[2];
    for (int i = 0; i < 2; i++) {
        int k = p->kernel[i], st = p->stride[i], pd = p->pad[i];
        if (k < 1 || st < 1 || pd < 0 || 2 * pd > k)
            return ex__fail(ctx, EX_ERR_ARG,
                            "%s: kernel %dx%d, stride %dx%d, pad %dx%d (pad at most half the "
                            "kernel) on x %s",
                            name, p->kernel[0], p->kernel[1], p->stride[0], p->stride[1], p->pad[0],
                            p->pad[1], ex__shape(x, s));
        int64_t in = x->ne[2 + i] + 2 * pd;
        out[i] = in < k ? 0 : (in - k) / st + 1;
        if (out[i] < 1)
            return ex__fail(ctx, EX_ERR_SHAPE, "%s: kernel %dx%d does not fit x %s", name,
                            p->kernel[0], p->kernel[1], ex__shape(x, s));
    }
    int64_t ne[4] = {x->ne[0], x->ne[1], out[0], out[1]};
    ex_tensor *y = ex__node(ctx, op, pool_dtype(op), 4, ne, 1, &x);
    if (ex__is_inert(y))
        return y;
    for (int i = 0; i < 2; i++) {
        y->ip[0 + i] = p->kernel[i];
        y->ip[2 + i] = p->stride[i];
        y->ip[4 + i] = p->pad[i];
    }
    return y;
}

ex_tensor *ex_avg_pool(ex_ctx *ctx, ex_tensor *x, const ex_pool_params *p)
{
    return pool(ctx, EX_OP_AVG_POOL, x, p);
}

ex_tensor *ex_max_pool(ex_ctx *ctx, ex_tensor *x, const ex_pool_params *p)
{
    return pool(ctx, EX_OP_MAX_POOL, x, p);
}

static ex_tensor *global_pool(ex_ctx *ctx, ex_op op, ex_tensor *x)
{
    if (!ex__check(ctx, ex_op_name(op), 1, &x))
        return INERT(ctx);
    if (!nchw_ok(ctx, ex_op_name(op), x, pool_dtype(op)))
        return &ctx->inert;
    int64_t ne[4] = {x->ne[0], x->ne[1], 1, 1};
    return ex__node(ctx, op, pool_dtype(op), 4, ne, 1, &x);
}

ex_tensor *ex_global_avg_pool(ex_ctx *ctx, ex_tensor *x)
{
    return global_pool(ctx, EX_OP_GLOBAL_AVG_POOL, x);
}

ex_tensor *ex_qmax_pool(ex_ctx *ctx, ex_tensor *x, const ex_pool_params *p)
{
    return pool(ctx, EX_OP_QMAX_POOL, x, p);
}

ex_tensor *ex_qavg_pool(ex_ctx *ctx, ex_tensor *x, const ex_pool_params *p)
{
    return pool(ctx, EX_OP_QAVG_POOL, x, p);
}

ex_tensor *ex_qglobal_avg_pool(ex_ctx *ctx, ex_tensor *x)
{
    return global_pool(ctx, EX_OP_QGLOBAL_AVG_POOL, x);
}
