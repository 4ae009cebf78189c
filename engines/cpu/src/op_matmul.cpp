// Matmul: C = A B over the last two axes, batch axes broadcast. The kernel is run_matmul
// (cpu_kernels.cpp: BLAS for large problems when linked, else the engine's tiled kernel).

#include "engine_plan.hpp"

namespace hipdnn_cpu
{
namespace
{

std::string read(const wire::Node& n, const Plan& plan, NodeInfo& node, TensorRefs& refs)
{
    const auto* a = n.attributes_as_MatmulAttributes();
    node.in[0] = refs(a->a_tensor_uid());
    node.in[1] = refs(a->b_tensor_uid());
    node.out[0] = refs(a->c_tensor_uid());
    if(!refs.why.empty())
        return refs.why;
    const int ts[] = {node.in[0], node.in[1], node.out[0]};
    return only_float(plan, node, ts);
}

bool infer(const Plan& plan, const NodeInfo& node, bool planning, Shape* eff, ShapeError& err)
{
    auto uid = [&](int t) { return static_cast<long long>(plan.tensors[t].uid); };
    const Shape &a = eff[node.in[0]], &b = eff[node.in[1]];
    if(a.rank < 2 || b.rank < 2)
        return shape_fail(err, "node '%s' (matmul): A and B need rank >= 2", node.name.c_str());
    if(!dim_eq(a.dims[a.rank - 1], b.dims[b.rank - 2]))
        return shape_fail(err,
                          "node '%s' (matmul): K of A (uid %lld) is %lld but B (uid %lld) has %lld rows",
                          node.name.c_str(),
                          uid(node.in[0]),
                          static_cast<long long>(a.dims[a.rank - 1]),
                          uid(node.in[1]),
                          static_cast<long long>(b.dims[b.rank - 2]));
    Shape ab = a, bb = b;
    ab.rank -= 2;
    bb.rank -= 2;
    Shape c;
    if(!broadcast(ab, bb, c))
        return shape_fail(err, "node '%s' (matmul): batch dims of A and B do not broadcast", node.name.c_str());
    c.dims[c.rank] = a.dims[a.rank - 2];
    c.dims[c.rank + 1] = b.dims[b.rank - 1];
    c.rank += 2;
    return set_output(plan, node, node.out[0], c, planning, eff, err);
}

// One cache block per thread, capped whatever M, N and K: wildcards are sized at the cap.
size_t scratch(const NodeInfo& node, const Shape* eff, std::string*)
{
    const Shape &a = eff[node.in[0]], &b = eff[node.in[1]];
    return matmul_scratch_per_thread(unbounded(a.dims[a.rank - 2]),
                                     unbounded(b.dims[b.rank - 1]),
                                     unbounded(meet(a.dims[a.rank - 1], b.dims[b.rank - 2])));
}

bool run(const Plan& plan, const NodeInfo& node, const RunArgs& args)
{
    void* const* ptrs = args.ptrs;
    const Shape* eff = args.eff;
    const Shape &a = eff[node.in[0]], &b = eff[node.in[1]], &c = eff[node.out[0]];
    MatmulProblem p;
    p.a = static_cast<const float*>(ptrs[node.in[0]]);
    p.b = static_cast<const float*>(ptrs[node.in[1]]);
    p.c = static_cast<float*>(ptrs[node.out[0]]);
    p.m = a.dims[a.rank - 2];
    p.k = a.dims[a.rank - 1];
    p.n = b.dims[b.rank - 1];
    p.a_sm = a.strides[a.rank - 2];
    p.a_sk = a.strides[a.rank - 1];
    p.b_sk = b.strides[b.rank - 2];
    p.b_sn = b.strides[b.rank - 1];
    p.c_sm = c.strides[c.rank - 2];
    p.c_sn = c.strides[c.rank - 1];
    p.batch_rank = c.rank - 2;
    for(int i = 0; i < p.batch_rank; ++i)
    {
        p.batch_dims[i] = c.dims[i];
        p.c_bs[i] = c.strides[i];
        const int ia = i - (c.rank - a.rank), ib = i - (c.rank - b.rank);
        p.a_bs[i] = (ia >= 0 && a.dims[ia] != 1) ? a.strides[ia] : 0;
        p.b_bs[i] = (ib >= 0 && b.dims[ib] != 1) ? b.strides[ib] : 0;
    }
    return run_matmul(p, args.scratch, plan.scratch_per_thread, args.nthreads, args.isa);
}

void describe(const Plan& plan, const NodeInfo& n, std::string& s)
{
    s += "(" + shape_str(plan.tensors[n.in[0]].declared) + "x" + shape_str(plan.tensors[n.in[1]].declared) + ")";
}

} // namespace

extern const OpDesc kMatmulOp = {
    wire::NodeAttributes::MatmulAttributes, "matmul", read, infer, scratch, run, describe, false, nullptr};

} // namespace hipdnn_cpu
