/* exapt — tensors: nodes of a graph with a dtype, a shape and element strides. */
#ifndef EXAPT_TENSOR_H
#define EXAPT_TENSOR_H

#include <stdbool.h>
#include <stdint.h>

#include "exapt/ctx.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Maximum number of dimensions (NCHW). */
#define EX_MAX_DIMS 4

/** Element types. Ops compute in f32; i32 holds labels, counters and the int8 ops'
 *  accumulators; i8 holds quantized inference's weights and activations. */
typedef enum ex_dtype { EX_F32 = 0, EX_I32, EX_I8, EX_DTYPE_COUNT } ex_dtype;

/** Bytes per element of a dtype, 0 for an invalid one. */
int ex_dtype_size(ex_dtype t);
/** Constant name of a dtype ("f32", "i32", "i8", "?"). */
const char *ex_dtype_name(ex_dtype t);

/** Opaque tensor: a node of the context's graph. Owned by the context. A builder that
 *  fails returns the context's inert tensor (never NULL while the context exists), and
 *  every later builder given it returns the inert tensor too. */
typedef struct ex_tensor ex_tensor;

/** A host-written input (data, labels, schedule scalars). Shape ne[0..ndim-1],
 *  outermost first. Lives in the persistent buffer. */
ex_tensor *ex_input(ex_ctx *ctx, ex_dtype dtype, int ndim, const int64_t *ne, const char *name);

/** A trainable parameter: persistent, and ex_graph_backward() computes its gradient. */
ex_tensor *ex_param(ex_ctx *ctx, int ndim, const int64_t *ne, const char *name);

/** Persistent state that is not trained (optimizer moments, running statistics). */
ex_tensor *ex_state(ex_ctx *ctx, ex_dtype dtype, int ndim, const int64_t *ne, const char *name);

/** A view of t's storage: shape ne, element strides st, element offset from t's start.
 *  Every element reached must lie inside t's storage. Stride 0 broadcasts. */
ex_tensor *ex_view(ex_ctx *ctx, ex_tensor *t, int ndim, const int64_t *ne, const int64_t *st,
                   int64_t offset);

/** Same elements, new shape: a view when t is contiguous, a copy otherwise. */
ex_tensor *ex_reshape(ex_ctx *ctx, ex_tensor *t, int ndim, const int64_t *ne);

/** View of the elements [start, start+len) along dimension dim. */
ex_tensor *ex_slice(ex_ctx *ctx, ex_tensor *t, int dim, int64_t start, int64_t len);

/** View with dimensions d0 and d1 swapped (no copy). */
ex_tensor *ex_transpose(ex_ctx *ctx, ex_tensor *t, int d0, int d1);

/** View of t broadcast (stride 0) to shape ne; each dim of t must be 1 or equal. */
ex_tensor *ex_broadcast(ex_ctx *ctx, ex_tensor *t, int ndim, const int64_t *ne);

/** Keeps t's value readable after a run (its memory is never reused). Returns t. */
ex_tensor *ex_keep(ex_ctx *ctx, ex_tensor *t);

/** Asks ex_graph_backward() to compute the gradient of an input too (parameters always
 *  get one). Returns t. */
ex_tensor *ex_requires_grad(ex_ctx *ctx, ex_tensor *t);

/** Gates every node built from now on (until called with mask NULL) by mask[index],
 *  as ex_set_gate() does for one node: for building a candidate's whole subgraph. */
void ex_ctx_set_gate(ex_ctx *ctx, ex_tensor *mask, int64_t index);

/** Gates t's node: when mask[index] (an f32 tensor, read on the device) is 0 the node
 *  is skipped and its output left unwritten. Backward nodes inherit the gate. */
void ex_set_gate(ex_ctx *ctx, ex_tensor *t, ex_tensor *mask, int64_t index);

/** Number of dimensions (0 for NULL). */
int ex_tensor_ndim(const ex_tensor *t);
/** Size of dimension d, or 0 when out of range. */
int64_t ex_tensor_dim(const ex_tensor *t, int d);
/** Element stride of dimension d (0 for a broadcast dimension, or when out of range). */
int64_t ex_tensor_stride(const ex_tensor *t, int d);
/** Number of elements. */
int64_t ex_tensor_numel(const ex_tensor *t);
/** Element type; EX_DTYPE_COUNT for NULL. */
ex_dtype ex_tensor_dtype(const ex_tensor *t);
/** Name given at creation, or "" . */
const char *ex_tensor_name(const ex_tensor *t);
/** Writes a shape such as "5x7x11x13" into buf (always terminated). Returns buf. */
char *ex_tensor_shape_str(const ex_tensor *t, char *buf, int len);

#ifdef __cplusplus
}
#endif
#endif
