// Depthwise convolution, forward and both backward passes, for the kernels of a search
// (square k = 3, 5, 7, stride and dilation 1 or 2, any padding; the geometry is a
// specialization constant, so loops over taps unroll and taps live in registers); other
// geometries take conv.comp. A workgroup stages G planes' windows (a tile plus its halo,
// zeros outside the plane) in shared memory with coalesced loads, sixteen in flight per
// invocation, and each invocation computes DW_RH vertically adjacent outputs of one
// column, whose inputs overlap: one shared load feeds up to k multiply-adds.
//   DW_FWD    y tile from the x window.
//   DW_DATA   dx tile from the dy window (a gather: at stride 1 the flipped filter over
//             the window, at stride 2 only the taps whose output exists).
//   DW_FILTER one channel over a range of samples and one tile: each invocation sums all
//             taps over its outputs, then a fixed two-level sum over the workgroup; the
//             partial goes to scratch [part][channel][tap] (or to dw when one suffices).
//   DW_FSUM   dw = the partials added in order (8 outputs x 16 lanes per workgroup).
// With DW_RELU (the fused ReLU) DW_FWD and DW_FILTER stage max(x, 0); DW_DATA stores 0
// where the mask (the forward's input, at dx's strides; reference `ns`) is not above 0,
// or, where the host cannot bind the mask so, conv.comp's CV_RELU_MASK pass follows.
// No atomics: every sum has an order fixed by the shape, so results are repeatable.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "conv/variants.h"

layout(local_size_x = 128) in;
layout(push_constant) uniform PC
{
    uint gate, x, w, y;      // roles: x input (dx), w filter (dw, DW_FSUM: dw), y output (dy)
    uint n, c, h, wd;        // x's sizes (DW_FSUM: c channels)
    uint ho, wo, pad, tile;  // y's spatial sizes; ph | pw << 16; tile rows | columns << 16
    uint tiles_w, tiles, g, units; // tiles per tile row, per plane; planes per stage; units per plane
    uint prow, pcol, items, ns;    // window rows and columns; work items; samples per item
                                   // (filter) or the ReLU mask (data: NOREF without)
    uvec4 sx, sy;                  // strides of x and y
    uint swc, swh, sww, parts;     // dw's strides (channel, row, column); partials per channel
} pc;

const int PASS = VARIANT & 3;
const int GEO = (VARIANT & (DW_RELU - 1)) >> 2;
const bool RELU = (VARIANT & DW_RELU) != 0;
const int K = 3 + 2 * (GEO / 4);
const int S = 1 + (GEO / 2) % 2;
const int D = 1 + GEO % 2;
const int T = K * K;
const int RH = DW_RH;
const int SPAN = (RH - 1) * S + (K - 1) * D + 1; // window rows one unit reads per column (fwd)

shared float sm[DW_SMEM];
shared float wsm[DW_MAXG * 49];
shared uint pln[DW_MAXG], plc[DW_MAXG]; // the stage's planes: sample, channel

// Stages np windows of nr x ncl elements at sm[at]: element (pi, r, cl) is the tensor's
// (pln[pi], plc[pi], r0 + r, c0 + cl) inside [0, hh) x [0, ww), else 0; relu: max(v, 0) of
// it. The invocation's position is decoded once and stepped by 128 with carries (no
// division per element).
void stage(uint ref, uvec4 s, uint at, uint np, uint nr, uint ncl, int r0, int c0, uint hh, uint ww,
           bool relu)
{
    uint t = gl_LocalInvocationID.x, total = np * nr * ncl;
    uint dq = 128u / ncl, dr = 128u % ncl;
    uint cl = t % ncl, r = t / ncl, pi = r / nr;
    r -= pi * nr;
    for (uint base = 0u; base < total; base += 2048u) {
        uint off[16];
        bool ok[16];
        [[unroll]] for (uint j = 0u; j < 16u; j++) {
            int ih = r0 + int(r), iw = c0 + int(cl);
            uint q = min(pi, np - 1u);
            ok[j] = base + t + 128u * j < total && ih >= 0 && ih < int(hh) && iw >= 0 &&
                    iw < int(ww);
            off[j] = ok[j] ? pln[q] * s.x + plc[q] * s.y + uint(ih) * s.z + uint(iw) * s.w : 0u;
            cl += dr;
            r += dq;
            if (cl >= ncl) {
                cl -= ncl;
                r++;
            }
            while (r >= nr) {
                r -= nr;
                pi++;
            }
        }
        vec4 v[4];
        [[unroll]] for (uint j = 0u; j < 4u; j++)
            v[j] = ldf4(ref, uvec4(off[4u * j], off[4u * j + 1u], off[4u * j + 2u], off[4u * j + 3u]));
        [[unroll]] for (uint j = 0u; j < 16u; j++) {
            uint e = base + t + 128u * j;
            float x = ok[j] ? v[j / 4u][j % 4u] : 0.0;
            if (e < total)
                sm[at + e] = relu && x < 0.0 ? 0.0 : x;
        }
    }
}

// The taps of the stage's planes' channels into wsm[pi * T + tap].
void stage_taps(uint np)
{
    for (uint e = gl_LocalInvocationID.x; e < np * uint(T); e += 128u) {
        uint pi = e / uint(T), tap = e % uint(T);
        wsm[e] = ldf(pc.w, plc[pi] * pc.swc + (tap / uint(K)) * pc.swh + (tap % uint(K)) * pc.sww);
    }
}

int floor_div(int a, int b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// Invocations per plane of a stage (the host packs small planes, units < 128).
uint tpp() { return min(128u, pc.units); }

// The units (DW_RH rows of one column) of plane pi this invocation computes, and their stores.
void fwd_data_units(uint pi, uint lane, uint r0, uint c0, int offh, int offw)
{
    uint th = pc.tile & 0xFFFFu, tw = pc.tile >> 16;
    uint oh = PASS == DW_FWD ? pc.ho : pc.h, ow = PASS == DW_FWD ? pc.wo : pc.wd;
    float wr[49];
    [[unroll]] for (int k = 0; k < T; k++)
        wr[k] = wsm[pi * uint(T) + uint(k)];
    uint pb = pi * pc.prow * pc.pcol;
    for (uint u = lane; u < pc.units; u += tpp()) {
        uint j = u % tw, rg = (u / tw) * uint(RH);
        float acc[RH];
        [[unroll]] for (int i = 0; i < RH; i++)
            acc[i] = 0.0;
        if (PASS == DW_FWD) {
            [[unroll]] for (int b = 0; b < K; b++) {
                float xr[SPAN];
                [[unroll]] for (int r = 0; r < SPAN; r++)
                    xr[r] = sm[pb + (rg * uint(S) + uint(r)) * pc.pcol + j * uint(S) + uint(b * D)];
                [[unroll]] for (int a = 0; a < K; a++)
                    [[unroll]] for (int i = 0; i < RH; i++)
                        acc[i] += wr[a * K + b] * xr[i * S + a * D];
            }
        } else if (S == 1) {
            // dx[i][j] = sum over taps of w[a][b] dy-window[i + (K-1-a) D][j + (K-1-b) D]
            [[unroll]] for (int b = 0; b < K; b++) {
                float xr[RH + (K - 1) * D];
                [[unroll]] for (int r = 0; r < RH + (K - 1) * D; r++)
                    xr[r] = sm[pb + (rg + uint(r)) * pc.pcol + j + uint((K - 1 - b) * D)];
                [[unroll]] for (int a = 0; a < K; a++)
                    [[unroll]] for (int i = 0; i < RH; i++)
                        acc[i] += wr[a * K + b] * xr[i + (K - 1 - a) * D];
            }
        } else {
            // only the taps whose output index (ih + ph - a D) / S is whole
            [[unroll]] for (int i = 0; i < RH; i++)
                [[unroll]] for (int a = 0; a < K; a++) {
                    int uh = int(rg) + i + offh - a * D;
                    if (uh % S != 0)
                        continue;
                    [[unroll]] for (int b = 0; b < K; b++) {
                        int uw = int(j) + offw - b * D;
                        if (uw % S == 0)
                            acc[i] += wr[a * K + b] * sm[pb + uint(uh / S) * pc.pcol + uint(uw / S)];
                    }
                }
        }
        uint col = c0 + j, base = PASS == DW_FWD ? pln[pi] * pc.sy.x + plc[pi] * pc.sy.y
                                                 : pln[pi] * pc.sx.x + plc[pi] * pc.sx.y;
        uvec4 s = PASS == DW_FWD ? pc.sy : pc.sx;
        if (col >= ow)
            continue;
        [[unroll]] for (int i = 0; i < RH; i++) {
            uint row = r0 + rg + uint(i), at = base + row * s.z + col * s.w;
            if (rg + uint(i) >= th || row >= oh)
                continue;
            if (PASS == DW_DATA && pc.ns != NOREF && !(ldf(pc.ns, at) > 0.0))
                acc[i] = 0.0;
            stf(PASS == DW_FWD ? pc.y : pc.x, at, acc[i]);
        }
    }
}

void fwd_data()
{
    uint t = gl_LocalInvocationID.x, th = pc.tile & 0xFFFFu, tw = pc.tile >> 16;
    uint planes = pc.n * pc.c, pi = t / tpp(), lane = t % tpp();
    int ph = int(pc.pad & 0xFFFFu), pw = int(pc.pad >> 16);
    // the tile is in y's space (DW_FWD) or x's (DW_DATA), the window in the other's
    for (uint item = gl_WorkGroupID.x; item < pc.items; item += gl_NumWorkGroups.x) {
        uint tl = item % pc.tiles, p0 = (item / pc.tiles) * pc.g;
        uint np = min(pc.g, planes - p0);
        uint r0 = (tl / pc.tiles_w) * th, c0 = (tl % pc.tiles_w) * tw;
        int wr0, wc0, offh = 0, offw = 0;
        if (PASS == DW_FWD) {
            wr0 = int(r0) * S - ph;
            wc0 = int(c0) * S - pw;
        } else {
            wr0 = floor_div(int(r0) + ph - (K - 1) * D, S);
            wc0 = floor_div(int(c0) + pw - (K - 1) * D, S);
            offh = int(r0) + ph - wr0 * S; // >= (K - 1) * D
            offw = int(c0) + pw - wc0 * S;
        }
        barrier(); // the previous item's reads are done
        if (t < np) {
            pln[t] = (p0 + t) / pc.c;
            plc[t] = (p0 + t) % pc.c;
        }
        barrier();
        if (PASS == DW_FWD)
            stage(pc.x, pc.sx, 0u, np, pc.prow, pc.pcol, wr0, wc0, pc.h, pc.wd, RELU);
        else
            stage(pc.y, pc.sy, 0u, np, pc.prow, pc.pcol, wr0, wc0, pc.ho, pc.wo, false);
        stage_taps(np);
        barrier();
        if (pi < np)
            fwd_data_units(pi, lane, r0, c0, offh, offw);
    }
}

// Adds acc[tap] over the workgroup in a fixed order (in batches of 16 taps: invocation
// (tap, lane) adds 16 consecutive invocations' values, then 8 lanes in order) and writes
// tap sums to dst at index `at + tap` (scratch) or at dw's strides.
void filter_sum_wg(float acc[49], uint ch, uint at, bool direct)
{
    uint t = gl_LocalInvocationID.x;
    [[unroll]] for (int tb = 0; tb < T; tb += 16) {
        barrier();
        [[unroll]] for (int j = 0; j < 16; j++)
            if (tb + j < T)
                sm[uint(j) * 128u + t] = acc[tb + j];
        barrier();
        uint jt = t / 8u, l = t % 8u;
        float v = 0.0;
        if (tb + int(jt) < T)
            for (uint k = 0u; k < 16u; k++)
                v += sm[jt * 128u + l * 16u + k];
        sm[2048u + t] = v;
        barrier();
        if (t < 16u && tb + int(t) < T) {
            float s = 0.0;
            for (uint k = 0u; k < 8u; k++)
                s += sm[2048u + t * 8u + k];
            uint tap = uint(tb) + t;
            if (direct)
                stf(pc.w, ch * pc.swc + (tap / uint(K)) * pc.swh + (tap % uint(K)) * pc.sww, s);
            else
                stf(pc.w, at + tap, s);
        }
    }
}

// Adds this invocation's units of plane pi (x window at sm[pb], dy tile at sm[db]) to acc.
void filter_units(inout float acc[49], uint pi, uint lane, uint pb, uint db)
{
    uint tw = pc.tile >> 16;
    for (uint u = lane; u < pc.units; u += tpp()) {
        uint j = u % tw, rg = (u / tw) * uint(RH);
        float dyr[RH];
        [[unroll]] for (int i = 0; i < RH; i++)
            dyr[i] = sm[db + (rg + uint(i)) * tw + j];
        [[unroll]] for (int b = 0; b < K; b++) {
            float xr[SPAN];
            [[unroll]] for (int r = 0; r < SPAN; r++)
                xr[r] = sm[pb + (rg * uint(S) + uint(r)) * pc.pcol + j * uint(S) + uint(b * D)];
            [[unroll]] for (int a = 0; a < K; a++) {
                float s = 0.0;
                [[unroll]] for (int i = 0; i < RH; i++)
                    s += dyr[i] * xr[i * S + a * D];
                acc[a * K + b] += s;
            }
        }
    }
}

void filter_grad()
{
    uint t = gl_LocalInvocationID.x, th = pc.tile & 0xFFFFu, tw = pc.tile >> 16;
    uint pi = t / tpp(), lane = t % tpp(), thr = (th + uint(RH) - 1u) / uint(RH) * uint(RH);
    int ph = int(pc.pad & 0xFFFFu), pw = int(pc.pad >> 16);
    uint nsg = (pc.n + pc.ns - 1u) / pc.ns;
    for (uint item = gl_WorkGroupID.x; item < pc.items; item += gl_NumWorkGroups.x) {
        uint tl = item % pc.tiles, sg = (item / pc.tiles) % nsg, ch = item / (pc.tiles * nsg);
        uint r0 = (tl / pc.tiles_w) * th, c0 = (tl % pc.tiles_w) * tw;
        uint n1 = min(pc.n, (sg + 1u) * pc.ns);
        float acc[49];
        [[unroll]] for (int k = 0; k < T; k++)
            acc[k] = 0.0;
        for (uint n0 = sg * pc.ns; n0 < n1; n0 += pc.g) {
            uint np = min(pc.g, n1 - n0), dyat = np * pc.prow * pc.pcol;
            barrier();
            if (t < np) {
                pln[t] = n0 + t;
                plc[t] = ch;
            }
            barrier();
            stage(pc.x, pc.sx, 0u, np, pc.prow, pc.pcol, int(r0) * S - ph, int(c0) * S - pw,
                  pc.h, pc.wd, RELU);
            // dy's tile, zeros past its edge (the next tile's rows are not this one's)
            stage(pc.y, pc.sy, dyat, np, thr, tw, int(r0), int(c0), min(pc.ho, r0 + th),
                  min(pc.wo, c0 + tw), false);
            barrier();
            if (pi < np)
                filter_units(acc, pi, lane, pi * pc.prow * pc.pcol, dyat + pi * thr * tw);
        }
        uint q = (item / pc.tiles) % nsg * pc.tiles + tl; // this partial's index in its channel
        filter_sum_wg(acc, ch, (q * pc.c + ch) * uint(T), pc.parts == 1u);
    }
}

// dw[ch][tap] = the sum over the partials of part[(q * C + ch) * T + tap], q in order.
void filter_parts()
{
    uint t = gl_LocalInvocationID.x, lane = t / 8u, m = pc.c * uint(T);
    for (uint o0 = gl_WorkGroupID.x * 8u; o0 < m; o0 += gl_NumWorkGroups.x * 8u) {
        uint o = o0 + t % 8u;
        float s = 0.0;
        if (o < m)
            for (uint q = lane; q < pc.parts; q += 16u)
                s += ldf(pc.x, q * m + o);
        barrier();
        sm[t] = s;
        barrier();
        if (t < 8u && o < m) {
            float v = 0.0;
            for (uint k = 0u; k < 16u; k++)
                v += sm[k * 8u + t];
            uint ch = o / uint(T), tap = o % uint(T);
            stf(pc.w, ch * pc.swc + (tap / uint(K)) * pc.swh + (tap % uint(K)) * pc.sww, v);
        }
    }
}

void main()
{
    GATE_RETURN();
    if (PASS == DW_FILTER)
        filter_grad();
    else if (PASS == DW_FSUM)
        filter_parts();
    else
        fwd_data();
}
