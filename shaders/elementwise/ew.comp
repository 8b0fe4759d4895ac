// Every element-wise op: one invocation per dst element, sources at dst's coordinates
// through their own (possibly 0) strides; COPY_RESHAPE pairs elements by logical index.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "elementwise/variants.h"

layout(local_size_x = 128) in;
layout(push_constant) uniform PC
{
    uint gate, d, a, b;
    uvec4 ne, sd, sa, sb, ane;
    uint bits, n, k0, k1;
    uint pdim, cst, r0, r1;
} pc;

void main()
{
    GATE_RETURN();
    float keep = uintBitsToFloat(pc.bits);
    uint c0 = 0u, c1 = 0u;
    if (VARIANT == EW_DROP_PATH) {
        c0 = ldu(pc.b, 0u);
        c1 = ldu(pc.b, pc.cst);
    }
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += gl_NumWorkGroups.x * 128u) {
        uvec4 c = coords4(pc.ne, i);
        uint od = dot4(c, pc.sd), oa = dot4(c, pc.sa), ob = dot4(c, pc.sb);
        if (VARIANT == EW_FILL) {
            st(pc.d, od, pc.bits);
        } else if (VARIANT == EW_COPY) {
            st(pc.d, od, ld(pc.a, oa));
        } else if (VARIANT == EW_COPY_RESHAPE) {
            st(pc.d, od, ld(pc.a, off4(pc.ane, pc.sa, i)));
        } else if (VARIANT == EW_DROP_PATH) {
            float u = philox_uniform(pc.k0, pc.k1, c0, c1, c[pc.pdim]);
            stf(pc.d, od, ldf(pc.a, oa) * (u < keep ? 1.0 / keep : 0.0));
        } else {
            float x = ldf(pc.a, oa);
            float y = (VARIANT == EW_ADD || VARIANT == EW_SUB || VARIANT == EW_MUL ||
                       VARIANT == EW_AXPY || VARIANT == EW_RELU_BWD)
                          ? ldf(pc.b, ob)
                          : 0.0;
            float p = uintBitsToFloat(pc.bits);
            float r;
            if (VARIANT == EW_ADD)
                r = x + y;
            else if (VARIANT == EW_SUB)
                r = x - y;
            else if (VARIANT == EW_MUL)
                r = x * y;
            else if (VARIANT == EW_SCALE)
                r = p * x;
            else if (VARIANT == EW_AXPY)
                r = p * x + y;
            else if (VARIANT == EW_RELU)
                r = x < 0.0 ? 0.0 : x;
            else
                r = x > 0.0 ? y : 0.0;
            stf(pc.d, od, r);
        }
    }
}
