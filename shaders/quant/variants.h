// Variants of the quant/ shaders, shared by them and vulkan/quant.c.
// quant/ew.comp: the element-wise ops
#define QE_QUANTIZE 0       // f32 x -> i8
#define QE_DEQUANTIZE_I8 1  // i8 x -> f32
#define QE_DEQUANTIZE_I32 2 // i32 x -> f32
#define QE_REQUANTIZE_I8 3  // i8 x -> i8
#define QE_REQUANTIZE_I32 4 // i32 x -> i8
#define QE_QADD 5           // i8 a, b -> i8
#define QE_QRELU 6          // i8 x -> i8
#define QE_QCONCAT 7        // one part of a concatenation into its channels of dst
// quant/conv.comp: every i32 sum of products
#define QC_DENSE 0     // QCONV2D, and QPWCONV and QLINEAR as 1x1 kernels
#define QC_DEPTHWISE 1 // QDWCONV2D
// quant/convdot.comp only: QC_DENSE with packed 4x8-bit dot products (a device with
// shaderIntegerDotProduct enabled, at least 4 input channels)
#define QC_DENSE_DOT 2
// added to one of the three: the requantize fused in (a 4th source, the multiplier), i8 dst;
// the words of one plane, 4 channels an invocation (quant/conv.glsl, rows())
#define QC_RQ 4
// added to QC_RQ: one channel an invocation (dense, where 4 would straddle images)
#define QC_RQ_ONE 8
// added to QC_RQ: the words at a plane's edge, each byte summed on its own (edges())
#define QC_RQ_EDGE 16
// quant/pool.comp
#define QP_MAX 0 // QMAX_POOL
#define QP_AVG 1 // QAVG_POOL
#define QP_GAP 2 // QGLOBAL_AVG_POOL of planes of 128 pixels or more: a workgroup per 4 planes
