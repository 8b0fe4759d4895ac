/* Replacing a file all at once: a reader (or a crash) sees the old file or the whole new
 * one, never a half-written result in place of a good one. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

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
    /* the engine's writer: a synced temporary file renamed over path, the directory synced */
    return ex_file_write_atomic(path, text, strlen(text), msg, msg_len) == EX_OK ? 0 : -1;
}
