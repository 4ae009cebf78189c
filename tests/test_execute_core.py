"""The compiled execute path (issue #11): the bound call as safe as execute, a frozen plan snapshot,
handle lifetime under threads, exactly typed values, the design card's call shape, and the log
record of a refused override. Numbers are checked against float64 references on the CPU engine,
outputs NaN-filled first; memory safety against guard-banded buffers."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hipdnn
from hipdnn import reference

F32 = hipdnn.DataType.FLOAT
BF16 = hipdnn.DataType.BFLOAT16
INVALID = hipdnn.ErrorCode.INVALID_VALUE
DIMS = [1, 2, 16, 8]
STRIDES = [256, 128, 8, 1]
GUARD = 64


def compact(dims: list[int]) -> list[int]:
    out = [1] * len(dims)
    for i in range(len(dims) - 2, -1, -1):
        out[i] = out[i + 1] * dims[i + 1]
    return out


@pytest.fixture
def handle() -> Iterator[hipdnn.Handle]:
    h = hipdnn.Handle()
    yield h
    h.close()


def relu_graph(dims: list[int], strides: list[int], dt: hipdnn.DataType = F32) -> tuple[hipdnn.Graph, list[Any]]:
    g = hipdnn.Graph(name="relu", io_data_type=dt, is_override_shape_enabled=True)
    x = g.tensor(name="x", dim=dims, stride=strides, data_type=dt)
    y = g.pointwise(hipdnn.PointwiseMode.RELU_FWD, x, name="relu")
    y.set_output(True).set_stride(strides)
    return g, [x, y]


def sdpa_graph(s: int, dt: hipdnn.DataType = F32, h: int = 2, d: int = 8) -> tuple[hipdnn.Graph, list[Any]]:
    g = hipdnn.Graph(name="attn", io_data_type=dt, is_override_shape_enabled=True)
    dims = [1, h, s, d]
    q, k, v = (g.tensor(name=n, dim=dims, stride=compact(dims), data_type=dt) for n in "qkv")
    o, _ = g.sdpa(q, k, v, attn_scale=0.3, use_causal_mask=True)
    o.set_output(True)
    return g, [q, k, v, o]


class Guarded:
    """A float32 buffer of ``n`` elements between two guard bands of sentinels."""

    SENTINEL = np.float32(-1234.5)

    def __init__(self, n: int) -> None:
        self.base = np.full(n + 2 * GUARD, self.SENTINEL, np.float32)
        self.view = self.base[GUARD : GUARD + n]

    @property
    def ptr(self) -> int:
        return int(self.view.ctypes.data)

    def intact(self) -> bool:
        return bool(
            (self.base[:GUARD] == self.SENTINEL).all() and (self.base[GUARD + len(self.view) :] == self.SENTINEL).all()
        )


# -- the bound call is as safe as execute ---------------------------------------------------------
@pytest.mark.parametrize(
    "strides, fragment",
    [
        ([2**62, 2**40, 8, 1], "rule 7"),  # segfaulted before: addresses far past the declared maximum
        ([1024, 256, 16, 1], "rule 7"),  # wrote past a buffer sized at the declared maximum before
        ([2**63, 256, 16, 1], "int64"),  # raised OverflowError before
        ([256, 128, 8, 0], "rule 6"),
        ([256, 128, 1, 8], "rule 8"),
    ],
)
def test_bound_call_refuses_overrides_beyond_the_declared_maximum(handle, strides, fragment) -> None:
    g, (x, y) = relu_graph(DIMS, STRIDES)
    g.build(handle)
    bufs = [Guarded(256), Guarded(256)]
    bound = g.bind(handle, [x, y], override_uids=[x, y])
    with pytest.raises(hipdnn.HipdnnError) as err:
        bound([b.ptr for b in bufs], 0, [[1, 2, 16, 8]] * 2, [strides, STRIDES])
    assert err.value.code is INVALID and fragment in err.value.message, err.value.message
    assert all(b.intact() for b in bufs)
    # the same override through Graph.execute with sized buffers is refused too
    with pytest.raises(hipdnn.HipdnnError):
        g.execute(
            handle,
            {x: bufs[0].view, y: bufs[1].view},
            None,
            {x: hipdnn.OverrideEntry([1, 2, 16, 8], strides), y: hipdnn.OverrideEntry([1, 2, 16, 8], STRIDES)},
        )
    assert all(b.intact() for b in bufs)


def test_bound_call_computes_what_execute_computes(handle) -> None:
    rng = np.random.default_rng(3)
    g, ts = sdpa_graph(64)
    g.build(handle)
    ws = np.empty(max(g.get_workspace_size(), 1), np.uint8)
    bound = g.bind(handle, ts, override_uids=ts)
    for s in (1, 37, 64):
        dims = [1, 2, s, 8]
        q, k, v = (rng.standard_normal(dims).astype(np.float32) for _ in range(3))
        o = np.full(dims, np.nan, np.float32)
        bound([a.ctypes.data for a in (q, k, v, o)], ws.ctypes.data, [dims] * 4, [compact(dims)] * 4)
        want, _ = reference.sdpa(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), 0.3, causal=True)
        assert reference.relative_error(o, want) < 1e-5


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_bound_overrides_never_touch_memory_outside_the_declared_maximum(handle, data) -> None:
    """Pointers backed by exactly the declared maximum (between guard bands); random overrides, valid
    or not: each call is refused with HipdnnError or runs, and no guard element ever changes."""
    rank = data.draw(st.integers(1, 4))
    dims = data.draw(st.lists(st.sampled_from([1, 2, 3, 5, 7]), min_size=rank, max_size=rank))
    strides = compact(dims)
    g, (x, y) = relu_graph(dims, strides)
    g.build(handle)
    extent = sum((d - 1) * s for d, s in zip(dims, strides)) + 1
    xb, yb = Guarded(extent), Guarded(extent)
    xb.view[:] = np.random.default_rng(0).standard_normal(extent).astype(np.float32)
    bound = g.bind(handle, [x, y], override_uids=[x, y])
    shape = [data.draw(st.integers(0, d + 1)) for d in dims]
    big = st.one_of(st.integers(-2, 12), st.sampled_from([2**31, 2**40, 2**62, 2**63 - 1]))
    stride_x = [data.draw(big) for _ in dims]
    stride_y = data.draw(st.sampled_from([stride_x, compact(shape) if min(shape) > 0 else stride_x]))
    with contextlib.suppress(hipdnn.HipdnnError):
        bound([xb.ptr, yb.ptr], 0, [shape, shape], [stride_x, stride_y])
    assert xb.intact() and yb.intact()


def test_bound_call_checks_shapes_across_nodes(handle) -> None:
    g, ts = sdpa_graph(16)
    g.build(handle)
    bound = g.bind(handle, ts, override_uids=ts)
    bufs = [np.zeros([1, 2, 16, 8], np.float32) for _ in ts]
    ws = np.empty(max(g.get_workspace_size(), 1), np.uint8)
    shapes = [[1, 2, 5, 8], [1, 2, 6, 8], [1, 2, 7, 8], [1, 2, 5, 8]]  # k and v disagree
    with pytest.raises(hipdnn.HipdnnError, match="sequence length"):
        bound([b.ctypes.data for b in bufs], ws.ctypes.data, shapes, [compact(s) for s in shapes])


# -- a built plan is a snapshot ---------------------------------------------------------------------
def test_tensor_changes_after_build_do_not_reach_the_plan(handle) -> None:
    """set_dim after build() has no effect on the built plan: overrides are still checked against the
    dims the plugin was built with; a rebuild applies the change."""
    g, (x, y) = relu_graph([1, 2, 16, 8], STRIDES)
    g.build(handle)
    x.set_dim([1, 2, 64, 8])
    y.set_dim([1, 2, 64, 8])
    big = np.zeros([1, 2, 64, 8], np.float32)
    # values must state the override's shape and strides: compact [1, 2, 32, 8] arrays
    mid = np.zeros([1, 2, 32, 8], np.float32)
    wider = {t: hipdnn.OverrideEntry([1, 2, 32, 8], compact([1, 2, 32, 8])) for t in (x, y)}
    with pytest.raises(hipdnn.HipdnnError, match="rule 7"):
        g.execute(handle, {x: mid, y: np.zeros_like(mid)}, None, wider)
    x.set_dim([-1, 2, 16, 8])
    with pytest.raises(hipdnn.HipdnnError, match="rule 7"):
        g.execute(handle, {x: mid, y: np.zeros_like(mid)}, None, wider)
    bound = g.bind(handle, [x, y], override_uids=[x, y])
    with pytest.raises(hipdnn.HipdnnError, match="rule 7"):
        bound([big.ctypes.data, big.ctypes.data], 0, [[1, 2, 32, 8]] * 2, [compact([1, 2, 32, 8])] * 2)
    # at the built shape the plan still works, with the built dims
    xs = np.random.default_rng(1).standard_normal([1, 2, 16, 8]).astype(np.float32)
    ys = np.full_like(xs, np.nan)
    g.execute(handle, {x: xs, y: ys})
    np.testing.assert_array_equal(ys, np.maximum(xs, 0))
    # rebuilding applies the new maximum
    x.set_dim([1, 2, 64, 8]).set_stride(compact([1, 2, 64, 8]))
    y.set_dim([1, 2, 64, 8]).set_stride(compact([1, 2, 64, 8]))
    g.build(handle)
    ym = np.full_like(mid, np.nan)
    g.execute(handle, {x: mid, y: ym}, None, wider)
    np.testing.assert_array_equal(ym, 0)


# -- handle lifetime ------------------------------------------------------------------------------
def _hammer(call: Any, started: threading.Barrier, errors: list[BaseException]) -> None:
    """Call until the handle closes under us: success or HipdnnError, never anything else."""
    started.wait()
    for _ in range(200):
        try:
            call()
        except hipdnn.HipdnnError as exc:
            if "closed" not in exc.message and "released" not in exc.message:
                errors.append(exc)
            return
        except BaseException as exc:  # pragma: no cover - reported by the test
            errors.append(exc)
            return


@pytest.mark.parametrize("path", ["execute", "bound"])
def test_close_while_other_threads_execute(path: str) -> None:
    """close() waits for calls in flight; calls after it raise HipdnnError; nothing crashes."""
    rng = np.random.default_rng(2)
    dims = [1, 2, 17, 8]
    for _round in range(100):
        h = hipdnn.Handle()
        g, ts = sdpa_graph(32)
        g.build(h)
        arrays = [rng.standard_normal([1, 2, 32, 8]).astype(np.float32) for _ in ts]
        ws = np.empty(max(g.get_workspace_size(), 1), np.uint8)
        bound = g.bind(h, ts, override_uids=ts)
        ov = {t: hipdnn.OverrideEntry(dims, compact(dims)) for t in ts}
        ptrs = [a.ctypes.data for a in arrays]

        # execute gets compact [1, 2, 17, 8] views at the start of the same buffers the bound call points into
        views = [a.reshape(-1)[: int(np.prod(dims))].reshape(dims) for a in arrays]

        def by_execute(g: Any = g, h: Any = h, ts: Any = ts, views: Any = views, ws: Any = ws, ov: Any = ov) -> None:
            g.execute(h, dict(zip(ts, views)), ws, ov)

        def by_bound(bound: Any = bound, ptrs: Any = ptrs, ws: Any = ws) -> None:
            bound(ptrs, ws.ctypes.data, [dims] * 4, [compact(dims)] * 4)

        call = by_execute if path == "execute" else by_bound
        errors: list[BaseException] = []
        started = threading.Barrier(5)
        threads = [threading.Thread(target=_hammer, args=(call, started, errors)) for _ in range(4)]
        for t in threads:
            t.start()
        started.wait()
        h.close()
        for t in threads:
            t.join()
        assert not errors, errors
        for late in (by_execute, by_bound):
            with pytest.raises(hipdnn.HipdnnError, match="closed"):
                late()


def test_destroyed_plan_refuses_calls(handle) -> None:
    g, (x, y) = relu_graph([4], [1])
    g.build(handle)
    bound = g.bind(handle, [x, y])
    a, b = np.ones(4, np.float32), np.zeros(4, np.float32)
    bound([a.ctypes.data, b.ctypes.data])
    g._require_plan().destroy()
    with pytest.raises(hipdnn.HipdnnError, match="released"):
        bound([a.ctypes.data, b.ctypes.data])
    with pytest.raises(hipdnn.HipdnnError, match="released"):
        g.execute(handle, {x: a, y: b})


# -- exactly typed values -------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float16, np.int16, np.uint16, np.float32])
def test_bfloat16_graph_refuses_other_dtypes_naming_both(handle, dtype) -> None:
    g, ts = sdpa_graph(5, BF16)
    g.build(handle)
    pack = {t: np.zeros([1, 2, 5, 8], ml_dtypes.bfloat16) for t in ts}
    pack[ts[1]] = np.zeros([1, 2, 5, 8], dtype)
    with pytest.raises(hipdnn.HipdnnError) as err:
        g.execute(handle, pack, np.empty(max(g.get_workspace_size(), 1), np.uint8))
    assert err.value.code is INVALID
    assert np.dtype(dtype).name in err.value.message and "BFLOAT16" in err.value.message, err.value.message


def test_ml_dtypes_bfloat16_is_bfloat16(handle) -> None:
    rng = np.random.default_rng(5)
    g, ts = sdpa_graph(37, BF16)
    g.build(handle)
    q, k, v = (rng.standard_normal([1, 2, 37, 8]).astype(ml_dtypes.bfloat16) for _ in range(3))
    o = np.full([1, 2, 37, 8], np.nan, ml_dtypes.bfloat16)
    dims = [1, 2, 29, 8]
    views = [a[:, :, :29] for a in (q, k, v, o)]
    g.execute(
        handle,
        dict(zip(ts, views)),
        np.empty(max(g.get_workspace_size(), 1), np.uint8),
        {t: hipdnn.OverrideEntry(dims, compact([1, 2, 37, 8])) for t in ts},
    )
    f64 = [x.astype(np.float64) for x in views[:3]]
    want, _ = reference.sdpa(*f64, 0.3, causal=True)
    assert reference.relative_error(views[3].astype(np.float64), want) < 2e-2
    assert np.isnan(o[:, :, 29:].astype(np.float32)).all()  # rows past the override untouched


def torch_bf16_sdpa(torch: Any, seed: int) -> tuple[Any, ...]:
    """sdpa_graph(21, BF16)'s inputs as torch bf16 tensors, a NaN-filled output, and the float64 result."""
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, 2, 21, 8, generator=gen).to(torch.bfloat16) for _ in range(3))
    o = torch.full((1, 2, 21, 8), float("nan"), dtype=torch.bfloat16)
    want, _ = reference.sdpa(*(t.double().numpy() for t in (q, k, v)), 0.3, causal=True)
    return q, k, v, o, want


def test_torch_cpu_bfloat16_tensors_are_read(handle) -> None:
    torch = pytest.importorskip("torch")
    g, ts = sdpa_graph(21, BF16)
    g.build(handle)
    q, k, v, o, want = torch_bf16_sdpa(torch, seed=0)
    g.execute(handle, dict(zip(ts, (q, k, v, o))), np.empty(max(g.get_workspace_size(), 1), np.uint8))
    assert reference.relative_error(o.double().numpy(), want) < 2e-2
    with pytest.raises(hipdnn.HipdnnError, match="torch.float16"):
        g.execute(handle, dict(zip(ts, (q.half(), k, v, o))), np.empty(max(g.get_workspace_size(), 1), np.uint8))


def test_torch_function_mode_runs_no_code_while_the_pack_is_read(handle) -> None:
    """A torch function mode sees every accessor a call reads (data_ptr, shape, stride()): a handler
    that frees a tensor read before (set_() on it, while the next one is read) would leave the plugin a
    dangling pointer. The call reads its torch tensors with the modes off, so the handler never runs
    during it, and the mode is back on after (for the caller's own torch calls)."""
    torch = pytest.importorskip("torch")
    from torch.overrides import TorchFunctionMode

    g, ts = sdpa_graph(21, BF16)
    g.build(handle)
    q, k, v, o, want = torch_bf16_sdpa(torch, seed=3)
    seen: list[str] = []

    class FreeingMode(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            seen.append(getattr(func, "__name__", str(func)))
            if seen[-1] in ("data_ptr", "stride") and len(seen) > 2:
                q.set_(torch.empty(0, dtype=torch.bfloat16))  # frees q's storage (nothing else holds it)
            return func(*args, **(kwargs or {}))

    workspace = np.empty(max(g.get_workspace_size(), 1), np.uint8)
    with FreeingMode():
        g.execute(handle, dict(zip(ts, (q, k, v, o))), workspace)
        assert torch._C._is_torch_function_mode_enabled()  # the caller's mode is on again
        o.add_(0)  # and sees the caller's torch calls
    assert seen == ["add_"], seen
    assert reference.relative_error(o.double().numpy(), want) < 2e-2


def test_a_later_value_that_frees_a_torch_tensor_read_before_is_caught(handle) -> None:
    """A value read after a torch tensor may run code of its own (an ``__array_interface__``
    property, a tensor subclass's ``shape``) that frees the tensor read before (``set_()``): its
    pointer would be stale when the plugin runs. The core reads every torch tensor of the call again,
    through torch's own accessors, after the call's last Python code: the call is refused, naming the
    tensor, and nothing runs (the output keeps its NaN)."""
    torch = pytest.importorskip("torch")
    g, ts = sdpa_graph(300, F32, h=2, d=64)  # k: 150 KB, given back to the system when freed
    g.build(handle)
    workspace = np.empty(max(g.get_workspace_size(), 1), np.uint8)

    def fresh() -> tuple[Any, Any, Any, np.ndarray]:
        q, k, v = (torch.randn(1, 2, 300, 64) for _ in range(3))
        return q, k, v, np.full((1, 2, 300, 64), np.nan, np.float32)

    q, k, v, o = fresh()

    class FreesKey:
        """o's array, whose interface is read after k: it frees k first."""

        def __init__(self, arr: np.ndarray, victim: Any) -> None:
            self.arr, self.victim = arr, victim

        @property
        def __array_interface__(self) -> dict[str, Any]:
            self.victim.set_(torch.empty(0))
            return self.arr.__array_interface__

    with pytest.raises(hipdnn.HipdnnError, match="tensor 'k'.*changed while the call's other values were read"):
        g.execute(handle, {ts[0]: q, ts[1]: k, ts[2]: v, ts[3]: FreesKey(o, k)}, workspace)
    assert np.isnan(o).all()

    class Shrinking(torch.Tensor):
        """A subclass whose shape property, read after the query's, resizes the query in place."""

        victim: Any = None

        @property
        def shape(self) -> Any:  # type: ignore[override]
            type(self).victim.resize_(1)
            return super().shape

    q, k, v, o = fresh()
    Shrinking.victim = q
    with pytest.raises(hipdnn.HipdnnError, match="tensor 'q'.*changed"):
        g.execute(handle, {ts[0]: q, ts[1]: k.as_subclass(Shrinking), ts[2]: v, ts[3]: o}, workspace)
    assert np.isnan(o).all()
    # a mode entered by a value's code, during the call: the second reads run none of its handlers
    from torch.overrides import TorchFunctionMode

    class FreeingMode(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            ran.append(getattr(func, "__name__", str(func)))
            k.set_(torch.empty(0))
            return func(*args, **(kwargs or {}))

    class EntersMode:
        def __init__(self, arr: np.ndarray) -> None:
            self.arr = arr

        @property
        def __array_interface__(self) -> dict[str, Any]:
            mode.__enter__()  # left on: the test leaves it after the call
            return self.arr.__array_interface__

    ran: list[str] = []
    q, k, v, o = fresh()
    mode = FreeingMode()
    try:
        g.execute(handle, {ts[0]: q, ts[1]: k, ts[2]: v, ts[3]: EntersMode(o)}, workspace)
    finally:
        mode.__exit__(None, None, None)
    assert ran == [] and k.shape == (1, 2, 300, 64)
    want, _ = reference.sdpa(*(t.double().numpy() for t in (q, k, v)), 0.3, causal=True)
    assert reference.relative_error(o.astype(np.float64), want) < 1e-5
    # untouched tensors (and a subclass that leaves the others alone) run as before
    q, k, v, o = fresh()
    g.execute(handle, {ts[0]: q, ts[1]: k.as_subclass(torch.nn.Parameter), ts[2]: v, ts[3]: o}, workspace)
    want, _ = reference.sdpa(*(t.detach().double().numpy() for t in (q, k, v)), 0.3, causal=True)
    assert reference.relative_error(o.astype(np.float64), want) < 1e-5


def test_dlpack_producers_are_read_and_typed(handle) -> None:
    """A DLPack-only producer (capsules parsed by hipdnn.backend.values) reaches the plugin, exactly typed."""

    class CapsuleProducer:
        def __init__(self, arr: np.ndarray) -> None:
            self._arr = arr

        def __dlpack_device__(self) -> tuple[int, int]:
            return (1, 0)

        def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
            return self._arr.__dlpack__()

    g, (x, y) = relu_graph([4], [1])
    g.build(handle)
    g.execute(handle, {x: CapsuleProducer(np.ones(4, np.float32)), y: np.zeros(4, np.float32)})
    with pytest.raises(hipdnn.HipdnnError, match="float64"):
        g.execute(handle, {x: CapsuleProducer(np.ones(4)), y: np.zeros(4, np.float32)})


# -- call shape, logging, overflow ----------------------------------------------------------------
def test_positional_map_and_parallel_forms(handle) -> None:
    g, (x, y) = relu_graph([2, 6], [6, 1])
    g.build(handle)
    xs = np.arange(-6, 6, dtype=np.float32).reshape(2, 6)
    xv = xs[:, :3]  # the override's shape [2, 3] with the max strides [6, 1]
    for call in (
        lambda yv: g.execute(
            handle,
            {x: xv, y: yv},
            None,
            {x: hipdnn.OverrideEntry([2, 3], [6, 1]), y: hipdnn.OverrideEntry([2, 3], [6, 1])},
        ),
        lambda yv: g.execute(handle, {x: xv, y: yv}, None, [x, y], [[2, 3], [2, 3]], [[6, 1], [6, 1]]),
        lambda yv: g.execute(
            handle, {x: xv, y: yv}, None, (x.get_uid(), y.get_uid()), ([2, 3], [2, 3]), ([6, 1], [6, 1])
        ),
    ):
        ys = np.full([2, 6], np.nan, np.float32)
        call(ys[:, :3])
        np.testing.assert_array_equal(ys[:, :3], np.maximum(xs[:, :3], 0))
        assert np.isnan(ys[:, 3:]).all()


def test_refused_overrides_leave_a_log_record(handle, caplog) -> None:
    g = hipdnn.Graph(name="flagless", io_data_type=F32)
    x = g.tensor(name="x", dim=[4], stride=[1], data_type=F32)
    y = g.pointwise(hipdnn.PointwiseMode.RELU_FWD, x)
    y.set_output(True)
    g.build(handle)
    with (
        caplog.at_level(logging.WARNING, logger="hipdnn"),
        pytest.raises(hipdnn.HipdnnError, match="overrides refused"),
    ):
        g.execute(
            handle, {x: np.zeros(4, np.float32), y: np.zeros(4, np.float32)}, None, {x: hipdnn.OverrideEntry([2], [1])}
        )
    assert any("flagless" in r.getMessage() and "overrides refused" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, 2**64])
def test_out_of_range_override_values_are_hipdnn_errors(handle, value) -> None:
    g, (x, y) = relu_graph([4], [1])
    g.build(handle)
    with pytest.raises(hipdnn.HipdnnError, match="int64"):
        g.execute(
            handle,
            {x: np.zeros(4, np.float32), y: np.zeros(4, np.float32)},
            None,
            {x: hipdnn.OverrideEntry([2], [value])},
        )
    bound = g.bind(handle, [x, y], override_uids=[x])
    with pytest.raises(hipdnn.HipdnnError, match="int64"):
        bound([1 << 20, 1 << 21], 0, [[value]], [[1]])


@pytest.mark.parametrize("workspace", [2**64, -1, 2**70, True, "ws", 3.5])
def test_bad_workspace_values_are_hipdnn_errors(handle, workspace) -> None:
    g, (x, y) = relu_graph([4], [1])
    g.build(handle)
    with pytest.raises(hipdnn.HipdnnError):
        g.execute(handle, {x: np.zeros(4, np.float32), y: np.zeros(4, np.float32)}, workspace)
