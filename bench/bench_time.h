/* What the benchmark programs share to time runs: the host's monotonic clock in
 * milliseconds and qsort's comparison of doubles (for medians). A program that wants
 * clock_gettime under strict C11 defines _POSIX_C_SOURCE before including this. */
#ifndef EXAPT_BENCH_TIME_H
#define EXAPT_BENCH_TIME_H

#include <time.h>

/** The monotonic clock in milliseconds. */
static inline double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/** qsort's comparison of two doubles, ascending. */
static inline int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#endif
