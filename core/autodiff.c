/* Reverse-mode autodiff: appends backward nodes (ordinary ops) to the graph.
 *
 * Gradients accumulate per tensor as a list of contributions. A view passes its
 * gradient to its storage root with its geometry; a root sums its contributions, adding
 * view-shaped ones into a private accumulator in place; full ones are summed by
 * mixed-sum nodes of up to EX_MAX_CANDIDATES sources side by side, then by one more,
 * rather than by chains of adds (terms, below). A view
 * that is its whole root reshaped passes a reshape of its gradient as a full
 * contribution instead, so a weight used through a reshape needs no accumulator. A
 * contribution made under a gate (a candidate's subgraph) is added by a node with the
 * same gate, so a skipped candidate leaves the sum as it was. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine.h"

typedef struct contrib {
    ex_tensor *g;
    const ex_tensor *geom; /* NULL: the target's own shape; else a view of the root */
    ex_tensor *gate;
    int64_t gate_index;
    int64_t next;
    bool done; /* already summed by a mixed-sum node (gated_terms) */
} contrib;

typedef struct grad_state {
    ex_ctx *ctx;
    bool *needs;
    int64_t *head; /* per tensor: first contribution, -1 none */
    contrib *items;
    int64_t n, cap;
    ex_tensor *ones;      /* weights of 1 for gated_terms, made once per walk */
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

/* The gate a gated contribution is summed under and its index there: the gate's storage
 * when the gate is a contiguous view of a small one, so that contributions made under
 * different views of one mask (a DARTS edge's row of its cell type's mask) share a mixed
 * sum. (A GPU reads a mixed sum's weights and mask as small operands: 4,096 at most.) */
static ex_tensor *chunk_gate(const contrib *c, int64_t *at)
{
    ex_tensor *r = c->gate->storage;
    bool root =
        r && r != c->gate && ex__contiguous(c->gate) && ex__contiguous(r) && ex__numel(r) <= 4096;
    *at = root ? c->gate->offset + c->gate_index : c->gate_index;
    return root ? r : c->gate;
}

/* A contribution gated_terms can take: full, under a gate whose flat index fits an int. */
static bool gated_full(const ex_tensor *t, const contrib *c)
{
    if (c->done || !c->gate || !is_full(t, c->geom) || c->gate->dtype != EX_F32 ||
        !ex__contiguous(c->gate) || c->gate_index < 0)
        return false;
    int64_t at;
    chunk_gate(c, &at);
    return at <= INT32_MAX;
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

/* One mixed sum (weights 1) of up to EX_MAX_CANDIDATES contributions under gate (a
 * chunk_gate), with distinct indices there, from the list at h. */
static ex_tensor *sum_chunk(grad_state *s, ex_tensor *t, int64_t h, ex_tensor *gate)
{
    ex_ctx *ctx = s->ctx;
    ex_tensor *x[EX_MAX_CANDIDATES];
    int idx[EX_MAX_CANDIDATES], n = 0;
    for (int64_t i = h; i >= 0 && n < EX_MAX_CANDIDATES; i = s->items[i].next) {
        contrib *c = &s->items[i];
        if (!gated_full(t, c))
            continue;
        int64_t at;
        bool dup = chunk_gate(c, &at) != gate;
        for (int j = 0; j < n; j++)
            dup |= idx[j] == (int)at;
        if (dup)
            continue;
        x[n] = c->g;
        idx[n++] = (int)at;
        c->done = true;
    }
    int64_t len = ex__numel(gate);
    return ex_mixed_sum(ctx, ones_of(s, len), ex_reshape(ctx, gate, 1, &len), n, x, idx);
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

/* The terms of a gradient's sum: full ungated contributions as they are and one mixed
 * sum per chunk of a gate's contributions. They are summed by nodes of their own at the
 * end, not added one after another: terms have no order among themselves, so a GPU makes
 * them side by side and the sum waits for one round of them, where a chain of adds waited
 * for each in turn (a DARTS cell state's gradient had up to five in a row). A batch of
 * EX_MAX_CANDIDATES terms is summed as it fills, each batch on its own, and the batches'
 * sums and the terms left are summed last; the order of the sum is the terms' order. */
typedef struct terms {
    ex_tensor *x[EX_MAX_CANDIDATES];    /* terms not in a batch's sum yet */
    ex_tensor *sums[EX_MAX_CANDIDATES]; /* the sums of full batches */
    int n, nsums;
    bool own; /* x[0] is a node made here (safe to add into) */
} terms;

static void term(grad_state *s, terms *t, ex_tensor *x, bool made)
{
    if (t->n == EX_MAX_CANDIDATES) {
        if (t->nsums == EX_MAX_CANDIDATES) {
            t->sums[0] = sum_full(s, t->nsums, t->sums);
            t->nsums = 1;
        }
        t->sums[t->nsums++] = sum_full(s, t->n, t->x);
        t->n = 0;
    }
    if (t->n == 0)
        t->own = made;
    t->x[t->n++] = x;
}

/* The terms' sum (NULL if none); *own says whether it is a node made here. */
static ex_tensor *terms_sum(grad_state *s, terms *t, bool *own)
{
    if (t->nsums + t->n > EX_MAX_CANDIDATES && t->n > 1) {
        t->x[0] = sum_full(s, t->n, t->x);
        t->n = 1;
    }
    if (t->nsums + t->n > EX_MAX_CANDIDATES) {
        t->sums[0] = sum_full(s, t->nsums, t->sums);
        t->nsums = 1;
    }
    ex_tensor *all[EX_MAX_CANDIDATES];
    int n = 0;
    for (int i = 0; i < t->nsums; i++)
        all[n++] = t->sums[i];
    for (int i = 0; i < t->n; i++)
        all[n++] = t->x[i];
    if (n < 2) {
        *own = n == 1 && (t->nsums == 1 || t->own);
        return n == 1 ? all[0] : NULL;
    }
    *own = true;
    return sum_full(s, n, all);
}

/* The gated contributions to t as terms, a gate at a time, each chunk summed by a
 * mixed-sum node with weights 1: each node reads its contributions once and skips the
 * inactive ones on the device, where a zero fill and one add per contribution (each
 * under its own gate) would read and write the sum every time. A gate's single
 * contribution is a chunk too (a copy of it, or zeros): added in place under its gate it
 * cost the same traffic, but a round of its own after the sum. */
static void gated_terms(grad_state *s, ex_tensor *t, int64_t h, terms *out)
{
    for (int64_t i = h; i >= 0; i = s->items[i].next) {
        contrib *c = &s->items[i];
        if (!gated_full(t, c))
            continue;
        int64_t at;
        ex_tensor *gate = chunk_gate(c, &at);
        while (gated_full(t, c)) /* c goes in the first chunk: it is the first left */
            term(s, out, sum_chunk(s, t, i, gate), true);
    }
}

/* The full, ungated contributions to t from the list at h as terms. */
static void ungated_terms(grad_state *s, ex_tensor *t, int64_t h, terms *out)
{
    for (int64_t i = h; i >= 0; i = s->items[i].next) {
        contrib *c = &s->items[i];
        if (!c->gate && is_full(t, c->geom))
            term(s, out, c->g, false);
    }
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
    bool own; /* whether acc is a tensor this function made (safe to add into) */
    ctx->gate = base_gate;
    ctx->gate_index = base_index;
    terms parts = {.n = 0};
    ungated_terms(s, t, h, &parts);
    gated_terms(s, t, h, &parts);
    ex_tensor *acc = terms_sum(s, &parts, &own);
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
    ctx->remade = ctx->recompute ? ex__calloc(ctx, (size_t)n0, sizeof *ctx->remade) : NULL;
    ctx->nremade = ctx->remade ? n0 : 0;
    if (!s.needs || !s.head || (ctx->recompute && !ctx->remade)) {
        free(s.needs);
        free(s.head);
        free(ctx->remade);
        ctx->remade = NULL;
        ctx->nremade = 0;
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
    free(ctx->remade);
    ctx->remade = NULL;
    ctx->nremade = 0;
}

void ex_graph_set_recompute(ex_ctx *ctx, bool on)
{
    ex_graph_set_recompute_level(ctx, on ? 1 : 0);
}

void ex_graph_set_recompute_level(ex_ctx *ctx, int level)
{
    if (ctx)
        ctx->recompute = level < 0 ? 0 : level > 2 ? 2 : level;
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
