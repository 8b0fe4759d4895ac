/* Host-side geometry of a backend's tensor descriptor (ex_tdesc), shared by every backend:
 * shapes padded to 4 dims, element offsets, broadcasting. Plain C that C++ (the CUDA
 * backend) includes as it is. */
#ifndef EXAPT_CORE_TDESC_H
#define EXAPT_CORE_TDESC_H
#include <float.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/backend_iface.h"

/** Shape and strides padded on the left to 4 dims (size 1, stride 0). */
static inline void ex_td_shape4(const ex_tdesc *t, int64_t ne[4], int64_t st[4])
{
    int pad = 4 - t->ndim;
    for (int d = 0; d < 4; d++) {
        ne[d] = d < pad ? 1 : t->ne[d - pad];
        st[d] = d < pad ? 0 : t->st[d - pad];
    }
}

/** Element offset of the row-major logical index i of t. */
static inline int64_t ex_td_at(const ex_tdesc *t, int64_t i)
{
    int64_t off = 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        off += (i % t->ne[d]) * t->st[d];
        i /= t->ne[d];
    }
    return off;
}

/** Number of elements of t. */
static inline int64_t ex_td_numel(const ex_tdesc *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->ne[d];
    return n;
}

/** The element offsets from t's element 0 that its elements reach: [*lo, *hi], *lo <= 0
 *  (negative strides) <= *hi. */
static inline void ex_td_reach(const ex_tdesc *t, int64_t *lo, int64_t *hi)
{
    *lo = *hi = 0;
    for (int d = 0; d < t->ndim; d++) {
        int64_t r = (t->ne[d] - 1) * t->st[d];
        *(r < 0 ? lo : hi) += r;
    }
}

/** Whether t's elements lie one after another in row-major order. */
static inline bool ex_td_dense(const ex_tdesc *t)
{
    int64_t want = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->ne[d] > 1 && t->st[d] != want)
            return false;
        want *= t->ne[d];
    }
    return true;
}

/** Whether t is 1 to 4 dims of dtype dt in a buffer. */
static inline int ex_td_valid(const ex_tdesc *t, ex_dtype dt)
{
    return t->ndim >= 1 && t->ndim <= 4 && t->dtype == dt && t->buf != NULL;
}

/** Strides of t read as the padded shape ne (a size-1 dim broadcasts); 0 when it does
 *  not fit. */
static inline int ex_td_align(const ex_tdesc *t, const int64_t ne[4], int64_t st[4])
{
    int64_t tne[4];
    if (t->ndim < 1 || t->ndim > 4 || t->buf == NULL)
        return 0;
    ex_td_shape4(t, tne, st);
    for (int d = 0; d < 4; d++) {
        if (tne[d] == ne[d])
            continue;
        if (tne[d] != 1)
            return 0;
        st[d] = 0;
    }
    return 1;
}

/** Merges the dims of nop operands of padded shape ne (operand k's strides st[k]) that
 *  every operand steps over as one (a dim's stride is the inner one's times its size; a
 *  broadcast, stride 0, stays 0) and drops the dims of size 1, so a dense tensor is one
 *  dim. The nd dims left (at least 1: a single element is one dim of size 1, strides 0)
 *  are ne[0..nd) and st[k][0..nd), or the last nd when right is set; the other dims get
 *  size 1 and stride 0. Returns nd. */
static inline int ex_td_merge_dims(int nop, int64_t ne[4], int64_t (*st)[4], int right)
{
    int nd = 0;
    for (int d = 0; d < 4; d++) { /* in place: dim d goes to nd - 1 <= d */
        if (ne[d] == 1)
            continue;
        int merge = nd > 0;
        for (int k = 0; k < nop && merge; k++)
            merge = st[k][nd - 1] == st[k][d] * ne[d];
        int64_t n = ne[d];
        nd += !merge;
        ne[nd - 1] = merge ? ne[nd - 1] * n : n;
        for (int k = 0; k < nop; k++)
            st[k][nd - 1] = st[k][d];
    }
    if (nd == 0) {
        ne[0] = 1;
        for (int k = 0; k < nop; k++)
            st[k][0] = 0;
        nd = 1;
    }
    for (int d = 3; d >= 0; d--) { /* downwards: a dim moves to a higher index or stays */
        int from = right ? d - (4 - nd) : d < nd ? d : -1;
        ne[d] = from < 0 ? 1 : ne[from];
        for (int k = 0; k < nop; k++)
            st[k][d] = from < 0 ? 0 : st[k][from];
    }
    return nd;
}

/** Whether a written tensor of padded shape ne never writes one element twice. */
static inline int ex_td_dst_ok(const int64_t ne[4], const int64_t st[4])
{
    for (int d = 0; d < 4; d++)
        if (ne[d] > 1 && st[d] == 0)
            return 0;
    return 1;
}

/** A dst of dtype f32 with 1 to 4 dims in a buffer that writes no element twice, as the
 *  checks below ask it: its padded shape into ne, its strides into st. EX_OK, or
 *  EX_ERR_ARG with why. */
static inline ex_status ex_td_f32_dst(const ex_node_exec *n, int64_t ne[4], int64_t st[4],
                                      char *why, size_t len)
{
    if (!ex_td_valid(&n->dst, EX_F32)) {
        snprintf(why, len, "dst must be f32 with 1 to 4 dims");
        return EX_ERR_ARG;
    }
    ex_td_shape4(&n->dst, ne, st);
    if (!ex_td_dst_ok(ne, st)) {
        snprintf(why, len, "dst broadcasts (stride 0)");
        return EX_ERR_ARG;
    }
    return EX_OK;
}

/** The element-wise form as every backend checks it: nsrc sources; a dst of 1 to 4 dims in
 *  a buffer with no stride 0; the first nalign sources broadcast to dst. Fills ne (dst's
 *  shape padded to 4 dims), st[0] (dst's strides) and st[1 + i] (source i's, read as dst's
 *  shape). EX_ERR_ARG or EX_ERR_SHAPE with the message in why (len bytes). */
static inline ex_status ex_td_ew_of(const ex_node_exec *n, int nsrc, int nalign, int64_t ne[4],
                                    int64_t (*st)[4], char *why, size_t len)
{
    if (n->nsrc != nsrc || (nsrc > 0 && n->src == NULL)) {
        snprintf(why, len, "%d sources, expected %d", n->nsrc, nsrc);
        return EX_ERR_ARG;
    }
    if (n->dst.ndim < 1 || n->dst.ndim > 4 || n->dst.buf == NULL) {
        snprintf(why, len, "bad dst (ndim %d)", n->dst.ndim);
        return EX_ERR_ARG;
    }
    ex_td_shape4(&n->dst, ne, st[0]);
    if (!ex_td_dst_ok(ne, st[0])) {
        snprintf(why, len, "dst broadcasts (stride 0)");
        return EX_ERR_ARG;
    }
    for (int i = 0; i < nalign; i++)
        if (!ex_td_align(&n->src[i], ne, st[1 + i])) {
            snprintf(why, len, "source %d does not broadcast to dst", i);
            return EX_ERR_SHAPE;
        }
    return EX_OK;
}

/** The fused-ReLU flag of a convolution-family node (ip6, docs/ops.md): 0 or 1, or -1 when
 *  the node is malformed: the flag is neither 0 nor 1, is set on a dense convolution, or
 *  DWCONV2D_BWD_DATA does not have x as its third source exactly when it is set. The
 *  backends share this check so that each refuses the same nodes. */
static inline int ex_td_conv_relu(const ex_node_exec *n)
{
    int relu = n->ip[6];
    int dw = n->op == EX_OP_DWCONV2D || n->op == EX_OP_DWCONV2D_BWD_DATA ||
             n->op == EX_OP_DWCONV2D_BWD_FILTER;
    if (relu != 0 && (relu != 1 || !dw))
        return -1;
    int want = 2 + (relu && n->op == EX_OP_DWCONV2D_BWD_DATA);
    return n->nsrc == want ? relu : -1;
}

/** The fused requantize of an int8 convolution (QCONV2D, QDWCONV2D, QPWCONV;
 *  docs/ops.md): 0 when it makes the i32 sums (3 sources, ip7 = 0), 1 when it requantizes
 *  them into i8 by source 3 (f32 [Co] or [1]; ip7 its ReLU, 0 or 1), -1 when the node is
 *  neither. The backends share this check so that each refuses the same nodes. */
static inline int ex_td_qconv_rq(const ex_node_exec *n)
{
    if (n->nsrc == 3)
        return n->ip[7] == 0 && n->dst.dtype == EX_I32 ? 0 : -1;
    if (n->nsrc != 4 || n->dst.dtype != EX_I8 || (n->ip[7] != 0 && n->ip[7] != 1))
        return -1;
    const ex_tdesc *m = &n->src[3];
    return m->dtype == EX_F32 && m->ndim == 1 && (m->ne[0] == n->dst.ne[1] || m->ne[0] == 1) ? 1
                                                                                             : -1;
}

/** Whether the fused ReLU's mask source of DWCONV2D_BWD_DATA (src[2], x) is a 4-d f32
 *  tensor shaped like dx; the message the backends give when it is not. */
#define EX_TD_RELU_MASK_MSG                                                                        \
    "source 2 (x, for the fused ReLU's mask) must be a 4-d f32 tensor shaped like dx"
static inline bool ex_td_relu_mask_ok(const ex_node_exec *n)
{
    const ex_tdesc *m = &n->src[2];
    bool ok = m->dtype == EX_F32 && m->ndim == 4 && m->buf != NULL;
    for (int d = 0; ok && d < 4; d++)
        ok = m->ne[d] == n->dst.ne[d];
    return ok;
}

/** The message for a node ex_td_conv_relu() refuses; its arguments are ip6 and nsrc. */
#define EX_TD_CONV_RELU_MSG                                                                        \
    "ip6 (fused ReLU) %d with %d sources: expected 0 with 2 sources, or 1 on a depthwise op "      \
    "(the data gradient with x as a third source)"

/** A convolution's window: x [n, ci, h, w], w [co, ci (1 when depthwise), kh, kw] and
 *  y [n, co, ho, wo] under stride (sh, sw), padding (ph, pw) and dilation (dh, dw). */
typedef struct ex_td_conv_geom {
    int64_t n, ci, co, h, w, kh, kw, ho, wo;
    int64_t sh, sw, ph, pw, dh, dw;
    int depthwise;
    int relu; /**< the input is max(x, 0) (ip6, depthwise only) */
} ex_td_conv_geom;

/** Output extent of one spatial dimension, or -1 when not even one window fits. */
static inline int64_t ex_td_conv_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d)
{
    int64_t span = in + 2 * p - d * (k - 1) - 1;
    return span < 0 ? -1 : span / s + 1;
}

/** Decodes a convolution's window from ip0..5 (stride, padding, dilation, each h then w;
 *  docs/ops.md) and the 4-d shapes xn, wn, yn, as every backend does for the f32 and the
 *  int8 convolutions: EX_ERR_ARG when ip0..5 are out of range, EX_ERR_SHAPE when the
 *  shapes do not fit them; why (len bytes) gets the message. relu is left 0. */
static inline ex_status ex_td_conv_geom_of(const int32_t *ip, const int64_t xn[4],
                                           const int64_t wn[4], const int64_t yn[4], int depthwise,
                                           ex_td_conv_geom *g, char *why, size_t len)
{
    if (ip[0] < 1 || ip[1] < 1 || ip[2] < 0 || ip[3] < 0 || ip[4] < 1 || ip[5] < 1) {
        snprintf(why, len, "bad geometry stride %dx%d pad %dx%d dilation %dx%d", ip[0], ip[1],
                 ip[2], ip[3], ip[4], ip[5]);
        return EX_ERR_ARG;
    }
    int64_t ho = ex_td_conv_out(xn[2], wn[2], ip[0], ip[2], ip[4]);
    int64_t wo = ex_td_conv_out(xn[3], wn[3], ip[1], ip[3], ip[5]);
    *g = (ex_td_conv_geom){xn[0], xn[1], wn[0], xn[2], xn[3], wn[2], wn[3],     ho, wo,
                           ip[0], ip[1], ip[2], ip[3], ip[4], ip[5], depthwise, 0};
    bool ok = g->ho > 0 && g->wo > 0 && g->kh > 0 && g->kw > 0 && yn[0] == g->n && yn[1] == g->co &&
              yn[2] == g->ho && yn[3] == g->wo;
    ok = ok && (depthwise ? wn[1] == 1 && g->co == g->ci : wn[1] == g->ci);
    if (!ok) {
        snprintf(why, len,
                 "x [%lld,%lld,%lld,%lld], w [%lld,%lld,%lld,%lld] and y [%lld,%lld,%lld,%lld] "
                 "do not fit stride %dx%d pad %dx%d dilation %dx%d",
                 (long long)xn[0], (long long)xn[1], (long long)xn[2], (long long)xn[3],
                 (long long)wn[0], (long long)wn[1], (long long)wn[2], (long long)wn[3],
                 (long long)yn[0], (long long)yn[1], (long long)yn[2], (long long)yn[3], ip[0],
                 ip[1], ip[2], ip[3], ip[4], ip[5]);
        return EX_ERR_SHAPE;
    }
    return EX_OK;
}

/** The window of an int8 convolution (QCONV2D, QDWCONV2D; and QPWCONV and QLINEAR as a
 *  1x1 window) whose operands' dtypes and ranks are checked: ex_td_conv_geom_of, and a
 *  bias of nbias elements, one per output channel. */
static inline ex_status ex_td_qconv_geom_of(const int32_t *ip, const int64_t xn[4],
                                            const int64_t wn[4], const int64_t yn[4], int64_t nbias,
                                            int depthwise, ex_td_conv_geom *g, char *why,
                                            size_t len)
{
    ex_status st = ex_td_conv_geom_of(ip, xn, wn, yn, depthwise, g, why, len);
    if (st == EX_OK && nbias != g->co) {
        snprintf(why, len, "bias [%lld] for %lld output channels", (long long)nbias,
                 (long long)g->co);
        return EX_ERR_SHAPE;
    }
    return st;
}

/** An f32 convolution node in its roles: x input, w filter, y output, whichever of them
 *  is the node's dst. */
typedef struct ex_td_conv {
    ex_td_conv_geom g;
    const ex_tdesc *x, *w, *y;
    const ex_tdesc *mask; /**< a data gradient's fused ReLU mask (source 2), or NULL */
} ex_td_conv;

/** Checks and decodes a node of CONV2D, DWCONV2D or one of their gradients as every
 *  backend does (forward x, w -> y; data gradient dy, w -> dx; filter gradient x, dy ->
 *  dw): the fused ReLU (ex_td_conv_relu) and, on the data gradient, its mask source; three
 *  4-d f32 operands in buffers, dst with no stride 0; the window (ex_td_conv_geom_of).
 *  EX_ERR_ARG or EX_ERR_SHAPE with the message in why (len bytes). */
static inline ex_status ex_td_conv_of(const ex_node_exec *nd, ex_td_conv *c, char *why, size_t len)
{
    int relu = nd->src ? ex_td_conv_relu(nd) : -1;
    if (relu < 0) {
        snprintf(why, len, EX_TD_CONV_RELU_MSG, nd->ip[6], nd->nsrc);
        return EX_ERR_ARG;
    }
    for (int i = 0; i < 3; i++) {
        const ex_tdesc *t = i < 2 ? &nd->src[i] : &nd->dst;
        if (t->dtype != EX_F32 || t->ndim != 4 || t->buf == NULL) {
            snprintf(why, len, "operand %d must be a 4-d f32 tensor", i);
            return EX_ERR_ARG;
        }
    }
    if (!ex_td_dst_ok(nd->dst.ne, nd->dst.st)) {
        snprintf(why, len, "dst broadcasts (stride 0)");
        return EX_ERR_ARG;
    }
    bool data = nd->op == EX_OP_CONV2D_BWD_DATA || nd->op == EX_OP_DWCONV2D_BWD_DATA;
    bool filter = nd->op == EX_OP_CONV2D_BWD_FILTER || nd->op == EX_OP_DWCONV2D_BWD_FILTER;
    if (relu && data && !ex_td_relu_mask_ok(nd)) {
        snprintf(why, len, EX_TD_RELU_MASK_MSG);
        return EX_ERR_SHAPE;
    }
    c->x = data ? &nd->dst : &nd->src[0];
    c->w = filter ? &nd->dst : &nd->src[1];
    c->y = !data && !filter ? &nd->dst : data ? &nd->src[0] : &nd->src[1];
    c->mask = relu && data ? &nd->src[2] : NULL;
    int dw = nd->op == EX_OP_DWCONV2D || nd->op == EX_OP_DWCONV2D_BWD_DATA ||
             nd->op == EX_OP_DWCONV2D_BWD_FILTER;
    ex_status st = ex_td_conv_geom_of(nd->ip, c->x->ne, c->w->ne, c->y->ne, dw, &c->g, why, len);
    c->g.relu = relu;
    return st;
}

/** A pooling window: x [n, c, h, w] into y [n, c, ho, wo] by kh x kw windows at stride
 *  (sh, sw) with padding (ph, pw). */
typedef struct ex_td_pool_geom {
    int64_t n, c, h, w, ho, wo;
    int64_t kh, kw, sh, sw, ph, pw;
} ex_td_pool_geom;

/** Decodes a pooling window from ip0..5 (kernel, stride, padding, each h then w;
 *  docs/ops.md) and the 4-d shapes of its input xn and output yn, as every backend does
 *  for the f32 and the int8 pools: EX_ERR_ARG when ip0..5 are out of range (padding must
 *  stay below the window, so that every window holds an input element), EX_ERR_SHAPE when
 *  the shapes do not fit them; why (len bytes) gets the message. */
static inline ex_status ex_td_pool_geom_of(const int32_t *ip, const int64_t xn[4],
                                           const int64_t yn[4], ex_td_pool_geom *g, char *why,
                                           size_t len)
{
    if (ip[0] < 1 || ip[1] < 1 || ip[2] < 1 || ip[3] < 1 || ip[4] < 0 || ip[5] < 0 ||
        ip[4] >= ip[0] || ip[5] >= ip[1]) {
        snprintf(why, len, "bad geometry kernel %dx%d stride %dx%d pad %dx%d", ip[0], ip[1], ip[2],
                 ip[3], ip[4], ip[5]);
        return EX_ERR_ARG;
    }
    int64_t sh = xn[2] + 2 * (int64_t)ip[4] - ip[0], sw = xn[3] + 2 * (int64_t)ip[5] - ip[1];
    int64_t ho = sh < 0 ? -1 : sh / ip[2] + 1, wo = sw < 0 ? -1 : sw / ip[3] + 1;
    *g = (ex_td_pool_geom){xn[0], xn[1], xn[2], xn[3], ho,    wo,
                           ip[0], ip[1], ip[2], ip[3], ip[4], ip[5]};
    if (ho < 1 || wo < 1 || yn[0] != xn[0] || yn[1] != xn[1] || yn[2] != ho || yn[3] != wo) {
        snprintf(why, len,
                 "input [%lld,%lld,%lld,%lld] and output [%lld,%lld,%lld,%lld] do not fit kernel "
                 "%dx%d stride %dx%d pad %dx%d",
                 (long long)xn[0], (long long)xn[1], (long long)xn[2], (long long)xn[3],
                 (long long)yn[0], (long long)yn[1], (long long)yn[2], (long long)yn[3], ip[0],
                 ip[1], ip[2], ip[3], ip[4], ip[5]);
        return EX_ERR_SHAPE;
    }
    return EX_OK;
}

/** The shapes of a global average pool (GLOBAL_AVG_POOL, QGLOBAL_AVG_POOL), as every backend
 *  checks them: x [N, C, H, W] with at least one pixel a plane, y [N, C, 1, 1]; the int8
 *  form's planes at most 2^23 pixels (so that an i32 sum of i8 holds). EX_ERR_SHAPE with
 *  the message in why (len bytes). */
static inline ex_status ex_td_gap_of(const ex_node_exec *n, char *why, size_t len)
{
    const ex_tdesc *x = &n->src[0], *y = &n->dst;
    if (y->ne[0] != x->ne[0] || y->ne[1] != x->ne[1] || y->ne[2] != 1 || y->ne[3] != 1 ||
        x->ne[2] * x->ne[3] < 1) {
        snprintf(why, len, "x [%lld,%lld,%lld,%lld] -> y [%lld,%lld,%lld,%lld]",
                 (long long)x->ne[0], (long long)x->ne[1], (long long)x->ne[2], (long long)x->ne[3],
                 (long long)y->ne[0], (long long)y->ne[1], (long long)y->ne[2],
                 (long long)y->ne[3]);
        return EX_ERR_SHAPE;
    }
    if (n->op == EX_OP_QGLOBAL_AVG_POOL && x->ne[2] * x->ne[3] > (int64_t)1 << 23) {
        snprintf(why, len, "planes above 2^23 pixels");
        return EX_ERR_SHAPE;
    }
    return EX_OK;
}

/** A tensor's shape as text, "[2,3,8,8]", in out (96 bytes); returns out. */
static inline const char *ex_td_shape_str(const ex_tdesc *t, char out[96])
{
    size_t at = 0;
    out[at++] = '[';
    out[at] = 0;
    for (int d = 0; d < t->ndim && d < EX_MAX_DIMS && at < 80; d++)
        at += (size_t)snprintf(out + at, 96 - at, d ? ",%lld" : "%lld", (long long)t->ne[d]);
    snprintf(out + at, 96 - at, "]");
    return out;
}

/** Checks a node of the GEMM family as every backend does: its sources, f32 operands of
 *  the op's ranks in buffers, a dst with no stride 0, and shapes that fit. MATMUL a [m, k]
 *  x b [k, n] -> [m, n]; LINEAR x [n, k], w [o, k] and a bias [o] or none -> [n, o];
 *  PWCONV x [N, Ci, H, W], w [Co, Ci] -> y [N, Co, H, W]; PWCONV_BWD_FILTER x, dy [N, Co,
 *  H, W] -> dw [Co, Ci]. EX_ERR_ARG or EX_ERR_SHAPE with the message in why (len bytes);
 *  EX_ERR_ARG for another op. */
static inline ex_status ex_td_gemm_of(const ex_node_exec *nd, char *why, size_t len)
{
    static const int mm[3] = {2, 2, 2}, lin[4] = {2, 2, 1, 2}, pw[3] = {4, 2, 4},
                     pwf[3] = {4, 4, 2};
    ex_op op = nd->op;
    bool linear = op == EX_OP_LINEAR, filter = op == EX_OP_PWCONV_BWD_FILTER;
    const int *dims = op == EX_OP_MATMUL   ? mm
                      : linear             ? (nd->nsrc == 3 ? lin : mm)
                      : op == EX_OP_PWCONV ? pw
                      : filter             ? pwf
                                           : NULL;
    if (!dims) {
        snprintf(why, len, "%s is not of the GEMM family", ex_op_name(op));
        return EX_ERR_ARG;
    }
    if (nd->nsrc < 2 || nd->nsrc > (linear ? 3 : 2) || nd->src == NULL) {
        snprintf(why, len, "unexpected source count %d", nd->nsrc);
        return EX_ERR_ARG;
    }
    for (int i = 0; i <= nd->nsrc; i++) {
        const ex_tdesc *t = i < nd->nsrc ? &nd->src[i] : &nd->dst;
        if (t->dtype != EX_F32 || t->ndim != dims[i] || t->buf == NULL) {
            snprintf(why, len, "operand %d must be a %d-d f32 tensor", i, dims[i]);
            return EX_ERR_ARG;
        }
    }
    const ex_tdesc *d = &nd->dst;
    for (int k = 0; k < d->ndim; k++)
        if (d->ne[k] > 1 && d->st[k] == 0) {
            snprintf(why, len, "dst broadcasts (stride 0)");
            return EX_ERR_ARG;
        }
    const int64_t *a = nd->src[0].ne, *b = nd->src[1].ne, *c = d->ne;
    bool ok;
    if (op == EX_OP_MATMUL) {
        ok = a[1] == b[0] && c[0] == a[0] && c[1] == b[1];
    } else if (linear) {
        ok = a[1] == b[1] && c[0] == a[0] && c[1] == b[0] &&
             (nd->nsrc < 3 || nd->src[2].ne[0] == b[0]);
    } else {
        const int64_t *x = a, *w = filter ? c : b, *y = filter ? b : c;
        ok = y[0] == x[0] && y[2] == x[2] && y[3] == x[3] && w[0] == y[1] && w[1] == x[1];
    }
    if (!ok) {
        char sa[96], sb[96], sc[96];
        snprintf(why, len, "%s x %s -> %s do not fit", ex_td_shape_str(&nd->src[0], sa),
                 ex_td_shape_str(&nd->src[1], sb), ex_td_shape_str(d, sc));
        return EX_ERR_SHAPE;
    }
    return EX_OK;
}

/** A reduction's split of x's dims (SUM, MEAN, MAX over the axes of mask ip0, dims kept):
 *  the kept dims (size, x stride, dst stride) and the reduced ones (size, x stride), each
 *  in x's order with dims of size 1 left out; entries past nk and nr are size 1, stride 0. */
typedef struct ex_td_reduce {
    int nk, nr;
    int64_t kne[4], kxs[4], kds[4];
    int64_t rne[4], rxs[4];
    int64_t nout, m; /**< outputs, elements reduced into each */
} ex_td_reduce;

/** Checks and decodes a reduction node as every backend does: one source; x and dst f32
 *  of one rank (1 to 4), dst 1 on the reduced dims and x's size on the others, no empty
 *  dim, no dim of the mask beyond x's, a dst that does not broadcast. EX_ERR_ARG or
 *  EX_ERR_SHAPE with the message in why (len bytes). */
static inline ex_status ex_td_reduce_of(const ex_node_exec *n, ex_td_reduce *g, char *why,
                                        size_t len)
{
    if (n->nsrc != 1 || n->src == NULL) {
        snprintf(why, len, "%d sources, expected 1", n->nsrc);
        return EX_ERR_ARG;
    }
    const ex_tdesc *x = &n->src[0], *d = &n->dst;
    if (x->dtype != EX_F32 || d->dtype != EX_F32) {
        snprintf(why, len, "x and dst must be f32");
        return EX_ERR_ARG;
    }
    if (x->ndim < 1 || x->ndim > 4 || d->ndim != x->ndim) {
        snprintf(why, len, "x has %d dims, dst %d (dims are kept)", x->ndim, d->ndim);
        return EX_ERR_SHAPE;
    }
    uint32_t axes = (uint32_t)n->ip[0];
    if (axes >> x->ndim) {
        snprintf(why, len, "axes 0x%x name a dim beyond x's %d", axes, x->ndim);
        return EX_ERR_ARG;
    }
    *g = (ex_td_reduce){0, 0, {1, 1, 1, 1}, {0}, {0}, {1, 1, 1, 1}, {0}, 1, 1};
    for (int k = 0; k < x->ndim; k++) {
        int red = (axes >> k) & 1;
        if (x->ne[k] < 1) {
            snprintf(why, len, "x dim %d is empty", k);
            return EX_ERR_SHAPE;
        }
        if (d->ne[k] != (red ? 1 : x->ne[k])) {
            snprintf(why, len, "dst dim %d is %lld, expected %lld", k, (long long)d->ne[k],
                     (long long)(red ? 1 : x->ne[k]));
            return EX_ERR_SHAPE;
        }
        if (x->ne[k] == 1)
            continue;
        if (red) {
            g->rne[g->nr] = x->ne[k];
            g->rxs[g->nr++] = x->st[k];
            g->m *= x->ne[k];
        } else {
            if (d->st[k] == 0) {
                snprintf(why, len, "dst broadcasts (stride 0)");
                return EX_ERR_ARG;
            }
            g->kne[g->nk] = x->ne[k];
            g->kxs[g->nk] = x->st[k];
            g->kds[g->nk++] = d->st[k];
            g->nout *= x->ne[k];
        }
    }
    return EX_OK;
}

/** FILL's i32 value from its f32 fp0, as every backend converts it: saturated, NaN as 0
 *  (a plain cast of an out-of-range float is undefined in C). */
static inline int32_t ex_td_fill_i32(float v)
{
    if (v != v)
        return 0;
    if (v >= 2147483648.0f)
        return INT32_MAX;
    if (v < -2147483648.0f)
        return INT32_MIN;
    return (int32_t)v;
}

/** What source 0 of a batch-norm backward node (BN_BWD_REDUCE, BN_BWD_DATA) holds, from
 *  ip1 (docs/ops.md): 0 for x, 1 for x̂ itself (the output of an affine-free BN_APPLY, kept
 *  in x's stead so that x dies after the forward pass); -1 when ip1 is neither. */
static inline int ex_td_bn_xhat(const ex_node_exec *n)
{
    return n->ip[1] == 0 || n->ip[1] == 1 ? n->ip[1] : -1;
}

/** The message for a node ex_td_bn_xhat() refuses; its argument is ip1. */
#define EX_TD_BN_XHAT_MSG "ip1 (source 0 is x-hat) is %d; expected 0 (x) or 1 (x-hat)"

/** BN_STATS's forms (ip1, docs/ops.md). */
enum {
    EX_BN_STATS_PLAIN = 0,   /**< training (ip0 = 1) or eval (ip0 = 0) statistics */
    EX_BN_STATS_MOMENTS = 1, /**< a synchronized batch norm's local mean and biased var */
    EX_BN_STATS_FINISH = 2   /**< its statistics from the group's mean and biased var */
};

/** The sources node n writes besides dst, one bit per source (bit s: source s), for every
 *  backend that orders nodes by what they touch: SGD's parameter and momentum (not the
 *  gradient, lr or a clip's norm, which every SGD of a step reads), Adam's parameter and
 *  moments, the running statistics of a training BN_STATS in the plain or finish form
 *  (the moments form only reads x). */
static inline uint32_t ex_td_updated_sources(const ex_node_exec *n)
{
    switch (n->op) {
    case EX_OP_SGD: return 1u | 1u << 2;
    case EX_OP_ADAM: return 1u | 1u << 2 | 1u << 3;
    case EX_OP_BN_STATS:
        return n->ip[0] && n->ip[1] != EX_BN_STATS_MOMENTS ? 1u << 1 | 1u << 2 : 0u;
    default: return 0u;
    }
}

/** Whether t is an f32 [C] tensor (rows 1) or [2, C] one in a buffer. */
static inline bool ex_td_bn_vec_ok(const ex_tdesc *t, int rows, int64_t c)
{
    return ex_td_valid(t, EX_F32) && (rows == 1 ? t->ndim == 1 && t->ne[0] == c
                                                : t->ndim == 2 && t->ne[0] == 2 && t->ne[1] == c);
}

/** BN_STATS's node form, as every backend checks it (docs/ops.md): 3 sources; ip1 the form
 *  (EX_BN_STATS_*), the synchronized ones (1, 2) in training only (ip0 = 1); source 0 x, a
 *  4-d f32 tensor (forms 0 and 1), or the moments, f32 [2, C] (form 2: the group's mean
 *  and biased variance, combined over the ranks by the engine); the running
 *  statistics f32 [C] and dst f32 [2, C]; more than one value per channel in training (form
 *  0: N*H*W >= 2; form 2: ip2, the global count, >= 2), at least one in form 1. EX_OK with
 *  the form in *form and C in *c, or the status to return with what is wrong written into
 *  why (no op name). */
static inline ex_status ex_td_bn_stats_check(const ex_node_exec *n, int *form, int64_t *c,
                                             char *why, size_t len)
{
    int f = n->ip[1];
    if (n->nsrc != 3 || n->src == NULL) {
        snprintf(why, len, "%d sources, expected 3", n->nsrc);
        return EX_ERR_ARG;
    }
    if (f < EX_BN_STATS_PLAIN || f > EX_BN_STATS_FINISH) {
        snprintf(why, len, "ip1 (form) is %d; expected 0 (plain), 1 (moments) or 2 (finish)", f);
        return EX_ERR_ARG;
    }
    if (f != EX_BN_STATS_PLAIN && n->ip[0] != 1) {
        snprintf(why, len,
                 "ip0 (train) is %d; the synchronized forms (ip1 = %d) are training only (ip0 = 1)",
                 n->ip[0], f);
        return EX_ERR_ARG;
    }
    const ex_tdesc *x = &n->src[0];
    if (f == EX_BN_STATS_FINISH ? !ex_td_valid(x, EX_F32) || x->ndim != 2 || x->ne[0] != 2
                                : !ex_td_valid(x, EX_F32) || x->ndim != 4) {
        snprintf(why, len,
                 f == EX_BN_STATS_FINISH ? "the moments must be an f32 [2, C] tensor"
                                         : "x must be a 4-d f32 tensor");
        return EX_ERR_ARG;
    }
    *c = x->ne[1];
    const char *bad = !ex_td_bn_vec_ok(&n->src[1], 1, *c)   ? "running_mean"
                      : !ex_td_bn_vec_ok(&n->src[2], 1, *c) ? "running_var"
                      : !ex_td_bn_vec_ok(&n->dst, 2, *c)    ? "dst"
                                                            : NULL;
    if (bad) {
        snprintf(why, len, "%s must be an f32 [%s%lld] tensor", bad, bad[0] == 'd' ? "2, " : "",
                 (long long)*c);
        return EX_ERR_SHAPE;
    }
    if (f == EX_BN_STATS_FINISH && n->ip[2] < 2) {
        snprintf(why, len, "ip2 (the global count of values per channel) is %d; expected >= 2",
                 n->ip[2]);
        return EX_ERR_ARG;
    }
    int64_t m = f == EX_BN_STATS_FINISH ? 0 : x->ne[0] * x->ne[2] * x->ne[3];
    if (f == EX_BN_STATS_MOMENTS && m < 1) {
        snprintf(why, len, "the moments need at least one value per channel (N*H*W = %lld)",
                 (long long)m);
        return EX_ERR_SHAPE;
    }
    if (f == EX_BN_STATS_PLAIN && n->ip[0] && m < 2) {
        snprintf(why, len, "training needs more than one value per channel (N*H*W = %lld)",
                 (long long)m);
        return EX_ERR_SHAPE;
    }
    *form = f;
    return EX_OK;
}

/** BN_BWD_DATA's count multiplier R (ip2, docs/ops.md): the statistics count M*R values per
 *  channel, red holding sums over R ranks (a synchronized batch norm); 0 and 1 mean 1. -1
 *  when ip2 is negative. */
static inline int ex_td_bn_ranks(const ex_node_exec *n)
{
    return n->ip[2] < 0 ? -1 : n->ip[2] < 2 ? 1 : n->ip[2];
}

/** The message for a node ex_td_bn_ranks() refuses; its argument is ip2. */
#define EX_TD_BN_RANKS_MSG "ip2 (ranks, the count multiplier) is %d; expected >= 0"

/** A batch norm's x [n, c, h, w] and m = n * h * w, the values one rank's statistics
 *  count. */
typedef struct ex_td_bn {
    int64_t n, c, h, w, m;
} ex_td_bn;

/* Whether t is an f32 tensor of x's 4-d shape in a buffer. */
static inline bool ex_td_bn_like_x(const ex_tdesc *t, const ex_tdesc *x)
{
    bool ok = t->dtype == EX_F32 && t->ndim == 4 && t->buf != NULL;
    for (int d = 0; d < 4 && ok; d++)
        ok = t->ne[d] == x->ne[d];
    return ok;
}

/** Checks a BN_APPLY, BN_BWD_REDUCE or BN_BWD_DATA node as every backend does
 *  (docs/ops.md): the source count; x, source 0, a 4-d f32 tensor; stats [2, C]; gamma and
 *  beta [C] (together or neither); dy and a 4-d dst of x's shape; red and BN_BWD_REDUCE's
 *  dst [2, C]; a dst that does not broadcast; the x-hat flag (ip1) and the ranks (ip2).
 *  Fills g; EX_ERR_ARG or EX_ERR_SHAPE with the message in why (len bytes). */
static inline ex_status ex_td_bn_of(const ex_node_exec *n, ex_td_bn *g, char *why, size_t len)
{
    ex_op op = n->op;
    bool apply = op == EX_OP_BN_APPLY, reduce = op == EX_OP_BN_BWD_REDUCE;
    int lo = apply ? 2 : reduce ? 3 : 4, hi = apply ? 4 : reduce ? 3 : 5;
    if (!apply && !reduce && op != EX_OP_BN_BWD_DATA) {
        snprintf(why, len, "%s is not checked here", ex_op_name(op));
        return EX_ERR_ARG;
    }
    if (n->nsrc < lo || n->nsrc > hi || n->src == NULL) {
        snprintf(why, len, "unexpected source count %d", n->nsrc);
        return EX_ERR_ARG;
    }
    if (apply && n->nsrc == 3) {
        snprintf(why, len, "gamma and beta come together");
        return EX_ERR_ARG;
    }
    const ex_tdesc *x = &n->src[0];
    if (x->dtype != EX_F32 || x->ndim != 4 || x->buf == NULL) {
        snprintf(why, len, "x must be a 4-d f32 tensor");
        return EX_ERR_ARG;
    }
    *g = (ex_td_bn){x->ne[0], x->ne[1], x->ne[2], x->ne[3], x->ne[0] * x->ne[2] * x->ne[3]};
    /* each operand after x: its role's name and rows (0: x's 4-d shape; 1: [C]; 2: [2, C]) */
    static const char *const names[3][6] = {{"stats", "gamma", "beta", "dst"},
                                            {"stats", "dy", "dst"},
                                            {"stats", "dy", "red", "gamma", "dst"}};
    static const int rows[3][6] = {{2, 1, 1, 0}, {2, 0, 2}, {2, 0, 2, 1, 0}};
    int k = apply ? 0 : reduce ? 1 : 2;
    for (int i = 1; i <= n->nsrc; i++) {
        bool last = i == n->nsrc;
        const ex_tdesc *t = last ? &n->dst : &n->src[i];
        int at = last ? (k == 0 ? 3 : k == 1 ? 2 : 4) : i - 1;
        int r = rows[k][at];
        bool ok = r == 0 ? ex_td_bn_like_x(t, x) : t->buf != NULL && ex_td_bn_vec_ok(t, r, g->c);
        if (!ok) {
            if (r == 0)
                snprintf(why, len, "%s must be an f32 tensor of x's shape", names[k][at]);
            else
                snprintf(why, len, "%s must be an f32 [%s%lld] tensor", names[k][at],
                         r == 1 ? "" : "2, ", (long long)g->c);
            return EX_ERR_SHAPE;
        }
    }
    int64_t ne[4], st[4];
    ex_td_shape4(&n->dst, ne, st);
    if (!ex_td_dst_ok(ne, st)) {
        snprintf(why, len, "dst broadcasts (stride 0)");
        return EX_ERR_ARG;
    }
    if (!apply && ex_td_bn_xhat(n) < 0) {
        snprintf(why, len, EX_TD_BN_XHAT_MSG, n->ip[1]);
        return EX_ERR_ARG;
    }
    if (op == EX_OP_BN_BWD_DATA && ex_td_bn_ranks(n) < 0) {
        snprintf(why, len, EX_TD_BN_RANKS_MSG, n->ip[2]);
        return EX_ERR_ARG;
    }
    return EX_OK;
}

/** SGD's node form, as every backend checks it: 4 sources, or 5 with a gradient clip
 *  folded in (source 4 the norm, one f32 element; fp[2] its max_norm, > 0). EX_OK, or the
 *  status to return with what is wrong written into why (no op name). */
static inline ex_status ex_td_sgd_check(const ex_node_exec *n, char *why, size_t len)
{
    if (n->nsrc != 4 && n->nsrc != 5) {
        snprintf(why, len, "%d sources, expected 4 (5 with the clip's norm)", n->nsrc);
        return EX_ERR_ARG;
    }
    if (n->nsrc == 4)
        return EX_OK;
    if (!ex_td_valid(&n->src[4], EX_F32) || ex_td_numel(&n->src[4]) != 1) {
        snprintf(why, len, "the clip's norm (source 4) must be one f32 element");
        return EX_ERR_SHAPE;
    }
    if (!(n->fp[2] > 0.0f)) {
        snprintf(why, len, "max_norm %g of the clip must be > 0", (double)n->fp[2]);
        return EX_ERR_ARG;
    }
    return EX_OK;
}

/** The optimizer ops' element-wise form (SGD, ADAM, CLIP; docs/ops.md), as every backend
 *  checks it: nsrc sources; dst f32 with 1 to 4 dims; sources 0..nalign-1 f32 of dst's
 *  shape exactly. Fills ne (dst's shape padded to 4 dims), st[0] (dst's strides) and
 *  st[1 + i] (source i's). Operand k (0: dst, 1 + i: source i) must not broadcast where bit
 *  k of written is set (the tensors the op updates). EX_OK, or the status to return with
 *  what is wrong written into why (no op name). */
static inline ex_status ex_td_update_of(const ex_node_exec *n, int nsrc, int nalign,
                                        unsigned written, int64_t ne[4], int64_t (*st)[4],
                                        char *why, size_t len)
{
    if (n->nsrc != nsrc || n->src == NULL) {
        snprintf(why, len, "%d sources, expected %d", n->nsrc, nsrc);
        return EX_ERR_ARG;
    }
    if (!ex_td_valid(&n->dst, EX_F32)) {
        snprintf(why, len, "dst must be f32 with 1 to 4 dims");
        return EX_ERR_ARG;
    }
    ex_td_shape4(&n->dst, ne, st[0]);
    for (int i = 0; i < nalign; i++) {
        int64_t tne[4];
        int ok = ex_td_valid(&n->src[i], EX_F32);
        if (ok)
            ex_td_shape4(&n->src[i], tne, st[1 + i]);
        for (int d = 0; d < 4 && ok; d++)
            ok = tne[d] == ne[d];
        if (!ok) {
            snprintf(why, len, "source %d is not f32 of dst's shape", i);
            return EX_ERR_SHAPE;
        }
    }
    for (int k = 0; k <= nalign; k++)
        if (((written >> k) & 1) && !ex_td_dst_ok(ne, st[k])) {
            snprintf(why, len, "an updated tensor broadcasts");
            return EX_ERR_ARG;
        }
    return EX_OK;
}

/** The softmax family's rows (SOFTMAX, LOG_SOFTMAX and their backward passes; docs/ops.md),
 *  as every backend checks them: nsrc sources; dst f32 with 1 to 4 dims, none empty, none
 *  of stride 0; every source f32 and broadcasting to dst. Fills ne (dst's shape padded to
 *  4 dims; dims 0..2 index rows), st[0] (dst's strides) and st[1 + i] (source i's).
 *  EX_OK, or the status to return with what is wrong written into why (no op name). */
static inline ex_status ex_td_rows_of(const ex_node_exec *n, int nsrc, int64_t ne[4],
                                      int64_t (*st)[4], char *why, size_t len)
{
    if (n->nsrc != nsrc || n->src == NULL) {
        snprintf(why, len, "%d sources, expected %d", n->nsrc, nsrc);
        return EX_ERR_ARG;
    }
    ex_status r = ex_td_f32_dst(n, ne, st[0], why, len);
    if (r != EX_OK)
        return r;
    for (int d = 0; d < 4; d++)
        if (ne[d] < 1) {
            snprintf(why, len, "dst has an empty dim");
            return EX_ERR_SHAPE;
        }
    for (int i = 0; i < nsrc; i++)
        if (n->src[i].dtype != EX_F32 || !ex_td_align(&n->src[i], ne, st[1 + i])) {
            snprintf(why, len, "source %d is not f32 of dst's shape", i);
            return EX_ERR_SHAPE;
        }
    return EX_OK;
}

/** The logits and labels of CROSS_ENTROPY, its backward pass and ACCURACY (docs/ops.md), as
 *  every backend checks them: nsrc sources; source 0 the logits, f32 with 1 to 4 dims and
 *  at least one element, the last dim the classes; source 1 the labels, i32 with 1 to 4
 *  dims, one per row (the other dims). Fills ne and st (the logits' padded shape and
 *  strides) and *rows. EX_OK, or the status to return with why (no op name). */
static inline ex_status ex_td_ce_of(const ex_node_exec *n, int nsrc, int64_t ne[4], int64_t st[4],
                                    int64_t *rows, char *why, size_t len)
{
    if (n->nsrc != nsrc || n->src == NULL) {
        snprintf(why, len, "%d sources, expected %d", n->nsrc, nsrc);
        return EX_ERR_ARG;
    }
    const ex_tdesc *x = &n->src[0], *l = &n->src[1];
    if (!ex_td_valid(x, EX_F32)) {
        snprintf(why, len, "logits must be f32 with 1 to 4 dims");
        return EX_ERR_ARG;
    }
    if (!ex_td_valid(l, EX_I32)) {
        snprintf(why, len, "labels must be i32");
        return EX_ERR_ARG;
    }
    ex_td_shape4(x, ne, st);
    *rows = ne[0] * ne[1] * ne[2];
    if (ne[3] < 1 || *rows < 1) {
        snprintf(why, len, "logits have no elements");
        return EX_ERR_SHAPE;
    }
    if (ex_td_numel(l) != *rows) {
        snprintf(why, len, "%lld labels for %lld rows", (long long)ex_td_numel(l),
                 (long long)*rows);
        return EX_ERR_SHAPE;
    }
    return EX_OK;
}

/** CROSS_ENTROPY_BWD's gradient operands beyond ex_td_ce_of (ne: the logits' padded shape):
 *  source 2, dloss, one f32 element; dst f32 of the logits' shape, no stride 0. Fills sd
 *  (dst's strides). EX_OK, or EX_ERR_SHAPE with why (no op name). */
static inline ex_status ex_td_ce_bwd_of(const ex_node_exec *n, const int64_t ne[4], int64_t sd[4],
                                        char *why, size_t len)
{
    const ex_tdesc *dl = &n->src[2];
    if (!ex_td_valid(dl, EX_F32) || ex_td_numel(dl) != 1) {
        snprintf(why, len, "dloss must be one f32 element");
        return EX_ERR_SHAPE;
    }
    if (n->dst.ndim != n->src[0].ndim || n->dst.dtype != EX_F32) {
        snprintf(why, len, "dst must be f32 like logits");
        return EX_ERR_SHAPE;
    }
    int64_t dne[4];
    ex_td_shape4(&n->dst, dne, sd);
    for (int d = 0; d < 4; d++)
        if (dne[d] != ne[d] || (dne[d] > 1 && sd[d] == 0)) {
            snprintf(why, len, "dst must have logits' shape");
            return EX_ERR_SHAPE;
        }
    return EX_OK;
}

/** GRAD_NORM's node form, as every backend checks it (docs/ops.md): one source or more,
 *  each f32 with 1 to 4 dims; dst one f32 element. EX_OK, or the status to return with
 *  what is wrong written into why (no op name). */
static inline ex_status ex_td_grad_norm_check(const ex_node_exec *n, char *why, size_t len)
{
    if (n->nsrc < 1 || n->src == NULL) {
        snprintf(why, len, "%d sources, expected 1 or more", n->nsrc);
        return EX_ERR_ARG;
    }
    if (!ex_td_valid(&n->dst, EX_F32) || ex_td_numel(&n->dst) != 1) {
        snprintf(why, len, "dst must be one f32 element");
        return EX_ERR_SHAPE;
    }
    for (int i = 0; i < n->nsrc; i++)
        if (!ex_td_valid(&n->src[i], EX_F32)) {
            snprintf(why, len, "source %d must be f32 with 1 to 4 dims", i);
            return EX_ERR_ARG;
        }
    return EX_OK;
}

/** Whether c can be a Philox stream's counter (GUMBEL_SOFTMAX, DROP_PATH, the random ops):
 *  i32 with 1 to 4 dims and 2 elements or more, in a buffer. */
static inline bool ex_td_counter_ok(const ex_tdesc *c)
{
    return ex_td_valid(c, EX_I32) && ex_td_numel(c) >= 2;
}

/** RAND_UNIFORM's and RAND_NORMAL's node form, as every backend checks it (docs/ops.md):
 *  one source, the counter (ex_td_counter_ok); dst f32 with 1 to 4 dims, no element
 *  written twice. EX_OK, or the status to return with why (no op name). */
static inline ex_status ex_td_rand_check(const ex_node_exec *n, char *why, size_t len)
{
    if (n->nsrc != 1 || n->src == NULL) {
        snprintf(why, len, "%d sources, expected the counter", n->nsrc);
        return EX_ERR_ARG;
    }
    if (!ex_td_counter_ok(&n->src[0])) {
        snprintf(why, len, "counter must be i32 [2]");
        return EX_ERR_ARG;
    }
    int64_t ne[4], st[4];
    return ex_td_f32_dst(n, ne, st, why, len);
}

/** A mixed op's operands (MIXED_SUM, MIXED_SUM_BWD_W), as ex_td_mix_of reads them. */
typedef struct ex_td_mix {
    int n;         /**< candidates: sources 2 .. n + 1 */
    unsigned bad;  /**< bit j: candidate j is not f32 of ne; the node fails only where its mask
                        entry is not 0 (ex_td_mix_candidate), which a GPU reads on the device */
    int64_t k;     /**< mask entries (and weights) */
    int64_t ne[4]; /**< operand 0's padded shape: dst, or dy (backward) */
    int64_t st[1 + EX_NODE_IPARAMS][4]; /**< operand 0's strides, then candidate j's at 1 + j,
                                             read as ne (0 where bad) */
} ex_td_mix;

/* The mixed sum's weights (forward) or dst (backward) against the mask's k entries. */
static inline ex_status ex_td_mix_ends(const ex_node_exec *n, ex_td_mix *m, char *why, size_t len)
{
    const ex_tdesc *d = &n->dst;
    if (n->op == EX_OP_MIXED_SUM) {
        if (ex_td_numel(&n->src[0]) != m->k) {
            snprintf(why, len, "%lld weights, %lld mask entries",
                     (long long)ex_td_numel(&n->src[0]), (long long)m->k);
            return EX_ERR_SHAPE;
        }
        return ex_td_f32_dst(n, m->ne, m->st[0], why, len);
    }
    if (!ex_td_valid(d, EX_F32) || ex_td_numel(d) != m->k) {
        snprintf(why, len, "dst must be f32 with one entry per mask entry");
        return EX_ERR_SHAPE;
    }
    int64_t dne[4], dst[4];
    ex_td_shape4(d, dne, dst);
    if (!ex_td_dst_ok(dne, dst)) {
        snprintf(why, len, "dst broadcasts (stride 0)");
        return EX_ERR_ARG;
    }
    ex_td_shape4(&n->src[0], m->ne, m->st[0]);
    return EX_OK;
}

/** MIXED_SUM's and MIXED_SUM_BWD_W's node form, as every backend checks it (docs/ops.md):
 *  2 to 2 + EX_NODE_IPARAMS sources; source 0 the weights (forward: f32, one per mask
 *  entry) or dy (backward: f32 with 1 to 4 dims); source 1 the mask, f32; ip[j] candidate
 *  j's weight index in [0, k); forward: dst f32 with 1 to 4 dims, no stride 0; backward:
 *  dst f32 with one entry per mask entry, no stride 0. Fills m; a candidate that does not
 *  fit only sets its bit of m->bad. EX_OK, or the status to return with why (no op name). */
static inline ex_status ex_td_mix_of(const ex_node_exec *n, ex_td_mix *m, char *why, size_t len)
{
    memset(m, 0, sizeof *m);
    m->n = n->nsrc - 2;
    if (m->n < 0 || m->n > EX_NODE_IPARAMS || n->src == NULL) {
        snprintf(why, len, "%d sources, expected 2 to %d", n->nsrc, EX_NODE_IPARAMS + 2);
        return EX_ERR_ARG;
    }
    bool fwd = n->op == EX_OP_MIXED_SUM;
    if (!ex_td_valid(&n->src[0], EX_F32) || !ex_td_valid(&n->src[1], EX_F32)) {
        snprintf(why, len,
                 fwd ? "weights and mask must be f32" : "dy and mask must be f32 with 1 to 4 dims");
        return EX_ERR_ARG;
    }
    m->k = ex_td_numel(&n->src[1]);
    for (int j = 0; j < m->n; j++)
        if (n->ip[j] < 0 || n->ip[j] >= m->k) {
            snprintf(why, len, "candidate %d has weight index %d outside [0, %lld)", j, n->ip[j],
                     (long long)m->k);
            return EX_ERR_ARG;
        }
    ex_status st = ex_td_mix_ends(n, m, why, len);
    for (int j = 0; j < m->n && st == EX_OK; j++) {
        const ex_tdesc *x = &n->src[2 + j];
        if (x->dtype != EX_F32 || !ex_td_align(x, m->ne, m->st[1 + j])) {
            m->bad |= 1u << j;
            memset(m->st[1 + j], 0, sizeof m->st[1 + j]);
        }
    }
    return st;
}

/** EX_OK, or EX_ERR_SHAPE with why where candidate j of m, which is active (its mask entry
 *  is not 0), does not fit (bit j of m->bad). */
static inline ex_status ex_td_mix_candidate(const ex_node_exec *n, const ex_td_mix *m, int j,
                                            char *why, size_t len)
{
    if (!((m->bad >> j) & 1))
        return EX_OK;
    snprintf(why, len, "candidate %d is not f32 of %s's shape", j,
             n->op == EX_OP_MIXED_SUM ? "dst" : "dy");
    return EX_ERR_SHAPE;
}

/* The NAS row ops' shape of the rows and how many sources align to it: 0 when op is not
 * one of them. */
static inline int ex_td_nas_rows_form(const ex_node_exec *n, int *nsrc, const ex_tdesc **ref)
{
    *ref = &n->dst;
    switch (n->op) {
    case EX_OP_GUMBEL_SOFTMAX: *nsrc = 3; return 1;
    case EX_OP_GUMBEL_SOFTMAX_BWD: *nsrc = 3; return 2;
    case EX_OP_HARDMAX_ST: *nsrc = 1; return 1;
    case EX_OP_ENTROPY:
        *nsrc = 1;
        *ref = n->src ? &n->src[0] : &n->dst;
        return 1;
    case EX_OP_ENTROPY_BWD: *nsrc = 2; return 2;
    case EX_OP_TOPK_MASK: *nsrc = 1; return 1;
    default: *nsrc = 0; return 0;
    }
}

/* What the NAS row ops ask beyond their rows: ENTROPY's dst p's shape with the last dim 1,
 * TOPK_MASK's k >= 0, the Gumbel-softmax's tau (one f32 element) and counter (i32, 2
 * elements or more). */
static inline ex_status ex_td_nas_rows_extra(const ex_node_exec *n, char *why, size_t len)
{
    const ex_tdesc *p = &n->src[0], *d = &n->dst, *tau = NULL;
    bool ok = true;
    switch (n->op) {
    case EX_OP_ENTROPY:
        ok = d->ndim == p->ndim && p->ndim >= 1 && p->ndim <= 4 && d->ne[d->ndim - 1] == 1;
        for (int k = 0; ok && k < p->ndim - 1; k++)
            ok = d->ne[k] == p->ne[k];
        if (!ok)
            snprintf(why, len, "dst must be p's shape with last dim 1");
        return ok ? EX_OK : EX_ERR_SHAPE;
    case EX_OP_TOPK_MASK:
        if (n->ip[0] < 0)
            snprintf(why, len, "k is %d", n->ip[0]);
        return n->ip[0] >= 0 ? EX_OK : EX_ERR_ARG;
    case EX_OP_GUMBEL_SOFTMAX: tau = &n->src[1]; break;
    case EX_OP_GUMBEL_SOFTMAX_BWD: tau = &n->src[2]; break;
    default: return EX_OK;
    }
    if (!ex_td_valid(tau, EX_F32) || ex_td_numel(tau) != 1) {
        snprintf(why, len, "tau must be one f32 element");
        return EX_ERR_SHAPE;
    }
    if (n->op == EX_OP_GUMBEL_SOFTMAX && !ex_td_counter_ok(&n->src[2])) {
        snprintf(why, len, "counter must be i32 [2]");
        return EX_ERR_ARG;
    }
    return EX_OK;
}

/** The NAS row ops (GUMBEL_SOFTMAX and its backward pass, HARDMAX_ST, ENTROPY and its
 *  backward pass, TOPK_MASK; docs/ops.md), as every backend checks them: their source
 *  counts; rows of the padded shape ne (dst's; ENTROPY's p's), dims 0..2 indexing rows, at
 *  least one element; dst f32 aligned to them, no element written twice; the first
 *  *nalign sources f32 of that shape; what ex_td_nas_rows_extra asks. Fills ne, st[0]
 *  (dst's strides read as ne) and st[1 + i] (source i's). EX_OK, or the status to return
 *  with why (no op name). */
static inline ex_status ex_td_nas_rows_of(const ex_node_exec *n, int64_t ne[4], int64_t (*st)[4],
                                          int *nalign, char *why, size_t len)
{
    int nsrc;
    const ex_tdesc *ref;
    *nalign = ex_td_nas_rows_form(n, &nsrc, &ref);
    if (n->nsrc != nsrc || n->src == NULL || nsrc == 0) {
        snprintf(why, len, "%d sources, expected %d", n->nsrc, nsrc);
        return nsrc ? EX_ERR_ARG : EX_ERR_UNSUPPORTED;
    }
    if (!ex_td_valid(ref, EX_F32) || !ex_td_valid(&n->dst, EX_F32)) {
        snprintf(why, len, "tensors must be f32 with 1 to 4 dims");
        return EX_ERR_ARG;
    }
    int64_t own[4], dne[4];
    ex_td_shape4(ref, ne, own);
    if (ne[0] * ne[1] * ne[2] * ne[3] < 1) {
        snprintf(why, len, "no elements");
        return EX_ERR_SHAPE;
    }
    ex_td_shape4(&n->dst, dne, own);
    if (!ex_td_align(&n->dst, ne, st[0]) || !ex_td_dst_ok(dne, st[0])) {
        snprintf(why, len, "dst does not fit the rows");
        return EX_ERR_SHAPE;
    }
    for (int i = 0; i < *nalign; i++)
        if (n->src[i].dtype != EX_F32 || !ex_td_align(&n->src[i], ne, st[1 + i])) {
            snprintf(why, len, "source %d is not f32 of the rows' shape", i);
            return EX_ERR_SHAPE;
        }
    return ex_td_nas_rows_extra(n, why, len);
}

/* The dtypes of an int8 element-wise op (ex_td_qew_of): dst's, and the one or two x may
 * have; its sources; whether source 1 is a per-channel operand. False when op is not one. */
static inline bool ex_td_qew_form(ex_op op, ex_dtype *dt, ex_dtype x[2], int *nsrc, bool *chan)
{
    *dt = x[0] = x[1] = EX_I8;
    *nsrc = 2;
    *chan = true;
    switch (op) {
    case EX_OP_QUANTIZE: x[0] = x[1] = EX_F32; return true;
    case EX_OP_DEQUANTIZE:
        *dt = EX_F32;
        x[1] = EX_I32;
        return true;
    case EX_OP_REQUANTIZE: x[1] = EX_I32; return true;
    case EX_OP_QADD: *chan = false; return true;
    case EX_OP_QRELU:
        *chan = false;
        *nsrc = 1;
        return true;
    default: return false;
    }
}

/** The int8 element-wise ops (QUANTIZE, DEQUANTIZE, REQUANTIZE, QADD, QRELU; docs/ops.md), as
 *  every backend checks them: their source count; dst of the op's dtype, [N, C] or [N, C,
 *  H, W] in a buffer, no element written twice; x (QADD's a and b) of its dtypes,
 *  broadcasting to dst; the per-channel operand of the first three f32 [C] or [1]. Fills
 *  ne (dst's shape padded to 4 dims), st[0] (dst's strides), st[1] (x's, read as ne) and
 *  st[2] (QADD's b, or the per-channel operand read along dst's channel dim: 0 in every
 *  other dim and where it holds one value). EX_OK, or the status to return with why (no
 *  op name). */
static inline ex_status ex_td_qew_of(const ex_node_exec *n, int64_t ne[4], int64_t (*st)[4],
                                     char *why, size_t len)
{
    ex_dtype dt, xt[2];
    int nsrc;
    bool chan;
    if (!ex_td_qew_form(n->op, &dt, xt, &nsrc, &chan)) {
        snprintf(why, len, "not an int8 element-wise op");
        return EX_ERR_UNSUPPORTED;
    }
    if (n->nsrc != nsrc || n->src == NULL) {
        snprintf(why, len, "%d sources, expected %d", n->nsrc, nsrc);
        return EX_ERR_ARG;
    }
    const ex_tdesc *d = &n->dst;
    if (!ex_td_valid(d, dt) || (d->ndim != 2 && d->ndim != 4)) {
        snprintf(why, len, "dst must be %s [N, C] or [N, C, H, W]", ex_dtype_name(dt));
        return EX_ERR_ARG;
    }
    ex_td_shape4(d, ne, st[0]);
    if (!ex_td_dst_ok(ne, st[0])) {
        snprintf(why, len, "dst broadcasts (stride 0)");
        return EX_ERR_ARG;
    }
    memset(st[2], 0, sizeof st[2]);
    for (int k = 0; k < (chan ? 1 : nsrc); k++) {
        const ex_tdesc *x = &n->src[k];
        if (!ex_td_valid(x, xt[0]) && !ex_td_valid(x, xt[1])) {
            snprintf(why, len, "source %d must be %s%s%s", k, ex_dtype_name(xt[0]),
                     xt[1] != xt[0] ? " or " : "", xt[1] != xt[0] ? ex_dtype_name(xt[1]) : "");
            return EX_ERR_ARG;
        }
        if (!ex_td_align(x, ne, st[1 + k])) {
            snprintf(why, len, "source %d does not fit dst", k);
            return EX_ERR_SHAPE;
        }
    }
    if (!chan)
        return EX_OK;
    const ex_tdesc *v = &n->src[1];
    int c = d->ndim == 4 ? 1 : 3; /* dst's dim 1, padded */
    if (!ex_td_valid(v, EX_F32) || v->ndim != 1 || (v->ne[0] != 1 && v->ne[0] != ne[c])) {
        snprintf(why, len, "the per-channel operand must be f32 [%lld] or [1]", (long long)ne[c]);
        return EX_ERR_SHAPE;
    }
    st[2][c] = v->ne[0] == 1 ? 0 : v->st[0];
    return EX_OK;
}

/** QCONCAT's node form, as every backend checks it (docs/ops.md): 1 to EX_MAX_QCONCAT parts,
 *  each i8 [N, Ci, H, W] of dst's N, H and W; the last source the multipliers, f32 with
 *  one per part; dst i8 [N, Σ Ci, H, W], no element written twice. EX_OK, or the status to
 *  return with what is wrong written into why (no op name). */
static inline ex_status ex_td_qconcat_of(const ex_node_exec *n, char *why, size_t len)
{
    int parts = n->nsrc - 1;
    if (parts < 1 || parts > EX_MAX_QCONCAT || n->src == NULL) {
        snprintf(why, len, "%d sources, expected 2 to %d", n->nsrc, EX_MAX_QCONCAT + 1);
        return EX_ERR_ARG;
    }
    const ex_tdesc *d = &n->dst, *m = &n->src[parts];
    if (!ex_td_valid(d, EX_I8) || d->ndim != 4) {
        snprintf(why, len, "dst must be i8 [N, C, H, W]");
        return EX_ERR_ARG;
    }
    if (!ex_td_valid(m, EX_F32) || m->ndim != 1 || m->ne[0] != parts) {
        snprintf(why, len, "the multipliers (last source) must be f32 [%d], one per part", parts);
        return EX_ERR_SHAPE;
    }
    int64_t at = 0;
    for (int p = 0; p < parts; p++) {
        const ex_tdesc *x = &n->src[p];
        if (!ex_td_valid(x, EX_I8) || x->ndim != 4) {
            snprintf(why, len, "part %d must be i8 [N, C, H, W]", p);
            return EX_ERR_ARG;
        }
        if (x->ne[0] != d->ne[0] || x->ne[2] != d->ne[2] || x->ne[3] != d->ne[3]) {
            snprintf(why, len, "part %d differs from dst in N, H or W", p);
            return EX_ERR_SHAPE;
        }
        at += x->ne[1];
    }
    if (at != d->ne[1]) {
        snprintf(why, len, "parts hold %lld channels, dst %lld", (long long)at,
                 (long long)d->ne[1]);
        return EX_ERR_SHAPE;
    }
    if (!ex_td_dst_ok(d->ne, d->st)) {
        snprintf(why, len, "dst broadcasts (stride 0)");
        return EX_ERR_ARG;
    }
    return EX_OK;
}

/** FILL's ip0 (docs/ops.md): 0 writes the value, 1 writes nothing (a buffer that the nodes
 *  written into it fill), -1 anything else. */
static inline int ex_td_fill_unwritten(const ex_node_exec *n)
{
    return n->ip[0] == 0 || n->ip[0] == 1 ? n->ip[0] : -1;
}

/** PWCONV_BN's node form, as every backend checks it (docs/ops.md): x f32 [N, Ci, H, W],
 *  w f32 [Co, Ci], the running mean and variance (and with 6 sources gamma and beta) f32
 *  [Co], y f32 [N, Co, H, W]; fp0 (eps) finite and > 0; ip6 (the input's ReLU) 0 or 1.
 *  EX_OK, or the status to return with what is wrong written into why (no op name). */
static inline ex_status ex_td_pwconv_bn_check(const ex_node_exec *n, char *why, size_t len)
{
    if (n->nsrc != 4 && n->nsrc != 6) {
        snprintf(why, len, "%d sources, expected 4 (6 with gamma and beta)", n->nsrc);
        return EX_ERR_ARG;
    }
    const ex_tdesc *x = &n->src[0], *w = &n->src[1], *y = &n->dst;
    bool ok = ex_td_valid(x, EX_F32) && x->ndim == 4 && ex_td_valid(w, EX_F32) && w->ndim == 2 &&
              ex_td_valid(y, EX_F32) && y->ndim == 4;
    for (int i = 2; ok && i < n->nsrc; i++)
        ok = ex_td_valid(&n->src[i], EX_F32) && n->src[i].ndim == 1;
    if (!ok) {
        snprintf(why, len, "x, y must be 4-d, w 2-d, the statistics 1-d f32 tensors");
        return EX_ERR_ARG;
    }
    ok = y->ne[0] == x->ne[0] && y->ne[2] == x->ne[2] && y->ne[3] == x->ne[3] &&
         w->ne[0] == y->ne[1] && w->ne[1] == x->ne[1];
    for (int i = 2; ok && i < n->nsrc; i++)
        ok = n->src[i].ne[0] == y->ne[1];
    if (!ok) {
        snprintf(why, len,
                 "x [%lld, %lld, %lld, %lld], w [%lld, %lld], y [%lld, %lld, %lld, "
                 "%lld] and the [C] statistics do not fit",
                 (long long)x->ne[0], (long long)x->ne[1], (long long)x->ne[2], (long long)x->ne[3],
                 (long long)w->ne[0], (long long)w->ne[1], (long long)y->ne[0], (long long)y->ne[1],
                 (long long)y->ne[2], (long long)y->ne[3]);
        return EX_ERR_SHAPE;
    }
    if (!(n->fp[0] > 0.0f && n->fp[0] <= FLT_MAX) || (n->ip[6] != 0 && n->ip[6] != 1)) {
        snprintf(why, len, "eps %g must be finite and > 0, ip6 (ReLU) %d 0 or 1", (double)n->fp[0],
                 n->ip[6]);
        return EX_ERR_ARG;
    }
    return EX_OK;
}

#endif
