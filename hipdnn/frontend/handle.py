"""hipdnn.Handle: where engine plugins are found and which ones a handle loads."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

from hipdnn.backend import (
    ENV_PLUGIN_DIR,
    BackendHandle,
    Discovery,
    LoadedPlugin,
    PluginLoadingMode,
    SkippedPlugin,
    builtin_engine_dirs,
    describe,
    discover_candidates,
    env_plugin_dirs,
)
from hipdnn.frontend.args import int_arg, path_list_arg, refuse

ENV_LOG_LEVEL = "HIPDNN_LOG_LEVEL"

__all__ = [
    "ENV_LOG_LEVEL",
    "ENV_PLUGIN_DIR",
    "Handle",
    "PluginLoadingMode",
    "builtin_engine_dirs",
    "env_plugin_dirs",
    "log_level_from_env",
]


def log_level_from_env() -> int:
    """HIPDNN_LOG_LEVEL (a logging level name or number); unset: the ``hipdnn`` logger's level."""
    value = os.environ.get(ENV_LOG_LEVEL, "").strip().upper()
    if not value:
        return logging.getLogger("hipdnn").getEffectiveLevel()
    if value.isdigit():
        return int(value)
    level = logging.getLevelName(value)
    if isinstance(level, int):
        return level
    logging.getLogger("hipdnn").warning("%s=%r is not a logging level; using WARNING", ENV_LOG_LEVEL, value)
    return logging.WARNING


def _loading_mode(value: object, what: str) -> PluginLoadingMode:
    if isinstance(value, PluginLoadingMode):
        return value
    try:
        return PluginLoadingMode(value)  # its value as a string ("additive", "absolute")
    except (ValueError, TypeError):
        names = ", ".join(m.name for m in PluginLoadingMode)
        raise refuse(what, f"{value!r} is not a PluginLoadingMode (one of {names})") from None


class Handle:
    """Loads engine plugins when created. Search order (see ``hipdnn.plugins.discovery``): built-in
    engines, ``HIPDNN_PLUGIN_DIR`` (os.pathsep-separated directories), packages registered under the
    ``hipdnn.engine_plugins`` entry-point group, then ``plugin_paths`` (ADDITIVE) — or ``plugin_paths``
    alone (ABSOLUTE). A directory is scanned non-recursively in name order; a file is taken as is.
    Plugin instances, engine-id claims and the skipped list belong to this handle alone; only the
    opened library files are shared with other handles."""

    def __init__(
        self,
        plugin_paths: Sequence[str | os.PathLike[str]] | None = None,
        plugin_loading_mode: PluginLoadingMode = PluginLoadingMode.ADDITIVE,
        stream: int | None = None,
    ) -> None:
        plugin_paths = path_list_arg(plugin_paths, "Handle: plugin_paths")
        plugin_loading_mode = _loading_mode(plugin_loading_mode, "Handle: plugin_loading_mode")
        level = log_level_from_env()
        if os.environ.get(ENV_LOG_LEVEL):
            logging.getLogger("hipdnn").setLevel(level)
        self.discovery: Discovery = discover_candidates(plugin_paths, plugin_loading_mode)
        self.plugin_search_paths: list[Path] = [s.path for s in self.discovery.search_paths]
        self._backend = BackendHandle(self.discovery.candidates, level, self.discovery.rejected)
        if stream is not None:
            self.set_stream(stream)

    @staticmethod
    def discover(
        plugin_paths: Sequence[str | os.PathLike[str]] | None = None,
        plugin_loading_mode: PluginLoadingMode = PluginLoadingMode.ADDITIVE,
    ) -> Discovery:
        """What ``Handle(plugin_paths, plugin_loading_mode)`` would try to load, in order, with where
        each file came from, and what it would refuse up front. Opens nothing."""
        return discover_candidates(
            path_list_arg(plugin_paths, "Handle.discover: plugin_paths"),
            _loading_mode(plugin_loading_mode, "Handle.discover: plugin_loading_mode"),
        )

    @property
    def backend(self) -> BackendHandle:
        return self._backend

    def set_stream(self, stream: int) -> None:
        self._backend.set_stream(int_arg(stream, "Handle: stream", 0, (1 << 64) - 1))

    def get_stream(self) -> int:
        return self._backend.stream

    def loaded_plugins(self) -> list[LoadedPlugin]:
        return [describe(p) for p in self._backend.plugins]

    def skipped_plugins(self) -> list[SkippedPlugin]:
        return list(self._backend.skipped)

    def close(self) -> None:
        """Destroy the handle's plans and plugin instances now rather than at garbage collection."""
        self._backend.close()

    def __enter__(self) -> Handle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        names = ", ".join(f"{p.name} {p.version}" for p in self.loaded_plugins())
        return f"Handle(plugins=[{names}])"
