/* The walk over the derived network's evaluation pass, and the batch-norm folding. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nas/export.h"
#include "nas/supernet.h"
#include "nas/walk.h"

typedef struct walk {
    const nas_walker *w;
    const ex_genotype *g;
} walk;

static bool failed(const walk *k)
{
    return k->w->failed(k->w->user);
}

__attribute__((format(printf, 3, 4))) static void name(char *out, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out, len, fmt, ap);
    va_end(ap);
}

/* A convolution of x whose weight is prefix.wname, with the batch norm at bn (NULL: none)
 * over channels [first, first + cout) of its channels. */
static nas_val conv(const walk *k, nas_val x, const char *prefix, const char *wname, const char *bn,
                    int64_t channels, int64_t first, nas_conv_desc c)
{
    name(c.weight, sizeof c.weight, "%s.%s", prefix, wname);
    name(c.bn, sizeof c.bn, "%s", bn ? bn : "");
    c.bn_channels = channels;
    c.bn_first = first;
    return k->w->conv(k->w->user, x, &c);
}

static nas_conv_desc pointwise(int64_t cin, int64_t cout, int stride)
{
    return (nas_conv_desc){.cout = cout,
                           .cin = cin,
                           .kh = 1,
                           .kw = 1,
                           .sh = stride,
                           .sw = stride,
                           .dil = 1,
                           .group = 1};
}

/* DARTS's FactorizedReduce: two 1x1 convolutions at stride 2, the second on the input
 * shifted by one pixel, concatenated, then the batch norm (folded into each half). */
static nas_val factorized_reduce(const walk *k, nas_val x, const char *prefix, int64_t cout)
{
    nas_val r = k->w->relu(k->w->user, x);
    nas_val shifted = k->w->shift(k->w->user, r);
    char bn[160];
    name(bn, sizeof bn, "%s.bn", prefix);
    nas_conv_desc s = pointwise(x.c, cout / 2, 2);
    nas_val parts[2] = {conv(k, r, prefix, "conv_1.weight", bn, cout, 0, s),
                        conv(k, shifted, prefix, "conv_2.weight", bn, cout, cout / 2, s)};
    return k->w->concat(k->w->user, 2, parts);
}

/* ReLU, 1x1 convolution, batch norm (DARTS's ReLUConvBN) of a cell's preprocessing. */
static nas_val relu_conv_bn(const walk *k, nas_val x, const char *prefix, int64_t cout)
{
    char bn[160];
    name(bn, sizeof bn, "%s.op.2", prefix);
    return conv(k, k->w->relu(k->w->user, x), prefix, "op.1.weight", bn, cout, 0,
                pointwise(x.c, cout, 1));
}

static nas_val depthwise(const walk *k, nas_val x, const char *prefix, const char *wname, int size,
                         int stride, int pad, int dil)
{
    nas_conv_desc s = {.cout = x.c,
                       .cin = x.c,
                       .kh = size,
                       .kw = size,
                       .sh = stride,
                       .sw = stride,
                       .ph = pad,
                       .pw = pad,
                       .dil = dil,
                       .group = (int)x.c};
    return conv(k, k->w->relu(k->w->user, x), prefix, wname, NULL, 0, 0, s);
}

/* The pointwise convolution prefix.op.<i>.weight with the batch norm prefix.op.<i + 1>;
 * relu_only as nas_conv_desc's. */
static nas_val pw_bn(const walk *k, nas_val x, const char *prefix, int i, bool relu_only)
{
    char w[32], bn[160];
    name(w, sizeof w, "op.%d.weight", i);
    name(bn, sizeof bn, "%s.op.%d", prefix, i + 1);
    nas_conv_desc c = pointwise(x.c, x.c, 1);
    c.relu_only = relu_only;
    return conv(k, x, prefix, w, bn, x.c, 0, c);
}

/* The middle value is read only by the second depthwise convolution's ReLU. */
static nas_val sep_conv(const walk *k, nas_val x, const char *p, int size, int stride)
{
    nas_val y = depthwise(k, x, p, "op.1.weight", size, stride, size / 2, 1);
    y = pw_bn(k, y, p, 2, true);
    y = depthwise(k, y, p, "op.5.weight", size, 1, size / 2, 1);
    return pw_bn(k, y, p, 6, false);
}

static nas_val dil_conv(const walk *k, nas_val x, const char *p, int size, int stride)
{
    return pw_bn(k, depthwise(k, x, p, "op.1.weight", size, stride, size - 1, 2), p, 2, false);
}

static nas_val conv_7x1_1x7(const walk *k, nas_val x, const char *p, int stride)
{
    nas_conv_desc a = {.cout = x.c,
                       .cin = x.c,
                       .kh = 1,
                       .kw = 7,
                       .sh = 1,
                       .sw = stride,
                       .pw = 3,
                       .dil = 1,
                       .group = 1},
                  c = {.cout = x.c,
                       .cin = x.c,
                       .kh = 7,
                       .kw = 1,
                       .sh = stride,
                       .sw = 1,
                       .ph = 3,
                       .dil = 1,
                       .group = 1};
    char bn[160];
    name(bn, sizeof bn, "%s.op.3", p);
    nas_val y = conv(k, k->w->relu(k->w->user, x), p, "op.1.weight", NULL, 0, 0, a);
    return conv(k, y, p, "op.2.weight", bn, x.c, 0, c);
}

static nas_val candidate(const walk *k, ex_cand op, nas_val x, const char *p, int stride)
{
    switch (op) {
    case EX_CAND_MAX_POOL_3X3:
    case EX_CAND_AVG_POOL_3X3: return k->w->pool(k->w->user, x, op == EX_CAND_MAX_POOL_3X3, stride);
    case EX_CAND_SKIP_CONNECT: return stride == 1 ? x : factorized_reduce(k, x, p, x.c);
    case EX_CAND_SEP_CONV_3X3: return sep_conv(k, x, p, 3, stride);
    case EX_CAND_SEP_CONV_5X5: return sep_conv(k, x, p, 5, stride);
    case EX_CAND_SEP_CONV_7X7: return sep_conv(k, x, p, 7, stride);
    case EX_CAND_DIL_CONV_3X3: return dil_conv(k, x, p, 3, stride);
    case EX_CAND_DIL_CONV_5X5: return dil_conv(k, x, p, 5, stride);
    case EX_CAND_CONV_7X1_1X7: return conv_7x1_1x7(k, x, p, stride);
    case EX_CAND_NONE:
    case EX_CAND_COUNT: break;
    }
    return x; /* a genotype never holds these: ex_genotype_parse refuses them */
}

static nas_val cell(const walk *k, int i, nas_val s0, nas_val s1, int64_t c, bool reduction,
                    bool reduction_prev)
{
    const ex_genotype *g = k->g;
    const ex_genotype_edge *edges = reduction ? g->reduce : g->normal;
    const int *cat = reduction ? g->reduce_concat : g->normal_concat;
    int ncat = reduction ? g->n_reduce_concat : g->n_normal_concat;
    nas_val st[2 + EX_MAX_STEPS];
    char p0[64], p1[64];
    name(p0, sizeof p0, "cells.%d.preprocess0", i);
    name(p1, sizeof p1, "cells.%d.preprocess1", i);
    st[0] = reduction_prev ? factorized_reduce(k, s0, p0, c) : relu_conv_bn(k, s0, p0, c);
    st[1] = relu_conv_bn(k, s1, p1, c);
    for (int s = 0; s < g->steps && !failed(k); s++) {
        nas_val h[2];
        for (int e = 0; e < 2; e++) {
            const ex_genotype_edge *ed = &edges[2 * s + e];
            char p[64];
            name(p, sizeof p, "cells.%d._ops.%d", i, 2 * s + e);
            h[e] = candidate(k, ed->op, st[ed->input], p, reduction && ed->input < 2 ? 2 : 1);
        }
        st[2 + s] = k->w->add(k->w->user, h[0], h[1]);
    }
    if (failed(k))
        return s1;
    nas_val parts[2 + EX_MAX_STEPS];
    for (int j = 0; j < ncat; j++)
        parts[j] = st[cat[j]];
    return k->w->concat(k->w->user, ncat, parts);
}

nas_val nas_walk(const nas_walker *w, const ex_genotype *g, const ex_network_config *c, nas_val x)
{
    walk k = {w, g};
    int64_t cc = c->channels;
    nas_conv_desc stem = {.cout = c->stem_multiplier * cc,
                          .cin = x.c,
                          .kh = 3,
                          .kw = 3,
                          .sh = 1,
                          .sw = 1,
                          .ph = 1,
                          .pw = 1,
                          .dil = 1,
                          .group = 1};
    nas_val s0 = conv(&k, x, "stem", "0.weight", "stem.1", stem.cout, 0, stem), s1 = s0;
    bool reduction_prev = false;
    for (int i = 0; i < c->layers && !failed(&k); i++) {
        bool reduction = nas_is_reduction(i, c->layers);
        cc *= reduction ? 2 : 1;
        nas_val out = cell(&k, i, s0, s1, cc, reduction, reduction_prev);
        s0 = s1;
        s1 = out;
        reduction_prev = reduction;
    }
    return failed(&k) ? x : w->classifier(w->user, s1, c->classes);
}

float *nas_weights(ex_network *n, const char *name, int64_t count)
{
    int64_t got = 0;
    float *v = nas_network_read(n, name, &got);
    if (v && got == count)
        return v;
    if (v) {
        char m[256];
        snprintf(m, sizeof m, "%s holds %lld values, not %lld", name, (long long)got,
                 (long long)count);
        nas_network_fail(n, EX_ERR_STATE, m);
    }
    free(v);
    return NULL;
}

/* The batch norm's statistic prefix.what. */
static float *bn_part(ex_network *n, const nas_conv_desc *c, const char *what)
{
    char full[200];
    snprintf(full, sizeof full, "%s.%s", c->bn, what);
    return nas_weights(n, full, c->bn_channels);
}

ex_status nas_fold(ex_network *n, const nas_conv_desc *c, float **w, float **bias)
{
    int64_t per = c->cin / c->group * c->kh * c->kw;
    *w = nas_weights(n, c->weight, c->cout * per);
    *bias = calloc((size_t)c->cout, sizeof **bias);
    ex_status st = *w && *bias ? EX_OK : EX_ERR_STATE;
    if (*w && !*bias)
        st = nas_network_fail(n, EX_ERR_NOMEM, "out of host memory");
    if (st == EX_OK && c->bn[0]) {
        float *g = bn_part(n, c, "weight"), *beta = bn_part(n, c, "bias"),
              *mean = bn_part(n, c, "running_mean"), *var = bn_part(n, c, "running_var");
        st = g && beta && mean && var ? EX_OK : EX_ERR_STATE;
        for (int64_t o = 0; st == EX_OK && o < c->cout; o++) {
            int64_t k = c->bn_first + o;
            double scale = (double)g[k] / sqrt((double)var[k] + 1e-5);
            for (int64_t i = 0; i < per; i++)
                (*w)[o * per + i] = (float)((double)(*w)[o * per + i] * scale);
            (*bias)[o] = (float)((double)beta[k] - (double)mean[k] * scale);
        }
        free(g);
        free(beta);
        free(mean);
        free(var);
    }
    if (st != EX_OK) {
        free(*w);
        free(*bias);
        *w = *bias = NULL;
    }
    return st;
}
