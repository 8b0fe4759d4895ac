/* Following a metrics log: read what was appended since the last poll, start over when
 * the file shrinks or is replaced (a resumed run rewrites it). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "viz/model.h"

#define EMPTY_NOTE "the log is empty: nothing to show yet"

struct ex_viz_follow {
    char *path;
    ex_viz_model *m;
    int64_t offset;
    dev_t dev;
    ino_t ino;
    bool truncated_noted;
    int64_t lines; /* complete lines read so far, for line numbers in notes */
};

ex_status ex_viz_follow_new(const char *path, ex_viz_model *m, ex_viz_follow **out, char *msg,
                            size_t msg_len)
{
    if (!out)
        return viz_fail(EX_ERR_ARG, msg, msg_len, "follow: NULL out");
    *out = NULL;
    if (!path || !path[0] || !m)
        return viz_fail(EX_ERR_ARG, msg, msg_len, "follow: %s", !m ? "NULL model" : "no log path");
    ex_viz_follow *f = calloc(1, sizeof *f);
    if (f)
        f->path = strdup(path);
    if (!f || !f->path) {
        free(f);
        return viz_fail(EX_ERR_NOMEM, msg, msg_len, "out of memory");
    }
    f->m = m;
    *out = f;
    return EX_OK;
}

void ex_viz_follow_free(ex_viz_follow *f)
{
    if (!f)
        return;
    free(f->path);
    free(f);
}

static int on_record(const ex_metrics_record *rec, int64_t line, void *user)
{
    (void)line;
    ex_viz_model_add(user, rec);
    return 0;
}

/* Turns what a read skipped into notes the viewer shows. */
static void note_stats(ex_viz_follow *f, const ex_metrics_stats *st, int64_t line0)
{
    char note[400];
    if (st->bad) {
        snprintf(note, sizeof note, "%lld unreadable line%s in %s, the first at line %lld: %.200s",
                 (long long)st->bad, st->bad > 1 ? "s" : "", f->path,
                 (long long)(line0 + st->first_bad_line), st->first_bad_msg);
        ex_viz_model_note(f->m, note);
    }
    if (st->unknown) {
        snprintf(note, sizeof note, "%lld record%s of unknown type skipped", (long long)st->unknown,
                 st->unknown > 1 ? "s" : "");
        ex_viz_model_note(f->m, note);
    }
}

ex_status ex_viz_follow_poll(ex_viz_follow *f, int64_t *added, char *msg, size_t msg_len)
{
    if (!f || !added)
        return viz_fail(EX_ERR_ARG, msg, msg_len, "follow: NULL %s", !f ? "follower" : "added");
    *added = 0;
    struct stat sb;
    if (stat(f->path, &sb) != 0) {
        if (errno == ENOENT)
            return EX_OK;
        return viz_fail(EX_ERR_IO, msg, msg_len, "%s: %s", f->path, strerror(errno));
    }
    if (f->offset > 0 &&
        ((int64_t)sb.st_size < f->offset || sb.st_ino != f->ino || sb.st_dev != f->dev)) {
        ex_viz_model_reset(f->m);
        f->offset = 0;
        f->truncated_noted = false;
        f->lines = 0;
    }
    f->dev = sb.st_dev;
    f->ino = sb.st_ino;
    if ((int64_t)sb.st_size == f->offset) {
        if (sb.st_size == 0)
            ex_viz_model_note(f->m, EMPTY_NOTE);
        return EX_OK;
    }
    ex_metrics_stats st;
    ex_status s = ex_metrics_read_from(f->path, f->offset, on_record, f->m, &st, msg, msg_len);
    if (s != EX_OK)
        return s;
    note_stats(f, &st, f->lines);
    f->lines += st.lines;
    f->offset = st.end_offset;
    if (st.truncated && !f->truncated_noted) {
        ex_viz_model_note(f->m, "the log ends in an incomplete line (cut mid-line, or still "
                                "being written); it is not shown");
        f->truncated_noted = true;
    }
    if (st.records > 0)
        viz_model_drop_note(f->m, EMPTY_NOTE);
    *added = st.records;
    return EX_OK;
}
