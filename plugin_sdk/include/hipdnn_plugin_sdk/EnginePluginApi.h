/*
 * hipdnn plugin SDK: entry points of an engine plugin.
 *
 * Call order, as the host makes it:
 *   GetAllEngineIds -> Create -> [SetStream] -> GetApplicableEngineIds(graph)
 *   -> GetEngineDetails / DestroyEngineDetails -> GetWorkspaceSize
 *   -> CreateExecutionContext(config, graph) -> GetWorkspaceSizeFromExecutionContext
 *   -> ExecuteOpGraph | ExecuteOpGraphWithOverrides (any number of times)
 *   -> DestroyExecutionContext -> Destroy.
 *
 * Graphs arrive as a serialized hipdnn.wire.Graph FlatBuffer, engine configs as a
 * serialized hipdnn.wire.EngineConfig (headers under hipdnn_plugin_sdk/wire/).
 * Every buffer and pointer array passed in is valid for the duration of the call
 * only; a plugin copies what it needs to keep.
 *
 * Count/array pairs (engine ids) follow one convention: the plugin writes at most
 * max_engines ids and always stores the total count in *num_engines, so a call
 * with max_engines == 0 (engine_ids may be NULL) asks for the count.
 */
#ifndef HIPDNN_PLUGIN_SDK_ENGINE_PLUGIN_API_H
#define HIPDNN_PLUGIN_SDK_ENGINE_PLUGIN_API_H

#include "PluginApi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* CFFI:BEGIN */
HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t hipdnnEnginePluginGetAllEngineIds(
    int64_t* engine_ids, uint32_t max_engines, uint32_t* num_engines);

HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t hipdnnEnginePluginCreate(
    hipdnnEnginePluginHandle_t* handle);

HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t hipdnnEnginePluginDestroy(
    hipdnnEnginePluginHandle_t handle);

HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t hipdnnEnginePluginSetStream(
    hipdnnEnginePluginHandle_t handle, hipStream_t stream);

/* Which of this plugin's engines can execute op_graph (a serialized Graph). */
HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t hipdnnEnginePluginGetApplicableEngineIds(
    hipdnnEnginePluginHandle_t handle,
    const hipdnnPluginConstData_t* op_graph,
    int64_t* engine_ids,
    uint32_t max_engines,
    uint32_t* num_engines);

/* Fills engine_details with a serialized EngineDetails (size 0: no knobs, no notes);
 * the buffer stays owned by the plugin until DestroyEngineDetails. */
HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t hipdnnEnginePluginGetEngineDetails(
    hipdnnEnginePluginHandle_t handle,
    int64_t engine_id,
    const hipdnnPluginConstData_t* op_graph,
    hipdnnPluginConstData_t* engine_details);

HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t hipdnnEnginePluginDestroyEngineDetails(
    hipdnnEnginePluginHandle_t handle, hipdnnPluginConstData_t* engine_details);

/* Workspace bytes the engine in engine_config needs for op_graph, at the graph's
 * declared (maximum) shapes. */
HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t hipdnnEnginePluginGetWorkspaceSize(
    hipdnnEnginePluginHandle_t handle,
    const hipdnnPluginConstData_t* engine_config,
    const hipdnnPluginConstData_t* op_graph,
    size_t* workspace_size);

HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t hipdnnEnginePluginCreateExecutionContext(
    hipdnnEnginePluginHandle_t handle,
    const hipdnnPluginConstData_t* engine_config,
    const hipdnnPluginConstData_t* op_graph,
    hipdnnEnginePluginExecutionContext_t* execution_context);

HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t hipdnnEnginePluginDestroyExecutionContext(
    hipdnnEnginePluginHandle_t handle, hipdnnEnginePluginExecutionContext_t execution_context);

HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t hipdnnEnginePluginGetWorkspaceSizeFromExecutionContext(
    hipdnnEnginePluginHandle_t handle,
    hipdnnEnginePluginExecutionContext_t execution_context,
    size_t* workspace_size);

/* Runs the graph at its declared shapes. device_buffers holds one entry per
 * non-virtual tensor of the graph. */
HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t hipdnnEnginePluginExecuteOpGraph(
    hipdnnEnginePluginHandle_t handle,
    hipdnnEnginePluginExecutionContext_t execution_context,
    void* workspace,
    const hipdnnPluginDeviceBuffer_t* device_buffers,
    uint32_t num_device_buffers);

/* Optional, API >= 1.1.0. Runs the graph with per-tensor shapes and strides
 * replaced for this call: for i < num_overrides, tensor override_unique_ids[i]
 * has rank override_lengths[i], dims override_shapes[i][0..rank) and strides
 * override_strides[i][0..rank). Tensors not named keep their declared shapes.
 * The host has checked every override against the graph (known uid, declared
 * rank, 0 < dim <= declared dim, positive strides, axis order kept) before the
 * call. All arrays are valid for this call only. */
HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t hipdnnEnginePluginExecuteOpGraphWithOverrides(
    hipdnnEnginePluginHandle_t handle,
    hipdnnEnginePluginExecutionContext_t execution_context,
    void* workspace,
    const hipdnnPluginDeviceBuffer_t* device_buffers,
    uint32_t num_device_buffers,
    uint32_t num_overrides,
    const int64_t* override_unique_ids,
    const uint32_t* override_lengths,
    const int64_t* const* override_shapes,
    const int64_t* const* override_strides);
/* CFFI:END */

#ifdef __cplusplus
}
#endif

#endif /* HIPDNN_PLUGIN_SDK_ENGINE_PLUGIN_API_H */
