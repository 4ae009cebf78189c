"""Shared fixtures: the fake plugins (built once per session with CMake) and handles over them, and
the HIP engine (built once per session where nvcc or hipcc exists)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import hipdnn
from tests.fake_abi.fake_build import FAKE_VARIANTS, build_fake_plugins, load_fake
from tests.gpu.hip_support import GPU_COMPILERS, build_hip_wheel, find_plugin, plugin_of_wheel


@pytest.fixture(scope="session")
def fake_plugin_paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """name -> path of every fake plugin variant (see fake_plugins/README.md)."""
    env_dir = os.environ.get("HIPDNN_FAKE_BUILD_DIR")
    build_dir = Path(env_dir) if env_dir else tmp_path_factory.mktemp("fake_build")
    return build_fake_plugins(build_dir)


class FakeControl:
    """Test-side view of one fake plugin's hooks (state is shared with the host's copy of the library)."""

    def __init__(self, path: Path) -> None:
        self.ffi, self.lib = load_fake(path)
        self.name = path.stem.removeprefix("lib")

    def calls(self, entry: str | None = None) -> list[dict[str, Any]]:
        log = json.loads(self.ffi.string(self.lib.fakePluginGetCallLog()).decode())
        return [c for c in log if entry is None or c["entry"] == entry]

    def reset(self) -> None:
        self.lib.fakePluginResetState()

    def set_applicable(self, yes: bool) -> None:
        self.lib.fakePluginSetApplicable(1 if yes else 0)

    def fail_execute(self, status: int, message: str) -> None:
        self.lib.fakePluginSetExecuteFailure(status, message.encode())

    def set_workspace_size(self, nbytes: int) -> None:
        self.lib.fakePluginSetWorkspaceSize(nbytes)


@pytest.fixture(scope="session")
def _fake_controls(fake_plugin_paths: dict[str, Path]) -> dict[str, FakeControl]:
    return {name: FakeControl(path) for name, path in fake_plugin_paths.items()}


@pytest.fixture
def fakes(_fake_controls: dict[str, FakeControl]) -> Iterator[dict[str, FakeControl]]:
    """Controls for every fake (shared across the session), reset before and after each test."""
    controls = _fake_controls
    for c in controls.values():
        c.reset()
    yield controls
    for c in controls.values():
        c.reset()


@pytest.fixture
def fake_handle_factory(fake_plugin_paths: dict[str, Path]) -> Iterator[Any]:
    """fake_handle_factory("fake_override_v110", "fake_plain_v100") -> a Handle over exactly those fakes."""
    handles: list[hipdnn.Handle] = []

    def make(*names: str) -> hipdnn.Handle:
        for n in names:
            assert n in FAKE_VARIANTS, n
        h = hipdnn.Handle(
            plugin_paths=[fake_plugin_paths[n] for n in names],
            plugin_loading_mode=hipdnn.PluginLoadingMode.ABSOLUTE,
        )
        handles.append(h)
        return h

    yield make
    for h in handles:
        h.close()


@pytest.fixture(scope="session")
def hip_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """engines/hip's distribution (hipdnn-engine-hip) built as a wheel with this machine's GPU compiler,
    once per session; the GPU tests load its plugin (``hip_plugin``), tests/test_packaging.py checks
    the wheel itself."""
    if not GPU_COMPILERS:
        pytest.skip("no GPU compiler (nvcc or hipcc) on PATH: the hipdnn-engine-hip distribution is not built here")
    return build_hip_wheel(tmp_path_factory.mktemp("hip_wheel"))


@pytest.fixture(scope="session")
def hip_plugin(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The HIP engine plugin the GPU tests load: the file HIPDNN_HIP_ENGINE names; else, where nvcc or
    hipcc exists, this tree's engines/hip built for this session (``hip_wheel``), so that what is
    tested is the source beside the tests; else an installed hipdnn-engine-hip or a build tree
    (``find_plugin``). Skips, saying which, when there is none of these."""
    env = os.environ.get("HIPDNN_HIP_ENGINE")
    if env:
        if not Path(env).is_file():
            pytest.fail(f"HIPDNN_HIP_ENGINE={env!r} is not a file (unset it to build the engine here)")
        return Path(env)
    if GPU_COMPILERS:
        wheel: Path = request.getfixturevalue("hip_wheel")
        return plugin_of_wheel(wheel, tmp_path_factory.mktemp("hip_plugin"))
    found = find_plugin()
    if found is None:
        pytest.skip(
            "the HIP engine is not built and cannot be here: no nvcc or hipcc on PATH, no hipdnn-engine-hip "
            "installed, HIPDNN_HIP_ENGINE unset"
        )
    return found
