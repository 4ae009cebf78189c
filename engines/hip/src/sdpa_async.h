// hipdnn HIP engine, engine 202: Hopper's asynchronous machinery as the wgmma kernels use it:
// mbarriers, named barriers and the bulk tensor copy engine (TMA), plus the host side that
// describes a [B, H, S, D] tensor to the copy engine. NVIDIA sm_90 only (inline PTX and the
// driver's tensor-map encoder); empty elsewhere.
#ifndef HIPDNN_HIP_ENGINE_SDPA_ASYNC_H
#define HIPDNN_HIP_ENGINE_SDPA_ASYNC_H

#include "hip_portability.h"

#if defined(HIPDNN_HIP_ON_NVIDIA)

#include <cuda.h> // CUtensorMap and the encoder's signature (the types only; no libcuda link)

#include <cstdint>

namespace hipdnn_hip
{

// ---------------------------------------------------------------- host: tensor maps ----
// Describes one [batch, heads, rows, d] 16-bit tensor with a unit head-dim stride (strides in
// elements) to the copy engine: boxes of 64 columns x box_rows rows of one (batch, head), landing
// in shared memory in the 128-byte swizzled layout the wgmma descriptors read (sdpa_wgmma.h).
// Rows past `rows` and columns past `d` (the tensor's head dim, a multiple of 8; a kernel compiled
// for a larger, padded head dim loads boxes past it) read as zeros. Returns false, leaving map unusable, when the driver has no
// encoder or rejects the layout (strides not multiples of 16 bytes, base not 16-byte aligned);
// the caller then copies with cp.async instead.
bool tma_tile_map(CUtensorMap& map, const void* base, int64_t d, int64_t rows, int64_t heads, int64_t batch,
                  int64_t row_stride, int64_t head_stride, int64_t batch_stride, uint32_t box_rows);

#if defined(__CUDACC__)
// ---------------------------------------------------------------- device ----
namespace async
{

__device__ __forceinline__ void mbar_init(uint32_t mb, int count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(mb), "r"(count) : "memory");
}

// Makes initialised mbarriers visible to the async proxy (the copy engine completes on them).
__device__ __forceinline__ void mbar_init_fence()
{
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

__device__ __forceinline__ void mbar_arrive(uint32_t mb)
{
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(mb) : "memory");
}

// One arrival that also expects `bytes` from the copy engine before the phase can complete.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t mb, uint32_t bytes)
{
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(mb), "r"(bytes)
                 : "memory");
}

// An arrival triggered when this thread's cp.async copies issued so far have landed.
__device__ __forceinline__ void mbar_arrive_on_copies(uint32_t mb)
{
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(mb) : "memory");
}

__device__ __forceinline__ bool mbar_try_wait(uint32_t mb, uint32_t parity)
{
    uint32_t ok;
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(ok)
                 : "r"(mb), "r"(parity)
                 : "memory");
    return ok != 0;
}

__device__ __forceinline__ void mbar_wait(uint32_t mb, uint32_t parity)
{
    while(!mbar_try_wait(mb, parity))
    {
    }
}

// Named barriers (ids 1..15; 0 is __syncthreads), over `threads` threads of the block.
__device__ __forceinline__ void named_sync(int id, int threads)
{
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void named_arrive(int id, int threads)
{
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// One box of a 4-d tensor map (coordinates innermost first) into shared memory at dst, completing
// its byte count on mbarrier mb.
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap* map, uint32_t mb, int c0, int c1, int c2,
                                            int c3)
{
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(dst),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(mb), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
                 : "memory");
}

// `bytes` contiguous bytes from global memory at src into shared memory at dst (both 16-byte
// aligned, bytes a multiple of 16), completing their count on mbarrier mb.
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes, uint32_t mb)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
                 "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(mb)
                 : "memory");
}

// Adds `bytes` of fp32 values from shared memory at src to global memory at dst, element by element
// (the copy engine's reduction; bytes and both addresses multiples of 16), in this thread's open
// bulk group.
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, uint32_t src, uint32_t bytes)
{
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst), "r"(src),
                 "r"(bytes)
                 : "memory");
}

// Closes this thread's open bulk group.
__device__ __forceinline__ void bulk_commit()
{
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

// Waits until at most N of this thread's bulk groups still read their shared-memory sources.
template <int N>
__device__ __forceinline__ void bulk_wait_read()
{
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}

// Waits until at most N of this thread's bulk groups are still in flight (writes done included).
template <int N>
__device__ __forceinline__ void bulk_wait()
{
    asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap* map)
{
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

} // namespace async
#endif // __CUDACC__

} // namespace hipdnn_hip

#endif // HIPDNN_HIP_ON_NVIDIA

#endif // HIPDNN_HIP_ENGINE_SDPA_ASYNC_H
