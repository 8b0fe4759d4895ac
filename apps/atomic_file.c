/* Replacing a file all at once: a reader (or a crash) sees the old file or the whole new
 * one, never a half-written result in place of a good one. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

/* Writes text to an open stream and forces it to the disk; returns errno or 0. */
static int write_and_sync(FILE *f, const char *text)
{
    size_t n = strlen(text);
    if (fwrite(text, 1, n, f) != n || fflush(f) != 0)
        return errno ? errno : EIO;
    /* Without fsync a crash after the rename could leave an empty file under the
     * final name on some file systems. */
    if (fsync(fileno(f)) != 0)
        return errno;
    return 0;
}

/* A pipe, terminal or device (/dev/stdout, a FIFO) cannot be replaced by a rename and
 * holds no old content to protect: it is written directly. */
static int write_special(const char *path, const char *text, char *msg, size_t msg_len)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL) {
        snprintf(msg, msg_len, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    size_t n = strlen(text);
    errno = 0;
    int err = fwrite(text, 1, n, f) != n || fflush(f) != 0 ? (errno ? errno : EIO) : 0;
    if (fclose(f) != 0 && err == 0)
        err = errno ? errno : EIO;
    if (err != 0)
        snprintf(msg, msg_len, "cannot write %s: %s", path, strerror(err));
    return err == 0 ? 0 : -1;
}

int cli_write_file_atomic(const char *path, const char *text, char *msg, size_t msg_len)
{
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
        return write_special(path, text, msg, msg_len);
    size_t tlen = strlen(path) + 5;
    char *tmp = malloc(tlen);
    if (tmp == NULL) {
        snprintf(msg, msg_len, "out of memory");
        return -1;
    }
    snprintf(tmp, tlen, "%s.tmp", path);
    int err = 0;
    FILE *f = fopen(tmp, "wb");
    if (f == NULL) {
        snprintf(msg, msg_len, "cannot create %s: %s", tmp, strerror(errno));
        free(tmp);
        return -1;
    }
    errno = 0;
    err = write_and_sync(f, text);
    if (fclose(f) != 0 && err == 0)
        err = errno ? errno : EIO;
    if (err != 0)
        snprintf(msg, msg_len, "cannot write %s: %s", tmp, strerror(err));
    else if (rename(tmp, path) != 0) {
        err = errno;
        snprintf(msg, msg_len, "cannot rename %s to %s: %s", tmp, path, strerror(err));
    }
    if (err != 0)
        remove(tmp);
    free(tmp);
    return err == 0 ? 0 : -1;
}
