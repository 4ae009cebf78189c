// hipdnn HIP engine, engine 202: the warp-specialized wgmma flash-attention forward kernel
// (sdpa_fwd_ws). NVIDIA sm_90a only (inline PTX); a stub elsewhere.
#include "sdpa_device_common.h"
#include "sdpa_tc_families.h"
#include "sdpa_ws_schedule.h"
#if defined(HIPDNN_HIP_ON_NVIDIA)
#include "sdpa_async.h"
#include "sdpa_mma_sync.h"
#include "sdpa_wg_softmax.h"
#include "sdpa_wgmma.h"
#endif

#include <algorithm>
#include <cstdlib>

namespace hipdnn_hip
{

#if defined(HIPDNN_HIP_ON_NVIDIA)

namespace
{

using namespace mma_sync;
using namespace async;

// Warp-specialized Hopper kernel ("ws"): one producer warpgroup streams K and V through
// shared-memory rings guarded by mbarriers; NC consumer warpgroups (64 query rows each) run
// the wgmma / softmax loop of sdpa_fwd_wg and take turns issuing their MMAs (round robin).
// NC = 2 at D = 128 (232 registers each), 3 at D = 64 (160 each): at D = 64 a tile's MMAs take
// half as long as at D = 128 while its softmax (one ex2 per score on the 16-per-clock
// special-function units) takes as long, so two more warpgroups' MMAs are needed to cover one
// warpgroup's softmax.
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
// Consumers (warpgroups 1..NC; registers raised by setmaxnreg): each loads its own Q rows,
// then per tile n waits on full_k[n] and full_v[n - 1], issues S = Q K_n^T and O += P_{n-1} V_{n-1},
// waits for S, releases K n (one lane per warp arrives on empty_k: 4 NC arrivals), computes the
// softmax while P V runs, waits for P V, releases V n - 1, rescales O, and only then converts P
// to the input type. (Converting it while P V runs, as sdpa_fwd_wg does, makes ptxas serialize
// every wgmma of the loop, C7513; measured 0-27% slower once the copy engine fed the loop.)
// The issue of each consumer is bracketed by named barriers (ids 1..NC; 256 threads): consumer
// c waits for its turn on barrier 1 + c, issues, then hands the turn to consumer c + 1 (mod NC),
// so the tensor cores receive the warpgroups' MMAs in turn and one warpgroup's softmax runs
// under the others' MMAs. Every consumer makes ntiles + 1 issues per item; the turns run on
// across a block's items, the last consumer opens the first and does not hand over the block's
// last, so every barrier phase that is opened is completed.
//
// Output: each consumer writes its normalised 64 x D tile into its own (no longer read) Q
// rows of shared memory, then stores 16-byte chunks, whole rows per pair of warps.
constexpr int kWsBlockN = 128;
// Ring depths. At D = 128 two Q blocks (64 KiB) leave room for 3 K stages and 2 V stages
// (225 KiB in all); at D = 64 (three consumers, 192-row Q blocks) 3 and 3 use 145 KiB.
template <int D>
constexpr int kWsKStages = 3;
template <int D>
constexpr int kWsVStages = D == 128 ? 2 : 3;
// The register split between the roles for NC consumer warpgroups.
template <int NC>
constexpr int kWsThreads = (NC + 1) * 128;
template <int NC>
constexpr int kWsProducerRegs = NC == 2 ? 40 : 24;
template <int NC>
constexpr int kWsConsumerRegs = NC == 2 ? 232 : 160;
static_assert(kWsProducerRegs<2> * 128 + kWsConsumerRegs<2> * 128 * 2 <= 65536, "register file");
static_assert(kWsProducerRegs<3> * 128 + kWsConsumerRegs<3> * 128 * 3 <= 65536, "register file");
template <int D, int NC>
constexpr size_t kWsSmemBytes = 1024 + 2 * size_t(NC * 64) * D * 2
                                + size_t(kWsKStages<D> + kWsVStages<D>) * kWsBlockN * D * 2
                                + 8 * (2 * (kWsKStages<D> + kWsVStages<D>) + 4);
static_assert(kWsSmemBytes<128, 2> <= 227 * 1024, "shared memory");
static_assert(kWsSmemBytes<64, 3> <= 227 * 1024, "shared memory");

// The copy engine's view of Q, K and V for one launch (unused by the cp.async build).
struct WsMaps
{
    CUtensorMap q;
    CUtensorMap k;
    CUtensorMap v;
};

// One item: a query block of one (batch, head).
struct WsItem
{
    int b = 0, h = 0, hk = 0;
    int q0 = 0;       // first row
    int last_row = 0; // last row inside the batch's query length
    int tb = 0;       // first key tile its rows see (window: tiles wholly left of it are skipped)
    int ntiles = 0;   // key tiles its rows see, from tile tb
    BatchLengths len{};
};

// Key tiles of BN keys that the rows [q0, last_row] see.
template <int BN>
__device__ __forceinline__ int ws_tiles_for(const BatchLengths& len, int q0, int last_row)
{
    const int kv_end = last_row < q0 ? 0 : min(len.skv, last_row + len.diag + 1);
    return (max(kv_end, 0) + BN - 1) / BN;
}

// First key tile that rows from q0 on can see (a left bound: row i sees no key before i + lo).
template <int BN>
__device__ __forceinline__ int ws_first_tile(const BatchLengths& len, int q0)
{
    return max(q0 + len.lo, 0) / BN;
}

// Ext: 1 for calls with a left bound (window) or a bias, 2 for calls with ALiBi or a softcap too
// (sdpa_needs_ext, sdpa_needs_score_ext: the score transforms cost registers the window / bias build
// does not spend); 0, the kernel without them is the same code as before (every Ext branch is compile-time).
template <ElemType T, int D, int NC, bool Tma, int Ext>
__global__ void __launch_bounds__(kWsThreads<NC>, 1)
    sdpa_fwd_ws(const SdpaArgs a, const WsSchedule sched, const __grid_constant__ WsMaps maps)
{
    constexpr int BN = kWsBlockN;
    constexpr int BM = NC * 64;
    constexpr int KS = kWsKStages<D>;
    constexpr int VS = kWsVStages<D>;
    constexpr int CH = D / 8;           // 16-byte chunks per row
    constexpr uint32_t KT = BN * D * 2; // bytes per K or V tile
    constexpr uint32_t QT = BM * D * 2; // bytes per Q block
    constexpr int NSR = BN / 2;         // score registers per thread
    constexpr int NOR = D / 2;          // output registers per thread
    constexpr int KP = BN / 16;         // 16-key steps of P V

    extern __shared__ unsigned char smem_raw[];
    const uint32_t raw = smem_addr(smem_raw);
    const uint32_t q_base = (raw + 1023u) & ~1023u; // two Q blocks: item j uses q_base + (j & 1) * QT
    const uint32_t k_base = q_base + 2 * QT;
    const uint32_t v_base = k_base + KS * KT;
    const uint32_t bar_base = v_base + VS * KT;
    const uint32_t full_k = bar_base, empty_k = full_k + 8 * KS;
    const uint32_t full_v = empty_k + 8 * KS, empty_v = full_v + 8 * VS;
    const uint32_t full_q = empty_v + 8 * VS, empty_q = full_q + 16;

    const int tid = static_cast<int>(threadIdx.x);
    const int role = __shfl_sync(0xffffffffu, tid >> 7, 0); // warp-uniform: 0 producer, 1.. consumers
    const int lane = tid & 31;
    // Items of this block: two per unit, but one for the half unit, which is the launch's last
    // (sched.last_half). A block never meets a void item, so the loops below have no branch on
    // one: such a branch (a `continue`) made ptxas keep the item's values in vector registers,
    // and copy every wgmma descriptor of the inner loop to uniform registers first.
    const int nunits = sched.units > static_cast<int>(blockIdx.x)
                           ? (sched.units - 1 - static_cast<int>(blockIdx.x)) / static_cast<int>(gridDim.x) + 1
                           : 0;
    const int nslots = 2 * nunits - (sched.last_half && static_cast<int>(blockIdx.x) == sched.last_owner ? 1 : 0);
    // Item j: which head, batch and query block, that batch's lengths, and the key tiles its rows see.
    auto item_at = [&](int j) {
        WsItem w;
        int bh = 0, qblock = 0;
        ws_unit_item(sched, static_cast<int>(blockIdx.x) + (j >> 1) * static_cast<int>(gridDim.x), j & 1, bh, qblock);
        w.b = static_cast<int>(sched.by_hq.div(static_cast<uint32_t>(bh)));
        w.h = bh - w.b * a.hq;
        w.hk = static_cast<int>(sched.by_group.div(static_cast<uint32_t>(w.h)));
        w.len = batch_lengths(a, w.b);
        w.q0 = qblock * BM;
        w.last_row = min(w.q0 + BM, w.len.sq) - 1;
        w.ntiles = ws_tiles_for<BN>(w.len, w.q0, w.last_row);
        if constexpr(Ext != 0)
        {
            w.tb = ws_first_tile<BN>(w.len, w.q0);
            w.ntiles = max(w.ntiles - w.tb, 0);
        }
        return w;
    };

    if(tid == 0)
    {
#pragma unroll
        for(int i = 0; i < KS; ++i)
        {
            mbar_init(full_k + 8 * i, Tma ? 1 : 4);
            mbar_init(empty_k + 8 * i, 4 * NC);
        }
#pragma unroll
        for(int i = 0; i < VS; ++i)
        {
            mbar_init(full_v + 8 * i, Tma ? 1 : 4);
            mbar_init(empty_v + 8 * i, 4 * NC);
        }
#pragma unroll
        for(int i = 0; i < 2; ++i)
        {
            mbar_init(full_q + 8 * i, 1);
            mbar_init(empty_q + 8 * i, 4 * NC);
        }
        mbar_init_fence();
    }
    __syncthreads();

    if(role == 0)
    {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kWsProducerRegs<NC>));
        if constexpr(Tma)
        {
            if(tid != 0)
                return;
            int it = 0; // K / V tiles issued so far (all items): stage it % KS, pass it / KS
            for(int j = 0; j < nslots; ++j)
            {
                const WsItem w = item_at(j);
                // Q of item j replaces that of item j - 2 once its output has left shared memory.
                const uint32_t qb = j & 1;
                if(j >= 2)
                    mbar_wait(empty_q + 8 * qb, ((j >> 1) - 1) & 1);
                mbar_arrive_expect_tx(full_q + 8 * qb, QT);
#pragma unroll
                for(int blk = 0; blk < D / 64; ++blk)
                    tma_load_4d(q_base + qb * QT + blk * BM * 128, &maps.q, full_q + 8 * qb, blk * 64, w.q0, w.h,
                                w.b);
                for(int n = 0; n < w.ntiles; ++n, ++it)
                {
                    const int ks = it % KS, vs = it % VS;
                    if(it >= KS)
                        mbar_wait(empty_k + 8 * ks, ((it / KS) - 1) & 1);
                    mbar_arrive_expect_tx(full_k + 8 * ks, KT);
#pragma unroll
                    for(int blk = 0; blk < D / 64; ++blk)
                        tma_load_4d(k_base + ks * KT + blk * BN * 128, &maps.k, full_k + 8 * ks, blk * 64,
                                    (w.tb + n) * BN, w.hk, w.b);
                    if(it >= VS)
                        mbar_wait(empty_v + 8 * vs, ((it / VS) - 1) & 1);
                    mbar_arrive_expect_tx(full_v + 8 * vs, KT);
#pragma unroll
                    for(int blk = 0; blk < D / 64; ++blk)
                        tma_load_4d(v_base + vs * KT + blk * BN * 128, &maps.v, full_v + 8 * vs, blk * 64,
                                    (w.tb + n) * BN, w.hk, w.b);
                }
            }
            return;
        }
        else
        {
            // Chunks past the tensor's head dim (width: a.d for K, a.dv for V; D may be padded)
            // are zero-filled, as are keys past skv.
            auto copy_tile = [&](uint32_t dst, const uint16_t* src, int64_t ss, int kv0, int skv, int width) {
#pragma unroll
                for(int i = tid; i < BN * CH; i += 128)
                {
                    const int r = i / CH, c = i % CH;
                    const int key = kv0 + r;
                    const int src_key = min(key, skv - 1);
                    const bool in = key < skv && c * 8 < width;
                    cp_async_16(dst + woff<BN>(r, c), src + src_key * ss + min(c * 8, width - 8), in ? 16 : 0);
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
            int it = 0;
            for(int j = 0; j < nslots; ++j)
            {
                const WsItem w = item_at(j);
                const uint16_t* kp = static_cast<const uint16_t*>(a.k) + w.b * a.k_sb + w.hk * a.k_sh;
                const uint16_t* vp = static_cast<const uint16_t*>(a.v) + w.b * a.v_sb + w.hk * a.v_sh;
                for(int n = 0; n < w.ntiles; ++n, ++it)
                {
                    const int ks = it % KS, vs = it % VS;
                    if(it >= KS)
                        mbar_wait(empty_k + 8 * ks, ((it / KS) - 1) & 1);
                    copy_tile(k_base + ks * KT, kp, a.k_ss, (w.tb + n) * BN, w.len.skv, a.d);
                    if(n > 0)
                        publish_previous(full_v + 8 * ((it - 1) % VS));
                    if(it >= VS)
                        mbar_wait(empty_v + 8 * vs, ((it / VS) - 1) & 1);
                    copy_tile(v_base + vs * KT, vp, a.v_ss, (w.tb + n) * BN, w.len.skv, a.dv);
                    publish_previous(full_k + 8 * ks);
                }
                if(w.ntiles > 0)
                {
                    cp_async_wait<0>();
                    fence_proxy_async();
                    __syncwarp();
                    if(lane == 0)
                        mbar_arrive(full_v + 8 * ((it - 1) % VS));
                }
            }
            return;
        }
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kWsConsumerRegs<NC>));
    const int cw = role - 1; // consumer index
    const int wtid = tid & 127;
    const int g = lane >> 2, t = lane & 3;
    const int rw = ((tid >> 5) & 3) * 16 + g; // this thread's rows in the warpgroup: rw and rw + 8
    const int my_turn = 1 + cw, next_turn = 1 + (cw + 1) % NC;
    const int wg_bar = 1 + NC + cw;
    const float sl2 = a.scale_log2;

    // Turns run on across items: the last consumer opens the block's first turn and hands its
    // final turn of an item to consumer 0 for the next item that has turns, so consumer 0 can
    // start that item while the last one is still in its epilogue (with a fresh opening per item
    // it waited for that epilogue). Only the block's very last turn is not handed over: the last
    // consumer needs the last slot that has turns (usually the last slot: found in one step).
    int last_with_turns = -1;
    if(cw == NC - 1)
        for(int j = nslots - 1; j >= 0; --j)
            if(item_at(j).ntiles > 0)
            {
                last_with_turns = j;
                break;
            }
    bool opened = false;
    int it0 = 0; // K / V tiles of the items before this one
    for(int j = 0; j < nslots; ++j)
    {
        const WsItem w = item_at(j);
        const BatchLengths len = w.len;
        const int ntiles = w.ntiles;
        const int last_row = w.last_row;
        const int wg_row0 = w.q0 + cw * 64;
        const int r0 = wg_row0 + rw;
        const uint32_t qbuf = q_base + (j & 1) * QT;
        const int qb = j & 1;
        uint16_t* op = static_cast<uint16_t*>(a.o) + w.b * a.o_sb + w.h * a.o_sh;
        // The block walks the keys its last row sees; a warpgroup's own rows may see fewer (under
        // a causal mask the first warpgroup of a 192-row block needs up to two tiles less, and rows
        // past a padded or final length need none). It computes only its own tiles and, for the
        // rest, just takes its turns and releases the stages.
        // (Ext: counted from the item's first tile w.tb; this warpgroup's rows see no key before it.)
        const int tb = Ext ? w.tb : 0;
        const int own_tiles = max(ws_tiles_for<BN>(len, wg_row0, min(wg_row0 + 63, last_row)) - tb, 0);
        WgExt ext;
        if constexpr(Ext != 0)
        {
            if(a.bias != nullptr)
            {
                ext.bias = bias_head(a, w.b, w.h);
                ext.type = a.bias_type;
                ext.pairs = a.bias_pairs;
                ext.ss = a.bias_ss;
                ext.sq = a.sq;
                ext.skv = a.skv;
                ext.inv_scale = a.inv_scale;
                ext.bias_limit = kBiasLimit / fmaxf(1.0f, a.inv_scale);
            }
        }
        if constexpr(Ext == 2)
        {
            // Raw score units (scale q.k / scale): the cap c / scale, the slope slope(h) / scale.
            if(a.softcap > 0.0f)
            {
                ext.cap = a.softcap * a.inv_scale;
                ext.cap_inv = 1.0f / ext.cap;
            }
            if(a.alibi)
                ext.alibi = alibi_slope(w.h, a.hq) * a.inv_scale;
        }
        // Every consumer takes ntiles + 1 turns per item.
        if(cw == NC - 1 && ntiles > 0 && !opened)
        {
            named_arrive(1, 256);
            opened = true;
        }
        const bool hand_last = cw != NC - 1 || (ntiles > 0 && j < last_with_turns);

        if constexpr(Tma)
            mbar_wait(full_q + 8 * qb, (j >> 1) & 1);
        else
        {
            const uint16_t* qp = static_cast<const uint16_t*>(a.q) + w.b * a.q_sb + w.h * a.q_sh;
#pragma unroll
            for(int i = wtid; i < 64 * CH; i += 128)
            {
                const int r = i / CH, c = i % CH;
                const int row = wg_row0 + r;
                const int src_row = max(min(row, len.sq - 1), 0);
                cp_async_16(qbuf + woff<BM>(cw * 64 + r, c), qp + src_row * a.q_ss + min(c * 8, a.d - 8),
                            row < len.sq && c * 8 < a.d ? 16 : 0);
            }
            cp_async_commit();
            cp_async_wait<0>();
            fence_proxy_async();
            named_sync(wg_bar, 128);
        }

        float o[NOR];
#pragma unroll
        for(int i = 0; i < NOR; ++i)
            o[i] = 0.0f;
        float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

        if(own_tiles > 0)
        {
            float s[NSR];
            uint32_t p[KP][4], pu[KP][4];
            float alpha[2];
            uint64_t dq[D / 16], dk[D / 16], dv[KP];
            const uint32_t qt = qbuf + cw * 64 * 128;
#pragma unroll
            for(int kk = 0; kk < D / 16; ++kk)
                dq[kk] = wg::desc(qt + (kk >> 2) * BM * 128 + (kk & 3) * 32, 16, 1024);
            auto plan_qk = [&](int n) {
                const uint32_t kt = k_base + ((it0 + n) % KS) * KT;
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
                const uint32_t vt = v_base + ((it0 + n) % VS) * KT;
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
                const int kv0 = (tb + n) * BN;
                bool edge = kv0 + BN > len.skv || kv0 + BN - 1 > wg_row0 + len.diag;
                if constexpr(Ext != 0)
                {
                    edge = edge || kv0 < wg_row0 + 63 + len.lo; // some row's window starts inside
                    if(ext.bias != nullptr && n + 2 < own_tiles)
                        wg_prefetch_bias<BN>(ext, wg_row0, kv0 + 2 * BN, wtid);
                }
                wg_softmax_probs<BN, Ext != 0, Ext == 2>(s, m, l, alpha, sl2, edge, kv0, r0, t, len, ext);
            };
            auto wait_k = [&](int n) { mbar_wait(full_k + 8 * ((it0 + n) % KS), ((it0 + n) / KS) & 1); };
            auto wait_v = [&](int n) { mbar_wait(full_v + 8 * ((it0 + n) % VS), ((it0 + n) / VS) & 1); };
            auto release_k = [&](int n) {
                if(lane == 0)
                    mbar_arrive(empty_k + 8 * ((it0 + n) % KS));
            };
            auto release_v = [&](int n) {
                if(lane == 0)
                    mbar_arrive(empty_v + 8 * ((it0 + n) % VS));
            };

            // V tile nv crossing a padded batch's key length: zero its rows from the length on
            // (copy-engine build only; cp.async zero-fills them itself).
            auto zero_v_tail = [&](int nv) {
                if constexpr(Tma)
                {
                    const int valid = len.skv - (tb + nv) * BN;
                    if(a.padding && valid < BN && len.skv < a.skv)
                    {
                        const uint32_t vt = v_base + ((it0 + nv) % VS) * KT;
                        for(int i = wtid; i < BN * CH; i += 128)
                        {
                            const int r = i / CH, c = i % CH;
                            if(r >= valid)
                                asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};\n" ::"r"(vt + woff<BN>(r, c)),
                                             "r"(0)
                                             : "memory");
                        }
                        fence_proxy_async();
                        named_sync(wg_bar, 128);
                    }
                }
            };

            if constexpr(Ext != 0)
                if(ext.bias != nullptr)
                    for(int n = 0; n < 2 && n < own_tiles; ++n)
                        wg_prefetch_bias<BN>(ext, wg_row0, (tb + n) * BN, wtid);
            wait_k(0);
            plan_qk(0);
            named_sync(my_turn, 256);
            wg::fence();
            issue_qk();
            wg::commit();
            named_arrive(next_turn, 256);
            wg::wait<0>();
            wg::pin(s);
            release_k(0);
            softmax(0);
            wg_pack_p<T, BN>(s, p);

            for(int n = 1; n < own_tiles; ++n)
            {
                wait_k(n);
                wait_v(n - 1);
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
                named_arrive(next_turn, 256);
                wg::wait<1>(); // S of tile n is ready; P V of tile n - 1 may still run
                wg::pin(s);
                release_k(n);
                softmax(n);
                wg::wait<0>();
                wg::pin(o);
                wg::pin(pu);
#pragma unroll
                for(int kk = 0; kk < KP; ++kk)
                    asm volatile("" : "+l"(dv[kk]));
                release_v(n - 1);
                wg_rescale<D>(o, alpha);
                wg_pack_p<T, BN>(s, p); // after P V of tile n - 1 (see the consumers' note above)
            }
            wait_v(own_tiles - 1);
            zero_v_tail(own_tiles - 1);
            plan_pv(own_tiles - 1);
            wg::pin(o);
            stage_p();
            named_sync(my_turn, 256);
            wg::fence();
            issue_pv();
            wg::commit();
            if(own_tiles < ntiles || hand_last)
                named_arrive(next_turn, 256);
            wg::wait<0>();
            wg::pin(o);
            release_v(own_tiles - 1);
        }
        if(own_tiles < ntiles)
        {
            // The turns of issues own_tiles + 1 .. ntiles (and of issue 0 when there were none),
            // each after the stage of its tile has landed and been released: the warpgroups whose
            // turns come next need those stages refilled, which waits for this one's release.
            if(own_tiles == 0)
            {
                named_sync(my_turn, 256);
                named_arrive(next_turn, 256);
            }
            for(int n = own_tiles; n < ntiles; ++n)
            {
                const int g2 = it0 + n;
                mbar_wait(full_k + 8 * (g2 % KS), (g2 / KS) & 1);
                if(lane == 0)
                    mbar_arrive(empty_k + 8 * (g2 % KS));
                named_sync(my_turn, 256);
                if(n + 1 < ntiles || hand_last)
                    named_arrive(next_turn, 256);
                mbar_wait(full_v + 8 * (g2 % VS), (g2 / VS) & 1);
                if(lane == 0)
                    mbar_arrive(empty_v + 8 * (g2 % VS));
            }
        }
        it0 += ntiles;

        // Epilogue: normalise, stage in this warpgroup's (no longer read) Q rows, store whole
        // rows. Rows past the batch's length are written as zeros (selected, not multiplied:
        // the copy engine brings whatever the caller left in those Q rows, NaN included).
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
            for(int c = 0; c < D / 8; ++c)
            {
                const uint32_t v = valid ? pack2<T>(o[4 * c + 2 * hf] * inv, o[4 * c + 2 * hf + 1] * inv) : 0u;
                asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(qbuf + woff<BM>(srow, c) + 4 * t), "r"(v) : "memory");
            }
            if(a.stats != nullptr && t == 0 && row < a.sq)
                a.stats[w.b * a.st_sb + w.h * a.st_sh + row * a.st_ss]
                    = valid ? (hipdnn_fmul_rn(m[hf], sl2) + __log2f(lsum)) * 0.69314718055994531f : -INFINITY;
        }
        named_sync(wg_bar, 128);
#pragma unroll
        for(int i = wtid; i < 64 * CH; i += 128)
        {
            const int r = i / CH, c = i % CH;
            const int row = wg_row0 + r;
            if(row < a.sq && c * 8 < a.dv) // the columns of a padded D past dv are not o's
            {
                uint32_t x0, x1, x2, x3;
                asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];\n"
                             : "=r"(x0), "=r"(x1), "=r"(x2), "=r"(x3)
                             : "r"(qbuf + woff<BM>(cw * 64 + r, c))
                             : "memory");
                *reinterpret_cast<uint4*>(op + row * a.o_ss + c * 8) = make_uint4(x0, x1, x2, x3);
            }
        }
        if constexpr(Tma)
        {
            // This warp is done with the Q block: the copy engine may bring item j + 2's there.
            fence_proxy_async();
            __syncwarp();
            if(lane == 0)
                mbar_arrive(empty_q + 8 * qb);
        }
        else
            named_sync(wg_bar, 128); // item j + 2's cp.async lands here only after every read
    }
}

// Three consumers leave the producer 24 registers: enough for the copy engine's one thread, not
// for the cp.async loop (it spills), so that build exists with two consumers only.
template <int NC, bool Tma>
constexpr bool kWsBuilt = Tma || NC == 2;
// The window / bias build (Ext): with the copy engine only, and only for the default consumer count
// of each head dim (2 at D = 128, 3 at D = 64); ws_launch sends other such calls there, and calls
// whose tensors the copy engine cannot describe to the portable kernel.
template <int D, int NC>
constexpr bool kWsExtBuilt = NC == (D == 128 ? 2 : 3);

template <ElemType T, int D, int NC>
hipError_t set_attrs_ws()
{
    constexpr int bytes = static_cast<int>(kWsSmemBytes<D, NC>);
    hipError_t e = hipFuncSetAttribute(reinterpret_cast<const void*>(&sdpa_fwd_ws<T, D, NC, true, 0>),
                                       hipFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if constexpr(kWsExtBuilt<D, NC>)
    {
        if(e == hipSuccess)
            e = hipFuncSetAttribute(reinterpret_cast<const void*>(&sdpa_fwd_ws<T, D, NC, true, 1>),
                                    hipFuncAttributeMaxDynamicSharedMemorySize, bytes);
        if(e == hipSuccess)
            e = hipFuncSetAttribute(reinterpret_cast<const void*>(&sdpa_fwd_ws<T, D, NC, true, 2>),
                                    hipFuncAttributeMaxDynamicSharedMemorySize, bytes);
    }
    if constexpr(kWsBuilt<NC, false>)
        if(e == hipSuccess)
            e = hipFuncSetAttribute(reinterpret_cast<const void*>(&sdpa_fwd_ws<T, D, NC, false, 0>),
                                    hipFuncAttributeMaxDynamicSharedMemorySize, bytes);
    return e;
}

// The grid of the persistent kernel: one block per multiprocessor (one fits: 145-225 KiB of
// shared memory), fewer when there are fewer units. Units have about equal work, so a static
// stride balances them as well as a work queue would, without one (a queue would need a
// zeroed counter per call). HIPDNN_HIP_202_PAIRS=p (read per
// launch; for comparisons and the tests) sizes the grid for about p units per block instead.
bool ws_schedule(const SdpaArgs& a, int bm, const DeviceShape& dev, WsSchedule& s, int& grid)
{
    if(!ws_make_schedule((a.sq + bm - 1) / bm, a.batch, a.hq, a.hk, s))
        return false;
    const int64_t sms = dev.sms > 0 ? dev.sms : 132; // unknown: an H100 / H200
    int64_t blocks = std::min<int64_t>(s.units, sms);
    if(const char* e = std::getenv("HIPDNN_HIP_202_PAIRS"))
    {
        const int64_t per_block = std::max(1, std::atoi(e));
        blocks = (s.units + per_block - 1) / per_block;
    }
    grid = static_cast<int>(std::max<int64_t>(blocks, 1));
    s.last_owner = s.units > 0 ? (s.units - 1) % grid : 0;
    return true;
}

template <ElemType T, int D, int NC>
hipError_t launch_ws_typed(const SdpaArgs& a, bool copy_engine, const DeviceShape& dev, hipStream_t stream)
{
    WsSchedule sched;
    int blocks = 1;
    if(!ws_schedule(a, NC * 64, dev, sched, blocks))
        return hipErrorInvalidValue;
    const dim3 grid(static_cast<unsigned>(blocks));
    WsMaps maps{};
    const bool tma = copy_engine
                     && tma_tile_map(maps.q, a.q, a.d, a.sq, a.hq, a.batch, a.q_ss, a.q_sh, a.q_sb, NC * 64)
                     && tma_tile_map(maps.k, a.k, a.d, a.skv, a.hk, a.batch, a.k_ss, a.k_sh, a.k_sb, kWsBlockN)
                     && tma_tile_map(maps.v, a.v, a.dv, a.skv, a.hk, a.batch, a.v_ss, a.v_sh, a.v_sb, kWsBlockN);
    constexpr size_t smem = kWsSmemBytes<D, NC>;
    if(sdpa_needs_ext(a))
    {
        if constexpr(kWsExtBuilt<D, NC>)
        {
            if(!tma)
                return launch_sdpa_portable(a, T, stream);
            if(sdpa_needs_score_ext(a))
                hipLaunchKernelGGL((sdpa_fwd_ws<T, D, NC, true, 2>), grid, dim3(kWsThreads<NC>), smem, stream, a,
                                   sched, maps);
            else
                hipLaunchKernelGGL((sdpa_fwd_ws<T, D, NC, true, 1>), grid, dim3(kWsThreads<NC>), smem, stream, a,
                                   sched, maps);
            return hipGetLastError();
        }
        else
            return launch_ws_typed<T, D, D == 128 ? 2 : 3>(a, copy_engine, dev, stream);
    }
    if(tma)
        hipLaunchKernelGGL((sdpa_fwd_ws<T, D, NC, true, 0>), grid, dim3(kWsThreads<NC>), smem, stream, a, sched,
                           maps);
    else if constexpr(kWsBuilt<NC, false>)
        hipLaunchKernelGGL((sdpa_fwd_ws<T, D, NC, false, 0>), grid, dim3(kWsThreads<NC>), smem, stream, a, sched,
                           maps);
    else
        return launch_ws_typed<T, D, 2>(a, false, dev, stream);
    return hipGetLastError();
}

template <ElemType T>
hipError_t ws_set_attrs_typed(int d)
{
    if(d == 128)
        return set_attrs_ws<T, 128, 2>();
    const hipError_t e = set_attrs_ws<T, 64, 3>();
    return e != hipSuccess ? e : set_attrs_ws<T, 64, 2>();
}

template <ElemType T>
hipError_t ws_launch_typed(const SdpaArgs& a, int consumers, bool copy_engine, const DeviceShape& dev,
                           hipStream_t stream)
{
    if(kernel_head_dim(a.d, a.dv) == 128)
        return launch_ws_typed<T, 128, 2>(a, copy_engine, dev, stream);
    return consumers == 2 ? launch_ws_typed<T, 64, 2>(a, copy_engine, dev, stream)
                          : launch_ws_typed<T, 64, 3>(a, copy_engine, dev, stream);
}

} // namespace

hipError_t ws_set_attrs(ElemType t, int d)
{
    return t == ElemType::Bf16 ? ws_set_attrs_typed<ElemType::Bf16>(d) : ws_set_attrs_typed<ElemType::Half>(d);
}

hipError_t ws_launch(const SdpaArgs& a, ElemType t, int consumers, bool copy_engine, const DeviceShape& dev,
                     hipStream_t stream)
{
    return t == ElemType::Bf16 ? ws_launch_typed<ElemType::Bf16>(a, consumers, copy_engine, dev, stream)
                               : ws_launch_typed<ElemType::Half>(a, consumers, copy_engine, dev, stream);
}

#endif // HIPDNN_HIP_ON_NVIDIA

} // namespace hipdnn_hip
