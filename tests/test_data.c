/* The dataset layer: IDX and CIFAR-10 readers on generated files, every kind of broken file,
 * in-memory datasets, splits, normalization, augmentation on known images, the loader's
 * determinism and resume, and the real Fashion-MNIST of Debian's dataset-fashion-mnist. */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <zlib.h>

#include "data/internal.h"
#include "exapt/exapt.h"

static char root[256];

/* ---- files ---- */

static void path_in(char *out, const char *dir, const char *name)
{
    int r = snprintf(out, 512, "%s/%s", dir, name);
    assert_true(r > 0 && r < 512);
}

static void make_dir(char *out, const char *name)
{
    path_in(out, root, name);
    assert_int_equal(mkdir(out, 0700), 0);
}

static void write_file(const char *dir, const char *name, const uint8_t *p, size_t n, bool gz)
{
    char path[512];
    path_in(path, dir, name);
    if (gz) {
        gzFile f = gzopen(path, "wb");
        assert_non_null(f);
        if (n)
            assert_int_equal(gzwrite(f, p, (unsigned)n), (int)n);
        assert_int_equal(gzclose(f), Z_OK);
        return;
    }
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n)
        assert_int_equal(fwrite(p, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static uint8_t *read_back(const char *dir, const char *name, size_t *n)
{
    char path[512];
    path_in(path, dir, name);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static uint8_t buf[1 << 16];
    *n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    return buf;
}

/* An IDX file of unsigned bytes: header from dims, then `data` (n bytes). */
static size_t idx_bytes(uint8_t *out, int ndim, const uint32_t *dims, const uint8_t *data, size_t n)
{
    out[0] = out[1] = 0;
    out[2] = 0x08;
    out[3] = (uint8_t)ndim;
    for (int i = 0; i < ndim; i++)
        for (int b = 0; b < 4; b++)
            out[4 + 4 * i + b] = (uint8_t)(dims[i] >> (24 - 8 * b));
    memcpy(out + 4 + 4 * ndim, data, n);
    return 4 + 4 * (size_t)ndim + n;
}

static uint8_t image_pixel(int i, int y, int x)
{
    return (uint8_t)(i * 31 + y * 7 + x + 1);
}

/* n images of h x w with image_pixel values, labels i % 10, written raw or gzipped. */
static void write_idx_set(const char *dir, const char *prefix, int n, int h, int w, bool gz_img,
                          bool gz_lab)
{
    uint8_t data[4096], file[4096 + 16], labels[256];
    for (int i = 0; i < n; i++) {
        labels[i] = (uint8_t)(i % 10);
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++)
                data[(i * h + y) * w + x] = image_pixel(i, y, x);
    }
    char name[128];
    uint32_t dims[3] = {(uint32_t)n, (uint32_t)h, (uint32_t)w};
    size_t k = idx_bytes(file, 3, dims, data, (size_t)n * h * w);
    snprintf(name, sizeof name, "%s-images-idx3-ubyte%s", prefix, gz_img ? ".gz" : "");
    write_file(dir, name, file, k, gz_img);
    k = idx_bytes(file, 1, dims, labels, (size_t)n);
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte%s", prefix, gz_lab ? ".gz" : "");
    write_file(dir, name, file, k, gz_lab);
}

static void check_idx_set(const ex_dataset *ds, int n, int h, int w)
{
    assert_int_equal(ex_dataset_count(ds), n);
    assert_int_equal(ex_dataset_channels(ds), 1);
    assert_int_equal(ex_dataset_height(ds), h);
    assert_int_equal(ex_dataset_width(ds), w);
    assert_int_equal(ex_dataset_classes(ds), 10);
    assert_int_equal(ex_dataset_pixel_type(ds), EX_PIXEL_U8);
    float img[64];
    for (int i = 0; i < n; i++) {
        int32_t label = -1;
        assert_int_equal(ex_dataset_sample(ds, i, img, &label), EX_OK);
        assert_int_equal(label, i % 10);
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++)
                assert_true(img[y * w + x] == (float)image_pixel(i, y, x) / 255.0f);
    }
    assert_int_equal(ex_dataset_sample(ds, n, img, NULL), EX_ERR_ARG);
    assert_int_equal(ex_dataset_sample(ds, -1, img, NULL), EX_ERR_ARG);
}

static ex_dataset *load_ok(const char *dir, const char *name, ex_data_split split)
{
    char msg[512];
    ex_dataset *ds = NULL;
    ex_status st = ex_dataset_load(dir, name, split, &ds, msg, sizeof msg);
    if (st != EX_OK)
        fail_msg("load %s from %s: %s", name ? name : "(auto)", dir, msg);
    assert_non_null(ds);
    assert_string_equal(msg, "");
    return ds;
}

static void idx_raw_and_gzip(void **state)
{
    (void)state;
    char dir[512];
    make_dir(dir, "idx");
    write_idx_set(dir, "train", 5, 3, 4, false, true);
    write_idx_set(dir, "t10k", 3, 3, 4, true, false);
    ex_dataset *train = load_ok(dir, "mnist", EX_SPLIT_TRAIN);
    check_idx_set(train, 5, 3, 4);
    assert_string_equal(ex_dataset_name(train), "mnist");
    ex_dataset *test = load_ok(dir, "fashion-mnist", EX_SPLIT_TEST);
    check_idx_set(test, 3, 3, 4);
    assert_string_equal(ex_dataset_name(test), "fashion-mnist");
    ex_dataset_free(train);
    ex_dataset_free(test);

    /* the dotted names some mirrors unpack to */
    char dotted[512];
    make_dir(dotted, "dotted");
    uint8_t file[256], data[2 * 2 * 2] = {1, 2, 3, 4, 5, 6, 7, 8}, labels[2] = {3, 7};
    uint32_t dims[3] = {2, 2, 2};
    write_file(dotted, "train-images.idx3-ubyte", file, idx_bytes(file, 3, dims, data, 8), false);
    write_file(dotted, "train-labels.idx1-ubyte", file, idx_bytes(file, 1, dims, labels, 2), false);
    ex_dataset *ds = load_ok(dotted, "mnist", EX_SPLIT_TRAIN);
    int32_t label;
    float img[4];
    assert_int_equal(ex_dataset_sample(ds, 1, img, &label), EX_OK);
    assert_int_equal(label, 7);
    assert_true(img[3] == 8.0f / 255.0f);
    ex_dataset_free(ds);
}

/* ---- CIFAR-10 ---- */

static uint8_t cifar_pixel(int record, int k)
{
    return (uint8_t)(record * 13 + k * 3 + k / 1024);
}

static void write_cifar_file(const char *dir, const char *name, int first, int n)
{
    size_t rec = 3073;
    uint8_t *buf = malloc(rec * (size_t)n);
    assert_non_null(buf);
    for (int r = 0; r < n; r++) {
        buf[r * rec] = (uint8_t)((first + r) % 10);
        for (int k = 0; k < 3072; k++)
            buf[r * rec + 1 + k] = cifar_pixel(first + r, k);
    }
    write_file(dir, name, buf, rec * (size_t)n, false);
    free(buf);
}

static void write_cifar(const char *dir)
{
    static const int per_file[5] = {1, 2, 1, 2, 1};
    int first = 0;
    for (int f = 0; f < 5; f++) {
        char name[64];
        snprintf(name, sizeof name, "data_batch_%d.bin", f + 1);
        write_cifar_file(dir, name, first, per_file[f]);
        first += per_file[f];
    }
    write_cifar_file(dir, "test_batch.bin", 100, 3);
}

static void check_cifar(const ex_dataset *ds, int first, int n)
{
    assert_int_equal(ex_dataset_count(ds), n);
    assert_int_equal(ex_dataset_channels(ds), 3);
    assert_int_equal(ex_dataset_height(ds), 32);
    assert_int_equal(ex_dataset_width(ds), 32);
    assert_int_equal(ex_dataset_classes(ds), 10);
    assert_string_equal(ex_dataset_name(ds), "cifar10");
    float img[3072];
    for (int i = 0; i < n; i++) {
        int32_t label;
        assert_int_equal(ex_dataset_sample(ds, i, img, &label), EX_OK);
        assert_int_equal(label, (first + i) % 10);
        for (int k = 0; k < 3072; k++)
            assert_true(img[k] == (float)cifar_pixel(first + i, k) / 255.0f);
    }
}

static void cifar_files(void **state)
{
    (void)state;
    char dir[512], sub[512];
    make_dir(dir, "cifar");
    path_in(sub, dir, "cifar-10-batches-bin");
    assert_int_equal(mkdir(sub, 0700), 0);
    write_cifar(sub);
    ex_dataset *train = load_ok(dir, "cifar10", EX_SPLIT_TRAIN);
    check_cifar(train, 0, 7);
    ex_dataset *test = load_ok(sub, "auto", EX_SPLIT_TEST);
    check_cifar(test, 100, 3);
    ex_dataset_free(train);
    ex_dataset_free(test);
}

/* n images of h x w, every pixel `value`, labels i % 10. */
static void write_idx_flat(const char *dir, const char *prefix, int n, int h, int w, uint8_t value)
{
    uint8_t data[4096], file[4096 + 16], labels[256];
    memset(data, value, (size_t)n * h * w);
    for (int i = 0; i < n; i++)
        labels[i] = (uint8_t)(i % 10);
    char name[128];
    uint32_t dims[3] = {(uint32_t)n, (uint32_t)h, (uint32_t)w};
    size_t k = idx_bytes(file, 3, dims, data, (size_t)n * h * w);
    snprintf(name, sizeof name, "%s-images-idx3-ubyte", prefix);
    write_file(dir, name, file, k, false);
    k = idx_bytes(file, 1, dims, labels, (size_t)n);
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte", prefix);
    write_file(dir, name, file, k, false);
}

/* "auto" names an IDX set by its mean pixel (Fashion-MNIST 0.286, MNIST 0.131), never by
 * its folder's name: a copied or renamed folder keeps its normalization. */
static void auto_detection(void **state)
{
    (void)state;
    char fashion[512], digits[512], empty[512], msg[256];
    make_dir(fashion, "My-FashionMNIST");
    write_idx_flat(fashion, "t10k", 2, 2, 2, 30); /* mean 0.118: digits, whatever the name */
    make_dir(digits, "digits");
    write_idx_flat(digits, "t10k", 2, 2, 2, 60); /* mean 0.235 */
    ex_dataset *a = load_ok(fashion, "auto", EX_SPLIT_TEST);
    assert_string_equal(ex_dataset_name(a), "mnist");
    ex_dataset *b = load_ok(digits, NULL, EX_SPLIT_TEST);
    assert_string_equal(ex_dataset_name(b), "fashion-mnist");
    ex_dataset *c = load_ok(fashion, "fashion-mnist", EX_SPLIT_TEST); /* a name is obeyed */
    assert_string_equal(ex_dataset_name(c), "fashion-mnist");
    ex_dataset_free(a);
    ex_dataset_free(b);
    ex_dataset_free(c);

    make_dir(empty, "empty");
    ex_dataset *ds = (ex_dataset *)&msg; /* must be overwritten with NULL */
    assert_int_equal(ex_dataset_load(empty, "auto", EX_SPLIT_TRAIN, &ds, msg, sizeof msg),
                     EX_ERR_IO);
    assert_null(ds);
    assert_non_null(strstr(msg, "train-images-idx3-ubyte"));
    assert_int_equal(ex_dataset_load(empty, "imagenet", EX_SPLIT_TRAIN, &ds, msg, sizeof msg),
                     EX_ERR_ARG);
    assert_non_null(strstr(msg, "imagenet"));
    assert_int_equal(ex_dataset_load(empty, "cifar10", EX_SPLIT_TRAIN, &ds, msg, sizeof msg),
                     EX_ERR_IO);
    assert_int_equal(ex_dataset_load(empty, "mnist", (ex_data_split)7, &ds, msg, sizeof msg),
                     EX_ERR_ARG);
    assert_int_equal(ex_dataset_load(empty, "mnist", EX_SPLIT_TRAIN, NULL, NULL, 0), EX_ERR_ARG);
}

/* ---- broken files ---- */

typedef struct broken {
    const char *what;
    ex_status status;
    const char *file; /* the file the message must name */
    const char *says; /* and a phrase it must hold */
} broken;

static int case_id;

/* Writes images and labels (NULL: leave the file out) into a fresh folder and expects the
 * load to fail as b says, with *out NULL. */
static void expect_broken(const uint8_t *img, size_t ni, bool gz_img, const uint8_t *lab, size_t nl,
                          const broken *b)
{
    char dir[512], name[64], msg[512];
    snprintf(name, sizeof name, "broken%d", case_id++);
    make_dir(dir, name);
    if (img)
        write_file(dir, gz_img ? "train-images-idx3-ubyte.gz" : "train-images-idx3-ubyte", img, ni,
                   gz_img);
    if (lab)
        write_file(dir, "train-labels-idx1-ubyte", lab, nl, false);
    ex_dataset *ds = (ex_dataset *)&msg;
    msg[0] = '\0';
    ex_status st = ex_dataset_load(dir, "mnist", EX_SPLIT_TRAIN, &ds, msg, sizeof msg);
    if (st != b->status || !strstr(msg, b->file) || !strstr(msg, b->says))
        fail_msg("%s: got %s \"%s\", expected %s naming %s and saying \"%s\"", b->what,
                 ex_status_str(st), msg, ex_status_str(b->status), b->file, b->says);
    assert_null(ds);
}

static size_t good_images(uint8_t *out)
{
    uint8_t data[4 * 2 * 3];
    for (int i = 0; i < 24; i++)
        data[i] = (uint8_t)(i * 9);
    uint32_t dims[3] = {4, 2, 3};
    return idx_bytes(out, 3, dims, data, sizeof data);
}

static size_t good_labels(uint8_t *out, int n, uint8_t last)
{
    uint8_t data[16] = {1, 2, 3, 4, 5, 6, 7, 8};
    data[n - 1] = last;
    uint32_t dims[1] = {(uint32_t)n};
    return idx_bytes(out, 1, dims, data, (size_t)n);
}

static void broken_idx_headers(void **state)
{
    (void)state;
    uint8_t img[256], lab[64], bad[256];
    size_t ni = good_images(img), nl = good_labels(lab, 4, 9);
    const char *I = "train-images-idx3-ubyte";

    expect_broken(img, 0, false, lab, nl, &(broken){"empty", EX_ERR_FORMAT, I, "empty file"});
    expect_broken(img, 3, false, lab, nl,
                  &(broken){"short magic", EX_ERR_FORMAT, I, "truncated header"});
    expect_broken(img, 9, false, lab, nl,
                  &(broken){"short dims", EX_ERR_FORMAT, I, "truncated header"});

    memcpy(bad, img, ni);
    bad[1] = 0x01;
    expect_broken(bad, ni, false, lab, nl, &(broken){"magic", EX_ERR_FORMAT, I, "not an IDX"});
    memcpy(bad, img, ni);
    bad[2] = 0x0D;
    expect_broken(bad, ni, false, lab, nl,
                  &(broken){"float type", EX_ERR_FORMAT, I, "32-bit floats"});
    bad[2] = 0x42;
    expect_broken(bad, ni, false, lab, nl,
                  &(broken){"unknown type", EX_ERR_FORMAT, I, "unknown IDX element type"});
    /* a label file where the images belong */
    expect_broken(lab, nl, false, lab, nl,
                  &(broken){"ndim", EX_ERR_FORMAT, I, "has 1 dimensions, expected 3"});
}

static void broken_idx_sizes(void **state)
{
    (void)state;
    uint8_t img[256], lab[64], bad[256];
    size_t ni = good_images(img), nl = good_labels(lab, 4, 9);
    const char *I = "train-images-idx3-ubyte", *L = "train-labels-idx1-ubyte";

    expect_broken(img, ni - 5, false, lab, nl,
                  &(broken){"short data", EX_ERR_FORMAT, I, "truncated data"});
    memcpy(bad, img, ni);
    bad[ni] = 7;
    expect_broken(bad, ni + 1, false, lab, nl,
                  &(broken){"trailing", EX_ERR_FORMAT, I, "trailing bytes"});
    uint32_t huge[3] = {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu};
    size_t nb = idx_bytes(bad, 3, huge, img + 16, 24);
    expect_broken(bad, nb, false, lab, nl, &(broken){"overflow", EX_ERR_FORMAT, I, "overflow"});
    /* 2^44 bytes promised, 24 present: refused without allocating what the header says */
    uint32_t big[3] = {1u << 28, 256, 256};
    nb = idx_bytes(bad, 3, big, img + 16, 24);
    expect_broken(bad, nb, false, lab, nl,
                  &(broken){"lying dims", EX_ERR_FORMAT, I, "truncated data"});
    uint32_t zero[3] = {4, 0, 3};
    nb = idx_bytes(bad, 3, zero, img + 16, 0);
    expect_broken(bad, nb, false, lab, nl, &(broken){"zero dim", EX_ERR_FORMAT, I, "is zero"});

    nl = good_labels(lab, 3, 2);
    expect_broken(img, ni, false, lab, nl,
                  &(broken){"count mismatch", EX_ERR_FORMAT, L, "holds 4 images but"});
    nl = good_labels(lab, 4, 10);
    expect_broken(img, ni, false, lab, nl,
                  &(broken){"label >= classes", EX_ERR_FORMAT, L, "label 10 of sample 3"});
    nl = good_labels(lab, 4, 9);
    expect_broken(img, ni, false, NULL, 0,
                  &(broken){"missing labels", EX_ERR_IO, "train-labels-idx1-ubyte", "no "});
    expect_broken(NULL, 0, false, lab, nl,
                  &(broken){"missing images", EX_ERR_IO, "train-images-idx3-ubyte", "no "});
}

static void broken_idx_files(void **state)
{
    (void)state;
    uint8_t img[256], lab[64], bad[1024];
    size_t ni = good_images(img), nl = good_labels(lab, 4, 9);
    const char *G = "train-images-idx3-ubyte.gz";

    /* a gzip stream cut short, and one whose checksum is wrong */
    char dir[512];
    make_dir(dir, "gz");
    write_file(dir, "x.gz", img, ni, true);
    size_t nz;
    const uint8_t *z = read_back(dir, "x.gz", &nz);
    memcpy(bad, z, nz);
    expect_broken(bad, nz - 12, false, lab, nl,
                  &(broken){"cut gzip", EX_ERR_FORMAT, "train-images-idx3-ubyte", "gzip"});
    bad[nz - 8] ^= 0x55;
    expect_broken(bad, nz, false, lab, nl,
                  &(broken){"gzip crc", EX_ERR_FORMAT, "train-images-idx3-ubyte", "corrupt gzip"});
    /* the same checks pass through gzip: a truncated payload in a good stream */
    expect_broken(img, ni - 1, true, lab, nl,
                  &(broken){"gzipped short data", EX_ERR_FORMAT, G, "truncated data"});

    /* a folder where a file should be */
    char dir2[512], sub[512];
    make_dir(dir2, "folder-as-file");
    path_in(sub, dir2, "train-images-idx3-ubyte");
    assert_int_equal(mkdir(sub, 0700), 0);
    write_file(dir2, "train-labels-idx1-ubyte", lab, nl, false);
    char msg[512];
    ex_dataset *ds = NULL;
    assert_int_equal(ex_dataset_load(dir2, "mnist", EX_SPLIT_TRAIN, &ds, msg, sizeof msg),
                     EX_ERR_IO);
    assert_non_null(strstr(msg, "train-images-idx3-ubyte"));
    assert_null(ds);
    /* a folder that does not exist */
    assert_int_equal(
        ex_dataset_load("/nonexistent/exapt", "mnist", EX_SPLIT_TRAIN, &ds, msg, sizeof msg),
        EX_ERR_IO);
    assert_non_null(strstr(msg, "/nonexistent/exapt"));
    /* the reader itself, on a path that is not there */
    exd_idx idx;
    assert_int_equal(exd_idx_read("/nonexistent/file", 3, &idx, msg, sizeof msg), EX_ERR_IO);
    assert_non_null(strstr(msg, "/nonexistent/file"));
    assert_null(idx.data);
}

static void expect_cifar_broken(const char *what, void (*spoil)(const char *dir), ex_status want,
                                const char *file, const char *says)
{
    char dir[512], name[64], msg[512];
    snprintf(name, sizeof name, "cifar-broken%d", case_id++);
    make_dir(dir, name);
    write_cifar(dir);
    spoil(dir);
    ex_dataset *ds = (ex_dataset *)&msg;
    ex_status st = ex_dataset_load(dir, "cifar10", EX_SPLIT_TRAIN, &ds, msg, sizeof msg);
    if (st != want || !strstr(msg, file) || !strstr(msg, says))
        fail_msg("%s: got %s \"%s\"", what, ex_status_str(st), msg);
    assert_null(ds);
}

static void spoil_size(const char *dir)
{
    uint8_t junk[3073 + 5] = {1};
    write_file(dir, "data_batch_2.bin", junk, sizeof junk, false);
}

static void spoil_label(const char *dir)
{
    uint8_t rec[2 * 3073] = {3};
    rec[3073] = 10;
    write_file(dir, "data_batch_4.bin", rec, sizeof rec, false);
}

static void spoil_empty(const char *dir)
{
    write_file(dir, "data_batch_5.bin", NULL, 0, false);
}

static void spoil_missing(const char *dir)
{
    char path[512];
    path_in(path, dir, "data_batch_3.bin");
    assert_int_equal(unlink(path), 0);
}

static void broken_cifar(void **state)
{
    (void)state;
    expect_cifar_broken("size", spoil_size, EX_ERR_FORMAT, "data_batch_2.bin", "whole number");
    expect_cifar_broken("label", spoil_label, EX_ERR_FORMAT, "data_batch_4.bin",
                        "label 10 of record 1");
    expect_cifar_broken("empty", spoil_empty, EX_ERR_FORMAT, "data_batch_5.bin", "empty");
    expect_cifar_broken("missing", spoil_missing, EX_ERR_IO, "data_batch_3.bin", "cannot open");
}

/* ---- in-memory datasets and splits ---- */

static ex_dataset *memory_set(int n, int c, int h, int w, int classes)
{
    uint8_t px[4096];
    int32_t labels[256];
    int sample = c * h * w;
    for (int i = 0; i < n; i++) {
        labels[i] = i % classes;
        for (int k = 0; k < sample; k++)
            px[i * sample + k] = (uint8_t)(i * 10 + k);
    }
    ex_dataset *ds = NULL;
    char msg[256];
    assert_int_equal(
        ex_dataset_from_memory(px, EX_PIXEL_U8, n, c, h, w, labels, classes, &ds, msg, sizeof msg),
        EX_OK);
    return ds;
}

static void from_memory(void **state)
{
    (void)state;
    float f[2 * 2 * 3] = {0.5f, -1.0f, 2.0f, 0.0f, 1.0f, 3.5f, 7.0f, 8.0f, 9.0f, 10.f, 11.f, 12.f};
    int32_t labels[2] = {1, 0};
    ex_dataset *ds = NULL;
    char msg[256];
    assert_int_equal(
        ex_dataset_from_memory(f, EX_PIXEL_F32, 2, 2, 1, 3, labels, 2, &ds, msg, sizeof msg),
        EX_OK);
    f[0] = 99.0f; /* copied: the caller's buffer is the caller's */
    float img[6];
    int32_t label;
    assert_int_equal(ex_dataset_sample(ds, 0, img, &label), EX_OK);
    assert_true(img[0] == 0.5f && img[5] == 3.5f);
    assert_int_equal(label, 1);
    assert_string_equal(ex_dataset_name(ds), "memory");
    assert_int_equal(ex_dataset_pixel_type(ds), EX_PIXEL_F32);
    ex_dataset_free(ds);

    f[3] = NAN;
    ex_dataset *none = (ex_dataset *)&msg;
    assert_int_equal(
        ex_dataset_from_memory(f, EX_PIXEL_F32, 2, 2, 1, 3, labels, 2, &none, msg, sizeof msg),
        EX_ERR_NONFINITE);
    assert_null(none);
    f[3] = 0;
    assert_int_equal(
        ex_dataset_from_memory(NULL, EX_PIXEL_F32, 2, 2, 1, 3, labels, 2, &none, msg, sizeof msg),
        EX_ERR_ARG);
    assert_int_equal(
        ex_dataset_from_memory(f, EX_PIXEL_F32, 0, 2, 1, 3, labels, 2, &none, msg, sizeof msg),
        EX_ERR_ARG);
    assert_int_equal(
        ex_dataset_from_memory(f, EX_PIXEL_F32, 2, 2, 1, 3, labels, 1, &none, msg, sizeof msg),
        EX_ERR_ARG);
    assert_non_null(strstr(msg, "label 1 of sample 0"));
    labels[1] = -1;
    assert_int_equal(
        ex_dataset_from_memory(f, EX_PIXEL_F32, 2, 2, 1, 3, labels, 2, &none, msg, sizeof msg),
        EX_ERR_ARG);
    labels[1] = 0;
    assert_int_equal(
        ex_dataset_from_memory(f, (ex_pixel_type)9, 2, 2, 1, 3, labels, 2, &none, msg, sizeof msg),
        EX_ERR_ARG);
    /* sizes whose product overflows are refused before anything is read */
    assert_int_equal(ex_dataset_from_memory(f, EX_PIXEL_U8, INT64_MAX / 2, 65536, 65536, 65536,
                                            labels, 2, &none, msg, sizeof msg),
                     EX_ERR_ARG);
    assert_non_null(strstr(msg, "overflow"));
    assert_null(none);
    assert_int_equal(ex_dataset_count(NULL), 0);
    assert_null(ex_dataset_name(NULL));
    ex_dataset_free(NULL);
}

static void check_range(const ex_dataset *part, const ex_dataset *whole, int64_t from)
{
    float a[16], b[16];
    int32_t la, lb;
    for (int64_t i = 0; i < ex_dataset_count(part); i++) {
        assert_int_equal(ex_dataset_sample(part, i, a, &la), EX_OK);
        assert_int_equal(ex_dataset_sample(whole, from + i, b, &lb), EX_OK);
        assert_int_equal(la, lb);
        assert_memory_equal(a, b, 4 * sizeof(float));
    }
}

static void split(void **state)
{
    (void)state;
    ex_dataset *ds = memory_set(10, 1, 2, 2, 3), *copy = memory_set(10, 1, 2, 2, 3);
    ex_dataset *tr, *va, *x, *y;
    char msg[256];
    assert_int_equal(ex_dataset_split(ds, 0.7, &tr, &va, msg, sizeof msg), EX_OK);
    assert_int_equal(ex_dataset_count(tr), 7);
    assert_int_equal(ex_dataset_count(va), 3);
    assert_string_equal(ex_dataset_name(va), "memory");
    assert_int_equal(ex_dataset_classes(va), 3);
    /* the parent goes first: the views keep the storage alive */
    ex_dataset_free(ds);
    check_range(tr, copy, 0);
    check_range(va, copy, 7);
    /* splits of splits compose: floor(0.5 * 7) = 3 */
    assert_int_equal(ex_dataset_split(tr, 0.5, &x, &y, msg, sizeof msg), EX_OK);
    assert_int_equal(ex_dataset_count(x), 3);
    assert_int_equal(ex_dataset_count(y), 4);
    check_range(y, copy, 3);
    ex_dataset_free(tr);
    check_range(x, copy, 0);

    const double bad[] = {0.0, 1.0, -0.5, 1.5, NAN, 0.3};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ex_dataset *p = (ex_dataset *)&msg, *q = (ex_dataset *)&msg;
        assert_int_equal(ex_dataset_split(va, bad[i], &p, &q, msg, sizeof msg), EX_ERR_ARG);
        assert_null(p);
        assert_null(q);
        assert_true(msg[0] != '\0');
    }
    ex_dataset *p, *q;
    assert_int_equal(ex_dataset_split(NULL, 0.5, &p, &q, msg, sizeof msg), EX_ERR_ARG);
    assert_int_equal(ex_dataset_split(va, 0.5, NULL, &q, msg, sizeof msg), EX_ERR_ARG);
    assert_null(q);

    /* a loader over a split sees only that split's samples */
    ex_loader_opts o;
    ex_loader_opts_default(&o, va, true);
    o.batch = 3;
    ex_loader *l;
    assert_int_equal(ex_loader_new(va, &o, &l, msg, sizeof msg), EX_OK);
    ex_dataset_free(va);
    float img[12];
    int32_t lab[3];
    int count;
    assert_int_equal(ex_loader_next(l, img, lab, &count), EX_OK);
    assert_int_equal(count, 3);
    int seen = 0;
    for (int j = 0; j < 3; j++) {
        int id = (int)lrintf(img[j * 4] * 255.0f) / 10; /* pixel 0 of sample i is 10 i */
        assert_true(id >= 7 && id <= 9);
        assert_int_equal(lab[j], id % 3);
        seen |= 1 << (id - 7);
    }
    assert_int_equal(seen, 7);
    ex_loader_free(l);
    ex_dataset_free(x);
    ex_dataset_free(y);
    ex_dataset_free(copy);
}

/* ---- normalization ---- */

static void normalization(void **state)
{
    (void)state;
    /* channel 0 holds 0, 255, 51, 102 (0, 1, 0.2, 0.4): mean 0.4, std sqrt(0.14);
     * channel 1 is constant */
    uint8_t px[2 * 2 * 1 * 2] = {0, 255, 255, 255, 51, 102, 255, 255};
    int32_t labels[2] = {0, 1};
    ex_dataset *ds;
    char msg[256];
    assert_int_equal(
        ex_dataset_from_memory(px, EX_PIXEL_U8, 2, 2, 1, 2, labels, 2, &ds, msg, sizeof msg),
        EX_OK);
    ex_normalize nz;
    assert_int_equal(ex_dataset_normalization(ds, &nz, msg, sizeof msg), EX_OK);
    assert_true(nz.enabled);
    assert_float_equal(nz.mean[0], 0.4f, 1e-6f);
    assert_float_equal(nz.std[0], sqrtf(0.14f), 1e-6f);
    assert_float_equal(nz.mean[1], 1.0f, 1e-6f);
    assert_float_equal(nz.std[1], 0.0f, 1e-6f);

    /* a constant channel cannot be normalized */
    ex_loader_opts o = {.size = sizeof(ex_loader_opts), .batch = 2, .normalize = nz};
    ex_loader *l = (ex_loader *)&msg;
    assert_int_equal(ex_loader_new(ds, &o, &l, msg, sizeof msg), EX_ERR_ARG);
    assert_null(l);
    assert_non_null(strstr(msg, "channel 1"));

    o.normalize.mean[1] = 0.5f;
    o.normalize.std[1] = 0.25f;
    assert_int_equal(ex_loader_new(ds, &o, &l, msg, sizeof msg), EX_OK);
    float img[8];
    int32_t lab[2];
    int count;
    assert_int_equal(ex_loader_next(l, img, lab, &count), EX_OK);
    assert_int_equal(count, 2);
    for (int k = 0; k < 8; k++) {
        int c = (k / 2) % 2;
        float want = ((float)px[k] / 255.0f - o.normalize.mean[c]) / o.normalize.std[c];
        assert_float_equal(img[k], want, 1e-6f);
    }
    assert_float_equal(img[0], -0.4f / sqrtf(0.14f), 1e-5f);
    assert_float_equal(img[2], 2.0f, 1e-6f);
    ex_loader_free(l);
    ex_dataset_free(ds);

    /* float pixels: 1, 2, 3, 4 in one channel, mean 2.5, std sqrt(1.25) */
    float f[4] = {1, 2, 3, 4};
    int32_t l4[4] = {0, 1, 0, 1};
    assert_int_equal(
        ex_dataset_from_memory(f, EX_PIXEL_F32, 4, 1, 1, 1, l4, 2, &ds, msg, sizeof msg), EX_OK);
    assert_int_equal(ex_dataset_normalization(ds, &nz, msg, sizeof msg), EX_OK);
    assert_float_equal(nz.mean[0], 2.5f, 1e-6f);
    assert_float_equal(nz.std[0], sqrtf(1.25f), 1e-6f);
    ex_dataset_free(ds);
}

/* ---- augmentation on a known image ---- */

#define TH 4
#define TW 5

static float known(int y, int x)
{
    return (float)(10 * y + x + 1) / 255.0f;
}

static ex_dataset *known_image(void)
{
    uint8_t px[TH * TW];
    for (int y = 0; y < TH; y++)
        for (int x = 0; x < TW; x++)
            px[y * TW + x] = (uint8_t)(10 * y + x + 1);
    int32_t label = 0;
    ex_dataset *ds;
    assert_int_equal(ex_dataset_from_memory(px, EX_PIXEL_U8, 1, 1, TH, TW, &label, 1, &ds, NULL, 0),
                     EX_OK);
    return ds;
}

/* The output pixel (y, x) for a crop at (oy, ox) of the image padded by pad, then a flip. */
static float expected(int y, int x, int pad, int oy, int ox, bool flip)
{
    int sy = y + oy - pad, sx = (flip ? TW - 1 - x : x) + ox - pad;
    return sy < 0 || sy >= TH || sx < 0 || sx >= TW ? 0.0f : known(sy, sx);
}

static void transform_known(void **state)
{
    (void)state;
    ex_dataset *ds = known_image();
    ex_normalize off = {0};
    float out[TH * TW];
    const struct {
        ex_augment a;
        exd_draws d;
    } cases[] = {
        {{0, false, 0}, {0, 0, false, 0, 0}}, {{1, false, 0}, {0, 2, false, 0, 0}},
        {{1, false, 0}, {2, 0, false, 0, 0}}, {{0, true, 0}, {0, 0, true, 0, 0}},
        {{2, true, 0}, {3, 1, true, 0, 0}},   {{2, true, 0}, {4, 4, false, 0, 0}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        exd_transform(ds, 0, &cases[c].a, &off, &cases[c].d, out);
        for (int y = 0; y < TH; y++)
            for (int x = 0; x < TW; x++)
                assert_true(out[y * TW + x] == expected(y, x, cases[c].a.crop_pad, cases[c].d.oy,
                                                        cases[c].d.ox, cases[c].d.flip));
    }
    /* spot values: oy = 0, ox = 2 of pad 1 moves the image down a row and left a column */
    exd_transform(ds, 0, &cases[1].a, &off, &cases[1].d, out);
    assert_true(out[0] == 0.0f && out[TW] == known(0, 1) && out[2 * TW - 1] == 0.0f);

    /* cutout of 2 at (1, 0): rows [0, 2), columns [0, 1); of 3 at (3, 4): rows [2, 4),
     * columns [3, 5); zero after normalization while the padding is (0 - mean) / std */
    ex_normalize nz = {.enabled = true, .mean = {0.5f}, .std = {0.25f}};
    ex_augment a = {.crop_pad = 1, .cutout = 2};
    exd_draws d = {.oy = 0, .ox = 1, .cy = 1, .cx = 0};
    exd_transform(ds, 0, &a, &nz, &d, out);
    for (int y = 0; y < TH; y++)
        for (int x = 0; x < TW; x++) {
            float v = y == 0 ? -2.0f : (known(y - 1, x) - 0.5f) / 0.25f;
            if (y < 2 && x < 1)
                v = 0.0f;
            assert_true(out[y * TW + x] == v);
        }
    a = (ex_augment){.cutout = 3};
    d = (exd_draws){.cy = 3, .cx = 4};
    exd_transform(ds, 0, &a, &off, &d, out);
    for (int y = 0; y < TH; y++)
        for (int x = 0; x < TW; x++)
            assert_true(out[y * TW + x] == (y >= 2 && x >= 3 ? 0.0f : known(y, x)));
    ex_dataset_free(ds);
}

/* Runs a one-image loader for many epochs and gives each output to `check`. */
static void many_draws(ex_augment a, int epochs, void (*check)(const float *, void *), void *arg)
{
    ex_dataset *ds = known_image();
    ex_loader_opts o = {
        .size = sizeof(ex_loader_opts), .batch = 1, .seed = 77, .augment = a, .prefetch = 2};
    ex_loader *l;
    char msg[256];
    assert_int_equal(ex_loader_new(ds, &o, &l, msg, sizeof msg), EX_OK);
    ex_dataset_free(ds);
    float out[TH * TW];
    int32_t lab;
    int count;
    for (int e = 0; e < epochs; e++) {
        assert_int_equal(ex_loader_next(l, out, &lab, &count), EX_OK);
        assert_int_equal(count, 1);
        check(out, arg);
    }
    ex_loader_free(l);
}

static bool matches(const float *out, int pad, int oy, int ox, bool flip)
{
    for (int y = 0; y < TH; y++)
        for (int x = 0; x < TW; x++)
            if (out[y * TW + x] != expected(y, x, pad, oy, ox, flip))
                return false;
    return true;
}

static void count_flips(const float *out, void *arg)
{
    int *flips = arg;
    bool plain = matches(out, 0, 0, 0, false), mirrored = matches(out, 0, 0, 0, true);
    assert_true(plain != mirrored);
    *flips += mirrored;
}

static void count_crops(const float *out, void *arg)
{
    int *seen = arg, hits = 0;
    for (int oy = 0; oy <= 4; oy++)
        for (int ox = 0; ox <= 4; ox++)
            if (matches(out, 2, oy, ox, false)) {
                seen[oy * 5 + ox]++;
                hits++;
            }
    assert_int_equal(hits, 1);
}

static void check_cutout(const float *out, void *arg)
{
    int *area = arg, zeros = 0, y0 = TH, y1 = -1, x0 = TW, x1 = -1;
    for (int y = 0; y < TH; y++)
        for (int x = 0; x < TW; x++) {
            if (out[y * TW + x] == known(y, x))
                continue;
            assert_true(out[y * TW + x] == 0.0f);
            zeros++;
            y0 = y < y0 ? y : y0, y1 = y > y1 ? y : y1;
            x0 = x < x0 ? x : x0, x1 = x > x1 ? x : x1;
        }
    /* a clipped square of side 2: a full rectangle of at most 2 x 2 */
    assert_true(zeros > 0 && y1 - y0 < 2 && x1 - x0 < 2);
    assert_int_equal(zeros, (y1 - y0 + 1) * (x1 - x0 + 1));
    area[zeros]++;
}

static void augmentation_draws(void **state)
{
    (void)state;
    int flips = 0;
    many_draws((ex_augment){.flip = true}, 400, count_flips, &flips);
    assert_in_range(flips, 150, 250);
    flips = 0;
    many_draws((ex_augment){0}, 50, count_flips, &flips);
    assert_int_equal(flips, 0);
    int seen[25] = {0};
    many_draws((ex_augment){.crop_pad = 2}, 400, count_crops, seen);
    for (int i = 0; i < 25; i++)
        assert_true(seen[i] > 0);
    int area[5] = {0};
    many_draws((ex_augment){.cutout = 2}, 200, check_cutout, area);
    assert_true(area[4] > 0 && area[2] > 0); /* inside, and clipped at an edge */
}

/* ---- loader determinism and resume ---- */

#define DN 37
#define DC 3
#define DS 8
#define DSAMPLE (DC * DS * DS)
#define DBATCH 5
#define DBATCHES 18 /* two epochs of 8 batches and two more */

typedef struct run {
    float images[DBATCHES][DBATCH * DSAMPLE];
    int32_t labels[DBATCHES][DBATCH];
    int count[DBATCHES];
    ex_loader_state after[DBATCHES];
} run;

static ex_dataset *random_set(void)
{
    static uint8_t px[DN * DSAMPLE];
    int32_t labels[DN];
    uint32_t s = 12345;
    for (size_t k = 0; k < sizeof px; k++) {
        s = s * 1664525u + 1013904223u;
        px[k] = (uint8_t)(s >> 24);
    }
    for (int i = 0; i < DN; i++)
        labels[i] = i;
    ex_dataset *ds;
    assert_int_equal(
        ex_dataset_from_memory(px, EX_PIXEL_U8, DN, DC, DS, DS, labels, DN, &ds, NULL, 0), EX_OK);
    return ds;
}

static ex_loader_opts full_opts(const ex_dataset *ds, uint64_t seed, int prefetch)
{
    ex_loader_opts o = {.size = sizeof(ex_loader_opts),
                        .batch = DBATCH,
                        .shuffle = true,
                        .seed = seed,
                        .prefetch = prefetch};
    o.augment = (ex_augment){.crop_pad = 2, .flip = true, .cutout = 4};
    assert_int_equal(ex_dataset_normalization(ds, &o.normalize, NULL, 0), EX_OK);
    return o;
}

static void collect(ex_loader *l, run *r, int from, int to)
{
    for (int b = from; b < to; b++) {
        assert_int_equal(ex_loader_next(l, r->images[b], r->labels[b], &r->count[b]), EX_OK);
        r->after[b] = ex_loader_get_state(l);
    }
}

static run *run_loader(const ex_dataset *ds, uint64_t seed, int prefetch)
{
    run *r = calloc(1, sizeof *r);
    assert_non_null(r);
    ex_loader_opts o = full_opts(ds, seed, prefetch);
    ex_loader *l;
    char msg[256];
    assert_int_equal(ex_loader_new(ds, &o, &l, msg, sizeof msg), EX_OK);
    assert_int_equal(ex_loader_batches_per_epoch(l), 8);
    assert_int_equal(ex_loader_batch_floats(l), DBATCH * DSAMPLE);
    collect(l, r, 0, DBATCHES);
    ex_loader_free(l);
    return r;
}

static void same_batches(const run *a, const run *b, int from, int to, int shift)
{
    for (int i = from; i < to; i++) {
        assert_int_equal(a->count[i + shift], b->count[i]);
        /* what lies past the count is not part of the batch */
        size_t n = (size_t)b->count[i];
        assert_memory_equal(a->labels[i + shift], b->labels[i], n * sizeof(int32_t));
        assert_memory_equal(a->images[i + shift], b->images[i], n * DSAMPLE * sizeof(float));
    }
}

/* Each epoch's labels (the sample ids) are a permutation, and epochs differ in order. */
static void check_epochs(const run *r)
{
    int order[2][DN];
    for (int e = 0; e < 2; e++) {
        int seen[DN] = {0}, k = 0;
        for (int b = 0; b < 8; b++) {
            assert_int_equal(r->count[e * 8 + b], b < 7 ? DBATCH : 2);
            assert_int_equal(r->after[e * 8 + b].epoch, b < 7 ? e : e + 1);
            assert_int_equal(r->after[e * 8 + b].position, b < 7 ? (b + 1) * DBATCH : 0);
            for (int j = 0; j < r->count[e * 8 + b]; j++) {
                seen[r->labels[e * 8 + b][j]]++;
                order[e][k++] = r->labels[e * 8 + b][j];
            }
        }
        assert_int_equal(k, DN);
        for (int i = 0; i < DN; i++)
            assert_int_equal(seen[i], 1);
    }
    assert_memory_not_equal(order[0], order[1], sizeof order[0]);
}

static void loader_determinism(void **state)
{
    (void)state;
    ex_dataset *ds = random_set();
    run *a = run_loader(ds, 1234, 3), *b = run_loader(ds, 1234, 0), *c = run_loader(ds, 1234, 1);
    check_epochs(a);
    same_batches(a, b, 0, DBATCHES, 0);
    same_batches(a, c, 0, DBATCHES, 0);
    run *other = run_loader(ds, 1235, 3);
    assert_memory_not_equal(a->labels, other->labels, sizeof a->labels);
    assert_memory_not_equal(a->images[0], other->images[0], sizeof a->images[0]);
    free(b);
    free(c);
    free(other);

    /* resume at epoch 1, position 15 (batch 3 of epoch 1 = batch 11 overall), on a loader
     * that prefetched from 0 and on one that never ran */
    char msg[256];
    run *r = calloc(1, sizeof *r);
    assert_non_null(r);
    for (int pre = 0; pre < 3; pre++) {
        ex_loader_opts o = full_opts(ds, 1234, pre);
        ex_loader *l;
        assert_int_equal(ex_loader_new(ds, &o, &l, msg, sizeof msg), EX_OK);
        if (pre == 2) /* let the thread fill the ring with batches to throw away */
            collect(l, r, 0, 5);
        assert_int_equal(ex_loader_set_state(l, (ex_loader_state){1, 15}, msg, sizeof msg), EX_OK);
        assert_int_equal(ex_loader_get_state(l).position, 15);
        collect(l, r, 0, DBATCHES - 11);
        same_batches(a, r, 0, DBATCHES - 11, 11);
        /* and back to the start */
        assert_int_equal(ex_loader_set_state(l, (ex_loader_state){0, 0}, msg, sizeof msg), EX_OK);
        collect(l, r, 0, 3);
        same_batches(a, r, 0, 3, 0);
        const ex_loader_state bad[] = {{0, 7}, {0, 37}, {0, 40}, {-1, 0}, {2, -5}};
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            assert_int_equal(ex_loader_set_state(l, bad[i], msg, sizeof msg), EX_ERR_ARG);
            assert_true(msg[0] != '\0');
        }
        assert_int_equal(ex_loader_get_state(l).position, 15); /* unchanged */
        ex_loader_free(l);
    }
    free(r);
    free(a);
    ex_dataset_free(ds);
}

/* set_state right after a batch is taken, while the thread is making the next one: what it
 * makes for the old position must never come out. */
static void loader_resume_races(void **state)
{
    (void)state;
    enum { N = 300, C = 3, S = 16, B = 32 };
    static uint8_t px[N * C * S * S];
    int32_t labels[N];
    for (size_t k = 0; k < sizeof px; k++)
        px[k] = (uint8_t)(k * 2654435761u >> 24);
    for (int i = 0; i < N; i++)
        labels[i] = i % 10;
    ex_dataset *ds;
    assert_int_equal(ex_dataset_from_memory(px, EX_PIXEL_U8, N, C, S, S, labels, 10, &ds, NULL, 0),
                     EX_OK);
    ex_loader_opts o = {
        .size = sizeof(ex_loader_opts), .batch = B, .shuffle = true, .seed = 5, .prefetch = 1};
    o.augment = (ex_augment){.crop_pad = 4, .flip = true, .cutout = 8};
    ex_loader *fast, *ref;
    assert_int_equal(ex_loader_new(ds, &o, &fast, NULL, 0), EX_OK);
    o.prefetch = 0;
    assert_int_equal(ex_loader_new(ds, &o, &ref, NULL, 0), EX_OK);
    static float a[B * C * S * S], b[B * C * S * S];
    int32_t la[B], lb[B];
    int ca, cb;
    for (int it = 0; it < 40; it++) {
        assert_int_equal(ex_loader_next(fast, a, la, &ca), EX_OK);
        ex_loader_state to = {it % 3, (it * 7 % 10) * B};
        assert_int_equal(ex_loader_set_state(fast, to, NULL, 0), EX_OK);
        assert_int_equal(ex_loader_set_state(ref, to, NULL, 0), EX_OK);
        for (int k = 0; k < 2; k++) {
            assert_int_equal(ex_loader_next(fast, a, la, &ca), EX_OK);
            assert_int_equal(ex_loader_next(ref, b, lb, &cb), EX_OK);
            assert_int_equal(ca, cb);
            assert_memory_equal(la, lb, (size_t)ca * sizeof la[0]);
            assert_memory_equal(a, b, (size_t)ca * C * S * S * sizeof a[0]);
        }
    }
    ex_loader_free(fast);
    ex_loader_free(ref);
    ex_dataset_free(ds);
}

static void loader_epochs_and_free(void **state)
{
    (void)state;
    ex_dataset *ds = random_set();
    char msg[256];
    ex_loader_opts o = full_opts(ds, 9, 2);
    o.drop_last = true;
    ex_loader *l;
    assert_int_equal(ex_loader_new(ds, &o, &l, msg, sizeof msg), EX_OK);
    ex_dataset_free(ds); /* the loader holds its own reference */
    assert_int_equal(ex_loader_batches_per_epoch(l), 7);
    static float img[DBATCH * DSAMPLE];
    int32_t lab[DBATCH];
    int count;
    for (int b = 0; b < 15; b++) {
        assert_int_equal(ex_loader_next(l, img, lab, &count), EX_OK);
        assert_int_equal(count, DBATCH);
        ex_loader_state s = ex_loader_get_state(l);
        assert_int_equal(s.epoch, (b + 1) / 7);
        assert_int_equal(s.position, (b + 1) % 7 * DBATCH);
    }
    assert_int_equal(ex_loader_set_state(l, (ex_loader_state){0, 35}, msg, sizeof msg), EX_ERR_ARG);
    ex_loader_free(l); /* mid-epoch, with the ring full */

    /* unshuffled without augmentation: dataset order, wrapping */
    ds = random_set();
    o = (ex_loader_opts){.size = sizeof(ex_loader_opts), .batch = 10, .prefetch = 1};
    assert_int_equal(ex_loader_new(ds, &o, &l, msg, sizeof msg), EX_OK);
    float big[10 * DSAMPLE], want[DSAMPLE];
    int32_t lab10[10];
    const int expect_first[5] = {0, 10, 20, 30, 0};
    for (int b = 0; b < 5; b++) {
        assert_int_equal(ex_loader_next(l, big, lab10, &count), EX_OK);
        assert_int_equal(count, b == 3 ? 7 : 10);
        assert_int_equal(lab10[0], expect_first[b]);
        assert_int_equal(ex_dataset_sample(ds, lab10[count - 1], want, NULL), EX_OK);
        assert_memory_equal(big + (size_t)(count - 1) * DSAMPLE, want, sizeof want);
    }
    ex_loader_free(l);
    /* a loader freed before its first batch */
    o.prefetch = 4;
    assert_int_equal(ex_loader_new(ds, &o, &l, msg, sizeof msg), EX_OK);
    ex_loader_free(l);
    ex_dataset_free(ds);
}

static void expect_bad_opts(const ex_dataset *ds, ex_loader_opts o, const char *says)
{
    char msg[256] = "";
    ex_loader *l = (ex_loader *)&msg;
    assert_int_equal(ex_loader_new(ds, &o, &l, msg, sizeof msg), EX_ERR_ARG);
    assert_null(l);
    if (!strstr(msg, says))
        fail_msg("message \"%s\" lacks \"%s\"", msg, says);
}

static void loader_arguments(void **state)
{
    (void)state;
    ex_dataset *ds = memory_set(7, 1, 2, 2, 2);
    ex_loader_opts good = {.size = sizeof(ex_loader_opts), .batch = 2};
    expect_bad_opts(ds, (ex_loader_opts){.size = sizeof(ex_loader_opts), .batch = 0}, "batch 0");
    expect_bad_opts(ds,
                    (ex_loader_opts){.size = sizeof(ex_loader_opts), .batch = 2, .prefetch = -1},
                    "prefetch");
    expect_bad_opts(ds,
                    (ex_loader_opts){.size = sizeof(ex_loader_opts), .batch = 2, .prefetch = 65},
                    "prefetch");
    expect_bad_opts(
        ds, (ex_loader_opts){.size = sizeof(ex_loader_opts), .batch = 2, .augment.crop_pad = -1},
        "crop_pad");
    expect_bad_opts(
        ds, (ex_loader_opts){.size = sizeof(ex_loader_opts), .batch = 2, .augment.cutout = -3},
        "cutout");
    expect_bad_opts(ds,
                    (ex_loader_opts){.size = sizeof(ex_loader_opts), .batch = 8, .drop_last = true},
                    "no full batch");
    ex_loader_opts o = good;
    o.normalize = (ex_normalize){.enabled = true, .mean = {0}, .std = {NAN}};
    expect_bad_opts(ds, o, "channel 0");
    o.normalize.std[0] = -1;
    expect_bad_opts(ds, o, "channel 0");

    ex_loader *l;
    assert_int_equal(ex_loader_new(NULL, &good, &l, NULL, 0), EX_ERR_ARG);
    assert_int_equal(ex_loader_new(ds, NULL, &l, NULL, 0), EX_ERR_ARG);
    assert_int_equal(ex_loader_new(ds, &good, NULL, NULL, 0), EX_ERR_ARG);
    assert_int_equal(ex_loader_new(ds, &good, &l, NULL, 0), EX_OK);
    float img[8];
    int32_t lab[2];
    int count;
    assert_int_equal(ex_loader_next(l, NULL, lab, &count), EX_ERR_ARG);
    assert_int_equal(ex_loader_next(l, img, NULL, &count), EX_ERR_ARG);
    assert_int_equal(ex_loader_next(l, img, lab, NULL), EX_ERR_ARG);
    assert_int_equal(ex_loader_next(NULL, img, lab, &count), EX_ERR_ARG);
    assert_int_equal(ex_loader_batches_per_epoch(l), 4);
    ex_loader_free(l);
    ex_loader_free(NULL);
    assert_int_equal(ex_loader_get_state(NULL).epoch, 0);
    assert_int_equal(ex_loader_set_state(NULL, (ex_loader_state){0, 0}, NULL, 0), EX_ERR_ARG);
    ex_dataset_free(ds);
}

static void defaults(void **state)
{
    (void)state;
    char dir[512];
    make_dir(dir, "defaults");
    write_cifar(dir);
    write_idx_set(dir, "t10k", 2, 2, 2, false, false);
    ex_dataset *cifar = load_ok(dir, "cifar10", EX_SPLIT_TEST);
    ex_dataset *mnist = load_ok(dir, "mnist", EX_SPLIT_TEST);
    ex_dataset *mem = memory_set(3, 1, 2, 2, 2);

    ex_loader_opts o;

    ex_loader_opts_default(&o, cifar, true);
    assert_true(o.shuffle && o.augment.flip && o.normalize.enabled);
    assert_int_equal(o.augment.crop_pad, 4);
    assert_int_equal(o.augment.cutout, 0);
    assert_float_equal(o.normalize.mean[2], 0.44653124f, 1e-7f);
    assert_float_equal(o.normalize.std[0], 0.24703233f, 1e-7f);
    assert_int_equal(o.batch, 64);
    ex_loader_opts_default(&o, mnist, true);
    assert_true(o.shuffle && !o.augment.flip && o.normalize.enabled);
    assert_int_equal(o.augment.crop_pad, 2);
    assert_float_equal(o.normalize.mean[0], 0.1307f, 1e-7f);
    ex_loader_opts_default(&o, mnist, false);
    assert_true(!o.shuffle && !o.augment.flip && o.normalize.enabled);
    assert_int_equal(o.augment.crop_pad, 0);
    ex_loader_opts_default(&o, mem, true);
    assert_true(o.shuffle && !o.augment.flip && !o.normalize.enabled);
    assert_int_equal(o.augment.crop_pad, 0);
    ex_dataset_free(cifar);
    ex_dataset_free(mnist);
    ex_dataset_free(mem);
}

/* ---- the real Fashion-MNIST ---- */

static ex_dataset *load_fashion(const char *dir, const char *name, ex_data_split split)
{
    char msg[512];
    ex_dataset *ds = NULL;
    if (ex_dataset_load(dir, name, split, &ds, msg, sizeof msg) != EX_OK)
        fail_msg("Fashion-MNIST is required in %s; install Debian's dataset-fashion-mnist "
                 "(apt-get install dataset-fashion-mnist): %s",
                 EX_DATA_DEFAULT_DIR, msg);
    return ds;
}

static void label_histogram(const ex_dataset *ds, int per_class)
{
    int hist[10] = {0};
    for (int64_t i = 0; i < ex_dataset_count(ds); i++) {
        int32_t label;
        assert_int_equal(ex_dataset_sample(ds, i, NULL, &label), EX_OK);
        assert_in_range(label, 0, 9);
        hist[label]++;
    }
    for (int c = 0; c < 10; c++)
        assert_int_equal(hist[c], per_class);
}

/* The real Fashion-MNIST files linked into a folder called "data" are still Fashion-MNIST. */
static void fashion_mnist_renamed(void **state)
{
    (void)state;
    char dir[512], from[512], to[512];
    make_dir(dir, "data");
    static const char *const files[] = {"t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"};
    for (int i = 0; i < 2; i++) {
        path_in(from, EX_DATA_DEFAULT_DIR, files[i]);
        path_in(to, dir, files[i]);
        assert_int_equal(symlink(from, to), 0);
    }
    ex_dataset *test = load_ok(dir, "auto", EX_SPLIT_TEST);
    assert_string_equal(ex_dataset_name(test), "fashion-mnist");
    ex_loader_opts o;
    ex_loader_opts_default(&o, test, false);
    assert_float_equal(o.normalize.mean[0], 0.2860f, 1e-6f);
    ex_dataset_free(test);
}

static void fashion_mnist(void **state)
{
    (void)state;
    ex_dataset *train = load_fashion(EX_DATA_DEFAULT_DIR, "fashion-mnist", EX_SPLIT_TRAIN);
    assert_int_equal(ex_dataset_count(train), 60000);
    assert_int_equal(ex_dataset_channels(train), 1);
    assert_int_equal(ex_dataset_height(train), 28);
    assert_int_equal(ex_dataset_width(train), 28);
    assert_int_equal(ex_dataset_classes(train), 10);
    label_histogram(train, 6000);
    /* the first training image is an ankle boot; row 14 of it, as published */
    static const uint8_t row14[28] = {0x00, 0x00, 0x01, 0x04, 0x06, 0x07, 0x02, 0x00, 0x00, 0x00,
                                      0x00, 0x00, 0xed, 0xe2, 0xd9, 0xdf, 0xde, 0xdb, 0xde, 0xdd,
                                      0xd8, 0xdf, 0xe5, 0xd7, 0xda, 0xff, 0x4d, 0x00};
    float img[28 * 28];
    int32_t label;
    assert_int_equal(ex_dataset_sample(train, 0, img, &label), EX_OK);
    assert_int_equal(label, 9);
    for (int x = 0; x < 28; x++)
        assert_true(img[14 * 28 + x] == (float)row14[x] / 255.0f);
    ex_normalize nz;
    assert_int_equal(ex_dataset_normalization(train, &nz, NULL, 0), EX_OK);
    assert_float_equal(nz.mean[0], 0.28604f, 1e-5f);
    assert_float_equal(nz.std[0], 0.35302f, 1e-5f);
    ex_loader_opts o;
    ex_loader_opts_default(&o, train, true);
    assert_float_equal(o.normalize.mean[0], nz.mean[0], 1e-4f);
    assert_float_equal(o.normalize.std[0], nz.std[0], 1e-4f);

    /* DARTS's search split, and a batch from it */
    ex_dataset *a, *b;
    assert_int_equal(ex_dataset_split(train, 0.5, &a, &b, NULL, 0), EX_OK);
    ex_dataset_free(train);
    assert_int_equal(ex_dataset_count(a), 30000);
    assert_int_equal(ex_dataset_count(b), 30000);
    ex_loader *l;
    assert_int_equal(ex_loader_new(b, &o, &l, NULL, 0), EX_OK);
    static float batch[64 * 28 * 28];
    int32_t labels[64];
    int count;
    assert_int_equal(ex_loader_next(l, batch, labels, &count), EX_OK);
    assert_int_equal(count, 64);
    double sum = 0;
    for (size_t k = 0; k < sizeof batch / sizeof batch[0]; k++) {
        assert_true(batch[k] >= -0.82f && batch[k] <= 2.03f); /* (0..1 - 0.286) / 0.353 */
        sum += batch[k];
    }
    assert_true(fabs(sum / (64 * 28 * 28)) < 0.5); /* normalized: mean near 0 */
    ex_loader_free(l);
    ex_dataset_free(a);
    ex_dataset_free(b);

    ex_dataset *test = load_fashion(NULL, "auto", EX_SPLIT_TEST);
    assert_string_equal(ex_dataset_name(test), "fashion-mnist");
    assert_int_equal(ex_dataset_count(test), 10000);
    label_histogram(test, 1000);
    static const int32_t first[12] = {9, 2, 1, 1, 6, 1, 4, 6, 5, 7, 4, 5};
    for (int i = 0; i < 12; i++) {
        assert_int_equal(ex_dataset_sample(test, i, NULL, &label), EX_OK);
        assert_int_equal(label, first[i]);
    }
    ex_dataset_free(test);
}

/* ---- main ---- */

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static int make_root(void **state)
{
    (void)state;
    snprintf(root, sizeof root, "%s/exapt-data-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    return mkdtemp(root) ? 0 : -1;
}

static int remove_root(void **state)
{
    (void)state;
    return nftw(root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(idx_raw_and_gzip),
        cmocka_unit_test(cifar_files),
        cmocka_unit_test(auto_detection),
        cmocka_unit_test(broken_idx_headers),
        cmocka_unit_test(broken_idx_sizes),
        cmocka_unit_test(broken_idx_files),
        cmocka_unit_test(broken_cifar),
        cmocka_unit_test(from_memory),
        cmocka_unit_test(split),
        cmocka_unit_test(normalization),
        cmocka_unit_test(transform_known),
        cmocka_unit_test(augmentation_draws),
        cmocka_unit_test(loader_determinism),
        cmocka_unit_test(loader_resume_races),
        cmocka_unit_test(loader_epochs_and_free),
        cmocka_unit_test(loader_arguments),
        cmocka_unit_test(defaults),
        cmocka_unit_test(fashion_mnist),
        cmocka_unit_test(fashion_mnist_renamed),
    };
    return cmocka_run_group_tests(tests, make_root, remove_root);
}
