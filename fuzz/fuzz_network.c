/* ex_network_open's reading of the metadata a weights file records: the input is the
 * "network" entry (the architecture as JSON) of the weights of a small DARTS_V2 network,
 * which the first call saves and keeps. Whatever the entry says, the file opens as that
 * network or is refused with a message; an opened one classifies an image. */
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
    ex_network *n = NULL;
    const char *path = fuzz_write("template.safetensors", (const uint8_t *)"", 0);
    if (!path || ex_backend_open("cpu", &tp->be, msg, sizeof msg) != EX_OK ||
        ex_genotype_builtin("DARTS_V2", &g) != EX_OK || !(n = fuzz_small_network(tp->be)) ||
        ex_network_save(n, path, false) != EX_OK)
        abort();
    ex_network_free(n);
    ex_genotype_format(&g, tp->genotype, sizeof tp->genotype);
    tp->t = fuzz_read_tensors(path, &tp->n);
    return true;
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
