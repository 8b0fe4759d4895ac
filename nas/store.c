/* Data into and out of a plan: named tensors to and from safetensors files, batches. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "nas/store.h"

int nas_net_entries(const nas_net *n, nas_entry *e)
{
    int count = 0;
    for (int i = 0; i < n->nparams; i++)
        e[count++] = (nas_entry){n->params[i].name, n->params[i].t};
    for (int i = 0; i < n->nstates; i++)
        e[count++] = (nas_entry){n->states[i].name, n->states[i].t};
    return count;
}

static const char *bn_suffix = ".running_mean";

static bool is_bn_mean(const char *name)
{
    size_t n = strlen(name), s = strlen(bn_suffix);
    return n > s && !strcmp(name + n - s, bn_suffix);
}

static void fill_tensor(ex_st_tensor *st, const char *name, const ex_tensor *t, const void *data)
{
    memset(st, 0, sizeof *st);
    st->name = name;
    st->dtype = ex_tensor_dtype(t) == EX_I32 ? EX_ST_I32 : EX_ST_F32;
    st->ndim = ex_tensor_ndim(t);
    for (int d = 0; d < st->ndim; d++)
        st->shape[d] = ex_tensor_dim(t, d);
    st->data = data;
}

ex_status nas_store_save(ex_plan *plan, const nas_entry *e, int count, int64_t batches,
                         const ex_st_meta *meta, int nmeta, const char *path, char *msg,
                         size_t msg_len)
{
    int nbn = 0;
    size_t bytes = 0;
    for (int i = 0; i < count; i++) {
        nbn += is_bn_mean(e[i].name);
        bytes += (size_t)ex_tensor_numel(e[i].t) * 4;
    }
    ex_st_tensor *st = calloc((size_t)(count + nbn) + 1, sizeof *st);
    char *data = malloc(bytes + 1);
    char(*bn_names)[168] = calloc((size_t)nbn + 1, sizeof *bn_names);
    ex_status rc = st && data && bn_names ? EX_OK : EX_ERR_NOMEM;
    if (rc != EX_OK && msg && msg_len)
        snprintf(msg, msg_len, "save: out of host memory");
    size_t at = 0;
    int n = 0, b = 0;
    for (int i = 0; rc == EX_OK && i < count; i++) {
        size_t sz = (size_t)ex_tensor_numel(e[i].t) * 4;
        rc = ex_plan_read(plan, e[i].t, data + at, sz);
        if (rc != EX_OK && msg && msg_len)
            snprintf(msg, msg_len, "save: %s", ex_plan_error(plan));
        fill_tensor(&st[n++], e[i].name, e[i].t, data + at);
        at += sz;
        if (is_bn_mean(e[i].name)) {
            size_t stem = strlen(e[i].name) - strlen(bn_suffix);
            snprintf(bn_names[b], sizeof bn_names[b], "%.*s.num_batches_tracked", (int)stem,
                     e[i].name);
            st[n] = (ex_st_tensor){
                .name = bn_names[b], .dtype = EX_ST_I64, .ndim = 0, .data = &batches};
            n++;
            b++;
        }
    }
    if (rc == EX_OK)
        rc = ex_safetensors_save(path, st, (size_t)n, meta, (size_t)nmeta, msg, msg_len);
    free(st);
    free(data);
    free(bn_names);
    return rc;
}

ex_status nas_store_load(ex_plan *plan, const nas_entry *e, int count, const char *path, char *msg,
                         size_t msg_len)
{
    ex_safetensors *f = NULL;
    ex_status rc = ex_safetensors_open(path, &f, msg, msg_len);
    for (int i = 0; rc == EX_OK && i < count; i++) {
        ex_st_info info;
        rc = ex_safetensors_info(f, e[i].name, &info, msg, msg_len);
        if (rc != EX_OK)
            break;
        bool match = info.ndim == ex_tensor_ndim(e[i].t) &&
                     info.dtype == (ex_tensor_dtype(e[i].t) == EX_I32 ? EX_ST_I32 : EX_ST_F32);
        for (int d = 0; match && d < info.ndim; d++)
            match = info.shape[d] == ex_tensor_dim(e[i].t, d);
        if (!match) {
            if (msg && msg_len)
                snprintf(msg, msg_len, "load: %s in %s has another dtype or shape", e[i].name,
                         path);
            rc = EX_ERR_FORMAT;
            break;
        }
        void *buf = malloc(info.nbytes ? info.nbytes : 1);
        if (!buf) {
            rc = EX_ERR_NOMEM;
            break;
        }
        rc = ex_safetensors_read(f, e[i].name, buf, info.nbytes, msg, msg_len);
        if (rc == EX_OK && (rc = ex_plan_write(plan, e[i].t, buf, info.nbytes)) != EX_OK && msg &&
            msg_len)
            snprintf(msg, msg_len, "load: %s", ex_plan_error(plan));
        free(buf);
    }
    ex_safetensors_close(f);
    return rc;
}

ex_status nas_store_steps(const char *path, int64_t *steps, char *msg, size_t msg_len)
{
    ex_safetensors *f = NULL;
    ex_status st = ex_safetensors_open(path, &f, msg, msg_len);
    if (st == EX_OK) {
        const char *v = ex_safetensors_metadata(f, "steps");
        char *end = NULL;
        long long n = v ? strtoll(v, &end, 10) : -1;
        if (!v || *end || n < 0)
            st = ex__msg(msg, msg_len, EX_ERR_FORMAT, "%s has no step count", path);
        else
            *steps = n;
    }
    ex_safetensors_close(f);
    return st;
}

ex_status nas_write_batch(ex_plan *plan, ex_tensor *x, const float *xv, ex_tensor *y,
                          const int32_t *yv, int classes, const char *what, char *msg,
                          size_t msg_len)
{
    if (!xv || !yv)
        return ex__msg(msg, msg_len, EX_ERR_ARG, "%s: batch data is NULL", what);
    int64_t count = ex_tensor_numel(y);
    for (int64_t i = 0; i < count; i++)
        if (yv[i] < 0 || yv[i] >= classes)
            return ex__msg(msg, msg_len, EX_ERR_ARG, "%s: label %d of sample %lld outside [0, %d)",
                           what, yv[i], (long long)i, classes);
    ex_status st = ex_plan_write(plan, x, xv, (size_t)ex_tensor_numel(x) * sizeof *xv);
    if (st == EX_OK)
        st = ex_plan_write(plan, y, yv, (size_t)count * sizeof *yv);
    if (st != EX_OK)
        return ex__msg(msg, msg_len, st, "%s: %s", what, ex_plan_error(plan));
    return EX_OK;
}
