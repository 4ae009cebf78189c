// Shared by the SDPA forward's AVX-512 builds (sdpa_fwd.inl) and the backward's (sdpa_bwd.cpp): a
// base-2 exponential for AVX-512 and the flush-to-zero scope it relies on. Internal linkage: each
// includer compiles its own copy under its own ISA flags, so no two builds share a symbol.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

namespace hipdnn_cpu
{
namespace
{

// Flush-to-zero for the scope (the thread's MXCSR is restored after): an exponential that underflows
// (a masked key, one far below its row's max) then comes out 0 at no cost, where a subnormal result
// takes a microcode assist. Only results below 2^-126 change, to 0 (inputs are read as they are: no
// denormals-are-zero).
struct FlushToZero
{
    unsigned saved = _mm_getcsr();
    FlushToZero()
    {
        _mm_setcsr(saved | _MM_FLUSH_ZERO_ON);
    }
    ~FlushToZero()
    {
        _mm_setcsr(saved);
    }
    FlushToZero(const FlushToZero&) = delete;
    FlushToZero& operator=(const FlushToZero&) = delete;
};

// 2^x in 8 vector operations: vreduceps gives f = x - floor(x) in [0, 1) (0 for an infinity, NaN for
// NaN), a degree-6 polynomial fitted for relative error gives 2^f (8.5e-9; 8.9e-8 after fp32 Horner,
// an ulp or so), and vscalefps multiplies by 2^floor(x), flooring x itself (2^-inf = 0, 2^+inf =
// inf). Results below 2^-126 are 0 under FlushToZero. (The all-lanes mask forms: the plain ones
// start from _mm512_undefined_ps, which GCC 12 flags as maybe-uninitialized.)
__attribute__((target("avx512f,avx512dq"))) inline __m512 exp2_avx512(__m512 x)
{
    const __mmask16 all = 0xffff;
    const __m512 f = _mm512_maskz_reduce_ps(all, x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    __m512 p = _mm512_set1_ps(0.00021770877356175333f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.0012402958236634731f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.009685058146715164f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.05547879636287689f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.24023133516311646f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.6931467652320862f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_mask_scalef_ps(p, all, p, x);
}

} // namespace
} // namespace hipdnn_cpu
#endif
