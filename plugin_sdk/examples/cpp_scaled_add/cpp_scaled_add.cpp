// Example hipdnn engine plugin on the SDK's C++ layer: the C example's engine (out = in_0 OP in_1,
// OP one of ADD, SUB, MUL, fp32, up to 8 dims, numpy broadcasting, any strides, on the host), in one
// class. The layer writes every C entry point; the plugin reads the graph into a plan, says why an
// engine does not apply, and runs a call at its effective shapes (overrides already checked).
#include <hipdnn_plugin_sdk/cpp/EnginePlugin.hpp>

#include <string>
#include <vector>

namespace sdk = hipdnn_plugin_sdk::cpp;
namespace wire = hipdnn::wire;

#ifndef EXAMPLE_VERSION
#define EXAMPLE_VERSION "1.0.0"
#endif

class CppScaledAdd
{
public:
    static constexpr const char* kName = "hipdnn_example_cpp_scaled_add";
    static constexpr const char* kVersion = EXAMPLE_VERSION;
    static constexpr const char* kApiVersion = "1.1.0"; // shape overrides; no dynamic tensors
    static constexpr bool kOverrideEntry = true;
    static constexpr int64_t kEngineIds[] = {5002};

    // Tensors in0, in1, out, in that order: the layer binds their buffers and shapes per call.
    struct Plan : sdk::DeclaredTensors
    {
        wire::PointwiseMode mode = wire::PointwiseMode::ADD;
    };

    std::string plan(int64_t, const sdk::GraphView& view, Plan& out) const
    {
        const wire::Graph& g = view.graph;
        if(g.nodes() == nullptr || g.nodes()->size() != 1 || g.tensors() == nullptr)
            return "the engine runs graphs of one pointwise node";
        const wire::PointwiseAttributes* pw = g.nodes()->Get(0)->attributes_as_PointwiseAttributes();
        if(pw == nullptr || !pw->in_1_tensor_uid().has_value())
            return "the node is not a binary pointwise node";
        out.mode = pw->operation();
        if(out.mode != wire::PointwiseMode::ADD && out.mode != wire::PointwiseMode::SUB
           && out.mode != wire::PointwiseMode::MUL)
            return std::string("pointwise mode ") + wire::EnumNamePointwiseMode(out.mode) + " is not ADD, SUB or MUL";
        const int64_t uids[3] = {pw->in_0_tensor_uid(), pw->in_1_tensor_uid().value(), pw->out_0_tensor_uid()};
        const char* labels[3] = {"in_0", "in_1", "out"};
        for(int r = 0; r < 3; ++r)
        {
            const wire::TensorAttributes* t = nullptr;
            for(const wire::TensorAttributes* c : *g.tensors())
                t = (c != nullptr && c->uid() == uids[r]) ? c : t;
            if(t == nullptr || t->dims() == nullptr || t->strides() == nullptr)
                return sdk::format("%s (uid %lld) is missing or has no dims", labels[r], static_cast<long long>(uids[r]));
            const uint32_t rank = t->dims()->size();
            if(rank == 0 || rank > sdk::kMaxRank || t->strides()->size() != rank)
                return sdk::format("%s: rank %u (1..8, with as many strides)", labels[r], rank);
            if(t->virtual_() || t->is_dynamic() || t->value_type() != wire::TensorValue::NONE)
                return sdk::format("%s: virtual, dynamic and by-value tensors are not supported", labels[r]);
            const wire::DataType dt = t->data_type() == wire::DataType::UNSET ? g.io_data_type() : t->data_type();
            if(dt != wire::DataType::FLOAT)
                return sdk::format("%s: data type %s (FLOAT only)", labels[r], wire::EnumNameDataType(dt));
            sdk::DeclaredTensor d;
            d.uid = uids[r];
            d.label = sdk::format("%s (uid %lld)", labels[r], static_cast<long long>(uids[r]));
            d.shape.rank = static_cast<int>(rank);
            for(uint32_t i = 0; i < rank; ++i)
            {
                d.shape.dims[i] = t->dims()->Get(i);
                d.shape.strides[i] = t->strides()->Get(i);
                if(d.shape.dims[i] <= 0 || d.shape.strides[i] < 0)
                    return sdk::format("%s: dim %u is %lld", labels[r], i, static_cast<long long>(d.shape.dims[i]));
            }
            out.declared.push_back(d);
        }
        out.seal();
        return out.declared[2].shape.rank >= out.declared[0].shape.rank && out.declared[2].shape.rank >= out.declared[1].shape.rank
                   ? std::string()
                   : std::string("out has fewer dims than an input");
    }

    size_t workspace_size(int64_t, const Plan&) const { return 0; }

    std::vector<int32_t> behavior_notes(int64_t) const { return {HIPDNN_BEHAVIOR_NOTE_HOST_MEMORY_EXT}; }

    void execute(const Plan& p, sdk::Call& call) const
    {
        const sdk::TensorShape& o = call.shapes[2];
        int64_t st[2][sdk::kMaxRank] = {}; // input strides aligned to out's axes (0: broadcast)
        for(int k = 0; k < 2; ++k)
        {
            const sdk::TensorShape& in = call.shapes[k];
            for(int a = 0; a < in.rank; ++a)
            {
                const int oa = o.rank - in.rank + a;
                if(in.dims[a] != 1 && in.dims[a] != o.dims[oa])
                    sdk::bad_param("%s dim %d is %lld, out has %lld", k ? "in_1" : "in_0", a,
                                   static_cast<long long>(in.dims[a]), static_cast<long long>(o.dims[oa]));
                st[k][oa] = in.dims[a] == 1 ? 0 : in.strides[a];
            }
        }
        const auto* x = static_cast<const float*>(call.ptrs[0]);
        const auto* y = static_cast<const float*>(call.ptrs[1]);
        auto* z = static_cast<float*>(call.ptrs[2]);
        int64_t idx[sdk::kMaxRank] = {}, total = 1;
        for(int a = 0; a < o.rank; ++a)
            total *= o.dims[a];
        for(int64_t n = 0; n < total; ++n)
        {
            int64_t ox = 0, oy = 0, oz = 0;
            for(int a = 0; a < o.rank; ++a)
            {
                ox += idx[a] * st[0][a];
                oy += idx[a] * st[1][a];
                oz += idx[a] * o.strides[a];
            }
            const float a = x[ox], b = y[oy];
            z[oz] = p.mode == wire::PointwiseMode::ADD ? a + b : p.mode == wire::PointwiseMode::SUB ? a - b : a * b;
            for(int a = o.rank - 1; a >= 0 && ++idx[a] == o.dims[a]; --a)
                idx[a] = 0; // odometer over out's index space
        }
    }
};

HIPDNN_CPP_PLUGIN(CppScaledAdd)
