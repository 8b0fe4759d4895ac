/* exapt — the metrics log: metrics.jsonl, one JSON object per line, written as a search or
 * a training runs so a viewer can follow it live or replay it. Every record and field is
 * specified in docs/metrics.md. Writer and parser use the same plain structs, whose
 * fixed-size arrays set the caps below; a line that exceeds a cap is malformed. */
#ifndef EXAPT_METRICS_H
#define EXAPT_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "exapt/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The log format's version, written in the header record. */
#define EX_METRICS_VERSION 1

#define EX_METRICS_MAX_EDGES 64       /**< edges of one cell in header and alphas */
#define EX_METRICS_MAX_CANDS 12       /**< candidates per edge */
#define EX_METRICS_MAX_RANKS 64       /**< data-parallel ranks whose step times a record holds */
#define EX_METRICS_MAX_OPS 128        /**< engine ops in a profile record */
#define EX_METRICS_MAX_PROF_CANDS 16  /**< candidate rows in a profile record */
#define EX_METRICS_NAME_MAX 32        /**< bytes of a candidate or op name, NUL included */
#define EX_METRICS_STR_MAX 128        /**< bytes of backend, device, mode and time strings */
#define EX_METRICS_CONFIG_MAX 8192    /**< bytes of the header's config object as JSON */
#define EX_METRICS_GENOTYPE_MAX 1024  /**< bytes of a genotype in text or JSON form */
#define EX_METRICS_LINE_MAX (1 << 20) /**< longest line the reader accepts, in bytes */

/** Record kinds, the "type" field of each line. */
typedef enum ex_metrics_kind {
    EX_METRICS_UNKNOWN = 0, /**< a well-formed record of a type this parser does not know */
    EX_METRICS_HEADER,      /**< "header": the first line */
    EX_METRICS_STEP,        /**< "step": one search or training step */
    EX_METRICS_EPOCH,       /**< "epoch": the end of an epoch */
    EX_METRICS_PROFILE,     /**< "profile": time and bandwidth by op and by candidate */
    EX_METRICS_GENOTYPE,    /**< "genotype": the genotype derived at an epoch's end */
} ex_metrics_kind;

/** "header": what ran, where, and the shape of the search space. */
typedef struct ex_metrics_header {
    int version;                        /**< parsed only; the writer writes 1 */
    char config[EX_METRICS_CONFIG_MAX]; /**< a JSON object as text ("" writes {}) */
    int n_candidates;                   /**< 0..EX_METRICS_MAX_CANDS */
    char candidates[EX_METRICS_MAX_CANDS][EX_METRICS_NAME_MAX];
    int n_edges;                        /**< 0..EX_METRICS_MAX_EDGES, one cell */
    int edges[EX_METRICS_MAX_EDGES][2]; /**< [node, input] of each edge, in order */
    char backend[EX_METRICS_STR_MAX];   /**< "cpu", "cuda", "vulkan" */
    char device[EX_METRICS_STR_MAX];    /**< the device's name */
    double peak_gbs;                    /**< measured peak copy bandwidth, GB/s */
    char mode[EX_METRICS_STR_MAX];      /**< "darts", "gdas", "topk", "train", ... */
    char time[EX_METRICS_STR_MAX];      /**< ISO-8601 UTC start; "" makes the writer
                                             write the current time */
} ex_metrics_header;

/** "step". Numbers that are not finite are written as null and read back as NaN. */
typedef struct ex_metrics_step {
    int64_t epoch, step, global_step; /**< step counts within the epoch; global_step does not */
    double lr;                        /**< weights' learning rate */
    double train_loss, train_acc;     /**< acc as a fraction in [0, 1] */
    bool has_valid;                   /**< valid_loss and valid_acc present */
    double valid_loss, valid_acc;
    double images_per_s, step_ms;
    bool has_tau;
    double tau;   /**< Gumbel-softmax temperature */
    bool skipped; /**< the step's loss or gradients were not finite and its update was
                       undone (written only when true; absent reads as false) */
    /** Shape of alphas and active, [n_edges x n_cands], both cells alike. */
    int n_edges, n_cands;
    bool has_alphas; /**< softmax weights of the normal and the reduction cell */
    float alpha_normal[EX_METRICS_MAX_EDGES][EX_METRICS_MAX_CANDS];
    float alpha_reduce[EX_METRICS_MAX_EDGES][EX_METRICS_MAX_CANDS];
    bool has_active; /**< which candidates were computed (1) or skipped (0) */
    uint8_t active_normal[EX_METRICS_MAX_EDGES][EX_METRICS_MAX_CANDS];
    uint8_t active_reduce[EX_METRICS_MAX_EDGES][EX_METRICS_MAX_CANDS];
    /* appended in 0.2.0 */
    int n_ranks; /**< data-parallel ranks in rank_step_ms (0: one process, none written;
                      at most EX_METRICS_MAX_RANKS, the first ones of a larger group) */
    double rank_step_ms[EX_METRICS_MAX_RANKS]; /**< each rank's wall time of the step, ms */
} ex_metrics_step;

/** "epoch". */
typedef struct ex_metrics_epoch {
    int64_t epoch;
    double train_loss, train_acc, valid_loss, valid_acc;
    double seconds;                         /**< wall time of the epoch */
    char genotype[EX_METRICS_GENOTYPE_MAX]; /**< text form; "" when none */
} ex_metrics_epoch;

typedef struct ex_metrics_prof_op {
    char op[EX_METRICS_NAME_MAX];
    double ms;     /**< total time of the op's nodes in the profiled step, milliseconds */
    double gbs;    /**< achieved bandwidth, GB/s (1e9 bytes per second) */
    int64_t calls; /**< nodes of this op */
} ex_metrics_prof_op;

typedef struct ex_metrics_prof_cand {
    char candidate[EX_METRICS_NAME_MAX];
    double ms, gbs;
} ex_metrics_prof_cand;

/** "profile". */
typedef struct ex_metrics_profile {
    int64_t global_step;
    int n_ops;
    ex_metrics_prof_op ops[EX_METRICS_MAX_OPS];
    int n_candidates;
    ex_metrics_prof_cand candidates[EX_METRICS_MAX_PROF_CANDS];
} ex_metrics_profile;

/** "genotype": both forms of ex_genotype_format() and ex_genotype_format_json(). */
typedef struct ex_metrics_genotype {
    int64_t epoch;
    char text[EX_METRICS_GENOTYPE_MAX];
    char json[EX_METRICS_GENOTYPE_MAX]; /**< a JSON object as text */
} ex_metrics_genotype;

/** One parsed line. `type` holds the record's type string (for unknown kinds too). */
typedef struct ex_metrics_record {
    ex_metrics_kind kind;
    char type[EX_METRICS_NAME_MAX];
    union {
        ex_metrics_header header;
        ex_metrics_step step;
        ex_metrics_epoch epoch;
        ex_metrics_profile profile;
        ex_metrics_genotype genotype;
    };
} ex_metrics_record;

/* ---- writer ---- */

/** A log open for appending. */
typedef struct ex_metrics_writer ex_metrics_writer;

/** Start a new log (truncating any old one), as resume_from_step of ex_metrics_open(). */
#define EX_METRICS_NEW (-1)

/** Opens path for writing. With resume_from_step EX_METRICS_NEW the log starts empty.
 *  With resume_from_step >= 0 the existing log is cut just before its first step or
 *  profile record whose global_step exceeds resume_from_step (and before an incomplete
 *  last line), the kept prefix replacing the file crash-safely, and new records follow
 *  it; a missing file starts empty. ex_metrics_needs_header() says whether the kept log
 *  lacks its header. */
ex_status ex_metrics_open(const char *path, int64_t resume_from_step, ex_metrics_writer **out,
                          char *msg, size_t msg_len);

/** Whether no header has been written yet: the next record must be the header. */
bool ex_metrics_needs_header(const ex_metrics_writer *w);

/** Append one record: each line is written whole with one write(2), so a reader never
 *  sees half a record unless the disk fills (then the partial line is cut off again).
 *  EX_ERR_STATE for a header that is not first or a record before the header, EX_ERR_ARG
 *  for out-of-range counts or strings that are not valid UTF-8 or JSON, EX_ERR_IO when
 *  writing fails. */
ex_status ex_metrics_write_header(ex_metrics_writer *w, const ex_metrics_header *h, char *msg,
                                  size_t msg_len);
ex_status ex_metrics_write_step(ex_metrics_writer *w, const ex_metrics_step *s, char *msg,
                                size_t msg_len);
ex_status ex_metrics_write_epoch(ex_metrics_writer *w, const ex_metrics_epoch *e, char *msg,
                                 size_t msg_len);
ex_status ex_metrics_write_profile(ex_metrics_writer *w, const ex_metrics_profile *p, char *msg,
                                   size_t msg_len);
ex_status ex_metrics_write_genotype(ex_metrics_writer *w, const ex_metrics_genotype *g, char *msg,
                                    size_t msg_len);

/** Forces the records written so far to disk (fsync). Records are not synced one by
 *  one: a crashed process loses nothing, a power cut may lose the last records. */
ex_status ex_metrics_sync(ex_metrics_writer *w, char *msg, size_t msg_len);

/** Syncs and closes the log. NULL is a no-op that returns EX_OK. */
ex_status ex_metrics_close(ex_metrics_writer *w, char *msg, size_t msg_len);

/* ---- parser ---- */

/** Parses one line (without its newline) into rec. EX_OK for a known record,
 *  EX_ERR_UNSUPPORTED for a well-formed object of an unknown type (rec->kind
 *  EX_METRICS_UNKNOWN, rec->type set) or a header of a newer version, EX_ERR_FORMAT for
 *  anything malformed or over a cap. msg says why. */
ex_status ex_metrics_parse_line(const char *line, size_t len, ex_metrics_record *rec, char *msg,
                                size_t msg_len);

/** What a read saw. */
typedef struct ex_metrics_stats {
    int64_t lines;          /**< complete lines read, blank ones included */
    int64_t records;        /**< records handed to the callback */
    int64_t unknown;        /**< well-formed records of unknown type, skipped */
    int64_t bad;            /**< malformed lines, skipped */
    int64_t first_bad_line; /**< 1-based line number of the first bad line, 0 if none */
    char first_bad_msg[256];
    bool truncated;     /**< the file ends in a line without a newline (ignored) */
    int64_t end_offset; /**< byte just after the last complete line: where a live
                             follower resumes */
} ex_metrics_stats;

/** Called with each record and its 1-based line number; return non-zero to stop. */
typedef int (*ex_metrics_callback)(const ex_metrics_record *rec, int64_t line, void *user);

/** Reads path from its start: every complete line is parsed and good records go to cb
 *  (may be NULL to just count). Empty files, an unterminated last line (a write in
 *  progress or cut short), unknown record types and malformed lines are tolerated and
 *  counted in *stats (may be NULL). EX_ERR_IO when the file cannot be read;
 *  EX_ERR_UNSUPPORTED when a header says a newer version. */
ex_status ex_metrics_read(const char *path, ex_metrics_callback cb, void *user,
                          ex_metrics_stats *stats, char *msg, size_t msg_len);

/** ex_metrics_read() starting at byte offset (a previous stats.end_offset), for following
 *  a growing log; line numbers then count from the offset. */
ex_status ex_metrics_read_from(const char *path, int64_t offset, ex_metrics_callback cb, void *user,
                               ex_metrics_stats *stats, char *msg, size_t msg_len);

#ifdef __cplusplus
}
#endif
#endif
