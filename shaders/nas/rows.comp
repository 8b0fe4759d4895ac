// The NAS row ops over [E, K] (all dims but the last are rows of K, an edge's
// candidates): one invocation per row (grid-stride), walking the row in index order as
// the CPU backend does, so sums need no tree: K is a candidate count, a few to a dozen.
// GUMBEL_SOFTMAX stages z in dst, which no source aliases.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "nas/variants.h"

layout(local_size_x = 128) in;
layout(push_constant) uniform PC
{
    uint gate, d, a, b;     // dst; x, y or p; dy
    uint k, rows, tau, ctr; // row length, rows; tau [1] and counter (i32) references
    uint cst, k0, k1, topk; // the counter's element-1 offset; Philox key; TOPK's k
    float thr;              // TOPK's threshold
    uint r0, r1, r2;
    uvec4 ne, sd, sa, sb; // the rows' padded shape (k last); strides of dst, a, b
} pc;

uint row_off(uvec4 s, uint r)
{
    return (r / (pc.ne.y * pc.ne.z)) * s.x + ((r / pc.ne.z) % pc.ne.y) * s.y + (r % pc.ne.z) * s.z;
}

// log(max(p, 1e-30)): a zero probability adds nothing instead of 0 * -inf.
float safe_log(float p) { return log(p > 1e-30 ? p : 1e-30); }

void gumbel(uint r, uint od, uint oa)
{
    uint c0 = ldu(pc.ctr, 0u), c1 = ldu(pc.ctr, pc.cst);
    float tau = ldfu(pc.tau, 0u), m = 0.0;
    for (uint j = 0u; j < pc.k; j++) {
        float u = philox_uniform(pc.k0, pc.k1, c0, c1, r * pc.k + j);
        u = min(max(u, 1e-10), 1.0 - 1e-7);
        float z = (ldf(pc.a, oa + j * pc.sa.w) - log(-log(u))) / tau;
        stf(pc.d, od + j * pc.sd.w, z);
        m = j == 0u || z > m ? z : m;
    }
    float sum = 0.0;
    for (uint j = 0u; j < pc.k; j++)
        sum += exp(ldf(pc.d, od + j * pc.sd.w) - m);
    for (uint j = 0u; j < pc.k; j++)
        stf(pc.d, od + j * pc.sd.w, exp(ldf(pc.d, od + j * pc.sd.w) - m) / sum);
}

void gumbel_bwd(uint od, uint oa, uint ob)
{
    float tau = ldfu(pc.tau, 0u), dot = 0.0;
    for (uint j = 0u; j < pc.k; j++)
        dot += ldf(pc.b, ob + j * pc.sb.w) * ldf(pc.a, oa + j * pc.sa.w);
    for (uint j = 0u; j < pc.k; j++) {
        float y = ldf(pc.a, oa + j * pc.sa.w);
        stf(pc.d, od + j * pc.sd.w, y * (ldf(pc.b, ob + j * pc.sb.w) - dot) / tau);
    }
}

// One-hot of the first maximum; a number beats NaN, a row of NaN gives 0.
void hardmax(uint od, uint oa)
{
    uint best = 0u;
    float bv = ldf(pc.a, oa);
    for (uint j = 1u; j < pc.k; j++) {
        float v = ldf(pc.a, oa + j * pc.sa.w);
        if (v > bv || (isnan(bv) && !isnan(v))) {
            best = j;
            bv = v;
        }
    }
    for (uint j = 0u; j < pc.k; j++)
        stf(pc.d, od + j * pc.sd.w, j == best ? 1.0 : 0.0);
}

void entropy(uint od, uint oa)
{
    float h = 0.0;
    for (uint j = 0u; j < pc.k; j++) {
        float p = ldf(pc.a, oa + j * pc.sa.w);
        h -= p * safe_log(p);
    }
    stf(pc.d, od, h);
}

void entropy_bwd(uint od, uint oa, uint ob)
{
    for (uint j = 0u; j < pc.k; j++) {
        float p = ldf(pc.a, oa + j * pc.sa.w);
        stf(pc.d, od + j * pc.sd.w, -ldf(pc.b, ob + j * pc.sb.w) * (safe_log(p) + 1.0));
    }
}

// Rank of j = how many entries beat it (larger, or equal at a lower index); NaN beats
// nothing and is never kept.
void topk(uint od, uint oa)
{
    for (uint j = 0u; j < pc.k; j++) {
        float v = ldf(pc.a, oa + j * pc.sa.w);
        uint rank = 0u;
        for (uint i = 0u; i < pc.k && rank < pc.topk; i++) {
            float w = ldf(pc.a, oa + i * pc.sa.w);
            rank += w > v || (w == v && i < j) ? 1u : 0u;
        }
        stf(pc.d, od + j * pc.sd.w, rank < pc.topk && v >= pc.thr ? 1.0 : 0.0);
    }
}

void main()
{
    GATE_RETURN();
    for (uint r = gl_GlobalInvocationID.x; r < pc.rows; r += gl_NumWorkGroups.x * 128u) {
        uint od = row_off(pc.sd, r), oa = row_off(pc.sa, r), ob = row_off(pc.sb, r);
        if (VARIANT == ROW_GUMBEL)
            gumbel(r, od, oa);
        else if (VARIANT == ROW_GUMBEL_BWD)
            gumbel_bwd(od, oa, ob);
        else if (VARIANT == ROW_HARDMAX)
            hardmax(od, oa);
        else if (VARIANT == ROW_ENTROPY)
            entropy(od, oa);
        else if (VARIANT == ROW_ENTROPY_BWD)
            entropy_bwd(od, oa, ob);
        else
            topk(od, oa);
    }
}
