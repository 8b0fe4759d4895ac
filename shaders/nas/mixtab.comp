// The mixed sum's candidate table, read on the device so that a search whose active set
// changes every step replays one recorded step: for candidate j, its coefficient
// w[ip j] (1 without weights), whether mask[ip j] is non-zero, and ip j. A candidate
// whose shape the host could not align is reported (the CPU backend's error) when it
// turns out active, and is left out. One invocation, candidates in order, so the first
// bad one is the one reported.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "nas/variants.h"

layout(local_size_x = 1) in;
layout(push_constant) uniform PC
{
    uint gate, tab, w, mask; // w: NOREF for the weight gradient
    uint n, bad, node, sref; // candidates, bit j: candidate j does not fit
    uvec4 wne, wst, mne, mst;
    uvec4 idx[2]; // weight indices, two 16-bit halves per word
} pc;

void main()
{
    GATE_RETURN();
    for (uint j = 0u; j < pc.n; j++) {
        uint i = (pc.idx[j / 8u][(j / 2u) % 4u] >> (16u * (j % 2u))) & 0xFFFFu;
        bool on = ldfu(pc.mask, off4(pc.mne, pc.mst, i)) != 0.0;
        if (on && ((pc.bad >> j) & 1u) != 0u) {
            report(pc.sref, 2u, pc.node, j, 0u);
            on = false;
        }
        float c = pc.w == NOREF ? 1.0 : ldfu(pc.w, off4(pc.wne, pc.wst, i));
        stf(pc.tab, MIX_TAB * j, on ? c : 0.0);
        st(pc.tab, MIX_TAB * j + 1u, on ? 1u : 0u);
        st(pc.tab, MIX_TAB * j + 2u, i);
    }
}
