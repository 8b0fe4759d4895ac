/* The α panels: heatmaps of both cells' softmax weights, the hover read-out, and the
 * cell drawn as a graph with each edge's winning candidate. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "viz/draw.h"

/* Edge e as (intermediate node, input state); inputs 0 and 1 are the cell's inputs. */
static void edge_ends(const ex_viz_model *m, int e, int *node, int *input)
{
    if (m->has_header && m->header.n_edges == m->edges) {
        int lo = 1 << 30;
        for (int i = 0; i < m->header.n_edges; i++)
            lo = m->header.edges[i][0] < lo ? m->header.edges[i][0] : lo;
        /* the writer numbers nodes as states (2 + i); docs/metrics.md as intermediates */
        *node = m->header.edges[e][0] - (lo >= 2 ? 2 : 0);
        *input = m->header.edges[e][1];
        return;
    }
    int k = 0;
    for (int i = 0;; i++)
        for (int j = 0; j < 2 + i; j++, k++)
            if (k == e) {
                *node = i;
                *input = j;
                return;
            }
}

static void state_name(int s, char *buf, size_t len)
{
    if (s < 2)
        snprintf(buf, len, "%s", s == 0 ? "k-2" : "k-1");
    else
        snprintf(buf, len, "n%d", s - 2);
}

static const char *cand_name(const ex_viz_model *m, int k, char *buf, size_t len)
{
    if (m->has_header && k < m->header.n_candidates)
        return m->header.candidates[k];
    snprintf(buf, len, "candidate %d", k);
    return buf;
}

static const float *snap_alpha(const ex_viz_model *m, int64_t s, ex_viz_cell cell)
{
    size_t per = (size_t)m->edges * (size_t)m->cands;
    return m->alpha + (size_t)s * 2 * per + (cell == EX_VIZ_REDUCE ? per : 0);
}

static const uint8_t *snap_active(const ex_viz_model *m, int64_t s, ex_viz_cell cell)
{
    size_t per = (size_t)m->edges * (size_t)m->cands;
    return m->active + (size_t)s * 2 * per + (cell == EX_VIZ_REDUCE ? per : 0);
}

/* The heatmap grid's origin and cell size inside its panel. */
static bool grid(const ex_viz_model *m, const ex_viz_layout *l, ex_viz_cell cell, int *gx, int *gy,
                 int *cw, int *ch)
{
    if (m->n_snap == 0)
        return false;
    SDL_Rect p =
        l->panel[cell == EX_VIZ_NORMAL ? EX_VIZ_PANEL_ALPHA_NORMAL : EX_VIZ_PANEL_ALPHA_REDUCE];
    int title = VIZ_TITLE_H, label_w = 64, head = 18;
    *gx = p.x + 6 + label_w;
    *gy = p.y + title + head;
    *cw = (p.w - 12 - label_w) / m->cands;
    *ch = (p.h - title - head - 4) / m->edges;
    return *cw >= 2 && *ch >= 2;
}

bool viz_heatmap_rect(const ex_viz_model *m, const ex_viz_layout *l, ex_viz_cell cell, int edge,
                      int cand, SDL_Rect *out)
{
    int gx, gy, cw, ch;
    if (!grid(m, l, cell, &gx, &gy, &cw, &ch) || edge < 0 || edge >= m->edges || cand < 0 ||
        cand >= m->cands)
        return false;
    *out = (SDL_Rect){gx + cand * cw, gy + edge * ch, cw - 1, ch - 1};
    return true;
}

/* The candidate an edge's α favours: the largest weight, `none` excepted as in DARTS. */
static int winner(const ex_viz_model *m, const float *row)
{
    int best = -1;
    for (int k = 0; k < m->cands; k++) {
        if (m->has_header && k < m->header.n_candidates && !strcmp(m->header.candidates[k], "none"))
            continue;
        if (best < 0 || row[k] > row[best])
            best = k;
    }
    return best < 0 ? 0 : best;
}

static void no_alpha(ex_viz_renderer *r, const ex_viz_model *m, SDL_Rect c)
{
    char t[200];
    if (m->has_header && m->header.n_candidates == 0)
        snprintf(t, sizeof t, "no architecture weights in this log (mode %s)", m->header.mode);
    else
        snprintf(t, sizeof t, "no alpha in the log yet");
    viz_text_draw(r, c.x + 4, c.y + 4, t, viz_dim, VIZ_LEFT);
}

/* The range the colours span: the smallest and largest α of the cell's candidates that are
 * computed. A scale fixed to [0, 1] paints a search's early weights (all near 1/8) one
 * colour; over the data's range the differences show, and the legend gives the range. */
typedef struct scale {
    float lo, hi;
} scale;

static scale cell_scale(const ex_viz_model *m, const float *a, const uint8_t *act, bool masked)
{
    scale s = {1, 0};
    for (int i = 0; i < m->edges * m->cands; i++) {
        if ((masked && !act[i]) || !(a[i] == a[i]))
            continue;
        s.lo = a[i] < s.lo ? a[i] : s.lo;
        s.hi = a[i] > s.hi ? a[i] : s.hi;
    }
    return s;
}

/* p's place on the scale, 0 to 1 (the middle when the range is a single value). */
static float scaled(scale s, float p)
{
    return s.hi - s.lo > 1e-6f ? (p - s.lo) / (s.hi - s.lo) : 0.5f;
}

/* The legend: a colour bar from the lowest to the highest value, both written beside it,
 * at the right of the panel's title row. */
static void legend(ex_viz_renderer *r, SDL_Rect panel, scale s)
{
    enum { BAR_W = 96, BAR_H = 8 };
    char lo[16], hi[16];
    /* as many decimals as it takes the two ends to differ (up to 6) */
    for (int d = 3; d <= 6; d++) {
        snprintf(lo, sizeof lo, "%.*f", d, (double)s.lo);
        snprintf(hi, sizeof hi, "%.*f", d, (double)s.hi);
        if (strcmp(lo, hi))
            break;
    }
    int hi_x = panel.x + panel.w - 6;
    int bar_x = hi_x - viz_text_width(r, hi) - 4 - BAR_W;
    int y = panel.y + 3;
    for (int i = 0; i < BAR_W; i++)
        viz_fill(r, bar_x + i, y + r->line_h / 2 - BAR_H / 2, 1, BAR_H,
                 ex_viz_colormap((float)i / (float)(BAR_W - 1)));
    viz_text_draw(r, bar_x - 4, y, lo, viz_dim, VIZ_RIGHT);
    viz_text_draw(r, hi_x, y, hi, viz_dim, VIZ_RIGHT);
}

static void draw_cell(ex_viz_renderer *r, SDL_Rect q, float p, float on_scale, bool pruned,
                      bool win)
{
    char t[16];
    if (pruned) {
        viz_fill(r, q.x, q.y, q.w, q.h, ex_viz_pruned_fill());
        viz_line(r, q.x, q.y, q.x + q.w - 1, q.y + q.h - 1, 1, ex_viz_pruned_mark());
        viz_line(r, q.x + q.w - 1, q.y, q.x, q.y + q.h - 1, 1, ex_viz_pruned_mark());
        return;
    }
    viz_fill(r, q.x, q.y, q.w, q.h, ex_viz_colormap(on_scale));
    if (win)
        viz_frame(r, q.x, q.y, q.w, q.h, viz_fg);
    /* the value itself where the cell is roomy; small cells leave it to the hover */
    if (q.h >= 30 && q.w >= 36) {
        snprintf(t, sizeof t, "%.3f", (double)p);
        viz_text_draw(r, q.x + 3, q.y + 2, t, on_scale > 0.6f ? viz_bg : viz_fg, VIZ_LEFT);
    }
}

static void heatmap_labels(ex_viz_renderer *r, const ex_viz_model *m, const ex_viz_layout *l,
                           ex_viz_cell cell)
{
    char buf[64], nm[32], a[16], b[16];
    SDL_Rect q;
    for (int k = 0; k < m->cands; k++) {
        viz_heatmap_rect(m, l, cell, 0, k, &q);
        viz_short_name(cand_name(m, k, buf, sizeof buf), nm, sizeof nm);
        viz_text_draw(r, q.x + q.w / 2, q.y - 16, nm, viz_dim, VIZ_CENTER);
    }
    for (int e = 0; e < m->edges; e++) {
        int node, input;
        edge_ends(m, e, &node, &input);
        viz_heatmap_rect(m, l, cell, e, 0, &q);
        state_name(input, a, sizeof a);
        state_name(node + 2, b, sizeof b);
        snprintf(buf, sizeof buf, "%s \xe2\x86\x90 %s", b, a);
        if (q.h >= 10)
            viz_text_draw(r, q.x - 6, q.y + q.h / 2 - r->line_h / 2, buf, viz_dim, VIZ_RIGHT);
    }
}

void viz_draw_heatmap(ex_viz_renderer *r, const ex_viz_model *m, const ex_viz_view *v,
                      const ex_viz_layout *l, ex_viz_cell cell)
{
    int64_t s = viz_snapshot_index(m, v);
    char title[160];
    const char *which = cell == EX_VIZ_NORMAL ? "normal" : "reduction";
    if (s >= 0)
        snprintf(title, sizeof title, "\xce\xb1 %s cell: softmax weights at step %lld", which,
                 (long long)m->snap_step[s]);
    else
        snprintf(title, sizeof title, "\xce\xb1 %s cell", which);
    SDL_Rect panel =
        l->panel[cell == EX_VIZ_NORMAL ? EX_VIZ_PANEL_ALPHA_NORMAL : EX_VIZ_PANEL_ALPHA_REDUCE];
    SDL_Rect c = viz_panel_begin(r, panel, title);
    SDL_Rect q;
    if (s < 0 || !viz_heatmap_rect(m, l, cell, 0, 0, &q)) {
        no_alpha(r, m, c);
        return;
    }
    const float *a = snap_alpha(m, s, cell);
    const uint8_t *act = snap_active(m, s, cell);
    scale sc = cell_scale(m, a, act, m->has_active[s]);
    legend(r, panel, sc);
    for (int e = 0; e < m->edges; e++) {
        int w = winner(m, a + e * m->cands);
        for (int k = 0; k < m->cands; k++) {
            int i = e * m->cands + k;
            viz_heatmap_rect(m, l, cell, e, k, &q);
            draw_cell(r, q, a[i], scaled(sc, a[i]), m->has_active[s] && !act[i], k == w);
        }
    }
    heatmap_labels(r, m, l, cell);
}

/* ---- hover: the exact value under the mouse ---- */

static bool hit(const ex_viz_model *m, const ex_viz_layout *l, int x, int y, ex_viz_cell *cell,
                int *edge, int *cand)
{
    for (int c = 0; c < 2; c++) {
        int gx, gy, cw, ch;
        if (!grid(m, l, (ex_viz_cell)c, &gx, &gy, &cw, &ch))
            return false;
        int k = x >= gx ? (x - gx) / cw : -1, e = y >= gy ? (y - gy) / ch : -1;
        if (k >= 0 && k < m->cands && e >= 0 && e < m->edges) {
            *cell = (ex_viz_cell)c;
            *edge = e;
            *cand = k;
            return true;
        }
    }
    return false;
}

void viz_draw_hover(ex_viz_renderer *r, const ex_viz_model *m, const ex_viz_view *v,
                    const ex_viz_layout *l)
{
    ex_viz_cell cell;
    int e, k, node, input;
    int64_t s = viz_snapshot_index(m, v);
    if (s < 0 || v->mouse_x < 0 || !hit(m, l, v->mouse_x, v->mouse_y, &cell, &e, &k))
        return;
    char t[256], buf[64], a[16], b[16];
    edge_ends(m, e, &node, &input);
    state_name(input, a, sizeof a);
    state_name(node + 2, b, sizeof b);
    float p = snap_alpha(m, s, cell)[e * m->cands + k];
    bool pruned = m->has_active[s] && !snap_active(m, s, cell)[e * m->cands + k];
    snprintf(t, sizeof t, "%s edge %s \xe2\x86\x90 %s  %s  p = %.6f%s",
             cell == EX_VIZ_NORMAL ? "normal" : "reduce", b, a, cand_name(m, k, buf, sizeof buf),
             (double)p, m->has_active[s] ? (pruned ? "  (pruned)" : "  (active)") : "");
    int w = viz_text_width(r, t) + 10, x = v->mouse_x + 14, y = v->mouse_y + 16;
    viz_fill(r, x, y, w, r->line_h + 6, (SDL_Color){8, 8, 10, 235});
    viz_frame(r, x, y, w, r->line_h + 6, viz_dim);
    viz_text_draw(r, x + 5, y + 3, t, viz_fg, VIZ_LEFT);
}

/* ---- the cell as a graph ---- */

enum { NODE_W = 40, NODE_H = 20 };

/* Whether edge e is among the two strongest inputs of its node: what DARTS's genotype
 * keeps, drawn thick and labelled; the others are drawn thin. */
static bool kept(const ex_viz_model *m, const float *a, int e)
{
    int node, input, better = 0;
    edge_ends(m, e, &node, &input);
    float mine = a[e * m->cands + winner(m, a + e * m->cands)];
    for (int o = 0; o < m->edges; o++) {
        int n2, i2;
        edge_ends(m, o, &n2, &i2);
        float w = a[o * m->cands + winner(m, a + o * m->cands)];
        if (o != e && n2 == node && (w > mine || (w == mine && o < e)))
            better++;
    }
    return better < 2;
}

/* The arc from the column's side at y0 to it at y1, bulging out by `out` pixels (negative:
 * to the left), as a polyline of VIZ_ARC_POINTS points on half an ellipse. */
static void arc(SDL_Point *p, int side_x, int y0, int y1, int out)
{
    for (int k = 0; k < VIZ_ARC_POINTS; k++) {
        double t = 3.14159265358979 * (double)k / (VIZ_ARC_POINTS - 1); /* 0..pi */
        p[k].x = side_x + (int)lround(out * sin(t));
        p[k].y = (int)lround(0.5 * (y0 + y1) - 0.5 * (y1 - y0) * cos(t));
    }
}

/* Pixels of a that b covers. */
static int64_t covered(SDL_Rect a, SDL_Rect b)
{
    SDL_Rect i;
    return SDL_IntersectRect(&a, &b, &i) ? (int64_t)i.w * i.h : 0;
}

/* A label box for edge x at one of the points of its arc, tried from the widest outward:
 * the first whose box covers no node and no label placed before; where every one does (a
 * cramped panel), the one that covers the fewest of their pixels. */
static void place_label(viz_graph *g, viz_graph_edge *x, int w, int h)
{
    static const int order[] = {6, 5, 7, 4, 8, 3, 9, 2, 10};
    int64_t least = -1;
    for (size_t o = 0; o < sizeof order / sizeof order[0] && least != 0; o++) {
        SDL_Point at = x->arc[order[o]];
        SDL_Rect q = {at.x + 3, at.y - h / 2, w, h};
        int64_t hidden = 0;
        for (int n = 0; n < g->n_states; n++)
            hidden += covered(q, g->node[n]);
        for (viz_graph_edge *y = g->e; y < x; y++)
            hidden += y->labelled ? covered(q, y->label) : 0;
        if (least < 0 || hidden < least) {
            least = hidden;
            x->label = q;
        }
    }
}

void viz_graph_layout(const ex_viz_model *m, int64_t s, ex_viz_cell cell, SDL_Rect g, int line_h,
                      int (*text_w)(void *ctx, const char *text), void *ctx, viz_graph *out)
{
    memset(out, 0, sizeof *out);
    int steps = 0;
    for (int e = 0; e < m->edges; e++) {
        int node, input;
        edge_ends(m, e, &node, &input);
        steps = node + 1 > steps ? node + 1 : steps;
    }
    int n = steps + 3 > VIZ_GRAPH_MAX_STATES ? VIZ_GRAPH_MAX_STATES : steps + 3;
    out->n_states = n;
    /* the column: to the left, room for the output's arcs beside it and the labels right */
    int cx = g.x + 34 + NODE_W / 2, row = (g.h - NODE_H) / (n > 1 ? n - 1 : 1);
    for (int st = 0; st < n; st++)
        out->node[st] = (SDL_Rect){cx - NODE_W / 2, g.y + st * row, NODE_W, NODE_H};
    const float *a = snap_alpha(m, s, cell);
    int reach = g.x + g.w - cx - NODE_W / 2 - 80; /* the widest arc leaves room for a label */
    for (int e = 0; e < m->edges && out->n_edges < VIZ_GRAPH_MAX_EDGES; e++) {
        int node, input;
        edge_ends(m, e, &node, &input);
        if (node + 2 >= n - 1 || input < 0 || input >= node + 2)
            continue;
        viz_graph_edge *x = &out->e[out->n_edges++];
        x->from = input;
        x->to = node + 2;
        x->edge = e;
        int span = x->to - x->from;
        arc(x->arc, cx + NODE_W / 2, out->node[x->from].y + NODE_H / 2,
            out->node[x->to].y + NODE_H / 2, 14 + (span - 1) * (reach - 14) / (n > 3 ? n - 3 : 1));
        x->labelled = kept(m, a, e);
    }
    for (int st = 2; st < n - 1 && out->n_edges < VIZ_GRAPH_MAX_EDGES; st++) {
        viz_graph_edge *x = &out->e[out->n_edges++];
        x->from = st;
        x->to = n - 1;
        x->edge = -1;
        arc(x->arc, cx - NODE_W / 2, out->node[st].y + NODE_H / 2, out->node[n - 1].y + NODE_H / 2,
            -(6 + (n - 1 - st) * 22 / (n > 2 ? n - 2 : 1)));
    }
    char buf[64], nm[32];
    for (int i = 0; i < out->n_edges; i++) {
        viz_graph_edge *x = &out->e[i];
        if (!x->labelled)
            continue;
        const float *rw = a + x->edge * m->cands;
        int w = winner(m, rw);
        viz_short_name(cand_name(m, w, buf, sizeof buf), nm, sizeof nm);
        snprintf(x->text, sizeof x->text, "%.12s %.2f", nm,
                 (double)(rw[w] < 0   ? 0
                          : rw[w] > 1 ? 1
                                      : rw[w]));
        place_label(out, x, text_w(ctx, x->text) + 2, line_h);
    }
}

static int renderer_text_w(void *ctx, const char *text)
{
    int w = viz_text_width(ctx, text);
    return w > 0 ? w : 7 * (int)strlen(text); /* no font: the labels are not drawn anyway */
}

static void draw_node(ex_viz_renderer *r, SDL_Rect q, const char *name, SDL_Color fill)
{
    viz_fill(r, q.x, q.y, q.w, q.h, fill);
    viz_frame(r, q.x, q.y, q.w, q.h, viz_fg);
    viz_text_draw(r, q.x + q.w / 2, q.y + q.h / 2 - r->line_h / 2, name, viz_fg, VIZ_CENTER);
}

/* Markers of which candidates an edge computes (filled) and which it skips (hollow). */
static void draw_mask(ex_viz_renderer *r, const ex_viz_model *m, const uint8_t *act, SDL_Point mid)
{
    int x = mid.x - m->cands * 7 / 2;
    for (int k = 0; k < m->cands; k++, x += 7) {
        if (act[k])
            viz_fill(r, x, mid.y + 8, 6, 6, viz_cand_color(k));
        else
            viz_frame(r, x, mid.y + 8, 6, 6, viz_grid);
    }
}

static void graph_legend(ex_viz_renderer *r, const ex_viz_model *m, SDL_Rect c)
{
    char buf[64];
    int per_row = 4, cw = c.w / per_row;
    for (int k = 0; k < m->cands; k++) {
        int x = c.x + (k % per_row) * cw, y = c.y + c.h -
                                              (m->cands + per_row - 1) / per_row * r->line_h +
                                              (k / per_row) * r->line_h;
        viz_fill(r, x, y + 3, 9, 9, viz_cand_color(k));
        viz_text_draw(r, x + 13, y, cand_name(m, k, buf, sizeof buf), viz_dim, VIZ_LEFT);
    }
}

/* The edges, thin ones first so the kept ones are drawn over them. */
static void graph_edges(ex_viz_renderer *r, const ex_viz_model *m, int64_t s, ex_viz_cell cell,
                        const viz_graph *g, bool masks)
{
    const float *a = snap_alpha(m, s, cell);
    const uint8_t *act = snap_active(m, s, cell);
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < g->n_edges; i++) {
            const viz_graph_edge *x = &g->e[i];
            if (x->labelled != (pass == 1))
                continue;
            SDL_Color c = viz_grid;
            if (x->edge >= 0) {
                c = viz_cand_color(winner(m, a + x->edge * m->cands));
                if (!x->labelled)
                    c = (SDL_Color){(uint8_t)(c.r / 2 + 14), (uint8_t)(c.g / 2 + 15),
                                    (uint8_t)(c.b / 2 + 18), 255};
            }
            for (int k = 0; k + 1 < VIZ_ARC_POINTS; k++)
                viz_line(r, x->arc[k].x, x->arc[k].y, x->arc[k + 1].x, x->arc[k + 1].y,
                         x->labelled ? 3 : 1, c);
            if (x->labelled)
                viz_text_draw(r, x->label.x + 1, x->label.y, x->text, c, VIZ_LEFT);
            if (masks && x->edge >= 0)
                draw_mask(r, m, act + x->edge * m->cands, x->arc[VIZ_ARC_POINTS / 2]);
        }
}

void viz_draw_graph(ex_viz_renderer *r, const ex_viz_model *m, const ex_viz_view *v, SDL_Rect p)
{
    int64_t s = viz_snapshot_index(m, v);
    bool masks = s >= 0 && m->has_active[s] && !(m->has_header && !strcmp(m->header.mode, "darts"));
    char title[160];
    snprintf(title, sizeof title, "%s cell: top candidate per edge, thick: kept%s",
             v->cell == EX_VIZ_NORMAL ? "normal" : "reduction",
             masks ? "; squares: run / pruned" : " (tab: other cell)");
    SDL_Rect c = viz_panel_begin(r, p, title);
    if (s < 0) {
        no_alpha(r, m, c);
        return;
    }
    int legend = (m->cands + 3) / 4 * r->line_h + 4;
    SDL_Rect g = {c.x, c.y + 4, c.w, c.h - legend - 8};
    viz_graph graph, *layout = &graph; /* about 12 KB */
    viz_graph_layout(m, s, v->cell, g, r->line_h, renderer_text_w, r, layout);
    graph_edges(r, m, s, v->cell, layout, masks);
    char name[16];
    for (int st = 0; st < layout->n_states; st++) {
        bool output = st == layout->n_states - 1;
        state_name(st, name, sizeof name);
        draw_node(r, layout->node[st], output ? "out" : name,
                  output   ? (SDL_Color){70, 50, 50, 255}
                  : st < 2 ? (SDL_Color){45, 60, 80, 255}
                           : (SDL_Color){50, 50, 62, 255});
    }
    graph_legend(r, m, c);
}
