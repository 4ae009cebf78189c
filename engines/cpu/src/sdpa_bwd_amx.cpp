// SDPA backward kernels, AMX build: the AVX-512 build plus the tile kernel for bf16 q, k, v and dO
// (pair_item in sdpa_bwd.inl: the five products on AMX-BF16 tiles). CMake adds the AVX-512 flags and
// -mavx512bf16 -mamx-tile -mamx-bf16 to this file only, where the compiler takes them
// (HIPDNN_CPU_HAVE_AMX); sdpa_bwd.cpp calls it only on an AMX plan (cpu_isa.cpp checks the CPU and
// the OS's permission for the tiles) and only for the calls it serves (amx_serves there).
#if defined(HIPDNN_CPU_HAVE_AMX) && defined(__AVX512F__) && defined(__AVX512DQ__) && defined(__AVX512VL__) \
    && defined(__AVX512BW__) && defined(__AVX512BF16__) && defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__FMA__)
#define HIPDNN_BWD_NS bwd_amx
#define HIPDNN_BWD_W 16
#define HIPDNN_BWD_AMX 1
#include "sdpa_bwd.inl"
#else
#define HIPDNN_BWD_NS bwd_amx
#include "sdpa_bwd_stubs.inl"
namespace hipdnn_cpu
{
namespace bwd_amx
{
bool built()
{
    return false;
}
void run_pair_transposes(const sdpa_bwd::Run&, int64_t, int64_t, int64_t, int64_t) {}
} // namespace bwd_amx
} // namespace hipdnn_cpu
#endif
