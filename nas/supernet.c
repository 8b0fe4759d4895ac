/* The DARTS supernet (Liu et al., 2019, model_search.Network), built from engine ops. */
#include "nas/supernet.h"

int nas_cell_edges(int steps)
{
    return steps * (steps + 3) / 2; /* sum over steps of (2 + step) */
}

bool nas_is_reduction(int i, int layers)
{
    return i == layers / 3 || i == 2 * layers / 3;
}

static ex_tensor *row(ex_ctx *ctx, ex_tensor *t, int e)
{
    int64_t k = ex_tensor_dim(t, 1);
    return ex_reshape(ctx, ex_slice(ctx, t, 0, e, 1), 1, &k);
}

/* Channel shuffle of PC-DARTS (Xu et al., 2020): channel j of group g of cat goes to
 * channel j * groups + g, so the next edge's mixed op sees other channels. */
static ex_tensor *shuffle(ex_ctx *ctx, ex_tensor *cat, int groups)
{
    int64_t ne[4] = {ex_tensor_dim(cat, 0), ex_tensor_dim(cat, 1), ex_tensor_dim(cat, 2),
                     ex_tensor_dim(cat, 3)};
    int64_t cc = ne[1] / groups, hw = ne[2] * ne[3];
    ex_tensor *out = ex_fill(ctx, 4, ne, 0.0f); /* overwritten entirely */
    int64_t part[4] = {ne[0], cc, ne[2], ne[3]};
    int64_t st[4] = {ne[1] * hw, groups * hw, ne[3], 1};
    for (int g = 0; g < groups; g++)
        ex_copy_into(ctx, ex_slice(ctx, cat, 1, g * cc, cc),
                     ex_view(ctx, out, 4, part, st, g * hw));
    return out;
}

/* Every candidate but `none` on x, summed with the edge's weights. */
static ex_tensor *all_channels(nas_net *n, const ex_search_config *c, ex_tensor *x, int e,
                               int stride, ex_tensor *w, ex_tensor *m, bool gated)
{
    ex_tensor *outs[EX_MAX_CANDIDATES];
    int idx[EX_MAX_CANDIDATES], count = 0;
    for (int k = 0; k < c->ncand; k++) {
        if (c->cand[k] == EX_CAND_NONE)
            continue;
        int len = nas_push(n, "_ops.%d", k);
        ex_ctx_set_tag(n->ctx, n->cell, e, k);
        if (gated)
            ex_ctx_set_gate(n->ctx, m, (int64_t)e * c->ncand + k);
        outs[count] = nas_candidate(n, c->cand[k], x, stride, false);
        idx[count++] = k;
        ex_ctx_set_gate(n->ctx, NULL, 0);
        nas_pop(n, len);
    }
    ex_ctx_set_tag(n->ctx, n->cell, e, -1);
    return ex_mixed_sum(n->ctx, row(n->ctx, w, e), row(n->ctx, m, e), count, outs, idx);
}

/* One edge. With partial channels (k > 1), a k-th of x's channels go through the
 * candidates and the rest pass by (max-pooled where the edge reduces, with the candidates'
 * 3x3 window so the shapes agree at any size), then the channels are shuffled. */
static ex_tensor *mixed_op(nas_net *n, const ex_search_config *c, ex_tensor *x, int e, int stride,
                           ex_tensor *w, ex_tensor *m, bool gated)
{
    int k = c->partial_channels;
    if (k <= 1)
        return all_channels(n, c, x, e, stride, w, m, gated);
    int64_t ch = ex_tensor_dim(x, 1), cc = ch / k;
    ex_tensor *parts[2] = {
        all_channels(n, c, ex_slice(n->ctx, x, 1, 0, cc), e, stride, w, m, gated),
        ex_slice(n->ctx, x, 1, cc, ch - cc)};
    ex_pool_params p = {{3, 3}, {2, 2}, {1, 1}};
    if (stride == 2)
        parts[1] = ex_max_pool(n->ctx, parts[1], &p);
    return shuffle(n->ctx, nas_concat(n, 2, parts), k);
}

typedef struct cell_io {
    ex_tensor *s0, *s1;
    int64_t c_prev_prev, c_prev, c;
    bool reduction, reduction_prev;
} cell_io;

static ex_tensor *cell(nas_net *n, const ex_search_config *c, const cell_io *io,
                       ex_tensor *const w[2], ex_tensor *const m[2], bool gated)
{
    ex_tensor *states[2 + 8];
    int len = nas_push(n, "preprocess0");
    states[0] = io->reduction_prev ? nas_factorized_reduce(n, io->s0, io->c, false)
                                   : nas_relu_conv_bn(n, io->s0, io->c, 1, 1, 0, false);
    nas_pop(n, len);
    len = nas_push(n, "preprocess1");
    states[1] = nas_relu_conv_bn(n, io->s1, io->c, 1, 1, 0, false);
    nas_pop(n, len);
    int r = io->reduction, e = 0;
    for (int i = 0; i < c->steps; i++) {
        ex_tensor *sum = NULL;
        for (int j = 0; j < 2 + i; j++, e++) {
            len = nas_push(n, "_ops.%d", e);
            ex_tensor *y = mixed_op(n, c, states[j], e, r && j < 2 ? 2 : 1, w[r], m[r], gated);
            nas_pop(n, len);
            sum = sum ? ex_add(n->ctx, sum, y) : y;
        }
        /* the channels that pass by are not normalized: summed over the nodes they would
         * grow with depth, so a node averages its inputs (PC-DARTS learns these weights as
         * its edge normalization) */
        states[2 + i] =
            c->partial_channels > 1 ? ex_scale(n->ctx, sum, 1.0f / (float)(2 + i)) : sum;
    }
    return nas_concat(n, c->multiplier, states + 2 + c->steps - c->multiplier);
}

ex_tensor *nas_supernet_forward(nas_net *n, const ex_search_config *c, ex_tensor *x,
                                ex_tensor *const w[2], ex_tensor *const m[2], bool gated)
{
    ex_ctx *ctx = n->ctx;
    if (c->steps < 1 || c->steps > EX_MAX_STEPS || c->multiplier < 1 || c->multiplier > c->steps) {
        ex_ctx_set_error(ctx, EX_ERR_ARG, "supernet: %d steps, multiplier %d", c->steps,
                         c->multiplier);
        return ex_relu(ctx, NULL);
    }
    int64_t c_stem = (int64_t)c->stem_multiplier * c->channels;
    int len = nas_push(n, "stem");
    ex_tensor *stem = nas_bn(n, nas_conv(n, x, "0", c_stem, 3, 3, 1, 1, 1, 1, 1), "1", true);
    nas_pop(n, len);
    cell_io io = {stem, stem, c_stem, c_stem, c->channels, false, false};
    for (int i = 0; i < c->layers; i++) {
        io.reduction = nas_is_reduction(i, c->layers);
        if (io.reduction)
            io.c *= 2;
        n->cell = i;
        ex_ctx_set_tag(ctx, i, -1, -1);
        len = nas_push(n, "cells.%d", i);
        ex_tensor *out = cell(n, c, &io, w, m, gated);
        nas_pop(n, len);
        io.s0 = io.s1;
        io.s1 = out;
        io.c_prev_prev = io.c_prev;
        io.c_prev = (int64_t)c->multiplier * io.c;
        io.reduction_prev = io.reduction;
    }
    ex_ctx_set_tag(ctx, -1, -1, -1);
    int64_t flat[2] = {ex_tensor_dim(io.s1, 0), io.c_prev};
    ex_tensor *pooled = ex_reshape(ctx, ex_global_avg_pool(ctx, io.s1), 2, flat);
    int64_t wne[2] = {c->classes, io.c_prev}, bne = c->classes;
    len = nas_push(n, "classifier");
    ex_tensor *lw = nas_weight(n, "weight", 2, wne, NAS_INIT_KAIMING, io.c_prev);
    ex_tensor *lb = nas_weight(n, "bias", 1, &bne, NAS_INIT_KAIMING, io.c_prev);
    nas_pop(n, len);
    return ex_linear(ctx, pooled, lw, lb);
}
