/* IDX files (LeCun's MNIST format, also Fashion-MNIST's): a 4-byte magic {0, 0, type, ndim},
 * ndim big-endian 32-bit sizes, then the elements in row-major order. Only unsigned bytes
 * (type 0x08) hold images and labels; anything else is refused. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/internal.h"

#define IDX_UBYTE 0x08

/* The largest element count accepted: fits size_t and int64 alike. */
static uint64_t idx_limit(void)
{
    return SIZE_MAX < (uint64_t)INT64_MAX ? (uint64_t)SIZE_MAX : (uint64_t)INT64_MAX;
}

static const char *idx_type_name(uint8_t t)
{
    switch (t) {
    case 0x09: return "signed bytes";
    case 0x0B: return "16-bit integers";
    case 0x0C: return "32-bit integers";
    case 0x0D: return "32-bit floats";
    case 0x0E: return "64-bit floats";
    default: return NULL;
    }
}

static ex_status check_magic(const char *path, const uint8_t m[4], int ndim, char *msg, size_t len)
{
    if (m[0] != 0 || m[1] != 0)
        return exd_fail(msg, len, EX_ERR_FORMAT,
                        "%s: not an IDX file (magic %02x %02x %02x %02x, expected 00 00 08 %02x)",
                        path, m[0], m[1], m[2], m[3], (unsigned)ndim);
    if (m[2] != IDX_UBYTE) {
        const char *name = idx_type_name(m[2]);
        if (name)
            return exd_fail(msg, len, EX_ERR_FORMAT,
                            "%s: holds %s (type 0x%02x); only unsigned bytes (0x08) are read", path,
                            name, m[2]);
        return exd_fail(msg, len, EX_ERR_FORMAT, "%s: unknown IDX element type 0x%02x", path, m[2]);
    }
    if (m[3] != ndim)
        return exd_fail(msg, len, EX_ERR_FORMAT, "%s: has %u dimensions, expected %d", path, m[3],
                        ndim);
    return EX_OK;
}

/* The product of the sizes, refusing zeros and overflow. */
static ex_status dims_product(const char *path, const uint32_t *dims, int ndim, size_t *out,
                              char *msg, size_t len)
{
    uint64_t p = 1, limit = idx_limit();
    for (int i = 0; i < ndim; i++) {
        if (dims[i] == 0)
            return exd_fail(msg, len, EX_ERR_FORMAT, "%s: dimension %d is zero", path, i);
        if (p > limit / dims[i])
            return exd_fail(msg, len, EX_ERR_FORMAT,
                            "%s: dimensions overflow (dimension %d is %u after a product of "
                            "%llu)",
                            path, i, dims[i], (unsigned long long)p);
        p *= dims[i];
    }
    *out = (size_t)p;
    return EX_OK;
}

static ex_status read_header(exd_gz gz, const char *path, int ndim, exd_idx *out, char *msg,
                             size_t len)
{
    uint8_t head[4 + 4 * 3];
    size_t want = 4 + 4 * (size_t)ndim, got = 0;
    ex_status st = exd_read(gz, path, head, want, &got, msg, len);
    if (st != EX_OK)
        return st;
    if (got == 0)
        return exd_fail(msg, len, EX_ERR_FORMAT, "%s: empty file", path);
    if (got >= 4 && (st = check_magic(path, head, ndim, msg, len)) != EX_OK)
        return st;
    if (got < want)
        return exd_fail(msg, len, EX_ERR_FORMAT, "%s: truncated header (%zu of %zu bytes)", path,
                        got, want);
    out->ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        const uint8_t *b = head + 4 + 4 * i;
        out->dims[i] = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
    }
    return EX_OK;
}

ex_status exd_idx_read(const char *path, int ndim, exd_idx *out, char *msg, size_t len)
{
    memset(out, 0, sizeof *out);
    exd_gz gz;
    ex_status st = exd_open(path, &gz, msg, len);
    if (st != EX_OK)
        return st;
    size_t n = 0;
    st = read_header(gz, path, ndim, out, msg, len);
    if (st == EX_OK)
        st = dims_product(path, out->dims, ndim, &n, msg, len);
    if (st == EX_OK)
        st = exd_read_exact(gz, path, n, &out->data, msg, len);
    exd_close(gz);
    return st;
}

static ex_status check_pair(const char *images, const exd_idx *im, const char *labels,
                            const exd_idx *lb, char *msg, size_t len)
{
    if (im->dims[0] != lb->dims[0])
        return exd_fail(msg, len, EX_ERR_FORMAT, "%s holds %u images but %s holds %u labels",
                        images, im->dims[0], labels, lb->dims[0]);
    if (im->dims[1] > INT32_MAX || im->dims[2] > INT32_MAX)
        return exd_fail(msg, len, EX_ERR_FORMAT, "%s: images of %u x %u pixels are too large",
                        images, im->dims[1], im->dims[2]);
    for (uint32_t i = 0; i < lb->dims[0]; i++)
        if (lb->data[i] >= 10)
            return exd_fail(msg, len, EX_ERR_FORMAT,
                            "%s: label %u of sample %u is out of range (10 classes)", labels,
                            lb->data[i], i);
    return EX_OK;
}

static int32_t *widen_labels(const uint8_t *b, uint32_t n)
{
    int32_t *l = malloc((size_t)n * sizeof *l);
    for (uint32_t i = 0; l && i < n; i++)
        l[i] = b[i];
    return l;
}

ex_status exd_idx_load(const char *images, const char *labels, const char *name, ex_dataset **out,
                       char *msg, size_t len)
{
    exd_idx im, lb = {0};
    ex_status st = exd_idx_read(images, 3, &im, msg, len);
    if (st == EX_OK)
        st = exd_idx_read(labels, 1, &lb, msg, len);
    if (st == EX_OK)
        st = check_pair(images, &im, labels, &lb, msg, len);
    int32_t *wide = NULL;
    if (st == EX_OK && !(wide = widen_labels(lb.data, lb.dims[0])))
        st = exd_fail(msg, len, EX_ERR_NOMEM, "%s: out of memory for the labels", labels);
    free(lb.data);
    if (st != EX_OK) {
        free(im.data);
        return st;
    }
    return exd_dataset_wrap(im.data, EX_PIXEL_U8, wide, im.dims[0], 1, (int)im.dims[1],
                            (int)im.dims[2], 10, name, out, msg, len);
}
