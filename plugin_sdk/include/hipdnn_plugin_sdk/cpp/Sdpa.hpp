// hipdnn plugin SDK, C++ layer: reading SDPA nodes.
#ifndef HIPDNN_PLUGIN_SDK_CPP_SDPA_HPP
#define HIPDNN_PLUGIN_SDK_CPP_SDPA_HPP

#include "../wire/operations_generated.h"

namespace hipdnn_plugin_sdk
{
namespace cpp
{

// The first SDPA extension the node uses among those that change what is computed and that an
// engine must implement or refuse (never ignore): dropout, paged k/v, block masks, sink tokens, fp8
// scaling, separate max / sum-exp outputs. nullptr when the node uses none of them.
inline const char* sdpa_extension_in_use(const hipdnn::wire::SdpaAttributes& a)
{
    if(a.seed_tensor_uid().has_value() || a.offset_tensor_uid().has_value() || a.dropout_mask_tensor_uid().has_value()
       || a.dropout_scale_tensor_uid().has_value() || a.rng_dump_tensor_uid().has_value()
       || (a.dropout_probability().has_value() && a.dropout_probability().value() != 0.0f))
        return "dropout";
    if(a.page_table_k_tensor_uid().has_value() || a.page_table_v_tensor_uid().has_value())
        return "paged k/v";
    if(a.block_mask_tensor_uid().has_value())
        return "block masks";
    if(a.sink_token_tensor_uid().has_value())
        return "sink tokens";
    if(a.descale_q_tensor_uid().has_value() || a.descale_k_tensor_uid().has_value()
       || a.descale_v_tensor_uid().has_value() || a.descale_s_tensor_uid().has_value()
       || a.scale_s_tensor_uid().has_value() || a.scale_o_tensor_uid().has_value()
       || a.amax_s_tensor_uid().has_value() || a.amax_o_tensor_uid().has_value())
        return "fp8 scaling";
    if(a.max_tensor_uid().has_value() || a.sum_exp_tensor_uid().has_value())
        return "separate max / sum-exp outputs";
    return nullptr;
}

} // namespace cpp
} // namespace hipdnn_plugin_sdk

#endif // HIPDNN_PLUGIN_SDK_CPP_SDPA_HPP
