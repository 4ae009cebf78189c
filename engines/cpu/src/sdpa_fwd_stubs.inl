// Included by an ISA build of the SDPA forward (sdpa_fwd_avx2.cpp, sdpa_fwd_avx512.cpp) when the
// compiler cannot target that ISA: the namespace HIPDNN_SDPA_NS forwards to the baseline build, so
// the library links. Never called: cpu_isa.cpp never picks an ISA that was not built.
#include "sdpa_fwd.hpp"
namespace hipdnn_cpu
{
namespace HIPDNN_SDPA_NS
{
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
} // namespace HIPDNN_SDPA_NS
} // namespace hipdnn_cpu
