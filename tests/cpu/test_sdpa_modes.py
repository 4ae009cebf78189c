"""Every SDPA forward option of the CPU engine, through the Python frontend, against a float64 reference
written here from the definitions (cudnn-frontend's semantics):

    s = scale * q k^T + bias + alibi_slope[h] * (j - i)
    key j is visible to query i iff   i < seq_len_q[b], j < seq_len_kv[b],
                                      j <= i + R (+ shift),  j >= i - L + 1 (+ shift)
    where R = right bound (0 for a causal mask), L = left bound, and shift = Skv_b - Sq_b under
    DiagonalAlignment.BOTTOM_RIGHT (0 under TOP_LEFT);
    o = softmax over visible keys @ v,  stats = log-sum-exp over visible keys (natural log).

Rows with no visible key (and query rows past seq_len_q) give o = 0 and stats = -inf: the backward
pass reads such rows as empty (P = 0).

Outputs live in NaN-filled buffers with guard regions around the viewed elements: every element of
the view must be written and nothing around it touched. fp16 travels as numpy float16; bf16 as
ml_dtypes.bfloat16 (the numpy bfloat16), whose bit patterns the tests write themselves.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hipdnn

DT = hipdnn.DataType
TOL = {DT.FLOAT: 2e-5, DT.HALF: 2e-3, DT.BFLOAT16: 1.6e-2}  # relative to max |o|
STATS_TOL = 1e-4
GUARD = 13  # elements of guard before and after every output view


@pytest.fixture(scope="module")
def handle() -> Iterator[hipdnn.Handle]:
    h = hipdnn.Handle()
    if not any(p.name == "hipdnn_cpu_engine" for p in h.loaded_plugins()):
        pytest.fail(f"the CPU engine did not load: {h.skipped_plugins()}")
    yield h
    h.close()


# ------------------------------------------------------------------------------------------ dtypes
BF16 = np.dtype(ml_dtypes.bfloat16)


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16, round to nearest even (computed here, not by ml_dtypes)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16).view(BF16)


def bf16_value(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits).view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def storage(dt: DT) -> np.dtype:
    return {DT.FLOAT: np.dtype(np.float32), DT.HALF: np.dtype(np.float16), DT.BFLOAT16: BF16}[dt]


def encode(x: np.ndarray, dt: DT) -> np.ndarray:
    if dt == DT.BFLOAT16:
        return bf16_bits(x)
    return x.astype(storage(dt))


def decode(x: np.ndarray, dt: DT) -> np.ndarray:
    if dt == DT.BFLOAT16:
        return bf16_value(x).astype(np.float64)
    return x.astype(np.float64)


# ----------------------------------------------------------------------------------------- buffers
def layout_strides(layout: str, dims: list[int]) -> list[int]:
    b, h, s, d = dims
    if layout == "bhsd":
        return [h * s * d, s * d, d, 1]
    if layout == "bshd":
        return [s * h * d, d, h * d, 1]
    if layout == "padded":  # BHSD with slack after every dim
        d2, s2, h2 = d + 3, s + 1, h + 1
        return [h2 * s2 * d2, s2 * d2, d2, 1]
    if layout == "dstride":  # head dim not unit-stride: [B, D, H, S] memory
        return [d * h * s, s, 1, h * s]
    raise ValueError(layout)


def guarded(
    dims: list[int],
    strides: list[int],
    dtype: np.dtype,
    fill: np.ndarray | None = None,
    rng: np.random.Generator | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(base buffer, strided view at offset GUARD). Unviewed elements hold NaN (0xFFFF for bf16)."""
    extent = sum((d - 1) * s for d, s in zip(dims, strides)) + 1
    if dtype == BF16:
        base = np.full(extent + 2 * GUARD, 0xFFFF, dtype=np.uint16).view(BF16)  # a bf16 NaN pattern
    else:
        base = np.full(extent + 2 * GUARD, np.nan, dtype=dtype)
    view = np.lib.stride_tricks.as_strided(base[GUARD:], shape=dims, strides=[s * dtype.itemsize for s in strides])
    if fill is not None:
        view[...] = fill
    return base, view


def untouched_outside(base: np.ndarray, view: np.ndarray) -> bool:
    """Every element of base that the view does not cover still holds the fill pattern."""
    offs = np.zeros(view.shape, dtype=np.int64)
    for axis, (n, s) in enumerate(zip(view.shape, view.strides)):
        shape = [1] * view.ndim
        shape[axis] = n
        offs = offs + (np.arange(n) * (s // base.itemsize)).reshape(shape)
    mask = np.ones(base.shape, dtype=bool)
    mask[GUARD + offs.ravel()] = False
    rest = base[mask]
    if base.dtype == BF16:
        return bool((rest.view(np.uint16) == 0xFFFF).all())
    return bool(np.isnan(rest).all())


# --------------------------------------------------------------------------------------- reference
def alibi_slopes(h: int) -> np.ndarray:
    n = 2 ** int(math.floor(math.log2(h)))
    m = [2.0 ** (-8.0 * (i + 1) / n) for i in range(n)]
    m += [2.0 ** (-4.0 * (2 * i + 1) / n) for i in range(h - n)]
    return np.array(m, dtype=np.float64)


def reference(
    q,
    k,
    v,
    scale,
    *,
    bias=None,
    alibi=False,
    seq_q=None,
    seq_kv=None,
    right=None,
    left=None,
    bottom_right=False,
    causal=False,
):
    b, hq, sq, _ = q.shape
    hk, skv = k.shape[1], k.shape[2]
    g = hq // hk
    kk, vv = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    s = np.einsum("bhqd,bhkd->bhqk", q, kk) * scale
    if bias is not None:
        s = s + bias
    i = np.arange(sq)[:, None]
    j = np.arange(skv)[None, :]
    if alibi:
        s = s + alibi_slopes(hq)[None, :, None, None] * (j - i)[None, None]
    o = np.zeros((b, hq, sq, vv.shape[3]))
    lse = np.full((b, hq, sq, 1), -np.inf)
    for bi in range(b):
        sqb = sq if seq_q is None else int(min(max(seq_q[bi], 0), sq))
        skvb = skv if seq_kv is None else int(min(max(seq_kv[bi], 0), skv))
        shift = skvb - sqb if bottom_right else 0
        vis = (j < skvb) & (i < sqb)
        if causal:
            vis &= j <= i + shift
        if right is not None:
            vis &= j <= i + right + shift
        if left is not None:
            vis &= j >= i - left + 1 + shift
        sb = np.where(vis[None], s[bi], -np.inf)
        m = sb.max(axis=-1, keepdims=True)
        live = np.isfinite(m)
        p = np.exp(sb - np.where(live, m, 0.0))
        den = p.sum(axis=-1, keepdims=True)
        o[bi] = np.where(live, (p @ vv[bi]) / np.where(live, den, 1.0), 0.0)
        lse[bi] = np.where(live, m + np.log(np.where(live, den, 1.0)), -np.inf)
    return o, lse


# ------------------------------------------------------------------------------------------- cases
@dataclass
class Case:
    b: int = 1
    hq: int = 2
    hk: int = 2
    sq: int = 37
    skv: int = 37
    d: int = 16
    dv: int = 16
    dt: DT = DT.FLOAT
    layout: str = "bhsd"
    causal: bool = False
    bottom_right: bool = False
    left: int | None = None
    right: int | None = None
    padding: bool = False
    seq_q: list[int] = field(default_factory=list)
    seq_kv: list[int] = field(default_factory=list)
    # None; "full", "b1", "h1", "11": [B|1, H|1, Sq, Skv], keys contiguous; "kt": [B, H, Sq, Skv] stored
    # queries-fastest
    bias: str | None = None
    alibi: bool = False
    scale_tensor: bool = False
    stats: bool = True
    scale: float | None = None  # attn_scale; None: drawn from [0.05, 0.4)


def run_case(handle: hipdnn.Handle, c: Case, seed: int = 0) -> np.ndarray:
    """Runs case c on handle, checks it against float64, and returns o as float64."""
    rng = np.random.default_rng(seed)
    qd, kd, vd = [c.b, c.hq, c.sq, c.d], [c.b, c.hk, c.skv, c.d], [c.b, c.hk, c.skv, c.dv]
    od = [c.b, c.hq, c.sq, c.dv]
    qs, ks, vs, os_ = (layout_strides(c.layout, x) for x in (qd, kd, vd, od))
    g = hipdnn.Graph(name="sdpa_modes", io_data_type=c.dt, intermediate_data_type=DT.FLOAT, compute_data_type=DT.FLOAT)
    tq = g.tensor(name="q", dim=qd, stride=qs, data_type=c.dt)
    tk = g.tensor(name="k", dim=kd, stride=ks, data_type=c.dt)
    tv = g.tensor(name="v", dim=vd, stride=vs, data_type=c.dt)
    drawn = float(rng.uniform(0.05, 0.4))  # drawn either way: the data's random stream stays the same
    scale = drawn if c.scale is None else c.scale
    extra: dict = {}
    pack: dict = {}
    if c.scale_tensor:
        ts = g.tensor(name="scale", dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=DT.FLOAT)
        extra["attn_scale"] = ts
        pack[ts] = np.full((1, 1, 1, 1), scale, np.float32)
    else:
        extra["attn_scale"] = scale
    seq_q = seq_kv = None
    if c.padding:
        tsq = g.tensor(name="seq_q", dim=[c.b, 1, 1, 1], stride=[1, 1, 1, 1], data_type=DT.INT32)
        tskv = g.tensor(name="seq_kv", dim=[c.b, 1, 1, 1], stride=[1, 1, 1, 1], data_type=DT.INT32)
        seq_q, seq_kv = np.array(c.seq_q, np.int32), np.array(c.seq_kv, np.int32)
        pack[tsq], pack[tskv] = seq_q.reshape(c.b, 1, 1, 1), seq_kv.reshape(c.b, 1, 1, 1)
        extra.update(use_padding_mask=True, seq_len_q=tsq, seq_len_kv=tskv)
    bias64 = None
    if c.bias is not None:
        lead = {"full": [c.b, c.hq], "b1": [1, c.hq], "h1": [c.b, 1], "11": [1, 1], "kt": [c.b, c.hq]}
        # broadcast over the queries (a padding mask [B, 1, 1, Skv]), over the keys, or a scalar
        rows = {"keys_only": [c.b, 1, 1, c.skv], "queries_only": [1, c.hq, c.sq, 1], "scalar": [1, 1, 1, 1]}
        bd = rows[c.bias] if c.bias in rows else lead[c.bias] + [c.sq, c.skv]
        bias_vals = decode(encode(rng.standard_normal(bd).astype(np.float32), c.dt), c.dt)
        stored = encode(bias_vals.astype(np.float32), c.dt)
        if c.bias == "kt":  # the same values, the query axis contiguous
            stored = np.ascontiguousarray(stored.swapaxes(2, 3)).swapaxes(2, 3)
        bstride = [x // stored.itemsize for x in stored.strides]
        tb = g.tensor(name="bias", dim=bd, stride=bstride, data_type=c.dt)
        pack[tb] = stored
        bias64 = bias_vals
        extra["bias"] = tb
    o, stats = g.sdpa(
        tq,
        tk,
        tv,
        use_causal_mask=c.causal,
        generate_stats=c.stats,
        diagonal_alignment=hipdnn.DiagonalAlignment.BOTTOM_RIGHT
        if c.bottom_right
        else hipdnn.DiagonalAlignment.TOP_LEFT,
        diagonal_band_left_bound=c.left,
        diagonal_band_right_bound=c.right,
        use_alibi_mask=c.alibi,
        **extra,
    )
    o.set_output(True).set_stride(os_)
    if stats is not None:
        stats.set_output(True)
    g.build(handle)

    vals = {}
    for name, dims, strides, t in (("q", qd, qs, tq), ("k", kd, ks, tk), ("v", vd, vs, tv)):
        x = decode(encode(rng.standard_normal(dims).astype(np.float32), c.dt), c.dt)
        vals[name] = x
        _, view = guarded(dims, strides, storage(c.dt), encode(x.astype(np.float32), c.dt))
        pack[t] = view
    obase, oview = guarded(od, os_, storage(c.dt))
    pack[o] = oview
    if stats is not None:
        sbase, sview = guarded([c.b, c.hq, c.sq, 1], stats.get_stride(), np.dtype(np.float32))
        pack[stats] = sview
    # all-ones bytes: every float the kernels might read from scratch before writing it is a NaN
    ws = np.full(max(1, g.get_workspace_size()), 0xFF, np.uint8)
    g.execute(handle, pack, ws)

    want_o, want_lse = reference(
        vals["q"],
        vals["k"],
        vals["v"],
        np.float64(np.float32(scale)),
        bias=bias64,
        alibi=c.alibi,
        seq_q=seq_q,
        seq_kv=seq_kv,
        right=c.right,
        left=c.left,
        bottom_right=c.bottom_right,
        causal=c.causal,
    )
    got = decode(np.array(oview), c.dt)
    assert not np.isnan(got).any(), f"{c}: unwritten output elements"
    assert untouched_outside(obase, oview), f"{c}: output guard region written"
    denom = max(1.0, float(np.abs(want_o).max()))
    err = float(np.abs(got - want_o).max()) / denom
    assert err < TOL[c.dt], f"{c}: o relative error {err:.2e}"
    if stats is not None:
        s = np.array(sview, dtype=np.float64)
        assert untouched_outside(sbase, sview), f"{c}: stats guard region written"
        dead = np.isneginf(want_lse)
        assert (np.isneginf(s) == dead).all(), f"{c}: fully masked rows must have stats -inf"
        serr = float(np.abs(s[~dead] - want_lse[~dead]).max()) if (~dead).any() else 0.0
        tol = STATS_TOL if c.dt == DT.FLOAT else 50 * STATS_TOL
        assert serr < tol * max(1.0, float(np.abs(want_lse[~dead]).max(initial=1.0))), f"{c}: stats error {serr}"
        assert (got[np.broadcast_to(dead, got.shape)] == 0).all(), f"{c}: fully masked rows must give 0"
    return got


BASE = Case()
CASES = {
    "fp32_plain": BASE,
    "fp32_multi_tile": replace(BASE, sq=200, skv=300, d=64, dv=64, hq=3, hk=1),
    "fp32_causal_tl": replace(BASE, sq=130, skv=170, causal=True),
    "fp32_causal_br_fully_masked_rows": replace(BASE, sq=170, skv=60, causal=True, bottom_right=True),
    "fp32_window_tl": replace(BASE, sq=150, skv=150, left=17, right=0),
    "fp32_window_br": replace(BASE, sq=90, skv=160, left=33, right=0, bottom_right=True),
    "fp32_band_right_bound_5": replace(BASE, sq=100, skv=100, right=5),
    "fp32_window_only": replace(BASE, sq=100, skv=120, left=9),
    "fp32_window_all_masked_rows": replace(BASE, sq=120, skv=40, left=3, right=0),
    "fp32_padding": replace(BASE, b=3, sq=70, skv=90, padding=True, seq_q=[70, 33, 1], seq_kv=[90, 0, 61]),
    "fp32_padding_causal_br": replace(
        BASE, b=2, sq=80, skv=80, padding=True, seq_q=[50, 80], seq_kv=[77, 20], causal=True, bottom_right=True
    ),
    "fp32_bias_full": replace(BASE, b=2, bias="full"),
    "fp32_bias_b1": replace(BASE, b=2, bias="b1", causal=True),
    "fp32_bias_h1": replace(BASE, b=2, hq=4, hk=2, bias="h1"),
    "fp32_bias_11": replace(BASE, b=2, bias="11", sq=90, skv=130),
    "fp32_bias_keys_only_causal": replace(BASE, b=2, bias="keys_only", sq=90, skv=130, causal=True),
    "bf16_bias_keys_only_decode": replace(BASE, dt=DT.BFLOAT16, b=2, hq=4, hk=2, bias="keys_only", sq=3, skv=200),
    "fp32_bias_queries_only": replace(BASE, b=2, bias="queries_only", sq=53, skv=91),
    "fp16_bias_scalar": replace(BASE, dt=DT.HALF, bias="scalar", sq=33, skv=47),
    "fp32_bias_full_gqa_odd": replace(BASE, b=2, hq=3, hk=1, bias="full", sq=37, skv=70),
    "fp32_bias_kt_causal": replace(BASE, b=2, bias="kt", sq=53, skv=91, causal=True, bottom_right=True),
    "bf16_bias_kt_window": replace(BASE, dt=DT.BFLOAT16, bias="kt", sq=70, skv=129, left=20, right=3),
    "fp16_bias_kt": replace(BASE, dt=DT.HALF, bias="kt", sq=33, skv=47),
    "fp16_bias_full_odd": replace(BASE, dt=DT.HALF, bias="full", sq=49, skv=131),
    "fp32_alibi": replace(BASE, hq=6, hk=3, alibi=True, sq=60, skv=80, causal=True),
    "fp32_alibi_pow2": replace(BASE, hq=8, hk=8, alibi=True),
    "fp32_scale_tensor": replace(BASE, scale_tensor=True, causal=True),
    "fp32_bshd_dv_differs": replace(BASE, layout="bshd", d=24, dv=40, sq=50, skv=70),
    "fp32_padded_layout": replace(BASE, layout="padded", d=20, dv=20, causal=True),
    "fp32_non_unit_head_stride": replace(BASE, layout="dstride", d=12, dv=12, sq=40, skv=45),
    "fp32_decode": replace(BASE, b=2, hq=8, hk=2, sq=1, skv=300, d=64, dv=64),
    "fp16": replace(BASE, dt=DT.HALF, sq=100, skv=130, d=64, dv=64, causal=True),
    "fp16_all_options": replace(
        BASE,
        dt=DT.HALF,
        b=2,
        padding=True,
        seq_q=[37, 20],
        seq_kv=[30, 37],
        bias="h1",
        alibi=True,
        left=9,
        right=2,
        layout="bshd",
    ),
    "bf16": replace(BASE, dt=DT.BFLOAT16, sq=100, skv=90, d=64, dv=32),
    "bf16_causal_br_gqa": replace(
        BASE, dt=DT.BFLOAT16, hq=4, hk=2, sq=70, skv=100, causal=True, bottom_right=True, bias="full"
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_sdpa_mode(handle: hipdnn.Handle, name: str) -> None:
    run_case(handle, CASES[name], seed=len(name))


@st.composite
def cases(
    draw: st.DrawFn,
    *,
    dts: tuple[DT, ...] = (DT.FLOAT, DT.FLOAT, DT.HALF, DT.BFLOAT16),
    sq: tuple[int, int] = (1, 80),
    skv: tuple[int, int] = (1, 80),
    ds: tuple[int, ...] = (1, 4, 8, 13, 32, 64),
    dvs: tuple[int, ...] = (8, 19),
    heads: int = 3,
    left_max: int = 90,
    right_max: int = 20,
) -> Case:
    """Any SDPA forward case: sizes from these ranges (dv is d or one of dvs), every option drawn."""
    b = draw(st.integers(1, 3))
    hk = draw(st.integers(1, heads))
    hq = hk * draw(st.integers(1, 3))
    n_q = draw(st.integers(*sq))
    n_kv = draw(st.integers(*skv))
    d = draw(st.sampled_from(ds))
    dv = draw(st.sampled_from((d, *dvs)))
    padding = draw(st.booleans())
    return Case(
        b=b,
        hq=hq,
        hk=hk,
        sq=n_q,
        skv=n_kv,
        d=d,
        dv=dv,
        dt=draw(st.sampled_from(dts)),
        layout=draw(st.sampled_from(["bhsd", "bshd", "padded", "dstride"])),
        causal=draw(st.booleans()),
        bottom_right=draw(st.booleans()),
        left=draw(st.one_of(st.none(), st.integers(1, left_max))),
        right=draw(st.one_of(st.none(), st.integers(0, right_max))),
        padding=padding,
        seq_q=[draw(st.integers(0, n_q)) for _ in range(b)] if padding else [],
        seq_kv=[draw(st.integers(0, n_kv)) for _ in range(b)] if padding else [],
        bias=draw(st.sampled_from([None, "full", "b1", "h1", "11", "kt", "keys_only", "queries_only", "scalar"])),
        alibi=draw(st.booleans()),
        scale_tensor=draw(st.booleans()),
        stats=draw(st.booleans()),
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(c=cases(), seed=st.integers(0, 2**16))
def test_sdpa_modes_hypothesis(handle: hipdnn.Handle, c: Case, seed: int) -> None:
    run_case(handle, c, seed)
