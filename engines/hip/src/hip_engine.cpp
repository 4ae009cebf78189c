// hipdnn HIP engine plugin: SDPA graph parsing into a plan and kernel dispatch, on the plugin SDK's
// C++ layer (hipdnn_plugin_sdk/cpp/), which writes the C entry points, binds device buffers and
// checks each call's overrides into effective shapes.
//
// Engines: 201 runs the portable HIP flash kernel on any HIP GPU; 202 runs the
// tensor-core kernel (NVIDIA Hopper build). Both serve one graph: a single
// SDPA forward node with bf16 or fp16 q/k/v/o, fp32 stats, head dim 64 or 128.
// Shapes declared in the graph are maxima; each execute takes this call's
// batch and sequence lengths from the overrides and launches for exactly those
// (grid sized on the host from the override payload: no rebuild, no extra
// launch, no host synchronisation). Workspace: engine 202 plans that can be called with a short
// query (Sq <= 16, see sdpa_decode_plan.h) report scratch for the split-KV decode path, sized for
// their maximum shape; everything else needs none.
//
// Plugin API 1.2.0 (dynamic tensors): a tensor marked is_dynamic may declare
// wildcard (-1) dims, and its strides are then an axis order (a permutation of
// 0..3, 0 = innermost), not element strides. Its real dims and strides exist only
// in each call's override, so such a plan is run only through the override entry.
#include "sdpa_kernels.h" // first: defines hipStream_t before the SDK headers
#include "sdpa_decode_plan.h"

#include <hipdnn_plugin_sdk/cpp/EnginePlugin.hpp>
#include <hipdnn_plugin_sdk/cpp/Sdpa.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

enum Role
{
    kQ = 0,
    kK,
    kV,
    kO,
    kStats,
    kSeqQ,
    kSeqKv,
    kRoles
};

const char* const kRoleName[kRoles] = {"q", "k", "v", "o", "stats", "seq_len_q", "seq_len_kv"};

// The layer binds buffers and checks overrides on `declared` (the node's tensors, in role order);
// index[r] is role r's place there, -1 when the node lacks it.
struct Plan : sdk::DeclaredTensors
{
    int index[kRoles] = {-1, -1, -1, -1, -1, -1, -1};
    std::string graph_name;
    std::string node_name;
    int64_t uid[kRoles] = {-1, -1, -1, -1, -1, -1, -1};
    Dims4 shape4[kRoles]; // declared dims and strides by role
    bool dynamic[kRoles] = {};
    int outer_first[kRoles][4] = {}; // dynamic tensors: the declared axis order, outermost axis first
    bool has_dynamic = false;        // some tensor of the node is dynamic: only the override entry runs it
    ElemType elem = ElemType::Bf16;
    float scale = 1.0f;
    bool mask_tl = false;
    bool mask_br = false;
    bool padding = false;
    bool override_enabled = false; // the graph's shapes are maxima, any smaller call may come
    int64_t num_tensors = 0;

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

// Shape rules shared by planning and execution. Returns false with msg set. While planning, a
// wildcard (dynamic tensors) satisfies every rule it takes part in; the rule is applied again to the
// concrete shapes of each call, where no wildcard is left.
bool check_shapes(const Plan& p, const Dims4* e, char* msg, size_t cap)
{
    const Dims4 &q = e[kQ], &k = e[kK], &v = e[kV], &o = e[kO];
    const char* nm = p.node_name.c_str();
    if(differ(k.d[0], q.d[0]) || differ(v.d[0], q.d[0]) || differ(o.d[0], q.d[0]) || differ(k.d[0], v.d[0])
       || differ(o.d[0], k.d[0]) || differ(o.d[0], v.d[0]))
        return std::snprintf(msg, cap, "node '%s': batch sizes of q, k, v, o differ", nm), false;
    const int64_t hd[4] = {q.d[3], k.d[3], v.d[3], o.d[3]};
    for(int i = 0; i < 4; ++i)
        for(int j = i + 1; j < 4; ++j)
            if(differ(hd[i], hd[j]))
                return std::snprintf(msg, cap, "node '%s': head dims of q, k, v, o differ", nm), false;
    if(differ(v.d[1], k.d[1]) || differ(v.d[2], k.d[2]))
        return std::snprintf(msg, cap, "node '%s': k and v heads / sequence lengths differ", nm), false;
    if(q.d[1] != kWild && k.d[1] != kWild && q.d[1] % k.d[1] != 0)
        return std::snprintf(msg, cap, "node '%s': query heads %lld not a multiple of kv heads %lld", nm,
                             static_cast<long long>(q.d[1]), static_cast<long long>(k.d[1])),
               false;
    if(differ(o.d[1], q.d[1]) || differ(o.d[2], q.d[2]))
        return std::snprintf(msg, cap, "node '%s': o is [%lld,%lld,%lld,%lld] but q gives [%lld,%lld,%lld,%lld]", nm,
                             static_cast<long long>(o.d[0]), static_cast<long long>(o.d[1]),
                             static_cast<long long>(o.d[2]), static_cast<long long>(o.d[3]),
                             static_cast<long long>(q.d[0]), static_cast<long long>(q.d[1]),
                             static_cast<long long>(q.d[2]), static_cast<long long>(q.d[3])),
               false;
    if(p.uid[kStats] >= 0)
    {
        const Dims4& s = e[kStats];
        if(differ(s.d[0], q.d[0]) || differ(s.d[0], o.d[0]) || differ(s.d[1], q.d[1]) || differ(s.d[2], q.d[2])
           || differ(s.d[3], 1))
            return std::snprintf(msg, cap, "node '%s': stats must be [B, Hq, Sq, 1] of q's B, Hq, Sq", nm), false;
    }
    if(q.d[0] > kMaxGridYZ || q.d[1] > kMaxGridYZ)
        return std::snprintf(msg, cap, "node '%s': batch and heads must each be at most %lld", nm,
                             static_cast<long long>(kMaxGridYZ)),
               false;
    return true;
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
        return "the engine runs graphs of exactly one SDPA node";
    if(tensors == nullptr || tensors->size() == 0)
        return "the graph has no tensors";
    const wire::Node* n = nodes->Get(0);
    if(n == nullptr || n->attributes_type() != wire::NodeAttributes::SdpaAttributes)
        return "the node is not an SDPA forward";
    const auto* a = n->attributes_as_SdpaAttributes();
    if(a == nullptr)
        return "the SDPA node has no attributes";
    plan.node_name = n->name() ? n->name()->str() : "sdpa";
    const char* nm = plan.node_name.c_str();
    const auto ct = n->compute_data_type();
    if(ct != wire::DataType::FLOAT && ct != wire::DataType::UNSET)
        return format("node '%s': compute type %s; only FLOAT accumulation is implemented", nm,
                      wire::EnumNameDataType(ct));
    if(g.compute_data_type() != wire::DataType::FLOAT && g.compute_data_type() != wire::DataType::UNSET)
        return "graph compute type other than FLOAT";

    struct Unsupported
    {
        bool present;
        const char* what;
    };
    const char* const extension = sdk::sdpa_extension_in_use(*a);
    const Unsupported unsupported[] = {
        {a->attn_mask_tensor_uid().has_value(), "an attention mask / bias tensor"},
        {a->scale_tensor_uid().has_value(), "a tensor attention scale"},
        {extension != nullptr, extension},
        {a->alibi_mask(), "alibi masks"},
        {a->left_bound().has_value(), "a left band bound (sliding window)"},
        {a->right_bound().has_value() && a->right_bound().value() != 0, "a right band bound other than 0"},
        {a->mma_core_mode() != wire::DataType::UNSET && a->mma_core_mode() != wire::DataType::BFLOAT16
             && a->mma_core_mode() != wire::DataType::HALF,
         "an mma core mode other than the input type"},
        {a->generate_stats().has_value() && a->generate_stats().value() && !a->stats_tensor_uid().has_value(),
         "generate_stats without a stats tensor"},
        {a->padding_mask() != (a->seq_len_q_tensor_uid().has_value() && a->seq_len_kv_tensor_uid().has_value()),
         "a padding mask without both seq_len tensors (or seq_len tensors without padding_mask)"},
    };
    for(const Unsupported& u : unsupported)
        if(u.present)
            return format("node '%s': %s is not supported", nm, u.what);
    const auto align = a->diagonal_alignment();
    if(align != wire::DiagonalAlignment::TOP_LEFT && align != wire::DiagonalAlignment::BOTTOM_RIGHT)
        return format("node '%s': unknown diagonal alignment", nm);
    plan.mask_tl = a->causal_mask();
    plan.mask_br = a->causal_mask_bottom_right();
    if(a->right_bound().has_value())
        (align == wire::DiagonalAlignment::BOTTOM_RIGHT ? plan.mask_br : plan.mask_tl) = true;
    plan.padding = a->padding_mask();

    plan.uid[kQ] = a->q_tensor_uid();
    plan.uid[kK] = a->k_tensor_uid();
    plan.uid[kV] = a->v_tensor_uid();
    plan.uid[kO] = a->o_tensor_uid();
    if(a->stats_tensor_uid().has_value())
        plan.uid[kStats] = a->stats_tensor_uid().value();
    if(plan.padding)
    {
        plan.uid[kSeqQ] = a->seq_len_q_tensor_uid().value();
        plan.uid[kSeqKv] = a->seq_len_kv_tensor_uid().value();
    }
    for(int r = 0; r < kRoles; ++r)
        for(int r2 = r + 1; r2 < kRoles; ++r2)
            if(plan.uid[r] >= 0 && plan.uid[r] == plan.uid[r2])
                return format("node '%s': %s and %s are the same tensor (uid %lld)", nm, kRoleName[r], kRoleName[r2],
                              static_cast<long long>(plan.uid[r]));

    bool found[kRoles] = {};
    wire::DataType io = wire::DataType::UNSET;
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
        std::string why = read_rank4(t, kRoleName[r], plan.shape4[r], plan.dynamic[r], plan.outer_first[r]);
        if(!why.empty())
            return why;
        plan.has_dynamic = plan.has_dynamic || plan.dynamic[r];
        wire::DataType dt = t->data_type();
        if(r <= kO)
        {
            if(dt == wire::DataType::UNSET)
                dt = g.io_data_type();
            ElemType et;
            if(!io_type(dt, et))
                return format("%s (uid %lld) has data type %s; the engine takes BFLOAT16 or HALF", kRoleName[r],
                              static_cast<long long>(t->uid()), wire::EnumNameDataType(dt));
            if(io != wire::DataType::UNSET && io != dt)
                return format("node '%s': q, k, v and o must share one data type", nm);
            io = dt;
            plan.elem = et;
            // The kernels read and write head-dim rows contiguously. A dynamic tensor promises that
            // by declaring the head dim innermost; each call's override must then give it stride 1.
            if(plan.dynamic[r] ? plan.outer_first[r][3] != 3 : plan.shape4[r].s[3] != 1)
                return format("%s (uid %lld): the head dimension must %s", kRoleName[r],
                              static_cast<long long>(t->uid()),
                              plan.dynamic[r] ? "be the innermost axis of the declared axis order" : "have stride 1");
        }
        else if(r == kStats)
        {
            if(dt != wire::DataType::FLOAT && dt != wire::DataType::UNSET)
                return format("stats (uid %lld) must be FLOAT", static_cast<long long>(t->uid()));
        }
        else
        {
            if(dt != wire::DataType::INT32)
                return format("%s (uid %lld) must be INT32", kRoleName[r], static_cast<long long>(t->uid()));
            const Dims4& s = plan.shape4[r];
            if(s.d[1] != 1 || s.d[2] != 1 || s.d[3] != 1)
                return format("%s (uid %lld) must be [B, 1, 1, 1]", kRoleName[r], static_cast<long long>(t->uid()));
        }
    }
    for(int r = 0; r < kRoles; ++r)
        if(plan.uid[r] >= 0 && !found[r])
            return format("node '%s' refers to %s uid %lld, which the graph lacks", nm, kRoleName[r],
                          static_cast<long long>(plan.uid[r]));

    // The head dim selects compiled kernels: it must be declared (by q, k, v or o; the others may leave
    // it to the call, which must then agree).
    int64_t d = kWild;
    for(int r = kQ; r <= kO && d == kWild; ++r)
        d = plan.shape4[r].d[3];
    if(d == kWild)
        return format("node '%s': the head dim is a wildcard in q, k, v and o; the kernels are built for 64 and 128, "
                      "so it must be declared",
                      nm);
    if(d != 64 && d != 128)
        return format("node '%s': head dim %lld; the engine implements 64 and 128", nm, static_cast<long long>(d));
    char msg[384];
    if(!check_shapes(plan, plan.shape4, msg, sizeof(msg)))
        return msg;
    if(plan.padding && (differ(plan.shape4[kSeqQ].d[0], plan.shape4[kQ].d[0])
                        || differ(plan.shape4[kSeqKv].d[0], plan.shape4[kQ].d[0])))
        return format("node '%s': seq_len tensors must have q's batch size", nm);

    plan.scale = a->attn_scale_value().has_value() ? a->attn_scale_value().value()
                                                   : 1.0f / std::sqrt(static_cast<float>(d));
    if(!std::isfinite(plan.scale))
        return format("node '%s': attn_scale is not finite", nm);
    return "";
}

std::string describe(const Plan& p, int64_t engine)
{
    const Dims4& q = p.shape4[kQ];
    const Dims4& k = p.shape4[kK];
    return format("engine %lld, graph '%s': sdpa_fwd %s q[%lld,%lld,%lld,%lld] kv heads %lld, kv len %lld%s%s%s%s%s",
                  static_cast<long long>(engine), p.graph_name.c_str(), p.elem == ElemType::Bf16 ? "bf16" : "fp16",
                  static_cast<long long>(q.d[0]), static_cast<long long>(q.d[1]), static_cast<long long>(q.d[2]),
                  static_cast<long long>(q.d[3]), static_cast<long long>(k.d[1]), static_cast<long long>(k.d[2]),
                  p.mask_tl ? ", causal top-left" : "", p.mask_br ? ", causal bottom-right" : "",
                  p.padding ? ", padding mask" : "", p.uid[kStats] >= 0 ? ", stats" : "",
                  p.has_dynamic ? ", dynamic (-1 = given per call)" : "");
}

std::once_flag g_prepare_once[2];
hipError_t g_prepare_status[2] = {hipSuccess, hipSuccess};

// Scratch the plan needs: the decode path's split partials (engine 202 on a device that runs it,
// and only when a call can have a short query: declared Sq <= 16, a wildcard, or overrides).
size_t plan_workspace(const Plan& p, int64_t engine_id, const DeviceInfo& dev)
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
    s.d = p.shape4[kQ].d[3] != kWild ? p.shape4[kQ].d[3] : p.shape4[kK].d[3];
    if(s.d == kWild)
        s.d = p.shape4[kO].d[3] != kWild ? p.shape4[kO].d[3] : p.shape4[kV].d[3];
    s.mask_top_left = p.mask_tl;
    return decode_plan_workspace(s, dev.sms);
}

// The decode path (split-KV, grouped heads) takes calls with a short query; HIPDNN_HIP_DECODE=0
// turns it off (read per launch, so a benchmark can compare both paths in one process).
bool decode_enabled()
{
    const char* e = std::getenv("HIPDNN_HIP_DECODE");
    return e == nullptr || std::strcmp(e, "0") != 0;
}

// One call, after the layer bound its buffers and checked its overrides (call.ptrs / call.shapes,
// indexed like plan.declared): the engine's own shape rules, then the launch.
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
        if(plan.dynamic[r] && r <= kO && eff[r].s[3] != 1)
            bad_param("override of dynamic %s (uid %lld): head-dim stride %lld; the engine needs 1", kRoleName[r],
                      static_cast<long long>(plan.uid[r]), static_cast<long long>(eff[r].s[3]));
    }
    char msg[384];
    if(!check_shapes(plan, eff, msg, sizeof(msg)))
        fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, msg);
    if(plan.padding && (eff[kSeqQ].d[0] != eff[kQ].d[0] || eff[kSeqKv].d[0] != eff[kQ].d[0]))
        bad_param("node '%s': seq_len tensors must have q's batch size", plan.node_name.c_str());

    SdpaArgs a;
    a.q = ptr[kQ];
    a.k = ptr[kK];
    a.v = ptr[kV];
    a.o = ptr[kO];
    a.stats = static_cast<float*>(ptr[kStats]);
    auto strides = [&](int r, int64_t& sb, int64_t& sh, int64_t& ss, int64_t& sd) {
        sb = eff[r].s[0];
        sh = eff[r].s[1];
        ss = eff[r].s[2];
        sd = eff[r].s[3];
    };
    strides(kQ, a.q_sb, a.q_sh, a.q_ss, a.q_sd);
    strides(kK, a.k_sb, a.k_sh, a.k_ss, a.k_sd);
    strides(kV, a.v_sb, a.v_sh, a.v_ss, a.v_sd);
    strides(kO, a.o_sb, a.o_sh, a.o_ss, a.o_sd);
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
    a.scale_log2 = plan.scale * 1.4426950408889634f;
    a.mask_tl = plan.mask_tl ? 1 : 0;
    a.mask_br = plan.mask_br ? 1 : 0;

    const bool tc = call.engine_id == kTensorCoreId;
    const int slot = tc ? 1 : 0;
    std::call_once(g_prepare_once[slot],
                   [&] {
                       g_prepare_status[slot] = prepare_kernels(tc ? Tier::TensorCore : Tier::Portable);
                       if(tc && g_prepare_status[slot] == hipSuccess)
                           g_prepare_status[slot] = prepare_decode_kernels();
                   });
    if(g_prepare_status[slot] != hipSuccess)
        fail(HIPDNN_PLUGIN_STATUS_INTERNAL_ERROR,
             std::string("kernel setup failed: ") + hipGetErrorString(g_prepare_status[slot]));

    hipError_t e;
    if(tc && tensor_core_accepts(a, plan.elem) && a.sq <= kDecodeMaxSq && decode_kernel_built() && decode_enabled())
        e = launch_sdpa_decode(a, plan.elem, call.workspace, call.workspace_size, dev.sms, stream);
    else if(tc && tensor_core_accepts(a, plan.elem))
        e = launch_sdpa_tensor_core(a, plan.elem, stream);
    else
        e = launch_sdpa_portable(a, plan.elem, stream); // unaligned or strided head dim: portable path
    if(e != hipSuccess)
        fail(HIPDNN_PLUGIN_STATUS_INTERNAL_ERROR,
             format("node '%s': kernel launch failed: %s", plan.node_name.c_str(), hipGetErrorString(e)));
}

// ============================================================== the plugin ====
// One instance per hipdnnEnginePluginCreate; the SDK layer defines the C entry points around it.
class HipEngine
{
public:
    static constexpr const char* kName = "hipdnn_hip_engine";
    static constexpr const char* kVersion = HIPDNN_VERSION;
    static constexpr const char* kApiVersion = "1.2.0"; // the contract implemented (dynamic tensors)
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
            d.label = format("%s (uid %lld)", kRoleName[r], static_cast<long long>(out.uid[r]));
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

    size_t workspace_size(int64_t id, const Plan& p) const { return plan_workspace(p, id, device_); }

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
