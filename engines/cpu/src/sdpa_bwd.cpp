// SDPA backward on the CPU, fp32 compute (fp16 / bf16 tensors are widened
// while packed). One pass over the (query block, key block) tiles, 5 tile
// products each:
//
//   pre-pass, per query row: lse in log2 units and delta = rowsum(dO o); a row
//     whose lse is too large to hold log2 of its softmax sum (a -1e9 or
//     finfo.min mask) is marked, and exact_rows recomputes its max and sum
//     from its scores before the main pass;
//   main pass, one work item per (batch, kv head, chunk of key blocks): for
//     each key block of the chunk, every query head of the GQA group and every
//     query block the masks leave visible,
//       S = Q K^T, dP = dO V^T, P = exp2(S' - lse), dS = scale P (dP - delta),
//       dV^T += dO^T P, dK^T += Q^T dS (kept transposed in per-thread scratch,
//       written once per key block), dQ += dS K (into the item's dQ
//       accumulator);
//   post-pass (only when dQ was not accumulated in place): sum the chunks'
//     accumulators and write dQ at its strides and type.
//
// dQ is shared between the key blocks of a head. Each (batch, kv head) pair
// is split into C chunks, key block kb going to chunk kb mod C (interleaved,
// so that causal chunks carry equal work), and every chunk owns a whole fp32
// dQ accumulator for its pair's query heads: no two threads ever write the
// same dQ row, there are no atomics or locks, and the sums are made in a
// fixed order, so results are deterministic. C = 1 whenever there are at
// least 2 pairs per thread (B=1, H=8 on 2 cores: whole heads per item); then,
// when dQ is fp32 with unit last stride and a head dim that fills whole
// vectors, the accumulator is dQ itself and nothing is allocated beyond the
// row statistics. Otherwise the accumulators (C x B x Hq x Sq x Dp floats,
// C capped so that they stay below kChunkBudget unless C = 1) and the row
// statistics are allocated per call; a failed allocation is reported, never
// ignored (run_sdpa_bwd returns AllocFailed with the byte count).
//
// Layout: keys along the vector lanes. K^T and V^T [D][BK] are packed once
// per key block (and K rows when K cannot be read in place or its rows do not
// start on 64-byte lines); Q and dO rows are read in place when fp32 with unit
// last stride and a width that fills whole vectors, else widened into scratch
// per query block. S and dP are [q][key]; the softmax recompute runs per row
// with that row's lse and delta as scalars. dV^T and dK^T [D][BK] take dO / Q
// as the broadcast operand and whole P / dS rows as the vector one (so the
// in-place, often misaligned dO and Q rows are only ever read as scalars),
// and are transposed once per key block into dK, dV; dQ reads dS along its
// rows against K rows. Packs and stores transpose 16 x 16 blocks in
// registers (AVX-512). Every product is one register-blocked kernel (rows of
// a strided source broadcast against whole vectors of a row-major operand). Per-thread scratch
// depends only on the tile sizes and the head dims, so dynamic (wildcard
// batch / length) graphs size it at build time. The kernels (sdpa_bwd.inl)
// are built for the baseline ISA and, on x86-64, for AVX2 + FMA (8 lanes)
// and AVX-512 (16 lanes), each in a file of its own (sdpa_bwd.hpp); the
// plan's ISA picks one (cpu_isa.cpp). On AMX plans, bf16 calls run the five
// products on AMX-BF16 tiles instead (sdpa_bwd_amx.cpp, pair_item in
// sdpa_bwd.inl), reading Q and dO through bf16 transposes that the pre-pass
// writes into the call's allocation; on AVX512_BF16 plans (no tiles: Zen 4 /
// 5) the same kernel runs its products on VDPBF16PS (sdpa_bwd_avx512bf16.cpp). This file is the driver: layout,
// allocation, the passes' work split and the choice of build.

#include "sdpa_bwd.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>

#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__x86_64__) && defined(__GNUC__)
#define HIPDNN_BWD_X86 1
#else
#define HIPDNN_BWD_X86 0
#endif

namespace hipdnn_cpu
{
namespace
{

using sdpa_bwd::ABK;
using sdpa_bwd::BK;
using sdpa_bwd::BQ;
using sdpa_bwd::Run;

constexpr int kMaxW = 16;
// Above this, dQ accumulators are not multiplied for parallelism (C stays 1).
constexpr size_t kChunkBudget = size_t(256) << 20;

inline int64_t round_to(int64_t n, int64_t m)
{
    return (n + m - 1) / m * m;
}

void layout(Run& r, int w, bool tiles)
{
    r.dp = round_to(std::max<int64_t>(r.d, 1), w);
    r.dvp = round_to(std::max<int64_t>(r.dv, 1), w);
    int64_t o = 0;
    auto take = [&](int64_t& off, int64_t n) {
        off = o;
        o += round_to(n, 16);
    };
    take(r.off_kt, r.dp * BK);
    take(r.off_vt, r.dvp * BK);
    take(r.off_kr, BK * r.dp);
    take(r.off_qr, BQ * r.dp);
    take(r.off_dor, BQ * r.dvp);
    take(r.off_s, BQ * BK);
    take(r.off_dp, BQ * BK);
    take(r.off_dk, BK * r.dp);
    take(r.off_dv, BK * r.dvp);
    r.total = o;
    // The AMX build's scratch (sdpa_bwd.hpp), from the same base: only for bf16 calls (tiles) whose
    // head dims it takes.
    r.amx_total = 0;
    if(tiles && r.d > 0 && r.dv > 0 && r.d % 32 == 0 && r.dv % 32 == 0)
    {
        int64_t a = 0;
        auto put = [&](int64_t& off, int64_t floats) {
            off = a;
            a += round_to(floats, 16);
        };
        put(r.a_kp, r.d * ABK / 2); // bf16 buffers, counted in floats
        put(r.a_kk, r.d * ABK / 2);
        put(r.a_vp, r.dv * ABK / 2);
        put(r.a_q, BQ * r.d / 2);
        put(r.a_do, BQ * r.dv / 2);
        put(r.a_dq, 32 * r.d);
        put(r.a_pq, BQ * ABK / 2);
        put(r.a_dsq, BQ * ABK / 2);
        put(r.a_dsr, BQ * ABK / 2);
        put(r.a_s, BQ * ABK);
        put(r.a_dp, BQ * ABK);
        put(r.a_dk, r.d * ABK);
        put(r.a_dv, r.dv * ABK);
        r.amx_total = a;
    }
    r.total = std::max(r.total, r.amx_total);
}

inline bool in_place(const void* base, DType t, const Shape& s, int64_t width, int w)
{
    return base != nullptr && t == DType::F32 && s.strides[3] == 1 && width % w == 0;
}

// Every row of a fp32 tensor starts on a 64-byte line.
inline bool rows_aligned(const void* base, const Shape& s)
{
    const int64_t line = 64 / sizeof(float);
    return reinterpret_cast<uintptr_t>(base) % 64 == 0 && s.strides[0] % line == 0 && s.strides[1] % line == 0
           && s.strides[2] % line == 0;
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
void parallel_items(int64_t total, int nthreads, F f)
{
    const int nt = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(nthreads, total)));
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
#endif
    for(int64_t w = 0; w < total; ++w)
        f(w, thread_id());
    (void)nt;
}

// a * b * ..., or 0 on overflow of size_t.
size_t mul_or_zero(std::initializer_list<size_t> xs)
{
    size_t r = 1;
    for(size_t x : xs)
        if(__builtin_mul_overflow(r, x, &r))
            return 0;
    return r;
}

struct FreeDeleter
{
    void operator()(float* p) const { std::free(p); }
};

// q, k, v and dO all bf16: the calls whose scratch includes the AMX build's (layout's tiles).
bool bf16_qkvo(const SdpaBwdProblem& p)
{
    const SdpaProblem& f = p.fwd;
    return f.qt == DType::BF16 && f.kt == DType::BF16 && f.vt == DType::BF16 && p.dout_t == DType::BF16;
}

// Whether the plan's ISA has a bf16 pairs build compiled in (the AMX build on an AMX plan, the
// AVX512_BF16 build on an AVX512_BF16 plan).
bool pairs_built(Isa isa)
{
    return (isa == Isa::Amx && bwd_amx::built()) || (isa == Isa::Avx512Bf16 && bwd_avx512bf16::built());
}

// Whether the tensors meet the pairs kernel's layouts as they are: unit last strides for q, k, v and
// dO, K and V rows an even number of elements apart (its packs move pairs as 32-bit words), and head
// dims that are multiples of 32 (whole tile steps).
bool pairs_layout(const SdpaBwdProblem& p)
{
    const SdpaProblem& f = p.fwd;
    return f.qs.strides[3] == 1 && f.ks.strides[3] == 1 && f.vs.strides[3] == 1 && p.dos.strides[3] == 1
           && f.ks.strides[2] % 2 == 0 && f.vs.strides[2] % 2 == 0 && f.qs.dims[3] % 32 == 0
           && f.vs.dims[3] % 32 == 0;
}

// Whether a bf16 pairs build takes the call in place (layout() sized its scratch: amx_total).
bool pairs_serves(const SdpaBwdProblem& p, const Run& r, Isa isa)
{
    return pairs_built(isa) && r.amx_total != 0 && bf16_qkvo(p) && pairs_layout(p);
}

// A compact [dims[0]][dims[1]][dims[2]][width] shape.
Shape compact4(const Shape& like, int64_t width)
{
    Shape s;
    s.rank = 4;
    s.dims[0] = like.dims[0];
    s.dims[1] = like.dims[1];
    s.dims[2] = like.dims[2];
    s.dims[3] = width;
    s.strides[3] = 1;
    s.strides[2] = width;
    s.strides[1] = like.dims[2] * width;
    s.strides[0] = like.dims[1] * like.dims[2] * width;
    return s;
}

// Rows of the rank-4 tensor at t (shape s, esz bytes an element) to and from a compact copy at c whose
// rows are wide elements (wide >= s.dims[3]): in, each row's elements then zeros to wide; out, the
// first s.dims[3] elements of each copy row back into the tensor. A head's rows an item.
void copy_rows(char* t, const Shape& s, int64_t esz, char* c, int64_t wide, bool in, int nthreads)
{
    const int64_t n = s.dims[3], rows = s.dims[2];
    parallel_items(s.dims[0] * s.dims[1], nthreads, [&](int64_t it, int) {
        const int64_t i0 = it / s.dims[1], i1 = it % s.dims[1];
        for(int64_t i2 = 0; i2 < rows; ++i2)
        {
            char* row = t + (i0 * s.strides[0] + i1 * s.strides[1] + i2 * s.strides[2]) * esz;
            char* cr = c + ((it * rows + i2) * wide) * esz;
            if(s.strides[3] == 1)
            {
                if(in)
                    std::memcpy(cr, row, static_cast<size_t>(n * esz));
                else
                    std::memcpy(row, cr, static_cast<size_t>(n * esz));
            }
            else
                for(int64_t e = 0; e < n; ++e)
                {
                    if(in)
                        std::memcpy(cr + e * esz, row + e * s.strides[3] * esz, static_cast<size_t>(esz));
                    else
                        std::memcpy(row + e * s.strides[3] * esz, cr + e * esz, static_cast<size_t>(esz));
                }
            if(in)
                std::memset(cr + n * esz, 0, static_cast<size_t>((wide - n) * esz));
        }
    });
}

// A bf16 call the pairs kernel cannot take in place (head dims not multiples of 32, such as 80, or
// strides its packs cannot read), run by it on copies: q, k, v, o and dO into compact tensors whose
// head dims are zero-padded to multiples of 32, the gradients computed into such tensors and their
// first d / dv dims copied out. Zero dims add nothing to the scores, dP or delta = rowsum(dO o), and
// their own gradients are dropped. The copies cost O((Sq + Skv) (d + dv)) against the kernel's
// O(Sq Skv (d + dv)); without them such calls widen to fp32 on the AVX-512 kernel (bf16 D = 80,
// S = 1024 on 2 Zen 4 cores: 0.91x torch's bf16 autograd).
SdpaBwdStatus run_padded_pairs(const SdpaBwdProblem& p, char* scratch, size_t per_thread, int nthreads, Isa isa,
                               size_t* alloc_bytes)
{
    const SdpaProblem& f = p.fwd;
    const int64_t dpa = round_to(f.qs.dims[3], 32), dva = round_to(f.vs.dims[3], 32);
    SdpaBwdProblem q = p; // the padded call
    struct Part
    {
        char* t;       // the tensor (an input's const dropped: inputs are only read)
        const Shape* s;
        int64_t esz;
        int64_t wide;
        bool in;
        size_t off = 0;
    };
    Part parts[] = {
        {static_cast<char*>(const_cast<void*>(f.q)), &f.qs, 2, dpa, true},
        {static_cast<char*>(const_cast<void*>(f.k)), &f.ks, 2, dpa, true},
        {static_cast<char*>(const_cast<void*>(f.v)), &f.vs, 2, dva, true},
        {static_cast<char*>(f.o), &f.os, static_cast<int64_t>(dtype_size(f.ot)), dva, true},
        {static_cast<char*>(const_cast<void*>(p.dout)), &p.dos, 2, dva, true},
        {static_cast<char*>(p.dq), &p.dqs, static_cast<int64_t>(dtype_size(p.dq_t)), dpa, false},
        {static_cast<char*>(p.dk), &p.dks, static_cast<int64_t>(dtype_size(p.dk_t)), dpa, false},
        {static_cast<char*>(p.dv), &p.dvs, static_cast<int64_t>(dtype_size(p.dv_t)), dva, false},
    };
    size_t bytes = 0;
    for(Part& x : parts)
    {
        const size_t n = mul_or_zero({static_cast<size_t>(x.s->dims[0]), static_cast<size_t>(x.s->dims[1]),
                                      static_cast<size_t>(x.s->dims[2]), static_cast<size_t>(x.wide),
                                      static_cast<size_t>(x.esz)});
        x.off = bytes;
        if(n == 0 || __builtin_add_overflow(bytes, align_up(n), &bytes))
        {
            *alloc_bytes = std::numeric_limits<size_t>::max();
            return SdpaBwdStatus::AllocFailed;
        }
    }
    std::unique_ptr<float, FreeDeleter> mem(static_cast<float*>(std::aligned_alloc(kAlign, bytes)));
    if(!mem)
    {
        *alloc_bytes = bytes;
        return SdpaBwdStatus::AllocFailed;
    }
    char* base = reinterpret_cast<char*>(mem.get());
    for(const Part& x : parts)
        if(x.in)
            copy_rows(x.t, *x.s, x.esz, base + x.off, x.wide, true, nthreads);
    q.fwd.q = base + parts[0].off;
    q.fwd.k = base + parts[1].off;
    q.fwd.v = base + parts[2].off;
    q.fwd.o = base + parts[3].off;
    q.dout = base + parts[4].off;
    q.dq = base + parts[5].off;
    q.dk = base + parts[6].off;
    q.dv = base + parts[7].off;
    q.fwd.qs = compact4(f.qs, dpa);
    q.fwd.ks = compact4(f.ks, dpa);
    q.fwd.vs = compact4(f.vs, dva);
    q.fwd.os = compact4(f.os, dva);
    q.dos = compact4(p.dos, dva);
    q.dqs = compact4(p.dqs, dpa);
    q.dks = compact4(p.dks, dpa);
    q.dvs = compact4(p.dvs, dva);
    const SdpaBwdStatus st = run_sdpa_bwd(q, scratch, per_thread, nthreads, isa, alloc_bytes);
    if(st != SdpaBwdStatus::Ok)
        return st;
    for(const Part& x : parts)
        if(!x.in)
            copy_rows(x.t, *x.s, x.esz, base + x.off, x.wide, false, nthreads);
    return SdpaBwdStatus::Ok;
}

} // namespace

size_t sdpa_bwd_scratch_per_thread(int64_t d, int64_t dv, bool bf16_tensors)
{
    Run r;
    r.d = d;
    r.dv = dv;
    layout(r, kMaxW, bf16_tensors); // the widest padding covers every instantiation
    int64_t total = r.total;
    if(bf16_tensors) // and run_padded_pairs' call at head dims padded to 32
    {
        r.d = round_to(std::max<int64_t>(d, 1), 32);
        r.dv = round_to(std::max<int64_t>(dv, 1), 32);
        layout(r, kMaxW, true);
        total = std::max(total, r.total);
    }
    return align_up(static_cast<size_t>(total) * sizeof(float));
}

SdpaBwdStatus run_sdpa_bwd(const SdpaBwdProblem& p, char* scratch, size_t per_thread, int nthreads, Isa isa,
                           size_t* alloc_bytes)
{
    // The plan's ISA (cpu_isa.cpp): 16 lanes for AVX-512, AVX512_BF16 and AMX (whose bf16 pairs builds
    // serve the calls pairs_serves names; the AVX-512 build the rest), else 8 (AVX2 or the baseline).
    const Isa which = HIPDNN_BWD_X86 ? isa : Isa::Baseline;
    const int w = isa_has_avx512(which) ? 16 : 8;
    const Shape& qs = p.fwd.qs;
    if(pairs_built(which) && bf16_qkvo(p) && !pairs_layout(p) && qs.dims[0] > 0 && qs.dims[1] > 0 && qs.dims[2] > 0
       && qs.dims[3] > 0 && p.fwd.ks.dims[2] > 0 && p.fwd.vs.dims[3] > 0)
        return run_padded_pairs(p, scratch, per_thread, nthreads, isa, alloc_bytes);
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
    layout(r, w, bf16_qkvo(p));
    if(static_cast<size_t>(r.total) * sizeof(float) > per_thread)
        return SdpaBwdStatus::ScratchTooSmall;
    r.q_in = in_place(p.fwd.q, p.fwd.qt, p.fwd.qs, r.d, w);
    // K rows are dQ's vector operand: copied per key block unless every row starts on a 64-byte line
    r.k_in = in_place(p.fwd.k, p.fwd.kt, p.fwd.ks, r.d, w) && rows_aligned(p.fwd.k, p.fwd.ks);
    r.do_in = in_place(p.dout, p.dout_t, p.dos, r.dv, w);
    r.nkb = (r.skv + BK - 1) / BK;
    const bool paired = pairs_serves(p, r, which); // the bf16 pairs kernel: AMX tiles or AVX512_BF16 dot products
    const bool tiles = which == Isa::Amx;
    const int64_t key_blocks = paired ? (r.skv + ABK - 1) / ABK : r.nkb; // what the chunks split
    const int64_t pairs = r.b * r.hk;
    const int64_t rows = r.b * r.hq * r.sq;
    // Chunks: about 2 items per thread, fewer when their accumulators would pass the budget.
    const size_t acc1 = mul_or_zero({static_cast<size_t>(rows), static_cast<size_t>(r.dp), sizeof(float)});
    int64_t chunks = std::min<int64_t>(std::max<int64_t>(1, key_blocks),
                                       (2 * nthreads + pairs - 1) / std::max<int64_t>(1, pairs));
    if(chunks > 1 && (acc1 == 0 || acc1 > kChunkBudget / static_cast<size_t>(chunks)))
        chunks = std::max<int64_t>(1, acc1 == 0 ? 1 : static_cast<int64_t>(kChunkBudget / acc1));
    r.chunks = std::max<int64_t>(1, chunks);
    const bool direct = r.chunks == 1 && p.dq_t == DType::F32 && p.dqs.strides[3] == 1 && r.d % w == 0;
    r.sqp = (r.sq + 31) / 32 * 32;
    // One allocation: lse, delta and lgl [rows] each, then (unless direct) the accumulators, then (on
    // the AMX build) Q^T and dO^T in bf16.
    const size_t stat_bytes = mul_or_zero({static_cast<size_t>(rows), 3, sizeof(float)});
    const size_t acc_bytes = direct ? 0 : mul_or_zero({acc1, static_cast<size_t>(r.chunks)});
    const size_t heads = mul_or_zero({static_cast<size_t>(r.b), static_cast<size_t>(r.hq)});
    const size_t pair_bytes = paired ? mul_or_zero({heads, static_cast<size_t>(r.d + r.dv), static_cast<size_t>(r.sqp),
                                                sizeof(uint16_t)})
                                 : 0;
    size_t bytes = 0;
    if(rows > 0
       && (stat_bytes == 0 || (!direct && acc_bytes == 0) || (paired && pair_bytes == 0)
           || __builtin_add_overflow(stat_bytes, acc_bytes, &bytes)
           || __builtin_add_overflow(bytes, pair_bytes, &bytes)))
    {
        *alloc_bytes = std::numeric_limits<size_t>::max();
        return SdpaBwdStatus::AllocFailed;
    }
    std::unique_ptr<float, FreeDeleter> mem;
    if(bytes > 0)
    {
        mem.reset(static_cast<float*>(std::aligned_alloc(kAlign, align_up(bytes))));
        if(!mem)
        {
            *alloc_bytes = bytes;
            return SdpaBwdStatus::AllocFailed;
        }
    }
    r.lse = mem.get();
    r.del = r.lse + rows;
    r.lgl = r.del + rows;
    if(direct)
        r.dq_ld = p.dqs.strides[2];
    else
    {
        r.dqa = r.lgl + rows;
        r.dq_ld = r.dp;
        r.dq_part = rows * r.dp;
    }
    if(paired)
    {
        // (after the stats and accumulators: a multiple of 4 bytes in, 2-byte elements)
        r.qt16 = reinterpret_cast<uint16_t*>(reinterpret_cast<char*>(mem.get()) + stat_bytes + acc_bytes);
        r.dot16 = r.qt16 + heads * static_cast<size_t>(r.d * r.sqp);
    }

    // Pre-pass (and post-pass) work: blocks of up to 256 rows of one head.
    constexpr int64_t RB = 256;
    const int64_t rblocks = (r.sq + RB - 1) / RB;
    auto row_items = [&](auto fn) {
        parallel_items(r.b * r.hq * rblocks, nthreads, [&](int64_t it, int) {
            const int64_t rb = it % rblocks;
            const int64_t h = (it / rblocks) % r.hq;
            const int64_t b = it / (rblocks * r.hq);
            fn(r, b, h, rb * RB, std::min(r.sq, (rb + 1) * RB));
        });
    };
    // The row passes: for fp32 the baseline build's (scalar code, the same numbers on every ISA); for
    // fp16 / bf16 tensors the ISA's own (their rows widened and rounded 8 or 16 at a time), and on the
    // AMX build's calls with the transposes its tiles read.
    using RowPass = void (*)(const Run&, int64_t, int64_t, int64_t, int64_t);
    RowPass stats_pass = bwd_base::run_row_stats, dq_pass = bwd_base::run_dq_rows;
#if HIPDNN_BWD_X86
    const bool sixteen = p.fwd.ot != DType::F32 || p.dout_t != DType::F32 || p.dq_t != DType::F32;
    if(paired)
    {
        stats_pass = tiles ? bwd_amx::run_row_stats : bwd_avx512bf16::run_row_stats;
        dq_pass = tiles ? bwd_amx::run_dq_rows : bwd_avx512bf16::run_dq_rows;
    }
    else if(sixteen && isa_has_avx512(which))
    {
        stats_pass = bwd_avx512::run_row_stats;
        dq_pass = bwd_avx512::run_dq_rows;
    }
    else if(sixteen && which == Isa::Avx2)
    {
        stats_pass = bwd_avx2::run_row_stats;
        dq_pass = bwd_avx2::run_dq_rows;
    }
#endif
    row_items([&](const Run& run, int64_t b, int64_t h, int64_t i0, int64_t i1) {
        stats_pass(run, b, h, i0, i1);
        if(paired && tiles)
            bwd_amx::run_pair_transposes(run, b, h, i0, i1);
        else if(paired)
            bwd_avx512bf16::run_pair_transposes(run, b, h, i0, i1);
    });

    void (*fn)(const Run&, int64_t, float*) = bwd_base::run_item;
    void (*exact)(const Run&, int64_t, float*) = bwd_base::run_exact_rows;
#if HIPDNN_BWD_X86
    if(paired)
    {
        fn = tiles ? bwd_amx::run_item : bwd_avx512bf16::run_item;
        exact = bwd_avx512::run_exact_rows;
    }
    else if(isa_has_avx512(which))
    {
        fn = bwd_avx512::run_item;
        exact = bwd_avx512::run_exact_rows;
    }
    else if(which == Isa::Avx2)
    {
        fn = bwd_avx2::run_item;
        exact = bwd_avx2::run_exact_rows;
    }
#endif
    // Rows whose lse cannot hold log2 l (marked by row_stats; rare): recomputed before the main pass.
    if(std::any_of(r.lgl, r.lgl + rows, [](float x) { return x != x; }))
        parallel_items(r.b * r.hq, nthreads, [&](int64_t it, int tid) {
            exact(r, it, reinterpret_cast<float*>(scratch + static_cast<size_t>(tid) * per_thread));
        });
    parallel_items(pairs * r.chunks, nthreads, [&](int64_t it, int tid) {
        fn(r, it, reinterpret_cast<float*>(scratch + static_cast<size_t>(tid) * per_thread));
    });
    if(!direct)
        row_items(dq_pass);
    return SdpaBwdStatus::Ok;
}

} // namespace hipdnn_cpu
