// The guarded plugin call: the in-flight count, dispatch between the plain and the override entry
// (spec 4.6), the GIL released around the plugin, its last error read on the same thread.
#include "core.h"

#include <cstdio>

namespace hipdnn_core {

thread_local const PlanData* tl_executing = nullptr;

// A plugin's last error as it may appear in an exception: at most 4096 bytes read (marked when cut),
// ASCII controls, DEL and the C1 controls (UTF-8 C2 80..9F) written as escapes, so a plugin cannot
// move a terminal's cursor or forge a log line (the host's rule for plugin strings, rfcs/0008).
// Runs with the GIL released: plain C++ only.
std::string printable_message(const char* text) {
    constexpr size_t kCap = 4096;
    size_t n = strnlen(text, kCap + 1);
    const bool cut = n > kCap;
    if (cut) n = kCap;
    std::string out;
    out.reserve(n + 32);
    char esc[8];
    for (size_t i = 0; i < n; ++i) {
        const auto c = static_cast<unsigned char>(text[i]);
        if (c == '\n') {
            out += "\\n";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c == '\t') {
            out += "\\t";
        } else if (c < 0x20 || c == 0x7f) {
            std::snprintf(esc, sizeof esc, "\\x%02x", c);
            out += esc;
        } else if (c == 0xc2 && i + 1 < n && static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
                   static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
            std::snprintf(esc, sizeof esc, "\\x%02x", static_cast<unsigned char>(text[i + 1]));
            out += esc;
            ++i;
        } else {
            out += static_cast<char>(c);
        }
    }
    if (cut) out += "... [truncated at 4096 bytes]";
    return out;
}
// -- the guarded plugin call ------------------------------------------------------------------
bool enter(PlanData& d) {
    if (d.gate && d.gate->closed.load()) {
        raise(kInvalidValue, "the handle of graph " + quoted(d.graph_name) +
                                 " is closed: its plans were released (build the graph on an open handle)");
        return false;
    }
    d.inflight.fetch_add(1);
    if (d.released.load() || (d.gate && d.gate->closed.load())) {
        d.inflight.fetch_sub(1);
        raise(kInvalidValue, "the execution plan of graph " + quoted(d.graph_name) +
                                 " was released (its handle closed or the plan destroyed)");
        return false;
    }
    return true;
}

// Dispatch (spec 4.6): overrides -> the override entry, else the plain entry. Requires enter().
bool call_plugin(PlanData& d, const CallArgs& a) {
    if (a.num_overrides) {
        if (!d.override_refusal.empty()) {
            d.inflight.fetch_sub(1);
            raise(kGraphNotSupported, "executing graph " + quoted(d.graph_name) + " on engine " +
                                          std::to_string(d.engine_id) + ": NOT_SUPPORTED: " + d.override_refusal);
            return false;
        }
        if (!d.override_enabled) {
            d.inflight.fetch_sub(1);
            raise(kInvalidValue, "graph " + quoted(d.graph_name) +
                                     " was built without set_override_shape_enabled(True); overrides refused");
            return false;
        }
    }
    hipdnnPluginStatus_t status;
    std::string last;
    const PlanData* outer = tl_executing;
    tl_executing = &d;
    Py_BEGIN_ALLOW_THREADS
    if (a.num_overrides) {
        status = d.with_overrides(d.plugin_handle, d.context, a.workspace, a.buffers, a.num_buffers, a.num_overrides,
                                  a.override_uids, a.lengths, a.shapes, a.strides);
    } else {
        status = d.plain(d.plugin_handle, d.context, a.workspace, a.buffers, a.num_buffers);
    }
    if (status != HIPDNN_PLUGIN_STATUS_SUCCESS && d.last_error) {
        const char* text = nullptr;
        d.last_error(&text);  // thread-local in the plugin: read on this thread, right away
        if (text) last = printable_message(text);
    }
    Py_END_ALLOW_THREADS
    tl_executing = outer;
    d.inflight.fetch_sub(1);
    if (status != HIPDNN_PLUGIN_STATUS_SUCCESS) {
        static const char* names[] = {"HIPDNN_PLUGIN_STATUS_SUCCESS",        "HIPDNN_PLUGIN_STATUS_BAD_PARAM",
                                      "HIPDNN_PLUGIN_STATUS_INVALID_VALUE",  "HIPDNN_PLUGIN_STATUS_INTERNAL_ERROR",
                                      "HIPDNN_PLUGIN_STATUS_ALLOC_FAILED",   "HIPDNN_PLUGIN_STATUS_NOT_APPLICABLE",
                                      "HIPDNN_PLUGIN_STATUS_NOT_INITIALIZED"};
        int s = static_cast<int>(status);
        std::string sname = (s >= 0 && s < 7) ? names[s] : "status " + std::to_string(s);
        std::string entry = a.num_overrides ? "hipdnnEnginePluginExecuteOpGraphWithOverrides"
                                            : "hipdnnEnginePluginExecuteOpGraph";
        raise(kBackendError, "executing graph " + quoted(d.graph_name) + " on engine " + std::to_string(d.engine_id) +
                                 ": plugin " + quoted(d.plugin_name) + ": " + entry + " failed with " + sname +
                                 (last.empty() ? "" : ": " + last));
        return false;
    }
    return true;
}

}  // namespace hipdnn_core
