"""Opening and vetting engine plugins through the C ABI (cffi, ABI mode).

A plugin file is opened once per process (RTLD_NOW | RTLD_NODELETE, never
closed: plugins with OpenMP or BLAS worker threads crash the process when
unloaded) and shared by every handle. The file is opened, checked (trust rules,
ELF headers, fingerprint) and handed to the dynamic linker through one
descriptor, so what was checked is what is loaded (rfcs/0008). Every entry is
looked up once, right after opening, and kept. Each handle then creates its own
plugin instance (hipdnnEnginePluginCreate), so handles never share plugin state.

Strings a plugin returns are read with a bound and shown escaped
(hipdnn.plugins.text); a workspace size above MAX_WORKSPACE_BYTES is refused.

Anything wrong with a plugin is contained: the plugin is skipped with a reason
that names the file, the rest load, and nothing is raised. Finding the files
is hipdnn.plugins.discovery's job; rfcs/0004-plugin-loading.md has the rules.
"""

from __future__ import annotations

import hashlib
import logging
import os
import struct
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import cffi
from packaging.version import Version

from hipdnn.plugins._cdef import sdk_cdef
from hipdnn.plugins.errors import PluginError
from hipdnn.plugins.text import MAX_IDENTITY_BYTES, MAX_MESSAGE_BYTES, message_text, printable, quoted
from hipdnn.plugins.trust import CheckedFile, FileRefused, TrustChecker, open_checked
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
STATUS_INTERNAL_ERROR = 3
STATUS_NOT_INITIALIZED = 6
PLUGIN_TYPE_ENGINE = 1

#: The largest workspace a plugin may ask for: 2**48 bytes (256 TiB), more than the memory of any
#: host or device in sight, and far below what only a bug reports (SIZE_MAX, a negative size read as
#: size_t). A larger size is refused at build like any failing plugin call, so the next engine is tried.
MAX_WORKSPACE_BYTES = 1 << 48
#: The largest EngineDetails a plugin may hand over: 16 MiB, thousands of times what an engine's knobs
#: and notes take. The host copies the buffer out by the size the plugin states, so a size that is a
#: lie (SIZE_MAX, gigabytes over a buffer of a few bytes) must be refused before anything is read:
#: reading by it ran past the plugin's buffer (a segfault) or asked for more memory than exists.
MAX_ENGINE_DETAILS_BYTES = 16 << 20
#: Slots after the ids a plugin is given room for, filled with _ID_GUARD: a plugin that writes past
#: max_engines lands there (up to this many entries) and the host notices instead of going on.
_ID_GUARD_SLOTS = 4
_ID_GUARD = -0x5A5A5A5A5A5A5A5A

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


def _bounded(ptr: Any, limit: int) -> tuple[bytes, bool]:
    """At most ``limit`` bytes of the C string at ``ptr``, and whether it is longer. Never looks past
    byte ``limit``: a plugin's string need not end anywhere near (or at all)."""
    raw = bytes(ffi.string(ptr, limit + 1))
    return raw[:limit], len(raw) > limit


def _message(ptr: Any) -> str:
    """A plugin's last error or log message: bounded, escaped, marked when cut."""
    if ptr == ffi.NULL:
        return ""
    return message_text(*_bounded(ptr, MAX_MESSAGE_BYTES))


# -- ELF pre-flight ---------------------------------------------------------------------------
# dlopen trusts the file's headers: a truncated library (a copy interrupted half way, a download cut
# short) is mapped past its end and the first touch of a missing page kills the process with
# SIGBUS. So before dlopen, on hosts whose own executable is ELF, a plugin file must be an ELF shared
# object of the host's class, byte order and machine whose headers and segments all lie inside it.
_ELF_MAGIC = b"\x7fELF"
_ET_DYN = 3


def _host_elf_ident() -> tuple[int, int, int] | None:
    """(class, byte order, machine) of the running interpreter, or None when it is not ELF."""
    for exe in ("/proc/self/exe", sys.executable):
        try:
            with open(exe, "rb") as f:
                head = f.read(20)
        except OSError:
            continue
        if len(head) == 20 and head[:4] == _ELF_MAGIC:
            order = "<" if head[5] == 1 else ">"
            return head[4], head[5], struct.unpack_from(order + "H", head, 18)[0]
        return None
    return None


_HOST_ELF = _host_elf_ident()


def _pread(fd: int, size: int, offset: int) -> bytes:
    """Up to ``size`` bytes at ``offset``; os.pread where there is one (it leaves the offset alone)."""
    if hasattr(os, "pread"):
        return os.pread(fd, size, offset)
    os.lseek(fd, offset, os.SEEK_SET)
    return os.read(fd, size)


def elf_problem(fd: int) -> str | None:
    """Why the file open on ``fd`` cannot be a shared library for this process, judged from its ELF
    headers alone; None when it looks sound (or when the host is not an ELF platform). Reads with
    pread, so the descriptor's offset is left alone."""
    if _HOST_ELF is None:
        return None
    host_class, host_order, host_machine = _HOST_ELF
    try:
        size = os.fstat(fd).st_size
        head = _pread(fd, 64, 0)
    except OSError as exc:
        return f"cannot read: {exc}"
    if len(head) < 16 or head[:4] != _ELF_MAGIC:
        return "not an ELF file"
    elf_class, order_byte = head[4], head[5]
    if elf_class not in (1, 2) or order_byte not in (1, 2):
        return "corrupt ELF identification"
    if (elf_class, order_byte) != (host_class, host_order):
        bits = {1: "32-bit", 2: "64-bit"}
        return f"ELF class {bits[elf_class]} does not match this {bits[host_class]} process"
    o = "<" if order_byte == 1 else ">"
    if elf_class == 2:
        fmt, ph_fmt, ph_size = o + "HHIQQQIHHHHHH", o + "IIQQQQ", 56
    else:
        fmt, ph_fmt, ph_size = o + "HHIIIIIHHHHHH", o + "IIIIII", 32
    if len(head) < 16 + struct.calcsize(fmt):
        return "truncated ELF header"
    (e_type, machine, _, _, phoff, shoff, _, _, phentsize, phnum, shentsize, shnum, _) = struct.unpack_from(
        fmt, head, 16
    )
    if e_type != _ET_DYN:
        return f"ELF type {e_type} is not a shared object (ET_DYN)"
    if machine != host_machine:
        return f"ELF machine {machine} does not match this process's machine {host_machine}"
    if phnum == 0 or phentsize < ph_size or phoff + phnum * phentsize > size:
        return f"program headers lie outside the file ({size} bytes): truncated?"
    if shoff and shoff + shnum * shentsize > size:
        return f"section headers lie outside the file ({size} bytes): truncated?"
    try:
        table = _pread(fd, phnum * phentsize, phoff)
    except OSError as exc:
        return f"cannot read: {exc}"
    for i in range(phnum):
        fields = struct.unpack_from(ph_fmt, table, i * phentsize)
        # 64-bit: type, flags, offset, vaddr, paddr, filesz; 32-bit: type, offset, vaddr, paddr, filesz
        offset, filesz = (fields[2], fields[5]) if elf_class == 2 else (fields[1], fields[4])
        if filesz and offset + filesz > size:
            return f"segment {i} ends at byte {offset + filesz}, past the end of the file ({size} bytes): truncated?"
    return None


_DT_NEEDED, _DT_STRTAB, _DT_STRSZ, _DT_RPATH, _DT_RUNPATH = 1, 5, 10, 15, 29
_PT_LOAD, _PT_DYNAMIC = 1, 2


def uses_origin(fd: int) -> bool:
    """True when the ELF library open on ``fd`` names ``$ORIGIN`` in its RPATH, RUNPATH or NEEDED
    entries. The dynamic linker takes ``$ORIGIN`` from the name the library was opened by, so such a
    library cannot be loaded through /proc/self/fd/N (its dependencies would be looked for in
    /proc/self/fd). Anything unreadable counts as False; elf_problem has vetted the headers."""
    if _HOST_ELF is None:
        return False
    try:
        head = _pread(fd, 64, 0)
        elf_class, o = head[4], "<" if head[5] == 1 else ">"
        if elf_class == 2:
            phoff, phentsize, phnum = struct.unpack_from(o + "Q", head, 32)[0], *struct.unpack_from(o + "HH", head, 54)
            ph_fmt, dyn_fmt = o + "IIQQQQ", o + "qQ"
        else:
            phoff, phentsize, phnum = struct.unpack_from(o + "I", head, 28)[0], *struct.unpack_from(o + "HH", head, 42)
            ph_fmt, dyn_fmt = o + "IIIIII", o + "iI"
        table = _pread(fd, phnum * phentsize, phoff)
        loads: list[tuple[int, int, int]] = []
        dynamic: tuple[int, int] | None = None
        for i in range(phnum):
            fields = struct.unpack_from(ph_fmt, table, i * phentsize)
            # 64-bit: type, flags, offset, vaddr, paddr, filesz; 32-bit: type, offset, vaddr, paddr, filesz
            offset, vaddr, filesz = fields[2:4] + fields[5:6] if elf_class == 2 else fields[1:3] + fields[4:5]
            if fields[0] == _PT_LOAD:
                loads.append((vaddr, offset, filesz))
            elif fields[0] == _PT_DYNAMIC:
                dynamic = (offset, filesz)
        if dynamic is None:
            return False
        entries = _pread(fd, min(dynamic[1], 1 << 20), dynamic[0])
        strtab, strsz, refs = None, 0, []
        whole = len(entries) - len(entries) % struct.calcsize(dyn_fmt)
        for tag, value in struct.iter_unpack(dyn_fmt, entries[:whole]):
            if tag == 0:
                break
            if tag == _DT_STRTAB:
                strtab = value
            elif tag == _DT_STRSZ:
                strsz = value
            elif tag in (_DT_NEEDED, _DT_RPATH, _DT_RUNPATH):
                refs.append(value)
        # DT_STRTAB is an address; the file offset is found through the segment that maps it.
        where = [off + strtab - va for va, off, sz in loads if strtab is not None and va <= strtab < va + sz]
        if not where or not refs:
            return False
        strings = _pread(fd, min(strsz, 1 << 20), where[0])
    except (OSError, struct.error, IndexError):
        return False
    for ref in refs:
        end = strings.find(b"\0", ref)
        text = strings[ref : end if end >= 0 else len(strings)]
        if b"$ORIGIN" in text or b"${ORIGIN}" in text:
            return True
    return False


def file_sha256(fd: int) -> str:
    """sha256 of the whole file open on ``fd`` (read with pread, from the start)."""
    digest = hashlib.sha256()
    offset = 0
    while chunk := _pread(fd, 1 << 20, offset):
        digest.update(chunk)
        offset += len(chunk)
    return digest.hexdigest()


# Where the kernel shows this process's open files by number; None where there is no such place.
_PROC_FD: str | None = "/proc/self/fd" if sys.platform.startswith("linux") and os.path.isdir("/proc/self/fd") else None
# Descriptors of every file dlopen accepted, kept open for the life of the process: glibc recognises
# a library it already loaded by the name it was opened with, so were number N closed and reused for
# another plugin, dlopen("/proc/self/fd/N") would silently hand back the first library.
_pinned_fds: set[int] = set()


def _dlopen(checked: CheckedFile) -> Any:
    """dlopen the very file checked: through /proc/self/fd/N on Linux, so no rename or re-pointed link
    after the check can change what is mapped. A library using $ORIGIN, or a host without
    /proc/self/fd, is loaded by its checked real path instead, right after making sure that path
    still names the checked file; the trust check has shown that only root or the current user can
    change what it names."""
    if _PROC_FD is not None and not uses_origin(checked.fd):
        name = f"{_PROC_FD}/{checked.fd}"
    else:
        if not checked.unchanged():
            raise PluginLoadError(f"{checked.real} was replaced while it was being checked; not loaded")
        name = checked.real
    try:
        lib = ffi.dlopen(name, ffi.RTLD_NOW | getattr(os, "RTLD_NODELETE", 0))
    except OSError as exc:
        # dlerror names the file as it was opened; name it as the user knows it
        reason = str(exc).replace(f"'{name}'", f"'{checked.real}'").replace(name + ":", checked.real + ":")
        raise PluginLoadError(f"not a loadable shared library: {printable(reason)}") from None
    if name != checked.real:
        _pinned_fds.add(checked.fd)
    return lib


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

    def __init__(self, checked: CheckedFile) -> None:
        self.path = Path(checked.real)
        problem = elf_problem(checked.fd)
        if problem is not None:
            raise PluginLoadError(f"not a loadable shared library: {problem}")
        self.lib: Any = _dlopen(checked)
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
        self.name = self._identity("hipdnnPluginGetName")
        self.version = self._identity("hipdnnPluginGetVersion")
        ptype = ffi.new("hipdnnPluginType_t*")
        self._check("hipdnnPluginGetType", self._entries["hipdnnPluginGetType"](ptype))
        if ptype[0] != PLUGIN_TYPE_ENGINE:
            raise PluginLoadError(f"plugin type {int(ptype[0])} is not HIPDNN_PLUGIN_TYPE_ENGINE")
        if "hipdnnPluginGetApiVersion" in self._entries:
            try:
                text = self._query_string("hipdnnPluginGetApiVersion")
            except PluginLoadError as exc:
                raise PluginLoadError(f"unparsable API version: {exc}") from None
            try:
                # Not _identity: control characters here are the parser's to refuse, escaped.
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
        self.sha256 = file_sha256(checked.fd)
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

    def with_last_error(self, detail: str) -> str:
        """``detail`` plus what the plugin's GetLastErrorString says now, when it says anything."""
        last = self.last_error()
        return f"{detail} (plugin's last error: {last})" if last else detail

    def last_error(self) -> str:
        out = ffi.new("const char**")
        try:
            self._entries["hipdnnPluginGetLastErrorString"](out)
        except Exception:  # a plugin's error reporting must never mask the original error
            return ""
        return _message(out[0])

    def _check(self, entry: str, status: int) -> None:
        if status != STATUS_SUCCESS:
            raise PluginError(self.name, entry, int(status), self.last_error())

    def call(self, entry: str, *args: Any) -> None:
        """Call an entry and raise PluginError (with the plugin's last error) on failure."""
        self._check(entry, self._entries[entry](*args))

    def call_status(self, entry: str, *args: Any) -> int:
        return int(self._entries[entry](*args))

    def _query_string(self, entry: str) -> str:
        """The string an identity entry returns: at most MAX_IDENTITY_BYTES of valid UTF-8."""
        out = ffi.new("const char**")
        try:
            self._check(entry, self._entries[entry](out))
        except PluginError as exc:
            raise PluginLoadError(str(exc)) from None
        if out[0] == ffi.NULL:
            raise PluginLoadError(f"{entry} returned a null string")
        raw, too_long = _bounded(out[0], MAX_IDENTITY_BYTES)
        shown = raw.decode("utf-8", "backslashreplace")
        if too_long:
            raise PluginLoadError(
                f"{entry} returned a string longer than {MAX_IDENTITY_BYTES} bytes, starting {quoted(shown[:64])}"
            )
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise PluginLoadError(f"{entry} returned {quoted(shown)}, which is not valid UTF-8") from None

    def _identity(self, entry: str) -> str:
        """A name or version: bounded, and printable, since it names loggers, fills messages and is
        shown on terminals. Refused, rather than escaped, when it holds a control character: a name
        that has to be escaped to be shown safely is not one anybody chose in good faith."""
        text = self._query_string(entry)
        if not text.isprintable():
            raise PluginLoadError(
                f"{entry} returned {quoted(text)}, which holds characters that are not printable (control "
                "characters, terminal escapes, line breaks); a plugin's name and version must be printable text"
            )
        return text

    def _query_engine_ids(self) -> tuple[int, ...]:
        fn = self._entries["hipdnnEnginePluginGetAllEngineIds"]
        count = ffi.new("uint32_t*")
        status = fn(ffi.NULL, 0, count)
        if status != STATUS_SUCCESS:
            raise PluginLoadError(
                str(PluginError(self.name, "hipdnnEnginePluginGetAllEngineIds", status, self.last_error()))
            )
        n = int(count[0])
        if n == 0:
            raise PluginLoadError("plugin reports zero engines")
        if n > 1 << 16:
            raise PluginLoadError(f"plugin reports an implausible {n} engines")
        ids = ffi.new("int64_t[]", n)
        count2 = ffi.new("uint32_t*")
        status = fn(ids, n, count2)
        if status != STATUS_SUCCESS:
            raise PluginLoadError(
                str(PluginError(self.name, "hipdnnEnginePluginGetAllEngineIds", status, self.last_error()))
            )
        if int(count2[0]) != n:
            raise PluginLoadError(f"engine count changed between calls ({n} then {int(count2[0])})")
        engine_ids = tuple(int(ids[i]) for i in range(n))
        if len(set(engine_ids)) != n:
            dups = sorted({e for e in engine_ids if engine_ids.count(e) > 1})
            raise PluginLoadError(f"duplicate engine ids {dups} in {list(engine_ids)}")
        return engine_ids

    # -- logging -----------------------------------------------------------------------------
    def attach_logging(self, level: int) -> None:
        """Route the plugin's log callback into logging.getLogger('hipdnn.plugins.<name>')."""
        if "hipdnnPluginSetLoggingCallback" in self._entries and self._log_callback is None:
            logger = logging.getLogger(f"hipdnn.plugins.{self.name}")

            def _sink(severity: int, message: Any) -> None:
                logger.log(_SEVERITY_TO_LEVEL.get(int(severity), logging.INFO), "%s", _message(message))

            # kept alive for the life of the process: the plugin may call it from any thread, any time
            self._log_callback = ffi.callback("hipdnnCallback_t", _sink)
            status = self._entries["hipdnnPluginSetLoggingCallback"](self._log_callback)
            if status != STATUS_SUCCESS:
                log.warning(
                    "%s: hipdnnPluginSetLoggingCallback failed: %s", printable(str(self.path)), self.last_error()
                )
        if "hipdnnPluginSetLogLevel" in self._entries:
            severity = severity_for_level(level)
            if self._entries["hipdnnPluginSetLogLevel"](severity) != STATUS_SUCCESS:
                log.warning("%s: hipdnnPluginSetLogLevel failed: %s", printable(str(self.path)), self.last_error())

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
# The only process-wide plugin state: opened libraries (by real path; a library is opened once and
# never closed), refusals (by file identity, so a file fixed on disk is tried again), the descriptors
# libraries were loaded through (_pinned_fds) and the addresses of live plugin instances (a plugin
# handing out an address another instance still holds would share state between handles).
_libraries: dict[str, PluginLibrary] = {}
_refusals: dict[tuple[str, int, int, int, int], PluginLoadError] = {}
_libraries_lock = threading.Lock()
_live_instances: dict[int, str] = {}
_live_lock = threading.Lock()


def open_library(path: Path, checker: TrustChecker | None = None) -> PluginLibrary:
    """Open (once per process) and vet a plugin file; raises PluginLoadError with the reason.

    The file is opened and trust-checked on its descriptor every time, also when its library is
    already loaded: the path must still lead, through trusted directories, to a trusted file."""
    try:
        checked = open_checked(path, checker or TrustChecker())
    except FileRefused as exc:
        raise PluginLoadError(str(exc)) from None
    try:
        with _libraries_lock:
            library = _libraries.get(checked.real)
            if library is not None:
                return library
            st = checked.st
            identity = (checked.real, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            refusal = _refusals.get(identity)
            if refusal is None:
                try:
                    library = PluginLibrary(checked)
                except PluginLoadError as exc:
                    refusal = exc
                except Exception as exc:  # containment: nothing a plugin does may escape
                    refusal = PluginLoadError(f"unexpected failure while loading: {printable(repr(exc))}")
                if library is not None:
                    _libraries[checked.real] = library
                    return library
                assert refusal is not None
                _refusals[identity] = refusal
        raise refusal
    finally:
        if checked.fd not in _pinned_fds:
            os.close(checked.fd)


def _claim_instance(address: int, owner: str) -> str | None:
    """Record a live plugin instance; returns the current owner if the address is already live."""
    with _live_lock:
        current = _live_instances.get(address)
        if current is not None:
            return current
        _live_instances[address] = owner
        return None


def _release_instance(address: int) -> None:
    with _live_lock:
        _live_instances.pop(address, None)


# -- per-handle plugin instances --------------------------------------------------------------
@dataclass
class SkippedPlugin:
    """A plugin file (or search path) a handle refused, and why. ``source`` is where it was found
    (``builtin``, ``env``, ``entry_point`` or ``handle``), empty when unknown."""

    path: Path
    reason: str
    source: str = ""

    def __post_init__(self) -> None:
        # Reasons quote file names and plugin strings: keep them safe to print anywhere.
        self.reason = printable(self.reason)

    def __repr__(self) -> str:
        return f"SkippedPlugin(path={str(self.path)!r}, reason={self.reason!r}, source={self.source!r})"


@dataclass
class EnginePlugin:
    """A plugin instance owned by one handle: the shared library plus this handle's plugin handle."""

    library: PluginLibrary
    handle: Any  # hipdnnEnginePluginHandle_t
    engine_ids: tuple[int, ...]
    source: str = ""
    dropped_engine_ids: tuple[int, ...] = ()
    _destroyed: bool = field(default=False, repr=False)
    # Calls into the instance in flight: destroy() waits for them, and refuses later ones, which would
    # hand the plugin a handle it has already freed (a build or set_stream after Handle.close()).
    _calls: int = field(default=0, repr=False, compare=False)
    _idle: threading.Condition = field(default_factory=threading.Condition, repr=False, compare=False)
    # Contexts this instance created and has not destroyed, by address: destroy() releases them first,
    # so that a plan finalized while its handle closed on another thread leaks nothing.
    _contexts: dict[int, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def name(self) -> str:
        return self.library.name

    def _call(self, entry: str, *args: Any, releasing: Any = None, creating: Any = None) -> None:
        """``entry(handle, *args)``, unless the instance is destroyed (PluginError then). ``releasing``:
        the context being destroyed, forgotten first (nothing is called when the instance already
        released it). ``creating``: where the entry writes a new context, remembered before destroy()
        can run."""
        with self._idle:
            known = False
            if releasing is not None:
                known = self._contexts.pop(self.context_address(releasing), None) is not None
                if self._destroyed and not known:
                    return
            # Releasing a context of ours goes ahead while destroy() waits: the instance lives until
            # the calls in flight end, and destroy() no longer lists the context.
            if self._destroyed and not known:
                raise PluginError(
                    self.name, entry, STATUS_NOT_INITIALIZED, "the plugin instance was destroyed (its handle is closed)"
                )
            self._calls += 1
        done = False
        try:
            self.library.call(entry, self.handle, *args)
            done = True
        finally:
            with self._idle:
                if done and creating is not None and creating[0] != ffi.NULL:
                    self._contexts[self.context_address(creating[0])] = creating[0]
                self._calls -= 1
                self._idle.notify_all()

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
        """The plugin's engines that apply to ``graph`` (in its order, each once), among those not
        dropped. A plugin that writes past the ``cap`` ids it was given (into the guard slots after
        them), reports more than it has, or names engines it never declared fails the call."""
        data, _keep = const_data(graph)
        count = ffi.new("uint32_t*")
        cap = len(self.library.engine_ids)
        ids = ffi.new("int64_t[]", cap + _ID_GUARD_SLOTS)
        for i in range(cap, cap + _ID_GUARD_SLOTS):
            ids[i] = _ID_GUARD
        self._call("hipdnnEnginePluginGetApplicableEngineIds", data, ids, cap, count)
        if any(ids[i] != _ID_GUARD for i in range(cap, cap + _ID_GUARD_SLOTS)):
            raise PluginError(
                self.name,
                "hipdnnEnginePluginGetApplicableEngineIds",
                3,
                self.library.with_last_error(f"wrote engine ids past the {cap} it was given room for"),
            )
        n = int(count[0])
        if n > cap:
            raise PluginError(
                self.name,
                "hipdnnEnginePluginGetApplicableEngineIds",
                3,
                self.library.with_last_error(f"reported {n} applicable engines but has only {cap}"),
            )
        found = [int(ids[i]) for i in range(n)]
        unknown = [e for e in found if e not in self.library.engine_ids]
        if unknown:
            raise PluginError(
                self.name,
                "hipdnnEnginePluginGetApplicableEngineIds",
                3,
                self.library.with_last_error(f"reported engine ids {unknown} it never declared"),
            )
        # an engine named twice is one engine: one config each, never two
        return [e for e in dict.fromkeys(found) if e in self.engine_ids]

    def engine_details(self, engine_id: int, graph: bytes) -> bytes:
        data, _keep = const_data(graph)
        details = ffi.new("hipdnnPluginConstData_t*")
        self._call("hipdnnEnginePluginGetEngineDetails", engine_id, data, details)
        try:
            size = int(details.size)
            if size == 0 or details.ptr == ffi.NULL:
                return b""
            if size > MAX_ENGINE_DETAILS_BYTES:
                raise PluginError(
                    self.name,
                    "hipdnnEnginePluginGetEngineDetails",
                    STATUS_INTERNAL_ERROR,
                    f"engine {engine_id}: reported engine details of {size} bytes, more than the "
                    f"{MAX_ENGINE_DETAILS_BYTES} bytes (16 MiB) hipdnn reads; not read",
                )
            return bytes(ffi.buffer(details.ptr, size))
        finally:
            self._call("hipdnnEnginePluginDestroyEngineDetails", details)

    def workspace_size(self, engine_config: bytes, graph: bytes) -> int:
        cfg, _k1 = const_data(engine_config)
        data, _k2 = const_data(graph)
        out = ffi.new("size_t*")
        self._call("hipdnnEnginePluginGetWorkspaceSize", cfg, data, out)
        return self._bounded_workspace("hipdnnEnginePluginGetWorkspaceSize", int(out[0]))

    def _bounded_workspace(self, entry: str, size: int) -> int:
        """``size`` as reported by ``entry``, refused when no allocator could provide it."""
        if size > MAX_WORKSPACE_BYTES:
            raise PluginError(
                self.name,
                entry,
                STATUS_INTERNAL_ERROR,
                f"reported a workspace of {size} bytes, more than the {MAX_WORKSPACE_BYTES} bytes "
                "(2**48, 256 TiB) hipdnn accepts: no allocator could provide it",
            )
        return size

    def create_execution_context(self, engine_config: bytes, graph: bytes) -> Any:
        cfg, _k1 = const_data(engine_config)
        data, _k2 = const_data(graph)
        out = ffi.new("hipdnnEnginePluginExecutionContext_t*")
        self._call("hipdnnEnginePluginCreateExecutionContext", cfg, data, out, creating=out)
        if out[0] == ffi.NULL:
            raise PluginError(
                self.name,
                "hipdnnEnginePluginCreateExecutionContext",
                3,
                self.library.with_last_error("returned a null execution context"),
            )
        return out[0]

    def destroy_execution_context(self, context: Any) -> None:
        self._call("hipdnnEnginePluginDestroyExecutionContext", context, releasing=context)

    def workspace_size_from_context(self, context: Any) -> int:
        out = ffi.new("size_t*")
        self._call("hipdnnEnginePluginGetWorkspaceSizeFromExecutionContext", context, out)
        return self._bounded_workspace("hipdnnEnginePluginGetWorkspaceSizeFromExecutionContext", int(out[0]))

    def execute(self, context: Any, workspace: int, buffers: Sequence[tuple[int, int]]) -> None:
        """hipdnnEnginePluginExecuteOpGraph with (uid, pointer) pairs."""
        n = len(buffers)
        array = ffi.new("hipdnnPluginDeviceBuffer_t[]", max(n, 1))
        for i, (uid, ptr) in enumerate(buffers):
            array[i].uid = uid
            array[i].ptr = ffi.cast("void*", ptr)
        self._call("hipdnnEnginePluginExecuteOpGraph", context, ffi.cast("void*", workspace), array, n)

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
        self._call(
            "hipdnnEnginePluginExecuteOpGraphWithOverrides",
            context,
            ffi.cast("void*", workspace),
            array,
            n,
            count,
            uids,
            lengths,
            shape_ptrs,
            stride_ptrs,
        )

    def set_stream(self, stream: int) -> None:
        self._call("hipdnnEnginePluginSetStream", ffi.cast("hipStream_t", stream))

    @property
    def address(self) -> int:
        return int(ffi.cast("uintptr_t", self.handle))

    def execute_entry_addresses(self) -> tuple[int, int, int]:
        """Addresses of hipdnnEnginePluginExecuteOpGraph, ...WithOverrides (0 when absent) and
        hipdnnPluginGetLastErrorString, for a compiled caller that calls them directly."""
        entries = self.library._entries

        def address(name: str) -> int:
            fn = entries.get(name)
            return 0 if fn is None else int(ffi.cast("uintptr_t", fn))

        return (
            address("hipdnnEnginePluginExecuteOpGraph"),
            address("hipdnnEnginePluginExecuteOpGraphWithOverrides"),
            address("hipdnnPluginGetLastErrorString"),
        )

    @staticmethod
    def context_address(context: Any) -> int:
        """The address of an execution context this plugin created."""
        return int(ffi.cast("uintptr_t", context))

    def destroy(self) -> None:
        with self._idle:
            if self._destroyed:
                return
            self._destroyed = True
            self._idle.wait_for(lambda: self._calls == 0)
            leftover = list(self._contexts.values())
            self._contexts.clear()
        for context in leftover:
            self.library.call_status("hipdnnEnginePluginDestroyExecutionContext", self.handle, context)
        try:
            status = self.library.call_status("hipdnnEnginePluginDestroy", self.handle)
        finally:
            _release_instance(self.address)
        if status != STATUS_SUCCESS:
            log.warning(
                "%s (%s): %s",
                self.name,
                self.library.path,
                PluginError(self.name, "hipdnnEnginePluginDestroy", status, self.library.last_error()),
            )


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
    #: where it was found: builtin, env, entry_point or handle ("" when loaded from a bare path)
    source: str = ""
    #: engine ids the plugin declares that this handle dropped (an earlier plugin claimed them)
    dropped_engine_ids: tuple[int, ...] = ()


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
        source=plugin.source,
        dropped_engine_ids=plugin.dropped_engine_ids,
    )


class _Candidate(Protocol):
    @property
    def path(self) -> Path: ...

    @property
    def source(self) -> Any: ...


def instantiate(
    candidates: Sequence[Path | _Candidate],
    log_level: int = logging.WARNING,
    rejected: Sequence[SkippedPlugin] = (),
) -> tuple[list[EnginePlugin], list[SkippedPlugin]]:
    """Open, vet and create an instance of each candidate, in order. Never raises for a bad plugin.

    ``rejected`` holds what discovery already refused; it is logged and reported with the rest.
    Engine ids are claimed per call: the first plugin to declare an id keeps it in this handle."""
    plugins: list[EnginePlugin] = []
    skipped: list[SkippedPlugin] = []

    def skip(path: Path, reason: str, source: str) -> None:
        record = SkippedPlugin(path, reason, source)
        log.warning("skipping plugin %s: %s", printable(str(path)), record.reason)
        skipped.append(record)

    for r in rejected:
        skip(r.path, r.reason, r.source)
    engine_owner: dict[int, EnginePlugin] = {}
    checker = TrustChecker()
    for candidate in candidates:
        if isinstance(candidate, Path):
            path, source = candidate, ""
        else:
            path, source = candidate.path, str(candidate.source)
        try:
            library = open_library(path, checker)
        except PluginLoadError as exc:
            skip(path, str(exc), source)
            continue
        library.attach_logging(log_level)
        out = ffi.new("hipdnnEnginePluginHandle_t*")
        try:
            library.call("hipdnnEnginePluginCreate", out)
        except PluginError as exc:
            skip(path, str(exc), source)
            continue
        handle = out[0]
        address = int(ffi.cast("uintptr_t", handle))
        if address == 0:
            skip(path, library.with_last_error("hipdnnEnginePluginCreate returned a null handle"), source)
            continue
        owner = _claim_instance(address, f"{library.name!r} ({library.path})")
        if owner is not None:
            # Not destroyed: the address belongs to the other instance.
            skip(
                path,
                f"hipdnnEnginePluginCreate returned handle {address:#x}, which plugin {owner} "
                "already holds for a live instance",
                source,
            )
            continue
        kept: list[int] = []
        dropped: list[int] = []
        for engine_id in library.engine_ids:
            first = engine_owner.get(engine_id)
            if first is not None:
                log.error(
                    "engine id %d of plugin %r (%s) collides with plugin %r (%s), which keeps it; "
                    "the later engine is dropped",
                    engine_id,
                    library.name,
                    printable(str(path)),
                    first.name,
                    printable(str(first.library.path)),
                )
                dropped.append(engine_id)
                continue
            kept.append(engine_id)
        plugin = EnginePlugin(library, handle, tuple(kept), source, tuple(dropped))
        if not kept:
            firsts = sorted({f"{engine_owner[e].name!r} ({engine_owner[e].library.path})" for e in dropped})
            plugin.destroy()
            skip(path, f"every engine id {list(dropped)} is already served by plugin {', '.join(firsts)}", source)
            continue
        for engine_id in kept:
            engine_owner[engine_id] = plugin
        plugins.append(plugin)
    log.log(
        logging.WARNING if skipped else logging.INFO,
        "loaded %d plugin(s), skipped %d",
        len(plugins),
        len(skipped),
    )
    return plugins, skipped
