// Internal interface of the flash-style SDPA forward kernels (sdpa_fwd.inl).
//
// The kernel source is compiled once per ISA, into its own namespace:
// sdpa_base (the library's baseline ISA, 4-lane vectors), and on x86-64
// sdpa_avx2 (-mavx2 -mfma -mf16c, 8 lanes), sdpa_avx512 (-mavx512f/dq/vl/bw,
// 16 lanes), sdpa_avx512bf16 (the AVX-512 build plus VDPBF16PS products for bf16
// q, k and v) and sdpa_amx (the AVX-512 build plus AMX-BF16 tiles for bf16 q, k
// and v: see amx_item); each runs only when the CPU has its instructions
// (cpu_isa.cpp).
// cpu_kernels.cpp owns the thread loop and calls the plan's build.
//
// Two kernels per build:
//   run_item       the panel kernel for prefill: queries along the vector lanes
//                  (panels of 3, or 2, vectors of queries), keys in 64-key tiles;
//   run_rows_item  the rows kernel for few queries (decode, Sq <= kSdpaRowsMaxSq):
//                  up to kSdpaRowsMax query rows of one kv head (the GQA group's
//                  heads x the queries) against keys streamed once, keys along
//                  the lanes for q.k and head dims along the lanes for p.v, so
//                  no lane is wasted on absent queries. A kv head's keys may be
//                  split into chunks run as separate items (when there are too
//                  few kv heads for the threads); their partial results are
//                  merged afterwards by rows_merge.
#pragma once

#include "cpu_kernels.hpp"

namespace hipdnn_cpu
{

constexpr int64_t kSdpaBk = 64;     // keys per tile
constexpr int64_t kSdpaRowsMax = 16; // query rows per rows-kernel item
constexpr int64_t kSdpaRowsMaxSq = 16; // the rows kernel serves Sq up to this
constexpr int64_t kSdpaAmxQw = 32;     // queries per panel of the AMX kernel (two 16-column tiles)
// Panels per work item of the AMX kernel: at most kSdpaAmxPanels, and as many as keep the item's
// queries and output (Qp and Ot: 64 d + 128 dv bytes a panel, padded) within kSdpaAmxPanelBytes
// (each item transposes every V tile it reads, so more panels share that work: 16 rather than 8 was
// 3-6 % faster at S = 512-2048, D = 128; 32 rather than 16 another 2-3 % back to back and 6.6 % on a
// cold call at S = 1024, D = 128, where an item then serves a whole head), down to kSdpaAmxMinPanels
// where that leaves too few items for the threads. Only plans whose q, k and v are bf16 reserve it
// (sdpa_scratch_per_thread).
constexpr int64_t kSdpaAmxPanels = 32;
constexpr int64_t kSdpaAmxMinPanels = 4;
constexpr int64_t kSdpaAmxPanelBytes = int64_t(768) << 10;
constexpr int64_t kSdpaAmxBk = 256;    // keys per tile of the AMX kernel

// Widest panel (queries) any build of each vector width runs, and panels per work item of the panel
// kernel: an item's K and V tiles (widened first when fp16 / bf16) serve that many panels from the
// caches. (4 panels rather than 2 for fp32 on AVX-512: 0-3 % faster at S = 512-2048, D = 128, B = 1,
// H = 8 on the 2-core Xeon.) AVX-512 panels are up to 4 vectors wide, where the plan says so
// (panel_vectors_for_plan): their 6-row x 4-vector micro kernel makes 10 operand loads per 24 FMAs
// against the 8 x 3 kernel's 11; the same products in L1 ran a median 7 % faster (2-21 %) alternated
// on 2 cores of a Xeon, and whole calls 1-6 % faster (bench/results/cpu_sdpa_ab_panels4_xeon.json), but
// Zen 4 causal calls ran up to 7 % slower in the wider panels' diagonal waste.
constexpr int64_t sdpa_qw(int lanes)
{
    return (lanes == 16 ? 4 : 3) * lanes;
}
constexpr int64_t kSdpaPanels = 4;

// Per-call constants of one SDPA run.
struct SdpaRun
{
    const SdpaProblem* p = nullptr;
    int64_t b = 0, hq = 0, hk = 0, sq = 0, skv = 0, d = 0, dv = 0, group = 1;
    int lanes = 8; // vector width of the build that runs (4, 8 or 16)
    bool amx = false;    // the AMX build's tile kernel serves the panels (bf16 q, k, v; qw = kSdpaAmxQw)
    bool bf16dot = false; // the AVX512_BF16 build's dot-product panels serve them (bf16 q, k, v)
    // Panel kernel.
    int64_t qw = 24;    // queries per panel: 2 to max_vectors vectors
    int64_t max_vectors = 3; // widest panel this call takes, in vectors (the plan's, capped by the build)
    int64_t tail_qw = 0; // the last query block's panel width where it differs from qw (0: none)
    int64_t panels = 1; // panels per work item at this call's shapes
    int64_t max_panels = 0; // a lower cap on panels than the kernel's own (0: none)
    int64_t nqb = 0;    // query blocks per (b, h)
    // Rows kernel.
    bool rows = false;  // the rows kernel serves this call
    int64_t nrows = 0;  // query rows per (b, kv head): group x sq
    int64_t rb = 0;     // rows per item
    int64_t nrb = 0;    // row blocks per (b, kv head)
    int64_t chunks = 1; // key chunks per row block (> 1: partial results, merged after)
    int64_t chunk = 0;  // keys per chunk (a multiple of kSdpaBk)
    bool prefetch_kv = false; // prefetch K and V rows ahead in software (sdpa_fwd.inl, kRowsPrefetchKeys)
    int64_t dp = 0, dvp = 0; // head dims rounded up to whole vectors
    // Scratch layout (floats from the thread's slice). Panel kernel:
    int64_t off_qt = 0, off_ot = 0, off_st = 0, off_m = 0, off_l = 0, off_kb = 0, off_vb = 0;
    // rows kernel (its own slots; off_part is the partial result of the item whose index is this
    // slice's, written by whichever thread runs that item):
    int64_t off_rq = 0, off_ro = 0, off_rs = 0, off_rm = 0, off_rl = 0, off_ra = 0, off_rk = 0, off_rv = 0;
    int64_t off_part = 0;
    // AMX panel kernel (off_qt .. off_vb hold its bf16 Q, K and V copies; see sdpa_plan_layout):
    int64_t dpa = 0, dva = 0;        // head dims padded to whole tiles (32 for d, 16 for dv)
    int64_t off_pb = 0, off_vt = 0;  // P in the tiles' pair layout; V transposed
    int64_t total = 0;
};

// Fills the layout fields of run (b..dv and lanes set) for both kernels, with panels of qw queries
// (0: the width that suits run.sq); returns floats needed per thread.
int64_t sdpa_plan_layout(SdpaRun& run, int64_t qw);

// Per ISA build: the panel kernel's item w, the rows kernel's item w, and the merge of row block
// `block`'s chunks (slices: the scratch, per_thread bytes apart).
#define HIPDNN_SDPA_DECLARE(ns)                                                                                        \
    namespace ns                                                                                                       \
    {                                                                                                                  \
    void run_item(const SdpaRun& run, int64_t w, float* ws);                                                           \
    void run_rows_item(const SdpaRun& run, int64_t w, float* ws, float* part);                                         \
    void rows_merge(const SdpaRun& run, int64_t block, char* slices, size_t per_thread);                               \
    }
HIPDNN_SDPA_DECLARE(sdpa_base)
HIPDNN_SDPA_DECLARE(sdpa_avx2)
HIPDNN_SDPA_DECLARE(sdpa_avx512)
HIPDNN_SDPA_DECLARE(sdpa_avx512bf16)
HIPDNN_SDPA_DECLARE(sdpa_amx)
#undef HIPDNN_SDPA_DECLARE

} // namespace hipdnn_cpu
