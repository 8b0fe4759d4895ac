/* exapt — candidate operations and genotypes: the cell a search finds, in DARTS's
 * `Genotype(normal=[...], normal_concat=[...], reduce=[...], reduce_concat=[...])` form
 * and as JSON. See docs/genotype.md. */
#ifndef EXAPT_GENOTYPE_H
#define EXAPT_GENOTYPE_H

#include <stddef.h>

#include "exapt/ops.h"
#include "exapt/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Candidate operations of an edge: DARTS's eight, then NeuroExapt's two. */
typedef enum ex_cand {
    EX_CAND_NONE,
    EX_CAND_MAX_POOL_3X3,
    EX_CAND_AVG_POOL_3X3,
    EX_CAND_SKIP_CONNECT,
    EX_CAND_SEP_CONV_3X3,
    EX_CAND_SEP_CONV_5X5,
    EX_CAND_DIL_CONV_3X3,
    EX_CAND_DIL_CONV_5X5,
    EX_CAND_SEP_CONV_7X7,
    EX_CAND_CONV_7X1_1X7,
    EX_CAND_COUNT
} ex_cand;

/* EX_MAX_CANDIDATES (exapt/ops.h) bounds a search space: every ex_cand fits. */

/** DARTS's name of a candidate ("none", "max_pool_3x3", ..., "conv_7x1_1x7"); "?" when c
 *  is out of range. */
const char *ex_cand_name(ex_cand c);

/** The candidate called name, or -1 when the name is unknown (or NULL). */
int ex_cand_parse(const char *name);

/** 1 when candidate c has weights (the convolutions), 0 when it has none (`none`, the
 *  poolings, `skip_connect`) or is out of range. */
int ex_cand_is_parametric(ex_cand c);

/** Most intermediate nodes of a cell. */
#define EX_MAX_STEPS 8

/** One kept edge: operation op applied to state `input` (0 and 1: the cell's inputs,
 *  2 + j: intermediate node j). */
typedef struct ex_genotype_edge {
    ex_cand op;
    int input;
} ex_genotype_edge;

/** A cell pair. Node i (0 <= i < steps) sums edges [2i] and [2i+1], whose inputs lie in
 *  [0, 2 + i); ops are never `none`. The cell's output concatenates the states listed in
 *  *_concat (each in [0, 2 + steps), no repeats). */
typedef struct ex_genotype {
    int steps;
    ex_genotype_edge normal[2 * EX_MAX_STEPS], reduce[2 * EX_MAX_STEPS];
    int normal_concat[EX_MAX_STEPS + 2], n_normal_concat;
    int reduce_concat[EX_MAX_STEPS + 2], n_reduce_concat;
} ex_genotype;

/** Buffer size enough for ex_genotype_format() and ex_genotype_format_json() of any
 *  valid genotype, terminating NUL included. */
#define EX_GENOTYPE_TEXT_MAX 1024

/** Checks g as the parsers do. EX_ERR_ARG with a message when it is not valid. */
ex_status ex_genotype_validate(const ex_genotype *g, char *msg, size_t msg_len);

/** DARTS's `_parse` (Liu et al., model_search.py) on the architecture weights.
 *  w_normal and w_reduce are softmax weights [E x ncand] row-major, E = sum over
 *  i < steps of (2 + i), edges in DARTS's order (node i's edges take inputs 0..i+1 in
 *  turn). cands[k] names column k's candidate; a `none` column is never chosen. For node
 *  i, its edges are ranked by their largest non-`none` weight (descending; equal ones
 *  keep input order) and the first two kept, each with its largest non-`none` candidate
 *  (the first column on ties). Concat is 2 + steps - multiplier .. steps + 1. EX_ERR_ARG
 *  for bad sizes or a cands list without a non-`none` entry, EX_ERR_NONFINITE for a NaN
 *  or infinite weight. */
ex_status ex_genotype_derive(const float *w_normal, const float *w_reduce, int steps,
                             int multiplier, int ncand, const ex_cand *cands, ex_genotype *g,
                             char *msg, size_t msg_len);

/** The guard against DARTS's collapse to parameter-free cells, applied after
 *  ex_genotype_derive(): while g's normal cell keeps more than max_free parameter-free
 *  operations (poolings, skip_connect), the weakest of them (the smallest weight in
 *  w_normal, the later edge on ties) is replaced on its edge by that edge's strongest
 *  parametric candidate. The edges kept do not change. w_normal, ncand and cands are
 *  those given to ex_genotype_derive(). max_free < 0 leaves g as it is. EX_ERR_ARG when
 *  the arguments are bad or the search space has no parametric candidate to put in. */
ex_status ex_genotype_cap_param_free(ex_genotype *g, const float *w_normal, int ncand,
                                     const ex_cand *cands, int max_free, char *msg, size_t msg_len);

/** Prints g exactly as Python prints DARTS's namedtuple, concat ranges as lists:
 *  `Genotype(normal=[('sep_conv_3x3', 0), ...], normal_concat=[2, 3, 4, 5], reduce=[...],
 *  reduce_concat=[2, 3, 4, 5])`. EX_ERR_ARG when g is invalid or buf (len bytes) too
 *  small; EX_GENOTYPE_TEXT_MAX always suffices. */
ex_status ex_genotype_format(const ex_genotype *g, char *buf, size_t len);

/** Prints g as compact JSON: {"format":"exapt-genotype","version":1,"steps":4,
 *  "normal":[["sep_conv_3x3",0],...],"normal_concat":[2,3,4,5],"reduce":[...],
 *  "reduce_concat":[...]}. Same errors as ex_genotype_format(). */
ex_status ex_genotype_format_json(const ex_genotype *g, char *buf, size_t len);

/** Parses the Python form (as printed above, or as written in DARTS's genotypes.py):
 *  keywords in any order, `range(a, b)` or a list for concat, any whitespace, single or
 *  double quotes, trailing commas. EX_ERR_FORMAT with a message naming the problem and
 *  its byte offset. */
ex_status ex_genotype_parse_text(const char *s, size_t n, ex_genotype *g, char *msg,
                                 size_t msg_len);

/** Parses the JSON form; other keys are ignored. EX_ERR_FORMAT when malformed,
 *  EX_ERR_UNSUPPORTED for a version other than 1. */
ex_status ex_genotype_parse_json(const char *s, size_t n, ex_genotype *g, char *msg,
                                 size_t msg_len);

/** Parses either form: JSON when the first non-blank byte is '{'. */
ex_status ex_genotype_parse(const char *s, size_t n, ex_genotype *g, char *msg, size_t msg_len);

/** Reads a genotype file (at most 1 MiB) in either form. EX_ERR_IO when it cannot be
 *  read; messages name the file. */
ex_status ex_genotype_load(const char *path, ex_genotype *g, char *msg, size_t msg_len);

/** Writes g as JSON (plus a newline) or in the Python form, crash-safely: path.tmp is
 *  written, synced and renamed over path. */
ex_status ex_genotype_save_json(const char *path, const ex_genotype *g, char *msg, size_t msg_len);
ex_status ex_genotype_save_text(const char *path, const ex_genotype *g, char *msg, size_t msg_len);

/** A published genotype by name: "DARTS_V1" (first-order) or "DARTS_V2" (second-order)
 *  from the DARTS paper's genotypes.py; "DARTS" is DARTS_V2, as there. EX_ERR_ARG for an
 *  unknown name. */
ex_status ex_genotype_builtin(const char *name, ex_genotype *g);

/** The built-in names, NULL-terminated. */
const char *const *ex_genotype_builtin_names(void);

#ifdef __cplusplus
}
#endif
#endif
