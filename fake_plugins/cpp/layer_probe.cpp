// A plugin on the SDK's C++ layer written to break it (tests/sdk/test_cpp_layer.py). The graph's
// name picks the misbehaviour: "throw_runtime", "throw_bad_alloc", "throw_int", "throw_failure"
// (while planning), "exec_bad_alloc", "exec_runtime" (while executing), "workspace" (asks for 64
// bytes). Otherwise engine 7101 applies to any graph whose tensors have rank 1..8 and 7102 never
// does. execute writes, into each tensor's buffer (int64), the tensor's effective rank, dims and
// strides, then 1 if the call came through the override entry. Every plan() logs "planned engine N".
// Built with PROBE_NO_OVERRIDES it claims API 1.0.0 and leaves the override entry out.
#include <hipdnn_plugin_sdk/cpp/EnginePlugin.hpp>

#include <new>
#include <stdexcept>
#include <string>

namespace sdk = hipdnn_plugin_sdk::cpp;

#ifndef PROBE_NAME
#define PROBE_NAME "layer_probe"
#endif

struct Probe
{
    static constexpr const char* kName = PROBE_NAME;
    static constexpr const char* kVersion = "0.0.1";
#ifdef PROBE_NO_OVERRIDES
    static constexpr const char* kApiVersion = "1.0.0";
    static constexpr bool kOverrideEntry = false;
#else
    static constexpr const char* kApiVersion = "1.2.0";
    static constexpr bool kOverrideEntry = true;
#endif
    static constexpr int64_t kEngineIds[] = {7101, 7102};

    struct Plan : sdk::DeclaredTensors
    {
        std::string name;
    };

    std::string plan(int64_t id, const sdk::GraphView& view, Plan& out) const
    {
        sdk::log(HIPDNN_SEV_INFO, "planned engine %lld", static_cast<long long>(id));
        out.name = view.graph.name() ? view.graph.name()->str() : "";
        if(out.name == "throw_runtime")
            throw std::runtime_error("probe plan exploded");
        if(out.name == "throw_bad_alloc")
            throw std::bad_alloc();
        if(out.name == "throw_int")
            throw 42;
        if(out.name == "throw_failure")
            sdk::fail(HIPDNN_PLUGIN_STATUS_INVALID_VALUE, "probe refused the graph");
        if(id == 7102)
            return "engine 7102 never applies";
        if(view.graph.tensors() == nullptr)
            return "no tensors";
        for(const hipdnn::wire::TensorAttributes* t : *view.graph.tensors())
        {
            sdk::DeclaredTensor d;
            d.uid = t->uid();
            d.label = "tensor '" + (t->name() ? t->name()->str() : std::string()) + "' (uid " + std::to_string(d.uid) + ")";
            d.dynamic = t->is_dynamic();
            const uint32_t rank = t->dims() ? t->dims()->size() : 0;
            if(rank == 0 || rank > sdk::kMaxRank || !t->strides() || t->strides()->size() != rank)
                return "ranks must be 1..8";
            d.shape.rank = static_cast<int>(rank);
            for(uint32_t i = 0; i < rank; ++i)
            {
                d.shape.dims[i] = t->dims()->Get(i);
                d.shape.strides[i] = t->strides()->Get(i);
                if(d.dynamic) // strides are an axis order, 0 innermost
                    d.outer_first[rank - 1 - static_cast<uint32_t>(d.shape.strides[i]) % rank] = static_cast<int>(i);
            }
            d.wildcard_max = 1 << 20;
            out.declared.push_back(d);
        }
        out.seal();
        return "";
    }

    size_t workspace_size(int64_t, const Plan& p) const { return p.name == "workspace" ? 64 : 0; }

    void execute(const Plan& p, sdk::Call& call) const
    {
        if(p.name == "exec_bad_alloc")
            throw std::bad_alloc();
        if(p.name == "exec_runtime")
            throw std::runtime_error("probe execute exploded");
        for(size_t k = 0; k < p.declared.size(); ++k)
        {
            auto* out = static_cast<int64_t*>(call.ptrs[k]);
            const sdk::TensorShape& s = call.shapes[k];
            out[0] = s.rank;
            for(int i = 0; i < s.rank; ++i)
            {
                out[1 + i] = s.dims[i];
                out[1 + s.rank + i] = s.strides[i];
            }
            out[1 + 2 * s.rank] = call.override_entry ? 1 : 0;
        }
    }
};

#ifdef PROBE_NO_OVERRIDES
HIPDNN_CPP_PLUGIN_NO_OVERRIDES(Probe)
#else
HIPDNN_CPP_PLUGIN(Probe)
#endif
