/* Running a plan, moving data in and out of it, and what it reports. */
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/plan.h"
#include "core/tdesc.h"

#define NAN_PATTERN 0x7FC00000u

static bool ctx_alloc_fails(void *ctx)
{
    return ex__alloc_fails(ctx);
}

/* Moves the elements of d (any strides) between the device and the contiguous host array
 * host: a dense d directly, else its span whole, elements gathered or scattered on the
 * host (a write then reads the span first, for the elements between d's). */
static ex_status strided(ex_plan *p, const ex_tdesc *d, void *host, bool write)
{
    if (ex_td_dense(d)) {
        size_t n = (size_t)ex_td_numel(d) * (size_t)ex_dtype_size(d->dtype);
        ex_status st = write ? p->f->upload(p->impl, d->buf, d->offset, host, n)
                             : p->f->download(p->impl, d->buf, d->offset, host, n);
        return st == EX_OK ? EX_OK : ex__plan_fail(p, st, "transfer: %s", p->f->error(p->impl));
    }
    int64_t lo, hi;
    ex_td_reach(d, &lo, &hi);
    size_t es = (size_t)ex_dtype_size(d->dtype);
    uint64_t start = d->offset + (uint64_t)(lo * (int64_t)es); /* lo <= 0 */
    size_t n = (size_t)(hi - lo + 1) * es;
    char *tmp = ex__malloc(p->ctx, n);
    if (!tmp)
        return ex__plan_fail(p, EX_ERR_NOMEM, "transfer: out of host memory");
    ex_status st = p->f->download(p->impl, d->buf, start, tmp, n);
    int64_t count = ex_td_numel(d);
    for (int64_t i = 0; st == EX_OK && i < count; i++) {
        char *el = tmp + (size_t)(ex_td_at(d, i) - lo) * es;
        if (write)
            memcpy(el, (char *)host + (size_t)i * es, es);
        else
            memcpy((char *)host + (size_t)i * es, el, es);
    }
    if (st == EX_OK && write)
        st = p->f->upload(p->impl, d->buf, start, tmp, n);
    free(tmp);
    if (st != EX_OK)
        return ex__plan_fail(p, st, "transfer: %s", p->f->error(p->impl));
    return EX_OK;
}

/* An ALLREDUCE node, host-staged: its source down to the host (after the work queued
 * before it), summed over the communicator's ranks, scaled, and up into its output. */
static ex_status allreduce_node(ex_plan *p, int64_t i)
{
    const ex_node_exec *n = &p->nodes[i];
    int ranks = p->comm.size ? p->comm.size : 1;
    if (n->ip[0] != ranks)
        return ex__plan_fail(p, EX_ERR_STATE,
                             "run: allreduce: the graph was built for %d rank(s), the plan's "
                             "communicator has %d (ex_ctx_set_ranks, ex_plan_set_comm)",
                             n->ip[0], ranks);
    double t0 = ex__clock_ms();
    int64_t count = ex_td_numel(&n->src[0]);
    float *v = ex__malloc(p->ctx, (size_t)count * sizeof *v + 1);
    if (!v)
        return ex__plan_fail(p, EX_ERR_NOMEM, "run: allreduce: out of host memory");
    ex_status st = strided(p, &n->src[0], v, false);
    char msg[256] = "";
    if (st == EX_OK && ranks > 1 &&
        (st = p->comm.allreduce_sum(p->comm.user, v, (size_t)count, msg, sizeof msg)) != EX_OK)
        ex__plan_fail(p, st, "run: allreduce over %d ranks: %s", ranks,
                      msg[0] ? msg : "the communicator gave no reason");
    for (int64_t k = 0; st == EX_OK && k < count; k++)
        v[k] *= n->fp[0];
    if (st == EX_OK)
        st = strided(p, &n->dst, v, true);
    free(v);
    if (p->opts.profile)
        p->node_ms[i] = ex__clock_ms() - t0;
    return st;
}

void ex__plan_forget(ex_plan *p)
{
    for (int i = 0; i < p->nrecs; i++)
        p->f->forget(p->impl, p->recs[i].rec);
    free(p->recs);
    p->recs = NULL;
    p->nrecs = p->caprecs = 0;
}

/* The backend's recording of nodes [first, first + count), made the first time. */
static ex_status recording_of(ex_plan *p, int64_t first, int64_t count, ex_recording **out)
{
    for (int i = 0; i < p->nrecs; i++)
        if (p->recs[i].first == first && p->recs[i].count == count) {
            *out = p->recs[i].rec;
            return EX_OK;
        }
    if (p->nrecs == p->caprecs) {
        int cap = 2 * p->caprecs + 4;
        plan_rec *r = ex__realloc(p->ctx, p->recs, (size_t)cap * sizeof *r);
        if (!r)
            return ex__plan_fail(p, EX_ERR_NOMEM, "run: out of host memory");
        p->recs = r;
        p->caprecs = cap;
    }
    ex_status st = p->f->record(p->impl, p->nodes + first, count, out);
    if (st != EX_OK)
        return ex__plan_fail(p, st, "run: %s", p->f->error(p->impl));
    p->recs[p->nrecs++] = (plan_rec){first, count, *out};
    return EX_OK;
}

/* A profiled group's time, which the backend stores on its first node, shared among its
 * nodes by their least traffic (evenly where they have none), so a report by op or by
 * candidate adds up to what ran. */
static void spread_group_ms(ex_plan *p, int64_t first, int64_t count)
{
    for (int64_t i = first; i < first + count; i++) {
        int32_t k = p->nodes[i].group;
        if (k < 2)
            continue;
        double bytes = 0, ms = p->node_ms[i];
        for (int32_t j = 0; j < k; j++)
            bytes += (double)p->nodes[i + j].min_bytes;
        for (int32_t j = 0; j < k; j++)
            p->node_ms[i + j] = bytes > 0 ? ms * (double)p->nodes[i + j].min_bytes / bytes : ms / k;
        i += k - 1;
    }
}

/* Runs nodes [first, first + count) on the backend, with the context's allocation hook
 * around; the backend's message on failure. */
static ex_status backend_run(ex_plan *p, int64_t first, int64_t count, ex_recording *rec)
{
    /* the backend's scratch memory is counted by the context's allocation hook */
    if (p->f->set_alloc_hook)
        p->f->set_alloc_hook(p->impl, ctx_alloc_fails, p->ctx);
    ex_status st = rec ? p->f->replay(p->impl, rec)
                       : p->f->compute(p->impl, p->nodes + first, count,
                                       p->opts.profile ? p->node_ms + first : NULL);
    if (p->f->set_alloc_hook)
        p->f->set_alloc_hook(p->impl, NULL, NULL);
    if (st == EX_OK && !rec && p->opts.profile)
        spread_group_ms(p, first, count);
    return st == EX_OK ? EX_OK : ex__plan_fail(p, st, "run: %s", p->f->error(p->impl));
}

/* Hands nodes [first, first + count) to the backend: recorded once and replayed where the
 * backend records, else through compute; node by node when profiling. */
static ex_status compute(ex_plan *p, int64_t first, int64_t count)
{
    /* the backend may serve several plans: it gets this one's communicator each time */
    if (p->device_sums && p->f->set_comm(p->impl, &p->comm) != EX_OK)
        return ex__plan_fail(p, EX_ERR_STATE, "run: %s", p->f->error(p->impl));
    ex_recording *rec = NULL;
    if (!p->opts.profile && p->f->record) {
        ex_status st = recording_of(p, first, count, &rec);
        if (st != EX_OK)
            return st;
    }
    return backend_run(p, first, count, rec);
}

/* The backend runs the nodes between the ALLREDUCE nodes, which the plan carries out;
 * with device sums it runs them all. */
static ex_status run_nodes(ex_plan *p, int64_t first, int64_t count, bool wait)
{
    for (int c = 0; p->opts.poison && c < p->nchunks; c++) {
        if (p->chunk_persistent[c])
            continue;
        ex_status st =
            p->f->fill(p->impl, p->chunks[c], 0, p->chunk_bytes[c] & ~(uint64_t)3, NAN_PATTERN);
        if (st != EX_OK)
            return ex__plan_fail(p, st, "run: poisoning the arena: %s", p->f->error(p->impl));
    }
    ex_status st = EX_OK;
    for (int64_t at = first, end = first + count; st == EX_OK && at < end;) {
        int64_t next = at;
        while (next < end && (p->device_sums || p->nodes[next].op != EX_OP_ALLREDUCE))
            next++;
        if (next > at)
            st = compute(p, at, next - at);
        if (st == EX_OK && next < end)
            st = allreduce_node(p, next++);
        at = next;
    }
    if (st == EX_OK && wait && (st = p->f->synchronize(p->impl)) != EX_OK)
        return ex__plan_fail(p, st, "run: %s", p->f->error(p->impl));
    return st;
}

ex_status ex_plan_set_comm(ex_plan *p, const ex_comm *comm)
{
    if (!p)
        return EX_ERR_ARG;
    char msg[128];
    if (!ex_comm_valid(comm, msg, sizeof msg))
        return ex__plan_fail(p, EX_ERR_ARG, "set_comm: %s", msg);
    const char *name = ex_backend_get_caps(p->be)->name;
    bool device = comm->device_backend && !strcmp(comm->device_backend, name);
    if (device && !p->f->set_comm)
        return ex__plan_fail(p, EX_ERR_UNSUPPORTED,
                             "set_comm: the communicator sums on the %s backend's device, "
                             "which that backend cannot do",
                             name);
    if (device && p->f->set_comm(p->impl, comm) != EX_OK)
        return ex__plan_fail(p, EX_ERR_ARG, "set_comm: %s", p->f->error(p->impl));
    ex__plan_forget(p); /* they may hold the old communicator's sums */
    p->comm = *comm;
    p->device_sums = device;
    return EX_OK;
}

/* Copies every persistent chunk one way: to the snapshot or back. */
static ex_status copy_persistent(ex_plan *p, bool restore, const char *what)
{
    if (!p)
        return EX_ERR_ARG;
    if (!p->backup)
        return ex__plan_fail(p, EX_ERR_STATE, "%s: the plan was made without opts.snapshot", what);
    for (int c = 0; c < p->nchunks; c++) {
        if (!p->chunk_persistent[c])
            continue;
        ex_buffer *dst = restore ? p->chunks[c] : p->backup[c];
        ex_buffer *src = restore ? p->backup[c] : p->chunks[c];
        ex_status st = p->f->copy(p->impl, dst, 0, src, 0, p->chunk_bytes[c]);
        if (st != EX_OK)
            return ex__plan_fail(p, st, "%s: %s", what, p->f->error(p->impl));
    }
    return EX_OK;
}

ex_status ex_plan_snapshot(ex_plan *p)
{
    return copy_persistent(p, false, "snapshot");
}

ex_status ex_plan_restore(ex_plan *p)
{
    return copy_persistent(p, true, "restore");
}

ex_status ex_plan_set_profile(ex_plan *p, bool on)
{
    if (!p)
        return EX_ERR_ARG;
    p->opts.profile = on;
    return EX_OK;
}

ex_status ex_plan_run(ex_plan *p)
{
    return p ? run_nodes(p, 0, p->nnodes, true) : EX_ERR_ARG;
}

static ex_status stage_run(ex_plan *p, int stage, bool wait)
{
    if (!p)
        return EX_ERR_ARG;
    if (stage < 0 || stage >= p->nstages)
        return ex__plan_fail(p, EX_ERR_ARG, "run: no stage %d (the plan has %d)", stage,
                             p->nstages);
    return run_nodes(p, p->stage_first[stage], p->stage_count[stage], wait);
}

ex_status ex_plan_run_stage(ex_plan *p, int stage)
{
    return stage_run(p, stage, true);
}

ex_status ex_plan_submit_stage(ex_plan *p, int stage)
{
    return stage_run(p, stage, false);
}

ex_status ex_plan_sync(ex_plan *p)
{
    if (!p)
        return EX_ERR_ARG;
    ex_status st = p->f->synchronize(p->impl);
    return st == EX_OK ? EX_OK : ex__plan_fail(p, st, "run: %s", p->f->error(p->impl));
}

/* Checks that t was planned here and that bytes matches; sets *d. */
static ex_status lookup(ex_plan *p, ex_tensor *t, size_t bytes, const char *what, ex_tdesc *d)
{
    if (!t || ex__is_inert(t) || t->id < 0 || t->id >= p->ntensors || p->ctx->tensors[t->id] != t)
        return ex__plan_fail(p, EX_ERR_ARG, "%s: the tensor is not part of this plan", what);
    uint64_t need = (uint64_t)ex__numel(t) * (uint64_t)ex_dtype_size(t->dtype);
    if (bytes != need) {
        char s[64];
        return ex__plan_fail(p, EX_ERR_ARG, "%s: %s %s (%s) holds %llu bytes, %zu given", what,
                             t->name, ex__shape(t, s), ex_dtype_name(t->dtype),
                             (unsigned long long)need, bytes);
    }
    ex__plan_desc(p, t, d);
    return EX_OK;
}

ex_status ex_plan_write(ex_plan *p, ex_tensor *t, const void *data, size_t bytes)
{
    if (!p)
        return EX_ERR_ARG;
    ex_tdesc d;
    ex_status st = lookup(p, t, bytes, "write", &d);
    if (st != EX_OK)
        return st;
    if (!data)
        return ex__plan_fail(p, EX_ERR_ARG, "write: data is NULL");
    for (int i = 0; i < t->ndim; i++)
        if (t->st[i] == 0 && t->ne[i] > 1)
            return ex__plan_fail(p, EX_ERR_ARG, "write: %s is a broadcast view", t->name);
    if (!ex__contiguous(t))
        return strided(p, &d, (void *)data, true);
    st = p->f->upload(p->impl, d.buf, d.offset, data, bytes);
    if (st != EX_OK)
        return ex__plan_fail(p, st, "write: %s", p->f->error(p->impl));
    return EX_OK;
}

ex_status ex_plan_read(ex_plan *p, ex_tensor *t, void *data, size_t bytes)
{
    if (!p)
        return EX_ERR_ARG;
    ex_tdesc d;
    ex_status st = lookup(p, t, bytes, "read", &d);
    if (st != EX_OK)
        return st;
    if (!data)
        return ex__plan_fail(p, EX_ERR_ARG, "read: data is NULL");
    if (!p->slots[p->slot_of[t->storage->id]].persistent)
        return ex__plan_fail(p, EX_ERR_STATE,
                             "read: %s is transient (its memory is reused during a run); "
                             "ex_keep() it before planning",
                             t->name);
    if (!ex__contiguous(t))
        return strided(p, &d, data, false);
    st = p->f->download(p->impl, d.buf, d.offset, data, bytes);
    if (st != EX_OK)
        return ex__plan_fail(p, st, "read: %s", p->f->error(p->impl));
    return EX_OK;
}

ex_status ex_plan_get_stats(const ex_plan *p, ex_plan_stats *st)
{
    if (!p || !st)
        return EX_ERR_ARG;
    *st = p->stats;
    return EX_OK;
}

int64_t ex_plan_node_count(const ex_plan *p)
{
    return p ? p->nnodes : 0;
}

int64_t ex_plan_launch_count(const ex_plan *p)
{
    return p ? p->launches : 0;
}

ex_status ex_plan_node_info(const ex_plan *p, int64_t i, ex_node_info *info)
{
    if (!p || !info || i < 0 || i >= p->nnodes)
        return EX_ERR_ARG;
    const ex_node_exec *n = &p->nodes[i];
    info->op = n->op;
    memcpy(info->tag, n->tag, sizeof info->tag);
    info->bytes_read = n->bytes_read;
    info->bytes_written = n->bytes_written;
    info->min_bytes = n->min_bytes;
    info->flops = n->flops;
    info->skipped = p->node_ms[i] < 0;
    info->ms = info->skipped ? 0.0 : p->node_ms[i];
    return EX_OK;
}

const char *ex_plan_error(const ex_plan *p)
{
    return p ? p->error : "no plan (NULL)";
}
