// SDPA forward kernels, AVX2 + FMA build (CMake adds -mavx2 -mfma -mf16c to
// this file only; cpu_kernels.cpp calls it only when the CPU has them).
#if defined(__AVX2__) && defined(__FMA__)
#define HIPDNN_SDPA_NS sdpa_avx2
#define HIPDNN_SDPA_W 8
#include "sdpa_fwd.inl"
#else
#include "sdpa_fwd.hpp"
namespace hipdnn_cpu
{
namespace sdpa_avx2
{
// Never called: isa_best() is Baseline off x86-64.
void run_item(const SdpaRun& run, int64_t w, float* ws)
{
    sdpa_base::run_item(run, w, ws);
}
void run_rows_item(const SdpaRun& run, int64_t w, float* ws, float* part)
{
    sdpa_base::run_rows_item(run, w, ws, part);
}
void rows_merge(const SdpaRun& run, int64_t block, char* slices, size_t per_thread)
{
    sdpa_base::rows_merge(run, block, slices, per_thread);
}
} // namespace sdpa_avx2
} // namespace hipdnn_cpu
#endif
