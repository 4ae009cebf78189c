// hipdnn HIP engine, engine 202: which tensor-core kernel a launch runs (the warp-specialized one,
// or the one HIPDNN_HIP_202_KERNEL forces), and the per-process kernel setup. The kernel families live in sdpa_mma_kernel.hip (mma.sync), sdpa_wg_kernel.hip (wgmma)
// and sdpa_ws_kernel.hip (warp-specialized wgmma). Only the NVIDIA build has them; elsewhere the
// tier reports itself absent and launches fall back to the portable kernel.
#include "sdpa_async.h"
#include "sdpa_call_rules.h"
#include "sdpa_kernels.h"
#include "sdpa_tc_families.h"

#include <cstdlib>
#include <cstring>

namespace hipdnn_hip
{

#if defined(HIPDNN_HIP_ON_NVIDIA)

namespace
{

// Which Hopper kernel engine 202 launches. HIPDNN_HIP_202_KERNEL (read per launch, so a
// benchmark or test can compare them in one process) forces one: "ws" (warp-specialized,
// K and V by the copy engine; 3 consumer warpgroups at D = 64), "ws_2wg" (the same with 2 at
// D = 64), "ws_cp" (K and V copied by cp.async), "wg" (the wgmma kernel without
// specialization), "serial" (wg without the softmax / P V overlap), "mma" (the earlier mma.sync
// kernel). Unset (or "auto"): the default below.
enum class TcKernel
{
    Auto,
    Ws,
    WsTwoConsumers,
    WsCp,
    Wgmma,
    WgmmaSerial,
    MmaSync
};

TcKernel tc_kernel_choice()
{
    const char* e = std::getenv("HIPDNN_HIP_202_KERNEL");
    if(e == nullptr)
        return TcKernel::Auto;
    if(std::strcmp(e, "ws") == 0)
        return TcKernel::Ws;
    if(std::strcmp(e, "ws_2wg") == 0)
        return TcKernel::WsTwoConsumers;
    if(std::strcmp(e, "ws_cp") == 0)
        return TcKernel::WsCp;
    if(std::strcmp(e, "wg") == 0)
        return TcKernel::Wgmma;
    if(std::strcmp(e, "mma") == 0)
        return TcKernel::MmaSync;
    if(std::strcmp(e, "serial") == 0)
        return TcKernel::WgmmaSerial;
    return TcKernel::Auto;
}

bool aligned16(const void* p)
{
    return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

// The driver's tensor-map encoder, looked up once through the runtime (the engine links the
// static runtime only, not libcuda). A CUDA-only facility with no HIP counterpart, so it is
// called here directly rather than through hip_portability.h. Null when the driver lacks it.
using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiledFn tensor_map_encoder()
{
    static const EncodeTiledFn fn = [] {
        void* p = nullptr;
        cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
        if(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found)
               != cudaSuccess
           || found != cudaDriverEntryPointSuccess)
        {
            (void)cudaGetLastError();
            return static_cast<EncodeTiledFn>(nullptr);
        }
        return reinterpret_cast<EncodeTiledFn>(p);
    }();
    return fn;
}

} // namespace

bool tma_tile_map(CUtensorMap& map, const void* base, int64_t d, int64_t rows, int64_t heads, int64_t batch,
                  int64_t row_stride, int64_t head_stride, int64_t batch_stride, uint32_t box_rows)
{
    const EncodeTiledFn encode = tensor_map_encoder();
    // d is the tensor's own head dim (a multiple of 8: 16-byte rows); the boxes are 64 columns wide,
    // so the columns of a padded kernel head dim past d come back as zeros (out-of-bounds fill).
    if(encode == nullptr || !aligned16(base) || d <= 0 || d % 8 != 0 || rows <= 0 || heads <= 0 || batch <= 0)
        return false;
    const int64_t extent[3] = {rows, heads, batch};
    const int64_t stride[3] = {row_stride, head_stride, batch_stride};
    cuuint64_t dims[4] = {static_cast<cuuint64_t>(d), 0, 0, 0};
    cuuint64_t strides[3] = {0, 0, 0}; // bytes, dimensions 1..3
    for(int i = 0; i < 3; ++i)
    {
        // A dimension of extent 1 is never stepped over: any legal stride describes it.
        const int64_t bytes = extent[i] == 1 ? 16 : stride[i] * 2;
        if(bytes <= 0 || bytes % 16 != 0 || bytes >= (int64_t(1) << 40))
            return false;
        dims[i + 1] = static_cast<cuuint64_t>(extent[i]);
        strides[i] = static_cast<cuuint64_t>(bytes);
    }
    const cuuint32_t box[4] = {64, box_rows, 1, 1};
    const cuuint32_t unit[4] = {1, 1, 1, 1};
    return encode(&map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 4, const_cast<void*>(base), dims, strides, box, unit,
                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
           == CUDA_SUCCESS;
}

bool tensor_core_tier_built()
{
    return true;
}

hipError_t prepare_kernels(Tier tier)
{
    if(tier != Tier::TensorCore)
        return hipSuccess;
    // One attribute per kernel instance, in a fixed order: the mma.sync kernel, the wgmma kernel
    // with and without overlap, the warp-specialized one.
    const ElemType types[] = {ElemType::Bf16, ElemType::Half};
    const int dims[] = {64, 128};
    hipError_t e;
    for(ElemType t : types)
        for(int d : dims)
            if((e = mma_set_attrs(t, d)) != hipSuccess)
                return e;
    for(bool flag : {true, false})
        for(ElemType t : types)
            for(int d : dims)
                if((e = wg_set_attrs(t, d, flag)) != hipSuccess)
                    return e;
    for(ElemType t : types)
        for(int d : dims)
            if((e = ws_set_attrs(t, d)) != hipSuccess)
                return e;
    return hipSuccess;
}

bool tensor_core_accepts(const SdpaArgs& a, ElemType)
{
    // TMA boxes and 16-byte cp.async of Q/K/V rows, 16-byte and 4-byte O stores (sdpa_call_rules.h);
    // whole 16-byte chunks per row: head dims multiples of 8. The host checks the head dims it
    // serves (head_dim_rule) for every call before any launch.
    return a.d % 8 == 0 && a.dv % 8 == 0 && rows_vec16(a.q_sb, a.q_sh, a.q_ss, a.q_sd, a.q)
           && rows_vec16(a.k_sb, a.k_sh, a.k_ss, a.k_sd, a.k)
           && rows_vec16(a.v_sb, a.v_sh, a.v_ss, a.v_sd, a.v) && rows_vec16(a.o_sb, a.o_sh, a.o_ss, a.o_sd, a.o);
}

hipError_t launch_sdpa_tensor_core(const SdpaArgs& a, ElemType t, const DeviceShape& dev, hipStream_t stream)
{
    TcKernel choice = tc_kernel_choice();
    if(sdpa_needs_ext(a))
    {
        // A left bound (window) or a bias: served by the warp-specialized kernel's Ext build only
        // (the wgmma and mma.sync kernels are never chosen for them). It keeps the maximum on raw
        // scores, adding bias / scale, which needs a positive scale; other scales, and calls the
        // copy engine cannot describe (ws_launch), run the portable kernel.
        if(!(a.scale_log2 > 0.0f))
            return launch_sdpa_portable(a, t, stream);
        return ws_launch(a, t, 0, choice != TcKernel::WsCp, dev, stream);
    }
    // A head dim other than 64 / 128, or d_qk != d_v: the kernel runs at a padded head dim
    // (kernel_head_dim), whose zero-filled columns only the warp-specialized kernel and the
    // portable one handle (the wgmma and mma.sync kernels, kept for comparisons, are never chosen).
    if(a.d != a.dv || (a.d != 64 && a.d != 128))
    {
        if(!(a.scale_log2 > 0.0f))
            return launch_sdpa_portable(a, t, stream);
        const int consumers = choice == TcKernel::WsTwoConsumers ? 2 : 0;
        return ws_launch(a, t, consumers, choice != TcKernel::WsCp, dev, stream);
    }
    // The wgmma kernels fold the scale into exp2(s * sl2 - m * sl2) with the maximum taken on
    // raw scores, which holds for positive scales only; the mma.sync kernel scales first.
    if(!(a.scale_log2 > 0.0f))
        choice = TcKernel::MmaSync;
    switch(choice)
    {
    // The default, from the H200 measurements (bf16, H = 16, B * S = 32768, S = 512 / 2048 / 8192,
    // every variant in one run; bench/results/gpu_sdpa_tma.json, RFC 0006): the warp-specialized
    // kernel with K and V brought by the copy engine and P converted late is the fastest at every
    // measured shape, by 14-40% over the cp.async build and 16-50% over the plain wgmma kernel.
    // (With cp.async the late conversion had won only at short sequences; with the producer no
    // longer the bottleneck, the early conversion's serialized wgmma costs 0-27% everywhere.) What
    // it decides per launch from the call's effective shapes is its schedule (ws_launch).
    case TcKernel::Auto:
    case TcKernel::Ws:
        return ws_launch(a, t, 0, true, dev, stream);
    case TcKernel::WsTwoConsumers:
        return ws_launch(a, t, 2, true, dev, stream);
    case TcKernel::WsCp:
        return ws_launch(a, t, 0, false, dev, stream);
    case TcKernel::Wgmma:
        return wg_launch(a, t, true, stream);
    case TcKernel::WgmmaSerial:
        return wg_launch(a, t, false, stream);
    default:
        break;
    }
    return mma_launch(a, t, stream);
}

#else // not NVIDIA: the tensor-core tier is not built

bool tensor_core_tier_built()
{
    return false;
}

hipError_t prepare_kernels(Tier)
{
    return hipSuccess;
}

bool tensor_core_accepts(const SdpaArgs&, ElemType)
{
    return false;
}

hipError_t launch_sdpa_tensor_core(const SdpaArgs& a, ElemType t, const DeviceShape&, hipStream_t stream)
{
    return launch_sdpa_portable(a, t, stream);
}

#endif

} // namespace hipdnn_hip
