"""FP8 attention (``Graph.sdpa_fp8``, cudnn-frontend's ``sdpa_fp8``) on the CPU engine's reference,
against a float64 reference written here from the definition (rfcs/0014-fp8-attention.md):

    S = q k^T attn_scale descale_q descale_k, masked;  P = softmax(S);  amax_s = max P;
    P8 = fp8(P scale_s);  O' = (P8 v) descale_s descale_v;  amax_o = max |O'|;  o = O' scale_o in o's type,

fp8() rounding to nearest even and saturating at the largest finite value (ml_dtypes rounds, np.clip
saturates). Random FP8 data, odd shapes (1, 37, 53, 129), GQA, E4M3 and E5M2, o in FP8, FLOAT, BFLOAT16
or HALF, the masks (causal both ways, windows, padding with empty sequences), one max-shape plan served
at smaller shapes through overrides, outputs in NaN-filled buffers with guard regions; hypothesis over
shapes, factors and masks. Also the frontend's rules, the wire format and the plugin-version filter (FP8
graphs need API 1.5.0)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hipdnn
from hipdnn.backend.graph_summary import summarize
from hipdnn.plugins import FP8_API_VERSION, SOFTCAP_API_VERSION, parse_api_version, required_api_version
from tests.cpu.test_sdpa_modes import BF16, guarded, untouched_outside

DT = hipdnn.DataType
ROOT = Path(__file__).resolve().parents[2]
FP8 = {DT.FP8_E4M3: (np.dtype(ml_dtypes.float8_e4m3fn), 448.0), DT.FP8_E5M2: (np.dtype(ml_dtypes.float8_e5m2), 57344.0)}
FACTORS = ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o")


@pytest.fixture(scope="module")
def handle() -> Iterator[hipdnn.Handle]:
    h = hipdnn.Handle(device="cpu")
    yield h
    h.close()


def fp8_round(x: np.ndarray, dt: DT) -> np.ndarray:
    """Round to nearest even in the FP8 type, saturating at its largest finite value; as float64."""
    storage, top = FP8[dt]
    return np.clip(x, -top, top).astype(storage).astype(np.float64)


def out_round(x: np.ndarray, dt: DT) -> np.ndarray:
    """o as the engine stores it: FP8 saturating, the 16-bit types from float32, FLOAT as float32."""
    if dt in FP8:
        return fp8_round(x, dt)
    f = x.astype(np.float32)
    if dt == DT.HALF:
        return f.astype(np.float16).astype(np.float64)
    if dt == DT.BFLOAT16:
        return f.astype(BF16).astype(np.float64)
    return f.astype(np.float64)


def out_storage(dt: DT) -> np.dtype:
    if dt in FP8:
        return FP8[dt][0]
    return {DT.FLOAT: np.dtype(np.float32), DT.HALF: np.dtype(np.float16), DT.BFLOAT16: BF16}[dt]


@dataclass
class Case:
    fmt: DT = DT.FP8_E4M3
    out: DT | None = None  # o's type (None: the graph's io type, the FP8 one)
    b: int = 2
    hq: int = 4
    hk: int = 2
    sq: int = 37
    skv: int = 53
    d: int = 16
    dv: int = 16
    causal: bool = False
    bottom_right: bool = False
    left: int | None = None
    padding: list[tuple[int, int]] | None = None  # (seq_len_q, seq_len_kv) per batch
    stats: bool = True
    attn_scale: float = 0.25
    factors: tuple[float, ...] = (0.5, 0.25, 2.0, 1.0 / 256, 256.0, 4.0)

    @property
    def o_type(self) -> DT:
        return self.out if self.out is not None else self.fmt


def visible(c: Case, b: int) -> np.ndarray:
    """[Sq, Skv] bool from the definition (hipdnn's masks; rows and keys past the lengths see nothing)."""
    lq, lkv = (c.sq, c.skv) if c.padding is None else c.padding[b]
    lq, lkv = min(lq, c.sq), min(lkv, c.skv)
    i = np.arange(c.sq)[:, None]
    j = np.arange(c.skv)[None, :]
    shift = lkv - lq if c.bottom_right else 0
    ok = (i < lq) & (j < lkv)
    if c.causal:
        ok &= j <= i + shift
    if c.left is not None:
        ok &= j >= i - c.left + 1 + shift
    return ok


def reference(c: Case, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> dict[str, Any]:
    # the factors and attn_scale as the engine gets them: float32 tensors, a float32 wire field
    dq, dk, dv, ds, ss, so = (float(np.float32(x)) for x in c.factors)
    attn_scale = float(np.float32(c.attn_scale))
    g = c.hq // c.hk
    qf, kf, vf = (x.astype(np.float64) for x in (q, k, v))
    kf, vf = np.repeat(kf, g, axis=1), np.repeat(vf, g, axis=1)
    s = qf @ kf.transpose(0, 1, 3, 2) * attn_scale * dq * dk
    mask = np.stack([visible(c, b) for b in range(c.b)])[:, None]
    s = np.where(mask, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    live = np.isfinite(m)
    e = np.exp(s - np.where(live, m, 0.0))
    l_sum = e.sum(axis=-1, keepdims=True)
    p = np.where(live, e / np.where(live, l_sum, 1.0), 0.0)
    o_pre = fp8_round(p * ss, c.fmt) @ vf * ds * dv
    return {
        "o": out_round(o_pre * so, c.o_type),
        "stats": np.where(live, m + np.log(np.where(live, l_sum, 1.0)), -np.inf),
        "amax_s": p.max(),
        "amax_o": np.abs(o_pre).max(),
        "quantum": fp8_round(np.abs(o_pre * so) * 2.0**-2, c.fmt) if c.o_type in FP8 else None,
    }


GUARD = 37
NAN_BITS = 0x7F  # a NaN in both FP8 types


def guarded_out(dims: list[int], strides: list[int], dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """(base, strided view at offset GUARD) as tests.cpu.test_sdpa_modes.guarded, for FP8 too (built on
    uint8, which numpy's as_strided takes): everything starts NaN."""
    if dtype.itemsize != 1:
        return guarded(dims, strides, dtype)
    extent = sum((d - 1) * s for d, s in zip(dims, strides)) + 1
    base = np.full(extent + 2 * GUARD, NAN_BITS, dtype=np.uint8)
    view = np.lib.stride_tricks.as_strided(base[GUARD:], shape=dims, strides=strides).view(dtype)
    return base, view


def untouched(base: np.ndarray, view: np.ndarray) -> bool:
    if base.dtype != np.uint8:
        return untouched_outside(base, view)
    offs = np.zeros(view.shape, dtype=np.int64)
    for axis, (n, stride) in enumerate(zip(view.shape, view.strides)):
        shape = [1] * view.ndim
        shape[axis] = n
        offs = offs + (np.arange(n) * stride).reshape(shape)
    mask = np.ones(base.shape, dtype=bool)
    mask[GUARD + offs.ravel()] = False
    return bool((base[mask] == NAN_BITS).all())


def random_fp8(shape: tuple[int, ...], dt: DT, rng: np.random.Generator, spread: float = 3.0) -> np.ndarray:
    return (rng.standard_normal(shape) * spread).astype(FP8[dt][0])


def build(c: Case, max_shape: Case | None = None) -> tuple[hipdnn.Graph, dict[str, Any]]:
    """The graph at ``max_shape`` (or c's) dims; with max_shape, overridable."""
    top = max_shape or c
    g = hipdnn.Graph(
        name="sdpa_fp8",
        io_data_type=c.fmt,
        intermediate_data_type=DT.FLOAT,
        compute_data_type=DT.FLOAT,
        is_override_shape_enabled=max_shape is not None,
    )
    t: dict[str, Any] = {}
    t["q"] = g.tensor(name="q", dim=[top.b, top.hq, top.sq, top.d], data_type=c.fmt)
    t["k"] = g.tensor(name="k", dim=[top.b, top.hk, top.skv, top.d], data_type=c.fmt)
    t["v"] = g.tensor(name="v", dim=[top.b, top.hk, top.skv, top.dv], data_type=c.fmt)
    for n in FACTORS:
        t[n] = g.tensor(name=n, dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=DT.FLOAT)
    kw: dict[str, Any] = {"attn_scale": c.attn_scale, "generate_stats": c.stats}
    if c.causal:
        kw["use_causal_mask_bottom_right" if c.bottom_right else "use_causal_mask"] = True
    if c.left is not None:
        kw["diagonal_band_left_bound"] = c.left
        kw["diagonal_alignment"] = (
            hipdnn.DiagonalAlignment.BOTTOM_RIGHT if c.bottom_right else hipdnn.DiagonalAlignment.TOP_LEFT
        )
    if c.padding is not None:
        for n in ("seq_len_q", "seq_len_kv"):
            t[n] = g.tensor(name=n, dim=[top.b, 1, 1, 1], stride=[1, 1, 1, 1], data_type=DT.INT32)
        kw.update(use_padding_mask=True, seq_len_q=t["seq_len_q"], seq_len_kv=t["seq_len_kv"])
    o, stats, amax_s, amax_o = g.sdpa_fp8(t["q"], t["k"], t["v"], *(t[n] for n in FACTORS), **kw)
    o.set_output(True)
    if c.out is not None:
        o.set_data_type(c.out)
    amax_s.set_output(True)
    amax_o.set_output(True)
    t.update(o=o, amax_s=amax_s, amax_o=amax_o)
    if stats is not None:
        stats.set_output(True)
        t["stats"] = stats
    return g, t


def run(handle: hipdnn.Handle, c: Case, g: hipdnn.Graph, t: dict[str, Any], seed: int, overrides: bool) -> None:
    rng = np.random.default_rng(seed)
    q = random_fp8((c.b, c.hq, c.sq, c.d), c.fmt, rng)
    k = random_fp8((c.b, c.hk, c.skv, c.d), c.fmt, rng)
    v = random_fp8((c.b, c.hk, c.skv, c.dv), c.fmt, rng)
    o_dims = [c.b, c.hq, c.sq, c.dv]
    o_base, o_view = guarded_out(o_dims, [c.hq * c.sq * c.dv, c.sq * c.dv, c.dv, 1], out_storage(c.o_type))
    pack: dict[Any, Any] = {t["q"]: q, t["k"]: k, t["v"]: v, t["o"]: o_view}
    for n, x in zip(FACTORS, c.factors):
        pack[t[n]] = np.full((1, 1, 1, 1), x, np.float32)
    amax = {n: np.full((1, 1, 1, 1), np.nan, np.float32) for n in ("amax_s", "amax_o")}
    pack.update({t[n]: a for n, a in amax.items()})
    st_base = st_view = None
    if "stats" in t:
        st_base, st_view = guarded([c.b, c.hq, c.sq, 1], [c.hq * c.sq, c.sq, 1, 1], np.dtype(np.float32))
        pack[t["stats"]] = st_view
    if c.padding is not None:
        for i, n in enumerate(("seq_len_q", "seq_len_kv")):
            pack[t[n]] = np.array([p[i] for p in c.padding], np.int32).reshape(c.b, 1, 1, 1)
    ov = {}
    if overrides:

        def compact(d: list[int]) -> list[int]:
            return [d[1] * d[2] * d[3], d[2] * d[3], d[3], 1]

        for n, dims in (
            ("q", [c.b, c.hq, c.sq, c.d]),
            ("k", [c.b, c.hk, c.skv, c.d]),
            ("v", [c.b, c.hk, c.skv, c.dv]),
            ("o", o_dims),
        ):
            ov[t[n]] = hipdnn.OverrideEntry(shape=dims, stride=compact(dims))
        if "stats" in t:
            ov[t["stats"]] = hipdnn.OverrideEntry(shape=[c.b, c.hq, c.sq, 1], stride=[c.hq * c.sq, c.sq, 1, 1])
        if c.padding is not None:
            for n in ("seq_len_q", "seq_len_kv"):
                ov[t[n]] = hipdnn.OverrideEntry(shape=[c.b, 1, 1, 1], stride=[1, 1, 1, 1])
    g.execute(handle, pack, np.empty(g.get_workspace_size(), np.uint8), overrides=ov or None)
    want = reference(c, q, k, v)
    got = o_view.astype(np.float64)
    assert not np.isnan(got).any(), "an element of o was not written"
    assert untouched(o_base, o_view), "a write landed outside o"
    bad = got != want["o"]
    if c.o_type in FP8:
        # the sums may round across an FP8 tie in another order: at most a few elements, by one step
        assert bad.mean() <= 0.002, f"{int(bad.sum())} of {bad.size} elements of o differ"
        steps = np.abs(got - want["o"])[bad]
        assert (steps <= np.maximum(want["quantum"][bad], 2.0**-9)).all(), steps
    else:
        tol = {DT.FLOAT: 1e-6, DT.HALF: 1e-3, DT.BFLOAT16: 8e-3}[c.o_type]
        assert np.abs(got - want["o"]).max() <= tol * max(1.0, np.abs(want["o"]).max())
    # (against the reference as fp32 holds it: a subnormal amax's spacing is coarser than the tolerance)
    assert np.isclose(amax["amax_s"].item(), np.float32(want["amax_s"]), rtol=1e-6)
    assert np.isclose(amax["amax_o"].item(), np.float32(want["amax_o"]), rtol=1e-6)
    if st_view is not None:
        assert st_base is not None and untouched_outside(st_base, st_view)
        finite = np.isfinite(want["stats"])
        assert (np.isinf(st_view) == ~finite).all()
        err = np.abs(st_view[finite] - want["stats"][finite]) / np.maximum(1.0, np.abs(want["stats"][finite]))
        assert err.max(initial=0.0) < 1e-6  # float32 storage


CASES = {
    "e4m3": Case(),
    "e5m2": Case(fmt=DT.FP8_E5M2),
    "causal": Case(causal=True),
    "causal_br_longer_kv": Case(causal=True, bottom_right=True, sq=37, skv=129),
    "window_br": Case(left=9, bottom_right=True, causal=True),
    "padding_with_empty": Case(padding=[(0, 53), (20, 0)]),
    "padding_causal_br": Case(padding=[(37, 40), (5, 53)], causal=True, bottom_right=True),
    "mqa_dv_differs": Case(hq=3, hk=1, dv=8, d=24),
    "decode": Case(sq=1, skv=129, causal=True, bottom_right=True),
    "o_float": Case(out=DT.FLOAT),
    "o_bf16": Case(out=DT.BFLOAT16, fmt=DT.FP8_E5M2),
    "o_half": Case(out=DT.HALF),
    "no_stats": Case(stats=False, b=1),
    "p8_saturates": Case(factors=(0.5, 0.25, 2.0, 1.0 / 4096, 4096.0, 4.0)),
    "o_saturates": Case(factors=(0.5, 0.25, 2.0, 1.0 / 256, 256.0, 4096.0)),
    "tiny_scales": Case(factors=(1e-3, 2e-3, 1e-2, 1.0 / 448, 448.0, 1e3), attn_scale=1.0),
}


@pytest.mark.parametrize("name", list(CASES))
def test_values(handle: hipdnn.Handle, name: str) -> None:
    c = CASES[name]
    g, t = build(c)
    g.build(handle)
    assert g.get_engine_id() == 101
    run(handle, c, g, t, seed=len(name), overrides=False)


def test_the_saturating_cases_saturate() -> None:
    """The two saturating cases reach FP8's largest value (so they test saturation, not rounding)."""
    rng = np.random.default_rng(1)
    for name, key in (("p8_saturates", "p8"), ("o_saturates", "o")):
        c = CASES[name]
        q, k, v = (random_fp8(s, c.fmt, rng) for s in ((1, 4, 37, 16), (1, 2, 53, 16), (1, 2, 53, 16)))
        want = reference(replace(c, b=1), q, k, v)
        if key == "o":
            assert np.abs(want["o"]).max() == 448.0
        else:
            assert want["amax_s"] * c.factors[4] > 448.0


def test_one_max_shape_plan_serves_smaller_calls(handle: hipdnn.Handle) -> None:
    top = Case(b=3, hq=4, hk=2, sq=129, skv=129, causal=True, bottom_right=True, padding=[(129, 129)] * 3)
    g, t = build(top, max_shape=top)
    g.build(handle)
    for i, (b, sq, skv, pad) in enumerate(
        [(1, 1, 1, [(1, 1)]), (2, 37, 53, [(37, 53), (0, 10)]), (3, 129, 129, [(100, 129), (129, 7), (1, 1)])]
    ):
        run(handle, replace(top, b=b, sq=sq, skv=skv, padding=pad), g, t, seed=i, overrides=True)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    hk = draw(st.integers(1, 2))
    sq, skv = draw(st.integers(1, 40)), draw(st.integers(1, 40))
    b = draw(st.integers(1, 2))
    padding = None
    if draw(st.booleans()):
        padding = [(draw(st.integers(0, sq)), draw(st.integers(0, skv))) for _ in range(b)]
    factors = tuple(draw(st.sampled_from([0.125, 0.5, 1.0, 3.0])) for _ in range(4))
    scale_s = draw(st.sampled_from([16.0, 256.0, 448.0, 1024.0]))
    return Case(
        fmt=draw(st.sampled_from([DT.FP8_E4M3, DT.FP8_E5M2])),
        out=draw(st.sampled_from([None, DT.FLOAT])),
        b=b,
        hq=hk * draw(st.integers(1, 3)),
        hk=hk,
        sq=sq,
        skv=skv,
        d=draw(st.sampled_from([1, 8, 13])),
        dv=draw(st.sampled_from([1, 8, 13])),
        causal=draw(st.booleans()),
        bottom_right=draw(st.booleans()),
        left=draw(st.sampled_from([None, 1, 5])),
        padding=padding,
        attn_scale=draw(st.sampled_from([0.1, 0.5])),
        factors=(*factors[:3], factors[3] / scale_s, scale_s, draw(st.sampled_from([0.5, 8.0]))),
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(c=cases(), seed=st.integers(0, 1000))
def test_hypothesis(handle: hipdnn.Handle, c: Case, seed: int) -> None:
    g, t = build(c)
    g.build(handle)
    run(handle, c, g, t, seed=seed, overrides=False)


# ------------------------------------------------------------------------------------- refusals
def fp8_graph(
    q_type: DT = DT.FP8_E4M3, k_type: DT = DT.FP8_E4M3, factor_dims: list[int] | None = None, **kw: Any
) -> tuple[hipdnn.Graph, list[Any]]:
    g = hipdnn.Graph(name="fp8_rules", io_data_type=DT.FP8_E4M3, compute_data_type=DT.FLOAT)
    q = g.tensor(name="q", dim=[1, 2, 8, 4], data_type=q_type)
    k = g.tensor(name="k", dim=[1, 2, 8, 4], data_type=k_type)
    v = g.tensor(name="v", dim=[1, 2, 8, 4], data_type=DT.FP8_E4M3)
    dims = factor_dims or [1, 1, 1, 1]
    f = [g.tensor(name=n, dim=dims, data_type=DT.FLOAT) for n in FACTORS]
    outs = g.sdpa_fp8(q, k, v, *f, **kw)
    for t in outs:
        if t is not None:
            t.set_output(True)
    return g, list(outs)


@pytest.mark.parametrize(
    ("kw", "fragment"),
    [
        ({"q_type": DT.BFLOAT16}, "q 'q' has data type BFLOAT16; sdpa_fp8 takes FP8_E4M3 or FP8_E5M2"),
        ({"k_type": DT.FP8_E5M2}, "q, k and v must share one FP8 type"),
        ({"factor_dims": [1, 1, 1, 2]}, "descale_q 'descale_q' must hold one value"),
        ({"use_alibi_mask": True}, "ALiBi is not supported with FP8 scaling"),
        ({"softcap": 30.0}, "softcapping is not supported with FP8 scaling"),
    ],
)
def test_rules_are_checked_at_validation(kw: dict[str, Any], fragment: str) -> None:
    g, _ = fp8_graph(**kw)
    with pytest.raises(hipdnn.HipdnnError) as e:
        g.validate()
    assert e.value.code == hipdnn.ErrorCode.INVALID_VALUE
    assert fragment in e.value.message


@pytest.mark.parametrize(
    ("option", "dims", "fragment"),
    [("bias", [1, 1, 8, 8], "a bias is not supported with FP8 scaling"), ("attn_scale", [1, 1, 1, 1], "as a number")],
)
def test_option_tensors_it_is_not_defined_with_are_refused(option: str, dims: list[int], fragment: str) -> None:
    g = hipdnn.Graph(name="fp8_option_tensor", io_data_type=DT.FP8_E4M3)
    q = g.tensor(name="q", dim=[1, 2, 8, 4], data_type=DT.FP8_E4M3)
    f = [g.tensor(name=n, dim=[1, 1, 1, 1], data_type=DT.FLOAT) for n in FACTORS]
    extra = g.tensor(name=option, dim=dims, data_type=DT.FLOAT)
    for t in g.sdpa_fp8(q, q, q, *f, **{option: extra}):
        if t is not None:
            t.set_output(True)
    with pytest.raises(hipdnn.HipdnnError, match=fragment):
        g.validate()


def test_outputs_are_inferred() -> None:
    g, (o, stats, amax_s, amax_o) = fp8_graph(generate_stats=True)
    g.validate()
    assert o.get_data_type() == DT.FP8_E4M3 and o.get_dim() == [1, 2, 8, 4]
    assert stats is not None and stats.get_data_type() == DT.FLOAT and stats.get_dim() == [1, 2, 8, 1]
    for a in (amax_s, amax_o):
        assert a.get_data_type() == DT.FLOAT and a.get_dim() == [1, 1, 1, 1]
    _, (_, none, _, _) = fp8_graph()
    assert none is None


# --------------------------------------------------------------------- wire format and versions
def test_the_wire_carries_every_tensor_and_asks_for_api_1_5_0() -> None:
    g, (o, _, amax_s, amax_o) = fp8_graph(use_causal_mask=True)
    g.validate()
    blob = g.serialize()
    summary = summarize(blob)
    assert summary.has_fp8
    assert required_api_version(is_override_shape_enabled=False, has_fp8=True) == FP8_API_VERSION
    assert FP8_API_VERSION == parse_api_version("1.5.0") > SOFTCAP_API_VERSION
    back = hipdnn.Graph.deserialize(blob)
    (node,) = back._nodes  # noqa: SLF001 - the round trip's node
    assert node.fp8 is not None
    assert [t.get_name() for t in node.fp8.inputs()] == list(FACTORS)
    assert node.fp8.amax_s.get_uid() == amax_s.get_uid() and node.fp8.amax_o.get_uid() == amax_o.get_uid()
    plain = hipdnn.Graph(name="plain", io_data_type=DT.FLOAT)
    x = plain.tensor(name="q", dim=[1, 2, 8, 4], data_type=DT.FLOAT)
    plain.sdpa(x, x, x)[0].set_output(True)
    plain.validate()
    assert not summarize(plain.serialize()).has_fp8


def test_the_filter_keeps_fp8_graphs_from_api_1_4_0_plugins(fakes, fake_handle_factory) -> None:
    """A plugin below 1.5.0 may read none of the FP8 fields and run a plain SDPA on the bytes: it is
    never asked."""
    g, _ = fp8_graph()
    h = fake_handle_factory("fake_override_v130", "fake_override_v140", "fake_override_v150")
    g.build(h)
    assert g.get_engine_id() == 9011
    for name in ("fake_override_v130", "fake_override_v140"):
        assert fakes[name].calls("GetApplicableEngineIds") == [], f"{name} was asked about an FP8 graph"
    h2 = fake_handle_factory("fake_override_v140")
    with pytest.raises(hipdnn.HipdnnError) as e:
        g.build(h2)
    assert e.value.code == hipdnn.ErrorCode.GRAPH_NOT_SUPPORTED
    assert "fake_override_v140 (api 1.4.0): api 1.4.0 < required 1.5.0" in e.value.message


def test_the_engines_declare_their_api_versions() -> None:
    """The CPU engine serves FP8 (1.5.0); engines/hip declares 1.4.0, so the filter keeps FP8 graphs
    from it (and its SDK call reports FP8 scaling as an extension it refuses)."""
    cpu = (ROOT / "engines/cpu/src/cpu_engine.cpp").read_text()
    hip = (ROOT / "engines/hip/src/hip_engine.cpp").read_text()
    found = [re.search(r'kApiVersion = "(\d+\.\d+\.\d+)"', src) for src in (cpu, hip)]
    assert found[0] is not None and found[1] is not None
    assert parse_api_version(found[0].group(1)) >= FP8_API_VERSION
    assert parse_api_version(found[1].group(1)) < FP8_API_VERSION


def test_ragged_tensors_are_refused() -> None:
    g = hipdnn.Graph(name="fp8_ragged", io_data_type=DT.FP8_E4M3)
    off = g.tensor(name="offsets", dim=[2, 1, 1, 1], stride=[1, 1, 1, 1], data_type=DT.INT32)
    q = g.tensor(name="q", dim=[1, 2, 8, 4], stride=[64, 4, 8, 1], data_type=DT.FP8_E4M3).set_ragged_offset(off)
    f = [g.tensor(name=n, dim=[1, 1, 1, 1], data_type=DT.FLOAT) for n in FACTORS]
    for t in g.sdpa_fp8(q, q, q, *f):
        if t is not None:
            t.set_output(True)
    with pytest.raises(hipdnn.HipdnnError, match="ragged tensors .* are not supported with FP8 scaling"):
        g.validate()
