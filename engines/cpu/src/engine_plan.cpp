// Shape rules, data types and scalars shared by the CPU engine's ops (engine_plan.hpp).

#include "engine_plan.hpp"

#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <limits>

namespace hipdnn_cpu
{

namespace
{
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
} // namespace

std::string shape_str(const Shape& s)
{
    std::string r = "[";
    for(int i = 0; i < s.rank; ++i)
        r += (i ? "," : "") + std::to_string(s.dims[i]);
    return r + "]";
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

bool shape_fail(ShapeError& err, const char* fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(err.msg, sizeof(err.msg), fmt, ap);
    va_end(ap);
    return false;
}

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
                              node.kind->name,
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
                          node.kind->name,
                          static_cast<long long>(ti.uid),
                          dims_text(eff[t], a, sizeof(a)),
                          dims_text(inferred, b, sizeof(b)));
    return true;
}

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
    case wire::DataType::FP8_E4M3:
        out = DType::F8E4M3;
        return true;
    case wire::DataType::FP8_E5M2:
        out = DType::F8E5M2;
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
    case DType::F8E4M3:
        return "FP8_E4M3";
    case DType::F8E5M2:
        return "FP8_E5M2";
    }
    return "?";
}

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

} // namespace hipdnn_cpu
