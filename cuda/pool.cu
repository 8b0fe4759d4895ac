/* Average, max and global average pooling with their backward passes.
 *
 * Windows are clipped to the input: padding never counts, neither in an average nor as
 * a maximum. Blocks work on one (n, c) plane at a time (32-bit index arithmetic inside
 * it). Forward kernels give each output to one thread, which walks its window in
 * row-major order as the CPU backend does. Backward kernels give each input element to
 * one thread, which gathers from the outputs whose windows hold it, in output order:
 * the CPU backend scatters in that same order, so no atomics are needed and the sums
 * come out the same. Max pooling's backward first stores each window's first maximum, so
 * the gather compares indices instead of searching every window again. Stride-1
 * pooling of rows up to 32 wide (DARTS's 3x3 pools) runs on warp rows instead (cuda.h):
 * no staging, and max pooling's backward in one pass; there averages sum by column
 * first, so they may differ from the CPU's in the last bits. */
#include "cuda/cuda.h"

/** A pooling window, decoded in core (core/tdesc.h). */
typedef ex_td_pool_geom pool_geom;

static ex_status pool_check_types(cu_exec *e, const ex_node_exec *nd, int nsrc, const char *name)
{
    if (nd->nsrc != nsrc || nd->src == NULL)
        return cu_fail(e, EX_ERR_ARG, "%s: expected %d sources, got %d", name, nsrc, nd->nsrc);
    for (int i = 0; i <= nsrc; i++) {
        const ex_tdesc *t = i < nsrc ? &nd->src[i] : &nd->dst;
        if (t->dtype != EX_F32 || t->ndim != 4 || t->buf == NULL)
            return cu_fail(e, EX_ERR_ARG, "%s: operand %d must be a 4-d f32 tensor", name, i);
    }
    return EX_OK;
}

/** Reads the window of input in and output out (ex_td_pool_geom_of). */
static ex_status pool_geom_of(cu_exec *e, const ex_node_exec *nd, const ex_tdesc *in,
                              const ex_tdesc *out, const char *name, pool_geom *g)
{
    char why[256];
    ex_status st = ex_td_pool_geom_of(nd->ip, in->ne, out->ne, g, why, sizeof why);
    return st == EX_OK ? EX_OK : cu_fail(e, st, "%s: %s", name, why);
}

static ex_status pool_same_shape(cu_exec *e, const ex_tdesc *a, const ex_tdesc *b, const char *name)
{
    for (int d = 0; d < 4; d++)
        if (a->ne[d] != b->ne[d])
            return cu_fail(e, EX_ERR_SHAPE, "%s: x and dx differ in dimension %d", name, d);
    return EX_OK;
}

/** The in-plane geometry in 32 bits (the host checks that it fits) and the plane counts. */
typedef struct pool_g32 {
    int h, w, ho, wo, kh, kw, sh, sw, ph, pw;
    int64_t planes, c;
} pool_g32;

static ex_status pool_g32_of(cu_exec *e, const pool_geom *g, const char *name, pool_g32 *r)
{
    const int64_t lim = (int64_t)1 << 30;
    if (g->h * g->w >= lim || g->ho * g->wo >= lim || g->kh * g->kw >= lim)
        return cu_fail(e, EX_ERR_UNSUPPORTED, "%s: planes of 2^30 elements or more", name);
    pool_g32 v = {(int)g->h,  (int)g->w,  (int)g->ho, (int)g->wo, (int)g->kh,  (int)g->kw,
                  (int)g->sh, (int)g->sw, (int)g->ph, (int)g->pw, g->n * g->c, g->c};
    *r = v;
    return EX_OK;
}

/** The input rows (or columns) [*a, *b) of output o's window, clipped to [0, in). */
__device__ __forceinline__ void pool_span(int o, int s, int p, int k, int in, int *a, int *b)
{
    int lo = o * s - p, hi = o * s - p + k;
    *a = lo < 0 ? 0 : lo;
    *b = hi > in ? in : hi;
}

/** The outputs [*a, *b] whose windows along one axis hold input i. */
__device__ __forceinline__ void pool_outs(int i, int s, int p, int k, int out, int *a, int *b)
{
    int lo = i + p - k + 1, hi = (i + p) / s;
    *a = lo <= 0 ? 0 : (lo + s - 1) / s;
    *b = hi < out - 1 ? hi : out - 1;
}

/** Whether v replaces best as the window maximum: the first maximum wins, and a NaN wins
 *  once and then stays, so NaNs propagate. */
__device__ __forceinline__ bool pool_better(float v, float best)
{
    return v > best || (v != v && best == best);
}

/** One (n, c) plane of an operand: element (0, 0) and the row and column strides. */
typedef struct pool_plane {
    float *p;
    int64_t sr, sc;
} pool_plane;

__device__ __forceinline__ pool_plane plane_of(const cu_t4 &t, int64_t plane, int64_t c)
{
    pool_plane v = {(float *)t.p + plane / c * t.st[0] + plane % c * t.st[1], t.st[2], t.st[3]};
    return v;
}

/* Staged kernels (STAGE 1) first copy their block's plane into shared memory with
 * coalesced loads, then read every window from there: the windows of neighbouring
 * outputs overlap k·k times. One block a plane then (the grid's y is 1). */
#define POOL_STAGE_BYTES 16384

/** Copies an h x w plane into sm and returns it as a dense plane; the block must not be
 *  reading sm any more (callers sync at the end of each plane). */
template <typename T>
__device__ pool_plane stage_plane(const T *src, int64_t sr, int64_t sc, int h, int w, T *sm)
{
    for (int i = threadIdx.x; i < h * w; i += blockDim.x)
        sm[i] = src[(int64_t)(i / w) * sr + (int64_t)(i % w) * sc];
    __syncthreads();
    pool_plane v = {(float *)sm, w, 1};
    return v;
}

/** The first maximum of output (oh, ow)'s window and where it lies (ih * w + iw). */
__device__ float max_window(const pool_g32 &g, const pool_plane &x, int oh, int ow, int *at)
{
    int h0, h1, w0, w1;
    pool_span(oh, g.sh, g.ph, g.kh, g.h, &h0, &h1);
    pool_span(ow, g.sw, g.pw, g.kw, g.w, &w0, &w1);
    float best = -INFINITY;
    *at = h0 * g.w + w0;
    for (int ih = h0; ih < h1; ih++)
        for (int iw = w0; iw < w1; iw++) {
            float v = x.p[ih * x.sr + iw * x.sc];
            if (pool_better(v, best)) {
                best = v;
                *at = ih * g.w + iw;
            }
        }
    return best;
}

/* MAX: max pooling, else average. */
template <int MAX, int STAGE>
__global__ void pool_fwd_kernel(pool_g32 g, cu_t4 x, cu_t4 y, const float *gate)
{
    extern __shared__ float pool_sm[];
    if (cu_gated_off(gate))
        return;
    CU_PLANE_LOOP(g.planes)
    {
        pool_plane xp = plane_of(x, plane, g.c), yp = plane_of(y, plane, g.c);
        if (STAGE)
            xp = stage_plane(xp.p, xp.sr, xp.sc, g.h, g.w, pool_sm);
        CU_POS_LOOP(p, g.ho * g.wo)
        {
            int oh = p / g.wo, ow = p % g.wo;
            float *out = yp.p + oh * yp.sr + ow * yp.sc;
            if (MAX) {
                int at;
                *out = max_window(g, xp, oh, ow, &at);
                continue;
            }
            int h0, h1, w0, w1;
            pool_span(oh, g.sh, g.ph, g.kh, g.h, &h0, &h1);
            pool_span(ow, g.sw, g.pw, g.kw, g.w, &w0, &w1);
            float acc = 0.0f;
            for (int ih = h0; ih < h1; ih++)
                for (int iw = w0; iw < w1; iw++)
                    acc += xp.p[ih * xp.sr + iw * xp.sc];
            *out = acc / (float)((h1 - h0) * (w1 - w0));
        }
        if (STAGE)
            __syncthreads();
    }
}

/* Max pooling's backward, pass 1: where each window's first maximum lies (the in-plane
 * index ih * w + iw), one int per output. */
template <int STAGE> __global__ void max_at_kernel(pool_g32 g, cu_t4 x, int *at, const float *gate)
{
    extern __shared__ float pool_sm[];
    if (cu_gated_off(gate))
        return;
    CU_PLANE_LOOP(g.planes)
    {
        pool_plane xp = plane_of(x, plane, g.c);
        if (STAGE)
            xp = stage_plane(xp.p, xp.sr, xp.sc, g.h, g.w, pool_sm);
        CU_POS_LOOP(p, g.ho * g.wo)
        {
            int a;
            max_window(g, xp, p / g.wo, p % g.wo, &a);
            at[plane * g.ho * g.wo + p] = a;
        }
        if (STAGE)
            __syncthreads();
    }
}

/* dx of one input element: the dy of every window holding it, in output order; average
 * pooling spreads each dy evenly, max pooling (at not NULL) routes it to the window's
 * first maximum. */
template <int STAGE>
__global__ void pool_bwd_kernel(pool_g32 g, const int *at, cu_t4 dy, cu_t4 dx, const float *gate)
{
    extern __shared__ float pool_sm[];
    if (cu_gated_off(gate))
        return;
    CU_PLANE_LOOP(g.planes)
    {
        pool_plane dp = plane_of(dy, plane, g.c), op = plane_of(dx, plane, g.c);
        const int *ap = at ? at + plane * g.ho * g.wo : NULL;
        if (STAGE) { /* dy's plane, then the maxima's places after it */
            int *sat = (int *)(pool_sm + g.ho * g.wo);
            for (int i = threadIdx.x; ap && i < g.ho * g.wo; i += blockDim.x)
                sat[i] = ap[i];
            ap = ap ? sat : NULL;
            dp = stage_plane(dp.p, dp.sr, dp.sc, g.ho, g.wo, pool_sm);
        }
        CU_POS_LOOP(p, g.h * g.w)
        {
            int ih = p / g.w, iw = p % g.w, oh0, oh1, ow0, ow1;
            pool_outs(ih, g.sh, g.ph, g.kh, g.ho, &oh0, &oh1);
            pool_outs(iw, g.sw, g.pw, g.kw, g.wo, &ow0, &ow1);
            float acc = 0.0f;
            for (int oh = oh0; oh <= oh1; oh++)
                for (int ow = ow0; ow <= ow1; ow++) {
                    float d = dp.p[oh * dp.sr + ow * dp.sc];
                    if (ap) {
                        if (ap[oh * g.wo + ow] == p)
                            acc += d;
                        continue;
                    }
                    int h0, h1, w0, w1;
                    pool_span(oh, g.sh, g.ph, g.kh, g.h, &h0, &h1);
                    pool_span(ow, g.sw, g.pw, g.kw, g.w, &w0, &w1);
                    acc += d / (float)((h1 - h0) * (w1 - w0));
                }
            op.p[ih * op.sr + iw * op.sc] = acc;
        }
        if (STAGE)
            __syncthreads();
    }
}

/* ---- stride 1, rows of up to 32 columns: warp rows (cuda.h) ----
 * A warp loads the source rows of POOL_ROWS destination rows at once (loads in flight
 * rather than one row's latency after another), then computes those rows. KR bounds the
 * window's height and width at compile time, so the rows live in registers. Windows are
 * taken apart by axis, so that a window costs kw shuffles, not kh·kw. */
#define POOL_ROWS 8

/* The forward: each output belongs to its column's lane, which combines its own
 * column's rows (registers), then its neighbours' columns. Averages may differ from the
 * CPU's row-major sums in the last bits; maxima are the same either way. */
template <int MAX, int KR>
__global__ void pool_rows_fwd_kernel(pool_g32 g, int seg, cu_t4 x, cu_t4 y, const float *gate)
{
    if (cu_gated_off(gate))
        return;
    cu_wrow r = cu_wrow_of(seg);
    bool on = r.plane < g.planes;
    pool_plane xp = plane_of(x, on ? r.plane : 0, g.c), yp = plane_of(y, on ? r.plane : 0, g.c);
    bool load = on && r.col < g.w, store = on && r.col < g.wo;
    int w0, w1;
    pool_span(r.col, 1, g.pw, g.kw, g.w, &w0, &w1);
    for (int oh0 = 0; oh0 < g.ho; oh0 += POOL_ROWS) {
        float v[POOL_ROWS + KR - 1]; /* input rows oh0 - ph + t */
#pragma unroll
        for (int t = 0; t < POOL_ROWS + KR - 1; t++) {
            int ih = oh0 - g.ph + t;
            v[t] = load && ih >= 0 && ih < g.h ? xp.p[ih * xp.sr + r.col * xp.sc] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < POOL_ROWS; u++) {
            int oh = oh0 + u, h0, h1;
            if (oh >= g.ho)
                break;
            pool_span(oh, 1, g.ph, g.kh, g.h, &h0, &h1);
            float col = MAX ? -INFINITY : 0.0f; /* this lane's column of the window */
#pragma unroll
            for (int k = 0; k < KR; k++) {
                int ih = oh - g.ph + k;
                if (ih >= h0 && ih < h1)
                    col = MAX ? (pool_better(v[u + k], col) ? v[u + k] : col) : col + v[u + k];
            }
            float acc = MAX ? -INFINITY : 0.0f;
#pragma unroll
            for (int j = 0; j < KR; j++) {
                int c = r.col - g.pw + j;
                float t = cu_wrow_get(r, col, c, seg);
                if (j < g.kw && c >= w0 && c < w1)
                    acc = MAX ? (pool_better(t, acc) ? t : acc) : acc + t;
            }
            if (store)
                yp.p[oh * yp.sr + r.col * yp.sc] = MAX ? acc : acc / (float)((h1 - h0) * (w1 - w0));
        }
    }
}

/* The row's first maximum among the window columns of output column `col` (value and
 * column offset j): kw shuffles of the row, shared by every output row that reads it. */
template <int KR>
__device__ __forceinline__ void pool_row_max(const cu_wrow &r, int seg, const pool_g32 &g, float v,
                                             int w0, int w1, float *best, int *at)
{
    *best = -INFINITY;
    *at = w0 - (r.col - g.pw);
#pragma unroll
    for (int j = 0; j < KR; j++) {
        int c = r.col - g.pw + j;
        float t = cu_wrow_get(r, v, c, seg);
        if (j < g.kw && c >= w0 && c < w1 && pool_better(t, *best)) {
            *best = t;
            *at = j;
        }
    }
}

/* The backward walks the output rows once, in order, and adds each output's gradient
 * into a ring of the KR input rows its window reaches (registers); an input row is
 * stored once no later output reaches it. An input lane takes from the outputs whose
 * windows hold its column, in ascending order. Average pooling spreads dy / count over
 * the window: each row first gathers the columns (kw shuffles), then goes to the rows.
 * Max pooling finds each window's first maximum from its rows' first maxima (the top
 * row wins a tie, as in the row-major scan) as one code k·8 + j (ring row, column
 * offset) and routes the gradient there alone: one pass, no stored indices. */
template <int KR, int MAX>
__global__ void pool_rows_bwd_kernel(pool_g32 g, int seg, cu_t4 x, cu_t4 dy, cu_t4 dx,
                                     const float *gate)
{
    if (cu_gated_off(gate))
        return;
    cu_wrow r = cu_wrow_of(seg);
    bool on = r.plane < g.planes;
    int64_t pl = on ? r.plane : 0;
    pool_plane xp = plane_of(x, pl, g.c), dp = plane_of(dy, pl, g.c), op = plane_of(dx, pl, g.c);
    bool in_col = on && r.col < g.w, out_col = on && r.col < g.wo;
    int w0, w1;
    pool_span(r.col, 1, g.pw, g.kw, g.w, &w0, &w1);
    const unsigned full = 0xffffffffu;
    const int ROWS = MAX ? POOL_ROWS / 2 : POOL_ROWS; /* fewer registers for the maxima */
    const int NX = MAX ? ROWS + KR - 1 : 1;           /* x rows a batch reads */
    float ring[KR];                                   /* ring[k]: dx row oh - ph + k */
#pragma unroll
    for (int k = 0; k < KR; k++)
        ring[k] = 0.0f;
    for (int oh0 = g.ph - g.kh + 1; oh0 < g.h + g.ph; oh0 += ROWS) {
        float d[ROWS], hb[NX]; /* dy rows oh0 + u; x rows oh0 - ph + t, then their maxima */
        int hj[NX];
#pragma unroll
        for (int u = 0; u < ROWS; u++) {
            int oh = oh0 + u;
            d[u] = out_col && oh >= 0 && oh < g.ho ? dp.p[oh * dp.sr + r.col * dp.sc] : 0.0f;
        }
#pragma unroll
        for (int t = 0; MAX && t < NX; t++) {
            int ih = oh0 - g.ph + t;
            hb[t] = in_col && ih >= 0 && ih < g.h ? xp.p[ih * xp.sr + r.col * xp.sc] : 0.0f;
        }
#pragma unroll
        for (int t = 0; MAX && t < NX; t++)
            pool_row_max<KR>(r, seg, g, hb[t], w0, w1, &hb[t], &hj[t]);
#pragma unroll
        for (int u = 0; u < ROWS; u++) {
            int oh = oh0 + u;
            if (oh >= g.h + g.ph)
                break;
            if (oh >= 0 && oh < g.ho) {
                int h0, h1;
                pool_span(oh, 1, g.ph, g.kh, g.h, &h0, &h1);
                float z = d[u], row = 0.0f;
                int code = 0;
                if (MAX) {
                    float best = -INFINITY;
                    int k0 = h0 - (oh - g.ph);
                    code = k0 * 8 + w0 - (r.col - g.pw); /* all -inf: the first element */
#pragma unroll
                    for (int k = 0; k < KR; k++) {
                        int ih = oh - g.ph + k;
                        if (ih >= h0 && ih < h1 && pool_better(hb[MAX ? u + k : 0], best)) {
                            best = hb[MAX ? u + k : 0];
                            code = k * 8 + hj[MAX ? u + k : 0];
                        }
                    }
                } else {
                    z = z / (float)((h1 - h0) * (w1 - w0));
                }
#pragma unroll
                for (int j = KR - 1; j >= 0; j--) { /* output columns ascending */
                    int ow = r.col + g.pw - j, src = r.base + (ow & ((1 << seg) - 1));
                    float got = __shfl_sync(full, z, src);
                    int at = MAX ? __shfl_sync(full, code, src) : 0;
                    if (j >= g.kw || ow < 0 || ow >= g.wo)
                        continue;
                    if (MAX) {
#pragma unroll
                        for (int k = 0; k < KR; k++)
                            if (at == k * 8 + j)
                                ring[k] += got;
                    } else {
                        row += got;
                    }
                }
#pragma unroll
                for (int k = 0; !MAX && k < KR; k++) {
                    int ih = oh - g.ph + k;
                    if (ih >= h0 && ih < h1)
                        ring[k] += row;
                }
            }
            int done = oh - g.ph; /* no later output reaches it */
            if (done >= 0 && in_col)
                op.p[done * op.sr + r.col * op.sc] = ring[0];
#pragma unroll
            for (int k = 0; k + 1 < KR; k++)
                ring[k] = ring[k + 1];
            ring[KR - 1] = 0.0f;
        }
    }
}

/* ---- max pooling's backward, 3x3, stride 1, padding 1, rows of 4k columns ----
 * Column quads: a thread holds four adjacent columns of a plane (a float4 of x, dy and
 * dx a row; 2^seg lanes a plane) and walks the rows once. Each x row's three-column
 * first maxima (value and column) are found once, with the two halo columns from the
 * neighbouring lanes, and serve the three output rows that read the row; an output's
 * window maximum comes from them top row first, as the row-major scan has it. The
 * gradient then goes into a ring of three dx rows in registers, from the outputs in
 * ascending order (the two halo outputs' dy and maxima by shuffle): the same float
 * additions in the same order as pool_rows_bwd_kernel, so the same bits. */

/** Widest rows the quads take (a segment is at most a warp). */
#define POOL_QUAD_MAX_W 128

/* The first maxima of the three-column windows of this lane's four columns in one x row
 * (hm) and their column offsets 0..2, four bits a column in *hj (a nibble, so that the
 * rows' codes merge by masks in pool_quad_vmax); columns outside the row do not count. */
__device__ __forceinline__ void pool_quad_hmax(float4 x, int q, int quads, int seg, float *hm,
                                               int *hj)
{
    float l = __shfl_up_sync(0xffffffffu, x.w, 1, 1 << seg);
    float r = __shfl_down_sync(0xffffffffu, x.x, 1, 1 << seg);
    const float col[6] = {l, x.x, x.y, x.z, x.w, r};
    int packed = 0;
#pragma unroll
    for (int v = 0; v < 4; v++) {
        bool left = v > 0 || q > 0, right = v < 3 || q + 1 < quads;
        float best = left ? col[v] : col[v + 1];
        int at = left ? 0 : 1;
        if (pool_better(col[v + 1], best)) { /* never when best is col[v + 1] itself */
            best = col[v + 1];
            at = 1;
        }
        if (right && pool_better(col[v + 2], best)) {
            best = col[v + 2];
            at = 2;
        }
        hm[v] = best;
        packed |= at << (4 * v);
    }
    *hj = packed;
}

/* Output row o's window maxima from the rows' maxima (hm[k], hj[k]: x row o - 1 + k) as
 * codes 4 k + column offset, four bits a column; the top row first, and rows outside
 * the plane do not count. Each column only picks a row: the rows' codes (4 k added to
 * every nibble, no carries) merge by nibble masks, a few logic operations for all four
 * columns instead of taking every column's offsets apart. */
__device__ __forceinline__ int pool_quad_vmax(const float (*hm)[4], const int *hj, bool top,
                                              bool bottom)
{
    int m1 = 0, m2 = 0; /* the columns whose maximum lies in row 1, row 2 */
#pragma unroll
    for (int v = 0; v < 4; v++) {
        bool w1 = !top || pool_better(hm[1][v], hm[0][v]);
        float best = w1 ? hm[1][v] : hm[0][v];
        bool w2 = bottom && pool_better(hm[2][v], best);
        m1 |= w1 && !w2 ? 15 << (4 * v) : 0;
        m2 |= w2 ? 15 << (4 * v) : 0;
    }
    return (hj[0] & ~(m1 | m2)) | ((hj[1] + 0x4444) & m1) | ((hj[2] + 0x8888) & m2);
}

/* Whether nibble nib of code is val: one logic operation, no shift and mask first. */
__device__ __forceinline__ bool pool_quad_is(int code, int nib, int val)
{
    return ((code ^ (val << (4 * nib))) & (15 << (4 * nib))) == 0;
}

/* Output row o's gradient into the dx ring (ring[k]: dx row o - 1 + k): the outputs of
 * columns 4q - 1 .. 4q + 4 in ascending order, each to its window's maximum. */
__device__ __forceinline__ void pool_quad_route(float4 d, int code, int q, int quads, int seg,
                                                float (*ring)[4])
{
    float dl = __shfl_up_sync(0xffffffffu, d.w, 1, 1 << seg);
    float dr = __shfl_down_sync(0xffffffffu, d.x, 1, 1 << seg);
    int cl = __shfl_up_sync(0xffffffffu, code, 1, 1 << seg);
    int cr = __shfl_down_sync(0xffffffffu, code, 1, 1 << seg);
    const float od[6] = {dl, d.x, d.y, d.z, d.w, dr};
#pragma unroll
    for (int v = 0; v < 4; v++)
#pragma unroll
        for (int e = v; e < v + 3; e++) /* output column 4q - 1 + e, ascending */
#pragma unroll
            for (int k = 0; k < 3; k++) {
                int val = 4 * k + (v - e + 2);
                bool hit = e == 0   ? q > 0 && pool_quad_is(cl, 3, val)
                           : e == 5 ? q + 1 < quads && pool_quad_is(cr, 0, val)
                                    : pool_quad_is(code, e - 1, val);
                if (hit)
                    ring[k][v] += od[e];
            }
}

/* The running state of one lane's quad: the maxima of x rows o - 1 .. o + 1 and the dx
 * rows o - 1 .. o + 1. */
typedef struct pool_quad_state {
    float hm[3][4], ring[3][4];
    int hj[3];
} pool_quad_state;

/* Output row o (x row o + 1 and dy row o given): routes its gradient, stores dx row
 * o - 1, which no later output reaches, and moves the rows on. */
__device__ __forceinline__ void pool_quad_step(pool_quad_state &st, float4 x, float4 d, int o,
                                               int h, int q, int quads, int seg, float *dxp,
                                               int64_t sr, bool on)
{
    pool_quad_hmax(x, q, quads, seg, st.hm[2], &st.hj[2]);
    pool_quad_route(d, pool_quad_vmax(st.hm, st.hj, o > 0, o + 1 < h), q, quads, seg, st.ring);
    if (o > 0 && on)
        *(float4 *)(dxp + (o - 1) * sr) =
            make_float4(st.ring[0][0], st.ring[0][1], st.ring[0][2], st.ring[0][3]);
#pragma unroll
    for (int v = 0; v < 4; v++) {
        st.ring[0][v] = st.ring[1][v];
        st.ring[1][v] = st.ring[2][v];
        st.ring[2][v] = 0.0f;
        st.hm[0][v] = st.hm[1][v];
        st.hm[1][v] = st.hm[2][v];
    }
    st.hj[0] = st.hj[1];
    st.hj[1] = st.hj[2];
}

/* Two output rows a round, the next round's four rows loaded before this round's
 * arithmetic: loads in flight, and 256 contiguous bytes of a plane's rows at once.
 * Three rounds are unrolled: the rings then come back to their registers, with no moves
 * on the loop's back edge. */
__global__ void __launch_bounds__(CU_THREADS, 4)
    pool_quad_max_bwd_kernel(pool_g32 g, int seg, cu_t4 x, cu_t4 dy, cu_t4 dx, const float *gate)
{
    if (cu_gated_off(gate))
        return;
    cu_wrow r = cu_wrow_of(seg);
    const int q = r.col, quads = g.w / 4;
    const bool on = r.plane < g.planes && q < quads;
    const int64_t pl = r.plane < g.planes ? r.plane : 0;
    pool_plane xp = plane_of(x, pl, g.c), dp = plane_of(dy, pl, g.c), op = plane_of(dx, pl, g.c);
    xp.p += 4 * q;
    dp.p += 4 * q;
    op.p += 4 * q;
    pool_quad_state st; /* row -1's maxima only defined: output row 0 does not read them */
#pragma unroll
    for (int k = 0; k < 3; k++)
#pragma unroll
        for (int v = 0; v < 4; v++) {
            st.ring[k][v] = 0.0f;
            st.hm[k][v] = 0.0f;
        }
    st.hj[0] = 0;
    pool_quad_hmax(cu_quad_row(xp.p, xp.sr, 0, g.h, on), q, quads, seg, st.hm[1], &st.hj[1]);
    float4 xa = cu_quad_row(xp.p, xp.sr, 1, g.h, on), xb = cu_quad_row(xp.p, xp.sr, 2, g.h, on);
    float4 da = cu_quad_row(dp.p, dp.sr, 0, g.h, on), db = cu_quad_row(dp.p, dp.sr, 1, g.h, on);
#pragma unroll 3
    for (int o = 0; o < g.h; o += 2) {
        float4 x0 = xa, x1 = xb, d0 = da, d1 = db;
        xa = cu_quad_row(xp.p, xp.sr, o + 3, g.h, on);
        xb = cu_quad_row(xp.p, xp.sr, o + 4, g.h, on);
        da = cu_quad_row(dp.p, dp.sr, o + 2, g.h, on);
        db = cu_quad_row(dp.p, dp.sr, o + 3, g.h, on);
        pool_quad_step(st, x0, d0, o, g.h, q, quads, seg, op.p, op.sr, on);
        if (o + 1 < g.h)
            pool_quad_step(st, x1, d1, o + 1, g.h, q, quads, seg, op.p, op.sr, on);
    }
    if (on) /* after the step of output row h - 1, ring[0] is dx row h - 1 */
        *(float4 *)(op.p + (g.h - 1) * op.sr) =
            make_float4(st.ring[0][0], st.ring[0][1], st.ring[0][2], st.ring[0][3]);
}

/* The quads' segment (log2 of the lanes a plane) when they take max pooling's backward:
 * 3x3, stride 1, padding 1, rows of 4k columns up to POOL_QUAD_MAX_W that are runs of
 * float4s in x, dy and dx; else -1. */
static int pool_quad_seg(const pool_g32 &g, const cu_t4 &x, const cu_t4 &dy, const cu_t4 &dx)
{
    if (g.kh != 3 || g.kw != 3 || g.sh != 1 || g.sw != 1 || g.ph != 1 || g.pw != 1 ||
        g.w % 4 != 0 || g.w > POOL_QUAD_MAX_W || !cu_quad_rows(x) || !cu_quad_rows(dy) ||
        !cu_quad_rows(dx) || cu_wrow_blocks(g.planes, 0) > 0x7fffffffu / 32)
        return -1;
    return cu_wrow_seg(g.w / 4);
}

/* The warp-row segment for a stride-1 pooling whose rows fit 32 lanes and whose window
 * fits 7 x 7, else -1. */
static int pool_rows_seg(const pool_g32 &g)
{
    if (g.sh != 1 || g.sw != 1 || g.kh > 7 || g.kw > 7 ||
        cu_wrow_blocks(g.planes, 0) > 0x7fffffffu / 32)
        return -1;
    return cu_wrow_seg(g.w > g.wo ? g.w : g.wo);
}

static void launch_rows_fwd(cu_exec *e, int max, int seg, const pool_g32 &g, const cu_t4 &x,
                            const cu_t4 &y)
{
    unsigned b = cu_wrow_blocks(g.planes, seg);
    bool small = g.kh <= 3 && g.kw <= 3;
    if (small && max)
        cu_launch(e, pool_rows_fwd_kernel<1, 3>, b, CU_THREADS, 0, g, seg, x, y, e->gate);
    else if (small)
        cu_launch(e, pool_rows_fwd_kernel<0, 3>, b, CU_THREADS, 0, g, seg, x, y, e->gate);
    else if (max)
        cu_launch(e, pool_rows_fwd_kernel<1, 7>, b, CU_THREADS, 0, g, seg, x, y, e->gate);
    else
        cu_launch(e, pool_rows_fwd_kernel<0, 7>, b, CU_THREADS, 0, g, seg, x, y, e->gate);
}

static void launch_rows_bwd(cu_exec *e, int max, int seg, const pool_g32 &g, const cu_t4 &x,
                            const cu_t4 &dy, const cu_t4 &dx)
{
    unsigned b = cu_wrow_blocks(g.planes, seg);
    bool small = g.kh <= 3 && g.kw <= 3;
    if (small && max)
        cu_launch(e, pool_rows_bwd_kernel<3, 1>, b, CU_THREADS, 0, g, seg, x, dy, dx, e->gate);
    else if (small)
        cu_launch(e, pool_rows_bwd_kernel<3, 0>, b, CU_THREADS, 0, g, seg, x, dy, dx, e->gate);
    else if (max)
        cu_launch(e, pool_rows_bwd_kernel<7, 1>, b, CU_THREADS, 0, g, seg, x, dy, dx, e->gate);
    else
        cu_launch(e, pool_rows_bwd_kernel<7, 0>, b, CU_THREADS, 0, g, seg, x, dy, dx, e->gate);
}

/* Launch helpers: the staged kernel when a plane fits POOL_STAGE_BYTES. */
static dim3 pool_grid(int64_t planes, int64_t positions, bool stage)
{
    return stage ? cu_plane_grid(planes, 1) : cu_plane_grid(planes, positions);
}

static void launch_fwd(cu_exec *e, int max, const pool_g32 &g, const cu_t4 &x, const cu_t4 &y)
{
    int seg = pool_rows_seg(g);
    if (seg >= 0)
        return launch_rows_fwd(e, max, seg, g, x, y);
    size_t sm = sizeof(float) * (size_t)g.h * g.w;
    bool stage = sm <= POOL_STAGE_BYTES;
    dim3 grid = pool_grid(g.planes, (int64_t)g.ho * g.wo, stage);
    size_t bytes = stage ? sm : 0;
    if (max && stage)
        cu_launch(e, pool_fwd_kernel<1, 1>, grid, CU_THREADS, bytes, g, x, y, e->gate);
    else if (max)
        cu_launch(e, pool_fwd_kernel<1, 0>, grid, CU_THREADS, 0, g, x, y, e->gate);
    else if (stage)
        cu_launch(e, pool_fwd_kernel<0, 1>, grid, CU_THREADS, bytes, g, x, y, e->gate);
    else
        cu_launch(e, pool_fwd_kernel<0, 0>, grid, CU_THREADS, 0, g, x, y, e->gate);
}

static void launch_max_at(cu_exec *e, const pool_g32 &g, const cu_t4 &x, int *at)
{
    size_t sm = sizeof(float) * (size_t)g.h * g.w;
    bool stage = sm <= POOL_STAGE_BYTES;
    dim3 grid = pool_grid(g.planes, (int64_t)g.ho * g.wo, stage);
    if (stage)
        cu_launch(e, max_at_kernel<1>, grid, CU_THREADS, sm, g, x, at, e->gate);
    else
        cu_launch(e, max_at_kernel<0>, grid, CU_THREADS, 0, g, x, at, e->gate);
}

static void launch_bwd(cu_exec *e, const pool_g32 &g, const int *at, const cu_t4 &dy,
                       const cu_t4 &dx)
{
    size_t sm = (sizeof(float) + (at ? sizeof(int) : 0)) * (size_t)g.ho * g.wo;
    bool stage = sm <= POOL_STAGE_BYTES;
    dim3 grid = pool_grid(g.planes, (int64_t)g.h * g.w, stage);
    if (stage)
        cu_launch(e, pool_bwd_kernel<1>, grid, CU_THREADS, sm, g, at, dy, dx, e->gate);
    else
        cu_launch(e, pool_bwd_kernel<0>, grid, CU_THREADS, 0, g, at, dy, dx, e->gate);
}

static ex_status pool_fwd(cu_exec *e, const ex_node_exec *n, int max, const char *name)
{
    pool_geom g = {};
    pool_g32 g32 = {};
    ex_status st = pool_check_types(e, n, 1, name);
    if (st == EX_OK)
        st = pool_geom_of(e, n, &n->src[0], &n->dst, name, &g);
    if (st == EX_OK)
        st = pool_g32_of(e, &g, name, &g32);
    if (st != EX_OK || e->dry)
        return st;
    launch_fwd(e, max, g32, cu_t4_of(&n->src[0]), cu_t4_of(&n->dst));
    return cu_launched(e, name);
}

CU_OP(avg_pool)
{
    return pool_fwd(e, n, 0, "avg_pool");
}

CU_OP(max_pool)
{
    return pool_fwd(e, n, 1, "max_pool");
}

CU_OP(avg_pool_bwd)
{
    pool_geom g = {};
    pool_g32 g32 = {};
    ex_status st = pool_check_types(e, n, 1, "avg_pool_bwd");
    if (st == EX_OK)
        st = pool_geom_of(e, n, &n->dst, &n->src[0], "avg_pool_bwd", &g);
    if (st == EX_OK)
        st = pool_g32_of(e, &g, "avg_pool_bwd", &g32);
    if (st != EX_OK || e->dry)
        return st;
    int seg = pool_rows_seg(g32);
    if (seg >= 0)
        launch_rows_bwd(e, 0, seg, g32, cu_t4_of(&n->dst), cu_t4_of(&n->src[0]), cu_t4_of(&n->dst));
    else
        launch_bwd(e, g32, NULL, cu_t4_of(&n->src[0]), cu_t4_of(&n->dst));
    return cu_launched(e, "avg_pool_bwd");
}

CU_OP(max_pool_bwd)
{
    pool_geom g = {};
    pool_g32 g32 = {};
    ex_status st = pool_check_types(e, n, 2, "max_pool_bwd");
    if (st == EX_OK)
        st = pool_geom_of(e, n, &n->src[0], &n->src[1], "max_pool_bwd", &g);
    if (st == EX_OK)
        st = pool_same_shape(e, &n->src[0], &n->dst, "max_pool_bwd");
    if (st == EX_OK)
        st = pool_g32_of(e, &g, "max_pool_bwd", &g32);
    if (st != EX_OK)
        return st;
    cu_t4 x = cu_t4_of(&n->src[0]), dy = cu_t4_of(&n->src[1]), dx = cu_t4_of(&n->dst);
    int quad = pool_quad_seg(g32, x, dy, dx);
    if (quad >= 0) {
        if (e->dry)
            return EX_OK;
        cu_launch(e, pool_quad_max_bwd_kernel, cu_wrow_blocks(g32.planes, quad), CU_THREADS, 0, g32,
                  quad, x, dy, dx, e->gate);
        return cu_launched(e, "max_pool_bwd");
    }
    int seg = pool_rows_seg(g32); /* warp rows need no stored maxima */
    void *ws = NULL;
    if (seg < 0)
        st = cu_scratch(e, sizeof(int) * (size_t)(g32.planes * g32.ho * g32.wo), &ws);
    if (st != EX_OK || e->dry)
        return st;
    if (seg >= 0) {
        launch_rows_bwd(e, 1, seg, g32, x, dy, dx);
    } else {
        launch_max_at(e, g32, x, (int *)ws);
        launch_bwd(e, g32, (const int *)ws, dy, dx);
    }
    return cu_launched(e, "max_pool_bwd");
}

/* One warp per (n, c) plane: Σ in double through a fixed tree, times 1 / (H W). Dense
 * planes (rows back to back, columns adjacent) are read as one run, four loads in
 * flight a lane; others by row and column, in 32 bits (the host checks H·W < 2^31). */
#define GAP_UNROLL 4
__global__ void gap_kernel(cu_t4 x, cu_t4 y, int64_t planes, double inv, const float *gate)
{
    if (cu_gated_off(gate))
        return;
    int lane = threadIdx.x & 31;
    int64_t p = blockIdx.x * (int64_t)(blockDim.x >> 5) + (threadIdx.x >> 5);
    if (p >= planes)
        return;
    pool_plane xp = plane_of(x, p, x.ne[1]), yp = plane_of(y, p, x.ne[1]);
    int w = (int)x.ne[3], hw = (int)(x.ne[2] * x.ne[3]);
    double acc = 0.0;
    if (xp.sc == 1 && xp.sr == w) {
        int i = lane;
        for (; i + 32 * (GAP_UNROLL - 1) < hw; i += 32 * GAP_UNROLL) {
            float v[GAP_UNROLL];
#pragma unroll
            for (int u = 0; u < GAP_UNROLL; u++)
                v[u] = xp.p[i + 32 * u];
#pragma unroll
            for (int u = 0; u < GAP_UNROLL; u++)
                acc += v[u];
        }
        for (; i < hw; i += 32)
            acc += xp.p[i];
    } else {
        for (int i = lane; i < hw; i += 32)
            acc += xp.p[(i / w) * xp.sr + (i % w) * xp.sc];
    }
    acc = cu_warp_sum(acc);
    if (lane == 0)
        *yp.p = (float)(acc * inv);
}

CU_OP(global_avg_pool)
{
    ex_status st = pool_check_types(e, n, 1, "global_avg_pool");
    if (st != EX_OK)
        return st;
    const ex_tdesc *x = &n->src[0], *y = &n->dst;
    char why[160];
    if ((st = ex_td_gap_of(n, why, sizeof why)) != EX_OK)
        return cu_fail(e, st, "global_avg_pool: %s", why);
    if (x->ne[2] * x->ne[3] > 0x7fffffff)
        return cu_fail(e, EX_ERR_UNSUPPORTED, "global_avg_pool: planes of 2^31 elements or more");
    if (e->dry)
        return EX_OK;
    int64_t planes = x->ne[0] * x->ne[1], per = CU_THREADS / 32;
    double inv = 1.0 / (double)(x->ne[2] * x->ne[3]);
    unsigned blocks = (unsigned)((planes + per - 1) / per);
    cu_launch(e, gap_kernel, blocks ? blocks : 1, CU_THREADS, 0, cu_t4_of(x), cu_t4_of(y), planes,
              inv, e->gate);
    return cu_launched(e, "global_avg_pool");
}
