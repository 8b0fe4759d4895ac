/* Status names and the library version. */
#include "exapt/status.h"
#include "exapt/version.h"

const char *ex_status_str(ex_status s)
{
    static const char *const names[EX_STATUS_COUNT] = {
        [EX_OK] = "ok",
        [EX_ERR_ARG] = "bad argument",
        [EX_ERR_SHAPE] = "bad shape",
        [EX_ERR_NOMEM] = "out of memory",
        [EX_ERR_IO] = "i/o error",
        [EX_ERR_FORMAT] = "malformed data",
        [EX_ERR_DEVICE] = "device error",
        [EX_ERR_UNSUPPORTED] = "unsupported",
        [EX_ERR_STATE] = "invalid state",
        [EX_ERR_NONFINITE] = "non-finite value",
        [EX_ERR_COMM] = "collective failed",
    };
    if ((unsigned)s >= EX_STATUS_COUNT)
        return "unknown status";
    return names[s];
}

const char *ex_version(void)
{
    return EXAPT_VERSION_STRING;
}
