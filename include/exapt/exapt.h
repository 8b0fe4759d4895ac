/* exapt — differentiable neural architecture search in C. One header to include. */
#ifndef EXAPT_H
#define EXAPT_H

#include "exapt/backend.h"
#include "exapt/comm.h"
#include "exapt/ctx.h"
#include "exapt/data.h"
#include "exapt/file.h"
#include "exapt/genotype.h"
#include "exapt/graph.h"
#include "exapt/metrics.h"
#include "exapt/network.h"
#include "exapt/ops.h"
#include "exapt/safetensors.h"
#include "exapt/search.h"
#include "exapt/status.h"
#include "exapt/tensor.h"
#include "exapt/version.h"

#endif
