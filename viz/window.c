/* The window: SDL events on the main thread, a redraw only when the model or the view
 * changed, so a live search keeps the cores. */
#define _POSIX_C_SOURCE 200809L
#include <SDL2/SDL_image.h>
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "viz/draw.h"

#define POLL_MS 250 /* how often a followed log is read */
#define WAIT_MS 100 /* longest wait for an event: how soon a live search's records show */
/* New records redraw at most this often (what the user does redraws at once): a frame
 * costs the CPU a search runs on about 10 ms in software rendering */
#define MODEL_REDRAW_MS 250

struct ex_viz_window {
    SDL_Window *win;
    SDL_Renderer *sdl;
    ex_viz_renderer *r;
    ex_viz_window_opts o;
    char shot_dir[1024], on_exit[1024];
    ex_viz_view view;
    char renderer[256]; /* which renderer draws, and why */
    int64_t frames;
    int shots;
    bool display_paused, dragging;
};

/* Whether the current OpenGL context rasterizes on the CPU (Mesa's llvmpipe and softpipe,
 * Windows's GDI Generic, Apple's software renderer); its GL_RENDERER string goes to name. */
static bool gl_on_cpu(char *name, size_t len)
{
    typedef const unsigned char *(*get_string_fn)(unsigned int);
    get_string_fn get = SDL_GL_GetCurrentContext()
                            ? (get_string_fn)(uintptr_t)SDL_GL_GetProcAddress("glGetString")
                            : NULL;
    const char *s = get ? (const char *)get(0x1F01 /* GL_RENDERER */) : NULL;
    if (!s)
        return false;
    snprintf(name, len, "%s", s);
    char low[160];
    size_t n = 0;
    for (; s[n] && n + 1 < sizeof low; n++)
        low[n] = (char)tolower((unsigned char)s[n]);
    low[n] = 0;
    static const char *const cpu[] = {"llvmpipe", "softpipe", "software", "swrast", "gdi generic"};
    for (size_t i = 0; i < sizeof cpu / sizeof cpu[0]; i++)
        if (strstr(low, cpu[i]))
            return true;
    return false;
}

/* SDL's default renderer, unless it is OpenGL rasterized on the CPU: then SDL's software
 * renderer drawing straight into the window's shared-memory framebuffer, which costs the
 * CPU about a fifth as much per frame and starts no rasterizer threads to compete with a
 * search's (docs/viewer.md, "Renderer"). SDL_RENDER_DRIVER still picks one by name. */
static SDL_Renderer *create_renderer(SDL_Window *win, char *why, size_t len)
{
    SDL_Renderer *r = SDL_CreateRenderer(win, -1, 0);
    SDL_RendererInfo info = {0};
    char gl[160] = "";
    if (r && SDL_GetRendererInfo(r, &info) == 0)
        snprintf(why, len, "%s", info.name);
    if (!r || SDL_GetHint(SDL_HINT_RENDER_DRIVER) || strncmp(info.name, "opengl", 6) ||
        !gl_on_cpu(gl, sizeof gl))
        return r;
    SDL_DestroyRenderer(r);
    /* without this SDL would show the software frame through OpenGL again */
    SDL_SetHint(SDL_HINT_FRAMEBUFFER_ACCELERATION, "0");
    r = SDL_CreateRenderer(win, -1, SDL_RENDERER_SOFTWARE);
    if (r) {
        snprintf(why, len, "software (OpenGL is %.150s, on the CPU)", gl);
        return r;
    }
    r = SDL_CreateRenderer(win, -1, 0); /* the software one failed: OpenGL it is */
    snprintf(why, len, "%s (the software renderer failed)", info.name);
    return r;
}

ex_status ex_viz_window_open(const ex_viz_window_opts *o, ex_viz_window **out, char *msg,
                             size_t msg_len)
{
    if (!out)
        return viz_fail(EX_ERR_ARG, msg, msg_len, "window: NULL out");
    *out = NULL;
    /* checked before SDL starts, so bad options open nothing */
    if (!o || o->width < 0 || o->height < 0 || o->width > VIZ_MAX_SIDE || o->height > VIZ_MAX_SIDE)
        return viz_fail(EX_ERR_ARG, msg, msg_len, "window: %s",
                        !o ? "NULL options" : "width and height must be in 0..16384");
    /* the application's Ctrl-C handler (checkpoint, then stop) must stay in charge */
    SDL_SetHint(SDL_HINT_NO_SIGNAL_HANDLERS, "1");
    if (SDL_InitSubSystem(SDL_INIT_VIDEO) != 0)
        return viz_fail(EX_ERR_UNSUPPORTED, msg, msg_len, "cannot open a window (no display?): %s",
                        SDL_GetError());
    /* with no display SDL falls back to drivers that show nothing: a window nobody sees
     * would wait forever, so they count as no display unless asked for by name */
    const char *drv = SDL_GetCurrentVideoDriver();
    if (drv && (!strcmp(drv, "offscreen") || !strcmp(drv, "dummy")) &&
        !SDL_getenv("SDL_VIDEODRIVER")) {
        SDL_QuitSubSystem(SDL_INIT_VIDEO);
        return viz_fail(EX_ERR_UNSUPPORTED, msg, msg_len,
                        "cannot open a window: no display (SDL found only its %s driver)", drv);
    }
    ex_viz_window *w = calloc(1, sizeof *w);
    if (!w) {
        SDL_QuitSubSystem(SDL_INIT_VIDEO);
        return viz_fail(EX_ERR_NOMEM, msg, msg_len, "out of memory");
    }
    w->o = *o;
    snprintf(w->shot_dir, sizeof w->shot_dir, "%s", o->shot_dir ? o->shot_dir : ".");
    snprintf(w->on_exit, sizeof w->on_exit, "%s", o->shot_on_exit ? o->shot_on_exit : "");
    w->view = ex_viz_view_default();
    w->win = SDL_CreateWindow(o->title ? o->title : "exapt viz", SDL_WINDOWPOS_UNDEFINED,
                              SDL_WINDOWPOS_UNDEFINED, o->width > 0 ? o->width : 1400,
                              o->height > 0 ? o->height : 860, SDL_WINDOW_RESIZABLE);
    w->sdl = w->win ? create_renderer(w->win, w->renderer, sizeof w->renderer) : NULL;
    ex_status st = EX_OK;
    if (!w->sdl) {
        st = viz_fail(EX_ERR_UNSUPPORTED, msg, msg_len, "cannot open a window: %s", SDL_GetError());
    } else {
        st = ex_viz_renderer_new(w->sdl, NULL, &w->r, msg, msg_len);
    }
    if (st != EX_OK) {
        ex_viz_window_close(w);
        return st;
    }
    *out = w;
    return EX_OK;
}

void ex_viz_window_close(ex_viz_window *w)
{
    if (!w)
        return;
    ex_viz_renderer_free(w->r);
    if (w->sdl)
        SDL_DestroyRenderer(w->sdl);
    if (w->win)
        SDL_DestroyWindow(w->win);
    SDL_QuitSubSystem(SDL_INIT_VIDEO);
    free(w);
}

static void draw(ex_viz_window *w, ex_viz_model *m)
{
    int width, height;
    SDL_GetRendererOutputSize(w->sdl, &width, &height);
    ex_viz_draw(w->r, m, &w->view, width, height);
}

void ex_viz_window_frame(ex_viz_window *w, ex_viz_model *m)
{
    if (!w || !m)
        return;
    draw(w, m);
    SDL_RenderPresent(w->sdl);
    w->frames++;
}

const char *ex_viz_window_renderer(const ex_viz_window *w)
{
    return w ? w->renderer : "";
}

int64_t ex_viz_window_frames(const ex_viz_window *w)
{
    return w ? w->frames : 0;
}

/* Reads back what was drawn (before presenting: the back buffer is undefined after). */
static ex_status save_png(ex_viz_window *w, const char *png, char *msg, size_t msg_len)
{
    int width, height;
    SDL_GetRendererOutputSize(w->sdl, &width, &height);
    SDL_Surface *s = SDL_CreateRGBSurfaceWithFormat(0, width, height, 32, SDL_PIXELFORMAT_RGB888);
    ex_status st = EX_OK;
    if (!s || SDL_RenderReadPixels(w->sdl, NULL, SDL_PIXELFORMAT_RGB888, s->pixels, s->pitch))
        st = viz_fail(EX_ERR_UNSUPPORTED, msg, msg_len, "screenshot: %s", SDL_GetError());
    else if (IMG_SavePNG(s, png) != 0)
        st = viz_fail(EX_ERR_IO, msg, msg_len, "%s: %s", png, IMG_GetError());
    SDL_FreeSurface(s);
    return st;
}

ex_status ex_viz_window_screenshot(ex_viz_window *w, const char *png, char *msg, size_t msg_len)
{
    if (!w || !png || !png[0])
        return viz_fail(EX_ERR_ARG, msg, msg_len, "screenshot: %s",
                        !w ? "NULL window" : "no PNG path");
    return save_png(w, png, msg, msg_len);
}

/* ---- events ---- */

typedef struct loop {
    ex_viz_window *w;
    ex_viz_model *m;
    ex_viz_follow *f;
    bool quit, dirty, stopped; /* stopped: the log cannot be read further */
} loop;

static void set_state(loop *L)
{
    bool live = L->f == NULL;
    if (live)
        L->w->view.state = ex_viz_model_paused(L->m) ? "live, search paused" : "live";
    else if (L->w->o.follow)
        L->w->view.state = L->w->display_paused ? "following, display paused" : "following";
    else
        L->w->view.state = "replay";
}

static void scrub(loop *L, int64_t delta)
{
    int64_t n = ex_viz_model_steps(L->m), c = L->w->view.cursor < 0 ? n - 1 : L->w->view.cursor;
    c += delta;
    c = c < 0 ? 0 : c;
    L->w->view.cursor = c >= n - 1 && delta > 0 ? -1 : c;
}

static void screenshot(loop *L)
{
    char path[1200], msg[1400];
    snprintf(path, sizeof path, "%s/exapt-viz-%d.png", L->w->shot_dir, ++L->w->shots);
    draw(L->w, L->m);
    if (save_png(L->w, path, msg, sizeof msg) == EX_OK)
        snprintf(msg, sizeof msg, "screenshot written: %s", path);
    SDL_SetWindowTitle(L->w->win, msg);
    SDL_RenderPresent(L->w->sdl);
}

static void on_key(loop *L, SDL_Keycode k, bool shift)
{
    int64_t step = shift ? 10 : 1;
    switch (k) {
    case SDLK_SPACE:
        if (L->f)
            L->w->display_paused = !L->w->display_paused;
        else
            ex_viz_model_set_paused(L->m, !ex_viz_model_paused(L->m));
        break;
    case SDLK_TAB:
        L->w->view.cell = L->w->view.cell == EX_VIZ_NORMAL ? EX_VIZ_REDUCE : EX_VIZ_NORMAL;
        break;
    case SDLK_LEFT: scrub(L, -step); break;
    case SDLK_RIGHT: scrub(L, step); break;
    case SDLK_PAGEUP: scrub(L, -100); break;
    case SDLK_PAGEDOWN: scrub(L, 100); break;
    case SDLK_HOME: L->w->view.cursor = 0; break;
    case SDLK_END: L->w->view.cursor = -1; break;
    case SDLK_s: screenshot(L); break;
    case SDLK_q:
    case SDLK_ESCAPE: L->quit = true; break;
    default: return;
    }
    L->dirty = true;
}

/* A click or drag on the timeline jumps there. */
static void on_timeline(loop *L, int x, int y)
{
    int width, height;
    SDL_GetRendererOutputSize(L->w->sdl, &width, &height);
    ex_viz_layout l;
    ex_viz_layout_compute(width, height, &l);
    SDL_Rect t = l.panel[EX_VIZ_PANEL_TIMELINE];
    int64_t n = ex_viz_model_steps(L->m);
    if (!L->w->dragging && (y < t.y || y >= t.y + t.h))
        return;
    L->w->dragging = true;
    if (n < 2 || width < 2)
        return;
    int64_t c = (int64_t)(x < 0 ? 0 : x) * (n - 1) / (width - 1);
    L->w->view.cursor = c >= n - 1 ? -1 : c;
    L->dirty = true;
}

static void on_event(loop *L, const SDL_Event *e)
{
    switch (e->type) {
    case SDL_QUIT: L->quit = true; break;
    case SDL_KEYDOWN: on_key(L, e->key.keysym.sym, (e->key.keysym.mod & KMOD_SHIFT) != 0); break;
    case SDL_MOUSEMOTION:
        L->w->view.mouse_x = e->motion.x;
        L->w->view.mouse_y = e->motion.y;
        if (L->w->dragging)
            on_timeline(L, e->motion.x, e->motion.y);
        L->dirty = true;
        break;
    case SDL_MOUSEBUTTONDOWN: on_timeline(L, e->button.x, e->button.y); break;
    case SDL_MOUSEBUTTONUP: L->w->dragging = false; break;
    case SDL_WINDOWEVENT: L->dirty = true; break;
    default: break;
    }
}

/* Reads what the log gained; a log that cannot be read is shown as a note, and the window
 * stays up with what it has. */
static void poll_log(loop *L, uint32_t *next)
{
    if (!L->f || L->stopped || L->w->display_paused || SDL_GetTicks() < *next)
        return;
    *next = SDL_GetTicks() + POLL_MS;
    int64_t added = 0;
    char msg[512];
    if (ex_viz_follow_poll(L->f, &added, msg, sizeof msg) != EX_OK) {
        ex_viz_model_note(L->m, msg);
        L->stopped = true;
    }
    if (!L->w->o.follow)
        L->stopped = true;
}

ex_status ex_viz_window_run(ex_viz_window *w, ex_viz_model *m, ex_viz_follow *f, char *msg,
                            size_t msg_len)
{
    if (!w || !m)
        return viz_fail(EX_ERR_ARG, msg, msg_len, "window: NULL %s", !w ? "window" : "model");
    loop L = {.w = w, .m = m, .f = f, .dirty = true};
    uint32_t next_poll = 0, last_frame = 0;
    uint64_t seen = ~0ull;
    ex_status st = EX_OK;
    while (!L.quit) {
        /* block in the display's event wait, not a polling loop: a thread that wakes every
         * millisecond costs an OpenMP search on every core far more than its own time */
        SDL_Event e;
        if (SDL_WaitEventTimeout(&e, WAIT_MS)) {
            on_event(&L, &e);
            while (SDL_PollEvent(&e))
                on_event(&L, &e);
        }
        poll_log(&L, &next_poll);
        uint64_t v = ex_viz_model_version(m);
        uint32_t now = SDL_GetTicks();
        bool due = seen == ~0ull || now - last_frame >= MODEL_REDRAW_MS;
        if ((v != seen && due) || L.dirty) {
            seen = v;
            last_frame = now;
            L.dirty = false;
            set_state(&L);
            ex_viz_window_frame(w, m);
        }
        if (w->o.exit_when_done && ex_viz_model_finished(m))
            break;
    }
    if (w->on_exit[0] && st == EX_OK) {
        draw(w, m);
        st = save_png(w, w->on_exit, msg, msg_len);
    }
    if (!f)
        ex_viz_model_set_paused(m, false);
    return st;
}
