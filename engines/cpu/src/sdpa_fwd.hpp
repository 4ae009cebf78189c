// Internal interface of the flash-style SDPA forward kernel (sdpa_fwd.inl).
//
// The kernel source is compiled twice, into two namespaces: sdpa_base (the
// library's baseline ISA) and, on x86-64, sdpa_avx2 (compiled with
// -mavx2 -mfma -mf16c and only called when the CPU has them). cpu_kernels.cpp
// owns the OpenMP loop and picks one at run time.
#pragma once

#include "cpu_kernels.hpp"

namespace hipdnn_cpu
{

// Fixed blocking shared by both builds (they must agree on scratch sizes).
constexpr int64_t kSdpaQw = 24;     // queries per panel: 3 vectors of 8 lanes
constexpr int64_t kSdpaPanels = 4;  // panels per work item (96 queries)
constexpr int64_t kSdpaBk = 64;     // keys per tile

// Per-call constants of one SDPA run.
struct SdpaRun
{
    const SdpaProblem* p = nullptr;
    int64_t b = 0, hq = 0, hk = 0, sq = 0, skv = 0, d = 0, dv = 0, group = 1;
    int64_t panels = 1; // panels per work item at this call's shapes
    int64_t nqb = 0;    // query blocks per (b, h)
    // scratch layout (floats)
    int64_t off_qt = 0, off_ot = 0, off_st = 0, off_m = 0, off_l = 0, off_kb = 0, off_vb = 0, total = 0;
};

// Fills the layout fields of run (b..dv set); returns floats needed per thread.
int64_t sdpa_plan_layout(SdpaRun& run);

namespace sdpa_base
{
void run_item(const SdpaRun& run, int64_t w, float* ws);
}
namespace sdpa_avx2
{
void run_item(const SdpaRun& run, int64_t w, float* ws);
}

} // namespace hipdnn_cpu
