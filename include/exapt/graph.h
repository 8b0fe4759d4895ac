/* exapt — autodiff, planning and running a graph. */
#ifndef EXAPT_GRAPH_H
#define EXAPT_GRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "exapt/backend.h"
#include "exapt/comm.h"
#include "exapt/ctx.h"
#include "exapt/ops.h"
#include "exapt/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Appends the nodes computing d loss / d t for every parameter and every input marked
 *  with ex_requires_grad(); loss must be one f32 element. Backward nodes are ordinary
 *  ops. Once per context (see ex_graph_gradients for more losses); the gradients are
 *  kept and found with ex_grad(). Returns the sticky status. */
ex_status ex_graph_backward(ex_ctx *ctx, ex_tensor *loss);

/** Appends the nodes computing d loss / d wrt[i] for each of the n tensors (parameters,
 *  inputs or any f32 node, e.g. unrolled weights) and stores them in grads[i], NULL
 *  where loss does not depend on wrt[i]. May be called for several losses on one
 *  context (an architecture step and a weight step in one plan). The gradients are
 *  ordinary tensors: ex_keep() them to read them after a run. */
ex_status ex_graph_gradients(ex_ctx *ctx, ex_tensor *loss, int n, ex_tensor *const *wrt,
                             ex_tensor **grads);

/** How much the gradients built from now on recompute instead of keeping it from the
 *  forward pass, made again from tensors the backward pass keeps anyway, once per
 *  ex_graph_gradients() and shared by every reader, so each lives only briefly. Level 0
 *  (the default): nothing. Level 1: a depthwise convolution's output or a strided copy
 *  that a convolution's gradient reads (a pointwise convolution's filter gradient, a
 *  depthwise convolution's of PC-DARTS's channel slices): a DARTS step at batch 64 keeps
 *  about a third less for a few more nodes. Level 2 adds the output of an
 *  affine-free batch norm whose input is a pooling of a kept tensor, or a pointwise
 *  convolution of a depthwise convolution of one (with that input made again too): in a
 *  DARTS cell the pooling candidates, the dilated convolutions and the separable
 *  convolutions' first halves keep nothing but the edge's input. The gradients are
 *  bitwise the same at every level. Levels above 2 count as 2, below 0 as 0. */
void ex_graph_set_recompute_level(ex_ctx *ctx, int level);

/** ex_graph_set_recompute_level(ctx, on ? 1 : 0). */
void ex_graph_set_recompute(ex_ctx *ctx, bool on);

/** The gradient of t after ex_graph_backward(), or NULL when loss does not depend on t.
 *  The gradient is kept (readable after a run). */
ex_tensor *ex_grad(ex_ctx *ctx, ex_tensor *t);

/** A graph planned for one backend: every tensor placed, ready to run many times. */
typedef struct ex_plan ex_plan;

/** ex_plan_opts.reuse_after's default, in tensors, where the backend names none
 *  (ex_backend_caps.reuse_after). On a DARTS step at batch 64 it costs 1.3 % more arena
 *  and cuts the longest chain of nodes that must run one after another from 17,600 to
 *  2,200 (docs/cuda.md, the schedule). Vulkan asks for 384 (docs/vulkan.md). */
#define EX_PLAN_REUSE_AFTER 128

/** Planning options: fill them with ex_plan_opts_default(), then change fields (a NULL
 *  options pointer means the defaults). */
typedef struct ex_plan_opts {
    size_t size;          /**< sizeof(ex_plan_opts) where the caller was compiled (set by
                               ex_plan_opts_default(); fields added later take defaults) */
    bool no_reuse;        /**< give every tensor its own memory (for checking the planner) */
    int64_t reuse_after;  /**< a dead tensor's memory goes to a new one only once this many
                               more tensors have been made since its last use: the node
                               that writes there then rarely has to wait for a recent one,
                               and GPU backends run independent nodes side by side (each
                               such wait orders two nodes that the data does not). 0: the
                               backend's default (ex_backend_caps.reuse_after, else
                               EX_PLAN_REUSE_AFTER); negative: at once (least memory) */
    bool no_inplace;      /**< never run element-wise ops in place */
    bool profile;         /**< time every node */
    bool poison;          /**< fill the arena with NaN before each run, so unwritten reads show */
    uint64_t chunk_limit; /**< largest arena chunk in bytes; 0: the backend's limit */
    bool snapshot;        /**< also hold a device copy of the persistent memory for
                               ex_plan_snapshot()/ex_plan_restore() (counted in the plan's
                               memory before anything is allocated) */
    bool no_group;        /**< launch every node on its own: no groups of independent
                               nodes of one op (for comparing; docs/design.md) */
} ex_plan_opts;

/** Fills the first `size` bytes of o with the defaults (every option off or 0) and sets
 *  o->size to size; nothing for a NULL o or a size below the size field's. Call it as
 *  ex_plan_opts_default(o), which passes the caller's sizeof. */
void ex_plan_opts_init(ex_plan_opts *o, size_t size);

/** Fills *o with the defaults (a macro: sizeof *o as the caller was compiled). */
#define ex_plan_opts_default(o) ex_plan_opts_init((o), sizeof *(o))

/** Plans every node built so far for backend be (inputs, parameters and state start at
 *  zero): liveness over the whole graph, memory
 *  reuse, in-place element-wise ops, arena chunks within the backend's limits. The peak
 *  is known before anything runs; a plan that does not fit is refused. Returns the
 *  context's sticky error if one is set. */
ex_status ex_graph_plan(ex_ctx *ctx, ex_backend *be, const ex_plan_opts *opts, ex_plan **out);

/** Frees a plan and its device memory. NULL is a no-op. */
void ex_plan_free(ex_plan *plan);

/** The communicator that the plan's ex_allreduce nodes sum over (see exapt/comm.h); the
 *  plan keeps a copy of the struct, not of what user points to. Its size must be the rank
 *  count the graph was built for (ex_ctx_set_ranks); a plan without one is a group of
 *  one. The sums go through the host (allreduce_sum), or, when the communicator's
 *  device_backend names the plan's backend, run on the device inside the step
 *  (allreduce_device). EX_ERR_ARG for a NULL plan or an invalid communicator
 *  (ex_comm_valid) or one the backend refuses; EX_ERR_UNSUPPORTED when device_backend names
 *  the plan's backend and that backend has no device sums (only "cuda" has). */
ex_status ex_plan_set_comm(ex_plan *plan, const ex_comm *comm);

/** Runs the plan once. */
ex_status ex_plan_run(ex_plan *plan);

/** Turns per-node timing on or off for the following runs (sampling: profile every
 *  N-th step). On GPU backends a profiled run launches node by node. */
ex_status ex_plan_set_profile(ex_plan *plan, bool on);

/** Runs only the nodes of one stage (see ex_ctx_begin_stage). */
ex_status ex_plan_run_stage(ex_plan *plan, int stage);

/** Queues the nodes of one stage and returns without waiting for them on backends that
 *  queue work (CUDA): a failure the device finds while running them (a label out of
 *  range) is returned by the next ex_plan_read, ex_plan_sync or run. A step that ends by
 *  reading its results thus waits for the device once. Elsewhere as ex_plan_run_stage. */
ex_status ex_plan_submit_stage(ex_plan *plan, int stage);

/** Waits for everything queued for the plan and returns a failure it found. */
ex_status ex_plan_sync(ex_plan *plan);

/** Copies every persistent tensor (inputs, parameters, state, kept tensors) into the
 *  plan's snapshot, on the device and in order with the runs: no host wait on backends
 *  that queue work. EX_ERR_STATE when the plan was made without opts.snapshot. */
ex_status ex_plan_snapshot(ex_plan *plan);

/** Puts the persistent tensors back as the last ex_plan_snapshot() left them, bitwise.
 *  EX_ERR_STATE without opts.snapshot. */
ex_status ex_plan_restore(ex_plan *plan);

/** Copies host data (numel elements, contiguous, outermost dimension first) into t:
 *  an input, parameter, state, or any tensor of the plan. */
ex_status ex_plan_write(ex_plan *plan, ex_tensor *t, const void *data, size_t bytes);

/** Copies t into host memory (contiguous). t must be persistent or kept (ex_keep,
 *  ex_grad); other tensors' memory is reused during a run. */
ex_status ex_plan_read(ex_plan *plan, ex_tensor *t, void *data, size_t bytes);

/** Memory figures of a plan. */
typedef struct ex_plan_stats {
    uint64_t arena_bytes;        /**< planned peak of transient tensors */
    uint64_t persistent_bytes;   /**< inputs, parameters, state, kept tensors */
    uint64_t total_tensor_bytes; /**< every tensor's own size summed: the peak without reuse */
    int arena_chunks;
    int64_t nodes;
    int64_t inplace_nodes;
} ex_plan_stats;

/** Fills *st with the plan's memory figures. */
ex_status ex_plan_get_stats(const ex_plan *plan, ex_plan_stats *st);

/** Number of nodes the plan runs. */
int64_t ex_plan_node_count(const ex_plan *plan);

/** Number of launches the plan hands its backend: nodes alone, and groups of consecutive
 *  nodes of one op that the backend runs as one (ex_plan_opts.no_group); 0 for NULL. */
int64_t ex_plan_launch_count(const ex_plan *plan);

/** One node as the profiler sees it. */
typedef struct ex_node_info {
    ex_op op;
    int32_t tag[3];
    uint64_t bytes_read, bytes_written, min_bytes, flops;
    double ms; /**< time of the last profiled run, 0 if none */
    bool skipped;
} ex_node_info;

/** Describes node i of the plan. */
ex_status ex_plan_node_info(const ex_plan *plan, int64_t i, ex_node_info *info);

/** The message of the plan's last failure ("" while none). */
const char *ex_plan_error(const ex_plan *plan);

#ifdef __cplusplus
}
#endif
#endif
