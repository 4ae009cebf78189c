// hipdnn CPU engine plugin: graph parsing into an execution plan, workspace layout and per-call
// shape inference, on the plugin SDK's C++ layer (hipdnn_plugin_sdk/cpp/), which writes the C entry
// points, caches plans, binds device buffers and checks each call's overrides. The compute kernels
// live in cpu_kernels.cpp.

#include "cpu_kernels.hpp"
#include "extra_ops.hpp"

#include <hipdnn_plugin_sdk/cpp/EnginePlugin.hpp>
#include <hipdnn_plugin_sdk/cpp/Sdpa.hpp>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace sdk = hipdnn_plugin_sdk::cpp;
namespace wire = hipdnn::wire;
using namespace hipdnn_cpu;

namespace
{
// Failures and messages as the SDK layer maps them to statuses and the last error.
using sdk::bad_param;
using sdk::fail;
using sdk::format;

constexpr int64_t kEngineId = 101;
// Upper bound on any tensor's element extent; keeps all offset math far from
// int64 overflow.
constexpr int64_t kMaxExtent = int64_t(1) << 48;

// ------------------------------------------------------------------ plan --
struct TensorInfo
{
    int64_t uid = 0;
    bool is_virtual = false;
    bool has_dims = false; // virtual tensors may leave dims to inference
    bool by_value = false; // a scalar carried in the graph (Float32Value)
    float value = 0.0f;
    DType dt = DType::F32;
    Shape declared;
    bool used = false;
    int producer = -1;
    size_t ws_offset = 0; // virtual: byte offset in the workspace
    int64_t capacity = 0; // virtual: elements reserved
    // Dynamic tensors (API 1.2.0): declared dims may hold -1 (given at execute) and the declared
    // strides are an axis order, kept here as the axes listed outermost first.
    bool dynamic = false;
    bool wild = false; // some declared dim is -1
    int outer_first[kMaxRank] = {};
    // Virtual tensor whose size depends on a wildcard: it lives in the buffer of this non-virtual
    // tensor (the output of its pointwise consumer chain), at that tensor's strides.
    int alias = -1;
};

enum class OpKind
{
    Sdpa,
    Matmul,
    Pointwise,
    SdpaBwd,
    RmsNorm,
    LayerNorm,
    Reduction
};

struct NodeInfo
{
    OpKind kind = OpKind::Pointwise;
    std::string name;
    // Sdpa: q, k, v, scale, seq_len_q, seq_len_kv, bias / o, stats (-1 when
    // absent). Matmul: a, b / c. Pointwise: in0, in1 / out.
    // SdpaBwd: in[0..6] as Sdpa, in[7..9] o, dO, stats / dq, dk, dv. Norms: x,
    // scale, bias, epsilon / y, inv_rms or mean, inv_variance. Reduction: x / y.
    int in[10] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
    int out[3] = {-1, -1, -1};
    bool has_scale = false;
    float scale = 1.0f;
    // SDPA band: key j visible to query i iff j <= i + hi_tl, j <= i + hi_br +
    // (Skv - Sq), j >= i + lo (+ Skv - Sq when lo_br), for those present.
    bool mask_tl = false;
    int64_t hi_tl = 0;
    bool mask_br = false;
    int64_t hi_br = 0;
    bool has_lo = false;
    bool lo_br = false;
    int64_t lo = 0;
    bool padding = false;
    bool alibi = false;
    BinaryOp op = BinaryOp::Add;
    PointwiseParams pw;
    int norm_count = 1; // norms: trailing axes normalized
    float eps = 1e-5f;
    ReduceOp reduce = ReduceOp::Add;
    bool reduced[kMaxRank] = {};
    size_t scratch_per_thread = 0;
};

// The layer binds buffers and checks overrides on `declared` (DeclaredTensors), kept in the same
// order as `tensors`.
struct Plan : sdk::DeclaredTensors
{
    std::string name;
    std::vector<TensorInfo> tensors;
    std::vector<NodeInfo> nodes;
    std::vector<std::pair<int64_t, int>> by_uid; // sorted by uid
    int nthreads = 1;
    size_t scratch_offset = 0;
    size_t scratch_per_thread = 0;
    size_t workspace_size = 0; // includes alignment slack

    int find(int64_t uid) const
    {
        auto it = std::lower_bound(
            by_uid.begin(), by_uid.end(), uid, [](const std::pair<int64_t, int>& e, int64_t u) { return e.first < u; });
        return (it != by_uid.end() && it->first == uid) ? it->second : -1;
    }
};

const char* op_name(OpKind k)
{
    switch(k)
    {
    case OpKind::Sdpa:
        return "sdpa_fwd";
    case OpKind::Matmul:
        return "matmul";
    case OpKind::Pointwise:
        return "pointwise";
    case OpKind::SdpaBwd:
        return "sdpa_bwd";
    case OpKind::RmsNorm:
        return "rmsnorm";
    case OpKind::LayerNorm:
        return "layernorm";
    case OpKind::Reduction:
        return "reduction";
    }
    return "?";
}

std::string shape_str(const Shape& s)
{
    std::string r = "[";
    for(int i = 0; i < s.rank; ++i)
        r += (i ? "," : "") + std::to_string(s.dims[i]);
    return r + "]";
}

int64_t elements(const Shape& s)
{
    int64_t n = 1;
    for(int i = 0; i < s.rank; ++i)
        n *= s.dims[i];
    return n;
}

// Wildcards (-1) exist only while planning a graph with dynamic tensors; at execute every dim is
// positive, so these comparisons are exact there.
bool dim_eq(int64_t a, int64_t b)
{
    return a == b || a < 0 || b < 0;
}

// The more informative of two dims that must be equal.
int64_t meet(int64_t a, int64_t b)
{
    return a < 0 ? b : a;
}

bool has_wildcard(const Shape& s)
{
    for(int i = 0; i < s.rank; ++i)
        if(s.dims[i] < 0)
            return true;
    return false;
}

bool dims_match(const Shape& a, const Shape& b)
{
    if(a.rank != b.rank)
        return false;
    for(int i = 0; i < a.rank; ++i)
        if(!dim_eq(a.dims[i], b.dims[i]))
            return false;
    return true;
}

// Writes "d0,d1,..." into buf without allocating.
const char* dims_text(const Shape& s, char* buf, size_t size)
{
    size_t p = 0;
    buf[0] = '\0';
    for(int i = 0; i < s.rank && p < size; ++i)
        p += static_cast<size_t>(
            std::snprintf(buf + p, size - p, "%s%lld", i ? "," : "", static_cast<long long>(s.dims[i])));
    return buf;
}

// Past int64, strides saturate: extent() then refuses the shape instead of the product overflowing.
void set_compact(Shape& s)
{
    int64_t st = 1;
    for(int i = s.rank - 1; i >= 0; --i)
    {
        s.strides[i] = st;
        if(__builtin_mul_overflow(st, s.dims[i], &st))
            st = std::numeric_limits<int64_t>::max();
    }
}

// Largest element offset + 1, or -1 on overflow / over kMaxExtent.
int64_t extent(const Shape& s)
{
    int64_t e = 1;
    for(int i = 0; i < s.rank; ++i)
    {
        int64_t t;
        if(__builtin_mul_overflow(s.dims[i] - 1, s.strides[i], &t) || __builtin_add_overflow(e, t, &e))
            return -1;
    }
    return e > kMaxExtent ? -1 : e;
}

// Per-call shape resolution. Messages are written to a fixed buffer so that the
// success path never allocates.
struct ShapeError
{
    char msg[384];
};

bool shape_fail(ShapeError& err, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
bool shape_fail(ShapeError& err, const char* fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(err.msg, sizeof(err.msg), fmt, ap);
    va_end(ap);
    return false;
}

// Records the inferred shape of a node output: a virtual output takes it (with
// compact strides, or the strides of the output it is kept in); a non-virtual
// output must already have exactly it.
bool set_output(const Plan& plan,
                const NodeInfo& node,
                int t,
                const Shape& inferred,
                bool planning,
                Shape* eff,
                ShapeError& err)
{
    const TensorInfo& ti = plan.tensors[t];
    char a[160], b[160];
    if(ti.is_virtual && ti.alias >= 0 && !planning)
    {
        // Kept in the buffer of a non-virtual tensor (already resolved from its override): the
        // shapes must agree exactly, since the consumer chain updates that buffer in place.
        const Shape& dst = eff[ti.alias];
        bool same = dst.rank == inferred.rank;
        for(int i = 0; same && i < dst.rank; ++i)
            same = dst.dims[i] == inferred.dims[i];
        if(!same)
            return shape_fail(err,
                              "node '%s' (%s): intermediate uid %lld has shape [%s] this call, but the engine keeps "
                              "it in output tensor uid %lld, which has shape [%s]; an intermediate with wildcard "
                              "dims must have the shape of the output it flows into",
                              node.name.c_str(),
                              op_name(node.kind),
                              static_cast<long long>(ti.uid),
                              dims_text(inferred, a, sizeof(a)),
                              static_cast<long long>(plan.tensors[ti.alias].uid),
                              dims_text(dst, b, sizeof(b)));
        eff[t] = dst;
        return true;
    }
    if(ti.is_virtual)
    {
        if(!planning && elements(inferred) > ti.capacity)
            return shape_fail(err,
                              "node '%s': virtual tensor uid %lld needs %lld elements, more than the %lld "
                              "reserved at the declared shapes",
                              node.name.c_str(),
                              static_cast<long long>(ti.uid),
                              static_cast<long long>(elements(inferred)),
                              static_cast<long long>(ti.capacity));
        eff[t] = inferred;
        if(planning && ti.has_dims && ti.declared.rank == inferred.rank)
            for(int i = 0; i < inferred.rank; ++i)
                eff[t].dims[i] = meet(inferred.dims[i], ti.declared.dims[i]);
        if(!has_wildcard(eff[t]))
            set_compact(eff[t]);
        return true;
    }
    if(!dims_match(eff[t], inferred))
        return shape_fail(err,
                          "node '%s' (%s): output tensor uid %lld has shape [%s] but the inputs give [%s]",
                          node.name.c_str(),
                          op_name(node.kind),
                          static_cast<long long>(ti.uid),
                          dims_text(eff[t], a, sizeof(a)),
                          dims_text(inferred, b, sizeof(b)));
    return true;
}

// numpy broadcasting of two shapes into out (rank = max rank).
bool broadcast(const Shape& a, const Shape& b, Shape& out)
{
    out.rank = std::max(a.rank, b.rank);
    for(int i = 0; i < out.rank; ++i)
    {
        const int ia = i - (out.rank - a.rank), ib = i - (out.rank - b.rank);
        const int64_t da = ia >= 0 ? a.dims[ia] : 1, db = ib >= 0 ? b.dims[ib] : 1;
        if(da == db || db == 1)
            out.dims[i] = da;
        else if(da == 1 || da < 0)
            out.dims[i] = db; // a wildcard broadcasts to, or equals, a concrete dim other than 1
        else if(db < 0)
            out.dims[i] = da;
        else
            return false;
    }
    return true;
}

bool infer_sdpa_bwd(const Plan& plan, const NodeInfo& node, bool planning, Shape* eff, ShapeError& err)
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
           || (bs.dims[1] != 1 && !dim_eq(bs.dims[1], q.dims[1])) || !dim_eq(bs.dims[2], q.dims[2])
           || !dim_eq(bs.dims[3], k.dims[2]))
            return shape_fail(err, "node '%s' (sdpa_bwd): bias must be [B|1, H|1, Sq, Skv]", nm);
    }
    const Shape qq = q, kk = k, vv = v;
    return set_output(plan, node, node.out[0], qq, planning, eff, err)
           && set_output(plan, node, node.out[1], kk, planning, eff, err)
           && set_output(plan, node, node.out[2], vv, planning, eff, err);
}

bool infer_node(const Plan& plan, const NodeInfo& node, bool planning, Shape* eff, ShapeError& err)
{
    auto uid = [&](int t) { return static_cast<long long>(plan.tensors[t].uid); };
    switch(node.kind)
    {
    case OpKind::Sdpa:
    {
        const Shape &q = eff[node.in[0]], &k = eff[node.in[1]], &v = eff[node.in[2]];
        if(q.rank != 4 || k.rank != 4 || v.rank != 4)
            return shape_fail(err, "node '%s' (sdpa_fwd): q, k and v must be rank 4 [B,H,S,D]", node.name.c_str());
        if(!dim_eq(k.dims[0], q.dims[0]) || !dim_eq(v.dims[0], q.dims[0]) || !dim_eq(k.dims[0], v.dims[0]))
            return shape_fail(err, "node '%s' (sdpa_fwd): batch sizes of q, k, v differ", node.name.c_str());
        if(!dim_eq(k.dims[3], q.dims[3]))
            return shape_fail(err,
                              "node '%s' (sdpa_fwd): head dim of k (uid %lld) %lld differs from q's %lld",
                              node.name.c_str(),
                              uid(node.in[1]),
                              static_cast<long long>(k.dims[3]),
                              static_cast<long long>(q.dims[3]));
        if(!dim_eq(v.dims[1], k.dims[1]) || !dim_eq(v.dims[2], k.dims[2]))
            return shape_fail(err, "node '%s' (sdpa_fwd): k and v heads / sequence lengths differ", node.name.c_str());
        if(q.dims[1] > 0 && k.dims[1] > 0 && q.dims[1] % k.dims[1] != 0)
            return shape_fail(err,
                              "node '%s' (sdpa_fwd): query heads %lld not a multiple of kv heads %lld",
                              node.name.c_str(),
                              static_cast<long long>(q.dims[1]),
                              static_cast<long long>(k.dims[1]));
        Shape o;
        o.rank = 4;
        o.dims[0] = meet(q.dims[0], meet(k.dims[0], v.dims[0]));
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
        if(node.in[6] >= 0)
        {
            const Shape& bs = eff[node.in[6]];
            if(bs.rank != 4 || (bs.dims[0] != 1 && !dim_eq(bs.dims[0], o.dims[0]))
               || (bs.dims[1] != 1 && !dim_eq(bs.dims[1], q.dims[1])) || !dim_eq(bs.dims[2], q.dims[2])
               || !dim_eq(bs.dims[3], k.dims[2]))
                return shape_fail(err,
                                  "node '%s' (sdpa_fwd): bias (uid %lld) must be [B|1, H|1, Sq, Skv] = "
                                  "[%lld|1, %lld|1, %lld, %lld]; override it with q and k",
                                  node.name.c_str(),
                                  uid(node.in[6]),
                                  static_cast<long long>(q.dims[0]),
                                  static_cast<long long>(q.dims[1]),
                                  static_cast<long long>(q.dims[2]),
                                  static_cast<long long>(k.dims[2]));
        }
        return true;
    }
    case OpKind::Matmul:
    {
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
    case OpKind::Pointwise:
    {
        Shape o;
        if(!broadcast(eff[node.in[0]], eff[node.in[1]], o))
            return shape_fail(err,
                              "node '%s' (pointwise): inputs uid %lld and uid %lld do not broadcast",
                              node.name.c_str(),
                              uid(node.in[0]),
                              uid(node.in[1]));
        return set_output(plan, node, node.out[0], o, planning, eff, err);
    }
    case OpKind::SdpaBwd:
        return infer_sdpa_bwd(plan, node, planning, eff, err);
    case OpKind::RmsNorm:
    case OpKind::LayerNorm:
    {
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
                                  op_name(node.kind),
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
    case OpKind::Reduction:
    {
        Shape y = eff[node.in[0]];
        for(int i = 0; i < y.rank; ++i)
            if(node.reduced[i])
                y.dims[i] = 1;
        return set_output(plan, node, node.out[0], y, planning, eff, err);
    }
    }
    return shape_fail(err, "unknown node kind");
}

bool dtype_ok(wire::DataType d)
{
    return d == wire::DataType::FLOAT || d == wire::DataType::UNSET;
}

// Element types a tensor may have (which op accepts which is checked per node).
bool to_dtype(wire::DataType d, DType& out)
{
    switch(d)
    {
    case wire::DataType::FLOAT:
        out = DType::F32;
        return true;
    case wire::DataType::HALF:
        out = DType::F16;
        return true;
    case wire::DataType::BFLOAT16:
        out = DType::BF16;
        return true;
    case wire::DataType::INT32:
        out = DType::I32;
        return true;
    case wire::DataType::INT64:
        out = DType::I64;
        return true;
    default:
        return false;
    }
}

const char* dtype_name(DType d)
{
    switch(d)
    {
    case DType::F32:
        return "FLOAT";
    case DType::F16:
        return "HALF";
    case DType::BF16:
        return "BFLOAT16";
    case DType::I32:
        return "INT32";
    case DType::I64:
        return "INT64";
    }
    return "?";
}

bool is_float_type(DType d)
{
    return d == DType::F32 || d == DType::F16 || d == DType::BF16;
}

// Reads one tensor table. Returns "" or why the engine cannot use it.
std::string read_tensor(const wire::TensorAttributes* t, TensorInfo& out)
{
    if(t == nullptr)
        return "the graph has a null tensor entry";
    out.uid = t->uid();
    out.is_virtual = t->virtual_();
    out.dynamic = t->is_dynamic();
    const auto dt = t->data_type();
    if(out.is_virtual && dt != wire::DataType::FLOAT && dt != wire::DataType::UNSET)
        return format("virtual tensor uid %lld has data type %s; only FLOAT intermediates are supported",
                      static_cast<long long>(out.uid),
                      wire::EnumNameDataType(dt));
    if(!out.is_virtual && !to_dtype(dt, out.dt))
        return format("tensor uid %lld has data type %s; FLOAT, HALF, BFLOAT16, INT32 and INT64 are supported",
                      static_cast<long long>(out.uid),
                      wire::EnumNameDataType(dt));
    const auto* dims = t->dims();
    const auto* strides = t->strides();
    // The FlatBuffers verifier checks the alignment of a vector's length word only; dims and strides
    // are read in place as int64, so a damaged buffer could otherwise hand us misaligned elements.
    for(const auto* v : {dims, strides})
        if(v != nullptr && reinterpret_cast<uintptr_t>(v->data()) % alignof(int64_t) != 0)
            return format("tensor uid %lld: its dims or strides are not 8-byte aligned in the graph buffer",
                          static_cast<long long>(out.uid));
    const uint32_t rank = dims ? dims->size() : 0;
    if(t->value_type() != wire::TensorValue::NONE)
    {
        const auto* fv = t->value_as_Float32Value();
        if(out.dynamic)
            return format("by-value tensor uid %lld is marked dynamic", static_cast<long long>(out.uid));
        if(fv == nullptr || out.is_virtual)
            return format("tensor uid %lld: only FLOAT by-value scalars are supported",
                          static_cast<long long>(out.uid));
        out.by_value = true;
        out.value = fv->value();
        out.dt = DType::F32; // the value is carried as a float whatever the declared type
        out.has_dims = true;
        out.declared.rank = rank == 0 ? 1 : static_cast<int>(std::min<uint32_t>(rank, kMaxRank));
        for(int i = 0; i < out.declared.rank; ++i)
        {
            out.declared.dims[i] = rank == 0 ? 1 : dims->Get(i);
            if(out.declared.dims[i] != 1)
                return format("by-value tensor uid %lld must have every dim equal to 1",
                              static_cast<long long>(out.uid));
            out.declared.strides[i] = 1;
        }
        return "";
    }
    if(rank == 0)
    {
        if(out.is_virtual)
            return "";
        return format("tensor uid %lld has no dims", static_cast<long long>(out.uid));
    }
    if(rank > static_cast<uint32_t>(kMaxRank))
        return format("tensor uid %lld has rank %u; at most %d is supported",
                      static_cast<long long>(out.uid),
                      rank,
                      kMaxRank);
    out.has_dims = true;
    out.declared.rank = static_cast<int>(rank);
    for(uint32_t i = 0; i < rank; ++i)
    {
        out.declared.dims[i] = dims->Get(i);
        if(out.dynamic && out.declared.dims[i] == -1)
        {
            out.wild = true; // given at every execute, unbounded
            continue;
        }
        if(out.declared.dims[i] <= 0)
            return format("tensor uid %lld has a non-positive dim%s",
                          static_cast<long long>(out.uid),
                          out.declared.dims[i] == -1 ? " (a wildcard, but the tensor is not marked dynamic)" : "");
    }
    if(out.is_virtual)
    {
        if(!out.wild)
            set_compact(out.declared); // declared strides of virtual tensors are ignored
        return out.wild || extent(out.declared) >= 0
                   ? ""
                   : format("tensor uid %lld is too large", static_cast<long long>(out.uid));
    }
    if(out.dynamic)
    {
        // The strides are an axis order: a permutation of 0..rank-1, 0 for the innermost axis.
        // Element strides arrive with every execute (the override), so none are kept here.
        if(strides == nullptr || strides->size() != rank)
            return format("dynamic tensor uid %lld: its axis order and dims differ in length",
                          static_cast<long long>(out.uid));
        bool seen[kMaxRank] = {};
        for(uint32_t i = 0; i < rank; ++i)
        {
            const int64_t o = strides->Get(i);
            if(o < 0 || o >= static_cast<int64_t>(rank) || seen[o])
                return format("dynamic tensor uid %lld: strides are not an axis order (a permutation of 0..%u)",
                              static_cast<long long>(out.uid),
                              rank - 1);
            seen[o] = true;
            out.outer_first[rank - 1 - o] = static_cast<int>(i);
            out.declared.strides[i] = 0;
        }
        return "";
    }
    else
    {
        if(strides == nullptr || strides->size() != rank)
            return format("tensor uid %lld: strides and dims differ in length", static_cast<long long>(out.uid));
        for(uint32_t i = 0; i < rank; ++i)
        {
            out.declared.strides[i] = strides->Get(i);
            if(out.declared.strides[i] <= 0)
                return format("tensor uid %lld has a non-positive stride", static_cast<long long>(out.uid));
        }
    }
    if(extent(out.declared) < 0)
        return format("tensor uid %lld is too large", static_cast<long long>(out.uid));
    return "";
}

// Scratch bytes per thread a node needs at these shapes; a wildcard counts as unbounded (the
// kernels' tile sizes are capped, so the result is finite).
size_t node_scratch(const NodeInfo& node, const Shape* eff)
{
    auto dim = [](int64_t d) { return d < 0 ? kMaxExtent : d; };
    if(node.kind == OpKind::Sdpa)
    {
        const Shape &q = eff[node.in[0]], &k = eff[node.in[1]], &v = eff[node.in[2]];
        return sdpa_scratch_per_thread(dim(q.dims[2]), dim(k.dims[2]), dim(meet(q.dims[3], k.dims[3])), dim(v.dims[3]));
    }
    if(node.kind == OpKind::SdpaBwd)
        return sdpa_bwd_scratch_per_thread(dim(eff[node.in[0]].dims[3]), dim(eff[node.in[2]].dims[3]));
    if(node.kind == OpKind::Matmul)
    {
        const Shape &a = eff[node.in[0]], &b = eff[node.in[1]];
        return matmul_scratch_per_thread(
            dim(a.dims[a.rank - 2]), dim(b.dims[b.rank - 1]), dim(meet(a.dims[a.rank - 1], b.dims[b.rank - 2])));
    }
    return 0;
}

// Gives every virtual tensor with a wildcard-dependent size a place (TensorInfo::alias), or
// says why the graph is not applicable. See build_plan.
std::string place_wildcard_intermediates(Plan& plan, const std::vector<Shape>& eff)
{
    const size_t nt = plan.tensors.size();
    std::vector<int> readers(nt, 0), reader(nt, -1), first_read(nt, -1);
    for(size_t ni = 0; ni < plan.nodes.size(); ++ni)
    {
        const NodeInfo& node = plan.nodes[ni];
        constexpr int n_in = static_cast<int>(sizeof(node.in) / sizeof(node.in[0]));
        for(int i = 0; i < n_in; ++i)
        {
            const int t = node.in[i];
            bool repeat = t < 0;
            for(int j = 0; !repeat && j < i; ++j)
                repeat = node.in[j] == t; // unary pointwise lists its input twice
            if(repeat)
                continue;
            ++readers[t];
            reader[t] = static_cast<int>(ni);
            if(first_read[t] < 0)
                first_read[t] = static_cast<int>(ni);
        }
    }
    std::vector<int> aliased_input(plan.nodes.size(), -1);
    for(size_t ni = plan.nodes.size(); ni-- > 0;)
    {
        for(int t : plan.nodes[ni].out)
        {
            if(t < 0 || !plan.tensors[t].is_virtual || !has_wildcard(eff[t]))
                continue;
            TensorInfo& ti = plan.tensors[t];
            const char* why = nullptr;
            int target = -1;
            const int c = reader[t];
            if(readers[t] != 1)
                why = readers[t] == 0 ? "nothing reads it" : "more than one node reads it";
            else if(plan.nodes[c].kind != OpKind::Pointwise)
                why = "its consumer is not a pointwise node";
            else
            {
                const int x = plan.nodes[c].out[0];
                target = plan.tensors[x].is_virtual ? plan.tensors[x].alias : x;
                if(target < 0)
                    why = "its consumer's output is itself an intermediate that cannot hold it";
                else if(aliased_input[c] >= 0 && aliased_input[c] != t)
                    why = "its consumer already keeps another intermediate in its output";
                else if(first_read[target] >= 0 && first_read[target] <= plan.tensors[target].producer)
                    why = "the output it would live in is read before it is produced";
                else if(!dims_match(eff[t], eff[x]))
                    why = "its consumer broadcasts it to a different shape";
            }
            if(why != nullptr)
                return format("intermediate tensor uid %lld has wildcard dims %s, so the workspace cannot be sized "
                              "for it, and it cannot be kept in an output buffer either (%s); declare it "
                              "non-virtual or give the dims it depends on",
                              static_cast<long long>(ti.uid),
                              shape_str(eff[t]).c_str(),
                              why);
            ti.alias = target;
            aliased_input[c] = t;
        }
    }
    return "";
}

// Reads what SdpaAttributes and SdpaBackwardAttributes share, under the same field names in both
// tables: the diagonal/band masks, padding, ALiBi, the scale, and the q/k/v/scale/seq_len/bias inputs
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


// Builds the execution plan of a verified graph. Returns "" when the engine
// can compute every node exactly, else the reason it is not applicable.
std::string build_plan(const wire::Graph& g, Plan& plan)
{
    DType io_dt;
    if(!(dtype_ok(g.io_data_type()) || to_dtype(g.io_data_type(), io_dt)) || !dtype_ok(g.intermediate_data_type())
       || !dtype_ok(g.compute_data_type()))
        return "graph-level intermediate / compute data types other than FLOAT are not supported";
    if(g.name())
        plan.name = g.name()->str();
    const auto* tensors = g.tensors();
    const auto* nodes = g.nodes();
    if(tensors == nullptr || tensors->size() == 0)
        return "the graph has no tensors";
    if(nodes == nullptr || nodes->size() == 0)
        return "the graph has no nodes";

    plan.tensors.resize(tensors->size());
    for(uint32_t i = 0; i < tensors->size(); ++i)
    {
        std::string why = read_tensor(tensors->Get(i), plan.tensors[i]);
        if(!why.empty())
            return why;
        plan.by_uid.emplace_back(plan.tensors[i].uid, static_cast<int>(i));
    }
    std::sort(plan.by_uid.begin(), plan.by_uid.end());
    for(size_t i = 1; i < plan.by_uid.size(); ++i)
        if(plan.by_uid[i].first == plan.by_uid[i - 1].first)
            return format("tensor uid %lld appears twice", static_cast<long long>(plan.by_uid[i].first));

    plan.nodes.resize(nodes->size());
    for(uint32_t ni = 0; ni < nodes->size(); ++ni)
    {
        const wire::Node* n = nodes->Get(ni);
        NodeInfo& node = plan.nodes[ni];
        if(n == nullptr)
            return "the graph has a null node entry";
        node.name = n->name() ? n->name()->str() : ("node" + std::to_string(ni));
        if(!dtype_ok(n->compute_data_type()))
            return format("node '%s': compute data type %s is not supported",
                          node.name.c_str(),
                          wire::EnumNameDataType(n->compute_data_type()));

        // Resolves a uid to a tensor index; ok=false when the uid is unknown.
        std::string why;
        auto ref = [&](int64_t uid) -> int {
            const int t = plan.find(uid);
            if(t < 0 && why.empty())
                why = format("node '%s' refers to unknown tensor uid %lld", node.name.c_str(), static_cast<long long>(uid));
            return t;
        };

        switch(n->attributes_type())
        {
        case wire::NodeAttributes::SdpaAttributes:
        {
            const auto* a = n->attributes_as_SdpaAttributes();
            if(a == nullptr)
                return format("node '%s' has no attributes", node.name.c_str());
            node.kind = OpKind::Sdpa;
            const char* nm = node.name.c_str();
            // Inputs and outputs beyond q, k, v, o, stats are features this
            // engine does not implement: not applicable rather than ignored.
            struct Unsupported
            {
                bool present;
                const char* what;
            };
            const char* const extension = sdk::sdpa_extension_in_use(*a);
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
            };
            for(const Unsupported& u : unsupported)
                if(u.present)
                    return format("node '%s' (sdpa_fwd): %s is not supported", nm, u.what);
            if(std::string bad = read_attention_options(a, node, nm, "sdpa_fwd", ref); !bad.empty())
                return bad;
            node.out[0] = ref(a->o_tensor_uid());
            if(a->stats_tensor_uid().has_value())
                node.out[1] = ref(a->stats_tensor_uid().value());
            if(why.empty())
            {
                // Element types by role.
                struct Role
                {
                    int t;
                    const char* what;
                    bool (*ok)(DType);
                };
                const Role roles[] = {
                    {node.in[0], "q", is_float_type},
                    {node.in[1], "k", is_float_type},
                    {node.in[2], "v", is_float_type},
                    {node.in[3], "the scale tensor", is_float_type},
                    {node.in[4], "seq_len_q", [](DType d) { return d == DType::I32 || d == DType::I64; }},
                    {node.in[5], "seq_len_kv", [](DType d) { return d == DType::I32 || d == DType::I64; }},
                    {node.in[6], "the bias", is_float_type},
                    {node.out[0], "o", is_float_type},
                    {node.out[1], "stats", [](DType d) { return d == DType::F32; }},
                };
                for(const Role& r : roles)
                    if(r.t >= 0 && !r.ok(plan.tensors[r.t].dt))
                        return format("node '%s' (sdpa_fwd): %s has data type %s, which is not supported there",
                                      nm,
                                      r.what,
                                      dtype_name(plan.tensors[r.t].dt));
            }
            break;
        }
        case wire::NodeAttributes::MatmulAttributes:
        {
            const auto* a = n->attributes_as_MatmulAttributes();
            if(a == nullptr)
                return format("node '%s' has no attributes", node.name.c_str());
            node.kind = OpKind::Matmul;
            node.in[0] = ref(a->a_tensor_uid());
            node.in[1] = ref(a->b_tensor_uid());
            node.out[0] = ref(a->c_tensor_uid());
            if(!why.empty())
                return why;
            for(int t : {node.in[0], node.in[1], node.out[0]})
                if(plan.tensors[t].dt != DType::F32)
                    return format("node '%s' (matmul): tensor uid %lld has data type %s; only FLOAT is supported",
                                  node.name.c_str(),
                                  static_cast<long long>(plan.tensors[t].uid),
                                  dtype_name(plan.tensors[t].dt));
            break;
        }
        case wire::NodeAttributes::PointwiseAttributes:
        {
            const auto* a = n->attributes_as_PointwiseAttributes();
            if(a == nullptr)
                return format("node '%s' has no attributes", node.name.c_str());
            node.kind = OpKind::Pointwise;
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
            node.in[0] = ref(a->in_0_tensor_uid());
            node.in[1] = unary ? node.in[0] : ref(a->in_1_tensor_uid().value());
            node.out[0] = ref(a->out_0_tensor_uid());
            if(!why.empty())
                return why;
            for(int t : {node.in[0], node.in[1], node.out[0]})
                if(plan.tensors[t].dt != DType::F32)
                    return format("node '%s' (pointwise): tensor uid %lld has data type %s; only FLOAT is supported",
                                  node.name.c_str(),
                                  static_cast<long long>(plan.tensors[t].uid),
                                  dtype_name(plan.tensors[t].dt));
            break;
        }
        case wire::NodeAttributes::SdpaBackwardAttributes:
        {
            const auto* a = n->attributes_as_SdpaBackwardAttributes();
            if(a == nullptr)
                return format("node '%s' has no attributes", node.name.c_str());
            node.kind = OpKind::SdpaBwd;
            const char* nm = node.name.c_str();
            if(a->seed_tensor_uid().has_value() || a->offset_tensor_uid().has_value()
               || (a->dropout_probability().has_value() && a->dropout_probability().value() != 0.0f))
                return format("node '%s' (sdpa_bwd): dropout is not supported", nm);
            if(a->dbias_tensor_uid().has_value())
                return format("node '%s' (sdpa_bwd): a bias gradient (dbias) is not supported", nm);
            if(a->padding_mask() != (a->seq_len_q_tensor_uid().has_value() && a->seq_len_kv_tensor_uid().has_value())
               || (!a->padding_mask() && (a->seq_len_q_tensor_uid().has_value() || a->seq_len_kv_tensor_uid().has_value())))
                return format("node '%s' (sdpa_bwd): a padding mask needs both seq_len_q and seq_len_kv", nm);
            if((a->left_bound().has_value() && a->left_bound().value() < 0)
               || (a->right_bound().has_value() && a->right_bound().value() < 0))
                return format("node '%s' (sdpa_bwd): negative band bounds are not supported", nm);
            if(std::string bad = read_attention_options(a, node, nm, "sdpa_bwd", ref); !bad.empty())
                return bad;
            node.in[7] = ref(a->o_tensor_uid());
            node.in[8] = ref(a->do_tensor_uid());
            node.in[9] = ref(a->stats_tensor_uid());
            node.out[0] = ref(a->dq_tensor_uid());
            node.out[1] = ref(a->dk_tensor_uid());
            node.out[2] = ref(a->dv_tensor_uid());
            if(!why.empty())
                return why;
            auto is_len = [](DType d) { return d == DType::I32 || d == DType::I64; };
            for(int r = 0; r < 10; ++r)
            {
                const int t = node.in[r];
                if(t < 0)
                    continue;
                const DType d = plan.tensors[t].dt;
                const bool ok = (r == 4 || r == 5) ? is_len(d) : r == 9 ? d == DType::F32 : is_float_type(d);
                if(!ok)
                    return format("node '%s' (sdpa_bwd): input uid %lld has data type %s, not supported there",
                                  nm,
                                  static_cast<long long>(plan.tensors[t].uid),
                                  dtype_name(d));
            }
            for(int t : node.out)
                if(!is_float_type(plan.tensors[t].dt))
                    return format("node '%s' (sdpa_bwd): gradients must be FLOAT, HALF or BFLOAT16", nm);
            if(node.out[0] == node.out[1] || node.out[0] == node.out[2] || node.out[1] == node.out[2])
                return format("node '%s' (sdpa_bwd): dq, dk and dv must be distinct tensors", nm);
            break;
        }
        case wire::NodeAttributes::RMSNormAttributes:
        case wire::NodeAttributes::LayernormAttributes:
        {
            const bool rms = n->attributes_type() == wire::NodeAttributes::RMSNormAttributes;
            node.kind = rms ? OpKind::RmsNorm : OpKind::LayerNorm;
            int count = 0;
            auto common = [&](const auto* a) {
                node.in[0] = ref(a->x_tensor_uid());
                if(a->scale_tensor_uid().has_value())
                    node.in[1] = ref(a->scale_tensor_uid().value());
                if(a->bias_tensor_uid().has_value())
                    node.in[2] = ref(a->bias_tensor_uid().value());
                if(a->epsilon_tensor_uid().has_value())
                    node.in[3] = ref(a->epsilon_tensor_uid().value());
                node.eps = a->epsilon_value().has_value() ? a->epsilon_value().value() : 1e-5f;
                count = a->normalized_dim_count().has_value() ? a->normalized_dim_count().value() : 0;
                node.out[0] = ref(a->y_tensor_uid());
            };
            if(rms)
            {
                const auto* a = n->attributes_as_RMSNormAttributes();
                if(a == nullptr)
                    return format("node '%s' has no attributes", node.name.c_str());
                common(a);
                if(a->inv_rms_tensor_uid().has_value())
                    node.out[1] = ref(a->inv_rms_tensor_uid().value());
            }
            else
            {
                const auto* a = n->attributes_as_LayernormAttributes();
                if(a == nullptr)
                    return format("node '%s' has no attributes", node.name.c_str());
                common(a);
                if(a->mean_tensor_uid().has_value())
                    node.out[1] = ref(a->mean_tensor_uid().value());
                if(a->inv_variance_tensor_uid().has_value())
                    node.out[2] = ref(a->inv_variance_tensor_uid().value());
            }
            if(!why.empty())
                return why;
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
                              op_name(node.kind),
                              count,
                              rank);
            node.norm_count = count;
            if(!(node.eps >= 0.0f))
                return format("node '%s' (%s): epsilon must be >= 0", node.name.c_str(), op_name(node.kind));
            for(int t : node.in)
                if(t >= 0 && plan.tensors[t].dt != DType::F32)
                    return format("node '%s' (%s): tensor uid %lld has data type %s; only FLOAT is supported",
                                  node.name.c_str(),
                                  op_name(node.kind),
                                  static_cast<long long>(plan.tensors[t].uid),
                                  dtype_name(plan.tensors[t].dt));
            for(int t : node.out)
                if(t >= 0 && plan.tensors[t].dt != DType::F32)
                    return format("node '%s' (%s): output uid %lld must be FLOAT",
                                  node.name.c_str(),
                                  op_name(node.kind),
                                  static_cast<long long>(plan.tensors[t].uid));
            break;
        }
        case wire::NodeAttributes::ReductionAttributes:
        {
            const auto* a = n->attributes_as_ReductionAttributes();
            if(a == nullptr)
                return format("node '%s' has no attributes", node.name.c_str());
            node.kind = OpKind::Reduction;
            const int mode = static_cast<int>(a->mode());
            if(mode < 1 || mode > 9)
                return format("node '%s': reduction mode %d is not supported", node.name.c_str(), mode);
            node.reduce = static_cast<ReduceOp>(mode);
            node.in[0] = ref(a->x_tensor_uid());
            node.out[0] = ref(a->y_tensor_uid());
            if(!why.empty())
                return why;
            const TensorInfo &xi = plan.tensors[node.in[0]], &yi = plan.tensors[node.out[0]];
            if(!yi.has_dims || yi.declared.rank != xi.declared.rank)
                return format("node '%s' (reduction): y must have x's rank; its dims of 1 mark the reduced axes",
                              node.name.c_str());
            for(int i = 0; i < yi.declared.rank; ++i)
                node.reduced[i] = yi.declared.dims[i] == 1;
            for(int t : {node.in[0], node.out[0]})
                if(plan.tensors[t].dt != DType::F32)
                    return format("node '%s' (reduction): tensor uid %lld has data type %s; only FLOAT is supported",
                                  node.name.c_str(),
                                  static_cast<long long>(plan.tensors[t].uid),
                                  dtype_name(plan.tensors[t].dt));
            break;
        }
        default:
            return format("node '%s': operation type %d is not supported",
                          node.name.c_str(),
                          static_cast<int>(n->attributes_type()));
        }
        if(!why.empty())
            return why;

        // Data flow: virtual inputs must come from an earlier node, each tensor
        // is written once, and no node reads what it writes.
        for(int t : node.in)
        {
            if(t < 0)
                continue;
            TensorInfo& ti = plan.tensors[t];
            if(ti.is_virtual && ti.producer < 0)
                return format("node '%s' reads virtual tensor uid %lld before any node produces it",
                              node.name.c_str(),
                              static_cast<long long>(ti.uid));
            ti.used = true;
        }
        for(int o : node.out)
        {
            if(o < 0)
                continue;
            for(int t : node.in)
                if(t == o)
                    return format("node '%s' reads and writes tensor uid %lld",
                                  node.name.c_str(),
                                  static_cast<long long>(plan.tensors[o].uid));
            TensorInfo& to = plan.tensors[o];
            if(to.by_value)
                return format("node '%s' writes by-value tensor uid %lld",
                              node.name.c_str(),
                              static_cast<long long>(to.uid));
            if(to.producer >= 0)
                return format("tensor uid %lld is produced by more than one node", static_cast<long long>(to.uid));
            to.producer = static_cast<int>(ni);
            to.used = true;
        }
        if(node.out[1] >= 0 && node.out[1] == node.out[0])
            return format("node '%s': o and stats are the same tensor", node.name.c_str());
    }

    // Dynamic tensors are served by every node kind: each kernel's scratch is sized from tile
    // sizes and declared head dims only (sdpa_bwd refuses wildcard head dims in infer_sdpa_bwd),
    // norms and reductions need none, and every shape rule below treats -1 as "equal to anything".

    // Shapes at the declared (maximum) sizes.
    std::vector<Shape> eff(plan.tensors.size());
    for(size_t t = 0; t < plan.tensors.size(); ++t)
        eff[t] = plan.tensors[t].declared;
    ShapeError err{};
    for(const NodeInfo& node : plan.nodes)
        if(!infer_node(plan, node, true, eff.data(), err))
            return err.msg;

    // A virtual tensor whose size depends on a wildcard cannot be given a workspace slot (the
    // workspace is sized once, and nothing is allocated on the execute path). The one case served
    // is an intermediate read only by a pointwise node whose output has its shape: it is then kept
    // in that output's buffer, which the consumer updates in place (elementwise, same index read
    // and written), following chains of such pointwise nodes to a non-virtual output. Anything
    // else is not applicable. Visiting producers last-first resolves a chain from its end.
    if(const std::string why = place_wildcard_intermediates(plan, eff); !why.empty())
        return why;

    size_t off = 0;
    for(size_t t = 0; t < plan.tensors.size(); ++t)
    {
        TensorInfo& ti = plan.tensors[t];
        if(!ti.is_virtual)
            continue;
        if(ti.producer < 0)
            continue; // declared but never used: nothing to place
        if(ti.has_dims && !dims_match(ti.declared, eff[t]))
            return format("virtual tensor uid %lld is declared %s but its producer gives %s",
                          static_cast<long long>(ti.uid),
                          shape_str(ti.declared).c_str(),
                          shape_str(eff[t]).c_str());
        if(ti.alias >= 0)
            continue; // stored in a non-virtual output's buffer
        if(extent(eff[t]) < 0)
            return format("virtual tensor uid %lld is too large", static_cast<long long>(ti.uid));
        ti.capacity = elements(eff[t]);
        ti.ws_offset = off;
        off += align_up(static_cast<size_t>(ti.capacity) * sizeof(float));
    }

    // Scratch is per-thread tiles whose size is capped (SDPA: at most 4 panels of 24 queries and
    // one 64-key tile, whatever the sequence lengths; matmul: one cache block), so wildcard
    // sequence lengths, batches and M/N/K are sized at their cap. SDPA head dims size the tiles
    // and must be known.
    size_t per_thread = 0;
    for(NodeInfo& node : plan.nodes)
    {
        if(node.kind == OpKind::Sdpa)
        {
            const Shape &q = eff[node.in[0]], &k = eff[node.in[1]], &v = eff[node.in[2]];
            if(meet(q.dims[3], k.dims[3]) < 0 || v.dims[3] < 0)
                return format("node '%s' (sdpa_fwd): the head dims of q/k and v are wildcards; the engine sizes "
                              "its per-thread tiles from them, so they must be declared",
                              node.name.c_str());
        }
        node.scratch_per_thread = node_scratch(node, eff.data());
        per_thread = std::max(per_thread, node.scratch_per_thread);
    }
    plan.nthreads = max_threads();
    plan.scratch_offset = off;
    plan.scratch_per_thread = per_thread;
    const size_t total = off + per_thread * static_cast<size_t>(plan.nthreads);
    plan.workspace_size = total == 0 ? 0 : total + kAlign; // slack to align the caller's pointer
    for(const TensorInfo& ti : plan.tensors)
    {
        sdk::DeclaredTensor d;
        d.uid = ti.uid;
        d.label = format("tensor uid %lld", static_cast<long long>(ti.uid));
        d.binding = ti.is_virtual ? sdk::Binding::Virtual : ti.by_value ? sdk::Binding::Value : sdk::Binding::Buffer;
        d.needs_buffer = ti.used;
        d.shape = ti.declared;
        d.dynamic = ti.dynamic;
        std::copy(ti.outer_first, ti.outer_first + kMaxRank, d.outer_first);
        d.wildcard_max = kMaxExtent; // offsets stay far from int64 overflow
        d.max_extent_log2 = 48;      // kMaxExtent
        plan.declared.push_back(std::move(d));
    }
    plan.seal();
    return "";
}

std::string describe(const Plan& plan)
{
    std::string s = format("engine %lld, graph '%s': %zu node(s):",
                           static_cast<long long>(kEngineId),
                           plan.name.c_str(),
                           plan.nodes.size());
    for(const NodeInfo& n : plan.nodes)
    {
        s += " " + n.name + "=" + op_name(n.kind);
        if(n.kind == OpKind::Sdpa)
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
            if(n.in[6] >= 0)
                s += " bias";
            if(n.alibi)
                s += " alibi";
            s += n.out[1] >= 0 ? " +stats)" : ")";
        }
        else if(n.kind == OpKind::Matmul)
        {
            s += "(" + shape_str(plan.tensors[n.in[0]].declared) + "x" + shape_str(plan.tensors[n.in[1]].declared)
                 + ")";
        }
    }
    s += format("; workspace %zu bytes, %d thread(s)", plan.workspace_size, plan.nthreads);
    return s;
}

// A one-element tensor's value as float.
float read_scalar(const void* ptr, DType dt)
{
    uint32_t bits = 0;
    switch(dt)
    {
    case DType::F16:
    {
        // widen a half by hand (rare path: a scale tensor)
        const uint16_t h = *static_cast<const uint16_t*>(ptr);
        const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
        const float mag = e == 0 ? std::ldexp(static_cast<float>(m), -24)
                          : e == 31 ? (m ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity())
                                    : std::ldexp(static_cast<float>(m + 1024), e - 25);
        return (h & 0x8000) ? -mag : mag;
    }
    case DType::BF16:
    {
        bits = static_cast<uint32_t>(*static_cast<const uint16_t*>(ptr)) << 16;
        float f;
        std::memcpy(&f, &bits, sizeof(f));
        return f;
    }
    default:
        return *static_cast<const float*>(ptr);
    }
}

// One call, after the layer bound its buffers and checked its overrides: call.ptrs and call.shapes
// (indexed like plan.tensors) hold the call's memory and shapes; virtual tensors get theirs here.
void run(const Plan& plan, sdk::Call& call)
{
    Shape* eff = call.shapes;
    void** ptrs = call.ptrs;
    void* workspace = call.workspace;
    const size_t nt = plan.tensors.size();
    for(size_t t = 0; t < nt; ++t)
        if(plan.tensors[t].by_value)
            ptrs[t] = const_cast<float*>(&plan.tensors[t].value); // read only

    // Resolve every node's shapes before any node runs, so a bad call writes nothing.
    ShapeError err{};
    for(const NodeInfo& node : plan.nodes)
        if(!infer_node(plan, node, false, eff, err))
            fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, err.msg);
    // The workspace was sized once; a call that would need more scratch is refused, never overrun.
    for(const NodeInfo& node : plan.nodes)
    {
        const size_t need = node_scratch(node, eff);
        if(need > plan.scratch_per_thread)
            bad_param("node '%s': this call needs %zu bytes of scratch per thread, more than the %zu the "
                      "workspace was sized for",
                      node.name.c_str(),
                      need,
                      plan.scratch_per_thread);
    }

    char* base = nullptr;
    if(plan.workspace_size > 0)
    {
        const uintptr_t p = reinterpret_cast<uintptr_t>(workspace);
        base = reinterpret_cast<char*>((p + kAlign - 1) / kAlign * kAlign);
    }
    for(size_t t = 0; t < nt; ++t)
        if(plan.tensors[t].is_virtual && plan.tensors[t].producer >= 0)
            ptrs[t] = plan.tensors[t].alias >= 0 ? ptrs[plan.tensors[t].alias] : base + plan.tensors[t].ws_offset;
    char* scratch = base ? base + plan.scratch_offset : nullptr;
    // Scratch was sized for plan.nthreads; use fewer if the caller lowered
    // the OpenMP thread count since.
    const int nthreads = std::max(1, std::min(plan.nthreads, max_threads()));

    for(const NodeInfo& node : plan.nodes)
    {
        bool ok = true;
        switch(node.kind)
        {
        case OpKind::Sdpa:
        {
            SdpaProblem p;
            p.q = ptrs[node.in[0]];
            p.k = ptrs[node.in[1]];
            p.v = ptrs[node.in[2]];
            p.o = ptrs[node.out[0]];
            p.qt = plan.tensors[node.in[0]].dt;
            p.kt = plan.tensors[node.in[1]].dt;
            p.vt = plan.tensors[node.in[2]].dt;
            p.ot = plan.tensors[node.out[0]].dt;
            p.qs = eff[node.in[0]];
            p.ks = eff[node.in[1]];
            p.vs = eff[node.in[2]];
            p.os = eff[node.out[0]];
            if(node.out[1] >= 0)
            {
                p.stats = static_cast<float*>(ptrs[node.out[1]]);
                p.ss = eff[node.out[1]];
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
            ok = run_sdpa(p, scratch, plan.scratch_per_thread, nthreads);
            break;
        }
        case OpKind::Matmul:
        {
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
            ok = run_matmul(p, scratch, plan.scratch_per_thread, nthreads);
            break;
        }
        case OpKind::Pointwise:
        {
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
            run_pointwise(p, nthreads);
            break;
        }
        case OpKind::SdpaBwd:
        {
            SdpaBwdProblem bp;
            SdpaProblem& p = bp.fwd;
            p.q = ptrs[node.in[0]];
            p.k = ptrs[node.in[1]];
            p.v = ptrs[node.in[2]];
            p.o = ptrs[node.in[7]];
            p.qt = plan.tensors[node.in[0]].dt;
            p.kt = plan.tensors[node.in[1]].dt;
            p.vt = plan.tensors[node.in[2]].dt;
            p.ot = plan.tensors[node.in[7]].dt;
            p.qs = eff[node.in[0]];
            p.ks = eff[node.in[1]];
            p.vs = eff[node.in[2]];
            p.os = eff[node.in[7]];
            p.stats = static_cast<float*>(ptrs[node.in[9]]);
            p.ss = eff[node.in[9]];
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
            ok = run_sdpa_bwd(bp, scratch, plan.scratch_per_thread, nthreads);
            break;
        }
        case OpKind::RmsNorm:
        case OpKind::LayerNorm:
        {
            const Shape &x = eff[node.in[0]], &y = eff[node.out[0]];
            NormProblem p;
            p.rms = node.kind == OpKind::RmsNorm;
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
            run_norm(p, nthreads);
            break;
        }
        case OpKind::Reduction:
        {
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
            run_reduction(p, nthreads);
            break;
        }
        }
        if(!ok)
            fail(HIPDNN_PLUGIN_STATUS_INTERNAL_ERROR,
                 "node '" + node.name + "': scratch space smaller than the kernel needs");
    }
}

// The engine as the SDK layer sees it. It keeps no state of its own: plans are cached by the layer,
// per handle, and a call's storage lives in its execution context.
struct CpuEngine
{
    using Plan = ::Plan;
    static constexpr int64_t kEngineIds[] = {kEngineId};
    static constexpr const char* kName = "hipdnn_cpu_engine";
    static constexpr const char* kApiVersion = "1.2.0"; // dynamic tensors; not the SDK's newest
    static constexpr const char* kVersion = HIPDNN_VERSION;
    static constexpr bool kOverrideEntry = true;

    std::string plan(int64_t, const sdk::GraphView& g, Plan& out) const { return build_plan(g.graph, out); }

    size_t workspace_size(int64_t, const Plan& p) const { return p.workspace_size; }

    // Tensors and workspace are host memory.
    std::vector<int32_t> behavior_notes(int64_t) const { return {HIPDNN_BEHAVIOR_NOTE_HOST_MEMORY_EXT}; }

    std::string describe(int64_t, const Plan& p) const { return ::describe(p); }

    void execute(const Plan& p, sdk::Call& call) const { run(p, call); }
};

} // namespace

HIPDNN_CPP_PLUGIN(CpuEngine)
