/* Op suite: convolutions, GEMMs, pooling and batch norm. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/backend_iface.h"
#include "core/engine.h"
#include "ops_harness.h"
#include "ref.h"

/* ---- convolution: ip = stride h, w; pad h, w; dilation h, w ---- */

static ex_conv_params conv_params(const env *e)
{
    const int *ip = e->c->ip;
    return (ex_conv_params){{ip[0], ip[1]}, {ip[2], ip[3]}, {ip[4], ip[5]}};
}

static ref_conv ref_params(const env *e)
{
    const int *ip = e->c->ip;
    return (ref_conv){{ip[0], ip[1]}, {ip[2], ip[3]}, {ip[4], ip[5]}};
}

static ex_tensor *b_conv(env *e, ex_tensor *const *x)
{
    ex_conv_params p = conv_params(e);
    return ex_conv2d(e->ctx, x[0], x[1], &p);
}
static void r_conv(const env *e, double *y)
{
    ref_conv p = ref_params(e);
    ref_conv2d(e->od[0], e->one[0], e->od[1], e->one[1], &p, y);
}

static ex_tensor *b_dwconv(env *e, ex_tensor *const *x)
{
    ex_conv_params p = conv_params(e);
    return ex_dwconv2d(e->ctx, x[0], x[1], &p);
}
static void r_dwconv(const env *e, double *y)
{
    ref_conv p = ref_params(e);
    ref_dwconv2d(e->od[0], e->one[0], e->od[1], e->one[1], &p, y);
}

static ex_tensor *b_dwconv_relu(env *e, ex_tensor *const *x)
{
    ex_conv_params p = conv_params(e);
    return ex_dwconv2d_relu(e->ctx, x[0], x[1], &p);
}
static void r_dwconv_relu(const env *e, double *y)
{
    ref_conv p = ref_params(e);
    ref_dwconv2d_relu(e->od[0], e->one[0], e->od[1], e->one[1], &p, y);
}

/* Exact zeros in x: about a third of its elements, half of those -0. */
static void i_zeros(env *e)
{
    for (int64_t i = 0; i < e->rn[0]; i++)
        if (rng_below(&e->rng, 3) == 0)
            e->rd[0][i] = rng_below(&e->rng, 2) ? -0.0 : 0.0;
}

/* ReLU has no derivative at 0; the op takes RELU_BWD's (x > 0 ? 1 : 0), so an exact zero
 * gets no gradient. With zeros in x the differences are taken of the op linearized at
 * the operands: the convolution of x times the mask [x > 0] of the x the backend saw,
 * frozen here (e->scratch). Its gradient in x is the mask times the convolution's, in w
 * the correlation with max(x, 0): what the backend must give. */
static void p_freeze_mask(env *e)
{
    double *m = xcalloc((size_t)e->on[0], sizeof *m);
    for (int64_t i = 0; i < e->on[0]; i++)
        m[i] = e->od[0][i] > 0 ? 1.0 : 0.0;
    e->scratch = m;
}
static void r_dwconv_masked(const env *e, double *y)
{
    const double *m = e->scratch;
    double *xm = xcalloc((size_t)e->on[0], sizeof *xm);
    for (int64_t i = 0; i < e->on[0]; i++)
        xm[i] = m[i] * e->od[0][i];
    ref_conv p = ref_params(e);
    ref_dwconv2d(xm, e->one[0], e->od[1], e->one[1], &p, y);
    free(xm);
}

/* The fused node is one node: no ReLU of its own forward or backward in the plan, both
 * gradient passes there. */
static void a_fused(env *e)
{
    if (plan_has(e->plan, EX_OP_RELU) || plan_has(e->plan, EX_OP_RELU_BWD))
        case_fail(e, "the plan runs a separate relu or relu_bwd node");
    if (!plan_has(e->plan, EX_OP_DWCONV2D_BWD_DATA) ||
        !plan_has(e->plan, EX_OP_DWCONV2D_BWD_FILTER))
        case_fail(e, "the plan lacks a depthwise gradient pass");
}

#define CONV(nm, xs, ws, ...)                                                                      \
    {                                                                                              \
        CASE(nm, EX_OP_CONV2D, b_conv, r_conv, 2),                                                 \
            .r = {{GIN("x"), SHAPE xs, UNI(-1, 1)}, {PAR("w"), SHAPE ws, UNI(-1, 1)}},             \
            .ip = {__VA_ARGS__}, .bwd = B_FD                                                       \
    }
/* depthwise k x k, stride s, dilation d, "same" padding d (k - 1) / 2 */
#define DW(k, s, d)                                                                                \
    {                                                                                              \
        CASE("dwconv2d " #k "x" #k " stride " #s " dilation " #d, EX_OP_DWCONV2D, b_dwconv,        \
             r_dwconv, 2),                                                                         \
            .r = {{GIN("x"), SHAPE(2, 5, 13, 11), UNI(-1, 1)},                                     \
                  {PAR("w"), SHAPE(5, 1, k, k), UNI(-1, 1)}},                                      \
            .ip = {s, s, d * (k - 1) / 2, d * (k - 1) / 2, d, d}, .bwd = B_FD                      \
    }

/* depthwise k x k, stride s, dilation d, "same" padding on x of shape xs */
#define DWX(nm, xs, c, k, s, d)                                                                    \
    {                                                                                              \
        CASE(nm, EX_OP_DWCONV2D, b_dwconv, r_dwconv, 2),                                           \
            .r = {{GIN("x"), SHAPE xs, UNI(-1, 1)}, {PAR("w"), SHAPE(c, 1, k, k), UNI(-1, 1)}},    \
            .ip = {s, s, d * (k - 1) / 2, d * (k - 1) / 2, d, d}, .bwd = B_FD                      \
    }

/* depthwise of max(x, 0), k x k, stride s, dilation d, "same" padding; x of both signs
 * away from 0 (finite differences do not cross the kink) */
#define DWR(k, s, d)                                                                               \
    {                                                                                              \
        CASE("dwconv2d_relu " #k "x" #k " stride " #s " dilation " #d, EX_OP_DWCONV2D,             \
             b_dwconv_relu, r_dwconv_relu, 2),                                                     \
            .r = {{GIN("x"), SHAPE(2, 5, 13, 11), AWAY(0.05, 1)},                                  \
                  {PAR("w"), SHAPE(5, 1, k, k), UNI(-1, 1)}},                                      \
            .ip = {s, s, d * (k - 1) / 2, d * (k - 1) / 2, d, d}, .bwd = B_FD, .after = a_fused    \
    }

/* the same with exact zeros in x (of shape xs, c channels): gradients against the op
 * linearized at x (p_freeze_mask) */
#define DWRZ(nm, xs, c, k, s, d)                                                                   \
    {                                                                                              \
        CASE(nm, EX_OP_DWCONV2D, b_dwconv_relu, r_dwconv_relu, 2),                                 \
            .r = {{GIN("x"), SHAPE xs, UNI(-1, 1)}, {PAR("w"), SHAPE(c, 1, k, k), UNI(-1, 1)}},    \
            .ip = {s, s, d * (k - 1) / 2, d * (k - 1) / 2, d, d}, .bwd = B_FD, .init = i_zeros,    \
            .prepare = p_freeze_mask, .dref = r_dwconv_masked, .after = a_fused                    \
    }

static const tcase conv_cases[] = {
    CONV("conv2d 3x3 s1 p1", (2, 3, 9, 11), (4, 3, 3, 3), 1, 1, 1, 1, 1, 1),
    CONV("conv2d 3x3 s2 d2 p2", (2, 4, 13, 11), (5, 4, 3, 3), 2, 2, 2, 2, 2, 2),
    CONV("conv2d 1x7 p(0,3)", (2, 3, 7, 13), (4, 3, 1, 7), 1, 1, 0, 3, 1, 1),
    CONV("conv2d 7x1 p(3,0)", (3, 5, 12, 7), (3, 5, 7, 1), 1, 1, 3, 0, 1, 1),
    CONV("conv2d 1x1 s2 (factorized reduce)", (2, 4, 9, 11), (3, 4, 1, 1), 2, 2, 0, 0, 1, 1),
    {CASE("conv2d 3x3 s1 p1 on a channel slice", EX_OP_CONV2D, b_conv, r_conv, 2),
     .r = {{GIN("x"), SHAPE(2, 7, 10, 9), UNI(-1, 1), SLICE(1, 2, 4)},
           {PAR("w"), SHAPE(3, 4, 3, 3), UNI(-1, 1)}},
     .ip = {1, 1, 1, 1, 1, 1}, .bwd = B_FD},
    DW(3, 1, 1),
    DW(3, 1, 2),
    DW(3, 2, 1),
    DW(3, 2, 2),
    DW(5, 1, 1),
    DW(5, 1, 2),
    DW(5, 2, 1),
    DW(5, 2, 2),
    DW(7, 1, 1),
    DW(7, 1, 2),
    DW(7, 2, 1),
    DW(7, 2, 2),
    {CASE("dwconv2d 3x3 on a channel slice", EX_OP_DWCONV2D, b_dwconv, r_dwconv, 2),
     .r = {{GIN("x"), SHAPE(2, 8, 11, 13), UNI(-1, 1), SLICE(1, 3, 5)},
           {PAR("w"), SHAPE(5, 1, 3, 3), UNI(-1, 1)}},
     .ip = {1, 1, 1, 1, 1, 1}, .bwd = B_FD},
    {CASE("dwconv2d 5x5 s2 of a transposed view", EX_OP_DWCONV2D, b_dwconv, r_dwconv, 2),
     .r = {{GIN("x"), SHAPE(3, 4, 9, 12), UNI(-1, 1), TRANS(2, 3)},
           {PAR("w"), SHAPE(4, 1, 5, 5), UNI(-1, 1)}},
     .ip = {2, 2, 2, 2, 1, 1}, .bwd = B_FD},
    /* the Vulkan fast path's tiles (planes beyond 32x32, windows that do not fit whole),
     * its filter partials over ranges of samples, DARTS' planes and channels; and a
     * geometry it does not take (conv.comp's depthwise form) */
    DWX("dwconv2d 5x5 on 45x70 planes (tiles)", (2, 3, 45, 70), 3, 5, 1, 1),
    DWX("dwconv2d 7x7 stride 2 dilation 2 on 45x70 planes (tiles)", (2, 3, 45, 70), 3, 7, 2, 2),
    DWX("dwconv2d 3x3 stride 2 on 37x70 planes (tiles)", (3, 2, 37, 70), 2, 3, 2, 1),
    DWX("dwconv2d 5x5 dilation 2, 8x16x32x32", (8, 16, 32, 32), 16, 5, 1, 2),
    DWX("dwconv2d 3x3 stride 2, 8x16x32x32", (8, 16, 32, 32), 16, 3, 2, 1),
    DWX("dwconv2d 3x3, 64x32x16x16 (ranges of two stages)", (64, 32, 16, 16), 32, 3, 1, 1),
    DWX("dwconv2d 5x5, 16x64x8x8 (8 planes a stage)", (16, 64, 8, 8), 64, 5, 1, 1),
    /* CUDA's column quads (filter gradient): rows of 128 (a warp a plane), 64 and 4 (a
     * lane a plane), heights that the ring of rows does not divide */
    DWX("dwconv2d 3x3 dilation 2, 3x2x11x128", (3, 2, 11, 128), 2, 3, 1, 2),
    DWX("dwconv2d 7x7, 2x3x9x64", (2, 3, 9, 64), 3, 7, 1, 1),
    DWX("dwconv2d 3x3, 37x3x6x4", (37, 3, 6, 4), 3, 3, 1, 1),
    /* Vulkan's column quads (dw.comp, DW_QUAD: stride 1, "same", rows of at most 128
     * quads): a single row (one band, one range: the filter gradient writes dw), rows of
     * 4, 16, 32 and 512 (one quad a row, one row of quads a workgroup), bands that the
     * height does not divide; rows of 12, 20 and 28, whose quads do not divide a
     * workgroup (the filter gradient's last invocations idle); rows of 14 and 10, whose
     * last quad is partial, and of 7, 6 and 5, which take single columns (DW_COL1), the
     * fused ReLU's mask among them; narrower rows, a column and 2x2 planes whose padding
     * passes the plane, stay on the staged tiles */
    DWX("dwconv2d 3x3, a single row of 32 (column quads)", (3, 4, 1, 32), 4, 3, 1, 1),
    DWX("dwconv2d 5x5 dilation 2, a single row of 16 (column quads)", (2, 3, 1, 16), 3, 5, 1, 2),
    DWX("dwconv2d 3x3 dilation 2, rows of 4 (column quads)", (5, 2, 7, 4), 2, 3, 1, 2),
    DWX("dwconv2d 5x5, 16x16 planes in bands (column quads)", (9, 3, 16, 16), 3, 5, 1, 1),
    DWX("dwconv2d 3x3, rows of 512 (column quads)", (1, 2, 3, 512), 2, 3, 1, 1),
    DWX("dwconv2d 5x5 dilation 2, 4x4 planes (column quads)", (4, 4, 4, 4), 4, 5, 1, 2),
    DWX("dwconv2d 5x5, 4x4 planes (column quads)", (4, 4, 4, 4), 4, 5, 1, 1),
    {CASE("dwconv2d 3x3 on a channel slice (column quads)", EX_OP_DWCONV2D, b_dwconv, r_dwconv, 2),
     .r = {{GIN("x"), SHAPE(2, 8, 6, 8), UNI(-1, 1), SLICE(1, 3, 5)},
           {PAR("w"), SHAPE(5, 1, 3, 3), UNI(-1, 1)}},
     .ip = {1, 1, 1, 1, 1, 1}, .bwd = B_FD},
    {CASE("dwconv2d 5x5 of a transposed view (column quads)", EX_OP_DWCONV2D, b_dwconv, r_dwconv,
          2),
     .r = {{GIN("x"), SHAPE(3, 4, 8, 8), UNI(-1, 1), TRANS(2, 3)},
           {PAR("w"), SHAPE(4, 1, 5, 5), UNI(-1, 1)}},
     .ip = {1, 1, 2, 2, 1, 1}, .bwd = B_FD},
    DWX("dwconv2d 3x3, rows of 12 (column quads, 3 a row)", (2, 3, 10, 12), 3, 3, 1, 1),
    DWX("dwconv2d 5x5 dilation 2, rows of 20 (column quads, 5 a row)", (2, 3, 9, 20), 3, 5, 1, 2),
    DWX("dwconv2d 3x3, 28x28 planes (column quads, 7 a row)", (5, 2, 28, 28), 2, 3, 1, 1),
    DWRZ("dwconv2d_relu 5x5 dilation 2, rows of 28 with exact zeros (column quads)", (3, 2, 9, 28),
         2, 5, 1, 2),
    DWX("dwconv2d 3x3, rows of 14 (column quads, the last partial)", (2, 3, 10, 14), 3, 3, 1, 1),
    DWX("dwconv2d 5x5 dilation 2, rows of 10 (column quads, the last partial)", (2, 3, 9, 10), 3, 5,
        1, 2),
    DWX("dwconv2d 5x5, 7x7 planes (single columns)", (6, 5, 7, 7), 5, 5, 1, 1),
    DWX("dwconv2d 3x3 dilation 2, 14x14 planes (column quads, the last partial)", (4, 3, 14, 14), 3,
        3, 1, 2),
    DWX("dwconv2d 3x3, rows of 5 (single columns)", (3, 2, 5, 5), 2, 3, 1, 1),
    DWX("dwconv2d 5x5, rows of 6 (single columns)", (2, 3, 9, 6), 3, 5, 1, 1),
    DWX("dwconv2d 5x5, a column (staged tiles)", (2, 3, 9, 1), 3, 5, 1, 1),
    DWRZ("dwconv2d_relu 3x3, 7x7 planes with exact zeros (single columns)", (4, 3, 7, 7), 3, 3, 1,
         1),
    DWX("dwconv2d 5x5 dilation 2, 2x2 planes (staged tiles)", (4, 3, 2, 2), 3, 5, 1, 2),
    DWRZ("dwconv2d_relu 3x3, 2x2 planes with exact zeros (staged tiles)", (4, 3, 2, 2), 3, 3, 1, 1),
    {CASE("dwconv2d 3x5 stride (1, 2) dilation (2, 1)", EX_OP_DWCONV2D, b_dwconv, r_dwconv, 2),
     .r = {{GIN("x"), SHAPE(2, 4, 12, 13), UNI(-1, 1)}, {PAR("w"), SHAPE(4, 1, 3, 5), UNI(-1, 1)}},
     .ip = {1, 2, 2, 2, 2, 1}, .bwd = B_FD},
    /* the fused ReLU (ip6 = 1) through every pass and path: the geometries of a search,
     * exact zeros and negatives, views, the GPU backends' tiled, staged and general
     * kernels */
    DWR(3, 1, 1),
    DWR(3, 1, 2),
    DWR(3, 2, 1),
    DWR(3, 2, 2),
    DWR(5, 1, 1),
    DWR(5, 1, 2),
    DWR(5, 2, 1),
    DWR(5, 2, 2),
    DWRZ("dwconv2d_relu 3x3 with exact zeros", (2, 5, 13, 11), 5, 3, 1, 1),
    DWRZ("dwconv2d_relu 5x5 stride 2 dilation 2 with exact zeros", (2, 5, 13, 11), 5, 5, 2, 2),
    DWRZ("dwconv2d_relu 3x3 dilation 3 with exact zeros", (2, 4, 14, 12), 4, 3, 1, 3),
    DWRZ("dwconv2d_relu 5x5 on 45x70 planes with exact zeros (tiles)", (2, 3, 45, 70), 3, 5, 1, 1),
    DWRZ("dwconv2d_relu 3x3 on 84x90 planes with exact zeros (beyond CUDA's staging)",
         (2, 2, 84, 90), 2, 3, 1, 1),
    DWRZ("dwconv2d_relu 5x5 dilation 2, 8x16x32x32 with exact zeros", (8, 16, 32, 32), 16, 5, 1, 2),
    DWRZ("dwconv2d_relu 3x3, 5x4x16x16 with exact zeros", (5, 4, 16, 16), 4, 3, 1, 1),
    DWRZ("dwconv2d_relu 3x3 dilation 2, rows of 8 with exact zeros (column quads)", (3, 4, 7, 8), 4,
         3, 1, 2),
    DWRZ("dwconv2d_relu 5x5, a single row of 16 with exact zeros (column quads)", (2, 3, 1, 16), 3,
         5, 1, 1),
    DWRZ("dwconv2d_relu 3x3, rows of 4 with exact zeros (column quads)", (6, 2, 5, 4), 2, 3, 1, 1),
    {CASE("dwconv2d_relu 3x3 on a channel slice with exact zeros", EX_OP_DWCONV2D, b_dwconv_relu,
          r_dwconv_relu, 2),
     .r = {{GIN("x"), SHAPE(2, 8, 11, 13), UNI(-1, 1), SLICE(1, 3, 5)},
           {PAR("w"), SHAPE(5, 1, 3, 3), UNI(-1, 1)}},
     .ip = {1, 1, 1, 1, 1, 1}, .bwd = B_FD, .init = i_zeros, .prepare = p_freeze_mask,
     .dref = r_dwconv_masked, .after = a_fused},
    {CASE("dwconv2d_relu 5x5 s2 of a transposed view with exact zeros", EX_OP_DWCONV2D,
          b_dwconv_relu, r_dwconv_relu, 2),
     .r = {{GIN("x"), SHAPE(3, 4, 9, 12), UNI(-1, 1), TRANS(2, 3)},
           {PAR("w"), SHAPE(4, 1, 5, 5), UNI(-1, 1)}},
     .ip = {2, 2, 2, 2, 1, 1}, .bwd = B_FD, .init = i_zeros, .prepare = p_freeze_mask,
     .dref = r_dwconv_masked, .after = a_fused},
    {CASE("dwconv2d_relu 3x5 stride (1, 2) dilation (2, 1) with exact zeros", EX_OP_DWCONV2D,
          b_dwconv_relu, r_dwconv_relu, 2),
     .r = {{GIN("x"), SHAPE(2, 4, 12, 13), UNI(-1, 1)}, {PAR("w"), SHAPE(4, 1, 3, 5), UNI(-1, 1)}},
     .ip = {1, 2, 2, 2, 2, 1}, .bwd = B_FD, .init = i_zeros, .prepare = p_freeze_mask,
     .dref = r_dwconv_masked, .after = a_fused},
};

void family_conv(void **state)
{
    run_table(*state, conv_cases, sizeof conv_cases / sizeof *conv_cases);
}

/* ---- malformed fused-ReLU flags (ip6) given to the backend directly ---- */

/* Regions of one buffer, in floats: x, dy, dx, y ([2, 3, 8, 8] each), w [3, 1, 3, 3],
 * dw, and a dense filter [3, 3, 3, 3]. */
enum { FL_PLANE = 2 * 3 * 8 * 8, FL_W = 4 * FL_PLANE, FL_DW = FL_W + 32, FL_WD = FL_DW + 32 };

static ex_tdesc fl_desc(ex_buffer *buf, int64_t at, int64_t c1)
{
    bool filter = at >= FL_W;
    ex_tdesc t = {.dtype = EX_F32, .ndim = 4, .buf = buf, .offset = (uint64_t)at * 4};
    int64_t ne[4] = {filter ? 3 : 2, filter ? c1 : 3, filter ? 3 : 8, filter ? 3 : 8}, st = 1;
    for (int d = 3; d >= 0; d--) {
        t.ne[d] = ne[d];
        t.st[d] = st;
        st *= ne[d];
    }
    return t;
}

/* A buffer of fl_desc's layout, every float 1. */
static ex_buffer *fl_buffer(const suite *s)
{
    const ex_backend_iface *f = ex__backend_iface_of(s->be);
    void *im = ex__backend_impl_of(s->be);
    ex_buffer *buf = NULL;
    uint64_t bytes = (uint64_t)(FL_WD + 81) * 4;
    assert_int_equal(f->buffer_alloc(im, bytes, &buf), EX_OK);
    assert_int_equal(f->fill(im, buf, 0, bytes, 0x3f800000u), EX_OK); /* 1.0f */
    return buf;
}

/* Runs node n alone, as a plan would hand it over, and waits for it. */
static ex_status fl_compute(const suite *s, const ex_node_exec *n)
{
    const ex_backend_iface *f = ex__backend_iface_of(s->be);
    void *im = ex__backend_impl_of(s->be);
    ex_status st = f->compute(im, n, 1, NULL);
    return st == EX_OK ? f->synchronize(im) : st;
}

typedef struct fl_case {
    ex_op op;
    int relu, nsrc;
    ex_status want;
} fl_case;

/* One node as a plan would hand it over: stride 1, padding 1, dilation 1, ip6 = relu. */
static ex_status fl_run(const suite *s, ex_buffer *buf, const fl_case *c)
{
    bool dense = c->op == EX_OP_CONV2D || c->op == EX_OP_CONV2D_BWD_DATA;
    ex_tdesc x = fl_desc(buf, 0, 0), dy = fl_desc(buf, FL_PLANE, 0);
    ex_tdesc dx = fl_desc(buf, 2 * FL_PLANE, 0), y = fl_desc(buf, 3 * FL_PLANE, 0);
    ex_tdesc w = dense ? fl_desc(buf, FL_WD, 3) : fl_desc(buf, FL_W, 1);
    ex_tdesc dw = fl_desc(buf, FL_DW, 1);
    ex_node_exec n = {
        .op = c->op, .nsrc = c->nsrc, .ip = {1, 1, 1, 1, 1, 1, c->relu}, .tag = {-1, -1, -1}};
    /* sources in the roles of each pass, x always third (the data gradient's mask) */
    bool fwd = c->op == EX_OP_DWCONV2D || c->op == EX_OP_CONV2D;
    bool filter = c->op == EX_OP_DWCONV2D_BWD_FILTER;
    ex_tdesc src[3] = {fwd || filter ? x : dy, filter ? dy : w, x};
    n.dst = fwd ? y : filter ? dw : dx;
    n.src = src;
    return fl_compute(s, &n);
}

void conv_flag_errors(void **state)
{
    suite *s = *state;
    const ex_backend_iface *f = ex__backend_iface_of(s->be);
    void *im = ex__backend_impl_of(s->be);
    ex_buffer *buf = fl_buffer(s);
    /* the first four and the last are well formed: the others fail for their flag and
     * sources alone, and leave the backend able to run the next node */
    static const fl_case cases[] = {
        {EX_OP_DWCONV2D, 1, 2, EX_OK},
        {EX_OP_DWCONV2D_BWD_DATA, 1, 3, EX_OK},
        {EX_OP_DWCONV2D_BWD_FILTER, 1, 2, EX_OK},
        {EX_OP_DWCONV2D_BWD_DATA, 0, 2, EX_OK},
        {EX_OP_DWCONV2D, 2, 2, EX_ERR_ARG},
        {EX_OP_DWCONV2D, -1, 2, EX_ERR_ARG},
        {EX_OP_DWCONV2D, 1, 3, EX_ERR_ARG},
        {EX_OP_DWCONV2D_BWD_DATA, 1, 2, EX_ERR_ARG},
        {EX_OP_DWCONV2D_BWD_DATA, 0, 3, EX_ERR_ARG},
        {EX_OP_DWCONV2D_BWD_DATA, 2, 3, EX_ERR_ARG},
        {EX_OP_DWCONV2D_BWD_FILTER, 1, 3, EX_ERR_ARG},
        {EX_OP_CONV2D, 1, 2, EX_ERR_ARG},
        {EX_OP_CONV2D_BWD_DATA, 1, 3, EX_ERR_ARG},
        {EX_OP_DWCONV2D_BWD_DATA, 1, 3, EX_OK},
    };
    int failed = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const fl_case *c = &cases[i];
        ex_status st = fl_run(s, buf, c);
        const char *msg = f->error(im);
        bool named = c->want == EX_OK || (msg && strstr(msg, "ip6"));
        if (st != c->want || !named) {
            print_error("FAIL [%s] %s with ip6 %d and %d sources: %s (%s), expected %s with a "
                        "message naming ip6\n",
                        s->backend_name, ex_op_name(c->op), c->relu, c->nsrc, ex_status_str(st),
                        msg ? msg : "no message", ex_status_str(c->want));
            failed++;
        }
    }
    f->buffer_free(im, buf);
    if (failed)
        fail_msg("%d malformed or valid flag nodes were handled wrongly on %s", failed,
                 s->backend_name);
}

/* ---- malformed GEMM-family nodes given to the backend directly ---- */

typedef struct gmx_case {
    ex_op op;
    int nsrc;
    int64_t a[4], b[4], y[4]; /* shapes; rank: the dims up to the first 0 */
    int64_t nbias;            /* LINEAR's third source, or the third source given to PWCONV */
    bool y_bcast;             /* dst's first stride 0 */
    ex_status want;
} gmx_case;

/* A dense f32 tensor of fl_buffer's floats at float offset at, shaped ne (rank: the dims
 * up to the first 0). */
static ex_tdesc gmx_desc(ex_buffer *buf, int64_t at, const int64_t ne[4])
{
    int nd = 0;
    while (nd < 4 && ne[nd] > 0)
        nd++;
    return dense_desc(buf, (uint64_t)at * 4, EX_F32, nd, ne);
}

static ex_status gmx_run(const suite *s, ex_buffer *buf, const gmx_case *c)
{
    int64_t bias[4] = {c->nbias};
    ex_tdesc src[3] = {gmx_desc(buf, 0, c->a), gmx_desc(buf, 128, c->b), gmx_desc(buf, 320, bias)};
    ex_node_exec n = {.op = c->op, .nsrc = c->nsrc, .src = src, .tag = {-1, -1, -1}};
    n.dst = gmx_desc(buf, 352, c->y);
    if (c->y_bcast)
        n.dst.st[0] = 0;
    return fl_compute(s, &n);
}

void gemm_node_errors(void **state)
{
    suite *s = *state;
    const ex_backend_iface *f = ex__backend_iface_of(s->be);
    void *im = ex__backend_impl_of(s->be);
    ex_buffer *buf = fl_buffer(s);
    /* well formed: the first of each op and the last; every backend refuses the others
     * alike (core/tdesc.h checks the family for all of them) */
    static const gmx_case cases[] = {
        {EX_OP_MATMUL, 2, {4, 5}, {5, 6}, {4, 6}, 0, false, EX_OK},
        {EX_OP_MATMUL, 2, {4, 5}, {6, 6}, {4, 6}, 0, false, EX_ERR_SHAPE},
        {EX_OP_MATMUL, 2, {4, 5}, {5, 6}, {4, 7}, 0, false, EX_ERR_SHAPE},
        {EX_OP_MATMUL, 2, {4, 5}, {5, 6}, {4, 6}, 0, true, EX_ERR_ARG},
        {EX_OP_MATMUL, 2, {1, 4, 5}, {5, 6}, {4, 6}, 0, false, EX_ERR_ARG},
        {EX_OP_LINEAR, 3, {4, 5}, {6, 5}, {4, 6}, 6, false, EX_OK},
        {EX_OP_LINEAR, 3, {4, 5}, {6, 5}, {4, 6}, 5, false, EX_ERR_SHAPE},
        {EX_OP_LINEAR, 2, {4, 5}, {6, 4}, {4, 6}, 0, false, EX_ERR_SHAPE},
        {EX_OP_PWCONV, 2, {2, 3, 4, 4}, {5, 3}, {2, 5, 4, 4}, 0, false, EX_OK},
        {EX_OP_PWCONV, 2, {2, 3, 4, 4}, {5, 2}, {2, 5, 4, 4}, 0, false, EX_ERR_SHAPE},
        {EX_OP_PWCONV, 2, {2, 3, 4, 4}, {5, 3}, {2, 5, 4, 3}, 0, false, EX_ERR_SHAPE},
        {EX_OP_PWCONV, 3, {2, 3, 4, 4}, {5, 3}, {2, 5, 4, 4}, 5, false, EX_ERR_ARG},
        {EX_OP_PWCONV_BWD_FILTER, 2, {2, 3, 4, 4}, {2, 5, 4, 4}, {5, 3}, 0, false, EX_OK},
        {EX_OP_PWCONV_BWD_FILTER, 2, {2, 3, 4, 4}, {2, 5, 4, 4}, {5, 4}, 0, false, EX_ERR_SHAPE},
        {EX_OP_MATMUL, 2, {4, 5}, {5, 6}, {4, 6}, 0, false, EX_OK},
    };
    int failed = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const gmx_case *c = &cases[i];
        ex_status st = gmx_run(s, buf, c);
        const char *msg = f->error(im);
        if (st != c->want || (st != EX_OK && (!msg || !*msg))) {
            print_error("FAIL [%s] case %zu, %s: %s (%s), expected %s\n", s->backend_name, i,
                        ex_op_name(c->op), ex_status_str(st), msg ? msg : "no message",
                        ex_status_str(c->want));
            failed++;
        }
    }
    f->buffer_free(im, buf);
    if (failed)
        fail_msg("%d malformed or valid GEMM-family nodes were handled wrongly on %s", failed,
                 s->backend_name);
}

/* ---- malformed x-hat flags (ip1) of batch norm's backward, given to the backend directly ---- */

static ex_tdesc bf_desc(ex_buffer *buf, int64_t at, bool per_channel)
{
    ex_tdesc t = {
        .dtype = EX_F32, .ndim = per_channel ? 2 : 4, .buf = buf, .offset = (uint64_t)at * 4};
    int64_t ne[4] = {2, 3, 8, 8}, st = 1;
    for (int d = t.ndim - 1; d >= 0; d--) {
        t.ne[d] = ne[d];
        t.st[d] = st;
        st *= ne[d];
    }
    return t;
}

/* BN_BWD_REDUCE (x, stats, dy) then BN_BWD_DATA (x, stats, dy, red) with ip1 = xhat, both
 * nodes refused alone for a bad flag; regions of fl_desc's layout: x, dy, dx, stats at FL_W,
 * red at FL_DW. */
static ex_status bf_run(const suite *s, ex_buffer *buf, ex_op op, int xhat)
{
    ex_tdesc src[4] = {bf_desc(buf, 0, false), bf_desc(buf, FL_W, true),
                       bf_desc(buf, FL_PLANE, false), bf_desc(buf, FL_DW, true)};
    bool reduce = op == EX_OP_BN_BWD_REDUCE;
    ex_node_exec n = {.op = op, .nsrc = reduce ? 3 : 4, .ip = {1, xhat}, .tag = {-1, -1, -1}};
    n.src = src;
    n.dst = reduce ? bf_desc(buf, FL_DW, true) : bf_desc(buf, 2 * FL_PLANE, false);
    return fl_compute(s, &n);
}

void bn_flag_errors(void **state)
{
    suite *s = *state;
    const ex_backend_iface *f = ex__backend_iface_of(s->be);
    void *im = ex__backend_impl_of(s->be);
    ex_buffer *buf = fl_buffer(s);
    static const int flags[] = {0, 1, 2, -1, 1};
    int failed = 0;
    for (int op = EX_OP_BN_BWD_REDUCE; op <= EX_OP_BN_BWD_DATA; op++)
        for (size_t i = 0; i < sizeof flags / sizeof *flags; i++) {
            ex_status want = flags[i] == 0 || flags[i] == 1 ? EX_OK : EX_ERR_ARG;
            ex_status st = bf_run(s, buf, (ex_op)op, flags[i]);
            const char *msg = f->error(im);
            if (st != want || (want != EX_OK && !(msg && strstr(msg, "ip1")))) {
                print_error("FAIL [%s] %s with ip1 %d: %s (%s), expected %s\n", s->backend_name,
                            ex_op_name((ex_op)op), flags[i], ex_status_str(st),
                            msg ? msg : "no message", ex_status_str(want));
                failed++;
            }
        }
    f->buffer_free(im, buf);
    if (failed)
        fail_msg("%d batch-norm backward nodes were handled wrongly on %s", failed,
                 s->backend_name);
}

/* A synchronized batch norm's node forms given to the backend directly, well formed and
 * not: BN_STATS (ip0, ip1, ip2) on x of fl_desc's layout (the moments, source 0 of the
 * finish, at FL_W), running statistics [3] at FL_WD and FL_WD + 8, dst at FL_DW; and
 * BN_BWD_DATA (ip2) as bf_run lays it out. Each refused node names the parameter. */
typedef struct sf_case {
    ex_op op;
    int ip[3];
    ex_status want;
    const char *what;
} sf_case;

static ex_tdesc sf_vec(ex_buffer *buf, int64_t at, int64_t c)
{
    return (ex_tdesc){
        .dtype = EX_F32, .ndim = 1, .ne = {c}, .st = {1}, .buf = buf, .offset = (uint64_t)at * 4};
}

static ex_status sf_run(const suite *s, ex_buffer *buf, const sf_case *c)
{
    ex_node_exec n = {.op = c->op,
                      .ip = {c->ip[0], c->ip[1], c->ip[2]},
                      .fp = {1e-5f, 0.1f},
                      .tag = {-1, -1, -1}};
    ex_tdesc src[4];
    if (c->op == EX_OP_BN_STATS) {
        src[0] = c->ip[1] == 2 ? bf_desc(buf, FL_W, true) : bf_desc(buf, 0, false);
        src[1] = sf_vec(buf, FL_WD, 3);
        src[2] = sf_vec(buf, FL_WD + 8, 3);
        n.nsrc = 3;
        n.dst = bf_desc(buf, FL_DW, true);
    } else {
        src[0] = bf_desc(buf, 0, false);
        src[1] = bf_desc(buf, FL_W, true);
        src[2] = bf_desc(buf, FL_PLANE, false);
        src[3] = bf_desc(buf, FL_DW, true);
        n.nsrc = 4;
        n.dst = bf_desc(buf, 2 * FL_PLANE, false);
    }
    n.src = src;
    return fl_compute(s, &n);
}

/* The builders of the forms refuse what their nodes may not hold (sticky errors). */
static int sf_builder_errors(void)
{
    int failed = 0;
    for (int k = 0; k < 6; k++) {
        ex_ctx *ctx = ex_ctx_new();
        assert_non_null(ctx);
        int64_t xne[4] = {2, 3, 4, 4}, cne[1] = {3}, mne[2] = {2, 3}, bad[2] = {3, 2};
        ex_tensor *x = ex_input(ctx, EX_F32, 4, xne, "x");
        ex_tensor *rm = ex_state(ctx, EX_F32, 1, cne, "rm"),
                  *rv = ex_state(ctx, EX_F32, 1, cne, "rv");
        ex_tensor *mo = ex_input(ctx, EX_F32, 2, mne, "moments");
        static const char *const what[] = {"count", "moments", "ex_state",
                                           "ranks", "x",       "momentum"};
        switch (k) {
        case 0: ex__bn_finish(ctx, mo, rm, rv, 1, 1e-5f, 0.1f); break;
        case 1:
            ex__bn_finish(ctx, ex_input(ctx, EX_F32, 2, bad, "m"), rm, rv, 8, 1e-5f, 0.1f);
            break;
        case 2: ex__bn_moments(ctx, x, ex_input(ctx, EX_F32, 1, cne, "m"), rv); break;
        case 3: ex__bn_bwd_data(ctx, x, mo, x, mo, NULL, false, 0); break;
        case 4: ex__bn_moments(ctx, mo, rm, rv); break;
        default: ex__bn_finish(ctx, mo, rm, rv, 8, 1e-5f, 2.0f); break;
        }
        if (ex_ctx_status(ctx) == EX_OK || !strstr(ex_ctx_error(ctx), what[k])) {
            print_error("FAIL synchronized batch-norm builder case %d: %s (%s), expected an "
                        "error naming %s\n",
                        k, ex_status_str(ex_ctx_status(ctx)), ex_ctx_error(ctx), what[k]);
            failed++;
        }
        ex_ctx_free(ctx);
    }
    return failed;
}

void bn_sync_flag_errors(void **state)
{
    suite *s = *state;
    const ex_backend_iface *f = ex__backend_iface_of(s->be);
    void *im = ex__backend_impl_of(s->be);
    ex_buffer *buf = fl_buffer(s);
    static const sf_case cases[] = {
        {EX_OP_BN_STATS, {1, 0, 0}, EX_OK, NULL},
        {EX_OP_BN_STATS, {1, 1, 0}, EX_OK, NULL},
        {EX_OP_BN_STATS, {1, 2, 384}, EX_OK, NULL},
        {EX_OP_BN_STATS, {1, 3, 0}, EX_ERR_ARG, "ip1"},
        {EX_OP_BN_STATS, {1, -1, 0}, EX_ERR_ARG, "ip1"},
        {EX_OP_BN_STATS, {0, 1, 0}, EX_ERR_ARG, "ip0"},
        {EX_OP_BN_STATS, {0, 2, 384}, EX_ERR_ARG, "ip0"},
        {EX_OP_BN_STATS, {2, 1, 0}, EX_ERR_ARG, "ip0"},
        {EX_OP_BN_STATS, {1, 2, 1}, EX_ERR_ARG, "ip2"},
        {EX_OP_BN_STATS, {1, 2, 0}, EX_ERR_ARG, "ip2"},
        {EX_OP_BN_STATS, {1, 0, 0}, EX_OK, NULL},
        {EX_OP_BN_BWD_DATA, {1, 0, 0}, EX_OK, NULL},
        {EX_OP_BN_BWD_DATA, {1, 0, 1}, EX_OK, NULL},
        {EX_OP_BN_BWD_DATA, {1, 0, 2}, EX_OK, NULL},
        {EX_OP_BN_BWD_DATA, {1, 0, -1}, EX_ERR_ARG, "ip2"},
        {EX_OP_BN_BWD_DATA, {1, 0, 0}, EX_OK, NULL},
    };
    int failed = sf_builder_errors();
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const sf_case *c = &cases[i];
        ex_status want = c->want;
        const char *what = c->what;
        ex_status st = sf_run(s, buf, c);
        const char *msg = f->error(im);
        if (st != want || (want != EX_OK && !(msg && strstr(msg, what)))) {
            print_error("FAIL [%s] %s with ip0 %d, ip1 %d, ip2 %d: %s (%s), expected %s (%s)\n",
                        s->backend_name, ex_op_name(c->op), c->ip[0], c->ip[1], c->ip[2],
                        ex_status_str(st), msg ? msg : "no message", ex_status_str(want),
                        what ? what : "");
            failed++;
        }
    }
    f->buffer_free(im, buf);
    if (failed)
        fail_msg("%d synchronized batch-norm nodes were handled wrongly on %s", failed,
                 s->backend_name);
}

/* ---- GEMM-shaped ops ---- */

static ex_tensor *b_pwconv(env *e, ex_tensor *const *x)
{
    return ex_pwconv(e->ctx, x[0], x[1]);
}
static void r_pwconv(const env *e, double *y)
{
    ref_pwconv(e->od[0], e->one[0], e->od[1], e->one[1][0], y);
}

/* pwconv_bn: roots x, w, running mean, running var [, gamma, beta]; ip6 = ReLU on x,
 * fp0 = eps */
static ex_tensor *b_pwconv_bn(env *e, ex_tensor *const *x)
{
    bool affine = e->c->nr > 4;
    return ex_pwconv_bn(e->ctx, x[0], x[1], x[2], x[3], affine ? x[4] : NULL, affine ? x[5] : NULL,
                        (float)e->c->fp[0], e->c->ip[6] != 0);
}
static void r_pwconv_bn(const env *e, double *y)
{
    const int64_t *xne = e->one[0], co = e->one[1][0], hw = xne[2] * xne[3];
    size_t nx = (size_t)(xne[0] * xne[1] * hw);
    double *x = xcalloc(nx, sizeof *x);
    for (size_t i = 0; i < nx; i++)
        x[i] = e->c->ip[6] && e->od[0][i] < 0 ? 0.0 : e->od[0][i];
    ref_pwconv(x, xne, e->od[1], co, y);
    double eps = (double)(float)e->c->fp[0];
    for (int64_t i = 0; i < xne[0] * co * hw; i++) {
        int64_t c = i / hw % co;
        double g = e->c->nr > 4 ? e->od[4][c] : 1.0, b = e->c->nr > 4 ? e->od[5][c] : 0.0;
        y[i] = (y[i] - e->od[2][c]) / sqrt(e->od[3][c] + eps) * g + b;
    }
    free(x);
}

static ex_tensor *b_matmul(env *e, ex_tensor *const *x)
{
    return ex_matmul(e->ctx, x[0], x[1]);
}
static void r_matmul(const env *e, double *y)
{
    ref_matmul(e->od[0], e->od[1], e->one[0][0], e->one[0][1], e->one[1][1], y);
}

static ex_tensor *b_linear(env *e, ex_tensor *const *x)
{
    return ex_linear(e->ctx, x[0], x[1], e->c->nr > 2 ? x[2] : NULL);
}
static void r_linear(const env *e, double *y)
{
    ref_linear(e->od[0], e->od[1], e->c->nr > 2 ? e->od[2] : NULL, e->one[0][0], e->one[0][1],
               e->one[1][0], y);
}

#define UNPAREN(...) __VA_ARGS__
/* x's and w's fields in parentheses; co output channels */
#define PWBN(nm, relu, nr, xspec, wspec, co)                                                       \
    {                                                                                              \
        CASE(nm, EX_OP_PWCONV_BN, b_pwconv_bn, r_pwconv_bn, nr),                                   \
            .r = {{IN("x"), UNPAREN xspec},                                                        \
                  {IN("w"), UNPAREN wspec},                                                        \
                  {STATE("running_mean"), SHAPE(co), UNI(-0.5, 0.5)},                              \
                  {STATE("running_var"), SHAPE(co), UNI(0.5, 2)},                                  \
                  {IN("gamma"), SHAPE(co), UNI(0.5, 1.5)},                                         \
                  {IN("beta"), SHAPE(co), UNI(-0.5, 0.5)}},                                        \
            .ip = {[6] = (relu)}, .fp = {1e-5}, .bwd = B_NONE                                      \
    }

static const tcase gemm_cases[] = {
    {CASE("pwconv", EX_OP_PWCONV, b_pwconv, r_pwconv, 2),
     .r = {{GIN("x"), SHAPE(3, 5, 7, 9), UNI(-1, 1)}, {PAR("w"), SHAPE(4, 5), UNI(-1, 1)}},
     .bwd = B_FD},
    {CASE("pwconv of a channel slice, transposed w", EX_OP_PWCONV, b_pwconv, r_pwconv, 2),
     .r = {{GIN("x"), SHAPE(3, 8, 7, 9), UNI(-1, 1), SLICE(1, 1, 5)},
           {PAR("w"), SHAPE(5, 4), UNI(-1, 1), TRANS(0, 1)}},
     .bwd = B_FD},
    {CASE("pwconv, 17 to 20 channels (partial channel groups)", EX_OP_PWCONV, b_pwconv, r_pwconv,
          2),
     .r = {{GIN("x"), SHAPE(2, 17, 5, 6), UNI(-1, 1)}, {PAR("w"), SHAPE(20, 17), UNI(-1, 1)}},
     .bwd = B_FD},
    {CASE("pwconv, 5 to 300 channels (past the small-channel kernels)", EX_OP_PWCONV, b_pwconv,
          r_pwconv, 2),
     .r = {{GIN("x"), SHAPE(2, 5, 3, 4), UNI(-1, 1)}, {PAR("w"), SHAPE(300, 5), UNI(-1, 1)}},
     .bwd = B_FD},
    /* the Vulkan shaders' paths: 16 or 32 output channels per workgroup, input channels
     * staged in chunks (64 or 128), filter-gradient tiles of 16 or 32 with one or many
     * ranges of positions (ranges crossing samples), strided and transposed views */
    {CASE("pwconv 48 -> 40, one range", EX_OP_PWCONV, b_pwconv, r_pwconv, 2),
     .r = {{GIN("x"), SHAPE(3, 48, 5, 7), UNI(-1, 1)}, {PAR("w"), SHAPE(40, 48), UNI(-1, 1)}},
     .bwd = B_FD},
    {CASE("pwconv 150 -> 20 (input channels in chunks)", EX_OP_PWCONV, b_pwconv, r_pwconv, 2),
     .r = {{GIN("x"), SHAPE(2, 150, 6, 5), UNI(-1, 1)}, {PAR("w"), SHAPE(20, 150), UNI(-1, 1)}},
     .bwd = B_FD},
    {CASE("pwconv 300 -> 12 (input channels in chunks)", EX_OP_PWCONV, b_pwconv, r_pwconv, 2),
     .r = {{GIN("x"), SHAPE(2, 300, 3, 5), UNI(-1, 1)}, {PAR("w"), SHAPE(12, 300), UNI(-1, 1)}},
     .bwd = B_FD},
    {CASE("pwconv 12 -> 10, ranges across samples", EX_OP_PWCONV, b_pwconv, r_pwconv, 2),
     .r = {{GIN("x"), SHAPE(5, 12, 7, 9), UNI(-1, 1)}, {PAR("w"), SHAPE(10, 12), UNI(-1, 1)}},
     .bwd = B_FD},
    {CASE("pwconv 40 -> 12, 8x8", EX_OP_PWCONV, b_pwconv, r_pwconv, 2),
     .r = {{GIN("x"), SHAPE(3, 40, 8, 8), UNI(-1, 1)}, {PAR("w"), SHAPE(12, 40), UNI(-1, 1)}},
     .bwd = B_FD},
    {CASE("pwconv 24 -> 18 of a transposed view", EX_OP_PWCONV, b_pwconv, r_pwconv, 2),
     .r = {{GIN("x"), SHAPE(4, 24, 9, 10), UNI(-1, 1), TRANS(2, 3)},
           {PAR("w"), SHAPE(18, 24), UNI(-1, 1)}},
     .bwd = B_FD},
    {CASE("pwconv 20 -> 17 of a channel slice", EX_OP_PWCONV, b_pwconv, r_pwconv, 2),
     .r = {{GIN("x"), SHAPE(3, 29, 11, 6), UNI(-1, 1), SLICE(1, 6, 20)},
           {PAR("w"), SHAPE(17, 20), UNI(-1, 1)}},
     .bwd = B_FD},
    /* DARTS' planes and channels (C = 16, 32x32 input) at batch 8: the cells' 1x1
     * convolutions and a preprocessing one (4C -> C); many ranges, ranges of several stages */
    {CASE("pwconv 16 -> 16, 8x16x32x32", EX_OP_PWCONV, b_pwconv, r_pwconv, 2),
     .r = {{GIN("x"), SHAPE(8, 16, 32, 32), UNI(-1, 1)}, {PAR("w"), SHAPE(16, 16), UNI(-1, 1)}},
     .bwd = B_FD},
    {CASE("pwconv 32 -> 32, 8x32x16x16", EX_OP_PWCONV, b_pwconv, r_pwconv, 2),
     .r = {{GIN("x"), SHAPE(8, 32, 16, 16), UNI(-1, 1)}, {PAR("w"), SHAPE(32, 32), UNI(-1, 1)}},
     .bwd = B_FD},
    {CASE("pwconv 64 -> 64, 8x64x8x8", EX_OP_PWCONV, b_pwconv, r_pwconv, 2),
     .r = {{GIN("x"), SHAPE(8, 64, 8, 8), UNI(-1, 1)}, {PAR("w"), SHAPE(64, 64), UNI(-1, 1)}},
     .bwd = B_FD},
    {CASE("pwconv 64 -> 16, 8x64x32x32", EX_OP_PWCONV, b_pwconv, r_pwconv, 2),
     .r = {{GIN("x"), SHAPE(8, 64, 32, 32), UNI(-1, 1)}, {PAR("w"), SHAPE(16, 64), UNI(-1, 1)}},
     .bwd = B_FD},
    /* the fused inference form; rows of 6 and pixel blocks of 64 in the CPU's AVX-512
     * kernel, so 17 channels and 30, 49 and 784 pixels leave tails */
    PWBN("pwconv_bn affine", 0, 6, (SHAPE(3, 5, 7, 9), UNI(-1, 1)), (SHAPE(4, 5), UNI(-1, 1)), 4),
    PWBN("pwconv_bn with ReLU, no affine", 1, 4, (SHAPE(3, 5, 7, 9), UNI(-1, 1)),
         (SHAPE(4, 5), UNI(-1, 1)), 4),
    PWBN("pwconv_bn with ReLU of a channel slice, transposed w", 1, 6,
         (SHAPE(3, 8, 7, 9), UNI(-1, 1), SLICE(1, 1, 5)), (SHAPE(5, 4), UNI(-1, 1), TRANS(0, 1)),
         4),
    PWBN("pwconv_bn 20 -> 17 of a transposed view", 0, 6,
         (SHAPE(2, 20, 6, 5), UNI(-1, 1), TRANS(2, 3)), (SHAPE(17, 20), UNI(-1, 1)), 17),
    PWBN("pwconv_bn with ReLU 36 -> 36, 2x36x28x28", 1, 6, (SHAPE(2, 36, 28, 28), UNI(-1, 1)),
         (SHAPE(36, 36), UNI(-1, 1)), 36),
    PWBN("pwconv_bn 144 -> 72, 3x144x7x7", 0, 6, (SHAPE(3, 144, 7, 7), UNI(-1, 1)),
         (SHAPE(72, 144), UNI(-1, 1)), 72),
    /* the ReLU on a copy of x where a GPU's fused kernel does not apply: many input
     * channels, a view whose planes do not fold */
    PWBN("pwconv_bn with ReLU 300 -> 20", 1, 6, (SHAPE(2, 300, 3, 5), UNI(-1, 1)),
         (SHAPE(20, 300), UNI(-1, 1)), 20),
    PWBN("pwconv_bn with ReLU of a transposed view", 1, 4,
         (SHAPE(3, 6, 9, 10), UNI(-1, 1), TRANS(2, 3)), (SHAPE(5, 6), UNI(-1, 1)), 5),
    {CASE("matmul", EX_OP_MATMUL, b_matmul, r_matmul, 2),
     .r = {{GIN("a"), SHAPE(13, 17), UNI(-1, 1)}, {GIN("b"), SHAPE(17, 11), UNI(-1, 1)}},
     .bwd = B_FD},
    {CASE("matmul, a transposed", EX_OP_MATMUL, b_matmul, r_matmul, 2),
     .r = {{GIN("a"), SHAPE(17, 13), UNI(-1, 1), TRANS(0, 1)},
           {GIN("b"), SHAPE(17, 11), UNI(-1, 1)}},
     .bwd = B_FD},
    {CASE("matmul, b transposed", EX_OP_MATMUL, b_matmul, r_matmul, 2),
     .r = {{GIN("a"), SHAPE(13, 17), UNI(-1, 1)},
           {GIN("b"), SHAPE(11, 17), UNI(-1, 1), TRANS(0, 1)}},
     .bwd = B_FD},
    {CASE("matmul, both transposed", EX_OP_MATMUL, b_matmul, r_matmul, 2),
     .r = {{GIN("a"), SHAPE(17, 13), UNI(-1, 1), TRANS(0, 1)},
           {GIN("b"), SHAPE(11, 17), UNI(-1, 1), TRANS(0, 1)}},
     .bwd = B_FD},
    {CASE("matmul of a column slice", EX_OP_MATMUL, b_matmul, r_matmul, 2),
     .r = {{GIN("a"), SHAPE(13, 23), UNI(-1, 1), SLICE(1, 4, 17)},
           {GIN("b"), SHAPE(17, 11), UNI(-1, 1)}},
     .bwd = B_FD},
    {CASE("linear with bias", EX_OP_LINEAR, b_linear, r_linear, 3),
     .r = {{GIN("x"), SHAPE(9, 17), UNI(-1, 1)},
           {PAR("w"), SHAPE(11, 17), UNI(-1, 1)},
           {PAR("b"), SHAPE(11), UNI(-1, 1)}},
     .bwd = B_FD},
    {CASE("linear without bias, x transposed", EX_OP_LINEAR, b_linear, r_linear, 2),
     .r = {{GIN("x"), SHAPE(17, 9), UNI(-1, 1), TRANS(0, 1)},
           {PAR("w"), SHAPE(11, 17), UNI(-1, 1)}},
     .bwd = B_FD},
};

void family_gemm(void **state)
{
    run_table(*state, gemm_cases, sizeof gemm_cases / sizeof *gemm_cases);
}

/* ---- pooling: square window ip0, stride ip1, padding ip0 / 2 ---- */

static ex_pool_params pool_params(const env *e)
{
    int k = e->c->ip[0], s = e->c->ip[1];
    return (ex_pool_params){{k, k}, {s, s}, {k / 2, k / 2}};
}

static ref_pool ref_pool_params(const env *e)
{
    int k = e->c->ip[0], s = e->c->ip[1];
    return (ref_pool){{k, k}, {s, s}, {k / 2, k / 2}};
}

static ex_tensor *b_avg_pool(env *e, ex_tensor *const *x)
{
    ex_pool_params p = pool_params(e);
    return ex_avg_pool(e->ctx, x[0], &p);
}
static void r_avg_pool(const env *e, double *y)
{
    ref_pool p = ref_pool_params(e);
    ref_avg_pool(e->od[0], e->one[0], &p, y);
}

static ex_tensor *b_max_pool(env *e, ex_tensor *const *x)
{
    ex_pool_params p = pool_params(e);
    return ex_max_pool(e->ctx, x[0], &p);
}
static void r_max_pool(const env *e, double *y)
{
    ref_pool p = ref_pool_params(e);
    ref_max_pool(e->od[0], e->one[0], &p, y);
}

static ex_tensor *b_gap(env *e, ex_tensor *const *x)
{
    return ex_global_avg_pool(e->ctx, x[0]);
}
static void r_gap(const env *e, double *y)
{
    ref_global_avg_pool(e->od[0], e->one[0], y);
}

/* Values on a grid of 0.25 in [-1, 1]: ties in most windows. */
static void i_quantize(env *e)
{
    for (int64_t i = 0; i < e->rn[0]; i++)
        e->rd[0][i] = round(e->rd[0][i] * 4) / 4;
}

/* First (row-major) maximum of window (oh, ow) of plane x [h, w], as an index. */
static int64_t first_max(const double *x, int64_t h, int64_t w, const ref_pool *p, int64_t oh,
                         int64_t ow)
{
    int64_t best = -1;
    for (int i = 0; i < p->kernel[0]; i++)
        for (int j = 0; j < p->kernel[1]; j++) {
            int64_t ih = oh * p->stride[0] - p->pad[0] + i, iw = ow * p->stride[1] - p->pad[1] + j;
            if (ih >= 0 && ih < h && iw >= 0 && iw < w && (best < 0 || x[ih * w + iw] > x[best]))
                best = ih * w + iw;
        }
    return best;
}

/* max_pool's gradient at ties: each r goes to the first maximum of its window only. */
static void a_max_pool_ties(env *e)
{
    ref_pool p = ref_pool_params(e);
    int64_t h = e->one[0][2], w = e->one[0][3], ho = e->yne[2], wo = e->yne[3];
    double *want = xcalloc((size_t)e->on[0], sizeof *want);
    for (int64_t c = 0; c < e->one[0][0] * e->one[0][1]; c++)
        for (int64_t oh = 0; oh < ho; oh++)
            for (int64_t ow = 0; ow < wo; ow++)
                want[c * h * w + first_max(e->od[0] + c * h * w, h, w, &p, oh, ow)] +=
                    e->rv[(c * ho + oh) * wo + ow];
    check_nmse(e, "gradient at ties", e->gv[0], want, e->on[0],
               ex_op_tolerance(EX_OP_MAX_POOL_BWD));
    free(want);
}

#define XP SHAPE(2, 3, 11, 13)
#define AVG(k, s)                                                                                  \
    {                                                                                              \
        CASE("avg_pool " #k "x" #k " stride " #s, EX_OP_AVG_POOL, b_avg_pool, r_avg_pool, 1),      \
            .r = {{GIN("x"), XP, UNI(-1, 1)}}, .ip = {k, s}, .bwd = B_FD                           \
    }
/* max: no ties within the finite-difference reach (grid spacing 1e-3, step 1e-5) */
#define MAXP(k, s)                                                                                 \
    {                                                                                              \
        CASE("max_pool " #k "x" #k " stride " #s, EX_OP_MAX_POOL, b_max_pool, r_max_pool, 1),      \
            .r = {{GIN("x"), XP, DISTINCT(1e-3)}}, .ip = {k, s}, .bwd = B_FD, .step = 1e-5         \
    }

static const tcase pool_cases[] = {
    AVG(3, 1),
    AVG(3, 2),
    AVG(5, 1),
    AVG(5, 2),
    AVG(7, 1),
    AVG(7, 2),
    {CASE("avg_pool 3x3 stride 2 of a channel slice", EX_OP_AVG_POOL, b_avg_pool, r_avg_pool, 1),
     .r = {{GIN("x"), SHAPE(3, 7, 9, 12), UNI(-1, 1), SLICE(1, 2, 4)}}, .ip = {3, 2}, .bwd = B_FD},
    MAXP(3, 1),
    MAXP(3, 2),
    MAXP(5, 1),
    MAXP(5, 2),
    MAXP(7, 1),
    MAXP(7, 2),
    {CASE("max_pool 3x3 stride 1 with ties", EX_OP_MAX_POOL, b_max_pool, r_max_pool, 1),
     .r = {{GIN("x"), XP, UNI(-1, 1)}}, .ip = {3, 1}, .bwd = B_HOOK, .init = i_quantize,
     .after = a_max_pool_ties},
    {CASE("max_pool 5x5 stride 2 with ties", EX_OP_MAX_POOL, b_max_pool, r_max_pool, 1),
     .r = {{GIN("x"), XP, UNI(-1, 1)}}, .ip = {5, 2}, .bwd = B_HOOK, .init = i_quantize,
     .after = a_max_pool_ties},
    {CASE("max_pool 3x3 stride 1 of a transposed view", EX_OP_MAX_POOL, b_max_pool, r_max_pool, 1),
     .r = {{GIN("x"), SHAPE(2, 4, 13, 10), DISTINCT(1e-3), TRANS(2, 3)}}, .ip = {3, 1}, .bwd = B_FD,
     .step = 1e-5},
    /* the GPU backends' warp rows: a plane a warp (32 wide), then two (16 wide), with the
     * loads of several rows at once over heights that do not divide evenly */
    {CASE("avg_pool 3x3 stride 1 on 32x32 planes", EX_OP_AVG_POOL, b_avg_pool, r_avg_pool, 1),
     .r = {{GIN("x"), SHAPE(2, 3, 32, 32), UNI(-1, 1)}}, .ip = {3, 1}, .bwd = B_FD},
    {CASE("max_pool 3x3 stride 1 on 32x32 planes", EX_OP_MAX_POOL, b_max_pool, r_max_pool, 1),
     .r = {{GIN("x"), SHAPE(2, 3, 32, 32), DISTINCT(1e-3)}}, .ip = {3, 1}, .bwd = B_FD,
     .step = 1e-5},
    {CASE("max_pool 3x3 stride 1 on 19x32 planes with ties", EX_OP_MAX_POOL, b_max_pool, r_max_pool,
          1),
     .r = {{GIN("x"), SHAPE(2, 3, 19, 32), UNI(-1, 1)}}, .ip = {3, 1}, .bwd = B_HOOK,
     .init = i_quantize, .after = a_max_pool_ties},
    /* CUDA's column quads (backward): rows of 128, 16 and 4 (a lane a plane) */
    {CASE("max_pool 3x3 stride 1 on 7x128 planes with ties", EX_OP_MAX_POOL, b_max_pool, r_max_pool,
          1),
     .r = {{GIN("x"), SHAPE(2, 2, 7, 128), UNI(-1, 1)}}, .ip = {3, 1}, .bwd = B_HOOK,
     .init = i_quantize, .after = a_max_pool_ties},
    {CASE("max_pool 3x3 stride 1 on 16x16 planes", EX_OP_MAX_POOL, b_max_pool, r_max_pool, 1),
     .r = {{GIN("x"), SHAPE(3, 5, 16, 16), DISTINCT(1e-3)}}, .ip = {3, 1}, .bwd = B_FD,
     .step = 1e-5},
    {CASE("max_pool 3x3 stride 1 on 5x4 planes with ties", EX_OP_MAX_POOL, b_max_pool, r_max_pool,
          1),
     .r = {{GIN("x"), SHAPE(3, 11, 5, 4), UNI(-1, 1)}}, .ip = {3, 1}, .bwd = B_HOOK,
     .init = i_quantize, .after = a_max_pool_ties},
    {CASE("max_pool 3x3 stride 1 on 1x8 planes with ties", EX_OP_MAX_POOL, b_max_pool, r_max_pool,
          1),
     .r = {{GIN("x"), SHAPE(2, 3, 1, 8), UNI(-1, 1)}}, .ip = {3, 1}, .bwd = B_HOOK,
     .init = i_quantize, .after = a_max_pool_ties},
    {CASE("max_pool 5x5 stride 1 on 21x16 planes with ties", EX_OP_MAX_POOL, b_max_pool, r_max_pool,
          1),
     .r = {{GIN("x"), SHAPE(2, 3, 21, 16), UNI(-1, 1)}}, .ip = {5, 1}, .bwd = B_HOOK,
     .init = i_quantize, .after = a_max_pool_ties},
    /* Vulkan's column walk (PL_COLS, 3x3 stride 1): bands that the height does not divide
     * (19 rows above), 14x14 and 7x7 planes, planes of one element and of one column */
    {CASE("avg_pool 3x3 stride 1 on 14x14 planes", EX_OP_AVG_POOL, b_avg_pool, r_avg_pool, 1),
     .r = {{GIN("x"), SHAPE(4, 6, 14, 14), UNI(-1, 1)}}, .ip = {3, 1}, .bwd = B_FD},
    {CASE("max_pool 3x3 stride 1 on 7x7 planes", EX_OP_MAX_POOL, b_max_pool, r_max_pool, 1),
     .r = {{GIN("x"), SHAPE(3, 5, 7, 7), DISTINCT(1e-3)}}, .ip = {3, 1}, .bwd = B_FD, .step = 1e-5},
    {CASE("avg_pool 3x3 stride 1 on 1x1 planes", EX_OP_AVG_POOL, b_avg_pool, r_avg_pool, 1),
     .r = {{GIN("x"), SHAPE(3, 2, 1, 1), UNI(-1, 1)}}, .ip = {3, 1}, .bwd = B_FD},
    {CASE("avg_pool 3x3 stride 1 on 9x1 planes", EX_OP_AVG_POOL, b_avg_pool, r_avg_pool, 1),
     .r = {{GIN("x"), SHAPE(2, 3, 9, 1), UNI(-1, 1)}}, .ip = {3, 1}, .bwd = B_FD},
    {CASE("global_avg_pool", EX_OP_GLOBAL_AVG_POOL, b_gap, r_gap, 1),
     .r = {{GIN("x"), SHAPE(3, 5, 9, 11), UNI(-1, 1)}}, .bwd = B_FD},
    {CASE("global_avg_pool of a channel slice", EX_OP_GLOBAL_AVG_POOL, b_gap, r_gap, 1),
     .r = {{GIN("x"), SHAPE(2, 9, 7, 13), UNI(-1, 1), SLICE(1, 3, 5)}}, .bwd = B_FD},
};

void family_pool(void **state)
{
    run_table(*state, pool_cases, sizeof pool_cases / sizeof *pool_cases);
}

/* ---- batch norm: roots x, running mean, running var [, gamma, beta]; ip0 = train,
 * fp0 = eps, fp1 = momentum ---- */

static ex_tensor *b_bn(env *e, ex_tensor *const *x)
{
    bool affine = e->c->nr > 3;
    return ex_batch_norm(e->ctx, x[0], affine ? x[3] : NULL, affine ? x[4] : NULL, x[1], x[2],
                         e->c->ip[0] != 0, (float)e->c->fp[0], (float)e->c->fp[1]);
}

static void r_bn(const env *e, double *y)
{
    bool affine = e->c->nr > 3;
    int64_t c = e->one[0][1];
    double *mean = xcalloc((size_t)c, sizeof *mean), *var = xcalloc((size_t)c, sizeof *var);
    ref_batch_norm(e->od[0], e->one[0], affine ? e->od[3] : NULL, affine ? e->od[4] : NULL,
                   e->od[1], e->od[2], e->c->ip[0], (double)(float)e->c->fp[0], y, mean, var);
    free(mean);
    free(var);
}

/* The running statistics (roots 1 and 2) against their start moved towards mean and var
 * (biased, over m values) as the training form moves them. */
static void check_running(env *e, const double *mean, const double *var, int64_t m)
{
    int64_t c = e->one[0][1];
    double *got = xcalloc((size_t)c, sizeof *got);
    double *want[2] = {xcalloc((size_t)c, sizeof(double)), xcalloc((size_t)c, sizeof(double))};
    memcpy(want[0], e->od[1], (size_t)c * sizeof(double));
    memcpy(want[1], e->od[2], (size_t)c * sizeof(double));
    ref_bn_running_update(mean, var, c, m, (double)(float)e->c->fp[1], want[0], want[1]);
    for (int k = 0; k < 2; k++) {
        read_f(e, e->root[1 + k], got, c);
        check_nmse(e, k ? "running var" : "running mean", got, want[k], c,
                   ex_op_tolerance(EX_OP_BN_STATS));
    }
    free(got);
    free(want[0]);
    free(want[1]);
}

/* The running statistics after one run: updated with momentum and the unbiased variance
 * in training, untouched in eval. */
static void a_bn(env *e)
{
    int64_t c = e->one[0][1], m = e->one[0][0] * e->one[0][2] * e->one[0][3];
    double *mean = xcalloc((size_t)c, sizeof *mean), *var = xcalloc((size_t)c, sizeof *var);
    bool affine = e->c->nr > 3;
    if (e->c->ip[0]) {
        ref_batch_norm(e->od[0], e->one[0], affine ? e->od[3] : NULL, affine ? e->od[4] : NULL,
                       e->od[1], e->od[2], 1, (double)(float)e->c->fp[0], e->yr, mean, var);
        check_running(e, mean, var, m);
    } else {
        for (int k = 0; k < 2; k++) {
            read_f(e, e->root[1 + k], mean, c);
            if (memcmp(mean, e->od[1 + k], (size_t)c * sizeof(double)) != 0)
                case_fail(e, "eval mode changed the running statistics");
        }
    }
    free(mean);
    free(var);
}

#define RSTATS                                                                                     \
    {STATE("running_mean"), SHAPE(5), UNI(-0.5, 0.5)},                                             \
    {                                                                                              \
        STATE("running_var"), SHAPE(5), UNI(0.5, 2)                                                \
    }
#define AFFINE                                                                                     \
    {PAR("gamma"), SHAPE(5), UNI(0.5, 1.5)},                                                       \
    {                                                                                              \
        PAR("beta"), SHAPE(5), UNI(-0.5, 0.5)                                                      \
    }
/* x's fields in parentheses, then the affine operands if any */
#define BN(nm, train, nr, xspec, ...)                                                              \
    {                                                                                              \
        CASE(nm, EX_OP_BN_APPLY, b_bn, r_bn, nr),                                                  \
            .r = {{GIN("x"), UNPAREN xspec}, RSTATS, __VA_ARGS__}, .ip = {train},                  \
            .fp = {1e-5, 0.1}, .bwd = B_FD, .after = a_bn                                          \
    }
#define X3579 (SHAPE(3, 5, 7, 9), UNI(-1, 3))

static const tcase bn_cases[] = {
    BN("batch_norm train affine", 1, 5, X3579, AFFINE),
    BN("batch_norm train", 1, 3, X3579, {0}),
    BN("batch_norm eval affine", 0, 5, X3579, AFFINE),
    BN("batch_norm eval", 0, 3, X3579, {0}),
    BN("batch_norm train affine, M = 6", 1, 5, (SHAPE(6, 5, 1, 1), UNI(-1, 3)), AFFINE),
    BN("batch_norm train affine, channel slice", 1, 5,
       (SHAPE(3, 8, 7, 9), UNI(-1, 3), SLICE(1, 2, 5)), AFFINE),
    BN("batch_norm eval, transposed view", 0, 3, (SHAPE(2, 5, 11, 7), UNI(-1, 3), TRANS(2, 3)),
       {0}),
    /* M = 4608: more than one segment of a channel where a backend splits them (Vulkan:
     * 2048) */
    BN("batch_norm train affine, M = 4608", 1, 5, (SHAPE(2, 5, 48, 48), UNI(-1, 3)), AFFINE),
    BN("batch_norm train, transposed view", 1, 3, (SHAPE(3, 5, 11, 7), UNI(-1, 3), TRANS(2, 3)),
       {0}),
    /* more than 128 segments of a channel (Vulkan merges them 128 at a time) */
    {CASE("batch_norm train, M = 270336", EX_OP_BN_APPLY, b_bn, r_bn, 3),
     .r = {{GIN("x"), SHAPE(64, 1, 64, 66), UNI(-1, 3)},
           {STATE("running_mean"), SHAPE(1), UNI(-0.5, 0.5)},
           {STATE("running_var"), SHAPE(1), UNI(0.5, 2)}},
     .ip = {1}, .fp = {1e-5, 0.1}, .bwd = B_FD, .after = a_bn},
    /* DARTS' planes (batch 64, 32x32 and 8x8; the search's batch norms are not affine) */
    BN("batch_norm train, 64x5x32x32", 1, 3, (SHAPE(64, 5, 32, 32), UNI(-1, 3)), {0}),
    BN("batch_norm train, 64x5x8x8", 1, 3, (SHAPE(64, 5, 8, 8), UNI(-1, 3)), {0}),
    /* planes of 4m elements in rows that are not (14x14, 6x10): Vulkan's 4 neighbours of
     * a plane span two rows; a channel slice keeps its planes dense */
    BN("batch_norm train affine, 14x14 planes", 1, 5, (SHAPE(4, 5, 14, 14), UNI(-1, 3)), AFFINE),
    BN("batch_norm train, 6x10 planes of a channel slice", 1, 3,
       (SHAPE(3, 8, 6, 10), UNI(-1, 3), SLICE(1, 2, 5)), {0}),
    /* profiled: BN_STATS runs alone (CUDA: planes in memory order, clusters of samples, a
     * last cluster of fewer samples than blocks) */
    {CASE("batch_norm train, 11x5x16x16, profiled", EX_OP_BN_APPLY, b_bn, r_bn, 3),
     .r = {{GIN("x"), SHAPE(11, 5, 16, 16), UNI(-1, 3)}, RSTATS}, .ip = {1}, .fp = {1e-5, 0.1},
     .bwd = B_FD, .after = a_bn, .flags = F_PROFILE},
    {CASE("batch_norm train, 9x19x32x32, profiled", EX_OP_BN_APPLY, b_bn, r_bn, 3),
     .r = {{GIN("x"), SHAPE(9, 19, 32, 32), UNI(-1, 3)},
           {STATE("running_mean"), SHAPE(19), UNI(-0.5, 0.5)},
           {STATE("running_var"), SHAPE(19), UNI(0.5, 2)}},
     .ip = {1}, .fp = {1e-5, 0.1}, .bwd = B_FD, .after = a_bn, .flags = F_PROFILE},
    {CASE("batch_norm train affine, 3x5x7x9, profiled", EX_OP_BN_APPLY, b_bn, r_bn, 5),
     .r = {{GIN("x"), SHAPE(3, 5, 7, 9), UNI(-1, 3)}, RSTATS, AFFINE}, .ip = {1}, .fp = {1e-5, 0.1},
     .bwd = B_FD, .after = a_bn, .flags = F_PROFILE},
    /* Vulkan sums in one dispatch where a channel's ticket and the partials fit a zone
     * slot, in two otherwise: more channels than a slot has tickets (256) */
    {CASE("batch_norm train, 300 channels", EX_OP_BN_APPLY, b_bn, r_bn, 3),
     .r = {{GIN("x"), SHAPE(2, 300, 3, 3), UNI(-1, 3)},
           {STATE("running_mean"), SHAPE(300), UNI(-0.5, 0.5)},
           {STATE("running_var"), SHAPE(300), UNI(0.5, 2)}},
     .ip = {1}, .fp = {1e-5, 0.1}, .bwd = B_FD, .after = a_bn},
};

/* ---- synchronized (data-parallel) batch norm: the node forms (BN_STATS ip1 = 1 and 2,
 * BN_BWD_DATA ip2 = R) alone against their references, and assembled as the engine
 * assembles them over R ranks (slices of x along N, the all-reduces as sums of the ranks'
 * nodes) against batch norm over the whole batch. ---- */

/* The statistics' eps and momentum of a case, as the nodes hold them (f32). */
static double bn_eps(const env *e)
{
    return (double)(float)e->c->fp[0];
}

/* roots x, running mean, running var: the moments */
static ex_tensor *b_bn_moments(env *e, ex_tensor *const *x)
{
    return ex__bn_moments(e->ctx, x[0], x[1], x[2]);
}
static void r_bn_moments(const env *e, double *y)
{
    ref_bn_moments(e->od[0], e->one[0], y);
}

/* The running statistics (roots 1 and 2) as they were written. */
static void a_bn_untouched(env *e)
{
    int64_t c = e->on[1];
    for (int k = 1; k <= 2; k++) {
        double *got = xcalloc((size_t)c, sizeof *got);
        read_f(e, e->root[k], got, c);
        if (memcmp(got, e->od[k], (size_t)c * sizeof *got) != 0)
            case_fail(e, "the moments changed %s", e->c->r[k].name);
        free(got);
    }
}

/* roots moments [2, C] (the group's mean and biased variance), running mean, running var;
 * ip2 = the global count, ip3 = 1: one channel's variance below 0 (taken as 0) */
static ex_tensor *b_bn_finish(env *e, ex_tensor *const *x)
{
    return ex__bn_finish(e->ctx, x[0], x[1], x[2], e->c->ip[2], (float)e->c->fp[0],
                         (float)e->c->fp[1]);
}

/* Row 1 of the moments made a variance in [0.2, 2) (channel 0's -0.01 with ip3), through
 * the operand's view. */
static void i_bn_finish(env *e)
{
    int64_t c = e->one[0][1];
    gather_root(e, 0);
    for (int64_t k = 0; k < c; k++) {
        double v = rng_uniform(&e->rng, 0.2, 2);
        e->od[0][c + k] = (double)(float)(k == 0 && e->c->ip[3] ? -0.01 : v);
    }
    scatter_root(e, 0);
}

static void r_bn_finish(const env *e, double *y)
{
    int64_t c = e->one[0][1];
    double *var = xcalloc((size_t)c, sizeof *var);
    ref_bn_finish(e->od[0], c, bn_eps(e), y, var);
    free(var);
}

/* invstd (row 1 of the output) on its own, and the running statistics moved with the
 * finish's variance over the global count. */
static void a_bn_finish(env *e)
{
    int64_t c = e->one[0][1];
    double *var = xcalloc((size_t)c, sizeof *var),
           *stats = xcalloc((size_t)(2 * c), sizeof(double));
    ref_bn_finish(e->od[0], c, bn_eps(e), stats, var);
    /* invstd alone: next to a large mean, the forward NMSE would hide its error */
    check_nmse(e, "invstd", e->yv + c, stats + c, c, ex_op_tolerance(EX_OP_BN_STATS));
    check_running(e, stats, var, e->c->ip[2]);
    free(var);
    free(stats);
}

/* roots x (or x-hat), stats [2, C], dy, red [2, C] [, gamma]; ip1 = x-hat, ip2 = R */
static ex_tensor *b_bn_bwd_data_r(env *e, ex_tensor *const *x)
{
    return ex__bn_bwd_data(e->ctx, x[0], x[1], x[2], x[3], e->c->nr > 4 ? x[4] : NULL,
                           e->c->ip[1] != 0, e->c->ip[2]);
}
static void r_bn_bwd_data_r(const env *e, double *y)
{
    const int64_t *ne = e->one[0];
    double m = (double)(e->c->ip[2] * ne[0] * ne[2] * ne[3]);
    ref_bn_bwd_data(e->od[0], ne, e->od[1], e->od[2], e->od[3], e->c->nr > 4 ? e->od[4] : NULL,
                    e->c->ip[1], m, y);
}

/* Rank r's samples of t [N, ...] among `ranks`: [r N/R, (r + 1) N/R). */
static ex_tensor *rank_part(env *e, ex_tensor *t, int r, int ranks)
{
    int64_t per = ex_tensor_dim(t, 0) / ranks;
    return ex_slice(e->ctx, t, 0, r * per, per);
}

#define MAX_RANKS 4

/* Row `row` of a [2, C] tensor, [1, C]. */
static ex_tensor *row_of(env *e, ex_tensor *t, int row)
{
    return ex_slice(e->ctx, t, 0, row, 1);
}

/* The ranks' moments of x combined as the engine combines them (Chan's parallel variance,
 * in f32 element-wise ops): A = the moments averaged over the ranks (the all-reduce: a sum,
 * then times 1/R), S = (mean_r - A0)^2 averaged the same way, the finish over x's count
 * from [A0; A1 + S]. */
static ex_tensor *sync_stats(env *e, ex_tensor *x, ex_tensor *rm, ex_tensor *rv, int ranks)
{
    ex_tensor *m[MAX_RANKS], *sum = NULL;
    for (int r = 0; r < ranks; r++) {
        m[r] = ex__bn_moments(e->ctx, rank_part(e, x, r, ranks), rm, rv);
        sum = sum ? ex_add(e->ctx, sum, m[r]) : m[r];
    }
    ex_tensor *avg = ranks > 1 ? ex_scale(e->ctx, sum, 1.0f / (float)ranks) : sum;
    ex_tensor *mean = row_of(e, avg, 0), *sq = NULL;
    for (int r = 0; r < ranks; r++) {
        ex_tensor *d = ex_sub(e->ctx, row_of(e, m[r], 0), mean), *dd = ex_mul(e->ctx, d, d);
        sq = sq ? ex_add(e->ctx, sq, dd) : dd;
    }
    ex_tensor *spread = ranks > 1 ? ex_scale(e->ctx, sq, 1.0f / (float)ranks) : sq;
    ex_tensor *group = ex__unwritten(e->ctx, 2, avg->ne);
    ex_copy_into(e->ctx, mean, row_of(e, group, 0));
    ex_copy_into(e->ctx, ex_add(e->ctx, row_of(e, avg, 1), spread), row_of(e, group, 1));
    return ex__bn_finish(e->ctx, group, rm, rv, ex_tensor_numel(x) / ex_tensor_dim(x, 1),
                         (float)e->c->fp[0], (float)e->c->fp[1]);
}

/* BN_APPLY of x with stats (and gamma, beta when given), as ex_batch_norm builds it. */
static ex_tensor *bn_apply_node(env *e, ex_tensor *x, ex_tensor *stats, ex_tensor *gamma,
                                ex_tensor *beta)
{
    ex_tensor *a[4] = {x, stats, gamma, beta};
    ex_tensor *y = ex__node(e->ctx, EX_OP_BN_APPLY, EX_F32, 4, x->ne, gamma ? 4 : 2, a);
    if (!ex__is_inert(y))
        y->ip[0] = 1;
    return y;
}

/* The ranks' parts of a tensor shaped like x, written into one. */
static ex_tensor *gather_ranks(env *e, ex_tensor *x, ex_tensor *const *part, int ranks)
{
    ex_tensor *out = ex__unwritten(e->ctx, 4, x->ne);
    for (int r = 0; r < ranks; r++)
        ex_copy_into(e->ctx, part[r], rank_part(e, out, r, ranks));
    return out;
}

/* roots as batch norm's (x, running mean, running var [, gamma, beta]); ip2 = R: each
 * rank's part of x normalized with the statistics of the whole batch */
static ex_tensor *b_sync_bn(env *e, ex_tensor *const *x)
{
    int ranks = e->c->ip[2];
    bool affine = e->c->nr > 3;
    ex_tensor *stats = sync_stats(e, x[0], x[1], x[2], ranks), *y[MAX_RANKS];
    for (int r = 0; r < ranks; r++)
        y[r] = bn_apply_node(e, rank_part(e, x[0], r, ranks), stats, affine ? x[3] : NULL,
                             affine ? x[4] : NULL);
    return gather_ranks(e, x[0], y, ranks);
}

/* roots x, running mean, running var, dy [, gamma]; ip1 = the backward reads x-hat (the
 * output of an affine-free apply) instead of x; ip2 = R: each rank's dx from its own
 * BN_BWD_REDUCE summed over the ranks (the all-reduce) and BN_BWD_DATA over R ranks */
static ex_tensor *b_sync_bn_bwd(env *e, ex_tensor *const *x)
{
    int ranks = e->c->ip[2];
    bool xhat = e->c->ip[1] != 0;
    ex_tensor *gamma = e->c->nr > 4 ? x[4] : NULL;
    ex_tensor *stats = sync_stats(e, x[0], x[1], x[2], ranks), *xs[MAX_RANKS], *dy[MAX_RANKS];
    ex_tensor *red = NULL, *dx[MAX_RANKS];
    for (int r = 0; r < ranks; r++) {
        ex_tensor *xr = rank_part(e, x[0], r, ranks);
        xs[r] = xhat ? bn_apply_node(e, xr, stats, NULL, NULL) : xr;
        dy[r] = rank_part(e, x[3], r, ranks);
        ex_tensor *p = ex__bn_bwd_reduce(e->ctx, xs[r], stats, dy[r], xhat);
        red = red ? ex_add(e->ctx, red, p) : p;
    }
    for (int r = 0; r < ranks; r++)
        dx[r] = ex__bn_bwd_data(e->ctx, xs[r], stats, dy[r], red, gamma, xhat, ranks);
    return gather_ranks(e, x[0], dx, ranks);
}
static void r_sync_bn_bwd(const env *e, double *y)
{
    ref_bn_grad(e->od[0], e->one[0], e->c->nr > 4 ? e->od[4] : NULL, e->od[3], bn_eps(e), y);
}

/* roots x, running mean, running var; ip2 = R: the statistics (the finish's output, mean
 * and invstd) of the whole batch from the ranks' moments */
static ex_tensor *b_sync_stats(env *e, ex_tensor *const *x)
{
    return sync_stats(e, x[0], x[1], x[2], e->c->ip[2]);
}
static void r_sync_stats(const env *e, double *y)
{
    int64_t c = e->one[0][1];
    double *moments = xcalloc((size_t)(2 * c), sizeof *moments),
           *var = xcalloc((size_t)c, sizeof *var);
    ref_bn_moments(e->od[0], e->one[0], moments);
    ref_bn_finish(moments, c, bn_eps(e), y, var);
    free(moments);
    free(var);
}

/* invstd on its own (next to a large mean the forward NMSE would hide its error), and the
 * running statistics moved with the whole batch's mean and variance. */
static void a_sync_stats(env *e)
{
    int64_t c = e->one[0][1], m = e->one[0][0] * e->one[0][2] * e->one[0][3];
    double *moments = xcalloc((size_t)(2 * c), sizeof *moments);
    check_nmse(e, "invstd", e->yv + c, e->yr + c, c, ex_op_tolerance(EX_OP_BN_STATS));
    ref_bn_moments(e->od[0], e->one[0], moments);
    check_running(e, moments, moments + c, m);
    free(moments);
}

#define MOMENTS(nm, xspec, ...)                                                                    \
    {                                                                                              \
        CASE(nm, EX_OP_BN_STATS, b_bn_moments, r_bn_moments, 3),                                   \
            .r = {{IN("x"), UNPAREN xspec}, __VA_ARGS__}, .after = a_bn_untouched                  \
    }
#define RSTATS_C(c)                                                                                \
    {STATE("running_mean"), SHAPE(c), UNI(-0.5, 0.5)},                                             \
    {                                                                                              \
        STATE("running_var"), SHAPE(c), UNI(0.5, 2)                                                \
    }
/* the moments' fields in parentheses; count; whether channel 0's variance is below 0 */
#define FINISH(nm, mspec, c, count, neg)                                                           \
    {                                                                                              \
        CASE(nm, EX_OP_BN_STATS, b_bn_finish, r_bn_finish, 3),                                     \
            .r = {{IN("moments"), UNPAREN mspec}, RSTATS_C(c)}, .ip = {0, 0, count, neg},          \
            .fp = {1e-5, 0.1}, .init = i_bn_finish, .after = a_bn_finish                           \
    }
/* x's and dy's fields in parentheses (one shape, C = 5), x-hat, R, then gamma if any */
#define BWD_R(nm, xhat, ranks, nr, xspec, dyspec, ...)                                             \
    {                                                                                              \
        CASE(nm, EX_OP_BN_BWD_DATA, b_bn_bwd_data_r, r_bn_bwd_data_r, nr),                         \
            .r = {{IN("x"), UNPAREN xspec},                                                        \
                  {IN("stats"), SHAPE(2, 5), UNI(0.5, 1.5)},                                       \
                  {IN("dy"), UNPAREN dyspec},                                                      \
                  {IN("red"), SHAPE(2, 5), UNI(-30, 30)},                                          \
                  __VA_ARGS__},                                                                    \
            .ip = {1, xhat, ranks},                                                                \
    }
#define GAMMA5                                                                                     \
    {                                                                                              \
        IN("gamma"), SHAPE(5), UNI(0.5, 1.5)                                                       \
    }
#define SYNC(nm, ranks, nr, xspec, ...)                                                            \
    {                                                                                              \
        CASE(nm, EX_OP_BN_STATS, b_sync_bn, r_bn, nr),                                             \
            .r = {{IN("x"), UNPAREN xspec}, RSTATS, __VA_ARGS__}, .ip = {1, 0, ranks},             \
            .fp = {1e-5, 0.1}, .after = a_bn                                                       \
    }
#define SYNC_STATS(nm, ranks, xspec)                                                               \
    {                                                                                              \
        CASE(nm, EX_OP_BN_STATS, b_sync_stats, r_sync_stats, 3),                                   \
            .r = {{IN("x"), UNPAREN xspec}, RSTATS}, .ip = {1, 0, ranks}, .fp = {1e-5, 0.1},       \
            .after = a_sync_stats                                                                  \
    }
#define SYNC_BWD(nm, xhat, ranks, nr, xspec, dyspec, ...)                                          \
    {                                                                                              \
        CASE(nm, EX_OP_BN_BWD_DATA, b_sync_bn_bwd, r_sync_bn_bwd, nr),                             \
            .r = {{IN("x"), UNPAREN xspec}, RSTATS, {IN("dy"), UNPAREN dyspec}, __VA_ARGS__},      \
            .ip = {1, xhat, ranks}, .fp = {1e-5, 0.1},                                             \
    }

static const tcase sync_bn_cases[] = {
    MOMENTS("bn moments", X3579, RSTATS),
    MOMENTS("bn moments of a channel slice", (SHAPE(3, 8, 7, 9), UNI(-1, 3), SLICE(1, 2, 5)),
            RSTATS),
    MOMENTS("bn moments of a transposed view", (SHAPE(3, 5, 11, 7), UNI(-1, 3), TRANS(2, 3)),
            RSTATS),
    /* one value per channel: its variance is 0, its mean of squares the value squared */
    MOMENTS("bn moments, M = 1", (SHAPE(1, 5, 1, 1), UNI(-1, 3)), RSTATS),
    /* a mean far from 0 against a unit variance: the variance is the careful one */
    MOMENTS("bn moments, mean 40", (SHAPE(3, 5, 7, 9), UNI(39, 41)), RSTATS),
    /* several segments of a channel (Vulkan: 2048 each), and more than 128 of them */
    MOMENTS("bn moments, M = 4608", (SHAPE(2, 5, 48, 48), UNI(-1, 3)), RSTATS),
    MOMENTS("bn moments, M = 270336", (SHAPE(64, 1, 64, 66), UNI(-1, 3)), RSTATS_C(1)),
    /* more channels than Vulkan's one-pass tickets (two dispatches) */
    MOMENTS("bn moments, 300 channels", (SHAPE(2, 300, 3, 3), UNI(-1, 3)), RSTATS_C(300)),
    FINISH("bn finish", (SHAPE(2, 5), UNI(-1, 3)), 5, 189, 0),
    FINISH("bn finish of a transposed view, a variance below 0",
           (SHAPE(7, 2), UNI(-1, 3), TRANS(0, 1)), 7, 2, 1),
    FINISH("bn finish of a row slice, M = 100000", (SHAPE(3, 9), UNI(-1, 3), SLICE(0, 1, 2)), 9,
           100000, 0),
    /* a mean far above the standard deviation: the variance comes as it is */
    FINISH("bn finish, mean 200", (SHAPE(2, 5), UNI(150, 250)), 5, 4000, 0),
    FINISH("bn finish, 300 channels", (SHAPE(2, 300), UNI(-1, 3)), 300, 18, 1),
    BWD_R("bn_bwd_data over 3 ranks, affine", 0, 3, 5, X3579, (SHAPE(3, 5, 7, 9), UNI(-1, 1)),
          GAMMA5),
    BWD_R("bn_bwd_data of x-hat over 2 ranks", 1, 2, 4, X3579, (SHAPE(3, 5, 7, 9), UNI(-1, 1)),
          {0}),
    BWD_R("bn_bwd_data over 1 rank", 0, 1, 4, X3579, (SHAPE(3, 5, 7, 9), UNI(-1, 1)), {0}),
    BWD_R("bn_bwd_data over 4 ranks, transposed views", 0, 4, 5,
          (SHAPE(3, 5, 11, 7), UNI(-1, 3), TRANS(2, 3)),
          (SHAPE(3, 5, 11, 7), UNI(-1, 1), TRANS(2, 3)), GAMMA5),
    BWD_R("bn_bwd_data of x-hat over 8 ranks, channel slices", 1, 8, 4,
          (SHAPE(3, 8, 6, 10), UNI(-1, 3), SLICE(1, 2, 5)),
          (SHAPE(3, 9, 6, 10), UNI(-1, 1), SLICE(1, 4, 5)), {0}),
    BWD_R("bn_bwd_data over 2 ranks, 14x14 planes", 0, 2, 5, (SHAPE(4, 5, 14, 14), UNI(-1, 3)),
          (SHAPE(4, 5, 14, 14), UNI(-1, 1)), GAMMA5),
    /* the forms assembled: R = 1 is batch norm's training form; R = 3 ranks of 2 samples
     * normalize as batch norm over the 6 */
    SYNC("sync batch norm, 1 rank, affine", 1, 5, X3579, AFFINE),
    SYNC("sync batch norm, 3 ranks", 3, 3, (SHAPE(6, 5, 7, 9), UNI(-1, 3)), {0}),
    SYNC("sync batch norm, 2 ranks of a channel slice, affine", 2, 5,
         (SHAPE(4, 8, 7, 9), UNI(-1, 3), SLICE(1, 2, 5)), AFFINE),
    SYNC("sync batch norm, 4 ranks of a transposed view", 4, 3,
         (SHAPE(4, 5, 11, 7), UNI(-1, 3), TRANS(2, 3)), {0}),
    SYNC("sync batch norm, 2 ranks, M = 4608", 2, 3, (SHAPE(2, 5, 48, 48), UNI(-1, 3)), {0}),
    /* |mean| far above the standard deviation (DARTS's auxiliary head: average-pooled
     * features, few values a rank), uniform over mean +- sqrt(3) std: passing E[x^2] = var
     * + mean^2 in f32 lost the variance here. Mean 200 and std 1, 8 values a rank; mean
     * -1000 and std 0.1 as statistics (invstd on its own; there the normalized output
     * misses its bound in one-process batch norm too, the f32 mean being up to 3e-4 std
     * off), 1000 values a rank: with a few, the f32 rounding of each rank's mean, which
     * the spread S carries, costs invstd about 1e-4 (docs/ops.md). */
    SYNC("sync batch norm, 4 ranks of 8 values, mean 200, std 1", 4, 3,
         (SHAPE(8, 5, 2, 2), UNI(198.26795, 201.73205)), {0}),
    SYNC_STATS("sync batch norm statistics, 4 ranks of 8 values, mean 200, std 1", 4,
               (SHAPE(8, 5, 2, 2), UNI(198.26795, 201.73205))),
    SYNC_STATS("sync batch norm statistics, 3 ranks of 1000 values, mean -1000, std 0.1", 3,
               (SHAPE(3, 5, 25, 40), UNI(-1000.17321, -999.82679))),
    SYNC_BWD("sync batch norm backward, 3 ranks, affine", 0, 3, 5, (SHAPE(6, 5, 7, 9), UNI(-1, 3)),
             (SHAPE(6, 5, 7, 9), UNI(-1, 1)), GAMMA5),
    SYNC_BWD("sync batch norm backward of x-hat, 2 ranks", 1, 2, 4, (SHAPE(4, 5, 7, 9), UNI(-1, 3)),
             (SHAPE(4, 5, 7, 9), UNI(-1, 1)), {0}),
    SYNC_BWD("sync batch norm backward, 4 ranks of transposed views", 0, 4, 4,
             (SHAPE(4, 5, 11, 7), UNI(-1, 3), TRANS(2, 3)),
             (SHAPE(4, 5, 11, 7), UNI(-1, 1), TRANS(2, 3)), {0}),
    SYNC_BWD("sync batch norm backward, 4 ranks of 8 values, mean 200, std 1", 0, 4, 5,
             (SHAPE(8, 5, 2, 2), UNI(198.26795, 201.73205)), (SHAPE(8, 5, 2, 2), UNI(-1, 1)),
             GAMMA5),
};

void family_batchnorm(void **state)
{
    run_table(*state, bn_cases, sizeof bn_cases / sizeof *bn_cases);
}

void family_sync_batchnorm(void **state)
{
    run_table(*state, sync_bn_cases, sizeof sync_bn_cases / sizeof *sync_bn_cases);
}
