/* ex_network_open's reading of int8 weights (ex_network_quantize's files): the template
 * is a small DARTS_V2 network quantized on a few images, made once. The input gives an
 * offset (its first 4 bytes) into the template's tensor data, laid end to end, and the
 * bytes written there: int8 weights, scales, biases and activation scales of any value,
 * and a tensor left out (its 5th byte, when odd, says which). Whatever it holds, the
 * file opens as an int8 network or is refused with a message; an opened one classifies
 * an image. */
#define _POSIX_C_SOURCE 200809L /* strdup */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "exapt/exapt.h"
#include "exapt/safetensors.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct template
{
    ex_backend *be;
    ex_st_tensor *t;
    size_t n, bytes;
    ex_st_meta meta[4];
}
template;

/* Bytes of tensor t. */
static size_t nbytes(const ex_st_tensor *t)
{
    size_t b = (size_t)ex_st_dtype_size(t->dtype);
    for (int d = 0; d < t->ndim; d++)
        b *= (size_t)t->shape[d];
    return b;
}

static bool load_template(template *tp)
{
    char msg[256];
    float px[4 * 64];
    for (int i = 0; i < 4 * 64; i++)
        px[i] = (float)((i * 37) % 101) / 100.0f;
    const char *path = fuzz_write("template.safetensors", (const uint8_t *)"", 0);
    ex_network *n = NULL;
    if (!path || ex_backend_open("cpu", &tp->be, msg, sizeof msg) != EX_OK ||
        !(n = fuzz_small_network(tp->be)) || ex_network_quantize(n, px, 4, path) != EX_OK)
        abort();
    ex_network_free(n);
    ex_safetensors *f = NULL;
    if (ex_safetensors_open(path, &f, msg, sizeof msg) != EX_OK)
        abort();
    static const char *const keys[4] = {"format", "genotype", "network", "quantization"};
    for (int i = 0; i < 4; i++) {
        const char *v = ex_safetensors_metadata(f, keys[i]);
        tp->meta[i] = (ex_st_meta){keys[i], v ? strdup(v) : NULL};
        if (!tp->meta[i].value)
            abort();
    }
    ex_safetensors_close(f);
    tp->t = fuzz_read_tensors(path, &tp->n);
    for (size_t i = 0; i < tp->n; i++)
        tp->bytes += nbytes(&tp->t[i]);
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static template tp;
    if (!tp.t && !load_template(&tp))
        abort();
    if (size < 5)
        return 0;
    size_t at =
        ((size_t)data[0] | (size_t)data[1] << 8 | (size_t)data[2] << 16 | (size_t)data[3] << 24) %
        tp.bytes;
    size_t drop = data[4] & 1 ? data[4] / 2 % tp.n : tp.n;
    ex_st_tensor *t = calloc(tp.n, sizeof *t);
    size_t m = 0, pos = 0;
    for (size_t i = 0; t && i < tp.n; i++) {
        size_t b = nbytes(&tp.t[i]);
        uint8_t *copy = malloc(b + 1);
        if (!copy)
            abort();
        memcpy(copy, tp.t[i].data, b);
        /* the input's bytes over [at, at + size - 5) of the data laid end to end */
        for (size_t k = 0; k < b; k++)
            if (pos + k >= at && pos + k - at < size - 5)
                copy[k] = data[5 + pos + k - at];
        pos += b;
        if (i == drop) {
            free(copy);
            continue;
        }
        t[m] = tp.t[i];
        t[m++].data = copy;
    }
    const char *path = fuzz_write("q.safetensors", (const uint8_t *)"", 0);
    char msg[256];
    ex_network *n = NULL;
    if (t && path && ex_safetensors_save(path, t, m, tp.meta, 4, msg, sizeof msg) == EX_OK &&
        ex_network_open(path, tp.be, 1, &n, msg, sizeof msg) == EX_OK) {
        float px[64] = {0}, probs[3];
        if (ex_network_classify(n, px, 1, probs) != EX_OK)
            abort();
        ex_network_free(n);
    }
    for (size_t i = 0; t && i < m; i++)
        free((void *)t[i].data);
    free(t);
    return 0;
}
