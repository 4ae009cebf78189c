"""Build the fake engine plugins with CMake and load them with cffi.

Reusable by any test that needs the fakes::

    from tests.fake_abi.fake_build import build_fake_plugins, load_fake
    paths = build_fake_plugins(tmp_dir)          # name -> Path of lib<name>.so
    lib = load_fake(paths["fake_override_v110"])  # (ffi, lib) with SDK + hook declarations

The variants and what each one exports are listed in FAKE_VARIANTS; they must
match fake_plugins/CMakeLists.txt.

The same build also produces the loader's zoo of misbehaving plugins
(fake_plugins/misbehaving_plugin.c), listed in ZOO_VARIANTS; after
build_fake_plugins(build_dir), zoo_plugin_paths(build_dir) gives name -> path.
They have no test hooks and are kept out of FAKE_VARIANTS.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
HOOKS_HEADER = REPO_ROOT / "fake_plugins" / "include" / "fake_plugin_hooks.h"


@dataclass(frozen=True)
class FakeVariant:
    name: str
    api_version: str | None  # None: no hipdnnPluginGetApiVersion symbol
    has_overrides: bool  # exports hipdnnEnginePluginExecuteOpGraphWithOverrides
    engine_id: int
    version: str = "0.1.0"  # hipdnnPluginGetVersion


FAKE_VARIANTS: dict[str, FakeVariant] = {
    v.name: v
    for v in (
        FakeVariant("fake_override_v110", "1.1.0", True, 9001),
        FakeVariant("fake_plain_v100", "1.0.0", False, 9002),
        FakeVariant("fake_no_api_version", None, False, 9003),
        FakeVariant("fake_prebaseline_v001", "0.0.1", False, 9004),
        FakeVariant("fake_version_liar", "1.1.0", False, 9005),
        FakeVariant("fake_symbol_no_bump", "1.0.0", True, 9006),
        FakeVariant("fake_override_second", "1.1.0", True, 9007),
        FakeVariant("fake_override_v120", "1.2.0", True, 9008),
        FakeVariant("fake_override_v130", "1.3.0", True, 9009),
        FakeVariant("fake_override_v140", "1.4.0", True, 9010),
        FakeVariant("fake_override_v150", "1.5.0", True, 9011),
        FakeVariant("fake_override_v160", "1.6.0", True, 9012),
    )
}


#: Misbehaving plugins (fake_plugins/misbehaving_plugin.c): name -> what is wrong with it.
ZOO_VARIANTS: dict[str, str] = {
    "zoo_missing_symbol": "does not export hipdnnEnginePluginExecuteOpGraph",
    "zoo_api_unparsable": 'API version "1.x"',
    "zoo_api_empty": 'API version ""',
    "zoo_api_null": "API version NULL",
    "zoo_api_major2": 'API version "2.0.0"',
    "zoo_zero_engines": "reports zero engines",
    "zoo_count_changes": "engine count changes between calls",
    "zoo_duplicate_ids": "engine ids [9501, 9501]",
    "zoo_create_fails": "Create fails with INTERNAL_ERROR and a last error",
    "zoo_create_null": "Create returns a null handle",
    "zoo_shared_handle_a": "Create returns a fixed address shared with zoo_shared_handle_b (engine 9601)",
    "zoo_shared_handle_b": "Create returns a fixed address shared with zoo_shared_handle_a (engine 9602)",
    "zoo_collides_9001": "engines [9001, 9911]: 9001 is also fake_override_v110's",
    "zoo_name_fails": "GetName fails with INTERNAL_ERROR and a last error",
    "zoo_wrong_type": "GetType reports HIPDNN_PLUGIN_TYPE_HEURISTIC",
}


def _cmake() -> str:
    exe = shutil.which("cmake")
    if exe is None:
        raise RuntimeError("cmake not found on PATH")
    return exe


def library_path(build_dir: Path, name: str) -> Path:
    """Where CMake puts lib<name>.so inside build_dir."""
    suffix = ".dylib" if sys.platform == "darwin" else ".so"
    return Path(build_dir) / "fake_plugins" / f"lib{name}{suffix}"


def zoo_library_path(build_dir: Path, name: str) -> Path:
    """Where CMake puts the misbehaving plugin lib<name>.so inside build_dir."""
    return library_path(build_dir, name).parent.parent / "zoo_plugins" / library_path(build_dir, name).name


def zoo_plugin_paths(build_dir: Path) -> dict[str, Path]:
    """name -> path of every misbehaving plugin built by build_fake_plugins(build_dir)."""
    paths = {name: zoo_library_path(build_dir, name) for name in ZOO_VARIANTS}
    missing = [str(p) for p in paths.values() if not p.is_file()]
    if missing:
        raise RuntimeError(f"zoo plugins missing (run build_fake_plugins first): {missing}")
    return paths


def build_fake_plugins(build_dir: Path) -> dict[str, Path]:
    """Configure and build the fake plugins into build_dir; return name -> library path.

    Re-running on an existing build directory only rebuilds what changed.
    Raises RuntimeError with the CMake output when configuring or building fails.
    """
    build_dir = Path(build_dir)
    build_dir.mkdir(parents=True, exist_ok=True)
    configure = [
        _cmake(),
        "-S",
        str(REPO_ROOT),
        "-B",
        str(build_dir),
        "-DHIPDNN_BUILD_CPU_ENGINE=OFF",
        "-DHIPDNN_BUILD_EXECUTE_CORE=OFF",
        "-DHIPDNN_BUILD_FAKE_PLUGINS=ON",
        f"-DPython_EXECUTABLE={sys.executable}",
    ]
    if not (build_dir / "CMakeCache.txt").exists() and shutil.which("ninja"):
        configure[1:1] = ["-G", "Ninja"]
    build = [_cmake(), "--build", str(build_dir), "--target", "fake_plugins"]
    for cmd in (configure, build):
        proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy())
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    paths = {name: library_path(build_dir, name) for name in FAKE_VARIANTS}
    missing = [str(p) for p in paths.values() if not p.is_file()]
    if missing:
        raise RuntimeError(f"fake plugins missing after build: {missing}")
    return paths


def hooks_cdef() -> str:
    """cffi declarations of the hook functions (load after sdk_cdef())."""
    from hipdnn.plugins._cdef import declarations_from_header

    return declarations_from_header(HOOKS_HEADER.read_text())


def make_ffi():
    """A cffi FFI holding the SDK and hook declarations."""
    import cffi

    from hipdnn.plugins._cdef import sdk_cdef

    ffi = cffi.FFI()
    ffi.cdef(sdk_cdef())
    ffi.cdef(hooks_cdef())
    return ffi


def dlopen_flags(ffi) -> int:
    nodelete = getattr(ffi, "RTLD_NODELETE", None)
    if nodelete is None:
        nodelete = getattr(os, "RTLD_NODELETE", 0)
    return ffi.RTLD_NOW | nodelete


def load_fake(path: Path, ffi=None):
    """dlopen one fake plugin; returns (ffi, lib). The library is never unloaded."""
    if ffi is None:
        ffi = make_ffi()
    return ffi, ffi.dlopen(str(path), dlopen_flags(ffi))
