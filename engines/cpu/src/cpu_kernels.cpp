// fp32 compute kernels of the CPU engine: the SDPA forward's thread loop, a
// tiled batched matmul and broadcasting binary pointwise ops.
//
// The hot per-tile routines are written once and built per ISA: the matmul
// tile here as a template (baseline, and AVX2+FMA on x86-64), the SDPA
// forward kernels in sdpa_fwd.inl (baseline, AVX2, AVX-512, AMX). The plan's ISA
// (cpu_isa.cpp) picks the build; the OpenMP loops stay in baseline code and
// call the chosen per-tile routine.
//
// Nothing here allocates: scratch comes from the caller's workspace slice.

#include "cpu_kernels.hpp"
#include "sdpa_fwd.hpp"
#include "work_pool.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#ifdef _OPENMP
#include <omp.h>
#endif

#if HIPDNN_CPU_HAVE_BLAS
#include <cblas.h> // scipy-openblas32: every symbol carries the scipy_ prefix
#include <climits>
#endif

#if defined(__x86_64__) && defined(__GNUC__)
#define HIPDNN_CPU_HAVE_AVX2_PATH 1
#define HIPDNN_CPU_AVX2_FN __attribute__((target("avx2,fma"), flatten))
#else
#define HIPDNN_CPU_HAVE_AVX2_PATH 0
#endif

namespace hipdnn_cpu
{

int max_threads()
{
#ifdef _OPENMP
    return std::max(1, omp_get_max_threads());
#else
    return 1;
#endif
}

namespace
{

inline int thread_num()
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

// ------------------------------------------------------------ GEMM tile ----
// Register-blocked micro kernels written with GCC vector extensions: W-wide
// float vectors (4 for the baseline SSE build, 8 for the AVX2 build), MR rows
// by NV vectors of accumulators held in registers across the whole k loop.
template <int W>
struct VecOf;
template <>
struct VecOf<4>
{
    typedef float type __attribute__((vector_size(16)));
};
template <>
struct VecOf<8>
{
    typedef float type __attribute__((vector_size(32)));
};

// c[MR x NV*W] (+)= a[MR x k] * b[k x NV*W]
template <int W, int MR, int NV>
inline void micro(int64_t k,
                  const float* __restrict a,
                  int64_t lda,
                  const float* __restrict b,
                  int64_t ldb,
                  float* __restrict c,
                  int64_t ldc,
                  bool accumulate)
{
    typedef typename VecOf<W>::type V;
    V r[MR][NV];
    for(int i = 0; i < MR; ++i)
        for(int v = 0; v < NV; ++v)
        {
            r[i][v] = V{};
            if(accumulate)
                std::memcpy(&r[i][v], c + i * ldc + v * W, sizeof(V)); // unaligned load
        }
    for(int64_t p = 0; p < k; ++p)
    {
        V bv[NV];
        for(int v = 0; v < NV; ++v)
            std::memcpy(&bv[v], b + p * ldb + v * W, sizeof(V));
        for(int i = 0; i < MR; ++i)
        {
            const float av = a[i * lda + p];
            for(int v = 0; v < NV; ++v)
                r[i][v] += av * bv[v];
        }
    }
    for(int i = 0; i < MR; ++i)
        for(int v = 0; v < NV; ++v)
            std::memcpy(c + i * ldc + v * W, &r[i][v], sizeof(V));
}

// Scalar tail: mr rows, nr (< W) columns.
inline void micro_scalar(int64_t mr,
                         int64_t nr,
                         int64_t k,
                         const float* a,
                         int64_t lda,
                         const float* b,
                         int64_t ldb,
                         float* c,
                         int64_t ldc,
                         bool accumulate)
{
    for(int64_t i = 0; i < mr; ++i)
        for(int64_t j = 0; j < nr; ++j)
        {
            float r = accumulate ? c[i * ldc + j] : 0.0f;
            for(int64_t p = 0; p < k; ++p)
                r += a[i * lda + p] * b[p * ldb + j];
            c[i * ldc + j] = r;
        }
}

// sum a[i] * b[i], both contiguous; W-wide partial sums.
template <int W>
inline float dot(const float* __restrict a, const float* __restrict b, int64_t n)
{
    typedef typename VecOf<W>::type V;
    V s0{}, s1{};
    int64_t i = 0;
    for(; i + 2 * W <= n; i += 2 * W)
    {
        V a0, a1, b0, b1;
        std::memcpy(&a0, a + i, sizeof(V));
        std::memcpy(&a1, a + i + W, sizeof(V));
        std::memcpy(&b0, b + i, sizeof(V));
        std::memcpy(&b1, b + i + W, sizeof(V));
        s0 += a0 * b0;
        s1 += a1 * b1;
    }
    for(; i + W <= n; i += W)
    {
        V a0, b0;
        std::memcpy(&a0, a + i, sizeof(V));
        std::memcpy(&b0, b + i, sizeof(V));
        s0 += a0 * b0;
    }
    s0 += s1;
    float r = 0.0f;
    for(int l = 0; l < W; ++l)
        r += s0[l];
    for(; i < n; ++i)
        r += a[i] * b[i];
    return r;
}

// All rows of one column strip of width NV*W.
template <int W, int MR, int NV>
inline void strip(int64_t m,
                  int64_t k,
                  const float* a,
                  int64_t lda,
                  const float* b,
                  int64_t ldb,
                  float* c,
                  int64_t ldc,
                  bool accumulate)
{
    int64_t i0 = 0;
    for(; i0 + MR <= m; i0 += MR)
        micro<W, MR, NV>(k, a + i0 * lda, lda, b, ldb, c + i0 * ldc, ldc, accumulate);
    const float* ar = a + i0 * lda;
    float* cr = c + i0 * ldc;
    switch(m - i0) // remainder rows, always fewer than MR
    {
    case 5:
        micro<W, 5, NV>(k, ar, lda, b, ldb, cr, ldc, accumulate);
        break;
    case 4:
        micro<W, 4, NV>(k, ar, lda, b, ldb, cr, ldc, accumulate);
        break;
    case 3:
        micro<W, 3, NV>(k, ar, lda, b, ldb, cr, ldc, accumulate);
        break;
    case 2:
        micro<W, 2, NV>(k, ar, lda, b, ldb, cr, ldc, accumulate);
        break;
    case 1:
        micro<W, 1, NV>(k, ar, lda, b, ldb, cr, ldc, accumulate);
        break;
    default:
        break;
    }
}

// C[m x n] (+)= A[m x k] * B[k x n], row-major, unit column stride.
// Column strips outermost so that one strip of B stays in L1 while every row
// block of A passes over it.
template <int W, int MR, int NV>
inline void gemm_impl(int64_t m,
                      int64_t n,
                      int64_t k,
                      const float* a,
                      int64_t lda,
                      const float* b,
                      int64_t ldb,
                      float* c,
                      int64_t ldc,
                      bool accumulate)
{
    int64_t j0 = 0;
    for(; j0 + NV * W <= n; j0 += NV * W)
        strip<W, MR, NV>(m, k, a, lda, b + j0, ldb, c + j0, ldc, accumulate);
    for(; j0 + W <= n; j0 += W)
        strip<W, MR, 1>(m, k, a, lda, b + j0, ldb, c + j0, ldc, accumulate);
    if(j0 < n)
        micro_scalar(m, n - j0, k, a, lda, b + j0, ldb, c + j0, ldc, accumulate);
}

// Kernel shapes of the two builds.
#define HIPDNN_CPU_GEMM_BASE 4, 4, 2 // SSE: 4 rows x 8 floats, 8 accumulators
#define HIPDNN_CPU_GEMM_AVX2 8, 6, 2 // AVX2: 6 rows x 16 floats, 12 accumulators

inline int64_t round16(int64_t n)
{
    return (n + 15) / 16 * 16;
}

// --------------------------------------------------------------- Matmul ----
constexpr int64_t kMmMb = 64;
constexpr int64_t kMmNb = 128;
constexpr int64_t kMmKb = 256;

struct MmLayout
{
    int64_t mb, nb, kb;
    int64_t off_a, off_b, off_c, total; // floats
};

MmLayout mm_layout(int64_t m, int64_t n, int64_t k)
{
    MmLayout l{};
    l.mb = std::min(kMmMb, m);
    l.nb = std::min(kMmNb, n);
    l.kb = std::min(kMmKb, k);
    l.off_a = 0;
    l.off_b = round16(l.mb * l.kb);
    l.off_c = l.off_b + round16(l.kb * l.nb);
    l.total = l.off_c + round16(l.mb * l.nb);
    return l;
}

struct MmRun
{
    const MatmulProblem* p;
    MmLayout lay;
    int64_t mt, nt;
};

template <int W, int MR, int NV>
inline void mm_item_impl(const MmRun& run, int64_t w, float* ws)
{
    const MatmulProblem& p = *run.p;
    const MmLayout& lay = run.lay;
    const int64_t tiles = run.mt * run.nt;
    int64_t batch = w / tiles;
    const int64_t rem = w % tiles;
    const int64_t i0 = (rem / run.nt) * lay.mb;
    const int64_t j0 = (rem % run.nt) * lay.nb;
    const int64_t mm = std::min(lay.mb, p.m - i0);
    const int64_t nn = std::min(lay.nb, p.n - j0);

    const float* a = p.a;
    const float* b = p.b;
    float* c = p.c;
    for(int r = p.batch_rank - 1; r >= 0; --r)
    {
        const int64_t idx = batch % p.batch_dims[r];
        batch /= p.batch_dims[r];
        a += idx * p.a_bs[r];
        b += idx * p.b_bs[r];
        c += idx * p.c_bs[r];
    }

    float* ap = ws + lay.off_a;
    float* bp = ws + lay.off_b;
    float* cp = ws + lay.off_c;
    for(int64_t k0 = 0; k0 < p.k; k0 += lay.kb)
    {
        const int64_t kk = std::min(lay.kb, p.k - k0);
        for(int64_t i = 0; i < mm; ++i)
        {
            const float* src = a + (i0 + i) * p.a_sm + k0 * p.a_sk;
            float* dst = ap + i * lay.kb;
            if(p.a_sk == 1)
                for(int64_t q = 0; q < kk; ++q)
                    dst[q] = src[q];
            else
                for(int64_t q = 0; q < kk; ++q)
                    dst[q] = src[q * p.a_sk];
        }
        for(int64_t q = 0; q < kk; ++q)
        {
            const float* src = b + (k0 + q) * p.b_sk + j0 * p.b_sn;
            float* dst = bp + q * lay.nb;
            if(p.b_sn == 1)
                for(int64_t j = 0; j < nn; ++j)
                    dst[j] = src[j];
            else
                for(int64_t j = 0; j < nn; ++j)
                    dst[j] = src[j * p.b_sn];
        }
        gemm_impl<W, MR, NV>(mm, nn, kk, ap, lay.kb, bp, lay.nb, cp, lay.nb, k0 > 0);
    }
    for(int64_t i = 0; i < mm; ++i)
    {
        float* dst = c + (i0 + i) * p.c_sm + j0 * p.c_sn;
        const float* src = cp + i * lay.nb;
        if(p.c_sn == 1)
            for(int64_t j = 0; j < nn; ++j)
                dst[j] = src[j];
        else
            for(int64_t j = 0; j < nn; ++j)
                dst[j * p.c_sn] = src[j];
    }
}

void mm_item_base(const MmRun& run, int64_t w, float* ws)
{
    mm_item_impl<HIPDNN_CPU_GEMM_BASE>(run, w, ws);
}

#if HIPDNN_CPU_HAVE_AVX2_PATH
HIPDNN_CPU_AVX2_FN void mm_item_avx2(const MmRun& run, int64_t w, float* ws)
{
    mm_item_impl<HIPDNN_CPU_GEMM_AVX2>(run, w, ws);
}
#endif

// ------------------------------------------------------------ Pointwise ----
template <class F>
inline void pw_row(const float* a, int64_t sa, const float* b, int64_t sb, float* o, int64_t so, int64_t n, F f)
{
    if(sa == 1 && sb == 1 && so == 1)
        for(int64_t j = 0; j < n; ++j)
            o[j] = f(a[j], b[j]);
    else if(sa == 1 && sb == 0 && so == 1)
    {
        const float bv = *b;
        for(int64_t j = 0; j < n; ++j)
            o[j] = f(a[j], bv);
    }
    else if(sa == 0 && sb == 1 && so == 1)
    {
        const float av = *a;
        for(int64_t j = 0; j < n; ++j)
            o[j] = f(av, b[j]);
    }
    else
        for(int64_t j = 0; j < n; ++j)
            o[j * so] = f(a[j * sa], b[j * sb]);
}

template <class F>
void pw_run(const PointwiseProblem& p, int nthreads, F f)
{
    const int r = p.rank;
    const int64_t inner = p.dims[r - 1];
    int64_t outer = 1;
    for(int i = 0; i < r - 1; ++i)
        outer *= p.dims[i];
    constexpr int64_t kChunk = 8192;
    const int64_t nchunks = (inner + kChunk - 1) / kChunk;
    const int64_t items = outer * nchunks;
    const bool par = outer * inner >= (int64_t(1) << 15);
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nthreads) if(par)
#endif
    for(int64_t w = 0; w < items; ++w)
    {
        int64_t row = w / nchunks;
        const int64_t j0 = (w % nchunks) * kChunk;
        const int64_t n = std::min(kChunk, inner - j0);
        const float* a = p.a + j0 * p.a_st[r - 1];
        const float* b = p.b + j0 * p.b_st[r - 1];
        float* o = p.out + j0 * p.o_st[r - 1];
        for(int i = r - 2; i >= 0; --i)
        {
            const int64_t idx = row % p.dims[i];
            row /= p.dims[i];
            a += idx * p.a_st[i];
            b += idx * p.b_st[i];
            o += idx * p.o_st[i];
        }
        pw_row(a, p.a_st[r - 1], b, p.b_st[r - 1], o, p.o_st[r - 1], n, f);
    }
    (void)nthreads;
    (void)par;
}

} // namespace

// ================================================================ public ====

namespace
{
// The AMX panel kernel's slots, in floats (sdpa_fwd.inl, amx_item): per panel the queries in the
// tiles' pair layout (bf16, d padded to 32) and the output transposed (fp32, dv padded to 16); one
// tile's scores (fp32) and probabilities in pair layout (bf16, keys padded to 32 past the tile);
// one tile of K rows (bf16, 16 rows of room past the tile), of V rows (bf16, copied only when V's
// dims are strided) and of V transposed (bf16, keys padded to 32 past the tile).
int64_t amx_layout(SdpaRun& run)
{
    const int64_t bk = kSdpaAmxBk, qw = kSdpaAmxQw; // (dpa, dva: set by sdpa_plan_layout)
    int64_t o = 0;
    run.off_qt = o;
    o += round16(run.panels * run.dpa * qw / 2);
    run.off_ot = o;
    o += round16(run.panels * run.dva * qw);
    run.off_st = o;
    o += round16(bk * qw);
    run.off_pb = o;
    o += round16((bk + 32) / 2 * qw);
    run.off_m = o;
    o += round16(run.panels * qw);
    run.off_l = o;
    o += round16(run.panels * qw);
    run.off_kb = o;
    o += round16((bk + 16) * run.dpa / 2);
    run.off_vb = o;
    o += round16(bk * run.dva / 2);
    run.off_vt = o; // and a dva x 32 copy of a ragged last step's columns after it
    o += round16(run.dva * (bk + 32) / 2 + run.dva * 16);
    return o;
}
} // namespace

int64_t sdpa_plan_layout(SdpaRun& run, int64_t qw)
{
    // Panels of run.max_vectors vectors (the wider micro kernels load fewer operands per FMA: 3 vectors
    // were about 6 % faster than 2 at D = 128, S = 2048 on a Xeon with AVX-512; 4 there, see sdpa_qw),
    // or of fewer where those leave clearly fewer lanes empty (S = 64: one block
    // of 2 x 32 rather than 2 x 48; S = 37: 48 rather than 64; not S = 2048, 2048 against 2064 rows).
    // The AMX kernel's panels are two tiles wide.
    const int64_t lanes = run.lanes;
    const int64_t widest = std::max<int64_t>(2, run.max_vectors);
    const auto padded = [](int64_t n, int64_t w) { return (n + w - 1) / w * w; };
    if(run.amx)
        qw = kSdpaAmxQw;
    else if(qw == 0)
    {
        qw = widest * lanes;
        for(int64_t nv = widest - 1; nv >= 2 && run.sq > 0; --nv)
            if(100 * padded(run.sq, nv * lanes) < 92 * padded(run.sq, qw))
                qw = nv * lanes;
    }
    run.qw = qw;
    const int64_t need = (run.sq + qw - 1) / qw;
    int64_t cap = kSdpaPanels;
    if(run.amx)
    {
        run.dpa = (run.d + 31) / 32 * 32;
        run.dva = (run.dv + 15) / 16 * 16;
        const int64_t per_panel = run.dpa * qw * 2 + run.dva * qw * 4; // Qp, Ot
        cap = std::max(kSdpaAmxMinPanels, std::min(kSdpaAmxPanels, kSdpaAmxPanelBytes / std::max<int64_t>(1, per_panel)));
    }
    if(run.max_panels > 0)
        cap = std::min(cap, run.max_panels);
    run.panels = std::max<int64_t>(1, std::min(cap, need));
    run.nqb = (run.sq + run.panels * qw - 1) / (run.panels * qw);
    // The last block in narrower panels where those cost less than the block's panels with empty lanes
    // (a narrower micro kernel runs up to ~6-8 % slower per lane): S = 1024 in 3-vector panels ends in
    // 64 queries, 2 x 32 rather than 2 x 48 lanes. Never more lanes than the block's own panels: the
    // scratch holds those.
    run.tail_qw = 0;
    if(!run.amx && qw > 2 * lanes)
    {
        const int64_t tail = run.sq - (run.nqb - 1) * run.panels * qw;
        int64_t best = qw;
        for(int64_t nv = qw / lanes - 1; nv >= 2; --nv)
            if(106 * padded(tail, nv * lanes) < 100 * padded(tail, best))
                best = nv * lanes;
        if(best != qw)
            run.tail_qw = best;
    }
    const int64_t bk = kSdpaBk;
    int64_t o = 0;
    run.off_qt = o;
    o += round16(run.panels * run.d * qw);
    run.off_ot = o;
    o += round16(run.panels * run.dv * qw);
    run.off_st = o;
    o += round16(bk * qw);
    run.off_m = o;
    o += round16(run.panels * qw);
    run.off_l = o;
    o += round16(run.panels * qw);
    run.off_kb = o;
    o += round16(bk * run.d);
    run.off_vb = o;
    o += round16(bk * run.dv);
    const int64_t panel_total = o;

    // Rows kernel (its slots overlap the panel kernel's: one kernel runs per call).
    const int64_t rb = kSdpaRowsMax;
    run.dp = (run.d + run.lanes - 1) / run.lanes * run.lanes;
    run.dvp = (run.dv + run.lanes - 1) / run.lanes * run.lanes;
    o = 0;
    run.off_rq = o;
    o += round16(rb * run.dp);
    run.off_ro = o;
    o += round16(rb * run.dvp);
    run.off_rs = o;
    o += round16(rb * bk);
    run.off_rm = o;
    o += round16(rb);
    run.off_rl = o;
    o += round16(rb);
    run.off_ra = o;
    o += round16(rb);
    run.off_rk = o;
    o += round16(bk * run.dp);
    run.off_rv = o;
    o += round16(bk * run.dvp);
    run.off_part = o;
    o += round16(rb * (run.dvp + 2));
    run.total = std::max(run.amx ? amx_layout(run) : panel_total, o);
    return run.total;
}

size_t sdpa_scratch_per_thread(int64_t sq, int64_t skv, int64_t d, int64_t dv, bool bf16_qkv)
{
    (void)skv;
    // Every build's layout at each panel width: the plan's workspace does not depend on the ISA,
    // and (each layout growing with sq) a shorter call never needs more than the declared length did.
    int64_t most = 0;
    for(int lanes : {4, 8, 16})
        for(int64_t vectors = 2; vectors <= sdpa_qw(lanes) / lanes; ++vectors)
        {
            SdpaRun run;
            run.sq = sq;
            run.d = d;
            run.dv = dv;
            run.lanes = lanes;
            most = std::max(most, sdpa_plan_layout(run, vectors * lanes));
        }
    if(bf16_qkv)
    {
        SdpaRun amx; // the AMX build's tile kernel (run_sdpa gives it bf16 q, k and v only)
        amx.sq = sq;
        amx.d = d;
        amx.dv = dv;
        amx.lanes = 16;
        amx.amx = true;
        most = std::max(most, sdpa_plan_layout(amx, 0));
    }
    return align_up(static_cast<size_t>(most) * sizeof(float));
}

namespace
{
// Work (multiply-adds and K / V elements read, about 40-100 a nanosecond on one core) below which
// a call runs on the calling thread alone: handing items to another thread costs more than the
// ~2 us it saves. Above it, the workers that are awake help (one per kSdpaWorkPerThread of work);
// a sleeping one is woken only from kSdpaWakeWork (~15 us alone): waking costs the caller a few
// microseconds (see work_pool.hpp), and in a stream of calls the worker then stays awake.
constexpr double kSdpaSerialWork = 1.5e5;
constexpr double kSdpaWorkPerThread = 1.0e5;
constexpr double kSdpaWakeWork = 5.0e5;
// Keys per chunk below which splitting a kv head's keys over threads does not pay for the merge.
constexpr int64_t kSdpaMinChunk = 512;

struct SdpaIsa
{
    void (*item)(const SdpaRun&, int64_t, float*);
    void (*rows_item)(const SdpaRun&, int64_t, float*, float*);
    void (*rows_merge)(const SdpaRun&, int64_t, char*, size_t);
    int lanes;
};

SdpaIsa sdpa_isa(Isa isa)
{
    switch(isa)
    {
    case Isa::Amx:
        return {sdpa_amx::run_item, sdpa_amx::run_rows_item, sdpa_amx::rows_merge, 16};
    case Isa::Avx512Bf16:
        return {sdpa_avx512bf16::run_item, sdpa_avx512bf16::run_rows_item, sdpa_avx512bf16::rows_merge, 16};
    case Isa::Avx512:
        return {sdpa_avx512::run_item, sdpa_avx512::run_rows_item, sdpa_avx512::rows_merge, 16};
    case Isa::Avx2:
        return {sdpa_avx2::run_item, sdpa_avx2::run_rows_item, sdpa_avx2::rows_merge, 8};
    case Isa::Baseline:
    default:
        return {sdpa_base::run_item, sdpa_base::run_rows_item, sdpa_base::rows_merge, 4};
    }
}

// The SDPA forward's items run on the work pool (work_pool.hpp) by default: a call never waits for a
// thread the OS has not scheduled, and a small one never wakes any. With Threading::OpenMP they are
// handed out by the OpenMP team in the same order (each to the first thread free).
template <class F>
void sdpa_parallel(Threading threading, int64_t total, int nt, bool wake, F f)
{
#ifdef _OPENMP
    if(threading == Threading::OpenMP)
    {
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt) if(nt > 1)
        for(int64_t w = 0; w < total; ++w)
            f(w, omp_get_thread_num());
        return;
    }
#else
    (void)threading;
#endif
    pool_for(total, nt, wake, f);
}
} // namespace

bool run_sdpa(const SdpaProblem& p, char* scratch, size_t per_thread, int nthreads, Isa isa, Threading threading,
              int panel_vectors)
{
    const SdpaIsa k = sdpa_isa(isa);
    SdpaRun run;
    run.p = &p;
    run.b = p.qs.dims[0];
    run.hq = p.qs.dims[1];
    run.sq = p.qs.dims[2];
    run.d = p.qs.dims[3];
    run.hk = p.ks.dims[1];
    run.skv = p.ks.dims[2];
    run.dv = p.vs.dims[3];
    run.group = run.hq / run.hk;
    run.lanes = k.lanes;
    // bf16 q, k and v on an AMX plan: the tile kernel (the rows kernel still serves few queries).
    run.amx = isa == Isa::Amx && run.sq > kSdpaRowsMaxSq && p.qt == DType::BF16 && p.kt == DType::BF16
              && p.vt == DType::BF16;
    // bf16 q, k and v on an AVX512_BF16 plan: the panel kernel's products on VDPBF16PS (same layout).
    run.bf16dot = isa == Isa::Avx512Bf16 && p.qt == DType::BF16 && p.kt == DType::BF16 && p.vt == DType::BF16;
    // The dot-product kernel's panels are 3 vectors at most (its 8 x 3 micro kernel); the fp32 ones take
    // the plan's width where the build has it.
    run.max_vectors = run.bf16dot ? 3 : std::min<int64_t>(panel_vectors, sdpa_qw(run.lanes) / run.lanes);
    if(static_cast<size_t>(sdpa_plan_layout(run, 0)) * sizeof(float) > per_thread)
        return false;
    if(run.b == 0 || run.hq == 0 || run.sq == 0)
        return true;

    // Threads the work pays for: (multiply-adds of q k^T and p v, and the K / V elements read).
    const double work = static_cast<double>(run.b * run.hq) * static_cast<double>(run.sq)
                            * static_cast<double>(run.skv) * static_cast<double>(run.d + run.dv)
                        + static_cast<double>(run.b * run.hk) * static_cast<double>(run.skv)
                              * static_cast<double>(run.d + run.dv);
    int nt = 1;
    if(work > kSdpaSerialWork)
        nt = static_cast<int>(std::max(1.0, std::min<double>(nthreads, work / kSdpaWorkPerThread)));
    const bool wake = work >= kSdpaWakeWork;

    run.rows = run.sq <= kSdpaRowsMaxSq;
    if(!run.rows)
    {
        // The AMX kernel's items: fewer panels each where there would be under two per thread.
        while(run.amx && run.b * run.hq * run.nqb < 2 * nt && run.panels > kSdpaAmxMinPanels)
        {
            run.max_panels = run.panels / 2;
            sdpa_plan_layout(run, 0);
        }
        const int64_t total = run.b * run.hq * run.nqb;
        nt = static_cast<int>(std::min<int64_t>(nt, total));
        sdpa_parallel(threading, total, nt, wake, [&](int64_t w, int tid) {
            k.item(run, w, reinterpret_cast<float*>(scratch + static_cast<size_t>(tid) * per_thread));
        });
        return true;
    }

    // Rows kernel: the (batch, kv head) rows in balanced blocks of at most kSdpaRowsMax.
    run.nrows = run.group * run.sq;
    // Software prefetch of K and V ahead: decode from DRAM gained 10-22 % with it on Zen 4 (fp32 and
    // bf16) and 3-24 % in bf16 on an AMX Xeon, whose own prefetchers already keep fp32 rows coming
    // (0-8 % slower with it there; bench/results/cpu_sdpa_decode_layers_*_{zen4,xeon}.json).
    run.prefetch_kv = p.kt != DType::F32 || cpu_is_amd();
    run.nrb = (run.nrows + kSdpaRowsMax - 1) / kSdpaRowsMax;
    run.rb = (run.nrows + run.nrb - 1) / run.nrb;
    const int64_t blocks = run.b * run.hk * run.nrb;
    // Too few blocks for the threads: split the keys into chunks (item w's partial result lives in
    // slice w, so at most one item per slice).
    run.chunks = 1;
    run.chunk = run.skv;
    if(blocks < nt)
    {
        const int64_t by_len = run.skv / kSdpaMinChunk;
        run.chunks = std::max<int64_t>(1, std::min<int64_t>(nt / blocks, by_len));
        run.chunk = (run.skv + run.chunks - 1) / run.chunks;
        run.chunk = (run.chunk + kSdpaBk - 1) / kSdpaBk * kSdpaBk;
        run.chunks = (run.skv + run.chunk - 1) / run.chunk;
    }
    const int64_t total = blocks * run.chunks;
    nt = static_cast<int>(std::min<int64_t>(nt, total));
    sdpa_parallel(threading, total, nt, wake, [&](int64_t w, int tid) {
        float* part = run.chunks > 1 ? reinterpret_cast<float*>(scratch + static_cast<size_t>(w) * per_thread) + run.off_part
                                     : nullptr;
        k.rows_item(run, w, reinterpret_cast<float*>(scratch + static_cast<size_t>(tid) * per_thread), part);
    });
    if(run.chunks > 1)
        for(int64_t blk = 0; blk < blocks; ++blk)
            k.rows_merge(run, blk, scratch, per_thread);
    return true;
}

#if HIPDNN_CPU_HAVE_BLAS
// ------------------------------------------------------- Matmul via BLAS ----
// Large fp32 matmuls go to OpenBLAS's sgemm (~1.5x the built-in kernel at
// 2048^3 on the development machine), one call per batch matrix, from the
// calling thread: OpenBLAS threads each call itself with its own pool, sized
// once to the engine's OpenMP thread count so the two never run at once.
// Small problems, and operands without a unit stride on one matrix axis,
// stay on the built-in kernel.
namespace
{
constexpr int64_t kBlasMinFlops = int64_t{128} * 128 * 128; // m * n * k (64^3 batched: no gain)

// One operand of a row-major sgemm: rows x cols with strides (sr, sc).
// Sets trans / ld when a unit stride on one axis lets BLAS read it in place.
bool blas_operand(int64_t rows, int64_t cols, int64_t sr, int64_t sc, CBLAS_TRANSPOSE& trans, blasint& ld)
{
    if(cols == 1)
        sc = 1; // a single column's stride is never used
    if(rows == 1)
        sr = std::max<int64_t>(cols, 1);
    if(sc == 1 && sr >= std::max<int64_t>(cols, 1) && sr <= INT_MAX)
    {
        trans = CblasNoTrans;
        ld = static_cast<blasint>(sr);
        return true;
    }
    if(sr == 1 && sc >= std::max<int64_t>(rows, 1) && sc <= INT_MAX)
    {
        trans = CblasTrans;
        ld = static_cast<blasint>(sc);
        return true;
    }
    return false;
}

bool blas_disabled()
{
    static const bool off = [] {
        const char* e = std::getenv("HIPDNN_CPU_MATMUL_BLAS");
        return e != nullptr && e[0] == '0';
    }();
    return off;
}

// Runs p on sgemm and returns true, or returns false (nothing touched) when
// the BLAS does not pay or cannot read the operands in place.
bool run_matmul_blas(const MatmulProblem& p, int nthreads)
{
    if(blas_disabled() || p.m * p.n * p.k < kBlasMinFlops)
        return false;
    if(p.m > INT_MAX || p.n > INT_MAX || p.k > INT_MAX)
        return false;
    // C must be row- or column-major; a column-major C is computed as the
    // row-major C^T = B^T A^T.
    int64_t m = p.m, n = p.n, c_sr = p.c_sm, c_sc = p.c_sn;
    int64_t x_sr = p.a_sm, x_sc = p.a_sk, y_sr = p.b_sk, y_sc = p.b_sn; // X (m x k) @ Y (k x n)
    bool swapped = false;
    const bool c_row = (n == 1 || c_sc == 1) && (m == 1 || c_sr >= n);
    if(!c_row)
    {
        if(!((m == 1 || c_sr == 1) && (n == 1 || c_sc >= m)))
            return false;
        swapped = true;
        std::swap(m, n);
        std::swap(c_sr, c_sc);
        x_sr = p.b_sn;
        x_sc = p.b_sk;
        y_sr = p.a_sk;
        y_sc = p.a_sm;
    }
    const int64_t ldc64 = m == 1 ? std::max<int64_t>(n, 1) : c_sr;
    if(ldc64 > INT_MAX || ldc64 < std::max<int64_t>(n, 1))
        return false;
    CBLAS_TRANSPOSE ta, tb;
    blasint lda, ldb;
    if(!blas_operand(m, p.k, x_sr, x_sc, ta, lda) || !blas_operand(p.k, n, y_sr, y_sc, tb, ldb))
        return false;

    static const bool pool_sized = [] {
        scipy_openblas_set_num_threads(max_threads());
        return true;
    }();
    (void)pool_sized;
    (void)nthreads;

    int64_t batches = 1;
    for(int i = 0; i < p.batch_rank; ++i)
        batches *= p.batch_dims[i];
    for(int64_t w = 0; w < batches; ++w)
    {
        const float* a = p.a;
        const float* b = p.b;
        float* c = p.c;
        int64_t rest = w;
        for(int r = p.batch_rank - 1; r >= 0; --r)
        {
            const int64_t idx = rest % p.batch_dims[r];
            rest /= p.batch_dims[r];
            a += idx * p.a_bs[r];
            b += idx * p.b_bs[r];
            c += idx * p.c_bs[r];
        }
        const float* x = swapped ? b : a;
        const float* y = swapped ? a : b;
        scipy_cblas_sgemm(CblasRowMajor, ta, tb, static_cast<blasint>(m), static_cast<blasint>(n),
                          static_cast<blasint>(p.k), 1.0f, x, lda, y, ldb, 0.0f, c, static_cast<blasint>(ldc64));
    }
    return true;
}
} // namespace
#endif

size_t matmul_scratch_per_thread(int64_t m, int64_t n, int64_t k)
{
    return align_up(static_cast<size_t>(mm_layout(m, n, k).total) * sizeof(float));
}

bool run_matmul(const MatmulProblem& p, char* scratch, size_t per_thread, int nthreads, Isa isa)
{
    MmRun run{};
    run.p = &p;
    run.lay = mm_layout(p.m, p.n, p.k);
    if(static_cast<size_t>(run.lay.total) * sizeof(float) > per_thread)
        return false;
#if HIPDNN_CPU_HAVE_BLAS
    if(run_matmul_blas(p, nthreads))
        return true;
#endif
    run.mt = (p.m + run.lay.mb - 1) / run.lay.mb;
    run.nt = (p.n + run.lay.nb - 1) / run.lay.nb;
    int64_t batches = 1;
    for(int i = 0; i < p.batch_rank; ++i)
        batches *= p.batch_dims[i];
    const int64_t total = batches * run.mt * run.nt;

    void (*item)(const MmRun&, int64_t, float*) = mm_item_base;
#if HIPDNN_CPU_HAVE_AVX2_PATH
    if(isa != Isa::Baseline) // the matmul tile has no AVX-512 build: AVX-512 CPUs run the AVX2 one
        item = mm_item_avx2;
#else
    (void)isa;
#endif
    const int nt = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(nthreads, total)));
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
#endif
    for(int64_t w = 0; w < total; ++w)
    {
        float* ws = reinterpret_cast<float*>(scratch + static_cast<size_t>(thread_num()) * per_thread);
        item(run, w, ws);
    }
    (void)nt;
    return true;
}

void run_pointwise(const PointwiseProblem& p, int nthreads)
{
    const PointwiseParams& q = p.prm;
    auto b2f = [](bool x) { return x ? 1.0f : 0.0f; };
    switch(p.op)
    {
    case BinaryOp::Add:
        pw_run(p, nthreads, [](float x, float y) { return x + y; });
        break;
    case BinaryOp::Sub:
        pw_run(p, nthreads, [](float x, float y) { return x - y; });
        break;
    case BinaryOp::Mul:
        pw_run(p, nthreads, [](float x, float y) { return x * y; });
        break;
    case BinaryOp::Div:
        pw_run(p, nthreads, [](float x, float y) { return x / y; });
        break;
    case BinaryOp::Max:
        // NaN in either input gives NaN, like numpy.maximum.
        pw_run(p, nthreads, [](float x, float y) { return (x != x || x > y) ? x : y; });
        break;
    case BinaryOp::Min:
        pw_run(p, nthreads, [](float x, float y) { return (x != x || x < y) ? x : y; });
        break;
    case BinaryOp::AddSquare:
        pw_run(p, nthreads, [](float x, float y) { return x + y * y; });
        break;
    case BinaryOp::CmpEq:
        pw_run(p, nthreads, [=](float x, float y) { return b2f(x == y); });
        break;
    case BinaryOp::CmpNe:
        pw_run(p, nthreads, [=](float x, float y) { return b2f(x != y); });
        break;
    case BinaryOp::CmpGt:
        pw_run(p, nthreads, [=](float x, float y) { return b2f(x > y); });
        break;
    case BinaryOp::CmpGe:
        pw_run(p, nthreads, [=](float x, float y) { return b2f(x >= y); });
        break;
    case BinaryOp::CmpLt:
        pw_run(p, nthreads, [=](float x, float y) { return b2f(x < y); });
        break;
    case BinaryOp::CmpLe:
        pw_run(p, nthreads, [=](float x, float y) { return b2f(x <= y); });
        break;
    case BinaryOp::LogicalAnd:
        pw_run(p, nthreads, [=](float x, float y) { return b2f(x != 0.0f && y != 0.0f); });
        break;
    case BinaryOp::LogicalOr:
        pw_run(p, nthreads, [=](float x, float y) { return b2f(x != 0.0f || y != 0.0f); });
        break;
    case BinaryOp::Abs:
        pw_run(p, nthreads, [](float x, float) { return std::fabs(x); });
        break;
    case BinaryOp::Ceil:
        pw_run(p, nthreads, [](float x, float) { return std::ceil(x); });
        break;
    case BinaryOp::Floor:
        pw_run(p, nthreads, [](float x, float) { return std::floor(x); });
        break;
    case BinaryOp::Erf:
        pw_run(p, nthreads, [](float x, float) { return std::erf(x); });
        break;
    case BinaryOp::Exp:
        pw_run(p, nthreads, [](float x, float) { return std::exp(x); });
        break;
    case BinaryOp::Log:
        pw_run(p, nthreads, [](float x, float) { return std::log(x); });
        break;
    case BinaryOp::Neg:
        pw_run(p, nthreads, [](float x, float) { return -x; });
        break;
    case BinaryOp::Recip:
        pw_run(p, nthreads, [](float x, float) { return 1.0f / x; });
        break;
    case BinaryOp::Relu:
        pw_run(p, nthreads, [=](float x, float) {
            float r = x < q.relu_lo ? q.relu_lo + q.relu_slope * (x - q.relu_lo) : x;
            if(q.has_relu_hi && r > q.relu_hi)
                r = q.relu_hi;
            return r;
        });
        break;
    case BinaryOp::Rsqrt:
        pw_run(p, nthreads, [](float x, float) { return 1.0f / std::sqrt(x); });
        break;
    case BinaryOp::Sigmoid:
        pw_run(p, nthreads, [](float x, float) { return 1.0f / (1.0f + std::exp(-x)); });
        break;
    case BinaryOp::Sin:
        pw_run(p, nthreads, [](float x, float) { return std::sin(x); });
        break;
    case BinaryOp::Tan:
        pw_run(p, nthreads, [](float x, float) { return std::tan(x); });
        break;
    case BinaryOp::Softplus:
        // log(1 + exp(beta x)) / beta, without overflow for large beta x
        pw_run(p, nthreads, [=](float x, float) {
            const float t = q.softplus_beta * x;
            return (t > 20.0f ? t : std::log1p(std::exp(t))) / q.softplus_beta;
        });
        break;
    case BinaryOp::Sqrt:
        pw_run(p, nthreads, [](float x, float) { return std::sqrt(x); });
        break;
    case BinaryOp::Swish:
        pw_run(p, nthreads, [=](float x, float) { return x / (1.0f + std::exp(-q.swish_beta * x)); });
        break;
    case BinaryOp::Tanh:
        pw_run(p, nthreads, [](float x, float) { return std::tanh(x); });
        break;
    case BinaryOp::Gelu:
        pw_run(p, nthreads, [](float x, float) { return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f)); });
        break;
    case BinaryOp::GeluTanh:
        pw_run(p, nthreads, [](float x, float) {
            return 0.5f * x * (1.0f + std::tanh(0.79788456080286536f * (x + 0.044715f * x * x * x)));
        });
        break;
    case BinaryOp::Elu:
        pw_run(p, nthreads, [=](float x, float) { return x > 0.0f ? x : q.elu_alpha * std::expm1(x); });
        break;
    case BinaryOp::Identity:
        pw_run(p, nthreads, [](float x, float) { return x; });
        break;
    case BinaryOp::LogicalNot:
        pw_run(p, nthreads, [=](float x, float) { return b2f(x == 0.0f); });
        break;
    }
}

} // namespace hipdnn_cpu
