// SDPA forward kernels, AVX2 + FMA build (CMake adds -mavx2 -mfma -mf16c to
// this file only; cpu_kernels.cpp calls it only when the CPU has them).
#if defined(__AVX2__) && defined(__FMA__)
#define HIPDNN_SDPA_NS sdpa_avx2
#define HIPDNN_SDPA_W 8
#include "sdpa_fwd.inl"
#else
#define HIPDNN_SDPA_NS sdpa_avx2
#include "sdpa_fwd_stubs.inl"
#endif
