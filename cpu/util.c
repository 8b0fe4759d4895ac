/* Helpers shared by the CPU kernels. */
#include <stdarg.h>
#include <stdio.h>

#include "cpu/cpu.h"

ex_status cpu_fail(const cpu_exec *e, ex_status st, const char *fmt, ...)
{
    /* A kernel may fail before the backend gave it a message buffer; the status still tells. */
    if (e && e->msg && e->msg_len > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, e->msg_len, fmt, ap);
        va_end(ap);
    }
    return st;
}
