/* exapt — safetensors files: named tensors that PyTorch's safetensors.torch.load_file reads.
 *
 * Layout: an 8-byte little-endian header length N, N bytes of JSON
 * {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {string: string}}
 * padded with spaces to a multiple of 8, then the data section, which the tensors' byte
 * ranges tile exactly. Data is little-endian and stored as written: nothing is converted.
 * See docs/safetensors.md. */
#ifndef EXAPT_SAFETENSORS_H
#define EXAPT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "exapt/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Most dimensions of a tensor in a file exapt writes or reads. */
#define EX_ST_MAX_DIMS 4
/** Longest tensor name, in bytes. */
#define EX_ST_MAX_NAME 255
/** Largest header the reader accepts, in bytes (as the reference implementation). */
#define EX_ST_MAX_HEADER 100000000u

/** Element types, spelled "F32", "I32", "I64", "I8" in the file. */
typedef enum ex_st_dtype {
    EX_ST_F32 = 0,
    EX_ST_I32,
    EX_ST_I64,
    EX_ST_I8,
    EX_ST_DTYPE_COUNT
} ex_st_dtype;

/** The file's spelling of a dtype ("F32", ...), "?" for an invalid one. */
const char *ex_st_dtype_name(ex_st_dtype t);
/** Bytes per element, 0 for an invalid dtype. */
int ex_st_dtype_size(ex_st_dtype t);

/** One tensor to write: data holds the product of shape[0..ndim) elements, row-major
 *  (0 dimensions: a scalar of one element). data may be NULL only when that is 0. */
typedef struct ex_st_tensor {
    const char *name; /**< 1..EX_ST_MAX_NAME bytes of UTF-8, not "__metadata__" */
    ex_st_dtype dtype;
    int ndim; /**< 0..EX_ST_MAX_DIMS */
    int64_t shape[EX_ST_MAX_DIMS];
    const void *data;
} ex_st_tensor;

/** One `__metadata__` entry: UTF-8 strings. */
typedef struct ex_st_meta {
    const char *key;
    const char *value;
} ex_st_meta;

/** Writes n tensors (names unique) and n_meta metadata entries (keys unique; no
 *  `__metadata__` when 0) to path, crash-safely: path.tmp is written, synced and renamed
 *  over path, so an existing file is replaced whole or not at all. Tensors are laid out
 *  by decreasing element size (then in the order given) so every tensor is aligned to
 *  its element size. EX_ERR_ARG for bad tensors or metadata, EX_ERR_IO when writing
 *  fails; msg (may be NULL) says why. */
ex_status ex_safetensors_save(const char *path, const ex_st_tensor *tensors, size_t n,
                              const ex_st_meta *meta, size_t n_meta, char *msg, size_t msg_len);

/** An open safetensors file whose header has been checked. */
typedef struct ex_safetensors ex_safetensors;

/** Opens path and checks its header: header length within the file and at most
 *  EX_ST_MAX_HEADER, a JSON object, known dtypes, shapes of at most EX_ST_MAX_DIMS
 *  non-negative dimensions whose byte size equals the offsets' span, offsets that tile
 *  the data section exactly (no overlap, no gap, nothing past its end), unique names of at
 *  most EX_ST_MAX_NAME bytes, and a `__metadata__` of strings. EX_ERR_IO when the file
 *  cannot be read, EX_ERR_FORMAT when it is malformed, EX_ERR_UNSUPPORTED for a valid
 *  safetensors dtype exapt does not read (e.g. "F16"). *out is NULL on failure. */
ex_status ex_safetensors_open(const char *path, ex_safetensors **out, char *msg, size_t msg_len);

/** Closes the file. NULL is a no-op. */
void ex_safetensors_close(ex_safetensors *f);

/** Number of tensors. */
size_t ex_safetensors_count(const ex_safetensors *f);

/** Name of tensor i in header order, NULL when i is out of range. */
const char *ex_safetensors_name(const ex_safetensors *f, size_t i);

/** What a tensor is. */
typedef struct ex_st_info {
    ex_st_dtype dtype;
    int ndim;
    int64_t shape[EX_ST_MAX_DIMS]; /**< unused dimensions are 0 */
    uint64_t nbytes;               /**< bytes of its data */
} ex_st_info;

/** Describes the tensor called name. EX_ERR_ARG when there is none. */
ex_status ex_safetensors_info(const ex_safetensors *f, const char *name, ex_st_info *info,
                              char *msg, size_t msg_len);

/** Copies the data of the tensor called name into buf, which must hold exactly its
 *  nbytes (EX_ERR_ARG otherwise). EX_ERR_IO when the file cannot be read any more (e.g.
 *  it shrank since it was opened). */
ex_status ex_safetensors_read(const ex_safetensors *f, const char *name, void *buf,
                              size_t buf_bytes, char *msg, size_t msg_len);

/** The `__metadata__` value of key, NULL when absent. */
const char *ex_safetensors_metadata(const ex_safetensors *f, const char *key);
/** Number of `__metadata__` entries. */
size_t ex_safetensors_metadata_count(const ex_safetensors *f);
/** Key of metadata entry i in file order, NULL when out of range. */
const char *ex_safetensors_metadata_key(const ex_safetensors *f, size_t i);

#ifdef __cplusplus
}
#endif
#endif
