/* f32 products of small matrices on AVX-512, for the pointwise convolution: per image a
 * [m, k] x [k, n] product with n one plane's pixels (49 to a few thousand) and m, k the
 * channels (tens to hundreds). BLAS libraries pack both operands on every such call and
 * thread badly when many run side by side; here a block of 6 rows by up to 64 pixels keeps
 * its sums in registers over the whole inner dimension, reading the weights as broadcasts
 * and the image rows as they lie, and the blocks of all images are shared among threads.
 * Each output is one chain of fused multiply-adds in k order, whatever the thread count. */
#include <stdint.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu/cpu.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define SG_TARGET __attribute__((target("avx512f,avx512bw,avx512vl")))
#define SG_ROWS 6 /* rows of A a block makes */
#define SG_VECS 4 /* vectors of 16 pixels a block makes at most */

/** The lanes of vector v of a block whose first pixel has left pixels still to make. */
static __mmask16 sg_mask(int64_t left, int v)
{
    int64_t l = left - 16 * v;
    return l <= 0 ? 0 : l >= 16 ? 0xFFFF : (__mmask16)((1u << l) - 1);
}

/* One row of a block: its V accumulators c##r##0.. (named, not an array, so that they stay
 * in registers: GCC keeps arrays this large in memory) */
#define SG_ROW_DECL(r)                                                                             \
    __m512 c##r##0 = _mm512_setzero_ps(), c##r##1 = c##r##0, c##r##2 = c##r##0, c##r##3 = c##r##0
#define SG_ROW_FMA(r)                                                                              \
    do {                                                                                           \
        __m512 w = _mm512_set1_ps(a[r][k * q->acs]);                                               \
        c##r##0 = _mm512_fmadd_ps(w, x0, c##r##0);                                                 \
        if (V > 1)                                                                                 \
            c##r##1 = _mm512_fmadd_ps(w, x1, c##r##1);                                             \
        if (V > 2)                                                                                 \
            c##r##2 = _mm512_fmadd_ps(w, x2, c##r##2);                                             \
        if (V > 3)                                                                                 \
            c##r##3 = _mm512_fmadd_ps(w, x3, c##r##3);                                             \
    } while (0)
#define SG_ROW_STORE(r)                                                                            \
    do {                                                                                           \
        if (r < rows) {                                                                            \
            float *cr = c + (r0 + r) * q->ldc;                                                     \
            if (q->scale) {                                                                        \
                __m512 sa = _mm512_set1_ps(q->scale[r0 + r]),                                      \
                       sb = _mm512_set1_ps(q->shift[r0 + r]);                                      \
                c##r##0 = _mm512_add_ps(_mm512_mul_ps(c##r##0, sa), sb);                           \
                c##r##1 = _mm512_add_ps(_mm512_mul_ps(c##r##1, sa), sb);                           \
                c##r##2 = _mm512_add_ps(_mm512_mul_ps(c##r##2, sa), sb);                           \
                c##r##3 = _mm512_add_ps(_mm512_mul_ps(c##r##3, sa), sb);                           \
            }                                                                                      \
            _mm512_mask_storeu_ps(cr, m0, c##r##0);                                                \
            if (V > 1)                                                                             \
                _mm512_mask_storeu_ps(cr + 16, m1, c##r##1);                                       \
            if (V > 2)                                                                             \
                _mm512_mask_storeu_ps(cr + 32, m2, c##r##2);                                       \
            if (V > 3)                                                                             \
                _mm512_mask_storeu_ps(cr + 48, m3, c##r##3);                                       \
        }                                                                                          \
    } while (0)

/* The block of C_i at rows r0.. and V vectors from pixel p0: rows past m repeat row m - 1
 * (their sums are made and dropped), lanes past n are neither read nor written. */
/** v with its negative lanes 0 (by v < 0, so that a NaN stays, as the ReLU op's). */
SG_TARGET static inline __m512 sg_relu(__m512 v)
{
    __m512 z = _mm512_setzero_ps();
    return _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, z, _CMP_LT_OQ), z);
}

SG_TARGET static inline __attribute__((always_inline)) void
sg_block(const cpu_sgemm *q, int64_t i, int64_t r0, int64_t p0, const int V, const int RELU)
{
    const float *a[SG_ROWS];
    for (int r = 0; r < SG_ROWS; r++)
        a[r] = q->a + (r0 + r < q->m ? r0 + r : q->m - 1) * q->ars;
    const float *b = q->b + i * q->sb + p0;
    int64_t left = q->n - p0;
    __mmask16 m0 = sg_mask(left, 0), m1 = sg_mask(left, 1), m2 = sg_mask(left, 2),
              m3 = sg_mask(left, 3);
    SG_ROW_DECL(0);
    SG_ROW_DECL(1);
    SG_ROW_DECL(2);
    SG_ROW_DECL(3);
    SG_ROW_DECL(4);
    SG_ROW_DECL(5);
    for (int64_t k = 0; k < q->k; k++) {
        const float *bk = b + k * q->ldb;
        __m512 x0 = _mm512_maskz_loadu_ps(m0, bk), x1 = x0, x2 = x0, x3 = x0;
        if (V > 1)
            x1 = _mm512_maskz_loadu_ps(m1, bk + 16);
        if (V > 2)
            x2 = _mm512_maskz_loadu_ps(m2, bk + 32);
        if (V > 3)
            x3 = _mm512_maskz_loadu_ps(m3, bk + 48);
        if (RELU) {
            x0 = sg_relu(x0);
            x1 = sg_relu(x1);
            x2 = sg_relu(x2);
            x3 = sg_relu(x3);
        }
        SG_ROW_FMA(0);
        SG_ROW_FMA(1);
        SG_ROW_FMA(2);
        SG_ROW_FMA(3);
        SG_ROW_FMA(4);
        SG_ROW_FMA(5);
    }
    float *c = q->c + i * q->sc + p0;
    int64_t rows = q->m - r0 < SG_ROWS ? q->m - r0 : SG_ROWS;
    SG_ROW_STORE(0);
    SG_ROW_STORE(1);
    SG_ROW_STORE(2);
    SG_ROW_STORE(3);
    SG_ROW_STORE(4);
    SG_ROW_STORE(5);
}

SG_TARGET static void sg_block_of(const cpu_sgemm *q, int64_t i, int64_t r0, int64_t p0, int vecs)
{
    switch (vecs + 4 * (q->relu != 0)) {
    case 1: sg_block(q, i, r0, p0, 1, 0); break;
    case 2: sg_block(q, i, r0, p0, 2, 0); break;
    case 3: sg_block(q, i, r0, p0, 3, 0); break;
    case 4: sg_block(q, i, r0, p0, 4, 0); break;
    case 5: sg_block(q, i, r0, p0, 1, 1); break;
    case 6: sg_block(q, i, r0, p0, 2, 1); break;
    case 7: sg_block(q, i, r0, p0, 3, 1); break;
    default: sg_block(q, i, r0, p0, 4, 1); break;
    }
}

/** Pixel blocks of a row: the row's vectors split into blocks of at most SG_VECS, as even
 *  as can be (13 vectors as 4, 3, 3, 3), so that no block is mostly empty. */
typedef struct sg_cols {
    int64_t blocks, small, big; /* big: blocks of small + 1 vectors, first */
} sg_cols;

static sg_cols sg_cols_of(int64_t n)
{
    int64_t vecs = (n + 15) / 16, blocks = (vecs + SG_VECS - 1) / SG_VECS;
    sg_cols c = {blocks, blocks ? vecs / blocks : 0, blocks ? vecs % blocks : 0};
    return c;
}

SG_TARGET static void sg_task(const cpu_sgemm *q, const sg_cols *cols, int64_t rblocks, int64_t t)
{
    /* rows innermost: the blocks of one pixel range follow each other and share its rows
     * of B in cache */
    int64_t r0 = t % rblocks * SG_ROWS, cb = t / rblocks % cols->blocks,
            i = t / rblocks / cols->blocks;
    int64_t vecs = cols->small + (cb < cols->big),
            p0 = 16 * (cb * cols->small + (cb < cols->big ? cb : cols->big));
    sg_block_of(q, i, r0, p0, (int)vecs);
}

bool cpu_sgemm512_run(const cpu_exec *e, const cpu_sgemm *q)
{
    if (!e->avx512 || q->m <= 0 || q->n <= 0 || q->images <= 0)
        return e->avx512;
    sg_cols cols = sg_cols_of(q->n);
    int64_t rblocks = (q->m + SG_ROWS - 1) / SG_ROWS, tasks = q->images * cols.blocks * rblocks;
#pragma omp parallel for schedule(static)                                                          \
    num_threads(e->threads > 0 ? e->threads : omp_get_max_threads())
    for (int64_t t = 0; t < tasks; t++)
        sg_task(q, &cols, rblocks, t);
    return true;
}

#else

bool cpu_sgemm512_run(const cpu_exec *e, const cpu_sgemm *q)
{
    (void)e;
    (void)q;
    return false;
}

#endif
