/* Unlabelled images for inference: an IDX file of images, or one PNG (through libpng's
 * simplified API, which converts colour types, bit depths and palettes). */
#include <png.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "data/internal.h"

ex_status ex_images_load(const char *path, ex_dataset **out, char *msg, size_t msg_len)
{
    if (!path || !out)
        return exd_fail(msg, msg_len, EX_ERR_ARG, "ex_images_load: path and out must not be NULL");
    *out = NULL;
    exd_idx im;
    ex_status st = exd_idx_read(path, 3, &im, msg, msg_len);
    if (st != EX_OK)
        return st;
    if (im.dims[1] > 65536 || im.dims[2] > 65536) {
        free(im.data);
        return exd_fail(msg, msg_len, EX_ERR_FORMAT, "%s: images of %u x %u pixels are too large",
                        path, im.dims[1], im.dims[2]);
    }
    int32_t *labels = calloc(im.dims[0], sizeof *labels);
    if (!labels) {
        free(im.data);
        return exd_fail(msg, msg_len, EX_ERR_NOMEM, "%s: out of memory", path);
    }
    return exd_dataset_wrap(im.data, EX_PIXEL_U8, labels, im.dims[0], 1, (int)im.dims[1],
                            (int)im.dims[2], 1, "images", out, msg, msg_len);
}

/* libpng's message for the failure of image, or a fallback. */
static ex_status png_failure(png_image *image, const char *path, char *msg, size_t len)
{
    ex_status st = image->message[0] ? EX_ERR_FORMAT : EX_ERR_IO;
    exd_fail(msg, len, st, "%s: not a readable PNG image (%s)", path,
             image->message[0] ? image->message : "libpng gave no reason");
    png_image_free(image);
    return st;
}

ex_status ex_image_load_png(const char *path, int channels, int height, int width, float *pixels,
                            char *msg, size_t msg_len)
{
    if (!path || !pixels || (channels != 1 && channels != 3) || height < 1 || width < 1)
        return exd_fail(msg, msg_len, EX_ERR_ARG,
                        "ex_image_load_png: a path, 1 or 3 channels, a size and room for the "
                        "pixels are needed");
    if (!exd_file_exists(path))
        return exd_fail(msg, msg_len, EX_ERR_IO, "%s: cannot be opened", path);
    png_image image;
    memset(&image, 0, sizeof image);
    image.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_file(&image, path))
        return png_failure(&image, path, msg, msg_len);
    if ((int64_t)image.height != height || (int64_t)image.width != width) {
        exd_fail(msg, msg_len, EX_ERR_ARG, "%s: is %u x %u pixels, the network takes %d x %d", path,
                 image.width, image.height, width, height);
        png_image_free(&image);
        return EX_ERR_ARG;
    }
    /* 16-bit files are read as 16 bits (libpng takes them for linear), 8-bit ones as 8:
     * either way the stored values, with no gamma conversion between */
    bool wide = image.format & PNG_FORMAT_FLAG_LINEAR;
    image.format =
        (channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB) | (wide ? PNG_FORMAT_FLAG_LINEAR : 0);
    size_t count = (size_t)channels * (size_t)height * (size_t)width;
    uint8_t *buf = calloc(count, wide ? 2 : 1);
    if (!buf) {
        png_image_free(&image);
        return exd_fail(msg, msg_len, EX_ERR_NOMEM, "%s: out of memory", path);
    }
    const png_color black = {0, 0, 0};
    if (!png_image_finish_read(&image, &black, buf, 0, NULL)) {
        free(buf);
        return png_failure(&image, path, msg, msg_len);
    }
    /* interleaved rows to planes */
    size_t plane = (size_t)height * (size_t)width;
    for (size_t p = 0; p < plane; p++)
        for (int c = 0; c < channels; c++) {
            size_t at = p * (size_t)channels + (size_t)c;
            pixels[(size_t)c * plane + p] =
                wide ? (float)((const uint16_t *)buf)[at] / 65535.0f : (float)buf[at] / 255.0f;
        }
    free(buf);
    png_image_free(&image);
    if (msg && msg_len)
        msg[0] = '\0';
    return EX_OK;
}
