// Variants of batchnorm/channel.comp and batchnorm/pointwise.comp, shared with vulkan/batchnorm.c.
#define BN_STATS_TRAIN 0 // channel.comp: batch mean and invstd, running statistics moved
#define BN_STATS_EVAL 1  // channel.comp: mean and invstd from the running statistics
#define BN_RED 2         // channel.comp: sums of dy * xhat and of dy
#define BN_APPLY 0       // pointwise.comp: (x - mean) * invstd * gamma + beta
#define BN_DATA 1        // pointwise.comp: dx
