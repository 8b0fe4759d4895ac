// Dense and depthwise 2-D convolution, forward and both backward passes, as direct
// loops (dense convolution only appears in stems and factorized reductions, where the
// channel counts are small; direct loops also honour every stride of every operand).
// Forward and backward-data give each element they write to one invocation, which sums
// its taps in a fixed order; backward-data gathers from the outputs that read its input
// element, so nothing is scattered and no atomics are needed. The filter gradient splits
// the output rows (n, oh) into chunks, a choice made from the shape alone: one invocation
// per (chunk, tap) sums its rows in order, then one invocation per tap adds the chunks in
// order. No shared memory, no barriers (costly on CPU implementations such as lavapipe),
// no atomics, so results are repeatable. With the fused ReLU (CV_RELU) the forward and the
// filter gradient read max(x, 0); the data gradient's mask is a pass of its own
// (CV_RELU_MASK): the push constants have no room for a fourth operand.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "conv/variants.h"

layout(local_size_x = 128) in;
layout(push_constant) uniform PC
{
    uint gate, x, w, y; // the roles: x input (dx), w filter (dw), y output (dy)
    uvec4 g0;           // n, ci, co, chunks of output rows (filter gradient)
    uvec4 g1;           // h, w, ho, wo
    uvec4 g2;           // kh, kw, stride h, stride w
    uvec4 g3;           // pad h, pad w, dilation h, dilation w
    uvec4 sx, sw, sy;   // element strides of the three roles
} pc;

const bool RELU = (VARIANT & CV_RELU) != 0;

// Element i of the input x as the convolution reads it: max(x, 0) with the fused ReLU.
float xin(uint i)
{
    float v = ldf(pc.x, i);
    return RELU && v < 0.0 ? 0.0 : v;
}

// The output index that input i meets through filter tap k along one axis, or -1.
int conv_src(int i, int k, int s, int p, int d, int lim)
{
    int t = i + p - k * d;
    if (t < 0 || t % s != 0 || t / s >= lim)
        return -1;
    return t / s;
}

void fwd(bool dwise)
{
    uint n = pc.g0.x, ci = pc.g0.y, co = pc.g0.z, ho = pc.g1.z, wo = pc.g1.w;
    int h = int(pc.g1.x), wd = int(pc.g1.y), kh = int(pc.g2.x), kw = int(pc.g2.y);
    uint total = n * co * ho * wo;
    for (uint i = gl_GlobalInvocationID.x; i < total; i += gl_NumWorkGroups.x * 128u) {
        uint ow = i % wo, t = i / wo, oh = t % ho;
        t /= ho;
        uint oc = t % co, nb = t / co;
        uint c0 = dwise ? oc : 0u, c1 = dwise ? oc + 1u : ci;
        int ih0 = int(oh * pc.g2.z) - int(pc.g3.x), iw0 = int(ow * pc.g2.w) - int(pc.g3.y);
        float acc = 0.0;
        for (uint c = c0; c < c1; c++) {
            uint xo = nb * pc.sx.x + c * pc.sx.y;
            uint wf = oc * pc.sw.x + (dwise ? 0u : c) * pc.sw.y;
            for (int a = 0; a < kh; a++) {
                int ih = ih0 + a * int(pc.g3.z);
                if (ih < 0 || ih >= h)
                    continue;
                for (int b = 0; b < kw; b++) {
                    int iw = iw0 + b * int(pc.g3.w);
                    if (iw >= 0 && iw < wd)
                        acc += xin(xo + uint(ih) * pc.sx.z + uint(iw) * pc.sx.w) *
                               ldf(pc.w, wf + uint(a) * pc.sw.z + uint(b) * pc.sw.w);
                }
            }
        }
        stf(pc.y, nb * pc.sy.x + oc * pc.sy.y + oh * pc.sy.z + ow * pc.sy.w, acc);
    }
}

void bwd_data(bool dwise)
{
    uint n = pc.g0.x, ci = pc.g0.y, co = pc.g0.z, h = pc.g1.x, wd = pc.g1.y;
    int ho = int(pc.g1.z), wo = int(pc.g1.w), kh = int(pc.g2.x), kw = int(pc.g2.y);
    int sh = int(pc.g2.z), sw = int(pc.g2.w), ph = int(pc.g3.x), pw = int(pc.g3.y);
    int dh = int(pc.g3.z), dw = int(pc.g3.w);
    uint total = n * ci * h * wd;
    for (uint i = gl_GlobalInvocationID.x; i < total; i += gl_NumWorkGroups.x * 128u) {
        uint iw = i % wd, t = i / wd, ih = t % h;
        t /= h;
        uint ic = t % ci, nb = t / ci;
        uint c0 = dwise ? ic : 0u, c1 = dwise ? ic + 1u : co;
        float acc = 0.0;
        for (uint c = c0; c < c1; c++) {
            uint yo = nb * pc.sy.x + c * pc.sy.y;
            uint wf = c * pc.sw.x + (dwise ? 0u : ic) * pc.sw.y;
            for (int a = 0; a < kh; a++) {
                int oh = conv_src(int(ih), a, sh, ph, dh, ho);
                if (oh < 0)
                    continue;
                for (int b = 0; b < kw; b++) {
                    int ow = conv_src(int(iw), b, sw, pw, dw, wo);
                    if (ow >= 0)
                        acc += ldf(pc.y, yo + uint(oh) * pc.sy.z + uint(ow) * pc.sy.w) *
                               ldf(pc.w, wf + uint(a) * pc.sw.z + uint(b) * pc.sw.w);
                }
            }
        }
        stf(pc.x, nb * pc.sx.x + ic * pc.sx.y + ih * pc.sx.z + iw * pc.sx.w, acc);
    }
}

// Item i = (chunk, tap): the sum over the chunk's output rows (n, oh), in order, each
// row walked only where its input column is in bounds (no division, no bounds test in
// the inner loop). Stored at chunk * taps + the tap's place by the strides sw (dw's own
// strides when there is one chunk, a contiguous scratch layout otherwise).
void filter_part(bool dwise)
{
    uint ci = pc.g0.y, co = pc.g0.z, chunks = pc.g0.w, ho = pc.g1.z, rows = pc.g0.x * ho;
    int h = int(pc.g1.x), wd = int(pc.g1.y), wo = int(pc.g1.w), sw = int(pc.g2.w);
    uint kh = pc.g2.x, kw = pc.g2.y, cin = dwise ? 1u : ci, taps = co * cin * kh * kw;
    for (uint i = gl_GlobalInvocationID.x; i < taps * chunks; i += gl_NumWorkGroups.x * 128u) {
        uint tap = i % taps, c = i / taps;
        uint b = tap % kw, a = (tap / kw) % kh, wc = (tap / (kw * kh)) % cin;
        uint oc = tap / (kw * kh * cin), ic = dwise ? oc : wc;
        int offh = int(a * pc.g3.z) - int(pc.g3.x), offw = int(b * pc.g3.w) - int(pc.g3.y);
        // the outputs [lo, hi) of a row whose input column ow * sw + offw is in [0, wd)
        int lo = offw < 0 ? (sw - 1 - offw) / sw : 0;
        int hi = offw < wd ? min((wd - 1 - offw) / sw + 1, wo) : 0;
        uint r0 = c * (rows / chunks) + min(c, rows % chunks);
        uint r1 = r0 + rows / chunks + (c < rows % chunks ? 1u : 0u);
        float acc = 0.0;
        for (uint r = r0; r < r1; r++) {
            uint nb = r / ho, oh = r - nb * ho;
            int ih = int(oh * pc.g2.z) + offh;
            if (ih < 0 || ih >= h)
                continue;
            uint yo = nb * pc.sy.x + oc * pc.sy.y + oh * pc.sy.z;
            uint xo = nb * pc.sx.x + ic * pc.sx.y + uint(ih) * pc.sx.z;
            // a sum per row, then of rows: rounding grows with their sum, not their product
            float row = 0.0;
            for (int ow = lo; ow < hi; ow++)
                row += ldf(pc.y, yo + uint(ow) * pc.sy.w) * xin(xo + uint(ow * sw + offw) * pc.sx.w);
            acc += row;
        }
        stf(pc.w, c * taps + oc * pc.sw.x + wc * pc.sw.y + a * pc.sw.z + b * pc.sw.w, acc);
    }
}

// dw of tap i: the chunks' shares (at pc.x, chunk-major) added in chunk order.
void filter_sum(bool dwise)
{
    uint chunks = pc.g0.w, kh = pc.g2.x, kw = pc.g2.y, cin = dwise ? 1u : pc.g0.y;
    uint taps = pc.g0.z * cin * kh * kw;
    for (uint i = gl_GlobalInvocationID.x; i < taps; i += gl_NumWorkGroups.x * 128u) {
        uint b = i % kw, a = (i / kw) % kh, wc = (i / (kw * kh)) % cin, oc = i / (kw * kh * cin);
        float acc = 0.0;
        for (uint c = 0u; c < chunks; c++)
            acc += ldf(pc.x, c * taps + i);
        stf(pc.w, oc * pc.sw.x + wc * pc.sw.y + a * pc.sw.z + b * pc.sw.w, acc);
    }
}

// dx (at pc.y, strides sy) = 0 where x (at pc.x, strides sx) is not above 0, RELU_BWD's
// rule; g0.xy = n, c and g1.xy = h, w of both.
void relu_mask()
{
    uint c = pc.g0.y, h = pc.g1.x, wd = pc.g1.y, total = pc.g0.x * c * h * wd;
    for (uint i = gl_GlobalInvocationID.x; i < total; i += gl_NumWorkGroups.x * 128u) {
        uint iw = i % wd, t = i / wd, ih = t % h;
        t /= h;
        uint ch = t % c, nb = t / c;
        if (!(ldf(pc.x, nb * pc.sx.x + ch * pc.sx.y + ih * pc.sx.z + iw * pc.sx.w) > 0.0))
            stf(pc.y, nb * pc.sy.x + ch * pc.sy.y + ih * pc.sy.z + iw * pc.sy.w, 0.0);
    }
}

void main()
{
    GATE_RETURN();
    const bool dwise = (VARIANT & CV_DEPTHWISE) != 0;
    const int v = VARIANT & (CV_DEPTHWISE - 1);
    if (VARIANT == CV_RELU_MASK)
        relu_mask();
    else if (v == CV_FWD)
        fwd(dwise);
    else if (v == CV_BWD_DATA)
        bwd_data(dwise);
    else if (v == CV_FILTER_PART)
        filter_part(dwise);
    else
        filter_sum(dwise);
}
