/* Safetensors: round trips, the byte layout PyTorch expects, every class of malformed
 * file (an error with a message naming the file, nothing leaked), and crash-safe writes. */
#define _POSIX_C_SOURCE 200809L

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "exapt/safetensors.h"

/* ---- a scratch directory per test ---- */

typedef struct scratch {
    char dir[64];
    char path[128];
} scratch;

static int setup(void **state)
{
    scratch *s = calloc(1, sizeof *s);
    snprintf(s->dir, sizeof s->dir, "/tmp/exapt-st-XXXXXX");
    if (!s || !mkdtemp(s->dir))
        return -1;
    snprintf(s->path, sizeof s->path, "%s/w.safetensors", s->dir);
    *state = s;
    return 0;
}

static int teardown(void **state)
{
    scratch *s = *state;
    char p[160];
    const char *names[] = {"w.safetensors", "w.safetensors.tmp", "other", "d", "d.tmp"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        snprintf(p, sizeof p, "%s/%s", s->dir, names[i]);
        remove(p); /* files and the empty directories the tests make */
    }
    assert_int_equal(rmdir(s->dir), 0); /* fails if a test left something behind */
    free(s);
    return 0;
}

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)size + 1);
    assert_int_equal(fread(buf, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    buf[size] = 0;
    *n = (size_t)size;
    return buf;
}

static void spit(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    fclose(f);
}

/* A file with the given header text (declared length hlen, or its real length when
 * hlen is UINT64_MAX) followed by data_len bytes. */
static void raw_file(const char *path, const char *header, uint64_t hlen, size_t data_len)
{
    size_t n = strlen(header);
    if (hlen == UINT64_MAX)
        hlen = n;
    unsigned char *buf = calloc(1, 8 + n + data_len);
    for (int b = 0; b < 8; b++)
        buf[b] = (unsigned char)(hlen >> (8 * b));
    memcpy(buf + 8, header, n);
    spit(path, buf, 8 + n + data_len);
    free(buf);
}

/* ---- round trip ---- */

static const float f32[6] = {1.5f, -2.0f, 3.25f, 0.0f, -0.0f, 1e-30f};
static const int32_t i32[5] = {7, -8, 2147483647, -2147483647 - 1, 0};
static const int64_t i64[6] = {1, -1, INT64_MAX, INT64_MIN, 42, 1LL << 40};
static const float scalar = 0.125f;

/* The sample file; tests/check_safetensors.py checks the same contents from Python. */
static ex_status write_sample(const char *path, char *msg, size_t len)
{
    const ex_st_tensor t[] = {
        {"cells.0.w", EX_ST_F32, 2, {2, 3}, f32},   {"labels", EX_ST_I32, 1, {5}, i32},
        {"steps", EX_ST_I64, 4, {2, 1, 3, 1}, i64}, {"lr", EX_ST_F32, 0, {0}, &scalar},
        {"empty", EX_ST_F32, 2, {0, 4}, NULL},
    };
    const ex_st_meta m[] = {{"format", "pt"}, {"exapt.note", "grüße"}};
    return ex_safetensors_save(path, t, 5, m, 2, msg, len);
}

static void save_sample(const char *path)
{
    char msg[256];
    assert_int_equal(write_sample(path, msg, sizeof msg), EX_OK);
    assert_string_equal(msg, "");
}

static void round_trip(void **state)
{
    scratch *s = *state;
    save_sample(s->path);
    ex_safetensors *f = NULL;
    char msg[256];
    assert_int_equal(ex_safetensors_open(s->path, &f, msg, sizeof msg), EX_OK);
    assert_int_equal(ex_safetensors_count(f), 5);
    const char *order[] = {"cells.0.w", "labels", "steps", "lr", "empty"};
    for (size_t i = 0; i < 5; i++)
        assert_string_equal(ex_safetensors_name(f, i), order[i]);
    assert_null(ex_safetensors_name(f, 5));

    ex_st_info info;
    assert_int_equal(ex_safetensors_info(f, "steps", &info, msg, sizeof msg), EX_OK);
    assert_int_equal(info.dtype, EX_ST_I64);
    assert_int_equal(info.ndim, 4);
    assert_int_equal(info.shape[0], 2);
    assert_int_equal(info.shape[2], 3);
    assert_int_equal(info.nbytes, sizeof i64);
    int64_t got64[6];
    assert_int_equal(ex_safetensors_read(f, "steps", got64, sizeof got64, msg, sizeof msg), EX_OK);
    assert_memory_equal(got64, i64, sizeof i64);
    float got32[6];
    assert_int_equal(ex_safetensors_read(f, "cells.0.w", got32, sizeof got32, msg, sizeof msg),
                     EX_OK);
    assert_memory_equal(got32, f32, sizeof f32);
    int32_t goti[5];
    assert_int_equal(ex_safetensors_read(f, "labels", goti, sizeof goti, msg, sizeof msg), EX_OK);
    assert_memory_equal(goti, i32, sizeof i32);
    float s1 = 0;
    assert_int_equal(ex_safetensors_info(f, "lr", &info, msg, sizeof msg), EX_OK);
    assert_int_equal(info.ndim, 0);
    assert_int_equal(info.nbytes, 4);
    assert_int_equal(ex_safetensors_read(f, "lr", &s1, 4, msg, sizeof msg), EX_OK);
    assert_true(s1 == scalar);
    assert_int_equal(ex_safetensors_info(f, "empty", &info, msg, sizeof msg), EX_OK);
    assert_int_equal(info.nbytes, 0);
    assert_int_equal(ex_safetensors_read(f, "empty", NULL, 0, msg, sizeof msg), EX_OK);

    assert_int_equal(ex_safetensors_metadata_count(f), 2);
    assert_string_equal(ex_safetensors_metadata_key(f, 0), "format");
    assert_string_equal(ex_safetensors_metadata(f, "format"), "pt");
    assert_string_equal(ex_safetensors_metadata(f, "exapt.note"), "grüße");
    assert_null(ex_safetensors_metadata(f, "absent"));
    assert_null(ex_safetensors_metadata_key(f, 2));

    /* caller mistakes */
    assert_int_equal(ex_safetensors_read(f, "labels", goti, sizeof goti - 1, msg, sizeof msg),
                     EX_ERR_ARG);
    assert_non_null(strstr(msg, "labels"));
    assert_int_equal(ex_safetensors_read(f, "nope", goti, sizeof goti, msg, sizeof msg),
                     EX_ERR_ARG);
    assert_non_null(strstr(msg, "nope"));
    assert_int_equal(ex_safetensors_info(f, "nope", &info, msg, sizeof msg), EX_ERR_ARG);
    ex_safetensors_close(f);
    ex_safetensors_close(NULL);
}

/* The bytes PyTorch's reader relies on: length, JSON, space padding to 8, aligned data. */
static void byte_layout(void **state)
{
    scratch *s = *state;
    save_sample(s->path);
    size_t n;
    char *buf = slurp(s->path, &n);
    uint64_t hl = 0;
    for (int b = 7; b >= 0; b--)
        hl = hl << 8 | (unsigned char)buf[b];
    assert_int_equal(hl % 8, 0);
    assert_int_equal(buf[8], '{');
    size_t data = sizeof f32 + sizeof i32 + sizeof i64 + sizeof scalar;
    assert_int_equal(n, 8 + hl + data);
    char *header = strndup(buf + 8, (size_t)hl);
    size_t end = strlen(header);
    while (end > 0 && header[end - 1] == ' ')
        end--;
    assert_int_equal(header[end - 1], '}');
    assert_true(hl - end < 8);
    /* the 8-byte tensor goes first, so it is aligned; exact text of one entry */
    assert_non_null(strstr(header, "\"steps\":{\"dtype\":\"I64\",\"shape\":[2,1,3,1],"
                                   "\"data_offsets\":[0,48]}"));
    assert_non_null(strstr(header, "\"__metadata__\":{\"format\":\"pt\""));
    assert_memory_equal(buf + 8 + hl, i64, sizeof i64);
    free(header);
    free(buf);
}

/* A file as safetensors 0.8.0's save_file (PyTorch 2.11) wrote it: its header verbatim,
 * data sorted by dtype then name, header padded to 8 with spaces. */
static const char torch_header[] =
    "{\"__metadata__\":{\"format\":\"pt\",\"who\":\"torch\"},"
    "\"count\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,8]},"
    "\"bn.running_mean\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
    "\"conv.weight\":{\"dtype\":\"F32\",\"shape\":[2,3,2,1],\"data_offsets\":[16,64]},"
    "\"idx\":{\"dtype\":\"I32\",\"shape\":[3],\"data_offsets\":[64,76]}}      ";

static void reads_torch_file(void **state)
{
    scratch *s = *state;
    assert_int_equal(strlen(torch_header), 0x130);
    unsigned char file[8 + 0x130 + 76] = {0x30, 0x01};
    memcpy(file + 8, torch_header, 0x130);
    unsigned char *d = file + 8 + 0x130;
    const int64_t count = 123456789012;
    const float mean[2] = {0.5f, -0.25f};
    float conv[12];
    for (int i = 0; i < 12; i++)
        conv[i] = (float)i / 4;
    const int32_t idx[3] = {3, -1, 7};
    memcpy(d, &count, 8);
    memcpy(d + 8, mean, 8);
    memcpy(d + 16, conv, 48);
    memcpy(d + 64, idx, 12);
    spit(s->path, file, sizeof file);

    ex_safetensors *f = NULL;
    char msg[256];
    assert_int_equal(ex_safetensors_open(s->path, &f, msg, sizeof msg), EX_OK);
    assert_int_equal(ex_safetensors_count(f), 4);
    assert_string_equal(ex_safetensors_metadata(f, "who"), "torch");
    ex_st_info info;
    assert_int_equal(ex_safetensors_info(f, "conv.weight", &info, msg, sizeof msg), EX_OK);
    assert_int_equal(info.ndim, 4);
    assert_int_equal(info.shape[1], 3);
    float got[12];
    assert_int_equal(ex_safetensors_read(f, "conv.weight", got, sizeof got, msg, sizeof msg),
                     EX_OK);
    assert_memory_equal(got, conv, sizeof conv);
    int64_t c = 0;
    assert_int_equal(ex_safetensors_info(f, "count", &info, msg, sizeof msg), EX_OK);
    assert_int_equal(info.ndim, 0);
    assert_int_equal(ex_safetensors_read(f, "count", &c, 8, msg, sizeof msg), EX_OK);
    assert_true(c == count);
    int32_t gi[3];
    assert_int_equal(ex_safetensors_read(f, "idx", gi, sizeof gi, msg, sizeof msg), EX_OK);
    assert_memory_equal(gi, idx, sizeof idx);
    ex_safetensors_close(f);
}

/* ---- malformed files ---- */

typedef struct bad_case {
    const char *what;
    const char *header;
    uint64_t hlen; /* UINT64_MAX: the header's length */
    size_t data;
    ex_status want;
    const char *needle; /* in the message */
} bad_case;

#define T(x) "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":" x "}}"

static const bad_case bad_cases[] = {
    {"not json", "{\"t\":", UINT64_MAX, 0, EX_ERR_FORMAT, "not valid JSON"},
    {"garbage", "\x01\x02 hello", UINT64_MAX, 0, EX_ERR_FORMAT, "not valid JSON"},
    {"not an object", "[1,2]", UINT64_MAX, 0, EX_ERR_FORMAT, "not a JSON object"},
    {"length past the file", "{}", 400, 0, EX_ERR_FORMAT, "exceeds the file"},
    {"length over 100 MB", "{}", 200000000, 0, EX_ERR_FORMAT, "100 MB"},
    {"length absurd", "{}", UINT64_MAX - 3, 0, EX_ERR_FORMAT, "header length"},
    {"end past data", T("[0,8]"), UINT64_MAX, 4, EX_ERR_FORMAT, "out of range"},
    {"begin after end", T("[8,0]"), UINT64_MAX, 8, EX_ERR_FORMAT, "out of range"},
    {"span too small", T("[0,4]"), UINT64_MAX, 4, EX_ERR_FORMAT, "need 8 bytes"},
    {"trailing data", T("[0,8]"), UINT64_MAX, 12, EX_ERR_FORMAT, "data section holds 12"},
    {"gap", T("[4,12]"), UINT64_MAX, 12, EX_ERR_FORMAT, "gap"},
    {"overlap",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
     UINT64_MAX, 12, EX_ERR_FORMAT, "overlaps"},
    {"unknown dtype", "{\"t\":{\"dtype\":\"Q7\",\"shape\":[],\"data_offsets\":[0,0]}}", UINT64_MAX,
     0, EX_ERR_FORMAT, "unknown dtype"},
    {"unsupported dtype", "{\"t\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[0,2]}}",
     UINT64_MAX, 2, EX_ERR_UNSUPPORTED, "F16"},
    {"dtype not a string", "{\"t\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", UINT64_MAX,
     4, EX_ERR_FORMAT, "dtype"},
    {"no shape", "{\"t\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", UINT64_MAX, 4, EX_ERR_FORMAT,
     "shape"},
    {"negative dim", "{\"t\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}",
     UINT64_MAX, 4, EX_ERR_FORMAT, "non-negative"},
    {"real dim", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}", UINT64_MAX,
     4, EX_ERR_FORMAT, "non-negative integer"},
    {"five dims", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1],\"data_offsets\":[0,4]}}",
     UINT64_MAX, 4, EX_ERR_FORMAT, "5 dimensions"},
    {"size overflow",
     "{\"t\":{\"dtype\":\"I64\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}}",
     UINT64_MAX, 0, EX_ERR_FORMAT, "overflows"},
    {"offsets not integers", T("[0,\"8\"]"), UINT64_MAX, 8, EX_ERR_FORMAT, "data_offsets"},
    {"offsets three", T("[0,4,8]"), UINT64_MAX, 8, EX_ERR_FORMAT, "data_offsets"},
    {"entry not object", "{\"t\":[1]}", UINT64_MAX, 0, EX_ERR_FORMAT, "not a JSON object"},
    {"duplicate names",
     "{\"t\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]},"
     "\"t\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}",
     UINT64_MAX, 0, EX_ERR_FORMAT, "duplicate"},
    {"metadata not strings", "{\"__metadata__\":{\"a\":1}}", UINT64_MAX, 0, EX_ERR_FORMAT,
     "metadata"},
    {"metadata not object", "{\"__metadata__\":\"x\"}", UINT64_MAX, 0, EX_ERR_FORMAT,
     "__metadata__"},
    {"NUL in name", "{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}",
     UINT64_MAX, 0, EX_ERR_FORMAT, "not valid JSON"},
};

static void check_bad(const char *path, ex_status want, const char *needle, const char *what)
{
    ex_safetensors *f = (ex_safetensors *)1;
    char msg[512] = "";
    ex_status st = ex_safetensors_open(path, &f, msg, sizeof msg);
    if (st != want || !strstr(msg, path) || (needle && !strstr(msg, needle)))
        fail_msg("%s: status %d (want %d), message '%s'", what, st, want, msg);
    assert_null(f);
}

static void malformed(void **state)
{
    scratch *s = *state;
    for (size_t i = 0; i < sizeof bad_cases / sizeof *bad_cases; i++) {
        const bad_case *c = &bad_cases[i];
        raw_file(s->path, c->header, c->hlen, c->data);
        check_bad(s->path, c->want, c->needle, c->what);
    }
}

static void malformed_sizes(void **state)
{
    scratch *s = *state;
    spit(s->path, "", 0);
    check_bad(s->path, EX_ERR_FORMAT, "too short", "empty file");
    spit(s->path, "\x02\0\0\0", 4);
    check_bad(s->path, EX_ERR_FORMAT, "too short", "4-byte file");
    /* a name of 256 bytes */
    char header[512], name[257];
    memset(name, 'n', 256);
    name[256] = 0;
    snprintf(header, sizeof header,
             "{\"%s\":{\"dtype\":\"F32\",\"shape\":[0],"
             "\"data_offsets\":[0,0]}}",
             name);
    raw_file(s->path, header, UINT64_MAX, 0);
    check_bad(s->path, EX_ERR_FORMAT, "longer than 255", "long name");
    name[255] = 0; /* 255 bytes is allowed */
    snprintf(header, sizeof header,
             "{\"%s\":{\"dtype\":\"F32\",\"shape\":[0],"
             "\"data_offsets\":[0,0]}}",
             name);
    raw_file(s->path, header, UINT64_MAX, 0);
    ex_safetensors *f = NULL;
    assert_int_equal(ex_safetensors_open(s->path, &f, NULL, 0), EX_OK);
    assert_string_equal(ex_safetensors_name(f, 0), name);
    ex_safetensors_close(f);
    /* not a file */
    char msg[256];
    assert_int_equal(ex_safetensors_open(s->dir, &f, msg, sizeof msg), EX_ERR_IO);
    assert_null(f);
    char missing[160];
    snprintf(missing, sizeof missing, "%s/missing", s->dir);
    check_bad(missing, EX_ERR_IO, "cannot open", "missing file");
}

/* A file that shrinks after it was opened fails the read, not the process. */
static void shrinks_after_open(void **state)
{
    scratch *s = *state;
    save_sample(s->path);
    ex_safetensors *f = NULL;
    char msg[256];
    assert_int_equal(ex_safetensors_open(s->path, &f, msg, sizeof msg), EX_OK);
    assert_int_equal(truncate(s->path, 100), 0);
    int32_t goti[5];
    assert_int_equal(ex_safetensors_read(f, "labels", goti, sizeof goti, msg, sizeof msg),
                     EX_ERR_IO);
    assert_non_null(strstr(msg, "shrank"));
    ex_safetensors_close(f);
}

/* ---- writer ---- */

static void writer_rejects(void **state)
{
    scratch *s = *state;
    const float x[2] = {1, 2};
    char long_name[300];
    memset(long_name, 'a', 256);
    long_name[256] = 0;
    const ex_st_tensor cases[][2] = {
        {{"a", EX_ST_F32, 1, {2}, x}, {"a", EX_ST_F32, 1, {2}, x}},
        {{long_name, EX_ST_F32, 1, {2}, x}, {"b", EX_ST_F32, 1, {2}, x}},
        {{"__metadata__", EX_ST_F32, 1, {2}, x}, {"b", EX_ST_F32, 1, {2}, x}},
        {{"", EX_ST_F32, 1, {2}, x}, {"b", EX_ST_F32, 1, {2}, x}},
        {{NULL, EX_ST_F32, 1, {2}, x}, {"b", EX_ST_F32, 1, {2}, x}},
        {{"a", EX_ST_F32, 5, {2, 1, 1, 1}, x}, {"b", EX_ST_F32, 1, {2}, x}},
        {{"a", EX_ST_F32, 1, {-2}, x}, {"b", EX_ST_F32, 1, {2}, x}},
        {{"a", EX_ST_F32, 1, {2}, NULL}, {"b", EX_ST_F32, 1, {2}, x}},
        {{"a", (ex_st_dtype)7, 1, {2}, x}, {"b", EX_ST_F32, 1, {2}, x}},
        {{"a", EX_ST_I64, 3, {INT64_MAX, 4, 4}, x}, {"b", EX_ST_F32, 1, {2}, x}},
        {{"a\xff", EX_ST_F32, 1, {2}, x}, {"b", EX_ST_F32, 1, {2}, x}},
    };
    char msg[256];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        msg[0] = 0;
        ex_status st = ex_safetensors_save(s->path, cases[i], 2, NULL, 0, msg, sizeof msg);
        if (st != EX_ERR_ARG || !msg[0])
            fail_msg("case %zu: status %d, message '%s'", i, st, msg);
        assert_int_equal(access(s->path, F_OK), -1); /* nothing written */
    }
    const ex_st_tensor ok = {"a", EX_ST_F32, 1, {2}, x};
    const ex_st_meta dup[] = {{"k", "1"}, {"k", "2"}};
    assert_int_equal(ex_safetensors_save(s->path, &ok, 1, dup, 2, msg, sizeof msg), EX_ERR_ARG);
    const ex_st_meta nul[] = {{"k", NULL}};
    assert_int_equal(ex_safetensors_save(s->path, &ok, 1, nul, 1, msg, sizeof msg), EX_ERR_ARG);
    const ex_st_meta bad_utf8[] = {{"k", "\xc3"}};
    assert_int_equal(ex_safetensors_save(s->path, &ok, 1, bad_utf8, 1, msg, sizeof msg),
                     EX_ERR_ARG);
    assert_int_equal(access(s->path, F_OK), -1);
    /* no tensors at all is a valid file: "{}" padded */
    assert_int_equal(ex_safetensors_save(s->path, NULL, 0, NULL, 0, msg, sizeof msg), EX_OK);
    ex_safetensors *f = NULL;
    assert_int_equal(ex_safetensors_open(s->path, &f, msg, sizeof msg), EX_OK);
    assert_int_equal(ex_safetensors_count(f), 0);
    ex_safetensors_close(f);
}

/* A save that fails, before or after its data is written, leaves the old file whole and
 * no temporary behind. */
static void failed_save_keeps_old(void **state)
{
    scratch *s = *state;
    save_sample(s->path);
    size_t n0;
    char *before = slurp(s->path, &n0);
    const float x[2] = {9, 9};
    const ex_st_tensor t = {"x", EX_ST_F32, 1, {2}, x};
    char msg[256], tmp[256];

    /* the temporary cannot be created: a directory sits where it would go */
    snprintf(tmp, sizeof tmp, "%s.tmp", s->path);
    assert_int_equal(mkdir(tmp, 0755), 0);
    assert_int_equal(ex_safetensors_save(s->path, &t, 1, NULL, 0, msg, sizeof msg), EX_ERR_IO);
    assert_non_null(strstr(msg, s->path));
    assert_int_equal(rmdir(tmp), 0);

    /* everything is written, then the rename fails: the target is a non-empty directory */
    char dir[160], inner[200];
    snprintf(dir, sizeof dir, "%s/d", s->dir);
    snprintf(inner, sizeof inner, "%s/other", dir);
    assert_int_equal(mkdir(dir, 0755), 0);
    spit(inner, "x", 1);
    assert_int_equal(ex_safetensors_save(dir, &t, 1, NULL, 0, msg, sizeof msg), EX_ERR_IO);
    assert_non_null(strstr(msg, "rename"));
    snprintf(tmp, sizeof tmp, "%s.tmp", dir);
    assert_int_equal(access(tmp, F_OK), -1);
    assert_int_equal(remove(inner), 0);

    /* the directory does not exist */
    char nowhere[200];
    snprintf(nowhere, sizeof nowhere, "%s/no/such/dir/w.safetensors", s->dir);
    assert_int_equal(ex_safetensors_save(nowhere, &t, 1, NULL, 0, msg, sizeof msg), EX_ERR_IO);

    size_t n1;
    char *after = slurp(s->path, &n1);
    assert_int_equal(n0, n1);
    assert_memory_equal(before, after, n0);
    free(before);
    free(after);
    /* and a good save replaces it */
    assert_int_equal(ex_safetensors_save(s->path, &t, 1, NULL, 0, msg, sizeof msg), EX_OK);
    ex_safetensors *f = NULL;
    assert_int_equal(ex_safetensors_open(s->path, &f, msg, sizeof msg), EX_OK);
    assert_int_equal(ex_safetensors_count(f), 1);
    ex_safetensors_close(f);
}

/* `test_safetensors --write-sample FILE` writes the sample for tests/check_safetensors.py
 * (run where PyTorch and safetensors are installed) and exits. */
int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--write-sample") == 0) {
        char msg[256];
        ex_status st = write_sample(argv[2], msg, sizeof msg);
        if (st != EX_OK)
            fprintf(stderr, "%s\n", msg);
        return st == EX_OK ? 0 : 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(byte_layout, setup, teardown),
        cmocka_unit_test_setup_teardown(reads_torch_file, setup, teardown),
        cmocka_unit_test_setup_teardown(malformed, setup, teardown),
        cmocka_unit_test_setup_teardown(malformed_sizes, setup, teardown),
        cmocka_unit_test_setup_teardown(shrinks_after_open, setup, teardown),
        cmocka_unit_test_setup_teardown(writer_rejects, setup, teardown),
        cmocka_unit_test_setup_teardown(failed_save_keeps_old, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
