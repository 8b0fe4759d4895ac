// The mixed sum and the dot products of its weight gradient, over one group of up to
// MIX_GROUP consecutive candidates that share their strides (the host splits the rest
// into further dispatches). Inactive candidates (the table from mixtab.comp) are never
// read. MIX_FWD writes dst, MIX_FWD_ACC adds to it, so every element is the sum over the
// candidates in index order, as on the CPU. MIX_DOT: workgroup per chunk of MIX_CHUNK
// elements of dy, one fixed tree per candidate q of the group into part[q * MIX_ROW(nch) +
// chunk] (part: the group's rows).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "nas/variants.h"

layout(local_size_x = 128) in;
layout(push_constant) uniform PC
{
    uint gate, d, tab, part; // d: dst (forward) or dy (MIX_DOT)
    uint n, nch, j0, cnt;    // elements, chunks, the group's first candidate and size
    uvec4 ne, sd, sx;        // the padded shape; strides of d and of the group's candidates
    uvec4 x[3];              // the group's candidates
} pc;

shared float fs[128];

uint cand(uint q) { return pc.x[q / 4u][q % 4u]; }
bool is_on(uint q) { return ldu(pc.tab, MIX_TAB * (pc.j0 + q) + 1u) != 0u; }

float tree(float v)
{
    uint lid = gl_LocalInvocationID.x;
    fs[lid] = v;
    barrier();
    for (uint s = 64u; s > 0u; s >>= 1) {
        if (lid < s)
            fs[lid] += fs[lid + s];
        barrier();
    }
    float r = fs[0];
    barrier();
    return r;
}

// The group's table entries, read once per invocation rather than once per element.
void group_table(out bool on[MIX_GROUP], out float coef[MIX_GROUP])
{
    for (uint q = 0u; q < MIX_GROUP; q++) {
        on[q] = q < pc.cnt && is_on(q);
        coef[q] = on[q] ? ldfu(pc.tab, MIX_TAB * (pc.j0 + q)) : 0.0;
    }
}

void forward()
{
    bool on[MIX_GROUP];
    float coef[MIX_GROUP];
    group_table(on, coef);
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += gl_NumWorkGroups.x * 128u) {
        uvec4 c = coords4(pc.ne, i);
        uint od = dot4(c, pc.sd), ox = dot4(c, pc.sx);
        float acc = VARIANT == MIX_FWD_ACC ? ldf(pc.d, od) : 0.0;
        for (uint q = 0u; q < pc.cnt; q++)
            if (on[q])
                acc += coef[q] * ldf(cand(q), ox);
        stf(pc.d, od, acc);
    }
}

void dots()
{
    uint lid = gl_LocalInvocationID.x;
    bool on[MIX_GROUP];
    float coef[MIX_GROUP];
    group_table(on, coef);
    for (uint ch = gl_WorkGroupID.x; ch < pc.nch; ch += gl_NumWorkGroups.x) {
        uint i1 = min(pc.n, (ch + 1u) * MIX_CHUNK);
        float s[MIX_GROUP];
        for (uint q = 0u; q < MIX_GROUP; q++)
            s[q] = 0.0;
        for (uint i = ch * MIX_CHUNK + lid; i < i1; i += 128u) {
            uvec4 c = coords4(pc.ne, i);
            float g = ldf(pc.d, dot4(c, pc.sd));
            uint ox = dot4(c, pc.sx);
            for (uint q = 0u; q < pc.cnt; q++)
                if (on[q])
                    s[q] += g * ldf(cand(q), ox);
        }
        for (uint q = 0u; q < pc.cnt; q++) {
            if (!on[q])
                continue; // the same in every invocation
            float v = tree(s[q]);
            if (lid == 0u)
                stf(pc.part, q * MIX_ROW(pc.nch) + ch, v);
        }
    }
}

void main()
{
    GATE_RETURN();
    if (VARIANT == MIX_DOT)
        dots();
    else
        forward();
}
