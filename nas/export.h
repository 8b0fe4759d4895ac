/* What the exporters of the derived network read from it: its genotype, configuration
 * and the values of its named tensors. */
#ifndef EXAPT_NAS_EXPORT_H
#define EXAPT_NAS_EXPORT_H

#include "exapt/network.h"

/** The network's genotype. */
const ex_genotype *nas_network_genotype(const ex_network *n);

/** The network's configuration. */
const ex_network_config *nas_network_config(const ex_network *n);

/** The values of the weight or batch-norm statistic called name (PyTorch's names) into a
 *  new buffer of *count floats; NULL with the network's error set when there is none or
 *  it cannot be read. */
float *nas_network_read(ex_network *n, const char *name, int64_t *count);

/** Sets the network's error message; returns st. */
ex_status nas_network_fail(ex_network *n, ex_status st, const char *what);

#endif
