"""Biases that are -inf over whole blocks, through the CPU engine's SDPA forward, against float64 from
the definition: a causal or padding mask handed over as an additive bias (transformers' 4-D masks,
hipdnn.torch's ``attn_mask``). The panel kernels skip a (key tile, query panel) pair whose bias is
-inf throughout, as they skip the tiles a causal band leaves out; the result must be the definition's
wherever the blocks fall: rows masked everywhere come out empty (o = 0, stats = -inf), a NaN in the
bias still makes its row NaN, whatever the bias's dtype and layout (keys contiguous or not).

Every ISA build this machine has (``HIPDNN_CPU_ISA``): the fp32 panel kernel of each, and on AMX the
bf16 tile kernel; lengths that span several 64-key tiles (256 on AMX) and query panels, with edges;
and the rows kernel (decode, Sq <= 16), which skips a row's masked keys of a tile the same way.
"""

from __future__ import annotations

import numpy as np
import pytest

import hipdnn
from tests.cpu.test_sdpa_modes import decode, encode

DT = hipdnn.DataType
B, HQ, HK, D, SCALE = 2, 4, 2, 32, 0.3
NINF = -np.inf


def pattern(name: str, sq: int, skv: int, rng: np.random.Generator) -> np.ndarray:
    """A random bias [B, HQ, sq, skv] with -inf where the pattern masks."""
    bias = rng.standard_normal((B, HQ, sq, skv))
    i, j = np.arange(sq)[:, None], np.arange(skv)[None, :]
    causal = j > i + (skv - sq)  # bottom-right: the last query sees every key
    if name == "causal":
        bias[:, :, causal] = NINF
    elif name == "causal_and_padding":  # transformers' batched prefill: left padding, then causal
        bias[:, :, causal] = NINF
        bias[0, :, :, : skv // 3] = NINF  # batch 0 padded on the left: its first rows see nothing
    elif name == "key_padding":  # right padding of the keys, per batch
        bias[0, :, :, skv - 70 :] = NINF
        bias[1, :, :, 5:] = NINF
    elif name == "band":  # a sliding window as a bias
        bias[:, :, (j > i) | (j < i - 40)] = NINF
    elif name == "empty_heads":  # whole heads and row ranges masked everywhere
        bias[1, 2] = NINF
        bias[0, 1, 50:120] = NINF
        bias[:, :, :, 200:] = NINF
    elif name == "nan_in_masked_region":  # a NaN amid -inf: its row is NaN, the rest as the definition
        bias[:, :, causal] = NINF
        bias[0, 0, min(3, sq - 1), skv - 1] = np.nan
        bias[1, 3, min(100, sq - 1), skv - 2] = np.nan
    else:
        raise ValueError(name)
    return bias


PATTERNS = ["causal", "causal_and_padding", "key_padding", "band", "empty_heads", "nan_in_masked_region"]


def scores(q: np.ndarray, k: np.ndarray, v: np.ndarray, bias: np.ndarray) -> tuple[np.ndarray, ...]:
    """float64 scores s = SCALE q k^T + bias, and k, v with their heads repeated for the GQA groups."""
    kk, vv = np.repeat(k, HQ // HK, axis=1), np.repeat(v, HQ // HK, axis=1)
    return np.einsum("bhqd,bhkd->bhqk", q, kk) * SCALE + bias, kk, vv


def definition(q: np.ndarray, k: np.ndarray, v: np.ndarray, bias: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float64 o and lse; a row masked everywhere is empty (o = 0, lse = -inf); NaN scores make NaN rows."""
    s, _, vv = scores(q, k, v, bias)
    with np.errstate(invalid="ignore"):
        m = s.max(axis=-1, keepdims=True)
        empty = m == -np.inf
        e = np.exp(s - np.where(empty, 0.0, m))
        total = e.sum(axis=-1, keepdims=True)
        o = np.where(empty, 0.0, (e / np.where(empty, 1.0, total)) @ vv)
        lse = np.where(empty, -np.inf, m + np.log(np.where(empty, 1.0, total)))
    return o, lse


@pytest.mark.parametrize("layout", ["keys_contiguous", "queries_contiguous"])
@pytest.mark.parametrize("name", PATTERNS)
@pytest.mark.parametrize("dt", [DT.FLOAT, DT.BFLOAT16, DT.HALF], ids=["fp32", "bf16", "fp16"])
@pytest.mark.parametrize(("sq", "skv"), [(300, 300), (130, 531), (1, 531), (5, 1100)])
def test_blocks_masked_by_the_bias(
    isa_handle: hipdnn.Handle, sq: int, skv: int, dt: hipdnn.DataType, name: str, layout: str
) -> None:
    rng = np.random.default_rng(sq + skv + PATTERNS.index(name))
    qd, kd = [B, HQ, sq, D], [B, HK, skv, D]
    q, k, v = (decode(encode(rng.standard_normal(dd).astype(np.float32), dt), dt) for dd in (qd, kd, kd))
    bias = decode(encode(pattern(name, sq, skv, rng).astype(np.float32), dt), dt)
    want_o, want_lse = definition(q, k, v, bias)

    g = hipdnn.Graph(name="masked_blocks", io_data_type=dt, intermediate_data_type=DT.FLOAT, compute_data_type=DT.FLOAT)
    t = {n: g.tensor(name=n, dim=dd, data_type=dt) for n, dd in (("q", qd), ("k", kd), ("v", kd))}
    bias_stride = [HQ * sq * skv, sq * skv, skv, 1] if layout == "keys_contiguous" else [HQ * sq * skv, sq * skv, 1, sq]
    tb = g.tensor(name="bias", dim=[B, HQ, sq, skv], stride=bias_stride, data_type=dt)
    o, stats = g.sdpa(t["q"], t["k"], t["v"], attn_scale=SCALE, bias=tb, generate_stats=True)
    o.set_output(True)
    assert stats is not None
    stats.set_output(True)
    g.build(isa_handle)
    out = encode(np.full(qd, np.nan, np.float32), dt)  # every element must be written
    lse = np.full([B, HQ, sq, 1], np.nan, np.float32)
    bias_bits = encode(bias.astype(np.float32), dt)
    if layout == "queries_contiguous":
        bias_bits = np.ascontiguousarray(bias_bits.transpose(0, 1, 3, 2)).transpose(0, 1, 3, 2)  # keys outermost
    pack = {
        t["q"]: encode(q.astype(np.float32), dt),
        t["k"]: encode(k.astype(np.float32), dt),
        t["v"]: encode(v.astype(np.float32), dt),
        tb: bias_bits,
        o: out,
        stats: lse,
    }
    g.execute(isa_handle, pack, np.empty(max(1, g.get_workspace_size()), np.uint8))
    got = decode(out, dt)

    nan_rows = np.isnan(want_o).any(axis=-1)
    assert np.array_equal(np.isnan(got).any(axis=-1), nan_rows), "NaN rows are the definition's, no others"
    assert np.array_equal(np.isnan(lse[..., 0]), nan_rows)
    empty = want_lse[..., 0] == -np.inf
    assert (got[empty] == 0.0).all() and (lse[..., 0][empty] == -np.inf).all(), "rows masked everywhere are empty"
    fine = ~nan_rows
    tol = 2e-5 if dt == DT.FLOAT else 2e-2
    np.testing.assert_allclose(got[fine], want_o[fine], rtol=tol, atol=tol)
    live = fine & ~empty
    np.testing.assert_allclose(lse[..., 0][live], want_lse[..., 0][live], rtol=tol, atol=tol)


def gradients(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, do: np.ndarray, bias: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """float64 dq, dk, dv from the definition; rows masked everywhere take no part."""
    s, kk, vv = scores(q, k, v, bias)
    m = s.max(axis=-1, keepdims=True)
    empty = m == -np.inf
    e = np.where(empty, 0.0, np.exp(s - np.where(empty, 0.0, m)))
    p = e / np.where(empty, 1.0, e.sum(axis=-1, keepdims=True))
    dp = do @ vv.transpose(0, 1, 3, 2)
    ds = p * (dp - (p * dp).sum(axis=-1, keepdims=True)) * SCALE
    dq = ds @ kk
    dk = (ds.transpose(0, 1, 3, 2) @ q).reshape(B, HK, HQ // HK, *k.shape[2:]).sum(axis=2)
    dv = (p.transpose(0, 1, 3, 2) @ do).reshape(B, HK, HQ // HK, *v.shape[2:]).sum(axis=2)
    return dq, dk, dv


@pytest.mark.parametrize("name", [n for n in PATTERNS if n != "nan_in_masked_region"])
@pytest.mark.parametrize("dt", [DT.FLOAT, DT.BFLOAT16], ids=["fp32", "bf16"])
@pytest.mark.parametrize(("sq", "skv"), [(300, 300), (130, 531)])
def test_backward_of_blocks_masked_by_the_bias(
    isa_handle: hipdnn.Handle, sq: int, skv: int, dt: hipdnn.DataType, name: str
) -> None:
    """The backward skips (query block, key block) pairs whose bias is -inf throughout: dq, dk, dv
    are the definition's, keys that no query sees get dk = dv = 0, rows that see no key dq = 0."""
    rng = np.random.default_rng(sq + skv + PATTERNS.index(name))
    qd, kd = [B, HQ, sq, D], [B, HK, skv, D]
    q, k, v, do = (decode(encode(rng.standard_normal(dd).astype(np.float32), dt), dt) for dd in (qd, kd, kd, qd))
    bias = decode(encode(pattern(name, sq, skv, rng).astype(np.float32), dt), dt)
    o64, lse64 = definition(q, k, v, bias)
    want = gradients(q, k, v, do, bias)

    g = hipdnn.Graph(
        name="masked_blocks_bwd", io_data_type=dt, intermediate_data_type=DT.FLOAT, compute_data_type=DT.FLOAT
    )
    t = {
        n: g.tensor(name=n, dim=dd, data_type=dt) for n, dd in (("q", qd), ("k", kd), ("v", kd), ("o", qd), ("do", qd))
    }
    ts = g.tensor(name="stats", dim=[B, HQ, sq, 1], data_type=DT.FLOAT)
    tb = g.tensor(name="bias", dim=[B, HQ, sq, skv], data_type=dt)
    grads = g.sdpa_backward(t["q"], t["k"], t["v"], t["o"], t["do"], ts, attn_scale=SCALE, bias=tb)
    for x in grads:
        x.set_output(True)
    g.build(isa_handle)
    outs = [encode(np.full(dd, np.nan, np.float32), dt) for dd in (qd, kd, kd)]  # every element written
    pack = {t[n]: encode(x.astype(np.float32), dt) for n, x in (("q", q), ("k", k), ("v", v), ("o", o64), ("do", do))}
    pack.update({ts: lse64.astype(np.float32), tb: encode(bias.astype(np.float32), dt)})
    pack.update(dict(zip(grads, outs)))
    g.execute(isa_handle, pack, np.empty(max(1, g.get_workspace_size()), np.uint8))
    for what, got, exact in zip(("dq", "dk", "dv"), outs, want):
        got64 = decode(got, dt)
        assert not np.isnan(got64).any(), f"{what}: every element written"
        err = np.abs(got64 - exact).max() / max(1.0, np.abs(exact).max())
        assert err < (2e-5 if dt == DT.FLOAT else 2e-2), f"{what} relative error {err:.2e}"
