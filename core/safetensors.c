/* Safetensors reader and writer. The file is untrusted: every size is checked against the
 * file and against overflow before it is used, and the tensors' byte ranges must tile the
 * data section exactly, as the reference implementation demands. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fileio.h"
#include "exapt/safetensors.h"

#define META_KEY "__metadata__"

/* A name and its entry index: the lookup table, sorted by name. */
typedef struct st_named {
    const char *name;
    size_t index;
} st_named;

typedef struct st_entry {
    char *name;
    ex_st_info info;
    uint64_t begin, end; /* within the data section */
} st_entry;

struct ex_safetensors {
    int fd;
    char *path;
    uint64_t data_start; /* 8 + header length */
    size_t n;
    st_entry *entries; /* header order */
    st_named *by_name; /* sorted by name, for lookups */
    size_t n_meta;
    char **meta_keys, **meta_values;
};

static const char *const dtype_names[EX_ST_DTYPE_COUNT] = {"F32", "I32", "I64", "I8"};
static const int dtype_sizes[EX_ST_DTYPE_COUNT] = {4, 4, 8, 1};

const char *ex_st_dtype_name(ex_st_dtype t)
{
    return (unsigned)t < EX_ST_DTYPE_COUNT ? dtype_names[t] : "?";
}

int ex_st_dtype_size(ex_st_dtype t)
{
    return (unsigned)t < EX_ST_DTYPE_COUNT ? dtype_sizes[t] : 0;
}

/* Data is stored as it lies in memory; safetensors is little-endian. */
static bool host_little_endian(void)
{
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* Bytes of a tensor of the given shape; false on a negative dimension or overflow. */
static bool shape_bytes(int ndim, const int64_t *shape, int esize, uint64_t *out)
{
    uint64_t total = (uint64_t)esize;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0)
            return false;
        uint64_t s = (uint64_t)shape[d];
        if (s != 0 && total > UINT64_MAX / s)
            return false;
        total *= s;
    }
    *out = total;
    return true;
}

/* ------------------------------------------------------------------ writer */

static ex_status check_tensor(const ex_st_tensor *t, size_t i, uint64_t *bytes, char *msg,
                              size_t len)
{
    if (!t->name)
        return ex__msg(msg, len, EX_ERR_ARG, "tensor %zu has no name", i);
    size_t nl = strlen(t->name);
    if (nl == 0 || nl > EX_ST_MAX_NAME || strcmp(t->name, META_KEY) == 0)
        return ex__msg(msg, len, EX_ERR_ARG,
                       "tensor %zu: name must be 1..%d bytes and not \"%s\" (got %zu bytes)", i,
                       EX_ST_MAX_NAME, META_KEY, nl);
    if ((unsigned)t->dtype >= EX_ST_DTYPE_COUNT)
        return ex__msg(msg, len, EX_ERR_ARG, "tensor '%s': invalid dtype %d", t->name,
                       (int)t->dtype);
    if (t->ndim < 0 || t->ndim > EX_ST_MAX_DIMS)
        return ex__msg(msg, len, EX_ERR_ARG, "tensor '%s': %d dimensions, at most %d", t->name,
                       t->ndim, EX_ST_MAX_DIMS);
    if (!shape_bytes(t->ndim, t->shape, ex_st_dtype_size(t->dtype), bytes))
        return ex__msg(msg, len, EX_ERR_ARG,
                       "tensor '%s': shape has a negative dimension or its size overflows",
                       t->name);
    if (*bytes > 0 && !t->data)
        return ex__msg(msg, len, EX_ERR_ARG, "tensor '%s': data is NULL", t->name);
    return EX_OK;
}

static json_t *int_array(const int64_t *v, int n)
{
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++) {
        if (json_array_append_new(a, json_integer((json_int_t)v[i])) != 0) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

static ex_status add_meta(json_t *root, const ex_st_meta *meta, size_t n_meta, char *msg,
                          size_t len)
{
    if (n_meta == 0)
        return EX_OK;
    json_t *m = json_object();
    if (!m || json_object_set_new(root, META_KEY, m) != 0)
        return ex__msg(msg, len, EX_ERR_NOMEM, "out of memory building the header");
    for (size_t i = 0; i < n_meta; i++) {
        if (!meta[i].key || !meta[i].value)
            return ex__msg(msg, len, EX_ERR_ARG, "metadata entry %zu has a NULL key or value", i);
        if (json_object_get(m, meta[i].key))
            return ex__msg(msg, len, EX_ERR_ARG, "duplicate metadata key '%s'", meta[i].key);
        json_t *v = json_string(meta[i].value);
        if (!v || json_object_set_new(m, meta[i].key, v) != 0)
            return ex__msg(msg, len, EX_ERR_ARG,
                           "metadata entry '%s' is not valid UTF-8 (or out of memory)",
                           meta[i].key);
    }
    return EX_OK;
}

static ex_status add_tensor(json_t *root, const ex_st_tensor *t, uint64_t begin, uint64_t end,
                            char *msg, size_t len)
{
    if (json_object_get(root, t->name))
        return ex__msg(msg, len, EX_ERR_ARG, "duplicate tensor name '%s'", t->name);
    const int64_t offs[2] = {(int64_t)begin, (int64_t)end};
    json_t *e = json_object();
    if (!e || json_object_set_new(e, "dtype", json_string(ex_st_dtype_name(t->dtype))) != 0 ||
        json_object_set_new(e, "shape", int_array(t->shape, t->ndim)) != 0 ||
        json_object_set_new(e, "data_offsets", int_array(offs, 2)) != 0) {
        json_decref(e);
        return ex__msg(msg, len, EX_ERR_NOMEM, "out of memory building the header");
    }
    if (json_object_set_new(root, t->name, e) != 0)
        return ex__msg(msg, len, EX_ERR_ARG, "tensor name '%s' is not valid UTF-8", t->name);
    return EX_OK;
}

/* Layout order: larger elements first, each group in the caller's order, so every tensor
 * starts at a multiple of its element size. */
static void layout_order(const ex_st_tensor *t, size_t n, size_t *order)
{
    static const int sizes[] = {8, 4, 2, 1, 0}; /* 0: invalid dtypes, rejected later */
    size_t k = 0;
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
        for (size_t i = 0; i < n; i++)
            if (ex_st_dtype_size(t[i].dtype) == sizes[s])
                order[k++] = i;
}

/* The header JSON (unpadded) and each tensor's byte range. */
static ex_status build_header(const ex_st_tensor *t, size_t n, const ex_st_meta *meta,
                              size_t n_meta, const size_t *order, char **out, char *msg, size_t len)
{
    uint64_t *begin = calloc(n ? n : 1, sizeof *begin), *end = calloc(n ? n : 1, sizeof *end);
    json_t *root = json_object();
    ex_status st =
        (begin && end && root) ? EX_OK : ex__msg(msg, len, EX_ERR_NOMEM, "out of memory");
    uint64_t off = 0;
    for (size_t k = 0; st == EX_OK && k < n; k++) {
        uint64_t bytes = 0;
        size_t i = order[k];
        st = check_tensor(&t[i], i, &bytes, msg, len);
        if (st == EX_OK && bytes > (uint64_t)INT64_MAX - off)
            st = ex__msg(msg, len, EX_ERR_ARG, "tensors total more than 2^63 bytes");
        begin[i] = off;
        off += st == EX_OK ? bytes : 0;
        end[i] = off;
    }
    if (st == EX_OK)
        st = add_meta(root, meta, n_meta, msg, len);
    for (size_t i = 0; st == EX_OK && i < n; i++)
        st = add_tensor(root, &t[i], begin[i], end[i], msg, len);
    if (st == EX_OK && !(*out = json_dumps(root, JSON_COMPACT)))
        st = ex__msg(msg, len, EX_ERR_NOMEM, "out of memory serializing the header");
    json_decref(root);
    free(begin);
    free(end);
    return st;
}

static ex_status write_body(ex__wfile *f, const char *header, const ex_st_tensor *t, size_t n,
                            const size_t *order, char *msg, size_t len)
{
    size_t hl = strlen(header), padded = (hl + 7) & ~(size_t)7;
    unsigned char lenbuf[8];
    for (int b = 0; b < 8; b++)
        lenbuf[b] = (unsigned char)((uint64_t)padded >> (8 * b));
    static const char spaces[8] = "        ";
    ex_status st = ex__wfile_write(f, lenbuf, 8, msg, len);
    if (st == EX_OK)
        st = ex__wfile_write(f, header, hl, msg, len);
    if (st == EX_OK)
        st = ex__wfile_write(f, spaces, padded - hl, msg, len);
    for (size_t k = 0; st == EX_OK && k < n; k++) {
        const ex_st_tensor *x = &t[order[k]];
        uint64_t bytes = 0;
        shape_bytes(x->ndim, x->shape, ex_st_dtype_size(x->dtype), &bytes);
        if (bytes > SIZE_MAX)
            return ex__msg(msg, len, EX_ERR_ARG, "tensor '%s' is too large", x->name);
        if (bytes)
            st = ex__wfile_write(f, x->data, (size_t)bytes, msg, len);
    }
    return st;
}

ex_status ex_safetensors_save(const char *path, const ex_st_tensor *tensors, size_t n,
                              const ex_st_meta *meta, size_t n_meta, char *msg, size_t msg_len)
{
    ex__msg(msg, msg_len, EX_OK, "%s", "");
    if (!path || (n && !tensors) || (n_meta && !meta))
        return ex__msg(msg, msg_len, EX_ERR_ARG, "safetensors save: NULL path or array");
    if (!host_little_endian())
        return ex__msg(msg, msg_len, EX_ERR_UNSUPPORTED,
                       "%s: safetensors data is little-endian; this host is not", path);
    size_t *order = malloc((n ? n : 1) * sizeof *order);
    if (!order)
        return ex__msg(msg, msg_len, EX_ERR_NOMEM, "%s: out of memory", path);
    layout_order(tensors, n, order);
    char *header = NULL;
    ex_status st = build_header(tensors, n, meta, n_meta, order, &header, msg, msg_len);
    ex__wfile f;
    if (st == EX_OK)
        st = ex__wfile_open(&f, path, msg, msg_len);
    if (st == EX_OK) {
        st = write_body(&f, header, tensors, n, order, msg, msg_len);
        if (st == EX_OK)
            st = ex__wfile_commit(&f, msg, msg_len);
        else
            ex__wfile_abort(&f);
    }
    free(header);
    free(order);
    return st;
}

/* ------------------------------------------------------------------ reader */

static bool known_unsupported_dtype(const char *s)
{
    static const char *const others[] = {"BOOL", "U8",  "I8",      "I16",     "U16",     "F16",
                                         "BF16", "U32", "F64",     "U64",     "F8_E4M3", "F8_E5M2",
                                         "C64",  "F4",  "F6_E2M3", "F6_E3M2", "F8_E8M0"};
    for (size_t i = 0; i < sizeof others / sizeof *others; i++)
        if (strcmp(s, others[i]) == 0)
            return true;
    return false;
}

static ex_status parse_dtype(const ex_safetensors *f, const char *name, json_t *v, ex_st_dtype *out,
                             char *msg, size_t len)
{
    if (!json_is_string(v))
        return ex__msg(msg, len, EX_ERR_FORMAT,
                       "%s: tensor '%s': \"dtype\" missing or not a string", f->path, name);
    const char *s = json_string_value(v);
    for (int t = 0; t < EX_ST_DTYPE_COUNT; t++)
        if (strcmp(s, dtype_names[t]) == 0) {
            *out = (ex_st_dtype)t;
            return EX_OK;
        }
    if (known_unsupported_dtype(s))
        return ex__msg(msg, len, EX_ERR_UNSUPPORTED,
                       "%s: tensor '%s': dtype %s is not supported (exapt reads F32, I32, I64)",
                       f->path, name, s);
    return ex__msg(msg, len, EX_ERR_FORMAT, "%s: tensor '%s': unknown dtype '%.32s'", f->path, name,
                   s);
}

static ex_status parse_shape(const ex_safetensors *f, const char *name, json_t *v, ex_st_info *info,
                             char *msg, size_t len)
{
    if (!json_is_array(v))
        return ex__msg(msg, len, EX_ERR_FORMAT,
                       "%s: tensor '%s': \"shape\" missing or not an array", f->path, name);
    size_t nd = json_array_size(v);
    if (nd > EX_ST_MAX_DIMS)
        return ex__msg(msg, len, EX_ERR_FORMAT, "%s: tensor '%s': %zu dimensions, at most %d",
                       f->path, name, nd, EX_ST_MAX_DIMS);
    info->ndim = (int)nd;
    for (size_t d = 0; d < nd; d++) {
        json_t *x = json_array_get(v, d);
        if (!json_is_integer(x) || json_integer_value(x) < 0)
            return ex__msg(msg, len, EX_ERR_FORMAT,
                           "%s: tensor '%s': dimension %zu is not a non-negative integer", f->path,
                           name, d);
        info->shape[d] = (int64_t)json_integer_value(x);
    }
    if (!shape_bytes(info->ndim, info->shape, ex_st_dtype_size(info->dtype), &info->nbytes))
        return ex__msg(msg, len, EX_ERR_FORMAT, "%s: tensor '%s': shape's byte size overflows",
                       f->path, name);
    return EX_OK;
}

static ex_status parse_offsets(const ex_safetensors *f, const char *name, json_t *v,
                               uint64_t data_size, st_entry *e, char *msg, size_t len)
{
    json_t *a = json_array_get(v, 0), *b = json_array_get(v, 1);
    if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_integer(a) ||
        !json_is_integer(b) || json_integer_value(a) < 0 || json_integer_value(b) < 0)
        return ex__msg(msg, len, EX_ERR_FORMAT,
                       "%s: tensor '%s': \"data_offsets\" is not two non-negative integers",
                       f->path, name);
    e->begin = (uint64_t)json_integer_value(a);
    e->end = (uint64_t)json_integer_value(b);
    if (e->begin > e->end || e->end > data_size)
        return ex__msg(msg, len, EX_ERR_FORMAT,
                       "%s: tensor '%s': data_offsets [%llu, %llu] out of range of the %llu-byte "
                       "data section",
                       f->path, name, (unsigned long long)e->begin, (unsigned long long)e->end,
                       (unsigned long long)data_size);
    if (e->end - e->begin != e->info.nbytes)
        return ex__msg(
            msg, len, EX_ERR_FORMAT,
            "%s: tensor '%s': shape and dtype need %llu bytes but data_offsets span %llu", f->path,
            name, (unsigned long long)e->info.nbytes, (unsigned long long)(e->end - e->begin));
    return EX_OK;
}

static ex_status parse_entry(ex_safetensors *f, const char *name, json_t *v, uint64_t data_size,
                             st_entry *e, char *msg, size_t len)
{
    if (strlen(name) > EX_ST_MAX_NAME)
        return ex__msg(msg, len, EX_ERR_FORMAT, "%s: a tensor name is %zu bytes, longer than %d",
                       f->path, strlen(name), EX_ST_MAX_NAME);
    if (!json_is_object(v))
        return ex__msg(msg, len, EX_ERR_FORMAT, "%s: tensor '%s' is not a JSON object", f->path,
                       name);
    memset(e, 0, sizeof *e);
    ex_status st = parse_dtype(f, name, json_object_get(v, "dtype"), &e->info.dtype, msg, len);
    if (st == EX_OK)
        st = parse_shape(f, name, json_object_get(v, "shape"), &e->info, msg, len);
    if (st == EX_OK)
        st = parse_offsets(f, name, json_object_get(v, "data_offsets"), data_size, e, msg, len);
    if (st == EX_OK && !(e->name = strdup(name)))
        st = ex__msg(msg, len, EX_ERR_NOMEM, "%s: out of memory", f->path);
    return st;
}

static ex_status parse_meta(ex_safetensors *f, json_t *m, char *msg, size_t len)
{
    if (!json_is_object(m))
        return ex__msg(msg, len, EX_ERR_FORMAT, "%s: \"%s\" is not a JSON object", f->path,
                       META_KEY);
    size_t cap = json_object_size(m);
    f->meta_keys = calloc(cap ? cap : 1, sizeof *f->meta_keys);
    f->meta_values = calloc(cap ? cap : 1, sizeof *f->meta_values);
    if (!f->meta_keys || !f->meta_values)
        return ex__msg(msg, len, EX_ERR_NOMEM, "%s: out of memory", f->path);
    const char *k;
    json_t *v;
    json_object_foreach(m, k, v)
    {
        if (!json_is_string(v))
            return ex__msg(msg, len, EX_ERR_FORMAT, "%s: metadata '%.64s' is not a string", f->path,
                           k);
        f->meta_keys[f->n_meta] = strdup(k);
        f->meta_values[f->n_meta] = strdup(json_string_value(v));
        if (!f->meta_keys[f->n_meta++] || !f->meta_values[f->n_meta - 1])
            return ex__msg(msg, len, EX_ERR_NOMEM, "%s: out of memory", f->path);
    }
    return EX_OK;
}

/* qsort has no context argument in C11: sort (begin, end, index) triples instead. */
typedef struct st_range {
    uint64_t begin, end;
    size_t index;
} st_range;

static int range_cmp(const void *pa, const void *pb)
{
    const st_range *a = pa, *b = pb;
    if (a->begin != b->begin)
        return a->begin < b->begin ? -1 : 1;
    if (a->end != b->end)
        return a->end < b->end ? -1 : 1;
    return a->index < b->index ? -1 : a->index > b->index;
}

/* The byte ranges, in order, must start at 0, follow each other with no gap or overlap,
 * and end where the file ends. */
static ex_status check_tiling(const ex_safetensors *f, uint64_t data_size, char *msg, size_t len)
{
    st_range *r = malloc((f->n ? f->n : 1) * sizeof *r);
    if (!r)
        return ex__msg(msg, len, EX_ERR_NOMEM, "%s: out of memory", f->path);
    for (size_t i = 0; i < f->n; i++)
        r[i] = (st_range){f->entries[i].begin, f->entries[i].end, i};
    qsort(r, f->n, sizeof *r, range_cmp);
    ex_status st = EX_OK;
    uint64_t pos = 0;
    for (size_t k = 0; k < f->n && st == EX_OK; k++) {
        if (r[k].begin != pos)
            st = ex__msg(msg, len, EX_ERR_FORMAT,
                         "%s: tensor '%s' starts at data byte %llu where %llu was expected (%s)",
                         f->path, f->entries[r[k].index].name, (unsigned long long)r[k].begin,
                         (unsigned long long)pos,
                         r[k].begin < pos ? "it overlaps another tensor" : "a gap before it");
        pos = r[k].end;
    }
    if (st == EX_OK && pos != data_size)
        st = ex__msg(msg, len, EX_ERR_FORMAT,
                     "%s: the tensors cover %llu bytes but the data section holds %llu", f->path,
                     (unsigned long long)pos, (unsigned long long)data_size);
    free(r);
    return st;
}

static int named_cmp(const void *pa, const void *pb)
{
    return strcmp(((const st_named *)pa)->name, ((const st_named *)pb)->name);
}

static ex_status index_names(ex_safetensors *f, char *msg, size_t len)
{
    f->by_name = malloc((f->n ? f->n : 1) * sizeof *f->by_name);
    if (!f->by_name)
        return ex__msg(msg, len, EX_ERR_NOMEM, "%s: out of memory", f->path);
    for (size_t i = 0; i < f->n; i++)
        f->by_name[i] = (st_named){f->entries[i].name, i};
    qsort(f->by_name, f->n, sizeof *f->by_name, named_cmp);
    return EX_OK;
}

static ex_status parse_header(ex_safetensors *f, json_t *root, uint64_t data_size, char *msg,
                              size_t len)
{
    if (!json_is_object(root))
        return ex__msg(msg, len, EX_ERR_FORMAT, "%s: header is not a JSON object", f->path);
    size_t cap = json_object_size(root);
    f->entries = calloc(cap ? cap : 1, sizeof *f->entries);
    if (!f->entries)
        return ex__msg(msg, len, EX_ERR_NOMEM, "%s: out of memory", f->path);
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v)
    {
        ex_status st = strcmp(k, META_KEY) == 0
                           ? parse_meta(f, v, msg, len)
                           : parse_entry(f, k, v, data_size, &f->entries[f->n], msg, len);
        if (st != EX_OK)
            return st;
        if (strcmp(k, META_KEY) != 0)
            f->n++;
    }
    ex_status st = check_tiling(f, data_size, msg, len);
    return st == EX_OK ? index_names(f, msg, len) : st;
}

static ex_status pread_all(int fd, void *buf, size_t n, uint64_t off)
{
    char *c = buf;
    while (n > 0) {
        ssize_t r = pread(fd, c, n, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return EX_ERR_IO;
        if (r == 0)
            return EX_ERR_FORMAT; /* the file ended early */
        c += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return EX_OK;
}

/* Reads the 8-byte length and the header; on success *json is the parsed header. */
static ex_status load_header(ex_safetensors *f, json_t **json, uint64_t *data_size, char *msg,
                             size_t len)
{
    struct stat sb;
    if (fstat(f->fd, &sb) != 0 || !S_ISREG(sb.st_mode))
        return ex__msg(msg, len, EX_ERR_IO, "%s: not a readable regular file", f->path);
    uint64_t size = (uint64_t)sb.st_size;
    unsigned char lb[8];
    if (size < 8 || pread_all(f->fd, lb, 8, 0) != EX_OK)
        return ex__msg(msg, len, EX_ERR_FORMAT,
                       "%s: %llu bytes, too short for the 8-byte header length", f->path,
                       (unsigned long long)size);
    uint64_t hl = 0;
    for (int b = 7; b >= 0; b--)
        hl = hl << 8 | lb[b];
    if (hl > EX_ST_MAX_HEADER || hl > size - 8)
        return ex__msg(msg, len, EX_ERR_FORMAT, "%s: header length %llu exceeds %s (%llu bytes)",
                       f->path, (unsigned long long)hl,
                       hl > EX_ST_MAX_HEADER ? "the 100 MB limit" : "the file",
                       hl > EX_ST_MAX_HEADER ? (unsigned long long)EX_ST_MAX_HEADER
                                             : (unsigned long long)(size - 8));
    char *buf = malloc(hl ? (size_t)hl : 1);
    if (!buf)
        return ex__msg(msg, len, EX_ERR_NOMEM, "%s: out of memory for the header", f->path);
    ex_status st = pread_all(f->fd, buf, (size_t)hl, 8);
    if (st != EX_OK) {
        free(buf);
        return ex__msg(msg, len, EX_ERR_IO, "%s: cannot read the header", f->path);
    }
    json_error_t err;
    *json = json_loadb(buf, (size_t)hl, JSON_REJECT_DUPLICATES, &err);
    free(buf);
    if (!*json)
        return ex__msg(msg, len, EX_ERR_FORMAT, "%s: header is not valid JSON: %s (byte %d)",
                       f->path, err.text, err.position);
    f->data_start = 8 + hl;
    *data_size = size - 8 - hl;
    return EX_OK;
}

ex_status ex_safetensors_open(const char *path, ex_safetensors **out, char *msg, size_t msg_len)
{
    ex__msg(msg, msg_len, EX_OK, "%s", "");
    if (!out)
        return ex__msg(msg, msg_len, EX_ERR_ARG, "safetensors open: NULL output");
    *out = NULL;
    if (!path)
        return ex__msg(msg, msg_len, EX_ERR_ARG, "safetensors open: NULL path");
    ex_safetensors *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        return ex__msg(msg, msg_len, EX_ERR_NOMEM, "%s: out of memory", path);
    }
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0) {
        ex_status st =
            ex__msg(msg, msg_len, EX_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        ex_safetensors_close(f);
        return st;
    }
    json_t *root = NULL;
    uint64_t data_size = 0;
    ex_status st = load_header(f, &root, &data_size, msg, msg_len);
    if (st == EX_OK)
        st = parse_header(f, root, data_size, msg, msg_len);
    json_decref(root);
    if (st != EX_OK) {
        ex_safetensors_close(f);
        return st;
    }
    *out = f;
    return EX_OK;
}

void ex_safetensors_close(ex_safetensors *f)
{
    if (!f)
        return;
    if (f->fd >= 0)
        close(f->fd);
    for (size_t i = 0; f->entries && i < f->n; i++)
        free(f->entries[i].name);
    for (size_t i = 0; i < f->n_meta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_values[i]);
    }
    free(f->entries);
    free(f->by_name);
    free(f->meta_keys);
    free(f->meta_values);
    free(f->path);
    free(f);
}

size_t ex_safetensors_count(const ex_safetensors *f)
{
    return f ? f->n : 0;
}

const char *ex_safetensors_name(const ex_safetensors *f, size_t i)
{
    return f && i < f->n ? f->entries[i].name : NULL;
}

static const st_entry *find(const ex_safetensors *f, const char *name)
{
    if (!f || !name || !f->by_name)
        return NULL;
    st_named key = {name, 0};
    const st_named *hit = bsearch(&key, f->by_name, f->n, sizeof key, named_cmp);
    return hit ? &f->entries[hit->index] : NULL;
}

ex_status ex_safetensors_info(const ex_safetensors *f, const char *name, ex_st_info *info,
                              char *msg, size_t msg_len)
{
    const st_entry *e = find(f, name);
    if (!e || !info)
        return ex__msg(msg, msg_len, EX_ERR_ARG, "%s: no tensor named '%s'", f ? f->path : "?",
                       name ? name : "(null)");
    *info = e->info;
    return EX_OK;
}

ex_status ex_safetensors_read(const ex_safetensors *f, const char *name, void *buf,
                              size_t buf_bytes, char *msg, size_t msg_len)
{
    const st_entry *e = find(f, name);
    if (!e)
        return ex__msg(msg, msg_len, EX_ERR_ARG, "%s: no tensor named '%s'", f ? f->path : "?",
                       name ? name : "(null)");
    if ((uint64_t)buf_bytes != e->info.nbytes || (buf_bytes && !buf))
        return ex__msg(msg, msg_len, EX_ERR_ARG,
                       "%s: tensor '%s' holds %llu bytes; the buffer given holds %zu", f->path,
                       name, (unsigned long long)e->info.nbytes, buf ? buf_bytes : 0);
    ex_status st = pread_all(f->fd, buf, buf_bytes, f->data_start + e->begin);
    if (st != EX_OK)
        return ex__msg(msg, msg_len, EX_ERR_IO, "%s: cannot read tensor '%s': %s", f->path, name,
                       st == EX_ERR_FORMAT ? "the file shrank since it was opened"
                                           : strerror(errno));
    return EX_OK;
}

const char *ex_safetensors_metadata(const ex_safetensors *f, const char *key)
{
    for (size_t i = 0; f && key && i < f->n_meta; i++)
        if (strcmp(f->meta_keys[i], key) == 0)
            return f->meta_values[i];
    return NULL;
}

size_t ex_safetensors_metadata_count(const ex_safetensors *f)
{
    return f ? f->n_meta : 0;
}

const char *ex_safetensors_metadata_key(const ex_safetensors *f, size_t i)
{
    return f && i < f->n_meta ? f->meta_keys[i] : NULL;
}
