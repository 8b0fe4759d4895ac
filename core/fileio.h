/* Internals shared by the file formats (safetensors, genotype, metrics): messages written
 * into a caller's buffer, crash-safe whole-file writes, and bounded whole-file reads. */
#ifndef EXAPT_CORE_FILEIO_H
#define EXAPT_CORE_FILEIO_H

#include <stddef.h>

#include "exapt/status.h"

#if defined(__GNUC__)
#define EX__PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define EX__PRINTF(f, a)
#endif

/** Writes a message into msg (when msg is non-NULL and len > 0) and returns st, so an
 *  error reads `return ex__msg(msg, len, EX_ERR_IO, "...")`. */
ex_status ex__msg(char *msg, size_t len, ex_status st, const char *fmt, ...) EX__PRINTF(4, 5);

/** A file being replaced crash-safely: everything goes to `path.tmp`, and only a
 *  successful ex__wfile_commit() renames it over `path`. Until then `path` is untouched. */
typedef struct ex__wfile {
    int fd;
    char *path;
    char *tmp;
} ex__wfile;

/** Creates (or truncates) path.tmp for writing. On failure nothing is left behind. */
ex_status ex__wfile_open(ex__wfile *f, const char *path, char *msg, size_t len);

/** Writes all n bytes. On failure the caller must still call ex__wfile_abort(). */
ex_status ex__wfile_write(ex__wfile *f, const void *p, size_t n, char *msg, size_t len);

/** fsync, close, rename over path, fsync the directory. Releases f in every case; on
 *  failure the temporary file is removed and path keeps its old content. */
ex_status ex__wfile_commit(ex__wfile *f, char *msg, size_t len);

/** Closes and removes the temporary file. Safe after a failed open and after commit. */
void ex__wfile_abort(ex__wfile *f);

/** Replaces path with the n bytes at p, crash-safely (the three calls above). */
ex_status ex__write_file_atomic(const char *path, const void *p, size_t n, char *msg, size_t len);

/** Reads a whole regular file of at most max bytes into a new buffer with a NUL after the
 *  last byte (the file itself may hold NULs; *n says how many bytes came). */
ex_status ex__read_file(const char *path, size_t max, char **out, size_t *n, char *msg, size_t len);

/** fsyncs the directory holding path, so a rename into it survives a power cut. Errors
 *  are ignored: the rename is already done and some file systems refuse directory syncs. */
void ex__sync_parent_dir(const char *path);

#endif
