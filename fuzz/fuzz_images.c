/* The readers of images for inference: the input as an IDX image file (ex_images_load)
 * and as a PNG (ex_image_load_png) at the size its IHDR chunk claims, capped, in 1 and 3
 * channels. */
#include <stdint.h>
#include <stdlib.h>

#include "exapt/data.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write("input", data, size);
    if (!path)
        return 0;
    char msg[256];
    ex_dataset *ds = NULL;
    if (ex_images_load(path, &ds, msg, sizeof msg) == EX_OK) {
        size_t px = (size_t)ex_dataset_height(ds) * (size_t)ex_dataset_width(ds);
        float *img = malloc(px * sizeof *img);
        if (!img || ex_dataset_sample(ds, ex_dataset_count(ds) - 1, img, NULL) != EX_OK)
            abort();
        free(img);
        ex_dataset_free(ds);
    }
    /* the width and height of the first chunk (IHDR), as the reader must match them */
    uint32_t w = size >= 24 ? be32(data + 16) : 8, h = size >= 24 ? be32(data + 20) : 8;
    if (w < 1 || h < 1 || w > 1024 || h > 1024)
        return 0;
    float *out = malloc(3 * (size_t)w * (size_t)h * sizeof *out);
    for (int c = 1; out && c <= 3; c += 2)
        if (ex_image_load_png(path, c, (int)h, (int)w, out, msg, sizeof msg) == EX_OK)
            for (size_t i = 0; i < (size_t)c * w * h; i++)
                if (!(out[i] >= 0.0f && out[i] <= 1.0f))
                    abort();
    free(out);
    return 0;
}
