// C[z][i][j] = sum_k A[z][i][k] B[z][k][j] (+ bias[j]): a 32x32 output tile per workgroup
// of 128 invocations (each 2x4 outputs), k in tiles of 16 through 4 KB of shared memory,
// summed in k order (deterministic). Index k of A and B is split into three levels
// (k2, k1, k0) and index j of B and C into two (j1, j0), each with its own stride, so
// the shader takes strided and batched products; MATMUL and LINEAR use it (the 1x1
// convolutions have pw.comp and wgrad.comp).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 128) in;
layout(push_constant) uniform PC
{
    uint gate, a, b, c;
    uint bias, bias_st, m, n;
    uint k, k1, k0, j0;         // sizes: K, and the inner level sizes of k and j
    uint a_i, a_k2, a_k1, a_k0; // A strides: row i, then the three levels of k
    uint b_k2, b_k1, b_k0, b_j1; // B strides: three levels of k, outer level of j
    uint b_j0, c_i, c_j1, c_j0;  // B inner j, C row and the two levels of j
    uint za, zb, zc, r0;         // batch strides (batch = workgroup z)
} pc;

shared float As[16][33];
shared float Bs[16][33];

uint koff(uint k, uint s2, uint s1, uint s0)
{
    return (k / (pc.k1 * pc.k0)) * s2 + ((k / pc.k0) % pc.k1) * s1 + (k % pc.k0) * s0;
}

uint joff(uint j, uint s1, uint s0) { return (j / pc.j0) * s1 + (j % pc.j0) * s0; }

void main()
{
    GATE_RETURN();
    uint t = gl_LocalInvocationID.x, ty = t / 8u, tx = t % 8u;
    uint i0 = gl_WorkGroupID.y * 32u, jt = gl_WorkGroupID.x * 32u, z = gl_WorkGroupID.z;
    uint abase = z * pc.za, bbase = z * pc.zb, cbase = z * pc.zc;
    float acc[2][4];
    for (int r = 0; r < 2; r++)
        for (int q = 0; q < 4; q++)
            acc[r][q] = 0.0;
    for (uint kt = 0u; kt < pc.k; kt += 16u) {
        for (uint e = t; e < 512u; e += 128u) {
            uint kk = e % 16u, ii = e / 16u; // A tile: 32 rows x 16 k
            uint gi = i0 + ii, gk = kt + kk;
            As[kk][ii] = gi < pc.m && gk < pc.k
                             ? ldf(pc.a, abase + gi * pc.a_i + koff(gk, pc.a_k2, pc.a_k1, pc.a_k0))
                             : 0.0;
            uint jj = e % 32u, kb = e / 32u; // B tile: 16 k x 32 cols
            uint gj = jt + jj, gk2 = kt + kb;
            Bs[kb][jj] = gj < pc.n && gk2 < pc.k
                             ? ldf(pc.b, bbase + koff(gk2, pc.b_k2, pc.b_k1, pc.b_k0) +
                                             joff(gj, pc.b_j1, pc.b_j0))
                             : 0.0;
        }
        barrier();
        for (uint kk = 0u; kk < 16u; kk++) {
            float av0 = As[kk][ty * 2u], av1 = As[kk][ty * 2u + 1u];
            for (uint q = 0u; q < 4u; q++) {
                float bv = Bs[kk][tx * 4u + q];
                acc[0][q] += av0 * bv;
                acc[1][q] += av1 * bv;
            }
        }
        barrier();
    }
    for (uint r = 0u; r < 2u; r++)
        for (uint q = 0u; q < 4u; q++) {
            uint gi = i0 + ty * 2u + r, gj = jt + tx * 4u + q;
            if (gi >= pc.m || gj >= pc.n)
                continue;
            float v = acc[r][q];
            if (pc.bias != NOREF)
                v += ldf(pc.bias, gj * pc.bias_st);
            stf(pc.c, cbase + gi * pc.c_i + joff(gj, pc.c_j1, pc.c_j0), v);
        }
}
