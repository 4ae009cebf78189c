"""Score softcapping (``softcap=c``: Gemma 2's ``attn_logit_softcapping``, FlashAttention's ``softcap``)
on the CPU engine, forward and backward, against float64 references written here from the definition:

    u = attn_scale q k^T,  t = tanh(u / c),  s = c t  (+ bias, + ALiBi, then every mask),
    P = softmax(s) over the visible keys of each row (0 elsewhere; a row with none gives o = 0, stats -inf),
    o = P v,  stats = log-sum-exp of s;
    dV = P^T dO,  dP = dO V^T,  dS = P (dP - rowsum(dO o)),  dU = dS (1 - t^2),
    dQ = attn_scale dU K,  dK = attn_scale dU^T Q  (GQA / MQA: kv heads sum over their query heads).

The analytic gradients are themselves checked against central finite differences of the float64 forward.
Random data, odd shapes (1, 37, 129), caps small enough to bite (0.5-20 against scores of a few units),
outputs in NaN-filled buffers with guard regions, every ISA build this machine has, combined with causal
masks (both alignments), a bias, sliding windows, padding, ALiBi, GQA, bf16, the decode (rows) kernel
and its key chunks, and the ragged / paged (varlen) path; hypothesis over shapes, masks and c. Also the
frontend's validation, the wire format, and the plugin-version filter (softcap graphs need API 1.4.0).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hipdnn
from hipdnn.backend.graph_summary import summarize
from hipdnn.plugins import RAGGED_PAGED_API_VERSION, SOFTCAP_API_VERSION, parse_api_version, required_api_version
from tests.cpu.test_sdpa_modes import (
    alibi_slopes,
    decode,
    encode,
    guarded,
    layout_strides,
    storage,
    untouched_outside,
)

DT = hipdnn.DataType
ROOT = Path(__file__).resolve().parents[2]
#: o and stats: error relative to max(1, max |o|); gradients: relative to max(1, max |grad|)
TOL = {DT.FLOAT: 3e-5, DT.BFLOAT16: 2e-2}
GRAD_TOL = {DT.FLOAT: 1e-4, DT.BFLOAT16: 4e-2}


# ------------------------------------------------------------------------------------ reference
@dataclass
class Case:
    cap: float = 5.0
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
    padding: bool = False
    seq_q: list[int] = field(default_factory=list)
    seq_kv: list[int] = field(default_factory=list)
    bias: bool = False
    alibi: bool = False
    #: the scale; scores s = scale q.k reach a few units with standard normal q, k at D = 16
    scale: float = 0.5


def visible(c: Case) -> np.ndarray:
    """[B, 1, Sq, Skv]: which keys each query sees (masks and padding)."""
    i = np.arange(c.sq)[:, None]
    j = np.arange(c.skv)[None, :]
    vis = np.zeros((c.b, 1, c.sq, c.skv), dtype=bool)
    for bi in range(c.b):
        sqb = min(c.seq_q[bi], c.sq) if c.padding else c.sq
        skvb = min(c.seq_kv[bi], c.skv) if c.padding else c.skv
        shift = skvb - sqb if c.bottom_right else 0
        v = (i < sqb) & (j < skvb)
        if c.causal:
            v &= j <= i + shift
        if c.left is not None:
            v &= j > i - c.left + shift
        vis[bi, 0] = v
    return vis


def ref_forward(c: Case, q, k, v, bias=None):
    """o, stats, and what the backward needs (P, t), all float64, from the definition."""
    g = c.hq // c.hk
    kk, vv = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    u = np.einsum("bhqd,bhkd->bhqk", q, kk) * c.scale
    t = np.tanh(u / c.cap)
    s = c.cap * t  # softcapping first ...
    if bias is not None:  # ... then the bias, ALiBi and the masks
        s = s + bias
    if c.alibi:
        i, j = np.arange(c.sq)[:, None], np.arange(c.skv)[None, :]
        s = s + alibi_slopes(c.hq)[None, :, None, None] * (j - i)[None, None]
    vis = np.broadcast_to(visible(c), s.shape)
    s = np.where(vis, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    live = np.isfinite(m)
    p = np.where(vis, np.exp(s - np.where(live, m, 0.0)), 0.0)
    den = p.sum(axis=-1, keepdims=True)
    p = p / np.where(live, den, 1.0)
    o = p @ vv
    lse = np.where(live, m + np.log(np.where(live, den, 1.0)), -np.inf)
    return o, lse, p, t


def ref_backward(c: Case, q, k, v, do, bias=None):
    o, _, p, t = ref_forward(c, q, k, v, bias)
    g = c.hq // c.hk
    kk, vv = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    dv = np.einsum("bhqk,bhqd->bhkd", p, do)
    dp = np.einsum("bhqd,bhkd->bhqk", do, vv)
    ds = p * (dp - (do * o).sum(axis=-1, keepdims=True))
    du = ds * (1.0 - t * t)  # the softcap's derivative
    dq = c.scale * np.einsum("bhqk,bhkd->bhqd", du, kk)
    dk = c.scale * np.einsum("bhqk,bhqd->bhkd", du, q)
    fold = lambda x: x.reshape(c.b, c.hk, g, *x.shape[2:]).sum(axis=2)  # noqa: E731
    return dq, fold(dk), fold(dv)


def test_the_reference_gradients_match_finite_differences() -> None:
    """The closed-form gradients above (softcap derivative included) against central differences of
    L = sum(o dO) through the float64 forward, with a cap that bends the scores hard."""
    c = Case(cap=0.7, b=1, hq=2, hk=1, sq=3, skv=4, d=3, dv=2, causal=True, bottom_right=True, bias=True, alibi=True)
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((1, 2, 3, 3)) * 2, rng.standard_normal((1, 1, 4, 3)) * 2
    v, do = rng.standard_normal((1, 1, 4, 2)), rng.standard_normal((1, 2, 3, 2))
    bias = rng.standard_normal((1, 2, 3, 4))
    grads = ref_backward(c, q, k, v, do, bias)
    for x, gx in zip((q, k, v), grads):
        num = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            h = 1e-6
            x[idx] += h
            hi = (ref_forward(c, q, k, v, bias)[0] * do).sum()
            x[idx] -= 2 * h
            lo = (ref_forward(c, q, k, v, bias)[0] * do).sum()
            x[idx] += h
            num[idx] = (hi - lo) / (2 * h)
        assert np.abs(num - gx).max() < 1e-7 * max(1.0, np.abs(gx).max())
    # and the cap changed the gradient: without it the same data gives another one
    uncapped = ref_backward(replace(c, cap=1e9), q, k, v, do, bias)
    assert np.abs(uncapped[0] - grads[0]).max() > 1e-2


# ------------------------------------------------------------------------------------- running
def graph_options(c: Case, g: hipdnn.Graph, pack: dict, rng: np.random.Generator) -> tuple[dict, Any]:
    extra: dict[str, Any] = {
        "attn_scale": c.scale,
        "softcap": c.cap,
        "use_causal_mask": c.causal,
        "diagonal_alignment": hipdnn.DiagonalAlignment.BOTTOM_RIGHT
        if c.bottom_right
        else hipdnn.DiagonalAlignment.TOP_LEFT,
        "diagonal_band_left_bound": c.left,
        "use_alibi_mask": c.alibi,
    }
    if c.padding:
        tsq = g.tensor(name="seq_q", dim=[c.b, 1, 1, 1], stride=[1, 1, 1, 1], data_type=DT.INT32)
        tskv = g.tensor(name="seq_kv", dim=[c.b, 1, 1, 1], stride=[1, 1, 1, 1], data_type=DT.INT32)
        pack[tsq] = np.array(c.seq_q, np.int32).reshape(c.b, 1, 1, 1)
        pack[tskv] = np.array(c.seq_kv, np.int32).reshape(c.b, 1, 1, 1)
        extra.update(use_padding_mask=True, seq_len_q=tsq, seq_len_kv=tskv)
    bias = None
    if c.bias:
        bd = [c.b, c.hq, c.sq, c.skv]
        tb = g.tensor(name="bias", dim=bd, data_type=c.dt)
        bias = decode(encode(rng.standard_normal(bd).astype(np.float32), c.dt), c.dt)
        pack[tb] = encode(bias.astype(np.float32), c.dt)
        extra["bias"] = tb
    return extra, bias


def inputs(c: Case, rng: np.random.Generator) -> dict[str, np.ndarray]:
    dims = {"q": [c.b, c.hq, c.sq, c.d], "k": [c.b, c.hk, c.skv, c.d], "v": [c.b, c.hk, c.skv, c.dv]}
    dims["do"] = [c.b, c.hq, c.sq, c.dv]
    return {n: decode(encode(rng.standard_normal(d).astype(np.float32), c.dt), c.dt) for n, d in dims.items()}


def run_forward(handle: hipdnn.Handle, c: Case, seed: int = 0, cap_matters: bool = True) -> None:
    rng = np.random.default_rng(seed)
    vals = inputs(c, rng)
    g = hipdnn.Graph(name="softcap", io_data_type=c.dt, intermediate_data_type=DT.FLOAT, compute_data_type=DT.FLOAT)
    pack: dict[Any, Any] = {}
    t = {}
    for n in ("q", "k", "v"):
        dims = list(vals[n].shape)
        strides = layout_strides(c.layout, dims)
        t[n] = g.tensor(name=n, dim=dims, stride=strides, data_type=c.dt)
        pack[t[n]] = guarded(dims, strides, storage(c.dt), encode(vals[n].astype(np.float32), c.dt))[1]
    extra, bias = graph_options(c, g, pack, rng)
    o, stats = g.sdpa(t["q"], t["k"], t["v"], generate_stats=True, **extra)
    od = [c.b, c.hq, c.sq, c.dv]
    os_ = layout_strides(c.layout, od)
    o.set_output(True).set_stride(os_)
    assert stats is not None
    stats.set_output(True)
    g.build(handle)
    obase, oview = guarded(od, os_, storage(c.dt))
    sbase, sview = guarded([c.b, c.hq, c.sq, 1], stats.get_stride(), np.dtype(np.float32))
    pack[o], pack[stats] = oview, sview
    g.execute(handle, pack, np.empty(max(1, g.get_workspace_size()), np.uint8))

    want, lse, _, _ = ref_forward(c, vals["q"], vals["k"], vals["v"], bias)
    got = decode(np.array(oview), c.dt)
    assert not np.isnan(got).any(), f"{c}: unwritten output elements"
    assert untouched_outside(obase, oview) and untouched_outside(sbase, sview), f"{c}: guard region written"
    err = float(np.abs(got - want).max()) / max(1.0, float(np.abs(want).max()))
    assert err < TOL[c.dt], f"{c}: o relative error {err:.2e}"
    s = np.array(sview, dtype=np.float64)
    dead = np.isneginf(lse)
    assert (np.isneginf(s) == dead).all(), f"{c}: stats -inf exactly on fully masked rows"
    if (~dead).any():
        serr = float(np.abs(s[~dead] - lse[~dead]).max()) / max(1.0, float(np.abs(lse[~dead]).max()))
        assert serr < 5 * TOL[c.dt], f"{c}: stats error {serr:.2e}"
    if not cap_matters:
        return
    # the cap matters for these data: the uncapped attention (o, or with one key the stats) differs
    plain, plain_lse, _, _ = ref_forward(replace(c, cap=1e30), vals["q"], vals["k"], vals["v"], bias)
    moved = np.abs(plain - want).max() / max(1.0, float(np.abs(want).max()))
    if (~dead).any():
        moved = max(moved, np.abs(plain_lse[~dead] - lse[~dead]).max() / max(1.0, float(np.abs(lse[~dead]).max())))
    assert moved > 20 * TOL[c.dt], f"{c}: the cap changes too little to be tested"


def run_backward(handle: hipdnn.Handle, c: Case, seed: int = 0, cap_matters: bool = True) -> None:
    rng = np.random.default_rng(seed)
    vals = inputs(c, rng)
    g = hipdnn.Graph(name="softcap_bwd", io_data_type=c.dt, intermediate_data_type=DT.FLOAT, compute_data_type=DT.FLOAT)
    pack: dict[Any, Any] = {}
    extra, bias = graph_options(c, g, pack, rng)
    o64, lse, _, _ = ref_forward(c, vals["q"], vals["k"], vals["v"], bias)
    vals["o"] = decode(encode(o64.astype(np.float32), c.dt), c.dt)
    t = {}
    for n in ("q", "k", "v", "o", "do"):
        dims = list(vals[n].shape)
        strides = layout_strides(c.layout, dims)
        t[n] = g.tensor(name=n, dim=dims, stride=strides, data_type=c.dt)
        pack[t[n]] = guarded(dims, strides, storage(c.dt), encode(vals[n].astype(np.float32), c.dt))[1]
    ts = g.tensor(name="stats", dim=[c.b, c.hq, c.sq, 1], data_type=DT.FLOAT)
    pack[ts] = lse.astype(np.float32)
    grads = g.sdpa_backward(t["q"], t["k"], t["v"], t["o"], t["do"], ts, **extra)
    views = {}
    for name, tensor, like in zip(("dq", "dk", "dv"), grads, ("q", "k", "v")):
        dims = list(vals[like].shape)
        strides = layout_strides(c.layout, dims)
        tensor.set_output(True).set_stride(strides).set_data_type(c.dt)
        views[name] = guarded(dims, strides, storage(c.dt))
        pack[tensor] = views[name][1]
    g.build(handle)
    g.execute(handle, pack, np.empty(max(1, g.get_workspace_size()), np.uint8))

    want = ref_backward(c, vals["q"], vals["k"], vals["v"], vals["do"], bias)
    for (name, (base, view)), w in zip(views.items(), want):
        got = decode(np.array(view), c.dt)
        assert not np.isnan(got).any(), f"{c}: {name} has unwritten elements"
        assert untouched_outside(base, view), f"{c}: {name} guard region written"
        err = float(np.abs(got - w).max()) / max(1.0, float(np.abs(w).max()))
        assert err < GRAD_TOL[c.dt], f"{c}: {name} relative error {err:.2e}"
    if not cap_matters:
        return
    # the softcap's derivative matters for these data
    plain = ref_backward(replace(c, cap=1e30), vals["q"], vals["k"], vals["v"], vals["do"], bias)[0]
    assert np.abs(plain - want[0]).max() > 20 * GRAD_TOL[c.dt] * max(1.0, float(np.abs(want[0]).max()))


BASE = Case()
EVERYTHING = replace(
    BASE,
    b=2,
    hq=4,
    hk=2,
    sq=37,
    skv=129,
    causal=True,
    bottom_right=True,
    left=40,
    padding=True,
    seq_q=[30, 1],
    seq_kv=[129, 70],
    bias=True,
    alibi=True,
)
CASES: dict[str, Case] = {
    "plain": BASE,
    "tight_cap": replace(BASE, cap=0.5),
    "loose_cap": replace(BASE, cap=20.0, scale=2.0),
    "causal": replace(BASE, causal=True),
    "causal_br": replace(BASE, causal=True, bottom_right=True, sq=29, skv=37),
    "bias": replace(BASE, bias=True),
    "window": replace(BASE, causal=True, left=9),
    "padding": replace(BASE, b=2, padding=True, seq_q=[37, 5], seq_kv=[20, 37]),
    "alibi": replace(BASE, alibi=True, hq=4, hk=4),
    "gqa_bshd": replace(BASE, hq=4, hk=1, layout="bshd", causal=True),
    "odd_1": replace(BASE, sq=1, skv=1),
    "odd_129": replace(BASE, sq=129, skv=129, causal=True, d=24, dv=8),
    "decode": replace(BASE, sq=1, skv=129, hq=8, hk=2),
    "decode_long_chunks": replace(BASE, sq=1, skv=1500, b=1, hq=2, hk=1, d=32, dv=32),
    "prefill_odd_kv": replace(BASE, sq=37, skv=129, bias=True, causal=True, bottom_right=True),
    "everything": EVERYTHING,
    "bf16": replace(BASE, dt=DT.BFLOAT16, causal=True, cap=2.0),
    # bf16 with more than 16 queries runs the AMX build's tile kernel there: the cap, ALiBi and a bias
    # go into its scores before the one-pass softmax, across several 256-key tiles
    "bf16_everything": replace(EVERYTHING, dt=DT.BFLOAT16, cap=2.0),
    "bf16_tiles_bias_alibi": replace(BASE, dt=DT.BFLOAT16, hq=2, hk=1, sq=100, skv=600, cap=2.0, bias=True, alibi=True),
}


@pytest.mark.parametrize("name", list(CASES))
def test_softcap_forward(isa_handle: hipdnn.Handle, name: str) -> None:
    run_forward(isa_handle, CASES[name], seed=len(name))


# (the bf16 tile-kernel cases are the forward's: the backward widens bf16 to fp32, as in "bf16")
BWD_CASES = [n for n in CASES if n not in ("decode_long_chunks", "bf16_everything", "bf16_tiles_bias_alibi")]


@pytest.mark.parametrize("name", BWD_CASES)
def test_softcap_backward(isa_handle: hipdnn.Handle, name: str) -> None:
    # with one key per row the gradients of q and k are 0, capped or not: nothing for the cap to change
    run_backward(isa_handle, CASES[name], seed=len(name) + 100, cap_matters=CASES[name].skv > 1)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    hk = draw(st.sampled_from([1, 2]))
    sq = draw(st.sampled_from([1, 2, 17, 37, 70]))
    skv = draw(st.sampled_from([1, 16, 37, 65, 129]))
    b = draw(st.integers(1, 2))
    padding = draw(st.booleans())
    return Case(
        cap=draw(st.sampled_from([0.3, 1.0, 3.0, 8.0])),
        b=b,
        hq=hk * draw(st.sampled_from([1, 2])),
        hk=hk,
        sq=sq,
        skv=skv,
        d=draw(st.sampled_from([8, 16, 20])),
        dv=draw(st.sampled_from([8, 16])),
        causal=draw(st.booleans()),
        bottom_right=draw(st.booleans()),
        left=draw(st.sampled_from([None, 5, 40])),
        padding=padding,
        seq_q=[draw(st.integers(0, sq)) for _ in range(b)] if padding else [],
        seq_kv=[draw(st.integers(0, skv)) for _ in range(b)] if padding else [],
        bias=draw(st.booleans()),
        scale=draw(st.sampled_from([0.25, 0.5, 1.0])),
    )


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(c=cases(), seed=st.integers(0, 2**16))
def test_softcap_hypothesis(isa_handle: hipdnn.Handle, c: Case, seed: int) -> None:
    """Forward and backward at drawn shapes, masks and caps against the reference. (Without the
    runners' "the cap matters" check: heavy masking can leave a drawn case too few scores to bend.)"""
    run_forward(isa_handle, c, seed, cap_matters=False)
    run_backward(isa_handle, c, seed, cap_matters=False)


# ------------------------------------------------------------------------------- ragged / paged
def test_softcap_ragged_forward_and_backward(isa_handle: hipdnn.Handle) -> None:
    """The varlen path (sdpa_varlen.cpp): q, k, v, o (and dO, dQ, dK, dV) packed THD with offsets,
    causal bottom-right; each sequence against the float64 reference of its own lengths."""
    b, h, s, d, lq, lkv, cap, scale = 3, 2, 40, 16, [37, 1, 12], [40, 7, 12], 1.5, 0.5
    dims, strides = [b, h, s, d], [s * h * d, d, h * d, 1]
    g = hipdnn.Graph(name="softcap_thd", io_data_type=DT.FLOAT, intermediate_data_type=DT.FLOAT)
    qo = g.tensor(name="q_off", dim=[b + 1, 1, 1, 1], data_type=DT.INT64)
    ko = g.tensor(name="k_off", dim=[b + 1, 1, 1, 1], data_type=DT.INT64)
    sq = g.tensor(name="sq", dim=[b, 1, 1, 1], data_type=DT.INT32)
    skv = g.tensor(name="skv", dim=[b, 1, 1, 1], data_type=DT.INT32)
    t = {n: g.tensor(name=n, dim=dims, stride=strides, data_type=DT.FLOAT) for n in ("q", "k", "v", "o", "do")}
    for n in ("q", "o", "do"):
        t[n].set_ragged_offset(qo)
    for n in ("k", "v"):
        t[n].set_ragged_offset(ko)
    stats = g.tensor(name="stats", dim=[b, h, s, 1], data_type=DT.FLOAT)
    opts: dict[str, Any] = dict(
        attn_scale=scale,
        softcap=cap,
        use_padding_mask=True,
        seq_len_q=sq,
        seq_len_kv=skv,
        use_causal_mask_bottom_right=True,
    )
    o, st_ = g.sdpa(t["q"], t["k"], t["v"], generate_stats=True, **opts)
    o.set_output(True).set_stride(strides).set_ragged_offset(qo)
    assert st_ is not None
    st_.set_output(True)
    dq, dk, dv = g.sdpa_backward(t["q"], t["k"], t["v"], t["o"], t["do"], stats, **opts)
    for x, off in ((dq, qo), (dk, ko), (dv, ko)):
        x.set_output(True).set_stride(strides).set_ragged_offset(off)
    g.build(isa_handle)

    rng = np.random.default_rng(7)
    cq, ck = np.cumsum([0] + lq) * h * d, np.cumsum([0] + lkv) * h * d
    total = b * s * h * d
    seqs = []
    flat = {n: np.full(total, np.nan, np.float32) for n in ("q", "k", "v", "do", "o")}
    for bi in range(b):
        x = {n: rng.standard_normal((1, h, lq[bi] if n in ("q", "do") else lkv[bi], d)) for n in ("q", "k", "v", "do")}
        c = Case(cap=cap, b=1, hq=h, hk=h, sq=lq[bi], skv=lkv[bi], d=d, dv=d, causal=True, bottom_right=True)
        c = replace(c, scale=scale)
        x = {n: a.astype(np.float32).astype(np.float64) for n, a in x.items()}
        o64, lse, _, _ = ref_forward(c, x["q"], x["k"], x["v"])
        x["o"] = o64.astype(np.float32).astype(np.float64)
        seqs.append((c, x, o64, lse))
        for n, off in (("q", cq), ("do", cq), ("o", cq), ("k", ck), ("v", ck)):
            flat[n][off[bi] : off[bi + 1]] = x[n][0].transpose(1, 0, 2).ravel()
    lse_all = np.full((b, h, s, 1), -np.inf, np.float32)
    for bi, (_, _, _, lse) in enumerate(seqs):
        lse_all[bi, :, : lq[bi]] = lse[0]
    outs = {n: np.full(total, np.nan, np.float32) for n in ("o_out", "dq", "dk", "dv")}
    stats_out = np.full((b, h, s, 1), np.nan, np.float32)

    def thd_view(buf: np.ndarray) -> np.ndarray:  # the declared [B, H, S, D] at THD strides
        return np.lib.stride_tricks.as_strided(buf, shape=dims, strides=[x * buf.itemsize for x in strides])

    pack = {
        t["q"]: thd_view(flat["q"]),
        t["k"]: thd_view(flat["k"]),
        t["v"]: thd_view(flat["v"]),
        t["o"]: thd_view(flat["o"]),
        t["do"]: thd_view(flat["do"]),
        stats: lse_all,
        o: thd_view(outs["o_out"]),
        st_: stats_out,
        dq: thd_view(outs["dq"]),
        dk: thd_view(outs["dk"]),
        dv: thd_view(outs["dv"]),
        qo: cq.astype(np.int64).reshape(-1, 1, 1, 1),
        ko: ck.astype(np.int64).reshape(-1, 1, 1, 1),
        sq: np.array(lq, np.int32).reshape(-1, 1, 1, 1),
        skv: np.array(lkv, np.int32).reshape(-1, 1, 1, 1),
    }
    g.execute(isa_handle, pack, np.empty(max(1, g.get_workspace_size()), np.uint8))
    for bi, (c, x, o64, lse) in enumerate(seqs):
        dq64, dk64, dv64 = ref_backward(c, x["q"], x["k"], x["v"], x["do"])
        for name, off, want, tol in (
            ("o_out", cq, o64, TOL[DT.FLOAT]),
            ("dq", cq, dq64, GRAD_TOL[DT.FLOAT]),
            ("dk", ck, dk64, GRAD_TOL[DT.FLOAT]),
            ("dv", ck, dv64, GRAD_TOL[DT.FLOAT]),
        ):
            n = (off[bi + 1] - off[bi]) // (h * d)
            got = outs[name][off[bi] : off[bi + 1]].reshape(n, h, d).transpose(1, 0, 2)[None]
            err = float(np.abs(got - want).max()) / max(1.0, float(np.abs(want).max()))
            assert err < tol, f"batch {bi}: {name} error {err:.2e}"
        assert np.abs(stats_out[bi, :, : lq[bi]] - lse[0]).max() < 1e-4
    assert np.isnan(outs["o_out"][cq[-1] :]).all(), "memory no sequence owns was written"


def test_softcap_paged_decode(isa_handle: hipdnn.Handle) -> None:
    """Paged K/V (blocks of 16, shuffled) with softcap, decode (Sq = 1), GQA, against float64."""
    b, hq, hk, d, bs, lens, cap, scale = 2, 4, 2, 32, 16, [70, 129], 2.0, 0.3
    max_blocks = 9
    nblocks = b * max_blocks
    rng = np.random.default_rng(11)
    g = hipdnn.Graph(name="softcap_paged", io_data_type=DT.FLOAT, intermediate_data_type=DT.FLOAT)
    q = g.tensor(name="q", dim=[b, hq, 1, d], data_type=DT.FLOAT)
    kc = g.tensor(name="kc", dim=[nblocks, hk, bs, d], data_type=DT.FLOAT)
    vc = g.tensor(name="vc", dim=[nblocks, hk, bs, d], data_type=DT.FLOAT)
    kt = g.tensor(name="kt", dim=[b, 1, max_blocks, 1], data_type=DT.INT32)
    vt = g.tensor(name="vt", dim=[b, 1, max_blocks, 1], data_type=DT.INT32)
    sq = g.tensor(name="sq", dim=[b, 1, 1, 1], data_type=DT.INT32)
    skv = g.tensor(name="skv", dim=[b, 1, 1, 1], data_type=DT.INT32)
    o, _ = g.sdpa(
        q,
        kc,
        vc,
        attn_scale=scale,
        softcap=cap,
        use_padding_mask=True,
        seq_len_q=sq,
        seq_len_kv=skv,
        paged_attention_k_table=kt,
        paged_attention_v_table=vt,
        use_causal_mask_bottom_right=True,
    )
    o.set_output(True)
    g.build(isa_handle)
    table = rng.permutation(nblocks).astype(np.int32).reshape(b, 1, max_blocks, 1)
    kcache = np.full((nblocks, hk, bs, d), np.nan, np.float32)
    vcache = np.full((nblocks, hk, bs, d), np.nan, np.float32)
    qv = rng.standard_normal((b, hq, 1, d)).astype(np.float32)
    keys, vals = [], []
    for bi in range(b):
        kk = rng.standard_normal((hk, lens[bi], d)).astype(np.float32)
        vv = rng.standard_normal((hk, lens[bi], d)).astype(np.float32)
        keys.append(kk)
        vals.append(vv)
        for j in range(lens[bi]):
            blk = table[bi, 0, j // bs, 0]
            kcache[blk, :, j % bs] = kk[:, j]
            vcache[blk, :, j % bs] = vv[:, j]
    out = np.full((b, hq, 1, d), np.nan, np.float32)
    pack = {
        q: qv,
        kc: kcache,
        vc: vcache,
        kt: table,
        vt: table,
        sq: np.ones((b, 1, 1, 1), np.int32),
        skv: np.array(lens, np.int32).reshape(b, 1, 1, 1),
        o: out,
    }
    g.execute(isa_handle, pack, np.empty(max(1, g.get_workspace_size()), np.uint8))
    for bi in range(b):
        c = Case(cap=cap, b=1, hq=hq, hk=hk, sq=1, skv=lens[bi], d=d, dv=d, scale=scale)
        want = ref_forward(c, qv[bi : bi + 1].astype(np.float64), keys[bi][None].astype(np.float64), vals[bi][None])[0]
        err = float(np.abs(out[bi : bi + 1] - want).max()) / max(1.0, float(np.abs(want).max()))
        assert err < TOL[DT.FLOAT], f"batch {bi}: error {err:.2e}"


# ------------------------------------------------------------------------ frontend and the wire
def small_graph(**kw: Any) -> tuple[hipdnn.Graph, Any]:
    g = hipdnn.Graph(name="softcap_small", io_data_type=DT.FLOAT)
    q = g.tensor(name="q", dim=[1, 2, 8, 4], data_type=DT.FLOAT)
    o, _ = g.sdpa(q, q, q, **kw)
    o.set_output(True)
    return g, q


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (-1.0, "softcap -1.0 is negative: it must be > 0"),
        (-1e-30, "is negative"),
        (math.nan, "softcap is NaN: it must be a finite number"),
        (math.inf, "softcap inf is infinite"),
        (-math.inf, "softcap -inf is infinite"),
        (1e39, "outside the float32 range"),
        (1e-46, "rounds to 0 in float32"),
    ],
)
def test_bad_softcap_is_refused_at_validation(value: float, fragment: str) -> None:
    g, _ = small_graph(softcap=value)
    with pytest.raises(hipdnn.HipdnnError) as e:
        g.validate()
    assert e.value.code == hipdnn.ErrorCode.INVALID_VALUE
    assert fragment in str(e.value) and "sdpa node" in str(e.value)


@pytest.mark.parametrize("value", [True, "30", [30.0], hipdnn.DataType.FLOAT])
def test_softcap_of_the_wrong_type_is_refused_when_added(value: Any) -> None:
    with pytest.raises(hipdnn.HipdnnError) as e:
        small_graph(softcap=value)
    assert "softcap" in str(e.value) and "must be a number" in str(e.value)


def test_backward_validates_softcap_too() -> None:
    g = hipdnn.Graph(name="softcap_bwd_bad", io_data_type=DT.FLOAT)
    q = g.tensor(name="q", dim=[1, 2, 8, 4], data_type=DT.FLOAT)
    st_ = g.tensor(name="stats", dim=[1, 2, 8, 1], data_type=DT.FLOAT)
    for x in g.sdpa_backward(q, q, q, q, q, st_, softcap=-2.0):
        x.set_output(True)
    with pytest.raises(hipdnn.HipdnnError) as e:
        g.validate()
    assert "sdpa_backward node" in str(e.value) and "softcap -2.0 is negative" in str(e.value)


def test_off_values_serialize_as_before_and_need_no_new_api() -> None:
    """softcap None and 0 write nothing: the bytes are those of a graph without the option."""
    plain = small_graph()[0].serialize()
    assert small_graph(softcap=None)[0].serialize() == plain
    assert small_graph(softcap=0.0)[0].serialize() == plain
    assert small_graph(softcap=0)[0].serialize() == plain
    s = summarize(plain)
    assert not s.has_softcap
    capped = small_graph(softcap=30.0)[0].serialize()
    assert capped != plain and summarize(capped).has_softcap


def test_softcap_round_trips_through_the_wire_and_options() -> None:
    g, _ = small_graph(softcap=50.0, attn_scale=0.25)
    g2 = hipdnn.Graph.deserialize(g.serialize())
    (node,) = g2.nodes
    assert node.options.softcap == 50.0
    assert g2.serialize() == g.serialize()
    # SdpaAttributes carries it for both directions, keywords override it
    opts = hipdnn.SdpaAttributes(softcap=30.0)
    h = hipdnn.Graph(name="opts", io_data_type=DT.FLOAT)
    q = h.tensor(name="q", dim=[1, 2, 8, 4], data_type=DT.FLOAT)
    o, stats = h.sdpa(q, q, q, options=opts, generate_stats=True)
    assert h.nodes[0].options.softcap == 30.0
    assert stats is not None
    h.sdpa_backward(q, q, q, o, o, stats, options=opts, softcap=20.0)
    assert h.nodes[1].options.softcap == 20.0
    assert h.nodes[0].options.softcap == 30.0


def test_a_backward_softcap_alone_needs_api_1_4_0() -> None:
    g = hipdnn.Graph(name="softcap_bwd_only", io_data_type=DT.FLOAT)
    q = g.tensor(name="q", dim=[1, 2, 8, 4], data_type=DT.FLOAT)
    st_ = g.tensor(name="stats", dim=[1, 2, 8, 1], data_type=DT.FLOAT)
    for x in g.sdpa_backward(q, q, q, q, q, st_, softcap=10.0):
        x.set_output(True)
    s = summarize(g.serialize())
    assert s.has_softcap
    assert required_api_version(is_override_shape_enabled=False, has_softcap=s.has_softcap) == SOFTCAP_API_VERSION


def test_softcap_outranks_the_other_features() -> None:
    assert SOFTCAP_API_VERSION == parse_api_version("1.4.0") > RAGGED_PAGED_API_VERSION
    need = required_api_version(
        is_override_shape_enabled=True, has_dynamic_tensors=True, has_ragged_or_paged=True, has_softcap=True
    )
    assert need == SOFTCAP_API_VERSION
    assert required_api_version(is_override_shape_enabled=True, has_ragged_or_paged=True) == RAGGED_PAGED_API_VERSION


# ------------------------------------------------------------------------------- version filter
def test_the_filter_keeps_softcap_graphs_from_api_1_3_0_plugins(fakes, fake_handle_factory) -> None:
    """A 1.3.0 plugin would ignore the field and return uncapped attention: it is never asked."""
    g, _ = small_graph(softcap=30.0)
    h = fake_handle_factory("fake_override_v120", "fake_override_v130", "fake_override_v140")
    g.build(h)
    assert g.get_engine_id() == 9010
    for name in ("fake_override_v120", "fake_override_v130"):
        assert fakes[name].calls("GetApplicableEngineIds") == [], f"{name} was asked about a softcap graph"
    assert fakes["fake_override_v140"].calls("GetApplicableEngineIds") != []
    h2 = fake_handle_factory("fake_override_v130")
    with pytest.raises(hipdnn.HipdnnError) as e:
        g.build(h2)
    assert e.value.code == hipdnn.ErrorCode.GRAPH_NOT_SUPPORTED
    assert "fake_override_v130 (api 1.3.0): api 1.3.0 < required 1.4.0" in e.value.message
    # the same graph without the cap is served by the 1.3.0 plugin
    plain, _ = small_graph()
    plain.build(h2)
    assert plain.get_engine_id() == 9009


def test_preferring_an_old_engine_for_a_softcap_graph_says_why(fake_handle_factory) -> None:
    g = hipdnn.Graph(name="softcap_pref", io_data_type=DT.FLOAT, preferred_engine_id=9009)
    q = g.tensor(name="q", dim=[1, 2, 8, 4], data_type=DT.FLOAT)
    g.sdpa(q, q, q, softcap=30.0)[0].set_output(True)
    h = fake_handle_factory("fake_override_v130", "fake_override_v140")
    with pytest.raises(hipdnn.HipdnnError) as e:
        g.build(h)
    assert "needs 1.4.0 (it has score softcapping)" in str(e.value)


def test_the_engines_declare_their_api_versions() -> None:
    """Both engines serve softcap (API 1.4.0): the CPU engine and engines/hip (which refuses the ragged
    and paged graphs of 1.3.0 with the reason)."""
    cpu = (ROOT / "engines/cpu/src/cpu_engine.cpp").read_text()
    hip = (ROOT / "engines/hip/src/hip_engine.cpp").read_text()
    versions = [re.search(r'kApiVersion = "(\d+\.\d+\.\d+)"', src) for src in (cpu, hip)]
    assert versions[0] is not None and versions[1] is not None
    assert parse_api_version(versions[0].group(1)) >= SOFTCAP_API_VERSION  # (1.5.0: FP8 too)
    assert parse_api_version(versions[1].group(1)) == SOFTCAP_API_VERSION


def test_the_plugin_report_names_the_reason(fake_handle_factory) -> None:
    g, _ = small_graph(softcap=30.0)
    h = fake_handle_factory("fake_override_v130")
    with pytest.raises(hipdnn.HipdnnError):
        g.build(h)
    assert "api 1.3.0 < required 1.4.0" in g.plugin_report()
