// SDPA forward kernels, AVX-512 build: 16-lane vectors (CMake adds -mavx512f
// -mavx512dq -mavx512vl -mavx512bw -mavx2 -mfma -mf16c to this file only;
// cpu_kernels.cpp calls it only when the CPU has them, see cpu_isa.cpp).
#if defined(__AVX512F__) && defined(__AVX512DQ__) && defined(__AVX512VL__) && defined(__AVX512BW__) && defined(__FMA__)
#define HIPDNN_SDPA_NS sdpa_avx512
#define HIPDNN_SDPA_W 16
#include "sdpa_fwd.inl"
#else
#include "sdpa_fwd.hpp"
namespace hipdnn_cpu
{
namespace sdpa_avx512
{
// Never called: isa_best() is below Avx512 where this file is not built for it.
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
} // namespace sdpa_avx512
} // namespace hipdnn_cpu
#endif
