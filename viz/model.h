/* The viewer model's insides, shared by model.c, follow.c and the renderer. Callers hold
 * m->mu while reading them. */
#ifndef EXAPT_VIZ_MODEL_H
#define EXAPT_VIZ_MODEL_H

#include <pthread.h>

#include "exapt/viz.h"

#define VIZ_NOTES 6

/* One step record, reduced to what is plotted. snap: the α snapshot in force (-1: none). */
typedef struct viz_point {
    int64_t epoch, step, global_step;
    float v[EX_VIZ_SERIES_COUNT];
    float ips, tau;
    bool has_tau;
    int64_t snap;
} viz_point;

struct ex_viz_model {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t version;
    bool paused, finished;
    bool has_header;
    ex_metrics_header header;
    int config_epochs;   /* from the header's config, 0 when absent */
    bool per_epoch;      /* a training's log: its evaluation comes once an epoch (epoch
                            records), not with every step */
    char eval_label[16]; /* what the evaluation curve is: "valid", "test", "held-out" */
    viz_point *pts;
    int64_t n_pts, cap_pts;
    /* α snapshots: [n][2 cells][edges][cands], active masks alike, and whether each has one */
    int edges, cands;
    float *alpha;
    uint8_t *active;
    bool *has_active;
    int64_t *snap_step; /* global step of each snapshot */
    int64_t n_snap, cap_snap;
    ex_metrics_profile *prof; /* every profile, in order */
    int64_t n_prof, cap_prof;
    int64_t last_epoch; /* -1 before the first epoch record */
    char genotype[EX_METRICS_GENOTYPE_MAX];
    char notes[VIZ_NOTES][256];
    int n_notes, dropped_notes;
};

/* Index of the step record a view shows: its cursor clamped, or the latest; -1 if none. */
int64_t viz_model_cursor(const ex_viz_model *m, const ex_viz_view *v);

/* The latest profile at or before global step g, or NULL. */
const ex_metrics_profile *viz_model_profile_at(const ex_viz_model *m, int64_t g);

/* A note while holding m->mu. */
void viz_model_note_locked(ex_viz_model *m, const char *text);

/* Writes a message into msg (when there is room) and returns st: callers may pass NULL. */
ex_status viz_fail(ex_status st, char *msg, size_t msg_len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Copies into dst what a frame of view v draws, src locked by the caller: its scalars,
 * header, notes and genotype, every step record, and of the α snapshots and profiles only
 * those in view (dst's n_snap and n_prof are 0 or 1, and the viewed step record points at
 * snapshot 0). Drawing then holds no lock, so a live search adding a record waits for this
 * copy, not for a frame. dst (zeroed at first) keeps its arrays for the next copy; false
 * when out of memory. */
bool viz_model_copy_frame(ex_viz_model *dst, const ex_viz_model *src, const ex_viz_view *v);

/* Frees the arrays of a frame copy. */
void viz_model_free_frame(ex_viz_model *dst);

/* Removes a note that no longer holds (an empty log that got its first lines). */
void viz_model_drop_note(ex_viz_model *m, const char *text);

#endif
