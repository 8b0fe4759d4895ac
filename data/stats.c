/* Per-channel statistics for normalization. Bytes are counted into a 256-bin histogram per
 * channel, which makes the sums exact; floats take two passes (mean, then spread) in double. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data/internal.h"

static void stats_u8(const ex_dataset *ds, ex_normalize *out, uint64_t (*hist)[256])
{
    const exd_storage *st = ds->st;
    size_t plane = (size_t)st->h * (size_t)st->w;
    const uint8_t *base = (const uint8_t *)st->pixels + (size_t)ds->first * st->sample;
    for (int64_t i = 0; i < ds->count; i++)
        for (int c = 0; c < st->c; c++) {
            const uint8_t *p = base + (size_t)i * st->sample + (size_t)c * plane;
            for (size_t k = 0; k < plane; k++)
                hist[c][p[k]]++;
        }
    double total = (double)ds->count * (double)plane;
    for (int c = 0; c < st->c; c++) {
        double sum = 0, sq = 0;
        for (int v = 0; v < 256; v++) {
            sum += (double)hist[c][v] * v;
            sq += (double)hist[c][v] * v * v;
        }
        double mean = sum / total;
        double var = sq / total - mean * mean;
        out->mean[c] = (float)(mean / 255.0);
        out->std[c] = (float)(sqrt(var > 0 ? var : 0) / 255.0);
    }
}

static void stats_f32(const ex_dataset *ds, ex_normalize *out)
{
    const exd_storage *st = ds->st;
    size_t plane = (size_t)st->h * (size_t)st->w;
    const float *base = (const float *)st->pixels + (size_t)ds->first * st->sample;
    double total = (double)ds->count * (double)plane;
    for (int c = 0; c < st->c; c++) {
        double sum = 0, sq = 0;
        for (int64_t i = 0; i < ds->count; i++)
            for (size_t k = 0; k < plane; k++)
                sum += base[(size_t)i * st->sample + (size_t)c * plane + k];
        double mean = sum / total;
        for (int64_t i = 0; i < ds->count; i++)
            for (size_t k = 0; k < plane; k++) {
                double d = base[(size_t)i * st->sample + (size_t)c * plane + k] - mean;
                sq += d * d;
            }
        out->mean[c] = (float)mean;
        out->std[c] = (float)sqrt(sq / total);
    }
}

ex_status ex_dataset_normalization(const ex_dataset *ds, ex_normalize *out, char *msg,
                                   size_t msg_len)
{
    if (!ds || !out)
        return exd_fail(msg, msg_len, EX_ERR_ARG,
                        "ex_dataset_normalization: ds and out must not be NULL");
    if (ds->st->c > EX_DATA_MAX_CHANNELS)
        return exd_fail(msg, msg_len, EX_ERR_UNSUPPORTED,
                        "ex_dataset_normalization: %d channels, at most %d are described",
                        ds->st->c, EX_DATA_MAX_CHANNELS);
    memset(out, 0, sizeof *out);
    if (ds->st->type == EX_PIXEL_U8) {
        uint64_t(*hist)[256] = calloc((size_t)ds->st->c, sizeof *hist);
        if (!hist)
            return exd_fail(msg, msg_len, EX_ERR_NOMEM, "ex_dataset_normalization: out of memory");
        stats_u8(ds, out, hist);
        free(hist);
    } else {
        stats_f32(ds, out);
    }
    out->enabled = true;
    if (msg && msg_len)
        msg[0] = '\0';
    return EX_OK;
}
