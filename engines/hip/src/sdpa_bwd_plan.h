// hipdnn HIP engine: workspace of the SDPA backward, shared by the host (what a plan reports) and
// the launcher (how a call is cut into slices). Plain C++.
//
// The backward keeps, per query row, fp32 dQ partial sums (D floats: every key block adds its share
// atomically), the row's log-sum-exp in log2 units and delta = rowsum(dO * O) (one float each).
// A (batch, kv head) pair owns the rows of its Hq / Hk query heads, so one pair needs
// G * Sq * (D + 2) * 4 bytes. A call whose pairs do not all fit runs in slices of whole pairs, one
// slice after another on the stream; the plan reports enough for its maximum shape, capped at
// kBwdWorkspaceCap, so a large or dynamic (wildcard) plan costs at most that and runs sliced.
#ifndef HIPDNN_HIP_ENGINE_SDPA_BWD_PLAN_H
#define HIPDNN_HIP_ENGINE_SDPA_BWD_PLAN_H

#include <cstddef>
#include <cstdint>

namespace hipdnn_hip
{

constexpr size_t kBwdWorkspaceCap = size_t(256) << 20; // 256 MiB
constexpr size_t kBwdWorkspaceAlign = 256;

// Bytes one (batch, kv head) pair uses at this call's shape (0 for an empty call).
inline size_t bwd_pair_bytes(int64_t hq, int64_t hk, int64_t sq, int64_t d)
{
    if(hq <= 0 || hk <= 0 || sq <= 0 || d <= 0)
        return 0;
    const int64_t rows = (hq / hk) * sq;
    const size_t b = static_cast<size_t>(rows) * static_cast<size_t>(d + 2) * sizeof(float);
    return (b + kBwdWorkspaceAlign - 1) / kBwdWorkspaceAlign * kBwdWorkspaceAlign;
}

// What a plan reports: every pair of its maximum shape, capped; unknown (<= 0, wildcard) dims take
// the cap.
inline size_t bwd_plan_workspace(int64_t batch, int64_t hq, int64_t hk, int64_t sq, int64_t d)
{
    if(batch <= 0 || hq <= 0 || hk <= 0 || sq <= 0 || d <= 0)
        return kBwdWorkspaceCap;
    const size_t pair = bwd_pair_bytes(hq, hk, sq, d);
    const double total = static_cast<double>(pair) * static_cast<double>(batch) * static_cast<double>(hk);
    if(total >= static_cast<double>(kBwdWorkspaceCap))
        return kBwdWorkspaceCap;
    return pair * static_cast<size_t>(batch * hk);
}

// Pairs one slice holds (0: not even one fits).
inline int64_t bwd_pairs_per_slice(size_t workspace_bytes, int64_t hq, int64_t hk, int64_t sq, int64_t d)
{
    const size_t pair = bwd_pair_bytes(hq, hk, sq, d);
    return pair == 0 ? INT64_MAX : static_cast<int64_t>(workspace_bytes / pair);
}

} // namespace hipdnn_hip

#endif // HIPDNN_HIP_ENGINE_SDPA_BWD_PLAN_H
