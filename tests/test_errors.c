/* Bad input to every builder and public entry point: a sticky error with a message that
 * names the op and the offending shapes, inert tensors afterwards, never a crash. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "exapt/exapt.h"

/* ---- operand makers ---- */

static ex_tensor *mk(ex_ctx *ctx, ex_dtype dt, int ndim, int64_t a, int64_t b, int64_t c, int64_t d)
{
    const int64_t ne[4] = {a, b, c, d};
    return ex_input(ctx, dt, ndim, ne, "in");
}

static ex_tensor *t1(ex_ctx *ctx, int64_t a)
{
    return mk(ctx, EX_F32, 1, a, 0, 0, 0);
}

static ex_tensor *t2(ex_ctx *ctx, int64_t a, int64_t b)
{
    return mk(ctx, EX_F32, 2, a, b, 0, 0);
}

static ex_tensor *t4(ex_ctx *ctx, int64_t a, int64_t b, int64_t c, int64_t d)
{
    return mk(ctx, EX_F32, 4, a, b, c, d);
}

static ex_tensor *i1(ex_ctx *ctx, int64_t a)
{
    return mk(ctx, EX_I32, 1, a, 0, 0, 0);
}

static ex_tensor *p1(ex_ctx *ctx, int64_t a)
{
    return ex_param(ctx, 1, &a, "p");
}

static ex_tensor *p2(ex_ctx *ctx, int64_t a, int64_t b)
{
    const int64_t ne[2] = {a, b};
    return ex_param(ctx, 2, ne, "p");
}

static ex_tensor *s1(ex_ctx *ctx, int64_t a)
{
    return ex_state(ctx, EX_F32, 1, &a, "s");
}

static ex_tensor *s2(ex_ctx *ctx, int64_t a, int64_t b)
{
    const int64_t ne[2] = {a, b};
    return ex_state(ctx, EX_F32, 2, ne, "s");
}

static ex_tensor *counter(ex_ctx *ctx)
{
    return i1(ctx, 2);
}

static ex_conv_params conv(int s, int p, int d)
{
    ex_conv_params c = {{s, s}, {p, p}, {d, d}};
    return c;
}

static ex_pool_params pool(int k, int s, int p)
{
    ex_pool_params c = {{k, k}, {s, s}, {p, p}};
    return c;
}

/* ---- the cases: each builds valid operands, then one bad call ---- */

#define CASE(name) static ex_tensor *name(ex_ctx *ctx)

/* tensor.h */
CASE(input_ndim)
{
    const int64_t ne[5] = {1, 2, 3, 4, 5};
    return ex_input(ctx, EX_F32, 5, ne, "x");
}
CASE(input_negative)
{
    return t2(ctx, 5, -7);
}
CASE(input_dtype)
{
    return mk(ctx, EX_DTYPE_COUNT, 2, 5, 7, 0, 0);
}
CASE(input_null_shape)
{
    return ex_input(ctx, EX_F32, 2, NULL, "x");
}
CASE(param_ndim)
{
    const int64_t ne[1] = {3};
    return ex_param(ctx, 0, ne, "w");
}
CASE(state_negative)
{
    const int64_t ne[2] = {-5, 7};
    return ex_state(ctx, EX_F32, 2, ne, "s");
}
CASE(view_oob)
{
    const int64_t ne[2] = {5, 8}, st[2] = {7, 1};
    return ex_view(ctx, t2(ctx, 5, 7), 2, ne, st, 0);
}
CASE(view_offset)
{
    const int64_t ne[2] = {5, 7}, st[2] = {7, 1};
    return ex_view(ctx, t2(ctx, 5, 7), 2, ne, st, 1);
}
CASE(view_negative_offset)
{
    const int64_t ne[1] = {3}, st[1] = {1};
    return ex_view(ctx, t2(ctx, 5, 7), 1, ne, st, -1);
}
CASE(view_null)
{
    const int64_t ne[1] = {3}, st[1] = {1};
    return ex_view(ctx, NULL, 1, ne, st, 0);
}
CASE(reshape_numel)
{
    const int64_t ne[2] = {6, 6};
    return ex_reshape(ctx, t2(ctx, 5, 7), 2, ne);
}
CASE(slice_range)
{
    return ex_slice(ctx, t2(ctx, 5, 7), 1, 4, 4);
}
CASE(slice_dim)
{
    return ex_slice(ctx, t2(ctx, 5, 7), 2, 0, 1);
}
CASE(transpose_dim)
{
    return ex_transpose(ctx, t2(ctx, 5, 7), 0, 3);
}
CASE(broadcast_shape)
{
    const int64_t ne[2] = {5, 8};
    return ex_broadcast(ctx, t2(ctx, 5, 7), 2, ne);
}
CASE(keep_null)
{
    return ex_keep(ctx, NULL);
}
CASE(gate_dtype)
{
    ex_tensor *t = ex_relu(ctx, t2(ctx, 5, 7));
    ex_set_gate(ctx, t, i1(ctx, 3), 0);
    return NULL;
}
CASE(gate_index)
{
    ex_tensor *t = ex_relu(ctx, t2(ctx, 5, 7));
    ex_set_gate(ctx, t, t1(ctx, 3), 3);
    return NULL;
}

/* element-wise */
CASE(add_shape)
{
    return ex_add(ctx, t2(ctx, 5, 7), t2(ctx, 7, 5));
}
CASE(add_dtype)
{
    return ex_add(ctx, t1(ctx, 5), i1(ctx, 5));
}
CASE(add_null)
{
    return ex_add(ctx, t1(ctx, 5), NULL);
}
CASE(sub_shape)
{
    return ex_sub(ctx, t2(ctx, 5, 7), t2(ctx, 5, 6));
}
CASE(sub_null)
{
    return ex_sub(ctx, NULL, t1(ctx, 5));
}
CASE(mul_shape)
{
    return ex_mul(ctx, t2(ctx, 5, 7), t2(ctx, 3, 7));
}
CASE(mul_null)
{
    return ex_mul(ctx, NULL, NULL);
}
CASE(scale_null)
{
    return ex_scale(ctx, NULL, 2.0f);
}
CASE(axpy_shape)
{
    return ex_axpy(ctx, 2.0f, t2(ctx, 5, 7), t2(ctx, 5, 6));
}
CASE(axpy_null)
{
    return ex_axpy(ctx, 2.0f, t1(ctx, 5), NULL);
}
CASE(relu_dtype)
{
    return ex_relu(ctx, mk(ctx, EX_I32, 2, 5, 7, 0, 0));
}
CASE(relu_null)
{
    return ex_relu(ctx, NULL);
}
CASE(fill_negative)
{
    const int64_t ne[2] = {5, -7};
    return ex_fill(ctx, 2, ne, 1.0f);
}
CASE(fill_ndim)
{
    const int64_t ne[5] = {1, 1, 1, 1, 1};
    return ex_fill(ctx, 5, ne, 1.0f);
}
CASE(copy_null)
{
    return ex_copy(ctx, NULL);
}
CASE(copy_into_shape)
{
    return ex_copy_into(ctx, t2(ctx, 5, 7), t2(ctx, 7, 5));
}
CASE(copy_into_null)
{
    return ex_copy_into(ctx, t2(ctx, 5, 7), NULL);
}
CASE(drop_path_keep)
{
    return ex_drop_path(ctx, t4(ctx, 5, 7, 2, 2), counter(ctx), 1.5f);
}
CASE(drop_path_zero)
{
    return ex_drop_path(ctx, t4(ctx, 5, 7, 2, 2), counter(ctx), 0.0f);
}
CASE(drop_path_counter)
{
    return ex_drop_path(ctx, t4(ctx, 5, 7, 2, 2), t1(ctx, 2), 0.5f);
}

/* reductions */
CASE(sum_axes)
{
    return ex_sum(ctx, t2(ctx, 5, 7), 0x4u);
}
CASE(sum_null)
{
    return ex_sum(ctx, NULL, 0x1u);
}
CASE(mean_axes)
{
    return ex_mean(ctx, t2(ctx, 5, 7), 0x80u);
}
CASE(max_axes)
{
    return ex_max(ctx, t4(ctx, 5, 7, 2, 3), 0x10u);
}
CASE(sum_to_shape)
{
    const int64_t ne[2] = {3, 7};
    return ex_sum_to(ctx, t2(ctx, 5, 7), 2, ne);
}

/* softmax family */
CASE(softmax_null)
{
    return ex_softmax(ctx, NULL);
}
CASE(log_softmax_dtype)
{
    return ex_log_softmax(ctx, mk(ctx, EX_I32, 2, 5, 7, 0, 0));
}
CASE(cross_entropy_rows)
{
    return ex_cross_entropy(ctx, t2(ctx, 5, 7), i1(ctx, 6));
}
CASE(cross_entropy_dtype)
{
    return ex_cross_entropy(ctx, t2(ctx, 5, 7), t1(ctx, 5));
}
CASE(cross_entropy_smoothing)
{
    return ex_cross_entropy_smoothed(ctx, t2(ctx, 5, 7), i1(ctx, 5), 1.0f);
}
CASE(cross_entropy_smoothed_rows)
{
    return ex_cross_entropy_smoothed(ctx, t2(ctx, 5, 7), i1(ctx, 6), 0.1f);
}
CASE(accuracy_rank)
{
    return ex_accuracy(ctx, t4(ctx, 5, 7, 2, 2), i1(ctx, 5));
}

/* convolution */
CASE(conv2d_dtype)
{
    ex_conv_params p = conv(1, 1, 1);
    return ex_conv2d(ctx, mk(ctx, EX_I32, 4, 2, 3, 9, 9), t4(ctx, 4, 3, 3, 3), &p);
}
CASE(conv2d_channels)
{
    ex_conv_params p = conv(1, 1, 1);
    return ex_conv2d(ctx, t4(ctx, 2, 3, 9, 9), t4(ctx, 4, 5, 3, 3), &p);
}
CASE(conv2d_stride0)
{
    ex_conv_params p = conv(0, 1, 1);
    return ex_conv2d(ctx, t4(ctx, 2, 3, 9, 9), t4(ctx, 4, 3, 3, 3), &p);
}
CASE(conv2d_dilation_neg)
{
    ex_conv_params p = conv(1, 1, -1);
    return ex_conv2d(ctx, t4(ctx, 2, 3, 9, 9), t4(ctx, 4, 3, 3, 3), &p);
}
CASE(conv2d_pad_neg)
{
    ex_conv_params p = conv(1, -1, 1);
    return ex_conv2d(ctx, t4(ctx, 2, 3, 9, 9), t4(ctx, 4, 3, 3, 3), &p);
}
CASE(conv2d_kernel_big)
{
    ex_conv_params p = conv(1, 1, 1);
    return ex_conv2d(ctx, t4(ctx, 1, 1, 4, 4), t4(ctx, 1, 1, 7, 7), &p);
}
CASE(conv2d_params_null)
{
    return ex_conv2d(ctx, t4(ctx, 2, 3, 9, 9), t4(ctx, 4, 3, 3, 3), NULL);
}
CASE(conv2d_null)
{
    ex_conv_params p = conv(1, 1, 1);
    return ex_conv2d(ctx, t4(ctx, 2, 3, 9, 9), NULL, &p);
}
CASE(dwconv2d_weight)
{
    ex_conv_params p = conv(1, 1, 1);
    return ex_dwconv2d(ctx, t4(ctx, 2, 3, 9, 9), t4(ctx, 3, 2, 3, 3), &p);
}
CASE(dwconv2d_channels)
{
    ex_conv_params p = conv(1, 1, 1);
    return ex_dwconv2d(ctx, t4(ctx, 2, 3, 9, 9), t4(ctx, 5, 1, 3, 3), &p);
}
CASE(dwconv2d_stride_neg)
{
    ex_conv_params p = conv(-2, 1, 1);
    return ex_dwconv2d(ctx, t4(ctx, 2, 3, 9, 9), t4(ctx, 3, 1, 3, 3), &p);
}
CASE(dwconv2d_dilation0)
{
    ex_conv_params p = conv(1, 1, 0);
    return ex_dwconv2d(ctx, t4(ctx, 2, 3, 9, 9), t4(ctx, 3, 1, 3, 3), &p);
}
CASE(dwconv2d_kernel_big)
{
    /* dilation 2 stretches the 5x5 kernel to 9x9; 5x5 padded by 1 is only 7x7. */
    ex_conv_params p = conv(1, 1, 2);
    return ex_dwconv2d(ctx, t4(ctx, 2, 3, 5, 5), t4(ctx, 3, 1, 5, 5), &p);
}
CASE(dwconv2d_relu_channels)
{
    ex_conv_params p = conv(1, 1, 1);
    return ex_dwconv2d_relu(ctx, t4(ctx, 2, 3, 9, 9), t4(ctx, 4, 1, 3, 3), &p);
}
CASE(dwconv2d_relu_dtype)
{
    ex_conv_params p = conv(1, 1, 1);
    return ex_dwconv2d_relu(ctx, mk(ctx, EX_I32, 4, 2, 3, 9, 9), t4(ctx, 3, 1, 3, 3), &p);
}
CASE(dwconv2d_relu_params_null)
{
    return ex_dwconv2d_relu(ctx, t4(ctx, 2, 3, 9, 9), t4(ctx, 3, 1, 3, 3), NULL);
}
CASE(pwconv_channels)
{
    return ex_pwconv(ctx, t4(ctx, 2, 3, 5, 5), t2(ctx, 4, 5));
}
CASE(pwconv_rank)
{
    return ex_pwconv(ctx, t2(ctx, 5, 7), t2(ctx, 4, 7));
}
CASE(matmul_inner)
{
    return ex_matmul(ctx, t2(ctx, 5, 7), t2(ctx, 6, 3));
}
CASE(matmul_null)
{
    return ex_matmul(ctx, NULL, t2(ctx, 6, 3));
}
CASE(linear_inner)
{
    return ex_linear(ctx, t2(ctx, 5, 7), t2(ctx, 3, 6), NULL);
}
CASE(linear_bias)
{
    return ex_linear(ctx, t2(ctx, 5, 7), t2(ctx, 3, 7), t1(ctx, 4));
}

/* pooling */
CASE(avg_pool_kernel0)
{
    ex_pool_params p = pool(0, 1, 0);
    return ex_avg_pool(ctx, t4(ctx, 2, 3, 9, 9), &p);
}
CASE(avg_pool_stride0)
{
    ex_pool_params p = pool(3, 0, 1);
    return ex_avg_pool(ctx, t4(ctx, 2, 3, 9, 9), &p);
}
CASE(avg_pool_kernel_big)
{
    ex_pool_params p = pool(7, 1, 1);
    return ex_avg_pool(ctx, t4(ctx, 2, 3, 4, 4), &p);
}
CASE(max_pool_stride_neg)
{
    ex_pool_params p = pool(3, -1, 1);
    return ex_max_pool(ctx, t4(ctx, 2, 3, 9, 9), &p);
}
CASE(max_pool_rank)
{
    ex_pool_params p = pool(3, 1, 1);
    return ex_max_pool(ctx, t2(ctx, 5, 7), &p);
}
CASE(global_avg_pool_rank)
{
    return ex_global_avg_pool(ctx, t2(ctx, 5, 7));
}

/* batch norm */
CASE(batch_norm_gamma)
{
    return ex_batch_norm(ctx, t4(ctx, 2, 5, 3, 3), p1(ctx, 6), p1(ctx, 5), s1(ctx, 5), s1(ctx, 5),
                         true, 1e-5f, 0.1f);
}
CASE(batch_norm_half_affine)
{
    return ex_batch_norm(ctx, t4(ctx, 2, 5, 3, 3), p1(ctx, 5), NULL, s1(ctx, 5), s1(ctx, 5), true,
                         1e-5f, 0.1f);
}
CASE(batch_norm_running)
{
    return ex_batch_norm(ctx, t4(ctx, 2, 5, 3, 3), NULL, NULL, s1(ctx, 5), s1(ctx, 7), true, 1e-5f,
                         0.1f);
}
CASE(batch_norm_rank)
{
    return ex_batch_norm(ctx, t2(ctx, 5, 7), NULL, NULL, s1(ctx, 7), s1(ctx, 7), true, 1e-5f, 0.1f);
}

/* NAS */
CASE(mixed_sum_too_many)
{
    enum { N = EX_MAX_CANDIDATES + 1 };
    ex_tensor *x[N];
    int idx[N];
    for (int j = 0; j < N; j++) {
        x[j] = t2(ctx, 5, 7);
        idx[j] = j;
    }
    return ex_mixed_sum(ctx, t1(ctx, N), t1(ctx, N), N, x, idx);
}
CASE(mixed_sum_none)
{
    return ex_mixed_sum(ctx, t1(ctx, 3), t1(ctx, 3), 0, NULL, NULL);
}
CASE(mixed_sum_shape)
{
    ex_tensor *x[2] = {t2(ctx, 5, 7), t2(ctx, 7, 5)};
    const int idx[2] = {0, 1};
    return ex_mixed_sum(ctx, t1(ctx, 3), t1(ctx, 3), 2, x, idx);
}
CASE(mixed_sum_index)
{
    ex_tensor *x[2] = {t2(ctx, 5, 7), t2(ctx, 5, 7)};
    const int idx[2] = {0, 3};
    return ex_mixed_sum(ctx, t1(ctx, 3), t1(ctx, 3), 2, x, idx);
}
CASE(gumbel_softmax_counter)
{
    return ex_gumbel_softmax(ctx, t2(ctx, 5, 7), t1(ctx, 1), mk(ctx, EX_I32, 2, 3, 7, 0, 0), false);
}
CASE(gumbel_softmax_tau)
{
    return ex_gumbel_softmax(ctx, t2(ctx, 5, 7), t2(ctx, 2, 3), counter(ctx), true);
}
CASE(hardmax_st_null)
{
    return ex_hardmax_st(ctx, NULL);
}
CASE(entropy_dtype)
{
    return ex_entropy(ctx, mk(ctx, EX_I32, 2, 5, 7, 0, 0));
}
CASE(topk_mask_k0)
{
    return ex_topk_mask(ctx, t2(ctx, 5, 7), 0, 0.0f);
}
CASE(topk_mask_kneg)
{
    return ex_topk_mask(ctx, t2(ctx, 5, 7), -1, 0.0f);
}

/* optimizer */
CASE(sgd_grad_shape)
{
    return ex_sgd(ctx, p2(ctx, 5, 7), t2(ctx, 7, 5), s2(ctx, 5, 7), t1(ctx, 1), 0.9f, 0, false);
}
CASE(sgd_lr_shape)
{
    return ex_sgd(ctx, p2(ctx, 5, 7), t2(ctx, 5, 7), s2(ctx, 5, 7), t2(ctx, 2, 3), 0.9f, 0, false);
}
CASE(sgd_transient)
{
    ex_tensor *act = ex_relu(ctx, t2(ctx, 5, 7));
    return ex_sgd(ctx, act, t2(ctx, 5, 7), s2(ctx, 5, 7), t1(ctx, 1), 0.9f, 0, false);
}
CASE(sgd_clip_norm_shape)
{
    return ex_sgd_clip(ctx, p2(ctx, 5, 7), t2(ctx, 5, 7), s2(ctx, 5, 7), t1(ctx, 1), t2(ctx, 2, 3),
                       1.0f, 0.9f, 0, false);
}
CASE(sgd_clip_norm_dtype)
{
    return ex_sgd_clip(ctx, p2(ctx, 5, 7), t2(ctx, 5, 7), s2(ctx, 5, 7), t1(ctx, 1), i1(ctx, 1),
                       1.0f, 0.9f, 0, false);
}
CASE(sgd_clip_norm_null)
{
    return ex_sgd_clip(ctx, p2(ctx, 5, 7), t2(ctx, 5, 7), s2(ctx, 5, 7), t1(ctx, 1), NULL, 1.0f,
                       0.9f, 0, false);
}
CASE(sgd_clip_max_norm)
{
    return ex_sgd_clip(ctx, p2(ctx, 5, 7), t2(ctx, 5, 7), s2(ctx, 5, 7), t1(ctx, 1), t1(ctx, 1),
                       0.0f, 0.9f, 0, false);
}
CASE(sgd_clip_grad_shape)
{
    return ex_sgd_clip(ctx, p2(ctx, 5, 7), t2(ctx, 7, 5), s2(ctx, 5, 7), t1(ctx, 1), t1(ctx, 1),
                       1.0f, 0.9f, 0, false);
}
CASE(adam_hyper)
{
    return ex_adam(ctx, p2(ctx, 5, 7), t2(ctx, 5, 7), s2(ctx, 5, 7), s2(ctx, 5, 7), t2(ctx, 2, 3),
                   0.9f, 0.999f, 1e-8f, 0);
}
CASE(adam_moment_shape)
{
    return ex_adam(ctx, p2(ctx, 5, 7), t2(ctx, 5, 7), s2(ctx, 5, 7), s2(ctx, 7, 5), t1(ctx, 2),
                   0.9f, 0.999f, 1e-8f, 0);
}
CASE(grad_norm_zero)
{
    return ex_grad_norm(ctx, 0, NULL);
}
CASE(grad_norm_null)
{
    ex_tensor *g[2] = {t2(ctx, 5, 7), NULL};
    return ex_grad_norm(ctx, 2, g);
}
CASE(clip_norm_shape)
{
    return ex_clip(ctx, t2(ctx, 5, 7), t2(ctx, 2, 3), 1.0f);
}
CASE(clip_max_norm)
{
    return ex_clip(ctx, t2(ctx, 5, 7), t1(ctx, 1), -1.0f);
}

/* random */
CASE(rand_uniform_counter)
{
    const int64_t ne[2] = {5, 7};
    return ex_rand_uniform(ctx, mk(ctx, EX_I32, 2, 3, 7, 0, 0), 2, ne, 0.0f, 1.0f);
}
CASE(rand_uniform_range)
{
    const int64_t ne[2] = {5, 7};
    return ex_rand_uniform(ctx, counter(ctx), 2, ne, 1.0f, 0.0f);
}
CASE(rand_normal_std)
{
    const int64_t ne[2] = {5, 7};
    return ex_rand_normal(ctx, counter(ctx), 2, ne, 0.0f, -1.0f);
}
CASE(rand_normal_shape)
{
    const int64_t ne[2] = {5, -7};
    return ex_rand_normal(ctx, counter(ctx), 2, ne, 0.0f, 1.0f);
}

/* autodiff */
CASE(backward_not_scalar)
{
    ex_graph_backward(ctx, ex_relu(ctx, p2(ctx, 5, 7)));
    return NULL;
}

/* What the bad call returns: the inert tensor, the inert tensor or NULL (ex_keep returns
 * its argument), or nothing to check (void calls, ex_graph_backward). */
enum ret { RET_INERT, RET_INERT_OR_NULL, RET_NONE };

/* ---- quantized ---- */
static ex_tensor *q8(ex_ctx *ctx, int ndim, int64_t a, int64_t b, int64_t c, int64_t d)
{
    return mk(ctx, EX_I8, ndim, a, b, c, d);
}
CASE(quantize_scale_shape)
{
    return ex_quantize(ctx, t4(ctx, 2, 3, 5, 5), t1(ctx, 4));
}
CASE(quantize_dtype)
{
    return ex_quantize(ctx, q8(ctx, 2, 5, 7, 0, 0), t1(ctx, 7));
}
CASE(dequantize_dtype)
{
    return ex_dequantize(ctx, t2(ctx, 5, 7), t1(ctx, 7));
}
CASE(requantize_rank)
{
    return ex_requantize(ctx, mk(ctx, EX_I32, 3, 5, 7, 2, 0), t1(ctx, 7), false);
}
CASE(qadd_shape)
{
    return ex_qadd(ctx, q8(ctx, 2, 5, 7, 0, 0), 1, q8(ctx, 2, 7, 5, 0, 0), 1, false);
}
CASE(qadd_multiplier)
{
    return ex_qadd(ctx, q8(ctx, 2, 5, 7, 0, 0), 1.0f / 0.0f, q8(ctx, 2, 5, 7, 0, 0), 1, false);
}
CASE(qconcat_parts)
{
    ex_tensor *p[2] = {q8(ctx, 4, 2, 3, 5, 5), q8(ctx, 4, 2, 3, 5, 6)};
    return ex_qconcat(ctx, 2, p, t1(ctx, 2));
}
CASE(qconcat_count)
{
    ex_tensor *p[1] = {q8(ctx, 4, 2, 3, 5, 5)};
    return ex_qconcat(ctx, 11, p, t1(ctx, 11));
}
CASE(qconv2d_bias)
{
    ex_conv_params p = conv(1, 1, 1);
    return ex_qconv2d(ctx, q8(ctx, 4, 2, 3, 9, 9), q8(ctx, 4, 4, 3, 3, 3),
                      mk(ctx, EX_I32, 1, 5, 0, 0, 0), &p);
}
CASE(qconv2d_terms)
{
    ex_conv_params p = conv(1, 0, 1);
    return ex_qconv2d(ctx, q8(ctx, 4, 1, 8193, 3, 3), q8(ctx, 4, 2, 8193, 3, 3),
                      mk(ctx, EX_I32, 1, 2, 0, 0, 0), &p);
}
CASE(qdwconv2d_dtype)
{
    ex_conv_params p = conv(1, 1, 1);
    return ex_qdwconv2d(ctx, t4(ctx, 2, 3, 9, 9), q8(ctx, 4, 3, 1, 3, 3),
                        mk(ctx, EX_I32, 1, 3, 0, 0, 0), &p);
}
CASE(qpwconv_channels)
{
    return ex_qpwconv(ctx, q8(ctx, 4, 2, 3, 5, 5), q8(ctx, 2, 4, 5, 0, 0),
                      mk(ctx, EX_I32, 1, 4, 0, 0, 0));
}
CASE(qconv2d_rq_multiplier)
{
    ex_conv_params p = conv(1, 1, 1);
    return ex_qconv2d_rq(ctx, q8(ctx, 4, 2, 3, 9, 9), q8(ctx, 4, 4, 3, 3, 3),
                         mk(ctx, EX_I32, 1, 4, 0, 0, 0), &p, t1(ctx, 3), false);
}
CASE(qdwconv2d_rq_null)
{
    ex_conv_params p = conv(1, 1, 1);
    return ex_qdwconv2d_rq(ctx, q8(ctx, 4, 2, 3, 9, 9), q8(ctx, 4, 3, 1, 3, 3),
                           mk(ctx, EX_I32, 1, 3, 0, 0, 0), &p, NULL, true);
}
CASE(qpwconv_rq_dtype)
{
    return ex_qpwconv_rq(ctx, q8(ctx, 4, 2, 3, 5, 5), q8(ctx, 2, 4, 3, 0, 0),
                         mk(ctx, EX_I32, 1, 4, 0, 0, 0), mk(ctx, EX_I32, 1, 4, 0, 0, 0), false);
}
CASE(pwconv_bn_stats)
{
    return ex_pwconv_bn(ctx, t4(ctx, 2, 3, 5, 5), t2(ctx, 4, 3), t1(ctx, 5), t1(ctx, 4), NULL, NULL,
                        1e-5f, false);
}
CASE(pwconv_bn_eps)
{
    return ex_pwconv_bn(ctx, t4(ctx, 2, 3, 5, 5), t2(ctx, 4, 3), t1(ctx, 4), t1(ctx, 4), NULL, NULL,
                        0.0f, true);
}
CASE(pwconv_bn_gamma_alone)
{
    return ex_pwconv_bn(ctx, t4(ctx, 2, 3, 5, 5), t2(ctx, 4, 3), t1(ctx, 4), t1(ctx, 4), t1(ctx, 4),
                        NULL, 1e-5f, false);
}
CASE(qlinear_bias_dtype)
{
    return ex_qlinear(ctx, q8(ctx, 2, 5, 7, 0, 0), q8(ctx, 2, 3, 7, 0, 0), t1(ctx, 3));
}
CASE(qrelu_dtype)
{
    return ex_qrelu(ctx, t2(ctx, 5, 7));
}
CASE(qmax_pool_dtype)
{
    ex_pool_params p = {{3, 3}, {1, 1}, {1, 1}};
    return ex_qmax_pool(ctx, t4(ctx, 2, 3, 5, 5), &p);
}
CASE(qavg_pool_kernel_big)
{
    ex_pool_params p = {{7, 7}, {1, 1}, {0, 0}};
    return ex_qavg_pool(ctx, q8(ctx, 4, 2, 3, 4, 4), &p);
}
CASE(qglobal_avg_pool_rank)
{
    return ex_qglobal_avg_pool(ctx, q8(ctx, 2, 5, 7, 0, 0));
}

typedef struct err_case {
    const char *name;
    ex_tensor *(*build)(ex_ctx *ctx);
    ex_status want, alt; /* alt: a second defensible status, or EX_OK for none */
    enum ret ret;
    const char *needle[3]; /* the op's name and the offending shapes or values */
} err_case;

#define ARG EX_ERR_ARG
#define SHP EX_ERR_SHAPE
#define C(fn, want, alt, ...)                                                                      \
    {                                                                                              \
#fn, fn, want, alt, RET_INERT,                                                             \
        {                                                                                          \
            __VA_ARGS__                                                                            \
        }                                                                                          \
    }

static const err_case cases[] = {
    C(input_ndim, ARG, SHP, "input", "5"),
    C(input_negative, ARG, SHP, "input", "-7"),
    C(input_dtype, ARG, EX_OK, "input"),
    C(input_null_shape, ARG, EX_OK, "input"),
    C(param_ndim, ARG, SHP, "param", "0"),
    C(state_negative, ARG, SHP, "state", "-5"),
    C(view_oob, ARG, SHP, "view", "5x7", "5x8"),
    C(view_offset, ARG, SHP, "view", "5x7"),
    C(view_negative_offset, ARG, SHP, "view", "-1"),
    C(view_null, ARG, EX_OK, "view"),
    C(reshape_numel, SHP, EX_OK, "reshape", "5x7", "6x6"),
    C(slice_range, ARG, SHP, "slice", "5x7"),
    C(slice_dim, ARG, SHP, "slice", "5x7"),
    C(transpose_dim, ARG, SHP, "transpose", "5x7"),
    C(broadcast_shape, SHP, EX_OK, "broadcast", "5x7", "5x8"),
    {"keep_null", keep_null, ARG, EX_OK, RET_INERT_OR_NULL, {"keep"}},
    {"gate_dtype", gate_dtype, ARG, EX_OK, RET_NONE, {"gate", "i32"}},
    {"gate_index", gate_index, ARG, EX_OK, RET_NONE, {"gate", "3"}},
    C(add_shape, SHP, EX_OK, "add", "5x7", "7x5"),
    C(add_dtype, ARG, EX_OK, "add", "i32"),
    C(add_null, ARG, EX_OK, "add"),
    C(sub_shape, SHP, EX_OK, "sub", "5x7", "5x6"),
    C(sub_null, ARG, EX_OK, "sub"),
    C(mul_shape, SHP, EX_OK, "mul", "5x7", "3x7"),
    C(mul_null, ARG, EX_OK, "mul"),
    C(scale_null, ARG, EX_OK, "scale"),
    C(axpy_shape, SHP, EX_OK, "axpy", "5x7", "5x6"),
    C(axpy_null, ARG, EX_OK, "axpy"),
    C(relu_dtype, ARG, EX_OK, "relu", "i32"),
    C(relu_null, ARG, EX_OK, "relu"),
    C(fill_negative, ARG, SHP, "fill", "-7"),
    C(fill_ndim, ARG, SHP, "fill", "5"),
    C(copy_null, ARG, EX_OK, "copy"),
    C(copy_into_shape, SHP, EX_OK, "copy", "5x7", "7x5"),
    C(copy_into_null, ARG, EX_OK, "copy"),
    C(drop_path_keep, ARG, EX_OK, "drop_path", "1.5"),
    C(drop_path_zero, ARG, EX_OK, "drop_path", "0"),
    C(drop_path_counter, ARG, EX_OK, "drop_path", "f32"),
    C(sum_axes, ARG, EX_OK, "sum", "5x7"),
    C(sum_null, ARG, EX_OK, "sum"),
    C(mean_axes, ARG, EX_OK, "mean", "5x7"),
    C(max_axes, ARG, EX_OK, "max", "5x7x2x3"),
    C(sum_to_shape, SHP, EX_OK, "sum_to", "5x7", "3x7"),
    C(softmax_null, ARG, EX_OK, "softmax"),
    C(log_softmax_dtype, ARG, EX_OK, "log_softmax", "i32"),
    C(cross_entropy_rows, SHP, EX_OK, "cross_entropy", "5x7", "6"),
    C(cross_entropy_dtype, ARG, EX_OK, "cross_entropy", "f32"),
    C(cross_entropy_smoothing, ARG, EX_OK, "cross_entropy_smoothed", "smoothing 1"),
    C(cross_entropy_smoothed_rows, SHP, EX_OK, "cross_entropy", "5x7", "6"),
    C(accuracy_rank, SHP, EX_OK, "accuracy", "5x7x2x2"),
    C(conv2d_dtype, ARG, EX_OK, "conv2d", "i32"),
    C(conv2d_channels, SHP, EX_OK, "conv2d", "2x3x9x9", "4x5x3x3"),
    C(conv2d_stride0, ARG, EX_OK, "conv2d", "stride"),
    C(conv2d_dilation_neg, ARG, EX_OK, "conv2d", "dilation"),
    C(conv2d_pad_neg, ARG, EX_OK, "conv2d", "pad"),
    C(conv2d_kernel_big, SHP, ARG, "conv2d", "1x1x4x4", "1x1x7x7"),
    C(conv2d_params_null, ARG, EX_OK, "conv2d"),
    C(conv2d_null, ARG, EX_OK, "conv2d"),
    C(dwconv2d_weight, SHP, EX_OK, "dwconv2d", "2x3x9x9", "3x2x3x3"),
    C(dwconv2d_channels, SHP, EX_OK, "dwconv2d", "2x3x9x9", "5x1x3x3"),
    C(dwconv2d_stride_neg, ARG, EX_OK, "dwconv2d", "stride"),
    C(dwconv2d_dilation0, ARG, EX_OK, "dwconv2d", "dilation"),
    C(dwconv2d_kernel_big, SHP, ARG, "dwconv2d", "2x3x5x5", "3x1x5x5"),
    C(dwconv2d_relu_channels, SHP, EX_OK, "dwconv2d_relu", "2x3x9x9", "4x1x3x3"),
    C(dwconv2d_relu_dtype, ARG, EX_OK, "dwconv2d_relu", "i32"),
    C(dwconv2d_relu_params_null, ARG, EX_OK, "dwconv2d_relu"),
    C(pwconv_channels, SHP, EX_OK, "pwconv", "2x3x5x5", "4x5"),
    C(pwconv_rank, SHP, EX_OK, "pwconv", "5x7"),
    C(matmul_inner, SHP, EX_OK, "matmul", "5x7", "6x3"),
    C(matmul_null, ARG, EX_OK, "matmul"),
    C(linear_inner, SHP, EX_OK, "linear", "5x7", "3x6"),
    C(linear_bias, SHP, EX_OK, "linear", "3x7", "4"),
    C(avg_pool_kernel0, ARG, EX_OK, "avg_pool", "kernel"),
    C(avg_pool_stride0, ARG, EX_OK, "avg_pool", "stride"),
    C(avg_pool_kernel_big, SHP, ARG, "avg_pool", "2x3x4x4", "7"),
    C(max_pool_stride_neg, ARG, EX_OK, "max_pool", "stride"),
    C(max_pool_rank, SHP, EX_OK, "max_pool", "5x7"),
    C(global_avg_pool_rank, SHP, EX_OK, "global_avg_pool", "5x7"),
    C(quantize_scale_shape, SHP, EX_OK, "quantize", "4", "2x3x5x5"),
    C(quantize_dtype, ARG, EX_OK, "quantize", "i8"),
    C(dequantize_dtype, ARG, EX_OK, "dequantize", "f32"),
    C(requantize_rank, SHP, EX_OK, "requantize", "5x7x2"),
    C(qadd_shape, SHP, EX_OK, "qadd", "5x7", "7x5"),
    C(qadd_multiplier, ARG, EX_OK, "qadd", "inf"),
    C(qconcat_parts, SHP, EX_OK, "qconcat", "2x3x5x6"),
    C(qconcat_count, ARG, EX_OK, "qconcat", "11"),
    C(qconv2d_bias, SHP, EX_OK, "qconv2d", "5"),
    C(qconv2d_terms, SHP, EX_OK, "qconv2d", "73737"),
    C(qdwconv2d_dtype, ARG, EX_OK, "qdwconv2d", "f32"),
    C(qpwconv_channels, SHP, EX_OK, "qpwconv", "2x3x5x5", "4x5"),
    C(qconv2d_rq_multiplier, SHP, EX_OK, "qconv2d_rq", "multiplier", "3"),
    C(qdwconv2d_rq_null, ARG, EX_OK, "qdwconv2d_rq", "multiplier"),
    C(qpwconv_rq_dtype, ARG, EX_OK, "qpwconv_rq", "multiplier", "i32"),
    C(pwconv_bn_stats, SHP, EX_OK, "pwconv_bn", "running_mean", "5"),
    C(pwconv_bn_eps, ARG, EX_OK, "pwconv_bn", "eps"),
    C(pwconv_bn_gamma_alone, ARG, EX_OK, "pwconv_bn", "gamma and beta"),
    C(qlinear_bias_dtype, ARG, EX_OK, "qlinear", "bias"),
    C(qrelu_dtype, ARG, EX_OK, "qrelu", "f32"),
    C(qmax_pool_dtype, ARG, EX_OK, "qmax_pool", "f32"),
    C(qavg_pool_kernel_big, SHP, ARG, "qavg_pool", "2x3x4x4", "7"),
    C(qglobal_avg_pool_rank, SHP, EX_OK, "qglobal_avg_pool", "5x7"),
    C(batch_norm_gamma, SHP, EX_OK, "batch_norm", "2x5x3x3", "6"),
    C(batch_norm_half_affine, ARG, EX_OK, "batch_norm"),
    C(batch_norm_running, SHP, EX_OK, "batch_norm", "2x5x3x3", "7"),
    C(batch_norm_rank, SHP, EX_OK, "batch_norm", "5x7"),
    C(mixed_sum_too_many, ARG, EX_OK, "mixed_sum", "13"),
    C(mixed_sum_none, ARG, EX_OK, "mixed_sum", "0"),
    C(mixed_sum_shape, SHP, EX_OK, "mixed_sum", "5x7", "7x5"),
    C(mixed_sum_index, ARG, EX_OK, "mixed_sum", "3"),
    C(gumbel_softmax_counter, SHP, ARG, "gumbel_softmax", "3x7"),
    C(gumbel_softmax_tau, SHP, ARG, "gumbel_softmax", "2x3"),
    C(hardmax_st_null, ARG, EX_OK, "hardmax_st"),
    C(entropy_dtype, ARG, EX_OK, "entropy", "i32"),
    C(topk_mask_k0, ARG, EX_OK, "topk_mask", "0"),
    C(topk_mask_kneg, ARG, EX_OK, "topk_mask", "-1"),
    C(sgd_grad_shape, SHP, EX_OK, "sgd", "5x7", "7x5"),
    C(sgd_lr_shape, SHP, ARG, "sgd", "2x3"),
    C(sgd_transient, ARG, EX_ERR_STATE, "sgd"),
    C(sgd_clip_norm_shape, SHP, ARG, "sgd_clip", "norm", "2x3"),
    C(sgd_clip_norm_dtype, ARG, EX_OK, "sgd_clip", "norm", "i32"),
    C(sgd_clip_norm_null, ARG, EX_OK, "sgd_clip", "4"),
    C(sgd_clip_max_norm, ARG, EX_OK, "sgd_clip", "max_norm 0"),
    C(sgd_clip_grad_shape, SHP, EX_OK, "sgd_clip", "5x7", "7x5"),
    C(adam_hyper, SHP, ARG, "adam", "2x3"),
    C(adam_moment_shape, SHP, EX_OK, "adam", "5x7", "7x5"),
    C(grad_norm_zero, ARG, EX_OK, "grad_norm", "0"),
    C(grad_norm_null, ARG, EX_OK, "grad_norm"),
    C(clip_norm_shape, SHP, ARG, "clip", "2x3"),
    C(clip_max_norm, ARG, EX_OK, "clip", "-1"),
    C(rand_uniform_counter, SHP, ARG, "rand_uniform", "3x7"),
    C(rand_uniform_range, ARG, EX_OK, "rand_uniform", "1", "0"),
    C(rand_normal_std, ARG, EX_OK, "rand_normal", "-1"),
    C(rand_normal_shape, ARG, SHP, "rand_normal", "-7"),
    {"backward_not_scalar", backward_not_scalar, SHP, EX_OK, RET_NONE, {"backward", "5x7"}},
};

/* ---- running a case ---- */

static int setup_backend(void **state)
{
    char msg[256] = "";
    ex_backend *be = NULL;
    if (ex_backend_open("cpu", &be, msg, sizeof msg) != EX_OK) {
        fprintf(stderr, "cannot open the cpu backend: %s\n", msg);
        return -1;
    }
    *state = be;
    return 0;
}

static int teardown_backend(void **state)
{
    ex_backend_close(*state);
    return 0;
}

/* The case runner records every broken expectation and fails once at the end, so one
 * run shows them all. */
typedef struct tally {
    int failures;
} tally;

static void expect(tally *t, bool ok, const err_case *c, const char *fmt, ...)
{
    if (ok)
        return;
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL %s: ", c->name);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    t->failures++;
}

static void check_first(tally *t, const err_case *c, ex_ctx *ctx, ex_tensor *bad)
{
    ex_status got = ex_ctx_status(ctx);
    const char *msg = ex_ctx_error(ctx);
    expect(t, got == c->want || (c->alt != EX_OK && got == c->alt), c, "status %s, want %s",
           ex_status_str(got), ex_status_str(c->want));
    expect(t, msg != NULL, c, "no message");
    for (int k = 0; msg && k < 3 && c->needle[k]; k++)
        expect(t, strstr(msg, c->needle[k]) != NULL, c, "message \"%s\" lacks \"%s\"", msg,
               c->needle[k]);
    expect(t, c->ret != RET_INERT || bad != NULL, c, "NULL returned while the context exists");
}

/* After the first error: later builders, good or bad, return the inert tensor and leave
 * the first message alone; planning returns the first status. */
static void check_sticky(tally *t, const err_case *c, ex_ctx *ctx, ex_tensor *bad, ex_backend *be)
{
    char first[1024];
    ex_status st = ex_ctx_status(ctx);
    snprintf(first, sizeof first, "%s", ex_ctx_error(ctx));
    ex_tensor *inert = t2(ctx, 2, 2);
    expect(t, inert != NULL, c, "a later ex_input returned NULL");
    if (c->ret == RET_INERT || (c->ret == RET_INERT_OR_NULL && bad))
        expect(t, bad == inert, c, "the failing builder and a later one return different tensors");
    expect(t, ex_relu(ctx, inert) == inert, c, "relu of the inert tensor is not inert");
    expect(t, ex_relu(ctx, t2(ctx, 3, 3)) == inert, c, "a later good builder is not inert");
    expect(t, ex_add(ctx, t2(ctx, 5, 7), t2(ctx, 7, 5)) == inert, c, "a later bad add");
    expect(t, ex_scale(ctx, NULL, 1.0f) == inert, c, "a later scale of NULL is not inert");
    expect(t, ex_ctx_status(ctx) == st, c, "status changed to %s",
           ex_status_str(ex_ctx_status(ctx)));
    expect(t, strcmp(ex_ctx_error(ctx), first) == 0, c, "message overwritten: \"%s\"",
           ex_ctx_error(ctx));

    ex_plan_opts opts;
    ex_plan_opts_default(&opts);
    ex_plan *plan = NULL;
    ex_status ps = ex_graph_plan(ctx, be, &opts, &plan);
    expect(t, ps == st, c, "ex_graph_plan returned %s, not the sticky %s", ex_status_str(ps),
           ex_status_str(st));
    expect(t, plan == NULL, c, "ex_graph_plan made a plan");
    ex_plan_free(plan);
    expect(t, strcmp(ex_ctx_error(ctx), first) == 0, c, "message overwritten by planning");
}

static void test_cases(void **state)
{
    ex_backend *be = *state;
    tally t = {0};
    int n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++) {
        const err_case *c = &cases[i];
        ex_ctx *ctx = ex_ctx_new();
        assert_non_null(ctx);
        ex_tensor *bad = c->build(ctx);
        printf("  %-24s %-14s %s\n", c->name, ex_status_str(ex_ctx_status(ctx)), ex_ctx_error(ctx));
        check_first(&t, c, ctx, bad);
        check_sticky(&t, c, ctx, bad, be);
        ex_ctx_free(ctx);
    }
    if (t.failures)
        fail_msg("%d broken expectations in %d cases", t.failures, n);
}

/* ---- a NULL context: no crash, NULL back, errors from every entry point ---- */

static void test_null_ctx(void **state)
{
    ex_backend *be = *state;
    const int64_t ne[2] = {2, 2}, st[2] = {2, 1};
    const ex_conv_params cp = conv(1, 1, 1);
    const ex_pool_params pp = pool(3, 1, 1);
    ex_tensor *none[2] = {NULL, NULL};
    const int idx[2] = {0, 1};
    ex_tensor *r[] = {
        ex_input(NULL, EX_F32, 2, ne, "x"),
        ex_param(NULL, 2, ne, "w"),
        ex_state(NULL, EX_F32, 2, ne, "s"),
        ex_view(NULL, NULL, 2, ne, st, 0),
        ex_reshape(NULL, NULL, 2, ne),
        ex_slice(NULL, NULL, 0, 0, 1),
        ex_transpose(NULL, NULL, 0, 1),
        ex_broadcast(NULL, NULL, 2, ne),
        ex_keep(NULL, NULL),
        ex_add(NULL, NULL, NULL),
        ex_sub(NULL, NULL, NULL),
        ex_mul(NULL, NULL, NULL),
        ex_scale(NULL, NULL, 1),
        ex_axpy(NULL, 1, NULL, NULL),
        ex_relu(NULL, NULL),
        ex_fill(NULL, 2, ne, 1),
        ex_copy(NULL, NULL),
        ex_copy_into(NULL, NULL, NULL),
        ex_drop_path(NULL, NULL, NULL, 0.5f),
        ex_sum(NULL, NULL, 1),
        ex_mean(NULL, NULL, 1),
        ex_max(NULL, NULL, 1),
        ex_sum_to(NULL, NULL, 2, ne),
        ex_softmax(NULL, NULL),
        ex_log_softmax(NULL, NULL),
        ex_cross_entropy(NULL, NULL, NULL),
        ex_cross_entropy_smoothed(NULL, NULL, NULL, 0.1f),
        ex_accuracy(NULL, NULL, NULL),
        ex_conv2d(NULL, NULL, NULL, &cp),
        ex_dwconv2d(NULL, NULL, NULL, &cp),
        ex_dwconv2d_relu(NULL, NULL, NULL, &cp),
        ex_pwconv(NULL, NULL, NULL),
        ex_matmul(NULL, NULL, NULL),
        ex_linear(NULL, NULL, NULL, NULL),
        ex_avg_pool(NULL, NULL, &pp),
        ex_max_pool(NULL, NULL, &pp),
        ex_global_avg_pool(NULL, NULL),
        ex_batch_norm(NULL, NULL, NULL, NULL, NULL, NULL, true, 1e-5f, 0.1f),
        ex_mixed_sum(NULL, NULL, NULL, 2, none, idx),
        ex_gumbel_softmax(NULL, NULL, NULL, NULL, false),
        ex_hardmax_st(NULL, NULL),
        ex_entropy(NULL, NULL),
        ex_topk_mask(NULL, NULL, 1, 0),
        ex_sgd(NULL, NULL, NULL, NULL, NULL, 0.9f, 0, false),
        ex_sgd_clip(NULL, NULL, NULL, NULL, NULL, NULL, 1, 0.9f, 0, false),
        ex_adam(NULL, NULL, NULL, NULL, NULL, NULL, 0.9f, 0.999f, 1e-8f, 0),
        ex_grad_norm(NULL, 2, none),
        ex_clip(NULL, NULL, NULL, 1),
        ex_rand_uniform(NULL, NULL, 2, ne, 0, 1),
        ex_rand_normal(NULL, NULL, 2, ne, 0, 1),
        ex_quantize(NULL, NULL, NULL),
        ex_dequantize(NULL, NULL, NULL),
        ex_requantize(NULL, NULL, NULL, false),
        ex_qadd(NULL, NULL, 1, NULL, 1, false),
        ex_qconcat(NULL, 2, none, NULL),
        ex_qconv2d(NULL, NULL, NULL, NULL, &cp),
        ex_qdwconv2d(NULL, NULL, NULL, NULL, &cp),
        ex_qpwconv(NULL, NULL, NULL, NULL),
        ex_qconv2d_rq(NULL, NULL, NULL, NULL, &cp, NULL, false),
        ex_qdwconv2d_rq(NULL, NULL, NULL, NULL, &cp, NULL, false),
        ex_qpwconv_rq(NULL, NULL, NULL, NULL, NULL, false),
        ex_qlinear(NULL, NULL, NULL, NULL),
        ex_pwconv_bn(NULL, NULL, NULL, NULL, NULL, NULL, NULL, 1e-5f, false),
        ex_qrelu(NULL, NULL),
        ex_qmax_pool(NULL, NULL, &pp),
        ex_qavg_pool(NULL, NULL, &pp),
        ex_qglobal_avg_pool(NULL, NULL),
        ex_grad(NULL, NULL),
    };
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++)
        if (r[i] != NULL)
            fail_msg("builder %zu returned a tensor for a NULL context", i);
    ex_set_gate(NULL, NULL, NULL, 0);
    ex_ctx_clear_error(NULL);
    ex_ctx_set_seed(NULL, 1);
    ex_ctx_set_tag(NULL, 0, 0, 0);
    ex_ctx_fail_alloc_after(NULL, 1);
    assert_int_equal(ex_ctx_status(NULL), EX_ERR_ARG);
    assert_non_null(ex_ctx_error(NULL));
    assert_true(ex_ctx_error(NULL)[0] != '\0');
    assert_int_not_equal(ex_graph_backward(NULL, NULL), EX_OK);
    ex_plan_opts opts;
    ex_plan_opts_default(&opts);
    ex_plan *plan = NULL;
    assert_int_not_equal(ex_graph_plan(NULL, be, &opts, &plan), EX_OK);
    assert_null(plan);
    float v = 0;
    ex_plan_stats pst;
    assert_int_not_equal(ex_plan_run(NULL), EX_OK);
    assert_int_not_equal(ex_plan_write(NULL, NULL, &v, sizeof v), EX_OK);
    assert_int_not_equal(ex_plan_read(NULL, NULL, &v, sizeof v), EX_OK);
    assert_int_not_equal(ex_plan_get_stats(NULL, &pst), EX_OK);
    assert_int_equal(ex_tensor_ndim(NULL), 0);
    ex_plan_free(NULL);
    ex_ctx_free(NULL);
    ex_backend_close(NULL);
}

/* ---- other entry points ---- */

static void test_backend_unknown(void **state)
{
    (void)state;
    char msg[256] = "";
    ex_backend *be = (ex_backend *)&msg; /* must be reset to NULL */
    assert_int_not_equal(ex_backend_open("no-such-backend", &be, msg, sizeof msg), EX_OK);
    assert_null(be);
    printf("  %s\n", msg);
    assert_non_null(strstr(msg, "no-such-backend"));
    be = NULL;
    assert_int_not_equal(ex_backend_open("no-such-backend", &be, NULL, 0), EX_OK);
    assert_null(be);
    assert_int_not_equal(ex_backend_open("cpu", NULL, msg, sizeof msg), EX_OK);
}

/* A plan of y = relu(x) over x [2, 3], with y kept and z = relu(y) not kept. */
typedef struct small {
    ex_ctx *ctx;
    ex_tensor *x, *y, *z;
    ex_plan *plan;
} small;

static void small_build(small *s, ex_backend *be)
{
    const int64_t ne[2] = {2, 3};
    s->ctx = ex_ctx_new();
    assert_non_null(s->ctx);
    s->x = ex_input(s->ctx, EX_F32, 2, ne, "x");
    s->y = ex_keep(s->ctx, ex_relu(s->ctx, s->x));
    s->z = ex_relu(s->ctx, s->y);
    ex_keep(s->ctx, ex_sum(s->ctx, s->z, 0x3u));
    assert_int_equal(ex_ctx_status(s->ctx), EX_OK);
    ex_plan_opts opts;
    ex_plan_opts_default(&opts);
    s->plan = NULL;
    assert_int_equal(ex_graph_plan(s->ctx, be, &opts, &s->plan), EX_OK);
    assert_non_null(s->plan);
}

static void small_free(small *s)
{
    ex_plan_free(s->plan);
    ex_ctx_free(s->ctx);
}

static void test_plan_io(void **state)
{
    ex_backend *be = *state;
    small s;
    small_build(&s, be);
    const float x[6] = {-1, 2, -3, 4, -5, 6};
    float y[7] = {0};
    ex_status st = ex_plan_write(s.plan, s.x, x, 20);
    printf("  write of 20 bytes into 24: %s: %s\n", ex_status_str(st), ex_plan_error(s.plan));
    assert_int_not_equal(st, EX_OK);
    assert_non_null(strstr(ex_plan_error(s.plan), "24"));
    assert_non_null(strstr(ex_plan_error(s.plan), "20"));
    assert_int_not_equal(ex_plan_write(s.plan, s.x, NULL, sizeof x), EX_OK);
    assert_int_equal(ex_plan_write(s.plan, s.x, x, sizeof x), EX_OK);
    assert_int_equal(ex_plan_run(s.plan), EX_OK);
    st = ex_plan_read(s.plan, s.y, y, 28);
    printf("  read of 24 bytes into 28: %s: %s\n", ex_status_str(st), ex_plan_error(s.plan));
    assert_int_not_equal(st, EX_OK);
    assert_non_null(strstr(ex_plan_error(s.plan), "28"));
    /* z's memory is reused during a run: reading it is refused, not garbage. */
    st = ex_plan_read(s.plan, s.z, y, 24);
    printf("  read of an unkept tensor: %s: %s\n", ex_status_str(st), ex_plan_error(s.plan));
    assert_int_not_equal(st, EX_OK);
    assert_true(ex_plan_error(s.plan)[0] != '\0');
    assert_int_equal(ex_plan_read(s.plan, s.y, y, 24), EX_OK);
    for (int i = 0; i < 6; i++)
        assert_true(y[i] == (x[i] > 0 ? x[i] : 0));

    /* A tensor of another context is not part of this plan. */
    small other;
    small_build(&other, be);
    st = ex_plan_write(s.plan, other.x, x, sizeof x);
    printf("  write of a foreign tensor: %s: %s\n", ex_status_str(st), ex_plan_error(s.plan));
    assert_int_not_equal(st, EX_OK);
    small_free(&other);
    small_free(&s);
}

/* Clearing the sticky error lets building go on; tensors built meanwhile stay inert. */
static void test_clear_error(void **state)
{
    ex_backend *be = *state;
    ex_ctx *ctx = ex_ctx_new();
    assert_non_null(ctx);
    ex_tensor *inert = ex_add(ctx, t2(ctx, 5, 7), t2(ctx, 7, 5));
    assert_int_equal(ex_ctx_status(ctx), EX_ERR_SHAPE);
    ex_ctx_clear_error(ctx);
    assert_int_equal(ex_ctx_status(ctx), EX_OK);
    assert_string_equal(ex_ctx_error(ctx), "");

    ex_tensor *x = t2(ctx, 2, 3);
    assert_ptr_not_equal(x, inert);
    ex_tensor *y = ex_keep(ctx, ex_relu(ctx, x));
    assert_ptr_not_equal(y, inert);
    assert_int_equal(ex_tensor_ndim(y), 2);
    assert_int_equal(ex_tensor_dim(y, 1), 3);
    assert_int_equal(ex_ctx_status(ctx), EX_OK);
    ex_plan_opts opts;
    ex_plan_opts_default(&opts);
    ex_plan *plan = NULL;
    assert_int_equal(ex_graph_plan(ctx, be, &opts, &plan), EX_OK);
    const float xv[6] = {1, -2, 3, -4, 5, -6};
    float yv[6];
    assert_int_equal(ex_plan_write(plan, x, xv, sizeof xv), EX_OK);
    assert_int_equal(ex_plan_run(plan), EX_OK);
    assert_int_equal(ex_plan_read(plan, y, yv, sizeof yv), EX_OK);
    for (int i = 0; i < 6; i++)
        assert_true(yv[i] == (xv[i] > 0 ? xv[i] : 0));
    ex_plan_free(plan);

    /* The tensor built while the error was set is still inert. */
    assert_ptr_equal(ex_relu(ctx, inert), inert);
    ex_ctx_free(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases),           cmocka_unit_test(test_null_ctx),
        cmocka_unit_test(test_backend_unknown), cmocka_unit_test(test_plan_io),
        cmocka_unit_test(test_clear_error),
    };
    return cmocka_run_group_tests(tests, setup_backend, teardown_backend);
}
