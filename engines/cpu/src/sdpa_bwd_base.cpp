// SDPA backward kernels, baseline ISA build: 8-lane GCC vectors, which x86-64-v2 code holds in
// pairs of SSE registers.
#define HIPDNN_BWD_NS bwd_base
#define HIPDNN_BWD_W 8
#include "sdpa_bwd.inl"
