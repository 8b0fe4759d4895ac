/* exapt — a network derived from a genotype (DARTS's NetworkCIFAR), trained from
 * scratch and saved for inference. */
#ifndef EXAPT_NETWORK_H
#define EXAPT_NETWORK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "exapt/backend.h"
#include "exapt/comm.h"
#include "exapt/data.h"
#include "exapt/genotype.h"
#include "exapt/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The derived network's configuration. ex_network_config_default() gives DARTS's
 *  evaluation settings for 32x32x3 inputs and 10 classes. */
typedef struct ex_network_config {
    size_t size; /**< sizeof(ex_network_config) where the caller was compiled (set by
                      ex_network_config_default(); fields added later take defaults) */
    int in_channels, height, width, classes;
    int batch;
    int eval_batch;      /**< images per ex_network_eval() call (0: batch) */
    int channels;        /**< C (36) */
    int layers;          /**< cells (20); reduction cells at 1/3 and 2/3 depth */
    int stem_multiplier; /**< 3 */
    bool auxiliary;      /**< auxiliary head after the second reduction cell */
    float aux_weight;    /**< weight of its loss (0.4) */
    float momentum, weight_decay, grad_clip; /**< SGD and gradient clipping */
    float label_smoothing; /**< the training loss's targets smoothed towards uniform
                                (ex_cross_entropy_smoothed; 0: off, DARTS) */
    uint64_t seed;
    /* appended in 0.2.0 */
    ex_normalize input;  /**< the per-channel normalization the training's inputs were given
                              (the loader's, ex_loader_opts_default()): saved with the weights
                              and applied by ex_network_classify(); ex_network_step, _eval and
                              _predict take inputs already normalized. Default: off */
    int eval_chunk;      /**< images one evaluation pass takes: ex_network_eval() and _predict()
                              run their eval_batch images in eval_batch / eval_chunk passes, which
                              give each image the logits one pass of eval_batch would. It must
                              divide eval_batch; 0 (default) lets the backend choose: on the CPU
                              the largest divisor of eval_batch up to two images per thread (each
                              pass's activations then stay in the cores' caches), elsewhere
                              eval_batch. ex_network_get_config() tells the choice */
    const ex_comm *comm; /**< data parallelism (NULL: alone): this process is one rank of the
                              group, and ex_network_step takes its batch / size images of each
                              batch (batch must divide by size). Every rank ends each step
                              with the same weights: the gradients are averaged over the
                              group and the batch norms take their statistics over the whole
                              batch (ex_ctx_set_ranks); drop-path masks are drawn per rank.
                              Evaluation stays local: each rank evaluates what it is given.
                              The struct must outlive the network. */
} ex_network_config;

/** Fills the first `size` bytes of c with DARTS's evaluation settings and sets c->size to
 *  size; nothing for a NULL c or a size below the size field's. Call it as
 *  ex_network_config_default(c), which passes the caller's sizeof. */
void ex_network_config_init(ex_network_config *c, size_t size);

/** Fills *c with DARTS's evaluation settings (a macro: sizeof *c as the caller was compiled). */
#define ex_network_config_default(c) ex_network_config_init((c), sizeof *(c))

/** A derived network planned on one backend. */
typedef struct ex_network ex_network;

/** Builds the network of genotype g, plans its training step and its evaluation pass on
 *  be, and initialises its weights from the seed. */
ex_status ex_network_new(const ex_genotype *g, const ex_network_config *c, ex_backend *be,
                         ex_network **out, char *msg, size_t msg_len);

/** Opens weights that ex_network_save(), ex_network_checkpoint() or ex_network_quantize()
 *  wrote (exapt 0.2.0 or later: the file records the genotype, the architecture and the
 *  input normalization) for inference on be, in f32, or in int8 for quantized weights:
 *  only the evaluation pass is planned, for `batch` images per ex_network_predict() or at
 *  most that many per ex_network_classify(). EX_ERR_IO when the file cannot be read,
 *  EX_ERR_FORMAT when it is not such a file or its tensors do not fit what it records,
 *  EX_ERR_ARG for a batch below 1; a message in msg. Training calls (ex_network_step,
 *  _set_drop_path, _checkpoint, saving with optimizer) fail with EX_ERR_STATE on such a
 *  network; so do saving, loading, exporting and quantizing an int8 one. */
ex_status ex_network_open(const char *path, ex_backend *be, int batch, ex_network **out, char *msg,
                          size_t msg_len);

/** Copies the network's configuration (for an opened network, what its file records, with
 *  eval_batch the batch it was opened for) into the caller's struct, as
 *  ex_network_config_default() sizes it. Nothing for a NULL argument. */
void ex_network_get_config(const ex_network *n, ex_network_config *c);

/** Classifies count images (1 <= count <= config.eval_batch) of pixels scaled to [0, 1],
 *  [count, in_channels, height, width] NCHW, as the training saw them: normalized as
 *  config.input says, batch norm in eval mode. Writes the softmax probabilities
 *  [count, classes] into probs. */
ex_status ex_network_classify(ex_network *n, const float *pixels, int count, float *probs);

/** Frees the network. NULL is a no-op. */
void ex_network_free(ex_network *n);

/** Sets the drop-path probability of the cells' operations (0 turns it off). The plan is
 *  rebuilt with the same weights and optimizer state. */
ex_status ex_network_set_drop_path(ex_network *n, float prob);

/** Figures of one training step. */
typedef struct ex_network_stats {
    float loss;     /**< the classifier's loss (the auxiliary loss not included) */
    float accuracy; /**< fraction correct */
    double step_ms;
} ex_network_stats;

/** One SGD step on a batch (NCHW f32, i32 labels) with learning rate lr (with config.comm:
 *  this rank's batch / size images; the loss and accuracy in st are the group's). */
ex_status ex_network_step(ex_network *n, const float *x, const int32_t *y, float lr,
                          ex_network_stats *st);

/** Mean loss and number correct on a batch of config.eval_batch images, batch norm in
 *  eval mode, no drop path. */
ex_status ex_network_eval(ex_network *n, const float *x, const int32_t *y, float *loss,
                          int *correct);

/** The logits [config.eval_batch, classes] of a batch of config.eval_batch images, batch
 *  norm in eval mode, no drop path: what ex_network_eval scores, for test-time
 *  augmentation or deployment. */
ex_status ex_network_predict(ex_network *n, const float *x, float *logits);

/** Saves the weights and batch-norm statistics as safetensors with the names of DARTS's
 *  PyTorch NetworkCIFAR (stem.0.weight, cells.0.preprocess0.op.1.weight, ...), atomically;
 *  with optimizer, the momentum buffers too (a checkpoint). The metadata records the
 *  genotype ("genotype", DARTS's text form) and the architecture and input normalization
 *  ("network", JSON: in_channels, height, width, classes, channels, layers,
 *  stem_multiplier, auxiliary, and mean and std when config.input is enabled), which
 *  ex_network_open() reads. */
ex_status ex_network_save(ex_network *n, const char *path, bool optimizer);

/** Saves a checkpoint: what ex_network_save(n, path, true) saves, and the caller's JSON
 *  document (e.g. where a training stands) under the metadata key "user" (NULL: none), all
 *  in one file replaced atomically, so weights and position cannot disagree after a crash.
 *  ex_safetensors_metadata(f, "user") reads the document back. */
ex_status ex_network_checkpoint(ex_network *n, const char *path, const char *user_json);

/** Loads what ex_network_save wrote for the same genotype and configuration; with
 *  optimizer (a checkpoint), the momentum buffers and the step count too. */
ex_status ex_network_load(ex_network *n, const char *path, bool optimizer);

/** Writes the network's evaluation pass as an ONNX model (opset 13, IR version 7) to path,
 *  replaced atomically: input "input" [N, in_channels, height, width] float32, normalized
 *  as config.input says (its mean and std are in the model's metadata, "input_mean" and
 *  "input_std", beside the "genotype"); output "logits" [N, classes]; the batch dimension
 *  N is free. Every batch norm is folded into the convolution before it (each follows
 *  one), in double; the auxiliary head is left out. */
ex_status ex_network_export_onnx(ex_network *n, const char *path);

/** Post-training int8 quantization: calibrates the activations' scales on count images
 *  of pixels scaled to [0, 1] (NCHW, normalized as the network's input says), quantizes
 *  the weights (every batch norm folded in) per output channel, and writes the int8
 *  weights to path (replaced atomically). ex_network_open() opens that file as an int8
 *  network: its evaluation pass runs the quantized ops (docs/deploy.md). EX_ERR_STATE for
 *  a network that is int8 already. */
ex_status ex_network_quantize(ex_network *n, const float *pixels, int64_t count, const char *path);

/** Number of trainable parameters. */
int64_t ex_network_param_count(const ex_network *n);

/** The message of the last failure. */
const char *ex_network_error(const ex_network *n);

/** The plan behind the network (for profiling). */
struct ex_plan *ex_network_plan(ex_network *n);

#ifdef __cplusplus
}
#endif
#endif
