"""Finding, opening and vetting engine plugins through the C ABI (cffi, ABI mode).

A plugin file is opened once per process (RTLD_NOW | RTLD_NODELETE, never
closed: plugins with OpenMP or BLAS worker threads crash the process when
unloaded) and shared by every handle. Each handle then creates its own plugin
instance (hipdnnEnginePluginCreate), so handles never share plugin state.

Anything wrong with a plugin is contained: the plugin is skipped with a reason
that names the file, the rest load, and nothing is raised.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cffi
from packaging.version import Version

from hipdnn.plugins._cdef import sdk_cdef
from hipdnn.plugins.errors import PluginError
from hipdnn.plugins.version import (
    DEFAULT_API_VERSION,
    OVERRIDE_API_VERSION,
    SUPPORTED_API_MAJOR,
    parse_api_version,
)

log = logging.getLogger("hipdnn.plugins")

ffi = cffi.FFI()
ffi.cdef(sdk_cdef())

STATUS_SUCCESS = 0
PLUGIN_TYPE_ENGINE = 1

REQUIRED_BASE_ENTRIES = (
    "hipdnnPluginGetName",
    "hipdnnPluginGetVersion",
    "hipdnnPluginGetType",
    "hipdnnPluginGetLastErrorString",
)
REQUIRED_ENGINE_ENTRIES = (
    "hipdnnEnginePluginGetAllEngineIds",
    "hipdnnEnginePluginCreate",
    "hipdnnEnginePluginDestroy",
    "hipdnnEnginePluginSetStream",
    "hipdnnEnginePluginGetApplicableEngineIds",
    "hipdnnEnginePluginGetEngineDetails",
    "hipdnnEnginePluginDestroyEngineDetails",
    "hipdnnEnginePluginGetWorkspaceSize",
    "hipdnnEnginePluginCreateExecutionContext",
    "hipdnnEnginePluginDestroyExecutionContext",
    "hipdnnEnginePluginGetWorkspaceSizeFromExecutionContext",
    "hipdnnEnginePluginExecuteOpGraph",
)
OPTIONAL_ENTRIES = (
    "hipdnnPluginGetApiVersion",
    "hipdnnPluginSetLoggingCallback",
    "hipdnnPluginSetLogLevel",
    "hipdnnEnginePluginExecuteOpGraphWithOverrides",
)

# hipdnnSeverity_t -> logging level
_SEVERITY_TO_LEVEL = {0: logging.INFO, 1: logging.WARNING, 2: logging.ERROR, 3: logging.CRITICAL}
_SHARED_LIBRARY_SUFFIXES = (".so", ".dylib", ".dll")


def const_data(blob: bytes) -> tuple[Any, Any]:
    """A hipdnnPluginConstData_t* over ``blob``; keep the second value alive for the call."""
    data = ffi.new("hipdnnPluginConstData_t*")
    keep = ffi.from_buffer(blob) if blob else ffi.NULL
    data.ptr = keep
    data.size = len(blob)
    return data, keep


def is_shared_library_name(path: Path) -> bool:
    name = path.name
    return name.endswith(_SHARED_LIBRARY_SUFFIXES) or ".so." in name


def _c_string(ptr: Any) -> str:
    if ptr == ffi.NULL:
        return ""
    return bytes(ffi.string(ptr)).decode("utf-8", "replace")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class PluginFingerprint:
    """Identifies one build of one plugin; meant for cache keys."""

    name: str
    version: str
    api_version: str
    sha256: str


class PluginLoadError(Exception):
    """A plugin file was refused; ``reason`` says why."""


class PluginLibrary:
    """One opened plugin file, shared process-wide. Calls go through :meth:`call`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.lib: Any = ffi.dlopen(str(path), ffi.RTLD_NOW | getattr(os, "RTLD_NODELETE", 0))
        except OSError as exc:
            raise PluginLoadError(f"not a loadable shared library: {exc}") from None
        self._entries: dict[str, Any] = {}
        for entry in REQUIRED_BASE_ENTRIES + REQUIRED_ENGINE_ENTRIES:
            fn = self._resolve(entry)
            if fn is None:
                raise PluginLoadError(f"missing required entry {entry}")
            self._entries[entry] = fn
        for entry in OPTIONAL_ENTRIES:
            fn = self._resolve(entry)
            if fn is not None:
                self._entries[entry] = fn
        self.name = "<unnamed>"
        self.name = self._query_string("hipdnnPluginGetName")
        self.version = self._query_string("hipdnnPluginGetVersion")
        ptype = ffi.new("hipdnnPluginType_t*")
        self._check("hipdnnPluginGetType", self._entries["hipdnnPluginGetType"](ptype))
        if ptype[0] != PLUGIN_TYPE_ENGINE:
            raise PluginLoadError(f"plugin type {int(ptype[0])} is not HIPDNN_PLUGIN_TYPE_ENGINE")
        if "hipdnnPluginGetApiVersion" in self._entries:
            text = self._query_string("hipdnnPluginGetApiVersion")
            try:
                self.api_version: Version = parse_api_version(text)
            except ValueError as exc:
                raise PluginLoadError(f"unparsable API version: {exc}") from None
        else:
            self.api_version = DEFAULT_API_VERSION
        if self.api_version.major != SUPPORTED_API_MAJOR:
            raise PluginLoadError(
                f"API version {self.api_version} has major {self.api_version.major}, "
                f"this host speaks major {SUPPORTED_API_MAJOR}"
            )
        self.engine_ids = self._query_engine_ids()
        self.sha256 = file_sha256(path)
        self._log_callback: Any = None

    # -- symbol plumbing ---------------------------------------------------------------------
    def _resolve(self, entry: str) -> Any:
        try:
            return getattr(self.lib, entry)
        except AttributeError:
            return None

    def has_entry(self, entry: str) -> bool:
        return entry in self._entries

    @property
    def has_override_execute(self) -> bool:
        return "hipdnnEnginePluginExecuteOpGraphWithOverrides" in self._entries

    @property
    def optional_entries(self) -> tuple[str, ...]:
        return tuple(e for e in OPTIONAL_ENTRIES if e in self._entries)

    def last_error(self) -> str:
        out = ffi.new("const char**")
        try:
            self._entries["hipdnnPluginGetLastErrorString"](out)
        except Exception:  # a plugin's error reporting must never mask the original error
            return ""
        return _c_string(out[0])

    def _check(self, entry: str, status: int) -> None:
        if status != STATUS_SUCCESS:
            raise PluginError(self.name, entry, int(status), self.last_error())

    def call(self, entry: str, *args: Any) -> None:
        """Call an entry and raise PluginError (with the plugin's last error) on failure."""
        self._check(entry, self._entries[entry](*args))

    def call_status(self, entry: str, *args: Any) -> int:
        return int(self._entries[entry](*args))

    def _query_string(self, entry: str) -> str:
        out = ffi.new("const char**")
        try:
            self._check(entry, self._entries[entry](out))
        except PluginError as exc:
            raise PluginLoadError(str(exc)) from None
        if out[0] == ffi.NULL:
            raise PluginLoadError(f"{entry} returned a null string")
        return _c_string(out[0])

    def _query_engine_ids(self) -> tuple[int, ...]:
        fn = self._entries["hipdnnEnginePluginGetAllEngineIds"]
        count = ffi.new("uint32_t*")
        if fn(ffi.NULL, 0, count) != STATUS_SUCCESS:
            raise PluginLoadError(f"hipdnnEnginePluginGetAllEngineIds failed: {self.last_error()}")
        n = int(count[0])
        if n == 0:
            raise PluginLoadError("plugin reports zero engines")
        if n > 1 << 16:
            raise PluginLoadError(f"plugin reports an implausible {n} engines")
        ids = ffi.new("int64_t[]", n)
        count2 = ffi.new("uint32_t*")
        if fn(ids, n, count2) != STATUS_SUCCESS:
            raise PluginLoadError(f"hipdnnEnginePluginGetAllEngineIds failed: {self.last_error()}")
        if int(count2[0]) != n:
            raise PluginLoadError(f"engine count changed between calls ({n} then {int(count2[0])})")
        engine_ids = tuple(int(ids[i]) for i in range(n))
        if len(set(engine_ids)) != n:
            raise PluginLoadError(f"duplicate engine ids {sorted(engine_ids)}")
        return engine_ids

    # -- logging -----------------------------------------------------------------------------
    def attach_logging(self, level: int) -> None:
        """Route the plugin's log callback into logging.getLogger('hipdnn.plugins.<name>')."""
        if "hipdnnPluginSetLoggingCallback" in self._entries and self._log_callback is None:
            logger = logging.getLogger(f"hipdnn.plugins.{self.name}")

            @ffi.callback("hipdnnCallback_t")
            def _sink(severity: int, message: Any) -> None:
                logger.log(_SEVERITY_TO_LEVEL.get(int(severity), logging.INFO), "%s", _c_string(message))

            self._log_callback = _sink  # kept alive for the life of the process
            status = self._entries["hipdnnPluginSetLoggingCallback"](_sink)
            if status != STATUS_SUCCESS:
                log.warning("%s: hipdnnPluginSetLoggingCallback failed: %s", self.path, self.last_error())
        if "hipdnnPluginSetLogLevel" in self._entries:
            severity = severity_for_level(level)
            if self._entries["hipdnnPluginSetLogLevel"](severity) != STATUS_SUCCESS:
                log.warning("%s: hipdnnPluginSetLogLevel failed: %s", self.path, self.last_error())

    def fingerprint(self) -> PluginFingerprint:
        return PluginFingerprint(self.name, self.version, str(self.api_version), self.sha256)


def severity_for_level(level: int) -> int:
    """Python logging level -> hipdnnSeverity_t (the least severe message to emit)."""
    if level <= logging.INFO:
        return 0
    if level <= logging.WARNING:
        return 1
    if level <= logging.ERROR:
        return 2
    if level <= logging.CRITICAL:
        return 3
    return 4


# -- process-wide library cache ---------------------------------------------------------------
_libraries: dict[str, PluginLibrary | PluginLoadError] = {}
_libraries_lock = threading.Lock()


def open_library(path: Path) -> PluginLibrary:
    """Open (once per process) and vet a plugin file; raises PluginLoadError with the reason."""
    key = os.path.realpath(path)
    with _libraries_lock:
        cached = _libraries.get(key)
        if cached is None:
            try:
                cached = PluginLibrary(Path(key))
            except PluginLoadError as exc:
                cached = exc
            except Exception as exc:  # containment: nothing a plugin does may escape
                cached = PluginLoadError(f"unexpected failure while loading: {exc!r}")
            _libraries[key] = cached
    if isinstance(cached, PluginLoadError):
        raise cached
    return cached


# -- per-handle plugin instances --------------------------------------------------------------
@dataclass
class SkippedPlugin:
    path: Path
    reason: str

    def __repr__(self) -> str:
        return f"SkippedPlugin(path={str(self.path)!r}, reason={self.reason!r})"


@dataclass
class EnginePlugin:
    """A plugin instance owned by one handle: the shared library plus this handle's plugin handle."""

    library: PluginLibrary
    handle: Any  # hipdnnEnginePluginHandle_t
    engine_ids: tuple[int, ...]
    _destroyed: bool = field(default=False, repr=False)

    @property
    def name(self) -> str:
        return self.library.name

    @property
    def api_version(self) -> Version:
        return self.library.api_version

    @property
    def has_override_execute(self) -> bool:
        return self.library.has_override_execute

    def supports_overrides(self) -> bool:
        return self.api_version >= OVERRIDE_API_VERSION and self.has_override_execute

    # -- engine entries; every failure raises PluginError carrying the plugin's last error ----
    def applicable_engine_ids(self, graph: bytes) -> list[int]:
        data, _keep = const_data(graph)
        count = ffi.new("uint32_t*")
        cap = len(self.library.engine_ids)
        ids = ffi.new("int64_t[]", max(cap, 1))
        self.library.call("hipdnnEnginePluginGetApplicableEngineIds", self.handle, data, ids, cap, count)
        n = int(count[0])
        if n > cap:
            raise PluginError(
                self.name, "hipdnnEnginePluginGetApplicableEngineIds", 3,
                f"reported {n} applicable engines but has only {cap}",
            )
        found = [int(ids[i]) for i in range(n)]
        unknown = [e for e in found if e not in self.library.engine_ids]
        if unknown:
            raise PluginError(
                self.name, "hipdnnEnginePluginGetApplicableEngineIds", 3,
                f"reported engine ids {unknown} it never declared",
            )
        return [e for e in found if e in self.engine_ids]

    def engine_details(self, engine_id: int, graph: bytes) -> bytes:
        data, _keep = const_data(graph)
        details = ffi.new("hipdnnPluginConstData_t*")
        self.library.call("hipdnnEnginePluginGetEngineDetails", self.handle, engine_id, data, details)
        try:
            size = int(details.size)
            return b"" if size == 0 or details.ptr == ffi.NULL else bytes(ffi.buffer(details.ptr, size))
        finally:
            self.library.call("hipdnnEnginePluginDestroyEngineDetails", self.handle, details)

    def workspace_size(self, engine_config: bytes, graph: bytes) -> int:
        cfg, _k1 = const_data(engine_config)
        data, _k2 = const_data(graph)
        out = ffi.new("size_t*")
        self.library.call("hipdnnEnginePluginGetWorkspaceSize", self.handle, cfg, data, out)
        return int(out[0])

    def create_execution_context(self, engine_config: bytes, graph: bytes) -> Any:
        cfg, _k1 = const_data(engine_config)
        data, _k2 = const_data(graph)
        out = ffi.new("hipdnnEnginePluginExecutionContext_t*")
        self.library.call("hipdnnEnginePluginCreateExecutionContext", self.handle, cfg, data, out)
        if out[0] == ffi.NULL:
            raise PluginError(
                self.name, "hipdnnEnginePluginCreateExecutionContext", 3, "returned a null execution context"
            )
        return out[0]

    def destroy_execution_context(self, context: Any) -> None:
        self.library.call("hipdnnEnginePluginDestroyExecutionContext", self.handle, context)

    def workspace_size_from_context(self, context: Any) -> int:
        out = ffi.new("size_t*")
        self.library.call("hipdnnEnginePluginGetWorkspaceSizeFromExecutionContext", self.handle, context, out)
        return int(out[0])

    def execute(self, context: Any, workspace: int, buffers: Sequence[tuple[int, int]]) -> None:
        """hipdnnEnginePluginExecuteOpGraph with (uid, pointer) pairs."""
        n = len(buffers)
        array = ffi.new("hipdnnPluginDeviceBuffer_t[]", max(n, 1))
        for i, (uid, ptr) in enumerate(buffers):
            array[i].uid = uid
            array[i].ptr = ffi.cast("void*", ptr)
        self.library.call(
            "hipdnnEnginePluginExecuteOpGraph", self.handle, context, ffi.cast("void*", workspace), array, n
        )

    def execute_with_overrides(
        self,
        context: Any,
        workspace: int,
        buffers: Sequence[tuple[int, int]],
        override_uids: Sequence[int],
        override_lengths: Sequence[int],
        flat_shapes: Sequence[int],
        flat_strides: Sequence[int],
    ) -> None:
        """hipdnnEnginePluginExecuteOpGraphWithOverrides: the flat payload (spec 4.3) is fanned out into
        one shape and one stride array per tensor (spec 4.4); all arrays live for this call only."""
        n = len(buffers)
        array = ffi.new("hipdnnPluginDeviceBuffer_t[]", max(n, 1))
        for i, (uid, ptr) in enumerate(buffers):
            array[i].uid = uid
            array[i].ptr = ffi.cast("void*", ptr)
        count = len(override_uids)
        uids = ffi.new("int64_t[]", list(override_uids) or [0])
        lengths = ffi.new("uint32_t[]", list(override_lengths) or [0])
        shapes_flat = ffi.new("int64_t[]", list(flat_shapes) or [0])
        strides_flat = ffi.new("int64_t[]", list(flat_strides) or [0])
        shape_ptrs = ffi.new("int64_t*[]", max(count, 1))
        stride_ptrs = ffi.new("int64_t*[]", max(count, 1))
        offset = 0
        for i, rank in enumerate(override_lengths):
            shape_ptrs[i] = shapes_flat + offset
            stride_ptrs[i] = strides_flat + offset
            offset += rank
        self.library.call(
            "hipdnnEnginePluginExecuteOpGraphWithOverrides",
            self.handle, context, ffi.cast("void*", workspace), array, n,
            count, uids, lengths, shape_ptrs, stride_ptrs,
        )

    def set_stream(self, stream: int) -> None:
        self.library.call("hipdnnEnginePluginSetStream", self.handle, ffi.cast("hipStream_t", stream))

    def destroy(self) -> None:
        if not self._destroyed:
            self._destroyed = True
            status = self.library.call_status("hipdnnEnginePluginDestroy", self.handle)
            if status != STATUS_SUCCESS:
                log.warning("%s: hipdnnEnginePluginDestroy failed: %s", self.name, self.library.last_error())


@dataclass(frozen=True)
class LoadedPlugin:
    """What ``Handle.loaded_plugins()`` reports about one plugin."""

    name: str
    version: str
    api_version: str
    path: str
    engine_ids: tuple[int, ...]
    has_override_execute: bool
    optional_entries: tuple[str, ...]
    fingerprint: PluginFingerprint


def describe(plugin: EnginePlugin) -> LoadedPlugin:
    lib = plugin.library
    return LoadedPlugin(
        name=lib.name,
        version=lib.version,
        api_version=str(lib.api_version),
        path=str(lib.path),
        engine_ids=plugin.engine_ids,
        has_override_execute=lib.has_override_execute,
        optional_entries=lib.optional_entries,
        fingerprint=lib.fingerprint(),
    )


def discover(paths: Iterable[Path]) -> list[Path]:
    """Expand directories (non-recursively, sorted by name) and files into candidate files, in order,
    without opening them. Duplicates (same real path) keep their first position."""
    seen: set[str] = set()
    out: list[Path] = []
    for path in paths:
        if path.is_dir():
            members = sorted(p for p in path.iterdir() if p.is_file() and is_shared_library_name(p))
        elif path.exists():
            members = [path]
        else:
            log.warning("plugin path %s does not exist", path)
            continue
        for member in members:
            real = os.path.realpath(member)
            if real not in seen:
                seen.add(real)
                out.append(member)
    return out


def instantiate(
    candidates: Sequence[Path], log_level: int = logging.WARNING
) -> tuple[list[EnginePlugin], list[SkippedPlugin]]:
    """Open, vet and create an instance of each candidate, in order. Never raises for a bad plugin."""
    plugins: list[EnginePlugin] = []
    skipped: list[SkippedPlugin] = []
    engine_owner: dict[int, str] = {}
    handles_seen: set[int] = set()
    for path in candidates:
        try:
            library = open_library(path)
        except PluginLoadError as exc:
            log.warning("skipping plugin %s: %s", path, exc)
            skipped.append(SkippedPlugin(path, str(exc)))
            continue
        library.attach_logging(log_level)
        out = ffi.new("hipdnnEnginePluginHandle_t*")
        try:
            library.call("hipdnnEnginePluginCreate", out)
        except PluginError as exc:
            log.warning("skipping plugin %s: %s", path, exc)
            skipped.append(SkippedPlugin(path, str(exc)))
            continue
        handle = out[0]
        address = int(ffi.cast("uintptr_t", handle))
        if address == 0:
            reason = "hipdnnEnginePluginCreate returned a null handle"
            log.warning("skipping plugin %s: %s", path, reason)
            skipped.append(SkippedPlugin(path, reason))
            continue
        if address in handles_seen:
            reason = "hipdnnEnginePluginCreate returned a handle already owned by another plugin"
            log.warning("skipping plugin %s: %s", path, reason)
            skipped.append(SkippedPlugin(path, reason))
            continue
        handles_seen.add(address)
        kept: list[int] = []
        for engine_id in library.engine_ids:
            owner = engine_owner.get(engine_id)
            if owner is not None:
                log.error(
                    "engine id %d of plugin %r (%s) collides with plugin %r; the later engine is dropped",
                    engine_id, library.name, path, owner,
                )
                continue
            engine_owner[engine_id] = library.name
            kept.append(engine_id)
        if not kept:
            reason = "every engine id collides with an earlier plugin"
            skipped.append(SkippedPlugin(path, reason))
            status = library.call_status("hipdnnEnginePluginDestroy", handle)
            if status != STATUS_SUCCESS:
                log.warning("%s: hipdnnEnginePluginDestroy failed", path)
            continue
        plugins.append(EnginePlugin(library, handle, tuple(kept)))
    log.info("loaded %d plugin(s), skipped %d", len(plugins), len(skipped))
    return plugins, skipped
