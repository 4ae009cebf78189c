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
// Keys per block of the AMX build: each block streams the head's dQ accumulators, Q and dO rows and
// their transposes once, so 128 halves that traffic against 64 (bf16, B=1 H=8 D=128 S=2048 on 2
// cores: 1024-1045 -> 1130-1179 GFLOP/s). 256 gained 8 % more there but lost 8 % causal at S=1024
// D=64 and doubles the scratch (~0.9 MB a thread at D=128).
constexpr int64_t ABK = 128;

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
    // The AMX build (sdpa_bwd_amx.cpp: bf16 q, k, v and dO, head dims multiples of 32) reads Q and dO
    // transposed in chunks of 32 queries, bf16 [b][hq][sqp/32][d][32] and [b][hq][sqp/32][dv][32] (sqp:
    // Sq rounded up to 32; queries past a batch's length zero), made by its pre-pass
    // (run_pair_transposes) into the call's allocation. The AVX512_BF16 build (sdpa_bwd_avx512bf16.cpp)
    // runs the same kernel, its products on VDPBF16PS instead of the tiles, with the same layouts.
    uint16_t* qt16 = nullptr;
    uint16_t* dot16 = nullptr;
    int64_t sqp = 0;
    // Its per-thread scratch (floats from the same base; it never runs beside the fp32 layout):
    // K in pairs of head dims [d/2][BK][2] and of keys [BK/2][d][2], V in pairs of head dims, padded
    // Q and dO rows [BQ][d] for a head's last block, a dQ strip [32][d] (fp32), P and dS in pairs of
    // queries [BQ/2][BK][2], dS rows [BQ][BK] (bf16), then S, dP (fp32 [BQ][BK]), dK^T, dV^T (fp32
    // [d][BK]). amx_total is 0 where the head dims rule the build out.
    int64_t a_kp = 0, a_kk = 0, a_vp = 0, a_q = 0, a_do = 0, a_dq = 0, a_pq = 0, a_dsq = 0, a_dsr = 0, a_s = 0,
            a_dp = 0, a_dk = 0, a_dv = 0, amx_total = 0;
};

} // namespace sdpa_bwd

// Per ISA build: the main pass's work item w, exact_rows' item bh (one (batch, query head)), and
// the row pre- and post-passes over rows [i0, i1) of head (b, h). The baseline build's row passes
// serve fp32 calls on every build; calls with fp16 / bf16 tensors run their own build's.
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
HIPDNN_BWD_DECLARE(bwd_avx512bf16)
HIPDNN_BWD_DECLARE(bwd_amx)
#undef HIPDNN_BWD_DECLARE

// The bf16 pairs builds (AMX tiles, AVX512_BF16 dot products): whether each was compiled (else its
// entries forward to the baseline build and the driver never picks it), and its pre-pass over rows
// [i0, i1) of head (b, h) (i0 a multiple of 32): Q^T and dO^T into r.qt16, r.dot16.
namespace bwd_amx
{
bool built();
void run_pair_transposes(const sdpa_bwd::Run& r, int64_t b, int64_t h, int64_t i0, int64_t i1);
} // namespace bwd_amx
namespace bwd_avx512bf16
{
bool built();
void run_pair_transposes(const sdpa_bwd::Run& r, int64_t b, int64_t h, int64_t i0, int64_t i1);
} // namespace bwd_avx512bf16

} // namespace hipdnn_cpu
