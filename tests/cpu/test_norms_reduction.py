"""RMSNorm / LayerNorm forward and reductions on the CPU engine against float64 references from the
definitions (hipdnn.reference), plus multi-node graphs (norm -> matmul, matmul -> bias add -> gelu).
Outputs are NaN-filled with guard regions: every element must be written, nothing around touched."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hipdnn
from hipdnn import reference as ref
from tests.cpu.test_sdpa_modes import guarded, untouched_outside

DT = hipdnn.DataType
RM = hipdnn.ReductionMode
TOL = 1e-5


@pytest.fixture(scope="module")
def handle() -> Iterator[hipdnn.Handle]:
    h = hipdnn.Handle()
    yield h
    h.close()


def compact(dims: list[int]) -> list[int]:
    out, step = [0] * len(dims), 1
    for i in reversed(range(len(dims))):
        out[i] = step
        step *= dims[i]
    return out


def rel(got: np.ndarray, want: np.ndarray) -> float:
    return ref.relative_error(got, want)


def run_norm(
    handle,
    kind: str,
    dims: list[int],
    count: int,
    scale: bool,
    bias: bool,
    training: bool,
    eps: float,
    seed: int,
    eps_tensor: bool = False,
    explicit: bool = False,
    transposed: bool = False,
) -> None:
    rng = np.random.default_rng(seed)
    g = hipdnn.Graph(io_data_type=DT.FLOAT)
    xs = compact(dims)
    if transposed and len(dims) >= 2:  # swap the memory order of the first and last axes
        xs = compact(dims[::-1])[::-1]
    x = g.tensor("x", dims, xs)
    pdims = [1] * (len(dims) - count) + dims[len(dims) - count :]
    ts = g.tensor("scale", pdims, compact(pdims)) if scale else None
    tb = g.tensor("bias", pdims, compact(pdims)) if bias else None
    te = g.tensor("eps", [1, 1], [1, 1]) if eps_tensor else None
    phase = hipdnn.NormFwdPhase.TRAINING if training else hipdnn.NormFwdPhase.INFERENCE
    kw = dict(
        epsilon=te if eps_tensor else eps,
        norm_forward_phase=phase,
        normalized_dim_count=count if (explicit or not (scale or bias)) else None,
    )
    if kind == "rms":
        y, *stats = g.rmsnorm(x, ts, tb, **kw)
    else:
        y, *stats = g.layernorm(x, ts, tb, **kw)
    y.set_output(True)
    for s in stats:
        if s is not None:
            s.set_output(True)
    g.build(handle)
    xv = rng.standard_normal(dims).astype(np.float32) * 3 + 0.5
    sv = rng.standard_normal(pdims).astype(np.float32)
    bv = rng.standard_normal(pdims).astype(np.float32)
    _, xview = guarded(dims, xs, np.dtype(np.float32), xv)
    pack = {x: xview}
    if scale:
        pack[ts] = sv
    if bias:
        pack[tb] = bv
    if eps_tensor:
        pack[te] = np.full((1, 1), eps, np.float32)
    ybase, yview = guarded(dims, y.get_stride(), np.dtype(np.float32))
    pack[y] = yview
    sbufs = []
    for s in stats:
        if s is not None:
            b, v = guarded(s.get_dim(), s.get_stride(), np.dtype(np.float32))
            pack[s] = v
            sbufs.append((b, v))
    ws = np.empty(max(1, g.get_workspace_size()), np.uint8)
    g.execute(handle, pack, ws)
    e32 = float(np.float32(eps))
    args = (xv, count, e32, sv if scale else None, bv if bias else None)
    want = ref.rmsnorm(*args) if kind == "rms" else ref.layernorm(*args)
    assert untouched_outside(ybase, yview)
    assert rel(np.array(yview), want[0]) < TOL
    if training:
        assert len(sbufs) == len(want) - 1
        for (b, v), w in zip(sbufs, want[1:]):
            assert untouched_outside(b, v)
            assert rel(np.array(v), w) < TOL


NORM_CASES = {
    "rms_plain": ("rms", [4, 37], 1, True, False, True),
    "rms_bias": ("rms", [2, 3, 129], 1, True, True, True),
    "rms_noaffine": ("rms", [5, 1, 64], 2, False, False, True),
    "ln_plain": ("ln", [3, 37], 1, True, True, True),
    "ln_two_axes": ("ln", [2, 5, 7, 9], 2, True, True, True),
    "ln_inference": ("ln", [129, 16], 1, True, False, False),
    "ln_noaffine_all_axes": ("ln", [3, 4, 5], 3, False, False, True),
    "ln_one_elem": ("ln", [6, 1], 1, False, False, True),
}


@pytest.mark.parametrize("name", list(NORM_CASES))
def test_norm_cases(handle, name: str) -> None:
    kind, dims, count, scale, bias, training = NORM_CASES[name]
    run_norm(handle, kind, dims, count, scale, bias, training, 1e-5, seed=len(name))


@pytest.mark.parametrize("kind", ["rms", "ln"])
def test_norm_epsilon_tensor_and_layout(handle, kind: str) -> None:
    run_norm(handle, kind, [7, 3, 33], 1, True, True, True, 0.25, seed=3, eps_tensor=True, transposed=True)
    run_norm(handle, kind, [7, 3, 33], 2, True, False, True, 1e-3, seed=4, explicit=True)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    dims=st.lists(st.sampled_from([1, 2, 3, 7, 37, 64, 129]), min_size=1, max_size=4),
    data=st.data(),
    kind=st.sampled_from(["rms", "ln"]),
    scale=st.booleans(),
    bias=st.booleans(),
    training=st.booleans(),
    transposed=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_norm_hypothesis(handle, dims, data, kind, scale, bias, training, transposed, seed) -> None:
    count = data.draw(st.integers(1, len(dims)))
    run_norm(handle, kind, dims, count, scale, bias, training, 1e-5, seed, explicit=True, transposed=transposed)


def test_norm_rejects_bad_scale() -> None:
    g = hipdnn.Graph()
    x = g.tensor("x", [4, 8], [8, 1])
    s = g.tensor("s", [4, 1], [1, 1])
    y, _ = g.rmsnorm(x, s, normalized_dim_count=1)
    y.set_output(True)
    with pytest.raises(hipdnn.HipdnnError, match="not normalized"):
        g.validate()


# ------------------------------------------------------------------------------------------ reduction
def run_reduction(
    handle,
    dims: list[int],
    axes: list[int],
    mode: RM,
    seed: int,
    transposed: bool = False,
    via_output_dims: bool = False,
) -> None:
    rng = np.random.default_rng(seed)
    g = hipdnn.Graph(io_data_type=DT.FLOAT)
    xs = compact(dims[::-1])[::-1] if transposed else compact(dims)
    x = g.tensor("x", dims, xs)
    if via_output_dims:
        y = g.reduction(x, mode)
        y.set_dim([1 if i in axes else d for i, d in enumerate(dims)])
    else:
        y = g.reduction(x, mode, axes=axes)
    y.set_output(True)
    g.build(handle)
    xv = rng.standard_normal(dims).astype(np.float32)
    if mode in (RM.MUL, RM.MUL_NO_ZEROS):
        xv = (np.sign(xv) * rng.uniform(0.8, 1.25, dims)).astype(np.float32)
        if mode == RM.MUL_NO_ZEROS:
            xv[rng.random(dims) < 0.2] = 0.0
    _, xview = guarded(dims, xs, np.dtype(np.float32), xv)
    ybase, yview = guarded(y.get_dim(), y.get_stride(), np.dtype(np.float32))
    ws = np.empty(max(1, g.get_workspace_size()), np.uint8)
    g.execute(handle, {x: xview, y: yview}, ws)
    want = ref.reduction(xv, int(mode), tuple(axes))
    assert untouched_outside(ybase, yview)
    assert list(yview.shape) == list(want.shape)
    assert rel(np.array(yview), want) < TOL, (mode, dims, axes)


@pytest.mark.parametrize("mode", list(dict.fromkeys(RM)))
def test_reduction_modes(handle, mode: RM) -> None:
    run_reduction(handle, [3, 37, 5], [1], mode, seed=int(mode))
    run_reduction(handle, [2, 1, 129], [0, 2], mode, seed=int(mode) + 1, transposed=True)


def test_reduction_all_and_output_dims(handle) -> None:
    run_reduction(handle, [37, 129], [0, 1], RM.ADD, seed=1)
    run_reduction(handle, [4, 6, 8], [0, 2], RM.AVG, seed=2, via_output_dims=True)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    dims=st.lists(st.sampled_from([1, 2, 3, 7, 37, 129]), min_size=1, max_size=4),
    data=st.data(),
    mode=st.sampled_from([RM.ADD, RM.MAX, RM.AVG, RM.MIN, RM.AMAX, RM.NORM2]),
    transposed=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_reduction_hypothesis(handle, dims, data, mode, transposed, seed) -> None:
    axes = data.draw(st.lists(st.integers(0, len(dims) - 1), min_size=1, unique=True))
    run_reduction(handle, dims, sorted(axes), mode, seed, transposed)


def test_reduction_with_overrides(handle) -> None:
    g = hipdnn.Graph(io_data_type=DT.FLOAT, is_override_shape_enabled=True)
    x = g.tensor("x", [8, 64], [64, 1])
    y = g.reduction(x, RM.MAX, axes=[1])
    y.set_output(True)
    g.build(handle)
    rng = np.random.default_rng(0)
    xv = rng.standard_normal((5, 40)).astype(np.float32)
    out = np.full((5, 1), np.nan, np.float32)
    ws = np.empty(max(1, g.get_workspace_size()), np.uint8)
    g.execute(
        handle,
        {x: xv, y: out},
        ws,
        override_uids=[x, y],
        override_shapes=[[5, 40], [5, 1]],
        override_strides=[[40, 1], [1, 1]],
    )
    assert rel(out, xv.max(axis=1, keepdims=True)) < TOL


# ------------------------------------------------------------------------------------ multi-node graphs
@pytest.mark.parametrize("kind", ["rms", "ln"])
def test_norm_then_matmul(handle, kind: str) -> None:
    rng = np.random.default_rng(5)
    b, s, d, n = 2, 37, 64, 48
    g = hipdnn.Graph(io_data_type=DT.FLOAT, intermediate_data_type=DT.FLOAT)
    x = g.tensor("x", [b, s, d], compact([b, s, d]))
    sc = g.tensor("scale", [1, 1, d], [d, d, 1])
    w = g.tensor("w", [1, d, n], [d * n, n, 1])
    if kind == "rms":
        h, _ = g.rmsnorm(x, sc, epsilon=1e-6)
    else:
        h, _, _ = g.layernorm(x, sc, epsilon=1e-6)
    out = g.matmul(h, w)
    out.set_output(True)
    g.build(handle)
    xv = rng.standard_normal((b, s, d)).astype(np.float32)
    sv = rng.standard_normal((1, 1, d)).astype(np.float32)
    wv = rng.standard_normal((1, d, n)).astype(np.float32)
    obase, oview = guarded([b, s, n], out.get_stride(), np.dtype(np.float32))
    ws = np.empty(max(1, g.get_workspace_size()), np.uint8)
    g.execute(handle, {x: xv, sc: sv, w: wv, out: oview}, ws)
    normed = (ref.rmsnorm if kind == "rms" else ref.layernorm)(xv, 1, float(np.float32(1e-6)), sv)[0]
    assert untouched_outside(obase, oview)
    assert rel(np.array(oview), normed @ wv.astype(np.float64)) < TOL


def test_matmul_bias_gelu(handle) -> None:
    from math import erf

    rng = np.random.default_rng(6)
    m, k, n = 37, 129, 33
    g = hipdnn.Graph(io_data_type=DT.FLOAT, intermediate_data_type=DT.FLOAT)
    a = g.tensor("a", [1, m, k], [m * k, k, 1])
    bm = g.tensor("b", [1, k, n], [k * n, n, 1])
    bias = g.tensor("bias", [1, 1, n], [n, n, 1])
    out = g.pointwise(hipdnn.PointwiseMode.GELU_FWD, g.add(g.matmul(a, bm), bias))
    out.set_output(True)
    g.build(handle)
    av = rng.standard_normal((1, m, k)).astype(np.float32)
    bv = rng.standard_normal((1, k, n)).astype(np.float32) / 8
    cv = rng.standard_normal((1, 1, n)).astype(np.float32)
    obase, oview = guarded([1, m, n], out.get_stride(), np.dtype(np.float32))
    ws = np.empty(max(1, g.get_workspace_size()), np.uint8)
    g.execute(handle, {a: av, bm: bv, bias: cv, out: oview}, ws)
    z = ref.matmul(av, bv) + cv
    want = 0.5 * z * (1 + np.vectorize(erf)(z / np.sqrt(2)))
    assert untouched_outside(obase, oview)
    assert rel(np.array(oview), want) < TOL
