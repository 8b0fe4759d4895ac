/* Softmax family over the last dim: SOFTMAX, SOFTMAX_BWD, LOG_SOFTMAX, LOG_SOFTMAX_BWD,
 * CROSS_ENTROPY, CROSS_ENTROPY_BWD, ACCURACY.
 *
 * A row (all dims but the last fixed) belongs to one thread and is summed in double in
 * index order, so each row's result does not depend on the thread count. The loss of
 * cross-entropy adds its row losses in fixed chunks of rows combined in order. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "cpu/cpu.h"

#ifdef _OPENMP
#include <omp.h>

/* Threads for a parallel loop: the backend's count, or OpenMP's default when it sets none. */
static int sm_threads(const cpu_exec *e)
{
    return e->threads > 0 ? e->threads : omp_get_max_threads();
}
#endif

#define SM_MAX_SRC 3

/** One row: K elements of dst and of each source, with their strides along the row. */
typedef struct sm_row {
    int64_t k;
    float *d;
    int64_t sd;
    const float *s[SM_MAX_SRC];
    int64_t ss[SM_MAX_SRC];
} sm_row;

typedef void (*sm_fn)(const sm_row *r);

/** dst and its sources aligned to dst's shape padded to 4 dims; dims 0..2 index rows. */
typedef struct sm_ops {
    int nsrc;
    int64_t ne[4];
    int64_t st[1 + SM_MAX_SRC][4];
    float *base[1 + SM_MAX_SRC];
} sm_ops;

static int64_t sm_row_off(const int64_t ne[4], const int64_t st[4], int64_t r)
{
    return (r / (ne[1] * ne[2])) * st[0] + ((r / ne[2]) % ne[1]) * st[1] + (r % ne[2]) * st[2];
}

static ex_status sm_setup(const cpu_exec *e, const ex_node_exec *n, const char *op, int nsrc,
                          sm_ops *o)
{
    char why[96];
    ex_status st = ex_td_rows_of(n, nsrc, o->ne, o->st, why, sizeof why);
    if (st != EX_OK)
        return cpu_fail(e, st, "%s: %s", op, why);
    o->nsrc = nsrc;
    o->base[0] = cpu_f32(&n->dst);
    for (int i = 0; i < nsrc; i++)
        o->base[1 + i] = cpu_f32(&n->src[i]);
    return EX_OK;
}

static void sm_exec(const cpu_exec *e, const sm_ops *o, sm_fn fn)
{
    int64_t rows = o->ne[0] * o->ne[1] * o->ne[2];
    (void)e; /* read only by the OpenMP clauses */
#pragma omp parallel for if (!e->reference) num_threads(sm_threads(e)) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        sm_row row = {.k = o->ne[3], .sd = o->st[0][3]};
        row.d = o->base[0] + sm_row_off(o->ne, o->st[0], r);
        for (int i = 0; i < o->nsrc; i++) {
            row.s[i] = o->base[1 + i] + sm_row_off(o->ne, o->st[1 + i], r);
            row.ss[i] = o->st[1 + i][3];
        }
        fn(&row);
    }
}

static ex_status sm_run(const cpu_exec *e, const ex_node_exec *n, const char *op, int nsrc,
                        sm_fn fn)
{
    sm_ops o;
    ex_status st = sm_setup(e, n, op, nsrc, &o);
    if (st == EX_OK)
        sm_exec(e, &o, fn);
    return st;
}

static float row_max(const float *x, int64_t s, int64_t k)
{
    float m = x[0];
    for (int64_t j = 1; j < k; j++)
        if (x[j * s] > m)
            m = x[j * s];
    return m;
}

/* Σ exp(x − m) in double. */
static double row_expsum(const float *x, int64_t s, int64_t k, double m)
{
    double sum = 0.0;
    for (int64_t j = 0; j < k; j++)
        sum += exp((double)x[j * s] - m);
    return sum;
}

static void row_softmax(const sm_row *r)
{
    const float *x = r->s[0];
    double m = row_max(x, r->ss[0], r->k), sum = row_expsum(x, r->ss[0], r->k, m);
    for (int64_t j = 0; j < r->k; j++)
        r->d[j * r->sd] = (float)(exp((double)x[j * r->ss[0]] - m) / sum);
}

static void row_log_softmax(const sm_row *r)
{
    const float *x = r->s[0];
    double m = row_max(x, r->ss[0], r->k), lse = log(row_expsum(x, r->ss[0], r->k, m));
    for (int64_t j = 0; j < r->k; j++)
        r->d[j * r->sd] = (float)((double)x[j * r->ss[0]] - m - lse);
}

static void row_softmax_bwd(const sm_row *r)
{
    const float *y = r->s[0], *dy = r->s[1];
    double dot = 0.0;
    for (int64_t j = 0; j < r->k; j++)
        dot += (double)dy[j * r->ss[1]] * y[j * r->ss[0]];
    for (int64_t j = 0; j < r->k; j++)
        r->d[j * r->sd] = (float)(y[j * r->ss[0]] * ((double)dy[j * r->ss[1]] - dot));
}

static void row_log_softmax_bwd(const sm_row *r)
{
    const float *y = r->s[0], *dy = r->s[1];
    double sum = 0.0;
    for (int64_t j = 0; j < r->k; j++)
        sum += dy[j * r->ss[1]];
    for (int64_t j = 0; j < r->k; j++)
        r->d[j * r->sd] = (float)(dy[j * r->ss[1]] - exp((double)y[j * r->ss[0]]) * sum);
}

CPU_OP(softmax)
{
    return sm_run(e, n, "softmax", 1, row_softmax);
}

CPU_OP(softmax_bwd)
{
    return sm_run(e, n, "softmax_bwd", 2, row_softmax_bwd);
}

CPU_OP(log_softmax)
{
    return sm_run(e, n, "log_softmax", 1, row_log_softmax);
}

CPU_OP(log_softmax_bwd)
{
    return sm_run(e, n, "log_softmax_bwd", 2, row_log_softmax_bwd);
}

/* ---- losses over logits [N, K] (any leading dims count as rows) and labels [N] ---- */

/** Logits as rows of K, and the i32 labels read by row index. */
typedef struct ce_in {
    int64_t ne[4], st[4];
    int64_t rows, k;
    const float *x;
    const ex_tdesc *labels;
    const int32_t *lab;
} ce_in;

static ex_status ce_setup(const cpu_exec *e, const ex_node_exec *n, const char *op, int nsrc,
                          ce_in *c)
{
    char why[96];
    ex_status st = ex_td_ce_of(n, nsrc, c->ne, c->st, &c->rows, why, sizeof why);
    if (st != EX_OK)
        return cpu_fail(e, st, "%s: %s", op, why);
    c->k = c->ne[3];
    c->x = cpu_f32(&n->src[0]);
    c->labels = &n->src[1];
    c->lab = cpu_i32(c->labels);
    return EX_OK;
}

static int32_t ce_label(const ce_in *c, int64_t r)
{
    return c->lab[ex_td_at(c->labels, r)];
}

/* Checked before any thread starts, so the message names the first bad row. */
static ex_status ce_check_labels(const cpu_exec *e, const char *op, const ce_in *c)
{
    for (int64_t r = 0; r < c->rows; r++) {
        int32_t y = ce_label(c, r);
        if (y < 0 || y >= c->k)
            return cpu_fail(e, EX_ERR_ARG, "%s: label %d of row %lld is outside [0, %lld)", op,
                            (int)y, (long long)r, (long long)c->k);
    }
    return EX_OK;
}

static ex_status ce_scalar_dst(const cpu_exec *e, const char *op, const ex_tdesc *d)
{
    if (d->ndim < 1 || d->ndim > 4 || d->dtype != EX_F32 || ex_td_numel(d) != 1)
        return cpu_fail(e, EX_ERR_SHAPE, "%s: dst must be one f32 element", op);
    return EX_OK;
}

/* −log_softmax(x)[y] = log Σ exp(x − m) + m − x[y]. */
static double ce_row_loss(const ce_in *c, int64_t r)
{
    const float *x = c->x + sm_row_off(c->ne, c->st, r);
    int64_t s = c->st[3];
    double m = row_max(x, s, c->k);
    return log(row_expsum(x, s, c->k, m)) + m - x[ce_label(c, r) * s];
}

static double ce_chunk(const ce_in *c, int64_t r0, int64_t r1)
{
    double acc = 0.0;
    for (int64_t r = r0; r < r1; r++)
        acc += ce_row_loss(c, r);
    return acc;
}

CPU_OP(cross_entropy)
{
    ce_in c;
    ex_status st = ce_setup(e, n, "cross_entropy", 2, &c);
    if (st == EX_OK)
        st = ce_scalar_dst(e, "cross_entropy", &n->dst);
    if (st == EX_OK)
        st = ce_check_labels(e, "cross_entropy", &c);
    if (st != EX_OK)
        return st;
    /* Chunks of about CPU_CHUNK elements, in whole rows. */
    int64_t per = c.k < CPU_CHUNK ? CPU_CHUNK / c.k : 1;
    int64_t nch = (c.rows + per - 1) / per;
    double total = 0.0;
    if (nch <= 1) {
        total = ce_chunk(&c, 0, c.rows);
    } else {
        double *part = cpu_alloc(e, sizeof(double) * (size_t)nch);
        if (part == NULL)
            return cpu_fail(e, EX_ERR_NOMEM, "cross_entropy: no memory for partial sums");
#pragma omp parallel for if (!e->reference) num_threads(sm_threads(e)) schedule(static)
        for (int64_t i = 0; i < nch; i++)
            part[i] = ce_chunk(&c, i * per, (i + 1) * per < c.rows ? (i + 1) * per : c.rows);
        for (int64_t i = 0; i < nch; i++)
            total += part[i];
        free(part);
    }
    cpu_f32(&n->dst)[0] = (float)(total / (double)c.rows);
    return EX_OK;
}

/* (softmax(x) − onehot(y)) · g for one row. */
static void ce_bwd_row(const ce_in *c, int64_t r, float *d, int64_t sd, double g)
{
    const float *x = c->x + sm_row_off(c->ne, c->st, r);
    int64_t s = c->st[3], y = ce_label(c, r);
    double m = row_max(x, s, c->k), sum = row_expsum(x, s, c->k, m);
    for (int64_t j = 0; j < c->k; j++) {
        double p = exp((double)x[j * s] - m) / sum;
        d[j * sd] = (float)((p - (j == y ? 1.0 : 0.0)) * g);
    }
}

CPU_OP(cross_entropy_bwd)
{
    ce_in c;
    ex_status st = ce_setup(e, n, "cross_entropy_bwd", 3, &c);
    if (st != EX_OK)
        return st;
    const ex_tdesc *dl = &n->src[2];
    int64_t sd[4];
    char why[96];
    if ((st = ex_td_ce_bwd_of(n, c.ne, sd, why, sizeof why)) != EX_OK)
        return cpu_fail(e, st, "cross_entropy_bwd: %s", why);
    st = ce_check_labels(e, "cross_entropy_bwd", &c);
    if (st != EX_OK)
        return st;
    double g = (double)cpu_f32(dl)[0] / (double)c.rows;
    float *d = cpu_f32(&n->dst);
#pragma omp parallel for if (!e->reference) num_threads(sm_threads(e)) schedule(static)
    for (int64_t r = 0; r < c.rows; r++)
        ce_bwd_row(&c, r, d + sm_row_off(c.ne, sd, r), sd[3], g);
    return EX_OK;
}

/* First index of the row's maximum. A number beats NaN, so one NaN does not hide the
 * answer; a row of NaN gives 0. */
static int64_t row_argmax(const float *x, int64_t s, int64_t k)
{
    int64_t best = 0;
    for (int64_t j = 1; j < k; j++) {
        float v = x[j * s], b = x[best * s];
        if (v > b || (b != b && v == v))
            best = j;
    }
    return best;
}

CPU_OP(accuracy)
{
    ce_in c;
    ex_status st = ce_setup(e, n, "accuracy", 2, &c);
    if (st == EX_OK)
        st = ce_scalar_dst(e, "accuracy", &n->dst);
    if (st != EX_OK)
        return st;
    int64_t hits = 0;
    /* An integer count is exact in any order, so a reduction clause is deterministic. */
#pragma omp parallel for if (!e->reference) num_threads(sm_threads(e)) reduction(+ : hits)
    for (int64_t r = 0; r < c.rows; r++)
        hits += row_argmax(c.x + sm_row_off(c.ne, c.st, r), c.st[3], c.k) == ce_label(&c, r);
    cpu_f32(&n->dst)[0] = (float)hits;
    return EX_OK;
}
