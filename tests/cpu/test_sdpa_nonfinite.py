"""Non-finite values through the CPU engine's SDPA forward, as torch's SDPA treats them: a NaN score
(a NaN in k or in the bias) or a +inf one (in the bias) makes its row NaN, o and stats; -inf in the
bias masks its key, and a row masked everywhere is empty (o = 0, stats = -inf). Before, a row whose
softmax sum was NaN was written as an empty one: zeros where torch gives NaN, hiding the bad input.
Every kernel path: the panel kernel (Sq > 16), the rows kernel (decode, Sq <= 16) and the rows
kernel split over key chunks (one (batch, kv head) block, long keys, two threads)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import hipdnn

DT = hipdnn.DataType


@pytest.fixture(scope="module")
def handle() -> Iterator[hipdnn.Handle]:
    h = hipdnn.Handle(device="cpu")
    yield h
    h.close()


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, bias: np.ndarray, scale: float) -> np.ndarray:
    """float64, from the definition; rows whose every score is -inf are empty (0)."""
    s = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k.astype(np.float64)) * scale + bias
    with np.errstate(invalid="ignore"):
        m = s.max(axis=-1, keepdims=True)
        empty = m == -np.inf
        e = np.exp(s - np.where(empty, 0.0, m))
        p = e / np.where(empty, 1.0, e.sum(axis=-1, keepdims=True))
    return np.where(empty, 0.0, p @ v.astype(np.float64))


@pytest.mark.parametrize(
    ("sq", "skv", "path"),
    [(37, 53, "panel"), (5, 129, "rows"), (2, 4096, "rows split over key chunks")],
)
def test_nan_and_inf_scores_make_their_rows_nan(handle: hipdnn.Handle, sq: int, skv: int, path: str) -> None:
    b, h, d = 1, 1, 16
    rng = np.random.default_rng(sq)
    q, k, v = (rng.standard_normal((b, h, n, d)).astype(np.float32) for n in (sq, skv, skv))
    bias = rng.standard_normal((b, 1, sq, skv)).astype(np.float32)
    bias[0, 0, 0, skv // 2] = np.nan  # row 0: a NaN score
    bias[0, 0, 1, 1] = np.inf  # row 1: a +inf score
    if sq > 2:
        bias[0, 0, 2, :] = -np.inf  # row 2: every key masked, an empty row
        bias[0, 0, 3, : skv - 1] = -np.inf  # row 3 sees one key
    g = hipdnn.Graph(name="nonfinite", io_data_type=DT.FLOAT, intermediate_data_type=DT.FLOAT)
    t = {n: g.tensor(name=n, dim=list(a.shape), data_type=DT.FLOAT) for n, a in (("q", q), ("k", k), ("v", v))}
    tb = g.tensor(name="bias", dim=list(bias.shape), data_type=DT.FLOAT)
    o, stats = g.sdpa(t["q"], t["k"], t["v"], attn_scale=0.25, bias=tb, generate_stats=True)
    o.set_output(True)
    assert stats is not None
    stats.set_output(True)
    g.build(handle)
    out = np.full((b, h, sq, d), 7.0, np.float32)  # neither 0 nor NaN: every element is written
    lse = np.full((b, h, sq, 1), 7.0, np.float32)
    pack = {t["q"]: q, t["k"]: k, t["v"]: v, tb: bias, o: out, stats: lse}
    g.execute(handle, pack, np.empty(g.get_workspace_size(), np.uint8))
    want = reference(q, k, v, bias, 0.25)
    assert np.isnan(out[0, 0, :2]).all(), f"{path}: rows with a NaN / +inf score must be NaN"
    assert np.isnan(lse[0, 0, :2]).all()
    rest = slice(2, sq)
    assert not np.isnan(out[0, 0, rest]).any()
    np.testing.assert_allclose(out[0, 0, rest], want[0, 0, rest], rtol=1e-5, atol=1e-5)
    if sq > 2:
        assert (out[0, 0, 2] == 0.0).all() and lse[0, 0, 2, 0] == -np.inf, "a row masked everywhere is empty"
        np.testing.assert_allclose(out[0, 0, 3], v[0, 0, skv - 1], rtol=1e-6)


def test_a_nan_key_poisons_every_row_that_sees_it(handle: hipdnn.Handle) -> None:
    """NaN in k: the rows that see that key are NaN; under a causal mask the rows before it are not."""
    b, h, s, d = 1, 2, 40, 8
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((b, h, s, d)).astype(np.float32) for _ in range(3))
    k[0, 1, 30, 3] = np.nan
    g = hipdnn.Graph(name="nan_key", io_data_type=DT.FLOAT, intermediate_data_type=DT.FLOAT)
    t = {n: g.tensor(name=n, dim=[b, h, s, d], data_type=DT.FLOAT) for n in ("q", "k", "v")}
    o, _ = g.sdpa(t["q"], t["k"], t["v"], attn_scale=0.5, use_causal_mask=True)
    o.set_output(True)
    g.build(handle)
    out = np.full((b, h, s, d), 7.0, np.float32)
    g.execute(handle, {t["q"]: q, t["k"]: k, t["v"]: v, o: out}, np.empty(g.get_workspace_size(), np.uint8))
    assert np.isnan(out[0, 1, 30:]).all()
    assert not np.isnan(out[0, 1, :30]).any() and not np.isnan(out[0, 0]).any()
