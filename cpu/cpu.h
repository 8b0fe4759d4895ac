/* The CPU backend's internals: buffers, tensor addressing and one function per op. */
#ifndef EXAPT_CPU_CPU_H
#define EXAPT_CPU_CPU_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/tdesc.h"
#include "exapt/backend.h"

/** A CPU buffer: plain host memory. ex_buffer handles of this backend point to one. */
typedef struct cpu_buffer {
    void *data;
    uint64_t bytes;
} cpu_buffer;

/** What every kernel may need besides its node. */
typedef struct cpu_exec {
    int reference; /**< run the plain, obviously correct loops (no BLAS, no threads) */
    int threads;
    char *msg; /**< where a kernel writes its error message */
    size_t msg_len;
    bool (*fails)(void *user); /**< the context's allocation hook, or NULL */
    void *user;
    bool avx512; /**< exapt's own AVX-512 f32 kernels run (cpu_avx512(), asked once) */
    bool vnni;   /**< the int8 VNNI kernels run (cpu_qgemm_vnni(), asked once per backend) */
} cpu_exec;

/** Whether this CPU runs exapt's own AVX-512 kernels (AVX-512 F, BW and VL), asked at run
 *  time; false with EXAPT_CPU_AVX512=0 in the environment, which runs the portable paths
 *  instead (their tests on an AVX-512 machine). The backend asks once, when it is made. */
bool cpu_avx512(void);

/** A kernel's scratch memory: malloc, counted by the allocation hook. Safe to call from
 *  OpenMP threads (the hook's count is not). */
static inline void *cpu_alloc(const cpu_exec *e, size_t n)
{
    bool fail = false;
    if (e->fails) {
#pragma omp critical(cpu_alloc_hook)
        fail = e->fails(e->user);
    }
    return fail ? NULL : malloc(n);
}

/** Fixed chunk of elements for reductions: chunks are combined in index order, so sums
 *  do not depend on the thread count. */
#define CPU_CHUNK 4096

static inline void *cpu_ptr(const ex_tdesc *t)
{
    return (char *)((cpu_buffer *)t->buf)->data + t->offset;
}
static inline float *cpu_f32(const ex_tdesc *t)
{
    return (float *)cpu_ptr(t);
}
static inline int32_t *cpu_i32(const ex_tdesc *t)
{
    return (int32_t *)cpu_ptr(t);
}

/** Whether t's elements are dense in row-major order. */
static inline int cpu_contiguous(const ex_tdesc *t)
{
    int64_t s = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->ne[d] != 1 && t->st[d] != s)
            return 0;
        s *= t->ne[d];
    }
    return 1;
}

/** Writes a message for the failing kernel and returns st. */
ex_status cpu_fail(const cpu_exec *e, ex_status st, const char *fmt, ...);

/* One function per op; cpu/backend.c holds the switch. Each returns EX_OK or a status
 * with a message in e->msg. */
#define CPU_OP(name) ex_status cpu_##name(const cpu_exec *e, const ex_node_exec *n)
/* elementwise.c */
CPU_OP(add);
CPU_OP(sub);
CPU_OP(mul);
CPU_OP(scale);
CPU_OP(axpy);
CPU_OP(relu);
CPU_OP(relu_bwd);
CPU_OP(fill);
CPU_OP(copy);
CPU_OP(drop_path);
/* reduce.c */
CPU_OP(sum);
CPU_OP(mean);
CPU_OP(max);
CPU_OP(max_bwd);
/* softmax.c */
CPU_OP(softmax);
CPU_OP(softmax_bwd);
CPU_OP(log_softmax);
CPU_OP(log_softmax_bwd);
CPU_OP(cross_entropy);
CPU_OP(cross_entropy_bwd);
CPU_OP(accuracy);
/* conv.c */
CPU_OP(conv2d);
CPU_OP(conv2d_bwd_data);
CPU_OP(conv2d_bwd_filter);
CPU_OP(dwconv2d);
CPU_OP(dwconv2d_bwd_data);
CPU_OP(dwconv2d_bwd_filter);
/* gemm.c */
CPU_OP(pwconv);
CPU_OP(pwconv_bwd_filter);
CPU_OP(pwconv_bn);
CPU_OP(matmul);
CPU_OP(linear);
/* pool.c */
CPU_OP(avg_pool);
CPU_OP(avg_pool_bwd);
CPU_OP(max_pool);
CPU_OP(max_pool_bwd);
CPU_OP(global_avg_pool);
/* batchnorm.c */
CPU_OP(bn_stats);
CPU_OP(bn_apply);
CPU_OP(bn_bwd_reduce);
CPU_OP(bn_bwd_data);
/* nas.c */
CPU_OP(mixed_sum);
CPU_OP(mixed_sum_bwd_w);
CPU_OP(gumbel_softmax);
CPU_OP(gumbel_softmax_bwd);
CPU_OP(hardmax_st);
CPU_OP(entropy);
CPU_OP(entropy_bwd);
CPU_OP(topk_mask);
/* optim.c */
CPU_OP(sgd);
CPU_OP(adam);
/** Runs count SGD or ADAM nodes, a group of the plan (core/group.h), in one parallel
 *  region; each node checked before any is run. */
ex_status cpu_update_group(const cpu_exec *e, const ex_node_exec *n, int32_t count);
CPU_OP(grad_norm);
CPU_OP(clip);
/* random.c */
CPU_OP(rand_uniform);
CPU_OP(rand_normal);
/* quant.c */
CPU_OP(quantize);
CPU_OP(dequantize);
CPU_OP(requantize);
CPU_OP(qadd);
CPU_OP(qconcat);
CPU_OP(qconv2d);
CPU_OP(qdwconv2d);
CPU_OP(qpwconv);
CPU_OP(qlinear);
CPU_OP(qrelu);
CPU_OP(qmax_pool);
CPU_OP(qavg_pool);
CPU_OP(qglobal_avg_pool);

/* sgemm512.c: f32 products of small matrices on AVX-512 */

/** C_i [m, n] = A [m, k] B_i [k, n] for images i < images: A's element (r, j) at
 *  a[r ars + j acs]; rows of B_i and C_i ldb and ldc apart, their columns dense;
 *  B_i = b + i sb, C_i = c + i sc. With relu, B's negative elements count as 0; with
 *  scale, row r of C is then sum * scale[r] + shift[r] (a multiply, then an add). */
typedef struct cpu_sgemm {
    const float *a, *b;
    float *c;
    int64_t m, n, k, ars, acs, ldb, ldc, sb, sc, images;
    const float *scale, *shift;
    int relu;
} cpu_sgemm;

/** Runs q on e's threads where e->avx512 holds, and returns whether it did. */
bool cpu_sgemm512_run(const cpu_exec *e, const cpu_sgemm *q);

/* qvnni.c: the int8 convolutions on AVX-512 VNNI */

/** C_i [m, n] = bias + A [m, k] B_i [k, n] for images i < images; rows of A, B_i and C_i
 *  have strides lda, ldb and ldc, their columns are dense; B_i = b + i sb, C_i = c + i sc.
 *  With mult, C_i is i8 at c8 instead: row r clamp(rne(f32(sum) * mult[r ms])) to [lo, 127]
 *  (REQUANTIZE's arithmetic). */
typedef struct cpu_qgemm {
    const int8_t *a, *b;
    const int32_t *bias;
    int32_t *c;
    int8_t *c8;
    const float *mult;
    int64_t m, n, k, lda, ldb, ldc, sb, sc, images, ms;
    float lo;
} cpu_qgemm;

/** Whether this CPU runs cpu_qgemm_run (AVX-512 with VNNI and VBMI), asked at run time;
 *  false where cpu_avx512() is. The backend asks once, when it is made (cpu_exec.vnni). */
bool cpu_qgemm_vnni(void);

/** Runs q on threads threads; false when out of memory or cpu_qgemm_vnni() is false. */
bool cpu_qgemm_run(const cpu_exec *e, const cpu_qgemm *q, int threads);

/** Taps and pair-row words cpu_qdw_vnni takes (5x5 filters at dilation 2 over 32-wide
 *  planes fit). */
#define QDW_TAPS 64
#define QDW_PAIRS 8192

/** One plane of a stride-1 int8 depthwise convolution: x [h, w] (rows xsh apart, columns
 *  dense) under kh x kw taps (row-major) at dilation dh, dw and padding ph, pw, plus bias,
 *  into c [ho, wo] (i32, rows ysh apart), or with c8 into i8 through mult and lo as
 *  cpu_qgemm. */
typedef struct cpu_qdw {
    const int8_t *x, *taps;
    int32_t *c;
    int8_t *c8;
    int64_t h, w, xsh, ho, wo, ysh, kh, kw, dh, dw, ph, pw;
    int32_t bias;
    float mult, lo;
} cpu_qdw;

/** Runs d; only where cpu_qgemm_vnni() holds. False, having written nothing, where the
 *  filter or the plane does not fit (QDW_TAPS, QDW_PAIRS). */
bool cpu_qdw_vnni(const cpu_qdw *d);

/** One plane of int8 max pooling over dense rows: x [h, w] (rows xsh apart), windows kh x kw
 *  at strides sh, sw and padding ph, pw (below the window), into y [ho, wo] (rows ysh apart). */
typedef struct cpu_qpool {
    const int8_t *x;
    int8_t *y;
    int64_t h, w, xsh, ho, wo, ysh;
    int kh, kw, sh, sw, ph, pw;
} cpu_qpool;

/** Runs p; only where cpu_qgemm_vnni() holds. False, having written nothing, where a row's
 *  windows do not fit one vector of 64 bytes (or kw is above 8). */
bool cpu_qmax_vnni(const cpu_qpool *p);

#endif
