/* Internals of the dataset layer shared by the files of data/ (and the tests): the
 * reference-counted pixel storage, dataset views, the file reader, and the sample transform. */
#ifndef EXAPT_DATA_INTERNAL_H
#define EXAPT_DATA_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "exapt/data.h"

#if defined(__GNUC__)
#define EXD_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define EXD_PRINTF(f, a)
#endif

/** Writes a message (when msg is usable) and returns st, so errors read `return exd_fail(...)`. */
ex_status exd_fail(char *msg, size_t len, ex_status st, const char *fmt, ...) EXD_PRINTF(4, 5);

/** Pixels and labels of n samples, shared by every view of one dataset. */
typedef struct exd_storage {
    atomic_long refs;
    ex_pixel_type type;
    void *pixels;    /* n * sample NCHW, uint8_t or float */
    int32_t *labels; /* n */
    int64_t n;
    int c, h, w, classes;
    size_t sample; /* c * h * w */
    char name[16];
} exd_storage;

/** A view: samples [first, first + count) of a storage. */
struct ex_dataset {
    exd_storage *st;
    int64_t first;
    int64_t count;
};

/** Takes ownership of pixels and labels (freed on failure too) and wraps them in a dataset of
 *  one view over everything. */
ex_status exd_dataset_wrap(void *pixels, ex_pixel_type type, int32_t *labels, int64_t n, int c,
                           int h, int w, int classes, const char *name, ex_dataset **out, char *msg,
                           size_t len);

/** A new view [first, first + count) of ds's storage, with its own reference. NULL when out of
 *  memory. */
ex_dataset *exd_dataset_view(const ex_dataset *ds, int64_t first, int64_t count);

/** Checks that every label lies in [0, classes); names `what` in the message. */
ex_status exd_check_labels(const int32_t *labels, int64_t n, int classes, const char *what,
                           char *msg, size_t len);

/* ---- files (gzip or raw, through zlib) ---- */

/** zlib's gzFile, named without including zlib.h. */
typedef struct gzFile_s *exd_gz;

/** Reads exactly n bytes (a count from the file's own header) into a new buffer, or fails
 *  with EX_ERR_FORMAT when the file ends early or goes on longer. The buffer grows with the
 *  data actually present, so a header that lies costs no more memory than the file holds. */
ex_status exd_read_exact(exd_gz gz, const char *path, size_t n, uint8_t **out, char *msg,
                         size_t len);

/** Opens path for reading, gzipped or raw. EX_ERR_IO with a message when it cannot. */
ex_status exd_open(const char *path, exd_gz *gz, char *msg, size_t len);

/** Reads up to n bytes; *got says how many came. A read or decompression error fails. */
ex_status exd_read(exd_gz gz, const char *path, void *dst, size_t n, size_t *got, char *msg,
                   size_t len);

/** Reads the whole file, at most max bytes (EX_ERR_FORMAT when longer). */
ex_status exd_read_all(const char *path, size_t max, uint8_t **out, size_t *n, char *msg,
                       size_t len);

void exd_close(exd_gz gz);

/** Whether path can be opened for reading. */
bool exd_file_exists(const char *path);

/* ---- readers ---- */

/** An IDX file of unsigned bytes: dims[0..ndim) and the data, dims' product bytes. */
typedef struct exd_idx {
    uint8_t *data;
    uint32_t dims[3];
    int ndim;
} exd_idx;

/** Reads an IDX file that must hold unsigned bytes in ndim (1..3) dimensions. */
ex_status exd_idx_read(const char *path, int ndim, exd_idx *out, char *msg, size_t len);

/** Reads an IDX image file and its label file into a dataset of 10 classes. */
ex_status exd_idx_load(const char *images, const char *labels, const char *name, ex_dataset **out,
                       char *msg, size_t len);

/** Reads CIFAR-10 binary batch files (in the given order) into one dataset. */
ex_status exd_cifar_load(const char *const *paths, int files, ex_dataset **out, char *msg,
                         size_t len);

/** The caller's loader options (of the size it was compiled with) over the library's
 *  defaults for ds, into *o; EX_ERR_ARG with a message for a size that is not one. */
ex_status exd_adopt_opts(const ex_dataset *ds, const ex_loader_opts *caller, ex_loader_opts *o,
                         char *msg, size_t len);

/* ---- augmentation ---- */

/** The random decisions for one sample: crop offsets in [0, 2 * pad], flip, cutout centre. */
typedef struct exd_draws {
    int oy, ox;
    bool flip;
    int cy, cx;
} exd_draws;

/** The draws of the sample at position pos of epoch under seed: a pure function of its
 *  arguments (Philox, stream "augment"). */
exd_draws exd_draw(uint64_t seed, int64_t epoch, int64_t pos, const ex_augment *a, int h, int w);

/** Writes sample i of ds (view index) into out (c * h * w floats): crop, flip, scale,
 *  normalize, cutout, as a and nz say, with the decisions d. */
void exd_transform(const ex_dataset *ds, int64_t i, const ex_augment *a, const ex_normalize *nz,
                   const exd_draws *d, float *out);

/** The permutation of [0, n) for epoch under seed (Fisher-Yates on Philox, stream "order"). */
void exd_permutation(uint64_t seed, int64_t epoch, int64_t *perm, int64_t n);

#endif
