/* exapt — backends: opening one and what it offers. The interface a backend implements is
 * internal (core/backend_iface.h). The CPU backend is in the library; the CUDA and Vulkan
 * backends are compiled into the static library and, for the shared library, built as
 * modules it loads when one is opened (docs/library.md). */
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
    double record_ms;            /**< host time its recording took (its checks and the
                                      pipelines it made included) */
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
    int threads;         /**< host threads used (CPU backends) */
    int64_t reuse_after; /**< the default of ex_plan_opts.reuse_after on this backend; 0:
                              EX_PLAN_REUSE_AFTER (exapt/graph.h) */
} ex_backend_caps;

/** An open backend. */
typedef struct ex_backend ex_backend;

/** Opens a backend by name: "auto" (CUDA, then a GPU Vulkan device, then CPU), "cpu",
 *  "cpu-ref" (the CPU backend's plain reference path of every op), or another name from
 *  ex_backend_list(). NULL or "" means EXAPT_BACKEND, or "auto" when unset. On failure
 *  returns a status, sets *out to NULL and writes a message into msg (if not NULL). */
ex_status ex_backend_open(const char *name, ex_backend **out, char *msg, size_t msg_len);

/** Closes a backend. NULL is a no-op. Plans on it must be freed first. */
void ex_backend_close(ex_backend *be);

/** The message of the backend's last failure ("" when it has none; "" for NULL). */
const char *ex_backend_error(const ex_backend *be);

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

#ifdef __cplusplus
}
#endif
#endif
