/* Test shim (LD_PRELOAD): write() to a file whose name ends in ".safetensors.tmp" goes
 * out in 4 KiB pieces with a pause after each (EXAPT_SLOW_WRITE_US microseconds, 2000 by
 * default), so that crash_safety.sh can kill a search while a checkpoint is being
 * written. Every other write passes straight through. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef ssize_t (*write_fn)(int, const void *, size_t);

static int is_checkpoint_tmp(int fd)
{
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0)
        return 0;
    path[n] = '\0';
    static const char suffix[] = ".safetensors.tmp";
    size_t s = sizeof suffix - 1;
    return (size_t)n >= s && !strcmp(path + n - s, suffix);
}

ssize_t write(int fd, const void *buf, size_t n)
{
    write_fn real = (write_fn)dlsym(RTLD_NEXT, "write");
    if (!real || !is_checkpoint_tmp(fd))
        return real ? real(fd, buf, n) : -1;
    const char *env = getenv("EXAPT_SLOW_WRITE_US");
    long us = env ? atol(env) : 2000;
    struct timespec pause = {us / 1000000, (us % 1000000) * 1000};
    size_t done = 0;
    while (done < n) {
        size_t piece = n - done < 4096 ? n - done : 4096;
        ssize_t w = real(fd, (const char *)buf + done, piece);
        if (w <= 0)
            return done ? (ssize_t)done : w;
        done += (size_t)w;
        nanosleep(&pause, NULL);
    }
    return (ssize_t)done;
}
