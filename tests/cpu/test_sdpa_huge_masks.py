"""Rows masked everywhere by a huge finite additive mask, through the CPU engine, against float64 from
the definition: transformers' older masks fill with ``finfo.min``, others with -1e30 or -1e20.

A row whose every key carries the same huge negative mask has every score equal in float32 (q.k is
far below the mask's ulp), so its softmax is uniform: o is the average of v, as torch's forward
gives. Before, the engine scaled such a bias to log2 units after adding it, and finfo.min x log2(e)
overflowed to -inf: the row came out empty (0). The backward takes P = 2^(s - lse) from the stats,
and an fp32 lse of such a row is the mask itself (m + log2 l rounds to m), so P came out l times too
large; torch's own fused CPU backward has that fault. The engine recomputes those rows' max and sum
from their scores instead, so the gradients are the definition's.

Every ISA build this machine has (``HIPDNN_CPU_ISA``), the panel kernel (Sq > 16) and the rows
kernel (Sq <= 16), fp32 and bf16 (the AMX build's tiles), with softcapping and ALiBi, the stats
from our own forward and torch's (the float64 lse rounded to fp32, -3.4e38 for finfo.min).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import hipdnn
from tests.cpu.test_sdpa_modes import alibi_slopes, decode, encode

DT = hipdnn.DataType
F32_MIN = float(np.finfo(np.float32).min)
BF16_MIN = -3.3895313892515355e38  # bf16's finfo.min (0xFF7F)
MASKS = {"finfo_min": F32_MIN, "minus_1e30": -1e30, "minus_1e20": -1e20}
# (Sq, Skv): the panel kernel, the rows (decode) kernel, and the rows kernel split over key chunks
# (merged after: one query row, long keys)
KERNELS = {"panel": (37, 53), "rows": (5, 129), "rows_key_chunks": (1, 1500)}
OPTIONS: dict[str, dict[str, Any]] = {
    "plain": {},
    "softcap": {"softcap": 4.0},
    "alibi": {"use_alibi_mask": True},
    "causal": {"use_causal_mask": True},
}
B, HQ, HK, D, SCALE = 2, 4, 2, 16, 0.3


def scores(q: np.ndarray, k: np.ndarray, bias: np.ndarray, opts: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """float64 scores s and ds/du (u = q.k), GQA heads repeated, softcap, bias and ALiBi applied."""
    kk = np.repeat(k, HQ // HK, axis=1)
    u = np.einsum("bhqd,bhkd->bhqk", q, kk)
    if "softcap" in opts:
        c = float(opts["softcap"])
        t = np.tanh(u * SCALE / c)
        s, dsdu = c * t, SCALE * (1.0 - t * t)
    else:
        s, dsdu = u * SCALE, np.full_like(u, SCALE)
    s = s + bias
    sq, skv = s.shape[-2:]
    if opts.get("use_alibi_mask"):
        s = s + alibi_slopes(HQ)[None, :, None, None] * (np.arange(skv)[None, :] - np.arange(sq)[:, None])
    if opts.get("use_causal_mask"):  # top-left: key j visible to query i when j <= i
        s = np.where(np.arange(skv)[None, :] <= np.arange(sq)[:, None], s, -np.inf)
    return s, dsdu


def definition(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, do: np.ndarray, bias: np.ndarray, opts: dict[str, Any]
) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """o, lse and (dq, dk, dv) in float64 from the softmax's definition (no stats involved)."""
    s, dsdu = scores(q, k, bias, opts)
    m = s.max(axis=-1, keepdims=True)
    e = np.exp(s - m)
    p = e / e.sum(axis=-1, keepdims=True)
    vv = np.repeat(v, HQ // HK, axis=1)
    o = p @ vv
    dp = do @ vv.transpose(0, 1, 3, 2)
    du = np.where(np.isneginf(s), 0.0, p * (dp - (p * dp).sum(axis=-1, keepdims=True)) * dsdu)
    dq = du @ np.repeat(k, HQ // HK, axis=1)
    dk = (du.transpose(0, 1, 3, 2) @ q).reshape(B, HK, HQ // HK, *k.shape[2:]).sum(axis=2)
    dv = (p.transpose(0, 1, 3, 2) @ do).reshape(B, HK, HQ // HK, *v.shape[2:]).sum(axis=2)
    return o, m + np.log(e.sum(axis=-1, keepdims=True)), (dq, dk, dv)


def masked(sq: int, skv: int, fill: float, rng: np.random.Generator) -> np.ndarray:
    """A random bias with rows masked everywhere by `fill`: row 1 of every head, and in head 2 of
    batch 1 every row but the last. Row 3 masks all but two keys (they carry the row). With one
    query row: heads 1 and 3 of batch 0 and head 2 of batch 1 masked everywhere."""
    bias = rng.standard_normal((B, HQ, sq, skv))
    if sq == 1:
        bias[0, 1::2] = fill
        bias[1, 2] = fill
        return bias
    bias[:, :, 1, :] = fill
    bias[1, 2, :-1, :] = fill
    bias[:, :, 3, 2:] = fill
    return bias


def run(
    handle: hipdnn.Handle, dt: hipdnn.DataType, sq: int, skv: int, fill: float, opts: dict[str, Any], seed: int
) -> tuple[Any, ...]:
    rng = np.random.default_rng(seed)
    qd, kd = [B, HQ, sq, D], [B, HK, skv, D]
    vals = {
        n: decode(encode(rng.standard_normal(dd).astype(np.float32), dt), dt)
        for n, dd in (("q", qd), ("k", kd), ("v", kd), ("do", qd))
    }
    if dt == DT.BFLOAT16:
        fill = max(fill, BF16_MIN)  # float32's finfo.min rounds to -inf in bf16
    bias = masked(sq, skv, fill, rng)
    bias = decode(encode(bias.astype(np.float32), dt), dt)
    o64, lse64, grads64 = definition(vals["q"], vals["k"], vals["v"], vals["do"], bias, opts)

    g = hipdnn.Graph(name="huge_mask", io_data_type=dt, intermediate_data_type=DT.FLOAT, compute_data_type=DT.FLOAT)
    t = {n: g.tensor(name=n, dim=dd, data_type=dt) for n, dd in (("q", qd), ("k", kd), ("v", kd))}
    tb = g.tensor(name="bias", dim=[B, HQ, sq, skv], data_type=dt)
    o, stats = g.sdpa(t["q"], t["k"], t["v"], attn_scale=SCALE, bias=tb, generate_stats=True, **opts)
    o.set_output(True)
    assert stats is not None
    stats.set_output(True)
    g.build(handle)
    out = encode(np.full(qd, np.nan, np.float32), dt)  # every element must be written
    lse = np.full([B, HQ, sq, 1], np.nan, np.float32)
    pack = {
        t["q"]: encode(vals["q"].astype(np.float32), dt),
        t["k"]: encode(vals["k"].astype(np.float32), dt),
        t["v"]: encode(vals["v"].astype(np.float32), dt),
        tb: encode(bias.astype(np.float32), dt),
        o: out,
        stats: lse,
    }
    g.execute(handle, pack, np.empty(max(1, g.get_workspace_size()), np.uint8))
    got_o = decode(out, dt)
    return vals, bias, o64, lse64, grads64, got_o, lse


TOL = {DT.FLOAT: 2e-5, DT.BFLOAT16: 2e-2}


@pytest.mark.parametrize("option", list(OPTIONS))
@pytest.mark.parametrize("kernel", list(KERNELS))
@pytest.mark.parametrize("mask", list(MASKS))
@pytest.mark.parametrize("dt", [DT.FLOAT, DT.BFLOAT16], ids=["fp32", "bf16"])
def test_forward_averages_rows_masked_everywhere(
    isa_handle: hipdnn.Handle, dt: hipdnn.DataType, mask: str, kernel: str, option: str
) -> None:
    sq, skv = KERNELS[kernel]
    _, _, o64, lse64, _, got, lse = run(isa_handle, dt, sq, skv, MASKS[mask], OPTIONS[option], seed=sq)
    assert not np.isnan(got).any(), "every element of o is written"
    err = np.abs(got - o64).max() / np.abs(o64).max()
    assert err < TOL[dt], f"o relative error {err:.2e}"
    assert np.isfinite(lse).all(), "rows masked by a finite value are not empty"
    # The stats: the definition's, save that a finite bias beyond +-2^127 counts as +-2^127.
    want = np.maximum(lse64, -(2.0**127))
    np.testing.assert_allclose(lse.astype(np.float64), want, rtol=1e-5 if dt == DT.FLOAT else 1e-2, atol=1e-4)


@pytest.mark.parametrize("stats_from", ["our_forward", "float64_lse"])
@pytest.mark.parametrize("option", list(OPTIONS))
@pytest.mark.parametrize("kernel", list(KERNELS))
@pytest.mark.parametrize("mask", list(MASKS))
def test_backward_of_rows_masked_everywhere_is_the_definitions(
    isa_handle: hipdnn.Handle, mask: str, kernel: str, option: str, stats_from: str
) -> None:
    dt = DT.FLOAT
    sq, skv = KERNELS[kernel]
    opts = OPTIONS[option]
    vals, bias, o64, lse64, grads64, got_o, lse = run(isa_handle, dt, sq, skv, MASKS[mask], opts, seed=sq + 1)
    stats_in = lse if stats_from == "our_forward" else lse64.astype(np.float32)
    qd, kd = [B, HQ, sq, D], [B, HK, skv, D]
    g = hipdnn.Graph(name="huge_mask_bwd", io_data_type=dt, intermediate_data_type=DT.FLOAT, compute_data_type=DT.FLOAT)
    t = {
        n: g.tensor(name=n, dim=dd, data_type=dt) for n, dd in (("q", qd), ("k", kd), ("v", kd), ("o", qd), ("do", qd))
    }
    ts = g.tensor(name="stats", dim=[B, HQ, sq, 1], data_type=DT.FLOAT)
    tb = g.tensor(name="bias", dim=[B, HQ, sq, skv], data_type=dt)
    dq, dk, dv = g.sdpa_backward(t["q"], t["k"], t["v"], t["o"], t["do"], ts, attn_scale=SCALE, bias=tb, **opts)
    for x in (dq, dk, dv):
        x.set_output(True)
    g.build(isa_handle)
    outs = {
        "dq": np.full(qd, np.nan, np.float32),
        "dk": np.full(kd, np.nan, np.float32),
        "dv": np.full(kd, np.nan, np.float32),
    }
    pack = {t[n]: vals[n].astype(np.float32) for n in ("q", "k", "v", "do")}
    pack.update(
        {
            t["o"]: got_o.astype(np.float32),
            ts: stats_in,
            tb: bias.astype(np.float32),
            dq: outs["dq"],
            dk: outs["dk"],
            dv: outs["dv"],
        }
    )
    g.execute(isa_handle, pack, np.empty(max(1, g.get_workspace_size()), np.uint8))
    for name, want in zip(("dq", "dk", "dv"), grads64):
        got = outs[name]
        assert not np.isnan(got).any(), f"{name}: every element written"
        # relative to max(1, |want|): one causal query row sees one key, and its gradients are 0;
        # ALiBi over 1500 keys makes scores of ~700, whose fp32 rounding P inherits
        err = np.abs(got - want).max() / max(1.0, np.abs(want).max())
        assert err < (2e-5 if skv < 1000 else 1e-4), f"{name} relative error {err:.2e}"


def test_a_finite_bias_is_never_an_empty_row_but_minus_inf_is(isa_handle: hipdnn.Handle) -> None:
    """-inf still masks (a row masked everywhere by it is empty: o = 0, stats = -inf), next to rows
    masked by finfo.min (averaged) in the same call; +inf stays NaN (torch: inf - inf)."""
    sq, skv = KERNELS["panel"]
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal(dd).astype(np.float32) for dd in ([1, 1, sq, D], [1, 1, skv, D], [1, 1, skv, D]))
    bias = rng.standard_normal((1, 1, sq, skv)).astype(np.float32)
    bias[0, 0, 0] = -np.inf
    bias[0, 0, 1] = F32_MIN
    bias[0, 0, 2, 5] = np.inf
    g = hipdnn.Graph(name="inf_vs_min", io_data_type=DT.FLOAT, intermediate_data_type=DT.FLOAT)
    t = {n: g.tensor(name=n, dim=list(a.shape), data_type=DT.FLOAT) for n, a in (("q", q), ("k", k), ("v", v))}
    tb = g.tensor(name="bias", dim=list(bias.shape), data_type=DT.FLOAT)
    o, stats = g.sdpa(t["q"], t["k"], t["v"], attn_scale=SCALE, bias=tb, generate_stats=True)
    o.set_output(True)
    assert stats is not None
    stats.set_output(True)
    g.build(isa_handle)
    out = np.full((1, 1, sq, D), np.nan, np.float32)
    lse = np.full((1, 1, sq, 1), np.nan, np.float32)
    g.execute(
        isa_handle,
        {t["q"]: q, t["k"]: k, t["v"]: v, tb: bias, o: out, stats: lse},
        np.empty(max(1, g.get_workspace_size()), np.uint8),
    )
    assert (out[0, 0, 0] == 0).all() and lse[0, 0, 0, 0] == -np.inf
    np.testing.assert_allclose(out[0, 0, 1], v[0, 0].mean(axis=0), rtol=1e-5, atol=1e-6)
    assert np.isnan(out[0, 0, 2]).all()
    assert not np.isnan(out[0, 0, 3:]).any()
