// PWCONV_BWD_FILTER, dw[o][c] = sum over the positions p = (n, h, w) of dy[n][o][p] x[n][c][p]:
// Co x Ci outer products summed over N*H*W positions (65536 in DARTS' first cells). The
// host splits the positions into `parts` ranges of `len` (from the shape alone). One
// workgroup per (range, tile of TI x TJ outputs) stages KC positions of the tile's dy and x
// channels at a time in shared memory (loads coalesced along the positions, 16 in flight
// per invocation, the next stage's issued before this one is summed); each invocation sums a 4x4 block of outputs over every G-th staged
// position, the G blocks are added in order and the range's partial goes to scratch (to
// dw when there is one range). WG_SUM then adds the ranges' partials in order: 8 outputs x
// 16 lanes per workgroup, each lane every 16th range, the lanes in order. No atomics, so
// the result is bitwise repeatable.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "gemm/variants.h"

layout(local_size_x = 128) in;
layout(push_constant) uniform PC
{
    uint gate, a, b, d;         // dy (WG_SUM: the partials), x, dst
    uint m, n, k, hw;           // Co, Ci, positions N*H*W, H*W
    uint wd, len, parts, dpart; // W; positions per range; ranges; dst's stride per range
    uint drow, dcol, r0, r1;    // dst's strides
    uvec4 sa, sb;               // dy's and x's strides (n, c, h, w)
} pc;

const uint TI = (VARIANT & WG_TI32) != 0 ? 32u : 16u;
const uint TJ = (VARIANT & WG_TJ32) != 0 ? 32u : 16u;
const uint KC = TI + TJ > 32u ? 32u : 64u; // positions staged at a time
const uint KP = KC + 1u;                   // padded row: conflict-free column reads
const uint RS = 128u / KC;                 // rows one pass of the workgroup loads
const uint TPG = (TI / 4u) * (TJ / 4u);    // invocations per group of positions
const uint G = 128u / TPG;                 // groups, each every G-th staged position

// Staging: TI + TJ rows of KP (at most 64 x 33); then the G partial tiles (G*TI*TJ = 2048).
shared float sm[2112];

// Channels c0, c0 + RS, ... (8 of them) at position offset po, channel stride cs; 0 from
// lim on and where !live (such a lane loads element 0 and discards it).
void load_rows(uint ref, uint po, uint cs, uint c0, uint lim, bool live, out vec4 v[2])
{
    [[unroll]] for (uint j = 0u; j < 2u; j++) {
        uvec4 c = uvec4(c0 + RS * 4u * j) + uvec4(0u, RS, 2u * RS, 3u * RS);
        bvec4 ok = live ? lessThan(c, uvec4(lim)) : bvec4(false);
        v[j] = mix(vec4(0.0), ldf4(ref, mix(uvec4(0u), uvec4(po) + c * cs, ok)), ok);
    }
}

// This invocation's loads of the KC positions from k0 (of the range ending at ke): one
// position, the tile's rows of dy and x at it.
void fetch(uint k0, uint ke, uint i0, uint j0, out vec4 va[2], out vec4 vb[2])
{
    uint t = gl_LocalInvocationID.x, kq = k0 + t % KC, rb = t / KC, oa = 0u, ob = 0u;
    bool live = kq < ke;
    if (live) {
        uint nb = kq / pc.hw, r = kq - nb * pc.hw, h = r / pc.wd, w = r - h * pc.wd;
        oa = nb * pc.sa.x + h * pc.sa.z + w * pc.sa.w;
        ob = nb * pc.sb.x + h * pc.sb.z + w * pc.sb.w;
    }
    load_rows(pc.a, oa, pc.sa.y, i0 + rb, min(pc.m, i0 + TI), live, va);
    load_rows(pc.b, ob, pc.sb.y, j0 + rb, min(pc.n, j0 + TJ), live, vb);
}

void partial()
{
    uint t = gl_LocalInvocationID.x, p = gl_WorkGroupID.x;
    uint i0 = gl_WorkGroupID.y * TI, j0 = gl_WorkGroupID.z * TJ;
    uint kb = p * pc.len, ke = min(kb + pc.len, pc.k);
    uint g = t / TPG, l = t % TPG, ty = l / (TJ / 4u), tx = l % (TJ / 4u);
    uint kk = t % KC, rb = t / KC;
    vec4 acc[4] = vec4[4](vec4(0.0), vec4(0.0), vec4(0.0), vec4(0.0));
    vec4 va[2], vb[2];
    fetch(kb, ke, i0, j0, va, vb);
    for (uint k0 = kb; k0 < ke; k0 += KC) {
        [[unroll]] for (uint q = 0u; q < 8u; q++) {
            uint r = rb + RS * q;
            if (r < TI)
                sm[r * KP + kk] = va[q / 4u][q % 4u];
            if (r < TJ)
                sm[(TI + r) * KP + kk] = vb[q / 4u][q % 4u];
        }
        barrier();
        if (k0 + KC < ke) // the next stage's loads are in flight while this one is summed
            fetch(k0 + KC, ke, i0, j0, va, vb);
        [[unroll]] for (uint qi = 0u; qi < KC / G; qi++) {
            uint q = g + qi * G;
            vec4 bv = vec4(sm[(TI + tx * 4u) * KP + q], sm[(TI + tx * 4u + 1u) * KP + q],
                           sm[(TI + tx * 4u + 2u) * KP + q], sm[(TI + tx * 4u + 3u) * KP + q]);
            [[unroll]] for (uint r = 0u; r < 4u; r++)
                acc[r] += sm[(ty * 4u + r) * KP + q] * bv;
        }
        barrier();
    }
    [[unroll]] for (uint r = 0u; r < 4u; r++)
        [[unroll]] for (uint c = 0u; c < 4u; c++)
            sm[g * TI * TJ + (ty * 4u + r) * TJ + tx * 4u + c] = acc[r][c];
    barrier();
    for (uint o = t; o < TI * TJ; o += 128u) {
        float s = 0.0;
        for (uint gg = 0u; gg < G; gg++)
            s += sm[gg * TI * TJ + o];
        uint gi = i0 + o / TJ, gj = j0 + o % TJ;
        if (gi < pc.m && gj < pc.n)
            stf(pc.d, p * pc.dpart + gi * pc.drow + gj * pc.dcol, s);
    }
}

// dw[o] = the sum over the ranges of part[range][o] (o = row * Ci + column), in order.
void sum_parts()
{
    uint t = gl_LocalInvocationID.x, lane = t / 8u, mn = pc.m * pc.n;
    for (uint o0 = gl_WorkGroupID.x * 8u; o0 < mn; o0 += gl_NumWorkGroups.x * 8u) {
        uint o = o0 + t % 8u;
        float s = 0.0;
        if (o < mn)
            for (uint p = lane; p < pc.parts; p += 16u)
                s += ldf(pc.a, p * mn + o);
        barrier(); // the previous block's reads of sm are done
        sm[t] = s;
        barrier();
        if (t < 8u && o < mn) {
            float v = 0.0;
            for (uint j = 0u; j < 16u; j++)
                v += sm[j * 8u + t];
            stf(pc.d, (o / pc.n) * pc.drow + (o % pc.n) * pc.dcol, v);
        }
    }
}

void main()
{
    GATE_RETURN();
    if ((VARIANT & WG_SUM) != 0)
        sum_parts();
    else
        partial();
}
