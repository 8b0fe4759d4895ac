/* What the viewer's panels share: the renderer's insides, text, colours and shapes. */
#ifndef EXAPT_VIZ_DRAW_H
#define EXAPT_VIZ_DRAW_H

#include <SDL2/SDL_ttf.h>

#include "exapt/genotype.h"
#include "viz/model.h"

#define VIZ_TEXT_SLOTS 512
#define VIZ_TITLE_H 20 /* a panel's title bar: fixed, so geometry does not depend on the font */
#define VIZ_TEXT_MAX 1024
#define VIZ_MAX_SIDE 16384 /* largest frame side: SDL's own texture limit on most renderers */

typedef struct viz_text {
    char s[VIZ_TEXT_MAX];
    uint32_t rgba;
    SDL_Texture *tex;
    int w, h;
    uint64_t used;
} viz_text;

struct ex_viz_renderer {
    SDL_Renderer *sdl;
    TTF_Font *font;
    int line_h;
    char font_path[512];
    char font_why[256];
    viz_text cache[VIZ_TEXT_SLOTS];
    uint64_t tick;
    SDL_Point *pts; /* scratch for polylines, kept across frames */
    size_t n_pts;
    ex_viz_model frame; /* what the frame being drawn shows (viz_model_copy_frame) */
};

enum viz_align { VIZ_LEFT, VIZ_RIGHT, VIZ_CENTER };

/* Theme colours. */
extern const SDL_Color viz_bg, viz_panel, viz_grid, viz_fg, viz_dim, viz_warn, viz_peak;

void viz_color(ex_viz_renderer *r, SDL_Color c);
void viz_fill(ex_viz_renderer *r, int x, int y, int w, int h, SDL_Color c);
void viz_frame(ex_viz_renderer *r, int x, int y, int w, int h, SDL_Color c);
/* A line about `thick` pixels wide. */
void viz_line(ex_viz_renderer *r, int x0, int y0, int x1, int y1, int thick, SDL_Color c);
/* Draws text with its top at y, aligned on x; returns its width (0 with no font). */
int viz_text_draw(ex_viz_renderer *r, int x, int y, const char *s, SDL_Color c, enum viz_align a);
int viz_text_width(ex_viz_renderer *r, const char *s);

/* A panel's background and title; returns the content rectangle under the title. */
SDL_Rect viz_panel_begin(ex_viz_renderer *r, SDL_Rect p, const char *title);

/* A short name of a candidate operation for labels ("sep3" for sep_conv_3x3). */
void viz_short_name(const char *name, char *buf, size_t len);
/* Colour of candidate k in the graph and bandwidth panels. */
SDL_Color viz_cand_color(int k);

/* The α snapshot a view shows, or -1 (m locked). */
int64_t viz_snapshot_index(const ex_viz_model *m, const ex_viz_view *v);

/* Panels (m locked). */
void viz_draw_heatmap(ex_viz_renderer *r, const ex_viz_model *m, const ex_viz_view *v,
                      const ex_viz_layout *l, ex_viz_cell cell);
void viz_draw_graph(ex_viz_renderer *r, const ex_viz_model *m, const ex_viz_view *v, SDL_Rect p);
void viz_draw_hover(ex_viz_renderer *r, const ex_viz_model *m, const ex_viz_view *v,
                    const ex_viz_layout *l);
void viz_draw_curves(ex_viz_renderer *r, const ex_viz_model *m, const ex_viz_view *v,
                     const ex_viz_layout *l);
void viz_draw_bandwidth(ex_viz_renderer *r, const ex_viz_model *m, const ex_viz_view *v,
                        SDL_Rect p);
void viz_draw_status(ex_viz_renderer *r, const ex_viz_model *m, const ex_viz_view *v,
                     const ex_viz_layout *l);

/* The cell graph's geometry, an arc diagram: the states in a column (inputs on top, the
 * output at the bottom), each edge an arc out to the right of the column and back, wider
 * the more states it spans, so no edge crosses a node; an edge into the output arcs to the
 * left. The kept edges' labels sit on their arcs where they overlap no other label and no
 * node. */
#define VIZ_GRAPH_MAX_STATES (EX_MAX_STEPS + 3) /* two inputs, the nodes, the output */
#define VIZ_GRAPH_MAX_EDGES (EX_METRICS_MAX_EDGES + EX_MAX_STEPS)
#define VIZ_ARC_POINTS 13
typedef struct viz_graph_edge {
    int from, to;                  /* states; to == n_states - 1 is the output */
    int edge;                      /* the α row, -1 for an edge into the output */
    SDL_Point arc[VIZ_ARC_POINTS]; /* the polyline, from's box to to's box */
    bool labelled;                 /* kept: drawn thick, with a label in label */
    SDL_Rect label;
    char text[32];
} viz_graph_edge;
typedef struct viz_graph {
    int n_states;
    SDL_Rect node[VIZ_GRAPH_MAX_STATES];
    int n_edges;
    viz_graph_edge e[VIZ_GRAPH_MAX_EDGES];
} viz_graph;

/** Lays out snapshot s's cell in g; text_w(ctx, text) gives a label's width in pixels. */
void viz_graph_layout(const ex_viz_model *m, int64_t s, ex_viz_cell cell, SDL_Rect g, int line_h,
                      int (*text_w)(void *ctx, const char *text), void *ctx, viz_graph *out);

/* Geometry shared by drawing and the public queries (m locked). */
bool viz_heatmap_rect(const ex_viz_model *m, const ex_viz_layout *l, ex_viz_cell cell, int edge,
                      int cand, SDL_Rect *out);
bool viz_curve_point(const ex_viz_model *m, const ex_viz_layout *l, ex_viz_series s, int64_t i,
                     int *x, int *y);

#endif
