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
#: The first API version that understands ragged offsets (TensorAttributes.ragged_offset_tensor_uid)
#: and paged K/V (SdpaAttributes.page_table_k/v_tensor_uid), rfcs/0012-ragged-and-paged.md.
RAGGED_PAGED_API_VERSION = Version("1.3.0")
#: The first API version that understands score softcapping (SdpaAttributes.softcap and
#: SdpaBackwardAttributes.softcap), rfcs/0013-softcap.md. A plugin below it would ignore the field
#: and return uncapped attention, so it is never offered such a graph.
SOFTCAP_API_VERSION = Version("1.4.0")
#: The first API version that serves FP8 attention (SdpaAttributes' descale / scale / amax uids:
#: Graph.sdpa_fp8), rfcs/0014-fp8-attention.md. The fields were in the table from the start, but an
#: engine below it may read none of them and compute a plain SDPA on the FP8 bytes.
FP8_API_VERSION = Version("1.5.0")
#: The first API version that serves the FP8 backward (SdpaBackwardAttributes' descale / scale / amax
#: uids, appended in this version: Graph.sdpa_fp8_backward). A 1.5.0 engine knows the FP8 forward but
#: not these fields, and would run a plain backward on the FP8 bytes.
FP8_BACKWARD_API_VERSION = Version("1.6.0")
#: The only API major this host speaks.
SUPPORTED_API_MAJOR = 1

# Whole-string match over ASCII digits: with `$`, "1.1.0\n" matched (it matches before a final
# newline), and `\d` takes any Unicode decimal digit ("1١.1.0"). No leading zeros, no spaces.
_SEMVER = re.compile(r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)")


def parse_api_version(text: str) -> Version:
    """Parse a plugin's "MAJOR.MINOR.PATCH" (ASCII digits, no leading zeros, nothing around it);
    anything else raises ValueError, whose message shows the string with every non-ASCII character
    escaped."""
    if _SEMVER.fullmatch(text) is None:
        shown = ascii(text) if len(text) <= 64 else f"{ascii(text[:64])}... ({len(text)} characters)"
        raise ValueError(f"API version {shown} is not MAJOR.MINOR.PATCH")
    return Version(text)


def required_api_version(
    *,
    is_override_shape_enabled: bool,
    has_dynamic_tensors: bool = False,
    has_ragged_or_paged: bool = False,
    has_softcap: bool = False,
    has_fp8: bool = False,
    has_fp8_backward: bool = False,
) -> Version:
    """The lowest plugin API version allowed to serve a graph using these features."""
    if has_fp8_backward:
        return FP8_BACKWARD_API_VERSION
    if has_fp8:
        return FP8_API_VERSION
    if has_softcap:
        return SOFTCAP_API_VERSION
    if has_ragged_or_paged:
        return RAGGED_PAGED_API_VERSION
    if has_dynamic_tensors:
        return DYNAMIC_API_VERSION
    return OVERRIDE_API_VERSION if is_override_shape_enabled else DEFAULT_API_VERSION
