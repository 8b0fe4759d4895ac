/* Pointwise convolutions of a DARTS cell's size as our own kernel: a few dozen channels
 * make each GEMM of cuBLAS tiny (a 16x16 filter against 1024 positions per sample), so
 * a batched call costs more than the bytes it moves. Forward (and the data gradient, a
 * forward through the transposed filter): thread (sample, position) keeps PW_CO outputs
 * in registers and reads the position's input channels once; the block's filter rows
 * sit in shared memory. The filter gradient stays with cuBLAS (gemm.cu). PWCONV_BN runs
 * here with its ReLU and batch norm fused in: one launch, no copy of max(x, 0). */
#include "cuda/cuda.h"

/** Output channels a forward thread keeps (blockIdx.z walks the groups of them). */
#define PW_CO 16
/** Input channels whose filter columns fit the forward's shared memory (16 KB). */
#define PW_MAX_CI 256

/* y[n, co, p] = Σ_ci w[co, ci] x[n, ci, p] for the PW_CO output channels of blockIdx.z.
 * BN (PWCONV_BN): x read through a.relu's ReLU, and each sum through the batch norm, its
 * channels' coefficients worked out once per block. A template, so PWCONV's kernel is
 * the same code as before. */
template <bool BN> __global__ void pw_fwd_kernel(cu_pw_args a, const float *gate)
{
    __shared__ float ws[PW_MAX_CI * PW_CO]; /* ws[ci * PW_CO + k] = w[co0 + k, ci] */
    __shared__ float bk[BN ? PW_CO : 1], bb[BN ? PW_CO : 1]; /* channel co0 + k's k and b */
    if (cu_gated_off(gate))
        return;
    const int co0 = blockIdx.z * PW_CO, nco = min(PW_CO, a.co - co0);
    for (int i = threadIdx.x; i < a.ci * PW_CO; i += blockDim.x) {
        int ci = i / PW_CO, k = i - ci * PW_CO;
        ws[i] = k < nco ? a.w[(int64_t)(co0 + k) * a.w_sr + (int64_t)ci * a.w_sc] : 0.0f;
    }
    if (BN && threadIdx.x < nco)
        cu_bn_eval_coefs(a.bn, co0 + threadIdx.x, &bk[threadIdx.x], &bb[threadIdx.x]);
    __syncthreads();
    const int64_t nb = blockIdx.y;
    const float *xp = (const float *)a.x.p + nb * a.x.st[0];
    float *yp = (float *)a.y.p + nb * a.y.st[0] + (int64_t)co0 * a.y.st[1];
    for (int p = blockIdx.x * blockDim.x + threadIdx.x; p < a.hw; p += gridDim.x * blockDim.x) {
        float acc[PW_CO];
#pragma unroll
        for (int k = 0; k < PW_CO; k++)
            acc[k] = 0.0f;
        const float *xq = xp + p * a.x_sp;
#pragma unroll 4
        for (int ci = 0; ci < a.ci; ci++) {
            float v = xq[(int64_t)ci * a.x.st[1]];
            if (BN && a.relu)
                v = v < 0.0f ? 0.0f : v; /* NaN kept, as RELU */
            const float4 *w4 = (const float4 *)(ws + ci * PW_CO);
#pragma unroll
            for (int k = 0; k < PW_CO / 4; k++) {
                float4 w = w4[k];
                acc[4 * k] += w.x * v;
                acc[4 * k + 1] += w.y * v;
                acc[4 * k + 2] += w.z * v;
                acc[4 * k + 3] += w.w * v;
            }
        }
        float *yq = yp + p * a.y_sp;
#pragma unroll
        for (int k = 0; k < PW_CO; k++)
            if (k < nco)
                yq[(int64_t)k * a.y.st[1]] = BN ? cu_bn_affine(acc[k], bk[k], bb[k]) : acc[k];
    }
}

int cu_pw_small_fits(const cu_pw_args *a)
{
    return a->ci <= PW_MAX_CI && a->co <= PW_MAX_CI && a->n <= 65535 && a->hw < (1 << 30) &&
           a->n * a->hw > 0 && a->ci > 0 && a->co > 0;
}

int cu_pw_small(cu_exec *e, const cu_pw_args *a, const char *name, ex_status *st)
{
    if (!cu_pw_small_fits(a))
        return 0;
    *st = EX_OK;
    if (e->dry)
        return 1;
    int threads = a->hw < 128 ? 64 : 128;
    dim3 grid((unsigned)((a->hw + threads - 1) / threads), (unsigned)a->n,
              (unsigned)((a->co + PW_CO - 1) / PW_CO));
    if (a->bn.mean)
        cu_launch(e, pw_fwd_kernel<true>, grid, threads, 0, *a, e->gate);
    else
        cu_launch(e, pw_fwd_kernel<false>, grid, threads, 0, *a, e->gate);
    *st = cu_launched(e, name);
    return 1;
}
