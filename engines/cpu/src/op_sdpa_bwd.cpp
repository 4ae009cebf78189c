// SDPA backward: dq, dk, dv from q, k, v, o, dO and the forward's row statistics, under the same
// masks, padding and bias as the forward. The kernel is run_sdpa_bwd (sdpa_bwd.cpp).

#include "op_attention.hpp"

namespace hipdnn_cpu
{
namespace
{

std::string read(const wire::Node& n, const Plan& plan, NodeInfo& node, TensorRefs& refs)
{
    const auto* a = n.attributes_as_SdpaBackwardAttributes();
    const char* nm = node.name.c_str();
    if(a->seed_tensor_uid().has_value() || a->offset_tensor_uid().has_value()
       || (a->dropout_probability().has_value() && a->dropout_probability().value() != 0.0f))
        return format("node '%s' (sdpa_bwd): dropout is not supported", nm);
    if(a->dbias_tensor_uid().has_value())
        return format("node '%s' (sdpa_bwd): a bias gradient (dbias) is not supported", nm);
    const bool fp8 = sdk::sdpa_backward_is_fp8(*a);
    if(fp8 && !sdk::sdpa_backward_fp8_complete(*a))
        return format("node '%s' (sdpa_bwd): FP8 scaling without all of descale_q/k/v/o/dO/s/dP, scale_s/dQ/dK/dV/dP "
                      "and amax_dQ/dK/dV/dP",
                      nm);
    if(fp8
       && (a->attn_mask_tensor_uid().has_value() || a->alibi_mask() || a->softcap() != 0.0f
           || a->scale_tensor_uid().has_value()))
        return format("node '%s' (sdpa_bwd): FP8 scaling with a bias, ALiBi, softcapping or a tensor attention scale",
                      nm);
    if(a->padding_mask() != (a->seq_len_q_tensor_uid().has_value() && a->seq_len_kv_tensor_uid().has_value())
       || (!a->padding_mask() && (a->seq_len_q_tensor_uid().has_value() || a->seq_len_kv_tensor_uid().has_value())))
        return format("node '%s' (sdpa_bwd): a padding mask needs both seq_len_q and seq_len_kv", nm);
    if((a->left_bound().has_value() && a->left_bound().value() < 0)
       || (a->right_bound().has_value() && a->right_bound().value() < 0))
        return format("node '%s' (sdpa_bwd): negative band bounds are not supported", nm);
    if(std::string bad = read_attention_options(a, node, nm, "sdpa_bwd", refs); !bad.empty())
        return bad;
    node.in[7] = refs(a->o_tensor_uid());
    node.in[8] = refs(a->do_tensor_uid());
    node.in[9] = refs(a->stats_tensor_uid());
    node.out[0] = refs(a->dq_tensor_uid());
    node.out[1] = refs(a->dk_tensor_uid());
    node.out[2] = refs(a->dv_tensor_uid());
    if(fp8)
    {
        node.fp8 = true;
        const int64_t uids[12] = {a->descale_q_tensor_uid().value(),  a->descale_k_tensor_uid().value(),
                                  a->descale_v_tensor_uid().value(),  a->descale_o_tensor_uid().value(),
                                  a->descale_do_tensor_uid().value(), a->descale_s_tensor_uid().value(),
                                  a->descale_dp_tensor_uid().value(), a->scale_s_tensor_uid().value(),
                                  a->scale_dq_tensor_uid().value(),   a->scale_dk_tensor_uid().value(),
                                  a->scale_dv_tensor_uid().value(),   a->scale_dp_tensor_uid().value()};
        for(int r = 0; r < 12; ++r)
            node.fp8_in[r] = refs(uids[r]);
        const int64_t amax[4] = {a->amax_dq_tensor_uid().value(),
                                 a->amax_dk_tensor_uid().value(),
                                 a->amax_dv_tensor_uid().value(),
                                 a->amax_dp_tensor_uid().value()};
        for(int r = 0; r < 4; ++r)
            node.fp8_out[r] = refs(amax[r]);
    }
    if(!refs.why.empty())
        return refs.why;
    auto is_len = [](DType d) { return d == DType::I32 || d == DType::I64; };
    auto fp8_or_float = [](DType d) { return is_fp8_type(d) || is_float_type(d); };
    for(int r = 0; r < 10; ++r)
    {
        const int t = node.in[r];
        if(t < 0)
            continue;
        const DType d = plan.tensors[t].dt;
        // FP8 nodes: q, k, v and dO FP8, o FP8 or a float type; plain ones: float types.
        bool ok = (r == 4 || r == 5) ? is_len(d) : r == 9 ? d == DType::F32 : is_float_type(d);
        if(fp8 && (r <= 2 || r == 8))
            ok = is_fp8_type(d);
        else if(fp8 && r == 7)
            ok = fp8_or_float(d);
        if(!ok)
            return format("node '%s' (sdpa_bwd): input uid %lld has data type %s, not supported there",
                          nm,
                          static_cast<long long>(plan.tensors[t].uid),
                          dtype_name(d));
    }
    for(int t : node.out)
        if(!(fp8 ? fp8_or_float(plan.tensors[t].dt) : is_float_type(plan.tensors[t].dt)))
            return format(
                "node '%s' (sdpa_bwd): gradients must be FLOAT, HALF or BFLOAT16%s", nm, fp8 ? " or FP8" : "");
    for(int t : node.fp8_in)
        if(t >= 0 && plan.tensors[t].dt != DType::F32)
            return format("node '%s' (sdpa_bwd): FP8 factor uid %lld must be FLOAT",
                          nm,
                          static_cast<long long>(plan.tensors[t].uid));
    for(int t : node.fp8_out)
        if(t >= 0 && plan.tensors[t].dt != DType::F32)
            return format("node '%s' (sdpa_bwd): amax output uid %lld must be FLOAT",
                          nm,
                          static_cast<long long>(plan.tensors[t].uid));
    if(fp8
       && (plan.tensors[node.in[1]].dt != plan.tensors[node.in[0]].dt
           || plan.tensors[node.in[2]].dt != plan.tensors[node.in[0]].dt))
        return format("node '%s' (sdpa_bwd): q, k and v must share one FP8 type", nm);
    if(node.out[0] == node.out[1] || node.out[0] == node.out[2] || node.out[1] == node.out[2])
        return format("node '%s' (sdpa_bwd): dq, dk and dv must be distinct tensors", nm);
    // q, k, v and dO bf16: the calls the AMX build's tile kernel may take (its scratch is reserved)
    node.bf16_qkv = true;
    for(int i : {0, 1, 2, 8})
        node.bf16_qkv = node.bf16_qkv && node.in[i] >= 0 && plan.tensors[node.in[i]].dt == DType::BF16;
    std::string why = plan_varlen(plan, node);
    if(why.empty() && fp8 && node.varlen)
        return format("node '%s' (sdpa_bwd): ragged tensors with FP8 scaling are not supported", nm);
    return why;
}

bool infer(const Plan& plan, const NodeInfo& node, bool planning, Shape* eff, ShapeError& err)
{
    const char* nm = node.name.c_str();
    const Shape &q = eff[node.in[0]], &k = eff[node.in[1]], &v = eff[node.in[2]];
    const Shape &o = eff[node.in[7]], &dout = eff[node.in[8]], &st = eff[node.in[9]];
    for(const Shape* s : {&q, &k, &v, &o, &dout, &st})
        if(s->rank != 4)
            return shape_fail(err, "node '%s' (sdpa_bwd): q, k, v, o, dO and stats must be rank 4", nm);
    if(!dim_eq(k.dims[0], q.dims[0]) || !dim_eq(v.dims[0], q.dims[0]) || !dim_eq(k.dims[3], q.dims[3])
       || !dim_eq(v.dims[1], k.dims[1]) || !dim_eq(v.dims[2], k.dims[2]))
        return shape_fail(err, "node '%s' (sdpa_bwd): q, k, v disagree in batch, heads, length or head dim", nm);
    if(q.dims[1] > 0 && k.dims[1] > 0 && q.dims[1] % k.dims[1] != 0)
        return shape_fail(err, "node '%s' (sdpa_bwd): query heads not a multiple of kv heads", nm);
    if(planning && (q.dims[3] < 0 || k.dims[3] < 0 || v.dims[3] < 0))
        return shape_fail(err, "node '%s' (sdpa_bwd): head dims size the tiles and must be declared", nm);
    // By role, not by address: a graph may name one tensor as both o and stats.
    for(int role = 7; role <= 9; ++role)
    {
        const Shape& s = eff[node.in[role]];
        const int64_t last = role == 9 ? 1 : v.dims[3];
        if(!dim_eq(s.dims[0], q.dims[0]) || !dim_eq(s.dims[1], q.dims[1]) || !dim_eq(s.dims[2], q.dims[2])
           || !dim_eq(s.dims[3], last))
            return shape_fail(err, "node '%s' (sdpa_bwd): o and dO must be [B,Hq,Sq,Dv], stats [B,Hq,Sq,1]", nm);
    }
    if(node.in[3] >= 0 && !has_wildcard(eff[node.in[3]]) && elements(eff[node.in[3]]) != 1)
        return shape_fail(err, "node '%s' (sdpa_bwd): the scale tensor must hold one element", nm);
    for(int r = 4; r <= 5; ++r)
    {
        if(node.in[r] < 0)
            continue;
        const Shape& sl = eff[node.in[r]];
        bool ok = sl.rank >= 1 && (dim_eq(sl.dims[0], q.dims[0]) || sl.dims[0] == 1);
        for(int i = 1; ok && i < sl.rank; ++i)
            ok = dim_eq(sl.dims[i], 1);
        if(!ok)
            return shape_fail(err, "node '%s' (sdpa_bwd): sequence lengths must be [B,1,1,1]", nm);
    }
    if(node.in[6] >= 0)
    {
        const Shape& bs = eff[node.in[6]];
        if(bs.rank != 4 || (bs.dims[0] != 1 && !dim_eq(bs.dims[0], q.dims[0]))
           || (bs.dims[1] != 1 && !dim_eq(bs.dims[1], q.dims[1])) || (bs.dims[2] != 1 && !dim_eq(bs.dims[2], q.dims[2]))
           || (bs.dims[3] != 1 && !dim_eq(bs.dims[3], k.dims[2])))
            return shape_fail(err, "node '%s' (sdpa_bwd): bias must be [B|1, H|1, Sq|1, Skv|1]", nm);
    }
    if(node.varlen && !infer_varlen(plan, node, eff, err))
        return false;
    static const char* const kFactors[] = {"descale_q", "descale_k", "descale_v",  "descale_o",
                                           "descale_dO", "descale_s", "descale_dP", "scale_s",
                                           "scale_dQ",  "scale_dK",  "scale_dV",   "scale_dP"};
    if(node.fp8 && !fp8_shapes(plan, node, "sdpa_bwd", kFactors, planning, eff, err))
        return false;
    const Shape qq = q, kk = k, vv = v;
    return set_output(plan, node, node.out[0], qq, planning, eff, err)
           && set_output(plan, node, node.out[1], kk, planning, eff, err)
           && set_output(plan, node, node.out[2], vv, planning, eff, err);
}

// Sized from the head dims only (infer refuses wildcard ones at planning).
size_t scratch(const NodeInfo& node, const Shape* eff, std::string*)
{
    if(node.fp8) // the reference: two rows of head dims (d + dv), in double
        return static_cast<size_t>(2 * (unbounded(eff[node.in[0]].dims[3]) + unbounded(eff[node.in[2]].dims[3])))
               * sizeof(double);
    return sdpa_bwd_scratch_per_thread(unbounded(eff[node.in[0]].dims[3]), unbounded(eff[node.in[2]].dims[3]),
                                       node.bf16_qkv);
}

bool run(const Plan& plan, const NodeInfo& node, const RunArgs& args)
{
    if(node.fp8)
        return run_sdpa_fp8_backward(plan, node, args);
    if(node.varlen)
        return run_sdpa_varlen(plan, node, args);
    SdpaBwdProblem bp;
    fill_backward(bp, plan, node, args);
    return run_backward_checked(bp, plan, node, args);
}

} // namespace

extern const OpDesc kSdpaBwdOp = {wire::NodeAttributes::SdpaBackwardAttributes,
                                  "sdpa_bwd",
                                  read,
                                  infer,
                                  scratch,
                                  run,
                                  nullptr,
                                  false,
                                  check_sdpa_varlen};

} // namespace hipdnn_cpu
