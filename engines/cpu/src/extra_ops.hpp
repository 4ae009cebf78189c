// Interface of the CPU engine's SDPA backward, normalization and reduction
// kernels (sdpa_bwd.cpp, norms.cpp, reduction.cpp). Like cpu_kernels.hpp:
// fp32 compute, scratch from the caller's workspace; only the SDPA backward
// allocates, per call (see run_sdpa_bwd).
#pragma once

#include "cpu_kernels.hpp"

namespace hipdnn_cpu
{

// ------------------------------------------------------- SDPA backward ----
// fwd describes q, k, v, o and every mask / option exactly as for the forward
// (fwd.stats is the forward's natural-log LSE, fp32, [B, Hq, Sq, 1]); the
// gradients have the shapes of q, k, v. With P = exp(s - stats) on visible
// keys (0 elsewhere and on rows whose stats are -inf or past seq_len_q):
//   dV = P^T dO, dS = P (dO V^T - rowsum(dO o)), dQ = scale dS K,
//   dK = scale dS^T Q; dK and dV sum over the query heads of a GQA group.
struct SdpaBwdProblem
{
    SdpaProblem fwd;
    const void* dout = nullptr;
    DType dout_t = DType::F32;
    Shape dos;
    void *dq = nullptr, *dk = nullptr, *dv = nullptr;
    DType dq_t = DType::F32, dk_t = DType::F32, dv_t = DType::F32;
    Shape dqs, dks, dvs;
};

// bf16_qkvo: q, k, v and dO all bf16, the only calls the AMX build's tile kernel takes; only then is
// its scratch (larger at most head dims) reserved.
size_t sdpa_bwd_scratch_per_thread(int64_t d, int64_t dv, bool bf16_qkvo);

// Besides its per-thread scratch, a call allocates the query rows' statistics
// (8 bytes a row) and, unless dQ is fp32 with unit last stride and whole-vector
// head dims on enough heads, fp32 dQ accumulators: their size depends on the
// call's shapes, which a dynamic graph does not bound at build time.
enum class SdpaBwdStatus
{
    Ok,
    ScratchTooSmall, // a sizing bug guard, never expected
    AllocFailed      // *alloc_bytes: what could not be allocated (SIZE_MAX: past size_t)
};
SdpaBwdStatus run_sdpa_bwd(const SdpaBwdProblem& p, char* scratch, size_t per_thread, int nthreads, Isa isa,
                           size_t* alloc_bytes);

// --------------------------------------------------------------- norms ----
// Normalizes x over its last n axes; y = (x - mean) * inv * scale + bias
// (layernorm, inv = 1/sqrt(var + eps)) or x * inv * scale + bias (rmsnorm,
// inv = 1/sqrt(mean(x^2) + eps)). Strides are aligned to x's rank (0 where
// scale / bias broadcast); stat_a (mean, or inv_rms) and stat_b (inv_variance)
// may be null, and are indexed by the outer (non-normalized) axes.
struct NormProblem
{
    bool rms = false;
    int rank = 0, n = 1;
    int64_t dims[kMaxRank] = {};
    const float* x = nullptr;
    float* y = nullptr;
    const float* scale = nullptr;
    const float* bias = nullptr;
    float* stat_a = nullptr;
    float* stat_b = nullptr;
    int64_t x_st[kMaxRank] = {}, y_st[kMaxRank] = {}, scale_st[kMaxRank] = {}, bias_st[kMaxRank] = {};
    int64_t a_st[kMaxRank] = {}, b_st[kMaxRank] = {};
    float eps = 1e-5f;
};

void run_norm(const NormProblem& p, int nthreads);

// ----------------------------------------------------------- reduction ----
// hipDNN's ReductionMode numbering.
enum class ReduceOp
{
    Add = 1,
    Mul = 2,
    Min = 3,
    Max = 4,
    AMax = 5,
    Avg = 6,
    Norm1 = 7,
    Norm2 = 8,
    MulNoZeros = 9
};

struct ReductionProblem
{
    ReduceOp op = ReduceOp::Add;
    int rank = 0;
    int64_t dims[kMaxRank] = {};
    bool reduced[kMaxRank] = {};
    const float* x = nullptr;
    float* y = nullptr;
    int64_t x_st[kMaxRank] = {}, y_st[kMaxRank] = {};
};

void run_reduction(const ReductionProblem& p, int nthreads);

} // namespace hipdnn_cpu
