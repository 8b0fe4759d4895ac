/* ex_network_open's reading of the metadata a weights file records: the input is the
 * "network" entry (the architecture as JSON) of the weights of a small DARTS_V2 network,
 * which the first call saves and keeps. Whatever the entry says, the file opens as that
 * network or is refused with a message; an opened one classifies an image. */
#define _POSIX_C_SOURCE 200809L /* strdup */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "exapt/exapt.h"
#include "exapt/safetensors.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The small network's tensors and genotype, read once (the fuzzer runs millions). */
typedef struct template
{
    ex_backend *be;
    ex_st_tensor *t;
    size_t n;
    char genotype[EX_GENOTYPE_TEXT_MAX];
}
template;

static bool load_template(template *tp)
{
    char msg[256];
    ex_genotype g;
    ex_network_config c;
    ex_network_config_default(&c);
    c.in_channels = 1;
    c.height = c.width = 8;
    c.classes = 3;
    c.batch = 2;
    c.channels = 2;
    c.layers = 3;
    c.auxiliary = false;
    ex_network *n = NULL;
    const char *path = fuzz_write("template.safetensors", (const uint8_t *)"", 0);
    if (!path || ex_backend_open("cpu", &tp->be, msg, sizeof msg) != EX_OK ||
        ex_genotype_builtin("DARTS_V2", &g) != EX_OK ||
        ex_network_new(&g, &c, tp->be, &n, msg, sizeof msg) != EX_OK ||
        ex_network_save(n, path, false) != EX_OK)
        abort();
    ex_network_free(n);
    ex_genotype_format(&g, tp->genotype, sizeof tp->genotype);
    ex_safetensors *f = NULL;
    if (ex_safetensors_open(path, &f, msg, sizeof msg) != EX_OK)
        abort();
    tp->n = ex_safetensors_count(f);
    tp->t = calloc(tp->n, sizeof *tp->t);
    for (size_t i = 0; tp->t && i < tp->n; i++) {
        ex_st_info info;
        char *name = strdup(ex_safetensors_name(f, i));
        if (!name || ex_safetensors_info(f, name, &info, msg, sizeof msg) != EX_OK)
            abort();
        void *buf = malloc(info.nbytes + 1);
        if (!buf || ex_safetensors_read(f, name, buf, info.nbytes, msg, sizeof msg) != EX_OK)
            abort();
        tp->t[i] =
            (ex_st_tensor){.name = name, .dtype = info.dtype, .ndim = info.ndim, .data = buf};
        memcpy(tp->t[i].shape, info.shape, sizeof info.shape);
    }
    ex_safetensors_close(f);
    return tp->t != NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static template tp;
    if (!tp.t && !load_template(&tp))
        abort();
    char *arch = malloc(size + 1);
    if (!arch)
        return 0;
    memcpy(arch, data, size);
    arch[size] = '\0';
    ex_st_meta meta[3] = {
        {"format", "exapt-network"}, {"genotype", tp.genotype}, {"network", arch}};
    const char *path = fuzz_write("w.safetensors", (const uint8_t *)"", 0);
    char msg[256];
    ex_network *n = NULL;
    if (path && ex_safetensors_save(path, tp.t, tp.n, meta, 3, msg, sizeof msg) == EX_OK &&
        ex_network_open(path, tp.be, 1, &n, msg, sizeof msg) == EX_OK) {
        ex_network_config c;
        ex_network_config_default(&c);
        ex_network_get_config(n, &c);
        float *px = calloc((size_t)c.in_channels * c.height * c.width, sizeof *px),
              *probs = calloc((size_t)c.classes, sizeof *probs);
        if (!px || !probs || ex_network_classify(n, px, 1, probs) != EX_OK)
            abort();
        free(px);
        free(probs);
        ex_network_free(n);
    }
    free(arch);
    return 0;
}
