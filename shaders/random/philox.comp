// RAND_UNIFORM (variant 0) and RAND_NORMAL (variant 1): element i (row-major logical
// index of dst) takes draw i of the Philox stream, bit for bit the CPU's uniforms.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 128) in;
layout(push_constant) uniform PC
{
    uint gate, d, c, cst; // dst, counter and the offset of its element 1
    uint k0, k1, n, r0;
    float a, b, r1, r2;
    uvec4 ne, sd;
} pc;

void main()
{
    GATE_RETURN();
    uint c0 = ldu(pc.c, 0u), c1 = ldu(pc.c, pc.cst);
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += gl_NumWorkGroups.x * 128u) {
        float v = VARIANT == 1 ? pc.a + pc.b * philox_normal(pc.k0, pc.k1, c0, c1, i)
                               : pc.a + (pc.b - pc.a) * philox_uniform(pc.k0, pc.k1, c0, c1, i);
        stf(pc.d, off4(pc.ne, pc.sd, i), v);
    }
}
