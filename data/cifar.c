/* CIFAR-10's binary version: each file is a run of 3073-byte records, one label byte (0..9)
 * then 1024 red, 1024 green and 1024 blue bytes of a 32 x 32 image, already channel-major. */
#include <stdlib.h>
#include <string.h>

#include "data/internal.h"

#define CIFAR_SIDE 32
#define CIFAR_PIXELS (3 * CIFAR_SIDE * CIFAR_SIDE)
#define CIFAR_RECORD (1 + CIFAR_PIXELS)
#define CIFAR_CLASSES 10
/* far beyond CIFAR's 10000 records per file, but bounded against decompression bombs */
#define CIFAR_MAX_FILE ((size_t)1 << 31)

typedef struct cifar_acc {
    uint8_t *pixels;
    int32_t *labels;
    int64_t n;
} cifar_acc;

static ex_status check_records(const char *path, const uint8_t *raw, size_t size, char *msg,
                               size_t len)
{
    if (size == 0)
        return exd_fail(msg, len, EX_ERR_FORMAT, "%s: empty file", path);
    if (size % CIFAR_RECORD)
        return exd_fail(msg, len, EX_ERR_FORMAT,
                        "%s: %zu bytes is not a whole number of %d-byte CIFAR-10 records", path,
                        size, CIFAR_RECORD);
    for (size_t r = 0; r < size / CIFAR_RECORD; r++)
        if (raw[r * CIFAR_RECORD] >= CIFAR_CLASSES)
            return exd_fail(msg, len, EX_ERR_FORMAT,
                            "%s: label %u of record %zu is out of range (%d classes)", path,
                            raw[r * CIFAR_RECORD], r, CIFAR_CLASSES);
    return EX_OK;
}

/* Appends the records of one file to the accumulated pixels and labels. */
static ex_status append(cifar_acc *acc, const char *path, const uint8_t *raw, size_t size,
                        char *msg, size_t len)
{
    int64_t k = (int64_t)(size / CIFAR_RECORD), n = acc->n + k;
    uint8_t *px = realloc(acc->pixels, (size_t)n * CIFAR_PIXELS);
    if (px)
        acc->pixels = px;
    int32_t *lb = px ? realloc(acc->labels, (size_t)n * sizeof *lb) : NULL;
    if (lb)
        acc->labels = lb;
    if (!px || !lb)
        return exd_fail(msg, len, EX_ERR_NOMEM, "%s: out of memory for %lld images", path,
                        (long long)n);
    for (int64_t r = 0; r < k; r++) {
        const uint8_t *rec = raw + r * CIFAR_RECORD;
        acc->labels[acc->n + r] = rec[0];
        memcpy(acc->pixels + (size_t)(acc->n + r) * CIFAR_PIXELS, rec + 1, CIFAR_PIXELS);
    }
    acc->n = n;
    return EX_OK;
}

static ex_status read_file(cifar_acc *acc, const char *path, char *msg, size_t len)
{
    uint8_t *raw;
    size_t size;
    ex_status st = exd_read_all(path, CIFAR_MAX_FILE, &raw, &size, msg, len);
    if (st != EX_OK)
        return st;
    st = check_records(path, raw, size, msg, len);
    if (st == EX_OK)
        st = append(acc, path, raw, size, msg, len);
    free(raw);
    return st;
}

ex_status exd_cifar_load(const char *const *paths, int files, ex_dataset **out, char *msg,
                         size_t len)
{
    cifar_acc acc = {0};
    ex_status st = EX_OK;
    for (int f = 0; f < files && st == EX_OK; f++)
        st = read_file(&acc, paths[f], msg, len);
    if (st != EX_OK) {
        free(acc.pixels);
        free(acc.labels);
        return st;
    }
    return exd_dataset_wrap(acc.pixels, EX_PIXEL_U8, acc.labels, acc.n, 3, CIFAR_SIDE, CIFAR_SIDE,
                            CIFAR_CLASSES, "cifar10", out, msg, len);
}
