// Variants of conv/conv.comp, shared by the shader and vulkan/conv.c.
#define CV_FWD 0       // y = conv(x, w): one invocation per output element
#define CV_BWD_DATA 1  // dx from dy and w: one invocation per input element, a gather
#define CV_FILTER 2    // dw from x and dy: one workgroup per filter tap, a fixed tree
