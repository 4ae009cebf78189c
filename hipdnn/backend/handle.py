"""The backend handle: one set of plugin instances, a stream, and the plans built on it."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hipdnn.backend.errors import ErrorCode, HipdnnError
from hipdnn.backend.execute_core import Gate
from hipdnn.backend.placement import MEMORY_PREFERENCES, probe_engine_memory, probe_runs_here
from hipdnn.backend.plan_cache import PlanCache
from hipdnn.plugins import EnginePlugin, PluginCandidate, PluginError, SkippedPlugin, instantiate

log = logging.getLogger("hipdnn.backend")


class BackendHandle:
    """Owns this handle's plugin instances (nothing is shared with other handles but the opened
    library files). Plans created on the handle are destroyed before the plugins are."""

    def __init__(
        self,
        candidates: Sequence[Path | PluginCandidate],
        log_level: int = logging.WARNING,
        rejected: Sequence[SkippedPlugin] = (),
        memory_preference: str = "auto",
        device_name: str | None = None,
        engine_knobs: dict[str, int] | None = None,
    ) -> None:
        """``candidates`` are opened in order; ``rejected`` (what discovery refused) is reported
        with the plugins that fail to load. ``memory_preference`` (one of MEMORY_PREFERENCES) ranks
        and filters engines by where they take memory; ``device_name`` is the user's word for it."""
        if memory_preference not in MEMORY_PREFERENCES:
            raise HipdnnError(
                ErrorCode.INVALID_VALUE, f"memory_preference {memory_preference!r} is not one of {MEMORY_PREFERENCES}"
            )
        self.memory_preference = memory_preference
        self.device_name = device_name
        #: integer knob settings (knob id -> value) handed to every engine that declares the knob
        self.engine_knobs: dict[str, int] = dict(engine_knobs or {})
        self.plugins: list[EnginePlugin]
        self.skipped: list[SkippedPlugin]
        self.plugins, self.skipped = instantiate(candidates, log_level, rejected)
        self.engine_to_plugin: dict[int, EnginePlugin] = {
            engine_id: plugin for plugin in self.plugins for engine_id in plugin.engine_ids
        }
        self.stream = 0
        # Live execution contexts by address. Plans register theirs here so that closing the handle
        # destroys every context before the plugin instances, whatever order objects are collected in.
        self._contexts: dict[int, tuple[EnginePlugin, Any, Any]] = {}
        self._lock = threading.Lock()
        self._closed = False
        #: closed first by close(): every plan's compiled execute path refuses calls after that
        self.gate = Gate()
        self._close_lock = threading.Lock()
        self.plan_cache = PlanCache()
        self.fingerprints = tuple(p.library.fingerprint() for p in self.plugins)
        self._engine_memory: dict[int, str] | None = None
        self._device_engines_here: dict[int, str] | None = None

    def engine_memory(self) -> dict[int, str]:
        """engine id -> "host", "device" or "unknown", as each engine declares it for a probe graph
        (asked once, on first use; a real graph's details decide at planning)."""
        with self._lock:
            if self._engine_memory is None:
                found: dict[int, str] = {}
                for plugin in self.plugins:
                    found.update(probe_engine_memory(plugin))
                self._engine_memory = found
            return dict(self._engine_memory)

    def device_engines_here(self) -> dict[int, str]:
        """device-memory engine id -> "" when it can run on this machine, else why not in its own
        words (e.g. "no GPU device"), from the probe graphs (asked once, on first use: handles
        created with device="cuda"/"hip", and ``device_choice``)."""
        memory = self.engine_memory()
        with self._lock:
            if self._device_engines_here is None:
                found: dict[int, str] = {}
                for plugin in self.plugins:
                    ids = [e for e in plugin.engine_ids if memory.get(e) == "device"]
                    if ids:
                        found.update(probe_runs_here(plugin, ids))
                self._device_engines_here = found
            return dict(self._device_engines_here)

    @property
    def closed(self) -> bool:
        return self._closed

    def set_stream(self, stream: int) -> None:
        """hipdnnSetStream: every plugin of the handle gets the stream through SetStream."""
        for plugin in self.plugins:
            try:
                plugin.set_stream(stream)
            except PluginError as exc:
                log.warning("%s", exc)
        self.stream = stream

    def register_context(self, plugin: EnginePlugin, context: Any, core: Any = None) -> int:
        """Record a plan's context (and its compiled execute path, whose calls in flight are waited
        for before the context is destroyed)."""
        key = id(context)
        with self._lock:
            self._contexts[key] = (plugin, context, core)
        return key

    def destroy_context(self, key: int) -> None:
        """Destroy a registered context once; later calls (or calls after close) do nothing. Calls in
        flight on it finish first; calls made after it is released raise HipdnnError."""
        with self._lock:
            entry = self._contexts.get(key)
        if entry is None:
            return
        plugin, context, core = entry
        if core is not None:
            core.release()  # raises (and keeps the context) when called from inside one of its calls
        with self._lock:
            entry = self._contexts.pop(key, None)
        if entry is not None:
            try:
                plugin.destroy_execution_context(context)
            except PluginError as exc:
                log.warning("%s", exc)

    def close(self) -> None:
        """Refuse new calls, wait for the calls in flight, then destroy every context and plugin
        instance. Safe while other threads execute: they finish, or are refused with HipdnnError."""
        with self._close_lock:
            if self._closed:
                return
            self.gate.close()
            self._closed = True
            self.plan_cache.clear()
            for key in list(self._contexts):
                self.destroy_context(key)
            for plugin in self.plugins:
                plugin.destroy()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # never raise from a finalizer
            self.close()

    def plugin_for(self, engine_id: int) -> Any:
        return self.engine_to_plugin.get(engine_id)
