// The softmax family over the last dim: one workgroup per row (grid-stride over rows),
// row maxima and sums as fixed shared-memory trees. Cross-entropy and accuracy write one
// value per row (into scratch); the host then reduces them with reduce/reduce.comp.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "softmax/variants.h"

layout(local_size_x = 128) in;
layout(push_constant) uniform PC
{
    uint gate, d, a, b; // dst, x or y, dy or labels
    uint k, rows, node, sref;
    uvec4 ne, sd, sa, sb; // ne: the rows' shape with k last; sb.x: dloss ref (CE_BWD)
    uvec4 lne, lst;       // labels' own shape and strides
} pc;

shared float fs[128];
shared uint us[128];

uint row_off(uvec4 s, uint r)
{
    return (r / (pc.ne.y * pc.ne.z)) * s.x + ((r / pc.ne.z) % pc.ne.y) * s.y + (r % pc.ne.z) * s.z;
}

float tree(float v, bool is_max)
{
    uint lid = gl_LocalInvocationID.x;
    fs[lid] = v;
    barrier();
    for (uint s = 64u; s > 0u; s >>= 1) {
        if (lid < s)
            fs[lid] = is_max ? max_nan(fs[lid], fs[lid + s]) : fs[lid] + fs[lid + s];
        barrier();
    }
    float r = fs[0];
    barrier();
    return r;
}

float row_max(uint xo)
{
    float m = uintBitsToFloat(0xFF800000u);
    for (uint j = gl_LocalInvocationID.x; j < pc.k; j += 128u)
        m = max_nan(m, ldf(pc.a, xo + j * pc.sa.w));
    return tree(m, true);
}

float row_expsum(uint xo, float m)
{
    float s = 0.0;
    for (uint j = gl_LocalInvocationID.x; j < pc.k; j += 128u)
        s += exp(ldf(pc.a, xo + j * pc.sa.w) - m);
    return tree(s, false);
}

// The first index of the row's maximum; a number beats NaN.
bool better(float v, uint i, float bv, uint bi)
{
    bool bn = isnan(bv), vn = isnan(v);
    return (bn && !vn) || (!bn && !vn && (v > bv || (v == bv && i < bi))) || (bn && vn && i < bi);
}

uint row_argmax(uint xo)
{
    uint lid = gl_LocalInvocationID.x;
    float bv = ldf(pc.a, xo);
    uint bi = 0u;
    for (uint j = lid; j < pc.k; j += 128u) {
        float v = ldf(pc.a, xo + j * pc.sa.w);
        if (better(v, j, bv, bi)) {
            bv = v;
            bi = j;
        }
    }
    fs[lid] = bv;
    us[lid] = bi;
    barrier();
    for (uint s = 64u; s > 0u; s >>= 1) {
        if (lid < s && better(fs[lid + s], us[lid + s], fs[lid], us[lid])) {
            fs[lid] = fs[lid + s];
            us[lid] = us[lid + s];
        }
        barrier();
    }
    uint r = us[0];
    barrier();
    return r;
}

void main()
{
    GATE_RETURN();
    uint lid = gl_LocalInvocationID.x;
    for (uint r = gl_WorkGroupID.x; r < pc.rows; r += gl_NumWorkGroups.x) {
        uint xo = row_off(pc.sa, r), dof = row_off(pc.sd, r);
        if (VARIANT == SM_SOFTMAX || VARIANT == SM_LOG_SOFTMAX) {
            float m = row_max(xo), sum = row_expsum(xo, m), lse = log(sum);
            for (uint j = lid; j < pc.k; j += 128u) {
                float x = ldf(pc.a, xo + j * pc.sa.w);
                stf(pc.d, dof + j * pc.sd.w,
                    VARIANT == SM_SOFTMAX ? exp(x - m) / sum : x - m - lse);
            }
        } else if (VARIANT == SM_SOFTMAX_BWD || VARIANT == SM_LOG_SOFTMAX_BWD) {
            uint yo = xo, go = row_off(pc.sb, r);
            float acc = 0.0;
            for (uint j = lid; j < pc.k; j += 128u) {
                float g = ldf(pc.b, go + j * pc.sb.w);
                acc += VARIANT == SM_SOFTMAX_BWD ? g * ldf(pc.a, yo + j * pc.sa.w) : g;
            }
            acc = tree(acc, false);
            for (uint j = lid; j < pc.k; j += 128u) {
                float y = ldf(pc.a, yo + j * pc.sa.w), g = ldf(pc.b, go + j * pc.sb.w);
                stf(pc.d, dof + j * pc.sd.w,
                    VARIANT == SM_SOFTMAX_BWD ? y * (g - acc) : g - exp(y) * acc);
            }
        } else {
            int lab = ldiu(pc.b, off4(pc.lne, pc.lst, r));
            bool bad = lab < 0 || uint(lab) >= pc.k;
            if (bad && lid == 0u && VARIANT != SM_ACC_ROWS)
                report(pc.sref, 1u, pc.node, r, uint(lab));
            if (VARIANT == SM_ACC_ROWS) {
                uint am = row_argmax(xo);
                if (lid == 0u)
                    stf(pc.d, r, !bad && am == uint(lab) ? 1.0 : 0.0);
            } else if (VARIANT == SM_CE_ROWS) {
                float m = row_max(xo), sum = row_expsum(xo, m);
                if (lid == 0u)
                    stf(pc.d, r, bad ? 0.0 : log(sum) + m - ldf(pc.a, xo + uint(lab) * pc.sa.w));
            } else {
                float m = row_max(xo), sum = row_expsum(xo, m);
                float g = ldfu(pc.sb.x, 0u) / float(pc.rows);
                for (uint j = lid; j < pc.k; j += 128u) {
                    float p = exp(ldf(pc.a, xo + j * pc.sa.w) - m) / sum;
                    stf(pc.d, dof + j * pc.sd.w, (p - (int(j) == lab ? 1.0 : 0.0)) * g);
                }
            }
        }
    }
}
