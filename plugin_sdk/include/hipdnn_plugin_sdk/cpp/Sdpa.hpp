// hipdnn plugin SDK, C++ layer: reading SDPA nodes.
#ifndef HIPDNN_PLUGIN_SDK_CPP_SDPA_HPP
#define HIPDNN_PLUGIN_SDK_CPP_SDPA_HPP

#include "../wire/operations_generated.h"

namespace hipdnn_plugin_sdk
{
namespace cpp
{

// Whether the node pages its K/V (plugin API >= 1.3.0, rfcs/0012-ragged-and-paged.md): k and v are
// then caches [num_blocks, Hk, block_size, D] and page_table_k/v [B, 1, max_blocks, 1] INT32 tables;
// key j of batch b is slot j % block_size of block table[b, j / block_size]. max_seq_len_kv, when
// set, is the effective key length (else max_blocks * block_size).
inline bool sdpa_is_paged(const hipdnn::wire::SdpaAttributes& a)
{
    return a.page_table_k_tensor_uid().has_value() || a.page_table_v_tensor_uid().has_value();
}

// Score softcapping (plugin API >= 1.4.0, rfcs/0013-softcap.md): with c = softcap > 0, every score
// s = attn_scale * q.k is replaced by c * tanh(s / c) BEFORE the additive bias, ALiBi and every mask
// are applied; the backward multiplies dS by 1 - tanh(s / c)^2 (ds_raw = ds_capped * (1 - t^2),
// t = tanh(s / c)). 0 means off. Both SdpaAttributes and SdpaBackwardAttributes carry the field.
// sdpa_softcap returns c (0 when off); sdpa_softcap_valid whether it is 0 or a finite c > 0 (an
// engine refuses anything else: negative, NaN and inf caps have no meaning).
template <class Attrs>
inline float sdpa_softcap(const Attrs& a)
{
    return a.softcap();
}
template <class Attrs>
inline bool sdpa_softcap_valid(const Attrs& a)
{
    const float c = a.softcap();
    return c == 0.0f || (c > 0.0f && c <= 3.4028234663852886e38f);
}

// Whether the node is an FP8 forward (Graph.sdpa_fp8; API >= 1.5.0): it names any descale, scale or
// amax tensor. An engine that serves it must check that all eight are there.
inline bool sdpa_is_fp8(const hipdnn::wire::SdpaAttributes& a)
{
    return a.descale_q_tensor_uid().has_value() || a.descale_k_tensor_uid().has_value()
           || a.descale_v_tensor_uid().has_value() || a.descale_s_tensor_uid().has_value()
           || a.scale_s_tensor_uid().has_value() || a.scale_o_tensor_uid().has_value()
           || a.amax_s_tensor_uid().has_value() || a.amax_o_tensor_uid().has_value();
}

// Whether an FP8 node names all eight of its tensors (each factor and both amax outputs).
inline bool sdpa_fp8_complete(const hipdnn::wire::SdpaAttributes& a)
{
    return a.descale_q_tensor_uid().has_value() && a.descale_k_tensor_uid().has_value()
           && a.descale_v_tensor_uid().has_value() && a.descale_s_tensor_uid().has_value()
           && a.scale_s_tensor_uid().has_value() && a.scale_o_tensor_uid().has_value()
           && a.amax_s_tensor_uid().has_value() && a.amax_o_tensor_uid().has_value();
}

// Whether the node is an FP8 backward (Graph.sdpa_fp8_backward; API >= 1.6.0): it names any of the
// sixteen descale, scale or amax tensors. An engine that serves it must check that all are there
// (sdpa_backward_fp8_complete); one below 1.6.0 is never offered it.
inline bool sdpa_backward_is_fp8(const hipdnn::wire::SdpaBackwardAttributes& a)
{
    return a.descale_q_tensor_uid().has_value() || a.descale_k_tensor_uid().has_value()
           || a.descale_v_tensor_uid().has_value() || a.descale_o_tensor_uid().has_value()
           || a.descale_do_tensor_uid().has_value() || a.descale_s_tensor_uid().has_value()
           || a.descale_dp_tensor_uid().has_value() || a.scale_s_tensor_uid().has_value()
           || a.scale_dq_tensor_uid().has_value() || a.scale_dk_tensor_uid().has_value()
           || a.scale_dv_tensor_uid().has_value() || a.scale_dp_tensor_uid().has_value()
           || a.amax_dq_tensor_uid().has_value() || a.amax_dk_tensor_uid().has_value()
           || a.amax_dv_tensor_uid().has_value() || a.amax_dp_tensor_uid().has_value();
}

// Whether an FP8 backward node names all sixteen of its tensors.
inline bool sdpa_backward_fp8_complete(const hipdnn::wire::SdpaBackwardAttributes& a)
{
    return a.descale_q_tensor_uid().has_value() && a.descale_k_tensor_uid().has_value()
           && a.descale_v_tensor_uid().has_value() && a.descale_o_tensor_uid().has_value()
           && a.descale_do_tensor_uid().has_value() && a.descale_s_tensor_uid().has_value()
           && a.descale_dp_tensor_uid().has_value() && a.scale_s_tensor_uid().has_value()
           && a.scale_dq_tensor_uid().has_value() && a.scale_dk_tensor_uid().has_value()
           && a.scale_dv_tensor_uid().has_value() && a.scale_dp_tensor_uid().has_value()
           && a.amax_dq_tensor_uid().has_value() && a.amax_dk_tensor_uid().has_value()
           && a.amax_dv_tensor_uid().has_value() && a.amax_dp_tensor_uid().has_value();
}

// The first SDPA extension the node uses among those that change what is computed and that an
// engine must implement or refuse (never ignore): dropout, paged k/v, block masks, sink tokens, fp8
// scaling, separate max / sum-exp outputs. nullptr when the node uses none of them. An engine that
// serves paged K/V itself (API >= 1.3.0) passes serves_paged_kv: paging is then not reported. A
// softcap other than 0 is reported as "score softcapping" unless serves_softcap (API >= 1.4.0), so an
// engine built against the older call keeps refusing it rather than ignoring it; likewise FP8 scaling
// unless serves_fp8 (API >= 1.5.0, rfcs/0014-fp8-attention.md).
inline const char* sdpa_extension_in_use(const hipdnn::wire::SdpaAttributes& a, bool serves_paged_kv = false,
                                         bool serves_softcap = false, bool serves_fp8 = false)
{
    if(a.seed_tensor_uid().has_value() || a.offset_tensor_uid().has_value() || a.dropout_mask_tensor_uid().has_value()
       || a.dropout_scale_tensor_uid().has_value() || a.rng_dump_tensor_uid().has_value()
       || (a.dropout_probability().has_value() && a.dropout_probability().value() != 0.0f))
        return "dropout";
    if(!serves_paged_kv && sdpa_is_paged(a))
        return "paged k/v";
    if(a.block_mask_tensor_uid().has_value())
        return "block masks";
    if(a.sink_token_tensor_uid().has_value())
        return "sink tokens";
    if(!serves_fp8 && sdpa_is_fp8(a))
        return "fp8 scaling";
    if(a.max_tensor_uid().has_value() || a.sum_exp_tensor_uid().has_value())
        return "separate max / sum-exp outputs";
    if(!serves_softcap && a.softcap() != 0.0f)
        return "score softcapping";
    return nullptr;
}

// The backward's counterpart: what a backward node uses that changes what is computed and that an
// engine must implement or refuse (never ignore): dropout, a bias gradient, FP8 scaling unless
// serves_fp8 (API >= 1.6.0), score softcapping unless serves_softcap (API >= 1.4.0). nullptr when none.
inline const char* sdpa_backward_extension_in_use(const hipdnn::wire::SdpaBackwardAttributes& a,
                                                  bool serves_softcap = false, bool serves_fp8 = false)
{
    if(a.seed_tensor_uid().has_value() || a.offset_tensor_uid().has_value()
       || (a.dropout_probability().has_value() && a.dropout_probability().value() != 0.0f))
        return "dropout";
    if(a.dbias_tensor_uid().has_value())
        return "a bias gradient (dbias)";
    if(!serves_fp8 && sdpa_backward_is_fp8(a))
        return "fp8 scaling";
    if(!serves_softcap && a.softcap() != 0.0f)
        return "score softcapping";
    return nullptr;
}

} // namespace cpp
} // namespace hipdnn_plugin_sdk

#endif // HIPDNN_PLUGIN_SDK_CPP_SDPA_HPP
