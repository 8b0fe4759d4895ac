/* TEMPORARY: families of the Vulkan backend's first issue still being written ( GEMM,
 * optimizer, random); each definition goes as its file lands. */
#include "vulkan/vk.h"

static ex_status pending(vk_exec *e, const char *family)
{
    return vk_fail(e, EX_ERR_UNSUPPORTED, "the Vulkan %s family is not written yet", family);
}

ex_status vk_run_optim(vk_exec *e, const ex_node_exec *n)
{
    (void)n;
    return pending(e, "optimizer");
}

ex_status vk_run_random(vk_exec *e, const ex_node_exec *n)
{
    (void)n;
    return pending(e, "random");
}
