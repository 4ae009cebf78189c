/*
 * A dependency that libhostile_origin.so finds only through its RUNPATH "$ORIGIN"
 * (fake_plugins/CMakeLists.txt): the host must load such a plugin by its path,
 * since the dynamic linker takes $ORIGIN from the name given to dlopen.
 */
#include "hipdnn_plugin_sdk/PluginApiDataTypes.h"

HIPDNN_PLUGIN_EXPORT int hostile_origin_dep_engine_id(void);

HIPDNN_PLUGIN_EXPORT int hostile_origin_dep_engine_id(void)
{
    return 9702;
}
