// SDPA with ragged (packed) tensors and paged K/V caches (plugin API 1.3.0,
// rfcs/0012-ragged-and-paged.md), forward and backward, on the unchanged kernels.
//
// Such a node runs batch by batch. For batch b every tensor is seen as a [1, H, L_b, D] problem at
// its own strides: its base is offset[b] (ragged) or b * strides[0] (padded), and L_b is the
// sequence's length (seq_len_q[b] for the query side, seq_len_kv[b] for the key side, clamped to
// the tensor's length, as the padding mask does). The kernels then never see the rows past a
// sequence's end: they neither read them (in a packed buffer they belong to the next sequence, or
// lie past the buffer) nor write them. Padded outputs get their padding rows written here, as the
// padded kernels write them (o = 0, stats = -inf, gradients 0). A paged K/V cache is gathered,
// sequence by sequence, into compact [1, Hk, L_b, D] rows of the workspace (sized at the declared
// maxima: Hk x max Skv x D elements for each of K and V).
//
// Offsets and page tables are data. Before any node of the call runs (check_sdpa_varlen, the ops'
// OpDesc::check), every value a batch will use is read once, checked and copied into the workspace
// (the SDK's read_ragged_offsets / read_page_table): an offset whose rows would leave the tensor's
// extent, or a table entry outside [0, num_blocks), is refused with BAD_PARAM naming the tensor, the
// batch and the value, and no output of any node is written. The kernels only see the checked copies.

#include "op_attention.hpp"

#include <hipdnn_plugin_sdk/cpp/Ragged.hpp>

#include <cstdio>
#include <cstring>
#include <limits>

namespace hipdnn_cpu
{
namespace
{

struct Role
{
    int slot;    // index in node.in (or node.out)
    bool out;    // an output of the node
    bool q_side; // rows follow seq_len_q (else seq_len_kv)
    const char* name;
};

constexpr Role kFwdRoles[] = {
    {0, false, true, "q"}, {1, false, false, "k"}, {2, false, false, "v"}, {0, true, true, "o"}, {1, true, true, "stats"}};
constexpr Role kBwdRoles[] = {{0, false, true, "q"},
                              {1, false, false, "k"},
                              {2, false, false, "v"},
                              {7, false, true, "o"},
                              {8, false, true, "dO"},
                              {9, false, true, "stats"},
                              {0, true, true, "dQ"},
                              {1, true, false, "dK"},
                              {2, true, false, "dV"}};
constexpr int kMaxRoles = 9;

struct Roles
{
    const Role* r;
    int n;
};

bool is_backward(const NodeInfo& node)
{
    return node.kind == &kSdpaBwdOp;
}

Roles roles_of(const NodeInfo& node)
{
    return is_backward(node) ? Roles{kBwdRoles, 9} : Roles{kFwdRoles, 5};
}

int tensor_of(const NodeInfo& node, const Role& r)
{
    return r.out ? node.out[r.slot] : node.in[r.slot];
}

int64_t sat_mul(int64_t a, int64_t b)
{
    int64_t r;
    return __builtin_mul_overflow(a, b, &r) ? std::numeric_limits<int64_t>::max() : r;
}

// The effective key length of a paged node at these shapes of k, v and their tables.
int64_t paged_skv(const NodeInfo& node, const Shape& k, const Shape& v, const Shape& tk, const Shape& tv)
{
    int64_t cap = std::min(sat_mul(tk.dims[2], k.dims[2]), sat_mul(tv.dims[2], v.dims[2]));
    if(node.max_skv > 0)
        cap = std::min(cap, node.max_skv);
    return cap;
}

// Where the per-batch path keeps its data in the node's part of the workspace, laid out from the
// declared (maximum) shapes, so that every call fits.
struct Aux
{
    int64_t b = 0;
    size_t lens = 0, offs = 0, tab_k = 0, tab_v = 0, gk = 0, gv = 0;
    size_t gk_bytes = 0, gv_bytes = 0, total = 0;
    bool overflow = false;
};

size_t bytes_of(Aux& a, std::initializer_list<int64_t> factors, size_t elem)
{
    int64_t n = 1;
    for(int64_t f : factors)
        n = sat_mul(n, std::max<int64_t>(f, 0));
    if(n > (int64_t(1) << 40) / static_cast<int64_t>(elem))
    {
        a.overflow = true;
        return 0;
    }
    return static_cast<size_t>(n) * elem;
}

Aux aux_layout(const Plan& plan, const NodeInfo& node)
{
    Aux a;
    auto decl = [&](int t) -> const Shape& { return plan.tensors[t].declared; };
    a.b = decl(node.in[0]).dims[0];
    size_t o = 0;
    a.lens = o;
    o += align_up(bytes_of(a, {2, a.b}, 8));
    a.offs = o;
    o += align_up(bytes_of(a, {kMaxRoles, a.b}, 8));
    if(node.paged)
    {
        const Shape &k = decl(node.in[1]), &v = decl(node.in[2]), &tk = decl(node.in[7]), &tv = decl(node.in[8]);
        a.tab_k = o;
        o += align_up(bytes_of(a, {a.b, tk.dims[2]}, 4));
        a.tab_v = o;
        o += align_up(bytes_of(a, {a.b, tv.dims[2]}, 4));
        const int64_t cap = paged_skv(node, k, v, tk, tv);
        a.gk = o;
        a.gk_bytes = bytes_of(a, {k.dims[1], cap, k.dims[3]}, dtype_size(plan.tensors[node.in[1]].dt));
        o += align_up(a.gk_bytes);
        a.gv = o;
        a.gv_bytes = bytes_of(a, {v.dims[1], cap, v.dims[3]}, dtype_size(plan.tensors[node.in[2]].dt));
        o += align_up(a.gv_bytes);
    }
    a.total = o;
    return a;
}

// Writes `value` (0, or -inf for stats) to rows [r0, r1) of every head of the batch starting at
// element boff of a [.., H, S, D] tensor.
void fill_rows(void* base, DType t, const Shape& s, int64_t boff, int64_t r0, int64_t r1, float value)
{
    for(int64_t h = 0; h < s.dims[1]; ++h)
        for(int64_t r = r0; r < r1; ++r)
            for(int64_t e = 0; e < s.dims[3]; ++e)
            {
                const int64_t i = boff + h * s.strides[1] + r * s.strides[2] + e * s.strides[3];
                if(t == DType::F32)
                    static_cast<float*>(base)[i] = value;
                else
                    static_cast<uint16_t*>(base)[i] = 0; // fp16 / bf16 zero (only stats, fp32, take -inf)
            }
}

int64_t load_len(const void* p, DType t, int64_t i)
{
    return t == DType::I64 ? static_cast<const int64_t*>(p)[i] : static_cast<const int32_t*>(p)[i];
}

// The pointer, shape and type of role r of roles_of(node) in a problem (the forward's o and stats
// are its roles 3 and 4; the backward's follow kBwdRoles).
struct Slot
{
    SdpaBwdProblem* bp;
    int r; // in kBwdRoles numbering
    Shape* s;
    DType t;

    void* get() const
    {
        SdpaProblem& p = bp->fwd;
        switch(r)
        {
        case 0: return const_cast<void*>(p.q);
        case 1: return const_cast<void*>(p.k);
        case 2: return const_cast<void*>(p.v);
        case 3: return p.o;
        case 4: return const_cast<void*>(bp->dout);
        case 5: return p.stats;
        case 6: return bp->dq;
        case 7: return bp->dk;
        default: return bp->dv;
        }
    }

    void set(void* x) const
    {
        SdpaProblem& p = bp->fwd;
        switch(r)
        {
        case 0: p.q = x; break;
        case 1: p.k = x; break;
        case 2: p.v = x; break;
        case 3: p.o = x; break;
        case 4: bp->dout = x; break;
        case 5: p.stats = static_cast<float*>(x); break;
        case 6: bp->dq = x; break;
        case 7: bp->dk = x; break;
        default: bp->dv = x; break;
        }
    }
};

Slot slot_of(SdpaBwdProblem& bp, bool bwd, int r)
{
    SdpaProblem& p = bp.fwd;
    if(!bwd && r == 4)
        r = 5;
    switch(r)
    {
    case 0: return {&bp, r, &p.qs, p.qt};
    case 1: return {&bp, r, &p.ks, p.kt};
    case 2: return {&bp, r, &p.vs, p.vt};
    case 3: return {&bp, r, &p.os, p.ot};
    case 4: return {&bp, r, &bp.dos, bp.dout_t};
    case 5: return {&bp, r, &p.ss, DType::F32};
    case 6: return {&bp, r, &bp.dqs, bp.dq_t};
    case 7: return {&bp, r, &bp.dks, bp.dk_t};
    default: return {&bp, r, &bp.dvs, bp.dv_t};
    }
}

// Gathers keys [0, n) of batch b from a paged cache (eff shape c: [num_blocks, H, block_size, D])
// into compact [H, n, D] rows at dst.
void gather(const void* cache, DType t, const Shape& c, const int32_t* table, int64_t n, char* dst)
{
    const size_t es = dtype_size(t);
    const int64_t h_n = c.dims[1], bs = c.dims[2], d = c.dims[3];
    const char* src = static_cast<const char*>(cache);
    for(int64_t h = 0; h < h_n; ++h)
        for(int64_t j = 0; j < n; ++j)
        {
            const int64_t at = table[j / bs] * c.strides[0] + h * c.strides[1] + (j % bs) * c.strides[2];
            char* row = dst + static_cast<size_t>((h * n + j) * d) * es;
            if(c.strides[3] == 1)
                std::memcpy(row, src + static_cast<size_t>(at) * es, static_cast<size_t>(d) * es);
            else
                for(int64_t e = 0; e < d; ++e)
                    std::memcpy(row + static_cast<size_t>(e) * es, src + static_cast<size_t>(at + e * c.strides[3]) * es, es);
        }
}

} // namespace

std::string plan_varlen(const Plan& plan, NodeInfo& node)
{
    const Roles roles = roles_of(node);
    const char* kind = node.kind->name;
    const char* nm = node.name.c_str();
    bool any = node.paged;
    constexpr int n_in = static_cast<int>(sizeof(node.in) / sizeof(node.in[0]));
    for(int i = 0; i < n_in; ++i)
    {
        const int t = node.in[i];
        bool role = false;
        for(int r = 0; r < roles.n; ++r)
            role = role || (!roles.r[r].out && roles.r[r].slot == i);
        if(t >= 0 && !role && plan.tensors[t].ragged >= 0)
            return format("node '%s' (%s): tensor uid %lld is ragged in a role that cannot be (only q, k, v, o, "
                          "stats, dO, dQ, dK, dV can)",
                          nm,
                          kind,
                          static_cast<long long>(plan.tensors[t].uid));
    }
    for(int r = 0; r < roles.n; ++r)
    {
        const int t = tensor_of(node, roles.r[r]);
        if(t < 0 || plan.tensors[t].ragged < 0)
            continue;
        any = true;
        if(node.paged && (roles.r[r].slot == 1 || roles.r[r].slot == 2) && !roles.r[r].out)
            return format("node '%s' (%s): %s is a paged cache and cannot also be ragged", nm, kind, roles.r[r].name);
    }
    if(!any)
        return "";
    if(!node.padding)
        return format("node '%s' (%s): ragged tensors and paged K/V need the padding mask (seq_len_q and seq_len_kv "
                      "give each sequence's lengths)",
                      nm,
                      kind);
    for(int t : node.in)
        if(t >= 0 && plan.tensors[t].dynamic)
            return format("node '%s' (%s): ragged tensors and paged K/V are not supported with dynamic tensors",
                          nm,
                          kind);
    for(int t : node.out)
        if(t >= 0 && plan.tensors[t].dynamic)
            return format("node '%s' (%s): ragged tensors and paged K/V are not supported with dynamic tensors",
                          nm,
                          kind);
    const Aux a = aux_layout(plan, node);
    if(a.overflow)
        return format("node '%s' (%s): the workspace of the per-batch path (gathered K/V of one sequence at the "
                      "declared maxima) would exceed 1 TiB",
                      nm,
                      kind);
    node.varlen = true;
    node.aux_bytes = a.total;
    return "";
}

bool infer_varlen(const Plan& plan, const NodeInfo& node, const Shape* eff, ShapeError& err)
{
    const Roles roles = roles_of(node);
    const char* nm = node.name.c_str();
    const char* kind = node.kind->name;
    for(int r = 0; r < roles.n; ++r)
    {
        const int t = tensor_of(node, roles.r[r]);
        if(t < 0 || plan.tensors[t].ragged < 0)
            continue;
        const Shape& os = eff[plan.tensors[t].ragged];
        bool ok = os.rank >= 1 && os.dims[0] >= eff[t].dims[0] + 1;
        for(int i = 1; ok && i < os.rank; ++i)
            ok = os.dims[i] == 1;
        if(!ok)
            return shape_fail(err,
                              "node '%s' (%s): the ragged offsets (uid %lld) of %s must be [B+1,1,1,1] with B = %lld",
                              nm,
                              kind,
                              static_cast<long long>(plan.tensors[plan.tensors[t].ragged].uid),
                              roles.r[r].name,
                              static_cast<long long>(eff[t].dims[0]));
    }
    if(node.paged)
    {
        const Shape& q = eff[node.in[0]];
        for(int i = 7; i <= 8; ++i)
        {
            const Shape& ts = eff[node.in[i]];
            if(ts.rank != 4 || ts.dims[0] != q.dims[0] || ts.dims[1] != 1 || ts.dims[3] != 1)
                return shape_fail(err,
                                  "node '%s' (%s): the %s page table (uid %lld) must be [B,1,max_blocks,1] with B = %lld",
                                  nm,
                                  kind,
                                  i == 7 ? "K" : "V",
                                  static_cast<long long>(plan.tensors[node.in[i]].uid),
                                  static_cast<long long>(q.dims[0]));
        }
    }
    return true;
}

int64_t varlen_skv(const NodeInfo& node, const Shape* eff)
{
    return node.paged ? paged_skv(node, eff[node.in[1]], eff[node.in[2]], eff[node.in[7]], eff[node.in[8]])
                      : eff[node.in[1]].dims[2];
}

void check_sdpa_varlen(const Plan& plan, const NodeInfo& node, const RunArgs& args)
{
    if(!node.varlen)
        return;
    const Roles roles = roles_of(node);
    const Aux a = aux_layout(plan, node);
    const Shape* eff = args.eff;
    void* const* ptrs = args.ptrs;
    char* aux = args.base + node.aux_offset;
    const char* nm = node.name.c_str();
    const char* kind = node.kind->name;
    const int64_t B = eff[node.in[0]].dims[0], Sq = eff[node.in[0]].dims[2];
    const int64_t Skv = varlen_skv(node, eff);
    if(B > a.b)
        bad_param("node '%s' (%s): batch %lld exceeds the declared %lld", nm, kind, static_cast<long long>(B),
                  static_cast<long long>(a.b));

    // Each sequence's lengths, clamped as the padding mask clamps them.
    int64_t* len_q = reinterpret_cast<int64_t*>(aux + a.lens);
    int64_t* len_kv = len_q + a.b;
    for(int which = 0; which < 2; ++which)
    {
        const int t = node.in[4 + which];
        const Shape& s = eff[t];
        const int64_t stride = s.dims[0] == 1 ? 0 : s.strides[0];
        const int64_t cap = which == 0 ? Sq : Skv;
        for(int64_t b = 0; b < B; ++b)
        {
            const int64_t n = load_len(ptrs[t], plan.tensors[t].dt, b * stride);
            (which == 0 ? len_q : len_kv)[b] = std::max<int64_t>(0, std::min(cap, n));
        }
    }

    // Offsets: read, checked and copied once, before anything is written.
    char label[160];
    for(int r = 0; r < roles.n; ++r)
    {
        const int t = tensor_of(node, roles.r[r]);
        if(t < 0 || plan.tensors[t].ragged < 0)
            continue;
        const int o = plan.tensors[t].ragged;
        int64_t* out = reinterpret_cast<int64_t*>(aux + a.offs) + r * a.b;
        std::snprintf(label,
                      sizeof(label),
                      "node '%s' (%s): %s (uid %lld)",
                      nm,
                      kind,
                      roles.r[r].name,
                      static_cast<long long>(plan.tensors[t].uid));
        const std::string why = sdk::read_ragged_offsets(ptrs[o],
                                                         plan.tensors[o].dt == DType::I64,
                                                         eff[o].strides[0],
                                                         eff[t],
                                                         2,
                                                         roles.r[r].q_side ? len_q : len_kv,
                                                         out,
                                                         label);
        if(!why.empty())
            fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, why);
    }

    // Page tables: every entry a sequence uses names a block of its cache.
    if(node.paged)
        for(int i = 0; i < 2; ++i)
        {
            const int t = node.in[7 + i], c = node.in[1 + i];
            int32_t* out = reinterpret_cast<int32_t*>(aux + (i == 0 ? a.tab_k : a.tab_v));
            std::snprintf(label,
                          sizeof(label),
                          "node '%s' (%s): the %s page table (uid %lld)",
                          nm,
                          kind,
                          i == 0 ? "K" : "V",
                          static_cast<long long>(plan.tensors[t].uid));
            const std::string why = sdk::read_page_table(static_cast<const int32_t*>(ptrs[t]),
                                                         eff[t],
                                                         eff[c].dims[2],
                                                         eff[c].dims[0],
                                                         len_kv,
                                                         out,
                                                         label);
            if(!why.empty())
                fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, why);
        }
}

bool run_sdpa_varlen(const Plan& plan, const NodeInfo& node, const RunArgs& args)
{
    const bool bwd = is_backward(node);
    const Roles roles = roles_of(node);
    const Aux a = aux_layout(plan, node);
    const Shape* eff = args.eff;
    char* aux = args.base + node.aux_offset;
    const char* nm = node.name.c_str();
    const char* kind = node.kind->name;
    const int64_t B = eff[node.in[0]].dims[0], Sq = eff[node.in[0]].dims[2];
    // What check_sdpa_varlen read, checked and copied before any node ran.
    const int64_t* len_q = reinterpret_cast<const int64_t*>(aux + a.lens);
    const int64_t* len_kv = len_q + a.b;
    const int64_t* offs[kMaxRoles] = {};
    for(int r = 0; r < roles.n; ++r)
    {
        const int t = tensor_of(node, roles.r[r]);
        if(t >= 0 && plan.tensors[t].ragged >= 0)
            offs[r] = reinterpret_cast<const int64_t*>(aux + a.offs) + r * a.b;
    }
    const int32_t* tab[2] = {};
    int64_t mb[2] = {};
    if(node.paged)
        for(int i = 0; i < 2; ++i)
        {
            tab[i] = reinterpret_cast<const int32_t*>(aux + (i == 0 ? a.tab_k : a.tab_v));
            mb[i] = eff[node.in[7 + i]].dims[2];
        }

    // The whole problem, as the padded path would see it; each batch narrows a copy of it.
    SdpaBwdProblem whole;
    if(bwd)
        fill_backward(whole, plan, node, args);
    else
        fill_attention(whole.fwd, plan, node, args, node.out[0], node.out[1]);
    // Outputs of the node by role index (o and stats are outputs of the forward only).
    auto is_output = [&](int r) { return roles.r[r].out; };

    for(int64_t b = 0; b < B; ++b)
    {
        const int64_t lq = len_q[b], lkv = len_kv[b];
        SdpaBwdProblem bp = whole;
        bp.fwd.seq_q = nullptr;
        bp.fwd.seq_kv = nullptr;
        // Narrow every role to batch b at its lengths; padded outputs get their padding rows here.
        for(int r = 0; r < roles.n; ++r)
        {
            const int t = tensor_of(node, roles.r[r]);
            if(t < 0)
                continue;
            const Slot s = slot_of(bp, bwd, r);
            const Shape full = eff[t];
            const int64_t rows = roles.r[r].q_side ? lq : lkv;
            const int64_t full_rows = roles.r[r].q_side ? Sq : full.dims[2];
            if(node.paged && !roles.r[r].out && (r == 1 || r == 2))
                continue; // gathered below
            const int64_t boff = offs[r] != nullptr ? offs[r][b] : b * full.strides[0];
            void* base = s.get();
            if(is_output(r) && offs[r] == nullptr && rows < full_rows)
                fill_rows(base, s.t, full, b * full.strides[0], rows, full_rows, (!bwd && r == 4) ? -std::numeric_limits<float>::infinity() : 0.0f);
            s.set(static_cast<char*>(base) + static_cast<size_t>(boff) * dtype_size(s.t));
            s.s->dims[0] = 1;
            s.s->dims[2] = rows;
        }
        if(node.paged && lkv > 0)
            for(int i = 0; i < 2; ++i)
            {
                const Shape& c = eff[node.in[1 + i]];
                const DType t = i == 0 ? bp.fwd.kt : bp.fwd.vt;
                const size_t need = static_cast<size_t>(c.dims[1] * lkv * c.dims[3]) * dtype_size(t);
                if(need > (i == 0 ? a.gk_bytes : a.gv_bytes))
                    fail(HIPDNN_PLUGIN_STATUS_INTERNAL_ERROR,
                         format("node '%s' (%s): gathered %s rows exceed the workspace", nm, kind, i == 0 ? "K" : "V"));
                char* dst = aux + (i == 0 ? a.gk : a.gv);
                gather(i == 0 ? whole.fwd.k : whole.fwd.v, t, c, tab[i] + b * mb[i], lkv, dst);
                Shape g;
                g.rank = 4;
                g.dims[0] = 1;
                g.dims[1] = c.dims[1];
                g.dims[2] = lkv;
                g.dims[3] = c.dims[3];
                set_compact(g);
                (i == 0 ? bp.fwd.k : bp.fwd.v) = dst;
                (i == 0 ? bp.fwd.ks : bp.fwd.vs) = g;
            }
        if(bp.fwd.bias != nullptr)
            bp.fwd.bias = static_cast<const char*>(bp.fwd.bias)
                          + static_cast<size_t>(b * bp.fwd.bias_st[0]) * dtype_size(bp.fwd.bias_t);
        if(lq > 0 && lkv > 0)
        {
            if(bwd)
            {
                if(!run_backward_checked(bp, plan, node, args))
                    return false;
            }
            else if(!run_sdpa(bp.fwd, args.scratch, plan.scratch_per_thread, args.nthreads, args.isa, args.threading,
                                  args.panel_vectors))
                return false;
            continue;
        }
        // Nothing to attend: rows with no visible key (o = 0, stats = -inf), zero gradients.
        for(int r = 0; r < roles.n; ++r)
        {
            const int t = tensor_of(node, roles.r[r]);
            if(t < 0 || !is_output(r))
                continue;
            const Slot s = slot_of(bp, bwd, r);
            fill_rows(s.get(), s.t, *s.s, 0, 0, s.s->dims[2], (!bwd && r == 4) ? -std::numeric_limits<float>::infinity() : 0.0f);
        }
    }
    return true;
}

} // namespace hipdnn_cpu
