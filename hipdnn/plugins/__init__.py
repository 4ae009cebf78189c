"""Plugin layer: discovery, the cffi loader, API-version rules and per-handle engine plugin instances."""

from hipdnn.plugins._cdef import sdk_include_dir
from hipdnn.plugins.discovery import (
    ENTRY_POINT_GROUP,
    ENV_PLUGIN_DIR,
    Discovery,
    PluginCandidate,
    PluginLoadingMode,
    PluginSource,
    SearchPath,
    builtin_engine_dirs,
    discover,
    discover_candidates,
    env_plugin_dirs,
    unsafe_reason,
)
from hipdnn.plugins.errors import PluginError
from hipdnn.plugins.loader import (
    MAX_ENGINE_DETAILS_BYTES,
    MAX_WORKSPACE_BYTES,
    EnginePlugin,
    LoadedPlugin,
    PluginFingerprint,
    SkippedPlugin,
    describe,
    instantiate,
)
from hipdnn.plugins.text import MAX_IDENTITY_BYTES, MAX_MESSAGE_BYTES, printable
from hipdnn.plugins.version import (
    DEFAULT_API_VERSION,
    DYNAMIC_API_VERSION,
    FP8_API_VERSION,
    OVERRIDE_API_VERSION,
    RAGGED_PAGED_API_VERSION,
    SOFTCAP_API_VERSION,
    parse_api_version,
    required_api_version,
)

__all__ = [
    "DEFAULT_API_VERSION",
    "DYNAMIC_API_VERSION",
    "ENTRY_POINT_GROUP",
    "ENV_PLUGIN_DIR",
    "MAX_IDENTITY_BYTES",
    "MAX_MESSAGE_BYTES",
    "FP8_API_VERSION",
    "MAX_WORKSPACE_BYTES",
    "OVERRIDE_API_VERSION",
    "RAGGED_PAGED_API_VERSION",
    "SOFTCAP_API_VERSION",
    "Discovery",
    "EnginePlugin",
    "LoadedPlugin",
    "PluginCandidate",
    "PluginError",
    "PluginFingerprint",
    "PluginLoadingMode",
    "PluginSource",
    "SearchPath",
    "SkippedPlugin",
    "builtin_engine_dirs",
    "describe",
    "discover",
    "discover_candidates",
    "env_plugin_dirs",
    "instantiate",
    "parse_api_version",
    "printable",
    "required_api_version",
    "sdk_include_dir",
    "unsafe_reason",
]
