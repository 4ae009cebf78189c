// hipdnn HIP engine, engine 202: flash-attention forward on NVIDIA tensor cores.
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
#if defined(HIPDNN_HIP_ON_NVIDIA)
#include "sdpa_mma_sync.h"
#endif
#include "sdpa_wgmma.h"

#include <cstdlib>
#include <cstring>

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

// ---------------------------------------------------------------------------------------------
// Hopper kernel "wg" (engine 202 per-shape choice, see tc_auto_choice): warpgroup MMA (wgmma).
//
// A block is kWarpgroups warpgroups of 128 threads, each owning 64 query rows, and streams
// kBlockN keys per tile. All tiles live in shared memory in the 128-byte swizzled layout that
// wgmma reads directly (see sdpa_wgmma.h): Q [D/64][BM][64], K and V [D/64][BN][64] per stage.
// S = Q K^T is wgmma with both operands in shared memory (K-major); P stays in registers and is
// the A operand of O += P V, with V read MN-major (wgmma's transpose of B). Loads are cp.async
// by every thread, one tile ahead; K has 2 stages and V 3, because tile n's Q K^T and tile
// n-1's P V are in flight together: each iteration issues both, waits only for S, runs the
// softmax of tile n while the tensor cores finish P V of tile n-1, then rescales O. One block
// barrier per tile. D = 64 uses 3 warpgroups (192 rows: more MMA work per softmax, which is
// the limit at that head dim), D = 128 uses 2 (registers: S and O are 64 floats each).
#ifndef HIPDNN_WG_WARPGROUPS_D64
#define HIPDNN_WG_WARPGROUPS_D64 3
#endif
template <int D>
struct WgConfig
{
    static constexpr int kWarpgroups = D == 64 ? HIPDNN_WG_WARPGROUPS_D64 : 2;
    static constexpr int kBlockN = 128;
};
constexpr int kKStages = 2;
constexpr int kVStages = 3;
template <int D>
constexpr int kWgBlockM = WgConfig<D>::kWarpgroups * 64;
template <int D>
constexpr int kWgThreads = WgConfig<D>::kWarpgroups * 128;
template <int D>
constexpr size_t kWgSmemBytes
    = (size_t(kWgBlockM<D>) + size_t(kKStages + kVStages) * WgConfig<D>::kBlockN) * D * 2 + 1024; // + alignment

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
#pragma unroll
        for(int j = 0; j < BN / 8; ++j)
#pragma unroll
            for(int e = 0; e < 4; ++e)
            {
                const int col = kv0 + j * 8 + 2 * t + (e & 1);
                const int row = r0 + (e >> 1) * 8;
                if(col >= len.skv || col > row + len.diag)
                    s[4 * j + e] = -INFINITY;
            }
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

template <ElemType T, int D, bool Overlap>
__global__ void __launch_bounds__(kWgThreads<D>, 1) sdpa_fwd_wg(const SdpaArgs a)
{
    constexpr int BN = WgConfig<D>::kBlockN;
    constexpr int BM = kWgBlockM<D>;
    constexpr int NT = kWgThreads<D>;
    constexpr int CH = D / 8;            // 16-byte chunks per row
    constexpr uint32_t KT = BN * D * 2;  // bytes per K or V tile
    constexpr int NSR = BN / 2;          // score registers per thread
    constexpr int NOR = D / 2;           // output registers per thread
    constexpr int KP = BN / 16;          // 16-key steps of P V

    extern __shared__ unsigned char smem_raw[];
    const uint32_t raw = smem_addr(smem_raw);
    const uint32_t q_base = (raw + 1023u) & ~1023u;
    const uint32_t k_base = q_base + BM * D * 2;
    const uint32_t v_base = k_base + kKStages * KT;

    const int tid = static_cast<int>(threadIdx.x);
    const int wgi = __shfl_sync(0xffffffffu, tid >> 7, 0); // warp-uniform: descriptors live in uniform registers
    const int lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const int qblock = static_cast<int>(gridDim.x - 1 - blockIdx.x);
    const int h = static_cast<int>(blockIdx.y);
    const int b = static_cast<int>(blockIdx.z);
    const int hk = h / (a.hq / a.hk);
    const BatchLengths len = batch_lengths(a, b);
    const int q0 = qblock * BM;
    const int wg_row0 = q0 + wgi * 64;
    const int r0 = wg_row0 + ((tid >> 5) & 3) * 16 + g; // this thread's rows: r0 and r0 + 8

    const uint16_t* qp = static_cast<const uint16_t*>(a.q) + b * a.q_sb + h * a.q_sh;
    const uint16_t* kp = static_cast<const uint16_t*>(a.k) + b * a.k_sb + hk * a.k_sh;
    const uint16_t* vp = static_cast<const uint16_t*>(a.v) + b * a.v_sb + hk * a.v_sh;

    const int last_row = min(q0 + BM, len.sq) - 1;
    int kv_end = last_row < q0 ? 0 : min(len.skv, last_row + len.diag + 1);
    kv_end = max(kv_end, 0);
    const int ntiles = (kv_end + BN - 1) / BN;

    auto load_kv = [&](int n) {
        const uint32_t kb = k_base + (n % kKStages) * KT;
        const uint32_t vb = v_base + (n % kVStages) * KT;
        const int kv0 = n * BN;
#pragma unroll
        for(int i = tid; i < BN * CH; i += NT)
        {
            const int r = i / CH, c = i % CH;
            const int key = kv0 + r;
            const int src_key = min(key, len.skv - 1);
            const int bytes = key < len.skv ? 16 : 0; // zero-fill past the last key
            cp_async_16(kb + woff<BN>(r, c), kp + src_key * a.k_ss + c * 8, bytes);
            cp_async_16(vb + woff<BN>(r, c), vp + src_key * a.v_ss + c * 8, bytes);
        }
    };

    float o[NOR];
#pragma unroll
    for(int i = 0; i < NOR; ++i)
        o[i] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    const float sl2 = a.scale_log2;
    float s[NSR];
    uint32_t p[KP][4];

    // Online softmax of the scores of tile n (in s): see wg_softmax_probs.
    auto softmax = [&](int n, uint32_t (&pn)[KP][4], float (&alpha)[2]) {
        const int kv0 = n * BN;
        const bool edge = kv0 + BN > len.skv || kv0 + BN - 1 > wg_row0 + len.diag;
        wg_softmax_probs<BN>(s, m, l, alpha, sl2, edge, kv0, r0, t, len);
        wg_pack_p<T, BN>(s, pn);
    };

    // S = Q K^T for K tile n, and O += P V for V tile n (asynchronous; the caller commits and
    // waits). Descriptors are built before the fence (plan_*), so no ordinary instruction
    // writes a register an MMA of the open pipeline stage reads.
    uint64_t dq[D / 16], dk[D / 16], dv[KP];
    const uint32_t qt = q_base + wgi * 64 * 128;
#pragma unroll
    for(int kk = 0; kk < D / 16; ++kk)
        dq[kk] = wg::desc(qt + (kk >> 2) * BM * 128 + (kk & 3) * 32, 16, 1024);
    auto plan_qk = [&](int n) {
        const uint32_t kt = k_base + (n % kKStages) * KT;
#pragma unroll
        for(int kk = 0; kk < D / 16; ++kk)
        {
            dk[kk] = wg::desc(kt + (kk >> 2) * BN * 128 + (kk & 3) * 32, 16, 1024);
            asm volatile("" : "+l"(dk[kk]), "+l"(dq[kk]));
        }
    };
    auto issue_qk = [&]() {
#pragma unroll
        for(int kk = 0; kk < D / 16; ++kk)
        {
            if(kk == 0)
                wg::ss<T, BN, 0>(s, dq[kk], dk[kk]);
            else
                wg::ss<T, BN, 1>(s, dq[kk], dk[kk]);
        }
    };
    // The A operands are copied into fresh registers before the fence, so the registers the
    // in-flight P V MMAs read are never the ones the next softmax writes. ptxas still reports
    // C7513 ("serialized ... defining input registers") for this loop; an ordering that avoids
    // the message (O rescaled between the two issues, P converted after the final wait; measured
    // in bench/results/gpu_sdpa_wg2_fa3order.json) ran 4-5% slower at D = 128 on the H200, so
    // this one is kept.
    uint32_t pu[KP][4];
    auto stage_p = [&]() {
#pragma unroll
        for(int kk = 0; kk < KP; ++kk)
#pragma unroll
            for(int e = 0; e < 4; ++e)
                asm volatile("mov.b32 %0, %1;\n" : "=r"(pu[kk][e]) : "r"(p[kk][e]));
    };
    auto plan_pv = [&](int n) {
        const uint32_t vt = v_base + (n % kVStages) * KT;
#pragma unroll
        for(int kk = 0; kk < KP; ++kk)
        {
            dv[kk] = wg::desc(vt + kk * 16 * 128, BN * 128, 1024);
            asm volatile("" : "+l"(dv[kk]));
        }
    };
    auto issue_pv = [&]() {
#pragma unroll
        for(int kk = 0; kk < KP; ++kk)
            wg::rs<T, D>(o, pu[kk], dv[kk]);
    };

    if(ntiles > 0)
    {
        // Q (rows past the batch's length read as zero) and the first K/V tile.
#pragma unroll
        for(int i = tid; i < BM * CH; i += NT)
        {
            const int r = i / CH, c = i % CH;
            const int row = q0 + r;
            const int src_row = max(min(row, len.sq - 1), 0);
            cp_async_16(q_base + woff<BM>(r, c), qp + src_row * a.q_ss + c * 8, row < len.sq ? 16 : 0);
        }
        load_kv(0);
        cp_async_commit();
        cp_async_wait<0>();
        fence_proxy_async();
        __syncthreads();
        if(ntiles > 1)
            load_kv(1);
        cp_async_commit();

        float alpha[2];
        plan_qk(0);
        wg::fence();
        issue_qk();
        wg::commit();
        wg::wait<0>();
        wg::pin(s);
        softmax(0, p, alpha);

        for(int n = 1; n < ntiles; ++n)
        {
            // Tile n has landed; every thread is past iteration n - 1, so the stages of K n-1
            // and V n-2 can be refilled with tile n + 1.
            cp_async_wait<0>();
            fence_proxy_async();
            __syncthreads();
            if(n + 1 < ntiles)
                load_kv(n + 1);
            cp_async_commit();

            plan_qk(n);
            plan_pv(n - 1);
            wg::pin(o);
            stage_p();
            wg::pin(s);
            wg::fence();
            issue_qk();
            wg::commit();
            issue_pv();
            wg::commit();
            if constexpr(Overlap)
                wg::wait<1>(); // S of tile n is ready; P V of tile n - 1 may still run
            else
                wg::wait<0>();
            wg::pin(s);
            uint32_t pn[KP][4];
            softmax(n, pn, alpha);
            wg::wait<0>();
            wg::pin(o);
            // P of tile n - 1 and the P V descriptors stay live until those MMAs have
            // finished, so ptxas cannot hand their registers to the softmax meanwhile.
            wg::pin(pu);
#pragma unroll
            for(int kk = 0; kk < KP; ++kk)
                asm volatile("" : "+l"(dv[kk]));
            wg_rescale<D>(o, alpha);
#pragma unroll
            for(int kk = 0; kk < KP; ++kk)
#pragma unroll
                for(int e = 0; e < 4; ++e)
                    p[kk][e] = pn[kk][e];
        }
        plan_pv(ntiles - 1);
        wg::pin(o);
        stage_p();
        wg::fence();
        issue_pv();
        wg::commit();
        wg::wait<0>();
        wg::pin(o);
    }

    uint16_t* op = static_cast<uint16_t*>(a.o) + b * a.o_sb + h * a.o_sh;
#pragma unroll
    for(int hf = 0; hf < 2; ++hf)
    {
        float lsum = l[hf];
        lsum += __shfl_xor_sync(0xffffffffu, lsum, 1);
        lsum += __shfl_xor_sync(0xffffffffu, lsum, 2);
        const int row = r0 + hf * 8;
        if(row >= a.sq)
            continue;
        const bool valid = row < len.sq && lsum > 0.0f;
        const float inv = valid ? 1.0f / lsum : 0.0f;
        uint16_t* orow = op + row * a.o_ss;
#pragma unroll
        for(int j = 0; j < D / 8; ++j)
            *reinterpret_cast<uint32_t*>(orow + j * 8 + 2 * t)
                = pack2<T>(o[4 * j + 2 * hf] * inv, o[4 * j + 2 * hf + 1] * inv);
        if(a.stats != nullptr && t == 0)
            a.stats[b * a.st_sb + h * a.st_sh + row * a.st_ss]
                = valid ? (__fmul_rn(m[hf], sl2) + __log2f(lsum)) * 0.69314718055994531f : -INFINITY;
    }
}

template <ElemType T, int D, bool Overlap>
hipError_t set_attrs_wg()
{
    return hipFuncSetAttribute(reinterpret_cast<const void*>(&sdpa_fwd_wg<T, D, Overlap>),
                               hipFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(kWgSmemBytes<D>));
}

template <ElemType T, int D, bool Overlap>
hipError_t launch_wg_typed(const SdpaArgs& a, hipStream_t stream)
{
    const dim3 grid(static_cast<unsigned>((a.sq + kWgBlockM<D> - 1) / kWgBlockM<D>),
                    static_cast<unsigned>(a.hq),
                    static_cast<unsigned>(a.batch));
    hipLaunchKernelGGL((sdpa_fwd_wg<T, D, Overlap>), grid, dim3(kWgThreads<D>), kWgSmemBytes<D>, stream, a);
    return hipGetLastError();
}

// ---------------------------------------------------------------------------------------------
// Warp-specialized Hopper kernel ("ws"): one producer warpgroup streams K and V through
// shared-memory rings guarded by mbarriers; two consumer warpgroups (64 query rows each) run
// the wgmma / softmax loop of sdpa_fwd_wg and take turns issuing their MMAs (ping-pong).
//
// Producer (warpgroup 0, registers lowered to kWsProducerRegs by setmaxnreg): for each tile n it
// waits until the consumers have released the K stage n % KS (mbarrier empty_k), copies K n
// with 16-byte cp.async (zero-filled past the batch's last key), then does the same for V n.
// Its copy groups alternate K0 V0 K1 V1 ...; after issuing one it waits for the group before
// (cp.async.wait_group 1), makes those writes visible to the tensor cores' async proxy
// (fence.proxy.async), and one lane per warp arrives on that group's full barrier (4 arrivals
// complete a phase). The order guarantees progress: K n is announced after V n is issued, which
// waits for V n - VS, released in consumer iteration n - VS + 1 < n.
//
// Consumers (warpgroups 1, 2; registers raised to kWsConsumerRegs): each loads its own Q rows,
// then per tile n waits on full_k[n] and full_v[n - 1], issues S = Q K_n^T and O += P_{n-1} V_{n-1},
// waits for S, releases K n (one lane per warp arrives on empty_k: 8 arrivals), computes the
// softmax while P V runs, waits for P V, releases V n - 1, rescales O. The issue of each
// consumer is bracketed by two named barriers (ids 1, 2; 256 threads): consumer c waits for
// its turn, issues, then hands the turn to the other, so the tensor cores receive the two
// warpgroups' MMAs alternately and one warpgroup's softmax runs under the other's MMAs.
// Both consumers make ntiles + 1 issues; the second skips its last hand-over, so every
// barrier phase that is opened is completed.
//
// Output: each consumer writes its normalised 64 x D tile into its own (no longer read) Q
// rows of shared memory, then stores 16-byte chunks, whole rows per pair of warps.
constexpr int kWsConsumers = 2;
constexpr int kWsThreads = (kWsConsumers + 1) * 128;
constexpr int kWsBlockM = kWsConsumers * 64;
constexpr int kWsBlockN = 128;
constexpr int kWsKStages = 3;
constexpr int kWsVStages = 3;
constexpr int kWsProducerRegs = 40;
constexpr int kWsConsumerRegs = 232;
static_assert(kWsProducerRegs * 128 + kWsConsumerRegs * 128 * kWsConsumers <= 65536, "register file");
template <int D>
constexpr size_t kWsSmemBytes = 1024 + size_t(kWsBlockM) * D * 2 + size_t(kWsKStages + kWsVStages) * kWsBlockN * D * 2
                                + 8 * 2 * (kWsKStages + kWsVStages);
static_assert(kWsSmemBytes<128> <= 227 * 1024, "shared memory");

__device__ __forceinline__ void mbar_init(uint32_t bar, int count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar)
{
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}

__device__ __forceinline__ bool mbar_try_wait(uint32_t bar, uint32_t parity)
{
    uint32_t ok;
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(ok)
                 : "r"(bar), "r"(parity)
                 : "memory");
    return ok != 0;
}

__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity)
{
    while(!mbar_try_wait(bar, parity))
    {
    }
}

__device__ __forceinline__ void named_sync(int id, int threads)
{
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void named_arrive(int id, int threads)
{
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

template <ElemType T, int D, bool LatePack>
__global__ void __launch_bounds__(kWsThreads, 1) sdpa_fwd_ws(const SdpaArgs a)
{
    constexpr int BN = kWsBlockN;
    constexpr int BM = kWsBlockM;
    constexpr int KS = kWsKStages;
    constexpr int VS = kWsVStages;
    constexpr int CH = D / 8;           // 16-byte chunks per row
    constexpr uint32_t KT = BN * D * 2; // bytes per K or V tile
    constexpr int NSR = BN / 2;         // score registers per thread
    constexpr int NOR = D / 2;          // output registers per thread
    constexpr int KP = BN / 16;         // 16-key steps of P V

    extern __shared__ unsigned char smem_raw[];
    const uint32_t raw = smem_addr(smem_raw);
    const uint32_t q_base = (raw + 1023u) & ~1023u;
    const uint32_t k_base = q_base + BM * D * 2;
    const uint32_t v_base = k_base + KS * KT;
    const uint32_t bar_base = v_base + VS * KT;
    const uint32_t full_k = bar_base, empty_k = full_k + 8 * KS;
    const uint32_t full_v = empty_k + 8 * KS, empty_v = full_v + 8 * VS;

    const int tid = static_cast<int>(threadIdx.x);
    const int role = __shfl_sync(0xffffffffu, tid >> 7, 0); // warp-uniform: 0 producer, 1.. consumers
    const int lane = tid & 31;
    const int qblock = static_cast<int>(gridDim.x - 1 - blockIdx.x);
    const int h = static_cast<int>(blockIdx.y);
    const int b = static_cast<int>(blockIdx.z);
    const int hk = h / (a.hq / a.hk);
    const BatchLengths len = batch_lengths(a, b);
    const int q0 = qblock * BM;

    const int last_row = min(q0 + BM, len.sq) - 1;
    int kv_end = last_row < q0 ? 0 : min(len.skv, last_row + len.diag + 1);
    kv_end = max(kv_end, 0);
    const int ntiles = (kv_end + BN - 1) / BN;

    if(tid == 0)
    {
#pragma unroll
        for(int i = 0; i < KS; ++i)
        {
            mbar_init(full_k + 8 * i, 4);
            mbar_init(empty_k + 8 * i, 4 * kWsConsumers);
        }
#pragma unroll
        for(int i = 0; i < VS; ++i)
        {
            mbar_init(full_v + 8 * i, 4);
            mbar_init(empty_v + 8 * i, 4 * kWsConsumers);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if(role == 0)
    {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kWsProducerRegs));
        if(ntiles == 0)
            return;
        const uint16_t* kp = static_cast<const uint16_t*>(a.k) + b * a.k_sb + hk * a.k_sh;
        const uint16_t* vp = static_cast<const uint16_t*>(a.v) + b * a.v_sb + hk * a.v_sh;
        auto copy_tile = [&](uint32_t dst, const uint16_t* src, int64_t ss, int kv0) {
#pragma unroll
            for(int i = tid; i < BN * CH; i += 128)
            {
                const int r = i / CH, c = i % CH;
                const int key = kv0 + r;
                const int src_key = min(key, len.skv - 1);
                cp_async_16(dst + woff<BN>(r, c), src + src_key * ss + c * 8, key < len.skv ? 16 : 0);
            }
            cp_async_commit();
        };
        // The group issued before the latest one has landed: publish it on bar.
        auto publish_previous = [&](uint32_t bar) {
            cp_async_wait<1>();
            fence_proxy_async();
            __syncwarp();
            if(lane == 0)
                mbar_arrive(bar);
        };
        for(int n = 0; n < ntiles; ++n)
        {
            const int ks = n % KS, vs = n % VS;
            if(n >= KS)
                mbar_wait(empty_k + 8 * ks, ((n / KS) - 1) & 1);
            copy_tile(k_base + ks * KT, kp, a.k_ss, n * BN);
            if(n > 0)
                publish_previous(full_v + 8 * ((n - 1) % VS));
            if(n >= VS)
                mbar_wait(empty_v + 8 * vs, ((n / VS) - 1) & 1);
            copy_tile(v_base + vs * KT, vp, a.v_ss, n * BN);
            publish_previous(full_k + 8 * ks);
        }
        cp_async_wait<0>();
        fence_proxy_async();
        __syncwarp();
        if(lane == 0)
            mbar_arrive(full_v + 8 * ((ntiles - 1) % VS));
        return;
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kWsConsumerRegs));
    const int cw = role - 1; // consumer index
    const int wtid = tid & 127;
    const int g = lane >> 2, t = lane & 3;
    const int wg_row0 = q0 + cw * 64;
    const int rw = ((tid >> 5) & 3) * 16 + g; // this thread's rows in the warpgroup: rw and rw + 8
    const int r0 = wg_row0 + rw;
    const int my_turn = 1 + cw, other_turn = 2 - cw;
    const int wg_bar = 3 + cw;

    float o[NOR];
#pragma unroll
    for(int i = 0; i < NOR; ++i)
        o[i] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    const float sl2 = a.scale_log2;

    if(ntiles > 0)
    {
        const uint16_t* qp = static_cast<const uint16_t*>(a.q) + b * a.q_sb + h * a.q_sh;
#pragma unroll
        for(int i = wtid; i < 64 * CH; i += 128)
        {
            const int r = i / CH, c = i % CH;
            const int row = wg_row0 + r;
            const int src_row = max(min(row, len.sq - 1), 0);
            cp_async_16(q_base + woff<BM>(cw * 64 + r, c), qp + src_row * a.q_ss + c * 8, row < len.sq ? 16 : 0);
        }
        cp_async_commit();
        cp_async_wait<0>();
        fence_proxy_async();
        named_sync(wg_bar, 128);

        float s[NSR];
        uint32_t p[KP][4], pu[KP][4];
        float alpha[2];
        uint64_t dq[D / 16], dk[D / 16], dv[KP];
        const uint32_t qt = q_base + cw * 64 * 128;
#pragma unroll
        for(int kk = 0; kk < D / 16; ++kk)
            dq[kk] = wg::desc(qt + (kk >> 2) * BM * 128 + (kk & 3) * 32, 16, 1024);
        auto plan_qk = [&](int n) {
            const uint32_t kt = k_base + (n % KS) * KT;
#pragma unroll
            for(int kk = 0; kk < D / 16; ++kk)
            {
                dk[kk] = wg::desc(kt + (kk >> 2) * BN * 128 + (kk & 3) * 32, 16, 1024);
                asm volatile("" : "+l"(dk[kk]), "+l"(dq[kk]));
            }
        };
        auto issue_qk = [&]() {
#pragma unroll
            for(int kk = 0; kk < D / 16; ++kk)
            {
                if(kk == 0)
                    wg::ss<T, BN, 0>(s, dq[kk], dk[kk]);
                else
                    wg::ss<T, BN, 1>(s, dq[kk], dk[kk]);
            }
        };
        auto stage_p = [&]() {
#pragma unroll
            for(int kk = 0; kk < KP; ++kk)
#pragma unroll
                for(int e = 0; e < 4; ++e)
                    asm volatile("mov.b32 %0, %1;\n" : "=r"(pu[kk][e]) : "r"(p[kk][e]));
        };
        auto plan_pv = [&](int n) {
            const uint32_t vt = v_base + (n % VS) * KT;
#pragma unroll
            for(int kk = 0; kk < KP; ++kk)
            {
                dv[kk] = wg::desc(vt + kk * 16 * 128, BN * 128, 1024);
                asm volatile("" : "+l"(dv[kk]));
            }
        };
        auto issue_pv = [&]() {
#pragma unroll
            for(int kk = 0; kk < KP; ++kk)
                wg::rs<T, D>(o, pu[kk], dv[kk]);
        };
        auto softmax = [&](int n) {
            const int kv0 = n * BN;
            const bool edge = kv0 + BN > len.skv || kv0 + BN - 1 > wg_row0 + len.diag;
            wg_softmax_probs<BN>(s, m, l, alpha, sl2, edge, kv0, r0, t, len);
        };

        if(cw == 1)
            named_arrive(1, 256); // consumer 0 issues first

        mbar_wait(full_k, 0);
        plan_qk(0);
        named_sync(my_turn, 256);
        wg::fence();
        issue_qk();
        wg::commit();
        named_arrive(other_turn, 256);
        wg::wait<0>();
        wg::pin(s);
        if(lane == 0)
            mbar_arrive(empty_k);
        softmax(0);
        wg_pack_p<T, BN>(s, p);

        for(int n = 1; n < ntiles; ++n)
        {
            mbar_wait(full_k + 8 * (n % KS), (n / KS) & 1);
            mbar_wait(full_v + 8 * ((n - 1) % VS), ((n - 1) / VS) & 1);
            plan_qk(n);
            plan_pv(n - 1);
            wg::pin(o);
            stage_p();
            wg::pin(s);
            named_sync(my_turn, 256);
            wg::fence();
            issue_qk();
            wg::commit();
            issue_pv();
            wg::commit();
            named_arrive(other_turn, 256);
            wg::wait<1>(); // S of tile n is ready; P V of tile n - 1 may still run
            wg::pin(s);
            if(lane == 0)
                mbar_arrive(empty_k + 8 * (n % KS));
            softmax(n);
            uint32_t pn[KP][4];
            if constexpr(!LatePack)
                wg_pack_p<T, BN>(s, pn);
            wg::wait<0>();
            wg::pin(o);
            wg::pin(pu);
#pragma unroll
            for(int kk = 0; kk < KP; ++kk)
                asm volatile("" : "+l"(dv[kk]));
            if(lane == 0)
                mbar_arrive(empty_v + 8 * ((n - 1) % VS));
            wg_rescale<D>(o, alpha);
            // LatePack: P is converted only after P V of the previous tile has finished.
            // Converting it while that MMA runs (as sdpa_fwd_wg does) makes ptxas serialize the
            // wgmma pipeline (C7513: the conversions' registers are not kept apart from the
            // in-flight A operand); converting late costs 32 conversions outside the overlap.
            if constexpr(LatePack)
                wg_pack_p<T, BN>(s, p);
            else
            {
#pragma unroll
                for(int kk = 0; kk < KP; ++kk)
#pragma unroll
                    for(int e = 0; e < 4; ++e)
                        p[kk][e] = pn[kk][e];
            }
        }
        mbar_wait(full_v + 8 * ((ntiles - 1) % VS), ((ntiles - 1) / VS) & 1);
        plan_pv(ntiles - 1);
        wg::pin(o);
        stage_p();
        named_sync(my_turn, 256);
        wg::fence();
        issue_pv();
        wg::commit();
        if(cw == 0)
            named_arrive(other_turn, 256);
        wg::wait<0>();
        wg::pin(o);
    }

    // Epilogue: normalise, stage in this warpgroup's Q rows, store whole rows.
    uint16_t* op = static_cast<uint16_t*>(a.o) + b * a.o_sb + h * a.o_sh;
#pragma unroll
    for(int hf = 0; hf < 2; ++hf)
    {
        float lsum = l[hf];
        lsum += __shfl_xor_sync(0xffffffffu, lsum, 1);
        lsum += __shfl_xor_sync(0xffffffffu, lsum, 2);
        const int row = r0 + hf * 8;
        const bool valid = row < len.sq && lsum > 0.0f;
        const float inv = valid ? 1.0f / lsum : 0.0f;
        const int srow = cw * 64 + rw + hf * 8;
#pragma unroll
        for(int j = 0; j < D / 8; ++j)
        {
            const uint32_t v = pack2<T>(o[4 * j + 2 * hf] * inv, o[4 * j + 2 * hf + 1] * inv);
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(q_base + woff<BM>(srow, j) + 4 * t), "r"(v) : "memory");
        }
        if(a.stats != nullptr && t == 0 && row < a.sq)
            a.stats[b * a.st_sb + h * a.st_sh + row * a.st_ss]
                = valid ? (__fmul_rn(m[hf], sl2) + __log2f(lsum)) * 0.69314718055994531f : -INFINITY;
    }
    named_sync(wg_bar, 128);
#pragma unroll
    for(int i = wtid; i < 64 * CH; i += 128)
    {
        const int r = i / CH, c = i % CH;
        const int row = wg_row0 + r;
        if(row < a.sq)
        {
            uint32_t x0, x1, x2, x3;
            asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];\n"
                         : "=r"(x0), "=r"(x1), "=r"(x2), "=r"(x3)
                         : "r"(q_base + woff<BM>(cw * 64 + r, c))
                         : "memory");
            *reinterpret_cast<uint4*>(op + row * a.o_ss + c * 8) = make_uint4(x0, x1, x2, x3);
        }
    }
}

template <ElemType T, int D, bool LatePack>
hipError_t set_attrs_ws()
{
    return hipFuncSetAttribute(reinterpret_cast<const void*>(&sdpa_fwd_ws<T, D, LatePack>),
                               hipFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kWsSmemBytes<D>));
}

template <ElemType T, int D, bool LatePack = true>
hipError_t launch_ws_typed(const SdpaArgs& a, hipStream_t stream)
{
    const dim3 grid(static_cast<unsigned>((a.sq + kWsBlockM - 1) / kWsBlockM), static_cast<unsigned>(a.hq),
                    static_cast<unsigned>(a.batch));
    hipLaunchKernelGGL((sdpa_fwd_ws<T, D, LatePack>), grid, dim3(kWsThreads), kWsSmemBytes<D>, stream, a);
    return hipGetLastError();
}

// Which Hopper kernel engine 202 launches. HIPDNN_HIP_202_KERNEL (read per launch, so a
// benchmark or test can compare them in one process) forces one: "ws" (warp-specialized,
// P converted after the previous P V), "ws_early" (the same converting P while that P V runs),
// "wg" (the wgmma kernel without specialization), "serial" (wg without the softmax / P V
// overlap), "mma" (the earlier mma.sync kernel). Unset (or "auto"): chosen per launch from the
// call's effective shapes (tc_auto_choice), so overridden shapes get the right kernel too.
enum class TcKernel
{
    Auto,
    Ws,
    WsEarlyPack,
    Wgmma,
    WgmmaSerial,
    MmaSync
};

TcKernel tc_kernel_choice()
{
    const char* e = std::getenv("HIPDNN_HIP_202_KERNEL");
    if(e == nullptr)
        return TcKernel::Auto;
    if(std::strcmp(e, "ws") == 0)
        return TcKernel::Ws;
    if(std::strcmp(e, "ws_early") == 0)
        return TcKernel::WsEarlyPack;
    if(std::strcmp(e, "wg") == 0)
        return TcKernel::Wgmma;
    if(std::strcmp(e, "mma") == 0)
        return TcKernel::MmaSync;
    if(std::strcmp(e, "serial") == 0)
        return TcKernel::WgmmaSerial;
    return TcKernel::Auto;
}

// Per-shape choice, from the H200 measurements (bf16, H = 16, B * S = 32768;
// bench/results/gpu_sdpa_ws1.json and gpu_sdpa_ws2_latepack.json, RFC 0006). The choice is made
// per launch from the call's effective shapes, so a plan executed through shape overrides gets
// the choice of its actual shape, with no host synchronisation.
//  * keys <= 1024: warp-specialized, P converted late (no wgmma serialization): 4-10% faster
//    than converting early at S = 512, about even at 1024;
//  * D = 64 without a causal mask: the plain wgmma kernel (3 warpgroups of 64 rows, every warp
//    computing), 1-2% ahead of the warp-specialized one from S = 2048 in both runs;
//  * otherwise warp-specialized, P converted while P V runs: 2-5% faster than late conversion
//    from S = 4096.
// Before the warp-specialized kernel existed, D = 64 with keys <= 1024 went to the mma.sync
// kernel; it is now slower than the warp-specialized one at every measured shape.
TcKernel tc_auto_choice(const SdpaArgs& a)
{
    if(a.skv <= 1024)
        return TcKernel::Ws;
    if(a.d == 64 && !a.mask_tl && !a.mask_br)
        return TcKernel::Wgmma;
    return TcKernel::WsEarlyPack;
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

bool aligned16(const void* p)
{
    return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

} // namespace

bool tensor_core_tier_built()
{
    return true;
}

hipError_t prepare_kernels(Tier tier)
{
    if(tier != Tier::TensorCore)
        return hipSuccess;
    hipError_t e;
    if((e = set_attrs<ElemType::Bf16, 64>()) != hipSuccess)
        return e;
    if((e = set_attrs<ElemType::Bf16, 128>()) != hipSuccess)
        return e;
    if((e = set_attrs<ElemType::Half, 64>()) != hipSuccess)
        return e;
    if((e = set_attrs<ElemType::Half, 128>()) != hipSuccess)
        return e;
    if((e = set_attrs_wg<ElemType::Bf16, 64, true>()) != hipSuccess)
        return e;
    if((e = set_attrs_wg<ElemType::Bf16, 128, true>()) != hipSuccess)
        return e;
    if((e = set_attrs_wg<ElemType::Half, 64, true>()) != hipSuccess)
        return e;
    if((e = set_attrs_wg<ElemType::Half, 128, true>()) != hipSuccess)
        return e;
    if((e = set_attrs_wg<ElemType::Bf16, 64, false>()) != hipSuccess)
        return e;
    if((e = set_attrs_wg<ElemType::Bf16, 128, false>()) != hipSuccess)
        return e;
    if((e = set_attrs_wg<ElemType::Half, 64, false>()) != hipSuccess)
        return e;
    if((e = set_attrs_wg<ElemType::Half, 128, false>()) != hipSuccess)
        return e;
    if((e = set_attrs_ws<ElemType::Bf16, 64, true>()) != hipSuccess)
        return e;
    if((e = set_attrs_ws<ElemType::Bf16, 128, true>()) != hipSuccess)
        return e;
    if((e = set_attrs_ws<ElemType::Half, 64, true>()) != hipSuccess)
        return e;
    if((e = set_attrs_ws<ElemType::Half, 128, true>()) != hipSuccess)
        return e;
    if((e = set_attrs_ws<ElemType::Bf16, 64, false>()) != hipSuccess)
        return e;
    if((e = set_attrs_ws<ElemType::Bf16, 128, false>()) != hipSuccess)
        return e;
    if((e = set_attrs_ws<ElemType::Half, 64, false>()) != hipSuccess)
        return e;
    return set_attrs_ws<ElemType::Half, 128, false>();
}

bool tensor_core_accepts(const SdpaArgs& a, ElemType)
{
    // 16-byte cp.async of K/V rows and 4-byte Q/O accesses: unit head-dim
    // stride, every other stride a multiple of 8 elements, 16-byte aligned bases.
    if(a.q_sd != 1 || a.k_sd != 1 || a.v_sd != 1 || a.o_sd != 1)
        return false;
    const int64_t s[] = {a.q_sb, a.q_sh, a.q_ss, a.k_sb, a.k_sh, a.k_ss, a.v_sb, a.v_sh, a.v_ss, a.o_sb, a.o_sh, a.o_ss};
    for(int64_t x : s)
        if(x % 8 != 0)
            return false;
    return aligned16(a.q) && aligned16(a.k) && aligned16(a.v) && aligned16(a.o);
}

hipError_t launch_sdpa_tensor_core(const SdpaArgs& a, ElemType t, hipStream_t stream)
{
    TcKernel choice = tc_kernel_choice();
    if(choice == TcKernel::Auto)
        choice = tc_auto_choice(a);
    // The wgmma kernels fold the scale into exp2(s * sl2 - m * sl2) with the maximum taken on
    // raw scores, which holds for positive scales only; the mma.sync kernel scales first.
    if(!(a.scale_log2 > 0.0f))
        choice = TcKernel::MmaSync;
    const bool bf = t == ElemType::Bf16;
    switch(choice)
    {
    case TcKernel::Ws:
        if(a.d == 64)
            return bf ? launch_ws_typed<ElemType::Bf16, 64>(a, stream) : launch_ws_typed<ElemType::Half, 64>(a, stream);
        return bf ? launch_ws_typed<ElemType::Bf16, 128>(a, stream) : launch_ws_typed<ElemType::Half, 128>(a, stream);
    case TcKernel::WsEarlyPack:
        if(a.d == 64)
            return bf ? launch_ws_typed<ElemType::Bf16, 64, false>(a, stream)
                      : launch_ws_typed<ElemType::Half, 64, false>(a, stream);
        return bf ? launch_ws_typed<ElemType::Bf16, 128, false>(a, stream)
                  : launch_ws_typed<ElemType::Half, 128, false>(a, stream);
    case TcKernel::Wgmma:
        if(a.d == 64)
            return bf ? launch_wg_typed<ElemType::Bf16, 64, true>(a, stream)
                      : launch_wg_typed<ElemType::Half, 64, true>(a, stream);
        return bf ? launch_wg_typed<ElemType::Bf16, 128, true>(a, stream)
                  : launch_wg_typed<ElemType::Half, 128, true>(a, stream);
    case TcKernel::WgmmaSerial:
        if(a.d == 64)
            return bf ? launch_wg_typed<ElemType::Bf16, 64, false>(a, stream)
                      : launch_wg_typed<ElemType::Half, 64, false>(a, stream);
        return bf ? launch_wg_typed<ElemType::Bf16, 128, false>(a, stream)
                  : launch_wg_typed<ElemType::Half, 128, false>(a, stream);
    default:
        break;
    }
    if(a.d == 64)
        return bf ? launch_tc_typed<ElemType::Bf16, 64>(a, stream) : launch_tc_typed<ElemType::Half, 64>(a, stream);
    return bf ? launch_tc_typed<ElemType::Bf16, 128>(a, stream) : launch_tc_typed<ElemType::Half, 128>(a, stream);
}

#else // not NVIDIA: the tensor-core tier is not built

bool tensor_core_tier_built()
{
    return false;
}

hipError_t prepare_kernels(Tier)
{
    return hipSuccess;
}

bool tensor_core_accepts(const SdpaArgs&, ElemType)
{
    return false;
}

hipError_t launch_sdpa_tensor_core(const SdpaArgs& a, ElemType t, hipStream_t stream)
{
    return launch_sdpa_portable(a, t, stream);
}

#endif

} // namespace hipdnn_hip
