// hipdnn HIP engine, engine 202: the tensor-core kernel families as sdpa_tc_dispatch.hip sees them.
// Each family file instantiates its kernels (element type x head dim 64 / 128 x variant) and
// exports these typed entry points. NVIDIA build only; plain C++ declarations.
#ifndef HIPDNN_HIP_ENGINE_SDPA_TC_FAMILIES_H
#define HIPDNN_HIP_ENGINE_SDPA_TC_FAMILIES_H

#include "sdpa_kernels.h"

#if defined(HIPDNN_HIP_ON_NVIDIA)

namespace hipdnn_hip
{

// sdpa_mma_kernel.hip: mma.sync m16n8k16 (sdpa_fwd_tc). d is 64 or 128 (a.d when launching).
hipError_t mma_set_attrs(ElemType t, int d);
hipError_t mma_launch(const SdpaArgs& a, ElemType t, hipStream_t stream);

// sdpa_wg_kernel.hip: wgmma (sdpa_fwd_wg); overlap: the softmax of tile n runs under P V of n - 1.
hipError_t wg_set_attrs(ElemType t, int d, bool overlap);
hipError_t wg_launch(const SdpaArgs& a, ElemType t, bool overlap, hipStream_t stream);

// sdpa_ws_kernel.hip: warp-specialized wgmma (sdpa_fwd_ws). consumers: computing warpgroups per
// block at D = 64, 2 or 3 (0: the default, 3); D = 128 always has 2. copy_engine: K and V brought
// by the bulk tensor copy engine (falling back to cp.async when the driver cannot describe the
// tensors), else by cp.async.
hipError_t ws_set_attrs(ElemType t, int d);
// dev: what the persistent grid is sized from (one block per multiprocessor).
hipError_t ws_launch(const SdpaArgs& a, ElemType t, int consumers, bool copy_engine, const DeviceShape& dev,
                     hipStream_t stream);

} // namespace hipdnn_hip

#endif // HIPDNN_HIP_ON_NVIDIA

#endif // HIPDNN_HIP_ENGINE_SDPA_TC_FAMILIES_H
