// Variants of conv/conv.comp, shared by the shader and vulkan/conv.c.
#define CV_FWD 0         // y = conv(x, w): one invocation per output element
#define CV_BWD_DATA 1    // dx from dy and w: one invocation per input element, a gather
#define CV_FILTER_PART 2 // dw's share of a chunk of output rows: one invocation per (chunk, tap)
#define CV_FILTER_SUM 3  // dw: one invocation per tap adds the chunks' shares in order
#define CV_DEPTHWISE 4   // added to the above: the depthwise form
#define CV_RELU 8        // added to CV_FWD and CV_FILTER_PART (depthwise): read max(x, 0)
#define CV_RELU_MASK 16  // dx = 0 where x <= 0: the fused ReLU's data gradient, after the pass
// dw.comp, the depthwise fast path: pass | geometry << 2, the geometry (square kernel
// k in {3, 5, 7}, stride s and dilation d in {1, 2} along both axes) as
// ((k - 3) / 2) * 4 + (s - 1) * 2 + (d - 1), so every loop over taps unrolls.
#define DW_FWD 0     // y from x: a tile of outputs per workgroup
#define DW_DATA 1    // dx from dy: a tile of dx per workgroup, a gather
#define DW_FILTER 2  // dw's partial over a channel's samples and tile, into scratch (or dw)
#define DW_FSUM 3    // dw: the partials added in order
#define DW_RELU 64   // added to DW_FWD and DW_FILTER: x staged as max(x, 0) (the fused ReLU)
#define DW_QUAD 128  // added to DW_FWD, DW_DATA, DW_FILTER: column quads (stride 1, "same")
#define DW_VEC4 256  // added to DW_QUAD: operands read and written as aligned 16-byte quads
#define DW_COL1 512  // added to DW_QUAD: one column an invocation (rows not of 4m columns)
#define DW_RH 4      // output rows per invocation (their inputs overlap: fewer shared loads)
#define DW_SMEM 2816 // floats of staged planes per workgroup (11 KB)
#define DW_MAXG 16   // planes per workgroup at most (small planes)
#define DW_PARTS 512 // workgroups the filter gradient aims at
#define DW_PART_MAX (1 << 22) // its partials at most (floats of scratch); more take conv.comp
