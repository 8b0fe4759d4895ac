// exapt's shader conventions (docs/vulkan.md), included by every compute shader after
//   #version 450
//   #extension GL_GOOGLE_include_directive : require
//
// Memory: four storage-buffer bindings b0..b3 (what Vulkan 1.1 guarantees per stage) and
// four uniform-buffer bindings u0..u3 (at most 16 KB each), read and written as 32-bit
// words. Each binding covers exactly the bytes of one operand of the node (or of a few
// adjacent ones), so the validation layer's synchronization checks see what a dispatch
// really touches. A tensor is named by a reference: the binding in the top two bits, bit
// 29 set for a uniform buffer, and the element offset of its element 0 from the binding's
// start below (vk_ref() on the host). ld/st and ldf/stf/ldi take a reference and an
// element index relative to it; ldu/ldfu/ldiu read what the host took with vk_ref_small()
// (the gate, scalars, per-channel vectors), which may be a uniform buffer; shaders never
// touch b0..b3 or u0..u3 directly.
//
// Writes: the build compiles every shader once per count WRITES of writable storage
// bindings its first lines declare ("// exapt: writes 1 3"; 1 and 2 when absent). b0 to
// b(WRITES-1) may be written, the others are readonly, so the layer tells reads from
// writes; the host binds what a dispatch writes from b0 up and what it only reads from b3
// down. st() cannot reach a readonly binding.
//
// Float controls: the build compiles each shader a second time with EX_FLOAT_CONTROLS=1,
// which declares SignedZeroInfNanPreserve for 32-bit floats (SPV_KHR_float_controls), so
// a driver may not assume that NaN and infinity never occur (x < 0.0 ? 0.0 : x must keep
// a NaN). The host runs that SPIR-V where the device guarantees the mode.
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

#if EX_FLOAT_CONTROLS
#extension GL_EXT_spirv_intrinsics : require
// OpExecutionMode SignedZeroInfNanPreserve (4461) for 32-bit floats; capability 4466
spirv_execution_mode(extensions = ["SPV_KHR_float_controls"], capabilities = [4466], 4461, 32);
#endif

#ifndef WRITES
#define WRITES 1
#endif
// A shader that defines EX_COHERENT before this include declares its writable bindings
// coherent: a workgroup then sees what others of the same dispatch wrote there once they
// made it visible (memoryBarrierBuffer) and counted in on a ticket (ticket_take), as the
// one-pass reductions need (the zone, vulkan/vk.h).
#ifdef EX_COHERENT
#define EX_W coherent
#else
#define EX_W
#endif
#if WRITES > 1
#define EX_B1 EX_W
#else
#define EX_B1 readonly
#endif
#if WRITES > 2
#define EX_B2 EX_W
#else
#define EX_B2 readonly
#endif
#if WRITES > 3
#define EX_B3 EX_W
#else
#define EX_B3 readonly
#endif

layout(constant_id = 0) const int VARIANT = 0;

layout(std430, set = 0, binding = 0) EX_W buffer B0 { uint w[]; } b0;
layout(std430, set = 0, binding = 1) EX_B1 buffer B1 { uint w[]; } b1;
layout(std430, set = 0, binding = 2) EX_B2 buffer B2 { uint w[]; } b2;
layout(std430, set = 0, binding = 3) EX_B3 buffer B3 { uint w[]; } b3;
layout(std140, set = 0, binding = 4) uniform U0 { uvec4 v[1024]; } u0;
layout(std140, set = 0, binding = 5) uniform U1 { uvec4 v[1024]; } u1;
layout(std140, set = 0, binding = 6) uniform U2 { uvec4 v[1024]; } u2;
layout(std140, set = 0, binding = 7) uniform U3 { uvec4 v[1024]; } u3;

const uint NOREF = 0xFFFFFFFFu;
const uint REF_UNIFORM = 0x20000000u; // the binding is u0..u3
const uint REF_ELEM = 0x1FFFFFFFu;    // the element offset from the binding's start

uint ld_uniform(uint ref, uint a)
{
    uvec4 q;
    switch (ref >> 30) {
    case 0u: q = u0.v[a >> 2]; break;
    case 1u: q = u1.v[a >> 2]; break;
    case 2u: q = u2.v[a >> 2]; break;
    default: q = u3.v[a >> 2]; break;
    }
    return q[a & 3u];
}

// A storage operand (vk_ref). Every case of the switch costs a load on lavapipe, whose
// SIMD code runs all of them under masks, so ld() knows only the four storage bindings.
uint ld(uint ref, uint i)
{
    uint a = (ref & REF_ELEM) + i;
    switch (ref >> 30) {
    case 0u: return b0.w[a];
    case 1u: return b1.w[a];
    case 2u: return b2.w[a];
    default: return b3.w[a];
    }
}

// Only the writable bindings: the host never hands out a written reference to another.
void st(uint ref, uint i, uint v)
{
    uint a = (ref & REF_ELEM) + i;
#if WRITES == 1
    b0.w[a] = v;
#else
    switch (ref >> 30) {
    case 0u: b0.w[a] = v; break;
#if WRITES == 2
    default: b1.w[a] = v; break;
#else
    case 1u: b1.w[a] = v; break;
#if WRITES == 3
    default: b2.w[a] = v; break;
#else
    case 2u: b2.w[a] = v; break;
    default: b3.w[a] = v; break;
#endif
#endif
    }
#endif
}

float ldf(uint ref, uint i) { return uintBitsToFloat(ld(ref, i)); }

// Four loads under one switch on the binding: ld() switches per element, and a compiler
// does not batch loads that lie in different branches, so a shader that wants several
// loads in flight per invocation (the memory-bound fast paths) asks for them together.
// Every index must lie in the operand's own range (the binding holds nothing else):
// callers point masked lanes at element 0 and discard them. Storage operands only.
uvec4 ld4(uint ref, uvec4 i)
{
    uvec4 a = uvec4(ref & REF_ELEM) + i;
    uvec4 v;
    switch (ref >> 30) {
    case 0u: v = uvec4(b0.w[a.x], b0.w[a.y], b0.w[a.z], b0.w[a.w]); break;
    case 1u: v = uvec4(b1.w[a.x], b1.w[a.y], b1.w[a.z], b1.w[a.w]); break;
    case 2u: v = uvec4(b2.w[a.x], b2.w[a.y], b2.w[a.z], b2.w[a.w]); break;
    default: v = uvec4(b3.w[a.x], b3.w[a.y], b3.w[a.z], b3.w[a.w]); break;
    }
    return v;
}
vec4 ldf4(uint ref, uvec4 i) { return uintBitsToFloat(ld4(ref, i)); }

// A small operand the host took with vk_ref_small(): a uniform buffer when it fit one, a
// storage buffer otherwise. Only for those operands: ld() cannot read a uniform buffer.
uint ldu(uint ref, uint i)
{
    return (ref & REF_UNIFORM) != 0u ? ld_uniform(ref, (ref & REF_ELEM) + i) : ld(ref, i);
}
float ldfu(uint ref, uint i) { return uintBitsToFloat(ldu(ref, i)); }
int ldiu(uint ref, uint i) { return int(ldu(ref, i)); }
int ldi(uint ref, uint i) { return int(ld(ref, i)); }
void stf(uint ref, uint i, float v) { st(ref, i, floatBitsToUint(v)); }

// First-come status report (the host's status words): code, node, row, value. The
// status words are a written binding of the dispatch.
uint cas_status(uint sref, uint code)
{
    uint a = sref & REF_ELEM;
#if WRITES == 1
    return atomicCompSwap(b0.w[a], 0u, code);
#else
    switch (sref >> 30) {
    case 0u: return atomicCompSwap(b0.w[a], 0u, code);
#if WRITES == 2
    default: return atomicCompSwap(b1.w[a], 0u, code);
#else
    case 1u: return atomicCompSwap(b1.w[a], 0u, code);
#if WRITES == 3
    default: return atomicCompSwap(b2.w[a], 0u, code);
#else
    case 2u: return atomicCompSwap(b2.w[a], 0u, code);
    default: return atomicCompSwap(b3.w[a], 0u, code);
#endif
#endif
    }
#endif
}

#ifdef EX_COHERENT
// Counts one in on ticket i of a written reference (atomicAdd); the count before.
uint ticket_take(uint ref, uint i)
{
    uint a = (ref & REF_ELEM) + i;
#if WRITES == 1
    return atomicAdd(b0.w[a], 1u);
#else
    switch (ref >> 30) {
    case 0u: return atomicAdd(b0.w[a], 1u);
#if WRITES == 2
    default: return atomicAdd(b1.w[a], 1u);
#else
    case 1u: return atomicAdd(b1.w[a], 1u);
#if WRITES == 3
    default: return atomicAdd(b2.w[a], 1u);
#else
    case 2u: return atomicAdd(b2.w[a], 1u);
    default: return atomicAdd(b3.w[a], 1u);
#endif
#endif
    }
#endif
}

// Whether this workgroup is the last of `count` to count in on ticket i of tickets (a
// zone's, vulkan/vk.h): every invocation calls it once, after the workgroup's writes that
// the last one reads (to coherent bindings, EX_COHERENT). The last puts the ticket back
// to 0 for the next dispatch and sees the others' writes.
shared uint ex_last;
bool last_in(uint tickets, uint i, uint count)
{
    memoryBarrierBuffer(); // this invocation's writes before the workgroup counts in
    barrier();
    if (gl_LocalInvocationID.x == 0u) {
        ex_last = ticket_take(tickets, i) + 1u == count ? 1u : 0u;
        if (ex_last != 0u)
            st(tickets, i, 0u);
    }
    barrier();
    memoryBarrierBuffer(); // the others' writes before this invocation reads them
    return ex_last != 0u;
}
#endif

void report(uint sref, uint code, uint node, uint row, uint value)
{
    if (cas_status(sref, code) == 0u) {
        st(sref, 1u, node);
        st(sref, 2u, row);
        st(sref, 3u, value);
    }
}

bool gated_off(uint gate) { return gate != NOREF && ldfu(gate, 0u) == 0.0; }
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
