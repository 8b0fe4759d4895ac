/* The renderer: fonts found through fontconfig, cached text, shapes, the layout, and the
 * frame as a whole. */
#define _POSIX_C_SOURCE 200809L
#include <SDL2/SDL_image.h>
#include <fontconfig/fontconfig.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "viz/draw.h"

const SDL_Color viz_bg = {18, 19, 24, 255}, viz_panel = {28, 30, 37, 255},
                viz_grid = {52, 56, 66, 255}, viz_fg = {222, 224, 230, 255},
                viz_dim = {140, 145, 158, 255}, viz_warn = {255, 170, 60, 255},
                viz_peak = {235, 70, 70, 255};

/* ---- fonts ---- */

/* A sans-serif font file from fontconfig into buf; false with the reason in why. */
static bool find_font(char *buf, size_t len, char *why, size_t why_len)
{
    FcConfig *cfg = FcInitLoadConfigAndFonts();
    FcPattern *pat = cfg ? FcNameParse((const FcChar8 *)"sans-serif") : NULL;
    bool ok = false;
    if (pat) {
        FcConfigSubstitute(cfg, pat, FcMatchPattern);
        FcDefaultSubstitute(pat);
        FcResult res;
        FcPattern *font = FcFontMatch(cfg, pat, &res);
        FcChar8 *file = NULL;
        if (font && FcPatternGetString(font, FC_FILE, 0, &file) == FcResultMatch && file) {
            snprintf(buf, len, "%s", (const char *)file);
            ok = true;
        }
        if (font)
            FcPatternDestroy(font);
        FcPatternDestroy(pat);
    }
    if (cfg)
        FcConfigDestroy(cfg);
    if (!ok)
        snprintf(why, why_len, "fontconfig found no sans-serif font");
    return ok;
}

ex_status ex_viz_renderer_new(SDL_Renderer *sdl, const char *font_path, ex_viz_renderer **out,
                              char *msg, size_t msg_len)
{
    if (!out)
        return viz_fail(EX_ERR_ARG, msg, msg_len, "renderer: NULL out");
    *out = NULL;
    if (!sdl)
        return viz_fail(EX_ERR_ARG, msg, msg_len, "renderer: NULL SDL_Renderer");
    ex_viz_renderer *r = calloc(1, sizeof *r);
    if (!r)
        return viz_fail(EX_ERR_NOMEM, msg, msg_len, "out of memory");
    if (TTF_Init() != 0) {
        free(r);
        return viz_fail(EX_ERR_UNSUPPORTED, msg, msg_len, "SDL_ttf: %s", TTF_GetError());
    }
    r->sdl = sdl;
    r->line_h = 14;
    bool have = font_path
                    ? (snprintf(r->font_path, sizeof r->font_path, "%s", font_path), true)
                    : find_font(r->font_path, sizeof r->font_path, r->font_why, sizeof r->font_why);
    if (have) {
        r->font = TTF_OpenFont(r->font_path, 12);
        if (!r->font)
            snprintf(r->font_why, sizeof r->font_why, "%.120s: %.120s", r->font_path,
                     TTF_GetError());
        else
            r->line_h = TTF_FontLineSkip(r->font);
    }
    if (!r->font)
        r->font_path[0] = 0;
    *out = r;
    return EX_OK;
}

void ex_viz_renderer_free(ex_viz_renderer *r)
{
    if (!r)
        return;
    for (int i = 0; i < VIZ_TEXT_SLOTS; i++)
        if (r->cache[i].tex)
            SDL_DestroyTexture(r->cache[i].tex);
    if (r->font)
        TTF_CloseFont(r->font);
    TTF_Quit();
    free(r->pts);
    viz_model_free_frame(&r->frame);
    free(r);
}

const char *ex_viz_renderer_font(const ex_viz_renderer *r, char *why, size_t why_len)
{
    if (why && why_len)
        snprintf(why, why_len, "%s", !r ? "no renderer" : r->font ? "" : r->font_why);
    return r ? r->font_path : "";
}

/* ---- text, cached as textures: a frame draws the same labels again ---- */

static uint32_t text_hash(const char *s, uint32_t rgba)
{
    uint32_t h = 2166136261u ^ rgba;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

static viz_text *text_get(ex_viz_renderer *r, const char *s, SDL_Color c)
{
    if (!r->font || !s[0] || strlen(s) >= VIZ_TEXT_MAX)
        return NULL;
    uint32_t rgba = (uint32_t)c.r << 24 | (uint32_t)c.g << 16 | (uint32_t)c.b << 8 | c.a;
    uint32_t h = text_hash(s, rgba);
    viz_text *victim = NULL;
    for (int probe = 0; probe < 4; probe++) {
        viz_text *t = &r->cache[(h + (uint32_t)probe) % VIZ_TEXT_SLOTS];
        if (t->tex && t->rgba == rgba && !strcmp(t->s, s)) {
            t->used = ++r->tick;
            return t;
        }
        if (!t->tex) {
            if (!victim || victim->tex)
                victim = t;
        } else if (!victim || (victim->tex && t->used < victim->used)) {
            victim = t;
        }
    }
    SDL_Surface *surf = TTF_RenderUTF8_Blended(r->font, s, c);
    if (!surf)
        return NULL;
    SDL_Texture *tex = SDL_CreateTextureFromSurface(r->sdl, surf);
    int w = surf->w, hh = surf->h;
    SDL_FreeSurface(surf);
    if (!tex)
        return NULL;
    if (victim->tex)
        SDL_DestroyTexture(victim->tex);
    *victim = (viz_text){.rgba = rgba, .tex = tex, .w = w, .h = hh, .used = ++r->tick};
    snprintf(victim->s, sizeof victim->s, "%s", s);
    return victim;
}

int viz_text_draw(ex_viz_renderer *r, int x, int y, const char *s, SDL_Color c, enum viz_align a)
{
    viz_text *t = text_get(r, s, c);
    if (!t)
        return 0;
    SDL_Rect d = {a == VIZ_LEFT ? x : a == VIZ_RIGHT ? x - t->w : x - t->w / 2, y, t->w, t->h};
    SDL_RenderCopy(r->sdl, t->tex, NULL, &d);
    return t->w;
}

int viz_text_width(ex_viz_renderer *r, const char *s)
{
    int w = 0, h = 0;
    if (!r->font || TTF_SizeUTF8(r->font, s, &w, &h))
        return 0;
    return w;
}

/* ---- shapes ---- */

void viz_color(ex_viz_renderer *r, SDL_Color c)
{
    SDL_SetRenderDrawColor(r->sdl, c.r, c.g, c.b, c.a);
}

void viz_fill(ex_viz_renderer *r, int x, int y, int w, int h, SDL_Color c)
{
    viz_color(r, c);
    SDL_RenderFillRect(r->sdl, &(SDL_Rect){x, y, w, h});
}

void viz_frame(ex_viz_renderer *r, int x, int y, int w, int h, SDL_Color c)
{
    viz_color(r, c);
    SDL_RenderDrawRect(r->sdl, &(SDL_Rect){x, y, w, h});
}

void viz_line(ex_viz_renderer *r, int x0, int y0, int x1, int y1, int thick, SDL_Color c)
{
    viz_color(r, c);
    bool steep = abs(y1 - y0) > abs(x1 - x0);
    for (int t = 0; t < thick; t++) {
        int o = t - thick / 2;
        if (steep)
            SDL_RenderDrawLine(r->sdl, x0 + o, y0, x1 + o, y1);
        else
            SDL_RenderDrawLine(r->sdl, x0, y0 + o, x1, y1 + o);
    }
}

SDL_Rect viz_panel_begin(ex_viz_renderer *r, SDL_Rect p, const char *title)
{
    viz_fill(r, p.x, p.y, p.w, p.h, viz_panel);
    viz_text_draw(r, p.x + 6, p.y + 3, title, viz_fg, VIZ_LEFT);
    int top = VIZ_TITLE_H;
    return (SDL_Rect){p.x + 6, p.y + top, p.w - 12, p.h - top - 4};
}

/* ---- colours ---- */

SDL_Color ex_viz_colormap(float p)
{
    static const uint8_t stops[5][3] = {
        {68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};
    if (!(p > 0))
        p = 0;
    if (p > 1)
        p = 1;
    float f = p * 4;
    int i = (int)f;
    if (i > 3)
        i = 3;
    float t = f - (float)i;
    SDL_Color c = {0, 0, 0, 255};
    uint8_t *o[3] = {&c.r, &c.g, &c.b};
    for (int k = 0; k < 3; k++)
        *o[k] = (uint8_t)lroundf((float)stops[i][k] + t * (float)(stops[i + 1][k] - stops[i][k]));
    return c;
}

SDL_Color ex_viz_pruned_fill(void)
{
    return (SDL_Color){46, 46, 52, 255};
}

SDL_Color ex_viz_pruned_mark(void)
{
    return (SDL_Color){200, 60, 60, 255};
}

SDL_Color ex_viz_series_color(ex_viz_series s)
{
    static const SDL_Color c[EX_VIZ_SERIES_COUNT] = {{255, 140, 50, 255},
                                                     {80, 170, 255, 255},
                                                     {255, 140, 50, 255},
                                                     {80, 170, 255, 255},
                                                     {120, 220, 140, 255}};
    if ((unsigned)s >= EX_VIZ_SERIES_COUNT)
        return viz_dim;
    return c[s];
}

SDL_Color viz_cand_color(int k)
{
    static const SDL_Color c[12] = {
        {110, 110, 118, 255}, {31, 119, 180, 255},  {44, 160, 44, 255},   {214, 39, 40, 255},
        {255, 127, 14, 255},  {148, 103, 189, 255}, {23, 190, 207, 255},  {227, 119, 194, 255},
        {188, 189, 34, 255},  {140, 86, 75, 255},   {174, 199, 232, 255}, {255, 187, 120, 255}};
    return c[((k % 12) + 12) % 12];
}

void viz_short_name(const char *name, char *buf, size_t len)
{
    static const char *const map[][2] = {{"none", "none"},         {"max_pool_3x3", "max3"},
                                         {"avg_pool_3x3", "avg3"}, {"skip_connect", "skip"},
                                         {"sep_conv_3x3", "sep3"}, {"sep_conv_5x5", "sep5"},
                                         {"dil_conv_3x3", "dil3"}, {"dil_conv_5x5", "dil5"},
                                         {"sep_conv_7x7", "sep7"}, {"conv_7x1_1x7", "c7x1"}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(name, map[i][0])) {
            snprintf(buf, len, "%s", map[i][1]);
            return;
        }
    snprintf(buf, len, "%.5s", name);
}

/* ---- layout and the frame ---- */

ex_viz_view ex_viz_view_default(void)
{
    return (ex_viz_view){
        .cell = EX_VIZ_NORMAL, .cursor = -1, .mouse_x = -1, .mouse_y = -1, .state = "replay"};
}

static SDL_Rect inset(int x, int y, int w, int h)
{
    return (SDL_Rect){x + 3, y + 3, w - 6, h - 6};
}

void ex_viz_layout_compute(int w, int h, ex_viz_layout *out)
{
    if (!out)
        return;
    w = w < 0 ? 0 : w;
    h = h < 0 ? 0 : h;
    /* bottom: the notes bar (three lines: a DARTS genotype wrapped), then the timeline */
    int top = 24, bottom = 16 + 3 * 15 + 6, y0 = top, bh = h - top - bottom;
    int lw = w * 36 / 100, mw = w * 32 / 100, rw = w - lw - mw;
    SDL_Rect *p = out->panel;
    p[EX_VIZ_PANEL_STATUS] = (SDL_Rect){0, 0, w, top};
    p[EX_VIZ_PANEL_ALPHA_NORMAL] = inset(0, y0, lw, bh / 2);
    p[EX_VIZ_PANEL_ALPHA_REDUCE] = inset(0, y0 + bh / 2, lw, bh - bh / 2);
    int g = bh * 50 / 100, b = bh * 32 / 100;
    p[EX_VIZ_PANEL_GRAPH] = inset(lw, y0, mw, g);
    p[EX_VIZ_PANEL_BANDWIDTH] = inset(lw, y0 + g, mw, b);
    p[EX_VIZ_PANEL_STEP_TIME] = inset(lw, y0 + g + b, mw, bh - g - b);
    p[EX_VIZ_PANEL_LOSS] = inset(lw + mw, y0, rw, bh / 2);
    p[EX_VIZ_PANEL_ACCURACY] = inset(lw + mw, y0 + bh / 2, rw, bh - bh / 2);
    p[EX_VIZ_PANEL_NOTES] = (SDL_Rect){0, h - bottom, w, bottom - 16};
    p[EX_VIZ_PANEL_TIMELINE] = (SDL_Rect){0, h - 16, w, 16};
}

int64_t viz_snapshot_index(const ex_viz_model *m, const ex_viz_view *v)
{
    int64_t c = viz_model_cursor(m, v);
    if (c < 0)
        return m->n_snap - 1;
    return m->pts[c].snap;
}

void ex_viz_draw(ex_viz_renderer *r, ex_viz_model *m, const ex_viz_view *v, int w, int h)
{
    if (!r || !m || w <= 0 || h <= 0)
        return;
    /* the panels trust the view's cell; any other value draws the normal cell */
    ex_viz_view view = v ? *v : ex_viz_view_default();
    if (view.cell != EX_VIZ_REDUCE)
        view.cell = EX_VIZ_NORMAL;
    v = &view;
    ex_viz_layout l;
    ex_viz_layout_compute(w, h, &l);
    viz_color(r, viz_bg);
    SDL_RenderClear(r->sdl);
    /* the lock is held for the copy only (tens of microseconds for 10,000 steps), not for
     * the drawing: a live search adds its records meanwhile; out of memory, the frame is
     * drawn from the model under its lock */
    pthread_mutex_lock(&m->mu);
    bool copied = viz_model_copy_frame(&r->frame, m, v);
    if (copied)
        pthread_mutex_unlock(&m->mu);
    const ex_viz_model *d = copied ? &r->frame : m;
    viz_draw_heatmap(r, d, v, &l, EX_VIZ_NORMAL);
    viz_draw_heatmap(r, d, v, &l, EX_VIZ_REDUCE);
    viz_draw_graph(r, d, v, l.panel[EX_VIZ_PANEL_GRAPH]);
    viz_draw_bandwidth(r, d, v, l.panel[EX_VIZ_PANEL_BANDWIDTH]);
    viz_draw_curves(r, d, v, &l);
    viz_draw_status(r, d, v, &l);
    viz_draw_hover(r, d, v, &l);
    if (!copied)
        pthread_mutex_unlock(&m->mu);
}

bool ex_viz_heatmap_rect(ex_viz_model *m, const ex_viz_layout *l, ex_viz_cell cell, int edge,
                         int cand, SDL_Rect *out)
{
    if (!m || !l || !out || (cell != EX_VIZ_NORMAL && cell != EX_VIZ_REDUCE))
        return false;
    pthread_mutex_lock(&m->mu);
    bool ok = viz_heatmap_rect(m, l, cell, edge, cand, out);
    pthread_mutex_unlock(&m->mu);
    return ok;
}

bool ex_viz_curve_point(ex_viz_model *m, const ex_viz_layout *l, ex_viz_series s, int64_t i, int *x,
                        int *y)
{
    if (!m || !l || !x || !y || (unsigned)s >= EX_VIZ_SERIES_COUNT)
        return false;
    pthread_mutex_lock(&m->mu);
    bool ok = viz_curve_point(m, l, s, i, x, y);
    pthread_mutex_unlock(&m->mu);
    return ok;
}

ex_status ex_viz_snapshot(ex_viz_model *m, const ex_viz_view *v, int w, int h, const char *png,
                          char *msg, size_t msg_len)
{
    if (!m || !png || !png[0])
        return viz_fail(EX_ERR_ARG, msg, msg_len, "snapshot: %s",
                        !m ? "NULL model" : "no PNG path");
    if (w <= 0 || h <= 0 || w > VIZ_MAX_SIDE || h > VIZ_MAX_SIDE)
        return viz_fail(EX_ERR_ARG, msg, msg_len, "snapshot: size %d x %d is not in 1..%d", w, h,
                        VIZ_MAX_SIDE);
    SDL_Surface *s = SDL_CreateRGBSurfaceWithFormat(0, w, h, 32, SDL_PIXELFORMAT_RGB888);
    SDL_Renderer *sr = s ? SDL_CreateSoftwareRenderer(s) : NULL;
    ex_viz_renderer *r = NULL;
    ex_status st = EX_OK;
    if (!sr) {
        st = viz_fail(EX_ERR_UNSUPPORTED, msg, msg_len, "software renderer: %s", SDL_GetError());
    } else if ((st = ex_viz_renderer_new(sr, NULL, &r, msg, msg_len)) == EX_OK) {
        ex_viz_draw(r, m, v, w, h);
        SDL_RenderPresent(sr);
        if (IMG_SavePNG(s, png) != 0)
            st = viz_fail(EX_ERR_IO, msg, msg_len, "%s: %s", png, IMG_GetError());
    }
    ex_viz_renderer_free(r);
    if (sr)
        SDL_DestroyRenderer(sr);
    SDL_FreeSurface(s);
    return st;
}
