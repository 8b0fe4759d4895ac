/* The derived network in int8: post-training quantization (calibration and the file it
 * writes) and the int8 evaluation pass built from such a file. */
#ifndef EXAPT_NAS_QUANT_H
#define EXAPT_NAS_QUANT_H

#include <stddef.h>

#include "exapt/exapt.h"
#include "exapt/network.h"
#include "exapt/safetensors.h"

/** Bytes an int8 network's build leaves to write into its tensors once planned. */
typedef struct nas_qdata {
    ex_tensor *t;
    void *data;
    size_t bytes;
} nas_qdata;

/** What nas_quant_forward() built besides the graph. */
typedef struct nas_qbuild {
    nas_qdata *d;
    int n, cap;
} nas_qbuild;

/** Builds the int8 evaluation pass that the quantized weights f record for genotype g and
 *  configuration c, on x (f32 images, normalized); returns the f32 logits, or the inert
 *  tensor with the context's error set (EX_ERR_FORMAT for a file that does not fit). */
ex_tensor *nas_quant_forward(ex_ctx *ctx, const ex_safetensors *f, const ex_genotype *g,
                             const ex_network_config *c, ex_tensor *x, nas_qbuild *out);

/** Writes what the build left into the plan's tensors. */
ex_status nas_qbuild_write(const nas_qbuild *b, ex_plan *plan);

/** Frees what the build left (not the tensors). */
void nas_qbuild_free(nas_qbuild *b);

/** The `quantization` metadata of an int8 weights file (absent in f32 ones). */
#define NAS_QUANT_META "quantization"

#endif
