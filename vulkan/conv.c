/* Convolution family: CONV2D, CONV2D_BWD_DATA, CONV2D_BWD_FILTER and their depthwise
 * forms. The depthwise geometries of a search (square 3, 5, 7; stride and dilation 1 or 2)
 * go through conv/dw.comp (column quads at stride 1 with "same" padding, else staged
 * tiles; taps in registers); everything else through
 * conv/conv.comp (direct loops). See the shaders for the algorithms. The checks are the
 * CPU backend's; every operand keeps its own strides. The fused ReLU (ip6) is a variant
 * bit of the forward and filter passes, which read max(x, 0); the data gradient masks dx
 * in dw.comp's pass where the mask has dx's strides (a word of push constants the data
 * pass does not use), else in a second dispatch (conv.comp's CV_RELU_MASK), as conv.comp's
 * push constants are full. */
#include <string.h>

#include "shaders/conv/variants.h"
#include "vulkan/vk.h"

/* Mirrors conv.comp's push constants. */
typedef struct conv_pc {
    uint32_t gate, x, w, y;
    uint32_t g0[4], g1[4], g2[4], g3[4];
    uint32_t sx[4], sw[4], sy[4];
} conv_pc;

_Static_assert(sizeof(conv_pc) <= VK_PC_BYTES, "conv.comp's push constants");

/** (chunk, tap) items the filter gradient aims at: enough to fill a GPU, few enough that
 *  the shares' scratch stays small (at most 4 bytes each). */
#define CONV_FILTER_ITEMS 65536

/** Whether the shader's signed 32-bit coordinate arithmetic holds for this geometry. */
static int conv_fits(const int64_t g[16])
{
    const int64_t lim = (int64_t)1 << 30;
    /* g: n ci co depthwise | h w ho wo | kh kw sh sw | ph pw dh dw */
    return g[4] + 2 * g[12] < lim && g[5] + 2 * g[13] < lim && g[14] * g[8] < lim &&
           g[15] * g[9] < lim && g[10] * g[6] < lim && g[11] * g[7] < lim &&
           g[2] * (g[3] ? 1 : g[1]) * g[8] * g[9] <= INT32_MAX && g[0] * g[6] * g[7] <= INT32_MAX;
}

/** Strides of a checked 4-d operand into out, or 0 when beyond 32-bit indexing. */
static int conv_strides(const ex_tdesc *t, uint32_t out[4])
{
    if (!vk_fits32(t->ne, t->st))
        return 0;
    for (int d = 0; d < 4; d++)
        out[d] = (uint32_t)t->st[d];
    return 1;
}

/* The filter gradient (x, dy -> dw). Enough (chunk, tap) items to fill a device, from
 * the shape alone: at least one chunk of output rows, at most one chunk per row. One
 * chunk writes dw directly; more write their shares to scratch, which a second dispatch
 * adds in order. Each dispatch binds only what it touches, so the scratch never needs a
 * fifth binding. */
static ex_status conv_filter(vk_exec *e, const ex_tdesc *x, const ex_tdesc *w, const ex_tdesc *y,
                             const int64_t g[16], conv_pc *pc, int dwv, int relu)
{
    int64_t taps = g[2] * (dwv ? 1 : g[1]) * g[8] * g[9], rows = g[0] * g[6];
    int64_t chunks = CONV_FILTER_ITEMS / taps;
    chunks = chunks < 1 ? 1 : chunks > rows ? rows : chunks;
    pc->g0[3] = (uint32_t)chunks;
    vk_bind_reset(e);
    pc->x = vk_ref(e, x);
    pc->y = vk_ref(e, y);
    if (chunks == 1) {
        pc->w = vk_ref(e, w);
        return vk_dispatch(e, VK_SH_conv_conv, CV_FILTER_PART + dwv + relu, pc, sizeof *pc,
                           vk_groups(taps, 128), 1, 1);
    }
    uint32_t sw[4] = {pc->sw[0], pc->sw[1], pc->sw[2], pc->sw[3]}, part = 0;
    /* the shares' layout: [chunk][co][cin][kh][kw], contiguous */
    pc->sw[3] = 1;
    pc->sw[2] = (uint32_t)g[9];
    pc->sw[1] = (uint32_t)(g[8] * g[9]);
    pc->sw[0] = (uint32_t)(taps / g[2]);
    ex_status st = vk_scratch(e, 4 * (uint64_t)(taps * chunks), &part);
    pc->w = part;
    if (st == EX_OK)
        st = vk_dispatch(e, VK_SH_conv_conv, CV_FILTER_PART + dwv + relu, pc, sizeof *pc,
                         vk_groups(taps * chunks, 128), 1, 1);
    if (st != EX_OK)
        return st;
    vk_barrier(e);
    vk_bind_reset(e);
    pc->x = vk_ref_rebind_read(e, part, 0);
    pc->y = VK_NOREF;
    pc->w = vk_ref(e, w);
    memcpy(pc->sw, sw, sizeof sw);
    return vk_dispatch(e, VK_SH_conv_conv, CV_FILTER_SUM + dwv, pc, sizeof *pc,
                       vk_groups(taps, 128), 1, 1);
}

/** Units (a quad column of a band of rows) the column quads' forward and data passes aim
 *  at: bands are halved, down to 8 rows, while there are fewer. Larger shapes gain from
 *  more units; a DARTS step, whose rounds run many passes at once, loses from smaller
 *  bands (bench/results/README.md, "Vulkan tuning"). */
#define DW_QUAD_UNITS 262144

/* Mirrors dw.comp's push constants. */
typedef struct dw_pc {
    uint32_t gate, x, w, y;
    uint32_t n, c, h, wd;
    uint32_t ho, wo, pad, tile;
    uint32_t tiles_w, tiles, g, units;
    uint32_t prow, pcol, items, ns; /* ns: the ReLU mask's reference in the data pass */
    uint32_t sx[4], sy[4];
    uint32_t swc, swh, sww, parts;
} dw_pc;

_Static_assert(sizeof(dw_pc) <= VK_PC_BYTES, "dw.comp's push constants");

/* dw.comp's geometry index (its variant over 4), or -1 where it has none: a square kernel
 * of 3, 5 or 7, stride and dilation 1 or 2 along both axes, padding below 2^16. */
static int dw_geometry(const int64_t g[16])
{
    int64_t k = g[8], s = g[10], d = g[14];
    if (g[9] != k || g[11] != s || g[15] != d || (k != 3 && k != 5 && k != 7) || s < 1 || s > 2 ||
        d < 1 || d > 2 || g[12] > 0xFFFF || g[13] > 0xFFFF)
        return -1;
    return (int)(((k - 3) / 2) * 4 + (s - 1) * 2 + (d - 1));
}

/* Rows (or columns) of the window that `rows` rows of a tile read: in x for the forward
 * and filter passes, in dy for backward-data (a gather at stride s). */
static int64_t dw_window(int which, int64_t rows, int64_t k, int64_t s, int64_t d)
{
    return which == 1 ? (rows - 1 + (k - 1) * d + s - 1) / s + 1 : (rows - 1) * s + (k - 1) * d + 1;
}

/* The tiles of one pass: at most 32x32 (in y's space; x's for backward-data), halved
 * until the windows (and dy's tile, for the filter) fit DW_SMEM floats; small planes are
 * packed several to a workgroup. 0 when not even a 4x4 tile fits. */
static int dw_tiles(int which, const int64_t g[16], dw_pc *pc)
{
    int64_t k = g[8], s = g[10], d = g[14];
    int64_t oh = which == 1 ? g[4] : g[6], ow = which == 1 ? g[5] : g[7];
    int64_t th = oh < 32 ? oh : 32, tw = ow < 32 ? ow : 32, thr, need;
    for (;;) {
        thr = (th + DW_RH - 1) / DW_RH * DW_RH;
        pc->prow = (uint32_t)dw_window(which, thr, k, s, d);
        pc->pcol = (uint32_t)dw_window(which, tw, k, s, d);
        need = (int64_t)pc->prow * pc->pcol + (which == 2 ? thr * tw : 0);
        if (need <= DW_SMEM)
            break;
        if (th > DW_RH)
            th = ((th + 1) / 2 + DW_RH - 1) / DW_RH * DW_RH;
        else if (tw > 4)
            tw = (tw + 1) / 2;
        else
            return 0;
    }
    pc->tile = (uint32_t)(th | tw << 16);
    pc->units = (uint32_t)(tw * (thr / DW_RH));
    pc->tiles_w = (uint32_t)((ow + tw - 1) / tw);
    pc->tiles = pc->tiles_w * (uint32_t)((oh + th - 1) / th);
    int64_t gp = 1;
    if (pc->tiles == 1 && pc->units < 128) {
        gp = 128 / pc->units;
        gp = gp > DW_MAXG ? DW_MAXG : gp;
        gp = gp > DW_SMEM / need ? DW_SMEM / need : gp;
    }
    pc->g = (uint32_t)gp;
    return 1;
}

/* Whether an operand (reference ref, strides s) of a column-quad pass can be read and
 * written as 16-byte quads: its binding starts on 16 bytes, its reference's offset and
 * its row and plane strides are multiples of 4 elements, its columns are adjacent. */
static int dw_vec4_ok(const vk_exec *e, uint32_t ref, const uint32_t s[4])
{
    if (ref == VK_NOREF || (ref & VK_REF_UNIFORM))
        return 0;
    return e->slot[ref >> 30].lo % 16 == 0 && (ref & VK_REF_MAX_ELEM) % 4 == 0 && s[3] == 1 &&
           s[2] % 4 == 0 && s[1] % 4 == 0 && s[0] % 4 == 0;
}

/* DW_VEC4 for a column-quad pass (variant base vb) whose references pc already holds
 * (mask: the data pass's ReLU mask, VK_NOREF without): rows of whole quads (so not single
 * columns either), and x, y and the mask readable as 16-byte words. */
static int dw_vec4(const vk_exec *e, int vb, const dw_pc *pc, uint32_t mask)
{
    return (vb & DW_QUAD) && pc->wd % 4 == 0 && dw_vec4_ok(e, pc->x, pc->sx) &&
                   dw_vec4_ok(e, pc->y, pc->sy) && (mask == VK_NOREF || dw_vec4_ok(e, mask, pc->sx))
               ? DW_VEC4
               : 0;
}

/* The depthwise filter gradient through dw.comp: a workgroup per (channel, range of
 * samples, tile) (dw_ranges), partials into scratch and their ordered sum (one range per
 * channel and tile writes dw directly). Each dispatch binds only what it touches: x, dy
 * and the partials it writes, then the partials it reads and dw. */
static ex_status dw_filter(vk_exec *e, const ex_tdesc *x, const ex_tdesc *w, const ex_tdesc *y,
                           int vb, int relu, dw_pc *pc)
{
    int geo = (vb & (DW_RELU - 1)) / 4;
    int64_t c = pc->c, parts = pc->parts, t = (int64_t)(3 + 2 * (geo / 4)) * (3 + 2 * (geo / 4));
    uint32_t groups = vk_groups(pc->items, 1);
    pc->x = vk_ref(e, x);
    pc->y = vk_ref(e, y);
    vb += dw_vec4(e, vb, pc, VK_NOREF);
    if (parts == 1) {
        pc->w = vk_ref(e, w);
        return vk_dispatch(e, VK_SH_conv_dw, DW_FILTER + vb + relu, pc, sizeof *pc, groups, 1, 1);
    }
    ex_status st = vk_scratch(e, 4 * (uint64_t)(parts * c * t), &pc->w);
    if (st == EX_OK)
        st = vk_dispatch(e, VK_SH_conv_dw, DW_FILTER + vb + relu, pc, sizeof *pc, groups, 1, 1);
    if (st != EX_OK)
        return st;
    vk_barrier(e);
    vk_bind_reset(e);
    pc->x = vk_ref_rebind_read(e, pc->w, 0);
    pc->y = VK_NOREF;
    pc->w = vk_ref(e, w);
    return vk_dispatch(e, VK_SH_conv_dw, DW_FSUM + 4 * geo, pc, sizeof *pc, vk_groups(c * t, 8), 1,
                       1);
}

/* The filter gradient's ranges of samples (pc->ns each) and partials per channel
 * (pc->parts): as many ranges as make about DW_PARTS workgroups, from the shape alone.
 * 0 when the partials would pass DW_PART_MAX floats. */
static int dw_ranges(const int64_t g[16], dw_pc *pc)
{
    int64_t n = g[0], c = g[1], t = g[8] * g[9];
    int64_t stages = c * ((n + pc->g - 1) / pc->g) * pc->tiles, per = stages / DW_PARTS;
    int64_t ns = pc->g * (per < 1 ? 1 : per), parts;
    ns = ns > n ? n : ns;
    parts = (n + ns - 1) / ns * pc->tiles;
    if (parts > 1 && parts * c * t > DW_PART_MAX)
        return 0;
    pc->ns = (uint32_t)ns;
    pc->parts = (uint32_t)parts;
    pc->items = (uint32_t)(c * parts);
    return 1;
}

/* Columns a column-quad invocation owns: 4, or 1 (DW_COL1) for rows of fewer than 8
 * columns that are not of whole quads (dw.comp says why; dw_quad_ok takes 5 to 7). */
static int64_t dw_quad_width(const int64_t g[16])
{
    return g[5] % 4 != 0 && g[5] < 8 ? 1 : 4;
}

/* Whether the column quads (DW_QUAD) take the geometry: stride 1, "same" padding, a
 * ring of at most 9 rows ((k - 1) d <= 8), rows of m quads (the last may be partial) or
 * columns (DW_COL1) with m at most 128 (the filter gradient's workgroup holds whole rows
 * of them: 128 / m). Rows of 1 to 3 columns keep the staged tiles: no search's planes
 * are that narrow but its last reduction's of tiny inputs, where single columns gain
 * nothing, and their filter gradient's other order of sums moved test_backend_search's
 * alpha past its bound (a kink crossed at its 8x8 input's 2x2 planes in step 3). */
static int dw_quad_ok(const int64_t g[16])
{
    int64_t qw = dw_quad_width(g), p = (g[8] - 1) * g[14] / 2, q = (g[5] + qw - 1) / qw;
    return g[10] == 1 && g[11] == 1 && g[12] == p && g[13] == p && (g[8] - 1) * g[14] <= 8 &&
           q >= 1 && q <= 128 && (qw == 4 || g[5] >= 5);
}

/* Rows per band (pc->tile), bands per plane (tiles), quads per row (tiles_w) for the
 * column quads: bands halved from whole planes, down to 16 rows, while there are fewer
 * than DW_QUAD_UNITS units (a band re-reads (k - 1) d halo rows; in a DARTS step, whose
 * rounds keep the GPU full, whole small planes beat bands, here and in pool.c alike).
 * The filter gradient's bands: at most 8 rows, and ranges (ns samples, parts per channel)
 * of about DW_PARTS workgroups, each with at least one unit per invocation where the
 * shape has them. */
static int dw_quad_plan(int which, const int64_t g[16], dw_pc *pc)
{
    int64_t n = g[0], c = g[1], h = g[4], band = h;
    int64_t qw = (g[5] + dw_quad_width(g) - 1) / dw_quad_width(g);
    if (which != 2)
        while (band > 16 && n * c * qw * ((h + band - 1) / band) < DW_QUAD_UNITS)
            band = (band + 1) / 2;
    else
        band = h < 8 ? h : 8;
    int64_t nb = (h + band - 1) / band;
    pc->tile = (uint32_t)band;
    pc->tiles = (uint32_t)nb;
    pc->tiles_w = (uint32_t)qw;
    if (which != 2) {
        int64_t units = n * c * qw * nb;
        pc->units = (uint32_t)units;
        return units <= INT32_MAX;
    }
    int64_t slots = 128 / qw, nsmin = (slots + nb - 1) / nb, per = DW_PARTS / c;
    int64_t ranges = (n + nsmin - 1) / nsmin;
    ranges = ranges < per ? ranges : per < 1 ? 1 : per;
    int64_t ns = (n + ranges - 1) / ranges;
    ranges = (n + ns - 1) / ns;
    pc->ns = (uint32_t)ns;
    pc->parts = (uint32_t)ranges;
    pc->items = (uint32_t)(c * ranges);
    return c * ranges <= INT32_MAX && (ranges == 1 || ranges * c * g[8] * g[9] <= DW_PART_MAX);
}

/* Fills pc for a depthwise pass through dw.comp and returns its variant base (the
 * geometry index times 4, plus DW_QUAD, and DW_COL1 for single columns, where the
 * column quads take it, else the staged tiles), or -1 where dw.comp does not take the geometry, a
 * tile does not fit or the counts are beyond its indexing or scratch (conv.comp then takes the
 * pass). */
static int dw_plan(int which, const ex_tdesc *x, const ex_tdesc *w, const ex_tdesc *y,
                   const int64_t g[16], dw_pc *pc)
{
    int geo = dw_geometry(g), quad = 0;
    memset(pc, 0, sizeof *pc);
    if (geo >= 0 && dw_quad_ok(g))
        quad = dw_quad_plan(which, g, pc);
    if (!quad)
        memset(pc, 0, sizeof *pc);
    if (geo < 0 || !conv_strides(x, pc->sx) || !conv_strides(y, pc->sy) || !vk_fits32(w->ne, w->st))
        return -1;
    if (!quad &&
        (!dw_tiles(which, g, pc) || (g[0] * g[1] + pc->g - 1) / pc->g * pc->tiles > INT32_MAX ||
         (which == 2 && !dw_ranges(g, pc))))
        return -1;
    pc->n = (uint32_t)g[0];
    pc->c = (uint32_t)g[1];
    pc->h = (uint32_t)g[4];
    pc->wd = (uint32_t)g[5];
    pc->ho = (uint32_t)g[6];
    pc->wo = (uint32_t)g[7];
    pc->pad = (uint32_t)(g[12] | g[13] << 16);
    pc->swc = (uint32_t)w->st[0];
    pc->swh = (uint32_t)w->st[2];
    pc->sww = (uint32_t)w->st[3];
    if (which != 2 && !quad)
        pc->items = (uint32_t)((g[0] * g[1] + pc->g - 1) / pc->g * pc->tiles);
    return 4 * geo + (quad ? DW_QUAD + (dw_quad_width(g) == 1 ? DW_COL1 : 0) : 0);
}

/* A depthwise pass through dw.comp, planned by dw_plan; relu: the fused ReLU's variant
 * bit (forward and filter passes); mask (data pass, NULL without): the fused ReLU's
 * mask, applied in the pass where it has dx's strides and finds a binding. Returns in
 * *masked whether it was. */
static ex_status dw_run(vk_exec *e, int which, const ex_tdesc *x, const ex_tdesc *w,
                        const ex_tdesc *y, int vb, int relu, const ex_tdesc *mask, dw_pc *pc,
                        int *masked)
{
    int rv = relu ? DW_RELU : 0;
    *masked = 0;
    if (which == 2)
        return dw_filter(e, x, w, y, vb, rv, pc);
    pc->x = vk_ref(e, x);
    pc->w = vk_ref(e, w);
    pc->y = vk_ref(e, y);
    pc->ns = VK_NOREF;
    uint32_t ms[4];
    if (mask && conv_strides(mask, ms) && !memcmp(ms, pc->sx, sizeof ms) && vk_room(e, &mask, 1)) {
        pc->ns = vk_ref(e, mask);
        *masked = 1;
    }
    int variant = (which == 0 ? DW_FWD + rv : DW_DATA) + vb + dw_vec4(e, vb, pc, pc->ns);
    uint32_t groups = vb & DW_QUAD ? vk_groups(pc->units, 128) : vk_groups(pc->items, 1);
    return vk_dispatch(e, VK_SH_conv_dw, variant, pc, sizeof *pc, groups, 1, 1);
}

/* The fused ReLU's data gradient, after the pass that wrote dx: dx = 0 where the input x
 * (the node's third source, strides checked) is not above 0. */
static ex_status conv_relu_mask(vk_exec *e, const ex_tdesc *x, const ex_tdesc *dx)
{
    conv_pc pc;
    memset(&pc, 0, sizeof pc);
    conv_strides(x, pc.sx);
    conv_strides(dx, pc.sy);
    pc.g0[0] = (uint32_t)dx->ne[0];
    pc.g0[1] = (uint32_t)dx->ne[1];
    pc.g1[0] = (uint32_t)dx->ne[2];
    pc.g1[1] = (uint32_t)dx->ne[3];
    vk_barrier(e);
    const ex_tdesc *t[2] = {x, dx};
    if (!vk_room(e, t, 2))
        vk_bind_reset(e); /* the pass before took the bindings x needs */
    pc.x = vk_ref(e, x);
    pc.y = vk_ref(e, dx);
    pc.w = VK_NOREF;
    return vk_dispatch(e, VK_SH_conv_conv, CV_RELU_MASK, &pc, sizeof pc,
                       vk_groups(ex_td_numel(dx), 128), 1, 1);
}

/* which: 0 forward (x, w -> y), 1 backward data (dy, w -> dx), 2 filter (x, dy -> dw). */
static ex_status conv_run(vk_exec *e, const ex_node_exec *nd, int which, int depthwise)
{
    ex_td_conv c;
    char why[320];
    ex_status st = ex_td_conv_of(nd, &c, why, sizeof why);
    if (st != EX_OK)
        return vk_fail(e, st, "%s", why);
    uint32_t mask_st[4];
    if (c.mask && !conv_strides(c.mask, mask_st))
        return vk_fail(e, EX_ERR_UNSUPPORTED, "operands beyond 32-bit indexing");
    const ex_tdesc *x = c.x, *w = c.w, *y = c.y;
    int relu = c.g.relu;
    /* g: n ci co depthwise | h w ho wo | kh kw sh sw | ph pw dh dw, as the shaders take it */
    int64_t g[16] = {c.g.n,  c.g.ci, c.g.co, depthwise, c.g.h,  c.g.w,  c.g.ho, c.g.wo,
                     c.g.kh, c.g.kw, c.g.sh, c.g.sw,    c.g.ph, c.g.pw, c.g.dh, c.g.dw};
    conv_pc pc;
    memset(&pc, 0, sizeof pc);
    if (!conv_fits(g) || !conv_strides(x, pc.sx) || !conv_strides(w, pc.sw) ||
        !conv_strides(y, pc.sy))
        return vk_fail(e, EX_ERR_UNSUPPORTED, "operands beyond 32-bit indexing");
    for (int i = 0; i < 4; i++) {
        pc.g0[i] = i < 3 ? (uint32_t)g[i] : 0;
        pc.g1[i] = (uint32_t)g[4 + i];
        pc.g2[i] = (uint32_t)g[8 + i];
        pc.g3[i] = (uint32_t)g[12 + i];
    }
    dw_pc dpc;
    int geo = depthwise ? dw_plan(which, x, w, y, g, &dpc) : -1;
    int dwv = depthwise ? CV_DEPTHWISE : 0, rv = relu ? CV_RELU : 0;
    int masked = 0;
    if (geo >= 0) {
        st = dw_run(e, which, x, w, y, geo, relu, c.mask, &dpc, &masked);
    } else if (which == 2) {
        st = conv_filter(e, x, w, y, g, &pc, dwv, rv);
    } else {
        pc.x = vk_ref(e, x);
        pc.w = vk_ref(e, w);
        pc.y = vk_ref(e, y);
        int64_t count = which == 0 ? ex_td_numel(y) : ex_td_numel(x);
        st = vk_dispatch(e, VK_SH_conv_conv, (which == 0 ? CV_FWD + rv : CV_BWD_DATA) + dwv, &pc,
                         sizeof pc, vk_groups(count, 128), 1, 1);
    }
    if (st == EX_OK && c.mask && !masked)
        st = conv_relu_mask(e, c.mask, x); /* x's role is dx's here */
    return st;
}

ex_status vk_run_conv(vk_exec *e, const ex_node_exec *n)
{
    switch (n->op) {
    case EX_OP_CONV2D: return conv_run(e, n, 0, 0);
    case EX_OP_CONV2D_BWD_DATA: return conv_run(e, n, 1, 0);
    case EX_OP_CONV2D_BWD_FILTER: return conv_run(e, n, 2, 0);
    case EX_OP_DWCONV2D: return conv_run(e, n, 0, 1);
    case EX_OP_DWCONV2D_BWD_DATA: return conv_run(e, n, 1, 1);
    case EX_OP_DWCONV2D_BWD_FILTER: return conv_run(e, n, 2, 1);
    default: return vk_fail(e, EX_ERR_UNSUPPORTED, "not a convolution-family op");
    }
}
