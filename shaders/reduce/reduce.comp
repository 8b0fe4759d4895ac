// SUM, MEAN, MAX (and GRAD_NORM's sums of squares) over the reduced dims: one workgroup per output element (grid-stride),
// each invocation folding every 128th reduced element in order, then a fixed tree in
// shared memory. The order depends only on the shape: bitwise repeatable.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "reduce/variants.h"

layout(local_size_x = 128) in;
layout(push_constant) uniform PC
{
    uint gate, x, d, m;
    uint nout, r0, r1, r2;
    uvec4 kne, kxs, kds; // kept dims: size, x stride, dst stride
    uvec4 rne, rxs;      // reduced dims: size, x stride
} pc;

shared float part[128];

float combine(float a, float b) { return VARIANT == RED_MAX ? max_nan(a, b) : a + b; }

void main()
{
    GATE_RETURN();
    uint lid = gl_LocalInvocationID.x;
    for (uint o = gl_WorkGroupID.x; o < pc.nout; o += gl_NumWorkGroups.x) {
        uvec4 kc = coords4(pc.kne, o);
        uint xo = dot4(kc, pc.kxs);
        float acc = VARIANT == RED_MAX ? uintBitsToFloat(0xFF800000u) : 0.0;
        for (uint r = lid; r < pc.m; r += 128u) {
            float v = ldf(pc.x, xo + off4(pc.rne, pc.rxs, r));
            acc = combine(acc, VARIANT == RED_SUMSQ ? v * v : v);
        }
        part[lid] = acc;
        barrier();
        for (uint s = 64u; s > 0u; s >>= 1) {
            if (lid < s)
                part[lid] = combine(part[lid], part[lid + s]);
            barrier();
        }
        if (lid == 0u)
            stf(pc.d, dot4(kc, pc.kds),
                VARIANT == RED_MEAN       ? part[0] / float(pc.m)
                : VARIANT == RED_SQRT_SUM ? sqrt(part[0])
                                          : part[0]);
        barrier();
    }
}
