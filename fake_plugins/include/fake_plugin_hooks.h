/*
 * Test hooks exported by every fake engine plugin (fake_plugins/fake_plugin.c).
 *
 * These functions are not part of the plugin SDK: the test suite loads a fake
 * plugin with cffi next to the host and uses them to inspect what the host
 * passed through the C ABI and to steer the plugin's behaviour.
 *
 * The declarations between the CFFI markers are plain C apart from the
 * HIPDNN_PLUGIN_EXPORT macro, so hipdnn.plugins._cdef.declarations_from_header()
 * can turn them into cffi declarations (load sdk_cdef() first).
 *
 * All hooks are thread safe. State (call log and configuration) is global to
 * one loaded copy of the library: a host and a test that dlopen the same path
 * share it.
 */
#ifndef HIPDNN_FAKE_PLUGIN_HOOKS_H
#define HIPDNN_FAKE_PLUGIN_HOOKS_H

#include <stdint.h>

#include "hipdnn_plugin_sdk/PluginApiDataTypes.h"

#ifdef __cplusplus
extern "C" {
#endif

/* CFFI:BEGIN */
/* The call log as a JSON array of objects, one per recorded call, oldest first.
 * Every object has "entry" (the entry point without its hipdnnEnginePlugin
 * prefix) and "status" (the status the call returned); see
 * fake_plugins/README.md for the other fields. Pointers and hashes are printed
 * as unsigned decimal integers, int64 values as exact decimal integers.
 * The string is owned by the plugin and stays valid until the next call of
 * fakePluginGetCallLog, fakePluginResetCallLog or fakePluginResetState.
 * NULL only when memory ran out. */
HIPDNN_PLUGIN_EXPORT const char* fakePluginGetCallLog(void);

/* Number of records in the call log. */
HIPDNN_PLUGIN_EXPORT uint64_t fakePluginGetCallCount(void);

/* Empties the call log. */
HIPDNN_PLUGIN_EXPORT void fakePluginResetCallLog(void);

/* Empties the call log and restores every setting below to its default. */
HIPDNN_PLUGIN_EXPORT void fakePluginResetState(void);

/* 0: GetApplicableEngineIds reports no engine. Non-zero (default): it reports
 * the plugin's single engine for every graph. */
HIPDNN_PLUGIN_EXPORT void fakePluginSetApplicable(int applicable);

/* status != 0: ExecuteOpGraph and ExecuteOpGraphWithOverrides return status and
 * set the last-error string to a copy of message (NULL reads as ""), after
 * recording the call. status == 0 (default): they succeed. */
HIPDNN_PLUGIN_EXPORT void fakePluginSetExecuteFailure(int status, const char* message);

/* Workspace bytes reported by GetWorkspaceSize and captured by execution
 * contexts created afterwards (default 0). */
HIPDNN_PLUGIN_EXPORT void fakePluginSetWorkspaceSize(uint64_t bytes);

/* The serialized EngineDetails GetEngineDetails returns from now on (a copy is
 * kept; NULL or size 0: the default empty details). Lets a test declare, for
 * instance, the device-memory behavior note of a GPU engine. */
HIPDNN_PLUGIN_EXPORT void fakePluginSetEngineDetails(const uint8_t* data, uint64_t size);

/* The plugin's name (same string as hipdnnPluginGetName). */
HIPDNN_PLUGIN_EXPORT const char* fakePluginGetName(void);

/* Live objects: handles created and not destroyed, execution contexts created
 * and not destroyed (contexts freed by Destroy of their handle excluded). */
HIPDNN_PLUGIN_EXPORT uint64_t fakePluginGetLiveHandleCount(void);
HIPDNN_PLUGIN_EXPORT uint64_t fakePluginGetLiveContextCount(void);
/* CFFI:END */

#ifdef __cplusplus
}
#endif

#endif /* HIPDNN_FAKE_PLUGIN_HOOKS_H */
