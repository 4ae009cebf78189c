// hipdnn HIP engine: what the SDPA backward's launcher (sdpa_bwd.hip) hands its kernels, and the
// Hopper kernel's entry points (sdpa_bwd_wg_kernel.hip). Plain C++.
#ifndef HIPDNN_HIP_ENGINE_SDPA_BWD_INTERNAL_H
#define HIPDNN_HIP_ENGINE_SDPA_BWD_INTERNAL_H

#include "sdpa_kernels.h"

namespace hipdnn_hip
{

// One slice of a backward call: the (batch, kv head) pairs p0 .. p0 + gridDim.y - 1, pair p being
// batch p / hk, kv head p % hk. The slice's workspace holds, per pair, G = hq / hk heads of sq rows:
// lse2 (the row's log-sum-exp in log2 units, +inf for a row that must contribute nothing),
// delta = rowsum(dO * O), the max and log2 of the softmax sum of a row whose stats cannot hold them
// (mrow +inf elsewhere; sdpa_bwd_exact_rows), and (tensor-core tier) fp32 dQ partial sums of w floats
// per row, w the kernels' (padded) head dim, kernel_head_dim(d, dv); per pair, whether any of its rows
// was recomputed.
struct BwdSlice
{
    SdpaBwdArgs a;
    int w = 0; // the head dim the kernels are compiled for (a.f.d and a.f.dv are at most w)
    int64_t p0 = 0;
    float* lse2 = nullptr;     // [pairs][G][sq]
    float* delta = nullptr;    // [pairs][G][sq]
    float* lgl = nullptr;      // [pairs][G][sq]
    float* mrow = nullptr;     // [pairs][G][sq]
    int* exact = nullptr;      // [pairs]
    float* dq_accum = nullptr; // [pairs][G][sq][w]
};

// The Hopper kernel (dK, dV and dQ partials for one slice); tensor-core tier only.
bool bwd_wg_built();
hipError_t bwd_wg_set_attrs(ElemType t); // every head dim's instance
// hipErrorNotSupported: the driver cannot describe the tensors to the copy engine (nothing launched).
hipError_t bwd_wg_launch(const BwdSlice& s, int pairs, ElemType t, hipStream_t stream);

} // namespace hipdnn_hip

#endif // HIPDNN_HIP_ENGINE_SDPA_BWD_INTERNAL_H
