/* The plotted panels: loss and accuracy curves, step time, bandwidth bars, and the status,
 * notes and timeline bars. Curves are drawn through every point while they fit the width;
 * beyond that each pixel column shows the range of its points, so 10,000 steps cost no
 * more to draw than a few hundred. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "viz/draw.h"

static ex_viz_panel series_panel(ex_viz_series s)
{
    switch (s) {
    case EX_VIZ_TRAIN_LOSS:
    case EX_VIZ_VALID_LOSS: return EX_VIZ_PANEL_LOSS;
    case EX_VIZ_TRAIN_ACC:
    case EX_VIZ_VALID_ACC: return EX_VIZ_PANEL_ACCURACY;
    default: return EX_VIZ_PANEL_STEP_TIME;
    }
}

/* The plot inside a curve panel: the y axis's values to its left, the x axis's row below. */
enum { X_AXIS_H = 16 };
static SDL_Rect plot_rect(const ex_viz_layout *l, ex_viz_panel p)
{
    SDL_Rect q = l->panel[p];
    return (SDL_Rect){q.x + 50, q.y + VIZ_TITLE_H + 6, q.w - 58, q.h - VIZ_TITLE_H - 12 - X_AXIS_H};
}

/* The x axis: the global steps at both ends, named. */
static void x_axis(ex_viz_renderer *r, const ex_viz_model *m, SDL_Rect q)
{
    char t[32];
    int y = q.y + q.h + 3;
    viz_text_draw(r, q.x + q.w / 2, y, "step", viz_dim, VIZ_CENTER);
    if (m->n_pts < 1)
        return;
    snprintf(t, sizeof t, "%lld", (long long)m->pts[0].global_step);
    viz_text_draw(r, q.x, y, t, viz_dim, VIZ_LEFT);
    snprintf(t, sizeof t, "%lld", (long long)m->pts[m->n_pts - 1].global_step);
    viz_text_draw(r, q.x + q.w, y, t, viz_dim, VIZ_RIGHT);
}

/* The value range of a panel's axis: accuracy 0..1, the others 0..their largest value. */
static void y_range(const ex_viz_model *m, ex_viz_panel p, float *lo, float *hi)
{
    *lo = 0;
    *hi = 1;
    if (p == EX_VIZ_PANEL_ACCURACY)
        return;
    int a = p == EX_VIZ_PANEL_LOSS ? EX_VIZ_TRAIN_LOSS : EX_VIZ_STEP_MS;
    int b = p == EX_VIZ_PANEL_LOSS ? EX_VIZ_VALID_LOSS : EX_VIZ_STEP_MS;
    float top = 0;
    for (int64_t i = 0; i < m->n_pts; i++)
        for (int s = a; s <= b; s++) {
            float v = m->pts[i].v[s];
            if (isfinite(v) && v > top)
                top = v;
        }
    *hi = top > 0 ? top * 1.05f : 1;
}

static int col_of(SDL_Rect q, int64_t i, int64_t n)
{
    return q.x + (n < 2 || q.w < 1 ? 0 : (int)(i * (int64_t)(q.w - 1) / (n - 1)));
}

/* lroundf() of x in [0, 2^23], inline: a frame rounds every point of every curve. */
static int round_pos(float x)
{
    int t = (int)x;
    return t + (x - (float)t >= 0.5f);
}

static int row_of(SDL_Rect q, float v, float lo, float hi)
{
    float f = (v - lo) / (hi - lo);
    f = f < 0 ? 0 : f > 1 ? 1 : f;
    return q.y + q.h - 1 - round_pos(f * (float)(q.h - 1));
}

bool viz_curve_point(const ex_viz_model *m, const ex_viz_layout *l, ex_viz_series s, int64_t i,
                     int *x, int *y)
{
    if (i < 0 || i >= m->n_pts || !isfinite(m->pts[i].v[s]))
        return false;
    ex_viz_panel p = series_panel(s);
    SDL_Rect q = plot_rect(l, p);
    float lo, hi;
    y_range(m, p, &lo, &hi);
    *x = col_of(q, i, m->n_pts);
    *y = row_of(q, m->pts[i].v[s], lo, hi);
    return true;
}

/* The points of one pixel column are gathered as values and turned into rows once: rows
 * fall as values rise, so the top and bottom rows are those of the largest and smallest
 * value. */
typedef struct polyline {
    SDL_Point *p;
    int n;
    SDL_Rect q;
    float lo, hi;
    int col;                       /* the pixel column being gathered, -1 for none */
    float first, last, vmin, vmax; /* its values */
} polyline;

static void flush_column(polyline *pl)
{
    if (pl->col < 0)
        return;
    int first = row_of(pl->q, pl->first, pl->lo, pl->hi),
        last = row_of(pl->q, pl->last, pl->lo, pl->hi);
    int top = row_of(pl->q, pl->vmax, pl->lo, pl->hi),
        bottom = row_of(pl->q, pl->vmin, pl->lo, pl->hi);
    pl->p[pl->n++] = (SDL_Point){pl->col, first};
    if (top != bottom) {
        pl->p[pl->n++] = (SDL_Point){pl->col, top};
        pl->p[pl->n++] = (SDL_Point){pl->col, bottom};
    }
    if (last != first || top != bottom)
        pl->p[pl->n++] = (SDL_Point){pl->col, last};
    pl->col = -1;
}

static void flush_line(ex_viz_renderer *r, polyline *pl)
{
    flush_column(pl);
    if (pl->n == 1)
        SDL_RenderDrawPoint(r->sdl, pl->p[0].x, pl->p[0].y);
    else if (pl->n > 1)
        SDL_RenderDrawLines(r->sdl, pl->p, pl->n);
    pl->n = 0;
}

static void draw_series(ex_viz_renderer *r, const ex_viz_model *m, SDL_Rect q, ex_viz_series s,
                        float lo, float hi)
{
    /* at most four points per pixel column that holds a step */
    size_t cols = (size_t)(q.w > 0 ? q.w : 1);
    size_t need = 4 * ((size_t)m->n_pts < cols ? (size_t)m->n_pts : cols) + 8;
    if (need > r->n_pts) {
        SDL_Point *p = realloc(r->pts, need * sizeof *p);
        if (!p)
            return;
        r->pts = p;
        r->n_pts = need;
    }
    polyline pl = {.p = r->pts, .q = q, .lo = lo, .hi = hi, .col = -1};
    viz_color(r, ex_viz_series_color(s));
    /* col_of(q, i, n) = q.x + floor(i * span / den), stepped without a division per point */
    int64_t n = m->n_pts, span = q.w < 1 ? 0 : q.w - 1, den = n < 2 ? 1 : n - 1;
    int64_t step_q = n < 2 ? 0 : span / den, step_r = n < 2 ? 0 : span % den, cq = 0, cr = 0;
    for (int64_t i = 0; i < n; i++) {
        int c = q.x + (int)cq;
        cq += step_q;
        cr += step_r;
        if (cr >= den) {
            cr -= den;
            cq++;
        }
        float v = m->pts[i].v[s];
        if (!isfinite(v)) {
            flush_line(r, &pl);
        } else if (c != pl.col) {
            flush_column(&pl);
            pl.col = c;
            pl.first = pl.last = pl.vmin = pl.vmax = v;
        } else {
            pl.last = v;
            pl.vmin = v < pl.vmin ? v : pl.vmin;
            pl.vmax = v > pl.vmax ? v : pl.vmax;
        }
    }
    flush_line(r, &pl);
}

/* A series with a value now and then (a training's evaluation, once an epoch): each value
 * a marker, joined to the one before by a line. */
static void draw_sparse(ex_viz_renderer *r, const ex_viz_model *m, SDL_Rect q, ex_viz_series s,
                        float lo, float hi)
{
    SDL_Color c = ex_viz_series_color(s);
    int px = -1, py = -1;
    for (int64_t i = 0; i < m->n_pts; i++) {
        float v = m->pts[i].v[s];
        if (!isfinite(v))
            continue;
        int x = col_of(q, i, m->n_pts), y = row_of(q, v, lo, hi);
        viz_color(r, c);
        if (px >= 0)
            SDL_RenderDrawLine(r->sdl, px, py, x, y);
        viz_fill(r, x - 2, y - 2, 5, 5, c);
        px = x;
        py = y;
    }
}

/* The latest finite value of series s at or before point c (NAN if none). */
static float latest(const ex_viz_model *m, ex_viz_series s, int64_t c)
{
    for (int64_t i = c; i >= 0; i--)
        if (isfinite(m->pts[i].v[s]))
            return m->pts[i].v[s];
    return NAN;
}

static void axes(ex_viz_renderer *r, SDL_Rect q, float lo, float hi, const char *fmt)
{
    char t[32];
    for (int g = 0; g <= 4; g++) {
        float v = lo + (hi - lo) * (float)g / 4;
        int y = row_of(q, v, lo, hi);
        viz_fill(r, q.x, y, q.w, 1, viz_grid);
        snprintf(t, sizeof t, fmt, (double)v);
        viz_text_draw(r, q.x - 4, y - r->line_h / 2, t, viz_dim, VIZ_RIGHT);
    }
}

static void legend(ex_viz_renderer *r, SDL_Rect p, const char *a, ex_viz_series sa, const char *b,
                   ex_viz_series sb)
{
    int x = p.x + p.w - 8;
    if (b)
        x -= viz_text_draw(r, x, p.y + 3, b, ex_viz_series_color(sb), VIZ_RIGHT) + 12;
    viz_text_draw(r, x, p.y + 3, a, ex_viz_series_color(sa), VIZ_RIGHT);
}

static void cursor_line(ex_viz_renderer *r, const ex_viz_model *m, const ex_viz_view *v, SDL_Rect q)
{
    if (v->cursor < 0 || v->cursor >= m->n_pts)
        return;
    viz_fill(r, col_of(q, v->cursor, m->n_pts), q.y, 1, q.h, viz_dim);
}

static void curve_panel(ex_viz_renderer *r, const ex_viz_model *m, const ex_viz_view *v,
                        const ex_viz_layout *l, ex_viz_panel p, const char *title, const char *fmt)
{
    viz_panel_begin(r, l->panel[p], title);
    SDL_Rect q = plot_rect(l, p);
    float lo, hi;
    y_range(m, p, &lo, &hi);
    axes(r, q, lo, hi, fmt);
    x_axis(r, m, q);
    cursor_line(r, m, v, q);
    if (p == EX_VIZ_PANEL_STEP_TIME) {
        draw_series(r, m, q, EX_VIZ_STEP_MS, lo, hi);
        return;
    }
    ex_viz_series a = p == EX_VIZ_PANEL_LOSS ? EX_VIZ_TRAIN_LOSS : EX_VIZ_TRAIN_ACC;
    draw_series(r, m, q, a, lo, hi);
    if (m->per_epoch)
        draw_sparse(r, m, q, (ex_viz_series)(a + 1), lo, hi);
    else
        draw_series(r, m, q, (ex_viz_series)(a + 1), lo, hi);
    legend(r, l->panel[p], "train", a, m->eval_label, (ex_viz_series)(a + 1));
}

void viz_draw_curves(ex_viz_renderer *r, const ex_viz_model *m, const ex_viz_view *v,
                     const ex_viz_layout *l)
{
    int64_t c = viz_model_cursor(m, v);
    char t[160];
    /* the evaluation as of the cursor: a training's, from its latest epoch */
    float vl = c >= 0 ? latest(m, EX_VIZ_VALID_LOSS, c) : NAN,
          va = c >= 0 ? latest(m, EX_VIZ_VALID_ACC, c) : NAN;
    char ev[48] = "";
    if (c >= 0 && isfinite(vl))
        snprintf(ev, sizeof ev, ", %s %.4f", m->eval_label, (double)vl);
    if (c >= 0)
        snprintf(t, sizeof t, "loss at step %lld: train %.4f%s", (long long)m->pts[c].global_step,
                 (double)m->pts[c].v[EX_VIZ_TRAIN_LOSS], ev);
    else
        snprintf(t, sizeof t, "loss");
    curve_panel(r, m, v, l, EX_VIZ_PANEL_LOSS, t, "%.2f");
    ev[0] = '\0';
    if (c >= 0 && isfinite(va))
        snprintf(ev, sizeof ev, ", %s %.3f", m->eval_label, (double)va);
    if (c >= 0)
        snprintf(t, sizeof t, "accuracy: train %.3f%s", (double)m->pts[c].v[EX_VIZ_TRAIN_ACC], ev);
    else
        snprintf(t, sizeof t, "accuracy");
    curve_panel(r, m, v, l, EX_VIZ_PANEL_ACCURACY, t, "%.2f");
    if (c >= 0)
        snprintf(t, sizeof t, "step time: %.1f ms", (double)m->pts[c].v[EX_VIZ_STEP_MS]);
    else
        snprintf(t, sizeof t, "step time (ms)");
    curve_panel(r, m, v, l, EX_VIZ_PANEL_STEP_TIME, t, "%.0f");
    legend(r, l->panel[EX_VIZ_PANEL_STEP_TIME], "ms per step", EX_VIZ_STEP_MS, NULL,
           EX_VIZ_STEP_MS);
}

/* ---- bandwidth ---- */

static int bar_row(ex_viz_renderer *r, SDL_Rect c, int y, const char *name, double gbs,
                   double scale, SDL_Color col)
{
    int label = 136, value = 56, bw = c.w - label - value;
    char t[48];
    viz_text_draw(r, c.x + label - 6, y, name, viz_dim, VIZ_RIGHT);
    int w = scale > 0 ? (int)lround(gbs / scale * bw) : 0;
    viz_fill(r, c.x + label, y + 3, w < 0 ? 0 : w > bw ? bw : w, r->line_h - 5, col);
    snprintf(t, sizeof t, "%.2f", gbs);
    viz_text_draw(r, c.x + c.w - 4, y, t, viz_fg, VIZ_RIGHT);
    return y + r->line_h;
}

static int by_time(const void *a, const void *b)
{
    double x = ((const ex_metrics_prof_op *)a)->ms, y = ((const ex_metrics_prof_op *)b)->ms;
    return (x < y) - (x > y);
}

void viz_draw_bandwidth(ex_viz_renderer *r, const ex_viz_model *m, const ex_viz_view *v, SDL_Rect p)
{
    int64_t c = viz_model_cursor(m, v);
    const ex_metrics_profile *pr =
        viz_model_profile_at(m, c >= 0 ? m->pts[c].global_step : INT64_MAX);
    double peak = m->has_header ? m->header.peak_gbs : 0;
    char t[200];
    if (pr)
        snprintf(t, sizeof t, "achieved GB/s, profiled step %lld (red: measured peak %.1f GB/s)",
                 (long long)pr->global_step, peak);
    else
        snprintf(t, sizeof t, "achieved GB/s (no profiled step yet)");
    SDL_Rect q = viz_panel_begin(r, p, t);
    if (!pr)
        return;
    double scale = peak;
    for (int i = 0; i < pr->n_candidates; i++)
        scale = pr->candidates[i].gbs > scale ? pr->candidates[i].gbs : scale;
    for (int i = 0; i < pr->n_ops; i++)
        scale = pr->ops[i].gbs > scale ? pr->ops[i].gbs : scale;
    scale *= 1.05;
    int y = q.y, bottom = q.y + q.h - r->line_h;
    viz_text_draw(r, q.x, y, "by candidate operation", viz_fg, VIZ_LEFT);
    y += r->line_h;
    for (int i = 0; i < pr->n_candidates && y <= bottom; i++)
        y = bar_row(r, q, y, pr->candidates[i].candidate, pr->candidates[i].gbs, scale,
                    viz_cand_color(i));
    ex_metrics_prof_op ops[EX_METRICS_MAX_OPS];
    memcpy(ops, pr->ops, (size_t)pr->n_ops * sizeof ops[0]);
    qsort(ops, (size_t)pr->n_ops, sizeof ops[0], by_time);
    if (y + r->line_h <= bottom) {
        viz_text_draw(r, q.x, y + 2, "by engine op (most time first)", viz_fg, VIZ_LEFT);
        y += r->line_h + 2;
    }
    for (int i = 0; i < pr->n_ops && y <= bottom; i++)
        y = bar_row(r, q, y, ops[i].op, ops[i].gbs, scale, (SDL_Color){120, 130, 150, 255});
    if (peak > 0 && scale > 0) {
        int x = q.x + 136 + (int)lround(peak / scale * (q.w - 136 - 56));
        viz_fill(r, x, q.y, 2, y - q.y, viz_peak);
    }
}

/* ---- status, notes, timeline ---- */

static void status_text(const ex_viz_model *m, const ex_viz_view *v, char *t, size_t len)
{
    int64_t c = viz_model_cursor(m, v);
    const ex_metrics_header *h = &m->header;
    int n = snprintf(t, len, "exapt  ");
    if (c >= 0) {
        const viz_point *p = &m->pts[c];
        n += snprintf(t + n, len - (size_t)n, "epoch %lld", (long long)p->epoch + 1);
        if (m->config_epochs > 0)
            n += snprintf(t + n, len - (size_t)n, "/%d", m->config_epochs);
        n += snprintf(t + n, len - (size_t)n, "  step %lld (global %lld)  %.1f images/s  ",
                      (long long)p->step + 1, (long long)p->global_step, (double)p->ips);
        if (p->has_tau)
            n += snprintf(t + n, len - (size_t)n, "\xcf\x84 %.3f  ", (double)p->tau);
    } else {
        n += snprintf(t + n, len - (size_t)n, "no step yet  ");
    }
    if (m->has_header)
        n += snprintf(t + n, len - (size_t)n, "%s (%s)  mode %s  ", h->backend, h->device, h->mode);
    snprintf(t + n, len - (size_t)n, "[%s%s]", v->state ? v->state : "",
             m->finished ? ", run finished" : "");
}

/* Draws text from (x, y) in lines of at most w pixels, broken after a ", " (a line longer
 * than w where no break fits), at most `lines` of them; returns how many it drew. */
static int wrapped(ex_viz_renderer *r, int x, int y, int w, int lines, const char *text,
                   SDL_Color c)
{
    char line[VIZ_TEXT_MAX];
    int drawn = 0;
    while (*text && drawn < lines) {
        size_t end = strlen(text), fit = 0;
        for (const char *b = strstr(text, ", "); b; b = strstr(b + 2, ", ")) {
            size_t at = (size_t)(b - text) + 1; /* the comma stays on this line */
            snprintf(line, sizeof line, "%.*s", (int)at, text);
            if (fit && viz_text_width(r, line) > w)
                break;
            fit = at;
        }
        snprintf(line, sizeof line, "%s", text);
        if (!fit || viz_text_width(r, line) <= w || drawn + 1 == lines)
            fit = end; /* all of it fits, no break does, or the last line */
        snprintf(line, sizeof line, "%.*s", (int)fit, text);
        viz_text_draw(r, x, y + drawn * r->line_h, line, c, VIZ_LEFT);
        drawn++;
        text += fit;
        while (*text == ' ')
            text++;
    }
    return drawn;
}

static void notes_bar(ex_viz_renderer *r, const ex_viz_model *m, SDL_Rect p)
{
    char t[VIZ_TEXT_MAX];
    int n = 0;
    if (m->n_notes) {
        n = snprintf(t, sizeof t, "could not read everything: ");
        for (int i = 0; i < m->n_notes && n < (int)sizeof t; i++)
            n += snprintf(t + n, sizeof t - (size_t)n, "%s%s", i ? " | " : "", m->notes[i]);
        if (m->dropped_notes && n < (int)sizeof t)
            snprintf(t + n, sizeof t - (size_t)n, " | and %d more", m->dropped_notes);
        viz_text_draw(r, p.x + 6, p.y + 4, t, viz_warn, VIZ_LEFT);
    } else if (m->genotype[0]) {
        snprintf(t, sizeof t, "genotype: %.1000s", m->genotype);
        wrapped(r, p.x + 6, p.y + 3, p.w - 12, (p.h - 3) / r->line_h, t, viz_dim);
    }
}

static void timeline(ex_viz_renderer *r, const ex_viz_model *m, const ex_viz_view *v, SDL_Rect p)
{
    viz_fill(r, p.x, p.y, p.w, p.h, viz_panel);
    int64_t c = viz_model_cursor(m, v);
    if (c < 0)
        return;
    int x = m->n_pts < 2 ? p.w : (int)((int64_t)(p.w - 1) * c / (m->n_pts - 1));
    viz_fill(r, p.x, p.y + 4, x, p.h - 8, (SDL_Color){60, 80, 120, 255});
    viz_fill(r, p.x + x - 1, p.y, 3, p.h, viz_fg);
    char t[160];
    snprintf(t, sizeof t, "history: step record %lld of %lld%s", (long long)c + 1,
             (long long)m->n_pts, v->cursor < 0 ? " (latest)" : " (scrubbed: end returns)");
    viz_text_draw(r, p.x + p.w / 2, p.y + 1, t, viz_fg, VIZ_CENTER);
}

void viz_draw_status(ex_viz_renderer *r, const ex_viz_model *m, const ex_viz_view *v,
                     const ex_viz_layout *l)
{
    SDL_Rect s = l->panel[EX_VIZ_PANEL_STATUS];
    viz_fill(r, s.x, s.y, s.w, s.h, (SDL_Color){34, 40, 56, 255});
    char t[512];
    status_text(m, v, t, sizeof t);
    viz_text_draw(r, s.x + 8, s.y + 4, t, viz_fg, VIZ_LEFT);
    viz_text_draw(r, s.x + s.w - 8, s.y + 4,
                  "space pause  tab cell  \xe2\x86\x90/\xe2\x86\x92 scrub  s screenshot  q quit",
                  viz_dim, VIZ_RIGHT);
    notes_bar(r, m, l->panel[EX_VIZ_PANEL_NOTES]);
    timeline(r, m, v, l->panel[EX_VIZ_PANEL_TIMELINE]);
}
