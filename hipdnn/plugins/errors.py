"""Errors raised by the plugin layer."""

from __future__ import annotations


class PluginError(Exception):
    """A plugin entry returned a failure status.

    ``status`` is the plugin's hipdnnPluginStatus_t, ``plugin`` its name and
    ``detail`` what its hipdnnPluginGetLastErrorString said right after the call.
    """

    def __init__(self, plugin: str, entry: str, status: int, detail: str) -> None:
        self.plugin = plugin
        self.entry = entry
        self.status = status
        self.detail = detail
        name = PLUGIN_STATUS_NAMES.get(status, f"status {status}")
        msg = f"plugin {plugin!r}: {entry} failed with {name}"
        if detail:
            msg += f": {detail}"
        super().__init__(msg)


PLUGIN_STATUS_NAMES = {
    0: "HIPDNN_PLUGIN_STATUS_SUCCESS",
    1: "HIPDNN_PLUGIN_STATUS_BAD_PARAM",
    2: "HIPDNN_PLUGIN_STATUS_INVALID_VALUE",
    3: "HIPDNN_PLUGIN_STATUS_INTERNAL_ERROR",
    4: "HIPDNN_PLUGIN_STATUS_ALLOC_FAILED",
    5: "HIPDNN_PLUGIN_STATUS_NOT_APPLICABLE",
    6: "HIPDNN_PLUGIN_STATUS_NOT_INITIALIZED",
}
