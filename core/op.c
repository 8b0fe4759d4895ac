/* The op table: one entry per ex_op with its name, test tolerance, gradient flag and
 * cost model. Tests and benchmarks read this one table. */
#include <assert.h>

#include "core/engine.h"
#include "core/group.h"

static uint64_t numel_of(const ex_tensor *t)
{
    return (uint64_t)ex__numel(t);
}

/* FLOPs per output element, for ops whose cost is proportional to the output */
static uint64_t f_out1(const ex_tensor *n)
{
    return numel_of(n);
}
static uint64_t f_out2(const ex_tensor *n)
{
    return 2 * numel_of(n);
}
static uint64_t f_out5(const ex_tensor *n)
{
    return 5 * numel_of(n);
}
/* SGD: 5 per element, one more for the folded clip's scaling (a 5th source, the norm) */
static uint64_t f_sgd(const ex_tensor *n)
{
    return (n->nsrc == 5 ? 6 : 5) * numel_of(n);
}
static uint64_t f_src0(const ex_tensor *n)
{
    return numel_of(n->src[0]);
}
static uint64_t f_src0x4(const ex_tensor *n)
{
    return 4 * numel_of(n->src[0]);
}
static uint64_t f_none(const ex_tensor *n)
{
    (void)n;
    return 0;
}
static uint64_t f_sum_srcs(const ex_tensor *n)
{
    uint64_t f = 0;
    for (int i = 0; i < n->nsrc; i++)
        f += 2 * numel_of(n->src[i]);
    return f;
}

/* convolutions: 2 * (outputs of the forward) * (taps per output) */
static uint64_t conv_macs(const ex_tensor *x, const ex_tensor *w, const ex_tensor *y, bool dw)
{
    (void)x;
    uint64_t taps = (uint64_t)w->ne[2] * (uint64_t)w->ne[3] * (dw ? 1 : (uint64_t)w->ne[1]);
    return numel_of(y) * taps;
}
static uint64_t f_conv(const ex_tensor *n)
{
    return 2 * conv_macs(n->src[0], n->src[1], n, false);
}
static uint64_t f_conv_bwd_data(const ex_tensor *n) /* src dy, w; dst dx */
{
    return 2 * conv_macs(n, n->src[1], n->src[0], false);
}
static uint64_t f_conv_bwd_filter(const ex_tensor *n) /* src x, dy; dst dw */
{
    return 2 * conv_macs(n->src[0], n, n->src[1], false);
}
static uint64_t f_dw(const ex_tensor *n)
{
    return 2 * conv_macs(n->src[0], n->src[1], n, true);
}
static uint64_t f_dw_bwd_data(const ex_tensor *n)
{
    return 2 * conv_macs(n, n->src[1], n->src[0], true);
}
static uint64_t f_dw_bwd_filter(const ex_tensor *n)
{
    return 2 * conv_macs(n->src[0], n, n->src[1], true);
}
static uint64_t f_pw(const ex_tensor *n) /* y [N,Co,H,W] from Ci inputs each */
{
    return 2 * numel_of(n) * (uint64_t)n->src[0]->ne[1];
}
static uint64_t f_pw_bwd_filter(const ex_tensor *n) /* dw [Co,Ci] over N*H*W */
{
    const ex_tensor *x = n->src[0];
    return 2 * numel_of(n) * (uint64_t)(x->ne[0] * x->ne[2] * x->ne[3]);
}
static uint64_t f_matmul(const ex_tensor *n)
{
    return 2 * numel_of(n) * (uint64_t)n->src[0]->ne[1];
}
static uint64_t f_pool(const ex_tensor *n) /* one op per window tap */
{
    return numel_of(n) * (uint64_t)(n->ip[0] * n->ip[1]);
}
static uint64_t f_pool_bwd(const ex_tensor *n)
{
    return numel_of(n->src[n->nsrc - 1]) * (uint64_t)(n->ip[0] * n->ip[1]);
}

#define E(op_, name_, tol_, diff_, ew_, flops_)                                                    \
    [op_] = {.name = name_, .tol = tol_, .diff = diff_, .elementwise = ew_, .flops = flops_}
/* an op whose independent nodes the planner groups by the rule joins_ (core/group.h) */
#define EG(op_, name_, tol_, diff_, ew_, flops_, joins_)                                           \
    [op_] = {.name = name_,                                                                        \
             .tol = tol_,                                                                          \
             .diff = diff_,                                                                        \
             .elementwise = ew_,                                                                   \
             .flops = flops_,                                                                      \
             .joins = joins_}

static const ex_op_info table[] = {
    E(EX_OP_ADD, "add", 1e-12, true, true, f_out1),
    E(EX_OP_SUB, "sub", 1e-12, true, true, f_out1),
    E(EX_OP_MUL, "mul", 1e-12, true, true, f_out1),
    E(EX_OP_SCALE, "scale", 1e-12, true, true, f_out1),
    E(EX_OP_AXPY, "axpy", 1e-12, true, true, f_out2),
    E(EX_OP_RELU, "relu", 1e-12, true, true, f_out1),
    E(EX_OP_RELU_BWD, "relu_bwd", 1e-12, false, true, f_out1),
    E(EX_OP_FILL, "fill", 1e-12, false, false, f_none),
    E(EX_OP_COPY, "copy", 1e-12, true, true, f_none),
    E(EX_OP_DROP_PATH, "drop_path", 1e-12, true, true, f_out1),
    E(EX_OP_SUM, "sum", 1e-10, true, false, f_src0),
    E(EX_OP_MEAN, "mean", 1e-10, true, false, f_src0),
    E(EX_OP_MAX, "max", 1e-12, true, false, f_src0),
    E(EX_OP_MAX_BWD, "max_bwd", 1e-12, false, true, f_out1),
    E(EX_OP_SOFTMAX, "softmax", 1e-10, true, false, f_out5),
    E(EX_OP_SOFTMAX_BWD, "softmax_bwd", 1e-10, false, false, f_out5),
    E(EX_OP_LOG_SOFTMAX, "log_softmax", 1e-10, true, false, f_out5),
    E(EX_OP_LOG_SOFTMAX_BWD, "log_softmax_bwd", 1e-10, false, false, f_out5),
    E(EX_OP_CROSS_ENTROPY, "cross_entropy", 1e-10, true, false, f_src0x4),
    E(EX_OP_CROSS_ENTROPY_BWD, "cross_entropy_bwd", 1e-10, false, false, f_out5),
    E(EX_OP_ACCURACY, "accuracy", 1e-12, false, false, f_src0),
    E(EX_OP_CONV2D, "conv2d", 1e-9, true, false, f_conv),
    E(EX_OP_CONV2D_BWD_DATA, "conv2d_bwd_data", 1e-9, false, false, f_conv_bwd_data),
    E(EX_OP_CONV2D_BWD_FILTER, "conv2d_bwd_filter", 1e-9, false, false, f_conv_bwd_filter),
    E(EX_OP_DWCONV2D, "dwconv2d", 1e-9, true, false, f_dw),
    E(EX_OP_DWCONV2D_BWD_DATA, "dwconv2d_bwd_data", 1e-9, false, false, f_dw_bwd_data),
    E(EX_OP_DWCONV2D_BWD_FILTER, "dwconv2d_bwd_filter", 1e-9, false, false, f_dw_bwd_filter),
    E(EX_OP_PWCONV, "pwconv", 1e-9, true, false, f_pw),
    E(EX_OP_PWCONV_BWD_FILTER, "pwconv_bwd_filter", 1e-9, false, false, f_pw_bwd_filter),
    E(EX_OP_MATMUL, "matmul", 1e-9, true, false, f_matmul),
    E(EX_OP_LINEAR, "linear", 1e-9, true, false, f_matmul),
    E(EX_OP_AVG_POOL, "avg_pool", 1e-11, true, false, f_pool),
    E(EX_OP_AVG_POOL_BWD, "avg_pool_bwd", 1e-11, false, false, f_pool_bwd),
    E(EX_OP_MAX_POOL, "max_pool", 1e-12, true, false, f_pool),
    E(EX_OP_MAX_POOL_BWD, "max_pool_bwd", 1e-12, false, false, f_pool_bwd),
    E(EX_OP_GLOBAL_AVG_POOL, "global_avg_pool", 1e-10, true, false, f_src0),
    E(EX_OP_BN_STATS, "bn_stats", 1e-9, false, false, f_src0x4),
    E(EX_OP_BN_APPLY, "bn_apply", 1e-9, true, false, f_out2),
    E(EX_OP_BN_BWD_REDUCE, "bn_bwd_reduce", 1e-9, false, false, f_src0x4),
    E(EX_OP_BN_BWD_DATA, "bn_bwd_data", 1e-9, false, false, f_out5),
    E(EX_OP_MIXED_SUM, "mixed_sum", 1e-11, true, false, f_sum_srcs),
    E(EX_OP_MIXED_SUM_BWD_W, "mixed_sum_bwd_w", 1e-10, false, false, f_sum_srcs),
    E(EX_OP_GUMBEL_SOFTMAX, "gumbel_softmax", 1e-9, true, false, f_out5),
    E(EX_OP_GUMBEL_SOFTMAX_BWD, "gumbel_softmax_bwd", 1e-10, false, false, f_out5),
    E(EX_OP_HARDMAX_ST, "hardmax_st", 1e-12, true, false, f_out1),
    E(EX_OP_ENTROPY, "entropy", 1e-10, true, false, f_src0x4),
    E(EX_OP_ENTROPY_BWD, "entropy_bwd", 1e-10, false, true, f_out2),
    E(EX_OP_TOPK_MASK, "topk_mask", 1e-12, false, false, f_src0x4),
    EG(EX_OP_SGD, "sgd", 1e-11, false, false, f_sgd, ex__group_joins_update),
    EG(EX_OP_ADAM, "adam", 1e-10, false, false, f_out5, ex__group_joins_update),
    E(EX_OP_GRAD_NORM, "grad_norm", 1e-10, false, false, f_sum_srcs),
    E(EX_OP_CLIP, "clip", 1e-12, false, false, f_out1),
    E(EX_OP_RAND_UNIFORM, "rand_uniform", 1e-12, false, false, f_out1),
    E(EX_OP_RAND_NORMAL, "rand_normal", 1e-10, false, false, f_out5),
    /* quantized: exact integer results, so tolerance 0 (bit for bit) */
    E(EX_OP_QUANTIZE, "quantize", 0.0, false, false, f_out1),
    E(EX_OP_DEQUANTIZE, "dequantize", 0.0, false, false, f_out1),
    E(EX_OP_REQUANTIZE, "requantize", 0.0, false, false, f_out1),
    E(EX_OP_QADD, "qadd", 0.0, false, true, f_out5),
    E(EX_OP_QCONCAT, "qconcat", 0.0, false, false, f_out1),
    E(EX_OP_QCONV2D, "qconv2d", 0.0, false, false, f_conv),
    E(EX_OP_QDWCONV2D, "qdwconv2d", 0.0, false, false, f_dw),
    E(EX_OP_QPWCONV, "qpwconv", 0.0, false, false, f_pw),
    E(EX_OP_QLINEAR, "qlinear", 0.0, false, false, f_matmul),
    E(EX_OP_QRELU, "qrelu", 0.0, false, true, f_out1),
    E(EX_OP_QMAX_POOL, "qmax_pool", 0.0, false, false, f_pool),
    E(EX_OP_QAVG_POOL, "qavg_pool", 0.0, false, false, f_pool),
    E(EX_OP_QGLOBAL_AVG_POOL, "qglobal_avg_pool", 0.0, false, false, f_src0),
    E(EX_OP_PWCONV_BN, "pwconv_bn", 1e-9, false, false, f_pw),
    E(EX_OP_ALLREDUCE, "allreduce", 1e-12, false, false, f_out1),
};
static_assert(sizeof table / sizeof table[0] == EX_OP_COUNT, "one op table entry per ex_op");

const ex_op_info *ex__op(ex_op op)
{
    return (unsigned)op < EX_OP_COUNT ? &table[op] : NULL;
}

const char *ex_op_name(ex_op op)
{
    return (unsigned)op < EX_OP_COUNT ? table[op].name : "?";
}

double ex_op_tolerance(ex_op op)
{
    return (unsigned)op < EX_OP_COUNT ? table[op].tol : 0.0;
}

int ex_op_differentiable(ex_op op)
{
    return (unsigned)op < EX_OP_COUNT && table[op].diff;
}

uint64_t ex__bytes_distinct(const ex_tensor *t)
{
    uint64_t n = (uint64_t)ex_dtype_size(t->dtype);
    for (int d = 0; d < t->ndim; d++)
        if (t->st[d] != 0)
            n *= (uint64_t)t->ne[d];
    return n;
}

void ex__node_traffic(const ex_tensor *n, uint64_t *read, uint64_t *written, uint64_t *min)
{
    uint64_t r = 0, w = ex__bytes_distinct(n);
    for (int i = 0; i < n->nsrc; i++)
        r += ex__bytes_distinct(n->src[i]);
    /* side effects: moments and running statistics are read and written again */
    if (n->op == EX_OP_SGD)
        w += ex__bytes_distinct(n->src[2]);
    else if (n->op == EX_OP_ADAM)
        w += ex__bytes_distinct(n->src[2]) + ex__bytes_distinct(n->src[3]);
    else if (n->op == EX_OP_BN_STATS && n->ip[0] && n->ip[1] != 1) /* not the moments */
        w += ex__bytes_distinct(n->src[1]) + ex__bytes_distinct(n->src[2]);
    *read = r;
    *written = w;
    /* The least any algorithm moves: each operand once. Pooling's and convolution's
     * reuse of inputs across windows is a cache effect, not extra minimal traffic. */
    *min = r + w;
}
