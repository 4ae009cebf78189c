// Flash-style SDPA forward, compiled once per ISA (see sdpa_fwd.hpp); the
// includer defines HIPDNN_SDPA_NS and HIPDNN_SDPA_W (fp32 lanes per vector: 8
// or 16). Everything here has internal linkage or lives in that namespace, so
// the builds never share a symbol.
//
// Panel kernel (prefill). A work item is (batch, head, block of up to `panels`
// panels of QW = 3 W queries). Each panel keeps, in per-thread scratch:
//   Qt [D][QW]  the queries transposed, pre-multiplied by scale * log2(e)
//   Ot [Dv][QW] the unnormalised output, transposed
//   m, l [QW]   running max (log2 units) and running sum of exp2
// Keys are taken in tiles of 64. For each (tile, panel) pair that the masks
// leave any visible key in:
//   St [keys][QW] = K_tile . Qt      (scores, transposed: one row per key;
//                                     the row max is taken as the products are
//                                     stored when no mask or bias touches them)
//   softmax update down the key rows (every op is a vertical W-lane op: no
//   horizontal reductions; the per-query max and sum live in vector lanes)
//   Ot = Ot * alpha + V_tile^T . St  (St now holds exp2(s - m))
// Both products use the same register-blocked micro kernel: MR rows of a
// strided source (K rows over d, or V columns over keys) broadcast one
// element at a time against the 3 vectors of the panel (MR x 3 accumulators:
// 12 of 16 ymm registers, or 24 of 32 zmm). K and V are read in place at any
// strides (fp32); fp16 / bf16 tiles are first widened into scratch (whole
// vectors at a time where the head dim has unit stride).
//
// Rows kernel (decode and other calls with few queries): see run_rows_item.

#include "avx512_exp2.hpp"
#include "sdpa_fwd.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#if defined(__AVX__) || defined(__AVX512F__)
#include <immintrin.h>
#if defined(HIPDNN_SDPA_AMX)
#include "amx_tiles.hpp"
#endif
#endif

// Vectors are passed between internal (always inlined) helpers only; the
// baseline build's note about their ABI does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace hipdnn_cpu
{
namespace HIPDNN_SDPA_NS
{
namespace
{

constexpr int W = HIPDNN_SDPA_W;
typedef float V __attribute__((vector_size(W * 4)));
typedef uint32_t VU __attribute__((vector_size(W * 4)));
typedef uint16_t VH __attribute__((vector_size(W * 2)));
constexpr int kMaxNV = W == 16 ? 4 : 3; // vectors of the widest panel (sdpa_qw)
static_assert(kMaxNV * W == sdpa_qw(W), "widest panel");
// Rows of the micro kernel for panels of NV vectors: NV x MR accumulators, 24 of the 32 zmm
// registers or 12 of the 16 ymm / xmm ones.
template <int NV>
constexpr int kMR = (W == 16 ? 24 : 12) / NV;
constexpr int64_t BK = kSdpaBk;
static_assert(BK % 16 == 0, "key tiles hold whole vectors");
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int64_t kFar = int64_t(1) << 50;

inline int64_t imin(int64_t a, int64_t b)
{
    return a < b ? a : b;
}
inline int64_t imax(int64_t a, int64_t b)
{
    return a > b ? a : b;
}
inline V vload(const float* p)
{
    V v;
    std::memcpy(&v, p, sizeof(v));
    return v;
}
inline void vstore(float* p, V v)
{
    std::memcpy(p, &v, sizeof(v));
}
// A broadcast. (Not V{} + x: without -fno-signed-zeros that is a scalar add of
// 0.0f before the broadcast, which also keeps the broadcast out of the FMA's
// memory operand in the micro kernel.)
template <size_t... I>
inline V vset_lanes(float x, std::index_sequence<I...>)
{
    return V{((void)I, x)...};
}
inline V vset(float x)
{
#if HIPDNN_SDPA_W == 16 && defined(__AVX512F__)
    return (V)_mm512_set1_ps(x);
#elif HIPDNN_SDPA_W == 8 && defined(__AVX__)
    return (V)_mm256_set1_ps(x);
#else
    return vset_lanes(x, std::make_index_sequence<W>{});
#endif
}
// NaN in b propagates (a > NaN is false), as the scalar reference does.
inline V vmax(V a, V b)
{
    return a > b ? a : b;
}
// A bias in log2 units, b log2(e), a finite b first clamped to +-2^127 (kBiasLimit, shared with the
// backward and the GPU engine): below -FLT_MAX ln 2 (transformers' finfo.min masks) the product
// would overflow to -inf and empty a row that torch averages (every score equal). +-inf and NaN pass.
inline float bias_log2(float b)
{
    const float c = b < -kBiasLimit ? -kBiasLimit : (b > kBiasLimit ? kBiasLimit : b);
    return (b >= -kInfBias && b <= kInfBias ? c : b) * kLog2e;
}
inline V bias_log2(V b)
{
    const V lim = vset(kBiasLimit), big = vset(kInfBias);
    const V c = b < -lim ? -lim : (b > lim ? lim : b);
    return ((b >= -big) & (b <= big) ? c : b) * kLog2e;
}
inline float hmax(V v)
{
    float m = v[0];
    for(int i = 1; i < W; ++i)
        m = m > v[i] ? m : v[i];
    return m;
}
inline float hsum(V v)
{
    float s = 0.0f;
    for(int i = 0; i < W; ++i)
        s += v[i];
    return s;
}

// The AVX-512 builds run their items under FlushToZero (avx512_exp2.hpp): exp2_nonpos's and
// exp2_amx's results below 2^-126 (masked keys, keys far below the row's max) come out 0 at no cost.
// The other builds clamp instead.
#if HIPDNN_SDPA_W == 16 && defined(__AVX512F__)
using FlushToZero = hipdnn_cpu::FlushToZero;
#else
struct FlushToZero
{
};
#endif

// 2^x for x <= 0 (x = -inf gives 0, NaN stays NaN).
inline V exp2_nonpos(V x)
{
#if HIPDNN_SDPA_W == 16 && defined(__AVX512F__)
    return (V)exp2_avx512((__m512)x); // 8 vector operations (avx512_exp2.hpp)
#else
    // x = n + f with n an integer and |f| <= 1/2; 2^f by its Taylor series in f ln2 to degree 7
    // (truncation < 6e-9 relative); 2^n added into the exponent bits. Inputs below -125 (results
    // below 2.4e-38) give 0.
    const V lo = vset(-125.0f);
    const V xc = x < lo ? lo : x;
    const V magic = vset(12582912.0f); // 1.5 * 2^23: adding it rounds to an integer
    const V t = xc + magic;
    const V n = t - magic;
    const V f = xc - n;
    V p = vset(1.5252733804059841e-05f);
    p = p * f + 1.5403530393381609e-04f;
    p = p * f + 1.3333558146428443e-03f;
    p = p * f + 9.6181291076284772e-03f;
    p = p * f + 5.5504108664821580e-02f;
    p = p * f + 2.4022650695910071e-01f;
    p = p * f + 6.9314718055994531e-01f;
    p = p * f + 1.0f;
    // Unsigned lanes: a NaN input makes these words arbitrary, and they must wrap, not overflow.
    const VU ni = (VU)t - (VU)magic;
    const VU bits = (VU)p + (ni << 23);
    const V r = (V)bits;
    return x < lo ? V{} : r;
#endif
}

inline float exp2_scalar(float x)
{
    return exp2_nonpos(vset(x))[0];
}

// tanh(x): for |x| < 0.4 its odd Taylor polynomial to x^13 (truncation < 5e-9 relative); above,
// (1 - e) / (1 + e) with e = exp(-2|x|) = 2^(-2|x| log2 e) < 0.45, so the subtraction loses under a
// bit; |x| = inf gives +-1, NaN stays NaN (both selects take their second operand).
inline V vtanh(V x)
{
    const V neg = -x;
    const V ax = x < V{} ? neg : x;
    const V x2 = x * x;
    V p = vset(21844.0f / 6081075.0f);
    p = p * x2 + (-1382.0f / 155925.0f);
    p = p * x2 + (62.0f / 2835.0f);
    p = p * x2 + (-17.0f / 315.0f);
    p = p * x2 + (2.0f / 15.0f);
    p = p * x2 + (-1.0f / 3.0f);
    const V small = x + x * x2 * p;
    const V e = exp2_nonpos(ax * (-2.0f * kLog2e));
    const V t = (vset(1.0f) - e) / (vset(1.0f) + e);
    const V big = x < V{} ? -t : t;
    return ax < vset(0.4f) ? small : big;
}

// Score softcapping in the kernels' log2 units: a score s2 = s log2(e) becomes
// c log2(e) tanh(s2 / (c log2(e))) = log2(e) c tanh(s / c). cap = c log2(e), inv = 1 / cap.
struct Cap
{
    bool on = false;
    float cap = 0.0f, inv = 0.0f;
};

inline Cap cap_of(const SdpaProblem& p)
{
    Cap c;
    if(p.softcap > 0.0f)
    {
        // (in double: c log2(e) overflows float for c above ~2.4e38)
        const double cap = static_cast<double>(p.softcap) * 1.4426950408889634;
        c.on = true;
        c.cap = static_cast<float>(cap < 3.4028234663852886e38 ? cap : 3.4028234663852886e38);
        c.inv = static_cast<float>(1.0 / cap);
    }
    return c;
}

// n (a multiple of W) scores at s, capped in place.
inline void cap_scores(float* s, int64_t n, const Cap& c)
{
    const V cap = vset(c.cap), inv = vset(c.inv);
    for(int64_t j = 0; j < n; j += W)
        vstore(s + j, cap * vtanh(vload(s + j) * inv));
}

// ------------------------------------------------------ element access ----
inline float half_to_float(uint16_t h)
{
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t bits;
    if(exp == 0x1fu)
        bits = sign | 0x7f800000u | (man << 13); // inf / nan
    else if(exp != 0)
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    else if(man == 0)
        bits = sign;
    else
    {
        // subnormal half: normalise
        exp = 113;
        while((man & 0x400u) == 0)
        {
            man <<= 1;
            --exp;
        }
        bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
}

// Round to nearest even; overflow gives inf, NaN stays NaN.
inline uint16_t float_to_half(float f)
{
    uint32_t x;
    std::memcpy(&x, &f, sizeof(x));
    const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
    const uint32_t ax = x & 0x7fffffffu;
    if(ax >= 0x7f800000u)
        return static_cast<uint16_t>(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
    if(ax >= 0x477ff000u) // rounds to >= 65520: inf
        return static_cast<uint16_t>(sign | 0x7c00u);
    if(ax < 0x38800000u) // below the smallest normal half: subnormal or 0
    {
        if(ax < 0x33000000u) // below half of the smallest subnormal
            return sign;
        const uint32_t e = ax >> 23;
        const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
        const uint32_t shift = 126u - e; // 14..24
        uint32_t r = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1u);
        const uint32_t half = 1u << (shift - 1u);
        if(rem > half || (rem == half && (r & 1u)))
            ++r;
        return static_cast<uint16_t>(sign | r);
    }
    uint32_t r = ax - 0x38000000u; // rebias exponent 127 -> 15
    const uint32_t rem = r & 0x1fffu;
    r >>= 13;
    if(rem > 0x1000u || (rem == 0x1000u && (r & 1u)))
        ++r;
    return static_cast<uint16_t>(sign | r);
}

inline float bf16_to_float(uint16_t h)
{
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
}

inline uint16_t float_to_bf16(float f)
{
    uint32_t x;
    std::memcpy(&x, &f, sizeof(x));
    if((x & 0x7fffffffu) > 0x7f800000u)
        return static_cast<uint16_t>((x >> 16) | 0x40u); // quiet NaN
    x += 0x7fffu + ((x >> 16) & 1u);
    return static_cast<uint16_t>(x >> 16);
}

inline float load_elem(const void* base, int64_t i, DType t)
{
    switch(t)
    {
    case DType::F16:
        return half_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::BF16:
        return bf16_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::I32:
        return static_cast<float>(static_cast<const int32_t*>(base)[i]);
    case DType::I64:
        return static_cast<float>(static_cast<const int64_t*>(base)[i]);
    case DType::F32:
    default:
        return static_cast<const float*>(base)[i];
    }
}

inline int64_t load_int(const void* base, int64_t i, DType t)
{
    if(t == DType::I64)
        return static_cast<const int64_t*>(base)[i];
    if(t == DType::I32)
        return static_cast<const int32_t*>(base)[i];
    return static_cast<int64_t>(load_elem(base, i, t));
}

inline void store_elem(void* base, int64_t i, DType t, float x)
{
    switch(t)
    {
    case DType::F16:
        static_cast<uint16_t*>(base)[i] = float_to_half(x);
        break;
    case DType::BF16:
        static_cast<uint16_t*>(base)[i] = float_to_bf16(x);
        break;
    default:
        static_cast<float*>(base)[i] = x;
        break;
    }
}

// dst[0..n) = n elements of base from offset off at stride cs, widened to fp32; whole vectors at a
// time where the elements are contiguous (bf16: the bits shifted up; fp16: F16C's vcvtph2ps, exact
// for every half, subnormals included).
inline void widen_row(const void* base, int64_t off, int64_t cs, DType t, int64_t n, float* dst)
{
    int64_t e = 0;
    if(cs == 1)
    {
        if(t == DType::F32)
        {
            std::memcpy(dst, static_cast<const float*>(base) + off, static_cast<size_t>(n) * sizeof(float));
            return;
        }
        const uint16_t* src = static_cast<const uint16_t*>(base) + off;
        if(t == DType::BF16)
            for(; e + W <= n; e += W)
            {
                VH h;
                std::memcpy(&h, src + e, sizeof(h));
                vstore(dst + e, (V)(__builtin_convertvector(h, VU) << 16));
            }
#if HIPDNN_SDPA_W == 16 && defined(__AVX512F__)
        else if(t == DType::F16)
            for(; e + W <= n; e += W)
            {
                __m256i h;
                std::memcpy(&h, src + e, sizeof(h));
                const __m512 f = _mm512_maskz_cvtph_ps(0xffff, h); // (the maskz form: see exp2_nonpos)
                std::memcpy(dst + e, &f, sizeof(f));
            }
#elif HIPDNN_SDPA_W == 8 && defined(__F16C__)
        else if(t == DType::F16)
            for(; e + W <= n; e += W)
            {
                __m128i h;
                std::memcpy(&h, src + e, sizeof(h));
                const __m256 f = _mm256_cvtph_ps(h);
                std::memcpy(dst + e, &f, sizeof(f));
            }
#endif
    }
    for(; e < n; ++e)
        dst[e] = load_elem(base, off + e * cs, t);
}

// ------------------------------------------------------- micro kernel ----
// c[r][0..QW) = (cs ? c[r][..] * cs : 0) + sum_k a[r*ars + k*aks] * b[k*QW + 0..QW)
// for r < R: R rows of a strided source against one panel of QW = NV W. With
// mx, also mx[v] = max(mx[v], every row's result) (taken from the registers).
template <int R, int NV>
inline void panel_kernel(int64_t n, const float* a, int64_t ars, int64_t aks, const float* b, float* c, const V* cs, V* mx)
{
    constexpr int QW = NV * W;
    V acc[R][NV];
    for(int r = 0; r < R; ++r)
        for(int v = 0; v < NV; ++v)
            acc[r][v] = cs ? vload(c + r * QW + v * W) * cs[v] : V{};
    const float* ar[R];
    for(int r = 0; r < R; ++r)
        ar[r] = a + r * ars;
    int64_t off = 0;
#pragma GCC unroll 2
    for(int64_t k = 0; k < n; ++k, off += aks)
    {
        const float* bk = b + k * QW;
        V bv[NV];
        for(int v = 0; v < NV; ++v)
            bv[v] = vload(bk + v * W);
        for(int r = 0; r < R; ++r)
        {
            const V av = vset(ar[r][off]);
            for(int v = 0; v < NV; ++v)
                acc[r][v] += av * bv[v];
        }
    }
    for(int r = 0; r < R; ++r)
        for(int v = 0; v < NV; ++v)
            vstore(c + r * QW + v * W, acc[r][v]);
    if(mx != nullptr)
        for(int r = 0; r < R; ++r)
            for(int v = 0; v < NV; ++v)
                mx[v] = vmax(mx[v], acc[r][v]);
}

// Calls f(std::integral_constant<int, R>{}, r) for blocks of R rows starting at r that cover
// [0, rows): kMR<NV> rows at a time, then 8, 4, 2 and 1 for what is left.
template <int NV, class F>
inline void row_blocks(int64_t rows, F&& f)
{
    constexpr int MR = kMR<NV>;
    int64_t r = 0;
    for(; r + MR <= rows; r += MR)
        f(std::integral_constant<int, MR>{}, r);
    const int64_t left = rows - r;
    if(left == 0)
        return;
    if constexpr(MR > 8)
        if(left & 8)
        {
            f(std::integral_constant<int, 8>{}, r);
            r += 8;
        }
    if constexpr(MR > 4)
        if(left & 4)
        {
            f(std::integral_constant<int, 4>{}, r);
            r += 4;
        }
    if(left & 2)
    {
        f(std::integral_constant<int, 2>{}, r);
        r += 2;
    }
    if(left & 1)
        f(std::integral_constant<int, 1>{}, r);
}

template <int NV>
inline void panel_gemm(int64_t rows,
                       int64_t n,
                       const float* a,
                       int64_t ars,
                       int64_t aks,
                       const float* b,
                       float* c,
                       const V* cs,
                       V* mx)
{
    constexpr int QW = NV * W;
    row_blocks<NV>(rows, [&](auto rr, int64_t r) {
        panel_kernel<decltype(rr)::value, NV>(n, a + r * ars, ars, aks, b, c + r * QW, cs, mx);
    });
}

// ALiBi slope of head h of nh (the usual geometric sequence, extended for
// head counts that are not a power of two).
inline float alibi_slope(int64_t h, int64_t nh)
{
    int64_t n = 1;
    while(n * 2 <= nh)
        n *= 2;
    if(h < n)
        return std::pow(2.0f, -8.0f * static_cast<float>(h + 1) / static_cast<float>(n));
    return std::pow(2.0f, -4.0f * static_cast<float>(2 * (h - n) + 1) / static_cast<float>(n));
}

// Per-batch lengths and the visible band, relative to the query index: key j
// is visible to query i < sq iff i + lo <= j <= i + hi and j < skv.
struct Band
{
    int64_t sq = 0, skv = 0, lo = -kFar, hi = kFar;
};

inline Band batch_band(const SdpaProblem& p, const SdpaRun& run, int64_t b)
{
    Band r;
    r.sq = run.sq;
    r.skv = run.skv;
    if(p.seq_q != nullptr)
        r.sq = imax(0, imin(run.sq, load_int(p.seq_q, b * p.seq_q_bs, p.seq_q_t)));
    if(p.seq_kv != nullptr)
        r.skv = imax(0, imin(run.skv, load_int(p.seq_kv, b * p.seq_kv_bs, p.seq_kv_t)));
    const int64_t shift = r.skv - r.sq;
    if(p.has_hi_tl)
        r.hi = imin(r.hi, p.hi_tl);
    if(p.has_hi_br)
        r.hi = imin(r.hi, p.hi_br + shift);
    if(p.has_lo)
        r.lo = p.lo + (p.lo_br ? shift : 0);
    return r;
}

// Writes one output row: o = acc / l (acc at stride as), stats = the natural-log LSE; a row with no
// visible key (l = 0, or a padding row: acc null) gets o = 0 and stats = -inf. A NaN l (a NaN or +inf
// score: a NaN in q, k or the bias, +inf in the bias) is not an empty row: o and stats come out NaN,
// as torch's SDPA gives, never a silent 0.
inline void write_row(const SdpaProblem& p, int64_t b, int64_t h, int64_t qi, int64_t dv, const float* acc, int64_t as, float m, float l)
{
    const int64_t orow = b * p.os.strides[0] + h * p.os.strides[1] + qi * p.os.strides[2];
    float inv = 0.0f, lse = -kInf;
    if(acc != nullptr && !(l <= 0.0f))
    {
        inv = 1.0f / l;
        lse = (m + std::log2(l)) * kLn2;
    }
    else
        acc = nullptr;
    if(p.ot == DType::F32 && p.os.strides[3] == 1)
    {
        float* dst = static_cast<float*>(p.o) + orow;
        if(acc != nullptr)
            for(int64_t e = 0; e < dv; ++e)
                dst[e] = acc[e * as] * inv;
        else
            for(int64_t e = 0; e < dv; ++e)
                dst[e] = 0.0f;
    }
    else
        for(int64_t e = 0; e < dv; ++e)
            store_elem(p.o, orow + e * p.os.strides[3], p.ot, acc != nullptr ? acc[e * as] * inv : 0.0f);
    if(p.stats != nullptr)
        p.stats[b * p.ss.strides[0] + h * p.ss.strides[1] + qi * p.ss.strides[2]] = lse;
}

// One prefetcht1 that the compiler keeps: GCC 12 deletes nests of loops whose bodies are only
// _mm_prefetch / __builtin_prefetch as if they did nothing (a single loop survives; the rows
// kernel's nest, prefetch_kv_rows, compiled to a bare ret). tests/cpu/test_sdpa_prefetch_kept.py
// reads the built engine's code for them.
inline void prefetch_l2(const char* a)
{
    __asm__ volatile("prefetcht1 %0" : : "m"(*a));
}

// L2 prefetch of the rows [j, j + n) of K and V (unit last strides): row bytes kb and vb, starting at
// bases k and v, ks and vs bytes apart. The callers stop at the last key they read.
inline void prefetch_kv_rows(const char* k, int64_t ks, int64_t kb, const char* v, int64_t vs, int64_t vb, int64_t j,
                             int64_t n)
{
    for(int64_t r = j; r < j + n; ++r)
    {
        for(int64_t c = 0; c < kb; c += 64)
            prefetch_l2(k + r * ks + c);
        for(int64_t c = 0; c < vb; c += 64)
            prefetch_l2(v + r * vs + c);
    }
}

// ------------------------------------------------ rows kernel helpers ----
// Transposing sum: W vectors x[n] -> one vector whose lane n is the sum of
// x[n]'s lanes, in log2(W) rounds of (two lane shuffles + one add) per pair
// (W - 1 pairs in all; 45 ops for 16 vectors, where one horizontal sum takes 8).
// Round S pairs x[n] with x[n + S]: in every 2S-lane chunk the result holds
// the pairwise sums of x[n]'s chunk in its lower S lanes and x[n + S]'s in
// its upper S lanes; after the last round lane n holds all of x[n].
constexpr int fold_src(int s, int i, bool upper)
{
    const int t = i / (2 * s), u = i % (2 * s);
    return (u < s ? t * 2 * s + u : W + t * 2 * s + (u - s)) + (upper ? s : 0);
}

template <int S, size_t... I>
inline V fold(V a, V b, std::index_sequence<I...>)
{
    return __builtin_shufflevector(a, b, fold_src(S, I, false)...) + __builtin_shufflevector(a, b, fold_src(S, I, true)...);
}

template <int S>
inline void fold_rounds(V* x)
{
#pragma GCC unroll 16
    for(int n = 0; n < S; ++n)
        x[n] = fold<S>(x[n], x[n + S], std::make_index_sequence<W>{});
    if constexpr(S > 1)
        fold_rounds<S / 2>(x);
}

// W elements from p as floats: fp32 as they are, bf16 (uint16_t bits) widened in the register. The
// rows kernel reads bf16 K and V rows in place this way rather than widening each tile into scratch
// first (decode is bound by those reads; the scratch's store and reload cost as much again).
inline V vload_as_float(const float* p)
{
    return vload(p);
}

inline V vload_as_float(const uint16_t* p)
{
    VH h;
    std::memcpy(&h, p, sizeof(h));
    return (V)(__builtin_convertvector(h, VU) << 16);
}

// Scores of up to W keys (rows base + j * krs, j < nvalid; the lanes past
// nvalid repeat the last key and are masked by the caller) against one query
// row q, over dp (a multiple of W) elements. T: float, or uint16_t for bf16 rows.
template <typename T>
inline V dot_keys(const T* base, int64_t krs, int64_t nvalid, const float* q, int64_t dp)
{
    const T* row[W];
    for(int j = 0; j < W; ++j)
        row[j] = base + imin(j, nvalid - 1) * krs;
    V x[W];
    for(int j = 0; j < W; ++j)
        x[j] = V{};
    for(int64_t e = 0; e < dp; e += W)
    {
        const V qv = vload(q + e);
#pragma GCC unroll 16
        for(int j = 0; j < W; ++j)
            x[j] += vload_as_float(row[j] + e) * qv;
    }
    fold_rounds<W / 2>(x);
    return x[0];
}

#if defined(__AVX512BF16__)
// Scores of up to W keys of bf16 rows (as dot_keys) against a bf16 query row as given, not scaled:
// 32 dims a step with VDPBF16PS, each lane adding two exact bf16 products in fp32, so K's rows are
// read in place and never widened (decode of bf16 K: 15-25 % faster than widening K in registers for
// each query row). d a multiple of 32.
inline V dot_keys_bf16(const uint16_t* base, int64_t krs, int64_t nvalid, const uint16_t* q, int64_t d)
{
    const uint16_t* row[W];
    for(int j = 0; j < W; ++j)
        row[j] = base + imin(j, nvalid - 1) * krs;
    V x[W];
    for(int j = 0; j < W; ++j)
        x[j] = V{};
    for(int64_t e = 0; e < d; e += 32)
    {
        const __m512bh qv = (__m512bh)_mm512_loadu_si512(q + e);
#pragma GCC unroll 16
        for(int j = 0; j < W; ++j)
            x[j] = (V)_mm512_dpbf16_ps((__m512)x[j], (__m512bh)_mm512_loadu_si512(row[j] + e), qv);
    }
    fold_rounds<W / 2>(x);
    return x[0];
}
#endif

#if defined(__AVX512BF16__)
// One query row's o[0..dv) = o alpha + sum_j p[j] v[j] over nk keys of bf16 V rows (vrs apart, read
// in place), with P rounded to bf16 as the AMX kernel's (the running sum l stays fp32): two keys per
// VDPBF16PS, their rows interleaved 16 bits at a time (unpacklo / unpackhi, within 128-bit lanes), so
// the accumulators hold o in that lane order, put in it after the load and back before the store.
// Where a row of o is alone (multi-head decode) this replaces widening each V element and one FMA
// per key with a shuffle and a dot product per pair of keys. dv a multiple of 32, p padded with
// zeros to nk rounded up to 16 (the rows kernel's s), pb room for that many bf16.
template <int C>
inline void pv_row_bf16_chunks(int64_t nk, const uint16_t* vt, int64_t vrs, const uint16_t* pb, float* o, float alpha)
{
    // lane k of the unpacklo (unpackhi) product holds dim (k / 4) 8 + k % 4 (+ 4) of a 32-dim chunk;
    // back_a / back_b take dims 0-15 / 16-31 from (lo, hi)
    alignas(64) static constexpr int32_t to_lo[16] = {0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27};
    alignas(64) static constexpr int32_t to_hi[16] = {4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31};
    alignas(64) static constexpr int32_t back_a[16] = {0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23};
    alignas(64) static constexpr int32_t back_b[16] = {8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31};
    const __m512i ilo = _mm512_load_si512(to_lo), ihi = _mm512_load_si512(to_hi);
    const __m512 al = _mm512_set1_ps(alpha);
    __m512 lo[C], hi[C];
    for(int c = 0; c < C; ++c)
    {
        const __m512 oa = _mm512_loadu_ps(o + 32 * c), ob = _mm512_loadu_ps(o + 32 * c + 16);
        lo[c] = _mm512_mul_ps(_mm512_permutex2var_ps(oa, ilo, ob), al);
        hi[c] = _mm512_mul_ps(_mm512_permutex2var_ps(oa, ihi, ob), al);
    }
    // (all chunks inside the key loop: 2 C independent accumulator chains hide VDPBF16PS's latency)
    for(int64_t j = 0; j < nk; j += 2)
    {
        int32_t pair;
        std::memcpy(&pair, pb + j, sizeof(pair)); // (pb[nk] is a padding 0 when nk is odd)
        const __m512bh pp = (__m512bh)_mm512_set1_epi32(pair);
        const uint16_t* r0 = vt + j * vrs;
        const bool alone = j + 1 == nk; // the last key alone: its partner row is zeros (V may end here)
        for(int c = 0; c < C; ++c)
        {
            const __m512i v0 = _mm512_loadu_si512(r0 + 32 * c);
            const __m512i v1 = alone ? _mm512_setzero_si512() : _mm512_loadu_si512(r0 + vrs + 32 * c);
            lo[c] = _mm512_dpbf16_ps(lo[c], (__m512bh)_mm512_unpacklo_epi16(v0, v1), pp);
            hi[c] = _mm512_dpbf16_ps(hi[c], (__m512bh)_mm512_unpackhi_epi16(v0, v1), pp);
        }
    }
    const __m512i ia = _mm512_load_si512(back_a), ib = _mm512_load_si512(back_b);
    for(int c = 0; c < C; ++c)
    {
        _mm512_storeu_ps(o + 32 * c, _mm512_permutex2var_ps(lo[c], ia, hi[c]));
        _mm512_storeu_ps(o + 32 * c + 16, _mm512_permutex2var_ps(lo[c], ib, hi[c]));
    }
}

inline void pv_row_bf16(int64_t nk, const uint16_t* vt, int64_t vrs, const float* p, uint16_t* pb, float* o,
                        int64_t dv, float alpha)
{
    const int64_t nkv = (nk + W - 1) / W * W;
    for(int64_t j = 0; j < nkv; j += W)
    {
        const __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(p + j));
        std::memcpy(pb + j, &h, sizeof(h));
    }
    for(int64_t c = 0; c < dv; c += 128)
        switch(std::min<int64_t>(4, (dv - c) / 32))
        {
        case 4:
            pv_row_bf16_chunks<4>(nk, vt + c, vrs, pb, o + c, alpha);
            break;
        case 3:
            pv_row_bf16_chunks<3>(nk, vt + c, vrs, pb, o + c, alpha);
            break;
        case 2:
            pv_row_bf16_chunks<2>(nk, vt + c, vrs, pb, o + c, alpha);
            break;
        default:
            pv_row_bf16_chunks<1>(nk, vt + c, vrs, pb, o + c, alpha);
            break;
        }
}
#endif

// o[r][c-th vector] = o * alpha[r] + sum_j s[r][j] v[j][c-th vector] for R
// rows and C vectors of the head dim: V rows read once per R rows.
template <int R, int C, typename T>
inline void pv_block(int64_t nk, const T* vt, int64_t vrs, const float* s, float* o, int64_t ldo, const float* alpha)
{
    V acc[R][C];
    for(int r = 0; r < R; ++r)
    {
        const V a = vset(alpha[r]);
        for(int c = 0; c < C; ++c)
            acc[r][c] = vload(o + r * ldo + c * W) * a;
    }
    for(int64_t j = 0; j < nk; ++j)
    {
        const T* vr = vt + j * vrs;
        V vv[C];
        for(int c = 0; c < C; ++c)
            vv[c] = vload_as_float(vr + c * W);
        for(int r = 0; r < R; ++r)
        {
            const V pj = vset(s[r * BK + j]);
            for(int c = 0; c < C; ++c)
                acc[r][c] += pj * vv[c];
        }
    }
    for(int r = 0; r < R; ++r)
        for(int c = 0; c < C; ++c)
            vstore(o + r * ldo + c * W, acc[r][c]);
}

constexpr int kPvR = 4;                 // rows per pv_block
constexpr int kPvC = W == 16 ? 4 : 2;   // head-dim vectors per pv_block (16 or 8 accumulators)

template <typename T>
inline void pv_rows(int64_t nr, int64_t nk, const T* vt, int64_t vrs, const float* s, float* o, int64_t ldo, int64_t nvec,
                    const float* alpha)
{
    for(int64_t r = 0; r < nr; r += kPvR)
    {
        const int64_t rr = imin(kPvR, nr - r);
        for(int64_t c = 0; c < nvec; c += kPvC)
        {
            const int64_t cc = imin(kPvC, nvec - c);
            const T* vp = vt + c * W;
            const float* sp = s + r * BK;
            float* op = o + r * ldo + c * W;
            const float* ap = alpha + r;
            switch(rr * 8 + cc)
            {
#define HIPDNN_PV_CASE(R, C)                                                                                           \
    case R * 8 + C:                                                                                                    \
        pv_block<R, C, T>(nk, vp, vrs, sp, op, ldo, ap);                                                               \
        break;
                HIPDNN_PV_CASE(1, 1)
                HIPDNN_PV_CASE(1, 2)
                HIPDNN_PV_CASE(2, 1)
                HIPDNN_PV_CASE(2, 2)
                HIPDNN_PV_CASE(3, 1)
                HIPDNN_PV_CASE(3, 2)
                HIPDNN_PV_CASE(4, 1)
                HIPDNN_PV_CASE(4, 2)
#if HIPDNN_SDPA_W == 16
                HIPDNN_PV_CASE(1, 3)
                HIPDNN_PV_CASE(1, 4)
                HIPDNN_PV_CASE(2, 3)
                HIPDNN_PV_CASE(2, 4)
                HIPDNN_PV_CASE(3, 3)
                HIPDNN_PV_CASE(3, 4)
                HIPDNN_PV_CASE(4, 3)
                HIPDNN_PV_CASE(4, 4)
#endif
#undef HIPDNN_PV_CASE
            default:
                break;
            }
        }
    }
}

#if HIPDNN_SDPA_W == 16 && defined(__AVX512F__)
// 16 x 16 transpose of 32-bit elements: r[i] holds row i on entry, column i on return. (The maskz
// forms with every lane on: GCC 12 warns that the plain forms' undefined source may be used.)
inline void transpose16x16(__m512i* r)
{
    __m512i t[16];
    for(int i = 0; i < 16; i += 2)
    {
        t[i] = _mm512_maskz_unpacklo_epi32(0xffff, r[i], r[i + 1]);
        t[i + 1] = _mm512_maskz_unpackhi_epi32(0xffff, r[i], r[i + 1]);
    }
    for(int i = 0; i < 16; i += 4)
    {
        r[i] = _mm512_maskz_unpacklo_epi64(0xff, t[i], t[i + 2]);
        r[i + 1] = _mm512_maskz_unpackhi_epi64(0xff, t[i], t[i + 2]);
        r[i + 2] = _mm512_maskz_unpacklo_epi64(0xff, t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_maskz_unpackhi_epi64(0xff, t[i + 1], t[i + 3]);
    }
    // r[4g + c] lane L now holds column 4L + c of rows 4g .. 4g + 3
    for(int c = 0; c < 4; ++c)
    {
        t[c] = _mm512_maskz_shuffle_i32x4(0xffff, r[c], r[4 + c], 0x88);
        t[4 + c] = _mm512_maskz_shuffle_i32x4(0xffff, r[c], r[4 + c], 0xdd);
        t[8 + c] = _mm512_maskz_shuffle_i32x4(0xffff, r[8 + c], r[12 + c], 0x88);
        t[12 + c] = _mm512_maskz_shuffle_i32x4(0xffff, r[8 + c], r[12 + c], 0xdd);
    }
    for(int c = 0; c < 4; ++c)
    {
        r[c] = _mm512_maskz_shuffle_i32x4(0xffff, t[c], t[8 + c], 0x88);
        r[4 + c] = _mm512_maskz_shuffle_i32x4(0xffff, t[4 + c], t[12 + c], 0x88);
        r[8 + c] = _mm512_maskz_shuffle_i32x4(0xffff, t[c], t[8 + c], 0xdd);
        r[12 + c] = _mm512_maskz_shuffle_i32x4(0xffff, t[4 + c], t[12 + c], 0xdd);
    }
}

// qp[e * qw + i] = q[i * rs + e] * scale for i < n (0 for n <= i < qw) and e < d: fp32 query rows with
// unit dim stride transposed 16 x 16 in registers (qw a multiple of 16).
inline void transpose_q_f32(const float* q, int64_t rs, int64_t n, int64_t d, int64_t qw, float scale, float* qp)
{
    const __m512 sc = _mm512_set1_ps(scale);
    for(int64_t c0 = 0; c0 < qw; c0 += 16)
        for(int64_t e0 = 0; e0 < d; e0 += 16)
        {
            const int64_t ne = imin(16, d - e0);
            const __mmask16 m = static_cast<__mmask16>((1u << ne) - 1u);
            __m512i r[16];
            for(int i = 0; i < 16; ++i)
                r[i] = c0 + i < n ? _mm512_maskz_loadu_epi32(m, q + (c0 + i) * rs + e0) : _mm512_setzero_si512();
            transpose16x16(r); // r[j]: dim e0 + j of queries c0 .. c0 + 15
            for(int64_t j = 0; j < ne; ++j)
                _mm512_storeu_ps(qp + (e0 + j) * qw + c0, _mm512_mul_ps(_mm512_castsi512_ps(r[j]), sc));
        }
}

// Writes an item's rows from Ot (per panel of qw queries: orows rows of qw lanes, dims along the
// rows) when o is fp32 or fp16, or bf16 on a build with AVX512-BF16, with unit head-dim stride: 16 x 16
// transposes back to query rows, o = acc / l (bf16, fp16: rounded to nearest even), 16 dims a store;
// write_row's rules otherwise (rows past nq and empty rows 0 with stats -inf, a NaN l a NaN row).
// Returns false (nothing written) for any other output.
inline bool write_rows16(const SdpaProblem& p, int64_t b, int64_t h, int64_t dv, int64_t q0, int64_t nq, int64_t nq_all,
                         const float* ot, int64_t qw, int64_t orows, const float* mrow, const float* lrow)
{
#if defined(__AVX512BF16__)
    const bool bf16 = p.ot == DType::BF16;
#else
    const bool bf16 = false;
#endif
    const bool half = p.ot == DType::F16;
    if((p.ot != DType::F32 && !bf16 && !half) || p.os.strides[3] != 1)
        return false;
    // (locals: the stores below could alias p's fields for all the compiler knows)
    const int64_t obase = b * p.os.strides[0] + h * p.os.strides[1] + q0 * p.os.strides[2];
    const int64_t ors = p.os.strides[2];
    for(int64_t c0 = 0; c0 < nq_all; c0 += 16)
    {
        const int64_t pn = c0 / qw, lane0 = c0 % qw;
        const int64_t n = imin(16, nq_all - c0);
        alignas(64) float inv[16];
        for(int64_t i = 0; i < 16; ++i)
        {
            const int64_t qi = c0 + i;
            const float l = i < n && qi < nq ? lrow[pn * qw + lane0 + i] : 0.0f;
            const bool live = i < n && qi < nq && !(l <= 0.0f);
            inv[i] = live ? 1.0f / l : 0.0f;
            if(i < n && p.stats != nullptr)
                p.stats[b * p.ss.strides[0] + h * p.ss.strides[1] + (q0 + qi) * p.ss.strides[2]] =
                    live ? (mrow[pn * qw + lane0 + i] + std::log2(l)) * kLn2 : -kInf;
        }
        const float* src = ot + pn * orows * qw + lane0;
        for(int64_t e0 = 0; e0 < dv; e0 += 16)
        {
            __m512i r[16];
            for(int i = 0; i < 16; ++i)
                r[i] = e0 + i < orows ? _mm512_loadu_si512(src + (e0 + i) * qw) : _mm512_setzero_si512();
            transpose16x16(r); // r[i]: query c0 + i, dims e0 .. e0 + 15
            const __mmask16 m = e0 + 16 <= dv ? __mmask16(0xffff) : __mmask16((1u << (dv - e0)) - 1u);
            for(int64_t i = 0; i < n; ++i)
            {
                // an empty or dead row is 0, never 0 x whatever its accumulator holds
                const __m512 x = inv[i] == 0.0f ? _mm512_setzero_ps()
                                                : _mm512_mul_ps(_mm512_castsi512_ps(r[i]), _mm512_set1_ps(inv[i]));
                const int64_t at = obase + (c0 + i) * ors + e0;
#if defined(__AVX512BF16__)
                if(bf16)
                {
                    const __m256bh y = _mm512_cvtneps_pbh(x);
                    _mm256_mask_storeu_epi16(static_cast<uint16_t*>(p.o) + at, m, reinterpret_cast<__m256i>(y));
                    continue;
                }
#endif
                if(half)
                {
                    // (F16C's rounding: nearest even, subnormals kept whatever the flush-to-zero mode)
                    const __m256i y = _mm512_maskz_cvtps_ph(0xffff, x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                    _mm256_mask_storeu_epi16(static_cast<uint16_t*>(p.o) + at, m, y);
                    continue;
                }
                _mm512_mask_storeu_ps(static_cast<float*>(p.o) + at, m, x);
            }
        }
    }
    return true;
}
#endif

// s[r][i] += bias[query pq0 + i][key j0 + r] * log2(e) for the panel's live queries (i < pq1 - pq0)
// and rows r < rows (bias_off: the (batch, head)'s offset). prefetch_next: the AVX-512 kernel's
// callers, which want the next key tile's strips prefetched (see below).
template <int NV>
inline void add_bias(const SdpaProblem& p, int64_t bias_off, float* s, int64_t rows, int64_t j0, int64_t pq0, int64_t pq1,
                     bool prefetch_next)
{
    constexpr int QW = NV * W;
    const int64_t nq = pq1 - pq0, qs = p.bias_st[2], ks = p.bias_st[3];
    (void)prefetch_next; // (the AVX-512 builds' path only)
#if HIPDNN_SDPA_W == 16 && defined(__AVX512F__)
    if(ks == 1)
    {
        // The panel's strips of the next key tile, prefetched into L2: its query rows lie a bias row
        // apart, more streams than the hardware prefetchers follow, and the panel comes back to them
        // only after the item's other panels. For the AVX-512 kernel's 64-key tiles (fp32 S = 2048,
        // D = 128: a full bias 1.44x -> 1.22x the plain call); the AMX kernel's 256-key tiles ran
        // slower with it (1.77x -> 1.88-1.97x; 1.70x with the direct loads below alone).
        const int64_t esz = p.bias_t == DType::F32 ? 4 : 2;
        const int64_t jn = imin(j0 + 2 * rows, p.ks.dims[2]) - (j0 + rows); // keys of the next tile
        if(prefetch_next && jn > 0)
        {
            const char* base = static_cast<const char*>(p.bias) + (bias_off + pq0 * qs + j0 + rows) * esz;
            for(int64_t i = 0; i < nq; ++i)
                for(int64_t c = 0; c < jn * esz; c += 64)
                    prefetch_l2(base + i * qs * esz + c);
        }
        // Keys contiguous in each query's bias row: 16 queries x 16 keys at a time, each query's
        // keys widened as a vector, then transposed to the tile's key rows.
        for(int64_t i0 = 0; i0 < nq; i0 += 16)
        {
            const int64_t ni = imin(16, nq - i0);
            for(int64_t r0 = 0; r0 < rows; r0 += 16)
            {
                const int64_t nr = imin(16, rows - r0);
                // each query's nr keys straight into a register (masked: nothing past them is read;
                // a memcpy per query became `rep movsq`, which kept the bias misses from overlapping)
                const __mmask16 km = static_cast<__mmask16>(nr == 16 ? 0xffffu : (1u << nr) - 1u);
                __m512i t[16];
                for(int64_t i = 0; i < 16; ++i)
                {
                    if(i >= ni)
                    {
                        t[i] = _mm512_setzero_si512();
                        continue;
                    }
                    const int64_t off = bias_off + (pq0 + i0 + i) * qs + (j0 + r0);
                    if(p.bias_t == DType::F32)
                        t[i] = _mm512_castps_si512(_mm512_maskz_loadu_ps(km, static_cast<const float*>(p.bias) + off));
                    else
                    {
                        const __m256i h = _mm256_maskz_loadu_epi16(km, static_cast<const uint16_t*>(p.bias) + off);
                        t[i] = p.bias_t == DType::BF16
                                   ? _mm512_maskz_slli_epi32(0xffff, _mm512_maskz_cvtepu16_epi32(0xffff, h), 16)
                                   : _mm512_castps_si512(_mm512_maskz_cvtph_ps(0xffff, h));
                    }
                }
                transpose16x16(t); // t[r] lane i = bias of query i0 + i, key j0 + r0 + r
                for(int64_t r = 0; r < nr; ++r)
                {
                    float* row = s + (r0 + r) * QW + i0;
                    vstore(row, vload(row) + bias_log2((V)t[r]));
                }
            }
        }
        return;
    }
#endif
    for(int64_t i = 0; i < nq; ++i)
    {
        const int64_t brow = bias_off + (pq0 + i) * qs;
        for(int64_t r = 0; r < rows; ++r)
            s[r * QW + i] += bias_log2(load_elem(p.bias, brow + (j0 + r) * ks, p.bias_t));
    }
}

// s[r][i] = s[r][i] scale + slope2 (j0 + r - (pq0 + i)): ALiBi in log2 units (slope2 = the head's
// slope x log2 e) for key rows r < rows of a panel of NV vectors of queries from pq0, with the
// scores' scaling in the same pass (scale 1: scores already scaled).
template <int NV>
inline void add_alibi(float* s, int64_t rows, int64_t j0, int64_t pq0, float slope2, float scale)
{
    constexpr int QW = NV * W;
    V lane;
    for(int i = 0; i < W; ++i)
        lane[i] = static_cast<float>(i);
    V qv[NV];
    for(int v = 0; v < NV; ++v)
        qv[v] = lane + static_cast<float>(pq0 + v * W);
    const V sl = vset(slope2), sc = vset(scale);
    for(int64_t r = 0; r < rows; ++r)
    {
        const V jj = vset(static_cast<float>(j0 + r));
        for(int v = 0; v < NV; ++v)
            vstore(s + r * QW + v * W, vload(s + r * QW + v * W) * sc + sl * (jj - qv[v]));
    }
}

// What the scores get before the softmax, besides the band (one panel of one (batch, head)).
struct ScoreMods
{
    bool has_bias;
    int64_t bias_off; // the bias's offset at (batch, head)
    float alibi2;     // the head's ALiBi slope in log2 units (0: off)
    Cap cap;
};

// One panel's scores s[r][0..QW) of key rows j0 + r (r < rows) for queries pq0 + lane, in log2 units:
// softcapping, bias, ALiBi and the band applied (none when plain), then the online softmax update:
// s becomes exp2(s - m), m (mp) and l (lp) move on, alpha is the factor the panel's output takes.
// mnew holds the running max on entry (with the rows' max already in it when plain).
template <int NV>
inline void panel_softmax(const SdpaProblem& p,
                          const ScoreMods& mods,
                          float* s,
                          int64_t rows,
                          int64_t j0,
                          int64_t pq0,
                          int64_t pq1,
                          int64_t lo,
                          int64_t hi,
                          bool band_free,
                          bool plain,
                          float* mp,
                          float* lp,
                          V* mnew,
                          V* alpha)
{
    constexpr int QW = NV * W;
    const bool has_bias = mods.has_bias;
    const int64_t bias_off = mods.bias_off;
    const float alibi2 = mods.alibi2;
    const Cap& cap = mods.cap;
    V mold[NV], muse[NV], sum[NV];
    for(int v = 0; v < NV; ++v)
        mold[v] = vload(mp + v * W);

    if(!plain)
    {
        V lane;
        for(int i = 0; i < W; ++i)
            lane[i] = static_cast<float>(i);
        V qv[NV];
        for(int v = 0; v < NV; ++v)
            qv[v] = lane + static_cast<float>(pq0 + v * W);

        // Softcapping comes first: the bias, ALiBi and the masks apply to the capped scores.
        if(cap.on)
            cap_scores(s, rows * QW, cap);
        if(has_bias)
            add_bias<NV>(p, bias_off, s, rows, j0, pq0, pq1, true);
        if(p.alibi)
            add_alibi<NV>(s, rows, j0, pq0, alibi2, 1.0f);
        if(!band_free)
        {
            // Rows not visible to every live query of the panel get -inf
            // where masked: visible iff j - hi <= i <= j - lo.
            const V ninf = vset(-kInf);
            for(int64_t r = 0; r < rows; ++r)
            {
                const int64_t j = j0 + r;
                if(j <= pq0 + hi && j >= pq1 - 1 + lo)
                    continue;
                const V ilo = vset(static_cast<float>(imax(j - hi, -(int64_t(1) << 24))));
                const V ihi = vset(static_cast<float>(imin(j - lo, int64_t(1) << 24)));
                for(int v = 0; v < NV; ++v)
                {
                    const V x = vload(s + r * QW + v * W);
                    vstore(s + r * QW + v * W, (qv[v] >= ilo && qv[v] <= ihi) ? x : ninf);
                }
            }
        }
        for(int64_t r = 0; r < rows; ++r)
            for(int v = 0; v < NV; ++v)
                mnew[v] = vmax(mnew[v], vload(s + r * QW + v * W));
    }

    // Online softmax down the key rows.
    for(int v = 0; v < NV; ++v)
    {
        muse[v] = mnew[v] == vset(-kInf) ? V{} : mnew[v];
        sum[v] = V{};
    }
    for(int64_t r = 0; r < rows; ++r)
        for(int v = 0; v < NV; ++v)
        {
            const V e = exp2_nonpos(vload(s + r * QW + v * W) - muse[v]);
            vstore(s + r * QW + v * W, e);
            sum[v] += e;
        }
    for(int v = 0; v < NV; ++v)
    {
        alpha[v] = exp2_nonpos(mold[v] - muse[v]);
        vstore(lp + v * W, vload(lp + v * W) * alpha[v] + sum[v]);
        vstore(mp + v * W, mnew[v]);
    }
}

#if HIPDNN_SDPA_W == 16 && defined(__AVX512BF16__)
// ------------------------------------------------------- bf16 pairs ----
// vpermw / vpermt2w indices that interleave two runs of 16 elements: (x[a], x[b], x[a + 1],
// x[b + 1], ...), the tiles' pair layout.
struct PairIndex
{
    alignas(64) uint16_t lane[32];
};
constexpr PairIndex pair_index(int a, int b)
{
    PairIndex r{};
    for(int i = 0; i < 16; ++i)
    {
        r.lane[2 * i] = static_cast<uint16_t>(a + i);
        r.lane[2 * i + 1] = static_cast<uint16_t>(b + i);
    }
    return r;
}
constexpr PairIndex kPackPairs = pair_index(0, 16); // the two halves of one vector
constexpr PairIndex kVPairsLo = pair_index(0, 32);  // elements 0-15 of two vectors
constexpr PairIndex kVPairsHi = pair_index(16, 48); // elements 16-31 of two vectors

// Two rows of P (16 queries each: keys 2p and 2p + 1) rounded to bf16 (nearest even) and stored in
// the pair layout: dst[2 i] from e0, dst[2 i + 1] from e1.
inline void store_pair(__m512 e0, __m512 e1, uint16_t* dst)
{
    const __m512bh h = _mm512_cvtne2ps_pbh(e1, e0); // e0's 16 in the low half
    _mm512_storeu_si512(dst, _mm512_maskz_permutexvar_epi16(~__mmask32(0), _mm512_load_si512(kPackPairs.lane),
                                                             reinterpret_cast<__m512i>(h)));
}

// n bf16 elements of a row (offset off, stride cs) into dst, then zeros up to n_pad.
inline void copy_bf16_row(const void* base, int64_t off, int64_t cs, int64_t n, int64_t n_pad, uint16_t* dst)
{
    const uint16_t* src = static_cast<const uint16_t*>(base) + off;
    if(cs == 1)
        std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(uint16_t));
    else
        for(int64_t e = 0; e < n; ++e)
            dst[e] = src[e * cs];
    std::memset(dst + n, 0, static_cast<size_t>(n_pad - n) * sizeof(uint16_t));
}

// Qp[t][i] = (q[i][2t], q[i][2t + 1]) for t < dh and the n queries of a panel of QW (rows q + i rs, dims
// at unit stride; 0 past d and for i >= n): 16 x 16 transposes of the rows' 32-bit pairs. The pair
// layout of both bf16 kernels' query operands (the AMX tiles' B, the dot products' vector operand).
template <int QW>
inline void pack_q_pairs(const uint16_t* q, int64_t rs, int64_t n, int64_t d, int64_t dh, uint32_t* qp)
{
    for(int64_t c0 = 0; c0 < QW; c0 += 16)
        for(int64_t e0 = 0; e0 < 2 * dh; e0 += 32) // 16 pairs of dims
        {
            const int64_t live = imin(32, d - e0);
            const __mmask32 m = live >= 32 ? ~__mmask32(0) : live > 0 ? __mmask32((1u << live) - 1u) : __mmask32(0);
            __m512i r[16];
            for(int i = 0; i < 16; ++i)
                r[i] = c0 + i < n ? _mm512_maskz_loadu_epi16(m, q + (c0 + i) * rs + e0) : _mm512_setzero_si512();
            transpose16x16(r); // r[j]: dim pair e0 / 2 + j of queries c0 .. c0 + 15
            for(int64_t j = 0; j < imin(16, dh - e0 / 2); ++j)
                _mm512_storeu_si512(qp + (e0 / 2 + j) * QW + c0, r[j]);
        }
}

#endif

#if defined(HIPDNN_SDPA_BF16DOT)
// ------------------------------------------------ bf16 dot-product panels ----
// The panel kernel for bf16 q, k and v on CPUs with AVX512_BF16 but no AMX tiles (Zen 4 / 5): the same
// panels, key tiles, masks and softmax as the fp32 panels, with both products on VDPBF16PS, whose lane
// adds two exact bf16 products in fp32 (32 multiply-adds an instruction against an FMA's 16; the
// probe's register-only peak is 2x the FMA's). Its operands are 32-bit words holding a pair of bf16:
//   Qp [d/2][QW]    per panel, each query's head dims in pairs (as given: the scale goes on the fp32 scores)
//   K               read in place, one pair of head dims broadcast a step (even d at unit stride; else
//                   each tile copied into Kb, zero-padded to an even d)
//   Vp [keys/2][dv] per tile, shared by the item's panels: pairs of key rows interleaved
//   Pp [keys/2][QW] per (tile, panel): P rounded to bf16 in pairs of keys, written over the scores
// P is rounded to bf16 for its product, as the AMX kernel's and flash attention's (the running sum l
// stays the fp32 sum). The AVX-512 build widens bf16 K and V tiles to fp32 and runs FMAs instead.

// One pair of bf16 at p (any 2-byte alignment) in every lane.
inline __m512bh pair_bcast(const uint16_t* p)
{
    uint32_t x;
    std::memcpy(&x, p, sizeof(x));
    return (__m512bh)_mm512_set1_epi32(static_cast<int>(x));
}

// c[r][0..QW) = (cs ? c[r][..] * cs : 0) + sum_k pair(a + r ars + k aks) . b[k][0..QW) for r < R, then
// times post where given; mx as panel_kernel's. a: bf16 elements (pairs at a + r ars + k aks); b: pair
// words, QW = NV W a step.
template <int R, int NV>
inline void dot_kernel(int64_t n, const uint16_t* a, int64_t ars, int64_t aks, const uint32_t* b, float* c, const V* cs,
                       const V* post, V* mx)
{
    constexpr int QW = NV * W;
    V acc[R][NV];
    for(int r = 0; r < R; ++r)
        for(int v = 0; v < NV; ++v)
            acc[r][v] = cs ? vload(c + r * QW + v * W) * cs[v] : V{};
    const uint16_t* ar[R];
    for(int r = 0; r < R; ++r)
        ar[r] = a + r * ars;
    int64_t off = 0;
#pragma GCC unroll 2
    for(int64_t k = 0; k < n; ++k, off += aks)
    {
        const uint32_t* bk = b + k * QW;
        __m512bh bv[NV];
        for(int v = 0; v < NV; ++v)
            bv[v] = (__m512bh)_mm512_loadu_si512(bk + v * W);
        for(int r = 0; r < R; ++r)
        {
            const __m512bh av = pair_bcast(ar[r] + off);
            for(int v = 0; v < NV; ++v)
                acc[r][v] = (V)_mm512_dpbf16_ps((__m512)acc[r][v], av, bv[v]);
        }
    }
    if(post != nullptr)
        for(int r = 0; r < R; ++r)
            for(int v = 0; v < NV; ++v)
                acc[r][v] *= *post;
    for(int r = 0; r < R; ++r)
        for(int v = 0; v < NV; ++v)
            vstore(c + r * QW + v * W, acc[r][v]);
    if(mx != nullptr)
        for(int r = 0; r < R; ++r)
            for(int v = 0; v < NV; ++v)
                mx[v] = vmax(mx[v], acc[r][v]);
}

template <int NV>
inline void dot_gemm(int64_t rows, int64_t n, const uint16_t* a, int64_t ars, int64_t aks, const uint32_t* b, float* c,
                     const V* cs, const V* post, V* mx)
{
    constexpr int QW = NV * W;
    row_blocks<NV>(rows, [&](auto rr, int64_t r) {
        dot_kernel<decltype(rr)::value, NV>(n, a + r * ars, ars, aks, b, c + r * QW, cs, post, mx);
    });
}

// Vp[i][e] = (v[2 i][e], v[2 i + 1][e]) for i < ceil(nk / 2) and e < dv, from nk rows of v (offset
// off, row stride rs, dim stride cs elements); a row past nk reads as 0 (V may end there).
inline void dot_pack_v(const void* vbase, int64_t off, int64_t rs, int64_t cs, int64_t nk, int64_t dv, uint32_t* vp)
{
    const uint16_t* v = static_cast<const uint16_t*>(vbase) + off;
    const int64_t np = (nk + 1) / 2;
    if(cs != 1)
    {
        for(int64_t i = 0; i < np; ++i)
            for(int64_t e = 0; e < dv; ++e)
            {
                const uint32_t lo = v[2 * i * rs + e * cs];
                const uint32_t hi = 2 * i + 1 < nk ? v[(2 * i + 1) * rs + e * cs] : 0u;
                vp[i * dv + e] = lo | (hi << 16);
            }
        return;
    }
    const __m512i lo_idx = _mm512_load_si512(kVPairsLo.lane), hi_idx = _mm512_load_si512(kVPairsHi.lane);
    for(int64_t i = 0; i < np; ++i)
    {
        const uint16_t* ra = v + 2 * i * rs;
        const bool pair = 2 * i + 1 < nk;
        for(int64_t e0 = 0; e0 < dv; e0 += 32)
        {
            const int64_t live = imin(32, dv - e0);
            const __mmask32 m = live >= 32 ? ~__mmask32(0) : __mmask32((1u << live) - 1u);
            const __m512i x = _mm512_maskz_loadu_epi16(m, ra + e0);
            const __m512i y = pair ? _mm512_maskz_loadu_epi16(m, ra + rs + e0) : _mm512_setzero_si512();
            const __mmask16 m0 = live >= 16 ? __mmask16(0xffff) : __mmask16((1u << live) - 1u);
            _mm512_mask_storeu_epi32(vp + i * dv + e0, m0, _mm512_permutex2var_epi16(x, lo_idx, y));
            if(live > 16)
            {
                const __mmask16 m1 = live >= 32 ? __mmask16(0xffff) : __mmask16((1u << (live - 16)) - 1u);
                _mm512_mask_storeu_epi32(vp + i * dv + e0 + 16, m1, _mm512_permutex2var_epi16(x, hi_idx, y));
            }
        }
    }
}

// The rows s[0 .. rows) (QW floats each: P of keys j0 ..) rounded to bf16 and packed in pairs of keys
// over themselves: pair i holds keys j0 - par + 2 i and the next (a key outside the rows: 0). In place:
// pair i is written after its rows, both at or past row i, were read. Returns the pairs.
template <int NV>
inline int64_t dot_pack_p(float* s, int64_t rows, int64_t par)
{
    constexpr int QW = NV * W;
    const int64_t np = (rows + par + 1) / 2;
    for(int64_t i = 0; i < np; ++i)
    {
        const int64_t r0 = 2 * i - par, r1 = r0 + 1;
        for(int v = 0; v < NV; ++v)
        {
            const __m512 e0 = r0 >= 0 ? _mm512_loadu_ps(s + r0 * QW + v * W) : _mm512_setzero_ps();
            const __m512 e1 = r1 < rows ? _mm512_loadu_ps(s + r1 * QW + v * W) : _mm512_setzero_ps();
            store_pair(e0, e1, reinterpret_cast<uint16_t*>(s + i * QW + v * W));
        }
    }
    return np;
}

// Keeps only the bf16 halves `keep` (0x0000ffff: the low key's, 0xffff0000: the high key's) of the dv
// pairs of Vp row `row`, after saving it to `save`: a pair whose other key is outside the panel's rows
// (P = 0 there) must not bring that key's V in (0 x inf is NaN). undo_half restores it.
inline void keep_half(uint32_t* row, int64_t dv, uint32_t keep, uint32_t* save)
{
    std::memcpy(save, row, static_cast<size_t>(dv) * sizeof(uint32_t));
    for(int64_t e = 0; e < dv; ++e)
        row[e] &= keep;
}
inline void undo_half(uint32_t* row, int64_t dv, const uint32_t* save)
{
    std::memcpy(row, save, static_cast<size_t>(dv) * sizeof(uint32_t));
}
#endif

// ============================================================ panel kernel ====
// DOT: the bf16 dot-product panels (HIPDNN_SDPA_BF16DOT builds, bf16 q, k and v; see above).
template <int NV, bool DOT = false>
void panel_item(const SdpaRun& run, int64_t w, float* ws)
{
    constexpr int QW = NV * W;
    const SdpaProblem& p = *run.p;
    const int64_t qb = run.nqb - 1 - (w % run.nqb); // later (heavier under causal) blocks first
    const int64_t bh = w / run.nqb;
    const int64_t h = bh % run.hq;
    const int64_t b = bh / run.hq;
    const int64_t hk = h / run.group;
    const int64_t d = run.d, dv = run.dv;

    const Band band = batch_band(p, run, b);
    const int64_t lo = band.lo, hi = band.hi;
    const bool banded = hi < kFar || lo > -kFar;

    // Blocks are run.panels panels of run.qw queries; the last may be cut into narrower panels of QW.
    const int64_t q0 = qb * run.panels * run.qw;
    const int64_t nq = imax(0, imin(run.panels * run.qw, band.sq - q0)); // live queries of the block
    const int64_t nq_all = imin(run.panels * run.qw, run.sq - q0);       // rows of the block to write
    const int64_t npan = (nq + QW - 1) / QW;

    float* qt = ws + run.off_qt;
    float* ot = ws + run.off_ot;
    float* st = ws + run.off_st;
    float* mrow = ws + run.off_m;
    float* lrow = ws + run.off_l;
    float* kbuf = ws + run.off_kb;
    float* vbuf = ws + run.off_vb;

    const int64_t qoff = b * p.qs.strides[0] + h * p.qs.strides[1];
    const int64_t koff = b * p.ks.strides[0] + hk * p.ks.strides[1];
    const int64_t voff = b * p.vs.strides[0] + hk * p.vs.strides[1];

    // Queries, transposed and pre-scaled into log2 units (DOT: in pairs of head dims, as given).
    const float qscale = p.scale * kLog2e;
    [[maybe_unused]] const int64_t dh = (d + 1) / 2, dpad = 2 * dh; // DOT: pairs of head dims
    for(int64_t pn = 0; pn < npan; ++pn)
    {
        float* qp = qt + pn * d * QW;
        const int64_t live = imin(QW, q0 + nq - (q0 + pn * QW)); // queries of the panel (0 past them)
#if defined(HIPDNN_SDPA_BF16DOT)
        if constexpr(DOT)
        {
            uint32_t* qpw = reinterpret_cast<uint32_t*>(qt) + pn * dh * QW;
            const int64_t qs2 = p.qs.strides[2];
            if(p.qs.strides[3] == 1)
                pack_q_pairs<QW>(static_cast<const uint16_t*>(p.q) + qoff + (q0 + pn * QW) * qs2, qs2, live, d, dh, qpw);
            else
            {
                uint16_t* rows = reinterpret_cast<uint16_t*>(kbuf); // (free until the key tiles)
                for(int64_t i = 0; i < live; ++i)
                    copy_bf16_row(p.q, qoff + (q0 + pn * QW + i) * qs2, p.qs.strides[3], d, dpad, rows + i * dpad);
                pack_q_pairs<QW>(rows, dpad, live, d, dh, qpw);
            }
        }
        else
#endif
#if HIPDNN_SDPA_W == 16 && defined(__AVX512F__)
        if(p.qt == DType::F32 && p.qs.strides[3] == 1)
            transpose_q_f32(static_cast<const float*>(p.q) + qoff + (q0 + pn * QW) * p.qs.strides[2], p.qs.strides[2], live,
                            d, QW, qscale, qp);
        else
#endif
            for(int64_t i = 0; i < QW; ++i)
            {
                if(i < live)
                {
                    const int64_t row = qoff + (q0 + pn * QW + i) * p.qs.strides[2];
                    for(int64_t e = 0; e < d; ++e)
                        qp[e * QW + i] = load_elem(p.q, row + e * p.qs.strides[3], p.qt) * qscale;
                }
                else
                    for(int64_t e = 0; e < d; ++e)
                        qp[e * QW + i] = 0.0f;
            }
        float* op = ot + pn * dv * QW;
        for(int64_t e = 0; e < dv * QW; ++e)
            op[e] = 0.0f;
        for(int64_t i = 0; i < QW; ++i)
        {
            mrow[pn * QW + i] = -kInf;
            lrow[pn * QW + i] = 0.0f;
        }
    }

    // Keys any live query of the block can see.
    int64_t kbeg = 0, kend = band.skv;
    if(nq > 0)
    {
        kbeg = imax(kbeg, q0 + lo);
        kend = imin(kend, q0 + nq - 1 + hi + 1);
    }
    else
        kend = 0;

    const bool k_direct = p.kt == DType::F32;
    const bool v_direct = p.vt == DType::F32;
    const float alibi2 = p.alibi ? alibi_slope(h, run.hq) * kLog2e : 0.0f;
    const bool has_bias = p.bias != nullptr;
    const int64_t bias_off = has_bias ? b * p.bias_st[0] + h * p.bias_st[1] : 0;
    const Cap cap = cap_of(p);

    // DOT: K read in place where its pairs of head dims are whole (even d at unit stride); Vp, and the
    // two rows keep_half saves, in the V tile's slot.
    [[maybe_unused]] const bool k_pairs = p.ks.strides[3] == 1 && d % 2 == 0;
    // Each panel prefetches its share of the next tile's K and V rows into L2 where fp32 K and V are
    // read in place and a head's K and V reach a megabyte: below that they stay in L2 between items and
    // the prefetches only cost issue slots. (DOT panels, K in place and V packed from its rows, with
    // the same prefetch: within +-3 % of none at bf16 S 2048-4096, bench/cpu_sdpa_ab.py; not issued.)
    const int64_t kesz = static_cast<int64_t>(dtype_size(p.kt)), vesz = static_cast<int64_t>(dtype_size(p.vt));
    const bool pf_next = !DOT && k_direct && v_direct && p.ks.strides[3] == 1 && p.vs.strides[3] == 1
                         && band.skv * (d * kesz + dv * vesz) >= (int64_t(1) << 20);
    [[maybe_unused]] uint32_t* vpw = reinterpret_cast<uint32_t*>(vbuf);
    [[maybe_unused]] uint32_t* vsave = vpw + (BK + 1) / 2 * dv;
    [[maybe_unused]] const V vqscale = vset(qscale);
    for(int64_t k0 = kbeg; k0 < kend; k0 += BK)
    {
        const int64_t nk = imin(BK, kend - k0);
        // K and V rows of the tile as (pointer, row stride, column stride).
        const float* kt = nullptr;
        int64_t krs = 0, kcs = 0;
        const float* vt = nullptr;
        int64_t vrs = 0, vcs = 0;
        [[maybe_unused]] const uint16_t* kt16 = nullptr; // DOT: bf16 K rows krs16 apart
        [[maybe_unused]] int64_t krs16 = 0;
#if defined(HIPDNN_SDPA_BF16DOT)
        if constexpr(DOT)
        {
            if(k_pairs)
            {
                kt16 = static_cast<const uint16_t*>(p.k) + koff + k0 * p.ks.strides[2];
                krs16 = p.ks.strides[2];
            }
            else
            {
                uint16_t* kb16 = reinterpret_cast<uint16_t*>(kbuf);
                for(int64_t j = 0; j < nk; ++j)
                    copy_bf16_row(p.k, koff + (k0 + j) * p.ks.strides[2], p.ks.strides[3], d, dpad, kb16 + j * dpad);
                kt16 = kb16;
                krs16 = dpad;
            }
            dot_pack_v(p.v, voff + k0 * p.vs.strides[2], p.vs.strides[2], p.vs.strides[3], nk, dv, vpw);
        }
        else
#endif
        {
        if(k_direct)
        {
            kt = static_cast<const float*>(p.k) + koff + k0 * p.ks.strides[2];
            krs = p.ks.strides[2];
            kcs = p.ks.strides[3];
        }
        else
        {
            for(int64_t j = 0; j < nk; ++j)
                widen_row(p.k, koff + (k0 + j) * p.ks.strides[2], p.ks.strides[3], p.kt, d, kbuf + j * d);
            kt = kbuf;
            krs = d;
            kcs = 1;
        }
        if(v_direct)
        {
            vt = static_cast<const float*>(p.v) + voff + k0 * p.vs.strides[2];
            vrs = p.vs.strides[2];
            vcs = p.vs.strides[3];
        }
        else
        {
            for(int64_t j = 0; j < nk; ++j)
                widen_row(p.v, voff + (k0 + j) * p.vs.strides[2], p.vs.strides[3], p.vt, dv, vbuf + j * dv);
            vt = vbuf;
            vrs = dv;
            vcs = 1;
        }
        }

        // Rows of the next tile to prefetch into L2 (K and V read in place, unit dim strides), where a
        // head's K and V (a megabyte or more) stream from L3 for every item: +2-4 % at S >= 2048 (each
        // panel issues its share after its P.V). Smaller heads stay in L2 between items; there the
        // prefetches were within +-3 %, so they are left out.
        const int64_t pf_rows = pf_next ? imax(0, imin(BK, kend - k0 - BK)) : 0;
        const auto prefetch_share = [&](int64_t pn) { // panel pn's share of the next tile's rows
            if(pf_rows <= 0)
                return;
            const int64_t r0 = pn * pf_rows / npan, r1 = (pn + 1) * pf_rows / npan;
            const char* kn = static_cast<const char*>(p.k) + (koff + (k0 + BK) * p.ks.strides[2]) * kesz;
            const char* vn = static_cast<const char*>(p.v) + (voff + (k0 + BK) * p.vs.strides[2]) * vesz;
            prefetch_kv_rows(kn, p.ks.strides[2] * kesz, d * kesz, vn, p.vs.strides[2] * vesz, dv * vesz, r0, r1 - r0);
        };
        for(int64_t pn = 0; pn < npan; ++pn)
        {
            const int64_t pq0 = q0 + pn * QW;
            const int64_t pq1 = imin(pq0 + QW, q0 + nq); // live queries [pq0, pq1)
            // Key rows of this tile that some live query of the panel sees.
            const int64_t j0 = imax(k0, pq0 + lo);
            const int64_t j1 = imin(k0 + nk, pq1 - 1 + hi + 1);
            if(j0 >= j1 || (has_bias && sdpa_bias_masks_block(p, bias_off, pq0, pq1, j0, j1)))
                continue;
            const int64_t rows = j1 - j0;
            float* s = st; // row r = key j0 + r
            // Rows every live query of the panel sees: j - hi <= pq0 and j - lo >= pq1 - 1.
            const bool band_free = !banded || (j1 - 1 <= pq0 + hi && j0 >= pq1 - 1 + lo);
            const bool plain = band_free && !has_bias && !p.alibi && !cap.on;

            float* mp = mrow + pn * QW;
            float* lp = lrow + pn * QW;
            V mnew[NV], alpha[NV];
            for(int v = 0; v < NV; ++v)
                mnew[v] = vload(mp + v * W);
            const ScoreMods mods{has_bias, bias_off, alibi2, cap};
#if defined(HIPDNN_SDPA_BF16DOT)
            if constexpr(DOT)
            {
                // Scores (scaled into log2 units as they leave the registers), the softmax, then P in
                // pairs of keys from the tile's even offsets (pair pa holds keys k0 + 2 pa, + 1)
                // against the tile's Vp rows, a key outside [j0, j1) of a pair kept out of V.
                dot_gemm<NV>(rows, dh, kt16 + (j0 - k0) * krs16, krs16, 2, reinterpret_cast<const uint32_t*>(qt) + pn * dh * QW,
                             s, nullptr, &vqscale, plain ? mnew : nullptr);
                panel_softmax<NV>(p, mods, s, rows, j0, pq0, pq1, lo, hi, band_free, plain, mp, lp, mnew, alpha);
                const int64_t par = (j0 - k0) & 1, pa = (j0 - k0) >> 1;
                const int64_t np = dot_pack_p<NV>(s, rows, par);
                uint32_t* first = vpw + pa * dv;
                uint32_t* last = vpw + (pa + np - 1) * dv;
                const bool cut_lo = par != 0;                                // key j0 - 1 shares the first pair
                const bool cut_hi = ((j1 - k0) & 1) != 0 && j1 < k0 + nk; // key j1 the last (past nk: 0 already)
                if(cut_lo)
                    keep_half(first, dv, 0xffff0000u, vsave);
                if(cut_hi)
                    keep_half(last, dv, 0x0000ffffu, vsave + dv);
                dot_gemm<NV>(dv, np, reinterpret_cast<const uint16_t*>(first), 2, 2 * dv, reinterpret_cast<const uint32_t*>(s),
                             ot + pn * dv * QW, alpha, nullptr, nullptr);
                if(cut_hi)
                    undo_half(last, dv, vsave + dv);
                if(cut_lo)
                    undo_half(first, dv, vsave);
                continue;
            }
#endif
            // Scores; with nothing to add or mask, the new max comes from the product's registers.
            panel_gemm<NV>(rows, d, kt + (j0 - k0) * krs, krs, kcs, qt + pn * d * QW, s, nullptr, plain ? mnew : nullptr);
            panel_softmax<NV>(p, mods, s, rows, j0, pq0, pq1, lo, hi, band_free, plain, mp, lp, mnew, alpha);
            // Ot = Ot * alpha + V^T . P
            panel_gemm<NV>(dv, rows, vt + (j0 - k0) * vrs, vcs, vrs, s, ot + pn * dv * QW, alpha, nullptr);
            prefetch_share(pn);
        }
    }

    // Normalise and write out; rows beyond the live queries (padding) get 0.
#if HIPDNN_SDPA_W == 16 && defined(__AVX512F__)
    if(write_rows16(p, b, h, dv, q0, nq, nq_all, ot, QW, dv, mrow, lrow))
        return;
#endif
    for(int64_t i = 0; i < nq_all; ++i)
    {
        const int64_t pn = i / QW, lane = i % QW;
        const bool live = i < nq;
        write_row(p, b, h, q0 + i, dv, live ? ot + pn * dv * QW + lane : nullptr, QW, live ? mrow[pn * QW + lane] : 0.0f,
                  live ? lrow[pn * QW + lane] : 0.0f);
    }
}

#if defined(HIPDNN_SDPA_AMX)
// ============================================================== AMX kernel ====
// The panel kernel for bf16 q, k and v on AMX-BF16 tiles: both products on the tile unit, exact
// bf16 products summed in fp32; the scores are kept in the panel kernel's transposed layout, so its
// softcapping, bias and ALiBi passes serve here too, before amx_softmax_lazy's one-pass softmax. A
// work item is (batch, head, block of up to kSdpaAmxPanels panels of 32 queries). Per item:
//   Qp [d/2][32][2]  each panel's queries in the tiles' pair layout (B operand), bf16 as given
// per key tile of ABK = 256 (copied once per item, shared by its panels):
//   Kb [keys][d]     K rows, bf16, zero-padded to d % 32 == 0 (A operand: 16 keys x 32 dims)
//   Vt [dv][keys]    V transposed, bf16, zero-padded (A operand: 16 dims x 32 keys)
// and per (tile, panel):
//   St [keys][32] = Kb . Qp        (scores transposed, as the panel kernel's: C = 16 keys x 16 queries)
//   scaled to log2 units (bias and ALiBi added), the online softmax
//   Pp [keys/2][32][2] = bf16(St)  (probabilities rounded to bf16 in pair layout, B operand)
//   Ot [dv][32] = Ot alpha + Vt . Pp  (C = 16 dims x 16 queries, loaded, accumulated, stored)
// P is rounded to bf16 for its product as flash attention does (the running sums l stay fp32).
// All eight tiles are 16 rows x 64 bytes; tiles 0-3 accumulate, 4-5 hold A, 6-7 hold B.

constexpr int64_t AQ = kSdpaAmxQw; // queries per panel
static_assert(AQ == 32 && W == 16, "two 16-lane vectors (two tile columns) per panel");
constexpr int64_t ABK = kSdpaAmxBk;   // keys per tile of the AMX kernel
constexpr int64_t kVtCols = ABK + 32; // keys per row of Vt (room for a 32-key step past the tile)

// Vt[e][j] = v[j][e] for e < dva and j < nk rounded up to 32 (keys past nk give 0), from nk rows
// of v (row stride rs elements, dims at unit stride; dims past dv read as 0): pairs of key rows
// interleaved into 32-bit elements, then 16 x 16 transposes of those. Columns from there to
// kVtCols are left as they are: amx_pv never reads them unmasked.
inline void amx_transpose_v(const uint16_t* v, int64_t rs, int64_t nk, int64_t dv, int64_t dva, uint16_t* vt)
{
    // pair row: key 2p's element e, then key 2p + 1's
    const __m512i lo_idx = _mm512_load_si512(kVPairsLo.lane), hi_idx = _mm512_load_si512(kVPairsHi.lane);
    const int64_t vt_row = kVtCols / 2; // 32-bit elements per row of Vt
    uint32_t* vt32 = reinterpret_cast<uint32_t*>(vt);
    const int64_t npairs = (nk + 31) / 32 * 16;
    for(int64_t p0 = 0; p0 < npairs; p0 += 16) // 16 key pairs
        for(int64_t e0 = 0; e0 < dva; e0 += 32) // 32 dims: two blocks of 16
        {
            const int64_t live = imin(32, dv - e0);
            const __mmask32 m = live >= 32 ? ~__mmask32(0) : live > 0 ? __mmask32((1u << live) - 1u) : __mmask32(0);
            __m512i r0[16], r1[16];
            for(int i = 0; i < 16; ++i)
            {
                const int64_t ka = 2 * (p0 + i);
                const uint16_t* ra = v + ka * rs + e0;
                const __m512i a = ka < nk ? _mm512_maskz_loadu_epi16(m, ra) : _mm512_setzero_si512();
                const __m512i b = ka + 1 < nk ? _mm512_maskz_loadu_epi16(m, ra + rs) : _mm512_setzero_si512();
                r0[i] = _mm512_permutex2var_epi16(a, lo_idx, b); // dims e0 .. e0 + 15
                r1[i] = _mm512_permutex2var_epi16(a, hi_idx, b); // dims e0 + 16 .. e0 + 31
            }
            transpose16x16(r0);
            for(int i = 0; i < 16; ++i)
                _mm512_storeu_si512(vt32 + (e0 + i) * vt_row + p0, r0[i]);
            if(e0 + 16 < dva)
            {
                transpose16x16(r1);
                for(int i = 0; i < 16; ++i)
                    _mm512_storeu_si512(vt32 + (e0 + 16 + i) * vt_row + p0, r1[i]);
            }
        }
}

// St[r][0..32) = sum_e K[r][e] Qp[e][..] for r < 16 nrt: key rows from k (row stride ks elements,
// dpa bf16 each, 16 nrt of them readable), the panel's queries from qp.
inline void amx_scores(const uint16_t* kb, int64_t kstride, int64_t nrt, int64_t dpa, const uint16_t* qp, float* st)
{
    const int64_t ks = kstride * 2;
    int64_t t = 0;
    for(; t + 2 <= nrt; t += 2)
    {
        const uint16_t* k0 = kb + t * 16 * kstride;
        const uint16_t* k1 = k0 + 16 * kstride;
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for(int64_t e = 0; e < dpa; e += 32)
        {
            _tile_loadd(4, k0 + e, ks);
            _tile_loadd(5, k1 + e, ks);
            _tile_loadd(6, qp + e * AQ, AQ * 4);
            _tile_loadd(7, qp + e * AQ + 32, AQ * 4);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
        _tile_stored(0, st + t * 16 * AQ, AQ * 4);
        _tile_stored(1, st + t * 16 * AQ + 16, AQ * 4);
        _tile_stored(2, st + (t + 1) * 16 * AQ, AQ * 4);
        _tile_stored(3, st + (t + 1) * 16 * AQ + 16, AQ * 4);
    }
    if(t < nrt)
    {
        const uint16_t* k0 = kb + t * 16 * kstride;
        _tile_zero(0);
        _tile_zero(1);
        for(int64_t e = 0; e < dpa; e += 32)
        {
            _tile_loadd(4, k0 + e, ks);
            _tile_loadd(6, qp + e * AQ, AQ * 4);
            _tile_loadd(7, qp + e * AQ + 32, AQ * 4);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
        }
        _tile_stored(0, st + t * 16 * AQ, AQ * 4);
        _tile_stored(1, st + t * 16 * AQ + 16, AQ * 4);
    }
}

// Ot[e][0..32) += sum_j Vt[e][koff + j] Pp[j] for e < dva, j < rows (in 32-key steps, nkc of them).
// Keys from rows to the end of the last step get zeros in a copy of that step's columns (tail,
// dva x 32): Pp is 0 there, but 0 times an infinite V element would be NaN, and those keys are not
// the panel's (the panel kernel's products stop at rows as well).
inline void amx_pv(const uint16_t* vt, int64_t koff, int64_t rows, int64_t nkc, int64_t dva, const uint16_t* pp,
                   uint16_t* tail, float* ot, bool fresh)
{
    // Ot's tiles: zeros for the panel's first tile of keys (Ot is not cleared beforehand), else Ot.
    const auto start = [&](float* o0, float* o1) {
        if(fresh)
        {
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
            return;
        }
        _tile_loadd(0, o0, AQ * 4);
        _tile_loadd(1, o0 + 16, AQ * 4);
        if(o1 != nullptr)
        {
            _tile_loadd(2, o1, AQ * 4);
            _tile_loadd(3, o1 + 16, AQ * 4);
        }
    };
    constexpr int64_t vs = kVtCols * 2;
    const int64_t last = rows - (nkc - 1) * 32; // keys of the last step (1 .. 32)
    const bool ragged = last < 32;
    if(ragged)
    {
        const __mmask32 m = static_cast<__mmask32>((1u << last) - 1u);
        for(int64_t e = 0; e < dva; ++e)
            _mm512_storeu_si512(tail + e * 32,
                                _mm512_maskz_loadu_epi16(m, vt + e * kVtCols + koff + (nkc - 1) * 32));
    }
    // A operand of step c for dims e .. e + 15: the tail's copy for a ragged last step.
    const auto a_at = [&](int64_t c, int64_t e) -> const uint16_t* {
        return ragged && c == nkc - 1 ? tail + e * 32 : vt + e * kVtCols + koff + c * 32;
    };
    const auto a_stride = [&](int64_t c) -> int { return ragged && c == nkc - 1 ? 64 : static_cast<int>(vs); };
    int64_t e = 0;
    for(; e + 32 <= dva; e += 32)
    {
        float* o0 = ot + e * AQ;
        float* o1 = o0 + 16 * AQ;
        start(o0, o1);
        for(int64_t c = 0; c < nkc; ++c)
        {
            _tile_loadd(4, a_at(c, e), a_stride(c));
            _tile_loadd(5, a_at(c, e + 16), a_stride(c));
            _tile_loadd(6, pp + c * 32 * AQ, AQ * 4);
            _tile_loadd(7, pp + c * 32 * AQ + 32, AQ * 4);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
        _tile_stored(0, o0, AQ * 4);
        _tile_stored(1, o0 + 16, AQ * 4);
        _tile_stored(2, o1, AQ * 4);
        _tile_stored(3, o1 + 16, AQ * 4);
    }
    if(e < dva)
    {
        float* o0 = ot + e * AQ;
        start(o0, nullptr);
        for(int64_t c = 0; c < nkc; ++c)
        {
            _tile_loadd(4, a_at(c, e), a_stride(c));
            _tile_loadd(6, pp + c * 32 * AQ, AQ * 4);
            _tile_loadd(7, pp + c * 32 * AQ + 32, AQ * 4);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
        }
        _tile_stored(0, o0, AQ * 4);
        _tile_stored(1, o0 + 16, AQ * 4);
    }
}

// A plain tile of one panel (nothing adds to or masks its scores): the panel's running max m is
// kept unless this tile's exponents pass it by more than kAmxLazy (log2 units), so most tiles leave
// Ot alone (alpha = 1); then one pass makes P = exp2(s scale - m), its row sums and its pair layout
// for the tiles, from St as the tile unit wrote it (the scale is applied here, in the exponent's
// FMA). That pass tests the sums, not a max (kAmxSumBound): P then stays below ABK 2^kAmxLazy =
// 2^16, far from fp32's or bf16's range. Rows from `rows` on are zeros of Pp.
constexpr float kAmxLazy = 8.0f;
constexpr float kAmxSumBound = static_cast<float>(ABK) * static_cast<float>(1 << static_cast<int>(kAmxLazy));

// 2^x for the lazy tiles' P, in 6 vector operations: x = n + f with n = floor(x) and f in [0, 1)
// (vreduceps), 2^f by a degree-4 polynomial fitted for relative error (2.7e-6 after fp32 Horner,
// against the 2^-9 of P's rounding to bf16; the stats move by ~1e-6), then vscalefps multiplies by
// 2^n (it floors x itself, so n is never formed). The infinities need no clamp: vreduceps gives 0
// for them and vscalefps 2^-inf = 0, 2^+inf = inf; NaN stays NaN. Below -126 the result would be
// subnormal; the items run with flush-to-zero, so it is 0 (and costs no assist). x may reach
// kAmxLazy + log2 ABK.
inline V exp2_amx(V x)
{
    // (mask forms throughout: GCC 12 warns that the plain forms' merge source may be uninitialised)
    const __mmask16 all = 0xffff;
    const __m512 f = _mm512_maskz_reduce_ps(all, (__m512)x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    __m512 p = _mm512_set1_ps(0.013534137047827244f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.05201148986816406f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.24144276976585388f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.6930038332939148f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0000026226043701f));
    return (V)_mm512_mask_scalef_ps(p, all, p, (__m512)x);
}

// The band (causal masks, sliding windows) of one panel inside a key tile: rows r of the tile (key
// j0 + r) outside [in0, in1) are on its edge, where query pq0 + 16 v + i sees key j iff
// j - hi <= query <= j - lo; the rows in between are seen by every live query of the panel.
struct AmxBand
{
    int64_t j0, pq0, lo, hi;
    int64_t in0, in1;
    // The lanes of vector v that see row r's key (every lane inside the band).
    __mmask16 lanes(int64_t r, int v) const
    {
        if(r >= in0 && r < in1)
            return 0xffff;
        const int64_t j = j0 + r, q = pq0 + v * W;
        const int64_t first = imax(0, imin(W, j - hi - q));
        const int64_t end = imax(0, imin(W, j - lo - q + 1));
        if(first >= end)
            return 0;
        return static_cast<__mmask16>(((1u << end) - 1u) & ~((1u << first) - 1u));
    }
};

// P = exp2(s scale + nmu) for rows < rows (0 past them and where the band masks a key), its row
// sums added to sum and its pair layout written to pp.
inline void amx_exp_pack(const float* st, int64_t rows, int64_t npairs, V sc, const V* nmu, const AmxBand& band, V* sum,
                         uint16_t* pp)
{
    const __m512 ninf = _mm512_set1_ps(-kInf);
    const auto exp_row = [&](int64_t r, int v) -> __m512 {
        // Scaled, rounded, then the max taken off, as the max itself was formed (a fused
        // multiply-add would leave the product's rounding error, up to 2^-24 |m|, in the max's own
        // exponent: at scores of 1e30 that is 2^(+-1e23))
        __m512 x = _mm512_maskz_add_ps(0xffff, _mm512_maskz_mul_ps(0xffff, (__m512)vload(st + r * AQ + v * W), (__m512)sc),
                                       (__m512)nmu[v]);
        if(r < band.in0 || r >= band.in1)
            x = _mm512_mask_mov_ps(ninf, band.lanes(r, v), x);
        return (__m512)exp2_amx((V)x);
    };
    for(int64_t q = 0; q < npairs; ++q)
        for(int v = 0; v < 2; ++v)
        {
            const int64_t r0 = 2 * q, r1 = 2 * q + 1;
            const __m512 e0 = r0 < rows ? exp_row(r0, v) : _mm512_setzero_ps();
            const __m512 e1 = r1 < rows ? exp_row(r1, v) : _mm512_setzero_ps();
            sum[v] += (V)e0 + (V)e1;
            store_pair(e0, e1, pp + q * 2 * AQ + v * 32);
        }
}

// One panel's softmax over a tile (the band may mask its edge rows; a softcap, a bias or ALiBi is
// already in the scores, which then come in log2 units with qscale 1), in one pass where
// the running max stands (see kAmxLazy), unless !try_lazy: then straight to the exact pass (max,
// then exponentials). Returns whether the running max stood (alpha = 1 in every lane).
inline bool amx_softmax_lazy(const float* st, int64_t rows, int64_t npairs, float qscale, const AmxBand& band,
                             bool try_lazy, float* mp, float* lp, V* alpha, uint16_t* pp)
{
    const V sc = vset(qscale), ninf = vset(-kInf);
    V m[2] = {vload(mp), vload(mp + W)};
    // Once every lane's max is finite, first try the exponentials against it as it stands: when the
    // sums show no exponent past the lazy margin (the common case after a sequence's first tiles)
    // that is the one pass over St, and m, alpha = 1 and Ot stay.
    const __m512 inf = _mm512_set1_ps(kInf);
    const bool finite = _mm512_cmp_ps_mask(_mm512_abs_ps((__m512)m[0]), inf, _CMP_LT_OQ) == 0xffff
                        && _mm512_cmp_ps_mask(_mm512_abs_ps((__m512)m[1]), inf, _CMP_LT_OQ) == 0xffff;
    if(finite && try_lazy)
    {
        const V nmu[2] = {-m[0], -m[1]};
        V sum[2] = {V{}, V{}};
        amx_exp_pack(st, rows, npairs, sc, nmu, band, sum, pp);
        // The tile's sums tell whether its exponents stayed in range, with no max taken: exponents
        // all within the margin give sums of at most kAmxSumBound, and a sum within that bound
        // holds no term above it (no exponent above kAmxLazy + log2 ABK). A NaN fails the test;
        // the tile then takes the exact path below.
        const __m512 bound = _mm512_set1_ps(kAmxSumBound);
        if(_mm512_cmp_ps_mask((__m512)sum[0], bound, _CMP_LE_OQ) == 0xffff
           && _mm512_cmp_ps_mask((__m512)sum[1], bound, _CMP_LE_OQ) == 0xffff)
        {
            for(int v = 0; v < 2; ++v)
            {
                alpha[v] = vset(1.0f);
                vstore(lp + v * W, vload(lp + v * W) + sum[v]);
            }
            return true;
        }
    }
    // The tile's max over the keys each lane sees: of s for a positive scale, of -s for a negative
    // one, scaled once after.
    const __m512 sgn = _mm512_set1_ps(qscale < 0.0f ? -1.0f : 1.0f);
    __m512 mx[2] = {(__m512)ninf, (__m512)ninf};
    for(int64_t r = 0; r < rows; ++r)
        for(int v = 0; v < 2; ++v)
        {
            const V x = vload(st + r * AQ + v * W) * (V)sgn;
            mx[v] = (__m512)vmax((V)mx[v], (V)_mm512_mask_mov_ps((__m512)ninf, band.lanes(r, v), (__m512)x));
        }
    V nmu[2]; // minus the max the exponents use (0 for a lane that has seen only -inf so far)
    for(int v = 0; v < 2; ++v)
    {
        // (a lane that sees no key of this tile keeps -inf: with a zero scale, -inf * 0 would be NaN)
        const V tmax = (V)mx[v] == ninf ? ninf : (V)mx[v] * (sc * (V)sgn);
        // keep m unless the tile's max passes it by the margin, is NaN, or is the first finite one
        const V mu = tmax <= m[v] + kAmxLazy ? m[v] : tmax;
        const V mu_exp = mu == ninf ? V{} : mu;
        alpha[v] = exp2_nonpos(m[v] - mu_exp);
        vstore(mp + v * W, mu);
        nmu[v] = -mu_exp;
    }
    V sum[2] = {V{}, V{}};
    amx_exp_pack(st, rows, npairs, sc, nmu, band, sum, pp);
    for(int v = 0; v < 2; ++v)
        vstore(lp + v * W, vload(lp + v * W) * alpha[v] + sum[v]);
    const __m512 one = _mm512_set1_ps(1.0f);
    return _mm512_cmp_ps_mask((__m512)alpha[0], one, _CMP_EQ_OQ) == 0xffff
           && _mm512_cmp_ps_mask((__m512)alpha[1], one, _CMP_EQ_OQ) == 0xffff;
}

void amx_item(const SdpaRun& run, int64_t w, float* ws)
{
    constexpr int NV = 2;
    const SdpaProblem& p = *run.p;
    const int64_t qb = run.nqb - 1 - (w % run.nqb); // later (heavier under causal) blocks first
    const int64_t bh = w / run.nqb;
    const int64_t h = bh % run.hq;
    const int64_t b = bh / run.hq;
    const int64_t hk = h / run.group;
    const int64_t d = run.d, dv = run.dv, dpa = run.dpa, dva = run.dva;

    const Band band = batch_band(p, run, b);
    const int64_t lo = band.lo, hi = band.hi;
    const bool banded = hi < kFar || lo > -kFar;

    const int64_t q0 = qb * run.panels * AQ;
    const int64_t nq = imax(0, imin(run.panels * AQ, band.sq - q0)); // live queries of the block
    const int64_t nq_all = imin(run.panels * AQ, run.sq - q0);       // rows of the block to write
    const int64_t npan = (nq + AQ - 1) / AQ;

    uint16_t* qp = reinterpret_cast<uint16_t*>(ws + run.off_qt);
    float* ot = ws + run.off_ot;
    float* st = ws + run.off_st;
    uint16_t* pp = reinterpret_cast<uint16_t*>(ws + run.off_pb);
    float* mrow = ws + run.off_m;
    float* lrow = ws + run.off_l;
    uint16_t* kb = reinterpret_cast<uint16_t*>(ws + run.off_kb);
    uint16_t* vb = reinterpret_cast<uint16_t*>(ws + run.off_vb);
    uint16_t* vt = reinterpret_cast<uint16_t*>(ws + run.off_vt);
    uint16_t* vtail = vt + dva * kVtCols;

    const int64_t qoff = b * p.qs.strides[0] + h * p.qs.strides[1];
    const int64_t koff = b * p.ks.strides[0] + hk * p.ks.strides[1];
    const int64_t voff = b * p.vs.strides[0] + hk * p.vs.strides[1];
    const uint16_t* qsrc = static_cast<const uint16_t*>(p.q);

    // Queries in pair layout: Qp[e / 2][i][e % 2] = q[i][e] (bf16 bits as given; 0 past d and for
    // queries that are not live). Rows with strided dims go through Kb's buffer first.
    for(int64_t pn = 0; pn < npan; ++pn)
    {
        uint16_t* qpp = qp + pn * dpa * AQ;
        const int64_t n = imin(AQ, q0 + nq - (q0 + pn * AQ));
        const uint16_t* rows0 = qsrc + qoff + (q0 + pn * AQ) * p.qs.strides[2];
        if(p.qs.strides[3] == 1)
            pack_q_pairs<AQ>(rows0, p.qs.strides[2], n, d, dpa / 2, reinterpret_cast<uint32_t*>(qpp));
        else
        {
            for(int64_t i = 0; i < n; ++i)
                copy_bf16_row(p.q, qoff + (q0 + pn * AQ + i) * p.qs.strides[2], p.qs.strides[3], d, dpa, kb + i * dpa);
            pack_q_pairs<AQ>(kb, dpa, n, d, dpa / 2, reinterpret_cast<uint32_t*>(qpp));
        }
        for(int64_t i = 0; i < AQ; ++i)
        {
            mrow[pn * AQ + i] = -kInf;
            lrow[pn * AQ + i] = 0.0f;
        }
    }

    // Keys any live query of the block can see.
    int64_t kbeg = 0, kend = band.skv;
    if(nq > 0)
    {
        kbeg = imax(kbeg, q0 + lo);
        kend = imin(kend, q0 + nq - 1 + hi + 1);
    }
    else
        kend = 0;

    const float qscale = p.scale * kLog2e;
    const ScoreMods mods{p.bias != nullptr, p.bias != nullptr ? b * p.bias_st[0] + h * p.bias_st[1] : 0,
                         p.alibi ? alibi_slope(h, run.hq) * kLog2e : 0.0f, cap_of(p)};

    // Panels whose Ot holds a sum (the first tile of keys a panel sees starts it from zeros).
    static_assert(kSdpaAmxPanels <= 64, "one bit per panel");
    uint64_t started = 0;
    uint64_t rising = 0; // panels whose last tile raised the running max
    if(kbeg < kend)
        amx_configure_16x64();
    // K is read in place where its rows hold whole 32-dim steps at unit stride, else copied per tile
    // into Kb (rows past the tile's keys are left as they are: their scores are never read).
    const bool k_direct = p.ks.strides[3] == 1 && d == dpa;
    const uint16_t* ksrc = static_cast<const uint16_t*>(p.k) + koff;
    const uint16_t* vsrc = static_cast<const uint16_t*>(p.v) + voff;
    for(int64_t k0 = kbeg; k0 < kend; k0 += ABK)
    {
        const int64_t nk = imin(ABK, kend - k0);
        if(!k_direct)
            for(int64_t j = 0; j < nk; ++j)
                copy_bf16_row(p.k, koff + (k0 + j) * p.ks.strides[2], p.ks.strides[3], d, dpa, kb + j * dpa);
        // V transposed, read in place where its dims are at unit stride
        if(p.vs.strides[3] == 1)
            amx_transpose_v(vsrc + k0 * p.vs.strides[2], p.vs.strides[2], nk, dv, dva, vt);
        else
        {
            for(int64_t j = 0; j < nk; ++j)
                copy_bf16_row(p.v, voff + (k0 + j) * p.vs.strides[2], p.vs.strides[3], dv, dva, vb + j * dva);
            amx_transpose_v(vb, dva, nk, dv, dva, vt);
        }

        for(int64_t pn = 0; pn < npan; ++pn)
        {
            const int64_t pq0 = q0 + pn * AQ;
            const int64_t pq1 = imin(pq0 + AQ, q0 + nq); // live queries [pq0, pq1)
            const int64_t j0 = imax(k0, pq0 + lo);
            const int64_t j1 = imin(k0 + nk, pq1 - 1 + hi + 1);
            if(j0 >= j1 || (mods.has_bias && sdpa_bias_masks_block(p, mods.bias_off, pq0, pq1, j0, j1)))
                continue;
            const int64_t rows = j1 - j0;
            const bool band_free = !banded || (j1 - 1 <= pq0 + hi && j0 >= pq1 - 1 + lo);
            // (K in place only where the 16-row steps stay inside K's rows)
            const int64_t nrt = (rows + 15) / 16;
            if(k_direct && j0 + 16 * nrt <= run.skv)
                amx_scores(ksrc + j0 * p.ks.strides[2], p.ks.strides[2], nrt, dpa, qp + pn * dpa * AQ, st);
            else
            {
                if(k_direct) // this tile's rows into Kb after all
                    for(int64_t j = j0 - k0; j < nk; ++j)
                        std::memcpy(kb + j * dpa, ksrc + (k0 + j) * p.ks.strides[2], static_cast<size_t>(dpa) * 2);
                amx_scores(kb + (j0 - k0) * dpa, dpa, nrt, dpa, qp + pn * dpa * AQ, st);
            }

            float* mp = mrow + pn * AQ;
            float* lp = lrow + pn * AQ;
            V alpha[NV];
            const int64_t nkc = (rows + 31) / 32;
            // The online softmax in one pass where the running max stands (amx_softmax_lazy), the
            // band's edge rows masked per lane in it; softcapping, ALiBi and a bias go into the scores
            // first (in log2 units; the cap before the additions, as in the panel kernel).
            AmxBand bd{j0, pq0, lo, hi, 0, rows};
            if(!band_free)
            {
                bd.in0 = imin(rows, imax(0, pq1 - 1 + lo - j0));
                bd.in1 = imax(bd.in0, imin(rows, pq0 + hi - j0 + 1));
            }
            float scale = qscale;
            if(mods.has_bias || p.alibi || mods.cap.on)
            {
                if(p.alibi && !mods.cap.on) // scaled and ALiBi added in one pass
                    add_alibi<NV>(st, rows, j0, pq0, mods.alibi2, qscale);
                else
                {
                    const V sc = vset(qscale);
                    for(int64_t r = 0; r < rows; ++r)
                        for(int v = 0; v < NV; ++v)
                            vstore(st + r * AQ + v * W, vload(st + r * AQ + v * W) * sc);
                    if(mods.cap.on)
                        cap_scores(st, rows * AQ, mods.cap);
                    if(p.alibi)
                        add_alibi<NV>(st, rows, j0, pq0, mods.alibi2, 1.0f);
                }
                if(mods.has_bias)
                    add_bias<NV>(p, mods.bias_off, st, rows, j0, pq0, pq1, false);
                scale = 1.0f;
            }
            // (straight to the exact pass where the panel's last tile moved its max: scores that keep
            // rising, as ALiBi's do towards the diagonal, would fail the lazy pass each time; a panel's
            // first tile always sets its max, which says nothing about the next one)
            const bool fresh = (started >> pn & 1u) == 0;
            const bool kept = amx_softmax_lazy(st, rows, nkc * 16, scale, bd, (rising >> pn & 1u) == 0, mp, lp, alpha, pp);
            if(!fresh)
                rising = kept ? rising & ~(uint64_t(1) << pn) : rising | uint64_t(1) << pn;
            started |= uint64_t(1) << pn;

            // Ot = Ot alpha (skipped while the max stands) + Vt . Pp; Ot = Vt . Pp on the panel's first
            // tile (its alpha is 0: nothing to keep)
            float* op = ot + pn * dva * AQ;
            const bool rescale = !fresh && !kept;
            if(rescale)
                for(int64_t e = 0; e < dva; ++e)
                    for(int v = 0; v < NV; ++v)
                        vstore(op + e * AQ + v * W, vload(op + e * AQ + v * W) * alpha[v]);
            amx_pv(vt, j0 - k0, rows, nkc, dva, pp, vtail, op, fresh);
        }
    }
    if(kbeg < kend)
        _tile_release();

    // Normalise and write out; rows beyond the live queries (padding) get 0.
    if(write_rows16(p, b, h, dv, q0, nq, nq_all, ot, AQ, dva, mrow, lrow))
        return;
    for(int64_t i = 0; i < nq_all; ++i)
    {
        const int64_t pn = i / AQ, lane = i % AQ;
        const bool live = i < nq;
        write_row(p, b, h, q0 + i, dv, live ? ot + pn * dva * AQ + lane : nullptr, AQ, live ? mrow[pn * AQ + lane] : 0.0f,
                  live ? lrow[pn * AQ + lane] : 0.0f);
    }
}
#endif // HIPDNN_SDPA_AMX

} // namespace

// Panels of up to run.max_vectors vectors of queries, fewer where that wastes fewer lanes
// (sdpa_plan_layout picks); the AMX build's tile kernel for bf16 q, k and v (run.amx).
void run_item(const SdpaRun& run, int64_t w, float* ws)
{
    [[maybe_unused]] const FlushToZero ftz;
#if defined(HIPDNN_SDPA_AMX)
    if(run.amx)
    {
        amx_item(run, w, ws);
        return;
    }
#endif
    const bool last_block = w % run.nqb == 0; // panel_item's order: block nqb - 1 first
    const int64_t nv = (last_block && run.tail_qw != 0 ? run.tail_qw : run.qw) / W;
#if defined(HIPDNN_SDPA_BF16DOT)
    if(run.bf16dot)
    {
        if(nv == 2)
            panel_item<2, true>(run, w, ws);
        else
            panel_item<3, true>(run, w, ws);
        return;
    }
#endif
    if constexpr(kMaxNV == 4)
        if(nv == 4)
        {
            panel_item<4>(run, w, ws);
            return;
        }
    if(nv == 2)
        panel_item<2>(run, w, ws);
    else
        panel_item<3>(run, w, ws);
}

// ============================================================= rows kernel ====
// Keys this far ahead of the tile being scored are prefetched into L2 (two tiles). Decode reads every
// K and V row once per call, from DRAM when the cache outgrows L3, and the hardware prefetchers alone
// left the loads waiting after each tile's compute: on 2 Zen 4 cores, fp32 decode at Skv 2048-4096
// took 0.75-0.92x the time it took without (bench/results/cpu_sdpa_decode_prefetch_zen4.json). One
// to four tiles ahead measured alike; prefetcht0 was slower than prefetcht1. Off for fp32 K on Intel
// CPUs (run.prefetch_kv, set in run_sdpa).
constexpr int64_t kRowsPrefetchKeys = 2 * BK;

// Item w = (batch, kv head, block of up to rb query rows, key chunk). Row r of
// the (batch, kv head) is query r % sq of head kv_head * group + r / sq, so a
// GQA group's heads share every K and V row loaded. Per key tile (64 keys):
//   s[r][j] = q_r . k_j          W keys at a time: a dot product per key over
//                                the head dim, then one transposing sum
//   per-row softmax update       (bias, ALiBi and the band applied per row)
//   o[r] = o[r] alpha_r + sum_j p[r][j] v_j    head dims along the lanes
// K and V are read in place when fp32 with unit last stride and whole-vector
// head dims, else widened into scratch (zero-padded to whole vectors).
void run_rows_item(const SdpaRun& run, int64_t w, float* ws, float* part)
{
    [[maybe_unused]] const FlushToZero ftz;
    const SdpaProblem& p = *run.p;
    const int64_t c = w % run.chunks;
    const int64_t rest = w / run.chunks;
    const int64_t rbi = rest % run.nrb;
    const int64_t bhk = rest / run.nrb;
    const int64_t hk = bhk % run.hk;
    const int64_t b = bhk / run.hk;
    const int64_t d = run.d, dv = run.dv, dp = run.dp, dvp = run.dvp;
    const int64_t r0 = rbi * run.rb;
    const int64_t nr = imin(run.rb, run.nrows - r0);
    const Band band = batch_band(p, run, b);

    float* rq = ws + run.off_rq; // [rb][dp] queries, scaled into log2 units
    float* ro = ws + run.off_ro; // [rb][dvp] unnormalised output
    float* rs = ws + run.off_rs; // [rb][BK] scores, then probabilities
    float* rm = ws + run.off_rm;
    float* rl = ws + run.off_rl;
    float* ra = ws + run.off_ra;
    float* kbuf = ws + run.off_rk; // [BK][dp]
    float* vbuf = ws + run.off_rv; // [BK][dvp]

    int64_t rh[kSdpaRowsMax], ri[kSdpaRowsMax], rlo[kSdpaRowsMax], rhi[kSdpaRowsMax];
    [[maybe_unused]] const uint16_t* rq16[kSdpaRowsMax] = {}; // (qk_bf16) each row's bf16 query in place
    float ral[kSdpaRowsMax];
    const float qscale = p.scale * kLog2e;
    const int64_t cb = c * run.chunk;
    const int64_t ce = c + 1 == run.chunks ? band.skv : imin(band.skv, cb + run.chunk);
    int64_t kbeg = ce, kend = cb;
    for(int64_t r = 0; r < nr; ++r)
    {
        const int64_t gr = r0 + r;
        const int64_t i = gr % run.sq;
        const int64_t h = hk * run.group + gr / run.sq;
        rh[r] = h;
        ri[r] = i;
        ral[r] = p.alibi ? alibi_slope(h, run.hq) * kLog2e : 0.0f;
        // Keys row r sees in this chunk: [rlo, rhi) (empty for a padding row).
        rlo[r] = imax(cb, i + band.lo);
        rhi[r] = i < band.sq ? imin(ce, i + band.hi + 1) : rlo[r];
        rm[r] = -kInf;
        rl[r] = 0.0f;
        for(int64_t e = 0; e < dvp; ++e)
            ro[r * dvp + e] = 0.0f;
        if(rlo[r] >= rhi[r])
            continue;
        kbeg = imin(kbeg, rlo[r]);
        kend = imax(kend, rhi[r]);
        float* qr = rq + r * dp;
        const int64_t qoff = b * p.qs.strides[0] + h * p.qs.strides[1] + i * p.qs.strides[2];
        rq16[r] = p.qt == DType::BF16 ? static_cast<const uint16_t*>(p.q) + qoff : nullptr;
        widen_row(p.q, qoff, p.qs.strides[3], p.qt, d, qr);
        for(int64_t e = 0; e < d; ++e)
            qr[e] *= qscale;
        for(int64_t e = d; e < dp; ++e)
            qr[e] = 0.0f;
    }

    const int64_t koff = b * p.ks.strides[0] + hk * p.ks.strides[1];
    const int64_t voff = b * p.vs.strides[0] + hk * p.vs.strides[1];
    const bool k_direct = p.kt == DType::F32 && p.ks.strides[3] == 1 && d == dp;
    const bool v_direct = p.vt == DType::F32 && p.vs.strides[3] == 1 && dv == dvp;
    // bf16 rows with whole-vector head dims are read in place too, widened in the registers
#if defined(__AVX512BF16__)
    // bf16 q and k with unit dim strides: scores by VDPBF16PS from both in place (dot_keys_bf16)
    const bool qk_bf16 = p.qt == DType::BF16 && p.kt == DType::BF16 && p.qs.strides[3] == 1 && p.ks.strides[3] == 1
                         && d % 32 == 0;
#else
    const bool qk_bf16 = false;
#endif
    // (K widened in the registers only for one query row: with more, each row would widen it again)
    const bool k_bf16 = p.kt == DType::BF16 && p.ks.strides[3] == 1 && d == dp && (nr == 1 || qk_bf16);
    const bool v_bf16 = p.vt == DType::BF16 && p.vs.strides[3] == 1 && dv == dvp;
    const bool has_bias = p.bias != nullptr;
    const Cap cap = cap_of(p);
    // Rows read in place or widened from unit-stride rows are prefetched kRowsPrefetchKeys ahead, W keys
    // for every W scored, so the prefetches spread over the tile's work rather than queueing at once.
    const bool prefetch = run.prefetch_kv && p.ks.strides[3] == 1 && p.vs.strides[3] == 1;
    const int64_t kesz = static_cast<int64_t>(dtype_size(p.kt)), vesz = static_cast<int64_t>(dtype_size(p.vt));
    const char* kpf = static_cast<const char*>(p.k) + koff * kesz;
    const char* vpf = static_cast<const char*>(p.v) + voff * vesz;
    const auto prefetch_ahead = [&](int64_t j) { // keys [j, j + W) + kRowsPrefetchKeys, up to kend
        const int64_t a = j + kRowsPrefetchKeys;
        if(prefetch && a < kend)
            prefetch_kv_rows(kpf, p.ks.strides[2] * kesz, d * kesz, vpf, p.vs.strides[2] * vesz, dv * vesz, a,
                             imin(W, kend - a));
    };
    for(int64_t k0 = kbeg; k0 < kend; k0 += BK)
    {
        const int64_t nk = imin(BK, kend - k0);
        const int64_t nkv = (nk + W - 1) / W * W;
        const float* kt = nullptr;
        const uint16_t* kt16 = nullptr; // (k_bf16)
        int64_t krs;
        if(k_direct)
        {
            kt = static_cast<const float*>(p.k) + koff + k0 * p.ks.strides[2];
            krs = p.ks.strides[2];
        }
        else if(k_bf16)
        {
            kt16 = static_cast<const uint16_t*>(p.k) + koff + k0 * p.ks.strides[2];
            krs = p.ks.strides[2];
        }
        else
        {
            for(int64_t j = 0; j < nk; ++j)
            {
                float* dst = kbuf + j * dp;
                widen_row(p.k, koff + (k0 + j) * p.ks.strides[2], p.ks.strides[3], p.kt, d, dst);
                for(int64_t e = d; e < dp; ++e)
                    dst[e] = 0.0f;
            }
            kt = kbuf;
            krs = dp;
        }
        const float* vt = nullptr;
        const uint16_t* vt16 = nullptr; // (v_bf16)
        int64_t vrs;
        if(v_direct)
        {
            vt = static_cast<const float*>(p.v) + voff + k0 * p.vs.strides[2];
            vrs = p.vs.strides[2];
        }
        else if(v_bf16)
        {
            vt16 = static_cast<const uint16_t*>(p.v) + voff + k0 * p.vs.strides[2];
            vrs = p.vs.strides[2];
        }
        else
        {
            for(int64_t j = 0; j < nk; ++j)
            {
                float* dst = vbuf + j * dvp;
                widen_row(p.v, voff + (k0 + j) * p.vs.strides[2], p.vs.strides[3], p.vt, dv, dst);
                for(int64_t e = dv; e < dvp; ++e)
                    dst[e] = 0.0f;
            }
            vt = vbuf;
            vrs = dvp;
        }

        bool live = false; // some row of the block sees a key of the tile
        bool fetched = false; // the next tiles' rows prefetched (by the first live row)
        for(int64_t r = 0; r < nr; ++r)
        {
            float* s = rs + r * BK;
            // Keys of the tile row r sees: [a, z).
            const int64_t a = imax(rlo[r] - k0, 0), z = imin(rhi[r] - k0, nk);
            if(a >= z)
            {
                for(int64_t j = 0; j < nk; ++j)
                    s[j] = 0.0f;
                ra[r] = 1.0f;
                continue;
            }
            const int64_t boff = has_bias ? b * p.bias_st[0] + rh[r] * p.bias_st[1] : 0;
            // keys the bias masks (-inf) throughout, as a padding mask does: as if the row saw none
            if(has_bias && sdpa_bias_masks_block(p, boff, ri[r], ri[r] + 1, k0 + a, k0 + z))
            {
                for(int64_t j = 0; j < nk; ++j)
                    s[j] = 0.0f;
                ra[r] = 1.0f;
                continue;
            }
            live = true;
            const float* qr = rq + r * dp;
#if defined(__AVX512BF16__)
            if(qk_bf16)
            {
                const V sc = vset(qscale);
                for(int64_t j = 0; j < nk; j += W)
                {
                    if(!fetched)
                        prefetch_ahead(k0 + j);
                    vstore(s + j, dot_keys_bf16(kt16 + j * krs, krs, nk - j, rq16[r], d) * sc);
                }
            }
            else
#endif
                for(int64_t j = 0; j < nk; j += W)
                {
                    if(!fetched)
                        prefetch_ahead(k0 + j);
                    vstore(s + j, kt16 != nullptr ? dot_keys(kt16 + j * krs, krs, nk - j, qr, dp)
                                                  : dot_keys(kt + j * krs, krs, nk - j, qr, dp));
                }
            fetched = true;
            if(cap.on) // before the bias, ALiBi and the masks
                cap_scores(s, nkv, cap);
            if(has_bias)
            {
                const int64_t brow = boff + ri[r] * p.bias_st[2] + k0 * p.bias_st[3];
                if(p.bias_st[3] == 1 && p.bias_t == DType::F32) // keys contiguous: loops that vectorize
                {
                    const float* bp = static_cast<const float*>(p.bias) + brow;
                    for(int64_t j = a; j < z; ++j)
                        s[j] += bias_log2(bp[j]);
                }
                else if(p.bias_st[3] == 1 && p.bias_t == DType::BF16)
                {
                    const uint16_t* bp = static_cast<const uint16_t*>(p.bias) + brow;
                    for(int64_t j = a; j < z; ++j)
                        s[j] += bias_log2(bf16_to_float(bp[j]));
                }
                else
                    for(int64_t j = a; j < z; ++j)
                        s[j] += bias_log2(load_elem(p.bias, brow + j * p.bias_st[3], p.bias_t));
            }
            if(p.alibi)
                for(int64_t j = a; j < z; ++j)
                    s[j] += ral[r] * static_cast<float>(k0 + j - ri[r]);
            for(int64_t j = 0; j < a; ++j)
                s[j] = -kInf;
            for(int64_t j = z; j < nkv; ++j)
                s[j] = -kInf;

            V mx = vset(-kInf);
            for(int64_t j = 0; j < nkv; j += W)
                mx = vmax(mx, vload(s + j));
            const float mt = hmax(mx);
            const float mold = rm[r];
            const float mnew = mold > mt ? mold : mt; // a NaN score propagates
            const float muse = mnew == -kInf ? 0.0f : mnew;
            V sum = V{};
            const V mu = vset(muse);
            for(int64_t j = 0; j < nkv; j += W)
            {
                const V e = exp2_nonpos(vload(s + j) - mu);
                vstore(s + j, e);
                sum += e;
            }
            const float alpha = exp2_scalar(mold - muse);
            rl[r] = rl[r] * alpha + hsum(sum);
            rm[r] = mnew;
            ra[r] = alpha;
        }
#if defined(__AVX512BF16__)
        if(live && vt16 != nullptr && nr == 1 && dv % 32 == 0)
            pv_row_bf16(nk, vt16, vrs, rs, reinterpret_cast<uint16_t*>(kbuf), ro, dv, ra[0]);
        else
#endif
            if(live && vt16 != nullptr) // (else every row keeps its output: P = 0, alpha = 1; V's tile is not read)
            pv_rows(nr, nk, vt16, vrs, rs, ro, dvp, dvp / W, ra);
        else if(live)
            pv_rows(nr, nk, vt, vrs, rs, ro, dvp, dvp / W, ra);
    }

    if(run.chunks == 1)
    {
        for(int64_t r = 0; r < nr; ++r)
            write_row(p, b, rh[r], ri[r], dv, ro + r * dvp, 1, rm[r], rl[r]);
        return;
    }
    // Partial result: o [rb][dvp], then m [rb] and l [rb].
    for(int64_t r = 0; r < nr; ++r)
    {
        std::memcpy(part + r * dvp, ro + r * dvp, static_cast<size_t>(dv) * sizeof(float));
        part[run.rb * dvp + r] = rm[r];
        part[run.rb * dvp + run.rb + r] = rl[r];
    }
}

// Merges the chunks of row block `block` (items block * chunks + c, whose
// partial results sit in the slices of those indices) and writes its rows.
// Serial, after every item ran: chunk 0's slot then holds the sum.
void rows_merge(const SdpaRun& run, int64_t block, char* slices, size_t per_thread)
{
    [[maybe_unused]] const FlushToZero ftz;
    const SdpaProblem& p = *run.p;
    const int64_t rbi = block % run.nrb;
    const int64_t bhk = block / run.nrb;
    const int64_t hk = bhk % run.hk;
    const int64_t b = bhk / run.hk;
    const int64_t dv = run.dv, dvp = run.dvp, rb = run.rb;
    const int64_t r0 = rbi * rb;
    const int64_t nr = imin(rb, run.nrows - r0);
    auto part = [&](int64_t c) {
        return reinterpret_cast<float*>(slices + static_cast<size_t>(block * run.chunks + c) * per_thread) + run.off_part;
    };
    float* sum = part(0);
    for(int64_t r = 0; r < nr; ++r)
    {
        float m = -kInf;
        for(int64_t c = 0; c < run.chunks; ++c)
        {
            const float mc = part(c)[rb * dvp + r];
            m = m > mc ? m : mc; // a NaN propagates
        }
        const float muse = m == -kInf ? 0.0f : m;
        float l = 0.0f;
        for(int64_t c = 0; c < run.chunks; ++c)
        {
            const float* pc = part(c);
            const float wgt = exp2_scalar(pc[rb * dvp + r] - muse);
            l += pc[rb * dvp + rb + r] * wgt;
            for(int64_t e = 0; e < dv; ++e)
                sum[r * dvp + e] = (c == 0 ? 0.0f : sum[r * dvp + e]) + pc[r * dvp + e] * wgt;
        }
        const int64_t gr = r0 + r;
        write_row(p, b, hk * run.group + gr / run.sq, gr % run.sq, dv, sum + r * dvp, 1, m, l);
    }
}

} // namespace HIPDNN_SDPA_NS
} // namespace hipdnn_cpu
