// Variants of conv/conv.comp, shared by the shader and vulkan/conv.c.
#define CV_FWD 0         // y = conv(x, w): one invocation per output element
#define CV_BWD_DATA 1    // dx from dy and w: one invocation per input element, a gather
#define CV_FILTER_PART 2 // dw's share of a chunk of output rows: one invocation per (chunk, tap)
#define CV_FILTER_SUM 3  // dw: one invocation per tap adds the chunks' shares in order
#define CV_DEPTHWISE 4   // added to the above: the depthwise form
