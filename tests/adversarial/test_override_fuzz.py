"""Override fuzzing (issue #16): random execute-time shapes and strides against guard-banded buffers.

Extends ``tests/test_execute_core.py`` (the bound call on a relu graph, guards only) to SDPA, matmul
and a broadcasting pointwise graph, through both ``Graph.execute`` and the bound call, with results
checked. Each hypothesis example draws a valid call (shapes within the declared maxima, compact or
maximum-layout strides, consistent across the graph) and maybe one corruption that makes it invalid
(a dim of 0, negative, past the maximum or past int64; a stride of 0, negative or reaching past the
buffer; a rank or length mismatch; shapes the graph's nodes disagree on; an unknown uid). Buffers hold
exactly the declared maximum between guard bands; ``Graph.execute`` gets views of them stating the
call's shapes and strides (a sized value must, issue #26), the bound call bare pointers. Then:

- a valid call succeeds, its output equals a float64 numpy reference where the override addresses
  it, and every other byte (inputs, the rest of the output, guards, workspace guards) is unchanged;
- an invalid call raises HipdnnError and changes nothing at all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import hipdnn
from hipdnn import reference
from tests.adversarial.conftest import fuzz_settings
from tests.test_execute_core import GUARD, Guarded, compact, sdpa_graph

F32 = hipdnn.DataType.FLOAT
WS_PATTERN = 0x5A


@dataclass
class Problem:
    """A built graph: its tensors (inputs first, the output last), their declared maxima, and how a
    valid call's shapes follow from a few free sizes."""

    name: str
    graph: hipdnn.Graph
    tensors: list[Any]
    maxima: list[list[int]]
    sizes: list[int]  # upper bound of each free size
    shapes: Callable[[list[int]], list[list[int]]]
    # axes (tensor, axis) whose sizes must agree: a corruption changes one side only
    couplings: list[tuple[int, int, int, int]]
    compute: Callable[[list[np.ndarray]], np.ndarray]
    bound: Any = None


def _sdpa(handle: hipdnn.Handle) -> Problem:
    g, ts = sdpa_graph(16)  # q, k, v, o: [1, 2, 16, 8], scale 0.3, causal
    return Problem(
        "sdpa",
        g,
        ts,
        [[1, 2, 16, 8]] * 4,
        [16, 16],
        lambda s: [[1, 2, s[0], 8], [1, 2, s[1], 8], [1, 2, s[1], 8], [1, 2, s[0], 8]],
        [(1, 2, 2, 2), (0, 2, 3, 2)],  # k and v lengths; q and o lengths
        lambda x: reference.sdpa(x[0], x[1], x[2], 0.3, causal=True)[0],
    )


def _matmul(handle: hipdnn.Handle) -> Problem:
    g = hipdnn.Graph(name="mm", io_data_type=F32, is_override_shape_enabled=True)
    a = g.tensor(name="a", dim=[6, 5], stride=[5, 1], data_type=F32)
    b = g.tensor(name="b", dim=[5, 4], stride=[4, 1], data_type=F32)
    c = g.matmul(a, b)
    c.set_output(True)
    return Problem(
        "matmul",
        g,
        [a, b, c],
        [[6, 5], [5, 4], [6, 4]],
        [6, 5, 4],
        lambda s: [[s[0], s[1]], [s[1], s[2]], [s[0], s[2]]],
        [(0, 1, 1, 0), (0, 0, 2, 0), (1, 1, 2, 1)],
        lambda x: reference.matmul(x[0], x[1]),
    )


def _pointwise(handle: hipdnn.Handle) -> Problem:
    g = hipdnn.Graph(name="add", io_data_type=F32, is_override_shape_enabled=True)
    x = g.tensor(name="x", dim=[2, 6, 5], stride=[30, 5, 1], data_type=F32)
    y = g.tensor(name="y", dim=[1, 6, 1], stride=[6, 1, 1], data_type=F32)
    out = g.pointwise(hipdnn.PointwiseMode.ADD, x, y)
    out.set_output(True)
    return Problem(
        "pointwise",
        g,
        [x, y, out],
        [[2, 6, 5], [1, 6, 1], [2, 6, 5]],
        [2, 6, 5],
        lambda s: [[s[0], s[1], s[2]], [1, s[1], 1], [s[0], s[1], s[2]]],
        [(0, 1, 1, 1), (0, 2, 2, 2)],
        lambda v: np.asarray(v[0], np.float64) + np.asarray(v[1], np.float64),
    )


PROBLEMS = {"sdpa": _sdpa, "matmul": _matmul, "pointwise": _pointwise}


@pytest.fixture(scope="module")
def built(cpu_handle: hipdnn.Handle) -> dict[str, Problem]:
    out = {}
    for name, make in PROBLEMS.items():
        p = make(cpu_handle)
        p.graph.build(cpu_handle)
        p.bound = p.graph.bind(cpu_handle, p.tensors, override_uids=p.tensors)
        out[name] = p
    return out


def _extent(dims: list[int]) -> int:
    return int(np.prod(dims))


class Buffers:
    """Every tensor's maximum-size buffer between guards (inputs random, the output NaN) and the
    workspace between guard bytes; ``unchanged`` compares everything with the snapshot taken here."""

    def __init__(self, p: Problem, rng: np.random.Generator) -> None:
        self.bufs = [Guarded(_extent(m)) for m in p.maxima]
        for b in self.bufs[:-1]:
            b.view[:] = rng.standard_normal(len(b.view)).astype(np.float32)
        self.bufs[-1].view[:] = np.nan
        size = max(p.graph.get_workspace_size(), 1)
        self.ws = np.full(size + 2 * GUARD, WS_PATTERN, np.uint8)
        self.ws_body = self.ws[GUARD : GUARD + size]
        self.before = [b.base.copy() for b in self.bufs]

    def guards_intact(self) -> bool:
        ws_ok = (self.ws[:GUARD] == WS_PATTERN).all() and (self.ws[-GUARD:] == WS_PATTERN).all()
        return bool(ws_ok) and all(b.intact() for b in self.bufs)

    def unchanged(self) -> bool:
        return self.guards_intact() and all(
            np.array_equal(b.base, before, equal_nan=True) for b, before in zip(self.bufs, self.before)
        )


def _view(buf: Guarded, shape: list[int], stride: list[int]) -> np.ndarray:
    return np.lib.stride_tricks.as_strided(buf.view, shape=shape, strides=[s * 4 for s in stride])


def _stated(buf: Guarded, shape: list[int], stride: list[int]) -> np.ndarray:
    """What Graph.execute gets for a tensor: a view of its guarded buffer stating the call's shape and
    strides (a sized value must, issue #26) where that layout lies inside the buffer. Elsewhere (a
    negative dim, a length mismatch, a layout reaching past the buffer, a stride past int64: only in
    corrupted calls) the buffer at its full length, which the core refuses too. A view reaching past
    the buffer is never built: the core bounds a sized value by what it states, so such a view would
    let the engine outside the buffer."""
    if len(shape) != len(stride) or any(d < 0 for d in shape):
        return buf.view
    if 0 not in shape:
        lo = sum((d - 1) * s for d, s in zip(shape, stride) if s < 0)
        hi = sum((d - 1) * s for d, s in zip(shape, stride) if s > 0)
        if lo < 0 or hi >= len(buf.view):
            return buf.view
    try:
        return np.lib.stride_tricks.as_strided(buf.view, shape=shape, strides=[s * 4 for s in stride])
    except (ValueError, OverflowError):  # a stride or a size numpy cannot hold
        return buf.view


def _addressed(shape: list[int], stride: list[int]) -> np.ndarray:
    offsets = np.zeros([1], np.int64)
    for d, s in zip(shape, stride):
        offsets = np.add.outer(offsets, np.arange(d, dtype=np.int64) * s).ravel()
    return offsets


@st.composite
def calls(draw: st.DrawFn, p: Problem) -> tuple[list[list[int]], list[list[int]], str | None]:
    """(shapes, strides, corruption or None) for every tensor of ``p``."""
    sizes = [draw(st.integers(1, hi)) for hi in p.sizes]
    shapes = p.shapes(sizes)
    strides = [draw(st.sampled_from([compact(s), compact(m)])) for s, m in zip(shapes, p.maxima)]
    kinds = [None, None, None, "dim", "big dim", "stride", "far stride", "rank", "length", "couple"]
    kind = draw(st.sampled_from(kinds))
    if kind is None:
        return shapes, strides, None
    t = draw(st.integers(0, len(shapes) - 1))
    axis = draw(st.integers(0, len(shapes[t]) - 1))
    if kind == "dim":
        shapes[t][axis] = draw(st.sampled_from([0, -1, -(2**31), -(2**63)]))
    elif kind == "big dim":
        shapes[t][axis] = draw(st.sampled_from([p.maxima[t][axis] + 1, 2**31, 2**62, 2**63 - 1, 2**63, 2**64]))
    elif kind == "stride":
        strides[t][axis] = draw(st.sampled_from([0, -1, -(2**63)]))
        shapes[t][axis] = max(shapes[t][axis], 2) if p.maxima[t][axis] > 1 else shapes[t][axis]
        if shapes[t][axis] == 1:  # a stride of an axis of length 1 is never used: make it a dim error
            shapes[t][axis] = 0
    elif kind == "far stride":
        if p.maxima[t][axis] < 2:
            shapes[t][axis] = 0
        else:
            shapes[t][axis] = 2
            strides[t][axis] = draw(st.sampled_from([_extent(p.maxima[t]), 2**40, 2**62, 2**63 - 1, 2**63]))
    elif kind == "rank":
        shapes[t] = shapes[t][:-1] if draw(st.booleans()) else shapes[t] + [1]
        strides[t] = strides[t][: len(shapes[t])] + [1] * (len(shapes[t]) - len(strides[t]))
    elif kind == "length":
        strides[t] = strides[t][:-1]
    else:
        a, i, b, j = draw(st.sampled_from(p.couplings))
        hi = min(p.maxima[a][i], p.maxima[b][j])
        other = [v for v in range(2, hi + 1) if v != shapes[b][j]]
        if not other:
            shapes[a][i] = p.maxima[a][i] + 1
        else:
            shapes[a][i] = draw(st.sampled_from(other))
            if strides[a] != compact(p.maxima[a]):  # the maximum layout fits any smaller shape
                strides[a] = compact(shapes[a])
    return shapes, strides, kind


def _check(p: Problem, bufs: Buffers, shapes: list[list[int]], strides: list[list[int]], ok: bool) -> None:
    assert bufs.guards_intact()
    if not ok:
        assert bufs.unchanged()
        return
    ins = [_view(b, s, st_) for b, s, st_ in zip(bufs.bufs[:-1], shapes[:-1], strides[:-1])]
    want = p.compute(ins)
    out = bufs.bufs[-1]
    got = _view(out, shapes[-1], strides[-1]).astype(np.float64)
    assert np.abs(got - want).max() <= 1e-5 * max(1.0, float(np.abs(want).max())), p.name
    written = np.zeros(len(out.view), bool)
    written[_addressed(shapes[-1], strides[-1])] = True
    assert np.isnan(out.view[~written]).all(), "the output was written outside its override"
    for b, before in zip(bufs.bufs[:-1], bufs.before[:-1]):
        assert np.array_equal(b.base, before), "an input was written"


def _run(call: Callable[[], None], corrupted: str | None) -> bool:
    try:
        call()
    except hipdnn.HipdnnError:
        assert corrupted is not None, "a valid override was refused"
        return False
    assert corrupted is None, f"an override with a bad {corrupted} was accepted"
    return True


@pytest.mark.parametrize("name", sorted(PROBLEMS))
@fuzz_settings(80)
@given(data=st.data())
def test_execute_overrides(cpu_handle: hipdnn.Handle, built: dict[str, Problem], name: str, data: Any) -> None:
    p = built[name]
    shapes, strides, corrupted = data.draw(calls(p))
    bufs = Buffers(p, np.random.default_rng(0))
    overrides = {t: hipdnn.OverrideEntry(s, st_) for t, s, st_ in zip(p.tensors, shapes, strides)}
    pack = {t: _stated(b, s, st_) for t, b, s, st_ in zip(p.tensors, bufs.bufs, shapes, strides)}
    ok = _run(lambda: p.graph.execute(cpu_handle, pack, bufs.ws_body, overrides), corrupted)
    _check(p, bufs, shapes, strides, ok)


@pytest.mark.parametrize("name", sorted(PROBLEMS))
@fuzz_settings(80)
@given(data=st.data())
def test_bound_overrides(built: dict[str, Problem], name: str, data: Any) -> None:
    p = built[name]
    shapes, strides, corrupted = data.draw(calls(p))
    bufs = Buffers(p, np.random.default_rng(1))
    ptrs = [b.ptr for b in bufs.bufs]
    ok = _run(lambda: p.bound(ptrs, int(bufs.ws_body.ctypes.data), shapes, strides), corrupted)
    _check(p, bufs, shapes, strides, ok)


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_parallel_array_form_refuses_mismatched_lengths(
    cpu_handle: hipdnn.Handle, built: dict[str, Problem], name: str
) -> None:
    """The parallel-array form with lists of different lengths, an unknown uid or a repeated tensor."""
    p = built[name]
    bufs = Buffers(p, np.random.default_rng(2))
    shapes = [list(m) for m in p.maxima]
    strides = [compact(m) for m in p.maxima]
    # views stating the maxima (what the valid call at the end gives every tensor)
    pack = {t: _stated(b, s, st_) for t, b, s, st_ in zip(p.tensors, bufs.bufs, shapes, strides)}
    unknown = max(t.get_uid() for t in p.tensors) + 1000
    bad_calls: list[tuple[Any, Any, Any]] = [
        (p.tensors, shapes[:-1], strides),
        (p.tensors, shapes, strides[:-1]),
        (p.tensors[:-1], shapes, strides),
        ([*p.tensors[:-1], unknown], shapes, strides),
        ([p.tensors[0]] * len(p.tensors), shapes, strides),
        (p.tensors, [None] * len(p.tensors), strides),
        (p.tensors, shapes, [[2**64] * len(s) for s in strides]),
    ]
    for uids, sh, st_ in bad_calls:
        with pytest.raises(hipdnn.HipdnnError):
            p.graph.execute(cpu_handle, pack, bufs.ws_body, uids, sh, st_)
        assert bufs.unchanged()
    for sh, st_ in ((shapes[:-1], strides), (shapes, strides[:-1]), (shapes, None), ([None] * len(shapes), strides)):
        with pytest.raises(hipdnn.HipdnnError):
            p.bound([b.ptr for b in bufs.bufs], int(bufs.ws_body.ctypes.data), sh, st_)
        assert bufs.unchanged()
    # and the maxima themselves are a valid call
    p.graph.execute(cpu_handle, pack, bufs.ws_body, p.tensors, shapes, strides)
    _check(p, bufs, shapes, strides, True)
