/* The network derived from a genotype (DARTS's model.NetworkCIFAR). */
#ifndef EXAPT_NAS_DERIVED_H
#define EXAPT_NAS_DERIVED_H

#include "exapt/network.h"
#include "nas/layers.h"

/** Logits of the derived network on x. In training (n->train) with drop_keep < 1, each
 *  cell operation but the identity is followed by drop path drawn from counter; with
 *  aux not NULL and c->auxiliary, *aux gets the auxiliary head's logits. */
ex_tensor *nas_derived_forward(nas_net *n, const ex_genotype *g, const ex_network_config *c,
                               ex_tensor *x, ex_tensor *counter, float drop_keep, ex_tensor **aux);

#endif
