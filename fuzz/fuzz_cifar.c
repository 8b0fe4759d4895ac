/* The CIFAR-10 binary reader (test_batch.bin) through ex_dataset_load. */
#include <stdint.h>
#include <stdlib.h>

#include "exapt/data.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!fuzz_write("test_batch.bin", data, size))
        return 0;
    ex_dataset *ds = NULL;
    char msg[256];
    if (ex_dataset_load(fuzz_dir(), "cifar10", EX_SPLIT_TEST, &ds, msg, sizeof msg) != EX_OK)
        return 0;
    int64_t count = ex_dataset_count(ds);
    float *img = malloc(3 * 32 * 32 * sizeof *img);
    int32_t label;
    if (img && count > 0 &&
        (ex_dataset_sample(ds, 0, img, &label) != EX_OK ||
         ex_dataset_sample(ds, count - 1, img, &label) != EX_OK || label < 0 || label > 9))
        abort();
    free(img);
    ex_dataset_free(ds);
    return 0;
}
