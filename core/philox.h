/* Philox 4x32-10 (Salmon et al., SC'11): the counter-based generator every backend
 * draws from, so a seed gives the same stream on CPU, CUDA and Vulkan. Plain C with no
 * state, usable from host code and, with the same arithmetic, from kernels. */
#ifndef EXAPT_CORE_PHILOX_H
#define EXAPT_CORE_PHILOX_H

#include <math.h>
#include <stdint.h>

/* Kernels call these too: under nvcc they compile for host and device alike. */
#ifdef __CUDACC__
#define EX_HD __host__ __device__
#else
#define EX_HD
#endif

static inline EX_HD uint32_t ex_mulhilo32(uint32_t a, uint32_t b, uint32_t *hi)
{
    uint64_t p = (uint64_t)a * b;
    *hi = (uint32_t)(p >> 32);
    return (uint32_t)p;
}

/** Ten rounds of Philox 4x32 on counter c under key k; the result replaces c. */
static inline EX_HD void ex_philox4x32(uint32_t c[4], uint32_t k0, uint32_t k1)
{
    for (int r = 0; r < 10; r++) {
        uint32_t hi0, hi1;
        uint32_t lo0 = ex_mulhilo32(0xD2511F53u, c[0], &hi0);
        uint32_t lo1 = ex_mulhilo32(0xCD9E8D57u, c[2], &hi1);
        uint32_t n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
        c[0] = n0;
        c[1] = lo1;
        c[2] = n2;
        c[3] = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
}

/** The 32-bit draw number i of the stream (key, counter). */
static inline EX_HD uint32_t ex_philox_u32(uint32_t k0, uint32_t k1, uint32_t c0, uint32_t c1,
                                           uint64_t i)
{
    uint64_t block = i >> 2;
    uint32_t c[4] = {(uint32_t)block, (uint32_t)(block >> 32), c0, c1};
    ex_philox4x32(c, k0, k1);
    return c[i & 3];
}

/** Uniform in [0, 1) with 24 bits: exactly representable in f32 on every backend. */
static inline EX_HD float ex_philox_uniform(uint32_t k0, uint32_t k1, uint32_t c0, uint32_t c1,
                                            uint64_t i)
{
    return (float)(ex_philox_u32(k0, k1, c0, c1, i) >> 8) * (1.0f / 16777216.0f);
}

/** Standard normal by Box–Muller on the uniforms 2i and 2i+1. */
static inline EX_HD float ex_philox_normal(uint32_t k0, uint32_t k1, uint32_t c0, uint32_t c1,
                                           uint64_t i)
{
    float u1 = ex_philox_uniform(k0, k1, c0, c1, 2 * i);
    float u2 = ex_philox_uniform(k0, k1, c0, c1, 2 * i + 1);
    if (u1 < 1e-7f)
        u1 = 1e-7f;
    return sqrtf(-2.0f * logf(u1)) * cosf(6.28318530717958647692f * u2);
}

#endif
