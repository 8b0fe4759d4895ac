/* Quantized inference: QUANTIZE, DEQUANTIZE, REQUANTIZE, QADD, QRELU and QCONCAT through
 * quant/ew.comp, QCONV2D, QDWCONV2D, QPWCONV and QLINEAR through quant/conv.comp (the last
 * two as 1x1 convolutions; the dense ones through quant/convdot.comp's packed 4x8-bit dot
 * products where the device has shaderIntegerDotProduct), QMAX_POOL, QAVG_POOL and
 * QGLOBAL_AVG_POOL through quant/pool.comp. The first three convolutions also with the
 * requantize fused in (variant QC_RQ: the sums requantized in registers, i8 dst). Results
 * are the CPU backend's bit for bit (docs/ops.md): exact integer arithmetic, or f32
 * products and sums each rounded on its own.
 *
 * Without the 8-bit storage feature shaders read i8 from 32-bit words (an i8 operand's
 * reference counts bytes, vk_ref) and write an i8 dst a whole word at a time, each word
 * by one invocation. That needs a dense i8 dst that starts on a word; any other fails
 * with EX_ERR_UNSUPPORTED (the builders make fresh, dense, aligned outputs). Sources keep
 * their own strides. The checks mirror cpu/quant.c's. */
#include <string.h>

#include "shaders/quant/variants.h"
#include "vulkan/vk.h"

/* Mirrors quant/ew.comp's push constants. */
typedef struct qe_pc {
    uint32_t gate, d, a, b;
    uint32_t m, mo, ms, lo;
    uint32_t n, cdim, ma, mb;
    uint32_t c, at, hw, pad;
    uint32_t ne[4], sd[4], sa[4], sb[4];
} qe_pc;

/* Mirrors quant/conv.comp's push constants. */
typedef struct qc_pc {
    uint32_t gate, x, w, y;
    uint32_t b, sb, n, ci;
    uint32_t co, h, wd, ho;
    uint32_t wo, k, s, p;
    uint32_t dil, m, ms, lo;
    uint32_t sx[4], sw[4], sy[4];
} qc_pc;

/* Mirrors quant/pool.comp's push constants. */
typedef struct qp_pc {
    uint32_t gate, x, d, n;
    uint32_t g0[4], g1[4], g2[4], sx[4];
} qp_pc;

_Static_assert(sizeof(qe_pc) <= VK_PC_BYTES, "quant/ew.comp's push constants");
_Static_assert(sizeof(qc_pc) <= VK_PC_BYTES, "quant/conv.comp's push constants");
_Static_assert(sizeof(qp_pc) <= VK_PC_BYTES, "quant/pool.comp's push constants");

static void put4(uint32_t out[4], const int64_t v[4])
{
    for (int d = 0; d < 4; d++)
        out[d] = (uint32_t)v[d];
}

static ex_status q_need(vk_exec *e, const ex_node_exec *n, int nsrc)
{
    if (n->nsrc != nsrc || n->src == NULL)
        return vk_fail(e, EX_ERR_ARG, "%d sources, expected %d", n->nsrc, nsrc);
    return EX_OK;
}

static ex_status q_typed(vk_exec *e, const ex_tdesc *t, ex_dtype dt, int ndim, const char *what)
{
    if (!ex_td_valid(t, dt) || (ndim && t->ndim != ndim))
        return vk_fail(e, EX_ERR_ARG, "%s must be %s%s", what, ex_dtype_name(dt),
                       ndim == 4   ? " [N, C, H, W]"
                       : ndim == 2 ? " with 2 dimensions"
                       : ndim == 1 ? " with 1 dimension"
                                   : "");
    return EX_OK;
}

/* Whether an i8 dst can be written a word at a time: dense, starting on a word, within
 * 32-bit indexing. */
static ex_status q_dst_words(vk_exec *e, const ex_tdesc *d)
{
    int64_t ne[4], st[4], want = 1;
    ex_td_shape4(d, ne, st);
    int dense = 1;
    for (int k = 3; k >= 0; k--) {
        dense = dense && (ne[k] == 1 || st[k] == want);
        want *= ne[k];
    }
    const vk_buffer *v = (const vk_buffer *)d->buf;
    if (!dense || (v->offset + d->offset) % 4 != 0)
        return vk_fail(e, EX_ERR_UNSUPPORTED,
                       "an i8 dst must be dense and start on 4 bytes (shaders write it a 32-bit "
                       "word at a time)");
    if (!vk_fits32(ne, st))
        return vk_fail(e, EX_ERR_UNSUPPORTED, "dst is beyond 32-bit indexing");
    return EX_OK;
}

/* ---- element-wise ---- */

/* The node checked (core/tdesc.h) into pc, then this backend's limits: 32-bit indexing, an
 * i8 dst written a word at a time; the per-channel operand bound. */
static ex_status qe_setup(vk_exec *e, const ex_node_exec *n, qe_pc *pc)
{
    int64_t ne[4], s[3][4];
    char why[96];
    memset(pc, 0, sizeof *pc);
    ex_status st = ex_td_qew_of(n, ne, s, why, sizeof why);
    if (st != EX_OK)
        return vk_fail(e, st, "%s", why);
    bool add = n->op == EX_OP_QADD, chan = !add && n->op != EX_OP_QRELU;
    for (int k = 0; k < 3; k++)
        if (!vk_fits32(ne, s[k]))
            return vk_fail(e, EX_ERR_UNSUPPORTED, "operands beyond 32-bit indexing");
    if (n->dst.dtype == EX_I8 && (st = q_dst_words(e, &n->dst)) != EX_OK)
        return st;
    put4(pc->ne, ne);
    put4(pc->sd, s[0]);
    put4(pc->sa, s[1]);
    if (add)
        put4(pc->sb, s[2]);
    pc->n = (uint32_t)ex_td_numel(&n->dst);
    pc->cdim = (uint32_t)(5 - n->dst.ndim); /* dim 1 of x, padded to 4 dims */
    pc->a = pc->b = pc->m = VK_NOREF;
    if (chan) {
        const ex_tdesc *v = &n->src[1];
        pc->m = vk_ref_small(e, v);
        pc->ms = v->ne[0] == 1 ? 0u : (uint32_t)v->st[0];
    }
    return EX_OK;
}

/* Merges the dims every operand steps over as one (ex_td_merge_dims), so that dense
 * operands are one row and ew.comp takes 4 elements of it at a time. Only where no
 * channel is read: a merged dim loses its coordinates. */
static void qe_collapse(qe_pc *pc)
{
    if (pc->ms != 0)
        return;
    vk_merge_dims3(pc->ne, pc->sd, pc->sa, pc->sb);
}

static ex_status qe_go(vk_exec *e, int variant, qe_pc *pc)
{
    qe_collapse(pc);
    int64_t items = variant == QE_DEQUANTIZE_I8 || variant == QE_DEQUANTIZE_I32
                        ? (int64_t)pc->n
                        : ((int64_t)pc->n + 3) / 4;
    return vk_dispatch(e, VK_SH_quant_ew, variant, pc, sizeof *pc, vk_groups(items, 128), 1, 1);
}

/* QUANTIZE, DEQUANTIZE, REQUANTIZE: x and a per-channel multiplier. */
static ex_status q_scaled(vk_exec *e, const ex_node_exec *n)
{
    qe_pc pc;
    ex_status st = qe_setup(e, n, &pc);
    if (st != EX_OK)
        return st;
    bool i8 = n->src[0].dtype == EX_I8;
    int variant = n->op == EX_OP_QUANTIZE     ? QE_QUANTIZE
                  : n->op == EX_OP_DEQUANTIZE ? (i8 ? QE_DEQUANTIZE_I8 : QE_DEQUANTIZE_I32)
                                              : (i8 ? QE_REQUANTIZE_I8 : QE_REQUANTIZE_I32);
    pc.lo = n->op == EX_OP_REQUANTIZE && n->ip[0] ? 0u : (uint32_t)-127;
    pc.d = vk_ref(e, &n->dst);
    pc.a = vk_ref(e, &n->src[0]);
    return qe_go(e, variant, &pc);
}

/* QADD (a, b) and QRELU (x): i8 to i8, in place allowed. */
static ex_status q_i8_ew(vk_exec *e, const ex_node_exec *n)
{
    int add = n->op == EX_OP_QADD;
    qe_pc pc;
    ex_status st = qe_setup(e, n, &pc);
    if (st != EX_OK)
        return st;
    memcpy(&pc.ma, &n->fp[0], 4);
    memcpy(&pc.mb, &n->fp[1], 4);
    pc.lo = add && n->ip[0] ? 0u : (uint32_t)-127;
    pc.d = vk_ref(e, &n->dst);
    pc.a = vk_ref(e, &n->src[0]);
    if (add)
        pc.b = vk_ref(e, &n->src[1]);
    return qe_go(e, add ? QE_QADD : QE_QRELU, &pc);
}

/* QCONCAT: a dispatch per part, each binding only dst, the part and the multipliers (the
 * parts lie anywhere). Parts whose channel blocks share a word of dst write it in turn;
 * the tracker puts barriers between dispatches that bind dst. */
static ex_status q_concat(vk_exec *e, const ex_node_exec *n)
{
    char why[96];
    ex_status st = ex_td_qconcat_of(n, why, sizeof why);
    if (st != EX_OK)
        return vk_fail(e, st, "%s", why);
    int parts = n->nsrc - 1;
    const ex_tdesc *d = &n->dst, *m = &n->src[parts];
    if (m->st[0] < 0 || m->st[0] * (parts - 1) > INT32_MAX)
        st = vk_fail(e, EX_ERR_UNSUPPORTED, "the multipliers are beyond 32-bit indexing");
    if (st == EX_OK)
        st = q_dst_words(e, d);
    for (int p = 0; st == EX_OK && p < parts; p++)
        if (!vk_fits32(n->src[p].ne, n->src[p].st))
            st = vk_fail(e, EX_ERR_UNSUPPORTED, "part %d is beyond 32-bit indexing", p);
    if (st != EX_OK)
        return st;
    int64_t at = 0;
    for (int p = 0; st == EX_OK && p < parts; p++) {
        const ex_tdesc *x = &n->src[p];
        qe_pc pc;
        memset(&pc, 0, sizeof pc);
        put4(pc.ne, x->ne);
        put4(pc.sa, x->st);
        pc.c = (uint32_t)d->ne[1];
        pc.at = (uint32_t)at;
        pc.hw = (uint32_t)(d->ne[2] * d->ne[3]);
        pc.mo = (uint32_t)(p * m->st[0]);
        pc.b = VK_NOREF;
        if (p > 0) {
            vk_barrier(e);
            vk_bind_reset(e);
        }
        pc.d = vk_ref(e, d);
        pc.a = vk_ref(e, x);
        pc.m = vk_ref_small(e, m);
        int64_t items = x->ne[0] * ((x->ne[1] * pc.hw + 3) / 4 + 1);
        st =
            vk_dispatch(e, VK_SH_quant_ew, QE_QCONCAT, &pc, sizeof pc, vk_groups(items, 128), 1, 1);
        at += x->ne[1];
    }
    return st;
}

/* ---- sums of products ---- */

/* Packs a pair of geometry values (rows, columns) into one word, 0 when one passes 16 bits. */
static int q_pair(int64_t r, int64_t c, uint32_t *out)
{
    if (r < 0 || c < 0 || r > 0xFFFF || c > 0xFFFF)
        return 0;
    *out = (uint32_t)r | (uint32_t)c << 16;
    return 1;
}

/* Strides of a 4-d (padded) operand into out, 0 when beyond 32-bit indexing. */
static int q_strides(const int64_t ne[4], const int64_t st[4], uint32_t out[4])
{
    if (!vk_fits32(ne, st))
        return 0;
    put4(out, st);
    return 1;
}

/* An operand's shape and strides read as [A, B, 1, 1] for a 2-d one (QPWCONV's w) or as
 * they are for a 4-d one. */
static void q_as4(const ex_tdesc *t, int64_t ne[4], int64_t st[4])
{
    for (int d = 0; d < 4; d++) {
        ne[d] = d < t->ndim ? t->ne[d] : 1;
        st[d] = d < t->ndim ? t->st[d] : 0;
    }
}

/* QLINEAR's x [N, K] or y [N, M] as [1, K or M, 1, N]: the batch rows become the output
 * columns, which conv.comp takes 4 an invocation. */
static void q_rows_as_cols(const ex_tdesc *t, int64_t ne[4], int64_t st[4])
{
    const int64_t n[4] = {1, t->ne[1], 1, t->ne[0]}, s[4] = {0, t->st[1], 0, t->st[0]};
    memcpy(ne, n, sizeof n);
    memcpy(st, s, sizeof s);
}

/* QPWCONV's x and y with dense planes as rows of h * w columns: no quad of columns is
 * cut short at a row's end, and x's neighbours are adjacent bytes across rows too. */
static void q_flatten_planes(int64_t xn[4], int64_t xs[4], int64_t yn[4], int64_t ys[4])
{
    if (xs[2] != xn[3] * xs[3] || ys[2] != yn[3] * ys[3])
        return;
    xn[3] *= xn[2];
    yn[3] *= yn[2];
    xn[2] = yn[2] = 1;
    xs[2] = ys[2] = 0;
}

/* The requantized form's checks: its multiplier (source 3, already shaped by
 * ex_td_qconv_rq), its stride and the clamp's low end into pc; dst written by words. */
static ex_status q_conv_rq(vk_exec *e, const ex_node_exec *nd, int64_t co, qc_pc *pc)
{
    const ex_tdesc *m = &nd->src[3];
    ex_status st = q_typed(e, m, EX_F32, 1, "the multiplier");
    if (st == EX_OK && (m->st[0] < 0 || m->st[0] * (co - 1) > INT32_MAX))
        st = vk_fail(e, EX_ERR_UNSUPPORTED, "the multiplier is beyond 32-bit indexing");
    if (st == EX_OK)
        st = q_dst_words(e, &nd->dst);
    if (st != EX_OK)
        return st;
    pc->ms = m->ne[0] == 1 ? 0u : (uint32_t)m->st[0];
    pc->lo = nd->ip[7] ? 0u : (uint32_t)-127;
    return EX_OK;
}

/* The requantized form's dispatches (quant/conv.glsl, rows() and edges(), says which
 * words each invocation makes): planes of p bytes, R = 4 / gcd(p, 4) of them a whole
 * number of words. The words of one plane in TC = 4 channels an invocation (1 depthwise,
 * or where 4 channels of a block would straddle 2 images: R does not divide co and there
 * are 2 images or more), then, in a second dispatch, the words at a plane's edge (every
 * word where planes are below 4 bytes) byte by byte; variant is the sums' variant. */
static ex_status q_conv_rq_go(vk_exec *e, vk_shader_id shader, int32_t variant, int64_t planes,
                              int64_t co, int64_t p, const qc_pc *pc)
{
    int64_t r = p % 4 == 0 ? 1 : p % 2 == 0 ? 2 : 4, per = r * p / 4;
    int one = variant != QC_DEPTHWISE && planes > co && co % r != 0;
    int64_t tc = variant == QC_DEPTHWISE || one ? 1 : 4;
    /* the shader's byte offsets: a block's spans past the last plane too */
    if ((planes + 2 * tc * r) * p > UINT32_MAX)
        return vk_fail(e, EX_ERR_UNSUPPORTED, "dst is beyond the shader's 32-bit indexing");
    ex_status st = EX_OK;
    if (p >= 4) {
        int64_t q = tc == 1 ? planes : co, blocks = (q + tc * r - 1) / (tc * r);
        int64_t items = planes / q * blocks * (per - (r - 1));
        st = vk_dispatch(e, shader, variant | QC_RQ | (one ? QC_RQ_ONE : 0), pc, sizeof *pc,
                         vk_groups(items, 128), 1, 1);
    }
    if (st == EX_OK && (p < 4 || r > 1)) {
        int64_t items = p < 4 ? (planes * p + 3) / 4 : (planes + r - 1) / r * (r - 1);
        int32_t edge = (variant == QC_DEPTHWISE ? QC_DEPTHWISE : QC_DENSE) | QC_RQ | QC_RQ_EDGE;
        st = vk_dispatch(e, VK_SH_quant_conv, edge, pc, sizeof *pc, vk_groups(items, 128), 1, 1);
    }
    return st;
}

/* QCONV2D, QDWCONV2D, QPWCONV and QLINEAR; the first three also requantized into i8
 * (ex_td_qconv_rq). */
static ex_status q_conv(vk_exec *e, const ex_node_exec *nd)
{
    ex_op op = nd->op;
    int dw = op == EX_OP_QDWCONV2D, pw = op == EX_OP_QPWCONV, lin = op == EX_OP_QLINEAR;
    int kernel = !pw && !lin; /* the ops with a window: ip0..5 are their geometry */
    if (nd->src == NULL)
        return vk_fail(e, EX_ERR_ARG, "no sources");
    /* 0: the i32 sums; 1: requantized by source 3 into i8 (ip7 its ReLU) */
    int rq = lin ? (nd->nsrc == 3 ? 0 : -1) : ex_td_qconv_rq(nd);
    if (rq < 0 && lin)
        return vk_fail(e, EX_ERR_ARG, "%d sources, expected 3 (x, w, bias; no requantized form)",
                       nd->nsrc);
    if (rq < 0)
        return vk_fail(e, EX_ERR_ARG,
                       "%d sources, ip7 %d, dst %s: 3 sources (x, w, bias), ip7 0 and an i32 dst "
                       "for the sums, or 4 (the multiplier f32 [Co] or [1]), ip7 0 or 1 (ReLU) "
                       "and an i8 dst for them requantized",
                       nd->nsrc, nd->ip[7], ex_dtype_name(nd->dst.dtype));
    const ex_tdesc *x = &nd->src[0], *w = &nd->src[1], *b = &nd->src[2], *y = &nd->dst;
    ex_status st = q_typed(e, x, EX_I8, lin ? 2 : 4, "x");
    if (st == EX_OK)
        st = q_typed(e, w, EX_I8, kernel ? 4 : 2, "w");
    if (st == EX_OK)
        st = q_typed(e, b, EX_I32, 1, "bias");
    if (st == EX_OK)
        st = q_typed(e, y, rq ? EX_I8 : EX_I32, lin ? 2 : 4, "dst");
    if (st != EX_OK)
        return st;
    const int32_t *ip = nd->ip;
    if (kernel && ip[6] != 0)
        return vk_fail(e, EX_ERR_ARG, "ip6 %d: expected 0 (no fused ReLU before the window)",
                       ip[6]);
    int64_t xn[4], xs[4], wn[4], ws[4], yn[4], ys[4];
    q_as4(w, wn, ws);
    if (lin) {
        q_rows_as_cols(x, xn, xs);
        q_rows_as_cols(y, yn, ys);
    } else {
        q_as4(x, xn, xs);
        q_as4(y, yn, ys);
        if (pw && xn[2] == yn[2] && xn[3] == yn[3])
            q_flatten_planes(xn, xs, yn, ys);
    }
    /* the window (pointwise and linear: 1x1, stride 1, no padding, dilation 1) */
    static const int32_t unit[6] = {1, 1, 0, 0, 1, 1};
    ex_td_conv_geom g;
    char why[320];
    st = ex_td_qconv_geom_of(kernel ? ip : unit, xn, wn, yn, b->ne[0], dw, &g, why, sizeof why);
    if (st != EX_OK)
        return vk_fail(e, st, "%s", why);
    int64_t kh = g.kh, kw = g.kw, sh = g.sh, sw = g.sw, ph = g.ph, pw_ = g.pw, dh = g.dh,
            dw_ = g.dw, ho = g.ho, wo = g.wo, co = g.co;
    if (!ex_td_dst_ok(yn, ys))
        return vk_fail(e, EX_ERR_ARG, "dst broadcasts (stride 0)");
    qc_pc pc;
    memset(&pc, 0, sizeof pc);
    /* the shader's signed coordinates: the windows' extents below 2^30 */
    const int64_t lim = (int64_t)1 << 30;
    int ok = q_pair(kh, kw, &pc.k) && q_pair(sh, sw, &pc.s) && q_pair(ph, pw_, &pc.p) &&
             q_pair(dh, dw_, &pc.dil) && (ho - 1) * sh + (kh - 1) * dh < lim &&
             (wo - 1) * sw + (kw - 1) * dw_ < lim && xn[2] < lim && xn[3] < lim &&
             q_strides(xn, xs, pc.sx) && q_strides(wn, ws, pc.sw) && q_strides(yn, ys, pc.sy) &&
             b->st[0] >= 0 && b->st[0] * (co - 1) <= INT32_MAX;
    if (!ok)
        return vk_fail(e, EX_ERR_UNSUPPORTED, "operands beyond the shader's 32-bit indexing");
    if (rq && (st = q_conv_rq(e, nd, co, &pc)) != EX_OK)
        return st;
    pc.sb = (uint32_t)b->st[0];
    pc.n = (uint32_t)xn[0];
    pc.ci = (uint32_t)xn[1];
    pc.co = (uint32_t)co;
    pc.h = (uint32_t)xn[2];
    pc.wd = (uint32_t)xn[3];
    pc.ho = (uint32_t)ho;
    pc.wo = (uint32_t)wo;
    pc.y = vk_ref(e, y);
    pc.x = vk_ref(e, x);
    pc.w = vk_ref(e, w);
    pc.b = vk_ref_small(e, b);
    if (rq)
        pc.m = vk_ref_small(e, &nd->src[3]);
    /* packed dot products where the device has them and a group of 4 input channels
     * exists (depthwise sums stay on 32-bit arithmetic: quant/conv.glsl says why) */
    int dot = !dw && xn[1] >= 4 && vk_has_int_dot(e);
    vk_shader_id shader = dot ? VK_SH_quant_convdot : VK_SH_quant_conv;
    int32_t variant = dot ? QC_DENSE_DOT : dw ? QC_DEPTHWISE : QC_DENSE;
    if (rq)
        return q_conv_rq_go(e, shader, variant, yn[0] * co, co, ho * wo, &pc);
    /* an invocation's block: 4 output channels (1 depthwise) by 4 output columns */
    int64_t tc = dw ? 1 : 4, items = yn[0] * ((co + tc - 1) / tc) * ho * ((wo + 3) / 4);
    return vk_dispatch(e, shader, variant, &pc, sizeof pc, vk_groups(items, 128), 1, 1);
}

/* ---- pooling ---- */

/* The pooling ops' shared checks: x and dst i8 [N, C, H, W], dst written by words. */
static ex_status qp_setup(vk_exec *e, const ex_node_exec *n, qp_pc *pc)
{
    memset(pc, 0, sizeof *pc);
    ex_status st = q_need(e, n, 1);
    if (st == EX_OK)
        st = q_typed(e, &n->src[0], EX_I8, 4, "x");
    if (st == EX_OK)
        st = q_typed(e, &n->dst, EX_I8, 4, "dst");
    if (st == EX_OK)
        st = q_dst_words(e, &n->dst);
    if (st != EX_OK)
        return st;
    const ex_tdesc *x = &n->src[0];
    if (!vk_fits32(x->ne, x->st))
        return vk_fail(e, EX_ERR_UNSUPPORTED, "x is beyond 32-bit indexing");
    put4(pc->g0, x->ne);
    put4(pc->sx, x->st);
    pc->n = (uint32_t)ex_td_numel(&n->dst);
    return EX_OK;
}

static ex_status q_pool(vk_exec *e, const ex_node_exec *n)
{
    qp_pc pc;
    ex_status st = qp_setup(e, n, &pc);
    if (st != EX_OK)
        return st;
    const ex_tdesc *x = &n->src[0], *y = &n->dst;
    const int32_t *ip = n->ip;
    ex_td_pool_geom pg;
    char why[256];
    st = ex_td_pool_geom_of(ip, x->ne, y->ne, &pg, why, sizeof why);
    if (st != EX_OK)
        return vk_fail(e, st, "%s", why);
    int64_t ho = pg.ho, wo = pg.wo;
    int64_t sh = pg.h + 2 * pg.ph - pg.kh, sw = pg.w + 2 * pg.pw - pg.kw;
    const int64_t lim = (int64_t)1 << 30;
    if (sh + ip[0] >= lim || sw + ip[1] >= lim || ho * ip[2] >= lim || wo * ip[3] >= lim)
        return vk_fail(e, EX_ERR_UNSUPPORTED, "planes beyond 32-bit coordinates");
    const int64_t g1[4] = {ho, wo, ip[0], ip[1]}, g2[4] = {ip[2], ip[3], ip[4], ip[5]};
    put4(pc.g1, g1);
    put4(pc.g2, g2);
    pc.d = vk_ref(e, y);
    pc.x = vk_ref(e, x);
    return vk_dispatch(e, VK_SH_quant_pool, n->op == EX_OP_QMAX_POOL ? QP_MAX : QP_AVG, &pc,
                       sizeof pc, vk_groups(((int64_t)pc.n + 3) / 4, 128), 1, 1);
}

static ex_status q_global_avg_pool(vk_exec *e, const ex_node_exec *n)
{
    qp_pc pc;
    ex_status st = qp_setup(e, n, &pc);
    if (st != EX_OK)
        return st;
    const ex_tdesc *x = &n->src[0], *y = &n->dst;
    char why[160];
    if ((st = ex_td_gap_of(n, why, sizeof why)) != EX_OK)
        return vk_fail(e, st, "%s", why);
    pc.d = vk_ref(e, y);
    pc.x = vk_ref(e, x);
    int64_t words = ((int64_t)pc.n + 3) / 4;
    if (x->ne[2] * x->ne[3] < 128) {
        /* planes smaller than a workgroup: one window of the whole plane an output, as an
         * average pooling (the same sums and rounding) */
        const int64_t g1[4] = {1, 1, x->ne[2], x->ne[3]}, g2[4] = {1, 1, 0, 0};
        put4(pc.g1, g1);
        put4(pc.g2, g2);
        return vk_dispatch(e, VK_SH_quant_pool, QP_AVG, &pc, sizeof pc, vk_groups(words, 128), 1,
                           1);
    }
    uint32_t groups = words > (int64_t)VK_MAX_GROUPS ? VK_MAX_GROUPS : (uint32_t)words;
    return vk_dispatch(e, VK_SH_quant_pool, QP_GAP, &pc, sizeof pc, groups, 1, 1);
}

ex_status vk_run_quant(vk_exec *e, const ex_node_exec *n)
{
    switch (n->op) {
    case EX_OP_QUANTIZE:
    case EX_OP_DEQUANTIZE:
    case EX_OP_REQUANTIZE: return q_scaled(e, n);
    case EX_OP_QADD:
    case EX_OP_QRELU: return q_i8_ew(e, n);
    case EX_OP_QCONCAT: return q_concat(e, n);
    case EX_OP_QCONV2D:
    case EX_OP_QDWCONV2D:
    case EX_OP_QPWCONV:
    case EX_OP_QLINEAR: return q_conv(e, n);
    case EX_OP_QMAX_POOL:
    case EX_OP_QAVG_POOL: return q_pool(e, n);
    case EX_OP_QGLOBAL_AVG_POOL: return q_global_avg_pool(e, n);
    default: return vk_fail(e, EX_ERR_UNSUPPORTED, "not a quantized op");
    }
}
