// SDPA backward kernels, AVX-512 build: 16-lane vectors (CMake adds -mavx512f -mavx512dq
// -mavx512vl -mavx512bw -mavx2 -mfma -mf16c to this file only; sdpa_bwd.cpp calls it only when
// the CPU has them, see cpu_isa.cpp).
#if defined(__AVX512F__) && defined(__AVX512DQ__) && defined(__AVX512VL__) && defined(__AVX512BW__) && defined(__FMA__)
#define HIPDNN_BWD_NS bwd_avx512
#define HIPDNN_BWD_W 16
#include "sdpa_bwd.inl"
#else
#define HIPDNN_BWD_NS bwd_avx512
#include "sdpa_bwd_stubs.inl"
#endif
