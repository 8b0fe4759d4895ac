/* The parameter registry and the layers of DARTS cells. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine.h"
#include "core/philox.h"
#include "nas/layers.h"

void nas_net_init(nas_net *n, ex_ctx *ctx)
{
    memset(n, 0, sizeof *n);
    n->ctx = ctx;
    n->train = true;
    n->bn_eps = 1e-5f;
    n->bn_momentum = 0.1f;
}

void nas_net_free(nas_net *n)
{
    free(n->params);
    free(n->states);
    n->params = NULL;
    n->states = NULL;
}

void nas_net_rebuild(nas_net *n, ex_tensor *const *subst)
{
    n->built = true;
    n->cursor = n->scursor = 0;
    n->subst = subst;
    n->prefix[0] = '\0';
}

int nas_push(nas_net *n, const char *fmt, ...)
{
    int len = (int)strlen(n->prefix);
    size_t room = sizeof n->prefix - (size_t)len;
    int w = len ? snprintf(n->prefix + len, room, ".") : 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(n->prefix + len + w, room - (size_t)w, fmt, ap);
    va_end(ap);
    return len;
}

void nas_pop(nas_net *n, int len)
{
    n->prefix[len] = '\0';
}

static void full_name(const nas_net *n, const char *name, char *out, size_t len)
{
    snprintf(out, len, "%s%s%s", n->prefix, n->prefix[0] ? "." : "", name);
}

ex_tensor *nas_weight(nas_net *n, const char *name, int ndim, const int64_t *ne, nas_init init,
                      int64_t fan_in)
{
    if (n->built) {
        /* a rebuild visits the parameters in the order the first build made them */
        if (n->cursor >= n->nparams) {
            ex_ctx_set_error(n->ctx, EX_ERR_STATE,
                             "rebuild: more parameters than the first "
                             "build made (at %s)",
                             name);
            return ex_relu(n->ctx, NULL); /* inert */
        }
        int i = n->cursor++;
        return n->subst ? n->subst[i] : n->params[i].t;
    }
    if (n->nparams == n->cap_params) {
        int cap = n->cap_params ? 2 * n->cap_params : 64;
        nas_param *p = ex__realloc(n->ctx, n->params, (size_t)cap * sizeof *p);
        if (!p) {
            ex_ctx_set_error(n->ctx, EX_ERR_NOMEM, "net: out of host memory at %s", name);
            return ex_relu(n->ctx, NULL); /* inert */
        }
        n->params = p;
        n->cap_params = cap;
    }
    nas_param *p = &n->params[n->nparams];
    full_name(n, name, p->name, sizeof p->name);
    p->t = ex_param(n->ctx, ndim, ne, p->name);
    p->init = init;
    p->fan_in = fan_in;
    p->arch = init == NAS_INIT_ALPHA;
    n->nparams++;
    return p->t;
}

static ex_tensor *state(nas_net *n, const char *name, int64_t c, float init)
{
    if (n->built) {
        if (n->scursor >= n->nstates) {
            ex_ctx_set_error(n->ctx, EX_ERR_STATE,
                             "rebuild: more states than the first "
                             "build made (at %s)",
                             name);
            return ex_relu(n->ctx, NULL); /* inert */
        }
        return n->states[n->scursor++].t;
    }
    if (n->nstates == n->cap_states) {
        int cap = n->cap_states ? 2 * n->cap_states : 64;
        nas_state *s = ex__realloc(n->ctx, n->states, (size_t)cap * sizeof *s);
        if (!s) {
            ex_ctx_set_error(n->ctx, EX_ERR_NOMEM, "net: out of host memory at %s", name);
            return ex_relu(n->ctx, NULL); /* inert */
        }
        n->states = s;
        n->cap_states = cap;
    }
    nas_state *s = &n->states[n->nstates++];
    full_name(n, name, s->name, sizeof s->name);
    s->t = ex_state(n->ctx, EX_F32, 1, &c, s->name);
    s->init = init;
    return s->t;
}

/** A batch norm's tensors over c channels: gamma and beta (NULL unless affine), the
 *  running mean and variance. */
typedef struct bn_tensors {
    ex_tensor *g, *b, *rm, *rv;
} bn_tensors;

static bn_tensors bn_named(nas_net *n, int64_t c, const char *name, bool affine)
{
    int len = nas_push(n, "%s", name);
    bn_tensors t = {affine ? nas_weight(n, "weight", 1, &c, NAS_INIT_ONES, 0) : NULL,
                    affine ? nas_weight(n, "bias", 1, &c, NAS_INIT_ZEROS, 0) : NULL,
                    state(n, "running_mean", c, 0.0f), state(n, "running_var", c, 1.0f)};
    nas_pop(n, len);
    return t;
}

ex_tensor *nas_bn(nas_net *n, ex_tensor *x, const char *name, bool affine)
{
    bn_tensors t = bn_named(n, ex_tensor_dim(x, 1), name, affine);
    return ex_batch_norm(n->ctx, x, t.g, t.b, t.rm, t.rv, n->train, n->bn_eps, n->bn_momentum);
}

ex_tensor *nas_conv(nas_net *n, ex_tensor *x, const char *name, int64_t cout, int kh, int kw,
                    int sh, int sw, int ph, int pw, int dil)
{
    int64_t cin = ex_tensor_dim(x, 1), ne[4] = {cout, cin, kh, kw};
    int len = nas_push(n, "%s", name);
    ex_tensor *w = nas_weight(n, "weight", 4, ne, NAS_INIT_KAIMING, cin * kh * kw);
    nas_pop(n, len);
    ex_conv_params p = {{sh, sw}, {ph, pw}, {dil, dil}};
    return ex_conv2d(n->ctx, x, w, &p);
}

ex_tensor *nas_dwconv(nas_net *n, ex_tensor *x, const char *name, int k, int stride, int pad,
                      int dil, bool relu)
{
    int64_t c = ex_tensor_dim(x, 1), ne[4] = {c, 1, k, k};
    int len = nas_push(n, "%s", name);
    ex_tensor *w = nas_weight(n, "weight", 4, ne, NAS_INIT_KAIMING, (int64_t)k * k);
    nas_pop(n, len);
    ex_conv_params p = {{stride, stride}, {pad, pad}, {dil, dil}};
    return relu ? ex_dwconv2d_relu(n->ctx, x, w, &p) : ex_dwconv2d(n->ctx, x, w, &p);
}

/* A pointwise convolution's weight [cout, cin, 1, 1] (PyTorch's) as the [cout, cin] matrix. */
static ex_tensor *pw_weight(nas_net *n, ex_tensor *x, const char *name, int64_t cout)
{
    int64_t cin = ex_tensor_dim(x, 1), ne[4] = {cout, cin, 1, 1}, ne2[2] = {cout, cin};
    int len = nas_push(n, "%s", name);
    ex_tensor *w = nas_weight(n, "weight", 4, ne, NAS_INIT_KAIMING, cin);
    nas_pop(n, len);
    return ex_reshape(n->ctx, w, 2, ne2);
}

ex_tensor *nas_pwconv(nas_net *n, ex_tensor *x, const char *name, int64_t cout)
{
    return ex_pwconv(n->ctx, x, pw_weight(n, x, name, cout));
}

ex_tensor *nas_pwconv_bn(nas_net *n, ex_tensor *x, const char *pw, const char *bn, int64_t cout,
                         bool affine, bool relu)
{
    if (n->train)
        return nas_bn(n, nas_pwconv(n, relu ? ex_relu(n->ctx, x) : x, pw, cout), bn, affine);
    ex_tensor *w = pw_weight(n, x, pw, cout);
    bn_tensors t = bn_named(n, cout, bn, affine);
    return ex_pwconv_bn(n->ctx, x, w, t.rm, t.rv, t.g, t.b, n->bn_eps, relu);
}

/* A 1x1 convolution as a GEMM; at stride 2 on a dense copy of every other pixel (a
 * strided view), which GEMM libraries take and direct convolution kernels do slowly. */
static ex_tensor *conv1x1(nas_net *n, ex_tensor *x, const char *name, int64_t cout, int stride)
{
    if (stride > 1) {
        int64_t ne[4], st[4];
        for (int d = 0; d < 4; d++) {
            ne[d] = ex_tensor_dim(x, d);
            st[d] = ex_tensor_stride(x, d);
        }
        ne[2] = (ne[2] + stride - 1) / stride;
        ne[3] = (ne[3] + stride - 1) / stride;
        st[2] *= stride;
        st[3] *= stride;
        x = ex_copy(n->ctx, ex_view(n->ctx, x, 4, ne, st, 0));
    }
    return nas_pwconv(n, x, name, cout);
}

ex_tensor *nas_relu_conv_bn(nas_net *n, ex_tensor *x, int64_t cout, int k, int stride, int pad,
                            bool affine)
{
    int len = nas_push(n, "op");
    ex_tensor *y;
    if (k == 1 && pad == 0 && stride == 1) {
        y = nas_pwconv_bn(n, x, "1", "2", cout, affine, true);
    } else {
        ex_tensor *r = ex_relu(n->ctx, x);
        y = k == 1 && pad == 0 ? conv1x1(n, r, "1", cout, stride)
                               : nas_conv(n, r, "1", cout, k, k, stride, stride, pad, pad, 1);
        y = nas_bn(n, y, "2", affine);
    }
    nas_pop(n, len);
    return y;
}

ex_tensor *nas_concat(nas_net *n, int count, ex_tensor *const *parts)
{
    int64_t ne[4] = {ex_tensor_dim(parts[0], 0), 0, ex_tensor_dim(parts[0], 2),
                     ex_tensor_dim(parts[0], 3)};
    for (int i = 0; i < count; i++)
        ne[1] += ex_tensor_dim(parts[i], 1);
    /* the buffer's initial value is overwritten entirely: the fill only gives it a
     * producer (and no gradient flows to it) */
    ex_tensor *cat = ex_fill(n->ctx, 4, ne, 0.0f);
    int64_t at = 0;
    for (int i = 0; i < count; i++) {
        int64_t c = ex_tensor_dim(parts[i], 1);
        ex_copy_into(n->ctx, parts[i], ex_slice(n->ctx, cat, 1, at, c));
        at += c;
    }
    return cat;
}

ex_tensor *nas_factorized_reduce(nas_net *n, ex_tensor *x, int64_t cout, bool affine)
{
    ex_tensor *r = ex_relu(n->ctx, x);
    int64_t h = ex_tensor_dim(x, 2), w = ex_tensor_dim(x, 3);
    ex_tensor *shifted = ex_slice(n->ctx, ex_slice(n->ctx, r, 2, 1, h - 1), 3, 1, w - 1);
    ex_tensor *parts[2] = {conv1x1(n, r, "conv_1", cout / 2, 2),
                           conv1x1(n, shifted, "conv_2", cout / 2, 2)};
    return nas_bn(n, nas_concat(n, 2, parts), "bn", affine);
}

static ex_tensor *sep_conv(nas_net *n, ex_tensor *x, int k, int stride, bool affine)
{
    int64_t c = ex_tensor_dim(x, 1);
    int len = nas_push(n, "op");
    /* PyTorch's ReLU, conv, conv, BN, ReLU, conv, conv, BN: the ReLUs (0 and 4) fused
     * into the depthwise convolutions, so the parameter names keep their indices */
    ex_tensor *y = nas_dwconv(n, x, "1", k, stride, k / 2, 1, true);
    y = nas_pwconv_bn(n, y, "2", "3", c, affine, false);
    y = nas_dwconv(n, y, "5", k, 1, k / 2, 1, true);
    y = nas_pwconv_bn(n, y, "6", "7", c, affine, false);
    nas_pop(n, len);
    return y;
}

static ex_tensor *dil_conv(nas_net *n, ex_tensor *x, int k, int stride, bool affine)
{
    int64_t c = ex_tensor_dim(x, 1);
    int len = nas_push(n, "op");
    ex_tensor *y = nas_dwconv(n, x, "1", k, stride, k - 1, 2, true); /* ReLU (0) fused */
    y = nas_pwconv_bn(n, y, "2", "3", c, affine, false);
    nas_pop(n, len);
    return y;
}

static ex_tensor *conv_7x1_1x7(nas_net *n, ex_tensor *x, int stride, bool affine)
{
    int64_t c = ex_tensor_dim(x, 1);
    int len = nas_push(n, "op");
    ex_tensor *y = nas_conv(n, ex_relu(n->ctx, x), "1", c, 1, 7, 1, stride, 0, 3, 1);
    y = nas_conv(n, y, "2", c, 7, 1, stride, 1, 3, 0, 1);
    y = nas_bn(n, y, "3", affine);
    nas_pop(n, len);
    return y;
}

static ex_tensor *pool(nas_net *n, ex_cand op, ex_tensor *x, int stride, bool affine)
{
    ex_pool_params p = {{3, 3}, {stride, stride}, {1, 1}};
    ex_tensor *y =
        op == EX_CAND_MAX_POOL_3X3 ? ex_max_pool(n->ctx, x, &p) : ex_avg_pool(n->ctx, x, &p);
    /* DARTS's search space follows pooling with a non-affine batch norm; the derived
     * (affine) network does not */
    return affine ? y : nas_bn(n, y, "1", false);
}

ex_tensor *nas_candidate(nas_net *n, ex_cand op, ex_tensor *x, int stride, bool affine)
{
    int64_t c = ex_tensor_dim(x, 1);
    switch (op) {
    case EX_CAND_NONE: return NULL;
    case EX_CAND_MAX_POOL_3X3:
    case EX_CAND_AVG_POOL_3X3: return pool(n, op, x, stride, affine);
    case EX_CAND_SKIP_CONNECT: return stride == 1 ? x : nas_factorized_reduce(n, x, c, affine);
    case EX_CAND_SEP_CONV_3X3: return sep_conv(n, x, 3, stride, affine);
    case EX_CAND_SEP_CONV_5X5: return sep_conv(n, x, 5, stride, affine);
    case EX_CAND_SEP_CONV_7X7: return sep_conv(n, x, 7, stride, affine);
    case EX_CAND_DIL_CONV_3X3: return dil_conv(n, x, 3, stride, affine);
    case EX_CAND_DIL_CONV_5X5: return dil_conv(n, x, 5, stride, affine);
    case EX_CAND_CONV_7X1_1X7: return conv_7x1_1x7(n, x, stride, affine);
    case EX_CAND_COUNT: break;
    }
    ex_ctx_set_error(n->ctx, EX_ERR_ARG, "candidate: unknown operation %d", (int)op);
    return ex_relu(n->ctx, NULL); /* inert */
}

ex_tensor **nas_net_momentum(nas_net *n)
{
    ex_tensor **mom = ex__calloc(n->ctx, (size_t)n->nparams + 1, sizeof *mom);
    if (!mom) {
        ex_ctx_set_error(n->ctx, EX_ERR_NOMEM, "net: out of host memory");
        return NULL;
    }
    for (int i = 0; i < n->nparams; i++) {
        char name[sizeof n->params[i].name + 16];
        snprintf(name, sizeof name, "%s.momentum_buffer", n->params[i].name);
        const ex_tensor *p = n->params[i].t;
        int64_t ne[EX_MAX_DIMS];
        for (int d = 0; d < ex_tensor_ndim(p); d++)
            ne[d] = ex_tensor_dim(p, d);
        mom[i] = ex_state(n->ctx, EX_F32, ex_tensor_ndim(p), ne, name);
    }
    return mom;
}

/* ---- initial values ---- */

static void draw(const nas_param *p, uint64_t seed, int index, float *v, int64_t count)
{
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int64_t i = 0; i < count; i++) {
        switch (p->init) {
        case NAS_INIT_KAIMING: {
            float bound = 1.0f / sqrtf((float)(p->fan_in > 0 ? p->fan_in : 1));
            v[i] =
                bound * (2.0f * ex_philox_uniform(k0, k1, (uint32_t)index, 1, (uint64_t)i) - 1.0f);
            break;
        }
        case NAS_INIT_ONES: v[i] = 1.0f; break;
        case NAS_INIT_ZEROS: v[i] = 0.0f; break;
        case NAS_INIT_ALPHA:
            v[i] = 1e-3f * ex_philox_normal(k0, k1, (uint32_t)index, 2, (uint64_t)i);
            break;
        }
    }
}

ex_status nas_net_initialise(nas_net *n, ex_plan *plan, uint64_t seed)
{
    ex_status st = EX_OK;
    for (int i = 0; st == EX_OK && i < n->nparams + n->nstates; i++) {
        bool is_param = i < n->nparams;
        ex_tensor *t = is_param ? n->params[i].t : n->states[i - n->nparams].t;
        int64_t count = ex_tensor_numel(t);
        float *v = ex__malloc(n->ctx, (size_t)count * sizeof *v);
        if (!v)
            return EX_ERR_NOMEM;
        if (is_param) {
            draw(&n->params[i], seed, i, v, count);
        } else {
            for (int64_t j = 0; j < count; j++)
                v[j] = n->states[i - n->nparams].init;
        }
        st = ex_plan_write(plan, t, v, (size_t)count * sizeof *v);
        free(v);
    }
    return st;
}
