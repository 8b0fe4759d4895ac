/* Reverse-mode autodiff: appends backward nodes (ordinary ops) to the graph.
 *
 * Gradients accumulate per tensor as a list of contributions. A view passes its
 * gradient to its storage root with its geometry; a root sums its contributions, adding
 * view-shaped ones into a private accumulator in place; full ones are summed by
 * mixed-sum nodes of up to EX_MAX_CANDIDATES sources rather than chains of adds. A view
 * that is its whole root reshaped passes a reshape of its gradient as a full
 * contribution instead, so a weight used through a reshape needs no accumulator. A
 * contribution made under a gate (a candidate's subgraph) is added by a node with the
 * same gate, so a skipped candidate leaves the sum as it was. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/graph.h"

typedef struct contrib {
    ex_tensor *g;
    const ex_tensor *geom; /* NULL: the target's own shape; else a view of the root */
    ex_tensor *gate;
    int64_t gate_index;
    int64_t next;
    bool done; /* already summed by a mixed-sum node (sum_gated) */
} contrib;

typedef struct grad_state {
    ex_ctx *ctx;
    bool *needs;
    int64_t *head; /* per tensor: first contribution, -1 none */
    contrib *items;
    int64_t n, cap;
    ex_tensor *ones;      /* weights of 1 for sum_gated, made once per walk */
    ex_tensor *ones_full; /* weights and mask of 1 for sum_full, made once per walk */
    bool oom;
} grad_state;

static void add_contrib(grad_state *s, const ex_tensor *target, ex_tensor *g, const ex_tensor *geom)
{
    if (!g || ex__is_inert(g))
        return;
    if (s->n == s->cap) {
        int64_t cap = s->cap ? 2 * s->cap : 256;
        contrib *p = ex__realloc(s->ctx, s->items, (size_t)cap * sizeof *p);
        if (!p) {
            s->oom = true;
            return;
        }
        s->items = p;
        s->cap = cap;
    }
    contrib *c = &s->items[s->n];
    c->g = g;
    c->geom = geom;
    c->gate = s->ctx->gate;
    c->gate_index = s->ctx->gate_index;
    c->done = false;
    c->next = s->head[target->id];
    s->head[target->id] = s->n++;
}

static void sink(ex_ctx *ctx, ex_tensor *src, ex_tensor *g, void *user)
{
    (void)ctx;
    grad_state *s = user;
    if (s->needs[src->id])
        add_contrib(s, src, g, NULL);
}

/* ---- summing the contributions of one tensor ---- */

static bool is_full(const ex_tensor *target, const ex_tensor *geom)
{
    if (!geom)
        return true;
    int64_t st[EX_MAX_DIMS];
    ex__contiguous_strides(target->ndim, target->ne, st);
    return geom->offset == 0 && ex__same_shape(geom, target) &&
           !memcmp(geom->st, st, (size_t)target->ndim * sizeof st[0]);
}

/* Whether view v is its whole storage root in the root's element order, only shaped
 * otherwise (a reshape): its gradient is the root's, reshaped, with no accumulator. */
static bool is_reshape_of_root(const ex_tensor *v)
{
    const ex_tensor *r = v->storage;
    return v->offset == 0 && ex__numel(v) == ex__numel(r) && ex__contiguous(v) && ex__contiguous(r);
}

/* Sums a broadcast view's gradient over its stride-0 dims; returns the geometry left. */
static ex_tensor *unbroadcast(ex_ctx *ctx, ex_tensor *g, const ex_tensor **geom)
{
    const ex_tensor *v = *geom;
    unsigned axes = 0;
    for (int d = 0; v && d < v->ndim; d++)
        if (v->st[d] == 0 && v->ne[d] > 1)
            axes |= 1u << d;
    if (!axes)
        return g;
    ex_tensor *r = ex_sum(ctx, g, axes);
    int64_t ne[EX_MAX_DIMS], st[EX_MAX_DIMS];
    for (int d = 0; d < v->ndim; d++) {
        ne[d] = (axes >> d) & 1 ? 1 : v->ne[d];
        st[d] = v->st[d];
    }
    /* a view of the root with the reduced dims of size 1: the place the sum goes */
    *geom = ex_view(ctx, v->storage, v->ndim, ne, st, v->offset);
    return r;
}

static ex_tensor *add_into(ex_ctx *ctx, ex_tensor *acc, const ex_tensor *geom, ex_tensor *g,
                           const contrib *c)
{
    ex_tensor *region = acc;
    if (geom)
        region = ex_view(ctx, acc, geom->ndim, geom->ne, geom->st, geom->offset);
    ex_tensor *gg = ex_broadcast(ctx, g, region->ndim, region->ne);
    if (ex__is_inert(region) || ex__is_inert(gg))
        return &ctx->inert;
    ex_tensor *prev_gate = ctx->gate;
    int64_t prev_index = ctx->gate_index;
    ctx->gate = c->gate;
    ctx->gate_index = c->gate_index;
    ex_tensor *s[2] = {region, gg};
    ex_tensor *r = ex__node_into(ctx, EX_OP_ADD, region, 2, s);
    ctx->gate = prev_gate;
    ctx->gate_index = prev_index;
    return r;
}

/* ---- gated contributions, summed by mixed-sum nodes ---- */

/* A contribution sum_gated can take: full, under a gate whose flat index fits an int. */
static bool gated_full(const ex_tensor *t, const contrib *c)
{
    return !c->done && c->gate && is_full(t, c->geom) && c->gate->dtype == EX_F32 &&
           ex__contiguous(c->gate) && c->gate_index >= 0 && c->gate_index <= INT32_MAX;
}

/* Weights of 1 over a flat gate of n elements; made without a gate, since every sum in
 * the walk may read it. */
static ex_tensor *ones_of(grad_state *s, int64_t n)
{
    if (s->ones && ex__numel(s->ones) == n)
        return s->ones;
    ex_ctx *ctx = s->ctx;
    ex_tensor *gate = ctx->gate;
    int64_t index = ctx->gate_index;
    ctx->gate = NULL;
    s->ones = ex_fill(ctx, 1, &n, 1.0f);
    ctx->gate = gate;
    ctx->gate_index = index;
    return s->ones;
}

/* One mixed sum (weights 1) of up to EX_MAX_CANDIDATES contributions under gate, with
 * distinct gate indices, from the list at h. */
static ex_tensor *sum_chunk(grad_state *s, ex_tensor *t, int64_t h, ex_tensor *gate)
{
    ex_ctx *ctx = s->ctx;
    ex_tensor *x[EX_MAX_CANDIDATES];
    int idx[EX_MAX_CANDIDATES], n = 0;
    for (int64_t i = h; i >= 0 && n < EX_MAX_CANDIDATES; i = s->items[i].next) {
        contrib *c = &s->items[i];
        bool dup = false;
        for (int j = 0; j < n; j++)
            dup |= idx[j] == (int)c->gate_index;
        if (!gated_full(t, c) || c->gate != gate || dup)
            continue;
        x[n] = c->g;
        idx[n++] = (int)c->gate_index;
        c->done = true;
    }
    int64_t len = ex__numel(gate);
    return ex_mixed_sum(ctx, ones_of(s, len), ex_reshape(ctx, gate, 1, &len), n, x, idx);
}

/* The gated contributions to t, a gate at a time, summed by mixed-sum nodes with
 * weights 1 and added to acc: each node reads its contributions once and skips the
 * inactive ones on the device, where a zero fill and one add per contribution (each
 * under its own gate) would read and write the sum every time. A gate with a single
 * contribution and an acc already made is left to the caller's add under that gate. */
static ex_tensor *sum_gated(grad_state *s, ex_tensor *t, int64_t h, ex_tensor *acc, bool *own)
{
    for (int64_t i = h; i >= 0; i = s->items[i].next) {
        contrib *c = &s->items[i];
        if (!gated_full(t, c))
            continue;
        int64_t count = 0;
        for (int64_t k = h; k >= 0; k = s->items[k].next)
            count += gated_full(t, &s->items[k]) && s->items[k].gate == c->gate;
        if (count == 1 && acc)
            continue;
        while (gated_full(t, c)) { /* c goes in the first chunk: it is the first left */
            ex_tensor *part = sum_chunk(s, t, i, c->gate);
            acc = acc ? ex_add(s->ctx, acc, part) : part;
            *own = true;
        }
    }
    return acc;
}

/* The sum of n full, ungated contributions x (2 <= n <= EX_MAX_CANDIDATES) as one
 * mixed sum with weights and mask of 1: it reads each once, where a chain of adds reads
 * and writes the running sum n - 1 times and costs n - 1 nodes. */
static ex_tensor *sum_full(grad_state *s, int n, ex_tensor *const *x)
{
    ex_ctx *ctx = s->ctx;
    if (!s->ones_full) {
        ex_tensor *gate = ctx->gate;
        int64_t index = ctx->gate_index, len = EX_MAX_CANDIDATES;
        ctx->gate = NULL;
        s->ones_full = ex_fill(ctx, 1, &len, 1.0f);
        ctx->gate = gate;
        ctx->gate_index = index;
    }
    int idx[EX_MAX_CANDIDATES];
    for (int j = 0; j < n; j++)
        idx[j] = j;
    return ex_mixed_sum(ctx, s->ones_full, s->ones_full, n, x, idx);
}

/* acc plus the sum of the n contributions x (one of them as it is). */
static ex_tensor *add_chunk(grad_state *s, ex_tensor *acc, int n, ex_tensor *const *x, bool *own)
{
    ex_tensor *part = n == 1 ? x[0] : sum_full(s, n, x);
    acc = acc ? ex_add(s->ctx, acc, part) : part;
    *own = acc != x[0];
    return acc;
}

/* Adds the full, ungated contributions to t from the list at h into acc, up to
 * EX_MAX_CANDIDATES a node. */
static ex_tensor *sum_ungated(grad_state *s, ex_tensor *t, int64_t h, ex_tensor *acc, bool *own)
{
    ex_tensor *x[EX_MAX_CANDIDATES];
    int n = 0;
    for (int64_t i = h; i >= 0; i = s->items[i].next) {
        contrib *c = &s->items[i];
        if (c->gate || !is_full(t, c->geom))
            continue;
        x[n++] = c->g;
        if (n == EX_MAX_CANDIDATES) {
            acc = add_chunk(s, acc, n, x, own);
            n = 0;
        }
    }
    return n > 0 ? add_chunk(s, acc, n, x, own) : acc;
}

/* Sums the contributions to t into one tensor (NULL if none) and leaves that alone as
 * t's contribution list, so later contributions add to it. */
static ex_tensor *collapse(grad_state *s, ex_tensor *t)
{
    ex_ctx *ctx = s->ctx;
    int64_t h = s->head[t->id];
    if (h < 0)
        return NULL;
    contrib *c0 = &s->items[h];
    if (c0->next < 0 && is_full(t, c0->geom) &&
        (!c0->gate || (c0->gate == t->gate && c0->gate_index == t->gate_index)))
        return c0->g;
    /* The sum is needed only while t itself runs; each gated contribution's own nodes
     * run under its gate. */
    ex_tensor *prev_gate = ctx->gate;
    int64_t prev_index = ctx->gate_index;
    ex_tensor *base_gate = t->kind == EX_K_NODE ? t->gate : NULL;
    int64_t base_index = t->kind == EX_K_NODE ? t->gate_index : 0;
    ex_tensor *acc = NULL;
    bool own = false; /* whether acc is a tensor this function made (safe to add into) */
    ctx->gate = base_gate;
    ctx->gate_index = base_index;
    acc = sum_ungated(s, t, h, acc, &own);
    acc = sum_gated(s, t, h, acc, &own);
    for (int64_t i = h; i >= 0; i = s->items[i].next) {
        contrib *c = &s->items[i];
        if ((!c->gate && is_full(t, c->geom)) || c->done)
            continue;
        if (!own) {
            ctx->gate = base_gate;
            ctx->gate_index = base_index;
            acc = acc ? ex_copy(ctx, acc) : ex_fill(ctx, t->ndim, t->ne, 0.0f);
            own = true;
        }
        ctx->gate = c->gate;
        ctx->gate_index = c->gate_index;
        const ex_tensor *geom = c->geom;
        ex_tensor *g = unbroadcast(ctx, c->g, &geom);
        add_into(ctx, acc, is_full(t, geom) ? NULL : geom, g, c);
    }
    ctx->gate = prev_gate;
    ctx->gate_index = prev_index;
    s->head[t->id] = -1;
    add_contrib(s, t, acc, NULL);
    if (s->head[t->id] >= 0) {
        s->items[s->head[t->id]].gate = NULL;
        s->items[s->head[t->id]].gate_index = 0;
    }
    return acc;
}

/* ---- the walk ---- */

/* Which tensors need a gradient: the wrt set, and what depends on it through
 * differentiable ops. A node writing into another's storage makes that storage need one
 * too, which can reach views made before it: repeat until nothing changes. */
static void mark_needs(ex_ctx *ctx, int64_t n0, bool *needs)
{
    for (bool changed = true; changed;) {
        changed = false;
        for (int64_t i = 0; i < n0; i++) {
            ex_tensor *t = ctx->tensors[i];
            bool need = needs[i];
            if (t->kind == EX_K_VIEW)
                need |= needs[t->storage->id];
            else if (t->kind == EX_K_NODE)
                for (int k = 0; ex__op(t->op)->diff && k < t->nsrc; k++)
                    need |= needs[t->src[k]->id];
            if (t->kind == EX_K_NODE && t->storage != t && need && !needs[t->storage->id]) {
                needs[t->storage->id] = true;
                changed = true;
            }
            changed |= need != needs[i];
            needs[i] = need;
        }
    }
}

static void visit(grad_state *s, ex_tensor *t)
{
    ex_ctx *ctx = s->ctx;
    if (t->kind == EX_K_VIEW) {
        ctx->gate = NULL;
        ex_tensor *g = collapse(s, t);
        if (!g || !s->needs[t->storage->id])
            return;
        /* a reshaped weight (a pointwise filter seen as a matrix) passes its gradient on
           as a full one: no zero-filled accumulator and add per weight */
        if (is_reshape_of_root(t) && ex__contiguous(g))
            add_contrib(s, t->storage, ex_reshape(ctx, g, t->storage->ndim, t->storage->ne), NULL);
        else
            add_contrib(s, t->storage, g, t);
        return;
    }
    if (t->kind != EX_K_NODE || !ex__op(t->op)->diff)
        return;
    /* everything built for t, its gradient's sum included, runs only when t runs */
    memcpy(ctx->tag, t->tag, sizeof ctx->tag);
    ctx->gate = t->gate;
    ctx->gate_index = t->gate_index;
    ex_tensor *g = collapse(s, t);
    if (t->storage != t && s->head[t->storage->id] >= 0) {
        /* t wrote into another tensor's storage: readers of that region read t */
        ex_tensor *r = collapse(s, t->storage);
        ex_tensor *mine = ex_view(ctx, r, t->ndim, t->ne, t->st, t->offset);
        g = g ? ex_add(ctx, g, mine) : mine;
    }
    if (!g)
        return;
    ex__backward_rule(ctx, t, g, sink, s);
}

static bool loss_ok(ex_ctx *ctx, const char *op, ex_tensor *loss)
{
    if (!ex__check(ctx, op, 1, &loss)) {
        if (ctx && ctx->status == EX_OK)
            ex__fail(ctx, EX_ERR_ARG, "%s: loss is unusable", op);
        return false;
    }
    if (loss->dtype == EX_F32 && ex__numel(loss) == 1)
        return true;
    char sh[64];
    ex__fail(ctx, EX_ERR_SHAPE, "%s: loss %s (%s) must be one f32 element", op, ex__shape(loss, sh),
             ex_dtype_name(loss->dtype));
    return false;
}

/* The walk shared by both entry points: seeds needs[] with wrt, runs every rule in
 * reverse creation order, and returns each wrt tensor's summed gradient. */
static void gradients(ex_ctx *ctx, ex_tensor *loss, int n, ex_tensor *const *wrt, ex_tensor **grads)
{
    int64_t n0 = ctx->ntensors;
    grad_state s = {.ctx = ctx};
    s.needs = ex__calloc(ctx, (size_t)n0, sizeof *s.needs);
    s.head = ex__malloc(ctx, (size_t)n0 * sizeof *s.head);
    if (!s.needs || !s.head) {
        free(s.needs);
        free(s.head);
        ex__fail(ctx, EX_ERR_NOMEM, "backward: out of host memory");
        return;
    }
    for (int64_t i = 0; i < n0; i++)
        s.head[i] = -1;
    for (int i = 0; i < n; i++) {
        grads[i] = NULL;
        s.needs[wrt[i]->id] = true;
    }
    mark_needs(ctx, n0, s.needs);
    int32_t tag[3];
    memcpy(tag, ctx->tag, sizeof tag);
    ex_tensor *gate = ctx->gate;
    int64_t gate_index = ctx->gate_index;
    ctx->gate = NULL;
    if (s.needs[loss->id])
        add_contrib(&s, loss, ex_fill(ctx, loss->ndim, loss->ne, 1.0f), NULL);
    for (int64_t i = n0 - 1; i >= 0 && ctx->status == EX_OK && !s.oom; i--)
        visit(&s, ctx->tensors[i]);
    ctx->gate = NULL;
    for (int i = 0; i < n && ctx->status == EX_OK && !s.oom; i++)
        grads[i] = collapse(&s, wrt[i]);
    memcpy(ctx->tag, tag, sizeof tag);
    ctx->gate = gate;
    ctx->gate_index = gate_index;
    if (s.oom)
        ex__fail(ctx, EX_ERR_NOMEM, "backward: out of host memory");
    free(s.items);
    free(s.needs);
    free(s.head);
}

void ex_graph_set_recompute(ex_ctx *ctx, bool on)
{
    if (ctx)
        ctx->recompute = on;
}

ex_status ex_graph_gradients(ex_ctx *ctx, ex_tensor *loss, int n, ex_tensor *const *wrt,
                             ex_tensor **grads)
{
    if (!loss_ok(ctx, "gradients", loss))
        return ctx ? ctx->status : EX_ERR_ARG;
    if (n < 0 || (n > 0 && (!wrt || !grads))) {
        ex__fail(ctx, EX_ERR_ARG, "gradients: %d tensors, wrt or grads NULL", n);
        return ctx->status;
    }
    if (!ex__check(ctx, "gradients", n, wrt))
        return ctx->status ? ctx->status : EX_ERR_ARG;
    for (int i = 0; i < n; i++)
        if (wrt[i]->dtype != EX_F32) {
            ex__fail(ctx, EX_ERR_ARG, "gradients: wrt %d (%s) is %s, gradients need f32", i,
                     wrt[i]->name, ex_dtype_name(wrt[i]->dtype));
            return ctx->status;
        }
    gradients(ctx, loss, n, wrt, grads);
    return ctx->status;
}

ex_status ex_graph_backward(ex_ctx *ctx, ex_tensor *loss)
{
    if (!loss_ok(ctx, "backward", loss))
        return ctx ? ctx->status : EX_ERR_ARG;
    if (ctx->grads) {
        ex__fail(ctx, EX_ERR_STATE,
                 "backward: already called on this context (use "
                 "ex_graph_gradients for more losses)");
        return ctx->status;
    }
    int64_t n0 = ctx->ntensors;
    ex_tensor **wrt = ex__malloc(ctx, (size_t)n0 * sizeof *wrt);
    ex_tensor **g = ex__malloc(ctx, (size_t)n0 * sizeof *g);
    ctx->grads = ex__calloc(ctx, (size_t)n0, sizeof *ctx->grads);
    if (!wrt || !g || !ctx->grads) {
        free(wrt);
        free(g);
        ex__fail(ctx, EX_ERR_NOMEM, "backward: out of host memory");
        return ctx->status;
    }
    ctx->ngrads = n0;
    int n = 0;
    for (int64_t i = 0; i < n0; i++) {
        ex_tensor *t = ctx->tensors[i];
        if (t->kind == EX_K_PARAM || (t->kind == EX_K_INPUT && t->requires_grad))
            wrt[n++] = t;
    }
    gradients(ctx, loss, n, wrt, g);
    for (int i = 0; i < n && ctx->status == EX_OK; i++)
        if (g[i])
            ctx->grads[wrt[i]->id] = ex_keep(ctx, g[i]);
    free(wrt);
    free(g);
    return ctx->status;
}

ex_tensor *ex_grad(ex_ctx *ctx, ex_tensor *t)
{
    if (!ctx || !t || !ctx->grads || t->id < 0 || t->id >= ctx->ngrads || ctx->tensors[t->id] != t)
        return NULL;
    return ctx->grads[t->id];
}
