/* Grouping (core/group.h). A group is a run of consecutive nodes: the plan's order stays
 * as it is, so grouping changes no dependency, only how many launches carry the nodes. */
#include <string.h>

#include "core/engine.h"
#include "core/group.h"
#include "core/tdesc.h"

static bool same_desc(const ex_tdesc *a, const ex_tdesc *b)
{
    if (a->buf != b->buf || a->offset != b->offset || a->dtype != b->dtype || a->ndim != b->ndim)
        return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->ne[d] != b->ne[d] || a->st[d] != b->st[d])
            return false;
    return true;
}

/* SGD: p, g, mom element-wise; lr (and a clip's norm) scalars. Adam: p, g, m, v; {lr, t}. */
static int update_vectors(const ex_node_exec *n)
{
    return n->op == EX_OP_ADAM ? 4 : 3;
}

static bool update_dense(const ex_node_exec *n)
{
    int nv = update_vectors(n);
    if (n->nsrc < nv || !ex_td_valid(&n->dst, EX_F32) || !ex_td_dense(&n->dst) ||
        !same_desc(&n->dst, &n->src[0]))
        return false;
    int64_t numel = ex_td_numel(&n->dst);
    for (int s = 1; s < nv; s++)
        if (!ex_td_valid(&n->src[s], EX_F32) || !ex_td_dense(&n->src[s]) ||
            ex_td_numel(&n->src[s]) != numel)
            return false;
    return true;
}

bool ex__group_joins_update(const ex_node_exec *head, const ex_node_exec *n)
{
    if (!update_dense(head) || !update_dense(n))
        return false;
    for (int s = update_vectors(n); s < n->nsrc; s++)
        if (!same_desc(&head->src[s], &n->src[s]))
            return false;
    return true;
}

bool ex__group_joins(const ex_node_exec *head, const ex_node_exec *n)
{
    const ex_op_info *info = ex__op(head->op);
    if (!info || !info->joins || n->op != head->op || n->nsrc != head->nsrc || head->gate ||
        n->gate || memcmp(n->ip, head->ip, sizeof n->ip) || memcmp(n->fp, head->fp, sizeof n->fp))
        return false;
    return info->joins(head, n);
}

/* Whether node j waits for a node of [first, j). */
static bool waits_within(const ex_node_exec *nodes, int64_t first, int64_t j)
{
    for (int32_t k = 0; k < nodes[j].ndep; k++)
        if (j - nodes[j].dep[k] >= first)
            return true;
    return false;
}

int64_t ex__node_groups(ex_node_exec *nodes, int64_t n, bool (*groups)(void *impl, ex_op op),
                        void *impl)
{
    int64_t launches = 0;
    for (int64_t i = 0; i < n; launches++) {
        int64_t end = i + 1;
        if (groups && ex__op(nodes[i].op) && ex__op(nodes[i].op)->joins &&
            groups(impl, nodes[i].op))
            while (end < n && end - i < EX_GROUP_MAX && ex__group_joins(&nodes[i], &nodes[end]) &&
                   !waits_within(nodes, i, end))
                end++;
        nodes[i].group = end - i > 1 ? (int32_t)(end - i) : 0;
        for (int64_t j = i + 1; j < end; j++)
            nodes[j].group = (int32_t)(i - j);
        i = end;
    }
    return launches;
}
