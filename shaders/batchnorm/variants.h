// Variants of batchnorm/channel.comp and batchnorm/pointwise.comp, shared with vulkan/batchnorm.c.
#define BN_SEG_STATS 0 // channel.comp: a segment's mean and squared deviations, into part
#define BN_SEG_RED 1   // channel.comp: a segment's sums of dy * xhat and of dy, into part
#define BN_FIN_STATS 2 // channel.comp: a channel's segments merged, running statistics moved
#define BN_FIN_RED 3   // channel.comp: a channel's segment sums added
#define BN_EVAL 4      // channel.comp: mean and invstd from the running statistics
#define BN_ONE_STATS 5 // channel.comp: BN_SEG_STATS, the last segment of a channel finishing it
#define BN_ONE_RED 6   // channel.comp: BN_SEG_RED, the same
#define BN_FINISH 7    // channel.comp: a synchronized batch norm's finish from its moments
#define BN_SEG 2048    // elements of a channel per segment (one workgroup's share)
#define BN_PER 16      // of them per invocation (BN_SEG / 128), held in registers
#define BN_APPLY 0     // pointwise.comp: (x - mean) * invstd * gamma + beta
#define BN_DATA 1      // pointwise.comp: dx
#define BN_TRAIN 1u    // pointwise.comp's flags: BN_DATA in training
#define BN_XHAT 2u     // pointwise.comp's flags: x is xhat itself (ip1 of the backward ops)
#define BN_QUAD 4u     // pointwise.comp's flags: 4 neighbours of a row an invocation
#define BN_RANKS 8     // pointwise.comp's flags: R (BN_DATA's count multiplier) from this bit
