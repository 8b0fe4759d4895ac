/* What one dispatch binds: references to operands, the bindings behind them, the hazard
 * tracker that places barriers from those bindings, and the descriptor sets.
 *
 * Each operand gets a binding of exactly its bytes (the start aligned down to the
 * device's offset alignment); operands of one block that overlap or touch share one, and
 * only when all four storage bindings are taken does a binding widen over a gap (counted
 * in vk_counts.inexact). What a dispatch writes is bound from storage binding 0 up and
 * runs the shader's SPIR-V with that many writable bindings; what it only reads is bound
 * from binding 3 down, or as a uniform buffer when the family says it is small. So the
 * validation layer's synchronization checks see every dispatch read and write what it
 * really reads and writes, and the tracker decides barriers from the same ranges: a
 * barrier before a dispatch whose bindings overlap what an unsynchronized earlier
 * dispatch wrote, or whose written bindings overlap what one read.
 *
 * Descriptor sets are made while a step is recorded, one per distinct tuple of ranges,
 * found again through a hash table, and kept for every later recording: a step that is
 * re-submitted writes no descriptor. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vulkan/vk_backend.h"

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

/* ---- byte ranges ---- */

/* Shaders read and write whole 32-bit words, so an i8 tensor's range ends on one: the
 * bytes up to it lie in the allocation's padding (allocations are VK_ALIGN bytes apart)
 * or belong to a neighbour, which the tracker then orders against this one. */
static vk_access span_of(const ex_tdesc *t)
{
    const vk_buffer *v = (const vk_buffer *)t->buf;
    uint64_t span = 1;
    for (int d = 0; d < t->ndim; d++)
        if (t->ne[d] > 0)
            span += (uint64_t)(t->ne[d] - 1) * (uint64_t)(t->st[d] < 0 ? -t->st[d] : t->st[d]);
    uint64_t lo = v->offset + t->offset, size = t->dtype == EX_I8 ? 1 : 4;
    return (vk_access){v->block, lo, (lo + span * size + 3) & ~(uint64_t)3};
}

static int overlap(vk_access x, vk_access y)
{
    return x.block == y.block && x.lo < y.hi && y.lo < x.hi;
}

/* Whether the node writes any of bytes a: dst, or a source it updates. */
static int node_writes(const vk_exec *e, vk_access a)
{
    const ex_node_exec *n = e->n;
    if (!n)
        return 0;
    if (n->dst.buf && overlap(a, span_of(&n->dst)))
        return 1;
    uint32_t upd = ex_td_updated_sources(n);
    for (int i = 0; upd && i < n->nsrc && i < 32; i++)
        if (((upd >> i) & 1u) && n->src && n->src[i].buf && overlap(a, span_of(&n->src[i])))
            return 1;
    return 0;
}

/* ---- bindings ---- */

static uint64_t down(uint64_t x, uint32_t align)
{
    return x & ~(uint64_t)(align - 1);
}

static uint64_t max_u64(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

/* unit: the bytes one step of the reference's offset counts (4; 1 for an i8 tensor). */
static uint32_t ref_of(int k, int uniform, const vk_slot *s, uint64_t byte, uint64_t unit,
                       int *error)
{
    uint64_t el = (byte - s->lo) / unit;
    if (el > VK_REF_MAX_ELEM) {
        *error = 1;
        return VK_NOREF;
    }
    return ((uint32_t)k << 30) | (uniform ? VK_REF_UNIFORM : 0u) | (uint32_t)el;
}

/* Bytes a as a uniform buffer: in one of the same block it extends or touches, or a new
 * one; -1 when it does not fit one or none is left. */
static int bind_uniform(vk_exec *e, vk_access a)
{
    uint64_t lo = down(a.lo, e->b->feat.ualign);
    if (a.hi - lo > VK_UBO_BYTES)
        return -1;
    for (int k = 0; k < e->nu; k++) {
        vk_slot *s = &e->uslot[k];
        if (s->block == a.block && s->lo <= a.lo && a.lo <= s->hi &&
            max_u64(s->hi, a.hi) - s->lo <= VK_UBO_BYTES) {
            s->hi = max_u64(s->hi, a.hi);
            return k;
        }
    }
    if (e->nu == VK_BINDINGS)
        return -1;
    e->uslot[e->nu] = (vk_slot){a.block, lo, a.hi, 0};
    return e->nu++;
}

/* Whether storage binding s takes bytes a as they are: same block, a starts inside or
 * right after it, and written the same way (a read may also join written bytes that
 * hold it whole). */
static int joins(const vk_slot *s, vk_access a, int write, uint64_t limit)
{
    if (s->block != a.block || a.lo < s->lo || a.lo > s->hi || max_u64(s->hi, a.hi) - s->lo > limit)
        return 0;
    return s->write == write || (!write && a.hi <= s->hi);
}

/* Bytes a as a storage binding, exactly when a binding is left; otherwise, if inexact,
 * by widening a binding of the same block and use (read or written) over the gap. A read
 * never widens a written binding: in the mixed sum's weight gradient that gave wrong
 * sums on lavapipe. -1 when none works. */
static int bind_storage(vk_exec *e, vk_access a, int write, int inexact)
{
    uint64_t limit = e->b->feat.max_range;
    for (int k = 0; k < VK_BINDINGS; k++) {
        vk_slot *s = &e->slot[k];
        if (s->block >= 0 && joins(s, a, write, limit)) {
            s->hi = max_u64(s->hi, a.hi);
            return k;
        }
    }
    uint64_t lo = down(a.lo, e->b->feat.align);
    if (e->nw + e->nr < VK_BINDINGS && a.hi - lo <= limit) {
        int k = write ? e->nw++ : VK_BINDINGS - 1 - e->nr++;
        e->slot[k] = (vk_slot){a.block, lo, a.hi, write};
        e->nblocks = e->nw + e->nr;
        return k;
    }
    for (int k = 0; inexact && k < VK_BINDINGS; k++) {
        vk_slot *s = &e->slot[k];
        if (s->block == a.block && s->write == write && s->lo <= a.lo && a.hi - s->lo <= limit) {
            s->hi = max_u64(s->hi, a.hi);
            if (!e->dry)
                e->b->counts.inexact++;
            return k;
        }
    }
    return -1;
}

/* The reference of byte a.lo, binding a (a uniform buffer first when small and read);
 * its offset counts unit bytes. */
static uint32_t bind_unit(vk_exec *e, vk_access a, int write, int small, uint64_t unit)
{
    if (small && !write) {
        int k = bind_uniform(e, a);
        if (k >= 0)
            return ref_of(k, 1, &e->uslot[k], a.lo, unit, &e->ref_error);
    }
    int k = bind_storage(e, a, write, 1);
    if (k < 0) {
        e->ref_error = 1;
        return VK_NOREF;
    }
    return ref_of(k, 0, &e->slot[k], a.lo, unit, &e->ref_error);
}

static uint32_t bind(vk_exec *e, vk_access a, int write, int small)
{
    return bind_unit(e, a, write, small, 4);
}

/* An i8 tensor's reference counts bytes: its element 0 need not start a word. */
static uint32_t ref_tensor(vk_exec *e, const ex_tdesc *t, int small)
{
    if (!t || !t->buf)
        return VK_NOREF;
    vk_access a = span_of(t);
    return bind_unit(e, a, node_writes(e, a), small, t->dtype == EX_I8 ? 1 : 4);
}

uint32_t vk_ref(vk_exec *e, const ex_tdesc *t)
{
    return ref_tensor(e, t, 0);
}

uint32_t vk_ref_small(vk_exec *e, const ex_tdesc *t)
{
    return ref_tensor(e, t, 1);
}

static void unbind_all(vk_exec *e)
{
    for (int k = 0; k < VK_BINDINGS; k++)
        e->slot[k].block = e->uslot[k].block = -1;
    e->nw = e->nr = e->nu = e->nblocks = 0;
}

/* The gate: the one element the node's shaders read, as a uniform buffer. */
static void bind_gate(vk_exec *e)
{
    const ex_node_exec *n = e->n;
    e->gate = VK_NOREF;
    if (!n || !n->gate)
        return;
    vk_access a = span_of(n->gate);
    a.lo += 4 * (uint64_t)ex_td_at(n->gate, n->gate_index);
    a.hi = a.lo + 4;
    e->gate = bind(e, a, 0, 1);
}

void vk_bind_begin(vk_exec *e)
{
    unbind_all(e);
    e->ref_error = 0;
    bind_gate(e);
}

void vk_bind_reset(vk_exec *e)
{
    memcpy(e->prev, e->slot, sizeof e->slot);
    memcpy(e->prev + VK_BINDINGS, e->uslot, sizeof e->uslot);
    unbind_all(e);
    e->ref_error = 0;
    bind_gate(e);
}

static uint32_t rebind(vk_exec *e, uint32_t ref, int read_only, int small)
{
    if (ref == VK_NOREF)
        return ref;
    int k = (int)(ref >> 30), uniform = (ref & VK_REF_UNIFORM) != 0;
    const vk_slot *p = &e->prev[uniform ? VK_BINDINGS + k : k];
    if (p->block < 0) {
        e->ref_error = 1;
        return VK_NOREF;
    }
    vk_access a = {p->block, p->lo, p->hi};
    uint32_t r = bind(e, a, read_only ? 0 : p->write, small || uniform);
    return r == VK_NOREF ? r : r + (ref & VK_REF_MAX_ELEM);
}

uint32_t vk_ref_rebind(vk_exec *e, uint32_t ref)
{
    return rebind(e, ref, 0, 0);
}

uint32_t vk_ref_rebind_read(vk_exec *e, uint32_t ref, int small)
{
    return rebind(e, ref, 1, small);
}

static int room(const vk_exec *e, const ex_tdesc *const *t, int n, int inexact)
{
    vk_exec c = *e;
    c.dry = 1;
    for (int i = 0; i < n; i++) {
        if (!t[i] || !t[i]->buf)
            continue;
        vk_access a = span_of(t[i]);
        if (bind_storage(&c, a, node_writes(&c, a), inexact) < 0)
            return 0;
    }
    return 1;
}

int vk_room(const vk_exec *e, const ex_tdesc *const *t, int n)
{
    return room(e, t, n, 0);
}

int vk_room_widened(const vk_exec *e, const ex_tdesc *t)
{
    return room(e, &t, 1, 1);
}

int vk_ref_pair(vk_exec *e, const ex_tdesc *t0, const ex_tdesc *t1, uint32_t ref[2])
{
    if (!t0 || !t0->buf || !t1 || !t1->buf)
        return 0;
    vk_access a = span_of(t0), c = span_of(t1);
    vk_access first = a.lo <= c.lo ? a : c, second = a.lo <= c.lo ? c : a;
    uint64_t padded = (first.hi + VK_ALIGN - 1) & ~(uint64_t)(VK_ALIGN - 1);
    if (a.block != c.block || second.lo > padded)
        return 0;
    vk_access both = {a.block, first.lo, max_u64(first.hi, second.hi)};
    int k = bind_storage(e, both, node_writes(e, a) && node_writes(e, c), 0);
    if (k < 0 || !e->slot[k].write)
        return 0;
    ref[0] = ref_of(k, 0, &e->slot[k], a.lo, 4, &e->ref_error);
    ref[1] = ref_of(k, 0, &e->slot[k], c.lo, 4, &e->ref_error);
    return 1;
}

int vk_ref_ascending(vk_exec *e, const ex_tdesc *const *t, int n, uint32_t *ref)
{
    const ex_tdesc *s[VK_REFS_ASCENDING];
    int at[VK_REFS_ASCENDING];
    if (n < 0 || n > VK_REFS_ASCENDING)
        return 0;
    for (int i = 0; i < n; i++)
        if (!t[i] || !t[i]->buf)
            return 0;
    for (int i = 0; i < n; i++) { /* insertion sort by (block, first byte), stable */
        vk_access a = span_of(t[i]);
        int k = i;
        for (; k > 0; k--) {
            vk_access b = span_of(s[k - 1]);
            if (b.block < a.block || (b.block == a.block && b.lo <= a.lo))
                break;
            s[k] = s[k - 1];
            at[k] = at[k - 1];
        }
        s[k] = t[i];
        at[k] = i;
    }
    if (!room(e, s, n, 1))
        return 0;
    for (int k = 0; k < n; k++)
        ref[at[k]] = vk_ref(e, s[k]);
    return 1;
}

static vk_access internal_span(const vk_backend *b, uint64_t at, uint64_t bytes)
{
    uint64_t lo = b->internal->offset + at;
    return (vk_access){b->internal->block, lo, lo + (bytes ? bytes : 4)};
}

ex_status vk_scratch(vk_exec *e, uint64_t bytes, uint32_t *ref)
{
    vk_backend *b = e->b;
    uint64_t at = e->scratch_at;
    e->scratch_at = at + ((bytes + VK_ALIGN - 1) & ~(uint64_t)(VK_ALIGN - 1));
    if (e->dry && e->scratch_at > e->need)
        e->need = e->scratch_at;
    if (!e->dry && e->scratch_base + e->scratch_at > b->scratch_bytes)
        return vk_fail(e, EX_ERR_DEVICE, "scratch of %llu bytes was not reserved",
                       (unsigned long long)e->scratch_at);
    *ref = vk_scratch_ref(e, at, bytes, VK_WRITE);
    return EX_OK;
}

uint32_t vk_scratch_ref(vk_exec *e, uint64_t at, uint64_t bytes, int use)
{
    return bind(e, internal_span(e->b, VK_SCRATCH_AT + e->scratch_base + at, bytes),
                use == VK_WRITE, use == VK_READ_SMALL);
}

void vk_zone(vk_exec *e, uint32_t *tickets, uint32_t *part)
{
    uint64_t slot = e->dry ? 0 : e->b->zone_next++ % VK_ZONE_SLOTS;
    *tickets = bind(e, internal_span(e->b, VK_ZONE_AT + slot * VK_ZONE_SLOT, VK_ZONE_SLOT), 1, 0);
    *part = *tickets == VK_NOREF ? VK_NOREF : *tickets + VK_ZONE_TICKETS;
}

ex_status vk_status_ref(vk_exec *e, uint32_t *ref)
{
    uint64_t slot = e->b->status_next++ % VK_STATUS_SLOTS;
    *ref = bind(e, internal_span(e->b, slot * VK_STATUS_WORDS * 4, VK_STATUS_WORDS * 4), 1, 0);
    return EX_OK;
}

/* ---- the hazard tracker ---- */

static int overlaps(const vk_access *list, int64_t n, vk_access a)
{
    for (int64_t i = 0; i < n; i++)
        if (overlap(list[i], a))
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

/* A full barrier now: the pending ranges are synchronized. */
static void barrier_now(vk_exec *e)
{
    vk_backend *b = e->b;
    if (e->cmd) {
        vk_compute_barrier(e->cmd);
        b->counts.barriers++;
    }
    b->nreads = b->nwrites = 0;
}

void vk_barrier(vk_exec *e)
{
    if (e->last - e->first > 1) /* else pass by pass: the tracker orders the passes */
        barrier_now(e);
}

/* Before a dispatch of bindings s[0..n): a barrier when one overlaps what is written and
 * unsynchronized, or a written one overlaps what is read; then their ranges pend. */
static ex_status track(vk_exec *e, const vk_slot *s, int n)
{
    vk_backend *b = e->b;
    int need = 0;
    for (int i = 0; i < n && !need; i++) {
        vk_access a = {s[i].block, s[i].lo, s[i].hi};
        need =
            overlaps(b->writes, b->nwrites, a) || (s[i].write && overlaps(b->reads, b->nreads, a));
    }
    if (need)
        barrier_now(e);
    int ok = 1;
    for (int i = 0; i < n && ok; i++) {
        vk_access a = {s[i].block, s[i].lo, s[i].hi};
        ok = s[i].write ? push_access(&b->writes, &b->nwrites, &b->capwrites, a)
                        : push_access(&b->reads, &b->nreads, &b->capreads, a);
    }
    return ok ? EX_OK : vk_fail(e, EX_ERR_NOMEM, "out of host memory");
}

/* ---- descriptor sets ---- */

static uint64_t key_hash(const vk_setkey *k)
{
    const unsigned char *p = (const unsigned char *)k;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < sizeof *k; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

/* The table's entry for key: its set, or the free entry where it belongs. */
static vk_set *set_find(vk_backend *b, const vk_setkey *key)
{
    uint64_t mask = b->capsets - 1;
    for (uint64_t i = key_hash(key) & mask;; i = (i + 1) & mask) {
        vk_set *s = &b->sets[i];
        if (!s->set || !memcmp(&s->key, key, sizeof *key))
            return s;
    }
}

static ex_status set_table_grow(vk_backend *b)
{
    uint64_t cap = b->capsets ? 2 * b->capsets : 1024;
    vk_set *old = b->sets, *t = calloc((size_t)cap, sizeof *t);
    if (!t) {
        snprintf(b->msg, sizeof b->msg, "vulkan: out of host memory for descriptor sets");
        return EX_ERR_NOMEM;
    }
    uint64_t oldcap = b->capsets;
    b->sets = t;
    b->capsets = cap;
    for (uint64_t i = 0; i < oldcap; i++)
        if (old[i].set)
            *set_find(b, &old[i].key) = old[i];
    free(old);
    return EX_OK;
}

static ex_status pool_add(vk_backend *b)
{
    VkDescriptorPool *p = realloc(b->dpools, (size_t)(b->npools + 1) * sizeof *p);
    if (!p) {
        snprintf(b->msg, sizeof b->msg, "vulkan: out of host memory for descriptor pools");
        return EX_ERR_NOMEM;
    }
    b->dpools = p;
    VkDescriptorPoolSize ps[2] = {{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, VK_POOL_SETS * VK_BINDINGS},
                                  {VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER, VK_POOL_SETS * VK_BINDINGS}};
    VkDescriptorPoolCreateInfo dp = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                     .maxSets = VK_POOL_SETS,
                                     .poolSizeCount = 2,
                                     .pPoolSizes = ps};
    ex_status st =
        vk_check(b, vkCreateDescriptorPool(b->dev, &dp, NULL, &b->dpools[b->npools]), "pool");
    if (st == EX_OK) {
        b->npools++;
        vk_count_object(b, 1);
    }
    return st;
}

/* A fresh set from the pools, a new pool when the last is full. */
static ex_status set_alloc(vk_backend *b, VkDescriptorSet *out)
{
    if (b->pool_used == VK_POOL_SETS) {
        b->dpool_at++;
        b->pool_used = 0;
    }
    ex_status st = b->dpool_at < b->npools ? EX_OK : pool_add(b);
    if (st != EX_OK)
        return st;
    VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                      .descriptorPool = b->dpools[b->dpool_at],
                                      .descriptorSetCount = 1,
                                      .pSetLayouts = &b->set_layout};
    st = vk_check(b, vkAllocateDescriptorSets(b->dev, &ai, out), "descriptor set");
    if (st == EX_OK) {
        b->pool_used++;
        b->counts.sets++;
        vk_count_object(b, 1);
    }
    return st;
}

static ex_status set_write(vk_backend *b, const vk_setkey *key, VkDescriptorSet set)
{
    VkDescriptorBufferInfo bi[2 * VK_BINDINGS];
    VkWriteDescriptorSet w[2 * VK_BINDINGS];
    for (int i = 0; i < 2 * VK_BINDINGS; i++) {
        bi[i] = (VkDescriptorBufferInfo){b->blocks[key->block[i]].buf, key->lo[i], key->len[i]};
        w[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                      .dstSet = set,
                                      .dstBinding = (uint32_t)i,
                                      .descriptorCount = 1,
                                      .descriptorType = i < VK_BINDINGS
                                                            ? VK_DESCRIPTOR_TYPE_STORAGE_BUFFER
                                                            : VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER,
                                      .pBufferInfo = &bi[i]};
    }
    vkUpdateDescriptorSets(b->dev, 2 * VK_BINDINGS, w, 0, NULL);
    return EX_OK;
}

static ex_status descriptor_set(vk_backend *b, const vk_setkey *key, VkDescriptorSet *out)
{
    ex_status st = EX_OK;
    if (4 * (b->nsets + 1) > 3 * b->capsets && (st = set_table_grow(b)) != EX_OK)
        return st;
    vk_set *s = set_find(b, key);
    if (s->set) {
        *out = s->set;
        return EX_OK;
    }
    VkDescriptorSet set;
    st = set_alloc(b, &set);
    if (st == EX_OK)
        st = set_write(b, key, set);
    if (st != EX_OK)
        return st;
    s->key = *key;
    s->set = set;
    b->nsets++;
    *out = set;
    return EX_OK;
}

void vkx_sets_drop(vk_backend *b)
{
    for (int i = 0; i < b->npools; i++)
        vkResetDescriptorPool(b->dev, b->dpools[i], 0);
    vk_count_object(b, -(int64_t)b->counts.sets);
    b->counts.sets = 0;
    b->dpool_at = 0;
    b->pool_used = 0;
    if (b->sets)
        memset(b->sets, 0, (size_t)b->capsets * sizeof *b->sets);
    b->nsets = 0;
}

void vkx_sets_destroy(vk_backend *b)
{
    vkx_sets_drop(b);
    for (int i = 0; i < b->npools; i++) {
        vkDestroyDescriptorPool(b->dev, b->dpools[i], NULL);
        vk_count_object(b, -1);
    }
    free(b->dpools);
    b->dpools = NULL;
    b->npools = 0;
    free(b->sets);
    b->sets = NULL;
    b->capsets = 0;
}

/* ---- dispatching ---- */

/* The SPIR-V to run: the fewest writable bindings, at least the nw taken, that leave the
 * read bindings readonly; -1 when the shader was built for none. */
static int writes_variant(const vk_exec *e, vk_shader_id sh)
{
    int f = e->b->feat.float_controls;
    for (int w = e->nw; w <= VK_BINDINGS - e->nr; w++)
        if (w > 0 && vk_shader_table[sh].code[w][f])
            return w;
    return -1;
}

/* The descriptor set's ranges: storage bindings below w written (those beyond what the
 * dispatch writes repeat binding 0), then the read ones; a binding nothing uses points
 * at bytes of the internal buffer that nothing writes. *real tells which to track. */
static void set_key(const vk_exec *e, int w, vk_setkey *key, vk_slot *real, int *nreal)
{
    const vk_backend *b = e->b;
    vk_slot none = {b->internal->block, b->internal->offset + VK_STATUS_BYTES,
                    b->internal->offset + 2 * VK_STATUS_BYTES, 0};
    memset(key, 0, sizeof *key);
    *nreal = 0;
    for (int i = 0; i < 2 * VK_BINDINGS; i++) {
        const vk_slot *s = i < VK_BINDINGS ? &e->slot[i] : &e->uslot[i - VK_BINDINGS];
        int used = s->block >= 0;
        if (!used && i < w)
            s = &e->slot[0];
        else if (!used)
            s = &none;
        else
            real[(*nreal)++] = *s;
        key->block[i] = s->block;
        key->lo[i] = (uint32_t)s->lo;
        key->len[i] = (uint32_t)(s->hi - s->lo);
    }
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
                       "operands lie in more memory ranges than the %d storage and %d uniform "
                       "bindings a shader has",
                       VK_BINDINGS, VK_BINDINGS);
    if (e->nw == 0)
        return vk_fail(e, EX_ERR_DEVICE, "a dispatch of %s writes nothing",
                       vk_shader_table[shader].name);
    int w = writes_variant(e, shader);
    if (w < 0)
        return vk_fail(e, EX_ERR_DEVICE,
                       "%s writes %d and reads %d storage bindings: no SPIR-V of it fits (the "
                       "shader's \"// exapt: writes\" line)",
                       vk_shader_table[shader].name, e->nw, e->nr);
    int mine = e->dispatches++;
    if (e->dry && gx && gy && gz)
        vkx_pipeline_want(b, shader, w, variant);
    if (e->dry || gx == 0 || gy == 0 || gz == 0 || mine < e->first || mine >= e->last)
        return EX_OK;
    vk_setkey key;
    vk_slot real[2 * VK_BINDINGS];
    int nreal = 0;
    set_key(e, w, &key, real, &nreal);
    ex_status st = track(e, real, nreal);
    VkPipeline p = VK_NULL_HANDLE;
    if (st == EX_OK)
        st = vkx_pipeline(b, shader, w, variant, &p);
    VkDescriptorSet set = VK_NULL_HANDLE;
    if (st == EX_OK)
        st = descriptor_set(b, &key, &set);
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
    b->counts.dispatches++;
    return EX_OK;
}

void vk_merge_dims3(uint32_t ne[4], uint32_t sd[4], uint32_t sa[4], uint32_t sb[4])
{
    int64_t n[4], st[3][4];
    uint32_t *s[3] = {sd, sa, sb};
    for (int d = 0; d < 4; d++) {
        n[d] = ne[d];
        for (int k = 0; k < 3; k++)
            st[k][d] = s[k][d];
    }
    ex_td_merge_dims(3, n, st, 1);
    for (int d = 0; d < 4; d++) {
        ne[d] = (uint32_t)n[d];
        for (int k = 0; k < 3; k++)
            s[k][d] = (uint32_t)st[k][d];
    }
}
