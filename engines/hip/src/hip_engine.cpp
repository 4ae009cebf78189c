// hipdnn HIP engine plugin: SDPA graph parsing into a plan and kernel dispatch, on the plugin SDK's
// C++ layer (hipdnn_plugin_sdk/cpp/), which writes the C entry points, binds device buffers and
// checks each call's overrides into effective shapes.
//
// Engines: 201 runs the portable HIP kernels on any HIP GPU; 202 runs the tensor-core kernels
// (NVIDIA Hopper build). Both serve graphs of a single SDPA node with bf16 or fp16 tensors, fp32
// stats and head dims up to 128 (202: multiples of 8; d_qk may differ from d_v): a forward (q, k, v -> o and optional stats) or a backward (q, k, v,
// o, dO and the forward's stats -> dQ, dK, dV). The two kinds share the tensor reading, shape rules
// and override binding below; what differs (options read, workspace, launch) is one row of kKinds.
// Shapes declared in the graph are maxima; each execute takes this call's batch and sequence lengths
// from the overrides and launches for exactly those (grid sized on the host from the override
// payload: no rebuild, no extra launch, no host synchronisation).
//
// Workspace: a forward plan of engine 202 that can be called with a short query (Sq <= 16, see
// sdpa_decode_plan.h) reports scratch for the split-KV decode path; other forward plans need none.
// A backward plan reports its per-row scratch (dQ partial sums, log-sum-exp, delta) for its maximum
// shape, capped (sdpa_bwd_plan.h); a call larger than that runs in slices.
//
// Plugin API 1.2.0 (dynamic tensors): a tensor marked is_dynamic may declare
// wildcard (-1) dims, and its strides are then an axis order (a permutation of
// 0..3, 0 = innermost), not element strides. Its real dims and strides exist only
// in each call's override, so such a plan is run only through the override entry.
#include "sdpa_kernels.h" // first: defines hipStream_t before the SDK headers
#include "sdpa_bwd_plan.h"
#include "sdpa_call_rules.h"
#include "sdpa_decode_plan.h"

#include <hipdnn_plugin_sdk/cpp/EnginePlugin.hpp>
#include <hipdnn_plugin_sdk/cpp/Sdpa.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace wire = hipdnn::wire;
namespace sdk = hipdnn_plugin_sdk::cpp;
using namespace hipdnn_hip;
using sdk::bad_param;
using sdk::fail;
using sdk::format;

namespace
{

constexpr int64_t kPortableId = 201;
constexpr int64_t kTensorCoreId = 202;
constexpr int64_t kMaxLen = (int64_t(1) << 31) - 1; // kernels index rows and keys in int32
constexpr int64_t kMaxGridYZ = 65535;
constexpr int64_t kMaxStride = int64_t(1) << 40;
constexpr int64_t kWild = -1; // a dynamic tensor's dim given only at execute

// ------------------------------------------------------------- device ----
struct DeviceInfo
{
    bool present = false;
    int ordinal = -1;
    int cc_major = 0;
    int cc_minor = 0;
    int sms = 0; // multiprocessors: the decode path sizes its split grid from them
    int64_t l2_bytes = 0; // L2 size (0: unknown): the prefill kernel's schedule keeps K and V within it
    std::string why_absent;
};

DeviceInfo query_device()
{
    DeviceInfo d;
    int count = 0;
    hipError_t e = hipGetDeviceCount(&count);
    if(e != hipSuccess || count == 0)
    {
        d.why_absent = e != hipSuccess ? std::string("no GPU runtime or device: ") + hipGetErrorString(e)
                                       : std::string("no GPU device");
        (void)hipGetLastError(); // clear the sticky-free error state
        return d;
    }
    if((e = hipGetDevice(&d.ordinal)) != hipSuccess
       || (e = hipDeviceGetAttribute(&d.cc_major, hipDeviceAttributeComputeCapabilityMajor, d.ordinal)) != hipSuccess
       || (e = hipDeviceGetAttribute(&d.cc_minor, hipDeviceAttributeComputeCapabilityMinor, d.ordinal)) != hipSuccess
       || (e = hipDeviceGetAttribute(&d.sms, hipDeviceAttributeMultiprocessorCount, d.ordinal)) != hipSuccess)
    {
        d.why_absent = std::string("cannot query the current device: ") + hipGetErrorString(e);
        (void)hipGetLastError();
        return d;
    }
    int l2 = 0;
    if(hipDeviceGetAttribute(&l2, hipDeviceAttributeL2CacheSize, d.ordinal) == hipSuccess)
        d.l2_bytes = l2;
    else
        (void)hipGetLastError(); // a schedule hint only: its absence is not a reason to decline
    d.present = true;
    return d;
}

// Whether this device runs the tensor-core kernel (built for sm_90a only).
bool tensor_core_device(const DeviceInfo& d)
{
#if defined(HIPDNN_HIP_ON_NVIDIA)
    return d.present && d.cc_major == 9 && d.cc_minor == 0 && tensor_core_tier_built();
#else
    (void)d;
    return false;
#endif
}

// --------------------------------------------------------------- plan ----
// Declared or effective shape of a rank-4 tensor. While planning, a dynamic tensor's d may hold
// kWild and its s are unused (0); at execute every entry is concrete.
struct Dims4
{
    int64_t d[4] = {0, 0, 0, 0};
    int64_t s[4] = {0, 0, 0, 0};
};

// Two dims conflict only when both are known: a wildcard agrees with anything until the call.
bool differ(int64_t a, int64_t b)
{
    return a != b && a != kWild && b != kWild;
}

std::string dims_text(const Dims4& t)
{
    return format("[%lld,%lld,%lld,%lld]", static_cast<long long>(t.d[0]), static_cast<long long>(t.d[1]),
                  static_cast<long long>(t.d[2]), static_cast<long long>(t.d[3]));
}

// The tensors an SDPA node names, by role. The forward uses q .. seq_len_kv; the backward all of them
// (o and stats are its inputs there).
enum Role
{
    kQ = 0,
    kK,
    kV,
    kO,
    kStats,
    kSeqQ,
    kSeqKv,
    kDO,
    kDQ,
    kDK,
    kDV,
    kBias,
    kRoles
};

// What a role's tensor holds, which decides its type and shape rules.
enum class Holds
{
    Rows,  // bf16 / fp16 [B, H, S, D] with a contiguous head dim: q, k, v, o and the gradients
    Stats, // fp32 [B, Hq, Sq, 1]: the natural-log log-sum-exp of each query row
    SeqLen, // int32 [B, 1, 1, 1]: each batch's length (padding mask)
    Bias    // bf16 / fp16 / fp32 [B|1, Hq|1, Sq|1, Skv] with a contiguous key dim: the additive bias
};

struct RoleInfo
{
    const char* name;
    Holds holds;
    Role shaped_like; // Rows: heads and length of q (Hq, Sq) or of k (Hk, Skv)
};

const RoleInfo kRole[kRoles] = {
    {"q", Holds::Rows, kQ},
    {"k", Holds::Rows, kK},
    {"v", Holds::Rows, kK},
    {"o", Holds::Rows, kQ},
    {"stats", Holds::Stats, kQ},
    {"seq_len_q", Holds::SeqLen, kQ},
    {"seq_len_kv", Holds::SeqLen, kQ},
    {"dO", Holds::Rows, kQ},
    {"dQ", Holds::Rows, kQ},
    {"dK", Holds::Rows, kK},
    {"dV", Holds::Rows, kK},
    {"bias", Holds::Bias, kQ},
};

struct Plan;
struct Launch;

// What differs between the node kinds the engine runs; everything else (tensor reading, shape
// rules, override binding) is shared.
struct KindInfo
{
    wire::NodeAttributes type;
    const char* label;        // in describe(): sdpa_fwd / sdpa_bwd
    const char* default_name; // of an unnamed node, in messages
    std::string (*read)(const wire::Node& n, Plan& p); // options and tensor uids; "" or why not
    size_t (*workspace)(const Plan& p, int64_t engine_id, const DeviceInfo& dev);
    void (*launch)(const Launch& l);
    std::string (*check)(const Plan& p); // planning rules of this kind beyond the shared ones (or null)
};

// The layer binds buffers and checks overrides on `declared` (the node's tensors, in role order);
// index[r] is role r's place there, -1 when the node lacks it.
struct Plan : sdk::DeclaredTensors
{
    const KindInfo* kind = nullptr;
    int index[kRoles];
    std::string graph_name;
    std::string node_name;
    int64_t uid[kRoles];
    Dims4 shape4[kRoles]; // declared dims and strides by role
    bool dynamic[kRoles] = {};
    int outer_first[kRoles][4] = {}; // dynamic tensors: the declared axis order, outermost axis first
    bool has_dynamic = false;        // some tensor of the node is dynamic: only the override entry runs it
    ElemType elem = ElemType::Bf16;
    int64_t head_dim = 0;   // of q and k, declared (the kernels are compiled per head dim)
    int64_t head_dim_v = 0; // of v and o, declared (may differ from head_dim)
    bool scale_given = false;
    float scale = 1.0f;
    bool mask_tl = false;
    bool mask_br = false;
    int64_t hi_tl = 0, hi_br = 0; // right bounds of the two alignments (0: causal), clamped to kMaxLen
    bool mask_lo = false;         // a left bound L (sliding window): key j >= i + 1 - L (+ shift)
    bool lo_br = false;           // ... aligned bottom-right
    int64_t left = 0;             // L, clamped to kMaxLen
    int bias_type = 0;            // of the bias tensor (uid[kBias]): 0 bf16, 1 fp16, 2 fp32
    bool alibi = false;           // ALiBi: slope(h) * (j - i) added to the scores
    float softcap = 0.0f;         // score softcapping c (0: off), clamped to [1e-30, 1e30]
    bool padding = false;
    bool override_enabled = false; // the graph's shapes are maxima, any smaller call may come
    int64_t num_tensors = 0;

    Plan()
    {
        std::fill(std::begin(index), std::end(index), -1);
        std::fill(std::begin(uid), std::end(uid), int64_t(-1));
    }

    int role_of(int64_t u) const
    {
        for(int r = 0; r < kRoles; ++r)
            if(uid[r] == u && u >= 0)
                return r;
        return -1;
    }
};

bool io_type(wire::DataType t, ElemType& out)
{
    if(t == wire::DataType::BFLOAT16)
        out = ElemType::Bf16;
    else if(t == wire::DataType::HALF)
        out = ElemType::Half;
    else
        return false;
    return true;
}

// Reads a rank-4 non-virtual tensor. Returns "" or why the engine cannot use it. A dynamic tensor
// keeps its wildcards (kWild) and its axis order; a static one its element strides.
std::string read_rank4(const wire::TensorAttributes* t, const char* role, Dims4& out, bool& dynamic, int outer_first[4])
{
    const long long u = static_cast<long long>(t->uid());
    if(t->virtual_())
        return format("%s (uid %lld) is virtual; the engine runs single-node graphs", role, u);
    if(t->value_type() != wire::TensorValue::NONE)
        return format("%s (uid %lld) is a by-value scalar", role, u);
    if(t->ragged_offset_tensor_uid().has_value())
        return format("%s (uid %lld) is ragged (packed sequences through ragged offsets); this engine does not "
                      "serve ragged tensors",
                      role, u);
    dynamic = t->is_dynamic();
    const auto* dims = t->dims();
    const auto* strides = t->strides();
    if(dims == nullptr || dims->size() != 4)
        return format("%s (uid %lld) must have rank 4", role, u);
    if(strides == nullptr || strides->size() != 4)
        return format("%s (uid %lld): %s and dims differ in length", role, u, dynamic ? "axis order" : "strides");
    for(uint32_t i = 0; i < 4; ++i)
    {
        out.d[i] = dims->Get(i);
        if(dynamic && out.d[i] == kWild)
            continue;
        if(out.d[i] <= 0 || out.d[i] > kMaxLen)
            return format("%s (uid %lld): dim %u is %lld, outside 1..2^31-1%s", role, u, i,
                          static_cast<long long>(out.d[i]),
                          out.d[i] == kWild ? " (a wildcard, but the tensor is not marked dynamic)" : "");
    }
    if(dynamic)
    {
        bool seen[4] = {};
        for(uint32_t i = 0; i < 4; ++i)
        {
            const int64_t o = strides->Get(i);
            if(o < 0 || o > 3 || seen[o])
                return format("%s (uid %lld) is dynamic, so its strides must be an axis order (a permutation of "
                              "0..3, 0 innermost); axis %u has %lld",
                              role, u, i, static_cast<long long>(o));
            seen[o] = true;
            outer_first[3 - o] = static_cast<int>(i);
            out.s[i] = 0; // element strides arrive with every call
        }
        return "";
    }
    for(uint32_t i = 0; i < 4; ++i)
    {
        out.s[i] = strides->Get(i);
        if(out.s[i] <= 0 || out.s[i] > kMaxStride)
            return format("%s (uid %lld): stride %u is %lld", role, u, i, static_cast<long long>(out.s[i]));
    }
    return "";
}

// Whether two rows tensors have one head dim: q, k, dQ, dK have d_qk; v, o, dO, dV have d_v.
bool of_v(int r)
{
    return r == kV || r == kO || r == kDO || r == kDV;
}

bool shares_head_dim(int r1, int r2)
{
    return of_v(r1) == of_v(r2);
}

// Shape rules shared by planning and execution, and by both node kinds: "" or what is wrong. Every
// rows tensor shares q's batch and head dim, and has the heads and length of q (o, dO, dQ) or of
// k (v, dK, dV); stats is [B, Hq, Sq, 1]. Tensors are compared pairwise, so that while planning a
// wildcard (dynamic tensors) satisfies every rule it takes part in without hiding a conflict between
// two others; the rules run again on the concrete shapes of each call, where no wildcard is left.
std::string check_shapes(const Plan& p, const Dims4* e)
{
    const char* nm = p.node_name.c_str();
    int rows[kRoles];
    int n = 0;
    for(int r = 0; r < kRoles; ++r)
        if(p.uid[r] >= 0 && kRole[r].holds == Holds::Rows)
            rows[n++] = r;
    for(int i = 0; i < n; ++i)
        for(int j = i + 1; j < n; ++j)
        {
            const RoleInfo &ri = kRole[rows[i]], &rj = kRole[rows[j]];
            const Dims4 &a = e[rows[i]], &b = e[rows[j]];
            if(differ(a.d[0], b.d[0]))
                return format("node '%s': batch sizes of %s (%lld) and %s (%lld) differ", nm, ri.name,
                              static_cast<long long>(a.d[0]), rj.name, static_cast<long long>(b.d[0]));
            if(shares_head_dim(rows[i], rows[j]) && differ(a.d[3], b.d[3]))
                return format("node '%s': head dims of %s (%lld) and %s (%lld) differ", nm, ri.name,
                              static_cast<long long>(a.d[3]), rj.name, static_cast<long long>(b.d[3]));
            if(ri.shaped_like == rj.shaped_like && (differ(a.d[1], b.d[1]) || differ(a.d[2], b.d[2])))
                return format("node '%s': %s is %s but %s gives %s", nm, rj.name, dims_text(b).c_str(), ri.name,
                              dims_text(a).c_str());
        }
    const Dims4 &q = e[kQ], &k = e[kK];
    if(q.d[1] != kWild && k.d[1] != kWild && q.d[1] % k.d[1] != 0)
        return format("node '%s': query heads %lld not a multiple of kv heads %lld", nm, static_cast<long long>(q.d[1]),
                      static_cast<long long>(k.d[1]));
    for(int i = 0; i < n; ++i)
    {
        const Dims4& x = e[rows[i]];
        if(kRole[rows[i]].shaped_like != kQ)
            continue;
        if(p.uid[kStats] >= 0)
        {
            const Dims4& s = e[kStats];
            if(differ(s.d[0], x.d[0]) || differ(s.d[1], x.d[1]) || differ(s.d[2], x.d[2]) || differ(s.d[3], 1))
                return format("node '%s': stats is %s; it must be [B, Hq, Sq, 1] of %s's %s", nm, dims_text(s).c_str(),
                              kRole[rows[i]].name, dims_text(x).c_str());
        }
        if(p.padding && (differ(e[kSeqQ].d[0], x.d[0]) || differ(e[kSeqKv].d[0], x.d[0])))
            return format("node '%s': seq_len tensors must have q's batch size", nm);
    }
    if(p.uid[kBias] >= 0)
    {
        // [B|1, Hq|1, Sq|1, Skv], broadcast over a batch, head or query dim of 1 (a key padding mask
        // [B, 1, 1, Skv] is one row per batch: every kernel reads row i at i * bias_ss, and bias_ss is
        // 0 then). Its key dim is read contiguously, so it is not broadcast (the CPU engine's is). Sq
        // and Skv are overridden with q's and k's.
        const Dims4& bs = e[kBias];
        if((bs.d[0] != 1 && differ(bs.d[0], q.d[0])) || (bs.d[1] != 1 && differ(bs.d[1], q.d[1]))
           || (bs.d[2] != 1 && differ(bs.d[2], q.d[2])) || differ(bs.d[3], k.d[2]))
            return format("node '%s': bias is %s; it must be [B|1, Hq|1, Sq|1, Skv] = [%lld|1, %lld|1, %lld|1, %lld]; "
                          "override it with q and k",
                          nm, dims_text(bs).c_str(), static_cast<long long>(q.d[0]), static_cast<long long>(q.d[1]),
                          static_cast<long long>(q.d[2]), static_cast<long long>(k.d[2]));
    }
    if(q.d[0] > kMaxGridYZ || q.d[1] > kMaxGridYZ)
        return format("node '%s': batch and heads must each be at most %lld", nm, static_cast<long long>(kMaxGridYZ));
    return "";
}

// Whether the node writes role r's tensor: o and stats for the forward (inputs of the backward),
// the gradients for the backward.
bool written(const Plan& p, int r)
{
    if(p.kind->type == wire::NodeAttributes::SdpaAttributes)
        return r == kO || r == kStats;
    return r == kDQ || r == kDK || r == kDV;
}

// The layout and pointer rules of sdpa_call_rules.h over the node's tensors: "" or what is wrong.
// e: declared (ptr null: planning, dynamic tensors skipped, their strides come per call) or
// effective shapes; ptr: the call's buffers by role.
std::string layout_rules(const Plan& p, const Dims4* e, void* const* ptr)
{
    RuleTensor t[kRoles];
    int n = 0;
    for(int r = 0; r < kRoles; ++r)
    {
        if(p.uid[r] < 0 || (ptr == nullptr && p.dynamic[r]))
            continue;
        RuleTensor& x = t[n++];
        x.name = kRole[r].name;
        std::copy(e[r].d, e[r].d + 4, x.d);
        std::copy(e[r].s, e[r].s + 4, x.s);
        x.addr = ptr != nullptr ? reinterpret_cast<uintptr_t>(ptr[r]) : 0;
        x.elem_bytes = kRole[r].holds == Holds::Rows ? 2 : 4; // bf16 / fp16 rows; fp32 stats, int32 lengths
        if(kRole[r].holds == Holds::Bias)
            x.elem_bytes = p.bias_type == 2 ? 4 : 2;
        x.written = written(p, r);
    }
    return tensor_rules(t, n);
}

struct Unsupported
{
    bool present;
    const char* what;
};

// What both SDPA nodes name alike (the two wire tables share these fields): masks, scale, padding,
// q, k, v, o and the sequence lengths. `own` lists what the node's kind refuses besides.
template <class Attrs, size_t N>
std::string read_common(const Attrs& a, Plan& plan, const Unsupported (&own)[N])
{
    const char* nm = plan.node_name.c_str();
    const Unsupported common[] = {
        {a.scale_tensor_uid().has_value(), "a tensor attention scale"},
        {!sdk::sdpa_softcap_valid(a), "a softcap other than 0 (off) or a finite value > 0"},
        {a.left_bound().has_value() && a.left_bound().value() < 0, "a negative left bound"},
        {a.right_bound().has_value() && a.right_bound().value() < 0, "a negative right bound"},
        {a.padding_mask() != (a.seq_len_q_tensor_uid().has_value() && a.seq_len_kv_tensor_uid().has_value()),
         "a padding mask without both seq_len tensors (or seq_len tensors without padding_mask)"},
    };
    for(const Unsupported& u : common)
        if(u.present)
            return format("node '%s': %s is not supported", nm, u.what);
    for(const Unsupported& u : own)
        if(u.present)
            return format("node '%s': %s is not supported", nm, u.what);
    const auto align = a.diagonal_alignment();
    if(align != wire::DiagonalAlignment::TOP_LEFT && align != wire::DiagonalAlignment::BOTTOM_RIGHT)
        return format("node '%s': unknown diagonal alignment", nm);
    // As on the CPU engine: causal_mask is j <= i (top-left), causal_mask_bottom_right j <= i + shift,
    // right_bound R j <= i + R under diagonal_alignment, left_bound L j >= i - L + 1 likewise; all
    // present bounds intersect. Bounds past any length mean the same as kMaxLen.
    const bool br = align == wire::DiagonalAlignment::BOTTOM_RIGHT;
    plan.mask_tl = a.causal_mask();
    plan.mask_br = a.causal_mask_bottom_right();
    if(a.right_bound().has_value())
    {
        const int64_t r = std::min<int64_t>(a.right_bound().value(), kMaxLen);
        bool& has = br ? plan.mask_br : plan.mask_tl;
        int64_t& hi = br ? plan.hi_br : plan.hi_tl;
        hi = has ? std::min(hi, r) : r;
        has = true;
    }
    if(a.left_bound().has_value())
    {
        plan.mask_lo = true;
        plan.lo_br = br;
        plan.left = std::min<int64_t>(a.left_bound().value(), kMaxLen);
    }
    if(a.attn_mask_tensor_uid().has_value())
        plan.uid[kBias] = a.attn_mask_tensor_uid().value();
    plan.padding = a.padding_mask();
    plan.alibi = a.alibi_mask();
    // Caps past 1e30 change no score a float can hold and caps below 1e-30 leave every score 0 to
    // within 1e-30; clamped, the kernels' c log2(e) and its inverse stay normal floats.
    if(const float c = sdk::sdpa_softcap(a); c > 0.0f)
        plan.softcap = std::min(std::max(c, 1e-30f), 1e30f);
    plan.scale_given = a.attn_scale_value().has_value();
    if(plan.scale_given)
        plan.scale = a.attn_scale_value().value();
    plan.uid[kQ] = a.q_tensor_uid();
    plan.uid[kK] = a.k_tensor_uid();
    plan.uid[kV] = a.v_tensor_uid();
    plan.uid[kO] = a.o_tensor_uid();
    if(plan.padding)
    {
        plan.uid[kSeqQ] = a.seq_len_q_tensor_uid().value();
        plan.uid[kSeqKv] = a.seq_len_kv_tensor_uid().value();
    }
    return "";
}

std::string read_forward(const wire::Node& n, Plan& plan)
{
    const auto* a = n.attributes_as_SdpaAttributes();
    if(a == nullptr)
        return "the SDPA node has no attributes";
    const char* const extension = sdk::sdpa_extension_in_use(*a, /*serves_paged_kv=*/false, /*serves_softcap=*/true);
    const Unsupported own[] = {
        {extension != nullptr, extension},
        {a->mma_core_mode() != wire::DataType::UNSET && a->mma_core_mode() != wire::DataType::BFLOAT16
             && a->mma_core_mode() != wire::DataType::HALF,
         "an mma core mode other than the input type"},
        {a->generate_stats().has_value() && a->generate_stats().value() && !a->stats_tensor_uid().has_value(),
         "generate_stats without a stats tensor"},
    };
    std::string why = read_common(*a, plan, own);
    if(why.empty() && a->stats_tensor_uid().has_value())
        plan.uid[kStats] = a->stats_tensor_uid().value();
    return why;
}

std::string read_backward(const wire::Node& n, Plan& plan)
{
    const auto* a = n.attributes_as_SdpaBackwardAttributes();
    if(a == nullptr)
        return "the SDPA backward node has no attributes";
    const Unsupported own[] = {
        {a->seed_tensor_uid().has_value() || a->offset_tensor_uid().has_value()
             || (a->dropout_probability().has_value() && a->dropout_probability().value() != 0.0f),
         "dropout"},
        {a->dbias_tensor_uid().has_value(), "a bias gradient (dbias)"},
        {sdk::sdpa_backward_is_fp8(*a), "fp8 scaling"},
        {a->deterministic(), "deterministic mode (dQ is summed by atomic reductions, in no fixed order)"},
    };
    std::string why = read_common(*a, plan, own);
    if(!why.empty())
        return why;
    plan.uid[kDO] = a->do_tensor_uid();
    plan.uid[kStats] = a->stats_tensor_uid();
    plan.uid[kDQ] = a->dq_tensor_uid();
    plan.uid[kDK] = a->dk_tensor_uid();
    plan.uid[kDV] = a->dv_tensor_uid();
    return "";
}

size_t forward_workspace(const Plan& p, int64_t engine_id, const DeviceInfo& dev);
size_t backward_workspace(const Plan& p, int64_t engine_id, const DeviceInfo& dev);
std::string check_backward_fits(const Plan& p);
void launch_forward(const Launch& l);
void launch_backward(const Launch& l);

const KindInfo kKinds[] = {
    {wire::NodeAttributes::SdpaAttributes, "sdpa_fwd", "sdpa", read_forward, forward_workspace, launch_forward,
     nullptr},
    {wire::NodeAttributes::SdpaBackwardAttributes, "sdpa_bwd", "sdpa_backward", read_backward, backward_workspace,
     launch_backward, check_backward_fits},
};

// The head dim the plan's kernels are compiled for at its declared head dims (a call may shrink
// them, and then runs narrower kernels in less workspace).
int kernel_width(const Plan& p)
{
    return kernel_head_dim(static_cast<int>(p.head_dim), static_cast<int>(p.head_dim_v));
}

// The head dims an engine serves (sdpa_call_rules.h): "" or the reason, naming the node.
std::string plan_head_dim_rules(const Plan& p, HeadDims served)
{
    for(const bool v : {false, true})
        if(std::string why = head_dim_rule(v ? p.head_dim_v : p.head_dim, served, v ? "v head dim" : "head dim");
           !why.empty())
            return format("node '%s': %s", p.node_name.c_str(), why.c_str());
    return "";
}

// The backward's workspace for its maximum shape (wildcards: the cap), whichever engine runs it.
size_t backward_workspace(const Plan& p, int64_t, const DeviceInfo&)
{
    const Dims4 &q = p.shape4[kQ], &k = p.shape4[kK];
    return bwd_plan_workspace(q.d[0], q.d[1], k.d[1], q.d[2], kernel_width(p));
}

// A backward plan that only ever runs at its declared shape (no overrides, no wildcards) must fit
// one (batch, kv head) pair in the workspace it reports; else every call would fail.
std::string check_backward_fits(const Plan& p)
{
    if(p.override_enabled || p.has_dynamic)
        return "";
    const Dims4 &q = p.shape4[kQ], &k = p.shape4[kK];
    const size_t ws = backward_workspace(p, 0, DeviceInfo{});
    if(bwd_pairs_per_slice(ws, q.d[1], k.d[1], q.d[2], kernel_width(p)) >= 1)
        return "";
    return format("node '%s': one (batch, kv head) pair needs %zu bytes of backward workspace (%lld query heads per kv "
                  "head x %lld rows), more than the engine's %zu-byte cap",
                  p.node_name.c_str(), bwd_pair_bytes(q.d[1], k.d[1], q.d[2], kernel_width(p)),
                  static_cast<long long>(q.d[1] / k.d[1]), static_cast<long long>(q.d[2]), kBwdWorkspaceCap);
}

// Builds the plan of a verified graph: "" when the engine computes it exactly,
// else why it is not applicable.
std::string build_plan(const wire::Graph& g, Plan& plan)
{
    if(g.name())
        plan.graph_name = g.name()->str();
    plan.override_enabled = g.is_override_shape_enabled();
    const auto* tensors = g.tensors();
    const auto* nodes = g.nodes();
    if(nodes == nullptr || nodes->size() != 1)
        return "the engine runs graphs of exactly one SDPA node (forward or backward)";
    if(tensors == nullptr || tensors->size() == 0)
        return "the graph has no tensors";
    const wire::Node* n = nodes->Get(0);
    for(const KindInfo& k : kKinds)
        if(n != nullptr && n->attributes_type() == k.type)
            plan.kind = &k;
    if(plan.kind == nullptr)
        return "the node is not an SDPA forward or backward";
    plan.node_name = n->name() ? n->name()->str() : plan.kind->default_name;
    const char* nm = plan.node_name.c_str();
    const auto ct = n->compute_data_type();
    if(ct != wire::DataType::FLOAT && ct != wire::DataType::UNSET)
        return format("node '%s': compute type %s; only FLOAT accumulation is implemented", nm,
                      wire::EnumNameDataType(ct));
    if(g.compute_data_type() != wire::DataType::FLOAT && g.compute_data_type() != wire::DataType::UNSET)
        return "graph compute type other than FLOAT";
    if(std::string why = plan.kind->read(*n, plan); !why.empty())
        return why;
    // Outputs distinct from each other and from the inputs: no role may share a tensor.
    for(int r = 0; r < kRoles; ++r)
        for(int r2 = r + 1; r2 < kRoles; ++r2)
            if(plan.uid[r] >= 0 && plan.uid[r] == plan.uid[r2])
                return format("node '%s': %s and %s are the same tensor (uid %lld)", nm, kRole[r].name,
                              kRole[r2].name, static_cast<long long>(plan.uid[r]));

    bool found[kRoles] = {};
    int io_role = -1; // the first rows tensor read: the others must share its data type
    plan.num_tensors = tensors->size();
    for(uint32_t i = 0; i < tensors->size(); ++i)
    {
        const wire::TensorAttributes* t = tensors->Get(i);
        if(t == nullptr)
            return "the graph has a null tensor entry";
        const int r = plan.role_of(t->uid());
        if(r < 0)
            return format("tensor uid %lld is not an input or output of the SDPA node",
                          static_cast<long long>(t->uid()));
        if(found[r])
            return format("tensor uid %lld appears twice", static_cast<long long>(t->uid()));
        found[r] = true;
        const char* role = kRole[r].name;
        const long long u = static_cast<long long>(t->uid());
        std::string why = read_rank4(t, role, plan.shape4[r], plan.dynamic[r], plan.outer_first[r]);
        if(!why.empty())
            return why;
        plan.has_dynamic = plan.has_dynamic || plan.dynamic[r];
        wire::DataType dt = t->data_type();
        switch(kRole[r].holds)
        {
        case Holds::Rows:
        {
            if(dt == wire::DataType::UNSET)
                dt = g.io_data_type();
            ElemType et;
            if(!io_type(dt, et))
                return format("%s (uid %lld) has data type %s; the engine takes BFLOAT16 or HALF", role, u,
                              wire::EnumNameDataType(dt));
            if(io_role >= 0 && et != plan.elem)
                return format("node '%s': %s (uid %lld) is %s but %s is %s; the node's tensors other than stats and "
                              "seq_len must share one data type",
                              nm, role, u, wire::EnumNameDataType(dt), kRole[io_role].name,
                              plan.elem == ElemType::Bf16 ? "BFLOAT16" : "HALF");
            if(io_role < 0)
                io_role = r;
            plan.elem = et;
            // The kernels read and write head-dim rows contiguously. A dynamic tensor promises that
            // by declaring the head dim innermost; each call's override must then give it stride 1.
            if(plan.dynamic[r] ? plan.outer_first[r][3] != 3 : plan.shape4[r].s[3] != 1)
                return format("%s (uid %lld): the head dimension must %s", role, u,
                              plan.dynamic[r] ? "be the innermost axis of the declared axis order" : "have stride 1");
            break;
        }
        case Holds::Stats:
            if(dt != wire::DataType::FLOAT && dt != wire::DataType::UNSET)
                return format("stats (uid %lld) must be FLOAT", u);
            break;
        case Holds::Bias:
        {
            // Any float type, as on the CPU engine (UNSET: the graph's io type).
            if(dt == wire::DataType::UNSET)
                dt = g.io_data_type();
            if(dt == wire::DataType::BFLOAT16)
                plan.bias_type = 0;
            else if(dt == wire::DataType::HALF)
                plan.bias_type = 1;
            else if(dt == wire::DataType::FLOAT)
                plan.bias_type = 2;
            else
                return format("node '%s': bias (uid %lld) has data type %s; the engine takes FLOAT, HALF or BFLOAT16 "
                              "there",
                              nm, u, wire::EnumNameDataType(dt));
            // The kernels read each row of keys contiguously.
            if(plan.dynamic[r] ? plan.outer_first[r][3] != 3
                               : (plan.shape4[r].s[3] != 1 && plan.shape4[r].d[3] != 1))
                return format("node '%s': bias (uid %lld): a key-dim stride other than 1 is not supported (the "
                              "kernels read its rows contiguously%s)",
                              nm, u, plan.dynamic[r] ? "; declare the key dim innermost" : "");
            break;
        }
        case Holds::SeqLen:
        {
            if(dt != wire::DataType::INT32)
                return format("%s (uid %lld) must be INT32", role, u);
            const Dims4& s = plan.shape4[r];
            if(s.d[1] != 1 || s.d[2] != 1 || s.d[3] != 1)
                return format("%s (uid %lld) must be [B, 1, 1, 1]", role, u);
            break;
        }
        }
    }
    for(int r = 0; r < kRoles; ++r)
        if(plan.uid[r] >= 0 && !found[r])
            return format("node '%s' refers to %s uid %lld, which the graph lacks", nm, kRole[r].name,
                          static_cast<long long>(plan.uid[r]));

    // The head dims select compiled kernels: each must be declared by some rows tensor of its group
    // (the others may leave it to the call, which must then agree). A group whose head dim is a
    // wildcard everywhere takes the other's (d_qk == d_v, the common case); per call each is checked
    // again (run). Which are served depends on the engine (plan_head_dim_rules).
    int64_t dims[2] = {kWild, kWild}; // q / k, v / o
    for(int r = 0; r < kRoles; ++r)
        if(plan.uid[r] >= 0 && kRole[r].holds == Holds::Rows && dims[of_v(r)] == kWild)
            dims[of_v(r)] = plan.shape4[r].d[3];
    if(dims[0] == kWild && dims[1] == kWild)
        return format("node '%s': the head dim is a wildcard in every tensor that has one; the kernels are built "
                      "per head dim, so it must be declared",
                      nm);
    plan.head_dim = dims[0] != kWild ? dims[0] : dims[1];
    plan.head_dim_v = dims[1] != kWild ? dims[1] : dims[0];
    const int64_t d = plan.head_dim;
    if(std::string why = check_shapes(plan, plan.shape4); !why.empty())
        return why;
    // The declared layouts of the tensors the node writes (static ones: a dynamic tensor's strides
    // come with each call, and are checked there).
    if(std::string why = layout_rules(plan, plan.shape4, nullptr); !why.empty())
        return format("node '%s': %s", nm, why.c_str());
    if(!plan.scale_given)
        plan.scale = 1.0f / std::sqrt(static_cast<float>(d));
    if(!std::isfinite(plan.scale))
        return format("node '%s': attn_scale is not finite", nm);
    return plan.kind->check != nullptr ? plan.kind->check(plan) : "";
}

std::string describe(const Plan& p, int64_t engine)
{
    const Dims4& q = p.shape4[kQ];
    const Dims4& k = p.shape4[kK];
    const bool fwd_stats = p.kind->type == wire::NodeAttributes::SdpaAttributes && p.uid[kStats] >= 0;
    std::string band;
    if(p.mask_tl && p.hi_tl != 0)
        band += format(", band j<=i+%lld", static_cast<long long>(p.hi_tl));
    if(p.mask_br && p.hi_br != 0)
        band += format(", band j<=i+%lld bottom-right", static_cast<long long>(p.hi_br));
    if(p.mask_lo)
        band += format(", window j>=i-%lld+1%s", static_cast<long long>(p.left), p.lo_br ? " bottom-right" : "");
    if(p.head_dim_v != p.head_dim)
        band += format(", v head dim %lld", static_cast<long long>(p.head_dim_v));
    if(p.uid[kBias] >= 0)
        band += p.bias_type == 2 ? ", bias fp32" : p.bias_type == 1 ? ", bias fp16" : ", bias bf16";
    if(p.alibi)
        band += ", alibi";
    if(p.softcap > 0.0f)
        band += format(", softcap %g", static_cast<double>(p.softcap));
    return format("engine %lld, graph '%s': %s %s q[%lld,%lld,%lld,%lld] kv heads %lld, kv len %lld%s%s%s%s%s%s",
                  static_cast<long long>(engine), p.graph_name.c_str(), p.kind->label,
                  p.elem == ElemType::Bf16 ? "bf16" : "fp16", static_cast<long long>(q.d[0]),
                  static_cast<long long>(q.d[1]), static_cast<long long>(q.d[2]), static_cast<long long>(q.d[3]),
                  static_cast<long long>(k.d[1]), static_cast<long long>(k.d[2]), p.mask_tl ? ", causal top-left" : "",
                  p.mask_br ? ", causal bottom-right" : "", band.c_str(), p.padding ? ", padding mask" : "",
                  fwd_stats ? ", stats" : "", p.has_dynamic ? ", dynamic (-1 = given per call)" : "");
}

// Scratch the forward needs: the decode path's split partials (engine 202 on a device that runs it,
// and only when a call can have a short query: declared Sq <= 16, a wildcard, or overrides).
size_t forward_workspace(const Plan& p, int64_t engine_id, const DeviceInfo& dev)
{
    if(engine_id != kTensorCoreId || !decode_kernel_built() || dev.sms <= 0)
        return 0;
    const int64_t sq = p.shape4[kQ].d[2];
    if(!(p.override_enabled || p.has_dynamic || (sq != kWild && sq <= kDecodeMaxSq)))
        return 0;
    DecodeShape s;
    s.batch = p.shape4[kQ].d[0];
    s.hq = p.shape4[kQ].d[1];
    s.hk = p.shape4[kK].d[1];
    s.sq = sq;
    s.skv = p.shape4[kK].d[2];
    s.d = kernel_width(p);
    s.mask_top_left = p.mask_tl && p.hi_tl == 0; // with R > 0 a short query sees sq + R keys
    return decode_plan_workspace(s, dev.sms);
}

// The decode path (split-KV, grouped heads) takes calls with a short query; HIPDNN_HIP_DECODE=0
// turns it off (read per launch, so a benchmark can compare both paths in one process).
bool decode_enabled()
{
    const char* e = std::getenv("HIPDNN_HIP_DECODE");
    return e == nullptr || std::strcmp(e, "0") != 0;
}

// One call after the shape rules: the forward's arguments (which the backward extends) and what a
// kind's launcher needs besides.
struct Launch
{
    const DeviceInfo& dev;
    hipStream_t stream;
    const Plan& plan;
    const sdk::Call& call;
    const SdpaArgs& a;
    float scale;      // the attention scale of this call (a.scale_log2 = scale * log2(e))
    void* const* ptr; // by role
    const Dims4* eff; // by role
};

void strides_of(const Dims4& t, int64_t& sb, int64_t& sh, int64_t& ss, int64_t& sd)
{
    sb = t.s[0];
    sh = t.s[1];
    ss = t.s[2];
    sd = t.s[3];
}

// Kernel setup runs once per process and slot (forward: per engine; backward: per tier).
hipError_t prepare_once(std::once_flag& once, hipError_t& status, hipError_t (*prepare)(Tier), Tier tier,
                        hipError_t (*also)() = nullptr)
{
    std::call_once(once,
                   [&] {
                       status = prepare(tier);
                       if(also != nullptr && status == hipSuccess)
                           status = also();
                   });
    return status;
}

std::once_flag g_prepare_once[2];
hipError_t g_prepare_status[2] = {hipSuccess, hipSuccess};
std::once_flag g_bwd_prepare_once[2];
hipError_t g_bwd_prepare_status[2] = {hipSuccess, hipSuccess};

[[noreturn]] void launch_failed(const Plan& plan, const char* what, hipError_t e)
{
    fail(HIPDNN_PLUGIN_STATUS_INTERNAL_ERROR,
         format("node '%s': %s failed: %s", plan.node_name.c_str(), what, hipGetErrorString(e)));
}

void launch_forward(const Launch& l)
{
    const bool tc = l.call.engine_id == kTensorCoreId;
    const int slot = tc ? 1 : 0;
    hipError_t e = prepare_once(g_prepare_once[slot], g_prepare_status[slot], prepare_kernels,
                                tc ? Tier::TensorCore : Tier::Portable, tc ? prepare_decode_kernels : nullptr);
    if(e != hipSuccess)
        launch_failed(l.plan, "kernel setup", e);
    const SdpaArgs& a = l.a;
    const ElemType t = l.plan.elem;
    if(tc && tensor_core_accepts(a, t) && a.sq <= kDecodeMaxSq && decode_kernel_built() && decode_enabled())
        e = launch_sdpa_decode(a, t, l.call.workspace, l.call.workspace_size, l.dev.sms, l.stream);
    else if(tc && tensor_core_accepts(a, t))
        e = launch_sdpa_tensor_core(a, t, DeviceShape{l.dev.sms, l.dev.l2_bytes}, l.stream);
    else
        e = launch_sdpa_portable(a, t, l.stream); // unaligned or strided head dim: portable path
    if(e != hipSuccess)
        launch_failed(l.plan, "kernel launch", e);
}

void launch_backward(const Launch& l)
{
    const Plan& plan = l.plan;
    SdpaBwdArgs b;
    b.f = l.a; // o and stats are inputs here
    b.scale = l.scale;
    b.dout = l.ptr[kDO];
    b.dq = l.ptr[kDQ];
    b.dk = l.ptr[kDK];
    b.dv = l.ptr[kDV];
    strides_of(l.eff[kDO], b.do_sb, b.do_sh, b.do_ss, b.do_sd);
    strides_of(l.eff[kDQ], b.dq_sb, b.dq_sh, b.dq_ss, b.dq_sd);
    strides_of(l.eff[kDK], b.dk_sb, b.dk_sh, b.dk_ss, b.dk_sd);
    strides_of(l.eff[kDV], b.dv_sb, b.dv_sh, b.dv_ss, b.dv_sd);
    const SdpaArgs& a = b.f;
    // The plan's workspace is sized for its maximum shape but capped: a call may need more than one
    // slice (the launcher runs them in turn), and must at least fit one (batch, kv head) pair.
    const int w = kernel_head_dim(a.d, a.dv);
    if(bwd_pairs_per_slice(l.call.workspace_size, a.hq, a.hk, a.sq, w) < 1)
        bad_param("node '%s': this call needs %zu bytes of backward workspace per (batch, kv head) pair (%d query "
                  "heads per kv head x %d query rows), more than the plan's %zu; use fewer query heads per kv head or "
                  "shorter queries per call",
                  plan.node_name.c_str(), bwd_pair_bytes(a.hq, a.hk, a.sq, w), a.hq / a.hk, a.sq,
                  l.call.workspace_size);
    const bool tc = l.call.engine_id == kTensorCoreId && sdpa_bwd_tensor_core_accepts(b, plan.elem);
    const Tier tier = tc ? Tier::TensorCore : Tier::Portable;
    const int slot = tc ? 1 : 0;
    hipError_t e = prepare_once(g_bwd_prepare_once[slot], g_bwd_prepare_status[slot], prepare_bwd_kernels, tier);
    if(e != hipSuccess)
        launch_failed(plan, "backward kernel setup", e);
    e = launch_sdpa_bwd(b, plan.elem, tier, l.call.workspace, l.call.workspace_size, l.stream);
    if(e != hipSuccess)
        launch_failed(plan, "backward kernel launch", e);
}

// One call, after the layer bound its buffers and checked its overrides (call.ptrs / call.shapes,
// indexed like plan.declared): the engine's own shape rules, then the kind's launch.
void run(const DeviceInfo& dev, hipStream_t stream, const Plan& plan, const sdk::Call& call)
{
    void* ptr[kRoles] = {};
    Dims4 eff[kRoles];
    for(int r = 0; r < kRoles; ++r)
    {
        eff[r] = plan.shape4[r];
        const int k = plan.index[r];
        if(k < 0)
            continue;
        ptr[r] = call.ptrs[k];
        for(int d = 0; d < 4; ++d)
        {
            eff[r].d[d] = call.shapes[k].dims[d];
            eff[r].s[d] = call.shapes[k].strides[d];
        }
        // The head dim was declared innermost so that it is contiguous: the kernels need stride 1.
        if(plan.dynamic[r] && kRole[r].holds == Holds::Rows && eff[r].s[3] != 1)
            bad_param("override of dynamic %s (uid %lld): head-dim stride %lld; the engine needs 1", kRole[r].name,
                      static_cast<long long>(plan.uid[r]), static_cast<long long>(eff[r].s[3]));
    }
    if(std::string why = check_shapes(plan, eff); !why.empty())
        fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, why);
    // What the kernels assume of every call (sdpa_call_rules.h), on this call's shapes and pointers:
    // an override may shrink the head dim below the plan's, or give strides the declared layout did
    // not have. Refused before anything is launched.
    for(const bool v : {false, true})
        if(std::string why = head_dim_rule(eff[v ? kV : kQ].d[3], HeadDims::Any, v ? "v head dim" : "head dim");
           !why.empty())
            bad_param("engine %lld, node '%s': this call's %s; the plan's is %lld",
                      static_cast<long long>(call.engine_id), plan.node_name.c_str(), why.c_str(),
                      static_cast<long long>(v ? plan.head_dim_v : plan.head_dim));
    if(std::string why = layout_rules(plan, eff, ptr); !why.empty())
        bad_param("engine %lld, node '%s': %s", static_cast<long long>(call.engine_id), plan.node_name.c_str(),
                  why.c_str());
    // The bias's rows of keys are read contiguously: an override may give another key-dim stride.
    if(plan.uid[kBias] >= 0 && eff[kBias].s[3] != 1 && eff[kBias].d[3] != 1)
        bad_param("engine %lld, node '%s': this call's bias has key-dim stride %lld; a stride other than 1 is not "
                  "supported",
                  static_cast<long long>(call.engine_id), plan.node_name.c_str(),
                  static_cast<long long>(eff[kBias].s[3]));

    SdpaArgs a;
    a.q = ptr[kQ];
    a.k = ptr[kK];
    a.v = ptr[kV];
    a.o = ptr[kO];
    a.stats = static_cast<float*>(ptr[kStats]);
    strides_of(eff[kQ], a.q_sb, a.q_sh, a.q_ss, a.q_sd);
    strides_of(eff[kK], a.k_sb, a.k_sh, a.k_ss, a.k_sd);
    strides_of(eff[kV], a.v_sb, a.v_sh, a.v_ss, a.v_sd);
    strides_of(eff[kO], a.o_sb, a.o_sh, a.o_ss, a.o_sd);
    if(a.stats != nullptr)
    {
        a.st_sb = eff[kStats].s[0];
        a.st_sh = eff[kStats].s[1];
        a.st_ss = eff[kStats].s[2];
    }
    if(plan.padding)
    {
        a.padding = 1;
        a.seq_len_q = static_cast<const int32_t*>(ptr[kSeqQ]);
        a.seq_len_kv = static_cast<const int32_t*>(ptr[kSeqKv]);
        a.slq_sb = eff[kSeqQ].s[0];
        a.slkv_sb = eff[kSeqKv].s[0];
    }
    a.batch = static_cast<int32_t>(eff[kQ].d[0]);
    a.hq = static_cast<int32_t>(eff[kQ].d[1]);
    a.hk = static_cast<int32_t>(eff[kK].d[1]);
    a.sq = static_cast<int32_t>(eff[kQ].d[2]);
    a.skv = static_cast<int32_t>(eff[kK].d[2]);
    a.d = static_cast<int32_t>(eff[kQ].d[3]);
    a.dv = static_cast<int32_t>(eff[kV].d[3]);
    // The default scale is 1/sqrt(D) of this call's head dim, as on the CPU engine (a call may have a
    // smaller head dim than the plan's).
    const float scale = plan.scale_given ? plan.scale : 1.0f / std::sqrt(static_cast<float>(a.d));
    a.scale_log2 = scale * 1.4426950408889634f;
    a.mask_tl = plan.mask_tl ? 1 : 0;
    a.mask_br = plan.mask_br ? 1 : 0;
    // Right bounds past the call's lengths limit nothing (top-left: j <= i + R with R >= skv; bottom-
    // right: j <= i + R + skv - sq with R >= sq): clamped, so the kernels' int32 diagonals stay in range.
    a.hi_tl = static_cast<int32_t>(std::min<int64_t>(plan.hi_tl, a.skv));
    a.hi_br = static_cast<int32_t>(std::min<int64_t>(plan.hi_br, a.sq));
    if(plan.mask_lo)
    {
        a.mask_lo = 1;
        a.lo_br = plan.lo_br ? 1 : 0;
        a.lo = static_cast<int32_t>(1 - plan.left); // >= 2 - 2^31
    }
    if(plan.uid[kBias] >= 0)
    {
        const Dims4& bs = eff[kBias];
        a.bias = ptr[kBias];
        a.bias_type = plan.bias_type;
        a.bias_sb = bs.d[0] == 1 ? 0 : bs.s[0];
        a.bias_sh = bs.d[1] == 1 ? 0 : bs.s[1];
        a.bias_ss = bs.d[2] == 1 ? 0 : bs.s[2];
        const uintptr_t esz = plan.bias_type == 2 ? 4 : 2;
        a.bias_pairs = reinterpret_cast<uintptr_t>(a.bias) % (2 * esz) == 0 && a.bias_sb % 2 == 0
                       && a.bias_sh % 2 == 0 && (a.bias_ss % 2 == 0 || a.sq == 1) && a.skv % 2 == 0;
    }
    a.inv_scale = 1.0f / scale;
    a.softcap = plan.softcap;
    a.alibi = plan.alibi ? 1 : 0;
    plan.kind->launch(Launch{dev, stream, plan, call, a, scale, ptr, eff});
}

// ============================================================== the plugin ====
// One instance per hipdnnEnginePluginCreate; the SDK layer defines the C entry points around it.
class HipEngine
{
public:
    static constexpr const char* kName = "hipdnn_hip_engine";
    static constexpr const char* kVersion = HIPDNN_VERSION;
    // The contract implemented: dynamic tensors (1.2.0), ragged / paged graphs refused with the reason
    // (1.3.0), score softcapping (1.4.0).
    static constexpr const char* kApiVersion = "1.4.0";
    static constexpr bool kOverrideEntry = true;
    static constexpr int64_t kEngineIds[] = {kTensorCoreId, kPortableId}; // best first
    using Plan = ::Plan;

    HipEngine() : device_(query_device())
    {
        if(!device_.present)
            sdk::log(HIPDNN_SEV_INFO, "no usable GPU, no engine will apply: %s", device_.why_absent.c_str());
    }

    void set_stream(hipStream_t s) { stream_ = s; }

    std::string plan(int64_t id, const sdk::GraphView& g, Plan& out) const
    {
        std::string why = build_plan(g.graph, out);
        if(why.empty()) // the graph rules run before the device is looked for: declined for them anywhere
            why = plan_head_dim_rules(out, id == kTensorCoreId ? HeadDims::Multiple8 : HeadDims::Any);
        if(!why.empty())
            return why;
        if(!device_.present)
            return device_.why_absent;
        if(id == kTensorCoreId && !tensor_core_device(device_))
            return "the device has no tensor-core kernel for it";
        for(int r = 0; r < kRoles; ++r)
        {
            if(out.uid[r] < 0)
                continue;
            sdk::DeclaredTensor d;
            d.uid = out.uid[r];
            d.label = format("%s (uid %lld)", kRole[r].name, static_cast<long long>(out.uid[r]));
            d.dynamic = out.dynamic[r];
            d.shape.rank = 4;
            for(int i = 0; i < 4; ++i)
            {
                d.shape.dims[i] = out.shape4[r].d[i];
                d.shape.strides[i] = out.shape4[r].s[i];
                d.outer_first[i] = out.outer_first[r][i];
            }
            d.wildcard_max = kMaxLen; // the kernels index rows and keys in int32
            d.max_stride = kMaxStride;
            out.index[r] = static_cast<int>(out.declared.size());
            out.declared.push_back(std::move(d));
        }
        out.seal();
        return "";
    }

    size_t workspace_size(int64_t id, const Plan& p) const { return p.kind->workspace(p, id, device_); }

    // Tensors and workspace are device memory: the host refuses host arrays before a kernel sees them.
    std::vector<int32_t> behavior_notes(int64_t) const { return {HIPDNN_BEHAVIOR_NOTE_DEVICE_MEMORY_EXT}; }

    std::string describe(int64_t id, const Plan& p) const { return ::describe(p, id); }

    void execute(const Plan& p, sdk::Call& call) const { run(device_, stream_, p, call); }

private:
    DeviceInfo device_;
    hipStream_t stream_ = nullptr;
};

} // namespace

HIPDNN_CPP_PLUGIN(HipEngine)
