// hipdnn HIP engine, engine 202: the wgmma flash-attention forward kernel (sdpa_fwd_wg), with or
// without the softmax / P V overlap. NVIDIA sm_90a only (inline PTX); a stub elsewhere.
#include "sdpa_device_common.h"
#include "sdpa_tc_families.h"
#if defined(HIPDNN_HIP_ON_NVIDIA)
#include "sdpa_mma_sync.h"
#include "sdpa_wg_softmax.h"
#include "sdpa_wgmma.h"
#endif

namespace hipdnn_hip
{

#if defined(HIPDNN_HIP_ON_NVIDIA)

namespace
{

using namespace mma_sync;

// Hopper kernel "wg" (engine 202 alternate, HIPDNN_HIP_202_KERNEL=wg): warpgroup MMA (wgmma).
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
                = valid ? (hipdnn_fmul_rn(m[hf], sl2) + __log2f(lsum)) * 0.69314718055994531f : -INFINITY;
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

template <bool Overlap>
hipError_t wg_set_attrs_for(ElemType t, int d)
{
    if(t == ElemType::Bf16)
        return d == 64 ? set_attrs_wg<ElemType::Bf16, 64, Overlap>() : set_attrs_wg<ElemType::Bf16, 128, Overlap>();
    return d == 64 ? set_attrs_wg<ElemType::Half, 64, Overlap>() : set_attrs_wg<ElemType::Half, 128, Overlap>();
}

template <bool Overlap>
hipError_t wg_launch_for(const SdpaArgs& a, ElemType t, hipStream_t stream)
{
    const bool bf = t == ElemType::Bf16;
    if(a.d == 64)
        return bf ? launch_wg_typed<ElemType::Bf16, 64, Overlap>(a, stream)
                  : launch_wg_typed<ElemType::Half, 64, Overlap>(a, stream);
    return bf ? launch_wg_typed<ElemType::Bf16, 128, Overlap>(a, stream)
              : launch_wg_typed<ElemType::Half, 128, Overlap>(a, stream);
}

} // namespace

hipError_t wg_set_attrs(ElemType t, int d, bool overlap)
{
    return overlap ? wg_set_attrs_for<true>(t, d) : wg_set_attrs_for<false>(t, d);
}

hipError_t wg_launch(const SdpaArgs& a, ElemType t, bool overlap, hipStream_t stream)
{
    return overlap ? wg_launch_for<true>(a, t, stream) : wg_launch_for<false>(a, t, stream);
}

#endif // HIPDNN_HIP_ON_NVIDIA

} // namespace hipdnn_hip
