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
// Stride 1 with "same" padding takes the column quads instead (DW_QUAD, below: a
// register ring of rows per 4-column quad, or per column, no staging).
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

// Column quads (DW_QUAD: stride 1, "same" padding P). An invocation owns QW = 4
// adjacent columns of a band of rows of one plane and walks the band top to bottom,
// keeping the QR input rows its outputs need in a register ring (QC columns: the quad
// and P halo columns each side, which come straight from memory and mostly hit the
// cache) while the next row's loads are in flight. No shared memory and no barriers
// except the filter gradient's ordered workgroup sum; no subgroup operations. A row's
// last quad may be partial (rows of 14: 4 quads): its missing columns are neither read
// nor written. Rows of 5 to 7 columns take DW_COL1, QW = 1 instead: neighbouring
// invocations then own neighbouring columns, so each load of the ring is one coalesced
// row segment, where partial quads that cannot be read as 16-byte words would take four
// loads, each touching four times the cache lines (measured on an H100: half the time at
// 7x7; at 14x14 the quads are faster).
const bool QUAD = (VARIANT & DW_QUAD) != 0;
const bool VEC = (VARIANT & DW_VEC4) != 0;
const int QW = (VARIANT & DW_COL1) != 0 ? 1 : 4;
const int P = (K - 1) * D / 2;
const int QR = (K - 1) * D + 1;
const int QC = QW + 2 * P;
const int QG = (QC + 3) / 4;

// DW_VEC4: the storage bindings again as 16-byte words, for operands whose every quad
// starts on one (the host checks the binding's start, the reference's offset and the
// strides: unit columns, rows and planes of 4m elements). Aliases of b0..b3.
layout(std430, set = 0, binding = 0) buffer V0 { vec4 v[]; } v0;
layout(std430, set = 0, binding = 1) EX_B1 buffer V1 { vec4 v[]; } v1;
layout(std430, set = 0, binding = 2) EX_B2 buffer V2 { vec4 v[]; } v2;
layout(std430, set = 0, binding = 3) EX_B3 buffer V3 { vec4 v[]; } v3;

// The quad at element i (a multiple of 4 from the operand's element 0) of ref.
vec4 ldv4(uint ref, uint i)
{
    uint a = ((ref & REF_ELEM) + i) >> 2;
    switch (ref >> 30) {
    case 0u: return v0.v[a];
    case 1u: return v1.v[a];
    case 2u: return v2.v[a];
    default: return v3.v[a];
    }
}

// The quad at element i of ref, into the writable bindings (as st()).
void stv4(uint ref, uint i, vec4 q)
{
    uint a = ((ref & REF_ELEM) + i) >> 2;
#if WRITES == 1
    v0.v[a] = q;
#else
    switch (ref >> 30) {
    case 0u: v0.v[a] = q; break;
#if WRITES == 2
    default: v1.v[a] = q; break;
#else
    case 1u: v1.v[a] = q; break;
#if WRITES == 3
    default: v2.v[a] = q; break;
#else
    case 2u: v2.v[a] = q; break;
    default: v3.v[a] = q; break;
#endif
#endif
    }
#endif
}

// The QW elements of ref at o, o + sw, ... (as a vec4), those of columns c0 + j past the
// row's ww (a row's last quad may be partial) and past QW as 0: one 16-byte load with
// DW_VEC4 (sw is then 1, and rows hold whole quads).
vec4 quad_ld(uint ref, uint o, uint sw, int c0, uint ww)
{
    if (VEC)
        return ldv4(ref, o);
    if (QW == 1)
        return vec4(ldf(ref, o), 0.0, 0.0, 0.0);
    bvec4 ok = lessThan(ivec4(c0) + ivec4(0, 1, 2, 3), ivec4(ww));
    uvec4 at = uvec4(o) + uvec4(0u, 1u, 2u, 3u) * sw;
    return mix(vec4(0.0), ldf4(ref, mix(uvec4(o), at, ok)), ok);
}

// Row iy, columns c0 - P .. c0 + QW - 1 + P, of the plane at `base` into v: zeros outside
// [0, hh) x [0, ww); relu: max(x, 0). Loads go four at a time under one switch; with
// DW_VEC4 the halo (P <= 4) comes from the neighbouring quads' 16-byte loads.
void quad_row(uint ref, uvec4 s, uint base, int iy, int c0, uint hh, uint ww, bool relu,
              out float v[QC])
{
    [[unroll]] for (int j = 0; j < QC; j++)
        v[j] = 0.0;
    if (iy < 0 || iy >= int(hh))
        return;
    uint rb = base + uint(iy) * s.z;
    if (VEC) {
        bool lok = c0 > 0, rok = c0 + 4 < int(ww);
        uint cc = rb + uint(c0);
        vec4 l = ldv4(ref, lok ? cc - 4u : cc), m = ldv4(ref, cc), r = ldv4(ref, rok ? cc + 4u : cc);
        [[unroll]] for (int j = 0; j < QC; j++) {
            int k = j - P; // column c0 + k
            float x = k < 0 ? (lok ? l[min(4 + k, 3)] : 0.0)
                            : k < 4 ? m[min(k, 3)] : (rok ? r[min(k - 4, 3)] : 0.0);
            v[j] = relu && x < 0.0 ? 0.0 : x;
        }
        return;
    }
    [[unroll]] for (int gq = 0; gq < QG; gq++) {
        uvec4 off;
        bvec4 ok;
        [[unroll]] for (int j = 0; j < 4; j++) {
            int cx = c0 - P + 4 * gq + j;
            ok[j] = 4 * gq + j < QC && cx >= 0 && cx < int(ww);
            off[j] = ok[j] ? rb + uint(cx) * s.w : 0u;
        }
        vec4 q = ldf4(ref, off);
        [[unroll]] for (int j = 0; j < 4; j++)
            if (4 * gq + j < QC && ok[j])
                v[4 * gq + j] = relu && q[j] < 0.0 ? 0.0 : q[j];
    }
}

// The ring moves down a row: row i takes row i + 1's values, the last row nx's.
void quad_shift(inout float ring[QR][QC], float nx[QC])
{
    [[unroll]] for (int i = 0; i < QR; i++)
        [[unroll]] for (int j = 0; j < QC; j++)
            ring[i][j] = i + 1 < QR ? ring[min(i + 1, QR - 1)][j] : nx[j];
}

// The forward (y from x) and data gradient (dx from dy: the flipped filter over dy,
// which has dx's size) over units (plane, band, quad), quads fastest so neighbours
// read neighbouring columns. pc.tile: rows per band; pc.tiles_w: quads per row;
// pc.tiles: bands per plane; pc.units: units.
void quad_fwd_data()
{
    bool fwd = PASS == DW_FWD;
    uint src = fwd ? pc.x : pc.y, dst = fwd ? pc.y : pc.x;
    uvec4 ss = fwd ? pc.sx : pc.sy, sd = fwd ? pc.sy : pc.sx;
    for (uint u = gl_GlobalInvocationID.x; u < pc.units; u += gl_NumWorkGroups.x * 128u) {
        uint q = u % pc.tiles_w, rest = u / pc.tiles_w, bd = rest % pc.tiles;
        uint plane = rest / pc.tiles, n = plane / pc.c, ch = plane % pc.c;
        float wr[T];
        [[unroll]] for (int k = 0; k < T; k++) {
            int tap = fwd ? k : T - 1 - k;
            wr[k] = ldf(pc.w, ch * pc.swc + uint(tap / K) * pc.swh + uint(tap % K) * pc.sww);
        }
        int c0 = QW * int(q);
        uint r0 = bd * pc.tile, r1 = min(pc.h, r0 + pc.tile);
        uint bs = n * ss.x + ch * ss.y, bo = n * sd.x + ch * sd.y;
        float ring[QR][QC], nx[QC]; // ring[i]: row r - P + i while output row r is computed
        [[unroll]] for (int i = 1; i < QR; i++)
            quad_row(src, ss, bs, int(r0) - P + i - 1, c0, pc.h, pc.wd, fwd && RELU, ring[i]);
        quad_row(src, ss, bs, int(r0) + P, c0, pc.h, pc.wd, fwd && RELU, nx);
        for (uint r = r0; r < r1; r++) {
            quad_shift(ring, nx);
            if (r + 1u < r1)
                quad_row(src, ss, bs, int(r) + 1 + P, c0, pc.h, pc.wd, fwd && RELU, nx);
            vec4 acc = vec4(0.0);
            [[unroll]] for (int b = 0; b < K; b++)
                [[unroll]] for (int a = 0; a < K; a++)
                    [[unroll]] for (int j = 0; j < QW; j++)
                        acc[j] += wr[a * K + b] * ring[a * D][j + b * D];
            uint at = bo + r * sd.z + uint(c0) * sd.w;
            if (!fwd && pc.ns != NOREF) {
                vec4 m = quad_ld(pc.ns, at, sd.w, c0, pc.wd);
                [[unroll]] for (int j = 0; j < QW; j++)
                    if (!(m[j] > 0.0))
                        acc[j] = 0.0;
            }
            if (VEC)
                stv4(dst, at, acc);
            else
                [[unroll]] for (int j = 0; j < QW; j++)
                    if (c0 + j < int(pc.wd))
                        stf(dst, at + uint(j) * sd.w, acc[j]);
        }
    }
}

// The filter gradient: a workgroup per (channel, range of pc.ns samples); invocation t
// takes quad t % quads of every (sample, band) unit t / quads + k (128 / quads) of its
// range, summing all taps in registers; then filter_sum_wg's fixed order, and the ranges
// (pc.parts per channel) in order by DW_FSUM.
void quad_filter()
{
    uint t = gl_LocalInvocationID.x, slots = 128u / pc.tiles_w;
    uint q = t % pc.tiles_w, slot = t / pc.tiles_w;
    int c0 = QW * int(q);
    for (uint item = gl_WorkGroupID.x; item < pc.items; item += gl_NumWorkGroups.x) {
        uint rg = item % pc.parts, ch = item / pc.parts;
        uint n0 = rg * pc.ns, n1 = min(pc.n, n0 + pc.ns), units = (n1 - n0) * pc.tiles;
        float acc[49];
        [[unroll]] for (int k = 0; k < T; k++)
            acc[k] = 0.0;
        // 128 % quads invocations hold no whole row: their sums stay 0
        for (uint u = slot; slot < slots && u < units; u += slots) {
            uint n = n0 + u / pc.tiles, bd = u % pc.tiles;
            uint r0 = bd * pc.tile, r1 = min(pc.h, r0 + pc.tile);
            uint bs = n * pc.sx.x + ch * pc.sx.y, by = n * pc.sy.x + ch * pc.sy.y;
            float ring[QR][QC], nx[QC];
            [[unroll]] for (int i = 1; i < QR; i++)
                quad_row(pc.x, pc.sx, bs, int(r0) - P + i - 1, c0, pc.h, pc.wd, RELU, ring[i]);
            quad_row(pc.x, pc.sx, bs, int(r0) + P, c0, pc.h, pc.wd, RELU, nx);
            uint ya = by + r0 * pc.sy.z + uint(c0) * pc.sy.w;
            vec4 dy = quad_ld(pc.y, ya, pc.sy.w, c0, pc.wd);
            for (uint r = r0; r < r1; r++) {
                quad_shift(ring, nx);
                vec4 g = dy;
                if (r + 1u < r1) {
                    quad_row(pc.x, pc.sx, bs, int(r) + 1 + P, c0, pc.h, pc.wd, RELU, nx);
                    ya += pc.sy.z;
                    dy = quad_ld(pc.y, ya, pc.sy.w, c0, pc.wd);
                }
                [[unroll]] for (int a = 0; a < K; a++)
                    [[unroll]] for (int b = 0; b < K; b++) {
                        float s = 0.0;
                        [[unroll]] for (int j = 0; j < QW; j++)
                            s += g[j] * ring[a * D][j + b * D];
                        acc[a * K + b] += s;
                    }
            }
        }
        filter_sum_wg(acc, ch, (rg * pc.c + ch) * uint(T), pc.parts == 1u);
    }
}

void main()
{
    GATE_RETURN();
    if (PASS == DW_FSUM)
        filter_parts();
    else if (QUAD && PASS == DW_FILTER)
        quad_filter();
    else if (QUAD)
        quad_fwd_data();
    else if (PASS == DW_FILTER)
        filter_grad();
    else
        fwd_data();
}
