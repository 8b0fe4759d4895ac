/* The Vulkan backend: instance (portability enumeration, the validation layer on
 * request), device selection, feature and limit detection with the portable profile,
 * the backend interface, and the one switch over ex_op. See docs/vulkan.md. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vulkan/vk_backend.h"

static int env_on(const char *name)
{
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

static const char *vk_result_str(VkResult r)
{
    switch (r) {
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "out of host memory";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "out of device memory";
    case VK_ERROR_INITIALIZATION_FAILED: return "initialization failed";
    case VK_ERROR_DEVICE_LOST: return "device lost";
    case VK_ERROR_MEMORY_MAP_FAILED: return "memory map failed";
    case VK_ERROR_LAYER_NOT_PRESENT: return "layer not present";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "extension not present";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "feature not present";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "incompatible driver";
    case VK_ERROR_TOO_MANY_OBJECTS: return "too many objects";
    case VK_TIMEOUT: return "timeout";
    default: return "error";
    }
}

ex_status vk_check(vk_backend *b, VkResult r, const char *what)
{
    if (r == VK_SUCCESS)
        return EX_OK;
    snprintf(b->msg, sizeof b->msg, "vulkan: %s: %s (VkResult %d)", what, vk_result_str(r), (int)r);
    if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY)
        return EX_ERR_NOMEM;
    if (r == VK_ERROR_FEATURE_NOT_PRESENT || r == VK_ERROR_EXTENSION_NOT_PRESENT ||
        r == VK_ERROR_LAYER_NOT_PRESENT || r == VK_ERROR_INCOMPATIBLE_DRIVER)
        return EX_ERR_UNSUPPORTED;
    return EX_ERR_DEVICE;
}

/* ---- the switch ---- */

ex_status vk_run_node(vk_exec *e, const ex_node_exec *n)
{
    switch (n->op) {
    case EX_OP_ADD:
    case EX_OP_SUB:
    case EX_OP_MUL:
    case EX_OP_SCALE:
    case EX_OP_AXPY:
    case EX_OP_RELU:
    case EX_OP_RELU_BWD:
    case EX_OP_FILL:
    case EX_OP_COPY:
    case EX_OP_DROP_PATH: return vk_run_elementwise(e, n);
    case EX_OP_SUM:
    case EX_OP_MEAN:
    case EX_OP_MAX:
    case EX_OP_MAX_BWD: return vk_run_reduce(e, n);
    case EX_OP_SOFTMAX:
    case EX_OP_SOFTMAX_BWD:
    case EX_OP_LOG_SOFTMAX:
    case EX_OP_LOG_SOFTMAX_BWD:
    case EX_OP_CROSS_ENTROPY:
    case EX_OP_CROSS_ENTROPY_BWD:
    case EX_OP_ACCURACY: return vk_run_softmax(e, n);
    case EX_OP_CONV2D:
    case EX_OP_CONV2D_BWD_DATA:
    case EX_OP_CONV2D_BWD_FILTER:
    case EX_OP_DWCONV2D:
    case EX_OP_DWCONV2D_BWD_DATA:
    case EX_OP_DWCONV2D_BWD_FILTER: return vk_run_conv(e, n);
    case EX_OP_PWCONV:
    case EX_OP_PWCONV_BN:
    case EX_OP_PWCONV_BWD_FILTER:
    case EX_OP_MATMUL:
    case EX_OP_LINEAR: return vk_run_gemm(e, n);
    case EX_OP_AVG_POOL:
    case EX_OP_AVG_POOL_BWD:
    case EX_OP_MAX_POOL:
    case EX_OP_MAX_POOL_BWD:
    case EX_OP_GLOBAL_AVG_POOL: return vk_run_pool(e, n);
    case EX_OP_BN_STATS:
    case EX_OP_BN_APPLY:
    case EX_OP_BN_BWD_REDUCE:
    case EX_OP_BN_BWD_DATA: return vk_run_batchnorm(e, n);
    case EX_OP_MIXED_SUM:
    case EX_OP_MIXED_SUM_BWD_W:
    case EX_OP_GUMBEL_SOFTMAX:
    case EX_OP_GUMBEL_SOFTMAX_BWD:
    case EX_OP_HARDMAX_ST:
    case EX_OP_ENTROPY:
    case EX_OP_ENTROPY_BWD:
    case EX_OP_TOPK_MASK: return vk_run_nas(e, n);
    case EX_OP_SGD:
    case EX_OP_ADAM:
    case EX_OP_GRAD_NORM:
    case EX_OP_CLIP: return vk_run_optim(e, n);
    case EX_OP_RAND_UNIFORM:
    case EX_OP_RAND_NORMAL: return vk_run_random(e, n);
    case EX_OP_QUANTIZE:
    case EX_OP_DEQUANTIZE:
    case EX_OP_REQUANTIZE:
    case EX_OP_QADD:
    case EX_OP_QCONCAT:
    case EX_OP_QCONV2D:
    case EX_OP_QDWCONV2D:
    case EX_OP_QPWCONV:
    case EX_OP_QLINEAR:
    case EX_OP_QRELU:
    case EX_OP_QMAX_POOL:
    case EX_OP_QAVG_POOL:
    case EX_OP_QGLOBAL_AVG_POOL: return vk_run_quant(e, n);
    case EX_OP_ALLREDUCE:
        return vk_fail(e, EX_ERR_STATE, "vulkan: allreduce is the plan's to carry out");
    case EX_OP_COUNT: break;
    }
    return vk_fail(e, EX_ERR_UNSUPPORTED, "vulkan: op %d is not in the catalogue", (int)n->op);
}

/* ---- validation messages ---- */

/* Every message of the validation layer is kept: the next entry point reports it as an
 * error, so a test with the layer on fails on any message. */
static VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT sev,
                                                 VkDebugUtilsMessageTypeFlagsEXT type,
                                                 const VkDebugUtilsMessengerCallbackDataEXT *data,
                                                 void *user)
{
    vk_backend *b = user;
    (void)type;
    if (sev < VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT)
        return VK_FALSE;
    if (b->vmsgs++ == b->vmsgs_seen)
        snprintf(b->vmsg, sizeof b->vmsg, "%s", data && data->pMessage ? data->pMessage : "?");
    return VK_FALSE;
}

/** EX_ERR_DEVICE when the validation layer has said something since the last call. */
static ex_status validation_check(vk_backend *b, ex_status st)
{
    if (b->vmsgs == b->vmsgs_seen)
        return st;
    snprintf(b->msg, sizeof b->msg, "vulkan validation (%llu messages): %.400s",
             (unsigned long long)(b->vmsgs - b->vmsgs_seen), b->vmsg);
    b->vmsgs_seen = b->vmsgs;
    return EX_ERR_DEVICE;
}

/* ---- instance ---- */

/* Whether the instance (layer NULL) or the named layer offers instance extension name. */
static int instance_has_ext(const char *layer, const char *name)
{
    uint32_t n = 0;
    if (vkEnumerateInstanceExtensionProperties(layer, &n, NULL) != VK_SUCCESS)
        return 0;
    VkExtensionProperties *p = calloc(n ? n : 1, sizeof *p);
    int found = 0;
    if (p && vkEnumerateInstanceExtensionProperties(layer, &n, p) == VK_SUCCESS)
        for (uint32_t i = 0; i < n && !found; i++)
            found = !strcmp(p[i].extensionName, name);
    free(p);
    return found;
}

static ex_status make_instance(vk_backend *b)
{
    uint32_t version = 0;
    if (vkEnumerateInstanceVersion(&version) != VK_SUCCESS || version < VK_API_VERSION_1_1) {
        snprintf(b->msg, sizeof b->msg, "vulkan: the loader offers no Vulkan 1.1");
        return EX_ERR_UNSUPPORTED;
    }
    const char *exts[3];
    uint32_t next = 0;
    VkInstanceCreateFlags flags = 0;
    if (instance_has_ext(NULL, VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME)) {
        exts[next++] = VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME;
        flags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
    }
    b->validation = env_on("EXAPT_VK_VALIDATION");
    const char *vv = getenv("EXAPT_VK_VALIDATION");
    int sync = vv && !strcmp(vv, "sync");
    const char *layer = "VK_LAYER_KHRONOS_validation";
    if (b->validation) {
        if (!instance_has_ext(NULL, VK_EXT_DEBUG_UTILS_EXTENSION_NAME)) {
            snprintf(b->msg, sizeof b->msg,
                     "vulkan: EXAPT_VK_VALIDATION is set but VK_EXT_debug_utils is absent");
            return EX_ERR_UNSUPPORTED;
        }
        exts[next++] = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
    }
    if (sync) {
        if (!instance_has_ext(layer, VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME)) {
            snprintf(b->msg, sizeof b->msg,
                     "vulkan: EXAPT_VK_VALIDATION=sync needs the validation layer with %s",
                     VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME);
            return EX_ERR_UNSUPPORTED;
        }
        exts[next++] = VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME;
    }
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                             .pApplicationName = "exapt",
                             .pEngineName = "exapt",
                             .apiVersion = VK_API_VERSION_1_1};
    VkDebugUtilsMessengerCreateInfoEXT dbg = {
        .sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
        .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                           VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
        .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
        .pfnUserCallback = on_message,
        .pUserData = b};
    /* synchronization validation: hazards between the commands of a command buffer */
    VkValidationFeatureEnableEXT en = VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT;
    VkValidationFeaturesEXT vf = {.sType = VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT,
                                  .pNext = &dbg,
                                  .enabledValidationFeatureCount = 1,
                                  .pEnabledValidationFeatures = &en};
    VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                               .pNext = sync            ? (const void *)&vf
                                        : b->validation ? (const void *)&dbg
                                                        : NULL,
                               .flags = flags,
                               .pApplicationInfo = &app,
                               .enabledLayerCount = b->validation ? 1u : 0u,
                               .ppEnabledLayerNames = &layer,
                               .enabledExtensionCount = next,
                               .ppEnabledExtensionNames = exts};
    ex_status st = vk_check(b, vkCreateInstance(&ci, NULL, &b->inst), "vkCreateInstance");
    if (st != EX_OK) {
        b->inst = VK_NULL_HANDLE;
        return st;
    }
    if (b->validation) {
        PFN_vkCreateDebugUtilsMessengerEXT make =
            (PFN_vkCreateDebugUtilsMessengerEXT)(vkGetInstanceProcAddr(
                b->inst, "vkCreateDebugUtilsMessengerEXT"));
        if (!make) {
            snprintf(b->msg, sizeof b->msg, "vulkan: no vkCreateDebugUtilsMessengerEXT");
            return EX_ERR_UNSUPPORTED;
        }
        st = vk_check(b, make(b->inst, &dbg, NULL, &b->messenger), "debug messenger");
    }
    return st;
}

/* ---- device selection ---- */

static int type_rank(VkPhysicalDeviceType t)
{
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 0;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 1;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return 3;
    default: return 4;
    }
}

static int is_gpu(VkPhysicalDeviceType t)
{
    return type_rank(t) <= 1;
}

static int compute_family(VkPhysicalDevice p, uint32_t *family)
{
    uint32_t n = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(p, &n, NULL);
    VkQueueFamilyProperties *q = calloc(n ? n : 1, sizeof *q);
    int found = 0;
    if (!q)
        return 0;
    vkGetPhysicalDeviceQueueFamilyProperties(p, &n, q);
    /* a compute-only family first: on discrete GPUs it runs beside graphics work */
    for (int pass = 0; pass < 2 && !found; pass++)
        for (uint32_t i = 0; i < n && !found; i++)
            if ((q[i].queueFlags & VK_QUEUE_COMPUTE_BIT) &&
                (pass == 1 || !(q[i].queueFlags & VK_QUEUE_GRAPHICS_BIT))) {
                *family = i;
                found = 1;
            }
    free(q);
    return found;
}

static int name_matches(const char *name, const char *want)
{
    size_t lw = strlen(want);
    for (const char *p = name; *p; p++) {
        size_t k = 0;
        while (k < lw && p[k] && tolower((unsigned char)p[k]) == tolower((unsigned char)want[k]))
            k++;
        if (k == lw)
            return 1;
    }
    return 0;
}

/* EXAPT_VK_DEVICE names a device by index or by part of its name; otherwise the best
 * type wins: discrete, integrated, then (only when asked for by name, never for "auto")
 * virtual and CPU devices. */
static ex_status pick_device(vk_backend *b, int automatic)
{
    uint32_t n = 0;
    ex_status st = vk_check(b, vkEnumeratePhysicalDevices(b->inst, &n, NULL), "devices");
    if (st != EX_OK)
        return st;
    if (n == 0) {
        snprintf(b->msg, sizeof b->msg, "vulkan: no Vulkan device");
        return EX_ERR_UNSUPPORTED;
    }
    VkPhysicalDevice *devs = calloc(n, sizeof *devs);
    if (!devs)
        return EX_ERR_NOMEM;
    st = vk_check(b, vkEnumeratePhysicalDevices(b->inst, &n, devs), "devices");
    const char *want = getenv("EXAPT_VK_DEVICE");
    int all_digits = want && *want;
    for (const char *p = want; p && *p; p++)
        all_digits &= isdigit((unsigned char)*p) != 0;
    int best = -1, best_rank = 99;
    for (uint32_t i = 0; st == EX_OK && i < n; i++) {
        VkPhysicalDeviceProperties pr;
        uint32_t fam;
        vkGetPhysicalDeviceProperties(devs[i], &pr);
        if (pr.apiVersion < VK_API_VERSION_1_1 || !compute_family(devs[i], &fam))
            continue;
        if (want && *want &&
            !(all_digits ? (uint32_t)atoi(want) == i : name_matches(pr.deviceName, want)))
            continue;
        int rank = type_rank(pr.deviceType);
        if ((automatic && !is_gpu(pr.deviceType)) || rank >= best_rank)
            continue;
        best = (int)i;
        best_rank = rank;
    }
    if (st == EX_OK && best < 0) {
        snprintf(b->msg, sizeof b->msg, "vulkan: no %sVulkan 1.1 device with a compute queue%s%s%s",
                 automatic ? "GPU-type " : "", want && *want ? " matching EXAPT_VK_DEVICE='" : "",
                 want && *want ? want : "", want && *want ? "'" : "");
        st = EX_ERR_UNSUPPORTED;
    }
    if (st == EX_OK) {
        b->phys = devs[best];
        vkGetPhysicalDeviceProperties(b->phys, &b->props);
        compute_family(b->phys, &b->qfamily);
    }
    free(devs);
    return st;
}

/* ---- features ---- */

static int has_device_ext(VkPhysicalDevice p, const char *name)
{
    uint32_t n = 0;
    if (vkEnumerateDeviceExtensionProperties(p, NULL, &n, NULL) != VK_SUCCESS)
        return 0;
    VkExtensionProperties *e = calloc(n ? n : 1, sizeof *e);
    int found = 0;
    if (e && vkEnumerateDeviceExtensionProperties(p, NULL, &n, e) == VK_SUCCESS)
        for (uint32_t i = 0; i < n && !found; i++)
            found = !strcmp(e[i].extensionName, name);
    free(e);
    return found;
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
    return a < b ? a : b;
}

/* Whether shaders may declare SignedZeroInfNanPreserve for 32-bit floats: the device has
 * VK_KHR_shader_float_controls (core in Vulkan 1.2, but the instance asks for 1.1) and
 * guarantees the mode. */
static int has_float_controls(vk_backend *b)
{
    if (!has_device_ext(b->phys, VK_KHR_SHADER_FLOAT_CONTROLS_EXTENSION_NAME))
        return 0;
    VkPhysicalDeviceFloatControlsPropertiesKHR fc = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FLOAT_CONTROLS_PROPERTIES_KHR};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                      .pNext = &fc};
    vkGetPhysicalDeviceProperties2(b->phys, &p2);
    return fc.shaderSignedZeroInfNanPreserveFloat32 == VK_TRUE;
}

/* Whether the device has shaderIntegerDotProduct, for quant/convdot.comp's packed 4x8-bit
 * dot products, and (*fast) whether it accelerates signed ones. Through
 * VK_KHR_shader_integer_dot_product: the feature is core in Vulkan 1.3, but the instance
 * asks for 1.1, where the 1.3 structures may not be used, so the extension is enabled by
 * name (Vulkan 1.3 drivers list it, lavapipe among them). */
static int has_int_dot(vk_backend *b, int *fast)
{
    *fast = 0;
    if (!has_device_ext(b->phys, VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME))
        return 0;
    VkPhysicalDeviceShaderIntegerDotProductFeaturesKHR df = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES_KHR};
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                    .pNext = &df};
    vkGetPhysicalDeviceFeatures2(b->phys, &f2);
    VkPhysicalDeviceShaderIntegerDotProductPropertiesKHR dp = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_PROPERTIES_KHR};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                      .pNext = &dp};
    vkGetPhysicalDeviceProperties2(b->phys, &p2);
    *fast = dp.integerDotProduct4x8BitPackedSignedAccelerated == VK_TRUE;
    return df.shaderIntegerDotProduct == VK_TRUE;
}

static uint32_t max_u32(uint32_t a, uint32_t b)
{
    return a > b ? a : b;
}

/* Detects what the device has; the portable profile then keeps only what Vulkan 1.1
 * guarantees (the limits' required minimums, no optional feature). */
static void detect(vk_backend *b)
{
    vk_features *f = &b->feat;
    const VkPhysicalDeviceLimits *l = &b->props.limits;
    VkPhysicalDeviceSubgroupProperties sg = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    VkPhysicalDeviceMaintenance3Properties m3 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES, .pNext = &sg};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                      .pNext = &m3};
    vkGetPhysicalDeviceProperties2(b->phys, &p2);
    VkPhysicalDevice16BitStorageFeatures s16 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                    .pNext = &s16};
    vkGetPhysicalDeviceFeatures2(b->phys, &f2);
    uint32_t nq = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(b->phys, &nq, NULL);
    VkQueueFamilyProperties q[16];
    nq = nq > 16 ? 16 : nq;
    vkGetPhysicalDeviceQueueFamilyProperties(b->phys, &nq, q);
    uint32_t tsbits = b->qfamily < nq ? q[b->qfamily].timestampValidBits : 0;

    f->portable = env_on("EXAPT_VK_PORTABLE");
    f->timestamps = l->timestampComputeAndGraphics && tsbits > 0;
    f->ts_period_ns = l->timestampPeriod;
    f->ts_mask = tsbits >= 32 ? 0xFFFFFFFFu : (1u << tsbits) - 1u;
    f->subgroup_size = sg.subgroupSize;
    f->subgroup_arith = (sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                        (sg.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT);
    f->storage16 = s16.storageBuffer16BitAccess;
    f->max_range = l->maxStorageBufferRange;
    f->max_alloc = m3.maxMemoryAllocationSize ? m3.maxMemoryAllocationSize : (1ull << 30);
    f->max_shared = l->maxComputeSharedMemorySize;
    f->max_invoc = l->maxComputeWorkGroupInvocations;
    f->align = max_u32((uint32_t)l->minStorageBufferOffsetAlignment, 4);
    f->ualign = max_u32((uint32_t)l->minUniformBufferOffsetAlignment, 4);
    f->max_allocs = l->maxMemoryAllocationCount;
    f->float_controls = has_float_controls(b);
    f->int_dot = has_int_dot(b, &f->int_dot_fast);
    if (f->portable) {
        /* the largest offset alignments Vulkan allows; no float controls (Vulkan 1.2), no
         * integer dot products (1.3) */
        f->align = max_u32(f->align, 256);
        f->ualign = max_u32(f->ualign, 256);
        f->float_controls = 0;
        f->int_dot = f->int_dot_fast = 0;
        f->timestamps = 0;
        f->subgroup_arith = 0;
        f->storage16 = 0;
        f->max_range = min_u64(f->max_range, (uint64_t)1 << 27);
        f->max_alloc = min_u64(f->max_alloc, (uint64_t)1 << 30);
        f->max_shared = f->max_shared < 16384 ? f->max_shared : 16384;
        f->max_invoc = f->max_invoc < 128 ? f->max_invoc : 128;
        f->max_allocs = f->max_allocs < 4096 ? f->max_allocs : 4096;
    }
    /* references address a binding in 29 bits of elements */
    f->max_range = min_u64(f->max_range, ((uint64_t)VK_REF_MAX_ELEM + 1) * 4);
}

static ex_status make_device(vk_backend *b)
{
    float prio = 1.0f;
    VkDeviceQueueCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                  .queueFamilyIndex = b->qfamily,
                                  .queueCount = 1,
                                  .pQueuePriorities = &prio};
    const char *exts[3];
    uint32_t next = 0;
    /* required on MoltenVK and other non-conformant implementations that expose it */
    if (has_device_ext(b->phys, "VK_KHR_portability_subset"))
        exts[next++] = "VK_KHR_portability_subset";
    if (b->feat.float_controls)
        exts[next++] = VK_KHR_SHADER_FLOAT_CONTROLS_EXTENSION_NAME;
    VkPhysicalDeviceShaderIntegerDotProductFeaturesKHR dot = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES_KHR,
        .shaderIntegerDotProduct = VK_TRUE};
    if (b->feat.int_dot)
        exts[next++] = VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME;
    VkDeviceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                             .pNext = b->feat.int_dot ? &dot : NULL,
                             .queueCreateInfoCount = 1,
                             .pQueueCreateInfos = &qi,
                             .enabledExtensionCount = next,
                             .ppEnabledExtensionNames = exts};
    ex_status st = vk_check(b, vkCreateDevice(b->phys, &ci, NULL, &b->dev), "vkCreateDevice");
    if (st != EX_OK) {
        b->dev = VK_NULL_HANDLE;
        return st;
    }
    vkGetDeviceQueue(b->dev, b->qfamily, 0, &b->queue);
    VkCommandPoolCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                  .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                  .queueFamilyIndex = b->qfamily};
    st = vk_check(b, vkCreateCommandPool(b->dev, &pi, NULL, &b->pool), "command pool");
    if (st == EX_OK)
        vk_count_object(b, 1);
    VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                      .commandPool = b->pool,
                                      .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                      .commandBufferCount = 1};
    if (st == EX_OK)
        st = vk_check(b, vkAllocateCommandBuffers(b->dev, &ai, &b->xfer), "command buffer");
    VkFenceCreateInfo fi = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if (st == EX_OK)
        st = vk_check(b, vkCreateFence(b->dev, &fi, NULL, &b->fence), "fence");
    if (st == EX_OK)
        vk_count_object(b, 2);
    return st;
}

/* ---- the interface ---- */

static void vk_close(void *impl)
{
    vk_backend *b = impl;
    if (!b)
        return;
    if (b->dev) {
        vkDeviceWaitIdle(b->dev);
        vkx_destroy(b);
        vkm_destroy(b);
        if (b->fence)
            vkDestroyFence(b->dev, b->fence, NULL);
        if (b->pool)
            vkDestroyCommandPool(b->dev, b->pool, NULL);
        vkDestroyDevice(b->dev, NULL);
    }
    if (b->messenger) {
        PFN_vkDestroyDebugUtilsMessengerEXT destroy =
            (PFN_vkDestroyDebugUtilsMessengerEXT)(vkGetInstanceProcAddr(
                b->inst, "vkDestroyDebugUtilsMessengerEXT"));
        if (destroy)
            destroy(b->inst, b->messenger, NULL);
    }
    if (b->inst)
        vkDestroyInstance(b->inst, NULL);
    free(b);
}

static const char *vk_error(void *impl)
{
    return ((vk_backend *)impl)->msg;
}

static ex_status vk_buffer_alloc(void *impl, uint64_t bytes, ex_buffer **out)
{
    vk_backend *b = impl;
    b->msg[0] = '\0';
    vk_buffer *buf = NULL;
    ex_status st = vkm_alloc(b, bytes, &buf);
    *out = (ex_buffer *)buf;
    return validation_check(b, st);
}

static void vk_buffer_free(void *impl, ex_buffer *buf)
{
    vkm_free((vk_backend *)impl, (vk_buffer *)buf);
}

static ex_status vk_upload_checked(void *impl, ex_buffer *buf, uint64_t off, const void *src,
                                   uint64_t n)
{
    vk_backend *b = impl;
    b->msg[0] = '\0';
    return validation_check(b, vk_upload(impl, buf, off, src, n));
}

static ex_status vk_download_checked(void *impl, ex_buffer *buf, uint64_t off, void *dst,
                                     uint64_t n)
{
    vk_backend *b = impl;
    b->msg[0] = '\0';
    return validation_check(b, vk_download(impl, buf, off, dst, n));
}

static ex_status vk_copy_checked(void *impl, ex_buffer *dst, uint64_t doff, ex_buffer *src,
                                 uint64_t soff, uint64_t n)
{
    vk_backend *b = impl;
    b->msg[0] = '\0';
    return validation_check(b, vk_copy(impl, dst, doff, src, soff, n));
}

static ex_status vk_fill_checked(void *impl, ex_buffer *buf, uint64_t off, uint64_t n,
                                 uint32_t pattern)
{
    vk_backend *b = impl;
    b->msg[0] = '\0';
    return validation_check(b, vk_fill(impl, buf, off, n, pattern));
}

static ex_status vk_compute(void *impl, const ex_node_exec *nodes, int64_t n, double *node_ms)
{
    vk_backend *b = impl;
    b->msg[0] = '\0';
    return validation_check(b, vkx_compute(b, nodes, n, node_ms));
}

static ex_status vk_record(void *impl, const ex_node_exec *nodes, int64_t n, ex_recording **out)
{
    vk_backend *b = impl;
    b->msg[0] = '\0';
    *out = calloc(1, sizeof **out);
    if (!*out) {
        snprintf(b->msg, sizeof b->msg, "vulkan: out of host memory");
        return EX_ERR_NOMEM;
    }
    **out = (ex_recording){nodes, n, VK_NULL_HANDLE, 0};
    return EX_OK;
}

static ex_status vk_replay(void *impl, ex_recording *r)
{
    vk_backend *b = impl;
    b->msg[0] = '\0';
    return validation_check(b, vkx_replay(b, r));
}

static void vk_forget(void *impl, ex_recording *r)
{
    if (r)
        vkx_forget(impl, r);
    free(r);
}

/* Every submission waits for its fence; only uploads may still be pending. */
static ex_status vk_synchronize(void *impl)
{
    vk_backend *b = impl;
    b->msg[0] = '\0';
    return validation_check(b, vkm_submit_wait(b, NULL));
}

static uint64_t vk_host_syncs(void *impl)
{
    return ((vk_backend *)impl)->host_syncs;
}

static void vk_counters(void *impl, ex_backend_counters *out)
{
    const vk_counts *c = &((vk_backend *)impl)->counts;
    *out = (ex_backend_counters){.device_allocations = c->allocations,
                                 .device_bytes = c->bytes,
                                 .device_objects = c->objects,
                                 .created = c->created,
                                 .descriptor_sets = c->sets,
                                 .dispatches = c->dispatches,
                                 .barriers = c->barriers,
                                 .inexact_bindings = c->inexact,
                                 .record_ms = c->record_ms};
}

static const ex_backend_iface vk_iface = {
    vk_close,
    vk_error,
    vk_buffer_alloc,
    vk_buffer_free,
    vk_upload_checked,
    vk_download_checked,
    vk_copy_checked,
    vk_fill_checked,
    vk_compute,
    vk_synchronize,
    vk_host_syncs,
    NULL, /* set_alloc_hook: not covered (backend.h) */
    vk_counters,
    NULL, /* set_comm: sums go through the host */
    NULL, /* groups: every node is a dispatch of its own */
    vk_record,
    vk_replay,
    vk_forget,
};

static const char *type_name(VkPhysicalDeviceType t)
{
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "CPU";
    default: return "other";
    }
}

static uint64_t device_memory(vk_backend *b)
{
    VkPhysicalDeviceMemoryProperties mp;
    vkGetPhysicalDeviceMemoryProperties(b->phys, &mp);
    uint64_t best = 0;
    for (uint32_t i = 0; i < mp.memoryHeapCount; i++)
        if ((mp.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) &&
            mp.memoryHeaps[i].size > best)
            best = mp.memoryHeaps[i].size;
    return best;
}

/* The device in words (exapt info): its name, then its type, version, profile and
 * features. The name is cut short where the whole would not fit, never the features:
 * callers look for "NaN/Inf preserved" at the end. */
static void device_line(const vk_backend *b, char *out, size_t len)
{
    const vk_features *f = &b->feat;
    char tail[256];
    snprintf(tail, sizeof tail, " (%s, Vulkan %u.%u%s; subgroup %u%s%s%s%s; NaN/Inf %s)",
             type_name(b->props.deviceType), VK_API_VERSION_MAJOR(b->props.apiVersion),
             VK_API_VERSION_MINOR(b->props.apiVersion), f->portable ? ", portable profile" : "",
             f->subgroup_size, f->subgroup_arith ? " arith" : "", f->storage16 ? ", 16-bit" : "",
             f->timestamps ? ", timestamps" : "",
             !f->int_dot       ? ""
             : f->int_dot_fast ? ", int8 dot (accelerated)"
                               : ", int8 dot",
             f->float_controls ? "preserved" : "not guaranteed");
    size_t t = strlen(tail), name = strlen(b->props.deviceName);
    t = t < len ? t : len - 1;
    name = name < 32 ? name : 32;
    name = name < len - 1 - t ? name : len - 1 - t;
    memcpy(out, b->props.deviceName, name);
    memcpy(out + name, tail, t);
    out[name + t] = '\0';
}

static void fill_caps(vk_backend *b, ex_backend_caps *caps)
{
    const vk_features *f = &b->feat;
    memset(caps, 0, sizeof *caps);
    snprintf(caps->name, sizeof caps->name, "vulkan");
    device_line(b, caps->device, sizeof caps->device);
    caps->memory_bytes = device_memory(b);
    caps->max_binding_bytes = f->max_range & ~(uint64_t)(VK_ALIGN - 1);
    caps->max_alloc_bytes = min_u64(f->max_alloc, caps->max_binding_bytes);
    caps->features = f->timestamps ? EX_FEAT_TIMESTAMPS : 0u;
    /* A step runs in rounds with a full barrier between them (vulkan/order.c), and a
     * write into memory read a little earlier holds its node, and its chain, a round or
     * more behind where the data would put it: reuse waits for 384 tensors, which costs
     * a few percent more arena and keeps the step near its speed with no reuse at all
     * (bench/results/README.md, "Vulkan tuning"). */
    caps->reuse_after = 384;
}

ex_status ex__vulkan_backend_create(int automatic, const ex_backend_iface **iface, void **impl,
                                    ex_backend_caps *caps, char *msg, size_t msg_len)
{
    /* checked before the instance is made: bad arguments must not cost a driver load */
    if (!iface || !impl || !caps) {
        if (msg && msg_len)
            snprintf(msg, msg_len, "vulkan: NULL %s", !iface ? "iface" : !impl ? "impl" : "caps");
        return EX_ERR_ARG;
    }
    vk_backend *b = calloc(1, sizeof *b);
    if (!b) {
        if (msg && msg_len)
            snprintf(msg, msg_len, "vulkan: out of host memory");
        return EX_ERR_NOMEM;
    }
    ex_status st = make_instance(b);
    if (st == EX_OK)
        st = pick_device(b, automatic);
    if (st == EX_OK) {
        detect(b);
        st = make_device(b);
    }
    if (st == EX_OK)
        st = vkm_init(b);
    if (st == EX_OK)
        st = vkx_init(b);
    if (st == EX_OK)
        st = validation_check(b, EX_OK);
    if (st != EX_OK) {
        if (msg && msg_len)
            snprintf(msg, msg_len, "%s", b->msg[0] ? b->msg : "vulkan: cannot start");
        vk_close(b);
        return st;
    }
    fill_caps(b, caps);
    *iface = &vk_iface;
    *impl = b;
    return EX_OK;
}

/* ---- listing devices (exapt info) ---- */

ex_status ex__vulkan_devices(char *buf, size_t len)
{
    if (!buf || len == 0)
        return EX_ERR_ARG;
    buf[0] = '\0';
    vk_backend *b = calloc(1, sizeof *b);
    if (!b)
        return EX_ERR_NOMEM;
    ex_status st = make_instance(b);
    uint32_t n = 0;
    VkPhysicalDevice devs[16];
    if (st == EX_OK) {
        n = 16;
        VkResult r = vkEnumeratePhysicalDevices(b->inst, &n, devs);
        st = r == VK_INCOMPLETE ? EX_OK : vk_check(b, r, "devices");
    }
    size_t used = 0;
    for (uint32_t i = 0; st == EX_OK && i < n && used < len; i++) {
        VkPhysicalDeviceProperties pr;
        vkGetPhysicalDeviceProperties(devs[i], &pr);
        int w = snprintf(buf + used, len - used, "%s%u: %s (%s, Vulkan %u.%u)%s", i ? "\n" : "", i,
                         pr.deviceName, type_name(pr.deviceType),
                         VK_API_VERSION_MAJOR(pr.apiVersion), VK_API_VERSION_MINOR(pr.apiVersion),
                         is_gpu(pr.deviceType) ? "" : " [only when asked for]");
        used += w > 0 ? (size_t)w : 0;
    }
    if (st != EX_OK)
        snprintf(buf, len, "%s", b->msg);
    vk_close(b);
    return st;
}
