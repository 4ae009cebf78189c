// SDPA backward kernels, AVX2 + FMA build (CMake adds -mavx2 -mfma -mf16c to this file only;
// sdpa_bwd.cpp calls it only when the CPU has them, see cpu_isa.cpp).
#if defined(__AVX2__) && defined(__FMA__)
#define HIPDNN_BWD_NS bwd_avx2
#define HIPDNN_BWD_W 8
#include "sdpa_bwd.inl"
#else
#define HIPDNN_BWD_NS bwd_avx2
#include "sdpa_bwd_stubs.inl"
#endif
