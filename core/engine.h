/* The engine's internals: the context, the tensor node, the op table, the builders'
 * shared helpers. Nothing here is public; include/exapt/ holds the API. */
#ifndef EXAPT_CORE_ENGINE_H
#define EXAPT_CORE_ENGINE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/backend_iface.h"
#include "exapt/backend.h"
#include "exapt/comm.h"
#include "exapt/ctx.h"
#include "exapt/graph.h"
#include "exapt/ops.h"
#include "exapt/status.h"
#include "exapt/tensor.h"
#include "exapt/version.h"

/** What a tensor is: a leaf the host writes, a computed node, a view, or inert. */
typedef enum ex_kind {
    EX_K_INPUT,
    EX_K_PARAM,
    EX_K_STATE,
    EX_K_NODE, /* computed by op; writes its own storage, or another's (aliasing) */
    EX_K_VIEW, /* no computation: another geometry over a storage */
    EX_K_INERT
} ex_kind;

struct ex_tensor {
    int64_t id; /* index in ctx->tensors: creation order, which is execution order */
    ex_kind kind;
    ex_dtype dtype;
    int ndim;
    int64_t ne[EX_MAX_DIMS];
    int64_t st[EX_MAX_DIMS];   /* element strides */
    int64_t offset;            /* element offset into the storage */
    struct ex_tensor *storage; /* the root that owns the memory (itself for roots) */
    int64_t storage_numel;     /* roots only: elements of the storage */

    ex_op op;
    int nsrc;
    struct ex_tensor **src;
    int32_t ip[EX_NODE_IPARAMS];
    float fp[EX_NODE_FPARAMS];
    struct ex_tensor *gate;
    int64_t gate_index;
    int32_t tag[3];
    int stage; /* the part of the graph it belongs to (ex_ctx_begin_stage) */

    bool keep;          /* readable after a run: never reused */
    bool requires_grad; /* inputs whose gradient backward must compute */
    char name[160];     /* PyTorch-style names are long:
                           cells.0._ops.3._ops.4.op.1.weight.momentum_buffer */
};

/** Fault injection: counts allocations and fails the chosen one. */
typedef struct ex_alloc_hook {
    uint64_t fail_at; /* 0: off; else the allocation number that fails */
    uint64_t count;
} ex_alloc_hook;

struct ex_ctx {
    ex_tensor **tensors;
    int64_t ntensors, cap;
    ex_status status;
    char error[512];
    uint64_t seed;
    uint64_t streams; /* random ops built so far: each gets its own Philox key */
    int32_t tag[3];
    int stage;       /* stage of nodes built now */
    ex_tensor *gate; /* gate applied to nodes built now (NULL: none) */
    int64_t gate_index;
    ex_tensor **grads; /* after backward: gradient by tensor id (NULL: none) */
    int64_t ngrads;
    bool in_backward;   /* backward nodes: tag and gate come from the forward node */
    int recompute;      /* ex_graph_set_recompute_level */
    ex_tensor **remade; /* during a backward walk at level >= 1: per tensor id below
                           nremade, what the walk made again (core/backward.c) */
    int64_t nremade;
    int ranks; /* ex_ctx_set_ranks: the data-parallel group the graph is built for */
    ex_alloc_hook hook;
    ex_tensor inert;
};

/* ---- allocation through the context (counted for fault injection) ---- */
void *ex__malloc(ex_ctx *ctx, size_t n);
void *ex__calloc(ex_ctx *ctx, size_t count, size_t size);
void *ex__realloc(ex_ctx *ctx, void *p, size_t n);
/** Counts one allocation made elsewhere (a backend buffer, a kernel's scratch) and says
 *  whether the hook fails it. */
bool ex__alloc_fails(ex_ctx *ctx);

/* ---- errors ---- */
/** Records the first failure (later ones are ignored) and returns the inert tensor. */
ex_tensor *ex__fail(ex_ctx *ctx, ex_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void ex__vfail(ex_ctx *ctx, ex_status st, const char *fmt, va_list ap);
/** Writes "AxBxC" of a tensor into a small rotating buffer set; for messages. */
const char *ex__shape(const ex_tensor *t, char buf[64]);
/** Writes "AxBxC" of a raw shape into buf; returns buf. */
const char *ex__shape_ne(int ndim, const int64_t *ne, char buf[64]);

/* ---- tensors ---- */
bool ex__is_inert(const ex_tensor *t);
int64_t ex__numel(const ex_tensor *t);
bool ex__contiguous(const ex_tensor *t);
void ex__contiguous_strides(int ndim, const int64_t *ne, int64_t *st);
/** Checks that ctx can build and that the n sources are usable; on failure returns
 *  false after recording why (op names the builder). */
bool ex__check(ex_ctx *ctx, const char *op, int n, ex_tensor *const *src);
/** A new root tensor (leaf or node) owning contiguous storage. */
ex_tensor *ex__root(ex_ctx *ctx, ex_kind kind, ex_dtype dtype, int ndim, const int64_t *ne,
                    const char *name);
/** A new compute node of op with its own storage of the given shape. */
ex_tensor *ex__node(ex_ctx *ctx, ex_op op, ex_dtype dtype, int ndim, const int64_t *ne, int nsrc,
                    ex_tensor *const *src);
/** A compute node of op that writes into dst's storage with dst's geometry. */
ex_tensor *ex__node_into(ex_ctx *ctx, ex_op op, ex_tensor *dst, int nsrc, ex_tensor *const *src);
/** A FILL node with ip0 = 1, which writes nothing: the storage of a tensor whose every
 *  element nodes written into it (ex__add_into, ex_copy_into) give a value before any is
 *  read, e.g. a concatenation written in place. */
ex_tensor *ex__unwritten(ex_ctx *ctx, int ndim, const int64_t *ne);
/** a + b (one shape) written into dst (a view of another tensor's storage), as
 *  ex_copy_into writes x; returns the written tensor. No gradient flows through it. */
ex_tensor *ex__add_into(ex_ctx *ctx, ex_tensor *a, ex_tensor *b, ex_tensor *dst);
/** The next Philox key of the context, stored into ip[0], ip[1]. */
void ex__random_key(ex_ctx *ctx, ex_tensor *node);
/** Same shape (dims and sizes). */
bool ex__same_shape(const ex_tensor *a, const ex_tensor *b);
/** Broadcast shape of a and b (right-aligned); false if they do not broadcast. */
bool ex__broadcast_shape(const ex_tensor *a, const ex_tensor *b, int *ndim, int64_t *ne);

/* ---- synchronized (data-parallel) batch norm: the node forms (docs/ops.md) ----
 * The engine's data-parallel graph is built from these; the all-reduces between them are
 * not nodes of a backend. Mean and biased variance travel, not E[x^2], so that a mean far
 * above the standard deviation loses nothing to cancellation (Chan's parallel variance).
 * Each records the first error in ctx as every builder does. */
/** BN_STATS, ip1 = 1: dst [2, C] = the local mean and biased variance of x [N, C, H, W]
 *  (the running statistics, f32 [C] state tensors, are sources but neither read nor
 *  written). */
ex_tensor *ex__bn_moments(ex_ctx *ctx, ex_tensor *x, ex_tensor *running_mean,
                          ex_tensor *running_var);
/** BN_STATS, ip1 = 2: dst [2, C] = mean and invstd = 1/sqrt(max(var, 0) + eps) from
 *  moments [2, C], the group's mean and biased variance (the ranks' means averaged, and
 *  their variances averaged plus the average of (mean_r - mean)^2), and count, the global
 *  number of values per channel (>= 2); moves the running statistics as the training form
 *  does. */
ex_tensor *ex__bn_finish(ex_ctx *ctx, ex_tensor *moments, ex_tensor *running_mean,
                         ex_tensor *running_var, int64_t count, float eps, float momentum);
/** BN_BWD_REDUCE in training: dst [2, C] = sums of dy * x-hat and of dy over the local
 *  batch; xs is x, or x-hat itself when xhat is set (ip1). */
ex_tensor *ex__bn_bwd_reduce(ex_ctx *ctx, ex_tensor *xs, ex_tensor *stats, ex_tensor *dy,
                             bool xhat);
/** BN_BWD_DATA in training with ip2 = ranks: dx of the local batch, red [2, C] holding the
 *  sums over all ranks, so the statistics count ranks * N*H*W values; gamma may be NULL. */
ex_tensor *ex__bn_bwd_data(ex_ctx *ctx, ex_tensor *xs, ex_tensor *stats, ex_tensor *dy,
                           ex_tensor *red, ex_tensor *gamma, bool xhat, int ranks);

/* ---- data parallelism ---- */
/** Elements per bucket of gradients summed by one ALLREDUCE (1 MiB of f32). */
#define EX_GRAD_BUCKET (1 << 18)
/** Replaces each non-NULL g[i] (f32 gradients) by scale times its sum over the ranks,
 *  gathered last first into buckets of about EX_GRAD_BUCKET elements: each gradient is
 *  copied into its bucket, one ALLREDUCE sums the bucket, and g[i] becomes a view of its
 *  part. Last first: the backward pass makes the last layers' gradients first, so the
 *  first buckets' sums can run while it goes on. */
void ex__allreduce_buckets(ex_ctx *ctx, int n, ex_tensor **g, float scale);

/* ---- the op table ---- */
typedef struct ex_op_info {
    const char *name;
    double tol;       /* NMSE bound against a double reference */
    bool diff;        /* has a gradient rule */
    bool elementwise; /* dst and sources of one shape: may run in place */
    uint64_t (*flops)(const ex_tensor *node);
    /* whether a planned node may run in the group of another (core/group.h); NULL: the op
       is never grouped */
    bool (*joins)(const ex_node_exec *head, const ex_node_exec *n);
} ex_op_info;

const ex_op_info *ex__op(ex_op op);
/** Bytes a tensor's distinct elements occupy (broadcast dims count once). */
uint64_t ex__bytes_distinct(const ex_tensor *t);
/** Traffic of a node: bytes of its sources, its output, and the minimum to move. */
void ex__node_traffic(const ex_tensor *n, uint64_t *read, uint64_t *written, uint64_t *min);

/* ---- autodiff ---- */
/** Appends the gradient rule of node n given its output gradient g; calls add_grad for
 *  each source gradient. */
typedef void (*ex_grad_sink)(ex_ctx *ctx, ex_tensor *src, ex_tensor *g, void *user);
void ex__backward_rule(ex_ctx *ctx, ex_tensor *n, ex_tensor *g, ex_grad_sink sink, void *user);

#endif
