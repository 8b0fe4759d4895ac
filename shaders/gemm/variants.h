// Variants and sizes of gemm/pw.comp and gemm/wgrad.comp, shared with vulkan/gemm.c.
#define PW_CT32 1    // pw.comp: 32 output channels per workgroup (16 otherwise)
#define WG_TI32 1    // wgrad.comp: tiles of 32 rows of dw (dy's channels; 16 otherwise)
#define WG_TJ32 2    // wgrad.comp: tiles of 32 columns of dw (x's channels; 16 otherwise)
#define WG_SUM 4     // wgrad.comp: dw = the ranges' partials added in order
#define WG_PARTS 256 // wgrad.comp: ranges of positions at most
