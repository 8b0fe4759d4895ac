// int8 pooling: QMAX_POOL, QAVG_POOL (windows clipped to the input: padding never counts)
// and QGLOBAL_AVG_POOL (docs/ops.md). Averages are integer sums over the in-bounds count,
// rounded half away from zero, so the result is exact. The i8 dst is dense (vulkan/quant.c
// checks it): an invocation makes 4 neighbouring outputs and writes their word whole, and
// global pooling of planes of at least 128 pixels gives a word's 4 planes to one
// workgroup, which sums them with a shared-memory tree (smaller ones are QP_AVG windows).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "quant/i8.glsl"
#include "quant/variants.h"

layout(local_size_x = 128) in;
layout(push_constant) uniform PC
{
    uint gate, x, d, n; // n: outputs
    uvec4 g0;           // n, c, h, w
    uvec4 g1;           // ho, wo, kernel h, kernel w
    uvec4 g2;           // stride h, stride w, pad h, pad w
    uvec4 sx;           // x's element strides
} pc;

shared ivec4 part[128];

// The input rows (or columns) [lo, hi) of output o's window, clipped to [0, lim).
ivec2 span(int o, int s, int p, int k, int lim)
{
    int lo = o * s - p;
    return ivec2(max(lo, 0), min(lo + k, lim));
}

// Output i (row-major over dst): its window's maximum or rounded average.
int window(uint i)
{
    uint c = pc.g0.y, ho = pc.g1.x, wo = pc.g1.y;
    uint ow = i % wo, t = i / wo, oh = t % ho, plane = t / ho;
    uint xo = (plane / c) * pc.sx.x + (plane % c) * pc.sx.y;
    ivec2 rh = span(int(oh), int(pc.g2.x), int(pc.g2.z), int(pc.g1.z), int(pc.g0.z));
    ivec2 rw = span(int(ow), int(pc.g2.y), int(pc.g2.w), int(pc.g1.w), int(pc.g0.w));
    int acc = VARIANT == QP_MAX ? -128 : 0;
    for (int ih = rh.x; ih < rh.y; ih++)
        for (int iw = rw.x; iw < rw.y; iw++) {
            int v = ld8(pc.x, xo + uint(ih) * pc.sx.z + uint(iw) * pc.sx.w);
            acc = VARIANT == QP_MAX ? max(acc, v) : acc + v;
        }
    return VARIANT == QP_MAX ? acc : q_avg(acc, (rh.y - rh.x) * (rw.y - rw.x));
}

void windows()
{
    uint count = (pc.n + 3u) / 4u;
    for (uint q = gl_GlobalInvocationID.x; q < count; q += gl_NumWorkGroups.x * 128u) {
        uint v = 0u, k = min(4u, pc.n - 4u * q);
        for (uint t = 0u; t < k; t++)
            v |= q_byte(window(4u * q + t), t);
        st8_word(pc.d, q, v, k);
    }
}

// Workgroup-uniform loop over dst's words (4 planes each); the tree's barriers stay
// uniform. Sums of at most 2^23 values of 8 bits fit an int.
void global_avg()
{
    uint c = pc.g0.y, w = pc.g0.w, hw = pc.g0.z * w, lid = gl_LocalInvocationID.x;
    uint count = (pc.n + 3u) / 4u;
    for (uint q = gl_WorkGroupID.x; q < count; q += gl_NumWorkGroups.x) {
        uint k = min(4u, pc.n - 4u * q);
        ivec4 acc = ivec4(0);
        for (uint t = 0u; t < k; t++) {
            uint plane = 4u * q + t, xo = (plane / c) * pc.sx.x + (plane % c) * pc.sx.y;
            for (uint e = lid; e < hw; e += 128u)
                acc[t] += ld8(pc.x, xo + (e / w) * pc.sx.z + (e % w) * pc.sx.w);
        }
        part[lid] = acc;
        barrier();
        for (uint s = 64u; s > 0u; s >>= 1) {
            if (lid < s)
                part[lid] += part[lid + s];
            barrier();
        }
        if (lid == 0u) {
            uint v = 0u;
            for (uint t = 0u; t < k; t++)
                v |= q_byte(q_avg(part[0][t], int(hw)), t);
            st8_word(pc.d, q, v, k);
        }
        barrier();
    }
}

void main()
{
    GATE_RETURN();
    if (VARIANT == QP_GAP)
        global_avg();
    else
        windows();
}
