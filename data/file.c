/* Reading untrusted files through zlib, which passes raw files through unchanged, so every
 * reader accepts gzipped and plain files alike. Buffers grow with the data actually read,
 * never with what a header claims. */
#define _POSIX_C_SOURCE 200809L /* the XSI strerror_r, which keeps no shared buffer */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "data/internal.h"

/* gzread takes an unsigned count and returns an int */
#define EXD_READ_CHUNK ((size_t)1 << 30)
/* the first allocation before the data has shown it exists */
#define EXD_FIRST_ALLOC ((size_t)1 << 22)

static const char *error_text(int e, char *buf, size_t n)
{
    if (strerror_r(e, buf, n))
        snprintf(buf, n, "error %d", e);
    return buf;
}

static ex_status gz_failure(exd_gz gz, const char *path, char *msg, size_t len)
{
    int err = Z_OK, sys = errno;
    const char *what = gzerror(gz, &err);
    char text[128];
    switch (err) {
    case Z_ERRNO:
        return exd_fail(msg, len, EX_ERR_IO, "%s: read error: %s", path,
                        error_text(sys, text, sizeof text));
    case Z_MEM_ERROR:
        return exd_fail(msg, len, EX_ERR_NOMEM, "%s: out of memory while decompressing", path);
    case Z_BUF_ERROR: return exd_fail(msg, len, EX_ERR_FORMAT, "%s: truncated gzip stream", path);
    default:
        return exd_fail(msg, len, EX_ERR_FORMAT, "%s: corrupt gzip data (%s)", path,
                        what ? what : "unknown zlib error");
    }
}

ex_status exd_open(const char *path, exd_gz *gz, char *msg, size_t len)
{
    errno = 0;
    *gz = gzopen(path, "rb");
    char text[128];
    if (!*gz)
        return exd_fail(msg, len, EX_ERR_IO, "%s: cannot open: %s", path,
                        errno ? error_text(errno, text, sizeof text) : "out of memory");
    gzbuffer(*gz, 1u << 17);
    return EX_OK;
}

void exd_close(exd_gz gz)
{
    if (gz)
        gzclose_r(gz);
}

bool exd_file_exists(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f)
        fclose(f);
    return f != NULL;
}

ex_status exd_read(exd_gz gz, const char *path, void *dst, size_t n, size_t *got, char *msg,
                   size_t len)
{
    uint8_t *p = dst;
    *got = 0;
    while (*got < n) {
        size_t want = n - *got < EXD_READ_CHUNK ? n - *got : EXD_READ_CHUNK;
        int r = gzread(gz, p + *got, (unsigned)want);
        if (r < 0)
            return gz_failure(gz, path, msg, len);
        if (r == 0)
            break;
        *got += (size_t)r;
    }
    /* a gzip stream cut short ends the reads without a negative count */
    int err = Z_OK;
    gzerror(gz, &err);
    if (err != Z_OK)
        return gz_failure(gz, path, msg, len);
    return EX_OK;
}

/* Reads into *buf (capacity *cap, *have used) until it holds `limit` bytes or the file ends,
 * doubling the buffer as data arrives. */
static ex_status read_growing(exd_gz gz, const char *path, size_t limit, uint8_t **buf, size_t *cap,
                              size_t *have, char *msg, size_t len)
{
    for (;;) {
        size_t got = 0;
        ex_status st = exd_read(gz, path, *buf + *have, *cap - *have, &got, msg, len);
        if (st != EX_OK)
            return st;
        bool ended = got < *cap - *have;
        *have += got;
        if (ended || *have == limit)
            return EX_OK;
        size_t next = *cap <= limit / 2 ? *cap * 2 : limit;
        uint8_t *grown = realloc(*buf, next);
        if (!grown)
            return exd_fail(msg, len, EX_ERR_NOMEM, "%s: out of memory (%zu bytes)", path, next);
        *buf = grown;
        *cap = next;
    }
}

ex_status exd_read_exact(exd_gz gz, const char *path, size_t n, uint8_t **out, char *msg,
                         size_t len)
{
    *out = NULL;
    size_t cap = n < EXD_FIRST_ALLOC ? n : EXD_FIRST_ALLOC, have = 0;
    uint8_t *buf = malloc(cap ? cap : 1);
    if (!buf)
        return exd_fail(msg, len, EX_ERR_NOMEM, "%s: out of memory (%zu bytes)", path, cap);
    ex_status st = read_growing(gz, path, n, &buf, &cap, &have, msg, len);
    if (st == EX_OK && have < n)
        st = exd_fail(msg, len, EX_ERR_FORMAT,
                      "%s: truncated data: the header describes %zu bytes, the file holds %zu",
                      path, n, have);
    uint8_t extra;
    size_t more = 0;
    if (st == EX_OK)
        st = exd_read(gz, path, &extra, 1, &more, msg, len);
    if (st == EX_OK && more)
        st = exd_fail(msg, len, EX_ERR_FORMAT,
                      "%s: trailing bytes after the %zu bytes of data the header describes", path,
                      n);
    if (st != EX_OK) {
        free(buf);
        return st;
    }
    *out = buf;
    return EX_OK;
}

ex_status exd_read_all(const char *path, size_t max, uint8_t **out, size_t *n, char *msg,
                       size_t len)
{
    *out = NULL;
    *n = 0;
    exd_gz gz;
    ex_status st = exd_open(path, &gz, msg, len);
    if (st != EX_OK)
        return st;
    size_t cap = EXD_FIRST_ALLOC < max + 1 ? EXD_FIRST_ALLOC : max + 1, have = 0;
    uint8_t *buf = malloc(cap);
    if (!buf)
        st = exd_fail(msg, len, EX_ERR_NOMEM, "%s: out of memory (%zu bytes)", path, cap);
    /* one byte beyond max tells a file that is too long */
    if (st == EX_OK)
        st = read_growing(gz, path, max + 1, &buf, &cap, &have, msg, len);
    if (st == EX_OK && have > max)
        st = exd_fail(msg, len, EX_ERR_FORMAT, "%s: larger than %zu bytes", path, max);
    exd_close(gz);
    if (st != EX_OK) {
        free(buf);
        return st;
    }
    *out = buf;
    *n = have;
    return EX_OK;
}
