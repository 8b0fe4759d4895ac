/* The plan's internals, shared by the planner (plan.c) and execution (run.c). */
#ifndef EXAPT_CORE_PLAN_H
#define EXAPT_CORE_PLAN_H

#include "core/engine.h"

/** A run of nodes the backend recorded for replays (ex_backend_iface.record). */
typedef struct plan_rec {
    int64_t first, count;
    ex_recording *rec;
} plan_rec;

/** Where one storage lives: a chunk and a byte offset. */
typedef struct plan_slot {
    int chunk;
    uint64_t offset;
    uint64_t bytes;
    int64_t first, last; /* execution positions of its first write and last use */
    bool persistent;
} plan_slot;

struct ex_plan {
    ex_ctx *ctx;
    ex_backend *be;
    const ex_backend_iface *f;
    void *impl;
    ex_plan_opts opts;
    int64_t ntensors; /* tensors that existed when planned */
    int64_t *slot_of; /* storage root id -> slot (-1: none) */
    plan_slot *slots;
    int64_t nslots;
    ex_buffer **chunks;
    ex_buffer **backup; /* per persistent chunk, its snapshot (opts.snapshot) */
    uint64_t *chunk_bytes;
    bool *chunk_persistent;
    int nchunks;
    ex_node_exec *nodes;
    int64_t *node_tensor; /* the tensor each node computes */
    int64_t nnodes;
    int64_t launches; /* nodes alone and groups (core/group.h) */
    ex_tdesc *descs;  /* every node's sources and gates */
    int64_t *deps;    /* what every node's dependency list points into (core/deps.h) */
    plan_rec *recs;   /* the runs of nodes recorded so far */
    int nrecs, caprecs;
    double *node_ms;
    int64_t *stage_first; /* per stage: its first node and node count (stages are contiguous) */
    int64_t *stage_count;
    int nstages;
    ex_plan_stats stats;
    ex_comm comm;     /* ex_plan_set_comm (size 0: none, a group of one) */
    bool device_sums; /* the backend runs ALLREDUCE nodes through comm's device functions */
    char error[512];
};

/** Describes tensor t as placed by the plan. */
void ex__plan_desc(const ex_plan *p, const ex_tensor *t, ex_tdesc *d);
/** Frees every recording the backend made for the plan. */
void ex__plan_forget(ex_plan *p);
/** Records a failure message in the plan and returns st. */
ex_status ex__plan_fail(ex_plan *p, ex_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
