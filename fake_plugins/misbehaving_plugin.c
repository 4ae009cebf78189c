/*
 * A zoo of misbehaving engine plugins for the loader tests (tests/loader/).
 *
 * One source, one shared library per misbehaviour: fake_plugins/CMakeLists.txt
 * compiles it with MB_NAME and one (or none) of the switches below. Without a
 * switch the library is a minimal, well-formed engine plugin that never finds
 * a graph applicable, so it never runs anything.
 *
 *   MB_NAME             string, required: what hipdnnPluginGetName returns
 *   MB_ENGINE_IDS       comma-separated engine ids (default 9900)
 *   MB_API_VERSION      string returned by hipdnnPluginGetApiVersion (default "1.1.0")
 *   MB_API_VERSION_NULL hipdnnPluginGetApiVersion succeeds but returns NULL
 *   MB_OMIT_EXECUTE     hipdnnEnginePluginExecuteOpGraph is not exported
 *   MB_ZERO_ENGINES     hipdnnEnginePluginGetAllEngineIds reports no engine
 *   MB_COUNT_CHANGES    hipdnnEnginePluginGetAllEngineIds reports one engine more
 *                       on every call after the first
 *   MB_CREATE_FAILS     hipdnnEnginePluginCreate fails (INTERNAL_ERROR, last error set)
 *   MB_CREATE_NULL      hipdnnEnginePluginCreate succeeds with a NULL handle
 *   MB_SHARED_HANDLE    hipdnnEnginePluginCreate hands out one fixed address, the
 *                       same in every library built with this switch, and
 *                       never dereferences it (a stand-in for plugins that share
 *                       one static object)
 *   MB_NAME_FAILS       hipdnnPluginGetName fails (INTERNAL_ERROR, last error set)
 *   MB_WRONG_TYPE       hipdnnPluginGetType reports HIPDNN_PLUGIN_TYPE_HEURISTIC
 *
 * Hostile strings (the adversarial zoo, tests/adversarial/test_plugin_zoo.py):
 *
 *   MB_API_VERSION_NEWLINE        API version "1.1.0\n"
 *   MB_API_VERSION_LEADING_SPACE  API version " 1.1.0"
 *   MB_API_VERSION_TRAILING_SPACE API version "1.1.0 "
 *   MB_API_VERSION_ARABIC_DIGITS  API version in ARABIC-INDIC digits (U+0661 U+0660)
 *   MB_NAME_HUGE                  hipdnnPluginGetName returns a 1 MiB name
 *   MB_NAME_ESCAPES               hipdnnPluginGetName returns MB_NAME "\x1b[31m\n"
 *   MB_VERSION_HUGE               hipdnnPluginGetVersion returns a 1 MiB string
 *   MB_HOSTILE_ERROR              with MB_CREATE_FAILS: the last error holds terminal escapes, a
 *                                 forged log line and 64 KiB of padding
 *   MB_HOSTILE_LOG                exports SetLoggingCallback/SetLogLevel; Create logs a message
 *                                 like MB_HOSTILE_ERROR's at ERROR (whole, past the SDK's 1 KiB bound)
 *   MB_ORIGIN_DEPENDENCY          Create calls into libhostile_origin_dep.so, which the library
 *                                 finds through RUNPATH $ORIGIN only (origin_dep.c)
 *   MB_IDS_OVERRUN                GetApplicableEngineIds writes two ids past the max_engines it is
 *                                 given (and reports max_engines): a write the host must notice
 *   MB_IDS_REPEATED               GetApplicableEngineIds reports its first engine twice
 *   MB_DETAILS_SIZE=<n>           GetApplicableEngineIds reports the first engine for every graph
 *                                 and GetEngineDetails answers an 8-byte buffer whose size it gives
 *                                 as <n> (SIZE_MAX, 16 GiB: a lie no host may read through);
 *                                 GetWorkspaceSize then answers 0 and nothing else is served
 *
 * Duplicate ids inside one plugin are MB_ENGINE_IDS=9501,9501; an id that
 * collides with another plugin is an MB_ENGINE_IDS naming that plugin's id.
 *
 * The last error and logging are PluginHelpers.h's, like any C plugin's; only
 * the hostile variants step outside it, where its bounds would blunt the test.
 */
#include <stdint.h>
#include <stdlib.h>

#include "hipdnn_plugin_sdk/EnginePluginApi.h"
#include "hipdnn_plugin_sdk/PluginHelpers.h"

#ifndef MB_NAME
#error "MB_NAME must be defined"
#endif
#ifndef MB_ENGINE_IDS
#define MB_ENGINE_IDS 9900
#endif
#if defined(MB_API_VERSION_NEWLINE)
#define MB_API_VERSION "1.1.0\n"
#elif defined(MB_API_VERSION_LEADING_SPACE)
#define MB_API_VERSION " 1.1.0"
#elif defined(MB_API_VERSION_TRAILING_SPACE)
#define MB_API_VERSION "1.1.0 "
#elif defined(MB_API_VERSION_ARABIC_DIGITS)
#define MB_API_VERSION "\xd9\xa1.\xd9\xa1.\xd9\xa0" /* U+0661 . U+0661 . U+0660: Python's \\d matches them */
#endif
#ifndef MB_API_VERSION
#define MB_API_VERSION "1.1.0"
#endif

/* Long enough to flood any log; a NUL ends it, so a host that reads it all still stops. */
#define MB_HUGE_BYTES ((size_t)1 << 20)
/* Terminal escapes (clear screen, red), a forged second log line, then padding past any bound. */
#define MB_HOSTILE_TEXT MB_NAME ": \x1b[2J\x1b[31mred\r\nCRITICAL forged line\x7f\x9b"
#define MB_HOSTILE_PADDING ((size_t)64 << 10)

#define MB_HANDLE_MAGIC UINT64_C(0x4d49534245484156) /* "MISBEHAV" */
#define MB_SHARED_ADDRESS ((uintptr_t)0x5eed0000u)

static const int64_t k_engine_ids[] = {MB_ENGINE_IDS};
#define MB_NUM_IDS ((uint32_t)(sizeof k_engine_ids / sizeof k_engine_ids[0]))

struct HipdnnEnginePluginHandle
{
    uint64_t magic;
};

#ifdef MB_ORIGIN_DEPENDENCY
int hostile_origin_dep_engine_id(void);
#endif

static unsigned g_engine_id_calls = 0;

HIPDNN_PLUGIN_DEFINE_ERROR_STATE();
#ifndef MB_HOSTILE_ERROR
HIPDNN_PLUGIN_DEFINE_LAST_ERROR_ENTRY();
#endif
#ifdef MB_HOSTILE_LOG
HIPDNN_PLUGIN_DEFINE_LOG_ENTRIES(); /* only this variant has the optional logging entries */
#endif

#if defined(MB_NAME_HUGE) || defined(MB_VERSION_HUGE) || defined(MB_HOSTILE_ERROR) || defined(MB_HOSTILE_LOG)
static char g_huge[MB_HUGE_BYTES + 1];

/* g_huge holds prefix, then 'x' up to `length` bytes in all, then a NUL. */
static const char* huge_string(const char* prefix, size_t length)
{
    size_t i = 0;
    for(; prefix[i] != '\0' && i < length; ++i)
        g_huge[i] = prefix[i];
    for(; i < length; ++i)
        g_huge[i] = 'x';
    g_huge[length] = '\0';
    return g_huge;
}
#endif

static hipdnnPluginStatus_t fail(hipdnnPluginStatus_t status, const char* message)
{
    return hipdnnPluginSetError(status, "%s: %s", MB_NAME, message);
}

/* ------------------------------------------------------------------------- */
/* PluginApi.h                                                               */
/* ------------------------------------------------------------------------- */

hipdnnPluginStatus_t hipdnnPluginGetName(const char** name)
{
    if(name == NULL)
        return fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "name is NULL");
#if defined(MB_NAME_FAILS)
    return fail(HIPDNN_PLUGIN_STATUS_INTERNAL_ERROR, "name table not initialised");
#elif defined(MB_NAME_HUGE)
    *name = huge_string(MB_NAME, MB_HUGE_BYTES);
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
#elif defined(MB_NAME_ESCAPES)
    *name = MB_NAME "\x1b[31m\n";
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
#else
    *name = MB_NAME;
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
#endif
}

hipdnnPluginStatus_t hipdnnPluginGetVersion(const char** version)
{
    if(version == NULL)
        return fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "version is NULL");
#ifdef MB_VERSION_HUGE
    *version = huge_string("0.0.1-", MB_HUGE_BYTES);
#else
    *version = "0.0.1";
#endif
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

hipdnnPluginStatus_t hipdnnPluginGetApiVersion(const char** version)
{
    if(version == NULL)
        return fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "version is NULL");
#ifdef MB_API_VERSION_NULL
    *version = NULL;
#else
    *version = MB_API_VERSION;
#endif
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

hipdnnPluginStatus_t hipdnnPluginGetType(hipdnnPluginType_t* type)
{
    if(type == NULL)
        return fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "type is NULL");
#ifdef MB_WRONG_TYPE
    *type = HIPDNN_PLUGIN_TYPE_HEURISTIC;
#else
    *type = HIPDNN_PLUGIN_TYPE_ENGINE;
#endif
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

#ifdef MB_HOSTILE_ERROR
/* Its own entry: the hostile text (64 KiB) stands wherever the helpers' bounded
 * buffer holds "", which a failing Create leaves it as. */
void hipdnnPluginGetLastErrorString(const char** error_str)
{
    if(error_str == NULL)
        return;
    *error_str = hipdnnPluginLastError()[0] == '\0' ? huge_string(MB_HOSTILE_TEXT, MB_HOSTILE_PADDING)
                                                     : hipdnnPluginLastError();
}
#endif

/* ------------------------------------------------------------------------- */
/* EnginePluginApi.h                                                         */
/* ------------------------------------------------------------------------- */

hipdnnPluginStatus_t
    hipdnnEnginePluginGetAllEngineIds(int64_t* engine_ids, uint32_t max_engines, uint32_t* num_engines)
{
    uint32_t count = MB_NUM_IDS;
#ifdef MB_ZERO_ENGINES
    count = 0;
#endif
#ifdef MB_COUNT_CHANGES
    count += g_engine_id_calls;
#endif
    /* the SDK's convention over the ids there are; MB_COUNT_CHANGES then claims more */
    if(hipdnnPluginReturnEngineIds(
           k_engine_ids, count < MB_NUM_IDS ? count : MB_NUM_IDS, engine_ids, max_engines, num_engines)
       != HIPDNN_PLUGIN_STATUS_SUCCESS)
        return fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, num_engines == NULL ? "num_engines is NULL" : "engine_ids is NULL");
    ++g_engine_id_calls;
    *num_engines = count;
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

hipdnnPluginStatus_t hipdnnEnginePluginCreate(hipdnnEnginePluginHandle_t* handle)
{
    if(handle == NULL)
        return fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "handle is NULL");
#ifdef MB_HOSTILE_LOG
    if(hipdnnPluginLogEnabled(HIPDNN_SEV_ERROR)) /* LogText: hipdnnPluginLog would cut it at 1 KiB */
        hipdnnPluginLogText(HIPDNN_SEV_ERROR, huge_string(MB_HOSTILE_TEXT, MB_HOSTILE_PADDING));
#endif
#ifdef MB_ORIGIN_DEPENDENCY
    if(hostile_origin_dep_engine_id() != k_engine_ids[0])
        return fail(HIPDNN_PLUGIN_STATUS_INTERNAL_ERROR, "wrong dependency");
#endif
#if defined(MB_CREATE_FAILS) && defined(MB_HOSTILE_ERROR)
    hipdnnPluginClearError(); /* the last error is the hostile text */
    return HIPDNN_PLUGIN_STATUS_INTERNAL_ERROR;
#elif defined(MB_CREATE_FAILS)
    return fail(HIPDNN_PLUGIN_STATUS_INTERNAL_ERROR, "no device matches this engine (simulated)");
#elif defined(MB_CREATE_NULL)
    *handle = NULL;
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
#elif defined(MB_SHARED_HANDLE)
    *handle = (hipdnnEnginePluginHandle_t)MB_SHARED_ADDRESS;
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
#else
    {
        struct HipdnnEnginePluginHandle* h = (struct HipdnnEnginePluginHandle*)calloc(1, sizeof *h);
        if(h == NULL)
            return fail(HIPDNN_PLUGIN_STATUS_ALLOC_FAILED, "out of memory");
        h->magic = MB_HANDLE_MAGIC;
        *handle = h;
        return HIPDNN_PLUGIN_STATUS_SUCCESS;
    }
#endif
}

hipdnnPluginStatus_t hipdnnEnginePluginDestroy(hipdnnEnginePluginHandle_t handle)
{
    if(handle == NULL)
        return fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "handle is NULL");
#ifdef MB_SHARED_HANDLE
    if((uintptr_t)handle != MB_SHARED_ADDRESS)
        return fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "not a handle of this plugin");
#else
    if(handle->magic != MB_HANDLE_MAGIC)
        return fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "not a handle of this plugin");
    handle->magic = 0;
    free(handle);
#endif
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

hipdnnPluginStatus_t hipdnnEnginePluginSetStream(hipdnnEnginePluginHandle_t handle, hipStream_t stream)
{
    (void)stream;
    return handle == NULL ? fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "handle is NULL")
                          : HIPDNN_PLUGIN_STATUS_SUCCESS;
}

hipdnnPluginStatus_t hipdnnEnginePluginGetApplicableEngineIds(hipdnnEnginePluginHandle_t handle,
                                                              const hipdnnPluginConstData_t* op_graph,
                                                              int64_t* engine_ids,
                                                              uint32_t max_engines,
                                                              uint32_t* num_engines)
{
    (void)op_graph;
    if(handle == NULL || num_engines == NULL)
        return fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "handle or num_engines is NULL");
#if defined(MB_IDS_OVERRUN)
    /* max_engines + 2 entries: past the caller's array (the host's guard slots take them) */
    if(engine_ids == NULL)
        return fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "engine_ids is NULL");
    for(uint32_t i = 0; i < max_engines + 2u; ++i)
        engine_ids[i] = k_engine_ids[0];
    *num_engines = max_engines;
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
#elif defined(MB_IDS_REPEATED)
    if(engine_ids == NULL || max_engines < 2u)
        return fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "engine_ids is NULL or too short");
    engine_ids[0] = engine_ids[1] = k_engine_ids[0];
    *num_engines = 2u;
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
#elif defined(MB_DETAILS_SIZE)
    /* applicable, so that the host asks for the (lying) engine details */
    return hipdnnPluginReturnEngineIds(k_engine_ids, 1u, engine_ids, max_engines, num_engines);
#else
    (void)engine_ids;
    (void)max_engines;
    *num_engines = 0; /* never applicable: the zoo serves nothing */
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
#endif
}

hipdnnPluginStatus_t hipdnnEnginePluginGetEngineDetails(hipdnnEnginePluginHandle_t handle,
                                                        int64_t engine_id,
                                                        const hipdnnPluginConstData_t* op_graph,
                                                        hipdnnPluginConstData_t* engine_details)
{
    (void)handle;
    (void)engine_id;
    (void)op_graph;
#ifdef MB_DETAILS_SIZE
    {
        static const unsigned char k_details[8] = {0};
        if(engine_details == NULL)
            return fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "engine_details is NULL");
        engine_details->ptr = k_details;
        engine_details->size = (size_t)(MB_DETAILS_SIZE); /* a lie: the buffer holds 8 bytes */
        return HIPDNN_PLUGIN_STATUS_SUCCESS;
    }
#else
    (void)engine_details;
    return fail(HIPDNN_PLUGIN_STATUS_NOT_APPLICABLE, "no engine here applies to anything");
#endif
}

hipdnnPluginStatus_t hipdnnEnginePluginDestroyEngineDetails(hipdnnEnginePluginHandle_t handle,
                                                            hipdnnPluginConstData_t* engine_details)
{
    (void)handle;
    (void)engine_details;
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

hipdnnPluginStatus_t hipdnnEnginePluginGetWorkspaceSize(hipdnnEnginePluginHandle_t handle,
                                                        const hipdnnPluginConstData_t* engine_config,
                                                        const hipdnnPluginConstData_t* op_graph,
                                                        size_t* workspace_size)
{
    (void)handle;
    (void)engine_config;
    (void)op_graph;
#ifdef MB_DETAILS_SIZE
    if(workspace_size == NULL)
        return fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "workspace_size is NULL");
    *workspace_size = 0;
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
#else
    (void)workspace_size;
    return fail(HIPDNN_PLUGIN_STATUS_NOT_APPLICABLE, "no engine here applies to anything");
#endif
}

hipdnnPluginStatus_t
    hipdnnEnginePluginCreateExecutionContext(hipdnnEnginePluginHandle_t handle,
                                             const hipdnnPluginConstData_t* engine_config,
                                             const hipdnnPluginConstData_t* op_graph,
                                             hipdnnEnginePluginExecutionContext_t* execution_context)
{
    (void)handle;
    (void)engine_config;
    (void)op_graph;
    (void)execution_context;
    return fail(HIPDNN_PLUGIN_STATUS_NOT_APPLICABLE, "no engine here applies to anything");
}

hipdnnPluginStatus_t
    hipdnnEnginePluginDestroyExecutionContext(hipdnnEnginePluginHandle_t handle,
                                              hipdnnEnginePluginExecutionContext_t execution_context)
{
    (void)handle;
    (void)execution_context;
    return fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "this plugin never creates execution contexts");
}

hipdnnPluginStatus_t hipdnnEnginePluginGetWorkspaceSizeFromExecutionContext(
    hipdnnEnginePluginHandle_t handle,
    hipdnnEnginePluginExecutionContext_t execution_context,
    size_t* workspace_size)
{
    (void)handle;
    (void)execution_context;
    (void)workspace_size;
    return fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "this plugin never creates execution contexts");
}

#ifndef MB_OMIT_EXECUTE
hipdnnPluginStatus_t hipdnnEnginePluginExecuteOpGraph(hipdnnEnginePluginHandle_t handle,
                                                      hipdnnEnginePluginExecutionContext_t execution_context,
                                                      void* workspace,
                                                      const hipdnnPluginDeviceBuffer_t* device_buffers,
                                                      uint32_t num_device_buffers)
{
    (void)handle;
    (void)execution_context;
    (void)workspace;
    (void)device_buffers;
    (void)num_device_buffers;
    return fail(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "this plugin never creates execution contexts");
}
#endif
