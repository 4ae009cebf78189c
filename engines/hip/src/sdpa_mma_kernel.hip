// hipdnn HIP engine, engine 202: the mma.sync flash-attention forward kernel (sdpa_fwd_tc), the
// tensor-core kernel used before the wgmma ones (sdpa_tc_dispatch.hip picks among them).
//
// Compiled only in the NVIDIA build (inline PTX: mma.sync m16n8k16 with fp32
// accumulation, ldmatrix, cp.async), for sm_90a. Elsewhere this file builds
// stubs and the engine offers 201 alone.
//
// Layout of one block: kWarps warps, each owning 32 query rows (two 16-row mma
// tiles, so every K/V fragment read from shared memory feeds two MMAs) of one
// (batch, head). Q is staged once in shared memory and read as A-fragments by
// ldmatrix. Two blocks share a multiprocessor. Keys and values stream through
// shared memory kBlockN rows at a time, double-buffered with cp.async so the
// next tile loads while the current one is multiplied. Shared tiles are stored
// with an XOR swizzle of their 16-byte chunks (chunk ^ (row & 7)) so ldmatrix
// reads eight rows without bank conflicts.
//
// Per tile and warp: S = Q K^T (16 x kBlockN, fp32 in registers), scaled into
// log2 units, masked only on tiles that touch the causal diagonal or the end of
// the keys, then the online softmax: new row maximum (a 4-lane shuffle
// reduction), rescale of the running output and sum, P = exp2(S - max)
// rounded to the input type and fed directly as the A-fragment of O += P V
// (the accumulator layout of two 8-column tiles is the A layout of one
// 16-deep step). The row sums are reduced across the quad only at the end.
#include "sdpa_device_common.h"
#include "sdpa_tc_families.h"
#if defined(HIPDNN_HIP_ON_NVIDIA)
#include "sdpa_mma_sync.h"
#endif

namespace hipdnn_hip
{

#if defined(HIPDNN_HIP_ON_NVIDIA)

namespace
{

using namespace mma_sync;

template <int D>
struct TileConfig;
#ifndef HIPDNN_TC_BLOCK_N_D64
#define HIPDNN_TC_BLOCK_N_D64 64
#endif
#ifndef HIPDNN_TC_BLOCK_N_D128
#define HIPDNN_TC_BLOCK_N_D128 64
#endif
template <>
struct TileConfig<64>
{
    static constexpr int kWarps = 4;
    static constexpr int kBlockN = HIPDNN_TC_BLOCK_N_D64;
};
template <>
struct TileConfig<128>
{
    static constexpr int kWarps = 4;
    static constexpr int kBlockN = HIPDNN_TC_BLOCK_N_D128;
};

constexpr int kMTiles = 2; // 16-row mma tiles per warp: each K/V fragment read from shared memory feeds two
template <int D>
constexpr int kBlockM = TileConfig<D>::kWarps * 16 * kMTiles;
template <int D>
constexpr int kThreads = TileConfig<D>::kWarps * 32;
template <int D>
constexpr size_t kSmemBytes = (size_t(kBlockM<D>) + size_t(2) * 2 * TileConfig<D>::kBlockN) * D * sizeof(uint16_t);


template <ElemType T, int D>
__global__ void __launch_bounds__(kThreads<D>, 2) sdpa_fwd_tc(const SdpaArgs a)
{
    constexpr int BN = TileConfig<D>::kBlockN;
    constexpr int BM = kBlockM<D>;
    constexpr int NT = kThreads<D>;
    constexpr int MT = kMTiles;
    constexpr int CH = D / 8;    // 16-byte chunks per row
    constexpr int TILE = BN * D; // elements per K or V tile
    constexpr int NS = BN / 8;   // 8-wide score column tiles
    constexpr int NO = D / 8;    // 8-wide output column tiles
    static_assert(CH >= 8, "the swizzle needs at least 8 chunks per row");

    extern __shared__ __align__(128) unsigned char smem_raw[];
    uint16_t* s_q = reinterpret_cast<uint16_t*>(smem_raw); // [BM][D]
    uint16_t* s_k = s_q + BM * D;                          // [2][BN][D]
    uint16_t* s_v = s_k + 2 * TILE;                        // [2][BN][D]
    const uint32_t q_base = smem_addr(s_q);
    const uint32_t k_base = smem_addr(s_k);
    const uint32_t v_base = smem_addr(s_v);

    const int tid = static_cast<int>(threadIdx.x);
    const int warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const int qblock = static_cast<int>(gridDim.x - 1 - blockIdx.x);
    const int h = static_cast<int>(blockIdx.y);
    const int b = static_cast<int>(blockIdx.z);
    const int hk = h / (a.hq / a.hk);
    const BatchLengths len = batch_lengths(a, b);
    const int q0 = qblock * BM;
    const int warp_row0 = q0 + warp * 16 * MT;

    const uint16_t* qp = static_cast<const uint16_t*>(a.q) + b * a.q_sb + h * a.q_sh;
    const uint16_t* kp = static_cast<const uint16_t*>(a.k) + b * a.k_sb + hk * a.k_sh;
    const uint16_t* vp = static_cast<const uint16_t*>(a.v) + b * a.v_sb + hk * a.v_sh;

    const int last_row = min(q0 + BM, len.sq) - 1;
    int kv_end = last_row < q0 ? 0 : min(len.skv, last_row + len.diag + 1);
    kv_end = max(kv_end, 0);
    const int ntiles = (kv_end + BN - 1) / BN;

    auto load_tile = [&](int stage, int kv0) {
        const uint32_t kb = k_base + stage * TILE * 2;
        const uint32_t vb = v_base + stage * TILE * 2;
#pragma unroll
        for(int i = tid; i < BN * CH; i += NT)
        {
            const int r = i / CH, c = i % CH;
            const int key = kv0 + r;
            const int src_key = min(key, len.skv - 1);
            const int bytes = key < len.skv ? 16 : 0; // zero-fill past the last key
            cp_async_16(kb + swz<D>(r, c), kp + src_key * a.k_ss + c * 8, bytes);
            cp_async_16(vb + swz<D>(r, c), vp + src_key * a.v_ss + c * 8, bytes);
        }
    };

    // Q tile (rows past the batch's length read as zero) and the first K/V tile: one group.
#pragma unroll
    for(int i = tid; i < BM * CH; i += NT)
    {
        const int r = i / CH, c = i % CH;
        const int row = q0 + r;
        const int src_row = max(min(row, len.sq - 1), 0);
        cp_async_16(q_base + swz<D>(r, c), qp + src_row * a.q_ss + c * 8, row < len.sq ? 16 : 0);
    }
    if(ntiles > 0)
        load_tile(0, 0);
    cp_async_commit();

    float o[MT][NO][4];
#pragma unroll
    for(int mt = 0; mt < MT; ++mt)
#pragma unroll
        for(int j = 0; j < NO; ++j)
            o[mt][j][0] = o[mt][j][1] = o[mt][j][2] = o[mt][j][3] = 0.0f;
    float m[MT][2], l[MT][2];
#pragma unroll
    for(int mt = 0; mt < MT; ++mt)
        m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0.0f;
    const float sl2 = a.scale_log2;

    // ldmatrix row addresses. Rows a lane addresses differ from (lane & 7) by multiples of 8,
    // so the swizzle depends on the lane and on the chunk index modulo 8 only: four per-lane
    // offsets per operand (chunk pairs 0-1, 2-3, 4-5, 6-7) plus compile-time displacements.
    constexpr uint32_t ROWB = D * 2; // bytes per tile row
    const int l7 = lane & 7;
    uint32_t qoff[4], koff[4], voff[4];
#pragma unroll
    for(int p = 0; p < 4; ++p)
    {
        qoff[p] = (warp * 16 * MT + l7 + ((lane >> 3) & 1) * 8) * ROWB + (((2 * p + (lane >> 4)) ^ l7) * 16);
        koff[p] = (l7 + (lane >> 4) * 8) * ROWB + (((2 * p + ((lane >> 3) & 1)) ^ l7) * 16);
        voff[p] = (l7 + ((lane >> 3) & 1) * 8) * ROWB + (((2 * p + (lane >> 4)) ^ l7) * 16);
    }

    for(int n = 0; n < ntiles; ++n)
    {
        const int stage = n & 1;
        if(n + 1 < ntiles)
            load_tile(stage ^ 1, (n + 1) * BN);
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();

        const int kv0 = n * BN;
        const uint32_t kt = k_base + stage * TILE * 2;
        const uint32_t vt = v_base + stage * TILE * 2;

        float s[MT][NS][4];
#pragma unroll
        for(int mt = 0; mt < MT; ++mt)
#pragma unroll
            for(int j = 0; j < NS; ++j)
                s[mt][j][0] = s[mt][j][1] = s[mt][j][2] = s[mt][j][3] = 0.0f;
#pragma unroll
        for(int kk = 0; kk < D / 16; ++kk)
        {
            uint32_t qa[MT][4];
#pragma unroll
            for(int mt = 0; mt < MT; ++mt)
            {
                ldsm_x4(q_base + qoff[kk & 3] + (kk >> 2) * 128 + mt * 16 * ROWB, qa[mt][0], qa[mt][1], qa[mt][2],
                        qa[mt][3]);
            }
#pragma unroll
            for(int j = 0; j < NS; j += 2)
            {
                // keys of score tiles j and j + 1, head-dim chunks 2kk and 2kk + 1
                uint32_t b0, b1, b2, b3;
                ldsm_x4(kt + koff[kk & 3] + (kk >> 2) * 128 + j * 8 * ROWB, b0, b1, b2, b3);
#pragma unroll
                for(int mt = 0; mt < MT; ++mt)
                {
                    mma16816<T>(s[mt][j], qa[mt], b0, b1);
                    mma16816<T>(s[mt][j + 1], qa[mt], b2, b3);
                }
            }
        }

        // Masking only where a tile reaches past the keys or across the diagonal.
        const bool edge = kv0 + BN > len.skv || kv0 + BN - 1 > warp_row0 + len.diag;
        float alpha[MT][2];
#pragma unroll
        for(int mt = 0; mt < MT; ++mt)
        {
            const int r0 = warp_row0 + mt * 16 + g;
#pragma unroll
            for(int j = 0; j < NS; ++j)
#pragma unroll
                for(int e = 0; e < 4; ++e)
                {
                    s[mt][j][e] *= sl2;
                    if(edge)
                    {
                        const int col = kv0 + j * 8 + 2 * t + (e & 1);
                        const int row = r0 + (e >> 1) * 8;
                        if(col >= len.skv || col > row + len.diag)
                            s[mt][j][e] = -INFINITY;
                    }
                }
#pragma unroll
            for(int hf = 0; hf < 2; ++hf)
            {
                float mx = m[mt][hf];
#pragma unroll
                for(int j = 0; j < NS; ++j)
                    mx = fmaxf(mx, fmaxf(s[mt][j][2 * hf], s[mt][j][2 * hf + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float base = mx == -INFINITY ? 0.0f : mx;
                alpha[mt][hf] = fast_exp2(m[mt][hf] - base);
                m[mt][hf] = mx;
                float sum = 0.0f;
#pragma unroll
                for(int j = 0; j < NS; ++j)
                {
                    s[mt][j][2 * hf] = fast_exp2(s[mt][j][2 * hf] - base);
                    s[mt][j][2 * hf + 1] = fast_exp2(s[mt][j][2 * hf + 1] - base);
                    sum += s[mt][j][2 * hf] + s[mt][j][2 * hf + 1];
                }
                l[mt][hf] = l[mt][hf] * alpha[mt][hf] + sum;
            }
#pragma unroll
            for(int j = 0; j < NO; ++j)
            {
                o[mt][j][0] *= alpha[mt][0];
                o[mt][j][1] *= alpha[mt][0];
                o[mt][j][2] *= alpha[mt][1];
                o[mt][j][3] *= alpha[mt][1];
            }
        }

#pragma unroll
        for(int kk = 0; kk < BN / 16; ++kk)
        {
            uint32_t pa[MT][4];
#pragma unroll
            for(int mt = 0; mt < MT; ++mt)
            {
                pa[mt][0] = pack2<T>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                pa[mt][1] = pack2<T>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                pa[mt][2] = pack2<T>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                pa[mt][3] = pack2<T>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
            }
#pragma unroll
            for(int j = 0; j < NO; j += 2)
            {
                // keys kk*16 .. +15, head-dim chunks j and j + 1
                uint32_t b0, b1, b2, b3;
                ldsm_x4_t(vt + voff[(j & 7) >> 1] + (j >> 3) * 128 + kk * 16 * ROWB, b0, b1, b2, b3);
#pragma unroll
                for(int mt = 0; mt < MT; ++mt)
                {
                    mma16816<T>(o[mt][j], pa[mt], b0, b1);
                    mma16816<T>(o[mt][j + 1], pa[mt], b2, b3);
                }
            }
        }
        __syncthreads(); // this stage is refilled two iterations on
    }
    cp_async_wait<0>();

    uint16_t* op = static_cast<uint16_t*>(a.o) + b * a.o_sb + h * a.o_sh;
#pragma unroll
    for(int mt = 0; mt < MT; ++mt)
#pragma unroll
        for(int hf = 0; hf < 2; ++hf)
        {
            float lsum = l[mt][hf];
            lsum += __shfl_xor_sync(0xffffffffu, lsum, 1);
            lsum += __shfl_xor_sync(0xffffffffu, lsum, 2);
            const int row = warp_row0 + mt * 16 + g + hf * 8;
            if(row >= a.sq)
                continue;
            const bool valid = row < len.sq && lsum > 0.0f;
            const float inv = valid ? 1.0f / lsum : 0.0f;
            uint16_t* orow = op + row * a.o_ss;
#pragma unroll
            for(int j = 0; j < NO; ++j)
                *reinterpret_cast<uint32_t*>(orow + j * 8 + 2 * t)
                    = pack2<T>(o[mt][j][2 * hf] * inv, o[mt][j][2 * hf + 1] * inv);
            if(a.stats != nullptr && t == 0)
                a.stats[b * a.st_sb + h * a.st_sh + row * a.st_ss]
                    = valid ? (m[mt][hf] + __log2f(lsum)) * 0.69314718055994531f : -INFINITY;
        }
}

template <ElemType T, int D>
hipError_t set_attrs()
{
    return hipFuncSetAttribute(reinterpret_cast<const void*>(&sdpa_fwd_tc<T, D>),
                               hipFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(kSmemBytes<D>));
}

template <ElemType T, int D>
hipError_t launch_tc_typed(const SdpaArgs& a, hipStream_t stream)
{
    const dim3 grid(static_cast<unsigned>((a.sq + kBlockM<D> - 1) / kBlockM<D>),
                    static_cast<unsigned>(a.hq),
                    static_cast<unsigned>(a.batch));
    hipLaunchKernelGGL((sdpa_fwd_tc<T, D>), grid, dim3(kThreads<D>), kSmemBytes<D>, stream, a);
    return hipGetLastError();
}

} // namespace

hipError_t mma_set_attrs(ElemType t, int d)
{
    if(t == ElemType::Bf16)
        return d == 64 ? set_attrs<ElemType::Bf16, 64>() : set_attrs<ElemType::Bf16, 128>();
    return d == 64 ? set_attrs<ElemType::Half, 64>() : set_attrs<ElemType::Half, 128>();
}

hipError_t mma_launch(const SdpaArgs& a, ElemType t, hipStream_t stream)
{
    const bool bf = t == ElemType::Bf16;
    if(a.d == 64)
        return bf ? launch_tc_typed<ElemType::Bf16, 64>(a, stream) : launch_tc_typed<ElemType::Half, 64>(a, stream);
    return bf ? launch_tc_typed<ElemType::Bf16, 128>(a, stream) : launch_tc_typed<ElemType::Half, 128>(a, stream);
}

#endif // HIPDNN_HIP_ON_NVIDIA

} // namespace hipdnn_hip
