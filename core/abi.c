/* Reading a public configuration struct of any size a caller was compiled with. */
#include <string.h>

#include "core/abi.h"
#include "core/fileio.h"

ex_status ex__adopt_config(void *dst, size_t dst_size, const void *src, const char *what, char *msg,
                           size_t msg_len)
{
    size_t size;
    memcpy(&size, src, sizeof size);
    if (size < sizeof size)
        return ex__msg(msg, msg_len, EX_ERR_ARG,
                       "%s: config.size is %zu: fill the config with its _default() function "
                       "first",
                       what, size);
    if (size > dst_size)
        return ex__msg(msg, msg_len, EX_ERR_ARG,
                       "%s: config.size %zu is larger than this library's %zu: a program built "
                       "for a newer exapt",
                       what, size, dst_size);
    memcpy(dst, src, size);
    memcpy(dst, &dst_size, sizeof dst_size);
    return EX_OK;
}

void ex__give_config(void *dst, size_t dst_size, const void *src, size_t src_size)
{
    if (dst_size < sizeof dst_size)
        return;
    size_t n = dst_size < src_size ? dst_size : src_size;
    memcpy(dst, src, n);
    memset((char *)dst + n, 0, dst_size - n);
    memcpy(dst, &dst_size, sizeof dst_size);
}
