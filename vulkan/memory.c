/* Device memory as a few large blocks: small buffers share blocks of VK_BLOCK_BYTES
 * (first fit, freed ranges merged), a buffer larger than that gets a block of its own.
 * Each block carries one VkBuffer over all of it; a dispatch binds the byte ranges of it
 * that its operands occupy (vulkan/bind.c). Uploads and downloads go through one
 * host-visible staging buffer. Uploads, fills and copies are recorded into a pending command buffer
 * that goes out with the next submission; downloads wait for their fence (a host sync). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vulkan/vk_backend.h"

static ex_status fail(vk_backend *b, ex_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static ex_status fail(vk_backend *b, ex_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->msg, sizeof b->msg, fmt, ap);
    va_end(ap);
    return st;
}

/* The first memory type among allowed with all of want. */
static int find_type(vk_backend *b, uint32_t allowed, VkMemoryPropertyFlags want, uint32_t *type)
{
    VkPhysicalDeviceMemoryProperties mp;
    vkGetPhysicalDeviceMemoryProperties(b->phys, &mp);
    for (uint32_t i = 0; i < mp.memoryTypeCount; i++)
        if ((allowed & (1u << i)) && (mp.memoryTypes[i].propertyFlags & want) == want) {
            *type = i;
            return 1;
        }
    return 0;
}

/* Destroys a buffer and its memory of bytes (either may be absent), counting them. */
static void destroy_buffer(vk_backend *b, VkBuffer *buf, VkDeviceMemory *mem, uint64_t bytes)
{
    if (*buf) {
        vkDestroyBuffer(b->dev, *buf, NULL);
        vk_count_object(b, -1);
    }
    *buf = VK_NULL_HANDLE;
    if (mem && *mem) {
        vkFreeMemory(b->dev, *mem, NULL);
        b->counts.allocations--;
        b->counts.bytes -= bytes;
    }
    if (mem)
        *mem = VK_NULL_HANDLE;
}

/* A buffer and its own memory. */
static ex_status make_buffer(vk_backend *b, uint64_t bytes, int host, VkBuffer *buf,
                             VkDeviceMemory *mem)
{
    VkBufferCreateInfo bi = {
        .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
        .size = bytes,
        .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_UNIFORM_BUFFER_BIT |
                 VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
        .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    ex_status st = vk_check(b, vkCreateBuffer(b->dev, &bi, NULL, buf), "vkCreateBuffer");
    if (st != EX_OK) {
        *buf = VK_NULL_HANDLE;
        return st;
    }
    vk_count_object(b, 1);
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(b->dev, *buf, &req);
    uint32_t type;
    VkMemoryPropertyFlags want =
        host ? VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
             : VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
    if (!find_type(b, req.memoryTypeBits, want, &type) &&
        !(!host && find_type(b, req.memoryTypeBits, 0, &type))) {
        destroy_buffer(b, buf, NULL, 0);
        return fail(b, EX_ERR_UNSUPPORTED, "vulkan: no %s memory type",
                    host ? "host-visible coherent" : "device-local");
    }
    VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                               .allocationSize = req.size,
                               .memoryTypeIndex = type};
    st = vk_check(b, vkAllocateMemory(b->dev, &ai, NULL, mem), "vkAllocateMemory");
    if (st == EX_OK) {
        b->counts.allocations++;
        b->counts.bytes += bytes;
        b->counts.created++;
        st = vk_check(b, vkBindBufferMemory(b->dev, *buf, *mem, 0), "vkBindBufferMemory");
    } else {
        *mem = VK_NULL_HANDLE;
    }
    if (st != EX_OK) {
        destroy_buffer(b, buf, mem, bytes);
        if (st == EX_ERR_NOMEM)
            snprintf(b->msg, sizeof b->msg, "vulkan: out of device memory for %llu bytes",
                     (unsigned long long)bytes);
    }
    return st;
}

/* ---- blocks ---- */

static uint64_t shared_block_bytes(const vk_backend *b)
{
    uint64_t s = VK_BLOCK_BYTES;
    if (b->feat.max_range < s)
        s = b->feat.max_range & ~(uint64_t)(VK_ALIGN - 1);
    if (b->feat.max_alloc < s)
        s = b->feat.max_alloc & ~(uint64_t)(VK_ALIGN - 1);
    return s;
}

static ex_status block_new(vk_backend *b, uint64_t bytes, int dedicated, int *out)
{
    int slot = -1, live = 0;
    for (int i = 0; i < b->nblocks; i++) {
        if (!b->blocks[i].mem && slot < 0)
            slot = i;
        live += b->blocks[i].mem != VK_NULL_HANDLE;
    }
    /* the staging and status allocations count too */
    if ((uint64_t)live + 2 >= b->feat.max_allocs)
        return fail(b, EX_ERR_NOMEM, "vulkan: %d device allocations reached (limit %u)", live,
                    b->feat.max_allocs);
    if (slot < 0) {
        if ((uint32_t)b->nblocks >= b->feat.max_allocs)
            return EX_ERR_NOMEM;
        vk_block *nb = realloc(b->blocks, (size_t)(b->nblocks + 1) * sizeof *nb);
        if (!nb)
            return fail(b, EX_ERR_NOMEM, "vulkan: out of host memory");
        b->blocks = nb;
        slot = b->nblocks++;
    }
    vk_block *k = &b->blocks[slot];
    memset(k, 0, sizeof *k);
    ex_status st = make_buffer(b, bytes, 0, &k->buf, &k->mem);
    if (st != EX_OK)
        return st;
    k->bytes = bytes;
    k->dedicated = dedicated;
    if (!dedicated) {
        k->free = malloc(sizeof *k->free);
        if (!k->free)
            return fail(b, EX_ERR_NOMEM, "vulkan: out of host memory");
        k->free[0] = (vk_range){0, bytes};
        k->nfree = k->capfree = 1;
    }
    *out = slot;
    return EX_OK;
}

static void block_destroy(vk_backend *b, int i)
{
    vk_block *k = &b->blocks[i];
    if (!k->mem)
        return;
    destroy_buffer(b, &k->buf, &k->mem, k->bytes);
    free(k->free);
    memset(k, 0, sizeof *k);
}

/* First fit in a shared block; *at = UINT64_MAX when nothing fits. */
static void take(vk_block *k, uint64_t bytes, uint64_t *at)
{
    *at = UINT64_MAX;
    for (int i = 0; i < k->nfree; i++) {
        if (k->free[i].bytes < bytes)
            continue;
        *at = k->free[i].at;
        k->free[i].at += bytes;
        k->free[i].bytes -= bytes;
        if (k->free[i].bytes == 0) {
            memmove(&k->free[i], &k->free[i + 1], (size_t)(k->nfree - i - 1) * sizeof *k->free);
            k->nfree--;
        }
        return;
    }
}

/* Gives a range back, merging it with its neighbours. */
static int give(vk_block *k, uint64_t at, uint64_t bytes)
{
    int i = 0;
    while (i < k->nfree && k->free[i].at < at)
        i++;
    int left = i > 0 && k->free[i - 1].at + k->free[i - 1].bytes == at;
    int right = i < k->nfree && at + bytes == k->free[i].at;
    if (left && right) {
        k->free[i - 1].bytes += bytes + k->free[i].bytes;
        memmove(&k->free[i], &k->free[i + 1], (size_t)(k->nfree - i - 1) * sizeof *k->free);
        k->nfree--;
    } else if (left) {
        k->free[i - 1].bytes += bytes;
    } else if (right) {
        k->free[i].at = at;
        k->free[i].bytes += bytes;
    } else {
        if (k->nfree == k->capfree) {
            int cap = k->capfree * 2 + 4;
            vk_range *r = realloc(k->free, (size_t)cap * sizeof *r);
            if (!r)
                return 0; /* the range is lost to this block, nothing worse */
            k->free = r;
            k->capfree = cap;
        }
        memmove(&k->free[i + 1], &k->free[i], (size_t)(k->nfree - i) * sizeof *k->free);
        k->free[i] = (vk_range){at, bytes};
        k->nfree++;
    }
    return 1;
}

ex_status vkm_alloc(vk_backend *b, uint64_t bytes, vk_buffer **out)
{
    *out = NULL;
    uint64_t need = (bytes + VK_ALIGN - 1) & ~(uint64_t)(VK_ALIGN - 1);
    if (need == 0)
        need = VK_ALIGN;
    uint64_t limit = b->feat.max_alloc < b->feat.max_range ? b->feat.max_alloc : b->feat.max_range;
    if (need > limit)
        return fail(b, EX_ERR_NOMEM,
                    "vulkan: %llu bytes exceed the largest allocation the device binds (%llu)",
                    (unsigned long long)bytes, (unsigned long long)limit);
    vk_buffer *buf = calloc(1, sizeof *buf);
    if (!buf)
        return fail(b, EX_ERR_NOMEM, "vulkan: out of host memory");
    buf->bytes = bytes;
    ex_status st = EX_OK;
    if (need > shared_block_bytes(b)) {
        st = block_new(b, need, 1, &buf->block);
        buf->offset = 0;
    } else {
        uint64_t at = UINT64_MAX;
        for (int i = 0; i < b->nblocks && at == UINT64_MAX; i++)
            if (b->blocks[i].mem && !b->blocks[i].dedicated) {
                take(&b->blocks[i], need, &at);
                buf->block = i;
            }
        if (at == UINT64_MAX) {
            st = block_new(b, shared_block_bytes(b), 0, &buf->block);
            if (st == EX_OK)
                take(&b->blocks[buf->block], need, &at);
        }
        buf->offset = at;
    }
    if (st != EX_OK) {
        free(buf);
        return st;
    }
    *out = buf;
    return EX_OK;
}

void vkm_free(vk_backend *b, vk_buffer *buf)
{
    if (!buf)
        return;
    if (b->up_open)
        vkm_submit_wait(b, NULL); /* pending uploads may name the range */
    vk_block *k = &b->blocks[buf->block];
    if (k->dedicated) {
        /* recordings and descriptor sets may name the block */
        vkDeviceWaitIdle(b->dev);
        vkx_invalidate(b);
        block_destroy(b, buf->block);
    } else {
        uint64_t need = (buf->bytes + VK_ALIGN - 1) & ~(uint64_t)(VK_ALIGN - 1);
        give(k, buf->offset, need ? need : VK_ALIGN);
    }
    free(buf);
}

/* ---- one-off command buffers ---- */

void vk_full_barrier(VkCommandBuffer cmd)
{
    VkMemoryBarrier mb = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
        .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
        .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_UNIFORM_READ_BIT |
                         VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                         VK_ACCESS_TRANSFER_WRITE_BIT};
    vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                         VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT, 0,
                         1, &mb, 0, NULL, 0, NULL);
}

void vk_compute_barrier(VkCommandBuffer cmd)
{
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT,
                          .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_UNIFORM_READ_BIT |
                                           VK_ACCESS_SHADER_WRITE_BIT};
    vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                         VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
}

/* Makes transfer writes visible to the host before the fence is waited on. */
static void host_barrier(VkCommandBuffer cmd)
{
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
                          .dstAccessMask = VK_ACCESS_HOST_READ_BIT};
    vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb,
                         0, NULL, 0, NULL);
}

ex_status vkm_begin(vk_backend *b)
{
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    ex_status st = vk_check(b, vkBeginCommandBuffer(b->xfer, &bi), "vkBeginCommandBuffer");
    if (st == EX_OK)
        vk_full_barrier(b->xfer);
    return st;
}

ex_status vkm_submit_wait(vk_backend *b, VkCommandBuffer cmd)
{
    VkCommandBuffer cmds[2];
    uint32_t n = 0;
    ex_status st = EX_OK;
    if (b->up_open) {
        b->up_open = 0;
        st = vk_check(b, vkEndCommandBuffer(b->up), "vkEndCommandBuffer");
        cmds[n++] = b->up;
    }
    if (cmd)
        cmds[n++] = cmd;
    if (st != EX_OK || n == 0)
        return st;
    VkSubmitInfo si = {
        .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = n, .pCommandBuffers = cmds};
    st = vk_check(b, vkQueueSubmit(b->queue, 1, &si, b->fence), "vkQueueSubmit");
    if (st != EX_OK)
        return st;
    b->host_syncs++;
    st = vk_check(b, vkWaitForFences(b->dev, 1, &b->fence, VK_TRUE, UINT64_MAX), "vkWaitForFences");
    b->stage_used = 0; /* every upload's data has been copied out */
    ex_status rs = vk_check(b, vkResetFences(b->dev, 1, &b->fence), "vkResetFences");
    return st != EX_OK ? st : rs;
}

static ex_status end_submit(vk_backend *b)
{
    ex_status st = vk_check(b, vkEndCommandBuffer(b->xfer), "vkEndCommandBuffer");
    return st == EX_OK ? vkm_submit_wait(b, b->xfer) : st;
}

/* ---- transfers ---- */

static ex_status check_range(vk_backend *b, ex_buffer *buf, uint64_t off, uint64_t n)
{
    vk_buffer *v = (vk_buffer *)buf;
    if (v && off <= v->bytes && n <= v->bytes - off)
        return EX_OK;
    return fail(b, EX_ERR_ARG, "vulkan: bytes [%llu, +%llu) outside the buffer",
                (unsigned long long)off, (unsigned long long)n);
}

static VkBuffer vkbuf(vk_backend *b, ex_buffer *buf)
{
    return b->blocks[((vk_buffer *)buf)->block].buf;
}

static uint64_t at(ex_buffer *buf, uint64_t off)
{
    return ((vk_buffer *)buf)->offset + off;
}

/* Opens b->up, the pending transfers, and orders the next command after every earlier one
 * (a poison fill, then an upload of the same range). */
static ex_status pending(vk_backend *b)
{
    if (!b->up_open) {
        VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                       .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
        ex_status st = vk_check(b, vkBeginCommandBuffer(b->up, &bi), "vkBeginCommandBuffer");
        if (st != EX_OK)
            return st;
        b->up_open = 1;
    }
    vk_full_barrier(b->up);
    return EX_OK;
}

/* Without waiting: the data goes into the staging buffer and its copy into b->up, which
 * is submitted with the next batch (a step, a download, ...). Only a full staging buffer
 * makes the host wait. */
ex_status vk_upload(void *impl, ex_buffer *buf, uint64_t off, const void *src, uint64_t n)
{
    vk_backend *b = impl;
    ex_status st = check_range(b, buf, off, n);
    for (uint64_t done = 0; st == EX_OK && done < n;) {
        if (b->stage_used >= VK_STAGE_BYTES && (st = vkm_submit_wait(b, NULL)) != EX_OK)
            break;
        uint64_t room = VK_STAGE_BYTES - b->stage_used;
        uint64_t len = n - done < room ? n - done : room;
        if ((st = pending(b)) != EX_OK)
            break;
        memcpy(b->stage_map + b->stage_used, (const char *)src + done, (size_t)len);
        VkBufferCopy r = {b->stage_used, at(buf, off + done), len};
        vkCmdCopyBuffer(b->up, b->stage, vkbuf(b, buf), 1, &r);
        b->stage_used += (len + 15) & ~(uint64_t)15;
        done += len;
    }
    return st;
}

ex_status vk_download(void *impl, ex_buffer *buf, uint64_t off, void *dst, uint64_t n)
{
    vk_backend *b = impl;
    ex_status st = check_range(b, buf, off, n);
    for (uint64_t done = 0; st == EX_OK && done < n;) {
        uint64_t len = n - done < VK_STAGE_BYTES ? n - done : VK_STAGE_BYTES;
        st = vkm_begin(b);
        if (st != EX_OK)
            break;
        VkBufferCopy r = {at(buf, off + done), 0, len};
        vkCmdCopyBuffer(b->xfer, vkbuf(b, buf), b->stage, 1, &r);
        host_barrier(b->xfer);
        st = end_submit(b);
        if (st == EX_OK)
            memcpy((char *)dst + done, b->stage_map, (size_t)len);
        done += len;
    }
    return st;
}

/* Overlapping ranges of one block go through the staging buffer chunk by chunk, walking
 * backwards when dst lies after src, as memmove does. */
ex_status vk_copy(void *impl, ex_buffer *dst, uint64_t doff, ex_buffer *src, uint64_t soff,
                  uint64_t n)
{
    vk_backend *b = impl;
    ex_status st = check_range(b, dst, doff, n);
    if (st == EX_OK)
        st = check_range(b, src, soff, n);
    if (st != EX_OK || n == 0)
        return st;
    uint64_t d = at(dst, doff), s = at(src, soff);
    int same = ((vk_buffer *)dst)->block == ((vk_buffer *)src)->block;
    if (same && d == s)
        return EX_OK;
    if (!same || d + n <= s || s + n <= d) { /* joins the pending transfers */
        st = pending(b);
        if (st != EX_OK)
            return st;
        VkBufferCopy r = {s, d, n};
        vkCmdCopyBuffer(b->up, vkbuf(b, src), vkbuf(b, dst), 1, &r);
        return EX_OK;
    }
    int back = d > s;
    for (uint64_t done = 0; st == EX_OK && done < n;) {
        uint64_t len = n - done < VK_STAGE_BYTES ? n - done : VK_STAGE_BYTES;
        uint64_t pos = back ? n - done - len : done;
        st = vkm_begin(b);
        if (st != EX_OK)
            break;
        VkBufferCopy r1 = {s + pos, 0, len}, r2 = {0, d + pos, len};
        vkCmdCopyBuffer(b->xfer, vkbuf(b, src), b->stage, 1, &r1);
        vk_full_barrier(b->xfer);
        vkCmdCopyBuffer(b->xfer, b->stage, vkbuf(b, dst), 1, &r2);
        st = end_submit(b);
        done += len;
    }
    return st;
}

ex_status vk_fill(void *impl, ex_buffer *buf, uint64_t off, uint64_t n, uint32_t pattern)
{
    vk_backend *b = impl;
    ex_status st = check_range(b, buf, off, n);
    if (st == EX_OK && ((off | n | at(buf, 0)) & 3))
        st = fail(b, EX_ERR_ARG, "vulkan: fill of %llu bytes at %llu is not 4-byte aligned",
                  (unsigned long long)n, (unsigned long long)off);
    if (st != EX_OK || n == 0)
        return st;
    st = pending(b); /* joins the pending transfers */
    if (st != EX_OK)
        return st;
    vkCmdFillBuffer(b->up, vkbuf(b, buf), at(buf, off), n, pattern);
    return EX_OK;
}

/* ---- setup ---- */

ex_status vkm_init(vk_backend *b)
{
    VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                      .commandPool = b->pool,
                                      .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                      .commandBufferCount = 1};
    ex_status ust = vk_check(b, vkAllocateCommandBuffers(b->dev, &ai, &b->up), "command buffer");
    if (ust != EX_OK)
        return ust;
    vk_count_object(b, 1);
    ex_status st = make_buffer(b, VK_STAGE_BYTES, 1, &b->stage, &b->stage_mem);
    void *map = NULL;
    if (st == EX_OK)
        st = vk_check(b, vkMapMemory(b->dev, b->stage_mem, 0, VK_WHOLE_SIZE, 0, &map), "map");
    b->stage_map = map;
    if (st == EX_OK)
        st = make_buffer(b, VK_ALIGN, 1, &b->status_host, &b->status_mem);
    map = NULL;
    if (st == EX_OK)
        st = vk_check(b, vkMapMemory(b->dev, b->status_mem, 0, VK_WHOLE_SIZE, 0, &map), "map");
    b->status_map = map;
    if (st == EX_OK)
        st = vkm_alloc(b, VK_SCRATCH_AT, &b->internal);
    return st;
}

void vkm_destroy(vk_backend *b)
{
    if (b->internal)
        vkm_free(b, b->internal);
    b->internal = NULL;
    for (int i = 0; i < b->nblocks; i++)
        block_destroy(b, i);
    free(b->blocks);
    b->blocks = NULL;
    b->nblocks = 0;
    destroy_buffer(b, &b->stage, &b->stage_mem, VK_STAGE_BYTES);
    destroy_buffer(b, &b->status_host, &b->status_mem, VK_ALIGN);
}
