// hipdnn plugin SDK, C++ layer: a plan's declared tensors, and their memory and effective shapes
// for one execute call.
//
// A plan that derives from DeclaredTensors asks the layer to do, before its execute runs, what
// every engine otherwise writes itself: match the call's device buffers to tensors by uid, check
// the call's overrides against the declared shapes (rank, 0 < dim <= declared maximum, positive
// strides, a dynamic tensor's axis order, an addressable extent) and fill in each tensor's shape
// for this call. A failed check is BAD_PARAM naming the tensor, and nothing has run.
#ifndef HIPDNN_PLUGIN_SDK_CPP_TENSORS_HPP
#define HIPDNN_PLUGIN_SDK_CPP_TENSORS_HPP

#include "Status.hpp"

#include "../EnginePluginApi.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace hipdnn_plugin_sdk
{
namespace cpp
{

constexpr int kMaxRank = 8;

// Dims and strides (in elements) of one tensor: declared, or effective for one call.
struct TensorShape
{
    int rank = 0;
    int64_t dims[kMaxRank] = {};
    int64_t strides[kMaxRank] = {};
};

// How a tensor's memory reaches the engine.
enum class Binding
{
    Buffer,  // a device buffer of the call
    Virtual, // placed by the engine (workspace); a buffer for it is refused, an override ignored
    Value    // carried in the graph; a buffer for it and an override are ignored
};

struct DeclaredTensor
{
    int64_t uid = 0;
    std::string label; // names it, uid included, in messages: "q (uid 3)", "tensor uid 3"
    Binding binding = Binding::Buffer;
    bool needs_buffer = true; // a Buffer tensor the plan reads or writes: every call must bind it
    TensorShape shape;        // declared; a dynamic tensor's dims may be -1 (given per call)
    bool dynamic = false;
    int outer_first[kMaxRank] = {}; // dynamic: the declared axis order, outermost axis first
    int64_t wildcard_max = std::numeric_limits<int64_t>::max(); // bound of an override dim declared -1
    int64_t max_stride = std::numeric_limits<int64_t>::max();
    int max_extent_log2 = 62; // an override may address at most 2^this elements
};

// Base of a plan that wants buffers and overrides resolved by the layer. Fill `declared`, then call
// seal() once; Call::shapes and Call::ptrs are then indexed like `declared`.
class DeclaredTensors
{
public:
    std::vector<DeclaredTensor> declared;

    void seal()
    {
        by_uid_.clear();
        has_dynamic_ = false;
        for(size_t i = 0; i < declared.size(); ++i)
        {
            by_uid_.emplace_back(declared[i].uid, static_cast<int>(i));
            has_dynamic_ = has_dynamic_ || (declared[i].dynamic && declared[i].binding == Binding::Buffer);
        }
        std::sort(by_uid_.begin(), by_uid_.end());
    }

    // Index in `declared` of the tensor with this uid, or -1.
    int index_of(int64_t uid) const
    {
        const auto it = std::lower_bound(by_uid_.begin(), by_uid_.end(), std::make_pair(uid, -1));
        return (it != by_uid_.end() && it->first == uid) ? it->second : -1;
    }

    // Some tensor's dims and strides exist only per call: only the override entry runs the plan.
    bool has_dynamic() const { return has_dynamic_; }

private:
    std::vector<std::pair<int64_t, int>> by_uid_;
    bool has_dynamic_ = false;
};

// The overrides of one call, as the override entry received them (count 0 through the plain entry).
struct Overrides
{
    uint32_t count = 0;
    const int64_t* uids = nullptr;
    const uint32_t* lengths = nullptr;
    const int64_t* const* shapes = nullptr;
    const int64_t* const* strides = nullptr;
};

namespace detail
{

// ptrs[i] = the call's buffer for declared[i] (nullptr for virtual and by-value tensors).
inline void bind_buffers(const DeclaredTensors& t, const hipdnnPluginDeviceBuffer_t* buffers, uint32_t n, void** ptrs)
{
    const size_t nt = t.declared.size();
    std::fill(ptrs, ptrs + nt, nullptr);
    for(uint32_t i = 0; i < n; ++i)
    {
        const long long uid = static_cast<long long>(buffers[i].uid);
        const int k = t.index_of(buffers[i].uid);
        if(k < 0)
            bad_param("device buffer %u has uid %lld, which is not a tensor of the graph", i, uid);
        const DeclaredTensor& d = t.declared[k];
        if(d.binding == Binding::Virtual)
            bad_param("device buffer %u has uid %lld, a virtual tensor (the engine places it)", i, uid);
        if(d.binding == Binding::Value)
            continue; // the graph carries the value; a buffer for it is ignored
        if(buffers[i].ptr == nullptr)
            bad_param("device buffer for %s is NULL", d.label.c_str());
        if(ptrs[k] != nullptr)
            bad_param("%s has more than one device buffer", d.label.c_str());
        ptrs[k] = buffers[i].ptr;
    }
    for(size_t k = 0; k < nt; ++k)
    {
        const DeclaredTensor& d = t.declared[k];
        if(d.binding == Binding::Buffer && d.needs_buffer && ptrs[k] == nullptr)
            bad_param("no device buffer for %s", d.label.c_str());
    }
}

// Whether sum((dim - 1) * stride) + 1 stays within 2^log2 elements.
inline bool extent_fits(const TensorShape& s, int log2)
{
    int64_t total = 1;
    for(int i = 0; i < s.rank; ++i)
    {
        int64_t term = 0;
        if(__builtin_mul_overflow(s.dims[i] - 1, s.strides[i], &term) || __builtin_add_overflow(total, term, &total))
            return false;
    }
    return total <= (int64_t(1) << log2);
}

// eff[i] = declared[i]'s shape for this call; seen[i] = whether the call overrode it.
inline void apply_overrides(const DeclaredTensors& t, const Overrides& ov, TensorShape* eff, char* seen)
{
    const size_t nt = t.declared.size();
    for(size_t k = 0; k < nt; ++k)
    {
        eff[k] = t.declared[k].shape;
        seen[k] = 0;
    }
    for(uint32_t i = 0; i < ov.count; ++i)
    {
        const long long uid = static_cast<long long>(ov.uids[i]);
        const int k = t.index_of(ov.uids[i]);
        if(k < 0)
            bad_param("override %u names uid %lld, which is not a tensor of the graph", i, uid);
        if(seen[k])
            bad_param("tensor uid %lld is overridden more than once", uid);
        seen[k] = 1;
        const DeclaredTensor& d = t.declared[k];
        if(d.binding != Binding::Buffer)
            continue; // virtual shapes are re-inferred by the engine; scalars stay scalars
        const char* nm = d.label.c_str();
        if(ov.lengths[i] != static_cast<uint32_t>(d.shape.rank))
            bad_param("override of %s has rank %u, declared rank is %d", nm, ov.lengths[i], d.shape.rank);
        if(ov.shapes[i] == nullptr || ov.strides[i] == nullptr)
            bad_param("override of %s has NULL dims or strides", nm);
        TensorShape& s = eff[k];
        for(int a = 0; a < s.rank; ++a)
        {
            const int64_t dim = ov.shapes[i][a], st = ov.strides[i][a];
            // Declared dims are maxima; a dynamic tensor's wildcard is bounded by what the engine indexes.
            const bool wild = d.shape.dims[a] < 0;
            const int64_t max_dim = wild ? d.wildcard_max : d.shape.dims[a];
            if(dim <= 0)
                bad_param("override of %s: dim %d is %lld, must be positive", nm, a, static_cast<long long>(dim));
            if(dim > max_dim)
                bad_param("override of %s: dim %d is %lld, more than %s %lld (%s)", nm, a, static_cast<long long>(dim),
                          wild ? "the bound" : "the declared", static_cast<long long>(max_dim),
                          wild ? "of a wildcard" : "the declared maximum");
            if(st <= 0 || st > d.max_stride)
                bad_param("override of %s: stride %d is %lld, must be in 1..%lld", nm, a,
                          static_cast<long long>(st), static_cast<long long>(d.max_stride));
            s.dims[a] = dim;
            s.strides[a] = st;
        }
        if(d.dynamic)
        {
            // The strides must keep the declared axis order: walking it from the outermost axis in, no
            // stride may exceed the one before (axes of length 1 place nothing and are skipped).
            int64_t prev = -1;
            int prev_axis = -1;
            for(int j = 0; j < s.rank; ++j)
            {
                const int ax = d.outer_first[j];
                if(s.dims[ax] == 1)
                    continue;
                if(prev >= 0 && s.strides[ax] > prev)
                    bad_param("override of dynamic %s: stride %lld of axis %d exceeds stride %lld of axis "
                              "%d, which the declared axis order puts outside it",
                              nm, static_cast<long long>(s.strides[ax]), ax, static_cast<long long>(prev),
                              prev_axis);
                prev = s.strides[ax];
                prev_axis = ax;
            }
        }
        if(!extent_fits(s, d.max_extent_log2))
            bad_param("override of %s: dims and strides address more than 2^%d elements", nm,
                      d.max_extent_log2);
    }
    for(size_t k = 0; k < nt; ++k)
    {
        const DeclaredTensor& d = t.declared[k];
        if(d.dynamic && d.binding == Binding::Buffer && d.needs_buffer && !seen[k])
            bad_param("dynamic %s has no override: its dims and strides are known only from the "
                      "override of each call",
                      d.label.c_str());
    }
}

} // namespace detail
} // namespace cpp
} // namespace hipdnn_plugin_sdk

#endif // HIPDNN_PLUGIN_SDK_CPP_TENSORS_HPP
