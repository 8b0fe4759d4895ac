/* The derived network's evaluation pass as a walk over its layers (DARTS's
 * model.NetworkCIFAR in evaluation mode: no auxiliary head, no drop path), every batch
 * norm folded into the convolution before it. An exporter or a builder gives the walk
 * its callbacks and gets one call per layer in evaluation order; the ONNX exporter and
 * the int8 network are two such walkers, so the structure is written once. */
#ifndef EXAPT_NAS_WALK_H
#define EXAPT_NAS_WALK_H

#include <stdbool.h>
#include <stdint.h>

#include "exapt/network.h"

/** A value of the walk: what the walker made for it (an ONNX name, a tensor) and its
 *  channel count. */
typedef struct nas_val {
    void *p;
    int64_t c;
} nas_val;

/** A convolution with the batch norm that follows it folded in. */
typedef struct nas_conv_desc {
    char weight[160]; /**< the weight's name ("cells.3._ops.2.op.2.weight") */
    char bn[160];     /**< the batch norm's prefix ("cells.3._ops.2.op.3"), "" for none */
    int64_t bn_channels, bn_first; /**< the batch norm's channels, the first this makes */
    int64_t cout, cin, kh, kw;
    int sh, sw, ph, pw, dil, group;
    /** the walk reads the value this makes only through the ReLU that follows, so a
     *  walker may make that ReLU's value here instead (both callbacks still come) */
    bool relu_only;
} nas_conv_desc;

/** The callbacks of a walk; each gets user first. */
typedef struct nas_walker {
    void *user;
    nas_val (*conv)(void *user, nas_val x, const nas_conv_desc *c);
    nas_val (*relu)(void *user, nas_val x);
    nas_val (*add)(void *user, nas_val a, nas_val b);
    nas_val (*concat)(void *user, int n, const nas_val *parts);
    /** x[:, :, 1:, 1:], FactorizedReduce's shifted input */
    nas_val (*shift)(void *user, nas_val x);
    /** 3x3 pooling, padding 1 (average: padding not counted) */
    nas_val (*pool)(void *user, nas_val x, bool max, int stride);
    /** global average pooling, flattening and the linear layer `classifier` */
    nas_val (*classifier)(void *user, nas_val x, int64_t classes);
    /** whether a callback failed: the walk stops */
    bool (*failed)(void *user);
} nas_walker;

/** Walks the network of genotype g and configuration c from the input x; returns the
 *  logits' value (x when it stopped early). */
nas_val nas_walk(const nas_walker *w, const ex_genotype *g, const ex_network_config *c, nas_val x);

/** The folded weights ([cout, cin / group, kh, kw]) and bias ([cout]) of c into new
 *  buffers: W' = W s, b' = beta - mean s, s = gamma / sqrt(var + eps), in double; bias 0
 *  without a batch norm. NULL with the network's error set when a tensor is missing or
 *  has the wrong size. */
ex_status nas_fold(ex_network *n, const nas_conv_desc *c, float **w, float **bias);

/** The values of the network's tensor called name, which must hold count of them; NULL
 *  with the network's error set otherwise. */
float *nas_weights(ex_network *n, const char *name, int64_t count);

#endif
