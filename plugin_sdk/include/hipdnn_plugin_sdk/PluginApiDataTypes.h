/*
 * hipdnn plugin SDK: data types shared by every plugin entry point.
 *
 * Plain C (C99 and C++17 clean). Nothing here needs HIP or CUDA: when neither
 * runtime has declared hipStream_t, an opaque stand-in is declared so that CPU
 * plugins and the host build without a GPU toolchain.
 *
 * The Python host reads the declarations between the CFFI markers of each SDK
 * header (preprocessor lines and the export macros stripped), so every
 * declaration there must be plain C with no macros besides
 * HIPDNN_PLUGIN_EXPORT and HIPDNN_PLUGIN_NODISCARD.
 */
#ifndef HIPDNN_PLUGIN_SDK_PLUGIN_API_DATA_TYPES_H
#define HIPDNN_PLUGIN_SDK_PLUGIN_API_DATA_TYPES_H

#include <stddef.h>
#include <stdint.h>

/* The plugin API version this SDK describes, as MAJOR.MINOR.PATCH.
 * 1.0.0 baseline; 1.1.0 adds hipdnnEnginePluginExecuteOpGraphWithOverrides; 1.2.0 adds dynamic
 * tensors (TensorAttributes.is_dynamic: -1 dims given at execute, strides read as an axis order);
 * 1.3.0 adds ragged offsets (TensorAttributes.ragged_offset_tensor_uid) and paged K/V
 * (SdpaAttributes.page_table_k/v_tensor_uid, max_seq_len_kv), rfcs/0012-ragged-and-paged.md;
 * 1.4.0 adds score softcapping (SdpaAttributes.softcap, SdpaBackwardAttributes.softcap: c > 0 replaces
 * each score s = attn_scale * q.k by c * tanh(s / c) before bias, ALiBi and masks), rfcs/0013-softcap.md;
 * 1.5.0 serves FP8 attention (SdpaAttributes.descale_q/k/v/s, scale_s/o and amax_s/o uids: the
 * forward of rfcs/0014-fp8-attention.md), which engines below it are never offered;
 * 1.6.0 adds the FP8 backward (SdpaBackwardAttributes.descale_q/k/v/o/do/s/dp, scale_s/dq/dk/dv/dp
 * and amax_dq/dk/dv/dp uids, appended to the table), rfcs/0014-fp8-attention.md.
 * A plugin reports the version whose contract it implements, which may be older than this. */
#define HIPDNN_PLUGIN_API_VERSION_MAJOR 1
#define HIPDNN_PLUGIN_API_VERSION_MINOR 6
#define HIPDNN_PLUGIN_API_VERSION_PATCH 0
#define HIPDNN_PLUGIN_API_VERSION "1.6.0"

/* Behavior notes an engine may list in its EngineDetails.behavior_notes to say where the memory of
 * its tensors and workspace must live. The host refuses, before calling the plugin, device memory
 * handed to a host engine and host arrays handed to a device engine. (hipDNN's own notes are 0..4.) */
#define HIPDNN_BEHAVIOR_NOTE_HOST_MEMORY_EXT 1000
#define HIPDNN_BEHAVIOR_NOTE_DEVICE_MEMORY_EXT 1001

#if defined(_WIN32)
#define HIPDNN_PLUGIN_EXPORT __declspec(dllexport)
#elif defined(__GNUC__) || defined(__clang__)
#define HIPDNN_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define HIPDNN_PLUGIN_EXPORT
#endif

#if defined(__cplusplus) && __cplusplus >= 201703L
#define HIPDNN_PLUGIN_NODISCARD [[nodiscard]]
#elif defined(__GNUC__) || defined(__clang__)
#define HIPDNN_PLUGIN_NODISCARD __attribute__((warn_unused_result))
#else
#define HIPDNN_PLUGIN_NODISCARD
#endif

#if !defined(HIP_INCLUDE_HIP_HIP_RUNTIME_API_H) && !defined(HIPDNN_HAVE_HIP_STREAM_T) \
    && !defined(__HIP_PLATFORM_AMD__) && !defined(__HIP_PLATFORM_NVIDIA__)
#define HIPDNN_PLUGIN_SDK_DECLARES_HIP_STREAM 1
#endif

#ifdef __cplusplus
extern "C" {
#endif

#ifdef HIPDNN_PLUGIN_SDK_DECLARES_HIP_STREAM
/* CFFI:BEGIN stream */
typedef struct ihipStream_t* hipStream_t;
/* CFFI:END stream */
#endif

/* CFFI:BEGIN */
typedef enum
{
    HIPDNN_PLUGIN_STATUS_SUCCESS = 0,
    HIPDNN_PLUGIN_STATUS_BAD_PARAM = 1,
    HIPDNN_PLUGIN_STATUS_INVALID_VALUE = 2,
    HIPDNN_PLUGIN_STATUS_INTERNAL_ERROR = 3,
    HIPDNN_PLUGIN_STATUS_ALLOC_FAILED = 4,
    HIPDNN_PLUGIN_STATUS_NOT_APPLICABLE = 5,
    HIPDNN_PLUGIN_STATUS_NOT_INITIALIZED = 6
} hipdnnPluginStatus_t;

typedef enum
{
    HIPDNN_PLUGIN_TYPE_UNSPECIFIED = 0,
    HIPDNN_PLUGIN_TYPE_ENGINE = 1,
    HIPDNN_PLUGIN_TYPE_HEURISTIC = 2
} hipdnnPluginType_t;

typedef enum
{
    HIPDNN_SEV_INFO = 0,
    HIPDNN_SEV_WARN = 1,
    HIPDNN_SEV_ERROR = 2,
    HIPDNN_SEV_FATAL = 3,
    HIPDNN_SEV_OFF = 4
} hipdnnSeverity_t;

/* Log sink handed to a plugin through hipdnnPluginSetLoggingCallback. */
typedef void (*hipdnnCallback_t)(hipdnnSeverity_t severity, const char* message);

/* A read-only byte buffer: a serialized Graph, EngineConfig or EngineDetails. */
typedef struct
{
    const void* ptr;
    size_t size;
} hipdnnPluginConstData_t;

/* One tensor's memory for an execute call, keyed by the tensor's uid. */
typedef struct
{
    int64_t uid;
    void* ptr;
} hipdnnPluginDeviceBuffer_t;

/* Opaque objects owned by the plugin. */
typedef struct HipdnnEnginePluginHandle* hipdnnEnginePluginHandle_t;
typedef struct HipdnnEnginePluginExecutionContext* hipdnnEnginePluginExecutionContext_t;
/* CFFI:END */

#ifdef __cplusplus
}
#endif

#endif /* HIPDNN_PLUGIN_SDK_PLUGIN_API_DATA_TYPES_H */
