/* The Vulkan backend's internals: memory blocks, what a family file needs to dispatch a
 * node's shaders, and one function per op family. Included by the C files of vulkan/ only.
 *
 * Conventions (docs/vulkan.md has the whole story):
 * - Device memory is a few large blocks, each with one VkBuffer over all of it; an
 *   ex_buffer is a range of one block. A dispatch binds exactly the byte ranges it
 *   touches: each operand gets a binding of its own (adjacent ones of one block share
 *   one), at most VK_BINDINGS storage buffers and VK_BINDINGS uniform buffers (small
 *   read-only operands, vk_ref_small). A tensor is addressed by a reference (vk_ref): the
 *   binding in the top two bits, VK_REF_UNIFORM for a uniform buffer, and the element
 *   offset of its element 0 from the binding's start below.
 * - A binding is written or only read: what overlaps the node's dst (or a source the op
 *   updates: SGD, ADAM, BN_STATS in training), scratch and the status words are written,
 *   the rest is read. Written bindings take storage bindings 0 up, read ones 3 down, and
 *   the dispatch runs the shader's SPIR-V built with that many writable bindings
 *   (shaders/common.glsl, WRITES), so the validation layer's synchronization checks see
 *   every read and write as it is.
 * - Every shader's push constants are at most VK_PC_BYTES and start with the node's gate
 *   reference (VK_NOREF: no gate), which vk_dispatch() fills in; shaders return at once
 *   when the gate element is 0 (shaders/common.glsl: GATE_RETURN()).
 * - A family function runs in two passes, like the CUDA backend's: the dry pass checks
 *   the node exactly as the CPU backend does and asks for scratch; the recording pass
 *   records dispatches into a command buffer that is re-submitted every step. So no
 *   family function may read device memory or depend on anything but the node.
 * - Barriers come from the bindings: before each dispatch the recorder places one when a
 *   binding overlaps a range an unsynchronized earlier dispatch wrote, or a written
 *   binding overlaps one it read. vk_barrier() forces one. */
#ifndef EXAPT_VULKAN_VK_H
#define EXAPT_VULKAN_VK_H

#include <stddef.h>
#include <stdint.h>
#include <vulkan/vulkan.h>

#include "core/tdesc.h"
#include "exapt/backend.h"
#include "vk_shaders.h"

/** Storage-buffer bindings of the descriptor set layout: Vulkan 1.1 guarantees 4 per stage;
 *  as many uniform-buffer bindings follow (12 guaranteed). */
#define VK_BINDINGS 4
/** Largest uniform-buffer binding: what Vulkan 1.1 guarantees (the shaders declare it). */
#define VK_UBO_BYTES 16384u
/** Push-constant bytes every pipeline layout declares: what Vulkan 1.1 guarantees. */
#define VK_PC_BYTES 128
/** A reference that points nowhere (no gate, an absent operand). */
#define VK_NOREF 0xFFFFFFFFu
/** A reference's bit for a uniform-buffer binding. */
#define VK_REF_UNIFORM (1u << 29)
/** Largest element offset a reference holds (from its binding's start): bindings stay
 *  below 2 GiB. */
#define VK_REF_MAX_ELEM ((1u << 29) - 1u)
/** Workgroups along x at most (Vulkan guarantees 65535): shaders loop grid-stride. */
#define VK_MAX_GROUPS 65535u

typedef struct vk_backend vk_backend;

/** An ex_buffer of this backend: a range of one memory block. */
typedef struct vk_buffer {
    int block;
    uint64_t offset; /**< bytes from the block's start */
    uint64_t bytes;
} vk_buffer;

/** A binding of a dispatch: bytes [lo, hi) of a block (lo aligned down to the device's
 *  offset alignment), written or only read. */
typedef struct vk_slot {
    int block;
    uint64_t lo, hi;
    int write;
} vk_slot;

/** What a node's family function needs. */
typedef struct vk_exec {
    vk_backend *b;
    VkCommandBuffer cmd; /**< NULL in the dry pass */
    int dry;
    const ex_node_exec *n;
    int64_t index;              /**< the node's index in the list */
    vk_slot slot[VK_BINDINGS];  /**< storage: written from 0 up, read from VK_BINDINGS-1 down */
    int nw, nr;                 /**< written and read storage bindings taken */
    int nblocks;                /**< storage bindings taken (nw + nr) */
    vk_slot uslot[VK_BINDINGS]; /**< uniform buffers (read), nu taken */
    int nu;
    vk_slot prev[2 * VK_BINDINGS]; /**< storage then uniform bindings before vk_bind_reset() */
    int ref_error;                 /**< a reference found no binding */
    uint32_t gate;                 /**< the gate's reference, or VK_NOREF */
    uint64_t scratch_at;           /**< bytes of scratch this node has taken */
    uint64_t scratch_base;         /**< where this node's scratch starts in the ring */
    uint64_t need;                 /**< dry pass: most scratch any node asked for */
    int first, last;               /**< record only the node's dispatches numbered
                                        [first, last) (from 0); vk_barrier() acts only
                                        when that is more than one */
    int dispatches;                /**< dispatches the node has asked for so far */
    VkPipeline bound;              /**< the pipeline bound last in cmd */
    VkDescriptorSet bound_set;     /**< the descriptor set bound last in cmd */
    char *msg;
    size_t msg_len;
} vk_exec;

/* ---- helpers for family files (vulkan/exec.c) ---- */

/** Writes a message naming the node's op and returns st. */
ex_status vk_fail(vk_exec *e, ex_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/** The reference of t's element 0 (one of the node's operands), binding its bytes for
 *  this dispatch and the next ones of the node: written if they overlap what the node
 *  writes, read otherwise. Its offset counts 32-bit words for f32 and i32, bytes for i8
 *  (shaders/quant/i8.glsl reads it; not for vk_ref_rebind). When no binding is left (nor
 *  one of the same block and use to widen) the next vk_dispatch() fails with
 *  EX_ERR_UNSUPPORTED. */
uint32_t vk_ref(vk_exec *e, const ex_tdesc *t);
/** vk_ref() for a small operand read with uniform indices (a scalar, a per-channel vector,
 *  a row of alpha, labels): a uniform-buffer binding when it fits one (VK_UBO_BYTES), so
 *  it takes none of the four storage bindings. The shader must read it through
 *  ld()/ldf()/ldi(). */
uint32_t vk_ref_small(vk_exec *e, const ex_tdesc *t);
/** Frees every binding but the gate's, for a node whose operands lie in more ranges than
 *  one dispatch can bind, or whose next dispatch touches other operands: take references
 *  again after it, or carry an earlier one over with vk_ref_rebind(). A reference that
 *  found no binding before it no longer fails the next dispatch. */
void vk_bind_reset(vk_exec *e);
/** A reference taken before the last vk_bind_reset(), valid again (rebinding its bytes,
 *  written or read as they were). */
uint32_t vk_ref_rebind(vk_exec *e, uint32_t ref);
/** vk_ref_rebind() for bytes this dispatch only reads (scratch an earlier dispatch of the
 *  node wrote); small ones (VK_UBO_BYTES) as a uniform buffer when small is set. */
uint32_t vk_ref_rebind_read(vk_exec *e, uint32_t ref, int small);
/** Whether t[0..n) (NULL or buffer-less entries skipped) can be bound besides what is bound
 *  now, each with a binding of its own: a multi-pass family frees the bindings
 *  (vk_bind_reset) only when they cannot. */
int vk_room(const vk_exec *e, const ex_tdesc *const *t, int n);
/** Merges, in place, the dims of a push constant's shape ne and the element strides of
 *  its three operands (dst, a, b) that every operand steps over as one
 *  (ex_td_merge_dims, the merged dims last): dense operands become one row. */
void vk_merge_dims3(uint32_t ne[4], uint32_t sd[4], uint32_t sa[4], uint32_t sb[4]);
/** Whether t can be bound besides what is bound now, with a binding of its own or by
 *  widening one of the same block and use over the bytes between (as vk_ref() then
 *  does; the tracker counts the bytes between as touched). */
int vk_room_widened(const vk_exec *e, const ex_tdesc *t);
/** The most tensors vk_ref_ascending() takes at once. */
#define VK_REFS_ASCENDING 16
/** References of t[0..n) (n at most VK_REFS_ASCENDING, each with a buffer) into
 *  ref[0..n), bound lowest address first: a binding widens only upwards (vk_ref()), so
 *  tensors that lie in any order in a block share the bindings that, taken in their own
 *  order, would each need one of their own. 0, with nothing bound, when they do not all
 *  find a binding besides what is bound now. */
int vk_ref_ascending(vk_exec *e, const ex_tdesc *const *t, int n, uint32_t *ref);
/** Binds t0 and t1, two written operands that lie next to each other in one block (at
 *  most the allocation padding between them: a batch norm's running mean and variance),
 *  as one storage binding, their references into ref[0] and ref[1]. 0, with nothing
 *  bound, when they lie apart or no binding is left. */
int vk_ref_pair(vk_exec *e, const ex_tdesc *t0, const ex_tdesc *t1, uint32_t ref[2]);
/** Scratch of bytes (a multiple of 4) for this node, written by the dispatch that takes
 *  it: *ref addresses it. It starts at byte e->scratch_at (as it was before the call) of
 *  the node's scratch. */
ex_status vk_scratch(vk_exec *e, uint64_t bytes, uint32_t *ref);
/** How a dispatch uses scratch bytes (vk_scratch_ref). */
enum vk_use { VK_READ = 0, VK_WRITE = 1, VK_READ_SMALL = 2 /**< read, as a uniform buffer */ };
/** Bytes [at, at + bytes) of this node's scratch (at counted as e->scratch_at is), used as
 *  use says: for a dispatch that touches only part of what vk_scratch() reserved, so that
 *  dispatches writing different parts need no barrier between them. */
uint32_t vk_scratch_ref(vk_exec *e, uint64_t at, uint64_t bytes, int use);
/** Records one dispatch of shader (specialization constant 0 = variant) with the push
 *  constants pc (at most VK_PC_BYTES; word 0 is overwritten with the gate). Nothing in
 *  the dry pass. */
ex_status vk_dispatch(vk_exec *e, vk_shader_id shader, int32_t variant, const void *pc,
                      size_t pc_bytes, uint32_t gx, uint32_t gy, uint32_t gz);
/** A compute-to-compute memory barrier between two dependent dispatches of one node.
 *  Where nodes are recorded pass by pass (one dispatch of each a round, vulkan/exec.c)
 *  this does nothing: the tracker orders a pass after the one it reads. */
void vk_barrier(vk_exec *e);
/** Whether the device's shaderIntegerDotProduct is enabled (never in the portable
 *  profile): only then may a shader with the DotProduct capabilities run. */
int vk_has_int_dot(const vk_exec *e);

/** Workgroups for a grid-stride loop over n items with wg invocations per group. */
static inline uint32_t vk_groups(int64_t n, uint32_t wg)
{
    int64_t g = (n + wg - 1) / wg;
    return g < 1 ? 1u : g > (int64_t)VK_MAX_GROUPS ? VK_MAX_GROUPS : (uint32_t)g;
}

/** Whether every size and stride fits the shaders' 32-bit arithmetic. */
static inline int vk_fits32(const int64_t ne[4], const int64_t st[4])
{
    int64_t n = 1;
    for (int d = 0; d < 4; d++) {
        if (st[d] < 0 || st[d] > INT32_MAX || ne[d] > INT32_MAX)
            return 0;
        n *= ne[d];
    }
    return n <= INT32_MAX;
}

/* ---- one function per op family; backend.c holds the switch ---- */
/* elementwise.c: ADD SUB MUL SCALE AXPY RELU RELU_BWD FILL COPY DROP_PATH */
ex_status vk_run_elementwise(vk_exec *e, const ex_node_exec *n);
/* reduce.c: SUM MEAN MAX MAX_BWD */
ex_status vk_run_reduce(vk_exec *e, const ex_node_exec *n);
/** Folds n f32 at src, `stride` words apart, into the one f32 at dst in a fixed order,
 *  variant one of shaders/reduce/variants.h (RED_SUM, RED_MEAN, RED_SQRT_SUM): the last
 *  pass of the losses, counts and norms (reduce.c). */
ex_status vk_reduce_flat(vk_exec *e, uint32_t src, uint32_t n, uint32_t stride, uint32_t dst,
                         int variant);
/** Folds every element of x (reference xref) into the f32 at dst (RED_SUM, RED_SUMSQ, ...). */
ex_status vk_reduce_all(vk_exec *e, const ex_tdesc *x, uint32_t xref, uint32_t dst, int variant);
/* softmax.c: SOFTMAX(_BWD) LOG_SOFTMAX(_BWD) CROSS_ENTROPY(_BWD) ACCURACY */
ex_status vk_run_softmax(vk_exec *e, const ex_node_exec *n);
/* gemm.c: PWCONV PWCONV_BN PWCONV_BWD_FILTER MATMUL LINEAR */
ex_status vk_run_gemm(vk_exec *e, const ex_node_exec *n);
/* optim.c: SGD ADAM GRAD_NORM CLIP */
ex_status vk_run_optim(vk_exec *e, const ex_node_exec *n);
/* random.c: RAND_UNIFORM RAND_NORMAL */
ex_status vk_run_random(vk_exec *e, const ex_node_exec *n);
/* conv.c: CONV2D(_BWD_DATA, _BWD_FILTER) DWCONV2D(_BWD_DATA, _BWD_FILTER) */
ex_status vk_run_conv(vk_exec *e, const ex_node_exec *n);
/* pool.c: AVG_POOL(_BWD) MAX_POOL(_BWD) GLOBAL_AVG_POOL */
ex_status vk_run_pool(vk_exec *e, const ex_node_exec *n);
/* batchnorm.c: BN_STATS BN_APPLY BN_BWD_REDUCE BN_BWD_DATA */
ex_status vk_run_batchnorm(vk_exec *e, const ex_node_exec *n);
/* nas.c: MIXED_SUM(_BWD_W) GUMBEL_SOFTMAX(_BWD) HARDMAX_ST ENTROPY(_BWD) TOPK_MASK */
ex_status vk_run_nas(vk_exec *e, const ex_node_exec *n);
/* quant.c: QUANTIZE DEQUANTIZE REQUANTIZE QADD QCONCAT QCONV2D QDWCONV2D QPWCONV QLINEAR
 * QRELU QMAX_POOL QAVG_POOL QGLOBAL_AVG_POOL */
ex_status vk_run_quant(vk_exec *e, const ex_node_exec *n);

/** Sub-allocations are aligned to this (covers minStorageBufferOffsetAlignment ≤ 256), so
 *  bytes this far apart never share a binding's aligned start. */
#define VK_ALIGN 256u

/** Status words a shader may report through (cross-entropy's label check): a
 *  reference to VK_STATUS_WORDS u32 that the step starts at 0; word 0 code, 1 node, 2
 *  row, 3 value. Written first-come (atomicCompSwap on word 0). Reporting dispatches
 *  take VK_STATUS_SLOTS such slots in turn, so that neighbours in a recording write
 *  bytes of their own and need no barrier between them; the host reads the report of
 *  the earliest node. */
#define VK_STATUS_WORDS 4
#define VK_STATUS_SLOTS 16
enum vk_status_code { VK_STATUS_OK = 0, VK_STATUS_LABEL = 1, VK_STATUS_SHAPE = 2 };
/** The status words' reference for this node (a written binding of the dispatch). */
ex_status vk_status_ref(vk_exec *e, uint32_t *ref);

/** The zone: VK_ZONE_SLOTS slots of VK_ZONE_SLOT bytes for reductions done in one
 *  dispatch, whose last workgroup finishes what the others left (a "ticket" counts them
 *  in): VK_ZONE_TICKETS u32 tickets, then the partials. Every ticket is 0 when a step
 *  starts (filled with the status words) and when the dispatch that counted on it ends
 *  (the last workgroup puts it back), so dispatches take the slots in turn, as a ring:
 *  neighbours in a recording write bytes of their own and need no barrier between them.
 *  The two-pass way (scratch) stays for what does not fit a slot. */
#define VK_ZONE_SLOT 16384u
#define VK_ZONE_SLOTS 128u
#define VK_ZONE_TICKETS 256u
/** The next zone slot for this dispatch (a written binding): *tickets addresses its
 *  tickets, *part its VK_ZONE_SLOT / 4 - VK_ZONE_TICKETS words of partials. */
void vk_zone(vk_exec *e, uint32_t *tickets, uint32_t *part);

#endif
