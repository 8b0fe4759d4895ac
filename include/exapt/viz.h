/* exapt — the live viewer (library exapt_viz, on SDL2, SDL2_ttf and SDL2_image). The core
 * library never links it. Three parts, kept apart so tests can render with no display:
 *
 *  - the model: what a run has reported so far (header, step figures, α snapshots with
 *    their active masks, profiles, epochs), fed record by record from the metrics log
 *    (ex_viz_follow) or straight from a search running on another thread; it is
 *    mutex-protected, and also carries the pause flag a live search honours;
 *  - the renderer: draws a model into any SDL_Renderer (a window, or a software renderer
 *    on a surface), with the geometry queries tests and mouse hover use;
 *  - the window: an event loop on the calling (main) thread, with pause, cell switch,
 *    scrubbing and PNG screenshots.
 *
 * Nothing here exits or prints: failures return an ex_status with a message, and problems
 * in a log (malformed lines, a truncated last line, a shape that disagrees with the
 * header) become notes the viewer shows. docs/viewer.md describes the screen.
 *
 * Bad arguments: a function returning an ex_status returns EX_ERR_ARG for a NULL object or
 * out pointer and writes a message into msg (which may itself be NULL); a NULL model,
 * renderer or window makes the other functions do nothing and return 0, false or "".
 * tests/test_viz_misuse.c holds every case. */
#ifndef EXAPT_VIZ_H
#define EXAPT_VIZ_H

#include <SDL2/SDL.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "exapt/metrics.h"
#include "exapt/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the model ---- */

/** Everything the viewer knows about one run. Thread-safe: every function locks it. */
typedef struct ex_viz_model ex_viz_model;

/** A new, empty model. EX_ERR_NOMEM when out of memory or a mutex cannot be made,
 *  EX_ERR_ARG when out is NULL. */
ex_status ex_viz_model_new(ex_viz_model **out, char *msg, size_t msg_len);

/** Frees the model. NULL is a no-op. */
void ex_viz_model_free(ex_viz_model *m);

/** Forgets every record and note (a followed log was replaced); keeps the pause flag. */
void ex_viz_model_reset(ex_viz_model *m);

/** Adds one record. A record the viewer cannot use (α whose shape disagrees with the
 *  header or with earlier steps, a second header, counts larger than the record's arrays)
 *  is dropped with a note; running out of memory drops it with a note too. A NULL rec is
 *  ignored. */
void ex_viz_model_add(ex_viz_model *m, const ex_metrics_record *rec);

/** Adds a note: something the viewer could not read, shown on screen. Notes beyond the
 *  last few are counted, not kept. A NULL text is ignored. */
void ex_viz_model_note(ex_viz_model *m, const char *text);

/** Step records held. */
int64_t ex_viz_model_steps(ex_viz_model *m);
/** α snapshots held (steps that carried α of the expected shape). */
int64_t ex_viz_model_snapshots(ex_viz_model *m);

/** Notes kept so far (0 when the log read cleanly, or for NULL). */
int ex_viz_model_notes(ex_viz_model *m);
/** The i-th note into buf ("" when i is out of range; nothing is written when buf is NULL
 *  or len 0). */
void ex_viz_model_note_text(ex_viz_model *m, int i, char *buf, size_t len);

/** A counter that changes whenever the model does, so a window redraws only then. */
uint64_t ex_viz_model_version(ex_viz_model *m);

/** Whether the run has ended: its last epoch record (the header's config.epochs) arrived
 *  or ex_viz_model_set_finished() was called. */
bool ex_viz_model_finished(ex_viz_model *m);
/** Marks the run as ended (a live search returned) or not. */
void ex_viz_model_set_finished(ex_viz_model *m, bool finished);

/** Pause flag of a live search. The search thread calls ex_viz_model_wait_paused()
 *  before each step: it returns at once when not paused, else after the pause ends or
 *  timeout_ms passes (so the caller can check for Ctrl-C; a negative one counts as 0);
 *  returns whether still paused. */
void ex_viz_model_set_paused(ex_viz_model *m, bool paused);
/** Whether the pause flag is set. */
bool ex_viz_model_paused(ex_viz_model *m);
/** See ex_viz_model_set_paused(). */
bool ex_viz_model_wait_paused(ex_viz_model *m, int timeout_ms);

/* ---- following a metrics log ---- */

/** Reads a metrics log into a model, from the start, then (on each poll) what was added.
 *  A log that shrinks or is replaced is read again from the start. */
typedef struct ex_viz_follow ex_viz_follow;

/** Follows path into m (which must outlive it). Nothing is read until the first poll.
 *  EX_ERR_ARG when path is NULL or "", or m or out is NULL. */
ex_status ex_viz_follow_new(const char *path, ex_viz_model *m, ex_viz_follow **out, char *msg,
                            size_t msg_len);
/** Frees the follower (not its model). NULL is a no-op. */
void ex_viz_follow_free(ex_viz_follow *f);

/** Reads the complete lines added since the last poll. A missing file is not an error
 *  (a run that has not started writing yet): *added is 0. Malformed lines, a truncated
 *  last line and unknown records become notes in the model. EX_ERR_UNSUPPORTED for a log
 *  of a newer format version, EX_ERR_IO when the file exists but cannot be read,
 *  EX_ERR_ARG when f or added is NULL. */
ex_status ex_viz_follow_poll(ex_viz_follow *f, int64_t *added, char *msg, size_t msg_len);

/* ---- the renderer ---- */

/** Which cell the graph panel shows. */
typedef enum ex_viz_cell { EX_VIZ_NORMAL = 0, EX_VIZ_REDUCE = 1 } ex_viz_cell;

/** Screen areas. */
typedef enum ex_viz_panel {
    EX_VIZ_PANEL_STATUS = 0,
    EX_VIZ_PANEL_ALPHA_NORMAL,
    EX_VIZ_PANEL_ALPHA_REDUCE,
    EX_VIZ_PANEL_GRAPH,
    EX_VIZ_PANEL_BANDWIDTH,
    EX_VIZ_PANEL_STEP_TIME,
    EX_VIZ_PANEL_LOSS,
    EX_VIZ_PANEL_ACCURACY,
    EX_VIZ_PANEL_NOTES,
    EX_VIZ_PANEL_TIMELINE,
    EX_VIZ_PANEL_COUNT
} ex_viz_panel;

/** Plotted series (curves of the loss and accuracy panels, and the step time). */
typedef enum ex_viz_series {
    EX_VIZ_TRAIN_LOSS = 0,
    EX_VIZ_VALID_LOSS,
    EX_VIZ_TRAIN_ACC,
    EX_VIZ_VALID_ACC,
    EX_VIZ_STEP_MS,
    EX_VIZ_SERIES_COUNT
} ex_viz_series;

/** What the user chose to look at. */
typedef struct ex_viz_view {
    ex_viz_cell cell;     /**< the graph panel's cell */
    int64_t cursor;       /**< step record shown (scrubbing), or -1 for the latest */
    int mouse_x, mouse_y; /**< for the hover read-out; negative for none */
    const char *state;    /**< a word for the status line: "live", "paused", "replay" */
} ex_viz_view;

/** A view of the latest state with no hover. */
ex_viz_view ex_viz_view_default(void);

/** The panels' rectangles in a w x h frame. */
typedef struct ex_viz_layout {
    SDL_Rect panel[EX_VIZ_PANEL_COUNT];
} ex_viz_layout;

/** Lays out a w x h frame (a negative side counts as 0). NULL out is a no-op. */
void ex_viz_layout_compute(int w, int h, ex_viz_layout *out);

/** Colour of a softmax probability p in [0, 1] in the α heatmaps (a viridis-like ramp:
 *  0 dark purple, 0.5 teal, 1 yellow; out of range is clamped). */
SDL_Color ex_viz_colormap(float p);

/** Colours of pruned heatmap cells: a flat fill crossed by two diagonals (the mark). */
SDL_Color ex_viz_pruned_fill(void);
/** See ex_viz_pruned_fill(). */
SDL_Color ex_viz_pruned_mark(void);

/** Colour of a plotted series; a value outside the enum gets the theme's dim grey. */
SDL_Color ex_viz_series_color(ex_viz_series s);

/** The rectangle of heatmap cell (edge, cand) of a cell type in frame layout l for the
 *  model's α shape; false when the model has no α, the indices or the cell are out of
 *  range, or a pointer is NULL. */
bool ex_viz_heatmap_rect(ex_viz_model *m, const ex_viz_layout *l, ex_viz_cell cell, int edge,
                         int cand, SDL_Rect *out);

/** Where the curve of series s passes at step record index i (0-based, among the model's
 *  step records), in frame layout l; false when the series has no finite value there or
 *  is not drawn, or when s is not a series or a pointer is NULL. */
bool ex_viz_curve_point(ex_viz_model *m, const ex_viz_layout *l, ex_viz_series s, int64_t i, int *x,
                        int *y);

/** A renderer: an SDL_Renderer, a font and a cache of text textures. */
typedef struct ex_viz_renderer ex_viz_renderer;

/** Wraps sdl (which must outlive it). font_path NULL asks fontconfig for a sans-serif
 *  font; when none is found (or it does not load) the renderer draws without text and
 *  ex_viz_renderer_font() says why. Fails only when out of memory or when SDL_ttf cannot
 *  start, or (EX_ERR_ARG) when sdl or out is NULL. */
ex_status ex_viz_renderer_new(SDL_Renderer *sdl, const char *font_path, ex_viz_renderer **out,
                              char *msg, size_t msg_len);
/** Frees the renderer and its textures (not the SDL_Renderer). NULL is a no-op. */
void ex_viz_renderer_free(ex_viz_renderer *r);

/** The font file in use, or "" with the reason in why (why may be NULL; a NULL r gives ""
 *  and "no renderer"). */
const char *ex_viz_renderer_font(const ex_viz_renderer *r, char *why, size_t why_len);

/** Draws the whole frame (w x h) of model m as view v (NULL v: ex_viz_view_default(); a
 *  cell outside the enum shows the normal cell). Does nothing when r or m is NULL or a
 *  side is not positive. */
void ex_viz_draw(ex_viz_renderer *r, ex_viz_model *m, const ex_viz_view *v, int w, int h);

/** Renders the model with a software renderer into a w x h image and writes it as PNG:
 *  needs no display. NULL v draws the default view. EX_ERR_ARG when m is NULL, png is
 *  NULL or "", or a side is not in 1..16384. */
ex_status ex_viz_snapshot(ex_viz_model *m, const ex_viz_view *v, int w, int h, const char *png,
                          char *msg, size_t msg_len);

/* ---- the window ---- */

/** Options of a window. */
typedef struct ex_viz_window_opts {
    const char *title;
    int width, height;        /**< initial size; 0 for 1400 x 860 */
    const char *shot_dir;     /**< where the S key writes screenshots ("." when NULL) */
    const char *shot_on_exit; /**< PNG written from the window when it closes, or NULL */
    bool exit_when_done;      /**< close by itself once the run has finished */
    bool follow;              /**< with a log: keep reading what is appended (else read once) */
} ex_viz_window_opts;

typedef struct ex_viz_window ex_viz_window;

/** Opens a window (SDL video on the calling thread, which must be the main one).
 *  EX_ERR_UNSUPPORTED when there is no display; EX_ERR_ARG, before SDL is started, when o
 *  or out is NULL or a size is negative or above 16384. */
ex_status ex_viz_window_open(const ex_viz_window_opts *o, ex_viz_window **out, char *msg,
                             size_t msg_len);

/** Runs the window until it is closed (or the run finishes, with exit_when_done). With f
 *  it reads a log (once, or as it grows with opts.follow; pause stops reading); without, the model
 * is fed by a live search and pause sets the model's pause flag (cleared again when the window
 * closes, so the search goes on). Keys: space pause, tab cell, left/right scrub, end latest, s
 *  screenshot, q/escape close. EX_ERR_ARG when w or m is NULL. */
ex_status ex_viz_window_run(ex_viz_window *w, ex_viz_model *m, ex_viz_follow *f, char *msg,
                            size_t msg_len);

/** Writes what the window shows now as PNG. EX_ERR_ARG when w is NULL or png NULL or "". */
ex_status ex_viz_window_screenshot(ex_viz_window *w, const char *png, char *msg, size_t msg_len);

/** Which SDL renderer draws the window ("opengl", "software", ...; with why when the
 *  viewer chose software over an OpenGL that rasterizes on the CPU); "" for NULL. */
const char *ex_viz_window_renderer(const ex_viz_window *w);

/** Frames drawn so far (the benchmark divides them by its time); 0 for NULL. */
int64_t ex_viz_window_frames(const ex_viz_window *w);

/** Draws and presents one frame now (the benchmark's loop). Nothing when w or m is NULL. */
void ex_viz_window_frame(ex_viz_window *w, ex_viz_model *m);

/** Closes the window. NULL is a no-op. */
void ex_viz_window_close(ex_viz_window *w);

#ifdef __cplusplus
}
#endif
#endif
