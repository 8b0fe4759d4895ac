// Variants and sizes of gemm/pw.comp and gemm/wgrad.comp, shared with vulkan/gemm.c.
#define PW_CT32 1    // pw.comp: 32 output channels per workgroup (16 otherwise)
#define PW_BN 2      // pw.comp: PWCONV_BN, the eval batch norm applied as y is stored
#define PW_RELU 4    // pw.comp: PWCONV_BN's ReLU on x as it is loaded
#define PW_FOLDED 8  // pw.comp: PW_BN with a and b folded into scratch already
#define PW_FOLD_A 16 // pw.comp: PWCONV_BN's a = invstd gamma per channel, into scratch
#define PW_FOLD_B 32 // pw.comp: PWCONV_BN's b = beta - mean a per channel, into scratch
#define WG_TI32 1    // wgrad.comp: tiles of 32 rows of dw (dy's channels; 16 otherwise)
#define WG_TJ32 2    // wgrad.comp: tiles of 32 columns of dw (x's channels; 16 otherwise)
#define WG_SUM 4     // wgrad.comp: dw = the ranges' partials added in order
#define WG_PARTS 256 // wgrad.comp: ranges of positions at most
