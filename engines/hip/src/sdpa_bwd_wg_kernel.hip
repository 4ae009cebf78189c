// hipdnn HIP engine, engine 202: the SDPA backward kernel on Hopper warpgroup MMA (wgmma), for one
// slice of (batch, kv head) pairs (see sdpa_bwd.hip for the pre-pass before it and the dQ
// conversion after it). NVIDIA sm_90a only (inline PTX); a stub elsewhere.
//
// A block holds 128 keys of one pair -- K and V stay in shared memory for the whole block -- and
// two warpgroups, each owning 64 of those keys. It walks every query tile (64 rows) of every query
// head of the pair's GQA group that can see its keys (causal masks start the walk at the diagonal),
// so dK and dV of its keys are complete in registers at the end, summed over the group, and are
// written once: no atomics and no second pass for them. Per query tile, per warpgroup:
//   S^T = K Q^T, dP^T = V dO^T            (wgmma, both operands in shared memory, K-major)
//   P^T = exp2(S^T * scale * log2e - lse2) (lse2 per column, from the pre-pass; masked on edges)
//   dS^T = P^T * (dP^T - delta)
//   dV += P^T dO, dK += dS^T Q             (A from registers, B = the dO / Q tile read MN-major)
//   dQ += dS K                             (dS^T stored to shared memory and read MN-major as A;
//                                           K read MN-major as B), added to the fp32 sums.
// dQ of a tile always sums over all 128 keys (one reduction per tile and key block): at D = 128
// each warpgroup computes half the head dim (64 accumulator registers would not fit beside dK and
// dV); at D = 64 the tiles are 128 rows (twice the work per wait) and each warpgroup computes 64
// of them. Tiles in shared memory use the 128-byte swizzle wgmma reads (sdpa_wgmma.h).
//
// The two warpgroups never meet at a block barrier inside the walk, so one's softmax and dS^T can
// run while the other's products do. mbarriers carry what they share:
//   - three stages of Q, dO, lse2 and delta, filled by the copy engine (TMA for Q and dO, bulk copies
//     for lse2 and delta): thread 0 issues tile n + 2 into the stage of tile n - 1 once both
//     warpgroups have released that stage, and the copies complete the stage's "full" barrier by
//     byte count; the tile's consumers wait on it. (Before, every thread copied its part with
//     cp.async: 2-3% of the stall samples, and the address arithmetic on top.) K and V come the
//     same way, once. The copy engine reads rows past a padded batch's length as they are in
//     memory, so the consumers zero them (K, V once; Q, dO in the tile that crosses the length);
//     rows past the tensor read as zeros;
//   - two dS^T buffers: a warpgroup stores its half of tile n's dS^T and arrives on "full"; it
//     computes the dQ share of tile n - 1 (which needs the other half) during tile n, by when the
//     other warpgroup has normally stored it long ago, and releases the buffer on "empty".
// A warpgroup's dQ share (64 x 64 fp32) goes to the sums through shared memory: its threads store
// the accumulator fragment in register order (conflict-free), and the warpgroup's first thread
// hands it to the copy engine as one bulk reduction (cp.reduce.async.bulk .add.f32), so the sums
// keep that order (bwd_dq_offset) and the conversion after the kernel puts rows back. At D = 128
// each warpgroup stages in a buffer of its own; at D = 64 (no room for one) in its half of the dS^T
// buffer its dQ product just read, which only it reads, and its first thread releases that buffer
// only once the reduction has read it. (Per-element atomics from every thread, before: the
// consumers spent about a fifth of their time issuing them and waiting for their operands.)
// Measured against the same kernel with two block barriers per tile: +3-5% at D = 128, -2..+1% at
// D = 64 (bench/results/gpu_sdpa_backward.json; RFC 0006 lists the variants tried).
#include "sdpa_bwd_internal.h"
#include "sdpa_bwd_plan.h"
#include "sdpa_device_common.h"
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

constexpr int kBwdKeys = 128;   // keys per block, 64 per warpgroup
constexpr int kBwdThreads = 256;
template <int D>
constexpr uint32_t kKvBytes = kBwdKeys * D * 2;
template <int D, int BM>
constexpr uint32_t kTileBytes = BM * D * 2;
template <int BM>
constexpr uint32_t kDsBytes = kBwdKeys * BM * 2;
template <int BM>
constexpr uint32_t kStatBytes = 2 * BM * 4; // lse2 and delta of one tile
constexpr uint32_t kDqShareBytes = 64 * 64 * 4; // one warpgroup's dQ share of a tile, fp32
// dQ staged in the warpgroup's half of a dS^T buffer (BM = 128: the half is exactly one share) or
// in buffers of its own.
template <int BM>
constexpr bool kDqInDs = BM == 128;
template <int BM>
constexpr uint32_t kDqBytes = kDqInDs<BM> ? 0 : 2 * kDqShareBytes;
constexpr int kStages = 3; // Q / dO / lse2 / delta tiles: one computing, two loading
constexpr int kMbars = 2 * kStages + 5; // full and empty per stage; dS^T full and empty per buffer; K / V
template <int D, int BM>
constexpr size_t kBwdSmem
    = 2 * kKvBytes<D> + 2 * kStages * kTileBytes<D, BM> + 2 * kDsBytes<BM> + kDqBytes<BM> + kStages * kStatBytes<BM>
      + 8 * kMbars + 1024;
static_assert(kBwdSmem<128, 64> <= 227 * 1024 && kBwdSmem<64, 128> <= 227 * 1024, "shared memory of one block");

// The copy engine's view of Q, dO, K and V for one launch: boxes of 64 columns by a tile's rows.
struct BwdMaps
{
    CUtensorMap q;
    CUtensorMap dout;
    CUtensorMap k;
    CUtensorMap v;
};

// BM: query rows per tile: 128 at D = 64, 64 at D = 128 (registers). At D = 64, 64-row tiles
// ran 0.84-0.89x PyTorch flash where 128-row ones run 1.18x (H200, RFC 0006):
// the per-tile barriers and waits cost the same, the tensor-core work per tile doubles.
// Ext: 1, built for calls with a left bound (window), a bias or ALiBi (sdpa_needs_ext); 2, for calls
// with a softcap too: each score's 1 - tanh^2 is folded into dP^T - delta as P^T is made, so dP^T is
// awaited before the probabilities at every tile shape; 0, the kernel without them is the same code as
// before (every Ext branch is compile-time).
// Pad: k's or v's head dim is below D (the maps read zeros past it; the epilogue stores only its
// columns). A separate build, so that the unpadded kernel carries no column test (the tests cost
// the D = 128 kernel spills).
template <ElemType T, int D, int BM, int Ext, bool Pad>
__global__ void __launch_bounds__(kBwdThreads, 1) sdpa_bwd_wg(const BwdSlice sl, const __grid_constant__ BwdMaps maps)
{
    static_assert((D == 64 && BM == 128) || (D == 128 && BM == 64), "tile shapes with room in the register file");
    constexpr int BK = kBwdKeys;
    constexpr int CH = D / 8; // 16-byte chunks per row
    constexpr int NT = kBwdThreads;
    constexpr int KS = D / 16;  // 16-wide steps over the head dim
    constexpr int QS = BM / 16; // 16-wide steps over a query tile
    constexpr int NJ = BM / 8;  // 8-column groups of an S^T accumulator
    constexpr uint32_t TB = kTileBytes<D, BM>;
    constexpr uint32_t SB = kStatBytes<BM>;
    constexpr int ND = D / 2;   // dK / dV accumulator registers per thread

    const SdpaBwdArgs& A = sl.a;
    const SdpaArgs& f = A.f;

    extern __shared__ unsigned char smem_raw[];
    const uint32_t raw = smem_addr(smem_raw);
    const uint32_t k_base = (raw + 1023u) & ~1023u;
    const uint32_t v_base = k_base + kKvBytes<D>;
    const uint32_t q_base = v_base + kKvBytes<D>;
    const uint32_t do_base = q_base + kStages * TB;
    const uint32_t ds_base = do_base + kStages * TB;          // 2 buffers
    const uint32_t dq_base = ds_base + 2 * kDsBytes<BM>;     // per warpgroup, when not in the dS^T buffer
    const uint32_t st_base = dq_base + kDqBytes<BM>;         // stages of [lse2 BM][delta BM]
    const uint32_t mb_full = st_base + kStages * SB;         // per stage: its tile landed
    const uint32_t mb_empty = mb_full + 8 * kStages;         // per stage: both warpgroups done with it
    const uint32_t mb_ds_full = mb_empty + 8 * kStages;      // per dS^T buffer: both warpgroups stored
    const uint32_t mb_ds_empty = mb_ds_full + 16;            // per dS^T buffer: both warpgroups' dQ read it
    const uint32_t mb_kv = mb_ds_empty + 16;                 // K and V landed
    const float* st_ptr = reinterpret_cast<const float*>(smem_raw + (st_base - raw));

    const int tid = static_cast<int>(threadIdx.x);
    const int wgi = __shfl_sync(0xffffffffu, tid >> 7, 0); // warp-uniform
    const int w = (tid >> 5) & 3;
    const int lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const bool wg_leader = (tid & 127) == 0; // issues the warpgroup's dQ reductions

    const int group = f.hq / f.hk;
    const int z = static_cast<int>(blockIdx.y);
    const int64_t pair = sl.p0 + z;
    const int b = static_cast<int>(pair / f.hk);
    const int hk = static_cast<int>(pair % f.hk);
    const BatchLengths len = batch_lengths(f, b);
    const int k0 = static_cast<int>(blockIdx.x) * BK;
    const int kw = k0 + wgi * 64; // this warpgroup's first key
    const int64_t rows_per_head = bwd_rows_per_head(f.sq);

    // Query tiles that can see a key of the block: from the diagonal (causal) to the last row.
    const int q_first = max(0, k0 - len.diag);
    const int qt0 = q_first / BM * BM;
    // Window: row i sees key j only if i <= j - lo, so no row past the block's last key - lo sees it
    // (query tiles wholly past that are skipped).
    const int q_end = Ext != 0 ? min(len.sq, k0 + BK - len.lo) : len.sq;
    const int ntq = (k0 < len.skv && q_first < q_end) ? (q_end - qt0 + BM - 1) / BM : 0;
    const int nsteps = ntq * group;

    // Tile n's Q, dO, lse2 and delta into its stage (thread 0).
    auto issue_tile = [&](int n) {
        const int hh = n / ntq;
        const int qt = qt0 + (n % ntq) * BM;
        const int h = hk * group + hh;
        const uint32_t stage = n % kStages;
        const uint32_t full = mb_full + 8 * stage;
        mbar_arrive_expect_tx(full, 2 * TB + SB);
#pragma unroll
        for(int blk = 0; blk < D / 64; ++blk)
        {
            tma_load_4d(q_base + stage * TB + blk * BM * 128, &maps.q, full, blk * 64, qt, h, b);
            tma_load_4d(do_base + stage * TB + blk * BM * 128, &maps.dout, full, blk * 64, qt, h, b);
        }
        // Each head's rows are whole tiles in the workspace (bwd_rows_per_head), 16-byte aligned.
        const int64_t w0 = (static_cast<int64_t>(z) * group + hh) * rows_per_head + qt;
        bulk_load(st_base + stage * SB, sl.lse2 + w0, BM * 4, full);
        bulk_load(st_base + stage * SB + BM * 4, sl.delta + w0, BM * 4, full);
    };
    // Zeroes rows [from, ROWS) of a swizzled ROWS-row tile at base, with `threads` threads from index i0.
    auto zero_rows = [&](uint32_t base, int from, int i0, int threads, auto rows_tag) {
        constexpr int ROWS = decltype(rows_tag)::value;
        for(int i = i0 + from * CH; i < ROWS * CH; i += threads)
            asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};\n" ::"r"(base + woff<ROWS>(i / CH, i % CH)), "r"(0)
                         : "memory");
    };

    float dk[ND], dv[ND];
#pragma unroll
    for(int i = 0; i < ND; ++i)
        dk[i] = dv[i] = 0.0f;

    if(tid == 0)
    {
        for(int i = 0; i < kStages; ++i)
            mbar_init(mb_full + 8 * i, 1); // thread 0's arrival with the byte count
        for(int i = kStages; i < kMbars - 1; ++i)
            mbar_init(mb_full + 8 * i, NT);
        mbar_init(mb_kv, 1);
        mbar_init_fence();
    }
    __syncthreads();
    if(nsteps > 0)
    {
        if(tid == 0)
        {
            tma_prefetch_map(&maps.q);
            tma_prefetch_map(&maps.dout);
            mbar_arrive_expect_tx(mb_kv, 2 * kKvBytes<D>);
#pragma unroll
            for(int blk = 0; blk < D / 64; ++blk)
            {
                tma_load_4d(k_base + blk * BK * 128, &maps.k, mb_kv, blk * 64, k0, hk, b);
                tma_load_4d(v_base + blk * BK * 128, &maps.v, mb_kv, blk * 64, k0, hk, b);
            }
            issue_tile(0);
            if(nsteps > 1)
                issue_tile(1);
        }
        mbar_wait(mb_kv, 0);
        if(k0 + BK > len.skv && len.skv < f.skv)
        {
            // Keys from the batch's length to the tensor's hold padding, not zeros.
            zero_rows(k_base, len.skv - k0, tid, NT, std::integral_constant<int, BK>{});
            zero_rows(v_base, len.skv - k0, tid, NT, std::integral_constant<int, BK>{});
            fence_proxy_async();
            __syncthreads();
        }
    }
    const float sl2 = f.scale_log2;
    const int key_row0 = kw + 16 * w + g; // this thread's keys: key_row0 and key_row0 + 8
    // Shared-memory descriptors of the fixed operands (the address field is added to per step).
    const uint64_t k_desc = wg::desc(k_base + wgi * 64 * 128, 16, 1024);
    const uint64_t v_desc = wg::desc(v_base + wgi * 64 * 128, 16, 1024);

    auto issue_dq = [&](int m, float (&acc)[32]) {
        const uint32_t dsb = ds_base + (m & 1) * kDsBytes<BM>;
        const uint32_t ds_a0 = BM == 128 ? dsb + wgi * BK * 128 : dsb;
        const uint32_t k_b0 = D == 128 ? k_base + wgi * BK * 128 : k_base;
        wg::fence();
#pragma unroll
        for(int kk = 0; kk < BK / 16; ++kk)
        {
            const uint64_t da = wg::desc(ds_a0 + kk * 16 * 128, BK * 128, 1024);
            const uint64_t db = wg::desc(k_b0 + kk * 16 * 128, BK * 128, 1024);
            if(kk == 0)
                wg::ss<T, 64, 0, 1, 1>(acc, da, db);
            else
                wg::ss<T, 64, 1, 1, 1>(acc, da, db);
        }
    };
    // This warpgroup's dQ share of tile m into the fp32 sums (see the top of the file). Named
    // barrier 1 + wgi spans the warpgroup.
    auto flush_dq = [&](int m, const float (&acc)[32]) {
        const int hh = m / ntq;
        const int qt = qt0 + (m % ntq) * BM;
        const uint32_t stage = kDqInDs<BM> ? ds_base + (m & 1) * kDsBytes<BM> + wgi * kDqShareBytes
                                           : dq_base + wgi * kDqShareBytes;
        if(!kDqInDs<BM>)
        {
            if(wg_leader)
                bulk_wait_read<0>(); // the previous tile's reduction has read the buffer
            named_sync(1 + wgi, 128);
        }
        float4* sp = reinterpret_cast<float4*>(smem_raw + (stage - raw)) + (tid & 127);
#pragma unroll
        for(int j = 0; j < 8; ++j)
            sp[j * 128] = make_float4(acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]);
        fence_proxy_async();
        named_sync(1 + wgi, 128);
        if(wg_leader)
        {
            float* dst = sl.dq_accum + ((static_cast<int64_t>(z) * group + hh) * rows_per_head + qt) * D
                         + wgi * (kDqShareBytes / 4);
            bulk_reduce_add_f32(dst, stage, kDqShareBytes);
            bulk_commit();
        }
    };

    // Ext with a bias: the bias of tile m (its head's rows of the tile, this warpgroup's 64 keys) asked
    // of the L2 two tiles ahead, so that the reads in the probabilities wait for the L2, not memory.
    // At D = 64 only: at D = 128 it made the Ext build spill 248 bytes (ptxas).
    auto prefetch_bias = [&](int m) {
        if constexpr(Ext != 0 && D == 64)
        {
            if(f.bias == nullptr || m >= nsteps)
                return;
            const unsigned char* bh = bias_head(f, b, hk * group + m / ntq);
            const int qm = qt0 + (m % ntq) * BM;
            const int esz = f.bias_type == 2 ? 4 : 2;
            const int lines = 64 * esz / 128; // per row
            for(int i = tid & 127; i < BM * lines; i += 128)
            {
                const int row = qm + i / lines, col = kw + (i % lines) * (128 / esz);
                if(row < f.sq && col < f.skv)
                    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(bh + (static_cast<int64_t>(row) * f.bias_ss + col) * esz));
            }
        }
    };
    prefetch_bias(0);
    prefetch_bias(1);
    for(int n = 0; n < nsteps; ++n)
    {
        prefetch_bias(n + 2);
        mbar_wait(mb_full + 8 * (n % kStages), (n / kStages) & 1); // tile n landed

        const int qt = qt0 + (n % ntq) * BM;
        const uint32_t qs = q_base + (n % kStages) * TB;
        const uint32_t dos = do_base + (n % kStages) * TB;
        if(qt + BM > len.sq && len.sq < f.sq)
        {
            // Rows from the batch's length on hold padding: zeros instead (both warpgroups write the
            // same zeros; each fences and syncs its own before its products read them).
            zero_rows(qs, len.sq - qt, tid & 127, 128, std::integral_constant<int, BM>{});
            zero_rows(dos, len.sq - qt, tid & 127, 128, std::integral_constant<int, BM>{});
            fence_proxy_async();
            named_sync(1 + wgi, 128);
        }
        const float* lse_s = st_ptr + (n % kStages) * (SB / 4);
        const float* del_s = lse_s + BM;

        // S^T and dP^T (64 keys x BM rows per warpgroup).
        float s[BM / 2], dp[BM / 2];
        const uint64_t q_desc = wg::desc(qs, 16, 1024);
        const uint64_t do_desc = wg::desc(dos, 16, 1024);
        wg::fence();
#pragma unroll
        for(int kk = 0; kk < KS; ++kk)
        {
            const uint64_t ka = k_desc + (((kk >> 2) * BK * 128 + (kk & 3) * 32) >> 4);
            const uint64_t qb = q_desc + (((kk >> 2) * BM * 128 + (kk & 3) * 32) >> 4);
            if(kk == 0)
                wg::ss<T, BM, 0>(s, ka, qb);
            else
                wg::ss<T, BM, 1>(s, ka, qb);
        }
        wg::commit();
#pragma unroll
        for(int kk = 0; kk < KS; ++kk)
        {
            const uint64_t va = v_desc + (((kk >> 2) * BK * 128 + (kk & 3) * 32) >> 4);
            const uint64_t ob = do_desc + (((kk >> 2) * BM * 128 + (kk & 3) * 32) >> 4);
            if(kk == 0)
                wg::ss<T, BM, 0>(dp, va, ob);
            else
                wg::ss<T, BM, 1>(dp, va, ob);
        }
        wg::commit();
        // At D = 64 (BM = 128) both products are awaited together, so that P and dS^T are packed as
        // they are made (S^T, P^T, dP^T and the packed P^T all live at once would spill there).
        // (Ext 2: dP^T is needed while the probabilities are made, at both tile shapes.)
        if constexpr(BM == 128 || Ext == 2)
        {
            wg::wait<0>();
            wg::pin(dp);
        }
        else
            wg::wait<1>();
        wg::pin(s);

        // P^T, masked only where the tile crosses the diagonal or a length (Ext: or a window's start).
        bool edge = kw + 63 >= len.skv || kw + 63 > qt + len.diag || qt + BM > len.sq;
        if constexpr(Ext != 0)
            edge = edge || qt + BM - 1 + len.lo > kw;
        // BT: -1 no bias; 0 bf16, 1 fp16, 2 fp32 (D = 128: the loop once per bias type, a uniform
        // branch around it; the type tested per element spilled 352 bytes there); 3 the type and
        // presence tested per element (D = 64: four builds of the loop spilled 656 bytes, this none).
        // ALiBi (Ext): the slope of this tile's query head, in log2 units (0: off).
        const float alibi2 = Ext != 0 && f.alibi ? alibi_slope(hk * group + n / ntq, f.hq) * 1.4426950408889634f : 0.0f;
        // key - row of this thread's first element; each element's offset from it is a constant.
        const float dist0 = static_cast<float>(key_row0 - qt - 2 * t);
        // Softcapping (Ext 2, c > 0): t = tanh(scale s / c), the capped score c t in log2 units.
        const float cap_in = Ext == 2 ? A.scale / f.softcap : 0.0f;
        const float cap2 = Ext == 2 ? f.softcap * 1.4426950408889634f : 0.0f;
        auto probs = [&](auto bias_tag) {
            constexpr int BT = decltype(bias_tag)::value;
            const unsigned char* bias_h = nullptr;
            int k_off[2] = {0, 0};
            if constexpr(BT >= 0)
            {
                if(f.bias != nullptr)
                    bias_h = bias_head(f, b, hk * group + (n / ntq));
#pragma unroll
                for(int h2 = 0; h2 < 2; ++h2)
                    k_off[h2] = min(key_row0 + 8 * h2, f.skv - 1);
            }
#pragma unroll
            for(int j = 0; j < NJ; ++j)
#pragma unroll
                for(int e = 0; e < 4; ++e)
                {
                    const int c = 8 * j + 2 * t + (e & 1);
                    float x;
                    if constexpr(Ext == 2)
                    {
                        // dP^T - delta times d(c t) / d(scale s) = 1 - t^2, in place: dS^T is then P^T dP^T.
                        const float th = softcap_tanh(s[4 * j + e] * cap_in);
                        dp[4 * j + e] = (dp[4 * j + e] - del_s[c]) * (1.0f - th * th);
                        x = fmaf(th, cap2, -lse_s[c]);
                    }
                    else
                        x = s[4 * j + e] * sl2 - lse_s[c];
                    if constexpr(Ext != 0)
                        if(alibi2 != 0.0f) // (uniform)
                            x = fmaf(alibi2, dist0 + static_cast<float>(8 * (e >> 1) - 8 * j - (e & 1)), x);
                    if constexpr(BT == 3) // (clamped: rows past sq and keys past skv are masked below)
                    {
                        if(bias_h != nullptr)
                            x = fmaf(bias_at(bias_h, f.bias_type, f.bias_ss, min(qt + c, f.sq - 1), k_off[e >> 1]),
                                     1.4426950408889634f, x);
                    }
                    else if constexpr(BT >= 0)
                    {
                        const int64_t i = min(qt + c, f.sq - 1) * f.bias_ss + k_off[e >> 1];
                        float bv;
                        if constexpr(BT == 2)
                            bv = bias_limited(reinterpret_cast<const float*>(bias_h)[i]);
                        else if constexpr(BT == 0)
                            bv = bias_limited(load_as_float<ElemType::Bf16>(reinterpret_cast<const uint16_t*>(bias_h) + i));
                        else
                            bv = load_as_float<ElemType::Half>(reinterpret_cast<const uint16_t*>(bias_h) + i);
                        x = fmaf(bv, 1.4426950408889634f, x);
                    }
                    float p = fast_exp2(x);
                    if(edge)
                    {
                        const int key = key_row0 + 8 * (e >> 1);
                        const int row = qt + c;
                        if(key >= len.skv || key > row + len.diag || row >= len.sq)
                            p = 0.0f;
                        if constexpr(Ext != 0)
                            if(key < row + len.lo)
                                p = 0.0f;
                    }
                    s[4 * j + e] = p;
                }
        };
        if constexpr(Ext != 0 && D == 64)
            probs(std::integral_constant<int, 3>{});
        else if constexpr(Ext != 0)
        {
            if(f.bias == nullptr)
                probs(std::integral_constant<int, -1>{});
            else if(f.bias_type == 0)
                probs(std::integral_constant<int, 0>{});
            else if(f.bias_type == 1)
                probs(std::integral_constant<int, 1>{});
            else
                probs(std::integral_constant<int, 2>{});
        }
        else
            probs(std::integral_constant<int, -1>{});
        uint32_t pa[QS][4];
#pragma unroll
        for(int kk = 0; kk < QS; ++kk)
        {
            pa[kk][0] = pack2<T>(s[8 * kk + 0], s[8 * kk + 1]);
            pa[kk][1] = pack2<T>(s[8 * kk + 2], s[8 * kk + 3]);
            pa[kk][2] = pack2<T>(s[8 * kk + 4], s[8 * kk + 5]);
            pa[kk][3] = pack2<T>(s[8 * kk + 6], s[8 * kk + 7]);
        }
        if constexpr(BM != 128 && Ext != 2)
        {
            wg::wait<0>();
            wg::pin(dp);
        }

        // dS^T = P^T (dP^T - delta): to registers (A of dK) and to shared memory (A of dQ).
        uint32_t dsa[QS][4];
#pragma unroll
        for(int j = 0; j < NJ; ++j)
#pragma unroll
            for(int e = 0; e < 4; ++e)
                if constexpr(Ext == 2) // (dP^T - delta) (1 - t^2), made with P^T
                    dp[4 * j + e] = s[4 * j + e] * dp[4 * j + e];
                else
                    dp[4 * j + e] = s[4 * j + e] * (dp[4 * j + e] - del_s[8 * j + 2 * t + (e & 1)]);
#pragma unroll
        for(int kk = 0; kk < QS; ++kk)
        {
            dsa[kk][0] = pack2<T>(dp[8 * kk + 0], dp[8 * kk + 1]);
            dsa[kk][1] = pack2<T>(dp[8 * kk + 2], dp[8 * kk + 3]);
            dsa[kk][2] = pack2<T>(dp[8 * kk + 4], dp[8 * kk + 5]);
            dsa[kk][3] = pack2<T>(dp[8 * kk + 6], dp[8 * kk + 7]);
        }
        if(n >= 2)
        {
            if(kDqInDs<BM> && wg_leader)
            {
                // dQ of tile n - 2 was staged in this buffer: released once its reduction read it.
                bulk_wait_read<0>();
                mbar_arrive(mb_ds_empty + 8 * (n & 1));
            }
            mbar_wait(mb_ds_empty + 8 * (n & 1), ((n - 2) >> 1) & 1); // both dQ of tile n - 2 read this buffer
        }
        const uint32_t dsb = ds_base + (n & 1) * kDsBytes<BM>;
        unsigned char* ds_ptr = smem_raw + (dsb - raw);
        const int kr = wgi * 64 + 16 * w + g; // key row within the block
#pragma unroll
        for(int j = 0; j < NJ; ++j)
#pragma unroll
            for(int h2 = 0; h2 < 2; ++h2)
                *reinterpret_cast<uint32_t*>(ds_ptr + woff<BK>(kr + 8 * h2, j) + 4 * t) = dsa[j >> 1][(j & 1) * 2 + h2];

        fence_proxy_async();
        mbar_arrive(mb_ds_full + 8 * (n & 1));

        // dV += P^T dO and dK += dS^T Q (B: the tile read MN-major). (Issuing dV before dS^T is
        // computed measured 2-7% slower: registers.)
        wg::fence();
#pragma unroll
        for(int kk = 0; kk < QS; ++kk)
            wg::rs<T, D>(dv, pa[kk], wg::desc(dos + kk * 16 * 128, BM * 128, 1024));
#pragma unroll
        for(int kk = 0; kk < QS; ++kk)
            wg::rs<T, D>(dk, dsa[kk], wg::desc(qs + kk * 16 * 128, BM * 128, 1024));
        wg::commit();

        // dQ of tile n - 1 (both warpgroups' dS^T of it are stored by now unless one lags), so that
        // neither warpgroup waits for the other within a tile.
        float dq[32];
        if(n >= 1)
        {
            mbar_wait(mb_ds_full + 8 * ((n - 1) & 1), ((n - 1) >> 1) & 1);
            issue_dq(n - 1, dq);
            wg::commit();
        }
        wg::wait<0>();
        wg::pin(dk);
        wg::pin(dv);
        wg::pin(pa);
        wg::pin(dsa);
        mbar_arrive(mb_empty + 8 * (n % kStages)); // this thread is done with tile n's stage
        if(n >= 1)
        {
            wg::pin(dq);
            if(!kDqInDs<BM>)
                mbar_arrive(mb_ds_empty + 8 * ((n - 1) & 1));
            flush_dq(n - 1, dq);
            if(kDqInDs<BM> && !wg_leader)
                mbar_arrive(mb_ds_empty + 8 * ((n - 1) & 1)); // (the leader: once its reduction read it)
        }
        // Tile n + 2 into the stage of tile n - 1, once both warpgroups are done with it.
        if(tid == 0 && n + 2 < nsteps)
        {
            if(n >= 1)
                mbar_wait(mb_empty + 8 * ((n + 2) % kStages), ((n - 1) / kStages) & 1);
            issue_tile(n + 2);
        }
    }
    if(nsteps > 0)
    {
        float dq[32];
        mbar_wait(mb_ds_full + 8 * ((nsteps - 1) & 1), ((nsteps - 1) >> 1) & 1);
        issue_dq(nsteps - 1, dq);
        wg::commit();
        wg::wait<0>();
        wg::pin(dq);
        flush_dq(nsteps - 1, dq);
    }
    if(wg_leader)
        bulk_wait<0>(); // the reductions are done before the block's shared memory goes

    // dK (times the scale) and dV of this thread's keys; zero for keys no query row sees.
    uint16_t* dkp = static_cast<uint16_t*>(A.dk) + b * A.dk_sb + hk * A.dk_sh;
    uint16_t* dvp = static_cast<uint16_t*>(A.dv) + b * A.dv_sb + hk * A.dv_sh;
#pragma unroll
    for(int h2 = 0; h2 < 2; ++h2)
    {
        const int key = key_row0 + 8 * h2;
        if(key >= f.skv)
            continue;
        uint16_t* dkr = dkp + static_cast<int64_t>(key) * A.dk_ss + 2 * t;
        uint16_t* dvr = dvp + static_cast<int64_t>(key) * A.dv_ss + 2 * t;
#pragma unroll
        for(int j = 0; j < D / 8; ++j)
        {
            // Not the columns of a padded D past k's (d) or v's (dv) head dim: multiples of 8.
            if(!Pad || 8 * j < f.d)
                *reinterpret_cast<uint32_t*>(dkr + 8 * j)
                    = pack2<T>(dk[4 * j + 2 * h2] * A.scale, dk[4 * j + 2 * h2 + 1] * A.scale);
            if(!Pad || 8 * j < f.dv)
                *reinterpret_cast<uint32_t*>(dvr + 8 * j) = pack2<T>(dv[4 * j + 2 * h2], dv[4 * j + 2 * h2 + 1]);
        }
    }
}

template <ElemType T, int D, int BM, int Ext, bool Pad>
hipError_t set_attr_one()
{
    return hipFuncSetAttribute(reinterpret_cast<const void*>(&sdpa_bwd_wg<T, D, BM, Ext, Pad>),
                               hipFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kBwdSmem<D, BM>));
}

template <ElemType T, int D, int BM>
hipError_t set_attrs_typed()
{
    hipError_t e = hipSuccess;
    for(hipError_t (*one)() : {set_attr_one<T, D, BM, 0, false>, set_attr_one<T, D, BM, 1, false>,
                               set_attr_one<T, D, BM, 2, false>, set_attr_one<T, D, BM, 0, true>,
                               set_attr_one<T, D, BM, 1, true>, set_attr_one<T, D, BM, 2, true>})
        if(e == hipSuccess)
            e = one();
    return e;
}

template <ElemType T, int D, int BM>
hipError_t launch_typed(const BwdSlice& s, int pairs, hipStream_t stream)
{
    const SdpaArgs& f = s.a.f;
    BwdMaps maps{};
    // Each map at its tensor's own head dim: a padded D's columns past it come back as zeros.
    if(!tma_tile_map(maps.q, f.q, f.d, f.sq, f.hq, f.batch, f.q_ss, f.q_sh, f.q_sb, BM)
       || !tma_tile_map(maps.dout, s.a.dout, f.dv, f.sq, f.hq, f.batch, s.a.do_ss, s.a.do_sh, s.a.do_sb, BM)
       || !tma_tile_map(maps.k, f.k, f.d, f.skv, f.hk, f.batch, f.k_ss, f.k_sh, f.k_sb, kBwdKeys)
       || !tma_tile_map(maps.v, f.v, f.dv, f.skv, f.hk, f.batch, f.v_ss, f.v_sh, f.v_sb, kBwdKeys))
        return hipErrorNotSupported; // no encoder in this driver: the caller runs the portable kernels
    const dim3 grid(static_cast<unsigned>((f.skv + kBwdKeys - 1) / kBwdKeys), static_cast<unsigned>(pairs));
    constexpr size_t smem = kBwdSmem<D, BM>; // (a comma inside the launch macro's arguments would split them)
    const int ext = f.softcap > 0.0f ? 2 : sdpa_needs_ext(f) ? 1 : 0;
    const bool pad = f.d != D || f.dv != D;
    const dim3 block(kBwdThreads);
    if(pad && ext == 2)
        hipLaunchKernelGGL((sdpa_bwd_wg<T, D, BM, 2, true>), grid, block, smem, stream, s, maps);
    else if(pad && ext == 1)
        hipLaunchKernelGGL((sdpa_bwd_wg<T, D, BM, 1, true>), grid, block, smem, stream, s, maps);
    else if(pad)
        hipLaunchKernelGGL((sdpa_bwd_wg<T, D, BM, 0, true>), grid, block, smem, stream, s, maps);
    else if(ext == 2)
        hipLaunchKernelGGL((sdpa_bwd_wg<T, D, BM, 2, false>), grid, block, smem, stream, s, maps);
    else if(ext == 1)
        hipLaunchKernelGGL((sdpa_bwd_wg<T, D, BM, 1, false>), grid, block, smem, stream, s, maps);
    else
        hipLaunchKernelGGL((sdpa_bwd_wg<T, D, BM, 0, false>), grid, block, smem, stream, s, maps);
    return hipGetLastError();
}

template <ElemType T>
hipError_t set_attrs_for()
{
    hipError_t e = set_attrs_typed<T, 64, 128>();
    return e != hipSuccess ? e : set_attrs_typed<T, 128, 64>();
}

template <ElemType T>
hipError_t launch_for(const BwdSlice& s, int pairs, hipStream_t stream)
{
    return s.w == 128 ? launch_typed<T, 128, 64>(s, pairs, stream) : launch_typed<T, 64, 128>(s, pairs, stream);
}

} // namespace

bool bwd_wg_built()
{
    return true;
}

hipError_t bwd_wg_set_attrs(ElemType t)
{
    return t == ElemType::Bf16 ? set_attrs_for<ElemType::Bf16>() : set_attrs_for<ElemType::Half>();
}

hipError_t bwd_wg_launch(const BwdSlice& s, int pairs, ElemType t, hipStream_t stream)
{
    return t == ElemType::Bf16 ? launch_for<ElemType::Bf16>(s, pairs, stream) : launch_for<ElemType::Half>(s, pairs, stream);
}

#else // not the NVIDIA build: no Hopper kernel

bool bwd_wg_built()
{
    return false;
}

hipError_t bwd_wg_set_attrs(ElemType)
{
    return hipSuccess;
}

hipError_t bwd_wg_launch(const BwdSlice&, int, ElemType, hipStream_t)
{
    return hipErrorInvalidValue;
}

#endif // HIPDNN_HIP_ON_NVIDIA

} // namespace hipdnn_hip
