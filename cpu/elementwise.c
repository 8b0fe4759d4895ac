/* Element-wise kernels: ADD, SUB, MUL, SCALE, AXPY, RELU, RELU_BWD, FILL, COPY, DROP_PATH.
 *
 * Every source is aligned to dst's shape padded to 4 dims; a source dim of size 1 (or of
 * stride 0) broadcasts. The fast path merges dims that lie back to back in every operand,
 * so dense tensors become one long run, and cuts the runs into tiles spread over threads.
 * The reference path visits one element at a time in row-major order. Both call the same
 * per-run functions, so they compute the same values; each run reads an element before it
 * writes the same element, which makes dst == src[0] (in place) safe. */
#include <stdint.h>
#include <string.h>

#include "core/philox.h"
#include "cpu/cpu.h"

#ifdef _OPENMP
#include <omp.h>

/* Threads for a parallel loop: the backend's count, or OpenMP's default when it sets none. */
static int ew_threads(const cpu_exec *e)
{
    return e->threads > 0 ? e->threads : omp_get_max_threads();
}
#endif

#define EW_MAX_SRC 2
/* Elements per work item: long enough to vectorize, short enough to spread over threads. */
#define EW_TILE 8192

/** n elements along one dimension: dst and sources with their element strides. */
typedef struct ew_run {
    int64_t n;
    void *d;
    int64_t sd;
    const void *s[EW_MAX_SRC];
    int64_t ss[EW_MAX_SRC];
    const void *arg; /**< the op's parameters */
} ew_run;

typedef void (*ew_fn)(const ew_run *r);

/** Operand 0 is dst, then the sources, all aligned to one shape of nd dims. */
typedef struct ew_ops {
    int nop;
    int nd;
    int64_t ne[4];
    int64_t st[1 + EW_MAX_SRC][4];
    char *base[1 + EW_MAX_SRC];
} ew_ops;

static int ew_valid(const ex_tdesc *t)
{
    return t->ndim >= 1 && t->ndim <= 4 && t->buf != NULL;
}

/* Checks the node (ex_td_ew_of) and aligns dst and the first nalign sources. */
static ex_status ew_setup(const cpu_exec *e, const ex_node_exec *n, const char *op, int nsrc,
                          int nalign, ew_ops *o)
{
    char why[160];
    ex_status st = ex_td_ew_of(n, nsrc, nalign, o->ne, o->st, why, sizeof why);
    if (st != EX_OK)
        return cpu_fail(e, st, "%s: %s", op, why);
    o->nop = 1 + nalign;
    o->nd = 4;
    o->base[0] = cpu_ptr(&n->dst);
    for (int i = 0; i < nalign; i++)
        o->base[1 + i] = cpu_ptr(&n->src[i]);
    return EX_OK;
}

static ex_status ew_need(const cpu_exec *e, const char *op, const ex_tdesc *t, ex_dtype dt,
                         const char *what)
{
    if (t->dtype != dt)
        return cpu_fail(e, EX_ERR_ARG, "%s: %s must be %s", op, what, dt == EX_F32 ? "f32" : "i32");
    return EX_OK;
}

/* Drops size-1 dims and merges a dim into its inner neighbour when every operand steps
 * over the pair with one stride; a dense tensor ends as one dim. */
static void ew_collapse(ew_ops *o)
{
    o->nd = ex_td_merge_dims(o->nop, o->ne, o->st, 0);
}

static void ew_tile(const ew_ops *o, int64_t item, int64_t tiles, ew_fn fn, const void *arg)
{
    int in = o->nd - 1;
    int64_t row = item / tiles, col = (item % tiles) * EW_TILE;
    int64_t off[1 + EW_MAX_SRC];
    for (int k = 0; k < o->nop; k++)
        off[k] = col * o->st[k][in];
    for (int d = in - 1; d >= 0; d--) {
        int64_t i = row % o->ne[d];
        row /= o->ne[d];
        for (int k = 0; k < o->nop; k++)
            off[k] += i * o->st[k][d];
    }
    ew_run r = {.n = o->ne[in] - col < EW_TILE ? o->ne[in] - col : EW_TILE, .arg = arg};
    r.d = o->base[0] + off[0] * 4;
    r.sd = o->st[0][in];
    for (int k = 1; k < o->nop; k++) {
        r.s[k - 1] = o->base[k] + off[k] * 4;
        r.ss[k - 1] = o->st[k][in];
    }
    fn(&r);
}

/* The reference: one element at a time, row-major, on the shape as given. */
static void ew_exec_ref(const ew_ops *o, ew_fn fn, const void *arg)
{
    ew_run r = {.n = 1, .arg = arg};
    int64_t c[4];
    for (c[0] = 0; c[0] < o->ne[0]; c[0]++)
        for (c[1] = 0; c[1] < o->ne[1]; c[1]++)
            for (c[2] = 0; c[2] < o->ne[2]; c[2]++)
                for (c[3] = 0; c[3] < o->ne[3]; c[3]++) {
                    int64_t off[1 + EW_MAX_SRC] = {0};
                    for (int k = 0; k < o->nop; k++)
                        for (int d = 0; d < 4; d++)
                            off[k] += c[d] * o->st[k][d];
                    r.d = o->base[0] + off[0] * 4;
                    for (int k = 1; k < o->nop; k++)
                        r.s[k - 1] = o->base[k] + off[k] * 4;
                    fn(&r);
                }
}

/* Every element of every operand is 4 bytes (f32 or i32). */
static void ew_exec(const cpu_exec *e, ew_ops *o, ew_fn fn, const void *arg)
{
    if (e->reference) {
        ew_exec_ref(o, fn, arg);
        return;
    }
    ew_collapse(o);
    int64_t inner = o->ne[o->nd - 1], rows = 1;
    for (int d = 0; d < o->nd - 1; d++)
        rows *= o->ne[d];
    int64_t tiles = (inner + EW_TILE - 1) / EW_TILE, items = rows * tiles;
#pragma omp parallel for num_threads(ew_threads(e)) schedule(static)
    for (int64_t i = 0; i < items; i++)
        ew_tile(o, i, tiles, fn, arg);
}

/* Per-run functions. x and y are the sources' elements, p the op's float parameters. */
#define EW_RUN(name, expr)                                                                         \
    static void run_##name(const ew_run *r)                                                        \
    {                                                                                              \
        float *d = r->d;                                                                           \
        const float *a = r->s[0], *b = r->s[1] ? r->s[1] : r->s[0];                                \
        const float *p = r->arg;                                                                   \
        int64_t sd = r->sd, sa = r->ss[0], sb = r->s[1] ? r->ss[1] : r->ss[0];                     \
        (void)p;                                                                                   \
        if (sd == 1 && sa == 1 && sb == 1) {                                                       \
            for (int64_t i = 0; i < r->n; i++) {                                                   \
                float x = a[i], y = b[i];                                                          \
                (void)y;                                                                           \
                d[i] = (expr);                                                                     \
            }                                                                                      \
            return;                                                                                \
        }                                                                                          \
        for (int64_t i = 0; i < r->n; i++) {                                                       \
            float x = a[i * sa], y = b[i * sb];                                                    \
            (void)y;                                                                               \
            d[i * sd] = (expr);                                                                    \
        }                                                                                          \
    }

EW_RUN(add, x + y)
EW_RUN(sub, x - y)
EW_RUN(mul, (x * y))
EW_RUN(axpy, p[0] * x + y)
EW_RUN(scale, p[0] * x)
/* NaN passes through (x < 0 is false), so a poisoned input still shows downstream. */
EW_RUN(relu, x < 0.0f ? 0.0f : x)
EW_RUN(relu_bwd, x > 0.0f ? y : 0.0f)

/* FILL and COPY move 4-byte patterns through memcpy, so f32 and i32 share them without
 * reading one type through the other. */
static void run_fill(const ew_run *r)
{
    uint32_t *d = r->d;
    for (int64_t i = 0; i < r->n; i++)
        memcpy(d + i * r->sd, r->arg, 4);
}

static void run_copy(const ew_run *r)
{
    uint32_t *d = r->d;
    const uint32_t *s = r->s[0];
    if (r->sd == 1 && r->ss[0] == 1) {
        if (d != s)
            memcpy(d, s, (size_t)r->n * 4);
        return;
    }
    for (int64_t i = 0; i < r->n; i++)
        memcpy(d + i * r->sd, s + i * r->ss[0], 4);
}

static ex_status ew_f32(const cpu_exec *e, const ex_node_exec *n, const char *op, int nsrc,
                        ew_fn fn)
{
    ew_ops o;
    ex_status st = ew_setup(e, n, op, nsrc, nsrc, &o);
    if (st == EX_OK)
        st = ew_need(e, op, &n->dst, EX_F32, "dst");
    for (int i = 0; i < nsrc && st == EX_OK; i++)
        st = ew_need(e, op, &n->src[i], EX_F32, "every source");
    if (st == EX_OK)
        ew_exec(e, &o, fn, n->fp);
    return st;
}

CPU_OP(add)
{
    return ew_f32(e, n, "add", 2, run_add);
}

CPU_OP(sub)
{
    return ew_f32(e, n, "sub", 2, run_sub);
}

CPU_OP(mul)
{
    return ew_f32(e, n, "mul", 2, run_mul);
}

CPU_OP(scale)
{
    return ew_f32(e, n, "scale", 1, run_scale);
}

CPU_OP(axpy)
{
    return ew_f32(e, n, "axpy", 2, run_axpy);
}

CPU_OP(relu)
{
    return ew_f32(e, n, "relu", 1, run_relu);
}

CPU_OP(relu_bwd)
{
    return ew_f32(e, n, "relu_bwd", 2, run_relu_bwd);
}

CPU_OP(fill)
{
    ew_ops o;
    ex_status st = ew_setup(e, n, "fill", 0, 0, &o);
    if (st != EX_OK)
        return st;
    int unwritten = ex_td_fill_unwritten(n);
    if (unwritten)
        return unwritten < 0 ? cpu_fail(e, EX_ERR_ARG, "fill: ip0 %d, expected 0 or 1", n->ip[0])
                             : EX_OK;
    uint32_t bits;
    if (n->dst.dtype == EX_F32) {
        memcpy(&bits, &n->fp[0], 4);
    } else if (n->dst.dtype == EX_I32) {
        int32_t v = ex_td_fill_i32(n->fp[0]);
        memcpy(&bits, &v, 4);
    } else {
        return cpu_fail(e, EX_ERR_ARG, "fill: dst must be f32 or i32");
    }
    ew_exec(e, &o, run_fill, &bits);
    return EX_OK;
}

/* A copy between different shapes of one element count (a reshape of a strided tensor)
 * pairs elements by their row-major logical index. */
static void copy_reshape(const cpu_exec *e, const ex_tdesc *dst, const ex_tdesc *src)
{
    uint32_t *d = cpu_ptr(dst);
    const uint32_t *s = cpu_ptr(src);
    int64_t m = ex_td_numel(dst);
    (void)e; /* read only by the OpenMP clauses */
#pragma omp parallel for if (!e->reference) num_threads(ew_threads(e)) schedule(static)
    for (int64_t i = 0; i < m; i++)
        memcpy(d + ex_td_at(dst, i), s + ex_td_at(src, i), 4);
}

CPU_OP(copy)
{
    if (n->nsrc != 1 || n->src == NULL)
        return cpu_fail(e, EX_ERR_ARG, "copy: %d sources, expected 1", n->nsrc);
    if (!ew_valid(&n->dst) || !ew_valid(&n->src[0]))
        return cpu_fail(e, EX_ERR_ARG, "copy: bad dst or source");
    if (n->dst.dtype != n->src[0].dtype || (n->dst.dtype != EX_F32 && n->dst.dtype != EX_I32))
        return cpu_fail(e, EX_ERR_ARG, "copy: source and dst must both be f32 or both i32");
    int64_t ne[4], st[4];
    ex_td_shape4(&n->dst, ne, st);
    if (!ex_td_align(&n->src[0], ne, st)) {
        if (ex_td_numel(&n->src[0]) != ex_td_numel(&n->dst))
            return cpu_fail(e, EX_ERR_SHAPE, "copy: %lld elements into %lld",
                            (long long)ex_td_numel(&n->src[0]), (long long)ex_td_numel(&n->dst));
        ex_td_shape4(&n->dst, ne, st);
        if (!ex_td_dst_ok(ne, st))
            return cpu_fail(e, EX_ERR_ARG, "copy: dst broadcasts (stride 0)");
        copy_reshape(e, &n->dst, &n->src[0]);
        return EX_OK;
    }
    ew_ops o;
    ex_status s = ew_setup(e, n, "copy", 1, 1, &o);
    if (s == EX_OK)
        ew_exec(e, &o, run_copy, NULL);
    return s;
}

/* Scales one sample: the dims inside dim p of the padded shape, at index s along dim p. */
static void dp_sample(const ew_ops *o, int p, int64_t s, float f)
{
    int64_t ne[4] = {1, 1, 1, 1}, sd[4] = {0}, sx[4] = {0};
    for (int d = p + 1; d < 4; d++) {
        ne[d] = o->ne[d];
        sd[d] = o->st[0][d];
        sx[d] = o->st[1][d];
    }
    float *d0 = (float *)o->base[0] + s * o->st[0][p];
    const float *x0 = (const float *)o->base[1] + s * o->st[1][p];
    for (int64_t i1 = 0; i1 < ne[1]; i1++)
        for (int64_t i2 = 0; i2 < ne[2]; i2++) {
            float *d = d0 + i1 * sd[1] + i2 * sd[2];
            const float *x = x0 + i1 * sx[1] + i2 * sx[2];
            for (int64_t i3 = 0; i3 < ne[3]; i3++)
                d[i3 * sd[3]] = x[i3 * sx[3]] * f;
        }
}

CPU_OP(drop_path)
{
    ew_ops o;
    ex_status st = ew_setup(e, n, "drop_path", 2, 1, &o);
    if (st == EX_OK)
        st = ew_need(e, "drop_path", &n->dst, EX_F32, "dst");
    if (st == EX_OK)
        st = ew_need(e, "drop_path", &n->src[0], EX_F32, "x");
    if (st == EX_OK)
        st = ew_need(e, "drop_path", &n->src[1], EX_I32, "counter");
    if (st != EX_OK)
        return st;
    const ex_tdesc *ct = &n->src[1];
    if (!ex_td_counter_ok(ct))
        return cpu_fail(e, EX_ERR_SHAPE, "drop_path: counter needs 2 elements");
    const int32_t *cnt = cpu_i32(ct);
    uint32_t k0 = (uint32_t)n->ip[0], k1 = (uint32_t)n->ip[1];
    uint32_t c0 = (uint32_t)cnt[ex_td_at(ct, 0)], c1 = (uint32_t)cnt[ex_td_at(ct, 1)];
    float keep = n->fp[0];
    int p = 4 - n->dst.ndim;
#pragma omp parallel for if (!e->reference) num_threads(ew_threads(e)) schedule(static)
    for (int64_t s = 0; s < o.ne[p]; s++) {
        float u = ex_philox_uniform(k0, k1, c0, c1, (uint64_t)s);
        dp_sample(&o, p, s, u < keep ? 1.0f / keep : 0.0f);
    }
    return EX_OK;
}
