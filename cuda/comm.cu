/* ALLREDUCE on the device: the sum over the ranks queued by the communicator's device
 * function (NCCL's all-reduce for exapt_nccl) on the node's stream, inside the captured
 * step like any node, then the node's scale. Only with a communicator that serves CUDA
 * (ex_comm.device_backend); otherwise the plan carries the node out through the host. */
#include "cuda/cuda.h"

__global__ void comm_scale_kernel(float *p, int64_t n, float s, const float *gate)
{
    if (cu_gated_off(gate))
        return;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        p[i] *= s;
}

CU_OP(allreduce)
{
    const ex_comm *c = e->comm;
    if (!c)
        return cu_fail(e, EX_ERR_STATE,
                       "allreduce: no communicator with device sums for CUDA "
                       "(ex_comm.device_backend, ex_plan_set_comm)");
    if (n->nsrc != 1 || n->src[0].dtype != EX_F32 || n->dst.dtype != EX_F32 ||
        ex_td_numel(&n->src[0]) != ex_td_numel(&n->dst))
        return cu_fail(e, EX_ERR_ARG, "allreduce: one f32 source of dst's element count expected");
    if (n->ip[0] != c->size)
        return cu_fail(e, EX_ERR_STATE,
                       "allreduce: the graph was built for %d rank(s), the plan's "
                       "communicator has %d (ex_ctx_set_ranks, ex_plan_set_comm)",
                       n->ip[0], c->size);
    if (!ex_td_dense(&n->src[0]) || !ex_td_dense(&n->dst))
        return cu_fail(e, EX_ERR_UNSUPPORTED,
                       "allreduce: CUDA's device sums take dense tensors; this one is strided");
    if (e->dry)
        return EX_OK;
    int64_t count = ex_td_numel(&n->dst);
    float *dst = cu_f32(&n->dst);
    char msg[256] = "";
    ex_status st = c->allreduce_device(c->user, cu_f32(&n->src[0]), dst, (size_t)count,
                                       (void *)e->stream, msg, sizeof msg);
    if (st != EX_OK)
        return cu_fail(e, st, "allreduce over %d ranks: %s", c->size,
                       msg[0] ? msg : "the communicator gave no reason");
    if (n->fp[0] == 1.0f || count == 0)
        return EX_OK;
    cu_launch(e, comm_scale_kernel, cu_blocks(count, CU_THREADS), CU_THREADS, 0, dst, count,
              n->fp[0], e->gate);
    return cu_launched(e, "allreduce");
}
