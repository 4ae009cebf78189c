"""plugin_sdk/examples/scaled_add, built out of tree against the SDK exactly as its README says
(find_package through `python -m hipdnn.sdk --cmake-dir`), loaded through HIPDNN_PLUGIN_DIR, serving
graphs with numbers checked against numpy."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import hipdnn
from hipdnn.frontend.types import DataType, ErrorCode, PointwiseMode
from hipdnn.plugins import _cdef
from tests.sdk.support import REPO, check_add_through_overrides, compact_strides

EXAMPLE = REPO / "plugin_sdk" / "examples" / "scaled_add"
ENGINE_ID = 5001
PLUGIN_NAME = "hipdnn_example_scaled_add"
F = DataType.FLOAT


@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cmake = shutil.which("cmake")
    if cmake is None or shutil.which("gcc") is None:
        pytest.skip("cmake and a C compiler are needed")
    root = tmp_path_factory.mktemp("example")
    cmake_dir = subprocess.run(
        [sys.executable, "-m", "hipdnn.sdk", "--cmake-dir"], capture_output=True, text=True, check=True
    ).stdout.strip()
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    for cmd in (
        [
            cmake,
            "-S",
            str(EXAMPLE),
            "-B",
            str(root / "build"),
            *gen,
            f"-DCMAKE_PREFIX_PATH={cmake_dir}",
            "-DCMAKE_BUILD_TYPE=Release",
        ],
        [cmake, "--build", str(root / "build")],
    ):
        result = subprocess.run(cmd, capture_output=True, text=True)
        assert result.returncode == 0, f"{cmd}\n{result.stdout}\n{result.stderr}"
    (lib,) = (root / "build").glob("*hipdnn_example_scaled_add.*")
    plugins = root / "plugins"
    plugins.mkdir(mode=0o755)
    shutil.copy2(lib, plugins / lib.name)
    return plugins


@pytest.fixture
def handle(plugin_dir: Path, monkeypatch: pytest.MonkeyPatch) -> hipdnn.Handle:
    monkeypatch.setenv("HIPDNN_PLUGIN_DIR", str(plugin_dir))
    h = hipdnn.Handle()
    yield h
    h.close()


def test_loaded_through_env_var(handle: hipdnn.Handle) -> None:
    (info,) = [p for p in handle.loaded_plugins() if p.name == PLUGIN_NAME]
    assert info.engine_ids == (ENGINE_ID,) and info.api_version == "1.1.0" and info.has_override_execute
    assert info.version == "1.0.0"


CASES = [
    (PointwiseMode.ADD, [3, 1, 5], [4, 1]),
    (PointwiseMode.SUB, [7], [7]),
    (PointwiseMode.MUL, [2, 3, 5, 7], [1, 3, 1, 7]),
    (PointwiseMode.ADD, [1], [2, 1, 3, 1, 5]),
    (PointwiseMode.SUB, [1, 1], [9, 11]),
]


@pytest.mark.parametrize(("mode", "xd", "yd"), CASES)
def test_serves_broadcast_pointwise(handle: hipdnn.Handle, mode: PointwiseMode, xd: list[int], yd: list[int]) -> None:
    g = hipdnn.Graph(
        name="example",
        io_data_type=F,
        intermediate_data_type=F,
        compute_data_type=F,
        preferred_engine_id=ENGINE_ID,
    )
    x = g.tensor(name="x", dim=xd, stride=compact_strides(xd), data_type=F)
    y = g.tensor(name="y", dim=yd, stride=compact_strides(yd), data_type=F)
    out = g.pointwise(mode, x, y)
    out.set_output(True)
    g.build(handle)
    assert g.get_engine_id() == ENGINE_ID and g.get_workspace_size() == 0
    rng = np.random.default_rng(len(xd) * 31 + len(yd))
    a = rng.standard_normal(xd).astype(np.float32)
    b = rng.standard_normal(yd).astype(np.float32)
    c = np.full(out.get_dim(), np.nan, np.float32)
    g.execute(handle, {x: a, y: b, out: c}, np.empty(0, np.uint8))
    ref = {PointwiseMode.ADD: a + b, PointwiseMode.SUB: a - b, PointwiseMode.MUL: a * b}[mode]
    np.testing.assert_array_equal(c, ref)


def test_strided_input(handle: hipdnn.Handle) -> None:
    """x is a transposed view: dims [4, 3] with strides [1, 4] over 12 floats."""
    g = hipdnn.Graph(
        name="t", io_data_type=F, intermediate_data_type=F, compute_data_type=F, preferred_engine_id=ENGINE_ID
    )
    x = g.tensor(name="x", dim=[4, 3], stride=[1, 4], data_type=F)
    y = g.tensor(name="y", dim=[3], stride=[1], data_type=F)
    out = g.pointwise(PointwiseMode.MUL, x, y)
    out.set_output(True)
    g.build(handle)
    base = np.arange(12, dtype=np.float32)
    b = np.array([2, -1, 0.5], np.float32)
    c = np.full([4, 3], np.nan, np.float32)
    view = base.reshape(3, 4).T  # shape (4, 3), element strides (1, 4): no copy
    assert view.base is not None and view.strides == (4, 16)
    g.execute(handle, {x: view, y: b, out: c}, np.empty(0, np.uint8))
    np.testing.assert_array_equal(c, view * b)


def test_override_entry(handle: hipdnn.Handle) -> None:
    """Built at maximum shapes, run at a smaller one through ExecuteOpGraphWithOverrides (API 1.1.0)."""
    check_add_through_overrides(handle, ENGINE_ID)


def test_absolute_mode_and_not_applicable(plugin_dir: Path) -> None:
    (lib,) = plugin_dir.iterdir()
    h = hipdnn.Handle(plugin_paths=[lib], plugin_loading_mode=hipdnn.PluginLoadingMode.ABSOLUTE)
    try:
        assert [p.name for p in h.loaded_plugins()] == [PLUGIN_NAME]
        g = hipdnn.Graph(name="div", io_data_type=F, intermediate_data_type=F, compute_data_type=F)
        x = g.tensor(name="x", dim=[3], stride=[1], data_type=F)
        out = g.pointwise(PointwiseMode.DIV, x, g.tensor(name="y", dim=[3], stride=[1], data_type=F))
        out.set_output(True)
        with pytest.raises(hipdnn.HipdnnError) as err:
            g.build(h)
        assert err.value.code == ErrorCode.GRAPH_NOT_SUPPORTED
        assert PLUGIN_NAME in str(err.value) and "not applicable" in str(err.value)
    finally:
        h.close()


def test_last_error_and_logging_entries(plugin_dir: Path) -> None:
    """The entries HIPDNN_PLUGIN_DEFINE_ERROR_AND_LOG_ENTRIES() defines, called directly."""
    import cffi

    ffi = cffi.FFI()
    ffi.cdef(_cdef.sdk_cdef())
    (lib_path,) = plugin_dir.iterdir()
    lib = ffi.dlopen(str(lib_path))
    err = ffi.new("const char**")
    assert lib.hipdnnEnginePluginCreate(ffi.NULL) == 1  # BAD_PARAM
    lib.hipdnnPluginGetLastErrorString(err)
    assert ffi.string(err[0]) == b"handle is NULL"

    seen: list[tuple[int, bytes]] = []

    @ffi.callback("void(hipdnnSeverity_t, const char*)")
    def sink(sev: int, msg: object) -> None:
        seen.append((int(sev), ffi.string(msg)))

    assert lib.hipdnnPluginSetLoggingCallback(sink) == 0
    try:
        assert lib.hipdnnPluginSetLogLevel(0) == 0
        handle = ffi.new("hipdnnEnginePluginHandle_t*")
        assert lib.hipdnnEnginePluginCreate(handle) == 0
        assert (0, b"created a plugin instance") in seen
        assert lib.hipdnnPluginSetLogLevel(2) == 0  # ERROR and above only
        seen.clear()
        assert lib.hipdnnEnginePluginDestroy(handle[0]) == 0
        assert lib.hipdnnEnginePluginCreate(handle) == 0
        assert seen == []
        assert lib.hipdnnPluginSetLogLevel(99) == 1
        lib.hipdnnPluginGetLastErrorString(err)
        assert b"log level 99" in ffi.string(err[0])
        assert lib.hipdnnEnginePluginDestroy(handle[0]) == 0
        # engine-id count convention
        n = ffi.new("uint32_t*")
        assert lib.hipdnnEnginePluginGetAllEngineIds(ffi.NULL, 0, n) == 0 and n[0] == 1
        assert lib.hipdnnEnginePluginGetAllEngineIds(ffi.NULL, 1, n) == 1
    finally:
        assert lib.hipdnnPluginSetLoggingCallback(ffi.NULL) == 0
        assert lib.hipdnnPluginSetLogLevel(1) == 0
