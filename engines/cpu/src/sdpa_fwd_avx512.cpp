// SDPA forward kernels, AVX-512 build: 16-lane vectors (CMake adds -mavx512f
// -mavx512dq -mavx512vl -mavx512bw -mavx2 -mfma -mf16c to this file only;
// cpu_kernels.cpp calls it only when the CPU has them, see cpu_isa.cpp).
#if defined(__AVX512F__) && defined(__AVX512DQ__) && defined(__AVX512VL__) && defined(__AVX512BW__) && defined(__FMA__)
#define HIPDNN_SDPA_NS sdpa_avx512
#define HIPDNN_SDPA_W 16
#include "sdpa_fwd.inl"
#else
#define HIPDNN_SDPA_NS sdpa_avx512
#include "sdpa_fwd_stubs.inl"
#endif
