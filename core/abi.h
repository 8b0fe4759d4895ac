/* Public configuration structs that can grow: each begins with `size_t size`, which its
 * *_default() function sets to sizeof the struct as the caller was compiled, and the
 * library reads no more of it than that (docs/library.md). */
#ifndef EXAPT_CORE_ABI_H
#define EXAPT_CORE_ABI_H

#include <stddef.h>

#include "exapt/status.h"

/** Copies the caller's struct src over dst, which holds this library's defaults and is
 *  dst_size bytes: fields past the caller's size keep their defaults; dst's size becomes
 *  dst_size. EX_ERR_ARG with a message naming `what` when src's size is smaller than the
 *  size field itself (0: not filled by its *_default() function) or larger than dst_size
 *  (a struct of a newer exapt than this library). */
ex_status ex__adopt_config(void *dst, size_t dst_size, const void *src, const char *what, char *msg,
                           size_t msg_len);

/** Gives the caller's struct dst, of dst_size bytes as the caller was compiled, this
 *  library's defaults (src, src_size bytes): as many bytes as both have, zeros past this
 *  library's end, and dst_size in its size field. Nothing when dst_size is below the size
 *  field's. */
void ex__give_config(void *dst, size_t dst_size, const void *src, size_t src_size);

#endif
