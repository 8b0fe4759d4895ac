/* Tensors: roots that own storage, compute nodes, views, and their accessors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine.h"

int ex_dtype_size(ex_dtype t)
{
    return (t == EX_F32 || t == EX_I32) ? 4 : t == EX_I8 ? 1 : 0;
}

const char *ex_dtype_name(ex_dtype t)
{
    return t == EX_F32 ? "f32" : t == EX_I32 ? "i32" : t == EX_I8 ? "i8" : "?";
}

bool ex__is_inert(const ex_tensor *t)
{
    return t && t->kind == EX_K_INERT;
}

int64_t ex__numel(const ex_tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->ne[d];
    return n;
}

void ex__contiguous_strides(int ndim, const int64_t *ne, int64_t *st)
{
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        st[d] = s;
        s *= ne[d];
    }
    for (int d = ndim; d < EX_MAX_DIMS; d++)
        st[d] = 0;
}

bool ex__contiguous(const ex_tensor *t)
{
    int64_t s = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->ne[d] != 1 && t->st[d] != s)
            return false;
        s *= t->ne[d];
    }
    return true;
}

const char *ex__shape(const ex_tensor *t, char buf[64])
{
    return ex_tensor_shape_str(t, buf, 64);
}

const char *ex__shape_ne(int ndim, const int64_t *ne, char buf[64])
{
    int used = 0;
    buf[0] = '\0';
    if (!ne || ndim < 1 || ndim > EX_MAX_DIMS)
        return ne ? "?" : "NULL";
    for (int d = 0; d < ndim && used < 64; d++)
        used += snprintf(buf + used, (size_t)(64 - used), d ? "x%lld" : "%lld", (long long)ne[d]);
    return buf;
}

char *ex_tensor_shape_str(const ex_tensor *t, char *buf, int len)
{
    if (!buf || len <= 0)
        return buf;
    buf[0] = '\0';
    if (!t) {
        snprintf(buf, (size_t)len, "NULL");
        return buf;
    }
    int used = 0;
    for (int d = 0; d < t->ndim && used < len; d++)
        used +=
            snprintf(buf + used, (size_t)(len - used), d ? "x%lld" : "%lld", (long long)t->ne[d]);
    return buf;
}

static bool shape_ok(ex_ctx *ctx, const char *op, int ndim, const int64_t *ne)
{
    if (!ne) {
        ex__fail(ctx, EX_ERR_ARG, "%s: shape is NULL", op);
        return false;
    }
    if (ndim < 1 || ndim > EX_MAX_DIMS) {
        ex__fail(ctx, EX_ERR_SHAPE, "%s: %d dimensions (1 to %d allowed)", op, ndim, EX_MAX_DIMS);
        return false;
    }
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (ne[d] < 1 || ne[d] > ((int64_t)1 << 40) / n) {
            ex__fail(ctx, EX_ERR_SHAPE, "%s: dimension %d has size %lld (or the shape overflows)",
                     op, d, (long long)ne[d]);
            return false;
        }
        n *= ne[d];
    }
    return true;
}

static ex_tensor *tensor_new(ex_ctx *ctx)
{
    if (ctx->ntensors == ctx->cap) {
        int64_t cap = ctx->cap ? 2 * ctx->cap : 256;
        ex_tensor **p = ex__realloc(ctx, ctx->tensors, (size_t)cap * sizeof *p);
        if (!p) {
            ex__fail(ctx, EX_ERR_NOMEM, "out of host memory for %lld tensors", (long long)cap);
            return NULL;
        }
        ctx->tensors = p;
        ctx->cap = cap;
    }
    ex_tensor *t = ex__calloc(ctx, 1, sizeof *t);
    if (!t) {
        ex__fail(ctx, EX_ERR_NOMEM, "out of host memory for a tensor");
        return NULL;
    }
    t->id = ctx->ntensors;
    ctx->tensors[ctx->ntensors++] = t;
    memcpy(t->tag, ctx->tag, sizeof t->tag);
    t->stage = ctx->stage;
    t->gate = ctx->gate;
    t->gate_index = ctx->gate_index;
    t->op = EX_OP_COUNT;
    return t;
}

bool ex__check(ex_ctx *ctx, const char *op, int n, ex_tensor *const *src)
{
    if (!ctx)
        return false;
    if (ctx->status != EX_OK)
        return false;
    for (int i = 0; i < n; i++) {
        if (!src || !src[i]) {
            ex__fail(ctx, EX_ERR_ARG, "%s: operand %d is NULL", op, i);
            return false;
        }
        if (ex__is_inert(src[i]))
            return false;
        if (src[i]->id < 0 || src[i]->id >= ctx->ntensors || ctx->tensors[src[i]->id] != src[i]) {
            ex__fail(ctx, EX_ERR_ARG, "%s: operand %d belongs to another context", op, i);
            return false;
        }
    }
    return true;
}

ex_tensor *ex__root(ex_ctx *ctx, ex_kind kind, ex_dtype dtype, int ndim, const int64_t *ne,
                    const char *name)
{
    const char *what = kind == EX_K_PARAM ? "param" : kind == EX_K_STATE ? "state" : "input";
    if (kind == EX_K_NODE)
        what = name; /* the op's name */
    if (!ex__check(ctx, what, 0, NULL))
        return ctx ? &ctx->inert : NULL;
    if (ex_dtype_size(dtype) == 0)
        return ex__fail(ctx, EX_ERR_ARG, "%s: bad dtype %d", what, (int)dtype);
    if (!shape_ok(ctx, what, ndim, ne))
        return &ctx->inert;
    ex_tensor *t = tensor_new(ctx);
    if (!t)
        return &ctx->inert;
    t->kind = kind;
    t->dtype = dtype;
    t->ndim = ndim;
    memcpy(t->ne, ne, (size_t)ndim * sizeof *ne);
    ex__contiguous_strides(ndim, t->ne, t->st);
    t->storage = t;
    t->storage_numel = ex__numel(t);
    if (kind != EX_K_NODE) {
        t->gate = NULL; /* leaves are never skipped */
        t->gate_index = 0;
    }
    snprintf(t->name, sizeof t->name, "%s", name ? name : "");
    return t;
}

ex_tensor *ex__node(ex_ctx *ctx, ex_op op, ex_dtype dtype, int ndim, const int64_t *ne, int nsrc,
                    ex_tensor *const *src)
{
    ex_tensor *t = ex__root(ctx, EX_K_NODE, dtype, ndim, ne, ex_op_name(op));
    if (ex__is_inert(t) || !t)
        return t;
    t->op = op;
    if (nsrc > 0) {
        t->src = ex__malloc(ctx, (size_t)nsrc * sizeof *t->src);
        if (!t->src) {
            t->op = EX_OP_FILL; /* a harmless node: the sticky error stops planning */
            return ex__fail(ctx, EX_ERR_NOMEM, "%s: out of host memory", ex_op_name(op));
        }
        memcpy(t->src, src, (size_t)nsrc * sizeof *src);
    }
    t->nsrc = nsrc;
    return t;
}

ex_tensor *ex__node_into(ex_ctx *ctx, ex_op op, ex_tensor *dst, int nsrc, ex_tensor *const *src)
{
    ex_tensor *t = ex__node(ctx, op, dst->dtype, dst->ndim, dst->ne, nsrc, src);
    if (ex__is_inert(t) || !t)
        return t;
    memcpy(t->st, dst->st, sizeof t->st);
    t->offset = dst->offset;
    t->storage = dst->storage;
    t->storage_numel = 0;
    return t;
}

void ex__random_key(ex_ctx *ctx, ex_tensor *node)
{
    /* splitmix64 of (seed, stream): independent keys for every random node */
    uint64_t z = ctx->seed + 0x9E3779B97F4A7C15ull * (++ctx->streams);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    node->ip[0] = (int32_t)(uint32_t)z;
    node->ip[1] = (int32_t)(uint32_t)(z >> 32);
}

bool ex__same_shape(const ex_tensor *a, const ex_tensor *b)
{
    if (a->ndim != b->ndim)
        return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->ne[d] != b->ne[d])
            return false;
    return true;
}

bool ex__broadcast_shape(const ex_tensor *a, const ex_tensor *b, int *ndim, int64_t *ne)
{
    int n = a->ndim > b->ndim ? a->ndim : b->ndim;
    for (int i = 0; i < n; i++) {
        int da = a->ndim - n + i, db = b->ndim - n + i;
        int64_t x = da >= 0 ? a->ne[da] : 1, y = db >= 0 ? b->ne[db] : 1;
        if (x != y && x != 1 && y != 1)
            return false;
        ne[i] = x > y ? x : y;
    }
    *ndim = n;
    return true;
}

/* ---- public leaves ---- */

ex_tensor *ex_input(ex_ctx *ctx, ex_dtype dtype, int ndim, const int64_t *ne, const char *name)
{
    return ex__root(ctx, EX_K_INPUT, dtype, ndim, ne, name);
}

ex_tensor *ex_param(ex_ctx *ctx, int ndim, const int64_t *ne, const char *name)
{
    return ex__root(ctx, EX_K_PARAM, EX_F32, ndim, ne, name);
}

ex_tensor *ex_state(ex_ctx *ctx, ex_dtype dtype, int ndim, const int64_t *ne, const char *name)
{
    return ex__root(ctx, EX_K_STATE, dtype, ndim, ne, name);
}

ex_tensor *ex_keep(ex_ctx *ctx, ex_tensor *t)
{
    if (!ex__check(ctx, "keep", 1, &t))
        return ctx ? &ctx->inert : NULL;
    t->keep = true;
    return t;
}

ex_tensor *ex_requires_grad(ex_ctx *ctx, ex_tensor *t)
{
    if (!ex__check(ctx, "requires_grad", 1, &t))
        return ctx ? &ctx->inert : NULL;
    if (t->dtype != EX_F32)
        return ex__fail(ctx, EX_ERR_ARG, "requires_grad: %s is %s, gradients need f32", t->name,
                        ex_dtype_name(t->dtype));
    t->requires_grad = true;
    return t;
}

static bool gate_ok(ex_ctx *ctx, const char *op, ex_tensor *mask, int64_t index)
{
    if (!ex__check(ctx, op, 1, &mask))
        return false;
    if (mask->dtype != EX_F32 || index < 0 || index >= ex__numel(mask)) {
        char s[64];
        ex__fail(ctx, EX_ERR_ARG, "%s: mask %s (%s) has no element %lld", op, ex__shape(mask, s),
                 ex_dtype_name(mask->dtype), (long long)index);
        return false;
    }
    return true;
}

void ex_ctx_set_gate(ex_ctx *ctx, ex_tensor *mask, int64_t index)
{
    if (!ctx)
        return;
    if (mask && !gate_ok(ctx, "set_gate", mask, index))
        return;
    ctx->gate = mask;
    ctx->gate_index = mask ? index : 0;
}

void ex_set_gate(ex_ctx *ctx, ex_tensor *t, ex_tensor *mask, int64_t index)
{
    if (!ex__check(ctx, "set_gate", 1, &t) || !gate_ok(ctx, "set_gate", mask, index))
        return;
    if (t->kind != EX_K_NODE) {
        ex__fail(ctx, EX_ERR_ARG, "set_gate: %s is not a computed node", t->name);
        return;
    }
    t->gate = mask;
    t->gate_index = index;
}

/* ---- views ---- */

static bool view_in_bounds(const ex_tensor *base, int ndim, const int64_t *ne, const int64_t *st,
                           int64_t offset)
{
    int64_t lo = offset, hi = offset;
    for (int d = 0; d < ndim; d++) {
        int64_t span = (ne[d] - 1) * st[d];
        if (span < 0)
            lo += span;
        else
            hi += span;
    }
    const ex_tensor *root = base->storage;
    return lo >= 0 && hi < root->storage_numel;
}

ex_tensor *ex_view(ex_ctx *ctx, ex_tensor *t, int ndim, const int64_t *ne, const int64_t *st,
                   int64_t offset)
{
    if (!ex__check(ctx, "view", 1, &t))
        return ctx ? &ctx->inert : NULL;
    if (!shape_ok(ctx, "view", ndim, ne))
        return &ctx->inert;
    if (!st)
        return ex__fail(ctx, EX_ERR_ARG, "view: strides NULL");
    int64_t abs_off = t->offset + offset;
    if (!view_in_bounds(t, ndim, ne, st, abs_off)) {
        char s[64], v[64];
        return ex__fail(ctx, EX_ERR_SHAPE,
                        "view: %s at offset %lld reaches outside the storage of %s %s (%lld "
                        "elements)",
                        ex__shape_ne(ndim, ne, v), (long long)offset, t->name, ex__shape(t, s),
                        (long long)t->storage->storage_numel);
    }
    ex_tensor *v = tensor_new(ctx);
    if (!v)
        return &ctx->inert;
    v->kind = EX_K_VIEW;
    v->dtype = t->dtype;
    v->ndim = ndim;
    memcpy(v->ne, ne, (size_t)ndim * sizeof *ne);
    memcpy(v->st, st, (size_t)ndim * sizeof *st);
    v->offset = abs_off;
    v->storage = t->storage;
    v->gate = NULL;
    snprintf(v->name, sizeof v->name, "%.150s.view", t->name);
    return v;
}

ex_tensor *ex_reshape(ex_ctx *ctx, ex_tensor *t, int ndim, const int64_t *ne)
{
    if (!ex__check(ctx, "reshape", 1, &t))
        return ctx ? &ctx->inert : NULL;
    if (!shape_ok(ctx, "reshape", ndim, ne))
        return &ctx->inert;
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= ne[d];
    if (n != ex__numel(t)) {
        char s[64], v[64];
        return ex__fail(ctx, EX_ERR_SHAPE, "reshape: %s has %lld elements, the new shape %s %lld",
                        ex__shape(t, s), (long long)ex__numel(t), ex__shape_ne(ndim, ne, v),
                        (long long)n);
    }
    ex_tensor *c = ex__contiguous(t) ? t : ex_copy(ctx, t);
    int64_t st[EX_MAX_DIMS];
    ex__contiguous_strides(ndim, ne, st);
    return ex_view(ctx, c, ndim, ne, st, 0);
}

ex_tensor *ex_slice(ex_ctx *ctx, ex_tensor *t, int dim, int64_t start, int64_t len)
{
    if (!ex__check(ctx, "slice", 1, &t))
        return ctx ? &ctx->inert : NULL;
    if (dim < 0 || dim >= t->ndim || start < 0 || len < 1 || start + len > t->ne[dim]) {
        char s[64];
        return ex__fail(ctx, EX_ERR_SHAPE, "slice: [%lld, %lld) of dimension %d of %s",
                        (long long)start, (long long)(start + len), dim, ex__shape(t, s));
    }
    int64_t ne[EX_MAX_DIMS];
    memcpy(ne, t->ne, sizeof ne);
    ne[dim] = len;
    return ex_view(ctx, t, t->ndim, ne, t->st, start * t->st[dim]);
}

ex_tensor *ex_transpose(ex_ctx *ctx, ex_tensor *t, int d0, int d1)
{
    if (!ex__check(ctx, "transpose", 1, &t))
        return ctx ? &ctx->inert : NULL;
    if (d0 < 0 || d1 < 0 || d0 >= t->ndim || d1 >= t->ndim) {
        char s[64];
        return ex__fail(ctx, EX_ERR_SHAPE, "transpose: dimensions %d and %d of %s", d0, d1,
                        ex__shape(t, s));
    }
    int64_t ne[EX_MAX_DIMS], st[EX_MAX_DIMS];
    memcpy(ne, t->ne, sizeof ne);
    memcpy(st, t->st, sizeof st);
    ne[d0] = t->ne[d1];
    ne[d1] = t->ne[d0];
    st[d0] = t->st[d1];
    st[d1] = t->st[d0];
    return ex_view(ctx, t, t->ndim, ne, st, 0);
}

ex_tensor *ex_broadcast(ex_ctx *ctx, ex_tensor *t, int ndim, const int64_t *ne)
{
    if (!ex__check(ctx, "broadcast", 1, &t))
        return ctx ? &ctx->inert : NULL;
    if (!shape_ok(ctx, "broadcast", ndim, ne))
        return &ctx->inert;
    int64_t st[EX_MAX_DIMS] = {0};
    bool ok = ndim >= t->ndim;
    for (int d = 0; ok && d < ndim; d++) {
        int dt = t->ndim - ndim + d;
        if (dt < 0)
            continue;
        if (t->ne[dt] == ne[d])
            st[d] = t->ne[dt] == 1 ? 0 : t->st[dt];
        else if (t->ne[dt] != 1)
            ok = false;
    }
    if (!ok) {
        char s[64], v[64];
        return ex__fail(ctx, EX_ERR_SHAPE, "broadcast: %s does not broadcast to %s",
                        ex__shape(t, s), ex__shape_ne(ndim, ne, v));
    }
    bool same = ndim == t->ndim;
    for (int d = 0; same && d < ndim; d++)
        same = ne[d] == t->ne[d];
    return same ? t : ex_view(ctx, t, ndim, ne, st, 0);
}

/* ---- accessors ---- */

int ex_tensor_ndim(const ex_tensor *t)
{
    return t ? t->ndim : 0;
}

int64_t ex_tensor_dim(const ex_tensor *t, int d)
{
    return (t && d >= 0 && d < t->ndim) ? t->ne[d] : 0;
}

int64_t ex_tensor_stride(const ex_tensor *t, int d)
{
    return (t && d >= 0 && d < t->ndim) ? t->st[d] : 0;
}

int64_t ex_tensor_numel(const ex_tensor *t)
{
    return t ? ex__numel(t) : 0;
}

ex_dtype ex_tensor_dtype(const ex_tensor *t)
{
    return t ? t->dtype : EX_DTYPE_COUNT;
}

const char *ex_tensor_name(const ex_tensor *t)
{
    return t ? t->name : "";
}
