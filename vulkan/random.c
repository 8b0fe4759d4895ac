/* Random ops: RAND_UNIFORM and RAND_NORMAL through random/philox.comp. The uniforms are
 * the CPU's bit for bit (integer Philox, an exact 24-bit scale); the normals go through
 * the device's log, sqrt and cos, so they agree to rounding. */
#include <string.h>

#include "vulkan/vk.h"

/* Mirrors philox.comp's push constants. */
typedef struct rnd_pc {
    uint32_t gate, d, c, cst;
    uint32_t k0, k1, n, r0;
    float a, b, r1, r2;
    uint32_t ne[4], sd[4];
} rnd_pc;

_Static_assert(sizeof(rnd_pc) <= VK_PC_BYTES, "philox.comp's push constants");

static ex_status rnd(vk_exec *e, const ex_node_exec *n, int normal)
{
    char why[96];
    ex_status r = ex_td_rand_check(n, why, sizeof why);
    if (r != EX_OK)
        return vk_fail(e, r, "%s", why);
    const ex_tdesc *c = &n->src[0], *d = &n->dst;
    int64_t ne[4], st[4];
    ex_td_shape4(d, ne, st);
    if (!vk_fits32(ne, st))
        return vk_fail(e, EX_ERR_UNSUPPORTED, "dst is beyond 32-bit indexing");
    rnd_pc pc;
    memset(&pc, 0, sizeof pc);
    pc.d = vk_ref(e, d);
    pc.c = vk_ref_small(e, c);
    pc.cst = (uint32_t)ex_td_at(c, 1);
    pc.k0 = (uint32_t)n->ip[0];
    pc.k1 = (uint32_t)n->ip[1];
    pc.n = (uint32_t)ex_td_numel(d);
    pc.a = n->fp[0];
    pc.b = n->fp[1];
    for (int k = 0; k < 4; k++) {
        pc.ne[k] = (uint32_t)ne[k];
        pc.sd[k] = (uint32_t)st[k];
    }
    return vk_dispatch(e, VK_SH_random_philox, normal, &pc, sizeof pc, vk_groups(pc.n, 128), 1, 1);
}

ex_status vk_run_random(vk_exec *e, const ex_node_exec *n)
{
    switch (n->op) {
    case EX_OP_RAND_UNIFORM: return rnd(e, n, 0);
    case EX_OP_RAND_NORMAL: return rnd(e, n, 1);
    default: return vk_fail(e, EX_ERR_UNSUPPORTED, "not a random op");
    }
}
