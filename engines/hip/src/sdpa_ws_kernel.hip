// hipdnn HIP engine, engine 202: the warp-specialized wgmma flash-attention forward kernel
// (sdpa_fwd_ws), P converted late or early. NVIDIA sm_90a only (inline PTX); a stub elsewhere.
#include "sdpa_device_common.h"
#include "sdpa_tc_families.h"
#if defined(HIPDNN_HIP_ON_NVIDIA)
#include "sdpa_async.h"
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
using namespace async;

// Warp-specialized Hopper kernel ("ws"): one producer warpgroup streams K and V through
// shared-memory rings guarded by mbarriers; two consumer warpgroups (64 query rows each) run
// the wgmma / softmax loop of sdpa_fwd_wg and take turns issuing their MMAs (ping-pong).
//
// Producer (warpgroup 0, registers lowered to kWsProducerRegs by setmaxnreg), two builds:
//  * Tma (the default): one thread. For each tile n it waits until the consumers have released
//    the K stage n % KS (mbarrier empty_k), announces the stage's byte count on full_k
//    (arrive.expect_tx) and has the copy engine bring K n as D / 64 boxes of 64 columns x BN
//    rows (tensor maps built per launch by the host; rows past the tensor's keys arrive as
//    zeros), then the same for V n. The copies complete on the full barrier by byte count.
//    ncu on the cp.async build (D = 128, S = 4096) showed why: its four producer warps issued
//    more instructions than the eight consumer warps (address arithmetic for 32 16-byte copies
//    per thread per tile), and the consumers spent 28% of their time waiting for K.
//    The copy engine does not know a batch's padded length: V rows past it but inside the
//    tensor hold whatever the caller left there, and P = 0 times a NaN is NaN. So a consumer
//    zeroes those rows of the one tile that crosses the length before its P V (both consumers
//    write the same zeros; each fences and syncs its own warpgroup before its MMA reads them).
//    K rows there need nothing: their scores are replaced by -inf.
//  * cp.async (when the driver cannot describe the tensors): all 128 threads copy K n with
//    16-byte cp.async (zero-filled past the batch's last key), then V n; copy groups alternate
//    K0 V0 K1 V1 ...; after issuing one a thread waits for the group before
//    (cp.async.wait_group 1), makes those writes visible to the tensor cores' async proxy
//    (fence.proxy.async), and one lane per warp arrives on that group's full barrier (4 arrivals
//    complete a phase).
// Either way the order guarantees progress: K n is announced after V n is issued, which waits for
// V n - VS, released in consumer iteration n - VS + 1 < n.
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

// The copy engine's view of K and V for one launch (unused by the cp.async build).
struct WsMaps
{
    CUtensorMap k;
    CUtensorMap v;
};

template <ElemType T, int D, bool LatePack, bool Tma>
__global__ void __launch_bounds__(kWsThreads, 1) sdpa_fwd_ws(const SdpaArgs a, const __grid_constant__ WsMaps maps)
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
            mbar_init(full_k + 8 * i, Tma ? 1 : 4);
            mbar_init(empty_k + 8 * i, 4 * kWsConsumers);
        }
#pragma unroll
        for(int i = 0; i < VS; ++i)
        {
            mbar_init(full_v + 8 * i, Tma ? 1 : 4);
            mbar_init(empty_v + 8 * i, 4 * kWsConsumers);
        }
        mbar_init_fence();
    }
    __syncthreads();

    if(role == 0)
    {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kWsProducerRegs));
        if(ntiles == 0)
            return;
        if constexpr(Tma)
        {
            if(tid != 0)
                return;
            for(int n = 0; n < ntiles; ++n)
            {
                const int ks = n % KS, vs = n % VS;
                if(n >= KS)
                    mbar_wait(empty_k + 8 * ks, ((n / KS) - 1) & 1);
                mbar_arrive_expect_tx(full_k + 8 * ks, KT);
#pragma unroll
                for(int blk = 0; blk < D / 64; ++blk)
                    tma_load_4d(k_base + ks * KT + blk * BN * 128, &maps.k, full_k + 8 * ks, blk * 64, n * BN, hk, b);
                if(n >= VS)
                    mbar_wait(empty_v + 8 * vs, ((n / VS) - 1) & 1);
                mbar_arrive_expect_tx(full_v + 8 * vs, KT);
#pragma unroll
                for(int blk = 0; blk < D / 64; ++blk)
                    tma_load_4d(v_base + vs * KT + blk * BN * 128, &maps.v, full_v + 8 * vs, blk * 64, n * BN, hk, b);
            }
            return;
        }
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

        // V tile nv crossing a padded batch's key length: zero its rows from the length on
        // (copy-engine build only; cp.async zero-fills them itself).
        auto zero_v_tail = [&](int nv) {
            if constexpr(Tma)
            {
                const int valid = len.skv - nv * BN;
                if(a.padding && valid < BN && len.skv < a.skv)
                {
                    const uint32_t vt = v_base + (nv % VS) * KT;
                    for(int i = wtid; i < BN * CH; i += 128)
                    {
                        const int r = i / CH, c = i % CH;
                        if(r >= valid)
                            asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};\n" ::"r"(vt + woff<BN>(r, c)), "r"(0)
                                         : "memory");
                    }
                    fence_proxy_async();
                    named_sync(wg_bar, 128);
                }
            }
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
            zero_v_tail(n - 1);
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
        zero_v_tail(ntiles - 1);
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
    hipError_t e = hipFuncSetAttribute(reinterpret_cast<const void*>(&sdpa_fwd_ws<T, D, LatePack, true>),
                                       hipFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kWsSmemBytes<D>));
    if(e != hipSuccess)
        return e;
    return hipFuncSetAttribute(reinterpret_cast<const void*>(&sdpa_fwd_ws<T, D, LatePack, false>),
                               hipFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kWsSmemBytes<D>));
}

template <ElemType T, int D, bool LatePack>
hipError_t launch_ws_typed(const SdpaArgs& a, bool copy_engine, hipStream_t stream)
{
    const dim3 grid(static_cast<unsigned>((a.sq + kWsBlockM - 1) / kWsBlockM), static_cast<unsigned>(a.hq),
                    static_cast<unsigned>(a.batch));
    WsMaps maps{};
    const bool tma = copy_engine
                     && tma_tile_map(maps.k, a.k, D, a.skv, a.hk, a.batch, a.k_ss, a.k_sh, a.k_sb, kWsBlockN)
                     && tma_tile_map(maps.v, a.v, D, a.skv, a.hk, a.batch, a.v_ss, a.v_sh, a.v_sb, kWsBlockN);
    if(tma)
        hipLaunchKernelGGL((sdpa_fwd_ws<T, D, LatePack, true>), grid, dim3(kWsThreads), kWsSmemBytes<D>, stream, a,
                           maps);
    else
        hipLaunchKernelGGL((sdpa_fwd_ws<T, D, LatePack, false>), grid, dim3(kWsThreads), kWsSmemBytes<D>, stream, a,
                           maps);
    return hipGetLastError();
}

template <bool LatePack>
hipError_t ws_set_attrs_for(ElemType t, int d)
{
    if(t == ElemType::Bf16)
        return d == 64 ? set_attrs_ws<ElemType::Bf16, 64, LatePack>() : set_attrs_ws<ElemType::Bf16, 128, LatePack>();
    return d == 64 ? set_attrs_ws<ElemType::Half, 64, LatePack>() : set_attrs_ws<ElemType::Half, 128, LatePack>();
}

template <bool LatePack>
hipError_t ws_launch_for(const SdpaArgs& a, ElemType t, bool copy_engine, hipStream_t stream)
{
    const bool bf = t == ElemType::Bf16;
    if(a.d == 64)
        return bf ? launch_ws_typed<ElemType::Bf16, 64, LatePack>(a, copy_engine, stream)
                  : launch_ws_typed<ElemType::Half, 64, LatePack>(a, copy_engine, stream);
    return bf ? launch_ws_typed<ElemType::Bf16, 128, LatePack>(a, copy_engine, stream)
              : launch_ws_typed<ElemType::Half, 128, LatePack>(a, copy_engine, stream);
}

} // namespace

hipError_t ws_set_attrs(ElemType t, int d, bool late_pack)
{
    return late_pack ? ws_set_attrs_for<true>(t, d) : ws_set_attrs_for<false>(t, d);
}

hipError_t ws_launch(const SdpaArgs& a, ElemType t, bool late_pack, bool copy_engine, hipStream_t stream)
{
    return late_pack ? ws_launch_for<true>(a, t, copy_engine, stream)
                     : ws_launch_for<false>(a, t, copy_engine, stream);
}

#endif // HIPDNN_HIP_ON_NVIDIA

} // namespace hipdnn_hip
