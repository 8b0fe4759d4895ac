// The mixed sum and the dot products of its weight gradient, over one group of up to
// MIX_GROUP consecutive candidates that share their strides (the host splits the rest
// into further dispatches). Inactive candidates (the table from mixtab.comp) are never
// read; the group's activity is read once per invocation (the coefficients per element,
// uniform loads from the table's uniform buffer: an array of them would be indexed at run
// time), every active candidate's load of an element is issued before the first is added,
// and where dy (dst) and the group are contiguous an element's offset is its index (and,
// for a multiple of 4 elements, an invocation takes 4 neighbours).
// MIX_FWD writes dst, MIX_FWD_ACC adds to it, so every element is the sum over the
// candidates in index order, as on the CPU. MIX_DOT: a workgroup per chunk of MIX_CHUNK
// elements of dy, MIX_SUB at a time with every load of dy and of the active candidates
// issued before the first is used; each invocation's sums per candidate are added in a
// fixed two-level order (16 of its neighbours, then 8 of those sums) into
// part[q * MIX_ROW(nch) + chunk] for candidate q of the group (part: the group's rows, so
// groups write bytes of their own and need no barrier between them).
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
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

shared float fs[MIX_GROUP * 128 + MIX_GROUP * 8];

uint cand(uint q) { return pc.x[q / 4u][q % 4u]; }

// The group's active candidates as bits (read once, not per element).
uint actives()
{
    uint on = 0u;
    for (uint q = 0u; q < pc.cnt; q++)
        if (ldu(pc.tab, MIX_TAB * (pc.j0 + q) + 1u) != 0u)
            on |= 1u << q;
    return on;
}

// Whether strides s lay out shape ne row-major without gaps (sizes of 1 take any stride).
bool contiguous(uvec4 s)
{
    uint p = 1u;
    bool ok = true;
    for (int k = 3; k >= 0; k--) {
        ok = ok && (pc.ne[k] < 2u || s[k] == p);
        p *= pc.ne[k];
    }
    return ok;
}

// Dense operands of a multiple of 4 elements (vulkan/nas.c's mix_quads): 4 neighbours an
// invocation, each candidate's 4 in one load request, the same sums per element.
void forward_quads(uint on)
{
    const uvec4 j = uvec4(0u, 1u, 2u, 3u);
    for (uint i = gl_GlobalInvocationID.x * 4u; i < pc.n; i += gl_NumWorkGroups.x * 512u) {
        vec4 xv[MIX_GROUP];
        [[unroll]] for (uint q = 0u; q < MIX_GROUP; q++)
            xv[q] = ((on >> q) & 1u) != 0u ? ldf4(cand(q), i + j) : vec4(0.0);
        vec4 acc = VARIANT == MIX_FWD_ACC ? ldf4(pc.d, i + j) : vec4(0.0);
        [[unroll]] for (uint q = 0u; q < MIX_GROUP; q++)
            if (((on >> q) & 1u) != 0u)
                acc += ldfu(pc.tab, MIX_TAB * (pc.j0 + q)) * xv[q];
        [[unroll]] for (uint t = 0u; t < 4u; t++)
            stf(pc.d, i + t, acc[t]);
    }
}

void forward()
{
    uint on = actives();
    bool dense = contiguous(pc.sd) && contiguous(pc.sx);
    if (dense && pc.n % 4u == 0u) {
        forward_quads(on);
        return;
    }
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += gl_NumWorkGroups.x * 128u) {
        uint od = i, ox = i;
        if (!dense) {
            uvec4 c = coords4(pc.ne, i);
            od = dot4(c, pc.sd);
            ox = dot4(c, pc.sx);
        }
        // every active candidate's load issued before the first is added
        float xv[MIX_GROUP];
        [[unroll]] for (uint q = 0u; q < MIX_GROUP; q++)
            xv[q] = ((on >> q) & 1u) != 0u ? ldf(cand(q), ox) : 0.0;
        float acc = VARIANT == MIX_FWD_ACC ? ldf(pc.d, od) : 0.0;
        [[unroll]] for (uint q = 0u; q < MIX_GROUP; q++)
            if (((on >> q) & 1u) != 0u)
                acc += ldfu(pc.tab, MIX_TAB * (pc.j0 + q)) * xv[q];
        stf(pc.d, od, acc);
    }
}

void dots()
{
    uint lid = gl_LocalInvocationID.x;
    uint on = actives();
    bool dense = contiguous(pc.sd) && contiguous(pc.sx);
    for (uint ch = gl_WorkGroupID.x; ch < pc.nch; ch += gl_NumWorkGroups.x) {
        float s[MIX_GROUP];
        [[unroll]] for (uint q = 0u; q < MIX_GROUP; q++)
            s[q] = 0.0;
        uint i1 = min(pc.n, (ch + 1u) * MIX_CHUNK);
        for (uint i0 = ch * MIX_CHUNK; i0 < i1; i0 += MIX_SUB) {
            uvec4 e = uvec4(i0 + lid) + uvec4(0u, 128u, 256u, 384u);
            bvec4 ok = lessThan(e, uvec4(i1));
            uvec4 od = mix(uvec4(0u), e, ok), ox = od;
            if (!dense)
                [[unroll]] for (uint k = 0u; k < 4u; k++) {
                    uvec4 c = coords4(pc.ne, od[k]);
                    od[k] = dot4(c, pc.sd);
                    ox[k] = dot4(c, pc.sx);
                }
            vec4 g = mix(vec4(0.0), ldf4(pc.d, od), ok), xv[MIX_GROUP];
            [[unroll]] for (uint q = 0u; q < MIX_GROUP; q++)
                xv[q] = ((on >> q) & 1u) != 0u ? ldf4(cand(q), ox) : vec4(0.0);
            [[unroll]] for (uint q = 0u; q < MIX_GROUP; q++)
                s[q] += dot(g, mix(vec4(0.0), xv[q], ok));
        }
        barrier(); // the previous chunk's sums are read
        [[unroll]] for (uint q = 0u; q < MIX_GROUP; q++)
            fs[q * 128u + lid] = s[q];
        barrier();
        uint q = lid / 8u, l = lid % 8u;
        if (q < MIX_GROUP) {
            float v = 0.0;
            for (uint k = 0u; k < 16u; k++)
                v += fs[q * 128u + l * 16u + k];
            fs[MIX_GROUP * 128u + q * 8u + l] = v;
        }
        barrier();
        if (lid < pc.cnt && ((on >> lid) & 1u) != 0u) {
            float v = 0.0;
            for (uint k = 0u; k < 8u; k++)
                v += fs[MIX_GROUP * 128u + lid * 8u + k];
            stf(pc.part, lid * MIX_ROW(pc.nch) + ch, v);
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
