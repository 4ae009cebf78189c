// SDPA backward on the CPU, fp32 compute (fp16 / bf16 tensors are widened
// while packed). Two passes, each embarrassingly parallel and free of atomics:
//
//   pass 1, one work item per (batch, kv head, block of 64 keys): dK and dV of
//     those keys, summed over every query head of the GQA group and every
//     query block the masks leave visible;
//   pass 2, one work item per (batch, query head, block of 64 queries): dQ.
//
// Both recompute the tile's probabilities from the forward's LSE,
//   P = exp2((scale S + bias + alibi) log2e - lse log2e) on visible keys,
//   dP = dO V^T, dS = P (dP - delta) with delta = rowsum(dO o),
// then pass 1 accumulates dV += P^T dO and dK += dS^T Q, pass 2 dQ += dS K.
// Layouts: pass 1 puts keys along the vector lanes (K^T, V^T packed once per
// item; Q and dO rows read in place when fp32 with unit last stride, else
// widened into scratch); pass 2 puts queries along the lanes (Q^T, dO^T
// packed once per item, K and V rows read in place), so the per-query lse and
// delta are lane vectors there. Every product goes through one register-
// blocked kernel: 6 rows broadcast from a strided source against 2 vectors
// (12 accumulators), row tails by smaller instantiations. Tiles outside the
// causal / window band or past the padded lengths are skipped whole. Scratch
// per thread depends only on the tile sizes and the head dims, so dynamic
// (wildcard batch / length) graphs size it at build time. The file is
// compiled once and its item functions instantiated for the baseline ISA and,
// on x86-64, for AVX2 + FMA (chosen at run time).

#include "extra_ops.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#ifdef _OPENMP
#include <omp.h>
#endif

#pragma GCC diagnostic ignored "-Wpsabi"

#if defined(__x86_64__) && defined(__GNUC__)
#define HIPDNN_BWD_AVX2 1
#define HIPDNN_BWD_AVX2_FN __attribute__((target("avx2,fma"), flatten))
#else
#define HIPDNN_BWD_AVX2 0
#endif

namespace hipdnn_cpu
{
namespace
{

typedef float V __attribute__((vector_size(32)));
typedef uint32_t VU __attribute__((vector_size(32)));
constexpr int W = 8;
constexpr int64_t BQ = 64; // queries per tile
constexpr int64_t BK = 64; // keys per tile
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kInf = std::numeric_limits<float>::infinity();

inline int64_t round_to(int64_t n, int64_t m)
{
    return (n + m - 1) / m * m;
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
// (written as a vector-scalar op so that the AVX2 instantiations get a
// vbroadcastss rather than a chain of lane inserts)
inline V vset(float x)
{
    return V{} + x;
}

// 2^x for x <= ~127: x = n + f, |f| <= 1/2, 2^f by its degree-7 Taylor
// polynomial in f ln 2, 2^n added to the exponent; x < -126 (and -inf) gives 0.
inline V exp2v(V x)
{
    const V lo = vset(-126.0f), hi = vset(127.0f);
    V xc = x < lo ? lo : x;
    xc = xc > hi ? hi : xc;
    const V magic = vset(12582912.0f);
    const V t = xc + magic;
    const V n = t - magic;
    const V f = xc - n;
    V p = vset(1.5252734e-05f);
    p = p * f + 1.5403530e-04f;
    p = p * f + 1.3333558e-03f;
    p = p * f + 9.6181291e-03f;
    p = p * f + 5.5504109e-02f;
    p = p * f + 2.4022651e-01f;
    p = p * f + 6.9314718e-01f;
    p = p * f + 1.0f;
    // Unsigned lanes: a NaN input makes these words arbitrary, and they must wrap, not overflow.
    const VU bits = (VU)p + (((VU)t - (VU)magic) << 23);
    return x < lo ? V{} : (V)bits;
}

// ---------------------------------------------------------- conversions ----
inline float from_half(uint16_t h)
{
    const uint32_t sign = static_cast<uint32_t>(h >> 15) << 31;
    const int e = (h >> 10) & 0x1f;
    const uint32_t m = h & 0x3ffu;
    float mag;
    if(e == 0)
        mag = std::ldexp(static_cast<float>(m), -24);
    else if(e == 31)
        mag = m ? std::numeric_limits<float>::quiet_NaN() : kInf;
    else
    {
        const uint32_t bits = (static_cast<uint32_t>(e + 112) << 23) | (m << 13);
        std::memcpy(&mag, &bits, sizeof(mag));
    }
    return sign ? -mag : mag;
}

// Round to nearest even, via the float's own rounding at the half's precision.
inline uint16_t to_half(float f)
{
    uint32_t x;
    std::memcpy(&x, &f, sizeof(x));
    const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
    const float a = std::fabs(f);
    if(a != a)
        return static_cast<uint16_t>(sign | 0x7e00u);
    if(a >= 65520.0f)
        return static_cast<uint16_t>(sign | 0x7c00u);
    if(a < 6.103515625e-05f) // subnormal half: multiples of 2^-24
        return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f)));
    uint32_t ax = x & 0x7fffffffu;
    const uint32_t rem = ax & 0x1fffu;
    ax >>= 13;
    if(rem > 0x1000u || (rem == 0x1000u && (ax & 1u)))
        ++ax;
    return static_cast<uint16_t>(sign | (ax - (112u << 10)));
}

inline float from_bf16(uint16_t h)
{
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
}

inline uint16_t to_bf16(float f)
{
    uint32_t x;
    std::memcpy(&x, &f, sizeof(x));
    if((x & 0x7fffffffu) > 0x7f800000u)
        return static_cast<uint16_t>((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return static_cast<uint16_t>(x >> 16);
}

inline float ld(const void* base, int64_t i, DType t)
{
    switch(t)
    {
    case DType::F16:
        return from_half(static_cast<const uint16_t*>(base)[i]);
    case DType::BF16:
        return from_bf16(static_cast<const uint16_t*>(base)[i]);
    case DType::I32:
        return static_cast<float>(static_cast<const int32_t*>(base)[i]);
    case DType::I64:
        return static_cast<float>(static_cast<const int64_t*>(base)[i]);
    default:
        return static_cast<const float*>(base)[i];
    }
}

inline int64_t ld_int(const void* base, int64_t i, DType t)
{
    if(t == DType::I64)
        return static_cast<const int64_t*>(base)[i];
    if(t == DType::I32)
        return static_cast<const int32_t*>(base)[i];
    return static_cast<int64_t>(ld(base, i, t));
}

inline void st(void* base, int64_t i, DType t, float x)
{
    switch(t)
    {
    case DType::F16:
        static_cast<uint16_t*>(base)[i] = to_half(x);
        break;
    case DType::BF16:
        static_cast<uint16_t*>(base)[i] = to_bf16(x);
        break;
    default:
        static_cast<float*>(base)[i] = x;
        break;
    }
}

// ------------------------------------------------------------------ GEMM ----
// c[R rows][NV*8] (+)= sum_k a[r*ars + k*aks] * b[k*ldb + 0..NV*8): R rows of
// a strided source broadcast one element at a time against NV vectors of b.
template <int R, int NV>
inline void mk(int64_t kn, const float* a, int64_t ars, int64_t aks, const float* b, int64_t ldb, float* c,
               int64_t ldc, bool acc_in)
{
    V acc[R][NV];
    for(int r = 0; r < R; ++r)
        for(int v = 0; v < NV; ++v)
            acc[r][v] = acc_in ? vload(c + r * ldc + v * W) : V{};
    const float* ar[R];
    for(int r = 0; r < R; ++r)
        ar[r] = a + r * ars;
    int64_t off = 0;
#pragma GCC unroll 2
    for(int64_t k = 0; k < kn; ++k, off += aks)
    {
        const float* bk = b + k * ldb;
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
            vstore(c + r * ldc + v * W, acc[r][v]);
}

// Main tile 6 rows x 16 columns (12 accumulators, 2 vector loads and 6
// broadcasts per 12 FMAs); row tails by the smaller instantiations.
template <int NV>
inline void rows(int64_t m, int64_t kn, const float* a, int64_t ars, int64_t aks, const float* b, int64_t ldb,
                 float* c, int64_t ldc, bool acc_in)
{
    constexpr int MR = NV == 2 ? 6 : 8;
    int64_t i = 0;
    for(; i + MR <= m; i += MR)
        mk<MR, NV>(kn, a + i * ars, ars, aks, b, ldb, c + i * ldc, ldc, acc_in);
    for(; i + 4 <= m; i += 4)
        mk<4, NV>(kn, a + i * ars, ars, aks, b, ldb, c + i * ldc, ldc, acc_in);
    switch(m - i)
    {
    case 3:
        mk<3, NV>(kn, a + i * ars, ars, aks, b, ldb, c + i * ldc, ldc, acc_in);
        break;
    case 2:
        mk<2, NV>(kn, a + i * ars, ars, aks, b, ldb, c + i * ldc, ldc, acc_in);
        break;
    case 1:
        mk<1, NV>(kn, a + i * ars, ars, aks, b, ldb, c + i * ldc, ldc, acc_in);
        break;
    default:
        break;
    }
}

// C[m][n] (+)= A[m][kn] B[kn][n]; A element (i, k) at a[i*ars + k*aks], B row k
// at b + k*ldb (vector loads: n a multiple of 8).
inline void gemm(int64_t m, int64_t n, int64_t kn, const float* a, int64_t ars, int64_t aks, const float* b,
                 int64_t ldb, float* c, int64_t ldc, bool acc_in)
{
    int64_t j = 0;
    for(; j + 2 * W <= n; j += 2 * W)
        rows<2>(m, kn, a, ars, aks, b + j, ldb, c + j, ldc, acc_in);
    if(j < n)
        rows<1>(m, kn, a, ars, aks, b + j, ldb, c + j, ldc, acc_in);
}

// ---------------------------------------------------------------- setup ----
struct Run
{
    const SdpaBwdProblem* p = nullptr;
    int64_t b = 0, hq = 0, hk = 0, sq = 0, skv = 0, d = 0, dv = 0, group = 1, dp = 0, dvp = 0;
    int64_t nqb = 0, nkb = 0;
    // q, dO, k, v read in place (fp32, unit last stride, width a multiple of 8)
    bool q_in = false, do_in = false, k_in = false, v_in = false;
    // Pass 1 (keys along lanes): Kt [dp][BK], Vt [dvp][BK] per item; Q / dO
    // rows (packed to qb / dob unless read in place); S, dP [BQ][BK];
    // dK, dV accumulators [BK][dp|dvp].
    // Pass 2 (queries along lanes): Qt [dp][BQ], dOt [dvp][BQ] per item; K / V
    // rows (packed to kb / vb unless in place); St, dPt [BK][BQ]; dQ [BQ][dp].
    int64_t off_t1 = 0, off_t2 = 0, off_r1 = 0, off_r2 = 0, off_s = 0, off_dp = 0, off_a1 = 0, off_a2 = 0,
            off_lse = 0, off_del = 0, total = 0;
};

void layout(Run& r)
{
    r.dp = round_to(std::max<int64_t>(r.d, 1), W);
    r.dvp = round_to(std::max<int64_t>(r.dv, 1), W);
    int64_t o = 0;
    auto take = [&](int64_t& off, int64_t n) {
        off = o;
        o += round_to(n, 16);
    };
    constexpr int64_t T = BQ > BK ? BQ : BK;
    take(r.off_t1, r.dp * T);  // Kt or Qt
    take(r.off_t2, r.dvp * T); // Vt or dOt
    take(r.off_r1, T * r.dp);  // Q or K rows
    take(r.off_r2, T * r.dvp); // dO or V rows
    take(r.off_s, BQ * BK);
    take(r.off_dp, BQ * BK);
    take(r.off_a1, T * r.dp);  // dK or dQ
    take(r.off_a2, T * r.dvp); // dV
    take(r.off_lse, T);
    take(r.off_del, T);
    r.total = o;
}

// Visible keys of query i: i + lo <= j <= i + hi, j < skv_b; live queries i < sq_b.
struct Band
{
    int64_t sq_b, skv_b, lo, hi;
};

Band band_of(const SdpaProblem& p, int64_t b, int64_t sq, int64_t skv)
{
    Band r{sq, skv, 0, 0};
    if(p.seq_q != nullptr)
        r.sq_b = std::max<int64_t>(0, std::min(sq, ld_int(p.seq_q, b * p.seq_q_bs, p.seq_q_t)));
    if(p.seq_kv != nullptr)
        r.skv_b = std::max<int64_t>(0, std::min(skv, ld_int(p.seq_kv, b * p.seq_kv_bs, p.seq_kv_t)));
    const int64_t shift = r.skv_b - r.sq_b;
    constexpr int64_t kFar = int64_t(1) << 50;
    r.hi = kFar;
    r.lo = -kFar;
    if(p.has_hi_tl)
        r.hi = std::min(r.hi, p.hi_tl);
    if(p.has_hi_br)
        r.hi = std::min(r.hi, p.hi_br + shift);
    if(p.has_lo)
        r.lo = p.lo + (p.lo_br ? shift : 0);
    return r;
}

inline float alibi_slope(int64_t h, int64_t nh)
{
    int64_t n = 1;
    while(n * 2 <= nh)
        n *= 2;
    if(h < n)
        return std::pow(2.0f, -8.0f * static_cast<float>(h + 1) / static_cast<float>(n));
    return std::pow(2.0f, -4.0f * static_cast<float>(2 * (h - n) + 1) / static_cast<float>(n));
}

inline bool in_place(const void* base, DType t, const Shape& s, int64_t width)
{
    return base != nullptr && t == DType::F32 && s.strides[3] == 1 && width % W == 0;
}

// Rows [r0, r0 + n) of head slice `off` of a [.., rows, width] tensor as
// (pointer, row stride): in place, or packed into dst [n][wp] (zero-padded).
inline const float* rows_of(const void* base, DType t, const Shape& s, int64_t off, int64_t r0, int64_t n,
                            int64_t width, int64_t wp, bool direct, float* dst, int64_t& rs)
{
    if(direct)
    {
        rs = s.strides[2];
        return static_cast<const float*>(base) + off + r0 * s.strides[2];
    }
    for(int64_t i = 0; i < n; ++i)
    {
        const int64_t row = off + (r0 + i) * s.strides[2];
        float* d = dst + i * wp;
        for(int64_t e = 0; e < width; ++e)
            d[e] = ld(base, row + e * s.strides[3], t);
        for(int64_t e = width; e < wp; ++e)
            d[e] = 0.0f;
    }
    rs = wp;
    return dst;
}

// Rows [r0, r0 + n) of head slice `off`, transposed into dst [width][T]
// (columns past n zero).
inline void transposed(const void* base, DType t, const Shape& s, int64_t off, int64_t r0, int64_t n, int64_t width,
                       float* dst, int64_t T)
{
    if(n < T)
        for(int64_t e = 0; e < width; ++e)
            std::memset(dst + e * T + n, 0, sizeof(float) * static_cast<size_t>(T - n));
    if(t == DType::F32)
    {
        const float* src = static_cast<const float*>(base);
        for(int64_t i = 0; i < n; ++i)
        {
            const float* row = src + off + (r0 + i) * s.strides[2];
            for(int64_t e = 0; e < width; ++e)
                dst[e * T + i] = row[e * s.strides[3]];
        }
        return;
    }
    for(int64_t i = 0; i < n; ++i)
    {
        const int64_t row = off + (r0 + i) * s.strides[2];
        for(int64_t e = 0; e < width; ++e)
            dst[e * T + i] = ld(base, row + e * s.strides[3], t);
    }
}

// lse (log2 units; `dead` where the row has no visible key or is padding) and
// delta = rowsum(dO o) of queries [q0, q0 + nq) of head h.
inline void row_stats(const Run& r, const Band& bd, int64_t b, int64_t h, int64_t q0, int64_t nq, float dead,
                      float* lse, float* del)
{
    const SdpaBwdProblem& P = *r.p;
    const SdpaProblem& p = P.fwd;
    const int64_t ooff = b * p.os.strides[0] + h * p.os.strides[1];
    const int64_t dooff = b * P.dos.strides[0] + h * P.dos.strides[1];
    const int64_t soff = b * p.ss.strides[0] + h * p.ss.strides[1];
    const bool vec = in_place(p.o, p.ot, p.os, r.dv) && in_place(P.dout, P.dout_t, P.dos, r.dv);
    for(int64_t i = 0; i < nq; ++i)
    {
        const int64_t qi = q0 + i;
        const int64_t orow = ooff + qi * p.os.strides[2];
        const int64_t drow = dooff + qi * P.dos.strides[2];
        float dsum;
        if(vec)
        {
            const float* o = static_cast<const float*>(p.o) + orow;
            const float* g = static_cast<const float*>(P.dout) + drow;
            V acc{};
            for(int64_t e = 0; e < r.dv; e += W)
                acc += vload(o + e) * vload(g + e);
            dsum = 0.0f;
            for(int l = 0; l < W; ++l)
                dsum += acc[l];
        }
        else
        {
            double s = 0.0;
            for(int64_t e = 0; e < r.dv; ++e)
                s += static_cast<double>(ld(P.dout, drow + e * P.dos.strides[3], P.dout_t))
                     * ld(p.o, orow + e * p.os.strides[3], p.ot);
            dsum = static_cast<float>(s);
        }
        const float st = p.stats[soff + qi * p.ss.strides[2]];
        const bool live = qi < bd.sq_b && st > -kInf && st == st;
        lse[i] = live ? st * kLog2e : dead;
        del[i] = dsum;
    }
}

// Pass 1: dK, dV of keys [k0, k0 + BK) of kv head hk. Keys along lanes:
// S [q][key] = Q Kt, dP = dO Vt, then dV += P^T dO, dK += dS^T Q.
inline void item_kv(const Run& r, int64_t w, float* ws)
{
    const SdpaBwdProblem& P = *r.p;
    const SdpaProblem& p = P.fwd;
    const int64_t kb = w % r.nkb;
    const int64_t hk = (w / r.nkb) % r.hk;
    const int64_t b = w / (r.nkb * r.hk);
    const int64_t k0 = kb * BK;
    const int64_t nk = std::min(BK, r.skv - k0);
    const Band bd = band_of(p, b, r.sq, r.skv);
    float* kt = ws + r.off_t1;
    float* vt = ws + r.off_t2;
    float* s = ws + r.off_s;
    float* dpm = ws + r.off_dp;
    float* dk = ws + r.off_a1; // [nk][dp]
    float* dv = ws + r.off_a2; // [nk][dvp]
    float* lse = ws + r.off_lse;
    float* del = ws + r.off_del;
    std::memset(dk, 0, sizeof(float) * static_cast<size_t>(nk * r.dp));
    std::memset(dv, 0, sizeof(float) * static_cast<size_t>(nk * r.dvp));
    const int64_t klast = std::min(k0 + nk, bd.skv_b) - 1; // last live key
    // queries that see some key of [k0, klast]: j - hi <= i <= j - lo
    const int64_t i0 = std::max<int64_t>(0, k0 - bd.hi);
    const int64_t i1 = std::min<int64_t>(bd.sq_b - 1, klast - bd.lo);
    if(klast >= k0 && i0 <= i1)
    {
        const int64_t koff = b * p.ks.strides[0] + hk * p.ks.strides[1];
        const int64_t voff = b * p.vs.strides[0] + hk * p.vs.strides[1];
        transposed(p.k, p.kt, p.ks, koff, k0, nk, r.d, kt, BK);
        transposed(p.v, p.vt, p.vs, voff, k0, nk, r.dv, vt, BK);
        const V c = vset(p.scale * kLog2e);
        V lane;
        for(int l = 0; l < W; ++l)
            lane[l] = static_cast<float>(l);
        for(int64_t g = 0; g < r.group; ++g)
        {
            const int64_t h = hk * r.group + g;
            const float slope = p.alibi ? alibi_slope(h, r.hq) * kLog2e : 0.0f;
            const int64_t boff = p.bias ? b * p.bias_st[0] + h * p.bias_st[1] : 0;
            const int64_t qoff = b * p.qs.strides[0] + h * p.qs.strides[1];
            const int64_t dooff = b * P.dos.strides[0] + h * P.dos.strides[1];
            for(int64_t q0 = i0; q0 <= i1; q0 += BQ)
            {
                const int64_t nq = std::min(BQ, i1 + 1 - q0);
                int64_t qrs, dors;
                const float* qm =
                    rows_of(p.q, p.qt, p.qs, qoff, q0, nq, r.d, r.dp, r.q_in, ws + r.off_r1, qrs);
                const float* dom =
                    rows_of(P.dout, P.dout_t, P.dos, dooff, q0, nq, r.dv, r.dvp, r.do_in, ws + r.off_r2, dors);
                row_stats(r, bd, b, h, q0, nq, -kInf, lse, del);
                gemm(nq, BK, r.d, qm, qrs, 1, kt, BK, s, BK, false);
                gemm(nq, BK, r.dv, dom, dors, 1, vt, BK, dpm, BK, false);
                for(int64_t i = 0; i < nq; ++i)
                {
                    const int64_t qi = q0 + i;
                    float* sr = s + i * BK;
                    float* dr = dpm + i * BK;
                    // visible columns [c0, c1) of this row
                    const int64_t c0 = std::max<int64_t>(0, qi + bd.lo - k0);
                    const int64_t c1 = std::min<int64_t>(nk, std::min(qi + bd.hi, bd.skv_b - 1) - k0 + 1);
                    if(lse[i] == -kInf || c1 <= c0)
                    {
                        std::memset(sr, 0, sizeof(float) * BK);
                        std::memset(dr, 0, sizeof(float) * BK);
                        continue;
                    }
                    if(p.bias)
                    {
                        const int64_t brow = boff + qi * p.bias_st[2];
                        for(int64_t j = c0; j < c1; ++j)
                            sr[j] = sr[j] * p.scale + ld(p.bias, brow + (k0 + j) * p.bias_st[3], p.bias_t);
                    }
                    const V l2 = vset(lse[i]);
                    const V dl = vset(del[i]);
                    const V base = vset(static_cast<float>(k0 - qi)) * slope;
                    for(int64_t j = 0; j < BK; j += W)
                    {
                        V x = vload(sr + j);
                        x = p.bias ? x * kLog2e : x * c;
                        if(p.alibi)
                            x += base + (lane + static_cast<float>(j)) * slope;
                        const V pv = exp2v(x - l2);
                        vstore(sr + j, pv);
                        vstore(dr + j, pv * (vload(dr + j) - dl));
                    }
                    for(int64_t j = 0; j < c0; ++j)
                        sr[j] = dr[j] = 0.0f;
                    for(int64_t j = c1; j < BK; ++j)
                        sr[j] = dr[j] = 0.0f;
                }
                // dV += P^T dO ; dK += dS^T Q
                gemm(nk, r.dvp, nq, s, 1, BK, dom, dors, dv, r.dvp, true);
                gemm(nk, r.dp, nq, dpm, 1, BK, qm, qrs, dk, r.dp, true);
            }
        }
    }
    const int64_t dkoff = b * P.dks.strides[0] + hk * P.dks.strides[1];
    const int64_t dvoff = b * P.dvs.strides[0] + hk * P.dvs.strides[1];
    for(int64_t j = 0; j < nk; ++j)
    {
        const int64_t kr = dkoff + (k0 + j) * P.dks.strides[2];
        for(int64_t e = 0; e < r.d; ++e)
            st(P.dk, kr + e * P.dks.strides[3], P.dk_t, dk[j * r.dp + e] * p.scale);
        const int64_t vr = dvoff + (k0 + j) * P.dvs.strides[2];
        for(int64_t e = 0; e < r.dv; ++e)
            st(P.dv, vr + e * P.dvs.strides[3], P.dv_t, dv[j * r.dvp + e]);
    }
}

// Pass 2: dQ of queries [q0, q0 + BQ) of head h. Queries along lanes:
// St [key][q] = K Qt, dPt = V dOt, then dQ += dS K (dS read transposed).
inline void item_q(const Run& r, int64_t w, float* ws)
{
    const SdpaBwdProblem& P = *r.p;
    const SdpaProblem& p = P.fwd;
    const int64_t qb = r.nqb - 1 - w % r.nqb; // later (heavier under causal) blocks first
    const int64_t h = (w / r.nqb) % r.hq;
    const int64_t b = w / (r.nqb * r.hq);
    const int64_t hk = h / r.group;
    const int64_t q0 = qb * BQ;
    const int64_t nq = std::min(BQ, r.sq - q0);
    const Band bd = band_of(p, b, r.sq, r.skv);
    float* qt = ws + r.off_t1;
    float* dot = ws + r.off_t2;
    float* s = ws + r.off_s;
    float* dpm = ws + r.off_dp;
    float* dq = ws + r.off_a1; // [nq][dp]
    float* lse = ws + r.off_lse;
    float* del = ws + r.off_del;
    std::memset(dq, 0, sizeof(float) * static_cast<size_t>(nq * r.dp));
    const int64_t nlive = std::min(nq, bd.sq_b - q0);
    const int64_t j0 = std::max<int64_t>(0, q0 + bd.lo);
    const int64_t j1 = nlive > 0 ? std::min<int64_t>(bd.skv_b - 1, q0 + nlive - 1 + bd.hi) : -1;
    if(nlive > 0 && j0 <= j1)
    {
        const int64_t qoff = b * p.qs.strides[0] + h * p.qs.strides[1];
        const int64_t dooff = b * P.dos.strides[0] + h * P.dos.strides[1];
        const int64_t koff = b * p.ks.strides[0] + hk * p.ks.strides[1];
        const int64_t voff = b * p.vs.strides[0] + hk * p.vs.strides[1];
        transposed(p.q, p.qt, p.qs, qoff, q0, nlive, r.d, qt, BQ);
        transposed(P.dout, P.dout_t, P.dos, dooff, q0, nlive, r.dv, dot, BQ);
        row_stats(r, bd, b, h, q0, nlive, kInf, lse, del);
        for(int64_t i = nlive; i < BQ; ++i)
        {
            lse[i] = kInf; // dead lanes: exp2(x - inf) = 0
            del[i] = 0.0f;
        }
        constexpr int NL = static_cast<int>(BQ / W);
        V lsev[NL], delv[NL], qv[NL];
        V lane;
        for(int l = 0; l < W; ++l)
            lane[l] = static_cast<float>(l);
        for(int v = 0; v < NL; ++v)
        {
            lsev[v] = vload(lse + v * W);
            delv[v] = vload(del + v * W);
            qv[v] = lane + static_cast<float>(q0 + v * W);
        }
        const V c = vset(p.scale * kLog2e);
        const float slope = p.alibi ? alibi_slope(h, r.hq) * kLog2e : 0.0f;
        const int64_t boff = p.bias ? b * p.bias_st[0] + h * p.bias_st[1] : 0;
        const int64_t qlast = q0 + nlive - 1;
        for(int64_t k0 = j0; k0 <= j1; k0 += BK)
        {
            const int64_t nk = std::min(BK, j1 + 1 - k0);
            int64_t krs, vrs;
            const float* km = rows_of(p.k, p.kt, p.ks, koff, k0, nk, r.d, r.dp, r.k_in, ws + r.off_r1, krs);
            const float* vm = rows_of(p.v, p.vt, p.vs, voff, k0, nk, r.dv, r.dvp, r.v_in, ws + r.off_r2, vrs);
            gemm(nk, BQ, r.d, km, krs, 1, qt, BQ, s, BQ, false);
            gemm(nk, BQ, r.dv, vm, vrs, 1, dot, BQ, dpm, BQ, false);
            for(int64_t jr = 0; jr < nk; ++jr)
            {
                const int64_t j = k0 + jr;
                float* sr = s + jr * BQ;
                float* dr = dpm + jr * BQ;
                if(p.bias)
                {
                    const int64_t bcol = boff + j * p.bias_st[3];
                    for(int64_t i = 0; i < nlive; ++i)
                        sr[i] = sr[i] * p.scale + ld(p.bias, bcol + (q0 + i) * p.bias_st[2], p.bias_t);
                }
                // queries that see key j: j - hi <= i <= j - lo
                const bool full = j - bd.hi <= q0 && qlast <= j - bd.lo;
                const V ilo = vset(static_cast<float>(std::max<int64_t>(j - bd.hi, -(int64_t(1) << 24))));
                const V ihi = vset(static_cast<float>(std::min<int64_t>(j - bd.lo, int64_t(1) << 24)));
                const V jj = vset(static_cast<float>(j)) * slope;
                for(int v = 0; v < NL; ++v)
                {
                    V x = vload(sr + v * W);
                    x = p.bias ? x * kLog2e : x * c;
                    if(p.alibi)
                        x += jj - qv[v] * slope;
                    V pv = exp2v(x - lsev[v]);
                    if(!full)
                        pv = (qv[v] >= ilo && qv[v] <= ihi) ? pv : V{};
                    vstore(sr + v * W, pv);
                    vstore(dr + v * W, pv * (vload(dr + v * W) - delv[v]));
                }
            }
            // dQ += dS K, dS (i, j) at dpm[j * BQ + i]
            gemm(nlive, r.dp, nk, dpm, 1, BQ, km, krs, dq, r.dp, true);
        }
    }
    const int64_t dqoff = b * P.dqs.strides[0] + h * P.dqs.strides[1];
    for(int64_t i = 0; i < nq; ++i)
    {
        const int64_t qr = dqoff + (q0 + i) * P.dqs.strides[2];
        for(int64_t e = 0; e < r.d; ++e)
            st(P.dq, qr + e * P.dqs.strides[3], P.dq_t, dq[i * r.dp + e] * p.scale);
    }
}
void item_kv_base(const Run& r, int64_t w, float* ws)
{
    item_kv(r, w, ws);
}
void item_q_base(const Run& r, int64_t w, float* ws)
{
    item_q(r, w, ws);
}
#if HIPDNN_BWD_AVX2
HIPDNN_BWD_AVX2_FN void item_kv_avx2(const Run& r, int64_t w, float* ws)
{
    item_kv(r, w, ws);
}
HIPDNN_BWD_AVX2_FN void item_q_avx2(const Run& r, int64_t w, float* ws)
{
    item_q(r, w, ws);
}
#endif

bool use_avx2()
{
#if HIPDNN_BWD_AVX2
    static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")
                            && std::getenv("HIPDNN_CPU_ENGINE_BASELINE") == nullptr;
    return has;
#else
    return false;
#endif
}

inline int thread_id()
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

template <class F>
void parallel_items(int64_t total, int nthreads, char* scratch, size_t per_thread, F f)
{
    const int nt = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(nthreads, total)));
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
#endif
    for(int64_t w = 0; w < total; ++w)
        f(w, reinterpret_cast<float*>(scratch + static_cast<size_t>(thread_id()) * per_thread));
    (void)nt;
}

} // namespace

size_t sdpa_bwd_scratch_per_thread(int64_t d, int64_t dv)
{
    Run r;
    r.d = d;
    r.dv = dv;
    layout(r);
    return align_up(static_cast<size_t>(r.total) * sizeof(float));
}

bool run_sdpa_bwd(const SdpaBwdProblem& p, char* scratch, size_t per_thread, int nthreads)
{
    Run r;
    r.p = &p;
    r.b = p.fwd.qs.dims[0];
    r.hq = p.fwd.qs.dims[1];
    r.sq = p.fwd.qs.dims[2];
    r.d = p.fwd.qs.dims[3];
    r.hk = p.fwd.ks.dims[1];
    r.skv = p.fwd.ks.dims[2];
    r.dv = p.fwd.vs.dims[3];
    r.group = r.hq / r.hk;
    layout(r);
    if(static_cast<size_t>(r.total) * sizeof(float) > per_thread)
        return false;
    r.q_in = in_place(p.fwd.q, p.fwd.qt, p.fwd.qs, r.d);
    r.k_in = in_place(p.fwd.k, p.fwd.kt, p.fwd.ks, r.d);
    r.v_in = in_place(p.fwd.v, p.fwd.vt, p.fwd.vs, r.dv);
    r.do_in = in_place(p.dout, p.dout_t, p.dos, r.dv);
    r.nkb = (r.skv + BK - 1) / BK;
    r.nqb = (r.sq + BQ - 1) / BQ;
    void (*kv)(const Run&, int64_t, float*) = item_kv_base;
    void (*q)(const Run&, int64_t, float*) = item_q_base;
#if HIPDNN_BWD_AVX2
    if(use_avx2())
    {
        kv = item_kv_avx2;
        q = item_q_avx2;
    }
#endif
    parallel_items(r.b * r.hk * r.nkb, nthreads, scratch, per_thread, [&](int64_t w, float* ws) { kv(r, w, ws); });
    parallel_items(r.b * r.hq * r.nqb, nthreads, scratch, per_thread, [&](int64_t w, float* ws) { q(r, w, ws); });
    return true;
}

} // namespace hipdnn_cpu
