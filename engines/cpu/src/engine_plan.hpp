// The CPU engine's execution plan, and the table of ops it is built from. Each op (op_*.cpp) is one
// OpDesc: how it reads its graph node, its shape rules at effective shapes, its scratch sizing and
// its run function. cpu_engine.cpp builds and runs plans by looking ops up in the table (kOps) and
// never names an op itself; the kernels stay in cpu_kernels.cpp, sdpa_*.cpp and norms.cpp.
#pragma once

#include "cpu_kernels.hpp"
#include "extra_ops.hpp"

#include <hipdnn_plugin_sdk/cpp/EnginePlugin.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace hipdnn_cpu
{

namespace sdk = hipdnn_plugin_sdk::cpp;
namespace wire = hipdnn::wire;

// Failures and messages as the SDK layer maps them to statuses and the last error.
using sdk::bad_param;
using sdk::fail;
using sdk::format;

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
    // Ragged (API 1.3.0): the uid and index of the INT32 / INT64 [B+1,1,1,1] tensor whose element b
    // replaces b * strides[0] as batch b's start (-1: not ragged).
    int64_t ragged_uid = -1;
    int ragged = -1;
};

struct OpDesc;

struct NodeInfo
{
    const OpDesc* kind = nullptr;
    std::string name;
    // Sdpa: q, k, v, scale, seq_len_q, seq_len_kv, bias / o, stats (-1 when
    // absent). Matmul: a, b / c. Pointwise: in0, in1 / out.
    // SdpaBwd: in[0..6] as Sdpa, in[7..9] o, dO, stats / dq, dk, dv. Norms: x,
    // scale, bias, epsilon / y, inv_rms or mean, inv_variance. Reduction: x / y.
    int in[10] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
    int out[3] = {-1, -1, -1};
    // Attention (sdpa_fwd, sdpa_bwd).
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
    float softcap = 0.0f; // score softcapping c (0: off; rfcs/0013-softcap.md)
    bool bf16_qkv = false; // sdpa_fwd: q, k and v bf16; sdpa_bwd: and dO (the AMX tile kernels' calls: their scratch)
    // FP8 (sdpa_fp8.cpp; rfcs/0014-fp8-attention.md): the one-element factors and the amax outputs,
    // -1 past the node's count. Forward (API 1.5.0): descale q, k, v, s, scale s, o / amax s, o.
    // Backward (API 1.6.0): descale q, k, v, o, dO, s, dP, scale s, dQ, dK, dV, dP / amax dQ, dK,
    // dV, dP. The data-flow checks see them as reads and writes (node_reads, node_writes).
    bool fp8 = false;
    int fp8_in[12] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
    int fp8_out[4] = {-1, -1, -1, -1};
    // Ragged tensors or paged K/V (API 1.3.0, sdpa_varlen.cpp): the node runs batch by batch, each
    // at its own lengths; sdpa_fwd keeps the page tables in in[7] (k) and in[8] (v).
    bool varlen = false;
    bool paged = false;
    int64_t max_skv = -1;  // paged: max_seq_len_kv (-1: max_blocks * block_size)
    size_t aux_bytes = 0;  // workspace the per-batch path needs (checked offsets, tables, gathered K/V)
    size_t aux_offset = 0; // where it starts, from the workspace's aligned base
    // Pointwise.
    BinaryOp op = BinaryOp::Add;
    PointwiseParams pw;
    // Norms.
    int norm_count = 1; // trailing axes normalized
    float eps = 1e-5f;
    // Reduction.
    ReduceOp reduce = ReduceOp::Add;
    bool reduced[kMaxRank] = {};
    size_t scratch_per_thread = 0;
};

// Every tensor the node reads (in, then the FP8 factors) and writes (out, then the amax outputs);
// -1 where absent.
inline std::array<int, 22> node_reads(const NodeInfo& n)
{
    std::array<int, 22> r{};
    std::copy(std::begin(n.in), std::end(n.in), r.begin());
    std::copy(std::begin(n.fp8_in), std::end(n.fp8_in), r.begin() + 10);
    return r;
}
inline std::array<int, 7> node_writes(const NodeInfo& n)
{
    std::array<int, 7> w{};
    std::copy(std::begin(n.out), std::end(n.out), w.begin());
    std::copy(std::begin(n.fp8_out), std::end(n.fp8_out), w.begin() + 3);
    return w;
}

// The layer binds buffers and checks overrides on `declared` (DeclaredTensors), kept in the same
// order as `tensors`.
struct Plan : sdk::DeclaredTensors
{
    std::string name;
    std::vector<TensorInfo> tensors;
    std::vector<NodeInfo> nodes;
    std::vector<std::pair<int64_t, int>> by_uid; // sorted by uid
    int nthreads = 1;
    bool threads_set = false; // nthreads came from the CPU_THREADS knob: calls use exactly that many
    Threading threading = Threading::Pool; // the CPU_THREADING knob
    Isa isa = Isa::Baseline; // the kernels' build, chosen when the plan was built (isa_for_plan)
    int panel_vectors = 3;   // the SDPA forward's widest AVX-512 fp32 panel (panel_vectors_for_plan)
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

// ------------------------------------------------------------- shapes --
std::string shape_str(const Shape& s);

inline int64_t elements(const Shape& s)
{
    int64_t n = 1;
    for(int i = 0; i < s.rank; ++i)
        n *= s.dims[i];
    return n;
}

// Wildcards (-1) exist only while planning a graph with dynamic tensors; at execute every dim is
// positive, so these comparisons are exact there.
inline bool dim_eq(int64_t a, int64_t b)
{
    return a == b || a < 0 || b < 0;
}

// The more informative of two dims that must be equal.
inline int64_t meet(int64_t a, int64_t b)
{
    return a < 0 ? b : a;
}

inline bool has_wildcard(const Shape& s)
{
    for(int i = 0; i < s.rank; ++i)
        if(s.dims[i] < 0)
            return true;
    return false;
}

bool dims_match(const Shape& a, const Shape& b);

// A dim for sizing scratch: a wildcard counts as unbounded (the kernels' tile sizes are capped, so
// the size stays finite).
inline int64_t unbounded(int64_t d)
{
    return d < 0 ? kMaxExtent : d;
}

// Past int64, strides saturate: extent() then refuses the shape instead of the product overflowing.
void set_compact(Shape& s);

// Largest element offset + 1, or -1 on overflow / over kMaxExtent.
int64_t extent(const Shape& s);

// Per-call shape resolution. Messages are written to a fixed buffer so that the
// success path never allocates.
struct ShapeError
{
    char msg[384];
};

bool shape_fail(ShapeError& err, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// Records the inferred shape of a node output: a virtual output takes it (with
// compact strides, or the strides of the output it is kept in); a non-virtual
// output must already have exactly it.
bool set_output(const Plan& plan,
                const NodeInfo& node,
                int t,
                const Shape& inferred,
                bool planning,
                Shape* eff,
                ShapeError& err);

// numpy broadcasting of two shapes into out (rank = max rank).
bool broadcast(const Shape& a, const Shape& b, Shape& out);

// ---------------------------------------------------------- data types --
inline bool dtype_ok(wire::DataType d)
{
    return d == wire::DataType::FLOAT || d == wire::DataType::UNSET;
}

// Element types a tensor may have (which op accepts which is checked per node).
bool to_dtype(wire::DataType d, DType& out);

const char* dtype_name(DType d);

inline bool is_float_type(DType d)
{
    return d == DType::F32 || d == DType::F16 || d == DType::BF16;
}

// "" when every listed tensor (-1: absent) is FLOAT, else why not, naming the first that is not.
template <size_t N>
std::string only_float(const Plan& plan, const NodeInfo& node, const int (&ts)[N]);

// A one-element tensor's value as float.
float read_scalar(const void* ptr, DType dt);

// ------------------------------------------------------------ the ops --
// Resolves the uids a node names to tensor indices (-1 when unknown); the first unknown uid is
// kept in `why`.
struct TensorRefs
{
    const Plan& plan;
    const std::string& node_name;
    std::string why;

    int operator()(int64_t uid)
    {
        const int t = plan.find(uid);
        if(t < 0 && why.empty())
            why = format("node '%s' refers to unknown tensor uid %lld", node_name.c_str(), static_cast<long long>(uid));
        return t;
    }
};

// One call's memory and shapes, indexed like plan.tensors, and its scratch.
struct RunArgs
{
    void* const* ptrs;
    const Shape* eff;
    char* scratch; // nthreads slices of plan.scratch_per_thread bytes
    int nthreads;
    Isa isa;    // plan.isa
    int panel_vectors; // plan.panel_vectors
    char* base; // the workspace's aligned base (NodeInfo::aux_offset counts from it)
    Threading threading; // plan.threading
};

struct OpDesc
{
    wire::NodeAttributes type; // the wire node type it serves
    const char* name;          // in messages and the plan's description
    // Fills node.in / node.out (through refs) and the op's fields from a node whose attributes are
    // present. "" or why the engine cannot serve it; an unknown uid is left in refs.why.
    std::string (*read)(const wire::Node& n, const Plan& plan, NodeInfo& node, TensorRefs& refs);
    // Shape rules: checks the inputs' shapes in eff and sets the outputs' (set_output). planning:
    // at the declared shapes, where -1 dims are wildcards.
    bool (*infer)(const Plan& plan, const NodeInfo& node, bool planning, Shape* eff, ShapeError& err);
    // Scratch bytes per thread at these shapes, a wildcard counting as unbounded; null when none.
    // At planning (why set), may refuse shapes it cannot size, saying why.
    size_t (*scratch)(const NodeInfo& node, const Shape* eff, std::string* why);
    // Runs the node; false when the scratch is smaller than the kernel needs.
    bool (*run)(const Plan& plan, const NodeInfo& node, const RunArgs& args);
    // Appends what the plan's description says of the node after "name=op"; null when nothing.
    void (*describe)(const Plan& plan, const NodeInfo& node, std::string& s);
    // Elementwise, reading and writing the same index: a wildcard-sized intermediate it reads may
    // live in its output's buffer.
    bool in_place;
    // Checks the call's data the node will use (ragged offsets, page tables), and copies what it
    // checked into the node's part of the workspace, before any node of the call runs: a refusal
    // (thrown) then writes no output of any node. Null when the node has nothing to check.
    void (*check)(const Plan& plan, const NodeInfo& node, const RunArgs& args);
};

template <size_t N>
std::string only_float(const Plan& plan, const NodeInfo& node, const int (&ts)[N])
{
    for(int t : ts)
        if(t >= 0 && plan.tensors[t].dt != DType::F32)
            return format("node '%s' (%s): tensor uid %lld has data type %s; only FLOAT is supported",
                          node.name.c_str(),
                          node.kind->name,
                          static_cast<long long>(plan.tensors[t].uid),
                          dtype_name(plan.tensors[t].dt));
    return "";
}

inline bool is_fp8_type(DType d)
{
    return d == DType::F8E4M3 || d == DType::F8E5M2;
}

extern const OpDesc kSdpaFwdOp;
extern const OpDesc kSdpaBwdOp;
extern const OpDesc kMatmulOp;
extern const OpDesc kPointwiseOp;
extern const OpDesc kReductionOp;
extern const OpDesc kRmsNormOp;
extern const OpDesc kLayerNormOp;

} // namespace hipdnn_cpu
