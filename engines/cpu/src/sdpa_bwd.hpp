// SDPA backward on the CPU: what the driver (sdpa_bwd.cpp) shares with the kernels. The kernels
// (sdpa_bwd.inl) are compiled once per ISA, each build in a file of its own with that ISA's flags
// (sdpa_bwd_base.cpp, sdpa_bwd_avx2.cpp, sdpa_bwd_avx512.cpp), so that no vector is passed between
// functions built for different ISAs: GCC passes a 64-byte vector in a register in an AVX-512
// function and in memory elsewhere, and an -O0 build, which inlines nothing, computed the AVX-512
// backward wrong when its helpers carried target attributes inside a baseline file.
#pragma once

#include "extra_ops.hpp"

#include <cstdint>

namespace hipdnn_cpu
{
namespace sdpa_bwd
{

constexpr int64_t BQ = 128; // queries per tile (128, not 64: 0.5-3.5 % faster, fp32 S = 512-2048)
constexpr int64_t BK = 64; // keys per tile

struct Run
{
    const SdpaBwdProblem* p = nullptr;
    int64_t b = 0, hq = 0, hk = 0, sq = 0, skv = 0, d = 0, dv = 0, group = 1, dp = 0, dvp = 0;
    int64_t nkb = 0, chunks = 1;
    // q, dO, k read in place (fp32, unit last stride, width a multiple of W)
    bool q_in = false, do_in = false, k_in = false;
    // Per call, [b][hq][sq]: lse (log2 units, +inf on dead rows), delta, and the log2 of the row's
    // softmax sum where the lse cannot hold it (0 elsewhere; see row_stats): P = exp2(S' - lse - lgl).
    float* lse = nullptr;
    float* del = nullptr;
    float* lgl = nullptr;
    // dQ accumulators: chunk c's row (b, h, i) at dqa + c*dq_part + ((b*hq + h)*sq + i)*dq_ld;
    // null when dQ itself accumulates (dq_ld is then its row stride).
    float* dqa = nullptr;
    int64_t dq_ld = 0, dq_part = 0;
    // Per-thread scratch (floats): Kt [dp][BK], Vt [dvp][BK], K rows [BK][dp],
    // Q rows [BQ][dp], dO rows [BQ][dvp], S and dP [BQ][BK], dK^T [dp][BK], dV^T [dvp][BK].
    int64_t off_kt = 0, off_vt = 0, off_kr = 0, off_qr = 0, off_dor = 0, off_s = 0, off_dp = 0, off_dk = 0,
            off_dv = 0, total = 0;
};

} // namespace sdpa_bwd

// Per ISA build: the main pass's work item w, exact_rows' item bh (one (batch, query head)), and
// the row pre- and post-passes over rows [i0, i1) of head (b, h). Only the baseline build's row
// passes are called (they are scalar code).
#define HIPDNN_BWD_DECLARE(ns)                                                                                         \
    namespace ns                                                                                                       \
    {                                                                                                                  \
    void run_item(const sdpa_bwd::Run& r, int64_t w, float* ws);                                                       \
    void run_exact_rows(const sdpa_bwd::Run& r, int64_t bh, float* ws);                                                \
    void run_row_stats(const sdpa_bwd::Run& r, int64_t b, int64_t h, int64_t i0, int64_t i1);                          \
    void run_dq_rows(const sdpa_bwd::Run& r, int64_t b, int64_t h, int64_t i0, int64_t i1);                            \
    }
HIPDNN_BWD_DECLARE(bwd_base)
HIPDNN_BWD_DECLARE(bwd_avx2)
HIPDNN_BWD_DECLARE(bwd_avx512)
#undef HIPDNN_BWD_DECLARE

} // namespace hipdnn_cpu
