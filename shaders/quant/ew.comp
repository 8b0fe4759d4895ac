// The int8 element-wise ops: QUANTIZE, DEQUANTIZE, REQUANTIZE, QADD, QRELU and one part of
// QCONCAT (docs/ops.md). Every source is read at dst's coordinates through its own
// strides. An i8 dst is dense (vulkan/quant.c checks it), so an invocation makes 4
// neighbouring elements and writes their word whole, loading each operand's 4 values
// together where they lie along one row; DEQUANTIZE's f32 dst takes one element an
// invocation. Each invocation reads its elements before it writes them, so
// dst == src[0] (in place) is safe. The f32 products and sums are `precise`: each is
// rounded on its own, never fused into a multiply-add, as the CPU backend rounds them.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "quant/i8.glsl"
#include "quant/variants.h"

layout(local_size_x = 128) in;
layout(push_constant) uniform PC
{
    uint gate, d, a, b;   // dst, x (or a), QADD's b
    uint m, mo, ms, lo;   // per-channel f32 (vk_ref_small): element mo + c * ms; clamp's low end
    uint n, cdim, ma, mb; // dst's elements, the padded dim of x's channel, QADD's multipliers
    uint c, at, hw, pad;  // QCONCAT: dst's channels, the part's first one, h * w
    uvec4 ne, sd, sa, sb; // padded shape (QCONCAT: the part's), element strides
} pc;

// x's multiplier (QUANTIZE's 1 / scale, DEQUANTIZE's scale) at coordinates c.
float chan(uvec4 c) { return ldfu(pc.m, pc.mo + c[pc.cdim] * pc.ms); }

// The i8 result at coordinates c (source offsets through sa, sb).
int q_elem(uvec4 c)
{
    uint oa = dot4(c, pc.sa);
    if (VARIANT == QE_QRELU)
        return max(ld8(pc.a, oa), 0);
    if (VARIANT == QE_QADD) {
        precise float ta = float(ld8(pc.a, oa)) * uintBitsToFloat(pc.ma);
        precise float tb = float(ld8(pc.b, dot4(c, pc.sb))) * uintBitsToFloat(pc.mb);
        precise float s = ta + tb;
        return q_round(s, int(pc.lo));
    }
    float x = VARIANT == QE_QUANTIZE        ? ldf(pc.a, oa)
              : VARIANT == QE_REQUANTIZE_I32 ? float(ldi(pc.a, oa))
                                             : float(ld8(pc.a, oa));
    precise float v = x * chan(c);
    return q_round(v, int(pc.lo));
}

// The i8 results at c and its 3 right neighbours in the row: each operand's 4 values
// with one index computation and as few loads as they take (ld4, ld8x4).
ivec4 q_quad(uvec4 c)
{
    const uvec4 j = uvec4(0u, 1u, 2u, 3u);
    uint oa = dot4(c, pc.sa);
    if (VARIANT == QE_QRELU)
        return max(ld8x4(pc.a, oa, pc.sa.w), ivec4(0));
    ivec4 r;
    if (VARIANT == QE_QADD) {
        ivec4 a = ld8x4(pc.a, oa, pc.sa.w), b = ld8x4(pc.b, dot4(c, pc.sb), pc.sb.w);
        for (int t = 0; t < 4; t++) {
            precise float ta = float(a[t]) * uintBitsToFloat(pc.ma);
            precise float tb = float(b[t]) * uintBitsToFloat(pc.mb);
            precise float s = ta + tb;
            r[t] = q_round(s, int(pc.lo));
        }
        return r;
    }
    vec4 x = VARIANT == QE_QUANTIZE        ? ldf4(pc.a, oa + j * pc.sa.w)
             : VARIANT == QE_REQUANTIZE_I32 ? vec4(ivec4(ld4(pc.a, oa + j * pc.sa.w)))
                                            : vec4(ld8x4(pc.a, oa, pc.sa.w));
    for (uint t = 0u; t < 4u; t++) {
        precise float v = x[t] * chan(c + uvec4(0u, 0u, 0u, t));
        r[t] = q_round(v, int(pc.lo));
    }
    return r;
}

// i8 dst: word q holds logical elements 4q .. 4q + 3, along one row where they can
// (vulkan/quant.c merges the dims of dense operands into one row where no channel is
// needed).
void words()
{
    uint count = (pc.n + 3u) / 4u;
    for (uint q = gl_GlobalInvocationID.x; q < count; q += gl_NumWorkGroups.x * 128u) {
        uint v = 0u, k = min(4u, pc.n - 4u * q);
        uvec4 c = coords4(pc.ne, 4u * q);
        if (k == 4u && c.w + 3u < pc.ne.w) {
            ivec4 r = q_quad(c);
            v = q_byte(r.x, 0u) | q_byte(r.y, 1u) | q_byte(r.z, 2u) | q_byte(r.w, 3u);
        } else {
            for (uint t = 0u; t < k; t++)
                v |= q_byte(q_elem(coords4(pc.ne, 4u * q + t)), t);
        }
        st8_word(pc.d, q, v, k);
    }
}

// DEQUANTIZE: f32 dst, one element an invocation, through dst's strides.
void floats()
{
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += gl_NumWorkGroups.x * 128u) {
        uvec4 c = coords4(pc.ne, i);
        uint oa = dot4(c, pc.sa);
        float x = VARIANT == QE_DEQUANTIZE_I32 ? float(ldi(pc.a, oa)) : float(ld8(pc.a, oa));
        precise float y = x * chan(c);
        stf(pc.d, dot4(c, pc.sd), y);
    }
}

// One part of QCONCAT: in image i of the dense dst, the part's bytes are L = Ci * hw
// bytes from i * S + at * hw (S = C * hw). Where L or that start is not a multiple of 4,
// a word holds bytes of two images' blocks (or of other parts): the image whose block's
// bytes come first in it owns the word and writes every byte of the part in it; the
// other parts' bytes keep what the word held (their dispatches come before or after,
// ordered by barriers). Work items: the words each image's block touches, at most
// L / 4 + 2.
void concat()
{
    uint len = pc.ne.y * pc.hw, img = pc.c * pc.hw, off = pc.at * pc.hw;
    uint per = (len + 3u) / 4u + 1u, items = pc.ne.x * per;
    for (uint u = gl_GlobalInvocationID.x; u < items; u += gl_NumWorkGroups.x * 128u) {
        uint i = u / per, lo = i * img + off, first = lo >> 2, q = first + u % per;
        if (i > 0u && ((lo - img + len - 1u) >> 2) == first)
            first++; // image i - 1's block ends in this word: it is that image's
        if (q < first || 4u * q >= lo + len)
            continue;
        uint v = 0u, keep = 0u;
        for (uint t = 0u; t < 4u; t++) {
            uint g = 4u * q + t, gi = g / img, r = g % img - off; // r wraps below the block
            if (gi < pc.ne.x && r < len) {
                uint ch = r / pc.hw, p = r % pc.hw;
                uvec4 c = uvec4(gi, ch, p / pc.ne.w, p % pc.ne.w);
                precise float y = float(ld8(pc.a, dot4(c, pc.sa))) * ldfu(pc.m, pc.mo);
                v |= q_byte(q_round(y, -127), t);
            } else {
                keep |= 0xFFu << (8u * t);
            }
        }
        uint base = pc.d & ~REF_ELEM, w = ((pc.d & REF_ELEM) >> 2) + q;
        if (keep != 0u)
            v |= ld(base, w) & keep;
        st(base, w, v);
    }
}

void main()
{
    GATE_RETURN();
    if (VARIANT == QE_QCONCAT)
        concat();
    else if (VARIANT == QE_DEQUANTIZE_I8 || VARIANT == QE_DEQUANTIZE_I32)
        floats();
    else
        words();
}
