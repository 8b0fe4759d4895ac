/* exapt bench's internals: the shapes, the catalogue of op cases, running one case, and
 * the report. docs/bench.md describes the command and its output. */
#ifndef EXAPT_APPS_BENCH_H
#define EXAPT_APPS_BENCH_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "exapt/exapt.h"

/** The sizes one bench run builds its graphs from. */
typedef struct bench_dims {
    const char *name;               /**< "paper", "small" or "large" */
    int64_t n, c, h, w;             /**< the activation, NCHW */
    int64_t classes;                /**< logits [n, classes] */
    int64_t features;               /**< classifier input [n, features] */
    int64_t edges, cands;           /**< architecture weights [edges, cands] */
    int64_t flat;                   /**< parameter count for the optimizer ops */
    int64_t gemm_m, gemm_k, gemm_n; /**< matmul [m, k] x [k, n] */
} bench_dims;

/** The dims called name, or NULL when there are none. */
const bench_dims *bench_dims_get(const char *name);

/** How a leaf tensor is filled before the first run. */
typedef enum bench_fill {
    BENCH_UNIFORM,  /**< uniform in [-1, 1) */
    BENCH_POSITIVE, /**< uniform in [0.01, 1): variances, probabilities */
    BENCH_VALUES,   /**< v[0..nv-1] repeated */
    BENCH_LABELS,   /**< i32 uniform in [0, v[0]) */
    BENCH_COUNTER,  /**< i32 Philox counter {1, 0} */
} bench_fill;

/** What kind of tensor a leaf is. BENCH_DIFF leaves become parameters in a backward case
 *  (so the gradient flows through the op) and inputs otherwise. */
typedef enum bench_role { BENCH_INPUT, BENCH_PARAM, BENCH_STATE, BENCH_DIFF } bench_role;

typedef struct bench_leaf {
    ex_tensor *t;
    bench_fill fill;
    int nv;
    float v[4];
} bench_leaf;

#define BENCH_MAX_LEAVES 16

/** A graph being built for one case. */
typedef struct bench_graph {
    ex_ctx *ctx;
    const bench_dims *d;
    int backward; /**< the case times a backward op */
    int nleaf;
    bench_leaf leaf[BENCH_MAX_LEAVES];
    ex_tensor *subject; /**< the operand whose shape the result names */
} bench_graph;

/** Adds a leaf (input, parameter or state) the runner fills before running. */
ex_tensor *bench_leaf_new(bench_graph *g, bench_role role, bench_fill fill, ex_dtype dtype,
                          int ndim, const int64_t *ne, const char *name);

/** Builds the forward graph of a case and returns its output. */
typedef ex_tensor *(*bench_build_fn)(bench_graph *g);

/** How one op is exercised. */
typedef struct bench_case {
    bench_build_fn build;
    int backward;      /**< time the op in the gradient of sum(y * r) */
    const char *about; /**< the configuration in words, e.g. "3x3 s1 p1, C->C" */
} bench_case;

/** The case of op, or NULL when the catalogue has none. */
const bench_case *bench_case_get(ex_op op);

/** One op's measurement. */
typedef struct bench_result {
    ex_op op;
    char shape[64];
    const char *about;
    double ms;          /**< median over the timed runs of the op's node times summed */
    uint64_t min_bytes; /**< summed over the op's nodes, per run */
    uint64_t flops;
    int nodes; /**< how many nodes of the op a run has */
    int iters;
} bench_result;

/** Runs one case on be: plans with profiling, writes random leaves, runs warmup then
 *  iters times. On failure writes the library's message into msg and returns non-zero. */
ex_status bench_run_case(ex_backend *be, ex_op op, const bench_case *c, const bench_dims *d,
                         int warmup, int iters, bench_result *res, char *msg, size_t msg_len);

/** The machine the benchmark ran on. */
typedef struct bench_machine {
    char hostname[256];
    char cpu[256]; /**< model name from /proc/cpuinfo, or "unknown" */
    int cores;     /**< online logical processors */
} bench_machine;

void bench_machine_get(bench_machine *m);

/** The current time as ISO 8601 UTC ("2025-01-31T12:00:00Z"). */
void bench_utc_now(char *buf, size_t len);

/** What the report says about the run as a whole. */
typedef struct bench_meta {
    const ex_backend_caps *caps;
    double peak_gbs;
    const char *date;      /**< when the benchmark started, ISO 8601 UTC */
    const char *command;   /**< the command line, arguments joined by spaces */
    const char *shape_set; /**< "paper", "small" or "large" */
} bench_meta;

/** The exapt-bench JSON document (version 1), or NULL when out of memory. */
json_t *bench_report_json(const bench_meta *m, const bench_result *r, int n);

/** The human table on f, a header then one row per result. */
void bench_table_header(FILE *f);
void bench_table_row(FILE *f, const bench_result *r, double peak_gbs);

#endif
