// hipdnn plugin SDK, C++ layer: ragged (packed) tensors and paged K/V caches (plugin API 1.3.0,
// rfcs/0012-ragged-and-paged.md).
//
// Both are data that only the call knows: a ragged tensor's per-batch start offsets and a page
// table's block numbers arrive as tensors of the variant pack. Whatever they hold, an engine must
// never address memory outside a tensor's extent (the region its dims and strides at this call's
// shape span, which the host proved lies inside the caller's buffer). These helpers read such data
// on the host, check every value an engine will use against that extent, and copy the checked
// values out, so that the kernels only ever see validated numbers (the caller's memory may change
// after the check; the copy does not). A failure names the tensor, the batch (and entry) and the
// value, for an execute-time BAD_PARAM.
#ifndef HIPDNN_PLUGIN_SDK_CPP_RAGGED_HPP
#define HIPDNN_PLUGIN_SDK_CPP_RAGGED_HPP

#include "Status.hpp"
#include "Tensors.hpp"

#include "../wire/graph_generated.h"

#include <cstdint>
#include <cstring>
#include <string>

namespace hipdnn_plugin_sdk
{
namespace cpp
{

// The uid of the tensor's ragged-offset tensor, or -1 when it has none.
inline int64_t ragged_offset_uid(const hipdnn::wire::TensorAttributes& t)
{
    const auto uid = t.ragged_offset_tensor_uid();
    return uid.has_value() ? uid.value() : -1;
}

// Whether any tensor of the graph is ragged.
inline bool graph_has_ragged_tensors(const hipdnn::wire::Graph& g)
{
    if(g.tensors() == nullptr)
        return false;
    for(const auto* t : *g.tensors())
        if(t != nullptr && t->ragged_offset_tensor_uid().has_value())
            return true;
    return false;
}

namespace detail
{
inline int64_t load_index(const void* base, bool is_int64, int64_t at)
{
    if(is_int64)
    {
        int64_t v;
        std::memcpy(&v, static_cast<const char*>(base) + at * 8, sizeof v);
        return v;
    }
    int32_t v;
    std::memcpy(&v, static_cast<const char*>(base) + at * 4, sizeof v);
    return v;
}

// Largest element offset + 1 of dims/strides, or -1 on overflow.
inline int64_t span_of(int rank, const int64_t* dims, const int64_t* strides)
{
    int64_t e = 1;
    for(int i = 0; i < rank; ++i)
    {
        if(dims[i] <= 0)
            return 0;
        int64_t t;
        if(__builtin_mul_overflow(dims[i] - 1, strides[i], &t) || __builtin_add_overflow(e, t, &e))
            return -1;
    }
    return e;
}
} // namespace detail

// Ragged offsets of a tensor `s` (its shape at this call: [B, ...], batch b's rows along axis
// `row_axis`): reads offsets[0..B] (INT32 or INT64 elements, `stride` apart) and, for every batch b
// with rows[b] > 0, checks that the memory batch b addresses, offset[b] + the span of
// [1, dims[1..], with dims[row_axis] = rows[b]] at s's strides, lies inside [0, extent(s)). out[b]
// is offset[b] (0 for an empty batch, whose value is not used). Returns "" or why not, naming
// `label`, the batch and the value. rows[b] must be in [0, dims[row_axis]].
inline std::string read_ragged_offsets(const void* offsets,
                                       bool is_int64,
                                       int64_t stride,
                                       const TensorShape& s,
                                       int row_axis,
                                       const int64_t* rows,
                                       int64_t* out,
                                       const char* label)
{
    const int64_t batch = s.dims[0];
    const int64_t extent = detail::span_of(s.rank, s.dims, s.strides);
    if(extent < 0)
        return format("%s: its extent overflows int64", label);
    for(int64_t b = 0; b < batch; ++b)
    {
        const int64_t off = detail::load_index(offsets, is_int64, b * stride);
        out[b] = 0;
        if(rows[b] <= 0)
            continue;
        TensorShape one = s;
        one.dims[0] = 1;
        one.dims[row_axis] = rows[b];
        const int64_t span = detail::span_of(one.rank, one.dims, one.strides);
        int64_t end = 0;
        if(off < 0 || span < 0 || __builtin_add_overflow(off, span, &end) || end > extent)
            return format("%s: ragged offset %lld of batch %lld puts its %lld rows at elements [%lld, %lld), outside "
                          "the tensor's %lld elements",
                          label,
                          static_cast<long long>(off),
                          static_cast<long long>(b),
                          static_cast<long long>(rows[b]),
                          static_cast<long long>(off),
                          static_cast<long long>(off < 0 || span < 0 || end < off ? off : end),
                          static_cast<long long>(extent));
        out[b] = off;
    }
    return "";
}

// A page table [B, 1, max_blocks, 1] (INT32, strides `st`): for every batch b, the entries
// j < ceil(keys[b] / block_size) name blocks in [0, num_blocks); they are copied to
// out[b * max_blocks + j] (the rest of out is left alone, never read). Returns "" or why not,
// naming `label`, the batch, the entry and the value. keys[b] <= max_blocks * block_size.
inline std::string read_page_table(const int32_t* table,
                                   const TensorShape& st,
                                   int64_t block_size,
                                   int64_t num_blocks,
                                   const int64_t* keys,
                                   int32_t* out,
                                   const char* label)
{
    const int64_t batch = st.dims[0], max_blocks = st.dims[2];
    for(int64_t b = 0; b < batch; ++b)
    {
        const int64_t used = (keys[b] + block_size - 1) / block_size;
        if(used > max_blocks)
            return format("%s: batch %lld has %lld keys, more than its %lld blocks of %lld hold",
                          label,
                          static_cast<long long>(b),
                          static_cast<long long>(keys[b]),
                          static_cast<long long>(max_blocks),
                          static_cast<long long>(block_size));
        for(int64_t j = 0; j < used; ++j)
        {
            const int32_t e = table[b * st.strides[0] + j * st.strides[2]];
            if(e < 0 || e >= num_blocks)
                return format("%s: batch %lld, entry %lld names block %d, outside [0, %lld) (the cache's blocks)",
                              label,
                              static_cast<long long>(b),
                              static_cast<long long>(j),
                              static_cast<int>(e),
                              static_cast<long long>(num_blocks));
            out[b * max_blocks + j] = e;
        }
    }
    return "";
}

} // namespace cpp
} // namespace hipdnn_plugin_sdk

#endif // HIPDNN_PLUGIN_SDK_CPP_RAGGED_HPP
