// hipdnn HIP engine, engine 202: which tensor-core kernel a launch runs, picked from the call's
// effective shape (tc_auto_choice) or forced by HIPDNN_HIP_202_KERNEL, and the per-process kernel
// setup. The kernel families live in sdpa_mma_kernel.hip (mma.sync), sdpa_wg_kernel.hip (wgmma)
// and sdpa_ws_kernel.hip (warp-specialized wgmma). Only the NVIDIA build has them; elsewhere the
// tier reports itself absent and launches fall back to the portable kernel.
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
// P converted after the previous P V), "ws_early" (the same converting P while that P V runs),
// "wg" (the wgmma kernel without specialization), "serial" (wg without the softmax / P V
// overlap), "mma" (the earlier mma.sync kernel). Unset (or "auto"): chosen per launch from the
// call's effective shapes (tc_auto_choice), so overridden shapes get the right kernel too.
enum class TcKernel
{
    Auto,
    Ws,
    WsEarlyPack,
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
    if(std::strcmp(e, "ws_early") == 0)
        return TcKernel::WsEarlyPack;
    if(std::strcmp(e, "wg") == 0)
        return TcKernel::Wgmma;
    if(std::strcmp(e, "mma") == 0)
        return TcKernel::MmaSync;
    if(std::strcmp(e, "serial") == 0)
        return TcKernel::WgmmaSerial;
    return TcKernel::Auto;
}

// Per-shape choice, from the H200 measurements (bf16, H = 16, B * S = 32768;
// bench/results/gpu_sdpa_ws1.json and gpu_sdpa_ws2_latepack.json, RFC 0006). The choice is made
// per launch from the call's effective shapes, so a plan executed through shape overrides gets
// the choice of its actual shape, with no host synchronisation.
//  * keys <= 1024: warp-specialized, P converted late (no wgmma serialization): 4-10% faster
//    than converting early at S = 512, about even at 1024;
//  * D = 64 without a causal mask: the plain wgmma kernel (3 warpgroups of 64 rows, every warp
//    computing), 1-2% ahead of the warp-specialized one from S = 2048 in both runs;
//  * otherwise warp-specialized, P converted while P V runs: 2-5% faster than late conversion
//    from S = 4096.
// Before the warp-specialized kernel existed, D = 64 with keys <= 1024 went to the mma.sync
// kernel; it is now slower than the warp-specialized one at every measured shape.
TcKernel tc_auto_choice(const SdpaArgs& a)
{
    if(a.skv <= 1024)
        return TcKernel::Ws;
    if(a.d == 64 && !a.mask_tl && !a.mask_br)
        return TcKernel::Wgmma;
    return TcKernel::WsEarlyPack;
}

bool aligned16(const void* p)
{
    return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

} // namespace

bool tensor_core_tier_built()
{
    return true;
}

hipError_t prepare_kernels(Tier tier)
{
    if(tier != Tier::TensorCore)
        return hipSuccess;
    // One attribute per kernel instance, in a fixed order: the mma.sync kernel, the wgmma kernel
    // with and without overlap, the warp-specialized one packing P late and early.
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
    for(bool flag : {true, false})
        for(ElemType t : types)
            for(int d : dims)
                if((e = ws_set_attrs(t, d, flag)) != hipSuccess)
                    return e;
    return hipSuccess;
}

bool tensor_core_accepts(const SdpaArgs& a, ElemType)
{
    // 16-byte cp.async of K/V rows and 4-byte Q/O accesses: unit head-dim
    // stride, every other stride a multiple of 8 elements, 16-byte aligned bases.
    if(a.q_sd != 1 || a.k_sd != 1 || a.v_sd != 1 || a.o_sd != 1)
        return false;
    const int64_t s[] = {a.q_sb, a.q_sh, a.q_ss, a.k_sb, a.k_sh, a.k_ss, a.v_sb, a.v_sh, a.v_ss, a.o_sb, a.o_sh, a.o_ss};
    for(int64_t x : s)
        if(x % 8 != 0)
            return false;
    return aligned16(a.q) && aligned16(a.k) && aligned16(a.v) && aligned16(a.o);
}

hipError_t launch_sdpa_tensor_core(const SdpaArgs& a, ElemType t, hipStream_t stream)
{
    TcKernel choice = tc_kernel_choice();
    if(choice == TcKernel::Auto)
        choice = tc_auto_choice(a);
    // The wgmma kernels fold the scale into exp2(s * sl2 - m * sl2) with the maximum taken on
    // raw scores, which holds for positive scales only; the mma.sync kernel scales first.
    if(!(a.scale_log2 > 0.0f))
        choice = TcKernel::MmaSync;
    switch(choice)
    {
    case TcKernel::Ws:
        return ws_launch(a, t, true, stream);
    case TcKernel::WsEarlyPack:
        return ws_launch(a, t, false, stream);
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

hipError_t launch_sdpa_tensor_core(const SdpaArgs& a, ElemType t, hipStream_t stream)
{
    return launch_sdpa_portable(a, t, stream);
}

#endif

} // namespace hipdnn_hip
