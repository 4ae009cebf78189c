"""``Binding.call_tensors`` (the bound call for objects that say where they are, as torch tensors do:
``data_ptr()``, ``.shape``, ``.stride()``; hipdnn.torch's per-call path). It computes what the pointer
form computes; it answers False, launching nothing, for a tensor past the plan's declared maximum;
and hostile objects (methods that raise, return the wrong types, mutate the list being read, drop
the other tensors) get a HipdnnError naming the tensor, never a crash, and no write outside the
declared memory (guard bands)."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hipdnn
from hipdnn import reference

F32 = hipdnn.DataType.FLOAT
GUARD = 64
SENTINEL = np.float32(-1234.5)


def compact(dims: list[int]) -> list[int]:
    out = [1] * len(dims)
    for i in range(len(dims) - 2, -1, -1):
        out[i] = out[i + 1] * dims[i + 1]
    return out


class Tensorish:
    """A numpy array seen as torch shows a tensor: data_ptr(), shape (a tuple), stride() in elements."""

    def __init__(self, a: np.ndarray) -> None:
        self.a = a

    def data_ptr(self) -> int:
        return int(self.a.ctypes.data)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.a.shape)

    def stride(self) -> tuple[int, ...]:
        return tuple(s // self.a.itemsize for s in self.a.strides)


class Guarded:
    """A float32 buffer of ``n`` elements between two guard bands of sentinels."""

    def __init__(self, n: int) -> None:
        self.base = np.full(n + 2 * GUARD, SENTINEL, np.float32)
        self.flat = self.base[GUARD : GUARD + n]

    def intact(self) -> bool:
        return bool((self.base[:GUARD] == SENTINEL).all() and (self.base[GUARD + len(self.flat) :] == SENTINEL).all())


@pytest.fixture(scope="module")
def handle() -> Iterator[hipdnn.Handle]:
    h = hipdnn.Handle()
    yield h
    h.close()


S_MAX, H, D = 64, 2, 8


@pytest.fixture(scope="module")
def attention(handle: hipdnn.Handle) -> tuple[Any, np.ndarray]:
    g = hipdnn.Graph(name="attn", io_data_type=F32, is_override_shape_enabled=True)
    dims = [1, H, S_MAX, D]
    ts = [g.tensor(name=n, dim=dims, stride=compact(dims), data_type=F32) for n in "qkv"]
    o, _ = g.sdpa(*ts, attn_scale=0.3, use_causal_mask=True)
    o.set_output(True)
    g.build(handle)
    ws = np.empty(max(g.get_workspace_size(), 1), np.uint8)
    return g.bind(handle, [*ts, o], override_uids=[*ts, o]), ws


def inputs(s: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((1, H, s, D)).astype(np.float32) for _ in range(3)]


@pytest.mark.parametrize("s", [1, 37, 64])
def test_computes_what_the_pointer_form_computes(attention: Any, s: int) -> None:
    bound, ws = attention
    q, k, v = inputs(s, s)
    o = np.full((1, H, s, D), np.nan, np.float32)
    assert bound.call_tensors([Tensorish(a) for a in (q, k, v, o)], ws.ctypes.data) is True
    want, _ = reference.sdpa(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), 0.3, causal=True)
    assert reference.relative_error(o, want) < 1e-5
    o2 = np.full_like(o, np.nan)
    dims = [1, H, s, D]
    bound([a.ctypes.data for a in (q, k, v, o2)], ws.ctypes.data, [dims] * 4, [compact(dims)] * 4)
    assert np.array_equal(o, o2)


def test_a_view_past_the_declared_maximum_is_false_and_launches_nothing(attention: Any) -> None:
    bound, ws = attention
    q, k, v = inputs(8, 1)
    wide = np.random.default_rng(2).standard_normal((1, H, 200, D)).astype(np.float32)[:, :, ::4]  # stride 4 rows
    o = np.full((1, H, 8, D), np.nan, np.float32)
    assert bound.call_tensors([Tensorish(a) for a in (q, wide[:, :, :8], v, o)], ws.ctypes.data) is False
    assert np.isnan(o).all()
    longer = np.zeros((1, H, S_MAX + 1, D), np.float32)
    assert bound.call_tensors([Tensorish(a) for a in (q, longer, longer, o)], ws.ctypes.data) is False
    assert np.isnan(o).all()


class Raising(Tensorish):
    def data_ptr(self) -> int:
        raise RuntimeError("boom")


class BadShape(Tensorish):
    @property
    def shape(self) -> Any:
        return [1, H, 8, D]  # a list: torch's shape is a tuple


class FloatStride(Tensorish):
    def stride(self) -> Any:
        return (1.0, 2, 3, 4)


class Pointer(Tensorish):
    def __init__(self, a: np.ndarray, value: Any) -> None:
        super().__init__(a)
        self.value = value

    def data_ptr(self) -> Any:
        return self.value


@pytest.mark.parametrize(
    ("make", "fragment"),
    [
        (lambda a: Raising(a), "data_ptr() failed (RuntimeError: boom)"),
        (lambda a: object(), "data_ptr() failed (AttributeError"),
        (lambda a: BadShape(a), "shape is [1, 2, 8, 8], not a tuple of ints"),
        (lambda a: FloatStride(a), "stride() is (1.0, 2, 3, 4), not a tuple of ints"),
        (lambda a: Pointer(a, 0), "(not an address)"),
        (lambda a: Pointer(a, a.ctypes.data + 1), "(not aligned to its 4-byte elements)"),
        (lambda a: Pointer(a, "0x10"), "(not an int)"),
        (lambda a: Pointer(a, 2**70), "(not an address)"),
    ],
)
def test_hostile_objects_are_hipdnn_errors_naming_the_tensor(attention: Any, make: Any, fragment: str) -> None:
    bound, ws = attention
    q, k, v = inputs(8, 3)
    o = Guarded(H * 8 * D)
    o_view = o.flat.reshape(1, H, 8, D)
    with pytest.raises(hipdnn.HipdnnError) as err:
        bound.call_tensors([Tensorish(q), make(k), Tensorish(v), Tensorish(o_view)], ws.ctypes.data)
    assert err.value.code is hipdnn.ErrorCode.INVALID_VARIANT_PACK, str(err.value)
    assert fragment in err.value.message and "tensor 'k'" in err.value.message, err.value.message
    assert o.intact() and (o.flat == SENTINEL).all()  # nothing written, inside or out


def test_wrong_counts_and_workspaces(attention: Any) -> None:
    bound, ws = attention
    q, k, v = inputs(8, 4)
    o = np.zeros((1, H, 8, D), np.float32)
    with pytest.raises(hipdnn.HipdnnError, match="expected 4 tensors, got 3"):
        bound.call_tensors([Tensorish(a) for a in (q, k, v)], ws.ctypes.data)
    with pytest.raises(hipdnn.HipdnnError, match="sequence of tensors"):
        bound.call_tensors("qkvo", ws.ctypes.data)
    with pytest.raises(hipdnn.HipdnnError, match="workspace is an int pointer"):
        bound.call_tensors([Tensorish(a) for a in (q, k, v, o)], "ws")
    with pytest.raises(TypeError):
        bound.call_tensors()


class Mutator(Tensorish):
    """Empties the caller's list and drops every other tensor while the core reads it."""

    def __init__(self, a: np.ndarray, victims: list[Any]) -> None:
        super().__init__(a)
        self.victims = victims

    def data_ptr(self) -> int:
        self.victims.clear()
        gc.collect()
        return super().data_ptr()


def test_a_list_emptied_while_it_is_read_changes_nothing(attention: Any) -> None:
    """The core reads a private snapshot: the caller's list (and the objects only it held) stay alive
    for the whole call, whatever a tensor's methods do to it."""
    bound, ws = attention
    q, k, v = inputs(16, 5)
    want, _ = reference.sdpa(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), 0.3, causal=True)
    values: list[Any] = []
    values += [Mutator(q, values), Tensorish(k.copy()), Tensorish(v.copy())]
    out = np.full((1, H, 16, D), np.nan, np.float32)
    values.append(Tensorish(out))
    del k, v
    assert bound.call_tensors(values, ws.ctypes.data) is True
    assert values == []
    assert reference.relative_error(out, want) < 1e-5


@settings(max_examples=120, deadline=None)
@given(data=st.data())
def test_random_shapes_and_strides_never_write_outside_the_output(attention: Any, data: Any) -> None:
    """Random shapes and strides (valid or not) for every tensor, the output between guard bands sized
    at its declared maximum: each call runs, answers False, or raises HipdnnError; the guards hold."""
    bound, ws = attention
    extent = H * S_MAX * D
    out = Guarded(extent)
    bufs = [np.random.default_rng(6).standard_normal(extent).astype(np.float32) for _ in range(3)]

    class Drawn(Tensorish):
        def __init__(self, flat: np.ndarray, shape: tuple[int, ...], stride: tuple[int, ...]) -> None:
            super().__init__(flat)
            self._shape, self._stride = shape, stride

        @property
        def shape(self) -> tuple[int, ...]:
            return self._shape

        def stride(self) -> tuple[int, ...]:
            return self._stride

    dim = st.integers(-1, S_MAX + 2)
    stride = st.one_of(st.integers(-2, 700), st.sampled_from([2**31, 2**62, 2**63 - 1]))
    values = []
    for flat in (*bufs, out.flat):
        shape = (data.draw(st.integers(0, 2)), data.draw(st.integers(0, H + 1)), data.draw(dim), D)
        strides = tuple(data.draw(stride) for _ in range(3)) + (1,)
        values.append(Drawn(flat, shape, strides))
    with contextlib.suppress(hipdnn.HipdnnError):
        bound.call_tensors(values, ws.ctypes.data)
    assert out.intact()
