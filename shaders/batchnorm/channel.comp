// Per-channel batch-norm reductions: one workgroup per channel (grid-stride over channels)
// walks the channel's M = N*H*W elements, each invocation summing a fixed strided subset,
// and a fixed shared-memory tree adds the 128 partial sums, so results are bitwise
// repeatable. Training statistics take two passes (the mean, then the squared deviations
// from it), so a large mean does not cancel the variance away in float.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "batchnorm/variants.h"

layout(local_size_x = 128) in;
layout(push_constant) uniform PC
{
    uint gate, d, x, y; // dst [2, C], x, dy (BN_RED)
    uint a, b, m, c;    // running mean and var (stats) or stats (BN_RED); M; C
    uint r0, r1;
    float eps, mom;
    uvec4 ne, sx, sy; // x's shape [N, C, H, W]; strides of x and dy
    uvec4 sv;         // dst's row and column strides; a's and b's (BN_RED: stats' rows, columns)
} pc;

shared vec2 part[128];

// Adds v over the workgroup in a fixed tree; every invocation gets the sum.
vec2 tree(vec2 v)
{
    uint lid = gl_LocalInvocationID.x;
    part[lid] = v;
    barrier();
    for (uint s = 64u; s > 0u; s >>= 1) {
        if (lid < s)
            part[lid] += part[lid + s];
        barrier();
    }
    vec2 r = part[0];
    barrier();
    return r;
}

// Offset of channel element i (n, h, w in row-major order) under strides s.
uint at(uvec4 s, uint ch, uint i)
{
    uint hw = pc.ne.z * pc.ne.w, r = i % hw;
    return (i / hw) * s.x + ch * s.y + (r / pc.ne.w) * s.z + (r % pc.ne.w) * s.w;
}

void stats_train(uint ch)
{
    vec2 s = vec2(0.0);
    for (uint i = gl_LocalInvocationID.x; i < pc.m; i += 128u)
        s.x += ldf(pc.x, at(pc.sx, ch, i));
    float mean = tree(s).x / float(pc.m);
    s = vec2(0.0);
    for (uint i = gl_LocalInvocationID.x; i < pc.m; i += 128u) {
        float dv = ldf(pc.x, at(pc.sx, ch, i)) - mean;
        s.x += dv * dv;
    }
    float var = tree(s).x / float(pc.m);
    if (gl_LocalInvocationID.x != 0u)
        return;
    stf(pc.d, ch * pc.sv.y, mean);
    stf(pc.d, pc.sv.x + ch * pc.sv.y, 1.0 / sqrt(var + pc.eps));
    uint om = ch * pc.sv.z, ov = ch * pc.sv.w;
    float unbiased = var * (float(pc.m) / float(pc.m - 1u));
    stf(pc.a, om, (1.0 - pc.mom) * ldf(pc.a, om) + pc.mom * mean);
    stf(pc.b, ov, (1.0 - pc.mom) * ldf(pc.b, ov) + pc.mom * unbiased);
}

void stats_eval(uint ch)
{
    if (gl_LocalInvocationID.x != 0u)
        return;
    stf(pc.d, ch * pc.sv.y, ldf(pc.a, ch * pc.sv.z));
    stf(pc.d, pc.sv.x + ch * pc.sv.y, 1.0 / sqrt(ldf(pc.b, ch * pc.sv.w) + pc.eps));
}

void bwd_reduce(uint ch)
{
    float mean = ldf(pc.a, ch * pc.sv.w), inv = ldf(pc.a, pc.sv.z + ch * pc.sv.w);
    vec2 s = vec2(0.0);
    for (uint i = gl_LocalInvocationID.x; i < pc.m; i += 128u) {
        float g = ldf(pc.y, at(pc.sy, ch, i));
        s += vec2(g * ((ldf(pc.x, at(pc.sx, ch, i)) - mean) * inv), g);
    }
    s = tree(s);
    if (gl_LocalInvocationID.x == 0u) {
        stf(pc.d, ch * pc.sv.y, s.x);
        stf(pc.d, pc.sv.x + ch * pc.sv.y, s.y);
    }
}

void main()
{
    GATE_RETURN();
    for (uint ch = gl_WorkGroupID.x; ch < pc.c; ch += gl_NumWorkGroups.x) {
        if (VARIANT == BN_STATS_TRAIN)
            stats_train(ch);
        else if (VARIANT == BN_STATS_EVAL)
            stats_eval(ch);
        else
            bwd_reduce(ch);
    }
}
