// exapt's shader conventions (docs/vulkan.md), included by every compute shader after
//   #version 450
//   #extension GL_GOOGLE_include_directive : require
//
// Memory: four storage-buffer bindings (what Vulkan 1.1 guarantees per stage), each one
// whole memory block of the backend, read and written as 32-bit words. A tensor is named
// by a reference: the binding in the top two bits, the element offset of its element 0
// in that block below (vk_ref() on the host). ld/st and ldf/stf/ldi take a reference and
// an element index relative to it; shaders never touch b0..b3 directly.
//
// Push constants: a block of at most 128 bytes whose first member is `uint gate` (the
// host fills it in): every shader starts with GATE_RETURN(), so a gated-off node does
// nothing without a host round trip. Element offsets, shapes and strides follow, as
// uint/uvec4 (std430 offsets, mirrored by a C struct of uint32_t in the family file).
//
// Specialization constant 0 (VARIANT) selects among the variants of one shader; the
// pipeline is created per (shader, variant) on first use. Workgroups are at most 128
// invocations and 16 KB of shared memory (the portable profile's limits); no subgroup
// operations and no float atomics, so sums are fixed-order trees and bitwise repeatable.
// Grid-stride loops: the host launches at most 65535 groups along x.

#ifndef EXAPT_COMMON_GLSL
#define EXAPT_COMMON_GLSL

layout(constant_id = 0) const int VARIANT = 0;

layout(std430, set = 0, binding = 0) buffer B0 { uint w[]; } b0;
layout(std430, set = 0, binding = 1) buffer B1 { uint w[]; } b1;
layout(std430, set = 0, binding = 2) buffer B2 { uint w[]; } b2;
layout(std430, set = 0, binding = 3) buffer B3 { uint w[]; } b3;

const uint NOREF = 0xFFFFFFFFu;

uint ld(uint ref, uint i)
{
    uint a = (ref & 0x3FFFFFFFu) + i;
    switch (ref >> 30) {
    case 0u: return b0.w[a];
    case 1u: return b1.w[a];
    case 2u: return b2.w[a];
    default: return b3.w[a];
    }
}

void st(uint ref, uint i, uint v)
{
    uint a = (ref & 0x3FFFFFFFu) + i;
    switch (ref >> 30) {
    case 0u: b0.w[a] = v; break;
    case 1u: b1.w[a] = v; break;
    case 2u: b2.w[a] = v; break;
    default: b3.w[a] = v; break;
    }
}

float ldf(uint ref, uint i) { return uintBitsToFloat(ld(ref, i)); }

// Four loads under one switch on the binding: ld() switches per element, and a compiler
// does not batch loads that lie in different branches, so a shader that wants several
// loads in flight per invocation (the memory-bound fast paths) asks for them together.
// Every index must be in bounds: callers point masked lanes at element 0 and discard them.
vec4 ldf4(uint ref, uvec4 i)
{
    uvec4 a = uvec4(ref & 0x3FFFFFFFu) + i;
    uvec4 v;
    switch (ref >> 30) {
    case 0u: v = uvec4(b0.w[a.x], b0.w[a.y], b0.w[a.z], b0.w[a.w]); break;
    case 1u: v = uvec4(b1.w[a.x], b1.w[a.y], b1.w[a.z], b1.w[a.w]); break;
    case 2u: v = uvec4(b2.w[a.x], b2.w[a.y], b2.w[a.z], b2.w[a.w]); break;
    default: v = uvec4(b3.w[a.x], b3.w[a.y], b3.w[a.z], b3.w[a.w]); break;
    }
    return uintBitsToFloat(v);
}
int ldi(uint ref, uint i) { return int(ld(ref, i)); }
void stf(uint ref, uint i, float v) { st(ref, i, floatBitsToUint(v)); }

// First-come status report (the host's status words): code, node, row, value.
void report(uint sref, uint code, uint node, uint row, uint value)
{
    uint a = sref & 0x3FFFFFFFu, prev;
    switch (sref >> 30) {
    case 0u: prev = atomicCompSwap(b0.w[a], 0u, code); break;
    case 1u: prev = atomicCompSwap(b1.w[a], 0u, code); break;
    case 2u: prev = atomicCompSwap(b2.w[a], 0u, code); break;
    default: prev = atomicCompSwap(b3.w[a], 0u, code); break;
    }
    if (prev == 0u) {
        st(sref, 1u, node);
        st(sref, 2u, row);
        st(sref, 3u, value);
    }
}

bool gated_off(uint gate) { return gate != NOREF && ldf(gate, 0u) == 0.0; }
#define GATE_RETURN() if (gated_off(pc.gate)) return

// Row-major coordinates of logical index i in a 4-d shape, and an offset from strides.
uvec4 coords4(uvec4 ne, uint i)
{
    uvec4 c;
    c.w = i % ne.w;
    i /= ne.w;
    c.z = i % ne.z;
    i /= ne.z;
    c.y = i % ne.y;
    c.x = i / ne.y;
    return c;
}
uint dot4(uvec4 c, uvec4 s) { return c.x * s.x + c.y * s.y + c.z * s.z + c.w * s.w; }
uint off4(uvec4 ne, uvec4 s, uint i) { return dot4(coords4(ne, i), s); }

// NaN wins, so a poisoned or diverged input shows in a maximum.
float max_nan(float a, float b) { return (b > a || isnan(b)) ? b : a; }

// Philox 4x32-10 exactly as core/philox.h: draw i of the stream (key, counter).
uint philox_u32(uint k0, uint k1, uint c0, uint c1, uint i)
{
    uvec4 c = uvec4(i >> 2, 0u, c0, c1);
    for (int r = 0; r < 10; r++) {
        uint hi0, lo0, hi1, lo1;
        umulExtended(0xD2511F53u, c.x, hi0, lo0);
        umulExtended(0xCD9E8D57u, c.z, hi1, lo1);
        c = uvec4(hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0);
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    return c[i & 3u];
}
float philox_uniform(uint k0, uint k1, uint c0, uint c1, uint i)
{
    return float(philox_u32(k0, k1, c0, c1, i) >> 8) * (1.0 / 16777216.0);
}
float philox_normal(uint k0, uint k1, uint c0, uint c1, uint i)
{
    float u1 = philox_uniform(k0, k1, c0, c1, 2u * i);
    float u2 = philox_uniform(k0, k1, c0, c1, 2u * i + 1u);
    u1 = max(u1, 1e-7);
    return sqrt(-2.0 * log(u1)) * cos(6.28318530717958647692 * u2);
}

#endif
