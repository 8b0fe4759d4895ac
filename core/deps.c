/* Which earlier nodes each node of a plan waits for, from the bytes they touch (deps.h).
 *
 * Per buffer, the accesses are kept in buckets of 1 MiB, writers and readers apart: a
 * read looks only at the writers (a gate read by thousands of nodes stays cheap), a
 * write at both. A write drops the accesses it covers, whose later dependants reach them
 * through it, so the lists stay short. */
#include <stdlib.h>
#include <string.h>

#include "core/deps.h"
#include "core/engine.h"
#include "core/tdesc.h"

#define BUCKET_SHIFT 20

typedef struct rec {
    uint64_t lo, hi;
    int64_t node;
} rec;

typedef struct rec_list {
    rec *r;
    int64_t n, cap;
} rec_list;

typedef struct bucket {
    rec_list writers, readers;
} bucket;

typedef struct buf_map {
    const ex_buffer *buf;
    uint64_t hi; /* the highest byte touched, for the bucket count */
    int64_t nbk;
    bucket *bk;
} buf_map;

typedef struct tracker {
    ex_ctx *ctx; /* whose allocation hook counts ours (NULL: none) */
    buf_map *bufs;
    int64_t nbufs, cap, last;
    ex_span *spans; /* one node's */
    int64_t *deps;  /* one node's, before sorting */
    int64_t ndeps, deps_cap;
} tracker;

int ex__node_spans(const ex_node_exec *n, ex_span *spans)
{
    int k = 0;
    uint32_t updated = ex_td_updated_sources(n);
    for (int s = 0; s < n->nsrc + 2; s++) {
        const ex_tdesc *t = s < n->nsrc ? &n->src[s] : s == n->nsrc ? n->gate : &n->dst;
        if (!t || !t->buf || ex_td_numel(t) == 0)
            continue;
        int64_t below, above;
        ex_td_reach(t, &below, &above);
        int64_t size = ex_dtype_size(t->dtype);
        uint64_t lo = t->offset + (uint64_t)(below * size),
                 hi = t->offset + (uint64_t)((above + 1) * size);
        bool write = s == n->nsrc + 1 || (s < n->nsrc && s < 32 && (updated >> s & 1u));
        spans[k++] = (ex_span){t->buf, lo & ~(uint64_t)3, (hi + 3) & ~(uint64_t)3, write};
    }
    return k;
}

/* p, or p grown to room for more than n elements of size bytes (*cap of them now), or NULL
 * (p stays) when host memory runs out. */
static void *room(ex_ctx *ctx, void *p, int64_t n, int64_t *cap, size_t size)
{
    if (n < *cap)
        return p;
    int64_t c = 2 * *cap + 16;
    void *q = ex__realloc(ctx, p, (size_t)c * size);
    if (q)
        *cap = c;
    return q;
}

static buf_map *map_of(tracker *t, const ex_buffer *buf)
{
    if (t->last < t->nbufs && t->bufs[t->last].buf == buf)
        return &t->bufs[t->last];
    for (t->last = 0; t->last < t->nbufs; t->last++)
        if (t->bufs[t->last].buf == buf)
            return &t->bufs[t->last];
    return NULL;
}

/* First pass: every buffer the nodes touch and how far, to size its buckets. */
static bool find_buffers(tracker *t, const ex_node_exec *nodes, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        int k = ex__node_spans(&nodes[i], t->spans);
        for (int j = 0; j < k; j++) {
            buf_map *m = map_of(t, t->spans[j].buf);
            if (!m) {
                buf_map *grown = room(t->ctx, t->bufs, t->nbufs, &t->cap, sizeof *grown);
                if (!grown)
                    return false;
                t->bufs = grown;
                m = &t->bufs[t->last = t->nbufs++];
                *m = (buf_map){t->spans[j].buf, 0, 0, NULL};
            }
            m->hi = t->spans[j].hi > m->hi ? t->spans[j].hi : m->hi;
        }
    }
    for (int64_t b = 0; b < t->nbufs; b++) {
        t->bufs[b].nbk = (int64_t)(t->bufs[b].hi >> BUCKET_SHIFT) + 1;
        t->bufs[b].bk = ex__calloc(t->ctx, (size_t)t->bufs[b].nbk, sizeof *t->bufs[b].bk);
        if (!t->bufs[b].bk)
            return false;
    }
    return true;
}

static bool push_rec(tracker *t, rec_list *l, rec r)
{
    rec *grown = room(t->ctx, l->r, l->n, &l->cap, sizeof *grown);
    if (grown)
        (l->r = grown)[l->n++] = r;
    return grown != NULL;
}

static bool push_dep(tracker *t, int64_t node)
{
    int64_t *grown = room(t->ctx, t->deps, t->ndeps, &t->deps_cap, sizeof *grown);
    if (grown)
        (t->deps = grown)[t->ndeps++] = node;
    return grown != NULL;
}

/* The span's buckets, [*first, *last]. */
static bucket *buckets_of(tracker *t, const ex_span *s, int64_t *first, int64_t *last)
{
    buf_map *m = map_of(t, s->buf);
    *first = (int64_t)(s->lo >> BUCKET_SHIFT);
    *last = (int64_t)((s->hi - 1) >> BUCKET_SHIFT);
    return m->bk;
}

static bool conflicts_in(tracker *t, const rec_list *l, const ex_span *s)
{
    for (int64_t j = 0; j < l->n; j++)
        if (l->r[j].lo < s->hi && s->lo < l->r[j].hi && !push_dep(t, l->r[j].node))
            return false;
    return true;
}

/* The nodes span s must wait for: the writers of its bytes, and for a write the readers. */
static bool wait_for(tracker *t, const ex_span *s)
{
    int64_t first, last;
    bucket *bk = buckets_of(t, s, &first, &last);
    for (int64_t b = first; b <= last; b++)
        if (!conflicts_in(t, &bk[b].writers, s) ||
            (s->write && !conflicts_in(t, &bk[b].readers, s)))
            return false;
    return true;
}

/* Drops the records that s covers. */
static void drop_covered(rec_list *l, const ex_span *s)
{
    for (int64_t j = 0; j < l->n;)
        if (l->r[j].lo >= s->lo && l->r[j].hi <= s->hi)
            l->r[j] = l->r[--l->n];
        else
            j++;
}

/* Records node i's access s. */
static bool note(tracker *t, const ex_span *s, int64_t i)
{
    int64_t first, last;
    bucket *bk = buckets_of(t, s, &first, &last);
    for (int64_t b = first; b <= last; b++) {
        if (s->write) {
            drop_covered(&bk[b].writers, s);
            drop_covered(&bk[b].readers, s);
        }
        rec_list *l = s->write ? &bk[b].writers : &bk[b].readers;
        rec r = {s->lo, s->hi, i};
        if (l->n && !memcmp(&l->r[l->n - 1], &r, sizeof r))
            continue; /* the node read these bytes already */
        if (!push_rec(t, l, r))
            return false;
    }
    return true;
}

static int by_value(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Node i's dependencies, appended to *out as distances back; then its accesses noted
 * (reads first, so that its own write drops them). */
static bool node_deps(tracker *t, const ex_node_exec *node, int64_t i, int64_t **out, int64_t *nout,
                      int64_t *cap, int32_t *ndep)
{
    int k = ex__node_spans(node, t->spans);
    t->ndeps = 0;
    for (int j = 0; j < k; j++)
        if (!wait_for(t, &t->spans[j]))
            return false;
    if (t->ndeps > 1)
        qsort(t->deps, (size_t)t->ndeps, sizeof *t->deps, by_value);
    *ndep = 0;
    for (int64_t j = 0; j < t->ndeps; j++) {
        if (j && t->deps[j] == t->deps[j - 1])
            continue;
        int64_t *grown = room(t->ctx, *out, *nout, cap, sizeof *grown);
        if (!grown)
            return false;
        (*out = grown)[(*nout)++] = i - t->deps[j];
        ++*ndep;
    }
    for (int pass = 0; pass < 2; pass++)
        for (int j = 0; j < k; j++)
            if (t->spans[j].write == (pass == 1) && !note(t, &t->spans[j], i))
                return false;
    return true;
}

static void tracker_free(tracker *t)
{
    for (int64_t b = 0; b < t->nbufs; b++) {
        for (int64_t j = 0; t->bufs[b].bk && j < t->bufs[b].nbk; j++) {
            free(t->bufs[b].bk[j].writers.r);
            free(t->bufs[b].bk[j].readers.r);
        }
        free(t->bufs[b].bk);
    }
    free(t->bufs);
    free(t->spans);
    free(t->deps);
}

ex_status ex__node_deps(ex_ctx *ctx, ex_node_exec *nodes, int64_t n, int64_t **store)
{
    *store = NULL;
    tracker t = {.ctx = ctx};
    int most = 0;
    for (int64_t i = 0; i < n; i++) {
        nodes[i].dep = NULL;
        nodes[i].ndep = 0;
        most = nodes[i].nsrc > most ? nodes[i].nsrc : most;
    }
    int64_t *all = NULL, nall = 0, cap = 0,
            *first = ex__malloc(ctx, ((size_t)n + 1) * sizeof *first);
    t.spans = first ? ex__malloc(ctx, ((size_t)most + 2) * sizeof *t.spans) : NULL;
    bool ok = first && t.spans && find_buffers(&t, nodes, n);
    for (int64_t i = 0; ok && i < n; i++) {
        first[i] = nall;
        ok = node_deps(&t, &nodes[i], i, &all, &nall, &cap, &nodes[i].ndep);
    }
    tracker_free(&t);
    if (ok) { /* the lists point into the final array */
        for (int64_t i = 0; i < n; i++)
            nodes[i].dep = nodes[i].ndep ? all + first[i] : NULL;
        *store = all;
    } else {
        for (int64_t i = 0; i < n; i++)
            nodes[i].ndep = 0;
        free(all);
    }
    free(first);
    return ok ? EX_OK : EX_ERR_NOMEM;
}
