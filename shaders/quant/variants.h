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
// quant/pool.comp
#define QP_MAX 0 // QMAX_POOL
#define QP_AVG 1 // QAVG_POOL
#define QP_GAP 2 // QGLOBAL_AVG_POOL of planes of 128 pixels or more: a workgroup per 4 planes
