/* The CPU backend: host buffers, the one switch over ex_op, per-node timing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/clock.h"
#include "cpu/cpu.h"

typedef struct cpu_backend {
    int reference;
    int threads;
    char msg[512];
    bool (*fails)(void *user);
    void *user;
    bool avx512, vnni;
} cpu_backend;

static ex_status run_node(const cpu_exec *e, const ex_node_exec *n)
{
    switch (n->op) {
    case EX_OP_ADD: return cpu_add(e, n);
    case EX_OP_SUB: return cpu_sub(e, n);
    case EX_OP_MUL: return cpu_mul(e, n);
    case EX_OP_SCALE: return cpu_scale(e, n);
    case EX_OP_AXPY: return cpu_axpy(e, n);
    case EX_OP_RELU: return cpu_relu(e, n);
    case EX_OP_RELU_BWD: return cpu_relu_bwd(e, n);
    case EX_OP_FILL: return cpu_fill(e, n);
    case EX_OP_COPY: return cpu_copy(e, n);
    case EX_OP_DROP_PATH: return cpu_drop_path(e, n);
    case EX_OP_SUM: return cpu_sum(e, n);
    case EX_OP_MEAN: return cpu_mean(e, n);
    case EX_OP_MAX: return cpu_max(e, n);
    case EX_OP_MAX_BWD: return cpu_max_bwd(e, n);
    case EX_OP_SOFTMAX: return cpu_softmax(e, n);
    case EX_OP_SOFTMAX_BWD: return cpu_softmax_bwd(e, n);
    case EX_OP_LOG_SOFTMAX: return cpu_log_softmax(e, n);
    case EX_OP_LOG_SOFTMAX_BWD: return cpu_log_softmax_bwd(e, n);
    case EX_OP_CROSS_ENTROPY: return cpu_cross_entropy(e, n);
    case EX_OP_CROSS_ENTROPY_BWD: return cpu_cross_entropy_bwd(e, n);
    case EX_OP_ACCURACY: return cpu_accuracy(e, n);
    case EX_OP_CONV2D: return cpu_conv2d(e, n);
    case EX_OP_CONV2D_BWD_DATA: return cpu_conv2d_bwd_data(e, n);
    case EX_OP_CONV2D_BWD_FILTER: return cpu_conv2d_bwd_filter(e, n);
    case EX_OP_DWCONV2D: return cpu_dwconv2d(e, n);
    case EX_OP_DWCONV2D_BWD_DATA: return cpu_dwconv2d_bwd_data(e, n);
    case EX_OP_DWCONV2D_BWD_FILTER: return cpu_dwconv2d_bwd_filter(e, n);
    case EX_OP_PWCONV: return cpu_pwconv(e, n);
    case EX_OP_PWCONV_BWD_FILTER: return cpu_pwconv_bwd_filter(e, n);
    case EX_OP_PWCONV_BN: return cpu_pwconv_bn(e, n);
    case EX_OP_MATMUL: return cpu_matmul(e, n);
    case EX_OP_LINEAR: return cpu_linear(e, n);
    case EX_OP_AVG_POOL: return cpu_avg_pool(e, n);
    case EX_OP_AVG_POOL_BWD: return cpu_avg_pool_bwd(e, n);
    case EX_OP_MAX_POOL: return cpu_max_pool(e, n);
    case EX_OP_MAX_POOL_BWD: return cpu_max_pool_bwd(e, n);
    case EX_OP_GLOBAL_AVG_POOL: return cpu_global_avg_pool(e, n);
    case EX_OP_BN_STATS: return cpu_bn_stats(e, n);
    case EX_OP_BN_APPLY: return cpu_bn_apply(e, n);
    case EX_OP_BN_BWD_REDUCE: return cpu_bn_bwd_reduce(e, n);
    case EX_OP_BN_BWD_DATA: return cpu_bn_bwd_data(e, n);
    case EX_OP_MIXED_SUM: return cpu_mixed_sum(e, n);
    case EX_OP_MIXED_SUM_BWD_W: return cpu_mixed_sum_bwd_w(e, n);
    case EX_OP_GUMBEL_SOFTMAX: return cpu_gumbel_softmax(e, n);
    case EX_OP_GUMBEL_SOFTMAX_BWD: return cpu_gumbel_softmax_bwd(e, n);
    case EX_OP_HARDMAX_ST: return cpu_hardmax_st(e, n);
    case EX_OP_ENTROPY: return cpu_entropy(e, n);
    case EX_OP_ENTROPY_BWD: return cpu_entropy_bwd(e, n);
    case EX_OP_TOPK_MASK: return cpu_topk_mask(e, n);
    case EX_OP_SGD: return cpu_sgd(e, n);
    case EX_OP_ADAM: return cpu_adam(e, n);
    case EX_OP_GRAD_NORM: return cpu_grad_norm(e, n);
    case EX_OP_CLIP: return cpu_clip(e, n);
    case EX_OP_RAND_UNIFORM: return cpu_rand_uniform(e, n);
    case EX_OP_RAND_NORMAL: return cpu_rand_normal(e, n);
    case EX_OP_QUANTIZE: return cpu_quantize(e, n);
    case EX_OP_DEQUANTIZE: return cpu_dequantize(e, n);
    case EX_OP_REQUANTIZE: return cpu_requantize(e, n);
    case EX_OP_QADD: return cpu_qadd(e, n);
    case EX_OP_QCONCAT: return cpu_qconcat(e, n);
    case EX_OP_QCONV2D: return cpu_qconv2d(e, n);
    case EX_OP_QDWCONV2D: return cpu_qdwconv2d(e, n);
    case EX_OP_QPWCONV: return cpu_qpwconv(e, n);
    case EX_OP_QLINEAR: return cpu_qlinear(e, n);
    case EX_OP_QRELU: return cpu_qrelu(e, n);
    case EX_OP_QMAX_POOL: return cpu_qmax_pool(e, n);
    case EX_OP_QAVG_POOL: return cpu_qavg_pool(e, n);
    case EX_OP_QGLOBAL_AVG_POOL: return cpu_qglobal_avg_pool(e, n);
    case EX_OP_ALLREDUCE:
        return cpu_fail(e, EX_ERR_STATE, "cpu: allreduce is the plan's to carry out");
    case EX_OP_COUNT: break;
    }
    return cpu_fail(e, EX_ERR_UNSUPPORTED, "cpu: op %d is not in the catalogue", (int)n->op);
}

static bool gated_off(const ex_node_exec *n)
{
    return n->gate && cpu_f32(n->gate)[ex_td_at(n->gate, n->gate_index)] == 0.0f;
}

static ex_status cpu_compute(void *impl, const ex_node_exec *nodes, int64_t count, double *node_ms)
{
    cpu_backend *b = impl;
    cpu_exec e = {b->reference, b->threads, b->msg,    sizeof b->msg,
                  b->fails,     b->user,    b->avx512, b->vnni};
#ifdef _OPENMP
    omp_set_num_threads(b->reference ? 1 : b->threads);
#endif
    for (int64_t i = 0; i < count; i++) {
        const ex_node_exec *n = &nodes[i];
        if (gated_off(n)) {
            if (node_ms)
                node_ms[i] = -1.0; /* skipped */
            continue;
        }
        double t0 = node_ms ? ex__clock_ms() : 0.0;
        ex_status st = n->group > 1 ? cpu_update_group(&e, n, n->group) : run_node(&e, n);
        if (st != EX_OK)
            return st;
        if (node_ms)
            node_ms[i] = ex__clock_ms() - t0;
        for (int32_t k = 1; k < n->group; k++) /* the group's time is its first node's */
            if (node_ms)
                node_ms[i + k] = 0.0;
        i += n->group > 1 ? n->group - 1 : 0;
    }
    return EX_OK;
}

/* The optimizer updates run as groups, on several threads; the reference runs every node
 * on its own. */
static bool cpu_groups(void *impl, ex_op op)
{
    return !((cpu_backend *)impl)->reference && (op == EX_OP_SGD || op == EX_OP_ADAM);
}

static void cpu_set_alloc_hook(void *impl, bool (*fails)(void *user), void *user)
{
    cpu_backend *b = impl;
    b->fails = fails;
    b->user = user;
}

static void cpu_close(void *impl)
{
    free(impl);
}

static const char *cpu_error(void *impl)
{
    return ((cpu_backend *)impl)->msg;
}

static ex_status cpu_buffer_alloc(void *impl, uint64_t bytes, ex_buffer **out)
{
    cpu_backend *b = impl;
    cpu_buffer *buf = malloc(sizeof *buf);
    uint64_t rounded = (bytes + 63) & ~(uint64_t)63;
    void *data = buf && rounded >= bytes ? aligned_alloc(64, rounded ? rounded : 64) : NULL;
    if (!data) {
        free(buf);
        snprintf(b->msg, sizeof b->msg, "cpu: cannot allocate %llu bytes",
                 (unsigned long long)bytes);
        return EX_ERR_NOMEM;
    }
    buf->data = data;
    buf->bytes = bytes;
    *out = (ex_buffer *)buf;
    return EX_OK;
}

static void cpu_buffer_free(void *impl, ex_buffer *buf)
{
    (void)impl;
    if (buf)
        free(((cpu_buffer *)buf)->data);
    free(buf);
}

static ex_status check_range(cpu_backend *b, ex_buffer *buf, uint64_t off, uint64_t n)
{
    cpu_buffer *c = (cpu_buffer *)buf;
    if (c && off <= c->bytes && n <= c->bytes - off)
        return EX_OK;
    snprintf(b->msg, sizeof b->msg, "cpu: bytes [%llu, +%llu) outside a buffer of %llu",
             (unsigned long long)off, (unsigned long long)n,
             (unsigned long long)(c ? c->bytes : 0));
    return EX_ERR_ARG;
}

static ex_status cpu_upload(void *impl, ex_buffer *buf, uint64_t off, const void *src, uint64_t n)
{
    ex_status st = check_range(impl, buf, off, n);
    if (st == EX_OK && n)
        memcpy((char *)((cpu_buffer *)buf)->data + off, src, n);
    return st;
}

static ex_status cpu_download(void *impl, ex_buffer *buf, uint64_t off, void *dst, uint64_t n)
{
    ex_status st = check_range(impl, buf, off, n);
    if (st == EX_OK && n)
        memcpy(dst, (char *)((cpu_buffer *)buf)->data + off, n);
    return st;
}

static ex_status cpu_copy_buf(void *impl, ex_buffer *dst, uint64_t doff, ex_buffer *src,
                              uint64_t soff, uint64_t n)
{
    ex_status st = check_range(impl, dst, doff, n);
    if (st == EX_OK)
        st = check_range(impl, src, soff, n);
    if (st == EX_OK && n)
        memmove((char *)((cpu_buffer *)dst)->data + doff, (char *)((cpu_buffer *)src)->data + soff,
                n);
    return st;
}

static ex_status cpu_fill_buf(void *impl, ex_buffer *buf, uint64_t off, uint64_t n,
                              uint32_t pattern)
{
    ex_status st = check_range(impl, buf, off, n);
    if (st != EX_OK)
        return st;
    uint32_t *p = (uint32_t *)((char *)((cpu_buffer *)buf)->data + off);
    for (uint64_t i = 0; i < n / 4; i++)
        p[i] = pattern;
    return EX_OK;
}

static ex_status cpu_sync(void *impl)
{
    (void)impl;
    return EX_OK;
}

static const ex_backend_iface cpu_iface = {
    .close = cpu_close,
    .error = cpu_error,
    .buffer_alloc = cpu_buffer_alloc,
    .buffer_free = cpu_buffer_free,
    .upload = cpu_upload,
    .download = cpu_download,
    .copy = cpu_copy_buf,
    .fill = cpu_fill_buf,
    .compute = cpu_compute,
    .set_alloc_hook = cpu_set_alloc_hook,
    .synchronize = cpu_sync,
    .groups = cpu_groups,
};

static void cpu_model(char *out, size_t len)
{
    snprintf(out, len, "CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!strncmp(line, "model name", 10) && colon) {
            colon += 1 + (colon[1] == ' ');
            colon[strcspn(colon, "\n")] = '\0';
            snprintf(out, len, "%s", colon);
            break;
        }
    }
    fclose(f);
}

bool cpu_avx512(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    const char *v = getenv("EXAPT_CPU_AVX512");
    if (v && strcmp(v, "0") == 0)
        return false;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
#else
    return false;
#endif
}

static int thread_count(void)
{
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

ex_status ex__cpu_backend_create(int reference, const ex_backend_iface **iface, void **impl,
                                 ex_backend_caps *caps, char *msg, size_t msg_len)
{
    if (!iface || !impl || !caps) {
        if (msg && msg_len)
            snprintf(msg, msg_len, "cpu: NULL %s", !iface ? "iface" : !impl ? "impl" : "caps");
        return EX_ERR_ARG;
    }
    cpu_backend *b = calloc(1, sizeof *b);
    if (!b) {
        if (msg && msg_len)
            snprintf(msg, msg_len, "cpu: out of host memory");
        return EX_ERR_NOMEM;
    }
    b->reference = reference;
    b->threads = reference ? 1 : thread_count();
    b->avx512 = cpu_avx512();
    b->vnni = cpu_qgemm_vnni();
    memset(caps, 0, sizeof *caps);
    cpu_model(caps->device, sizeof caps->device);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    caps->memory_bytes = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
    caps->max_alloc_bytes = caps->memory_bytes ? caps->memory_bytes : UINT64_MAX / 2;
    caps->max_binding_bytes = caps->max_alloc_bytes;
    caps->features = EX_FEAT_TIMESTAMPS | (reference ? EX_FEAT_REFERENCE : 0u);
    caps->threads = b->threads;
    *iface = &cpu_iface;
    *impl = b;
    return EX_OK;
}
