/* exapt — datasets: IDX (MNIST, Fashion-MNIST) and CIFAR-10 readers, in-memory datasets,
 * train/valid splits, per-channel normalization, per-sample augmentation and a prefetching
 * batch loader. The layer knows nothing of graphs: it fills host buffers (f32 NCHW images,
 * i32 labels) that the caller uploads (e.g. with ex_plan_write).
 *
 * Errors: every fallible call returns an ex_status and, when msg is not NULL and msg_len is
 * not zero, writes a NUL-terminated English message into msg (an empty string on success).
 * Nothing here prints, exits or keeps global state. See docs/data.md. */
#ifndef EXAPT_DATA_H
#define EXAPT_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "exapt/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Where Debian's dataset-fashion-mnist package installs Fashion-MNIST. */
#define EX_DATA_DEFAULT_DIR "/usr/share/datasets/fashion-mnist"

/** The most channels a normalization (ex_normalize) describes. */
#define EX_DATA_MAX_CHANNELS 16

/** A set of labelled images of one shape, C x H x W, and a class count. Immutable once made;
 *  safe to read from several threads. */
typedef struct ex_dataset ex_dataset;

/** Which part of a dataset's files to read. */
typedef enum ex_data_split {
    EX_SPLIT_TRAIN, /**< train-*-ubyte, or CIFAR-10's data_batch_1..5.bin */
    EX_SPLIT_TEST   /**< t10k-*-ubyte, or CIFAR-10's test_batch.bin */
} ex_data_split;

/** How in-memory pixels are stored. Bytes are scaled by 1/255 when batches are made; floats
 *  are taken as they are (already scaled, typically to [0, 1]). */
typedef enum ex_pixel_type {
    EX_PIXEL_U8, /**< uint8_t, 0..255 */
    EX_PIXEL_F32 /**< float, finite */
} ex_pixel_type;

/** Reads a dataset from files in dir.
 *  dir: the folder holding the files; NULL or "" means EX_DATA_DEFAULT_DIR.
 *  name: "fashion-mnist" or "mnist" (IDX files {train,t10k}-{images-idx3,labels-idx1}-ubyte,
 *  each gzipped (".gz") or raw; the dotted names "train-images.idx3-ubyte" are accepted too),
 *  "cifar10" (CIFAR-10 binary: data_batch_1..5.bin and test_batch.bin, in dir or in
 *  dir/cifar-10-batches-bin), or "auto" (NULL means "auto"): CIFAR-10 when data_batch_1.bin
 *  or test_batch.bin is present, else IDX, named "fashion-mnist" when its mean pixel is at
 *  least 0.2 (Fashion-MNIST's is 0.286, MNIST's 0.131) and "mnist" otherwise, whatever the
 *  folder is called (the name chooses the normalization). Every file is treated as
 *  untrusted; a malformed one gives EX_ERR_FORMAT, a missing or unreadable one EX_ERR_IO,
 *  with a message naming the file. On success *out is a new dataset (free with
 *  ex_dataset_free); on failure *out is NULL. */
ex_status ex_dataset_load(const char *dir, const char *name, ex_data_split split, ex_dataset **out,
                          char *msg, size_t msg_len);

/** Makes a dataset from caller memory, which is copied (the caller keeps its buffers).
 *  images: n samples of c x h x w pixels in NCHW order, of the given type; labels: n values in
 *  [0, classes). F32 pixels must be finite (EX_ERR_NONFINITE otherwise). Bad sizes, NULL
 *  pointers or out-of-range labels give EX_ERR_ARG. The dataset's name is "memory". */
ex_status ex_dataset_from_memory(const void *images, ex_pixel_type type, int64_t n, int c, int h,
                                 int w, const int32_t *labels, int classes, ex_dataset **out,
                                 char *msg, size_t msg_len);

/** Releases a dataset. Splits and loaders made from it stay valid: they hold their own
 *  reference to the pixel storage, which is freed with the last of them. NULL is a no-op. */
void ex_dataset_free(ex_dataset *ds);

/** Number of samples (0 for NULL). */
int64_t ex_dataset_count(const ex_dataset *ds);
/** Channels per image (0 for NULL). */
int ex_dataset_channels(const ex_dataset *ds);
/** Image height in pixels (0 for NULL). */
int ex_dataset_height(const ex_dataset *ds);
/** Image width in pixels (0 for NULL). */
int ex_dataset_width(const ex_dataset *ds);
/** Number of classes: labels lie in [0, classes) (0 for NULL). */
int ex_dataset_classes(const ex_dataset *ds);
/** "fashion-mnist", "mnist", "cifar10" or "memory"; splits keep their parent's name. NULL for
 *  NULL. */
const char *ex_dataset_name(const ex_dataset *ds);
/** How the pixels are stored (files are always EX_PIXEL_U8). */
ex_pixel_type ex_dataset_pixel_type(const ex_dataset *ds);

/** Copies sample i: its c*h*w pixels, scaled (bytes / 255, floats as stored) but neither
 *  normalized nor augmented, into image (may be NULL), and its label into label (may be NULL).
 *  EX_ERR_ARG when ds is NULL or i is out of range. */
ex_status ex_dataset_sample(const ex_dataset *ds, int64_t i, float *image, int32_t *label);

/** Splits ds as DARTS does: the first floor(portion * count) samples, in order, become *first
 *  and the rest *second. Both are views sharing ds's pixel storage through a reference count
 *  (no pixel is copied, and either may outlive ds). portion must lie in (0, 1) and leave both
 *  parts non-empty (EX_ERR_ARG otherwise). On failure both outputs are NULL. Free each with
 *  ex_dataset_free. */
ex_status ex_dataset_split(const ex_dataset *ds, double portion, ex_dataset **first,
                           ex_dataset **second, char *msg, size_t msg_len);

/** Reads unlabelled images for inference from an IDX file of unsigned bytes in 3
 *  dimensions (n x h x w: one channel, as MNIST's image files; gzipped or raw). The dataset
 *  has n samples, every label 0 and one class; its name is "images". EX_ERR_IO when the file
 *  cannot be read, EX_ERR_FORMAT when it is not such a file. */
ex_status ex_images_load(const char *path, ex_dataset **out, char *msg, size_t msg_len);

/** Reads one PNG image (any colour type and bit depth: libpng's simplified API converts it)
 *  of exactly width x height pixels into pixels: channels (1 or 3) planes of the stored
 *  values scaled to [0, 1] (8-bit samples / 255, 16-bit ones / 65535; no gamma
 *  conversion). Colour becomes grey by libpng's luminance, grey is repeated for 3 channels,
 *  transparency is composited over black. EX_ERR_IO when the file cannot be read,
 *  EX_ERR_FORMAT when it is not a valid PNG, EX_ERR_ARG for another size (the message says
 *  both) or bad arguments; pixels may be partly written on failure. */
ex_status ex_image_load_png(const char *path, int channels, int height, int width, float *pixels,
                            char *msg, size_t msg_len);

/** Per-channel normalization, applied when batches are made: x = pixel / 255 (bytes) or the
 *  stored float, then, when enabled, (x - mean[c]) / std[c]. */
typedef struct ex_normalize {
    bool enabled;
    float mean[EX_DATA_MAX_CHANNELS];
    float std[EX_DATA_MAX_CHANNELS];
} ex_normalize;

/** Computes the per-channel mean and population standard deviation of ds's scaled pixels
 *  (bytes / 255) over every sample of ds, and sets out->enabled. Compute them on the training
 *  part only. EX_ERR_UNSUPPORTED when ds has more than EX_DATA_MAX_CHANNELS channels. */
ex_status ex_dataset_normalization(const ex_dataset *ds, ex_normalize *out, char *msg,
                                   size_t msg_len);

/** Per-sample augmentation, in DARTS's order: random crop, horizontal flip, then (after
 *  normalization) cutout. Zero fields turn a step off. */
typedef struct ex_augment {
    /** Random crop of H x W out of the image zero-padded by crop_pad on every side (padding
     *  is a black pixel, 0 before normalization). 0: off. */
    int crop_pad;
    /** Mirror left-right with probability 1/2. */
    bool flip;
    /** Cutout: a square of side cutout (clipped at the borders) centred on a uniformly drawn
     *  pixel is set to 0 in every channel, after normalization. 0: off. */
    int cutout;
} ex_augment;

/** How a loader makes batches. */
typedef struct ex_loader_opts {
    size_t size;            /**< sizeof(ex_loader_opts) where the caller was compiled (set by
                                 ex_loader_opts_default(); fields added later take defaults) */
    int batch;              /**< samples per batch, > 0 */
    bool shuffle;           /**< a fresh permutation each epoch; otherwise dataset order */
    bool drop_last;         /**< skip an epoch's final partial batch */
    uint64_t seed;          /**< the whole sample order and every augmentation draw */
    ex_augment augment;     /**< per-sample augmentation */
    ex_normalize normalize; /**< per-channel normalization */
    int prefetch;           /**< batches prepared ahead by a thread, 0..64; 0: no thread */
} ex_loader_opts;

/** Fills the first `size` bytes of o with the defaults for ds and sets o->size to size
 *  (nothing for a NULL o or a size below the size field's): batch 64, prefetch 2, seed 0,
 *  drop_last off, no cutout; normalization with the dataset's customary statistics (Fashion-MNIST
 * 0.2860/0.3530, MNIST 0.1307/0.3081, CIFAR-10 DARTS's per-channel values; off for "memory"
 * datasets). When train is true, shuffle is on and the augmentation is a random crop (pad 4 for
 * CIFAR-10, 2 for the IDX sets) with flips for CIFAR-10 only; when false, no shuffle and no
 * augmentation. Call it as ex_loader_opts_default(o, ds, train), which passes the caller's sizeof.
 */
void ex_loader_opts_init(ex_loader_opts *o, size_t size, const ex_dataset *ds, bool train);

/** Fills *o with the defaults for ds (a macro: sizeof *o as the caller was compiled). */
#define ex_loader_opts_default(o, ds, train) ex_loader_opts_init((o), sizeof *(o), (ds), (train))

/** A batch loader over one dataset. Use it from one thread at a time. */
typedef struct ex_loader ex_loader;

/** Where a loader stands: the epoch of the next batch and the number of that epoch's samples
 *  already delivered (a multiple of the batch size). Save it in a checkpoint; restoring it
 *  with ex_loader_set_state on a loader made with the same dataset and options yields exactly
 *  the batches the saved loader would have yielded. */
typedef struct ex_loader_state {
    int64_t epoch;
    int64_t position;
} ex_loader_state;

/** Makes a loader over ds with opts, positioned at epoch 0, position 0. The loader holds its
 *  own reference to ds's storage, so ds may be freed first. With opts->prefetch > 0 a thread
 *  prepares that many batches ahead. EX_ERR_ARG for bad options (batch <= 0, negative crop or
 *  cutout, normalization with a non-positive or non-finite std or more than
 *  EX_DATA_MAX_CHANNELS channels, an epoch with no batch); EX_ERR_NOMEM when memory or the
 *  thread cannot be had. */
ex_status ex_loader_new(const ex_dataset *ds, const ex_loader_opts *opts, ex_loader **out,
                        char *msg, size_t msg_len);

/** Fills images (room for batch * C * H * W floats, NCHW contiguous) and labels (room for
 *  batch values) with the next batch and stores its sample count in *count_out: the batch
 *  size, or fewer for an epoch's last batch when drop_last is off. After an epoch's last
 *  batch the loader moves on to the next epoch (position 0, reshuffled); ex_loader_get_state
 *  tells when that happened. The batches are a pure function of (dataset, options, epoch,
 *  position): threading and timing never change them. EX_ERR_ARG for NULL arguments. */
ex_status ex_loader_next(ex_loader *loader, float *images, int32_t *labels, int *count_out);

/** Batches per epoch: ceil(count / batch), or floor with drop_last. 0 for NULL. */
int64_t ex_loader_batches_per_epoch(const ex_loader *loader);

/** Floats one full batch of images takes: batch * C * H * W. 0 for NULL. */
size_t ex_loader_batch_floats(const ex_loader *loader);

/** The loader's state: the epoch and position of the batch ex_loader_next returns next. A
 *  position of 0 after a call to ex_loader_next means that call ended an epoch. {0, 0} for
 *  NULL. */
ex_loader_state ex_loader_get_state(const ex_loader *loader);

/** Moves the loader to state, discarding batches prepared ahead. The epoch must be >= 0 and
 *  the position a multiple of the batch size below the samples an epoch delivers
 *  (EX_ERR_ARG otherwise, leaving the loader as it was). */
ex_status ex_loader_set_state(ex_loader *loader, ex_loader_state state, char *msg, size_t msg_len);

/** Stops and joins the prefetch thread (also mid-epoch) and frees the loader. NULL is a
 *  no-op. */
void ex_loader_free(ex_loader *loader);

#ifdef __cplusplus
}
#endif
#endif
