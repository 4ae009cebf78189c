"""hipdnn.Handle: where engine plugins are found and which ones a handle loads."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from enum import Enum
from pathlib import Path

from hipdnn.backend import BackendHandle
from hipdnn.plugins import LoadedPlugin, SkippedPlugin, describe, discover

ENV_PLUGIN_DIR = "HIPDNN_PLUGIN_DIR"
ENV_LOG_LEVEL = "HIPDNN_LOG_LEVEL"


class PluginLoadingMode(Enum):
    #: the given paths come after the defaults (built-in engines, then HIPDNN_PLUGIN_DIR)
    ADDITIVE = "additive"
    #: only the given paths are searched
    ABSOLUTE = "absolute"


def builtin_engine_dirs() -> list[Path]:
    """The engines shipped inside the package. In an editable install the package's Python files stay
    in the source tree while built plugins land in site-packages, so every directory of the package's
    search path is considered."""
    import hipdnn

    dirs: list[Path] = []
    for root in getattr(hipdnn, "__path__", []):
        candidate = Path(root) / "engines"
        if candidate.is_dir() and candidate not in dirs:
            dirs.append(candidate)
    return dirs


def env_plugin_dirs() -> list[Path]:
    value = os.environ.get(ENV_PLUGIN_DIR, "")
    return [Path(p) for p in value.split(os.pathsep) if p]


def log_level_from_env() -> int:
    value = os.environ.get(ENV_LOG_LEVEL, "").strip().upper()
    if not value:
        return logging.getLogger("hipdnn").getEffectiveLevel()
    if value.isdigit():
        return int(value)
    level = logging.getLevelName(value)
    return level if isinstance(level, int) else logging.WARNING


class Handle:
    """Loads engine plugins when created, in this order: built-in engines, ``HIPDNN_PLUGIN_DIR``
    (os.pathsep-separated directories), then ``plugin_paths`` (ADDITIVE) — or ``plugin_paths`` alone
    (ABSOLUTE). A directory is scanned non-recursively in name order; a file is taken as is.
    Plugin instances belong to this handle alone."""

    def __init__(
        self,
        plugin_paths: Sequence[str | os.PathLike[str]] | None = None,
        plugin_loading_mode: PluginLoadingMode = PluginLoadingMode.ADDITIVE,
        stream: int | None = None,
    ) -> None:
        given = [Path(p) for p in (plugin_paths or [])]
        if plugin_loading_mode is PluginLoadingMode.ABSOLUTE:
            search = given
        else:
            builtin = builtin_engine_dirs()
            if not builtin:
                logging.getLogger("hipdnn").warning(
                    "no built-in engines directory next to the hipdnn package: importing from a source "
                    "checkout without building? Install with `pip install -e .`"
                )
            search = builtin + env_plugin_dirs() + given
        level = log_level_from_env()
        if os.environ.get(ENV_LOG_LEVEL):
            logging.getLogger("hipdnn").setLevel(level)
        self.plugin_search_paths = search
        self._backend = BackendHandle(discover(search), level)
        if stream is not None:
            self.set_stream(stream)

    @property
    def backend(self) -> BackendHandle:
        return self._backend

    def set_stream(self, stream: int) -> None:
        self._backend.set_stream(int(stream))

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
