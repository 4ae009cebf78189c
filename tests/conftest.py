"""Shared fixtures: the fake plugins (built once per session with CMake) and handles over them."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import hipdnn
from tests.fake_abi.fake_build import FAKE_VARIANTS, build_fake_plugins, load_fake


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
