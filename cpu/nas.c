/* NAS kernels: MIXED_SUM, MIXED_SUM_BWD_W, GUMBEL_SOFTMAX, GUMBEL_SOFTMAX_BWD, HARDMAX_ST,
 * ENTROPY, ENTROPY_BWD, TOPK_MASK.
 *
 * The row ops treat all dims but the last as rows of K (an edge's candidates); a row
 * belongs to one thread and sums in double in index order. MIXED_SUM_BWD_W's dot products
 * run over fixed chunks of CPU_CHUNK elements added in order, so every result is bitwise
 * the same for any thread count. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/philox.h"
#include "cpu/cpu.h"

#ifdef _OPENMP
#include <omp.h>

/* Threads for a parallel loop: the backend's count, or OpenMP's default when it sets none. */
static int nas_threads(const cpu_exec *e)
{
    return e->threads > 0 ? e->threads : omp_get_max_threads();
}
#endif

/* Candidates per mixed op: one weight index per candidate lives in ip[]. */
#define NAS_MAX_X EX_NODE_IPARAMS
/* Elements a mixed sum accumulates on the stack before writing them out. */
#define MIX_TILE 1024

static int64_t nas_row_off(const int64_t ne[4], const int64_t st[4], int64_t r)
{
    return (r / (ne[1] * ne[2])) * st[0] + ((r / ne[2]) % ne[1]) * st[1] + (r % ne[2]) * st[2];
}

/* Element i of a [K]-like tensor read by logical index. */
static float nas_get(const ex_tdesc *t, int64_t i)
{
    return cpu_f32(t)[ex_td_at(t, i)];
}

/* ---- MIXED_SUM ---- */

/** The active candidates of a mixed op: their coefficient w[idx], index and source. */
typedef struct mix_set {
    int n, na;
    float c[NAS_MAX_X];
    int idx[NAS_MAX_X];
    int src[NAS_MAX_X];
} mix_set;

/* Checks the node (core/tdesc.h) into g and keeps the candidates whose mask entry is not 0
 * (src[first + j] is candidate j); one of them that does not fit fails the node. */
static ex_status mix_select(const cpu_exec *e, const ex_node_exec *n, const char *op, ex_td_mix *g,
                            mix_set *m)
{
    char why[96];
    ex_status st = ex_td_mix_of(n, g, why, sizeof why);
    if (st != EX_OK)
        return cpu_fail(e, st, "%s: %s", op, why);
    const ex_tdesc *mask = &n->src[1], *w = n->op == EX_OP_MIXED_SUM ? &n->src[0] : NULL;
    m->n = g->n;
    m->na = 0;
    for (int j = 0; j < m->n && st == EX_OK; j++) {
        int i = n->ip[j];
        if (nas_get(mask, i) == 0.0f)
            continue;
        st = ex_td_mix_candidate(n, g, j, why, sizeof why);
        m->c[m->na] = w ? nas_get(w, i) : 1.0f;
        m->idx[m->na] = i;
        m->src[m->na++] = 2 + j;
    }
    return st == EX_OK ? EX_OK : cpu_fail(e, st, "%s: %s", op, why);
}

/** dst and the active sources aligned to dst's padded shape. */
typedef struct mix_ops {
    int64_t ne[4];
    int64_t st[1 + NAS_MAX_X][4];
    char *base[1 + NAS_MAX_X];
} mix_ops;

static int mix_dense(const int64_t ne[4], const int64_t st[4])
{
    int64_t s = 1;
    for (int d = 3; d >= 0; d--) {
        if (ne[d] != 1 && st[d] != s)
            return 0;
        s *= ne[d];
    }
    return 1;
}

/* Σ c_j x_j over len elements; accumulated on the stack first, so dst may alias a source. */
static void mix_tile(const mix_set *m, const mix_ops *o, const int64_t *off, int64_t len)
{
    float acc[MIX_TILE];
    for (int64_t i = 0; i < len; i++)
        acc[i] = 0.0f;
    for (int j = 0; j < m->na; j++) {
        const float *x = (const float *)o->base[1 + j] + off[1 + j];
        int64_t s = o->st[1 + j][3];
        float c = m->c[j];
        if (s == 1)
            for (int64_t i = 0; i < len; i++)
                acc[i] += c * x[i];
        else
            for (int64_t i = 0; i < len; i++)
                acc[i] += c * x[i * s];
    }
    float *d = (float *)o->base[0] + off[0];
    for (int64_t i = 0; i < len; i++)
        d[i * o->st[0][3]] = acc[i];
}

/* Rows of the padded shape cut into tiles; a dense set of operands is one long row. */
static void mix_exec(const cpu_exec *e, const mix_set *m, mix_ops *o)
{
    int dense = !e->reference;
    for (int k = 0; k <= m->na && dense; k++)
        dense = mix_dense(o->ne, o->st[k]);
    if (dense) {
        int64_t numel = o->ne[0] * o->ne[1] * o->ne[2] * o->ne[3];
        for (int k = 0; k <= m->na; k++)
            o->st[k][3] = 1;
        o->ne[0] = o->ne[1] = o->ne[2] = 1;
        o->ne[3] = numel;
    }
    int64_t rows = o->ne[0] * o->ne[1] * o->ne[2];
    int64_t tiles = (o->ne[3] + MIX_TILE - 1) / MIX_TILE;
#pragma omp parallel for if (!e->reference) num_threads(nas_threads(e)) schedule(static)
    for (int64_t it = 0; it < rows * tiles; it++) {
        int64_t r = it / tiles, col = (it % tiles) * MIX_TILE, off[1 + NAS_MAX_X] = {0};
        for (int k = 0; k <= m->na; k++)
            off[k] = nas_row_off(o->ne, o->st[k], r) + col * o->st[k][3];
        mix_tile(m, o, off, o->ne[3] - col < MIX_TILE ? o->ne[3] - col : MIX_TILE);
    }
}

CPU_OP(mixed_sum)
{
    mix_set m;
    ex_td_mix g;
    ex_status st = mix_select(e, n, "mixed_sum", &g, &m);
    if (st != EX_OK)
        return st;
    mix_ops o;
    memcpy(o.ne, g.ne, sizeof o.ne);
    memcpy(o.st[0], g.st[0], sizeof o.st[0]);
    o.base[0] = cpu_ptr(&n->dst);
    for (int j = 0; j < m.na; j++) {
        memcpy(o.st[1 + j], g.st[m.src[j] - 1], sizeof o.st[1 + j]);
        o.base[1 + j] = cpu_ptr(&n->src[m.src[j]]);
    }
    mix_exec(e, &m, &o);
    return EX_OK;
}

/* ---- MIXED_SUM_BWD_W ---- */

/* Σ a·b over the logical elements [k0, k1) of the padded shape ne, in order. */
static double dot_range(const float *a, const int64_t sa[4], const float *b, const int64_t sb[4],
                        const int64_t ne[4], int64_t k0, int64_t k1)
{
    int64_t c[4], k = k0, left = k1 - k0, oa = 0, ob = 0;
    for (int d = 3; d >= 0; d--) {
        c[d] = k % ne[d];
        k /= ne[d];
        oa += c[d] * sa[d];
        ob += c[d] * sb[d];
    }
    double acc = 0.0;
    while (left > 0) {
        int64_t len = ne[3] - c[3] < left ? ne[3] - c[3] : left;
        for (int64_t i = 0; i < len; i++)
            acc += (double)a[oa + i * sa[3]] * b[ob + i * sb[3]];
        left -= len;
        oa += len * sa[3];
        ob += len * sb[3];
        c[3] += len;
        for (int d = 3; d > 0 && c[d] == ne[d]; d--) {
            oa += sa[d - 1] - c[d] * sa[d];
            ob += sb[d - 1] - c[d] * sb[d];
            c[d] = 0;
            c[d - 1]++;
        }
    }
    return acc;
}

/** dy and the active candidates aligned to dy's padded shape. */
typedef struct dw_ops {
    int64_t ne[4], numel, nch;
    int64_t st[1 + NAS_MAX_X][4];
    const float *p[1 + NAS_MAX_X];
} dw_ops;

/* dy and the active candidates, checked into g (mix_select), as the dot products read them. */
static void dw_setup(const ex_node_exec *n, const ex_td_mix *g, const mix_set *m, dw_ops *o)
{
    memcpy(o->ne, g->ne, sizeof o->ne);
    memcpy(o->st[0], g->st[0], sizeof o->st[0]);
    o->p[0] = cpu_f32(&n->src[0]);
    for (int j = 0; j < m->na; j++) {
        memcpy(o->st[1 + j], g->st[m->src[j] - 1], sizeof o->st[1 + j]);
        o->p[1 + j] = cpu_f32(&n->src[m->src[j]]);
    }
    o->numel = o->ne[0] * o->ne[1] * o->ne[2] * o->ne[3];
    o->nch = (o->numel + CPU_CHUNK - 1) / CPU_CHUNK;
}

/* dst[k] = Σ of the dot products of the active candidates with weight index k. */
static void dw_store(const ex_tdesc *d, const mix_set *m, const double *part, int64_t nch)
{
    float *dst = cpu_f32(d);
    for (int64_t k = 0; k < ex_td_numel(d); k++) {
        double acc = 0.0;
        for (int j = 0; j < m->na; j++) {
            if (m->idx[j] != k)
                continue;
            for (int64_t c = 0; c < nch; c++)
                acc += part[j * nch + c];
        }
        dst[ex_td_at(d, k)] = (float)acc;
    }
}

CPU_OP(mixed_sum_bwd_w)
{
    mix_set m;
    ex_td_mix g;
    dw_ops o;
    ex_status st = mix_select(e, n, "mixed_sum_bwd_w", &g, &m);
    if (st != EX_OK)
        return st;
    dw_setup(n, &g, &m, &o);
    double *part = cpu_alloc(e, sizeof(double) * (size_t)(m.na * o.nch + 1));
    if (part == NULL)
        return cpu_fail(e, EX_ERR_NOMEM, "mixed_sum_bwd_w: no memory for partial sums");
#pragma omp parallel for if (!e->reference) num_threads(nas_threads(e)) schedule(static)
    for (int64_t it = 0; it < m.na * o.nch; it++) {
        int64_t j = it / o.nch, c = it % o.nch;
        int64_t k1 = (c + 1) * CPU_CHUNK < o.numel ? (c + 1) * CPU_CHUNK : o.numel;
        part[it] = dot_range(o.p[0], o.st[0], o.p[1 + j], o.st[1 + j], o.ne, c * CPU_CHUNK, k1);
    }
    dw_store(&n->dst, &m, part, o.nch);
    free(part);
    return EX_OK;
}

/* ---- row ops over [E, K] ---- */

/** One row of K: dst and up to two sources with their strides along the row. */
typedef struct nas_row {
    int64_t r, k;
    float *d;
    int64_t sd;
    const float *s[2];
    int64_t ss[2];
    const void *arg;
} nas_row;

typedef void (*nas_fn)(const nas_row *r);

/** dst and the first nalign sources aligned to one padded shape; dims 0..2 index rows. */
typedef struct nas_rows {
    int nalign;
    int64_t ne[4];
    int64_t st[3][4];
    float *base[3];
} nas_rows;

/* The node checked (core/tdesc.h): dst and its aligned sources as the rows read them. */
static ex_status rows_setup(const cpu_exec *e, const ex_node_exec *n, const char *op, nas_rows *o)
{
    char why[96];
    ex_status st = ex_td_nas_rows_of(n, o->ne, o->st, &o->nalign, why, sizeof why);
    if (st != EX_OK)
        return cpu_fail(e, st, "%s: %s", op, why);
    o->base[0] = cpu_f32(&n->dst);
    for (int i = 0; i < o->nalign; i++)
        o->base[1 + i] = cpu_f32(&n->src[i]);
    return EX_OK;
}

static void rows_exec(const cpu_exec *e, const nas_rows *o, nas_fn fn, const void *arg)
{
    int64_t rows = o->ne[0] * o->ne[1] * o->ne[2];
    (void)e; /* read only by the OpenMP clauses */
#pragma omp parallel for if (!e->reference) num_threads(nas_threads(e)) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        nas_row row = {.r = r, .k = o->ne[3], .sd = o->st[0][3], .arg = arg};
        row.d = o->base[0] + nas_row_off(o->ne, o->st[0], r);
        for (int i = 0; i < o->nalign; i++) {
            row.s[i] = o->base[1 + i] + nas_row_off(o->ne, o->st[1 + i], r);
            row.ss[i] = o->st[1 + i][3];
        }
        fn(&row);
    }
}

/** The Philox stream of a Gumbel-softmax node and its temperature. */
typedef struct gumbel_arg {
    uint32_t k0, k1, c0, c1;
    float tau;
} gumbel_arg;

/* softmax((x + g) / tau) with g = −log(−log u); z is staged in dst, which no source aliases. */
static void row_gumbel(const nas_row *r)
{
    const gumbel_arg *a = r->arg;
    float *d = r->d, m = -INFINITY;
    for (int64_t j = 0; j < r->k; j++) {
        float u = ex_philox_uniform(a->k0, a->k1, a->c0, a->c1, (uint64_t)(r->r * r->k + j));
        u = fminf(fmaxf(u, 1e-10f), 1.0f - 1e-7f);
        float z = (r->s[0][j * r->ss[0]] - logf(-logf(u))) / a->tau;
        d[j * r->sd] = z;
        m = j == 0 || z > m ? z : m;
    }
    double sum = 0.0;
    for (int64_t j = 0; j < r->k; j++)
        sum += exp((double)d[j * r->sd] - m);
    for (int64_t j = 0; j < r->k; j++)
        d[j * r->sd] = (float)(exp((double)d[j * r->sd] - m) / sum);
}

CPU_OP(gumbel_softmax)
{
    nas_rows o;
    ex_status st = rows_setup(e, n, "gumbel_softmax", &o);
    if (st != EX_OK)
        return st;
    const ex_tdesc *ct = &n->src[2];
    gumbel_arg a = {
        .k0 = (uint32_t)n->ip[0], .k1 = (uint32_t)n->ip[1], .tau = nas_get(&n->src[1], 0)};
    a.c0 = (uint32_t)cpu_i32(ct)[ex_td_at(ct, 0)];
    a.c1 = (uint32_t)cpu_i32(ct)[ex_td_at(ct, 1)];
    rows_exec(e, &o, row_gumbel, &a);
    return EX_OK;
}

static void row_gumbel_bwd(const nas_row *r)
{
    const float *y = r->s[0], *dy = r->s[1];
    double dot = 0.0, tau = *(const float *)r->arg;
    for (int64_t j = 0; j < r->k; j++)
        dot += (double)dy[j * r->ss[1]] * y[j * r->ss[0]];
    for (int64_t j = 0; j < r->k; j++)
        r->d[j * r->sd] = (float)(y[j * r->ss[0]] * ((double)dy[j * r->ss[1]] - dot) / tau);
}

CPU_OP(gumbel_softmax_bwd)
{
    nas_rows o;
    ex_status st = rows_setup(e, n, "gumbel_softmax_bwd", &o);
    if (st == EX_OK) {
        float tau = nas_get(&n->src[2], 0);
        rows_exec(e, &o, row_gumbel_bwd, &tau);
    }
    return st;
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

static void row_hardmax(const nas_row *r)
{
    int64_t best = row_argmax(r->s[0], r->ss[0], r->k);
    for (int64_t j = 0; j < r->k; j++)
        r->d[j * r->sd] = j == best ? 1.0f : 0.0f;
}

CPU_OP(hardmax_st)
{
    nas_rows o;
    ex_status st = rows_setup(e, n, "hardmax_st", &o);
    if (st == EX_OK)
        rows_exec(e, &o, row_hardmax, NULL);
    return st;
}

/* log(max(p, 1e-30)): a zero probability adds nothing instead of 0 · −inf. */
static double safe_log(float p)
{
    return log(p > 1e-30f ? (double)p : 1e-30);
}

static void row_entropy(const nas_row *r)
{
    const float *p = r->s[0];
    double h = 0.0;
    for (int64_t j = 0; j < r->k; j++)
        h -= p[j * r->ss[0]] * safe_log(p[j * r->ss[0]]);
    r->d[0] = (float)h;
}

CPU_OP(entropy)
{
    nas_rows o;
    ex_status st = rows_setup(e, n, "entropy", &o);
    if (st == EX_OK)
        rows_exec(e, &o, row_entropy, NULL);
    return st;
}

static void row_entropy_bwd(const nas_row *r)
{
    const float *p = r->s[0], *dy = r->s[1];
    for (int64_t j = 0; j < r->k; j++)
        r->d[j * r->sd] = (float)(-dy[j * r->ss[1]] * (safe_log(p[j * r->ss[0]]) + 1.0));
}

CPU_OP(entropy_bwd)
{
    nas_rows o;
    ex_status st = rows_setup(e, n, "entropy_bwd", &o);
    if (st == EX_OK)
        rows_exec(e, &o, row_entropy_bwd, NULL);
    return st;
}

/** TOPK_MASK's k and threshold. */
typedef struct topk_arg {
    int64_t k;
    float threshold;
} topk_arg;

/* Rank of j = how many entries beat it (larger, or equal at a lower index); K is the
 * candidate count of an edge, small enough for the quadratic count. NaN beats nothing and
 * is never kept. */
static void row_topk(const nas_row *r)
{
    const topk_arg *a = r->arg;
    const float *w = r->s[0];
    int64_t s = r->ss[0];
    for (int64_t j = 0; j < r->k; j++) {
        float v = w[j * s];
        int64_t rank = 0;
        for (int64_t i = 0; i < r->k && rank < a->k; i++)
            rank += w[i * s] > v || (w[i * s] == v && i < j);
        r->d[j * r->sd] = rank < a->k && v >= a->threshold ? 1.0f : 0.0f;
    }
}

CPU_OP(topk_mask)
{
    nas_rows o;
    topk_arg a = {n->ip[0], n->fp[0]};
    ex_status st = rows_setup(e, n, "topk_mask", &o);
    if (st == EX_OK)
        rows_exec(e, &o, row_topk, &a);
    return st;
}
