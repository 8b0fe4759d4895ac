/* exapt — backends: opening one, what it offers, and the interface each implements.
 *
 * A backend runs a planned graph: the planner resolves every tensor to a buffer and a
 * byte offset, and the backend receives a flat list of nodes (ex_node_exec) to run in
 * order. Backends are compiled in and listed in one constant table; there is no
 * registration at start-up. */
#ifndef EXAPT_BACKEND_H
#define EXAPT_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "exapt/ops.h"
#include "exapt/status.h"
#include "exapt/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/** A device allocation; its layout belongs to the backend that made it. */
typedef struct ex_buffer ex_buffer;

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
} ex_node_exec;

/** What a backend holds on its device and what it did recording its last step, for leak
 *  checks and for measuring: a per-step allocation or a leak shows as growth of the first
 *  four between two reads (ex_backend_get_counters). */
typedef struct ex_backend_counters {
    uint64_t device_allocations; /**< device memory allocations held now (vkAllocateMemory,
                                      cudaMalloc); CUDA counts these, its bytes and created
                                      only, the other fields stay 0 */
    uint64_t device_bytes;       /**< their bytes: the plan's arena and persistent
                                      buffers, scratch, staging, work spaces */
    uint64_t device_objects;     /**< other device objects held now: buffers, pipelines, shader
                                      modules, descriptor sets and pools, command buffers, ... */
    uint64_t created;            /**< allocations and objects made since the backend opened */
    uint64_t descriptor_sets;    /**< descriptor sets held now (counted in device_objects too) */
    uint64_t dispatches;         /**< dispatches recorded for the last step recorded */
    uint64_t barriers;           /**< barriers recorded for it */
    uint64_t inexact_bindings;   /**< its bindings widened over bytes no operand of the
                                      dispatch has (when operands outnumber bindings) */
    double record_ms;            /**< host time its recording took */
} ex_backend_counters;

/** Feature bits of ex_backend_caps.features. */
enum ex_backend_feature {
    EX_FEAT_TIMESTAMPS = 1u << 0, /**< per-node timing */
    EX_FEAT_REFERENCE = 1u << 1,  /**< runs the plain reference path of every op */
    EX_FEAT_RECOMPUTE = 1u << 2,  /**< making cheap tensors again in the backward pass costs
                                       little here (ex_search_config.recompute's default) */
};

/** What a backend offers. */
typedef struct ex_backend_caps {
    char name[32];    /**< "cpu", "cpu-ref", "vulkan", "cuda" */
    char device[128]; /**< the device in words */
    uint64_t memory_bytes;
    uint64_t max_alloc_bytes;   /**< largest single allocation */
    uint64_t max_binding_bytes; /**< largest range one node may address in a buffer */
    double peak_copy_gbs;       /**< measured device-to-device copy bandwidth, 0 if not yet */
    unsigned features;
    int threads; /**< host threads used (CPU backends) */
    int64_t reuse_after; /**< the default of ex_plan_opts.reuse_after on this backend; 0:
                              EX_PLAN_REUSE_AFTER (exapt/graph.h) */
} ex_backend_caps;

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
    /** Runs nodes in order. When node_ms is not NULL, stores each node's time (ms) and
     *  returns once they ran. Otherwise it may return once the nodes are queued: a failure
     *  the device finds later (a label out of range) is then returned by the next
     *  synchronize or download, or by a compute that must wait to collect it. */
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
} ex_backend_iface;

/** An open backend. */
typedef struct ex_backend ex_backend;

/** Opens a backend by name: "auto" (CUDA, then a GPU Vulkan device, then CPU), "cpu",
 *  "cpu-ref" (the CPU backend's plain reference path of every op), or another name from
 *  ex_backend_list(). NULL or "" means EXAPT_BACKEND, or "auto" when unset. On failure
 *  returns a status, sets *out to NULL and writes a message into msg (if not NULL). */
ex_status ex_backend_open(const char *name, ex_backend **out, char *msg, size_t msg_len);

/** Closes a backend. NULL is a no-op. Plans on it must be freed first. */
void ex_backend_close(ex_backend *be);

/** The backend's capabilities (never NULL for an open backend; NULL for NULL). */
const ex_backend_caps *ex_backend_get_caps(const ex_backend *be);

/** Measures the peak device copy bandwidth (GB/s) with n-byte copies (read and written
 *  bytes counted, the best of 5) and stores it in the capabilities. A backend with
 *  EX_FEAT_TIMESTAMPS runs each copy as a COPY node timed on its own clock (the device's,
 *  on a GPU), so launch and wait are not counted: n must then fit one binding
 *  (max_binding_bytes). Others are timed on the host around copy(). */
ex_status ex_backend_measure_bandwidth(ex_backend *be, uint64_t bytes, double *gbs);

/** How many times the host has waited for the device since the backend opened: read it
 *  around a step to count the step's synchronizations. 0 for host backends. */
uint64_t ex_backend_host_syncs(const ex_backend *be);

/** The backend's counters (ex_backend_counters) into *out. EX_ERR_UNSUPPORTED when the
 *  backend keeps none (the CPU), EX_ERR_ARG when be or out is NULL; *out
 *  is zeroed whenever out is not NULL. */
ex_status ex_backend_get_counters(const ex_backend *be, ex_backend_counters *out);

/** The names of the backends compiled in, NULL-terminated, in "auto" order. */
const char *const *ex_backend_list(void);

/** Whether backend name runs op (every compiled backend runs every op). */
int ex_backend_supports(const char *name, ex_op op);

/** Lists the devices backend name could use, one line each, into buf (NUL-terminated,
 *  cut at len): for "vulkan" every device the loader reports, with its index for
 *  EXAPT_VK_DEVICE, type and Vulkan version. EX_ERR_UNSUPPORTED for a backend without a
 *  device list or not compiled in; on failure buf holds the message. EX_ERR_ARG, writing
 *  nothing, when name or buf is NULL or len is 0. */
ex_status ex_backend_devices(const char *name, char *buf, size_t len);

/** The interface and implementation behind an open backend (for the planner). */
const ex_backend_iface *ex_backend_iface_of(const ex_backend *be);
void *ex_backend_impl_of(const ex_backend *be);

/** Entry points of the backends compiled in; used by the backend table. */
ex_status ex_cpu_backend_create(int reference, const ex_backend_iface **iface, void **impl,
                                ex_backend_caps *caps, char *msg, size_t msg_len);
/** The CUDA backend (compiled in when EXAPT_HAVE_CUDA): the device is EXAPT_CUDA_DEVICE
 *  (default 0); arg is unused. Fails with EX_ERR_UNSUPPORTED when there is no usable
 *  device. */
ex_status ex_cuda_backend_create(int arg, const ex_backend_iface **iface, void **impl,
                                 ex_backend_caps *caps, char *msg, size_t msg_len);
/** The Vulkan devices the loader reports, for ex_backend_devices() (compiled in when
 *  EXAPT_HAVE_VULKAN). EX_ERR_ARG, writing nothing, when buf is NULL or len is 0; on other
 *  failures buf holds the message. */
ex_status ex_vulkan_devices(char *buf, size_t len);
/** The Vulkan backend (compiled in when EXAPT_HAVE_VULKAN): the device is EXAPT_VK_DEVICE
 *  (an index or part of a name) or the best one, discrete before integrated GPUs; virtual
 *  and CPU-type devices (lavapipe) only when automatic is 0 (asked for by name), never for
 *  "auto". EXAPT_VK_PORTABLE=1 keeps to what Vulkan 1.1 guarantees; EXAPT_VK_VALIDATION=1
 *  turns the Khronos validation layer on and makes any message of it an error. EX_ERR_ARG
 *  when iface, impl or caps is NULL (checked before Vulkan is touched); msg may be NULL. */
ex_status ex_vulkan_backend_create(int automatic, const ex_backend_iface **iface, void **impl,
                                   ex_backend_caps *caps, char *msg, size_t msg_len);

#ifdef __cplusplus
}
#endif
#endif
