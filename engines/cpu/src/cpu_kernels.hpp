// Internal interface between the plugin front end (cpu_engine.cpp) and the
// compute kernels. Everything here is fp32 and allocation free: kernels get
// their scratch memory from the caller (a slice of the execute workspace).
#pragma once

#include <hipdnn_plugin_sdk/cpp/Tensors.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

namespace hipdnn_cpu
{

constexpr int kMaxRank = 8;
constexpr size_t kAlign = 64;

inline size_t align_up(size_t n, size_t a = kAlign)
{
    return (n + a - 1) / a * a;
}

// Dims and strides (in elements) of one tensor as seen by one execute call: the SDK layer's type,
// so that the shapes it resolves for a call are the kernels' without a copy.
using Shape = hipdnn_plugin_sdk::cpp::TensorShape;
static_assert(kMaxRank == hipdnn_plugin_sdk::cpp::kMaxRank, "one rank limit for the engine and the SDK");

// OpenMP wrappers that also work when the engine is built without OpenMP.
int max_threads();

// ------------------------------------------------------------------ ISA ----
// The instruction sets the hot kernels are compiled for (cpu_isa.cpp). All are built into the one
// library; a plan records the one it runs (isa_for_plan) and every kernel call is given it.
enum class Isa
{
    Baseline, // the library's -march (x86-64-v2 on x86-64)
    Avx2,     // AVX2 + FMA + F16C, 8 fp32 lanes
    Avx512,   // AVX-512 F/DQ/VL/BW (+ AVX2, FMA, F16C), 16 fp32 lanes
    Avx512Bf16, // Avx512 plus AVX512_BF16 (VDPBF16PS) for bf16 attention's two products (Zen 4 / 5)
    Amx         // Avx512Bf16 plus AMX-BF16 tiles for bf16 attention's two products
};

// Whether a plan's kernels may use AVX-512 (Avx512Bf16 and Amx run the AVX-512 builds for everything
// but the bf16 SDPA forward, and Amx the bf16 backward too).
inline bool isa_has_avx512(Isa isa)
{
    return isa == Isa::Avx512 || isa == Isa::Avx512Bf16 || isa == Isa::Amx;
}

const char* isa_name(Isa isa);
// The ISA a plan runs by default: the widest this CPU (and its OS) supports, read once per process
// from CPUID, except Avx512Bf16, preferred only on AMD (its dot products run at half the FMA's rate on
// Intel cores: Avx512 there).
Isa isa_best();
// The widest ISA this CPU supports (every narrower one runs too): what HIPDNN_CPU_ISA may ask for.
Isa isa_widest();
// Whether the CPU is AMD's (CPUID vendor, read once per process with the ISAs).
bool cpu_is_amd();
// Whether the CPU issues two 512-bit FMAs a cycle: Intel's AVX-512 cores and AMD's from Zen 5; Zen 4
// runs each on two 256-bit pipes. (False without AVX-512.)
bool cpu_two_fma512();
// Widest panel of the SDPA forward's fp32 panel kernel on the AVX-512 builds, in vectors of 16 queries,
// for a plan built now: HIPDNN_CPU_SDPA_PANEL_VECTORS=3|4 when set (read at every plan build, so a test
// can force each), else 4 where cpu_two_fma512() (the 6 x 4 micro kernel loads fewer operands per FMA,
// which two FMA ports feel), else 3. Returns "" or why the value is refused.
std::string panel_vectors_for_plan(int& out);
// The ISA a plan built now runs: HIPDNN_CPU_ISA=baseline|avx2|avx512|avx512_bf16|amx when set (read at every plan
// build, so a test can force each path), else the older switches HIPDNN_CPU_ENGINE_BASELINE=1 and
// HIPDNN_CPU_ENGINE_NO_AVX512=1, else isa_best(). Returns "" or why the request cannot be served (an
// unknown name, or an ISA this CPU lacks), which makes the engine not applicable, saying so.
std::string isa_for_plan(Isa& out);

// Element types the kernels read and write (fp32 compute throughout).
enum class DType
{
    F32,
    F16,
    BF16,
    I32,
    I64,
    F8E4M3, // FP8 (sdpa_fp8 only: no other op or kernel takes them; sdpa_fp8.cpp)
    F8E5M2
};

// Bytes of one element of the type.
inline size_t dtype_size(DType d)
{
    if(d == DType::F8E4M3 || d == DType::F8E5M2)
        return 1;
    return d == DType::F32 || d == DType::I32 ? 4 : d == DType::I64 ? 8 : 2;
}

// ---------------------------------------------------------------- SDPA ----
// o = softmax(cap(scale * q k^T) + bias + alibi, masked) v, per (batch, head), where cap(s) is s,
// or softcap * tanh(s / softcap) when softcap > 0 (applied before bias, ALiBi and every mask).
// Key j is visible to query i when every present bound holds; with padding,
// only i < seq_len_q[b] and j < seq_len_kv[b] take part (other rows: 0).
// Rows that see no key give o = 0 and stats = -inf.
// A finite bias beyond +-kBiasLimit (2^127) counts as +-2^127, the GPU engine's rule too: the kernels
// work in log2 units, and finfo.min x log2(e) would overflow to -inf, emptying a row masked
// everywhere by transformers' finfo.min masks, which torch averages. (Infinities and NaN pass.)
constexpr float kBiasLimit = 0x1p127f;
constexpr float kInfBias = 3.40282346638528859812e38f; // FLT_MAX: beyond it a bias is +-inf (or NaN)
struct SdpaProblem
{
    const void* q = nullptr;
    const void* k = nullptr;
    const void* v = nullptr;
    void* o = nullptr;
    float* stats = nullptr; // may be null
    DType qt = DType::F32, kt = DType::F32, vt = DType::F32, ot = DType::F32;
    Shape qs, ks, vs, os, ss;
    float scale = 1.0f;
    bool has_hi_tl = false; // j <= i + hi_tl
    int64_t hi_tl = 0;
    bool has_hi_br = false; // j <= i + hi_br + (skv_b - sq_b)
    int64_t hi_br = 0;
    bool has_lo = false; // j >= i + lo (+ skv_b - sq_b when lo_br)
    bool lo_br = false;
    int64_t lo = 0;
    // Padding: per-batch lengths (element b at seq_*[b * stride]); null when absent.
    const void* seq_q = nullptr;
    const void* seq_kv = nullptr;
    DType seq_q_t = DType::I32, seq_kv_t = DType::I32;
    int64_t seq_q_bs = 0, seq_kv_bs = 0;
    // Additive bias [B|1, H|1, Sq, Skv]: strides, 0 where broadcast.
    const void* bias = nullptr;
    DType bias_t = DType::F32;
    int64_t bias_st[4] = {};
    bool alibi = false;
    // Score softcapping c (> 0: s -> c tanh(s / c) before bias, ALiBi and masks; 0: off).
    float softcap = 0.0f;
};

// Whether the bias is -inf for every query [q0, q1) and key [j0, j1) of one (batch, head) (bias_off:
// its offset). Such a block adds nothing to the attention (P = 0, and dS = 0 in the backward), so the
// kernels skip it as they skip the blocks a causal band leaves out: a causal or padding mask handed
// over as a bias (transformers' 4-D masks, hipdnn.torch's attn_mask) loses its masked half. Compares
// bit patterns (fp32, fp16 or bf16 -inf) up to the first row holding anything else: a NaN is not
// -inf, so its row still comes out NaN.
inline bool sdpa_bias_masks_block(const SdpaProblem& p, int64_t bias_off, int64_t q0, int64_t q1, int64_t j0, int64_t j1)
{
    const int64_t qs = p.bias_st[2], ks = p.bias_st[3], n = j1 - j0;
    // bits that differ from -inf's anywhere in a row of n keys (ks == 1: a loop that vectorizes)
    const auto other = [n, ks](const auto* x, uint32_t ninf) {
        uint32_t any = 0;
        if(ks == 1)
            for(int64_t j = 0; j < n; ++j)
                any |= static_cast<uint32_t>(x[j]) ^ ninf;
        else
            for(int64_t j = 0; j < n; ++j)
                any |= static_cast<uint32_t>(x[j * ks]) ^ ninf;
        return any;
    };
    for(int64_t i = q0; i < q1; ++i)
    {
        const int64_t row = bias_off + i * qs + j0 * ks;
        const uint32_t any = p.bias_t == DType::F32
                                 ? other(static_cast<const uint32_t*>(p.bias) + row, 0xff800000u)
                                 : other(static_cast<const uint16_t*>(p.bias) + row,
                                         p.bias_t == DType::BF16 ? 0xff80u : 0xfc00u);
        if(any != 0)
            return false;
    }
    return true;
}

// Scratch bytes one thread needs for a problem with these (maximum) sizes.
// Monotonic in every argument, so the size computed at the declared shapes
// covers every smaller shape of an override call; and capped in the sequence
// lengths (a few panels of queries, one tile of keys; skv is unused), so a
// wildcard length of a dynamic tensor is sized by passing any large value. The
// size covers every ISA's kernel, so a plan's workspace never depends on it;
// the AMX build's tile kernel (the largest) only where q, k and v are all bf16
// (bf16_qkv), the only calls it serves.
size_t sdpa_scratch_per_thread(int64_t sq, int64_t skv, int64_t d, int64_t dv, bool bf16_qkv);

// Where a call's parallel items run (the CPU_THREADING knob).
//   Pool:   the engine's own worker pool (work_pool.hpp): the caller never waits for a worker the OS
//           has not scheduled; the default.
//   OpenMP: the OpenMP runtime's team. Where the application uses the same runtime (PyTorch's
//           GNU OpenMP: the engine's libgomp.so.1 is then the one already loaded), calls run on
//           its threads, which are awake and spinning right after its own ops, instead of adding
//           threads that would fight them for the cores.
enum class Threading : int
{
    Pool = 0,
    OpenMP = 1,
};

// Runs the attention. scratch holds nthreads slices of per_thread bytes each
// (64-byte aligned). Returns false (without touching outputs) if the scratch
// would be too small; that is a bug guard, never expected.
// Small problems (decode, short prefill) run on the calling thread, or on as many threads as their
// work pays for; isa picks the kernel build, threading where the items run.
bool run_sdpa(const SdpaProblem& p, char* scratch, size_t per_thread, int nthreads, Isa isa, Threading threading,
              int panel_vectors);

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
bool run_matmul(const MatmulProblem& p, char* scratch, size_t per_thread, int nthreads, Isa isa);

// ----------------------------------------------------------- Pointwise ----
// Pointwise operations. Binary ones read a and b; unary ones read a only
// (the engine passes a twice). Comparisons and logical ops give 1.0 / 0.0.
enum class BinaryOp
{
    Add,
    Sub,
    Mul,
    Div,
    Max,
    Min,
    AddSquare, // a + b*b
    CmpEq,
    CmpNe,
    CmpGt,
    CmpGe,
    CmpLt,
    CmpLe,
    LogicalAnd,
    LogicalOr,
    // unary
    Abs,
    Ceil,
    Floor,
    Erf,
    Exp,
    Log,
    Neg,
    Recip,
    Relu, // clip(x, lo, hi) with slope below lo
    Rsqrt,
    Sigmoid,
    Sin,
    Tan,
    Softplus,
    Sqrt,
    Swish,
    Tanh,
    Gelu,
    GeluTanh,
    Elu,
    Identity,
    LogicalNot
};

inline bool is_unary(BinaryOp op)
{
    return op >= BinaryOp::Abs;
}

struct PointwiseParams
{
    float relu_lo = 0.0f;
    float relu_hi = 0.0f;
    bool has_relu_hi = false;
    float relu_slope = 0.0f;
    float swish_beta = 1.0f;
    float elu_alpha = 1.0f;
    float softplus_beta = 1.0f;
};

struct PointwiseProblem
{
    const float* a = nullptr;
    const float* b = nullptr;
    float* out = nullptr;
    BinaryOp op = BinaryOp::Add;
    PointwiseParams prm;
    int rank = 0;
    int64_t dims[kMaxRank] = {};
    // Strides of both inputs aligned to the output rank (0 where broadcast).
    int64_t a_st[kMaxRank] = {};
    int64_t b_st[kMaxRank] = {};
    int64_t o_st[kMaxRank] = {};
};

void run_pointwise(const PointwiseProblem& p, int nthreads);

} // namespace hipdnn_cpu
