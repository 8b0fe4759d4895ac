/* Host-side geometry of a backend's tensor descriptor (ex_tdesc), shared by every backend:
 * shapes padded to 4 dims, element offsets, broadcasting. Plain C that C++ (the CUDA
 * backend) includes as it is. */
#ifndef EXAPT_CORE_TDESC_H
#define EXAPT_CORE_TDESC_H
#include <stdint.h>

#include "exapt/backend.h"

/** Shape and strides padded on the left to 4 dims (size 1, stride 0). */
static inline void ex_td_shape4(const ex_tdesc *t, int64_t ne[4], int64_t st[4])
{
    int pad = 4 - t->ndim;
    for (int d = 0; d < 4; d++) {
        ne[d] = d < pad ? 1 : t->ne[d - pad];
        st[d] = d < pad ? 0 : t->st[d - pad];
    }
}

/** Element offset of the row-major logical index i of t. */
static inline int64_t ex_td_at(const ex_tdesc *t, int64_t i)
{
    int64_t off = 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        off += (i % t->ne[d]) * t->st[d];
        i /= t->ne[d];
    }
    return off;
}

/** Number of elements of t. */
static inline int64_t ex_td_numel(const ex_tdesc *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->ne[d];
    return n;
}

/** Whether t is 1 to 4 dims of dtype dt in a buffer. */
static inline int ex_td_valid(const ex_tdesc *t, ex_dtype dt)
{
    return t->ndim >= 1 && t->ndim <= 4 && t->dtype == dt && t->buf != NULL;
}

/** Strides of t read as the padded shape ne (a size-1 dim broadcasts); 0 when it does
 *  not fit. */
static inline int ex_td_align(const ex_tdesc *t, const int64_t ne[4], int64_t st[4])
{
    int64_t tne[4];
    if (t->ndim < 1 || t->ndim > 4 || t->buf == NULL)
        return 0;
    ex_td_shape4(t, tne, st);
    for (int d = 0; d < 4; d++) {
        if (tne[d] == ne[d])
            continue;
        if (tne[d] != 1)
            return 0;
        st[d] = 0;
    }
    return 1;
}

/** Whether a written tensor of padded shape ne never writes one element twice. */
static inline int ex_td_dst_ok(const int64_t ne[4], const int64_t st[4])
{
    for (int d = 0; d < 4; d++)
        if (ne[d] > 1 && st[d] == 0)
            return 0;
    return 1;
}

#endif
