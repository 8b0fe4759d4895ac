// Variants of pool/pool.comp, shared by the shader and vulkan/pool.c.
#define PL_AVG 0      // average over the window's in-bounds elements, one per output
#define PL_MAX 1      // first maximum of the window, one per output
#define PL_AVG_BWD 2  // dx: a gather of dy / count over the windows holding each input
#define PL_MAX_AT 3   // where each window's first maximum lies (ih * w + iw), into scratch
#define PL_MAX_BWD 4  // dx: a gather of the dy whose window maximum is this input
#define PL_GAP 5      // global average: one workgroup per (n, c) plane, a fixed tree
#define PL_COLS 8     // added to PL_AVG, PL_MAX, PL_AVG_BWD: 3x3, stride 1, padding 1 by columns
#define PL_COLS_UNITS 262144 // (plane, band, column) units the column walk aims at at least
