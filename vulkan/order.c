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
 * Which nodes a node waits for comes from the plan (ex_node_exec.dep, core/deps.h): the
 * bytes it reads, updates or writes. Scratch and the status words are not counted: a
 * node's scratch lives only while it runs (the tracker still puts a barrier between two
 * nodes that use it), and which of several failing nodes a report names does not matter. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vulkan/vk_backend.h"

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
    int64_t top = 0;
    for (int64_t i = 0; i < count; i++) {
        int64_t l = 0;
        for (int32_t k = 0; k < nodes[i].ndep; k++) {
            int64_t j = i - nodes[i].dep[k];
            if (j >= 0 && level[j] + passes[j] > l)
                l = level[j] + passes[j];
        }
        level[i] = l;
        top = l > top ? l : top;
    }
    if (by_round_and_op(nodes, count, level, top, order))
        return EX_OK;
    snprintf(b->msg, sizeof b->msg, "vulkan: out of host memory ordering %lld nodes",
             (long long)count);
    return EX_ERR_NOMEM;
}
