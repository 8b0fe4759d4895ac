/* The safetensors reader: open, then every tensor's info and data and every metadata key,
 * as a loader would. */
#include <stdint.h>
#include <stdlib.h>

#include "exapt/safetensors.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void read_all(const ex_safetensors *f)
{
    char msg[256];
    for (size_t i = 0; i < ex_safetensors_count(f); i++) {
        const char *name = ex_safetensors_name(f, i);
        ex_st_info info;
        if (!name || ex_safetensors_info(f, name, &info, msg, sizeof msg) != EX_OK)
            abort(); /* every listed tensor must be described */
        void *buf = malloc(info.nbytes ? info.nbytes : 1);
        if (buf)
            ex_safetensors_read(f, name, buf, info.nbytes, msg, sizeof msg);
        free(buf);
    }
    for (size_t i = 0; i < ex_safetensors_metadata_count(f); i++) {
        const char *key = ex_safetensors_metadata_key(f, i);
        if (!key || !ex_safetensors_metadata(f, key))
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write("in.safetensors", data, size);
    ex_safetensors *f = NULL;
    char msg[256];
    if (!path || ex_safetensors_open(path, &f, msg, sizeof msg) != EX_OK)
        return 0;
    read_all(f);
    ex_safetensors_close(f);
    return 0;
}
