// RMSNorm: y = x / sqrt(mean(x^2) + eps) * scale + bias over the trailing axes, and inv_rms when asked.

#include "op_norm.hpp"

namespace hipdnn_cpu
{
namespace
{

std::string read(const wire::Node& n, const Plan& plan, NodeInfo& node, TensorRefs& refs)
{
    const auto* a = n.attributes_as_RMSNormAttributes();
    const int count = read_norm_common(a, node, refs);
    if(a->inv_rms_tensor_uid().has_value())
        node.out[1] = refs(a->inv_rms_tensor_uid().value());
    return finish_norm(plan, node, refs, count);
}

} // namespace

extern const OpDesc kRmsNormOp = {
    wire::NodeAttributes::RMSNormAttributes, "rmsnorm", read, infer_norm, nullptr, run_norm_node, nullptr, false, nullptr};

} // namespace hipdnn_cpu
