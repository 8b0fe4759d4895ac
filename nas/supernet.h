/* The DARTS supernet: stem, normal and reduction cells of mixed ops, classifier. */
#ifndef EXAPT_NAS_SUPERNET_H
#define EXAPT_NAS_SUPERNET_H

#include "exapt/search.h"
#include "nas/layers.h"

/** Edges of one cell with the given number of steps. */
int nas_cell_edges(int steps);

/** Whether cell i of a network of `layers` cells is a reduction cell. */
bool nas_is_reduction(int i, int layers);

/** Logits [N, classes] of the supernet on x, with architecture weights w[0] (normal) and
 *  w[1] (reduction) of shape [edges, ncand], and candidate masks m[0], m[1] of the same
 *  shape. With gated, every candidate's subgraph is gated by its mask entry, so
 *  candidates whose mask is 0 are never computed. */
ex_tensor *nas_supernet_forward(nas_net *n, const ex_search_config *c, ex_tensor *x,
                                ex_tensor *const w[2], ex_tensor *const m[2], bool gated);

#endif
