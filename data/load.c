/* ex_dataset_load: finding a dataset's files in a folder and choosing the reader. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "data/internal.h"

#define PATH_CAP 4096

/* The IDX file names in use: Debian's and the original site's (gzipped or not), and the
 * dotted ones some mirrors unpack to. */
static const char *const idx_patterns[] = {"%s/%s-%s-ubyte.gz", "%s/%s-%s-ubyte"};
static const char *const idx_dotted[] = {"%s/%s-%s.%s-ubyte.gz", "%s/%s-%s.%s-ubyte"};

static bool join(char *out, const char *fmt, const char *dir, const char *a, const char *b)
{
    int r = snprintf(out, PATH_CAP, fmt, dir, a, b);
    return r > 0 && r < PATH_CAP;
}

/* Finds "<prefix>-<kind>-ubyte[.gz]" or "<prefix>-<kind, dotted>-ubyte[.gz]" in dir, where
 * kind is e.g. "images-idx3". */
static bool find_idx(const char *dir, const char *prefix, const char *what, const char *idx,
                     char *out)
{
    char kind[32];
    snprintf(kind, sizeof kind, "%s-%s", what, idx);
    for (int i = 0; i < 2; i++)
        if (join(out, idx_patterns[i], dir, prefix, kind) && exd_file_exists(out))
            return true;
    for (int i = 0; i < 2; i++) {
        int r = snprintf(out, PATH_CAP, idx_dotted[i], dir, prefix, what, idx);
        if (r > 0 && r < PATH_CAP && exd_file_exists(out))
            return true;
    }
    return false;
}

static ex_status load_idx(const char *dir, const char *name, ex_data_split split, ex_dataset **out,
                          char *msg, size_t len)
{
    const char *prefix = split == EX_SPLIT_TRAIN ? "train" : "t10k";
    char images[PATH_CAP], labels[PATH_CAP];
    if (!find_idx(dir, prefix, "images", "idx3", images))
        return exd_fail(msg, len, EX_ERR_IO, "%s: no %s-images-idx3-ubyte[.gz] for %s", dir, prefix,
                        name);
    if (!find_idx(dir, prefix, "labels", "idx1", labels))
        return exd_fail(msg, len, EX_ERR_IO, "%s: no %s-labels-idx1-ubyte[.gz] for %s", dir, prefix,
                        name);
    return exd_idx_load(images, labels, name, out, msg, len);
}

/* CIFAR-10's files lie in dir itself or in the folder its archive unpacks to. */
static bool cifar_folder(const char *dir, char *out)
{
    static const char *const where[] = {"%s%s%s", "%s/cifar-10-batches-bin%s%s"};
    char probe[PATH_CAP];
    for (int i = 0; i < 2; i++) {
        if (!join(out, where[i], dir, "", ""))
            continue;
        if ((join(probe, "%s/%s%s", out, "data_batch_1.bin", "") && exd_file_exists(probe)) ||
            (join(probe, "%s/%s%s", out, "test_batch.bin", "") && exd_file_exists(probe)))
            return true;
    }
    return false;
}

static ex_status load_cifar(const char *dir, ex_data_split split, ex_dataset **out, char *msg,
                            size_t len)
{
    char folder[PATH_CAP];
    if (!cifar_folder(dir, folder))
        return exd_fail(msg, len, EX_ERR_IO,
                        "%s: no CIFAR-10 binary files (data_batch_1.bin, test_batch.bin) here or "
                        "in cifar-10-batches-bin/",
                        dir);
    static const char *const train[] = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                                        "data_batch_4.bin", "data_batch_5.bin"};
    static const char *const test[] = {"test_batch.bin"};
    const char *const *names = split == EX_SPLIT_TRAIN ? train : test;
    int files = split == EX_SPLIT_TRAIN ? 5 : 1;
    char paths[5][PATH_CAP];
    const char *ptrs[5];
    for (int f = 0; f < files; f++) {
        if (!join(paths[f], "%s/%s%s", folder, names[f], ""))
            return exd_fail(msg, len, EX_ERR_ARG, "%s: path too long", dir);
        ptrs[f] = paths[f];
    }
    return exd_cifar_load(ptrs, files, out, msg, len);
}

/* Fashion-MNIST's mean pixel is 0.286 and MNIST's 0.131 (both splits); halfway between
 * tells them apart whatever the folder is called. */
#define EXD_FASHION_MEAN_MIN 0.2

/* Names an IDX set that was loaded as "auto" by its pixels (a copied or renamed folder
 * must not change the normalization its images get). */
static void name_by_pixels(ex_dataset *ds)
{
    exd_storage *st = ds->st;
    if (st->type != EX_PIXEL_U8 || st->n == 0)
        return;
    const uint8_t *p = st->pixels;
    size_t count = (size_t)st->n * st->sample;
    uint64_t sum = 0;
    for (size_t i = 0; i < count; i++)
        sum += p[i];
    double mean = (double)sum / (255.0 * (double)count);
    snprintf(st->name, sizeof st->name, "%s",
             mean >= EXD_FASHION_MEAN_MIN ? "fashion-mnist" : "mnist");
}

ex_status ex_dataset_load(const char *dir, const char *name, ex_data_split split, ex_dataset **out,
                          char *msg, size_t msg_len)
{
    if (msg && msg_len)
        msg[0] = '\0';
    if (!out)
        return exd_fail(msg, msg_len, EX_ERR_ARG, "ex_dataset_load: out is NULL");
    *out = NULL;
    if (!dir || !*dir)
        dir = EX_DATA_DEFAULT_DIR;
    if (!name)
        name = "auto";
    if (split != EX_SPLIT_TRAIN && split != EX_SPLIT_TEST)
        return exd_fail(msg, msg_len, EX_ERR_ARG, "ex_dataset_load: unknown split %d", (int)split);
    if (strlen(dir) > PATH_CAP - 64)
        return exd_fail(msg, msg_len, EX_ERR_ARG, "ex_dataset_load: folder name too long");
    char probe[PATH_CAP];
    if (!strcmp(name, "auto") && cifar_folder(dir, probe))
        name = "cifar10";
    if (!strcmp(name, "cifar10"))
        return load_cifar(dir, split, out, msg, msg_len);
    if (!strcmp(name, "auto")) {
        ex_status st = load_idx(dir, "auto", split, out, msg, msg_len);
        if (st == EX_OK)
            name_by_pixels(*out);
        return st;
    }
    if (!strcmp(name, "fashion-mnist") || !strcmp(name, "mnist"))
        return load_idx(dir, name, split, out, msg, msg_len);
    return exd_fail(msg, msg_len, EX_ERR_ARG,
                    "ex_dataset_load: unknown dataset '%s' (fashion-mnist, mnist, cifar10, auto)",
                    name);
}
