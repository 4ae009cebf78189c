// hipdnn HIP engine: host-side planning of the split-KV decode path (engine 202).
//
// Plain C++ shared by the engine's host code (workspace sizing at plan time) and the decode
// launcher (the split count of each call), so both apply the same rule. No GPU code here.
//
// The decode kernel serves calls whose effective query length is small (speculative decoding
// included). A block owns one (batch, KV head, split, row group): its rows are the query rows of
// every query head sharing that KV head (grouped-query packing: G = Hq / Hk heads x Sq positions,
// kDecodeRows per row group), and its keys are one contiguous chunk of the KV length. With more
// than one split, each block writes a partial output (fp32, normalised), its max and its sum to
// the workspace, and a second kernel merges the splits of each row.
#ifndef HIPDNN_HIP_ENGINE_SDPA_DECODE_PLAN_H
#define HIPDNN_HIP_ENGINE_SDPA_DECODE_PLAN_H

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace hipdnn_hip
{

constexpr int64_t kDecodeMaxSq = 16;   // query lengths the decode path takes
constexpr int64_t kDecodeRows = 16;    // query rows per block (one m16 tile of mma.sync)
constexpr int64_t kDecodeKeys = 64;    // keys per block tile (16 per warp, 4 warps)
constexpr int64_t kDecodeMaxSplits = 128;
constexpr int64_t kDecodeMaxWaves = 4; // split blocks are capped at this many waves of the device

// Blocks of the decode kernel resident on one multiprocessor (shared memory bound).
constexpr int64_t decode_blocks_per_sm(int64_t d)
{
    return d == 64 ? 3 : 2;
}

constexpr int64_t decode_row_groups(int64_t hq, int64_t hk, int64_t sq)
{
    return ((hq / hk) * sq + kDecodeRows - 1) / kDecodeRows;
}

// How many chunks the KV length is cut into, given the blocks one split has (batch x KV heads x
// row groups), the key tiles to cover and the device's block slots. Every chunk length (in tiles)
// is tried, each with the split count it really makes, ceil(tiles / chunk), up to kDecodeMaxWaves
// waves of blocks; the count whose last wave is fullest wins (decode streams memory: idle
// multiprocessors are lost bandwidth, and a grid of 1.3 waves leaves most of them idle for the
// second), the fewest splits among those within 5% of it (each split adds a partial row to write
// and merge).
inline int64_t decode_splits(int64_t base_blocks, int64_t kv_tiles, int64_t slots)
{
    if(base_blocks <= 0 || kv_tiles <= 1 || slots <= 0)
        return 1;
    const int64_t cap = std::min({kDecodeMaxSplits, kv_tiles, std::max<int64_t>(1, kDecodeMaxWaves * slots / base_blocks)});
    auto fill = [&](int64_t s) {
        const double waves = static_cast<double>(base_blocks * s) / static_cast<double>(slots);
        return waves / std::ceil(waves);
    };
    double best = 0.0;
    for(int64_t s = 1; s <= cap; ++s)
        best = std::max(best, fill((kv_tiles + (kv_tiles + s - 1) / s - 1) / ((kv_tiles + s - 1) / s)));
    for(int64_t s = 1; s <= cap; ++s)
    {
        const int64_t chunk = (kv_tiles + s - 1) / s;
        const int64_t made = (kv_tiles + chunk - 1) / chunk;
        if(fill(made) >= 0.95 * best)
            return made;
    }
    return 1;
}

// Keys the rows of a call can see at most: all of them, except under a top-left causal mask,
// where query position i sees keys 0..i only.
inline int64_t decode_kv_limit(int64_t sq, int64_t skv, bool mask_top_left)
{
    return mask_top_left ? std::min(skv, sq) : skv;
}

struct DecodeShape
{
    int64_t batch = 0, hq = 0, hk = 0, sq = 0, skv = 0, d = 0;
    bool mask_top_left = false;
};

// Bytes of workspace one call of this shape uses with `splits` splits: the partial outputs
// (fp32, [splits][B * Hq * Sq][D]) and their maxima and sums ([splits][B * Hq * Sq] each).
inline size_t decode_workspace_bytes(const DecodeShape& s, int64_t splits)
{
    if(splits <= 1)
        return 0;
    const int64_t rows = s.batch * s.hq * s.sq;
    return static_cast<size_t>(splits) * static_cast<size_t>(rows) * static_cast<size_t>(s.d + 2) * sizeof(float);
}

inline int64_t decode_splits_for(const DecodeShape& s, int64_t sms)
{
    const int64_t base = s.batch * s.hk * decode_row_groups(s.hq, s.hk, s.sq);
    const int64_t tiles = (decode_kv_limit(s.sq, s.skv, s.mask_top_left) + kDecodeKeys - 1) / kDecodeKeys;
    return decode_splits(base, tiles, sms * decode_blocks_per_sm(s.d));
}

// The workspace a plan reports: enough for every call its maximum shape allows. Split blocks are
// capped at kDecodeMaxWaves waves, so calls whose batch alone fills that many need none, and the
// bound below does not grow with the batch.
// Unknown (dynamic, -1) batch, heads or lengths take the general bound: at most
// kDecodeMaxWaves * slots blocks of kDecodeRows rows each.
inline size_t decode_plan_workspace(const DecodeShape& max_shape, int64_t sms)
{
    if(max_shape.mask_top_left)
        return 0; // a short query sees only its first kDecodeMaxSq keys: one tile, never split
    const int64_t slots = sms * decode_blocks_per_sm(max_shape.d);
    const size_t general = static_cast<size_t>(kDecodeMaxWaves * slots * kDecodeRows) * static_cast<size_t>(max_shape.d + 2)
                           * sizeof(float);
    if(max_shape.batch <= 0 || max_shape.hq <= 0 || max_shape.hk <= 0 || max_shape.sq <= 0 || max_shape.skv <= 0)
        return general;
    size_t need = 0;
    DecodeShape s = max_shape;
    const int64_t batch_cap = std::min<int64_t>(max_shape.batch, kDecodeMaxWaves * slots); // larger: no split
    for(int64_t b = 1; b <= batch_cap; ++b)
        for(int64_t q = 1; q <= std::min(max_shape.sq, kDecodeMaxSq); ++q)
        {
            s.batch = b;
            s.sq = q;
            need = std::max(need, decode_workspace_bytes(s, decode_splits_for(s, sms)));
        }
    return std::min(need, general);
}

} // namespace hipdnn_hip

#endif // HIPDNN_HIP_ENGINE_SDPA_DECODE_PLAN_H
