// hipdnn HIP engine plugin: the plugin SDK's C ABI, SDPA graph parsing into a
// plan, per-call shape resolution (overrides) and kernel dispatch.
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
//
// Error handling follows the CPU engine: every entry point runs inside
// guarded(), no exception crosses the ABI, failures set a thread-local message.
#include "sdpa_kernels.h" // first: defines hipStream_t before the SDK headers
#include "sdpa_decode_plan.h"

#include <hipdnn_plugin_sdk/EnginePluginApi.h>
#include <hipdnn_plugin_sdk/wire/engine_config_generated.h>
#include <hipdnn_plugin_sdk/wire/engine_details_generated.h>
#include <hipdnn_plugin_sdk/wire/graph_generated.h>

#include <atomic>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <new>
#include <string>
#include <utility>

namespace wire = hipdnn::wire;
using namespace hipdnn_hip;

namespace
{

constexpr const char* kPluginName = "hipdnn_hip_engine";
constexpr const char* kPluginVersion = "0.1.0";
constexpr int64_t kPortableId = 201;
constexpr int64_t kTensorCoreId = 202;
constexpr uint64_t kHandleMagic = 0x68646e6e68697068ull; // "hdnnhiph"
constexpr uint64_t kContextMagic = 0x68646e6e68697063ull;
constexpr int64_t kMaxLen = (int64_t(1) << 31) - 1; // kernels index rows and keys in int32
constexpr int64_t kMaxGridYZ = 65535;
constexpr int64_t kMaxStride = int64_t(1) << 40;
constexpr int64_t kWild = -1; // a dynamic tensor's dim given only at execute

// ------------------------------------------------------- errors / logging --
thread_local std::string t_last_error;
std::atomic<hipdnnCallback_t> g_log_callback{nullptr};
std::atomic<int> g_log_level{HIPDNN_SEV_WARN};

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    return std::string(buf);
}

void log_line(hipdnnSeverity_t sev, const std::string& msg) noexcept
{
    const hipdnnCallback_t cb = g_log_callback.load();
    const int level = g_log_level.load();
    if(cb == nullptr || level >= HIPDNN_SEV_OFF || sev < level)
        return;
    try
    {
        const std::string line = std::string("[") + kPluginName + "] " + msg;
        cb(sev, line.c_str());
    }
    catch(...)
    {
    }
}

struct Failure
{
    hipdnnPluginStatus_t status;
    std::string message;
};

[[noreturn]] void fail(hipdnnPluginStatus_t status, std::string message)
{
    throw Failure{status, std::move(message)};
}

// Execute-path failure: formats into a fixed buffer, allocates only when failing.
[[noreturn]] void bad_param(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
[[noreturn]] void bad_param(const char* fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, buf);
}

template <class F>
hipdnnPluginStatus_t guarded(const char* fn, F&& body) noexcept
{
    try
    {
        return body();
    }
    catch(const Failure& f)
    {
        try
        {
            t_last_error = std::string(fn) + ": " + f.message;
        }
        catch(...)
        {
        }
        return f.status;
    }
    catch(const std::bad_alloc&)
    {
        t_last_error.clear();
        return HIPDNN_PLUGIN_STATUS_ALLOC_FAILED;
    }
    catch(const std::exception& e)
    {
        try
        {
            t_last_error = std::string(fn) + ": internal error: " + e.what();
        }
        catch(...)
        {
        }
        return HIPDNN_PLUGIN_STATUS_INTERNAL_ERROR;
    }
    catch(...)
    {
        return HIPDNN_PLUGIN_STATUS_INTERNAL_ERROR;
    }
}

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

struct Plan
{
    std::string graph_name;
    std::string node_name;
    int64_t uid[kRoles] = {-1, -1, -1, -1, -1, -1, -1};
    Dims4 declared[kRoles];
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
    const Unsupported unsupported[] = {
        {a->attn_mask_tensor_uid().has_value(), "an attention mask / bias tensor"},
        {a->scale_tensor_uid().has_value(), "a tensor attention scale"},
        {a->seed_tensor_uid().has_value() || a->offset_tensor_uid().has_value() || a->dropout_mask_tensor_uid().has_value()
             || a->dropout_scale_tensor_uid().has_value() || a->rng_dump_tensor_uid().has_value()
             || (a->dropout_probability().has_value() && a->dropout_probability().value() != 0.0f),
         "dropout"},
        {a->page_table_k_tensor_uid().has_value() || a->page_table_v_tensor_uid().has_value(), "paged k/v"},
        {a->block_mask_tensor_uid().has_value(), "block masks"},
        {a->sink_token_tensor_uid().has_value(), "sink tokens"},
        {a->descale_q_tensor_uid().has_value() || a->descale_k_tensor_uid().has_value()
             || a->descale_v_tensor_uid().has_value() || a->descale_s_tensor_uid().has_value()
             || a->scale_s_tensor_uid().has_value() || a->scale_o_tensor_uid().has_value()
             || a->amax_s_tensor_uid().has_value() || a->amax_o_tensor_uid().has_value(),
         "fp8 scaling"},
        {a->max_tensor_uid().has_value() || a->sum_exp_tensor_uid().has_value(), "separate max / sum-exp outputs"},
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
        std::string why = read_rank4(t, kRoleName[r], plan.declared[r], plan.dynamic[r], plan.outer_first[r]);
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
            if(plan.dynamic[r] ? plan.outer_first[r][3] != 3 : plan.declared[r].s[3] != 1)
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
            const Dims4& s = plan.declared[r];
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
        d = plan.declared[r].d[3];
    if(d == kWild)
        return format("node '%s': the head dim is a wildcard in q, k, v and o; the kernels are built for 64 and 128, "
                      "so it must be declared",
                      nm);
    if(d != 64 && d != 128)
        return format("node '%s': head dim %lld; the engine implements 64 and 128", nm, static_cast<long long>(d));
    char msg[384];
    if(!check_shapes(plan, plan.declared, msg, sizeof(msg)))
        return msg;
    if(plan.padding && (differ(plan.declared[kSeqQ].d[0], plan.declared[kQ].d[0])
                        || differ(plan.declared[kSeqKv].d[0], plan.declared[kQ].d[0])))
        return format("node '%s': seq_len tensors must have q's batch size", nm);

    plan.scale = a->attn_scale_value().has_value() ? a->attn_scale_value().value()
                                                   : 1.0f / std::sqrt(static_cast<float>(d));
    if(!std::isfinite(plan.scale))
        return format("node '%s': attn_scale is not finite", nm);
    return "";
}

std::string describe(const Plan& p, int64_t engine)
{
    const Dims4& q = p.declared[kQ];
    const Dims4& k = p.declared[kK];
    return format("engine %lld, graph '%s': sdpa_fwd %s q[%lld,%lld,%lld,%lld] kv heads %lld, kv len %lld%s%s%s%s%s",
                  static_cast<long long>(engine), p.graph_name.c_str(), p.elem == ElemType::Bf16 ? "bf16" : "fp16",
                  static_cast<long long>(q.d[0]), static_cast<long long>(q.d[1]), static_cast<long long>(q.d[2]),
                  static_cast<long long>(q.d[3]), static_cast<long long>(k.d[1]), static_cast<long long>(k.d[2]),
                  p.mask_tl ? ", causal top-left" : "", p.mask_br ? ", causal bottom-right" : "",
                  p.padding ? ", padding mask" : "", p.uid[kStats] >= 0 ? ", stats" : "",
                  p.has_dynamic ? ", dynamic (-1 = given per call)" : "");
}

const wire::Graph* verified_graph(const hipdnnPluginConstData_t* g)
{
    if(g == nullptr)
        fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "op_graph is NULL");
    if(g->ptr == nullptr || g->size == 0)
        fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "op_graph buffer is empty");
    flatbuffers::Verifier v(static_cast<const uint8_t*>(g->ptr), g->size);
    if(!wire::VerifyGraphBuffer(v))
        fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "op_graph is not a valid serialized hipdnn.wire.Graph");
    return wire::GetGraph(g->ptr);
}

bool is_our_engine(int64_t id)
{
    return id == kPortableId || id == kTensorCoreId;
}

int64_t verified_config(const hipdnnPluginConstData_t* c)
{
    if(c == nullptr)
        fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "engine_config is NULL");
    if(c->ptr == nullptr || c->size == 0)
        fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "engine_config buffer is empty");
    flatbuffers::Verifier v(static_cast<const uint8_t*>(c->ptr), c->size);
    if(!wire::VerifyEngineConfigBuffer(v))
        fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "engine_config is not a valid serialized hipdnn.wire.EngineConfig");
    const wire::EngineConfig* cfg = wire::GetEngineConfig(c->ptr);
    if(!is_our_engine(cfg->engine_id()))
        fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM,
             format("engine id %lld is not an engine of this plugin (201, 202)", static_cast<long long>(cfg->engine_id())));
    if(cfg->knobs() != nullptr && cfg->knobs()->size() > 0)
    {
        const auto* k = cfg->knobs()->Get(0);
        fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, format("engine %lld has no knobs, but the config sets '%s'",
                                                    static_cast<long long>(cfg->engine_id()),
                                                    (k && k->knob_id()) ? k->knob_id()->c_str() : "?"));
    }
    return cfg->engine_id();
}

} // namespace

// ------------------------------------------------------ opaque objects ----
struct HipdnnEnginePluginHandle
{
    uint64_t magic = kHandleMagic;
    DeviceInfo device;
    hipStream_t stream = nullptr;
};

struct HipdnnEnginePluginExecutionContext
{
    uint64_t magic = kContextMagic;
    int64_t engine_id = 0;
    Plan plan;
    size_t workspace_bytes = 0; // what GetWorkspaceSize reported for this plan
    int sms = 0;
};

namespace
{

void check_handle(hipdnnEnginePluginHandle_t h)
{
    if(h == nullptr)
        fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "handle is NULL");
    if(h->magic != kHandleMagic)
        fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "handle is not a hipdnn_hip_engine handle");
}

void check_context(hipdnnEnginePluginExecutionContext_t c)
{
    if(c == nullptr)
        fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "execution_context is NULL");
    if(c->magic != kContextMagic)
        fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "execution_context is not a hipdnn_hip_engine context");
}

// Engines of this plugin that can run the graph, best first; why = reason when none.
uint32_t applicable(const DeviceInfo& dev, const wire::Graph& g, int64_t out[2], std::string& why, Plan* plan_out)
{
    Plan plan;
    why = build_plan(g, plan);
    if(!why.empty())
        return 0;
    if(!dev.present)
    {
        why = dev.why_absent;
        return 0;
    }
    uint32_t n = 0;
    if(tensor_core_device(dev))
        out[n++] = kTensorCoreId;
    out[n++] = kPortableId;
    if(plan_out != nullptr)
        *plan_out = std::move(plan);
    return n;
}

std::once_flag g_prepare_once[2];
hipError_t g_prepare_status[2] = {hipSuccess, hipSuccess};

// Whether a tensor's element offsets (sum of (dim - 1) * stride) stay far inside int64.
bool extent_fits(const Dims4& t)
{
    int64_t total = 0;
    for(int i = 0; i < 4; ++i)
    {
        int64_t term = 0;
        if(__builtin_mul_overflow(t.d[i] - 1, t.s[i], &term) || __builtin_add_overflow(total, term, &total))
            return false;
    }
    return total < (int64_t(1) << 62);
}

// Scratch the plan needs: the decode path's split partials (engine 202 on a device that runs it,
// and only when a call can have a short query: declared Sq <= 16, a wildcard, or overrides).
size_t plan_workspace(const Plan& p, int64_t engine_id, const DeviceInfo& dev)
{
    if(engine_id != kTensorCoreId || !decode_kernel_built() || dev.sms <= 0)
        return 0;
    const int64_t sq = p.declared[kQ].d[2];
    if(!(p.override_enabled || p.has_dynamic || (sq != kWild && sq <= kDecodeMaxSq)))
        return 0;
    DecodeShape s;
    s.batch = p.declared[kQ].d[0];
    s.hq = p.declared[kQ].d[1];
    s.hk = p.declared[kK].d[1];
    s.sq = sq;
    s.skv = p.declared[kK].d[2];
    s.d = p.declared[kQ].d[3] != kWild ? p.declared[kQ].d[3] : p.declared[kK].d[3];
    if(s.d == kWild)
        s.d = p.declared[kO].d[3] != kWild ? p.declared[kO].d[3] : p.declared[kV].d[3];
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

hipdnnPluginStatus_t execute(hipdnnEnginePluginHandle_t handle,
                             hipdnnEnginePluginExecutionContext_t ctx,
                             void* workspace,
                             const hipdnnPluginDeviceBuffer_t* buffers,
                             uint32_t num_buffers,
                             bool plain_entry,
                             uint32_t num_overrides,
                             const int64_t* ov_uids,
                             const uint32_t* ov_lengths,
                             const int64_t* const* ov_shapes,
                             const int64_t* const* ov_strides)
{
    check_handle(handle);
    check_context(ctx);
    const Plan& plan = ctx->plan;
    if(plain_entry && plan.has_dynamic)
        bad_param("graph '%s' has dynamic tensors, whose dims and strides exist only per call: execute it with "
                  "hipdnnEnginePluginExecuteOpGraphWithOverrides, with an override for every dynamic tensor",
                  plan.graph_name.c_str());
    if(num_buffers > 0 && buffers == nullptr)
        bad_param("device_buffers is NULL but num_device_buffers is %u", num_buffers);
    if(num_overrides > 0 && (ov_uids == nullptr || ov_lengths == nullptr || ov_shapes == nullptr || ov_strides == nullptr))
        bad_param("an override array is NULL with num_overrides = %u", num_overrides);

    void* ptr[kRoles] = {};
    for(uint32_t i = 0; i < num_buffers; ++i)
    {
        const int r = plan.role_of(buffers[i].uid);
        if(r < 0)
            bad_param("device buffer %u has uid %lld, which is not a tensor of the graph", i,
                      static_cast<long long>(buffers[i].uid));
        if(buffers[i].ptr == nullptr)
            bad_param("device buffer for %s (uid %lld) is NULL", kRoleName[r], static_cast<long long>(buffers[i].uid));
        if(ptr[r] != nullptr)
            bad_param("%s (uid %lld) has more than one device buffer", kRoleName[r], static_cast<long long>(buffers[i].uid));
        ptr[r] = buffers[i].ptr;
    }
    for(int r = 0; r < kRoles; ++r)
        if(plan.uid[r] >= 0 && ptr[r] == nullptr)
            bad_param("no device buffer for %s (uid %lld)", kRoleName[r], static_cast<long long>(plan.uid[r]));

    Dims4 eff[kRoles];
    bool seen[kRoles] = {};
    for(int r = 0; r < kRoles; ++r)
        eff[r] = plan.declared[r];
    for(uint32_t i = 0; i < num_overrides; ++i)
    {
        const long long u = static_cast<long long>(ov_uids[i]);
        const int r = plan.role_of(ov_uids[i]);
        if(r < 0)
            bad_param("override %u names uid %lld, which is not a tensor of the graph", i, u);
        if(seen[r])
            bad_param("tensor uid %lld is overridden more than once", u);
        seen[r] = true;
        if(ov_lengths[i] != 4)
            bad_param("override of %s (uid %lld) has rank %u, declared rank is 4", kRoleName[r], u, ov_lengths[i]);
        if(ov_shapes[i] == nullptr || ov_strides[i] == nullptr)
            bad_param("override of %s (uid %lld) has NULL dims or strides", kRoleName[r], u);
        for(int d = 0; d < 4; ++d)
        {
            const int64_t dim = ov_shapes[i][d], st = ov_strides[i][d];
            // Declared dims are maxima; a wildcard is bounded only by the kernels' int32 indexing.
            const int64_t max_dim = plan.declared[r].d[d] == kWild ? kMaxLen : plan.declared[r].d[d];
            if(dim <= 0 || dim > max_dim)
                bad_param("override of %s (uid %lld): dim %d is %lld, outside 1..%lld%s", kRoleName[r], u, d,
                          static_cast<long long>(dim), static_cast<long long>(max_dim),
                          plan.declared[r].d[d] == kWild ? " (wildcard)" : " (declared maximum)");
            if(st <= 0 || st > kMaxStride)
                bad_param("override of %s (uid %lld): stride %d is %lld", kRoleName[r], u, d, static_cast<long long>(st));
            eff[r].d[d] = dim;
            eff[r].s[d] = st;
        }
        if(plan.dynamic[r])
        {
            // The strides must keep the declared axis order: walking it from the outermost axis in,
            // no stride may exceed the one before (axes of length 1 place nothing and are skipped).
            int64_t prev = -1;
            int prev_axis = -1;
            for(int j = 0; j < 4; ++j)
            {
                const int ax = plan.outer_first[r][j];
                if(eff[r].d[ax] == 1)
                    continue;
                if(prev >= 0 && eff[r].s[ax] > prev)
                    bad_param("override of dynamic %s (uid %lld): stride %lld of axis %d exceeds stride %lld of axis "
                              "%d, which the declared axis order puts outside it",
                              kRoleName[r], u, static_cast<long long>(eff[r].s[ax]), ax, static_cast<long long>(prev),
                              prev_axis);
                prev = eff[r].s[ax];
                prev_axis = ax;
            }
            // The head dim was declared innermost so that it is contiguous: the kernels need stride 1.
            if(r <= kO && eff[r].s[3] != 1)
                bad_param("override of dynamic %s (uid %lld): head-dim stride %lld; the engine needs 1", kRoleName[r],
                          u, static_cast<long long>(eff[r].s[3]));
        }
        if(!extent_fits(eff[r]))
            bad_param("override of %s (uid %lld): dims and strides address more than 2^62 elements", kRoleName[r], u);
    }
    for(int r = 0; r < kRoles; ++r)
        if(plan.uid[r] >= 0 && plan.dynamic[r] && !seen[r])
            bad_param("dynamic %s (uid %lld) has no override: its dims and strides are known only from the override "
                      "of each call",
                      kRoleName[r], static_cast<long long>(plan.uid[r]));
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

    const bool tc = ctx->engine_id == kTensorCoreId;
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
        e = launch_sdpa_decode(a, plan.elem, workspace, ctx->workspace_bytes, ctx->sms, handle->stream);
    else if(tc && tensor_core_accepts(a, plan.elem))
        e = launch_sdpa_tensor_core(a, plan.elem, handle->stream);
    else
        e = launch_sdpa_portable(a, plan.elem, handle->stream); // unaligned or strided head dim: portable path
    if(e != hipSuccess)
        fail(HIPDNN_PLUGIN_STATUS_INTERNAL_ERROR,
             format("node '%s': kernel launch failed: %s", plan.node_name.c_str(), hipGetErrorString(e)));
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

} // namespace

// ================================================================ C ABI ====
extern "C" {

hipdnnPluginStatus_t hipdnnPluginGetName(const char** name)
{
    return guarded(__func__, [&] {
        if(name == nullptr)
            fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "name is NULL");
        *name = kPluginName;
        return HIPDNN_PLUGIN_STATUS_SUCCESS;
    });
}

hipdnnPluginStatus_t hipdnnPluginGetVersion(const char** version)
{
    return guarded(__func__, [&] {
        if(version == nullptr)
            fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "version is NULL");
        *version = kPluginVersion;
        return HIPDNN_PLUGIN_STATUS_SUCCESS;
    });
}

hipdnnPluginStatus_t hipdnnPluginGetApiVersion(const char** version)
{
    return guarded(__func__, [&] {
        if(version == nullptr)
            fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "version is NULL");
        *version = "1.2.0"; // the contract this engine implements (dynamic tensors), not the SDK macro
        return HIPDNN_PLUGIN_STATUS_SUCCESS;
    });
}

hipdnnPluginStatus_t hipdnnPluginGetType(hipdnnPluginType_t* type)
{
    return guarded(__func__, [&] {
        if(type == nullptr)
            fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "type is NULL");
        *type = HIPDNN_PLUGIN_TYPE_ENGINE;
        return HIPDNN_PLUGIN_STATUS_SUCCESS;
    });
}

void hipdnnPluginGetLastErrorString(const char** error_str)
{
    if(error_str != nullptr)
        *error_str = t_last_error.c_str();
}

hipdnnPluginStatus_t hipdnnPluginSetLoggingCallback(hipdnnCallback_t callback)
{
    g_log_callback.store(callback);
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

hipdnnPluginStatus_t hipdnnPluginSetLogLevel(hipdnnSeverity_t level)
{
    return guarded(__func__, [&] {
        if(static_cast<int>(level) < HIPDNN_SEV_INFO || static_cast<int>(level) > HIPDNN_SEV_OFF)
            fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, format("unknown log level %d", static_cast<int>(level)));
        g_log_level.store(level);
        return HIPDNN_PLUGIN_STATUS_SUCCESS;
    });
}

hipdnnPluginStatus_t hipdnnEnginePluginGetAllEngineIds(int64_t* engine_ids, uint32_t max_engines, uint32_t* num_engines)
{
    return guarded(__func__, [&] {
        if(num_engines == nullptr)
            fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "num_engines is NULL");
        if(max_engines > 0 && engine_ids == nullptr)
            fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "engine_ids is NULL but max_engines > 0");
        const int64_t ids[2] = {kTensorCoreId, kPortableId};
        for(uint32_t i = 0; i < 2 && i < max_engines; ++i)
            engine_ids[i] = ids[i];
        *num_engines = 2;
        return HIPDNN_PLUGIN_STATUS_SUCCESS;
    });
}

hipdnnPluginStatus_t hipdnnEnginePluginCreate(hipdnnEnginePluginHandle_t* handle)
{
    return guarded(__func__, [&] {
        if(handle == nullptr)
            fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "handle is NULL");
        auto* h = new HipdnnEnginePluginHandle();
        try
        {
            h->device = query_device();
            if(!h->device.present)
                log_line(HIPDNN_SEV_INFO, "no usable GPU, no engine will apply: " + h->device.why_absent);
        }
        catch(...)
        {
            delete h;
            throw;
        }
        *handle = h;
        return HIPDNN_PLUGIN_STATUS_SUCCESS;
    });
}

hipdnnPluginStatus_t hipdnnEnginePluginDestroy(hipdnnEnginePluginHandle_t handle)
{
    return guarded(__func__, [&] {
        check_handle(handle);
        handle->magic = 0;
        delete handle;
        return HIPDNN_PLUGIN_STATUS_SUCCESS;
    });
}

hipdnnPluginStatus_t hipdnnEnginePluginSetStream(hipdnnEnginePluginHandle_t handle, hipStream_t stream)
{
    return guarded(__func__, [&] {
        check_handle(handle);
        handle->stream = stream;
        return HIPDNN_PLUGIN_STATUS_SUCCESS;
    });
}

hipdnnPluginStatus_t hipdnnEnginePluginGetApplicableEngineIds(hipdnnEnginePluginHandle_t handle,
                                                              const hipdnnPluginConstData_t* op_graph,
                                                              int64_t* engine_ids,
                                                              uint32_t max_engines,
                                                              uint32_t* num_engines)
{
    return guarded(__func__, [&] {
        check_handle(handle);
        if(num_engines == nullptr)
            fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "num_engines is NULL");
        if(max_engines > 0 && engine_ids == nullptr)
            fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "engine_ids is NULL but max_engines > 0");
        const wire::Graph* g = verified_graph(op_graph);
        int64_t ids[2];
        std::string why;
        const uint32_t n = applicable(handle->device, *g, ids, why, nullptr);
        if(n == 0)
            log_line(HIPDNN_SEV_INFO, "engines 201/202 not applicable: " + why);
        for(uint32_t i = 0; i < n && i < max_engines; ++i)
            engine_ids[i] = ids[i];
        *num_engines = n;
        return HIPDNN_PLUGIN_STATUS_SUCCESS;
    });
}

hipdnnPluginStatus_t hipdnnEnginePluginGetEngineDetails(hipdnnEnginePluginHandle_t handle,
                                                        int64_t engine_id,
                                                        const hipdnnPluginConstData_t* op_graph,
                                                        hipdnnPluginConstData_t* engine_details)
{
    return guarded(__func__, [&] {
        check_handle(handle);
        if(engine_details == nullptr)
            fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "engine_details is NULL");
        if(!is_our_engine(engine_id))
            fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM,
                 format("engine id %lld is not an engine of this plugin", static_cast<long long>(engine_id)));
        (void)verified_graph(op_graph);
        // No knobs; one behavior note: tensors and workspace are device memory, so the host can
        // refuse host arrays before they reach a kernel. A heap copy, freed by DestroyEngineDetails.
        flatbuffers::FlatBufferBuilder fbb(128);
        const int32_t notes[] = {HIPDNN_BEHAVIOR_NOTE_DEVICE_MEMORY_EXT};
        const auto notes_off = fbb.CreateVector(notes, 1);
        fbb.Finish(wire::CreateEngineDetails(fbb, engine_id, 0, notes_off));
        auto* copy = new uint8_t[fbb.GetSize()];
        std::memcpy(copy, fbb.GetBufferPointer(), fbb.GetSize());
        engine_details->ptr = copy;
        engine_details->size = fbb.GetSize();
        return HIPDNN_PLUGIN_STATUS_SUCCESS;
    });
}

hipdnnPluginStatus_t hipdnnEnginePluginDestroyEngineDetails(hipdnnEnginePluginHandle_t handle,
                                                            hipdnnPluginConstData_t* engine_details)
{
    return guarded(__func__, [&] {
        check_handle(handle);
        if(engine_details == nullptr)
            fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "engine_details is NULL");
        delete[] static_cast<const uint8_t*>(engine_details->ptr); // NULL (size 0) is a no-op
        engine_details->ptr = nullptr;
        engine_details->size = 0;
        return HIPDNN_PLUGIN_STATUS_SUCCESS;
    });
}

// Plans the graph for engine_id on this handle's device, or fails NOT_APPLICABLE.
static void plan_for(hipdnnEnginePluginHandle_t handle, int64_t engine_id, const wire::Graph* g, Plan& plan)
{
    int64_t ids[2];
    std::string why;
    const uint32_t n = applicable(handle->device, *g, ids, why, &plan);
    bool ok = false;
    for(uint32_t i = 0; i < n; ++i)
        ok = ok || ids[i] == engine_id;
    if(!ok)
        fail(HIPDNN_PLUGIN_STATUS_NOT_APPLICABLE,
             format("engine %lld cannot run this graph: %s", static_cast<long long>(engine_id),
                    why.empty() ? "the device has no tensor-core kernel for it" : why.c_str()));
}

hipdnnPluginStatus_t hipdnnEnginePluginGetWorkspaceSize(hipdnnEnginePluginHandle_t handle,
                                                        const hipdnnPluginConstData_t* engine_config,
                                                        const hipdnnPluginConstData_t* op_graph,
                                                        size_t* workspace_size)
{
    return guarded(__func__, [&] {
        check_handle(handle);
        if(workspace_size == nullptr)
            fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "workspace_size is NULL");
        const int64_t id = verified_config(engine_config);
        Plan plan;
        plan_for(handle, id, verified_graph(op_graph), plan);
        *workspace_size = plan_workspace(plan, id, handle->device);
        return HIPDNN_PLUGIN_STATUS_SUCCESS;
    });
}

hipdnnPluginStatus_t hipdnnEnginePluginCreateExecutionContext(hipdnnEnginePluginHandle_t handle,
                                                              const hipdnnPluginConstData_t* engine_config,
                                                              const hipdnnPluginConstData_t* op_graph,
                                                              hipdnnEnginePluginExecutionContext_t* execution_context)
{
    return guarded(__func__, [&] {
        check_handle(handle);
        if(execution_context == nullptr)
            fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "execution_context is NULL");
        const int64_t id = verified_config(engine_config);
        const wire::Graph* g = verified_graph(op_graph);
        auto* ctx = new HipdnnEnginePluginExecutionContext();
        try
        {
            ctx->engine_id = id;
            plan_for(handle, id, g, ctx->plan);
            ctx->workspace_bytes = plan_workspace(ctx->plan, id, handle->device);
            ctx->sms = handle->device.sms;
            log_line(HIPDNN_SEV_INFO, "execution context: " + describe(ctx->plan, id));
        }
        catch(...)
        {
            delete ctx;
            throw;
        }
        *execution_context = ctx;
        return HIPDNN_PLUGIN_STATUS_SUCCESS;
    });
}

hipdnnPluginStatus_t hipdnnEnginePluginDestroyExecutionContext(hipdnnEnginePluginHandle_t handle,
                                                               hipdnnEnginePluginExecutionContext_t execution_context)
{
    return guarded(__func__, [&] {
        check_handle(handle);
        check_context(execution_context);
        execution_context->magic = 0;
        delete execution_context;
        return HIPDNN_PLUGIN_STATUS_SUCCESS;
    });
}

hipdnnPluginStatus_t hipdnnEnginePluginGetWorkspaceSizeFromExecutionContext(
    hipdnnEnginePluginHandle_t handle, hipdnnEnginePluginExecutionContext_t execution_context, size_t* workspace_size)
{
    return guarded(__func__, [&] {
        check_handle(handle);
        check_context(execution_context);
        if(workspace_size == nullptr)
            fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "workspace_size is NULL");
        *workspace_size = execution_context->workspace_bytes;
        return HIPDNN_PLUGIN_STATUS_SUCCESS;
    });
}

hipdnnPluginStatus_t hipdnnEnginePluginExecuteOpGraph(hipdnnEnginePluginHandle_t handle,
                                                      hipdnnEnginePluginExecutionContext_t execution_context,
                                                      void* workspace,
                                                      const hipdnnPluginDeviceBuffer_t* device_buffers,
                                                      uint32_t num_device_buffers)
{
    return guarded(__func__, [&] {
        return execute(handle, execution_context, workspace, device_buffers, num_device_buffers, true, 0, nullptr, nullptr,
                       nullptr, nullptr);
    });
}

hipdnnPluginStatus_t hipdnnEnginePluginExecuteOpGraphWithOverrides(hipdnnEnginePluginHandle_t handle,
                                                                   hipdnnEnginePluginExecutionContext_t execution_context,
                                                                   void* workspace,
                                                                   const hipdnnPluginDeviceBuffer_t* device_buffers,
                                                                   uint32_t num_device_buffers,
                                                                   uint32_t num_overrides,
                                                                   const int64_t* override_unique_ids,
                                                                   const uint32_t* override_lengths,
                                                                   const int64_t* const* override_shapes,
                                                                   const int64_t* const* override_strides)
{
    return guarded(__func__, [&] {
        return execute(handle, execution_context, workspace, device_buffers, num_device_buffers, false, num_overrides,
                       override_unique_ids, override_lengths, override_shapes, override_strides);
    });
}

} // extern "C"
