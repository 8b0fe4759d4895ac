/* exapt — differentiable architecture search: the supernet, its architecture
 * parameters and one search step (an architecture step, then a weight step) as one plan. */
#ifndef EXAPT_SEARCH_H
#define EXAPT_SEARCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "exapt/backend.h"
#include "exapt/comm.h"
#include "exapt/genotype.h"
#include "exapt/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/** How candidates are weighted and which are computed. */
typedef enum ex_search_mode {
    EX_SEARCH_DARTS, /**< softmax over all candidates (first or second order) */
    EX_SEARCH_GDAS,  /**< one hard Gumbel sample per edge per step; only it is computed */
    EX_SEARCH_TOPK,  /**< only candidates above a weight threshold, at most k, computed */
} ex_search_mode;

/** Constant name of a mode ("darts", "gdas", "topk"); ex_search_mode_parse() returns -1
 *  for an unknown name. */
const char *ex_search_mode_name(ex_search_mode m);
int ex_search_mode_parse(const char *name);

/** The search's configuration. ex_search_config_default() gives DARTS's search
 *  settings (Liu et al., 2019) for 32x32x3 inputs and 10 classes; fill a config with it,
 *  then change fields (it sets `size`, which lets the struct grow without breaking
 *  programs built against an older exapt: docs/library.md). */
typedef struct ex_search_config {
    size_t size; /**< sizeof(ex_search_config) where the caller was compiled (set by
                      ex_search_config_default(); the library reads that many bytes and
                      takes its defaults for fields added later) */
    int in_channels, height, width, classes;
    int batch;
    int eval_batch;      /**< images per ex_search_eval() call (0: batch, or batch / size with
                              a communicator: each rank evaluates its own images) */
    int channels;        /**< C of the first cells (16) */
    int layers;          /**< cells (8); reduction cells at 1/3 and 2/3 depth */
    int steps;           /**< intermediate nodes per cell (4) */
    int multiplier;      /**< nodes concatenated into a cell's output (4) */
    int stem_multiplier; /**< stem channels = stem_multiplier * channels (3) */
    int ncand;
    ex_cand cand[EX_MAX_CANDIDATES]; /**< the candidate operations, `none` included or not */
    ex_search_mode mode;
    int order; /**< 1: first-order DARTS; 2: the unrolled second-order step */
    float momentum, weight_decay, grad_clip;                  /**< weights: SGD, clip */
    float arch_lr, arch_beta1, arch_beta2, arch_weight_decay; /**< alpha: Adam */
    float tau_max, tau_min; /**< GDAS temperature, annealed linearly over the epochs */
    int topk_k;             /**< top-k: at most k candidates per edge */
    float topk_threshold;   /**< top-k: candidates below this softmax weight are pruned */
    float entropy_weight;   /**< weight of the mean row entropy of alpha added to the
                                 architecture loss (0: off) */
    int64_t arch_warmup;    /**< steps at the start in which alpha stays put (its learning
                                 rate is 0; Adam's moments still gather): the weights learn
                                 first, so untrained convolutions do not hand the edges to
                                 parameter-free operations (0: off) */
    int max_param_free;     /**< the collapse guard of ex_search_genotype(): at most this many
                                 parameter-free operations in the normal cell
                                 (ex_genotype_cap_param_free; -1: no cap, DARTS's rule) */
    int partial_channels;   /**< PC-DARTS's partial channel connections: a 1/k share of each
                                 edge's input channels goes through its candidates, the rest
                                 passes by, then the channels are shuffled; less memory and
                                 time per image, so larger batches (1: all channels, DARTS;
                                 k must divide channels) */
    uint64_t seed;
    int recompute;       /**< how much the backward passes recompute instead of keep
                              (ex_graph_set_recompute_level; the same results at every
                              level): 1, depthwise convolutions' outputs (a third less
                              memory); 2, also the batch norms' outputs of the pooling
                              candidates, the dilated convolutions and the separable
                              convolutions' first halves; 0, nothing; -1 (default): 1
                              where the backend says it is cheap (EX_FEAT_RECOMPUTE:
                              CUDA, 6 % more time for 38 % less memory), 0 on Vulkan (10 %
                              more time, its dispatches and barriers) and the CPU (14 %
                              more time) */
    int nonfinite_limit; /**< steps in a row whose loss or gradients are not finite that
                              are skipped (state kept) before ex_search_step fails with
                              EX_ERR_NONFINITE (3; 0: the first one fails) */
    const ex_comm *comm; /**< data parallelism (NULL: alone): this process is one rank of
                              the group, and ex_search_step takes its batch / size images
                              of each batch (batch must divide by size; order 1). Every
                              rank ends each step with the same weights and alpha: the
                              gradients are averaged over the group, and the training batch
                              norms take their statistics over the whole batch (ex_ctx_set_ranks).
                              The struct must outlive the search. */
    bool no_group;       /**< launch every node of the step on its own, no groups of
                              independent nodes (ex_plan_opts.no_group): for comparing */
} ex_search_config;

/** Fills the first `size` bytes of c with DARTS's search settings and sets c->size to size;
 *  nothing for a NULL c or a size below the size field's. Call it as
 *  ex_search_config_default(c), which passes the caller's sizeof: a newer library never
 *  writes past an older program's struct. */
void ex_search_config_init(ex_search_config *c, size_t size);

/** Fills *c with DARTS's search settings (a macro: sizeof *c as the caller was compiled). */
#define ex_search_config_default(c) ex_search_config_init((c), sizeof *(c))

/** Figures of one search step. */
typedef struct ex_search_stats {
    float train_loss, train_acc; /**< weight step: loss and fraction correct */
    float valid_loss, valid_acc; /**< architecture step, on the validation batch */
    double step_ms;
    bool skipped;      /**< a loss or a gradient norm was NaN or infinite: the step's update
                            was undone (weights, alpha, optimizer and batch-norm state are
                            bitwise those before it) */
    int nonfinite_run; /**< skipped steps in a row, this one included (0 after a good step) */
} ex_search_stats;

/** A supernet planned on one backend. */
typedef struct ex_search ex_search;

/** Builds the supernet and its step, plans it on be, and initialises weights (Kaiming
 *  uniform as PyTorch's defaults) and alpha (1e-3 N(0, 1)) from the seed. */
ex_status ex_search_new(const ex_search_config *c, ex_backend *be, ex_search **out, char *msg,
                        size_t msg_len);

/** Frees the search. NULL is a no-op. */
void ex_search_free(ex_search *s);

/** One search step: an architecture step on the validation batch, then a weight step on
 *  the training batch, each of config.batch images (NCHW f32) and i32 labels (with
 *  config.comm: this rank's batch / size of them; the figures in st are the group's). lr is the
 *  weights' learning rate for this step (the schedule is the caller's); tau the GDAS
 *  temperature (ignored otherwise).
 *  Non-finite values: when the training or validation loss, or the norm of the weights'
 *  or alpha's gradients, is NaN or infinite, the step is undone on the device (the state
 *  is bitwise that before it; the step count does not advance) and st->skipped is set;
 *  the call returns EX_OK until more than config.nonfinite_limit steps in a row were
 *  skipped, then EX_ERR_NONFINITE with a message (the state still the last good one).
 *  The check reads only the figures the step already returns: no extra host wait. */
ex_status ex_search_step(ex_search *s, const float *train_x, const int32_t *train_y,
                         const float *valid_x, const int32_t *valid_y, float lr, float tau,
                         ex_search_stats *st);

/** Evaluates the supernet on one batch of config.eval_batch images, batch norm in eval
 *  mode: mean loss and number correct. darts weighs every candidate by softmax(alpha),
 *  top-k the top-k candidates, gdas takes each edge's most likely one. */
ex_status ex_search_eval(ex_search *s, const float *x, const int32_t *y, float *loss, int *correct);

/** Number of edges of one cell: sum over steps of (2 + step). */
int ex_search_edges(const ex_search *s);

/** Copies the architecture weights, softmax(alpha) as [edges x ncand] row-major, of the
 *  normal and the reduction cells (either may be NULL). */
ex_status ex_search_weights(ex_search *s, float *normal, float *reduce);

/** Copies the raw architecture parameters alpha ([edges x ncand] row-major) of the
 *  normal and the reduction cells (either may be NULL). */
ex_status ex_search_alphas(ex_search *s, float *normal, float *reduce);

/** Copies the masks of the candidates computed in the last step ([edges x ncand], 1 or
 *  0; all ones in darts mode). */
ex_status ex_search_masks(ex_search *s, float *normal, float *reduce);

/** The genotype of the current alpha (top-2 non-`none` inputs of each node), with the
 *  normal cell's parameter-free operations capped at config.max_param_free. */
ex_status ex_search_genotype(ex_search *s, ex_genotype *g);

/** Saves every parameter, alpha, optimizer state and running statistic as safetensors
 *  (PyTorch-style names), atomically. */
ex_status ex_search_save(ex_search *s, const char *path, const char *metadata_json);

/** Loads what ex_search_save wrote for the same configuration. */
ex_status ex_search_load(ex_search *s, const char *path);

/** The message of the last failure. */
const char *ex_search_error(const ex_search *s);

/** Allocations the search has made since its creation (ex_ctx_alloc_count() of its
 *  context; 0 for NULL): the range a fault sweep covers (the tests inject faults through
 *  an internal entry point, nas/faults.h). */
uint64_t ex_search_alloc_count(const ex_search *s);

/** The plan behind the search (for profiling). */
struct ex_plan *ex_search_plan(ex_search *s);

/** Wall-clock milliseconds ex_search_new() spent by phase: building the step's graph
 *  (the supernet, both passes, their gradients and updates), planning it on the backend
 *  (memory, node list), and initialising the state (weights, α, optimizer states written
 *  to the device). What re-planning for another set of candidates would cost is the first
 *  two plus the backend's recording of the new step. */
typedef struct ex_search_setup {
    double build_ms, plan_ms, init_ms;
} ex_search_setup;

/** The setup times of s (all 0 for NULL). */
ex_search_setup ex_search_setup_times(const ex_search *s);

#ifdef __cplusplus
}
#endif
#endif
