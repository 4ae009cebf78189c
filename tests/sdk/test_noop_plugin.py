"""plugin_sdk/examples/noop: an engine that does nothing, for measuring host overhead per execute.

Built with the public helper ``hipdnn.sdk.build_plugin`` (strict C99), loaded alone into a handle,
serving graphs with and without execute-time overrides while touching no memory; its entries refuse
bad arguments with a last-error string when called directly through cffi."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import flatbuffers
import numpy as np
import pytest

import hipdnn
from hipdnn import sdk
from hipdnn.plugins.loader import ffi
from hipdnn.wire.EngineConfig import EngineConfigT
from hipdnn.wire.EngineDetails import EngineDetails

ENGINE_ID = 9990
PLUGIN_NAME = "hipdnn_noop"
HOST_MEMORY_NOTE = 1000
F32 = hipdnn.DataType.FLOAT
SUCCESS, BAD_PARAM = 0, 1
C99 = ["-std=c99", "-pedantic"]


def _have_c_compiler() -> bool:
    cc = os.environ.get("CC", "cc").split()
    return bool(cc) and shutil.which(cc[0]) is not None


@pytest.fixture(scope="module")
def noop_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not _have_c_compiler():
        pytest.skip("a C compiler ($CC or cc) is needed")
    out = tmp_path_factory.mktemp("noop") / "plugins" / "libhipdnn_noop.so"
    return sdk.build_plugin([sdk.example_source("noop")], out, extra_flags=C99)


@pytest.fixture
def handle(noop_lib: Path) -> Iterator[hipdnn.Handle]:
    h = hipdnn.Handle(plugin_paths=[noop_lib], plugin_loading_mode=hipdnn.PluginLoadingMode.ABSOLUTE)
    yield h
    h.close()


# -- the public helpers --------------------------------------------------------------------------


def test_example_source_finds_the_shipped_examples() -> None:
    noop = sdk.example_source("noop")
    assert noop.name == "noop_plugin.c" and noop.is_file()
    assert sdk.example_source("scaled_add").name == "scaled_add.c"
    with pytest.raises(FileNotFoundError, match="no example 'nope'"):
        sdk.example_source("nope")
    with pytest.raises(FileNotFoundError):
        sdk.example_source("../examples")


def test_build_plugin_reports_compiler_errors(tmp_path: Path) -> None:
    if not _have_c_compiler():
        pytest.skip("a C compiler ($CC or cc) is needed")
    bad = tmp_path / "bad.c"
    bad.write_text("int f(void) { int unused; return 0; }\n")  # -Wall -Werror: unused variable
    with pytest.raises(sdk.PluginBuildError) as err:
        sdk.build_plugin([bad], tmp_path / "libbad.so")
    assert "unused" in str(err.value) and "unused" in err.value.stderr and err.value.returncode != 0
    assert not (tmp_path / "libbad.so").exists()
    with pytest.raises(sdk.PluginBuildError, match="cannot run"):
        sdk.build_plugin([bad], tmp_path / "libbad.so", compiler=str(tmp_path / "no-such-cc"))
    with pytest.raises(FileNotFoundError):
        sdk.build_plugin([tmp_path / "missing.c"], tmp_path / "libx.so")
    with pytest.raises(ValueError, match="not a C"):
        (tmp_path / "x.f90").write_text("")
        sdk.build_plugin([tmp_path / "x.f90"], tmp_path / "libx.so")


def test_build_plugin_compiles_cxx_by_suffix(tmp_path: Path) -> None:
    if shutil.which(os.environ.get("CXX", "c++").split()[0]) is None:
        pytest.skip("a C++ compiler ($CXX or c++) is needed")
    src = tmp_path / "noop.cpp"  # the example is C99 and C++17 clean
    src.write_text(sdk.example_source("noop").read_text())
    lib = sdk.build_plugin([src], tmp_path / "libnoop_cxx.so", extra_flags=["-std=c++17"])
    with hipdnn.Handle(plugin_paths=[lib], plugin_loading_mode=hipdnn.PluginLoadingMode.ABSOLUTE) as h:
        assert [p.engine_ids for p in h.loaded_plugins()] == [(ENGINE_ID,)], h.skipped_plugins()


# -- through hipdnn --------------------------------------------------------------------------------


def test_loads_alone_with_api_1_2_and_its_engine(handle: hipdnn.Handle, noop_lib: Path) -> None:
    assert handle.skipped_plugins() == []
    (info,) = handle.loaded_plugins()
    assert info.name == PLUGIN_NAME and info.api_version == "1.2.0" and info.engine_ids == (ENGINE_ID,)
    assert info.has_override_execute and Path(info.path) == noop_lib
    assert noop_lib.stat().st_mode & 0o022 == 0  # plugin files must not be writable by others


def relu_graph(*, override: bool = True) -> tuple[hipdnn.Graph, hipdnn.TensorAttributes, hipdnn.TensorAttributes]:
    g = hipdnn.Graph(name="relu", io_data_type=F32, compute_data_type=F32, is_override_shape_enabled=override)
    x = g.tensor(name="x", dim=[4, 8], stride=[8, 1], data_type=F32)
    y = g.pointwise(hipdnn.PointwiseMode.RELU_FWD, x)
    y.set_output(True)
    return g, x, y


def test_executes_with_and_without_overrides_touching_nothing(handle: hipdnn.Handle) -> None:
    g, x, y = relu_graph()
    g.build(handle)
    assert g.get_engine_id() == ENGINE_ID and g.get_workspace_size() == 0
    xv = np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)
    yv = np.full((4, 8), np.nan, np.float32)
    for _ in range(3):
        g.execute(handle, {x: xv, y: yv})
    # views of the call's shape, with the arrays' own strides (a value states its layout)
    small = hipdnn.OverrideEntry(shape=[2, 3], stride=[8, 1])
    g.execute(handle, {x: xv[:2, :3], y: yv[:2, :3]}, overrides={x: small, y: small})
    g.execute(
        handle,
        {x: xv[:1], y: yv[:1]},
        override_uids=[x, y],
        override_shapes=[[1, 8]] * 2,
        override_strides=[[8, 1]] * 2,
    )
    assert np.isnan(yv).all(), "the no-op engine wrote to its output"


def test_serves_every_graph(handle: hipdnn.Handle) -> None:
    """No override flag, a node kind the engine knows nothing about, and dynamic tensors (API 1.2.0)."""
    g, x, y = relu_graph(override=False)
    g.build(handle)
    g.execute(handle, {x: np.zeros((4, 8), np.float32), y: np.zeros((4, 8), np.float32)})

    dyn = hipdnn.DYNAMIC_DIM
    g = hipdnn.Graph(name="dyn", io_data_type=F32, compute_data_type=F32, is_override_shape_enabled=True)
    a = g.tensor(name="a", dim=[dyn, 16], stride=[1, 0], data_type=F32).mark_dynamic()
    b = g.tensor(name="b", dim=[16, 8], stride=[8, 1], data_type=F32)
    c = g.matmul(a, b)
    c.set_output(True)
    g.build(handle)
    assert g.get_engine_id() == ENGINE_ID
    av, bv, cv = np.zeros((5, 16), np.float32), np.zeros((16, 8), np.float32), np.zeros((5, 8), np.float32)
    g.execute(
        handle,
        {a: av, b: bv, c: cv},
        overrides={
            a: hipdnn.OverrideEntry(shape=[5, 16], stride=[16, 1]),
            c: hipdnn.OverrideEntry(shape=[5, 8], stride=[8, 1]),
        },
    )


def test_host_memory_note_reaches_the_host(handle: hipdnn.Handle) -> None:
    """The engine declares host memory (behavior note 1000): device memory is refused before the call."""
    g, x, y = relu_graph()
    g.build(handle)
    device = SimpleNamespace(
        __cuda_array_interface__={"data": (0x7F0000001000, False), "shape": (4, 8), "typestr": "<f4", "version": 3}
    )
    with pytest.raises(hipdnn.HipdnnError) as err:
        g.execute(handle, {x: device, y: np.zeros((4, 8), np.float32)})
    assert err.value.code == hipdnn.ErrorCode.INVALID_VALUE and "runs on the host" in err.value.message


# -- the entries, called directly ----------------------------------------------------------------


class Direct:
    """The library opened with the loader's cffi declarations."""

    def __init__(self, path: Path) -> None:
        self.lib: Any = ffi.dlopen(str(path))

    def last_error(self) -> str:
        out = ffi.new("const char**")
        self.lib.hipdnnPluginGetLastErrorString(out)
        return str(ffi.string(out[0]).decode())

    def refused(self, status: int, *fragments: str) -> None:
        assert status == BAD_PARAM, status
        message = self.last_error()
        assert message, "no last error set"
        for f in fragments:
            assert f in message, message

    def create(self) -> Any:
        out = ffi.new("hipdnnEnginePluginHandle_t*")
        assert self.lib.hipdnnEnginePluginCreate(out) == SUCCESS
        assert out[0] != ffi.NULL
        return out[0]


def const_data(payload: bytes) -> tuple[Any, Any]:
    keep = ffi.new("char[]", payload)
    data = ffi.new("hipdnnPluginConstData_t*")
    data.ptr = keep
    data.size = len(payload)
    return data, keep


def engine_config(engine_id: int) -> bytes:
    builder = flatbuffers.Builder(64)
    builder.Finish(EngineConfigT(engineId=engine_id).Pack(builder))
    return bytes(builder.Output())


def test_entries_validate_their_arguments(noop_lib: Path) -> None:
    d = Direct(noop_lib)
    lib, null = d.lib, ffi.NULL
    graph, _g = const_data(relu_graph()[0].serialize())
    config, _c = const_data(engine_config(ENGINE_ID))
    ctx_out = ffi.new("hipdnnEnginePluginExecutionContext_t*")
    ids_out, count = ffi.new("int64_t[4]"), ffi.new("uint32_t*")
    buffers = ffi.new("hipdnnPluginDeviceBuffer_t[1]")

    assert lib.hipdnnEnginePluginGetAllEngineIds(ids_out, 4, count) == SUCCESS
    assert count[0] == 1 and ids_out[0] == ENGINE_ID
    d.refused(lib.hipdnnEnginePluginCreate(null), "NULL")

    h, other = d.create(), d.create()
    assert h != other
    # planning: applicable to any graph, no workspace, host-memory details
    assert lib.hipdnnEnginePluginGetApplicableEngineIds(h, graph, ids_out, 4, count) == SUCCESS
    assert count[0] == 1 and ids_out[0] == ENGINE_ID
    garbage, _k = const_data(b"\x01\x02\x03")
    assert lib.hipdnnEnginePluginGetApplicableEngineIds(h, garbage, ids_out, 4, count) == SUCCESS
    d.refused(lib.hipdnnEnginePluginGetApplicableEngineIds(null, graph, ids_out, 4, count), "handle")
    d.refused(lib.hipdnnEnginePluginGetApplicableEngineIds(h, null, ids_out, 4, count), "op_graph")
    details = ffi.new("hipdnnPluginConstData_t*")
    assert lib.hipdnnEnginePluginGetEngineDetails(h, ENGINE_ID, graph, details) == SUCCESS
    table = EngineDetails.GetRootAs(bytes(ffi.buffer(details.ptr, details.size)), 0)
    assert table.EngineId() == ENGINE_ID
    assert [table.BehaviorNotes(i) for i in range(table.BehaviorNotesLength())] == [HOST_MEMORY_NOTE]
    assert lib.hipdnnEnginePluginDestroyEngineDetails(h, details) == SUCCESS
    d.refused(lib.hipdnnEnginePluginGetEngineDetails(h, 1234, graph, details), "1234")
    size = ffi.new("size_t*", 99)
    assert lib.hipdnnEnginePluginGetWorkspaceSize(h, config, graph, size) == SUCCESS and size[0] == 0

    # execution contexts
    wrong, _w = const_data(engine_config(101))
    d.refused(lib.hipdnnEnginePluginCreateExecutionContext(h, wrong, graph, ctx_out), "101")
    assert ctx_out[0] == null
    d.refused(lib.hipdnnEnginePluginCreateExecutionContext(null, config, graph, ctx_out), "handle")
    assert lib.hipdnnEnginePluginCreateExecutionContext(h, config, graph, ctx_out) == SUCCESS
    ctx = ctx_out[0]
    assert ctx != null
    assert lib.hipdnnEnginePluginGetWorkspaceSizeFromExecutionContext(h, ctx, size) == SUCCESS and size[0] == 0

    # execute: null handle or context refused, with a last error; otherwise success, nothing done
    d.refused(lib.hipdnnEnginePluginExecuteOpGraph(null, ctx, null, buffers, 1), "handle")
    d.refused(lib.hipdnnEnginePluginExecuteOpGraph(h, null, null, buffers, 1), "execution context")
    d.refused(lib.hipdnnEnginePluginExecuteOpGraph(other, ctx, null, buffers, 1), "another handle")
    d.refused(lib.hipdnnEnginePluginExecuteOpGraph(h, ctx, null, null, 2), "device_buffers")
    assert lib.hipdnnEnginePluginExecuteOpGraph(h, ctx, null, buffers, 1) == SUCCESS
    assert lib.hipdnnEnginePluginExecuteOpGraph(h, ctx, null, null, 0) == SUCCESS

    ov = (ffi.new("int64_t[1]", [1]), ffi.new("uint32_t[1]", [2]))
    dims, strides = ffi.new("int64_t[2]", [2, 3]), ffi.new("int64_t[2]", [3, 1])
    shapes, stride_ptrs = ffi.new("int64_t*[1]", [dims]), ffi.new("int64_t*[1]", [strides])
    with_overrides = lib.hipdnnEnginePluginExecuteOpGraphWithOverrides
    d.refused(with_overrides(null, ctx, null, buffers, 1, 1, ov[0], ov[1], shapes, stride_ptrs), "handle")
    d.refused(with_overrides(h, null, null, buffers, 1, 1, ov[0], ov[1], shapes, stride_ptrs), "execution context")
    d.refused(with_overrides(h, ctx, null, buffers, 1, 1, null, ov[1], shapes, stride_ptrs), "overrides")
    assert with_overrides(h, ctx, null, buffers, 1, 1, ov[0], ov[1], shapes, stride_ptrs) == SUCCESS
    assert with_overrides(h, ctx, null, buffers, 1, 0, null, null, null, null) == SUCCESS

    # teardown: contexts before handles, each destroyed once, by its own handle
    d.refused(lib.hipdnnEnginePluginDestroyExecutionContext(other, ctx), "execution context")
    d.refused(lib.hipdnnEnginePluginDestroyExecutionContext(h, null), "execution context")
    assert lib.hipdnnEnginePluginDestroyExecutionContext(h, ctx) == SUCCESS
    d.refused(lib.hipdnnEnginePluginDestroy(null), "handle")
    assert lib.hipdnnEnginePluginDestroy(h) == SUCCESS
    assert lib.hipdnnEnginePluginDestroy(other) == SUCCESS
