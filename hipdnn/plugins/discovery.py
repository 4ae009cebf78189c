"""Where engine plugins come from, listed without loading anything.

Search order (ADDITIVE, the default):

1. ``builtin``     the ``engines/`` directory shipped inside the hipdnn package;
2. ``env``         the directories of ``HIPDNN_PLUGIN_DIR`` (``os.pathsep``-separated), ignored in a
                   setuid/setgid process;
3. ``entry_point`` packages registered under the ``hipdnn.engine_plugins`` entry-point group, sorted
                   by entry-point name (then value, then distribution);
4. ``handle``      ``Handle(plugin_paths=[...])``, in the order given.

ABSOLUTE keeps only (4). A directory is scanned non-recursively and its shared libraries are taken
in name order; a file is taken as is. A file reached twice (same real path) keeps its first place.

Entry-point contract: the value of an entry point in ``hipdnn.engine_plugins`` is the dotted name of
a *package* (``mypkg`` or ``mypkg.engines``; no ``:attr`` part). The package's directory (every
directory, for a namespace package) is scanned like a directory in ``plugin_paths``. The package is
located through the import system's finders without being imported, so no Python code of the
distribution runs during discovery.

Every candidate is checked for trust before it is listed (``hipdnn.plugins.trust`` has the rules):
neither the file, nor the directory being scanned, may be writable by its group or by others, or be
owned by a user other than root or the effective user; no directory passed through to reach it may
be either (a group- or world-writable directory with the sticky bit, like ``/tmp``, is tolerated
there), and no symlink followed may sit in a directory others can write to, sticky or not. A
candidate must be a regular file: a FIFO, socket, device or directory named like a library is
refused here, found by ``stat`` alone. Refusals come back as :class:`SkippedPlugin` records with the
fix in the reason. The loader checks each file again on the descriptor it loads from
(``trust.open_checked``): listing is advice, that check is the one that counts.
"""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
import importlib.util
import logging
import os
import stat
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from hipdnn.plugins.loader import SkippedPlugin, is_shared_library_name
from hipdnn.plugins.trust import TrustChecker, not_regular

log = logging.getLogger("hipdnn.plugins")

ENV_PLUGIN_DIR = "HIPDNN_PLUGIN_DIR"
ENTRY_POINT_GROUP = "hipdnn.engine_plugins"
#: The top-level package (``hipdnn``), whose directories hold the built-in engines; named here
#: without importing it, since the package root sits above this layer.
_PACKAGE = __name__.partition(".")[0]


class PluginLoadingMode(Enum):
    """How ``Handle(plugin_paths=...)`` combines with the default search paths."""

    #: the given paths come after the defaults (built-in engines, HIPDNN_PLUGIN_DIR, entry points)
    ADDITIVE = "additive"
    #: only the given paths are searched
    ABSOLUTE = "absolute"


class PluginSource(str, Enum):
    """Where a search path (and so each candidate found under it) came from."""

    BUILTIN = "builtin"
    ENV = "env"
    ENTRY_POINT = "entry_point"
    HANDLE = "handle"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class SearchPath:
    """One place searched: a directory or a file, with where it came from. ``origin`` says more for
    entry points (``name = value (distribution version)``) and is empty otherwise."""

    path: Path
    source: PluginSource
    origin: str = ""


@dataclass(frozen=True)
class PluginCandidate:
    """A file that will be opened, in this order, when a handle is created."""

    path: Path
    source: PluginSource
    origin: str = ""

    def __str__(self) -> str:
        return f"{self.path} ({self.source}{': ' + self.origin if self.origin else ''})"


@dataclass
class Discovery:
    """The result of discovery: what will be loaded, in order, and what was refused before loading."""

    search_paths: list[SearchPath] = field(default_factory=list)
    candidates: list[PluginCandidate] = field(default_factory=list)
    rejected: list[SkippedPlugin] = field(default_factory=list)

    @property
    def paths(self) -> list[Path]:
        return [c.path for c in self.candidates]


# -- where to look -----------------------------------------------------------------------------
def builtin_engine_dirs() -> list[Path]:
    """The engines shipped inside the package. In an editable install the package's Python files stay
    in the source tree while built plugins land in site-packages, so every directory of the package's
    search path is considered."""
    dirs: list[Path] = []
    for root in _package_search_locations():
        candidate = Path(root) / "engines"
        if candidate.is_dir() and candidate not in dirs:
            dirs.append(candidate)
    if not dirs:
        # Imported from a source checkout that shadows an installed copy (python run from the
        # repository root after `pip install .`): use the installed distribution's engines.
        installed = _installed_engines_dir()
        if installed is not None:
            dirs.append(installed)
    return dirs


def _package_search_locations() -> list[str]:
    """The directories of the top-level package's search path, read without importing the package
    (this layer sits below it). A submodule is only imported after its parent, so the package is
    normally in ``sys.modules`` already and its ``__path__`` is read as is (an editable
    scikit-build-core install puts both the source tree and the site-packages directory holding the
    compiled engines there). Otherwise ``importlib.util.find_spec`` of the top-level name asks the
    meta-path finders, which executes nothing."""
    module = sys.modules.get(_PACKAGE)
    locations = getattr(module, "__path__", None)
    if locations is None:
        try:
            spec = importlib.util.find_spec(_PACKAGE)
        except (ImportError, ValueError):
            return []
        locations = spec.submodule_search_locations if spec is not None else None
    return [str(p) for p in locations or []]


def _installed_engines_dir() -> Path | None:
    try:
        files = importlib.metadata.files("hipdnn") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in files:
        parts = Path(str(f)).parts
        if len(parts) >= 3 and parts[0] == _PACKAGE and parts[1] == "engines":
            located = Path(str(f.locate())).parent
            if located.is_dir():
                return located
    return None


def running_setid() -> bool:
    """True in a setuid or setgid process, where the environment is not the caller's to trust."""
    if not hasattr(os, "geteuid"):
        return False
    return os.getuid() != os.geteuid() or os.getgid() != os.getegid()


def env_plugin_dirs() -> list[Path]:
    """The directories of HIPDNN_PLUGIN_DIR; none in a setuid/setgid process."""
    value = os.environ.get(ENV_PLUGIN_DIR, "")
    if value and running_setid():
        log.warning("%s is ignored in a setuid/setgid process", ENV_PLUGIN_DIR)
        return []
    return [Path(p) for p in value.split(os.pathsep) if p]


def _locate_package(module: str) -> list[Path]:
    """The directories of package ``module``, found without importing (or executing) anything.

    The top-level name goes through every meta-path finder (``importlib.util.find_spec`` of a
    top-level name executes nothing); each further component is looked up with ``PathFinder`` in its
    parent's search locations, because ``find_spec("a.b")`` would import ``a``."""
    parts = module.split(".")
    if not all(p.isidentifier() for p in parts):
        raise LookupError(f"{module!r} is not a dotted module name")
    spec = importlib.util.find_spec(parts[0])
    for i in range(1, len(parts) + 1):
        name = ".".join(parts[:i])
        if spec is None:
            raise LookupError(f"module {name!r} not found on sys.path")
        locations = spec.submodule_search_locations
        if locations is None:
            raise LookupError(
                f"{name!r} is a module, not a package: the entry point must name a package whose "
                "directory holds the plugin library"
            )
        if i == len(parts):
            return [Path(p) for p in locations]
        spec = importlib.machinery.PathFinder.find_spec(".".join(parts[: i + 1]), list(locations))
    raise AssertionError("unreachable")


def entry_point_dirs() -> tuple[list[SearchPath], list[SkippedPlugin]]:
    """Directories named by the ``hipdnn.engine_plugins`` entry points, without importing them."""
    if running_setid() and not sys.flags.ignore_environment:
        # sys.path may have been shaped by PYTHONPATH, which a setuid caller controls.
        log.warning("entry points (%s) are ignored in a setuid/setgid process", ENTRY_POINT_GROUP)
        return [], []
    try:
        eps = list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
    except Exception as exc:  # a broken distribution on sys.path must not stop discovery
        log.warning("could not read entry points %s: %r", ENTRY_POINT_GROUP, exc)
        return [], []

    def dist_label(ep: importlib.metadata.EntryPoint) -> str:
        dist = getattr(ep, "dist", None)
        if dist is None:
            return ""
        return f"{dist.metadata['Name']} {dist.version}"

    found: list[SearchPath] = []
    rejected: list[SkippedPlugin] = []
    for ep in sorted(eps, key=lambda e: (e.name, e.value, dist_label(e))):
        label = dist_label(ep)
        origin = f"{ep.name} = {ep.value}" + (f" ({label})" if label else "")
        where = f"entry point {origin} in group {ENTRY_POINT_GROUP}"
        if ep.attr:
            reason = f"{where}: the value must name a package, without ':{ep.attr}'"
            rejected.append(SkippedPlugin(Path(ep.value), reason, str(PluginSource.ENTRY_POINT)))
            continue
        try:
            dirs = _locate_package(ep.module)
        except (LookupError, ImportError, ValueError) as exc:
            rejected.append(SkippedPlugin(Path(ep.module), f"{where}: {exc}", str(PluginSource.ENTRY_POINT)))
            continue
        found.extend(SearchPath(d, PluginSource.ENTRY_POINT, origin) for d in dirs)
    return found, rejected


def search_paths(
    plugin_paths: Sequence[str | os.PathLike[str]] | None = None,
    plugin_loading_mode: PluginLoadingMode = PluginLoadingMode.ADDITIVE,
) -> tuple[list[SearchPath], list[SkippedPlugin]]:
    """Every place to search, in order, and the entry points that could not be resolved."""
    given = [SearchPath(Path(p), PluginSource.HANDLE) for p in (plugin_paths or [])]
    if plugin_loading_mode is PluginLoadingMode.ABSOLUTE:
        return given, []
    builtin = builtin_engine_dirs()
    if not builtin:
        log.warning(
            "no built-in engines directory next to the hipdnn package: importing from a source "
            "checkout without building? Install with `pip install -e .`"
        )
    roots = [SearchPath(p, PluginSource.BUILTIN) for p in builtin]
    roots += [SearchPath(p, PluginSource.ENV) for p in env_plugin_dirs()]
    eps, rejected = entry_point_dirs()
    return roots + eps + given, rejected


# -- trust ---------------------------------------------------------------------------------------
def unsafe_reason(path: str | os.PathLike[str]) -> str | None:
    """Why the plugin file or plugin directory at ``path`` is refused, or None when it is trusted."""
    return TrustChecker().check(Path(path))


# -- listing -----------------------------------------------------------------------------------
def expand(roots: Iterable[SearchPath], rejected: list[SkippedPlugin] | None = None) -> Discovery:
    """Expand search paths into candidate files, in order, without opening any of them."""
    result = Discovery(rejected=list(rejected or []))
    checker = TrustChecker()
    seen: set[str] = set()
    for root in roots:
        result.search_paths.append(root)
        source = str(root.source)
        path = root.path
        if path.is_dir():
            problem = checker.check(path)
            if problem is not None:
                result.rejected.append(SkippedPlugin(path, f"untrusted plugin directory: {problem}", source))
                continue
            try:
                # Every entry named like a library, whatever its type: one that is not a regular file
                # (a FIFO, socket, device or directory named x.so) is reported, not silently passed over.
                members = sorted(p for p in path.iterdir() if is_shared_library_name(p))
            except OSError as exc:
                result.rejected.append(SkippedPlugin(path, f"cannot list plugin directory: {exc}", source))
                continue
        elif path.exists():
            members = [path]
        else:
            kind = "directory" if root.source is not PluginSource.HANDLE else "path"
            result.rejected.append(SkippedPlugin(path, f"plugin {kind} does not exist", source))
            continue
        for member in members:
            try:
                st = member.stat()
            except OSError as exc:
                result.rejected.append(SkippedPlugin(member, f"cannot read plugin file: {exc}", source))
                continue
            if not stat.S_ISREG(st.st_mode):
                result.rejected.append(SkippedPlugin(member, not_regular(member, st), source))
                continue
            real = os.path.realpath(member)
            if real in seen:
                continue
            seen.add(real)
            problem = checker.check(member)
            if problem is not None:
                result.rejected.append(SkippedPlugin(member, f"untrusted plugin file: {problem}", source))
                continue
            result.candidates.append(PluginCandidate(member, root.source, root.origin))
    return result


def discover(paths: Iterable[Path]) -> list[Path]:
    """Expand directories (non-recursively, sorted by name) and files into candidate files, in order,
    without opening them. Duplicates (same real path) keep their first position. Untrusted or missing
    paths are left out with a warning; :func:`discover_candidates` says more."""
    found = expand(SearchPath(Path(p), PluginSource.HANDLE) for p in paths)
    for r in found.rejected:
        log.warning("plugin path %s left out: %s", r.path, r.reason)
    return found.paths


def discover_candidates(
    plugin_paths: Sequence[str | os.PathLike[str]] | None = None,
    plugin_loading_mode: PluginLoadingMode = PluginLoadingMode.ADDITIVE,
) -> Discovery:
    """What a ``Handle(plugin_paths, plugin_loading_mode)`` created now would try to load, in order,
    and what it would refuse before loading. Nothing is opened and no entry point is imported."""
    roots, rejected = search_paths(plugin_paths, plugin_loading_mode)
    return expand(roots, rejected)
