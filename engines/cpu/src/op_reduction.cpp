// Reduction: y = x reduced (sum, product, min, max, ...) over the axes where y has dim 1. The
// kernel is run_reduction (norms.cpp).

#include "engine_plan.hpp"

namespace hipdnn_cpu
{
namespace
{

std::string read(const wire::Node& n, const Plan& plan, NodeInfo& node, TensorRefs& refs)
{
    const auto* a = n.attributes_as_ReductionAttributes();
    const int mode = static_cast<int>(a->mode());
    if(mode < 1 || mode > 9)
        return format("node '%s': reduction mode %d is not supported", node.name.c_str(), mode);
    node.reduce = static_cast<ReduceOp>(mode);
    node.in[0] = refs(a->x_tensor_uid());
    node.out[0] = refs(a->y_tensor_uid());
    if(!refs.why.empty())
        return refs.why;
    const TensorInfo &xi = plan.tensors[node.in[0]], &yi = plan.tensors[node.out[0]];
    if(!yi.has_dims || yi.declared.rank != xi.declared.rank)
        return format("node '%s' (reduction): y must have x's rank; its dims of 1 mark the reduced axes",
                      node.name.c_str());
    for(int i = 0; i < yi.declared.rank; ++i)
        node.reduced[i] = yi.declared.dims[i] == 1;
    const int ts[] = {node.in[0], node.out[0]};
    return only_float(plan, node, ts);
}

bool infer(const Plan& plan, const NodeInfo& node, bool planning, Shape* eff, ShapeError& err)
{
    Shape y = eff[node.in[0]];
    for(int i = 0; i < y.rank; ++i)
        if(node.reduced[i])
            y.dims[i] = 1;
    return set_output(plan, node, node.out[0], y, planning, eff, err);
}

bool run(const Plan&, const NodeInfo& node, const RunArgs& args)
{
    void* const* ptrs = args.ptrs;
    const Shape* eff = args.eff;
    const Shape &x = eff[node.in[0]], &y = eff[node.out[0]];
    ReductionProblem p;
    p.op = node.reduce;
    p.rank = x.rank;
    p.x = static_cast<const float*>(ptrs[node.in[0]]);
    p.y = static_cast<float*>(ptrs[node.out[0]]);
    for(int i = 0; i < x.rank; ++i)
    {
        p.dims[i] = x.dims[i];
        p.reduced[i] = node.reduced[i];
        p.x_st[i] = x.strides[i];
        p.y_st[i] = y.strides[i];
    }
    run_reduction(p, args.nthreads);
    return true;
}

} // namespace

extern const OpDesc kReductionOp = {
    wire::NodeAttributes::ReductionAttributes, "reduction", read, infer, nullptr, run, nullptr, false, nullptr};

} // namespace hipdnn_cpu
