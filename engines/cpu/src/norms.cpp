// Layer and RMS normalization (forward) and reductions, fp32 in and out with
// double accumulation: both are memory bound, and double sums make the result
// the correctly rounded fp32 value for any realistic length.

#include "extra_ops.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace hipdnn_cpu
{
namespace
{

// Walks the inner (normalized) axes of one row, calling f(x_off, y_off, scale_off, bias_off).
template <class F>
inline void walk_inner(const NormProblem& p, int64_t xo, int64_t yo, int64_t so, int64_t bo, F f)
{
    const int first = p.rank - p.n;
    const int last = p.rank - 1;
    int64_t idx[kMaxRank] = {};
    const int64_t inner = p.dims[last];
    const int64_t xs = p.x_st[last], ys = p.y_st[last], ss = p.scale_st[last], bs = p.bias_st[last];
    for(;;)
    {
        for(int64_t j = 0; j < inner; ++j)
            f(xo + j * xs, yo + j * ys, so + j * ss, bo + j * bs);
        int a = last - 1;
        for(; a >= first; --a)
        {
            ++idx[a];
            xo += p.x_st[a];
            yo += p.y_st[a];
            so += p.scale_st[a];
            bo += p.bias_st[a];
            if(idx[a] < p.dims[a])
                break;
            xo -= idx[a] * p.x_st[a];
            yo -= idx[a] * p.y_st[a];
            so -= idx[a] * p.scale_st[a];
            bo -= idx[a] * p.bias_st[a];
            idx[a] = 0;
        }
        if(a < first)
            return;
    }
}

} // namespace

void run_norm(const NormProblem& p, int nthreads)
{
    const int first = p.rank - p.n;
    int64_t outer = 1, count = 1;
    for(int i = 0; i < first; ++i)
        outer *= p.dims[i];
    for(int i = first; i < p.rank; ++i)
        count *= p.dims[i];
    const bool par = outer > 1 && outer * count >= (int64_t(1) << 14);
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nthreads) if(par)
#endif
    for(int64_t r = 0; r < outer; ++r)
    {
        int64_t xo = 0, yo = 0, so = 0, bo = 0, ao = 0, io = 0;
        int64_t rem = r;
        for(int i = first - 1; i >= 0; --i)
        {
            const int64_t k = rem % p.dims[i];
            rem /= p.dims[i];
            xo += k * p.x_st[i];
            yo += k * p.y_st[i];
            so += k * p.scale_st[i];
            bo += k * p.bias_st[i];
            ao += k * p.a_st[i];
            io += k * p.b_st[i];
        }
        const float* x = p.x;
        double mean = 0.0;
        if(!p.rms)
        {
            double s = 0.0;
            walk_inner(p, xo, yo, so, bo, [&](int64_t xi, int64_t, int64_t, int64_t) { s += x[xi]; });
            mean = s / static_cast<double>(count);
        }
        double s2 = 0.0;
        walk_inner(p, xo, yo, so, bo, [&](int64_t xi, int64_t, int64_t, int64_t) {
            const double d = static_cast<double>(x[xi]) - mean;
            s2 += d * d;
        });
        const double inv = 1.0 / std::sqrt(s2 / static_cast<double>(count) + static_cast<double>(p.eps));
        walk_inner(p, xo, yo, so, bo, [&](int64_t xi, int64_t yi, int64_t si, int64_t bi) {
            double v = (static_cast<double>(x[xi]) - mean) * inv;
            if(p.scale)
                v *= p.scale[si];
            if(p.bias)
                v += p.bias[bi];
            p.y[yi] = static_cast<float>(v);
        });
        if(p.rms)
        {
            if(p.stat_a)
                p.stat_a[ao] = static_cast<float>(inv);
        }
        else
        {
            if(p.stat_a)
                p.stat_a[ao] = static_cast<float>(mean);
            if(p.stat_b)
                p.stat_b[io] = static_cast<float>(inv);
        }
    }
    (void)nthreads;
    (void)par;
}

void run_reduction(const ReductionProblem& p, int nthreads)
{
    // Output elements are the combinations of the kept axes; each walks the reduced axes.
    int kept[kMaxRank], red[kMaxRank];
    int nk = 0, nr = 0;
    int64_t outs = 1, count = 1;
    for(int i = 0; i < p.rank; ++i)
    {
        if(p.reduced[i])
        {
            red[nr++] = i;
            count *= p.dims[i];
        }
        else
        {
            kept[nk++] = i;
            outs *= p.dims[i];
        }
    }
    const bool par = outs > 1 && outs * count >= (int64_t(1) << 14);
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nthreads) if(par)
#endif
    for(int64_t o = 0; o < outs; ++o)
    {
        int64_t xo = 0, yo = 0, rem = o;
        for(int t = nk - 1; t >= 0; --t)
        {
            const int a = kept[t];
            const int64_t k = rem % p.dims[a];
            rem /= p.dims[a];
            xo += k * p.x_st[a];
            yo += k * p.y_st[a];
        }
        double acc = 0.0;
        float facc = 0.0f;
        bool nan = false;
        switch(p.op)
        {
        case ReduceOp::Mul:
        case ReduceOp::MulNoZeros:
            acc = 1.0;
            break;
        case ReduceOp::Min:
            facc = std::numeric_limits<float>::infinity();
            break;
        case ReduceOp::Max:
            facc = -std::numeric_limits<float>::infinity();
            break;
        default:
            break;
        }
        int64_t idx[kMaxRank] = {};
        int64_t off = xo;
        for(;;)
        {
            const float v = p.x[off];
            switch(p.op)
            {
            case ReduceOp::Add:
            case ReduceOp::Avg:
                acc += v;
                break;
            case ReduceOp::Mul:
                acc *= v;
                break;
            case ReduceOp::MulNoZeros:
                if(v != 0.0f)
                    acc *= v;
                break;
            case ReduceOp::Min:
                nan |= v != v;
                facc = v < facc ? v : facc;
                break;
            case ReduceOp::Max:
                nan |= v != v;
                facc = v > facc ? v : facc;
                break;
            case ReduceOp::AMax:
                nan |= v != v;
                facc = std::fabs(v) > facc ? std::fabs(v) : facc;
                break;
            case ReduceOp::Norm1:
                acc += std::fabs(static_cast<double>(v));
                break;
            case ReduceOp::Norm2:
                acc += static_cast<double>(v) * v;
                break;
            }
            int t = nr - 1;
            for(; t >= 0; --t)
            {
                const int a = red[t];
                ++idx[a];
                off += p.x_st[a];
                if(idx[a] < p.dims[a])
                    break;
                off -= idx[a] * p.x_st[a];
                idx[a] = 0;
            }
            if(t < 0)
                break;
        }
        float out;
        switch(p.op)
        {
        case ReduceOp::Min:
        case ReduceOp::Max:
        case ReduceOp::AMax:
            out = nan ? std::numeric_limits<float>::quiet_NaN() : facc;
            break;
        case ReduceOp::Avg:
            out = static_cast<float>(acc / static_cast<double>(count));
            break;
        case ReduceOp::Norm2:
            out = static_cast<float>(std::sqrt(acc));
            break;
        default:
            out = static_cast<float>(acc);
            break;
        }
        p.y[yo] = out;
    }
    (void)nthreads;
    (void)par;
}

} // namespace hipdnn_cpu
