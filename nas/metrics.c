/* The metrics log (docs/metrics.md): a writer that appends whole lines, a resume rule that
 * cuts a log back to a checkpoint's step crash-safely, and a parser that treats every line
 * as untrusted, checking each field's type and every count against its cap. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/fileio.h"
#include "exapt/metrics.h"

/* Reals keep 9 significant digits: float32 values round-trip exactly, lines stay short. */
#define DUMP_FLAGS (JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9))

struct ex_metrics_writer {
    int fd;
    char *path;
    bool has_header;
};

/* ------------------------------------------------------------------ line reader */

/* Splits a file into lines without trusting their length: a line over the cap is consumed
 * but only flagged, so a hostile file cannot make the reader allocate without bound. */
typedef struct lreader {
    int fd;
    char in[1 << 16];
    size_t in_pos, in_len;
    char *line;
    size_t line_len, line_cap;
    bool too_long, terminated;
    int64_t offset; /* bytes consumed */
} lreader;

static bool lr_append(lreader *r, const char *p, size_t n)
{
    if (r->too_long || r->line_len + n > EX_METRICS_LINE_MAX) {
        r->too_long = true;
        return true;
    }
    if (r->line_len + n + 1 > r->line_cap) {
        size_t cap = r->line_cap ? r->line_cap : 4096;
        while (cap < r->line_len + n + 1)
            cap *= 2;
        char *nl = realloc(r->line, cap);
        if (!nl)
            return false;
        r->line = nl;
        r->line_cap = cap;
    }
    memcpy(r->line + r->line_len, p, n);
    r->line_len += n;
    r->line[r->line_len] = 0;
    return true;
}

/* 1: a line (r->terminated says whether it ended in '\n'); 0: end of file; -1: a read
 * error (errno set); -2: out of memory. */
static int lr_next(lreader *r)
{
    r->line_len = 0;
    r->too_long = r->terminated = false;
    bool any = false;
    for (;;) {
        if (r->in_pos == r->in_len) {
            ssize_t got = read(r->fd, r->in, sizeof r->in);
            if (got < 0 && errno == EINTR)
                continue;
            if (got < 0)
                return -1;
            if (got == 0)
                return any ? 1 : 0;
            r->in_pos = 0;
            r->in_len = (size_t)got;
        }
        const char *start = r->in + r->in_pos;
        const char *nl = memchr(start, '\n', r->in_len - r->in_pos);
        size_t n = nl ? (size_t)(nl - start) : r->in_len - r->in_pos;
        any = true;
        if (!lr_append(r, start, n))
            return -2;
        r->in_pos += n + (nl ? 1 : 0);
        r->offset += (int64_t)(n + (nl ? 1 : 0));
        if (nl) {
            r->terminated = true;
            return 1;
        }
    }
}

static void lr_free(lreader *r)
{
    if (r->fd >= 0)
        close(r->fd);
    free(r->line);
}

/* ------------------------------------------------------------------ JSON building */

/* Collects the first failure while a record is built, so builders need no checks. */
typedef struct jb {
    ex_status st;
    char *msg;
    size_t len;
    const char *rec;
} jb;

static void jb_set(jb *b, json_t *o, const char *key, json_t *v)
{
    if (b->st != EX_OK) {
        json_decref(v);
        return;
    }
    if (!v || json_object_set_new(o, key, v) != 0)
        b->st = ex__msg(b->msg, b->len, EX_ERR_NOMEM, "metrics %s: out of memory building \"%s\"",
                        b->rec, key);
}

static void jb_append(jb *b, json_t *a, json_t *v)
{
    if (b->st != EX_OK) {
        json_decref(v);
        return;
    }
    if (!v || json_array_append_new(a, v) != 0)
        b->st = ex__msg(b->msg, b->len, EX_ERR_NOMEM, "metrics %s: out of memory", b->rec);
}

static json_t *num(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

/* A string from a fixed-size field: it must end within its array and be UTF-8. */
static json_t *jb_str(jb *b, const char *field, const char *s, size_t cap)
{
    if (b->st != EX_OK)
        return NULL;
    json_t *v = memchr(s, 0, cap) ? json_string(s) : NULL;
    if (!v)
        b->st = ex__msg(b->msg, b->len, EX_ERR_ARG,
                        "metrics %s: \"%s\" is not a NUL-terminated UTF-8 string", b->rec, field);
    return v;
}

/* An embedded object given as JSON text ("" for an empty object when allowed). */
static json_t *jb_object_text(jb *b, const char *field, const char *s, size_t cap, bool empty_ok)
{
    if (b->st != EX_OK)
        return NULL;
    if (!memchr(s, 0, cap)) {
        b->st = ex__msg(b->msg, b->len, EX_ERR_ARG, "metrics %s: \"%s\" is not NUL-terminated",
                        b->rec, field);
        return NULL;
    }
    if (!s[0] && empty_ok)
        return json_object();
    json_error_t err;
    json_t *v = json_loads(s, JSON_REJECT_DUPLICATES, &err);
    if (!json_is_object(v)) {
        json_decref(v);
        b->st = ex__msg(b->msg, b->len, EX_ERR_ARG, "metrics %s: \"%s\" is not a JSON object",
                        b->rec, field);
        return NULL;
    }
    return v;
}

static void jb_count(jb *b, const char *field, int n, int cap)
{
    if (b->st == EX_OK && (n < 0 || n > cap))
        b->st = ex__msg(b->msg, b->len, EX_ERR_ARG, "metrics %s: %s is %d (valid: 0..%d)", b->rec,
                        field, n, cap);
}

/* ------------------------------------------------------------------ writer */

static ex_status write_line(ex_metrics_writer *w, json_t *j, char *msg, size_t len)
{
    char *text = json_dumps(j, DUMP_FLAGS);
    if (!text)
        return ex__msg(msg, len, EX_ERR_NOMEM, "%s: out of memory serializing a record", w->path);
    size_t n = strlen(text);
    char *line = realloc(text, n + 2);
    if (!line) {
        free(text);
        return ex__msg(msg, len, EX_ERR_NOMEM, "%s: out of memory", w->path);
    }
    line[n++] = '\n';
    struct stat sb;
    off_t before = fstat(w->fd, &sb) == 0 ? sb.st_size : -1;
    size_t done = 0;
    while (done < n) {
        ssize_t r = write(w->fd, line + done, n - done);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        done += (size_t)r;
    }
    int e = errno;
    free(line);
    if (done == n)
        return EX_OK;
    /* A torn line would glue itself to the next record; cut it off again. */
    if (before >= 0 && done > 0)
        (void)ftruncate(w->fd, before);
    return ex__msg(msg, len, EX_ERR_IO, "%s: cannot append a record: %s", w->path,
                   done ? "short write" : strerror(e));
}

static ex_status emit(ex_metrics_writer *w, json_t *j, jb *b, char *msg, size_t len)
{
    ex_status st = b->st;
    if (st == EX_OK && !j)
        st = ex__msg(msg, len, EX_ERR_NOMEM, "metrics %s: out of memory", b->rec);
    if (st == EX_OK)
        st = write_line(w, j, msg, len);
    json_decref(j);
    return st;
}

/* A record of type rec, once the header rule allows it. */
static json_t *begin(ex_metrics_writer *w, const void *what, jb *b, const char *rec, char *msg,
                     size_t len)
{
    *b = (jb){EX_OK, msg, len, rec};
    ex__msg(msg, len, EX_OK, "%s", "");
    if (!w || !what) {
        b->st = ex__msg(msg, len, EX_ERR_ARG, "metrics %s: NULL argument", rec);
        return NULL;
    }
    bool is_header = strcmp(rec, "header") == 0;
    if (is_header == w->has_header) {
        b->st = ex__msg(msg, len, EX_ERR_STATE, "%s: %s", w->path,
                        is_header ? "the header must be the first record and written once"
                                  : "the first record must be the header");
        return NULL;
    }
    json_t *j = json_object();
    jb_set(b, j, "type", json_string(rec));
    return j;
}

static json_t *str_array(jb *b, const char (*names)[EX_METRICS_NAME_MAX], int n)
{
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++)
        jb_append(b, a, jb_str(b, "candidates", names[i], EX_METRICS_NAME_MAX));
    return a;
}

static json_t *edge_array(jb *b, const int (*edges)[2], int n)
{
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++)
        jb_append(b, a, json_pack("[ii]", edges[i][0], edges[i][1]));
    return a;
}

static void now_iso8601(char *buf, size_t len)
{
    time_t t = time(NULL);
    struct tm tm;
    if (t == (time_t)-1 || !gmtime_r(&t, &tm) || !strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm))
        snprintf(buf, len, "1970-01-01T00:00:00Z");
}

ex_status ex_metrics_write_header(ex_metrics_writer *w, const ex_metrics_header *h, char *msg,
                                  size_t msg_len)
{
    jb b;
    json_t *j = begin(w, h, &b, "header", msg, msg_len);
    if (!j)
        return b.st != EX_OK ? b.st : EX_ERR_NOMEM;
    jb_count(&b, "n_candidates", h->n_candidates, EX_METRICS_MAX_CANDS);
    jb_count(&b, "n_edges", h->n_edges, EX_METRICS_MAX_EDGES);
    char now[EX_METRICS_STR_MAX];
    now_iso8601(now, sizeof now);
    const char *when = memchr(h->time, 0, sizeof h->time) && !h->time[0] ? now : h->time;
    jb_set(&b, j, "format", json_string("exapt-metrics"));
    jb_set(&b, j, "version", json_integer(EX_METRICS_VERSION));
    jb_set(&b, j, "config", jb_object_text(&b, "config", h->config, sizeof h->config, true));
    if (b.st == EX_OK) {
        jb_set(&b, j, "candidates", str_array(&b, h->candidates, h->n_candidates));
        jb_set(&b, j, "edges", edge_array(&b, h->edges, h->n_edges));
    }
    jb_set(&b, j, "backend", jb_str(&b, "backend", h->backend, sizeof h->backend));
    jb_set(&b, j, "device", jb_str(&b, "device", h->device, sizeof h->device));
    jb_set(&b, j, "peak_gbs", num(h->peak_gbs));
    jb_set(&b, j, "mode", jb_str(&b, "mode", h->mode, sizeof h->mode));
    jb_set(&b, j, "time", jb_str(&b, "time", when, sizeof h->time));
    ex_status st = emit(w, j, &b, msg, msg_len);
    if (st == EX_OK)
        w->has_header = true;
    return st;
}

static json_t *float_matrix(jb *b, const float (*m)[EX_METRICS_MAX_CANDS], int rows, int cols)
{
    json_t *a = json_array();
    for (int r = 0; a && r < rows; r++) {
        json_t *row = json_array();
        for (int c = 0; row && c < cols; c++)
            jb_append(b, row, num(m[r][c]));
        jb_append(b, a, row);
    }
    return a;
}

static json_t *mask_matrix(jb *b, const uint8_t (*m)[EX_METRICS_MAX_CANDS], int rows, int cols)
{
    json_t *a = json_array();
    for (int r = 0; a && r < rows; r++) {
        json_t *row = json_array();
        for (int c = 0; row && c < cols; c++)
            jb_append(b, row, json_integer(m[r][c] ? 1 : 0));
        jb_append(b, a, row);
    }
    return a;
}

static json_t *cell_pair(jb *b, json_t *normal, json_t *reduce)
{
    json_t *o = json_object();
    jb_set(b, o, "normal", normal);
    jb_set(b, o, "reduce", reduce);
    return o;
}

static void step_cells(jb *b, json_t *j, const ex_metrics_step *s)
{
    if (s->has_alphas || s->has_active) {
        jb_count(b, "n_edges", s->n_edges, EX_METRICS_MAX_EDGES);
        jb_count(b, "n_cands", s->n_cands, EX_METRICS_MAX_CANDS);
    }
    if (b->st != EX_OK)
        return;
    if (s->has_alphas)
        jb_set(b, j, "alphas",
               cell_pair(b, float_matrix(b, s->alpha_normal, s->n_edges, s->n_cands),
                         float_matrix(b, s->alpha_reduce, s->n_edges, s->n_cands)));
    if (s->has_active)
        jb_set(b, j, "active",
               cell_pair(b, mask_matrix(b, s->active_normal, s->n_edges, s->n_cands),
                         mask_matrix(b, s->active_reduce, s->n_edges, s->n_cands)));
}

ex_status ex_metrics_write_step(ex_metrics_writer *w, const ex_metrics_step *s, char *msg,
                                size_t msg_len)
{
    jb b;
    json_t *j = begin(w, s, &b, "step", msg, msg_len);
    if (!j)
        return b.st != EX_OK ? b.st : EX_ERR_NOMEM;
    jb_set(&b, j, "epoch", json_integer(s->epoch));
    jb_set(&b, j, "step", json_integer(s->step));
    jb_set(&b, j, "global_step", json_integer(s->global_step));
    jb_set(&b, j, "lr", num(s->lr));
    jb_set(&b, j, "train_loss", num(s->train_loss));
    jb_set(&b, j, "train_acc", num(s->train_acc));
    if (s->has_valid) {
        jb_set(&b, j, "valid_loss", num(s->valid_loss));
        jb_set(&b, j, "valid_acc", num(s->valid_acc));
    }
    jb_set(&b, j, "images_per_s", num(s->images_per_s));
    jb_set(&b, j, "step_ms", num(s->step_ms));
    if (s->has_tau)
        jb_set(&b, j, "tau", num(s->tau));
    if (s->skipped)
        jb_set(&b, j, "skipped", json_true());
    if (s->n_ranks > 0) {
        json_t *a = json_array();
        for (int r = 0; a && r < s->n_ranks && r < EX_METRICS_MAX_RANKS; r++)
            if (json_array_append_new(a, num(s->rank_step_ms[r])) != 0) {
                json_decref(a);
                a = NULL; /* jb_set reports the lack of memory */
            }
        jb_set(&b, j, "rank_step_ms", a);
    }
    step_cells(&b, j, s);
    return emit(w, j, &b, msg, msg_len);
}

ex_status ex_metrics_write_epoch(ex_metrics_writer *w, const ex_metrics_epoch *e, char *msg,
                                 size_t msg_len)
{
    jb b;
    json_t *j = begin(w, e, &b, "epoch", msg, msg_len);
    if (!j)
        return b.st != EX_OK ? b.st : EX_ERR_NOMEM;
    jb_set(&b, j, "epoch", json_integer(e->epoch));
    jb_set(&b, j, "train_loss", num(e->train_loss));
    jb_set(&b, j, "train_acc", num(e->train_acc));
    jb_set(&b, j, "valid_loss", num(e->valid_loss));
    jb_set(&b, j, "valid_acc", num(e->valid_acc));
    jb_set(&b, j, "seconds", num(e->seconds));
    if (!memchr(e->genotype, 0, sizeof e->genotype) || e->genotype[0])
        jb_set(&b, j, "genotype", jb_str(&b, "genotype", e->genotype, sizeof e->genotype));
    return emit(w, j, &b, msg, msg_len);
}

ex_status ex_metrics_write_profile(ex_metrics_writer *w, const ex_metrics_profile *p, char *msg,
                                   size_t msg_len)
{
    jb b;
    json_t *j = begin(w, p, &b, "profile", msg, msg_len);
    if (!j)
        return b.st != EX_OK ? b.st : EX_ERR_NOMEM;
    jb_count(&b, "n_ops", p->n_ops, EX_METRICS_MAX_OPS);
    jb_count(&b, "n_candidates", p->n_candidates, EX_METRICS_MAX_PROF_CANDS);
    jb_set(&b, j, "global_step", json_integer(p->global_step));
    json_t *ops = json_array(), *cands = json_array();
    for (int i = 0; b.st == EX_OK && ops && i < p->n_ops; i++) {
        const ex_metrics_prof_op *o = &p->ops[i];
        json_t *x = json_object();
        jb_set(&b, x, "op", jb_str(&b, "op", o->op, sizeof o->op));
        jb_set(&b, x, "ms", num(o->ms));
        jb_set(&b, x, "gbs", num(o->gbs));
        jb_set(&b, x, "calls", json_integer(o->calls));
        jb_append(&b, ops, x);
    }
    for (int i = 0; b.st == EX_OK && cands && i < p->n_candidates; i++) {
        const ex_metrics_prof_cand *c = &p->candidates[i];
        json_t *x = json_object();
        jb_set(&b, x, "candidate", jb_str(&b, "candidate", c->candidate, sizeof c->candidate));
        jb_set(&b, x, "ms", num(c->ms));
        jb_set(&b, x, "gbs", num(c->gbs));
        jb_append(&b, cands, x);
    }
    jb_set(&b, j, "ops", ops);
    jb_set(&b, j, "candidates", cands);
    return emit(w, j, &b, msg, msg_len);
}

ex_status ex_metrics_write_genotype(ex_metrics_writer *w, const ex_metrics_genotype *g, char *msg,
                                    size_t msg_len)
{
    jb b;
    json_t *j = begin(w, g, &b, "genotype", msg, msg_len);
    if (!j)
        return b.st != EX_OK ? b.st : EX_ERR_NOMEM;
    jb_set(&b, j, "epoch", json_integer(g->epoch));
    jb_set(&b, j, "text", jb_str(&b, "text", g->text, sizeof g->text));
    jb_set(&b, j, "json", jb_object_text(&b, "json", g->json, sizeof g->json, false));
    return emit(w, j, &b, msg, msg_len);
}

/* ------------------------------------------------------------------ open, resume, close */

/* What resume needs of a line: its type and, for step and profile records, global_step. */
static void peek_line(const char *line, size_t n, bool *is_header, bool *has_gs, int64_t *gs)
{
    *is_header = *has_gs = false;
    json_t *j = json_loadb(line, n, 0, NULL);
    json_t *type = json_object_get(j, "type"), *g = json_object_get(j, "global_step");
    const char *t = json_string_value(type);
    if (t && strcmp(t, "header") == 0)
        *is_header = true;
    if (t && (strcmp(t, "step") == 0 || strcmp(t, "profile") == 0) && json_is_integer(g)) {
        *has_gs = true;
        *gs = (int64_t)json_integer_value(g);
    }
    json_decref(j);
}

/* Copies the lines to keep into out; sets *has_header when a header is among them. */
static ex_status copy_prefix(lreader *r, ex__wfile *out, int64_t resume, bool *has_header,
                             const char *path, char *msg, size_t len)
{
    for (;;) {
        int got = lr_next(r);
        if (got == 0 || (got == 1 && !r->terminated))
            return EX_OK; /* an unterminated last line is a torn write: drop it */
        if (got < 0)
            return ex__msg(msg, len, got == -2 ? EX_ERR_NOMEM : EX_ERR_IO,
                           "%s: cannot read the log to resume: %s", path,
                           got == -2 ? "out of memory" : strerror(errno));
        bool hdr = false, has_gs = false;
        int64_t gs = 0;
        if (!r->too_long)
            peek_line(r->line, r->line_len, &hdr, &has_gs, &gs);
        if (has_gs && gs > resume)
            return EX_OK;
        if (r->too_long)
            continue; /* over the cap: every reader skips it, so it is not worth keeping */
        *has_header |= hdr;
        ex_status st = ex__wfile_write(out, r->line, r->line_len, msg, len);
        if (st == EX_OK)
            st = ex__wfile_write(out, "\n", 1, msg, len);
        if (st != EX_OK)
            return st;
    }
}

/* Rewrites path as the prefix that resume keeps; a missing log is left missing. */
static ex_status cut_log(const char *path, int64_t resume, bool *has_header, char *msg, size_t len)
{
    lreader *r = calloc(1, sizeof *r);
    if (!r)
        return ex__msg(msg, len, EX_ERR_NOMEM, "%s: out of memory", path);
    r->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (r->fd < 0) {
        int e = errno;
        lr_free(r);
        free(r);
        return e == ENOENT ? EX_OK
                           : ex__msg(msg, len, EX_ERR_IO, "%s: cannot open: %s", path, strerror(e));
    }
    ex__wfile out;
    ex_status st = ex__wfile_open(&out, path, msg, len);
    if (st == EX_OK) {
        st = copy_prefix(r, &out, resume, has_header, path, msg, len);
        if (st == EX_OK)
            st = ex__wfile_commit(&out, msg, len);
        else
            ex__wfile_abort(&out);
    }
    lr_free(r);
    free(r);
    return st;
}

ex_status ex_metrics_open(const char *path, int64_t resume_from_step, ex_metrics_writer **out,
                          char *msg, size_t msg_len)
{
    ex__msg(msg, msg_len, EX_OK, "%s", "");
    if (!out || !path)
        return ex__msg(msg, msg_len, EX_ERR_ARG, "metrics open: NULL argument");
    *out = NULL;
    if (resume_from_step < EX_METRICS_NEW)
        return ex__msg(msg, msg_len, EX_ERR_ARG, "%s: resume step %lld is negative", path,
                       (long long)resume_from_step);
    ex_metrics_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->path = strdup(path))) {
        free(w);
        return ex__msg(msg, msg_len, EX_ERR_NOMEM, "%s: out of memory", path);
    }
    ex_status st = EX_OK;
    int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC;
    if (resume_from_step == EX_METRICS_NEW)
        flags |= O_TRUNC;
    else
        st = cut_log(path, resume_from_step, &w->has_header, msg, msg_len);
    if (st == EX_OK && (w->fd = open(path, flags, 0644)) < 0)
        st = ex__msg(msg, msg_len, EX_ERR_IO, "%s: cannot open for writing: %s", path,
                     strerror(errno));
    if (st != EX_OK) {
        free(w->path);
        free(w);
        return st;
    }
    *out = w;
    return EX_OK;
}

bool ex_metrics_needs_header(const ex_metrics_writer *w)
{
    return w && !w->has_header;
}

ex_status ex_metrics_sync(ex_metrics_writer *w, char *msg, size_t msg_len)
{
    if (!w)
        return ex__msg(msg, msg_len, EX_ERR_ARG, "metrics sync: NULL writer");
    if (fsync(w->fd) != 0)
        return ex__msg(msg, msg_len, EX_ERR_IO, "%s: cannot sync: %s", w->path, strerror(errno));
    return EX_OK;
}

ex_status ex_metrics_close(ex_metrics_writer *w, char *msg, size_t msg_len)
{
    if (!w)
        return EX_OK;
    ex_status st = ex_metrics_sync(w, msg, msg_len);
    if (close(w->fd) != 0 && st == EX_OK)
        st = ex__msg(msg, msg_len, EX_ERR_IO, "%s: cannot close: %s", w->path, strerror(errno));
    free(w->path);
    free(w);
    return st;
}

/* ------------------------------------------------------------------ parser */

/* Field readers keep the first failure, so a record parser reads straight through. */
typedef struct jp {
    ex_status st;
    char *msg;
    size_t len;
    const char *rec;
} jp;

static void jp_bad(jp *p, const char *field, const char *what)
{
    if (p->st == EX_OK)
        p->st = ex__msg(p->msg, p->len, EX_ERR_FORMAT, "%s record: \"%s\" %s", p->rec, field, what);
}

static int64_t jp_int(jp *p, json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v)) {
        jp_bad(p, key, "is missing or not an integer");
        return 0;
    }
    return (int64_t)json_integer_value(v);
}

/* A number; null stands for a value that was not finite. */
static double jp_num_v(jp *p, json_t *v, const char *key)
{
    if (json_is_null(v))
        return NAN;
    if (!json_is_number(v)) {
        jp_bad(p, key, "is missing or not a number");
        return 0;
    }
    return json_number_value(v);
}

static double jp_num(jp *p, json_t *o, const char *key)
{
    return jp_num_v(p, json_object_get(o, key), key);
}

static void jp_str_v(jp *p, json_t *v, const char *key, char *dst, size_t cap)
{
    dst[0] = 0;
    if (!json_is_string(v)) {
        jp_bad(p, key, "is missing or not a string");
        return;
    }
    if (json_string_length(v) >= cap) {
        jp_bad(p, key, "is longer than its cap");
        return;
    }
    memcpy(dst, json_string_value(v), json_string_length(v) + 1);
}

static void jp_str(jp *p, json_t *o, const char *key, char *dst, size_t cap)
{
    jp_str_v(p, json_object_get(o, key), key, dst, cap);
}

/* An embedded object, kept as compact JSON text. */
static void jp_object_text(jp *p, json_t *o, const char *key, char *dst, size_t cap)
{
    json_t *v = json_object_get(o, key);
    dst[0] = 0;
    if (!json_is_object(v)) {
        jp_bad(p, key, "is missing or not an object");
        return;
    }
    size_t n = json_dumpb(v, dst, cap, DUMP_FLAGS);
    if (n == 0 || n >= cap) {
        dst[0] = 0;
        jp_bad(p, key, "is longer than its cap");
        return;
    }
    dst[n] = 0;
}

/* An array of at most cap entries; NULL (with an error) otherwise. */
static json_t *jp_array(jp *p, json_t *o, const char *key, size_t cap, int *n)
{
    json_t *a = json_object_get(o, key);
    *n = 0;
    if (!json_is_array(a)) {
        jp_bad(p, key, "is missing or not an array");
        return NULL;
    }
    if (json_array_size(a) > cap) {
        jp_bad(p, key, "has more entries than its cap");
        return NULL;
    }
    *n = (int)json_array_size(a);
    return a;
}

static void parse_header(jp *p, json_t *o, ex_metrics_header *h)
{
    json_t *f = json_object_get(o, "format");
    if (!json_is_string(f) || strcmp(json_string_value(f), "exapt-metrics") != 0)
        jp_bad(p, "format", "is not \"exapt-metrics\"");
    h->version = (int)jp_int(p, o, "version");
    if (p->st == EX_OK && h->version != EX_METRICS_VERSION) {
        p->st = ex__msg(p->msg, p->len, h->version > 1 ? EX_ERR_UNSUPPORTED : EX_ERR_FORMAT,
                        "header record: version %d; this reader knows version %d", h->version,
                        EX_METRICS_VERSION);
        return;
    }
    jp_object_text(p, o, "config", h->config, sizeof h->config);
    json_t *c = jp_array(p, o, "candidates", EX_METRICS_MAX_CANDS, &h->n_candidates);
    for (int i = 0; c && i < h->n_candidates; i++)
        jp_str_v(p, json_array_get(c, (size_t)i), "candidates", h->candidates[i],
                 EX_METRICS_NAME_MAX);
    json_t *e = jp_array(p, o, "edges", EX_METRICS_MAX_EDGES, &h->n_edges);
    for (int i = 0; e && i < h->n_edges; i++) {
        json_t *x = json_array_get(e, (size_t)i), *a = json_array_get(x, 0),
               *b = json_array_get(x, 1);
        if (json_array_size(x) != 2 || !json_is_integer(a) || !json_is_integer(b) ||
            json_integer_value(a) < 0 || json_integer_value(a) > 1000000 ||
            json_integer_value(b) < 0 || json_integer_value(b) > 1000000) {
            jp_bad(p, "edges", "holds an entry that is not [node, input]");
            break;
        }
        h->edges[i][0] = (int)json_integer_value(a);
        h->edges[i][1] = (int)json_integer_value(b);
    }
    jp_str(p, o, "backend", h->backend, sizeof h->backend);
    jp_str(p, o, "device", h->device, sizeof h->device);
    h->peak_gbs = jp_num(p, o, "peak_gbs");
    jp_str(p, o, "mode", h->mode, sizeof h->mode);
    jp_str(p, o, "time", h->time, sizeof h->time);
}

/* A [rows x cols] matrix of a cell; *rows and *cols are set by the first cell read and
 * must match for the next. mask selects 0/1 (or true/false) entries over numbers. */
static void parse_matrix(jp *p, json_t *m, const char *key, int *rows, int *cols, float *fv,
                         uint8_t *mv)
{
    if (!json_is_array(m) || json_array_size(m) > EX_METRICS_MAX_EDGES ||
        (*rows >= 0 && (int)json_array_size(m) != *rows)) {
        jp_bad(p, key, "is not a matrix of the expected rows (at most 64)");
        return;
    }
    *rows = (int)json_array_size(m);
    for (int r = 0; r < *rows && p->st == EX_OK; r++) {
        json_t *row = json_array_get(m, (size_t)r);
        int n = json_is_array(row) ? (int)json_array_size(row) : -1;
        if (n < 0 || n > EX_METRICS_MAX_CANDS || (*cols >= 0 && n != *cols)) {
            jp_bad(p, key, "has a row that is not an array of the same length (at most 12)");
            return;
        }
        *cols = n;
        for (int c = 0; c < n; c++) {
            json_t *v = json_array_get(row, (size_t)c);
            size_t at = (size_t)r * EX_METRICS_MAX_CANDS + (size_t)c;
            if (fv)
                fv[at] = (float)jp_num_v(p, v, key);
            else if (json_is_boolean(v) || (json_is_integer(v) && json_integer_value(v) >= 0 &&
                                            json_integer_value(v) <= 1))
                mv[at] = json_is_true(v) || json_integer_value(v) == 1;
            else
                jp_bad(p, key, "holds an entry that is not 0, 1, true or false");
        }
    }
}

/* The optional per-rank step times of a data-parallel run. */
static void parse_rank_times(jp *p, json_t *o, ex_metrics_step *s)
{
    json_t *a = json_object_get(o, "rank_step_ms");
    s->n_ranks = 0;
    if (!a)
        return;
    size_t n = json_array_size(a);
    if (!json_is_array(a) || n < 1 || n > EX_METRICS_MAX_RANKS) {
        jp_bad(p, "rank_step_ms", "is not an array of 1 to 64 numbers");
        return;
    }
    for (size_t r = 0; r < n; r++)
        s->rank_step_ms[r] = jp_num_v(p, json_array_get(a, r), "rank_step_ms");
    s->n_ranks = (int)n;
}

static bool parse_cells(jp *p, json_t *o, const char *key, ex_metrics_step *s, float *fn, float *fr,
                        uint8_t *mn, uint8_t *mr)
{
    json_t *c = json_object_get(o, key);
    if (!c)
        return false;
    if (!json_is_object(c)) {
        jp_bad(p, key, "is not an object");
        return false;
    }
    parse_matrix(p, json_object_get(c, "normal"), key, &s->n_edges, &s->n_cands, fn, mn);
    parse_matrix(p, json_object_get(c, "reduce"), key, &s->n_edges, &s->n_cands, fr, mr);
    return p->st == EX_OK;
}

static void parse_step(jp *p, json_t *o, ex_metrics_step *s)
{
    s->epoch = jp_int(p, o, "epoch");
    s->step = jp_int(p, o, "step");
    s->global_step = jp_int(p, o, "global_step");
    s->lr = jp_num(p, o, "lr");
    s->train_loss = jp_num(p, o, "train_loss");
    s->train_acc = jp_num(p, o, "train_acc");
    bool vl = json_object_get(o, "valid_loss"), va = json_object_get(o, "valid_acc");
    if (vl != va)
        jp_bad(p, vl ? "valid_acc" : "valid_loss", "is missing while its partner is present");
    s->has_valid = vl && va;
    if (s->has_valid) {
        s->valid_loss = jp_num(p, o, "valid_loss");
        s->valid_acc = jp_num(p, o, "valid_acc");
    }
    s->images_per_s = jp_num(p, o, "images_per_s");
    s->step_ms = jp_num(p, o, "step_ms");
    s->has_tau = json_object_get(o, "tau") != NULL;
    if (s->has_tau)
        s->tau = jp_num(p, o, "tau");
    json_t *sk = json_object_get(o, "skipped");
    if (sk && !json_is_boolean(sk))
        jp_bad(p, "skipped", "is not a boolean");
    s->skipped = json_is_true(sk);
    parse_rank_times(p, o, s);
    s->n_edges = s->n_cands = -1;
    s->has_alphas =
        parse_cells(p, o, "alphas", s, &s->alpha_normal[0][0], &s->alpha_reduce[0][0], NULL, NULL);
    s->has_active = parse_cells(p, o, "active", s, NULL, NULL, &s->active_normal[0][0],
                                &s->active_reduce[0][0]);
    if (s->n_edges < 0)
        s->n_edges = 0;
    if (s->n_cands < 0)
        s->n_cands = 0;
}

static void parse_epoch(jp *p, json_t *o, ex_metrics_epoch *e)
{
    e->epoch = jp_int(p, o, "epoch");
    e->train_loss = jp_num(p, o, "train_loss");
    e->train_acc = jp_num(p, o, "train_acc");
    e->valid_loss = jp_num(p, o, "valid_loss");
    e->valid_acc = jp_num(p, o, "valid_acc");
    e->seconds = jp_num(p, o, "seconds");
    if (json_object_get(o, "genotype"))
        jp_str(p, o, "genotype", e->genotype, sizeof e->genotype);
}

static void parse_profile(jp *p, json_t *o, ex_metrics_profile *f)
{
    f->global_step = jp_int(p, o, "global_step");
    json_t *ops = jp_array(p, o, "ops", EX_METRICS_MAX_OPS, &f->n_ops);
    for (int i = 0; ops && i < f->n_ops && p->st == EX_OK; i++) {
        json_t *x = json_array_get(ops, (size_t)i);
        if (!json_is_object(x))
            jp_bad(p, "ops", "holds an entry that is not an object");
        jp_str(p, x, "op", f->ops[i].op, sizeof f->ops[i].op);
        f->ops[i].ms = jp_num(p, x, "ms");
        f->ops[i].gbs = jp_num(p, x, "gbs");
        f->ops[i].calls = jp_int(p, x, "calls");
    }
    json_t *c = jp_array(p, o, "candidates", EX_METRICS_MAX_PROF_CANDS, &f->n_candidates);
    for (int i = 0; c && i < f->n_candidates && p->st == EX_OK; i++) {
        json_t *x = json_array_get(c, (size_t)i);
        if (!json_is_object(x))
            jp_bad(p, "candidates", "holds an entry that is not an object");
        jp_str(p, x, "candidate", f->candidates[i].candidate, sizeof f->candidates[i].candidate);
        f->candidates[i].ms = jp_num(p, x, "ms");
        f->candidates[i].gbs = jp_num(p, x, "gbs");
    }
}

static void parse_genotype(jp *p, json_t *o, ex_metrics_genotype *g)
{
    g->epoch = jp_int(p, o, "epoch");
    jp_str(p, o, "text", g->text, sizeof g->text);
    jp_object_text(p, o, "json", g->json, sizeof g->json);
}

static const char *const kind_names[] = {NULL, "header", "step", "epoch", "profile", "genotype"};

static ex_status parse_record(json_t *o, ex_metrics_record *rec, char *msg, size_t len)
{
    json_t *t = json_object_get(o, "type");
    if (!json_is_string(t))
        return ex__msg(msg, len, EX_ERR_FORMAT, "record has no \"type\" string");
    snprintf(rec->type, sizeof rec->type, "%s", json_string_value(t));
    int k = EX_METRICS_GENOTYPE;
    while (k > 0 && strcmp(json_string_value(t), kind_names[k]) != 0)
        k--;
    rec->kind = (ex_metrics_kind)k;
    jp p = {EX_OK, msg, len, kind_names[k]};
    switch (rec->kind) {
    case EX_METRICS_HEADER: parse_header(&p, o, &rec->header); break;
    case EX_METRICS_STEP: parse_step(&p, o, &rec->step); break;
    case EX_METRICS_EPOCH: parse_epoch(&p, o, &rec->epoch); break;
    case EX_METRICS_PROFILE: parse_profile(&p, o, &rec->profile); break;
    case EX_METRICS_GENOTYPE: parse_genotype(&p, o, &rec->genotype); break;
    case EX_METRICS_UNKNOWN:
        return ex__msg(msg, len, EX_ERR_UNSUPPORTED, "unknown record type '%.40s'",
                       json_string_value(t));
    }
    return p.st;
}

ex_status ex_metrics_parse_line(const char *line, size_t len, ex_metrics_record *rec, char *msg,
                                size_t msg_len)
{
    ex__msg(msg, msg_len, EX_OK, "%s", "");
    if (!line || !rec)
        return ex__msg(msg, msg_len, EX_ERR_ARG, "metrics parse: NULL argument");
    memset(rec, 0, sizeof *rec);
    json_error_t err;
    json_t *o = json_loadb(line, len, JSON_REJECT_DUPLICATES, &err);
    if (!o)
        return ex__msg(msg, msg_len, EX_ERR_FORMAT, "not JSON: %s (byte %d)", err.text,
                       err.position);
    ex_status st = json_is_object(o)
                       ? parse_record(o, rec, msg, msg_len)
                       : ex__msg(msg, msg_len, EX_ERR_FORMAT, "line is not a JSON object");
    json_decref(o);
    return st;
}

/* ------------------------------------------------------------------ reader */

static bool blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
            return false;
    return true;
}

static void count_bad(ex_metrics_stats *s, int64_t line, const char *why)
{
    if (s->bad++ == 0) {
        s->first_bad_line = line;
        snprintf(s->first_bad_msg, sizeof s->first_bad_msg, "%s", why);
    }
}

/* One complete line: parse, count, deliver. Returns non-zero to stop (cb's wish or a
 * newer version, then *st says which). */
static int take_line(lreader *r, ex_metrics_record *rec, ex_metrics_stats *s,
                     ex_metrics_callback cb, void *user, const char *path, ex_status *st, char *msg,
                     size_t len)
{
    int64_t no = ++s->lines;
    char why[256];
    if (r->too_long) {
        snprintf(why, sizeof why, "line longer than %d bytes", EX_METRICS_LINE_MAX);
        count_bad(s, no, why);
        return 0;
    }
    if (blank(r->line, r->line_len))
        return 0;
    ex_status ps = ex_metrics_parse_line(r->line, r->line_len, rec, why, sizeof why);
    if (ps == EX_ERR_UNSUPPORTED && rec->kind == EX_METRICS_UNKNOWN) {
        s->unknown++;
        return 0;
    }
    if (ps == EX_ERR_UNSUPPORTED) {
        *st = ex__msg(msg, len, ps, "%s, line %lld: %s", path, (long long)no, why);
        return 1;
    }
    if (ps != EX_OK) {
        count_bad(s, no, why);
        return 0;
    }
    s->records++;
    return cb ? cb(rec, no, user) : 0;
}

ex_status ex_metrics_read_from(const char *path, int64_t offset, ex_metrics_callback cb, void *user,
                               ex_metrics_stats *stats, char *msg, size_t msg_len)
{
    ex_metrics_stats local, *s = stats ? stats : &local;
    memset(s, 0, sizeof *s);
    s->end_offset = offset;
    ex__msg(msg, msg_len, EX_OK, "%s", "");
    if (!path || offset < 0)
        return ex__msg(msg, msg_len, EX_ERR_ARG, "metrics read: NULL path or negative offset");
    lreader *r = calloc(1, sizeof *r);
    ex_metrics_record *rec = malloc(sizeof *rec);
    ex_status st =
        r && rec ? EX_OK : ex__msg(msg, msg_len, EX_ERR_NOMEM, "%s: out of memory", path);
    if (r)
        r->fd = -1;
    if (st == EX_OK && (r->fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        st = ex__msg(msg, msg_len, EX_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (st == EX_OK && lseek(r->fd, (off_t)offset, SEEK_SET) < 0)
        st = ex__msg(msg, msg_len, EX_ERR_IO, "%s: cannot seek to %lld: %s", path,
                     (long long)offset, strerror(errno));
    if (r)
        r->offset = offset;
    while (st == EX_OK) {
        int got = lr_next(r);
        if (got < 0)
            st = ex__msg(msg, msg_len, got == -2 ? EX_ERR_NOMEM : EX_ERR_IO, "%s: read failed: %s",
                         path, got == -2 ? "out of memory" : strerror(errno));
        if (got <= 0)
            break;
        if (!r->terminated) {
            s->truncated = true;
            break;
        }
        s->end_offset = r->offset;
        if (take_line(r, rec, s, cb, user, path, &st, msg, msg_len))
            break;
    }
    if (r)
        lr_free(r);
    free(r);
    free(rec);
    return st;
}

ex_status ex_metrics_read(const char *path, ex_metrics_callback cb, void *user,
                          ex_metrics_stats *stats, char *msg, size_t msg_len)
{
    return ex_metrics_read_from(path, 0, cb, user, stats, msg, msg_len);
}
