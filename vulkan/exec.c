/* Running a node list: the node loop and recordings. The plan records each list it runs
 * (record, in the backend interface); the first replay records the command buffer and
 * later replays submit it again. What each dispatch binds, the barriers and the
 * descriptor sets are in vulkan/bind.c; the pipelines in vulkan/pipeline.c.
 *
 * A command buffer names descriptor sets and the scratch, so dropping the sets (a larger
 * scratch, a dedicated block freed, too many sets) moves the generation, and a recording
 * of an older one records again before it is submitted. */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "vulkan/vk_backend.h"

/* ---- device objects ---- */

void vk_count_object(vk_backend *b, int64_t delta)
{
    b->counts.objects += (uint64_t)delta;
    if (delta > 0)
        b->counts.created += (uint64_t)delta;
}

int vk_has_int_dot(const vk_exec *e)
{
    return e->b->feat.int_dot;
}

/* ---- one node ---- */

/* Operands must start on a 32-bit word, but for i8 ones, whose references count bytes
 * (vk_ref). */
static ex_status check_aligned(vk_exec *e, const ex_tdesc *t, const char *what)
{
    if (!t || !t->buf || t->dtype == EX_I8 ||
        !((((const vk_buffer *)t->buf)->offset + t->offset) & 3))
        return EX_OK;
    return vk_fail(e, EX_ERR_ARG, "%s at byte %llu is not 4-byte aligned", what,
                   (unsigned long long)t->offset);
}

/* Node i, its scratch from byte `base` of the ring on. */
static ex_status run_one(vk_exec *e, const ex_node_exec *n, int64_t i, uint64_t base)
{
    e->n = n;
    e->index = i;
    e->scratch_at = 0;
    e->scratch_base = e->dry ? 0 : base;
    ex_status st = EX_OK;
    if (n->gate) {
        const ex_tdesc *g = n->gate;
        if (!ex_td_valid(g, EX_F32) || n->gate_index < 0 || n->gate_index >= ex_td_numel(g))
            return vk_fail(e, EX_ERR_ARG, "gate must be f32 with index %lld inside it",
                           (long long)n->gate_index);
        st = check_aligned(e, g, "the gate");
    }
    if (st == EX_OK)
        st = check_aligned(e, &n->dst, "dst");
    for (int k = 0; k < n->nsrc && n->src && st == EX_OK; k++)
        st = check_aligned(e, &n->src[k], "an operand");
    if (st != EX_OK)
        return st;
    vk_bind_begin(e);
    return vk_run_node(e, n);
}

static vk_exec exec_of(vk_backend *b, VkCommandBuffer cmd)
{
    vk_exec e;
    memset(&e, 0, sizeof e);
    e.b = b;
    e.cmd = cmd;
    e.dry = cmd == VK_NULL_HANDLE;
    e.first = 0;
    e.last = INT_MAX;
    e.msg = b->msg;
    e.msg_len = sizeof b->msg;
    return e;
}

/* ---- recordings ---- */

void vkx_invalidate(vk_backend *b)
{
    b->gen++;
    vkx_sets_drop(b);
}

/* Checks every node and makes the scratch large enough; a new scratch drops what was
 * recorded against the old one. need and disp (NULL: not wanted): each node's scratch
 * bytes and dispatches. */
static ex_status dry_pass(vk_backend *b, const ex_node_exec *nodes, int64_t count, uint64_t *need,
                          int *disp)
{
    vk_exec e = exec_of(b, VK_NULL_HANDLE);
    for (int64_t i = 0; i < count; i++) {
        e.dispatches = 0;
        ex_status st = run_one(&e, &nodes[i], i, 0);
        if (st != EX_OK)
            return st;
        if (need)
            need[i] = e.scratch_at;
        if (disp)
            disp[i] = e.dispatches;
    }
    if (e.need <= b->scratch_slot)
        return EX_OK;
    vkx_invalidate(b);
    uint64_t slot = e.need + e.need / 4;
    slot = (slot + VK_ALIGN - 1) & ~(uint64_t)(VK_ALIGN - 1);
    uint64_t bytes = slot * VK_SCRATCH_SLOTS;
    vk_buffer *nb = NULL;
    ex_status st = vkm_alloc(b, VK_SCRATCH_AT + bytes, &nb);
    if (st != EX_OK)
        return st;
    vkm_free(b, b->internal);
    b->internal = nb;
    b->scratch_bytes = bytes;
    b->scratch_slot = slot;
    return EX_OK;
}

static VkBuffer internal_buf(vk_backend *b)
{
    return b->blocks[b->internal->block].buf;
}

/* Zeroes the status words and the zone's tickets before the nodes, copies the status
 * words to the host after. */
static void status_begin(vk_backend *b, VkCommandBuffer cmd)
{
    vk_full_barrier(cmd);
    vkCmdFillBuffer(cmd, internal_buf(b), b->internal->offset, VK_SCRATCH_AT, 0);
    vk_full_barrier(cmd);
}

static void status_end(vk_backend *b, VkCommandBuffer cmd)
{
    vk_full_barrier(cmd);
    VkBufferCopy r = {b->internal->offset, 0, VK_STATUS_BYTES};
    vkCmdCopyBuffer(cmd, internal_buf(b), b->status_host, 1, &r);
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
                          .dstAccessMask = VK_ACCESS_HOST_READ_BIT};
    vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb,
                         0, NULL, 0, NULL);
}

/* A node recorded over several rounds: its next pass and its scratch. */
typedef struct vk_live {
    int64_t i;
    int pass, passes;
    uint64_t base, bytes;
} vk_live;

/* Records pass `pass` of node i (every dispatch when it has more than VK_PASSES_MAX: its
 * own barriers then come from vk_barrier()). */
static ex_status record_pass(vk_exec *e, const ex_node_exec *nodes, int64_t i, int pass, int whole,
                             uint64_t base)
{
    e->first = whole ? 0 : pass;
    e->last = whole ? INT_MAX : pass + 1;
    e->dispatches = 0;
    ex_status st = run_one(e, &nodes[i], i, base);
    e->first = 0;
    e->last = INT_MAX;
    return st;
}

/* The next pass of every live node; the finished ones leave the list. */
static ex_status live_next(vk_exec *e, const ex_node_exec *nodes, vk_live *live, int *nlive)
{
    int kept = 0;
    ex_status st = EX_OK;
    for (int j = 0; j < *nlive && st == EX_OK; j++) {
        st = record_pass(e, nodes, live[j].i, live[j].pass, 0, live[j].base);
        if (++live[j].pass < live[j].passes)
            live[kept++] = live[j];
    }
    *nlive = kept;
    return st;
}

/* Where `bytes` of scratch go (a multiple of VK_ALIGN, as vk_scratch() takes them): on
 * in the ring from *ring (from 0 when they do not fit before its end). Bytes a live node
 * still needs are not taken: its remaining passes are recorded first. */
static ex_status scratch_place(vk_exec *e, const ex_node_exec *nodes, vk_live *live, int *nlive,
                               uint64_t bytes, uint64_t *ring, uint64_t *at)
{
    if (*ring + bytes > e->b->scratch_bytes)
        *ring = 0;
    ex_status st = EX_OK;
    for (int j = 0; j < *nlive && bytes > 0; j++)
        if (*ring < live[j].base + live[j].bytes && live[j].base < *ring + bytes) {
            while (*nlive > 0 && st == EX_OK)
                st = live_next(e, nodes, live, nlive);
            break;
        }
    *at = *ring;
    *ring += bytes;
    return st;
}

/* Records the nodes round by round (vkx_order): in each, the next pass of the nodes that
 * started earlier, then the first pass of those that start in it. A node's scratch stays
 * its own over all its passes. disp: each node's dispatches, need: its scratch bytes
 * (dry_pass). The tracker (vulkan/bind.c) puts the barriers where dispatches depend on
 * each other: about one a round. live: room for count entries. */
static ex_status record_rounds(vk_exec *e, const ex_node_exec *nodes, const int64_t *order,
                               const int64_t *start, const int *disp, const uint64_t *need,
                               int64_t count, vk_live *live)
{
    int nlive = 0;
    uint64_t ring = 0;
    ex_status st = EX_OK;
    for (int64_t k = 0, r = 0; st == EX_OK && (k < count || nlive > 0); r++) {
        st = live_next(e, nodes, live, &nlive);
        for (; st == EX_OK && k < count && start[order[k]] <= r; k++) {
            int64_t i = order[k];
            int whole = disp[i] > VK_PASSES_MAX;
            uint64_t at = 0;
            st = scratch_place(e, nodes, live, &nlive, need[i], &ring, &at);
            if (st == EX_OK)
                st = record_pass(e, nodes, i, 0, whole, at);
            if (!whole && disp[i] > 1)
                live[nlive++] = (vk_live){i, 1, disp[i], at, need[i]};
        }
    }
    return st;
}

/* Records the nodes (record_rounds), each under its own index. */
static ex_status record(vk_backend *b, const ex_node_exec *nodes, int64_t count,
                        const uint64_t *need, const int *disp, VkCommandBuffer cmd)
{
    size_t n = (size_t)count + 1;
    int64_t *order = malloc(n * sizeof *order), *start = malloc(n * sizeof *start);
    int *passes = malloc(n * sizeof *passes);
    vk_live *live = malloc(n * sizeof *live);
    ex_status st = EX_OK;
    if (!order || !start || !passes || !live) {
        snprintf(b->msg, sizeof b->msg, "vulkan: out of host memory recording %lld nodes",
                 (long long)count);
        st = EX_ERR_NOMEM;
    }
    for (int64_t i = 0; st == EX_OK && i < count; i++)
        passes[i] = disp[i] > VK_PASSES_MAX || disp[i] < 1 ? 1 : disp[i];
    if (st == EX_OK)
        st = vkx_order(b, nodes, count, passes, order, start);
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    if (st == EX_OK)
        st = vk_check(b, vkBeginCommandBuffer(cmd, &bi), "vkBeginCommandBuffer");
    if (st == EX_OK) {
        b->counts.dispatches = b->counts.barriers = b->counts.inexact = 0;
        status_begin(b, cmd);
        b->nreads = b->nwrites = 0;
        vk_exec e = exec_of(b, cmd);
        st = record_rounds(&e, nodes, order, start, disp, need, count, live);
        status_end(b, cmd);
        ex_status end = vk_check(b, vkEndCommandBuffer(cmd), "vkEndCommandBuffer");
        st = st != EX_OK ? st : end;
    }
    free(order);
    free(start);
    free(passes);
    free(live);
    return st;
}

/* The recording's command buffer, recorded again when the generation moved since. The
 * nodes are checked (the dry pass) before each recording. */
static ex_status cmd_of(vk_backend *b, ex_recording *r)
{
    if (r->cmd && r->gen == b->gen)
        return EX_OK;
    double t0 = ex__clock_ms();
    int64_t count = r->count;
    uint64_t *need = malloc(((size_t)count + 1) * sizeof *need);
    int *disp = malloc(((size_t)count + 1) * sizeof *disp);
    ex_status st = EX_OK;
    if (!need || !disp) {
        snprintf(b->msg, sizeof b->msg, "vulkan: out of host memory recording %lld nodes",
                 (long long)count);
        st = EX_ERR_NOMEM;
    }
    if (st == EX_OK)
        st = dry_pass(b, r->nodes, count, need, disp);
    if (st == EX_OK)
        st = vkx_pipelines_make(b);
    if (st == EX_OK && b->nsets > VK_SETS_MAX)
        vkx_invalidate(b); /* a bound on the sets kept: nothing is in flight */
    if (st == EX_OK && !r->cmd) {
        VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                          .commandPool = b->pool,
                                          .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                          .commandBufferCount = 1};
        st = vk_check(b, vkAllocateCommandBuffers(b->dev, &ai, &r->cmd), "command buffer");
        if (st == EX_OK)
            vk_count_object(b, 1);
        else
            r->cmd = VK_NULL_HANDLE;
    }
    r->gen = 0; /* none: a failed recording is no recording */
    if (st == EX_OK && (st = record(b, r->nodes, count, need, disp, r->cmd)) == EX_OK)
        r->gen = b->gen;
    free(need);
    free(disp);
    b->counts.record_ms = ex__clock_ms() - t0; /* checks and pipelines included */
    return st;
}

/* Turns what a shader reported into a status and a message. */
static ex_status status_read(vk_backend *b, const ex_node_exec *nodes, int64_t count)
{
    const uint32_t *s = NULL; /* the report of the earliest node */
    for (int k = 0; k < VK_STATUS_SLOTS; k++) {
        const uint32_t *w = b->status_map + k * VK_STATUS_WORDS;
        if (w[0] != VK_STATUS_OK && (!s || w[1] < s[1]))
            s = w;
    }
    if (!s)
        return EX_OK;
    const ex_node_exec *n = s[1] < (uint64_t)count ? &nodes[s[1]] : NULL;
    const char *op = n ? ex_op_name(n->op) : "?";
    if (s[0] == VK_STATUS_LABEL && n) {
        long long k = n->src[0].ndim > 0 ? (long long)n->src[0].ne[n->src[0].ndim - 1] : 0;
        snprintf(b->msg, sizeof b->msg, "%s: label %d of row %u is outside [0, %lld)", op,
                 (int32_t)s[3], s[2], k);
        return EX_ERR_ARG;
    }
    if (s[0] == VK_STATUS_SHAPE) {
        snprintf(b->msg, sizeof b->msg, "%s: candidate %u is not f32 of %s's shape", op, s[2],
                 n && n->op == EX_OP_MIXED_SUM ? "dst" : "dy");
        return EX_ERR_SHAPE;
    }
    snprintf(b->msg, sizeof b->msg, "vulkan: node %u reported status %u", s[1], s[0]);
    return EX_ERR_DEVICE;
}

/* ---- profiling: every node between two timestamps and full barriers ---- */

static ex_status queries_reserve(vk_backend *b, uint32_t n)
{
    if (n <= b->nqueries)
        return EX_OK;
    if (b->queries) {
        vkDestroyQueryPool(b->dev, b->queries, NULL);
        vk_count_object(b, -1);
    }
    b->queries = VK_NULL_HANDLE;
    b->nqueries = 0;
    VkQueryPoolCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                                .queryType = VK_QUERY_TYPE_TIMESTAMP,
                                .queryCount = n};
    ex_status st = vk_check(b, vkCreateQueryPool(b->dev, &qi, NULL, &b->queries), "query pool");
    if (st == EX_OK) {
        b->nqueries = n;
        vk_count_object(b, 1);
    }
    return st;
}

/* Copies each gated node's gate element, as it is when the node runs, into the staging
 * buffer so a node the device skipped reports -1 like on the other backends. */
static void gate_snapshot(vk_backend *b, vk_exec *e, const ex_node_exec *n, int64_t i)
{
    if (!n->gate || (uint64_t)(i + 1) * 4 > VK_STAGE_BYTES)
        return;
    const vk_buffer *v = (const vk_buffer *)n->gate->buf;
    VkBufferCopy r = {v->offset + n->gate->offset + 4 * (uint64_t)ex_td_at(n->gate, n->gate_index),
                      (uint64_t)i * 4, 4};
    vkCmdCopyBuffer(e->cmd, b->blocks[v->block].buf, b->stage, 1, &r);
}

/* With timestamps: one command buffer, a pair of queries per node. Without (the
 * portable profile): one submission per node, timed on the host. */
static ex_status run_profiled(vk_backend *b, const ex_node_exec *nodes, int64_t count,
                              double *node_ms)
{
    ex_status st = vkm_submit_wait(b, NULL); /* pending uploads leave the staging buffer */
    if (st == EX_OK)
        st = dry_pass(b, nodes, count, NULL, NULL);
    if (st == EX_OK)
        st = vkx_pipelines_make(b);
    int ts = b->feat.timestamps;
    if (st == EX_OK && ts)
        st = queries_reserve(b, (uint32_t)(2 * count));
    if (st != EX_OK)
        return st;
    uint64_t snap = (uint64_t)count * 4 < VK_STAGE_BYTES ? (uint64_t)count * 4 : VK_STAGE_BYTES;
    memset(b->stage_map, 0xFF, (size_t)snap);
    double t0 = ex__clock_ms();
    for (int64_t i = 0; i < count && st == EX_OK;) {
        int64_t end = ts ? count : i + 1;
        st = vkm_begin(b);
        if (st != EX_OK)
            break;
        vk_exec e = exec_of(b, b->xfer);
        if (i == 0)
            status_begin(b, b->xfer);
        if (ts)
            vkCmdResetQueryPool(b->xfer, b->queries, 0, (uint32_t)(2 * count));
        for (int64_t k = i; k < end && st == EX_OK; k++) {
            vk_full_barrier(b->xfer);
            gate_snapshot(b, &e, &nodes[k], k);
            if (ts)
                vkCmdWriteTimestamp(b->xfer, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, b->queries,
                                    (uint32_t)(2 * k));
            b->nreads = b->nwrites = 0;
            st = run_one(&e, &nodes[k], k, 0);
            if (ts)
                vkCmdWriteTimestamp(b->xfer, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, b->queries,
                                    (uint32_t)(2 * k + 1));
        }
        if (end == count)
            status_end(b, b->xfer);
        ex_status es = vk_check(b, vkEndCommandBuffer(b->xfer), "vkEndCommandBuffer");
        if (st == EX_OK)
            st = es;
        if (st == EX_OK)
            st = vkm_submit_wait(b, b->xfer);
        double t1 = ex__clock_ms();
        if (!ts)
            node_ms[i] = t1 - t0;
        t0 = t1;
        i = end;
    }
    if (st == EX_OK && ts) {
        uint64_t *q = malloc((size_t)count * 2 * sizeof *q);
        if (!q)
            return EX_ERR_NOMEM;
        st = vk_check(b,
                      vkGetQueryPoolResults(b->dev, b->queries, 0, (uint32_t)(2 * count),
                                            (size_t)count * 2 * sizeof *q, q, sizeof *q,
                                            VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
                      "timestamps");
        for (int64_t i = 0; st == EX_OK && i < count; i++)
            node_ms[i] =
                (double)((q[2 * i + 1] - q[2 * i]) & b->feat.ts_mask) * b->feat.ts_period_ns * 1e-6;
        free(q);
    }
    const float *gates = (const float *)b->stage_map;
    for (int64_t i = 0; st == EX_OK && i < count && (i + 1) * 4 <= (int64_t)VK_STAGE_BYTES; i++)
        if (nodes[i].gate && gates[i] == 0.0f)
            node_ms[i] = -1.0;
    return st == EX_OK ? status_read(b, nodes, count) : st;
}

ex_status vkx_compute(vk_backend *b, const ex_node_exec *nodes, int64_t count, double *node_ms)
{
    if (count <= 0)
        return EX_OK;
    if (node_ms)
        return run_profiled(b, nodes, count, node_ms);
    ex_recording once = {nodes, count, VK_NULL_HANDLE, 0};
    ex_status st = vkx_replay(b, &once);
    vkx_forget(b, &once);
    return st;
}

ex_status vkx_replay(vk_backend *b, ex_recording *r)
{
    if (r->count <= 0)
        return EX_OK;
    ex_status st = cmd_of(b, r);
    if (st == EX_OK)
        st = vkm_submit_wait(b, r->cmd);
    return st == EX_OK ? status_read(b, r->nodes, r->count) : st;
}

void vkx_forget(vk_backend *b, ex_recording *r)
{
    if (r->cmd) { /* every submission was waited for */
        vkFreeCommandBuffers(b->dev, b->pool, 1, &r->cmd);
        vk_count_object(b, -1);
        r->cmd = VK_NULL_HANDLE;
    }
}

/* ---- setup ---- */

ex_status vkx_init(vk_backend *b)
{
    b->gen = 1; /* a recording's 0 names none */
    VkDescriptorSetLayoutBinding lb[2 * VK_BINDINGS];
    for (int i = 0; i < 2 * VK_BINDINGS; i++)
        lb[i] = (VkDescriptorSetLayoutBinding){(uint32_t)i,
                                               i < VK_BINDINGS ? VK_DESCRIPTOR_TYPE_STORAGE_BUFFER
                                                               : VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER,
                                               1, VK_SHADER_STAGE_COMPUTE_BIT, NULL};
    VkDescriptorSetLayoutCreateInfo li = {.sType =
                                              VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                          .bindingCount = 2 * VK_BINDINGS,
                                          .pBindings = lb};
    ex_status st =
        vk_check(b, vkCreateDescriptorSetLayout(b->dev, &li, NULL, &b->set_layout), "set layout");
    VkPushConstantRange pr = {VK_SHADER_STAGE_COMPUTE_BIT, 0, VK_PC_BYTES};
    VkPipelineLayoutCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                     .setLayoutCount = 1,
                                     .pSetLayouts = &b->set_layout,
                                     .pushConstantRangeCount = 1,
                                     .pPushConstantRanges = &pr};
    if (st == EX_OK)
        st = vk_check(b, vkCreatePipelineLayout(b->dev, &pi, NULL, &b->layout), "layout");
    if (st == EX_OK)
        vk_count_object(b, 2);
    return st;
}

void vkx_destroy(vk_backend *b)
{
    vkx_invalidate(b);
    vkx_sets_destroy(b);
    vkx_pipelines_destroy(b);
    if (b->queries)
        vkDestroyQueryPool(b->dev, b->queries, NULL);
    if (b->layout)
        vkDestroyPipelineLayout(b->dev, b->layout, NULL);
    if (b->set_layout)
        vkDestroyDescriptorSetLayout(b->dev, b->set_layout, NULL);
    free(b->reads);
    free(b->writes);
}
