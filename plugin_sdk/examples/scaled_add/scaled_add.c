/*
 * Example hipdnn engine plugin, plain C99: one engine (id 5001) that runs a
 * graph made of a single pointwise node out = in_0 OP in_1 with OP one of ADD,
 * SUB, MUL, on fp32 tensors of up to 8 dims, with numpy-style broadcasting of
 * either input and any (non-negative) strides. Execution is on the host CPU.
 *
 * It implements every required entry point, the optional ones (API version,
 * logging, and, at API 1.1.0, execution with shape overrides), and shows the
 * SDK helpers at work: the bounds-checked graph reader, the last-error string
 * and logging plumbing, the engine-id count convention.
 */
#include <stdlib.h>
#include <string.h>

#include <hipdnn_plugin_sdk/EnginePluginApi.h>
#include <hipdnn_plugin_sdk/GraphReader.h>
#include <hipdnn_plugin_sdk/PluginHelpers.h>

#define EXAMPLE_ENGINE_ID INT64_C(5001)
#define EXAMPLE_MAX_RANK 8u
#define EXAMPLE_HANDLE_MAGIC 0x48414e44u  /* "HAND" */
#define EXAMPLE_CONTEXT_MAGIC 0x43545854u /* "CTXT" */

/* GetLastErrorString, SetLoggingCallback, SetLogLevel and hipdnnPluginSetError/Log. */
HIPDNN_PLUGIN_DEFINE_ERROR_AND_LOG_ENTRIES();

static const int64_t k_engine_ids[1] = {EXAMPLE_ENGINE_ID};

/* ------------------------------------------------------------------------- */
/* Plugin objects                                                            */
/* ------------------------------------------------------------------------- */

struct HipdnnEnginePluginHandle
{
    uint32_t magic;
    hipStream_t stream; /* kept, unused: this engine runs on the host */
};

/* One tensor's shape as the engine uses it. */
typedef struct
{
    int64_t uid;
    uint32_t rank;
    int64_t dims[EXAMPLE_MAX_RANK];
    int64_t strides[EXAMPLE_MAX_RANK];
} example_tensor;

/* What CreateExecutionContext keeps: everything execute needs, copied out of
 * the graph buffer (which is only valid during that call). */
struct HipdnnEnginePluginExecutionContext
{
    uint32_t magic;
    int32_t mode;
    example_tensor in0, in1, out;
};

static int valid_handle(hipdnnEnginePluginHandle_t handle)
{
    return handle != NULL && handle->magic == EXAMPLE_HANDLE_MAGIC;
}

static int valid_context(hipdnnEnginePluginExecutionContext_t ctx)
{
    return ctx != NULL && ctx->magic == EXAMPLE_CONTEXT_MAGIC;
}

/* ------------------------------------------------------------------------- */
/* Reading the graph                                                         */
/* ------------------------------------------------------------------------- */

static const char* mode_name(int32_t mode)
{
    switch(mode)
    {
    case HIPDNN_WIRE_POINTWISE_ADD: return "ADD";
    case HIPDNN_WIRE_POINTWISE_SUB: return "SUB";
    case HIPDNN_WIRE_POINTWISE_MUL: return "MUL";
    default: return "?";
    }
}

/* Copies tensor `uid` out of the graph; NOT_APPLICABLE when this engine cannot
 * use it. */
static hipdnnPluginStatus_t load_tensor(hipdnnGraphReader_t* r, int64_t uid, const char* role, example_tensor* out)
{
    hipdnnGraphTensor_t t;
    uint32_t rank = 0, i;
    hipdnnPluginStatus_t st = hipdnnGraphReaderFindTensor(r, uid, &t);
    if(st != HIPDNN_PLUGIN_STATUS_SUCCESS)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "%s: %s", role, hipdnnGraphReaderError(r));
    if(t.data_type != HIPDNN_WIRE_DATA_TYPE_FLOAT)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_NOT_APPLICABLE, "%s '%s' is not fp32 (data type %d)", role,
                                    t.name, (int)t.data_type);
    if(t.is_virtual)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_NOT_APPLICABLE, "%s '%s' is virtual", role, t.name);
    if(t.is_dynamic) /* its dims and strides mean something else (API 1.2.0); not served here */
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_NOT_APPLICABLE, "%s '%s' is dynamic", role, t.name);
    if(t.rank > EXAMPLE_MAX_RANK)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_NOT_APPLICABLE, "%s '%s' has rank %u > %u", role, t.name,
                                    (unsigned)t.rank, EXAMPLE_MAX_RANK);
    out->uid = uid;
    st = hipdnnGraphReaderTensorDims(r, &t, out->dims, EXAMPLE_MAX_RANK, &rank);
    if(st == HIPDNN_PLUGIN_STATUS_SUCCESS)
        st = hipdnnGraphReaderTensorStrides(r, &t, out->strides, EXAMPLE_MAX_RANK, &rank);
    if(st != HIPDNN_PLUGIN_STATUS_SUCCESS)
        return hipdnnPluginSetError(st, "%s: %s", role, hipdnnGraphReaderError(r));
    out->rank = rank;
    for(i = 0; i < rank; ++i)
        if(out->dims[i] <= 0 || out->strides[i] < 0)
            return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_NOT_APPLICABLE,
                                        "%s '%s': dim %u is %lld with stride %lld", role, t.name, (unsigned)i,
                                        (long long)out->dims[i], (long long)out->strides[i]);
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

/* Whether in (right-aligned against out) broadcasts to out. */
static int broadcasts(const example_tensor* in, const example_tensor* out)
{
    uint32_t i;
    if(in->rank > out->rank)
        return 0;
    for(i = 0; i < in->rank; ++i)
    {
        int64_t d = in->dims[in->rank - 1 - i];
        if(d != 1 && d != out->dims[out->rank - 1 - i])
            return 0;
    }
    return 1;
}

/* Reads op_graph into ctx. SUCCESS: this engine serves it; NOT_APPLICABLE: it
 * does not (the reason is the last error); BAD_PARAM: the buffer is damaged. */
static hipdnnPluginStatus_t plan_graph(const hipdnnPluginConstData_t* op_graph,
                                       struct HipdnnEnginePluginExecutionContext* ctx)
{
    hipdnnGraphReader_t r;
    hipdnnGraphNode_t node;
    hipdnnGraphPointwise_t pw;
    hipdnnPluginStatus_t st;

    if(op_graph == NULL)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "op_graph is NULL");
    if(hipdnnGraphReaderOpen(&r, op_graph->ptr, op_graph->size) != HIPDNN_PLUGIN_STATUS_SUCCESS)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "unreadable graph: %s", hipdnnGraphReaderError(&r));
    if(hipdnnGraphReaderNodeCount(&r) != 1)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_NOT_APPLICABLE, "graph '%s' has %u nodes, not 1",
                                    hipdnnGraphReaderName(&r), (unsigned)hipdnnGraphReaderNodeCount(&r));
    if(hipdnnGraphReaderNode(&r, 0, &node) != HIPDNN_PLUGIN_STATUS_SUCCESS)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "%s", hipdnnGraphReaderError(&r));
    if(node.op_type != HIPDNN_WIRE_NODE_POINTWISE)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_NOT_APPLICABLE, "node '%s' is not pointwise (kind %u)",
                                    node.name, (unsigned)node.op_type);
    if(hipdnnGraphReaderPointwise(&r, &node, &pw) != HIPDNN_PLUGIN_STATUS_SUCCESS)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "%s", hipdnnGraphReaderError(&r));
    if(pw.mode != HIPDNN_WIRE_POINTWISE_ADD && pw.mode != HIPDNN_WIRE_POINTWISE_SUB
       && pw.mode != HIPDNN_WIRE_POINTWISE_MUL)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_NOT_APPLICABLE, "pointwise mode %d is not ADD, SUB or MUL",
                                    (int)pw.mode);
    if(!pw.in_1_uid.has_value || pw.in_2_uid.has_value)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_NOT_APPLICABLE, "node '%s' does not have exactly 2 inputs",
                                    node.name);
    memset(ctx, 0, sizeof *ctx);
    ctx->mode = pw.mode;
    st = load_tensor(&r, pw.in_0_uid, "in_0", &ctx->in0);
    if(st == HIPDNN_PLUGIN_STATUS_SUCCESS)
        st = load_tensor(&r, pw.in_1_uid.value, "in_1", &ctx->in1);
    if(st == HIPDNN_PLUGIN_STATUS_SUCCESS)
        st = load_tensor(&r, pw.out_0_uid, "out_0", &ctx->out);
    if(st != HIPDNN_PLUGIN_STATUS_SUCCESS)
        return st;
    if(!broadcasts(&ctx->in0, &ctx->out) || !broadcasts(&ctx->in1, &ctx->out))
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_NOT_APPLICABLE, "inputs do not broadcast to the output");
    hipdnnPluginClearError();
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

/* ------------------------------------------------------------------------- */
/* The kernel                                                                */
/* ------------------------------------------------------------------------- */

/* Strides of `in` as seen from out's index space: right-aligned, 0 where the
 * input is broadcast (its dim is 1, or it has no such axis). */
static void broadcast_strides(const example_tensor* in, const example_tensor* out, int64_t* strides)
{
    uint32_t i;
    for(i = 0; i < out->rank; ++i)
    {
        uint32_t from_end = out->rank - 1 - i;
        strides[i] = 0;
        if(from_end < in->rank)
        {
            uint32_t j = in->rank - 1 - from_end;
            strides[i] = in->dims[j] == 1 ? 0 : in->strides[j];
        }
    }
}

static void run_kernel(int32_t mode, const example_tensor* in0, const example_tensor* in1,
                       const example_tensor* out, const float* a, const float* b, float* c)
{
    int64_t sa[EXAMPLE_MAX_RANK], sb[EXAMPLE_MAX_RANK], idx[EXAMPLE_MAX_RANK];
    int64_t oa = 0, ob = 0, oc = 0;
    uint32_t rank = out->rank;
    broadcast_strides(in0, out, sa);
    broadcast_strides(in1, out, sb);
    memset(idx, 0, sizeof idx);
    for(;;)
    {
        float x = a[oa], y = b[ob];
        c[oc] = mode == HIPDNN_WIRE_POINTWISE_ADD ? x + y : mode == HIPDNN_WIRE_POINTWISE_SUB ? x - y : x * y;
        /* Odometer step over out's dims, last axis fastest. */
        {
            uint32_t axis = rank;
            while(axis > 0)
            {
                --axis;
                if(++idx[axis] < out->dims[axis])
                {
                    oa += sa[axis];
                    ob += sb[axis];
                    oc += out->strides[axis];
                    break;
                }
                oa -= sa[axis] * (idx[axis] - 1);
                ob -= sb[axis] * (idx[axis] - 1);
                oc -= out->strides[axis] * (idx[axis] - 1);
                idx[axis] = 0;
                if(axis == 0)
                    return;
            }
            if(rank == 0)
                return;
        }
    }
}

/* Applies the overrides (if any) to a copy of a tensor's declared shape. */
static hipdnnPluginStatus_t apply_override(example_tensor* t, uint32_t num_overrides, const int64_t* ids,
                                           const uint32_t* lengths, const int64_t* const* shapes,
                                           const int64_t* const* strides)
{
    uint32_t rank = 0, i;
    const int64_t* d = NULL;
    const int64_t* s = NULL;
    if(!hipdnnPluginFindOverride(num_overrides, ids, lengths, shapes, strides, t->uid, &rank, &d, &s))
        return HIPDNN_PLUGIN_STATUS_SUCCESS;
    if(rank != t->rank || (rank > 0 && (d == NULL || s == NULL)))
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "override of tensor %lld has rank %u, not %u",
                                    (long long)t->uid, (unsigned)rank, (unsigned)t->rank);
    for(i = 0; i < rank; ++i)
    {
        if(d[i] <= 0 || d[i] > t->dims[i] || s[i] < 0)
            return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM,
                                        "override of tensor %lld: dim %u = %lld (declared %lld), stride %lld",
                                        (long long)t->uid, (unsigned)i, (long long)d[i], (long long)t->dims[i],
                                        (long long)s[i]);
        t->dims[i] = d[i];
        t->strides[i] = s[i];
    }
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

static hipdnnPluginStatus_t execute(hipdnnEnginePluginHandle_t handle, hipdnnEnginePluginExecutionContext_t ctx,
                                    const hipdnnPluginDeviceBuffer_t* buffers, uint32_t num_buffers,
                                    uint32_t num_overrides, const int64_t* ids, const uint32_t* lengths,
                                    const int64_t* const* shapes, const int64_t* const* strides)
{
    example_tensor in0, in1, out;
    const float* a;
    const float* b;
    float* c;
    hipdnnPluginStatus_t st;
    hipdnnPluginClearError();
    if(!valid_handle(handle) || !valid_context(ctx))
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "invalid handle or execution context");
    if(buffers == NULL && num_buffers > 0)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "device_buffers is NULL");
    in0 = ctx->in0;
    in1 = ctx->in1;
    out = ctx->out;
    if(num_overrides > 0)
    {
        if(ids == NULL || lengths == NULL || shapes == NULL || strides == NULL)
            return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "override arrays are NULL");
        st = apply_override(&in0, num_overrides, ids, lengths, shapes, strides);
        if(st == HIPDNN_PLUGIN_STATUS_SUCCESS)
            st = apply_override(&in1, num_overrides, ids, lengths, shapes, strides);
        if(st == HIPDNN_PLUGIN_STATUS_SUCCESS)
            st = apply_override(&out, num_overrides, ids, lengths, shapes, strides);
        if(st != HIPDNN_PLUGIN_STATUS_SUCCESS)
            return st;
        if(!broadcasts(&in0, &out) || !broadcasts(&in1, &out))
            return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM,
                                        "overridden input shapes do not broadcast to the overridden output");
    }
    a = (const float*)hipdnnPluginFindDeviceBuffer(buffers, num_buffers, in0.uid);
    b = (const float*)hipdnnPluginFindDeviceBuffer(buffers, num_buffers, in1.uid);
    c = (float*)hipdnnPluginFindDeviceBuffer(buffers, num_buffers, out.uid);
    if(a == NULL || b == NULL || c == NULL)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "no buffer for tensor %lld",
                                    (long long)(a == NULL ? in0.uid : b == NULL ? in1.uid : out.uid));
    run_kernel(ctx->mode, &in0, &in1, &out, a, b, c);
    hipdnnPluginLog(HIPDNN_SEV_INFO, "executed %s over rank-%u output%s", mode_name(ctx->mode), (unsigned)out.rank,
                    num_overrides > 0 ? " with overrides" : "");
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

/* ------------------------------------------------------------------------- */
/* Entry points every plugin exports                                         */
/* ------------------------------------------------------------------------- */

hipdnnPluginStatus_t hipdnnPluginGetName(const char** name)
{
    if(name == NULL)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "name is NULL");
    *name = "hipdnn_example_scaled_add";
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

hipdnnPluginStatus_t hipdnnPluginGetVersion(const char** version)
{
    if(version == NULL)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "version is NULL");
    *version = "1.0.0";
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

/* 1.1.0: this plugin exports hipdnnEnginePluginExecuteOpGraphWithOverrides. */
hipdnnPluginStatus_t hipdnnPluginGetApiVersion(const char** version)
{
    if(version == NULL)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "version is NULL");
    *version = "1.1.0";
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
    h = (struct HipdnnEnginePluginHandle*)calloc(1, sizeof *h);
    if(h == NULL)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_ALLOC_FAILED, "out of memory");
    h->magic = EXAMPLE_HANDLE_MAGIC;
    *handle = h;
    hipdnnPluginLog(HIPDNN_SEV_INFO, "created a plugin instance");
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

hipdnnPluginStatus_t hipdnnEnginePluginDestroy(hipdnnEnginePluginHandle_t handle)
{
    if(!valid_handle(handle))
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "invalid handle");
    handle->magic = 0;
    free(handle);
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

hipdnnPluginStatus_t hipdnnEnginePluginSetStream(hipdnnEnginePluginHandle_t handle, hipStream_t stream)
{
    if(!valid_handle(handle))
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "invalid handle");
    handle->stream = stream;
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

hipdnnPluginStatus_t hipdnnEnginePluginGetApplicableEngineIds(hipdnnEnginePluginHandle_t handle,
                                                              const hipdnnPluginConstData_t* op_graph,
                                                              int64_t* engine_ids, uint32_t max_engines,
                                                              uint32_t* num_engines)
{
    struct HipdnnEnginePluginExecutionContext plan;
    hipdnnPluginStatus_t st;
    if(!valid_handle(handle))
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "invalid handle");
    if(num_engines == NULL || (engine_ids == NULL && max_engines > 0))
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "bad engine id array arguments");
    st = plan_graph(op_graph, &plan);
    if(st == HIPDNN_PLUGIN_STATUS_NOT_APPLICABLE)
    {
        /* Not an error: answer "no engine applies" and say why in the log. */
        hipdnnPluginLog(HIPDNN_SEV_INFO, "not applicable: %s", hipdnnPluginLastError());
        hipdnnPluginClearError();
        return hipdnnPluginReturnEngineIds(NULL, 0, engine_ids, max_engines, num_engines);
    }
    if(st != HIPDNN_PLUGIN_STATUS_SUCCESS)
        return st;
    return hipdnnPluginReturnEngineIds(k_engine_ids, 1, engine_ids, max_engines, num_engines);
}

hipdnnPluginStatus_t hipdnnEnginePluginGetEngineDetails(hipdnnEnginePluginHandle_t handle, int64_t engine_id,
                                                        const hipdnnPluginConstData_t* op_graph,
                                                        hipdnnPluginConstData_t* engine_details)
{
    static const unsigned char no_details[1] = {0};
    (void)op_graph;
    if(!valid_handle(handle) || engine_details == NULL)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "invalid handle or engine_details");
    if(engine_id != EXAMPLE_ENGINE_ID)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "unknown engine id %lld", (long long)engine_id);
    /* Size 0: no knobs, no behaviour notes. */
    engine_details->ptr = no_details;
    engine_details->size = 0;
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

hipdnnPluginStatus_t hipdnnEnginePluginDestroyEngineDetails(hipdnnEnginePluginHandle_t handle,
                                                            hipdnnPluginConstData_t* engine_details)
{
    if(!valid_handle(handle) || engine_details == NULL)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "invalid handle or engine_details");
    engine_details->ptr = NULL;
    engine_details->size = 0;
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

/* Checks that engine_config names our engine. */
static hipdnnPluginStatus_t check_config(const hipdnnPluginConstData_t* engine_config)
{
    hipdnnEngineConfigReader_t cfg;
    if(engine_config == NULL)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "engine_config is NULL");
    if(hipdnnEngineConfigReaderOpen(&cfg, engine_config->ptr, engine_config->size) != HIPDNN_PLUGIN_STATUS_SUCCESS)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "unreadable engine config: %s",
                                    hipdnnEngineConfigReaderError(&cfg));
    if(cfg.engine_id != EXAMPLE_ENGINE_ID)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "engine config names engine %lld, not %lld",
                                    (long long)cfg.engine_id, (long long)EXAMPLE_ENGINE_ID);
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

hipdnnPluginStatus_t hipdnnEnginePluginGetWorkspaceSize(hipdnnEnginePluginHandle_t handle,
                                                        const hipdnnPluginConstData_t* engine_config,
                                                        const hipdnnPluginConstData_t* op_graph,
                                                        size_t* workspace_size)
{
    (void)op_graph;
    if(!valid_handle(handle) || workspace_size == NULL)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "invalid handle or workspace_size");
    *workspace_size = 0;
    return check_config(engine_config);
}

hipdnnPluginStatus_t hipdnnEnginePluginCreateExecutionContext(hipdnnEnginePluginHandle_t handle,
                                                              const hipdnnPluginConstData_t* engine_config,
                                                              const hipdnnPluginConstData_t* op_graph,
                                                              hipdnnEnginePluginExecutionContext_t* execution_context)
{
    struct HipdnnEnginePluginExecutionContext plan;
    hipdnnPluginStatus_t st;
    if(!valid_handle(handle) || execution_context == NULL)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "invalid handle or execution_context");
    *execution_context = NULL;
    st = check_config(engine_config);
    if(st == HIPDNN_PLUGIN_STATUS_SUCCESS)
        st = plan_graph(op_graph, &plan);
    if(st != HIPDNN_PLUGIN_STATUS_SUCCESS)
        return st; /* the last error says why */
    *execution_context =
        (struct HipdnnEnginePluginExecutionContext*)malloc(sizeof(struct HipdnnEnginePluginExecutionContext));
    if(*execution_context == NULL)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_ALLOC_FAILED, "out of memory");
    plan.magic = EXAMPLE_CONTEXT_MAGIC;
    **execution_context = plan;
    hipdnnPluginLog(HIPDNN_SEV_INFO, "execution context for %s, output rank %u", mode_name(plan.mode),
                    (unsigned)plan.out.rank);
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

hipdnnPluginStatus_t hipdnnEnginePluginDestroyExecutionContext(hipdnnEnginePluginHandle_t handle,
                                                               hipdnnEnginePluginExecutionContext_t execution_context)
{
    if(!valid_handle(handle) || !valid_context(execution_context))
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "invalid handle or execution context");
    execution_context->magic = 0;
    free(execution_context);
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

hipdnnPluginStatus_t hipdnnEnginePluginGetWorkspaceSizeFromExecutionContext(
    hipdnnEnginePluginHandle_t handle, hipdnnEnginePluginExecutionContext_t execution_context, size_t* workspace_size)
{
    if(!valid_handle(handle) || !valid_context(execution_context) || workspace_size == NULL)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "invalid argument");
    *workspace_size = 0;
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

hipdnnPluginStatus_t hipdnnEnginePluginExecuteOpGraph(hipdnnEnginePluginHandle_t handle,
                                                      hipdnnEnginePluginExecutionContext_t execution_context,
                                                      void* workspace, const hipdnnPluginDeviceBuffer_t* device_buffers,
                                                      uint32_t num_device_buffers)
{
    (void)workspace; /* none requested */
    return execute(handle, execution_context, device_buffers, num_device_buffers, 0, NULL, NULL, NULL, NULL);
}

hipdnnPluginStatus_t hipdnnEnginePluginExecuteOpGraphWithOverrides(
    hipdnnEnginePluginHandle_t handle, hipdnnEnginePluginExecutionContext_t execution_context, void* workspace,
    const hipdnnPluginDeviceBuffer_t* device_buffers, uint32_t num_device_buffers, uint32_t num_overrides,
    const int64_t* override_unique_ids, const uint32_t* override_lengths, const int64_t* const* override_shapes,
    const int64_t* const* override_strides)
{
    (void)workspace;
    return execute(handle, execution_context, device_buffers, num_device_buffers, num_overrides, override_unique_ids,
                   override_lengths, override_shapes, override_strides);
}
