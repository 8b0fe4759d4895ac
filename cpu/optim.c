/* Optimizer kernels: SGD (with CLIP's scaling folded in when it has the norm as a 5th
 * source), ADAM, GRAD_NORM, CLIP.
 *
 * SGD and ADAM write the parameter through dst (which is src[0]) and their moments through
 * their own source descriptors: those sources are persistent state the op owns. Each
 * element is read before it is written, so the in-place update is safe. GRAD_NORM sums
 * squares in fixed chunks of CPU_CHUNK elements per tensor, added in order, so the norm is
 * bitwise the same for any thread count. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "cpu/cpu.h"

#ifdef _OPENMP
#include <omp.h>

/* Threads for a parallel loop: the backend's count, or OpenMP's default when it sets none. */
static int opt_threads(const cpu_exec *e)
{
    return e->threads > 0 ? e->threads : omp_get_max_threads();
}
#endif

#define OPT_MAX_OPS 5

/** dst and the sources it updates from, aligned to dst's padded shape. */
typedef struct opt_ops {
    int nop;
    int dense; /**< every operand row-major dense: element i is at i */
    int64_t ne[4], numel;
    int64_t st[OPT_MAX_OPS][4];
    float *p[OPT_MAX_OPS];
} opt_ops;

static int opt_dense(const int64_t ne[4], const int64_t st[4])
{
    int64_t s = 1;
    for (int d = 3; d >= 0; d--) {
        if (ne[d] != 1 && st[d] != s)
            return 0;
        s *= ne[d];
    }
    return 1;
}

/* Operand 0 is dst; operands 1..nalign are sources 0..nalign−1, checked in core
 * (ex_td_update_of; bit k of written: operand k is updated). */
static ex_status opt_setup(const cpu_exec *e, const ex_node_exec *n, const char *op, int nsrc,
                           int nalign, unsigned written, opt_ops *o)
{
    char why[96];
    ex_status st = ex_td_update_of(n, nsrc, nalign, written, o->ne, o->st, why, sizeof why);
    if (st != EX_OK)
        return cpu_fail(e, st, "%s: %s", op, why);
    o->nop = 1 + nalign;
    o->numel = o->ne[0] * o->ne[1] * o->ne[2] * o->ne[3];
    o->p[0] = cpu_f32(&n->dst);
    o->dense = opt_dense(o->ne, o->st[0]);
    for (int i = 0; i < nalign; i++) {
        o->p[1 + i] = cpu_f32(&n->src[i]);
        o->dense = o->dense && opt_dense(o->ne, o->st[1 + i]);
    }
    return EX_OK;
}

/* Element offsets of the logical index i in every operand. */
static void opt_offsets(const opt_ops *o, int64_t i, int64_t *off)
{
    if (o->dense) {
        for (int k = 0; k < o->nop; k++)
            off[k] = i;
        return;
    }
    int64_t c[4];
    for (int d = 3; d >= 0; d--) {
        c[d] = i % o->ne[d];
        i /= o->ne[d];
    }
    for (int k = 0; k < o->nop; k++)
        off[k] = c[0] * o->st[k][0] + c[1] * o->st[k][1] + c[2] * o->st[k][2] + c[3] * o->st[k][3];
}

/* A small f32 source read by logical index (lr, hyper, norm). */
static ex_status opt_scalars(const cpu_exec *e, const char *op, const ex_tdesc *t, int count,
                             float *v)
{
    if (!ex_td_valid(t, EX_F32) || ex_td_numel(t) != count)
        return cpu_fail(e, EX_ERR_SHAPE, "%s: expected an f32 source of %d element(s)", op, count);
    for (int i = 0; i < count; i++)
        v[i] = cpu_f32(t)[ex_td_at(t, i)];
    return EX_OK;
}

/* The scaling of a clipped SGD's gradient (5 sources: src[4] the norm, fp2 max_norm,
 * checked by ex_td_sgd_check): CLIP's coefficient, computed as CLIP computes it, so the
 * fused update is bitwise the unfused one. 4 sources: no clip, 1. */
static float sgd_clip_coef(const ex_node_exec *n)
{
    if (n->nsrc != 5)
        return 1.0f;
    const ex_tdesc *t = &n->src[4];
    return fminf(1.0f, n->fp[2] / (cpu_f32(t)[ex_td_at(t, 0)] + 1e-6f));
}

/** One SGD or Adam node, checked: its operands and what it computes with. */
typedef struct update {
    ex_op op;
    opt_ops o;
    float lr, wd;
    float mu, c;              /* SGD: momentum, the clip's coefficient (1: none) */
    float b1, b2, eps, bc[2]; /* Adam: betas, eps, bias corrections */
    int clipped, nesterov;
} update;

static ex_status update_setup(const cpu_exec *e, const ex_node_exec *n, update *u)
{
    char why[96];
    ex_status st = EX_OK;
    u->op = n->op;
    if (n->op == EX_OP_SGD) {
        if ((st = ex_td_sgd_check(n, why, sizeof why)) != EX_OK)
            return cpu_fail(e, st, "sgd: %s", why);
        st = opt_setup(e, n, "sgd", n->nsrc, 3, 1u | 1u << 3, &u->o);
        if (st == EX_OK)
            st = opt_scalars(e, "sgd", &n->src[3], 1, &u->lr);
        u->clipped = n->nsrc == 5;
        u->c = sgd_clip_coef(n);
        u->mu = n->fp[0];
        u->wd = n->fp[1];
        u->nesterov = n->ip[0] != 0;
        return st;
    }
    float hyper[2] = {0};
    st = opt_setup(e, n, "adam", 5, 4, 1u | 1u << 3 | 1u << 4, &u->o);
    if (st == EX_OK)
        st = opt_scalars(e, "adam", &n->src[4], 2, hyper);
    u->lr = hyper[0];
    u->b1 = n->fp[0];
    u->b2 = n->fp[1];
    u->eps = n->fp[2];
    u->wd = n->fp[3];
    /* Bias corrections in double: β^t for large t is far below f32 resolution of 1. */
    u->bc[0] = (float)(1.0 - pow(u->b1, hyper[1]));
    u->bc[1] = (float)(1.0 - pow(u->b2, hyper[1]));
    return st;
}

/* Element i of the update. */
static void update_at(const update *u, int64_t i)
{
    int64_t f[OPT_MAX_OPS];
    float *const *x = u->o.p;
    opt_offsets(&u->o, i, f);
    if (u->op == EX_OP_SGD) {
        /* the clipped gradient rounded to f32 on its own, as CLIP stores it */
        float gc = u->clipped ? x[2][f[2]] * u->c : x[2][f[2]];
        float p = x[1][f[1]], g = gc + u->wd * p;
        float m = u->mu * x[3][f[3]] + g;
        x[3][f[3]] = m;
        x[0][f[0]] = p - u->lr * (u->nesterov ? g + u->mu * m : m);
        return;
    }
    float p = x[1][f[1]], g = x[2][f[2]] + u->wd * p;
    float m = u->b1 * x[3][f[3]] + (1.0f - u->b1) * g;
    float v = u->b2 * x[4][f[4]] + (1.0f - u->b2) * g * g;
    x[3][f[3]] = m;
    x[4][f[4]] = v;
    x[0][f[0]] = p - u->lr * (m / u->bc[0]) / (sqrtf(v / u->bc[1]) + u->eps);
}

static ex_status update_node(const cpu_exec *e, const ex_node_exec *n)
{
    update u;
    ex_status st = update_setup(e, n, &u);
    if (st != EX_OK)
        return st;
#pragma omp parallel for if (!e->reference) num_threads(opt_threads(e)) schedule(static)
    for (int64_t i = 0; i < u.o.numel; i++)
        update_at(&u, i);
    return EX_OK;
}

CPU_OP(sgd)
{
    return update_node(e, n);
}

CPU_OP(adam)
{
    return update_node(e, n);
}

/* Nodes of a group set up and run per parallel region. */
#define UPDATE_BATCH 64

ex_status cpu_update_group(const cpu_exec *e, const ex_node_exec *n, int32_t count)
{
    update u[UPDATE_BATCH];
    for (int32_t k = 0; k < count; k++) { /* every node checked before any writes */
        ex_status st = update_setup(e, &n[k], &u[0]);
        if (st != EX_OK)
            return st;
    }
    for (int32_t b = 0; b < count; b += UPDATE_BATCH) {
        int32_t m = count - b < UPDATE_BATCH ? count - b : UPDATE_BATCH;
        for (int32_t k = 0; k < m; k++)
            update_setup(e, &n[b + k], &u[k]);
            /* the nodes write no common byte (the plan's groups), so a thread moves on to the
             * next node's share without waiting for the others */
#pragma omp parallel if (!e->reference) num_threads(opt_threads(e))
        for (int32_t k = 0; k < m; k++) {
#pragma omp for schedule(static) nowait
            for (int64_t i = 0; i < u[k].o.numel; i++)
                update_at(&u[k], i);
        }
    }
    return EX_OK;
}

/* Σ x² over the logical elements [k0, k1) of t, in order. */
static double sumsq_range(const ex_tdesc *t, int64_t k0, int64_t k1)
{
    const float *x = cpu_f32(t);
    double acc = 0.0;
    if (cpu_contiguous(t)) {
        for (int64_t i = k0; i < k1; i++)
            acc += (double)x[i] * x[i];
        return acc;
    }
    int64_t ne[4], st[4], c[4], k = k0, off = 0;
    ex_td_shape4(t, ne, st);
    for (int d = 3; d >= 0; d--) {
        c[d] = k % ne[d];
        k /= ne[d];
        off += c[d] * st[d];
    }
    for (int64_t left = k1 - k0; left > 0;) {
        int64_t len = ne[3] - c[3] < left ? ne[3] - c[3] : left;
        for (int64_t i = 0; i < len; i++)
            acc += (double)x[off + i * st[3]] * x[off + i * st[3]];
        left -= len;
        off += len * st[3];
        c[3] += len;
        for (int d = 3; d > 0 && c[d] == ne[d]; d--) {
            off += st[d - 1] - c[d] * st[d];
            c[d] = 0;
            c[d - 1]++;
        }
    }
    return acc;
}

/* first[i] = index of tensor i's first chunk; first[n] = all chunks. */
static void norm_chunks(const ex_node_exec *n, int64_t *first)
{
    first[0] = 0;
    for (int i = 0; i < n->nsrc; i++)
        first[i + 1] = first[i] + (ex_td_numel(&n->src[i]) + CPU_CHUNK - 1) / CPU_CHUNK;
}

/* The tensor holding chunk it: the last t with first[t] <= it (binary search). */
static int norm_tensor(const int64_t *first, int nsrc, int64_t it)
{
    int lo = 0, hi = nsrc - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (first[mid] <= it)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

static void norm_partials(const cpu_exec *e, const ex_node_exec *n, const int64_t *first,
                          double *part)
{
    (void)e; /* read only by the OpenMP clauses */
#pragma omp parallel for if (!e->reference) num_threads(opt_threads(e)) schedule(static)
    for (int64_t it = 0; it < first[n->nsrc]; it++) {
        int t = norm_tensor(first, n->nsrc, it);
        int64_t k0 = (it - first[t]) * CPU_CHUNK, m = ex_td_numel(&n->src[t]);
        part[it] = sumsq_range(&n->src[t], k0, k0 + CPU_CHUNK < m ? k0 + CPU_CHUNK : m);
    }
}

CPU_OP(grad_norm)
{
    char why[96];
    ex_status st = ex_td_grad_norm_check(n, why, sizeof why);
    if (st != EX_OK)
        return cpu_fail(e, st, "grad_norm: %s", why);
    int64_t *first = cpu_alloc(e, sizeof(int64_t) * (size_t)(n->nsrc + 1));
    if (first == NULL)
        return cpu_fail(e, EX_ERR_NOMEM, "grad_norm: no memory for the chunk table");
    norm_chunks(n, first);
    double *part = NULL;
    if (st == EX_OK && (part = cpu_alloc(e, sizeof(double) * (size_t)(first[n->nsrc] + 1))) == NULL)
        st = cpu_fail(e, EX_ERR_NOMEM, "grad_norm: no memory for partial sums");
    if (st == EX_OK) {
        norm_partials(e, n, first, part);
        double acc = 0.0;
        for (int64_t i = 0; i < first[n->nsrc]; i++)
            acc += part[i];
        cpu_f32(&n->dst)[0] = (float)sqrt(acc);
    }
    free(part);
    free(first);
    return st;
}

CPU_OP(clip)
{
    opt_ops o;
    float norm = 0.0f;
    ex_status st = opt_setup(e, n, "clip", 2, 1, 1u, &o);
    if (st == EX_OK)
        st = opt_scalars(e, "clip", &n->src[1], 1, &norm);
    if (st != EX_OK)
        return st;
    float c = fminf(1.0f, n->fp[0] / (norm + 1e-6f));
#pragma omp parallel for if (!e->reference) num_threads(opt_threads(e)) schedule(static)
    for (int64_t i = 0; i < o.numel; i++) {
        int64_t f[OPT_MAX_OPS];
        opt_offsets(&o, i, f);
        o.p[0][f[0]] = o.p[1][f[1]] * c;
    }
    return EX_OK;
}
