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
 * 32-bit lane of a padded plane holds the inputs of rows r and r + dilation at one column,
 * and one instruction adds two taps of a filter column (rows a and a + 1) for 16 outputs:
 * a 3x3 filter takes 6 instructions where it took 9 multiplies and as many adds. The plane
 * is flat, its padded rows one after the other, and so are the outputs (a row of wo and
 * the filter's span of columns no one keeps): a 7x7 plane takes 4 vectors, not 7 half
 * empty ones, and the filter's offsets are the same for every vector. */
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define QG_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi")))
#define QG_ROWS 4  /* rows of A a block makes */
#define QG_COLS 64 /* pixels a block makes: 4 vectors of 16 lanes */

/* A word of 4 weights, read where the weights' bytes lie (so of any effective type). */
typedef int32_t qg_word __attribute__((may_alias));

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

/* acc + the dot products of x's unsigned and w's signed bytes, 4 to a lane (VPDPBUSD).
 * The intrinsic's accumulator is not tied to its result in GCC's register allocation,
 * which copied the 16 accumulators of qg_block's loop at every step (about as many moves
 * as products); the instruction itself updates its register in place. */
QG_TARGET static inline __m512i qg_dp(__m512i acc, __m512i x, __m512i w)
{
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(x), "v"(w));
    return acc;
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

/* The block of C_i at rows [r0, r0 + 4) and columns [p0, p0 + 16 V), clipped to C: 4 rows
 * of packed weights (k4 words each) and the packed B at the block's first pixel (groups
 * gs bytes apart). V, the block's vectors, is a constant in each caller (qg_block). */
QG_TARGET static inline __attribute__((always_inline)) void
qg_block_v(const cpu_qgemm *q, const qg_word *const *wr, int64_t k4, const uint8_t *xp, int64_t gs,
           const int32_t *bias, int64_t i, int64_t r0, int64_t p0, const int V)
{
    __m512i acc[QG_ROWS][4];
    for (int r = 0; r < QG_ROWS; r++)
        for (int v = 0; v < V; v++)
            acc[r][v] = _mm512_set1_epi32(bias[r]);
    for (int64_t g = 0; g < k4; g++) {
        const uint8_t *xg = xp + g * gs;
        __m512i x[4];
        for (int v = 0; v < V; v++)
            x[v] = _mm512_loadu_si512(xg + 64 * v);
        for (int r = 0; r < QG_ROWS; r++) {
            __m512i w = _mm512_set1_epi32(wr[r][g]);
            for (int v = 0; v < V; v++)
                acc[r][v] = qg_dp(acc[r][v], x[v], w);
        }
    }
    int64_t rows = q->m - r0 < QG_ROWS ? q->m - r0 : QG_ROWS;
    for (int r = 0; r < rows; r++)
        for (int v = 0; v < V; v++) {
            int64_t left = q->n - p0 - 16 * v;
            __mmask16 m = left <= 0 ? 0 : left >= 16 ? 0xFFFF : (__mmask16)((1u << left) - 1);
            qg_store(q, i * q->sc + (r0 + r) * q->ldc + p0 + 16 * v, r0 + r, acc[r][v], m);
        }
}

/* qg_block_v of V vectors (1 to 4: a plane's last block takes only the vectors its pixels
 * reach, so 196 pixels make 13 vectors, not 16). */
QG_TARGET static void qg_block(const cpu_qgemm *q, const qg_word *const *wr, int64_t k4,
                               const uint8_t *xp, int64_t gs, const int32_t *bias, int64_t i,
                               int64_t r0, int64_t p0, int vecs)
{
    switch (vecs) {
    case 1: qg_block_v(q, wr, k4, xp, gs, bias, i, r0, p0, 1); break;
    case 2: qg_block_v(q, wr, k4, xp, gs, bias, i, r0, p0, 2); break;
    case 3: qg_block_v(q, wr, k4, xp, gs, bias, i, r0, p0, 3); break;
    default: qg_block_v(q, wr, k4, xp, gs, bias, i, r0, p0, 4); break;
    }
}

/* Row r of the weights: its bias with -128 sum(w) (the sum by VPDPBUSD of bytes of 1 by
 * the weights), and with out its k4 words of 4 bytes, zero past k. */
QG_TARGET static int32_t qg_row(const cpu_qgemm *q, int64_t r, int64_t k4, int32_t *out)
{
    const int8_t *a = q->a + r * q->lda;
    __m512i sum = _mm512_setzero_si512(), ones = _mm512_set1_epi8(1);
    for (int64_t c = 0; c < 4 * k4; c += 64) {
        __mmask64 in = q->k - c >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << (q->k - c)) - 1,
                  all = 4 * k4 - c >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << (4 * k4 - c)) - 1;
        __m512i v = _mm512_maskz_loadu_epi8(q->k > c ? in : 0, a + (q->k > c ? c : 0));
        if (out)
            _mm512_mask_storeu_epi8((int8_t *)out + c, all, v);
        sum = qg_dp(sum, ones, v);
    }
    return (int32_t)((uint32_t)q->bias[r] - 128u * (uint32_t)_mm512_reduce_add_epi32(sum));
}

/* One thread's part of cpu_qgemm_run: the columns [v0, v1) of the images' 16-pixel vectors
 * (image i's vector v at i nv + v) of the rows [r0, r1) (whole blocks), everything it reads
 * packed by itself, so the threads never wait for each other. wr: row pointers, bias, wq
 * the packed weights (NULL where the weights' rows are read as they lie), all indexed by
 * row from 0; xp the packed B. */
QG_TARGET static void qg_part(const cpu_qgemm *q, int64_t v0, int64_t v1, int64_t nv, int64_t r0,
                              int64_t r1, int64_t k4, const qg_word **wr, int32_t *bias,
                              int32_t *wq, uint8_t *xp)
{
    for (int64_t r = r0; r < r1; r++) {
        if (r < q->m) {
            bias[r] = qg_row(q, r, k4, wq ? wq + r * k4 : NULL);
            wr[r] = wq ? wq + r * k4 : (const qg_word *)(const void *)(q->a + r * q->lda);
        } else { /* rows past m: made (as row m - 1, in the same block) and never stored */
            bias[r] = 0;
            wr[r] = wr[q->m - 1];
        }
    }
    for (int64_t at = v0; at < v1;) {
        int64_t i = at / nv, a = at % nv, b = v1 - i * nv < nv ? v1 - i * nv : nv;
        int64_t p0 = 16 * a, cols = 16 * (b - a), gs = 4 * cols;
        const int8_t *bi = q->b + i * q->sb + p0;
        for (int64_t g = 0; g < (q->k + 3) / 4; g++)
            qg_pack_group(bi, q->ldb, q->k, q->n - p0, g, cols, xp + g * gs);
        for (int64_t rb = r0; rb < r1; rb += QG_ROWS)
            for (int64_t c = 0; c < cols; c += QG_COLS) {
                int vecs = (int)((cols - c) / 16 < 4 ? (cols - c) / 16 : 4);
                qg_block(q, wr + rb, k4, xp + 4 * c, gs, bias + rb, i, rb, p0 + c, vecs);
            }
        at = i * nv + b;
    }
}

/* A thread's share of cpu_qgemm_run: vectors [v[0], v[1]) of rows [r[0], r[1]). Many
 * vectors: contiguous runs of them, as even as they come, over all rows. One image of few
 * vectors (a small plane): runs of row blocks over every vector instead, each thread
 * packing the whole image: vectors would leave most threads idle or with a vector or two,
 * and a thread's output channels are then the ones the next depthwise or element-wise
 * node, which splits channels the same way, reads on the same core. */
static void qg_share(const cpu_qgemm *q, int64_t nv, int64_t mp, int64_t t, int64_t nt,
                     int64_t v[2], int64_t r[2])
{
    int64_t total = q->images * nv, blocks = mp / QG_ROWS;
    if (q->images == 1 && nv < 8 * nt && blocks >= nt) {
        v[0] = 0, v[1] = total;
        r[0] = blocks * t / nt * QG_ROWS, r[1] = blocks * (t + 1) / nt * QG_ROWS;
    } else {
        v[0] = total * t / nt, v[1] = total * (t + 1) / nt;
        r[0] = 0, r[1] = mp;
    }
}

bool cpu_qgemm_run(const cpu_exec *e, const cpu_qgemm *q, int threads)
{
    int64_t k4 = (q->k + 3) / 4, mp = (q->m + QG_ROWS - 1) / QG_ROWS * QG_ROWS;
    int64_t nv = (q->n + 15) / 16;
    /* the weights' rows are read as they lie where they are whole aligned words */
    bool direct = q->k % 4 == 0 && q->lda % 4 == 0 && (uintptr_t)q->a % 4 == 0;
    bool ok = true;
    (void)threads; /* read by the OpenMP pragmas only */
#pragma omp parallel num_threads(threads)
    {
        int64_t nt = 1, t = 0, v[2], r[2];
#ifdef _OPENMP
        nt = omp_get_num_threads();
        t = omp_get_thread_num();
#endif
        qg_share(q, nv, mp, t, nt, v, r);
        /* a run packs at most nv vectors of an image at a time */
        int64_t span = v[1] - v[0] < nv ? v[1] - v[0] : nv;
        bool work = v[1] > v[0] && r[1] > r[0];
        size_t wbytes = direct ? 0 : (size_t)(q->m * k4) * sizeof(int32_t);
        size_t bytes = (size_t)mp * (sizeof(int32_t *) + sizeof(int32_t)) + wbytes +
                       (size_t)(k4 * 64 * span) + 64;
        char *mem = work ? cpu_alloc(e, bytes) : NULL;
        if (work && !mem) {
#pragma omp atomic write
            ok = false;
        } else if (mem) {
            const qg_word **wr = (const qg_word **)(void *)mem;
            int32_t *bias = (int32_t *)(void *)(wr + mp);
            int32_t *wq = direct ? NULL : bias + mp;
            uint8_t *xp = (uint8_t *)(bias + mp) + wbytes;
            qg_part(q, v[0], v[1], nv, r[0], r[1], k4, wr, bias, wq, xp);
        }
        free(mem);
    }
    return ok;
}

/* The plane padded as the filter reads it, flat: padded row r at r * wp, zeros outside x
 * (wp = wo + (kw - 1) dw, so an output row's taps never wrap into the next row's outputs). */
QG_TARGET static void qdw_flat(const cpu_qdw *d, int8_t *p, int64_t wp, int64_t bytes)
{
    memset(p, 0, (size_t)bytes);
    int64_t cols = d->w < wp - d->pw ? d->w : wp - d->pw;
    for (int64_t h = 0; h < d->h && cols > 0; h++) {
        int64_t r = h + d->ph;
        if (r * wp + d->pw + cols > bytes)
            break;
        for (int64_t c = 0; c < cols; c += 64) {
            __mmask64 m = cols - c >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << (cols - c)) - 1;
            _mm512_mask_storeu_epi8(p + r * wp + d->pw + c, m,
                                    _mm512_maskz_loadu_epi8(m, d->x + h * d->xsh + c));
        }
    }
}

/* The flat plane's pairs [0, count) (count a multiple of 32): lane f holds the 16-bit
 * values at f and f + gap, which VPDPWSSD multiplies by two taps rows dh apart. */
QG_TARGET static void qdw_pairs(const int8_t *p, int64_t gap, int32_t *pairs, int64_t count)
{
    uint16_t lo[32], hi[32];
    for (int i = 0; i < 16; i++) {
        lo[2 * i] = (uint16_t)i, lo[2 * i + 1] = (uint16_t)(32 + i);
        hi[2 * i] = (uint16_t)(16 + i), hi[2 * i + 1] = (uint16_t)(48 + i);
    }
    const __m512i ilo = _mm512_loadu_si512(lo), ihi = _mm512_loadu_si512(hi);
    for (int64_t f = 0; f < count; f += 32) {
        __m512i a = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(p + f))),
                b = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(p + f + gap)));
        _mm512_storeu_si512(pairs + f, _mm512_permutex2var_epi16(a, ilo, b));
        _mm512_storeu_si512(pairs + f + 16, _mm512_permutex2var_epi16(a, ihi, b));
    }
}

/* 16 sums requantized as qv_store does, to 16 bytes at c8. */
QG_TARGET static inline void qdw_rq16(int8_t *c8, float mult, float lo, __m512i acc)
{
    __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), _mm512_set1_ps(mult));
    v = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(lo)), _mm512_set1_ps(127.0f));
    _mm_storeu_si128((__m128i *)c8, _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(v)));
}

/* The flat sums [0, 16 nv) of a filter of npair pair rows by kw columns: output f is the
 * bias plus pair word (a, q) times the pairs at f + off[a * kw + q]; stored requantized to
 * t8, or as i32 to t32. KW and NPAIR, when not 0, are the constants of the 3x3 filter the
 * compiler unrolls. */
#define QDW_SUMS(NPAIR, KW)                                                                        \
    for (int64_t f = 0; f < 16 * nv; f += 16) {                                                    \
        __m512i acc = _mm512_set1_epi32(d->bias);                                                  \
        for (int t = 0; t < (NPAIR) * (KW); t++)                                                   \
            acc = _mm512_dpwssd_epi32(acc, _mm512_loadu_si512(pairs + f + off[t]), wv[t]);         \
        if (t8)                                                                                    \
            qdw_rq16(t8 + f, d->mult, d->lo, acc);                                                 \
        else                                                                                       \
            _mm512_storeu_si512(t32 + f, acc);                                                     \
    }

QG_TARGET bool cpu_qdw_vnni(const cpu_qdw *d)
{
    int npair = (int)((d->kh + 1) / 2), kw = (int)d->kw;
    int64_t wp = d->wo + (d->kw - 1) * d->dw, gap = d->dh * wp;
    /* the outputs flat at oh * wp + ow, whole vectors of them; the pairs they read; the
     * padded plane those read */
    int64_t nv = ((d->ho - 1) * wp + d->wo + 15) / 16;
    int64_t count = (16 * nv + 2 * (npair - 1) * gap + (kw - 1) * d->dw + 31) / 32 * 32;
    int64_t bytes = count + gap + 32;
    int8_t plane[QDW_PAIRS + 2048];
    int32_t pairs[QDW_PAIRS];
    if (d->kh * d->kw > QDW_TAPS || count > QDW_PAIRS || bytes > (int64_t)sizeof plane ||
        d->wo > 64)
        return false;
    /* the sums go where nothing reads any more: i8 over the plane (read whole into the
     * pairs first), i32 over the pairs (vector f's loads are all at f and past it, the
     * later vectors' past f + 16) */
    int8_t *t8 = d->c8 ? plane : NULL;
    int32_t *t32 = pairs;
    int32_t off[QDW_TAPS];
    __m512i wv[QDW_TAPS];
    /* filter rows 2a and 2a + 1 of column q as the word VPDPWSSD multiplies a pair by
     * (row 2a + 1 zero past the filter) */
    for (int a = 0; a < npair; a++)
        for (int q = 0; q < kw; q++) {
            int16_t w0 = d->taps[2 * a * kw + q],
                    w1 = 2 * a + 1 < d->kh ? d->taps[(2 * a + 1) * kw + q] : 0;
            wv[a * kw + q] =
                _mm512_set1_epi32((int32_t)((uint32_t)(uint16_t)w0 | (uint32_t)(uint16_t)w1 << 16));
            off[a * kw + q] = (int32_t)(2 * a * gap + q * d->dw);
        }
    qdw_flat(d, plane, wp, bytes);
    qdw_pairs(plane, gap, pairs, count);
    if (npair == 2 && kw == 3)
        QDW_SUMS(2, 3)
    else
        QDW_SUMS(npair, kw)
    /* the rows out of the flat sums */
    for (int64_t oh = 0; oh < d->ho; oh++) {
        __mmask64 m = d->wo >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << d->wo) - 1;
        if (t8)
            _mm512_mask_storeu_epi8(d->c8 + oh * d->ysh, m,
                                    _mm512_maskz_loadu_epi8(m, t8 + oh * wp));
        else
            memcpy(d->c + oh * d->ysh, t32 + oh * wp, (size_t)d->wo * sizeof *t32);
    }
    return true;
}

QG_TARGET bool cpu_qmax_vnni(const cpu_qpool *p)
{
    /* a row and its windows in one vector: padded column c (input column c - pw) in lane c */
    if (p->kw > 8 || p->wo > 64 || (p->wo - 1) * p->sw + p->kw > 64 || p->pw >= 64)
        return false;
    __m512i idx[8];
    for (int q = 0; q < p->kw; q++) {
        uint8_t at[64];
        for (int j = 0; j < 64; j++) {
            int64_t c = j * p->sw + q;
            at[j] = (uint8_t)(c < 64 ? c : 63);
        }
        idx[q] = _mm512_loadu_si512(at);
    }
    int64_t end = p->pw + p->w < 64 ? p->pw + p->w : 64;
    __mmask64 in = (end >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << end) - 1) &
                   ~(((__mmask64)1 << p->pw) - 1),
              out = p->wo >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << p->wo) - 1;
    const __m512i floor = _mm512_set1_epi8(-128);
    for (int64_t i = 0; i < p->ho; i++) {
        int64_t h0 = i * p->sh - p->ph, h1 = h0 + p->kh;
        h0 = h0 < 0 ? 0 : h0;
        h1 = h1 > p->h ? p->h : h1;
        /* the window's rows reduced, -128 (which every element equals or passes) outside;
         * the masked load reads no byte outside the row */
        __m512i v = floor;
        for (int64_t r = h0; r < h1; r++) {
            uintptr_t at = (uintptr_t)(p->x + r * p->xsh) - (uintptr_t)p->pw;
            v = _mm512_max_epi8(v, _mm512_mask_loadu_epi8(floor, in, (const void *)at));
        }
        __m512i m = _mm512_permutexvar_epi8(idx[0], v);
        for (int q = 1; q < p->kw; q++)
            m = _mm512_max_epi8(m, _mm512_permutexvar_epi8(idx[q], v));
        _mm512_mask_storeu_epi8(p->y + i * p->ysh, out, m);
    }
    return true;
}

#else

bool cpu_qmax_vnni(const cpu_qpool *p)
{
    (void)p;
    return false;
}

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
