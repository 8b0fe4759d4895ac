// Variants of softmax/rows.comp, shared by the shader and vulkan/softmax.c.
#define SM_SOFTMAX 0
#define SM_LOG_SOFTMAX 1
#define SM_SOFTMAX_BWD 2
#define SM_LOG_SOFTMAX_BWD 3
#define SM_CE_ROWS 4   // per-row loss into d[r]
#define SM_CE_BWD 5
#define SM_ACC_ROWS 6  // per-row hit (1 or 0) into d[r]
