/* The context: tensor ownership, the sticky error, counted allocation. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine.h"

bool ex__alloc_fails(ex_ctx *ctx)
{
    if (!ctx)
        return false;
    return ++ctx->hook.count == ctx->hook.fail_at;
}

void *ex__malloc(ex_ctx *ctx, size_t n)
{
    return ex__alloc_fails(ctx) ? NULL : malloc(n ? n : 1);
}

void *ex__calloc(ex_ctx *ctx, size_t count, size_t size)
{
    return ex__alloc_fails(ctx) ? NULL : calloc(count ? count : 1, size ? size : 1);
}

void *ex__realloc(ex_ctx *ctx, void *p, size_t n)
{
    return ex__alloc_fails(ctx) ? NULL : realloc(p, n ? n : 1);
}

ex_ctx *ex_ctx_new(void)
{
    ex_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return NULL;
    ctx->tag[0] = ctx->tag[1] = ctx->tag[2] = -1;
    ctx->ranks = 1;
    ex_tensor *in = &ctx->inert;
    in->id = -1;
    in->kind = EX_K_INERT;
    in->ndim = 1;
    in->ne[0] = 1;
    in->st[0] = 1;
    in->storage = in;
    in->storage_numel = 1;
    in->tag[0] = in->tag[1] = in->tag[2] = -1;
    strcpy(in->name, "inert");
    return ctx;
}

void ex_ctx_free(ex_ctx *ctx)
{
    if (!ctx)
        return;
    for (int64_t i = 0; i < ctx->ntensors; i++) {
        free(ctx->tensors[i]->src);
        free(ctx->tensors[i]);
    }
    free(ctx->tensors);
    free(ctx->grads);
    free(ctx);
}

ex_status ex_ctx_status(const ex_ctx *ctx)
{
    return ctx ? ctx->status : EX_ERR_ARG;
}

const char *ex_ctx_error(const ex_ctx *ctx)
{
    return ctx ? ctx->error : "no context (NULL)";
}

void ex_ctx_clear_error(ex_ctx *ctx)
{
    if (!ctx)
        return;
    ctx->status = EX_OK;
    ctx->error[0] = '\0';
}

void ex_ctx_set_seed(ex_ctx *ctx, uint64_t seed)
{
    if (ctx)
        ctx->seed = seed;
}

void ex_ctx_set_ranks(ex_ctx *ctx, int ranks)
{
    if (!ctx)
        return;
    if (ranks < 1) {
        ex__fail(ctx, EX_ERR_ARG, "set_ranks: %d ranks (at least 1)", ranks);
        return;
    }
    ctx->ranks = ranks;
}

void ex_ctx_set_tag(ex_ctx *ctx, int cell, int edge, int candidate)
{
    if (!ctx)
        return;
    ctx->tag[0] = cell;
    ctx->tag[1] = edge;
    ctx->tag[2] = candidate;
}

int ex_ctx_begin_stage(ex_ctx *ctx)
{
    return ctx ? ++ctx->stage : -1;
}

void ex_ctx_fail_alloc_after(ex_ctx *ctx, uint64_t n)
{
    if (!ctx)
        return;
    ctx->hook.fail_at = n;
    ctx->hook.count = 0;
}

uint64_t ex_ctx_alloc_count(const ex_ctx *ctx)
{
    return ctx ? ctx->hook.count : 0;
}

void ex_ctx_set_error(ex_ctx *ctx, ex_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ex__vfail(ctx, st == EX_OK ? EX_ERR_ARG : st, fmt, ap);
    va_end(ap);
}

void ex__vfail(ex_ctx *ctx, ex_status st, const char *fmt, va_list ap)
{
    if (!ctx || ctx->status != EX_OK)
        return;
    ctx->status = st;
    vsnprintf(ctx->error, sizeof ctx->error, fmt, ap);
}

ex_tensor *ex__fail(ex_ctx *ctx, ex_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ex__vfail(ctx, st, fmt, ap);
    va_end(ap);
    return ctx ? &ctx->inert : NULL;
}
