"""FP8 attention backward (``Graph.sdpa_fp8_backward``, cudnn-frontend's ``sdpa_fp8_backward``) on the
CPU engine's reference, against a float64 reference written here from the definition
(hipdnn/frontend/ops/sdpa_fp8_backward.py, rfcs/0014-fp8-attention.md):

    delta = rowsum(dO o) descale_dO descale_o;  P = exp(S - stats), S = q k^T attn_scale descale_q descale_k;
    P8 = fp8(P scale_s);  dV' = P8^T dO descale_s descale_dO;  dP = dO v^T descale_dO descale_v;
    dS = P (dP - delta) attn_scale;  dS8 = fp8(dS scale_dP) in dO's type;
    dQ' = dS8 k descale_dP descale_k;  dK' = dS8^T q descale_dP descale_q;  X = X' scale_X in X's type,

each amax the largest |X'| (amax_dP: the largest |dS|). q, k, v, o, stats come from the FP8 forward's
reference (tests/cpu/test_sdpa_fp8.py) on random FP8 data, dO is random FP8 (E4M3 or E5M2, either with
either q type); odd shapes, GQA, the masks (causal both ways, windows, padding with empty sequences),
gradients in FP8 / FLOAT / HALF / BFLOAT16, BHSD and BSHD layouts, one max-shape plan served at smaller
shapes through overrides, outputs in NaN-filled buffers with guard regions, hypothesis over shapes,
factors and masks. A check that the definition is the gradient: with well-chosen scales the FP8
gradients are within FP8 error of the exact float64 gradient of attention. Also the frontend's rules,
the wire format and the plugin-version filter (FP8 backward graphs need API 1.6.0)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hipdnn
from hipdnn.backend.graph_summary import summarize
from hipdnn.plugins import FP8_API_VERSION, FP8_BACKWARD_API_VERSION, parse_api_version, required_api_version
from tests.cpu.test_sdpa_fp8 import FP8, guarded_out, out_round, out_storage, random_fp8, untouched, visible
from tests.cpu.test_sdpa_fp8 import Case as ForwardCase
from tests.cpu.test_sdpa_fp8 import reference as forward_reference

DT = hipdnn.DataType
FACTORS = (
    "descale_q",
    "descale_k",
    "descale_v",
    "descale_o",
    "descale_dO",
    "descale_s",
    "descale_dP",
    "scale_s",
    "scale_dQ",
    "scale_dK",
    "scale_dV",
    "scale_dP",
)
AMAX = ("amax_dQ", "amax_dK", "amax_dV", "amax_dP")
GRADS = ("dQ", "dK", "dV")


@pytest.fixture(scope="module")
def handle() -> Iterator[hipdnn.Handle]:
    h = hipdnn.Handle(device="cpu")
    yield h
    h.close()


def default_factors() -> dict[str, float]:
    return {
        "descale_q": 0.5,
        "descale_k": 0.25,
        "descale_v": 2.0,
        "descale_o": 1.0,
        "descale_dO": 0.125,
        "descale_s": 1.0 / 256,
        "descale_dP": 1.0 / 64,
        "scale_s": 256.0,
        "scale_dQ": 2.0,
        "scale_dK": 0.5,
        "scale_dV": 4.0,
        "scale_dP": 64.0,
    }


@dataclass
class Case:
    fmt: DT = DT.FP8_E4M3  # q, k, v (and P8)
    do_fmt: DT = DT.FP8_E5M2  # dO (and dS8)
    o_type: DT | None = None  # o as the forward wrote it (None: fmt)
    grad: DT | None = None  # dQ, dK, dV (None: the graph's io type, fmt)
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
    padding: list[tuple[int, int]] | None = None
    attn_scale: float = 0.25
    bshd: bool = False  # every tensor [B, S, H, D] in memory
    factors: dict[str, float] = field(default_factory=default_factors)

    @property
    def o_kind(self) -> DT:
        return self.o_type if self.o_type is not None else self.fmt

    @property
    def grad_kind(self) -> DT:
        return self.grad if self.grad is not None else self.fmt

    def forward(self) -> ForwardCase:
        f = self.factors
        return ForwardCase(
            fmt=self.fmt,
            out=self.o_type,
            b=self.b,
            hq=self.hq,
            hk=self.hk,
            sq=self.sq,
            skv=self.skv,
            d=self.d,
            dv=self.dv,
            causal=self.causal,
            bottom_right=self.bottom_right,
            left=self.left,
            padding=self.padding,
            attn_scale=self.attn_scale,
            # the forward's o = O' scale_o: descale_o undoes it
            factors=(f["descale_q"], f["descale_k"], f["descale_v"], f["descale_s"], f["scale_s"], 1 / f["descale_o"]),
        )


def f32(x: float) -> float:
    return float(np.float32(x))


def reference(c: Case, x: dict[str, np.ndarray]) -> dict[str, Any]:
    """The definition in float64, in the engine's order of the scalar products (so that the values
    quantized to FP8 are the engine's: every product of FP8 values is exact in double)."""
    f = {n: f32(v) for n, v in c.factors.items()}
    attn = f32(c.attn_scale)
    g = c.hq // c.hk
    q, k, v, o, do = (x[n].astype(np.float64) for n in ("q", "k", "v", "o", "dO"))
    kr, vr = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    mask = np.stack([visible(c.forward(), b) for b in range(c.b)])[:, None]
    lse = x["stats"].astype(np.float64)
    live = mask & (lse != -np.inf)
    s = (q @ kr.transpose(0, 1, 3, 2)) * (attn * f["descale_q"] * f["descale_k"])
    with np.errstate(invalid="ignore", over="ignore"):
        p = np.where(live, np.exp(s - np.where(live, lse, 0.0)), 0.0)
    delta = (do * o).sum(axis=-1, keepdims=True) * f["descale_dO"] * f["descale_o"]
    dp = (do @ vr.transpose(0, 1, 3, 2)) * f["descale_dO"] * f["descale_v"]
    ds = np.where(live, p * (dp - delta) * attn, 0.0)
    ds8 = FP8_ROUND(ds * f["scale_dP"], c.do_fmt)
    p8 = FP8_ROUND(p * f["scale_s"], c.fmt)
    pre = {
        "dQ": (ds8 @ kr) * f["descale_dP"] * f["descale_k"],
        "dK": (ds8.transpose(0, 1, 3, 2) @ q).reshape(c.b, c.hk, g, c.skv, c.d).sum(axis=2)
        * f["descale_dP"]
        * f["descale_q"],
        "dV": (p8.transpose(0, 1, 3, 2) @ do).reshape(c.b, c.hk, g, c.skv, c.dv).sum(axis=2)
        * f["descale_s"]
        * f["descale_dO"],
    }
    out: dict[str, Any] = {n: out_round(pre[n] * f["scale_" + n], c.grad_kind) for n in GRADS}
    out["pre"] = pre
    for n in GRADS:
        out["amax_" + n] = np.abs(pre[n]).max()
    out["amax_dP"] = np.abs(ds).max()
    return out


def FP8_ROUND(x: np.ndarray, dt: DT) -> np.ndarray:  # noqa: N802 - the definition's fp8()
    storage, top = FP8[dt]
    return np.clip(x, -top, top).astype(storage).astype(np.float64)


def dims_of(c: Case) -> dict[str, list[int]]:
    return {
        "q": [c.b, c.hq, c.sq, c.d],
        "k": [c.b, c.hk, c.skv, c.d],
        "v": [c.b, c.hk, c.skv, c.dv],
        "o": [c.b, c.hq, c.sq, c.dv],
        "dO": [c.b, c.hq, c.sq, c.dv],
        "stats": [c.b, c.hq, c.sq, 1],
        "dQ": [c.b, c.hq, c.sq, c.d],
        "dK": [c.b, c.hk, c.skv, c.d],
        "dV": [c.b, c.hk, c.skv, c.dv],
    }


def strides_of(dims: list[int], bshd: bool) -> list[int]:
    b, h, s, d = dims
    return [s * h * d, d, h * d, 1] if bshd else [h * s * d, s * d, d, 1]


def build(c: Case, max_shape: Case | None = None) -> tuple[hipdnn.Graph, dict[str, Any]]:
    top = max_shape or c
    g = hipdnn.Graph(
        name="sdpa_fp8_backward",
        io_data_type=c.fmt,
        intermediate_data_type=DT.FLOAT,
        compute_data_type=DT.FLOAT,
        is_override_shape_enabled=max_shape is not None,
    )
    t: dict[str, Any] = {}
    types = {"q": c.fmt, "k": c.fmt, "v": c.fmt, "o": c.o_kind, "dO": c.do_fmt, "stats": DT.FLOAT}
    for n, dims in dims_of(top).items():
        if n in types:
            t[n] = g.tensor(name=n, dim=dims, stride=strides_of(dims, top.bshd), data_type=types[n])
    for n in FACTORS:
        t[n] = g.tensor(name=n, dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=DT.FLOAT)
    kw: dict[str, Any] = {"attn_scale": c.attn_scale}
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
    outs = g.sdpa_fp8_backward(*(t[n] for n in ("q", "k", "v", "o", "dO", "stats")), *(t[n] for n in FACTORS), **kw)
    for n, out in zip(GRADS + AMAX, outs):
        out.set_output(True)
        t[n] = out
    for n in GRADS:
        dims = dims_of(top)[n]
        t[n].set_dim(dims).set_stride(strides_of(dims, top.bshd))
        if c.grad is not None:
            t[n].set_data_type(c.grad)
    return g, t


def inputs(c: Case, seed: int) -> dict[str, np.ndarray]:
    """q, k, v random FP8; o and stats from the FP8 forward's reference; dO random FP8."""
    rng = np.random.default_rng(seed)
    x = {
        "q": random_fp8((c.b, c.hq, c.sq, c.d), c.fmt, rng),
        "k": random_fp8((c.b, c.hk, c.skv, c.d), c.fmt, rng),
        "v": random_fp8((c.b, c.hk, c.skv, c.dv), c.fmt, rng),
        "dO": random_fp8((c.b, c.hq, c.sq, c.dv), c.do_fmt, rng),
    }
    fwd = forward_reference(c.forward(), x["q"], x["k"], x["v"])
    x["o"] = fwd["o"].astype(out_storage(c.o_kind))
    x["stats"] = fwd["stats"].astype(np.float32)
    return x


def placed(x: np.ndarray, bshd: bool) -> np.ndarray:
    """x [B, H, S, D] in memory as the graph declares it (a view into a BSHD buffer when bshd)."""
    return np.ascontiguousarray(x.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3) if bshd else np.ascontiguousarray(x)


def run(
    handle: hipdnn.Handle, c: Case, g: hipdnn.Graph, t: dict[str, Any], seed: int, overrides: bool
) -> dict[str, Any]:
    x = inputs(c, seed)
    pack: dict[Any, Any] = {t[n]: placed(a, c.bshd) for n, a in x.items()}
    for n in FACTORS:
        pack[t[n]] = np.full((1, 1, 1, 1), c.factors[n], np.float32)
    dims = dims_of(c)
    bufs = {}
    for n in GRADS:
        bufs[n] = guarded_out(dims[n], strides_of(dims[n], c.bshd), out_storage(c.grad_kind))
        pack[t[n]] = bufs[n][1]
    amax = {n: np.full((1, 1, 1, 1), np.nan, np.float32) for n in AMAX}
    pack.update({t[n]: a for n, a in amax.items()})
    if c.padding is not None:
        for i, n in enumerate(("seq_len_q", "seq_len_kv")):
            pack[t[n]] = np.array([p[i] for p in c.padding], np.int32).reshape(c.b, 1, 1, 1)
    ov = {}
    if overrides:
        for n in ("q", "k", "v", "o", "dO", "stats", "dQ", "dK", "dV"):
            ov[t[n]] = hipdnn.OverrideEntry(shape=dims[n], stride=strides_of(dims[n], c.bshd))
        if c.padding is not None:
            for n in ("seq_len_q", "seq_len_kv"):
                ov[t[n]] = hipdnn.OverrideEntry(shape=[c.b, 1, 1, 1], stride=[1, 1, 1, 1])
    g.execute(handle, pack, np.empty(g.get_workspace_size(), np.uint8), overrides=ov or None)
    want = reference(c, x)
    for n in GRADS:
        base, view = bufs[n]
        got = view.astype(np.float64)
        assert not np.isnan(got).any(), f"an element of {n} was not written"
        assert untouched(base, view), f"a write landed outside {n}"
        if c.grad_kind in FP8:
            bad = got != want[n]
            # a sum landing on an FP8 tie in another order: at most a few elements, by one step
            assert bad.mean() <= 0.002, f"{int(bad.sum())} of {bad.size} elements of {n} differ"
            quantum = FP8_ROUND(np.abs(want[n]) * 2.0**-2, c.grad_kind)
            assert (np.abs(got - want[n])[bad] <= np.maximum(quantum[bad], 2.0**-9)).all()
        else:
            tol = {DT.FLOAT: 1e-6, DT.HALF: 1e-3, DT.BFLOAT16: 8e-3}[c.grad_kind]
            assert np.abs(got - want[n]).max() <= tol * max(1.0, np.abs(want[n]).max()), n
    for n in AMAX:
        # (against the reference as fp32 holds it: an amax below 2^-126 is a subnormal, whose spacing
        # is far coarser than the relative tolerance)
        assert np.isclose(amax[n].item(), np.float32(want[n]), rtol=1e-6, atol=0.0), (n, amax[n].item(), want[n])
    return want


CASES = {
    "e4m3_do_e5m2": Case(),
    "e4m3_do_e4m3": Case(do_fmt=DT.FP8_E4M3),
    "e5m2": Case(fmt=DT.FP8_E5M2),
    "causal": Case(causal=True),
    "causal_br_longer_kv": Case(causal=True, bottom_right=True, sq=37, skv=129),
    "window_br": Case(left=9, bottom_right=True, causal=True),
    "window_tl": Case(left=5),
    "padding_with_empty": Case(padding=[(0, 53), (20, 0)]),
    "padding_causal_br": Case(padding=[(37, 40), (5, 53)], causal=True, bottom_right=True),
    "mqa_dv_differs": Case(hq=3, hk=1, dv=8, d=24),
    "decode": Case(sq=1, skv=129, causal=True, bottom_right=True),
    "grads_float": Case(grad=DT.FLOAT),
    "grads_bf16_o_bf16": Case(grad=DT.BFLOAT16, o_type=DT.BFLOAT16),
    "grads_half_o_float": Case(grad=DT.HALF, o_type=DT.FLOAT),
    "bshd": Case(bshd=True, grad=DT.FLOAT),
    "bshd_fp8": Case(bshd=True, causal=True),
    "single": Case(b=1, hq=1, hk=1, sq=1, skv=1, d=1, dv=1),
}


@pytest.mark.parametrize("name", list(CASES))
def test_values(handle: hipdnn.Handle, name: str) -> None:
    c = CASES[name]
    g, t = build(c)
    g.build(handle)
    assert g.get_engine_id() == 101
    run(handle, c, g, t, seed=len(name), overrides=False)


def test_saturation_of_ds8_and_of_the_gradients(handle: hipdnn.Handle) -> None:
    """scale_dP and scale_dQ far too large: dS8 and dQ saturate at FP8's largest value (448), not NaN."""
    c = Case(factors={**default_factors(), "scale_dP": 2.0**14, "descale_dP": 2.0**-14, "scale_dQ": 2.0**12})
    g, t = build(c)
    g.build(handle)
    want = run(handle, c, g, t, seed=3, overrides=False)
    assert want["amax_dP"] * c.factors["scale_dP"] > 448.0
    assert np.abs(want["dQ"]).max() == 448.0


def test_one_max_shape_plan_serves_smaller_calls(handle: hipdnn.Handle) -> None:
    top = Case(b=3, hq=4, hk=2, sq=129, skv=129, causal=True, bottom_right=True, padding=[(129, 129)] * 3)
    g, t = build(top, max_shape=top)
    g.build(handle)
    for i, (b, sq, skv, pad) in enumerate(
        [(1, 1, 1, [(1, 1)]), (2, 37, 53, [(37, 53), (0, 10)]), (3, 129, 129, [(100, 129), (129, 7), (1, 1)])]
    ):
        run(handle, replace(top, b=b, sq=sq, skv=skv, padding=pad), g, t, seed=i, overrides=True)


def test_the_definition_is_the_gradient(handle: hipdnn.Handle) -> None:
    """With scales set from the tensors' ranges (as a delayed-scaling recipe would), the FP8 backward's
    FLOAT gradients are within FP8 rounding error of attention's exact float64 gradient: the descale /
    scale factors enter where they should."""
    c = Case(b=1, hq=2, hk=1, sq=29, skv=41, d=32, dv=32, causal=True, bottom_right=True, grad=DT.FLOAT)
    rng = np.random.default_rng(11)
    real = {n: rng.standard_normal(dims) for n, dims in dims_of(c).items() if n in ("q", "k", "v", "dO")}
    f = default_factors()
    fmt = {"q": c.fmt, "k": c.fmt, "v": c.fmt, "dO": c.do_fmt}
    x: dict[str, np.ndarray] = {}
    for n, a in real.items():  # per-tensor scaling: the largest magnitude at a quarter of FP8's range
        f["descale_" + ("dO" if n == "dO" else n)] = desc = float(np.float32(np.abs(a).max() / (FP8[fmt[n]][1] / 4)))
        x[n] = (a / desc).astype(FP8[fmt[n]][0])
        real[n] = x[n].astype(np.float64) * desc  # what the FP8 values stand for
    g_ = c.hq // c.hk
    kr, vr = np.repeat(real["k"], g_, 1), np.repeat(real["v"], g_, 1)
    s = real["q"] @ kr.transpose(0, 1, 3, 2) * f32(c.attn_scale)
    s = np.where(visible(c.forward(), 0)[None, None], s, -np.inf)
    lse = np.log(np.exp(s - s.max(-1, keepdims=True)).sum(-1, keepdims=True)) + s.max(-1, keepdims=True)
    p = np.exp(s - lse)
    o = p @ vr
    dp = real["dO"] @ vr.transpose(0, 1, 3, 2)
    ds = p * (dp - (real["dO"] * o).sum(-1, keepdims=True)) * f32(c.attn_scale)
    exact = {
        "dQ": ds @ kr,
        "dK": (ds.transpose(0, 1, 3, 2) @ real["q"]).reshape(1, 1, g_, c.skv, c.d).sum(2),
        "dV": (p.transpose(0, 1, 3, 2) @ real["dO"]).reshape(1, 1, g_, c.skv, c.dv).sum(2),
    }
    f.update(descale_o=1.0, scale_s=448.0, descale_s=1 / 448.0, scale_dQ=1.0, scale_dK=1.0, scale_dV=1.0)
    f["scale_dP"] = 448.0 / np.abs(ds).max()
    f["descale_dP"] = 1.0 / f["scale_dP"]
    c = replace(c, o_type=DT.FLOAT, factors=f)
    g, t = build(c)
    g.build(handle)
    pack: dict[Any, Any] = {t[n]: a for n, a in x.items()}
    pack[t["o"]] = o.astype(np.float32)
    pack[t["stats"]] = lse.astype(np.float32)
    pack.update({t[n]: np.full((1, 1, 1, 1), f[n], np.float32) for n in FACTORS})
    got = {n: np.full(dims_of(c)[n], np.nan, np.float32) for n in GRADS}
    pack.update({t[n]: got[n] for n in GRADS})
    pack.update({t[n]: np.zeros((1, 1, 1, 1), np.float32) for n in AMAX})
    g.execute(handle, pack, np.empty(g.get_workspace_size(), np.uint8))
    for n in GRADS:
        err = np.linalg.norm(got[n] - exact[n]) / np.linalg.norm(exact[n])
        assert err < 0.08, (n, err)  # E4M3 / E5M2 rounding of P and dS: a few percent


@st.composite
def cases(draw: st.DrawFn) -> Case:
    hk = draw(st.integers(1, 2))
    sq, skv = draw(st.integers(1, 24)), draw(st.integers(1, 24))
    b = draw(st.integers(1, 2))
    padding = None
    if draw(st.booleans()):
        padding = [(draw(st.integers(0, sq)), draw(st.integers(0, skv))) for _ in range(b)]
    f = default_factors()
    for n in ("descale_q", "descale_k", "descale_v", "descale_dO"):
        f[n] = draw(st.sampled_from([0.125, 0.5, 1.0, 3.0]))
    f["scale_s"] = draw(st.sampled_from([16.0, 256.0, 448.0]))
    f["descale_s"] = 1 / f["scale_s"]
    f["scale_dP"] = draw(st.sampled_from([1.0, 16.0, 256.0, 4096.0]))
    f["descale_dP"] = 1 / f["scale_dP"]
    for n in ("scale_dQ", "scale_dK", "scale_dV"):
        f[n] = draw(st.sampled_from([0.25, 1.0, 8.0]))
    return Case(
        fmt=draw(st.sampled_from([DT.FP8_E4M3, DT.FP8_E5M2])),
        do_fmt=draw(st.sampled_from([DT.FP8_E4M3, DT.FP8_E5M2])),
        o_type=draw(st.sampled_from([None, DT.FLOAT])),
        grad=draw(st.sampled_from([None, DT.FLOAT])),
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
        bshd=draw(st.booleans()),
        factors=f,
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(c=cases(), seed=st.integers(0, 1000))
def test_hypothesis(handle: hipdnn.Handle, c: Case, seed: int) -> None:
    g, t = build(c)
    g.build(handle)
    run(handle, c, g, t, seed=seed, overrides=False)


# ------------------------------------------------------------------------------------- refusals
def bwd_graph(
    q_type: DT = DT.FP8_E4M3,
    do_type: DT = DT.FP8_E5M2,
    o_type: DT = DT.FP8_E4M3,
    factor_dims: list[int] | None = None,
    **kw: Any,
) -> tuple[hipdnn.Graph, list[Any]]:
    g = hipdnn.Graph(name="fp8_bwd_rules", io_data_type=DT.FP8_E4M3, compute_data_type=DT.FLOAT)
    q = g.tensor(name="q", dim=[1, 2, 8, 4], data_type=q_type)
    k = g.tensor(name="k", dim=[1, 2, 8, 4], data_type=DT.FP8_E4M3)
    v = g.tensor(name="v", dim=[1, 2, 8, 4], data_type=DT.FP8_E4M3)
    o = g.tensor(name="o", dim=[1, 2, 8, 4], data_type=o_type)
    do = g.tensor(name="dO", dim=[1, 2, 8, 4], data_type=do_type)
    stats = g.tensor(name="stats", dim=[1, 2, 8, 1], data_type=DT.FLOAT)
    dims = factor_dims or [1, 1, 1, 1]
    f = [g.tensor(name=n, dim=dims, data_type=DT.FLOAT) for n in FACTORS]
    outs = g.sdpa_fp8_backward(q, k, v, o, do, stats, *f, **kw)
    for out in outs:
        out.set_output(True)
    return g, list(outs)


@pytest.mark.parametrize(
    ("kw", "fragment"),
    [
        ({"q_type": DT.BFLOAT16}, "q 'q' has data type BFLOAT16; sdpa_fp8_backward takes FP8_E4M3 or FP8_E5M2"),
        ({"q_type": DT.FP8_E5M2}, "q, k and v must share one FP8 type"),
        ({"do_type": DT.BFLOAT16}, "dO 'dO' has data type BFLOAT16; sdpa_fp8_backward takes FP8"),
        ({"o_type": DT.INT32}, "o 'o' has data type INT32"),
        ({"factor_dims": [1, 1, 2, 1]}, "descale_q 'descale_q' must hold one value"),
        ({"use_alibi_mask": True}, "ALiBi is not supported with FP8 scaling (sdpa_fp8_backward)"),
        ({"softcap": 30.0}, "softcapping is not supported with FP8 scaling"),
    ],
)
def test_rules_are_checked_at_validation(kw: dict[str, Any], fragment: str) -> None:
    g, _ = bwd_graph(**kw)
    with pytest.raises(hipdnn.HipdnnError) as e:
        g.validate()
    assert e.value.code == hipdnn.ErrorCode.INVALID_VALUE
    assert fragment in e.value.message


@pytest.mark.parametrize(
    ("option", "dims", "fragment"),
    [("bias", [1, 1, 8, 8], "a bias is not supported with FP8 scaling"), ("attn_scale", [1, 1, 1, 1], "as a number")],
)
def test_option_tensors_it_is_not_defined_with_are_refused(option: str, dims: list[int], fragment: str) -> None:
    g = hipdnn.Graph(name="fp8_bwd_option_tensor", io_data_type=DT.FP8_E4M3)
    x = g.tensor(name="x", dim=[1, 2, 8, 4], data_type=DT.FP8_E4M3)
    stats = g.tensor(name="stats", dim=[1, 2, 8, 1], data_type=DT.FLOAT)
    f = [g.tensor(name=n, dim=[1, 1, 1, 1], data_type=DT.FLOAT) for n in FACTORS]
    extra = g.tensor(name=option, dim=dims, data_type=DT.FLOAT)
    for out in g.sdpa_fp8_backward(x, x, x, x, x, stats, *f, **{option: extra}):
        out.set_output(True)
    with pytest.raises(hipdnn.HipdnnError, match=fragment):
        g.validate()


def test_forward_only_options_are_refused() -> None:
    with pytest.raises(hipdnn.HipdnnError, match="generate_stats: forward-only option"):
        bwd_graph(generate_stats=True)


def test_ragged_tensors_are_refused() -> None:
    g = hipdnn.Graph(name="fp8_bwd_ragged", io_data_type=DT.FP8_E4M3)
    off = g.tensor(name="offsets", dim=[2, 1, 1, 1], stride=[1, 1, 1, 1], data_type=DT.INT32)
    q = g.tensor(name="q", dim=[1, 2, 8, 4], stride=[64, 4, 8, 1], data_type=DT.FP8_E4M3).set_ragged_offset(off)
    stats = g.tensor(name="stats", dim=[1, 2, 8, 1], data_type=DT.FLOAT)
    f = [g.tensor(name=n, dim=[1, 1, 1, 1], data_type=DT.FLOAT) for n in FACTORS]
    for out in g.sdpa_fp8_backward(q, q, q, q, q, stats, *f):
        out.set_output(True)
    with pytest.raises(hipdnn.HipdnnError, match="ragged tensors .* are not supported with FP8 scaling"):
        g.validate()


def test_outputs_are_inferred() -> None:
    g, outs = bwd_graph()
    g.validate()
    dq, dk, dv, *amax = outs
    for grad in (dq, dk, dv):
        assert grad.get_data_type() == DT.FP8_E4M3 and grad.get_dim() == [1, 2, 8, 4]
    for a in amax:
        assert a.get_data_type() == DT.FLOAT and a.get_dim() == [1, 1, 1, 1]
    assert [a.get_name() for a in amax] == [f"sdpa_fp8_backward_0::{n[0].upper()}{n[1:]}" for n in AMAX]


# --------------------------------------------------------------------- wire format and versions
def test_the_wire_carries_every_tensor_and_asks_for_api_1_6_0() -> None:
    g, outs = bwd_graph(use_causal_mask=True)
    g.validate()
    blob = g.serialize()
    summary = summarize(blob)
    assert summary.has_fp8_backward and not summary.has_fp8
    assert summary.required_api_version() == FP8_BACKWARD_API_VERSION
    assert required_api_version(is_override_shape_enabled=False, has_fp8_backward=True) == FP8_BACKWARD_API_VERSION
    assert FP8_BACKWARD_API_VERSION == parse_api_version("1.6.0") > FP8_API_VERSION
    back = hipdnn.Graph.deserialize(blob)
    (node,) = back._nodes  # noqa: SLF001 - the round trip's node
    assert node.fp8 is not None
    assert [t.get_name() for t in node.fp8.inputs()] == list(FACTORS)
    assert [t.get_uid() for t in node.fp8.outputs()] == [a.get_uid() for a in outs[3:]]
    assert node.options.use_causal_mask


def test_a_partial_set_of_fp8_fields_is_refused_when_read() -> None:
    """A wire node naming only some of the sixteen tensors is not an FP8 backward; reading it fails
    naming what is missing (the CPU engine refuses it too, through the SDK's completeness check)."""
    from hipdnn.frontend.ops.sdpa_fp8_backward import read_fp8_backward
    from hipdnn.wire.SdpaBackwardAttributes import SdpaBackwardAttributesT

    table = SdpaBackwardAttributesT()
    table.descaleQTensorUid = 5
    with pytest.raises(hipdnn.HipdnnError, match="lacks the descale_k, descale_v"):
        read_fp8_backward(table, lambda uid: uid)
    assert read_fp8_backward(SdpaBackwardAttributesT(), lambda uid: uid) is None


def test_the_filter_keeps_fp8_backward_graphs_from_api_1_5_0_plugins(fakes, fake_handle_factory) -> None:
    """A 1.5.0 plugin knows the FP8 forward but not the backward's fields, and would run a plain
    backward on the FP8 bytes: it is never asked."""
    g, _ = bwd_graph()
    h = fake_handle_factory("fake_override_v140", "fake_override_v150", "fake_override_v160")
    g.build(h)
    assert g.get_engine_id() == 9012
    for name in ("fake_override_v140", "fake_override_v150"):
        assert fakes[name].calls("GetApplicableEngineIds") == [], f"{name} was asked about an FP8 backward"
    with pytest.raises(hipdnn.HipdnnError) as e:
        bwd_graph()[0].build(fake_handle_factory("fake_override_v150"))
    assert e.value.code == hipdnn.ErrorCode.GRAPH_NOT_SUPPORTED
    assert "fake_override_v150 (api 1.5.0): api 1.5.0 < required 1.6.0" in e.value.message


def test_preferring_a_1_5_0_engine_for_an_fp8_backward_says_why(fake_handle_factory) -> None:
    g2 = hipdnn.Graph(name="fp8_bwd_pref", io_data_type=DT.FP8_E4M3, preferred_engine_id=9011)
    x = g2.tensor(name="x", dim=[1, 2, 8, 4], data_type=DT.FP8_E4M3)
    stats = g2.tensor(name="stats", dim=[1, 2, 8, 1], data_type=DT.FLOAT)
    f = [g2.tensor(name=n, dim=[1, 1, 1, 1], data_type=DT.FLOAT) for n in FACTORS]
    for out in g2.sdpa_fp8_backward(x, x, x, x, x, stats, *f):
        out.set_output(True)
    with pytest.raises(hipdnn.HipdnnError) as e:
        g2.build(fake_handle_factory("fake_override_v150", "fake_override_v160"))
    assert "needs 1.6.0 (it has an FP8 attention backward (sdpa_fp8_backward))" in str(e.value)


def test_the_cpu_engine_checks_the_fp8_tensors_itself(handle: hipdnn.Handle) -> None:
    """Graphs the frontend would not write, read by the engine through the C ABI: a factor of two
    elements is refused per call by the engine's shape rules, not read past its end."""
    c = Case(b=1, hq=1, hk=1, sq=4, skv=4, d=4, dv=4)
    g, t = build(c, max_shape=c)
    g.build(handle)
    x = inputs(c, 0)
    pack: dict[Any, Any] = {t[n]: a for n, a in x.items()}
    pack.update({t[n]: np.ones((1, 1, 1, 1), np.float32) for n in FACTORS})
    pack.update({t[n]: np.zeros(dims_of(c)[n], out_storage(c.grad_kind)) for n in GRADS})
    pack.update({t[n]: np.zeros((1, 1, 1, 1), np.float32) for n in AMAX})
    two = np.ones((1, 1, 1, 2), np.float32)
    pack[t["scale_dQ"]] = two
    with pytest.raises(hipdnn.HipdnnError, match="scale_dQ|one element|shape"):
        g.execute(
            handle,
            pack,
            np.empty(g.get_workspace_size(), np.uint8),
            overrides={t["scale_dQ"]: hipdnn.OverrideEntry(shape=[1, 1, 1, 2], stride=[2, 2, 2, 1])},
        )
