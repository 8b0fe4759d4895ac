/* The derived network: DARTS's evaluation network built from a genotype. */
#include <stdio.h>

#include "core/engine.h"
#include "nas/derived.h"
#include "nas/supernet.h"

typedef struct derived_io {
    ex_tensor *s0, *s1;
    int64_t c;
    bool reduction, reduction_prev;
} derived_io;

/* The first position of state s in the cell's concatenation, or -1 (evaluation only: in
 * training the states are concatenated by copies, through which gradients flow). */
static int concat_slot(const nas_net *n, const int *concat, int nconcat, int s)
{
    if (n->train)
        return -1;
    for (int i = 0; i < nconcat; i++)
        if (concat[i] == s)
            return i;
    return -1;
}

/* The concatenation's tensor in evaluation: nconcat parts shaped like h, their storage
 * unwritten until the states are added into it. */
static ex_tensor *concat_buffer(nas_net *n, ex_tensor *h, int nconcat)
{
    int64_t ne[4];
    for (int d = 0; d < 4; d++)
        ne[d] = ex_tensor_dim(h, d);
    ne[1] *= nconcat;
    return ex__unwritten(n->ctx, 4, ne);
}

/* Copies the parts of the concatenation not added into it in place (evaluation). */
static ex_tensor *concat_rest(nas_net *n, ex_tensor *cat, const int *concat, int nconcat,
                              ex_tensor *const *states)
{
    for (int i = 0; i < nconcat; i++) {
        int s = concat[i];
        if (s >= 2 && concat_slot(n, concat, nconcat, s) == i)
            continue;
        int64_t c = ex_tensor_dim(states[s], 1);
        ex_copy_into(n->ctx, states[s], ex_slice(n->ctx, cat, 1, i * c, c));
    }
    return cat;
}

static ex_tensor *cell(nas_net *n, const ex_genotype *g, const derived_io *io, ex_tensor *counter,
                       float keep)
{
    const ex_genotype_edge *edges = io->reduction ? g->reduce : g->normal;
    const int *concat = io->reduction ? g->reduce_concat : g->normal_concat;
    int nconcat = io->reduction ? g->n_reduce_concat : g->n_normal_concat;
    ex_tensor *states[2 + EX_MAX_STEPS], *cat = NULL;
    int len = nas_push(n, "preprocess0");
    states[0] = io->reduction_prev ? nas_factorized_reduce(n, io->s0, io->c, true)
                                   : nas_relu_conv_bn(n, io->s0, io->c, 1, 1, 0, true);
    nas_pop(n, len);
    len = nas_push(n, "preprocess1");
    states[1] = nas_relu_conv_bn(n, io->s1, io->c, 1, 1, 0, true);
    nas_pop(n, len);
    for (int i = 0; i < g->steps; i++) {
        ex_tensor *h[2];
        for (int k = 0; k < 2; k++) {
            const ex_genotype_edge *e = &edges[2 * i + k];
            int stride = io->reduction && e->input < 2 ? 2 : 1;
            len = nas_push(n, "_ops.%d", 2 * i + k);
            ex_ctx_set_tag(n->ctx, n->cell, 2 * i + k, (int)e->op);
            h[k] = nas_candidate(n, e->op, states[e->input], stride, true);
            nas_pop(n, len);
            bool identity = e->op == EX_CAND_SKIP_CONNECT && stride == 1;
            if (h[k] && n->train && keep < 1.0f && !identity)
                h[k] = ex_drop_path(n->ctx, h[k], counter, keep);
        }
        if (!h[0] || !h[1]) {
            ex_ctx_set_error(n->ctx, EX_ERR_ARG, "derived: `none` cannot be a cell operation");
            return ex_relu(n->ctx, NULL);
        }
        /* in evaluation a state the concatenation takes is summed straight into it */
        int slot = concat_slot(n, concat, nconcat, 2 + i);
        if (slot >= 0 && !cat)
            cat = concat_buffer(n, h[0], nconcat);
        int64_t c = ex_tensor_dim(h[0], 1);
        states[2 + i] =
            slot < 0 ? ex_add(n->ctx, h[0], h[1])
                     : ex__add_into(n->ctx, h[0], h[1], ex_slice(n->ctx, cat, 1, slot * c, c));
    }
    ex_ctx_set_tag(n->ctx, n->cell, -1, -1);
    if (cat)
        return concat_rest(n, cat, concat, nconcat, states);
    ex_tensor *parts[2 + EX_MAX_STEPS];
    for (int i = 0; i < nconcat; i++)
        parts[i] = states[concat[i]];
    return nas_concat(n, nconcat, parts);
}

static ex_tensor *linear(nas_net *n, ex_tensor *x, int64_t classes)
{
    int64_t cin = ex_tensor_dim(x, 1), wne[2] = {classes, cin};
    ex_tensor *w = nas_weight(n, "weight", 2, wne, NAS_INIT_KAIMING, cin);
    ex_tensor *b = nas_weight(n, "bias", 1, &classes, NAS_INIT_KAIMING, cin);
    return ex_linear(n->ctx, x, w, b);
}

static ex_tensor *flatten(ex_ctx *ctx, ex_tensor *x)
{
    int64_t ne[2] = {ex_tensor_dim(x, 0), ex_tensor_numel(x) / ex_tensor_dim(x, 0)};
    return ex_reshape(ctx, x, 2, ne);
}

/* DARTS's AuxiliaryHeadCIFAR; the second convolution spans whatever the pooling leaves
 * (2x2 for 32x32 inputs, as DARTS; 1x1 for 28x28). */
static ex_tensor *aux_head(nas_net *n, ex_tensor *x, int64_t classes)
{
    ex_ctx *ctx = n->ctx;
    if (ex_tensor_dim(x, 2) < 5 || ex_tensor_dim(x, 3) < 5) {
        ex_ctx_set_error(ctx, EX_ERR_SHAPE,
                         "auxiliary head: needs at least 5x5 at 2/3 depth, "
                         "has %lldx%lld (turn it off for inputs this small)",
                         (long long)ex_tensor_dim(x, 2), (long long)ex_tensor_dim(x, 3));
        return ex_relu(ctx, NULL);
    }
    int len = nas_push(n, "auxiliary_head");
    int l2 = nas_push(n, "features");
    ex_pool_params p = {{5, 5}, {3, 3}, {0, 0}};
    ex_tensor *y = ex_avg_pool(ctx, ex_relu(ctx, x), &p);
    y = ex_relu(ctx, nas_bn(n, nas_conv(n, y, "2", 128, 1, 1, 1, 1, 0, 0, 1), "3", true));
    int kh = (int)ex_tensor_dim(y, 2), kw = (int)ex_tensor_dim(y, 3);
    y = ex_relu(ctx, nas_bn(n, nas_conv(n, y, "5", 768, kh, kw, 1, 1, 0, 0, 1), "6", true));
    nas_pop(n, l2);
    l2 = nas_push(n, "classifier");
    y = linear(n, flatten(ctx, y), classes);
    nas_pop(n, len);
    return y;
}

ex_tensor *nas_derived_forward(nas_net *n, const ex_genotype *g, const ex_network_config *c,
                               ex_tensor *x, ex_tensor *counter, float drop_keep, ex_tensor **aux)
{
    ex_ctx *ctx = n->ctx;
    int64_t c_stem = (int64_t)c->stem_multiplier * c->channels;
    int len = nas_push(n, "stem");
    ex_tensor *stem = nas_bn(n, nas_conv(n, x, "0", c_stem, 3, 3, 1, 1, 1, 1, 1), "1", true);
    nas_pop(n, len);
    derived_io io = {stem, stem, c->channels, false, false};
    ex_tensor *aux_input = NULL;
    for (int i = 0; i < c->layers; i++) {
        io.reduction = nas_is_reduction(i, c->layers);
        if (io.reduction)
            io.c *= 2;
        n->cell = i;
        ex_ctx_set_tag(ctx, i, -1, -1);
        len = nas_push(n, "cells.%d", i);
        ex_tensor *out = cell(n, g, &io, counter, drop_keep);
        nas_pop(n, len);
        io.s0 = io.s1;
        io.s1 = out;
        io.reduction_prev = io.reduction;
        if (i == 2 * c->layers / 3)
            aux_input = out;
    }
    ex_ctx_set_tag(ctx, -1, -1, -1);
    ex_tensor *pooled = flatten(ctx, ex_global_avg_pool(ctx, io.s1));
    len = nas_push(n, "classifier");
    ex_tensor *logits = linear(n, pooled, c->classes);
    nas_pop(n, len);
    /* the head's weights come last, so a build without it (evaluation) reuses the same
     * weights in the same order */
    if (aux && c->auxiliary && aux_input)
        *aux = aux_head(n, aux_input, c->classes);
    return logits;
}
