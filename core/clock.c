/* The engine's one clock. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <time.h>

#include "core/clock.h"

double ex__clock_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}
