/* What machine and when: the facts a benchmark record needs to be compared later. */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

/* The value of the first "key : value" line of /proc/cpuinfo whose key is one of keys
 * (x86 says "model name"; some ARM kernels "Model" or "Hardware"). */
static int cpuinfo_value(const char *const *keys, char *out, size_t len)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f == NULL)
        return -1;
    char line[512];
    int found = -1;
    while (found < 0 && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (colon == NULL)
            continue;
        for (const char *const *k = keys; *k && found < 0; k++) {
            size_t n = strlen(*k);
            if (strncmp(line, *k, n) != 0 || strspn(line + n, " \t") != (size_t)(colon - line) - n)
                continue;
            const char *v = colon + 1 + strspn(colon + 1, " \t");
            snprintf(out, len, "%.*s", (int)strcspn(v, "\n"), v);
            found = 0;
        }
    }
    fclose(f);
    return found;
}

void bench_machine_get(bench_machine *m)
{
    static const char *const keys[] = {"model name", "Model", "Hardware", "cpu model", NULL};
    if (gethostname(m->hostname, sizeof m->hostname) != 0)
        snprintf(m->hostname, sizeof m->hostname, "unknown");
    m->hostname[sizeof m->hostname - 1] = '\0'; /* POSIX leaves a truncated name unterminated */
    if (cpuinfo_value(keys, m->cpu, sizeof m->cpu) != 0 || m->cpu[0] == '\0')
        snprintf(m->cpu, sizeof m->cpu, "unknown");
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    m->cores = n > 0 ? (int)n : 0;
}

void bench_utc_now(char *buf, size_t len)
{
    time_t now = time(NULL);
    struct tm tm;
    if (now == (time_t)-1 || gmtime_r(&now, &tm) == NULL ||
        strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(buf, len, "unknown");
}
