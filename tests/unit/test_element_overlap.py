"""The aliasing rule's exact test (extent.cpp: layouts_meet) against brute force: two strided
layouts share a byte exactly when the sets of bytes their elements cover intersect."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from hipdnn.backend import _execute_core as core


def covered(ptr: int, itemsize: int, dims: list[int], strides: list[int]) -> set[int]:
    out: set[int] = set()
    for idx in itertools.product(*(range(d) for d in dims)):
        start = ptr + itemsize * sum(i * s for i, s in zip(idx, strides))
        out.update(range(start, start + itemsize))
    return out


@st.composite
def layout(draw: st.DrawFn) -> tuple[int, int, list[int], list[int]]:
    rank = draw(st.integers(1, 3))
    dims = draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank))
    strides = draw(st.lists(st.integers(1, 24), min_size=rank, max_size=rank))
    return draw(st.integers(0, 96)), draw(st.sampled_from([1, 2, 4])), dims, strides


@settings(max_examples=600, deadline=None)
@given(layout(), layout())
def test_matches_brute_force(
    a: tuple[int, int, list[int], list[int]], b: tuple[int, int, list[int], list[int]]
) -> None:
    want = bool(covered(*a) & covered(*b))
    assert core.elements_meet(*a, *b) is want


def test_packed_gradients_are_disjoint() -> None:
    """dQ, dK, dV interleaved in one [B, S, 3, H, D] float32 buffer, seen as BHSD views."""
    b, s, h, d = 2, 37, 3, 8
    strides = [s * 3 * h * d, d, 3 * h * d, 1]
    dims = [b, h, s, d]
    base = 1 << 20
    views = [(base + 4 * i * h * d, 4, dims, strides) for i in range(3)]
    for x, y in itertools.combinations(views, 2):
        assert not core.elements_meet(*x, *y)
    shifted = (base + 4, 4, dims, strides)  # one element further: shares bytes with dQ
    assert core.elements_meet(*views[0], *shifted)
    assert core.elements_meet(*views[1], *views[1])


def test_large_layouts_are_decided_quickly() -> None:
    """Realistic sizes (no brute force possible): a KV cache's K and V halves, heads interleaved."""
    b, s, h, d = 8, 1 << 16, 32, 128
    strides = [s * 2 * h * d, d, 2 * h * d, 1]
    k = (1 << 30, 2, [b, h, s, d], strides)
    v = ((1 << 30) + 2 * h * d, 2, [b, h, s, d], strides)
    assert not core.elements_meet(*k, *v)
    assert core.elements_meet(*k, (1 << 30) + 2 * (h * d + 5), 2, [b, h, s, d], strides)
