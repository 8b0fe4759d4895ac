// MAX_BWD: dst = dy where x == y, else 0; y and dy arrive broadcast by stride 0.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 128) in;
layout(push_constant) uniform PC
{
    uint gate, d, x, y;
    uint dy, n, r0, r1;
    uvec4 ne, sd, sx, sy, sdy;
} pc;

void main()
{
    GATE_RETURN();
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += gl_NumWorkGroups.x * 128u) {
        uvec4 c = coords4(pc.ne, i);
        float xv = ldf(pc.x, dot4(c, pc.sx)), yv = ldf(pc.y, dot4(c, pc.sy));
        stf(pc.d, dot4(c, pc.sd), xv == yv ? ldf(pc.dy, dot4(c, pc.sdy)) : 0.0);
    }
}
