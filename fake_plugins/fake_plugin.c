/*
 * A fake hipdnn engine plugin for the test suite.
 *
 * One source, several shared libraries: fake_plugins/CMakeLists.txt compiles it
 * once per variant with these definitions:
 *
 *   FAKE_PLUGIN_NAME          string, required: hipdnnPluginGetName
 *   FAKE_PLUGIN_VERSION       string, optional: hipdnnPluginGetVersion ("0.1.0")
 *   FAKE_PLUGIN_ENGINE_ID     integer, required: the plugin's only engine
 *   FAKE_PLUGIN_API_VERSION   string, optional: when defined the library exports
 *                             hipdnnPluginGetApiVersion returning it; when not
 *                             defined the symbol is absent
 *   FAKE_PLUGIN_WITH_OVERRIDES  when defined the library exports
 *                             hipdnnEnginePluginExecuteOpGraphWithOverrides
 *
 * Behaviour is that of a well-formed plugin that never touches memory it is
 * given: it validates parameters, keeps handles and execution contexts on the
 * heap (checked on every use against a live list and a magic number) and
 * records the calls that carry a payload into an in-memory log read back
 * through the hooks of fake_plugin_hooks.h. Its last error and logging entries
 * are the SDK's (PluginHelpers.h), as a real C plugin's would be.
 */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hipdnn_plugin_sdk/EnginePluginApi.h"
#include "hipdnn_plugin_sdk/PluginHelpers.h"
#include "fake_plugin_hooks.h"

#ifndef FAKE_PLUGIN_NAME
#error "FAKE_PLUGIN_NAME must be defined"
#endif
#ifndef FAKE_PLUGIN_ENGINE_ID
#error "FAKE_PLUGIN_ENGINE_ID must be defined"
#endif
#ifndef FAKE_PLUGIN_VERSION
#define FAKE_PLUGIN_VERSION "0.1.0"
#endif

#define FAKE_HANDLE_MAGIC UINT64_C(0x46414b4548414e44)  /* "FAKEHAND" */
#define FAKE_CONTEXT_MAGIC UINT64_C(0x46414b45434f4e54) /* "FAKECONT" */
#define FAKE_DEAD_MAGIC UINT64_C(0xdeaddeaddeaddead)

static const int64_t k_engine_id = (int64_t)(FAKE_PLUGIN_ENGINE_ID);
static const unsigned char k_empty_details[1] = {0};

/* ------------------------------------------------------------------------- */
/* Objects                                                                   */
/* ------------------------------------------------------------------------- */

struct HipdnnEnginePluginHandle
{
    uint64_t magic;
    uint64_t id;
    hipStream_t stream;
    struct HipdnnEnginePluginHandle* next;
};

struct HipdnnEnginePluginExecutionContext
{
    uint64_t magic;
    uint64_t id;
    struct HipdnnEnginePluginHandle* owner;
    uint64_t workspace_size;
    struct HipdnnEnginePluginExecutionContext* next;
};

/* ------------------------------------------------------------------------- */
/* Call records                                                              */
/* ------------------------------------------------------------------------- */

enum
{
    F_HANDLE = 1u << 0,
    F_CONTEXT = 1u << 1,
    F_STREAM = 1u << 2,
    F_GRAPH = 1u << 3,
    F_CONFIG = 1u << 4,
    F_ENGINES = 1u << 5,
    F_LEAKED = 1u << 6,
    F_EXEC = 1u << 7,
    F_OVERRIDES = 1u << 8
};

typedef struct
{
    const char* entry;
    int status;
    unsigned fields;
    uint64_t handle_id;
    uint64_t context_id;
    uintptr_t stream;
    uint64_t graph_size;
    uint64_t graph_hash;
    uint64_t config_size;
    uint64_t config_hash;
    uint32_t max_engines;
    uint32_t num_engines;
    uint64_t leaked_contexts;
    uintptr_t workspace;
    uint32_t num_buffers;
    int64_t* buffer_uids;
    uintptr_t* buffer_ptrs;
    uint32_t num_overrides;
    int64_t* override_uids;
    uint32_t* override_lengths;
    int64_t* override_shapes;  /* flattened, sum(override_lengths) values */
    int64_t* override_strides; /* flattened, sum(override_lengths) values */
} fake_record_t;

/* ------------------------------------------------------------------------- */
/* Global state, all under g_mutex                                           */
/* ------------------------------------------------------------------------- */

static pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;

static fake_record_t* g_log = NULL;
static size_t g_log_len = 0;
static size_t g_log_cap = 0;
static uint64_t g_log_dropped = 0; /* records lost to allocation failure */
static char* g_log_json = NULL;

static struct HipdnnEnginePluginHandle* g_handles = NULL;
static struct HipdnnEnginePluginExecutionContext* g_contexts = NULL;
static uint64_t g_next_handle_id = 1;
static uint64_t g_next_context_id = 1;

static int g_applicable = 1;
static int g_fail_status = 0;
static char* g_fail_message = NULL;
static uint64_t g_workspace_size = 0;
static unsigned char* g_details = NULL; /* EngineDetails bytes GetEngineDetails returns (NULL: empty) */
static size_t g_details_size = 0;

static void lock(void)
{
    (void)pthread_mutex_lock(&g_mutex);
}

static void unlock(void)
{
    (void)pthread_mutex_unlock(&g_mutex);
}

/* ------------------------------------------------------------------------- */
/* Helpers                                                                   */
/* ------------------------------------------------------------------------- */

static char* copy_string(const char* s)
{
    size_t n;
    char* out;
    if(s == NULL)
        s = "";
    n = strlen(s) + 1;
    out = (char*)malloc(n);
    if(out != NULL)
        memcpy(out, s, n);
    return out;
}

static uint64_t fnv1a64(const void* data, size_t size)
{
    const unsigned char* p = (const unsigned char*)data;
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    size_t i;
    for(i = 0; i < size; ++i)
    {
        h ^= (uint64_t)p[i];
        h *= UINT64_C(0x100000001b3);
    }
    return h;
}

HIPDNN_PLUGIN_DEFINE_ERROR_AND_LOG_ENTRIES();

static struct HipdnnEnginePluginHandle* find_handle_locked(hipdnnEnginePluginHandle_t handle)
{
    struct HipdnnEnginePluginHandle* h;
    if(handle == NULL)
        return NULL;
    for(h = g_handles; h != NULL; h = h->next)
        if(h == handle)
            return h->magic == FAKE_HANDLE_MAGIC ? h : NULL;
    return NULL;
}

static struct HipdnnEnginePluginExecutionContext*
    find_context_locked(hipdnnEnginePluginExecutionContext_t ctx)
{
    struct HipdnnEnginePluginExecutionContext* c;
    if(ctx == NULL)
        return NULL;
    for(c = g_contexts; c != NULL; c = c->next)
        if(c == ctx)
            return c->magic == FAKE_CONTEXT_MAGIC ? c : NULL;
    return NULL;
}

static void unlink_context_locked(struct HipdnnEnginePluginExecutionContext* ctx)
{
    struct HipdnnEnginePluginExecutionContext** link = &g_contexts;
    while(*link != NULL)
    {
        if(*link == ctx)
        {
            *link = ctx->next;
            return;
        }
        link = &(*link)->next;
    }
}

static void unlink_handle_locked(struct HipdnnEnginePluginHandle* h)
{
    struct HipdnnEnginePluginHandle** link = &g_handles;
    while(*link != NULL)
    {
        if(*link == h)
        {
            *link = h->next;
            return;
        }
        link = &(*link)->next;
    }
}

static void free_record(fake_record_t* r)
{
    free(r->buffer_uids);
    free(r->buffer_ptrs);
    free(r->override_uids);
    free(r->override_lengths);
    free(r->override_shapes);
    free(r->override_strides);
    memset(r, 0, sizeof *r);
}

static void clear_log_locked(void)
{
    size_t i;
    for(i = 0; i < g_log_len; ++i)
        free_record(&g_log[i]);
    free(g_log);
    g_log = NULL;
    g_log_len = 0;
    g_log_cap = 0;
    g_log_dropped = 0;
    free(g_log_json);
    g_log_json = NULL;
}

/* Makes room for one more record so that append_record_locked cannot fail. */
static int reserve_record_locked(void)
{
    if(g_log_len < g_log_cap)
        return 1;
    {
        size_t cap = g_log_cap == 0 ? 64 : g_log_cap * 2;
        fake_record_t* grown;
        if(cap > ((size_t)-1) / sizeof(fake_record_t))
            return 0;
        grown = (fake_record_t*)realloc(g_log, cap * sizeof(fake_record_t));
        if(grown == NULL)
            return 0;
        g_log = grown;
        g_log_cap = cap;
    }
    return 1;
}

/* Takes ownership of r's arrays. Room must have been reserved. */
static void append_record_locked(fake_record_t* r)
{
    g_log[g_log_len++] = *r;
    memset(r, 0, sizeof *r);
}

static void init_record(fake_record_t* r, const char* entry)
{
    memset(r, 0, sizeof *r);
    r->entry = entry;
}

/* Checks a const data parameter that must hold at least one byte. */
static int valid_data(const hipdnnPluginConstData_t* d)
{
    return d != NULL && d->ptr != NULL && d->size > 0;
}

/* ------------------------------------------------------------------------- */
/* PluginApi.h                                                               */
/* ------------------------------------------------------------------------- */

hipdnnPluginStatus_t hipdnnPluginGetName(const char** name)
{
    if(name == NULL)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "hipdnnPluginGetName: name is NULL");
    *name = FAKE_PLUGIN_NAME;
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

hipdnnPluginStatus_t hipdnnPluginGetVersion(const char** version)
{
    if(version == NULL)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "hipdnnPluginGetVersion: version is NULL");
    *version = FAKE_PLUGIN_VERSION;
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

#ifdef FAKE_PLUGIN_API_VERSION
hipdnnPluginStatus_t hipdnnPluginGetApiVersion(const char** version)
{
    if(version == NULL)
        return hipdnnPluginSetError(
            HIPDNN_PLUGIN_STATUS_BAD_PARAM, "hipdnnPluginGetApiVersion: version is NULL");
    *version = FAKE_PLUGIN_API_VERSION;
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}
#endif

hipdnnPluginStatus_t hipdnnPluginGetType(hipdnnPluginType_t* type)
{
    if(type == NULL)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "hipdnnPluginGetType: type is NULL");
    *type = HIPDNN_PLUGIN_TYPE_ENGINE;
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

/* ------------------------------------------------------------------------- */
/* EnginePluginApi.h                                                         */
/* ------------------------------------------------------------------------- */

/* Why the SDK's count convention refused its arguments (it checks nothing else). */
static const char* bad_engine_id_args(const uint32_t* num_engines)
{
    return num_engines == NULL ? "num_engines is NULL" : "engine_ids is NULL but max_engines > 0";
}

hipdnnPluginStatus_t
    hipdnnEnginePluginGetAllEngineIds(int64_t* engine_ids, uint32_t max_engines, uint32_t* num_engines)
{
    if(hipdnnPluginReturnEngineIds(&k_engine_id, 1u, engine_ids, max_engines, num_engines)
       != HIPDNN_PLUGIN_STATUS_SUCCESS)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM,
                                    "hipdnnEnginePluginGetAllEngineIds: %s",
                                    bad_engine_id_args(num_engines));
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

static hipdnnPluginStatus_t out_of_memory(const char* entry)
{
    return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_ALLOC_FAILED, "%s: out of memory", entry);
}

hipdnnPluginStatus_t hipdnnEnginePluginCreate(hipdnnEnginePluginHandle_t* handle)
{
    static const char* const entry = "hipdnnEnginePluginCreate";
    fake_record_t r;
    struct HipdnnEnginePluginHandle* h = NULL;
    hipdnnPluginStatus_t status = HIPDNN_PLUGIN_STATUS_SUCCESS;
    uint64_t id = 0;

    init_record(&r, "Create");
    lock();
    if(!reserve_record_locked())
    {
        ++g_log_dropped;
        unlock();
        return out_of_memory(entry);
    }
    if(handle == NULL)
    {
        status = HIPDNN_PLUGIN_STATUS_BAD_PARAM;
    }
    else
    {
        h = (struct HipdnnEnginePluginHandle*)calloc(1, sizeof *h);
        if(h == NULL)
        {
            status = HIPDNN_PLUGIN_STATUS_ALLOC_FAILED;
        }
        else
        {
            h->magic = FAKE_HANDLE_MAGIC;
            h->id = id = g_next_handle_id++;
            h->stream = NULL;
            h->next = g_handles;
            g_handles = h;
            *handle = h;
            r.fields |= F_HANDLE;
            r.handle_id = id;
        }
    }
    r.status = (int)status;
    append_record_locked(&r);
    unlock();

    if(status == HIPDNN_PLUGIN_STATUS_BAD_PARAM)
        (void)hipdnnPluginSetError(status, "%s: handle is NULL", entry);
    else if(status == HIPDNN_PLUGIN_STATUS_ALLOC_FAILED)
        return out_of_memory(entry);
    else
        hipdnnPluginLog(HIPDNN_SEV_INFO, "%s: created handle %" PRIu64, FAKE_PLUGIN_NAME, id);
    return status;
}

hipdnnPluginStatus_t hipdnnEnginePluginDestroy(hipdnnEnginePluginHandle_t handle)
{
    static const char* const entry = "hipdnnEnginePluginDestroy";
    fake_record_t r;
    struct HipdnnEnginePluginHandle* h;
    hipdnnPluginStatus_t status = HIPDNN_PLUGIN_STATUS_SUCCESS;
    uint64_t leaked = 0;
    uint64_t id = 0;

    init_record(&r, "Destroy");
    lock();
    if(!reserve_record_locked())
    {
        ++g_log_dropped;
        unlock();
        return out_of_memory(entry);
    }
    h = find_handle_locked(handle);
    if(h == NULL)
    {
        status = HIPDNN_PLUGIN_STATUS_BAD_PARAM;
    }
    else
    {
        struct HipdnnEnginePluginExecutionContext** link = &g_contexts;
        /* A well-behaved host destroys its contexts first; free any it left. */
        while(*link != NULL)
        {
            struct HipdnnEnginePluginExecutionContext* c = *link;
            if(c->owner == h)
            {
                *link = c->next;
                c->magic = FAKE_DEAD_MAGIC;
                free(c);
                ++leaked;
            }
            else
            {
                link = &c->next;
            }
        }
        id = h->id;
        unlink_handle_locked(h);
        h->magic = FAKE_DEAD_MAGIC;
        free(h);
        r.fields |= F_HANDLE | F_LEAKED;
        r.handle_id = id;
        r.leaked_contexts = leaked;
    }
    r.status = (int)status;
    append_record_locked(&r);
    unlock();

    if(status != HIPDNN_PLUGIN_STATUS_SUCCESS)
        return hipdnnPluginSetError(status, "%s: invalid handle", entry);
    if(leaked > 0)
        hipdnnPluginLog(HIPDNN_SEV_WARN,
                 "%s: handle %" PRIu64 " destroyed with %" PRIu64 " live execution contexts",
                 FAKE_PLUGIN_NAME,
                 id,
                 leaked);
    hipdnnPluginLog(HIPDNN_SEV_INFO, "%s: destroyed handle %" PRIu64, FAKE_PLUGIN_NAME, id);
    return status;
}

hipdnnPluginStatus_t hipdnnEnginePluginSetStream(hipdnnEnginePluginHandle_t handle, hipStream_t stream)
{
    static const char* const entry = "hipdnnEnginePluginSetStream";
    fake_record_t r;
    struct HipdnnEnginePluginHandle* h;
    hipdnnPluginStatus_t status = HIPDNN_PLUGIN_STATUS_SUCCESS;

    init_record(&r, "SetStream");
    lock();
    if(!reserve_record_locked())
    {
        ++g_log_dropped;
        unlock();
        return out_of_memory(entry);
    }
    h = find_handle_locked(handle);
    if(h == NULL)
    {
        status = HIPDNN_PLUGIN_STATUS_BAD_PARAM;
    }
    else
    {
        h->stream = stream;
        r.fields |= F_HANDLE | F_STREAM;
        r.handle_id = h->id;
        r.stream = (uintptr_t)(void*)stream;
    }
    r.status = (int)status;
    append_record_locked(&r);
    unlock();

    if(status != HIPDNN_PLUGIN_STATUS_SUCCESS)
        (void)hipdnnPluginSetError(status, "%s: invalid handle", entry);
    return status;
}

hipdnnPluginStatus_t hipdnnEnginePluginGetApplicableEngineIds(hipdnnEnginePluginHandle_t handle,
                                                              const hipdnnPluginConstData_t* op_graph,
                                                              int64_t* engine_ids,
                                                              uint32_t max_engines,
                                                              uint32_t* num_engines)
{
    static const char* const entry = "hipdnnEnginePluginGetApplicableEngineIds";
    fake_record_t r;
    struct HipdnnEnginePluginHandle* h;
    hipdnnPluginStatus_t status = HIPDNN_PLUGIN_STATUS_SUCCESS;
    const char* why = NULL;

    init_record(&r, "GetApplicableEngineIds");
    lock();
    if(!reserve_record_locked())
    {
        ++g_log_dropped;
        unlock();
        return out_of_memory(entry);
    }
    h = find_handle_locked(handle);
    if(h == NULL)
    {
        why = "invalid handle";
    }
    else
    {
        r.fields |= F_HANDLE;
        r.handle_id = h->id;
        if(!valid_data(op_graph))
        {
            why = "op_graph is NULL or empty";
        }
        else
        {
            r.fields |= F_GRAPH;
            r.graph_size = (uint64_t)op_graph->size;
            r.graph_hash = fnv1a64(op_graph->ptr, op_graph->size);
            if(hipdnnPluginReturnEngineIds(
                   &k_engine_id, g_applicable ? 1u : 0u, engine_ids, max_engines, num_engines)
               != HIPDNN_PLUGIN_STATUS_SUCCESS)
                why = bad_engine_id_args(num_engines);
            else
            {
                r.fields |= F_ENGINES;
                r.max_engines = max_engines;
                r.num_engines = *num_engines;
            }
        }
    }
    if(why != NULL)
        status = HIPDNN_PLUGIN_STATUS_BAD_PARAM;
    r.status = (int)status;
    append_record_locked(&r);
    unlock();

    if(why != NULL)
        (void)hipdnnPluginSetError(status, "%s: %s", entry, why);
    return status;
}

hipdnnPluginStatus_t hipdnnEnginePluginGetEngineDetails(hipdnnEnginePluginHandle_t handle,
                                                        int64_t engine_id,
                                                        const hipdnnPluginConstData_t* op_graph,
                                                        hipdnnPluginConstData_t* engine_details)
{
    static const char* const entry = "hipdnnEnginePluginGetEngineDetails";
    const char* why = NULL;

    lock();
    if(find_handle_locked(handle) == NULL)
        why = "invalid handle";
    unlock();
    if(why == NULL && engine_id != k_engine_id)
        return hipdnnPluginSetError(
            HIPDNN_PLUGIN_STATUS_BAD_PARAM, "%s: unknown engine id %" PRId64, entry, engine_id);
    if(why == NULL && !valid_data(op_graph))
        why = "op_graph is NULL or empty";
    if(why == NULL && engine_details == NULL)
        why = "engine_details is NULL";
    if(why != NULL)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "%s: %s", entry, why);
    /* By default no knobs, no notes: an empty EngineDetails. With fakePluginSetEngineDetails, a
     * heap copy of the bytes set (freed by DestroyEngineDetails), so the test may change them. */
    engine_details->ptr = k_empty_details;
    engine_details->size = 0;
    lock();
    if(g_details != NULL)
    {
        unsigned char* copy = (unsigned char*)malloc(g_details_size);
        if(copy != NULL)
        {
            memcpy(copy, g_details, g_details_size);
            engine_details->ptr = copy;
            engine_details->size = g_details_size;
        }
    }
    unlock();
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

hipdnnPluginStatus_t hipdnnEnginePluginDestroyEngineDetails(hipdnnEnginePluginHandle_t handle,
                                                            hipdnnPluginConstData_t* engine_details)
{
    static const char* const entry = "hipdnnEnginePluginDestroyEngineDetails";
    const char* why = NULL;

    lock();
    if(find_handle_locked(handle) == NULL)
        why = "invalid handle";
    unlock();
    if(why == NULL && engine_details == NULL)
        why = "engine_details is NULL";
    if(why != NULL)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "%s: %s", entry, why);
    if(engine_details->ptr != NULL && engine_details->ptr != k_empty_details)
        free((void*)engine_details->ptr);
    engine_details->ptr = NULL;
    engine_details->size = 0;
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

hipdnnPluginStatus_t hipdnnEnginePluginGetWorkspaceSize(hipdnnEnginePluginHandle_t handle,
                                                        const hipdnnPluginConstData_t* engine_config,
                                                        const hipdnnPluginConstData_t* op_graph,
                                                        size_t* workspace_size)
{
    static const char* const entry = "hipdnnEnginePluginGetWorkspaceSize";
    const char* why = NULL;
    uint64_t bytes = 0;

    lock();
    if(find_handle_locked(handle) == NULL)
        why = "invalid handle";
    bytes = g_workspace_size;
    unlock();
    if(why == NULL && !valid_data(engine_config))
        why = "engine_config is NULL or empty";
    if(why == NULL && !valid_data(op_graph))
        why = "op_graph is NULL or empty";
    if(why == NULL && workspace_size == NULL)
        why = "workspace_size is NULL";
    if(why != NULL)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "%s: %s", entry, why);
    *workspace_size = (size_t)bytes;
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

hipdnnPluginStatus_t
    hipdnnEnginePluginCreateExecutionContext(hipdnnEnginePluginHandle_t handle,
                                             const hipdnnPluginConstData_t* engine_config,
                                             const hipdnnPluginConstData_t* op_graph,
                                             hipdnnEnginePluginExecutionContext_t* execution_context)
{
    static const char* const entry = "hipdnnEnginePluginCreateExecutionContext";
    fake_record_t r;
    struct HipdnnEnginePluginHandle* h;
    hipdnnPluginStatus_t status = HIPDNN_PLUGIN_STATUS_SUCCESS;
    const char* why = NULL;

    init_record(&r, "CreateExecutionContext");
    lock();
    if(!reserve_record_locked())
    {
        ++g_log_dropped;
        unlock();
        return out_of_memory(entry);
    }
    h = find_handle_locked(handle);
    if(h == NULL)
    {
        why = "invalid handle";
    }
    else
    {
        r.fields |= F_HANDLE;
        r.handle_id = h->id;
        if(valid_data(engine_config))
        {
            r.fields |= F_CONFIG;
            r.config_size = (uint64_t)engine_config->size;
            r.config_hash = fnv1a64(engine_config->ptr, engine_config->size);
        }
        if(valid_data(op_graph))
        {
            r.fields |= F_GRAPH;
            r.graph_size = (uint64_t)op_graph->size;
            r.graph_hash = fnv1a64(op_graph->ptr, op_graph->size);
        }
        if(!(r.fields & F_CONFIG))
            why = "engine_config is NULL or empty";
        else if(!(r.fields & F_GRAPH))
            why = "op_graph is NULL or empty";
        else if(execution_context == NULL)
            why = "execution_context is NULL";
        else
        {
            struct HipdnnEnginePluginExecutionContext* c
                = (struct HipdnnEnginePluginExecutionContext*)calloc(1, sizeof *c);
            if(c == NULL)
            {
                status = HIPDNN_PLUGIN_STATUS_ALLOC_FAILED;
            }
            else
            {
                c->magic = FAKE_CONTEXT_MAGIC;
                c->id = g_next_context_id++;
                c->owner = h;
                c->workspace_size = g_workspace_size;
                c->next = g_contexts;
                g_contexts = c;
                *execution_context = c;
                r.fields |= F_CONTEXT;
                r.context_id = c->id;
            }
        }
    }
    if(why != NULL)
        status = HIPDNN_PLUGIN_STATUS_BAD_PARAM;
    r.status = (int)status;
    append_record_locked(&r);
    unlock();

    if(why != NULL)
        (void)hipdnnPluginSetError(status, "%s: %s", entry, why);
    else if(status == HIPDNN_PLUGIN_STATUS_ALLOC_FAILED)
        return out_of_memory(entry);
    return status;
}

/* Looks up a context and checks it belongs to handle. Returns NULL and sets *why
 * when it does not. On success fills the record's handle and context ids. */
static struct HipdnnEnginePluginExecutionContext*
    checked_context_locked(hipdnnEnginePluginHandle_t handle,
                           hipdnnEnginePluginExecutionContext_t ctx,
                           fake_record_t* r,
                           const char** why)
{
    struct HipdnnEnginePluginHandle* h = find_handle_locked(handle);
    struct HipdnnEnginePluginExecutionContext* c;
    if(h == NULL)
    {
        *why = "invalid handle";
        return NULL;
    }
    r->fields |= F_HANDLE;
    r->handle_id = h->id;
    c = find_context_locked(ctx);
    if(c == NULL)
    {
        *why = "invalid execution context";
        return NULL;
    }
    if(c->owner != h)
    {
        *why = "execution context belongs to another handle";
        return NULL;
    }
    r->fields |= F_CONTEXT;
    r->context_id = c->id;
    return c;
}

hipdnnPluginStatus_t
    hipdnnEnginePluginDestroyExecutionContext(hipdnnEnginePluginHandle_t handle,
                                              hipdnnEnginePluginExecutionContext_t execution_context)
{
    static const char* const entry = "hipdnnEnginePluginDestroyExecutionContext";
    fake_record_t r;
    struct HipdnnEnginePluginExecutionContext* c;
    hipdnnPluginStatus_t status = HIPDNN_PLUGIN_STATUS_SUCCESS;
    const char* why = NULL;

    init_record(&r, "DestroyExecutionContext");
    lock();
    if(!reserve_record_locked())
    {
        ++g_log_dropped;
        unlock();
        return out_of_memory(entry);
    }
    c = checked_context_locked(handle, execution_context, &r, &why);
    if(c != NULL)
    {
        unlink_context_locked(c);
        c->magic = FAKE_DEAD_MAGIC;
        free(c);
    }
    else
    {
        status = HIPDNN_PLUGIN_STATUS_BAD_PARAM;
    }
    r.status = (int)status;
    append_record_locked(&r);
    unlock();

    if(why != NULL)
        (void)hipdnnPluginSetError(status, "%s: %s", entry, why);
    return status;
}

hipdnnPluginStatus_t hipdnnEnginePluginGetWorkspaceSizeFromExecutionContext(
    hipdnnEnginePluginHandle_t handle,
    hipdnnEnginePluginExecutionContext_t execution_context,
    size_t* workspace_size)
{
    static const char* const entry = "hipdnnEnginePluginGetWorkspaceSizeFromExecutionContext";
    fake_record_t scratch;
    struct HipdnnEnginePluginExecutionContext* c;
    const char* why = NULL;
    uint64_t bytes = 0;

    init_record(&scratch, "unused");
    lock();
    c = checked_context_locked(handle, execution_context, &scratch, &why);
    if(c != NULL)
        bytes = c->workspace_size;
    unlock();
    if(why == NULL && workspace_size == NULL)
        why = "workspace_size is NULL";
    if(why != NULL)
        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "%s: %s", entry, why);
    *workspace_size = (size_t)bytes;
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

/* Shared body of both execute entries. Overrides are read only when
 * with_overrides is non-zero. */
static hipdnnPluginStatus_t execute_common(const char* entry,
                                           const char* record_name,
                                           int with_overrides,
                                           hipdnnEnginePluginHandle_t handle,
                                           hipdnnEnginePluginExecutionContext_t execution_context,
                                           void* workspace,
                                           const hipdnnPluginDeviceBuffer_t* device_buffers,
                                           uint32_t num_device_buffers,
                                           uint32_t num_overrides,
                                           const int64_t* override_unique_ids,
                                           const uint32_t* override_lengths,
                                           const int64_t* const* override_shapes,
                                           const int64_t* const* override_strides)
{
    fake_record_t r;
    struct HipdnnEnginePluginExecutionContext* c;
    hipdnnPluginStatus_t status = HIPDNN_PLUGIN_STATUS_SUCCESS;
    const char* why = NULL;
    int oom = 0;
    int injected = 0;
    char* message = NULL;

    init_record(&r, record_name);
    lock();
    if(!reserve_record_locked())
    {
        ++g_log_dropped;
        unlock();
        return out_of_memory(entry);
    }
    c = checked_context_locked(handle, execution_context, &r, &why);
    if(c != NULL)
    {
        if(num_device_buffers > 0 && device_buffers == NULL)
            why = "device_buffers is NULL but num_device_buffers > 0";
        else if(c->workspace_size > 0 && workspace == NULL)
            why = "workspace is NULL but the execution context needs workspace";
        else if(with_overrides && num_overrides > 0
                && (override_unique_ids == NULL || override_lengths == NULL || override_shapes == NULL
                    || override_strides == NULL))
            why = "an override array is NULL but num_overrides > 0";
        else if(with_overrides)
        {
            uint32_t i;
            for(i = 0; i < num_overrides; ++i)
                if(override_lengths[i] > 0 && (override_shapes[i] == NULL || override_strides[i] == NULL))
                {
                    why = "an override shape or stride array is NULL";
                    break;
                }
        }
    }
    else if(why == NULL)
    {
        why = "invalid execution context";
    }

    if(why == NULL)
    {
        uint32_t i;
        r.fields |= F_EXEC;
        r.workspace = (uintptr_t)workspace;
        r.num_buffers = num_device_buffers;
        if(num_device_buffers > 0)
        {
            r.buffer_uids = (int64_t*)malloc(num_device_buffers * sizeof(int64_t));
            r.buffer_ptrs = (uintptr_t*)malloc(num_device_buffers * sizeof(uintptr_t));
            if(r.buffer_uids == NULL || r.buffer_ptrs == NULL)
                oom = 1;
            else
                for(i = 0; i < num_device_buffers; ++i)
                {
                    r.buffer_uids[i] = device_buffers[i].uid;
                    r.buffer_ptrs[i] = (uintptr_t)device_buffers[i].ptr;
                }
        }
        if(!oom && with_overrides)
        {
            size_t total = 0;
            size_t pos = 0;
            r.fields |= F_OVERRIDES;
            r.num_overrides = num_overrides;
            for(i = 0; i < num_overrides; ++i)
                total += override_lengths[i];
            if(num_overrides > 0)
            {
                r.override_uids = (int64_t*)malloc(num_overrides * sizeof(int64_t));
                r.override_lengths = (uint32_t*)malloc(num_overrides * sizeof(uint32_t));
                if(r.override_uids == NULL || r.override_lengths == NULL)
                    oom = 1;
            }
            if(!oom && total > 0)
            {
                r.override_shapes = (int64_t*)malloc(total * sizeof(int64_t));
                r.override_strides = (int64_t*)malloc(total * sizeof(int64_t));
                if(r.override_shapes == NULL || r.override_strides == NULL)
                    oom = 1;
            }
            if(!oom)
                for(i = 0; i < num_overrides; ++i)
                {
                    uint32_t n = override_lengths[i];
                    r.override_uids[i] = override_unique_ids[i];
                    r.override_lengths[i] = n;
                    if(n > 0)
                    {
                        memcpy(r.override_shapes + pos, override_shapes[i], n * sizeof(int64_t));
                        memcpy(r.override_strides + pos, override_strides[i], n * sizeof(int64_t));
                    }
                    pos += n;
                }
        }
        if(oom)
        {
            free_record(&r);
            init_record(&r, record_name);
            status = HIPDNN_PLUGIN_STATUS_ALLOC_FAILED;
        }
        else if(g_fail_status != 0)
        {
            injected = 1;
            status = (hipdnnPluginStatus_t)g_fail_status;
            message = copy_string(g_fail_message);
        }
    }
    else
    {
        status = HIPDNN_PLUGIN_STATUS_BAD_PARAM;
    }
    r.status = (int)status;
    append_record_locked(&r);
    unlock();

    if(why != NULL)
    {
        (void)hipdnnPluginSetError(status, "%s: %s", entry, why);
    }
    else if(oom)
    {
        return out_of_memory(entry);
    }
    else if(injected)
    {
        (void)hipdnnPluginSetError(status, "%s", message != NULL ? message : "");
        hipdnnPluginLog(HIPDNN_SEV_ERROR,
                 "%s: injected failure %d: %s",
                 FAKE_PLUGIN_NAME,
                 (int)status,
                 message != NULL ? message : "");
        free(message);
    }
    return status;
}

hipdnnPluginStatus_t hipdnnEnginePluginExecuteOpGraph(hipdnnEnginePluginHandle_t handle,
                                                      hipdnnEnginePluginExecutionContext_t execution_context,
                                                      void* workspace,
                                                      const hipdnnPluginDeviceBuffer_t* device_buffers,
                                                      uint32_t num_device_buffers)
{
    return execute_common("hipdnnEnginePluginExecuteOpGraph",
                          "ExecuteOpGraph",
                          0,
                          handle,
                          execution_context,
                          workspace,
                          device_buffers,
                          num_device_buffers,
                          0,
                          NULL,
                          NULL,
                          NULL,
                          NULL);
}

#ifdef FAKE_PLUGIN_WITH_OVERRIDES
hipdnnPluginStatus_t
    hipdnnEnginePluginExecuteOpGraphWithOverrides(hipdnnEnginePluginHandle_t handle,
                                                  hipdnnEnginePluginExecutionContext_t execution_context,
                                                  void* workspace,
                                                  const hipdnnPluginDeviceBuffer_t* device_buffers,
                                                  uint32_t num_device_buffers,
                                                  uint32_t num_overrides,
                                                  const int64_t* override_unique_ids,
                                                  const uint32_t* override_lengths,
                                                  const int64_t* const* override_shapes,
                                                  const int64_t* const* override_strides)
{
    return execute_common("hipdnnEnginePluginExecuteOpGraphWithOverrides",
                          "ExecuteOpGraphWithOverrides",
                          1,
                          handle,
                          execution_context,
                          workspace,
                          device_buffers,
                          num_device_buffers,
                          num_overrides,
                          override_unique_ids,
                          override_lengths,
                          override_shapes,
                          override_strides);
}
#endif

/* ------------------------------------------------------------------------- */
/* Hooks (fake_plugin_hooks.h)                                               */
/* ------------------------------------------------------------------------- */

typedef struct
{
    char* buf;
    size_t len;
    size_t cap;
    int failed;
} strbuf_t;

static void sb_append(strbuf_t* sb, const char* fmt, ...)
{
    va_list ap;
    int n;
    if(sb->failed)
        return;
    for(;;)
    {
        size_t room = sb->cap - sb->len;
        va_start(ap, fmt);
        n = vsnprintf(sb->buf != NULL ? sb->buf + sb->len : NULL, room, fmt, ap);
        va_end(ap);
        if(n < 0)
        {
            sb->failed = 1;
            return;
        }
        if((size_t)n < room)
        {
            sb->len += (size_t)n;
            return;
        }
        {
            size_t cap = sb->cap == 0 ? 4096 : sb->cap;
            char* grown;
            while(cap < sb->len + (size_t)n + 1)
                cap *= 2;
            grown = (char*)realloc(sb->buf, cap);
            if(grown == NULL)
            {
                sb->failed = 1;
                return;
            }
            sb->buf = grown;
            sb->cap = cap;
        }
    }
}

static void sb_int64_array(strbuf_t* sb, const int64_t* values, size_t n)
{
    size_t i;
    sb_append(sb, "[");
    for(i = 0; i < n; ++i)
        sb_append(sb, i == 0 ? "%" PRId64 : ",%" PRId64, values[i]);
    sb_append(sb, "]");
}

static void write_record(strbuf_t* sb, const fake_record_t* r)
{
    uint32_t i;
    sb_append(sb, "{\"entry\":\"%s\",\"status\":%d", r->entry, r->status);
    if(r->fields & F_HANDLE)
        sb_append(sb, ",\"handle\":%" PRIu64, r->handle_id);
    if(r->fields & F_CONTEXT)
        sb_append(sb, ",\"context\":%" PRIu64, r->context_id);
    if(r->fields & F_STREAM)
        sb_append(sb, ",\"stream\":%" PRIuPTR, r->stream);
    if(r->fields & F_CONFIG)
        sb_append(sb,
                  ",\"config_size\":%" PRIu64 ",\"config_hash\":%" PRIu64,
                  r->config_size,
                  r->config_hash);
    if(r->fields & F_GRAPH)
        sb_append(
            sb, ",\"graph_size\":%" PRIu64 ",\"graph_hash\":%" PRIu64, r->graph_size, r->graph_hash);
    if(r->fields & F_ENGINES)
        sb_append(sb,
                  ",\"max_engines\":%" PRIu32 ",\"num_engines\":%" PRIu32,
                  r->max_engines,
                  r->num_engines);
    if(r->fields & F_LEAKED)
        sb_append(sb, ",\"leaked_contexts\":%" PRIu64, r->leaked_contexts);
    if(r->fields & F_EXEC)
    {
        sb_append(sb, ",\"workspace\":%" PRIuPTR ",\"buffers\":[", r->workspace);
        for(i = 0; i < r->num_buffers; ++i)
            sb_append(sb,
                      i == 0 ? "[%" PRId64 ",%" PRIuPTR "]" : ",[%" PRId64 ",%" PRIuPTR "]",
                      r->buffer_uids[i],
                      r->buffer_ptrs[i]);
        sb_append(sb, "]");
    }
    if(r->fields & F_OVERRIDES)
    {
        size_t pos = 0;
        sb_append(sb, ",\"num_overrides\":%" PRIu32 ",\"override_uids\":", r->num_overrides);
        sb_int64_array(sb, r->override_uids, r->num_overrides);
        sb_append(sb, ",\"override_lengths\":[");
        for(i = 0; i < r->num_overrides; ++i)
            sb_append(sb, i == 0 ? "%" PRIu32 : ",%" PRIu32, r->override_lengths[i]);
        sb_append(sb, "],\"override_shapes\":[");
        for(i = 0; i < r->num_overrides; ++i)
        {
            if(i > 0)
                sb_append(sb, ",");
            sb_int64_array(sb, r->override_shapes + pos, r->override_lengths[i]);
            pos += r->override_lengths[i];
        }
        pos = 0;
        sb_append(sb, "],\"override_strides\":[");
        for(i = 0; i < r->num_overrides; ++i)
        {
            if(i > 0)
                sb_append(sb, ",");
            sb_int64_array(sb, r->override_strides + pos, r->override_lengths[i]);
            pos += r->override_lengths[i];
        }
        sb_append(sb, "]");
    }
    sb_append(sb, "}");
}

const char* fakePluginGetCallLog(void)
{
    strbuf_t sb;
    size_t i;
    const char* out;

    memset(&sb, 0, sizeof sb);
    lock();
    sb_append(&sb, "[");
    for(i = 0; i < g_log_len; ++i)
    {
        if(i > 0)
            sb_append(&sb, ",");
        write_record(&sb, &g_log[i]);
    }
    if(g_log_dropped > 0)
        sb_append(&sb,
                  "%s{\"entry\":\"RecordsDropped\",\"status\":%d,\"count\":%" PRIu64 "}",
                  g_log_len > 0 ? "," : "",
                  (int)HIPDNN_PLUGIN_STATUS_ALLOC_FAILED,
                  g_log_dropped);
    sb_append(&sb, "]");
    free(g_log_json);
    if(sb.failed)
    {
        free(sb.buf);
        g_log_json = NULL;
    }
    else
    {
        g_log_json = sb.buf;
    }
    out = g_log_json;
    unlock();
    return out;
}

uint64_t fakePluginGetCallCount(void)
{
    uint64_t n;
    lock();
    n = (uint64_t)g_log_len;
    unlock();
    return n;
}

void fakePluginResetCallLog(void)
{
    lock();
    clear_log_locked();
    unlock();
}

void fakePluginResetState(void)
{
    lock();
    clear_log_locked();
    g_applicable = 1;
    g_fail_status = 0;
    free(g_fail_message);
    g_fail_message = NULL;
    g_workspace_size = 0;
    free(g_details);
    g_details = NULL;
    g_details_size = 0;
    unlock();
}

void fakePluginSetApplicable(int applicable)
{
    lock();
    g_applicable = applicable != 0;
    unlock();
}

void fakePluginSetExecuteFailure(int status, const char* message)
{
    char* copy = status != 0 ? copy_string(message) : NULL;
    lock();
    free(g_fail_message);
    g_fail_message = copy;
    g_fail_status = status;
    unlock();
}

void fakePluginSetWorkspaceSize(uint64_t bytes)
{
    lock();
    g_workspace_size = bytes;
    unlock();
}

void fakePluginSetEngineDetails(const uint8_t* data, uint64_t size)
{
    unsigned char* copy = NULL;
    if(data != NULL && size > 0 && size <= (uint64_t)1 << 20) /* a test hook: 1 MiB is plenty */
    {
        copy = (unsigned char*)malloc((size_t)size);
        if(copy != NULL)
            memcpy(copy, data, (size_t)size);
    }
    lock();
    free(g_details);
    g_details = copy;
    g_details_size = copy != NULL ? (size_t)size : 0;
    unlock();
}

const char* fakePluginGetName(void)
{
    return FAKE_PLUGIN_NAME;
}

uint64_t fakePluginGetLiveHandleCount(void)
{
    uint64_t n = 0;
    struct HipdnnEnginePluginHandle* h;
    lock();
    for(h = g_handles; h != NULL; h = h->next)
        ++n;
    unlock();
    return n;
}

uint64_t fakePluginGetLiveContextCount(void)
{
    uint64_t n = 0;
    struct HipdnnEnginePluginExecutionContext* c;
    lock();
    for(c = g_contexts; c != NULL; c = c->next)
        ++n;
    unlock();
    return n;
}
