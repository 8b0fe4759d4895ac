// The weight gradient's last pass, one workgroup: each active candidate's chunk partials
// (mix.comp's MIX_DOT, one row of MIX_ROW(nch) words per candidate) added in a fixed
// order (invocation t every 128th from t, every candidate's load issued before the first
// is added; then 16 neighbouring invocations, then 8 of those sums), then dst[k] = the
// sum over the active candidates with weight index k, in candidate order; 0 for every
// other entry.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "nas/variants.h"

layout(local_size_x = 128) in;
layout(push_constant) uniform PC
{
    uint gate, d, tab, part;
    uint n, nch, k, r0; // candidates, chunks per candidate, entries of dst
    uvec4 dne, dst;
} pc;

shared float fs[16 * 128 + 16 * 8];
shared float tot[16];

bool is_active(uint j) { return j < pc.n && ldu(pc.tab, MIX_TAB * j + 1u) != 0u; }

void main()
{
    GATE_RETURN();
    uint lid = gl_LocalInvocationID.x, on = 0u;
    for (uint j = 0u; j < pc.n; j++)
        on |= is_active(j) ? 1u << j : 0u;
    float v[16];
    [[unroll]] for (uint j = 0u; j < 16u; j++)
        v[j] = 0.0;
    for (uint c0 = 0u; c0 < pc.nch; c0 += 128u) {
        uint c = c0 + lid;
        float q[16];
        [[unroll]] for (uint j = 0u; j < 16u; j++)
            q[j] = ((on >> j) & 1u) != 0u && c < pc.nch ? ldf(pc.part, j * MIX_ROW(pc.nch) + c) : 0.0;
        [[unroll]] for (uint j = 0u; j < 16u; j++)
            v[j] += q[j];
    }
    [[unroll]] for (uint j = 0u; j < 16u; j++)
        fs[j * 128u + lid] = v[j];
    barrier();
    uint jj = lid / 8u, l = lid % 8u;
    float s = 0.0;
    for (uint k = 0u; k < 16u; k++)
        s += fs[jj * 128u + l * 16u + k];
    fs[16u * 128u + jj * 8u + l] = s;
    barrier();
    if (lid < 16u) {
        float t = 0.0;
        for (uint k = 0u; k < 8u; k++)
            t += fs[16u * 128u + lid * 8u + k];
        tot[lid] = t;
    }
    barrier();
    for (uint k = lid; k < pc.k; k += 128u) {
        float acc = 0.0;
        for (uint j = 0u; j < pc.n; j++)
            if (((on >> j) & 1u) != 0u && ldu(pc.tab, MIX_TAB * j + 2u) == k)
                acc += tot[j];
        stf(pc.d, off4(pc.dne, pc.dst, k), acc);
    }
}
