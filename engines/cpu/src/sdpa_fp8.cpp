// The FP8 SDPA forward (Graph.sdpa_fp8, plugin API 1.5.0) and backward (Graph.sdpa_fp8_backward, API
// 1.6.0) as references (rfcs/0014-fp8-attention.md): each step of the definition computed as written,
// in double. It is what CI checks the semantics with, not a fast kernel (the GPU engines are where FP8
// pays).
//
// Forward:  S = (q k^T) attn_scale descale_q descale_k, masked as sdpa's; P = softmax(S);
//   amax_s = max P; P8 = fp8(P scale_s) in q's FP8 type; O' = (P8 v) descale_s descale_v;
//   amax_o = max |O'|; o = O' scale_o, rounded to o's type.
// Backward: delta = rowsum(dO o) descale_dO descale_o; P = exp(S - stats); P8 as above;
//   dV' = (P8^T dO) descale_s descale_dO; dP = (dO v^T) descale_dO descale_v;
//   dS = P (dP - delta) attn_scale, amax_dP = max |dS|; dS8 = fp8(dS scale_dP) in dO's FP8 type;
//   dQ' = (dS8 k) descale_dP descale_k; dK' = (dS8^T q) descale_dP descale_q; each gradient's amax
//   over |X'|, X = X' scale_X rounded to X's type.

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

// A batch's lengths and band, as the kernels' batch_band: key j is visible to query i iff i < sq,
// j < skv and lo <= j - i <= hi.
struct Band
{
    int64_t sq, skv, lo, hi;

    int64_t first(int64_t i) const
    {
        return std::max<int64_t>(0, i + lo);
    }
    int64_t end(int64_t i) const
    {
        return i < sq ? std::min(skv, i + hi + 1) : 0;
    }
    bool sees(int64_t i, int64_t j) const
    {
        return i < sq && j < skv && j - i >= lo && j - i <= hi;
    }
};

Band band_of(const SdpaProblem& p, int64_t b, int64_t sq, int64_t skv)
{
    // Read as integers (seq_len is INT32 or INT64), never through double: an INT64 length past 2^63 - 512
    // rounds to 2^63 there, whose conversion back is undefined (x86 gives INT64_MIN: an empty sequence
    // instead of a full one).
    auto length = [](const void* t, int64_t at, DType dt, int64_t cap) {
        const int64_t n = dt == DType::I64 ? static_cast<const int64_t*>(t)[at] : static_cast<const int32_t*>(t)[at];
        return std::max<int64_t>(0, std::min<int64_t>(cap, n));
    };
    Band w{sq, skv, -sq - 1, skv};
    if(p.seq_q != nullptr)
        w.sq = length(p.seq_q, b * p.seq_q_bs, p.seq_q_t, sq);
    if(p.seq_kv != nullptr)
        w.skv = length(p.seq_kv, b * p.seq_kv_bs, p.seq_kv_t, skv);
    const int64_t shift = w.skv - w.sq;
    w.hi = w.skv;
    w.lo = -w.sq - 1;
    if(p.has_hi_tl)
        w.hi = std::min(w.hi, p.hi_tl);
    if(p.has_hi_br)
        w.hi = std::min(w.hi, p.hi_br + shift);
    if(p.has_lo)
        w.lo = p.lo + (p.lo_br ? shift : 0);
    return w;
}

// Folds |x| into a running maximum; NaN is counted instead (an amax that saw one is NaN).
inline void fold_amax(double x, double& amax, int64_t& nans)
{
    if(std::isnan(x))
        ++nans;
    else
        amax = std::max(amax, std::fabs(x));
}

// Stores one row of a gradient: X' = acc descale_a descale_b (in that order, as the definition
// writes it), folded into its amax; X = X' scale in the tensor's type.
void store_row(void* base, DType t, int64_t at, int64_t stride, const double* acc, int64_t n,
               const double (&descale)[2], double scale, double& amax, int64_t& nans)
{
    for(int64_t e = 0; e < n; ++e)
    {
        const double x = acc[e] * descale[0] * descale[1];
        fold_amax(x, amax, nans);
        store_value(base, at + e * stride, t, x * scale);
    }
}

double* thread_scratch(const Plan& plan, const RunArgs& args)
{
    return reinterpret_cast<double*>(args.scratch + static_cast<size_t>(this_thread()) * plan.scratch_per_thread);
}

void store_amax(void* at, double amax, int64_t nans)
{
    *static_cast<float*>(at) = nans > 0 ? std::numeric_limits<float>::quiet_NaN() : static_cast<float>(amax);
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
        double* qrow = thread_scratch(plan, args);
        double* acc = qrow + d;
        const Band band = band_of(p, b, sq, skv);
        const int64_t j0 = band.first(i), j1 = band.end(i);
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
    store_amax(args.ptrs[node.fp8_out[0]], amax_s, nan_rows);
    store_amax(args.ptrs[node.fp8_out[1]], amax_o, nan_rows);
    return true;
}

bool run_sdpa_fp8_backward(const Plan& plan, const NodeInfo& node, const RunArgs& args)
{
    SdpaBwdProblem bp;
    fill_backward(bp, plan, node, args);
    const SdpaProblem& p = bp.fwd;
    enum Factor
    {
        DescaleQ,
        DescaleK,
        DescaleV,
        DescaleO,
        DescaleDO,
        DescaleS,
        DescaleDP,
        ScaleS,
        ScaleDQ,
        ScaleDK,
        ScaleDV,
        ScaleDP,
        kFactors
    };
    double f[kFactors];
    for(int r = 0; r < kFactors; ++r)
        f[r] = static_cast<double>(read_scalar(args.ptrs[node.fp8_in[r]], DType::F32));
    const double attn_scale = static_cast<double>(p.scale);
    const double score_scale = attn_scale * f[DescaleQ] * f[DescaleK];
    const SmallFloat& p8f = format_of(p.qt);       // P8 takes q's FP8 type
    const SmallFloat& ds8f = format_of(bp.dout_t); // dS8 takes dO's

    const int64_t b_n = p.qs.dims[0], hq = p.qs.dims[1], sq = p.qs.dims[2], d = p.qs.dims[3];
    const int64_t hk = p.ks.dims[1], skv = p.ks.dims[2], dv = p.vs.dims[3];
    const int64_t group = hq / hk;
    if(static_cast<size_t>(2 * (d + dv)) * sizeof(double) > plan.scratch_per_thread)
        return false;
    const Shape &qs = p.qs, &ks = p.ks, &vs = p.vs, &os = p.os, &dos = bp.dos, &ss = p.ss;
    auto q_at = [&](int64_t b, int64_t h, int64_t i, int64_t e) {
        return load_value(p.q, b * qs.strides[0] + h * qs.strides[1] + i * qs.strides[2] + e * qs.strides[3], p.qt);
    };
    auto k_at = [&](int64_t b, int64_t h, int64_t j, int64_t e) {
        return load_value(p.k, b * ks.strides[0] + h * ks.strides[1] + j * ks.strides[2] + e * ks.strides[3], p.kt);
    };
    auto v_at = [&](int64_t b, int64_t h, int64_t j, int64_t e) {
        return load_value(p.v, b * vs.strides[0] + h * vs.strides[1] + j * vs.strides[2] + e * vs.strides[3], p.vt);
    };
    auto do_at = [&](int64_t b, int64_t h, int64_t i, int64_t e) {
        const int64_t at = b * dos.strides[0] + h * dos.strides[1] + i * dos.strides[2] + e * dos.strides[3];
        return load_value(bp.dout, at, bp.dout_t);
    };
    auto o_at = [&](int64_t b, int64_t h, int64_t i, int64_t e) {
        return load_value(p.o, b * os.strides[0] + h * os.strides[1] + i * os.strides[2] + e * os.strides[3], p.ot);
    };
    // A query row's log-sum-exp; -inf (a row that saw no key) makes the row contribute nothing.
    auto stats_at = [&](int64_t b, int64_t h, int64_t i) {
        return static_cast<double>(p.stats[b * ss.strides[0] + h * ss.strides[1] + i * ss.strides[2]]);
    };
    // delta of a query row, from its dO and o: the same sums in the same order in both passes.
    auto delta_of = [&](int64_t b, int64_t h, int64_t i) {
        double s = 0.0;
        for(int64_t e = 0; e < dv; ++e)
            s += do_at(b, h, i, e) * o_at(b, h, i, e);
        return s * f[DescaleDO] * f[DescaleO];
    };
    // P and dS of one (query row, key) pair; the dot products in one fixed order, so that both
    // passes quantize identical values.
    struct Pair
    {
        double prob, ds;
    };
    auto pair_of = [&](int64_t b, int64_t h, int64_t hkv, int64_t i, int64_t j, double lse, double delta) {
        double s = 0.0, dp = 0.0;
        for(int64_t e = 0; e < d; ++e)
            s += q_at(b, h, i, e) * k_at(b, hkv, j, e);
        for(int64_t e = 0; e < dv; ++e)
            dp += do_at(b, h, i, e) * v_at(b, hkv, j, e);
        const double prob = std::exp(s * score_scale - lse);
        return Pair{prob, prob * (dp * f[DescaleDO] * f[DescaleV] - delta) * attn_scale};
    };
    const double neg_inf = -std::numeric_limits<double>::infinity();

    // Pass 1, one query row at a time: dQ and amax_dP.
    double amax_dq = 0.0, amax_dp = 0.0;
    int64_t nan_dq = 0, nan_dp = 0;
    const int64_t rows = b_n * hq * sq;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(args.nthreads) if(args.nthreads > 1 && rows > 1) \
    reduction(max : amax_dq, amax_dp) reduction(+ : nan_dq, nan_dp)
#endif
    for(int64_t row = 0; row < rows; ++row)
    {
        const int64_t i = row % sq, h = (row / sq) % hq, b = row / (sq * hq), hkv = h / group;
        double* acc = thread_scratch(plan, args);
        for(int64_t e = 0; e < d; ++e)
            acc[e] = 0.0;
        const Band band = band_of(p, b, sq, skv);
        const double lse = i < band.sq ? stats_at(b, h, i) : neg_inf;
        if(lse != neg_inf)
        {
            const double delta = delta_of(b, h, i);
            for(int64_t j = band.first(i); j < band.end(i); ++j)
            {
                const Pair pr = pair_of(b, h, hkv, i, j, lse, delta);
                fold_amax(pr.ds, amax_dp, nan_dp);
                const double ds8 = small_round(pr.ds * f[ScaleDP], ds8f);
                for(int64_t e = 0; e < d; ++e)
                    acc[e] += ds8 * k_at(b, hkv, j, e);
            }
        }
        const int64_t at = b * bp.dqs.strides[0] + h * bp.dqs.strides[1] + i * bp.dqs.strides[2];
        store_row(bp.dq, bp.dq_t, at, bp.dqs.strides[3], acc, d, {f[DescaleDP], f[DescaleK]}, f[ScaleDQ], amax_dq,
                  nan_dq);
    }

    // Pass 2, one key row of a kv head at a time, over every query head of its group: dK and dV.
    double amax_dk = 0.0, amax_dv = 0.0;
    int64_t nan_dk = 0, nan_dv = 0;
    const int64_t kv_rows = b_n * hk * skv;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(args.nthreads) if(args.nthreads > 1 && kv_rows > 1) \
    reduction(max : amax_dk, amax_dv) reduction(+ : nan_dk, nan_dv)
#endif
    for(int64_t kv_row = 0; kv_row < kv_rows; ++kv_row)
    {
        const int64_t j = kv_row % skv, hkv = (kv_row / skv) % hk, b = kv_row / (skv * hk);
        double* acc_k = thread_scratch(plan, args);
        double* acc_v = acc_k + d;
        for(int64_t e = 0; e < d + dv; ++e)
            acc_k[e] = 0.0;
        const Band band = band_of(p, b, sq, skv);
        for(int64_t h = hkv * group; h < (hkv + 1) * group; ++h)
            for(int64_t i = 0; i < band.sq; ++i)
            {
                if(!band.sees(i, j))
                    continue;
                const double lse = stats_at(b, h, i);
                if(lse == neg_inf)
                    continue;
                const Pair pr = pair_of(b, h, hkv, i, j, lse, delta_of(b, h, i));
                const double p8 = small_round(pr.prob * f[ScaleS], p8f);
                const double ds8 = small_round(pr.ds * f[ScaleDP], ds8f);
                for(int64_t e = 0; e < dv; ++e)
                    acc_v[e] += p8 * do_at(b, h, i, e);
                for(int64_t e = 0; e < d; ++e)
                    acc_k[e] += ds8 * q_at(b, h, i, e);
            }
        const int64_t kat = b * bp.dks.strides[0] + hkv * bp.dks.strides[1] + j * bp.dks.strides[2];
        store_row(bp.dk, bp.dk_t, kat, bp.dks.strides[3], acc_k, d, {f[DescaleDP], f[DescaleQ]}, f[ScaleDK], amax_dk,
                  nan_dk);
        const int64_t vat = b * bp.dvs.strides[0] + hkv * bp.dvs.strides[1] + j * bp.dvs.strides[2];
        store_row(bp.dv, bp.dv_t, vat, bp.dvs.strides[3], acc_v, dv, {f[DescaleS], f[DescaleDO]}, f[ScaleDV], amax_dv,
                  nan_dv);
    }
    store_amax(args.ptrs[node.fp8_out[0]], amax_dq, nan_dq);
    store_amax(args.ptrs[node.fp8_out[1]], amax_dk, nan_dk);
    store_amax(args.ptrs[node.fp8_out[2]], amax_dv, nan_dv);
    store_amax(args.ptrs[node.fp8_out[3]], amax_dp, nan_dp);
    return true;
}

} // namespace hipdnn_cpu
