/* Checkpoints: the same bytes loaded as a search checkpoint (ex_search_load) and as a
 * derived network's weights with optimizer state (ex_network_load), into small models
 * planned once on the CPU backend. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "exapt/exapt.h"
#include "exapt/network.h"
#include "exapt/search.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* Planning a model per input would cost more than the load; the models are made once. */
typedef struct models {
    ex_backend *be;
    ex_search *s;
    ex_network *n;
} models;

static models *get_models(void)
{
    static models m;
    static int made;
    if (made)
        return m.be ? &m : NULL;
    made = 1;
    char msg[256];
    if (ex_backend_open("cpu", &m.be, msg, sizeof msg) != EX_OK)
        return NULL;
    ex_search_config sc;
    ex_search_config_default(&sc);
    sc.in_channels = 1;
    sc.height = sc.width = 8;
    sc.classes = 2;
    sc.batch = 2;
    sc.channels = 2;
    sc.layers = 1;
    sc.steps = sc.multiplier = 1;
    sc.ncand = 2;
    sc.cand[0] = EX_CAND_SKIP_CONNECT;
    sc.cand[1] = EX_CAND_SEP_CONV_3X3;
    ex_network_config nc;
    ex_network_config_default(&nc);
    nc.in_channels = 1;
    nc.height = nc.width = 8;
    nc.classes = 2;
    nc.batch = 2;
    nc.channels = 2;
    nc.layers = 1;
    nc.auxiliary = false;
    ex_genotype g;
    if (ex_search_new(&sc, m.be, &m.s, msg, sizeof msg) != EX_OK ||
        ex_genotype_builtin("DARTS_V2", &g) != EX_OK ||
        ex_network_new(&g, &nc, m.be, &m.n, msg, sizeof msg) != EX_OK)
        abort(); /* the harness itself is broken */
    return &m;
}

/* EXAPT_FUZZ_WRITE_SEEDS=DIR writes the models' own checkpoints there: the seeds of
 * fuzz/corpus/fuzz_checkpoint/ (they must match these models' names and shapes). */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *dir = getenv("EXAPT_FUZZ_WRITE_SEEDS");
    models *m = dir ? get_models() : NULL;
    if (!m)
        return 0;
    char path[512];
    snprintf(path, sizeof path, "%s/search.safetensors", dir);
    if (ex_search_save(m->s, path, "{\"epoch\":0}") != EX_OK)
        abort();
    snprintf(path, sizeof path, "%s/network.safetensors", dir);
    if (ex_network_save(m->n, path, true) != EX_OK)
        abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    models *m = get_models();
    const char *path = fuzz_write("checkpoint.safetensors", data, size);
    if (!m || !path)
        return 0;
    ex_search_load(m->s, path);
    ex_network_load(m->n, path, true);
    return 0;
}
