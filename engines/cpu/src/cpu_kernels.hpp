// Internal interface between the plugin front end (cpu_engine.cpp) and the
// compute kernels. Everything here is fp32 and allocation free: kernels get
// their scratch memory from the caller (a slice of the execute workspace).
#pragma once

#include <cstddef>
#include <cstdint>

namespace hipdnn_cpu
{

constexpr int kMaxRank = 8;
constexpr size_t kAlign = 64;

inline size_t align_up(size_t n, size_t a = kAlign)
{
    return (n + a - 1) / a * a;
}

// Dims and strides (in elements) of one tensor as seen by one execute call.
struct Shape
{
    int rank = 0;
    int64_t dims[kMaxRank] = {};
    int64_t strides[kMaxRank] = {};
};

// OpenMP wrappers that also work when the engine is built without OpenMP.
int max_threads();

// ---------------------------------------------------------------- SDPA ----
struct SdpaProblem
{
    const float* q = nullptr;
    const float* k = nullptr;
    const float* v = nullptr;
    float* o = nullptr;
    float* stats = nullptr; // may be null
    Shape qs, ks, vs, os, ss;
    float scale = 1.0f;
    // Causal masking: query row i sees key j only when j <= i + diag.
    bool causal = false;
    int64_t diag = 0;
};

// Scratch bytes one thread needs for a problem with these (maximum) sizes.
// Monotonic in every argument, so the size computed at the declared shapes
// covers every smaller shape of an override call.
size_t sdpa_scratch_per_thread(int64_t sq, int64_t skv, int64_t d, int64_t dv);

// Runs the attention. scratch holds nthreads slices of per_thread bytes each
// (64-byte aligned). Returns false (without touching outputs) if the scratch
// would be too small; that is a bug guard, never expected.
bool run_sdpa(const SdpaProblem& p, char* scratch, size_t per_thread, int nthreads);

// -------------------------------------------------------------- Matmul ----
struct MatmulProblem
{
    const float* a = nullptr;
    const float* b = nullptr;
    float* c = nullptr;
    int64_t m = 0, n = 0, k = 0;
    int64_t a_sm = 0, a_sk = 0; // strides of A's row / column
    int64_t b_sk = 0, b_sn = 0;
    int64_t c_sm = 0, c_sn = 0;
    // Batch dims of C (outermost first) and the matching strides of A, B, C
    // (0 where A or B is broadcast along that dim).
    int batch_rank = 0;
    int64_t batch_dims[kMaxRank] = {};
    int64_t a_bs[kMaxRank] = {};
    int64_t b_bs[kMaxRank] = {};
    int64_t c_bs[kMaxRank] = {};
};

size_t matmul_scratch_per_thread(int64_t m, int64_t n, int64_t k);
bool run_matmul(const MatmulProblem& p, char* scratch, size_t per_thread, int nthreads);

// ----------------------------------------------------------- Pointwise ----
enum class BinaryOp
{
    Add,
    Sub,
    Mul,
    Div,
    Max,
    Min
};

struct PointwiseProblem
{
    const float* a = nullptr;
    const float* b = nullptr;
    float* out = nullptr;
    BinaryOp op = BinaryOp::Add;
    int rank = 0;
    int64_t dims[kMaxRank] = {};
    // Strides of both inputs aligned to the output rank (0 where broadcast).
    int64_t a_st[kMaxRank] = {};
    int64_t b_st[kMaxRank] = {};
    int64_t o_st[kMaxRank] = {};
};

void run_pointwise(const PointwiseProblem& p, int nthreads);

} // namespace hipdnn_cpu
