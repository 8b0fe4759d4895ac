// The weight gradient's last pass, one workgroup: each active candidate's chunk partials
// (mix.comp's MIX_DOT) added by a fixed tree, then dst[k] = the sum over the active
// candidates with weight index k, in candidate order; 0 for every other entry.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "nas/variants.h"

layout(local_size_x = 128) in;
layout(push_constant) uniform PC
{
    uint gate, d, tab, part;
    uint n, nch, k, r0; // candidates, chunks per candidate, entries of dst
    uvec4 dne, dst;
} pc;

shared float fs[128];
shared float tot[16];

void main()
{
    GATE_RETURN();
    uint lid = gl_LocalInvocationID.x;
    for (uint j = 0u; j < pc.n; j++) {
        if (ldu(pc.tab, MIX_TAB * j + 1u) == 0u)
            continue; // the same in every invocation
        float v = 0.0;
        for (uint c = lid; c < pc.nch; c += 128u)
            v += ldf(pc.part, j * MIX_ROW(pc.nch) + c);
        fs[lid] = v;
        barrier();
        for (uint s = 64u; s > 0u; s >>= 1) {
            if (lid < s)
                fs[lid] += fs[lid + s];
            barrier();
        }
        if (lid == 0u)
            tot[j] = fs[0];
        barrier();
    }
    for (uint k = lid; k < pc.k; k += 128u) {
        float acc = 0.0;
        for (uint j = 0u; j < pc.n; j++)
            if (ldu(pc.tab, MIX_TAB * j + 1u) != 0u && ldu(pc.tab, MIX_TAB * j + 2u) == k)
                acc += tot[j];
        stf(pc.d, off4(pc.dne, pc.dst, k), acc);
    }
}
