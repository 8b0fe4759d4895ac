/* exapt — status codes shared by every public function. */
#ifndef EXAPT_STATUS_H
#define EXAPT_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

/** Result of every fallible call. EX_OK is zero; every failure is non-zero. */
typedef enum ex_status {
    EX_OK = 0,
    EX_ERR_ARG,         /**< a bad argument: NULL, out of range, wrong dtype */
    EX_ERR_SHAPE,       /**< shapes that do not fit the op */
    EX_ERR_NOMEM,       /**< host or device memory exhausted */
    EX_ERR_IO,          /**< a file could not be read or written */
    EX_ERR_FORMAT,      /**< a file or record is malformed */
    EX_ERR_DEVICE,      /**< the device failed or was lost */
    EX_ERR_UNSUPPORTED, /**< the backend or device cannot do this */
    EX_ERR_STATE,       /**< the call is not valid in the object's state */
    EX_ERR_NONFINITE,   /**< a NaN or infinity where a finite value is required */
    EX_ERR_COMM,        /**< another rank of a data-parallel group failed, or a collective
                             timed out */
    EX_STATUS_COUNT
} ex_status;

/** A short constant English name for a status, e.g. "bad shape". Never NULL. */
const char *ex_status_str(ex_status s);

#ifdef __cplusplus
}
#endif
#endif
