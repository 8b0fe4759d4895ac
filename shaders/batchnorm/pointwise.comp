// Batch-norm apply and backward-data: element-wise over x's shape [N, C, H, W], with the
// per-channel constants folded as the CPU backend's fast path folds them.
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
    uint gs, bs, flags, n; // gamma's and beta's strides; BN_TRAIN, BN_XHAT; elements
} pc;

void main()
{
    GATE_RETURN();
    float m = float(pc.ne.x * pc.ne.z * pc.ne.w);
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += gl_NumWorkGroups.x * 128u) {
        uvec4 c = coords4(pc.ne, i);
        uint ch = c.y;
        float mean = ldfu(pc.s, ch * pc.sv.y), inv = ldfu(pc.s, pc.sv.x + ch * pc.sv.y);
        float gm = pc.g == NOREF ? 1.0 : ldfu(pc.g, ch * pc.gs);
        float xv = ldf(pc.x, dot4(c, pc.sx));
        float v;
        if (VARIANT == BN_APPLY) {
            float k = inv * gm, bt = pc.b == NOREF ? 0.0 : ldfu(pc.b, ch * pc.bs);
            v = xv * k + (bt - mean * k);
        } else {
            float c1 = 0.0, c2 = 0.0;
            if ((pc.flags & BN_TRAIN) != 0u) {
                c1 = ldfu(pc.r, pc.sv.z + ch * pc.sv.w) / m;
                c2 = ldfu(pc.r, ch * pc.sv.w) / m;
            }
            float xh = (pc.flags & BN_XHAT) != 0u ? xv : (xv - mean) * inv;
            v = inv * gm * (ldf(pc.y, dot4(c, pc.sy)) - c1 - xh * c2);
        }
        stf(pc.d, dot4(c, pc.sd), v);
    }
}
