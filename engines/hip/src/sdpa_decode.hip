// hipdnn HIP engine, engine 202: the decode path (small query lengths), split over the KV length
// with grouped-query packing. NVIDIA build only (mma.sync, ldmatrix, cp.async inline PTX);
// elsewhere this file builds a stub and the engine keeps its other kernels.
//
// Decode is bound by memory: each call must stream K and V once, so the kernel is organised to
// read every K/V element exactly once and keep enough loads in flight to saturate the device.
//  * Grouped-query packing: a block's query rows are the rows of all G = Hq / Hk query heads that
//    share one KV head (row r = head-in-group * Sq + position), so a K/V tile loaded once feeds
//    every head of the group. Up to kDecodeRows (16) rows per block, one m16 tile of mma.sync;
//    longer groups take several row groups (adjacent blocks, so the repeated tiles come from L2).
//  * Split-KV: the keys of one (batch, KV head) are cut into chunks processed by separate blocks
//    (decode_splits in sdpa_decode_plan.h chooses the count from the grid and the device). Each
//    writes its rows' partial output, normalised, with its max and sum to the workspace; a second
//    kernel merges the splits of each row, weighted by their sums. With one split the block
//    writes the output directly and the merge is skipped.
//  * Inside a block, the 4 warps take 16 keys each of every 64-key tile (their own online softmax
//    over the block's keys) and are merged through shared memory at the end. Tiles stream through
//    a ring of cp.async stages (3 at D = 128, 4 at D = 64), one block barrier per tile.
// A batch whose seq_len_kv is short has most of its split blocks find no keys: they write an
// empty partial (max -inf, sum 0) and exit, so work follows each sequence's real length.
#include "sdpa_decode_plan.h"
#include "sdpa_device_common.h"
#if defined(HIPDNN_HIP_ON_NVIDIA)
#include "sdpa_mma_sync.h"
#endif

#include <type_traits>

namespace hipdnn_hip
{

#if defined(HIPDNN_HIP_ON_NVIDIA)

namespace
{

using namespace mma_sync;

constexpr int kDecWarps = 4;
constexpr int kDecThreads = kDecWarps * 32;
constexpr int kDecBN = static_cast<int>(kDecodeKeys); // keys per block tile: 16 per warp
constexpr int kDecRows = static_cast<int>(kDecodeRows);
static_assert(kDecBN == 16 * kDecWarps, "each warp takes 16 keys of a tile");

template <int D>
constexpr int kDecStages = D == 128 ? 3 : 4;
template <int D>
constexpr size_t kDecSmemBytes = (size_t(kDecRows) + size_t(2) * kDecStages<D> * kDecBN) * D * sizeof(uint16_t);
// The cross-warp merge reuses the K/V ring: per warp [16][D + 8] fp32 outputs.
template <int D>
constexpr size_t kDecMergeBytes = size_t(kDecWarps) * kDecRows * (D + 8) * sizeof(float);
static_assert(kDecMergeBytes<64> <= kDecSmemBytes<64> - size_t(kDecRows) * 64 * 2, "merge fits the ring");
static_assert(kDecMergeBytes<128> <= kDecSmemBytes<128> - size_t(kDecRows) * 128 * 2, "merge fits the ring");

struct DecodeArgs
{
    float* part_o = nullptr;   // [splits][rows][D], rows = B * Hq * Sq
    // [splits][rows]: each split's max score (log2 units; -inf: the split saw no key) and its sum of
    // exp2(score - max), kept apart: m + log2 l in one float loses l where m is huge (a bias near
    // -1e30 on every key), and splits of unequal lengths then merged with equal weights.
    float* part_m = nullptr;
    float* part_l = nullptr;
    int splits = 1;
    int chunk = 0;      // keys per split, a multiple of kDecBN
    int row_groups = 1; // blocks per (batch, KV head, split) along the packed rows
    int group = 1;      // query heads per KV head
    int kv_base = 0;    // first key of split 0 (a window's first visible key, rounded down to a tile)
};

// Ext: built for calls with a left bound (window), a bias, ALiBi or a softcap (sdpa_needs_ext); the
// kernel without them is the same code as before (every Ext branch is compile-time).
template <ElemType T, int D, bool Ext>
__global__ void __launch_bounds__(kDecThreads, 2) sdpa_decode_split(const SdpaArgs a, const DecodeArgs da)
{
    constexpr int BN = kDecBN;
    constexpr int NS = kDecStages<D>;
    constexpr int CH = D / 8;    // 16-byte chunks per row
    constexpr int TILE = BN * D; // elements per K or V tile
    constexpr int NO = D / 8;    // 8-wide output column tiles
    constexpr uint32_t ROWB = D * 2;
    static_assert(CH >= 8, "the swizzle needs at least 8 chunks per row");

    extern __shared__ __align__(128) unsigned char smem_raw[];
    uint16_t* s_q = reinterpret_cast<uint16_t*>(smem_raw); // [16][D]
    uint16_t* s_k = s_q + kDecRows * D;                    // [NS][BN][D]
    uint16_t* s_v = s_k + NS * TILE;                       // [NS][BN][D]
    const uint32_t q_base = smem_addr(s_q);
    const uint32_t k_base = smem_addr(s_k);
    const uint32_t v_base = smem_addr(s_v);

    const int tid = static_cast<int>(threadIdx.x);
    const int warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const int rg = static_cast<int>(blockIdx.x) % da.row_groups;
    const int split = static_cast<int>(blockIdx.x) / da.row_groups;
    const int hk = static_cast<int>(blockIdx.y);
    const int b = static_cast<int>(blockIdx.z);
    const BatchLengths len = batch_lengths(a, b);
    const int rows = da.group * a.sq; // packed rows of this KV head
    const int row0 = rg * kDecRows;

    // Keys this block covers: its chunk, cut at the last key any valid row can see.
    const int kv_end = len.sq > 0 ? max(min(len.skv, len.sq - 1 + len.diag + 1), 0) : 0;
    int kv_begin = split * da.chunk;
    if constexpr(Ext)
    {
        // Window: no row sees a key before pos + lo, position 0 the earliest (each batch's own lo).
        kv_begin += da.kv_base;
        kv_begin = max(kv_begin, min(max(len.lo, 0), kv_begin + da.chunk));
    }
    const int kv_stop = min(kv_end, (Ext ? split * da.chunk + da.kv_base : kv_begin) + da.chunk);
    const int ntiles = kv_stop > kv_begin ? (kv_stop - kv_begin + BN - 1) / BN : 0;

    const uint16_t* kp = static_cast<const uint16_t*>(a.k) + b * a.k_sb + hk * a.k_sh;
    const uint16_t* vp = static_cast<const uint16_t*>(a.v) + b * a.v_sb + hk * a.v_sh;

    auto load_tile = [&](int stage, int kv0) {
        const uint32_t kb = k_base + stage * TILE * 2;
        const uint32_t vb = v_base + stage * TILE * 2;
#pragma unroll
        for(int i = tid; i < BN * CH; i += kDecThreads)
        {
            const int r = i / CH, c = i % CH;
            const int key = kv0 + r;
            const int src_key = min(key, kv_stop - 1);
            // Zero-fill past the chunk (never stale memory) and past each tensor's head dim (a
            // padded D: K's columns past a.d, V's past a.dv).
            const bool in = key < kv_stop;
            cp_async_16(kb + swz<D>(r, c), kp + src_key * a.k_ss + min(c * 8, a.d - 8), in && c * 8 < a.d ? 16 : 0);
            cp_async_16(vb + swz<D>(r, c), vp + src_key * a.v_ss + min(c * 8, a.dv - 8), in && c * 8 < a.dv ? 16 : 0);
        }
    };

    // Q rows of the group (absent rows and rows past the batch's length read as zero), with the
    // first tiles: one copy group each.
    for(int i = tid; i < kDecRows * CH; i += kDecThreads)
    {
        const int r = i / CH, c = i % CH;
        const int row = row0 + r;
        const int pos = row % a.sq;
        const bool valid = row < rows && pos < len.sq;
        const int h = hk * da.group + (valid ? row / a.sq : 0);
        const uint16_t* src = static_cast<const uint16_t*>(a.q) + b * a.q_sb + h * a.q_sh + (valid ? pos : 0) * a.q_ss
                              + min(c * 8, a.d - 8);
        cp_async_16(q_base + swz<D>(r, c), src, valid && c * 8 < a.d ? 16 : 0);
    }
#pragma unroll
    for(int st = 0; st < NS - 1; ++st)
    {
        if(st < ntiles)
            load_tile(st, kv_begin + st * BN);
        cp_async_commit();
    }

    // ldmatrix lane offsets (see sdpa_fwd_tc): Q rows 0..15; this warp's 16 keys of a tile.
    const int l7 = lane & 7;
    uint32_t qoff[4], koff[4], voff[4];
#pragma unroll
    for(int p = 0; p < 4; ++p)
    {
        qoff[p] = (l7 + ((lane >> 3) & 1) * 8) * ROWB + (((2 * p + (lane >> 4)) ^ l7) * 16);
        koff[p] = (warp * 16 + l7 + (lane >> 4) * 8) * ROWB + (((2 * p + ((lane >> 3) & 1)) ^ l7) * 16);
        voff[p] = (warp * 16 + l7 + ((lane >> 3) & 1) * 8) * ROWB + (((2 * p + (lane >> 4)) ^ l7) * 16);
    }

    // Query positions of this thread's two rows (g and g + 8), for the causal test.
    int pos[2];
#pragma unroll
    for(int hf = 0; hf < 2; ++hf)
        pos[hf] = (row0 + g + hf * 8) % a.sq;
    // Ext with a bias: each row's bias row (its own query head and position; rows past the group
    // read the last valid row, whose scores nobody uses).
    const unsigned char* brow[2] = {nullptr, nullptr};
    if constexpr(Ext)
        if(a.bias != nullptr)
#pragma unroll
            for(int hf = 0; hf < 2; ++hf)
            {
                const int row = min(row0 + g + hf * 8, rows - 1);
                const int64_t esz = a.bias_type == 2 ? 4 : 2;
                brow[hf] = bias_head(a, b, hk * da.group + row / a.sq) + (row % a.sq) * a.bias_ss * esz;
            }

    // Ext with ALiBi: each row's slope (its own query head), in the log2 units of the scores; with a
    // softcap, the cap in those units.
    float alibi2[2] = {0.0f, 0.0f};
    float cap2 = 0.0f, cap2_inv = 0.0f;
    if constexpr(Ext)
    {
        if(a.alibi)
#pragma unroll
            for(int hf = 0; hf < 2; ++hf)
                alibi2[hf] = alibi_slope(hk * da.group + min(row0 + g + hf * 8, rows - 1) / a.sq, a.hq)
                             * 1.4426950408889634f;
        if(a.softcap > 0.0f)
        {
            cap2 = a.softcap * 1.4426950408889634f;
            cap2_inv = 1.0f / cap2;
        }
    }

    float o[NO][4];
#pragma unroll
    for(int j = 0; j < NO; ++j)
        o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    const float sl2 = a.scale_log2;

    uint32_t qa[D / 16][4];
    cp_async_wait<NS - 2>(); // the Q group (and the first tile) landed
    __syncthreads();
#pragma unroll
    for(int kk = 0; kk < D / 16; ++kk)
        ldsm_x4(q_base + qoff[kk & 3] + (kk >> 2) * 128, qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3]);

    for(int n = 0; n < ntiles; ++n)
    {
        cp_async_wait<NS - 2>();
        __syncthreads(); // tile n landed for every thread; stage (n - 1) % NS is free again
        const int nn = n + NS - 1;
        if(nn < ntiles)
            load_tile(nn % NS, kv_begin + nn * BN);
        cp_async_commit();

        const int stage = n % NS;
        const uint32_t kt = k_base + stage * TILE * 2;
        const uint32_t vt = v_base + stage * TILE * 2;
        const int kv0 = kv_begin + n * BN + warp * 16;

        float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
        for(int kk = 0; kk < D / 16; ++kk)
        {
            uint32_t b0, b1, b2, b3;
            ldsm_x4(kt + koff[kk & 3] + (kk >> 2) * 128, b0, b1, b2, b3);
            mma16816<T>(s[0], qa[kk], b0, b1);
            mma16816<T>(s[1], qa[kk], b2, b3);
        }

        // Mask past the chunk and across the causal diagonal (the smallest position, 0, bounds
        // which tiles need it).
        bool edge = kv0 + 16 > kv_stop || kv0 + 15 > len.diag;
        if constexpr(Ext)
            edge = edge || kv0 < a.sq - 1 + len.lo; // the largest position's window starts past kv0
        float alpha[2];
        // ALiBi: key - position of this thread's first column, per row (j * 8 + (e & 1) is added as a constant).
        float dist0[2] = {0.0f, 0.0f};
        if constexpr(Ext)
            if(a.alibi)
#pragma unroll
                for(int hf = 0; hf < 2; ++hf)
                    dist0[hf] = static_cast<float>(kv0 + 2 * t - pos[hf]);
#pragma unroll
        for(int j = 0; j < 2; ++j)
#pragma unroll
            for(int e = 0; e < 4; ++e)
            {
                s[j][e] *= sl2;
                if constexpr(Ext)
                {
                    const int col = kv0 + j * 8 + 2 * t + (e & 1);
                    if(cap2 > 0.0f) // first: the bias, ALiBi and the masks apply to the capped score
                        s[j][e] = cap2 * softcap_tanh(s[j][e] * cap2_inv);
                    if(a.alibi) // (uniform; the distance from a per-tile base, no conversion per score)
                        s[j][e] = fmaf(alibi2[e >> 1], dist0[e >> 1] + static_cast<float>(j * 8 + (e & 1)), s[j][e]);
                    if(brow[e >> 1] != nullptr) // (clamped key: keys past the chunk are masked below)
                        s[j][e] += hipdnn_fmul_rn(bias_at(brow[e >> 1], a.bias_type, 0, 0, min(col, a.skv - 1)),
                                             1.4426950408889634f); // (rounded first: sdpa_wg_softmax.h)
                }
                if(edge)
                {
                    const int col = kv0 + j * 8 + 2 * t + (e & 1);
                    if(col >= kv_stop || col > pos[e >> 1] + len.diag)
                        s[j][e] = -INFINITY;
                    if constexpr(Ext)
                        if(col < pos[e >> 1] + len.lo)
                            s[j][e] = -INFINITY;
                }
            }
#pragma unroll
        for(int hf = 0; hf < 2; ++hf)
        {
            float mx = fmaxf(m[hf], fmaxf(fmaxf(s[0][2 * hf], s[0][2 * hf + 1]), fmaxf(s[1][2 * hf], s[1][2 * hf + 1])));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float base = mx == -INFINITY ? 0.0f : mx;
            alpha[hf] = fast_exp2(m[hf] - base);
            m[hf] = mx;
            float sum = 0.0f;
#pragma unroll
            for(int j = 0; j < 2; ++j)
            {
                s[j][2 * hf] = fast_exp2(s[j][2 * hf] - base);
                s[j][2 * hf + 1] = fast_exp2(s[j][2 * hf + 1] - base);
                sum += s[j][2 * hf] + s[j][2 * hf + 1];
            }
            l[hf] = l[hf] * alpha[hf] + sum;
        }
#pragma unroll
        for(int j = 0; j < NO; ++j)
        {
            o[j][0] *= alpha[0];
            o[j][1] *= alpha[0];
            o[j][2] *= alpha[1];
            o[j][3] *= alpha[1];
        }

        uint32_t pa[4];
        pa[0] = pack2<T>(s[0][0], s[0][1]);
        pa[1] = pack2<T>(s[0][2], s[0][3]);
        pa[2] = pack2<T>(s[1][0], s[1][1]);
        pa[3] = pack2<T>(s[1][2], s[1][3]);
#pragma unroll
        for(int j = 0; j < NO; j += 2)
        {
            uint32_t b0, b1, b2, b3;
            ldsm_x4_t(vt + voff[(j & 7) >> 1] + (j >> 3) * 128, b0, b1, b2, b3);
            mma16816<T>(o[j], pa, b0, b1);
            mma16816<T>(o[j + 1], pa, b2, b3);
        }
    }
    cp_async_wait<0>();
    // The merge kernel may be launched now (programmatic dependent launch); it still waits for this
    // grid to finish and flush before it reads a partial.
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
    __syncthreads(); // the ring is free: merge the four warps' partial softmaxes through it

    constexpr int OS = D + 8; // padded row stride of the merge buffers (floats)
    float* red_o = reinterpret_cast<float*>(s_k);        // [warps][16][OS]
    float* red_m = red_o + kDecWarps * kDecRows * OS;     // [warps][16]
    float* red_l = red_m + kDecWarps * kDecRows;          // [warps][16]
#pragma unroll
    for(int hf = 0; hf < 2; ++hf)
    {
        float lsum = l[hf];
        lsum += __shfl_xor_sync(0xffffffffu, lsum, 1);
        lsum += __shfl_xor_sync(0xffffffffu, lsum, 2);
        const int r = g + hf * 8;
        if(t == 0)
        {
            red_m[warp * kDecRows + r] = m[hf];
            red_l[warp * kDecRows + r] = lsum;
        }
        float* dst = red_o + (warp * kDecRows + r) * OS;
#pragma unroll
        for(int j = 0; j < NO; ++j)
            *reinterpret_cast<float2*>(dst + j * 8 + 2 * t) = make_float2(o[j][2 * hf], o[j][2 * hf + 1]);
    }
    __syncthreads();

    // 8 threads per row, D / 8 consecutive columns each.
    constexpr int PER = D / 8;
    const int r = tid >> 3, part = tid & 7;
    const int row = row0 + r;
    if(row >= rows)
        return;
    const int h = hk * da.group + row / a.sq;
    const int qpos = row % a.sq;
    float mw[kDecWarps];
    float mx = -INFINITY;
#pragma unroll
    for(int w = 0; w < kDecWarps; ++w)
    {
        mw[w] = red_m[w * kDecRows + r];
        mx = fmaxf(mx, mw[w]);
    }
    const float base = mx == -INFINITY ? 0.0f : mx;
    float lsum = 0.0f;
#pragma unroll
    for(int w = 0; w < kDecWarps; ++w)
    {
        mw[w] = fast_exp2(mw[w] - base); // now each warp's weight
        lsum += mw[w] * red_l[w * kDecRows + r];
    }
    const bool ok = qpos < len.sq && lsum > 0.0f;
    const float inv = ok ? 1.0f / lsum : 0.0f;
    float acc[PER];
#pragma unroll
    for(int c = 0; c < PER; ++c)
    {
        float x = 0.0f;
#pragma unroll
        for(int w = 0; w < kDecWarps; ++w)
            x += mw[w] * red_o[(w * kDecRows + r) * OS + part * PER + c];
        acc[c] = x * inv;
    }
    if(da.splits == 1)
    {
        uint16_t* orow = static_cast<uint16_t*>(a.o) + b * a.o_sb + h * a.o_sh + qpos * a.o_ss + part * PER;
#pragma unroll
        for(int c = 0; c < PER; c += 8)
        {
            if(part * PER + c >= a.dv) // columns of a padded D past v's head dim
                break;
            uint4 v;
            v.x = pack2<T>(acc[c + 0], acc[c + 1]);
            v.y = pack2<T>(acc[c + 2], acc[c + 3]);
            v.z = pack2<T>(acc[c + 4], acc[c + 5]);
            v.w = pack2<T>(acc[c + 6], acc[c + 7]);
            *reinterpret_cast<uint4*>(orow + c) = v;
        }
        if(a.stats != nullptr && part == 0)
            a.stats[b * a.st_sb + h * a.st_sh + qpos * a.st_ss]
                = ok ? (mx + __log2f(lsum)) * 0.69314718055994531f : -INFINITY;
        return;
    }
    const int64_t nrows = static_cast<int64_t>(a.batch) * a.hq * a.sq;
    const int64_t rid = (static_cast<int64_t>(b) * a.hq + h) * a.sq + qpos;
    const int64_t slot = split * nrows + rid;
    float* po = da.part_o + slot * D + part * PER;
#pragma unroll
    for(int c = 0; c < PER; c += 4)
        *reinterpret_cast<float4*>(po + c) = make_float4(acc[c], acc[c + 1], acc[c + 2], acc[c + 3]);
    if(part == 0)
    {
        da.part_m[slot] = ok ? mx : -INFINITY;
        da.part_l[slot] = ok ? lsum : 0.0f;
    }
}

// Merge of the splits: one warp per output row; lanes cover the head dim (D / 32 each).
constexpr int kMergeWarps = 4;

template <ElemType T, int D>
__global__ void __launch_bounds__(kMergeWarps * 32) sdpa_decode_merge(const SdpaArgs a, const DecodeArgs da)
{
    constexpr int PER = D / 32;
    // Launched early under the split kernel (programmatic dependent launch): wait for its results.
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    const int lane = static_cast<int>(threadIdx.x) & 31;
    const int64_t nrows = static_cast<int64_t>(a.batch) * a.hq * a.sq;
    const int64_t rid = static_cast<int64_t>(blockIdx.x) * kMergeWarps + (threadIdx.x >> 5);
    if(rid >= nrows)
        return;
    const int qpos = static_cast<int>(rid % a.sq);
    const int h = static_cast<int>((rid / a.sq) % a.hq);
    const int b = static_cast<int>(rid / (static_cast<int64_t>(a.sq) * a.hq));

    // Every lane loads the maxima and sums of its splits at once (one memory latency, not one per
    // split), the warp reduces them, and each lane keeps its splits' weights; the partial rows are
    // then read with no load waiting on another.
    constexpr int LSE_PER_LANE = static_cast<int>(kDecodeMaxSplits) / 32;
    float w_lane[LSE_PER_LANE], l_lane[LSE_PER_LANE];
    float mx = -INFINITY;
#pragma unroll
    for(int j = 0; j < LSE_PER_LANE; ++j)
    {
        const int i = j * 32 + lane;
        w_lane[j] = i < da.splits ? da.part_m[i * nrows + rid] : -INFINITY;
        l_lane[j] = i < da.splits ? da.part_l[i * nrows + rid] : 0.0f;
        mx = fmaxf(mx, w_lane[j]);
    }
#pragma unroll
    for(int off = 16; off > 0; off >>= 1)
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    const float base = mx == -INFINITY ? 0.0f : mx;
    float sum = 0.0f;
#pragma unroll
    for(int j = 0; j < LSE_PER_LANE; ++j)
    {
        w_lane[j] = fast_exp2(w_lane[j] - base) * l_lane[j]; // 0 for an empty split (-inf, 0)
        sum += w_lane[j];
    }
#pragma unroll
    for(int off = 16; off > 0; off >>= 1)
        sum += __shfl_xor_sync(0xffffffffu, sum, off);
    // Weights through shared memory (a lane's weights sit in registers indexed by split), then the
    // partial rows in groups of 8 whose loads are all issued before the first is used.
    __shared__ float s_w[kMergeWarps][kDecodeMaxSplits];
    const int warp = static_cast<int>(threadIdx.x) >> 5;
#pragma unroll
    for(int j = 0; j < LSE_PER_LANE; ++j)
        if(j * 32 + lane < da.splits)
            s_w[warp][j * 32 + lane] = w_lane[j];
    __syncwarp();
    using Vec = typename std::conditional<PER == 4, float4, float2>::type;
    float acc[PER];
#pragma unroll
    for(int c = 0; c < PER; ++c)
        acc[c] = 0.0f;
    constexpr int GROUP = 8;
    for(int i0 = 0; i0 < da.splits; i0 += GROUP)
    {
        Vec v[GROUP];
#pragma unroll
        for(int u = 0; u < GROUP; ++u)
        {
            const int i = min(i0 + u, da.splits - 1);
            v[u] = *reinterpret_cast<const Vec*>(da.part_o + (i * nrows + rid) * D + lane * PER);
        }
#pragma unroll
        for(int u = 0; u < GROUP; ++u)
        {
            const float w = i0 + u < da.splits ? s_w[warp][i0 + u] : 0.0f;
            if(w > 0.0f) // an empty split wrote zeros; the test keeps a stray non-finite partial out
            {
                const float* x = reinterpret_cast<const float*>(&v[u]);
#pragma unroll
                for(int c = 0; c < PER; ++c)
                    acc[c] += w * x[c];
            }
        }
    }
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    uint16_t* orow = static_cast<uint16_t*>(a.o) + b * a.o_sb + h * a.o_sh + qpos * a.o_ss + lane * PER;
    if(lane * PER < a.dv) // not the columns of a padded D past v's head dim (dv is a multiple of 8)
    {
        if constexpr(PER == 4)
            *reinterpret_cast<uint2*>(orow)
                = make_uint2(pack2<T>(acc[0] * inv, acc[1] * inv), pack2<T>(acc[2] * inv, acc[3] * inv));
        else
            *reinterpret_cast<uint32_t*>(orow) = pack2<T>(acc[0] * inv, acc[1] * inv);
    }
    if(a.stats != nullptr && lane == 0)
        a.stats[b * a.st_sb + h * a.st_sh + qpos * a.st_ss]
            = sum > 0.0f ? (mx + __log2f(sum)) * 0.69314718055994531f : -INFINITY;
}

template <ElemType T, int D>
hipError_t launch_decode_typed(const SdpaArgs& a, const DecodeArgs& da, hipStream_t stream)
{
    const dim3 grid(static_cast<unsigned>(da.splits * da.row_groups), static_cast<unsigned>(a.hk),
                    static_cast<unsigned>(a.batch));
    if(sdpa_needs_ext(a))
        hipLaunchKernelGGL((sdpa_decode_split<T, D, true>), grid, dim3(kDecThreads), kDecSmemBytes<D>, stream, a, da);
    else
        hipLaunchKernelGGL((sdpa_decode_split<T, D, false>), grid, dim3(kDecThreads), kDecSmemBytes<D>, stream, a,
                           da);
    hipError_t e = hipGetLastError();
    if(e != hipSuccess || da.splits == 1)
        return e;
    const int64_t nrows = static_cast<int64_t>(a.batch) * a.hq * a.sq;
    hipLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(static_cast<unsigned>((nrows + kMergeWarps - 1) / kMergeWarps));
    cfg.blockDim = dim3(kMergeWarps * 32);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = stream;
    hipLaunchAttribute attr[1];
    attr[0].id = hipLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    SdpaArgs a_copy = a;
    DecodeArgs da_copy = da;
    void* params[] = {&a_copy, &da_copy};
    return hipLaunchKernelExC(&cfg, reinterpret_cast<const void*>(&sdpa_decode_merge<T, D>), params);
}

template <ElemType T, int D>
hipError_t set_decode_attrs()
{
    const hipError_t e = hipFuncSetAttribute(reinterpret_cast<const void*>(&sdpa_decode_split<T, D, false>),
                                             hipFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(kDecSmemBytes<D>));
    return e != hipSuccess ? e
                           : hipFuncSetAttribute(reinterpret_cast<const void*>(&sdpa_decode_split<T, D, true>),
                                                 hipFuncAttributeMaxDynamicSharedMemorySize,
                                                 static_cast<int>(kDecSmemBytes<D>));
}

} // namespace

bool decode_kernel_built()
{
    return true;
}

hipError_t prepare_decode_kernels()
{
    hipError_t e;
    if((e = set_decode_attrs<ElemType::Bf16, 64>()) != hipSuccess)
        return e;
    if((e = set_decode_attrs<ElemType::Bf16, 128>()) != hipSuccess)
        return e;
    if((e = set_decode_attrs<ElemType::Half, 64>()) != hipSuccess)
        return e;
    return set_decode_attrs<ElemType::Half, 128>();
}

hipError_t launch_sdpa_decode(const SdpaArgs& a, ElemType t, void* workspace, size_t workspace_bytes, int sms,
                              hipStream_t stream)
{
    DecodeShape shape;
    shape.batch = a.batch;
    shape.hq = a.hq;
    shape.hk = a.hk;
    shape.sq = a.sq;
    shape.skv = a.skv;
    shape.d = kernel_head_dim(a.d, a.dv); // the partial rows are D floats wide
    // A short query under a top-left mask sees at most sq + R keys (R the right bound).
    shape.mask_top_left = a.mask_tl != 0 && a.hi_tl == 0;
    const int64_t limit = a.mask_tl != 0 ? std::min<int64_t>(a.skv, int64_t(a.sq) + a.hi_tl) : a.skv;
    // A window (without a padding mask, whose per-batch lengths only the device knows): no row sees a
    // key before the first position's window start, so the splits cover the keys from there (rounded
    // down to a tile), and are chosen for that many.
    int64_t start = 0;
    if(a.mask_lo && !a.padding)
    {
        const int64_t lo = int64_t(a.lo) + (a.lo_br ? int64_t(a.skv) - a.sq : 0);
        start = std::min<int64_t>(std::max<int64_t>(lo, 0), limit) / kDecodeKeys * kDecodeKeys;
        shape.skv = std::max<int64_t>(limit - start, 1);
        shape.mask_top_left = false;
    }
    int64_t splits = decode_splits_for(shape, sms);
    // The plan sized the workspace for its maximum shape; a call never takes more than it holds.
    const bool ws_usable = workspace != nullptr && (reinterpret_cast<uintptr_t>(workspace) & 15u) == 0;
    while(splits > 1 && (!ws_usable || decode_workspace_bytes(shape, splits) > workspace_bytes))
        --splits;
    const int64_t tiles = (limit - start + kDecodeKeys - 1) / kDecodeKeys;
    const int64_t chunk_tiles = splits > 1 ? (tiles + splits - 1) / splits : std::max<int64_t>(tiles, 1);
    if(splits > 1)
        splits = (tiles + chunk_tiles - 1) / chunk_tiles; // no trailing empty splits

    DecodeArgs da;
    da.kv_base = static_cast<int>(start);
    da.splits = static_cast<int>(splits);
    da.chunk = static_cast<int>(std::min<int64_t>(chunk_tiles * kDecodeKeys, int64_t(1) << 30));
    if(splits == 1)
        da.chunk = a.skv + static_cast<int>(kDecodeKeys); // one chunk covers every key
    da.group = a.hq / a.hk;
    da.row_groups = static_cast<int>(decode_row_groups(a.hq, a.hk, a.sq));
    if(splits > 1)
    {
        const int64_t nrows = static_cast<int64_t>(a.batch) * a.hq * a.sq;
        da.part_o = static_cast<float*>(workspace);
        da.part_m = da.part_o + splits * nrows * shape.d;
        da.part_l = da.part_m + splits * nrows;
    }
    const bool bf = t == ElemType::Bf16;
    if(shape.d == 64)
        return bf ? launch_decode_typed<ElemType::Bf16, 64>(a, da, stream)
                  : launch_decode_typed<ElemType::Half, 64>(a, da, stream);
    return bf ? launch_decode_typed<ElemType::Bf16, 128>(a, da, stream)
              : launch_decode_typed<ElemType::Half, 128>(a, da, stream);
}

#else // not NVIDIA: no decode kernel; the engine keeps its other kernels

bool decode_kernel_built()
{
    return false;
}

hipError_t prepare_decode_kernels()
{
    return hipSuccess;
}

hipError_t launch_sdpa_decode(const SdpaArgs& a, ElemType t, void*, size_t, int sms, hipStream_t stream)
{
    return launch_sdpa_tensor_core(a, t, DeviceShape{sms, 0}, stream);
}

#endif

} // namespace hipdnn_hip
