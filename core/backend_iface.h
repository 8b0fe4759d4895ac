/* The interface a backend implements, and what the planner hands it: the planner resolves
 * every tensor to a buffer and a byte offset, and the backend receives a flat list of
 * nodes (ex_node_exec) with each node's dependencies, to run in that order or in any
 * order the dependencies allow. Internal: backends and the engine only; the public
 * side is include/exapt/backend.h. */
#ifndef EXAPT_CORE_BACKEND_IFACE_H
#define EXAPT_CORE_BACKEND_IFACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "exapt/backend.h"
#include "exapt/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/** A device allocation; its layout belongs to the backend that made it. */
typedef struct ex_buffer ex_buffer;

/** A node list a backend has recorded for replays (ex_backend_iface.record). */
typedef struct ex_recording ex_recording;

/** A tensor as a backend sees it: shape and element strides (outermost first, unused
 *  trailing entries 1 and 0), and where its element 0 lies. */
typedef struct ex_tdesc {
    ex_dtype dtype;
    int ndim;
    int64_t ne[EX_MAX_DIMS];
    int64_t st[EX_MAX_DIMS];
    ex_buffer *buf;
    uint64_t offset; /**< bytes from the buffer's start to element 0 */
} ex_tdesc;

/** Integer and float parameters per node; docs/ops.md says what each op keeps there. */
#define EX_NODE_IPARAMS 16
#define EX_NODE_FPARAMS 8

/** One node of a plan, ready to run. */
typedef struct ex_node_exec {
    ex_op op;
    int nsrc;
    const ex_tdesc *src; /**< nsrc source descriptors */
    ex_tdesc dst;
    int32_t ip[EX_NODE_IPARAMS];
    float fp[EX_NODE_FPARAMS];
    const ex_tdesc *gate; /**< NULL, or an f32 mask: skip the node when gate[gate_index] == 0 */
    int64_t gate_index;
    int32_t tag[3];      /**< cell, edge, candidate (-1: none) */
    uint64_t bytes_read; /**< bytes this node's sources occupy */
    uint64_t bytes_written;
    uint64_t min_bytes; /**< the least traffic the best algorithm must move */
    uint64_t flops;
    /** The earlier nodes of the same list this one must wait for, as distances back (node i
     *  waits for node i - dep[k]): the planner finds them once for every backend
     *  (core/deps.h), which may run a node as soon as those are done. A distance reaching
     *  before the list's first node asks for no wait: that node ran, or was queued ahead,
     *  in an earlier compute. */
    const int64_t *dep;
    int32_t ndep;
    /** Nodes the planner runs as one launch (core/group.h): on a group's first node, how
     *  many consecutive nodes the group has (>= 2); on each later one, minus its distance
     *  from the first; 0 on a node alone. A group's nodes are one op and do not wait for
     *  each other: the group waits for what any of them waits for, and a node that waits
     *  for one of them waits for the group. A backend is handed groups only of the ops
     *  its groups() accepts, and never part of a group. */
    int32_t group;
} ex_node_exec;

/** The interface every backend implements. Each function returns a status and leaves a
 *  message readable through error(); none aborts. */
typedef struct ex_backend_iface {
    void (*close)(void *impl);
    const char *(*error)(void *impl);
    ex_status (*buffer_alloc)(void *impl, uint64_t bytes, ex_buffer **out);
    void (*buffer_free)(void *impl, ex_buffer *buf);
    ex_status (*upload)(void *impl, ex_buffer *buf, uint64_t offset, const void *src, uint64_t n);
    /** Copies device data to the host once the work queued before it is done; returns a
     *  failure a queued compute found. */
    ex_status (*download)(void *impl, ex_buffer *buf, uint64_t offset, void *dst, uint64_t n);
    ex_status (*copy)(void *impl, ex_buffer *dst, uint64_t doff, ex_buffer *src, uint64_t soff,
                      uint64_t n);
    /** Fills n bytes (a multiple of 4) with a 32-bit pattern. */
    ex_status (*fill)(void *impl, ex_buffer *buf, uint64_t offset, uint64_t n, uint32_t pattern);
    /** Runs nodes as their order and dependencies say (a node after those it waits for;
     *  nodes that do not wait for each other in any order or side by side). A list of
     *  several nodes must carry every dependency: the planner's do. When node_ms is not
     *  NULL, stores each node's time (ms) and returns once they ran. Otherwise it may
     *  return once the nodes are queued: a failure the device finds later (a label out of
     *  range) is then returned by the next synchronize or download, or by a compute that
     *  must wait to collect it. */
    ex_status (*compute)(void *impl, const ex_node_exec *nodes, int64_t n, double *node_ms);
    /** Waits for all queued work; returns a failure a queued compute found. */
    ex_status (*synchronize)(void *impl);
    /** Times the host has waited for the device so far (NULL: the backend runs on the
     *  host and never waits). */
    uint64_t (*host_syncs)(void *impl);
    /** Fault injection: while fails is set, the backend asks fails(user) before each host
     *  allocation it makes inside compute (kernel scratch) and reports out of memory when
     *  it answers true. The plan sets it around each run from its context's allocation
     *  hook (ex_ctx_fail_alloc_after). NULL: the backend's own host allocations while
     *  computing (the GPU backends' recording of a step) are not covered by the hook. */
    void (*set_alloc_hook)(void *impl, bool (*fails)(void *user), void *user);
    /** Fills *out (ex_backend_counters). NULL: the backend keeps no such counters. */
    void (*counters)(void *impl, ex_backend_counters *out);
    /** Takes a communicator whose device functions serve this backend (comm->device_backend
     *  is its name; comm.h): from then on compute runs ALLREDUCE nodes itself through
     *  allreduce_device, and every wait for the device asks device_waiting. The plan calls
     *  it before each compute. NULL: the backend has no device sums (the plan carries
     *  ALLREDUCE nodes out through the host). */
    ex_status (*set_comm)(void *impl, const ex_comm *comm);
    /** Whether the backend runs a group of op's nodes (ex_node_exec.group) as one launch
     *  (NULL: it runs no groups, and the planner makes none for it). When profiling, it
     *  stores a group's time on its first node and 0 on the others. */
    bool (*groups)(void *impl, ex_op op);
    /** Record and replay, for a list that runs many times (NULL all three: the plan hands
     *  every run to compute). record makes a handle for nodes, which must stay unchanged
     *  and alive until forget. replay runs them as compute would (node_ms NULL): what it
     *  prepares (a CUDA graph, a command buffer) is made at the first replay and again only
     *  when something of the backend's own that it holds has moved (a larger scratch), so
     *  the nodes are checked then, not at every replay. forget frees the handle (NULL:
     *  nothing), which may still be running: the backend lets it finish. */
    ex_status (*record)(void *impl, const ex_node_exec *nodes, int64_t n, ex_recording **out);
    ex_status (*replay)(void *impl, ex_recording *r);
    void (*forget)(void *impl, ex_recording *r);
} ex_backend_iface;

/** The interface and implementation behind an open backend (for the planner). */
const ex_backend_iface *ex__backend_iface_of(const ex_backend *be);
void *ex__backend_impl_of(const ex_backend *be);

/** Entry points of the backends compiled in; used by the backend table. */
ex_status ex__cpu_backend_create(int reference, const ex_backend_iface **iface, void **impl,
                                 ex_backend_caps *caps, char *msg, size_t msg_len);
/** The CUDA backend (compiled in when EXAPT_HAVE_CUDA): the device is EXAPT_CUDA_DEVICE
 *  (default 0); arg is unused. Fails with EX_ERR_UNSUPPORTED when there is no usable
 *  device. */
ex_status ex__cuda_backend_create(int arg, const ex_backend_iface **iface, void **impl,
                                  ex_backend_caps *caps, char *msg, size_t msg_len);
/** The Vulkan devices the loader reports, for ex_backend_devices() (compiled in when
 *  EXAPT_HAVE_VULKAN). EX_ERR_ARG, writing nothing, when buf is NULL or len is 0; on other
 *  failures buf holds the message. */
ex_status ex__vulkan_devices(char *buf, size_t len);
/** The Vulkan backend (compiled in when EXAPT_HAVE_VULKAN): the device is EXAPT_VK_DEVICE
 *  (an index or part of a name) or the best one, discrete before integrated GPUs; virtual
 *  and CPU-type devices (lavapipe) only when automatic is 0 (asked for by name), never for
 *  "auto". EXAPT_VK_PORTABLE=1 keeps to what Vulkan 1.1 guarantees; EXAPT_VK_VALIDATION=1
 *  turns the Khronos validation layer on and makes any message of it an error. EX_ERR_ARG
 *  when iface, impl or caps is NULL (checked before Vulkan is touched); msg may be NULL. */
ex_status ex__vulkan_backend_create(int automatic, const ex_backend_iface **iface, void **impl,
                                    ex_backend_caps *caps, char *msg, size_t msg_len);

#ifdef __cplusplus
}
#endif
#endif
