/* Sample order and augmentation. Every random decision is a Philox draw addressed by
 * (seed, epoch, stream, sample position), never the state of a generator, so a batch is the
 * same whichever thread makes it, whenever, and after a resume from a checkpoint. */
#include <stdlib.h>

#include "core/philox.h"
#include "data/internal.h"

enum { STREAM_ORDER = 1, STREAM_AUGMENT = 2 };

/* Block `block` of the stream (seed; epoch, stream): the four draws
 * ex_philox_u32(..., 4 * block + 0..3) at the cost of one. */
static void philox_block(uint64_t seed, int64_t epoch, uint32_t stream, uint64_t block,
                         uint32_t out[4])
{
    out[0] = (uint32_t)block;
    out[1] = (uint32_t)(block >> 32);
    out[2] = (uint32_t)epoch;
    out[3] = stream | (uint32_t)((uint64_t)epoch >> 32) << 4;
    ex_philox4x32(out, (uint32_t)seed, (uint32_t)(seed >> 32));
}

/* A draw in [0, range) from 32 uniform bits; the bias, range / 2^32, is far below anything
 * an augmentation can show. */
static int bounded(uint32_t u, uint32_t range)
{
    return (int)(((uint64_t)u * range) >> 32);
}

exd_draws exd_draw(uint64_t seed, int64_t epoch, int64_t pos, const ex_augment *a, int h, int w)
{
    uint32_t r[8];
    philox_block(seed, epoch, STREAM_AUGMENT, 2 * (uint64_t)pos, r);
    philox_block(seed, epoch, STREAM_AUGMENT, 2 * (uint64_t)pos + 1, r + 4);
    /* each decision has its own draw, so turning one step on or off leaves the others as
     * they were */
    exd_draws d = {0};
    if (a->crop_pad > 0) {
        d.oy = bounded(r[0], 2 * (uint32_t)a->crop_pad + 1);
        d.ox = bounded(r[1], 2 * (uint32_t)a->crop_pad + 1);
    }
    d.flip = a->flip && (r[2] >> 31);
    if (a->cutout > 0) {
        d.cy = bounded(r[3], (uint32_t)h);
        d.cx = bounded(r[4], (uint32_t)w);
    }
    return d;
}

void exd_permutation(uint64_t seed, int64_t epoch, int64_t *perm, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        perm[i] = i;
    uint32_t r[4];
    uint64_t have = UINT64_MAX;
    for (int64_t i = n - 1; i > 0; i--) {
        /* two 64-bit draws per block; the modulo bias, (i + 1) / 2^64, is nil in practice */
        uint64_t block = (uint64_t)i >> 1;
        if (block != have) {
            philox_block(seed, epoch, STREAM_ORDER, block, r);
            have = block;
        }
        int lane = (int)(i & 1) * 2;
        uint64_t u = (uint64_t)r[lane] << 32 | r[lane + 1];
        int64_t j = (int64_t)(u % (uint64_t)(i + 1));
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

static float pixel(const exd_storage *st, size_t k)
{
    if (st->type == EX_PIXEL_F32)
        return ((const float *)st->pixels)[k];
    return (float)((const uint8_t *)st->pixels)[k] / 255.0f;
}

/* One channel: out(y, x) = padded(y + oy, x' + ox) with x' = w - 1 - x when flipped, where
 * the padded image is the source shifted by pad and black outside. */
static void transform_plane(const exd_storage *st, size_t src, int dy, int dx, bool flip,
                            float mean, float sd, float *out)
{
    int h = st->h, w = st->w;
    float black = (0.0f - mean) / sd;
    for (int y = 0; y < h; y++) {
        int sy = y + dy;
        float *row = out + (size_t)y * w;
        for (int x = 0; x < w; x++) {
            int sx = (flip ? w - 1 - x : x) + dx;
            if (sy < 0 || sy >= h || sx < 0 || sx >= w)
                row[x] = black;
            else
                row[x] = (pixel(st, src + (size_t)sy * w + sx) - mean) / sd;
        }
    }
}

static int clamp(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* DARTS's Cutout: rows [cy - L/2, cy + L/2) and likewise columns, clipped to the image. */
static void cutout(const exd_storage *st, int length, int cy, int cx, float *out)
{
    int y1 = clamp(cy - length / 2, 0, st->h), y2 = clamp(cy + length / 2, 0, st->h);
    int x1 = clamp(cx - length / 2, 0, st->w), x2 = clamp(cx + length / 2, 0, st->w);
    for (int c = 0; c < st->c; c++)
        for (int y = y1; y < y2; y++)
            for (int x = x1; x < x2; x++)
                out[((size_t)c * st->h + y) * st->w + x] = 0.0f;
}

void exd_transform(const ex_dataset *ds, int64_t i, const ex_augment *a, const ex_normalize *nz,
                   const exd_draws *d, float *out)
{
    const exd_storage *st = ds->st;
    size_t plane = (size_t)st->h * st->w;
    size_t src = (size_t)(ds->first + i) * st->sample;
    int dy = d->oy - a->crop_pad, dx = d->ox - a->crop_pad;
    for (int c = 0; c < st->c; c++) {
        float mean = nz->enabled ? nz->mean[c] : 0.0f, sd = nz->enabled ? nz->std[c] : 1.0f;
        transform_plane(st, src + c * plane, dy, dx, d->flip, mean, sd, out + c * plane);
    }
    if (a->cutout > 0)
        cutout(st, a->cutout, d->cy, d->cx, out);
}
