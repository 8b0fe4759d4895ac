/* Writes the first images of an IDX file as PNG files, for the tests of exapt predict:
 * png_from_idx IDX COUNT DIR FORMAT, FORMAT one of gray, gray16, rgb, rgba, palette (a
 * grey image in each: conversions must give back the same pixels). */
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exapt/data.h"

static int write_one(const char *path, const float *px, int h, int w, const char *format)
{
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    im.width = (png_uint_32)w;
    im.height = (png_uint_32)h;
    bool wide = !strcmp(format, "gray16");
    int ch = !strcmp(format, "rgb") ? 3 : !strcmp(format, "rgba") ? 4 : 1;
    im.format = wide      ? PNG_FORMAT_LINEAR_Y
                : ch == 3 ? PNG_FORMAT_RGB
                : ch == 4 ? PNG_FORMAT_RGBA
                          : PNG_FORMAT_GRAY;
    size_t n = (size_t)h * (size_t)w;
    uint8_t *b8 = calloc(n * 4, 1);
    uint16_t *b16 = calloc(n, sizeof *b16);
    if (!b8 || !b16)
        return 1;
    for (size_t i = 0; i < n; i++) {
        int v = (int)(px[i] * 255.0f + 0.5f);
        b16[i] = (uint16_t)(v * 257);
        for (int c = 0; c < ch; c++)
            b8[i * (size_t)ch + (size_t)c] = c == 3 ? 255 : (uint8_t)v;
    }
    if (!strcmp(format, "palette")) {
        /* an 8-bit colour map of the 256 greys */
        im.format = PNG_FORMAT_RGB_COLORMAP;
        im.colormap_entries = 256;
        uint8_t map[256 * 3];
        for (int i = 0; i < 256; i++)
            map[3 * i] = map[3 * i + 1] = map[3 * i + 2] = (uint8_t)i;
        int ok = png_image_write_to_file(&im, path, 0, b8, 0, map);
        free(b8);
        free(b16);
        return !ok;
    }
    int ok = png_image_write_to_file(&im, path, 0, wide ? (void *)b16 : (void *)b8, 0, NULL);
    free(b8);
    free(b16);
    return !ok;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: png_from_idx IDX COUNT DIR FORMAT\n");
        return 2;
    }
    char msg[256];
    ex_dataset *ds = NULL;
    if (ex_images_load(argv[1], &ds, msg, sizeof msg) != EX_OK) {
        fprintf(stderr, "%s\n", msg);
        return 1;
    }
    int h = ex_dataset_height(ds), w = ex_dataset_width(ds), count = atoi(argv[2]);
    float *px = malloc((size_t)h * (size_t)w * sizeof *px);
    int rc = px ? 0 : 1;
    for (int i = 0; !rc && i < count && i < ex_dataset_count(ds); i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%05d.png", argv[3], i);
        ex_dataset_sample(ds, i, px, NULL);
        rc = write_one(path, px, h, w, argv[4]);
    }
    free(px);
    ex_dataset_free(ds);
    return rc;
}
