/*
 * hipdnn plugin SDK: helpers for plugins written in C.
 *
 * Header only; C99, C11 and C++17 clean under -Wall -Wextra -Werror -pedantic.
 *
 * Two layers:
 *
 * 1. Small static inline functions with no state of their own: bounded message
 *    formatting, a severity filter and log call, the engine-id count
 *    convention, finding a tensor's buffer or override by uid.
 *
 * 2. One macro that gives a plugin its error and logging plumbing. Write, at
 *    file scope in exactly one .c file of the plugin:
 *
 *        HIPDNN_PLUGIN_DEFINE_ERROR_AND_LOG_ENTRIES();
 *
 *    It defines the entry points hipdnnPluginGetLastErrorString (required),
 *    hipdnnPluginSetLoggingCallback and hipdnnPluginSetLogLevel (optional), a
 *    thread-local last-error buffer and the host's log sink, and these
 *    functions, callable from any file of the plugin (declared below, hidden
 *    from the library's exported symbols):
 *
 *        return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "engine id %lld unknown", (long long)id);
 *        hipdnnPluginClearError();
 *        hipdnnPluginLog(HIPDNN_SEV_INFO, "created context for graph %s", name);
 *        hipdnnPluginLogText(HIPDNN_SEV_WARN, long_preformatted_text);
 *
 *    A plugin that wants only some of these entries (or its own last-error
 *    entry) uses the macro's pieces instead; see HIPDNN_PLUGIN_DEFINE_ERROR_STATE.
 *
 * Last-error rules, as the host expects them: the message belongs to the
 * calling thread; it stays valid until the next call into the plugin on that
 * thread; it is "" when nothing failed. Messages longer than
 * HIPDNN_PLUGIN_ERROR_CAPACITY - 1 bytes are truncated, never overrun.
 *
 * Logging rules: the host installs its sink with SetLoggingCallback (possibly
 * NULL to remove it) and the threshold with SetLogLevel; a message is passed on
 * when a sink is installed, the threshold is not HIPDNN_SEV_OFF and the
 * message's severity is at or above it. The threshold starts at
 * HIPDNN_PLUGIN_DEFAULT_LOG_LEVEL. The sink may be called from any thread that
 * calls into the plugin; the message pointer is valid during the call only.
 */
#ifndef HIPDNN_PLUGIN_SDK_PLUGIN_HELPERS_H
#define HIPDNN_PLUGIN_SDK_PLUGIN_HELPERS_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "PluginApi.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifndef HIPDNN_PLUGIN_SDK_PRINTF_LIKE
#if defined(__GNUC__) || defined(__clang__)
#define HIPDNN_PLUGIN_SDK_PRINTF_LIKE(fmt, first) __attribute__((format(printf, fmt, first)))
#else
#define HIPDNN_PLUGIN_SDK_PRINTF_LIKE(fmt, first)
#endif
#endif

/* Thread-local storage duration, whatever the language level. */
#if defined(__cplusplus)
#define HIPDNN_PLUGIN_THREAD_LOCAL thread_local
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L && !defined(__STDC_NO_THREADS__)
#define HIPDNN_PLUGIN_THREAD_LOCAL _Thread_local
#elif defined(_MSC_VER)
#define HIPDNN_PLUGIN_THREAD_LOCAL __declspec(thread)
#elif defined(__GNUC__) || defined(__clang__)
#define HIPDNN_PLUGIN_THREAD_LOCAL __thread
#else
#error "hipdnn_plugin_sdk/PluginHelpers.h: no thread-local storage keyword for this compiler"
#endif

/* Functions private to the plugin library (not exported). */
#if defined(_WIN32)
#define HIPDNN_PLUGIN_HIDDEN
#elif defined(__GNUC__) || defined(__clang__)
#define HIPDNN_PLUGIN_HIDDEN __attribute__((visibility("hidden")))
#else
#define HIPDNN_PLUGIN_HIDDEN
#endif

/* Sizes of the last-error buffer and of one log message, terminator included. */
#define HIPDNN_PLUGIN_ERROR_CAPACITY 1024
#define HIPDNN_PLUGIN_LOG_CAPACITY 1024
#ifndef HIPDNN_PLUGIN_DEFAULT_LOG_LEVEL
#define HIPDNN_PLUGIN_DEFAULT_LOG_LEVEL HIPDNN_SEV_WARN
#endif

/* ------------------------------------------------------------------------- */
/* Stateless helpers                                                         */
/* ------------------------------------------------------------------------- */

/* Copies src into dst[capacity] (truncating; always terminated when capacity > 0). */
static inline void hipdnnPluginCopyMessage(char* dst, size_t capacity, const char* src)
{
    size_t n;
    if(dst == NULL || capacity == 0)
        return;
    if(src == NULL)
        src = "";
    n = strlen(src);
    if(n >= capacity)
        n = capacity - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* vsnprintf into dst[capacity] that always terminates. */
static inline void hipdnnPluginFormatMessageV(char* dst, size_t capacity, const char* fmt, va_list ap)
{
    if(dst == NULL || capacity == 0)
        return;
    if(fmt == NULL)
    {
        dst[0] = '\0';
        return;
    }
    if(vsnprintf(dst, capacity, fmt, ap) < 0)
        dst[0] = '\0';
    dst[capacity - 1] = '\0';
}

static inline void hipdnnPluginFormatMessage(char* dst, size_t capacity, const char* fmt, ...)
    HIPDNN_PLUGIN_SDK_PRINTF_LIKE(3, 4);

static inline void hipdnnPluginFormatMessage(char* dst, size_t capacity, const char* fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    hipdnnPluginFormatMessageV(dst, capacity, fmt, ap);
    va_end(ap);
}

/* Whether a message of `severity` passes a sink/threshold pair. */
static inline int hipdnnPluginShouldLog(hipdnnCallback_t sink, hipdnnSeverity_t threshold, hipdnnSeverity_t severity)
{
    return sink != NULL && threshold != HIPDNN_SEV_OFF && severity != HIPDNN_SEV_OFF && (int)severity >= (int)threshold;
}

/* Formats and passes one message to sink when it passes the threshold. */
static inline void hipdnnPluginLogToV(hipdnnCallback_t sink, hipdnnSeverity_t threshold, hipdnnSeverity_t severity,
                                      const char* fmt, va_list ap)
{
    char message[HIPDNN_PLUGIN_LOG_CAPACITY];
    if(!hipdnnPluginShouldLog(sink, threshold, severity))
        return;
    hipdnnPluginFormatMessageV(message, sizeof message, fmt, ap);
    sink(severity, message);
}

static inline void hipdnnPluginLogTo(hipdnnCallback_t sink, hipdnnSeverity_t threshold, hipdnnSeverity_t severity,
                                     const char* fmt, ...) HIPDNN_PLUGIN_SDK_PRINTF_LIKE(4, 5);

static inline void hipdnnPluginLogTo(hipdnnCallback_t sink, hipdnnSeverity_t threshold, hipdnnSeverity_t severity,
                                     const char* fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    hipdnnPluginLogToV(sink, threshold, severity, fmt, ap);
    va_end(ap);
}

/* The SDK's count convention for engine-id arrays (GetAllEngineIds,
 * GetApplicableEngineIds): writes min(count, max_engines) ids from ids[] to
 * engine_ids and always stores count in *num_engines. BAD_PARAM when
 * num_engines is NULL, or engine_ids is NULL while max_engines > 0. */
static inline hipdnnPluginStatus_t hipdnnPluginReturnEngineIds(const int64_t* ids, uint32_t count, int64_t* engine_ids,
                                                               uint32_t max_engines, uint32_t* num_engines)
{
    uint32_t i;
    if(num_engines == NULL || (engine_ids == NULL && max_engines > 0) || (ids == NULL && count > 0))
        return HIPDNN_PLUGIN_STATUS_BAD_PARAM;
    for(i = 0; i < count && i < max_engines; ++i)
        engine_ids[i] = ids[i];
    *num_engines = count;
    return HIPDNN_PLUGIN_STATUS_SUCCESS;
}

/* The pointer the host passed for tensor `uid`, or NULL when absent. */
static inline void* hipdnnPluginFindDeviceBuffer(const hipdnnPluginDeviceBuffer_t* buffers, uint32_t num_buffers,
                                                 int64_t uid)
{
    uint32_t i;
    if(buffers == NULL)
        return NULL;
    for(i = 0; i < num_buffers; ++i)
        if(buffers[i].uid == uid)
            return buffers[i].ptr;
    return NULL;
}

/* The override the host passed for tensor `uid` (arguments as received by
 * hipdnnEnginePluginExecuteOpGraphWithOverrides): returns 1 and sets *rank,
 * *dims, *strides when there is one, else 0 (the tensor keeps its declared
 * shape). A NULL override array with num_overrides > 0 counts as no override. */
static inline int hipdnnPluginFindOverride(uint32_t num_overrides, const int64_t* override_unique_ids,
                                           const uint32_t* override_lengths, const int64_t* const* override_shapes,
                                           const int64_t* const* override_strides, int64_t uid, uint32_t* rank,
                                           const int64_t** dims, const int64_t** strides)
{
    uint32_t i;
    if(override_unique_ids == NULL || override_lengths == NULL || override_shapes == NULL
       || override_strides == NULL)
        return 0;
    for(i = 0; i < num_overrides; ++i)
    {
        if(override_unique_ids[i] != uid)
            continue;
        if(rank != NULL)
            *rank = override_lengths[i];
        if(dims != NULL)
            *dims = override_shapes[i];
        if(strides != NULL)
            *strides = override_strides[i];
        return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------------- */
/* Per-plugin error and log plumbing (see HIPDNN_PLUGIN_DEFINE_...)           */
/* ------------------------------------------------------------------------- */

/* Stores a formatted message as the calling thread's last error and returns
 * status, so `return hipdnnPluginSetError(...)` reads naturally. */
HIPDNN_PLUGIN_HIDDEN hipdnnPluginStatus_t hipdnnPluginSetError(hipdnnPluginStatus_t status, const char* fmt, ...)
    HIPDNN_PLUGIN_SDK_PRINTF_LIKE(2, 3);
/* Resets the calling thread's last error to "". */
HIPDNN_PLUGIN_HIDDEN void hipdnnPluginClearError(void);
/* The calling thread's last error ("" when none). */
HIPDNN_PLUGIN_HIDDEN const char* hipdnnPluginLastError(void);
/* Whether a message of this severity would reach the host (skip costly formatting). */
HIPDNN_PLUGIN_HIDDEN int hipdnnPluginLogEnabled(hipdnnSeverity_t severity);
/* Formats and sends one message to the host's sink, subject to the threshold. */
HIPDNN_PLUGIN_HIDDEN void hipdnnPluginLog(hipdnnSeverity_t severity, const char* fmt, ...)
    HIPDNN_PLUGIN_SDK_PRINTF_LIKE(2, 3);
/* Sends text to the host's sink as it is (no formatting, no length bound),
 * subject to the threshold; NULL is sent as "". */
HIPDNN_PLUGIN_HIDDEN void hipdnnPluginLogText(hipdnnSeverity_t severity, const char* text);

/* Atomic loads and stores of the sink and threshold where the compiler has them. */
#if defined(__GNUC__) || defined(__clang__)
#define HIPDNN_PLUGIN_SDK_LOAD_(var) __atomic_load_n(&(var), __ATOMIC_ACQUIRE)
#define HIPDNN_PLUGIN_SDK_STORE_(var, value) __atomic_store_n(&(var), (value), __ATOMIC_RELEASE)
#else
#define HIPDNN_PLUGIN_SDK_LOAD_(var) (var)
#define HIPDNN_PLUGIN_SDK_STORE_(var, value) ((var) = (value))
#endif

/* The pieces of HIPDNN_PLUGIN_DEFINE_ERROR_AND_LOG_ENTRIES(), for a plugin
 * that exports only some of those entries or writes one of them itself (the
 * test suite's misbehaving plugins do both). Each is used at most once per
 * plugin, at file scope, followed by a semicolon:
 *
 *   HIPDNN_PLUGIN_DEFINE_ERROR_STATE()       the last-error buffer and
 *                                            hipdnnPluginSetError/ClearError/LastError;
 *                                            exports nothing
 *   HIPDNN_PLUGIN_DEFINE_LAST_ERROR_ENTRY()  exports hipdnnPluginGetLastErrorString
 *   HIPDNN_PLUGIN_DEFINE_LOG_ENTRIES()       the sink and threshold, exports
 *                                            hipdnnPluginSetLoggingCallback/SetLogLevel,
 *                                            defines hipdnnPluginLogEnabled/Log/LogText
 *
 * The last two need the first (SetLogLevel reports a bad level through it). */
#define HIPDNN_PLUGIN_DEFINE_ERROR_STATE()                                                                             \
    static HIPDNN_PLUGIN_THREAD_LOCAL char hipdnnPluginSdkLastError_[HIPDNN_PLUGIN_ERROR_CAPACITY];                    \
                                                                                                                       \
    HIPDNN_PLUGIN_HIDDEN hipdnnPluginStatus_t hipdnnPluginSetError(hipdnnPluginStatus_t status, const char* fmt, ...)  \
    {                                                                                                                  \
        va_list ap;                                                                                                    \
        va_start(ap, fmt);                                                                                             \
        hipdnnPluginFormatMessageV(hipdnnPluginSdkLastError_, sizeof hipdnnPluginSdkLastError_, fmt, ap);             \
        va_end(ap);                                                                                                    \
        return status;                                                                                                 \
    }                                                                                                                  \
                                                                                                                       \
    HIPDNN_PLUGIN_HIDDEN void hipdnnPluginClearError(void)                                                             \
    {                                                                                                                  \
        hipdnnPluginSdkLastError_[0] = '\0';                                                                           \
    }                                                                                                                  \
                                                                                                                       \
    HIPDNN_PLUGIN_HIDDEN const char* hipdnnPluginLastError(void)                                                       \
    {                                                                                                                  \
        return hipdnnPluginSdkLastError_;                                                                              \
    }                                                                                                                  \
    typedef int hipdnnPluginSdkErrorStateDefinedOnce_

#define HIPDNN_PLUGIN_DEFINE_LAST_ERROR_ENTRY()                                                                        \
    HIPDNN_PLUGIN_EXPORT void hipdnnPluginGetLastErrorString(const char** error_str)                                   \
    {                                                                                                                  \
        if(error_str != NULL)                                                                                          \
            *error_str = hipdnnPluginLastError();                                                                      \
    }                                                                                                                  \
    typedef int hipdnnPluginSdkLastErrorEntryDefinedOnce_

#define HIPDNN_PLUGIN_DEFINE_LOG_ENTRIES()                                                                             \
    static hipdnnCallback_t hipdnnPluginSdkLogSink_ = NULL;                                                            \
    static int hipdnnPluginSdkLogLevel_ = (int)(HIPDNN_PLUGIN_DEFAULT_LOG_LEVEL);                                      \
                                                                                                                       \
    HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t hipdnnPluginSetLoggingCallback(hipdnnCallback_t callback)                \
    {                                                                                                                  \
        HIPDNN_PLUGIN_SDK_STORE_(hipdnnPluginSdkLogSink_, callback);                                                   \
        return HIPDNN_PLUGIN_STATUS_SUCCESS;                                                                           \
    }                                                                                                                  \
                                                                                                                       \
    HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t hipdnnPluginSetLogLevel(hipdnnSeverity_t level)                          \
    {                                                                                                                  \
        if((int)level < (int)HIPDNN_SEV_INFO || (int)level > (int)HIPDNN_SEV_OFF)                                      \
            return hipdnnPluginSetError(HIPDNN_PLUGIN_STATUS_BAD_PARAM, "log level %d is not a hipdnnSeverity_t",    \
                                        (int)level);                                                                   \
        HIPDNN_PLUGIN_SDK_STORE_(hipdnnPluginSdkLogLevel_, (int)level);                                                \
        return HIPDNN_PLUGIN_STATUS_SUCCESS;                                                                           \
    }                                                                                                                  \
                                                                                                                       \
    HIPDNN_PLUGIN_HIDDEN int hipdnnPluginLogEnabled(hipdnnSeverity_t severity)                                         \
    {                                                                                                                  \
        return hipdnnPluginShouldLog(HIPDNN_PLUGIN_SDK_LOAD_(hipdnnPluginSdkLogSink_),                                 \
                                     (hipdnnSeverity_t)HIPDNN_PLUGIN_SDK_LOAD_(hipdnnPluginSdkLogLevel_), severity);   \
    }                                                                                                                  \
                                                                                                                       \
    HIPDNN_PLUGIN_HIDDEN void hipdnnPluginLog(hipdnnSeverity_t severity, const char* fmt, ...)                         \
    {                                                                                                                  \
        va_list ap;                                                                                                    \
        va_start(ap, fmt);                                                                                             \
        hipdnnPluginLogToV(HIPDNN_PLUGIN_SDK_LOAD_(hipdnnPluginSdkLogSink_),                                           \
                           (hipdnnSeverity_t)HIPDNN_PLUGIN_SDK_LOAD_(hipdnnPluginSdkLogLevel_), severity, fmt, ap);    \
        va_end(ap);                                                                                                    \
    }                                                                                                                  \
                                                                                                                       \
    HIPDNN_PLUGIN_HIDDEN void hipdnnPluginLogText(hipdnnSeverity_t severity, const char* text)                         \
    {                                                                                                                  \
        hipdnnCallback_t sink = HIPDNN_PLUGIN_SDK_LOAD_(hipdnnPluginSdkLogSink_);                                      \
        if(hipdnnPluginShouldLog(sink, (hipdnnSeverity_t)HIPDNN_PLUGIN_SDK_LOAD_(hipdnnPluginSdkLogLevel_), severity)) \
            sink(severity, text != NULL ? text : "");                                                                  \
    }                                                                                                                  \
    typedef int hipdnnPluginSdkLogEntriesDefinedOnce_

/* Defines the last-error and logging entry points and the functions declared
 * above. Use once per plugin, at file scope, followed by a semicolon. */
#define HIPDNN_PLUGIN_DEFINE_ERROR_AND_LOG_ENTRIES()                                                                   \
    HIPDNN_PLUGIN_DEFINE_ERROR_STATE();                                                                                \
    HIPDNN_PLUGIN_DEFINE_LAST_ERROR_ENTRY();                                                                           \
    HIPDNN_PLUGIN_DEFINE_LOG_ENTRIES();                                                                                \
    typedef int hipdnnPluginSdkErrorAndLogEntriesDefinedOnce_

#ifdef __cplusplus
}
#endif

#endif /* HIPDNN_PLUGIN_SDK_PLUGIN_HELPERS_H */
