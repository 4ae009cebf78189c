// SDPA forward kernel, AVX2 + FMA build (CMake adds -mavx2 -mfma -mf16c to
// this file only; cpu_kernels.cpp calls it only when the CPU has them).
#if defined(__AVX2__) && defined(__FMA__)
#define HIPDNN_SDPA_NS sdpa_avx2
#include "sdpa_fwd.inl"
#else
#include "sdpa_fwd.hpp"
namespace hipdnn_cpu
{
namespace sdpa_avx2
{
// Never called: the run-time dispatch takes sdpa_base off x86-64.
void run_item(const SdpaRun& run, int64_t w, float* ws)
{
    sdpa_base::run_item(run, w, ws);
}
} // namespace sdpa_avx2
} // namespace hipdnn_cpu
#endif
