"""ABI tests of the CPU engine plugin (engines/cpu), driven directly through cffi.

The plugin is built with CMake once per session (set HIPDNN_CPU_ENGINE_LIB to a
built libhipdnn_cpu_engine.so to skip the build), graphs are serialized with the
generated FlatBuffers object API in hipdnn.wire, and every result is checked
against a float64 numpy reference written from the operation's definition.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

import cffi
import flatbuffers
import numpy as np
import pytest

from hipdnn.frontend.ops.sdpa_fp8 import AMAX_ROLES, SCALE_ROLES, WIRE_FIELDS
from hipdnn.frontend.ops.sdpa_fp8_backward import BACKWARD_AMAX_ROLES, BACKWARD_SCALE_ROLES, BACKWARD_WIRE_FIELDS
from hipdnn.plugins._cdef import sdk_cdef
from hipdnn.wire.DataType import DataType
from hipdnn.wire.DiagonalAlignment import DiagonalAlignment
from hipdnn.wire.EngineConfig import EngineConfigT
from hipdnn.wire.EngineDetails import EngineDetails
from hipdnn.wire.Float32Value import Float32ValueT
from hipdnn.wire.FloatValue import FloatValueT
from hipdnn.wire.Graph import GraphT
from hipdnn.wire.IntConstraint import IntConstraint
from hipdnn.wire.IntValue import IntValue, IntValueT
from hipdnn.wire.KnobSetting import KnobSettingT
from hipdnn.wire.KnobValue import KnobValue
from hipdnn.wire.MatmulAttributes import MatmulAttributesT
from hipdnn.wire.Node import NodeT
from hipdnn.wire.NodeAttributes import NodeAttributes
from hipdnn.wire.PointwiseAttributes import PointwiseAttributesT
from hipdnn.wire.PointwiseMode import PointwiseMode
from hipdnn.wire.SdpaAttributes import SdpaAttributesT
from hipdnn.wire.TensorAttributes import TensorAttributesT
from hipdnn.wire.TensorValue import TensorValue

REPO_ROOT = Path(__file__).resolve().parents[2]
ENGINE_ID = 101

SUCCESS = 0
BAD_PARAM = 1
NOT_APPLICABLE = 5
HOST_MEMORY_NOTE = 1000  # HIPDNN_BEHAVIOR_NOTE_HOST_MEMORY_EXT

TOL = 1e-5
RNG = np.random.default_rng(1234)


# ------------------------------------------------------------------ build / load


def _build_plugin(build_dir: Path) -> Path:
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.skip("cmake not found")
    cfg = [
        cmake,
        "-S",
        str(REPO_ROOT),
        "-B",
        str(build_dir),
        "-DCMAKE_BUILD_TYPE=Release",
        "-DHIPDNN_BUILD_CPU_ENGINE=ON",
        "-DHIPDNN_BUILD_FAKE_PLUGINS=OFF",
        f"-DPython_EXECUTABLE={sys.executable}",
    ]
    if shutil.which("ninja"):
        cfg += ["-G", "Ninja"]
    for cmd in (cfg, [cmake, "--build", str(build_dir), "--target", "hipdnn_cpu_engine", "-j", "2"]):
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{res.stdout}\n{res.stderr}")
    return build_dir / "engines" / "cpu" / "libhipdnn_cpu_engine.so"


@pytest.fixture(scope="session")
def plugin_path(tmp_path_factory) -> Path:
    pre = os.environ.get("HIPDNN_CPU_ENGINE_LIB")
    if pre:
        return Path(pre)
    return _build_plugin(tmp_path_factory.mktemp("cpu_engine_build"))


@pytest.fixture(scope="session")
def ffi() -> cffi.FFI:
    f = cffi.FFI()
    f.cdef(sdk_cdef())
    return f


@pytest.fixture(scope="session")
def lib(ffi, plugin_path):
    return ffi.dlopen(str(plugin_path))


@pytest.fixture(scope="session")
def handle(ffi, lib):
    h = ffi.new("hipdnnEnginePluginHandle_t*")
    assert lib.hipdnnEnginePluginCreate(h) == SUCCESS
    yield h[0]
    assert lib.hipdnnEnginePluginDestroy(h[0]) == SUCCESS


def last_error(ffi, lib) -> str:
    p = ffi.new("const char**")
    lib.hipdnnPluginGetLastErrorString(p)
    return ffi.string(p[0]).decode()


# ------------------------------------------------------------------ graph building


@dataclass
class T:
    """A graph tensor: dims, strides in elements (None: compact row-major)."""

    uid: int
    dims: list[int]
    strides: list[int] | None = None
    virtual: bool = False
    dtype: int = DataType.FLOAT
    value: float | None = None  # by-value scalar

    def __post_init__(self):
        if self.strides is None:
            self.strides = compact(self.dims)


def compact(dims):
    st, acc = [], 1
    for d in reversed(dims):
        st.append(acc)
        acc *= d
    return list(reversed(st))


def bshd_strides(b, h, s, d):
    """Strides of a [B,H,S,D] tensor stored as B,S,H,D."""
    return [s * h * d, d, h * d, 1]


def node(kind, attrs, name="n"):
    n = NodeT()
    n.name = name
    n.computeDataType = DataType.FLOAT
    n.attributesType = kind
    n.attributes = attrs
    return n


def sdpa_node(q, k, v, o, stats=None, scale=None, **kw):
    a = SdpaAttributesT()
    a.qTensorUid, a.kTensorUid, a.vTensorUid, a.oTensorUid = q, k, v, o
    a.statsTensorUid = stats
    a.attnScaleValue = scale
    for key, val in kw.items():
        assert hasattr(a, key), key
        setattr(a, key, val)
    return node(NodeAttributes.SdpaAttributes, a, "sdpa")


def matmul_node(a_uid, b_uid, c_uid):
    a = MatmulAttributesT()
    a.aTensorUid, a.bTensorUid, a.cTensorUid = a_uid, b_uid, c_uid
    return node(NodeAttributes.MatmulAttributes, a, "matmul")


def pw_node(mode, in0, in1, out, **kw):
    a = PointwiseAttributesT()
    a.operation = mode
    a.in0TensorUid, a.in1TensorUid, a.out0TensorUid = in0, in1, out
    for key, val in kw.items():
        setattr(a, key, val)
    return node(NodeAttributes.PointwiseAttributes, a, f"pw{mode}")


def graph_bytes(tensors, nodes, io=DataType.FLOAT, override=False) -> bytes:
    g = GraphT()
    g.name = "test_graph"
    g.ioDataType = io
    g.computeDataType = DataType.FLOAT
    g.intermediateDataType = DataType.FLOAT
    g.isOverrideShapeEnabled = override
    g.tensors = []
    for t in tensors:
        ta = TensorAttributesT()
        ta.uid, ta.name, ta.dataType = t.uid, f"t{t.uid}", t.dtype
        ta.dims, ta.strides, ta.virtual = list(t.dims), list(t.strides), t.virtual
        if t.value is not None:
            v = Float32ValueT()
            v.value = t.value
            ta.valueType, ta.value = TensorValue.Float32Value, v
        g.tensors.append(ta)
    g.nodes = list(nodes)
    b = flatbuffers.Builder(1024)
    b.Finish(g.Pack(b))
    return bytes(b.Output())


def config_bytes(engine_id=ENGINE_ID, knobs=()) -> bytes:
    """An EngineConfig naming ``engine_id``, with ``knobs``: (knob id, value) pairs, the value an int
    (IntValue) or a float (FloatValue)."""
    c = EngineConfigT()
    c.engineId = engine_id
    if knobs:
        c.knobs = []
        for name, value in knobs:
            k = KnobSettingT()
            k.knobId = name
            if isinstance(value, float):
                k.valueType, k.value = KnobValue.FloatValue, FloatValueT()
            else:
                k.valueType, k.value = KnobValue.IntValue, IntValueT()
            k.value.value = value
            c.knobs.append(k)
    b = flatbuffers.Builder(64)
    b.Finish(c.Pack(b))
    return bytes(b.Output())


# ------------------------------------------------------------------ host buffers


def extent(dims, strides):
    return 1 + sum((d - 1) * s for d, s in zip(dims, strides))


@dataclass
class Buf:
    """A flat float32 allocation plus a strided view of it."""

    flat: np.ndarray
    view: np.ndarray

    @property
    def ptr(self):
        return self.flat.ctypes.data


def make_buf(dims, strides, fill="rand", capacity=None):
    n = capacity if capacity is not None else extent(dims, strides)
    if fill == "rand":
        flat = RNG.uniform(-1.0, 1.0, n).astype(np.float32)
        flat[np.abs(flat) < 1e-3] = 0.5  # never zeros
    else:
        flat = np.full(n, np.nan, np.float32)
    view = np.lib.stride_tricks.as_strided(flat, shape=tuple(dims), strides=tuple(4 * s for s in strides))
    return Buf(flat, view)


@dataclass
class Ctx:
    ffi: object
    lib: object
    handle: object
    ptr: object
    ws_size: int
    keep: list = field(default_factory=list)

    def execute(self, buffers: dict, overrides=None, workspace="auto"):
        ffi, lib = self.ffi, self.lib
        arr = ffi.new("hipdnnPluginDeviceBuffer_t[]", max(1, len(buffers)))
        for i, (uid, ptr) in enumerate(buffers.items()):
            arr[i].uid = uid
            arr[i].ptr = ffi.cast("void*", ptr) if isinstance(ptr, int) else ptr
        if workspace == "auto":
            ws_arr = np.empty(max(1, self.ws_size), np.uint8)
            ws = ffi.cast("void*", ws_arr.ctypes.data) if self.ws_size else ffi.NULL
        else:
            ws = workspace
        if overrides is None:
            return lib.hipdnnEnginePluginExecuteOpGraph(self.handle, self.ptr, ws, arr, len(buffers))
        uids = list(overrides)
        dims = [ffi.new("int64_t[]", list(overrides[u][0])) for u in uids]
        strides = [ffi.new("int64_t[]", list(overrides[u][1])) for u in uids]
        return lib.hipdnnEnginePluginExecuteOpGraphWithOverrides(
            self.handle,
            self.ptr,
            ws,
            arr,
            len(buffers),
            len(uids),
            ffi.new("int64_t[]", uids),
            ffi.new("uint32_t[]", [len(overrides[u][0]) for u in uids]),
            ffi.new("int64_t*[]", dims),
            ffi.new("int64_t*[]", strides),
        )

    def destroy(self):
        assert self.lib.hipdnnEnginePluginDestroyExecutionContext(self.handle, self.ptr) == SUCCESS


def const_data(ffi, data: bytes, keep: list):
    cbuf = ffi.from_buffer(data)
    keep.append(cbuf)
    d = ffi.new("hipdnnPluginConstData_t*")
    d.ptr = cbuf
    d.size = len(data)
    keep.append(d)
    return d


def applicable(ffi, lib, handle, gbytes: bytes) -> list[int]:
    keep = []
    g = const_data(ffi, gbytes, keep)
    ids = ffi.new("int64_t[4]")
    n = ffi.new("uint32_t*")
    st = lib.hipdnnEnginePluginGetApplicableEngineIds(handle, g, ids, 4, n)
    assert st == SUCCESS, last_error(ffi, lib)
    return [ids[i] for i in range(n[0])]


def make_ctx(ffi, lib, handle, gbytes: bytes) -> Ctx:
    assert applicable(ffi, lib, handle, gbytes) == [ENGINE_ID]
    keep = []
    g = const_data(ffi, gbytes, keep)
    c = const_data(ffi, config_bytes(), keep)
    ws1 = ffi.new("size_t*")
    assert lib.hipdnnEnginePluginGetWorkspaceSize(handle, c, g, ws1) == SUCCESS, last_error(ffi, lib)
    p = ffi.new("hipdnnEnginePluginExecutionContext_t*")
    assert lib.hipdnnEnginePluginCreateExecutionContext(handle, c, g, p) == SUCCESS, last_error(ffi, lib)
    ws2 = ffi.new("size_t*")
    assert lib.hipdnnEnginePluginGetWorkspaceSizeFromExecutionContext(handle, p[0], ws2) == SUCCESS
    assert ws1[0] == ws2[0]
    return Ctx(ffi, lib, handle, p[0], ws2[0], keep)


# ------------------------------------------------------------------ references


def rel_err(out, ref):
    out = np.asarray(out, np.float64)
    ref = np.asarray(ref, np.float64)
    assert out.shape == ref.shape
    assert not np.isnan(out).any(), "output has NaN (unwritten elements?)"
    denom = max(np.abs(ref).max(), 1e-30)
    return np.abs(out - ref).max() / denom


def sdpa_ref(q, k, v, scale, diag=None):
    """o, stats (float64). diag: query i sees keys j <= i + diag; None: no mask."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    hq, hk = q.shape[1], k.shape[1]
    k = np.repeat(k, hq // hk, axis=1)
    v = np.repeat(v, hq // hk, axis=1)
    s = np.einsum("bhqd,bhkd->bhqk", q, k) * scale
    sq, skv = s.shape[2], s.shape[3]
    if diag is not None:
        i = np.arange(sq)[:, None]
        j = np.arange(skv)[None, :]
        s = np.where(j <= i + diag, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    dead = np.isneginf(m)
    m_safe = np.where(dead, 0.0, m)
    e = np.exp(s - m_safe)
    row_sum = e.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(dead, 0.0, e / np.where(dead, 1.0, row_sum))
        lse = np.where(dead, -np.inf, m_safe + np.log(np.where(dead, 1.0, row_sum)))
    return np.einsum("bhqk,bhkd->bhqd", p, v), lse


def check_stats(out, ref):
    out = np.asarray(out, np.float64)
    ninf = np.isneginf(ref)
    assert (np.isneginf(out) == ninf).all(), "-inf rows differ"
    if (~ninf).any():
        assert rel_err(out[~ninf], ref[~ninf]) < TOL


# ================================================================== metadata


def test_metadata(ffi, lib):
    s = ffi.new("const char**")
    assert lib.hipdnnPluginGetName(s) == SUCCESS and ffi.string(s[0]) == b"hipdnn_cpu_engine"
    assert lib.hipdnnPluginGetVersion(s) == SUCCESS and ffi.string(s[0]) == b"0.1.0"
    assert lib.hipdnnPluginGetApiVersion(s) == SUCCESS and ffi.string(s[0]) == b"1.6.0"
    t = ffi.new("hipdnnPluginType_t*")
    assert lib.hipdnnPluginGetType(t) == SUCCESS and t[0] == lib.HIPDNN_PLUGIN_TYPE_ENGINE
    for fn in (lib.hipdnnPluginGetName, lib.hipdnnPluginGetVersion, lib.hipdnnPluginGetApiVersion):
        assert fn(ffi.NULL) == BAD_PARAM
    assert lib.hipdnnPluginGetType(ffi.NULL) == BAD_PARAM
    assert "NULL" in last_error(ffi, lib)

    # count convention
    n = ffi.new("uint32_t*")
    assert lib.hipdnnEnginePluginGetAllEngineIds(ffi.NULL, 0, n) == SUCCESS and n[0] == 1
    ids = ffi.new("int64_t[3]", [-1, -1, -1])
    assert lib.hipdnnEnginePluginGetAllEngineIds(ids, 3, n) == SUCCESS
    assert n[0] == 1 and ids[0] == ENGINE_ID and ids[1] == -1
    assert lib.hipdnnEnginePluginGetAllEngineIds(ids, 1, ffi.NULL) == BAD_PARAM
    assert lib.hipdnnEnginePluginGetAllEngineIds(ffi.NULL, 2, n) == BAD_PARAM

    # last error is per thread and "" when there was none
    seen = []
    th = threading.Thread(target=lambda: seen.append(last_error(ffi, lib)))
    th.start()
    th.join()
    assert seen == [""]


def test_handle_lifecycle(ffi, lib, handle):
    assert lib.hipdnnEnginePluginCreate(ffi.NULL) == BAD_PARAM
    assert lib.hipdnnEnginePluginDestroy(ffi.NULL) == BAD_PARAM
    assert lib.hipdnnEnginePluginSetStream(handle, ffi.NULL) == SUCCESS
    assert lib.hipdnnEnginePluginSetStream(ffi.NULL, ffi.NULL) == BAD_PARAM
    gb = graph_bytes([T(1, [2, 3]), T(2, [2, 3]), T(3, [2, 3])], [pw_node(PointwiseMode.ADD, 1, 2, 3)])
    keep = []
    g = const_data(ffi, gb, keep)
    det = ffi.new("hipdnnPluginConstData_t*")
    assert lib.hipdnnEnginePluginGetEngineDetails(handle, ENGINE_ID, g, det) == SUCCESS
    # A serialized EngineDetails: the engine id, its knobs (CPU_THREADS, CPU_THREADING), the
    # host-memory note.
    details = EngineDetails.GetRootAs(bytes(ffi.buffer(det.ptr, det.size)), 0)
    assert details.EngineId() == ENGINE_ID and details.KnobsLength() == 2
    for i, (name, word, most) in enumerate(((b"CPU_THREADS", b"threads", 1024), (b"CPU_THREADING", b"OpenMP", 1))):
        knob = details.Knobs(i)
        assert knob.KnobIdStr() == name and word in knob.Description()
        assert knob.ValueTypeType() == KnobValue.IntValue and knob.DefaultValueType() == KnobValue.IntValue
        default = IntValue()
        default.Init(knob.DefaultValue().Bytes, knob.DefaultValue().Pos)
        bounds = IntConstraint()
        bounds.Init(knob.Constraints().Bytes, knob.Constraints().Pos)
        assert default.Value() == 0 and (bounds.MinValue(), bounds.MaxValue()) == (0, most)
    assert [details.BehaviorNotes(i) for i in range(details.BehaviorNotesLength())] == [HOST_MEMORY_NOTE]
    assert lib.hipdnnEnginePluginDestroyEngineDetails(handle, det) == SUCCESS
    assert det.ptr == ffi.NULL and det.size == 0
    assert lib.hipdnnEnginePluginGetEngineDetails(handle, 7, g, det) == BAD_PARAM
    assert lib.hipdnnEnginePluginGetEngineDetails(handle, ENGINE_ID, g, ffi.NULL) == BAD_PARAM
    assert lib.hipdnnEnginePluginDestroyEngineDetails(handle, ffi.NULL) == BAD_PARAM


def test_cpu_threads_knob(ffi, lib, handle):
    """EngineConfig.knobs: CPU_THREADS sizes the plan's per-thread scratch (1 thread: the smallest
    workspace, N: N slices), CPU_THREADING leaves it alone; an unknown knob, a value out of bounds, a
    float, a knob set twice are BAD_PARAM naming it."""
    dims = [1, 2, 64, 16]
    gb = graph_bytes([T(1, dims), T(2, dims), T(3, dims), T(4, dims)], [sdpa_node(1, 2, 3, 4, scale=0.25)])
    keep = []
    g = const_data(ffi, gb, keep)

    def workspace(knobs):
        ws = ffi.new("size_t*")
        rc = lib.hipdnnEnginePluginGetWorkspaceSize(handle, const_data(ffi, config_bytes(knobs=knobs), keep), g, ws)
        return rc, ws[0]

    rc1, one = workspace([("CPU_THREADS", 1)])
    rc3, three = workspace([("CPU_THREADS", 3)])
    rc5, five = workspace([("CPU_THREADS", 5)])
    assert rc1 == rc3 == rc5 == SUCCESS, last_error(ffi, lib)
    assert three - one == five - three > 0  # one scratch slice per thread
    assert workspace([("CPU_THREADS", 0)])[0] == SUCCESS  # 0: the default (OpenMP's count)
    # where the items run does not change the workspace
    assert workspace([("CPU_THREADS", 3), ("CPU_THREADING", 1)]) == (SUCCESS, three)
    assert workspace([("CPU_THREADS", 3), ("CPU_THREADING", 0)]) == (SUCCESS, three)
    for knobs, fragment in (
        ([("THREADS", 2)], "has no knob 'THREADS'"),
        ([("CPU_THREADS", -1)], "= -1 is outside [0, 1024]"),
        ([("CPU_THREADS", 1025)], "= 1025 is outside [0, 1024]"),
        ([("CPU_THREADS", 2.0)], "takes an integer"),
        ([("CPU_THREADS", 2), ("CPU_THREADS", 3)], "is set twice"),
        ([("CPU_THREADING", 2)], "= 2 is outside [0, 1]"),
        ([("CPU_THREADING", -1)], "= -1 is outside [0, 1]"),
    ):
        rc, _ = workspace(knobs)
        assert rc == BAD_PARAM and fragment in last_error(ffi, lib), (knobs, last_error(ffi, lib))


def test_logging_callback(ffi, lib, handle):
    lines = []

    @ffi.callback("void(hipdnnSeverity_t, const char*)")
    def cb(sev, msg):
        lines.append((sev, ffi.string(msg).decode()))

    assert lib.hipdnnPluginSetLoggingCallback(cb) == SUCCESS
    try:
        assert lib.hipdnnPluginSetLogLevel(lib.HIPDNN_SEV_INFO) == SUCCESS
        gb = graph_bytes([T(1, [4, 8]), T(2, [8, 5]), T(3, [4, 5])], [matmul_node(1, 2, 3)])
        make_ctx(ffi, lib, handle, gb).destroy()
        assert any(sev == lib.HIPDNN_SEV_INFO and "matmul" in m for sev, m in lines), lines
        lines.clear()
        assert lib.hipdnnPluginSetLogLevel(lib.HIPDNN_SEV_ERROR) == SUCCESS
        make_ctx(ffi, lib, handle, gb).destroy()
        assert lines == []
    finally:
        assert lib.hipdnnPluginSetLoggingCallback(ffi.NULL) == SUCCESS
        assert lib.hipdnnPluginSetLogLevel(lib.HIPDNN_SEV_WARN) == SUCCESS


# ================================================================== SDPA


@dataclass
class SdpaCase:
    b: int
    hq: int
    hk: int
    sq: int
    skv: int
    d: int
    dv: int | None = None
    mask: str | None = None  # None, "tl", "br", "rb0_br" (right_bound=0, bottom-right)
    layout: str = "bhsd"  # bhsd, bshd, padded
    stats: bool = True
    scale: float | None = None


SDPA_CASES = {
    "s1": SdpaCase(1, 2, 2, 1, 1, 64),
    "s37_nomask": SdpaCase(2, 4, 4, 37, 37, 64),
    "s129_tl": SdpaCase(1, 4, 4, 129, 129, 64, mask="tl"),
    "sq_ne_skv_br_gqa_oddd": SdpaCase(1, 8, 2, 37, 129, 7, dv=5, mask="br"),
    "mqa_br_sq_gt_skv": SdpaCase(2, 8, 1, 129, 37, 16, mask="br", layout="bshd"),
    "tl_sq_gt_skv": SdpaCase(1, 2, 2, 129, 37, 16, mask="tl", layout="padded"),
    "bshd_scale": SdpaCase(2, 3, 3, 65, 130, 64, layout="bshd", scale=0.37, stats=False),
    "padded_gqa": SdpaCase(1, 8, 2, 129, 129, 64, mask="br", layout="padded"),
    "rightbound0": SdpaCase(1, 2, 1, 37, 80, 32, dv=48, mask="rb0_br"),
}


def sdpa_strides(case, layout, h, s, d):
    if layout == "bhsd":
        return compact([case.b, h, s, d])
    if layout == "bshd":
        return bshd_strides(case.b, h, s, d)
    # padded: BHSD with padding after every dim
    dp, sp, hp = d + 3, s + 2, h + 1
    return [hp * sp * dp, sp * dp, dp, 1]


def sdpa_graph(case, strides=None, override=False):
    dv = case.dv or case.d
    shp = {
        1: [case.b, case.hq, case.sq, case.d],
        2: [case.b, case.hk, case.skv, case.d],
        3: [case.b, case.hk, case.skv, dv],
        4: [case.b, case.hq, case.sq, dv],
        5: [case.b, case.hq, case.sq, 1],
    }
    strides = strides or {}
    tensors = []
    for uid, dims in shp.items():
        if uid == 5 and not case.stats:
            continue
        st = strides.get(uid) or (
            compact(dims) if uid == 5 else sdpa_strides(case, case.layout, dims[1], dims[2], dims[3])
        )
        tensors.append(T(uid, dims, st))
    kw = {}
    if case.mask == "tl":
        kw["causalMask"] = True
    elif case.mask == "br":
        kw["causalMaskBottomRight"] = True
    elif case.mask == "rb0_br":
        kw["rightBound"] = 0
        kw["diagonalAlignment"] = DiagonalAlignment.BOTTOM_RIGHT
    n = sdpa_node(1, 2, 3, 4, 5 if case.stats else None, case.scale, **kw)
    return tensors, graph_bytes(tensors, [n], override=override)


def mask_diag(mask, sq, skv):
    if mask is None:
        return None
    if mask == "tl":
        return 0
    return skv - sq


def run_sdpa_and_check(ctx, tensors, case, overrides=None):
    dims = {t.uid: t.dims for t in tensors}
    strides = {t.uid: t.strides for t in tensors}
    if overrides:
        for uid, (d, s) in overrides.items():
            dims[uid], strides[uid] = d, s
    bufs = {}
    for t in tensors:
        # allocate at the declared size, view at the effective shape
        cap = extent(t.dims, t.strides) if overrides else None
        cap = max(cap or 0, extent(dims[t.uid], strides[t.uid]))
        bufs[t.uid] = make_buf(dims[t.uid], strides[t.uid], "rand" if t.uid <= 3 else "nan", cap)
    st = ctx.execute({u: b.ptr for u, b in bufs.items()}, overrides)
    assert st == SUCCESS, last_error(ctx.ffi, ctx.lib)
    q, k, v = bufs[1].view, bufs[2].view, bufs[3].view
    scale = case.scale if case.scale is not None else 1.0 / math.sqrt(q.shape[3])
    o_ref, lse_ref = sdpa_ref(q, k, v, scale, mask_diag(case.mask, q.shape[2], k.shape[2]))
    assert rel_err(bufs[4].view, o_ref) < TOL
    if 5 in bufs:
        check_stats(bufs[5].view, lse_ref)
    return bufs


@pytest.mark.parametrize("name", list(SDPA_CASES))
def test_sdpa(ffi, lib, handle, name):
    case = SDPA_CASES[name]
    tensors, gb = sdpa_graph(case)
    ctx = make_ctx(ffi, lib, handle, gb)
    try:
        assert ctx.ws_size > 0
        bufs = run_sdpa_and_check(ctx, tensors, case)
        if case.mask == "br" and case.sq > case.skv:
            # rows that see no key: output 0, stats -inf
            dead = case.sq - case.skv
            assert (bufs[4].view[:, :, :dead, :] == 0).all()
            assert np.isneginf(bufs[5].view[:, :, :dead, 0]).all()
    finally:
        ctx.destroy()


def test_sdpa_virtual_q_from_matmul(ffi, lib, handle):
    """x @ Wq -> virtual q -> SDPA: a virtual tensor feeding attention."""
    b, h, s, d = 1, 2, 37, 16
    tensors = [
        T(10, [b, h, s, 24]),
        T(11, [24, d]),
        T(1, [b, h, s, d], virtual=True),
        T(2, [b, h, s, d], bshd_strides(b, h, s, d)),
        T(3, [b, h, s, d]),
        T(4, [b, h, s, d]),
    ]
    gb = graph_bytes(tensors, [matmul_node(10, 11, 1), sdpa_node(1, 2, 3, 4, causalMask=True)])
    ctx = make_ctx(ffi, lib, handle, gb)
    try:
        bufs = {t.uid: make_buf(t.dims, t.strides, "nan" if t.uid == 4 else "rand") for t in tensors if not t.virtual}
        assert ctx.execute({u: x.ptr for u, x in bufs.items()}) == SUCCESS, last_error(ffi, lib)
        q = np.asarray(bufs[10].view, np.float64) @ np.asarray(bufs[11].view, np.float64)
        o_ref, _ = sdpa_ref(q, bufs[2].view, bufs[3].view, 1 / math.sqrt(d), 0)
        assert rel_err(bufs[4].view, o_ref) < TOL
    finally:
        ctx.destroy()


def test_concurrent_execute_same_context(ffi, lib, handle):
    """Two host threads executing one context (each with its own workspace)."""
    case = SdpaCase(1, 4, 2, 64, 64, 32, mask="br")
    tensors, gb = sdpa_graph(case)
    ctx = make_ctx(ffi, lib, handle, gb)
    errors = []

    def worker():
        try:
            for _ in range(3):
                run_sdpa_and_check(ctx, tensors, case)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    try:
        ths = [threading.Thread(target=worker) for _ in range(2)]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        assert not errors, errors
    finally:
        ctx.destroy()


# ================================================================== matmul


MATMUL_CASES = {
    "plain": ([37, 129], [129, 65], None, None),
    "bcast": ([2, 1, 37, 64], [3, 64, 48], None, None),
    "rank_mix": ([5, 17, 33], [33, 9], None, None),
    "transposed": ([4, 130, 300], [4, 300, 200], "t", "t"),
    "b_transposed_bcast": ([3, 1, 70, 20], [1, 2, 20, 150], None, "t"),
    "m1": ([1, 513], [513, 7], None, None),
}


def mm_strides(dims, how):
    if how != "t":
        return compact(dims)
    # store the last two dims transposed (column-major matrices)
    *batch, r, c = dims
    st = compact(batch + [c, r])
    return st[:-2] + [st[-1], st[-2]]


@pytest.mark.parametrize("name", list(MATMUL_CASES))
def test_matmul(ffi, lib, handle, name):
    ad, bd, at, bt = MATMUL_CASES[name]
    cd = list(np.broadcast_shapes(tuple(ad[:-2]), tuple(bd[:-2]))) + [ad[-2], bd[-1]]
    tensors = [T(1, ad, mm_strides(ad, at)), T(2, bd, mm_strides(bd, bt)), T(3, cd)]
    ctx = make_ctx(ffi, lib, handle, graph_bytes(tensors, [matmul_node(1, 2, 3)]))
    try:
        bufs = {t.uid: make_buf(t.dims, t.strides, "nan" if t.uid == 3 else "rand") for t in tensors}
        assert ctx.execute({u: x.ptr for u, x in bufs.items()}) == SUCCESS, last_error(ffi, lib)
        ref = np.matmul(np.asarray(bufs[1].view, np.float64), np.asarray(bufs[2].view, np.float64))
        assert rel_err(bufs[3].view, ref) < TOL
    finally:
        ctx.destroy()


# ================================================================== pointwise


PW_REF = {
    PointwiseMode.ADD: np.add,
    PointwiseMode.SUB: np.subtract,
    PointwiseMode.MUL: np.multiply,
    PointwiseMode.DIV: np.divide,
    PointwiseMode.MAX_OP: np.maximum,
    PointwiseMode.MIN_OP: np.minimum,
}


@pytest.mark.parametrize("mode", list(PW_REF), ids=lambda m: str(m))
def test_pointwise(ffi, lib, handle, mode):
    cases = [
        ([4, 1, 37], None, [5, 1], None),
        ([6, 9000], [1, 6], [6, 9000], [9000, 1]),  # transposed in_0, long rows
        ([3, 5], None, [5], None),
    ]
    for ad, ast, bd, bst in cases:
        od = list(np.broadcast_shapes(tuple(ad), tuple(bd)))
        tensors = [T(1, ad, ast), T(2, bd, bst), T(3, od)]
        ctx = make_ctx(ffi, lib, handle, graph_bytes(tensors, [pw_node(mode, 1, 2, 3)]))
        try:
            assert ctx.ws_size == 0
            bufs = {t.uid: make_buf(t.dims, t.strides, "nan" if t.uid == 3 else "rand") for t in tensors}
            st = ctx.execute({u: x.ptr for u, x in bufs.items()}, workspace=ffi.NULL)
            assert st == SUCCESS, last_error(ffi, lib)
            ref = PW_REF[mode](np.asarray(bufs[1].view, np.float64), np.asarray(bufs[2].view, np.float64))
            assert rel_err(bufs[3].view, ref) < TOL
        finally:
            ctx.destroy()


def test_pointwise_by_value_scalar(ffi, lib, handle):
    tensors = [T(1, [7, 33]), T(2, [1, 1], value=0.125), T(3, [7, 33])]
    ctx = make_ctx(ffi, lib, handle, graph_bytes(tensors, [pw_node(PointwiseMode.MUL, 1, 2, 3)]))
    try:
        a, o = make_buf([7, 33], compact([7, 33])), make_buf([7, 33], compact([7, 33]), "nan")
        assert ctx.execute({1: a.ptr, 3: o.ptr}) == SUCCESS, last_error(ffi, lib)
        assert rel_err(o.view, np.asarray(a.view, np.float64) * 0.125) < TOL
    finally:
        ctx.destroy()


@pytest.mark.parametrize(
    ("mode", "params", "ref"),
    [
        (
            PointwiseMode.RELU_FWD,
            {"reluLowerClip": -1.0, "reluUpperClip": 6.0, "reluLowerClipSlope": 0.1},
            lambda x: np.minimum(np.where(x < -1, -1 + 0.1 * (x + 1), x), 6.0),
        ),
        (PointwiseMode.SWISH_FWD, {"swishBeta": 1.7}, lambda x: x / (1 + np.exp(-1.7 * x))),
        (PointwiseMode.ELU_FWD, {"eluAlpha": 0.5}, lambda x: np.where(x > 0, x, 0.5 * np.expm1(x))),
        (PointwiseMode.SOFTPLUS_FWD, {"softplusBeta": 2.0}, lambda x: np.log1p(np.exp(2 * x)) / 2),
    ],
)
def test_pointwise_parameters(ffi, lib, handle, mode, params, ref):
    """The wire's relu clips / slope, swish beta, elu alpha and softplus beta."""
    tensors = [T(1, [3, 50]), T(2, [3, 50])]
    ctx = make_ctx(ffi, lib, handle, graph_bytes(tensors, [pw_node(mode, 1, None, 2, **params)]))
    try:
        a, o = make_buf([3, 50], compact([3, 50])), make_buf([3, 50], compact([3, 50]), "nan")
        a.view[...] = np.linspace(-8, 8, 150, dtype=np.float32).reshape(3, 50)
        assert ctx.execute({1: a.ptr, 2: o.ptr}) == SUCCESS, last_error(ffi, lib)
        assert rel_err(o.view, ref(np.asarray(a.view, np.float64))) < TOL
    finally:
        ctx.destroy()


# ================================================================== fused graph


def mm_add_graph(m=37, k=64, n=48, override=False):
    tensors = [T(1, [2, m, k]), T(2, [k, n]), T(3, [2, m, n], virtual=True), T(4, [n]), T(5, [2, m, n])]
    nodes = [matmul_node(1, 2, 3), pw_node(PointwiseMode.ADD, 3, 4, 5)]
    return tensors, graph_bytes(tensors, nodes, override=override)


def test_matmul_add_virtual(ffi, lib, handle):
    tensors, gb = mm_add_graph()
    ctx = make_ctx(ffi, lib, handle, gb)
    try:
        assert ctx.ws_size >= 2 * 37 * 48 * 4
        bufs = {t.uid: make_buf(t.dims, t.strides, "nan" if t.uid == 5 else "rand") for t in tensors if not t.virtual}
        assert ctx.execute({u: x.ptr for u, x in bufs.items()}) == SUCCESS, last_error(ffi, lib)
        ref = np.asarray(bufs[1].view, np.float64) @ np.asarray(bufs[2].view, np.float64) + bufs[4].view
        assert rel_err(bufs[5].view, ref) < TOL
        # virtual tensor given a buffer -> BAD_PARAM
        extra = {**{u: x.ptr for u, x in bufs.items()}, 3: bufs[5].ptr}
        assert ctx.execute(extra) == BAD_PARAM
        assert "3" in last_error(ffi, lib)
        # NULL workspace when one is needed
        assert ctx.execute({u: x.ptr for u, x in bufs.items()}, workspace=ffi.NULL) == BAD_PARAM
        assert "workspace" in last_error(ffi, lib)
    finally:
        ctx.destroy()


# ================================================================== overrides


def test_sdpa_overrides(ffi, lib, handle):
    case = SdpaCase(2, 4, 2, 256, 256, 64, mask="br")
    tensors, gb = sdpa_graph(case, override=True)
    ctx = make_ctx(ffi, lib, handle, gb)
    try:
        # full declared shape through the plain entry point
        run_sdpa_and_check(ctx, tensors, case)
        decl = {t.uid: t for t in tensors}

        def ov(b, sq, skv, compact_strides):
            out = {}
            for uid, t in decl.items():
                s = sq if uid in (1, 4, 5) else skv
                dims = [b, t.dims[1], s, t.dims[3]]
                out[uid] = (dims, compact(dims) if compact_strides else list(t.strides))
            return out

        for b, sq, skv in ((1, 37, 37), (2, 37, 100), (1, 100, 37), (1, 1, 256)):
            for cs in (True, False):
                c = SdpaCase(b, 4, 2, sq, skv, 64, mask="br")
                run_sdpa_and_check(ctx, tensors, c, ov(b, sq, skv, cs))
        # BSHD-like non-compact strides at a small shape
        o = {}
        for uid, t in decl.items():
            s = 37
            dims = [1, t.dims[1], s, t.dims[3]]
            o[uid] = (dims, bshd_strides(*dims))
        run_sdpa_and_check(ctx, tensors, SdpaCase(1, 4, 2, 37, 37, 64, mask="br"), o)
    finally:
        ctx.destroy()


def test_sdpa_override_smaller_head_dim(ffi, lib, handle):
    """Overriding D changes the default scale 1/sqrt(D)."""
    case = SdpaCase(1, 2, 2, 64, 64, 64, mask="tl")
    tensors, gb = sdpa_graph(case, override=True)
    ctx = make_ctx(ffi, lib, handle, gb)
    try:
        ov = {}
        for t in tensors:
            dims = [1, 2, 50, 1 if t.uid == 5 else 24]
            ov[t.uid] = (dims, compact(dims))
        run_sdpa_and_check(ctx, tensors, SdpaCase(1, 2, 2, 50, 50, 24, mask="tl"), ov)
    finally:
        ctx.destroy()


def test_matmul_add_overrides(ffi, lib, handle):
    tensors, gb = mm_add_graph(m=64, k=32, n=48, override=True)
    ctx = make_ctx(ffi, lib, handle, gb)
    try:
        ov = {1: ([1, 20, 32], [20 * 32, 32, 1]), 5: ([1, 20, 48], [64 * 48, 48, 1])}
        bufs = {
            1: make_buf([1, 20, 32], ov[1][1]),
            2: make_buf([32, 48], compact([32, 48])),
            4: make_buf([48], [1]),
            5: make_buf([1, 20, 48], ov[5][1], "nan"),
        }
        assert ctx.execute({u: x.ptr for u, x in bufs.items()}, ov) == SUCCESS, last_error(ffi, lib)
        ref = np.asarray(bufs[1].view, np.float64) @ np.asarray(bufs[2].view, np.float64) + bufs[4].view
        assert rel_err(bufs[5].view, ref) < TOL
        # output shape disagreeing with the inferred one
        bad = dict(ov)
        bad[5] = ([1, 19, 48], [64 * 48, 48, 1])
        assert ctx.execute({u: x.ptr for u, x in bufs.items()}, bad) == BAD_PARAM
        assert "uid 5" in last_error(ffi, lib)
    finally:
        ctx.destroy()


# ================================================================== bad inputs


def test_bad_inputs(ffi, lib, handle):
    case = SdpaCase(1, 2, 2, 16, 16, 8, mask="tl")
    tensors, gb = sdpa_graph(case, override=True)
    keep = []
    n = ffi.new("uint32_t*")
    ids = ffi.new("int64_t[2]")

    # corrupted / truncated / empty graph buffers
    corrupt = bytearray(gb)
    corrupt[0:4] = b"\xff\xff\xff\x7f"
    for bad in (bytes(corrupt), gb[: len(gb) // 2], b"\x00\x00"):
        g = const_data(ffi, bad, keep)
        assert lib.hipdnnEnginePluginGetApplicableEngineIds(handle, g, ids, 2, n) == BAD_PARAM
        assert "Graph" in last_error(ffi, lib)
    g = const_data(ffi, gb, keep)
    assert lib.hipdnnEnginePluginGetApplicableEngineIds(handle, ffi.NULL, ids, 2, n) == BAD_PARAM
    assert lib.hipdnnEnginePluginGetApplicableEngineIds(handle, g, ids, 2, ffi.NULL) == BAD_PARAM
    assert lib.hipdnnEnginePluginGetApplicableEngineIds(ffi.NULL, g, ids, 2, n) == BAD_PARAM
    assert lib.hipdnnEnginePluginGetApplicableEngineIds(handle, g, ffi.NULL, 0, n) == SUCCESS and n[0] == 1

    # bad configs
    ws = ffi.new("size_t*")
    p = ffi.new("hipdnnEnginePluginExecutionContext_t*")
    for cfg in (config_bytes(7), b"garbage-bytes-here"):
        c = const_data(ffi, cfg, keep)
        assert lib.hipdnnEnginePluginGetWorkspaceSize(handle, c, g, ws) == BAD_PARAM
        assert lib.hipdnnEnginePluginCreateExecutionContext(handle, c, g, p) == BAD_PARAM
    c = const_data(ffi, config_bytes(), keep)
    assert lib.hipdnnEnginePluginGetWorkspaceSize(handle, c, g, ffi.NULL) == BAD_PARAM
    assert lib.hipdnnEnginePluginCreateExecutionContext(handle, c, g, ffi.NULL) == BAD_PARAM
    assert lib.hipdnnEnginePluginDestroyExecutionContext(handle, ffi.NULL) == BAD_PARAM

    ctx = make_ctx(ffi, lib, handle, gb)
    try:
        bufs = {t.uid: make_buf(t.dims, t.strides, "nan" if t.uid >= 4 else "rand") for t in tensors}
        good = {u: x.ptr for u, x in bufs.items()}

        missing = {u: x for u, x in good.items() if u != 2}
        assert ctx.execute(missing) == BAD_PARAM
        assert "uid 2" in last_error(ffi, lib)
        assert ctx.execute({**good, 3: ffi.NULL}) == BAD_PARAM
        assert "uid 3" in last_error(ffi, lib)
        assert ctx.execute({**good, 999: good[1]}) == BAD_PARAM
        assert "999" in last_error(ffi, lib)
        assert ctx.execute(good, workspace=ffi.NULL) == BAD_PARAM
        assert np.isnan(bufs[4].flat).all(), "a failed execute wrote output"

        full = {t.uid: (list(t.dims), list(t.strides)) for t in tensors}
        too_big = dict(full)
        too_big[1] = ([1, 2, 17, 8], full[1][1])
        assert ctx.execute(good, too_big) == BAD_PARAM
        assert "uid 1" in last_error(ffi, lib)
        bad_rank = dict(full)
        bad_rank[2] = ([1, 2, 16], [256, 16, 1])
        assert ctx.execute(good, bad_rank) == BAD_PARAM
        bad_stride = dict(full)
        bad_stride[3] = (full[3][0], [0, 128, 8, 1])
        assert ctx.execute(good, bad_stride) == BAD_PARAM
        unknown = dict(full)
        unknown[77] = ([1], [1])
        assert ctx.execute(good, unknown) == BAD_PARAM
        # q shrunk but o not: o's shape no longer matches the inferred one
        inconsistent = {1: ([1, 2, 10, 8], full[1][1])}
        assert ctx.execute(good, inconsistent) == BAD_PARAM
        assert "uid 4" in last_error(ffi, lib)
        assert np.isnan(bufs[4].flat).all()

        assert lib.hipdnnEnginePluginExecuteOpGraph(handle, ffi.NULL, ffi.NULL, ffi.NULL, 0) == BAD_PARAM
        assert ctx.execute(good) == SUCCESS
    finally:
        ctx.destroy()


# ================================================================== not applicable


def _sdpa_tensors(dtype=DataType.FLOAT):
    dims = [1, 2, 8, 4]
    return [T(u, dims, dtype=dtype) for u in (1, 2, 3, 4)]


NOT_APPLICABLE_GRAPHS = {
    # fp16 / bf16 SDPA, padding, bias, tensor scales, bands and ALiBi are supported (tests/cpu/);
    # what remains out of reach:
    "fp8_tensors": lambda: graph_bytes(_sdpa_tensors(DataType.FP8_E4M3), [sdpa_node(1, 2, 3, 4)]),
    "fp16_matmul": lambda: graph_bytes(
        [T(1, [4, 5], dtype=DataType.HALF), T(2, [5, 3], dtype=DataType.HALF), T(3, [4, 3], dtype=DataType.HALF)],
        [matmul_node(1, 2, 3)],
    ),
    "padding_float_seq_len": lambda: graph_bytes(
        _sdpa_tensors() + [T(5, [1, 1, 1, 1]), T(6, [1, 1, 1, 1])],
        [sdpa_node(1, 2, 3, 4, paddingMask=True, seqLenQTensorUid=5, seqLenKvTensorUid=6)],
    ),
    "padding_without_seq_len": lambda: graph_bytes(_sdpa_tensors(), [sdpa_node(1, 2, 3, 4, paddingMask=True)]),
    "int32_stats": lambda: graph_bytes(
        _sdpa_tensors() + [T(5, [1, 2, 8, 1], dtype=DataType.INT32)],
        [sdpa_node(1, 2, 3, 4, statsTensorUid=5, generateStats=True)],
    ),
    "dropout": lambda: graph_bytes(_sdpa_tensors(), [sdpa_node(1, 2, 3, 4, dropoutProbability=0.1)]),
    "pointwise_gen_index": lambda: graph_bytes([T(1, [4]), T(2, [4])], [pw_node(PointwiseMode.GEN_INDEX, 1, None, 2)]),
    "matmul_k_mismatch": lambda: graph_bytes([T(1, [4, 5]), T(2, [6, 3]), T(3, [4, 3])], [matmul_node(1, 2, 3)]),
    "matmul_bad_out": lambda: graph_bytes([T(1, [4, 5]), T(2, [5, 3]), T(3, [4, 4])], [matmul_node(1, 2, 3)]),
    "unknown_uid": lambda: graph_bytes([T(1, [4, 5]), T(2, [5, 3])], [matmul_node(1, 2, 3)]),
    "virtual_never_produced": lambda: graph_bytes(
        [T(1, [4], virtual=True), T(2, [4]), T(3, [4])], [pw_node(PointwiseMode.ADD, 1, 2, 3)]
    ),
    "gqa_not_multiple": lambda: graph_bytes(
        [T(1, [1, 3, 8, 4]), T(2, [1, 2, 8, 4]), T(3, [1, 2, 8, 4]), T(4, [1, 3, 8, 4])], [sdpa_node(1, 2, 3, 4)]
    ),
}


@pytest.mark.parametrize("name", list(NOT_APPLICABLE_GRAPHS))
def test_not_applicable(ffi, lib, handle, name):
    gb = NOT_APPLICABLE_GRAPHS[name]()
    assert applicable(ffi, lib, handle, gb) == []
    keep = []
    g = const_data(ffi, gb, keep)
    c = const_data(ffi, config_bytes(), keep)
    p = ffi.new("hipdnnEnginePluginExecutionContext_t*")
    assert lib.hipdnnEnginePluginCreateExecutionContext(handle, c, g, p) == NOT_APPLICABLE
    assert "cannot run" in last_error(ffi, lib)


# ================================================================== FP8 tensors in the data flow

# the FP8 uid fields (object-API names without "TensorUid"), from the frontend's role -> field tables
_FP8_FWD_FIELDS = tuple(WIRE_FIELDS[r].removesuffix("TensorUid") for r in (*SCALE_ROLES, *AMAX_ROLES))
_FP8_BWD_FIELDS = tuple(
    BACKWARD_WIRE_FIELDS[r].removesuffix("TensorUid") for r in (*BACKWARD_SCALE_ROLES, *BACKWARD_AMAX_ROLES)
)


def _fp8_forward_bytes(uids: dict[str, int], virtual: tuple[int, ...] = ()) -> bytes:
    """An FP8 forward node over q, k, v (uids 1-3, E4M3) and o (4, FLOAT); the factors and amax at
    ``uids`` (field -> uid), tensors 10.. declared FLOAT [1, 1, 1, 1]."""
    e4m3 = DataType.FP8_E4M3
    tensors = [T(u, [1, 2, 8, 4], dtype=e4m3) for u in (1, 2, 3)] + [T(4, [1, 2, 8, 4])]
    tensors += [T(u, [1, 1, 1, 1], virtual=u in virtual) for u in sorted(set(uids.values()))]
    fields = {f + "TensorUid": u for f, u in uids.items()}
    return graph_bytes(tensors, [sdpa_node(1, 2, 3, 4, scale=0.5, **fields)], io=e4m3)


def _fp8_backward_bytes(uids: dict[str, int], virtual: tuple[int, ...] = ()) -> bytes:
    """An FP8 backward node: q, k, v, o, dO (1-5, E4M3), stats (6), dq, dk, dv (7-9, FLOAT); the
    factors and amax at ``uids``, tensors declared FLOAT [1, 1, 1, 1] unless they are 1-9."""
    from hipdnn.wire.SdpaBackwardAttributes import SdpaBackwardAttributesT

    e4m3 = DataType.FP8_E4M3
    tensors = [T(u, [1, 2, 8, 4], dtype=e4m3) for u in (1, 2, 3, 4, 5)] + [T(6, [1, 2, 8, 1])]
    tensors += [T(u, [1, 2, 8, 4]) for u in (7, 8, 9)]
    tensors += [T(u, [1, 1, 1, 1], virtual=u in virtual) for u in sorted(set(uids.values())) if u > 9]
    a = SdpaBackwardAttributesT()
    a.qTensorUid, a.kTensorUid, a.vTensorUid, a.oTensorUid, a.doTensorUid, a.statsTensorUid = 1, 2, 3, 4, 5, 6
    a.dqTensorUid, a.dkTensorUid, a.dvTensorUid = 7, 8, 9
    a.attnScaleValue = 0.5
    for f, u in uids.items():
        setattr(a, f + "TensorUid", u)
    return graph_bytes(tensors, [node(NodeAttributes.SdpaBackwardAttributes, a, "sdpa_bwd")], io=e4m3)


def _all(fields: tuple[str, ...]) -> dict[str, int]:
    return {f: 10 + i for i, f in enumerate(fields)}


def test_fp8_nodes_are_served_with_all_their_tensors(ffi, lib, handle):
    """The baseline of the refusals below: both FP8 nodes, complete and well formed, apply."""
    assert applicable(ffi, lib, handle, _fp8_forward_bytes(_all(_FP8_FWD_FIELDS))) == [ENGINE_ID]
    assert applicable(ffi, lib, handle, _fp8_backward_bytes(_all(_FP8_BWD_FIELDS))) == [ENGINE_ID]


FP8_DATA_FLOW_REFUSALS = {
    # an amax output that is also one of the node's factors: read and written by one node
    "forward_amax_is_a_factor": (
        lambda: _fp8_forward_bytes({**_all(_FP8_FWD_FIELDS), "amaxS": 10}),
        "reads and writes tensor uid 10",
    ),
    # two amax outputs in one tensor
    "forward_amax_twice": (
        lambda: _fp8_forward_bytes({**_all(_FP8_FWD_FIELDS), "amaxO": 16}),
        "names tensor uid 16 as two of its outputs",
    ),
    "backward_amax_is_dq": (
        lambda: _fp8_backward_bytes({**_all(_FP8_BWD_FIELDS), "amaxDq": 7}),
        "names tensor uid 7 as two of its outputs",
    ),
    "backward_factor_never_produced": (
        lambda: _fp8_backward_bytes(_all(_FP8_BWD_FIELDS), virtual=(15,)),
        "reads virtual tensor uid 15 before any node produces it",
    ),
    "backward_partial": (
        lambda: _fp8_backward_bytes({"descaleQ": 10}),
        "FP8 scaling without all of",
    ),
}


@pytest.mark.parametrize("name", list(FP8_DATA_FLOW_REFUSALS))
def test_fp8_tensors_take_part_in_the_data_flow_checks(ffi, lib, handle, name):
    make, reason = FP8_DATA_FLOW_REFUSALS[name]
    gb = make()
    assert applicable(ffi, lib, handle, gb) == []
    keep = []
    g = const_data(ffi, gb, keep)
    c = const_data(ffi, config_bytes(), keep)
    p = ffi.new("hipdnnEnginePluginExecutionContext_t*")
    assert lib.hipdnnEnginePluginCreateExecutionContext(handle, c, g, p) == NOT_APPLICABLE
    assert reason in last_error(ffi, lib)


def _fp8_padded_forward(ffi, lib, handle, seq_q: int, seq_kv: int, len_dtype=DataType.INT64):
    """An FP8 forward (E4M3 q, k, v [1, 2, 5, 4], FLOAT o and stats) with the padding mask, both
    sequence lengths [1, 1, 1, 1] holding the given values; returns o, stats and the two amax."""
    e4m3 = DataType.FP8_E4M3
    dims = [1, 2, 5, 4]
    tensors = [T(u, dims, dtype=e4m3) for u in (1, 2, 3)] + [T(4, dims), T(5, [1, 2, 5, 1])]
    tensors += [T(u, [1, 1, 1, 1], dtype=len_dtype) for u in (6, 7)]
    fields = {f + "TensorUid": 10 + i for i, f in enumerate(_FP8_FWD_FIELDS)}
    tensors += [T(u, [1, 1, 1, 1]) for u in fields.values()]
    gb = graph_bytes(
        tensors,
        [
            sdpa_node(
                1, 2, 3, 4, stats=5, scale=0.5, paddingMask=True, seqLenQTensorUid=6, seqLenKvTensorUid=7, **fields
            )
        ],
        io=e4m3,
    )
    ctx = make_ctx(ffi, lib, handle, gb)
    rng = np.random.default_rng(7)
    n = int(np.prod(dims))
    # E4M3 bytes of magnitude < 2 (exponent field < 8), either sign: never NaN
    qkv = [(rng.integers(0, 0x40, n) | (rng.integers(0, 2, n) << 7)).astype(np.uint8) for _ in range(3)]
    ity = np.int64 if len_dtype == DataType.INT64 else np.int32
    lens = [np.array([seq_q], ity), np.array([seq_kv], ity)]
    o = np.full(n, np.nan, np.float32)
    stats = np.full(10, np.nan, np.float32)
    factors = [np.ones(1, np.float32) for _ in fields]
    bufs = {1: qkv[0], 2: qkv[1], 3: qkv[2], 4: o, 5: stats, 6: lens[0], 7: lens[1]}
    bufs.update({u: f for u, f in zip(fields.values(), factors)})
    st = ctx.execute({u: a.ctypes.data for u, a in bufs.items()})
    assert st == SUCCESS, last_error(ffi, lib)
    ctx.destroy()
    amax = (float(factors[6][0]), float(factors[7][0]))  # amaxS, amaxO are fields 16 and 17
    return o, stats, amax


def test_fp8_padding_lengths_past_int64_range_of_double_clamp_to_the_dims(ffi, lib, handle):
    """An INT64 sequence length near INT64_MAX is clamped to the tensor's length, as every other
    kernel clamps it. The FP8 reference used to read it through double (2^63 - 1 rounds to 2^63),
    whose conversion back to int64 is undefined: x86 gives INT64_MIN, so the sequence counted as
    empty (o = 0, stats = -inf) instead of full."""
    ref_o, ref_stats, ref_amax = _fp8_padded_forward(ffi, lib, handle, 5, 5)
    assert np.isfinite(ref_stats).all() and np.abs(ref_o).max() > 0
    for big in (2**63 - 1, 2**63 - 256):
        o, stats, amax = _fp8_padded_forward(ffi, lib, handle, big, big)
        np.testing.assert_array_equal(o, ref_o)
        np.testing.assert_array_equal(stats, ref_stats)
        assert amax == ref_amax
    # and a length past the dims through INT32 still clamps (the control)
    o, stats, _ = _fp8_padded_forward(ffi, lib, handle, 2**31 - 1, 2**31 - 1, DataType.INT32)
    np.testing.assert_array_equal(o, ref_o)


def test_bad_ragged_offsets_of_a_later_node_leave_earlier_outputs_unwritten(ffi, lib, handle):
    """A call refused for a ragged offset that leaves its tensor writes nothing, whichever node the
    offset belongs to. The offsets used to be checked when their node ran, so a pointwise node
    before the attention node had already written its output when the call came back BAD_PARAM."""
    B, H, S, D = 2, 1, 3, 4
    dims = [B, H, S, D]
    i64 = DataType.INT64
    tensors = [T(u, dims) for u in (1, 2, 3, 4)] + [T(u, [B, 1, 1, 1], dtype=i64) for u in (5, 6)]
    tensors += [T(7, [B + 1, 1, 1, 1], dtype=i64)]
    tensors += [T(u, [2, 3]) for u in (20, 21, 22)]
    gb = graph_bytes(
        tensors,
        [
            pw_node(PointwiseMode.ADD, 21, 22, 20),
            sdpa_node(1, 2, 3, 4, scale=0.5, paddingMask=True, seqLenQTensorUid=5, seqLenKvTensorUid=6),
        ],
    )
    # q (uid 1) ragged at uid 7: re-serialize with the offset set (graph_bytes has no field for it)
    from hipdnn.wire.Graph import Graph

    g = GraphT.InitFromObj(Graph.GetRootAs(gb, 0))
    for ta in g.tensors:
        if ta.uid == 1:
            ta.raggedOffsetTensorUid = 7
    b = flatbuffers.Builder(1024)
    b.Finish(g.Pack(b))
    gb = bytes(b.Output())
    ctx = make_ctx(ffi, lib, handle, gb)
    bufs = {u: make_buf(dims, compact(dims)) for u in (1, 2, 3)}
    bufs[4] = make_buf(dims, compact(dims), fill="nan")
    bufs[20] = make_buf([2, 3], [3, 1], fill="nan")
    bufs[21] = make_buf([2, 3], [3, 1])
    bufs[22] = make_buf([2, 3], [3, 1])
    lens = np.array([S, S], np.int64)
    n = B * H * S * D
    ok_offsets = np.array([0, n // 2, n], np.int64)
    bad_offsets = np.array([0, n, n], np.int64)  # batch 1's rows past q's elements
    ptrs = {u: bb.ptr for u, bb in bufs.items()}
    ptrs.update({5: lens.ctypes.data, 6: lens.ctypes.data})

    assert ctx.execute({**ptrs, 7: bad_offsets.ctypes.data}) == BAD_PARAM
    assert "ragged offset" in last_error(ffi, lib)
    assert np.isnan(bufs[20].flat).all(), "the pointwise node ran before the call was refused"
    assert np.isnan(bufs[4].flat).all()
    # the control: good offsets run both nodes
    assert ctx.execute({**ptrs, 7: ok_offsets.ctypes.data}) == SUCCESS, last_error(ffi, lib)
    np.testing.assert_allclose(bufs[20].view, bufs[21].view + bufs[22].view, rtol=1e-6)
    assert not np.isnan(bufs[4].flat).any()
    ctx.destroy()
