// hipdnn HIP engine, engine 201: portable flash-attention forward.
//
// Plain HIP with fp32 arithmetic, no matrix instructions, so any HIP GPU runs
// it (on AMD wave64 each 64-lane wave acts as two 32-lane groups: every
// shuffle below names width 32). Tiled with an online softmax: a block owns
// kRowsPerBlock query rows of one (batch, head); it streams the visible keys
// through shared memory kKeysPerTile at a time and keeps, per row, the running
// maximum, the running sum of exponentials and the unnormalised output. No
// score matrix is ever stored.
//
// Work split: a 32-lane group owns kRowsPerGroup rows; for a key tile, lane j
// computes the score of key j against each of its rows, the group reduces max
// and sum by shuffles, then each lane accumulates the output columns
// lane, lane + 32, ... from the probabilities broadcast by shuffles.
#include "sdpa_device_common.h"

namespace hipdnn_hip
{
namespace
{

constexpr int kRowsPerGroup = 4;
constexpr int kGroups = 4;
constexpr int kRowsPerBlock = kRowsPerGroup * kGroups;
constexpr int kKeysPerTile = 32;
constexpr int kThreads = 32 * kGroups;

// Ext: the call has a left bound (sliding window), a bias, ALiBi or a softcap (sdpa_needs_ext);
// the kernel without them is compiled as before.
template <ElemType T, int D, bool Ext>
__global__ void __launch_bounds__(kThreads) sdpa_fwd_portable(SdpaArgs a)
{
    constexpr int kCols = D / 32; // output columns per lane
    __shared__ float s_q[kRowsPerBlock][D];
    __shared__ float s_k[kKeysPerTile][D + 1]; // +1: lane j reads row j without bank conflicts
    __shared__ float s_v[kKeysPerTile][D];

    const int lane = static_cast<int>(threadIdx.x) & 31;
    const int group = static_cast<int>(threadIdx.x) >> 5;
    const int qblock = static_cast<int>(gridDim.x - 1 - blockIdx.x); // heaviest causal blocks first
    const int h = static_cast<int>(blockIdx.y);
    const int b = static_cast<int>(blockIdx.z);
    const int hk = h / (a.hq / a.hk);
    const BatchLengths len = batch_lengths(a, b);
    const int q0 = qblock * kRowsPerBlock;

    const uint16_t* qp = static_cast<const uint16_t*>(a.q) + b * a.q_sb + h * a.q_sh;
    const uint16_t* kp = static_cast<const uint16_t*>(a.k) + b * a.k_sb + hk * a.k_sh;
    const uint16_t* vp = static_cast<const uint16_t*>(a.v) + b * a.v_sb + hk * a.v_sh;

    for(int i = static_cast<int>(threadIdx.x); i < kRowsPerBlock * D; i += kThreads)
    {
        const int r = i / D, c = i % D, row = q0 + r;
        s_q[r][c] = row < len.sq && c < a.d ? load_as_float<T>(qp + row * a.q_ss + c * a.q_sd) : 0.0f;
    }

    float m[kRowsPerGroup], l[kRowsPerGroup], acc[kRowsPerGroup][kCols];
#pragma unroll
    for(int r = 0; r < kRowsPerGroup; ++r)
    {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for(int c = 0; c < kCols; ++c)
            acc[r][c] = 0.0f;
    }

    const int last_row = min(q0 + kRowsPerBlock, len.sq) - 1;
    int kv_end = last_row < q0 ? 0 : min(len.skv, last_row + len.diag + 1);
    kv_end = max(kv_end, 0);
    // Window: the block's first row sees no key before q0 + lo, so whole tiles before it are skipped.
    const int kv_begin = Ext ? max(q0 + len.lo, 0) / kKeysPerTile * kKeysPerTile : 0;
    const unsigned char* bh = Ext && a.bias != nullptr ? bias_head(a, b, h) : nullptr;
    // Softcapping in the log2 units of s: c log2(e) tanh(s / (c log2(e))); ALiBi's slope likewise.
    const float cap2 = Ext ? a.softcap * 1.4426950408889634f : 0.0f;
    const float cap2_inv = cap2 > 0.0f ? 1.0f / cap2 : 0.0f;
    const float alibi2 = Ext && a.alibi ? alibi_slope(h, a.hq) * 1.4426950408889634f : 0.0f;

    for(int kv0 = kv_begin; kv0 < kv_end; kv0 += kKeysPerTile)
    {
        __syncthreads(); // the previous tile is consumed (and s_q written)
        for(int i = static_cast<int>(threadIdx.x); i < kKeysPerTile * D; i += kThreads)
        {
            const int r = i / D, c = i % D, key = kv0 + r;
            const bool in = key < len.skv;
            // Columns past the head dims (a padded D) are zeros: they add nothing to q.k.
            s_k[r][c] = in && c < a.d ? load_as_float<T>(kp + key * a.k_ss + c * a.k_sd) : 0.0f;
            s_v[r][c] = in && c < a.dv ? load_as_float<T>(vp + key * a.v_ss + c * a.v_sd) : 0.0f;
        }
        __syncthreads();

        const int key = kv0 + lane;
#pragma unroll
        for(int r = 0; r < kRowsPerGroup; ++r)
        {
            const int lr = group * kRowsPerGroup + r;
            const int row = q0 + lr;
            float s = 0.0f;
#pragma unroll 16
            for(int d = 0; d < D; ++d)
                s += s_q[lr][d] * s_k[lane][d];
            s *= a.scale_log2;
            if constexpr(Ext)
            {
                if(cap2 > 0.0f) // first: the bias, ALiBi and the masks apply to the capped score
                    s = cap2 * softcap_tanh(s * cap2_inv);
                s = fmaf(alibi2, static_cast<float>(key - row), s);
                if(bh != nullptr) // clamped indices: rows past sq and keys past skv are masked below
                    s += hipdnn_fmul_rn(1.4426950408889634f, // (rounded first: sdpa_wg_softmax.h)
                                   bias_at(bh, a.bias_type, a.bias_ss, min(row, a.sq - 1), min(key, a.skv - 1)));
                if(key < row + len.lo)
                    s = -INFINITY;
            }
            if(key >= len.skv || key > row + len.diag)
                s = -INFINITY;
            float mx = fmaxf(m[r], s);
#pragma unroll
            for(int off = 16; off > 0; off >>= 1)
                mx = fmaxf(mx, HIPDNN_SHFL_XOR(mx, off, 32));
            const float base = mx == -INFINITY ? 0.0f : mx;
            const float p = exp2f(s - base);
            const float alpha = exp2f(m[r] - base);
            float sum = p;
#pragma unroll
            for(int off = 16; off > 0; off >>= 1)
                sum += HIPDNN_SHFL_XOR(sum, off, 32);
            l[r] = l[r] * alpha + sum;
            m[r] = mx;
#pragma unroll
            for(int c = 0; c < kCols; ++c)
                acc[r][c] *= alpha;
            for(int j = 0; j < kKeysPerTile; ++j)
            {
                const float pj = HIPDNN_SHFL(p, j, 32);
#pragma unroll
                for(int c = 0; c < kCols; ++c)
                    acc[r][c] += pj * s_v[j][lane + 32 * c];
            }
        }
    }

    uint16_t* op = static_cast<uint16_t*>(a.o) + b * a.o_sb + h * a.o_sh;
#pragma unroll
    for(int r = 0; r < kRowsPerGroup; ++r)
    {
        const int row = q0 + group * kRowsPerGroup + r;
        if(row >= a.sq)
            continue;
        const bool valid = row < len.sq && l[r] > 0.0f;
        const float inv = valid ? 1.0f / l[r] : 0.0f;
#pragma unroll
        for(int c = 0; c < kCols; ++c)
            if(lane + 32 * c < a.dv)
                op[row * a.o_ss + (lane + 32 * c) * a.o_sd] = float_to_bits<T>(acc[r][c] * inv);
        if(a.stats != nullptr && lane == 0)
            a.stats[b * a.st_sb + h * a.st_sh + row * a.st_ss]
                = valid ? (m[r] + log2f(l[r])) * 0.69314718055994531f : -INFINITY;
    }
}

template <ElemType T, int D>
hipError_t launch_portable_typed(const SdpaArgs& a, hipStream_t stream)
{
    const dim3 grid(static_cast<unsigned>((a.sq + kRowsPerBlock - 1) / kRowsPerBlock),
                    static_cast<unsigned>(a.hq),
                    static_cast<unsigned>(a.batch));
    if(sdpa_needs_ext(a))
        hipLaunchKernelGGL((sdpa_fwd_portable<T, D, true>), grid, dim3(kThreads), 0, stream, a);
    else
        hipLaunchKernelGGL((sdpa_fwd_portable<T, D, false>), grid, dim3(kThreads), 0, stream, a);
    return hipGetLastError();
}

} // namespace

hipError_t launch_sdpa_portable(const SdpaArgs& a, ElemType t, hipStream_t stream)
{
    if(kernel_head_dim(a.d, a.dv) == 64)
        return t == ElemType::Bf16 ? launch_portable_typed<ElemType::Bf16, 64>(a, stream)
                                   : launch_portable_typed<ElemType::Half, 64>(a, stream);
    return t == ElemType::Bf16 ? launch_portable_typed<ElemType::Bf16, 128>(a, stream)
                               : launch_portable_typed<ElemType::Half, 128>(a, stream);
}

} // namespace hipdnn_hip
