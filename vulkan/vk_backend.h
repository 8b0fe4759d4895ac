/* The Vulkan backend's state, shared by backend.c (instance, device, the switch),
 * memory.c (blocks, buffers, transfers) and exec.c (pipelines, descriptor sets,
 * barriers, recorded steps). Family files see only vk.h. */
#ifndef EXAPT_VULKAN_VK_BACKEND_H
#define EXAPT_VULKAN_VK_BACKEND_H

#include "vulkan/vk.h"

/** Largest block of shared sub-allocation: small buffers share blocks of this size. */
#define VK_BLOCK_BYTES ((uint64_t)64 << 20)
/** Host-visible staging for uploads and downloads. */
#define VK_STAGE_BYTES ((uint64_t)8 << 20)
/** Descriptor sets per descriptor pool (pools are added as a recording needs them). */
#define VK_POOL_SETS 1024
/** Descriptor sets kept at most before a recording starts afresh (all of them dropped). */
#define VK_SETS_MAX 131072
/** Pipelines kept (one per shader, writable bindings and variant). */
#define VK_PIPES 512
/** The internal buffer: status words, then VK_ALIGN bytes nothing writes (what unused
 *  bindings point at), then the zone (vk_zone), then scratch. The step starts by zeroing
 *  all before the scratch. */
#define VK_STATUS_BYTES VK_ALIGN
_Static_assert(VK_STATUS_SLOTS *VK_STATUS_WORDS * 4 <= VK_STATUS_BYTES,
               "the status slots fit their bytes and the host's copy");
#define VK_ZONE_AT (2 * VK_ALIGN)
#define VK_SCRATCH_AT (VK_ZONE_AT + (uint64_t)VK_ZONE_SLOTS * VK_ZONE_SLOT)
/** The scratch holds this many times the most any node needs. Nodes take it in turn, as a
 *  ring, so that nodes recorded side by side that all use scratch (the batch norms of one
 *  round) need no barrier between them, and a node keeps its bytes over all its rounds
 *  (vulkan/exec.c). */
#define VK_SCRATCH_SLOTS 8
/** Nodes of more dispatches than this are recorded whole in their first round, rather
 *  than a dispatch a round: GRAD_NORM's hundreds of independent sums would take a round
 *  and a barrier each. */
#define VK_PASSES_MAX 4

/** A free range of a block. */
typedef struct vk_range {
    uint64_t at, bytes;
} vk_range;

/** One device allocation with one buffer over all of it. */
typedef struct vk_block {
    VkDeviceMemory mem;
    VkBuffer buf;
    uint64_t bytes;
    int dedicated; /**< holds one large ex_buffer; freed with it */
    vk_range *free;
    int nfree, capfree;
} vk_block;

/** A pending access range of the hazard tracker. */
typedef struct vk_access {
    int block;
    uint64_t lo, hi; /**< bytes */
} vk_access;

/** The ranges one descriptor set binds: storage then uniform buffers (blocks stay below
 *  4 GiB: a binding is at most 2 GiB, a block holds one buffer or shares 64 MiB). */
typedef struct vk_setkey {
    int32_t block[2 * VK_BINDINGS];
    uint32_t lo[2 * VK_BINDINGS], len[2 * VK_BINDINGS];
} vk_setkey;

/** A descriptor set made while a step was recorded, kept for every later recording. */
typedef struct vk_set {
    vk_setkey key;
    VkDescriptorSet set; /**< VK_NULL_HANDLE: a free entry of the table */
} vk_set;

typedef struct vk_pipe {
    vk_shader_id shader;
    int writes;
    int32_t variant;
    VkPipeline pipe;
} vk_pipe;

/** Device objects held and made, for leak checks (ex_backend_counters). */
typedef struct vk_counts {
    uint64_t allocations, bytes; /**< vkAllocateMemory held now, and their bytes */
    uint64_t objects;            /**< other device objects held now */
    uint64_t created;            /**< allocations and objects made since the backend opened */
    uint64_t sets;               /**< descriptor sets held now (counted in objects too) */
    uint64_t dispatches, barriers, inexact; /**< of the last recording */
    double record_ms;                       /**< host time of the last recording */
} vk_counts;

/** A node list recorded into a command buffer (ex_backend_iface.record). */
struct ex_recording {
    const ex_node_exec *nodes;
    int64_t count;
    VkCommandBuffer cmd; /**< VK_NULL_HANDLE until the first replay */
    uint64_t gen;        /**< the backend's generation it was recorded in (0: none) */
};

/** What the device offers, after the portable profile's cuts. */
typedef struct vk_features {
    int portable;
    int timestamps;      /**< timestamp queries on the compute queue */
    double ts_period_ns; /**< ns per timestamp tick */
    uint32_t ts_mask;    /**< valid bits of a timestamp */
    int subgroup_arith;  /**< subgroup arithmetic in compute (detected, reported) */
    uint32_t subgroup_size;
    int storage16;       /**< 16-bit storage buffer access (detected, reported) */
    uint64_t max_range;  /**< maxStorageBufferRange */
    uint64_t max_alloc;  /**< maxMemoryAllocationSize */
    uint32_t max_shared; /**< maxComputeSharedMemorySize */
    uint32_t max_invoc;  /**< maxComputeWorkGroupInvocations */
    uint32_t align;      /**< storage-buffer offset alignment (256 in the portable profile) */
    uint32_t ualign;     /**< uniform-buffer offset alignment (256 in the portable profile) */
    uint32_t max_allocs; /**< maxMemoryAllocationCount */
    int float_controls;  /**< SignedZeroInfNanPreserve for 32-bit floats: the f1 SPIR-V runs */
    int int_dot;         /**< shaderIntegerDotProduct enabled: quant/convdot.comp may run */
    int int_dot_fast;    /**< 4x8-bit packed signed dot products accelerated (reported) */
} vk_features;

struct vk_backend {
    VkInstance inst;
    VkDebugUtilsMessengerEXT messenger;
    VkPhysicalDevice phys;
    VkPhysicalDeviceProperties props;
    VkDevice dev;
    VkQueue queue;
    uint32_t qfamily;
    vk_features feat;
    uint32_t mem_device; /**< memory type for blocks */
    uint32_t mem_host;   /**< host-visible coherent type for staging */
    VkCommandPool pool;
    VkCommandBuffer xfer; /**< one-off work: transfers, fills, copies */
    VkFence fence;
    /* memory */
    vk_block *blocks;
    int nblocks;
    uint64_t gen; /**< moves when the sets are dropped: recordings of an older one record again */
    VkBuffer stage;
    VkDeviceMemory stage_mem;
    char *stage_map;
    VkCommandBuffer up;  /**< uploads recorded and not yet submitted */
    int up_open;         /**< up is recording */
    uint64_t stage_used; /**< staging bytes holding those uploads' data */
    vk_buffer *internal; /**< status words, then scratch */
    uint64_t scratch_bytes;
    uint64_t scratch_slot; /**< the most any node needs, with room to spare; the scratch
                                holds VK_SCRATCH_SLOTS of them */
    /* recording */
    VkDescriptorSetLayout set_layout;
    VkPipelineLayout layout;
    VkDescriptorPool
        *dpools; /**< npools pools of VK_POOL_SETS sets; sets come from dpools[dpool_at] */
    int npools, dpool_at;
    uint32_t pool_used; /**< sets taken from dpools[dpool_at] */
    VkShaderModule modules[VK_SH_COUNT][VK_BINDINGS + 1];
    vk_pipe pipes[VK_PIPES];
    int npipes;
    vk_pipe want[VK_PIPES]; /**< noted by a dry pass, to be made (vkx_pipelines_make) */
    int nwant;
    vk_set *sets; /**< open-addressing table of capsets entries, nsets used */
    uint64_t nsets, capsets;
    uint64_t status_next;      /**< the status slot the next reporting dispatch takes */
    uint64_t zone_next;        /**< the zone slot the next one-pass reduction takes */
    vk_access *reads, *writes; /**< ranges read and written since the last barrier */
    int64_t nreads, nwrites, capreads, capwrites;
    vk_counts counts;
    VkQueryPool queries;
    uint32_t nqueries;
    /* status read back after each step */
    VkBuffer status_host;
    VkDeviceMemory status_mem;
    uint32_t *status_map;
    uint64_t host_syncs;
    /* validation */
    int validation;
    uint64_t vmsgs, vmsgs_seen;
    char vmsg[512];
    char msg[512];
};

/* memory.c */
ex_status vkm_init(vk_backend *b);
void vkm_destroy(vk_backend *b);
ex_status vkm_alloc(vk_backend *b, uint64_t bytes, vk_buffer **out);
void vkm_free(vk_backend *b, vk_buffer *buf);
/** Submits the pending uploads (if any) and then cmd (may be NULL) in one batch and
 *  waits: the one place the host waits for the device. */
ex_status vkm_submit_wait(vk_backend *b, VkCommandBuffer cmd);
/** Begins b->xfer with a full barrier against all earlier work. */
ex_status vkm_begin(vk_backend *b);
/** Every earlier shader and transfer write before every later access. */
void vk_full_barrier(VkCommandBuffer cmd);
/** Earlier shader writes before later shader accesses: between the dispatches of a step,
 *  whose transfers (the status words) have full barriers of their own. */
void vk_compute_barrier(VkCommandBuffer cmd);
ex_status vk_upload(void *impl, ex_buffer *buf, uint64_t off, const void *src, uint64_t n);
ex_status vk_download(void *impl, ex_buffer *buf, uint64_t off, void *dst, uint64_t n);
ex_status vk_copy(void *impl, ex_buffer *dst, uint64_t doff, ex_buffer *src, uint64_t soff,
                  uint64_t n);
ex_status vk_fill(void *impl, ex_buffer *buf, uint64_t off, uint64_t n, uint32_t pattern);

/* exec.c */
ex_status vkx_init(vk_backend *b);
void vkx_destroy(vk_backend *b);
/** Drops the descriptor sets and moves the generation, so that every recording records
 *  again before its next submission (a block went away, the scratch grew). */
void vkx_invalidate(vk_backend *b);
/** Counts device objects made (delta > 0) or destroyed (delta < 0). */
void vk_count_object(vk_backend *b, int64_t delta);

/* pipeline.c */
/** The pipeline of shader built with writes writable bindings, for variant (made now if
 *  there is none yet). */
ex_status vkx_pipeline(vk_backend *b, vk_shader_id sh, int writes, int32_t variant,
                       VkPipeline *out);
/** Notes a pipeline a recording will need (the dry pass's dispatches). */
void vkx_pipeline_want(vk_backend *b, vk_shader_id sh, int writes, int32_t variant);
/** Makes every pipeline noted and not yet made, side by side on several threads. */
ex_status vkx_pipelines_make(vk_backend *b);
/** Destroys every pipeline and shader module. */
void vkx_pipelines_destroy(vk_backend *b);

/* bind.c */
/** Frees every binding and binds the node's gate: before a node's family runs. */
void vk_bind_begin(vk_exec *e);
/** The order to record count nodes in (order[k]: the k-th node to record) and the round
 *  each starts in (level[i] for node i), node i spanning passes[i] (at least 1) rounds and
 *  starting after the last round of every node it waits for (ex_node_exec.dep): by round,
 *  a round's nodes grouped by op, each op's in the plan's order (vulkan/order.c).
 *  EX_ERR_NOMEM with a message when host memory runs out. */
ex_status vkx_order(vk_backend *b, const ex_node_exec *nodes, int64_t count, const int *passes,
                    int64_t *order, int64_t *level);
/** Drops every descriptor set (the pools stay for the next recording). */
void vkx_sets_drop(vk_backend *b);
/** Drops the sets and destroys the pools. */
void vkx_sets_destroy(vk_backend *b);
ex_status vkx_compute(vk_backend *b, const ex_node_exec *nodes, int64_t count, double *node_ms);
/** Runs a recording as vkx_compute runs its nodes (unprofiled), recording its command
 *  buffer first when it has none of the current generation. */
ex_status vkx_replay(vk_backend *b, ex_recording *r);
/** Frees the recording's command buffer (the recording itself stays the caller's). */
void vkx_forget(vk_backend *b, ex_recording *r);

/* backend.c */
/** The one switch over ex_op. */
ex_status vk_run_node(vk_exec *e, const ex_node_exec *n);
/** EX_OK, or the Vulkan result as a status with a message naming what failed. */
ex_status vk_check(vk_backend *b, VkResult r, const char *what);

#endif
