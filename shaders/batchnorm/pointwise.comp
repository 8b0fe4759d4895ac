// Batch-norm apply and backward-data: element-wise over x's shape [N, C, H, W], with the
// per-channel constants folded as the CPU backend's fast path folds them. With BN_QUAD
// (rows of a multiple of 4 elements, x, dst and dy dense along them; or planes of a
// multiple of 4, dense) an invocation takes 4 neighbours of a row (or plane): one index
// computation and one channel's constants for 4 elements, and their loads in flight
// together.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "batchnorm/variants.h"

layout(local_size_x = 128) in;
layout(push_constant) uniform PC
{
    uint gate, d, x, s; // dst, x, stats [2, C]
    uint y, r, g, b;    // dy, red [2, C] (BN_DATA); gamma, beta (NOREF: absent)
    uvec4 ne, sx, sd, sy; // x's shape; strides of x, dst, dy
    uvec4 sv;             // stats' row and column strides; red's
    uint gs, bs, flags, n; // gamma's and beta's strides; BN_TRAIN, BN_XHAT, BN_QUAD and
                           // R << BN_RANKS; elements
} pc;

// Channel ch's constants: apply, v = x k.x + k.y; data, v = k.x (dy - k.y - xhat k.z) with
// xhat = x or (x - mean) invstd (k.w: mean, invstd in `inv`).
vec4 channel_consts(uint ch, out float inv)
{
    float mean = ldfu(pc.s, ch * pc.sv.y);
    inv = ldfu(pc.s, pc.sv.x + ch * pc.sv.y);
    float gm = pc.g == NOREF ? 1.0 : ldfu(pc.g, ch * pc.gs);
    if (VARIANT == BN_APPLY) {
        float k = inv * gm, bt = pc.b == NOREF ? 0.0 : ldfu(pc.b, ch * pc.bs);
        return vec4(k, bt - mean * k, 0.0, mean);
    }
    float c1 = 0.0, c2 = 0.0;
    if ((pc.flags & BN_TRAIN) != 0u) {
        // the statistics' count: N*H*W of every rank (R >= 1 from bit BN_RANKS)
        float m = float(pc.ne.x * pc.ne.z * pc.ne.w * (pc.flags >> BN_RANKS));
        c1 = ldfu(pc.r, pc.sv.z + ch * pc.sv.w) / m;
        c2 = ldfu(pc.r, ch * pc.sv.w) / m;
    }
    return vec4(inv * gm, c1, c2, mean);
}

float one(vec4 k, float inv, float xv, float dy)
{
    if (VARIANT == BN_APPLY)
        return xv * k.x + k.y;
    float xh = (pc.flags & BN_XHAT) != 0u ? xv : (xv - k.w) * inv;
    return k.x * (dy - k.y - xh * k.z);
}

void main()
{
    GATE_RETURN();
    uint per = (pc.flags & BN_QUAD) != 0u ? 4u : 1u, items = pc.n / per;
    for (uint q = gl_GlobalInvocationID.x; q < items; q += gl_NumWorkGroups.x * 128u) {
        uvec4 c = coords4(pc.ne, q * per);
        float inv;
        vec4 k = channel_consts(c.y, inv);
        uint ox = dot4(c, pc.sx), od = dot4(c, pc.sd), oy = dot4(c, pc.sy);
        if (per == 1u) {
            float dy = VARIANT == BN_DATA ? ldf(pc.y, oy) : 0.0;
            stf(pc.d, od, one(k, inv, ldf(pc.x, ox), dy));
            continue;
        }
        const uvec4 j = uvec4(0u, 1u, 2u, 3u);
        vec4 xv = ldf4(pc.x, ox + j), dy = VARIANT == BN_DATA ? ldf4(pc.y, oy + j) : vec4(0.0);
        for (uint t = 0u; t < 4u; t++)
            stf(pc.d, od + t, one(k, inv, xv[t], dy[t]));
    }
}
