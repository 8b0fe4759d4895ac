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
