// SDPA forward: o = softmax(scale q k^T + bias, masked) v, and the row statistics (log-sum-exp) when
// asked. The kernel is run_sdpa (sdpa_fwd.inl).

#include "op_attention.hpp"

#include <hipdnn_plugin_sdk/cpp/Sdpa.hpp>

namespace hipdnn_cpu
{
namespace
{

std::string read(const wire::Node& n, const Plan& plan, NodeInfo& node, TensorRefs& refs)
{
    const auto* a = n.attributes_as_SdpaAttributes();
    const char* nm = node.name.c_str();
    // Inputs and outputs beyond q, k, v, o, stats are features this
    // engine does not implement: not applicable rather than ignored.
    struct Unsupported
    {
        bool present;
        const char* what;
    };
    const char* const extension
        = sdk::sdpa_extension_in_use(*a, /*serves_paged_kv=*/true, /*serves_softcap=*/true, /*serves_fp8=*/true);
    const bool fp8 = sdk::sdpa_is_fp8(*a);
    const bool paged = sdk::sdpa_is_paged(*a);
    const Unsupported unsupported[] = {
        {extension != nullptr, extension},
        {a->padding_mask() != (a->seq_len_q_tensor_uid().has_value() && a->seq_len_kv_tensor_uid().has_value())
             || (!a->padding_mask()
                 && (a->seq_len_q_tensor_uid().has_value() || a->seq_len_kv_tensor_uid().has_value())),
         "a padding mask without both seq_len_q and seq_len_kv (or sequence lengths without it)"},
        {a->left_bound().has_value() && a->left_bound().value() < 0, "a negative left bound"},
        {a->right_bound().has_value() && a->right_bound().value() < 0, "a negative right bound"},
        {!dtype_ok(a->mma_core_mode()), "an mma core mode other than FLOAT"},
        {a->generate_stats().has_value() && a->generate_stats().value() && !a->stats_tensor_uid().has_value(),
         "generate_stats without a stats tensor"},
        {paged && !(a->page_table_k_tensor_uid().has_value() && a->page_table_v_tensor_uid().has_value()),
         "paging one of K and V (both page tables are needed)"},
        {paged && !a->padding_mask(), "paged K/V without the padding mask (seq_len_kv gives the key counts)"},
        {a->max_seq_len_kv().has_value() && (!paged || a->max_seq_len_kv().value() <= 0),
         "max_seq_len_kv without page tables, or not positive,"},
        {fp8 && !sdk::sdpa_fp8_complete(*a), "FP8 scaling without all of descale_q/k/v/s, scale_s/o, amax_s/o"},
        {fp8 && (a->attn_mask_tensor_uid().has_value() || a->alibi_mask() || a->softcap() != 0.0f || paged
                 || a->scale_tensor_uid().has_value()),
         "FP8 scaling with a bias, ALiBi, softcapping, paged K/V or a tensor attention scale"},
    };
    for(const Unsupported& u : unsupported)
        if(u.present)
            return format("node '%s' (sdpa_fwd): %s is not supported", nm, u.what);
    if(std::string bad = read_attention_options(a, node, nm, "sdpa_fwd", refs); !bad.empty())
        return bad;
    node.out[0] = refs(a->o_tensor_uid());
    if(a->stats_tensor_uid().has_value())
        node.out[1] = refs(a->stats_tensor_uid().value());
    if(fp8)
    {
        node.fp8 = true;
        const int64_t uids[6] = {a->descale_q_tensor_uid().value(), a->descale_k_tensor_uid().value(),
                                 a->descale_v_tensor_uid().value(), a->descale_s_tensor_uid().value(),
                                 a->scale_s_tensor_uid().value(), a->scale_o_tensor_uid().value()};
        for(int r = 0; r < 6; ++r)
            node.fp8_in[r] = refs(uids[r]);
        node.fp8_out[0] = refs(a->amax_s_tensor_uid().value());
        node.fp8_out[1] = refs(a->amax_o_tensor_uid().value());
    }
    if(paged)
    {
        node.paged = true;
        node.in[7] = refs(a->page_table_k_tensor_uid().value());
        node.in[8] = refs(a->page_table_v_tensor_uid().value());
        node.max_skv = a->max_seq_len_kv().has_value() ? a->max_seq_len_kv().value() : -1;
    }
    if(refs.why.empty())
    {
        // Element types by role.
        struct Role
        {
            int t;
            const char* what;
            bool (*ok)(DType);
        };
        // FP8 nodes: q, k, v FP8, o FP8 or a float type, the factors and amax FLOAT.
        bool (*const qkv_ok)(DType) = fp8 ? is_fp8_type : is_float_type;
        bool (*const o_ok)(DType) = fp8 ? [](DType d) { return is_fp8_type(d) || is_float_type(d); } : is_float_type;
        auto f32 = [](DType d) { return d == DType::F32; };
        const Role roles[] = {
            {node.in[0], "q", qkv_ok},
            {node.in[1], "k", qkv_ok},
            {node.in[2], "v", qkv_ok},
            {node.in[3], "the scale tensor", is_float_type},
            {node.in[4], "seq_len_q", [](DType d) { return d == DType::I32 || d == DType::I64; }},
            {node.in[5], "seq_len_kv", [](DType d) { return d == DType::I32 || d == DType::I64; }},
            {node.in[6], "the bias", is_float_type},
            {node.out[0], "o", o_ok},
            {node.out[1], "stats", [](DType d) { return d == DType::F32; }},
            {node.in[7], "the K page table", [](DType d) { return d == DType::I32; }},
            {node.in[8], "the V page table", [](DType d) { return d == DType::I32; }},
            {node.fp8_in[0], "descale_q", f32},
            {node.fp8_in[1], "descale_k", f32},
            {node.fp8_in[2], "descale_v", f32},
            {node.fp8_in[3], "descale_s", f32},
            {node.fp8_in[4], "scale_s", f32},
            {node.fp8_in[5], "scale_o", f32},
            {node.fp8_out[0], "amax_s", f32},
            {node.fp8_out[1], "amax_o", f32},
        };
        for(const Role& r : roles)
            if(r.t >= 0 && !r.ok(plan.tensors[r.t].dt))
                return format("node '%s' (sdpa_fwd): %s has data type %s, which is not supported there",
                              nm,
                              r.what,
                              dtype_name(plan.tensors[r.t].dt));
        if(fp8
           && (plan.tensors[node.in[1]].dt != plan.tensors[node.in[0]].dt
               || plan.tensors[node.in[2]].dt != plan.tensors[node.in[0]].dt))
            return format("node '%s' (sdpa_fwd): q, k and v must share one FP8 type", nm);
    }
    if(!refs.why.empty())
        return "";
    node.bf16_qkv = true;
    for(int i = 0; i < 3; ++i)
        node.bf16_qkv = node.bf16_qkv && node.in[i] >= 0 && plan.tensors[node.in[i]].dt == DType::BF16;
    std::string why = plan_varlen(plan, node);
    if(why.empty() && fp8 && node.varlen)
        return format("node '%s' (sdpa_fwd): ragged tensors with FP8 scaling are not supported", nm);
    return why;
}

bool infer(const Plan& plan, const NodeInfo& node, bool planning, Shape* eff, ShapeError& err)
{
    auto uid = [&](int t) { return static_cast<long long>(plan.tensors[t].uid); };
    const Shape &q = eff[node.in[0]], &k = eff[node.in[1]], &v = eff[node.in[2]];
    if(q.rank != 4 || k.rank != 4 || v.rank != 4)
        return shape_fail(err, "node '%s' (sdpa_fwd): q, k and v must be rank 4 [B,H,S,D]", node.name.c_str());
    // A paged node's k and v are caches [num_blocks, Hk, block_size, D]: its tables carry the batch
    // (infer_varlen) and its key length is varlen_skv's.
    if(node.varlen && !infer_varlen(plan, node, eff, err))
        return false;
    const int64_t skv = node.paged ? varlen_skv(node, eff) : k.dims[2];
    if(!node.paged
       && (!dim_eq(k.dims[0], q.dims[0]) || !dim_eq(v.dims[0], q.dims[0]) || !dim_eq(k.dims[0], v.dims[0])))
        return shape_fail(err, "node '%s' (sdpa_fwd): batch sizes of q, k, v differ", node.name.c_str());
    if(!dim_eq(k.dims[3], q.dims[3]))
        return shape_fail(err,
                          "node '%s' (sdpa_fwd): head dim of k (uid %lld) %lld differs from q's %lld",
                          node.name.c_str(),
                          uid(node.in[1]),
                          static_cast<long long>(k.dims[3]),
                          static_cast<long long>(q.dims[3]));
    if(!dim_eq(v.dims[1], k.dims[1]) || (!node.paged && !dim_eq(v.dims[2], k.dims[2])))
        return shape_fail(err, "node '%s' (sdpa_fwd): k and v heads / sequence lengths differ", node.name.c_str());
    if(q.dims[1] > 0 && k.dims[1] > 0 && q.dims[1] % k.dims[1] != 0)
        return shape_fail(err,
                          "node '%s' (sdpa_fwd): query heads %lld not a multiple of kv heads %lld",
                          node.name.c_str(),
                          static_cast<long long>(q.dims[1]),
                          static_cast<long long>(k.dims[1]));
    Shape o;
    o.rank = 4;
    o.dims[0] = node.paged ? q.dims[0] : meet(q.dims[0], meet(k.dims[0], v.dims[0]));
    o.dims[1] = q.dims[1];
    o.dims[2] = q.dims[2];
    o.dims[3] = v.dims[3];
    if(!set_output(plan, node, node.out[0], o, planning, eff, err))
        return false;
    if(node.out[1] >= 0)
    {
        Shape st = o;
        st.dims[3] = 1;
        if(!set_output(plan, node, node.out[1], st, planning, eff, err))
            return false;
    }
    if(node.in[3] >= 0 && !has_wildcard(eff[node.in[3]]) && elements(eff[node.in[3]]) != 1)
        return shape_fail(err, "node '%s' (sdpa_fwd): the scale tensor must hold one element", node.name.c_str());
    for(int r = 4; r <= 5; ++r)
    {
        if(node.in[r] < 0)
            continue;
        const Shape& sl = eff[node.in[r]];
        bool ok = sl.rank >= 1 && (dim_eq(sl.dims[0], o.dims[0]) || sl.dims[0] == 1);
        for(int i = 1; ok && i < sl.rank; ++i)
            ok = dim_eq(sl.dims[i], 1);
        if(!ok)
            return shape_fail(err,
                              "node '%s' (sdpa_fwd): %s (uid %lld) must be [B,1,1,1] with B = %lld",
                              node.name.c_str(),
                              r == 4 ? "seq_len_q" : "seq_len_kv",
                              uid(node.in[r]),
                              static_cast<long long>(q.dims[0]));
    }
    static const char* const kFactors[] = {"descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o"};
    if(node.fp8 && !fp8_shapes(plan, node, "sdpa_fwd", kFactors, planning, eff, err))
        return false;
    if(node.in[6] >= 0)
    {
        const Shape& bs = eff[node.in[6]];
        // Every dim of 1 broadcasts (fill_attention gives it stride 0): a padding mask [B, 1, 1, Skv]
        // is read as one row per batch.
        if(bs.rank != 4 || (bs.dims[0] != 1 && !dim_eq(bs.dims[0], o.dims[0]))
           || (bs.dims[1] != 1 && !dim_eq(bs.dims[1], q.dims[1])) || (bs.dims[2] != 1 && !dim_eq(bs.dims[2], q.dims[2]))
           || (bs.dims[3] != 1 && !dim_eq(bs.dims[3], skv)))
            return shape_fail(err,
                              "node '%s' (sdpa_fwd): bias (uid %lld) must be [B|1, H|1, Sq|1, Skv|1] = "
                              "[%lld|1, %lld|1, %lld|1, %lld|1]; override it with q and k",
                              node.name.c_str(),
                              uid(node.in[6]),
                              static_cast<long long>(q.dims[0]),
                              static_cast<long long>(q.dims[1]),
                              static_cast<long long>(q.dims[2]),
                              static_cast<long long>(skv));
    }
    return true;
}

// Scratch is per-thread tiles whose size is capped (at most 4 panels of 24 queries and one 64-key
// tile, whatever the sequence lengths), so wildcard lengths are sized at their cap; the head dims
// size the tiles and must be known.
size_t scratch(const NodeInfo& node, const Shape* eff, std::string* why)
{
    const Shape &q = eff[node.in[0]], &k = eff[node.in[1]], &v = eff[node.in[2]];
    if(why != nullptr && (meet(q.dims[3], k.dims[3]) < 0 || v.dims[3] < 0))
    {
        *why = format("node '%s' (sdpa_fwd): the head dims of q/k and v are wildcards; the engine sizes "
                      "its per-thread tiles from them, so they must be declared",
                      node.name.c_str());
        return 0;
    }
    if(node.fp8) // the reference: one row of q and one of the output, in double
        return static_cast<size_t>(unbounded(meet(q.dims[3], k.dims[3])) + unbounded(v.dims[3])) * sizeof(double);
    return sdpa_scratch_per_thread(unbounded(q.dims[2]),
                                   unbounded(k.dims[2]),
                                   unbounded(meet(q.dims[3], k.dims[3])),
                                   unbounded(v.dims[3]),
                                   node.bf16_qkv);
}

bool run(const Plan& plan, const NodeInfo& node, const RunArgs& args)
{
    if(node.fp8)
        return run_sdpa_fp8(plan, node, args);
    if(node.varlen)
        return run_sdpa_varlen(plan, node, args);
    SdpaProblem p;
    fill_attention(p, plan, node, args, node.out[0], node.out[1]);
    return run_sdpa(p, args.scratch, plan.scratch_per_thread, args.nthreads, args.isa, args.threading, args.panel_vectors);
}

void describe(const Plan& plan, const NodeInfo& n, std::string& s)
{
    s += "(q" + shape_str(plan.tensors[n.in[0]].declared) + " k" + shape_str(plan.tensors[n.in[1]].declared);
    if(n.mask_tl)
        s += format(" band j<=i+%lld", static_cast<long long>(n.hi_tl));
    if(n.mask_br)
        s += format(" band j<=i+%lld bottom-right", static_cast<long long>(n.hi_br));
    if(n.has_lo)
        s += format(" band j>=i%+lld%s", static_cast<long long>(n.lo), n.lo_br ? " bottom-right" : "");
    if(n.padding)
        s += " padding";
    if(n.paged)
        s += " paged";
    if(n.varlen && !n.paged)
        s += " ragged";
    if(n.in[6] >= 0)
        s += " bias";
    if(n.alibi)
        s += " alibi";
    if(n.fp8)
        s += format(" fp8 %s", dtype_name(plan.tensors[n.in[0]].dt));
    s += n.out[1] >= 0 ? " +stats)" : ")";
}

} // namespace

extern const OpDesc kSdpaFwdOp = {
    wire::NodeAttributes::SdpaAttributes, "sdpa_fwd", read, infer, scratch, run, describe, false, check_sdpa_varlen};

} // namespace hipdnn_cpu
