// What the CPU engine's two normalizations (op_rmsnorm.cpp, op_layernorm.cpp) share: the fields
// both node tables carry, the shape rules and the run (the kernel is run_norm, norms.cpp).
#pragma once

#include "engine_plan.hpp"

namespace hipdnn_cpu
{

// Reads x, scale, bias, epsilon / y; returns normalized_dim_count (0 when absent).
template <class Attrs>
int read_norm_common(const Attrs* a, NodeInfo& node, TensorRefs& refs)
{
    node.in[0] = refs(a->x_tensor_uid());
    if(a->scale_tensor_uid().has_value())
        node.in[1] = refs(a->scale_tensor_uid().value());
    if(a->bias_tensor_uid().has_value())
        node.in[2] = refs(a->bias_tensor_uid().value());
    if(a->epsilon_tensor_uid().has_value())
        node.in[3] = refs(a->epsilon_tensor_uid().value());
    node.eps = a->epsilon_value().has_value() ? a->epsilon_value().value() : 1e-5f;
    const int count = a->normalized_dim_count().has_value() ? a->normalized_dim_count().value() : 0;
    node.out[0] = refs(a->y_tensor_uid());
    return count;
}

// After every uid was read: the normalized axes (count, or 0 to infer them) and the data types.
inline std::string finish_norm(const Plan& plan, NodeInfo& node, TensorRefs& refs, int count)
{
    if(!refs.why.empty())
        return refs.why;
    const int rank = plan.tensors[node.in[0]].declared.rank;
    if(count == 0)
    {
        // From the first axis where scale or bias (right-aligned) is not 1; else the last axis.
        count = 1;
        for(int r = 1; r <= 2; ++r)
        {
            if(node.in[r] < 0)
                continue;
            const Shape& sb = plan.tensors[node.in[r]].declared;
            for(int i = 0; i < sb.rank; ++i)
                if(sb.dims[i] != 1)
                    count = std::max(count, sb.rank - i);
        }
    }
    if(count < 1 || count > rank)
        return format("node '%s' (%s): %d normalized axes for x of rank %d",
                      node.name.c_str(),
                      node.kind->name,
                      count,
                      rank);
    node.norm_count = count;
    if(!(node.eps >= 0.0f))
        return format("node '%s' (%s): epsilon must be >= 0", node.name.c_str(), node.kind->name);
    if(std::string bad = only_float(plan, node, node.in); !bad.empty())
        return bad;
    for(int t : node.out)
        if(t >= 0 && plan.tensors[t].dt != DType::F32)
            return format("node '%s' (%s): output uid %lld must be FLOAT",
                          node.name.c_str(),
                          node.kind->name,
                          static_cast<long long>(plan.tensors[t].uid));
    return "";
}

inline bool infer_norm(const Plan& plan, const NodeInfo& node, bool planning, Shape* eff, ShapeError& err)
{
    auto uid = [&](int t) { return static_cast<long long>(plan.tensors[t].uid); };
    const Shape x = eff[node.in[0]];
    const int first = x.rank - node.norm_count;
    for(int r = 1; r <= 2; ++r)
    {
        if(node.in[r] < 0)
            continue;
        const Shape& sb = eff[node.in[r]];
        bool ok = sb.rank <= x.rank;
        for(int i = 0; ok && i < sb.rank; ++i)
        {
            const int ax = i + x.rank - sb.rank;
            ok = sb.dims[i] == 1 || (ax >= first && dim_eq(sb.dims[i], x.dims[ax]));
        }
        if(!ok)
            return shape_fail(err,
                              "node '%s' (%s): %s (uid %lld) does not broadcast over the last %d axes of x",
                              node.name.c_str(),
                              node.kind->name,
                              r == 1 ? "scale" : "bias",
                              uid(node.in[r]),
                              node.norm_count);
    }
    if(node.in[3] >= 0 && !has_wildcard(eff[node.in[3]]) && elements(eff[node.in[3]]) != 1)
        return shape_fail(err, "node '%s': the epsilon tensor must hold one element", node.name.c_str());
    if(!set_output(plan, node, node.out[0], x, planning, eff, err))
        return false;
    Shape st = x;
    for(int i = first; i < st.rank; ++i)
        st.dims[i] = 1;
    for(int o = 1; o <= 2; ++o)
        if(node.out[o] >= 0 && !set_output(plan, node, node.out[o], st, planning, eff, err))
            return false;
    return true;
}

inline bool run_norm_node(const Plan& plan, const NodeInfo& node, const RunArgs& args)
{
    void* const* ptrs = args.ptrs;
    const Shape* eff = args.eff;
    const Shape &x = eff[node.in[0]], &y = eff[node.out[0]];
    NormProblem p;
    p.rms = node.kind == &kRmsNormOp;
    p.rank = x.rank;
    p.n = node.norm_count;
    p.x = static_cast<const float*>(ptrs[node.in[0]]);
    p.y = static_cast<float*>(ptrs[node.out[0]]);
    for(int i = 0; i < x.rank; ++i)
    {
        p.dims[i] = x.dims[i];
        p.x_st[i] = x.strides[i];
        p.y_st[i] = y.strides[i];
    }
    // Strides aligned to x's rank, 0 where the tensor has dim 1 (broadcast).
    auto aligned = [&](int t, int64_t* out) {
        const Shape& s = eff[t];
        for(int i = 0; i < x.rank; ++i)
        {
            const int is = i - (x.rank - s.rank);
            out[i] = (is >= 0 && s.dims[is] != 1) ? s.strides[is] : 0;
        }
    };
    if(node.in[1] >= 0)
    {
        p.scale = static_cast<const float*>(ptrs[node.in[1]]);
        aligned(node.in[1], p.scale_st);
    }
    if(node.in[2] >= 0)
    {
        p.bias = static_cast<const float*>(ptrs[node.in[2]]);
        aligned(node.in[2], p.bias_st);
    }
    if(node.out[1] >= 0)
    {
        p.stat_a = static_cast<float*>(ptrs[node.out[1]]);
        aligned(node.out[1], p.a_st);
    }
    if(node.out[2] >= 0)
    {
        p.stat_b = static_cast<float*>(ptrs[node.out[2]]);
        aligned(node.out[2], p.b_st);
    }
    p.eps = node.in[3] >= 0 ? read_scalar(ptrs[node.in[3]], plan.tensors[node.in[3]].dt) : node.eps;
    run_norm(p, args.nthreads);
    return true;
}

} // namespace hipdnn_cpu
