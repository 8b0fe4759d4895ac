/* Error messages of the dataset layer: written into the caller's buffer, never printed. */
#include <stdarg.h>
#include <stdio.h>

#include "data/internal.h"

ex_status exd_fail(char *msg, size_t len, ex_status st, const char *fmt, ...)
{
    if (msg && len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, len, fmt, ap);
        va_end(ap);
    }
    return st;
}
