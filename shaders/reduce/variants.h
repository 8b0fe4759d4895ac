// Variants of reduce/reduce.comp, shared by the shader and vulkan/reduce.c.
#define RED_SUM 0
#define RED_MEAN 1
#define RED_MAX 2
