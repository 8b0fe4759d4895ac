// Variants and sizes of the NAS shaders, shared with vulkan/nas.c.
#define MIX_FWD 0     // mix.comp: dst = sum of the group's active candidates
#define MIX_FWD_ACC 1 // mix.comp: dst += the same (groups after the first)
#define MIX_DOT 2     // mix.comp: per chunk of dy, its dot with each active candidate
#define MIX_GROUP 12  // candidates one mix.comp dispatch takes (push-constant room)
#define MIX_CHUNK 4096 // elements of dy per MIX_DOT partial (a workgroup's)
#define MIX_SUB 512    // of them at a time (4 per invocation)
#define MIX_TAB 3     // words per candidate in the table: coefficient, active, weight index
// words from one candidate's MIX_DOT partials to the next: nch rounded up to 256 bytes, so
// every group's rows have bytes of their own
#define MIX_ROW(nch) (((nch) + 63u) & ~63u)
#define ROW_GUMBEL 0  // rows.comp
#define ROW_GUMBEL_BWD 1
#define ROW_HARDMAX 2
#define ROW_ENTROPY 3
#define ROW_ENTROPY_BWD 4
#define ROW_TOPK 5
