/* The memory planner: liveness over the whole step, in-place element-wise ops, reuse of
 * freed bytes, arena chunks within the backend's limits, then the flat node list and what
 * each node waits for (core/deps.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/abi.h"
#include "core/deps.h"
#include "core/group.h"
#include "core/plan.h"

#define ALIGN 256u

static uint64_t align_up(uint64_t x)
{
    return (x + ALIGN - 1) & ~(uint64_t)(ALIGN - 1);
}

ex_status ex__plan_fail(ex_plan *p, ex_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->error, sizeof p->error, fmt, ap);
    va_end(ap);
    return st;
}

static int64_t root_id(const ex_tensor *t)
{
    return t->storage->id;
}

/* ---- liveness and in-place merging ---- */

typedef struct live {
    int64_t *first, *last, *parent;
    bool *persistent;
} live;

static int64_t find(int64_t *parent, int64_t i)
{
    while (parent[i] != i)
        i = parent[i] = parent[parent[i]];
    return i;
}

static void touch(live *L, const ex_tensor *t, int64_t when)
{
    int64_t r = root_id(t);
    if (L->last[r] < when)
        L->last[r] = when;
}

static void liveness(const ex_ctx *ctx, int64_t nt, live *L)
{
    for (int64_t i = 0; i < nt; i++) {
        const ex_tensor *t = ctx->tensors[i];
        L->parent[i] = i;
        L->first[i] = L->last[i] = i;
        ex_kind k = t->kind;
        L->persistent[i] = k == EX_K_INPUT || k == EX_K_PARAM || k == EX_K_STATE;
    }
    for (int64_t i = 0; i < nt; i++) {
        const ex_tensor *t = ctx->tensors[i];
        if (t->keep)
            L->persistent[root_id(t)] = true;
        if (t->kind != EX_K_NODE)
            continue;
        touch(L, t, i);
        for (int s = 0; s < t->nsrc; s++)
            touch(L, t->src[s], i);
        if (t->gate)
            touch(L, t->gate, i);
    }
}

/* A stage run alone must not read what another stage left in the arena. */
static ex_status check_stages(ex_plan *p, const live *L)
{
    const ex_ctx *ctx = p->ctx;
    for (int64_t i = 0; i < p->ntensors; i++) {
        const ex_tensor *t = ctx->tensors[i];
        for (int k = 0; t->kind == EX_K_NODE && k < t->nsrc + (t->gate != NULL); k++) {
            const ex_tensor *src = k < t->nsrc ? t->src[k] : t->gate;
            const ex_tensor *root = src->storage;
            if (!L->persistent[root->id] && root->stage != t->stage)
                return ex__plan_fail(p, EX_ERR_ARG,
                                     "plan: %s (stage %d) reads %s of stage %d, which is not "
                                     "persistent; ex_keep() it",
                                     ex_op_name(t->op), t->stage, root->name, root->stage);
        }
    }
    return EX_OK;
}

static bool same_geometry(const ex_tensor *a, const ex_tensor *b)
{
    return a->offset == b->offset && ex__same_shape(a, b) &&
           !memcmp(a->st, b->st, (size_t)a->ndim * sizeof a->st[0]);
}

/* Whether node t may write over its first source's storage. */
static bool can_inplace(const ex_ctx *ctx, live *L, const ex_tensor *t)
{
    if (t->storage != t || L->persistent[t->id] || t->gate || !ex__op(t->op)->elementwise ||
        t->nsrc < 1)
        return false;
    const ex_tensor *s0 = t->src[0];
    int64_t r = find(L->parent, root_id(s0));
    const ex_tensor *root = ctx->tensors[r];
    if (L->persistent[r] || L->last[r] != t->id || s0->dtype != t->dtype ||
        root->storage_numel != t->storage_numel || s0->offset != 0 || !ex__contiguous(s0) ||
        !ex__same_shape(s0, t))
        return false;
    for (int i = 1; i < t->nsrc; i++)
        if (find(L->parent, root_id(t->src[i])) == r && !same_geometry(t->src[i], s0))
            return false;
    return true;
}

static int64_t merge_inplace(const ex_ctx *ctx, int64_t nt, live *L)
{
    int64_t merged = 0;
    for (int64_t i = 0; i < nt; i++) {
        const ex_tensor *t = ctx->tensors[i];
        if (t->kind != EX_K_NODE || !can_inplace(ctx, L, t))
            continue;
        int64_t r = find(L->parent, root_id(t->src[0]));
        L->parent[i] = r;
        if (L->last[r] < L->last[i])
            L->last[r] = L->last[i];
        merged++;
    }
    return merged;
}

/* ---- placement ---- */

typedef struct chunk_use {
    uint64_t start, end;
} chunk_use;

typedef struct arena {
    ex_ctx *ctx;     /* allocations are counted by its hook */
    chunk_use **use; /* per chunk: live ranges sorted by start */
    int64_t *nuse, *capuse;
    uint64_t *top;
    bool *persistent;
    int nchunks, cap;
    uint64_t limit;
} arena;

static bool arena_grow(arena *a, bool persistent)
{
    if (a->nchunks == a->cap) {
        int cap = a->cap ? 2 * a->cap : 4;
        chunk_use **u = ex__realloc(a->ctx, a->use, (size_t)cap * sizeof *u);
        if (u)
            a->use = u;
        int64_t *n = ex__realloc(a->ctx, a->nuse, (size_t)cap * sizeof *n);
        if (n)
            a->nuse = n;
        int64_t *c = ex__realloc(a->ctx, a->capuse, (size_t)cap * sizeof *c);
        if (c)
            a->capuse = c;
        uint64_t *t = ex__realloc(a->ctx, a->top, (size_t)cap * sizeof *t);
        if (t)
            a->top = t;
        bool *p = ex__realloc(a->ctx, a->persistent, (size_t)cap * sizeof *p);
        if (p)
            a->persistent = p;
        if (!u || !n || !c || !t || !p)
            return false;
        a->cap = cap;
    }
    int c = a->nchunks++;
    a->use[c] = NULL;
    a->nuse[c] = a->capuse[c] = 0;
    a->top[c] = 0;
    a->persistent[c] = persistent;
    return true;
}

static bool use_insert(arena *a, int c, int64_t at, uint64_t start, uint64_t end)
{
    if (a->nuse[c] == a->capuse[c]) {
        int64_t cap = a->capuse[c] ? 2 * a->capuse[c] : 16;
        chunk_use *u = ex__realloc(a->ctx, a->use[c], (size_t)cap * sizeof *u);
        if (!u)
            return false;
        a->use[c] = u;
        a->capuse[c] = cap;
    }
    memmove(&a->use[c][at + 1], &a->use[c][at], (size_t)(a->nuse[c] - at) * sizeof(chunk_use));
    a->use[c][at] = (chunk_use){start, end};
    a->nuse[c]++;
    if (a->top[c] < end)
        a->top[c] = end;
    return true;
}

static void use_remove(arena *a, int c, uint64_t start)
{
    for (int64_t i = 0; i < a->nuse[c]; i++)
        if (a->use[c][i].start == start) {
            memmove(&a->use[c][i], &a->use[c][i + 1],
                    (size_t)(a->nuse[c] - i - 1) * sizeof(chunk_use));
            a->nuse[c]--;
            return;
        }
}

/* First fit: the lowest gap of any chunk of the right kind, else a new chunk. */
static bool place(arena *a, plan_slot *s, bool reuse)
{
    uint64_t need = align_up(s->bytes);
    for (int c = 0; c < a->nchunks; c++) {
        if (a->persistent[c] != s->persistent)
            continue;
        uint64_t at = reuse ? 0 : a->top[c];
        int64_t i = reuse ? 0 : a->nuse[c];
        for (; i < a->nuse[c] && a->use[c][i].start < at + need; i++) {
            if (a->use[c][i].end > at)
                at = a->use[c][i].end;
        }
        if (at + need <= a->limit) {
            s->chunk = c;
            s->offset = at;
            return use_insert(a, c, i, at, at + need);
        }
    }
    if (!arena_grow(a, s->persistent))
        return false;
    s->chunk = a->nchunks - 1;
    s->offset = 0;
    return use_insert(a, s->chunk, 0, 0, need);
}

static void arena_free(arena *a)
{
    for (int c = 0; c < a->nchunks; c++)
        free(a->use[c]);
    free(a->use);
    free(a->nuse);
    free(a->capuse);
    free(a->top);
    free(a->persistent);
}

/* ---- the plan ---- */

static ex_status make_slots(ex_plan *p, live *L)
{
    const ex_ctx *ctx = p->ctx;
    int64_t nt = p->ntensors;
    p->slot_of = ex__malloc(p->ctx, (size_t)nt * sizeof *p->slot_of);
    p->slots = ex__calloc(p->ctx, (size_t)nt, sizeof *p->slots);
    if (!p->slot_of || !p->slots)
        return ex__plan_fail(p, EX_ERR_NOMEM, "plan: out of host memory");
    for (int64_t i = 0; i < nt; i++)
        p->slot_of[i] = -1;
    for (int64_t i = 0; i < nt; i++) {
        const ex_tensor *t = ctx->tensors[i];
        if (t->storage != t)
            continue;
        uint64_t bytes = (uint64_t)t->storage_numel * (uint64_t)ex_dtype_size(t->dtype);
        p->stats.total_tensor_bytes += bytes;
        int64_t r = find(L->parent, i);
        if (r != i) { /* in place: shares its first source's slot */
            p->stats.inplace_nodes++;
            continue;
        }
        plan_slot *s = &p->slots[p->nslots];
        s->bytes = bytes;
        s->first = L->first[i];
        s->last = L->last[i];
        s->persistent = L->persistent[i];
        p->slot_of[i] = p->nslots++;
    }
    for (int64_t i = 0; i < nt; i++)
        if (ctx->tensors[i]->storage == ctx->tensors[i] && p->slot_of[i] < 0)
            p->slot_of[i] = p->slot_of[find(L->parent, i)];
    return EX_OK;
}

static ex_status place_all(ex_plan *p, uint64_t limit)
{
    arena a = {.ctx = p->ctx, .limit = limit};
    bool reuse = !p->opts.no_reuse;
    int64_t gap = p->opts.reuse_after;
    if (gap == 0) {
        gap = ex_backend_get_caps(p->be)->reuse_after;
        gap = gap > 0 ? gap : EX_PLAN_REUSE_AFTER;
    }
    gap = gap < 0 ? 0 : gap;
    ex_status st = EX_OK;
    /* slots are in creation order, which is first-write order: walk time forward, freeing
     * what died more than gap tensors before each new slot's birth */
    int64_t *live_ids = ex__malloc(p->ctx, (size_t)(p->nslots + 1) * sizeof *live_ids);
    int64_t nlive = 0;
    if (!live_ids)
        st = ex__plan_fail(p, EX_ERR_NOMEM, "plan: out of host memory");
    for (int64_t i = 0; st == EX_OK && i < p->nslots; i++) {
        plan_slot *s = &p->slots[i];
        if (s->bytes > limit) {
            st = ex__plan_fail(p, EX_ERR_NOMEM,
                               "plan: a tensor of %llu bytes exceeds the largest arena chunk "
                               "(%llu bytes)",
                               (unsigned long long)s->bytes, (unsigned long long)limit);
            break;
        }
        for (int64_t j = 0; reuse && j < nlive;) {
            plan_slot *o = &p->slots[live_ids[j]];
            if (o->last + gap < s->first) {
                use_remove(&a, o->chunk, o->offset);
                live_ids[j] = live_ids[--nlive];
            } else {
                j++;
            }
        }
        if (!place(&a, s, reuse && !s->persistent)) {
            st = ex__plan_fail(p, EX_ERR_NOMEM, "plan: out of host memory");
            break;
        }
        if (!s->persistent)
            live_ids[nlive++] = i;
    }
    free(live_ids);
    if (st == EX_OK) {
        p->nchunks = a.nchunks;
        p->chunks = ex__calloc(p->ctx, (size_t)a.nchunks + 1, sizeof *p->chunks);
        p->chunk_bytes = ex__calloc(p->ctx, (size_t)a.nchunks + 1, sizeof *p->chunk_bytes);
        p->chunk_persistent =
            ex__calloc(p->ctx, (size_t)a.nchunks + 1, sizeof *p->chunk_persistent);
        if (!p->chunks || !p->chunk_bytes || !p->chunk_persistent)
            st = ex__plan_fail(p, EX_ERR_NOMEM, "plan: out of host memory");
        for (int c = 0; st == EX_OK && c < a.nchunks; c++) {
            p->chunk_bytes[c] = a.top[c];
            p->chunk_persistent[c] = a.persistent[c];
            if (a.persistent[c])
                p->stats.persistent_bytes += a.top[c];
            else
                p->stats.arena_bytes += a.top[c];
        }
        p->stats.arena_chunks = 0;
        for (int c = 0; st == EX_OK && c < a.nchunks; c++)
            p->stats.arena_chunks += !a.persistent[c];
    }
    arena_free(&a);
    return st;
}

/* Device memory, counted by the context's allocation hook like host memory; *why says
 * what failed. */
static ex_status buffer_alloc(ex_plan *p, uint64_t bytes, ex_buffer **out, const char **why)
{
    if (ex__alloc_fails(p->ctx)) {
        *out = NULL;
        *why = "refused by the context's allocation hook";
        return EX_ERR_NOMEM;
    }
    ex_status st = p->f->buffer_alloc(p->impl, bytes, out);
    *why = p->f->error(p->impl);
    return st;
}

/* The snapshot's copy of each persistent chunk (ex_plan_snapshot). */
static ex_status alloc_backup(ex_plan *p)
{
    p->backup = ex__calloc(p->ctx, (size_t)p->nchunks + 1, sizeof *p->backup);
    if (!p->backup)
        return ex__plan_fail(p, EX_ERR_NOMEM, "plan: out of host memory");
    for (int c = 0; c < p->nchunks; c++) {
        if (!p->chunk_persistent[c])
            continue;
        const char *why = "";
        ex_status st =
            buffer_alloc(p, p->chunk_bytes[c] ? p->chunk_bytes[c] : ALIGN, &p->backup[c], &why);
        if (st != EX_OK)
            return ex__plan_fail(p, st, "plan: snapshot of chunk %d, %llu bytes: %s", c,
                                 (unsigned long long)p->chunk_bytes[c], why);
    }
    return EX_OK;
}

static ex_status alloc_chunks(ex_plan *p)
{
    const ex_backend_caps *caps = ex_backend_get_caps(p->be);
    uint64_t need = p->stats.arena_bytes + p->stats.persistent_bytes;
    if (p->opts.snapshot)
        need += p->stats.persistent_bytes;
    if (caps->memory_bytes && need > caps->memory_bytes)
        return ex__plan_fail(p, EX_ERR_NOMEM,
                             "plan: needs %llu bytes (arena %llu, persistent %llu) but %s has %llu",
                             (unsigned long long)need, (unsigned long long)p->stats.arena_bytes,
                             (unsigned long long)p->stats.persistent_bytes, caps->name,
                             (unsigned long long)caps->memory_bytes);
    for (int c = 0; c < p->nchunks; c++) {
        const char *why = "";
        ex_status st =
            buffer_alloc(p, p->chunk_bytes[c] ? p->chunk_bytes[c] : ALIGN, &p->chunks[c], &why);
        if (st != EX_OK)
            return ex__plan_fail(p, st, "plan: chunk %d of %llu bytes: %s", c,
                                 (unsigned long long)p->chunk_bytes[c], why);
        /* inputs, parameters and state start at zero, on every backend alike */
        if (p->chunk_persistent[c] &&
            (st = p->f->fill(p->impl, p->chunks[c], 0, p->chunk_bytes[c] & ~(uint64_t)3, 0u)) !=
                EX_OK)
            return ex__plan_fail(p, st, "plan: zeroing chunk %d: %s", c, p->f->error(p->impl));
    }
    return p->opts.snapshot ? alloc_backup(p) : EX_OK;
}

void ex__plan_desc(const ex_plan *p, const ex_tensor *t, ex_tdesc *d)
{
    const plan_slot *s = &p->slots[p->slot_of[root_id(t)]];
    memset(d, 0, sizeof *d);
    d->dtype = t->dtype;
    d->ndim = t->ndim;
    for (int i = 0; i < EX_MAX_DIMS; i++) {
        d->ne[i] = i < t->ndim ? t->ne[i] : 1;
        d->st[i] = i < t->ndim ? t->st[i] : 0;
    }
    d->buf = p->chunks[s->chunk];
    d->offset = s->offset + (uint64_t)t->offset * (uint64_t)ex_dtype_size(t->dtype);
}

static ex_status build_nodes(ex_plan *p)
{
    const ex_ctx *ctx = p->ctx;
    int64_t nn = 0, nd = 0;
    for (int64_t i = 0; i < p->ntensors; i++)
        if (ctx->tensors[i]->kind == EX_K_NODE) {
            nn++;
            nd += ctx->tensors[i]->nsrc + (ctx->tensors[i]->gate != NULL);
        }
    p->nodes = ex__calloc(p->ctx, (size_t)nn + 1, sizeof *p->nodes);
    p->node_tensor = ex__calloc(p->ctx, (size_t)nn + 1, sizeof *p->node_tensor);
    p->descs = ex__calloc(p->ctx, (size_t)nd + 1, sizeof *p->descs);
    p->node_ms = ex__calloc(p->ctx, (size_t)nn + 1, sizeof *p->node_ms);
    if (!p->nodes || !p->node_tensor || !p->descs || !p->node_ms)
        return ex__plan_fail(p, EX_ERR_NOMEM, "plan: out of host memory for %lld nodes",
                             (long long)nn);
    p->nstages = ctx->stage + 1;
    p->stage_first = ex__calloc(p->ctx, (size_t)p->nstages, sizeof *p->stage_first);
    p->stage_count = ex__calloc(p->ctx, (size_t)p->nstages, sizeof *p->stage_count);
    if (!p->stage_first || !p->stage_count)
        return ex__plan_fail(p, EX_ERR_NOMEM, "plan: out of host memory");
    ex_tdesc *d = p->descs;
    for (int64_t i = 0; i < p->ntensors; i++) {
        const ex_tensor *t = ctx->tensors[i];
        if (t->kind != EX_K_NODE)
            continue;
        if (!p->stage_count[t->stage]++)
            p->stage_first[t->stage] = p->nnodes;
        ex_node_exec *n = &p->nodes[p->nnodes];
        p->node_tensor[p->nnodes++] = i;
        n->op = t->op;
        n->nsrc = t->nsrc;
        n->src = d;
        for (int s = 0; s < t->nsrc; s++)
            ex__plan_desc(p, t->src[s], d++);
        ex__plan_desc(p, t, &n->dst);
        memcpy(n->ip, t->ip, sizeof n->ip);
        memcpy(n->fp, t->fp, sizeof n->fp);
        memcpy(n->tag, t->tag, sizeof n->tag);
        if (t->gate) {
            ex__plan_desc(p, t->gate, d);
            n->gate = d++;
            n->gate_index = t->gate_index;
        }
        ex__node_traffic(t, &n->bytes_read, &n->bytes_written, &n->min_bytes);
        n->flops = ex__op(t->op)->flops(t);
    }
    p->stats.nodes = p->nnodes;
    if (ex__node_deps(p->ctx, p->nodes, p->nnodes, &p->deps) != EX_OK)
        return ex__plan_fail(p, EX_ERR_NOMEM,
                             "plan: out of host memory for the dependencies of %lld nodes",
                             (long long)p->nnodes);
    /* a group stays within its stage, which runs on its own */
    for (int s = 0; s < p->nstages; s++)
        p->launches += ex__node_groups(p->nodes + p->stage_first[s], p->stage_count[s],
                                       p->opts.no_group ? NULL : p->f->groups, p->impl);
    return EX_OK;
}

static ex_status plan_build(ex_plan *p)
{
    int64_t nt = p->ntensors;
    live L = {ex__malloc(p->ctx, (size_t)nt * sizeof(int64_t)),
              ex__malloc(p->ctx, (size_t)nt * sizeof(int64_t)),
              ex__malloc(p->ctx, (size_t)nt * sizeof(int64_t)),
              ex__malloc(p->ctx, (size_t)nt * sizeof(bool))};
    ex_status st = EX_OK;
    if (!L.first || !L.last || !L.parent || !L.persistent)
        st = ex__plan_fail(p, EX_ERR_NOMEM, "plan: out of host memory");
    if (st == EX_OK) {
        liveness(p->ctx, nt, &L);
        st = check_stages(p, &L);
    }
    if (st == EX_OK) {
        if (!p->opts.no_inplace && !p->opts.no_reuse)
            merge_inplace(p->ctx, nt, &L);
        st = make_slots(p, &L);
    }
    free(L.first);
    free(L.last);
    free(L.parent);
    free(L.persistent);
    const ex_backend_caps *caps = ex_backend_get_caps(p->be);
    uint64_t limit = caps->max_alloc_bytes < caps->max_binding_bytes ? caps->max_alloc_bytes
                                                                     : caps->max_binding_bytes;
    if (p->opts.chunk_limit && p->opts.chunk_limit < limit)
        limit = p->opts.chunk_limit;
    if (st == EX_OK)
        st = place_all(p, limit);
    if (st == EX_OK)
        st = alloc_chunks(p);
    if (st == EX_OK)
        st = build_nodes(p);
    return st;
}

void ex_plan_opts_init(ex_plan_opts *o, size_t size)
{
    if (!o)
        return;
    ex_plan_opts d = {.size = sizeof d};
    ex__give_config(o, size, &d, sizeof d);
}

ex_status ex_graph_plan(ex_ctx *ctx, ex_backend *be, const ex_plan_opts *opts, ex_plan **out)
{
    if (!out)
        return ctx ? (ex__fail(ctx, EX_ERR_ARG, "plan: out is NULL"), EX_ERR_ARG) : EX_ERR_ARG;
    *out = NULL;
    if (!ctx)
        return EX_ERR_ARG;
    if (ctx->status != EX_OK)
        return ctx->status;
    if (!be) {
        ex__fail(ctx, EX_ERR_ARG, "plan: backend is NULL");
        return EX_ERR_ARG;
    }
    ex_plan *p = ex__calloc(ctx, 1, sizeof *p);
    if (!p) {
        ex__fail(ctx, EX_ERR_NOMEM, "plan: out of host memory");
        return EX_ERR_NOMEM;
    }
    p->ctx = ctx;
    p->be = be;
    p->f = ex__backend_iface_of(be);
    p->impl = ex__backend_impl_of(be);
    ex_plan_opts_default(&p->opts);
    if (opts && ex__adopt_config(&p->opts, sizeof p->opts, opts, "plan", p->error,
                                 sizeof p->error) != EX_OK) {
        ex__fail(ctx, EX_ERR_ARG, "%s", p->error);
        free(p);
        return EX_ERR_ARG;
    }
    p->ntensors = ctx->ntensors;
    ex_status st = plan_build(p);
    if (st != EX_OK) {
        ex__fail(ctx, st, "%s", p->error);
        ex_plan_free(p);
        return st;
    }
    *out = p;
    return EX_OK;
}

void ex_plan_free(ex_plan *p)
{
    if (!p)
        return;
    ex__plan_forget(p);
    for (int c = 0; p->chunks && c < p->nchunks; c++)
        if (p->chunks[c])
            p->f->buffer_free(p->impl, p->chunks[c]);
    for (int c = 0; p->backup && c < p->nchunks; c++)
        if (p->backup[c])
            p->f->buffer_free(p->impl, p->backup[c]);
    free(p->backup);
    free(p->chunks);
    free(p->chunk_bytes);
    free(p->chunk_persistent);
    free(p->slot_of);
    free(p->slots);
    free(p->nodes);
    free(p->node_tensor);
    free(p->descs);
    free(p->deps);
    free(p->node_ms);
    free(p->stage_first);
    free(p->stage_count);
    free(p);
}
