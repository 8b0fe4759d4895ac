/* The dependencies the planner hands every backend (core/deps.h): exact lists for nodes
 * made by hand, and for the plans of real searches a check against an oracle that walks
 * every element: whatever a node must wait for (the last writer of each 32-bit word it
 * touches, and for a write the readers since) is reached through its dependencies. Then
 * the groups it marks over them (core/group.h), for nodes made by hand. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/deps.h"
#include "core/group.h"
#include "core/plan.h"
#include "core/tdesc.h"
#include "exapt/exapt.h"

/* ---- lists made by hand ---- */

/* Distinct addresses stand for buffers: the tracker compares them only. */
static char buf_a, buf_b, buf_c;
#define A ((ex_buffer *)&buf_a)
#define B ((ex_buffer *)&buf_b)
#define C ((ex_buffer *)&buf_c)

static ex_tdesc vec(ex_buffer *buf, uint64_t offset, int64_t n, ex_dtype dtype)
{
    return (ex_tdesc){dtype, 1, {n, 1, 1, 1}, {1, 0, 0, 0}, buf, offset};
}

/* A node writing dst from up to three sources. */
static ex_node_exec node(ex_op op, ex_tdesc dst, const ex_tdesc *src, int nsrc)
{
    return (ex_node_exec){.op = op, .nsrc = nsrc, .src = src, .dst = dst, .tag = {-1, -1, -1}};
}

/* Whether node i's list is exactly the nodes in want (ascending, -1 ends it). */
static void expect_deps(const ex_node_exec *nodes, int64_t i, const int64_t *want)
{
    int n = 0;
    while (want[n] >= 0)
        n++;
    int64_t got[64];
    assert_true(nodes[i].ndep <= 64);
    for (int32_t k = 0; k < nodes[i].ndep; k++)
        got[k] = i - nodes[i].dep[k];
    for (int k = 0; k < nodes[i].ndep; k++) /* in node order, whatever the list's */
        for (int j = k + 1; j < nodes[i].ndep; j++)
            if (got[j] < got[k]) {
                int64_t t = got[j];
                got[j] = got[k];
                got[k] = t;
            }
    if (nodes[i].ndep != n)
        fail_msg("node %lld: %d dependencies, expected %d", (long long)i, nodes[i].ndep, n);
    for (int k = 0; k < n; k++)
        if (got[k] != want[k])
            fail_msg("node %lld: dependency %d is node %lld, expected %lld", (long long)i, k,
                     (long long)got[k], (long long)want[k]);
}

static void hand_made(void **state)
{
    (void)state;
    ex_tdesc s[16][4];
    ex_node_exec n[16];
    int k = 0;
    /* 0: A[0, 64) = B[0, 64) */
    s[k][0] = vec(B, 0, 64, EX_F32);
    n[k] = node(EX_OP_COPY, vec(A, 0, 64, EX_F32), s[k], 1), k++;
    /* 1, 2: two readers of A; 1 writes C[0, 16), 2 writes C[64, 80) */
    s[k][0] = vec(A, 0, 64, EX_F32);
    n[k] = node(EX_OP_RELU, vec(C, 0, 16, EX_F32), s[k], 1), k++;
    s[k][0] = vec(A, 0, 64, EX_F32);
    n[k] = node(EX_OP_RELU, vec(C, 256, 16, EX_F32), s[k], 1), k++;
    /* 3: writes the first half of A: after its writer and both readers */
    s[k][0] = vec(B, 512, 32, EX_F32);
    n[k] = node(EX_OP_COPY, vec(A, 0, 32, EX_F32), s[k], 1), k++;
    /* 4: reads A's second half: only node 0 wrote it */
    s[k][0] = vec(A, 128, 32, EX_F32);
    n[k] = node(EX_OP_RELU, vec(B, 1024, 32, EX_F32), s[k], 1), k++;
    /* 5: reads C[0, 16): node 1 */
    s[k][0] = vec(C, 0, 16, EX_F32);
    n[k] = node(EX_OP_RELU, vec(B, 2048, 16, EX_F32), s[k], 1), k++;
    /* 6, 7: i8 tensors sharing a 32-bit word (C bytes 1000..1002 and 1003..1005) */
    s[k][0] = vec(B, 4096, 3, EX_I8);
    n[k] = node(EX_OP_COPY, vec(C, 1000, 3, EX_I8), s[k], 1), k++;
    s[k][0] = vec(B, 4100, 3, EX_I8);
    n[k] = node(EX_OP_COPY, vec(C, 1003, 3, EX_I8), s[k], 1), k++;
    /* 8: SGD updates param A[256, 272) and momentum B[8192, 8208), reads the gradient and lr */
    s[k][0] = vec(A, 1024, 16, EX_F32);
    s[k][1] = vec(B, 2048, 16, EX_F32); /* node 5's dst as the gradient */
    s[k][2] = vec(B, 8192, 16, EX_F32);
    s[k][3] = vec(C, 4096, 1, EX_F32);
    n[k] = node(EX_OP_SGD, vec(A, 1024, 16, EX_F32), s[k], 4), k++;
    /* 9: reads the momentum SGD updated */
    s[k][0] = vec(B, 8192, 16, EX_F32);
    n[k] = node(EX_OP_RELU, vec(C, 8192, 16, EX_F32), s[k], 1), k++;
    /* 10: reads A[0, 64) backwards (a negative stride from element 0 at byte 252) */
    s[k][0] = (ex_tdesc){EX_F32, 1, {64, 1, 1, 1}, {-1, 0, 0, 0}, A, 252};
    n[k] = node(EX_OP_RELU, vec(C, 16384, 64, EX_F32), s[k], 1), k++;
    /* 11: a gated node; 12 writes its gate */
    s[k][0] = vec(B, 0, 4, EX_F32);
    s[k][1] = vec(C, 20000, 4, EX_F32);
    n[k] = node(EX_OP_RELU, vec(C, 24000, 4, EX_F32), s[k], 1);
    n[k].gate = &s[k][1], k++;
    s[k][0] = vec(B, 0, 4, EX_F32);
    n[k] = node(EX_OP_COPY, vec(C, 20000, 4, EX_F32), s[k], 1), k++;
    int64_t *store = NULL;
    assert_int_equal(ex__node_deps(NULL, n, k, &store), EX_OK);
    expect_deps(n, 0, (int64_t[]){-1});
    expect_deps(n, 1, (int64_t[]){0, -1});
    expect_deps(n, 2, (int64_t[]){0, -1});
    expect_deps(n, 3, (int64_t[]){0, 1, 2, -1});
    expect_deps(n, 4, (int64_t[]){0, -1});
    expect_deps(n, 5, (int64_t[]){1, -1});
    expect_deps(n, 6, (int64_t[]){-1});
    expect_deps(n, 7, (int64_t[]){6, -1});
    expect_deps(n, 8, (int64_t[]){5, -1});
    expect_deps(n, 9, (int64_t[]){8, -1});
    expect_deps(n, 10, (int64_t[]){0, 3, -1});
    expect_deps(n, 11, (int64_t[]){-1}); /* nothing wrote B[0, 4), its gate or dst */
    expect_deps(n, 12, (int64_t[]){11, -1});
    free(store);
}

/* ---- plans of real searches against an element-wise oracle ---- */

/* Per plan chunk and 32-bit word: its last writer, and the readers since, as a list. */
typedef struct oracle {
    const ex_plan *p;
    int32_t **writer;  /* per chunk, per word (-1: none) */
    int32_t **readers; /* per chunk, per word: the head of its list in pool (-1: none) */
    int32_t *pool_node, *pool_next;
    int64_t npool, cap;
    uint64_t *reach; /* per node, the bit set of the nodes its dependencies reach */
    int64_t words;   /* per reach row */
    int64_t checked, missing;
} oracle;

static int chunk_of(const oracle *o, const ex_buffer *buf)
{
    for (int c = 0; c < o->p->nchunks; c++)
        if (o->p->chunks[c] == buf)
            return c;
    fail_msg("a tensor outside the plan's chunks");
    return -1;
}

static bool reaches(const oracle *o, int64_t i, int64_t j)
{
    return o->reach[i * o->words + j / 64] >> (j % 64) & 1u;
}

static void must_wait(oracle *o, int64_t i, int64_t j)
{
    if (j < 0 || j == i)
        return;
    o->checked++;
    if (!reaches(o, i, j) && o->missing++ < 5)
        print_error("node %lld (%s) must wait for node %lld (%s), which its dependencies do "
                    "not reach\n",
                    (long long)i, ex_op_name(o->p->nodes[i].op), (long long)j,
                    ex_op_name(o->p->nodes[j].op));
}

/* One word node i touches: check, then note. */
static void word(oracle *o, int64_t i, int c, uint64_t w, bool write, bool note)
{
    int32_t *last = &o->writer[c][w], *head = &o->readers[c][w];
    if (!note) {
        must_wait(o, i, *last);
        for (int32_t r = *head; write && r >= 0; r = o->pool_next[r])
            must_wait(o, i, o->pool_node[r]);
        return;
    }
    if (write) {
        *last = (int32_t)i;
        *head = -1;
        return;
    }
    if (*head >= 0 && o->pool_node[*head] == i)
        return;
    if (o->npool == o->cap) {
        o->cap = 2 * o->cap + 4096;
        o->pool_node = realloc(o->pool_node, (size_t)o->cap * sizeof *o->pool_node);
        o->pool_next = realloc(o->pool_next, (size_t)o->cap * sizeof *o->pool_next);
        assert_true(o->pool_node && o->pool_next);
    }
    o->pool_node[o->npool] = (int32_t)i;
    o->pool_next[o->npool] = *head;
    *head = (int32_t)o->npool++;
}

/* Every element of t, word by word. */
static void tensor_words(oracle *o, int64_t i, const ex_tdesc *t, bool write, bool note)
{
    if (!t || !t->buf || ex_td_numel(t) == 0)
        return;
    int c = chunk_of(o, t->buf);
    int64_t ne[4], st[4], size = ex_dtype_size(t->dtype);
    ex_td_shape4(t, ne, st);
    for (int64_t a = 0; a < ne[0]; a++)
        for (int64_t b = 0; b < ne[1]; b++)
            for (int64_t d = 0; d < ne[2]; d++)
                for (int64_t e = 0; e < ne[3]; e++) {
                    int64_t at = a * st[0] + b * st[1] + d * st[2] + e * st[3];
                    uint64_t byte = t->offset + (uint64_t)(at * size);
                    word(o, i, c, byte / 4, write, note);
                }
}

static void node_words(oracle *o, int64_t i, bool note)
{
    const ex_node_exec *n = &o->p->nodes[i];
    uint32_t upd = ex_td_updated_sources(n);
    for (int s = 0; s < n->nsrc; s++) /* reads first: a node may read what it writes */
        if (!(s < 32 && upd >> s & 1u))
            tensor_words(o, i, &n->src[s], false, note);
    tensor_words(o, i, n->gate, false, note);
    for (int s = 0; s < n->nsrc; s++)
        if (s < 32 && upd >> s & 1u)
            tensor_words(o, i, &n->src[s], true, note);
    tensor_words(o, i, &n->dst, true, note);
}

/* Checks every node of the plan; returns the pairs of nodes that need not wait for each
 * other, a node's and its predecessors' (unordered pairs: what a GPU may overlap). */
static int64_t check_plan(const ex_plan *p)
{
    oracle o = {.p = p};
    int64_t n = p->nnodes;
    o.words = (n + 63) / 64;
    o.reach = calloc((size_t)(n * o.words), sizeof *o.reach);
    o.writer = calloc((size_t)p->nchunks, sizeof *o.writer);
    o.readers = calloc((size_t)p->nchunks, sizeof *o.readers);
    assert_true(o.reach && o.writer && o.readers);
    for (int c = 0; c < p->nchunks; c++) {
        size_t words = (size_t)(p->chunk_bytes[c] / 4 + 1);
        o.writer[c] = malloc(words * sizeof **o.writer);
        o.readers[c] = malloc(words * sizeof **o.readers);
        assert_true(o.writer[c] && o.readers[c]);
        memset(o.writer[c], 0xff, words * sizeof **o.writer);
        memset(o.readers[c], 0xff, words * sizeof **o.readers);
    }
    int64_t unordered = 0;
    for (int64_t i = 0; i < n; i++) {
        uint64_t *row = &o.reach[i * o.words];
        for (int32_t k = 0; k < p->nodes[i].ndep; k++) {
            int64_t j = i - p->nodes[i].dep[k];
            assert_true(p->nodes[i].dep[k] >= 1 && j >= 0);
            row[j / 64] |= 1ull << (j % 64);
            for (int64_t w = 0; w <= j / 64; w++)
                row[w] |= o.reach[j * o.words + w];
        }
        for (int64_t j = 0; j < i; j++)
            unordered += !reaches(&o, i, j);
        node_words(&o, i, false);
        node_words(&o, i, true);
    }
    print_message("%lld nodes, %lld waits checked, %lld missing, %lld unordered pairs\n",
                  (long long)n, (long long)o.checked, (long long)o.missing, (long long)unordered);
    assert_true(o.checked > 0);
    assert_int_equal(o.missing, 0);
    for (int c = 0; c < p->nchunks; c++) {
        free(o.writer[c]);
        free(o.readers[c]);
    }
    free(o.writer);
    free(o.readers);
    free(o.pool_node);
    free(o.pool_next);
    free(o.reach);
    return unordered;
}

static void search_plan(ex_search_mode mode, int order, int partial)
{
    ex_backend *be = NULL;
    char msg[512] = "";
    if (ex_backend_open("cpu-ref", &be, msg, sizeof msg) != EX_OK)
        fail_msg("cpu-ref: %s", msg);
    ex_search_config c;
    ex_search_config_default(&c);
    c.in_channels = 1;
    c.height = c.width = 8;
    c.classes = 3;
    c.batch = 2;
    c.channels = 4;
    c.layers = 3;
    c.steps = 2;
    c.multiplier = 2;
    c.mode = mode;
    c.order = order;
    c.partial_channels = partial;
    ex_search *s = NULL;
    if (ex_search_new(&c, be, &s, msg, sizeof msg) != EX_OK)
        fail_msg("search: %s", msg);
    int64_t unordered = check_plan(ex_search_plan(s));
    /* the candidates of an edge need not wait for each other */
    assert_true(unordered > 0);
    ex_search_free(s);
    ex_backend_close(be);
}

static void darts_first_order(void **state)
{
    (void)state;
    search_plan(EX_SEARCH_DARTS, 1, 1);
}

static void darts_second_order_partial(void **state)
{
    (void)state;
    search_plan(EX_SEARCH_DARTS, 2, 2);
}

static void gdas(void **state)
{
    (void)state;
    search_plan(EX_SEARCH_GDAS, 1, 1);
}

/* ---- groups over nodes made by hand ---- */

/* SGD of n elements: p and its momentum in A at p_at and p_at + 4096, the gradient in B at
 * the same offset, lr in C; fp0 the momentum. */
static ex_node_exec sgd(ex_tdesc *src, uint64_t p_at, int64_t n, float momentum)
{
    src[0] = vec(A, p_at, n, EX_F32);
    src[1] = vec(B, p_at, n, EX_F32);
    src[2] = vec(A, p_at + 4096, n, EX_F32);
    src[3] = vec(C, 0, 1, EX_F32);
    ex_node_exec x = node(EX_OP_SGD, src[0], src, 4);
    x.fp[0] = momentum;
    return x;
}

static bool only_sgd(void *impl, ex_op op)
{
    (void)impl;
    return op == EX_OP_SGD;
}

static bool only_adam(void *impl, ex_op op)
{
    (void)impl;
    return op == EX_OP_ADAM;
}

/* Which of ten nodes join: 0-1 (a group); 2 gated; 3 alone before other hyper-parameters;
 * 4-5 (a group, momentum 0.5); 6 updates 5's parameter, so it waits for 5 and starts a
 * group with 7; 8's gradient is not dense; 9 is an ADD. */
static void groups_by_hand(void **state)
{
    (void)state;
    static ex_tdesc src[10][4], gate;
    ex_node_exec n[10];
    n[0] = sgd(src[0], 0, 5, 0.9f);
    n[1] = sgd(src[1], 64, 7, 0.9f);
    n[2] = sgd(src[2], 128, 3, 0.9f);
    gate = vec(C, 64, 4, EX_F32);
    n[2].gate = &gate;
    n[2].gate_index = 1;
    n[3] = sgd(src[3], 192, 9, 0.9f);
    n[4] = sgd(src[4], 256, 9, 0.5f);
    n[5] = sgd(src[5], 320, 2, 0.5f);
    n[6] = sgd(src[6], 320, 2, 0.5f);
    n[7] = sgd(src[7], 384, 4, 0.5f);
    n[8] = sgd(src[8], 448, 12, 0.5f);
    src[8][1] = (ex_tdesc){EX_F32, 2, {3, 4, 1, 1}, {1, 3, 0, 0}, B, 448};
    src[8][0].ndim = src[8][2].ndim = 2;
    src[8][0].ne[0] = src[8][2].ne[0] = 3;
    src[8][0].ne[1] = src[8][2].ne[1] = 4;
    src[8][0].st[0] = src[8][2].st[0] = 4;
    src[8][0].st[1] = src[8][2].st[1] = 1;
    n[8].dst = src[8][0];
    n[9] = node(EX_OP_ADD, vec(C, 512, 4, EX_F32), src[9], 2);
    src[9][0] = src[9][1] = vec(C, 1024, 4, EX_F32);
    int64_t *store = NULL;
    assert_int_equal(ex__node_deps(NULL, n, 10, &store), EX_OK);
    static const int32_t want[10] = {2, -1, 0, 0, 2, -1, 2, -1, 0, 0};
    assert_int_equal(ex__node_groups(n, 10, only_sgd, NULL), 7);
    for (int i = 0; i < 10; i++)
        if (n[i].group != want[i])
            fail_msg("node %d: group %d, expected %d", i, n[i].group, want[i]);
    /* a backend that groups no SGD, or none at all: every node alone */
    assert_int_equal(ex__node_groups(n, 10, only_adam, NULL), 10);
    for (int i = 0; i < 10; i++)
        assert_int_equal(n[i].group, 0);
    assert_int_equal(ex__node_groups(n, 10, NULL, NULL), 10);
    free(store);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(hand_made),
        cmocka_unit_test(darts_first_order),
        cmocka_unit_test(darts_second_order_partial),
        cmocka_unit_test(gdas),
        cmocka_unit_test(groups_by_hand),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
