// SDPA forward kernel, baseline ISA build.
#define HIPDNN_SDPA_NS sdpa_base
#include "sdpa_fwd.inl"
