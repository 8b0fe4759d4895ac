/* Builders of the convolutions and the GEMM-shaped ops. */
#include <math.h>

#include "core/engine.h"

#define INERT(ctx) ((ctx) ? &(ctx)->inert : NULL)

static bool typed_nd(ex_ctx *ctx, const char *op, const char *what, ex_tensor *t, ex_dtype dt,
                     int nd)
{
    if (t->dtype == dt && t->ndim == nd)
        return true;
    char s[64];
    ex__fail(ctx, t->dtype != dt ? EX_ERR_ARG : EX_ERR_SHAPE,
             "%s: %s %s (%s) must be %s with %d dimensions", op, what, ex__shape(t, s),
             ex_dtype_name(t->dtype), ex_dtype_name(dt), nd);
    return false;
}

static bool f32_nd(ex_ctx *ctx, const char *op, const char *what, ex_tensor *t, int nd)
{
    return typed_nd(ctx, op, what, t, EX_F32, nd);
}

/* The int8 ops' i32 bias of count values (one per output channel). */
static bool bias_ok(ex_ctx *ctx, const char *op, ex_tensor *b, int64_t count)
{
    if (!typed_nd(ctx, op, "bias", b, EX_I32, 1))
        return false;
    if (b->ne[0] == count)
        return true;
    char s[64];
    ex__fail(ctx, EX_ERR_SHAPE, "%s: bias %s must hold %lld values", op, ex__shape(b, s),
             (long long)count);
    return false;
}

/* The int8 ops sum at most this many products of two int8 values (each at most 2^14 in
 * magnitude), 2^30 in all: with a bias below 2^30 in magnitude no int32 sum overflows. */
#define QMAX_TERMS 65536

static bool terms_ok(ex_ctx *ctx, const char *op, int64_t terms)
{
    if (terms <= QMAX_TERMS)
        return true;
    ex__fail(ctx, EX_ERR_SHAPE, "%s: %lld products per output, more than %d", op, (long long)terms,
             QMAX_TERMS);
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

static bool is_quant(ex_op op)
{
    return op == EX_OP_QCONV2D || op == EX_OP_QDWCONV2D || op == EX_OP_QPWCONV ||
           op == EX_OP_QLINEAR;
}

/* The multiplier of the requantize an int8 convolution takes in (ex_qconv2d_rq and the
 * like; source 3, its ReLU ip7, the result i8): f32 [cout] or [1], or NULL for none. */
static bool multiplier_ok(ex_ctx *ctx, const char *name, ex_tensor *m, int64_t cout)
{
    if (!m || (m->dtype == EX_F32 && m->ndim == 1 && (m->ne[0] == cout || m->ne[0] == 1)))
        return true;
    char sm[64];
    ex__fail(ctx, m->dtype == EX_F32 ? EX_ERR_SHAPE : EX_ERR_ARG,
             "%s: multiplier %s (%s) must be f32 [%lld] or [1]", name, ex__shape(m, sm),
             ex_dtype_name(m->dtype), (long long)cout);
    return false;
}

/* A convolution node; relu (depthwise only) convolves max(x, 0) instead of x (ip6). The
 * int8 ones take i8 x and w and an i32 bias, and make i32, or i8 with a multiplier m
 * (requantized, its ReLU rq_relu). */
static ex_tensor *conv_node(ex_ctx *ctx, ex_op op, const char *name, ex_tensor *x, ex_tensor *w,
                            ex_tensor *bias, const ex_conv_params *p, bool relu, ex_tensor *m,
                            bool rq_relu)
{
    bool q = is_quant(op);
    ex_tensor *s[4] = {x, w, bias, m};
    int ns = q ? 3 + (m != NULL) : 2;
    if (!ex__check(ctx, name, ns, s))
        return INERT(ctx);
    ex_dtype in = q ? EX_I8 : EX_F32;
    if (!typed_nd(ctx, name, "x", x, in, 4) || !typed_nd(ctx, name, "w", w, in, 4) ||
        !geometry_ok(ctx, name, p))
        return &ctx->inert;
    char sx[64], sw[64];
    bool dw = op == EX_OP_DWCONV2D || op == EX_OP_QDWCONV2D;
    bool ok = dw ? (w->ne[0] == x->ne[1] && w->ne[1] == 1) : w->ne[1] == x->ne[1];
    if (!ok)
        return ex__fail(ctx, EX_ERR_SHAPE, "%s: x %s and w %s: channels do not match", name,
                        ex__shape(x, sx), ex__shape(w, sw));
    if (q && (!bias_ok(ctx, name, bias, w->ne[0]) ||
              !terms_ok(ctx, name, w->ne[1] * w->ne[2] * w->ne[3])))
        return &ctx->inert;
    int64_t ho = conv_out(x->ne[2], w->ne[2], p->stride[0], p->pad[0], p->dilation[0]);
    int64_t wo = conv_out(x->ne[3], w->ne[3], p->stride[1], p->pad[1], p->dilation[1]);
    if (ho < 1 || wo < 1)
        return ex__fail(ctx, EX_ERR_SHAPE, "%s: kernel of w %s does not fit x %s padded by %dx%d",
                        name, ex__shape(w, sw), ex__shape(x, sx), p->pad[0], p->pad[1]);
    int64_t ne[4] = {x->ne[0], dw ? x->ne[1] : w->ne[0], ho, wo};
    if (!multiplier_ok(ctx, name, m, ne[1]))
        return &ctx->inert;
    ex_tensor *y = ex__node(ctx, op, !q ? EX_F32 : m ? EX_I8 : EX_I32, 4, ne, ns, s);
    if (ex__is_inert(y))
        return y;
    for (int i = 0; i < 2; i++) {
        y->ip[0 + i] = p->stride[i];
        y->ip[2 + i] = p->pad[i];
        y->ip[4 + i] = p->dilation[i];
    }
    y->ip[6] = relu;
    y->ip[7] = rq_relu;
    return y;
}

ex_tensor *ex_conv2d(ex_ctx *ctx, ex_tensor *x, ex_tensor *w, const ex_conv_params *p)
{
    return conv_node(ctx, EX_OP_CONV2D, "conv2d", x, w, NULL, p, false, NULL, false);
}

ex_tensor *ex_dwconv2d(ex_ctx *ctx, ex_tensor *x, ex_tensor *w, const ex_conv_params *p)
{
    return conv_node(ctx, EX_OP_DWCONV2D, "dwconv2d", x, w, NULL, p, false, NULL, false);
}

ex_tensor *ex_dwconv2d_relu(ex_ctx *ctx, ex_tensor *x, ex_tensor *w, const ex_conv_params *p)
{
    return conv_node(ctx, EX_OP_DWCONV2D, "dwconv2d_relu", x, w, NULL, p, true, NULL, false);
}

/* A pointwise convolution: f32, or int8 with an i32 bias (and m as conv_node's). */
static ex_tensor *pw_node(ex_ctx *ctx, ex_op op, const char *name, ex_tensor *x, ex_tensor *w,
                          ex_tensor *bias, ex_tensor *m, bool rq_relu)
{
    bool q = is_quant(op);
    ex_tensor *s[4] = {x, w, bias, m};
    int ns = q ? 3 + (m != NULL) : 2;
    if (!ex__check(ctx, name, ns, s))
        return INERT(ctx);
    ex_dtype in = q ? EX_I8 : EX_F32;
    if (!typed_nd(ctx, name, "x", x, in, 4) || !typed_nd(ctx, name, "w", w, in, 2))
        return &ctx->inert;
    if (w->ne[1] != x->ne[1]) {
        char sx[64], sw[64];
        return ex__fail(ctx, EX_ERR_SHAPE, "%s: x %s and w %s: channels do not match", name,
                        ex__shape(x, sx), ex__shape(w, sw));
    }
    if (q && (!bias_ok(ctx, name, bias, w->ne[0]) || !terms_ok(ctx, name, w->ne[1])))
        return &ctx->inert;
    int64_t ne[4] = {x->ne[0], w->ne[0], x->ne[2], x->ne[3]};
    if (!multiplier_ok(ctx, name, m, ne[1]))
        return &ctx->inert;
    ex_tensor *y = ex__node(ctx, op, !q ? EX_F32 : m ? EX_I8 : EX_I32, 4, ne, ns, s);
    if (!ex__is_inert(y))
        y->ip[7] = rq_relu;
    return y;
}

ex_tensor *ex_pwconv(ex_ctx *ctx, ex_tensor *x, ex_tensor *w)
{
    return pw_node(ctx, EX_OP_PWCONV, "pwconv", x, w, NULL, NULL, false);
}

ex_tensor *ex_pwconv_bn(ex_ctx *ctx, ex_tensor *x, ex_tensor *w, ex_tensor *running_mean,
                        ex_tensor *running_var, ex_tensor *gamma, ex_tensor *beta, float eps,
                        bool relu)
{
    if ((gamma == NULL) != (beta == NULL))
        return ex__fail(ctx, EX_ERR_ARG, "pwconv_bn: gamma and beta come together");
    ex_tensor *s[6] = {x, w, running_mean, running_var, gamma, beta};
    int ns = gamma ? 6 : 4;
    if (!ex__check(ctx, "pwconv_bn", ns, s))
        return INERT(ctx);
    if (!typed_nd(ctx, "pwconv_bn", "x", x, EX_F32, 4) ||
        !typed_nd(ctx, "pwconv_bn", "w", w, EX_F32, 2))
        return &ctx->inert;
    static const char *const what[6] = {"", "", "running_mean", "running_var", "gamma", "beta"};
    for (int i = 2; i < ns; i++)
        if (!typed_nd(ctx, "pwconv_bn", what[i], s[i], EX_F32, 1))
            return &ctx->inert;
    for (int i = 2; i < ns; i++)
        if (s[i]->ne[0] != w->ne[0] || w->ne[1] != x->ne[1]) {
            char sx[64], sw[64], sv[64];
            return ex__fail(ctx, EX_ERR_SHAPE, "pwconv_bn: x %s, w %s and %s %s do not fit",
                            ex__shape(x, sx), ex__shape(w, sw), what[i], ex__shape(s[i], sv));
        }
    if (!(eps > 0.0f) || !isfinite(eps))
        return ex__fail(ctx, EX_ERR_ARG, "pwconv_bn: eps %g must be finite and > 0", (double)eps);
    int64_t ne[4] = {x->ne[0], w->ne[0], x->ne[2], x->ne[3]};
    ex_tensor *y = ex__node(ctx, EX_OP_PWCONV_BN, EX_F32, 4, ne, ns, s);
    if (!ex__is_inert(y)) {
        y->ip[6] = relu;
        y->fp[0] = eps;
    }
    return y;
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

ex_tensor *ex_qconv2d(ex_ctx *ctx, ex_tensor *x, ex_tensor *w, ex_tensor *bias,
                      const ex_conv_params *p)
{
    return conv_node(ctx, EX_OP_QCONV2D, "qconv2d", x, w, bias, p, false, NULL, false);
}

ex_tensor *ex_qconv2d_rq(ex_ctx *ctx, ex_tensor *x, ex_tensor *w, ex_tensor *bias,
                         const ex_conv_params *p, ex_tensor *multiplier, bool relu)
{
    if (!multiplier)
        return ex__fail(ctx, EX_ERR_ARG, "qconv2d_rq: multiplier NULL");
    return conv_node(ctx, EX_OP_QCONV2D, "qconv2d_rq", x, w, bias, p, false, multiplier, relu);
}

ex_tensor *ex_qdwconv2d(ex_ctx *ctx, ex_tensor *x, ex_tensor *w, ex_tensor *bias,
                        const ex_conv_params *p)
{
    return conv_node(ctx, EX_OP_QDWCONV2D, "qdwconv2d", x, w, bias, p, false, NULL, false);
}

ex_tensor *ex_qdwconv2d_rq(ex_ctx *ctx, ex_tensor *x, ex_tensor *w, ex_tensor *bias,
                           const ex_conv_params *p, ex_tensor *multiplier, bool relu)
{
    if (!multiplier)
        return ex__fail(ctx, EX_ERR_ARG, "qdwconv2d_rq: multiplier NULL");
    return conv_node(ctx, EX_OP_QDWCONV2D, "qdwconv2d_rq", x, w, bias, p, false, multiplier, relu);
}

ex_tensor *ex_qpwconv(ex_ctx *ctx, ex_tensor *x, ex_tensor *w, ex_tensor *bias)
{
    return pw_node(ctx, EX_OP_QPWCONV, "qpwconv", x, w, bias, NULL, false);
}

ex_tensor *ex_qpwconv_rq(ex_ctx *ctx, ex_tensor *x, ex_tensor *w, ex_tensor *bias,
                         ex_tensor *multiplier, bool relu)
{
    if (!multiplier)
        return ex__fail(ctx, EX_ERR_ARG, "qpwconv_rq: multiplier NULL");
    return pw_node(ctx, EX_OP_QPWCONV, "qpwconv_rq", x, w, bias, multiplier, relu);
}

ex_tensor *ex_qlinear(ex_ctx *ctx, ex_tensor *x, ex_tensor *w, ex_tensor *bias)
{
    ex_tensor *s[3] = {x, w, bias};
    if (!ex__check(ctx, "qlinear", 3, s))
        return INERT(ctx);
    if (!typed_nd(ctx, "qlinear", "x", x, EX_I8, 2) || !typed_nd(ctx, "qlinear", "w", w, EX_I8, 2))
        return &ctx->inert;
    if (w->ne[1] != x->ne[1]) {
        char sx[64], sw[64];
        return ex__fail(ctx, EX_ERR_SHAPE, "qlinear: x %s and w %s: inner sizes differ",
                        ex__shape(x, sx), ex__shape(w, sw));
    }
    if (!bias_ok(ctx, "qlinear", bias, w->ne[0]) || !terms_ok(ctx, "qlinear", w->ne[1]))
        return &ctx->inert;
    int64_t ne[2] = {x->ne[0], w->ne[0]};
    return ex__node(ctx, EX_OP_QLINEAR, EX_I32, 2, ne, 3, s);
}
