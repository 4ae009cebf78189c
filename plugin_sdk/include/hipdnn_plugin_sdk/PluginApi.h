/*
 * hipdnn plugin SDK: entry points every plugin exports, whatever its type.
 *
 * Required: hipdnnPluginGetName, hipdnnPluginGetVersion, hipdnnPluginGetType,
 * hipdnnPluginGetLastErrorString.
 * Optional (the host copes with their absence): hipdnnPluginGetApiVersion
 * (absent means "1.0.0"), hipdnnPluginSetLoggingCallback, hipdnnPluginSetLogLevel.
 *
 * Strings returned through const char** stay owned by the plugin and must stay
 * valid until the next call into the plugin on the same thread.
 */
#ifndef HIPDNN_PLUGIN_SDK_PLUGIN_API_H
#define HIPDNN_PLUGIN_SDK_PLUGIN_API_H

#include "PluginApiDataTypes.h"

#ifdef __cplusplus
extern "C" {
#endif

/* CFFI:BEGIN */
/* The plugin's name, e.g. "hipdnn_cpu_engine". */
HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t hipdnnPluginGetName(const char** name);

/* The plugin's own release version (free form, usually MAJOR.MINOR.PATCH). */
HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t hipdnnPluginGetVersion(const char** version);

/* The plugin SDK API version the plugin implements, "MAJOR.MINOR.PATCH". */
HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t hipdnnPluginGetApiVersion(const char** version);

HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t hipdnnPluginGetType(hipdnnPluginType_t* type);

/* The message of the last failure on the calling thread ("" when none). */
HIPDNN_PLUGIN_EXPORT void hipdnnPluginGetLastErrorString(const char** error_str);

HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t hipdnnPluginSetLoggingCallback(hipdnnCallback_t callback);

HIPDNN_PLUGIN_NODISCARD HIPDNN_PLUGIN_EXPORT hipdnnPluginStatus_t hipdnnPluginSetLogLevel(hipdnnSeverity_t level);
/* CFFI:END */

#ifdef __cplusplus
}
#endif

#endif /* HIPDNN_PLUGIN_SDK_PLUGIN_API_H */
