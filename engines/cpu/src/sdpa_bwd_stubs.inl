// Included by an ISA build of the SDPA backward (sdpa_bwd_avx2.cpp, sdpa_bwd_avx512.cpp) when the
// compiler cannot target that ISA: the namespace HIPDNN_BWD_NS forwards to the baseline build, so
// the library links. Never called: cpu_isa.cpp never picks an ISA that was not built.
#include "sdpa_bwd.hpp"
namespace hipdnn_cpu
{
namespace HIPDNN_BWD_NS
{
void run_item(const sdpa_bwd::Run& r, int64_t w, float* ws)
{
    bwd_base::run_item(r, w, ws);
}
void run_exact_rows(const sdpa_bwd::Run& r, int64_t bh, float* ws)
{
    bwd_base::run_exact_rows(r, bh, ws);
}
void run_row_stats(const sdpa_bwd::Run& r, int64_t b, int64_t h, int64_t i0, int64_t i1)
{
    bwd_base::run_row_stats(r, b, h, i0, i1);
}
void run_dq_rows(const sdpa_bwd::Run& r, int64_t b, int64_t h, int64_t i0, int64_t i1)
{
    bwd_base::run_dq_rows(r, b, h, i0, i1);
}
} // namespace HIPDNN_BWD_NS
} // namespace hipdnn_cpu
