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
// What a kernel built for a window or a bias (Ext) adds to the score tile: the bias of its (batch,
// head), null when the call has none, read at clamped rows and keys (rows past sq and keys past
// skv are masked afterwards).
struct WgExt
{
    const unsigned char* bias = nullptr;
    int type = 0;
    int pairs = 0;
    int64_t ss = 0;
    int sq = 0, skv = 0;
    float inv_scale = 1.0f;
    float bias_limit = kBiasLimit; // kBiasLimit * min(1, scale): bias * inv_scale stays finite
    // Softcapping and ALiBi in raw score units: cap = c / scale (0: off), cap_inv = 1 / cap, alibi =
    // the head's slope / scale (0: off).
    float cap = 0.0f, cap_inv = 0.0f;
    float alibi = 0.0f;
};

// Asks the L2 for the bias of a warpgroup's 64 rows from row0 and BN keys from kv0 (whole 128-byte
// lines, one or two per thread), a couple of tiles before the softmax reads them: the reads then wait
// for the L2, not for memory.
template <int BN>
__device__ __forceinline__ void wg_prefetch_bias(const WgExt& x, int row0, int kv0, int wtid)
{
    const int esz = x.type == 2 ? 4 : 2;
    const int lines = BN * esz / 128; // per row
    for(int i = wtid; i < 64 * lines; i += 128)
    {
        const int row = row0 + i / lines, col = kv0 + (i % lines) * (128 / esz);
        if(row < x.sq && col < x.skv)
            asm volatile("prefetch.global.L2 [%0];\n" ::"l"(x.bias + (static_cast<int64_t>(row) * x.ss + col) * esz));
    }
}

template <int BN, bool Ext = false, bool Score = false>
__device__ __forceinline__ void wg_softmax_probs(float (&s)[BN / 2], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                                 float sl2, bool edge, int kv0, int r0, int t, const BatchLengths& len,
                                                 const WgExt& x = WgExt{})
{
    if constexpr(Ext)
    {
        // Softcapping first (the bias, ALiBi and the masks apply to the capped score), then ALiBi,
        // in raw units as the bias below: (c / scale) tanh(s / (c / scale)) is c tanh(scale s / c) / scale.
        if(Score && x.cap > 0.0f)
        {
#pragma unroll
            for(int i = 0; i < BN / 2; ++i)
                s[i] = x.cap * softcap_tanh(s[i] * x.cap_inv);
        }
        if(Score && x.alibi != 0.0f)
        {
#pragma unroll
            for(int j = 0; j < BN / 8; ++j)
#pragma unroll
                for(int e = 0; e < 4; ++e)
                {
                    const int col = kv0 + 2 * t + j * 8 + (e & 1);
                    const int row = r0 + (e >> 1) * 8;
                    s[4 * j + e] = fmaf(x.alibi, static_cast<float>(col - row), s[4 * j + e]);
                }
        }
        // The bias in raw score units (the maximum is kept in those): s + bias / scale, so that
        // exp2(s * sl2 - m * sl2) is exp2((scale s + bias) log2 e - ...). Before the masking, which
        // replaces (never adds to) the score.
        if(x.bias != nullptr)
        {
#pragma unroll
            for(int hf = 0; hf < 2; ++hf)
            {
                const int row = min(r0 + hf * 8, x.sq - 1);
#pragma unroll
                for(int j = 0; j < BN / 8; ++j)
                {
                    const int col = kv0 + 2 * t + j * 8;
                    float2 bv;
                    if(x.pairs)
                        bv = bias_pair_at(x.bias, x.type, x.ss, row, min(col, x.skv - 2), x.bias_limit);
                    else
                        bv = make_float2(bias_at(x.bias, x.type, x.ss, row, min(col, x.skv - 1), x.bias_limit),
                                         bias_at(x.bias, x.type, x.ss, row, min(col + 1, x.skv - 1), x.bias_limit));
                    // (bias / scale rounded before the add, not fused: keys with equal huge biases,
                    // a -1e30 padding row, keep equal scores; fused, the exact product's rounding
                    // could go either way with the score added, and a tie become a one-hot row)
                    s[4 * j + 2 * hf] += hipdnn_fmul_rn(bv.x, x.inv_scale);
                    s[4 * j + 2 * hf + 1] += hipdnn_fmul_rn(bv.y, x.inv_scale);
                }
            }
        }
        if(edge)
        {
            // Both sides: the first visible column (window) and the last, relative to this
            // thread's first one.
            int hi[2], lo[2];
#pragma unroll
            for(int hf = 0; hf < 2; ++hf)
            {
                hi[hf] = min(len.skv - 1, r0 + hf * 8 + len.diag) - (kv0 + 2 * t);
                lo[hf] = r0 + hf * 8 + len.lo - (kv0 + 2 * t);
            }
#pragma unroll
            for(int j = 0; j < BN / 8; ++j)
#pragma unroll
                for(int e = 0; e < 4; ++e)
                {
                    const int c = j * 8 + (e & 1);
                    if(c > hi[e >> 1] || c < lo[e >> 1])
                        s[4 * j + e] = -INFINITY;
                }
        }
    }
    else if(edge)
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
    if constexpr(!Ext)
    {
#pragma unroll
        for(int hf = 0; hf < 2; ++hf)
        {
            float mx = m[hf];
#pragma unroll
            for(int j = 0; j < BN / 8; ++j)
                mx = fmaxf(mx, fmaxf(s[4 * j + 2 * hf], s[4 * j + 2 * hf + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            // hipdnn_fmul_rn: no contraction into an FMA, so an unchanged maximum gives alpha == 1 exactly
            const float base = mx == -INFINITY ? 0.0f : hipdnn_fmul_rn(mx, sl2);
            alpha[hf] = mx == m[hf] ? 1.0f : fast_exp2(hipdnn_fmul_rn(m[hf], sl2) - base);
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
    else
    {
        float mx[2], base[2];
#pragma unroll
        for(int hf = 0; hf < 2; ++hf)
        {
            mx[hf] = m[hf];
#pragma unroll
            for(int j = 0; j < BN / 8; ++j)
                mx[hf] = fmaxf(mx[hf], fmaxf(s[4 * j + 2 * hf], s[4 * j + 2 * hf + 1]));
            mx[hf] = fmaxf(mx[hf], __shfl_xor_sync(0xffffffffu, mx[hf], 1));
            mx[hf] = fmaxf(mx[hf], __shfl_xor_sync(0xffffffffu, mx[hf], 2));
            base[hf] = mx[hf] == -INFINITY ? 0.0f : hipdnn_fmul_rn(mx[hf], sl2);
        }
        float sum[2] = {0.0f, 0.0f};
        // A bias can make scores huge (finfo.min masks: about -2^127 in raw units). The FFMA below
        // leaves the rounding error of mx * sl2 in every exponent of the row: a common factor that
        // cancels, but at such magnitudes up to 2^100, so p overflows or vanishes. Such rows take
        // differences first: a row whose scores are all equal (masked everywhere by one huge value,
        // which absorbs q.k) gets exp2(0) = 1 throughout, torch's average. Below 2^12 the error is
        // under 2^-12 in the exponent. One test for both rows: the two rows' exponentials interleave.
        if(x.bias != nullptr && !(fabsf(base[0]) < 0x1p12f && fabsf(base[1]) < 0x1p12f))
        {
#pragma unroll
            for(int hf = 0; hf < 2; ++hf)
            {
                alpha[hf] = mx[hf] == m[hf] ? 1.0f : fast_exp2((m[hf] - mx[hf]) * sl2);
#pragma unroll
                for(int j = 0; j < BN / 8; ++j)
                {
                    s[4 * j + 2 * hf] = fast_exp2((s[4 * j + 2 * hf] - mx[hf]) * sl2);
                    s[4 * j + 2 * hf + 1] = fast_exp2((s[4 * j + 2 * hf + 1] - mx[hf]) * sl2);
                    sum[hf] += s[4 * j + 2 * hf] + s[4 * j + 2 * hf + 1];
                }
            }
        }
        else
        {
#pragma unroll
            for(int hf = 0; hf < 2; ++hf)
            {
                alpha[hf] = mx[hf] == m[hf] ? 1.0f : fast_exp2(hipdnn_fmul_rn(m[hf], sl2) - base[hf]);
#pragma unroll
                for(int j = 0; j < BN / 8; ++j)
                {
                    s[4 * j + 2 * hf] = fast_exp2(fmaf(s[4 * j + 2 * hf], sl2, -base[hf]));
                    s[4 * j + 2 * hf + 1] = fast_exp2(fmaf(s[4 * j + 2 * hf + 1], sl2, -base[hf]));
                    sum[hf] += s[4 * j + 2 * hf] + s[4 * j + 2 * hf + 1];
                }
            }
        }
#pragma unroll
        for(int hf = 0; hf < 2; ++hf)
        {
            m[hf] = mx[hf];
            l[hf] = l[hf] * alpha[hf] + sum[hf];
        }
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
