// int8 storage without the 8-bit storage feature (included after common.glsl). The
// reference of an i8 operand counts bytes (vk_ref() in vulkan/vk.h): an element is read
// from its 32-bit word and sign-extended. An i8 dst is written a whole word at a time,
// by the one invocation that owns the word, so no two invocations write into one word
// (vulkan/quant.c makes sure that dst is dense and starts on a word).
#ifndef EXAPT_QUANT_I8_GLSL
#define EXAPT_QUANT_I8_GLSL

// Element i of the i8 operand ref.
int ld8(uint ref, uint i)
{
    uint b = (ref & REF_ELEM) + i;
    return bitfieldExtract(int(ld(ref & ~REF_ELEM, b >> 2)), int(8u * (b & 3u)), 8);
}

// The bytes of elements i + j * s (j = 0..3) of the i8 operand ref, all inside it, packed
// in one word (element j in byte j) as a packed 4x8-bit dot product takes them: adjacent
// ones (s = 1) from the at most 2 words that hold them.
uint ld8x4_bytes(uint ref, uint i, uint s)
{
    uint b = (ref & REF_ELEM) + i, base = ref & ~REF_ELEM;
    if (s != 1u) {
        uint v = 0u;
        for (uint j = 0u; j < 4u; j++, b += s)
            v |= bitfieldExtract(ld(base, b >> 2), int(8u * (b & 3u)), 8) << (8u * j);
        return v;
    }
    uint sh = 8u * (b & 3u), v = ld(base, b >> 2);
    if (sh != 0u)
        v = (v >> sh) | (ld(base, (b >> 2) + 1u) << (32u - sh));
    return v;
}

// Elements i + j * s (j = 0..3) of the i8 operand ref, all inside it: adjacent ones
// (s = 1) from the at most 2 words that hold them.
ivec4 ld8x4(uint ref, uint i, uint s)
{
    if (s != 1u)
        return ivec4(ld8(ref, i), ld8(ref, i + s), ld8(ref, i + 2u * s), ld8(ref, i + 3u * s));
    int v = int(ld8x4_bytes(ref, i, 1u));
    return ivec4(bitfieldExtract(v, 0, 8), bitfieldExtract(v, 8, 8), bitfieldExtract(v, 16, 8),
                 bitfieldExtract(v, 24, 8));
}

// clamp(rne(v)) to [lo, 127] (docs/ops.md). A NaN's conversion to int is undefined, so
// the integer clamp after it keeps whatever comes out in range.
int q_round(float v, int lo)
{
    return clamp(int(clamp(roundEven(v), float(lo), 127.0)), lo, 127);
}

// sign(s) * ((|s| + k / 2) / k): an average rounded half away from zero.
int q_avg(int s, int k)
{
    int r = (abs(s) + k / 2) / k;
    return s < 0 ? -r : r;
}

// Byte t (0 to 3) of a word holding the i8 value v.
uint q_byte(int v, uint t) { return uint(v & 0xFF) << (8u * t); }

// Word q of the i8 dst ref (whose byte offset is a multiple of 4): the low `count` bytes
// of v. The bytes past them lie beyond dst, in its allocation's padding or a neighbour's
// bytes, and keep what the word held.
void st8_word(uint ref, uint q, uint v, uint count)
{
    uint base = ref & ~REF_ELEM, w = ((ref & REF_ELEM) >> 2) + q;
    if (count < 4u) {
        uint keep = 0xFFFFFFFFu << (8u * count);
        v = (v & ~keep) | (ld(base, w) & keep);
    }
    st(base, w, v);
}

#endif
