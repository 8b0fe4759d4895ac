/* The captured step spread over several streams. A DARTS step is tens of thousands of
 * small kernels, and most of them do not depend on each other (the candidates of an edge,
 * the edges of a cell): on one stream each waits for the one before and the GPU runs one
 * small grid at a time. Here every node waits only for the nodes it must: those the plan
 * lists for it (ex_node_exec.dep: the bytes it reads, updates or writes, core/deps.h), and
 * the nodes it shares a resource of the kernels with, kept here as byte ranges: its slice
 * of the scratch ring, its last-block ticket and the conditional bodies' cuBLAS handle.
 * The status words are not: reports keep the earliest node's whatever the order
 * (cu_report), and ordering the ~1,700 nodes that may report chained a DARTS step's edges
 * one after another.
 *
 * A node goes on the stream of its latest dependency when that stream has run nothing
 * since, so chains stay on one stream; otherwise on the next stream in turn. It waits
 * (an event, which capture turns into a graph edge) only for dependencies on other
 * streams that its stream is not already ordered after, directly or through earlier
 * waits (a vector clock per stream): fewer edges for the graph to resolve. The result
 * is a plain schedule; backend.cu captures it. */
#include <algorithm>
#include <map>
#include <new>
#include <unordered_map>
#include <vector>

#include "cuda/cuda.h"

namespace
{

/** Byte range [lo, hi) of a buffer (or of one of the virtual resources below). */
struct access {
    const void *buf;
    uint64_t lo, hi;
    bool write;
};

/** A run of bytes with its last writer (-1: none) and the readers since. */
struct segment {
    uint64_t hi;
    int64_t writer;
    std::vector<int64_t> readers;
};

typedef std::map<uint64_t, segment> seg_map; /* keyed by lo; segments disjoint */

/* Distinct addresses standing for the shared resources. res_comm: the communicator, whose
 * collectives every rank must issue in one order, so that they run one after another. */
char res_scratch, res_ticket, res_side, res_comm;

/** Tickets: node i takes slot i % CU_SCHED_TICKETS (cu_exec.ticket). */
const int64_t ticket_slots = CU_SCHED_TICKETS;

struct tracker {
    std::unordered_map<const void *, seg_map> bufs;

    /* Splits the segment holding x, so that a segment starts at x. */
    static void split(seg_map &m, uint64_t x)
    {
        auto it = m.upper_bound(x);
        if (it == m.begin())
            return;
        --it;
        if (it->first < x && x < it->second.hi) {
            segment tail = it->second;
            it->second.hi = x;
            m.emplace(x, tail);
        }
    }

    /* The nodes an access must wait for. */
    void deps(const access &a, std::vector<int64_t> &out)
    {
        auto f = bufs.find(a.buf);
        if (f == bufs.end())
            return;
        seg_map &m = f->second;
        auto it = m.upper_bound(a.lo);
        if (it != m.begin())
            --it;
        for (; it != m.end() && it->first < a.hi; ++it) {
            if (it->second.hi <= a.lo)
                continue;
            if (it->second.writer >= 0)
                out.push_back(it->second.writer);
            if (a.write)
                out.insert(out.end(), it->second.readers.begin(), it->second.readers.end());
        }
    }

    /* Records node i's access: a write replaces the range's history, a read joins it
     * (filling gaps, so that a later write sees the reader). */
    void apply(const access &a, int64_t i)
    {
        seg_map &m = bufs[a.buf];
        split(m, a.lo);
        split(m, a.hi);
        if (a.write) {
            m.erase(m.lower_bound(a.lo), m.lower_bound(a.hi));
            m.emplace(a.lo, segment{a.hi, i, {}});
            return;
        }
        uint64_t at = a.lo;
        auto it = m.lower_bound(a.lo);
        while (at < a.hi) {
            if (it == m.end() || it->first > at) { /* a gap up to the next segment */
                uint64_t end = it == m.end() || it->first > a.hi ? a.hi : it->first;
                it = m.emplace_hint(it, at, segment{end, -1, {i}});
            } else if (it->second.readers.empty() || it->second.readers.back() != i) {
                it->second.readers.push_back(i);
            }
            at = it->second.hi;
            ++it;
        }
    }
};

/* The kernels' shared resources node i takes. */
void resources(const ex_node_exec *n, int64_t i, const cu_sched_node &sn, bool conditional,
               std::vector<access> &out)
{
    if (sn.scratch_bytes)
        out.push_back({&res_scratch, sn.scratch_off, sn.scratch_off + sn.scratch_bytes, true});
    uint64_t slot = (uint64_t)(i % ticket_slots);
    out.push_back({&res_ticket, slot, slot + 1, true});
    if (conditional)
        out.push_back({&res_side, 0, 1, true});
    if (n->op == EX_OP_ALLREDUCE)
        out.push_back({&res_comm, 0, 1, true});
}

/* The nodes node `self` of the list waits for as the plan says, each later node of a
 * launch standing for its first (which launches them all). */
void plan_deps(const ex_node_exec *nodes, int64_t self, int64_t head, const cu_node_flags *flags,
               std::vector<int64_t> &out)
{
    const ex_node_exec *n = &nodes[self];
    for (int32_t k = 0; k < n->ndep; k++) {
        int64_t j = self - n->dep[k];
        if (j >= 0)
            j -= flags[j].back;
        if (j >= 0 && j != head)
            out.push_back(j);
    }
}

/* The stream for node i: its latest dependency's, if that stream ran nothing since. */
int pick_stream(const std::vector<int64_t> &deps, const cu_sched_node *node,
                const std::vector<int64_t> &tail, int nstreams, int *next)
{
    if (!deps.empty()) {
        int s = node[deps.back()].stream;
        if (tail[s] == deps.back())
            return s;
    }
    int s = *next;
    *next = (*next + 1) % nstreams;
    return s;
}

ex_status build(const ex_node_exec *nodes, int64_t count, const cu_node_flags *flags, int nstreams,
                uint64_t ring, cu_sched *out)
{
    tracker tr;
    std::vector<access> acc;
    std::vector<int64_t> deps, waits, tail(nstreams, -1);
    /* know[s * nstreams + t]: the latest node of stream t that stream s is already ordered
     * after (vector clocks); clock[i * nstreams + t]: stream i's knowledge right after node
     * i, which a wait for node i passes on */
    std::vector<int64_t> know((size_t)nstreams * nstreams, -1);
    std::vector<int64_t> clock((size_t)count * nstreams, -1);
    int next = 0;
    uint64_t cursor = 0;
    for (int64_t i = 0; i < count; i++) {
        cu_sched_node &sn = out->node[i];
        if (flags[i].span == 0) { /* launched with its first, which stands for it */
            sn.stream = out->node[i - flags[i].back].stream;
            sn.wait0 = (int64_t)waits.size();
            continue;
        }
        sn.scratch_bytes = (flags[i].need + 255) & ~(uint64_t)255;
        if (cursor + sn.scratch_bytes > ring)
            cursor = 0;
        sn.scratch_off = cursor;
        cursor += sn.scratch_bytes;
        acc.clear();
        resources(&nodes[i], i, sn, flags[i].conditional != 0, acc);
        deps.clear();
        for (int32_t k = 0; k < flags[i].span && i + k < count; k++)
            plan_deps(nodes, i + k, i, flags, deps);
        for (const access &a : acc)
            tr.deps(a, deps);
        std::sort(deps.begin(), deps.end());
        deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
        int s = pick_stream(deps, out->node, tail, nstreams, &next);
        sn.stream = s;
        sn.wait0 = (int64_t)waits.size();
        int64_t *mine = &know[(size_t)s * nstreams];
        for (auto it = deps.rbegin(); it != deps.rend(); ++it) { /* latest first */
            int64_t d = *it;
            int t = out->node[d].stream;
            if (t == s || d <= mine[t])
                continue; /* stream order, or a wait already made, covers it */
            const int64_t *theirs = &clock[(size_t)d * nstreams];
            for (int u = 0; u < nstreams; u++)
                mine[u] = std::max(mine[u], theirs[u]);
            waits.push_back(d);
            out->node[d].record = 1;
        }
        sn.nwait = (int32_t)((int64_t)waits.size() - sn.wait0);
        mine[s] = i;
        std::copy(mine, mine + nstreams, &clock[(size_t)i * nstreams]);
        tail[s] = i;
        for (const access &a : acc)
            tr.apply(a, i);
    }
    out->nwaits = (int64_t)waits.size();
    out->waits = (int64_t *)malloc(sizeof(int64_t) * (waits.empty() ? 1 : waits.size()));
    if (!out->waits)
        return EX_ERR_NOMEM;
    std::copy(waits.begin(), waits.end(), out->waits);
    return EX_OK;
}

} // namespace

ex_status cu_schedule(const ex_node_exec *nodes, int64_t count, const cu_node_flags *flags,
                      int nstreams, uint64_t ring, cu_sched *out)
{
    *out = cu_sched{};
    out->node = (cu_sched_node *)calloc(count > 0 ? (size_t)count : 1, sizeof *out->node);
    if (!out->node)
        return EX_ERR_NOMEM;
    ex_status st;
    try {
        st = build(nodes, count, flags, nstreams, ring, out);
    } catch (const std::bad_alloc &) {
        st = EX_ERR_NOMEM;
    }
    if (st != EX_OK)
        cu_sched_free(out);
    return st;
}

void cu_sched_free(cu_sched *s)
{
    free(s->node);
    free(s->waits);
    *s = cu_sched{};
}
