/* The int8 convolutions on CPUs with AVX-512 VNNI (and VBMI), both forms: the i32 sums,
 * or those requantized into i8 as REQUANTIZE does (docs/ops.md).
 *
 * The GEMMs of the dense and pointwise ones: C = bias + A B with A [m, k] the weights and
 * B [k, n] an image's channels by pixels.
 * oneDNN's int8 GEMM runs these shapes (k and m of 36 to 144, n of 49 to 784 pixels) at a
 * small fraction of the VNNI rate, below the f32 GEMM (bench/results, "int8 inference,
 * fused"): it is built for large k. Here B is packed
 * once per image so that each 32-bit lane holds the 4 channels of one pixel, which is
 * what VPDPBUSD multiplies by a broadcast word of 4 weights, and a block of 4 rows by 64
 * pixels stays in 16 accumulators across all of k.
 *
 * VPDPBUSD takes unsigned bytes on one side: B is stored as x + 128 and the bias carries
 * -128 sum(w) of its row. The lanes' int32 sums wrap, so the result is exact modulo 2^32,
 * hence exact wherever the true sum fits int32 (docs/ops.md bounds it).
 *
 * The depthwise ones at stride 1: VPDPWSSD multiplies pairs of 16-bit values, so each
 * 32-bit lane of a padded plane's row r holds the inputs of rows r and r + dilation at one
 * column, and one instruction adds two taps of a filter column (rows a and a + 1) for 16
 * outputs: a 3x3 filter takes 6 instructions where it took 9 multiplies and as many adds. */
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define QG_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi")))
#define QG_ROWS 4  /* rows of A a block makes */
#define QG_COLS 64 /* pixels a block makes: 4 vectors of 16 lanes */

bool cpu_qgemm_vnni(void)
{
    return cpu_avx512() && __builtin_cpu_supports("avx512vnni") &&
           __builtin_cpu_supports("avx512vbmi");
}

/* Rows 4g to 4g + 3 of b (those past k read as 0) as [n, 4] bytes of x + 128, for
 * pixels [0, np) (those past n hold 128). */
QG_TARGET static void qg_pack_group(const int8_t *b, int64_t ldb, int64_t k, int64_t n, int64_t g,
                                    int64_t np, uint8_t *out)
{
    /* byte 4p + j of the result is byte 16j + p of the 4 gathered 16-byte rows */
    uint8_t idx[64];
    for (int i = 0; i < 64; i++)
        idx[i] = (uint8_t)(16 * (i % 4) + i / 4);
    const __m512i perm = _mm512_loadu_si512(idx), flip = _mm512_set1_epi8((char)0x80);
    for (int64_t p = 0; p < np; p += 16) {
        __mmask16 m = p >= n ? 0 : n - p >= 16 ? 0xFFFF : (__mmask16)((1u << (n - p)) - 1);
        __m128i row[4];
        for (int j = 0; j < 4; j++) {
            int64_t r = 4 * g + j;
            row[j] = r < k ? _mm_maskz_loadu_epi8(m, b + r * ldb + p) : _mm_setzero_si128();
        }
        /* lane positions are immediates (a loop index is not one at -O0) */
        __m512i v = _mm512_castsi128_si512(row[0]);
        v = _mm512_inserti32x4(v, row[1], 1);
        v = _mm512_inserti32x4(v, row[2], 2);
        v = _mm512_inserti32x4(v, row[3], 3);
        v = _mm512_xor_si512(_mm512_permutexvar_epi8(perm, v), flip);
        _mm512_storeu_si512(out + 4 * p, v);
    }
}

/* 16 sums to i32 at c, or requantized by mult (lower bound lo) to i8 at c8; lanes of m. */
QG_TARGET static void qv_store(int32_t *c, int8_t *c8, float mult, float lo, __m512i acc,
                               __mmask16 m)
{
    if (!c8) {
        _mm512_mask_storeu_epi32(c, m, acc);
        return;
    }
    /* REQUANTIZE's steps: max then min as q_round's comparisons (NaN to lo), then RNE */
    __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), _mm512_set1_ps(mult));
    v = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(lo)), _mm512_set1_ps(127.0f));
    _mm_mask_storeu_epi8(c8, m, _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(v)));
}

/* Row r of a block's 16 sums at column block v as q asks: i32, or requantized to i8. */
QG_TARGET static void qg_store(const cpu_qgemm *q, int64_t at, int64_t row, __m512i acc,
                               __mmask16 m)
{
    if (q->mult)
        qv_store(NULL, q->c8 + at, q->mult[row * q->ms], q->lo, acc, m);
    else
        qv_store(q->c + at, NULL, 0.0f, 0.0f, acc, m);
}

/* The block of C_i at rows [r0, r0 + 4) and columns [p0, p0 + 64), clipped to C: 4 rows
 * of packed weights (k4 words each) and the packed B at the block's first pixel (groups
 * gs bytes apart). */
QG_TARGET static void qg_block(const cpu_qgemm *q, const int32_t *wq, int64_t k4, const uint8_t *xp,
                               int64_t gs, const int32_t *bias, int64_t i, int64_t r0, int64_t p0)
{
    __m512i acc[QG_ROWS][4];
    for (int r = 0; r < QG_ROWS; r++)
        for (int v = 0; v < 4; v++)
            acc[r][v] = _mm512_set1_epi32(bias[r]);
    for (int64_t g = 0; g < k4; g++) {
        const uint8_t *xg = xp + g * gs;
        __m512i x[4];
        for (int v = 0; v < 4; v++)
            x[v] = _mm512_loadu_si512(xg + 64 * v);
        for (int r = 0; r < QG_ROWS; r++) {
            __m512i w = _mm512_set1_epi32(wq[r * k4 + g]);
            for (int v = 0; v < 4; v++)
                acc[r][v] = _mm512_dpbusd_epi32(acc[r][v], x[v], w);
        }
    }
    int64_t rows = q->m - r0 < QG_ROWS ? q->m - r0 : QG_ROWS;
    for (int r = 0; r < rows; r++)
        for (int v = 0; v < 4; v++) {
            int64_t left = q->n - p0 - 16 * v;
            __mmask16 m = left <= 0 ? 0 : left >= 16 ? 0xFFFF : (__mmask16)((1u << left) - 1);
            qg_store(q, i * q->sc + (r0 + r) * q->ldc + p0 + 16 * v, r0 + r, acc[r][v], m);
        }
}

/* The weights as words of 4 bytes ([mp, k4], rows past m zero) and the bias with
 * -128 sum(w) of each row. */
QG_TARGET static void qg_pack_a(const cpu_qgemm *q, int64_t mp, int64_t k4, int32_t *wq,
                                int32_t *bias)
{
    memset(wq, 0, (size_t)(mp * k4) * sizeof *wq);
    memset(bias, 0, (size_t)mp * sizeof *bias);
    for (int64_t r = 0; r < q->m; r++) {
        const int8_t *a = q->a + r * q->lda;
        memcpy(wq + r * k4, a, (size_t)q->k);
        int32_t sum = 0;
        for (int64_t i = 0; i < q->k; i++)
            sum += a[i];
        bias[r] = (int32_t)((uint32_t)q->bias[r] - 128u * (uint32_t)sum);
    }
}

bool cpu_qgemm_run(const cpu_exec *e, const cpu_qgemm *q, int threads)
{
    int64_t k4 = (q->k + 3) / 4, mp = (q->m + QG_ROWS - 1) / QG_ROWS * QG_ROWS;
    int64_t np = (q->n + QG_COLS - 1) / QG_COLS * QG_COLS, gs = 4 * np;
    size_t xbytes = (size_t)(q->images * k4 * gs);
    int32_t *wq = cpu_alloc(e, (size_t)(mp * k4 + mp) * sizeof *wq);
    uint8_t *xp = cpu_alloc(e, xbytes + 1);
    if (!wq || !xp) {
        free(wq);
        free(xp);
        return false;
    }
    int32_t *bias = wq + mp * k4;
    qg_pack_a(q, mp, k4, wq, bias);
    int64_t blocks = (mp / QG_ROWS) * (np / QG_COLS);
    (void)threads; /* read by the OpenMP pragmas only */
#pragma omp parallel num_threads(threads)
    {
#pragma omp for schedule(static)
        for (int64_t t = 0; t < q->images * k4; t++) {
            int64_t i = t / k4, g = t % k4;
            qg_pack_group(q->b + i * q->sb, q->ldb, q->k, q->n, g, np, xp + (i * k4 + g) * gs);
        }
#pragma omp for schedule(static)
        for (int64_t t = 0; t < q->images * blocks; t++) {
            int64_t i = t / blocks, r0 = t % blocks / (np / QG_COLS) * QG_ROWS,
                    p0 = t % (np / QG_COLS) * QG_COLS;
            qg_block(q, wq + r0 * k4, k4, xp + i * k4 * gs + 4 * p0, gs, bias + r0, i, r0, p0);
        }
    }
    free(wq);
    free(xp);
    return true;
}

/* Lanes [0, n) of a mask of 16 or 32 (n clipped to [0, 32]). */
static inline uint32_t qv_lanes(int64_t n)
{
    return n <= 0 ? 0u : n >= 32 ? 0xFFFFFFFFu : (1u << n) - 1u;
}

/* Padded row r (rows of x, h of them, start at padded row ph; columns at pw) as 32 16-bit
 * values from column c: zeros outside x. The masked load reads no byte outside x's row. */
QG_TARGET static __m512i qdw_row16(const cpu_qdw *d, int64_t r, int64_t c)
{
    int64_t sr = r - d->ph, sc = c - d->pw;
    if (sr < 0 || sr >= d->h)
        return _mm512_setzero_si512();
    uint32_t m = qv_lanes(d->w - sc) & ~qv_lanes(-sc);
    return _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(m, d->x + sr * d->xsh + sc));
}

/* The plane's pair rows: lane c of row r holds padded rows r and r + dh at column c, for
 * rows [0, rows) and columns [0, cols) (cols a multiple of 32). */
QG_TARGET static void qdw_pairs(const cpu_qdw *d, int32_t *pairs, int64_t rows, int64_t cols)
{
    uint16_t lo[32], hi[32];
    for (int i = 0; i < 16; i++) {
        lo[2 * i] = (uint16_t)i, lo[2 * i + 1] = (uint16_t)(32 + i);
        hi[2 * i] = (uint16_t)(16 + i), hi[2 * i + 1] = (uint16_t)(48 + i);
    }
    const __m512i ilo = _mm512_loadu_si512(lo), ihi = _mm512_loadu_si512(hi);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c += 32) {
            __m512i a = qdw_row16(d, r, c), b = qdw_row16(d, r + d->dh, c);
            _mm512_storeu_si512(pairs + r * cols + c, _mm512_permutex2var_epi16(a, ilo, b));
            _mm512_storeu_si512(pairs + r * cols + c + 16, _mm512_permutex2var_epi16(a, ihi, b));
        }
}

QG_TARGET bool cpu_qdw_vnni(const cpu_qdw *d)
{
    int64_t wo16 = (d->wo + 15) / 16 * 16, span = (d->kw - 1) * d->dw;
    int64_t cols = (wo16 + span + 31) / 32 * 32, rows = d->ho + (d->kh - 1) * d->dh;
    if (d->kh * d->kw > QDW_TAPS || rows * cols > QDW_PAIRS)
        return false;
    int32_t pairs[QDW_PAIRS], wp[QDW_TAPS];
    /* filter rows a and a + 1 of column q as the word VPDPWSSD multiplies a pair row by
     * (row a + 1 zero past the filter) */
    int npair = (int)((d->kh + 1) / 2);
    for (int a = 0; a < npair; a++)
        for (int64_t q = 0; q < d->kw; q++) {
            int16_t w0 = d->taps[2 * a * d->kw + q],
                    w1 = 2 * a + 1 < d->kh ? d->taps[(2 * a + 1) * d->kw + q] : 0;
            wp[a * d->kw + q] = (int32_t)((uint32_t)(uint16_t)w0 | (uint32_t)(uint16_t)w1 << 16);
        }
    qdw_pairs(d, pairs, rows, cols);
    for (int64_t oh = 0; oh < d->ho; oh++)
        for (int64_t o0 = 0; o0 < d->wo; o0 += 16) {
            __m512i acc = _mm512_set1_epi32(d->bias);
            for (int a = 0; a < npair; a++) {
                const int32_t *row = pairs + (oh + 2 * a * d->dh) * cols + o0;
                for (int64_t q = 0; q < d->kw; q++)
                    acc = _mm512_dpwssd_epi32(acc, _mm512_loadu_si512(row + q * d->dw),
                                              _mm512_set1_epi32(wp[a * d->kw + q]));
            }
            __mmask16 m = (__mmask16)qv_lanes(d->wo - o0);
            int64_t at = oh * d->ysh + o0;
            qv_store(d->c8 ? NULL : d->c + at, d->c8 ? d->c8 + at : NULL, d->mult, d->lo, acc, m);
        }
    return true;
}

#else

bool cpu_qdw_vnni(const cpu_qdw *d)
{
    (void)d;
    return false;
}

bool cpu_qgemm_vnni(void)
{
    return false;
}

bool cpu_qgemm_run(const cpu_exec *e, const cpu_qgemm *q, int threads)
{
    (void)e;
    (void)q;
    (void)threads;
    return false;
}

#endif
