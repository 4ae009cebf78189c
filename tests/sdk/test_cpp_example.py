"""plugin_sdk/examples/cpp_scaled_add, the C example's engine on the SDK's C++ layer: built out of tree
through the installed CMake config (hipdnn_plugin_sdk::cpp), loaded through HIPDNN_PLUGIN_DIR,
serving graphs checked against numpy, with and without shape overrides."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import hipdnn
from hipdnn.frontend.types import DataType, ErrorCode, PointwiseMode
from tests.sdk.support import REPO, check_add_through_overrides, compact_strides

EXAMPLE = REPO / "plugin_sdk" / "examples" / "cpp_scaled_add"
ENGINE_ID = 5002
PLUGIN_NAME = "hipdnn_example_cpp_scaled_add"
F = DataType.FLOAT


@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cmake = shutil.which("cmake")
    if cmake is None or shutil.which("g++") is None:
        pytest.skip("cmake and a C++ compiler are needed")
    root = tmp_path_factory.mktemp("cpp_example")
    cmake_dir = subprocess.run(
        [sys.executable, "-m", "hipdnn.sdk", "--cmake-dir"], capture_output=True, text=True, check=True
    ).stdout.strip()
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    configure = [cmake, "-S", str(EXAMPLE), "-B", str(root / "build"), *gen, f"-DCMAKE_PREFIX_PATH={cmake_dir}"]
    configure += [f"-DPython_EXECUTABLE={sys.executable}", "-DCMAKE_BUILD_TYPE=Release"]
    for cmd in (configure, [cmake, "--build", str(root / "build")]):
        result = subprocess.run(cmd, capture_output=True, text=True)
        assert result.returncode == 0, f"{cmd}\n{result.stdout}\n{result.stderr}"
    (lib,) = (root / "build").glob(f"*{PLUGIN_NAME}.*")
    plugins = root / "plugins"
    plugins.mkdir(mode=0o755)
    shutil.copy2(lib, plugins / lib.name)
    return plugins


@pytest.fixture
def handle(plugin_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[hipdnn.Handle]:
    monkeypatch.setenv("HIPDNN_PLUGIN_DIR", str(plugin_dir))
    h = hipdnn.Handle()
    yield h
    h.close()


def _graph(name: str, **kw: object) -> hipdnn.Graph:
    return hipdnn.Graph(  # type: ignore[arg-type]
        name=name, io_data_type=F, intermediate_data_type=F, compute_data_type=F, preferred_engine_id=ENGINE_ID, **kw
    )


def test_loaded_through_env_var(handle: hipdnn.Handle) -> None:
    (info,) = [p for p in handle.loaded_plugins() if p.name == PLUGIN_NAME]
    assert info.engine_ids == (ENGINE_ID,) and info.api_version == "1.1.0" and info.has_override_execute


@pytest.mark.parametrize(
    ("mode", "xd", "yd"),
    [
        (PointwiseMode.ADD, [3, 1, 5], [4, 1]),
        (PointwiseMode.SUB, [7], [7]),
        (PointwiseMode.MUL, [2, 3, 5, 7], [1, 3, 1, 7]),
    ],
)
def test_serves_broadcast_pointwise(handle: hipdnn.Handle, mode: PointwiseMode, xd: list[int], yd: list[int]) -> None:
    g = _graph("example")
    x = g.tensor(name="x", dim=xd, stride=compact_strides(xd), data_type=F)
    y = g.tensor(name="y", dim=yd, stride=compact_strides(yd), data_type=F)
    out = g.pointwise(mode, x, y)
    out.set_output(True)
    g.build(handle)
    assert g.get_engine_id() == ENGINE_ID and g.get_workspace_size() == 0
    rng = np.random.default_rng(len(xd))
    a = rng.standard_normal(xd).astype(np.float32)
    b = rng.standard_normal(yd).astype(np.float32)
    c = np.full(out.get_dim(), np.nan, np.float32)
    g.execute(handle, {x: a, y: b, out: c}, np.empty(0, np.uint8))
    ref = {PointwiseMode.ADD: a + b, PointwiseMode.SUB: a - b, PointwiseMode.MUL: a * b}[mode]
    np.testing.assert_array_equal(c, ref)


def test_override_entry(handle: hipdnn.Handle) -> None:
    """Built at maximum shapes, run at smaller ones through ExecuteOpGraphWithOverrides."""
    check_add_through_overrides(handle, ENGINE_ID)


def test_not_applicable_says_why(plugin_dir: Path) -> None:
    (lib,) = plugin_dir.iterdir()
    h = hipdnn.Handle(plugin_paths=[lib], plugin_loading_mode=hipdnn.PluginLoadingMode.ABSOLUTE)
    try:
        g = _graph("div")
        x = g.tensor(name="x", dim=[3], stride=[1], data_type=F)
        out = g.pointwise(PointwiseMode.DIV, x, g.tensor(name="y", dim=[3], stride=[1], data_type=F))
        out.set_output(True)
        with pytest.raises(hipdnn.HipdnnError) as err:
            g.build(h)
        assert err.value.code == ErrorCode.GRAPH_NOT_SUPPORTED
        assert PLUGIN_NAME in str(err.value) and "not applicable" in str(err.value)
    finally:
        h.close()
