"""Unary pointwise modes, comparisons and the other binary modes of the CPU engine, through the Python
frontend, against float64 numpy references; broadcasting, strided inputs, NaN-prefilled outputs with
guard regions; a multi-node graph (matmul -> bias add -> gelu) as one graph."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hipdnn

PM = hipdnn.PointwiseMode
F32 = hipdnn.DataType.FLOAT
GUARD = 7


@pytest.fixture(scope="module")
def handle() -> Iterator[hipdnn.Handle]:
    h = hipdnn.Handle()
    yield h
    h.close()


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf)(x)


# mode -> (float64 reference, input sampler)
def _any(rng: np.random.Generator, shape: list[int]) -> np.ndarray:
    return rng.uniform(-4, 4, shape)


def _pos(rng: np.random.Generator, shape: list[int]) -> np.ndarray:
    return rng.uniform(0.05, 6, shape)


def _small(rng: np.random.Generator, shape: list[int]) -> np.ndarray:
    return rng.uniform(-1.2, 1.2, shape)


UNARY: dict[PM, tuple[Callable[[np.ndarray], np.ndarray], Callable]] = {
    PM.RELU_FWD: (lambda x: np.maximum(x, 0), _any),
    PM.GELU_FWD: (lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))), _any),
    PM.GELU_APPROX_TANH_FWD: (lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))), _any),
    PM.SIGMOID_FWD: (lambda x: 1 / (1 + np.exp(-x)), _any),
    PM.TANH_FWD: (np.tanh, _any),
    PM.SWISH_FWD: (lambda x: x / (1 + np.exp(-x)), _any),
    PM.EXP: (np.exp, _any),
    PM.LOG: (np.log, _pos),
    PM.SQRT: (np.sqrt, _pos),
    PM.RSQRT: (lambda x: 1 / np.sqrt(x), _pos),
    PM.NEG: (np.negative, _any),
    PM.ABS: (np.abs, _any),
    PM.IDENTITY: (lambda x: x, _any),
    PM.CEIL: (np.ceil, _any),
    PM.FLOOR: (np.floor, _any),
    PM.ERF: (_erf, _any),
    PM.RECIPROCAL: (lambda x: 1 / x, _pos),
    PM.SIN: (np.sin, _any),
    PM.TAN: (np.tan, _small),
    PM.SOFTPLUS_FWD: (lambda x: np.log1p(np.exp(x)), _any),
    PM.ELU_FWD: (lambda x: np.where(x > 0, x, np.expm1(x)), _any),
    PM.LOGICAL_NOT: (lambda x: (x == 0).astype(np.float64), lambda r, s: r.integers(0, 2, s).astype(np.float64)),
}

BINARY: dict[PM, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    PM.ADD: np.add,
    PM.SUB: np.subtract,
    PM.MUL: np.multiply,
    PM.DIV: np.divide,
    PM.MAX_OP: np.maximum,
    PM.MIN_OP: np.minimum,
    PM.ADD_SQUARE: lambda a, b: a + b * b,
    PM.CMP_EQ: lambda a, b: (a == b).astype(np.float64),
    PM.CMP_NEQ: lambda a, b: (a != b).astype(np.float64),
    PM.CMP_GT: lambda a, b: (a > b).astype(np.float64),
    PM.CMP_GE: lambda a, b: (a >= b).astype(np.float64),
    PM.CMP_LT: lambda a, b: (a < b).astype(np.float64),
    PM.CMP_LE: lambda a, b: (a <= b).astype(np.float64),
    PM.LOGICAL_AND: lambda a, b: ((a != 0) & (b != 0)).astype(np.float64),
    PM.LOGICAL_OR: lambda a, b: ((a != 0) | (b != 0)).astype(np.float64),
}


def compact(dims: list[int]) -> list[int]:
    st_ = [1] * len(dims)
    for i in range(len(dims) - 2, -1, -1):
        st_[i] = st_[i + 1] * dims[i + 1]
    return st_


def guarded_out(dims: list[int]) -> tuple[np.ndarray, np.ndarray]:
    n = int(np.prod(dims))
    base = np.full(n + 2 * GUARD, np.nan, np.float32)
    return base, base[GUARD : GUARD + n].reshape(dims)


def run(handle: hipdnn.Handle, mode: PM, arrays: list[np.ndarray], out_dims: list[int]) -> np.ndarray:
    g = hipdnn.Graph(name="pw", io_data_type=F32, intermediate_data_type=F32, compute_data_type=F32)
    ts = [
        g.tensor(name=f"in{i}", dim=list(a.shape), stride=[s // 4 for s in a.strides], data_type=F32)
        for i, a in enumerate(arrays)
    ]
    out = g.pointwise(mode, *ts)
    out.set_output(True).set_dim(out_dims).set_stride(compact(out_dims))
    g.build(handle)
    base, view = guarded_out(out_dims)
    pack = {t: a for t, a in zip(ts, arrays)}
    pack[out] = view
    g.execute(handle, pack, np.empty(max(1, g.get_workspace_size()), np.uint8))
    assert np.isnan(base[:GUARD]).all() and np.isnan(base[GUARD + view.size :]).all(), "guard written"
    return view


def check(got: np.ndarray, want: np.ndarray) -> None:
    assert not np.isnan(got).any() or np.isnan(want).any()
    err = np.abs(got - want) / np.maximum(1.0, np.abs(want))
    assert float(err.max()) < 2e-6, f"max relative error {err.max():.2e}"


@pytest.mark.parametrize("mode", list(UNARY), ids=lambda m: m.name)
def test_unary(handle: hipdnn.Handle, mode: PM) -> None:
    ref, sample = UNARY[mode]
    rng = np.random.default_rng(int(mode))
    # a strided (transposed) input
    x = sample(rng, [5, 7, 33]).astype(np.float32).transpose(0, 2, 1)
    got = run(handle, mode, [x], [5, 33, 7])
    check(got, ref(x.astype(np.float64)))


@pytest.mark.parametrize("mode", list(BINARY), ids=lambda m: m.name)
def test_binary_broadcast(handle: hipdnn.Handle, mode: PM) -> None:
    rng = np.random.default_rng(int(mode) + 100)
    a = rng.integers(-3, 4, [4, 1, 9]).astype(np.float32)
    b = rng.integers(-3, 4, [6, 1]).astype(np.float32)
    if mode == PM.DIV:
        b[b == 0] = 2
    got = run(handle, mode, [a, b], [4, 6, 9])
    check(got, BINARY[mode](a.astype(np.float64), b.astype(np.float64)))


def test_matmul_bias_gelu_one_graph(handle: hipdnn.Handle) -> None:
    """matmul -> bias add -> gelu with virtual intermediates, one graph."""
    rng = np.random.default_rng(7)
    m, k, n = 37, 48, 29
    g = hipdnn.Graph(name="mlp", io_data_type=F32, intermediate_data_type=F32, compute_data_type=F32)
    ta = g.tensor(name="a", dim=[2, m, k], stride=[m * k, k, 1], data_type=F32)
    tw = g.tensor(name="w", dim=[k, n], stride=[n, 1], data_type=F32)
    tb = g.tensor(name="bias", dim=[1, n], stride=[n, 1], data_type=F32)
    y = g.matmul(ta, tw)
    z = g.add(y, tb)
    out = g.pointwise(PM.GELU_FWD, z)
    out.set_output(True).set_dim([2, m, n]).set_stride(compact([2, m, n]))
    g.build(handle)
    a = rng.standard_normal([2, m, k]).astype(np.float32)
    w = rng.standard_normal([k, n]).astype(np.float32)
    b = rng.standard_normal([1, n]).astype(np.float32)
    base, view = guarded_out([2, m, n])
    g.execute(handle, {ta: a, tw: w, tb: b, out: view}, np.empty(max(1, g.get_workspace_size()), np.uint8))
    zz = a.astype(np.float64) @ w.astype(np.float64) + b
    want = 0.5 * zz * (1 + _erf(zz / math.sqrt(2)))
    err = np.abs(view - want).max() / np.abs(want).max()
    assert err < 1e-5
    assert np.isnan(base[:GUARD]).all() and np.isnan(base[GUARD + view.size :]).all()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    mode=st.sampled_from(list(UNARY) + list(BINARY)),
    dims=st.lists(st.integers(1, 9), min_size=1, max_size=4),
    data=st.data(),
)
def test_pointwise_hypothesis(handle: hipdnn.Handle, mode: PM, dims: list[int], data: st.DataObject) -> None:
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    if mode in UNARY:
        ref, sample = UNARY[mode]
        x = sample(rng, dims).astype(np.float32)
        check(run(handle, mode, [x], dims), ref(x.astype(np.float64)))
        return
    bdims = [d if data.draw(st.booleans()) else 1 for d in dims][data.draw(st.integers(0, len(dims) - 1)) :]
    a = rng.integers(-3, 4, dims).astype(np.float32)
    b = rng.integers(-3, 4, bdims or [1]).astype(np.float32)
    if mode == PM.DIV:
        b[b == 0] = 3
    check(run(handle, mode, [a, b], dims), BINARY[mode](a.astype(np.float64), b.astype(np.float64)))
