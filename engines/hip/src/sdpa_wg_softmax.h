// hipdnn HIP engine, engine 202: what the two wgmma kernels (sdpa_wg_kernel.hip, sdpa_ws_kernel.hip)
// share: the swizzled tile offsets, the async-proxy fence and the online softmax of a warpgroup's
// score tile. NVIDIA only (inline PTX); empty elsewhere.
#ifndef HIPDNN_HIP_ENGINE_SDPA_WG_SOFTMAX_H
#define HIPDNN_HIP_ENGINE_SDPA_WG_SOFTMAX_H

#include "sdpa_device_common.h"

#if defined(HIPDNN_HIP_ON_NVIDIA)
#include "sdpa_mma_sync.h"

namespace hipdnn_hip
{
namespace
{

using namespace mma_sync;

// Byte offset of (row r, 16-byte chunk c) in a swizzled tile of ROWS rows.
template <int ROWS>
__device__ __forceinline__ uint32_t woff(int r, int c)
{
    return static_cast<uint32_t>((c >> 3) * ROWS * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

__device__ __forceinline__ void fence_proxy_async()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Online softmax of one warpgroup's 64 x BN score tile s (wgmma accumulator layout, raw
// Q K^T, not yet scaled). The running maximum m is kept in raw score units; each score becomes
// exp2(s * sl2 - m * sl2), one FFMA and one ex2, which needs sl2 > 0 (the launcher sends other
// scales to the mma.sync kernel). alpha, the factor that rescales the running output and sum,
// is exactly 1 when a row's maximum did not move (wg_rescale then skips the multiply). Masking
// runs only on edge tiles. s is overwritten with the (unnormalised) probabilities.
template <int BN>
__device__ __forceinline__ void wg_softmax_probs(float (&s)[BN / 2], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                                 float sl2, bool edge, int kv0, int r0, int t, const BatchLengths& len)
{
    if(edge)
    {
        // Per row, the last visible column relative to this thread's first one, so that each
        // score costs one compare with a constant and one select.
        int lim[2];
#pragma unroll
        for(int hf = 0; hf < 2; ++hf)
            lim[hf] = min(len.skv - 1, r0 + hf * 8 + len.diag) - (kv0 + 2 * t);
#pragma unroll
        for(int j = 0; j < BN / 8; ++j)
#pragma unroll
            for(int e = 0; e < 4; ++e)
                if(j * 8 + (e & 1) > lim[e >> 1])
                    s[4 * j + e] = -INFINITY;
    }
#pragma unroll
    for(int hf = 0; hf < 2; ++hf)
    {
        float mx = m[hf];
#pragma unroll
        for(int j = 0; j < BN / 8; ++j)
            mx = fmaxf(mx, fmaxf(s[4 * j + 2 * hf], s[4 * j + 2 * hf + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        // __fmul_rn: no contraction into an FMA, so an unchanged maximum gives alpha == 1 exactly
        const float base = mx == -INFINITY ? 0.0f : __fmul_rn(mx, sl2);
        alpha[hf] = mx == m[hf] ? 1.0f : fast_exp2(__fmul_rn(m[hf], sl2) - base);
        m[hf] = mx;
        float sum = 0.0f;
#pragma unroll
        for(int j = 0; j < BN / 8; ++j)
        {
            s[4 * j + 2 * hf] = fast_exp2(fmaf(s[4 * j + 2 * hf], sl2, -base));
            s[4 * j + 2 * hf + 1] = fast_exp2(fmaf(s[4 * j + 2 * hf + 1], sl2, -base));
            sum += s[4 * j + 2 * hf] + s[4 * j + 2 * hf + 1];
        }
        l[hf] = l[hf] * alpha[hf] + sum;
    }
}

// P (probabilities in s) rounded to the input type, in the A-fragment order of O += P V.
template <ElemType T, int BN>
__device__ __forceinline__ void wg_pack_p(const float (&s)[BN / 2], uint32_t (&pn)[BN / 16][4])
{
#pragma unroll
    for(int kk = 0; kk < BN / 16; ++kk)
    {
        pn[kk][0] = pack2<T>(s[8 * kk + 0], s[8 * kk + 1]);
        pn[kk][1] = pack2<T>(s[8 * kk + 2], s[8 * kk + 3]);
        pn[kk][2] = pack2<T>(s[8 * kk + 4], s[8 * kk + 5]);
        pn[kk][3] = pack2<T>(s[8 * kk + 6], s[8 * kk + 7]);
    }
}

// O *= alpha per row, skipped when no row of the warp changed its maximum (a warp vote, so the
// branch is uniform).
template <int D>
__device__ __forceinline__ void wg_rescale(float (&o)[D / 2], const float (&alpha)[2])
{
    if(__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f))
    {
#pragma unroll
        for(int j = 0; j < D / 8; ++j)
        {
            o[4 * j + 0] *= alpha[0];
            o[4 * j + 1] *= alpha[0];
            o[4 * j + 2] *= alpha[1];
            o[4 * j + 3] *= alpha[1];
        }
    }
}

} // namespace
} // namespace hipdnn_hip

#endif // HIPDNN_HIP_ON_NVIDIA

#endif // HIPDNN_HIP_ENGINE_SDPA_WG_SOFTMAX_H
