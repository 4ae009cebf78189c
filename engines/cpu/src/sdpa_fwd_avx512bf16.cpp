// SDPA forward kernels, AVX512_BF16 build: the AVX-512 build plus VDPBF16PS for bf16 q, k and v (the
// panel kernel's bf16 dot-product products, "bf16 dot-product panels" in sdpa_fwd.inl, and the rows
// kernel's bf16 paths), for CPUs that have AVX512_BF16 but no AMX tiles (AMD Zen 4 and 5, Intel Cooper
// Lake). CMake adds the AVX-512 flags and -mavx512bf16 to this file only, where the compiler takes them
// (HIPDNN_CPU_HAVE_AVX512BF16); cpu_isa.cpp picks it only when the CPU has the instructions.
#if defined(HIPDNN_CPU_HAVE_AVX512BF16) && defined(__AVX512F__) && defined(__AVX512DQ__) && defined(__AVX512VL__) \
    && defined(__AVX512BW__) && defined(__AVX512BF16__) && defined(__FMA__)
#define HIPDNN_SDPA_NS sdpa_avx512bf16
#define HIPDNN_SDPA_W 16
#define HIPDNN_SDPA_BF16DOT 1
#include "sdpa_fwd.inl"
#else
#define HIPDNN_SDPA_NS sdpa_avx512bf16
#include "sdpa_fwd_stubs.inl"
#endif
