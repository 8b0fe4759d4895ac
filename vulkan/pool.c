/* Pooling family: AVG_POOL, MAX_POOL, AVG_POOL_BWD, MAX_POOL_BWD and GLOBAL_AVG_POOL,
 * all through pool/pool.comp (see the shader for the algorithm; DARTS's 3x3 stride-1
 * windows walk by columns, PL_COLS). The checks are the CPU backend's. MAX_POOL_BWD takes two
 * dispatches: the places of the window maxima go to scratch (one u32 per output), then the gather
 * reads them; each dispatch binds only what it reads and writes, so the node never needs more than
 * four blocks. */
#include <string.h>

#include "shaders/pool/variants.h"
#include "vulkan/vk.h"

/* Mirrors pool.comp's push constants. */
typedef struct pool_pc {
    uint32_t gate, a, d, at;
    uint32_t g0[4], g1[4], g2[4];
    uint32_t sa[4], sd[4];
} pool_pc;

_Static_assert(sizeof(pool_pc) <= VK_PC_BYTES, "pool.comp's push constants");

static ex_status pool_check_types(vk_exec *e, const ex_node_exec *nd, int nsrc)
{
    if (nd->nsrc != nsrc || nd->src == NULL)
        return vk_fail(e, EX_ERR_ARG, "expected %d sources, got %d", nsrc, nd->nsrc);
    for (int i = 0; i <= nsrc; i++) {
        const ex_tdesc *t = i < nsrc ? &nd->src[i] : &nd->dst;
        if (t->dtype != EX_F32 || t->ndim != 4 || t->buf == NULL)
            return vk_fail(e, EX_ERR_ARG, "operand %d must be a 4-d f32 tensor", i);
    }
    if (!ex_td_dst_ok(nd->dst.ne, nd->dst.st))
        return vk_fail(e, EX_ERR_ARG, "dst broadcasts (stride 0)");
    for (int i = 0; i <= nsrc; i++) {
        const ex_tdesc *t = i < nsrc ? &nd->src[i] : &nd->dst;
        if (!vk_fits32(t->ne, t->st))
            return vk_fail(e, EX_ERR_UNSUPPORTED, "operand %d is beyond 32-bit indexing", i);
    }
    return EX_OK;
}

/** Fills the window of input in and output out (ex_td_pool_geom_of) into pc, within the
 *  shader's 32-bit coordinates. */
static ex_status pool_geom(vk_exec *e, const ex_node_exec *nd, const ex_tdesc *in,
                           const ex_tdesc *out, pool_pc *pc)
{
    ex_td_pool_geom w;
    char why[256];
    ex_status st = ex_td_pool_geom_of(nd->ip, in->ne, out->ne, &w, why, sizeof why);
    if (st != EX_OK)
        return vk_fail(e, st, "%s", why);
    const int32_t *ip = nd->ip;
    int64_t sh = w.h + 2 * w.ph - w.kh, sw = w.w + 2 * w.pw - w.kw, ho = w.ho, wo = w.wo;
    /* the shader's signed coordinates: padded extents and strided spans below 2^30 */
    const int64_t lim = (int64_t)1 << 30;
    if (sh + ip[0] >= lim || sw + ip[1] >= lim || ho * ip[2] >= lim || wo * ip[3] >= lim)
        return vk_fail(e, EX_ERR_UNSUPPORTED, "planes beyond 32-bit coordinates");
    const int64_t g[12] = {in->ne[0], in->ne[1], in->ne[2], in->ne[3], ho,    wo,
                           ip[0],     ip[1],     ip[2],     ip[3],     ip[4], ip[5]};
    for (int i = 0; i < 4; i++) {
        pc->g0[i] = (uint32_t)g[i];
        pc->g1[i] = (uint32_t)g[4 + i];
        pc->g2[i] = (uint32_t)g[8 + i];
    }
    return EX_OK;
}

static void put_strides(uint32_t out[4], const ex_tdesc *t)
{
    for (int d = 0; d < 4; d++)
        out[d] = (uint32_t)t->st[d];
}

static ex_status go(vk_exec *e, int variant, const pool_pc *pc, int64_t count)
{
    return vk_dispatch(e, VK_SH_pool_pool, variant, pc, sizeof *pc, vk_groups(count, 128), 1, 1);
}

/* Whether pool.comp's column walk (PL_COLS) takes the geometry in pc: 3x3 windows,
 * stride 1, padding 1. If so, its bands: halved from whole planes, down to 16 rows, while
 * there are fewer than PL_COLS_UNITS (plane, band, column) units (a band re-reads two halo
 * rows: in a DARTS step, which keeps the GPU full, fewer units win, as for dw.comp's
 * column quads); then pc->g2 holds the rows per band and the bands per plane, and *units
 * their count. */
static int pool_cols(pool_pc *pc, int64_t *units)
{
    static const uint32_t same3[8] = {3, 3, 1, 1, 1, 1};
    if (memcmp(&pc->g1[2], same3, 2 * sizeof *same3) || memcmp(pc->g2, &same3[2], sizeof pc->g2))
        return 0;
    int64_t planes = (int64_t)pc->g0[0] * pc->g0[1], h = pc->g0[2], w = pc->g0[3], band = h;
    while (band > 16 && planes * w * ((h + band - 1) / band) < PL_COLS_UNITS)
        band = (band + 1) / 2;
    pc->g2[0] = (uint32_t)band;
    pc->g2[1] = (uint32_t)((h + band - 1) / band);
    *units = planes * w * pc->g2[1];
    return 1;
}

/* AVG_POOL, MAX_POOL (x -> y) and AVG_POOL_BWD (dy -> dx): one dispatch. */
static ex_status pool_simple(vk_exec *e, const ex_node_exec *n, int variant)
{
    int bwd = variant == PL_AVG_BWD;
    pool_pc pc;
    memset(&pc, 0, sizeof pc);
    ex_status st = pool_check_types(e, n, 1);
    if (st == EX_OK)
        st = bwd ? pool_geom(e, n, &n->dst, &n->src[0], &pc)
                 : pool_geom(e, n, &n->src[0], &n->dst, &pc);
    if (st != EX_OK)
        return st;
    pc.a = vk_ref(e, &n->src[0]);
    pc.d = vk_ref(e, &n->dst);
    pc.at = VK_NOREF;
    put_strides(pc.sa, &n->src[0]);
    put_strides(pc.sd, &n->dst);
    int64_t units = 0;
    if (pool_cols(&pc, &units))
        return go(e, variant + PL_COLS, &pc, units);
    return go(e, variant, &pc, ex_td_numel(&n->dst));
}

/* MAX_POOL_BWD (x, dy -> dx): the maxima's places into scratch, then the gather. */
static ex_status max_pool_bwd(vk_exec *e, const ex_node_exec *n)
{
    pool_pc pc;
    memset(&pc, 0, sizeof pc);
    ex_status st = pool_check_types(e, n, 2);
    if (st == EX_OK)
        st = pool_geom(e, n, &n->src[0], &n->src[1], &pc);
    for (int d = 0; st == EX_OK && d < 4; d++)
        if (n->src[0].ne[d] != n->dst.ne[d])
            st = vk_fail(e, EX_ERR_SHAPE, "x and dx differ in dimension %d", d);
    if (st != EX_OK)
        return st;
    int64_t outs = ex_td_numel(&n->src[1]);
    vk_bind_reset(e);
    pc.a = vk_ref(e, &n->src[0]);
    put_strides(pc.sa, &n->src[0]);
    st = vk_scratch(e, 4 * (uint64_t)outs, &pc.d);
    if (st == EX_OK)
        st = go(e, PL_MAX_AT, &pc, outs);
    if (st != EX_OK)
        return st;
    vk_barrier(e);
    vk_bind_reset(e);
    pc.at = vk_ref_rebind_read(e, pc.d, 0);
    pc.a = vk_ref(e, &n->src[1]);
    pc.d = vk_ref(e, &n->dst);
    put_strides(pc.sa, &n->src[1]);
    put_strides(pc.sd, &n->dst);
    return go(e, PL_MAX_BWD, &pc, ex_td_numel(&n->dst));
}

static ex_status global_avg_pool(vk_exec *e, const ex_node_exec *n)
{
    ex_status st = pool_check_types(e, n, 1);
    if (st != EX_OK)
        return st;
    const ex_tdesc *x = &n->src[0], *y = &n->dst;
    char why[160];
    if ((st = ex_td_gap_of(n, why, sizeof why)) != EX_OK)
        return vk_fail(e, st, "%s", why);
    pool_pc pc;
    memset(&pc, 0, sizeof pc);
    for (int d = 0; d < 4; d++)
        pc.g0[d] = (uint32_t)x->ne[d];
    pc.a = vk_ref(e, x);
    pc.d = vk_ref(e, y);
    pc.at = VK_NOREF;
    put_strides(pc.sa, x);
    put_strides(pc.sd, y);
    int64_t planes = x->ne[0] * x->ne[1];
    uint32_t groups = planes > (int64_t)VK_MAX_GROUPS ? VK_MAX_GROUPS : (uint32_t)planes;
    return vk_dispatch(e, VK_SH_pool_pool, PL_GAP, &pc, sizeof pc, groups, 1, 1);
}

ex_status vk_run_pool(vk_exec *e, const ex_node_exec *n)
{
    switch (n->op) {
    case EX_OP_AVG_POOL: return pool_simple(e, n, PL_AVG);
    case EX_OP_MAX_POOL: return pool_simple(e, n, PL_MAX);
    case EX_OP_AVG_POOL_BWD: return pool_simple(e, n, PL_AVG_BWD);
    case EX_OP_MAX_POOL_BWD: return max_pool_bwd(e, n);
    case EX_OP_GLOBAL_AVG_POOL: return global_avg_pool(e, n);
    default: return vk_fail(e, EX_ERR_UNSUPPORTED, "not a pooling-family op");
    }
}
