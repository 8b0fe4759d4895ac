/* The IDX reader (MNIST, Fashion-MNIST), raw or gzipped, through ex_dataset_load. An
 * input is [images length, 4 bytes little-endian][images file][labels file]. */
#include <stdint.h>
#include <stdlib.h>

#include "exapt/data.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    size_t n =
        (size_t)data[0] | (size_t)data[1] << 8 | (size_t)data[2] << 16 | (size_t)data[3] << 24;
    data += 4;
    size -= 4;
    n = n < size ? n : size;
    if (!fuzz_write("train-images-idx3-ubyte", data, n) ||
        !fuzz_write("train-labels-idx1-ubyte", data + n, size - n))
        return 0;
    ex_dataset *ds = NULL;
    char msg[256];
    if (ex_dataset_load(fuzz_dir(), "mnist", EX_SPLIT_TRAIN, &ds, msg, sizeof msg) != EX_OK)
        return 0;
    int64_t count = ex_dataset_count(ds);
    size_t px = (size_t)ex_dataset_channels(ds) * (size_t)ex_dataset_height(ds) *
                (size_t)ex_dataset_width(ds);
    float *img = malloc(px * sizeof *img);
    int32_t label;
    /* the first and the last sample: the reader's sizes must cover both */
    if (img && count > 0 &&
        (ex_dataset_sample(ds, 0, img, &label) != EX_OK ||
         ex_dataset_sample(ds, count - 1, img, &label) != EX_OK))
        abort();
    free(img);
    ex_dataset_free(ds);
    return 0;
}
