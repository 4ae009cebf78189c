"""The CPU engine through the public API: results against float64 references, at declared and
overridden shapes. Outputs are NaN-filled first so every element must be written."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hipdnn
from hipdnn import reference

F32 = hipdnn.DataType.FLOAT
TOL = 1e-5


@pytest.fixture(scope="module")
def handle() -> Iterator[hipdnn.Handle]:
    h = hipdnn.Handle()
    if not any(p.name == "hipdnn_cpu_engine" for p in h.loaded_plugins()):
        pytest.fail(f"the CPU engine did not load: {h.skipped_plugins()}")
    yield h
    h.close()


def compact(dims: list[int]) -> list[int]:
    strides = [1] * len(dims)
    for i in range(len(dims) - 2, -1, -1):
        strides[i] = strides[i + 1] * dims[i + 1]
    return strides


def bshd_strides(b: int, h: int, s: int, d: int) -> list[int]:
    """Strides of a [B, S, H, D] buffer viewed as [B, H, S, D]."""
    return [s * h * d, d, h * d, 1]


def strided_view(rng: np.random.Generator, dims: list[int], strides: list[int]) -> np.ndarray:
    """Random float32 data in a buffer laid out by ``strides`` (in elements), viewed at ``dims``."""
    extent = sum((d - 1) * s for d, s in zip(dims, strides)) + 1
    base = rng.standard_normal(extent).astype(np.float32)
    return np.lib.stride_tricks.as_strided(base, shape=dims, strides=[s * 4 for s in strides])


def nan_view(dims: list[int], strides: list[int]) -> np.ndarray:
    extent = sum((d - 1) * s for d, s in zip(dims, strides)) + 1
    base = np.full(extent, np.nan, dtype=np.float32)
    return np.lib.stride_tricks.as_strided(base, shape=dims, strides=[s * 4 for s in strides])


def sdpa_graph(
    q_dims: list[int],
    kv_dims: list[int],
    q_strides: list[int],
    kv_strides: list[int],
    causal: bool = False,
    bottom_right: bool = False,
    stats: bool = False,
    overridable: bool = False,
    scale: float = 0.125,
) -> tuple[hipdnn.Graph, dict[str, hipdnn.TensorAttributes]]:
    g = hipdnn.Graph(
        name="sdpa",
        io_data_type=F32,
        intermediate_data_type=F32,
        compute_data_type=F32,
        is_override_shape_enabled=overridable,
    )
    q = g.tensor(name="q", dim=q_dims, stride=q_strides, data_type=F32)
    k = g.tensor(name="k", dim=kv_dims, stride=kv_strides, data_type=F32)
    v = g.tensor(name="v", dim=kv_dims, stride=kv_strides, data_type=F32)
    o, lse = g.sdpa(
        q,
        k,
        v,
        attn_scale=scale,
        use_causal_mask=causal,
        generate_stats=stats,
        diagonal_alignment=hipdnn.DiagonalAlignment.BOTTOM_RIGHT if bottom_right else hipdnn.DiagonalAlignment.TOP_LEFT,
    )
    o.set_output(True).set_stride(
        q_strides[:3] + [1] if q_dims[3] == kv_dims[3] else compact([q_dims[0], q_dims[1], q_dims[2], kv_dims[3]])
    )
    tensors = {"q": q, "k": k, "v": v, "o": o}
    if lse is not None:
        lse.set_output(True)
        tensors["stats"] = lse
    return g, tensors


def workspace_for(g: hipdnn.Graph) -> np.ndarray:
    return np.empty(max(g.get_workspace_size(), 1), dtype=np.uint8)


@pytest.mark.parametrize(
    ("b", "hq", "hk", "sq", "skv", "d", "causal", "bottom_right", "layout"),
    [
        (1, 1, 1, 1, 1, 64, False, False, "bhsd"),
        (2, 4, 4, 37, 37, 64, True, False, "bhsd"),
        (1, 8, 2, 129, 129, 32, True, False, "bshd"),  # GQA
        (2, 4, 1, 37, 129, 16, True, True, "bshd"),  # MQA, Sq < Skv, bottom-right
        (1, 2, 2, 129, 37, 7, False, False, "bhsd"),  # odd head dim, Sq > Skv
        (1, 2, 2, 50, 20, 8, True, True, "bhsd"),  # bottom-right with fully masked rows
    ],
)
def test_sdpa_matches_float64(
    handle: hipdnn.Handle,
    b: int,
    hq: int,
    hk: int,
    sq: int,
    skv: int,
    d: int,
    causal: bool,
    bottom_right: bool,
    layout: str,
) -> None:
    rng = np.random.default_rng(sq * 1000 + skv)
    if layout == "bshd":
        qs, kvs = bshd_strides(b, hq, sq, d), bshd_strides(b, hk, skv, d)
    else:
        qs, kvs = compact([b, hq, sq, d]), compact([b, hk, skv, d])
    g, t = sdpa_graph([b, hq, sq, d], [b, hk, skv, d], qs, kvs, causal, bottom_right, stats=True)
    g.build(handle)
    q = strided_view(rng, [b, hq, sq, d], qs)
    k = strided_view(rng, [b, hk, skv, d], kvs)
    v = strided_view(rng, [b, hk, skv, d], kvs)
    o = nan_view([b, hq, sq, d], t["o"].get_stride())
    stats = np.full((b, hq, sq, 1), np.nan, dtype=np.float32)
    g.execute(handle, {t["q"]: q, t["k"]: k, t["v"]: v, t["o"]: o, t["stats"]: stats}, workspace_for(g))
    want_o, want_stats = reference.sdpa(q, k, v, 0.125, causal=causal, bottom_right=bottom_right)
    assert reference.relative_error(o, want_o) < TOL
    assert reference.relative_error(stats, want_stats) < TOL


def test_one_plan_serves_every_sequence_length(handle: hipdnn.Handle) -> None:
    """Built once at S=2048; executed at a spread of lengths (the benchmark covers all of 1..2048)."""
    b, h, s_max, d = 1, 2, 2048, 32
    g, t = sdpa_graph(
        [b, h, s_max, d],
        [b, h, s_max, d],
        compact([b, h, s_max, d]),
        compact([b, h, s_max, d]),
        causal=True,
        overridable=True,
    )
    g.build(handle)
    ws = workspace_for(g)
    rng = np.random.default_rng(7)
    for s in (1, 2, 37, 129, 500, 1023, 2047, 2048):
        dims, strides = [b, h, s, d], compact([b, h, s, d])
        q, k, v = (rng.standard_normal(dims).astype(np.float32) for _ in range(3))
        o = np.full(dims, np.nan, dtype=np.float32)
        g.execute(
            handle,
            {t["q"]: q, t["k"]: k, t["v"]: v, t["o"]: o},
            ws,
            overrides={t[n]: hipdnn.OverrideEntry(shape=dims, stride=strides) for n in "qkvo"},
        )
        want, _ = reference.sdpa(q, k, v, 0.125, causal=True)
        assert reference.relative_error(o, want) < TOL, s


def test_override_into_max_size_buffers_with_non_compact_strides(handle: hipdnn.Handle) -> None:
    """Built at B=2, S=256; run at B=1, S=37 inside the max-size buffers, keeping the max-shape strides."""
    b, h, s_max, d = 2, 2, 256, 16
    max_dims, max_strides = [b, h, s_max, d], compact([b, h, s_max, d])
    g, t = sdpa_graph(max_dims, max_dims, max_strides, max_strides, causal=True, overridable=True)
    g.build(handle)
    rng = np.random.default_rng(3)
    bufs = {n: rng.standard_normal(max_dims).astype(np.float32) for n in "qkv"}
    bufs["o"] = np.full(max_dims, np.nan, dtype=np.float32)
    small = [1, h, 37, d]
    view = (slice(0, 1), slice(None), slice(0, 37), slice(None))
    # each value a view of its max-size buffer at the override's shape, with the buffer's (max) strides
    assert all(list(bufs[n][view].shape) == small for n in "qkvo")
    g.execute(
        handle,
        {t[n]: bufs[n][view] for n in "qkvo"},
        workspace_for(g),
        override_uids=[t[n].get_uid() for n in "qkvo"],
        override_shapes=[small] * 4,
        override_strides=[max_strides] * 4,
    )
    want, _ = reference.sdpa(bufs["q"][view], bufs["k"][view], bufs["v"][view], 0.125, causal=True)
    assert reference.relative_error(bufs["o"][view], want) < TOL
    untouched = bufs["o"].copy()
    untouched[view] = np.nan
    assert np.isnan(untouched).all(), "the engine wrote outside the overridden region"


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    s=st.integers(1, 96),
    skv=st.integers(1, 96),
    b=st.integers(1, 2),
    causal=st.booleans(),
    bottom_right=st.booleans(),
    layout=st.sampled_from(["bhsd", "bshd"]),
)
def test_sdpa_overrides_hypothesis(
    handle: hipdnn.Handle, s: int, skv: int, b: int, causal: bool, bottom_right: bool, layout: str
) -> None:
    h, d, s_max = 2, 8, 96
    strides_of = bshd_strides if layout == "bshd" else (lambda b_, h_, s_, d_: compact([b_, h_, s_, d_]))
    g, t = sdpa_graph(
        [2, h, s_max, d],
        [2, h, s_max, d],
        strides_of(2, h, s_max, d),
        strides_of(2, h, s_max, d),
        causal=causal,
        bottom_right=bottom_right,
        overridable=True,
    )
    g.build(handle)
    rng = np.random.default_rng(s * 97 + skv)
    qd, kvd = [b, h, s, d], [b, h, skv, d]
    qs, kvs = strides_of(b, h, s, d), strides_of(b, h, skv, d)
    q, k, v = strided_view(rng, qd, qs), strided_view(rng, kvd, kvs), strided_view(rng, kvd, kvs)
    o = nan_view(qd, qs)
    g.execute(
        handle,
        {t["q"]: q, t["k"]: k, t["v"]: v, t["o"]: o},
        workspace_for(g),
        overrides={
            t["q"]: hipdnn.OverrideEntry(qd, qs),
            t["k"]: hipdnn.OverrideEntry(kvd, kvs),
            t["v"]: hipdnn.OverrideEntry(kvd, kvs),
            t["o"]: hipdnn.OverrideEntry(qd, qs),
        },
    )
    want, _ = reference.sdpa(q, k, v, 0.125, causal=causal, bottom_right=bottom_right)
    assert reference.relative_error(o, want) < TOL


def test_matmul_broadcast_and_transposed_operand(handle: hipdnn.Handle) -> None:
    rng = np.random.default_rng(11)
    g = hipdnn.Graph(name="mm", io_data_type=F32, intermediate_data_type=F32, compute_data_type=F32)
    a_dims, b_dims = [2, 1, 37, 129], [3, 129, 5]
    a = g.tensor(name="a", dim=a_dims, stride=compact(a_dims), data_type=F32)
    b = g.tensor(name="b", dim=b_dims, stride=[129 * 5, 1, 129], data_type=F32)  # each [K, N] stored transposed
    c = g.matmul(a, b)
    c.set_output(True)
    g.build(handle)
    a_arr = rng.standard_normal(a_dims).astype(np.float32)
    b_arr = strided_view(rng, b_dims, [129 * 5, 1, 129])
    c_arr = np.full(c.get_dim(), np.nan, dtype=np.float32)
    assert c.get_dim() == [2, 3, 37, 5]
    g.execute(handle, {a: a_arr, b: b_arr, c: c_arr}, workspace_for(g))
    assert reference.relative_error(c_arr, reference.matmul(a_arr, b_arr)) < TOL


def test_matmul_then_add_with_virtual_intermediate(handle: hipdnn.Handle) -> None:
    rng = np.random.default_rng(12)
    g = hipdnn.Graph(name="mm_add", io_data_type=F32, intermediate_data_type=F32, compute_data_type=F32)
    a = g.tensor(name="a", dim=[4, 37, 16], stride=compact([4, 37, 16]), data_type=F32)
    b = g.tensor(name="b", dim=[4, 16, 9], stride=compact([4, 16, 9]), data_type=F32)
    bias = g.tensor(name="bias", dim=[1, 1, 9], stride=[9, 9, 1], data_type=F32)
    y = g.pointwise(hipdnn.PointwiseMode.ADD, g.matmul(a, b), bias)
    y.set_output(True)
    g.build(handle)
    arrs = {
        a: rng.standard_normal([4, 37, 16]).astype(np.float32),
        b: rng.standard_normal([4, 16, 9]).astype(np.float32),
        bias: rng.standard_normal([1, 1, 9]).astype(np.float32),
    }
    out = np.full([4, 37, 9], np.nan, dtype=np.float32)
    g.execute(handle, {**arrs, y: out}, workspace_for(g))
    want = reference.matmul(arrs[a], arrs[b]) + arrs[bias].astype(np.float64)
    assert reference.relative_error(out, want) < TOL


def test_matmul_overridden_m(handle: hipdnn.Handle) -> None:
    rng = np.random.default_rng(13)
    g = hipdnn.Graph(
        name="mm_dyn",
        io_data_type=F32,
        intermediate_data_type=F32,
        compute_data_type=F32,
        is_override_shape_enabled=True,
    )
    a = g.tensor(name="a", dim=[2, 64, 32], stride=compact([2, 64, 32]), data_type=F32)
    b = g.tensor(name="b", dim=[2, 32, 8], stride=compact([2, 32, 8]), data_type=F32)
    c = g.matmul(a, b)
    c.set_output(True)
    g.build(handle)
    for m in (1, 5, 64):
        a_arr = rng.standard_normal([2, m, 32]).astype(np.float32)
        b_arr = rng.standard_normal([2, 32, 8]).astype(np.float32)
        c_arr = np.full([2, m, 8], np.nan, dtype=np.float32)
        g.execute(
            handle,
            {a: a_arr, b: b_arr, c: c_arr},
            workspace_for(g),
            overrides={
                a: hipdnn.OverrideEntry([2, m, 32], compact([2, m, 32])),
                c: hipdnn.OverrideEntry([2, m, 8], compact([2, m, 8])),
            },
        )
        assert reference.relative_error(c_arr, reference.matmul(a_arr, b_arr)) < TOL


def test_not_applicable_graph_is_refused_not_miscomputed(handle: hipdnn.Handle) -> None:
    # fp16 SDPA is supported (tests/cpu/); an fp16 matmul is not.
    g = hipdnn.Graph(name="half", io_data_type=hipdnn.DataType.HALF)
    dims = [8, 8]
    a = g.tensor(name="a", dim=dims, stride=compact(dims), data_type=hipdnn.DataType.HALF)
    b = g.tensor(name="b", dim=dims, stride=compact(dims), data_type=hipdnn.DataType.HALF)
    c = g.matmul(a, b)
    c.set_output(True)
    with pytest.raises(hipdnn.HipdnnError) as err:
        g.build(handle)
    assert err.value.code == hipdnn.ErrorCode.GRAPH_NOT_SUPPORTED
    assert "hipdnn_cpu_engine" in err.value.message and "not applicable" in err.value.message
