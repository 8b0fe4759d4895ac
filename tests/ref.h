/* Double-precision reference of every forward op of the catalogue (docs/ops.md), written
 * as plain loops over contiguous row-major arrays so each one can be checked by reading.
 * Shapes are outermost first; 4-d shapes are NCHW. The op suite (test_ops.c) compares
 * every backend against these and differentiates them numerically. */
#ifndef EXAPT_TESTS_REF_H
#define EXAPT_TESTS_REF_H

#include <stdint.h>

/* ---- element-wise ---- */

typedef enum ref_binop { REF_ADD, REF_SUB, REF_MUL } ref_binop;

/** y = a op b with NumPy broadcasting: every shape padded to 4 dims, each dim of a and b
 *  either equal to y's or 1. */
void ref_binary(ref_binop op, const double *a, const int64_t ane[4], const double *b,
                const int64_t bne[4], double *y, const int64_t yne[4]);
void ref_scale(const double *x, int64_t n, double s, double *y);
/** out = a x + y. */
void ref_axpy(double a, const double *x, const double *y, int64_t n, double *out);
void ref_relu(const double *x, int64_t n, double *y);
/** Sample s of x [nsample, inner] is scaled by 1/keep when kept[s], zeroed otherwise. */
void ref_drop_path(const double *x, int64_t nsample, int64_t inner, const int *kept, double keep,
                   double *y);

/* ---- reductions ---- */

typedef enum ref_reduce_kind { REF_SUM, REF_MEAN, REF_MAX } ref_reduce_kind;

/** Reduces x (4 dims) over the dims whose bit is set in axes; y keeps them as size 1. */
void ref_reduce(ref_reduce_kind kind, const double *x, const int64_t ne[4], unsigned axes,
                double *y);

/* ---- softmax family (rows x cols, over the last dim) ---- */

void ref_softmax(const double *x, int64_t rows, int64_t cols, double *y);
void ref_log_softmax(const double *x, int64_t rows, int64_t cols, double *y);
/** Mean over rows of -log_softmax(logits)[label]. */
double ref_cross_entropy(const double *logits, const int32_t *labels, int64_t rows, int64_t cols);
/** Rows whose first argmax equals the label. */
double ref_accuracy(const double *logits, const int32_t *labels, int64_t rows, int64_t cols);

/* ---- convolution and GEMM ---- */

typedef struct ref_conv {
    int stride[2], pad[2], dil[2];
} ref_conv;

/** Output size of a convolution along one dim. */
int64_t ref_conv_out(int64_t in, int64_t k, int stride, int pad, int dil);
/** x [N, Ci, H, W], w [Co, Ci, Kh, Kw] -> y [N, Co, Ho, Wo]. */
void ref_conv2d(const double *x, const int64_t xne[4], const double *w, const int64_t wne[4],
                const ref_conv *p, double *y);
/** x [N, C, H, W], w [C, 1, Kh, Kw] -> y [N, C, Ho, Wo]. */
void ref_dwconv2d(const double *x, const int64_t xne[4], const double *w, const int64_t wne[4],
                  const ref_conv *p, double *y);
/** ref_dwconv2d of max(x, 0). */
void ref_dwconv2d_relu(const double *x, const int64_t xne[4], const double *w, const int64_t wne[4],
                       const ref_conv *p, double *y);
/** x [N, Ci, H, W], w [Co, Ci] -> y [N, Co, H, W]. */
void ref_pwconv(const double *x, const int64_t xne[4], const double *w, int64_t co, double *y);
/** a [m, k] b [k, n] -> y [m, n]. */
void ref_matmul(const double *a, const double *b, int64_t m, int64_t k, int64_t n, double *y);
/** x [n, k], w [m, k], b [m] or NULL -> y [n, m] = x w^T + b. */
void ref_linear(const double *x, const double *w, const double *b, int64_t n, int64_t k, int64_t m,
                double *y);

/* ---- pooling ---- */

typedef struct ref_pool {
    int kernel[2], stride[2], pad[2];
} ref_pool;

int64_t ref_pool_out(int64_t in, int k, int stride, int pad);
/** Mean over each window's in-bounds elements (padding not counted). */
void ref_avg_pool(const double *x, const int64_t xne[4], const ref_pool *p, double *y);
/** Max over each window's in-bounds elements. */
void ref_max_pool(const double *x, const int64_t xne[4], const ref_pool *p, double *y);
/** [N, C, H, W] -> [N, C]. */
void ref_global_avg_pool(const double *x, const int64_t xne[4], double *y);

/* ---- batch norm ---- */

/** Batch norm 2d. train: normalizes with the batch mean and biased variance, which it
 *  returns in mean and var ([C]); eval: with run_mean and run_var. gamma and beta may be
 *  NULL (affine off). */
void ref_batch_norm(const double *x, const int64_t xne[4], const double *gamma, const double *beta,
                    const double *run_mean, const double *run_var, int train, double eps, double *y,
                    double *mean, double *var);
/** The running-statistics update of training mode (PyTorch: unbiased variance). */
void ref_bn_running_update(const double *mean, const double *var, int64_t c, int64_t m,
                           double momentum, double *run_mean, double *run_var);

/** A synchronized batch norm's local moments (BN_STATS, ip1 = 1): out [2, C], row 0 the
 *  batch mean of each channel, row 1 its biased variance. */
void ref_bn_moments(const double *x, const int64_t xne[4], double *out);
/** Its finish (BN_STATS, ip1 = 2) from moments [2, C], the group's mean and biased
 *  variance: out [2, C], row 0 the mean, row 1 1 / sqrt(var + eps) with var = max(row 1,
 *  0), which var ([C]) returns. */
void ref_bn_finish(const double *moments, int64_t c, double eps, double *out, double *var);
/** BN_BWD_DATA in training over a count of m values per channel: dx = g invstd (dy -
 *  red1 / m - xhat red0 / m), xhat = xs (xhat set) or (xs - mean) invstd; gamma may be
 *  NULL. stats and red are [2, C]. */
void ref_bn_bwd_data(const double *xs, const int64_t xne[4], const double *stats, const double *dy,
                     const double *red, const double *gamma, int xhat, double m, double *dx);
/** The gradient of a training batch norm over the whole batch x: dx for the output
 *  gradient dy (gamma may be NULL). */
void ref_bn_grad(const double *x, const int64_t xne[4], const double *gamma, const double *dy,
                 double eps, double *dx);

/* ---- NAS ---- */

/** y = sum_j [mask[idx j] != 0] w[idx j] x_j over numel elements; inactive x_j are never
 *  read. */
void ref_mixed_sum(const double *w, const double *mask, int n, const double *const *x,
                   const int *idx, int64_t numel, double *y);
/** The Gumbel noise of GUMBEL_SOFTMAX for stream (key, counter): g_i = -log(-log u_i),
 *  u_i the Philox uniform of index i clamped to [1e-10, 1 - 1e-7]. */
void ref_gumbel_noise(uint32_t k0, uint32_t k1, uint32_t c0, uint32_t c1, int64_t n, double *g);
/** softmax((logits + g) / tau) per row. */
void ref_gumbel_softmax(const double *logits, const double *g, double tau, int64_t rows,
                        int64_t cols, double *y);
/** One-hot of each row's first argmax. */
void ref_hardmax(const double *x, int64_t rows, int64_t cols, double *y);
/** y [rows] = -sum p log(max(p, 1e-30)). */
void ref_entropy(const double *p, int64_t rows, int64_t cols, double *y);
/** 1 where w is among its row's k largest (lower index first on ties) and >= thr. */
void ref_topk_mask(const double *w, int64_t rows, int64_t cols, int k, double thr, double *y);

/* ---- optimizer (update their operands in place) ---- */

/** SGD on the gradient g * clip: 1 for plain SGD, ref_clip_coef() for the clipped one. */
void ref_sgd(double *p, const double *g, double *mom, int64_t n, double lr, double momentum,
             double wd, int nesterov, double clip);
/** t counts from 1. */
void ref_adam(double *p, const double *g, double *m, double *v, int64_t n, double lr, double t,
              double beta1, double beta2, double eps, double wd);
/** sqrt of the sum of squares of n arrays. */
double ref_grad_norm(int n, const double *const *g, const int64_t *numel);
/** CLIP's coefficient min(1, max_norm / (norm + 1e-6)). */
double ref_clip_coef(double norm, double max_norm);
/** y = g min(1, max_norm / (norm + 1e-6)). */
void ref_clip(const double *g, int64_t n, double norm, double max_norm, double *y);

#endif
