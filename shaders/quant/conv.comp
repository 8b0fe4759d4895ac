// Every int8 sum of products with 32-bit integer arithmetic, which every device has
// (quant/conv.glsl); quant/convdot.comp is the same with packed dot products.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "quant/conv.glsl"
