// Pointwise: one binary or unary elementwise op, inputs broadcast (numpy rules). The kernel is
// run_pointwise (cpu_kernels.cpp).

#include "engine_plan.hpp"

namespace hipdnn_cpu
{
namespace
{

std::string read(const wire::Node& n, const Plan& plan, NodeInfo& node, TensorRefs& refs)
{
    const auto* a = n.attributes_as_PointwiseAttributes();
    switch(a->operation())
    {
    case wire::PointwiseMode::ADD:
        node.op = BinaryOp::Add;
        break;
    case wire::PointwiseMode::SUB:
        node.op = BinaryOp::Sub;
        break;
    case wire::PointwiseMode::MUL:
        node.op = BinaryOp::Mul;
        break;
    case wire::PointwiseMode::DIV:
        node.op = BinaryOp::Div;
        break;
    case wire::PointwiseMode::MAX_OP:
        node.op = BinaryOp::Max;
        break;
    case wire::PointwiseMode::MIN_OP:
        node.op = BinaryOp::Min;
        break;
#define HIPDNN_PW(wire_mode, op_name)                                                                                  \
    case wire::PointwiseMode::wire_mode:                                                                               \
node.op = BinaryOp::op_name;                                                                                   \
break;
        HIPDNN_PW(ADD_SQUARE, AddSquare)
        HIPDNN_PW(CMP_EQ, CmpEq)
        HIPDNN_PW(CMP_NEQ, CmpNe)
        HIPDNN_PW(CMP_GT, CmpGt)
        HIPDNN_PW(CMP_GE, CmpGe)
        HIPDNN_PW(CMP_LT, CmpLt)
        HIPDNN_PW(CMP_LE, CmpLe)
        HIPDNN_PW(LOGICAL_AND, LogicalAnd)
        HIPDNN_PW(LOGICAL_OR, LogicalOr)
        HIPDNN_PW(ABS, Abs)
        HIPDNN_PW(CEIL, Ceil)
        HIPDNN_PW(FLOOR, Floor)
        HIPDNN_PW(ERF, Erf)
        HIPDNN_PW(EXP, Exp)
        HIPDNN_PW(LOG, Log)
        HIPDNN_PW(NEG, Neg)
        HIPDNN_PW(RECIPROCAL, Recip)
        HIPDNN_PW(RELU_FWD, Relu)
        HIPDNN_PW(RSQRT, Rsqrt)
        HIPDNN_PW(SIGMOID_FWD, Sigmoid)
        HIPDNN_PW(SIN, Sin)
        HIPDNN_PW(TAN, Tan)
        HIPDNN_PW(SOFTPLUS_FWD, Softplus)
        HIPDNN_PW(SQRT, Sqrt)
        HIPDNN_PW(SWISH_FWD, Swish)
        HIPDNN_PW(TANH_FWD, Tanh)
        HIPDNN_PW(GELU_FWD, Gelu)
        HIPDNN_PW(GELU_APPROX_TANH_FWD, GeluTanh)
        HIPDNN_PW(ELU_FWD, Elu)
        HIPDNN_PW(IDENTITY, Identity)
        HIPDNN_PW(LOGICAL_NOT, LogicalNot)
#undef HIPDNN_PW
    default:
        return format("node '%s': pointwise mode %s is not supported",
                      node.name.c_str(),
                      wire::EnumNamePointwiseMode(a->operation()));
    }
    if(a->axis_tensor_uid().has_value())
        return format("node '%s': a pointwise axis tensor is not supported", node.name.c_str());
    const bool unary = is_unary(node.op);
    if(!unary && !a->in_1_tensor_uid().has_value())
        return format("node '%s': pointwise mode %s needs two inputs",
                      node.name.c_str(),
                      wire::EnumNamePointwiseMode(a->operation()));
    if(unary && a->in_1_tensor_uid().has_value())
        return format("node '%s': pointwise mode %s takes one input",
                      node.name.c_str(),
                      wire::EnumNamePointwiseMode(a->operation()));
    if(a->in_2_tensor_uid().has_value())
        return format("node '%s': a third pointwise input is not supported", node.name.c_str());
    PointwiseParams& prm = node.pw;
    if(a->relu_lower_clip().has_value())
        prm.relu_lo = a->relu_lower_clip().value();
    if(a->relu_upper_clip().has_value())
    {
        prm.has_relu_hi = true;
        prm.relu_hi = a->relu_upper_clip().value();
    }
    if(a->relu_lower_clip_slope().has_value())
        prm.relu_slope = a->relu_lower_clip_slope().value();
    if(a->swish_beta().has_value())
        prm.swish_beta = a->swish_beta().value();
    if(a->elu_alpha().has_value())
        prm.elu_alpha = a->elu_alpha().value();
    if(a->softplus_beta().has_value())
        prm.softplus_beta = a->softplus_beta().value();
    node.in[0] = refs(a->in_0_tensor_uid());
    node.in[1] = unary ? node.in[0] : refs(a->in_1_tensor_uid().value());
    node.out[0] = refs(a->out_0_tensor_uid());
    if(!refs.why.empty())
        return refs.why;
    const int ts[] = {node.in[0], node.in[1], node.out[0]};
    return only_float(plan, node, ts);
}

bool infer(const Plan& plan, const NodeInfo& node, bool planning, Shape* eff, ShapeError& err)
{
    auto uid = [&](int t) { return static_cast<long long>(plan.tensors[t].uid); };
    Shape o;
    if(!broadcast(eff[node.in[0]], eff[node.in[1]], o))
        return shape_fail(err,
                          "node '%s' (pointwise): inputs uid %lld and uid %lld do not broadcast",
                          node.name.c_str(),
                          uid(node.in[0]),
                          uid(node.in[1]));
    return set_output(plan, node, node.out[0], o, planning, eff, err);
}

bool run(const Plan&, const NodeInfo& node, const RunArgs& args)
{
    void* const* ptrs = args.ptrs;
    const Shape* eff = args.eff;
    const Shape &a = eff[node.in[0]], &b = eff[node.in[1]], &o = eff[node.out[0]];
    PointwiseProblem p;
    p.a = static_cast<const float*>(ptrs[node.in[0]]);
    p.b = static_cast<const float*>(ptrs[node.in[1]]);
    p.out = static_cast<float*>(ptrs[node.out[0]]);
    p.op = node.op;
    p.prm = node.pw;
    p.rank = o.rank;
    for(int i = 0; i < o.rank; ++i)
    {
        p.dims[i] = o.dims[i];
        p.o_st[i] = o.strides[i];
        const int ia = i - (o.rank - a.rank), ib = i - (o.rank - b.rank);
        p.a_st[i] = (ia >= 0 && a.dims[ia] != 1) ? a.strides[ia] : 0;
        p.b_st[i] = (ib >= 0 && b.dims[ib] != 1) ? b.strides[ib] : 0;
    }
    run_pointwise(p, args.nthreads);
    return true;
}

} // namespace

// Elementwise, each output index read and written once: it may update its output in place, so a
// wildcard-sized intermediate it reads can live there.
extern const OpDesc kPointwiseOp = {
    wire::NodeAttributes::PointwiseAttributes, "pointwise", read, infer, nullptr, run, nullptr, true, nullptr};

} // namespace hipdnn_cpu
