/* Builders of the quantized inference ops that are not convolutions or pooling. */
#include <math.h>

#include "core/engine.h"

#define INERT(ctx) ((ctx) ? &(ctx)->inert : NULL)

/* Whether x is of dtype dt (or, with also set, of that one) and 2 or 4 dims. */
static bool typed(ex_ctx *ctx, const char *op, const char *what, ex_tensor *x, ex_dtype dt,
                  ex_dtype also)
{
    char s[64];
    if (x->dtype != dt && x->dtype != also) {
        ex__fail(ctx, EX_ERR_ARG, "%s: %s %s is %s, not %s%s%s", op, what, ex__shape(x, s),
                 ex_dtype_name(x->dtype), ex_dtype_name(dt), also != dt ? " or " : "",
                 also != dt ? ex_dtype_name(also) : "");
        return false;
    }
    if (x->ndim != 2 && x->ndim != 4) {
        ex__fail(ctx, EX_ERR_SHAPE, "%s: %s %s must be [N, C] or [N, C, H, W]", op, what,
                 ex__shape(x, s));
        return false;
    }
    return true;
}

/* A per-channel operand of x: f32 [C] or [1]. */
static bool channels_ok(ex_ctx *ctx, const char *op, const char *what, ex_tensor *v,
                        const ex_tensor *x)
{
    if (v->dtype == EX_F32 && v->ndim == 1 && (v->ne[0] == x->ne[1] || v->ne[0] == 1))
        return true;
    char sv[64], sx[64];
    ex__fail(ctx, v->dtype == EX_F32 ? EX_ERR_SHAPE : EX_ERR_ARG,
             "%s: %s %s (%s) must be f32 [%lld] or [1] for x %s", op, what, ex__shape(v, sv),
             ex_dtype_name(v->dtype), (long long)x->ne[1], ex__shape(x, sx));
    return false;
}

/* x and a per-channel operand v to a node of dtype out and x's shape. */
static ex_tensor *per_channel(ex_ctx *ctx, ex_op op, const char *what, ex_tensor *x, ex_tensor *v,
                              ex_dtype in, ex_dtype in_also, ex_dtype out)
{
    const char *name = ex_op_name(op);
    ex_tensor *s[2] = {x, v};
    if (!ex__check(ctx, name, 2, s))
        return INERT(ctx);
    if (!typed(ctx, name, "x", x, in, in_also) || !channels_ok(ctx, name, what, v, x))
        return &ctx->inert;
    return ex__node(ctx, op, out, x->ndim, x->ne, 2, s);
}

ex_tensor *ex_quantize(ex_ctx *ctx, ex_tensor *x, ex_tensor *inv_scale)
{
    return per_channel(ctx, EX_OP_QUANTIZE, "inv_scale", x, inv_scale, EX_F32, EX_F32, EX_I8);
}

ex_tensor *ex_dequantize(ex_ctx *ctx, ex_tensor *x, ex_tensor *scale)
{
    return per_channel(ctx, EX_OP_DEQUANTIZE, "scale", x, scale, EX_I8, EX_I32, EX_F32);
}

ex_tensor *ex_requantize(ex_ctx *ctx, ex_tensor *x, ex_tensor *multiplier, bool relu)
{
    ex_tensor *y =
        per_channel(ctx, EX_OP_REQUANTIZE, "multiplier", x, multiplier, EX_I8, EX_I32, EX_I8);
    if (y && !ex__is_inert(y))
        y->ip[0] = relu;
    return y;
}

ex_tensor *ex_qadd(ex_ctx *ctx, ex_tensor *a, float ma, ex_tensor *b, float mb, bool relu)
{
    ex_tensor *s[2] = {a, b};
    if (!ex__check(ctx, "qadd", 2, s))
        return INERT(ctx);
    if (!typed(ctx, "qadd", "a", a, EX_I8, EX_I8) || !typed(ctx, "qadd", "b", b, EX_I8, EX_I8))
        return &ctx->inert;
    if (!ex__same_shape(a, b)) {
        char sa[64], sb[64];
        return ex__fail(ctx, EX_ERR_SHAPE, "qadd: a %s and b %s differ in shape", ex__shape(a, sa),
                        ex__shape(b, sb));
    }
    if (!isfinite(ma) || !isfinite(mb))
        return ex__fail(ctx, EX_ERR_ARG, "qadd: multipliers %g and %g must be finite", (double)ma,
                        (double)mb);
    ex_tensor *y = ex__node(ctx, EX_OP_QADD, EX_I8, a->ndim, a->ne, 2, s);
    if (!ex__is_inert(y)) {
        y->fp[0] = ma;
        y->fp[1] = mb;
        y->ip[0] = relu;
    }
    return y;
}

ex_tensor *ex_qconcat(ex_ctx *ctx, int n, ex_tensor *const *parts, ex_tensor *multipliers)
{
    if (n < 1 || n > EX_MAX_QCONCAT || !parts)
        return ex__fail(ctx, EX_ERR_ARG, "qconcat: %d parts (1 to %d)", n, EX_MAX_QCONCAT);
    ex_tensor *s[EX_MAX_QCONCAT + 1];
    for (int i = 0; i < n; i++)
        s[i] = parts[i];
    s[n] = multipliers;
    if (!ex__check(ctx, "qconcat", n + 1, s))
        return INERT(ctx);
    int64_t ne[4] = {0, 0, 0, 0};
    for (int i = 0; i < n; i++) {
        ex_tensor *p = parts[i];
        char sp[64];
        if (p->dtype != EX_I8 || p->ndim != 4)
            return ex__fail(ctx, p->dtype == EX_I8 ? EX_ERR_SHAPE : EX_ERR_ARG,
                            "qconcat: part %d %s (%s) must be i8 [N, C, H, W]", i, ex__shape(p, sp),
                            ex_dtype_name(p->dtype));
        if (i > 0 && (p->ne[0] != ne[0] || p->ne[2] != ne[2] || p->ne[3] != ne[3]))
            return ex__fail(ctx, EX_ERR_SHAPE,
                            "qconcat: part %d %s differs from part 0 in N, H "
                            "or W",
                            i, ex__shape(p, sp));
        ne[0] = p->ne[0];
        ne[1] += p->ne[1];
        ne[2] = p->ne[2];
        ne[3] = p->ne[3];
    }
    if (multipliers->dtype != EX_F32 || multipliers->ndim != 1 || multipliers->ne[0] != n) {
        char sm[64];
        return ex__fail(ctx, EX_ERR_SHAPE, "qconcat: multipliers %s (%s) must be f32 [%d]",
                        ex__shape(multipliers, sm), ex_dtype_name(multipliers->dtype), n);
    }
    return ex__node(ctx, EX_OP_QCONCAT, EX_I8, 4, ne, n + 1, s);
}

ex_tensor *ex_qrelu(ex_ctx *ctx, ex_tensor *x)
{
    if (!ex__check(ctx, "qrelu", 1, &x))
        return INERT(ctx);
    if (!typed(ctx, "qrelu", "x", x, EX_I8, EX_I8))
        return &ctx->inert;
    return ex__node(ctx, EX_OP_QRELU, EX_I8, x->ndim, x->ne, 1, &x);
}
