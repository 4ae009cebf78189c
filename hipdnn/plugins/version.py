"""Plugin API versions: parsing and the per-graph minimum (spec sections 4.5 and 6.7)."""

from __future__ import annotations

import re

from packaging.version import Version

#: What a plugin that does not export hipdnnPluginGetApiVersion counts as.
DEFAULT_API_VERSION = Version("1.0.0")
#: The first API version with hipdnnEnginePluginExecuteOpGraphWithOverrides.
OVERRIDE_API_VERSION = Version("1.1.0")
#: The first API version that understands dynamic tensors (is_dynamic, -1 dims, stride order).
DYNAMIC_API_VERSION = Version("1.2.0")
#: The only API major this host speaks.
SUPPORTED_API_MAJOR = 1

_SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$")


def parse_api_version(text: str) -> Version:
    """Parse a plugin's "MAJOR.MINOR.PATCH"; anything else raises ValueError."""
    if not _SEMVER.match(text):
        raise ValueError(f"API version {text!r} is not MAJOR.MINOR.PATCH")
    return Version(text)


def required_api_version(*, is_override_shape_enabled: bool, has_dynamic_tensors: bool = False) -> Version:
    """The lowest plugin API version allowed to serve a graph using these features."""
    if has_dynamic_tensors:
        return DYNAMIC_API_VERSION
    return OVERRIDE_API_VERSION if is_override_shape_enabled else DEFAULT_API_VERSION
