/* The viewer, rendered offscreen with SDL's software renderer and checked pixel by pixel:
 * heatmap colours of known α, pruned candidates drawn as pruned, curves through known data,
 * a missing font, and logs that are truncated mid-line, empty, malformed, from another
 * configuration, of a newer version, or replaced while followed. */
#define _POSIX_C_SOURCE 200809L

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <SDL2/SDL_image.h>

#include "exapt/genotype.h"
#include "exapt/viz.h"
#include "viz/draw.h"

#define W 1400
#define H 860

static const char *const cands[8] = {"none",         "max_pool_3x3", "avg_pool_3x3",
                                     "skip_connect", "sep_conv_3x3", "sep_conv_5x5",
                                     "dil_conv_3x3", "dil_conv_5x5"};

static ex_viz_model *new_model(void)
{
    ex_viz_model *m = NULL;
    char msg[256];
    assert_int_equal(ex_viz_model_new(&m, msg, sizeof msg), EX_OK);
    return m;
}

static void add_header(ex_viz_model *m, const char *mode)
{
    ex_metrics_record *r = calloc(1, sizeof *r);
    r->kind = EX_METRICS_HEADER;
    ex_metrics_header *h = &r->header;
    snprintf(h->config, sizeof h->config, "{\"epochs\":2}");
    h->n_candidates = 8;
    for (int i = 0; i < 8; i++)
        snprintf(h->candidates[i], sizeof h->candidates[i], "%s", cands[i]);
    for (int node = 0, e = 0; node < 4; node++)
        for (int in = 0; in < 2 + node; in++, e++) {
            h->edges[e][0] = 2 + node;
            h->edges[e][1] = in;
            h->n_edges = e + 1;
        }
    snprintf(h->backend, sizeof h->backend, "cpu");
    snprintf(h->device, sizeof h->device, "test");
    h->peak_gbs = 20;
    snprintf(h->mode, sizeof h->mode, "%s", mode);
    ex_viz_model_add(m, r);
    free(r);
}

/* A step whose α are all 1/8 except the few a test sets through `tweak`. */
static void add_step(ex_viz_model *m, int64_t g, float loss, bool alphas, bool masks,
                     void (*tweak)(ex_metrics_step *))
{
    ex_metrics_record *r = calloc(1, sizeof *r);
    r->kind = EX_METRICS_STEP;
    ex_metrics_step *s = &r->step;
    s->global_step = g;
    s->step = g;
    s->train_loss = loss;
    s->train_acc = 0.5;
    s->step_ms = 10;
    s->images_per_s = 100;
    if (alphas) {
        s->has_alphas = true;
        s->has_active = masks;
        s->n_edges = 14;
        s->n_cands = 8;
        for (int e = 0; e < 14; e++)
            for (int k = 0; k < 8; k++) {
                s->alpha_normal[e][k] = s->alpha_reduce[e][k] = 0.125f;
                s->active_normal[e][k] = s->active_reduce[e][k] = 1;
            }
        if (tweak)
            tweak(s);
    }
    ex_viz_model_add(m, r);
    free(r);
}

/* Renders m as view v into a software surface (no display). */
static SDL_Surface *render_view(ex_viz_model *m, const char *font, bool *has_font,
                                const ex_viz_view *v)
{
    SDL_Surface *s = SDL_CreateRGBSurfaceWithFormat(0, W, H, 32, SDL_PIXELFORMAT_RGB888);
    assert_non_null(s);
    SDL_Renderer *sr = SDL_CreateSoftwareRenderer(s);
    assert_non_null(sr);
    ex_viz_renderer *r = NULL;
    char msg[256], why[256];
    assert_int_equal(ex_viz_renderer_new(sr, font, &r, msg, sizeof msg), EX_OK);
    if (has_font)
        *has_font = ex_viz_renderer_font(r, why, sizeof why)[0] != 0;
    ex_viz_draw(r, m, v, W, H);
    SDL_RenderPresent(sr);
    ex_viz_renderer_free(r);
    SDL_DestroyRenderer(sr);
    return s;
}

static SDL_Surface *render(ex_viz_model *m, const char *font, bool *has_font)
{
    ex_viz_view v = ex_viz_view_default();
    return render_view(m, font, has_font, &v);
}

static SDL_Color pixel(SDL_Surface *s, int x, int y)
{
    assert_true(x >= 0 && x < s->w && y >= 0 && y < s->h);
    uint32_t p = ((const uint32_t *)s->pixels)[(size_t)y * (size_t)(s->pitch / 4) + (size_t)x];
    return (SDL_Color){(uint8_t)(p >> 16), (uint8_t)(p >> 8), (uint8_t)p, 255};
}

static void assert_color(SDL_Color a, SDL_Color b)
{
    if (a.r != b.r || a.g != b.g || a.b != b.b)
        fail_msg("pixel (%d,%d,%d), expected (%d,%d,%d)", a.r, a.g, a.b, b.r, b.g, b.b);
}

static bool same(SDL_Color a, SDL_Color b)
{
    return a.r == b.r && a.g == b.g && a.b == b.b;
}

static SDL_Color center(SDL_Surface *s, SDL_Rect q)
{
    return pixel(s, q.x + q.w / 2, q.y + q.h / 2);
}

/* ---- heatmap ---- */

static void known_alpha(ex_metrics_step *s)
{
    s->alpha_normal[3][5] = 0.5f;
    s->alpha_normal[3][1] = 0.0f;
    s->alpha_normal[4][2] = 1.0f;
    s->alpha_reduce[7][6] = 0.75f;
}

static void test_colormap(void **state)
{
    (void)state;
    assert_color(ex_viz_colormap(0.0f), (SDL_Color){68, 1, 84, 255});
    assert_color(ex_viz_colormap(0.5f), (SDL_Color){33, 145, 140, 255});
    assert_color(ex_viz_colormap(1.0f), (SDL_Color){253, 231, 37, 255});
    assert_color(ex_viz_colormap(2.0f), ex_viz_colormap(1.0f));
    assert_color(ex_viz_colormap(NAN), ex_viz_colormap(0.0f));
}

static void test_heatmap_colours(void **state)
{
    (void)state;
    ex_viz_model *m = new_model();
    add_header(m, "darts");
    add_step(m, 0, 2.0f, true, false, known_alpha);
    SDL_Surface *s = render(m, NULL, NULL);
    ex_viz_layout l;
    ex_viz_layout_compute(W, H, &l);
    SDL_Rect q;
    assert_true(ex_viz_heatmap_rect(m, &l, EX_VIZ_NORMAL, 3, 5, &q));
    assert_true(q.w > 4 && q.h > 4);
    assert_color(center(s, q), (SDL_Color){33, 145, 140, 255});
    assert_true(ex_viz_heatmap_rect(m, &l, EX_VIZ_NORMAL, 3, 1, &q));
    assert_color(center(s, q), (SDL_Color){68, 1, 84, 255});
    assert_true(ex_viz_heatmap_rect(m, &l, EX_VIZ_NORMAL, 4, 2, &q));
    assert_color(center(s, q), (SDL_Color){253, 231, 37, 255});
    /* the colours span each cell's own range: the reduction cell's 0.125 to 0.75 */
    assert_true(ex_viz_heatmap_rect(m, &l, EX_VIZ_REDUCE, 7, 6, &q));
    assert_color(center(s, q), ex_viz_colormap(1.0f));
    assert_true(ex_viz_heatmap_rect(m, &l, EX_VIZ_REDUCE, 0, 0, &q));
    assert_color(center(s, q), ex_viz_colormap(0.0f));
    assert_false(ex_viz_heatmap_rect(m, &l, EX_VIZ_NORMAL, 14, 0, &q));
    assert_false(ex_viz_heatmap_rect(m, &l, EX_VIZ_NORMAL, 0, 8, &q));
    SDL_FreeSurface(s);
    ex_viz_model_free(m);
}

/* A search's early weights lie close together: 0.114 to 0.137 must not be one colour. */
static void narrow_alpha(ex_metrics_step *s)
{
    s->alpha_normal[0][0] = 0.114f;
    s->alpha_normal[1][1] = 0.137f;
}

static void test_narrow_range(void **state)
{
    (void)state;
    ex_viz_model *m = new_model();
    add_header(m, "darts");
    add_step(m, 0, 2.0f, true, false, narrow_alpha);
    SDL_Surface *s = render(m, NULL, NULL);
    ex_viz_layout l;
    ex_viz_layout_compute(W, H, &l);
    SDL_Rect lo, hi, mid;
    assert_true(ex_viz_heatmap_rect(m, &l, EX_VIZ_NORMAL, 0, 0, &lo));
    assert_true(ex_viz_heatmap_rect(m, &l, EX_VIZ_NORMAL, 1, 1, &hi));
    assert_true(ex_viz_heatmap_rect(m, &l, EX_VIZ_NORMAL, 2, 2, &mid));
    assert_color(center(s, lo), ex_viz_colormap(0.0f));
    assert_color(center(s, hi), ex_viz_colormap(1.0f));
    assert_color(center(s, mid), ex_viz_colormap((0.125f - 0.114f) / (0.137f - 0.114f)));
    assert_false(same(center(s, lo), center(s, mid)));
    assert_false(same(center(s, mid), center(s, hi)));
    SDL_FreeSurface(s);
    ex_viz_model_free(m);
}

/* A model whose genotype record holds text (DARTS_V2's form, or a short one). */
static ex_viz_model *with_genotype(const char *text)
{
    ex_viz_model *m = new_model();
    add_header(m, "darts");
    ex_metrics_record *r = calloc(1, sizeof *r);
    r->kind = EX_METRICS_GENOTYPE;
    snprintf(r->genotype.text, sizeof r->genotype.text, "%s", text);
    ex_viz_model_add(m, r);
    free(r);
    return m;
}

/* Pixels of the second line of the notes bar that are not its background. */
static int second_line_ink(SDL_Surface *s)
{
    ex_viz_layout l;
    ex_viz_layout_compute(W, H, &l);
    SDL_Rect p = l.panel[EX_VIZ_PANEL_NOTES];
    SDL_Color bg = pixel(s, p.x + p.w - 2, p.y + p.h - 2);
    int ink = 0;
    for (int y = p.y + 3 + 15 + 2; y < p.y + 3 + 2 * 15; y++)
        for (int x = p.x; x < p.x + p.w; x++)
            ink += !same(pixel(s, x, y), bg);
    return ink;
}

/* The genotype is wrapped to the window, not cut at its edge. */
static void test_genotype_wraps(void **state)
{
    (void)state;
    ex_genotype g;
    char text[EX_GENOTYPE_TEXT_MAX];
    assert_int_equal(ex_genotype_builtin("DARTS_V2", &g), EX_OK);
    ex_genotype_format(&g, text, sizeof text);
    bool has_font = false;
    ex_viz_model *m = with_genotype(text);
    SDL_Surface *s = render(m, NULL, &has_font);
    if (!has_font)
        fail_msg("no font: the text layout cannot be checked (install fonts-dejavu-core)");
    int long_ink = second_line_ink(s);
    SDL_FreeSurface(s);
    ex_viz_model_free(m);
    m = with_genotype("Genotype(normal=[('skip_connect', 0)])");
    s = render(m, NULL, NULL);
    int short_ink = second_line_ink(s);
    SDL_FreeSurface(s);
    ex_viz_model_free(m);
    assert_int_equal(short_ink, 0);
    assert_true(long_ink > 50);
}

/* A training's log: its steps have no evaluation; each epoch record's (the test split's)
 * figures are drawn at the epoch's last step, as markers joined by a line. */
static void test_training_curve(void **state)
{
    (void)state;
    ex_viz_model *m = new_model();
    add_header(m, "train");
    ex_metrics_record *r = calloc(1, sizeof *r);
    for (int i = 0; i < 10; i++) {
        add_step(m, i, 2.0f - 0.1f * (float)i, false, false, NULL);
        if (i % 5 != 4)
            continue;
        memset(r, 0, sizeof *r);
        r->kind = EX_METRICS_EPOCH;
        r->epoch.epoch = i / 5;
        r->epoch.valid_loss = 1.5f - 0.5f * (float)(i / 5);
        r->epoch.valid_acc = 0.4f + 0.2f * (float)(i / 5);
        ex_viz_model_add(m, r);
    }
    free(r);
    SDL_Surface *s = render(m, NULL, NULL);
    ex_viz_layout l;
    ex_viz_layout_compute(W, H, &l);
    int x, y, x2, y2;
    assert_false(ex_viz_curve_point(m, &l, EX_VIZ_VALID_ACC, 3, &x, &y));
    assert_true(ex_viz_curve_point(m, &l, EX_VIZ_VALID_ACC, 4, &x, &y));
    assert_true(ex_viz_curve_point(m, &l, EX_VIZ_VALID_ACC, 9, &x2, &y2));
    assert_true(y2 < y); /* 0.6 above 0.4 */
    SDL_Color c = ex_viz_series_color(EX_VIZ_VALID_ACC);
    assert_color(pixel(s, x, y), c);
    assert_color(pixel(s, x + 2, y + 2), c);               /* the marker */
    assert_color(pixel(s, (x + x2) / 2, (y + y2) / 2), c); /* the line between */
    SDL_FreeSurface(s);
    ex_viz_model_free(m);
}

/* The curves' x axis is named: "step" under the middle of each plot. */
static void test_x_axis_named(void **state)
{
    (void)state;
    ex_viz_model *m = new_model();
    add_header(m, "darts");
    bool has_font = false;
    SDL_Surface *s = render(m, NULL, &has_font);
    if (!has_font)
        fail_msg("no font: the axis names cannot be checked (install fonts-dejavu-core)");
    ex_viz_layout l;
    ex_viz_layout_compute(W, H, &l);
    SDL_Rect p = l.panel[EX_VIZ_PANEL_LOSS];
    /* ink: pixels unlike their row's colour away from the word (the background, or a
     * grid line's colour on a grid row) */
    int ink = 0, mid = p.x + 50 + (p.w - 58) / 2;
    for (int y = p.y + p.h - 22; y < p.y + p.h - 2; y++)
        for (int x = mid - 20; x < mid + 20; x++)
            ink += !same(pixel(s, x, y), pixel(s, mid - 60, y));
    assert_true(ink > 20);
    SDL_FreeSurface(s);
    ex_viz_model_free(m);
}

/* ---- the cell graph's layout ---- */

/* A model of one cell of `steps` nodes over the first ncand of DARTS's candidates, with α
 * that vary from edge to edge. */
static ex_viz_model *graph_model(int steps, int ncand)
{
    ex_viz_model *m = new_model();
    ex_metrics_record *r = calloc(1, sizeof *r);
    r->kind = EX_METRICS_HEADER;
    ex_metrics_header *h = &r->header;
    snprintf(h->config, sizeof h->config, "{}");
    snprintf(h->mode, sizeof h->mode, "darts");
    h->n_candidates = ncand;
    for (int k = 0; k < ncand; k++)
        snprintf(h->candidates[k], sizeof h->candidates[k], "%s", cands[k]);
    for (int node = 0; node < steps; node++)
        for (int in = 0; in < 2 + node; in++, h->n_edges++) {
            h->edges[h->n_edges][0] = 2 + node;
            h->edges[h->n_edges][1] = in;
        }
    int edges = h->n_edges;
    ex_viz_model_add(m, r);
    memset(r, 0, sizeof *r);
    r->kind = EX_METRICS_STEP;
    r->step.has_alphas = true;
    r->step.n_edges = edges;
    r->step.n_cands = ncand;
    for (int e = 0; e < edges; e++)
        for (int k = 0; k < ncand; k++)
            r->step.alpha_normal[e][k] = r->step.alpha_reduce[e][k] =
                0.1f + 0.01f * (float)((e * 7 + k * 3) % 11);
    ex_viz_model_add(m, r);
    free(r);
    return m;
}

static int test_text_w(void *ctx, const char *text)
{
    (void)ctx;
    return 8 * (int)strlen(text); /* wider than DejaVu Sans 12's glyphs */
}

static bool inside(SDL_Rect q, int x, int y)
{
    return x > q.x && x < q.x + q.w - 1 && y > q.y && y < q.y + q.h - 1;
}

/* No two labels overlap, no label covers a node, and no edge passes through a node other
 * than its two ends (every pixel of its polyline checked). */
static void check_graph(int steps, int ncand)
{
    ex_viz_model *m = graph_model(steps, ncand);
    ex_viz_layout l;
    ex_viz_layout_compute(W, H, &l);
    SDL_Rect p = l.panel[EX_VIZ_PANEL_GRAPH];
    SDL_Rect g = {p.x + 6, p.y + VIZ_TITLE_H + 4, p.w - 12, p.h - VIZ_TITLE_H - 52};
    viz_graph *v = calloc(1, sizeof *v);
    viz_graph_layout(m, 0, EX_VIZ_NORMAL, g, 15, test_text_w, NULL, v);
    assert_int_equal(v->n_states, steps + 3);
    int labels = 0;
    for (int i = 0; i < v->n_edges; i++) {
        const viz_graph_edge *a = &v->e[i];
        labels += a->labelled;
        for (int j = 0; a->labelled && j < v->n_edges; j++)
            if (j != i && v->e[j].labelled && SDL_HasIntersection(&a->label, &v->e[j].label))
                fail_msg("labels of edges %d and %d overlap", i, j);
        for (int n = 0; a->labelled && n < v->n_states; n++)
            if (SDL_HasIntersection(&a->label, &v->node[n]))
                fail_msg("the label of edge %d covers state %d", i, n);
        for (int k = 0; k + 1 < VIZ_ARC_POINTS; k++) {
            SDL_Point p0 = a->arc[k], p1 = a->arc[k + 1];
            int len = abs(p1.x - p0.x) + abs(p1.y - p0.y) + 1;
            for (int t = 0; t <= len; t++) {
                int x = p0.x + (p1.x - p0.x) * t / len, y = p0.y + (p1.y - p0.y) * t / len;
                for (int n = 0; n < v->n_states; n++)
                    if (n != a->from && n != a->to && inside(v->node[n], x, y))
                        fail_msg("edge %d (%d to %d) crosses state %d at (%d, %d)", i, a->from,
                                 a->to, n, x, y);
            }
        }
    }
    assert_int_equal(labels, 2 * steps); /* DARTS keeps two inputs a node */
    free(v);
    ex_viz_model_free(m);
}

static void test_graph_layout(void **state)
{
    (void)state;
    check_graph(4, 8); /* DARTS's cell */
    check_graph(3, 6); /* the quick preset's: three nodes, six candidates */
}

/* Pixels of a that b covers. */
static int64_t covered(SDL_Rect a, SDL_Rect b)
{
    SDL_Rect i;
    return SDL_IntersectRect(&a, &b, &i) ? (int64_t)i.w * i.h : 0;
}

/* A panel too small for labels that cover nothing: each label sits at a point of its arc,
 * and where it covers nodes or earlier labels, no other point of its arc would cover
 * fewer of their pixels. */
static void test_graph_cramped(void **state)
{
    (void)state;
    ex_viz_model *m = graph_model(4, 8);
    viz_graph *v = calloc(1, sizeof *v);
    SDL_Rect g = {10, 10, 150, 90};
    viz_graph_layout(m, 0, EX_VIZ_NORMAL, g, 15, test_text_w, NULL, v);
    int crowded = 0;
    for (int i = 0; i < v->n_edges; i++) {
        const viz_graph_edge *a = &v->e[i];
        if (!a->labelled)
            continue;
        int64_t best = INT64_MAX, got = -1;
        for (int k = 2; k <= 10; k++) { /* the arc points place_label tries */
            SDL_Rect q = {a->arc[k].x + 3, a->arc[k].y - 15 / 2, a->label.w, a->label.h};
            int64_t hidden = 0;
            for (int n = 0; n < v->n_states; n++)
                hidden += covered(q, v->node[n]);
            for (int j = 0; j < i; j++)
                hidden += v->e[j].labelled ? covered(q, v->e[j].label) : 0;
            best = hidden < best ? hidden : best;
            if (q.x == a->label.x && q.y == a->label.y)
                got = hidden;
        }
        if (got < 0)
            fail_msg("the label of edge %d is at no point of its arc", i);
        if (got != best)
            fail_msg("the label of edge %d covers %lld pixels; %lld was possible", i,
                     (long long)got, (long long)best);
        crowded += got > 0;
    }
    assert_true(crowded > 0); /* the fallback was needed here */
    free(v);
    ex_viz_model_free(m);
}

/* ---- pruned candidates ---- */

static void pruned_mask(ex_metrics_step *s)
{
    s->alpha_normal[2][1] = 0.25f;
    s->active_normal[2][1] = 0;
    s->alpha_normal[2][4] = 0.25f;
}

static void test_pruned(void **state)
{
    (void)state;
    ex_viz_model *m = new_model();
    add_header(m, "topk");
    add_step(m, 0, 2.0f, true, true, pruned_mask);
    SDL_Surface *s = render(m, NULL, NULL);
    ex_viz_layout l;
    ex_viz_layout_compute(W, H, &l);
    SDL_Rect q;
    assert_true(ex_viz_heatmap_rect(m, &l, EX_VIZ_NORMAL, 2, 1, &q));
    /* the cross runs through the corners; the fill shows between its arms */
    assert_color(pixel(s, q.x, q.y), ex_viz_pruned_mark());
    assert_color(pixel(s, q.x + q.w - 1, q.y), ex_viz_pruned_mark());
    assert_color(pixel(s, q.x + q.w / 2, q.y), ex_viz_pruned_fill());
    assert_false(same(pixel(s, q.x + q.w / 2, q.y), ex_viz_colormap(1.0f)));
    /* the same weight on an active candidate is drawn by its colour: the top of the
     * scale, which spans the computed candidates only (0.125 to 0.25) */
    assert_true(ex_viz_heatmap_rect(m, &l, EX_VIZ_NORMAL, 2, 4, &q));
    assert_color(center(s, q), ex_viz_colormap(1.0f));
    assert_color(pixel(s, q.x + q.w / 2, q.y + 1), ex_viz_colormap(1.0f));
    SDL_FreeSurface(s);
    ex_viz_model_free(m);
}

/* ---- curves ---- */

static void check_curve(int n)
{
    ex_viz_model *m = new_model();
    add_header(m, "darts");
    for (int i = 0; i < n; i++)
        add_step(m, i, 3.0f - 2.0f * (float)i / (float)(n - 1) + 0.3f * sinf((float)i * 0.37f),
                 i % 10 == 0, false, NULL);
    SDL_Surface *s = render(m, NULL, NULL);
    ex_viz_layout l;
    ex_viz_layout_compute(W, H, &l);
    SDL_Color c = ex_viz_series_color(EX_VIZ_TRAIN_LOSS);
    int x0, y0, x1, y1;
    assert_true(ex_viz_curve_point(m, &l, EX_VIZ_TRAIN_LOSS, 0, &x0, &y0));
    assert_true(ex_viz_curve_point(m, &l, EX_VIZ_TRAIN_LOSS, n - 1, &x1, &y1));
    /* the loss falls: the curve starts high on the left and ends low on the right */
    assert_true(x1 > x0 + 100);
    assert_true(y1 > y0 + 50);
    for (int i = 0; i < n; i += n / 25 + 1) {
        int x, y;
        assert_true(ex_viz_curve_point(m, &l, EX_VIZ_TRAIN_LOSS, i, &x, &y));
        assert_color(pixel(s, x, y), c);
    }
    if (getenv("EXAPT_VIZ_TEST_PNG"))
        IMG_SavePNG(s, getenv("EXAPT_VIZ_TEST_PNG"));
    /* no curve where the data is not: at the end, as high as the start */
    if (same(pixel(s, x1, y0), c))
        fail_msg("n %d: curve colour at (%d, %d)", n, x1, y0);
    assert_false(ex_viz_curve_point(m, &l, EX_VIZ_VALID_LOSS, 0, &x0, &y0)); /* no valid */
    SDL_FreeSurface(s);
    ex_viz_model_free(m);
}

static void test_curves(void **state)
{
    (void)state;
    check_curve(60);    /* fewer points than pixels: a line through each */
    check_curve(10000); /* more: each column spans its points */
}

/* ---- scrubbing and hover ---- */

static void first_alpha(ex_metrics_step *s)
{
    s->alpha_normal[0][0] = 1.0f;
}

static void later_alpha(ex_metrics_step *s)
{
    s->alpha_normal[0][0] = 0.0f;
}

static void test_scrub_and_hover(void **state)
{
    (void)state;
    ex_viz_model *m = new_model();
    add_header(m, "darts");
    add_step(m, 0, 2.0f, true, false, first_alpha);
    add_step(m, 1, 1.9f, false, false, NULL); /* no α: the step before's stay in force */
    add_step(m, 2, 1.8f, true, false, later_alpha);
    ex_viz_layout l;
    ex_viz_layout_compute(W, H, &l);
    SDL_Rect q;
    assert_true(ex_viz_heatmap_rect(m, &l, EX_VIZ_NORMAL, 0, 0, &q));
    ex_viz_view v = ex_viz_view_default();
    SDL_Surface *s = render_view(m, NULL, NULL, &v);
    assert_color(center(s, q), ex_viz_colormap(0.0f)); /* the latest */
    SDL_FreeSurface(s);
    v.cursor = 1;
    s = render_view(m, NULL, NULL, &v);
    assert_color(center(s, q), ex_viz_colormap(1.0f)); /* scrubbed back */
    SDL_FreeSurface(s);
    /* the mouse over a cell opens the read-out box beside it */
    v.cursor = -1;
    v.mouse_x = q.x + q.w / 2;
    v.mouse_y = q.y + q.h / 2;
    s = render_view(m, NULL, NULL, &v);
    assert_color(pixel(s, v.mouse_x + 15, v.mouse_y + 17), (SDL_Color){8, 8, 10, 255});
    SDL_FreeSurface(s);
    ex_viz_model_free(m);
}

/* ---- one renderer, several models ---- */

static void add_profile(ex_viz_model *m, int64_t g, double gbs)
{
    ex_metrics_record *r = calloc(1, sizeof *r);
    r->kind = EX_METRICS_PROFILE;
    r->profile.global_step = g;
    r->profile.n_candidates = 8;
    for (int k = 0; k < 8; k++) {
        snprintf(r->profile.candidates[k].candidate, EX_METRICS_NAME_MAX, "%s", cands[k]);
        r->profile.candidates[k].gbs = gbs + k;
        r->profile.candidates[k].ms = 1;
    }
    ex_viz_model_add(m, r);
    free(r);
}

/* Whether two surfaces hold the same pixels. */
static bool same_pixels(SDL_Surface *a, SDL_Surface *b)
{
    for (int y = 0; y < a->h; y++)
        if (memcmp((const uint8_t *)a->pixels + (size_t)y * (size_t)a->pitch,
                   (const uint8_t *)b->pixels + (size_t)y * (size_t)b->pitch, (size_t)a->w * 4))
            return false;
    return true;
}

/* Whether colour c shows anywhere in rectangle q of s. */
static bool shows(SDL_Surface *s, SDL_Rect q, SDL_Color c)
{
    for (int y = q.y; y < q.y + q.h; y++)
        for (int x = q.x; x < q.x + q.w; x++)
            if (same(pixel(s, x, y), c))
                return true;
    return false;
}

/* A renderer draws a copy of what the frame shows (so that drawing holds no lock a search
 * waits for): a frame drawn after other models and views, with the same renderer, must be
 * the frame a new renderer draws. */
static void test_renderer_reused(void **state)
{
    (void)state;
    ex_viz_model *big = new_model(), *small = new_model();
    add_header(big, "topk");
    for (int i = 0; i < 3000; i++) {
        add_step(big, i, 3.0f - (float)i / 1000.0f, i % 7 == 0, true,
                 i < 1500 ? first_alpha : NULL);
        if (i % 50 == 0)
            add_profile(big, i, 1 + i / 500);
    }
    add_header(small, "darts");
    add_step(small, 0, 2.0f, true, false, later_alpha);
    add_step(small, 1, 1.5f, false, false, NULL);
    add_profile(small, 1, 7);
    ex_viz_view v = ex_viz_view_default(), scrubbed = v;
    scrubbed.cursor = 700; /* a step without α, a profile before it */
    scrubbed.mouse_x = 200;
    scrubbed.mouse_y = 200;
    SDL_Surface *fresh = render_view(small, NULL, NULL, &v);
    SDL_Surface *fresh_big = render_view(big, NULL, NULL, &scrubbed);
    SDL_Surface *s = SDL_CreateRGBSurfaceWithFormat(0, W, H, 32, SDL_PIXELFORMAT_RGB888);
    SDL_Renderer *sr = SDL_CreateSoftwareRenderer(s);
    ex_viz_renderer *r = NULL;
    char msg[256];
    assert_int_equal(ex_viz_renderer_new(sr, NULL, &r, msg, sizeof msg), EX_OK);
    ex_viz_draw(r, big, &v, W, H);
    ex_viz_draw(r, big, &scrubbed, W, H);
    ex_viz_draw(r, small, &v, W, H);
    SDL_RenderPresent(sr);
    assert_true(same_pixels(s, fresh));
    ex_viz_draw(r, big, &scrubbed, W, H);
    SDL_RenderPresent(sr);
    assert_true(same_pixels(s, fresh_big));
    assert_false(same_pixels(fresh, fresh_big));
    /* the profile in view is drawn: its bars against the peak's red line */
    ex_viz_layout l;
    ex_viz_layout_compute(W, H, &l);
    assert_true(shows(fresh, l.panel[EX_VIZ_PANEL_BANDWIDTH], (SDL_Color){235, 70, 70, 255}));
    assert_true(shows(fresh_big, l.panel[EX_VIZ_PANEL_BANDWIDTH], (SDL_Color){235, 70, 70, 255}));
    ex_viz_renderer_free(r);
    SDL_DestroyRenderer(sr);
    SDL_FreeSurface(s);
    SDL_FreeSurface(fresh);
    SDL_FreeSurface(fresh_big);
    ex_viz_model_free(big);
    ex_viz_model_free(small);
}

/* ---- no font ---- */

static void test_no_font(void **state)
{
    (void)state;
    SDL_Surface *s = SDL_CreateRGBSurfaceWithFormat(0, 64, 64, 32, SDL_PIXELFORMAT_RGB888);
    SDL_Renderer *sr = SDL_CreateSoftwareRenderer(s);
    ex_viz_renderer *r = NULL;
    char msg[256], why[256];
    assert_int_equal(ex_viz_renderer_new(sr, "/nonexistent/font.ttf", &r, msg, sizeof msg), EX_OK);
    assert_string_equal(ex_viz_renderer_font(r, why, sizeof why), "");
    assert_non_null(strstr(why, "/nonexistent/font.ttf"));
    ex_viz_renderer_free(r);
    SDL_DestroyRenderer(sr);
    SDL_FreeSurface(s);
    /* and a whole frame still draws its panels */
    ex_viz_model *m = new_model();
    add_header(m, "darts");
    add_step(m, 0, 2.0f, true, false, known_alpha);
    bool has_font = true;
    s = render(m, "/nonexistent/font.ttf", &has_font);
    assert_false(has_font);
    ex_viz_layout l;
    ex_viz_layout_compute(W, H, &l);
    SDL_Rect q;
    assert_true(ex_viz_heatmap_rect(m, &l, EX_VIZ_NORMAL, 3, 5, &q));
    assert_color(center(s, q), (SDL_Color){33, 145, 140, 255});
    SDL_FreeSurface(s);
    ex_viz_model_free(m);
}

/* ---- bad logs ---- */

typedef struct scratch {
    char dir[64], path[128], png[128];
} scratch;

static int setup(void **state)
{
    scratch *s = calloc(1, sizeof *s);
    snprintf(s->dir, sizeof s->dir, "/tmp/exapt-viz-XXXXXX");
    if (!s || !mkdtemp(s->dir))
        return -1;
    snprintf(s->path, sizeof s->path, "%s/metrics.jsonl", s->dir);
    snprintf(s->png, sizeof s->png, "%s/shot.png", s->dir);
    *state = s;
    return 0;
}

static int teardown(void **state)
{
    scratch *s = *state;
    remove(s->path);
    remove(s->png);
    assert_int_equal(rmdir(s->dir), 0);
    free(s);
    return 0;
}

static const char header_line[] =
    "{\"type\":\"header\",\"format\":\"exapt-metrics\",\"version\":1,\"config\":{\"epochs\":1},"
    "\"candidates\":[\"none\",\"skip_connect\",\"sep_conv_3x3\"],\"edges\":[[2,0],[2,1]],"
    "\"backend\":\"cpu\",\"device\":\"test\",\"peak_gbs\":10,\"mode\":\"darts\","
    "\"time\":\"2024-01-02T03:04:05Z\"}\n";

static void step_line(char *buf, size_t len, int g, const char *alphas)
{
    snprintf(buf, len,
             "{\"type\":\"step\",\"epoch\":0,\"step\":%d,\"global_step\":%d,\"lr\":0.1,"
             "\"train_loss\":2.0,\"train_acc\":0.5,\"images_per_s\":10,\"step_ms\":5%s%s}\n",
             g, g, alphas ? ",\"alphas\":" : "", alphas ? alphas : "");
}

static void write_file(const char *path, const char *text, const char *mode)
{
    FILE *f = fopen(path, mode);
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* Reads path once into a new model, as `exapt viz RUN_DIR` does. */
static ex_viz_model *read_log(const char *path, ex_status *st)
{
    ex_viz_model *m = new_model();
    ex_viz_follow *f = NULL;
    char msg[256];
    int64_t added = 0;
    assert_int_equal(ex_viz_follow_new(path, m, &f, msg, sizeof msg), EX_OK);
    *st = ex_viz_follow_poll(f, &added, msg, sizeof msg);
    ex_viz_follow_free(f);
    return m;
}

static bool has_note(ex_viz_model *m, const char *word)
{
    char t[256];
    for (int i = 0; i < ex_viz_model_notes(m); i++) {
        ex_viz_model_note_text(m, i, t, sizeof t);
        if (strstr(t, word))
            return true;
    }
    return false;
}

static void snapshot_ok(ex_viz_model *m, const scratch *s)
{
    char msg[256];
    ex_viz_view v = ex_viz_view_default();
    assert_int_equal(ex_viz_snapshot(m, &v, 800, 500, s->png, msg, sizeof msg), EX_OK);
    assert_int_equal(access(s->png, R_OK), 0);
}

static void test_truncated(void **state)
{
    scratch *s = *state;
    char line[512];
    write_file(s->path, header_line, "w");
    for (int g = 0; g < 3; g++) {
        step_line(line, sizeof line, g,
                  "{\"normal\":[[0.2,0.3,0.5],[0.1,0.1,0.8]],"
                  "\"reduce\":[[0.2,0.3,0.5],[0.1,0.1,0.8]]}");
        write_file(s->path, line, "a");
    }
    write_file(s->path, "{\"type\":\"step\",\"epoch\":0,\"st", "a");
    ex_status st;
    ex_viz_model *m = read_log(s->path, &st);
    assert_int_equal(st, EX_OK);
    assert_int_equal(ex_viz_model_steps(m), 3);
    assert_int_equal(ex_viz_model_snapshots(m), 3);
    assert_true(has_note(m, "incomplete line"));
    snapshot_ok(m, s);
    ex_viz_model_free(m);
}

static void test_empty(void **state)
{
    scratch *s = *state;
    write_file(s->path, "", "w");
    ex_status st;
    ex_viz_model *m = read_log(s->path, &st);
    assert_int_equal(st, EX_OK);
    assert_int_equal(ex_viz_model_steps(m), 0);
    assert_true(has_note(m, "empty"));
    snapshot_ok(m, s);
    ex_viz_model_free(m);
}

static void test_other_configuration(void **state)
{
    scratch *s = *state;
    char line[512];
    write_file(s->path, header_line, "w");
    /* 3 x 2 where the header says 2 edges x 3 candidates, then a good one, then garbage */
    step_line(line, sizeof line, 0,
              "{\"normal\":[[0.5,0.5],[0.5,0.5],[0.5,0.5]],"
              "\"reduce\":[[0.5,0.5],[0.5,0.5],[0.5,0.5]]}");
    write_file(s->path, line, "a");
    step_line(line, sizeof line, 1,
              "{\"normal\":[[0.2,0.3,0.5],[0.1,0.1,0.8]],"
              "\"reduce\":[[0.2,0.3,0.5],[0.1,0.1,0.8]]}");
    write_file(s->path, line, "a");
    write_file(s->path, "{\"type\":\"step\",\"epoch\":\"zero\"}\nnot json\n", "a");
    write_file(s->path, "{\"type\":\"hyperparameters\",\"x\":1}\n", "a");
    ex_status st;
    ex_viz_model *m = read_log(s->path, &st);
    assert_int_equal(st, EX_OK);
    assert_int_equal(ex_viz_model_steps(m), 2);     /* both curves' points */
    assert_int_equal(ex_viz_model_snapshots(m), 1); /* only the α that fits */
    assert_true(has_note(m, "does not match the header"));
    assert_true(has_note(m, "2 unreadable lines"));
    assert_true(has_note(m, "line 4"));
    assert_true(has_note(m, "unknown type"));
    snapshot_ok(m, s);
    ex_viz_model_free(m);
}

static void test_newer_version(void **state)
{
    scratch *s = *state;
    write_file(s->path,
               "{\"type\":\"header\",\"format\":\"exapt-metrics\",\"version\":99,\"config\":{},"
               "\"candidates\":[],\"edges\":[],\"backend\":\"cpu\",\"device\":\"x\","
               "\"peak_gbs\":1,\"mode\":\"darts\",\"time\":\"\"}\n",
               "w");
    ex_status st;
    ex_viz_model *m = read_log(s->path, &st);
    assert_int_equal(st, EX_ERR_UNSUPPORTED);
    ex_viz_model_free(m);
}

static void test_follow_replaced(void **state)
{
    scratch *s = *state;
    char line[512], msg[256];
    ex_viz_model *m = new_model();
    ex_viz_follow *f = NULL;
    int64_t added = 0;
    assert_int_equal(ex_viz_follow_new(s->path, m, &f, msg, sizeof msg), EX_OK);
    assert_int_equal(ex_viz_follow_poll(f, &added, msg, sizeof msg), EX_OK); /* not there yet */
    assert_int_equal(added, 0);
    write_file(s->path, header_line, "w");
    for (int g = 0; g < 4; g++) {
        step_line(line, sizeof line, g, NULL);
        write_file(s->path, line, "a");
    }
    assert_int_equal(ex_viz_follow_poll(f, &added, msg, sizeof msg), EX_OK);
    assert_int_equal(added, 5);
    step_line(line, sizeof line, 4, NULL);
    write_file(s->path, line, "a");
    assert_int_equal(ex_viz_follow_poll(f, &added, msg, sizeof msg), EX_OK);
    assert_int_equal(added, 1);
    assert_int_equal(ex_viz_model_steps(m), 5);
    /* a resumed run rewrites the log shorter: read again from the start */
    write_file(s->path, header_line, "w");
    step_line(line, sizeof line, 0, NULL);
    write_file(s->path, line, "a");
    assert_int_equal(ex_viz_follow_poll(f, &added, msg, sizeof msg), EX_OK);
    assert_int_equal(ex_viz_model_steps(m), 1);
    ex_viz_follow_free(f);
    ex_viz_model_free(m);
}

/* --exit-when-done closes once the last epoch is in: exapt search records its epochs as
 * config.search.epochs (config.train.epochs are the found network's), exapt train as
 * config.epochs. */
static void finished_after(const char *config, int last_epoch)
{
    ex_metrics_record *r = calloc(1, sizeof *r);
    r->kind = EX_METRICS_HEADER;
    snprintf(r->header.config, sizeof r->header.config, "%s", config);
    ex_viz_model *m = new_model();
    ex_viz_model_add(m, r);
    for (int e = 0; e <= last_epoch; e++) {
        assert_false(ex_viz_model_finished(m));
        memset(r, 0, sizeof *r);
        r->kind = EX_METRICS_EPOCH;
        r->epoch.epoch = e;
        ex_viz_model_add(m, r);
    }
    assert_true(ex_viz_model_finished(m));
    ex_viz_model_free(m);
    free(r);
}

static void test_finished(void **state)
{
    (void)state;
    finished_after("{\"search\":{\"epochs\":3},\"train\":{\"epochs\":24}}", 2);
    finished_after("{\"epochs\":2,\"layers\":8}", 1);
    /* no epochs recorded: the run's end is unknown, the window stays */
    ex_viz_model *m = new_model();
    ex_metrics_record *r = calloc(1, sizeof *r);
    r->kind = EX_METRICS_HEADER;
    snprintf(r->header.config, sizeof r->header.config, "{\"search\":{\"layers\":8}}");
    ex_viz_model_add(m, r);
    memset(r, 0, sizeof *r);
    r->kind = EX_METRICS_EPOCH;
    ex_viz_model_add(m, r);
    assert_false(ex_viz_model_finished(m));
    ex_viz_model_free(m);
    free(r);
}

static void test_pause(void **state)
{
    (void)state;
    ex_viz_model *m = new_model();
    assert_false(ex_viz_model_wait_paused(m, 10));
    ex_viz_model_set_paused(m, true);
    assert_true(ex_viz_model_wait_paused(m, 20)); /* times out, still paused */
    ex_viz_model_set_paused(m, false);
    assert_false(ex_viz_model_wait_paused(m, 1000));
    ex_viz_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_colormap),
        cmocka_unit_test(test_heatmap_colours),
        cmocka_unit_test(test_narrow_range),
        cmocka_unit_test(test_genotype_wraps),
        cmocka_unit_test(test_training_curve),
        cmocka_unit_test(test_x_axis_named),
        cmocka_unit_test(test_graph_layout),
        cmocka_unit_test(test_graph_cramped),
        cmocka_unit_test(test_pruned),
        cmocka_unit_test(test_curves),
        cmocka_unit_test(test_scrub_and_hover),
        cmocka_unit_test(test_renderer_reused),
        cmocka_unit_test(test_no_font),
        cmocka_unit_test(test_pause),
        cmocka_unit_test(test_finished),
        cmocka_unit_test_setup_teardown(test_truncated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_empty, setup, teardown),
        cmocka_unit_test_setup_teardown(test_other_configuration, setup, teardown),
        cmocka_unit_test_setup_teardown(test_newer_version, setup, teardown),
        cmocka_unit_test_setup_teardown(test_follow_replaced, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
