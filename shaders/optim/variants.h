// Variants of optim/update.comp, shared by the shader and vulkan/optim.c.
#define OPT_SGD 0
#define OPT_SGD_NESTEROV 1
#define OPT_ADAM 2
#define OPT_CLIP 3
// SGD with CLIP's scaling folded in: the norm through v, max_norm in f2
#define OPT_SGD_CLIP 4
#define OPT_SGD_NESTEROV_CLIP 5
