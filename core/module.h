/* Backend modules: the shared library's CUDA and Vulkan backends live in modules of their
 * own (libexapt-cuda.so, libexapt-vulkan.so), loaded when one is opened, so the library
 * itself loads on a machine without the CUDA runtime or a Vulkan loader. */
#ifndef EXAPT_CORE_MODULE_H
#define EXAPT_CORE_MODULE_H

#include <stddef.h>

/** The address of `symbol` in the backend module `file`, loaded from the folder named by
 *  EXAPT_MODULE_PATH or else the folder this library was loaded from. NULL when the module
 *  or the symbol cannot be loaded; msg then says which and why (the dynamic loader's
 *  words: a missing libcudart.so names it). */
void *ex__module_symbol(const char *file, const char *symbol, char *msg, size_t len);

#endif
