// Variants of elementwise/ew.comp, shared by the shader and vulkan/elementwise.c.
#define EW_ADD 0
#define EW_SUB 1
#define EW_MUL 2
#define EW_SCALE 3
#define EW_AXPY 4
#define EW_RELU 5
#define EW_RELU_BWD 6
#define EW_FILL 7
#define EW_COPY 8
#define EW_COPY_RESHAPE 9
#define EW_DROP_PATH 10
