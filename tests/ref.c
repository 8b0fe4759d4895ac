/* Double-precision reference math of the op suite. Deliberately naive: one obvious loop
 * nest per op, no shared tricks with the backends, so a disagreement points at them. */
#include "ref.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>

#include "core/philox.h"

/* ---- element-wise ---- */

/* Offset of the 4-d index i of a broadcast operand of shape ne. */
static int64_t bcast_at(const int64_t ne[4], const int64_t i[4])
{
    int64_t off = 0;
    for (int d = 0; d < 4; d++)
        off = off * ne[d] + (ne[d] == 1 ? 0 : i[d]);
    return off;
}

void ref_binary(ref_binop op, const double *a, const int64_t ane[4], const double *b,
                const int64_t bne[4], double *y, const int64_t yne[4])
{
    int64_t i[4], k = 0;
    for (i[0] = 0; i[0] < yne[0]; i[0]++)
        for (i[1] = 0; i[1] < yne[1]; i[1]++)
            for (i[2] = 0; i[2] < yne[2]; i[2]++)
                for (i[3] = 0; i[3] < yne[3]; i[3]++, k++) {
                    double u = a[bcast_at(ane, i)], v = b[bcast_at(bne, i)];
                    y[k] = op == REF_ADD ? u + v : op == REF_SUB ? u - v : u * v;
                }
}

void ref_scale(const double *x, int64_t n, double s, double *y)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = s * x[i];
}

void ref_axpy(double a, const double *x, const double *y, int64_t n, double *out)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = a * x[i] + y[i];
}

void ref_relu(const double *x, int64_t n, double *y)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] > 0 ? x[i] : 0;
}

void ref_drop_path(const double *x, int64_t nsample, int64_t inner, const int *kept, double keep,
                   double *y)
{
    for (int64_t s = 0; s < nsample; s++)
        for (int64_t i = 0; i < inner; i++)
            y[s * inner + i] = kept[s] ? x[s * inner + i] / keep : 0;
}

/* ---- reductions ---- */

void ref_reduce(ref_reduce_kind kind, const double *x, const int64_t ne[4], unsigned axes,
                double *y)
{
    int64_t yne[4], ny = 1, count = 1;
    for (int d = 0; d < 4; d++) {
        yne[d] = (axes >> d) & 1 ? 1 : ne[d];
        ny *= yne[d];
        count *= (axes >> d) & 1 ? ne[d] : 1;
    }
    for (int64_t k = 0; k < ny; k++)
        y[k] = kind == REF_MAX ? -INFINITY : 0;
    int64_t i[4], k = 0;
    for (i[0] = 0; i[0] < ne[0]; i[0]++)
        for (i[1] = 0; i[1] < ne[1]; i[1]++)
            for (i[2] = 0; i[2] < ne[2]; i[2]++)
                for (i[3] = 0; i[3] < ne[3]; i[3]++, k++) {
                    int64_t o = bcast_at(yne, i);
                    if (kind == REF_MAX)
                        y[o] = x[k] > y[o] ? x[k] : y[o];
                    else
                        y[o] += x[k];
                }
    if (kind == REF_MEAN)
        for (int64_t j = 0; j < ny; j++)
            y[j] /= (double)count;
}

/* ---- softmax family ---- */

static double row_max(const double *x, int64_t cols)
{
    double m = x[0];
    for (int64_t j = 1; j < cols; j++)
        m = x[j] > m ? x[j] : m;
    return m;
}

static double row_logsumexp(const double *x, int64_t cols)
{
    double m = row_max(x, cols), s = 0;
    for (int64_t j = 0; j < cols; j++)
        s += exp(x[j] - m);
    return m + log(s);
}

static int64_t row_argmax(const double *x, int64_t cols)
{
    int64_t best = 0;
    for (int64_t j = 1; j < cols; j++)
        if (x[j] > x[best])
            best = j;
    return best;
}

void ref_softmax(const double *x, int64_t rows, int64_t cols, double *y)
{
    for (int64_t r = 0; r < rows; r++) {
        double lse = row_logsumexp(x + r * cols, cols);
        for (int64_t j = 0; j < cols; j++)
            y[r * cols + j] = exp(x[r * cols + j] - lse);
    }
}

void ref_log_softmax(const double *x, int64_t rows, int64_t cols, double *y)
{
    for (int64_t r = 0; r < rows; r++) {
        double lse = row_logsumexp(x + r * cols, cols);
        for (int64_t j = 0; j < cols; j++)
            y[r * cols + j] = x[r * cols + j] - lse;
    }
}

double ref_cross_entropy(const double *logits, const int32_t *labels, int64_t rows, int64_t cols)
{
    double s = 0;
    for (int64_t r = 0; r < rows; r++)
        s += row_logsumexp(logits + r * cols, cols) - logits[r * cols + labels[r]];
    return s / (double)rows;
}

double ref_accuracy(const double *logits, const int32_t *labels, int64_t rows, int64_t cols)
{
    double hits = 0;
    for (int64_t r = 0; r < rows; r++)
        hits += row_argmax(logits + r * cols, cols) == labels[r];
    return hits;
}

/* ---- convolution and GEMM ---- */

int64_t ref_conv_out(int64_t in, int64_t k, int stride, int pad, int dil)
{
    return (in + 2 * pad - dil * (k - 1) - 1) / stride + 1;
}

/* One output pixel of one (output, input) channel pair of a convolution; relu: of
 * max(x, 0). */
static double conv_pixel(const double *xc, int64_t h, int64_t w, const double *wk, int64_t kh,
                         int64_t kw, const ref_conv *p, int64_t oh, int64_t ow, int relu)
{
    double s = 0;
    for (int64_t i = 0; i < kh; i++)
        for (int64_t j = 0; j < kw; j++) {
            int64_t ih = oh * p->stride[0] - p->pad[0] + i * p->dil[0];
            int64_t iw = ow * p->stride[1] - p->pad[1] + j * p->dil[1];
            if (ih < 0 || ih >= h || iw < 0 || iw >= w)
                continue;
            double v = xc[ih * w + iw];
            s += (relu && v < 0 ? 0 : v) * wk[i * kw + j];
        }
    return s;
}

void ref_conv2d(const double *x, const int64_t xne[4], const double *w, const int64_t wne[4],
                const ref_conv *p, double *y)
{
    int64_t n = xne[0], ci = xne[1], h = xne[2], wd = xne[3];
    int64_t co = wne[0], kh = wne[2], kw = wne[3];
    int64_t ho = ref_conv_out(h, kh, p->stride[0], p->pad[0], p->dil[0]);
    int64_t wo = ref_conv_out(wd, kw, p->stride[1], p->pad[1], p->dil[1]);
    for (int64_t b = 0; b < n; b++)
        for (int64_t o = 0; o < co; o++)
            for (int64_t oh = 0; oh < ho; oh++)
                for (int64_t ow = 0; ow < wo; ow++) {
                    double s = 0;
                    for (int64_t c = 0; c < ci; c++)
                        s += conv_pixel(x + (b * ci + c) * h * wd, h, wd,
                                        w + (o * ci + c) * kh * kw, kh, kw, p, oh, ow, 0);
                    y[((b * co + o) * ho + oh) * wo + ow] = s;
                }
}

static void dwconv2d(const double *x, const int64_t xne[4], const double *w, const int64_t wne[4],
                     const ref_conv *p, int relu, double *y)
{
    int64_t n = xne[0], c = xne[1], h = xne[2], wd = xne[3];
    int64_t kh = wne[2], kw = wne[3];
    int64_t ho = ref_conv_out(h, kh, p->stride[0], p->pad[0], p->dil[0]);
    int64_t wo = ref_conv_out(wd, kw, p->stride[1], p->pad[1], p->dil[1]);
    for (int64_t b = 0; b < n; b++)
        for (int64_t ch = 0; ch < c; ch++)
            for (int64_t oh = 0; oh < ho; oh++)
                for (int64_t ow = 0; ow < wo; ow++)
                    y[((b * c + ch) * ho + oh) * wo + ow] =
                        conv_pixel(x + (b * c + ch) * h * wd, h, wd, w + ch * kh * kw, kh, kw, p,
                                   oh, ow, relu);
}

void ref_dwconv2d(const double *x, const int64_t xne[4], const double *w, const int64_t wne[4],
                  const ref_conv *p, double *y)
{
    dwconv2d(x, xne, w, wne, p, 0, y);
}

void ref_dwconv2d_relu(const double *x, const int64_t xne[4], const double *w, const int64_t wne[4],
                       const ref_conv *p, double *y)
{
    dwconv2d(x, xne, w, wne, p, 1, y);
}

void ref_pwconv(const double *x, const int64_t xne[4], const double *w, int64_t co, double *y)
{
    int64_t n = xne[0], ci = xne[1], hw = xne[2] * xne[3];
    for (int64_t b = 0; b < n; b++)
        for (int64_t o = 0; o < co; o++)
            for (int64_t k = 0; k < hw; k++) {
                double s = 0;
                for (int64_t c = 0; c < ci; c++)
                    s += w[o * ci + c] * x[(b * ci + c) * hw + k];
                y[(b * co + o) * hw + k] = s;
            }
}

void ref_matmul(const double *a, const double *b, int64_t m, int64_t k, int64_t n, double *y)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t l = 0; l < k; l++)
                s += a[i * k + l] * b[l * n + j];
            y[i * n + j] = s;
        }
}

void ref_linear(const double *x, const double *w, const double *b, int64_t n, int64_t k, int64_t m,
                double *y)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < m; j++) {
            double s = b ? b[j] : 0;
            for (int64_t l = 0; l < k; l++)
                s += x[i * k + l] * w[j * k + l];
            y[i * m + j] = s;
        }
}

/* ---- pooling ---- */

int64_t ref_pool_out(int64_t in, int k, int stride, int pad)
{
    return (in + 2 * pad - k) / stride + 1;
}

/* Mean (max_not_mean 0) or max of one window's in-bounds elements. */
static double pool_window(const double *xc, int64_t h, int64_t w, const ref_pool *p, int64_t oh,
                          int64_t ow, int max_not_mean)
{
    double s = max_not_mean ? -INFINITY : 0;
    int64_t count = 0;
    for (int i = 0; i < p->kernel[0]; i++)
        for (int j = 0; j < p->kernel[1]; j++) {
            int64_t ih = oh * p->stride[0] - p->pad[0] + i;
            int64_t iw = ow * p->stride[1] - p->pad[1] + j;
            if (ih < 0 || ih >= h || iw < 0 || iw >= w)
                continue;
            double v = xc[ih * w + iw];
            s = max_not_mean ? (v > s ? v : s) : s + v;
            count++;
        }
    return max_not_mean ? s : s / (double)count;
}

static void pool(const double *x, const int64_t xne[4], const ref_pool *p, int max_not_mean,
                 double *y)
{
    int64_t nc = xne[0] * xne[1], h = xne[2], w = xne[3];
    int64_t ho = ref_pool_out(h, p->kernel[0], p->stride[0], p->pad[0]);
    int64_t wo = ref_pool_out(w, p->kernel[1], p->stride[1], p->pad[1]);
    for (int64_t c = 0; c < nc; c++)
        for (int64_t oh = 0; oh < ho; oh++)
            for (int64_t ow = 0; ow < wo; ow++)
                y[(c * ho + oh) * wo + ow] =
                    pool_window(x + c * h * w, h, w, p, oh, ow, max_not_mean);
}

void ref_avg_pool(const double *x, const int64_t xne[4], const ref_pool *p, double *y)
{
    pool(x, xne, p, 0, y);
}

void ref_max_pool(const double *x, const int64_t xne[4], const ref_pool *p, double *y)
{
    pool(x, xne, p, 1, y);
}

void ref_global_avg_pool(const double *x, const int64_t xne[4], double *y)
{
    int64_t nc = xne[0] * xne[1], hw = xne[2] * xne[3];
    for (int64_t c = 0; c < nc; c++) {
        double s = 0;
        for (int64_t k = 0; k < hw; k++)
            s += x[c * hw + k];
        y[c] = s / (double)hw;
    }
}

/* ---- batch norm ---- */

/* Batch mean and biased variance of channel ch. */
static void channel_stats(const double *x, const int64_t xne[4], int64_t ch, double *mean,
                          double *var)
{
    int64_t n = xne[0], c = xne[1], hw = xne[2] * xne[3];
    double s = 0, q = 0;
    for (int64_t b = 0; b < n; b++)
        for (int64_t k = 0; k < hw; k++)
            s += x[(b * c + ch) * hw + k];
    *mean = s / (double)(n * hw);
    for (int64_t b = 0; b < n; b++)
        for (int64_t k = 0; k < hw; k++) {
            double d = x[(b * c + ch) * hw + k] - *mean;
            q += d * d;
        }
    *var = q / (double)(n * hw);
}

void ref_batch_norm(const double *x, const int64_t xne[4], const double *gamma, const double *beta,
                    const double *run_mean, const double *run_var, int train, double eps, double *y,
                    double *mean, double *var)
{
    int64_t n = xne[0], c = xne[1], hw = xne[2] * xne[3];
    for (int64_t ch = 0; ch < c; ch++) {
        double mu = run_mean[ch], v = run_var[ch];
        if (train) {
            channel_stats(x, xne, ch, &mu, &v);
            mean[ch] = mu;
            var[ch] = v;
        }
        double inv = 1 / sqrt(v + eps), g = gamma ? gamma[ch] : 1, be = beta ? beta[ch] : 0;
        for (int64_t b = 0; b < n; b++)
            for (int64_t k = 0; k < hw; k++) {
                int64_t i = (b * c + ch) * hw + k;
                y[i] = (x[i] - mu) * inv * g + be;
            }
    }
}

void ref_bn_running_update(const double *mean, const double *var, int64_t c, int64_t m,
                           double momentum, double *run_mean, double *run_var)
{
    for (int64_t ch = 0; ch < c; ch++) {
        run_mean[ch] = (1 - momentum) * run_mean[ch] + momentum * mean[ch];
        run_var[ch] =
            (1 - momentum) * run_var[ch] + momentum * var[ch] * (double)m / (double)(m - 1);
    }
}

void ref_bn_moments(const double *x, const int64_t xne[4], double *out)
{
    int64_t c = xne[1];
    for (int64_t ch = 0; ch < c; ch++) {
        double mean, var;
        channel_stats(x, xne, ch, &mean, &var);
        out[ch] = mean;
        out[c + ch] = var;
    }
}

void ref_bn_finish(const double *moments, int64_t c, double eps, double *out, double *var)
{
    for (int64_t ch = 0; ch < c; ch++) {
        double mean = moments[ch], v = moments[c + ch];
        var[ch] = v > 0 ? v : 0;
        out[ch] = mean;
        out[c + ch] = 1 / sqrt(var[ch] + eps);
    }
}

void ref_bn_bwd_data(const double *xs, const int64_t xne[4], const double *stats, const double *dy,
                     const double *red, const double *gamma, int xhat, double m, double *dx)
{
    int64_t n = xne[0], c = xne[1], hw = xne[2] * xne[3];
    for (int64_t ch = 0; ch < c; ch++) {
        double mean = stats[ch], inv = stats[c + ch], g = gamma ? gamma[ch] : 1;
        for (int64_t b = 0; b < n; b++)
            for (int64_t k = 0; k < hw; k++) {
                int64_t i = (b * c + ch) * hw + k;
                double xh = xhat ? xs[i] : (xs[i] - mean) * inv;
                dx[i] = g * inv * (dy[i] - red[c + ch] / m - xh * red[ch] / m);
            }
    }
}

void ref_bn_grad(const double *x, const int64_t xne[4], const double *gamma, const double *dy,
                 double eps, double *dx)
{
    int64_t n = xne[0], c = xne[1], hw = xne[2] * xne[3];
    double *stats = calloc((size_t)(4 * c), sizeof *stats), *red = stats + 2 * c;
    for (int64_t ch = 0; ch < c; ch++) {
        double mean, var;
        channel_stats(x, xne, ch, &mean, &var);
        stats[ch] = mean;
        stats[c + ch] = 1 / sqrt(var + eps);
        for (int64_t b = 0; b < n; b++)
            for (int64_t k = 0; k < hw; k++) {
                int64_t i = (b * c + ch) * hw + k;
                red[ch] += dy[i] * (x[i] - mean) * stats[c + ch];
                red[c + ch] += dy[i];
            }
    }
    ref_bn_bwd_data(x, xne, stats, dy, red, gamma, 0, (double)(n * hw), dx);
    free(stats);
}

/* ---- NAS ---- */

void ref_mixed_sum(const double *w, const double *mask, int n, const double *const *x,
                   const int *idx, int64_t numel, double *y)
{
    for (int64_t i = 0; i < numel; i++)
        y[i] = 0;
    for (int j = 0; j < n; j++) {
        if (mask[idx[j]] == 0)
            continue;
        for (int64_t i = 0; i < numel; i++)
            y[i] += w[idx[j]] * x[j][i];
    }
}

void ref_gumbel_noise(uint32_t k0, uint32_t k1, uint32_t c0, uint32_t c1, int64_t n, double *g)
{
    for (int64_t i = 0; i < n; i++) {
        /* the clamp bounds as the backends hold them: f32 numbers */
        double u = ex_philox_uniform(k0, k1, c0, c1, (uint64_t)i);
        double lo = (double)1e-10f, hi = (double)(1.0f - 1e-7f);
        u = u < lo ? lo : u > hi ? hi : u;
        g[i] = -log(-log(u));
    }
}

void ref_gumbel_softmax(const double *logits, const double *g, double tau, int64_t rows,
                        int64_t cols, double *y)
{
    for (int64_t i = 0; i < rows * cols; i++)
        y[i] = (logits[i] + g[i]) / tau;
    ref_softmax(y, rows, cols, y);
}

void ref_hardmax(const double *x, int64_t rows, int64_t cols, double *y)
{
    for (int64_t r = 0; r < rows; r++) {
        int64_t a = row_argmax(x + r * cols, cols);
        for (int64_t j = 0; j < cols; j++)
            y[r * cols + j] = j == a;
    }
}

void ref_entropy(const double *p, int64_t rows, int64_t cols, double *y)
{
    for (int64_t r = 0; r < rows; r++) {
        double s = 0;
        for (int64_t j = 0; j < cols; j++) {
            double v = p[r * cols + j];
            s -= v * log(v > 1e-30 ? v : 1e-30);
        }
        y[r] = s;
    }
}

void ref_topk_mask(const double *w, int64_t rows, int64_t cols, int k, double thr, double *y)
{
    for (int64_t r = 0; r < rows; r++) {
        const double *row = w + r * cols;
        for (int64_t j = 0; j < cols; j++) {
            /* Rank = entries that beat w[j]: larger, or equal at a lower index. */
            int64_t rank = 0;
            for (int64_t l = 0; l < cols; l++)
                rank += row[l] > row[j] || (row[l] == row[j] && l < j);
            y[r * cols + j] = rank < k && row[j] >= thr;
        }
    }
}

/* ---- optimizer ---- */

void ref_sgd(double *p, const double *g, double *mom, int64_t n, double lr, double momentum,
             double wd, int nesterov, double clip)
{
    for (int64_t i = 0; i < n; i++) {
        double gi = g[i] * clip + wd * p[i];
        mom[i] = momentum * mom[i] + gi;
        p[i] -= lr * (nesterov ? gi + momentum * mom[i] : mom[i]);
    }
}

void ref_adam(double *p, const double *g, double *m, double *v, int64_t n, double lr, double t,
              double beta1, double beta2, double eps, double wd)
{
    double c1 = 1 - pow(beta1, t), c2 = 1 - pow(beta2, t);
    for (int64_t i = 0; i < n; i++) {
        double gi = g[i] + wd * p[i];
        m[i] = beta1 * m[i] + (1 - beta1) * gi;
        v[i] = beta2 * v[i] + (1 - beta2) * gi * gi;
        p[i] -= lr * (m[i] / c1) / (sqrt(v[i] / c2) + eps);
    }
}

double ref_grad_norm(int n, const double *const *g, const int64_t *numel)
{
    double s = 0;
    for (int j = 0; j < n; j++)
        for (int64_t i = 0; i < numel[j]; i++)
            s += g[j][i] * g[j][i];
    return sqrt(s);
}

double ref_clip_coef(double norm, double max_norm)
{
    double f = max_norm / (norm + 1e-6);
    return f < 1 ? f : 1;
}

void ref_clip(const double *g, int64_t n, double norm, double max_norm, double *y)
{
    double f = ref_clip_coef(norm, max_norm);
    for (int64_t i = 0; i < n; i++)
        y[i] = g[i] * f;
}
