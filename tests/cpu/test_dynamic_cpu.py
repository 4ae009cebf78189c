"""The CPU engine at plugin API 1.2.0: dynamic tensors (RFC 0003, RFC 0005 "Dynamic tensors").

A dynamic tensor is declared with wildcard (-1) dims and an axis order in place of strides; every
call gives its real shape and strides through an override. One plan, built once, must then run at
any size consistent with the declaration, without allocating: these tests build once and execute at
several sizes and layouts, each result checked against float64 (``hipdnn.reference``), with outputs
in NaN-filled buffers whose guard regions must stay untouched.

The second half drives the plugin's C ABI directly (cffi) for what the host never lets through:
the plain execute entry on a dynamic graph, missing overrides, axis-order violations, and the
graphs the engine declines at applicability time.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import cffi
import flatbuffers
import numpy as np
import pytest

import hipdnn
from hipdnn import reference
from hipdnn.plugins._cdef import sdk_cdef
from hipdnn.wire.DataType import DataType
from hipdnn.wire.Graph import GraphT
from hipdnn.wire.PointwiseMode import PointwiseMode
from hipdnn.wire.TensorAttributes import TensorAttributesT
from tests.engine_abi.test_cpu_engine_abi import (
    BAD_PARAM,
    SUCCESS,
    Ctx,
    applicable,
    config_bytes,
    const_data,
    last_error,
    matmul_node,
    pw_node,
    sdpa_node,
)

F32 = hipdnn.DataType.FLOAT
DYN = hipdnn.DYNAMIC_DIM
BHSD = [3, 2, 1, 0]  # axis order: B outermost, D innermost
BSHD = [3, 1, 2, 0]  # S outside H
TOL = 2e-5
GUARD = 11  # elements of NaN guard before and after every output


@pytest.fixture(scope="module")
def handle() -> Iterator[hipdnn.Handle]:
    h = hipdnn.Handle()
    if not any(p.name == "hipdnn_cpu_engine" for p in h.loaded_plugins()):
        pytest.fail(f"the CPU engine did not load: {h.skipped_plugins()}")
    yield h
    h.close()


# ------------------------------------------------------------------------------------ buffers
def bhsd(dims: list[int]) -> list[int]:
    b, h, s, d = dims
    return [h * s * d, s * d, d, 1]


def bshd(dims: list[int], pad: int = 0) -> list[int]:
    """[B, S, H, D] memory viewed as [B, H, S, D]; ``pad`` extra elements after each (s, h) row and
    each s block."""
    b, h, s, d = dims
    row = d + pad
    srow = h * row + pad
    return [s * srow, row, srow, 1]


def compact(dims: list[int]) -> list[int]:
    out, acc = [], 1
    for d in reversed(dims):
        out.append(acc)
        acc *= d
    return out[::-1]


def extent(dims: list[int], strides: list[int]) -> int:
    return 1 + sum((d - 1) * s for d, s in zip(dims, strides))


def data(rng: np.random.Generator, dims: list[int], strides: list[int]) -> np.ndarray:
    """Random float32 values at ``strides`` inside a NaN-filled buffer (the gaps stay NaN)."""
    base = np.full(extent(dims, strides), np.nan, np.float32)
    view = np.lib.stride_tricks.as_strided(base, shape=dims, strides=[4 * s for s in strides])
    view[...] = rng.standard_normal(dims).astype(np.float32)
    return view


class Out:
    """A NaN-filled output buffer with guards; ``view`` is what the engine writes."""

    def __init__(self, dims: list[int], strides: list[int]) -> None:
        self.base = np.full(extent(dims, strides) + 2 * GUARD, np.nan, np.float32)
        self.view = np.lib.stride_tricks.as_strided(self.base[GUARD:], shape=dims, strides=[4 * s for s in strides])
        self.dims, self.strides = dims, strides

    def check(self, want: np.ndarray, tol: float = TOL) -> None:
        assert not np.isnan(self.view).any(), "an output element was not written"
        assert reference.relative_error(self.view, want) < tol
        offs = np.zeros(self.dims, np.int64)
        for axis, (n, s) in enumerate(zip(self.dims, self.strides)):
            shape = [1] * len(self.dims)
            shape[axis] = n
            offs = offs + (np.arange(n) * s).reshape(shape)
        outside = np.ones(self.base.shape, bool)
        outside[GUARD + offs.ravel()] = False
        assert np.isnan(self.base[outside]).all(), "the engine wrote outside the output view"


def workspace(g: hipdnn.Graph) -> np.ndarray:
    return np.empty(max(1, g.get_workspace_size()), np.uint8)


def sdpa_ref(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, causal: bool = False, bottom_right: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """reference.sdpa, in query blocks when there is no mask (keeps S=4096 cheap in memory)."""
    if causal or q.shape[2] <= 1024:
        return reference.sdpa(q, k, v, scale, causal=causal, bottom_right=bottom_right)
    parts = [reference.sdpa(q[:, :, i : i + 1024], k, v, scale) for i in range(0, q.shape[2], 1024)]
    return np.concatenate([p[0] for p in parts], axis=2), np.concatenate([p[1] for p in parts], axis=2)


# -------------------------------------------------------------------------------------- SDPA
def dyn_sdpa(
    h: int,
    hk: int,
    d: int,
    order: list[int],
    causal: bool = False,
    bottom_right: bool = False,
    stats: bool = False,
    scale: float = 0.25,
) -> tuple[hipdnn.Graph, dict[str, hipdnn.TensorAttributes]]:
    g = hipdnn.Graph(
        name="dyn_sdpa",
        io_data_type=F32,
        intermediate_data_type=F32,
        compute_data_type=F32,
        is_override_shape_enabled=True,
    )
    q = g.tensor(name="q", dim=[DYN, h, DYN, d], stride=order, data_type=F32).mark_dynamic()
    k = g.tensor(name="k", dim=[DYN, hk, DYN, d], stride=order, data_type=F32).mark_dynamic()
    v = g.tensor(name="v", dim=[DYN, hk, DYN, d], stride=order, data_type=F32).mark_dynamic()
    o, lse = g.sdpa(
        q,
        k,
        v,
        attn_scale=scale,
        use_causal_mask=causal,
        generate_stats=stats,
        diagonal_alignment=hipdnn.DiagonalAlignment.BOTTOM_RIGHT if bottom_right else hipdnn.DiagonalAlignment.TOP_LEFT,
    )
    o.set_output(True)
    t = {"q": q, "k": k, "v": v, "o": o}
    if lse is not None:
        lse.set_output(True)
        t["stats"] = lse
    return g, t


def run_sdpa(
    handle: hipdnn.Handle,
    g: hipdnn.Graph,
    t: dict[str, hipdnn.TensorAttributes],
    ws: np.ndarray,
    b: int,
    h: int,
    hk: int,
    sq: int,
    skv: int,
    d: int,
    layout,
    rng: np.random.Generator,
    causal: bool = False,
    bottom_right: bool = False,
    scale: float = 0.25,
) -> None:
    qd, kd = [b, h, sq, d], [b, hk, skv, d]
    qs, ks = layout(qd), layout(kd)
    q, k, v = data(rng, qd, qs), data(rng, kd, ks), data(rng, kd, ks)
    o = Out(qd, layout(qd))
    vp = {t["q"]: q, t["k"]: k, t["v"]: v, t["o"]: o.view}
    ov = {
        t["q"]: hipdnn.OverrideEntry(qd, qs),
        t["k"]: hipdnn.OverrideEntry(kd, ks),
        t["v"]: hipdnn.OverrideEntry(kd, ks),
        t["o"]: hipdnn.OverrideEntry(qd, o.strides),
    }
    st = None
    if "stats" in t:
        st = Out([b, h, sq, 1], compact([b, h, sq, 1]))
        vp[t["stats"]] = st.view
        ov[t["stats"]] = hipdnn.OverrideEntry(st.dims, st.strides)
    g.execute(handle, vp, ws, overrides=ov)
    want_o, want_stats = sdpa_ref(q, k, v, scale, causal, bottom_right)
    o.check(want_o)
    if st is not None:
        st.check(want_stats, 1e-4)


def test_dynamic_sdpa_bhsd_one_plan_every_length(handle: hipdnn.Handle) -> None:
    """Declared [-1, 2, -1, 16] in BHSD order; built once, run at S = 1, 5, 700 and 4096."""
    g, t = dyn_sdpa(2, 2, 16, BHSD)
    g.build(handle)
    assert g._require_plan().engine_id == 101
    ws = workspace(g)
    rng = np.random.default_rng(1)
    for b, s in ((1, 1), (3, 5), (3, 700), (1, 4096)):
        run_sdpa(handle, g, t, ws, b, 2, 2, s, s, 16, bhsd, rng)


@pytest.mark.parametrize("pad", [0, 3])
def test_dynamic_sdpa_bshd_order_with_bshd_and_padded_strides(handle: hipdnn.Handle, pad: int) -> None:
    g, t = dyn_sdpa(2, 2, 16, BSHD)
    g.build(handle)
    ws = workspace(g)
    rng = np.random.default_rng(2 + pad)
    for b, s in ((1, 1), (3, 5), (1, 700)):
        run_sdpa(handle, g, t, ws, b, 2, 2, s, s, 16, lambda dims: bshd(dims, pad), rng)


@pytest.mark.parametrize(
    ("sq", "skv", "bottom_right"), [(37, 100, True), (100, 37, True), (100, 37, False), (5, 5, False), (700, 700, True)]
)
def test_dynamic_sdpa_causal(handle: hipdnn.Handle, sq: int, skv: int, bottom_right: bool) -> None:
    """Causal top-left / bottom-right with different query and key lengths per call, and stats."""
    g, t = dyn_sdpa(2, 2, 16, BHSD, causal=True, bottom_right=bottom_right, stats=True)
    g.build(handle)
    rng = np.random.default_rng(sq + skv)
    run_sdpa(handle, g, t, workspace(g), 3, 2, 2, sq, skv, 16, bhsd, rng, causal=True, bottom_right=bottom_right)


@pytest.mark.parametrize(("h", "hk"), [(4, 2), (4, 1)])
def test_dynamic_sdpa_gqa(handle: hipdnn.Handle, h: int, hk: int) -> None:
    g, t = dyn_sdpa(h, hk, 16, BHSD, causal=True)
    g.build(handle)
    ws = workspace(g)
    rng = np.random.default_rng(h * 10 + hk)
    for b, s in ((1, 1), (3, 130)):
        run_sdpa(handle, g, t, ws, b, h, hk, s, s, 16, bhsd, rng, causal=True)


def test_dynamic_sdpa_workspace_does_not_grow_with_length(handle: hipdnn.Handle) -> None:
    """The scratch is per-thread tiles of at most 1024 queries (32 panels of 32 in the AMX kernel; 4
    panels of 48 on AVX-512, where fp16 / bf16 tiles are widened; sized for every ISA) and 64-256
    keys: the dynamic plan's workspace equals a static plan's at S=1024 and at S=4096."""
    g, _ = dyn_sdpa(2, 2, 16, BHSD)
    g.build(handle)
    sizes = []
    for s in (1024, 4096):
        gs = hipdnn.Graph(name="static", io_data_type=F32, intermediate_data_type=F32, compute_data_type=F32)
        q, k, v = (gs.tensor(name=n, dim=[1, 2, s, 16], stride=bhsd([1, 2, s, 16]), data_type=F32) for n in "qkv")
        gs.sdpa(q, k, v, attn_scale=0.25)[0].set_output(True)
        gs.build(handle)
        sizes.append(gs.get_workspace_size())
    assert g.get_workspace_size() == sizes[0] == sizes[1]


# ------------------------------------------------------------------------------------ matmul
def dyn_matmul(k: int, n: int, epilogue: tuple[str, ...] = ()) -> tuple[hipdnn.Graph, dict]:
    """a [-1, -1, K] (batch and M wildcards) @ b [1, K, N], then optional pointwise epilogue nodes
    ("bias": + bias[1, 1, N]; "relu"); the matmul output is virtual when an epilogue follows."""
    g = hipdnn.Graph(
        name="dyn_mm",
        io_data_type=F32,
        intermediate_data_type=F32,
        compute_data_type=F32,
        is_override_shape_enabled=True,
    )
    a = g.tensor(name="a", dim=[DYN, DYN, k], stride=[2, 1, 0], data_type=F32).mark_dynamic()
    b = g.tensor(name="b", dim=[1, k, n], stride=[k * n, n, 1], data_type=F32)
    t = {"a": a, "b": b}
    y = g.matmul(a, b)
    for step in epilogue:
        if step == "bias":
            bias = g.tensor(name="bias", dim=[1, 1, n], stride=[n, n, 1], data_type=F32)
            t["bias"] = bias
            y = g.pointwise(hipdnn.PointwiseMode.ADD, y, bias)
        else:
            y = g.pointwise(hipdnn.PointwiseMode.RELU_FWD, y)
    y.set_output(True)
    t["y"] = y
    return g, t


@pytest.mark.parametrize("epilogue", [(), ("bias",), ("bias", "relu")])
def test_dynamic_matmul_and_epilogue(handle: hipdnn.Handle, epilogue: tuple[str, ...]) -> None:
    k, n = 24, 40
    g, t = dyn_matmul(k, n, epilogue)
    g.build(handle)
    ws = workspace(g)
    rng = np.random.default_rng(len(epilogue))
    bv = rng.standard_normal([1, k, n]).astype(np.float32)
    biasv = rng.standard_normal([1, 1, n]).astype(np.float32)
    for batch, m, layout in ((1, 1, "compact"), (3, 17, "compact"), (2, 300, "padded")):
        ad = [batch, m, k]
        as_ = compact(ad) if layout == "compact" else [m * (k + 5) + 7, k + 5, 1]
        yd = [batch, m, n]
        ys = compact(yd) if layout == "compact" else [m * (n + 3) + 1, n + 3, 1]
        a = data(rng, ad, as_)
        y = Out(yd, ys)
        vp = {t["a"]: a, t["b"]: bv, t["y"]: y.view}
        if "bias" in t:
            vp[t["bias"]] = biasv
        g.execute(
            handle, vp, ws, overrides={t["a"]: hipdnn.OverrideEntry(ad, as_), t["y"]: hipdnn.OverrideEntry(yd, ys)}
        )
        want = reference.matmul(a, bv)
        if "bias" in epilogue:
            want = want + biasv
        if "relu" in epilogue:
            want = np.maximum(want, 0.0)
        y.check(want)


def test_wildcard_intermediate_must_have_its_outputs_shape(handle: hipdnn.Handle) -> None:
    """The wildcard-shaped matmul output lives in the add's output buffer, so it may not be broadcast
    there: a call where it would be (a's batch 1, bias batch 3) is refused, with nothing run."""
    k, n = 8, 8
    g = hipdnn.Graph(name="bcast_mm", io_data_type=F32, is_override_shape_enabled=True)
    a = g.tensor(name="a", dim=[DYN, DYN, k], stride=[2, 1, 0], data_type=F32).mark_dynamic()
    b = g.tensor(name="b", dim=[1, k, n], stride=[k * n, n, 1], data_type=F32)
    bias = g.tensor(name="bias", dim=[DYN, 1, n], stride=[2, 1, 0], data_type=F32).mark_dynamic()
    y = g.pointwise(hipdnn.PointwiseMode.ADD, g.matmul(a, b), bias)
    y.set_output(True)
    g.build(handle)
    rng = np.random.default_rng(5)
    av, bv, biasv = (rng.standard_normal(s).astype(np.float32) for s in ([1, 4, k], [1, k, n], [3, 1, n]))
    out = Out([3, 4, n], compact([3, 4, n]))
    with pytest.raises(hipdnn.HipdnnError, match="intermediate"):
        g.execute(
            handle,
            {a: av, b: bv, bias: biasv, y: out.view},
            workspace(g),
            overrides={
                a: hipdnn.OverrideEntry([1, 4, k], compact([1, 4, k])),
                bias: hipdnn.OverrideEntry([3, 1, n], compact([3, 1, n])),
                y: hipdnn.OverrideEntry([3, 4, n], compact([3, 4, n])),
            },
        )
    assert np.isnan(out.base).all()


def test_wildcard_intermediate_feeding_a_matmul_is_not_applicable(handle: hipdnn.Handle) -> None:
    """An intermediate whose size has no bound and whose consumer is not pointwise cannot be placed
    without allocating at execute: the engine declines the graph."""
    g = hipdnn.Graph(name="mm_mm", io_data_type=F32, is_override_shape_enabled=True)
    a = g.tensor(name="a", dim=[DYN, DYN, 8], stride=[2, 1, 0], data_type=F32).mark_dynamic()
    b = g.tensor(name="b", dim=[1, 8, 8], stride=[64, 8, 1], data_type=F32)
    c = g.tensor(name="c", dim=[1, 8, 8], stride=[64, 8, 1], data_type=F32)
    g.matmul(g.matmul(a, b), c).set_output(True)
    with pytest.raises(hipdnn.HipdnnError) as err:
        g.build(handle)
    assert err.value.code == hipdnn.ErrorCode.GRAPH_NOT_SUPPORTED


def test_missing_override_is_caught_by_the_host(handle: hipdnn.Handle) -> None:
    g, t = dyn_sdpa(2, 2, 16, BHSD)
    g.build(handle)
    dims = [1, 2, 5, 16]
    bufs = {x: np.zeros(dims, np.float32) for x in t.values()}
    ov = {x: hipdnn.OverrideEntry(dims, bhsd(dims)) for n, x in t.items() if n != "k"}
    with pytest.raises(hipdnn.HipdnnError) as err:
        g.execute(handle, bufs, workspace(g), overrides=ov)
    assert err.value.code == hipdnn.ErrorCode.INVALID_VALUE and "'k'" in err.value.message
    assert "needs an override" in err.value.message


# ======================================================================= the C ABI directly
@pytest.fixture(scope="module")
def abi(handle: hipdnn.Handle) -> Iterator[tuple[cffi.FFI, object, object]]:
    path = os.environ.get("HIPDNN_CPU_ENGINE_LIB") or next(
        p.path for p in handle.loaded_plugins() if p.name == "hipdnn_cpu_engine"
    )
    ffi = cffi.FFI()
    ffi.cdef(sdk_cdef())
    lib = ffi.dlopen(path)
    h = ffi.new("hipdnnEnginePluginHandle_t*")
    assert lib.hipdnnEnginePluginCreate(h) == SUCCESS
    yield ffi, lib, h[0]
    assert lib.hipdnnEnginePluginDestroy(h[0]) == SUCCESS


def wire_graph(tensors: list[tuple], nodes: list) -> bytes:
    """tensors: (uid, dims, strides or axis order, virtual, dynamic)."""
    g = GraphT()
    g.name = "dyn_abi"
    g.ioDataType = g.computeDataType = g.intermediateDataType = DataType.FLOAT
    g.isOverrideShapeEnabled = True
    g.tensors = []
    for uid, dims, strides, virtual, dynamic in tensors:
        ta = TensorAttributesT()
        ta.uid, ta.name, ta.dataType = uid, f"t{uid}", DataType.FLOAT
        ta.dims, ta.strides, ta.virtual, ta.isDynamic = list(dims), list(strides), virtual, dynamic
        g.tensors.append(ta)
    g.nodes = nodes
    b = flatbuffers.Builder(1024)
    b.Finish(g.Pack(b))
    return bytes(b.Output())


def context(ffi, lib, h, gb: bytes) -> Ctx:
    assert applicable(ffi, lib, h, gb) == [101]
    keep: list = []
    g, c = const_data(ffi, gb, keep), const_data(ffi, config_bytes(), keep)
    ws = ffi.new("size_t*")
    assert lib.hipdnnEnginePluginGetWorkspaceSize(h, c, g, ws) == SUCCESS
    p = ffi.new("hipdnnEnginePluginExecutionContext_t*")
    assert lib.hipdnnEnginePluginCreateExecutionContext(h, c, g, p) == SUCCESS, last_error(ffi, lib)
    return Ctx(ffi, lib, h, p[0], ws[0], keep)


DYN_SDPA = wire_graph(
    [
        (1, [DYN, 2, DYN, 8], BHSD, False, True),
        (2, [DYN, 2, DYN, 8], BHSD, False, True),
        (3, [DYN, 2, DYN, 8], BHSD, False, True),
        (4, [DYN, 2, DYN, 8], BHSD, False, True),
    ],
    [sdpa_node(1, 2, 3, 4, scale=0.5)],
)


def test_abi_dynamic_sdpa_runs_and_plain_entry_is_refused(abi) -> None:  # type: ignore[no-untyped-def]
    ffi, lib, h = abi
    ctx = context(ffi, lib, h, DYN_SDPA)
    try:
        dims = [2, 2, 9, 8]
        rng = np.random.default_rng(0)
        q, k, v = (rng.standard_normal(dims).astype(np.float32) for _ in range(3))
        o = np.full(dims, np.nan, np.float32)
        bufs = {1: q.ctypes.data, 2: k.ctypes.data, 3: v.ctypes.data, 4: o.ctypes.data}
        full = {u: (dims, bhsd(dims)) for u in (1, 2, 3, 4)}

        assert ctx.execute(bufs) == BAD_PARAM  # the plain entry: shapes unknown
        assert "ExecuteOpGraphWithOverrides" in last_error(ffi, lib) and np.isnan(o).all()

        missing = {u: full[u] for u in (1, 2, 4)}
        assert ctx.execute(bufs, overrides=missing) == BAD_PARAM
        assert "uid 3 has no override" in last_error(ffi, lib)

        bad_order = dict(full)
        bad_order[1] = (dims, bshd(dims))  # S outside H contradicts the BHSD order
        assert ctx.execute(bufs, overrides=bad_order) == BAD_PARAM
        assert "axis order" in last_error(ffi, lib)

        too_many_heads = dict(full)
        too_many_heads[1] = ([2, 3, 9, 8], bhsd([2, 3, 9, 8]))
        assert ctx.execute(bufs, overrides=too_many_heads) == BAD_PARAM
        assert "more than the declared 2" in last_error(ffi, lib)
        assert np.isnan(o).all()

        assert ctx.execute(bufs, overrides=full) == SUCCESS, last_error(ffi, lib)
        want, _ = reference.sdpa(q, k, v, 0.5)
        assert reference.relative_error(o, want) < TOL
    finally:
        ctx.destroy()


@pytest.mark.parametrize(
    ("why", "gb"),
    [
        (
            "static tensor with a wildcard",
            wire_graph(
                [(1, [DYN, 4], [4, 1], False, False), (2, [DYN, 4], [4, 1], False, False)],
                [pw_node(PointwiseMode.RELU_FWD, 1, None, 2)],
            ),
        ),
        (
            "dynamic strides that are no axis order",
            wire_graph(
                [(1, [DYN, 4], [4, 1], False, True), (2, [DYN, 4], [1, 0], False, True)],
                [pw_node(PointwiseMode.RELU_FWD, 1, None, 2)],
            ),
        ),
        (
            "wildcard head dim",
            wire_graph(
                [(u, [DYN, 2, DYN, DYN], BHSD, False, True) for u in (1, 2, 3, 4)], [sdpa_node(1, 2, 3, 4, scale=0.5)]
            ),
        ),
        (
            "wildcard intermediate read by a matmul",
            wire_graph(
                [
                    (1, [DYN, 8], [1, 0], False, True),
                    (2, [8, 8], [8, 1], False, False),
                    (3, [DYN, 8], [1, 0], True, True),
                    (4, [8, 8], [8, 1], False, False),
                    (5, [DYN, 8], [1, 0], False, True),
                ],
                [matmul_node(1, 2, 3), matmul_node(3, 4, 5)],
            ),
        ),
    ],
)
def test_abi_not_applicable(abi, why: str, gb: bytes) -> None:  # type: ignore[no-untyped-def]
    ffi, lib, h = abi
    assert applicable(ffi, lib, h, gb) == [], why


def test_abi_static_wildcard_free_graph_still_runs_plain(abi) -> None:  # type: ignore[no-untyped-def]
    """A graph without dynamic tensors keeps the plain entry."""
    ffi, lib, h = abi
    gb = wire_graph(
        [(1, [2, 4], [4, 1], False, False), (2, [2, 4], [4, 1], False, False)],
        [pw_node(PointwiseMode.RELU_FWD, 1, None, 2)],
    )
    ctx = context(ffi, lib, h, gb)
    try:
        x = np.array([[-1, 2, -3, 4], [5, -6, 7, -8]], np.float32)
        y = np.full([2, 4], np.nan, np.float32)
        assert ctx.execute({1: x.ctypes.data, 2: y.ctypes.data}) == SUCCESS
        assert (y == np.maximum(x, 0)).all()
    finally:
        ctx.destroy()
