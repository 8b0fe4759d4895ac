/* What the benchmark programs share to time runs: the host's monotonic clock in
 * milliseconds, qsort's comparison of doubles (for medians) and the median of a plan's
 * runs. A program that wants clock_gettime under strict C11 defines _POSIX_C_SOURCE
 * before including this. */
#ifndef EXAPT_BENCH_TIME_H
#define EXAPT_BENCH_TIME_H

#include <stdlib.h>
#include <time.h>

#include "exapt/exapt.h"

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

/** The median ms of a whole run of p (submission and host wait included) over iters runs,
 *  after 3 runs not timed. */
static inline ex_status bench_median_run(ex_plan *p, int iters, double *ms)
{
    double *t = malloc((size_t)iters * sizeof *t);
    if (!t)
        return EX_ERR_NOMEM;
    ex_status st = EX_OK;
    for (int i = 0; st == EX_OK && i < 3; i++)
        st = ex_plan_run(p);
    for (int i = 0; st == EX_OK && i < iters; i++) {
        double t0 = now_ms();
        st = ex_plan_run(p);
        t[i] = now_ms() - t0;
    }
    qsort(t, (size_t)iters, sizeof *t, cmp_double);
    *ms = t[iters / 2];
    free(t);
    return st;
}

#endif
