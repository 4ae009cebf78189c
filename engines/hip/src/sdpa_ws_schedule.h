// hipdnn HIP engine: the work schedule of the warp-specialized forward kernel (sdpa_fwd_ws),
// shared by the launcher, the kernel and a host-side test (tests/test_hip_ws_schedule.py). Plain C++.
#ifndef HIPDNN_HIP_ENGINE_SDPA_WS_SCHEDULE_H
#define HIPDNN_HIP_ENGINE_SDPA_WS_SCHEDULE_H

#include <cstdint>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define HIPDNN_WS_HD __host__ __device__
#else
#define HIPDNN_WS_HD
#endif

namespace hipdnn_hip
{

// The work of a launch: units of two items, an item being a query block of one (batch, head)
// (bh = b * hq + h). A unit is either a pair of query blocks of one head, nqb - 1 - p and p,
// computed in that order (the longer first: under a causal mask every pair has the same work,
// nqb + 1 key tiles, so units are balanced without a work queue), or, when the count nqb is odd,
// the middle blocks of two neighbouring heads (again nqb + 1 tiles; half a unit if the heads'
// count is odd too). Equal units matter: the kernel is persistent, block x of the grid walks units
// x, x + grid, x + 2 grid, ... back to back, and with the middle block a unit of its own every
// block whose stride lands on it would do half the work of the others (D = 64, S = 2048:
// 11 blocks of 192 rows, 6 units per head, and a grid of 132 lands on the same pair index
// every time). Units are numbered so that the ones running at once are neighbours: heads in
// groups of two ("super-heads"), each group's pairs, then its middle pair. So the blocks running
// at once work on a few heads, whose K and V stay in the L2, and every item after a block's first
// has its Q and first K / V tiles brought while the item before it is still computing.
// Division by a divisor fixed for a launch, as a multiply-high and a shift prepared on the host
// (for dividends below 2^31). Why not '/': a division by a runtime value is a floating-point
// reciprocal sequence on the vector pipes, so everything the kernel derives from the item
// schedule (the K / V ring position, shared-memory addresses, the wgmma descriptors) would leave
// the uniform registers and be copied back before every wgmma of the inner loop (measured
// 2-5% slower at long sequences); multiply-high and shift stay on the uniform datapath.
struct WsDivisor
{
    uint32_t mul = 1;
    uint32_t shift = 0;

    WsDivisor() = default;
    explicit WsDivisor(uint32_t d) // d >= 1
    {
        while((uint64_t(1) << shift) < d)
            ++shift;
        mul = static_cast<uint32_t>(((uint64_t(1) << 32) * ((uint64_t(1) << shift) - d)) / d + 1);
    }
    HIPDNN_WS_HD uint32_t div(uint32_t n) const // n < 2^31
    {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
        const uint32_t hi = __umulhi(n, mul);
#else
        const uint32_t hi = static_cast<uint32_t>((uint64_t(n) * mul) >> 32);
#endif
        return (hi + n) >> shift;
    }
};

struct WsSchedule
{
    int nqb = 0;   // query blocks of BM rows
    int heads = 0; // batch * hq
    int units = 0;
    int last_half = 0;  // the last unit has one item (odd counts of both query blocks and heads)
    int last_owner = 0; // the block of the grid that walks the last unit: (units - 1) % grid
    WsDivisor by_pairs; // nqb / 2 (even nqb) or the units per super-head, 2 * ((nqb - 1) / 2) + 1 (odd)
    WsDivisor by_hq;    // query heads
    WsDivisor by_group; // query heads per kv head
};

// Units of a launch (64-bit: ws_make_schedule refuses counts past 2^31 - 1).
HIPDNN_WS_HD inline int64_t ws_unit_count(int64_t nqb, int64_t heads)
{
    if((nqb & 1) == 0)
        return heads * (nqb / 2);
    const int64_t pairs = (nqb - 1) / 2; // full pairs per head
    return heads / 2 * (2 * pairs + 1) + (heads & 1) * (pairs + 1);
}

// The schedule of a launch: nqb query blocks of each of batch * hq heads. False when the heads or
// the units do not fit the kernel's 32-bit numbers (far beyond any device's memory).
inline bool ws_make_schedule(int nqb, int batch, int hq, int hk, WsSchedule& s)
{
    const int64_t heads = int64_t(batch) * hq;
    const int64_t units = ws_unit_count(nqb, heads);
    if(heads > 0x7fffffff || units > 0x7fffffff)
        return false;
    s = WsSchedule{};
    s.nqb = nqb;
    s.heads = static_cast<int>(heads);
    s.units = static_cast<int>(units);
    s.last_half = (nqb & 1) && (heads & 1);
    const int pairs = (nqb - 1) / 2;
    s.by_pairs = WsDivisor(static_cast<uint32_t>((nqb & 1) == 0 ? (nqb > 0 ? nqb / 2 : 1) : 2 * pairs + 1));
    s.by_hq = WsDivisor(static_cast<uint32_t>(hq > 0 ? hq : 1));
    s.by_group = WsDivisor(static_cast<uint32_t>(hq > 0 && hk > 0 ? hq / hk : 1));
    return true;
}

// Unit u's first (second = 0) or second item: head bh and query block; false for the void second
// half of a lone middle block (odd counts of both).
HIPDNN_WS_HD inline bool ws_unit_item(const WsSchedule& sc, int u, int second, int& bh, int& qblock)
{
    const int nqb = sc.nqb;
    if((nqb & 1) == 0)
    {
        const int pairs = nqb / 2;
        bh = static_cast<int>(sc.by_pairs.div(static_cast<uint32_t>(u)));
        const int p = u - bh * pairs;
        qblock = second ? p : nqb - 1 - p;
        return true;
    }
    const int pairs = (nqb - 1) / 2;
    const int per = 2 * pairs + 1; // units per super-head
    const int sh = static_cast<int>(sc.by_pairs.div(static_cast<uint32_t>(u)));
    const int k = u - sh * per;
    const int nh = sc.heads - 2 * sh < 2 ? sc.heads - 2 * sh : 2;
    if(k < nh * pairs)
    {
        const int second_head = k >= pairs ? 1 : 0; // k < 2 * pairs
        const int p = k - second_head * pairs;
        bh = 2 * sh + second_head;
        qblock = second ? p : nqb - 1 - p;
        return true;
    }
    bh = 2 * sh + second;
    qblock = pairs;
    return bh < sc.heads;
}

} // namespace hipdnn_hip

#endif // HIPDNN_HIP_ENGINE_SDPA_WS_SCHEDULE_H
