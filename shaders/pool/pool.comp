// Average, max and global average pooling and their backward passes. Windows are
// clipped to the input: padding never counts, neither in an average nor as a maximum.
// Forward variants give each output to one invocation, which walks its window in
// row-major order as the CPU backend does. Backward variants give each input element to
// one invocation, which gathers from the outputs whose windows hold it, in output order
// (the order the CPU backend scatters in), so no atomics are needed. Max pooling's
// backward first stores each window's first maximum (PL_MAX_AT), so the gather compares
// indices instead of searching every window again. Global average pooling sums each
// plane with a fixed shared-memory tree.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "pool/variants.h"

layout(local_size_x = 128) in;
layout(push_constant) uniform PC
{
    uint gate, a, d, at; // source (x or dy), dst (y, dx or the maxima's places), maxima
    uvec4 g0;            // n, c, h, w
    uvec4 g1;            // ho, wo, kernel h, kernel w
    uvec4 g2;            // stride h, stride w, pad h, pad w
    uvec4 sa, sd;        // element strides of the source and dst
} pc;

shared float part[128];

// The input rows (or columns) [lo, hi) of output o's window, clipped to [0, lim).
ivec2 span(int o, int s, int p, int k, int lim)
{
    int lo = o * s - p, hi = o * s - p + k;
    return ivec2(max(lo, 0), min(hi, lim));
}

// The outputs [x, y] whose windows along one axis hold input i.
ivec2 outs(int i, int s, int p, int k, int lim)
{
    int lo = i + p - k + 1, hi = (i + p) / s;
    return ivec2(lo <= 0 ? 0 : (lo + s - 1) / s, min(hi, lim - 1));
}

// Whether v replaces best as the window maximum: the first maximum wins, and a NaN wins
// once and then stays, so NaNs propagate.
bool better(float v, float best)
{
    return v > best || (isnan(v) && !isnan(best));
}

// Output i's window (forward variants): the average, or the first maximum and its place.
void fwd()
{
    uint c = pc.g0.y, ho = pc.g1.x, wo = pc.g1.y;
    int h = int(pc.g0.z), w = int(pc.g0.w), kh = int(pc.g1.z), kw = int(pc.g1.w);
    int sh = int(pc.g2.x), sw = int(pc.g2.y), ph = int(pc.g2.z), pw = int(pc.g2.w);
    uint total = pc.g0.x * c * ho * wo;
    for (uint i = gl_GlobalInvocationID.x; i < total; i += gl_NumWorkGroups.x * 128u) {
        uint ow = i % wo, t = i / wo, oh = t % ho, plane = t / ho;
        uint xo = (plane / c) * pc.sa.x + (plane % c) * pc.sa.y;
        ivec2 rh = span(int(oh), sh, ph, kh, h), rw = span(int(ow), sw, pw, kw, w);
        float acc = VARIANT == PL_AVG ? 0.0 : uintBitsToFloat(0xFF800000u);
        int place = rh.x * w + rw.x;
        for (int ih = rh.x; ih < rh.y; ih++)
            for (int iw = rw.x; iw < rw.y; iw++) {
                float v = ldf(pc.a, xo + uint(ih) * pc.sa.z + uint(iw) * pc.sa.w);
                if (VARIANT == PL_AVG) {
                    acc += v;
                } else if (better(v, acc)) {
                    acc = v;
                    place = ih * w + iw;
                }
            }
        if (VARIANT == PL_MAX_AT)
            st(pc.d, i, uint(place));
        else if (VARIANT == PL_AVG)
            stf(pc.d, plane / c * pc.sd.x + plane % c * pc.sd.y + oh * pc.sd.z + ow * pc.sd.w,
                acc / float((rh.y - rh.x) * (rw.y - rw.x)));
        else
            stf(pc.d, plane / c * pc.sd.x + plane % c * pc.sd.y + oh * pc.sd.z + ow * pc.sd.w, acc);
    }
}

// dx of input i: the dy of every window holding it, in output order.
void bwd()
{
    uint c = pc.g0.y, h = pc.g0.z, w = pc.g0.w;
    int ho = int(pc.g1.x), wo = int(pc.g1.y), kh = int(pc.g1.z), kw = int(pc.g1.w);
    int sh = int(pc.g2.x), sw = int(pc.g2.y), ph = int(pc.g2.z), pw = int(pc.g2.w);
    uint total = pc.g0.x * c * h * w;
    for (uint i = gl_GlobalInvocationID.x; i < total; i += gl_NumWorkGroups.x * 128u) {
        uint iw = i % w, t = i / w, ih = t % h, plane = t / h;
        uint yo = (plane / c) * pc.sa.x + (plane % c) * pc.sa.y;
        uint ao = plane * uint(ho * wo), me = ih * w + iw;
        ivec2 rh = outs(int(ih), sh, ph, kh, ho), rw = outs(int(iw), sw, pw, kw, wo);
        float acc = 0.0;
        for (int oh = rh.x; oh <= rh.y; oh++)
            for (int ow = rw.x; ow <= rw.y; ow++) {
                float g = ldf(pc.a, yo + uint(oh) * pc.sa.z + uint(ow) * pc.sa.w);
                if (VARIANT == PL_MAX_BWD) {
                    if (ld(pc.at, ao + uint(oh * wo + ow)) == me)
                        acc += g;
                } else {
                    ivec2 wh = span(oh, sh, ph, kh, int(h)), ww = span(ow, sw, pw, kw, int(w));
                    acc += g / float((wh.y - wh.x) * (ww.y - ww.x));
                }
            }
        stf(pc.d, plane / c * pc.sd.x + plane % c * pc.sd.y + ih * pc.sd.z + iw * pc.sd.w, acc);
    }
}

// PL_COLS: 3x3 windows, stride 1, padding 1 (DARTS's pools), for PL_AVG, PL_MAX and
// PL_AVG_BWD. An invocation owns one column of a band of rows (pc.g2.x rows, pc.g2.y
// bands a plane; neighbouring invocations neighbouring columns, so each load is one
// coalesced row segment) and walks it top to bottom, keeping the three source rows
// (x, or dy / count for the backward) that an output row reads in a ring in registers
// while the next row's loads are in flight. The arithmetic is fwd()'s and bwd()'s, in
// their order (row-major over the window, or over the outputs; a place outside the
// plane adds 0, which changes no sum that starts at 0): the same bits.
const int BASE = VARIANT & (PL_COLS - 1);

// Columns c - 1 .. c + 1 of source row iy (0 outside the plane; the backward's dy over
// the count of its window), and for max pooling in .x their first maximum (NaN wins).
vec3 cols_row(uvec4 s, uint base, int iy, int c, int w, int h)
{
    bool mx = BASE == PL_MAX;
    vec3 v = vec3(mx ? uintBitsToFloat(0xFF800000u) : 0.0, 0.0, 0.0);
    if (iy < 0 || iy >= h)
        return v;
    float rows = float(1 + int(iy > 0) + int(iy < h - 1));
    uint rb = base + uint(iy) * s.z;
    for (int j = max(c - 1, 0); j <= min(c + 1, w - 1); j++) {
        float x = ldf(pc.a, rb + uint(j) * s.w);
        if (BASE == PL_AVG_BWD)
            x /= rows * float(1 + int(j > 0) + int(j < w - 1));
        if (!mx)
            v[j - c + 1] = x;
        else if (better(x, v.x))
            v.x = x;
    }
    return v;
}

void cols()
{
    uint c = pc.g0.y, w = pc.g0.w, band = pc.g2.x, bands = pc.g2.y;
    int h = int(pc.g0.z), wi = int(w);
    uint units = pc.g0.x * c * bands * w;
    for (uint u = gl_GlobalInvocationID.x; u < units; u += gl_NumWorkGroups.x * 128u) {
        uint col = u % w, t = u / w, bd = t % bands, plane = t / bands;
        uint n = plane / c, ch = plane % c;
        uint bs = n * pc.sa.x + ch * pc.sa.y, bo = n * pc.sd.x + ch * pc.sd.y;
        int r0 = int(bd * band), r1 = min(h, r0 + int(band));
        vec3 ring[3];
        ring[1] = cols_row(pc.sa, bs, r0 - 1, int(col), wi, h);
        ring[2] = cols_row(pc.sa, bs, r0, int(col), wi, h);
        for (int r = r0; r < r1; r++) {
            ring[0] = ring[1];
            ring[1] = ring[2];
            ring[2] = cols_row(pc.sa, bs, r + 1, int(col), wi, h);
            float y = BASE == PL_MAX ? ring[0].x : 0.0;
            for (int i = 0; i < 3; i++)
                if (BASE == PL_MAX)
                    y = i > 0 && better(ring[i].x, y) ? ring[i].x : y;
                else
                    y = ((y + ring[i].x) + ring[i].y) + ring[i].z;
            if (BASE == PL_AVG)
                y /= float((1 + int(r > 0) + int(r < h - 1)) *
                           (1 + int(col > 0u) + int(col + 1u < w)));
            stf(pc.d, bo + uint(r) * pc.sd.z + col * pc.sd.w, y);
        }
    }
}

// Workgroup-uniform loop over planes; the tree's barriers stay uniform.
void gap()
{
    uint c = pc.g0.y, w = pc.g0.w, hw = pc.g0.z * w, lid = gl_LocalInvocationID.x;
    uint planes = pc.g0.x * c;
    for (uint plane = gl_WorkGroupID.x; plane < planes; plane += gl_NumWorkGroups.x) {
        uint xo = (plane / c) * pc.sa.x + (plane % c) * pc.sa.y;
        float acc = 0.0;
        for (uint q = lid; q < hw; q += 128u)
            acc += ldf(pc.a, xo + (q / w) * pc.sa.z + (q % w) * pc.sa.w);
        part[lid] = acc;
        barrier();
        for (uint s = 64u; s > 0u; s >>= 1) {
            if (lid < s)
                part[lid] += part[lid + s];
            barrier();
        }
        if (lid == 0u)
            stf(pc.d, (plane / c) * pc.sd.x + (plane % c) * pc.sd.y, part[0] / float(hw));
        barrier();
    }
}

void main()
{
    GATE_RETURN();
    if ((VARIANT & PL_COLS) != 0)
        cols();
    else if (VARIANT == PL_GAP)
        gap();
    else if (VARIANT == PL_AVG_BWD || VARIANT == PL_MAX_BWD)
        bwd();
    else
        fwd();
}
