/* The CUDA backend: device buffers, transfers through pinned staging on a copy stream,
 * the one switch over ex_op, and the step as a CUDA graph.
 *
 * A node list runs as a CUDA graph: the plan records each list it runs (record), and the
 * first replay captures the graph, which later replays launch; a larger scratch moves
 * the generation and makes each recording capture again. compute() records, replays and
 * forgets a list of its own. Gated nodes are skipped on the device: kernels read the gate
 * and return, and cuBLAS calls sit in a conditional graph node whose condition a
 * one-thread kernel sets from the gate. Profiling runs eagerly, an event pair around each
 * node, reading gates on the host. See docs/cuda.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda/cuda.h"

/* Bytes of each of the two pinned staging buffers. */
#define CU_STAGE_BYTES ((size_t)8 << 20)
/* cuBLAS work space of each handle: set explicitly so that captured calls never allocate. */
#define CU_BLAS_WS_BYTES ((size_t)4 << 20)
/* Streams a captured step may be spread over (schedule.cu), and how many by default; the
 * first is the compute stream. */
#define CU_STREAMS 16
#define CU_STREAMS_DEFAULT 16

/** A recorded node list and its graph. */
struct ex_recording {
    const ex_node_exec *nodes;
    int64_t count;
    cudaGraphExec_t exec; /**< NULL until the first replay */
    uint64_t gen;         /**< the backend's generation it was captured in */
};

typedef struct cu_backend {
    int device;
    cudaStream_t stream;           /**< compute: kernels, cuBLAS, device copies and fills */
    cudaStream_t copy;             /**< host transfers, ordered against stream with events */
    cudaStream_t side;             /**< captures the bodies of conditional nodes */
    cudaStream_t more[CU_STREAMS]; /**< [0] is stream; the others join captured steps */
    cublasHandle_t blas, blas_side;
    cublasHandle_t blas_more[CU_STREAMS]; /**< one per stream of more; [0] is blas */
    void *blas_ws;                        /**< nstreams + 1 work spaces (the last: side) */
    cu_node_flags *flags; /**< sizing pass: each node's scratch, conditional, launch */
    int64_t cap_nodes;    /**< room in flags */
    int cc_major;         /**< the device's compute capability */
    cudaEvent_t *node_ev; /**< capture: events of the nodes waited for */
    int64_t n_node_ev;
    cudaEvent_t ev_fork, ev_join[CU_STREAMS];
    int nstreams; /**< streams a capture uses: EXAPT_CUDA_STREAMS, default CU_STREAMS */
    int pdl;      /**< programmatic dependent launches: sm_90 and up, EXAPT_CUDA_PDL not 0 */
    cudaEvent_t ev_compute, ev_copy, ev_stage[2];
    char *stage[2];       /**< pinned */
    size_t stage_used[2]; /**< bytes of each staging buffer given to uploads in flight */
    int stage_cur;
    long long *status, *status_host;
    float *gate_host; /**< pinned: a gate read in profiling mode */
    char *scratch;
    size_t scratch_bytes;
    uint64_t gen;        /**< moves when the scratch does: graphs captured before capture again */
    cudaEvent_t *events; /**< profiling: two per node */
    int64_t nevents;
    uint64_t host_syncs;                       /**< times the host waited for the device */
    uint64_t allocs, alloc_bytes, allocs_made; /**< device allocations held, made (counters) */
    bool pending; /**< a queued step's status words are fetched but not read */
    const ex_node_exec *pending_nodes;
    int64_t pending_count;
    ex_status late; /**< a queued step's failure, read but not yet returned */
    char late_msg[512];
    bool copy_queued;  /**< uploads queued that the compute stream is not ordered after */
    ex_comm comm;      /**< set_comm: device sums (comm.device_waiting NULL: none) */
    ex_status comm_st; /**< a failure the communicator reported while we waited: sticky */
    char comm_msg[256];
    char msg[512];
} cu_backend;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* With a communicator's device sums queued work may wait on another rank, which may have
 * died or hung: the host polls, asking the communicator, which fails (and aborts its sums,
 * so that the kernels waiting in them end) once a rank failed or its timeout passed. The
 * work then gets AFTER_ABORT_S to drain before the wait gives up. */
#define AFTER_ABORT_S 10.0
static cudaError_t wait_polled(cu_backend *b, cudaStream_t s, cudaEvent_t ev)
{
    double t0 = now_s(), failed_at = 0.0;
    for (unsigned k = 0;; k++) {
        cudaError_t q = s ? cudaStreamQuery(s) : cudaEventQuery(ev);
        if (q != cudaErrorNotReady)
            return q;
        double t = now_s();
        if (b->comm_st == EX_OK) {
            b->comm_st =
                b->comm.device_waiting(b->comm.user, t - t0, b->comm_msg, sizeof b->comm_msg);
            if (b->comm_st != EX_OK)
                failed_at = t;
        } else if (t - failed_at > AFTER_ABORT_S) {
            return cudaErrorLaunchTimeout;
        }
        /* a short step's wait stays short; a long one costs little CPU */
        struct timespec nap = {0, k < 200 ? 20000L : 1000000L};
        nanosleep(&nap, NULL);
    }
}

/* Every wait of the host for the device goes through these two, so they can be counted. */
static cudaError_t wait_stream(cu_backend *b, cudaStream_t s)
{
    b->host_syncs++;
    return b->comm.device_waiting ? wait_polled(b, s, NULL) : cudaStreamSynchronize(s);
}

static cudaError_t wait_event(cu_backend *b, cudaEvent_t e)
{
    b->host_syncs++;
    return b->comm.device_waiting ? wait_polled(b, NULL, e) : cudaEventSynchronize(e);
}

static cu_exec exec_of(cu_backend *b)
{
    cu_exec e;
    memset(&e, 0, sizeof e);
    e.stream = b->stream;
    e.blas = b->blas;
    e.status = b->status;
    e.ticket = (unsigned *)(b->status + CU_STATUS_WORDS);
    e.scratch = b->scratch;
    e.scratch_bytes = b->scratch_bytes;
    e.msg = b->msg;
    e.msg_len = sizeof b->msg;
    e.pdl = b->pdl;
    e.cc_major = b->cc_major;
    e.comm = b->comm.allreduce_device ? &b->comm : NULL;
    return e;
}

static ex_status bk_check(cu_backend *b, cudaError_t err, const char *what)
{
    if (b->comm_st != EX_OK) { /* whatever the device says after the sums were aborted */
        snprintf(b->msg, sizeof b->msg, "%s: %s", what, b->comm_msg);
        return b->comm_st;
    }
    cu_exec e = exec_of(b);
    return cu_check(&e, err, what);
}

/* One cuBLAS work space per stream of a capture, and one for the side stream. */
static size_t blas_ws_bytes(const cu_backend *b)
{
    return (size_t)(b->nstreams + 1) * CU_BLAS_WS_BYTES;
}

/* Counts a device allocation made (ex_backend_counters). */
static void count_alloc(cu_backend *b, size_t bytes)
{
    b->allocs++;
    b->allocs_made++;
    b->alloc_bytes += bytes;
}

/* cudaMalloc, counted; the error as bk_check reports it. */
static ex_status dev_alloc(cu_backend *b, void **p, size_t bytes, const char *what)
{
    ex_status st = bk_check(b, cudaMalloc(p, bytes), what);
    if (st == EX_OK)
        count_alloc(b, bytes);
    return st;
}

/* cudaFree of what dev_alloc gave (NULL: nothing). */
static void dev_free(cu_backend *b, void *p, size_t bytes)
{
    if (!p)
        return;
    cudaFree(p);
    b->allocs--;
    b->alloc_bytes -= bytes;
}

/* Every entry point first makes the backend's device current: the application may use
 * other devices on the same thread. */
static ex_status bk_enter(cu_backend *b)
{
    b->msg[0] = '\0';
    return bk_check(b, cudaSetDevice(b->device), "cudaSetDevice");
}

/* ---- the switch ---- */

static ex_status run_node(cu_exec *e, const ex_node_exec *n)
{
    switch (n->op) {
    case EX_OP_ADD: return cu_add(e, n);
    case EX_OP_SUB: return cu_sub(e, n);
    case EX_OP_MUL: return cu_mul(e, n);
    case EX_OP_SCALE: return cu_scale(e, n);
    case EX_OP_AXPY: return cu_axpy(e, n);
    case EX_OP_RELU: return cu_relu(e, n);
    case EX_OP_RELU_BWD: return cu_relu_bwd(e, n);
    case EX_OP_FILL: return cu_fill(e, n);
    case EX_OP_COPY: return cu_copy(e, n);
    case EX_OP_DROP_PATH: return cu_drop_path(e, n);
    case EX_OP_SUM: return cu_sum(e, n);
    case EX_OP_MEAN: return cu_mean(e, n);
    case EX_OP_MAX: return cu_max(e, n);
    case EX_OP_MAX_BWD: return cu_max_bwd(e, n);
    case EX_OP_SOFTMAX: return cu_softmax(e, n);
    case EX_OP_SOFTMAX_BWD: return cu_softmax_bwd(e, n);
    case EX_OP_LOG_SOFTMAX: return cu_log_softmax(e, n);
    case EX_OP_LOG_SOFTMAX_BWD: return cu_log_softmax_bwd(e, n);
    case EX_OP_CROSS_ENTROPY: return cu_cross_entropy(e, n);
    case EX_OP_CROSS_ENTROPY_BWD: return cu_cross_entropy_bwd(e, n);
    case EX_OP_ACCURACY: return cu_accuracy(e, n);
    case EX_OP_CONV2D: return cu_conv2d(e, n);
    case EX_OP_CONV2D_BWD_DATA: return cu_conv2d_bwd_data(e, n);
    case EX_OP_CONV2D_BWD_FILTER: return cu_conv2d_bwd_filter(e, n);
    case EX_OP_DWCONV2D: return cu_dwconv2d(e, n);
    case EX_OP_DWCONV2D_BWD_DATA: return cu_dwconv2d_bwd_data(e, n);
    case EX_OP_DWCONV2D_BWD_FILTER: return cu_dwconv2d_bwd_filter(e, n);
    case EX_OP_PWCONV: return cu_pwconv(e, n);
    case EX_OP_PWCONV_BWD_FILTER: return cu_pwconv_bwd_filter(e, n);
    case EX_OP_PWCONV_BN: return cu_pwconv_bn(e, n);
    case EX_OP_MATMUL: return cu_matmul(e, n);
    case EX_OP_LINEAR: return cu_linear(e, n);
    case EX_OP_AVG_POOL: return cu_avg_pool(e, n);
    case EX_OP_AVG_POOL_BWD: return cu_avg_pool_bwd(e, n);
    case EX_OP_MAX_POOL: return cu_max_pool(e, n);
    case EX_OP_MAX_POOL_BWD: return cu_max_pool_bwd(e, n);
    case EX_OP_GLOBAL_AVG_POOL: return cu_global_avg_pool(e, n);
    case EX_OP_BN_STATS: return cu_bn_stats(e, n);
    case EX_OP_BN_APPLY: return cu_bn_apply(e, n);
    case EX_OP_BN_BWD_REDUCE: return cu_bn_bwd_reduce(e, n);
    case EX_OP_BN_BWD_DATA: return cu_bn_bwd_data(e, n);
    case EX_OP_MIXED_SUM: return cu_mixed_sum(e, n);
    case EX_OP_MIXED_SUM_BWD_W: return cu_mixed_sum_bwd_w(e, n);
    case EX_OP_GUMBEL_SOFTMAX: return cu_gumbel_softmax(e, n);
    case EX_OP_GUMBEL_SOFTMAX_BWD: return cu_gumbel_softmax_bwd(e, n);
    case EX_OP_HARDMAX_ST: return cu_hardmax_st(e, n);
    case EX_OP_ENTROPY: return cu_entropy(e, n);
    case EX_OP_ENTROPY_BWD: return cu_entropy_bwd(e, n);
    case EX_OP_TOPK_MASK: return cu_topk_mask(e, n);
    case EX_OP_SGD: return cu_sgd(e, n);
    case EX_OP_ADAM: return cu_adam(e, n);
    case EX_OP_GRAD_NORM: return cu_grad_norm(e, n);
    case EX_OP_CLIP: return cu_clip(e, n);
    case EX_OP_RAND_UNIFORM: return cu_rand_uniform(e, n);
    case EX_OP_RAND_NORMAL: return cu_rand_normal(e, n);
    case EX_OP_QUANTIZE: return cu_quantize(e, n);
    case EX_OP_DEQUANTIZE: return cu_dequantize(e, n);
    case EX_OP_REQUANTIZE: return cu_requantize(e, n);
    case EX_OP_QADD: return cu_qadd(e, n);
    case EX_OP_QCONCAT: return cu_qconcat(e, n);
    case EX_OP_QCONV2D: return cu_qconv2d(e, n);
    case EX_OP_QDWCONV2D: return cu_qdwconv2d(e, n);
    case EX_OP_QPWCONV: return cu_qpwconv(e, n);
    case EX_OP_QLINEAR: return cu_qlinear(e, n);
    case EX_OP_QRELU: return cu_qrelu(e, n);
    case EX_OP_QMAX_POOL: return cu_qmax_pool(e, n);
    case EX_OP_QAVG_POOL: return cu_qavg_pool(e, n);
    case EX_OP_QGLOBAL_AVG_POOL: return cu_qglobal_avg_pool(e, n);
    case EX_OP_ALLREDUCE: return cu_allreduce(e, n);
    case EX_OP_COUNT: break;
    }
    return cu_fail(e, EX_ERR_UNSUPPORTED, "cuda: op %d is not in the catalogue", (int)n->op);
}

/* ---- gates ---- */

static ex_status gate_check(cu_exec *e, const ex_node_exec *n)
{
    const ex_tdesc *g = n->gate;
    if (g && (!ex_td_valid(g, EX_F32) || n->gate_index < 0 || n->gate_index >= ex_td_numel(g)))
        return cu_fail(e, EX_ERR_ARG, "%s: gate must be f32 with index %lld inside it",
                       ex_op_name(n->op), (long long)n->gate_index);
    return EX_OK;
}

static const float *gate_ptr(const ex_node_exec *n)
{
    return n->gate ? cu_f32(n->gate) + ex_td_at(n->gate, n->gate_index) : NULL;
}

__global__ void set_condition_kernel(cudaGraphConditionalHandle h, const float *gate)
{
    cudaGraphSetConditional(h, *gate != 0.0f);
}

/* Appends to the graph being captured on e->stream a kernel that reads the gate and an
 * "if" node after it, and captures the node's work into the body on b->side (bodies
 * share it and its cuBLAS handle: the schedule orders them). */
static ex_status run_conditional(cu_backend *b, cu_exec *e, const ex_node_exec *n)
{
    cudaStreamCaptureStatus cs;
    cudaGraph_t graph;
    const cudaGraphNode_t *deps = NULL;
    const cudaGraphEdgeData *edges = NULL;
    size_t ndeps = 0;
    cudaGraphConditionalHandle h;
    ex_status st = cu_check(e, cudaStreamGetCaptureInfo(e->stream, &cs, NULL, &graph), "capture");
    if (st == EX_OK)
        st = cu_check(e, cudaGraphConditionalHandleCreate(&h, graph, 0, 0), "conditional handle");
    if (st != EX_OK)
        return st;
    set_condition_kernel<<<1, 1, 0, e->stream>>>(h, e->gate);
    st = cu_launched(e, "gate condition");
    if (st == EX_OK)
        st = cu_check(e,
                      cudaStreamGetCaptureInfo(e->stream, &cs, NULL, &graph, &deps, &edges, &ndeps),
                      "capture");
    cudaGraphNodeParams p = {cudaGraphNodeTypeConditional, {0, 0, 0}, {{0}}, 0};
    p.conditional.handle = h;
    p.conditional.type = cudaGraphCondTypeIf;
    p.conditional.size = 1;
    cudaGraphNode_t node;
    if (st == EX_OK)
        st =
            cu_check(e, cudaGraphAddNode(&node, graph, deps, edges, ndeps, &p), "conditional node");
    if (st == EX_OK)
        st = cu_check(e,
                      cudaStreamUpdateCaptureDependencies(e->stream, &node, NULL, 1,
                                                          cudaStreamSetCaptureDependencies),
                      "capture dependencies");
    if (st == EX_OK)
        st = cu_check(e,
                      cudaStreamBeginCaptureToGraph(b->side, p.conditional.phGraph_out[0], NULL,
                                                    NULL, 0, cudaStreamCaptureModeThreadLocal),
                      "conditional body");
    if (st != EX_OK)
        return st;
    cu_exec body = *e;
    body.stream = b->side;
    body.blas = b->blas_side;
    st = run_node(&body, n);
    cudaGraph_t g;
    ex_status end = cu_check(e, cudaStreamEndCapture(b->side, &g), "conditional body");
    return st != EX_OK ? st : end;
}

/* ---- scratch and the sizing pass ---- */

/* Graphs hold the scratch's address, so a new scratch moves the generation. */
static ex_status scratch_reserve(cu_backend *b, size_t need)
{
    if (need <= b->scratch_bytes)
        return EX_OK;
    ex_status st = bk_check(b, wait_stream(b, b->stream), "cudaStreamSynchronize");
    if (st != EX_OK)
        return st;
    b->gen++;
    dev_free(b, b->scratch, b->scratch_bytes);
    b->scratch = NULL;
    b->scratch_bytes = 0;
    size_t bytes = need + need / 4;
    void *p = NULL;
    st = dev_alloc(b, &p, bytes, "scratch");
    if (st != EX_OK)
        return st;
    b->scratch = (char *)p;
    b->scratch_bytes = bytes;
    return EX_OK;
}

/* Room for count nodes' flags. */
static ex_status nodes_reserve(cu_backend *b, int64_t count)
{
    if (count <= b->cap_nodes)
        return EX_OK;
    cu_node_flags *f = (cu_node_flags *)realloc(b->flags, sizeof *f * (size_t)count);
    if (!f) {
        snprintf(b->msg, sizeof b->msg, "cuda: out of host memory for %lld nodes",
                 (long long)count);
        return EX_ERR_NOMEM;
    }
    b->flags = f;
    b->cap_nodes = count;
    return EX_OK;
}

/* Checks every node as the CPU backend would and sizes the scratch: each node's need
 * (the schedule gives concurrent nodes their own slices of a ring of several times the
 * largest) and whether it runs as a conditional node. */
static ex_status size_pass(cu_backend *b, const ex_node_exec *nodes, int64_t count, size_t *ring)
{
    cu_exec e = exec_of(b);
    e.dry = 1;
    size_t most = 0;
    ex_status st = nodes_reserve(b, count);
    int64_t head = 0, end = 0; /* the launch that nodes [head, end) make */
    for (int64_t i = 0; i < count && st == EX_OK; i++) {
        e.node = i;
        e.need = 0;
        st = gate_check(&e, &nodes[i]);
        if (st == EX_OK)
            st = run_node(&e, &nodes[i]);
        cu_node_flags *f = &b->flags[i];
        f->need = e.need;
        f->conditional = nodes[i].gate && cu_node_uses_blas(&nodes[i]);
        if (i >= end) {
            head = i;
            end = i + (nodes[i].group > 1 ? nodes[i].group
                       : i + 1 < count && cu_bn_pair(&nodes[i], &nodes[i + 1], b->cc_major) ? 2
                                                                                            : 1);
        }
        f->span = i == head ? (int32_t)(end - head) : 0;
        f->back = (int32_t)(i - head);
        if (e.need > b->flags[head].need) /* the launch's scratch: what its nodes need */
            b->flags[head].need = e.need;
        most = e.need > most ? e.need : most;
    }
    *ring = most * 8;
    return st != EX_OK ? st : scratch_reserve(b, *ring);
}

/* ---- capture ---- */

/* Events for the n nodes of a capture that others wait for. */
static ex_status node_events_reserve(cu_backend *b, int64_t n)
{
    if (n <= b->n_node_ev)
        return EX_OK;
    cudaEvent_t *ev = (cudaEvent_t *)realloc(b->node_ev, sizeof *ev * (size_t)n);
    if (!ev) {
        snprintf(b->msg, sizeof b->msg, "cuda: out of host memory for %lld events", (long long)n);
        return EX_ERR_NOMEM;
    }
    b->node_ev = ev;
    for (; b->n_node_ev < n; b->n_node_ev++) {
        ex_status st =
            bk_check(b, cudaEventCreateWithFlags(&b->node_ev[b->n_node_ev], cudaEventDisableTiming),
                     "cudaEventCreate");
        if (st != EX_OK)
            return st;
    }
    return EX_OK;
}

/* Node i on its stream of the schedule: the waits, then its work with its own scratch
 * slice and ticket, then the event others wait for. ev[i] is its event's index. */
static ex_status capture_node(cu_backend *b, const ex_node_exec *nodes, int64_t i,
                              const cu_sched *sc, const int64_t *ev)
{
    const cu_sched_node *sn = &sc->node[i];
    if (b->flags[i].span == 0)
        return EX_OK; /* launched with the first node of its launch */
    cu_exec e = exec_of(b);
    e.stream = b->more[sn->stream];
    e.blas = b->blas_more[sn->stream];
    e.node = i;
    e.gate = gate_ptr(&nodes[i]);
    e.scratch = b->scratch + sn->scratch_off;
    e.scratch_bytes = sn->scratch_bytes;
    e.ticket += i % CU_SCHED_TICKETS;
    ex_status st = EX_OK;
    for (int32_t k = 0; k < sn->nwait && st == EX_OK; k++)
        st =
            cu_check(&e, cudaStreamWaitEvent(e.stream, b->node_ev[ev[sc->waits[sn->wait0 + k]]], 0),
                     "cudaStreamWaitEvent");
    if (st == EX_OK)
        st = nodes[i].group > 1        ? cu_update_group(&e, &nodes[i], nodes[i].group)
             : b->flags[i].span == 2   ? cu_bn_pair_run(&e, &nodes[i], &nodes[i + 1])
             : b->flags[i].conditional ? run_conditional(b, &e, &nodes[i])
                                       : run_node(&e, &nodes[i]);
    if (st == EX_OK && sn->record)
        st = cu_check(&e, cudaEventRecord(b->node_ev[ev[i]], e.stream), "cudaEventRecord");
    return st;
}

/* The other streams join the capture after its start and end it before its end. */
static ex_status capture_fork_join(cu_backend *b, int join)
{
    ex_status st = EX_OK;
    for (int s = 1; s < b->nstreams && st == EX_OK; s++) {
        cudaStream_t from = join ? b->more[s] : b->stream, to = join ? b->stream : b->more[s];
        cudaEvent_t ev = join ? b->ev_join[s] : b->ev_fork;
        st = bk_check(b, cudaEventRecord(ev, from), "cudaEventRecord");
        if (st == EX_OK)
            st = bk_check(b, cudaStreamWaitEvent(to, ev, 0), "cudaStreamWaitEvent");
    }
    return st;
}

/* Captures the node list over the streams of its schedule and instantiates it. */
static ex_status capture(cu_backend *b, const ex_node_exec *nodes, int64_t count, size_t ring,
                         cudaGraphExec_t *out)
{
    cu_sched sc;
    int64_t *ev = NULL, nev = 0;
    ex_status st = cu_schedule(nodes, count, b->flags, b->nstreams, ring, &sc);
    if (st == EX_OK && !(ev = (int64_t *)malloc(sizeof *ev * (size_t)(count > 0 ? count : 1))))
        st = EX_ERR_NOMEM;
    for (int64_t i = 0; i < count && st == EX_OK; i++)
        ev[i] = sc.node[i].record ? nev++ : -1;
    if (st == EX_ERR_NOMEM)
        snprintf(b->msg, sizeof b->msg, "cuda: out of host memory scheduling %lld nodes",
                 (long long)count);
    if (st == EX_OK)
        st = node_events_reserve(b, nev);
    if (st == EX_OK)
        st = bk_check(b, cudaStreamBeginCapture(b->stream, cudaStreamCaptureModeThreadLocal),
                      "cudaStreamBeginCapture");
    if (st == EX_OK) {
        st = capture_fork_join(b, 0);
        for (int64_t i = 0; i < count && st == EX_OK; i++)
            st = capture_node(b, nodes, i, &sc, ev);
        if (st == EX_OK)
            st = capture_fork_join(b, 1);
        cudaGraph_t graph = NULL;
        cudaError_t err = cudaStreamEndCapture(b->stream, &graph);
        if (st == EX_OK)
            st = bk_check(b, err, "cudaStreamEndCapture");
        if (st == EX_OK)
            st = bk_check(b, cudaGraphInstantiate(out, graph, 0), "cudaGraphInstantiate");
        if (graph)
            cudaGraphDestroy(graph);
    }
    cudaGetLastError(); /* a failed capture leaves nothing sticky behind */
    free(ev);
    cu_sched_free(&sc);
    return st;
}

/* The recording's graph, captured again when the scratch moved since. The nodes are
 * checked (the sizing pass) before each capture. */
static ex_status graph_of(cu_backend *b, ex_recording *r)
{
    if (r->exec && r->gen == b->gen)
        return EX_OK;
    size_t ring = 0;
    ex_status st = size_pass(b, r->nodes, r->count, &ring);
    if (st != EX_OK)
        return st;
    if (r->exec) /* not in flight: a new scratch waited for the stream */
        cudaGraphExecDestroy(r->exec);
    r->exec = NULL;
    st = capture(b, r->nodes, r->count, ring, &r->exec);
    r->gen = b->gen;
    return st;
}

/* ---- the status words ---- */

static ex_status status_reset(cu_backend *b)
{
    /* the ticket after the words too, should a failed step have left it taken */
    return bk_check(b, cudaMemsetAsync(b->status, 0, CU_STATUS_BYTES, b->stream),
                    "cudaMemsetAsync");
}

/* Queues the copy of the status words to the host, behind the step on the stream. */
static ex_status status_fetch(cu_backend *b)
{
    return bk_check(b,
                    cudaMemcpyAsync(b->status_host, b->status, CU_STATUS_WORDS * sizeof(long long),
                                    cudaMemcpyDeviceToHost, b->stream),
                    "cudaMemcpyAsync");
}

/* Turns the status words a step left (fetched, and the step waited for) into a status and
 * a message in b->msg. */
static ex_status status_of(cu_backend *b, const ex_node_exec *nodes, int64_t count)
{
    const unsigned long long *w = (const unsigned long long *)b->status_host;
    if (w[0] == 0)
        return EX_OK;
    long long node = 0xffffffffu - (unsigned)(w[0] >> 32);
    int code = (int)(unsigned)w[0];
    /* the details are the same node's: it wrote all three words, the earliest node wins
     * each (cu_report) */
    long long d1 = (int32_t)(unsigned)w[1], d2 = (int32_t)(unsigned)w[2];
    const ex_node_exec *n = node >= 0 && node < count ? &nodes[node] : NULL;
    const char *op = n ? ex_op_name(n->op) : "?";
    if (code == CU_STATUS_LABEL && n) {
        long long k = n->src[0].ndim > 0 ? (long long)n->src[0].ne[n->src[0].ndim - 1] : 0;
        snprintf(b->msg, sizeof b->msg, "%s: label %lld of row %lld is outside [0, %lld)", op, d2,
                 d1, k);
        return EX_ERR_ARG;
    }
    if (code == CU_STATUS_SHAPE) {
        snprintf(b->msg, sizeof b->msg, "%s: candidate %lld is not f32 of %s's shape", op, d1,
                 n && n->op == EX_OP_MIXED_SUM ? "dst" : "dy");
        return EX_ERR_SHAPE;
    }
    snprintf(b->msg, sizeof b->msg, "cuda: node %lld reported status %d", node, code);
    return EX_ERR_DEVICE;
}

/* Waits for the step and turns what a kernel reported into a status and a message. */
static ex_status status_read(cu_backend *b, const ex_node_exec *nodes, int64_t count)
{
    ex_status st = status_fetch(b);
    if (st == EX_OK)
        st = bk_check(b, wait_stream(b, b->stream), "the step");
    return st != EX_OK ? st : status_of(b, nodes, count);
}

/* A queued step whose status words are fetched but not yet read (the host has waited for
 * the stream since): its status goes to b->late, to be returned by the next call that
 * reports. */
static void collect(cu_backend *b)
{
    if (!b->pending)
        return;
    b->pending = false;
    char keep[sizeof b->msg];
    memcpy(keep, b->msg, sizeof keep);
    b->late = status_of(b, b->pending_nodes, b->pending_count);
    memcpy(b->late_msg, b->msg, sizeof b->late_msg);
    memcpy(b->msg, keep, sizeof keep);
}

/* st, or else the failure a queued step left, once. */
static ex_status with_late(cu_backend *b, ex_status st)
{
    ex_status late = b->late;
    b->late = EX_OK;
    if (st != EX_OK || late == EX_OK)
        return st;
    memcpy(b->msg, b->late_msg, sizeof b->msg);
    return late;
}

/* ---- profiling: eager, timed node by node ---- */

static ex_status events_reserve(cu_backend *b, int64_t n)
{
    if (n <= b->nevents)
        return EX_OK;
    cudaEvent_t *ev = (cudaEvent_t *)realloc(b->events, sizeof *ev * (size_t)n);
    if (!ev) {
        snprintf(b->msg, sizeof b->msg, "cuda: out of host memory for %lld events", (long long)n);
        return EX_ERR_NOMEM;
    }
    b->events = ev;
    for (; b->nevents < n; b->nevents++) {
        ex_status st = bk_check(b, cudaEventCreate(&b->events[b->nevents]), "cudaEventCreate");
        if (st != EX_OK)
            return st;
    }
    return EX_OK;
}

/* Reads a gate on the host, after everything queued before it. */
static ex_status gate_read(cu_backend *b, const ex_node_exec *n, int *off)
{
    ex_status st = bk_check(b,
                            cudaMemcpyAsync(b->gate_host, gate_ptr(n), sizeof(float),
                                            cudaMemcpyDeviceToHost, b->stream),
                            "reading a gate");
    if (st == EX_OK)
        st = bk_check(b, wait_stream(b, b->stream), "reading a gate");
    *off = st == EX_OK && *b->gate_host == 0.0f;
    return st;
}

/* Keeps the device busy for PROFILE_LEAD_NS so that the host's next launches queue up
 * behind it: an event pair then times what the device spent on a node, not the host's
 * launch latency while the device sat idle. */
#define PROFILE_LEAD_NS 200000ull
__global__ void profile_lead_kernel(unsigned long long ns)
{
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    while (t - t0 < ns);
}

/* Whether the device has run out of queued work (the last node's end event is done):
 * then the next node needs a lead. */
static bool device_idle(cu_backend *b, int64_t last)
{
    if (last < 0)
        return true;
    cudaError_t err = cudaEventQuery(b->events[2 * last + 1]);
    return err != cudaErrorNotReady; /* done, or an error the next launch reports */
}

/* Node by node, each between two events; a gated node whose gate is 0 is not run and
 * gets node_ms -1. Whenever the device would otherwise wait for the host, a lead kernel
 * runs before the node's first event. */
static ex_status run_profiled(cu_backend *b, const ex_node_exec *nodes, int64_t count,
                              double *node_ms)
{
    size_t ring = 0;
    ex_status st = size_pass(b, nodes, count, &ring);
    if (st == EX_OK)
        st = events_reserve(b, 2 * count);
    if (st == EX_OK)
        st = status_reset(b);
    cu_exec e = exec_of(b);
    int64_t last = -1; /* the last node launched */
    for (int64_t i = 0; i < count && st == EX_OK; i++) {
        const ex_node_exec *n = &nodes[i];
        int off = 0;
        node_ms[i] = -1.0;
        if (n->gate && (st = gate_read(b, n, &off)) != EX_OK)
            break;
        if (off)
            continue;
        node_ms[i] = 0.0; /* ran: timed below */
        e.node = i;
        if (device_idle(b, last)) {
            profile_lead_kernel<<<1, 1, 0, b->stream>>>(PROFILE_LEAD_NS);
            st = bk_check(b, cudaGetLastError(), "the profiler's lead kernel");
        }
        last = i;
        if (st == EX_OK)
            st = bk_check(b, cudaEventRecord(b->events[2 * i], b->stream), "cudaEventRecord");
        if (st == EX_OK)
            st = n->group > 1 ? cu_update_group(&e, n, n->group) : run_node(&e, n);
        if (st == EX_OK)
            st = bk_check(b, cudaEventRecord(b->events[2 * i + 1], b->stream), "cudaEventRecord");
        for (int32_t k = 1; k < n->group; k++) /* the group's time is its first node's */
            node_ms[i + k] = -2.0;
        i += n->group > 1 ? n->group - 1 : 0;
    }
    if (st == EX_OK)
        st = status_read(b, nodes, count);
    for (int64_t i = 0; i < count && st == EX_OK; i++) {
        float ms = 0.0f;
        if (node_ms[i] == -2.0) { /* a later node of a group */
            node_ms[i] = 0.0;
            continue;
        }
        if (node_ms[i] < 0.0)
            continue;
        st = bk_check(b, cudaEventElapsedTime(&ms, b->events[2 * i], b->events[2 * i + 1]),
                      "cudaEventElapsedTime");
        node_ms[i] = ms;
    }
    return st;
}

static ex_status compute_after_copy(cu_backend *b);

/* What every run does first: the last step's status collected, queued uploads ordered
 * before the compute stream. */
static ex_status run_begin(cu_backend *b)
{
    ex_status st = bk_enter(b);
    if (st != EX_OK)
        return st;
    if (b->pending) { /* the last step's status is still to be read: wait for it */
        st = bk_check(b, wait_stream(b, b->stream), "the step");
        collect(b);
    }
    st = with_late(b, st);
    return st == EX_OK ? compute_after_copy(b) : st;
}

/* Launches the recording's graph without waiting: synchronize, download or the next run
 * reads the status words. */
static ex_status launch(cu_backend *b, ex_recording *r)
{
    ex_status st = graph_of(b, r);
    if (st == EX_OK)
        st = status_reset(b);
    if (st == EX_OK)
        st = bk_check(b, cudaGraphLaunch(r->exec, b->stream), "cudaGraphLaunch");
    if (st == EX_OK)
        st = status_fetch(b);
    b->pending = st == EX_OK;
    b->pending_nodes = r->nodes;
    b->pending_count = r->count;
    return st;
}

static ex_status cuda_compute(void *impl, const ex_node_exec *nodes, int64_t count, double *node_ms)
{
    cu_backend *b = (cu_backend *)impl;
    if (count <= 0)
        return bk_enter(b);
    ex_status st = run_begin(b);
    if (st != EX_OK)
        return st;
    if (node_ms)
        return run_profiled(b, nodes, count, node_ms);
    ex_recording once = {nodes, count, NULL, 0};
    st = launch(b, &once);
    if (once.exec) /* CUDA frees it once the launch is done */
        cudaGraphExecDestroy(once.exec);
    return st;
}

static ex_status cuda_record(void *impl, const ex_node_exec *nodes, int64_t count,
                             ex_recording **out)
{
    cu_backend *b = (cu_backend *)impl;
    *out = (ex_recording *)calloc(1, sizeof **out);
    if (!*out) {
        snprintf(b->msg, sizeof b->msg, "cuda: out of host memory");
        return EX_ERR_NOMEM;
    }
    **out = ex_recording{nodes, count, NULL, 0};
    return EX_OK;
}

static ex_status cuda_replay(void *impl, ex_recording *r)
{
    cu_backend *b = (cu_backend *)impl;
    if (r->count <= 0)
        return bk_enter(b);
    ex_status st = run_begin(b);
    return st != EX_OK ? st : launch(b, r);
}

static void cuda_forget(void *impl, ex_recording *r)
{
    (void)impl;
    if (r && r->exec)
        cudaGraphExecDestroy(r->exec);
    free(r);
}

/* ---- buffers and transfers ---- */

static ex_status cuda_buffer_alloc(void *impl, uint64_t bytes, ex_buffer **out)
{
    cu_backend *b = (cu_backend *)impl;
    ex_status st = bk_enter(b);
    if (st != EX_OK)
        return st;
    cu_buffer *buf = (cu_buffer *)calloc(1, sizeof *buf);
    if (!buf) {
        snprintf(b->msg, sizeof b->msg, "cuda: out of host memory");
        return EX_ERR_NOMEM;
    }
    cudaError_t err = cudaMalloc(&buf->ptr, bytes ? bytes : 256);
    if (err != cudaSuccess) {
        free(buf);
        cudaGetLastError();
        snprintf(b->msg, sizeof b->msg, "cuda: cannot allocate %llu bytes: %s",
                 (unsigned long long)bytes, cudaGetErrorString(err));
        return err == cudaErrorMemoryAllocation ? EX_ERR_NOMEM : EX_ERR_DEVICE;
    }
    count_alloc(b, bytes ? bytes : 256);
    buf->bytes = bytes;
    *out = (ex_buffer *)buf;
    return EX_OK;
}

static void cuda_buffer_free(void *impl, ex_buffer *buf)
{
    cu_backend *b = (cu_backend *)impl;
    if (!buf)
        return;
    uint64_t buf_bytes = ((cu_buffer *)buf)->bytes;
    if (bk_enter(b) == EX_OK) {
        if (b->pending && wait_stream(b, b->stream) == cudaSuccess)
            collect(b); /* the plan's nodes may go with it: read their status now */
        /* cudaFree waits for work that may still use it */
        dev_free(b, ((cu_buffer *)buf)->ptr, buf_bytes ? buf_bytes : 256);
    }
    free(buf);
}

static ex_status check_range(cu_backend *b, ex_buffer *buf, uint64_t off, uint64_t n)
{
    cu_buffer *c = (cu_buffer *)buf;
    if (c && off <= c->bytes && n <= c->bytes - off)
        return EX_OK;
    snprintf(b->msg, sizeof b->msg, "cuda: bytes [%llu, +%llu) outside a buffer of %llu",
             (unsigned long long)off, (unsigned long long)n,
             (unsigned long long)(c ? c->bytes : 0));
    return EX_ERR_ARG;
}

/* The copy stream waits for the compute work queued so far. */
/* Work on the compute stream waits for the uploads queued before it. */
static ex_status compute_after_copy(cu_backend *b)
{
    ex_status st = bk_check(b, cudaEventRecord(b->ev_copy, b->copy), "cudaEventRecord");
    if (st == EX_OK)
        st = bk_check(b, cudaStreamWaitEvent(b->stream, b->ev_copy, 0), "cudaStreamWaitEvent");
    if (st == EX_OK)
        b->copy_queued = false;
    return st;
}

static ex_status copy_after_compute(cu_backend *b)
{
    ex_status st = bk_check(b, cudaEventRecord(b->ev_compute, b->stream), "cudaEventRecord");
    if (st == EX_OK)
        st = bk_check(b, cudaStreamWaitEvent(b->copy, b->ev_compute, 0), "cudaStreamWaitEvent");
    return st;
}

/* Host to device through the two staging buffers, without waiting for the device: the
 * data is copied into pinned memory and its transfer queued; a staging buffer is only
 * reused once its transfers are done, and the compute stream waits for the copy stream
 * before it next runs. */
static ex_status cuda_upload(void *impl, ex_buffer *buf, uint64_t off, const void *src, uint64_t n)
{
    cu_backend *b = (cu_backend *)impl;
    ex_status st = bk_enter(b);
    if (st == EX_OK)
        st = check_range(b, buf, off, n);
    if (st != EX_OK || n == 0)
        return st;
    char *dst = (char *)((cu_buffer *)buf)->ptr + off;
    st = copy_after_compute(b);
    b->copy_queued = true;
    for (uint64_t done = 0; st == EX_OK && done < n;) {
        int s = b->stage_cur;
        size_t used = b->stage_used[s], room = used < CU_STAGE_BYTES ? CU_STAGE_BYTES - used : 0;
        if (room < n - done && used > 0) {
            s = b->stage_cur ^= 1;
            st = bk_check(b, wait_event(b, b->ev_stage[s]), "upload");
            b->stage_used[s] = 0;
            room = CU_STAGE_BYTES;
            if (st != EX_OK)
                break;
        }
        size_t len = n - done < room ? (size_t)(n - done) : room;
        char *slot = b->stage[s] + b->stage_used[s];
        memcpy(slot, (const char *)src + done, len);
        st = bk_check(b, cudaMemcpyAsync(dst + done, slot, len, cudaMemcpyHostToDevice, b->copy),
                      "upload");
        if (st == EX_OK)
            st = bk_check(b, cudaEventRecord(b->ev_stage[s], b->copy), "upload");
        b->stage_used[s] += (len + 255) & ~(size_t)255;
        done += len;
    }
    return st;
}

/* Device to host: chunk i lands in staging buffer i % 2 while chunk i − 1 is copied out. */
static ex_status cuda_download(void *impl, ex_buffer *buf, uint64_t off, void *dst, uint64_t n)
{
    cu_backend *b = (cu_backend *)impl;
    ex_status st = bk_enter(b);
    if (st == EX_OK)
        st = check_range(b, buf, off, n);
    if (st != EX_OK || n == 0)
        return st;
    const char *src = (const char *)((cu_buffer *)buf)->ptr + off;
    uint64_t chunks = (n + CU_STAGE_BYTES - 1) / CU_STAGE_BYTES;
    st = copy_after_compute(b);
    for (uint64_t i = 0; st == EX_OK && i <= chunks; i++) {
        if (i < chunks) {
            uint64_t at = i * CU_STAGE_BYTES;
            size_t len = n - at < CU_STAGE_BYTES ? (size_t)(n - at) : CU_STAGE_BYTES;
            int s = (int)(i & 1);
            st = bk_check(
                b, cudaMemcpyAsync(b->stage[s], src + at, len, cudaMemcpyDeviceToHost, b->copy),
                "download");
            if (st == EX_OK)
                st = bk_check(b, cudaEventRecord(b->ev_stage[s], b->copy), "download");
        }
        if (st == EX_OK && i > 0) {
            uint64_t at = (i - 1) * CU_STAGE_BYTES;
            size_t len = n - at < CU_STAGE_BYTES ? (size_t)(n - at) : CU_STAGE_BYTES;
            int s = (int)((i - 1) & 1);
            st = bk_check(b, wait_event(b, b->ev_stage[s]), "download");
            if (st == EX_OK)
                memcpy((char *)dst + at, b->stage[s], len);
        }
    }
    /* the last chunk's event came after every transfer queued before it, uploads included;
     * after a failure the copies still in flight must end before staging is reused */
    if (st != EX_OK)
        wait_stream(b, b->copy);
    b->stage_used[0] = b->stage_used[1] = 0;
    b->copy_queued = false;
    collect(b); /* the copy stream waited for the compute stream, status words included */
    return with_late(b, st);
}

/* On the compute stream, in order with the nodes; overlapping ranges of one buffer go
 * through a temporary copy (cudaMemcpy does not promise memmove's semantics). */
static ex_status cuda_copy(void *impl, ex_buffer *dst, uint64_t doff, ex_buffer *src, uint64_t soff,
                           uint64_t n)
{
    cu_backend *b = (cu_backend *)impl;
    ex_status st = bk_enter(b);
    if (st == EX_OK)
        st = check_range(b, dst, doff, n);
    if (st == EX_OK)
        st = check_range(b, src, soff, n);
    if (st == EX_OK)
        st = compute_after_copy(b);
    if (st != EX_OK || n == 0)
        return st;
    char *d = (char *)((cu_buffer *)dst)->ptr + doff;
    const char *s = (const char *)((cu_buffer *)src)->ptr + soff;
    if (d + n <= s || s + n <= d)
        return bk_check(b, cudaMemcpyAsync(d, s, n, cudaMemcpyDeviceToDevice, b->stream), "copy");
    void *tmp = NULL;
    st = bk_check(b, cudaMallocAsync(&tmp, n, b->stream), "copy");
    if (st != EX_OK)
        return st;
    st = bk_check(b, cudaMemcpyAsync(tmp, s, n, cudaMemcpyDeviceToDevice, b->stream), "copy");
    if (st == EX_OK)
        st = bk_check(b, cudaMemcpyAsync(d, tmp, n, cudaMemcpyDeviceToDevice, b->stream), "copy");
    ex_status fr = bk_check(b, cudaFreeAsync(tmp, b->stream), "copy");
    return st != EX_OK ? st : fr;
}

static ex_status cuda_fill(void *impl, ex_buffer *buf, uint64_t off, uint64_t n, uint32_t pattern)
{
    cu_backend *b = (cu_backend *)impl;
    ex_status st = bk_enter(b);
    if (st == EX_OK)
        st = check_range(b, buf, off, n);
    if (st != EX_OK)
        return st;
    if (off % 4 != 0) {
        snprintf(b->msg, sizeof b->msg, "cuda: fill at byte %llu is not 4-byte aligned",
                 (unsigned long long)off);
        return EX_ERR_ARG;
    }
    if ((st = compute_after_copy(b)) != EX_OK)
        return st;
    cu_exec e = exec_of(b);
    return cu_fill_words(&e, (char *)((cu_buffer *)buf)->ptr + off, n / 4, pattern);
}

static ex_status cuda_synchronize(void *impl)
{
    cu_backend *b = (cu_backend *)impl;
    ex_status st = bk_enter(b);
    if (st == EX_OK)
        st = bk_check(b, wait_stream(b, b->stream), "cudaStreamSynchronize");
    /* uploads the compute stream was ordered after are done with it */
    if (st == EX_OK && b->copy_queued)
        st = bk_check(b, wait_stream(b, b->copy), "cudaStreamSynchronize");
    if (st == EX_OK) {
        b->copy_queued = false;
        b->stage_used[0] = b->stage_used[1] = 0;
        collect(b);
    }
    return with_late(b, st);
}

/* The plan's communicator, when its device sums serve CUDA: ALLREDUCE nodes then run here
 * (comm.cu) and every wait for the device asks it (wait_polled). */
static ex_status cuda_set_comm(void *impl, const ex_comm *comm)
{
    cu_backend *b = (cu_backend *)impl;
    if (!comm || !comm->device_backend || strcmp(comm->device_backend, "cuda") != 0 ||
        !comm->allreduce_device || !comm->device_waiting) {
        snprintf(b->msg, sizeof b->msg,
                 "set_comm: the communicator's device sums do not serve the cuda backend");
        return EX_ERR_ARG;
    }
    b->comm = *comm;
    return EX_OK;
}

static const char *cuda_error(void *impl)
{
    return ((cu_backend *)impl)->msg;
}

/* Frees whatever was made; safe on a half-built backend. */
static void cuda_close(void *impl)
{
    cu_backend *b = (cu_backend *)impl;
    if (!b)
        return;
    cudaSetDevice(b->device);
    if (b->stream)
        wait_stream(b, b->stream);
    for (int64_t i = 0; i < b->nevents; i++)
        cudaEventDestroy(b->events[i]);
    free(b->events);
    dev_free(b, b->scratch, b->scratch_bytes);
    dev_free(b, b->status, CU_STATUS_BYTES);
    dev_free(b, b->blas_ws, blas_ws_bytes(b));
    cudaFreeHost(b->status_host);
    cudaFreeHost(b->gate_host);
    for (int s = 0; s < 2; s++) {
        cudaFreeHost(b->stage[s]);
        if (b->ev_stage[s])
            cudaEventDestroy(b->ev_stage[s]);
    }
    if (b->ev_compute)
        cudaEventDestroy(b->ev_compute);
    if (b->ev_copy)
        cudaEventDestroy(b->ev_copy);
    for (int s = 1; s < CU_STREAMS; s++) {
        if (b->blas_more[s])
            cublasDestroy(b->blas_more[s]);
        if (b->more[s])
            cudaStreamDestroy(b->more[s]);
        if (b->ev_join[s])
            cudaEventDestroy(b->ev_join[s]);
    }
    if (b->ev_fork)
        cudaEventDestroy(b->ev_fork);
    for (int64_t i = 0; i < b->n_node_ev; i++)
        cudaEventDestroy(b->node_ev[i]);
    free(b->node_ev);
    free(b->flags);
    if (b->blas)
        cublasDestroy(b->blas);
    if (b->blas_side)
        cublasDestroy(b->blas_side);
    if (b->side)
        cudaStreamDestroy(b->side);
    if (b->copy)
        cudaStreamDestroy(b->copy);
    if (b->stream)
        cudaStreamDestroy(b->stream);
    cudaGetLastError();
    free(b);
}

/* The optimizer updates run as groups (cu_update_group). */
static bool cuda_groups(void *impl, ex_op op)
{
    (void)impl;
    return op == EX_OP_SGD || op == EX_OP_ADAM;
}

static uint64_t cuda_host_syncs(void *impl)
{
    return ((cu_backend *)impl)->host_syncs;
}

/* Device memory only: CUDA's other objects are not counted. */
static void cuda_counters(void *impl, ex_backend_counters *out)
{
    const cu_backend *b = (const cu_backend *)impl;
    memset(out, 0, sizeof *out);
    out->device_allocations = b->allocs;
    out->device_bytes = b->alloc_bytes;
    out->created = b->allocs_made;
}

static const ex_backend_iface cuda_iface = {
    cuda_close,      cuda_error,  cuda_buffer_alloc, cuda_buffer_free, cuda_upload,
    cuda_download,   cuda_copy,   cuda_fill,         cuda_compute,     cuda_synchronize,
    cuda_host_syncs, NULL, /* set_alloc_hook: not covered (backend.h) */
    cuda_counters,         /* device memory only */
    cuda_set_comm,   cuda_groups, cuda_record,       cuda_replay,      cuda_forget,
};

/* ---- opening ---- */

static void put(char *msg, size_t len, const char *text, const char *detail)
{
    if (msg && len)
        snprintf(msg, len, "%s%s", text, detail);
}

/* The device index from EXAPT_CUDA_DEVICE (default 0). */
static ex_status device_index(int count, int *dev, char *msg, size_t len)
{
    const char *s = getenv("EXAPT_CUDA_DEVICE");
    *dev = 0;
    if (!s || !*s)
        return EX_OK;
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (*end != '\0' || v < 0) {
        if (msg && len)
            snprintf(msg, len, "cuda: EXAPT_CUDA_DEVICE='%s' is not a device index", s);
        return EX_ERR_ARG;
    }
    if (v >= count) {
        if (msg && len)
            snprintf(msg, len, "cuda: EXAPT_CUDA_DEVICE=%ld, but there %s %d device%s", v,
                     count == 1 ? "is" : "are", count, count == 1 ? "" : "s");
        return EX_ERR_UNSUPPORTED;
    }
    *dev = (int)v;
    return EX_OK;
}

/* The streams a captured step is spread over, from EXAPT_CUDA_STREAMS (1 to CU_STREAMS,
 * default CU_STREAMS_DEFAULT; 1 captures the step on one stream, in node order). */
static ex_status stream_count(int *n, char *msg, size_t len)
{
    const char *s = getenv("EXAPT_CUDA_STREAMS");
    *n = CU_STREAMS_DEFAULT;
    if (!s || !*s)
        return EX_OK;
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (*end != '\0' || v < 1 || v > CU_STREAMS) {
        if (msg && len)
            snprintf(msg, len, "cuda: EXAPT_CUDA_STREAMS='%s' is not a count from 1 to %d", s,
                     CU_STREAMS);
        return EX_ERR_ARG;
    }
    *n = (int)v;
    return EX_OK;
}

/* Whether kernels launch as programmatic dependent launches (cu_launch): on sm_90 and
 * up unless EXAPT_CUDA_PDL is 0 (1 or unset: on). */
static ex_status pdl_wanted(int cc_major, int *on, char *msg, size_t len)
{
    const char *s = getenv("EXAPT_CUDA_PDL");
    if (s && *s && strcmp(s, "0") != 0 && strcmp(s, "1") != 0) {
        if (msg && len)
            snprintf(msg, len, "cuda: EXAPT_CUDA_PDL='%s' is not 0 or 1", s);
        return EX_ERR_ARG;
    }
    *on = cc_major >= 9 && !(s && strcmp(s, "0") == 0);
    return EX_OK;
}

static ex_status blas_open(cu_backend *b, cublasHandle_t *h, cudaStream_t s, int slice)
{
    cu_exec e = exec_of(b);
    ex_status st = cu_blas_check(&e, cublasCreate(h), "cublasCreate");
    if (st == EX_OK)
        st = cu_blas_check(&e, cublasSetStream(*h, s), "cublasSetStream");
    /* after cublasSetStream, which resets it */
    if (st == EX_OK)
        st = cu_blas_check(
            &e,
            cublasSetWorkspace(*h, (char *)b->blas_ws + slice * CU_BLAS_WS_BYTES, CU_BLAS_WS_BYTES),
            "cublasSetWorkspace");
    return st;
}

/* Streams, handles, pinned staging and the status words. */
static ex_status backend_init(cu_backend *b)
{
    void *p = NULL;
    ex_status st = bk_check(b, cudaSetDevice(b->device), "cudaSetDevice");
    if (st == EX_OK)
        st = bk_check(b, cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking), "stream");
    if (st == EX_OK)
        st = bk_check(b, cudaStreamCreateWithFlags(&b->copy, cudaStreamNonBlocking), "stream");
    if (st == EX_OK)
        st = bk_check(b, cudaStreamCreateWithFlags(&b->side, cudaStreamNonBlocking), "stream");
    if (st == EX_OK)
        st = bk_check(b, cudaEventCreateWithFlags(&b->ev_compute, cudaEventDisableTiming), "event");
    if (st == EX_OK)
        st = bk_check(b, cudaEventCreateWithFlags(&b->ev_copy, cudaEventDisableTiming), "event");
    for (int s = 0; s < 2 && st == EX_OK; s++) {
        st =
            bk_check(b, cudaEventCreateWithFlags(&b->ev_stage[s], cudaEventDisableTiming), "event");
        if (st == EX_OK &&
            (st = bk_check(b, cudaHostAlloc(&p, CU_STAGE_BYTES, 0), "staging")) == EX_OK)
            b->stage[s] = (char *)p;
    }
    if (st == EX_OK && (st = bk_check(b, cudaHostAlloc(&p, 64, 0), "pinned")) == EX_OK)
        b->status_host = (long long *)p;
    if (st == EX_OK && (st = bk_check(b, cudaHostAlloc(&p, 64, 0), "pinned")) == EX_OK)
        b->gate_host = (float *)p;
    if (st == EX_OK && (st = dev_alloc(b, &p, CU_STATUS_BYTES, "status")) == EX_OK)
        b->status = (long long *)p;
    if (st == EX_OK)
        st = bk_check(b, cudaMemset(b->status, 0, CU_STATUS_BYTES), "cudaMemset");
    if (st == EX_OK)
        st = dev_alloc(b, &b->blas_ws, blas_ws_bytes(b), "cuBLAS");
    if (st == EX_OK)
        st = blas_open(b, &b->blas, b->stream, 0);
    if (st == EX_OK)
        st = blas_open(b, &b->blas_side, b->side, b->nstreams);
    b->more[0] = b->stream;
    b->blas_more[0] = b->blas;
    for (int s = 1; s < b->nstreams && st == EX_OK; s++) {
        st = bk_check(b, cudaStreamCreateWithFlags(&b->more[s], cudaStreamNonBlocking), "stream");
        if (st == EX_OK)
            st = blas_open(b, &b->blas_more[s], b->more[s], s);
        if (st == EX_OK)
            st = bk_check(b, cudaEventCreateWithFlags(&b->ev_join[s], cudaEventDisableTiming),
                          "event");
    }
    if (st == EX_OK)
        st = bk_check(b, cudaEventCreateWithFlags(&b->ev_fork, cudaEventDisableTiming), "event");
    return st;
}

/* The build's kernels must have code this device can run (machine code or PTX). */
static ex_status device_runs_build(cu_backend *b, const cudaDeviceProp *prop)
{
    cudaFuncAttributes attr;
    cudaError_t err = cudaFuncGetAttributes(&attr, set_condition_kernel);
    if (err == cudaSuccess)
        return EX_OK;
    cudaGetLastError();
    snprintf(b->msg, sizeof b->msg, "cuda: this build has no code for %s (sm_%d%d): %s", prop->name,
             prop->major, prop->minor, cudaGetErrorString(err));
    return EX_ERR_UNSUPPORTED;
}

ex_status ex__cuda_backend_create(int arg, const ex_backend_iface **iface, void **impl,
                                  ex_backend_caps *caps, char *msg, size_t msg_len)
{
    (void)arg; /* the device comes from EXAPT_CUDA_DEVICE */
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count < 1) {
        cudaGetLastError();
        put(msg, msg_len, "cuda: no usable CUDA device: ",
            err != cudaSuccess ? cudaGetErrorString(err) : "none found");
        return EX_ERR_UNSUPPORTED;
    }
    int dev = 0, nstreams = 0;
    ex_status st = device_index(count, &dev, msg, msg_len);
    if (st == EX_OK)
        st = stream_count(&nstreams, msg, msg_len);
    if (st != EX_OK)
        return st;
    cu_backend *b = (cu_backend *)calloc(1, sizeof *b);
    if (!b) {
        put(msg, msg_len, "cuda: out of host memory", "");
        return EX_ERR_NOMEM;
    }
    b->device = dev;
    b->nstreams = nstreams;
    cudaDeviceProp prop;
    st = bk_check(b, cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
    b->cc_major = prop.major;
    if (st == EX_OK)
        st = pdl_wanted(prop.major, &b->pdl, b->msg, sizeof b->msg);
    if (st == EX_OK)
        st = backend_init(b);
    if (st == EX_OK)
        st = device_runs_build(b, &prop);
    if (st != EX_OK) {
        put(msg, msg_len, b->msg, "");
        cuda_close(b);
        return st;
    }
    memset(caps, 0, sizeof *caps);
    snprintf(caps->name, sizeof caps->name, "cuda");
    snprintf(caps->device, sizeof caps->device, "%.96s (sm_%d%d, device %d)", prop.name, prop.major,
             prop.minor, dev);
    caps->memory_bytes = prop.totalGlobalMem;
    caps->max_alloc_bytes = prop.totalGlobalMem;
    caps->max_binding_bytes = prop.totalGlobalMem;
    caps->features = EX_FEAT_TIMESTAMPS | EX_FEAT_RECOMPUTE;
    caps->threads = 0;
    *iface = &cuda_iface;
    *impl = b;
    return EX_OK;
}
