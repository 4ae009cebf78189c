// hipdnn HIP engine: device helpers shared by the SDPA kernels (HIP source;
// include only from GPU translation units).
#ifndef HIPDNN_HIP_ENGINE_SDPA_DEVICE_COMMON_H
#define HIPDNN_HIP_ENGINE_SDPA_DEVICE_COMMON_H

#include "sdpa_kernels.h"

namespace hipdnn_hip
{

// Each batch's effective lengths and causal diagonal (see SdpaArgs).
struct BatchLengths
{
    int sq;
    int skv;
    int diag; // query i sees key j iff j <= i + diag
};

__device__ __forceinline__ BatchLengths batch_lengths(const SdpaArgs& a, int b)
{
    BatchLengths r{a.sq, a.skv, 0};
    if(a.padding)
    {
        const int lq = a.seq_len_q[static_cast<int64_t>(b) * a.slq_sb];
        const int lkv = a.seq_len_kv[static_cast<int64_t>(b) * a.slkv_sb];
        r.sq = min(max(lq, 0), a.sq);
        r.skv = min(max(lkv, 0), a.skv);
    }
    int diag = r.skv; // no causal limit: every key j < skv satisfies j <= i + skv
    if(a.mask_br)
        diag = r.skv - r.sq;
    if(a.mask_tl)
        diag = min(diag, 0);
    r.diag = diag;
    return r;
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
