// SDPA forward kernels, AMX build: the AVX-512 build plus the AMX-BF16 tile kernel for bf16 q, k
// and v (amx_item in sdpa_fwd.inl). CMake adds the AVX-512 flags and -mavx512bf16 -mamx-tile
// -mamx-bf16 to this file only, where the compiler takes them (HIPDNN_CPU_HAVE_AMX); cpu_isa.cpp
// picks it only when the CPU has the instructions and the OS lets the process use the tiles.
#if defined(HIPDNN_CPU_HAVE_AMX) && defined(__AVX512F__) && defined(__AVX512DQ__) && defined(__AVX512VL__) \
    && defined(__AVX512BW__) && defined(__AVX512BF16__) && defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__FMA__)
#define HIPDNN_SDPA_NS sdpa_amx
#define HIPDNN_SDPA_W 16
#define HIPDNN_SDPA_AMX 1
#include "sdpa_fwd.inl"
#else
#define HIPDNN_SDPA_NS sdpa_amx
#include "sdpa_fwd_stubs.inl"
#endif
