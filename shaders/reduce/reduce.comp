// SUM, MEAN, MAX (and GRAD_NORM's sums of squares) over the reduced dims: one workgroup
// per output element (grid-stride), each invocation folding every 128th reduced element
// into RED_LANES accumulators in turn (their loads in flight together: a single
// workgroup over a whole gradient is otherwise one load latency per 128 elements), the
// accumulators in order, then a fixed tree in shared memory. The order depends only on
// the shape: bitwise repeatable.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
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
        float init = VARIANT == RED_MAX ? uintBitsToFloat(0xFF800000u) : 0.0, a[RED_LANES];
        [[unroll]] for (uint k = 0u; k < RED_LANES; k++)
            a[k] = init;
        uint r = lid;
        for (; r + (RED_LANES - 1u) * 128u < pc.m; r += RED_LANES * 128u) {
            float v[RED_LANES];
            [[unroll]] for (uint k = 0u; k < RED_LANES; k++)
                v[k] = ldf(pc.x, xo + off4(pc.rne, pc.rxs, r + k * 128u));
            [[unroll]] for (uint k = 0u; k < RED_LANES; k++)
                a[k] = combine(a[k], VARIANT == RED_SUMSQ ? v[k] * v[k] : v[k]);
        }
        for (; r < pc.m; r += 128u) {
            float v = ldf(pc.x, xo + off4(pc.rne, pc.rxs, r));
            a[0] = combine(a[0], VARIANT == RED_SUMSQ ? v * v : v);
        }
        float acc = a[0];
        [[unroll]] for (uint k = 1u; k < RED_LANES; k++)
            acc = combine(acc, a[k]);
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
