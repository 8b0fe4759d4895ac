/* What the exporters of the derived network read from it: its genotype, configuration
 * and the values of its named tensors. */
#ifndef EXAPT_NAS_EXPORT_H
#define EXAPT_NAS_EXPORT_H

#include <stdbool.h>

#include "exapt/network.h"

/** The network's genotype. */
const ex_genotype *nas_network_genotype(const ex_network *n);

/** The network's configuration. */
const ex_network_config *nas_network_config(const ex_network *n);

/** The values of the weight or batch-norm statistic called name (PyTorch's names) into a
 *  new buffer of *count floats; NULL with the network's error set when there is none or
 *  it cannot be read. */
float *nas_network_read(ex_network *n, const char *name, int64_t *count);

/** The "network" metadata's JSON of the architecture (malloc'ed; NULL when out of memory). */
char *nas_network_architecture(const ex_network *n);

/** The backend the network runs on. */
ex_backend *nas_network_backend(const ex_network *n);

/** Whether the network is int8 (opened from quantized weights). */
bool nas_network_is_int8(const ex_network *n);

/** Sets the network's error message; returns st. */
ex_status nas_network_fail(ex_network *n, ex_status st, const char *what);

#endif
