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
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from hipdnn.plugins._cdef import sdk_include_dir

__all__ = ["api_version", "cmake_dir", "include_dir", "main", "pkg_config_dir"]

_VERSION = re.compile(r'^#define\s+HIPDNN_PLUGIN_API_VERSION\s+"(\d+\.\d+\.\d+)"', re.M)


def include_dir() -> Path:
    """The directory to add to the include path: it holds ``hipdnn_plugin_sdk/``."""
    return sdk_include_dir()


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
