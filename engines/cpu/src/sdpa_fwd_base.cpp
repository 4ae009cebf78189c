// SDPA forward kernels, baseline ISA build: 4-lane vectors, one SSE register each on x86-64-v2
// (wider GCC vectors would be split over pairs of registers and spill the micro kernel's
// accumulators).
#define HIPDNN_SDPA_NS sdpa_base
#define HIPDNN_SDPA_W 4
#include "sdpa_fwd.inl"
