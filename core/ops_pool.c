/* Builders of the pooling ops. */
#include "core/engine.h"

#define INERT(ctx) ((ctx) ? &(ctx)->inert : NULL)

static ex_tensor *pool(ex_ctx *ctx, ex_op op, ex_tensor *x, const ex_pool_params *p)
{
    const char *name = ex_op_name(op);
    if (!ex__check(ctx, name, 1, &x))
        return INERT(ctx);
    char s[64];
    if (x->dtype != EX_F32 || x->ndim != 4)
        return ex__fail(ctx, x->dtype == EX_F32 ? EX_ERR_SHAPE : EX_ERR_ARG,
                        "%s: x %s (%s) must be f32 [N, C, H, W]", name, ex__shape(x, s),
                        ex_dtype_name(x->dtype));
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
    ex_tensor *y = ex__node(ctx, op, EX_F32, 4, ne, 1, &x);
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

ex_tensor *ex_global_avg_pool(ex_ctx *ctx, ex_tensor *x)
{
    if (!ex__check(ctx, "global_avg_pool", 1, &x))
        return INERT(ctx);
    if (x->dtype != EX_F32 || x->ndim != 4) {
        char s[64];
        return ex__fail(ctx, x->dtype == EX_F32 ? EX_ERR_SHAPE : EX_ERR_ARG,
                        "global_avg_pool: x %s (%s) must be f32 [N, C, H, W]", ex__shape(x, s),
                        ex_dtype_name(x->dtype));
    }
    int64_t ne[4] = {x->ne[0], x->ne[1], 1, 1};
    return ex__node(ctx, EX_OP_GLOBAL_AVG_POOL, EX_F32, 4, ne, 1, &x);
}
