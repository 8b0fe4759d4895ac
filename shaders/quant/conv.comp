// Every int8 sum of products: QCONV2D and QDWCONV2D, and QPWCONV and QLINEAR as 1x1
// convolutions (vulkan/quant.c maps their operands; QLINEAR's batch rows are the output
// columns). bias + sum x * w, taps outside the input add 0. Integer sums are exact in any
// order, so the result is the CPU backend's bit for bit; builders keep them within int32
// (docs/ops.md).
//
// An invocation makes a block of 4 output channels (1 for depthwise, whose channels read
// different inputs) by 4 neighbouring output columns: each tap then loads 4 inputs and 4
// weights for 16 products, where one output an invocation loaded 2 values a product, and
// loads are what costs (every ld() switches over the bindings; lavapipe runs each case).
// Where the 4 inputs are adjacent bytes inside the row (stride 1, dense columns) they come
// from at most 2 words.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "quant/i8.glsl"
#include "quant/variants.h"

layout(local_size_x = 128) in;
layout(push_constant) uniform PC
{
    uint gate, x, w, y;
    uint b, sb, n, ci;  // i32 bias (vk_ref_small) and its stride; batch, input channels
    uint co, h, wd, ho; // output channels; input rows and columns; output rows
    uint wo, k, s, p;   // output columns; kernel, stride, padding: rows | columns << 16
    uint dil, r0, r1, r2; // dilation: rows | columns << 16
    uvec4 sx, sw, sy;   // element strides of x, w and y
} pc;

const bool DW = VARIANT == QC_DEPTHWISE;
const uint TC = DW ? 1u : 4u; // output channels an invocation

// Inputs iw0 + j * step (j = 0..3) of the row of x at element xr; 0 outside [0, wd).
ivec4 x_cols(uint xr, int iw0, int step, int wd)
{
    if (step == 1 && pc.sx.w == 1u && iw0 >= 0 && iw0 + 3 < wd)
        return ld8x4(pc.x, xr + uint(iw0), 1u);
    ivec4 r = ivec4(0);
    for (int j = 0; j < 4; j++) {
        int iw = iw0 + j * step;
        if (iw >= 0 && iw < wd)
            r[j] = ld8(pc.x, xr + uint(iw) * pc.sx.w);
    }
    return r;
}

void main()
{
    GATE_RETURN();
    int kh = int(pc.k & 0xFFFFu), kw = int(pc.k >> 16), dh = int(pc.dil & 0xFFFFu),
        dw = int(pc.dil >> 16), sw = int(pc.s >> 16), h = int(pc.h), wd = int(pc.wd);
    uint cin = DW ? 1u : pc.ci, blocks = (pc.co + TC - 1u) / TC, quads = (pc.wo + 3u) / 4u;
    uint total = pc.n * blocks * pc.ho * quads;
    for (uint i = gl_GlobalInvocationID.x; i < total; i += gl_NumWorkGroups.x * 128u) {
        uint ow0 = 4u * (i % quads), t = i / quads, oh = t % pc.ho;
        t /= pc.ho;
        uint o0 = TC * (t % blocks), img = t / blocks;
        int h0 = int(oh) * int(pc.s & 0xFFFFu) - int(pc.p & 0xFFFFu);
        int w0 = int(ow0) * sw - int(pc.p >> 16);
        // channels past co repeat the last one; their sums are not stored
        uint wrow[4];
        ivec4 acc[4];
        for (uint c = 0u; c < TC; c++) {
            uint o = min(o0 + c, pc.co - 1u);
            wrow[c] = o * pc.sw.x;
            acc[c] = ivec4(ldiu(pc.b, o * pc.sb));
        }
        for (uint ch = 0u; ch < cin; ch++) {
            uint xc = img * pc.sx.x + (DW ? o0 : ch) * pc.sx.y, wc = ch * pc.sw.y;
            for (int r = 0; r < kh; r++) {
                int ih = h0 + r * dh;
                if (ih < 0 || ih >= h)
                    continue;
                uint xr = xc + uint(ih) * pc.sx.z, wr = wc + uint(r) * pc.sw.z;
                for (int q = 0; q < kw; q++) {
                    ivec4 xv = x_cols(xr, w0 + q * dw, sw, wd);
                    uint wq = wr + uint(q) * pc.sw.w;
                    for (uint c = 0u; c < TC; c++)
                        acc[c] += ld8(pc.w, wrow[c] + wq) * xv;
                }
            }
        }
        for (uint c = 0u; c < TC && o0 + c < pc.co; c++)
            for (uint j = 0u; j < 4u && ow0 + j < pc.wo; j++)
                st(pc.y, img * pc.sy.x + (o0 + c) * pc.sy.y + oh * pc.sy.z + (ow0 + j) * pc.sy.w,
                   uint(acc[c][j]));
    }
}
