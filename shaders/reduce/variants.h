// Variants of reduce/reduce.comp, shared by the shader and vulkan/reduce.c.
#define RED_SUM 0
#define RED_MEAN 1
#define RED_MAX 2
#define RED_SUMSQ 3    // sum of squares (GRAD_NORM's partials)
#define RED_SQRT_SUM 4 // square root of the sum (GRAD_NORM's last pass)
#define RED_LANES 8u   // accumulators (loads in flight) an invocation keeps
