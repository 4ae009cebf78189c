// SDPA backward kernels, AVX512_BF16 build: the AVX-512 build plus the bf16 pairs kernel with its five
// products on VDPBF16PS (pair_item in sdpa_bwd.inl, the AMX build's kernel with dot products in place
// of the tiles), for CPUs with AVX512_BF16 and no AMX (Zen 4 / 5). CMake adds the AVX-512 flags and
// -mavx512bf16 to this file only, where the compiler takes them (HIPDNN_CPU_HAVE_AVX512BF16);
// sdpa_bwd.cpp calls it only on an AVX512_BF16 plan and only for the calls it serves (pairs_serves).
#if defined(HIPDNN_CPU_HAVE_AVX512BF16) && defined(__AVX512F__) && defined(__AVX512DQ__) && defined(__AVX512VL__) \
    && defined(__AVX512BW__) && defined(__AVX512BF16__) && defined(__FMA__)
#define HIPDNN_BWD_NS bwd_avx512bf16
#define HIPDNN_BWD_W 16
#define HIPDNN_BWD_BF16DOT 1
#include "sdpa_bwd.inl"
#else
#define HIPDNN_BWD_NS bwd_avx512bf16
#include "sdpa_bwd_stubs.inl"
namespace hipdnn_cpu
{
namespace bwd_avx512bf16
{
bool built()
{
    return false;
}
void run_pair_transposes(const sdpa_bwd::Run&, int64_t, int64_t, int64_t, int64_t) {}
} // namespace bwd_avx512bf16
} // namespace hipdnn_cpu
#endif
