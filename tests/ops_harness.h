/* The op suite's harness: a case is a table entry naming its operands (shape, data,
 * optional view), a builder, and a double-precision reference. The driver builds the
 * graph, runs it on the backend under test with poisoned memory, checks the forward
 * result against the reference (NMSE within the op's tolerance), checks the gradient of
 * every differentiable operand against central differences of the reference, and records
 * which ops each plan ran so the suite can demand full coverage. */
#ifndef EXAPT_TESTS_OPS_HARNESS_H
#define EXAPT_TESTS_OPS_HARNESS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/backend_iface.h"
#include "exapt/exapt.h"

/** Gradient bound, NMSE of the backend's gradient against central differences of the
 *  double reference. Correct f32 implementations land at 3e-11 or below on these cases
 *  (f32 rounding of gradients accumulated over a few hundred terms, and the differences'
 *  truncation error at the steps used); 1e-8 leaves room for other summation orders. One
 *  wrong element among n shifts the directional derivative by about 1/sqrt(n) of itself,
 *  an NMSE near 1/n >= 1e-4 for these shapes, far above the bound. */
#define GRAD_TOL 1e-8
/** Default relative finite-difference step: h = STEP * max(1, |x|). */
#define FD_STEP 1e-3
/** Coordinates checked one by one per case, besides the directional derivative. */
#define FD_COORDS 20

#define MAX_ROOTS 8

/** What the whole program shares: the backend under test and the ops seen so far. */
typedef struct suite {
    const char *backend_name;
    ex_backend *be;
    bool seen[EX_OP_COUNT];
    bool grad_checked[EX_OP_COUNT]; /* ops whose gradient some case checked */
    bool verbose;
    double worst_fwd[EX_OP_COUNT]; /* largest forward NMSE / tolerance seen per op */
    double worst_grad;             /* largest gradient NMSE seen */
    const char *worst_grad_case;
} suite;

/** splitmix64: the tests' own generator, independent of the library's Philox. */
typedef struct rng {
    uint64_t s;
} rng;

uint64_t rng_next(rng *r);
/** Uniform double in [lo, hi). */
double rng_uniform(rng *r, double lo, double hi);
/** Uniform integer in [0, n). */
int64_t rng_below(rng *r, int64_t n);
/** A generator seeded from a string (a case's name), so cases do not depend on order. */
rng rng_from(const char *name);

/* ---- the table of cases ---- */

/** Kind of an operand root. */
enum { R_IN, R_PARAM, R_STATE, R_I32 };
/** Data of an operand root (f32 values are rounded to float before use). */
enum {
    G_UNI,      /* uniform [a, b) */
    G_AWAY,     /* random sign times uniform [a, b): away from 0 (relu's kink) */
    G_DISTINCT, /* a shuffled grid of spacing a around 0: no ties (max, max_pool) */
    G_INT,      /* integers uniform in [a, b) (i32 roots) */
    G_CONST,    /* every element a */
    G_NAN       /* NaN: an operand the op must never read */
};
/** View applied to a root to make the op's operand. */
enum { V_NONE, V_SLICE, V_TRANSPOSE };
/** Backward check of a case. */
enum {
    B_NONE,     /* no gradient (non-differentiable op, or checked elsewhere) */
    B_FD,       /* central differences of the reference */
    B_IDENTITY, /* straight-through: d loss / d x must be exactly r (through the view) */
    B_HOOK      /* gradients read; the after hook checks them (ties: no derivative exists) */
};

/** One operand: a root tensor and the view of it the op receives. */
typedef struct rspec {
    const char *name;
    int kind;
    bool grad;    /* request the root's gradient (inputs) and check it */
    bool nocheck; /* gradient requested but not checked (e.g. inactive candidates) */
    int ndim;
    int64_t ne[4];
    int gen;
    double a, b;
    int view;
    int v0, v1, v2; /* slice: dim, start, len; transpose: d0, d1 */
} rspec;

/* A table entry: {CASE("add", EX_OP_ADD, build, ref, 2), .r = {...}, .bwd = B_FD}. */
#define CASE(nm, op_, build_, ref_, nr_)                                                           \
    .name = (nm), .op = (op_), .build = (build_), .ref = (ref_), .nr = (nr_)
/* Shorthands for the tables: {GIN("x"), SHAPE(5, 7, 11, 13), UNI(-1, 1), TRANS(2, 3)}. */
#define NDIM(...) ((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define SHAPE(...) .ndim = NDIM(__VA_ARGS__), .ne = {__VA_ARGS__}
#define GIN(nm) .name = nm, .kind = R_IN, .grad = true
#define IN(nm) .name = nm, .kind = R_IN
#define PAR(nm) .name = nm, .kind = R_PARAM, .grad = true
#define STATE(nm) .name = nm, .kind = R_STATE
#define I32(nm) .name = nm, .kind = R_I32
#define UNI(lo, hi) .gen = G_UNI, .a = (lo), .b = (hi)
#define AWAY(lo, hi) .gen = G_AWAY, .a = (lo), .b = (hi)
#define DISTINCT(spacing) .gen = G_DISTINCT, .a = (spacing)
#define INTS(lo, hi) .gen = G_INT, .a = (lo), .b = (hi)
#define CONST(v) .gen = G_CONST, .a = (v)
#define POISON .gen = G_NAN
#define SLICE(dim, start, len) .view = V_SLICE, .v0 = (dim), .v1 = (start), .v2 = (len)
#define TRANS(d0, d1) .view = V_TRANSPOSE, .v0 = (d0), .v1 = (d1)

typedef struct env env;
typedef struct tcase tcase;

/** Builds the op on the operands x (views applied); returns the output. */
typedef ex_tensor *(*build_fn)(env *e, ex_tensor *const *x);
/** Computes the reference output from e->od (operands as contiguous doubles). */
typedef void (*ref_fn)(const env *e, double *y);
/** A hook with access to everything of the running case. */
typedef void (*hook_fn)(env *e);

struct tcase {
    const char *name;
    ex_op op; /* the op this case checks: its plan must contain it */
    build_fn build;
    ref_fn ref;
    int nr;
    rspec r[MAX_ROOTS];
    ref_fn dref; /* the function whose derivative the gradient is (straight-through ops);
                    NULL: ref */
    int ip[8];
    double fp[4];
    int bwd;
    double step;     /* relative FD step; 0: FD_STEP */
    hook_fn init;    /* adjusts generated data before it is written */
    hook_fn prepare; /* after the run, before the reference (e.g. infers random masks) */
    hook_fn after;   /* extra checks after forward and backward */
    int flags;
};

/** tcase.flags */
enum {
    F_NORERUN = 1, /* a second run legitimately differs (optimizer steps): skip that check */
    F_PROFILE = 2  /* profiled runs: GPU backends launch node by node, so no node pairs */
};

/** A running case. */
struct env {
    suite *s;
    const tcase *c;
    ex_ctx *ctx;
    ex_plan *plan;
    rng rng;
    uint64_t seed; /* the context's Philox seed */
    int failures;
    /* roots and operands */
    ex_tensor *root[MAX_ROOTS], *opnd[MAX_ROOTS];
    int64_t rn[MAX_ROOTS]; /* root elements */
    double *rd[MAX_ROOTS]; /* root data */
    int ond[MAX_ROOTS];    /* operand dims */
    int64_t one[MAX_ROOTS][4];
    int64_t ost[MAX_ROOTS][4], ooff[MAX_ROOTS]; /* operand view of the root's elements */
    int64_t on[MAX_ROOTS];
    double *od[MAX_ROOTS];  /* operand data, contiguous */
    int32_t *oi[MAX_ROOTS]; /* the same as i32 (i32 roots) */
    /* output, loss weights, gradients */
    ex_tensor *y, *r, *grad[MAX_ROOTS];
    int ynd;
    int64_t yne[4], ny;
    char yshape[64];
    double *yv, *yr, *rv, *gv[MAX_ROOTS];
    void *scratch; /* case-specific, freed by the driver */
};

/* ---- helpers shared by the families ---- */

/** Records a failed check of the running case with a message (does not stop it). */
void case_fail(env *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/** Sum (y - ref)^2 / max(sum ref^2, 1e-30); NaN if y holds a NaN. */
double nmse(const double *y, const double *ref, int64_t n);
/** Checks nmse(y, ref) <= tol, naming what was compared. Returns whether it passed. */
bool check_nmse(env *e, const char *what, const double *y, const double *ref, int64_t n,
                double tol);
/** Plans every node of ctx with poisoned memory and records the ops seen. */
ex_status plan_graph(suite *s, ex_ctx *ctx, ex_plan **plan, char *msg, size_t len);
/** Writes, runs, reads; false (with a recorded failure) when the library reports one. */
bool write_f(env *e, ex_tensor *t, const double *v, int64_t n);
bool write_i(env *e, ex_tensor *t, const int32_t *v, int64_t n);
bool run_plan(env *e);
bool read_f(env *e, ex_tensor *t, double *v, int64_t n);
/** Plans every node of ctx with or without groups (ex_plan_opts.no_group); *launches
 *  receives the plan's launch count (0 when planning failed, which prints why). */
ex_status plan_grouped(suite *s, ex_ctx *ctx, bool grouped, ex_plan **plan, int64_t *launches);
/** Gives node n alone to the backend and waits for it; msg receives the backend's message
 *  on failure ("" on success). */
ex_status node_run(const suite *s, const ex_node_exec *n, char *msg, size_t len);
/** Whether a node given to the backend directly ended as wanted: st is want, a failure's
 *  message msg names needle, and value (what it wrote) holds; else prints the case under
 *  op and what, with note (what was read back, or "") after it. */
bool node_case_ok(const suite *s, ex_op op, const char *what, ex_status st, const char *msg,
                  ex_status want, const char *needle, bool value, const char *note);
/** Whether the plan runs a node of op. */
bool plan_has(const ex_plan *plan, ex_op op);
/** Copies root k's data into operand k (through its view), and back. */
void gather_root(env *e, int k);
void scatter_root(env *e, int k);
/** Output shape padded on the left to 4 dims. */
void yshape4(const env *e, int64_t ne[4]);
/** Reshape of the operand shape of root k padded on the left to 4 dims. */
void shape4(const env *e, int k, int64_t ne[4]);
/** The product of ne[0..n-1]. */
int64_t numel_of(int n, const int64_t *ne);
/** A dense row-major descriptor of nd dims ne, dtype dt, at byte offset at of buf: for nodes
 *  handed to a backend directly. */
ex_tdesc dense_desc(ex_buffer *buf, uint64_t at, ex_dtype dt, int nd, const int64_t *ne);
void *xcalloc(size_t n, size_t size);

/** Starts a case by hand (custom checks): a fresh context seeded for the case. */
void env_open(env *e, suite *s, const tcase *c);
/** Frees everything env_open and the driver allocated. */
void env_close(env *e);
/** Runs every case of a table; fails the calling cmocka test if any check failed. */
void run_table(suite *s, const tcase *cases, int n);
/** Runs one case; returns its failed checks. */
int run_case(suite *s, const tcase *c);

/* ---- the families (each a cmocka test) ---- */
void family_elementwise(void **state);
void family_reduce(void **state);
void family_softmax(void **state);
void family_conv(void **state);
void family_gemm(void **state);
void family_pool(void **state);
void family_batchnorm(void **state);
/** A synchronized batch norm's node forms, alone and assembled over ranks. */
void family_sync_batchnorm(void **state);
void family_nas(void **state);
void family_random(void **state);
/** The quantized inference ops, bit for bit against an integer reference. */
void family_quant(void **state);
/** Malformed fused requantizes of the int8 convolutions (sources, dst dtype, ip7). */
void qconv_rq_errors(void **state);
/** QCONCAT nodes, well formed and malformed, given to the backend directly: refused before
 *  anything is written. */
void qconcat_node_errors(void **state);
/** int8 element-wise nodes (QUANTIZE, DEQUANTIZE, REQUANTIZE, QADD, QRELU), well formed and
 *  malformed, given to the backend directly: refused before anything is read or written. */
void qew_node_errors(void **state);
/** Malformed windows of the int8 convolutions (stride, padding, shapes, bias) and pools
 *  (kernel, stride, padding, shapes) refused. */
void qconv_window_errors(void **state);
void family_optim(void **state);
/** Convolution nodes with malformed fused-ReLU flags, given to the backend directly. */
void conv_flag_errors(void **state);
/** Malformed MATMUL, LINEAR, PWCONV and PWCONV_BWD_FILTER nodes (sources, ranks, shapes, a
 *  broadcasting dst) refused alike by every backend. */
void gemm_node_errors(void **state);
/** Batch norm's backward nodes with a bad ip1 (x-hat flag) fail alone, with a message. */
void bn_flag_errors(void **state);
/** A synchronized batch norm's node forms (BN_STATS ip1, BN_BWD_DATA ip2), well formed and
 *  malformed, given to the backend directly (CUDA: the well-formed ones refused). */
void bn_sync_flag_errors(void **state);
/** Clipped and plain SGD nodes, well formed and malformed, given to the backend directly. */
void sgd_clip_node_errors(void **state);
/** Consecutive SGD and Adam nodes of odd sizes and views, planned with and without groups
 *  (core/group.h): the launches the plan counts, the runs bit for bit the same, both
 *  against the reference. */
void update_groups(void **state);
/** Softmax-family nodes (cross entropy and its backward pass, softmax and its backward
 *  pass), well formed and malformed, given to the backend directly. */
void softmax_node_errors(void **state);
/** The search's own nodes (the NAS family: mixed sum and its weight gradient, the row ops;
 *  GRAD_NORM; the random draws), well formed and malformed, given to the backend directly. */
void search_node_errors(void **state);

#endif
