// hipdnn HIP engine: the few HIP runtime names this engine uses, mapped to CUDA
// when the HIP sources are compiled with nvcc for NVIDIA GPUs.
//
// On AMD GPUs the sources build with hipcc against the real HIP headers and this
// file only includes them. On NVIDIA (`__HIP_PLATFORM_NVIDIA__`, set by the
// engine's CMake for nvcc builds) the HIP headers are not used at all: Debian's
// HIP headers do not compile against CUDA 13, so the names below are aliased to
// the CUDA runtime directly. Only what the engine uses is mapped; add names here
// rather than calling cuda* functions from engine code.
#ifndef HIPDNN_HIP_ENGINE_HIP_PORTABILITY_H
#define HIPDNN_HIP_ENGINE_HIP_PORTABILITY_H

#if defined(__HIP_PLATFORM_NVIDIA__)

#include <cuda_runtime_api.h>
#if defined(__CUDACC__)
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#endif

#define HIPDNN_HIP_ON_NVIDIA 1

typedef cudaStream_t hipStream_t;
typedef cudaError_t hipError_t;
typedef cudaDeviceProp hipDeviceProp_t;

#define hipSuccess cudaSuccess
#define hipErrorInvalidValue cudaErrorInvalidValue
#define hipErrorNotSupported cudaErrorNotSupported
#define hipGetDeviceCount cudaGetDeviceCount
#define hipGetDevice cudaGetDevice
#define hipGetDeviceProperties cudaGetDeviceProperties
#define hipDeviceGetAttribute cudaDeviceGetAttribute
#define hipDeviceAttributeMaxSharedMemoryPerBlockOptin cudaDevAttrMaxSharedMemoryPerBlockOptin
#define hipDeviceAttributeComputeCapabilityMajor cudaDevAttrComputeCapabilityMajor
#define hipDeviceAttributeComputeCapabilityMinor cudaDevAttrComputeCapabilityMinor
#define hipDeviceAttributeMultiprocessorCount cudaDevAttrMultiProcessorCount
#define hipDeviceAttributeL2CacheSize cudaDevAttrL2CacheSize
#define hipGetLastError cudaGetLastError
#define hipPeekAtLastError cudaPeekAtLastError
#define hipGetErrorString cudaGetErrorString
#define hipFuncSetAttribute cudaFuncSetAttribute
#define hipFuncAttributeMaxDynamicSharedMemorySize cudaFuncAttributeMaxDynamicSharedMemorySize
#define hipPointerGetAttributes cudaPointerGetAttributes
typedef cudaPointerAttributes hipPointerAttribute_t;
#define hipMemoryTypeDevice cudaMemoryTypeDevice
#define hipMemoryTypeManaged cudaMemoryTypeManaged
// Extended launches (the decode path's merge kernel starts under its producer: programmatic
// dependent launch, Hopper).
typedef cudaLaunchConfig_t hipLaunchConfig_t;
typedef cudaLaunchAttribute hipLaunchAttribute;
#define hipLaunchKernelExC cudaLaunchKernelExC
#define hipLaunchAttributeProgrammaticStreamSerialization cudaLaunchAttributeProgrammaticStreamSerialization

#if defined(__CUDACC__)
// Kernel-side names.
#define HIPDNN_SHFL_XOR(v, m, w) __shfl_xor_sync(0xffffffffu, (v), (m), (w))
#define HIPDNN_SHFL(v, l, w) __shfl_sync(0xffffffffu, (v), (l), (w))
#define hipLaunchKernelGGL(k, grid, block, shmem, stream, ...) k<<<(grid), (block), (shmem), (stream)>>>(__VA_ARGS__)
#endif

#else // AMD: the real HIP runtime

#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>

#define HIPDNN_SHFL_XOR(v, m, w) __shfl_xor((v), (m), (w))
#define HIPDNN_SHFL(v, l, w) __shfl((v), (l), (w))

#endif

#if defined(__CUDACC__) || defined(__HIPCC__)
// A float product rounded on its own: never contracted into an FMA with the add or subtract that
// uses it (equal huge biases must give equal scores; an unchanged maximum must give alpha == 1).
// nvcc keeps __fmul_rn apart from neighbouring adds. HIP's __fmul_rn is a plain product, which
// clang contracts under HIP's default -ffp-contract=fast (v_fmac_f32 on gfx90a), so on AMD
// contraction is switched off for this one multiply (tests/test_amd_build.py checks the ISA).
#if defined(HIPDNN_HIP_ON_NVIDIA)
__device__ __forceinline__ float hipdnn_fmul_rn(float a, float b)
{
    return __fmul_rn(a, b);
}
#else
__device__ __forceinline__ float hipdnn_fmul_rn(float a, float b)
{
#pragma clang fp contract(off)
    return a * b;
}
#endif
#endif

// The SDK's PluginApiDataTypes.h declares its own opaque hipStream_t only when no
// GPU runtime did; this engine's hipStream_t above is the runtime's.
#ifndef HIPDNN_HAVE_HIP_STREAM_T
#define HIPDNN_HAVE_HIP_STREAM_T 1
#endif

#endif // HIPDNN_HIP_ENGINE_HIP_PORTABILITY_H
