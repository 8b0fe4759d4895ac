/* Loading a backend module. A module stays loaded until the process ends: the CUDA
 * runtime registers exit handlers from inside it, which an unloaded module would leave
 * pointing at unmapped code. */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/module.h"

/* The folder of the file this function was loaded from, into dir; false if unknown. */
static bool own_folder(char *dir, size_t len)
{
    Dl_info info;
    if (!dladdr((void *)own_folder, &info) || !info.dli_fname)
        return false;
    const char *slash = strrchr(info.dli_fname, '/');
    if (!slash)
        return false;
    snprintf(dir, len, "%.*s", (int)(slash - info.dli_fname), info.dli_fname);
    return true;
}

void *ex__module_symbol(const char *file, const char *symbol, char *msg, size_t len)
{
    char dir[4096], path[4400];
    const char *env = getenv("EXAPT_MODULE_PATH");
    if (env && *env)
        snprintf(dir, sizeof dir, "%s", env);
    else if (!own_folder(dir, sizeof dir))
        snprintf(dir, sizeof dir, ".");
    snprintf(path, sizeof path, "%s/%s", dir, file);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        if (msg && len)
            snprintf(msg, len, "module %s not loaded: %s", path, why ? why : "unknown");
        return NULL;
    }
    void *sym = dlsym(h, symbol);
    if (!sym && msg && len)
        snprintf(msg, len, "module %s has no %s", path, symbol);
    return sym;
}
