"""SDPA backward on the CPU engine: every mask and option of the forward, GQA / MQA, padding, bias,
ALiBi, fp16 / bf16, against the float64 reference written from the definitions
(hipdnn.reference.sdpa_backward) and, on tiny shapes, against central finite differences of
L = sum(o * dO) computed with the float64 forward -- a derivation that shares nothing with the
closed-form gradients. The forward's o and stats come from the float64 forward, rounded to the
input type. Outputs are NaN-filled with guard regions."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hipdnn
from hipdnn import reference as refmod
from tests.cpu.test_sdpa_modes import (
    Case,
    alibi_slopes,
    decode,
    encode,
    guarded,
    layout_strides,
    reference,
    storage,
    untouched_outside,
)

DT = hipdnn.DataType
TOL = {DT.FLOAT: 1e-5, DT.HALF: 4e-3, DT.BFLOAT16: 3e-2}


@pytest.fixture(scope="module")
def handle() -> Iterator[hipdnn.Handle]:
    h = hipdnn.Handle()
    yield h
    h.close()


def visibility(c: Case, seq_q, seq_kv) -> np.ndarray:
    i = np.arange(c.sq)[:, None]
    j = np.arange(c.skv)[None, :]
    vis = np.zeros((c.b, 1, c.sq, c.skv), dtype=bool)
    for bi in range(c.b):
        sqb = c.sq if seq_q is None else int(min(max(seq_q[bi], 0), c.sq))
        skvb = c.skv if seq_kv is None else int(min(max(seq_kv[bi], 0), c.skv))
        shift = skvb - sqb if c.bottom_right else 0
        v = (j < skvb) & (i < sqb)
        if c.causal:
            v &= j <= i + shift
        if c.right is not None:
            v &= j <= i + c.right + shift
        if c.left is not None:
            v &= j >= i - c.left + 1 + shift
        vis[bi, 0] = v
    return vis


def run_bwd(handle, c: Case, seed: int = 0, check_fd: bool = False) -> dict[str, np.ndarray]:
    """Runs case c on handle, checks dQ, dK and dV against float64 and returns them (as float64)."""
    rng = np.random.default_rng(seed)
    qd, kd, vd = [c.b, c.hq, c.sq, c.d], [c.b, c.hk, c.skv, c.d], [c.b, c.hk, c.skv, c.dv]
    od = [c.b, c.hq, c.sq, c.dv]
    qs, ks, vs, os_ = (layout_strides(c.layout, x) for x in (qd, kd, vd, od))
    g = hipdnn.Graph(name="sdpa_bwd", io_data_type=c.dt, intermediate_data_type=DT.FLOAT, compute_data_type=DT.FLOAT)
    t = {
        n: g.tensor(name=n, dim=dd, stride=ss, data_type=c.dt)
        for n, dd, ss in (("q", qd, qs), ("k", kd, ks), ("v", vd, vs), ("o", od, os_), ("do", od, os_))
    }
    t["stats"] = g.tensor(name="stats", dim=[c.b, c.hq, c.sq, 1], stride=[c.hq * c.sq, c.sq, 1, 1], data_type=DT.FLOAT)
    scale = float(rng.uniform(0.1, 0.5))
    extra: dict = {}
    pack: dict = {}
    if c.scale_tensor:
        ts = g.tensor(name="scale", dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=DT.FLOAT)
        extra["attn_scale"], pack[ts] = ts, np.full((1, 1, 1, 1), scale, np.float32)
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
        lead = {"full": [c.b, c.hq], "b1": [1, c.hq], "h1": [c.b, 1], "11": [1, 1]}
        # broadcast over the queries (a padding mask [B, 1, 1, Skv]), over the keys, or a scalar
        rows = {"keys_only": [c.b, 1, 1, c.skv], "queries_only": [1, c.hq, c.sq, 1], "scalar": [1, 1, 1, 1]}
        bd = rows[c.bias] if c.bias in rows else lead[c.bias] + [c.sq, c.skv]
        tb = g.tensor(name="bias", dim=bd, stride=layout_strides("bhsd", bd), data_type=c.dt)
        bias64 = decode(encode(rng.standard_normal(bd).astype(np.float32), c.dt), c.dt)
        pack[tb] = encode(bias64.astype(np.float32), c.dt)
        extra["bias"] = tb
    dq, dk, dv = g.sdpa_backward(
        t["q"],
        t["k"],
        t["v"],
        t["o"],
        t["do"],
        t["stats"],
        use_causal_mask=c.causal,
        diagonal_alignment=hipdnn.DiagonalAlignment.BOTTOM_RIGHT
        if c.bottom_right
        else hipdnn.DiagonalAlignment.TOP_LEFT,
        diagonal_band_left_bound=c.left,
        diagonal_band_right_bound=c.right,
        use_alibi_mask=c.alibi,
        **extra,
    )
    for x, s in ((dq, qs), (dk, ks), (dv, vs)):
        x.set_output(True).set_stride(s)
    g.build(handle)

    vals = {
        n: decode(encode(rng.standard_normal(dd).astype(np.float32), c.dt), c.dt)
        for n, dd in (("q", qd), ("k", kd), ("v", vd), ("do", od))
    }
    scale64 = np.float64(np.float32(scale))
    o64, lse64 = reference(
        vals["q"],
        vals["k"],
        vals["v"],
        scale64,
        bias=bias64,
        alibi=c.alibi,
        seq_q=seq_q,
        seq_kv=seq_kv,
        right=c.right,
        left=c.left,
        bottom_right=c.bottom_right,
        causal=c.causal,
    )
    vals["o"] = decode(encode(o64.astype(np.float32), c.dt), c.dt)
    stats32 = lse64.astype(np.float32)
    for n, dd, ss in (("q", qd, qs), ("k", kd, ks), ("v", vd, vs), ("o", od, os_), ("do", od, os_)):
        _, view = guarded(dd, ss, storage(c.dt), encode(vals[n].astype(np.float32), c.dt))
        pack[t[n]] = view
    pack[t["stats"]] = stats32
    outs = {}
    for name, x, dd, ss in (("dq", dq, qd, qs), ("dk", dk, kd, ks), ("dv", dv, vd, vs)):
        outs[name] = guarded(dd, ss, storage(c.dt))
        pack[x] = outs[name][1]
    ws = np.empty(max(1, g.get_workspace_size()), np.uint8)
    g.execute(handle, pack, ws)

    additive = np.zeros((1, 1, 1, 1))
    if bias64 is not None:
        additive = additive + bias64
    if c.alibi:
        ii, jj = np.arange(c.sq)[:, None], np.arange(c.skv)[None, :]
        additive = additive + alibi_slopes(c.hq)[None, :, None, None] * (jj - ii)[None, None]
    want = refmod.sdpa_backward(
        vals["q"],
        vals["k"],
        vals["v"],
        vals["o"],
        vals["do"],
        stats32,
        scale64,
        visible=visibility(c, seq_q, seq_kv),
        additive=additive,
    )
    # Errors are judged relative to the size of the summed terms (dS = P (dP - D) cancels).
    mags = refmod.sdpa_backward(
        vals["q"],
        vals["k"],
        vals["v"],
        vals["o"],
        vals["do"],
        stats32,
        scale64,
        visible=visibility(c, seq_q, seq_kv),
        additive=additive,
        magnitude=True,
    )
    for name, w, mag in zip(("dq", "dk", "dv"), want, mags):
        base, view = outs[name]
        got = decode(np.array(view), c.dt)
        assert not np.isnan(got).any(), f"{c}: {name} has unwritten elements"
        assert untouched_outside(base, view), f"{c}: {name} guard region written"
        err = float(np.abs(got - w).max()) / max(1e-30, float(np.abs(w).max()), float(mag.max()))
        assert err < TOL[c.dt], f"{c}: {name} relative error {err:.2e}"
        dead_q = np.isneginf(lse64)
        if name == "dq" and dead_q.any():
            assert (got[np.broadcast_to(dead_q, got.shape)] == 0).all(), "fully masked rows need zero dQ"

    if check_fd:
        # Independent check: central differences of L = sum(o * dO) with the float64 forward.
        def loss(q, k, v):
            o, _ = reference(
                q,
                k,
                v,
                scale64,
                bias=bias64,
                alibi=c.alibi,
                seq_q=seq_q,
                seq_kv=seq_kv,
                right=c.right,
                left=c.left,
                bottom_right=c.bottom_right,
                causal=c.causal,
            )
            return float((o * vals["do"]).sum())

        h = 1e-6
        base_args = [vals["q"], vals["k"], vals["v"]]
        for which, name in enumerate(("dq", "dk", "dv")):
            x = base_args[which]
            num = np.zeros_like(x)
            for idx in np.ndindex(*x.shape):
                plus = [a.copy() for a in base_args]
                minus = [a.copy() for a in base_args]
                plus[which][idx] += h
                minus[which][idx] -= h
                num[idx] = (loss(*plus) - loss(*minus)) / (2 * h)
            got = decode(np.array(outs[name][1]), c.dt)
            err = float(np.abs(got - num).max()) / max(1e-3, float(np.abs(num).max()))
            assert err < 1e-4, f"{c}: {name} differs from finite differences by {err:.2e}"
    return {name: decode(np.array(outs[name][1]), c.dt) for name in ("dq", "dk", "dv")}


BASE = Case(sq=37, skv=37, d=16, dv=16)
CASES = {
    "plain": BASE,
    "odd_multi_tile": replace(BASE, sq=129, skv=150, d=64, dv=64),
    "single": replace(BASE, sq=1, skv=1, d=1, dv=1),
    "gqa": replace(BASE, hq=4, hk=2, sq=70, skv=90),
    "mqa": replace(BASE, hq=3, hk=1, sq=65, skv=129, dv=24),
    "causal_tl": replace(BASE, sq=130, skv=170, causal=True),
    "causal_br_masked_rows": replace(BASE, sq=170, skv=60, causal=True, bottom_right=True),
    "window": replace(BASE, sq=150, skv=150, left=17, right=0),
    "window_br": replace(BASE, sq=90, skv=160, left=33, right=0, bottom_right=True),
    "band_right": replace(BASE, sq=100, skv=100, right=5),
    "padding": replace(BASE, b=3, sq=70, skv=90, padding=True, seq_q=[70, 33, 1], seq_kv=[90, 0, 61]),
    "padding_causal_br_gqa": replace(
        BASE,
        b=2,
        hq=4,
        hk=2,
        sq=80,
        skv=80,
        padding=True,
        seq_q=[50, 80],
        seq_kv=[77, 20],
        causal=True,
        bottom_right=True,
    ),
    "bias_full": replace(BASE, b=2, bias="full"),
    "bias_h1_causal": replace(BASE, b=2, hq=4, hk=2, bias="h1", causal=True),
    "bias_keys_only_gqa": replace(BASE, b=2, hq=4, hk=2, bias="keys_only", sq=70, skv=130, causal=True),
    "bias_queries_only": replace(BASE, b=2, bias="queries_only", sq=90, skv=60),
    "bias_scalar_bf16": replace(BASE, dt=DT.BFLOAT16, bias="scalar", sq=50, skv=77),
    "alibi": replace(BASE, hq=6, hk=3, alibi=True, sq=60, skv=80, causal=True),
    "scale_tensor": replace(BASE, scale_tensor=True),
    "bshd": replace(BASE, layout="bshd", d=24, dv=40, sq=50, skv=70),
    "dstride": replace(BASE, layout="dstride", d=12, dv=12, sq=40, skv=45),
    "decode": replace(BASE, b=2, hq=8, hk=2, sq=1, skv=300, d=64, dv=64),
    "fp16": replace(BASE, dt=DT.HALF, sq=100, skv=130, d=64, dv=64, causal=True),
    "bf16_gqa": replace(BASE, dt=DT.BFLOAT16, hq=4, hk=2, sq=70, skv=100, causal=True, bottom_right=True),
}


@pytest.mark.parametrize("name", list(CASES))
def test_sdpa_backward_case(handle, name: str) -> None:
    run_bwd(handle, CASES[name], seed=len(name))


FD_CASES = {
    "fd_plain": Case(b=1, hq=2, hk=1, sq=3, skv=4, d=3, dv=2),
    "fd_causal_br_bias_alibi": Case(
        b=1, hq=2, hk=2, sq=4, skv=3, d=2, dv=3, causal=True, bottom_right=True, bias="full", alibi=True
    ),
    "fd_padding_window": Case(
        b=2, hq=1, hk=1, sq=4, skv=5, d=2, dv=2, padding=True, seq_q=[3, 4], seq_kv=[5, 2], left=2
    ),
}


@pytest.mark.parametrize("name", list(FD_CASES))
def test_sdpa_backward_finite_differences(handle, name: str) -> None:
    run_bwd(handle, FD_CASES[name], seed=len(name), check_fd=True)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    b = draw(st.integers(1, 2))
    hk = draw(st.integers(1, 2))
    hq = hk * draw(st.integers(1, 3))
    sq = draw(st.sampled_from([1, 2, 37, 64, 65, 129]))
    skv = draw(st.sampled_from([1, 3, 37, 64, 65, 129]))
    d = draw(st.sampled_from([1, 8, 13, 32]))
    padding = draw(st.booleans())
    return Case(
        b=b,
        hq=hq,
        hk=hk,
        sq=sq,
        skv=skv,
        d=d,
        dv=draw(st.sampled_from([d, 8, 19])),
        dt=draw(st.sampled_from([DT.FLOAT, DT.FLOAT, DT.FLOAT, DT.HALF, DT.BFLOAT16])),
        layout=draw(st.sampled_from(["bhsd", "bshd", "padded", "dstride"])),
        causal=draw(st.booleans()),
        bottom_right=draw(st.booleans()),
        left=draw(st.one_of(st.none(), st.integers(1, 90))),
        right=draw(st.one_of(st.none(), st.integers(0, 20))),
        padding=padding,
        seq_q=[draw(st.integers(0, sq)) for _ in range(b)] if padding else [],
        seq_kv=[draw(st.integers(0, skv)) for _ in range(b)] if padding else [],
        bias=draw(st.sampled_from([None, "full", "b1", "h1", "11", "keys_only", "queries_only", "scalar"])),
        alibi=draw(st.booleans()),
        scale_tensor=draw(st.booleans()),
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(c=cases(), seed=st.integers(0, 2**16))
def test_sdpa_backward_hypothesis(handle, c: Case, seed: int) -> None:
    run_bwd(handle, c, seed)


def test_sdpa_backward_with_overrides(handle) -> None:
    """One plan at the maximum shape serves a smaller call."""
    c = Case(b=1, hq=2, hk=2, sq=50, skv=60, d=16, dv=16, causal=True)
    small = replace(c, sq=20, skv=33)
    g = hipdnn.Graph(io_data_type=DT.FLOAT, is_override_shape_enabled=True)
    dims = {
        "q": [1, 2, 50, 16],
        "k": [1, 2, 60, 16],
        "v": [1, 2, 60, 16],
        "o": [1, 2, 50, 16],
        "do": [1, 2, 50, 16],
        "stats": [1, 2, 50, 1],
    }
    t = {n: g.tensor(n, d, layout_strides("bhsd", d) if n != "stats" else [100, 50, 1, 1]) for n, d in dims.items()}
    dq, dk, dv = g.sdpa_backward(
        t["q"], t["k"], t["v"], t["o"], t["do"], t["stats"], attn_scale=0.25, use_causal_mask=True
    )
    for x in (dq, dk, dv):
        x.set_output(True)
    g.build(handle)
    rng = np.random.default_rng(1)
    sd = {"q": [1, 2, 20, 16], "k": [1, 2, 33, 16], "v": [1, 2, 33, 16], "do": [1, 2, 20, 16]}
    vals = {n: rng.standard_normal(d).astype(np.float32) for n, d in sd.items()}
    o64, lse = reference(*(vals[n].astype(np.float64) for n in "qkv"), 0.25, causal=True)
    vals["o"], vals["stats"] = o64.astype(np.float32), lse.astype(np.float32)
    outs = {n: np.full(vals[s].shape, np.nan, np.float32) for n, s in (("dq", "q"), ("dk", "k"), ("dv", "v"))}
    pack = {t[n]: vals[n] for n in dims}
    pack.update({dq: outs["dq"], dk: outs["dk"], dv: outs["dv"]})
    uids, shapes, strides = [], [], []
    for n in dims:
        shp = list(vals[n].shape)
        uids.append(t[n])
        shapes.append(shp)
        strides.append([int(s // 4) for s in vals[n].strides])
    for x, n in ((dq, "dq"), (dk, "dk"), (dv, "dv")):
        uids.append(x)
        shapes.append(list(outs[n].shape))
        strides.append([int(s // 4) for s in outs[n].strides])
    ws = np.empty(max(1, g.get_workspace_size()), np.uint8)
    g.execute(handle, pack, ws, override_uids=uids, override_shapes=shapes, override_strides=strides)
    want = refmod.sdpa_backward(
        vals["q"],
        vals["k"],
        vals["v"],
        vals["o"],
        vals["do"],
        vals["stats"],
        0.25,
        visible=visibility(small, None, None),
    )
    for n, w in zip(("dq", "dk", "dv"), want):
        assert refmod.relative_error(outs[n], w) < 1e-5, n
