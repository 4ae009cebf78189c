"""fp16 / bf16 SDPA on the CPU engine where its results are tiny: the vector conversions that write
fp16 outputs and gradients (F16C, 16 lanes) and read fp16 / bf16 rows must keep fp16's subnormals
(below 2^-14 ~ 6.1e-5) although the AVX-512 and AMX kernels run with flush-to-zero, and round to
nearest even as the scalar conversions do. Each case is built on every ISA build this CPU has, with
inputs scaled so that most outputs land in fp16's subnormal range, against the float64 reference; a
flushed output would be off by its whole size. Outputs sit in NaN-filled buffers."""

from __future__ import annotations

import math

import numpy as np
import pytest

import hipdnn
from hipdnn import reference as refmod
from tests.cpu.test_sdpa_modes import decode, encode, storage

DT = hipdnn.DataType


def rounded(x: np.ndarray, dt: hipdnn.DataType) -> np.ndarray:
    """x as the dtype holds it (float64)."""
    return decode(encode(x.astype(np.float32), dt), dt)


def inputs(dt: hipdnn.DataType, shape: list[int], scale: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rounded(rng.uniform(0.25, 1.0, shape) * rng.choice([-1.0, 1.0], shape) * scale, dt)


@pytest.mark.parametrize("dt", [DT.HALF, DT.BFLOAT16], ids=["fp16", "bf16"])
@pytest.mark.parametrize(("sq", "skv", "d"), [(37, 129, 64), (129, 37, 32), (1, 300, 128)])
def test_tiny_outputs_keep_their_subnormals(isa_handle: hipdnn.Handle, dt: hipdnn.DataType, sq: int, skv: int, d: int):
    """o = softmax(s) v with v ~ 2e-5: fp16 outputs in the subnormal range, written 16 at a time."""
    b, h = 2, 2
    g = hipdnn.Graph(name="tiny_fwd", io_data_type=dt, intermediate_data_type=DT.FLOAT, compute_data_type=DT.FLOAT)
    q, k, v = (g.tensor(name=n, dim=[b, h, s, d], data_type=dt) for n, s in (("q", sq), ("k", skv), ("v", skv)))
    o, _ = g.sdpa(q, k, v, attn_scale=1.0 / math.sqrt(d), use_causal_mask=sq > 1)
    o.set_output(True)
    g.build(isa_handle)
    qv, kv = inputs(dt, [b, h, sq, d], 1.0, 1), inputs(dt, [b, h, skv, d], 1.0, 2)
    vv = inputs(dt, [b, h, skv, d], 2e-5, 3)
    out = np.full([b, h, sq, d], np.nan, storage(dt))
    g.execute(
        isa_handle,
        {q: encode(qv, dt), k: encode(kv, dt), v: encode(vv, dt), o: out},
        np.empty(max(1, g.get_workspace_size()), np.uint8),
    )
    got = decode(out, dt)
    vis = np.tril(np.ones((sq, skv), bool), k=0) if sq > 1 else np.ones((sq, skv), bool)
    s = np.einsum("bhqd,bhkd->bhqk", qv, kv) / math.sqrt(d)
    s = np.where(vis, s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    want = (p / p.sum(axis=-1, keepdims=True)) @ vv
    assert not np.isnan(got).any()
    if dt == DT.HALF:
        assert (np.abs(want) < 2.0**-14).mean() > 0.5, "the case must reach fp16's subnormals"
    err = float(np.abs(got - want).max()) / float(np.abs(want).max())
    assert err < 2e-2, f"relative error {err:.2e}"


@pytest.mark.parametrize("dt", [DT.HALF, DT.BFLOAT16], ids=["fp16", "bf16"])
@pytest.mark.parametrize(("sq", "skv", "d"), [(37, 129, 64), (129, 37, 32), (200, 200, 128)])
def test_tiny_gradients_keep_their_subnormals(
    isa_handle: hipdnn.Handle, dt: hipdnn.DataType, sq: int, skv: int, d: int
) -> None:
    """The backward with dO ~ 1e-4: dQ, dK and dV mostly in fp16's subnormal range."""
    b, hq, hk = 2, 4, 2
    scale = 1.0 / math.sqrt(d)
    g = hipdnn.Graph(name="tiny_bwd", io_data_type=dt, intermediate_data_type=DT.FLOAT, compute_data_type=DT.FLOAT)
    dims = {"q": [b, hq, sq, d], "k": [b, hk, skv, d], "v": [b, hk, skv, d], "o": [b, hq, sq, d], "do": [b, hq, sq, d]}
    t = {n: g.tensor(name=n, dim=x, data_type=dt) for n, x in dims.items()}
    st = g.tensor(name="stats", dim=[b, hq, sq, 1], data_type=DT.FLOAT)
    dq, dk, dv = g.sdpa_backward(t["q"], t["k"], t["v"], t["o"], t["do"], st, attn_scale=scale)
    for x in (dq, dk, dv):
        x.set_output(True)
    g.build(isa_handle)
    vals = {n: inputs(dt, dims[n], 1.0, i) for i, n in enumerate(("q", "k", "v"))}
    vals["do"] = inputs(dt, dims["do"], 1e-4, 7)
    kk, vv = (np.repeat(vals[n], hq // hk, axis=1) for n in ("k", "v"))
    s = np.einsum("bhqd,bhkd->bhqk", vals["q"], kk) * scale
    m = s.max(axis=-1, keepdims=True)
    lse = m + np.log(np.exp(s - m).sum(axis=-1, keepdims=True))
    vals["o"] = rounded(np.exp(s - lse) @ vv, dt)
    outs = [np.full(dims[n], np.nan, storage(dt)) for n in ("q", "k", "v")]
    pack = {t[n]: encode(vals[n], dt) for n in dims}
    pack[st] = lse.astype(np.float32)
    pack.update(zip((dq, dk, dv), outs))
    g.execute(isa_handle, pack, np.empty(max(1, g.get_workspace_size()), np.uint8))
    want = refmod.sdpa_backward(
        vals["q"], vals["k"], vals["v"], vals["o"], vals["do"], lse.astype(np.float32), np.float64(np.float32(scale))
    )
    tiny = 0
    for name, got, w in zip(("dq", "dk", "dv"), outs, want):
        gv = decode(got, dt)
        assert not np.isnan(gv).any(), f"{name}: unwritten elements"
        tiny += int((np.abs(w) < 2.0**-14).sum())
        err = float(np.abs(gv - w).max()) / float(np.abs(w).max())
        assert err < 3e-2, f"{name}: relative error {err:.2e}"
    if dt == DT.HALF:
        assert tiny > sum(x.size for x in outs) // 2, "the case must reach fp16's subnormals"
