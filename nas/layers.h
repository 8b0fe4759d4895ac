/* Building blocks shared by the supernet and the derived network: a registry of named
 * parameters and states (PyTorch-style names), and the layers DARTS cells are made of.
 * A network may be built several times in one context (e.g. an architecture step and a
 * weight step): the first build registers parameters, later builds reuse them in the
 * same order, or substitutes (unrolled weights) when given. */
#ifndef EXAPT_NAS_LAYERS_H
#define EXAPT_NAS_LAYERS_H

#include <stdbool.h>
#include <stdint.h>

#include "exapt/exapt.h"
#include "exapt/genotype.h"

typedef enum nas_init {
    NAS_INIT_KAIMING, /* uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)): PyTorch's conv/linear */
    NAS_INIT_ONES,
    NAS_INIT_ZEROS,
    NAS_INIT_ALPHA, /* 1e-3 N(0, 1), as DARTS */
} nas_init;

typedef struct nas_param {
    ex_tensor *t;
    char name[160];
    nas_init init;
    int64_t fan_in;
    bool arch;
} nas_param;

typedef struct nas_state {
    ex_tensor *t;
    char name[160];
    float init;
} nas_state;

typedef struct nas_net {
    ex_ctx *ctx;
    nas_param *params;
    int nparams, cap_params;
    nas_state *states;
    int nstates, cap_states;
    bool built;              /* a first build has registered everything */
    int cursor, scursor;     /* next parameter / state while rebuilding */
    ex_tensor *const *subst; /* rebuild with these in place of the parameters (NULL: the
                                parameters themselves) */
    char prefix[112];
    int cell;   /* cell being built, for the nodes' tags */
    bool train; /* batch norm in training mode */
    float bn_eps, bn_momentum;
} nas_net;

void nas_net_init(nas_net *n, ex_ctx *ctx);
void nas_net_free(nas_net *n);
/** Starts another build of the same network (parameters reused in order). */
void nas_net_rebuild(nas_net *n, ex_tensor *const *subst);

/** Appends a name component; returns the old prefix length for nas_pop(). */
int nas_push(nas_net *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void nas_pop(nas_net *n, int len);

/** The parameter `prefix.name` (registered on the first build). */
ex_tensor *nas_weight(nas_net *n, const char *name, int ndim, const int64_t *ne, nas_init init,
                      int64_t fan_in);

/** Batch norm named `prefix.name` with running statistics; affine adds weight and bias. */
ex_tensor *nas_bn(nas_net *n, ex_tensor *x, const char *name, bool affine);
/** Convolution with a weight named `prefix.name.weight`. */
ex_tensor *nas_conv(nas_net *n, ex_tensor *x, const char *name, int64_t cout, int kh, int kw,
                    int sh, int sw, int ph, int pw, int dil);
/** Depthwise convolution (weight `prefix.name.weight`) of x, or with relu of max(x, 0): the
 *  ReLU that precedes it in DARTS's operations, fused (ex_dwconv2d_relu). */
ex_tensor *nas_dwconv(nas_net *n, ex_tensor *x, const char *name, int k, int stride, int pad,
                      int dil, bool relu);
/** Pointwise convolution (weight `prefix.name.weight`, [cout, cin, 1, 1] as PyTorch). */
ex_tensor *nas_pwconv(nas_net *n, ex_tensor *x, const char *name, int64_t cout);

/** Pointwise convolution (weight `prefix.pw.weight`), then batch norm (`prefix.bn`), of
 *  max(x, 0) with relu: in training two nodes (three with relu), in evaluation
 *  (n->train false) one fused ex_pwconv_bn with the same parameters. */
ex_tensor *nas_pwconv_bn(nas_net *n, ex_tensor *x, const char *pw, const char *bn, int64_t cout,
                         bool affine, bool relu);

/** DARTS's ReLUConvBN: ReLU, k x k convolution, batch norm (`op.1`, `op.2`). */
ex_tensor *nas_relu_conv_bn(nas_net *n, ex_tensor *x, int64_t cout, int k, int stride, int pad,
                            bool affine);
/** DARTS's FactorizedReduce: two 1x1 stride-2 convolutions, one shifted by a pixel,
 *  concatenated, then batch norm (`conv_1`, `conv_2`, `bn`). */
ex_tensor *nas_factorized_reduce(nas_net *n, ex_tensor *x, int64_t cout, bool affine);
/** One candidate operation of DARTS's space on x with C channels (NULL for `none`). */
ex_tensor *nas_candidate(nas_net *n, ex_cand op, ex_tensor *x, int stride, bool affine);
/** Concatenation along channels of n tensors of one shape but channels, without copies
 *  beyond writing each into its slice. */
ex_tensor *nas_concat(nas_net *n, int count, ex_tensor *const *parts);

/** SGD momentum buffers, one state tensor per parameter (named `<param>.momentum_buffer`
 *  as PyTorch's optimizer state), in a new array the caller frees; NULL (and the
 *  context's error set) when out of memory. */
ex_tensor **nas_net_momentum(nas_net *n);

/** Initial values of every parameter and state, drawn from seed, written into plan. */
ex_status nas_net_initialise(nas_net *n, ex_plan *plan, uint64_t seed);

#endif
