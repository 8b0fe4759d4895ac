/* Shared by the fuzz targets: the input as a file in a private folder, for readers that
 * take paths. The folder is made once per process (mkdtemp) so parallel runs never meet. */
#ifndef EXAPT_FUZZ_UTIL_H
#define EXAPT_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "exapt/exapt.h"
#include "exapt/safetensors.h"

/** The fuzzing process's private folder (made on first use; NULL if it cannot be). */
const char *fuzz_dir(void);

/** Writes n bytes of data to fuzz_dir()/name; returns the path (static storage, valid
 *  until the next call) or NULL on failure. */
const char *fuzz_write(const char *name, const uint8_t *data, size_t n);

/** Removes fuzz_dir()/name (a missing file is fine). */
void fuzz_remove(const char *name);

/** A small DARTS_V2 network (8x8x1 images, 3 classes, C=2, 3 cells) on be; aborts when it
 *  cannot be made. */
ex_network *fuzz_small_network(ex_backend *be);

/** Every tensor of the safetensors file at path, names and data in new buffers, into a
 *  new array of *n (a target's fixed template: aborts when the file cannot be read). */
ex_st_tensor *fuzz_read_tensors(const char *path, size_t *n);

#endif
