// hipdnn plugin SDK, C++ layer: failures, the calling thread's last error, and logging.
//
// Header only, C++17. Every entry point the layer defines (EnginePlugin.hpp) runs its body through
// guarded(), so no exception crosses the C ABI:
//
//   Failure{status, message}   -> status, last error "<entry>: <message>"
//   std::bad_alloc             -> HIPDNN_PLUGIN_STATUS_ALLOC_FAILED, last error "<entry>: out of memory"
//   other std::exception       -> HIPDNN_PLUGIN_STATUS_INTERNAL_ERROR, "<entry>: internal error: <what()>"
//   anything else              -> HIPDNN_PLUGIN_STATUS_INTERNAL_ERROR, "<entry>: internal error: unknown exception"
//
// The last error lives in a fixed thread-local buffer, so recording it never allocates (the
// bad_alloc path included). Plugin code anywhere in the library fails with fail() / failf() and
// logs with log(); the state behind them is hidden per shared library, so two plugins built on this
// layer and loaded into one process never share a sink, a level or an error buffer.
#ifndef HIPDNN_PLUGIN_SDK_CPP_STATUS_HPP
#define HIPDNN_PLUGIN_SDK_CPP_STATUS_HPP

#include "../PluginApi.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <utility>

#if defined(__GNUC__) || defined(__clang__)
#define HIPDNN_CPP_HIDDEN __attribute__((visibility("hidden")))
#define HIPDNN_CPP_PRINTF(fmt, first) __attribute__((format(printf, fmt, first)))
#else
#define HIPDNN_CPP_HIDDEN
#define HIPDNN_CPP_PRINTF(fmt, first)
#endif

namespace hipdnn_plugin_sdk
{
namespace cpp
{

// Bytes of the last-error buffer and of one log line, terminator included (longer text is cut).
constexpr size_t kErrorCapacity = 2048;
constexpr size_t kLogCapacity = 1024;

// A failure that knows its status. Thrown by plugin code, turned into the status by guarded().
struct Failure : std::exception
{
    hipdnnPluginStatus_t status;
    std::string message;

    Failure(hipdnnPluginStatus_t s, std::string m) : status(s), message(std::move(m)) {}
    const char* what() const noexcept override { return message.c_str(); }
};

[[noreturn]] inline void fail(hipdnnPluginStatus_t status, std::string message)
{
    throw Failure(status, std::move(message));
}

inline std::string vformat(const char* fmt, va_list ap)
{
    char small[512];
    va_list again;
    va_copy(again, ap);
    const int n = std::vsnprintf(small, sizeof small, fmt, ap);
    if(n < 0)
    {
        va_end(again);
        return std::string();
    }
    if(static_cast<size_t>(n) < sizeof small)
    {
        va_end(again);
        return std::string(small, static_cast<size_t>(n));
    }
    std::string out(static_cast<size_t>(n), '\0');
    std::vsnprintf(&out[0], out.size() + 1, fmt, again);
    va_end(again);
    return out;
}

inline std::string format(const char* fmt, ...) HIPDNN_CPP_PRINTF(1, 2);
inline std::string format(const char* fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    std::string s = vformat(fmt, ap);
    va_end(ap);
    return s;
}

[[noreturn]] inline void failf(hipdnnPluginStatus_t status, const char* fmt, ...) HIPDNN_CPP_PRINTF(2, 3);
[[noreturn]] inline void failf(hipdnnPluginStatus_t status, const char* fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    std::string s = vformat(fmt, ap);
    va_end(ap);
    throw Failure(status, std::move(s));
}

// A caller's mistake (a NULL pointer, a damaged buffer, a bad override): BAD_PARAM.
[[noreturn]] inline void bad_param(const char* fmt, ...) HIPDNN_CPP_PRINTF(1, 2);
[[noreturn]] inline void bad_param(const char* fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    std::string s = vformat(fmt, ap);
    va_end(ap);
    throw Failure(HIPDNN_PLUGIN_STATUS_BAD_PARAM, std::move(s));
}

namespace detail
{
// Hidden, so that each plugin library has its own copy even when built without -fvisibility=hidden.
HIPDNN_CPP_HIDDEN inline thread_local char t_last_error[kErrorCapacity] = {};
HIPDNN_CPP_HIDDEN inline std::atomic<hipdnnCallback_t> g_log_sink{nullptr};
HIPDNN_CPP_HIDDEN inline std::atomic<int> g_log_level{HIPDNN_SEV_WARN};
HIPDNN_CPP_HIDDEN inline std::atomic<const char*> g_log_name{""};

inline void set_error(const char* entry, const char* a, const char* b = "") noexcept
{
    std::snprintf(t_last_error, kErrorCapacity, "%s: %s%s", entry, a, b);
}
} // namespace detail

// The calling thread's last error ("" when nothing failed on it yet).
inline const char* last_error() noexcept
{
    return detail::t_last_error;
}

// Whether a message of this severity reaches the host (skip costly formatting otherwise).
inline bool log_enabled(hipdnnSeverity_t severity) noexcept
{
    const int level = detail::g_log_level.load(std::memory_order_acquire);
    return detail::g_log_sink.load(std::memory_order_acquire) != nullptr && level < HIPDNN_SEV_OFF
           && severity < HIPDNN_SEV_OFF && static_cast<int>(severity) >= level;
}

// Sends "[<plugin name>] <message>" to the host's sink when the severity passes its level.
inline void log(hipdnnSeverity_t severity, const char* fmt, ...) noexcept HIPDNN_CPP_PRINTF(2, 3);
inline void log(hipdnnSeverity_t severity, const char* fmt, ...) noexcept
{
    if(!log_enabled(severity))
        return;
    char line[kLogCapacity];
    const int head = std::snprintf(line, sizeof line, "[%s] ", detail::g_log_name.load(std::memory_order_acquire));
    if(head < 0 || static_cast<size_t>(head) >= sizeof line)
        return;
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(line + head, sizeof line - static_cast<size_t>(head), fmt, ap);
    va_end(ap);
    const hipdnnCallback_t sink = detail::g_log_sink.load(std::memory_order_acquire);
    if(sink != nullptr)
        sink(severity, line);
}

// Runs body() (which returns a status) and maps whatever it throws to a status and a last error
// prefixed with the entry's name.
template <class F>
hipdnnPluginStatus_t guarded(const char* entry, F&& body) noexcept
{
    try
    {
        return body();
    }
    catch(const Failure& f)
    {
        detail::set_error(entry, f.message.c_str());
        // A failure must fail: SUCCESS thrown by mistake reads as an internal error.
        return f.status == HIPDNN_PLUGIN_STATUS_SUCCESS ? HIPDNN_PLUGIN_STATUS_INTERNAL_ERROR : f.status;
    }
    catch(const std::bad_alloc&)
    {
        detail::set_error(entry, "out of memory");
        return HIPDNN_PLUGIN_STATUS_ALLOC_FAILED;
    }
    catch(const std::exception& e)
    {
        detail::set_error(entry, "internal error: ", e.what());
        return HIPDNN_PLUGIN_STATUS_INTERNAL_ERROR;
    }
    catch(...)
    {
        detail::set_error(entry, "internal error: unknown exception");
        return HIPDNN_PLUGIN_STATUS_INTERNAL_ERROR;
    }
}

} // namespace cpp
} // namespace hipdnn_plugin_sdk

#endif // HIPDNN_PLUGIN_SDK_CPP_STATUS_HPP
