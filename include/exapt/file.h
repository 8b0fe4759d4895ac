/* exapt — the library's crash-safe file writer, for applications that want the guarantee
 * its own files (checkpoints, genotypes, metrics) have. */
#ifndef EXAPT_FILE_H
#define EXAPT_FILE_H

#include <stddef.h>

#include "exapt/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Replaces the regular file at path (or creates it) with the n bytes at data: writes
 *  path.tmp, syncs it, renames it over path and syncs the directory, so after a crash at any
 *  moment path holds its old content or all of the new. On failure path is untouched, the
 *  temporary file is removed, msg says why; EX_ERR_ARG for a NULL path (or NULL data with
 *  n > 0), EX_ERR_IO for the file system's refusals. */
ex_status ex_file_write_atomic(const char *path, const void *data, size_t n, char *msg,
                               size_t msg_len);

#ifdef __cplusplus
}
#endif

#endif
