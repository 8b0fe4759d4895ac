/* The order a step is recorded in. The plan's order puts most of a DARTS step's nodes right
 * after a node they do not depend on (the candidates of an edge, the edges of a cell run
 * one chain at a time); recorded in that order almost every dispatch would need a barrier
 * behind the one before, and the GPU would drain at each. Recorded by rounds instead, the
 * tracker in vulkan/bind.c needs a barrier about once per round, and the nodes of a round
 * run side by side. A node of p dispatches that depend on each other (a batch norm's
 * sums, then their finish) spans p rounds, one dispatch in each; it starts in the round
 * after the last one of every node it depends on (round 0: it depends on no earlier
 * node). So a chain that runs past a two-pass node does not hold up the chains beside it,
 * as whole levels of nodes would. Within a round the nodes come grouped by op, each op's
 * in the plan's order, so consecutive dispatches share a pipeline; the ops come in their
 * enum's order with the short element-wise ones (adds, products, copies, ReLUs) last,
 * the order that measured fastest on NVIDIA's driver (bench/results/README.md, "Vulkan
 * recording order").
 *
 * A node depends on an earlier one when both touch a byte and one of them writes it:
 * sources read, sources an op updates, the gate, dst. Scratch and the status words are
 * not counted: a node's scratch lives only while it runs (the tracker still puts a
 * barrier between two nodes that use it), and which of several failing nodes a report
 * names does not matter. Accesses are kept per block in buckets of 1 MiB; a write drops
 * the accesses it covers, whose dependants depend on it too, so the lists stay short. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vulkan/vk_backend.h"

#define ORD_SHIFT 20 /* bucket size: 1 MiB */

typedef struct ord_rec {
    uint64_t lo, hi;
    int64_t level; /* the last round of the node that made the access */
    int write;
} ord_rec;

typedef struct ord_bucket {
    ord_rec *r;
    int64_t n, cap;
} ord_bucket;

typedef struct ord_map {
    ord_bucket **blocks; /* per block, (bytes >> ORD_SHIFT) + 1 buckets */
    int64_t *nbk;
    int nblocks;
} ord_map;

static void map_free(ord_map *m)
{
    for (int k = 0; k < m->nblocks && m->blocks; k++) {
        for (int64_t i = 0; m->blocks[k] && i < m->nbk[k]; i++)
            free(m->blocks[k][i].r);
        free(m->blocks[k]);
    }
    free(m->blocks);
    free(m->nbk);
}

static int map_init(ord_map *m, const vk_backend *b)
{
    memset(m, 0, sizeof *m);
    m->nblocks = b->nblocks;
    m->blocks = calloc((size_t)b->nblocks + 1, sizeof *m->blocks);
    m->nbk = calloc((size_t)b->nblocks + 1, sizeof *m->nbk);
    if (!m->blocks || !m->nbk)
        return 0;
    for (int k = 0; k < b->nblocks; k++) {
        m->nbk[k] = (int64_t)(b->blocks[k].bytes >> ORD_SHIFT) + 1;
        m->blocks[k] = calloc((size_t)m->nbk[k], sizeof **m->blocks);
        if (!m->blocks[k])
            return 0;
    }
    return 1;
}

/* The buckets [*first, *last] that bytes [a.lo, a.hi) of its block fall in. */
static ord_bucket *buckets(const ord_map *m, vk_access a, int64_t *first, int64_t *last)
{
    if (a.block < 0 || a.block >= m->nblocks || a.hi <= a.lo)
        return NULL;
    *first = (int64_t)(a.lo >> ORD_SHIFT);
    *last = (int64_t)((a.hi - 1) >> ORD_SHIFT);
    if (*last >= m->nbk[a.block])
        *last = m->nbk[a.block] - 1;
    return m->blocks[a.block];
}

/* The first round after every earlier access that conflicts with a. */
static int64_t level_after(const ord_map *m, vk_access a, int write)
{
    int64_t first, last, level = 0;
    ord_bucket *bk = buckets(m, a, &first, &last);
    for (int64_t i = first; bk && i <= last; i++)
        for (int64_t j = 0; j < bk[i].n; j++) {
            const ord_rec *r = &bk[i].r[j];
            if ((write || r->write) && r->lo < a.hi && a.lo < r->hi && r->level + 1 > level)
                level = r->level + 1;
        }
    return level;
}

static int push(ord_bucket *b, ord_rec r)
{
    if (b->n == b->cap) {
        int64_t cap = b->cap * 2 + 8;
        ord_rec *p = realloc(b->r, (size_t)cap * sizeof *p);
        if (!p)
            return 0;
        b->r = p;
        b->cap = cap;
    }
    b->r[b->n++] = r;
    return 1;
}

/* Notes access a of a node whose last round is `level`: a write replaces the accesses it
 * covers, a read of bytes already read raises that access's round. */
static int note(ord_map *m, vk_access a, int write, int64_t level)
{
    int64_t first, last;
    ord_bucket *bk = buckets(m, a, &first, &last);
    for (int64_t i = first; bk && i <= last; i++) {
        ord_bucket *b = &bk[i];
        int found = 0;
        for (int64_t j = 0; j < b->n;) {
            ord_rec *r = &b->r[j];
            if (write && r->lo >= a.lo && r->hi <= a.hi) {
                *r = b->r[--b->n];
                continue;
            }
            if (!write && !r->write && r->lo == a.lo && r->hi == a.hi) {
                r->level = r->level > level ? r->level : level;
                found = 1;
            }
            j++;
        }
        if (!found && !push(b, (ord_rec){a.lo, a.hi, level, write}))
            return 0;
    }
    return 1;
}

/* The node's accesses, at most nsrc + 2: each source (read, or written when the op
 * updates it), the gate, dst. */
static int accesses(const ex_node_exec *n, vk_access *a, int *write)
{
    int k = 0;
    uint32_t upd = ex_td_updated_sources(n);
    for (int i = 0; i < n->nsrc && n->src; i++)
        if (n->src[i].buf) {
            a[k] = vk_span_of(&n->src[i]);
            write[k++] = i < 32 && ((upd >> i) & 1u);
        }
    if (n->gate && n->gate->buf) {
        a[k] = vk_span_of(n->gate);
        write[k++] = 0;
    }
    if (n->dst.buf) {
        a[k] = vk_span_of(&n->dst);
        write[k++] = 1;
    }
    return k;
}

/* Where op's nodes come in a round: the enum's order, the element-wise ops after all
 * others (the enum's first group, EX_OP_ADD to EX_OP_DROP_PATH, exapt/ops.h). */
static int64_t op_rank(ex_op op)
{
    return op <= EX_OP_DROP_PATH ? EX_OP_COUNT + op : op;
}

/* order: the nodes by round, a round's by op (op_rank), each op's in plan order (two
 * stable counting sorts: by op, then by round). */
static int by_round_and_op(const ex_node_exec *nodes, int64_t count, const int64_t *level,
                           int64_t top, int64_t *order)
{
    int64_t nb = (top + 1 > 2 * EX_OP_COUNT ? top + 1 : 2 * EX_OP_COUNT) + 1;
    int64_t *at = calloc((size_t)nb, sizeof *at),
            *byop = malloc(((size_t)count + 1) * sizeof *byop);
    if (!at || !byop) {
        free(at);
        free(byop);
        return 0;
    }
    for (int64_t i = 0; i < count; i++)
        at[op_rank(nodes[i].op) + 1]++;
    for (int64_t k = 0; k < 2 * EX_OP_COUNT; k++)
        at[k + 1] += at[k];
    for (int64_t i = 0; i < count; i++)
        byop[at[op_rank(nodes[i].op)]++] = i;
    memset(at, 0, (size_t)nb * sizeof *at);
    for (int64_t i = 0; i < count; i++)
        at[level[i] + 1]++;
    for (int64_t l = 0; l <= top; l++)
        at[l + 1] += at[l];
    for (int64_t k = 0; k < count; k++)
        order[at[level[byop[k]]]++] = byop[k];
    free(at);
    free(byop);
    return 1;
}

ex_status vkx_order(vk_backend *b, const ex_node_exec *nodes, int64_t count, const int *passes,
                    int64_t *order, int64_t *level)
{
    ord_map m;
    int most = 0;
    for (int64_t i = 0; i < count; i++)
        most = nodes[i].nsrc > most ? nodes[i].nsrc : most;
    vk_access *a = malloc((size_t)(most + 2) * sizeof *a);
    int *write = malloc((size_t)(most + 2) * sizeof *write);
    int ok = a && write && map_init(&m, b);
    int64_t top = 0;
    for (int64_t i = 0; ok && i < count; i++) {
        int k = accesses(&nodes[i], a, write);
        int64_t l = 0;
        for (int j = 0; j < k; j++) {
            int64_t after = level_after(&m, a[j], write[j]);
            l = after > l ? after : l;
        }
        for (int j = 0; j < k && ok; j++)
            ok = note(&m, a[j], write[j], l + passes[i] - 1);
        level[i] = l;
        top = l > top ? l : top;
    }
    if (ok)
        ok = by_round_and_op(nodes, count, level, top, order);
    if (a && write)
        map_free(&m);
    free(a);
    free(write);
    if (ok)
        return EX_OK;
    snprintf(b->msg, sizeof b->msg, "vulkan: out of host memory ordering %lld nodes",
             (long long)count);
    return EX_ERR_NOMEM;
}
