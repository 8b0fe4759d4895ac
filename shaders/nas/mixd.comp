// The mixed sum's forward without a candidate table (vulkan/nas.c takes it when every
// candidate fits and dst and the candidates are dense, of a multiple of 4 elements, or
// candidates are slices of whole samples, as a cell's concatenated output holds its
// nodes: sample stride `outer`, `inner` elements a sample, a multiple of 4): each
// invocation reads the group's coefficients and mask entries itself (uniform loads), so
// the mixed sum needs no table pass and no barrier before its first group. MIX_FWD writes
// dst, MIX_FWD_ACC adds to it; 4 neighbours an invocation, candidates in index order, the
// same sums as mix.comp's.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "nas/variants.h"

layout(local_size_x = 128) in;
layout(push_constant) uniform PC
{
    uint gate, d, w, mask; // dst; the weights and the mask (uniform buffers)
    uint n, cnt, inner, outer; // elements (a multiple of 4); the group's candidates (bits
                               // 0-15: their count, 16 on: which are sliced); the slices
    uvec4 at[3];           // candidate q: w's element at[q] & 0xFFFF, the mask's at[q] >> 16
    uvec4 x[3];            // the group's candidates
} pc;

uint cand(uint q) { return pc.x[q / 4u][q % 4u]; }
uint at(uint q) { return pc.at[q / 4u][q % 4u]; }

void main()
{
    GATE_RETURN();
    uint on = 0u;
    float c[MIX_GROUP];
    [[unroll]] for (uint q = 0u; q < MIX_GROUP; q++) {
        bool live = q < (pc.cnt & 0xFFFFu) && ldfu(pc.mask, at(q) >> 16) != 0.0;
        on |= live ? 1u << q : 0u;
        c[q] = live ? ldfu(pc.w, at(q) & 0xFFFFu) : 0.0;
    }
    const uvec4 j = uvec4(0u, 1u, 2u, 3u);
    uint sliced = pc.cnt >> 16;
    for (uint i = gl_GlobalInvocationID.x * 4u; i < pc.n; i += gl_NumWorkGroups.x * 512u) {
        uint is = sliced != 0u ? (i / pc.inner) * pc.outer + i % pc.inner : i;
        vec4 xv[MIX_GROUP];
        [[unroll]] for (uint q = 0u; q < MIX_GROUP; q++) {
            uint o = ((sliced >> q) & 1u) != 0u ? is : i;
            xv[q] = ((on >> q) & 1u) != 0u ? ldf4(cand(q), o + j) : vec4(0.0);
        }
        vec4 acc = VARIANT == MIX_FWD_ACC ? ldf4(pc.d, i + j) : vec4(0.0);
        [[unroll]] for (uint q = 0u; q < MIX_GROUP; q++)
            if (((on >> q) & 1u) != 0u)
                acc += c[q] * xv[q];
        [[unroll]] for (uint t = 0u; t < 4u; t++)
            stf(pc.d, i + t, acc[t]);
    }
}
