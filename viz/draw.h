/* What the viewer's panels share: the renderer's insides, text, colours and shapes. */
#ifndef EXAPT_VIZ_DRAW_H
#define EXAPT_VIZ_DRAW_H

#include <SDL2/SDL_ttf.h>

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

/* Geometry shared by drawing and the public queries (m locked). */
bool viz_heatmap_rect(const ex_viz_model *m, const ex_viz_layout *l, ex_viz_cell cell, int edge,
                      int cand, SDL_Rect *out);
bool viz_curve_point(const ex_viz_model *m, const ex_viz_layout *l, ex_viz_series s, int64_t i,
                     int *x, int *y);

#endif
