/* The dependencies between a plan's nodes, found once by the planner for every backend. */
#ifndef EXAPT_CORE_DEPS_H
#define EXAPT_CORE_DEPS_H

#include "core/backend_iface.h"
#include "exapt/ctx.h"

/** The bytes a node touches in one of its tensors: [lo, hi) of buf, rounded out to whole
 *  32-bit words (GPU kernels read and write words, so two i8 tensors sharing one conflict). */
typedef struct ex_span {
    const ex_buffer *buf;
    uint64_t lo, hi;
    bool write;
} ex_span;

/** Fills spans (room for nsrc + 2) with what node n touches: each source (written when the
 *  op updates it, ex_td_updated_sources), the gate, dst; tensors without a buffer or
 *  elements are left out. Returns how many. */
int ex__node_spans(const ex_node_exec *n, ex_span *spans);

/** Fills nodes[i].dep and ndep for the n nodes, in order: node i waits for node j < i when
 *  both touch a byte (ex__node_spans) and one of them writes it, unless j is already
 *  reached through i's other dependencies (the last writer of a byte, and for a write, the
 *  readers since). *store receives the array the lists point into (free() it, after the
 *  nodes are done with). ctx's allocation hook counts the allocations (NULL: none).
 *  EX_ERR_NOMEM, leaving every list empty, when host memory runs out. */
ex_status ex__node_deps(ex_ctx *ctx, ex_node_exec *nodes, int64_t n, int64_t **store);

#endif
