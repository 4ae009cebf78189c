// LayerNorm: y = (x - mean) / sqrt(var + eps) * scale + bias over the trailing axes, and the mean
// and inverse variance when asked.

#include "op_norm.hpp"

namespace hipdnn_cpu
{
namespace
{

std::string read(const wire::Node& n, const Plan& plan, NodeInfo& node, TensorRefs& refs)
{
    const auto* a = n.attributes_as_LayernormAttributes();
    const int count = read_norm_common(a, node, refs);
    if(a->mean_tensor_uid().has_value())
        node.out[1] = refs(a->mean_tensor_uid().value());
    if(a->inv_variance_tensor_uid().has_value())
        node.out[2] = refs(a->inv_variance_tensor_uid().value());
    return finish_norm(plan, node, refs, count);
}

} // namespace

extern const OpDesc kLayerNormOp = {
    wire::NodeAttributes::LayernormAttributes, "layernorm", read, infer_norm, nullptr, run_norm_node, nullptr, false, nullptr};

} // namespace hipdnn_cpu
