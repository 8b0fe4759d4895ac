/* The input as a file: most readers take a path, and their size checks against the file
 * (stat, short reads) are part of what is fuzzed. */
#define _POSIX_C_SOURCE 200809L
#include "fuzz_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One folder per fuzzing process, kept across inputs (libFuzzer runs millions). */
static char dir_buf[64];
static char path_buf[256];

static void remove_dir(void)
{
    rmdir(dir_buf);
}

const char *fuzz_dir(void)
{
    if (dir_buf[0])
        return dir_buf;
    const char *base = getenv("TMPDIR");
    snprintf(dir_buf, sizeof dir_buf, "%s/exapt-fuzz-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(dir_buf)) {
        dir_buf[0] = '\0';
        return NULL;
    }
    atexit(remove_dir);
    return dir_buf;
}

const char *fuzz_write(const char *name, const uint8_t *data, size_t n)
{
    const char *d = fuzz_dir();
    if (!d)
        return NULL;
    snprintf(path_buf, sizeof path_buf, "%s/%s", d, name);
    FILE *f = fopen(path_buf, "wb");
    if (!f)
        return NULL;
    size_t put = n ? fwrite(data, 1, n, f) : 0;
    if (fclose(f) != 0 || put != n)
        return NULL;
    return path_buf;
}

void fuzz_remove(const char *name)
{
    const char *d = fuzz_dir();
    char p[256];
    if (!d)
        return;
    snprintf(p, sizeof p, "%s/%s", d, name);
    unlink(p);
}

ex_st_tensor *fuzz_read_tensors(const char *path, size_t *n)
{
    char msg[256];
    ex_safetensors *f = NULL;
    if (ex_safetensors_open(path, &f, msg, sizeof msg) != EX_OK)
        abort();
    *n = ex_safetensors_count(f);
    ex_st_tensor *t = calloc(*n + 1, sizeof *t);
    for (size_t i = 0; t && i < *n; i++) {
        ex_st_info info;
        const char *name = ex_safetensors_name(f, i);
        char *copy = malloc(strlen(name) + 1);
        if (!copy || ex_safetensors_info(f, name, &info, msg, sizeof msg) != EX_OK)
            abort();
        strcpy(copy, name);
        void *buf = malloc(info.nbytes + 1);
        if (!buf || ex_safetensors_read(f, copy, buf, info.nbytes, msg, sizeof msg) != EX_OK)
            abort();
        t[i] = (ex_st_tensor){.name = copy, .dtype = info.dtype, .ndim = info.ndim, .data = buf};
        memcpy(t[i].shape, info.shape, sizeof info.shape);
    }
    ex_safetensors_close(f);
    if (!t)
        abort();
    return t;
}

ex_network *fuzz_small_network(ex_backend *be)
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
    if (ex_genotype_builtin("DARTS_V2", &g) != EX_OK ||
        ex_network_new(&g, &c, be, &n, msg, sizeof msg) != EX_OK)
        abort();
    return n;
}
