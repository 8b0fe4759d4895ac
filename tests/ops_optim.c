/* Op suite: optimizer updates, gradient norm and clipping, random streams. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/backend_iface.h"
#include "ops_harness.h"
#include "ref.h"

/* ---- optimizer steps: the updated parameter is the output; the moments are checked
 * after the first step, then a second step runs on the persisted state ---- */

/* A parameter step p1 - p0 against the reference's. The backend's p1 is an f32 number,
 * so its rounding (2^-24 |p1| at most) is allowed on top of the op's bound. */
static void check_step(env *e, const char *what, const double *p0, const double *p1,
                       const double *ref1, int64_t n)
{
    double *d = xcalloc((size_t)n, sizeof *d), *dr = xcalloc((size_t)n, sizeof *dr);
    double floor = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        d[i] = p1[i] - p0[i];
        dr[i] = ref1[i] - p0[i];
        floor += pow(0x1.0p-24 * ref1[i], 2);
        den += dr[i] * dr[i];
    }
    check_nmse(e, what, d, dr, n, ex_op_tolerance(e->c->op) + 4 * floor / fmax(den, 1e-30));
    free(d);
    free(dr);
}

/* How an sgd case clips (ip1): not at all, by the norm given as root 4, or by the norm of
 * g taken in the graph (as the search does). */
enum { SGD_PLAIN, SGD_CLIP_ROOT, SGD_CLIP_NORM };

/* sgd: roots p, g, mom, lr (and norm); fp0 = momentum, fp1 = weight decay, fp2 = max_norm,
 * ip0 = nesterov, ip1 = the clip */
static ex_tensor *b_sgd(env *e, ex_tensor *const *x)
{
    const tcase *c = e->c;
    float mu = (float)c->fp[0], wd = (float)c->fp[1], max_norm = (float)c->fp[2];
    if (c->ip[1] == SGD_PLAIN)
        return ex_sgd(e->ctx, x[0], x[1], x[2], x[3], mu, wd, c->ip[0] != 0);
    ex_tensor *norm = c->ip[1] == SGD_CLIP_ROOT ? x[4] : ex_grad_norm(e->ctx, 1, &x[1]);
    return ex_sgd_clip(e->ctx, x[0], x[1], x[2], x[3], norm, max_norm, mu, wd, c->ip[0] != 0);
}

/* One reference step on gradient g (the clip's norm taken from root 4 or from g). */
static void sgd_step(const env *e, double *p, const double *g, double *mom)
{
    const tcase *c = e->c;
    double clip = 1;
    if (c->ip[1] != SGD_PLAIN) {
        double norm = c->ip[1] == SGD_CLIP_ROOT ? e->od[4][0] : ref_grad_norm(1, &g, e->on);
        clip = ref_clip_coef(norm, (double)(float)c->fp[2]);
    }
    ref_sgd(p, g, mom, e->on[0], e->od[3][0], (double)(float)c->fp[0], (double)(float)c->fp[1],
            c->ip[0], clip);
}

static void r_sgd(const env *e, double *y)
{
    double *mom = xcalloc((size_t)e->on[0], sizeof *mom);
    memcpy(y, e->od[0], (size_t)e->on[0] * sizeof *y);
    memcpy(mom, e->od[2], (size_t)e->on[0] * sizeof *mom);
    sgd_step(e, y, e->od[1], mom);
    free(mom);
}

/* adam: roots p, g, m, v, hyper {lr, t}; fp = beta1, beta2, eps, weight decay */
static ex_tensor *b_adam(env *e, ex_tensor *const *x)
{
    const double *f = e->c->fp;
    return ex_adam(e->ctx, x[0], x[1], x[2], x[3], x[4], (float)f[0], (float)f[1], (float)f[2],
                   (float)f[3]);
}

static void adam_step(const env *e, double *p, const double *g, double *m, double *v,
                      const double *hyper)
{
    const double *f = e->c->fp;
    ref_adam(p, g, m, v, e->on[0], hyper[0], hyper[1], (double)(float)f[0], (double)(float)f[1],
             (double)(float)f[2], (double)(float)f[3]);
}

static void r_adam(const env *e, double *y)
{
    int64_t n = e->on[0];
    double *m = xcalloc((size_t)n, sizeof *m), *v = xcalloc((size_t)n, sizeof *v);
    memcpy(y, e->od[0], (size_t)n * sizeof *y);
    memcpy(m, e->od[2], (size_t)n * sizeof *m);
    memcpy(v, e->od[3], (size_t)n * sizeof *v);
    adam_step(e, y, e->od[1], m, v, e->od[4]);
    free(m);
    free(v);
}

static void i_adam(env *e)
{
    e->rd[4][0] = (double)0.05f; /* lr */
    e->rd[4][1] = 1;             /* t */
}

/* One reference step at time t from state (p, moments). */
static void ref_step(const env *e, double *p, const double *g, double *const *mom, double t)
{
    if (e->c->op == EX_OP_ADAM) {
        double hyper[2] = {e->od[4][0], t};
        adam_step(e, p, g, mom[0], mom[1], hyper);
    } else {
        sgd_step(e, p, g, mom[0]);
    }
}

/* Step 1's parameter change and moments, then step 2 on the persisted state with a new
 * gradient (and t = 2 for Adam). The reference continues from its own state. */
static void a_optim(env *e)
{
    int nst = e->c->op == EX_OP_ADAM ? 2 : 1; /* moments: roots 2 (and 3) */
    int64_t n = e->on[0];
    double *p = xcalloc((size_t)n, sizeof *p), *p1 = xcalloc((size_t)n, sizeof *p1);
    double *got = xcalloc((size_t)n, sizeof *got), *mom[2] = {0};
    memcpy(p, e->od[0], (size_t)n * sizeof *p);
    for (int k = 0; k < nst; k++) {
        mom[k] = xcalloc((size_t)n, sizeof(double));
        memcpy(mom[k], e->od[2 + k], (size_t)n * sizeof(double));
    }
    ref_step(e, p, e->od[1], mom, 1);
    check_step(e, "parameter step 1", e->od[0], e->yv, p, n);
    for (int k = 0; k < nst; k++)
        if (read_f(e, e->opnd[2 + k], got, n))
            check_nmse(e, k ? "second moment, step 1" : "moment, step 1", got, mom[k], n,
                       ex_op_tolerance(e->c->op));
    for (int64_t i = 0; i < n; i++)
        e->od[1][i] = (double)(float)rng_uniform(&e->rng, -1, 1);
    scatter_root(e, 1);
    bool ok = write_f(e, e->root[1], e->rd[1], e->rn[1]);
    if (ok && nst == 2) {
        double hyper[2] = {e->od[4][0], 2};
        ok = write_f(e, e->root[4], hyper, 2);
    }
    ok = ok && run_plan(e);
    memcpy(p1, p, (size_t)n * sizeof *p1);
    ref_step(e, p, e->od[1], mom, 2);
    if (ok && read_f(e, e->y, got, n))
        check_step(e, "parameter step 2", p1, got, p, n);
    for (int k = 0; k < nst && ok; k++)
        if (read_f(e, e->opnd[2 + k], got, n))
            check_nmse(e, k ? "second moment, step 2" : "moment, step 2", got, mom[k], n,
                       ex_op_tolerance(e->c->op));
    free(p);
    free(p1);
    free(got);
    for (int k = 0; k < nst; k++)
        free(mom[k]);
}

/* grad_norm of all operands */
static ex_tensor *b_grad_norm(env *e, ex_tensor *const *x)
{
    return ex_grad_norm(e->ctx, e->c->nr, x);
}
static void r_grad_norm(const env *e, double *y)
{
    y[0] = ref_grad_norm(e->c->nr, (const double *const *)e->od, e->on);
}

/* clip, in place on a copy of g (so the input survives for the rerun), or on the same
 * view of a copy of g's root; fp0 = max_norm */
static ex_tensor *b_clip(env *e, ex_tensor *const *x)
{
    (void)x;
    const rspec *r = &e->c->r[0];
    ex_tensor *g = ex_copy(e->ctx, e->root[0]);
    if (r->view == V_SLICE)
        g = ex_slice(e->ctx, g, r->v0, r->v1, r->v2);
    ex_tensor *norm = ex_grad_norm(e->ctx, 1, &g);
    return ex_clip(e->ctx, g, norm, (float)e->c->fp[0]);
}
static void r_clip(const env *e, double *y)
{
    const double *g = e->od[0];
    double norm = ref_grad_norm(1, &g, e->on);
    ref_clip(g, e->on[0], norm, (double)(float)e->c->fp[0], y);
}

#define P3 SHAPE(5, 7, 11)
#define SGD(nm, momentum, wd, nesterov, ...)                                                       \
    {                                                                                              \
        CASE(nm, EX_OP_SGD, b_sgd, r_sgd, 4),                                                      \
            .r = {{PAR("p"), P3, UNI(-0.05, 0.05)},                                                \
                  __VA_ARGS__,                                                                     \
                  {STATE("mom"), P3, UNI(-1, 1)},                                                  \
                  {IN("lr"), SHAPE(1), CONST(0.1)}},                                               \
            .ip = {nesterov}, .fp = {momentum, wd}, .after = a_optim, .flags = F_NORERUN           \
    }
/* sgd clipped by max_norm with the norm given (root 4): roots p, g, mom after the name */
#define SGD_CLIP(nm, momentum, wd, nesterov, max_norm, norm, p_, g_, mom_)                         \
    {                                                                                              \
        CASE(nm, EX_OP_SGD, b_sgd, r_sgd, 5),                                                      \
            .r = {p_,                                                                              \
                  g_,                                                                              \
                  mom_,                                                                            \
                  {IN("lr"), SHAPE(1), CONST(0.1)},                                                \
                  {IN("norm"), SHAPE(1), CONST(norm)}},                                            \
            .ip = {nesterov, SGD_CLIP_ROOT}, .fp = {momentum, wd, max_norm}, .after = a_optim,     \
            .flags = F_NORERUN                                                                     \
    }
#define PP3                                                                                        \
    {                                                                                              \
        PAR("p"), P3, UNI(-0.05, 0.05)                                                             \
    }
#define MOM3                                                                                       \
    {                                                                                              \
        STATE("mom"), P3, UNI(-1, 1)                                                               \
    }
#define G3T                                                                                        \
    {                                                                                              \
        IN("g"), SHAPE(11, 7, 5), UNI(-1, 1), TRANS(0, 2)                                          \
    }
#define PSLICE                                                                                     \
    {                                                                                              \
        PAR("p"), SHAPE(5, 9, 11), UNI(-0.05, 0.05), SLICE(1, 1, 7)                                \
    }
#define MSLICE                                                                                     \
    {                                                                                              \
        STATE("mom"), SHAPE(5, 10, 11), UNI(-1, 1), SLICE(1, 2, 7)                                 \
    }
#define G3                                                                                         \
    {                                                                                              \
        IN("g"), P3, UNI(-1, 1)                                                                    \
    }
#define ADAM(nm, wd, ...)                                                                          \
    {                                                                                              \
        CASE(nm, EX_OP_ADAM, b_adam, r_adam, 5),                                                   \
            .r = {{PAR("p"), P3, UNI(-0.05, 0.05)},                                                \
                  __VA_ARGS__,                                                                     \
                  {STATE("m"), P3, UNI(-0.1, 0.1)},                                                \
                  {STATE("v"), P3, UNI(0, 1e-3)},                                                  \
                  {IN("hyper"), SHAPE(2), CONST(0)}},                                              \
            .fp = {0.9, 0.999, 1e-8, wd}, .init = i_adam, .after = a_optim, .flags = F_NORERUN     \
    }

static const tcase optim_cases[] = {
    SGD("sgd momentum 0.9", 0.9, 0, 0, G3),
    SGD("sgd nesterov, weight decay 0.5", 0.9, 0.5, 1, G3),
    SGD("sgd no momentum, weight decay 0.5, g transposed", 0, 0.5, 0,
        {IN("g"), SHAPE(11, 7, 5), UNI(-1, 1), TRANS(0, 2)}),
    /* the clip folded in: norm 4 above max_norm 1.5 (g scaled by 0.375), 0.5 below 2 (g
     * as it is), and the norm of g itself (about 11) above 5 */
    SGD_CLIP("sgd clip, norm above max_norm, momentum 0.9", 0.9, 0, 0, 1.5, 4, PP3, G3, MOM3),
    SGD_CLIP("sgd clip, norm below max_norm, momentum 0.9", 0.9, 0, 0, 2, 0.5, PP3, G3, MOM3),
    SGD_CLIP("sgd clip, norm above, nesterov, weight decay 0.5", 0.9, 0.5, 1, 1.5, 4, PP3, G3,
             MOM3),
    SGD_CLIP("sgd clip, norm below, nesterov, weight decay 0.5", 0.9, 0.5, 1, 2, 0.5, PP3, G3,
             MOM3),
    SGD_CLIP("sgd clip, no momentum, weight decay 0.5, g transposed", 0, 0.5, 0, 1.5, 4, PP3, G3T,
             MOM3),
    SGD_CLIP("sgd clip of a channel slice of p and mom", 0.9, 0.5, 0, 1.5, 4, PSLICE, G3, MSLICE),
    {CASE("sgd clip by the norm of g, nesterov, weight decay 0.5", EX_OP_SGD, b_sgd, r_sgd, 4),
     .r = {PP3, G3, MOM3, {IN("lr"), SHAPE(1), CONST(0.1)}}, .ip = {1, SGD_CLIP_NORM},
     .fp = {0.9, 0.5, 5}, .after = a_optim, .flags = F_NORERUN},
    ADAM("adam", 0, G3),
    ADAM("adam weight decay 0.5, g transposed", 0.5,
         {IN("g"), SHAPE(11, 7, 5), UNI(-1, 1), TRANS(0, 2)}),
    {CASE("grad_norm of three tensors, one a slice", EX_OP_GRAD_NORM, b_grad_norm, r_grad_norm, 3),
     .r = {{IN("g0"), P3, UNI(-1, 1)},
           {IN("g1"), SHAPE(13), UNI(-1, 1)},
           {IN("g2"), SHAPE(3, 6, 4), UNI(-1, 1), SLICE(1, 1, 2)}},
     .bwd = B_NONE},
    /* Vulkan gives a buffer over 64 MiB a memory block of its own (g1's, of which the node
     * reads one slice): the sources then lie in several blocks, and each one's partial must
     * still land in the node's scratch */
    {CASE("grad_norm of four tensors in three memory blocks", EX_OP_GRAD_NORM, b_grad_norm,
          r_grad_norm, 4),
     .r = {{IN("g0"), P3, UNI(-1, 1)},
           {IN("g1"), SHAPE(17, 1024, 1024), UNI(-1, 1), SLICE(0, 16, 1)},
           {IN("g2"), SHAPE(13), UNI(-1, 1)},
           {IN("g3"), SHAPE(3, 6, 4), UNI(-1, 1)}},
     .bwd = B_NONE},
    {CASE("grad_norm of a transposed view", EX_OP_GRAD_NORM, b_grad_norm, r_grad_norm, 1),
     .r = {{IN("g"), SHAPE(5, 13, 11, 7), UNI(-1, 1), TRANS(1, 3)}}, .bwd = B_NONE},
    {CASE("clip below the norm", EX_OP_CLIP, b_clip, r_clip, 1), .r = {{IN("g"), P3, UNI(-1, 1)}},
     .fp = {2}},
    {CASE("clip above the norm", EX_OP_CLIP, b_clip, r_clip, 1), .r = {{IN("g"), P3, UNI(-1, 1)}},
     .fp = {50}},
    {CASE("clip of a channel slice", EX_OP_CLIP, b_clip, r_clip, 1),
     .r = {{IN("g"), SHAPE(5, 9, 11), UNI(-1, 1), SLICE(1, 2, 5)}}, .fp = {1.5}},
};

void family_optim(void **state)
{
    run_table(*state, optim_cases, sizeof optim_cases / sizeof *optim_cases);
}

/* ---- clipped SGD nodes, well formed and malformed, given to the backend directly ---- */

/* Regions of one buffer, in floats: p, g, mom [5, 7], lr [1], norm [2] (one element or
 * two); p = 1, g = 2, mom = 0.5, lr = 0.5, norm = 4. */
enum { SC_P = 0, SC_G = 64, SC_M = 128, SC_LR = 192, SC_NORM = 256, SC_FLOATS = 320, SC_N = 35 };

static ex_tdesc sc_desc(ex_buffer *buf, int64_t at, ex_dtype dt, int64_t n)
{
    bool mat = n == SC_N;
    ex_tdesc t = {.dtype = dt, .ndim = mat ? 2 : 1, .buf = buf, .offset = (uint64_t)at * 4};
    t.ne[0] = mat ? 5 : n;
    t.ne[1] = mat ? 7 : 1;
    t.st[0] = mat ? 7 : 1;
    t.st[1] = 1;
    return t;
}

typedef struct sc_case {
    const char *what;
    int nsrc;
    int64_t norm_n;
    ex_dtype norm_dt;
    float max_norm;
    ex_status want;
    const char *needle; /* in the message of a failure */
    float p1, m1;       /* a run's p and mom */
} sc_case;

/* Uploads the operands, runs the node of case c, and reads p and mom back; a failure's
 * message goes to msg (taken before the reads, which may replace it). */
static ex_status sc_run(const suite *s, ex_buffer *buf, const sc_case *c, float *p, float *m,
                        char *msg, size_t len)
{
    const ex_backend_iface *f = ex__backend_iface_of(s->be);
    void *im = ex__backend_impl_of(s->be);
    float host[SC_FLOATS] = {0};
    for (int i = 0; i < SC_N; i++) {
        host[SC_P + i] = 1.0f;
        host[SC_G + i] = 2.0f;
        host[SC_M + i] = 0.5f;
    }
    host[SC_LR] = 0.5f;
    host[SC_NORM] = host[SC_NORM + 1] = 4.0f;
    ex_status st = f->upload(im, buf, 0, host, sizeof host);
    ex_tdesc src[6] = {sc_desc(buf, SC_P, EX_F32, SC_N), sc_desc(buf, SC_G, EX_F32, SC_N),
                       sc_desc(buf, SC_M, EX_F32, SC_N), sc_desc(buf, SC_LR, EX_F32, 1),
                       sc_desc(buf, SC_NORM, c->norm_dt, c->norm_n)};
    src[5] = src[4];
    ex_node_exec n = {.op = EX_OP_SGD,
                      .nsrc = c->nsrc,
                      .src = src,
                      .dst = src[0],
                      .ip = {0},
                      .fp = {0.9f, 0.0f, c->max_norm},
                      .tag = {-1, -1, -1}};
    if (st == EX_OK)
        st = node_run(s, &n, msg, len);
    ex_status rd = f->download(im, buf, SC_P * 4, p, SC_N * sizeof *p);
    if (rd == EX_OK)
        rd = f->download(im, buf, SC_M * 4, m, SC_N * sizeof *m);
    return st != EX_OK ? st : rd;
}

/* Whether v[0..n) all lie within 1e-6 of x. */
static bool all_near(const float *v, int n, float x)
{
    for (int i = 0; i < n; i++)
        if (!(fabsf(v[i] - x) <= 1e-6f))
            return false;
    return true;
}

/* A clipped SGD node (5 sources) scales g by CLIP's coefficient, a plain one (4) does not;
 * a malformed one (norm not one f32 element, max_norm not > 0, 3 or 6 sources) fails with
 * a message naming what is wrong, writes nothing, and leaves the backend able to run the
 * next node. With momentum 0.9: clipped, c = 1 / 4, mom = 0.45 + 0.5 and p = 1 - 0.5 mom;
 * plain, mom = 0.45 + 2. */
void sgd_clip_node_errors(void **state)
{
    suite *s = *state;
    const ex_backend_iface *f = ex__backend_iface_of(s->be);
    void *im = ex__backend_impl_of(s->be);
    ex_buffer *buf = NULL;
    assert_int_equal(f->buffer_alloc(im, SC_FLOATS * 4, &buf), EX_OK);
    static const sc_case cases[] = {
        {"clipped", 5, 1, EX_F32, 1.0f, EX_OK, NULL, 0.525f, 0.95f},
        {"plain", 4, 1, EX_F32, 1.0f, EX_OK, NULL, -0.225f, 2.45f},
        {"norm of 2 elements", 5, 2, EX_F32, 1.0f, EX_ERR_SHAPE, "norm", 1.0f, 0.5f},
        {"i32 norm", 5, 1, EX_I32, 1.0f, EX_ERR_SHAPE, "norm", 1.0f, 0.5f},
        {"max_norm 0", 5, 1, EX_F32, 0.0f, EX_ERR_ARG, "max_norm", 1.0f, 0.5f},
        {"max_norm -1", 5, 1, EX_F32, -1.0f, EX_ERR_ARG, "max_norm", 1.0f, 0.5f},
        {"max_norm NaN", 5, 1, EX_F32, NAN, EX_ERR_ARG, "max_norm", 1.0f, 0.5f},
        {"6 sources", 6, 1, EX_F32, 1.0f, EX_ERR_ARG, "sources", 1.0f, 0.5f},
        {"3 sources", 3, 1, EX_F32, 1.0f, EX_ERR_ARG, "sources", 1.0f, 0.5f},
        {"clipped again", 5, 1, EX_F32, 1.0f, EX_OK, NULL, 0.525f, 0.95f},
    };
    int failed = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const sc_case *c = &cases[i];
        float p[SC_N], m[SC_N];
        char msg[512];
        ex_status st = sc_run(s, buf, c, p, m, msg, sizeof msg);
        bool values = all_near(p, SC_N, c->p1) && all_near(m, SC_N, c->m1);
        char note[96];
        snprintf(note, sizeof note, "; p %.7g, mom %.7g, expected %.7g, %.7g", (double)p[0],
                 (double)m[0], (double)c->p1, (double)c->m1);
        failed += !node_case_ok(s, EX_OP_SGD, c->what, st, msg, c->want, c->needle, values, note);
    }
    f->buffer_free(im, buf);
    if (failed)
        fail_msg("%d sgd nodes were handled wrongly on %s", failed, s->backend_name);
}

/* ---- random streams: the key is private to the node, so the values are checked by
 * their distribution, by the stream's grid, and by what the counter and seed change ---- */

enum { RN0 = 331, RN1 = 317, RN = RN0 * RN1 };

/* Builds one random op of shape [RN0, RN1] (or [n]) per entry of ops, plans, writes the
 * counter, runs; y[i] receives each output. */
typedef struct rgraph {
    ex_tensor *ctr, *t[2];
} rgraph;

static bool random_run(env *e, rgraph *g, const int32_t ctr[2], double *const *y, int nt,
                       const int64_t *n)
{
    if (!e->plan) {
        char msg[512];
        if (plan_graph(e->s, e->ctx, &e->plan, msg, sizeof msg) != EX_OK) {
            case_fail(e, "plan: %s", msg);
            return false;
        }
    }
    if (!write_i(e, g->ctr, ctr, 2) || !run_plan(e))
        return false;
    for (int k = 0; k < nt; k++)
        if (!read_f(e, g->t[k], y[k], n[k]))
            return false;
    return true;
}

static double mean_of(const double *v, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += v[i];
    return s / (double)n;
}

static double var_of(const double *v, int64_t n, double mu)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (v[i] - mu) * (v[i] - mu);
    return s / (double)n;
}

/* Fraction of elements where a and b are equal. */
static double same_fraction(const double *a, const double *b, int64_t n)
{
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
        k += a[i] == b[i];
    return (double)k / (double)n;
}

/* |x - mu| <= 4 sd, else a failure naming the statistic. The streams are fixed by the
 * seeds, so a pass or a fail is repeatable; 4 sigma (a false alarm 6e-5 per statistic
 * for a changed stream) still flags a mean off by 0.2% of the range. */
static void near(env *e, const char *what, double x, double mu, double sd)
{
    if (!(fabs(x - mu) <= 4 * sd))
        case_fail(e, "%s %.6g, expected %.6g +- %.3g (4 sigma)", what, x, mu, 4 * sd);
}

static void uniform_stats(env *e, const double *u, double lo, double hi)
{
    int64_t bins[16] = {0};
    for (int64_t i = 0; i < RN; i++) {
        if (!(u[i] >= lo && u[i] < hi)) {
            case_fail(e, "value %.9g at %lld outside [%g, %g)", u[i], (long long)i, lo, hi);
            return;
        }
        bins[(int)((u[i] - lo) / (hi - lo) * 16)]++;
    }
    double w = hi - lo, mu = mean_of(u, RN);
    near(e, "mean", mu, (lo + hi) / 2, w / sqrt(12.0 * RN));
    near(e, "variance", var_of(u, RN, mu), w * w / 12, w * w / sqrt(180.0 * RN));
    double chi2 = 0, expect = RN / 16.0;
    for (int b = 0; b < 16; b++)
        chi2 += (bins[b] - expect) * (bins[b] - expect) / expect;
    if (!(chi2 < 55)) /* 15 degrees of freedom: P(chi2 > 55) < 1e-6 */
        case_fail(e, "chi-square of 16 bins %.1f", chi2);
}

/* u = U[-2, 3) over [331, 317] and u01 = U[0, 1) over [4096], from one counter. */
static void random_uniform(suite *s, int *failed)
{
    static const tcase c = {.name = "rand_uniform", .op = EX_OP_RAND_UNIFORM};
    env e;
    env_open(&e, s, &c);
    rgraph g;
    int64_t two = 2, ne[2] = {RN0, RN1}, n[2] = {RN, 4096}, nu = 4096;
    g.ctr = ex_input(e.ctx, EX_I32, 1, &two, "counter");
    g.t[0] = ex_keep(e.ctx, ex_rand_uniform(e.ctx, g.ctr, 2, ne, -2, 3));
    g.t[1] = ex_keep(e.ctx, ex_rand_uniform(e.ctx, g.ctr, 1, &nu, 0, 1));
    double *a[2], *b[2];
    for (int k = 0; k < 2; k++) {
        a[k] = xcalloc((size_t)n[k], sizeof(double));
        b[k] = xcalloc((size_t)n[k], sizeof(double));
    }
    const int32_t c0[2] = {3, 0}, c1[2] = {4, 0}, c2[2] = {3, 1};
    if (random_run(&e, &g, c0, a, 2, n)) {
        uniform_stats(&e, a[0], -2, 3);
        for (int64_t i = 0; i < nu; i++) /* lo 0, hi 1: exactly the 24-bit grid */
            if (!(a[1][i] >= 0 && a[1][i] < 1 && ldexp(a[1][i], 24) == floor(ldexp(a[1][i], 24)))) {
                case_fail(&e, "U[0, 1) value %.9g at %lld is not k / 2^24", a[1][i], (long long)i);
                break;
            }
        double *scaled = xcalloc((size_t)nu, sizeof *scaled);
        for (int64_t i = 0; i < nu; i++)
            scaled[i] = (double)(float)((a[0][i] + 2) / 5);
        if (same_fraction(scaled, a[1], nu) > 0.01)
            case_fail(&e, "two random nodes draw the same stream");
        free(scaled);
    }
    if (random_run(&e, &g, c0, b, 2, n) && same_fraction(a[0], b[0], RN) != 1)
        case_fail(&e, "the same counter gave other values");
    if (random_run(&e, &g, c1, b, 2, n) && same_fraction(a[0], b[0], RN) > 0.01)
        case_fail(&e, "counters {3, 0} and {4, 0} gave the same values");
    if (random_run(&e, &g, c2, b, 2, n) && same_fraction(a[0], b[0], RN) > 0.01)
        case_fail(&e, "counters {3, 0} and {3, 1} gave the same values");
    *failed += e.failures > 0;
    for (int k = 0; k < 2; k++) {
        free(a[k]);
        free(b[k]);
    }
    env_close(&e);
}

/* One U[0, 1) [4096] node in a fresh context seeded with seed; false on failure. */
static bool seeded_uniform(env *parent, uint64_t seed, double *u)
{
    static const tcase c = {.name = "rand_uniform seeded", .op = EX_OP_RAND_UNIFORM};
    env e;
    env_open(&e, parent->s, &c);
    ex_ctx_set_seed(e.ctx, seed);
    rgraph g;
    int64_t two = 2, n = 4096;
    const int32_t c0[2] = {5, 0};
    g.ctr = ex_input(e.ctx, EX_I32, 1, &two, "counter");
    g.t[0] = ex_keep(e.ctx, ex_rand_uniform(e.ctx, g.ctr, 1, &n, 0, 1));
    bool ok = random_run(&e, &g, c0, &u, 1, &n);
    parent->failures += e.failures;
    env_close(&e);
    return ok;
}

/* The same seed gives the same stream in another context; another seed another one. */
static void random_seeds(suite *s, int *failed)
{
    static const tcase c = {.name = "rand_uniform seeds", .op = EX_OP_RAND_UNIFORM};
    env e;
    env_open(&e, s, &c);
    double *u[3];
    for (int k = 0; k < 3; k++)
        u[k] = xcalloc(4096, sizeof(double));
    if (seeded_uniform(&e, 42, u[0]) && seeded_uniform(&e, 42, u[1]) &&
        seeded_uniform(&e, 43, u[2])) {
        if (same_fraction(u[0], u[1], 4096) != 1)
            case_fail(&e, "seed 42 gave two different streams");
        if (same_fraction(u[0], u[2], 4096) > 0.01)
            case_fail(&e, "seeds 42 and 43 gave the same stream");
    }
    *failed += e.failures > 0;
    for (int k = 0; k < 3; k++)
        free(u[k]);
    env_close(&e);
}

/* N(1.5, 0.5^2) over [331, 317]: moments, the 1- and 2-sigma masses, and the range
 * Box-Muller allows with u1 >= 1e-7 (|z| <= sqrt(-2 ln 1e-7) = 5.68). */
static void random_normal(suite *s, int *failed)
{
    static const tcase c = {.name = "rand_normal", .op = EX_OP_RAND_NORMAL};
    env e;
    env_open(&e, s, &c);
    rgraph g;
    int64_t two = 2, ne[2] = {RN0, RN1}, n = RN;
    const double mu = 1.5, sd = 0.5;
    g.ctr = ex_input(e.ctx, EX_I32, 1, &two, "counter");
    g.t[0] = ex_keep(e.ctx, ex_rand_normal(e.ctx, g.ctr, 2, ne, (float)mu, (float)sd));
    double *a = xcalloc(RN, sizeof *a), *b = xcalloc(RN, sizeof *b);
    const int32_t c0[2] = {7, 2}, c1[2] = {8, 2};
    if (random_run(&e, &g, c0, &a, 1, &n)) {
        double m = mean_of(a, RN), v = var_of(a, RN, m), in1 = 0, in2 = 0, big = 0;
        for (int64_t i = 0; i < RN; i++) {
            double z = fabs(a[i] - mu) / sd;
            in1 += z < 1;
            in2 += z < 2;
            big = fmax(big, z);
        }
        near(&e, "mean", m, mu, sd / sqrt((double)RN));
        near(&e, "std", sqrt(v), sd, sd / sqrt(2.0 * RN));
        near(&e, "mass within 1 sigma", in1 / RN, 0.682689, sqrt(0.682689 * 0.317311 / RN));
        near(&e, "mass within 2 sigma", in2 / RN, 0.954500, sqrt(0.9545 * 0.0455 / RN));
        if (!(big <= 5.7))
            case_fail(&e, "|z| reaches %.3f sigma, beyond Box-Muller's 5.68", big);
    }
    if (random_run(&e, &g, c0, &b, 1, &n) && same_fraction(a, b, RN) != 1)
        case_fail(&e, "the same counter gave other values");
    if (random_run(&e, &g, c1, &b, 1, &n) && same_fraction(a, b, RN) > 0.01)
        case_fail(&e, "counters {7, 2} and {8, 2} gave the same values");
    *failed += e.failures > 0;
    free(a);
    free(b);
    env_close(&e);
}

void family_random(void **state)
{
    suite *s = *state;
    int failed = 0;
    random_uniform(s, &failed);
    random_seeds(s, &failed);
    random_normal(s, &failed);
    if (failed)
        fail_msg("%d random cases failed on backend %s", failed, s->backend_name);
}

/* ---- groups of optimizer updates: the plan runs consecutive SGD (or Adam) nodes of
 * dense tensors as one launch where the backend groups them (core/group.h) ---- */

/* The updates of one group test, each node on slices [off, off + n) of its roots. */
enum { UG_NODES = 7, UG_ROOT = 70001 };
static const int64_t ug_n[UG_NODES] = {1, 7, 300, 150, 70001, 33, 129};
static const int64_t ug_off[UG_NODES] = {0, 0, 0, 100, 0, 0, 0};

typedef struct ugraph {
    ex_ctx *ctx;
    ex_tensor *root[UG_NODES][4]; /* p, g, m (SGD: momentum), v (Adam) */
    ex_tensor *scal, *norm;       /* lr (SGD) or {lr, t} (Adam); a clip's norm */
    int nst;                      /* moments: 1 (SGD) or 2 */
} ugraph;

/* Node k's operand r of root t: a slice of rows 2..4 of a [6, 50] root for node 3; the
 * gradient of node 5 transposed (not dense: it cannot join a group). */
static ex_tensor *ug_operand(ugraph *g, int k, int r)
{
    ex_tensor *t = g->root[k][r];
    if (ug_off[k])
        return ex_slice(g->ctx, t, 0, 2, 3);
    if (k == 5 && r == 1)
        return ex_transpose(g->ctx, t, 0, 1);
    return t;
}

static ex_tensor *ug_root(ugraph *g, int k, int r)
{
    int64_t ne[2] = {1, ug_n[k]};
    if (ug_off[k])
        ne[0] = 6, ne[1] = 50;
    else if (k == 5)
        ne[0] = 3, ne[1] = 11; /* transposed for its gradient, [11, 3] */
    if (r == 0)
        return ex_param(g->ctx, 2, ne, "p");
    if (r == 1) {
        if (k == 5)
            ne[0] = 11, ne[1] = 3;
        return ex_input(g->ctx, EX_F32, 2, ne, "g");
    }
    return ex_state(g->ctx, EX_F32, 2, ne, r == 2 ? "m" : "v");
}

/* kind 0: SGD with momentum, Nesterov and weight decay; 1: the same clipped; 2: Adam. */
static void ug_build(ugraph *g, int kind)
{
    g->ctx = ex_ctx_new();
    g->nst = kind == 2 ? 2 : 1;
    int64_t one = 1, two = 2;
    g->scal = ex_input(g->ctx, EX_F32, 1, kind == 2 ? &two : &one, "lr");
    g->norm = ex_input(g->ctx, EX_F32, 1, &one, "norm");
    for (int k = 0; k < UG_NODES; k++) {
        ex_tensor *x[4];
        for (int r = 0; r < 2 + g->nst; r++) {
            g->root[k][r] = ug_root(g, k, r);
            x[r] = ug_operand(g, k, r);
        }
        if (kind == 0)
            ex_sgd(g->ctx, x[0], x[1], x[2], g->scal, 0.9f, 0.5f, true);
        else if (kind == 1)
            ex_sgd_clip(g->ctx, x[0], x[1], x[2], g->scal, g->norm, 1.5f, 0.9f, 0.5f, false);
        else
            ex_adam(g->ctx, x[0], x[1], x[2], x[3], g->scal, 0.9f, 0.999f, 1e-8f, 0.5f);
    }
}

static int64_t ug_numel(const ugraph *g, int k)
{
    return ex_tensor_numel(g->root[k][0]);
}

/* Plans g (grouped or not), writes data[k][r] and the scalars, runs one step, reads the
 * roots into out[k][r]. */
static ex_status ug_run(suite *s, ugraph *g, bool grouped, float *const (*data)[4],
                        const float *scal, float norm, float *(*out)[4], int64_t *launches)
{
    ex_plan *p = NULL;
    ex_status st = plan_grouped(s, g->ctx, grouped, &p, launches);
    if (st == EX_OK)
        st = ex_plan_write(p, g->scal, scal, sizeof(float) * (g->nst == 2 ? 2 : 1));
    if (st == EX_OK)
        st = ex_plan_write(p, g->norm, &norm, sizeof norm);
    for (int k = 0; k < UG_NODES && st == EX_OK; k++)
        for (int r = 0; r < 2 + g->nst && st == EX_OK; r++)
            st =
                ex_plan_write(p, g->root[k][r], data[k][r], sizeof(float) * (size_t)ug_numel(g, k));
    if (st == EX_OK)
        st = ex_plan_run(p);
    for (int k = 0; k < UG_NODES && st == EX_OK; k++)
        for (int r = 0; r < 2 + g->nst && st == EX_OK; r++)
            st = ex_plan_read(p, g->root[k][r], out[k][r], sizeof(float) * (size_t)ug_numel(g, k));
    if (st != EX_OK)
        print_error("%s\n", ex_ctx_error(g->ctx));
    ex_plan_free(p);
    return st;
}

/* The reference step of node k in doubles: ref[r] is root r with the node's elements
 * updated. */
static void ug_reference(const ugraph *g, int kind, int k, float *const *in, const float *scal,
                         float norm, double *const *ref)
{
    int64_t numel = ug_numel(g, k), n = ug_n[k], off = ug_off[k];
    for (int r = 0; r < 2 + g->nst; r++)
        for (int64_t i = 0; i < numel; i++)
            ref[r][i] = in[r][i];
    double *grad = xcalloc((size_t)n, sizeof *grad); /* the gradient operand, dense */
    for (int64_t i = 0; i < n; i++)
        grad[i] = k == 5 ? ref[1][(i % 11) * 3 + i / 11] : ref[1][off + i];
    if (kind == 2)
        ref_adam(ref[0] + off, grad, ref[2] + off, ref[3] + off, n, scal[0], scal[1], (double)0.9f,
                 (double)0.999f, (double)1e-8f, 0.5);
    else
        ref_sgd(ref[0] + off, grad, ref[2] + off, n, scal[0], (double)0.9f, 0.5, kind == 0,
                kind == 1 ? ref_clip_coef(norm, 1.5) : 1.0);
    free(grad);
}

/* Checks one kind of update: the grouped plan against the ungrouped one bit for bit, and
 * against the reference; returns the failures. */
static int ug_check(suite *s, int kind)
{
    const ex_backend_iface *f = ex__backend_iface_of(s->be);
    ex_op op = kind == 2 ? EX_OP_ADAM : EX_OP_SGD;
    bool groups = f->groups && f->groups(ex__backend_impl_of(s->be), op);
    static const char *what[] = {"sgd, nesterov", "sgd, clipped", "adam"};
    ugraph g;
    ug_build(&g, kind);
    rng r = rng_from(what[kind]);
    const float scal[2] = {kind == 2 ? 0.05f : 0.1f, 3.0f}, norm = 4.0f;
    float *data[UG_NODES][4] = {{0}}, *out[2][UG_NODES][4] = {{{0}}};
    double *ref[4] = {0};
    for (int i = 0; i < 4; i++)
        ref[i] = xcalloc(UG_ROOT, sizeof(double));
    for (int k = 0; k < UG_NODES; k++)
        for (int i = 0; i < 2 + g.nst; i++) {
            int64_t m = ug_numel(&g, k);
            double lo = i == 0 ? -0.05 : i == 3 ? 0 : -1, hi = i == 0 ? 0.05 : i == 3 ? 1e-3 : 1;
            data[k][i] = xcalloc((size_t)m, sizeof(float));
            for (int64_t j = 0; j < m; j++)
                data[k][i][j] = (float)rng_uniform(&r, lo, hi);
            for (int v = 0; v < 2; v++)
                out[v][k][i] = xcalloc((size_t)m, sizeof(float));
        }
    int64_t launches[2] = {0};
    int failed = 0;
    for (int v = 0; v < 2; v++)
        if (ug_run(s, &g, v == 1, data, scal, norm, out[v], &launches[v]) != EX_OK) {
            print_error("FAIL [%s] %s group: the %s plan failed\n", s->backend_name, what[kind],
                        v ? "grouped" : "ungrouped");
            failed++;
        }
    /* nodes 0-4 join; node 5's transposed gradient ends the group; node 6 is alone after */
    int64_t want = groups ? 3 : UG_NODES;
    if (!failed && (launches[0] != UG_NODES || launches[1] != want)) {
        print_error("FAIL [%s] %s group: %lld and %lld launches, expected %d and %lld\n",
                    s->backend_name, what[kind], (long long)launches[0], (long long)launches[1],
                    UG_NODES, (long long)want);
        failed++;
    }
    for (int k = 0; k < UG_NODES && !failed; k++) {
        int64_t m = ug_numel(&g, k);
        ug_reference(&g, kind, k, data[k], scal, norm, ref);
        for (int i = 0; i < 2 + g.nst; i++) {
            double worst = 0;
            for (int64_t j = 0; j < m; j++)
                worst = fmax(worst, fabs(out[1][k][i][j] - ref[i][j]) / (0.1 + fabs(ref[i][j])));
            if (memcmp(out[0][k][i], out[1][k][i], sizeof(float) * (size_t)m) || worst > 1e-5) {
                print_error("FAIL [%s] %s group, node %d, root %d: %s the ungrouped run, "
                            "error %.3g of 0.1 + |ref| against the reference (bound 1e-5)\n",
                            s->backend_name, what[kind], k, i,
                            memcmp(out[0][k][i], out[1][k][i], sizeof(float) * (size_t)m)
                                ? "differs from"
                                : "equals",
                            worst);
                failed++;
            }
        }
    }
    for (int k = 0; k < UG_NODES; k++)
        for (int i = 0; i < 4; i++) {
            free(data[k][i]);
            free(out[0][k][i]);
            free(out[1][k][i]);
        }
    for (int i = 0; i < 4; i++)
        free(ref[i]);
    ex_ctx_free(g.ctx);
    return failed;
}

void update_groups(void **state)
{
    suite *s = *state;
    int failed = 0;
    for (int kind = 0; kind < 3; kind++)
        failed += ug_check(s, kind);
    if (failed)
        fail_msg("%d checks of grouped optimizer updates failed on %s", failed, s->backend_name);
}
