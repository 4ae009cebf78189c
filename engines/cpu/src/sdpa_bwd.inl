// SDPA backward kernels (see sdpa_bwd.cpp for the algorithm), compiled once per ISA: the includer
// defines HIPDNN_BWD_NS and HIPDNN_BWD_W (fp32 lanes per vector: 8 or 16) and is built with that
// ISA's flags (sdpa_bwd.hpp says why). Everything here has internal linkage or lives in that
// namespace, so the builds never share a symbol.

#include "avx512_exp2.hpp"
#include "sdpa_bwd.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif
#if defined(HIPDNN_BWD_AMX)
#include "amx_tiles.hpp"
#endif

// Vectors are passed between this build's own helpers only; the baseline build's note about
// their ABI does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace hipdnn_cpu
{
namespace HIPDNN_BWD_NS
{
namespace
{

using sdpa_bwd::ABK;
using sdpa_bwd::BK;
using sdpa_bwd::BQ;
using sdpa_bwd::Run;

template <int W>
struct Vec;
template <>
struct Vec<8>
{
    typedef float F __attribute__((vector_size(32)));
    typedef uint32_t U __attribute__((vector_size(32)));
};
template <>
struct Vec<16>
{
    typedef float F __attribute__((vector_size(64)));
    typedef uint32_t U __attribute__((vector_size(64)));
};

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kInf = std::numeric_limits<float>::infinity();

template <int W>
inline typename Vec<W>::F vload(const float* p)
{
    typename Vec<W>::F v;
    std::memcpy(&v, p, sizeof(v));
    return v;
}
template <int W>
inline void vstore(float* p, typename Vec<W>::F v)
{
    std::memcpy(p, &v, sizeof(v));
}
// (a vector-scalar op: a braced initializer becomes a chain of lane inserts
// under the target attributes; hot loops multiply by the scalar instead, which
// becomes one broadcast from memory)
template <int W>
inline typename Vec<W>::F vset(float x)
{
    return typename Vec<W>::F{} + x;
}

// 2^x for x <= ~127: x = n + f, |f| <= 1/2, 2^f by its degree-7 Taylor
// polynomial in f ln 2, 2^n added to the exponent; x < -126 (and -inf) gives 0.
template <int W>
inline typename Vec<W>::F exp2v(typename Vec<W>::F x)
{
    typedef typename Vec<W>::F V;
    typedef typename Vec<W>::U VU;
    const V lo = vset<W>(-126.0f), hi = vset<W>(127.0f);
    V xc = x < lo ? lo : x;
    xc = xc > hi ? hi : xc;
    const V magic = vset<W>(12582912.0f);
    const V t = xc + magic;
    const V n = t - magic;
    const V f = xc - n;
    V p = vset<W>(1.5252734e-05f);
    p = p * f + 1.5403530e-04f;
    p = p * f + 1.3333558e-03f;
    p = p * f + 9.6181291e-03f;
    p = p * f + 5.5504109e-02f;
    p = p * f + 2.4022651e-01f;
    p = p * f + 6.9314718e-01f;
    p = p * f + 1.0f;
    // Unsigned lanes: a NaN input makes these words arbitrary, and they must wrap, not overflow.
    const VU bits = (VU)p + (((VU)t - (VU)magic) << 23);
    return x < lo ? V{} : (V)bits;
}

#if HIPDNN_BWD_W == 16
// The AVX-512 build's 2^x: exp2_avx512 (avx512_exp2.hpp), 8 vector ops where the bit arithmetic above
// takes 20 (the softmax recompute was ~1/4 of the backward's time at D = 64). Its items run under
// FlushToZero, so results below 2^-126 come out 0, as above, without a clamp and a compare: no
// denormal reaches the products.
template <>
inline Vec<16>::F exp2v<16>(Vec<16>::F x)
{
    return (Vec<16>::F)exp2_avx512((__m512)x);
}
#endif

// tanh(x), as the forward's (sdpa_fwd.inl): the odd Taylor polynomial to x^13 for |x| < 0.4, else
// (1 - e) / (1 + e) with e = 2^(-2|x| log2 e); +-1 at +-inf, NaN stays NaN.
template <int W>
inline typename Vec<W>::F tanhv(typename Vec<W>::F x)
{
    typedef typename Vec<W>::F V;
    const V zero = V{};
    const V neg = zero - x;
    const V ax = x < zero ? neg : x;
    const V x2 = x * x;
    V p = vset<W>(21844.0f / 6081075.0f);
    p = p * x2 + (-1382.0f / 155925.0f);
    p = p * x2 + (62.0f / 2835.0f);
    p = p * x2 + (-17.0f / 315.0f);
    p = p * x2 + (2.0f / 15.0f);
    p = p * x2 + (-1.0f / 3.0f);
    const V small = x + x * x2 * p;
    const V e = exp2v<W>(ax * (-2.0f * kLog2e));
    const V one = vset<W>(1.0f);
    const V t = (one - e) / (one + e);
    const V big = x < zero ? zero - t : t;
    return ax < vset<W>(0.4f) ? small : big;
}

// u log2(e) for scores u that carry a bias, a finite u first clamped to +-kBiasLimit (2^127) as the
// forward's bias_log2 clamps the bias: a finfo.min mask must not become -inf. +-inf and NaN pass.
template <int W>
inline typename Vec<W>::F log2_units(typename Vec<W>::F u)
{
    typedef typename Vec<W>::F V;
    const V lim = vset<W>(kBiasLimit), big = vset<W>(kInfBias);
    const V c = u < -lim ? -lim : (u > lim ? lim : u);
    return ((u >= -big) & (u <= big) ? c : u) * kLog2e;
}

#if HIPDNN_BWD_W == 16
// The AVX-512 build's, on the bits with mask registers: the template above, inlined into item_avx512
// from a function without the target, had its compares lowered to one branch per lane (a full bias
// cost the backward 1.6x the plain call; 1.2x this way). A finite |u| above 2^127 takes 2^127 with
// u's sign.
template <>
inline Vec<16>::F log2_units<16>(Vec<16>::F u)
{
    const __m512i x = _mm512_castps_si512((__m512)u);
    const __m512i a = _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff));
    const __mmask16 beyond = _mm512_cmpgt_epi32_mask(a, _mm512_set1_epi32(0x7f000000))
                             & _mm512_cmplt_epi32_mask(a, _mm512_set1_epi32(0x7f800000)); // and finite
    const __m512i limited = _mm512_or_si512(_mm512_and_si512(x, _mm512_set1_epi32(static_cast<int>(0x80000000u))),
                                            _mm512_set1_epi32(0x7f000000));
    const __m512 c = _mm512_castsi512_ps(_mm512_mask_blend_epi32(beyond, x, limited));
    return (Vec<16>::F)_mm512_mul_ps(c, _mm512_set1_ps(kLog2e));
}
#endif

// x where lo <= col < hi, else -inf; and max(x, m), m where x is NaN (exact_rows' two selects)
template <int W>
inline typename Vec<W>::F in_columns(typename Vec<W>::F x, typename Vec<W>::F col, typename Vec<W>::F lo,
                                     typename Vec<W>::F hi)
{
    return (col >= lo) & (col < hi) ? x : vset<W>(-kInf);
}
template <int W>
inline typename Vec<W>::F max_or_keep(typename Vec<W>::F x, typename Vec<W>::F m)
{
    return x > m ? x : m;
}

#if HIPDNN_BWD_W == 16
// The AVX-512 build's, in mask registers (as log2_units<16>: the templates' compares became one
// branch per lane).
template <>
inline Vec<16>::F in_columns<16>(Vec<16>::F x, Vec<16>::F col, Vec<16>::F lo,
                                                                     Vec<16>::F hi)
{
    const __mmask16 k = _mm512_cmp_ps_mask((__m512)col, (__m512)lo, _CMP_GE_OQ)
                        & _mm512_cmp_ps_mask((__m512)col, (__m512)hi, _CMP_LT_OQ);
    return (Vec<16>::F)_mm512_mask_blend_ps(k, _mm512_set1_ps(-kInf), (__m512)x);
}
template <>
inline Vec<16>::F max_or_keep<16>(Vec<16>::F x, Vec<16>::F m)
{
    // (m where either is NaN; the all-lanes mask form: the plain one trips GCC 12, see avx512_exp2.hpp)
    return (Vec<16>::F)_mm512_mask_max_ps((__m512)m, 0xffff, (__m512)x, (__m512)m);
}
#endif

#if HIPDNN_BWD_W == 16
// dst[e * ldd + i] = src[i * lds + e] for a 16 x 16 fp32 block, in registers:
// four rounds of two-source lane permutes, round s swapping the (row, column)
// bit s of every element (64 permutes, 16 loads and 16 stores for 256 floats,
// where element-wise copies cost ~2 cycles a float).
// Round S of transpose16 on rows i and i + S (i without bit S).
template <int S>
inline void transpose16_round(__m512 (&r)[16])
{
    // lane c of row i takes row i + S's lane c - S where c has bit S; row i + S takes row i's c + S elsewhere
    alignas(64) static constexpr int32_t mi[16] = {
        0 & S ? 16 + 0 - S : 0,    1 & S ? 16 + 1 - S : 1,    2 & S ? 16 + 2 - S : 2,    3 & S ? 16 + 3 - S : 3,
        4 & S ? 16 + 4 - S : 4,    5 & S ? 16 + 5 - S : 5,    6 & S ? 16 + 6 - S : 6,    7 & S ? 16 + 7 - S : 7,
        8 & S ? 16 + 8 - S : 8,    9 & S ? 16 + 9 - S : 9,    10 & S ? 16 + 10 - S : 10, 11 & S ? 16 + 11 - S : 11,
        12 & S ? 16 + 12 - S : 12, 13 & S ? 16 + 13 - S : 13, 14 & S ? 16 + 14 - S : 14, 15 & S ? 16 + 15 - S : 15};
    alignas(64) static constexpr int32_t mj[16] = {
        0 & S ? 16 + 0 : 0 + S,    1 & S ? 16 + 1 : 1 + S,    2 & S ? 16 + 2 : 2 + S,    3 & S ? 16 + 3 : 3 + S,
        4 & S ? 16 + 4 : 4 + S,    5 & S ? 16 + 5 : 5 + S,    6 & S ? 16 + 6 : 6 + S,    7 & S ? 16 + 7 : 7 + S,
        8 & S ? 16 + 8 : 8 + S,    9 & S ? 16 + 9 : 9 + S,    10 & S ? 16 + 10 : 10 + S, 11 & S ? 16 + 11 : 11 + S,
        12 & S ? 16 + 12 : 12 + S, 13 & S ? 16 + 13 : 13 + S, 14 & S ? 16 + 14 : 14 + S, 15 & S ? 16 + 15 : 15 + S};
    const __m512i vi = _mm512_load_si512(mi), vj = _mm512_load_si512(mj);
#pragma GCC unroll 16
    for(int i = 0; i < 16; ++i)
        if(!(i & S))
        {
            const __m512 a = r[i], b = r[i + S];
            r[i] = _mm512_permutex2var_ps(a, vi, b);
            r[i + S] = _mm512_permutex2var_ps(a, vj, b);
        }
}

// dst[e * ldd + i] = src[i * lds + e] for a 16 x 16 fp32 block, in registers:
// four rounds of two-source lane permutes, round S swapping bit S of every
// element's row and column (64 permutes, 16 loads and 16 stores for 256 floats,
// where element-wise copies cost ~2 cycles a float).
inline void transpose16(const float* src, int64_t lds, float* dst, int64_t ldd)
{
    __m512 r[16];
#pragma GCC unroll 16
    for(int t = 0; t < 16; ++t)
        r[t] = _mm512_loadu_ps(src + t * lds);
    transpose16_round<1>(r);
    transpose16_round<2>(r);
    transpose16_round<4>(r);
    transpose16_round<8>(r);
#pragma GCC unroll 16
    for(int t = 0; t < 16; ++t)
        _mm512_storeu_ps(dst + t * ldd, r[t]);
}
#endif

// dst[e * ldd + i] = src[i * lds + e] for i < n, e < width (fp32): 16 x 16 register
// blocks in the AVX-512 build, element by element elsewhere and at the edges.
// Blocks go along dst rows, so that each 16 dst rows are written whole before
// the next (dst is dK / dV in memory when storing them).
template <int W>
inline void transpose_f32(const float* src, int64_t lds, int64_t n, int64_t width, float* dst, int64_t ldd)
{
    int64_t e0 = 0; // dst rows before e0 are done
#if HIPDNN_BWD_W == 16
    static_assert(W == 16, "the AVX-512 build");
        for(; e0 + 16 <= width; e0 += 16)
        {
            int64_t i = 0;
            for(; i + 16 <= n; i += 16)
                transpose16(src + i * lds + e0, lds, dst + e0 * ldd + i, ldd);
            for(int64_t e = e0; e < e0 + 16; ++e)
                for(int64_t t = i; t < n; ++t)
                    dst[e * ldd + t] = src[t * lds + e];
        }
#endif
    for(int64_t e = e0; e < width; ++e)
        for(int64_t t = 0; t < n; ++t)
            dst[e * ldd + t] = src[t * lds + e];
}

// ---------------------------------------------------------- conversions ----
inline float from_half(uint16_t h)
{
#if defined(__F16C__)
    return _cvtsh_ss(h); // (exact, subnormals included, whatever the flush-to-zero mode)
#endif
    const uint32_t sign = static_cast<uint32_t>(h >> 15) << 31;
    const int e = (h >> 10) & 0x1f;
    const uint32_t m = h & 0x3ffu;
    float mag;
    if(e == 0)
        mag = std::ldexp(static_cast<float>(m), -24);
    else if(e == 31)
        mag = m ? std::numeric_limits<float>::quiet_NaN() : kInf;
    else
    {
        const uint32_t bits = (static_cast<uint32_t>(e + 112) << 23) | (m << 13);
        std::memcpy(&mag, &bits, sizeof(mag));
    }
    return sign ? -mag : mag;
}

// Round to nearest even, via the float's own rounding at the half's precision.
inline uint16_t to_half(float f)
{
    uint32_t x;
    std::memcpy(&x, &f, sizeof(x));
    const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
    const float a = std::fabs(f);
    if(a != a)
        return static_cast<uint16_t>(sign | 0x7e00u);
#if defined(__F16C__)
    // F16C rounds as below (nearest even, subnormals kept whatever the flush-to-zero mode)
    return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
    if(a >= 65520.0f)
        return static_cast<uint16_t>(sign | 0x7c00u);
    if(a < 6.103515625e-05f) // subnormal half: multiples of 2^-24
        return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f)));
    uint32_t ax = x & 0x7fffffffu;
    const uint32_t rem = ax & 0x1fffu;
    ax >>= 13;
    if(rem > 0x1000u || (rem == 0x1000u && (ax & 1u)))
        ++ax;
    return static_cast<uint16_t>(sign | (ax - (112u << 10)));
}

inline float from_bf16(uint16_t h)
{
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
}

inline uint16_t to_bf16(float f)
{
    uint32_t x;
    std::memcpy(&x, &f, sizeof(x));
    if((x & 0x7fffffffu) > 0x7f800000u)
        return static_cast<uint16_t>((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return static_cast<uint16_t>(x >> 16);
}

#if HIPDNN_BWD_W == 16
// 16 floats rounded to bf16 exactly as to_bf16 rounds them (nearest even, NaN quieted), as a 256-bit
// vector. (The all-lanes mask forms: the plain ones trip GCC 12, see avx512_exp2.hpp.)
inline __m256i to_bf16x16(__m512 v)
{
    const __mmask16 all = 0xFFFF;
    const __m512i x = _mm512_castps_si512(v);
    const __m512i hi = _mm512_maskz_srli_epi32(all, x, 16);
    const __m512i odd = _mm512_and_si512(hi, _mm512_set1_epi32(1));
    const __m512i rounded =
        _mm512_maskz_srli_epi32(all, _mm512_add_epi32(x, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    const __m512i quiet = _mm512_or_si512(hi, _mm512_set1_epi32(0x40));
    return _mm512_maskz_cvtepi32_epi16(all, _mm512_mask_blend_epi32(nan, rounded, quiet));
}
#endif

inline float ld(const void* base, int64_t i, DType t)
{
    switch(t)
    {
    case DType::F16:
        return from_half(static_cast<const uint16_t*>(base)[i]);
    case DType::BF16:
        return from_bf16(static_cast<const uint16_t*>(base)[i]);
    case DType::I32:
        return static_cast<float>(static_cast<const int32_t*>(base)[i]);
    case DType::I64:
        return static_cast<float>(static_cast<const int64_t*>(base)[i]);
    default:
        return static_cast<const float*>(base)[i];
    }
}

inline int64_t ld_int(const void* base, int64_t i, DType t)
{
    if(t == DType::I64)
        return static_cast<const int64_t*>(base)[i];
    if(t == DType::I32)
        return static_cast<const int32_t*>(base)[i];
    return static_cast<int64_t>(ld(base, i, t));
}

inline void st(void* base, int64_t i, DType t, float x)
{
    switch(t)
    {
    case DType::F16:
        static_cast<uint16_t*>(base)[i] = to_half(x);
        break;
    case DType::BF16:
        static_cast<uint16_t*>(base)[i] = to_bf16(x);
        break;
    default:
        static_cast<float*>(base)[i] = x;
        break;
    }
}

// n elements of a row of fp16 or bf16 (unit stride; any other type element by element) widened to
// fp32 into d: 16 or 8 at a time where the build has the instructions (F16C's conversion is exact and
// ignores the flush-to-zero the AVX-512 items run under), else one by one.
inline void widen_row(const void* src, DType t, int64_t n, float* d)
{
    int64_t e = 0;
#if defined(__AVX512F__)
    const uint16_t* h = static_cast<const uint16_t*>(src);
    const __mmask16 all = 0xFFFF; // (the all-lanes mask forms: the plain ones trip GCC 12, see avx512_exp2.hpp)
    if(t == DType::F16)
        for(; e + 16 <= n; e += 16)
            _mm512_storeu_ps(d + e,
                             _mm512_maskz_cvtph_ps(all, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + e))));
    else if(t == DType::BF16)
        for(; e + 16 <= n; e += 16)
            _mm512_storeu_ps(d + e, _mm512_castsi512_ps(_mm512_maskz_slli_epi32(
                                        all,
                                        _mm512_maskz_cvtepu16_epi32(
                                            all, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + e))),
                                        16)));
#elif defined(__AVX2__) && defined(__F16C__)
    const uint16_t* h = static_cast<const uint16_t*>(src);
    if(t == DType::F16)
        for(; e + 8 <= n; e += 8)
            _mm256_storeu_ps(d + e, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + e))));
    else if(t == DType::BF16)
        for(; e + 8 <= n; e += 8)
            _mm256_storeu_ps(d + e, _mm256_castsi256_ps(_mm256_slli_epi32(
                                        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + e))),
                                        16)));
#endif
    for(; e < n; ++e)
        d[e] = ld(src, e, t);
}

#if HIPDNN_BWD_W == 16
// 16 floats rounded to fp16 exactly as to_half rounds them (nearest even, subnormals kept, NaN as
// the sign and 0x7e00), as a 256-bit vector.
inline __m256i to_half16(__m512 v)
{
    const __m256i h = _mm512_maskz_cvtps_ph(0xFFFF, v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); // (GCC 12)
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    if(nan == 0)
        return h;
    const __m256i quiet = _mm256_or_si256(_mm256_and_si256(h, _mm256_set1_epi16(static_cast<short>(0x8000))),
                                          _mm256_set1_epi16(0x7e00));
    return _mm256_mask_blend_epi16(nan, h, quiet);
}
#endif

// ------------------------------------------------------------------ GEMM ----
// c[R rows][NV*W] (+)= sum_k a[r*ars + k*aks] * b[k*ldb + 0..NV*W): R rows of
// a strided source broadcast one element at a time against NV vectors of b.
// With pf, it prefetches what the next R-row tile of the same product (rows()
// runs them in order) starts on: its C rows when they are accumulated (dQ in
// place, dK, dV: the tile's first FMAs wait on those loads) and, when a runs
// along k, its a rows (the Q and dO rows of S and dP). At D = 128 those come
// from L2, or from L3 at S = 2048, where a head's Q, dO and dQ (3 MB) outgrow a
// core's L2; there it gained 2-4 % of a call, at D = 64 it lost 0-2 %. Past the
// last tile these addresses may lie outside the buffers: a prefetch reads
// nothing and cannot fault. (Forming them as integers instead, to keep the
// arithmetic defined there, lost 2-4 %: GCC compiled slower address code.)
template <int W, int R, int NV>
inline void mk(int64_t kn, const float* a, int64_t ars, int64_t aks, const float* b, int64_t ldb, float* c,
               int64_t ldc, bool acc_in, bool pf)
{
    typedef typename Vec<W>::F V;
    V acc[R][NV];
    for(int r = 0; r < R; ++r)
        for(int v = 0; v < NV; ++v)
            acc[r][v] = acc_in ? vload<W>(c + r * ldc + v * W) : V{};
    const float* ar[R];
    for(int r = 0; r < R; ++r)
        ar[r] = a + r * ars;
    int64_t off = 0;
#pragma GCC unroll 2
    for(int64_t k = 0; k < kn; ++k, off += aks)
    {
        if(pf && acc_in && k < R * NV) // one line a step, R * NV lines in all
            __builtin_prefetch(c + (R + k / NV) * ldc + (k % NV) * W, 1, 3);
        if(pf && aks == 1 && (k & 15) == 0) // a 64-byte line of each row every 16 steps
            for(int r = 0; r < R; ++r)
                __builtin_prefetch(ar[r] + R * ars + k, 0, 3);
        const float* bk = b + k * ldb;
        V bv[NV];
        for(int v = 0; v < NV; ++v)
            bv[v] = vload<W>(bk + v * W);
        for(int r = 0; r < R; ++r)
        {
            // a scalar operand: GCC broadcasts it straight from memory (vbroadcastss m32, a load-port
            // uop), where splatting it first cost an add and a shuffle-port uop per row
            const float av = ar[r][off];
            for(int v = 0; v < NV; ++v)
                acc[r][v] += av * bv[v];
        }
    }
    for(int r = 0; r < R; ++r)
        for(int v = 0; v < NV; ++v)
            vstore<W>(c + r * ldc + v * W, acc[r][v]);
}

// The main tile keeps 12 (8 lanes) or 24 (16 lanes) accumulators: MR rows
// against NV vectors; row tails by smaller instantiations.
template <int W, int NV>
inline void rows(int64_t m, int64_t kn, const float* a, int64_t ars, int64_t aks, const float* b, int64_t ldb,
                 float* c, int64_t ldc, bool acc_in, bool pf)
{
    constexpr int MR = W == 16 ? (NV == 4 ? 6 : NV == 2 ? 12 : 8) : (NV == 2 ? 6 : 8);
    int64_t i = 0;
    for(; i + MR <= m; i += MR)
        mk<W, MR, NV>(kn, a + i * ars, ars, aks, b, ldb, c + i * ldc, ldc, acc_in, pf);
    for(; i + 4 <= m; i += 4)
        mk<W, 4, NV>(kn, a + i * ars, ars, aks, b, ldb, c + i * ldc, ldc, acc_in, pf);
    switch(m - i)
    {
    case 3:
        mk<W, 3, NV>(kn, a + i * ars, ars, aks, b, ldb, c + i * ldc, ldc, acc_in, pf);
        break;
    case 2:
        mk<W, 2, NV>(kn, a + i * ars, ars, aks, b, ldb, c + i * ldc, ldc, acc_in, pf);
        break;
    case 1:
        mk<W, 1, NV>(kn, a + i * ars, ars, aks, b, ldb, c + i * ldc, ldc, acc_in, pf);
        break;
    default:
        break;
    }
}

// C[m][n] (+)= A[m][kn] B[kn][n]; A element (i, k) at a[i*ars + k*aks], B row k
// at b + k*ldb (vector loads: n a multiple of W).
template <int W>
inline void gemm(int64_t m, int64_t n, int64_t kn, const float* a, int64_t ars, int64_t aks, const float* b,
                 int64_t ldb, float* c, int64_t ldc, bool acc_in, bool pf)
{
    constexpr int NV = W == 16 ? 4 : 2;
    int64_t j = 0;
    for(; j + NV * W <= n; j += NV * W)
        rows<W, NV>(m, kn, a, ars, aks, b + j, ldb, c + j, ldc, acc_in, pf);
    if(NV == 4 && j + 2 * W <= n)
    {
        rows<W, 2>(m, kn, a, ars, aks, b + j, ldb, c + j, ldc, acc_in, pf);
        j += 2 * W;
    }
    if(j < n)
        rows<W, 1>(m, kn, a, ars, aks, b + j, ldb, c + j, ldc, acc_in, pf);
}

// Visible keys of query i: i + lo <= j <= i + hi, j < skv_b; live queries i < sq_b.
struct Band
{
    int64_t sq_b, skv_b, lo, hi;
};

Band band_of(const SdpaProblem& p, int64_t b, int64_t sq, int64_t skv)
{
    Band r{sq, skv, 0, 0};
    if(p.seq_q != nullptr)
        r.sq_b = std::max<int64_t>(0, std::min(sq, ld_int(p.seq_q, b * p.seq_q_bs, p.seq_q_t)));
    if(p.seq_kv != nullptr)
        r.skv_b = std::max<int64_t>(0, std::min(skv, ld_int(p.seq_kv, b * p.seq_kv_bs, p.seq_kv_t)));
    const int64_t shift = r.skv_b - r.sq_b;
    constexpr int64_t kFar = int64_t(1) << 50;
    r.hi = kFar;
    r.lo = -kFar;
    if(p.has_hi_tl)
        r.hi = std::min(r.hi, p.hi_tl);
    if(p.has_hi_br)
        r.hi = std::min(r.hi, p.hi_br + shift);
    if(p.has_lo)
        r.lo = p.lo + (p.lo_br ? shift : 0);
    return r;
}

inline float alibi_slope(int64_t h, int64_t nh)
{
    int64_t n = 1;
    while(n * 2 <= nh)
        n *= 2;
    if(h < n)
        return std::pow(2.0f, -8.0f * static_cast<float>(h + 1) / static_cast<float>(n));
    return std::pow(2.0f, -4.0f * static_cast<float>(2 * (h - n) + 1) / static_cast<float>(n));
}
// Rows [r0, r0 + n) of head slice `off` of a [.., rows, width] tensor as
// (pointer, row stride): in place, or packed into dst [n][wp] (zero-padded).
inline const float* rows_of(const void* base, DType t, const Shape& s, int64_t off, int64_t r0, int64_t n,
                            int64_t width, int64_t wp, bool direct, float* dst, int64_t& rs)
{
    if(direct)
    {
        rs = s.strides[2];
        return static_cast<const float*>(base) + off + r0 * s.strides[2];
    }
    const bool copy = t == DType::F32 && s.strides[3] == 1;
    const bool widen = (t == DType::F16 || t == DType::BF16) && s.strides[3] == 1;
    for(int64_t i = 0; i < n; ++i)
    {
        const int64_t row = off + (r0 + i) * s.strides[2];
        float* d = dst + i * wp;
        if(copy)
            std::memcpy(d, static_cast<const float*>(base) + row, sizeof(float) * static_cast<size_t>(width));
        else if(widen)
            widen_row(static_cast<const uint16_t*>(base) + row, t, width, d);
        else
            for(int64_t e = 0; e < width; ++e)
                d[e] = ld(base, row + e * s.strides[3], t);
        for(int64_t e = width; e < wp; ++e)
            d[e] = 0.0f;
    }
    rs = wp;
    return dst;
}

// Rows [r0, r0 + n) of head slice `off`, transposed into dst [width][T]
// (columns past n zero).
template <int W>
inline void transposed(const void* base, DType t, const Shape& s, int64_t off, int64_t r0, int64_t n, int64_t width,
                       float* dst, int64_t T)
{
    if(n < T)
        for(int64_t e = 0; e < width; ++e)
            std::memset(dst + e * T + n, 0, sizeof(float) * static_cast<size_t>(T - n));
    if(t == DType::F32 && s.strides[3] == 1)
    {
        transpose_f32<W>(static_cast<const float*>(base) + off + r0 * s.strides[2], s.strides[2], n, width, dst, T);
        return;
    }
    if(t == DType::F32)
    {
        // destination rows written contiguously; the n source rows stay in L1 across the e loop
        const float* src = static_cast<const float*>(base) + off + r0 * s.strides[2];
        for(int64_t e = 0; e < width; ++e)
        {
            const float* col = src + e * s.strides[3];
            float* d = dst + e * T;
            for(int64_t i = 0; i < n; ++i)
                d[i] = col[i * s.strides[2]];
        }
        return;
    }
    for(int64_t i = 0; i < n; ++i)
    {
        const int64_t row = off + (r0 + i) * s.strides[2];
        for(int64_t e = 0; e < width; ++e)
            dst[e * T + i] = ld(base, row + e * s.strides[3], t);
    }
}

// As transposed, but fp16 / bf16 rows with unit last stride are widened whole first (into tmp
// [n][wp], vectorized) and then transposed in registers: element by element they had cost the fp16
// backward most of its time.
template <int W>
inline void transposed_rows(const void* base, DType t, const Shape& s, int64_t off, int64_t r0, int64_t n,
                            int64_t width, int64_t wp, float* tmp, float* dst, int64_t T)
{
    if((t != DType::F16 && t != DType::BF16) || s.strides[3] != 1)
    {
        transposed<W>(base, t, s, off, r0, n, width, dst, T);
        return;
    }
    int64_t rs;
    const float* rows = rows_of(base, t, s, off, r0, n, width, wp, false, tmp, rs);
    if(n < T)
        for(int64_t e = 0; e < width; ++e)
            std::memset(dst + e * T + n, 0, sizeof(float) * static_cast<size_t>(T - n));
    transpose_f32<W>(rows, rs, n, width, dst, T);
}

// n rows of `width` to a gradient tensor at element offset off (its strides, its type), from their
// transpose srcT [width][ldt].
template <int W>
inline void store_rows_t(void* base, DType t, const Shape& s, int64_t off, int64_t n, int64_t width,
                         const float* srcT, int64_t ldt)
{
    if(t == DType::F32 && s.strides[3] == 1)
    {
        transpose_f32<W>(srcT, ldt, width, n, static_cast<float*>(base) + off, s.strides[2]);
        return;
    }
    int64_t e0 = 0; // columns before e0 are written
#if HIPDNN_BWD_W == 16
    if((t == DType::BF16 || t == DType::F16) && s.strides[3] == 1)
    {
        // 16 x 16 blocks transposed in registers, each row rounded to bf16 / fp16 as 16 lanes at once
        const bool half = t == DType::F16;
        uint16_t* out = static_cast<uint16_t*>(base) + off;
        const int64_t rs = s.strides[2];
        for(; e0 + 16 <= width; e0 += 16)
        {
            int64_t j = 0;
            for(; j + 16 <= n; j += 16)
            {
                __m512 x[16];
#pragma GCC unroll 16
                for(int u = 0; u < 16; ++u)
                    x[u] = _mm512_loadu_ps(srcT + (e0 + u) * ldt + j);
                transpose16_round<1>(x);
                transpose16_round<2>(x);
                transpose16_round<4>(x);
                transpose16_round<8>(x);
#pragma GCC unroll 16
                for(int u = 0; u < 16; ++u)
                    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (j + u) * rs + e0),
                                        half ? to_half16(x[u]) : to_bf16x16(x[u]));
            }
            for(; j < n; ++j)
                for(int64_t e = e0; e < e0 + 16; ++e)
                    out[j * rs + e] = half ? to_half(srcT[e * ldt + j]) : to_bf16(srcT[e * ldt + j]);
        }
    }
#endif
    if(e0 == width)
        return;
    for(int64_t j = 0; j < n; ++j)
    {
        const int64_t row = off + j * s.strides[2];
        for(int64_t e = e0; e < width; ++e)
            st(base, row + e * s.strides[3], t, srcT[e * ldt + j]);
    }
}

// Above this magnitude (log2 units) a row's fp32 lse holds log2 l to worse than 2^-16 relative of P
// (to nothing at all for -1e9 or finfo.min masks, where m + log2 l rounds to m, and P would come
// out l times too large): row_stats marks such rows (lgl NaN), and exact_rows recomputes their max
// and sum from their scores.
constexpr float kLseExact = 256.0f;

// Pre-pass over the query rows [i0, i1) of head (b, h): lse in log2 units
// (+inf where the row has no visible key, is padding, or its stats are -inf or
// NaN), delta = rowsum(dO o), and the row's dQ accumulators zeroed.
void row_stats(const Run& r, int64_t b, int64_t h, int64_t i0, int64_t i1)
{
    const SdpaBwdProblem& P = *r.p;
    const SdpaProblem& p = P.fwd;
    const Band bd = band_of(p, b, r.sq, r.skv);
    const int64_t ooff = b * p.os.strides[0] + h * p.os.strides[1];
    const int64_t dooff = b * P.dos.strides[0] + h * P.dos.strides[1];
    const int64_t soff = b * p.ss.strides[0] + h * p.ss.strides[1];
    const bool f32 = p.ot == DType::F32 && P.dout_t == DType::F32;
    const bool unit = f32 && p.os.strides[3] == 1 && P.dos.strides[3] == 1;
    auto sixteen = [](DType t) { return t == DType::F16 || t == DType::BF16; };
    const bool half_unit = sixteen(p.ot) && sixteen(P.dout_t) && p.os.strides[3] == 1 && P.dos.strides[3] == 1;
    const int64_t base = (b * r.hq + h) * r.sq;
    for(int64_t i = i0; i < i1; ++i)
    {
        const int64_t orow = ooff + i * p.os.strides[2];
        const int64_t drow = dooff + i * P.dos.strides[2];
        double s = 0.0;
        if(unit)
        {
            // 8 independent fp32 partial sums (vectorizable), combined in double
            const float* o = static_cast<const float*>(p.o) + orow;
            const float* g = static_cast<const float*>(P.dout) + drow;
            float part[8] = {};
            int64_t e = 0;
            for(; e + 8 <= r.dv; e += 8)
                for(int l = 0; l < 8; ++l)
                    part[l] += o[e + l] * g[e + l];
            for(; e < r.dv; ++e)
                part[0] += o[e] * g[e];
            for(int l = 0; l < 8; ++l)
                s += part[l];
        }
        else if(half_unit)
        {
            // as the fp32 rows: 8 independent partial sums of the products, combined in double; the
            // rows widened 64 elements at a time
            const uint16_t* o = static_cast<const uint16_t*>(p.o) + orow;
            const uint16_t* g = static_cast<const uint16_t*>(P.dout) + drow;
            float part[8] = {};
            alignas(64) float wo[64], wg[64];
            for(int64_t e0 = 0; e0 < r.dv; e0 += 64)
            {
                const int64_t m = std::min<int64_t>(64, r.dv - e0);
                widen_row(o + e0, p.ot, m, wo);
                widen_row(g + e0, P.dout_t, m, wg);
                int64_t e = 0;
                for(; e + 8 <= m; e += 8)
                    for(int l = 0; l < 8; ++l)
                        part[l] += wo[e + l] * wg[e + l];
                for(; e < m; ++e)
                    part[0] += wo[e] * wg[e];
            }
            for(int l = 0; l < 8; ++l)
                s += part[l];
        }
        else if(f32)
        {
            const float* o = static_cast<const float*>(p.o) + orow;
            const float* g = static_cast<const float*>(P.dout) + drow;
            for(int64_t e = 0; e < r.dv; ++e)
                s += static_cast<double>(o[e * p.os.strides[3]]) * g[e * P.dos.strides[3]];
        }
        else
            for(int64_t e = 0; e < r.dv; ++e)
                s += static_cast<double>(ld(P.dout, drow + e * P.dos.strides[3], P.dout_t))
                     * ld(p.o, orow + e * p.os.strides[3], p.ot);
        const float sv = p.stats[soff + i * p.ss.strides[2]];
        const bool live = i < bd.sq_b && sv > -kInf && sv == sv;
        const float l2 = live ? sv * kLog2e : kInf;
        r.lse[base + i] = l2;
        r.lgl[base + i] = live && !(std::fabs(l2) <= kLseExact) ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
        r.del[base + i] = static_cast<float>(s);
        if(r.dqa == nullptr)
        {
            float* q = static_cast<float*>(P.dq) + b * P.dqs.strides[0] + h * P.dqs.strides[1] + i * P.dqs.strides[2];
            std::memset(q, 0, sizeof(float) * static_cast<size_t>(r.d));
        }
        else
            for(int64_t c = 0; c < r.chunks; ++c)
                std::memset(r.dqa + c * r.dq_part + (base + i) * r.dq_ld,
                            0,
                            sizeof(float) * static_cast<size_t>(r.dp));
    }
}

// Post-pass: dQ rows [i0, i1) of head (b, h) = sum of the chunks' accumulators.
void dq_rows(const Run& r, int64_t b, int64_t h, int64_t i0, int64_t i1)
{
    const SdpaBwdProblem& P = *r.p;
    const int64_t base = (b * r.hq + h) * r.sq;
    const int64_t qoff = b * P.dqs.strides[0] + h * P.dqs.strides[1];
    for(int64_t i = i0; i < i1; ++i)
    {
        const float* a = r.dqa + (base + i) * r.dq_ld;
        const int64_t qr = qoff + i * P.dqs.strides[2];
        int64_t e0 = 0; // columns before e0 are written
#if HIPDNN_BWD_W == 16
        if((P.dq_t == DType::BF16 || P.dq_t == DType::F16) && P.dqs.strides[3] == 1)
            for(; e0 + 16 <= r.d; e0 += 16)
            {
                __m512 x = _mm512_loadu_ps(a + e0);
                for(int64_t c = 1; c < r.chunks; ++c)
                    x = _mm512_add_ps(x, _mm512_loadu_ps(a + c * r.dq_part + e0));
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<uint16_t*>(P.dq) + qr + e0),
                                    P.dq_t == DType::F16 ? to_half16(x) : to_bf16x16(x));
            }
#endif
        for(int64_t e = e0; e < r.d; ++e)
        {
            float x = a[e];
            for(int64_t c = 1; c < r.chunks; ++c)
                x += a[c * r.dq_part + e];
            st(P.dq, qr + e * P.dqs.strides[3], P.dq_t, x);
        }
    }
}

// Lines to prefetch while a key block's tiles run: the next key block's K and V
// rows (read by its packs) and this block's dK and dV rows (written once at its
// end), fp32 rows with unit last stride only. Each comes from L3 or memory
// otherwise: packs and stores took ~4 % of a call at D = 128 without a mask.
// issue() hands out the lines a few at a time (one softmax row's share), so
// that the misses overlap the products rather than queue behind each other.
struct Prefetches
{
    const char* base[4] = {};
    int64_t stride[4] = {}; // bytes between rows
    int64_t rows[4] = {};
    bool write[4] = {};
    int n = 0;
    int64_t lines = 0; // per row (rows are read whole, one line more for a misaligned start)
    int64_t total = 0, per_call = 0;
    int t = 0;              // cursor: range t, its row u, line l
    int64_t u = 0, l = 0;

    void add(const void* p, int64_t row_stride_bytes, int64_t nrows, bool w)
    {
        base[n] = static_cast<const char*>(p);
        stride[n] = row_stride_bytes;
        rows[n] = nrows;
        write[n] = w;
        total += nrows * lines;
        ++n;
    }
    void issue()
    {
        for(int64_t k = 0; k < per_call && t < n; ++k)
        {
            const char* a = base[t] + u * stride[t] + l * 64;
            if(write[t])
                __builtin_prefetch(a, 1, 2);
            else
                __builtin_prefetch(a, 0, 2);
            if(++l == lines)
            {
                l = 0;
                if(++u == rows[t])
                {
                    u = 0;
                    ++t;
                }
            }
        }
    }
};

// One row of a score tile, its raw dots q.k in sr[0, BK), in log2 units as the main pass and
// exact_rows both take them: prep() softcaps (rfcs/0013-softcap.md: u = scale q.k becomes
// c tanh(u / c) before the bias and ALiBi; dt = 1 - tanh^2, which multiplies dS) and adds the bias
// over the visible columns [c0, c1); log2() gives one vector of scores in log2 units, ALiBi added
// (base = (k0 - qi) x the slope).
template <int W>
struct Scores
{
    typedef typename Vec<W>::F V;
    const SdpaProblem& p;
    bool capped;
    float scale, cap, cap_inv, mul, slope;
    V lane;
    Scores(const SdpaProblem& prob, int64_t h, int64_t hq)
        : p(prob), capped(prob.softcap > 0.0f), scale(prob.scale), cap(prob.softcap),
          cap_inv(capped ? 1.0f / prob.softcap : 0.0f),
          // raw dots still want the scale, capped or biased scores only log2(e)
          mul(capped || prob.bias ? kLog2e : prob.scale * kLog2e),
          slope(prob.alibi ? alibi_slope(h, hq) * kLog2e : 0.0f)
    {
        for(int l = 0; l < W; ++l)
            lane[l] = static_cast<float>(l);
    }
    void prep(float* sr, float* dt, int64_t brow, int64_t k0, int64_t c0, int64_t c1) const
    {
        if(capped)
            for(int64_t j = 0; j < BK; j += W)
            {
                const V t = tanhv<W>(vload<W>(sr + j) * (scale * cap_inv));
                vstore<W>(dt + j, vset<W>(1.0f) - t * t);
                vstore<W>(sr + j, t * cap);
            }
        if(!p.bias)
            return;
        // keys contiguous in fp32 or bf16 (the usual masks): loops the compiler vectorizes; else per element
        const int64_t ks = p.bias_st[3];
        const float sc = capped ? 1.0f : scale;
        if(ks == 1 && p.bias_t == DType::F32)
        {
            const float* bp = static_cast<const float*>(p.bias) + brow + k0;
            for(int64_t j = c0; j < c1; ++j)
                sr[j] = sr[j] * sc + bp[j];
        }
        else if(ks == 1 && p.bias_t == DType::BF16)
        {
            const uint16_t* bp = static_cast<const uint16_t*>(p.bias) + brow + k0;
            for(int64_t j = c0; j < c1; ++j)
            {
                const uint32_t bits = static_cast<uint32_t>(bp[j]) << 16;
                float bv;
                std::memcpy(&bv, &bits, sizeof(bv));
                sr[j] = sr[j] * sc + bv;
            }
        }
        else
            for(int64_t j = c0; j < c1; ++j)
                sr[j] = sr[j] * sc + ld(p.bias, brow + (k0 + j) * ks, p.bias_t);
    }
    V log2(const float* sr, int64_t j, V base) const
    {
        const V u = vload<W>(sr + j);
        V x = p.bias ? log2_units<W>(u) : u * mul;
        if(p.alibi)
            x += base + (lane + static_cast<float>(j)) * slope;
        return x;
    }
};

// The softmax recompute of one tile: rows [0, nq) of s (raw dots q.k) and dpm (dO.v), ld floats
// apart, BK columns each, for queries q0 + i and keys k0 + j. s becomes P = exp2(S' - lse - lgl) and dpm dS = scale P (dP - delta) (times
// 1 - tanh^2 where softcapped), both zero outside each row's visible columns and on dead rows. Issues
// the item's prefetches a row's share at a time, and the next query block's bias strip.
template <int W>
inline void recompute_rows(const SdpaProblem& p, const Scores<W>& sc, const Band& bd, const float* lse,
                           const float* del, const float* lgl, int64_t boff, int64_t q0, int64_t nq, int64_t i1,
                           int64_t k0, int64_t nk, float* s, float* dpm, int64_t ld, float* dt, Prefetches& pre)
{
    typedef typename Vec<W>::F V;
    const float scale = p.scale;
    const bool capped = p.softcap > 0.0f;
    // a bias with contiguous keys: the lines of one row's key-block strip, prefetched a block ahead
    const int64_t bias_esz = p.bias_t == DType::F32 ? 4 : 2; // fp32, fp16 or bf16
    const int64_t bias_lines = p.bias && p.bias_st[3] == 1 ? (BK * bias_esz + 63) / 64 : 0;
    const char* bias_bytes = static_cast<const char*>(p.bias);
    for(int64_t i = 0; i < nq; ++i)
    {
        pre.issue();
        const int64_t qi = q0 + i;
        // The next query block's bias strip for this key block: its rows lie a whole
        // bias row apart, which the hardware prefetchers do not follow.
        if(bias_lines > 0 && qi + BQ <= i1)
        {
            const char* nb = bias_bytes + ((boff + (qi + BQ) * p.bias_st[2] + k0) * bias_esz);
            for(int64_t l = 0; l < bias_lines; ++l)
                __builtin_prefetch(nb + 64 * l, 0, 2);
        }
        float* sr = s + i * ld;
        float* dr = dpm + i * ld;
        // visible columns [c0, c1) of this row
        const int64_t c0 = std::max<int64_t>(0, qi + bd.lo - k0);
        const int64_t c1 = std::min<int64_t>(nk, std::min(qi + bd.hi, bd.skv_b - 1) - k0 + 1);
        if(!(lse[qi] < kInf) || c1 <= c0)
        {
            std::memset(sr, 0, sizeof(float) * BK);
            std::memset(dr, 0, sizeof(float) * BK);
            continue;
        }
        const float l2 = lse[qi], lg = lgl[qi];
        const float dls = del[qi] * scale;
        const V base = vset<W>(static_cast<float>(k0 - qi)) * sc.slope;
        sc.prep(sr, dt, boff + qi * p.bias_st[2], k0, c0, c1);
        for(int64_t j = 0; j < BK; j += W)
        {
            const V pv = exp2v<W>((sc.log2(sr, j, base) - l2) - lg);
            vstore<W>(sr + j, pv);
            V ds = pv * (vload<W>(dr + j) * scale - dls);
            if(capped)
                ds *= vload<W>(dt + j);
            vstore<W>(dr + j, ds);
        }
        for(int64_t j = 0; j < c0; ++j)
            sr[j] = dr[j] = 0.0f;
        for(int64_t j = c1; j < BK; ++j)
            sr[j] = dr[j] = 0.0f;
    }
}

// One work item: the key blocks kb = c, c + C, ... of kv head hk of batch b.
template <int W>
inline void item(const Run& r, int64_t w, float* ws)
{
    const SdpaBwdProblem& P = *r.p;
    const SdpaProblem& p = P.fwd;
    const int64_t c = w % r.chunks;
    const int64_t hk = (w / r.chunks) % r.hk;
    const int64_t b = w / (r.chunks * r.hk);
    const Band bd = band_of(p, b, r.sq, r.skv);
    float* kt = ws + r.off_kt;
    float* vt = ws + r.off_vt;
    float* s = ws + r.off_s;
    float* dpm = ws + r.off_dp;
    float* dk = ws + r.off_dk; // transposed: [dp][BK]
    float* dv = ws + r.off_dv; // [dvp][BK]
    const int64_t koff = b * p.ks.strides[0] + hk * p.ks.strides[1];
    const int64_t voff = b * p.vs.strides[0] + hk * p.vs.strides[1];
    const int64_t dkoff = b * P.dks.strides[0] + hk * P.dks.strides[1];
    const int64_t dvoff = b * P.dvs.strides[0] + hk * P.dvs.strides[1];
    alignas(64) float dt[BK] = {}; // (written by Scores::prep where softcapped)
    const bool pf = std::max(r.dp, r.dvp) >= 128; // prefetching in the products: see mk()
    for(int64_t kb = c; kb < r.nkb; kb += r.chunks)
    {
        const int64_t k0 = kb * BK;
        const int64_t nk = std::min(BK, r.skv - k0);
        bool first = true; // dK, dV not yet written for this key block
        const int64_t klast = std::min(k0 + nk, bd.skv_b) - 1; // last live key
        // queries that see some key of [k0, klast]: j - hi <= i <= j - lo
        const int64_t i0 = std::max<int64_t>(0, k0 - bd.hi);
        const int64_t i1 = std::min<int64_t>(bd.sq_b - 1, klast - bd.lo);
        if(klast >= k0 && i0 <= i1)
        {
            Prefetches pre;
            pre.lines = (std::max(r.d, r.dv) * static_cast<int64_t>(sizeof(float)) + 63) / 64 + 1;
            const int64_t kn0 = k0 + r.chunks * BK; // the next key block of this item
            const int64_t nkn = std::min(BK, r.skv - kn0);
            auto f32rows = [](DType t, const Shape& sh) { return t == DType::F32 && sh.strides[3] == 1; };
            if(nkn > 0 && f32rows(p.kt, p.ks))
                pre.add(static_cast<const float*>(p.k) + koff + kn0 * p.ks.strides[2],
                        p.ks.strides[2] * 4, nkn, false);
            if(nkn > 0 && f32rows(p.vt, p.vs))
                pre.add(static_cast<const float*>(p.v) + voff + kn0 * p.vs.strides[2],
                        p.vs.strides[2] * 4, nkn, false);
            if(f32rows(P.dk_t, P.dks))
                pre.add(static_cast<float*>(P.dk) + dkoff + k0 * P.dks.strides[2], P.dks.strides[2] * 4, nk, true);
            if(f32rows(P.dv_t, P.dvs))
                pre.add(static_cast<float*>(P.dv) + dvoff + k0 * P.dvs.strides[2], P.dvs.strides[2] * 4, nk, true);
            {
                const int64_t rows_visited = r.group * (i1 + 1 - i0);
                pre.per_call = (pre.total + rows_visited - 1) / rows_visited;
            }
            // (the dO rows' buffer is free until the first query block: V's rows are widened there)
            transposed_rows<W>(p.k, p.kt, p.ks, koff, k0, nk, r.d, r.dp, ws + r.off_kr, kt, BK);
            transposed_rows<W>(p.v, p.vt, p.vs, voff, k0, nk, r.dv, r.dvp, ws + r.off_dor, vt, BK);
            int64_t krs;
            const float* km = rows_of(p.k, p.kt, p.ks, koff, k0, nk, r.d, r.dp, r.k_in, ws + r.off_kr, krs);
            for(int64_t g = 0; g < r.group; ++g)
            {
                const int64_t h = hk * r.group + g;
                const Scores<W> sc(p, h, r.hq);
                const int64_t boff = p.bias ? b * p.bias_st[0] + h * p.bias_st[1] : 0;
                const int64_t qoff = b * p.qs.strides[0] + h * p.qs.strides[1];
                const int64_t dooff = b * P.dos.strides[0] + h * P.dos.strides[1];
                const float* lse = r.lse + (b * r.hq + h) * r.sq;
                const float* del = r.del + (b * r.hq + h) * r.sq;
                const float* lgl = r.lgl + (b * r.hq + h) * r.sq;
                float* dqh = r.dqa != nullptr
                                 ? r.dqa + c * r.dq_part + (b * r.hq + h) * r.sq * r.dq_ld
                                 : static_cast<float*>(P.dq) + b * P.dqs.strides[0] + h * P.dqs.strides[1];
                for(int64_t q0 = i0; q0 <= i1; q0 += BQ)
                {
                    const int64_t nq = std::min(BQ, i1 + 1 - q0);
                    if(p.bias && sdpa_bias_masks_block(p, boff, q0, q0 + nq, k0, k0 + nk))
                        continue; // P = dS = 0 throughout: nothing to add to dQ, dK or dV
                    int64_t qrs, dors;
                    const float* qm =
                        rows_of(p.q, p.qt, p.qs, qoff, q0, nq, r.d, r.dp, r.q_in, ws + r.off_qr, qrs);
                    const float* dom =
                        rows_of(P.dout, P.dout_t, P.dos, dooff, q0, nq, r.dv, r.dvp, r.do_in, ws + r.off_dor, dors);
                    gemm<W>(nq, BK, r.d, qm, qrs, 1, kt, BK, s, BK, false, pf);
                    gemm<W>(nq, BK, r.dv, dom, dors, 1, vt, BK, dpm, BK, false, pf);
                    recompute_rows<W>(p, sc, bd, lse, del, lgl, boff, q0, nq, i1, k0, nk, s, dpm, BK, dt, pre);
                    // dV^T += dO^T P ; dK^T += Q^T dS ; dQ += dS K (dS already carries the scale)
                    gemm<W>(r.dv, BK, nq, dom, 1, dors, s, BK, dv, BK, !first, pf);
                    gemm<W>(r.d, BK, nq, qm, 1, qrs, dpm, BK, dk, BK, !first, pf);
                    first = false;
                    gemm<W>(nq, r.dp, nk, dpm, BK, 1, km, krs, dqh + q0 * r.dq_ld, r.dq_ld, true, pf);
                }
            }
        }
        if(first)
        {
            std::memset(dk, 0, sizeof(float) * static_cast<size_t>(r.d * BK));
            std::memset(dv, 0, sizeof(float) * static_cast<size_t>(r.dv * BK));
        }
        store_rows_t<W>(P.dk, P.dk_t, P.dks, dkoff + k0 * P.dks.strides[2], nk, r.d, dk, BK);
        store_rows_t<W>(P.dv, P.dv_t, P.dvs, dvoff + k0 * P.dvs.strides[2], nk, r.dv, dv, BK);
    }
}

// The rows of head (b, h) = bh that row_stats marked (lgl NaN) get their max m and log2 l from their
// scores, made as the main pass makes them (the same products and Scores), up to BQ rows at a time
// against every key block: lse = m and lgl = log2 l, or a dead row (lse +inf) where no score is
// above -inf. A NaN score makes lgl NaN, and with it the row's P, as in the main pass.
template <int W>
inline void exact_rows(const Run& r, int64_t bh, float* ws)
{
    typedef typename Vec<W>::F V;
    const SdpaProblem& p = r.p->fwd;
    const int64_t b = bh / r.hq, h = bh % r.hq;
    float* lse = r.lse + bh * r.sq;
    float* lgl = r.lgl + bh * r.sq;
    const Band bd = band_of(p, b, r.sq, r.skv);
    const Scores<W> sc(p, h, r.hq);
    const int64_t koff = b * p.ks.strides[0] + (h / r.group) * p.ks.strides[1];
    const int64_t qoff = b * p.qs.strides[0] + h * p.qs.strides[1];
    const int64_t boff = p.bias ? b * p.bias_st[0] + h * p.bias_st[1] : 0;
    float* kt = ws + r.off_kt;
    float* s = ws + r.off_s;
    float* qr = ws + r.off_qr;
    alignas(64) float dt[BK] = {}; // (written by Scores::prep where softcapped)
    int64_t rows[BQ];
    float mx[BQ], sum[BQ];
    for(int64_t next = 0;;)
    {
        int64_t n = 0;
        for(; next < r.sq && n < BQ; ++next)
            if(lgl[next] != lgl[next])
                rows[n++] = next;
        if(n == 0)
            return;
        for(int64_t t = 0; t < n; ++t)
        {
            const int64_t row = qoff + rows[t] * p.qs.strides[2];
            float* d = qr + t * r.dp;
            for(int64_t e = 0; e < r.d; ++e)
                d[e] = ld(p.q, row + e * p.qs.strides[3], p.qt);
            for(int64_t e = r.d; e < r.dp; ++e)
                d[e] = 0.0f;
            mx[t] = -kInf;
            sum[t] = 0.0f;
        }
        for(int64_t k0 = 0; k0 < bd.skv_b; k0 += BK)
        {
            const int64_t nk = std::min(BK, r.skv - k0);
            transposed<W>(p.k, p.kt, p.ks, koff, k0, nk, r.d, kt, BK);
            gemm<W>(n, BK, r.d, qr, r.dp, 1, kt, BK, s, BK, false, false);
            for(int64_t t = 0; t < n; ++t)
            {
                const int64_t qi = rows[t];
                const int64_t c0 = std::max<int64_t>(0, qi + bd.lo - k0);
                const int64_t c1 = std::min<int64_t>(nk, std::min(qi + bd.hi, bd.skv_b - 1) - k0 + 1);
                if(c1 <= c0)
                    continue;
                float* sr = s + t * BK;
                sc.prep(sr, dt, boff + qi * p.bias_st[2], k0, c0, c1);
                const V base = vset<W>(static_cast<float>(k0 - qi)) * sc.slope;
                const V lo = vset<W>(static_cast<float>(c0)), hi = vset<W>(static_cast<float>(c1));
                V vm = vset<W>(-kInf);
                for(int64_t j = 0; j < BK; j += W)
                {
                    const V col = sc.lane + static_cast<float>(j);
                    const V x = in_columns<W>(sc.log2(sr, j, base), col, lo, hi);
                    vstore<W>(sr + j, x);
                    vm = max_or_keep<W>(x, vm);
                }
                float m = mx[t];
                for(int l = 0; l < W; ++l)
                    m = vm[l] > m ? vm[l] : m;
                if(!(m > -kInf))
                    continue;
                V acc{};
                for(int64_t j = 0; j < BK; j += W)
                    acc += exp2v<W>(vload<W>(sr + j) - m);
                float blk = 0.0f;
                for(int l = 0; l < W; ++l)
                    blk += acc[l];
                sum[t] = sum[t] * std::exp2(mx[t] - m) + blk;
                mx[t] = m;
            }
        }
        for(int64_t t = 0; t < n; ++t)
        {
            const bool live = mx[t] > -kInf;
            lse[rows[t]] = live ? mx[t] : kInf;
            lgl[rows[t]] = live ? std::log2(sum[t]) : 0.0f;
        }
    }
}

#if defined(HIPDNN_BWD_AMX) || defined(HIPDNN_BWD_BF16DOT)
// ====================================================== bf16 pairs kernel ====
// bf16 q, k, v and dO (unit last strides, even K / V row strides, head dims multiples of 32) on
// AMX-BF16 tiles (the AMX build: amx_gemm) or on VDPBF16PS dot products (the AVX512_BF16 build,
// for CPUs without tiles: dot_gemm, the same operands in the same layouts); either way every product
// takes bf16 operands and sums their exact products in fp32. P and dS
// are rounded to bf16 for the three products that take them, as flash attention's bf16 backward
// does; the softmax recompute stays fp32 (recompute_rows, shared with the other builds). Per key
// block (packed once, shared by the group's heads and query blocks):
//   Kp [d/2][ABK][2]   K in pairs of head dims: B of S = Q K^T
//   Vp [dv/2][ABK][2]  V likewise: B of dP = dO V^T
//   Kk [ABK/2][d][2]   K in pairs of keys: B of dQ = dS K
// (keys past the batch's length packed as zeros), then per query block (up to BQ rows from a
// multiple of 32, so that the pre-pass's transposes serve as A operands in whole 32-query steps):
//   S = Q Kp, dP = dO Vp           A: Q and dO rows in place (a zero-padded copy for a head's last block)
//   recompute_rows                 S -> P, dP -> dS in fp32
//   Pq, dSq [BQ/2][ABK][2]         P and dS in pairs of queries; dSr [BQ][ABK], dS rows (bf16)
//   dV^T += dO^T Pq, dK^T += Q^T dSq   A: r.dot16, r.qt16 (run_amx_transposes)
//   dQ += dSr Kk                   C: dQ's rows (through a 32-row strip where a block passes Sq)
// On the tiles, 0-3 accumulate a 32 x 32 block of C, 4-5 hold A's two 16-row halves, 6-7 B's two
// 16-column halves.

inline int64_t round32(int64_t n)
{
    return (n + 31) & ~int64_t(31);
}

#if defined(HIPDNN_BWD_AMX)
// C [m][n] (+)= A [m][kd] . B: A bf16, row i's k-th 32-element step at a + i * lda + (k / 32) * akstep
// (row-major: akstep 32; the pre-pass's chunked transposes: lda 32, akstep 32 rows); B [kd/2][n][2]
// bf16 in the tiles' pair layout, its pair rows ldb elements apart; C fp32 rows ldc apart. m, n and
// kd multiples of 32.
inline void amx_gemm(int64_t m, int64_t n, int64_t kd, const uint16_t* a, int64_t lda, int64_t akstep,
                     const uint16_t* b, int64_t ldb, float* c, int64_t ldc, bool accumulate)
{
    const int64_t cs = ldc * 4, as = lda * 2, bs = ldb * 2; // strides in bytes
    for(int64_t i = 0; i < m; i += 32)
        for(int64_t j = 0; j < n; j += 32)
        {
            float* c0 = c + i * ldc + j;
            float* c1 = c0 + 16 * ldc;
            if(accumulate)
            {
                _tile_loadd(0, c0, cs);
                _tile_loadd(1, c0 + 16, cs);
                _tile_loadd(2, c1, cs);
                _tile_loadd(3, c1 + 16, cs);
            }
            else
            {
                _tile_zero(0);
                _tile_zero(1);
                _tile_zero(2);
                _tile_zero(3);
            }
            for(int64_t k = 0; k < kd; k += 32)
            {
                const uint16_t* ak = a + (k / 32) * akstep;
                _tile_loadd(4, ak + i * lda, as);
                _tile_loadd(5, ak + (i + 16) * lda, as);
                _tile_loadd(6, b + (k / 2) * ldb + 2 * j, bs);
                _tile_loadd(7, b + (k / 2) * ldb + 2 * (j + 16), bs);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
            _tile_stored(0, c0, cs);
            _tile_stored(1, c0 + 16, cs);
            _tile_stored(2, c1, cs);
            _tile_stored(3, c1 + 16, cs);
        }
}

inline void pair_gemm(int64_t m, int64_t n, int64_t kd, const uint16_t* a, int64_t lda, int64_t akstep,
                      const uint16_t* b, int64_t ldb, float* c, int64_t ldc, bool accumulate)
{
    amx_gemm(m, n, kd, a, lda, akstep, b, ldb, c, ldc, accumulate);
}
#else
// R rows of C from row 0 of a (and c) against NV vectors of 16 columns from b's column 0: each step
// broadcasts a pair of A (one 32-bit word) against NV vectors of B's pairs, one VDPBF16PS each (two
// exact bf16 products added into each fp32 lane).
template <int R, int NV>
inline void dot_mk(int64_t kd, const uint16_t* a, int64_t lda, int64_t akstep, const uint16_t* b, int64_t ldb,
                   float* c, int64_t ldc, bool accumulate)
{
    __m512 acc[R][NV];
    for(int r = 0; r < R; ++r)
        for(int v = 0; v < NV; ++v)
            acc[r][v] = accumulate ? _mm512_loadu_ps(c + r * ldc + 16 * v) : _mm512_setzero_ps();
    for(int64_t k = 0; k < kd; k += 32)
    {
        const uint16_t* ak = a + (k / 32) * akstep;
        const uint16_t* bk = b + (k / 2) * ldb;
#pragma GCC unroll 2
        for(int t = 0; t < 16; ++t)
        {
            __m512bh bv[NV];
            for(int v = 0; v < NV; ++v)
                bv[v] = (__m512bh)_mm512_loadu_si512(bk + t * ldb + 32 * v);
            for(int r = 0; r < R; ++r)
            {
                uint32_t pair;
                std::memcpy(&pair, ak + r * lda + 2 * t, sizeof(pair));
                const __m512bh av = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair));
                for(int v = 0; v < NV; ++v)
                    acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bv[v]);
            }
        }
    }
    for(int r = 0; r < R; ++r)
        for(int v = 0; v < NV; ++v)
            _mm512_storeu_ps(c + r * ldc + 16 * v, acc[r][v]);
}

template <int NV>
inline void dot_rows(int64_t m, int64_t kd, const uint16_t* a, int64_t lda, int64_t akstep, const uint16_t* b,
                     int64_t ldb, float* c, int64_t ldc, bool accumulate)
{
    constexpr int MR = NV == 4 ? 6 : 12; // 24 accumulators
    int64_t i = 0;
    for(; i + MR <= m; i += MR)
        dot_mk<MR, NV>(kd, a + i * lda, lda, akstep, b, ldb, c + i * ldc, ldc, accumulate);
    for(; i + 4 <= m; i += 4)
        dot_mk<4, NV>(kd, a + i * lda, lda, akstep, b, ldb, c + i * ldc, ldc, accumulate);
    for(; i + 2 <= m; i += 2)
        dot_mk<2, NV>(kd, a + i * lda, lda, akstep, b, ldb, c + i * ldc, ldc, accumulate);
    if(i < m)
        dot_mk<1, NV>(kd, a + i * lda, lda, akstep, b, ldb, c + i * ldc, ldc, accumulate);
}

// amx_gemm's product on VDPBF16PS: the same operands, layouts and multiples of 32.
inline void pair_gemm(int64_t m, int64_t n, int64_t kd, const uint16_t* a, int64_t lda, int64_t akstep,
                      const uint16_t* b, int64_t ldb, float* c, int64_t ldc, bool accumulate)
{
    int64_t j = 0;
    for(; j + 64 <= n; j += 64)
        dot_rows<4>(m, kd, a, lda, akstep, b + 2 * j, ldb, c + j, ldc, accumulate);
    if(j < n) // (n a multiple of 32)
        dot_rows<2>(m, kd, a, lda, akstep, b + 2 * j, ldb, c + j, ldc, accumulate);
}
#endif

// Rows [0, n) of a bf16 slice (rs elements apart, rs even, unit last stride) in pairs of head
// dims: dst [d/2][ABK] 32-bit words, a 16 x 16 word transpose at a time; keys from n to ABK zero.
inline void pack_dim_pairs(const uint16_t* src, int64_t rs, int64_t n, int64_t d, uint16_t* dst)
{
    alignas(64) uint32_t tmp[16 * 16];
    float* out = reinterpret_cast<float*>(dst);
    for(int64_t j0 = 0; j0 < ABK; j0 += 16)
    {
        const int64_t kn = std::min<int64_t>(16, std::max<int64_t>(0, n - j0));
        for(int64_t e = 0; e < d / 2; e += 16)
        {
            if(kn == 16)
            {
                transpose16(reinterpret_cast<const float*>(src + j0 * rs) + e, rs / 2, out + e * ABK + j0, ABK);
                continue;
            }
            for(int64_t t = 0; t < 16; ++t)
                if(t < kn)
                    std::memcpy(tmp + t * 16, src + (j0 + t) * rs + 2 * e, 64);
                else
                    std::memset(tmp + t * 16, 0, 64);
            transpose16(reinterpret_cast<const float*>(tmp), 16, out + e * ABK + j0, ABK);
        }
    }
}

// Rows [0, n) of a bf16 slice in pairs of rows: dst [ABK/2][d][2]; rows from n to ABK zero.
inline void pack_row_pairs(const uint16_t* src, int64_t rs, int64_t n, int64_t d, uint16_t* dst)
{
    alignas(64) static constexpr uint16_t lo[32] = {0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38, 7, 39,
                                                    8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
    alignas(64) static constexpr uint16_t hi[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
                                                    24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
    const __m512i vlo = _mm512_load_si512(lo), vhi = _mm512_load_si512(hi);
    for(int64_t t = 0; t < ABK; t += 2)
    {
        uint16_t* o = dst + (t / 2) * 2 * d;
        for(int64_t e = 0; e < d; e += 32)
        {
            const __m512i x = t < n ? _mm512_loadu_si512(src + t * rs + e) : _mm512_setzero_si512();
            const __m512i y = t + 1 < n ? _mm512_loadu_si512(src + (t + 1) * rs + e) : _mm512_setzero_si512();
            _mm512_store_si512(o + 2 * e, _mm512_permutex2var_epi16(x, vlo, y));
            _mm512_store_si512(o + 2 * e + 32, _mm512_permutex2var_epi16(x, vhi, y));
        }
    }
}

// Rows [0, n) (n even) of an fp32 [n][ABK] tile rounded to bf16 in pairs of rows: out [n/2][ABK][2].
inline void bf16_row_pairs(const float* x, int64_t n, uint16_t* out)
{
    alignas(64) static constexpr uint16_t inter[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                                       8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    const __m512i vi = _mm512_load_si512(inter);
    for(int64_t t = 0; t < n; t += 2)
        for(int64_t j = 0; j < ABK; j += 16)
        {
            // (lower half: row t's 16 values, upper half: row t + 1's)
            const __m512i ab = reinterpret_cast<__m512i>(
                _mm512_cvtne2ps_pbh(_mm512_load_ps(x + (t + 1) * ABK + j), _mm512_load_ps(x + t * ABK + j)));
            _mm512_store_si512(out + t * ABK + 2 * j, _mm512_permutexvar_epi16(vi, ab));
        }
}

// Rows [0, n) of an fp32 [n][ABK] tile rounded to bf16 rows: out [n][ABK].
inline void bf16_rows(const float* x, int64_t n, uint16_t* out)
{
    for(int64_t t = 0; t < n; ++t)
        for(int64_t j = 0; j < ABK; j += 32)
            _mm512_store_si512(out + t * ABK + j,
                               reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(_mm512_load_ps(x + t * ABK + j + 16),
                                                                             _mm512_load_ps(x + t * ABK + j))));
}

// Rows [i0, i1) of a bf16 head slice (rows rs apart, unit last stride, `width` wide) transposed into
// dst in chunks of 32 queries, [sqp/32][width][32] (query i of head dim e at ((i/32) width + e) 32 +
// i % 32: one 32-query step of a tile's A operand is 1 KB in one piece), 16 x 16 blocks widened to
// fp32 for the register transpose. Rows at or past `live` (the batch's length) are written as
// zeros, and so are the queries from Sq to sqp where i1 is the head's last row.
inline void transpose_rows_bf16(const uint16_t* src, int64_t rs, int64_t i0, int64_t i1, int64_t live,
                                int64_t width, int64_t sq, int64_t sqp, uint16_t* dst)
{
    const int64_t end = i1 == sq ? sqp : i1;
    const int64_t stop = std::min(i1, live);
    const __mmask16 all = 0xFFFF; // (the all-lanes mask forms: the plain ones trip GCC 12, see avx512_exp2.hpp)
    for(int64_t i = i0; i < end; i += 16)
        for(int64_t e = 0; e < width; e += 16)
        {
            __m512 x[16];
#pragma GCC unroll 16
            for(int t = 0; t < 16; ++t)
                x[t] = i + t < stop ? _mm512_castsi512_ps(_mm512_maskz_slli_epi32(
                                          all, _mm512_maskz_cvtepu16_epi32(all, _mm256_loadu_si256(
                                                   reinterpret_cast<const __m256i*>(src + (i + t) * rs + e))),
                                          16))
                                    : _mm512_setzero_ps();
            transpose16_round<1>(x);
            transpose16_round<2>(x);
            transpose16_round<4>(x);
            transpose16_round<8>(x);
#pragma GCC unroll 16
            for(int t = 0; t < 16; ++t)
                _mm256_storeu_si256(
                    reinterpret_cast<__m256i*>(dst + ((i / 32) * width + e + t) * 32 + i % 32),
                    _mm512_maskz_cvtepi32_epi16(all, _mm512_maskz_srli_epi32(all, _mm512_castps_si512(x[t]), 16)));
        }
}

// Rows [q0, q0 + n) of a bf16 head slice (those below sq), copied into dst [n32][width]; the rest zero.
inline const uint16_t* padded_rows(const uint16_t* src, int64_t rs, int64_t q0, int64_t n32, int64_t sq,
                                   int64_t width, uint16_t* dst)
{
    for(int64_t i = 0; i < n32; ++i)
        if(q0 + i < sq)
            std::memcpy(dst + i * width, src + (q0 + i) * rs, sizeof(uint16_t) * static_cast<size_t>(width));
        else
            std::memset(dst + i * width, 0, sizeof(uint16_t) * static_cast<size_t>(width));
    return dst;
}

// One work item of the bf16 pairs builds (as item: key blocks kb = c, c + C, ... of kv head hk of batch b).
inline void pair_item(const Run& r, int64_t w, float* ws)
{
    const SdpaBwdProblem& P = *r.p;
    const SdpaProblem& p = P.fwd;
    const int64_t c = w % r.chunks;
    const int64_t hk = (w / r.chunks) % r.hk;
    const int64_t b = w / (r.chunks * r.hk);
    const Band bd = band_of(p, b, r.sq, r.skv);
    const int64_t d = r.d, dvw = r.dv;
    uint16_t* kp = reinterpret_cast<uint16_t*>(ws + r.a_kp);
    uint16_t* kk = reinterpret_cast<uint16_t*>(ws + r.a_kk);
    uint16_t* vp = reinterpret_cast<uint16_t*>(ws + r.a_vp);
    uint16_t* qpad = reinterpret_cast<uint16_t*>(ws + r.a_q);
    uint16_t* dopad = reinterpret_cast<uint16_t*>(ws + r.a_do);
    uint16_t* pq = reinterpret_cast<uint16_t*>(ws + r.a_pq);
    uint16_t* dsq = reinterpret_cast<uint16_t*>(ws + r.a_dsq);
    uint16_t* dsr = reinterpret_cast<uint16_t*>(ws + r.a_dsr);
    float* dqs = ws + r.a_dq;
    float* s = ws + r.a_s;
    float* dpm = ws + r.a_dp;
    float* dk = ws + r.a_dk; // transposed: [d][ABK]
    float* dv = ws + r.a_dv; // [dv][ABK]
    const uint16_t* kb_rows = static_cast<const uint16_t*>(p.k) + b * p.ks.strides[0] + hk * p.ks.strides[1];
    const uint16_t* vb_rows = static_cast<const uint16_t*>(p.v) + b * p.vs.strides[0] + hk * p.vs.strides[1];
    const int64_t dkoff = b * P.dks.strides[0] + hk * P.dks.strides[1];
    const int64_t dvoff = b * P.dvs.strides[0] + hk * P.dvs.strides[1];
    alignas(64) float dt[BK] = {}; // (written by Scores::prep where softcapped)
    // (no prefetches: its fp32 rows do not occur here, and the next query block's rows, tried,
    // gained nothing)
    Prefetches none;
    [[maybe_unused]] bool configured = false;
    const int64_t nab = (r.skv + ABK - 1) / ABK; // key blocks of ABK keys
    for(int64_t kb = c; kb < nab; kb += r.chunks)
    {
        const int64_t k0 = kb * ABK;
        const int64_t nk = std::min(ABK, r.skv - k0);
        bool first = true; // dK, dV not yet written for this key block
        const int64_t klast = std::min(k0 + nk, bd.skv_b) - 1;
        const int64_t i0 = std::max<int64_t>(0, k0 - bd.hi);
        const int64_t i1 = std::min<int64_t>(bd.sq_b - 1, klast - bd.lo);
        if(klast >= k0 && i0 <= i1)
        {
#if defined(HIPDNN_BWD_AMX)
            if(!configured)
            {
                amx_configure_16x64();
                configured = true;
            }
#endif
            const int64_t nlive = klast + 1 - k0;
            pack_dim_pairs(kb_rows + k0 * p.ks.strides[2], p.ks.strides[2], nlive, d, kp);
            pack_dim_pairs(vb_rows + k0 * p.vs.strides[2], p.vs.strides[2], nlive, dvw, vp);
            pack_row_pairs(kb_rows + k0 * p.ks.strides[2], p.ks.strides[2], nlive, d, kk);
            for(int64_t g = 0; g < r.group; ++g)
            {
                const int64_t h = hk * r.group + g;
                const Scores<16> sc(p, h, r.hq);
                const int64_t boff = p.bias ? b * p.bias_st[0] + h * p.bias_st[1] : 0;
                const uint16_t* qh = static_cast<const uint16_t*>(p.q) + b * p.qs.strides[0] + h * p.qs.strides[1];
                const uint16_t* doh =
                    static_cast<const uint16_t*>(P.dout) + b * P.dos.strides[0] + h * P.dos.strides[1];
                const uint16_t* qth = r.qt16 + (b * r.hq + h) * d * r.sqp;
                const uint16_t* doth = r.dot16 + (b * r.hq + h) * dvw * r.sqp;
                const float* lse = r.lse + (b * r.hq + h) * r.sq;
                const float* del = r.del + (b * r.hq + h) * r.sq;
                const float* lgl = r.lgl + (b * r.hq + h) * r.sq;
                float* dqh = r.dqa != nullptr
                                 ? r.dqa + c * r.dq_part + (b * r.hq + h) * r.sq * r.dq_ld
                                 : static_cast<float*>(P.dq) + b * P.dqs.strides[0] + h * P.dqs.strides[1];
                for(int64_t q0 = i0 / 32 * 32; q0 <= i1; q0 += BQ)
                {
                    const int64_t nq = std::min(BQ, i1 + 1 - q0);
                    const int64_t n32 = round32(nq);
                    if(p.bias && sdpa_bias_masks_block(p, boff, q0, q0 + nq, k0, k0 + nk))
                        continue; // P = dS = 0 throughout: nothing to add to dQ, dK or dV
                    const bool inside = q0 + n32 <= r.sq; // every row the tiles touch is one of the head's
                    const int64_t qs2 = p.qs.strides[2], dos2 = P.dos.strides[2];
                    const uint16_t* qa = inside ? qh + q0 * qs2 : padded_rows(qh, qs2, q0, n32, r.sq, d, qpad);
                    const uint16_t* doa =
                        inside ? doh + q0 * dos2 : padded_rows(doh, dos2, q0, n32, r.sq, dvw, dopad);
                    pair_gemm(n32, ABK, d, qa, inside ? qs2 : d, 32, kp, 2 * ABK, s, ABK, false);
                    pair_gemm(n32, ABK, dvw, doa, inside ? dos2 : dvw, 32, vp, 2 * ABK, dpm, ABK, false);
                    // the recompute a BK-key strip at a time (strips past Skv come out zero)
                    for(int64_t j0 = 0; j0 < ABK; j0 += BK)
                        recompute_rows<16>(p, sc, bd, lse, del, lgl, boff, q0, nq, i1, k0 + j0,
                                           std::min(BK, nk - j0), s + j0, dpm + j0, ABK, dt, none);
                    // (rows past the block's last query: whatever the tiles left there, as zeros)
                    std::memset(s + nq * ABK, 0, sizeof(float) * static_cast<size_t>((n32 - nq) * ABK));
                    std::memset(dpm + nq * ABK, 0, sizeof(float) * static_cast<size_t>((n32 - nq) * ABK));
                    bf16_row_pairs(s, n32, pq);
                    bf16_row_pairs(dpm, n32, dsq);
                    bf16_rows(dpm, n32, dsr);
                    // dV^T += dO^T P ; dK^T += Q^T dS ; dQ += dS K (dS already carries the scale)
                    pair_gemm(dvw, ABK, n32, doth + q0 * dvw, 32, 32 * dvw, pq, 2 * ABK, dv, ABK, !first);
                    pair_gemm(d, ABK, n32, qth + q0 * d, 32, 32 * d, dsq, 2 * ABK, dk, ABK, !first);
                    first = false;
                    // dQ's rows in whole 32-row strips below Sq in place, a strip past it through dqs
                    const int64_t direct = inside ? n32 : (r.sq - q0) / 32 * 32;
                    if(direct > 0)
                        pair_gemm(direct, d, ABK, dsr, ABK, 32, kk, 2 * d, dqh + q0 * r.dq_ld, r.dq_ld, true);
                    if(direct < nq)
                    {
                        pair_gemm(32, d, ABK, dsr + direct * ABK, ABK, 32, kk, 2 * d, dqs, d, false);
                        for(int64_t i = direct; i < nq; ++i)
                        {
                            float* row = dqh + (q0 + i) * r.dq_ld;
                            const float* add = dqs + (i - direct) * d;
                            for(int64_t e = 0; e < d; e += 16)
                                _mm512_storeu_ps(row + e, _mm512_add_ps(_mm512_loadu_ps(row + e),
                                                                        _mm512_loadu_ps(add + e)));
                        }
                    }
                }
            }
        }
        if(first)
        {
            std::memset(dk, 0, sizeof(float) * static_cast<size_t>(d * ABK));
            std::memset(dv, 0, sizeof(float) * static_cast<size_t>(dvw * ABK));
        }
        store_rows_t<16>(P.dk, P.dk_t, P.dks, dkoff + k0 * P.dks.strides[2], nk, d, dk, ABK);
        store_rows_t<16>(P.dv, P.dv_t, P.dvs, dvoff + k0 * P.dvs.strides[2], nk, dvw, dv, ABK);
    }
#if defined(HIPDNN_BWD_AMX)
    if(configured)
        _tile_release();
#endif
}
#endif // HIPDNN_BWD_AMX || HIPDNN_BWD_BF16DOT

} // namespace

// (flatten: every helper inlined into the item, as one function of the item's ISA)
__attribute__((flatten)) void run_item(const Run& r, int64_t w, float* ws)
{
#if HIPDNN_BWD_W == 16
    const FlushToZero ftz;
#endif
#if defined(HIPDNN_BWD_AMX) || defined(HIPDNN_BWD_BF16DOT)
    pair_item(r, w, ws); // (the driver calls this build only for the calls it serves)
#else
    item<HIPDNN_BWD_W>(r, w, ws);
#endif
}

__attribute__((flatten)) void run_exact_rows(const Run& r, int64_t bh, float* ws)
{
#if HIPDNN_BWD_W == 16
    const FlushToZero ftz;
#endif
    exact_rows<HIPDNN_BWD_W>(r, bh, ws);
}

void run_row_stats(const Run& r, int64_t b, int64_t h, int64_t i0, int64_t i1)
{
    row_stats(r, b, h, i0, i1);
}

void run_dq_rows(const Run& r, int64_t b, int64_t h, int64_t i0, int64_t i1)
{
    dq_rows(r, b, h, i0, i1);
}

#if defined(HIPDNN_BWD_AMX) || defined(HIPDNN_BWD_BF16DOT)
bool built()
{
    return true;
}

void run_pair_transposes(const Run& r, int64_t b, int64_t h, int64_t i0, int64_t i1)
{
    const SdpaBwdProblem& P = *r.p;
    const SdpaProblem& p = P.fwd;
    const int64_t live = band_of(p, b, r.sq, r.skv).sq_b;
    const uint16_t* q = static_cast<const uint16_t*>(p.q) + b * p.qs.strides[0] + h * p.qs.strides[1];
    const uint16_t* dout = static_cast<const uint16_t*>(P.dout) + b * P.dos.strides[0] + h * P.dos.strides[1];
    transpose_rows_bf16(q, p.qs.strides[2], i0, i1, live, r.d, r.sq, r.sqp, r.qt16 + (b * r.hq + h) * r.d * r.sqp);
    transpose_rows_bf16(dout, P.dos.strides[2], i0, i1, live, r.dv, r.sq, r.sqp,
                        r.dot16 + (b * r.hq + h) * r.dv * r.sqp);
}
#endif

} // namespace HIPDNN_BWD_NS
} // namespace hipdnn_cpu
