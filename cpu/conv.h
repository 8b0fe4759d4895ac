/* What the CPU's dense (cpu/conv.c) and depthwise (cpu/dwconv.c) convolutions share: the
 * operands, the geometry, the checks of a node and the reference loops. */
#ifndef EXAPT_CPU_CONV_H
#define EXAPT_CPU_CONV_H

#include "cpu/cpu.h"

/** A 4-d f32 operand: element 0 and NCHW shape and strides. */
typedef struct conv_t4 {
    float *p;
    int64_t ne[4];
    int64_t st[4];
} conv_t4;

static inline conv_t4 conv_t4_of(const ex_tdesc *t)
{
    conv_t4 v;
    v.p = cpu_f32(t);
    ex_td_shape4(t, v.ne, v.st);
    return v;
}

static inline float *conv_plane(const conv_t4 *t, int64_t a, int64_t b)
{
    return t->p + a * t->st[0] + b * t->st[1];
}

/** The window of a convolution, decoded in core (core/tdesc.h). */
typedef ex_td_conv_geom conv_geom;

/** The three roles of one node's operands, and the fused ReLU's mask source (the
 *  data gradient's input x). */
typedef struct conv_ops {
    conv_geom g;
    conv_t4 x, w, y, mask;
} conv_ops;

/** The threads of a convolution's parallel loops (1 without OpenMP). */
int conv_threads(const cpu_exec *e);

/** The outputs o in [*lo, *hi) whose input o * s + off lies in [0, in): the part of a row
 *  that needs no bounds test. */
void conv_valid(int64_t off, int64_t s, int64_t in, int64_t out, int64_t *lo, int64_t *hi);

/** Checks node nd of a convolution pass (ex_td_conv_of) and reads its operands into o in
 *  their roles: x, w, y whichever is dst, and the fused ReLU's mask (the data gradient's
 *  x). name prefixes a refusal's message. */
ex_status conv_prepare(const cpu_exec *e, const ex_node_exec *nd, const char *name, conv_ops *o);

/** The reference passes: plain loop nests with double accumulators (mask: the fused
 *  ReLU's input x, read where g->relu). */
void conv_ref_fwd(const conv_geom *g, conv_t4 x, conv_t4 w, conv_t4 y);
void conv_ref_bwd_data(const conv_geom *g, conv_t4 dy, conv_t4 w, conv_t4 dx, const conv_t4 *mask);
void conv_ref_bwd_filter(const conv_geom *g, conv_t4 x, conv_t4 dy, conv_t4 dw);

#endif
