// The dense int8 sums of products (QC_DENSE_DOT) with packed 4x8-bit dot products:
// quant/conv.glsl with QC_INT_DOT. Its SPIR-V needs SPV_KHR_integer_dot_product and the
// DotProduct capabilities, so vulkan/quant.c runs it only where the device's
// shaderIntegerDotProduct is enabled (vulkan/backend.c); never in the portable profile.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_spirv_intrinsics : require
#define QC_INT_DOT 1
#include "quant/conv.glsl"
