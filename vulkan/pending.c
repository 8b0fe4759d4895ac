/* TEMPORARY: the families another engineer is writing (conv, pooling, batch norm, NAS).
 * Each returns EX_ERR_UNSUPPORTED with a message until its vulkan/<family>.c lands; that
 * change deletes this file. */
#include "vulkan/vk.h"

static ex_status pending(vk_exec *e, const char *family)
{
    return vk_fail(e, EX_ERR_UNSUPPORTED, "the Vulkan %s family is not written yet", family);
}

ex_status vk_run_conv(vk_exec *e, const ex_node_exec *n)
{
    (void)n;
    return pending(e, "convolution");
}

ex_status vk_run_pool(vk_exec *e, const ex_node_exec *n)
{
    (void)n;
    return pending(e, "pooling");
}
