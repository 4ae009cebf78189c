// Flash-style SDPA forward, compiled once per ISA (see sdpa_fwd.hpp); the
// includer defines HIPDNN_SDPA_NS. Everything here has internal linkage or
// lives in that namespace, so the two builds never share a symbol.
//
// Layout. A work item is (batch, head, block of up to 4 panels of 24 queries).
// Each panel keeps, in per-thread scratch:
//   Qt [D][24]  the queries transposed, pre-multiplied by scale * log2(e)
//   Ot [Dv][24] the unnormalised output, transposed
//   m, l [24]   running max (log2 units) and running sum of exp2
// Keys are taken in tiles of 64. For each (tile, panel) pair that the masks
// leave any visible key in:
//   St [keys][24] = K_tile . Qt      (scores, transposed: one row per key)
//   softmax update down the key rows (every op is a vertical 8-lane op: no
//   horizontal reductions; the per-query max and sum live in vector lanes)
//   Ot = Ot * alpha + V_tile^T . St  (St now holds exp2(s - m))
// Both products use the same register-blocked micro kernel: 4 rows of a
// strided source (K rows over d, or V columns over keys) broadcast one
// element at a time against 3 vectors of the panel, 12 accumulators. K and V
// are read in place at any strides (fp32); fp16 / bf16 tiles are first
// widened into scratch.

#include "sdpa_fwd.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

// 32-byte vectors are passed between internal (always inlined) helpers only;
// the baseline build's note about their ABI does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace hipdnn_cpu
{
namespace HIPDNN_SDPA_NS
{
namespace
{

typedef float V __attribute__((vector_size(32)));
typedef uint32_t VU __attribute__((vector_size(32)));
constexpr int W = 8;
constexpr int NV = static_cast<int>(kSdpaQw) / W; // 3
constexpr int QW = static_cast<int>(kSdpaQw);
constexpr int MR = 4;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr float kInf = std::numeric_limits<float>::infinity();

inline int64_t imin(int64_t a, int64_t b)
{
    return a < b ? a : b;
}
inline int64_t imax(int64_t a, int64_t b)
{
    return a > b ? a : b;
}
inline V vload(const float* p)
{
    V v;
    std::memcpy(&v, p, sizeof(v));
    return v;
}
inline void vstore(float* p, V v)
{
    std::memcpy(p, &v, sizeof(v));
}
inline V vset(float x)
{
    return V{x, x, x, x, x, x, x, x};
}
inline V vmax(V a, V b)
{
    return a > b ? a : b;
}

// 2^x for x <= 0 (x = -inf gives 0, NaN stays NaN). x = n + f with n an
// integer and |f| <= 1/2; 2^f by its Taylor series in f ln2 to degree 7
// (truncation < 6e-9 relative); 2^n added into the exponent bits. Inputs
// below -125 (results below 2.4e-38) flush to 0.
inline V exp2_nonpos(V x)
{
    const V lo = vset(-125.0f);
    const V xc = x < lo ? lo : x;
    const V magic = vset(12582912.0f); // 1.5 * 2^23: adding it rounds to an integer
    const V t = xc + magic;
    const V n = t - magic;
    const V f = xc - n;
    V p = vset(1.5252733804059841e-05f);
    p = p * f + 1.5403530393381609e-04f;
    p = p * f + 1.3333558146428443e-03f;
    p = p * f + 9.6181291076284772e-03f;
    p = p * f + 5.5504108664821580e-02f;
    p = p * f + 2.4022650695910071e-01f;
    p = p * f + 6.9314718055994531e-01f;
    p = p * f + 1.0f;
    // Unsigned lanes: a NaN input makes these words arbitrary, and they must wrap, not overflow.
    const VU ni = (VU)t - (VU)magic;
    const VU bits = (VU)p + (ni << 23);
    const V r = (V)bits;
    return x < lo ? V{} : r;
}

// ------------------------------------------------------ element access ----
inline float half_to_float(uint16_t h)
{
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t bits;
    if(exp == 0x1fu)
        bits = sign | 0x7f800000u | (man << 13); // inf / nan
    else if(exp != 0)
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    else if(man == 0)
        bits = sign;
    else
    {
        // subnormal half: normalise
        exp = 113;
        while((man & 0x400u) == 0)
        {
            man <<= 1;
            --exp;
        }
        bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
}

// Round to nearest even; overflow gives inf, NaN stays NaN.
inline uint16_t float_to_half(float f)
{
    uint32_t x;
    std::memcpy(&x, &f, sizeof(x));
    const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
    const uint32_t ax = x & 0x7fffffffu;
    if(ax >= 0x7f800000u)
        return static_cast<uint16_t>(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
    if(ax >= 0x477ff000u) // rounds to >= 65520: inf
        return static_cast<uint16_t>(sign | 0x7c00u);
    if(ax < 0x38800000u) // below the smallest normal half: subnormal or 0
    {
        if(ax < 0x33000000u) // below half of the smallest subnormal
            return sign;
        const uint32_t e = ax >> 23;
        const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
        const uint32_t shift = 126u - e; // 14..24
        uint32_t r = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1u);
        const uint32_t half = 1u << (shift - 1u);
        if(rem > half || (rem == half && (r & 1u)))
            ++r;
        return static_cast<uint16_t>(sign | r);
    }
    uint32_t r = ax - 0x38000000u; // rebias exponent 127 -> 15
    const uint32_t rem = r & 0x1fffu;
    r >>= 13;
    if(rem > 0x1000u || (rem == 0x1000u && (r & 1u)))
        ++r;
    return static_cast<uint16_t>(sign | r);
}

inline float bf16_to_float(uint16_t h)
{
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
}

inline uint16_t float_to_bf16(float f)
{
    uint32_t x;
    std::memcpy(&x, &f, sizeof(x));
    if((x & 0x7fffffffu) > 0x7f800000u)
        return static_cast<uint16_t>((x >> 16) | 0x40u); // quiet NaN
    x += 0x7fffu + ((x >> 16) & 1u);
    return static_cast<uint16_t>(x >> 16);
}

inline float load_elem(const void* base, int64_t i, DType t)
{
    switch(t)
    {
    case DType::F16:
        return half_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::BF16:
        return bf16_to_float(static_cast<const uint16_t*>(base)[i]);
    case DType::I32:
        return static_cast<float>(static_cast<const int32_t*>(base)[i]);
    case DType::I64:
        return static_cast<float>(static_cast<const int64_t*>(base)[i]);
    case DType::F32:
    default:
        return static_cast<const float*>(base)[i];
    }
}

inline int64_t load_int(const void* base, int64_t i, DType t)
{
    if(t == DType::I64)
        return static_cast<const int64_t*>(base)[i];
    if(t == DType::I32)
        return static_cast<const int32_t*>(base)[i];
    return static_cast<int64_t>(load_elem(base, i, t));
}

inline void store_elem(void* base, int64_t i, DType t, float x)
{
    switch(t)
    {
    case DType::F16:
        static_cast<uint16_t*>(base)[i] = float_to_half(x);
        break;
    case DType::BF16:
        static_cast<uint16_t*>(base)[i] = float_to_bf16(x);
        break;
    default:
        static_cast<float*>(base)[i] = x;
        break;
    }
}

// ------------------------------------------------------- micro kernel ----
// c[r][0..QW) = (cs ? c[r][..] * cs : 0) + sum_k a[r*ars + k*aks] * b[k*QW + 0..QW)
// for r < R: R rows of a strided source against one 24-wide panel.
template <int R>
inline void panel_kernel(int64_t n, const float* a, int64_t ars, int64_t aks, const float* b, float* c, const V* cs)
{
    V acc[R][NV];
    for(int r = 0; r < R; ++r)
        for(int v = 0; v < NV; ++v)
            acc[r][v] = cs ? vload(c + r * QW + v * W) * cs[v] : V{};
    const float* ar[R];
    for(int r = 0; r < R; ++r)
        ar[r] = a + r * ars;
    int64_t off = 0;
#pragma GCC unroll 2
    for(int64_t k = 0; k < n; ++k, off += aks)
    {
        const float* bk = b + k * QW;
        V bv[NV];
        for(int v = 0; v < NV; ++v)
            bv[v] = vload(bk + v * W);
        for(int r = 0; r < R; ++r)
        {
            const V av = vset(ar[r][off]);
            for(int v = 0; v < NV; ++v)
                acc[r][v] += av * bv[v];
        }
    }
    for(int r = 0; r < R; ++r)
        for(int v = 0; v < NV; ++v)
            vstore(c + r * QW + v * W, acc[r][v]);
}

inline void panel_gemm(int64_t rows, int64_t n, const float* a, int64_t ars, int64_t aks, const float* b, float* c, const V* cs)
{
    int64_t r = 0;
    for(; r + MR <= rows; r += MR)
        panel_kernel<MR>(n, a + r * ars, ars, aks, b, c + r * QW, cs);
    switch(rows - r)
    {
    case 3:
        panel_kernel<3>(n, a + r * ars, ars, aks, b, c + r * QW, cs);
        break;
    case 2:
        panel_kernel<2>(n, a + r * ars, ars, aks, b, c + r * QW, cs);
        break;
    case 1:
        panel_kernel<1>(n, a + r * ars, ars, aks, b, c + r * QW, cs);
        break;
    default:
        break;
    }
}

// ALiBi slope of head h of nh (the usual geometric sequence, extended for
// head counts that are not a power of two).
inline float alibi_slope(int64_t h, int64_t nh)
{
    int64_t n = 1;
    while(n * 2 <= nh)
        n *= 2;
    if(h < n)
        return std::pow(2.0f, -8.0f * static_cast<float>(h + 1) / static_cast<float>(n));
    return std::pow(2.0f, -4.0f * static_cast<float>(2 * (h - n) + 1) / static_cast<float>(n));
}

} // namespace

void run_item(const SdpaRun& run, int64_t w, float* ws)
{
    const SdpaProblem& p = *run.p;
    const int64_t qb = run.nqb - 1 - (w % run.nqb); // later (heavier under causal) blocks first
    const int64_t bh = w / run.nqb;
    const int64_t h = bh % run.hq;
    const int64_t b = bh / run.hq;
    const int64_t hk = h / run.group;
    const int64_t d = run.d, dv = run.dv;

    // Per-batch lengths and the visible band (relative to the query index).
    int64_t sq_b = run.sq, skv_b = run.skv;
    if(p.seq_q != nullptr)
        sq_b = imax(0, imin(run.sq, load_int(p.seq_q, b * p.seq_q_bs, p.seq_q_t)));
    if(p.seq_kv != nullptr)
        skv_b = imax(0, imin(run.skv, load_int(p.seq_kv, b * p.seq_kv_bs, p.seq_kv_t)));
    const int64_t shift = skv_b - sq_b;
    constexpr int64_t kFar = int64_t(1) << 50;
    int64_t hi = kFar, lo = -kFar; // key j visible to query i iff i + lo <= j <= i + hi
    if(p.has_hi_tl)
        hi = imin(hi, p.hi_tl);
    if(p.has_hi_br)
        hi = imin(hi, p.hi_br + shift);
    if(p.has_lo)
        lo = p.lo + (p.lo_br ? shift : 0);
    const bool banded = hi < kFar || lo > -kFar;

    const int64_t q0 = qb * run.panels * QW;
    const int64_t nq = imax(0, imin(run.panels * QW, sq_b - q0)); // live queries of the block
    const int64_t nq_all = imin(run.panels * QW, run.sq - q0);   // rows of the block to write
    const int64_t npan = (nq + QW - 1) / QW;

    float* qt = ws + run.off_qt;
    float* ot = ws + run.off_ot;
    float* st = ws + run.off_st;
    float* mrow = ws + run.off_m;
    float* lrow = ws + run.off_l;
    float* kbuf = ws + run.off_kb;
    float* vbuf = ws + run.off_vb;

    const int64_t qoff = b * p.qs.strides[0] + h * p.qs.strides[1];
    const int64_t koff = b * p.ks.strides[0] + hk * p.ks.strides[1];
    const int64_t voff = b * p.vs.strides[0] + hk * p.vs.strides[1];
    const int64_t ooff = b * p.os.strides[0] + h * p.os.strides[1];

    // Queries, transposed and pre-scaled into log2 units.
    const float qscale = p.scale * kLog2e;
    for(int64_t pn = 0; pn < npan; ++pn)
    {
        float* qp = qt + pn * d * QW;
        for(int64_t i = 0; i < QW; ++i)
        {
            const int64_t qi = q0 + pn * QW + i;
            if(qi < q0 + nq)
            {
                const int64_t row = qoff + qi * p.qs.strides[2];
                for(int64_t e = 0; e < d; ++e)
                    qp[e * QW + i] = load_elem(p.q, row + e * p.qs.strides[3], p.qt) * qscale;
            }
            else
                for(int64_t e = 0; e < d; ++e)
                    qp[e * QW + i] = 0.0f;
        }
        float* op = ot + pn * dv * QW;
        for(int64_t e = 0; e < dv * QW; ++e)
            op[e] = 0.0f;
        for(int64_t i = 0; i < QW; ++i)
        {
            mrow[pn * QW + i] = -kInf;
            lrow[pn * QW + i] = 0.0f;
        }
    }

    // Keys any live query of the block can see.
    int64_t kbeg = 0, kend = skv_b;
    if(nq > 0)
    {
        kbeg = imax(kbeg, q0 + lo);
        kend = imin(kend, q0 + nq - 1 + hi + 1);
    }
    else
        kend = 0;

    const bool k_direct = p.kt == DType::F32;
    const bool v_direct = p.vt == DType::F32;
    const float alibi2 = p.alibi ? alibi_slope(h, run.hq) * kLog2e : 0.0f;
    const bool has_bias = p.bias != nullptr;
    const int64_t bias_off = has_bias ? b * p.bias_st[0] + h * p.bias_st[1] : 0;

    for(int64_t k0 = kbeg; k0 < kend; k0 += kSdpaBk)
    {
        const int64_t nk = imin(kSdpaBk, kend - k0);
        // K and V rows of the tile as (pointer, row stride, column stride).
        const float* kt;
        int64_t krs, kcs;
        if(k_direct)
        {
            kt = static_cast<const float*>(p.k) + koff + k0 * p.ks.strides[2];
            krs = p.ks.strides[2];
            kcs = p.ks.strides[3];
        }
        else
        {
            for(int64_t j = 0; j < nk; ++j)
            {
                const int64_t row = koff + (k0 + j) * p.ks.strides[2];
                for(int64_t e = 0; e < d; ++e)
                    kbuf[j * d + e] = load_elem(p.k, row + e * p.ks.strides[3], p.kt);
            }
            kt = kbuf;
            krs = d;
            kcs = 1;
        }
        const float* vt;
        int64_t vrs, vcs;
        if(v_direct)
        {
            vt = static_cast<const float*>(p.v) + voff + k0 * p.vs.strides[2];
            vrs = p.vs.strides[2];
            vcs = p.vs.strides[3];
        }
        else
        {
            for(int64_t j = 0; j < nk; ++j)
            {
                const int64_t row = voff + (k0 + j) * p.vs.strides[2];
                for(int64_t e = 0; e < dv; ++e)
                    vbuf[j * dv + e] = load_elem(p.v, row + e * p.vs.strides[3], p.vt);
            }
            vt = vbuf;
            vrs = dv;
            vcs = 1;
        }

        for(int64_t pn = 0; pn < npan; ++pn)
        {
            const int64_t pq0 = q0 + pn * QW;
            const int64_t pq1 = imin(pq0 + QW, q0 + nq); // live queries [pq0, pq1)
            // Key rows of this tile that some live query of the panel sees.
            const int64_t j0 = imax(k0, pq0 + lo);
            const int64_t j1 = imin(k0 + nk, pq1 - 1 + hi + 1);
            if(j0 >= j1)
                continue;
            const int64_t rows = j1 - j0;
            float* s = st; // row r = key j0 + r
            panel_gemm(rows, d, kt + (j0 - k0) * krs, krs, kcs, qt + pn * d * QW, s, nullptr);

            V lane;
            for(int i = 0; i < W; ++i)
                lane[i] = static_cast<float>(i);
            V qv[NV];
            for(int v = 0; v < NV; ++v)
                qv[v] = lane + static_cast<float>(pq0 + v * W);

            if(has_bias)
            {
                for(int64_t i = 0; i < pq1 - pq0; ++i)
                {
                    const int64_t brow = bias_off + (pq0 + i) * p.bias_st[2];
                    for(int64_t r = 0; r < rows; ++r)
                        s[r * QW + i] += load_elem(p.bias, brow + (j0 + r) * p.bias_st[3], p.bias_t) * kLog2e;
                }
            }
            if(p.alibi)
            {
                const V sl = vset(alibi2);
                for(int64_t r = 0; r < rows; ++r)
                {
                    const V jj = vset(static_cast<float>(j0 + r));
                    for(int v = 0; v < NV; ++v)
                        vstore(s + r * QW + v * W, vload(s + r * QW + v * W) + sl * (jj - qv[v]));
                }
            }
            if(banded)
            {
                // Rows not visible to every live query of the panel get -inf
                // where masked: visible iff j - hi <= i <= j - lo.
                const V ninf = vset(-kInf);
                for(int64_t r = 0; r < rows; ++r)
                {
                    const int64_t j = j0 + r;
                    if(j <= pq0 + hi && j >= pq1 - 1 + lo)
                        continue;
                    const V ilo = vset(static_cast<float>(imax(j - hi, -(int64_t(1) << 24))));
                    const V ihi = vset(static_cast<float>(imin(j - lo, int64_t(1) << 24)));
                    for(int v = 0; v < NV; ++v)
                    {
                        const V x = vload(s + r * QW + v * W);
                        vstore(s + r * QW + v * W, (qv[v] >= ilo && qv[v] <= ihi) ? x : ninf);
                    }
                }
            }

            // Online softmax down the key rows.
            float* mp = mrow + pn * QW;
            float* lp = lrow + pn * QW;
            V mold[NV], mnew[NV], muse[NV], sum[NV], alpha[NV];
            for(int v = 0; v < NV; ++v)
            {
                mold[v] = vload(mp + v * W);
                mnew[v] = mold[v];
            }
            for(int64_t r = 0; r < rows; ++r)
                for(int v = 0; v < NV; ++v)
                    mnew[v] = vmax(mnew[v], vload(s + r * QW + v * W));
            for(int v = 0; v < NV; ++v)
            {
                muse[v] = mnew[v] == vset(-kInf) ? V{} : mnew[v];
                sum[v] = V{};
            }
            for(int64_t r = 0; r < rows; ++r)
                for(int v = 0; v < NV; ++v)
                {
                    const V e = exp2_nonpos(vload(s + r * QW + v * W) - muse[v]);
                    vstore(s + r * QW + v * W, e);
                    sum[v] += e;
                }
            for(int v = 0; v < NV; ++v)
            {
                alpha[v] = exp2_nonpos(mold[v] - muse[v]);
                vstore(lp + v * W, vload(lp + v * W) * alpha[v] + sum[v]);
                vstore(mp + v * W, mnew[v]);
            }
            // Ot = Ot * alpha + V^T . P
            panel_gemm(dv, rows, vt + (j0 - k0) * vrs, vcs, vrs, s, ot + pn * dv * QW, alpha);
        }
    }

    // Normalise and write out; rows beyond the live queries (padding) get 0.
    for(int64_t i = 0; i < nq_all; ++i)
    {
        const int64_t qi = q0 + i;
        const int64_t orow = ooff + qi * p.os.strides[2];
        float inv = 0.0f, lse = -kInf;
        const float* src = nullptr;
        if(i < nq)
        {
            const int64_t pn = i / QW, lane = i % QW;
            const float l = lrow[pn * QW + lane];
            if(l > 0.0f) // else no visible key: o = 0, stats = -inf
            {
                inv = 1.0f / l;
                lse = (mrow[pn * QW + lane] + std::log2(l)) * kLn2;
                src = ot + pn * dv * QW + lane;
            }
        }
        if(p.ot == DType::F32 && p.os.strides[3] == 1)
        {
            float* dst = static_cast<float*>(p.o) + orow;
            if(src != nullptr)
                for(int64_t e = 0; e < dv; ++e)
                    dst[e] = src[e * QW] * inv;
            else
                for(int64_t e = 0; e < dv; ++e)
                    dst[e] = 0.0f;
        }
        else
            for(int64_t e = 0; e < dv; ++e)
                store_elem(p.o, orow + e * p.os.strides[3], p.ot, src != nullptr ? src[e * QW] * inv : 0.0f);
        if(p.stats != nullptr)
            p.stats[b * p.ss.strides[0] + h * p.ss.strides[1] + qi * p.ss.strides[2]] = lse;
    }
}

} // namespace HIPDNN_SDPA_NS
} // namespace hipdnn_cpu
