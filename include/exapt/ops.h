/* exapt — the op catalogue and its graph builders.
 *
 * Builders add a node to the context's graph and return its output; nothing is
 * computed until a plan runs. Bad arguments set the context's sticky error (the
 * message names the op and the shapes) and return the inert tensor. */
#ifndef EXAPT_OPS_H
#define EXAPT_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "exapt/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Every engine op, forward and backward. The exact meaning of each op's sources and
 *  parameters is documented in docs/ops.md. */
typedef enum ex_op {
    /* element-wise */
    EX_OP_ADD,
    EX_OP_SUB,
    EX_OP_MUL,
    EX_OP_SCALE,
    EX_OP_AXPY,
    EX_OP_RELU,
    EX_OP_RELU_BWD,
    EX_OP_FILL,
    EX_OP_COPY,
    EX_OP_DROP_PATH,
    /* reductions */
    EX_OP_SUM,
    EX_OP_MEAN,
    EX_OP_MAX,
    EX_OP_MAX_BWD,
    /* softmax family */
    EX_OP_SOFTMAX,
    EX_OP_SOFTMAX_BWD,
    EX_OP_LOG_SOFTMAX,
    EX_OP_LOG_SOFTMAX_BWD,
    EX_OP_CROSS_ENTROPY,
    EX_OP_CROSS_ENTROPY_BWD,
    EX_OP_ACCURACY,
    /* convolution and GEMM */
    EX_OP_CONV2D,
    EX_OP_CONV2D_BWD_DATA,
    EX_OP_CONV2D_BWD_FILTER,
    EX_OP_DWCONV2D,
    EX_OP_DWCONV2D_BWD_DATA,
    EX_OP_DWCONV2D_BWD_FILTER,
    EX_OP_PWCONV,
    EX_OP_PWCONV_BWD_FILTER,
    EX_OP_MATMUL,
    EX_OP_LINEAR,
    /* pooling */
    EX_OP_AVG_POOL,
    EX_OP_AVG_POOL_BWD,
    EX_OP_MAX_POOL,
    EX_OP_MAX_POOL_BWD,
    EX_OP_GLOBAL_AVG_POOL,
    /* batch norm */
    EX_OP_BN_STATS,
    EX_OP_BN_APPLY,
    EX_OP_BN_BWD_REDUCE,
    EX_OP_BN_BWD_DATA,
    /* NAS */
    EX_OP_MIXED_SUM,
    EX_OP_MIXED_SUM_BWD_W,
    EX_OP_GUMBEL_SOFTMAX,
    EX_OP_GUMBEL_SOFTMAX_BWD,
    EX_OP_HARDMAX_ST,
    EX_OP_ENTROPY,
    EX_OP_ENTROPY_BWD,
    EX_OP_TOPK_MASK,
    /* optimizer */
    EX_OP_SGD,
    EX_OP_ADAM,
    EX_OP_GRAD_NORM,
    EX_OP_CLIP,
    /* random */
    EX_OP_RAND_UNIFORM,
    EX_OP_RAND_NORMAL,
    /* quantized inference (forward only) */
    EX_OP_QUANTIZE,
    EX_OP_DEQUANTIZE,
    EX_OP_REQUANTIZE,
    EX_OP_QADD,
    EX_OP_QCONCAT,
    EX_OP_QCONV2D,
    EX_OP_QDWCONV2D,
    EX_OP_QPWCONV,
    EX_OP_QLINEAR,
    EX_OP_QRELU,
    EX_OP_QMAX_POOL,
    EX_OP_QAVG_POOL,
    EX_OP_QGLOBAL_AVG_POOL,
    /* fused inference forms (forward only) */
    EX_OP_PWCONV_BN,
    /* data parallelism: carried out by the plan through its communicator, or by the
       backend its device sums serve (ex_plan_set_comm) */
    EX_OP_ALLREDUCE,
    EX_OP_COUNT
} ex_op;

/** Constant lower-case name of an op ("add", "conv2d_bwd_data"), "?" when out of range. */
const char *ex_op_name(ex_op op);

/** The op's test bound on normalized squared error, sum (y - ref)^2 / sum ref^2, against
 *  a double-precision reference; 0 for the quantized ops, which must match their integer
 *  reference bit for bit, and when out of range. */
double ex_op_tolerance(ex_op op);

/** Whether the op has a gradient rule (ops without one stop gradients). */
int ex_op_differentiable(ex_op op);

/** Convolution geometry: stride, padding and dilation as (height, width). */
typedef struct ex_conv_params {
    int stride[2];
    int pad[2];
    int dilation[2];
} ex_conv_params;

/** Pooling geometry: window, stride and padding as (height, width). Average pooling
 *  never counts padding (count_include_pad false). */
typedef struct ex_pool_params {
    int kernel[2];
    int stride[2];
    int pad[2];
} ex_pool_params;

/* ---- element-wise (shapes broadcast NumPy-style, aligned on the right) ---- */

/** a + b. */
ex_tensor *ex_add(ex_ctx *ctx, ex_tensor *a, ex_tensor *b);
/** a - b. */
ex_tensor *ex_sub(ex_ctx *ctx, ex_tensor *a, ex_tensor *b);
/** a * b, element by element. */
ex_tensor *ex_mul(ex_ctx *ctx, ex_tensor *a, ex_tensor *b);
/** s * x. */
ex_tensor *ex_scale(ex_ctx *ctx, ex_tensor *x, float s);
/** a * x + y (x and y of one shape). */
ex_tensor *ex_axpy(ex_ctx *ctx, float a, ex_tensor *x, ex_tensor *y);
/** max(x, 0). */
ex_tensor *ex_relu(ex_ctx *ctx, ex_tensor *x);
/** A new f32 tensor of shape ne filled with value. */
ex_tensor *ex_fill(ex_ctx *ctx, int ndim, const int64_t *ne, float value);
/** A contiguous copy of x. */
ex_tensor *ex_copy(ex_ctx *ctx, ex_tensor *x);
/** Writes x into dst (typically a view, e.g. a channel slice of a concatenation) and
 *  returns the written tensor, which aliases dst's storage. */
ex_tensor *ex_copy_into(ex_ctx *ctx, ex_tensor *x, ex_tensor *dst);
/** Drop path on x [N, ...]: each sample is kept with probability keep_prob and scaled by
 *  1/keep_prob, or zeroed. counter is an i32 [2] tensor (the step's Philox counter). */
ex_tensor *ex_drop_path(ex_ctx *ctx, ex_tensor *x, ex_tensor *counter, float keep_prob);

/* ---- reductions (axes: bit d set reduces dimension d; dims are kept as size 1) ---- */

/** Sum over the axes in the bit mask. */
ex_tensor *ex_sum(ex_ctx *ctx, ex_tensor *x, unsigned axes);
/** Mean over the axes in the bit mask. */
ex_tensor *ex_mean(ex_ctx *ctx, ex_tensor *x, unsigned axes);
/** Maximum over the axes in the bit mask. */
ex_tensor *ex_max(ex_ctx *ctx, ex_tensor *x, unsigned axes);
/** Sums x down to shape ne (the gradient of a broadcast). */
ex_tensor *ex_sum_to(ex_ctx *ctx, ex_tensor *x, int ndim, const int64_t *ne);

/* ---- softmax family (over the last dimension) ---- */

/** softmax(x) over the last dimension. */
ex_tensor *ex_softmax(ex_ctx *ctx, ex_tensor *x);
/** log(softmax(x)) over the last dimension. */
ex_tensor *ex_log_softmax(ex_ctx *ctx, ex_tensor *x);
/** Mean cross-entropy of logits [N, K] against i32 labels [N]: a [1] tensor. */
ex_tensor *ex_cross_entropy(ex_ctx *ctx, ex_tensor *logits, ex_tensor *labels);
/** Cross-entropy against labels smoothed towards the uniform distribution (Szegedy et
 *  al., 2016): (1 - smoothing) * ex_cross_entropy + smoothing * the mean over rows and
 *  classes of -log softmax. smoothing in [0, 1); 0 gives ex_cross_entropy itself. Built
 *  from the ops above, so every backend runs it. */
ex_tensor *ex_cross_entropy_smoothed(ex_ctx *ctx, ex_tensor *logits, ex_tensor *labels,
                                     float smoothing);
/** Number of rows whose argmax equals the label, as an f32 [1] tensor (no gradient). */
ex_tensor *ex_accuracy(ex_ctx *ctx, ex_tensor *logits, ex_tensor *labels);

/* ---- convolution ---- */

/** Dense convolution: x [N, Ci, H, W], w [Co, Ci, Kh, Kw], no bias. */
ex_tensor *ex_conv2d(ex_ctx *ctx, ex_tensor *x, ex_tensor *w, const ex_conv_params *p);
/** Depthwise convolution: x [N, C, H, W], w [C, 1, Kh, Kw]. */
ex_tensor *ex_dwconv2d(ex_ctx *ctx, ex_tensor *x, ex_tensor *w, const ex_conv_params *p);
/** Depthwise convolution of max(x, 0): ex_dwconv2d(ex_relu(x), w) as one node, which
 *  stores no ReLU output (the backward passes read x itself). The gradient of x is zero
 *  where x <= 0 (an exact zero gets none), as ex_relu's. */
ex_tensor *ex_dwconv2d_relu(ex_ctx *ctx, ex_tensor *x, ex_tensor *w, const ex_conv_params *p);
/** Pointwise (1x1) convolution as a GEMM: x [N, Ci, H, W], w [Co, Ci]. */
ex_tensor *ex_pwconv(ex_ctx *ctx, ex_tensor *x, ex_tensor *w);
/** Inference's ReLU, pointwise convolution and batch norm in eval mode as one node: per
 *  output channel y = (w · r(x) − running_mean) · invstd · gamma + beta, where
 *  invstd = 1 / sqrt(running_var + eps), r is the ReLU when relu is set and the identity
 *  otherwise, running_mean and running_var are f32 [Co], and gamma and beta (f32 [Co])
 *  come together or are both NULL (1 and 0). The values of
 *  ex_batch_norm(ex_pwconv(r(x), w), gamma, beta, running_mean, running_var, false, eps, m)
 *  without their intermediate tensors; no gradient. */
ex_tensor *ex_pwconv_bn(ex_ctx *ctx, ex_tensor *x, ex_tensor *w, ex_tensor *running_mean,
                        ex_tensor *running_var, ex_tensor *gamma, ex_tensor *beta, float eps,
                        bool relu);
/** Matrix product a [M, K] x b [K, N]. */
ex_tensor *ex_matmul(ex_ctx *ctx, ex_tensor *a, ex_tensor *b);
/** x [N, K] w^T + b, w [M, K], b [M] (b may be NULL). */
ex_tensor *ex_linear(ex_ctx *ctx, ex_tensor *x, ex_tensor *w, ex_tensor *b);

/* ---- pooling ---- */

/** Average pooling, padding not counted. */
ex_tensor *ex_avg_pool(ex_ctx *ctx, ex_tensor *x, const ex_pool_params *p);
/** Max pooling. */
ex_tensor *ex_max_pool(ex_ctx *ctx, ex_tensor *x, const ex_pool_params *p);
/** Global average pooling: [N, C, H, W] to [N, C, 1, 1]. */
ex_tensor *ex_global_avg_pool(ex_ctx *ctx, ex_tensor *x);

/* ---- data parallelism ---- */

/** y = scale · (the sum of x over the ranks of the plan's communicator), x f32 of any
 *  shape; on every rank the same bits. Carried out by the plan between the backend's
 *  runs (host-staged: the sum goes through host memory), in graph order, so every rank
 *  meets its collectives in the same order. The node records the context's rank count
 *  (ex_ctx_set_ranks), which the plan's communicator must have; with one rank it is
 *  y = scale · x. No gradient. */
ex_tensor *ex_allreduce(ex_ctx *ctx, ex_tensor *x, float scale);

/* ---- batch norm ---- */

/* In a context set for R > 1 ranks (ex_ctx_set_ranks), training batch norm takes its
 * statistics over the whole group: its local moments are averaged over the ranks (an
 * ex_allreduce) before the statistics are finished, and its backward pass sums the
 * per-channel reductions over the ranks too (synchronized batch norm). */

/** Batch norm 2d of x [N, C, H, W]. gamma and beta ([C]) may both be NULL (affine off).
 *  running_mean and running_var ([C], ex_state) are updated in training mode with
 *  momentum (PyTorch convention) and used in eval mode. */
ex_tensor *ex_batch_norm(ex_ctx *ctx, ex_tensor *x, ex_tensor *gamma, ex_tensor *beta,
                         ex_tensor *running_mean, ex_tensor *running_var, bool train, float eps,
                         float momentum);

/* ---- NAS ---- */

/** Maximum number of candidates of one mixed op. */
#define EX_MAX_CANDIDATES 12

/** Mixed sum y = sum_j [mask[idx[j]] != 0] w[idx[j]] * x[j] over the n materialized
 *  candidates of one edge; w and mask are [K] rows (views) and idx[j] < K says which
 *  weight each candidate output takes. A `none` candidate is simply not passed. */
ex_tensor *ex_mixed_sum(ex_ctx *ctx, ex_tensor *w, ex_tensor *mask, int n, ex_tensor *const *x,
                        const int *idx);
/** Gumbel-softmax over the last dimension of logits [E, K] with temperature tau (an f32
 *  [1] tensor) and noise from the Philox counter (i32 [2]). hard: one-hot forward,
 *  straight-through (soft) gradient. */
ex_tensor *ex_gumbel_softmax(ex_ctx *ctx, ex_tensor *logits, ex_tensor *tau, ex_tensor *counter,
                             bool hard);
/** One-hot of each row's argmax (first on ties); the gradient passes straight through. */
ex_tensor *ex_hardmax_st(ex_ctx *ctx, ex_tensor *x);
/** Row entropy -sum p log p of p [E, K]: an [E, 1] tensor. */
ex_tensor *ex_entropy(ex_ctx *ctx, ex_tensor *p);
/** Mask [E, K] (f32 1/0): at most k entries per row, the largest (lower index first on
 *  ties), each at least threshold. No gradient. */
ex_tensor *ex_topk_mask(ex_ctx *ctx, ex_tensor *w, int k, float threshold);

/* ---- optimizer (each updates its persistent operands in place) ---- */

/** SGD as PyTorch: g' = g + wd p; mom = momentum mom + g'; p -= lr (nesterov ? g' +
 *  momentum mom : mom). lr is an f32 [1] tensor. Returns the updated parameter. */
ex_tensor *ex_sgd(ex_ctx *ctx, ex_tensor *param, ex_tensor *grad, ex_tensor *mom, ex_tensor *lr,
                  float momentum, float weight_decay, bool nesterov);
/** ex_sgd on the clipped gradient grad * c, c = min(1, max_norm / (norm + 1e-6)) as
 *  ex_clip computes it (norm: an f32 [1] tensor from ex_grad_norm; max_norm > 0): one
 *  node instead of ex_clip's and ex_sgd's. Unlike ex_clip, the fused form leaves grad
 *  unscaled: only param and mom are written. On the CPU the param and mom it gives are
 *  bitwise those of ex_sgd(ex_clip(grad, norm, max_norm)). */
ex_tensor *ex_sgd_clip(ex_ctx *ctx, ex_tensor *param, ex_tensor *grad, ex_tensor *mom,
                       ex_tensor *lr, ex_tensor *norm, float max_norm, float momentum,
                       float weight_decay, bool nesterov);
/** Adam as PyTorch (L2 weight decay added to the gradient). hyper is an f32 [2] tensor
 *  {lr, step} with step counted from 1. Returns the updated parameter. */
ex_tensor *ex_adam(ex_ctx *ctx, ex_tensor *param, ex_tensor *grad, ex_tensor *m, ex_tensor *v,
                   ex_tensor *hyper, float beta1, float beta2, float eps, float weight_decay);
/** Global L2 norm of n tensors: an f32 [1] tensor. */
ex_tensor *ex_grad_norm(ex_ctx *ctx, int n, ex_tensor *const *g);
/** g * min(1, max_norm / (norm + 1e-6)), in place; norm from ex_grad_norm. */
ex_tensor *ex_clip(ex_ctx *ctx, ex_tensor *g, ex_tensor *norm, float max_norm);

/* ---- random (counter-based Philox 4x32-10; the same stream on every backend) ---- */

/** Uniform [lo, hi) of shape ne from the Philox counter (i32 [2]). */
ex_tensor *ex_rand_uniform(ex_ctx *ctx, ex_tensor *counter, int ndim, const int64_t *ne, float lo,
                           float hi);
/** Normal(mean, std) of shape ne from the Philox counter (i32 [2]). */
ex_tensor *ex_rand_normal(ex_ctx *ctx, ex_tensor *counter, int ndim, const int64_t *ne, float mean,
                          float std);

/* ---- quantized inference (forward only, no gradients) ----
 * int8 values are symmetric: a real value v is held as q = v / scale, q in [-127, 127].
 * Every op is exact integer arithmetic or one rounding of an f32 product, so every backend
 * gives the same bits; docs/ops.md spells out each op's arithmetic. Per-channel operands
 * (scales, multipliers) are f32 [C] along dimension 1 of x ([N, C] or [N, C, H, W]), or
 * [1] for the whole tensor. "rne" rounds to the nearest integer, ties to even; results
 * are clamped to [-127, 127] ([0, 127] with relu). */

/** i8 rne(x * inv_scale[c]) of f32 x; inv_scale holds 1 / scale. */
ex_tensor *ex_quantize(ex_ctx *ctx, ex_tensor *x, ex_tensor *inv_scale);
/** f32 x * scale[c] of i8 or i32 x. */
ex_tensor *ex_dequantize(ex_ctx *ctx, ex_tensor *x, ex_tensor *scale);
/** i8 rne(x * multiplier[c]) of i8 or i32 x (an accumulator to the next scale). */
ex_tensor *ex_requantize(ex_ctx *ctx, ex_tensor *x, ex_tensor *multiplier, bool relu);
/** i8 rne(a * ma + b * mb) of i8 a and b of one shape (each product rounded to f32 and
 *  their sum rounded once, in that order). */
ex_tensor *ex_qadd(ex_ctx *ctx, ex_tensor *a, float ma, ex_tensor *b, float mb, bool relu);
/** Parts ex_qconcat takes at most. */
#define EX_MAX_QCONCAT 10
/** Concatenation along channels of n (1 to EX_MAX_QCONCAT) i8 [N, Ci, H, W] of one N, H
 *  and W, part i requantized by multipliers[i] (f32 [n]; 1 copies it unchanged). */
ex_tensor *ex_qconcat(ex_ctx *ctx, int n, ex_tensor *const *parts, ex_tensor *multipliers);
/** i32 dense convolution plus bias[co] of i8 x [N, Ci, H, W] and i8 w [Co, Ci, Kh, Kw];
 *  bias is i32 [Co]. Ci * Kh * Kw is at most 65536, so with a bias below 2^30 in magnitude
 *  no int32 sum overflows. */
ex_tensor *ex_qconv2d(ex_ctx *ctx, ex_tensor *x, ex_tensor *w, ex_tensor *bias,
                      const ex_conv_params *p);
/** i32 depthwise convolution plus bias[c] of i8 x [N, C, H, W], i8 w [C, 1, Kh, Kw]. */
ex_tensor *ex_qdwconv2d(ex_ctx *ctx, ex_tensor *x, ex_tensor *w, ex_tensor *bias,
                        const ex_conv_params *p);
/** i32 pointwise convolution plus bias[co] of i8 x [N, Ci, H, W], i8 w [Co, Ci]. */
ex_tensor *ex_qpwconv(ex_ctx *ctx, ex_tensor *x, ex_tensor *w, ex_tensor *bias);
/** The three convolutions above with their requantize fused in: i8
 *  ex_requantize(conv, multiplier, relu) bit for bit, without the int32 sums going through
 *  memory. multiplier is f32 [Co] or [1]. */
ex_tensor *ex_qconv2d_rq(ex_ctx *ctx, ex_tensor *x, ex_tensor *w, ex_tensor *bias,
                         const ex_conv_params *p, ex_tensor *multiplier, bool relu);
/** ex_qdwconv2d with its requantize fused in, as ex_qconv2d_rq. */
ex_tensor *ex_qdwconv2d_rq(ex_ctx *ctx, ex_tensor *x, ex_tensor *w, ex_tensor *bias,
                           const ex_conv_params *p, ex_tensor *multiplier, bool relu);
/** ex_qpwconv with its requantize fused in, as ex_qconv2d_rq. */
ex_tensor *ex_qpwconv_rq(ex_ctx *ctx, ex_tensor *x, ex_tensor *w, ex_tensor *bias,
                         ex_tensor *multiplier, bool relu);
/** i32 x w^T + bias of i8 x [N, K], i8 w [M, K], i32 bias [M]. */
ex_tensor *ex_qlinear(ex_ctx *ctx, ex_tensor *x, ex_tensor *w, ex_tensor *bias);
/** i8 max(x, 0). */
ex_tensor *ex_qrelu(ex_ctx *ctx, ex_tensor *x);
/** Max pooling of i8 x [N, C, H, W]. */
ex_tensor *ex_qmax_pool(ex_ctx *ctx, ex_tensor *x, const ex_pool_params *p);
/** Average pooling of i8 x, padding not counted: the window's integer sum divided by its
 *  count, rounded half away from zero. */
ex_tensor *ex_qavg_pool(ex_ctx *ctx, ex_tensor *x, const ex_pool_params *p);
/** Global average pooling of i8 x [N, C, H, W] to [N, C, 1, 1], rounded as ex_qavg_pool. */
ex_tensor *ex_qglobal_avg_pool(ex_ctx *ctx, ex_tensor *x);

#ifdef __cplusplus
}
#endif
#endif
