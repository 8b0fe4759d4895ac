/* The viewer model: what a run has reported, reduced to what the panels draw. */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "viz/model.h"

ex_status viz_fail(ex_status st, char *msg, size_t msg_len, const char *fmt, ...)
{
    if (msg && msg_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, msg_len, fmt, ap);
        va_end(ap);
    }
    return st;
}

ex_status ex_viz_model_new(ex_viz_model **out, char *msg, size_t msg_len)
{
    if (!out)
        return viz_fail(EX_ERR_ARG, msg, msg_len, "viewer model: NULL out");
    *out = NULL;
    ex_viz_model *m = calloc(1, sizeof *m);
    if (!m || pthread_mutex_init(&m->mu, NULL)) {
        free(m);
        return viz_fail(EX_ERR_NOMEM, msg, msg_len, "viewer model: out of memory");
    }
    snprintf(m->eval_label, sizeof m->eval_label, "valid");
    if (pthread_cond_init(&m->cv, NULL)) {
        pthread_mutex_destroy(&m->mu);
        free(m);
        return viz_fail(EX_ERR_NOMEM, msg, msg_len,
                        "viewer model: cannot make a condition variable");
    }
    m->last_epoch = -1;
    *out = m;
    return EX_OK;
}

static void clear(ex_viz_model *m)
{
    free(m->pts);
    free(m->alpha);
    free(m->active);
    free(m->has_active);
    free(m->snap_step);
    free(m->prof);
    bool paused = m->paused;
    uint64_t version = m->version;
    pthread_mutex_t mu = m->mu;
    pthread_cond_t cv = m->cv;
    memset(m, 0, sizeof *m);
    m->mu = mu;
    m->cv = cv;
    m->paused = paused;
    m->version = version + 1;
    m->last_epoch = -1;
    snprintf(m->eval_label, sizeof m->eval_label, "valid");
}

void ex_viz_model_free(ex_viz_model *m)
{
    if (!m)
        return;
    clear(m);
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->cv);
    free(m);
}

void ex_viz_model_reset(ex_viz_model *m)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->mu);
    clear(m);
    pthread_mutex_unlock(&m->mu);
}

void viz_model_note_locked(ex_viz_model *m, const char *text)
{
    for (int i = 0; i < m->n_notes; i++)
        if (!strcmp(m->notes[i], text))
            return;
    if (m->n_notes == VIZ_NOTES) {
        m->dropped_notes++;
    } else {
        snprintf(m->notes[m->n_notes], sizeof m->notes[0], "%s", text);
        m->n_notes++;
    }
    m->version++;
}

void viz_model_drop_note(ex_viz_model *m, const char *text)
{
    pthread_mutex_lock(&m->mu);
    for (int i = 0; i < m->n_notes; i++)
        if (!strcmp(m->notes[i], text)) {
            memmove(m->notes[i], m->notes[i + 1],
                    (size_t)(m->n_notes - i - 1) * sizeof m->notes[0]);
            m->n_notes--;
            m->version++;
            break;
        }
    pthread_mutex_unlock(&m->mu);
}

void ex_viz_model_note(ex_viz_model *m, const char *text)
{
    if (!m || !text)
        return;
    pthread_mutex_lock(&m->mu);
    viz_model_note_locked(m, text);
    pthread_mutex_unlock(&m->mu);
}

/* Grows *p (of *cap elements of size sz) to hold n; false when out of memory. */
static bool grow(void **p, int64_t *cap, int64_t n, size_t sz)
{
    if (n <= *cap)
        return true;
    int64_t c = *cap ? *cap * 2 : 256;
    while (c < n)
        c *= 2;
    void *q = realloc(*p, (size_t)c * sz);
    if (!q)
        return false;
    *p = q;
    *cap = c;
    return true;
}

/* The epochs the logged run is to run: exapt search records them as config.search.epochs
 * (its config.train holds the found network's), exapt train and other tools as
 * config.epochs; 0 when neither is there. */
static int run_epochs(const json_t *cfg)
{
    const json_t *search = json_object_get(cfg, "search");
    const json_t *ep = json_object_get(json_is_object(search) ? search : cfg, "epochs");
    return json_is_integer(ep) ? (int)json_integer_value(ep) : 0;
}

static void add_header(ex_viz_model *m, const ex_metrics_header *h)
{
    if (m->has_header) {
        viz_model_note_locked(m, "a second header record was ignored");
        return;
    }
    m->header = *h;
    m->has_header = true;
    json_t *cfg = json_loads(h->config, 0, NULL);
    m->config_epochs = run_epochs(cfg);
    /* exapt train scores each epoch on the test split, or on held-out training images */
    m->per_epoch = !strcmp(h->mode, "train");
    const json_t *holdout = json_object_get(cfg, "holdout");
    snprintf(m->eval_label, sizeof m->eval_label, "%s",
             !m->per_epoch                                                 ? "valid"
             : json_is_integer(holdout) && json_integer_value(holdout) > 0 ? "held-out"
                                                                           : "test");
    json_decref(cfg);
}

/* Whether a step's α fits the header and the earlier snapshots; notes why not. */
static bool alpha_fits(ex_viz_model *m, const ex_metrics_step *s)
{
    char note[256];
    if (m->has_header &&
        (s->n_edges != m->header.n_edges || s->n_cands != m->header.n_candidates)) {
        snprintf(note, sizeof note,
                 "alpha of %d edges x %d candidates does not match the header's %d x %d; not shown",
                 s->n_edges, s->n_cands, m->header.n_edges, m->header.n_candidates);
        viz_model_note_locked(m, note);
        return false;
    }
    if (m->n_snap && (s->n_edges != m->edges || s->n_cands != m->cands)) {
        snprintf(note, sizeof note,
                 "alpha changes shape (%d x %d, then %d x %d); later ones not shown", m->edges,
                 m->cands, s->n_edges, s->n_cands);
        viz_model_note_locked(m, note);
        return false;
    }
    return s->n_edges > 0 && s->n_cands > 0;
}

static bool add_snapshot(ex_viz_model *m, const ex_metrics_step *s)
{
    int64_t n = m->n_snap + 1, cap = m->cap_snap;
    size_t per = 2 * (size_t)s->n_edges * (size_t)s->n_cands;
    int64_t c1 = cap, c2 = cap, c3 = cap, c4 = cap;
    if (!grow((void **)&m->alpha, &c1, n, per * sizeof(float)) ||
        !grow((void **)&m->active, &c2, n, per) ||
        !grow((void **)&m->has_active, &c3, n, sizeof(bool)) ||
        !grow((void **)&m->snap_step, &c4, n, sizeof(int64_t)))
        return false;
    m->cap_snap = c1;
    m->edges = s->n_edges;
    m->cands = s->n_cands;
    float *a = m->alpha + (size_t)m->n_snap * per;
    uint8_t *act = m->active + (size_t)m->n_snap * per;
    size_t half = per / 2;
    for (int e = 0; e < s->n_edges; e++)
        for (int k = 0; k < s->n_cands; k++) {
            size_t i = (size_t)e * (size_t)s->n_cands + (size_t)k;
            a[i] = s->alpha_normal[e][k];
            a[half + i] = s->alpha_reduce[e][k];
            act[i] = s->has_active ? s->active_normal[e][k] : 1;
            act[half + i] = s->has_active ? s->active_reduce[e][k] : 1;
        }
    m->has_active[m->n_snap] = s->has_active;
    m->snap_step[m->n_snap] = s->global_step;
    m->n_snap = n;
    return true;
}

static void add_step(ex_viz_model *m, const ex_metrics_step *s)
{
    if (s->has_alphas && alpha_fits(m, s) && !add_snapshot(m, s))
        viz_model_note_locked(m, "out of memory: alpha snapshots dropped");
    if (!grow((void **)&m->pts, &m->cap_pts, m->n_pts + 1, sizeof *m->pts)) {
        viz_model_note_locked(m, "out of memory: step records dropped");
        return;
    }
    viz_point *p = &m->pts[m->n_pts++];
    p->epoch = s->epoch;
    p->step = s->step;
    p->global_step = s->global_step;
    p->v[EX_VIZ_TRAIN_LOSS] = (float)s->train_loss;
    p->v[EX_VIZ_TRAIN_ACC] = (float)s->train_acc;
    p->v[EX_VIZ_VALID_LOSS] = s->has_valid ? (float)s->valid_loss : NAN;
    p->v[EX_VIZ_VALID_ACC] = s->has_valid ? (float)s->valid_acc : NAN;
    p->v[EX_VIZ_STEP_MS] = (float)s->step_ms;
    p->ips = (float)s->images_per_s;
    p->has_tau = s->has_tau;
    p->tau = (float)s->tau;
    p->snap = m->n_snap - 1;
}

static void add_profile(ex_viz_model *m, const ex_metrics_profile *p)
{
    if (!grow((void **)&m->prof, &m->cap_prof, m->n_prof + 1, sizeof *m->prof)) {
        viz_model_note_locked(m, "out of memory: profiles dropped");
        return;
    }
    m->prof[m->n_prof++] = *p;
}

/* Whether the counts of rec fit its arrays: a record built by the caller (not parsed from
 * a log, whose reader checks them) may claim more than it holds. */
static bool counts_fit(const ex_metrics_record *rec)
{
    switch (rec->kind) {
    case EX_METRICS_HEADER:
        return rec->header.n_edges >= 0 && rec->header.n_edges <= EX_METRICS_MAX_EDGES &&
               rec->header.n_candidates >= 0 && rec->header.n_candidates <= EX_METRICS_MAX_CANDS;
    case EX_METRICS_STEP:
        return !rec->step.has_alphas ||
               (rec->step.n_edges >= 0 && rec->step.n_edges <= EX_METRICS_MAX_EDGES &&
                rec->step.n_cands >= 0 && rec->step.n_cands <= EX_METRICS_MAX_CANDS);
    case EX_METRICS_PROFILE:
        return rec->profile.n_ops >= 0 && rec->profile.n_ops <= EX_METRICS_MAX_OPS &&
               rec->profile.n_candidates >= 0 &&
               rec->profile.n_candidates <= EX_METRICS_MAX_PROF_CANDS;
    default: return true;
    }
}

void ex_viz_model_add(ex_viz_model *m, const ex_metrics_record *rec)
{
    if (!m || !rec)
        return;
    pthread_mutex_lock(&m->mu);
    if (!counts_fit(rec)) {
        viz_model_note_locked(m, "a record whose counts exceed its arrays was ignored");
        pthread_mutex_unlock(&m->mu);
        return;
    }
    switch (rec->kind) {
    case EX_METRICS_HEADER: add_header(m, &rec->header); break;
    case EX_METRICS_STEP: add_step(m, &rec->step); break;
    case EX_METRICS_PROFILE: add_profile(m, &rec->profile); break;
    case EX_METRICS_EPOCH:
        m->last_epoch = rec->epoch.epoch;
        if (m->per_epoch && m->n_pts > 0) { /* the evaluation belongs to the epoch's last step */
            m->pts[m->n_pts - 1].v[EX_VIZ_VALID_LOSS] = (float)rec->epoch.valid_loss;
            m->pts[m->n_pts - 1].v[EX_VIZ_VALID_ACC] = (float)rec->epoch.valid_acc;
        }
        if (rec->epoch.genotype[0])
            snprintf(m->genotype, sizeof m->genotype, "%s", rec->epoch.genotype);
        if (m->config_epochs > 0 && rec->epoch.epoch + 1 >= m->config_epochs)
            m->finished = true;
        break;
    case EX_METRICS_GENOTYPE:
        snprintf(m->genotype, sizeof m->genotype, "%s", rec->genotype.text);
        break;
    case EX_METRICS_UNKNOWN: break;
    }
    m->version++;
    pthread_mutex_unlock(&m->mu);
}

/* A NULL model reads as empty (0, false). */
#define LOCKED_GET(type, expr)                                                                     \
    if (!m)                                                                                        \
        return (type)0;                                                                            \
    pthread_mutex_lock(&m->mu);                                                                    \
    type v_ = (expr);                                                                              \
    pthread_mutex_unlock(&m->mu);                                                                  \
    return v_

int64_t ex_viz_model_steps(ex_viz_model *m)
{
    LOCKED_GET(int64_t, m->n_pts);
}

int64_t ex_viz_model_snapshots(ex_viz_model *m)
{
    LOCKED_GET(int64_t, m->n_snap);
}

int ex_viz_model_notes(ex_viz_model *m)
{
    LOCKED_GET(int, m->n_notes);
}

uint64_t ex_viz_model_version(ex_viz_model *m)
{
    LOCKED_GET(uint64_t, m->version);
}

bool ex_viz_model_finished(ex_viz_model *m)
{
    LOCKED_GET(bool, m->finished);
}

bool ex_viz_model_paused(ex_viz_model *m)
{
    LOCKED_GET(bool, m->paused);
}

void ex_viz_model_note_text(ex_viz_model *m, int i, char *buf, size_t len)
{
    if (!buf || len == 0)
        return;
    if (!m) {
        buf[0] = '\0';
        return;
    }
    pthread_mutex_lock(&m->mu);
    snprintf(buf, len, "%s", i >= 0 && i < m->n_notes ? m->notes[i] : "");
    pthread_mutex_unlock(&m->mu);
}

void ex_viz_model_set_finished(ex_viz_model *m, bool finished)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->mu);
    m->finished = finished;
    m->version++;
    pthread_mutex_unlock(&m->mu);
}

void ex_viz_model_set_paused(ex_viz_model *m, bool paused)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->mu);
    m->paused = paused;
    m->version++;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
}

bool ex_viz_model_wait_paused(ex_viz_model *m, int timeout_ms)
{
    if (!m)
        return false;
    if (timeout_ms < 0)
        timeout_ms = 0;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&m->mu);
    while (m->paused)
        if (pthread_cond_timedwait(&m->cv, &m->mu, &until))
            break;
    bool paused = m->paused;
    pthread_mutex_unlock(&m->mu);
    return paused;
}

int64_t viz_model_cursor(const ex_viz_model *m, const ex_viz_view *v)
{
    if (m->n_pts == 0)
        return -1;
    if (v->cursor < 0 || v->cursor >= m->n_pts)
        return m->n_pts - 1;
    return v->cursor;
}

/* A buffer of n bytes in *p, grown when needed; false when out of memory. */
static bool resize(void **p, size_t n)
{
    void *q = realloc(*p, n ? n : 1);
    if (q)
        *p = q;
    return q != NULL;
}

bool viz_model_copy_frame(ex_viz_model *dst, const ex_viz_model *src, const ex_viz_view *v)
{
    ex_viz_model keep = *dst;
    /* the scalars and fixed-size arrays (the copy's mutex is never used); then dst's own
     * arrays are put back */
    *dst = *src;
    dst->pts = keep.pts;
    dst->cap_pts = keep.cap_pts;
    dst->alpha = keep.alpha;
    dst->active = keep.active;
    dst->has_active = keep.has_active;
    dst->snap_step = keep.snap_step;
    dst->prof = keep.prof;
    dst->n_pts = dst->n_snap = dst->n_prof = 0;
    int64_t c = viz_model_cursor(src, v), s = c < 0 ? src->n_snap - 1 : src->pts[c].snap;
    size_t per = 2 * (size_t)src->edges * (size_t)src->cands;
    if (!grow((void **)&dst->pts, &dst->cap_pts, src->n_pts, sizeof *dst->pts) ||
        !resize((void **)&dst->has_active, sizeof(bool)) ||
        !resize((void **)&dst->snap_step, sizeof(int64_t)) ||
        !resize((void **)&dst->prof, sizeof(ex_metrics_profile)) ||
        (s >= 0 && (!resize((void **)&dst->alpha, per * sizeof(float)) ||
                    !resize((void **)&dst->active, per))))
        return false;
    if (src->n_pts)
        memcpy(dst->pts, src->pts, (size_t)src->n_pts * sizeof *dst->pts);
    dst->n_pts = src->n_pts;
    if (s >= 0) {
        memcpy(dst->alpha, src->alpha + (size_t)s * per, per * sizeof(float));
        memcpy(dst->active, src->active + (size_t)s * per, per);
        dst->has_active[0] = src->has_active[s];
        dst->snap_step[0] = src->snap_step[s];
        dst->n_snap = 1;
    }
    if (c >= 0)
        dst->pts[c].snap = s >= 0 ? 0 : -1;
    const ex_metrics_profile *p =
        viz_model_profile_at(src, c >= 0 ? src->pts[c].global_step : INT64_MAX);
    if (p) {
        dst->prof[0] = *p;
        dst->n_prof = 1;
    }
    return true;
}

void viz_model_free_frame(ex_viz_model *dst)
{
    free(dst->pts);
    free(dst->alpha);
    free(dst->active);
    free(dst->has_active);
    free(dst->snap_step);
    free(dst->prof);
    memset(dst, 0, sizeof *dst);
}

const ex_metrics_profile *viz_model_profile_at(const ex_viz_model *m, int64_t g)
{
    const ex_metrics_profile *best = NULL;
    for (int64_t i = 0; i < m->n_prof; i++)
        if (m->prof[i].global_step <= g)
            best = &m->prof[i];
    return best;
}
