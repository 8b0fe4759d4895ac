/* Genotypes: DARTS's derivation rule, its Python text form, JSON, files and the published
 * cells. Text and JSON come from users and other tools, so both parsers check everything
 * and report the first problem with its position. */
#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "exapt/genotype.h"

_Static_assert(EX_MAX_CANDIDATES >= EX_CAND_COUNT, "a search space can hold every ex_cand");

static const char *const cand_names[EX_CAND_COUNT] = {
    [EX_CAND_NONE] = "none",
    [EX_CAND_MAX_POOL_3X3] = "max_pool_3x3",
    [EX_CAND_AVG_POOL_3X3] = "avg_pool_3x3",
    [EX_CAND_SKIP_CONNECT] = "skip_connect",
    [EX_CAND_SEP_CONV_3X3] = "sep_conv_3x3",
    [EX_CAND_SEP_CONV_5X5] = "sep_conv_5x5",
    [EX_CAND_DIL_CONV_3X3] = "dil_conv_3x3",
    [EX_CAND_DIL_CONV_5X5] = "dil_conv_5x5",
    [EX_CAND_SEP_CONV_7X7] = "sep_conv_7x7",
    [EX_CAND_CONV_7X1_1X7] = "conv_7x1_1x7",
};

const char *ex_cand_name(ex_cand c)
{
    return (unsigned)c < EX_CAND_COUNT ? cand_names[c] : "?";
}

int ex_cand_parse(const char *name)
{
    for (int c = 0; name && c < EX_CAND_COUNT; c++)
        if (strcmp(name, cand_names[c]) == 0)
            return c;
    return -1;
}

int ex_cand_is_parametric(ex_cand c)
{
    return c >= EX_CAND_SEP_CONV_3X3 && c < EX_CAND_COUNT;
}

/* ------------------------------------------------------------------ validation */

static ex_status check_edges(const ex_genotype_edge *e, int steps, const char *cell, char *msg,
                             size_t len)
{
    for (int k = 0; k < 2 * steps; k++) {
        int node = k / 2;
        if (e[k].op <= EX_CAND_NONE || e[k].op >= EX_CAND_COUNT)
            return ex__msg(msg, len, EX_ERR_ARG,
                           "%s edge %d: op %d is not a candidate other "
                           "than none",
                           cell, k, (int)e[k].op);
        if (e[k].input < 0 || e[k].input >= 2 + node)
            return ex__msg(msg, len, EX_ERR_ARG,
                           "%s edge %d: node %d cannot take input %d (valid: 0..%d)", cell, k, node,
                           e[k].input, 1 + node);
    }
    return EX_OK;
}

static ex_status check_concat(const int *c, int n, int steps, const char *cell, char *msg,
                              size_t len)
{
    if (n < 1 || n > steps + 2)
        return ex__msg(msg, len, EX_ERR_ARG, "%s_concat has %d entries (valid: 1..%d)", cell, n,
                       steps + 2);
    for (int i = 0; i < n; i++) {
        if (c[i] < 0 || c[i] >= steps + 2)
            return ex__msg(msg, len, EX_ERR_ARG, "%s_concat: state %d does not exist (0..%d)", cell,
                           c[i], steps + 1);
        for (int j = 0; j < i; j++)
            if (c[j] == c[i])
                return ex__msg(msg, len, EX_ERR_ARG, "%s_concat: state %d appears twice", cell,
                               c[i]);
    }
    return EX_OK;
}

ex_status ex_genotype_validate(const ex_genotype *g, char *msg, size_t msg_len)
{
    if (!g)
        return ex__msg(msg, msg_len, EX_ERR_ARG, "genotype is NULL");
    if (g->steps < 1 || g->steps > EX_MAX_STEPS)
        return ex__msg(msg, msg_len, EX_ERR_ARG, "genotype has %d steps (valid: 1..%d)", g->steps,
                       EX_MAX_STEPS);
    ex_status st = check_edges(g->normal, g->steps, "normal", msg, msg_len);
    if (st == EX_OK)
        st = check_edges(g->reduce, g->steps, "reduce", msg, msg_len);
    if (st == EX_OK)
        st = check_concat(g->normal_concat, g->n_normal_concat, g->steps, "normal", msg, msg_len);
    if (st == EX_OK)
        st = check_concat(g->reduce_concat, g->n_reduce_concat, g->steps, "reduce", msg, msg_len);
    return st;
}

/* ------------------------------------------------------------------ derivation */

/* Largest non-`none` weight of one edge's row and its first column. */
static float row_best(const float *row, int ncand, const ex_cand *cands, int *col)
{
    int best = -1;
    for (int k = 0; k < ncand; k++)
        if (cands[k] != EX_CAND_NONE && (best < 0 || row[k] > row[best]))
            best = k;
    *col = best;
    return row[best];
}

/* One cell: for node i, the two edges with the largest best weights, the earlier edge
 * first on ties (Python's stable sort on the negated key). */
static void derive_cell(const float *w, int steps, int ncand, const ex_cand *cands,
                        ex_genotype_edge *out)
{
    int start = 0;
    for (int i = 0; i < steps; i++) {
        int n = 2 + i, first = -1, second = -1, col[2 + EX_MAX_STEPS];
        float best[2 + EX_MAX_STEPS];
        for (int j = 0; j < n; j++)
            best[j] = row_best(w + (size_t)(start + j) * (size_t)ncand, ncand, cands, &col[j]);
        for (int j = 0; j < n; j++)
            if (first < 0 || best[j] > best[first])
                first = j;
        for (int j = 0; j < n; j++)
            if (j != first && (second < 0 || best[j] > best[second]))
                second = j;
        out[2 * i] = (ex_genotype_edge){cands[col[first]], first};
        out[2 * i + 1] = (ex_genotype_edge){cands[col[second]], second};
        start += n;
    }
}

static ex_status check_derive_args(const float *wn, const float *wr, int steps, int multiplier,
                                   int ncand, const ex_cand *cands, const ex_genotype *g, char *msg,
                                   size_t len)
{
    if (!wn || !wr || !cands || !g)
        return ex__msg(msg, len, EX_ERR_ARG, "genotype derive: NULL argument");
    if (steps < 1 || steps > EX_MAX_STEPS || multiplier < 1 || multiplier > steps)
        return ex__msg(msg, len, EX_ERR_ARG,
                       "genotype derive: steps %d (valid 1..%d), multiplier %d (valid 1..steps)",
                       steps, EX_MAX_STEPS, multiplier);
    if (ncand < 1 || ncand > EX_MAX_CANDIDATES)
        return ex__msg(msg, len, EX_ERR_ARG, "genotype derive: %d candidates (valid 1..%d)", ncand,
                       EX_MAX_CANDIDATES);
    bool some = false;
    for (int k = 0; k < ncand; k++) {
        if ((unsigned)cands[k] >= EX_CAND_COUNT)
            return ex__msg(msg, len, EX_ERR_ARG,
                           "genotype derive: candidate %d is %d, not an "
                           "ex_cand",
                           k, (int)cands[k]);
        some |= cands[k] != EX_CAND_NONE;
    }
    if (!some)
        return ex__msg(msg, len, EX_ERR_ARG,
                       "genotype derive: every candidate is none; nothing can be chosen");
    return EX_OK;
}

static ex_status check_finite(const float *w, size_t n, const char *cell, int ncand, char *msg,
                              size_t len)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(w[i]))
            return ex__msg(msg, len, EX_ERR_NONFINITE,
                           "genotype derive: %s weight of edge %zu, candidate %zu is not finite",
                           cell, i / (size_t)ncand, i % (size_t)ncand);
    return EX_OK;
}

ex_status ex_genotype_derive(const float *w_normal, const float *w_reduce, int steps,
                             int multiplier, int ncand, const ex_cand *cands, ex_genotype *g,
                             char *msg, size_t msg_len)
{
    ex_status st =
        check_derive_args(w_normal, w_reduce, steps, multiplier, ncand, cands, g, msg, msg_len);
    if (st != EX_OK)
        return st;
    size_t edges = (size_t)(steps * (steps + 3) / 2), n = edges * (size_t)ncand;
    st = check_finite(w_normal, n, "normal", ncand, msg, msg_len);
    if (st == EX_OK)
        st = check_finite(w_reduce, n, "reduce", ncand, msg, msg_len);
    if (st != EX_OK)
        return st;
    memset(g, 0, sizeof *g);
    g->steps = steps;
    derive_cell(w_normal, steps, ncand, cands, g->normal);
    derive_cell(w_reduce, steps, ncand, cands, g->reduce);
    g->n_normal_concat = g->n_reduce_concat = multiplier;
    for (int i = 0; i < multiplier; i++)
        g->normal_concat[i] = g->reduce_concat[i] = 2 + steps - multiplier + i;
    return EX_OK;
}

/* Row of w (one per edge, DARTS's order) of node i's edge from state j. */
static size_t edge_row(int node, int input)
{
    return (size_t)(node * (node + 3) / 2 + input);
}

/* The kept parameter-free edge of the normal cell with the smallest weight (the later one on
 * ties) whose row has a parametric candidate, or -1. */
static int weakest_free(const ex_genotype *g, const float *w, int ncand, const ex_cand *cands)
{
    int pick = -1;
    float low = 0;
    for (int k = 0; k < 2 * g->steps; k++) {
        const ex_genotype_edge *e = &g->normal[k];
        if (ex_cand_is_parametric(e->op))
            continue;
        const float *row = w + edge_row(k / 2, e->input) * (size_t)ncand;
        float mine = -1;
        bool any = false;
        for (int c = 0; c < ncand; c++) {
            if (cands[c] == e->op)
                mine = row[c];
            any |= ex_cand_is_parametric(cands[c]) != 0;
        }
        if (any && (pick < 0 || mine <= low)) {
            pick = k;
            low = mine;
        }
    }
    return pick;
}

ex_status ex_genotype_cap_param_free(ex_genotype *g, const float *w_normal, int ncand,
                                     const ex_cand *cands, int max_free, char *msg, size_t msg_len)
{
    if (!g || !w_normal || !cands || ncand < 1 || ncand > EX_MAX_CANDIDATES || g->steps < 1 ||
        g->steps > EX_MAX_STEPS)
        return ex__msg(msg, msg_len, EX_ERR_ARG, "genotype cap: bad arguments");
    if (max_free < 0)
        return EX_OK;
    /* the kept edges' inputs index w's rows */
    ex_status st = ex_genotype_validate(g, msg, msg_len);
    if (st != EX_OK)
        return st;
    for (;;) {
        int free_ops = 0;
        for (int k = 0; k < 2 * g->steps; k++)
            free_ops += !ex_cand_is_parametric(g->normal[k].op);
        if (free_ops <= max_free)
            return EX_OK;
        int k = weakest_free(g, w_normal, ncand, cands);
        if (k < 0)
            return ex__msg(msg, msg_len, EX_ERR_ARG,
                           "genotype cap: %d parameter-free operations in the normal cell, at "
                           "most %d asked, and no parametric candidate to put in",
                           free_ops, max_free);
        const float *row = w_normal + edge_row(k / 2, g->normal[k].input) * (size_t)ncand;
        int best = -1;
        for (int c = 0; c < ncand; c++)
            if (ex_cand_is_parametric(cands[c]) && (best < 0 || row[c] > row[best]))
                best = c;
        g->normal[k].op = cands[best];
    }
}

/* ------------------------------------------------------------------ text output */

typedef struct sbuf {
    char *buf;
    size_t len, pos;
    bool overflow;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) EX__PRINTF(2, 3);

static void sb_printf(sbuf *b, const char *fmt, ...)
{
    if (b->overflow)
        return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(b->buf + b->pos, b->len - b->pos, fmt, ap);
    va_end(ap);
    if (w < 0 || (size_t)w >= b->len - b->pos)
        b->overflow = true;
    else
        b->pos += (size_t)w;
}

static void sb_edges(sbuf *b, const ex_genotype_edge *e, int n)
{
    sb_printf(b, "[");
    for (int k = 0; k < n; k++)
        sb_printf(b, "%s('%s', %d)", k ? ", " : "", ex_cand_name(e[k].op), e[k].input);
    sb_printf(b, "]");
}

static void sb_ints(sbuf *b, const int *v, int n)
{
    sb_printf(b, "[");
    for (int k = 0; k < n; k++)
        sb_printf(b, "%s%d", k ? ", " : "", v[k]);
    sb_printf(b, "]");
}

ex_status ex_genotype_format(const ex_genotype *g, char *buf, size_t len)
{
    if (!buf || len == 0 || ex_genotype_validate(g, NULL, 0) != EX_OK)
        return EX_ERR_ARG;
    sbuf b = {buf, len, 0, false};
    buf[0] = 0;
    sb_printf(&b, "Genotype(normal=");
    sb_edges(&b, g->normal, 2 * g->steps);
    sb_printf(&b, ", normal_concat=");
    sb_ints(&b, g->normal_concat, g->n_normal_concat);
    sb_printf(&b, ", reduce=");
    sb_edges(&b, g->reduce, 2 * g->steps);
    sb_printf(&b, ", reduce_concat=");
    sb_ints(&b, g->reduce_concat, g->n_reduce_concat);
    sb_printf(&b, ")");
    return b.overflow ? EX_ERR_ARG : EX_OK;
}

/* ------------------------------------------------------------------ JSON */

static json_t *json_edges(const ex_genotype_edge *e, int n)
{
    json_t *a = json_array();
    for (int k = 0; a && k < n; k++)
        if (json_array_append_new(a, json_pack("[si]", ex_cand_name(e[k].op), e[k].input))) {
            json_decref(a);
            return NULL;
        }
    return a;
}

static json_t *json_ints(const int *v, int n)
{
    json_t *a = json_array();
    for (int k = 0; a && k < n; k++)
        if (json_array_append_new(a, json_integer(v[k]))) {
            json_decref(a);
            return NULL;
        }
    return a;
}

static json_t *json_genotype(const ex_genotype *g)
{
    json_t *j = json_object();
    if (!j || json_object_set_new(j, "format", json_string("exapt-genotype")) ||
        json_object_set_new(j, "version", json_integer(1)) ||
        json_object_set_new(j, "steps", json_integer(g->steps)) ||
        json_object_set_new(j, "normal", json_edges(g->normal, 2 * g->steps)) ||
        json_object_set_new(j, "normal_concat", json_ints(g->normal_concat, g->n_normal_concat)) ||
        json_object_set_new(j, "reduce", json_edges(g->reduce, 2 * g->steps)) ||
        json_object_set_new(j, "reduce_concat", json_ints(g->reduce_concat, g->n_reduce_concat))) {
        json_decref(j);
        return NULL;
    }
    return j;
}

ex_status ex_genotype_format_json(const ex_genotype *g, char *buf, size_t len)
{
    if (!buf || len == 0 || ex_genotype_validate(g, NULL, 0) != EX_OK)
        return EX_ERR_ARG;
    buf[0] = 0;
    json_t *j = json_genotype(g);
    if (!j)
        return EX_ERR_NOMEM;
    size_t need = json_dumpb(j, buf, len, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(j);
    if (need == 0 || need >= len) {
        buf[0] = 0;
        return need == 0 ? EX_ERR_NOMEM : EX_ERR_ARG;
    }
    buf[need] = 0;
    return EX_OK;
}

static ex_status json_fail(char *msg, size_t len, const char *what)
{
    return ex__msg(msg, len, EX_ERR_FORMAT, "genotype JSON: %s", what);
}

static ex_status json_get_edges(json_t *a, const char *key, ex_genotype_edge *out, int *n,
                                char *msg, size_t len)
{
    if (!json_is_array(a))
        return ex__msg(msg, len, EX_ERR_FORMAT, "genotype JSON: \"%s\" missing or not an array",
                       key);
    if (json_array_size(a) > 2 * EX_MAX_STEPS)
        return ex__msg(msg, len, EX_ERR_FORMAT, "genotype JSON: \"%s\" has %zu edges, at most %d",
                       key, json_array_size(a), 2 * EX_MAX_STEPS);
    *n = (int)json_array_size(a);
    for (int k = 0; k < *n; k++) {
        json_t *e = json_array_get(a, (size_t)k), *op = json_array_get(e, 0),
               *in = json_array_get(e, 1);
        if (!json_is_array(e) || json_array_size(e) != 2 || !json_is_string(op) ||
            !json_is_integer(in))
            return ex__msg(msg, len, EX_ERR_FORMAT, "genotype JSON: %s[%d] is not [\"op\", input]",
                           key, k);
        int c = ex_cand_parse(json_string_value(op));
        if (c < 0)
            return ex__msg(msg, len, EX_ERR_FORMAT, "genotype JSON: %s[%d]: unknown op '%.40s'",
                           key, k, json_string_value(op));
        json_int_t v = json_integer_value(in);
        if (v < 0 || v > 2 * EX_MAX_STEPS)
            return ex__msg(msg, len, EX_ERR_FORMAT,
                           "genotype JSON: %s[%d]: input %lld out of "
                           "range",
                           key, k, (long long)v);
        out[k] = (ex_genotype_edge){(ex_cand)c, (int)v};
    }
    return EX_OK;
}

static ex_status json_get_ints(json_t *a, const char *key, int *out, int *n, char *msg, size_t len)
{
    if (!json_is_array(a) || json_array_size(a) > EX_MAX_STEPS + 2)
        return ex__msg(msg, len, EX_ERR_FORMAT,
                       "genotype JSON: \"%s\" missing, not an array, or longer than %d", key,
                       EX_MAX_STEPS + 2);
    *n = (int)json_array_size(a);
    for (int k = 0; k < *n; k++) {
        json_t *v = json_array_get(a, (size_t)k);
        if (!json_is_integer(v))
            return ex__msg(msg, len, EX_ERR_FORMAT, "genotype JSON: %s[%d] is not an integer", key,
                           k);
        json_int_t x = json_integer_value(v);
        if (x < 0 || x > 2 * EX_MAX_STEPS)
            return ex__msg(msg, len, EX_ERR_FORMAT,
                           "genotype JSON: %s[%d]: state %lld out of "
                           "range",
                           key, k, (long long)x);
        out[k] = (int)x;
    }
    return EX_OK;
}

/* Counts and ranges that the text and JSON parsers share; validation messages become
 * format errors because they describe the input. */
static ex_status finish(ex_genotype *g, int n_normal, int n_reduce, const char *form, char *msg,
                        size_t len)
{
    if (n_normal != n_reduce || n_normal % 2 || n_normal == 0)
        return ex__msg(msg, len, EX_ERR_FORMAT,
                       "genotype %s: normal has %d edges and reduce %d; both need 2 per step", form,
                       n_normal, n_reduce);
    g->steps = n_normal / 2;
    char why[200];
    if (ex_genotype_validate(g, why, sizeof why) != EX_OK)
        return ex__msg(msg, len, EX_ERR_FORMAT, "genotype %s: %s", form, why);
    return EX_OK;
}

static ex_status json_header(json_t *j, char *msg, size_t len)
{
    if (!json_is_object(j))
        return json_fail(msg, len, "not a JSON object");
    json_t *f = json_object_get(j, "format"), *v = json_object_get(j, "version");
    if (!json_is_string(f) || strcmp(json_string_value(f), "exapt-genotype") != 0)
        return json_fail(msg, len, "\"format\" is not \"exapt-genotype\"");
    if (!json_is_integer(v))
        return json_fail(msg, len, "\"version\" missing or not an integer");
    if (json_integer_value(v) != 1)
        return ex__msg(msg, len, EX_ERR_UNSUPPORTED,
                       "genotype JSON: version %lld; this reader knows version 1",
                       (long long)json_integer_value(v));
    return EX_OK;
}

static ex_status json_body(json_t *j, ex_genotype *g, char *msg, size_t len)
{
    int nn = 0, nr = 0;
    ex_status st = json_get_edges(json_object_get(j, "normal"), "normal", g->normal, &nn, msg, len);
    if (st == EX_OK)
        st = json_get_edges(json_object_get(j, "reduce"), "reduce", g->reduce, &nr, msg, len);
    if (st == EX_OK)
        st = json_get_ints(json_object_get(j, "normal_concat"), "normal_concat", g->normal_concat,
                           &g->n_normal_concat, msg, len);
    if (st == EX_OK)
        st = json_get_ints(json_object_get(j, "reduce_concat"), "reduce_concat", g->reduce_concat,
                           &g->n_reduce_concat, msg, len);
    if (st == EX_OK)
        st = finish(g, nn, nr, "JSON", msg, len);
    json_t *steps = json_object_get(j, "steps");
    if (st == EX_OK && (!json_is_integer(steps) || json_integer_value(steps) != g->steps))
        st = ex__msg(msg, len, EX_ERR_FORMAT,
                     "genotype JSON: \"steps\" is missing or not %d, the number of edge pairs",
                     g->steps);
    return st;
}

ex_status ex_genotype_parse_json(const char *s, size_t n, ex_genotype *g, char *msg, size_t msg_len)
{
    if (!s || !g)
        return ex__msg(msg, msg_len, EX_ERR_ARG, "genotype JSON: NULL argument");
    json_error_t err;
    json_t *j = json_loadb(s, n, JSON_REJECT_DUPLICATES, &err);
    if (!j)
        return ex__msg(msg, msg_len, EX_ERR_FORMAT, "genotype JSON: %s (byte %d)", err.text,
                       err.position);
    ex_genotype tmp;
    memset(&tmp, 0, sizeof tmp);
    ex_status st = json_header(j, msg, msg_len);
    if (st == EX_OK)
        st = json_body(j, &tmp, msg, msg_len);
    json_decref(j);
    if (st == EX_OK)
        *g = tmp;
    return st;
}

/* ------------------------------------------------------------------ text parser */

/* A recursive-descent reader of Python's namedtuple repr. */
typedef struct tparse {
    const char *s;
    size_t n, pos;
    char *msg;
    size_t len;
} tparse;

static ex_status tp_fail(tparse *p, const char *fmt, ...) EX__PRINTF(2, 3);

static ex_status tp_fail(tparse *p, const char *fmt, ...)
{
    char what[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return ex__msg(p->msg, p->len, EX_ERR_FORMAT, "genotype text, byte %zu: %s", p->pos, what);
}

static void tp_ws(tparse *p)
{
    while (p->pos < p->n && isspace((unsigned char)p->s[p->pos]))
        p->pos++;
}

/* Skips blanks; true (and consumes c) when c comes next. */
static bool tp_accept(tparse *p, char c)
{
    tp_ws(p);
    if (p->pos < p->n && p->s[p->pos] == c) {
        p->pos++;
        return true;
    }
    return false;
}

static ex_status tp_expect(tparse *p, char c)
{
    return tp_accept(p, c) ? EX_OK : tp_fail(p, "expected '%c'", c);
}

static ex_status tp_ident(tparse *p, char *out, size_t cap)
{
    tp_ws(p);
    size_t k = 0;
    while (p->pos < p->n && (isalnum((unsigned char)p->s[p->pos]) || p->s[p->pos] == '_')) {
        if (k + 1 >= cap)
            return tp_fail(p, "name too long");
        out[k++] = p->s[p->pos++];
    }
    out[k] = 0;
    return k ? EX_OK : tp_fail(p, "expected a name");
}

static ex_status tp_int(tparse *p, int *out)
{
    tp_ws(p);
    bool neg = tp_accept(p, '-');
    long v = 0;
    size_t start = p->pos;
    while (p->pos < p->n && isdigit((unsigned char)p->s[p->pos])) {
        v = v * 10 + (p->s[p->pos++] - '0');
        if (v > 1000000)
            return tp_fail(p, "number too large");
    }
    if (p->pos == start)
        return tp_fail(p, "expected an integer");
    *out = (int)(neg ? -v : v);
    return EX_OK;
}

/* A quoted op name: 'x' or "x", no escapes. */
static ex_status tp_op(tparse *p, ex_cand *op)
{
    tp_ws(p);
    char q = p->pos < p->n ? p->s[p->pos] : 0, name[40];
    if (q != '\'' && q != '"')
        return tp_fail(p, "expected a quoted operation name");
    size_t k = 0, at = ++p->pos;
    while (p->pos < p->n && p->s[p->pos] != q) {
        if (k + 1 >= sizeof name || p->s[p->pos] == '\\' || p->s[p->pos] == '\n')
            return tp_fail(p, "bad operation name");
        name[k++] = p->s[p->pos++];
    }
    if (p->pos >= p->n)
        return tp_fail(p, "unterminated string");
    p->pos++;
    name[k] = 0;
    int c = ex_cand_parse(name);
    if (c <= EX_CAND_NONE) {
        p->pos = at;
        return tp_fail(p, "'%s' is not an operation a genotype can hold", name);
    }
    *op = (ex_cand)c;
    return EX_OK;
}

/* ('op', input) with an optional trailing comma inside. */
static ex_status tp_edge(tparse *p, ex_genotype_edge *e)
{
    ex_status st = tp_expect(p, '(');
    if (st == EX_OK)
        st = tp_op(p, &e->op);
    if (st == EX_OK)
        st = tp_expect(p, ',');
    if (st == EX_OK)
        st = tp_int(p, &e->input);
    if (st == EX_OK) {
        tp_accept(p, ',');
        st = tp_expect(p, ')');
    }
    return st;
}

static ex_status tp_edges(tparse *p, ex_genotype_edge *out, int *n)
{
    ex_status st = tp_expect(p, '[');
    for (*n = 0; st == EX_OK && !tp_accept(p, ']');) {
        if (*n == 2 * EX_MAX_STEPS)
            return tp_fail(p, "more than %d edges", 2 * EX_MAX_STEPS);
        st = tp_edge(p, &out[(*n)++]);
        if (st == EX_OK && !tp_accept(p, ',')) {
            st = tp_expect(p, ']');
            break;
        }
    }
    return st;
}

static ex_status tp_int_list(tparse *p, int *out, int *n)
{
    ex_status st = EX_OK;
    for (*n = 0; st == EX_OK && !tp_accept(p, ']');) {
        if (*n == EX_MAX_STEPS + 2)
            return tp_fail(p, "more than %d states", EX_MAX_STEPS + 2);
        st = tp_int(p, &out[(*n)++]);
        if (st == EX_OK && !tp_accept(p, ',')) {
            st = tp_expect(p, ']');
            break;
        }
    }
    return st;
}

/* range(b) or range(a, b), as DARTS's own genotypes print. */
static ex_status tp_range(tparse *p, int *out, int *n)
{
    int v[2] = {0, 0}, args = 0;
    ex_status st = tp_expect(p, '(');
    while (st == EX_OK && !tp_accept(p, ')')) {
        if (args == 2)
            return tp_fail(p, "range takes at most 2 arguments");
        st = tp_int(p, &v[args++]);
        if (st == EX_OK && !tp_accept(p, ',')) {
            st = tp_expect(p, ')');
            break;
        }
    }
    if (st != EX_OK)
        return st;
    int a = args == 2 ? v[0] : 0, b = args == 2 ? v[1] : v[0];
    if (args == 0 || a < 0 || b - a < 1 || b - a > EX_MAX_STEPS + 2)
        return tp_fail(p, "range(...) must give 1..%d states from 0 up", EX_MAX_STEPS + 2);
    *n = b - a;
    for (int i = 0; i < *n; i++)
        out[i] = a + i;
    return EX_OK;
}

static ex_status tp_concat(tparse *p, int *out, int *n)
{
    if (tp_accept(p, '['))
        return tp_int_list(p, out, n);
    char word[16];
    size_t at = p->pos;
    ex_status st = tp_ident(p, word, sizeof word);
    if (st == EX_OK && strcmp(word, "range") != 0) {
        p->pos = at;
        st = tp_fail(p, "expected a list or range(...)");
    }
    return st == EX_OK ? tp_range(p, out, n) : st;
}

static const char *const field_names[4] = {"normal", "normal_concat", "reduce", "reduce_concat"};

/* One keyword argument; seen[] catches repeats. */
static ex_status tp_field(tparse *p, ex_genotype *g, int *nn, int *nr, bool seen[4])
{
    char key[24];
    size_t at = p->pos;
    ex_status st = tp_ident(p, key, sizeof key);
    int k = 0;
    while (st == EX_OK && k < 4 && strcmp(key, field_names[k]) != 0)
        k++;
    if (st == EX_OK && (k == 4 || seen[k])) {
        p->pos = at;
        return tp_fail(p, k == 4 ? "unknown field '%s'" : "field '%s' given twice", key);
    }
    if (st == EX_OK)
        st = tp_expect(p, '=');
    if (st != EX_OK)
        return st;
    seen[k] = true;
    switch (k) {
    case 0: return tp_edges(p, g->normal, nn);
    case 1: return tp_concat(p, g->normal_concat, &g->n_normal_concat);
    case 2: return tp_edges(p, g->reduce, nr);
    default: return tp_concat(p, g->reduce_concat, &g->n_reduce_concat);
    }
}

static ex_status tp_genotype(tparse *p, ex_genotype *g)
{
    char word[16];
    int nn = 0, nr = 0;
    bool seen[4] = {false, false, false, false};
    ex_status st = tp_ident(p, word, sizeof word);
    if (st == EX_OK && strcmp(word, "Genotype") != 0)
        return tp_fail(p, "expected Genotype(...)");
    if (st == EX_OK)
        st = tp_expect(p, '(');
    while (st == EX_OK && !tp_accept(p, ')')) {
        st = tp_field(p, g, &nn, &nr, seen);
        if (st == EX_OK && !tp_accept(p, ',')) {
            st = tp_expect(p, ')');
            break;
        }
    }
    tp_ws(p);
    if (st == EX_OK && p->pos != p->n)
        return tp_fail(p, "unexpected text after the genotype");
    for (int k = 0; st == EX_OK && k < 4; k++)
        if (!seen[k])
            return tp_fail(p, "field %s is missing", field_names[k]);
    return st == EX_OK ? finish(g, nn, nr, "text", p->msg, p->len) : st;
}

ex_status ex_genotype_parse_text(const char *s, size_t n, ex_genotype *g, char *msg, size_t msg_len)
{
    if (!s || !g)
        return ex__msg(msg, msg_len, EX_ERR_ARG, "genotype text: NULL argument");
    ex_genotype tmp;
    memset(&tmp, 0, sizeof tmp);
    tparse p = {s, n, 0, msg, msg_len};
    ex_status st = tp_genotype(&p, &tmp);
    if (st == EX_OK)
        *g = tmp;
    return st;
}

ex_status ex_genotype_parse(const char *s, size_t n, ex_genotype *g, char *msg, size_t msg_len)
{
    size_t i = 0;
    while (s && i < n && isspace((unsigned char)s[i]))
        i++;
    if (s && i < n && s[i] == '{')
        return ex_genotype_parse_json(s, n, g, msg, msg_len);
    return ex_genotype_parse_text(s, n, g, msg, msg_len);
}

/* ------------------------------------------------------------------ files */

ex_status ex_genotype_load(const char *path, ex_genotype *g, char *msg, size_t msg_len)
{
    if (!path || !g)
        return ex__msg(msg, msg_len, EX_ERR_ARG, "genotype load: NULL argument");
    char *buf = NULL, why[256];
    size_t n = 0;
    ex_status st = ex__read_file(path, (size_t)1 << 20, &buf, &n, msg, msg_len);
    if (st != EX_OK)
        return st;
    st = ex_genotype_parse(buf, n, g, why, sizeof why);
    free(buf);
    return st == EX_OK ? EX_OK : ex__msg(msg, msg_len, st, "%s: %s", path, why);
}

static ex_status save(const char *path, const ex_genotype *g, bool json, char *msg, size_t msg_len)
{
    char buf[EX_GENOTYPE_TEXT_MAX + 1], why[200];
    if (!path || ex_genotype_validate(g, why, sizeof why) != EX_OK)
        return ex__msg(msg, msg_len, EX_ERR_ARG, "genotype save %s: %s", path ? path : "(null)",
                       path ? why : "NULL path");
    ex_status st = json ? ex_genotype_format_json(g, buf, sizeof buf - 1)
                        : ex_genotype_format(g, buf, sizeof buf - 1);
    if (st != EX_OK)
        return ex__msg(msg, msg_len, st, "genotype save %s: cannot format", path);
    size_t n = strlen(buf);
    buf[n++] = '\n';
    return ex__write_file_atomic(path, buf, n, msg, msg_len);
}

ex_status ex_genotype_save_json(const char *path, const ex_genotype *g, char *msg, size_t msg_len)
{
    return save(path, g, true, msg, msg_len);
}

ex_status ex_genotype_save_text(const char *path, const ex_genotype *g, char *msg, size_t msg_len)
{
    return save(path, g, false, msg, msg_len);
}

/* ------------------------------------------------------------------ published cells */

#define E(op, in)                                                                                  \
    {                                                                                              \
        EX_CAND_##op, in                                                                           \
    }

/* DARTS (Liu et al., ICLR 2019), cnn/genotypes.py: first-order search. */
static const ex_genotype darts_v1 = {
    4,
    {E(SEP_CONV_3X3, 1), E(SEP_CONV_3X3, 0), E(SKIP_CONNECT, 0), E(SEP_CONV_3X3, 1),
     E(SKIP_CONNECT, 0), E(SEP_CONV_3X3, 1), E(SEP_CONV_3X3, 0), E(SKIP_CONNECT, 2)},
    {E(MAX_POOL_3X3, 0), E(MAX_POOL_3X3, 1), E(SKIP_CONNECT, 2), E(MAX_POOL_3X3, 0),
     E(MAX_POOL_3X3, 0), E(SKIP_CONNECT, 2), E(SKIP_CONNECT, 2), E(AVG_POOL_3X3, 0)},
    {2, 3, 4, 5},
    4,
    {2, 3, 4, 5},
    4,
};

/* The same, second-order search: the cell of the paper's CIFAR-10 results. */
static const ex_genotype darts_v2 = {
    4,
    {E(SEP_CONV_3X3, 0), E(SEP_CONV_3X3, 1), E(SEP_CONV_3X3, 0), E(SEP_CONV_3X3, 1),
     E(SEP_CONV_3X3, 1), E(SKIP_CONNECT, 0), E(SKIP_CONNECT, 0), E(DIL_CONV_3X3, 2)},
    {E(MAX_POOL_3X3, 0), E(MAX_POOL_3X3, 1), E(SKIP_CONNECT, 2), E(MAX_POOL_3X3, 1),
     E(MAX_POOL_3X3, 0), E(SKIP_CONNECT, 2), E(SKIP_CONNECT, 2), E(MAX_POOL_3X3, 1)},
    {2, 3, 4, 5},
    4,
    {2, 3, 4, 5},
    4,
};

#undef E

static const char *const builtin_names[] = {"DARTS_V1", "DARTS_V2", "DARTS", NULL};

ex_status ex_genotype_builtin(const char *name, ex_genotype *g)
{
    if (!name || !g)
        return EX_ERR_ARG;
    if (strcmp(name, "DARTS_V1") == 0)
        *g = darts_v1;
    else if (strcmp(name, "DARTS_V2") == 0 || strcmp(name, "DARTS") == 0)
        *g = darts_v2;
    else
        return EX_ERR_ARG;
    return EX_OK;
}

const char *const *ex_genotype_builtin_names(void)
{
    return builtin_names;
}
