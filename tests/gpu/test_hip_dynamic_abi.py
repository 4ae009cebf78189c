"""The HIP engine plugin at API 1.2.0 (dynamic tensors), driven through its C ABI with cffi; no torch.

Runs wherever the plugin is built or can be (with nvcc or hipcc on PATH the session builds it:
``hip_plugin`` in tests/conftest.py), GPU or not. Without a usable GPU the engine offers no engine for
any graph, but it still parses every graph first and logs why it declined it, so the graph rules
(wildcards only on dynamic tensors, axis orders, head dim declared and innermost) are checked here
through that log line on any machine. Where a GPU is present the servable graphs must also get their
engines, and the execute path's refusals are checked; they all happen before any kernel is
launched, so the buffers passed are never dereferenced (a call that would launch is never made).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cffi
import flatbuffers
import pytest

from hipdnn.plugins._cdef import sdk_cdef
from hipdnn.wire.DataType import DataType
from hipdnn.wire.Graph import GraphT
from hipdnn.wire.TensorAttributes import TensorAttributesT
from tests.engine_abi.test_cpu_engine_abi import (
    BAD_PARAM,
    SUCCESS,
    Ctx,
    config_bytes,
    const_data,
    last_error,
    sdpa_node,
)
from tests.gpu.hip_support import AXIS_ORDER

W = -1  # a wildcard dim
BHSD, BSHD = AXIS_ORDER["bhsd"], AXIS_ORDER["bshd"]
QID, KID, VID, OID, SID = 1, 2, 3, 4, 5


@dataclass
class Abi:
    ffi: Any
    lib: Any
    handle: Any
    log: list[str]

    def decide(self, gb: bytes) -> tuple[list[int], str]:
        """The engines offered for the graph, and the logged reason when none is."""
        keep: list[Any] = []
        ids = self.ffi.new("int64_t[4]")
        n = self.ffi.new("uint32_t*")
        self.log.clear()
        st = self.lib.hipdnnEnginePluginGetApplicableEngineIds(self.handle, const_data(self.ffi, gb, keep), ids, 4, n)
        assert st == SUCCESS, last_error(self.ffi, self.lib)
        why = [m for m in self.log if "not applicable" in m]
        return [ids[i] for i in range(n[0])], why[-1] if why else ""


@pytest.fixture(scope="module")
def abi(hip_plugin: Path) -> Iterator[Abi]:
    """The plugin (tests/conftest.py's ``hip_plugin``) opened with cffi, its log captured, one handle."""
    ffi = cffi.FFI()
    ffi.cdef(sdk_cdef())
    lib = ffi.dlopen(str(hip_plugin))
    log: list[str] = []

    @ffi.callback("void(hipdnnSeverity_t, const char*)")
    def on_log(sev: int, msg: Any) -> None:
        log.append(ffi.string(msg).decode())

    h = ffi.new("hipdnnEnginePluginHandle_t*")
    assert lib.hipdnnPluginSetLoggingCallback(on_log) == SUCCESS
    assert lib.hipdnnPluginSetLogLevel(lib.HIPDNN_SEV_INFO) == SUCCESS
    try:
        assert lib.hipdnnEnginePluginCreate(h) == SUCCESS, last_error(ffi, lib)
        yield Abi(ffi, lib, h[0], log)
        assert lib.hipdnnEnginePluginDestroy(h[0]) == SUCCESS
    finally:
        lib.hipdnnPluginSetLoggingCallback(ffi.NULL)
        lib.hipdnnPluginSetLogLevel(lib.HIPDNN_SEV_WARN)


def tensor(uid: int, dims: list[int], strides: list[int], dynamic: bool, dtype: int) -> TensorAttributesT:
    ta = TensorAttributesT()
    ta.uid, ta.name, ta.dataType = uid, f"t{uid}", dtype
    ta.dims, ta.strides, ta.virtual, ta.isDynamic = list(dims), list(strides), False, dynamic
    return ta


def sdpa_bytes(
    q: list[int],
    kv: list[int] | None = None,
    order: list[int] | None = None,
    *,
    dynamic: bool = True,
    o: list[int] | None = None,
    dtype: int = DataType.BFLOAT16,
    stats: bool = True,
    causal: bool = False,
) -> bytes:
    """One SDPA node; q, k, v, o share ``order`` (an axis order when dynamic, else element strides)."""
    kv = q if kv is None else kv
    o = q if o is None else o
    order = BHSD if order is None else order
    g = GraphT()
    g.name = "hip_dynamic_abi"
    g.ioDataType, g.computeDataType, g.intermediateDataType = dtype, DataType.FLOAT, DataType.FLOAT
    g.isOverrideShapeEnabled = True
    g.tensors = [
        tensor(QID, q, order, dynamic, dtype),
        tensor(KID, kv, order, dynamic, dtype),
        tensor(VID, kv, order, dynamic, dtype),
        tensor(OID, o, order, dynamic, dtype),
    ]
    if stats:
        st_order = [3, 2, 1, 0] if dynamic else [q[1] * q[2], q[2], 1, 1]
        g.tensors.append(tensor(SID, [q[0], q[1], q[2], 1], st_order, dynamic, DataType.FLOAT))
    g.nodes = [sdpa_node(QID, KID, VID, OID, stats=SID if stats else None, scale=0.125, causalMask=causal)]
    b = flatbuffers.Builder(1024)
    b.Finish(g.Pack(b))
    return bytes(b.Output())


STATIC_SERVABLE = sdpa_bytes([2, 4, 64, 64], order=[4 * 64 * 64, 64 * 64, 64, 1], dynamic=False)


@pytest.fixture(scope="module")
def probe(abi: Abi) -> tuple[list[int], str]:
    """What the engine says about a static graph it can run: its engines here, or why none (no GPU)."""
    return abi.decide(STATIC_SERVABLE)


def test_reports_api_1_4_0(abi: Abi) -> None:
    v = abi.ffi.new("const char**")
    assert abi.lib.hipdnnPluginGetApiVersion(v) == SUCCESS
    assert abi.ffi.string(v[0]).decode() == "1.4.0"


def test_no_device_means_no_engine(probe: tuple[list[int], str]) -> None:
    """With a GPU: 202 and 201 on compute capability 9.0, else 201. Without: none, and the log says
    the device is missing (not that the graph is wrong)."""
    ids, why = probe
    if ids:
        assert ids in ([202, 201], [201])
    else:
        assert "GPU" in why or "device" in why, why


SERVABLE = {
    "bhsd D=64": sdpa_bytes([W, 4, W, 64]),
    "bshd D=128 causal": sdpa_bytes([W, 8, W, 128], [W, 2, W, 128], BSHD, causal=True),
    "no stats": sdpa_bytes([W, 4, W, 64], stats=False),
    "fp16": sdpa_bytes([W, 4, W, 128], dtype=DataType.HALF),
    "wildcard heads": sdpa_bytes([W, W, W, 64]),
    "concrete batch, wildcard lengths": sdpa_bytes([2, 4, W, 64]),
    "head dim declared by q only": sdpa_bytes([W, 4, W, 64], [W, 4, W, W], o=[W, 4, W, W]),
    "head dim 96": sdpa_bytes([W, 4, W, 96]),
    "head dim 8": sdpa_bytes([W, 4, W, 8]),
}


@pytest.mark.parametrize("name", list(SERVABLE))
def test_servable_dynamic_graphs_pass_the_graph_rules(abi: Abi, probe: tuple[list[int], str], name: str) -> None:
    """Declined, if at all, for the same reason as a static graph the engine runs (no GPU here)."""
    assert abi.decide(SERVABLE[name]) == probe


DECLINED = {
    "static tensor with a wildcard": (
        sdpa_bytes([W, 4, 64, 64], order=[4 * 64 * 64, 64 * 64, 64, 1], dynamic=False),
        "not marked dynamic",
    ),
    "dynamic strides that are no axis order": (sdpa_bytes([W, 4, W, 64], order=[4096, 64, 64, 1]), "axis order"),
    "head dim not innermost": (sdpa_bytes([W, 4, W, 64], order=[3, 2, 0, 1]), "innermost axis"),
    "wildcard head dim everywhere": (sdpa_bytes([W, 4, W, W]), "head dim is a wildcard"),
    "head dim 136": (sdpa_bytes([W, 4, W, 136]), "head dim 136 not served"),
    "fp32 inputs": (sdpa_bytes([W, 4, W, 64], dtype=DataType.FLOAT), "BFLOAT16 or HALF"),
    "conflicting declared batches": (sdpa_bytes([2, 4, W, 64], [3, 4, W, 64]), "batch sizes"),
    "heads not a multiple": (sdpa_bytes([W, 6, W, 64], [W, 4, W, 64]), "multiple of kv heads"),
}


@pytest.mark.parametrize("name", list(DECLINED))
def test_dynamic_graphs_the_kernels_cannot_serve_are_declined(abi: Abi, name: str) -> None:
    gb, reason = DECLINED[name]
    ids, why = abi.decide(gb)
    assert ids == [] and reason in why, why


# ---------------------------------------------------------------------------- execute (GPU only)
def bhsd(dims: list[int]) -> list[int]:
    b, h, s, d = dims
    return [h * s * d, s * d, d, 1]


def bshd(dims: list[int]) -> list[int]:
    b, h, s, d = dims
    return [s * h * d, d, h * d, 1]


@pytest.fixture
def dyn_ctx(abi: Abi, probe: tuple[list[int], str]) -> Iterator[Ctx]:
    """An execution context of the portable engine for q/k/v/o [-1, 4, -1, 64] (BHSD order) + stats."""
    if not probe[0]:
        pytest.skip("no GPU: the engine creates no execution context")
    keep: list[Any] = []
    gb = sdpa_bytes([W, 4, W, 64])
    g, c = const_data(abi.ffi, gb, keep), const_data(abi.ffi, config_bytes(201), keep)
    ws = abi.ffi.new("size_t*")
    assert abi.lib.hipdnnEnginePluginGetWorkspaceSize(abi.handle, c, g, ws) == SUCCESS
    assert ws[0] == 0
    p = abi.ffi.new("hipdnnEnginePluginExecutionContext_t*")
    assert abi.lib.hipdnnEnginePluginCreateExecutionContext(abi.handle, c, g, p) == SUCCESS, last_error(
        abi.ffi, abi.lib
    )
    ctx = Ctx(abi.ffi, abi.lib, abi.handle, p[0], 0, keep)
    yield ctx
    ctx.destroy()


# Never dereferenced: every call below is refused before a kernel is launched.
FAKE = {QID: 0x10000, KID: 0x20000, VID: 0x30000, OID: 0x40000, SID: 0x50000}


def overrides(b: int = 1, s: int = 8, layout: Any = bhsd) -> dict[int, tuple[list[int], list[int]]]:
    dims = [b, 4, s, 64]
    ov = {uid: (dims, layout(dims)) for uid in (QID, KID, VID, OID)}
    ov[SID] = ([b, 4, s, 1], [4 * s, s, 1, 1])
    return ov


def refused(ctx: Ctx, ov: dict[int, tuple[list[int], list[int]]] | None, reason: str) -> None:
    assert ctx.execute(FAKE, overrides=ov) == BAD_PARAM
    assert reason in last_error(ctx.ffi, ctx.lib), last_error(ctx.ffi, ctx.lib)


def test_plain_entry_is_refused(dyn_ctx: Ctx) -> None:
    refused(dyn_ctx, None, "ExecuteOpGraphWithOverrides")


def test_missing_override_is_refused(dyn_ctx: Ctx) -> None:
    ov = overrides()
    del ov[KID]
    refused(dyn_ctx, ov, "dynamic k (uid 2) has no override")


def test_strides_against_the_axis_order_are_refused(dyn_ctx: Ctx) -> None:
    ov = overrides()
    ov[QID] = (ov[QID][0], bshd(ov[QID][0]))  # S outside H contradicts the declared BHSD order
    refused(dyn_ctx, ov, "axis order")


def test_non_unit_head_dim_stride_is_refused(dyn_ctx: Ctx) -> None:
    ov = overrides()
    ov[VID] = (ov[VID][0], [2 * x for x in bhsd(ov[VID][0])])  # order kept, head dim stride 2
    refused(dyn_ctx, ov, "head-dim stride 2")


def test_concrete_dims_stay_maxima(dyn_ctx: Ctx) -> None:
    ov = overrides()
    dims = [1, 5, 8, 64]
    ov[QID] = (dims, bhsd(dims))
    refused(dyn_ctx, ov, "declared maximum")


def test_non_positive_and_wrong_rank_are_refused(dyn_ctx: Ctx) -> None:
    ov = overrides()
    ov[KID] = ([1, 4, 0, 64], [4 * 64, 64, 64, 1])
    refused(dyn_ctx, ov, "dim 2 is 0")
    ov = overrides()
    ov[OID] = ([4, 8, 64], [512, 64, 1])
    refused(dyn_ctx, ov, "rank 3")


def test_shapes_are_rechecked_per_call(dyn_ctx: Ctx) -> None:
    ov = overrides(s=8)
    ov[OID] = overrides(s=9)[OID]  # o's length differs from q's
    refused(dyn_ctx, ov, "but q gives")
    ov = overrides(b=2)
    ov[KID] = overrides(b=1)[KID]
    refused(dyn_ctx, ov, "batch sizes")
