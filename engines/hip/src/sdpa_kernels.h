// hipdnn HIP engine: the SDPA forward problem as the kernels see it, and the
// launchers the host side calls. Plain C++ (no GPU language constructs), so the
// host code can be compiled by the ordinary C++ compiler.
#ifndef HIPDNN_HIP_ENGINE_SDPA_KERNELS_H
#define HIPDNN_HIP_ENGINE_SDPA_KERNELS_H

#include "hip_portability.h"

#include <cstddef>
#include <cstdint>

namespace hipdnn_hip
{

enum class ElemType : int
{
    Bf16 = 0,
    Half = 1
};

// One SDPA forward launch at this call's (possibly overridden) shapes.
// Strides are in elements; the head dimension is contiguous (stride 1) for the
// tensor-core tier, any stride for the portable tier (d_stride fields).
struct SdpaArgs
{
    const void* q = nullptr;
    const void* k = nullptr;
    const void* v = nullptr;
    void* o = nullptr;
    float* stats = nullptr;            // [B, Hq, Sq, 1] fp32, may be null
    const int32_t* seq_len_q = nullptr;  // [B] (any stride) on the device, padding mask only
    const int32_t* seq_len_kv = nullptr;

    int64_t q_sb = 0, q_sh = 0, q_ss = 0, q_sd = 1;
    int64_t k_sb = 0, k_sh = 0, k_ss = 0, k_sd = 1;
    int64_t v_sb = 0, v_sh = 0, v_ss = 0, v_sd = 1;
    int64_t o_sb = 0, o_sh = 0, o_ss = 0, o_sd = 1;
    int64_t st_sb = 0, st_sh = 0, st_ss = 0;
    int64_t slq_sb = 0, slkv_sb = 0;

    // d: the head dim of q and k; dv: that of v and o (d_qk != d_v allowed). The kernels are
    // compiled for a padded head dim (kernel_head_dim): columns past d / dv are read as zeros and
    // never written.
    int32_t batch = 0, hq = 0, hk = 0, sq = 0, skv = 0, d = 0, dv = 0;
    float scale_log2 = 0.0f; // attn scale * log2(e)
    // Causal masks: query i sees key j iff j <= i + diag, where diag is
    //   top-left: 0; bottom-right: skv - sq (at this call's, or with a padding
    //   mask each batch's, lengths); both: the smaller; neither: no limit.
    int32_t mask_tl = 0;
    int32_t mask_br = 0;
    int32_t padding = 0; // seq_len_q / seq_len_kv give each batch's lengths
    // Right bounds R (0: causal): with mask_tl query i sees key j only if j <= i + hi_tl, with
    // mask_br only if j <= i + hi_br + (skv - sq) (each batch's lengths under padding). Both
    // intersect. The host clamps hi_tl to the call's skv and hi_br to its sq (larger ones limit
    // nothing), so every kernel's diagonal stays in [-sq, skv].
    int32_t hi_tl = 0;
    int32_t hi_br = 0;
    // Left bound L (sliding window), mask_lo: query i sees key j only if j >= i + lo (+ skv - sq
    // when lo_br, the bottom-right alignment), lo = 1 - L.
    int32_t mask_lo = 0;
    int32_t lo_br = 0;
    int32_t lo = 0;
    // Additive bias [B|1, Hq|1, Sq|1, Skv] (null: none), added to scale * q.k before the softmax.
    // bias_type: 0 bf16, 1 fp16, 2 fp32; strides in elements (0 along a broadcast dim; the key
    // dim is contiguous). bias_pairs: two neighbouring even-aligned keys can be read as one load
    // (base aligned to two elements, even strides, even skv).
    const void* bias = nullptr;
    int32_t bias_type = 0;
    int32_t bias_pairs = 0;
    int64_t bias_sb = 0, bias_sh = 0, bias_ss = 0;
    float inv_scale = 1.0f; // 1 / attn scale: the bias in raw score units (wgmma kernels)
    // Score softcapping (API 1.4.0, RFC 0013): softcap = c > 0 replaces each score s = scale q.k by
    // c tanh(s / c) before the bias, ALiBi and masks; 0: off.
    float softcap = 0.0f;
    // ALiBi: slope(h) * (j - i) added to the (capped) score of query i, key j in query head h,
    // with the slopes of alibi_slope (sdpa_device_common.h).
    int32_t alibi = 0;
};

// The head dim a call's kernels are compiled for: the smallest of 64 and 128 that holds both the
// q / k and the v / o head dims (sdpa_call_rules.h says which head dims each engine serves). The
// loads fill the columns past d (q, k) and dv (v, o, dO) with zeros, so the padded columns add
// nothing to q.k and produce output columns that are never stored.
inline int kernel_head_dim(int d, int dv)
{
    return (d > dv ? d : dv) <= 64 ? 64 : 128;
}

// Whether a call uses an option only some kernel families serve (a left bound, a bias, ALiBi or
// softcapping: each kernel's Ext build); the others are never chosen for it (RFC 0006, "Bias and
// windows").
inline bool sdpa_needs_ext(const SdpaArgs& a)
{
    return a.mask_lo != 0 || a.bias != nullptr || a.alibi != 0 || a.softcap > 0.0f;
}

// Whether a call transforms its scores (ALiBi or softcapping): the builds that serve these are apart
// from the window / bias ones where they cost registers (the warp-specialized prefill kernel).
inline bool sdpa_needs_score_ext(const SdpaArgs& a)
{
    return a.alibi != 0 || a.softcap > 0.0f;
}

// What a launcher sizes its grid from: the device's multiprocessors and L2 bytes (0: unknown).
// Queried once per device by the host side, not per launch.
struct DeviceShape
{
    int sms = 0;
    int64_t l2_bytes = 0;
};

// Which kernel a plan runs.
enum class Tier : int
{
    Portable = 0, // engine 201: scalar fp32 math, any HIP GPU
    TensorCore = 1 // engine 202: Hopper tensor cores, wgmma / mma.sync (NVIDIA sm_90a build)
};

// True when this build contains the tensor-core kernels.
bool tensor_core_tier_built();

// One-time per-process setup of kernel attributes (dynamic shared memory);
// returns hipSuccess or the runtime's error.
hipError_t prepare_kernels(Tier tier);

// Whether the tensor-core kernel can take these arguments (alignment, unit
// head-dim stride); otherwise the portable kernel runs.
bool tensor_core_accepts(const SdpaArgs& a, ElemType t);

// Enqueue the forward pass on stream. Returns hipSuccess or the launch error.
hipError_t launch_sdpa_portable(const SdpaArgs& a, ElemType t, hipStream_t stream);
hipError_t launch_sdpa_tensor_core(const SdpaArgs& a, ElemType t, const DeviceShape& dev, hipStream_t stream);

// The split-KV decode path of engine 202 (sdpa_decode.hip; NVIDIA build only): calls with
// a.sq <= kDecodeMaxSq. workspace (may be null) holds workspace_bytes, what the plan reported
// (sdpa_decode_plan.h); the split count never needs more. sms: the device's multiprocessors.
bool decode_kernel_built();
hipError_t prepare_decode_kernels();
hipError_t launch_sdpa_decode(const SdpaArgs& a, ElemType t, void* workspace, size_t workspace_bytes, int sms,
                              hipStream_t stream);

// ------------------------------------------------------------------ backward ----
// One SDPA backward call: dQ, dK, dV from q, k, v, o, dO and the forward's stats (the natural-log
// log-sum-exp of each query row, [B, Hq, Sq, 1] fp32; -inf marks a row that saw no key), at this
// call's effective shapes. `f` carries q, k, v, o (read), stats, the sequence lengths, masks and
// shape exactly as for the forward (f.o is an input here; f.scale_log2 = scale * log2(e)).
// dK and dV are summed over each group of Hq / Hk query heads (GQA / MQA). Head-dim strides are 1
// on the tensor-core tier; any stride on the portable tier (the *_sd fields).
struct SdpaBwdArgs
{
    SdpaArgs f;
    float scale = 1.0f; // the attention scale itself (dQ and dK carry it)
    const void* dout = nullptr;
    void* dq = nullptr;
    void* dk = nullptr;
    void* dv = nullptr;
    int64_t do_sb = 0, do_sh = 0, do_ss = 0, do_sd = 1;
    int64_t dq_sb = 0, dq_sh = 0, dq_ss = 0, dq_sd = 1;
    int64_t dk_sb = 0, dk_sh = 0, dk_ss = 0, dk_sd = 1;
    int64_t dv_sb = 0, dv_sh = 0, dv_ss = 0, dv_sd = 1;
};

// Enqueue the backward pass (sdpa_bwd.hip). workspace holds workspace_bytes, what the plan reported
// (sdpa_bwd_plan.h): the pass runs in as many slices of (batch, kv head) pairs as that needs, and
// returns hipErrorInvalidValue, having launched nothing, when one pair does not fit
// (bwd_pairs_per_slice in sdpa_bwd_plan.h says so beforehand). tier picks the kernels: Portable (any HIP GPU, any
// head-dim stride) or TensorCore (sm_90a build; callers check sdpa_bwd_tensor_core_accepts).
bool sdpa_bwd_tensor_core_accepts(const SdpaBwdArgs& a, ElemType t);
hipError_t prepare_bwd_kernels(Tier tier);
hipError_t launch_sdpa_bwd(const SdpaBwdArgs& a, ElemType t, Tier tier, void* workspace, size_t workspace_bytes,
                           hipStream_t stream);

} // namespace hipdnn_hip

#endif // HIPDNN_HIP_ENGINE_SDPA_KERNELS_H
