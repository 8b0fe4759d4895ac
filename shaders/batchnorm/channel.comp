// exapt: writes 1 2 3
// Per-channel batch-norm reductions in one pass or two. The segment pass gives each segment of
// BN_SEG consecutive elements (n, h, w order) of a channel to one workgroup, whose 128
// invocations hold 16 elements each in registers (invocation t the t-th of every 128,
// loaded four at a time, all in flight together) and add their f32 partials in a fixed
// two-level order (16 sums of 8 invocations, then the 16): for the statistics the
// segment's mean and then the sum of squared deviations from it (from the same registers,
// so a large mean does not cancel the variance away and x is read once), for the backward
// the sums of dy * xhat and dy. The finishing pass gives each channel to one workgroup,
// which loads the segments' partials in parallel and merges them in order (Chan et al.'s
// pairwise update for the variance); no float atomics, repeatable. In one pass (BN_ONE_*)
// the segments' partials go to a zone slot instead of scratch, and the workgroup whose
// segment of a channel comes last (the channel's ticket counts them) finishes that channel
// as the finishing pass would: the same sums in the same order, one dispatch, no barrier.
// A synchronized batch norm's moments (BN_STATS ip1 = 1, pc.flag) take the statistics'
// passes and store the mean and biased variance instead; its finish (BN_FINISH) is a pass
// over the channels, as eval's.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#define EX_COHERENT
#include "common.glsl"
#include "batchnorm/variants.h"

layout(local_size_x = 128) in;
layout(push_constant) uniform PC
{
    uint gate, d, x, y;     // dst [2, C], x, dy (BN_SEG_RED)
    uint a, b, m, c;        // running mean and var, or stats (BN_SEG_RED); M; C
    uint part, nseg, r0, r1; // scratch: 2 words per (channel, segment); segments per channel;
                             // whether x's (r0) and dy's (r1) planes have dense rows
    float eps, mom;
    uint flag, tick; // BN_SEG_RED: x is xhat itself (ip1 of BN_BWD_REDUCE); the statistics:
                     // the moments only (BN_STATS ip1 = 1); BN_ONE_*: tickets
    uvec4 ne, sx, sy; // x's shape [N, C, H, W]; strides of x and dy (BN_FINISH: x is the
                      // moments [2, C], sy.x and sy.y their row and column strides)
    uvec4 sv;         // dst's row and column strides; a's and b's (BN_SEG_RED: stats' rows, columns)
} pc;

shared vec2 sh[128 + 16];

// Adds v over the workgroup in a fixed order (8 invocations, then 16 of those sums); every
// invocation gets the sum.
vec2 wg_sum(vec2 v)
{
    uint lid = gl_LocalInvocationID.x;
    sh[lid] = v;
    barrier();
    if (lid < 16u) {
        vec2 s = vec2(0.0);
        for (uint k = 0u; k < 8u; k++)
            s += sh[lid * 8u + k];
        sh[128u + lid] = s;
    }
    barrier();
    vec2 r = vec2(0.0);
    for (uint k = 0u; k < 16u; k++)
        r += sh[128u + k];
    barrier();
    return r;
}

uint seg_len(uint sg) { return min(pc.m - sg * BN_SEG, uint(BN_SEG)); }

// The offsets under strides s of this invocation's BN_PER elements of segment sg of channel
// ch (element t + 128 j of the segment, n-major), element 0 where past the segment's end.
// The position (n, r) is decoded once and stepped by 128 with a carry; h and w are split
// only where the plane's rows are not dense (pc.r0 != 0 says x's are, pc.r1 dy's).
void offsets(uvec4 s, bool dense, uint ch, uint sg, out uint off[BN_PER])
{
    uint hw = pc.ne.z * pc.ne.w, dn = 128u / hw, dr = 128u % hw;
    uint i = sg * BN_SEG + gl_LocalInvocationID.x, i1 = sg * BN_SEG + seg_len(sg);
    uint nb = i / hw, r = i - nb * hw;
    [[unroll]] for (uint j = 0u; j < BN_PER; j++, i += 128u) {
        uint sp = dense ? r * s.w : (r / pc.ne.w) * s.z + (r % pc.ne.w) * s.w;
        off[j] = i < i1 ? nb * s.x + ch * s.y + sp : 0u;
        nb += dn;
        r += dr;
        if (r >= hw) {
            r -= hw;
            nb++;
        }
    }
}

// Loads BN_PER elements at off (four per switch on the binding, all in flight).
void load(uint ref, uint off[BN_PER], out float v[BN_PER])
{
    [[unroll]] for (uint j = 0u; j < BN_PER; j += 4u) {
        vec4 q = ldf4(ref, uvec4(off[j], off[j + 1u], off[j + 2u], off[j + 3u]));
        [[unroll]] for (uint k = 0u; k < 4u; k++)
            v[j + k] = q[k];
    }
}

void seg_stats(uint ch, uint sg)
{
    uint off[BN_PER], len = seg_len(sg), lid = gl_LocalInvocationID.x;
    float v[BN_PER];
    offsets(pc.sx, pc.r0 != 0u, ch, sg, off);
    load(pc.x, off, v);
    float s = 0.0;
    [[unroll]] for (uint j = 0u; j < BN_PER; j++)
        s += lid + 128u * j < len ? v[j] : 0.0;
    float mean = wg_sum(vec2(s, 0.0)).x / float(len);
    s = 0.0;
    [[unroll]] for (uint j = 0u; j < BN_PER; j++) {
        float dv = v[j] - mean;
        s += lid + 128u * j < len ? dv * dv : 0.0;
    }
    float m2 = wg_sum(vec2(s, 0.0)).x;
    if (lid == 0u) {
        stf(pc.part, 2u * (ch * pc.nseg + sg), mean);
        stf(pc.part, 2u * (ch * pc.nseg + sg) + 1u, m2);
    }
}

void seg_red(uint ch, uint sg)
{
    uint ox[BN_PER], oy[BN_PER], len = seg_len(sg), lid = gl_LocalInvocationID.x;
    float xv[BN_PER], gv[BN_PER];
    offsets(pc.sx, pc.r0 != 0u, ch, sg, ox);
    offsets(pc.sy, pc.r1 != 0u, ch, sg, oy);
    load(pc.x, ox, xv);
    load(pc.y, oy, gv);
    float mean = 0.0, inv = 1.0;
    if (pc.flag == 0u) {
        mean = ldfu(pc.a, ch * pc.sv.w);
        inv = ldfu(pc.a, pc.sv.z + ch * pc.sv.w);
    }
    vec2 s = vec2(0.0);
    [[unroll]] for (uint j = 0u; j < BN_PER; j++)
        if (lid + 128u * j < len)
            s += vec2(gv[j] * ((xv[j] - mean) * inv), gv[j]);
    s = wg_sum(s);
    if (lid == 0u) {
        stf(pc.part, 2u * (ch * pc.nseg + sg), s.x);
        stf(pc.part, 2u * (ch * pc.nseg + sg) + 1u, s.y);
    }
}

// Channel ch's statistics from its mean and biased variance over pc.m values: the moments
// (pc.flag), or mean and invstd with the running statistics moved (the variance unbiased).
void stats_out(uint ch, float mean, float var)
{
    stf(pc.d, ch * pc.sv.y, mean);
    if (pc.flag != 0u) {
        stf(pc.d, pc.sv.x + ch * pc.sv.y, var);
        return;
    }
    stf(pc.d, pc.sv.x + ch * pc.sv.y, 1.0 / sqrt(var + pc.eps));
    uint om = ch * pc.sv.z, ov = ch * pc.sv.w;
    float unbiased = var * (float(pc.m) / float(pc.m - 1u));
    stf(pc.a, om, (1.0 - pc.mom) * ldf(pc.a, om) + pc.mom * mean);
    stf(pc.b, ov, (1.0 - pc.mom) * ldf(pc.b, ov) + pc.mom * unbiased);
}

// Channel ch's segment partials, 128 at a time into sh (in parallel), merged in order by
// invocation 0: Chan et al.'s update (statistics) or a plain sum (red).
void finish(uint ch, bool red)
{
    uint lid = gl_LocalInvocationID.x;
    float n = 0.0, mean = 0.0, m2 = 0.0;
    vec2 sum = vec2(0.0);
    for (uint s0 = 0u; s0 < pc.nseg; s0 += 128u) {
        uint cnt = min(128u, pc.nseg - s0);
        barrier(); // invocation 0 is done with the previous batch
        if (lid < cnt)
            sh[lid] = vec2(ldf(pc.part, 2u * (ch * pc.nseg + s0 + lid)),
                           ldf(pc.part, 2u * (ch * pc.nseg + s0 + lid) + 1u));
        barrier();
        if (lid != 0u)
            continue;
        for (uint k = 0u; k < cnt; k++) {
            if (red) {
                sum += sh[k];
                continue;
            }
            float nb = float(seg_len(s0 + k)), tot = n + nb, delta = sh[k].x - mean;
            m2 += sh[k].y + delta * delta * (n * nb / tot);
            mean += delta * (nb / tot);
            n = tot;
        }
    }
    if (lid != 0u)
        return;
    if (red) {
        stf(pc.d, ch * pc.sv.y, sum.x);
        stf(pc.d, pc.sv.x + ch * pc.sv.y, sum.y);
        return;
    }
    stats_out(ch, mean, m2 / float(pc.m));
}

// A synchronized batch norm's finish: channel ch's statistics from the group's mean and
// biased variance (combined over the ranks by the engine; the variance 0 where below, a
// NaN passes), over pc.m values.
void finish_moments(uint ch)
{
    float mean = ldfu(pc.x, ch * pc.sy.y), var = ldfu(pc.x, pc.sy.x + ch * pc.sy.y);
    stats_out(ch, mean, var < 0.0 ? 0.0 : var);
}

void eval(uint ch)
{
    stf(pc.d, ch * pc.sv.y, ldfu(pc.a, ch * pc.sv.z));
    stf(pc.d, pc.sv.x + ch * pc.sv.y, 1.0 / sqrt(ldfu(pc.b, ch * pc.sv.w) + pc.eps));
}

void main()
{
    GATE_RETURN();
    bool one = VARIANT == BN_ONE_STATS || VARIANT == BN_ONE_RED;
    bool red = VARIANT == BN_SEG_RED || VARIANT == BN_FIN_RED || VARIANT == BN_ONE_RED;
    if (one || VARIANT == BN_SEG_STATS || VARIANT == BN_SEG_RED) {
        for (uint it = gl_WorkGroupID.x; it < pc.c * pc.nseg; it += gl_NumWorkGroups.x) {
            uint ch = it / pc.nseg;
            if (red)
                seg_red(ch, it % pc.nseg);
            else
                seg_stats(ch, it % pc.nseg);
            if (one && last_in(pc.tick, ch, pc.nseg))
                finish(ch, red);
        }
    } else if (VARIANT == BN_FIN_STATS || VARIANT == BN_FIN_RED) {
        for (uint ch = gl_WorkGroupID.x; ch < pc.c; ch += gl_NumWorkGroups.x)
            finish(ch, red);
    } else if (VARIANT == BN_FINISH) {
        for (uint ch = gl_GlobalInvocationID.x; ch < pc.c; ch += gl_NumWorkGroups.x * 128u)
            finish_moments(ch);
    } else {
        for (uint ch = gl_GlobalInvocationID.x; ch < pc.c; ch += gl_NumWorkGroups.x * 128u)
            eval(ch);
    }
}
