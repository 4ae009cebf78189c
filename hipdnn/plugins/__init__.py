"""Plugin layer: discovery, the cffi loader, API-version rules and per-handle engine plugin instances."""

from hipdnn.plugins.discovery import (
    ENTRY_POINT_GROUP,
    Discovery,
    PluginCandidate,
    PluginLoadingMode,
    PluginSource,
    SearchPath,
    discover_candidates,
    unsafe_reason,
)
from hipdnn.plugins.errors import PluginError
from hipdnn.plugins.loader import (
    EnginePlugin,
    LoadedPlugin,
    PluginFingerprint,
    SkippedPlugin,
    describe,
    discover,
    instantiate,
)
from hipdnn.plugins.version import (
    DEFAULT_API_VERSION,
    DYNAMIC_API_VERSION,
    OVERRIDE_API_VERSION,
    parse_api_version,
    required_api_version,
)

__all__ = [
    "DEFAULT_API_VERSION",
    "DYNAMIC_API_VERSION",
    "ENTRY_POINT_GROUP",
    "OVERRIDE_API_VERSION",
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
    "describe",
    "discover",
    "discover_candidates",
    "instantiate",
    "parse_api_version",
    "required_api_version",
    "unsafe_reason",
]
