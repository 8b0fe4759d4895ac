// Variants of optim/update.comp, shared by the shader and vulkan/optim.c.
#define OPT_SGD 0
#define OPT_SGD_NESTEROV 1
#define OPT_ADAM 2
#define OPT_CLIP 3
