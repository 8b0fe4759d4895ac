// exapt: writes 1 3
// Per-channel batch-norm reductions in two passes. The segment pass gives each segment of
// BN_SEG consecutive elements (n, h, w order) of a channel to one workgroup, whose 128
// invocations walk it in a fixed strided order and add their f32 partials by a fixed
// shared-memory tree: for the statistics, the segment's mean and then the sum of squared
// deviations from it (two trees over the same elements, so a large mean does not cancel
// the variance away), for the backward the sums of dy * xhat and dy. The finishing pass
// gives each channel to one invocation, which merges its segments in order (Chan et al.'s
// pairwise update for the variance) and writes the result; no atomics, repeatable.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "batchnorm/variants.h"

layout(local_size_x = 128) in;
layout(push_constant) uniform PC
{
    uint gate, d, x, y;     // dst [2, C], x, dy (BN_SEG_RED)
    uint a, b, m, c;        // running mean and var, or stats (BN_SEG_RED); M; C
    uint part, nseg, r0, r1; // scratch: 2 words per (channel, segment); segments per channel
    float eps, mom, r2, r3;
    uvec4 ne, sx, sy; // x's shape [N, C, H, W]; strides of x and dy
    uvec4 sv;         // dst's row and column strides; a's and b's (BN_SEG_RED: stats' rows, columns)
} pc;

shared vec2 sh[128];

// Adds v over the workgroup in a fixed tree; every invocation gets the sum.
vec2 tree(vec2 v)
{
    uint lid = gl_LocalInvocationID.x;
    sh[lid] = v;
    barrier();
    for (uint s = 64u; s > 0u; s >>= 1) {
        if (lid < s)
            sh[lid] += sh[lid + s];
        barrier();
    }
    vec2 r = sh[0];
    barrier();
    return r;
}

// Offset of channel element i (n, h, w in row-major order) under strides s.
uint at(uvec4 s, uint ch, uint i)
{
    uint hw = pc.ne.z * pc.ne.w, r = i % hw;
    return (i / hw) * s.x + ch * s.y + (r / pc.ne.w) * s.z + (r % pc.ne.w) * s.w;
}

uint seg_len(uint sg) { return min(pc.m - sg * BN_SEG, uint(BN_SEG)); }

void seg_stats(uint ch, uint sg)
{
    uint i0 = sg * BN_SEG, i1 = i0 + seg_len(sg);
    vec2 s = vec2(0.0);
    for (uint i = i0 + gl_LocalInvocationID.x; i < i1; i += 128u)
        s.x += ldf(pc.x, at(pc.sx, ch, i));
    float mean = tree(s).x / float(i1 - i0);
    s = vec2(0.0);
    for (uint i = i0 + gl_LocalInvocationID.x; i < i1; i += 128u) {
        float dv = ldf(pc.x, at(pc.sx, ch, i)) - mean;
        s.x += dv * dv;
    }
    float m2 = tree(s).x;
    if (gl_LocalInvocationID.x == 0u) {
        stf(pc.part, 2u * (ch * pc.nseg + sg), mean);
        stf(pc.part, 2u * (ch * pc.nseg + sg) + 1u, m2);
    }
}

void seg_red(uint ch, uint sg)
{
    uint i0 = sg * BN_SEG, i1 = i0 + seg_len(sg);
    float mean = ldfu(pc.a, ch * pc.sv.w), inv = ldfu(pc.a, pc.sv.z + ch * pc.sv.w);
    vec2 s = vec2(0.0);
    for (uint i = i0 + gl_LocalInvocationID.x; i < i1; i += 128u) {
        float g = ldf(pc.y, at(pc.sy, ch, i));
        s += vec2(g * ((ldf(pc.x, at(pc.sx, ch, i)) - mean) * inv), g);
    }
    s = tree(s);
    if (gl_LocalInvocationID.x == 0u) {
        stf(pc.part, 2u * (ch * pc.nseg + sg), s.x);
        stf(pc.part, 2u * (ch * pc.nseg + sg) + 1u, s.y);
    }
}

void fin_stats(uint ch)
{
    float n = 0.0, mean = 0.0, m2 = 0.0;
    for (uint sg = 0u; sg < pc.nseg; sg++) {
        float nb = float(seg_len(sg)), tot = n + nb;
        float mb = ldf(pc.part, 2u * (ch * pc.nseg + sg));
        float delta = mb - mean;
        m2 += ldf(pc.part, 2u * (ch * pc.nseg + sg) + 1u) + delta * delta * (n * nb / tot);
        mean += delta * (nb / tot);
        n = tot;
    }
    float var = m2 / float(pc.m);
    stf(pc.d, ch * pc.sv.y, mean);
    stf(pc.d, pc.sv.x + ch * pc.sv.y, 1.0 / sqrt(var + pc.eps));
    uint om = ch * pc.sv.z, ov = ch * pc.sv.w;
    float unbiased = var * (float(pc.m) / float(pc.m - 1u));
    stf(pc.a, om, (1.0 - pc.mom) * ldf(pc.a, om) + pc.mom * mean);
    stf(pc.b, ov, (1.0 - pc.mom) * ldf(pc.b, ov) + pc.mom * unbiased);
}

void fin_red(uint ch)
{
    vec2 s = vec2(0.0);
    for (uint sg = 0u; sg < pc.nseg; sg++)
        s += vec2(ldf(pc.part, 2u * (ch * pc.nseg + sg)), ldf(pc.part, 2u * (ch * pc.nseg + sg) + 1u));
    stf(pc.d, ch * pc.sv.y, s.x);
    stf(pc.d, pc.sv.x + ch * pc.sv.y, s.y);
}

void eval(uint ch)
{
    stf(pc.d, ch * pc.sv.y, ldfu(pc.a, ch * pc.sv.z));
    stf(pc.d, pc.sv.x + ch * pc.sv.y, 1.0 / sqrt(ldfu(pc.b, ch * pc.sv.w) + pc.eps));
}

void main()
{
    GATE_RETURN();
    if (VARIANT == BN_SEG_STATS || VARIANT == BN_SEG_RED) {
        for (uint it = gl_WorkGroupID.x; it < pc.c * pc.nseg; it += gl_NumWorkGroups.x) {
            if (VARIANT == BN_SEG_STATS)
                seg_stats(it / pc.nseg, it % pc.nseg);
            else
                seg_red(it / pc.nseg, it % pc.nseg);
        }
        return;
    }
    for (uint ch = gl_GlobalInvocationID.x; ch < pc.c; ch += gl_NumWorkGroups.x * 128u) {
        if (VARIANT == BN_FIN_STATS)
            fin_stats(ch);
        else if (VARIANT == BN_FIN_RED)
            fin_red(ch);
        else
            eval(ch);
    }
}
