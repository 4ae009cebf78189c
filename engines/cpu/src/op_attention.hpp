// What the CPU engine's two attention ops (op_sdpa_fwd.cpp, op_sdpa_bwd.cpp) share: reading the
// options both node tables carry, and handing q, k, v, the masks, padding and bias to the kernels.
#pragma once

#include "engine_plan.hpp"

#include <hipdnn_plugin_sdk/cpp/Sdpa.hpp>

#include <cmath>

namespace hipdnn_cpu
{
// Reads what SdpaAttributes and SdpaBackwardAttributes share, under the same field names in both
// tables: the diagonal/band masks, padding, ALiBi, the scale, the softcap, and the q/k/v/scale/seq_len/bias inputs
// (in[0..6]). Returns "" or why the node cannot be served; unknown uids are reported through ref.
template <class Attrs, class Ref>
std::string read_attention_options(const Attrs* a, NodeInfo& node, const char* nm, const char* kind, Ref&& ref)
{
    const auto align = a->diagonal_alignment();
    if(align != wire::DiagonalAlignment::TOP_LEFT && align != wire::DiagonalAlignment::BOTTOM_RIGHT)
        return format("node '%s' (%s): unknown diagonal alignment", nm, kind);
    const bool br = align == wire::DiagonalAlignment::BOTTOM_RIGHT;
    // causal_mask: top-left causal; causal_mask_bottom_right:
    // bottom-right causal; right_bound R: j <= i + R aligned by
    // diagonal_alignment; left_bound L: j > i - L, likewise aligned.
    // Several at once intersect.
    node.mask_tl = a->causal_mask();
    node.mask_br = a->causal_mask_bottom_right();
    // Bounds past any sequence length (kMaxExtent) mean the same as kMaxExtent, and keep the kernels'
    // index arithmetic (i + bound, j - bound) far from int64 overflow.
    if(a->right_bound().has_value())
    {
        const int64_t r = std::min<int64_t>(a->right_bound().value(), kMaxExtent);
        bool& has = br ? node.mask_br : node.mask_tl;
        int64_t& hi = br ? node.hi_br : node.hi_tl;
        hi = has ? std::min(hi, r) : r;
        has = true;
    }
    if(a->left_bound().has_value())
    {
        node.has_lo = true;
        node.lo_br = br;
        node.lo = 1 - std::min<int64_t>(a->left_bound().value(), kMaxExtent);
    }
    node.padding = a->padding_mask();
    node.alibi = a->alibi_mask();
    if(!sdk::sdpa_softcap_valid(*a))
        return format("node '%s' (%s): softcap %g is not supported (it must be 0, off, or a finite value > 0)",
                      nm,
                      kind,
                      static_cast<double>(a->softcap()));
    node.softcap = sdk::sdpa_softcap(*a);
    if(a->attn_scale_value().has_value())
    {
        node.has_scale = true;
        node.scale = a->attn_scale_value().value();
    }
    node.in[0] = ref(a->q_tensor_uid());
    node.in[1] = ref(a->k_tensor_uid());
    node.in[2] = ref(a->v_tensor_uid());
    if(a->scale_tensor_uid().has_value())
        node.in[3] = ref(a->scale_tensor_uid().value());
    if(node.padding)
    {
        node.in[4] = ref(a->seq_len_q_tensor_uid().value());
        node.in[5] = ref(a->seq_len_kv_tensor_uid().value());
    }
    if(a->attn_mask_tensor_uid().has_value())
        node.in[6] = ref(a->attn_mask_tensor_uid().value());
    return "";
}

// Fills what the forward and backward kernels read alike: q, k, v (in[0..2]), o and stats (the
// tensors at o and stats, -1 when absent), the scale, band masks, padding, bias and ALiBi.
inline void fill_attention(SdpaProblem& p, const Plan& plan, const NodeInfo& node, const RunArgs& args, int o, int stats)
{
    void* const* ptrs = args.ptrs;
    const Shape* eff = args.eff;
    p.q = ptrs[node.in[0]];
    p.k = ptrs[node.in[1]];
    p.v = ptrs[node.in[2]];
    p.o = ptrs[o];
    p.qt = plan.tensors[node.in[0]].dt;
    p.kt = plan.tensors[node.in[1]].dt;
    p.vt = plan.tensors[node.in[2]].dt;
    p.ot = plan.tensors[o].dt;
    p.qs = eff[node.in[0]];
    p.ks = eff[node.in[1]];
    p.vs = eff[node.in[2]];
    p.os = eff[o];
    if(stats >= 0)
    {
        p.stats = static_cast<float*>(ptrs[stats]);
        p.ss = eff[stats];
    }
    p.scale = node.has_scale ? node.scale : 1.0f / std::sqrt(static_cast<float>(p.qs.dims[3]));
    if(node.in[3] >= 0)
        p.scale = read_scalar(ptrs[node.in[3]], plan.tensors[node.in[3]].dt);
    p.has_hi_tl = node.mask_tl;
    p.hi_tl = node.hi_tl;
    p.has_hi_br = node.mask_br;
    p.hi_br = node.hi_br;
    p.has_lo = node.has_lo;
    p.lo_br = node.lo_br;
    p.lo = node.lo;
    if(node.padding)
    {
        p.seq_q = ptrs[node.in[4]];
        p.seq_q_t = plan.tensors[node.in[4]].dt;
        p.seq_q_bs = eff[node.in[4]].dims[0] == 1 ? 0 : eff[node.in[4]].strides[0];
        p.seq_kv = ptrs[node.in[5]];
        p.seq_kv_t = plan.tensors[node.in[5]].dt;
        p.seq_kv_bs = eff[node.in[5]].dims[0] == 1 ? 0 : eff[node.in[5]].strides[0];
    }
    if(node.in[6] >= 0)
    {
        const Shape& bs = eff[node.in[6]];
        p.bias = ptrs[node.in[6]];
        p.bias_t = plan.tensors[node.in[6]].dt;
        for(int i = 0; i < 4; ++i)
            p.bias_st[i] = bs.dims[i] == 1 ? 0 : bs.strides[i];
    }
    p.alibi = node.alibi;
    p.softcap = node.softcap;
}

// The backward's whole problem: the forward's inputs (o and stats are in[7], in[9]), dO and the
// gradients.
inline void fill_backward(SdpaBwdProblem& bp, const Plan& plan, const NodeInfo& node, const RunArgs& args)
{
    void* const* ptrs = args.ptrs;
    const Shape* eff = args.eff;
    fill_attention(bp.fwd, plan, node, args, node.in[7], node.in[9]);
    bp.dout = ptrs[node.in[8]];
    bp.dout_t = plan.tensors[node.in[8]].dt;
    bp.dos = eff[node.in[8]];
    bp.dq = ptrs[node.out[0]];
    bp.dk = ptrs[node.out[1]];
    bp.dv = ptrs[node.out[2]];
    bp.dq_t = plan.tensors[node.out[0]].dt;
    bp.dk_t = plan.tensors[node.out[1]].dt;
    bp.dv_t = plan.tensors[node.out[2]].dt;
    bp.dqs = eff[node.out[0]];
    bp.dks = eff[node.out[1]];
    bp.dvs = eff[node.out[2]];
}

// Runs the backward kernel; an allocation it cannot make is ALLOC_FAILED naming the node (thrown).
inline bool run_backward_checked(const SdpaBwdProblem& bp, const Plan& plan, const NodeInfo& node, const RunArgs& args)
{
    size_t bytes = 0;
    const SdpaBwdStatus st = run_sdpa_bwd(bp, args.scratch, plan.scratch_per_thread, args.nthreads, args.isa, &bytes);
    if(st == SdpaBwdStatus::AllocFailed)
    {
        if(bytes == SIZE_MAX)
            fail(HIPDNN_PLUGIN_STATUS_ALLOC_FAILED,
                 format("node '%s' (sdpa_bwd): the dQ accumulators and row statistics of this call's shapes "
                        "exceed the address space",
                        node.name.c_str()));
        fail(HIPDNN_PLUGIN_STATUS_ALLOC_FAILED,
             format("node '%s' (sdpa_bwd): cannot allocate %zu bytes for the dQ accumulators and row statistics",
                    node.name.c_str(),
                    bytes));
    }
    return st == SdpaBwdStatus::Ok;
}

// Ragged tensors and paged K/V (sdpa_varlen.cpp). plan_varlen, at the end of an attention op's read:
// checks which roles are ragged (q, k, v, o, stats; the backward's o, dO, stats, dQ, dK, dV too;
// never a paged cache), that the padding mask gives the lengths, and sizes node.aux_bytes from the
// declared shapes; sets node.varlen. "" or why the node cannot be served.
std::string plan_varlen(const Plan& plan, NodeInfo& node);
// Shape rules of the offsets ([>= B+1, 1, ...]) and page tables ([B, 1, max_blocks, 1]).
bool infer_varlen(const Plan& plan, const NodeInfo& node, const Shape* eff, ShapeError& err);
// The key length the node attends over at these shapes (paged: max_seq_len_kv, capped by what the
// tables hold).
int64_t varlen_skv(const NodeInfo& node, const Shape* eff);
// An FP8 node's shape rules (forward and backward): each factor in fp8_in (named by `factors`, in the
// wire's order) holds one element, each amax output in fp8_out is [1, 1, 1, 1].
template <size_t N>
bool fp8_shapes(const Plan& plan, const NodeInfo& node, const char* kind, const char* const (&factors)[N],
                bool planning, Shape* eff, ShapeError& err)
{
    for(size_t r = 0; r < N; ++r)
        if(!has_wildcard(eff[node.fp8_in[r]]) && elements(eff[node.fp8_in[r]]) != 1)
            return shape_fail(err,
                              "node '%s' (%s): %s (uid %lld) must hold one element",
                              node.name.c_str(),
                              kind,
                              factors[r],
                              static_cast<long long>(plan.tensors[node.fp8_in[r]].uid));
    Shape one;
    one.rank = 4;
    for(int i = 0; i < 4; ++i)
        one.dims[i] = 1;
    for(int t : node.fp8_out)
        if(t >= 0 && !set_output(plan, node, t, one, planning, eff, err))
            return false;
    return true;
}
// The FP8 forward's reference (sdpa_fp8.cpp; rfcs/0014-fp8-attention.md): a node with fp8 set. False
// when the scratch is smaller than (d + dv) doubles a thread.
bool run_sdpa_fp8(const Plan& plan, const NodeInfo& node, const RunArgs& args);
// The FP8 backward's reference (sdpa_fp8.cpp): a backward node with fp8 set. False when the scratch
// is smaller than 2 (d + dv) doubles a thread.
bool run_sdpa_fp8_backward(const Plan& plan, const NodeInfo& node, const RunArgs& args);
// A varlen node's data, read, checked and copied into its part of the workspace before any node of
// the call runs (BAD_PARAM, thrown, for offsets or table entries that would leave a tensor); a no-op
// for other nodes. OpDesc::check of both attention ops.
void check_sdpa_varlen(const Plan& plan, const NodeInfo& node, const RunArgs& args);
// Runs a varlen node batch by batch, from the copies check_sdpa_varlen made.
bool run_sdpa_varlen(const Plan& plan, const NodeInfo& node, const RunArgs& args);

} // namespace hipdnn_cpu
