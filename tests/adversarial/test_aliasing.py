"""Aliasing (issue #16): memory a node writes may not be shared with any other tensor of the call.

No op is documented as safe in place, so the execute core refuses, on ``Graph.execute`` and the bound
call, any call where a node's output (or the workspace) overlaps another tensor's memory: the range
from its pointer to the last byte its shape and strides address (a bare int pointer is trusted to
span exactly that). Inputs may share memory with each other. An output's own strides may not map
two indices to one element: refused at validation for declared strides and at execute for
override strides; inputs keep any strides (a sliding window reads elements twice).

The overlap predicate is checked against a brute-force enumeration with hypothesis, and the core's
range check against a Python model of it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import hipdnn
from hipdnn import DataType, ErrorCode, Graph, HipdnnError, OverrideEntry, PointwiseMode, TensorAttributes
from hipdnn.backend.execute_core import strides_overlap

from .conftest import fuzz_settings

F = DataType.FLOAT


def ptr(a: np.ndarray) -> int:
    return int(a.ctypes.data)


def expect_alias(exc: pytest.ExceptionInfo[HipdnnError], *names: str) -> None:
    assert exc.value.code is ErrorCode.INVALID_VARIANT_PACK, str(exc.value)
    assert "overlaps" in exc.value.message and "in-place execution is not supported" in exc.value.message
    for name in names:
        assert f"'{name}'" in exc.value.message, exc.value.message


def relu_graph(
    dims: Sequence[int] = (4, 8), overridable: bool = True
) -> tuple[Graph, TensorAttributes, TensorAttributes]:
    g = Graph(name="relu", io_data_type=F, is_override_shape_enabled=overridable)
    strides = [math.prod(dims[i + 1 :]) for i in range(len(dims))]
    x = g.tensor(name="x", dim=list(dims), stride=strides, data_type=F)
    y = g.pointwise(PointwiseMode.RELU_FWD, x, name="relu")
    y.set_name("y").set_output(True)
    return g, x, y


@pytest.fixture(scope="module")
def relu(cpu_handle: hipdnn.Handle) -> tuple[hipdnn.Handle, Graph, TensorAttributes, TensorAttributes]:
    g, x, y = relu_graph()
    g.build(cpu_handle)
    return cpu_handle, g, x, y


# -- Graph.execute -----------------------------------------------------------------------------------
def test_the_same_array_as_input_and_output_is_refused(relu: Any) -> None:
    h, g, x, y = relu
    a = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    before = a.copy()
    with pytest.raises(HipdnnError) as exc:
        g.execute(h, {x: a, y: a})
    expect_alias(exc, "x", "y")
    np.testing.assert_array_equal(a, before)  # refused before the engine ran


def test_overlapping_views_are_refused_and_adjacent_ones_run(relu: Any) -> None:
    h, g, x, y = relu
    arena = np.random.default_rng(1).standard_normal(80).astype(np.float32)
    with pytest.raises(HipdnnError) as exc:  # y starts on x's last element
        g.execute(h, {x: arena[:32].reshape(4, 8), y: arena[31:63].reshape(4, 8)})
    expect_alias(exc, "x", "y")
    g.execute(h, {x: arena[:32].reshape(4, 8), y: arena[32:64].reshape(4, 8)})
    np.testing.assert_array_equal(arena[32:64], np.maximum(arena[:32], 0))


def test_bare_pointers_span_what_their_tensor_addresses(relu: Any) -> None:
    h, g, x, y = relu
    arena = np.zeros(64, np.float32)
    with pytest.raises(HipdnnError) as exc:
        g.execute(h, {x: ptr(arena), y: ptr(arena) + 4 * 31})
    expect_alias(exc, "x", "y")
    with pytest.raises(HipdnnError) as exc:  # a sized input against a bare output pointer
        g.execute(h, {x: arena[:32].reshape(4, 8), y: ptr(arena) + 4})
    expect_alias(exc, "x", "y")
    arena[:32] = np.arange(-16, 16)
    g.execute(h, {x: ptr(arena), y: ptr(arena) + 4 * 32})
    np.testing.assert_array_equal(arena[32:], np.maximum(arena[:32], 0))


def test_override_extents_decide(relu: Any) -> None:
    """With overrides, a tensor spans what it addresses at this call's shape and strides."""
    h, g, x, y = relu
    arena = np.zeros(64, np.float32)
    small = {t: OverrideEntry([2, 4], [4, 1]) for t in (x, y)}  # 8 elements each
    g.execute(h, {x: ptr(arena), y: ptr(arena) + 4 * 8}, None, small)
    with pytest.raises(HipdnnError) as exc:
        g.execute(h, {x: ptr(arena), y: ptr(arena) + 4 * 7}, None, small)
    expect_alias(exc, "x", "y")
    padded = {x: OverrideEntry([2, 4], [8, 1]), y: OverrideEntry([2, 4], [4, 1])}  # x spans 12 elements
    with pytest.raises(HipdnnError) as exc:
        g.execute(h, {x: ptr(arena), y: ptr(arena) + 4 * 8}, None, padded)
    expect_alias(exc, "x", "y")


def test_two_outputs_may_not_share_memory(cpu_handle: hipdnn.Handle) -> None:
    g = Graph(io_data_type=F)
    x = g.tensor(name="x", dim=[4, 8], stride=[8, 1], data_type=F)
    a = g.pointwise(PointwiseMode.RELU_FWD, x, name="a")
    b = g.pointwise(PointwiseMode.NEG, x, name="b")
    a.set_name("a").set_output(True)
    b.set_name("b").set_output(True)
    g.build(cpu_handle)
    xs = np.ones((4, 8), np.float32)
    out = np.zeros((4, 8), np.float32)
    with pytest.raises(HipdnnError) as exc:
        g.execute(cpu_handle, {x: xs, a: out, b: out})
    expect_alias(exc, "a", "b")
    other = np.zeros((4, 8), np.float32)
    g.execute(cpu_handle, {x: xs, a: out, b: other})
    np.testing.assert_array_equal(out, 1)
    np.testing.assert_array_equal(other, -1)


def test_inputs_may_share_memory(cpu_handle: hipdnn.Handle) -> None:
    """x + x and matmul(a, a) read one buffer twice: nothing is written there."""
    g = Graph(io_data_type=F)
    a = g.tensor(name="a", dim=[4, 4], stride=[4, 1], data_type=F)
    b = g.tensor(name="b", dim=[4, 4], stride=[4, 1], data_type=F)
    s = g.add(a, b)
    s.set_output(True)
    g.build(cpu_handle)
    one = np.arange(16, dtype=np.float32).reshape(4, 4)
    out = np.zeros((4, 4), np.float32)
    g.execute(cpu_handle, {a: one, b: one, s: out})
    np.testing.assert_array_equal(out, 2 * one)


def test_a_workspace_overlapping_a_tensor_is_refused(cpu_handle: hipdnn.Handle) -> None:
    g = Graph(io_data_type=F)
    x = g.tensor(name="x", dim=[4, 64], stride=[64, 1], data_type=F)
    y = g.pointwise(PointwiseMode.EXP, g.pointwise(PointwiseMode.RELU_FWD, x))
    y.set_name("y").set_output(True)
    g.build(cpu_handle)
    size = g.get_workspace_size()
    if size == 0:
        pytest.skip("the CPU engine needs no workspace for this graph")
    # x's array is the head of an allocation holding the whole workspace, so that the workspace at
    # x's pointer meets x alone (not y, wherever the allocator puts it)
    xs = np.zeros(256 + size // 4 + 1, np.float32)[:256].reshape(4, 64)
    ys = np.zeros(256 + size // 4 + 1, np.float32)[:256].reshape(4, 64)  # the same for y below
    with pytest.raises(HipdnnError) as exc:
        g.execute(cpu_handle, {x: xs, y: ys}, ptr(xs))
    assert exc.value.code is ErrorCode.INVALID_VARIANT_PACK and "the workspace" in exc.value.message
    assert "'x'" in exc.value.message
    bound = g.bind(cpu_handle, [x, y])
    with pytest.raises(HipdnnError) as exc:
        bound([ptr(xs), ptr(ys)], ptr(ys))
    assert "the workspace" in exc.value.message and "'y'" in exc.value.message
    ws = np.zeros(size, np.uint8)
    g.execute(cpu_handle, {x: xs, y: ys}, ws)
    bound([ptr(xs), ptr(ys)], ptr(ws))


# -- the bound call --------------------------------------------------------------------------------
def test_bound_call_refuses_aliases(relu: Any) -> None:
    h, g, x, y = relu
    arena = np.zeros(80, np.float32)
    plain = g.bind(h, [x, y])
    with pytest.raises(HipdnnError) as exc:
        plain([ptr(arena), ptr(arena)])
    expect_alias(exc, "x", "y")
    with pytest.raises(HipdnnError) as exc:  # declared maximum: 32 elements from each pointer
        plain([ptr(arena) + 4 * 31, ptr(arena)])
    expect_alias(exc, "x", "y")
    plain([ptr(arena), ptr(arena) + 4 * 32])
    over = g.bind(h, [y, x], override_uids=[x, y])  # pointer order need not be graph order
    shapes, strides = [[2, 4], [2, 4]], [[4, 1], [4, 1]]
    over([ptr(arena) + 4 * 8, ptr(arena)], 0, shapes, strides)  # 8 elements each at this call
    with pytest.raises(HipdnnError) as exc:
        over([ptr(arena) + 4 * 7, ptr(arena)], 0, shapes, strides)
    expect_alias(exc, "x", "y")
    with pytest.raises(HipdnnError) as exc:  # no override values: the declared maximum again
        over([ptr(arena) + 4 * 8, ptr(arena)])
    expect_alias(exc, "x", "y")


# -- overlapping strides of outputs ----------------------------------------------------------------
def test_declared_output_strides_that_overlap_are_refused_at_validation() -> None:
    g, x, y = relu_graph()
    y.set_stride([1, 1])
    with pytest.raises(HipdnnError) as exc:
        g.validate()
    assert exc.value.code is ErrorCode.INVALID_VALUE
    assert "'y'" in exc.value.message and "[1, 1]" in exc.value.message and "'relu'" in exc.value.message
    for ok in ([8, 1], [1, 4], [16, 2], [9, 1]):  # row-major, column-major, padded
        y.set_stride(ok)
        g.validate()


def test_declared_input_strides_may_overlap() -> None:
    """A sliding window reads elements twice: an input keeps such strides."""
    g, x, y = relu_graph()
    x.set_stride([1, 1])
    g.validate()


def test_override_strides_of_an_output_that_overlap_are_refused(relu: Any) -> None:
    h, g, x, y = relu
    xs, ys = np.zeros((4, 8), np.float32), np.zeros(64, np.float32)
    bad = {x: OverrideEntry([4, 8], [8, 1]), y: OverrideEntry([4, 8], [2, 1])}  # rule 8 holds, rows meet
    with pytest.raises(HipdnnError) as exc:
        g.execute(h, {x: xs, y: ptr(ys)}, None, bad)
    assert exc.value.code is ErrorCode.INVALID_VALUE
    assert "'y'" in exc.value.message and "[2, 1]" in exc.value.message and "one address" in exc.value.message
    bound = g.bind(h, [x, y], override_uids=[x, y])
    with pytest.raises(HipdnnError) as exc:
        bound([ptr(xs), ptr(ys)], 0, [[4, 8], [4, 8]], [[8, 1], [2, 1]])
    assert "one address" in exc.value.message
    # the same overlapping strides on the input are a legitimate (if odd) read
    g.execute(h, {x: ptr(ys), y: ptr(xs)}, None, {x: OverrideEntry([4, 8], [2, 1]), y: OverrideEntry([4, 8], [8, 1])})


# -- the predicate against brute force -------------------------------------------------------------
def collides(dims: Sequence[int], strides: Sequence[int]) -> bool:
    """Brute force: do two distinct indices reach one offset?"""
    offsets = [sum(i * s for i, s in zip(idx, strides)) for idx in itertools.product(*(range(d) for d in dims))]
    return len(set(offsets)) < len(offsets)


@st.composite
def layouts(draw: Any) -> tuple[list[int], list[int]]:
    rank = draw(st.integers(1, 4))
    dims = draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank))
    strides = draw(st.lists(st.integers(0, 14), min_size=rank, max_size=rank))
    return dims, strides


@st.composite
def nested_layouts(draw: Any) -> tuple[list[int], list[int]]:
    """Compact strides in any axis order, each axis padded: the layouts real tensors use."""
    rank = draw(st.integers(1, 4))
    dims = draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank))
    order = draw(st.permutations(range(rank)))
    strides = [0] * rank
    step = draw(st.integers(1, 3))
    for axis in reversed(order):
        strides[axis] = step
        step = step * dims[axis] + draw(st.integers(0, 3))
    return dims, strides


@fuzz_settings(400)
@given(layouts())
def test_overlap_predicate_never_passes_a_colliding_layout(layout: tuple[list[int], list[int]]) -> None:
    dims, strides = layout
    if collides(dims, strides):
        assert strides_overlap(dims, strides)
    if not strides_overlap(dims, strides):
        assert not collides(dims, strides)


@fuzz_settings(200)
@given(nested_layouts())
def test_overlap_predicate_passes_every_nested_layout(layout: tuple[list[int], list[int]]) -> None:
    dims, strides = layout
    assert not collides(dims, strides)
    assert not strides_overlap(dims, strides)


def test_overlap_predicate_examples() -> None:
    assert strides_overlap([4, 4], [1, 1])
    assert strides_overlap([2, 3], [0, 1])  # a broadcast: fine to read, not to write
    assert not strides_overlap([4, 1], [1, 1])  # size-1 axes address nothing more
    assert not strides_overlap([4, 4], [4, 1]) and not strides_overlap([4, 4], [1, 4])
    # conservative on interleavings: offsets 0, 3, 2, 5, 4, 7 never meet, yet it is refused
    assert not collides([3, 2], [2, 3]) and strides_overlap([3, 2], [2, 3])


@st.composite
def output_overrides(draw: Any) -> tuple[list[int], list[int]]:
    """An override of y (declared [3, 4, 4], row-major) that keeps rule 8's order: any positive
    strides, non-increasing from the outer axis (size-1 axes free)."""
    shape = [draw(st.integers(1, d)) for d in (3, 4, 4)]
    strides = [0, 0, 0]
    previous = 40
    for axis in range(3):
        strides[axis] = draw(st.integers(1, previous))
        if shape[axis] > 1:
            previous = strides[axis]
    return shape, strides


@pytest.fixture(scope="module")
def relu3(cpu_handle: hipdnn.Handle) -> tuple[hipdnn.Handle, Graph, TensorAttributes, TensorAttributes]:
    g, x, y = relu_graph((3, 4, 4))
    g.build(cpu_handle)
    return cpu_handle, g, x, y


@fuzz_settings(150)
@given(layout=output_overrides())
def test_execute_refuses_exactly_what_the_predicate_refuses(relu3: Any, layout: tuple[list[int], list[int]]) -> None:
    """Through Graph.execute, on override strides of an output: refused iff the predicate says so,
    and never a colliding layout let through (then the engine really writes: results are checked)."""
    h, g, x, y = relu3
    shape, strides = layout
    xs = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    ys = np.zeros(256, np.float32)  # holds any of these layouts
    overrides = {x: OverrideEntry(shape, [shape[1] * shape[2], shape[2], 1]), y: OverrideEntry(shape, strides)}
    if strides_overlap(shape, strides):
        with pytest.raises(HipdnnError) as exc:
            g.execute(h, {x: xs, y: ptr(ys)}, None, overrides)
        assert "one address" in exc.value.message
        return
    assert not collides(shape, strides)
    g.execute(h, {x: xs, y: ptr(ys)}, None, overrides)
    view = np.lib.stride_tricks.as_strided(ys, shape, [4 * s for s in strides])
    np.testing.assert_array_equal(view, np.maximum(xs, 0))


# -- the range check against a model, few tensors (pairwise) and many (sorted sweep) --------------
def fan_graph(outputs: int) -> tuple[Graph, TensorAttributes, list[TensorAttributes]]:
    g = Graph(io_data_type=F)
    x = g.tensor(name="x", dim=[4], stride=[1], data_type=F)
    outs = []
    for i in range(outputs):
        o = g.pointwise(PointwiseMode.NEG, x, name=f"n{i}")
        o.set_name(f"o{i}").set_output(True)
        outs.append(o)
    return g, x, outs


@pytest.fixture(scope="module", params=[2, 12], ids=["pairwise", "sweep"])
def fan(request: Any, cpu_handle: hipdnn.Handle) -> tuple[hipdnn.Handle, Graph, TensorAttributes, list[Any]]:
    g, x, outs = fan_graph(request.param)
    g.build(cpu_handle)
    return cpu_handle, g, x, outs


@fuzz_settings(150)
@given(data=st.data())
def test_range_check_matches_a_model(fan: Any, data: Any) -> None:
    """Each tensor (4 floats) at a drawn element offset in one arena: the call is refused iff some
    output's 16 bytes meet another tensor's, on execute and on the bound call alike."""
    h, g, x, outs = fan
    tensors = [x, *outs]
    offsets = data.draw(st.lists(st.integers(0, 8 * len(tensors)), min_size=len(tensors), max_size=len(tensors)))
    written = [False] + [True] * len(outs)
    clash = any(
        (written[i] or written[j]) and abs(offsets[i] - offsets[j]) < 4
        for i in range(len(tensors))
        for j in range(i + 1, len(tensors))
    )
    arena = np.zeros(8 * len(tensors) + 8, np.float32)
    base = ptr(arena)
    vp = {t: base + 4 * off for t, off in zip(tensors, offsets)}
    bound = g.bind(h, tensors)
    for call in (lambda: g.execute(h, vp), lambda: bound(list(vp.values()))):
        if clash:
            with pytest.raises(HipdnnError) as exc:
                call()
            assert exc.value.code is ErrorCode.INVALID_VARIANT_PACK and "overlaps" in exc.value.message
        else:
            call()
