/* Crash-safe writes and bounded reads for the file formats. A writer never replaces a
 * good file with a partial one: it writes FILE.tmp, syncs it, and renames it over FILE. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fileio.h"
#include "exapt/file.h"

ex_status ex__msg(char *msg, size_t len, ex_status st, const char *fmt, ...)
{
    if (msg && len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, len, fmt, ap);
        va_end(ap);
    }
    return st;
}

static char *dup_str(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    char *p = malloc(a + b + 1);
    if (p) {
        memcpy(p, s, a);
        memcpy(p + a, suffix, b + 1);
    }
    return p;
}

static void wfile_release(ex__wfile *f)
{
    free(f->path);
    free(f->tmp);
    f->path = f->tmp = NULL;
    f->fd = -1;
}

ex_status ex__wfile_open(ex__wfile *f, const char *path, char *msg, size_t len)
{
    f->fd = -1;
    f->path = dup_str(path, "");
    f->tmp = dup_str(path, ".tmp");
    if (!f->path || !f->tmp) {
        wfile_release(f);
        return ex__msg(msg, len, EX_ERR_NOMEM, "%s: out of memory", path);
    }
    f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (f->fd < 0) {
        int e = errno;
        ex_status st =
            ex__msg(msg, len, EX_ERR_IO, "%s: cannot create %s: %s", path, f->tmp, strerror(e));
        wfile_release(f);
        return st;
    }
    return EX_OK;
}

ex_status ex__wfile_write(ex__wfile *f, const void *p, size_t n, char *msg, size_t len)
{
    const char *c = p;
    while (n > 0) {
        /* Some kernels cap one write below 2 GiB; short writes just loop. */
        size_t chunk = n < ((size_t)1 << 30) ? n : ((size_t)1 << 30);
        ssize_t w = write(f->fd, c, chunk);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return ex__msg(msg, len, EX_ERR_IO, "%s: cannot write %s: %s", f->path, f->tmp,
                           w < 0 ? strerror(errno) : "no progress");
        c += w;
        n -= (size_t)w;
    }
    return EX_OK;
}

void ex__sync_parent_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir = slash ? malloc((size_t)(slash - path) + 2) : dup_str(".", "");
    if (!dir)
        return;
    if (slash) {
        size_t n = slash == path ? 1 : (size_t)(slash - path);
        memcpy(dir, path, n);
        dir[n] = 0;
    }
    int fd = open(dir, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    free(dir);
}

ex_status ex__wfile_commit(ex__wfile *f, char *msg, size_t len)
{
    ex_status st = EX_OK;
    if (fsync(f->fd) != 0)
        st = ex__msg(msg, len, EX_ERR_IO, "%s: cannot sync %s: %s", f->path, f->tmp,
                     strerror(errno));
    if (close(f->fd) != 0 && st == EX_OK)
        st = ex__msg(msg, len, EX_ERR_IO, "%s: cannot close %s: %s", f->path, f->tmp,
                     strerror(errno));
    f->fd = -1;
    if (st == EX_OK && rename(f->tmp, f->path) != 0)
        st = ex__msg(msg, len, EX_ERR_IO, "%s: cannot rename %s over it: %s", f->path, f->tmp,
                     strerror(errno));
    if (st != EX_OK) {
        ex__wfile_abort(f);
        return st;
    }
    ex__sync_parent_dir(f->path);
    wfile_release(f);
    return EX_OK;
}

void ex__wfile_abort(ex__wfile *f)
{
    if (f->fd >= 0)
        close(f->fd);
    if (f->tmp)
        unlink(f->tmp);
    wfile_release(f);
}

ex_status ex__write_file_atomic(const char *path, const void *p, size_t n, char *msg, size_t len)
{
    ex__wfile f;
    ex_status st = ex__wfile_open(&f, path, msg, len);
    if (st != EX_OK)
        return st;
    st = ex__wfile_write(&f, p, n, msg, len);
    if (st != EX_OK) {
        ex__wfile_abort(&f);
        return st;
    }
    return ex__wfile_commit(&f, msg, len);
}

static ex_status read_fd(int fd, const char *path, size_t max, char **out, size_t *n, char *msg,
                         size_t len)
{
    struct stat sb;
    if (fstat(fd, &sb) != 0)
        return ex__msg(msg, len, EX_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return ex__msg(msg, len, EX_ERR_IO, "%s: not a regular file", path);
    if ((unsigned long long)sb.st_size > max)
        return ex__msg(msg, len, EX_ERR_FORMAT, "%s: %lld bytes, more than the %zu allowed", path,
                       (long long)sb.st_size, max);
    size_t size = (size_t)sb.st_size;
    char *buf = malloc(size + 1);
    if (!buf)
        return ex__msg(msg, len, EX_ERR_NOMEM, "%s: out of memory for %zu bytes", path, size);
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            free(buf);
            return ex__msg(msg, len, EX_ERR_IO, "%s: read failed after %zu of %zu bytes: %s", path,
                           got, size, r < 0 ? strerror(errno) : "file shrank");
        }
        got += (size_t)r;
    }
    buf[size] = 0;
    *out = buf;
    *n = size;
    return EX_OK;
}

ex_status ex__read_file(const char *path, size_t max, char **out, size_t *n, char *msg, size_t len)
{
    *out = NULL;
    *n = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ex__msg(msg, len, EX_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    ex_status st = read_fd(fd, path, max, out, n, msg, len);
    close(fd);
    return st;
}

ex_status ex_file_write_atomic(const char *path, const void *data, size_t n, char *msg,
                               size_t msg_len)
{
    if (!path || (!data && n > 0))
        return ex__msg(msg, msg_len, EX_ERR_ARG, "write: NULL %s", !path ? "path" : "data");
    return ex__write_file_atomic(path, data, n, msg, msg_len);
}
