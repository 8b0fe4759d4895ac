/* Builders of the convolutions and the GEMM-shaped ops. */
#include "core/engine.h"

#define INERT(ctx) ((ctx) ? &(ctx)->inert : NULL)

static bool f32_nd(ex_ctx *ctx, const char *op, const char *what, ex_tensor *t, int nd)
{
    if (t->dtype == EX_F32 && t->ndim == nd)
        return true;
    char s[64];
    ex__fail(ctx, t->dtype != EX_F32 ? EX_ERR_ARG : EX_ERR_SHAPE,
             "%s: %s %s (%s) must be f32 with %d dimensions", op, what, ex__shape(t, s),
             ex_dtype_name(t->dtype), nd);
    return false;
}

static bool geometry_ok(ex_ctx *ctx, const char *op, const ex_conv_params *p)
{
    if (!p) {
        ex__fail(ctx, EX_ERR_ARG, "%s: params NULL", op);
        return false;
    }
    for (int i = 0; i < 2; i++)
        if (p->stride[i] < 1 || p->dilation[i] < 1 || p->pad[i] < 0) {
            ex__fail(ctx, EX_ERR_ARG, "%s: stride %dx%d, pad %dx%d, dilation %dx%d", op,
                     p->stride[0], p->stride[1], p->pad[0], p->pad[1], p->dilation[0],
                     p->dilation[1]);
            return false;
        }
    return true;
}

/* Output size along one axis, or 0 when the kernel does not fit the padded input. */
static int64_t conv_out(int64_t in, int64_t k, int stride, int pad, int dil)
{
    int64_t span = (int64_t)dil * (k - 1) + 1;
    if (in + 2 * pad < span)
        return 0;
    return (in + 2 * pad - span) / stride + 1;
}

/* A convolution node; relu (depthwise only) convolves max(x, 0) instead of x (ip6). */
static ex_tensor *conv_node(ex_ctx *ctx, ex_op op, const char *name, ex_tensor *x, ex_tensor *w,
                            const ex_conv_params *p, bool relu)
{
    ex_tensor *s[2] = {x, w};
    if (!ex__check(ctx, name, 2, s))
        return INERT(ctx);
    if (!f32_nd(ctx, name, "x", x, 4) || !f32_nd(ctx, name, "w", w, 4) ||
        !geometry_ok(ctx, name, p))
        return &ctx->inert;
    char sx[64], sw[64];
    bool dw = op == EX_OP_DWCONV2D;
    bool ok = dw ? (w->ne[0] == x->ne[1] && w->ne[1] == 1) : w->ne[1] == x->ne[1];
    if (!ok)
        return ex__fail(ctx, EX_ERR_SHAPE, "%s: x %s and w %s: channels do not match", name,
                        ex__shape(x, sx), ex__shape(w, sw));
    int64_t ho = conv_out(x->ne[2], w->ne[2], p->stride[0], p->pad[0], p->dilation[0]);
    int64_t wo = conv_out(x->ne[3], w->ne[3], p->stride[1], p->pad[1], p->dilation[1]);
    if (ho < 1 || wo < 1)
        return ex__fail(ctx, EX_ERR_SHAPE, "%s: kernel of w %s does not fit x %s padded by %dx%d",
                        name, ex__shape(w, sw), ex__shape(x, sx), p->pad[0], p->pad[1]);
    int64_t ne[4] = {x->ne[0], dw ? x->ne[1] : w->ne[0], ho, wo};
    ex_tensor *y = ex__node(ctx, op, EX_F32, 4, ne, 2, s);
    if (ex__is_inert(y))
        return y;
    for (int i = 0; i < 2; i++) {
        y->ip[0 + i] = p->stride[i];
        y->ip[2 + i] = p->pad[i];
        y->ip[4 + i] = p->dilation[i];
    }
    y->ip[6] = relu;
    return y;
}

ex_tensor *ex_conv2d(ex_ctx *ctx, ex_tensor *x, ex_tensor *w, const ex_conv_params *p)
{
    return conv_node(ctx, EX_OP_CONV2D, "conv2d", x, w, p, false);
}

ex_tensor *ex_dwconv2d(ex_ctx *ctx, ex_tensor *x, ex_tensor *w, const ex_conv_params *p)
{
    return conv_node(ctx, EX_OP_DWCONV2D, "dwconv2d", x, w, p, false);
}

ex_tensor *ex_dwconv2d_relu(ex_ctx *ctx, ex_tensor *x, ex_tensor *w, const ex_conv_params *p)
{
    return conv_node(ctx, EX_OP_DWCONV2D, "dwconv2d_relu", x, w, p, true);
}

ex_tensor *ex_pwconv(ex_ctx *ctx, ex_tensor *x, ex_tensor *w)
{
    ex_tensor *s[2] = {x, w};
    if (!ex__check(ctx, "pwconv", 2, s))
        return INERT(ctx);
    if (!f32_nd(ctx, "pwconv", "x", x, 4) || !f32_nd(ctx, "pwconv", "w", w, 2))
        return &ctx->inert;
    if (w->ne[1] != x->ne[1]) {
        char sx[64], sw[64];
        return ex__fail(ctx, EX_ERR_SHAPE, "pwconv: x %s and w %s: channels do not match",
                        ex__shape(x, sx), ex__shape(w, sw));
    }
    int64_t ne[4] = {x->ne[0], w->ne[0], x->ne[2], x->ne[3]};
    return ex__node(ctx, EX_OP_PWCONV, EX_F32, 4, ne, 2, s);
}

ex_tensor *ex_matmul(ex_ctx *ctx, ex_tensor *a, ex_tensor *b)
{
    ex_tensor *s[2] = {a, b};
    if (!ex__check(ctx, "matmul", 2, s))
        return INERT(ctx);
    if (!f32_nd(ctx, "matmul", "a", a, 2) || !f32_nd(ctx, "matmul", "b", b, 2))
        return &ctx->inert;
    if (a->ne[1] != b->ne[0]) {
        char sa[64], sb[64];
        return ex__fail(ctx, EX_ERR_SHAPE, "matmul: a %s and b %s: inner sizes differ",
                        ex__shape(a, sa), ex__shape(b, sb));
    }
    int64_t ne[2] = {a->ne[0], b->ne[1]};
    return ex__node(ctx, EX_OP_MATMUL, EX_F32, 2, ne, 2, s);
}

ex_tensor *ex_linear(ex_ctx *ctx, ex_tensor *x, ex_tensor *w, ex_tensor *b)
{
    ex_tensor *s[3] = {x, w, b};
    int n = b ? 3 : 2;
    if (!ex__check(ctx, "linear", n, s))
        return INERT(ctx);
    if (!f32_nd(ctx, "linear", "x", x, 2) || !f32_nd(ctx, "linear", "w", w, 2) ||
        (b && !f32_nd(ctx, "linear", "b", b, 1)))
        return &ctx->inert;
    if (w->ne[1] != x->ne[1] || (b && b->ne[0] != w->ne[0])) {
        char sx[64], sw[64], sb[64];
        return ex__fail(ctx, EX_ERR_SHAPE, "linear: x %s, w %s, b %s do not fit", ex__shape(x, sx),
                        ex__shape(w, sw), b ? ex__shape(b, sb) : "none");
    }
    int64_t ne[2] = {x->ne[0], w->ne[0]};
    return ex__node(ctx, EX_OP_LINEAR, EX_F32, 2, ne, n, s);
}
