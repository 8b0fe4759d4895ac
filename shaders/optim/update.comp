// exapt: writes 1 2 3
// SGD, Adam and CLIP: one invocation per parameter element, updating p (which is dst)
// and the optimizer states in place, with PyTorch's arithmetic in f32 as the CPU does.
// The clipped SGD variants scale g by CLIP's coefficient first (g itself stays as it is).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "optim/variants.h"

layout(local_size_x = 128) in;
layout(push_constant) uniform PC
{
    uint gate, p, g, m;
    uint v, sc, sc1, n;    // v: Adam's v, or a clipped SGD's norm; sc: lr, hyper {lr, t}
                           // (sc1: offset of t) or CLIP's norm
    float f0, f1, f2, f3;  // SGD: momentum, wd (clipped: f2 max_norm); Adam: beta1, beta2,
                           // eps, wd; CLIP: max_norm
    uvec4 ne, sp, sg, sm;  // p's shape; strides of p, g, m
    uvec4 sv;              // strides of v (Adam)
} pc;

// 1 − b^t to f32 rounding for b in (0, 1): the CPU takes it from pow() in double, and
// f32 pow/log near 1 are only good to an absolute 2^-21. ln b = ln(1 − d) and 1 − e^x
// come from their series while small (1 − b is exact for b ≥ 0.5).
float one_minus_pow(float b, float t)
{
    float d = 1.0 - b, lb = 0.0;
    if (d < 0.25) {
        float term = d;
        for (int k = 1; k <= 40; k++) {
            lb -= term / float(k);
            term *= d;
        }
    } else {
        lb = log(b);
    }
    float x = t * lb;
    if (x < -0.5)
        return 1.0 - exp(x);
    float sum = 0.0, term = x;
    for (int k = 1; k <= 20; k++) {
        sum -= term;
        term *= x / float(k + 1);
    }
    return sum;
}

// CLIP's coefficient min(1, max_norm / (norm + 1e-6)): one expression for CLIP and the
// clipped SGD.
float clip_coef(float max_norm, float norm)
{
    return min(1.0, max_norm / (norm + 1e-6));
}

void main()
{
    GATE_RETURN();
    float lr = ldfu(pc.sc, 0u);
    float bc1 = 1.0, bc2 = 1.0, clip = 1.0;
    if (VARIANT == OPT_ADAM) {
        float t = ldfu(pc.sc, pc.sc1);
        bc1 = one_minus_pow(pc.f0, t);
        bc2 = one_minus_pow(pc.f1, t);
    }
    bool clipped = VARIANT == OPT_SGD_CLIP || VARIANT == OPT_SGD_NESTEROV_CLIP;
    bool nesterov = VARIANT == OPT_SGD_NESTEROV || VARIANT == OPT_SGD_NESTEROV_CLIP;
    if (VARIANT == OPT_CLIP)
        clip = clip_coef(pc.f0, lr);
    if (clipped)
        clip = clip_coef(pc.f2, ldfu(pc.v, 0u));
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += gl_NumWorkGroups.x * 128u) {
        uvec4 c = coords4(pc.ne, i);
        uint op = dot4(c, pc.sp), og = dot4(c, pc.sg);
        if (VARIANT == OPT_CLIP) {
            stf(pc.p, op, ldf(pc.g, og) * clip);
            continue;
        }
        uint om = dot4(c, pc.sm);
        float p = ldf(pc.p, op);
        if (VARIANT == OPT_ADAM) {
            float g = ldf(pc.g, og) + pc.f3 * p;
            uint ov = dot4(c, pc.sv);
            float m = pc.f0 * ldf(pc.m, om) + (1.0 - pc.f0) * g;
            float v = pc.f1 * ldf(pc.v, ov) + (1.0 - pc.f1) * g * g;
            stf(pc.m, om, m);
            stf(pc.v, ov, v);
            stf(pc.p, op, p - lr * (m / bc1) / (sqrt(v / bc2) + pc.f2));
        } else {
            // the clipped gradient rounded on its own (precise: no fused multiply-add), as
            // CLIP stores it
            precise float gc = clipped ? ldf(pc.g, og) * clip : ldf(pc.g, og);
            float g = gc + pc.f1 * p;
            float m = pc.f0 * ldf(pc.m, om) + g;
            stf(pc.m, om, m);
            stf(pc.p, op, p - lr * (nesterov ? g + pc.f0 * m : m));
        }
    }
}
