/* Data parallelism in the graph: the all-reduce node and the communicator's check. The
 * plan carries the node out through the host (plan_run.c), or hands it to the backend that
 * the communicator sums on (ex_comm.device_backend). */
#include <math.h>
#include <stdio.h>

#include "core/engine.h"

bool ex_comm_valid(const ex_comm *c, char *msg, size_t msg_len)
{
    const char *why = NULL;
    if (!c)
        why = "no communicator (NULL)";
    else if (c->size < 1 || c->rank < 0 || c->rank >= c->size)
        why = "rank outside 0 .. size - 1, or size below 1";
    else if (!c->allreduce_sum)
        why = "no allreduce_sum function";
    else if ((c->device_backend || c->allreduce_device || c->device_waiting) &&
             !(c->device_backend && c->allreduce_device && c->device_waiting))
        why = "device_backend, allreduce_device and device_waiting must be given together";
    if (why && msg && msg_len)
        snprintf(msg, msg_len, "communicator: %s", why);
    return !why;
}

/* Sums g[first .. last] (the non-NULL ones, total elements) through one bucket, laid out
 * last first. */
static void bucket_sum(ex_ctx *ctx, ex_tensor **g, int first, int last, int64_t total, float scale)
{
    ex_tensor *bucket = ex__unwritten(ctx, 1, &total);
    for (int64_t i = last, at = 0; i >= first; i--)
        if (g[i]) {
            int64_t n = ex__numel(g[i]);
            ex_copy_into(ctx, ex_reshape(ctx, g[i], 1, &n), ex_slice(ctx, bucket, 0, at, n));
            at += n;
        }
    ex_tensor *sum = ex_allreduce(ctx, bucket, scale);
    for (int64_t i = last, at = 0; i >= first; i--)
        if (g[i]) {
            int64_t n = ex__numel(g[i]);
            g[i] = ex_reshape(ctx, ex_slice(ctx, sum, 0, at, n), g[i]->ndim, g[i]->ne);
            at += n;
        }
}

void ex__allreduce_buckets(ex_ctx *ctx, int n, ex_tensor **g, float scale)
{
    int64_t total = 0;
    int last = n - 1;
    for (int i = n - 1; i >= 0; i--) {
        total += g[i] ? ex__numel(g[i]) : 0;
        if (total >= EX_GRAD_BUCKET || (i == 0 && total > 0)) {
            bucket_sum(ctx, g, i, last, total, scale);
            total = 0;
            last = i - 1;
        }
    }
}

ex_tensor *ex_allreduce(ex_ctx *ctx, ex_tensor *x, float scale)
{
    if (!ex__check(ctx, "allreduce", 1, &x))
        return ctx ? &ctx->inert : NULL;
    char sx[64];
    if (x->dtype != EX_F32)
        return ex__fail(ctx, EX_ERR_ARG, "allreduce: x %s is %s, f32 expected", ex__shape(x, sx),
                        ex_dtype_name(x->dtype));
    if (!isfinite(scale))
        return ex__fail(ctx, EX_ERR_ARG, "allreduce: scale %g is not finite", (double)scale);
    ex_tensor *y = ex__node(ctx, EX_OP_ALLREDUCE, EX_F32, x->ndim, x->ne, 1, &x);
    if (!ex__is_inert(y)) {
        y->ip[0] = ctx->ranks;
        y->fp[0] = scale;
    }
    return y;
}
