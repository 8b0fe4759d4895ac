/* Builders of the element-wise ops and of the reductions. */
#include <string.h>

#include "core/engine.h"

#define INERT(ctx) ((ctx) ? &(ctx)->inert : NULL)

static bool need_f32(ex_ctx *ctx, const char *op, ex_tensor *t, const char *what)
{
    if (t->dtype == EX_F32)
        return true;
    char s[64];
    ex__fail(ctx, EX_ERR_ARG, "%s: %s %s is %s, f32 needed", op, what, ex__shape(t, s),
             ex_dtype_name(t->dtype));
    return false;
}

static ex_tensor *binary(ex_ctx *ctx, ex_op op, ex_tensor *a, ex_tensor *b)
{
    const char *name = ex_op_name(op);
    ex_tensor *s[2] = {a, b};
    if (!ex__check(ctx, name, 2, s))
        return INERT(ctx);
    if (!need_f32(ctx, name, a, "a") || !need_f32(ctx, name, b, "b"))
        return &ctx->inert;
    int nd;
    int64_t ne[EX_MAX_DIMS];
    if (!ex__broadcast_shape(a, b, &nd, ne)) {
        char sa[64], sb[64];
        return ex__fail(ctx, EX_ERR_SHAPE, "%s: a %s and b %s do not broadcast", name,
                        ex__shape(a, sa), ex__shape(b, sb));
    }
    ex_tensor *v[2] = {ex_broadcast(ctx, a, nd, ne), ex_broadcast(ctx, b, nd, ne)};
    return ex__node(ctx, op, EX_F32, nd, ne, 2, v);
}

ex_tensor *ex_add(ex_ctx *ctx, ex_tensor *a, ex_tensor *b)
{
    return binary(ctx, EX_OP_ADD, a, b);
}

ex_tensor *ex_sub(ex_ctx *ctx, ex_tensor *a, ex_tensor *b)
{
    return binary(ctx, EX_OP_SUB, a, b);
}

ex_tensor *ex_mul(ex_ctx *ctx, ex_tensor *a, ex_tensor *b)
{
    return binary(ctx, EX_OP_MUL, a, b);
}

static ex_tensor *unary(ex_ctx *ctx, ex_op op, ex_tensor *x)
{
    if (!ex__check(ctx, ex_op_name(op), 1, &x))
        return INERT(ctx);
    if (!need_f32(ctx, ex_op_name(op), x, "x"))
        return &ctx->inert;
    return ex__node(ctx, op, EX_F32, x->ndim, x->ne, 1, &x);
}

ex_tensor *ex_scale(ex_ctx *ctx, ex_tensor *x, float s)
{
    ex_tensor *y = unary(ctx, EX_OP_SCALE, x);
    if (!ex__is_inert(y) && y)
        y->fp[0] = s;
    return y;
}

ex_tensor *ex_relu(ex_ctx *ctx, ex_tensor *x)
{
    return unary(ctx, EX_OP_RELU, x);
}

ex_tensor *ex_axpy(ex_ctx *ctx, float a, ex_tensor *x, ex_tensor *y)
{
    ex_tensor *s[2] = {x, y};
    if (!ex__check(ctx, "axpy", 2, s))
        return INERT(ctx);
    if (!need_f32(ctx, "axpy", x, "x") || !need_f32(ctx, "axpy", y, "y"))
        return &ctx->inert;
    if (!ex__same_shape(x, y)) {
        char sx[64], sy[64];
        return ex__fail(ctx, EX_ERR_SHAPE, "axpy: x %s and y %s differ", ex__shape(x, sx),
                        ex__shape(y, sy));
    }
    ex_tensor *r = ex__node(ctx, EX_OP_AXPY, EX_F32, x->ndim, x->ne, 2, s);
    if (!ex__is_inert(r))
        r->fp[0] = a;
    return r;
}

ex_tensor *ex_fill(ex_ctx *ctx, int ndim, const int64_t *ne, float value)
{
    if (!ex__check(ctx, "fill", 0, NULL))
        return INERT(ctx);
    ex_tensor *r = ex__node(ctx, EX_OP_FILL, EX_F32, ndim, ne, 0, NULL);
    if (!ex__is_inert(r))
        r->fp[0] = value;
    return r;
}

ex_tensor *ex__unwritten(ex_ctx *ctx, int ndim, const int64_t *ne)
{
    ex_tensor *r = ex_fill(ctx, ndim, ne, 0.0f);
    if (!ex__is_inert(r))
        r->ip[0] = 1;
    return r;
}

ex_tensor *ex__add_into(ex_ctx *ctx, ex_tensor *a, ex_tensor *b, ex_tensor *dst)
{
    ex_tensor *s[3] = {a, b, dst};
    if (!ex__check(ctx, "add_into", 3, s))
        return INERT(ctx);
    if (!ex__same_shape(a, b) || !ex__same_shape(a, dst) || a->dtype != EX_F32 ||
        b->dtype != EX_F32 || dst->dtype != EX_F32) {
        char sa[64], sb[64], sd[64];
        return ex__fail(ctx, EX_ERR_SHAPE, "add_into: a %s, b %s into dst %s (f32, one shape)",
                        ex__shape(a, sa), ex__shape(b, sb), ex__shape(dst, sd));
    }
    for (int d = 0; d < dst->ndim; d++)
        if (dst->st[d] == 0 && dst->ne[d] > 1)
            return ex__fail(ctx, EX_ERR_ARG, "add_into: dst is a broadcast view");
    return ex__node_into(ctx, EX_OP_ADD, dst, 2, s);
}

ex_tensor *ex_copy(ex_ctx *ctx, ex_tensor *x)
{
    if (!ex__check(ctx, "copy", 1, &x))
        return INERT(ctx);
    return ex__node(ctx, EX_OP_COPY, x->dtype, x->ndim, x->ne, 1, &x);
}

ex_tensor *ex_copy_into(ex_ctx *ctx, ex_tensor *x, ex_tensor *dst)
{
    ex_tensor *s[2] = {x, dst};
    if (!ex__check(ctx, "copy_into", 2, s))
        return INERT(ctx);
    if (!ex__same_shape(x, dst) || x->dtype != dst->dtype) {
        char sx[64], sd[64];
        return ex__fail(ctx, EX_ERR_SHAPE, "copy_into: x %s (%s) into dst %s (%s)",
                        ex__shape(x, sx), ex_dtype_name(x->dtype), ex__shape(dst, sd),
                        ex_dtype_name(dst->dtype));
    }
    for (int d = 0; d < dst->ndim; d++)
        if (dst->st[d] == 0 && dst->ne[d] > 1)
            return ex__fail(ctx, EX_ERR_ARG, "copy_into: dst is a broadcast view");
    return ex__node_into(ctx, EX_OP_COPY, dst, 1, &x);
}

ex_tensor *ex_drop_path(ex_ctx *ctx, ex_tensor *x, ex_tensor *counter, float keep_prob)
{
    ex_tensor *s[2] = {x, counter};
    if (!ex__check(ctx, "drop_path", 2, s))
        return INERT(ctx);
    if (!need_f32(ctx, "drop_path", x, "x"))
        return &ctx->inert;
    if (counter->dtype != EX_I32 || ex__numel(counter) != 2) {
        char sc[64];
        return ex__fail(ctx, EX_ERR_ARG, "drop_path: counter %s (%s) must be i32 [2]",
                        ex__shape(counter, sc), ex_dtype_name(counter->dtype));
    }
    if (!(keep_prob > 0.0f && keep_prob <= 1.0f))
        return ex__fail(ctx, EX_ERR_ARG, "drop_path: keep_prob %g outside (0, 1]",
                        (double)keep_prob);
    ex_tensor *r = ex__node(ctx, EX_OP_DROP_PATH, EX_F32, x->ndim, x->ne, 2, s);
    if (!ex__is_inert(r)) {
        ex__random_key(ctx, r);
        r->fp[0] = keep_prob;
    }
    return r;
}

/* ---- reductions ---- */

static ex_tensor *reduce(ex_ctx *ctx, ex_op op, ex_tensor *x, unsigned axes)
{
    const char *name = ex_op_name(op);
    if (!ex__check(ctx, name, 1, &x))
        return INERT(ctx);
    if (!need_f32(ctx, name, x, "x"))
        return &ctx->inert;
    if (axes == 0 || axes >= (1u << x->ndim)) {
        char s[64];
        return ex__fail(ctx, EX_ERR_ARG, "%s: axes mask 0x%x does not fit x %s", name, axes,
                        ex__shape(x, s));
    }
    int64_t ne[EX_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++)
        ne[d] = (axes >> d) & 1 ? 1 : x->ne[d];
    ex_tensor *r = ex__node(ctx, op, EX_F32, x->ndim, ne, 1, &x);
    if (!ex__is_inert(r))
        r->ip[0] = (int32_t)axes;
    return r;
}

ex_tensor *ex_sum(ex_ctx *ctx, ex_tensor *x, unsigned axes)
{
    return reduce(ctx, EX_OP_SUM, x, axes);
}

ex_tensor *ex_mean(ex_ctx *ctx, ex_tensor *x, unsigned axes)
{
    return reduce(ctx, EX_OP_MEAN, x, axes);
}

ex_tensor *ex_max(ex_ctx *ctx, ex_tensor *x, unsigned axes)
{
    return reduce(ctx, EX_OP_MAX, x, axes);
}

ex_tensor *ex_sum_to(ex_ctx *ctx, ex_tensor *x, int ndim, const int64_t *ne)
{
    if (!ex__check(ctx, "sum_to", 1, &x))
        return INERT(ctx);
    if (!ne)
        return ex__fail(ctx, EX_ERR_ARG, "sum_to: shape is NULL");
    if (ndim < 1 || ndim > x->ndim) {
        char s[64];
        return ex__fail(ctx, EX_ERR_SHAPE, "sum_to: %d target dimensions for x %s", ndim,
                        ex__shape(x, s));
    }
    unsigned axes = 0;
    for (int d = 0; d < x->ndim; d++) {
        int dt = d - (x->ndim - ndim);
        int64_t want = dt >= 0 ? ne[dt] : 1;
        if (want == x->ne[d])
            continue;
        if (want != 1) {
            char s[64], v[64];
            return ex__fail(ctx, EX_ERR_SHAPE, "sum_to: x %s does not reduce to %s",
                            ex__shape(x, s), ex__shape_ne(ndim, ne, v));
        }
        axes |= 1u << d;
    }
    ex_tensor *r = axes ? ex_sum(ctx, x, axes) : x;
    return ex_reshape(ctx, r, ndim, ne);
}
