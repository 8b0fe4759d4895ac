// Every element-wise op: one invocation per dst element, sources at dst's coordinates
// through their own (possibly 0) strides; COPY_RESHAPE pairs elements by logical index.
// Where rows hold a multiple of 4 elements (vulkan/elementwise.c's ew_quads(), after it
// merged the dims every operand steps over as one: a dense tensor is one row), the ops
// but COPY_RESHAPE and DROP_PATH take 4 neighbours of a row an invocation: one index
// computation for 4 elements, and each operand's 4 loads in one request.
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

const bool BINARY = VARIANT == EW_ADD || VARIANT == EW_SUB || VARIANT == EW_MUL ||
                    VARIANT == EW_AXPY || VARIANT == EW_RELU_BWD;
const bool ARITH = VARIANT <= EW_RELU_BWD;

// The arithmetic ops on x (and y, for the binary ones).
float arith(float x, float y)
{
    float p = uintBitsToFloat(pc.bits);
    if (VARIANT == EW_ADD)
        return x + y;
    if (VARIANT == EW_SUB)
        return x - y;
    if (VARIANT == EW_MUL)
        return x * y;
    if (VARIANT == EW_SCALE)
        return p * x;
    if (VARIANT == EW_AXPY)
        return p * x + y;
    if (VARIANT == EW_RELU)
        return x < 0.0 ? 0.0 : x;
    return x > 0.0 ? y : 0.0;
}

void quads()
{
    const uvec4 j = uvec4(0u, 1u, 2u, 3u);
    for (uint q = gl_GlobalInvocationID.x; q < pc.n / 4u; q += gl_NumWorkGroups.x * 128u) {
        uvec4 c = coords4(pc.ne, 4u * q);
        uint od = dot4(c, pc.sd), oa = dot4(c, pc.sa), ob = dot4(c, pc.sb);
        uvec4 r = uvec4(pc.bits);
        if (VARIANT == EW_COPY) {
            r = ld4(pc.a, oa + j * pc.sa.w);
        } else if (ARITH) {
            vec4 x = ldf4(pc.a, oa + j * pc.sa.w);
            vec4 y = BINARY ? ldf4(pc.b, ob + j * pc.sb.w) : vec4(0.0);
            for (uint t = 0u; t < 4u; t++)
                r[t] = floatBitsToUint(arith(x[t], y[t]));
        }
        for (uint t = 0u; t < 4u; t++)
            st(pc.d, od + t * pc.sd.w, r[t]);
    }
}

void main()
{
    GATE_RETURN();
    if (VARIANT != EW_COPY_RESHAPE && VARIANT != EW_DROP_PATH && pc.ne.w % 4u == 0u) {
        quads();
        return;
    }
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
            stf(pc.d, od, arith(ldf(pc.a, oa), BINARY ? ldf(pc.b, ob) : 0.0));
        }
    }
}
