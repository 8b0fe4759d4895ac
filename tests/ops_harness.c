/* The op suite's driver: operands, runs, forward and gradient checks, coverage. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ops_harness.h"

/* ---- generator and small helpers ---- */

uint64_t rng_next(rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double rng_uniform(rng *r, double lo, double hi)
{
    return lo + (hi - lo) * (double)(rng_next(r) >> 11) * 0x1.0p-53;
}

int64_t rng_below(rng *r, int64_t n)
{
    return (int64_t)(rng_next(r) % (uint64_t)n);
}

rng rng_from(const char *name)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const char *p = name; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    return (rng){h};
}

void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    assert_non_null(p);
    return p;
}

int64_t numel_of(int n, const int64_t *ne)
{
    int64_t k = 1;
    for (int d = 0; d < n; d++)
        k *= ne[d];
    return k;
}

ex_tdesc dense_desc(ex_buffer *buf, uint64_t at, ex_dtype dt, int nd, const int64_t *ne)
{
    ex_tdesc t = {.dtype = dt, .ndim = nd, .buf = buf, .offset = at};
    int64_t st = 1;
    for (int d = nd - 1; d >= 0; d--) {
        t.ne[d] = ne[d];
        t.st[d] = st;
        st *= ne[d];
    }
    return t;
}

void yshape4(const env *e, int64_t ne[4])
{
    int pad = 4 - e->ynd;
    for (int d = 0; d < 4; d++)
        ne[d] = d < pad ? 1 : e->yne[d - pad];
}

void shape4(const env *e, int k, int64_t ne[4])
{
    int pad = 4 - e->ond[k];
    for (int d = 0; d < 4; d++)
        ne[d] = d < pad ? 1 : e->one[k][d - pad];
}

void case_fail(env *e, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    print_error("FAIL [%s] %s (%s): %s\n", e->s->backend_name, e->c->name, ex_op_name(e->c->op),
                msg);
    e->failures++;
}

double nmse(const double *y, const double *ref, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num += (y[i] - ref[i]) * (y[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return num / (den > 1e-30 ? den : 1e-30);
}

bool check_nmse(env *e, const char *what, const double *y, const double *ref, int64_t n, double tol)
{
    double err = nmse(y, ref, n);
    if (e->s->verbose)
        print_message("  %-28s %-22s NMSE %.3g (bound %.3g)\n", e->c->name, what, err, tol);
    if (err <= tol)
        return true; /* a NaN anywhere fails here */
    int64_t worst = 0;
    for (int64_t i = 1; i < n; i++)
        if (!(fabs(y[i] - ref[i]) <= fabs(y[worst] - ref[worst])))
            worst = i;
    case_fail(e, "%s (op output %s): NMSE %.3g > %.3g (worst element %lld: %.9g, reference %.9g)",
              what, e->yshape, err, tol, (long long)worst, y[worst], ref[worst]);
    return false;
}

/* ---- running a graph ---- */

ex_status plan_graph(suite *s, ex_ctx *ctx, ex_plan **plan, char *msg, size_t len)
{
    ex_plan_opts o;
    ex_plan_opts_default(&o);
    o.poison = true;
    ex_status st = ex_graph_plan(ctx, s->be, &o, plan);
    if (st != EX_OK) {
        snprintf(msg, len, "%s", ex_ctx_error(ctx));
        return st;
    }
    for (int64_t i = 0; i < ex_plan_node_count(*plan); i++) {
        ex_node_info info;
        if (ex_plan_node_info(*plan, i, &info) == EX_OK && (unsigned)info.op < EX_OP_COUNT)
            s->seen[info.op] = true;
    }
    return EX_OK;
}

ex_status plan_grouped(suite *s, ex_ctx *ctx, bool grouped, ex_plan **plan, int64_t *launches)
{
    ex_plan_opts o;
    ex_plan_opts_default(&o);
    o.no_group = !grouped;
    ex_status st = ex_graph_plan(ctx, s->be, &o, plan);
    *launches = ex_plan_launch_count(*plan);
    if (st != EX_OK)
        print_error("%s\n", ex_ctx_error(ctx));
    return st;
}

ex_status node_run(const suite *s, const ex_node_exec *n, char *msg, size_t len)
{
    const ex_backend_iface *f = ex__backend_iface_of(s->be);
    void *im = ex__backend_impl_of(s->be);
    ex_status st = f->compute(im, n, 1, NULL);
    if (st == EX_OK)
        st = f->synchronize(im);
    const char *what = st == EX_OK ? "" : f->error(im);
    snprintf(msg, len, "%s", what ? what : "no message");
    return st;
}

bool node_case_ok(const suite *s, ex_op op, const char *what, ex_status st, const char *msg,
                  ex_status want, const char *needle, bool value, const char *note)
{
    bool named = want == EX_OK || (needle && strstr(msg, needle));
    if (st == want && named && value)
        return true;
    print_error("FAIL [%s] %s node, %s: %s (%s), expected %s%s%s%s\n", s->backend_name,
                ex_op_name(op), what, ex_status_str(st), msg, ex_status_str(want),
                needle ? " naming " : "", needle ? needle : "", note ? note : "");
    return false;
}

bool plan_has(const ex_plan *plan, ex_op op)
{
    for (int64_t i = 0; i < ex_plan_node_count(plan); i++) {
        ex_node_info info;
        if (ex_plan_node_info(plan, i, &info) == EX_OK && info.op == op)
            return true;
    }
    return false;
}

bool write_f(env *e, ex_tensor *t, const double *v, int64_t n)
{
    float *f = xcalloc((size_t)n, sizeof *f);
    for (int64_t i = 0; i < n; i++)
        f[i] = (float)v[i];
    ex_status st = ex_plan_write(e->plan, t, f, (size_t)n * sizeof *f);
    free(f);
    if (st != EX_OK)
        case_fail(e, "write %s: %s", ex_tensor_name(t), ex_plan_error(e->plan));
    return st == EX_OK;
}

bool write_i(env *e, ex_tensor *t, const int32_t *v, int64_t n)
{
    ex_status st = ex_plan_write(e->plan, t, v, (size_t)n * sizeof *v);
    if (st != EX_OK)
        case_fail(e, "write %s: %s", ex_tensor_name(t), ex_plan_error(e->plan));
    return st == EX_OK;
}

bool run_plan(env *e)
{
    ex_status st = ex_plan_run(e->plan);
    if (st != EX_OK)
        case_fail(e, "run: %s: %s", ex_status_str(st), ex_plan_error(e->plan));
    return st == EX_OK;
}

bool read_f(env *e, ex_tensor *t, double *v, int64_t n)
{
    float *f = xcalloc((size_t)n, sizeof *f);
    ex_status st = ex_plan_read(e->plan, t, f, (size_t)n * sizeof *f);
    for (int64_t i = 0; i < n; i++)
        v[i] = f[i];
    free(f);
    if (st != EX_OK)
        case_fail(e, "read %s: %s", ex_tensor_name(t), ex_plan_error(e->plan));
    return st == EX_OK;
}

void env_open(env *e, suite *s, const tcase *c)
{
    memset(e, 0, sizeof *e);
    e->s = s;
    e->c = c;
    e->rng = rng_from(c->name);
    e->ctx = ex_ctx_new();
    assert_non_null(e->ctx);
    e->seed = rng_next(&e->rng);
    ex_ctx_set_seed(e->ctx, e->seed);
}

void env_close(env *e)
{
    ex_plan_free(e->plan);
    ex_ctx_free(e->ctx);
    for (int k = 0; k < MAX_ROOTS; k++) {
        free(e->rd[k]);
        free(e->od[k]);
        free(e->oi[k]);
        free(e->gv[k]);
    }
    free(e->yv);
    free(e->yr);
    free(e->rv);
    free(e->scratch);
    memset(e, 0, sizeof *e);
}

/* ---- operands: roots, their data and views ---- */

/* The operand's geometry over the root's elements, as ex_slice / ex_transpose make it. */
static void view_of(env *e, int k)
{
    const rspec *r = &e->c->r[k];
    int64_t *ne = e->one[k], *st = e->ost[k];
    e->ond[k] = r->ndim;
    int64_t s = 1;
    for (int d = r->ndim - 1; d >= 0; d--) {
        ne[d] = r->ne[d];
        st[d] = s;
        s *= r->ne[d];
    }
    e->ooff[k] = 0;
    if (r->view == V_SLICE) {
        ne[r->v0] = r->v2;
        e->ooff[k] = r->v1 * st[r->v0];
    } else if (r->view == V_TRANSPOSE) {
        int64_t t = ne[r->v0];
        ne[r->v0] = ne[r->v1];
        ne[r->v1] = t;
        t = st[r->v0];
        st[r->v0] = st[r->v1];
        st[r->v1] = t;
    }
    e->on[k] = numel_of(r->ndim, ne);
}

/* Root element of operand element i. */
static int64_t root_index(const env *e, int k, int64_t i)
{
    int64_t off = e->ooff[k];
    for (int d = e->ond[k] - 1; d >= 0; d--) {
        off += (i % e->one[k][d]) * e->ost[k][d];
        i /= e->one[k][d];
    }
    return off;
}

void scatter_root(env *e, int k)
{
    for (int64_t i = 0; i < e->on[k]; i++)
        e->rd[k][root_index(e, k, i)] = e->od[k][i];
}

void gather_root(env *e, int k)
{
    for (int64_t i = 0; i < e->on[k]; i++) {
        double v = e->rd[k][root_index(e, k, i)];
        e->od[k][i] = v;
        if (e->oi[k])
            e->oi[k][i] = (int32_t)v;
    }
}

static void gather_all(env *e)
{
    for (int k = 0; k < e->c->nr; k++)
        gather_root(e, k);
}

static void generate(env *e, int k)
{
    const rspec *r = &e->c->r[k];
    double *d = e->rd[k];
    int64_t n = e->rn[k];
    for (int64_t i = 0; i < n; i++) {
        double v = 0;
        switch (r->gen) {
        case G_UNI: v = rng_uniform(&e->rng, r->a, r->b); break;
        case G_AWAY: v = rng_uniform(&e->rng, r->a, r->b) * (rng_next(&e->rng) & 1 ? 1 : -1); break;
        case G_INT: v = r->a + (double)rng_below(&e->rng, (int64_t)(r->b - r->a)); break;
        case G_CONST: v = r->a; break;
        case G_NAN: v = NAN; break;
        case G_DISTINCT: v = (double)i; break;
        }
        d[i] = r->kind == R_I32 ? v : (double)(float)v;
    }
    if (r->gen == G_DISTINCT) { /* shuffle the grid 0..n-1, then centre and scale it */
        for (int64_t i = n - 1; i > 0; i--) {
            int64_t j = rng_below(&e->rng, i + 1);
            double t = d[i];
            d[i] = d[j];
            d[j] = t;
        }
        for (int64_t i = 0; i < n; i++)
            d[i] = (double)(float)((d[i] - (double)(n - 1) / 2) * r->a);
    }
}

static ex_tensor *make_root(env *e, const rspec *r)
{
    switch (r->kind) {
    case R_PARAM: return ex_param(e->ctx, r->ndim, r->ne, r->name);
    case R_STATE: return ex_state(e->ctx, EX_F32, r->ndim, r->ne, r->name);
    case R_I32: return ex_input(e->ctx, EX_I32, r->ndim, r->ne, r->name);
    default: break;
    }
    ex_tensor *t = ex_input(e->ctx, EX_F32, r->ndim, r->ne, r->name);
    return r->grad ? ex_requires_grad(e->ctx, t) : t;
}

static void make_operands(env *e)
{
    for (int k = 0; k < e->c->nr; k++) {
        const rspec *r = &e->c->r[k];
        e->root[k] = make_root(e, r);
        e->opnd[k] = r->view == V_SLICE       ? ex_slice(e->ctx, e->root[k], r->v0, r->v1, r->v2)
                     : r->view == V_TRANSPOSE ? ex_transpose(e->ctx, e->root[k], r->v0, r->v1)
                                              : e->root[k];
        e->rn[k] = numel_of(r->ndim, r->ne);
        e->rd[k] = xcalloc((size_t)e->rn[k], sizeof(double));
        view_of(e, k);
        e->od[k] = xcalloc((size_t)e->on[k], sizeof(double));
        if (r->kind == R_I32)
            e->oi[k] = xcalloc((size_t)e->on[k], sizeof(int32_t));
        generate(e, k);
    }
}

/* Whether root k's gradient is compared with finite differences. */
static bool checked(const env *e, int k)
{
    const rspec *r = &e->c->r[k];
    return r->grad && !r->nocheck && r->kind != R_I32 && r->kind != R_STATE;
}

/* ---- finite differences of the double reference ---- */

/* The reference loss sum(ref(x) * r) at the current root data. */
static double ref_loss(env *e)
{
    gather_all(e);
    (e->c->dref ? e->c->dref : e->c->ref)(e, e->yr);
    double l = 0;
    for (int64_t i = 0; i < e->ny; i++)
        l += e->yr[i] * e->rv[i];
    return l;
}

static double note_grad(env *e, const char *what, double err)
{
    if (e->s->verbose)
        print_message("  %-28s %-22s NMSE %.3g (bound %.3g)\n", e->c->name, what, err, GRAD_TOL);
    if (!(err <= e->s->worst_grad)) {
        e->s->worst_grad = err;
        e->s->worst_grad_case = e->c->name;
    }
    return err;
}

/* The directional derivative along a random direction covering every element of every
 * checked root, scaled per element like the step. */
static void fd_directional(env *e, double step)
{
    double *dir[MAX_ROOTS] = {0}, *orig[MAX_ROOTS] = {0}, dbe = 0, l[2];
    for (int k = 0; k < e->c->nr; k++) {
        if (!checked(e, k))
            continue;
        dir[k] = xcalloc((size_t)e->rn[k], sizeof(double));
        orig[k] = xcalloc((size_t)e->rn[k], sizeof(double));
        memcpy(orig[k], e->rd[k], (size_t)e->rn[k] * sizeof(double));
        for (int64_t i = 0; i < e->rn[k]; i++) {
            dir[k][i] = rng_uniform(&e->rng, -1, 1) * fmax(1, fabs(orig[k][i]));
            dbe += e->gv[k][i] * dir[k][i];
        }
    }
    for (int side = 0; side < 2; side++) {
        double h = side ? -step : step;
        for (int k = 0; k < e->c->nr; k++)
            for (int64_t i = 0; dir[k] && i < e->rn[k]; i++)
                e->rd[k][i] = orig[k][i] + h * dir[k][i];
        l[side] = ref_loss(e);
    }
    for (int k = 0; k < e->c->nr; k++) {
        if (orig[k])
            memcpy(e->rd[k], orig[k], (size_t)e->rn[k] * sizeof(double));
        free(dir[k]);
        free(orig[k]);
    }
    double dfd = (l[0] - l[1]) / (2 * step);
    double err =
        note_grad(e, "gradient (directional)", (dbe - dfd) * (dbe - dfd) / fmax(dfd * dfd, 1e-30));
    if (!(err <= GRAD_TOL))
        case_fail(e, "directional derivative: backend %.9g, differences %.9g, NMSE %.3g > %.3g",
                  dbe, dfd, err, GRAD_TOL);
}

/* FD_COORDS single coordinates, spread over the checked roots. */
static void fd_coords(env *e, double step)
{
    int ks[MAX_ROOTS], nk = 0;
    for (int k = 0; k < e->c->nr; k++)
        if (checked(e, k))
            ks[nk++] = k;
    double num = 0, den = 0, worst = -1;
    int64_t wi = 0;
    int wk = 0;
    for (int t = 0; t < FD_COORDS; t++) {
        int k = ks[t % nk];
        int64_t i = rng_below(&e->rng, e->rn[k]);
        double x0 = e->rd[k][i], h = step * fmax(1, fabs(x0)), l[2];
        for (int side = 0; side < 2; side++) {
            e->rd[k][i] = side ? x0 - h : x0 + h;
            l[side] = ref_loss(e);
        }
        e->rd[k][i] = x0;
        double fd = (l[0] - l[1]) / (2 * h), d = e->gv[k][i] - fd;
        num += d * d;
        den += fd * fd;
        if (!(fabs(d) <= worst)) {
            worst = fabs(d);
            wk = k;
            wi = i;
        }
    }
    double err = note_grad(e, "gradient (coordinates)", num / fmax(den, 1e-30));
    if (!(err <= GRAD_TOL))
        case_fail(e,
                  "gradient of %s at %d coordinates: NMSE %.3g > %.3g (worst: element %lld, "
                  "backend %.9g)",
                  e->c->r[wk].name, FD_COORDS, err, GRAD_TOL, (long long)wi, e->gv[wk][wi]);
}

/* Straight-through gradient: d loss / d x is exactly r, scattered through the view. */
static void identity_grad(env *e)
{
    for (int k = 0; k < e->c->nr; k++) {
        if (!checked(e, k))
            continue;
        double *want = xcalloc((size_t)e->rn[k], sizeof *want);
        for (int64_t i = 0; i < e->on[k]; i++)
            want[root_index(e, k, i)] = e->rv[i];
        for (int64_t i = 0; i < e->rn[k]; i++)
            if (e->gv[k][i] != want[i]) {
                case_fail(e, "straight-through gradient of %s at %lld: %.9g, expected %.9g",
                          e->c->r[k].name, (long long)i, e->gv[k][i], want[i]);
                break;
            }
        free(want);
    }
}

/* ---- the driver ---- */

/* Builds the op, its loss and gradients; false when the library refused. */
static bool build_case(env *e)
{
    const tcase *c = e->c;
    make_operands(e);
    if (c->init)
        c->init(e);
    e->y = c->build(e, e->opnd);
    if (ex_ctx_status(e->ctx) != EX_OK) {
        case_fail(e, "build: %s", ex_ctx_error(e->ctx));
        return false;
    }
    ex_keep(e->ctx, e->y);
    e->ynd = ex_tensor_ndim(e->y);
    for (int d = 0; d < e->ynd; d++)
        e->yne[d] = ex_tensor_dim(e->y, d);
    e->ny = ex_tensor_numel(e->y);
    ex_tensor_shape_str(e->y, e->yshape, sizeof e->yshape);
    e->yv = xcalloc((size_t)e->ny, sizeof(double));
    e->yr = xcalloc((size_t)e->ny, sizeof(double));
    e->rv = xcalloc((size_t)e->ny, sizeof(double));
    for (int64_t i = 0; i < e->ny; i++)
        e->rv[i] = (double)(float)rng_uniform(&e->rng, -1, 1);
    if (c->bwd == B_NONE)
        return true;
    bool any = false;
    for (int k = 0; k < c->nr; k++)
        any |= checked(e, k);
    if (!any) {
        case_fail(e, "a gradient check without a differentiable operand");
        return false;
    }
    e->r = ex_input(e->ctx, EX_F32, e->ynd, e->yne, "r");
    ex_tensor *loss = ex_sum(e->ctx, ex_mul(e->ctx, e->y, e->r), (1u << e->ynd) - 1);
    if (ex_graph_backward(e->ctx, loss) != EX_OK) {
        case_fail(e, "backward: %s", ex_ctx_error(e->ctx));
        return false;
    }
    for (int k = 0; k < c->nr; k++) {
        if (!checked(e, k))
            continue;
        e->grad[k] = ex_grad(e->ctx, e->root[k]);
        e->gv[k] = xcalloc((size_t)e->rn[k], sizeof(double));
        if (!e->grad[k]) {
            case_fail(e, "no gradient for %s", c->r[k].name);
            return false;
        }
    }
    return true;
}

/* Plans, writes every operand and r, runs once and reads y and the gradients. */
static bool first_run(env *e)
{
    const tcase *c = e->c;
    char msg[512];
    if (plan_graph(e->s, e->ctx, &e->plan, msg, sizeof msg) != EX_OK) {
        case_fail(e, "plan: %s", msg);
        return false;
    }
    if ((c->flags & F_PROFILE) && ex_plan_set_profile(e->plan, true) != EX_OK)
        case_fail(e, "profile: %s", ex_plan_error(e->plan));
    if (!plan_has(e->plan, c->op))
        case_fail(e, "the plan runs no %s node", ex_op_name(c->op));
    bool ok = true;
    for (int k = 0; k < c->nr && ok; k++) {
        if (c->r[k].kind != R_I32) {
            ok = write_f(e, e->root[k], e->rd[k], e->rn[k]);
            continue;
        }
        int32_t *v = xcalloc((size_t)e->rn[k], sizeof *v);
        for (int64_t i = 0; i < e->rn[k]; i++)
            v[i] = (int32_t)e->rd[k][i];
        ok = write_i(e, e->root[k], v, e->rn[k]);
        free(v);
    }
    if (!ok || (e->r && !write_f(e, e->r, e->rv, e->ny)) || !run_plan(e) ||
        !read_f(e, e->y, e->yv, e->ny))
        return false;
    for (int k = 0; k < c->nr; k++)
        if (e->grad[k] && !read_f(e, e->grad[k], e->gv[k], e->rn[k]))
            return false;
    return true;
}

static void forward_check(env *e)
{
    gather_all(e);
    e->c->ref(e, e->yr);
    double tol = ex_op_tolerance(e->c->op), err = nmse(e->yv, e->yr, e->ny);
    double *worst = &e->s->worst_fwd[e->c->op];
    if (!(err / tol <= *worst))
        *worst = err / tol;
    check_nmse(e, "forward", e->yv, e->yr, e->ny, tol);
}

/* Whether a second read of t (n elements) repeats v bit for bit. */
static bool same_bits(env *e, ex_tensor *t, const double *v, int64_t n, const char *what)
{
    double *w = xcalloc((size_t)n, sizeof *w);
    bool ok = read_f(e, t, w, n);
    for (int64_t i = 0; ok && i < n; i++)
        if (memcmp(&w[i], &v[i], sizeof *w) != 0) {
            case_fail(e, "a second run differs in %s at %lld: %.9g, first %.9g", what, (long long)i,
                      w[i], v[i]);
            ok = false;
        }
    free(w);
    return ok;
}

/* A second run of the same plan must give the same bits, forward and backward: no input
 * was overwritten (in place on a persistent tensor), nothing depends on leftovers,
 * reductions combine in a fixed order. */
static void rerun_check(env *e)
{
    if (!run_plan(e) || !same_bits(e, e->y, e->yv, e->ny, "the output"))
        return;
    for (int k = 0; k < e->c->nr; k++)
        if (e->grad[k] && !same_bits(e, e->grad[k], e->gv[k], e->rn[k], e->c->r[k].name))
            return;
}

int run_case(suite *s, const tcase *c)
{
    env e;
    env_open(&e, s, c);
    if (build_case(&e) && first_run(&e)) {
        gather_all(&e);
        if (c->prepare)
            c->prepare(&e);
        forward_check(&e);
        double step = c->step > 0 ? c->step : FD_STEP;
        s->grad_checked[c->op] |= c->bwd != B_NONE;
        if (c->bwd == B_FD) {
            fd_directional(&e, step);
            fd_coords(&e, step);
            gather_all(&e); /* the operands as they were, for the hooks */
        } else if (c->bwd == B_IDENTITY) {
            identity_grad(&e);
        }
        if (c->after)
            c->after(&e);
        if (!(c->flags & F_NORERUN))
            rerun_check(&e);
    }
    int f = e.failures;
    env_close(&e);
    return f;
}

void run_table(suite *s, const tcase *cases, int n)
{
    int failed = 0, checks = 0;
    for (int i = 0; i < n; i++) {
        int f = run_case(s, &cases[i]);
        failed += f > 0;
        checks += f;
    }
    if (failed)
        fail_msg("%d of %d cases failed (%d checks) on backend %s", failed, n, checks,
                 s->backend_name);
}
