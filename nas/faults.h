/* Fault injection for the tests (test_reliability's allocation sweep): not public API,
 * reached by linking the static library. */
#ifndef EXAPT_NAS_FAULTS_H
#define EXAPT_NAS_FAULTS_H

#include <stdint.h>

#include "exapt/search.h"

/** ex_search_new(), with the fail_alloc_after-th allocation the search makes from its
 *  creation on failing (0: none; ex_ctx_fail_alloc_after()). */
ex_status ex__search_new_faulty(const ex_search_config *c, ex_backend *be,
                                uint64_t fail_alloc_after, ex_search **out, char *msg,
                                size_t msg_len);

#endif
