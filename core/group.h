/* Grouping: consecutive nodes of a plan that are one op and do not wait for each other
 * run as one launch (ex_node_exec.group), decided once by the planner for every backend. */
#ifndef EXAPT_CORE_GROUP_H
#define EXAPT_CORE_GROUP_H

#include <stdbool.h>

#include "core/backend_iface.h"

/** The most nodes one group takes. */
#define EX_GROUP_MAX 4096

/** Whether node n may run in the group whose first node is head: the op's own rule
 *  (ex_op_info.joins) on top of one op, no gate and the same parameters. */
bool ex__group_joins(const ex_node_exec *head, const ex_node_exec *n);

/** The element-wise optimizer updates (SGD, ADAM): every tensor they update or read
 *  element by element dense f32 of dst's element count, their scalar sources (lr, Adam's
 *  {lr, t}, a clip's norm) the same tensors as head's. Members may differ in size. */
bool ex__group_joins_update(const ex_node_exec *head, const ex_node_exec *n);

/** Marks the groups among nodes[0..n) (ex_node_exec.group; every node's dependencies
 *  already found): each group the longest run of nodes after its first that joins it
 *  (ex__group_joins), none waiting for an earlier node of the run, and that the backend
 *  runs as one (groups(impl, op); NULL: no groups). Returns the launches left: nodes
 *  alone and groups. */
int64_t ex__node_groups(ex_node_exec *nodes, int64_t n, bool (*groups)(void *impl, ex_op op),
                        void *impl);

#endif
