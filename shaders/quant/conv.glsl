// Every int8 sum of products, included by quant/conv.comp and quant/convdot.comp after
//   #version 450
//   #extension GL_GOOGLE_include_directive : require
// QCONV2D and QDWCONV2D, and QPWCONV and QLINEAR as 1x1 convolutions (vulkan/quant.c maps
// their operands; QLINEAR's batch rows are the output columns). bias + sum x * w, taps
// outside the input add 0. Integer sums are exact in any order, so the result is the CPU
// backend's bit for bit; builders keep them within int32 (docs/ops.md).
//
// An invocation makes a block of 4 output channels (1 for depthwise, whose channels read
// different inputs) by 4 output columns (neighbours along a row; in the requantized form
// 4 neighbouring pixels of a plane, which may run on into the next row): each tap then
// loads 4 inputs and 4 weights for 16 products, where one output an invocation loaded 2
// values a product, and loads are what costs (every ld() switches over the bindings;
// lavapipe runs each case). Where the 4 inputs are adjacent bytes inside the row (stride
// 1, dense columns) they come from at most 2 words.
//
// QC_RQ (added to a variant): the requantize fused in (QCONV2D, QDWCONV2D and QPWCONV with
// a 4th source): each sum becomes the i8 clamp(rne(f32(f32(sum) * m[c]))) to [lo, 127] in
// registers, REQUANTIZE's arithmetic (quant/ew.comp), and no int32 sum goes through
// memory. The i8 dst is written a whole word at a time, so an invocation owns every byte
// of the words it writes: rows() and edges() below say which words an invocation makes
// and why no two share one.
//
// lavapipe runs both sides of a branch (under a mask) and a loop as often as any
// invocation of its SIMD group needs: reloading the inputs for a channel of another image,
// a branch never taken, made the fused dense sums 3 times slower, and a second pass for a
// word whose bytes run into the next output row twice as slow. So rows() sums every word
// in one pass with the i32 form's inner loop (one image's inputs shared by the TC
// channels, each column at its own place), and the few words at a plane's edge take a
// variant, and a dispatch, of their own (edges()).
//
// QC_INT_DOT (quant/convdot.comp, variant QC_DENSE_DOT): the dense sums take 4 input
// channels at a time as packed 4x8-bit signed dot products (OpSDot,
// SPV_KHR_integer_dot_product), 16 of them per tap for the 64 products of 4 channels by 4
// columns; the input channels past the last multiple of 4 take the plain sums below. Its
// SPIR-V declares the DotProduct capabilities, so only that file defines QC_INT_DOT and the
// host runs it only where the device's shaderIntegerDotProduct is enabled
// (vulkan/backend.c). Depthwise sums stay on 32-bit arithmetic: its channels do not mix, so
// a packed word would have to hold 4 taps of one row, a shifted word per output column, and
// a 3x3 or 5x5 kernel's rows of 3 or 5 taps leave a quarter or more of the words empty.
#include "common.glsl"
#include "quant/i8.glsl"
#include "quant/variants.h"

#ifndef QC_INT_DOT
#define QC_INT_DOT 0
#endif

layout(local_size_x = 128) in;
layout(push_constant) uniform PC
{
    uint gate, x, w, y;
    uint b, sb, n, ci;   // i32 bias (vk_ref_small) and its stride; batch, input channels
    uint co, h, wd, ho;  // output channels; input rows and columns; output rows
    uint wo, k, s, p;    // output columns; kernel, stride, padding: rows | columns << 16
    uint dil, m, ms, lo; // dilation: rows | columns << 16; QC_RQ: the f32 multiplier
                         // (vk_ref_small) and its stride (0: one for every channel), the
                         // clamp's low end (0 with ReLU, else -127)
    uvec4 sx, sw, sy;    // element strides of x, w and y (QC_RQ: y dense)
} pc;

const bool RQ = (VARIANT & QC_RQ) != 0;
const bool EDGE = (VARIANT & QC_RQ_EDGE) != 0;
const bool DW = (VARIANT & 3) == QC_DEPTHWISE;
// output channels an invocation (no ||: glslang 11 makes `a || (b & c) != 0` a branch, no
// constant, and the SPIR-V invalid)
const uint TC = (VARIANT & QC_RQ_ONE) != 0 ? 1u : DW ? 1u : 4u;

// The inputs of 4 output columns at one tap, from the input plane at element xc of x:
// column j's at input row ih[j], column iw[j]; 0 outside the plane. Where they are adjacent
// bytes of one row (run: the columns lie along one output row, stride 1, dense columns)
// inside the plane, from the at most 2 words that hold them.
ivec4 x_cols(uint xc, ivec4 ih, ivec4 iw, bool run)
{
    int h = int(pc.h), wd = int(pc.wd);
    if (run && ih.x >= 0 && ih.x < h && iw.x >= 0 && iw.x + 3 < wd)
        return ld8x4(pc.x, xc + uint(ih.x) * pc.sx.z + uint(iw.x), 1u);
    ivec4 r = ivec4(0);
    for (int j = 0; j < 4; j++)
        if (ih[j] >= 0 && ih[j] < h && iw[j] >= 0 && iw[j] < wd)
            r[j] = ld8(pc.x, xc + uint(ih[j]) * pc.sx.z + uint(iw[j]) * pc.sx.w);
    return r;
}

#if QC_INT_DOT
// OpSDot (4450) of two words of 4 signed bytes each; fmt 0: PackedVectorFormat4x8Bit.
// Capabilities DotProduct (6019) and DotProductInput4x8BitPacked (6018).
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018],
                  id = 4450) int sdot4x8(uint a, uint b, spirv_literal int fmt);

// Four words of 4 bytes transposed: byte k of word j of the result is byte j of v[k].
uvec4 transpose4(uvec4 v)
{
    uint t0 = (v.x & 0x00FF00FFu) | ((v.y & 0x00FF00FFu) << 8); // bytes 0 and 2 of x, y
    uint t1 = ((v.x >> 8) & 0x00FF00FFu) | (v.y & 0xFF00FF00u); // bytes 1 and 3
    uint t2 = (v.z & 0x00FF00FFu) | ((v.w & 0x00FF00FFu) << 8);
    uint t3 = ((v.z >> 8) & 0x00FF00FFu) | (v.w & 0xFF00FF00u);
    return uvec4((t0 & 0xFFFFu) | (t2 << 16), (t1 & 0xFFFFu) | (t3 << 16),
                 (t0 >> 16) | (t2 & 0xFFFF0000u), (t1 >> 16) | (t3 & 0xFFFF0000u));
}

// Input channels ch .. ch + 3 (ch's plane at element xc of x) of 4 output columns at one
// tap, as x_cols() takes them: word j holds column j, channel ch + k in byte k; 0 outside
// the plane. Along a dense row each channel's 4 columns come from at most 2 words and are
// transposed; where the channels are adjacent bytes (QLINEAR) each column's 4 are.
uvec4 x_quads(uint xc, ivec4 ih, ivec4 iw, bool run)
{
    int h = int(pc.h), wd = int(pc.wd);
    uint sc = pc.sx.y;
    if (sc != 1u && run && ih.x >= 0 && ih.x < h && iw.x >= 0 && iw.x + 3 < wd) {
        uint at = xc + uint(ih.x) * pc.sx.z + uint(iw.x);
        return transpose4(uvec4(ld8x4_bytes(pc.x, at, 1u), ld8x4_bytes(pc.x, at + sc, 1u),
                                ld8x4_bytes(pc.x, at + 2u * sc, 1u),
                                ld8x4_bytes(pc.x, at + 3u * sc, 1u)));
    }
    uvec4 r = uvec4(0u);
    for (int j = 0; j < 4; j++)
        if (ih[j] >= 0 && ih[j] < h && iw[j] >= 0 && iw[j] < wd)
            r[j] = ld8x4_bytes(pc.x, xc + uint(ih[j]) * pc.sx.z + uint(iw[j]) * pc.sx.w, sc);
    return r;
}

// Input channels [0, end) (end a multiple of 4) of sums(), 4 at a time: per tap one word
// of each output channel's 4 weights and one of each column's 4 inputs, 16 dot products.
void dot_channels(uint xb, uint end, ivec4 h0, ivec4 w0, bool run, uint wrow[4],
                  inout ivec4 acc[4])
{
    int kh = int(pc.k & 0xFFFFu), kw = int(pc.k >> 16), dh = int(pc.dil & 0xFFFFu),
        dw = int(pc.dil >> 16), h = int(pc.h);
    for (uint ch = 0u; ch < end; ch += 4u) {
        uint xc = xb + ch * pc.sx.y, wc = ch * pc.sw.y;
        for (int r = 0; r < kh; r++) {
            ivec4 ih = h0 + r * dh;
            if (all(lessThan(ih, ivec4(0))) || all(greaterThanEqual(ih, ivec4(h))))
                continue;
            uint wr = wc + uint(r) * pc.sw.z;
            for (int q = 0; q < kw; q++) {
                uvec4 xv = x_quads(xc, ih, w0 + q * dw, run);
                uint wq = wr + uint(q) * pc.sw.w;
                for (uint c = 0u; c < TC; c++) {
                    uint wv = ld8x4_bytes(pc.w, wrow[c] + wq, pc.sw.y);
                    for (uint j = 0u; j < 4u; j++)
                        acc[c][j] += sdot4x8(wv, xv[j], 0);
                }
            }
        }
    }
}
#endif

// acc[c] += the sums of products of output channel c (c < TC) at 4 output columns, all
// of one image: column j's window starts at input row h0[j], column w0[j] (run: the
// columns lie along one output row and read adjacent inputs, x_cols()); channel c's
// weights at element wrow[c] of w; the image at element xb of x (depthwise: the channel's
// input plane). Every tap's inputs are loaded once for the TC channels.
void sums(uint xb, uint wrow[4], ivec4 h0, ivec4 w0, bool run, inout ivec4 acc[4])
{
    int kh = int(pc.k & 0xFFFFu), kw = int(pc.k >> 16), dh = int(pc.dil & 0xFFFFu),
        dw = int(pc.dil >> 16), h = int(pc.h);
    uint cin = DW ? 1u : pc.ci;
    uint first = 0u; // the input channels the plain sums below take start here
#if QC_INT_DOT
    first = cin & ~3u;
    dot_channels(xb, first, h0, w0, run, wrow, acc);
#endif
    for (uint ch = first; ch < cin; ch++) {
        uint xc = xb + ch * pc.sx.y, wc = ch * pc.sw.y; // depthwise: ch = 0
        for (int r = 0; r < kh; r++) {
            ivec4 ih = h0 + r * dh;
            if (all(lessThan(ih, ivec4(0))) || all(greaterThanEqual(ih, ivec4(h))))
                continue;
            uint wr = wc + uint(r) * pc.sw.z;
            for (int q = 0; q < kw; q++) {
                ivec4 xv = x_cols(xc, ih, w0 + q * dw, run);
                uint wq = wr + uint(q) * pc.sw.w;
                for (uint c = 0u; c < TC; c++)
                    acc[c] += ld8(pc.w, wrow[c] + wq) * xv;
            }
        }
    }
}

// Where output pixels px (of a plane) start their windows: rows in h0, columns in w0.
void windows(uvec4 px, out ivec4 h0, out ivec4 w0)
{
    h0 = ivec4(px / pc.wo) * int(pc.s & 0xFFFFu) - int(pc.p & 0xFFFFu);
    w0 = ivec4(px % pc.wo) * int(pc.s >> 16) - int(pc.p >> 16);
}

// The i32 sums through dst's strides: an invocation makes TC channels by 4 neighbouring
// columns of one output row; every element is a word of its own.
void sums_i32()
{
    uint blocks = (pc.co + TC - 1u) / TC, quads = (pc.wo + 3u) / 4u;
    uint total = pc.n * blocks * pc.ho * quads;
    bool run = pc.s >> 16 == 1u && pc.sx.w == 1u;
    for (uint i = gl_GlobalInvocationID.x; i < total; i += gl_NumWorkGroups.x * 128u) {
        uint ow0 = 4u * (i % quads), t = i / quads, oh = t % pc.ho;
        t /= pc.ho;
        uint o0 = TC * (t % blocks), img = t / blocks;
        int h0 = int(oh) * int(pc.s & 0xFFFFu) - int(pc.p & 0xFFFFu);
        int w0 = int(ow0) * int(pc.s >> 16) - int(pc.p >> 16);
        // channels past co repeat the last one; their sums are not stored
        uint wrow[4];
        ivec4 acc[4];
        for (uint c = 0u; c < TC; c++) {
            uint o = min(o0 + c, pc.co - 1u);
            wrow[c] = o * pc.sw.x;
            acc[c] = ivec4(ldiu(pc.b, o * pc.sb));
        }
        sums(img * pc.sx.x + (DW ? o0 * pc.sx.y : 0u), wrow, ivec4(h0),
             w0 + ivec4(0, 1, 2, 3) * int(pc.s >> 16), run, acc);
        for (uint c = 0u; c < TC && o0 + c < pc.co; c++)
            for (uint j = 0u; j < 4u && ow0 + j < pc.wo; j++)
                st(pc.y, img * pc.sy.x + (o0 + c) * pc.sy.y + oh * pc.sy.z + (ow0 + j) * pc.sy.w,
                   uint(acc[c][j]));
    }
}

// The requantized i8 of sum acc of a channel with multiplier mult: REQUANTIZE's
// arithmetic (quant/ew.comp), one f32 product, rounded on its own.
uint q_requant4(ivec4 acc, float mult)
{
    uint v = 0u;
    for (uint j = 0u; j < 4u; j++) {
        precise float y = float(acc[j]) * mult;
        v |= q_byte(q_round(y, int(pc.lo)), j);
    }
    return v;
}

// QC_RQ: the i8 results, written a whole word at a time into the dense dst (vulkan/quant.c
// checks that it is dense and starts on a word). Its bytes are the planes
// g = img * co + o of P = ho * wo bytes each, one after another. R = 4 / gcd(P, 4) planes
// make a span of D = R * P bytes, a whole number of words; spans start on words. Inside a
// span, plane m (0 < m < R) starts inside word (m * P) / 4: that word, at a plane's edge,
// holds bytes of 2 planes (2 channels, or 2 images), every other word bytes of 1 plane.
//
// rows() (variant QC_RQ) makes the words of one plane: invocation (group, b, f) makes word
// u, the f-th of a span's words at no edge, of the TC spans b * TC + c (c < TC) of a group:
// TC words D bytes apart, the same 4 pixels in TC planes R apart, so the TC channel rows
// share every tap's inputs. A group is one image's planes where TC = 4 (vulkan/quant.c
// takes TC = 4 only where R divides co, so that an image's spans start on words and hold
// its planes only, or where there is one image), all of dst where TC = 1. The 4 pixels may
// run over the end of an output row (wo of 7 or 14) into the next: each column has its own
// window, all summed in one pass. edges() (variant QC_RQ_EDGE, a second dispatch) makes
// the words at a plane's edge, each byte summed on its own; where planes are below 4
// bytes, every word.
//
// Why no two invocations ever write into one word: which dispatch makes a word depends on
// its place alone (at an edge or not), and the tracker orders the two dispatches. In
// rows(), distinct i name distinct (group, b, f) and so distinct words: the spans
// b * TC + c of a group differ for different (b, c), f numbers the words at no edge of a
// span one to one, and a row whose span lies past the group's planes (another image's, or
// none) is not stored. In edges(), i names span i / (R - 1) and its edge i % (R - 1) + 1
// (or word i). The grid-stride loops take each i once. An invocation computes all 4 bytes
// of each of its words itself, from x, w, the bias and the multiplier (never from dst),
// and stores each word once, whole (st8_word; the last word of dst keeps the bytes past
// its end). So whatever wo, P or the channel count, every word of dst is written by
// exactly one invocation, once.
void rows()
{
    uint planes = pc.n * pc.co, P = pc.ho * pc.wo;
    uint R = (P & 3u) == 0u ? 1u : (P & 1u) == 0u ? 2u : 4u, per = R * P / 4u, F = per - (R - 1u);
    uint Q = TC == 1u ? planes : pc.co; // planes of a group
    uint blocks = (Q + TC * R - 1u) / (TC * R), total = planes / Q * blocks * F;
    bool run = pc.s >> 16 == 1u && pc.sx.w == 1u;
    for (uint i = gl_GlobalInvocationID.x; i < total; i += gl_NumWorkGroups.x * 128u) {
        uint f = i % F, t = i / F, b = t % blocks, g0 = t / blocks * Q, u = f;
        for (uint e = 1u; e < R; e++) // past the edges before it
            u += u >= (e * P) >> 2 ? 1u : 0u;
        uint pl = b * TC * R + 4u * u / P; // plane of channel row 0 in the group
        uvec4 px = 4u * u % P + uvec4(0u, 1u, 2u, 3u);
        ivec4 h0, w0;
        windows(px, h0, w0);
        // rows past the group's planes repeat its last one; they are not stored
        uint g = g0 + min(pl, Q - 1u), wrow[4];
        ivec4 acc[4];
        float mult[4];
        for (uint c = 0u; c < TC; c++) {
            uint o = (g0 + min(pl + c * R, Q - 1u)) % pc.co;
            wrow[c] = o * pc.sw.x;
            acc[c] = ivec4(ldiu(pc.b, o * pc.sb));
            mult[c] = ldfu(pc.m, o * pc.ms);
        }
        uint xb = g / pc.co * pc.sx.x + (DW ? g % pc.co * pc.sx.y : 0u);
        sums(xb, wrow, h0, w0, run && px.x / pc.wo == px.w / pc.wo, acc);
        for (uint c = 0u; c < TC; c++)
            if (pl + c * R < Q)
                st8_word(pc.y, (g0 + (b * TC + c) * R) * P / 4u + u, q_requant4(acc[c], mult[c]),
                         4u);
    }
}

void edges()
{
    uint planes = pc.n * pc.co, P = pc.ho * pc.wo, bytes = planes * P;
    uint R = (P & 3u) == 0u ? 1u : (P & 1u) == 0u ? 2u : 4u, per = R * P / 4u;
    uint total = P < 4u ? (bytes + 3u) / 4u : (planes + R - 1u) / R * (R - 1u);
    int kh = int(pc.k & 0xFFFFu), kw = int(pc.k >> 16), dh = int(pc.dil & 0xFFFFu),
        dw = int(pc.dil >> 16), h = int(pc.h), wd = int(pc.wd);
    uint cin = DW ? 1u : pc.ci;
    for (uint i = gl_GlobalInvocationID.x; i < total; i += gl_NumWorkGroups.x * 128u) {
        uint q = P < 4u ? i : i / (R - 1u) * per + ((i % (R - 1u) + 1u) * P >> 2), b0 = 4u * q;
        if (b0 >= bytes)
            continue;
        // byte j: plane g (past dst's end, its last byte again: not stored), pixel px
        uvec4 at = min(b0 + uvec4(0u, 1u, 2u, 3u), uvec4(bytes - 1u)), g = at / P, o = g % pc.co;
        uvec4 xb = g / pc.co * pc.sx.x + (DW ? o * pc.sx.y : uvec4(0u)), wb = o * pc.sw.x;
        ivec4 h0, w0, acc;
        windows(at % P, h0, w0);
        vec4 mult;
        for (uint j = 0u; j < 4u; j++) {
            acc[j] = ldiu(pc.b, o[j] * pc.sb);
            mult[j] = ldfu(pc.m, o[j] * pc.ms);
        }
        for (uint ch = 0u; ch < cin; ch++)
            for (int r = 0; r < kh; r++)
                for (int t = 0; t < kw; t++)
                    for (uint j = 0u; j < 4u; j++) {
                        int ih = h0[j] + r * dh, iw = w0[j] + t * dw;
                        if (ih >= 0 && ih < h && iw >= 0 && iw < wd)
                            acc[j] += ld8(pc.w, wb[j] + ch * pc.sw.y + uint(r) * pc.sw.z +
                                                    uint(t) * pc.sw.w) *
                                      ld8(pc.x, xb[j] + ch * pc.sx.y + uint(ih) * pc.sx.z +
                                                    uint(iw) * pc.sx.w);
                    }
        uint v = 0u;
        for (uint j = 0u; j < 4u; j++) {
            precise float y = float(acc[j]) * mult[j];
            v |= q_byte(q_round(y, int(pc.lo)), j);
        }
        st8_word(pc.y, q, v, min(4u, bytes - b0));
    }
}

void main()
{
    GATE_RETURN();
    if (!RQ)
        sums_i32();
    else if (EDGE)
        edges();
    else
        rows();
}
