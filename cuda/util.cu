/* Helpers shared by the CUDA op functions: messages, error checks, scratch requests. */
#include <stdarg.h>
#include <stdio.h>

#include "cuda/cuda.h"

ex_status cu_fail(const cu_exec *e, ex_status st, const char *fmt, ...)
{
    if (e && e->msg && e->msg_len > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, e->msg_len, fmt, ap);
        va_end(ap);
    }
    return st;
}

ex_status cu_check(const cu_exec *e, cudaError_t err, const char *what)
{
    if (err == cudaSuccess)
        return EX_OK;
    ex_status st = err == cudaErrorMemoryAllocation ? EX_ERR_NOMEM : EX_ERR_DEVICE;
    return cu_fail(e, st, "cuda: %s: %s (%s)", what, cudaGetErrorString(err),
                   cudaGetErrorName(err));
}

ex_status cu_launched(const cu_exec *e, const char *what)
{
    return cu_check(e, cudaGetLastError(), what);
}

ex_status cu_blas_check(const cu_exec *e, cublasStatus_t s, const char *what)
{
    if (s == CUBLAS_STATUS_SUCCESS)
        return EX_OK;
    ex_status st = s == CUBLAS_STATUS_ALLOC_FAILED    ? EX_ERR_NOMEM
                   : s == CUBLAS_STATUS_NOT_SUPPORTED ? EX_ERR_UNSUPPORTED
                   : s == CUBLAS_STATUS_INVALID_VALUE ? EX_ERR_ARG
                                                      : EX_ERR_DEVICE;
    return cu_fail(e, st, "cublas: %s: %s", what, cublasGetStatusString(s));
}

ex_status cu_scratch(cu_exec *e, size_t bytes, void **out)
{
    bytes = (bytes + 255) & ~(size_t)255;
    if (bytes > e->need)
        e->need = bytes;
    *out = e->dry ? NULL : e->scratch;
    /* The sizing pass saw every node, so this is a broken invariant if it ever fails. */
    if (!e->dry && bytes > e->scratch_bytes)
        return cu_fail(e, EX_ERR_STATE, "cuda: node %lld wants %zu bytes of scratch, %zu sized",
                       (long long)e->node, bytes, e->scratch_bytes);
    return EX_OK;
}
