/* Running a node list: pipelines (created on first use, one per shader and variant),
 * descriptor sets (one per tuple of bound blocks, kept), the hazard tracker that places
 * a barrier only where a node touches what an unsynchronized earlier node wrote (or
 * writes what it read), and the step cache: a node list is recorded into a command
 * buffer once and re-submitted while the list and the memory it names are unchanged.
 *
 * The cache is keyed by the list's address and length and checked against a
 * fingerprint of every node (op, parameters, shapes, strides, blocks and offsets) and
 * against the memory epoch, which moves when a block is freed, so a freed plan whose
 * memory is reused never replays a stale command buffer. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vulkan/vk_backend.h"

/* Bytes of status words at the start of the internal buffer; scratch follows. */
#define VK_STATUS_BYTES VK_ALIGN

ex_status vk_fail(vk_exec *e, ex_status st, const char *fmt, ...)
{
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(e->msg, e->msg_len, "vulkan: node %lld (%s): %s", (long long)e->index,
             e->n ? ex_op_name(e->n->op) : "?", what);
    return st;
}

/* ---- bindings ---- */

/* The binding of block, adding it when there is room; -1 when there is none. */
static int bind_block(vk_exec *e, int block)
{
    for (int i = 0; i < e->nblocks; i++)
        if (e->blocks[i] == block)
            return i;
    if (e->nblocks == VK_BINDINGS)
        return -1;
    e->blocks[e->nblocks] = block;
    return e->nblocks++;
}

static uint64_t elem_of(const ex_tdesc *t)
{
    return (((const vk_buffer *)t->buf)->offset + t->offset) / 4;
}

uint32_t vk_ref(vk_exec *e, const ex_tdesc *t)
{
    if (!t || !t->buf)
        return VK_NOREF;
    int k = bind_block(e, ((const vk_buffer *)t->buf)->block);
    uint64_t el = elem_of(t);
    if (k < 0 || el > VK_REF_MAX_ELEM) {
        e->ref_error = 1;
        return VK_NOREF;
    }
    return ((uint32_t)k << 30) | (uint32_t)el;
}

void vk_bind_reset(vk_exec *e)
{
    memcpy(e->prev_blocks, e->blocks, sizeof e->blocks);
    e->nblocks = 0;
    if (e->n && e->n->gate)
        bind_block(e, ((const vk_buffer *)e->n->gate->buf)->block); /* binding 0 again */
}

uint32_t vk_ref_rebind(vk_exec *e, uint32_t ref)
{
    if (ref == VK_NOREF)
        return ref;
    int k = bind_block(e, e->prev_blocks[ref >> 30]);
    if (k < 0) {
        e->ref_error = 1;
        return VK_NOREF;
    }
    return ((uint32_t)k << 30) | (ref & VK_REF_MAX_ELEM);
}

/* Binds t's block if a binding is free; a node with more blocks than bindings only
 * fails if its family asks for a reference it cannot have. */
static ex_status bind_tensor(vk_exec *e, const ex_tdesc *t)
{
    if (!t || !t->buf)
        return EX_OK;
    const vk_buffer *v = (const vk_buffer *)t->buf;
    if ((v->offset + t->offset) & 3)
        return vk_fail(e, EX_ERR_ARG, "operand at byte %llu is not 4-byte aligned",
                       (unsigned long long)t->offset);
    bind_block(e, v->block);
    return EX_OK;
}

static ex_status internal_ref(vk_exec *e, uint64_t byte, uint32_t *ref)
{
    vk_backend *b = e->b;
    int k = bind_block(e, b->internal->block);
    if (k < 0)
        return vk_fail(e, EX_ERR_UNSUPPORTED,
                       "operands and scratch lie in more than %d memory blocks", VK_BINDINGS);
    *ref = ((uint32_t)k << 30) | (uint32_t)((b->internal->offset + byte) / 4);
    return EX_OK;
}

/* ---- the hazard tracker ---- */

static int overlaps(const vk_access *list, int64_t n, const vk_access *a)
{
    for (int64_t i = 0; i < n; i++)
        if (list[i].block == a->block && list[i].lo < a->hi && a->lo < list[i].hi)
            return 1;
    return 0;
}

static int push_access(vk_access **list, int64_t *n, int64_t *cap, vk_access a)
{
    if (*n == *cap) {
        int64_t c = *cap * 2 + 64;
        vk_access *l = realloc(*list, (size_t)c * sizeof *l);
        if (!l)
            return 0;
        *list = l;
        *cap = c;
    }
    (*list)[(*n)++] = a;
    return 1;
}

static vk_access access_of(const ex_tdesc *t)
{
    const vk_buffer *v = (const vk_buffer *)t->buf;
    uint64_t span = 1;
    for (int d = 0; d < t->ndim; d++)
        if (t->ne[d] > 0)
            span += (uint64_t)(t->ne[d] - 1) * (uint64_t)(t->st[d] < 0 ? -t->st[d] : t->st[d]);
    uint64_t lo = v->offset + t->offset;
    return (vk_access){v->block, lo, lo + span * 4};
}

static void barrier_now(vk_exec *e)
{
    vk_backend *b = e->b;
    if (e->cmd)
        vk_full_barrier(e->cmd);
    b->nreads = b->nwrites = 0;
}

void vk_barrier(vk_exec *e)
{
    barrier_now(e);
}

/* Ops that also write some of their sources (optimizer states, running statistics). */
static int writes_sources(ex_op op)
{
    return op == EX_OP_SGD || op == EX_OP_ADAM || op == EX_OP_BN_STATS;
}

/* Before a node: a barrier when it reads or writes what is written and unsynchronized,
 * or writes what is read and unsynchronized. */
static void node_hazards(vk_exec *e, const ex_node_exec *n)
{
    vk_backend *b = e->b;
    int need = 0, wsrc = writes_sources(n->op);
    vk_access d = access_of(&n->dst);
    need = overlaps(b->writes, b->nwrites, &d) || overlaps(b->reads, b->nreads, &d);
    for (int i = 0; i < n->nsrc && !need; i++) {
        if (!n->src[i].buf)
            continue;
        vk_access a = access_of(&n->src[i]);
        need = overlaps(b->writes, b->nwrites, &a) || (wsrc && overlaps(b->reads, b->nreads, &a));
    }
    if (!need && n->gate) {
        vk_access g = access_of(n->gate);
        need = overlaps(b->writes, b->nwrites, &g);
    }
    if (need)
        barrier_now(e);
}

static ex_status node_done(vk_exec *e, const ex_node_exec *n)
{
    vk_backend *b = e->b;
    int ok = push_access(&b->writes, &b->nwrites, &b->capwrites, access_of(&n->dst));
    for (int i = 0; i < n->nsrc && ok; i++)
        if (n->src[i].buf)
            ok = writes_sources(n->op)
                     ? push_access(&b->writes, &b->nwrites, &b->capwrites, access_of(&n->src[i]))
                     : push_access(&b->reads, &b->nreads, &b->capreads, access_of(&n->src[i]));
    if (ok && n->gate)
        ok = push_access(&b->reads, &b->nreads, &b->capreads, access_of(n->gate));
    if (ok && e->scratch_at) { /* a barrier inside the node may have dropped it */
        uint64_t lo = b->internal->offset + VK_STATUS_BYTES;
        ok = push_access(&b->writes, &b->nwrites, &b->capwrites,
                         (vk_access){b->internal->block, lo, lo + e->scratch_at});
    }
    return ok ? EX_OK : vk_fail(e, EX_ERR_NOMEM, "out of host memory");
}

ex_status vk_scratch(vk_exec *e, uint64_t bytes, uint32_t *ref)
{
    vk_backend *b = e->b;
    uint64_t at = e->scratch_at;
    e->scratch_at = at + ((bytes + VK_ALIGN - 1) & ~(uint64_t)(VK_ALIGN - 1));
    if (e->dry) {
        if (e->scratch_at > e->need)
            e->need = e->scratch_at;
        *ref = 0;
        return internal_ref(e, 0, ref); /* checks that a binding is left for it */
    }
    if (e->scratch_at > b->scratch_bytes)
        return vk_fail(e, EX_ERR_DEVICE, "scratch of %llu bytes was not reserved",
                       (unsigned long long)e->scratch_at);
    ex_status st = internal_ref(e, VK_STATUS_BYTES + at, ref);
    if (st != EX_OK)
        return st;
    vk_access a = {b->internal->block, b->internal->offset + VK_STATUS_BYTES + at, 0};
    a.hi = a.lo + bytes;
    if (overlaps(b->writes, b->nwrites, &a) || overlaps(b->reads, b->nreads, &a))
        barrier_now(e);
    return push_access(&b->writes, &b->nwrites, &b->capwrites, a)
               ? EX_OK
               : vk_fail(e, EX_ERR_NOMEM, "out of host memory");
}

ex_status vk_status_ref(vk_exec *e, uint32_t *ref)
{
    return internal_ref(e, 0, ref);
}

/* ---- pipelines and descriptor sets ---- */

static ex_status pipeline(vk_backend *b, vk_shader_id sh, int32_t variant, VkPipeline *out)
{
    for (int i = 0; i < b->npipes; i++)
        if (b->pipes[i].shader == sh && b->pipes[i].variant == variant) {
            *out = b->pipes[i].pipe;
            return EX_OK;
        }
    if (b->npipes == VK_PIPES) {
        snprintf(b->msg, sizeof b->msg, "vulkan: more than %d pipelines", VK_PIPES);
        return EX_ERR_NOMEM;
    }
    ex_status st = EX_OK;
    if (!b->modules[sh]) {
        VkShaderModuleCreateInfo mi = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                       .codeSize = vk_shader_table[sh].bytes,
                                       .pCode = vk_shader_table[sh].code};
        st = vk_check(b, vkCreateShaderModule(b->dev, &mi, NULL, &b->modules[sh]), "shader");
        if (st != EX_OK)
            return st;
    }
    VkSpecializationMapEntry me = {0, 0, sizeof(int32_t)};
    VkSpecializationInfo si = {1, &me, sizeof variant, &variant};
    VkComputePipelineCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                  .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                  .module = b->modules[sh],
                  .pName = "main",
                  .pSpecializationInfo = &si},
        .layout = b->layout};
    VkPipeline p;
    st = vk_check(b, vkCreateComputePipelines(b->dev, VK_NULL_HANDLE, 1, &ci, NULL, &p),
                  vk_shader_table[sh].name);
    if (st != EX_OK)
        return st;
    b->pipes[b->npipes++] = (vk_pipe){sh, variant, p};
    *out = p;
    return EX_OK;
}

static ex_status descriptor_set(vk_backend *b, const int blocks[VK_BINDINGS], VkDescriptorSet *out)
{
    for (int i = 0; i < b->nsets; i++)
        if (!memcmp(b->sets[i].blocks, blocks, sizeof b->sets[i].blocks)) {
            *out = b->sets[i].set;
            return EX_OK;
        }
    if (b->nsets == VK_SETS) {
        snprintf(b->msg, sizeof b->msg, "vulkan: one step binds more than %d block tuples",
                 VK_SETS);
        return EX_ERR_NOMEM;
    }
    VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                      .descriptorPool = b->dpool,
                                      .descriptorSetCount = 1,
                                      .pSetLayouts = &b->set_layout};
    VkDescriptorSet set;
    ex_status st = vk_check(b, vkAllocateDescriptorSets(b->dev, &ai, &set), "descriptor set");
    if (st != EX_OK)
        return st;
    VkDescriptorBufferInfo bi[VK_BINDINGS];
    VkWriteDescriptorSet w[VK_BINDINGS];
    for (int i = 0; i < VK_BINDINGS; i++) {
        const vk_block *k = &b->blocks[blocks[i]];
        bi[i] = (VkDescriptorBufferInfo){k->buf, 0, k->bytes};
        w[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                      .dstSet = set,
                                      .dstBinding = (uint32_t)i,
                                      .descriptorCount = 1,
                                      .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                      .pBufferInfo = &bi[i]};
    }
    vkUpdateDescriptorSets(b->dev, VK_BINDINGS, w, 0, NULL);
    vk_set *s = &b->sets[b->nsets++];
    memcpy(s->blocks, blocks, sizeof s->blocks);
    s->set = set;
    *out = set;
    return EX_OK;
}

ex_status vk_dispatch(vk_exec *e, vk_shader_id shader, int32_t variant, const void *pc,
                      size_t pc_bytes, uint32_t gx, uint32_t gy, uint32_t gz)
{
    vk_backend *b = e->b;
    if (pc_bytes > VK_PC_BYTES || pc_bytes < 4 || (unsigned)shader >= VK_SH_COUNT)
        return vk_fail(e, EX_ERR_DEVICE, "bad dispatch of shader %d (%zu push bytes)", (int)shader,
                       pc_bytes);
    if (e->ref_error)
        return vk_fail(e, EX_ERR_UNSUPPORTED,
                       "operands lie in more than %d memory blocks (the bindings a shader has)",
                       VK_BINDINGS);
    if (e->dry || gx == 0 || gy == 0 || gz == 0)
        return EX_OK;
    VkPipeline p = VK_NULL_HANDLE;
    ex_status st = pipeline(b, shader, variant, &p);
    int blocks[VK_BINDINGS];
    /* every binding needs a valid buffer: the unused ones repeat the first block */
    int fill = e->nblocks > 0 ? e->blocks[0] : b->internal->block;
    for (int i = 0; i < VK_BINDINGS; i++)
        blocks[i] = i < e->nblocks ? e->blocks[i] : fill;
    VkDescriptorSet set = VK_NULL_HANDLE;
    if (st == EX_OK)
        st = descriptor_set(b, blocks, &set);
    if (st != EX_OK)
        return vk_fail(e, st, "%s", b->msg);
    if (p != e->bound) {
        vkCmdBindPipeline(e->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p);
        e->bound = p;
    }
    if (set != e->bound_set) {
        vkCmdBindDescriptorSets(e->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, b->layout, 0, 1, &set, 0,
                                NULL);
        e->bound_set = set;
    }
    uint32_t words[VK_PC_BYTES / 4];
    memset(words, 0, sizeof words);
    memcpy(words, pc, pc_bytes);
    words[0] = e->gate;
    vkCmdPushConstants(e->cmd, b->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, VK_PC_BYTES, words);
    vkCmdDispatch(e->cmd, gx, gy, gz);
    return EX_OK;
}

/* ---- one node ---- */

static ex_status run_one(vk_exec *e, const ex_node_exec *n, int64_t i)
{
    e->n = n;
    e->index = i;
    e->nblocks = 0;
    e->scratch_at = 0;
    e->gate = VK_NOREF;
    e->ref_error = 0;
    ex_status st = EX_OK;
    if (n->gate) {
        const ex_tdesc *g = n->gate;
        if (!ex_td_valid(g, EX_F32) || n->gate_index < 0 || n->gate_index >= ex_td_numel(g))
            return vk_fail(e, EX_ERR_ARG, "gate must be f32 with index %lld inside it",
                           (long long)n->gate_index);
        st = bind_tensor(e, g);
        if (st == EX_OK)
            e->gate = vk_ref(e, g) + (uint32_t)ex_td_at(g, n->gate_index);
    }
    if (st == EX_OK)
        st = bind_tensor(e, &n->dst);
    for (int k = 0; k < n->nsrc && st == EX_OK; k++)
        st = bind_tensor(e, &n->src[k]);
    if (st != EX_OK)
        return st;
    if (!e->dry)
        node_hazards(e, n);
    st = vk_run_node(e, n);
    if (st == EX_OK && !e->dry)
        st = node_done(e, n);
    return st;
}

static vk_exec exec_of(vk_backend *b, VkCommandBuffer cmd)
{
    vk_exec e;
    memset(&e, 0, sizeof e);
    e.b = b;
    e.cmd = cmd;
    e.dry = cmd == VK_NULL_HANDLE;
    e.msg = b->msg;
    e.msg_len = sizeof b->msg;
    return e;
}

/* ---- step cache ---- */

void vkx_invalidate(vk_backend *b)
{
    for (int i = 0; i < VK_STEPS; i++) {
        if (b->steps[i].cmd)
            vkFreeCommandBuffers(b->dev, b->pool, 1, &b->steps[i].cmd);
        memset(&b->steps[i], 0, sizeof b->steps[i]);
    }
    if (b->dpool)
        vkResetDescriptorPool(b->dev, b->dpool, 0);
    b->nsets = 0;
}

/* Where a tensor lies, for the fingerprint of a recorded step: its block and offset. */
static uint64_t vk_where(const ex_tdesc *t)
{
    const vk_buffer *v = (const vk_buffer *)t->buf;
    return ex_td_mix((uint64_t)(uintptr_t)v->block + 1, v->offset + t->offset);
}

/* Checks every node and makes the scratch large enough; a new scratch drops what was
 * recorded against the old one. */
static ex_status dry_pass(vk_backend *b, const ex_node_exec *nodes, int64_t count)
{
    vk_exec e = exec_of(b, VK_NULL_HANDLE);
    for (int64_t i = 0; i < count; i++) {
        ex_status st = run_one(&e, &nodes[i], i);
        if (st != EX_OK)
            return st;
    }
    if (e.need <= b->scratch_bytes)
        return EX_OK;
    vkx_invalidate(b);
    uint64_t bytes = e.need + e.need / 4;
    vk_buffer *nb = NULL;
    ex_status st = vkm_alloc(b, VK_STATUS_BYTES + bytes, &nb);
    if (st != EX_OK)
        return st;
    vkm_free(b, b->internal);
    b->internal = nb;
    b->scratch_bytes = bytes;
    return EX_OK;
}

static VkBuffer internal_buf(vk_backend *b)
{
    return b->blocks[b->internal->block].buf;
}

/* Zeroes the status words before the nodes, copies them to the host after. */
static void status_begin(vk_backend *b, VkCommandBuffer cmd)
{
    vk_full_barrier(cmd);
    vkCmdFillBuffer(cmd, internal_buf(b), b->internal->offset, VK_STATUS_WORDS * 4, 0);
    vk_full_barrier(cmd);
}

static void status_end(vk_backend *b, VkCommandBuffer cmd)
{
    vk_full_barrier(cmd);
    VkBufferCopy r = {b->internal->offset, 0, VK_STATUS_WORDS * 4};
    vkCmdCopyBuffer(cmd, internal_buf(b), b->status_host, 1, &r);
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
                          .dstAccessMask = VK_ACCESS_HOST_READ_BIT};
    vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb,
                         0, NULL, 0, NULL);
}

static ex_status record(vk_backend *b, const ex_node_exec *nodes, int64_t count,
                        VkCommandBuffer cmd)
{
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    ex_status st = vk_check(b, vkBeginCommandBuffer(cmd, &bi), "vkBeginCommandBuffer");
    if (st != EX_OK)
        return st;
    status_begin(b, cmd);
    b->nreads = b->nwrites = 0;
    vk_exec e = exec_of(b, cmd);
    for (int64_t i = 0; i < count && st == EX_OK; i++)
        st = run_one(&e, &nodes[i], i);
    status_end(b, cmd);
    ex_status end = vk_check(b, vkEndCommandBuffer(cmd), "vkEndCommandBuffer");
    return st != EX_OK ? st : end;
}

static ex_status step_for(vk_backend *b, const ex_node_exec *nodes, int64_t count,
                          VkCommandBuffer *out)
{
    uint64_t fp = ex_td_fingerprint(nodes, count, vk_where);
    vk_step *lru = &b->steps[0];
    for (int i = 0; i < VK_STEPS; i++) {
        vk_step *s = &b->steps[i];
        if (s->used && s->nodes == nodes && s->count == count && s->fingerprint == fp &&
            s->epoch == b->epoch) {
            s->used = ++b->tick;
            *out = s->cmd;
            return EX_OK;
        }
        if (s->used < lru->used)
            lru = s;
    }
    ex_status st = dry_pass(b, nodes, count);
    if (st != EX_OK)
        return st;
    if (b->nsets > VK_SETS / 2)
        vkx_invalidate(b); /* make room: nothing is in flight */
    lru = &b->steps[0];
    for (int i = 1; i < VK_STEPS; i++)
        if (b->steps[i].used < lru->used)
            lru = &b->steps[i];
    if (!lru->cmd) {
        VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                          .commandPool = b->pool,
                                          .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                          .commandBufferCount = 1};
        st = vk_check(b, vkAllocateCommandBuffers(b->dev, &ai, &lru->cmd), "command buffer");
        if (st != EX_OK) {
            lru->cmd = VK_NULL_HANDLE;
            return st;
        }
    }
    lru->used = 0;
    st = record(b, nodes, count, lru->cmd);
    if (st != EX_OK)
        return st;
    lru->nodes = nodes;
    lru->count = count;
    lru->fingerprint = fp;
    lru->epoch = b->epoch;
    lru->used = ++b->tick;
    *out = lru->cmd;
    return EX_OK;
}

/* Turns what a shader reported into a status and a message. */
static ex_status status_read(vk_backend *b, const ex_node_exec *nodes, int64_t count)
{
    const uint32_t *s = b->status_map;
    if (s[0] == VK_STATUS_OK)
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

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

static ex_status queries_reserve(vk_backend *b, uint32_t n)
{
    if (n <= b->nqueries)
        return EX_OK;
    if (b->queries)
        vkDestroyQueryPool(b->dev, b->queries, NULL);
    b->queries = VK_NULL_HANDLE;
    b->nqueries = 0;
    VkQueryPoolCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                                .queryType = VK_QUERY_TYPE_TIMESTAMP,
                                .queryCount = n};
    ex_status st = vk_check(b, vkCreateQueryPool(b->dev, &qi, NULL, &b->queries), "query pool");
    if (st == EX_OK)
        b->nqueries = n;
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
        st = dry_pass(b, nodes, count);
    int ts = b->feat.timestamps;
    if (st == EX_OK && ts)
        st = queries_reserve(b, (uint32_t)(2 * count));
    if (st != EX_OK)
        return st;
    uint64_t snap = (uint64_t)count * 4 < VK_STAGE_BYTES ? (uint64_t)count * 4 : VK_STAGE_BYTES;
    memset(b->stage_map, 0xFF, (size_t)snap);
    double t0 = now_ms();
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
            st = run_one(&e, &nodes[k], k);
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
        double t1 = now_ms();
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
    VkCommandBuffer cmd;
    ex_status st = step_for(b, nodes, count, &cmd);
    if (st == EX_OK)
        st = vkm_submit_wait(b, cmd);
    return st == EX_OK ? status_read(b, nodes, count) : st;
}

/* ---- setup ---- */

ex_status vkx_init(vk_backend *b)
{
    VkDescriptorSetLayoutBinding lb[VK_BINDINGS];
    for (int i = 0; i < VK_BINDINGS; i++)
        lb[i] = (VkDescriptorSetLayoutBinding){(uint32_t)i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1,
                                               VK_SHADER_STAGE_COMPUTE_BIT, NULL};
    VkDescriptorSetLayoutCreateInfo li = {.sType =
                                              VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                          .bindingCount = VK_BINDINGS,
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
    VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, VK_SETS * VK_BINDINGS};
    VkDescriptorPoolCreateInfo dp = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                     .maxSets = VK_SETS,
                                     .poolSizeCount = 1,
                                     .pPoolSizes = &ps};
    if (st == EX_OK)
        st = vk_check(b, vkCreateDescriptorPool(b->dev, &dp, NULL, &b->dpool), "descriptor pool");
    return st;
}

void vkx_destroy(vk_backend *b)
{
    vkx_invalidate(b);
    for (int i = 0; i < b->npipes; i++)
        vkDestroyPipeline(b->dev, b->pipes[i].pipe, NULL);
    for (int i = 0; i < VK_SH_COUNT; i++)
        if (b->modules[i])
            vkDestroyShaderModule(b->dev, b->modules[i], NULL);
    if (b->queries)
        vkDestroyQueryPool(b->dev, b->queries, NULL);
    if (b->dpool)
        vkDestroyDescriptorPool(b->dev, b->dpool, NULL);
    b->dpool = VK_NULL_HANDLE;
    if (b->layout)
        vkDestroyPipelineLayout(b->dev, b->layout, NULL);
    if (b->set_layout)
        vkDestroyDescriptorSetLayout(b->dev, b->set_layout, NULL);
    free(b->reads);
    free(b->writes);
}
