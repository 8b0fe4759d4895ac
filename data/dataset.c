/* Datasets: one reference-counted storage of pixels and labels, seen through views of
 * contiguous sample ranges. Splits are views, so they copy no pixel, and whoever frees last
 * frees the storage; a view never dangles whichever order things are freed in. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/internal.h"

static size_t pixel_size(ex_pixel_type t)
{
    return t == EX_PIXEL_F32 ? sizeof(float) : sizeof(uint8_t);
}

static void storage_release(exd_storage *st)
{
    if (st && atomic_fetch_sub(&st->refs, 1) == 1) {
        free(st->pixels);
        free(st->labels);
        free(st);
    }
}

ex_status exd_dataset_wrap(void *pixels, ex_pixel_type type, int32_t *labels, int64_t n, int c,
                           int h, int w, int classes, const char *name, ex_dataset **out, char *msg,
                           size_t len)
{
    exd_storage *st = calloc(1, sizeof *st);
    ex_dataset *ds = st ? malloc(sizeof *ds) : NULL;
    if (!ds) {
        free(st);
        free(pixels);
        free(labels);
        return exd_fail(msg, len, EX_ERR_NOMEM, "out of memory for a dataset");
    }
    atomic_init(&st->refs, 1);
    st->type = type;
    st->pixels = pixels;
    st->labels = labels;
    st->n = n;
    st->c = c;
    st->h = h;
    st->w = w;
    st->classes = classes;
    st->sample = (size_t)c * (size_t)h * (size_t)w;
    snprintf(st->name, sizeof st->name, "%s", name);
    *ds = (ex_dataset){.st = st, .first = 0, .count = n};
    *out = ds;
    if (msg && len)
        msg[0] = '\0';
    return EX_OK;
}

ex_dataset *exd_dataset_view(const ex_dataset *ds, int64_t first, int64_t count)
{
    ex_dataset *v = malloc(sizeof *v);
    if (!v)
        return NULL;
    atomic_fetch_add(&ds->st->refs, 1);
    *v = (ex_dataset){.st = ds->st, .first = ds->first + first, .count = count};
    return v;
}

void ex_dataset_free(ex_dataset *ds)
{
    if (!ds)
        return;
    storage_release(ds->st);
    free(ds);
}

ex_status exd_check_labels(const int32_t *labels, int64_t n, int classes, const char *what,
                           char *msg, size_t len)
{
    for (int64_t i = 0; i < n; i++)
        if (labels[i] < 0 || labels[i] >= classes)
            return exd_fail(msg, len, EX_ERR_ARG,
                            "%s: label %ld of sample %lld is out of range (%d classes)", what,
                            (long)labels[i], (long long)i, classes);
    return EX_OK;
}

static ex_status check_shape(int64_t n, int c, int h, int w, int classes, size_t psize,
                             size_t *bytes, char *msg, size_t len)
{
    if (n <= 0 || c <= 0 || h <= 0 || w <= 0 || classes <= 0)
        return exd_fail(msg, len, EX_ERR_ARG,
                        "ex_dataset_from_memory: n=%lld c=%d h=%d w=%d classes=%d must all be "
                        "positive",
                        (long long)n, c, h, w, classes);
    size_t s = psize;
    const uint64_t f[4] = {(uint64_t)c, (uint64_t)h, (uint64_t)w, (uint64_t)n};
    for (int i = 0; i < 4; i++) {
        if (f[i] > SIZE_MAX / s || f[i] * s > SIZE_MAX / sizeof(float))
            return exd_fail(msg, len, EX_ERR_ARG,
                            "ex_dataset_from_memory: %lld x %d x %d x %d pixels overflow",
                            (long long)n, c, h, w);
        s *= (size_t)f[i];
    }
    *bytes = s;
    return EX_OK;
}

static ex_status check_finite(const float *p, size_t count, char *msg, size_t len)
{
    for (size_t i = 0; i < count; i++)
        if (!isfinite(p[i]))
            return exd_fail(msg, len, EX_ERR_NONFINITE,
                            "ex_dataset_from_memory: pixel %zu is not finite", i);
    return EX_OK;
}

ex_status ex_dataset_from_memory(const void *images, ex_pixel_type type, int64_t n, int c, int h,
                                 int w, const int32_t *labels, int classes, ex_dataset **out,
                                 char *msg, size_t msg_len)
{
    if (out)
        *out = NULL;
    if (!images || !labels || !out)
        return exd_fail(msg, msg_len, EX_ERR_ARG,
                        "ex_dataset_from_memory: images, labels and out must not be NULL");
    if (type != EX_PIXEL_U8 && type != EX_PIXEL_F32)
        return exd_fail(msg, msg_len, EX_ERR_ARG, "ex_dataset_from_memory: unknown pixel type %d",
                        (int)type);
    size_t bytes = 0;
    ex_status st = check_shape(n, c, h, w, classes, pixel_size(type), &bytes, msg, msg_len);
    if (st == EX_OK)
        st = exd_check_labels(labels, n, classes, "ex_dataset_from_memory", msg, msg_len);
    if (st == EX_OK && type == EX_PIXEL_F32)
        st = check_finite(images, bytes / sizeof(float), msg, msg_len);
    if (st != EX_OK)
        return st;
    void *px = malloc(bytes);
    int32_t *lb = malloc((size_t)n * sizeof *lb);
    if (!px || !lb) {
        free(px);
        free(lb);
        return exd_fail(msg, msg_len, EX_ERR_NOMEM, "ex_dataset_from_memory: out of memory");
    }
    memcpy(px, images, bytes);
    memcpy(lb, labels, (size_t)n * sizeof *lb);
    return exd_dataset_wrap(px, type, lb, n, c, h, w, classes, "memory", out, msg, msg_len);
}

int64_t ex_dataset_count(const ex_dataset *ds)
{
    return ds ? ds->count : 0;
}

int ex_dataset_channels(const ex_dataset *ds)
{
    return ds ? ds->st->c : 0;
}

int ex_dataset_height(const ex_dataset *ds)
{
    return ds ? ds->st->h : 0;
}

int ex_dataset_width(const ex_dataset *ds)
{
    return ds ? ds->st->w : 0;
}

int ex_dataset_classes(const ex_dataset *ds)
{
    return ds ? ds->st->classes : 0;
}

const char *ex_dataset_name(const ex_dataset *ds)
{
    return ds ? ds->st->name : NULL;
}

ex_pixel_type ex_dataset_pixel_type(const ex_dataset *ds)
{
    return ds ? ds->st->type : EX_PIXEL_U8;
}

ex_status ex_dataset_sample(const ex_dataset *ds, int64_t i, float *image, int32_t *label)
{
    if (!ds || i < 0 || i >= ds->count)
        return EX_ERR_ARG;
    const exd_storage *st = ds->st;
    int64_t s = ds->first + i;
    if (label)
        *label = st->labels[s];
    if (!image)
        return EX_OK;
    if (st->type == EX_PIXEL_F32) {
        memcpy(image, (const float *)st->pixels + (size_t)s * st->sample,
               st->sample * sizeof *image);
        return EX_OK;
    }
    const uint8_t *p = (const uint8_t *)st->pixels + (size_t)s * st->sample;
    for (size_t k = 0; k < st->sample; k++)
        image[k] = (float)p[k] / 255.0f;
    return EX_OK;
}

ex_status ex_dataset_split(const ex_dataset *ds, double portion, ex_dataset **first,
                           ex_dataset **second, char *msg, size_t msg_len)
{
    if (first)
        *first = NULL;
    if (second)
        *second = NULL;
    if (!ds || !first || !second)
        return exd_fail(msg, msg_len, EX_ERR_ARG,
                        "ex_dataset_split: ds, first and second must not be NULL");
    if (!(portion > 0.0 && portion < 1.0))
        return exd_fail(msg, msg_len, EX_ERR_ARG, "ex_dataset_split: portion %g is not in (0, 1)",
                        portion);
    int64_t k = (int64_t)floor(portion * (double)ds->count);
    if (k <= 0 || k >= ds->count)
        return exd_fail(msg, msg_len, EX_ERR_ARG,
                        "ex_dataset_split: portion %g of %lld samples leaves a part empty", portion,
                        (long long)ds->count);
    *first = exd_dataset_view(ds, 0, k);
    *second = *first ? exd_dataset_view(ds, k, ds->count - k) : NULL;
    if (!*second) {
        ex_dataset_free(*first);
        *first = NULL;
        return exd_fail(msg, msg_len, EX_ERR_NOMEM, "ex_dataset_split: out of memory");
    }
    if (msg && msg_len)
        msg[0] = '\0';
    return EX_OK;
}
