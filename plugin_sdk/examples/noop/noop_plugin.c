/*
 * A hipdnn engine plugin that does nothing, in plain C99: one engine (id 9990)
 * that declares itself applicable to every graph, needs no workspace, expects
 * host memory, and whose execute entries check their arguments and return.
 *
 * It exists to measure what the host costs per execute (argument checks,
 * variant-pack lowering, the FFI call) with no kernel in the way, using only
 * the public API:
 *
 *   import hipdnn, hipdnn.sdk
 *   lib = hipdnn.sdk.build_plugin([hipdnn.sdk.example_source("noop")], "libhipdnn_noop.so")
 *   h = hipdnn.Handle(plugin_paths=[lib], plugin_loading_mode=hipdnn.PluginLoadingMode.ABSOLUTE)
 *
 * API 1.2.0: it exports hipdnnEnginePluginExecuteOpGraphWithOverrides and
 * accepts graphs with the override flag and dynamic tensors (it reads nothing
 * of any tensor). Build with -fvisibility=hidden: only the SDK entry points,
 * which the headers declare with HIPDNN_PLUGIN_EXPORT, are exported.
 */
#include <stdlib.h>

#include <hipdnn_plugin_sdk/EnginePluginApi.h>
#include <hipdnn_plugin_sdk/GraphReader.h>
#include <hipdnn_plugin_sdk/PluginHelpers.h>

#define NOOP_ENGINE_ID INT64_C(9990)
#define NOOP_HANDLE_MAGIC 0x4e4f4f48u  /* "NOOH" */
#define NOOP_CONTEXT_MAGIC 0x4e4f4f43u /* "NOOC" */

/* GetLastErrorString, SetLoggingCallback, SetLogLevel and hipdnnPluginSetError/Log. */
HIPDNN_PLUGIN_DEFINE_ERROR_AND_LOG_ENTRIES();

static const int64_t k_engine_ids[1] = {NOOP_ENGINE_ID};

/*
 * The engine's details: a serialized hipdnn.wire.EngineDetails (schema/engine_details.fbs)
 *   { engine_id: 9990, behavior_notes: [HIPDNN_BEHAVIOR_NOTE_HOST_MEMORY_EXT] }
 * written out by hand, since it never changes: a FlatBuffer is little-endian, offsets are
 * relative to where they are stored, and every scalar sits at a multiple of its size (the union
 * aligns the whole buffer for the int64).
 */
static const union
{
    unsigned char bytes[40];
    int64_t align;
} k_engine_details = {{
    /*  0: uoffset to the root table (at 16)                                    */ 16, 0, 0, 0,
    /*  4: vtable: its size (10), the table's size (16), then one u16 per field */ 10, 0, 16, 0,
    /*  8: engine_id at table+8, knobs absent (0)                               */ 8, 0, 0, 0,
    /* 12: behavior_notes at table+4, 2 bytes of padding                        */ 4, 0, 0, 0,
    /* 16: table: soffset to its vtable (16 - 12 = 4)                           */ 12, 0, 0, 0,
    /* 20: behavior_notes: uoffset to the vector (20 + 12 = 32)                 */ 12, 0, 0, 0,
    /* 24: engine_id: int64 9990 (0x2706)                                       */ 0x06, 0x27, 0, 0, 0, 0, 0, 0,
    /* 32: vector length 1, then int32 1000 (0x3e8)                             */ 1, 0, 0, 0, 0xe8, 0x03, 0, 0,
}};

/* ------------------------------------------------------------------------- */
/* Plugin objects                                                            */
/* ------------------------------------------------------------------------- */

struct HipdnnEnginePluginHandle
{
    uint32_t magic;
    hipStream_t stream; /* kept, unused */
};

struct HipdnnEnginePluginExecutionContext
{
    uint32_t magic;
    hipdnnEnginePluginHandle_t owner; /* the handle that created it */
};

static int valid_handle(hipdnnEnginePluginHandle_t handle)
{
    return handle != NULL && handle->magic == NOOP_HANDLE_MAGIC;
}

static int valid_context(hipdnnEnginePluginHandle_t handle, hipdnnEnginePluginExecutionContext_t ctx)
{
    return ctx != NULL && ctx->magic == NOOP_CONTEXT_MAGIC && ctx->owner == handle;
}

static int valid_data(const hipdnnPluginConstData_t* data)
{
    return data != NULL && (data->ptr != NULL || data->size == 0);
}

/* Checks that engine_config is readable and names this plugin's engine. */
static hipdnnPluginStatus_t check_config(const hipdnnPluginConstData_t* engine_config)
{
    hipdnnEngineConfigReader_t cfg;
    if(!valid_data(engine_config))
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "engine_config is NULL");
    if(hipdnnEngineConfigReaderOpen(&cfg, engine_config->ptr, engine_config->size) != HIPDNN_PLUGIN_STATUS_SUCCESS)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "unreadable engine config: %s",
                                    hipdnnEngineConfigReaderError(&cfg));
    if(cfg.engine_id != NOOP_ENGINE_ID)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "engine config names engine %lld, not %lld",
                                    (long long)cfg.engine_id, (long long)NOOP_ENGINE_ID);
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

/* The checks both execute entries make; nothing is read or written. */
static hipdnnPluginStatus_t check_execute(hipdnnEnginePluginHandle_t handle, hipdnnEnginePluginExecutionContext_t ctx,
                                          const hipdnnPluginDeviceBuffer_t* device_buffers, uint32_t num_device_buffers)
{
    if(!valid_handle(handle))
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "invalid plugin handle");
    if(!valid_context(handle, ctx))
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM,
                                    "invalid execution context (NULL, destroyed, or made by another handle)");
    if(device_buffers == NULL && num_device_buffers > 0)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "device_buffers is NULL but %u are announced",
                                    (unsigned)num_device_buffers);
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

/* ------------------------------------------------------------------------- */
/* Entry points every plugin exports                                         */
/* ------------------------------------------------------------------------- */

hipdnnPluginStatus_t hipdnnPluginGetName(const char** name)
{
    if(name == NULL)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "name is NULL");
    *name = "hipdnn_noop";
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

hipdnnPluginStatus_t hipdnnPluginGetVersion(const char** version)
{
    if(version == NULL)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "version is NULL");
    *version = "1.0.0";
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

/* 1.2.0: the override entry is exported, and dynamic tensors are accepted (nothing is read). */
hipdnnPluginStatus_t hipdnnPluginGetApiVersion(const char** version)
{
    if(version == NULL)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "version is NULL");
    *version = "1.2.0";
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

hipdnnPluginStatus_t hipdnnPluginGetType(hipdnnPluginType_t* type)
{
    if(type == NULL)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "type is NULL");
    *type = HIPDNN_PLUGIN_TYPE_ENGINE;
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

/* ------------------------------------------------------------------------- */
/* Engine entry points                                                       */
/* ------------------------------------------------------------------------- */

hipdnnPluginStatus_t hipdnnEnginePluginGetAllEngineIds(int64_t* engine_ids, uint32_t max_engines,
                                                       uint32_t* num_engines)
{
    if(hipdnnPluginReturnEngineIds(k_engine_ids, 1, engine_ids, max_engines, num_engines)
       != HIPDNN_PLUGIN_STATUS_SUCCESS)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "bad engine id array arguments");
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

hipdnnPluginStatus_t hipdnnEnginePluginCreate(hipdnnEnginePluginHandle_t* handle)
{
    struct HipdnnEnginePluginHandle* h;
    if(handle == NULL)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "handle is NULL");
    *handle = NULL;
    h = (struct HipdnnEnginePluginHandle*)calloc(1, sizeof *h);
    if(h == NULL)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_ALLOC_FAILED, "out of memory");
    h->magic = NOOP_HANDLE_MAGIC;
    *handle = h;
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

hipdnnPluginStatus_t hipdnnEnginePluginDestroy(hipdnnEnginePluginHandle_t handle)
{
    if(!valid_handle(handle))
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "invalid plugin handle");
    handle->magic = 0;
    free(handle);
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

hipdnnPluginStatus_t hipdnnEnginePluginSetStream(hipdnnEnginePluginHandle_t handle, hipStream_t stream)
{
    if(!valid_handle(handle))
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "invalid plugin handle");
    handle->stream = stream;
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

/* Every graph: the engine reads none of it. */
hipdnnPluginStatus_t hipdnnEnginePluginGetApplicableEngineIds(hipdnnEnginePluginHandle_t handle,
                                                              const hipdnnPluginConstData_t* op_graph,
                                                              int64_t* engine_ids, uint32_t max_engines,
                                                              uint32_t* num_engines)
{
    if(!valid_handle(handle))
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "invalid plugin handle");
    if(!valid_data(op_graph))
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "op_graph is NULL");
    if(hipdnnPluginReturnEngineIds(k_engine_ids, 1, engine_ids, max_engines, num_engines)
       != HIPDNN_PLUGIN_STATUS_SUCCESS)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "bad engine id array arguments");
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

hipdnnPluginStatus_t hipdnnEnginePluginGetEngineDetails(hipdnnEnginePluginHandle_t handle, int64_t engine_id,
                                                        const hipdnnPluginConstData_t* op_graph,
                                                        hipdnnPluginConstData_t* engine_details)
{
    if(!valid_handle(handle) || engine_details == NULL)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "invalid plugin handle or engine_details");
    if(!valid_data(op_graph))
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "op_graph is NULL");
    if(engine_id != NOOP_ENGINE_ID)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "unknown engine id %lld", (long long)engine_id);
    /* Static, so nothing to free in DestroyEngineDetails. */
    engine_details->ptr = k_engine_details.bytes;
    engine_details->size = sizeof k_engine_details.bytes;
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

hipdnnPluginStatus_t hipdnnEnginePluginDestroyEngineDetails(hipdnnEnginePluginHandle_t handle,
                                                            hipdnnPluginConstData_t* engine_details)
{
    if(!valid_handle(handle) || engine_details == NULL)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "invalid plugin handle or engine_details");
    engine_details->ptr = NULL;
    engine_details->size = 0;
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

hipdnnPluginStatus_t hipdnnEnginePluginGetWorkspaceSize(hipdnnEnginePluginHandle_t handle,
                                                        const hipdnnPluginConstData_t* engine_config,
                                                        const hipdnnPluginConstData_t* op_graph,
                                                        size_t* workspace_size)
{
    if(!valid_handle(handle) || workspace_size == NULL)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "invalid plugin handle or workspace_size");
    if(!valid_data(op_graph))
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "op_graph is NULL");
    *workspace_size = 0;
    return check_config(engine_config);
}

hipdnnPluginStatus_t hipdnnEnginePluginCreateExecutionContext(hipdnnEnginePluginHandle_t handle,
                                                              const hipdnnPluginConstData_t* engine_config,
                                                              const hipdnnPluginConstData_t* op_graph,
                                                              hipdnnEnginePluginExecutionContext_t* execution_context)
{
    struct HipdnnEnginePluginExecutionContext* ctx;
    hipdnnPluginStatus_t st;
    if(!valid_handle(handle) || execution_context == NULL)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "invalid plugin handle or execution_context");
    *execution_context = NULL;
    if(!valid_data(op_graph))
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "op_graph is NULL");
    st = check_config(engine_config);
    if(st != HIPDNN_PLUGIN_STATUS_SUCCESS)
        return st;
    ctx = (struct HipdnnEnginePluginExecutionContext*)calloc(1, sizeof *ctx);
    if(ctx == NULL)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_ALLOC_FAILED, "out of memory");
    ctx->magic = NOOP_CONTEXT_MAGIC;
    ctx->owner = handle;
    *execution_context = ctx;
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

hipdnnPluginStatus_t hipdnnEnginePluginDestroyExecutionContext(hipdnnEnginePluginHandle_t handle,
                                                               hipdnnEnginePluginExecutionContext_t execution_context)
{
    if(!valid_handle(handle))
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "invalid plugin handle");
    if(!valid_context(handle, execution_context))
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM,
                                    "invalid execution context (NULL, destroyed, or made by another handle)");
    execution_context->magic = 0;
    execution_context->owner = NULL;
    free(execution_context);
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

hipdnnPluginStatus_t hipdnnEnginePluginGetWorkspaceSizeFromExecutionContext(
    hipdnnEnginePluginHandle_t handle, hipdnnEnginePluginExecutionContext_t execution_context, size_t* workspace_size)
{
    if(!valid_handle(handle) || !valid_context(handle, execution_context) || workspace_size == NULL)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM,
                                    "invalid plugin handle, execution context or workspace_size");
    *workspace_size = 0;
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

hipdnnPluginStatus_t hipdnnEnginePluginExecuteOpGraph(hipdnnEnginePluginHandle_t handle,
                                                      hipdnnEnginePluginExecutionContext_t execution_context,
                                                      void* workspace, const hipdnnPluginDeviceBuffer_t* device_buffers,
                                                      uint32_t num_device_buffers)
{
    (void)workspace; /* none requested */
    return check_execute(handle, execution_context, device_buffers, num_device_buffers);
}

hipdnnPluginStatus_t hipdnnEnginePluginExecuteOpGraphWithOverrides(
    hipdnnEnginePluginHandle_t handle, hipdnnEnginePluginExecutionContext_t execution_context, void* workspace,
    const hipdnnPluginDeviceBuffer_t* device_buffers, uint32_t num_device_buffers, uint32_t num_overrides,
    const int64_t* override_unique_ids, const uint32_t* override_lengths, const int64_t* const* override_shapes,
    const int64_t* const* override_strides)
{
    hipdnnPluginStatus_t st = check_execute(handle, execution_context, device_buffers, num_device_buffers);
    (void)workspace;
    if(st != HIPDNN_PLUGIN_STATUS_SUCCESS)
        return st;
    if(num_overrides > 0
       && (override_unique_ids == NULL || override_lengths == NULL || override_shapes == NULL
           || override_strides == NULL))
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "%u overrides announced but an array is NULL",
                                    (unsigned)num_overrides);
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}
