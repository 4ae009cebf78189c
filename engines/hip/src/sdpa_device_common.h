// hipdnn HIP engine: device helpers shared by the SDPA kernels (HIP source;
// include only from GPU translation units).
#ifndef HIPDNN_HIP_ENGINE_SDPA_DEVICE_COMMON_H
#define HIPDNN_HIP_ENGINE_SDPA_DEVICE_COMMON_H

#include "sdpa_kernels.h"

namespace hipdnn_hip
{

// Each batch's effective lengths and visible band (see SdpaArgs).
struct BatchLengths
{
    int sq;
    int skv;
    int diag; // query i sees key j only if j <= i + diag
    int lo;   // ... and j >= i + lo (-sq: no left bound)
};

__device__ __forceinline__ BatchLengths batch_lengths(const SdpaArgs& a, int b)
{
    BatchLengths r{a.sq, a.skv, 0, 0};
    if(a.padding)
    {
        const int lq = a.seq_len_q[static_cast<int64_t>(b) * a.slq_sb];
        const int lkv = a.seq_len_kv[static_cast<int64_t>(b) * a.slkv_sb];
        r.sq = min(max(lq, 0), a.sq);
        r.skv = min(max(lkv, 0), a.skv);
    }
    // The host clamps hi_br to the call's sq and hi_tl to its skv (larger bounds limit nothing), so
    // diag stays in [-sq, skv + sq] and the kernels' int32 row + diag arithmetic in range (every
    // kernel also cuts keys at skv).
    int diag = r.skv; // no causal limit: every key j < skv satisfies j <= i + skv
    if(a.mask_br)
        diag = r.skv - r.sq + a.hi_br;
    if(a.mask_tl)
        diag = min(diag, a.hi_tl);
    r.diag = diag;
    // The lower limit, in 64 bits and clamped to [-sq, skv] (only the kernels built for a window
    // read it). No left bound: i - sq < 0 <= j for every row i < sq.
    int64_t lo = -r.sq;
    if(a.mask_lo)
        lo = max(lo, static_cast<int64_t>(a.lo) + (a.lo_br ? static_cast<int64_t>(r.skv) - r.sq : 0));
    r.lo = static_cast<int>(min(lo, static_cast<int64_t>(r.skv)));
    return r;
}

// The bias of (b, h, row, col) as a float (bias_type 0 bf16, 1 fp16, 2 fp32); a.bias non-null.
__device__ __forceinline__ const unsigned char* bias_head(const SdpaArgs& a, int b, int h)
{
    const int64_t esz = a.bias_type == 2 ? 4 : 2;
    return static_cast<const unsigned char*>(a.bias) + (b * a.bias_sb + h * a.bias_sh) * esz;
}

// A finite bias beyond +-2^127 counts as +-2^127 (the CPU engine's kBiasLimit): the kernels scale
// scores to log2 units, and transformers' finfo.min masks would overflow to -inf there, emptying
// rows that torch averages. Infinities and NaN pass through. Kernels that add the bias in raw score
// units (bias / scale) pass a lower limit, kBiasLimit * min(1, scale), so that the quotient stays finite.
constexpr float kBiasLimit = 0x1p127f;

__device__ __forceinline__ float bias_limited(float b, float limit = kBiasLimit)
{
    return fabsf(b) <= 3.40282346638528859812e38f ? fminf(fmaxf(b, -limit), limit) : b;
}

__device__ __forceinline__ float bias_at(const unsigned char* head, int type, int64_t ss, int row, int col,
                                         float limit = kBiasLimit)
{
    const int64_t i = row * ss + col;
    if(type == 2)
        return bias_limited(reinterpret_cast<const float*>(head)[i], limit);
    const uint16_t u = reinterpret_cast<const uint16_t*>(head)[i];
    // bf16 reaches the float range; fp16 tops out at 65504, which only a lower limit reaches
    return bias_limited(type == 0 ? __uint_as_float(static_cast<uint32_t>(u) << 16) : __half2float(__ushort_as_half(u)),
                        limit);
}

// Two neighbouring keys col, col + 1 (col even; a.bias_pairs: one 4- or 8-byte load).
__device__ __forceinline__ float2 bias_pair_at(const unsigned char* head, int type, int64_t ss, int row, int col,
                                               float limit = kBiasLimit)
{
    const int64_t i = row * ss + col;
    float2 b;
    if(type == 2)
        b = *reinterpret_cast<const float2*>(reinterpret_cast<const float*>(head) + i);
    else
    {
        const uint32_t u = *reinterpret_cast<const uint32_t*>(reinterpret_cast<const uint16_t*>(head) + i);
        b = type == 0 ? make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u))
                      : make_float2(__half2float(__ushort_as_half(static_cast<uint16_t>(u & 0xffffu))),
                                    __half2float(__ushort_as_half(static_cast<uint16_t>(u >> 16))));
    }
    return make_float2(bias_limited(b.x, limit), bias_limited(b.y, limit));
}

// ALiBi's slope of query head h of nh: the geometric series 2^(-8 (h + 1) / n) over the largest
// power of two n <= nh, then the odd steps of the series for 2n (as the CPU engine's alibi_slope).
__device__ __forceinline__ float alibi_slope(int h, int nh)
{
    int n = 1;
    while(n * 2 <= nh)
        n *= 2;
    const float e = h < n ? -8.0f * static_cast<float>(h + 1) : -4.0f * static_cast<float>(2 * (h - n) + 1);
    return exp2f(e / static_cast<float>(n));
}

// tanh(x) for score softcapping, to about 1e-7 relative everywhere (the cap multiplies it, so
// absolute accuracy would not do for large caps): below |x| = 0.4 its odd Taylor polynomial to x^13
// (truncation under 5e-9 relative), above (1 - e) / (1 + e) with e = exp(-2|x|) <= 0.45, which loses
// under a bit. +-inf gives +-1; NaN stays NaN (both tests are false for it).
__device__ __forceinline__ float softcap_tanh(float x)
{
    // Both forms, then a select: no branch inside the unrolled score loops.
    const float ax = fabsf(x);
    const float x2 = x * x;
    float p = 21844.0f / 6081075.0f;
    p = fmaf(p, x2, -1382.0f / 155925.0f);
    p = fmaf(p, x2, 62.0f / 2835.0f);
    p = fmaf(p, x2, -17.0f / 315.0f);
    p = fmaf(p, x2, 2.0f / 15.0f);
    p = fmaf(p, x2, -1.0f / 3.0f);
    const float e = exp2f(ax * -2.8853900817779268f);
    const float big = copysignf((1.0f - e) / (1.0f + e), x);
    return ax < 0.4f ? fmaf(x * x2, p, x) : big;
}

// The capped score c tanh(u / c) of a scaled score u, in log2 units (times log2 e), and through
// dcap its derivative 1 - tanh(u / c)^2, by which the backward multiplies dS.
__device__ __forceinline__ float softcapped_log2(float u, float c, float& dcap)
{
    const float t = softcap_tanh(u / c);
    dcap = 1.0f - t * t;
    return c * 1.4426950408889634f * t;
}

// bf16 and fp16 stored as raw 16-bit patterns; conversions to and from float.
template <ElemType T>
__device__ __forceinline__ float load_as_float(const uint16_t* p);

template <>
__device__ __forceinline__ float load_as_float<ElemType::Bf16>(const uint16_t* p)
{
    return __uint_as_float(static_cast<uint32_t>(*p) << 16);
}

template <>
__device__ __forceinline__ float load_as_float<ElemType::Half>(const uint16_t* p)
{
    return __half2float(__ushort_as_half(*p));
}

template <ElemType T>
__device__ __forceinline__ uint16_t float_to_bits(float x);

template <>
__device__ __forceinline__ uint16_t float_to_bits<ElemType::Bf16>(float x)
{
    uint32_t u = __float_as_uint(x);
    if((u & 0x7fffffffu) > 0x7f800000u)
        return static_cast<uint16_t>((u >> 16) | 0x40u); // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);                     // round to nearest even
    return static_cast<uint16_t>(u >> 16);
}

template <>
__device__ __forceinline__ uint16_t float_to_bits<ElemType::Half>(float x)
{
    return __half_as_ushort(__float2half_rn(x));
}

} // namespace hipdnn_hip

#endif // HIPDNN_HIP_ENGINE_SDPA_DEVICE_COMMON_H
