// hipdnn HIP engine: workspace of the SDPA backward, shared by the host (what a plan reports) and
// the launcher (how a call is cut into slices). Plain C++.
//
// The backward keeps, per query row, fp32 dQ partial sums (D floats: every key block adds its share
// atomically), the row's log-sum-exp in log2 units, delta = rowsum(dO * O), and the max and log2 sum
// of a row that sdpa_bwd_exact_rows recomputes (one float each); a pair also keeps one flag (int).
// A (batch, kv head) pair owns the rows of its G = Hq / Hk query heads, so one pair needs
// G * Sq128 * (D + 4) * 4 + 4 bytes, Sq128 being Sq rounded up to 128 rows: each head's rows then hold
// whole query tiles of the tensor-core kernel, whose dQ sums it adds a tile at a time
// (bwd_dq_offset). A call whose pairs do not all fit runs in slices of whole pairs, one slice after
// another on the stream; the plan reports enough for its maximum shape, capped at
// kBwdWorkspaceCap, so a large or dynamic (wildcard) plan costs at most that and runs sliced.
#ifndef HIPDNN_HIP_ENGINE_SDPA_BWD_PLAN_H
#define HIPDNN_HIP_ENGINE_SDPA_BWD_PLAN_H

#include <cstddef>
#include <cstdint>

// The row rule is also used by the kernels.
#if defined(__CUDACC__) || defined(__HIPCC__)
#define HIPDNN_BWD_HD __host__ __device__
#else
#define HIPDNN_BWD_HD
#endif

namespace hipdnn_hip
{

constexpr size_t kBwdWorkspaceCap = size_t(256) << 20; // 256 MiB
constexpr size_t kBwdWorkspaceAlign = 256;

// Workspace rows one head of one pair spans.
HIPDNN_BWD_HD inline int64_t bwd_rows_per_head(int64_t sq)
{
    return (sq + 127) / 128 * 128;
}

// Where the tensor-core kernel keeps dQ(row, col) of one head, in floats from the head's first.
// Rows come in tiles of BM (64 at D = 128, 128 at D = 64) of BM * D floats. A tile is two shares
// of 64 x 64, one per warpgroup (column halves at D = 128, row halves at D = 64), each held in the
// order of the warpgroup's accumulator registers: for thread u = 32 * (r / 16) + 4 * (r % 8) +
// (c % 8) / 2, register 4 * (c / 8) + 2 * ((r % 16) / 8) + c % 2 is float 4 * u + that register's
// low two bits of group c / 8 (groups of 128 threads * 4 floats).
HIPDNN_BWD_HD inline int64_t bwd_dq_offset(int row, int col, int d)
{
    const int bm = d == 128 ? 64 : 128;
    const int r0 = row % bm;
    const int half = d == 128 ? col / 64 : r0 / 64;
    const int r = r0 % 64, c = col % 64;
    const int u = 32 * (r / 16) + 4 * (r % 8) + (c % 8) / 2;
    const int within = ((c / 8) * 128 + u) * 4 + 2 * ((r % 16) / 8) + c % 2;
    return static_cast<int64_t>(row / bm) * bm * d + half * 4096 + within;
}

// Bytes one (batch, kv head) pair uses at this call's shape (0 for an empty call).
inline size_t bwd_pair_bytes(int64_t hq, int64_t hk, int64_t sq, int64_t d)
{
    if(hq <= 0 || hk <= 0 || sq <= 0 || d <= 0)
        return 0;
    const int64_t rows = (hq / hk) * bwd_rows_per_head(sq);
    const size_t b = static_cast<size_t>(rows) * static_cast<size_t>(d + 4) * sizeof(float) + sizeof(int);
    return (b + kBwdWorkspaceAlign - 1) / kBwdWorkspaceAlign * kBwdWorkspaceAlign;
}

// What a plan reports: every pair of its maximum shape, capped; unknown (<= 0, wildcard) dims take
// the cap. kBwdWorkspaceAlign more lets the launcher align a workspace pointer it is given.
inline size_t bwd_plan_workspace(int64_t batch, int64_t hq, int64_t hk, int64_t sq, int64_t d)
{
    if(batch <= 0 || hq <= 0 || hk <= 0 || sq <= 0 || d <= 0)
        return kBwdWorkspaceCap + kBwdWorkspaceAlign;
    const size_t pair = bwd_pair_bytes(hq, hk, sq, d);
    const double total = static_cast<double>(pair) * static_cast<double>(batch) * static_cast<double>(hk);
    if(total >= static_cast<double>(kBwdWorkspaceCap))
        return kBwdWorkspaceCap + kBwdWorkspaceAlign;
    return pair * static_cast<size_t>(batch * hk) + kBwdWorkspaceAlign;
}

// Pairs one slice holds (0: not even one fits) in a workspace of workspace_bytes, whatever its
// alignment.
inline int64_t bwd_pairs_per_slice(size_t workspace_bytes, int64_t hq, int64_t hk, int64_t sq, int64_t d)
{
    const size_t pair = bwd_pair_bytes(hq, hk, sq, d);
    if(pair == 0)
        return INT64_MAX;
    if(workspace_bytes <= kBwdWorkspaceAlign)
        return 0;
    return static_cast<int64_t>((workspace_bytes - kBwdWorkspaceAlign) / pair);
}

} // namespace hipdnn_hip

#endif // HIPDNN_HIP_ENGINE_SDPA_BWD_PLAN_H
