// PWCONV, y[n][o][h][w] = sum over c of w[o][c] x[n][c][h][w], as a stream: each
// invocation owns one position (n, h, w), consecutive invocations consecutive positions
// (so loads and stores coalesce wherever rows are dense), and keeps a block of CT output
// channels in registers; the workgroup stages w's CT rows in shared memory, CK input
// channels at a time, and every invocation reads them broadcast. x is read once per
// block of CT outputs (once where Co <= CT), 8 loads in flight while the previous 8
// channels are summed, y written once. Each output sums its input channels in order.
//
// PW_BN (PWCONV_BN, inference): the batch norm in eval mode folded into the store,
// y = s a[o] + b[o] with BN_STATS's (eval) and BN_APPLY's arithmetic (batchnorm/), so y is
// written once and no pass over it follows; the workgroup folds its CT channels' a and b
// once, from the running statistics, gamma and beta (ldfu: uniform buffers where they
// fit). Where those do not fit one dispatch's bindings, PW_FOLD_A and PW_FOLD_B passes
// fold a and then b into scratch first, and PW_FOLDED reads them (vulkan/gemm.c). PW_RELU:
// max(x, 0) as x is loaded (x itself is never written).
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "common.glsl"
#include "gemm/variants.h"

layout(local_size_x = 128) in;
layout(push_constant) uniform PC
{
    uint gate, x, w, y;
    uint npos, hw, wd, ci;     // positions N*H*W, H*W, W, input channels
    uint co, blocks, swo, swi; // output channels, blocks of 128 positions, w's strides
    uvec4 sx, sy;              // x's and y's strides (n, c, h, w)
    uint m, v, g, b;     // PW_BN: running mean, running var, gamma, beta (NOREF: none);
                         // PW_FOLDED: a and b at g and b
    uint sm, sv, sg, sb; // their strides
    float eps;
} pc;

const uint CT = (VARIANT & PW_CT32) != 0 ? 32u : 16u;
const uint CQ = CT / 4u;   // vec4 accumulators
const uint CK = 512u / CQ; // input channels staged at a time (a multiple of 8)

shared vec4 ws[512]; // ws[c * CQ + q][r] = w[o0 + 4q + r][c0 + c], 0 beyond w
shared vec2 bnk[32]; // PW_BN: (a, b) of output channel o0 + o

// w's rows [o0, o0 + CT) x columns [c0, c0 + cn), padded with zeros to a multiple of 8;
// four loads per invocation in flight at a time.
void stage(uint o0, uint c0, uint cn)
{
    uint cpad = (cn + 7u) & ~7u, t = gl_LocalInvocationID.x;
    for (uint e0 = 0u; e0 < cpad * CT; e0 += 512u) {
        uvec4 e = uvec4(e0 + t) + uvec4(0u, 128u, 256u, 384u);
        uvec4 o = e % CT, c = e / CT;
        bvec4 ok = bvec4(uvec4(lessThan(c, uvec4(cn))) & uvec4(lessThan(o, uvec4(pc.co - o0))));
        vec4 v = ldf4(pc.w, mix(uvec4(0u), (o0 + o) * pc.swo + (c0 + c) * pc.swi, ok));
        v = mix(vec4(0.0), v, ok);
        [[unroll]] for (uint k = 0u; k < 4u; k++)
            if (e[k] < cpad * CT)
                ws[c[k] * CQ + o[k] / 4u][o[k] % 4u] = v[k];
    }
}

// 4 input channels from c of the position at xo (0 where masked: a lane past the last
// position or channel loads element 0 and discards it).
vec4 load4(uint xo, uint c, bool live)
{
    uvec4 ic = uvec4(c) + uvec4(0u, 1u, 2u, 3u);
    bvec4 ok = live ? lessThan(ic, uvec4(pc.ci)) : bvec4(false);
    vec4 v = ldf4(pc.x, mix(uvec4(0u), uvec4(xo) + ic * pc.sx.y, ok));
    v = mix(vec4(0.0), v, ok);
    if ((VARIANT & PW_RELU) != 0) // v < 0 ? 0 : v, as RELU: a NaN stays NaN
        v = mix(v, vec4(0.0), lessThan(v, vec4(0.0)));
    return v;
}

// Output channel o's batch norm as BN_STATS (eval) stores invstd = 1 / sqrt(var + eps)
// and BN_APPLY folds it (batchnorm/pointwise.comp): a = invstd gamma, b = beta - mean a.
vec2 bn_consts(uint o)
{
    if ((VARIANT & PW_FOLDED) != 0)
        return vec2(ldfu(pc.g, o * pc.sg), ldfu(pc.b, o * pc.sb));
    float inv = 1.0 / sqrt(ldfu(pc.v, o * pc.sv) + pc.eps);
    float gm = pc.g == NOREF ? 1.0 : ldfu(pc.g, o * pc.sg);
    float k = inv * gm, bt = pc.b == NOREF ? 0.0 : ldfu(pc.b, o * pc.sb);
    return vec2(k, bt - ldfu(pc.m, o * pc.sm) * k);
}

// The folding passes, one invocation per output channel: PW_FOLD_A a = invstd gamma into
// y, PW_FOLD_B b = beta - mean a into y with a at x; the same arithmetic as bn_consts.
void fold()
{
    for (uint o = gl_GlobalInvocationID.x; o < pc.co; o += gl_NumWorkGroups.x * 128u) {
        if ((VARIANT & PW_FOLD_A) != 0) {
            float inv = 1.0 / sqrt(ldfu(pc.v, o * pc.sv) + pc.eps);
            stf(pc.y, o, inv * (pc.g == NOREF ? 1.0 : ldfu(pc.g, o * pc.sg)));
        } else {
            float bt = pc.b == NOREF ? 0.0 : ldfu(pc.b, o * pc.sb);
            stf(pc.y, o, bt - ldfu(pc.m, o * pc.sm) * ldf(pc.x, o));
        }
    }
}

void main()
{
    GATE_RETURN();
    if ((VARIANT & (PW_FOLD_A | PW_FOLD_B)) != 0) {
        fold();
        return;
    }
    uint t = gl_LocalInvocationID.x, o0 = gl_WorkGroupID.y * CT;
    if ((VARIANT & PW_BN) != 0) {
        if (t < CT && o0 + t < pc.co)
            bnk[t] = bn_consts(o0 + t);
        barrier(); // the loop below may not reach one (Ci = 0, no block for this group)
    }
    for (uint blk = gl_WorkGroupID.x; blk < pc.blocks; blk += gl_NumWorkGroups.x) {
        uint p = blk * 128u + t, xo = 0u, yo = 0u;
        bool live = p < pc.npos;
        if (live) {
            uint nb = p / pc.hw, r = p - nb * pc.hw, h = r / pc.wd, wc = r - h * pc.wd;
            xo = nb * pc.sx.x + h * pc.sx.z + wc * pc.sx.w;
            yo = nb * pc.sy.x + h * pc.sy.z + wc * pc.sy.w;
        }
        vec4 acc[8];
        [[unroll]] for (uint q = 0u; q < 8u; q++)
            acc[q] = vec4(0.0);
        for (uint c0 = 0u; c0 < pc.ci; c0 += CK) {
            uint cn = min(CK, pc.ci - c0);
            // x's first 8 channels are in flight while w is staged, the next 8 while
            // these are summed
            vec4 xa = load4(xo, c0, live), xb = load4(xo, c0 + 4u, live);
            barrier(); // every invocation is done with the previous chunk
            stage(o0, c0, cn);
            barrier();
            for (uint c = 0u; c < cn; c += 8u) {
                vec4 na = vec4(0.0), nb = vec4(0.0);
                if (c + 8u < cn) {
                    na = load4(xo, c0 + c + 8u, live);
                    nb = load4(xo, c0 + c + 12u, live);
                }
                [[unroll]] for (uint k = 0u; k < 8u; k++) {
                    float xv = k < 4u ? xa[k] : xb[k - 4u];
                    [[unroll]] for (uint q = 0u; q < CQ; q++)
                        acc[q] += ws[(c + k) * CQ + q] * xv;
                }
                xa = na;
                xb = nb;
            }
        }
        if (live)
            [[unroll]] for (uint o = 0u; o < CT; o++)
                if (o0 + o < pc.co) {
                    float s = acc[o / 4u][o % 4u];
                    if ((VARIANT & PW_BN) != 0) // BN_APPLY's x k.x + k.y
                        s = s * bnk[o].x + bnk[o].y;
                    stf(pc.y, yo + (o0 + o) * pc.sy.y, s);
                }
    }
}
