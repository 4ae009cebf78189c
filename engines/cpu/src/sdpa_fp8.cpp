// The FP8 SDPA forward (Graph.sdpa_fp8, plugin API 1.5.0; rfcs/0014-fp8-attention.md), as a reference:
// each step of the definition computed as written, in double, one query row at a time. It is what CI
// checks the semantics with, not a fast kernel (the GPU engines are where FP8 pays).
//
//   S = (q k^T) attn_scale descale_q descale_k, masked as sdpa's; P = softmax(S); amax_s = max P;
//   P8 = fp8(P scale_s) in q's FP8 type; O' = (P8 v) descale_s descale_v; amax_o = max |O'|;
//   o = O' scale_o, rounded to o's type.

#include "op_attention.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

#include <cmath>
#include <cstring>
#include <limits>

namespace hipdnn_cpu
{
namespace
{

// A small binary float format: exponent and mantissa bits, bias, largest finite value, and whether
// the top exponent holds inf / NaN (IEEE-like: E5M2, fp16) or numbers (E4M3 "fn": no infinities,
// S.1111.111 is NaN, 448 the largest).
struct SmallFloat
{
    int exp_bits;
    int man_bits;
    int bias;
    bool ieee_top;
    double max_finite;
    bool saturates; // rounding past max_finite gives max_finite (FP8), else infinity (fp16)
};

constexpr SmallFloat kE4M3 = {4, 3, 7, false, 448.0, true};
constexpr SmallFloat kE5M2 = {5, 2, 15, true, 57344.0, true};
constexpr SmallFloat kHalf = {5, 10, 15, true, 65504.0, false};

int this_thread()
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

const SmallFloat& format_of(DType t)
{
    return t == DType::F8E5M2 ? kE5M2 : kE4M3;
}

double small_value(uint32_t bits, const SmallFloat& f)
{
    const int e = static_cast<int>(bits >> f.man_bits) & ((1 << f.exp_bits) - 1);
    const int m = static_cast<int>(bits) & ((1 << f.man_bits) - 1);
    const double sign = (bits >> (f.exp_bits + f.man_bits)) & 1u ? -1.0 : 1.0;
    const int top = (1 << f.exp_bits) - 1;
    if(f.ieee_top && e == top)
        return m == 0 ? sign * std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
    if(!f.ieee_top && e == top && m == (1 << f.man_bits) - 1)
        return std::numeric_limits<double>::quiet_NaN();
    if(e == 0)
        return sign * std::ldexp(static_cast<double>(m), 1 - f.bias - f.man_bits);
    return sign * std::ldexp(static_cast<double>(m + (1 << f.man_bits)), e - f.bias - f.man_bits);
}

// x rounded to the nearest value of the format, ties to even. Past the largest finite value an FP8
// result saturates there (the GPUs' conversions: cvt.rn.satfinite); fp16 goes to infinity from
// 65520 on, as IEEE rounding does. NaN stays NaN.
double small_round(double x, const SmallFloat& f)
{
    if(std::isnan(x))
        return x;
    if(std::isinf(x))
        return f.saturates ? std::copysign(f.max_finite, x) : x;
    const double ax = std::fabs(x);
    const int min_exp = 1 - f.bias; // of the normal numbers
    int e = 0;
    std::frexp(ax, &e); // ax = fr 2^e, fr in [0.5, 1)
    const int q = std::max(e - 1, min_exp) - f.man_bits;
    const double r = std::ldexp(std::nearbyint(std::ldexp(ax, -q)), q); // the default mode: ties to even
    if(r > f.max_finite)
        return std::copysign(f.saturates ? f.max_finite : std::numeric_limits<double>::infinity(), x);
    return std::copysign(r, x);
}

// The bits of v, a value of the format (small_round's result).
uint32_t small_bits(double v, const SmallFloat& f)
{
    const uint32_t sign = std::signbit(v) ? 1u << (f.exp_bits + f.man_bits) : 0u;
    const uint32_t top = (1u << f.exp_bits) - 1u;
    if(std::isnan(v))
        return sign | (top << f.man_bits) | ((1u << f.man_bits) - 1u);
    if(std::isinf(v))
        return sign | (top << f.man_bits);
    const double av = std::fabs(v);
    if(av == 0.0)
        return sign;
    const int min_exp = 1 - f.bias;
    int e = 0;
    std::frexp(av, &e);
    const int ue = e - 1; // av = 1.m 2^ue for a normal number
    if(ue < min_exp)      // subnormal: m 2^(min_exp - man_bits)
        return sign | static_cast<uint32_t>(std::ldexp(av, f.man_bits - min_exp));
    const uint32_t m = static_cast<uint32_t>(std::ldexp(av, f.man_bits - ue)) - (1u << f.man_bits);
    return sign | (static_cast<uint32_t>(ue + f.bias) << f.man_bits) | m;
}

double load_value(const void* base, int64_t i, DType t)
{
    switch(t)
    {
    case DType::F8E4M3:
    case DType::F8E5M2:
        return small_value(static_cast<const uint8_t*>(base)[i], format_of(t));
    case DType::I32:
        return static_cast<double>(static_cast<const int32_t*>(base)[i]);
    case DType::I64:
        return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    default: // the float types, as the engine reads its scalars
        return read_scalar(static_cast<const char*>(base) + i * static_cast<int64_t>(dtype_size(t)), t);
    }
}

void store_value(void* base, int64_t i, DType t, double x)
{
    switch(t)
    {
    case DType::F8E4M3:
    case DType::F8E5M2:
    {
        const SmallFloat& f = format_of(t);
        static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(small_bits(small_round(x, f), f));
        return;
    }
    case DType::F16:
        // through float first, as the other kernels' fp16 outputs are rounded from float
        static_cast<uint16_t*>(base)[i]
            = static_cast<uint16_t>(small_bits(small_round(static_cast<float>(x), kHalf), kHalf));
        return;
    case DType::BF16:
    {
        const float v = static_cast<float>(x);
        uint32_t u;
        std::memcpy(&u, &v, sizeof u);
        static_cast<uint16_t*>(base)[i] = (u & 0x7fffffffu) > 0x7f800000u
                                              ? static_cast<uint16_t>((u >> 16) | 0x40u)
                                              : static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
        return;
    }
    default:
        static_cast<float*>(base)[i] = static_cast<float>(x);
        return;
    }
}

} // namespace

bool run_sdpa_fp8(const Plan& plan, const NodeInfo& node, const RunArgs& args)
{
    SdpaProblem p;
    fill_attention(p, plan, node, args, node.out[0], node.out[1]);
    double factor[6];
    for(int r = 0; r < 6; ++r)
        factor[r] = static_cast<double>(read_scalar(args.ptrs[node.fp8_in[r]], DType::F32));
    const double descale_q = factor[0], descale_k = factor[1], descale_v = factor[2], descale_s = factor[3];
    const double scale_s = factor[4], scale_o = factor[5];
    const double score_scale = static_cast<double>(p.scale) * descale_q * descale_k;
    const SmallFloat& pf = format_of(p.qt); // P8 takes q's FP8 type

    const int64_t b_n = p.qs.dims[0], hq = p.qs.dims[1], sq = p.qs.dims[2], d = p.qs.dims[3];
    const int64_t hk = p.ks.dims[1], skv = p.ks.dims[2], dv = p.vs.dims[3];
    const int64_t group = hq / hk;
    const int64_t rows = b_n * hq * sq;
    const size_t per_thread = static_cast<size_t>(d + dv) * sizeof(double);
    if(per_thread > plan.scratch_per_thread)
        return false;
    double amax_s = 0.0, amax_o = 0.0;
    int64_t nan_rows = 0; // rows whose softmax is NaN: the amax are NaN too
#ifdef _OPENMP
    const bool par = args.nthreads > 1 && rows > 1;
#pragma omp parallel for schedule(static) num_threads(args.nthreads) if(par) \
    reduction(max : amax_s, amax_o) reduction(+ : nan_rows)
#endif
    for(int64_t row = 0; row < rows; ++row)
    {
        const int64_t i = row % sq, h = (row / sq) % hq, b = row / (sq * hq), hkv = h / group;
        char* slice = args.scratch + static_cast<size_t>(this_thread()) * plan.scratch_per_thread;
        double* qrow = reinterpret_cast<double*>(slice);
        double* acc = qrow + d;
        // This batch's lengths and band (as the kernels' batch_band): key j visible iff lo <= j - i <= hi.
        int64_t sq_b = sq, skv_b = skv;
        auto length = [](const void* t, int64_t at, DType dt, int64_t cap) {
            return std::max<int64_t>(0, std::min<int64_t>(cap, static_cast<int64_t>(load_value(t, at, dt))));
        };
        if(p.seq_q != nullptr)
            sq_b = length(p.seq_q, b * p.seq_q_bs, p.seq_q_t, sq);
        if(p.seq_kv != nullptr)
            skv_b = length(p.seq_kv, b * p.seq_kv_bs, p.seq_kv_t, skv);
        const int64_t shift = skv_b - sq_b;
        int64_t hi = skv_b, lo = -sq_b - 1;
        if(p.has_hi_tl)
            hi = std::min(hi, p.hi_tl);
        if(p.has_hi_br)
            hi = std::min(hi, p.hi_br + shift);
        if(p.has_lo)
            lo = p.lo + (p.lo_br ? shift : 0);
        const int64_t j0 = std::max<int64_t>(0, i + lo), j1 = i < sq_b ? std::min(skv_b, i + hi + 1) : 0;
        const int64_t qoff = b * p.qs.strides[0] + h * p.qs.strides[1] + i * p.qs.strides[2];
        for(int64_t e = 0; e < d; ++e)
            qrow[e] = load_value(p.q, qoff + e * p.qs.strides[3], p.qt);
        const int64_t koff = b * p.ks.strides[0] + hkv * p.ks.strides[1];
        const int64_t voff = b * p.vs.strides[0] + hkv * p.vs.strides[1];
        auto score = [&](int64_t j) {
            double s = 0.0;
            for(int64_t e = 0; e < d; ++e)
                s += qrow[e] * load_value(p.k, koff + j * p.ks.strides[2] + e * p.ks.strides[3], p.kt);
            return s * score_scale;
        };
        // Pass 1: the row's maximum and sum of exponentials (online).
        double m = -std::numeric_limits<double>::infinity(), l = 0.0;
        bool poisoned = false; // a NaN score, or an infinite maximum: the row's softmax is NaN
        for(int64_t j = j0; j < j1; ++j)
        {
            const double s = score(j);
            poisoned = poisoned || std::isnan(s);
            if(s > m)
            {
                l = l * std::exp(m - s) + 1.0;
                m = s;
            }
            else
                l += std::exp(s - m);
        }
        poisoned = poisoned || m == std::numeric_limits<double>::infinity();
        const double nan = std::numeric_limits<double>::quiet_NaN();
        for(int64_t e = 0; e < dv; ++e)
            acc[e] = poisoned ? nan : 0.0;
        nan_rows += poisoned ? 1 : 0;
        const bool live = !poisoned && j1 > j0 && l > 0.0 && std::isfinite(m);
        // Pass 2: P, its maximum, P8 and P8 v.
        if(live)
            for(int64_t j = j0; j < j1; ++j)
            {
                const double prob = std::exp(score(j) - m) / l;
                amax_s = std::max(amax_s, prob);
                const double p8 = small_round(prob * scale_s, pf); // a 0 still multiplies v: NaN stays NaN
                const int64_t vrow = voff + j * p.vs.strides[2];
                for(int64_t e = 0; e < dv; ++e)
                    acc[e] += p8 * load_value(p.v, vrow + e * p.vs.strides[3], p.vt);
            }
        const int64_t ooff = b * p.os.strides[0] + h * p.os.strides[1] + i * p.os.strides[2];
        for(int64_t e = 0; e < dv; ++e)
        {
            const double o = acc[e] * descale_s * descale_v;
            amax_o = std::max(amax_o, std::fabs(o));
            store_value(p.o, ooff + e * p.os.strides[3], p.ot, o * scale_o);
        }
        if(p.stats != nullptr)
            p.stats[b * p.ss.strides[0] + h * p.ss.strides[1] + i * p.ss.strides[2]]
                = poisoned ? static_cast<float>(nan)
                : live     ? static_cast<float>(m + std::log(l))
                           : -std::numeric_limits<float>::infinity();
    }
    const float nan = std::numeric_limits<float>::quiet_NaN();
    *static_cast<float*>(args.ptrs[node.fp8_out[0]]) = nan_rows > 0 ? nan : static_cast<float>(amax_s);
    *static_cast<float*>(args.ptrs[node.fp8_out[1]]) = nan_rows > 0 ? nan : static_cast<float>(amax_o);
    return true;
}

} // namespace hipdnn_cpu
