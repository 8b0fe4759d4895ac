/* exapt — the context: owns a graph, its tensors and its first error. */
#ifndef EXAPT_CTX_H
#define EXAPT_CTX_H

#include <stddef.h>
#include <stdint.h>

#include "exapt/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Opaque context. All state of a graph hangs off one; contexts never share state. */
typedef struct ex_ctx ex_ctx;

/** Creates an empty context. Returns NULL only when memory is exhausted. */
ex_ctx *ex_ctx_new(void);

/** Frees a context with every tensor and gradient built in it. NULL is a no-op.
 *  Plans made from it must be freed first. */
void ex_ctx_free(ex_ctx *ctx);

/** The sticky status: EX_OK until a builder or call fails, then the first failure.
 *  Returns EX_ERR_ARG for a NULL context. */
ex_status ex_ctx_status(const ex_ctx *ctx);

/** The message of the first failure ("" while none). For NULL, a constant message. */
const char *ex_ctx_error(const ex_ctx *ctx);

/** Records a failure as builders do: the first one sticks, later ones are ignored.
 *  For code that builds graphs above the engine (the search, applications). */
void ex_ctx_set_error(ex_ctx *ctx, ex_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/** Clears the sticky error so building can go on; the tensors built while it was set
 *  stay inert. */
void ex_ctx_clear_error(ex_ctx *ctx);

/** Sets the base seed of the Philox streams drawn by random ops built afterwards
 *  (default 0). Each random op gets its own stream derived from this seed. */
void ex_ctx_set_seed(ex_ctx *ctx, uint64_t seed);

/** Tag given to every node built afterwards, so the profiler can report by cell,
 *  edge and candidate. -1 means "none" for each field; the default is all -1. */
void ex_ctx_set_tag(ex_ctx *ctx, int cell, int edge, int candidate);

/** Starts a new stage: nodes built from now on belong to it (the first stage is 0).
 *  A plan runs all stages in order with ex_plan_run(), or one with ex_plan_run_stage():
 *  e.g. a training step and an evaluation pass sharing parameters. A stage may read
 *  only persistent tensors (inputs, parameters, state, kept tensors) of other stages.
 *  Returns the new stage's number, -1 for NULL. */
int ex_ctx_begin_stage(ex_ctx *ctx);

/** Builds the graph for a data-parallel group of `ranks` processes (default 1) from now
 *  on: each rank runs it on its own share of every batch, ex_allreduce nodes record this
 *  count, and training batch norms synchronize their statistics over the group (see
 *  ex_batch_norm). EX_ERR_ARG (sticky) for ranks below 1. */
void ex_ctx_set_ranks(ex_ctx *ctx, int ranks);

/** Allocation hook: fail the n-th allocation the context makes from now on (1 = the
 *  next one); 0 turns failing off. Counted: host memory of the graph, its plans and the
 *  search or network built on it, and the plan's backend buffers. Also restarts
 *  ex_ctx_alloc_count(). For fault-injection tests. */
void ex_ctx_fail_alloc_after(ex_ctx *ctx, uint64_t n);

/** Allocations counted since the context was made or the hook was last set (0 for
 *  NULL): how far a fault-injection sweep must go. */
uint64_t ex_ctx_alloc_count(const ex_ctx *ctx);

#ifdef __cplusplus
}
#endif
#endif
