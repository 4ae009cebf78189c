"""Plugin layer: the cffi loader, API-version rules and per-handle engine plugin instances."""

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
    OVERRIDE_API_VERSION,
    parse_api_version,
    required_api_version,
)

__all__ = [
    "DEFAULT_API_VERSION",
    "OVERRIDE_API_VERSION",
    "EnginePlugin",
    "LoadedPlugin",
    "PluginError",
    "PluginFingerprint",
    "SkippedPlugin",
    "describe",
    "discover",
    "instantiate",
    "parse_api_version",
    "required_api_version",
]
