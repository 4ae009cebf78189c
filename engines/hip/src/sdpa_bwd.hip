// hipdnn HIP engine: SDPA backward (dQ, dK, dV) on both tiers -- the launcher, the pre-pass, the
// portable kernels (engine 201, any HIP GPU) and the dQ conversion of the tensor-core tier.
//
// A call runs in slices of (batch, kv head) pairs sized by its workspace (sdpa_bwd_plan.h). Per
// slice:
//   1. pre-pass: per query row, delta = rowsum(dO * O) and the forward's log-sum-exp in log2 units
//      (+inf for rows past the batch's query length and rows the forward saw empty, stats -inf, so
//      that their probabilities are exactly 0); the tensor-core tier also clears its fp32 dQ sums.
//      With a bias, rows whose stats cannot hold their softmax sum (a bias near -1e30 on every key
//      they see) are recomputed and kept out of steps 2-3, then given their gradients by portable
//      kernels of their own ("Rows the forward's stats cannot serve" below).
//   2. tensor-core tier (sdpa_bwd_wg_kernel.hip): one block per 128 keys of a pair walks every
//      visible query tile of the pair's query heads, keeps dK and dV in registers and adds its dQ
//      share of each tile to the fp32 sums (kept in its register order, bwd_dq_offset); 3. a last
//      kernel puts the sums back in row order, scaled, into dQ.
//   2'. portable tier: 16 lanes per key compute its dK and dV rows, 16 lanes per query row its dQ
//      row, both recomputing the probabilities (fp32, no shared memory; width-16 exchanges only, so
//      the same code runs on 32- and 64-wide wavefronts).
// Rows and keys past a batch's lengths (padding mask) get zero gradients; nothing past the call's
// shape is written.
#include "sdpa_bwd_internal.h"
#include "sdpa_bwd_plan.h"
#include "sdpa_device_common.h"

namespace hipdnn_hip
{

namespace
{

constexpr float kLog2e = 1.4426950408889634f;
constexpr int64_t kMaxSlicePairs = 65535; // pairs run along a grid dimension limited to this

// The pair a slice's grid index stands for.
struct Pair
{
    int b;
    int hk;
};

// (32-bit: a call's pairs and one pair's workspace floats stay below 2^31, checked at launch;
// 64-bit divisions cost the small kernels more than their memory traffic.)
__device__ __forceinline__ Pair pair_of(const BwdSlice& s, int z)
{
    const unsigned p = static_cast<unsigned>(s.p0 + z);
    const unsigned hk = static_cast<unsigned>(s.a.f.hk);
    return Pair{static_cast<int>(p / hk), static_cast<int>(p % hk)};
}

// Workspace index of row i of head-in-group hh of slice pair z.
__device__ __forceinline__ int64_t ws_row(const BwdSlice& s, int z, int hh, int i)
{
    const int group = s.a.f.hq / s.a.f.hk;
    return (static_cast<int64_t>(z) * group + hh) * bwd_rows_per_head(s.a.f.sq) + i;
}

// dO . O over 8 elements held as 16 bytes each.
template <ElemType T>
__device__ __forceinline__ float dot8(const uint4& a, const uint4& b)
{
    const uint16_t* x = reinterpret_cast<const uint16_t*>(&a);
    const uint16_t* y = reinterpret_cast<const uint16_t*>(&b);
    float acc = 0.0f;
#pragma unroll
    for(int e = 0; e < 8; ++e)
        acc += load_as_float<T>(x + e) * load_as_float<T>(y + e);
    return acc;
}

// L = D / 8 lanes per query row (256 / L rows a block): delta, lse2 and (when zero_accum) the
// row's dQ sums cleared. Rows of dO and O with unit column stride and 16-byte alignment are read
// 16 bytes a lane, so every lane loads (the kernel is bound by loads in flight).
template <ElemType T, int L>
__global__ void __launch_bounds__(256) sdpa_bwd_prepass(const BwdSlice s, int zero_accum)
{
    constexpr int R = 256 / L; // rows per block
    const SdpaArgs& f = s.a.f;
    const int group = f.hq / f.hk;
    const int lane = static_cast<int>(threadIdx.x) & (L - 1);
    // Over every workspace row of the pair, the padding after each head's sq rows included, so
    // that the tensor-core kernel's 16-byte copies never read an unwritten value.
    const int per_head = static_cast<int>(bwd_rows_per_head(f.sq));
    const int r = static_cast<int>(blockIdx.x) * R + static_cast<int>(threadIdx.x) / L;
    const int z = static_cast<int>(blockIdx.y);
    const bool in_range = r < group * per_head;
    const int hh = in_range ? static_cast<int>(r / per_head) : 0;
    const int i = in_range ? static_cast<int>(r % per_head) : 0;
    const Pair pr = pair_of(s, z);
    const int h = pr.hk * group + hh;
    const BatchLengths len = batch_lengths(f, pr.b);
    const bool live = in_range && i < len.sq;
    float dot = 0.0f;
    if(live)
    {
        const uint16_t* dop = static_cast<const uint16_t*>(s.a.dout) + pr.b * s.a.do_sb + h * s.a.do_sh
                              + static_cast<int64_t>(i) * s.a.do_ss;
        const uint16_t* op = static_cast<const uint16_t*>(f.o) + pr.b * f.o_sb + h * f.o_sh
                             + static_cast<int64_t>(i) * f.o_ss;
        // 16 bytes a lane only where v's head dim is whole chunks (else the last one would read past it).
        if(s.a.do_sd == 1 && f.o_sd == 1 && f.dv % 8 == 0
           && ((reinterpret_cast<uintptr_t>(dop) | reinterpret_cast<uintptr_t>(op)) & 15) == 0)
        {
            for(int d = 8 * lane; d < f.dv; d += 8 * L) // (o and dO have v's head dim)
                dot += dot8<T>(*reinterpret_cast<const uint4*>(dop + d), *reinterpret_cast<const uint4*>(op + d));
        }
        else
        {
            for(int d = lane; d < f.dv; d += L)
                dot += load_as_float<T>(dop + d * s.a.do_sd) * load_as_float<T>(op + d * f.o_sd);
        }
    }
    // Every lane of the wavefront takes part (rows past the end included), so the width-L
    // exchanges are well defined on 32- and 64-wide wavefronts.
    for(int m = L / 2; m >= 1; m >>= 1)
        dot += HIPDNN_SHFL_XOR(dot, m, L);
    if(!in_range)
        return;
    const int64_t w = ws_row(s, z, hh, i);
    if(lane == 0)
    {
        float l2 = INFINITY;
        if(live)
        {
            const float st = f.stats[pr.b * f.st_sb + h * f.st_sh + static_cast<int64_t>(i) * f.st_ss];
            l2 = st == -INFINITY ? INFINITY : st * kLog2e;
        }
        s.lse2[w] = l2;
        s.delta[w] = live ? dot : 0.0f;
        s.lgl[w] = 0.0f;
        s.mrow[w] = INFINITY; // (sdpa_bwd_exact_rows: not recomputed)
        if(blockIdx.x == 0 && threadIdx.x == 0)
            s.exact[z] = 0;
    }
    if(zero_accum)
        for(int c = lane; c < s.w / 4; c += L) // (the sums are 256-byte aligned, w a multiple of 64)
            reinterpret_cast<float4*>(s.dq_accum + w * s.w)[c] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
}

// Portable tier. A row (a key for dK / dV, a query row for dQ) is served by 16 lanes, each holding
// D / 16 of its head-dim entries in registers; the dot products over D are summed across the 16 with
// width-16 exchanges, which mean the same on 32- and 64-wide wavefronts. Every lane of a wavefront
// runs the same loop (the block's widest range, with out-of-range terms masked), so no exchange is
// ever made by part of a wavefront.
constexpr int kPortableRows = 16; // rows per block of 256 threads

__device__ __forceinline__ float sum16(float v)
{
    for(int m = 8; m >= 1; m >>= 1)
        v += HIPDNN_SHFL_XOR(v, m, 16);
    return v;
}

// dK and dV: one key per 16 lanes, every query row of the group that sees it. Ext: a left bound
// (window), a bias, ALiBi or a softcap (sdpa_needs_ext); the kernel without them is compiled as
// before.
template <ElemType T, int D, bool Ext>
__global__ void __launch_bounds__(256) sdpa_bwd_portable_dkdv(const BwdSlice s)
{
    constexpr int DL = D / 16;
    const SdpaBwdArgs& a = s.a;
    const SdpaArgs& f = a.f;
    const int lane = static_cast<int>(threadIdx.x) & 15;
    const int d0 = lane * DL;
    const int j0 = static_cast<int>(blockIdx.x) * kPortableRows; // the block's first key
    const int j = j0 + static_cast<int>(threadIdx.x >> 4);
    const int z = static_cast<int>(blockIdx.y);
    const Pair pr = pair_of(s, z);
    const int group = f.hq / f.hk;
    const BatchLengths len = batch_lengths(f, pr.b);
    const bool live = j < len.skv; // (len.skv <= f.skv)
    float kj[DL], vj[DL], dk[DL], dv[DL];
    const uint16_t* kp = static_cast<const uint16_t*>(f.k) + pr.b * f.k_sb + pr.hk * f.k_sh
                         + static_cast<int64_t>(live ? j : 0) * f.k_ss;
    const uint16_t* vp = static_cast<const uint16_t*>(f.v) + pr.b * f.v_sb + pr.hk * f.v_sh
                         + static_cast<int64_t>(live ? j : 0) * f.v_ss;
#pragma unroll
    for(int e = 0; e < DL; ++e)
    {
        // Columns past a tensor's own head dim (D padded: d for q, k; dv for v, dO) are zeros.
        kj[e] = live && d0 + e < f.d ? load_as_float<T>(kp + (d0 + e) * f.k_sd) : 0.0f;
        vj[e] = live && d0 + e < f.dv ? load_as_float<T>(vp + (d0 + e) * f.v_sd) : 0.0f;
        dk[e] = dv[e] = 0.0f;
    }
    const int first_j = max(0, j - len.diag);      // query i sees key j iff j <= i + diag
    const int first = max(0, j0 - len.diag);       // the block's widest range starts here
    // Window: query i sees key j only if i <= j - lo; the block's widest range ends at its last key's.
    const int stop = Ext ? min(len.sq, j0 + kPortableRows - len.lo) : len.sq;
    for(int hh = 0; hh < group; ++hh)
    {
        const int h = pr.hk * group + hh;
        const uint16_t* qh = static_cast<const uint16_t*>(f.q) + pr.b * f.q_sb + h * f.q_sh;
        const uint16_t* doh = static_cast<const uint16_t*>(a.dout) + pr.b * a.do_sb + h * a.do_sh;
        const unsigned char* bh = Ext && f.bias != nullptr ? bias_head(f, pr.b, h) : nullptr;
        const float alibi2 = Ext && f.alibi ? alibi_slope(h, f.hq) * kLog2e : 0.0f;
        for(int i = first; i < stop; ++i)
        {
            const int64_t w = ws_row(s, z, hh, i);
            const uint16_t* qi = qh + static_cast<int64_t>(i) * f.q_ss;
            const uint16_t* doi = doh + static_cast<int64_t>(i) * a.do_ss;
            float qv[DL], dov[DL], sc = 0.0f, dp = 0.0f;
#pragma unroll
            for(int e = 0; e < DL; ++e)
            {
                qv[e] = d0 + e < f.d ? load_as_float<T>(qi + (d0 + e) * f.q_sd) : 0.0f;
                dov[e] = d0 + e < f.dv ? load_as_float<T>(doi + (d0 + e) * a.do_sd) : 0.0f;
                sc += qv[e] * kj[e];
                dp += dov[e] * vj[e];
            }
            sc = sum16(sc);
            dp = sum16(dp);
            const float l2 = s.lse2[w]; // +inf: a row that contributes nothing
            bool on = live && i >= first_j && l2 != INFINITY;
            float lg = sc * f.scale_log2;
            float dcap = 1.0f; // d cap(u) / du at u = scale q.k
            if constexpr(Ext)
            {
                on = on && i <= j - len.lo;
                if(f.softcap > 0.0f)
                    lg = softcapped_log2(sc * a.scale, f.softcap, dcap);
                lg = fmaf(alibi2, static_cast<float>(j - i), lg);
                if(bh != nullptr) // (clamped key: a key past skv is not live)
                    lg += kLog2e * bias_at(bh, f.bias_type, f.bias_ss, i, min(j, f.skv - 1));
            }
            const float p = on ? exp2f(lg - l2) : 0.0f;
            const float ds = on ? p * (dp - s.delta[w]) * dcap : 0.0f;
#pragma unroll
            for(int e = 0; e < DL; ++e)
            {
                dv[e] += p * dov[e];
                dk[e] += ds * qv[e];
            }
        }
    }
    if(j >= f.skv)
        return;
    uint16_t* dkp = static_cast<uint16_t*>(a.dk) + pr.b * a.dk_sb + pr.hk * a.dk_sh + static_cast<int64_t>(j) * a.dk_ss;
    uint16_t* dvp = static_cast<uint16_t*>(a.dv) + pr.b * a.dv_sb + pr.hk * a.dv_sh + static_cast<int64_t>(j) * a.dv_ss;
#pragma unroll
    for(int e = 0; e < DL; ++e)
    {
        if(d0 + e < f.d)
            dkp[(d0 + e) * a.dk_sd] = float_to_bits<T>(dk[e] * a.scale);
        if(d0 + e < f.dv)
            dvp[(d0 + e) * a.dv_sd] = float_to_bits<T>(dv[e]);
    }
}

// dQ: one query row per 16 lanes, every key it sees (Ext as for dK, dV).
template <ElemType T, int D, bool Ext>
__global__ void __launch_bounds__(256) sdpa_bwd_portable_dq(const BwdSlice s)
{
    constexpr int DL = D / 16;
    const SdpaBwdArgs& a = s.a;
    const SdpaArgs& f = a.f;
    const int lane = static_cast<int>(threadIdx.x) & 15;
    const int d0 = lane * DL;
    const int i0 = static_cast<int>(blockIdx.x) * kPortableRows;
    const int i = i0 + static_cast<int>(threadIdx.x >> 4);
    const int hh = static_cast<int>(blockIdx.y);
    const int z = static_cast<int>(blockIdx.z);
    const Pair pr = pair_of(s, z);
    const int h = pr.hk * (f.hq / f.hk) + hh;
    const BatchLengths len = batch_lengths(f, pr.b);
    const bool live = i < len.sq; // (len.sq <= f.sq)
    const int64_t w = ws_row(s, z, hh, live ? i : 0);
    const float l2 = live ? s.lse2[w] : INFINITY;
    const float delta = live ? s.delta[w] : 0.0f;
    float qv[DL], dov[DL], dq[DL];
    const uint16_t* qp = static_cast<const uint16_t*>(f.q) + pr.b * f.q_sb + h * f.q_sh
                         + static_cast<int64_t>(live ? i : 0) * f.q_ss;
    const uint16_t* dop = static_cast<const uint16_t*>(a.dout) + pr.b * a.do_sb + h * a.do_sh
                          + static_cast<int64_t>(live ? i : 0) * a.do_ss;
#pragma unroll
    for(int e = 0; e < DL; ++e)
    {
        qv[e] = live && d0 + e < f.d ? load_as_float<T>(qp + (d0 + e) * f.q_sd) : 0.0f;
        dov[e] = live && d0 + e < f.dv ? load_as_float<T>(dop + (d0 + e) * a.do_sd) : 0.0f;
        dq[e] = 0.0f;
    }
    const int end_i = live ? min(len.skv, i + len.diag + 1) : 0;
    // The block's widest range: its last row's (rows past the length see none).
    const int last = min(i0 + kPortableRows, len.sq) - 1;
    const int end = last < i0 ? 0 : max(0, min(len.skv, last + len.diag + 1));
    const uint16_t* kh = static_cast<const uint16_t*>(f.k) + pr.b * f.k_sb + pr.hk * f.k_sh;
    const uint16_t* vh = static_cast<const uint16_t*>(f.v) + pr.b * f.v_sb + pr.hk * f.v_sh;
    // Window: row i sees no key before i + lo; the block's widest range starts at its first row's.
    const int begin = Ext ? max(0, i0 + len.lo) : 0;
    const unsigned char* bh = Ext && f.bias != nullptr ? bias_head(f, pr.b, h) : nullptr;
    const float alibi2 = Ext && f.alibi ? alibi_slope(h, f.hq) * kLog2e : 0.0f;
    for(int j = begin; j < end; ++j)
    {
        const uint16_t* kj = kh + static_cast<int64_t>(j) * f.k_ss;
        const uint16_t* vj = vh + static_cast<int64_t>(j) * f.v_ss;
        float kv[DL], sc = 0.0f, dp = 0.0f;
#pragma unroll
        for(int e = 0; e < DL; ++e)
        {
            kv[e] = d0 + e < f.d ? load_as_float<T>(kj + (d0 + e) * f.k_sd) : 0.0f;
            sc += qv[e] * kv[e];
            dp += d0 + e < f.dv ? dov[e] * load_as_float<T>(vj + (d0 + e) * f.v_sd) : 0.0f;
        }
        sc = sum16(sc);
        dp = sum16(dp);
        bool on = j < end_i && l2 != INFINITY;
        float lg = sc * f.scale_log2;
        float dcap = 1.0f;
        if constexpr(Ext)
        {
            on = on && j >= i + len.lo;
            if(f.softcap > 0.0f)
                lg = softcapped_log2(sc * a.scale, f.softcap, dcap);
            lg = fmaf(alibi2, static_cast<float>(j - i), lg);
            if(bh != nullptr) // (clamped row: a row past sq is not live)
                lg += kLog2e * bias_at(bh, f.bias_type, f.bias_ss, min(i, f.sq - 1), j);
        }
        const float ds = on ? exp2f(lg - l2) * (dp - delta) * dcap : 0.0f;
#pragma unroll
        for(int e = 0; e < DL; ++e)
            dq[e] += ds * kv[e];
    }
    if(i >= f.sq)
        return;
    uint16_t* dqp = static_cast<uint16_t*>(a.dq) + pr.b * a.dq_sb + h * a.dq_sh + static_cast<int64_t>(i) * a.dq_ss;
#pragma unroll
    for(int e = 0; e < DL; ++e)
        if(d0 + e < f.d)
            dqp[(d0 + e) * a.dq_sd] = float_to_bits<T>(dq[e] * a.scale);
}

// ---------------------------------------------------------------------------------------------
// Rows the forward's stats cannot serve (calls with a bias). When every key a row sees carries a bias
// near -1e30 or finfo.min (transformers' older additive masks on a padding row), its scores lie in the
// 2^100s: the stats hold their max m but not log2 of their softmax sum l beside it (m + log2 l rounds
// to m), and the kernels' P = exp2(score - lse2) came out l times too large, or inf or NaN from the
// rounding error of the bias product (NaN gradients even where dO is 0). Such rows (|lse2| >=
// kBwdExactLse, log2 units) are recomputed here and kept out of the main kernels:
//   sdpa_bwd_exact_rows  their max and log2 sum from their scores (one online pass over the keys the
//                        row sees), into mrow and lgl; lse2 becomes +inf, so the main kernels (either
//                        tier) leave the row alone, and the pair is flagged;
//   sdpa_bwd_exact_dq    their dQ rows (written over the main kernels' zeros);
//   sdpa_bwd_exact_dkdv  their share of dK and dV, added to what the main kernels wrote (flagged
//                        pairs only; the rows are found 256 at a time, so unflagged rows cost a test).
// P = exp2(min(score - m, 0) - log2 l): the score's distance from the max first (exact: both lie near
// the same huge value; at most 0, since every score is made here by the same code as the max),
// then the sum's log. Portable code (16 lanes a row, width-16 exchanges, loops uniform per block), so
// both tiers share it; a call with no such row pays three launches that return at once.
constexpr float kBwdExactLse = 4096.0f;

// A score in log2 units as the exact kernels make it: scaled (or softcapped), ALiBi, then the bias.
__device__ __forceinline__ float exact_score_log2(float sc, const SdpaBwdArgs& a, float alibi2, const unsigned char* bh,
                                                  int i, int j, float& dcap)
{
    const SdpaArgs& f = a.f;
    dcap = 1.0f;
    float lg = f.softcap > 0.0f ? softcapped_log2(sc * a.scale, f.softcap, dcap) : sc * f.scale_log2;
    lg = fmaf(alibi2, static_cast<float>(j - i), lg);
    if(bh != nullptr) // (the product rounded first, so that equal huge biases give equal scores)
        lg += hipdnn_fmul_rn(bias_at(bh, f.bias_type, f.bias_ss, i, j), kLog2e);
    return lg;
}

template <ElemType T, int D>
__global__ void __launch_bounds__(256) sdpa_bwd_exact_rows(const BwdSlice s)
{
    constexpr int DL = D / 16;
    const SdpaBwdArgs& a = s.a;
    const SdpaArgs& f = a.f;
    const int lane = static_cast<int>(threadIdx.x) & 15;
    const int d0 = lane * DL;
    const int i0 = static_cast<int>(blockIdx.x) * kPortableRows;
    const int i = i0 + static_cast<int>(threadIdx.x >> 4);
    const int hh = static_cast<int>(blockIdx.y);
    const int z = static_cast<int>(blockIdx.z);
    const Pair pr = pair_of(s, z);
    const int h = pr.hk * (f.hq / f.hk) + hh;
    const BatchLengths len = batch_lengths(f, pr.b);
    if(i0 >= len.sq) // (the whole block)
        return;
    const bool live = i < len.sq;
    const int64_t w = ws_row(s, z, hh, live ? i : i0);
    const float l2 = s.lse2[w];
    const bool mark = live && fabsf(l2) >= kBwdExactLse && l2 != INFINITY; // (NaN: left as it is)
    if(!__syncthreads_or(mark))
        return;
    float qv[DL];
    const uint16_t* qp = static_cast<const uint16_t*>(f.q) + pr.b * f.q_sb + h * f.q_sh
                         + static_cast<int64_t>(live ? i : i0) * f.q_ss;
#pragma unroll
    for(int e = 0; e < DL; ++e)
        qv[e] = d0 + e < f.d ? load_as_float<T>(qp + (d0 + e) * f.q_sd) : 0.0f;
    const uint16_t* kh = static_cast<const uint16_t*>(f.k) + pr.b * f.k_sb + pr.hk * f.k_sh;
    const unsigned char* bh = f.bias != nullptr ? bias_head(f, pr.b, h) : nullptr;
    const float alibi2 = f.alibi ? alibi_slope(h, f.hq) * kLog2e : 0.0f;
    // The block's widest range (its first row's start, its last row's end), and this row's.
    const int last = min(i0 + kPortableRows, len.sq) - 1;
    const int begin = max(0, i0 + len.lo), end = min(len.skv, last + len.diag + 1);
    const int mine0 = max(0, i + len.lo), mine1 = min(len.skv, i + len.diag + 1);
    float m = -INFINITY, l = 0.0f;
    for(int j = begin; j < end; ++j)
    {
        const uint16_t* kj = kh + static_cast<int64_t>(j) * f.k_ss;
        float sc = 0.0f;
#pragma unroll
        for(int e = 0; e < DL; ++e)
            sc += d0 + e < f.d ? qv[e] * load_as_float<T>(kj + (d0 + e) * f.k_sd) : 0.0f;
        sc = sum16(sc);
        if(mark && j >= mine0 && j < mine1)
        {
            float dcap;
            const float lg = exact_score_log2(sc, a, alibi2, bh, i, j, dcap);
            if(lg > m)
            {
                l = l * exp2f(m - lg) + 1.0f;
                m = lg;
            }
            else if(lg > -INFINITY || lg != lg) // (NaN: l becomes NaN, as the forward's row)
                l += exp2f(lg - m);
        }
    }
    if(!mark || lane != 0)
        return;
    s.lse2[w] = INFINITY; // the main kernels leave the row to sdpa_bwd_exact_dq / _dkdv
    if(l > 0.0f || l != l) // (no key seen after all: the row contributes nothing)
    {
        s.mrow[w] = m;
        s.lgl[w] = log2f(l);
        s.exact[z] = 1;
    }
}

template <ElemType T, int D>
__global__ void __launch_bounds__(256) sdpa_bwd_exact_dq(const BwdSlice s)
{
    constexpr int DL = D / 16;
    const SdpaBwdArgs& a = s.a;
    const SdpaArgs& f = a.f;
    const int lane = static_cast<int>(threadIdx.x) & 15;
    const int d0 = lane * DL;
    const int i0 = static_cast<int>(blockIdx.x) * kPortableRows;
    const int i = i0 + static_cast<int>(threadIdx.x >> 4);
    const int hh = static_cast<int>(blockIdx.y);
    const int z = static_cast<int>(blockIdx.z);
    const Pair pr = pair_of(s, z);
    const int h = pr.hk * (f.hq / f.hk) + hh;
    const BatchLengths len = batch_lengths(f, pr.b);
    if(i0 >= len.sq || s.exact[z] == 0)
        return;
    const bool live = i < len.sq;
    const int64_t w = ws_row(s, z, hh, live ? i : i0);
    const float m = s.mrow[w];
    const bool mark = live && m != INFINITY;
    if(!__syncthreads_or(mark))
        return;
    const float g = s.lgl[w], delta = s.delta[w];
    float qv[DL], dov[DL], dq[DL];
    const uint16_t* qp = static_cast<const uint16_t*>(f.q) + pr.b * f.q_sb + h * f.q_sh
                         + static_cast<int64_t>(live ? i : i0) * f.q_ss;
    const uint16_t* dop = static_cast<const uint16_t*>(a.dout) + pr.b * a.do_sb + h * a.do_sh
                          + static_cast<int64_t>(live ? i : i0) * a.do_ss;
#pragma unroll
    for(int e = 0; e < DL; ++e)
    {
        qv[e] = d0 + e < f.d ? load_as_float<T>(qp + (d0 + e) * f.q_sd) : 0.0f;
        dov[e] = d0 + e < f.dv ? load_as_float<T>(dop + (d0 + e) * a.do_sd) : 0.0f;
        dq[e] = 0.0f;
    }
    const uint16_t* kh = static_cast<const uint16_t*>(f.k) + pr.b * f.k_sb + pr.hk * f.k_sh;
    const uint16_t* vh = static_cast<const uint16_t*>(f.v) + pr.b * f.v_sb + pr.hk * f.v_sh;
    const unsigned char* bh = f.bias != nullptr ? bias_head(f, pr.b, h) : nullptr;
    const float alibi2 = f.alibi ? alibi_slope(h, f.hq) * kLog2e : 0.0f;
    const int last = min(i0 + kPortableRows, len.sq) - 1;
    const int begin = max(0, i0 + len.lo), end = min(len.skv, last + len.diag + 1);
    const int mine0 = max(0, i + len.lo), mine1 = min(len.skv, i + len.diag + 1);
    for(int j = begin; j < end; ++j)
    {
        const uint16_t* kj = kh + static_cast<int64_t>(j) * f.k_ss;
        const uint16_t* vj = vh + static_cast<int64_t>(j) * f.v_ss;
        float kv[DL], sc = 0.0f, dp = 0.0f;
#pragma unroll
        for(int e = 0; e < DL; ++e)
        {
            kv[e] = d0 + e < f.d ? load_as_float<T>(kj + (d0 + e) * f.k_sd) : 0.0f;
            sc += qv[e] * kv[e];
            dp += d0 + e < f.dv ? dov[e] * load_as_float<T>(vj + (d0 + e) * f.v_sd) : 0.0f;
        }
        sc = sum16(sc);
        dp = sum16(dp);
        if(mark && j >= mine0 && j < mine1)
        {
            float dcap;
            const float lg = exact_score_log2(sc, a, alibi2, bh, i, j, dcap);
            const float ds = exp2f(fminf(lg - m, 0.0f) - g) * (dp - delta) * dcap;
#pragma unroll
            for(int e = 0; e < DL; ++e)
                dq[e] += ds * kv[e];
        }
    }
    if(!mark)
        return;
    uint16_t* dqp = static_cast<uint16_t*>(a.dq) + pr.b * a.dq_sb + h * a.dq_sh + static_cast<int64_t>(i) * a.dq_ss;
#pragma unroll
    for(int e = 0; e < DL; ++e)
        if(d0 + e < f.d)
            dqp[(d0 + e) * a.dq_sd] = float_to_bits<T>(dq[e] * a.scale);
}

template <ElemType T, int D>
__global__ void __launch_bounds__(256) sdpa_bwd_exact_dkdv(const BwdSlice s)
{
    constexpr int DL = D / 16;
    const int z = static_cast<int>(blockIdx.y);
    if(s.exact[z] == 0) // (the whole block: no row of this pair was recomputed)
        return;
    const SdpaBwdArgs& a = s.a;
    const SdpaArgs& f = a.f;
    const int lane = static_cast<int>(threadIdx.x) & 15;
    const int d0 = lane * DL;
    const int j0 = static_cast<int>(blockIdx.x) * kPortableRows;
    const int j = j0 + static_cast<int>(threadIdx.x >> 4);
    const Pair pr = pair_of(s, z);
    const int group = f.hq / f.hk;
    const BatchLengths len = batch_lengths(f, pr.b);
    const bool live = j < len.skv;
    float kj[DL], vj[DL], dk[DL], dv[DL];
    const uint16_t* kp = static_cast<const uint16_t*>(f.k) + pr.b * f.k_sb + pr.hk * f.k_sh
                         + static_cast<int64_t>(live ? j : 0) * f.k_ss;
    const uint16_t* vp = static_cast<const uint16_t*>(f.v) + pr.b * f.v_sb + pr.hk * f.v_sh
                         + static_cast<int64_t>(live ? j : 0) * f.v_ss;
#pragma unroll
    for(int e = 0; e < DL; ++e)
    {
        kj[e] = live && d0 + e < f.d ? load_as_float<T>(kp + (d0 + e) * f.k_sd) : 0.0f;
        vj[e] = live && d0 + e < f.dv ? load_as_float<T>(vp + (d0 + e) * f.v_sd) : 0.0f;
        dk[e] = dv[e] = 0.0f;
    }
    __shared__ unsigned char rows_on[256];
    // The block's widest range of rows: from its first key's first row to its last key's last.
    const int first = max(0, j0 - len.diag);
    const int stop = min(len.sq, j0 + kPortableRows - len.lo);
    for(int hh = 0; hh < group; ++hh)
    {
        const int h = pr.hk * group + hh;
        const uint16_t* qh = static_cast<const uint16_t*>(f.q) + pr.b * f.q_sb + h * f.q_sh;
        const uint16_t* doh = static_cast<const uint16_t*>(a.dout) + pr.b * a.do_sb + h * a.do_sh;
        const unsigned char* bh = f.bias != nullptr ? bias_head(f, pr.b, h) : nullptr;
        const float alibi2 = f.alibi ? alibi_slope(h, f.hq) * kLog2e : 0.0f;
        for(int c0 = first; c0 < stop; c0 += 256)
        {
            const int r = c0 + static_cast<int>(threadIdx.x);
            rows_on[threadIdx.x] = r < stop && s.mrow[ws_row(s, z, hh, r)] != INFINITY;
            __syncthreads();
            const int n = min(256, stop - c0);
            for(int t = 0; t < n; ++t)
            {
                if(!rows_on[t]) // (the same row for every lane of the block)
                    continue;
                const int i = c0 + t;
                const int64_t w = ws_row(s, z, hh, i);
                const uint16_t* qi = qh + static_cast<int64_t>(i) * f.q_ss;
                const uint16_t* doi = doh + static_cast<int64_t>(i) * a.do_ss;
                float qv[DL], dov[DL], sc = 0.0f, dp = 0.0f;
#pragma unroll
                for(int e = 0; e < DL; ++e)
                {
                    qv[e] = d0 + e < f.d ? load_as_float<T>(qi + (d0 + e) * f.q_sd) : 0.0f;
                    dov[e] = d0 + e < f.dv ? load_as_float<T>(doi + (d0 + e) * a.do_sd) : 0.0f;
                    sc += qv[e] * kj[e];
                    dp += dov[e] * vj[e];
                }
                sc = sum16(sc);
                dp = sum16(dp);
                if(live && j <= i + len.diag && j >= i + len.lo)
                {
                    float dcap;
                    const float lg = exact_score_log2(sc, a, alibi2, bh, i, j, dcap);
                    const float p = exp2f(fminf(lg - s.mrow[w], 0.0f) - s.lgl[w]);
                    const float ds = p * (dp - s.delta[w]) * dcap;
#pragma unroll
                    for(int e = 0; e < DL; ++e)
                    {
                        dv[e] += p * dov[e];
                        dk[e] += ds * qv[e];
                    }
                }
            }
            __syncthreads();
        }
    }
    if(j >= f.skv)
        return;
    // Added to what the main kernels wrote (one more rounding to the gradients' type).
    uint16_t* dkp = static_cast<uint16_t*>(a.dk) + pr.b * a.dk_sb + pr.hk * a.dk_sh + static_cast<int64_t>(j) * a.dk_ss;
    uint16_t* dvp = static_cast<uint16_t*>(a.dv) + pr.b * a.dv_sb + pr.hk * a.dv_sh + static_cast<int64_t>(j) * a.dv_ss;
#pragma unroll
    for(int e = 0; e < DL; ++e)
    {
        if(d0 + e < f.d)
            dkp[(d0 + e) * a.dk_sd] = float_to_bits<T>(load_as_float<T>(dkp + (d0 + e) * a.dk_sd) + dk[e] * a.scale);
        if(d0 + e < f.dv)
            dvp[(d0 + e) * a.dv_sd] = float_to_bits<T>(load_as_float<T>(dvp + (d0 + e) * a.dv_sd) + dv[e]);
    }
}

template <ElemType T, int D>
hipError_t launch_exact(const BwdSlice& s, int pairs, hipStream_t stream, bool rows)
{
    const SdpaArgs& f = s.a.f;
    const dim3 per_row(static_cast<unsigned>((f.sq + kPortableRows - 1) / kPortableRows),
                       static_cast<unsigned>(f.hq / f.hk), static_cast<unsigned>(pairs));
    if(rows)
    {
        hipLaunchKernelGGL((sdpa_bwd_exact_rows<T, D>), per_row, dim3(256), 0, stream, s);
        return hipGetLastError();
    }
    hipLaunchKernelGGL((sdpa_bwd_exact_dq<T, D>), per_row, dim3(256), 0, stream, s);
    hipError_t e = hipGetLastError();
    if(e != hipSuccess)
        return e;
    hipLaunchKernelGGL((sdpa_bwd_exact_dkdv<T, D>),
                       dim3(static_cast<unsigned>((f.skv + kPortableRows - 1) / kPortableRows), static_cast<unsigned>(pairs)),
                       dim3(256), 0, stream, s);
    return hipGetLastError();
}

// Tensor-core tier: the fp32 dQ sums of a slice, scaled, into dQ (8 columns per thread; the
// tensor-core tier writes dQ with a unit column stride and 4-byte aligned pairs).
template <ElemType T>
__global__ void __launch_bounds__(256) sdpa_bwd_dq_convert(const BwdSlice s)
{
    const SdpaBwdArgs& a = s.a;
    const SdpaArgs& f = a.f;
    const int group = f.hq / f.hk;
    const unsigned chunks = static_cast<unsigned>(f.d / 8); // dQ's own columns (the sums are s.w wide)
    const unsigned idx = blockIdx.x * 256u + threadIdx.x; // over group * sq * chunks
    const int z = static_cast<int>(blockIdx.y);
    if(idx >= static_cast<unsigned>(group) * static_cast<unsigned>(f.sq) * chunks)
        return;
    const int c = static_cast<int>(idx % chunks);
    const unsigned r = idx / chunks;
    const int hh = static_cast<int>(r / static_cast<unsigned>(f.sq));
    const int i = static_cast<int>(r % static_cast<unsigned>(f.sq));
    const Pair pr = pair_of(s, z);
    const int h = pr.hk * group + hh;
    // The chunk's 8 columns are 4 pairs, one per thread of the accumulator fragment, 4 floats apart.
    const float* src = s.dq_accum + ws_row(s, z, hh, 0) * s.w + bwd_dq_offset(i, c * 8, s.w);
    uint16_t* dst = static_cast<uint16_t*>(a.dq) + pr.b * a.dq_sb + h * a.dq_sh + static_cast<int64_t>(i) * a.dq_ss
                    + static_cast<int64_t>(c) * 8;
    uint32_t bits[4];
#pragma unroll
    for(int u = 0; u < 4; ++u)
    {
        const float2 v = *reinterpret_cast<const float2*>(src + 4 * u);
        bits[u] = static_cast<uint32_t>(float_to_bits<T>(v.x * a.scale))
                  | (static_cast<uint32_t>(float_to_bits<T>(v.y * a.scale)) << 16);
    }
    if((reinterpret_cast<uintptr_t>(dst) & 15) == 0)
        *reinterpret_cast<uint4*>(dst) = make_uint4(bits[0], bits[1], bits[2], bits[3]);
    else
        for(int u = 0; u < 4; ++u)
            *reinterpret_cast<uint32_t*>(dst + 2 * u) = bits[u];
}

template <ElemType T, int D, bool Ext>
hipError_t launch_portable_ext(const BwdSlice& s, int pairs, hipStream_t stream)
{
    const SdpaArgs& f = s.a.f;
    hipLaunchKernelGGL((sdpa_bwd_portable_dkdv<T, D, Ext>),
                       dim3(static_cast<unsigned>((f.skv + kPortableRows - 1) / kPortableRows), pairs), dim3(256), 0,
                       stream, s);
    hipError_t e = hipGetLastError();
    if(e != hipSuccess)
        return e;
    hipLaunchKernelGGL((sdpa_bwd_portable_dq<T, D, Ext>),
                       dim3(static_cast<unsigned>((f.sq + kPortableRows - 1) / kPortableRows),
                            static_cast<unsigned>(f.hq / f.hk), pairs),
                       dim3(256), 0, stream, s);
    return hipGetLastError();
}

template <ElemType T, int D>
hipError_t launch_portable_typed(const BwdSlice& s, int pairs, hipStream_t stream)
{
    return sdpa_needs_ext(s.a.f) ? launch_portable_ext<T, D, true>(s, pairs, stream)
                                          : launch_portable_ext<T, D, false>(s, pairs, stream);
}

template <ElemType T>
hipError_t launch_slice(const BwdSlice& s, int pairs, bool tc, hipStream_t stream)
{
    const SdpaArgs& f = s.a.f;
    const int64_t rows = static_cast<int64_t>(f.hq / f.hk) * f.sq;
    const int64_t ws_rows = static_cast<int64_t>(f.hq / f.hk) * bwd_rows_per_head(f.sq);
    if(s.w == 64)
        hipLaunchKernelGGL((sdpa_bwd_prepass<T, 8>), dim3(static_cast<unsigned>((ws_rows + 31) / 32), pairs), dim3(256),
                           0, stream, s, tc ? 1 : 0);
    else
        hipLaunchKernelGGL((sdpa_bwd_prepass<T, 16>), dim3(static_cast<unsigned>((ws_rows + 15) / 16), pairs),
                           dim3(256), 0, stream, s, tc ? 1 : 0);
    hipError_t e = hipGetLastError();
    if(e != hipSuccess)
        return e;
    // Rows whose stats cannot serve them: only a bias makes scores that large (the exact kernels).
    const bool exact = f.bias != nullptr;
    auto exact_pass = [&](bool rows_pass) {
        return s.w == 64 ? launch_exact<T, 64>(s, pairs, stream, rows_pass) : launch_exact<T, 128>(s, pairs, stream, rows_pass);
    };
    if(exact && (e = exact_pass(true)) != hipSuccess)
        return e;
    if(!tc || (e = bwd_wg_launch(s, pairs, T, stream)) == hipErrorNotSupported)
        e = s.w == 64 ? launch_portable_typed<T, 64>(s, pairs, stream) : launch_portable_typed<T, 128>(s, pairs, stream);
    else if(e == hipSuccess)
    {
        const int64_t chunks = rows * (f.d / 8);
        hipLaunchKernelGGL((sdpa_bwd_dq_convert<T>), dim3(static_cast<unsigned>((chunks + 255) / 256), pairs), dim3(256),
                           0, stream, s);
        e = hipGetLastError();
    }
    if(e != hipSuccess || !exact)
        return e;
    return exact_pass(false);
}

bool aligned(const void* p, uintptr_t n)
{
    return (reinterpret_cast<uintptr_t>(p) & (n - 1)) == 0;
}

} // namespace

bool sdpa_bwd_tensor_core_accepts(const SdpaBwdArgs& a, ElemType)
{
    const SdpaArgs& f = a.f;
    // Whole 16-byte chunks per row: head dims multiples of 8 (a padded kernel head dim past them).
    if(!bwd_wg_built() || f.d % 8 != 0 || f.dv % 8 != 0)
        return false;
    // Q, K, V and dO rows are copied 16 bytes at a time; dQ, dK, dV written in pairs.
    const void* rd[4] = {f.q, f.k, f.v, a.dout};
    const int64_t rs[4][4] = {{f.q_sb, f.q_sh, f.q_ss, f.q_sd},
                              {f.k_sb, f.k_sh, f.k_ss, f.k_sd},
                              {f.v_sb, f.v_sh, f.v_ss, f.v_sd},
                              {a.do_sb, a.do_sh, a.do_ss, a.do_sd}};
    for(int i = 0; i < 4; ++i)
        if(!aligned(rd[i], 16) || rs[i][3] != 1 || rs[i][0] % 8 != 0 || rs[i][1] % 8 != 0 || rs[i][2] % 8 != 0)
            return false;
    const void* wr[3] = {a.dq, a.dk, a.dv};
    const int64_t ws[3][4] = {{a.dq_sb, a.dq_sh, a.dq_ss, a.dq_sd},
                              {a.dk_sb, a.dk_sh, a.dk_ss, a.dk_sd},
                              {a.dv_sb, a.dv_sh, a.dv_ss, a.dv_sd}};
    for(int i = 0; i < 3; ++i)
        if(!aligned(wr[i], 4) || ws[i][3] != 1 || ws[i][0] % 2 != 0 || ws[i][1] % 2 != 0 || ws[i][2] % 2 != 0)
            return false;
    return true;
}

hipError_t prepare_bwd_kernels(Tier tier)
{
    if(tier != Tier::TensorCore || !bwd_wg_built())
        return hipSuccess;
    const hipError_t e = bwd_wg_set_attrs(ElemType::Bf16);
    return e != hipSuccess ? e : bwd_wg_set_attrs(ElemType::Half);
}

hipError_t launch_sdpa_bwd(const SdpaBwdArgs& a, ElemType t, Tier tier, void* workspace, size_t workspace_bytes,
                           hipStream_t stream)
{
    const SdpaArgs& f = a.f;
    if(f.batch <= 0 || f.hq <= 0 || f.hk <= 0 || f.sq <= 0 || f.skv <= 0 || f.hq % f.hk != 0 || f.d <= 0
       || f.dv <= 0 || f.d > 128 || f.dv > 128)
        return hipErrorInvalidValue;
    const int w = kernel_head_dim(f.d, f.dv);
    const bool tc = tier == Tier::TensorCore && sdpa_bwd_tensor_core_accepts(a, t);
    if(workspace == nullptr)
        return hipErrorInvalidValue;
    // The kernels index pairs and one pair's workspace floats in 32 bits.
    if(static_cast<int64_t>(f.batch) * f.hk >= (int64_t(1) << 31)
       || static_cast<int64_t>(f.hq / f.hk) * bwd_rows_per_head(f.sq) * (w + 2) >= (int64_t(1) << 31))
        return hipErrorInvalidValue;
    int64_t per = bwd_pairs_per_slice(workspace_bytes, f.hq, f.hk, f.sq, w);
    if(per < 1)
        return hipErrorInvalidValue;
    per = per > kMaxSlicePairs ? kMaxSlicePairs : per;
    // Slices of equal size: the fewest that fit, rather than full ones and a small last one, whose
    // few blocks would leave most of the GPU idle while they run.
    const int64_t total = static_cast<int64_t>(f.batch) * f.hk;
    const int64_t slices = (total + per - 1) / per;
    per = (total + slices - 1) / slices;
    // Align the base (the plan reported kBwdWorkspaceAlign bytes for this).
    const uintptr_t raw = reinterpret_cast<uintptr_t>(workspace);
    float* base = reinterpret_cast<float*>((raw + kBwdWorkspaceAlign - 1) / kBwdWorkspaceAlign * kBwdWorkspaceAlign);
    const int64_t rows_per_pair = static_cast<int64_t>(f.hq / f.hk) * bwd_rows_per_head(f.sq);
    for(int64_t p0 = 0; p0 < total; p0 += per)
    {
        const int64_t n = total - p0 < per ? total - p0 : per;
        BwdSlice s;
        s.a = a;
        s.w = w;
        s.p0 = p0;
        s.dq_accum = base;
        s.lse2 = base + n * rows_per_pair * w;
        s.delta = s.lse2 + n * rows_per_pair;
        s.lgl = s.delta + n * rows_per_pair;
        s.mrow = s.lgl + n * rows_per_pair;
        s.exact = reinterpret_cast<int*>(s.mrow + n * rows_per_pair);
        const hipError_t e = t == ElemType::Bf16 ? launch_slice<ElemType::Bf16>(s, static_cast<int>(n), tc, stream)
                                                 : launch_slice<ElemType::Half>(s, static_cast<int>(n), tc, stream);
        if(e != hipSuccess)
            return e;
    }
    return hipSuccess;
}

} // namespace hipdnn_hip
