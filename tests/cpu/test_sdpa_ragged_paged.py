"""Ragged (packed, THD) tensors and paged K/V caches on the CPU engine (issue #29, rfcs/0012), with
cudnn-frontend's names: ``tensor.set_ragged_offset(offsets)`` and ``sdpa(...,
paged_attention_k_table=, paged_attention_v_table=, paged_attention_max_seq_len_kv=)``.

Every value is checked against a float64 reference written here from the definition (per sequence:
``P = softmax(scale q k^T)`` over the visible keys, ``o = P v``; the backward from the softmax
Jacobian), and the ragged runs also against the same data laid out padded (BHSD) through the padded
kernels. Buffers are guard-banded and NaN-filled: every element no sequence owns (gaps between packed
sequences, the tail of the buffer, unused cache blocks) is NaN in the inputs, so a stray read poisons
the result, and stays NaN in the outputs, so a stray write shows. Offsets and page tables are data:
hostile ones are refused at execute with BAD_PARAM naming the tensor, the batch and the value, and
nothing is written.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.lib.stride_tricks import as_strided

import hipdnn
from hipdnn.plugins import RAGGED_PAGED_API_VERSION, parse_api_version, required_api_version

DT = hipdnn.DataType
ROOT = Path(__file__).resolve().parents[2]
GUARD = 97  # NaN elements before and after every buffer


@pytest.fixture(scope="module")
def handle() -> Iterator[hipdnn.Handle]:
    h = hipdnn.Handle(device="cpu")
    yield h
    h.close()


# -- float64 reference ---------------------------------------------------------------------------------
def visible(lq: int, lkv: int, causal: str | None) -> np.ndarray:
    """[lq, lkv] keys each query sees: all, causal top-left (j <= i) or bottom-right (j <= i + lkv - lq)."""
    i, j = np.arange(lq)[:, None], np.arange(lkv)[None, :]
    if causal is None:
        return np.ones((lq, lkv), bool)
    return j <= i + (lkv - lq if causal == "br" else 0)


def ref_forward(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, causal: str | None):
    """q [H, lq, D], k [Hk, lkv, D], v [Hk, lkv, Dv] (float64) -> o [H, lq, Dv], lse [H, lq], P."""
    h, lq = q.shape[:2]
    g = h // k.shape[0]
    k, v = np.repeat(k, g, 0), np.repeat(v, g, 0)
    vis = visible(lq, k.shape[1], causal)
    s = np.where(vis, scale * q @ k.transpose(0, 2, 1), -np.inf)
    m = s.max(-1, keepdims=True) if s.shape[-1] else np.full((h, lq, 1), -np.inf)
    live = np.isfinite(m)
    e = np.where(vis, np.exp(s - np.where(live, m, 0.0)), 0.0)
    den = e.sum(-1, keepdims=True)
    p = np.where(den > 0, e / np.where(den > 0, den, 1.0), 0.0)
    lse = np.where(den[..., 0] > 0, (np.where(live, m, 0.0) + np.log(np.where(den > 0, den, 1.0)))[..., 0], -np.inf)
    return p @ v, lse, p


def ref_backward(q, k, v, do, scale, causal, absolute: bool = False):
    """Gradients of o = softmax(scale q k^T) v for dL/do = do (float64, per sequence). ``absolute``:
    the same sums over the terms' magnitudes, which is what the rounding of the result scales with
    when dS = P (dP - delta) cancels."""
    hk = k.shape[0]
    g = q.shape[0] // hk
    o, _, p = ref_forward(q, k, v, scale, causal)
    kr, vr = np.repeat(k, g, 0), np.repeat(v, g, 0)
    if absolute:
        q, kr, vr, do = np.abs(q), np.abs(kr), np.abs(vr), np.abs(do)
    dv = p.transpose(0, 2, 1) @ do
    dp = do @ vr.transpose(0, 2, 1)
    ds = p * (dp + (p * dp).sum(-1, keepdims=True)) if absolute else p * (dp - (p * dp).sum(-1, keepdims=True))
    dq = scale * ds @ kr
    dk = scale * ds.transpose(0, 2, 1) @ q
    fold = lambda x: x.reshape(hk, g, *x.shape[1:]).sum(1)  # noqa: E731
    return dq, fold(dk), fold(dv)


# -- packed buffers ------------------------------------------------------------------------------------
def np_type(dt: DT) -> Any:
    return {DT.FLOAT: np.float32, DT.HALF: np.float16, DT.BFLOAT16: ml_dtypes.bfloat16}[dt]


def thd(b: int, h: int, s: int, d: int) -> tuple[list[int], list[int]]:
    """dims and strides of a packed [B, H, S, D] tensor: tokens of H * D elements one after another."""
    return [b, h, s, d], [s * h * d, d, h * d, 1]


class Packed:
    """A NaN-filled 1-D buffer with guard bands, seen as a ragged tensor (dims, strides) whose batch b
    starts at element offsets[b]; rows[b] tokens of each sequence hold data."""

    def __init__(self, dims: list[int], strides: list[int], offsets: list[int], rows: list[int], dt: DT) -> None:
        self.dims, self.strides, self.offsets, self.rows, self.dt = dims, strides, offsets, rows, dt
        self.extent = 1 + sum((n - 1) * s for n, s in zip(dims, strides))
        self.base = np.full(GUARD + self.extent + GUARD, np.nan, np_type(dt))
        self.mine = np.zeros(self.extent, bool)  # elements some sequence owns
        for b in range(dims[0]):
            self.mine[self._index(b, rows[b])] = True

    def _index(self, b: int, n: int) -> np.ndarray:
        h, d = self.dims[1], self.dims[3]
        hh, ss, dd = np.meshgrid(np.arange(h), np.arange(n), np.arange(d), indexing="ij")
        return (self.offsets[b] + hh * self.strides[1] + ss * self.strides[2] + dd * self.strides[3]).ravel()

    @property
    def view(self) -> np.ndarray:
        body = self.base[GUARD : GUARD + self.extent]
        return as_strided(body, self.dims, [s * body.itemsize for s in self.strides])

    def put(self, b: int, x: np.ndarray) -> None:
        """Store batch b's [H, n, D] values."""
        self.base[GUARD + self._index(b, x.shape[1])] = x.astype(np.float32).astype(np_type(self.dt)).ravel()

    def get(self, b: int) -> np.ndarray:
        n = self.rows[b]
        return self.base[GUARD + self._index(b, n)].astype(np.float64).reshape(self.dims[1], n, self.dims[3])

    def untouched_elsewhere(self) -> bool:
        body = self.base[GUARD : GUARD + self.extent].astype(np.float32)
        return bool(
            np.isnan(self.base[:GUARD].astype(np.float32)).all()
            and np.isnan(self.base[GUARD + self.extent :].astype(np.float32)).all()
            and np.isnan(body[~self.mine]).all()
        )


def pack_offsets(rows: list[int], per_token: int, gaps: list[int] | None = None) -> list[int]:
    """Start of each sequence (in elements) when packed one after another (with ``gaps`` tokens before each)."""
    out, at = [], 0
    for b, n in enumerate(rows):
        at += (gaps[b] if gaps else 0) * per_token
        out.append(at)
        at += n * per_token
    return out + [at]


# -- ragged graphs -------------------------------------------------------------------------------------
@dataclass
class Case:
    lens_q: list[int]
    lens_kv: list[int]
    h: int = 4
    hk: int = 2
    sq: int = 129
    skv: int = 129
    d: int = 64
    causal: str | None = None
    dt: DT = DT.FLOAT
    gaps: list[int] | None = None  # tokens left free before each sequence
    ragged: tuple[str, ...] = ("q", "k", "v", "o", "stats")
    seed: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def b(self) -> int:
        return len(self.lens_q)


def causal_options(causal: str | None) -> dict[str, Any]:
    if causal is None:
        return {}
    return {"use_causal_mask": True} if causal == "tl" else {"use_causal_mask_bottom_right": True}


class RaggedFwd:
    """A ragged forward graph of a Case, and its execution into fresh guarded buffers."""

    def __init__(self, handle: hipdnn.Handle, c: Case) -> None:
        self.c, self.handle = c, handle
        b, h, hk, d = c.b, c.h, c.hk, c.d
        g = hipdnn.Graph(
            name="ragged_fwd", io_data_type=c.dt, intermediate_data_type=DT.FLOAT, compute_data_type=DT.FLOAT
        )
        self.shapes = {"q": thd(b, h, c.sq, d), "k": thd(b, hk, c.skv, d), "v": thd(b, hk, c.skv, d)}
        self.shapes["o"] = thd(b, h, c.sq, d)
        self.shapes["stats"] = ([b, h, c.sq, 1], [c.sq * h, 1, h, 1])
        self.t = {
            n: g.tensor(name=n, dim=dd, stride=ss, data_type=c.dt) for n, (dd, ss) in self.shapes.items() if n in "qkv"
        }
        self.off_t: dict[str, hipdnn.TensorAttributes] = {}
        self.tsq = g.tensor(name="seq_q", dim=[b, 1, 1, 1], data_type=DT.INT32)
        self.tskv = g.tensor(name="seq_kv", dim=[b, 1, 1, 1], data_type=DT.INT32)
        for n in ("q", "k", "v", "o", "stats"):
            if n in c.ragged:
                self.off_t[n] = g.tensor(name=f"{n}_off", dim=[b + 1, 1, 1, 1], data_type=DT.INT64)
        for n in ("q", "k", "v"):
            if n in self.off_t:
                self.t[n].set_ragged_offset(self.off_t[n])
        o, stats = g.sdpa(
            self.t["q"],
            self.t["k"],
            self.t["v"],
            attn_scale=0.125,
            generate_stats=True,
            use_padding_mask=True,
            seq_len_q=self.tsq,
            seq_len_kv=self.tskv,
            **causal_options(c.causal),
            **c.extra,
        )
        assert stats is not None
        o.set_output(True).set_dim(self.shapes["o"][0]).set_stride(self.shapes["o"][1])
        stats.set_output(True).set_dim(self.shapes["stats"][0]).set_stride(self.shapes["stats"][1])
        self.t["o"], self.t["stats"] = o, stats
        for n in ("o", "stats"):
            if n in self.off_t:
                self.t[n].set_ragged_offset(self.off_t[n])
        g.build(handle)
        self.g = g
        self.ws = np.empty(max(1, g.get_workspace_size()), np.uint8)

    def offsets(self, n: str) -> list[int]:
        c = self.c
        rows = c.lens_q if n in ("q", "o", "stats") else c.lens_kv
        dims = self.shapes[n][0]
        return pack_offsets(rows, dims[1] * dims[3], c.gaps)

    def buffers(self) -> dict[str, Packed]:
        c = self.c
        out = {}
        for n, (dims, strides) in self.shapes.items():
            rows = c.lens_q if n in ("q", "o", "stats") else c.lens_kv
            # padded: batch b at b * strides[0]
            offs = self.offsets(n)[:-1] if n in self.off_t else [b * strides[0] for b in range(c.b)]
            out[n] = Packed(dims, strides, offs, rows, DT.FLOAT if n == "stats" else c.dt)
        return out

    def run(self, data: dict[str, list[np.ndarray]], offsets: dict[str, list[int]] | None = None) -> dict[str, Packed]:
        """Execute on data[n][b] ([H, len, D] per sequence); offsets override the packing (hostile tests)."""
        c = self.c
        bufs = self.buffers()
        for n in ("q", "k", "v"):
            for b, x in enumerate(data[n]):
                bufs[n].put(b, x)
        vp: dict[Any, Any] = {self.t[n]: p.view for n, p in bufs.items()}
        vp[self.tsq] = np.array(c.lens_q, np.int32).reshape(c.b, 1, 1, 1)
        vp[self.tskv] = np.array(c.lens_kv, np.int32).reshape(c.b, 1, 1, 1)
        for n, t in self.off_t.items():
            vals = (offsets or {}).get(n, self.offsets(n))
            vp[t] = np.array(vals, np.int64).reshape(c.b + 1, 1, 1, 1)
        self.g.execute(self.handle, vp, self.ws)
        return bufs


def random_data(c: Case, rng: np.random.Generator) -> dict[str, list[np.ndarray]]:
    def rnd(h: int, n: int) -> np.ndarray:
        x = rng.standard_normal((h, n, c.d)).astype(np.float32)
        return x.astype(np_type(c.dt)).astype(np.float64)  # the values the engine sees

    return {
        "q": [rnd(c.h, n) for n in c.lens_q],
        "k": [rnd(c.hk, n) for n in c.lens_kv],
        "v": [rnd(c.hk, n) for n in c.lens_kv],
    }


TOL = {DT.FLOAT: 2e-6, DT.HALF: 2e-3, DT.BFLOAT16: 1e-2}


def check_forward(c: Case, bufs: dict[str, Packed], data: dict[str, list[np.ndarray]]) -> None:
    for b in range(c.b):
        if c.lens_q[b] == 0:
            continue
        o, lse, _ = ref_forward(data["q"][b], data["k"][b], data["v"][b], 0.125, c.causal)
        got_o, got_s = bufs["o"].get(b), bufs["stats"].get(b)[..., 0]
        scale = max(1.0, float(np.abs(o).max(initial=0.0)))
        np.testing.assert_allclose(got_o, o, atol=TOL[c.dt] * scale * 4, rtol=0, err_msg=f"o of batch {b}")
        np.testing.assert_allclose(got_s, lse, atol=1e-5, rtol=1e-5, err_msg=f"stats of batch {b}")
    for n in ("o", "stats"):
        assert not np.isnan(np.concatenate([bufs[n].get(b).ravel() for b in range(c.b)])).any(), f"{n} unwritten"
        if n in c.ragged:
            assert bufs[n].untouched_elsewhere(), f"{n}: an element no sequence owns was written"


def padded_run(handle: hipdnn.Handle, c: Case, data: dict[str, list[np.ndarray]]) -> dict[str, np.ndarray]:
    """The same data through a plain padded BHSD graph (zeros in the padding rows)."""
    g = hipdnn.Graph(name="padded", io_data_type=c.dt, intermediate_data_type=DT.FLOAT, compute_data_type=DT.FLOAT)
    q = g.tensor(name="q", dim=[c.b, c.h, c.sq, c.d], data_type=c.dt)
    k = g.tensor(name="k", dim=[c.b, c.hk, c.skv, c.d], data_type=c.dt)
    v = g.tensor(name="v", dim=[c.b, c.hk, c.skv, c.d], data_type=c.dt)
    tsq = g.tensor(name="sq", dim=[c.b, 1, 1, 1], data_type=DT.INT32)
    tskv = g.tensor(name="skv", dim=[c.b, 1, 1, 1], data_type=DT.INT32)
    o, stats = g.sdpa(
        q,
        k,
        v,
        attn_scale=0.125,
        generate_stats=True,
        use_padding_mask=True,
        seq_len_q=tsq,
        seq_len_kv=tskv,
        **causal_options(c.causal),
    )
    assert stats is not None
    o.set_output(True)
    stats.set_output(True)
    g.build(handle)
    arrs = {}
    for n, t, hh, s in (("q", q, c.h, c.sq), ("k", k, c.hk, c.skv), ("v", v, c.hk, c.skv)):
        a = np.zeros((c.b, hh, s, c.d), np_type(c.dt))
        for b, x in enumerate(data[n]):
            a[b, :, : x.shape[1]] = x
        arrs[t] = a
    oo = np.full((c.b, c.h, c.sq, c.d), np.nan, np_type(c.dt))
    ss = np.full((c.b, c.h, c.sq, 1), np.nan, np.float32)
    vp = {**arrs, o: oo, stats: ss, tsq: np.array(c.lens_q, np.int32).reshape(-1, 1, 1, 1)}
    vp[tskv] = np.array(c.lens_kv, np.int32).reshape(-1, 1, 1, 1)
    g.execute(handle, vp, np.empty(max(1, g.get_workspace_size()), np.uint8))
    return {"o": oo.astype(np.float64), "stats": ss.astype(np.float64)}


FWD_CASES = {
    "lengths 37/0/129/1": Case([37, 0, 129, 1], [129, 5, 37, 1]),
    "causal top-left": Case([37, 0, 129, 1], [129, 5, 37, 1], causal="tl"),
    "causal bottom-right": Case([37, 1, 129, 0], [129, 37, 129, 3], causal="br"),
    "mha, gaps between sequences": Case([16, 37, 3], [20, 37, 64], h=3, hk=3, d=40, gaps=[3, 0, 7], sq=64, skv=64),
    "mqa, empty keys": Case([5, 9], [0, 17], h=4, hk=1, sq=16, skv=32),
    "bf16": Case([37, 12], [50, 129], dt=DT.BFLOAT16),
    "only q and o ragged": Case([37, 20], [40, 129], ragged=("q", "o")),
    "only k and v ragged": Case([37, 20], [40, 129], ragged=("k", "v")),
    "decode rows": Case([1, 1, 1], [129, 37, 1], causal="br", sq=8),
}


@pytest.mark.parametrize("name", list(FWD_CASES))
def test_ragged_forward_matches_float64_and_the_padded_run(handle: hipdnn.Handle, name: str) -> None:
    c = FWD_CASES[name]
    data = random_data(c, np.random.default_rng(c.seed + hash(name) % 1000))
    bufs = RaggedFwd(handle, c).run(data)
    check_forward(c, bufs, data)
    padded = padded_run(handle, c, data)
    for b in range(c.b):
        n = c.lens_q[b]
        if n == 0:
            continue
        # the same kernels at the same lengths: equal to within the fp32 rounding of a different
        # tiling (bit-identical where the same kernel serves both)
        np.testing.assert_allclose(bufs["o"].get(b), padded["o"][b, :, :n], atol=TOL[c.dt] * 4, rtol=TOL[c.dt])
        np.testing.assert_allclose(bufs["stats"].get(b), padded["stats"][b, :, :n], atol=1e-5, rtol=1e-6)


def test_left_padding_is_an_offset(handle: hipdnn.Handle) -> None:
    """transformers-style batched generation: each sequence right-aligned in a padded [B, S, H, D]
    buffer (padding on the left); the offsets say where its tokens start, no bias tensor needed."""
    lens, s, h, d = [5, 129, 37], 129, 4, 64
    c = Case(lens, lens, h=h, hk=h, sq=s, skv=s, d=d, causal="br")
    rf = RaggedFwd(handle, c)
    offs = {
        n: [b * s * h * d + (s - lens[b]) * h * d for b in range(3)] + [3 * s * h * d] for n in ("q", "k", "v", "o")
    }
    offs["stats"] = [b * s * h + (s - lens[b]) * h for b in range(3)] + [3 * s * h]
    rf.offsets = lambda n: offs[n]  # type: ignore[method-assign]
    data = random_data(c, np.random.default_rng(5))
    bufs = rf.run(data)
    check_forward(c, bufs, data)


# -- backward -------------------------------------------------------------------------------------------
class RaggedBwd:
    def __init__(self, handle: hipdnn.Handle, c: Case, ragged: tuple[str, ...]) -> None:
        self.c, self.handle, self.ragged = c, handle, ragged
        b, h, hk, d = c.b, c.h, c.hk, c.d
        self.shapes = {
            "q": thd(b, h, c.sq, d),
            "k": thd(b, hk, c.skv, d),
            "v": thd(b, hk, c.skv, d),
            "o": thd(b, h, c.sq, d),
            "do": thd(b, h, c.sq, d),
            "stats": ([b, h, c.sq, 1], [c.sq * h, 1, h, 1]),
        }
        g = hipdnn.Graph(
            name="ragged_bwd", io_data_type=c.dt, intermediate_data_type=DT.FLOAT, compute_data_type=DT.FLOAT
        )
        self.t = {
            n: g.tensor(name=n, dim=dd, stride=ss, data_type=DT.FLOAT if n == "stats" else c.dt)
            for n, (dd, ss) in self.shapes.items()
        }
        self.tsq = g.tensor(name="seq_q", dim=[b, 1, 1, 1], data_type=DT.INT32)
        self.tskv = g.tensor(name="seq_kv", dim=[b, 1, 1, 1], data_type=DT.INT32)
        # one offset tensor per side and per tokens' width, as a THD training step shares them
        wanted = {"q": {"q", "o", "do", "dq"}, "k": {"k", "v", "dk", "dv"}, "stats": {"stats"}}
        self.off = {
            key: g.tensor(name=f"off_{key}", dim=[b + 1, 1, 1, 1], data_type=DT.INT32)
            for key, roles in wanted.items()
            if roles & set(ragged)
        }
        side = {n: self.off.get(key) for key, roles in wanted.items() for n in roles}
        for n in ("q", "k", "v", "o", "do", "stats"):
            if n in ragged:
                self.t[n].set_ragged_offset(side[n])
        grads = g.sdpa_backward(
            *(self.t[n] for n in ("q", "k", "v", "o", "do", "stats")),
            attn_scale=0.125,
            use_padding_mask=True,
            seq_len_q=self.tsq,
            seq_len_kv=self.tskv,
            **causal_options(c.causal),
        )
        for n, x in zip(("dq", "dk", "dv"), grads):
            x.set_output(True).set_dim(self.shapes[n[1]][0]).set_stride(self.shapes[n[1]][1])
            if n in ragged:
                x.set_ragged_offset(side[n])
            self.t[n] = x
        g.build(handle)
        self.g = g
        self.ws = np.empty(max(1, g.get_workspace_size()), np.uint8)

    def run(self, data: dict[str, list[np.ndarray]]) -> dict[str, Packed]:
        c = self.c
        width = {"q": c.h * c.d, "k": c.hk * c.d, "stats": c.h}
        offs = {n: pack_offsets(c.lens_q if n != "k" else c.lens_kv, w, c.gaps) for n, w in width.items()}
        bufs: dict[str, Packed] = {}
        for n in ("q", "k", "v", "o", "do", "stats", "dq", "dk", "dv"):
            dims, strides = self.shapes[n[1] if n in ("dq", "dk", "dv") else n]
            q_side = n in ("q", "o", "do", "stats", "dq")
            rows = c.lens_q if q_side else c.lens_kv
            key = "stats" if n == "stats" else ("q" if q_side else "k")
            o = offs[key][:-1] if n in self.ragged else [b * strides[0] for b in range(c.b)]
            bufs[n] = Packed(dims, strides, o, rows, DT.FLOAT if n == "stats" else c.dt)
        for n in ("q", "k", "v", "o", "do", "stats"):
            for b, x in enumerate(data[n]):
                bufs[n].put(b, x)
        vp: dict[Any, Any] = {self.t[n]: p.view for n, p in bufs.items()}
        vp[self.tsq] = np.array(c.lens_q, np.int32).reshape(-1, 1, 1, 1)
        vp[self.tskv] = np.array(c.lens_kv, np.int32).reshape(-1, 1, 1, 1)
        for key, t in self.off.items():
            vp[t] = np.array(offs[key], np.int32).reshape(-1, 1, 1, 1)
        self.g.execute(self.handle, vp, self.ws)
        return bufs


BWD_CASES = {
    "gqa": Case([37, 0, 129, 1], [129, 5, 37, 1]),
    "causal top-left": Case([37, 129, 1], [37, 129, 20], causal="tl", gaps=[2, 0, 5]),
    "causal bottom-right, mqa": Case([37, 1, 64], [129, 37, 64], h=4, hk=1, causal="br", d=40),
    "empty keys": Case([3, 9], [0, 17], sq=16, skv=32),
}


@pytest.mark.parametrize("ragged", [("q", "k", "v", "o", "do", "stats", "dq", "dk", "dv"), ("q", "o", "do", "dq")])
@pytest.mark.parametrize("name", list(BWD_CASES))
def test_ragged_backward_matches_float64(handle: hipdnn.Handle, name: str, ragged: tuple[str, ...]) -> None:
    c = BWD_CASES[name]
    rng = np.random.default_rng(11)
    data = random_data(c, rng)
    data["do"] = [rng.standard_normal((c.h, n, c.d)) for n in c.lens_q]
    data["o"], data["stats"] = [], []
    for b in range(c.b):
        o, lse, _ = ref_forward(data["q"][b], data["k"][b], data["v"][b], 0.125, c.causal)
        data["o"].append(o)
        data["stats"].append(lse[..., None])
    data["do"] = [x.astype(np.float32).astype(np.float64) for x in data["do"]]
    data["o"] = [x.astype(np.float32).astype(np.float64) for x in data["o"]]
    bufs = RaggedBwd(handle, c, ragged).run(data)
    for b in range(c.b):
        ref = ref_backward(data["q"][b], data["k"][b], data["v"][b], data["do"][b], 0.125, c.causal)
        mag = ref_backward(data["q"][b], data["k"][b], data["v"][b], data["do"][b], 0.125, c.causal, absolute=True)
        for n, r, m in zip(("dq", "dk", "dv"), ref, mag):
            got = bufs[n].get(b)
            assert not np.isnan(got).any(), f"{n} of batch {b} unwritten"
            scale = max(1e-3, float(m.max(initial=0.0)))
            np.testing.assert_allclose(got, r, atol=2e-5 * scale, rtol=0, err_msg=f"{n} of batch {b}")
    for n in ("dq", "dk", "dv"):
        if n in ragged:
            assert bufs[n].untouched_elsewhere(), f"{n}: an element no sequence owns was written"
        else:  # padded: the padding rows are zero, as the padded kernel writes them
            view = bufs[n].view.astype(np.float32)
            rows = c.lens_q if n == "dq" else c.lens_kv
            for b in range(c.b):
                assert (view[b, :, rows[b] :] == 0).all()


# -- overrides ------------------------------------------------------------------------------------------
def test_ragged_overrides_smaller_than_the_build(handle: hipdnn.Handle) -> None:
    """Built once at B = 4, S = 160; run at B = 2, S = 37 through overrides of every tensor."""
    bmax, smax, h, d = 4, 160, 2, 32
    g = hipdnn.Graph(name="ragged_ovr", io_data_type=DT.FLOAT, is_override_shape_enabled=True)
    dims, strides = thd(bmax, h, smax, d)
    t = {n: g.tensor(name=n, dim=dims, stride=strides, data_type=DT.FLOAT) for n in "qkv"}
    off = g.tensor(name="off", dim=[bmax + 1, 1, 1, 1], data_type=DT.INT32)
    sq = g.tensor(name="sq", dim=[bmax, 1, 1, 1], data_type=DT.INT32)
    for x in t.values():
        x.set_ragged_offset(off)
    o, _ = g.sdpa(
        t["q"],
        t["k"],
        t["v"],
        attn_scale=0.125,
        use_padding_mask=True,
        seq_len_q=sq,
        seq_len_kv=sq,
        use_causal_mask=True,
    )
    o.set_output(True).set_ragged_offset(off)
    g.build(handle)
    ws = np.empty(g.get_workspace_size(), np.uint8)
    b, s = 2, 37
    lens = [37, 20]
    odims, ostrides = thd(b, h, s, d)
    offs = pack_offsets(lens, h * d)
    rng = np.random.default_rng(3)
    data = {n: [rng.standard_normal((h, n_, d)) for n_ in lens] for n in "qkv"}
    bufs = {n: Packed(odims, ostrides, offs[:-1], lens, DT.FLOAT) for n in "qkvo"}
    for n in "qkv":
        for i, x in enumerate(data[n]):
            bufs[n].put(i, x)
    ovr = {x: hipdnn.OverrideEntry(shape=odims, stride=ostrides) for x in (*t.values(), o)}
    ovr[off] = hipdnn.OverrideEntry(shape=[b + 1, 1, 1, 1], stride=[1, 1, 1, 1])
    ovr[sq] = hipdnn.OverrideEntry(shape=[b, 1, 1, 1], stride=[1, 1, 1, 1])
    vp = {x: bufs[n].view for n, x in (*t.items(), ("o", o))}
    vp[off] = np.array(offs, np.int32).reshape(-1, 1, 1, 1)
    vp[sq] = np.array(lens, np.int32).reshape(-1, 1, 1, 1)
    g.execute(handle, vp, ws, overrides=ovr)
    for i in range(b):
        ref, _, _ = ref_forward(data["q"][i], data["k"][i], data["v"][i], 0.125, "tl")
        np.testing.assert_allclose(bufs["o"].get(i), ref, atol=2e-6, rtol=0)
    assert bufs["o"].untouched_elsewhere()
    # offsets overridden shorter than B + 1: the engine refuses the call (the host has no rule for it)
    ovr[off] = hipdnn.OverrideEntry(shape=[b, 1, 1, 1], stride=[1, 1, 1, 1])
    vp[off] = np.array(offs[:b], np.int32).reshape(-1, 1, 1, 1)
    with pytest.raises(hipdnn.HipdnnError) as e:
        g.execute(handle, vp, ws, overrides=ovr)
    assert re.search(r"ragged offsets \(uid \d+\) of q must be \[B\+1,1,1,1\] with B = 2", bad_param(e.value))


# -- hostile offsets ------------------------------------------------------------------------------------
def bad_param(exc: hipdnn.HipdnnError) -> str:
    assert "BAD_PARAM" in exc.message, exc.message
    return exc.message


SMALL = Case([5, 0, 16], [7, 3, 16], h=2, hk=2, sq=16, skv=16, d=8)


@pytest.fixture(scope="module")
def small(handle: hipdnn.Handle) -> RaggedFwd:
    return RaggedFwd(handle, SMALL)


@pytest.mark.parametrize(
    ("tensor", "batch", "value"),
    [
        ("q", 0, -1),  # before the buffer
        ("q", 2, 3 * 16 * 16 - 5 * 16),  # its 16 rows run past the end
        ("k", 2, 2**62),  # far past, no overflow
        ("o", 0, 3 * 16 * 16 - 1),  # an output: nothing is written
        ("stats", 2, 3 * 16 * 2 - 3),  # stats count H elements a token
        ("v", 0, -(2**63)),
    ],
)
def test_hostile_offsets_are_refused_naming_tensor_batch_and_value(
    small: RaggedFwd, tensor: str, batch: int, value: int
) -> None:
    data = random_data(SMALL, np.random.default_rng(1))
    offs = {n: small.offsets(n) for n in small.off_t}
    offs[tensor][batch] = value
    bufs = small.buffers()
    with pytest.raises(hipdnn.HipdnnError) as e:
        small.run(data, offs)
    msg = bad_param(e.value)
    assert f"{tensor} (uid" in msg and f"ragged offset {value} of batch {batch}" in msg, msg
    del bufs


def test_offsets_of_empty_sequences_are_not_used(small: RaggedFwd) -> None:
    """Batch 1 has no query and 3 keys; an empty sequence's offset is never read as an address."""
    data = random_data(SMALL, np.random.default_rng(1))
    offs = {n: small.offsets(n) for n in small.off_t}
    for n in ("q", "o", "stats"):
        offs[n][1] = -(2**60)  # the empty query side of batch 1: ignored
    bufs = small.run(data, offs)
    check_forward(SMALL, bufs, data)


def test_a_refused_call_writes_nothing(small: RaggedFwd) -> None:
    data = random_data(SMALL, np.random.default_rng(1))
    offs = {n: small.offsets(n) for n in small.off_t}
    offs["k"][2] = 10**9
    captured: dict[str, Packed] = {}
    orig = small.buffers

    def keep() -> dict[str, Packed]:
        captured.update(orig())
        return captured

    small.buffers = keep  # type: ignore[method-assign]
    try:
        with pytest.raises(hipdnn.HipdnnError):
            small.run(data, offs)
    finally:
        small.buffers = orig  # type: ignore[method-assign]
    assert np.isnan(captured["o"].base.astype(np.float32)).all() and np.isnan(captured["stats"].base).all()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lens=st.lists(st.integers(0, 16), min_size=3, max_size=3),
    lens_kv=st.lists(st.integers(0, 16), min_size=3, max_size=3),
    gaps=st.lists(st.integers(0, 16), min_size=3, max_size=3),
    hostile=st.one_of(
        st.none(),
        st.tuples(st.sampled_from(["q", "k", "v", "o", "stats"]), st.integers(0, 2), st.integers(-(2**63), 2**63 - 1)),
    ),
)
def test_any_offsets_either_run_right_or_are_refused(
    small: RaggedFwd, lens: list[int], lens_kv: list[int], gaps: list[int], hostile: tuple[str, int, int] | None
) -> None:
    """Random lengths and gaps (the sequences packed with free tokens between them) give the float64
    values; one offset set to any int64 is refused exactly when its sequence would leave the tensor."""
    qgaps = [min(gp, 16 - n) for gp, n in zip(gaps, lens)]
    kvgaps = [min(gp, 16 - n) for gp, n in zip(gaps, lens_kv)]
    c = Case(lens, lens_kv, h=2, hk=2, sq=16, skv=16, d=8)
    honest = {}
    for n in small.off_t:
        q_side = n in ("q", "o", "stats")
        honest[n] = pack_offsets(lens if q_side else lens_kv, 2 if n == "stats" else 16, qgaps if q_side else kvgaps)
    saved = small.c
    small.c = c
    small.offsets = lambda n: honest[n]  # type: ignore[method-assign]
    try:
        data = random_data(c, np.random.default_rng(sum(lens) + 7 * sum(lens_kv)))
        if hostile is None:
            check_forward(c, small.run(data), data)
            return
        n, b, val = hostile
        offs = {k: list(v) for k, v in honest.items()}
        offs[n][b] = val
        rows = (lens if n in ("q", "o", "stats") else lens_kv)[b]
        per = 2 if n == "stats" else 16
        span = 0 if rows == 0 else (1 + (rows - 1) * per + per - 1)
        inside = rows == 0 or 0 <= val <= 3 * 16 * per - span
        if inside:
            small.run(data, offs)  # runs (the values then follow the offsets given, not checked here)
        else:
            with pytest.raises(hipdnn.HipdnnError) as e:
                small.run(data, offs)
            assert f"ragged offset {val} of batch {b}" in bad_param(e.value)
    finally:
        small.c = saved
        del small.offsets


# -- paged K/V ------------------------------------------------------------------------------------------
@dataclass
class PagedCase:
    lens_q: list[int]
    lens_kv: list[int]
    block: int = 16
    sq: int = 1
    h: int = 8
    hk: int = 2
    d: int = 64
    causal: str | None = "br"
    max_blocks: int = 0  # 0: enough for the longest sequence
    spare_blocks: int = 3  # unused (NaN) blocks in the cache
    max_seq_len: int | None = None
    dt: DT = DT.FLOAT
    ragged_q: bool = False
    seed: int = 0


class Paged:
    def __init__(self, handle: hipdnn.Handle, c: PagedCase) -> None:
        self.c, self.handle = c, handle
        self.b = len(c.lens_q)
        self.used = [-(-n // c.block) for n in c.lens_kv]
        self.mb = c.max_blocks or max(max(self.used), 1)
        self.nb = sum(self.used) + c.spare_blocks
        g = hipdnn.Graph(name="paged", io_data_type=c.dt, intermediate_data_type=DT.FLOAT, compute_data_type=DT.FLOAT)
        qdims, qstrides = thd(self.b, c.h, c.sq, c.d)
        self.q = g.tensor(name="q", dim=qdims, stride=qstrides, data_type=c.dt)
        self.kc = g.tensor(name="k_cache", dim=[self.nb, c.hk, c.block, c.d], data_type=c.dt)
        self.vc = g.tensor(name="v_cache", dim=[self.nb, c.hk, c.block, c.d], data_type=c.dt)
        self.tk = g.tensor(name="k_table", dim=[self.b, 1, self.mb, 1], data_type=DT.INT32)
        self.tv = g.tensor(name="v_table", dim=[self.b, 1, self.mb, 1], data_type=DT.INT32)
        self.tsq = g.tensor(name="seq_q", dim=[self.b, 1, 1, 1], data_type=DT.INT32)
        self.tskv = g.tensor(name="seq_kv", dim=[self.b, 1, 1, 1], data_type=DT.INT32)
        self.off = g.tensor(name="q_off", dim=[self.b + 1, 1, 1, 1], data_type=DT.INT32) if c.ragged_q else None
        if self.off is not None:
            self.q.set_ragged_offset(self.off)
        o, _ = g.sdpa(
            self.q,
            self.kc,
            self.vc,
            attn_scale=0.125,
            use_padding_mask=True,
            seq_len_q=self.tsq,
            seq_len_kv=self.tskv,
            paged_attention_k_table=self.tk,
            paged_attention_v_table=self.tv,
            paged_attention_max_seq_len_kv=c.max_seq_len,
            **causal_options(c.causal),
        )
        o.set_output(True).set_dim(qdims).set_stride(qstrides)
        if self.off is not None:
            o.set_ragged_offset(self.off)
        self.o = o
        g.build(handle)
        self.g = g
        self.ws = np.empty(g.get_workspace_size(), np.uint8)

    def inputs(self, rng: np.random.Generator):
        c = self.c
        perm = rng.permutation(self.nb)  # shuffled physical blocks
        kc = np.full((self.nb, c.hk, c.block, c.d), np.nan, np.float64)
        vc = kc.copy()
        tables = [np.full((self.b, 1, self.mb, 1), -1, np.int32) for _ in range(2)]
        tables[0][:, 0, :, 0] = rng.integers(-(2**31), 2**31 - 1, (self.b, self.mb))  # garbage past the used blocks
        tables[1][:] = tables[0]
        keys, vals, at = [], [], 0
        for b, n in enumerate(self.c.lens_kv):
            k = rng.standard_normal((c.hk, n, c.d)).astype(np.float32).astype(np_type(c.dt)).astype(np.float64)
            v = rng.standard_normal((c.hk, n, c.d)).astype(np.float32).astype(np_type(c.dt)).astype(np.float64)
            keys.append(k)
            vals.append(v)
            for j in range(self.used[b]):
                blk = perm[at]
                at += 1
                rows = slice(j * c.block, min(n, (j + 1) * c.block))
                w = rows.stop - rows.start
                kc[blk, :, :w] = k[:, rows]
                vc[blk, :, :w] = v[:, rows]
                for t in tables:
                    t[b, 0, j, 0] = blk
        return kc, vc, tables, keys, vals

    def run(self, rng: np.random.Generator, tables_override=None):
        c = self.c
        kc, vc, tables, keys, vals = self.inputs(rng)
        if tables_override is not None:
            tables = tables_override(tables)
        qs = [
            rng.standard_normal((c.h, n, c.d)).astype(np.float32).astype(np_type(c.dt)).astype(np.float64)
            for n in c.lens_q
        ]
        qdims, qstrides = thd(self.b, c.h, c.sq, c.d)
        offs = pack_offsets(c.lens_q, c.h * c.d) if c.ragged_q else [b * qstrides[0] for b in range(self.b)] + [0]
        qb = Packed(qdims, qstrides, offs[:-1], c.lens_q, c.dt)
        ob = Packed(qdims, qstrides, offs[:-1], c.lens_q, c.dt)
        for b, x in enumerate(qs):
            qb.put(b, x)
        vp: dict[Any, Any] = {
            self.q: qb.view,
            self.o: ob.view,
            self.kc: kc.astype(np_type(c.dt)),
            self.vc: vc.astype(np_type(c.dt)),
            self.tk: tables[0],
            self.tv: tables[1],
            self.tsq: np.array(c.lens_q, np.int32).reshape(-1, 1, 1, 1),
            self.tskv: np.array(c.lens_kv, np.int32).reshape(-1, 1, 1, 1),
        }
        if self.off is not None:
            vp[self.off] = np.array(offs, np.int32).reshape(-1, 1, 1, 1)
        self.g.execute(self.handle, vp, self.ws)
        return qs, keys, vals, ob


PAGED_CASES = {
    "decode, blocks of 16": PagedCase([1, 1, 1, 1], [1, 37, 129, 16], block=16),
    "decode, blocks of 64": PagedCase([1, 1, 1], [129, 64, 200], block=64),
    "decode, blocks of 256": PagedCase([1, 1], [37, 300], block=256),
    "decode, mha, no mask": PagedCase([1, 1, 1], [37, 129, 1], block=16, h=4, hk=4, causal=None),
    "chunked prefill, 37 queries on a 129-key prefix": PagedCase([37, 16, 5], [166, 150, 5], block=16, sq=37),
    "chunked prefill, blocks of 64, top-left": PagedCase([37, 9], [129, 70], block=64, sq=37, causal="tl"),
    "chunked prefill, ragged q and o": PagedCase([37, 0, 12], [129, 40, 300], block=64, sq=37, ragged_q=True),
    "max_seq_len_kv below the tables": PagedCase([1, 1], [40, 100], block=16, max_blocks=12, max_seq_len=100),
    "bf16 decode": PagedCase([1, 1, 1], [129, 37, 256], block=64, dt=DT.BFLOAT16),
    "an empty cache": PagedCase([1, 3], [0, 20], block=16, sq=3),
}


@pytest.mark.parametrize("name", list(PAGED_CASES))
def test_paged_attention_against_float64(handle: hipdnn.Handle, name: str) -> None:
    c = PAGED_CASES[name]
    p = Paged(handle, c)
    qs, keys, vals, ob = p.run(np.random.default_rng(c.seed + len(name)))
    for b in range(p.b):
        if c.lens_q[b] == 0:
            continue
        ref, _, _ = ref_forward(qs[b], keys[b], vals[b], 0.125, c.causal)
        got = ob.get(b)
        assert not np.isnan(got).any()
        np.testing.assert_allclose(got, ref, atol=TOL[c.dt] * 4 * max(1.0, float(np.abs(ref).max(initial=0))), rtol=0)
        if not c.ragged_q:  # padded o: the rows past seq_len_q are zero
            assert (ob.view[b, :, c.lens_q[b] :].astype(np.float32) == 0).all()
    if c.ragged_q:
        assert ob.untouched_elsewhere()


@pytest.mark.parametrize(
    ("which", "value"),
    [(0, -1), (0, "nb"), (1, 2**31 - 1), (1, -(2**31))],
)
def test_hostile_page_tables_are_refused(handle: hipdnn.Handle, which: int, value: Any) -> None:
    c = PagedCase([1, 1], [40, 20], block=16)
    p = Paged(handle, c)
    v = p.nb if value == "nb" else value

    def spoil(tables):
        tables[which][1, 0, 1, 0] = v  # batch 1 uses blocks 0 and 1
        return tables

    with pytest.raises(hipdnn.HipdnnError) as e:
        p.run(np.random.default_rng(0), spoil)
    msg = bad_param(e.value)
    assert f"the {'KV'[which]} page table" in msg and f"batch 1, entry 1 names block {v}" in msg, msg


def test_paged_overrides_batch_and_table_length(handle: hipdnn.Handle) -> None:
    """Built at B = 3 and 8 blocks a sequence; run at B = 2 with 3-block tables."""
    h, hk, d, bs = 4, 2, 32, 16
    g = hipdnn.Graph(name="paged_ovr", io_data_type=DT.FLOAT, is_override_shape_enabled=True)
    q = g.tensor(name="q", dim=[3, h, 4, d], data_type=DT.FLOAT)
    kc = g.tensor(name="kc", dim=[20, hk, bs, d], data_type=DT.FLOAT)
    vc = g.tensor(name="vc", dim=[20, hk, bs, d], data_type=DT.FLOAT)
    tk = g.tensor(name="tk", dim=[3, 1, 8, 1], data_type=DT.INT32)
    tv = g.tensor(name="tv", dim=[3, 1, 8, 1], data_type=DT.INT32)
    sq = g.tensor(name="sq", dim=[3, 1, 1, 1], data_type=DT.INT32)
    skv = g.tensor(name="skv", dim=[3, 1, 1, 1], data_type=DT.INT32)
    o, _ = g.sdpa(
        q,
        kc,
        vc,
        attn_scale=0.125,
        use_padding_mask=True,
        seq_len_q=sq,
        seq_len_kv=skv,
        paged_attention_k_table=tk,
        paged_attention_v_table=tv,
        use_causal_mask_bottom_right=True,
    )
    o.set_output(True)
    g.build(handle)
    rng = np.random.default_rng(9)
    b, s = 2, 2
    K = rng.standard_normal((20, hk, bs, d)).astype(np.float32)
    V = rng.standard_normal((20, hk, bs, d)).astype(np.float32)
    table = np.array([[7, 3, 11], [0, 19, 5]], np.int32).reshape(b, 1, 3, 1)
    lens_kv = [40, 33]
    Q = rng.standard_normal((b, h, s, d)).astype(np.float32)
    out = np.full((b, h, s, d), np.nan, np.float32)
    one = [1, 1, 1, 1]
    ovr = {
        q: hipdnn.OverrideEntry(shape=[b, h, s, d]),
        o: hipdnn.OverrideEntry(shape=[b, h, s, d]),
        tk: hipdnn.OverrideEntry(shape=[b, 1, 3, 1]),
        tv: hipdnn.OverrideEntry(shape=[b, 1, 3, 1]),
        sq: hipdnn.OverrideEntry(shape=[b, 1, 1, 1], stride=one),
        skv: hipdnn.OverrideEntry(shape=[b, 1, 1, 1], stride=one),
    }
    vp = {
        q: Q,
        o: out,
        kc: K,
        vc: V,
        tk: table,
        tv: table,
        sq: np.full((b, 1, 1, 1), s, np.int32),
        skv: np.array(lens_kv, np.int32).reshape(b, 1, 1, 1),
    }
    g.execute(handle, vp, np.empty(g.get_workspace_size(), np.uint8), overrides=ovr)
    for i in range(b):
        kk = np.concatenate([K[x] for x in table[i, 0, :, 0]], axis=1)[:, : lens_kv[i]].astype(np.float64)
        vv = np.concatenate([V[x] for x in table[i, 0, :, 0]], axis=1)[:, : lens_kv[i]].astype(np.float64)
        ref, _, _ = ref_forward(Q[i].astype(np.float64), kk, vv, 0.125, "br")
        np.testing.assert_allclose(out[i], ref, atol=2e-6, rtol=0)
    # a sequence longer than its (overridden) table holds is clamped to it, as the padding mask clamps
    vp[skv] = np.array([10**6, 33], np.int32).reshape(b, 1, 1, 1)
    g.execute(handle, vp, np.empty(g.get_workspace_size(), np.uint8), overrides=ovr)
    kk = np.concatenate([K[x] for x in table[0, 0, :, 0]], axis=1).astype(np.float64)
    vv = np.concatenate([V[x] for x in table[0, 0, :, 0]], axis=1).astype(np.float64)
    ref, _, _ = ref_forward(Q[0].astype(np.float64), kk, vv, 0.125, "br")
    np.testing.assert_allclose(out[0], ref, atol=2e-6, rtol=0)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lens=st.lists(st.integers(0, 80), min_size=1, max_size=4),
    block=st.sampled_from([16, 64]),
    seed=st.integers(0, 2**31),
)
def test_paged_any_lengths_and_block_order(handle: hipdnn.Handle, lens: list[int], block: int, seed: int) -> None:
    c = PagedCase([1] * len(lens), lens, block=block, h=2, hk=1, d=16, max_blocks=-(-80 // block))
    p = Paged(handle, c)
    qs, keys, vals, ob = p.run(np.random.default_rng(seed))
    for b in range(p.b):
        ref, _, _ = ref_forward(qs[b], keys[b], vals[b], 0.125, "br")
        np.testing.assert_allclose(ob.get(b), ref, atol=1e-5, rtol=0)


# -- refusals -------------------------------------------------------------------------------------------
def _graph(**kw: Any):
    g = hipdnn.Graph(name="bad", io_data_type=DT.FLOAT)
    dims, strides = thd(2, 2, 8, 4)
    q, k, v = (g.tensor(name=n, dim=dims, stride=strides, data_type=DT.FLOAT) for n in "qkv")
    sl = g.tensor(name="sl", dim=[2, 1, 1, 1], data_type=DT.INT32)
    return g, q, k, v, sl


def _refused(call, fragment: str, code: hipdnn.ErrorCode | None = None) -> None:
    with pytest.raises(hipdnn.HipdnnError) as e:
        call()
    assert re.search(fragment, e.value.message), e.value.message
    if code is not None:
        assert e.value.code == code, e.value


def test_ragged_refusals_say_what_is_wrong() -> None:
    g, q, k, v, sl = _graph()
    off = g.tensor(name="off", dim=[3, 1, 1, 1], data_type=DT.FLOAT)
    q.set_ragged_offset(off)
    g.sdpa(q, k, v, use_padding_mask=True, seq_len_q=sl, seq_len_kv=sl)[0].set_output(True)
    _refused(g.validate, r"offset tensor must be INT32 or INT64, is DataType.FLOAT")

    g, q, k, v, sl = _graph()
    q.set_ragged_offset(g.tensor(name="off", dim=[2, 1, 1, 1], data_type=DT.INT32))
    g.sdpa(q, k, v, use_padding_mask=True, seq_len_q=sl, seq_len_kv=sl)[0].set_output(True)
    _refused(g.validate, r"must have dims \[3, 1, 1, 1\] \(B \+ 1\), has \[2, 1, 1, 1\]")

    g, q, k, v, sl = _graph()
    q.set_ragged_offset(g.tensor(name="off", dim=[3, 1, 1, 1], data_type=DT.INT32))
    g.sdpa(q, k, v)[0].set_output(True)
    _refused(g.validate, r"ragged tensors need the padding mask")

    g, q, k, v, sl = _graph()
    off = g.tensor(name="off", dim=[3, 1, 1, 1], data_type=DT.INT32)
    o, _ = g.sdpa(q, k, v, use_padding_mask=True, seq_len_q=sl, seq_len_kv=sl)
    o.set_ragged_offset(off)  # o stays virtual
    g.relu(o).set_output(True)
    _refused(g.validate, r"(intermediate cannot be ragged|has a ragged offset, which only)")

    g = hipdnn.Graph(name="mm", io_data_type=DT.FLOAT)
    a = g.tensor(name="a", dim=[4, 4], data_type=DT.FLOAT)
    a.set_ragged_offset(g.tensor(name="off", dim=[5, 1, 1, 1], data_type=DT.INT32))
    g.matmul(a, a).set_output(True)
    _refused(g.validate, r"matmul node .* tensor 'a' has a ragged offset", hipdnn.ErrorCode.GRAPH_NOT_SUPPORTED)

    g, q, k, v, sl = _graph()
    _refused(lambda: q.set_ragged_offset(3), r"must be a tensor or None")  # type: ignore[arg-type]
    _refused(lambda: q.set_ragged_offset(q), r"cannot be the tensor itself")
    other = hipdnn.Graph(name="other").tensor(name="foreign", dim=[3, 1, 1, 1], data_type=DT.INT32)
    q.set_ragged_offset(other)
    g.sdpa(q, k, v, use_padding_mask=True, seq_len_q=sl, seq_len_kv=sl)[0].set_output(True)
    _refused(g.validate, r"belongs to another graph")


def _paged_graph(**kw: Any):
    g = hipdnn.Graph(name="badpaged", io_data_type=DT.FLOAT)
    q = g.tensor(name="q", dim=[2, 4, 1, 16], data_type=DT.FLOAT)
    kc = g.tensor(name="kc", dim=[10, 2, 16, 16], data_type=DT.FLOAT)
    vc = g.tensor(name="vc", dim=[10, 2, 16, 16], data_type=DT.FLOAT)
    tk = g.tensor(name="tk", dim=kw.pop("tdims", [2, 1, 4, 1]), data_type=kw.pop("tdt", DT.INT32))
    tv = g.tensor(name="tv", dim=[2, 1, 4, 1], data_type=DT.INT32)
    sl = g.tensor(name="sl", dim=[2, 1, 1, 1], data_type=DT.INT32)
    opts: dict[str, Any] = dict(
        use_padding_mask=True, seq_len_q=sl, seq_len_kv=sl, paged_attention_k_table=tk, paged_attention_v_table=tv
    )
    opts.update(kw)
    return g, (q, kc, vc), opts


@pytest.mark.parametrize(
    ("kw", "fragment"),
    [
        ({"tdt": DT.INT64}, r"paged_attention_k_table tensor 'tk' must be INT32, is DataType.INT64"),
        ({"tdims": [2, 4, 1]}, r"must have dims \[2, 1, max_blocks, 1\]"),
        ({"tdims": [3, 1, 4, 1]}, r"must have dims \[2, 1, max_blocks, 1\] \(B = q's batch\), has \[3, 1, 4, 1\]"),
        ({"paged_attention_v_table": None}, r"needs both paged_attention_k_table and paged_attention_v_table"),
        ({"use_padding_mask": False, "seq_len_q": None, "seq_len_kv": None}, r"paged attention needs the padding mask"),
        ({"paged_attention_max_seq_len_kv": 65}, r"paged_attention_max_seq_len_kv 65 must be in \[1, 64\]"),
        ({"paged_attention_max_seq_len_kv": 0}, r"must be in \[1, 64\]"),
    ],
)
def test_paged_refusals_say_what_is_wrong(kw: dict[str, Any], fragment: str) -> None:
    g, (q, kc, vc), opts = _paged_graph(**kw)
    g.sdpa(q, kc, vc, **opts)[0].set_output(True)
    _refused(g.validate, fragment)


def test_page_tables_are_forward_only() -> None:
    g, (q, kc, vc), opts = _paged_graph()
    _refused(
        lambda: g.sdpa_backward(q, q, q, q, q, q, paged_attention_k_table=opts["paged_attention_k_table"]),
        r"paged_attention_k_table is an option of sdpa, not of sdpa_backward",
        hipdnn.ErrorCode.INVALID_VALUE,
    )


def test_page_tables_round_trip_and_need_api_1_3_0() -> None:
    g, (q, kc, vc), opts = _paged_graph(paged_attention_max_seq_len_kv=50)
    g.sdpa(q, kc, vc, **opts)[0].set_output(True)
    g2 = hipdnn.Graph.deserialize(g.serialize())
    (node,) = g2.nodes
    assert node.options.paged_attention_k_table.get_name() == "tk"
    assert node.options.paged_attention_max_seq_len_kv == 50
    assert g2.serialize() == g.serialize()
    from hipdnn.backend.graph_summary import summarize

    s = summarize(g.serialize())
    assert s.has_ragged_or_paged and not s.has_dynamic_tensors
    assert required_api_version(is_override_shape_enabled=False, has_ragged_or_paged=True) == RAGGED_PAGED_API_VERSION


def test_graphs_without_the_features_serialize_as_before() -> None:
    """No new field is written unless used: the bytes of a plain graph do not change."""
    g, q, k, v, sl = _graph()
    g.sdpa(
        q,
        k,
        v,
        use_padding_mask=True,
        seq_len_q=sl,
        seq_len_kv=sl,
        paged_attention_k_table=None,
        paged_attention_v_table=None,
        paged_attention_max_seq_len_kv=None,
    )[0].set_output(True)
    h, q2, k2, v2, sl2 = _graph()
    h.sdpa(q2, k2, v2, use_padding_mask=True, seq_len_q=sl2, seq_len_kv=sl2)[0].set_output(True)
    assert g.serialize() == h.serialize()
    from hipdnn.backend.graph_summary import summarize

    assert not summarize(g.serialize()).has_ragged_or_paged


# -- the plugin-version filter --------------------------------------------------------------------------
def _ragged_graph() -> hipdnn.Graph:
    g, q, k, v, sl = _graph()
    off = g.tensor(name="off", dim=[3, 1, 1, 1], data_type=DT.INT32)
    for t in (q, k, v):
        t.set_ragged_offset(off)
    g.sdpa(q, k, v, use_padding_mask=True, seq_len_q=sl, seq_len_kv=sl)[0].set_output(True)
    return g


@pytest.mark.parametrize("make", [_ragged_graph, lambda: _paged_graph()])
def test_the_filter_offers_such_graphs_to_api_1_3_0_only(fakes, fake_handle_factory, make) -> None:
    g = make()
    if isinstance(g, tuple):
        g, (q, kc, vc), opts = g
        g.sdpa(q, kc, vc, **opts)[0].set_output(True)
    h = fake_handle_factory("fake_override_v110", "fake_override_v120", "fake_plain_v100", "fake_override_v130")
    g.build(h)
    assert g.get_engine_id() == 9009
    for name in ("fake_override_v110", "fake_override_v120", "fake_plain_v100"):
        assert fakes[name].calls("GetApplicableEngineIds") == [], f"{name} was asked about a 1.3.0 graph"
    h2 = fake_handle_factory("fake_override_v120")
    with pytest.raises(hipdnn.HipdnnError) as e:
        g.build(h2)
    assert e.value.code == hipdnn.ErrorCode.GRAPH_NOT_SUPPORTED
    assert "fake_override_v120 (api 1.2.0): api 1.2.0 < required 1.3.0" in e.value.message


def test_the_gpu_engine_refuses_such_graphs_itself() -> None:
    """engines/hip declares API 1.4.0 (softcap), so ragged and paged graphs reach it: it must refuse them
    itself. Checked on its source here (a ragged tensor is refused with its reason, paged K/V through the
    SDK's extension check, which it calls without serves_paged_kv), and on the built plugin next."""
    src = (ROOT / "engines/hip/src/hip_engine.cpp").read_text()
    found = re.search(r'kApiVersion = "(\d+\.\d+\.\d+)"', src)
    assert found is not None
    assert parse_api_version(found.group(1)) >= RAGGED_PAGED_API_VERSION
    assert "ragged_offset_tensor_uid().has_value()" in src and "is ragged (packed sequences" in src
    assert "sdpa_extension_in_use(*a, /*serves_paged_kv=*/false" in src


def test_the_built_gpu_engine_is_asked_and_refuses(hip_plugin: Path) -> None:
    """The built plugin is consulted about a ragged graph (no version filter in the way) and answers that
    it does not apply, with its reason in the report."""
    h = hipdnn.Handle(plugin_paths=[hip_plugin], plugin_loading_mode=hipdnn.PluginLoadingMode.ABSOLUTE)
    try:
        (info,) = h.loaded_plugins()
        g = _ragged_graph()
        with pytest.raises(hipdnn.HipdnnError) as e:
            g.build(h)
        assert e.value.code == hipdnn.ErrorCode.GRAPH_NOT_SUPPORTED
        assert info.name in e.value.message
        assert "< required 1.3.0" not in e.value.message
    finally:
        h.close()


def test_k_and_v_may_page_differently(handle: hipdnn.Handle) -> None:
    """K in blocks of 16, V in blocks of 64, each with its own table and block order."""
    b, h, hk, d, lens = 2, 4, 2, 32, [70, 129]
    rng = np.random.default_rng(4)
    g = hipdnn.Graph(name="kv_blocks", io_data_type=DT.FLOAT)
    q = g.tensor(name="q", dim=[b, h, 1, d], data_type=DT.FLOAT)
    caches, tables, keys = [], [], []
    for name, bs in (("k", 16), ("v", 64)):
        mb = -(-max(lens) // bs)
        nb = b * mb + 2
        cache = np.full((nb, hk, bs, d), np.nan, np.float32)
        table = np.full((b, 1, mb, 1), -1, np.int32)
        full = []
        perm = iter(rng.permutation(nb))
        for i, n in enumerate(lens):
            x = rng.standard_normal((hk, n, d)).astype(np.float32)
            full.append(x.astype(np.float64))
            for j in range(-(-n // bs)):
                blk = next(perm)
                w = min(n, (j + 1) * bs) - j * bs
                cache[blk, :, :w] = x[:, j * bs : j * bs + w]
                table[i, 0, j, 0] = blk
        caches.append((g.tensor(name=f"{name}c", dim=list(cache.shape), data_type=DT.FLOAT), cache))
        tables.append((g.tensor(name=f"{name}t", dim=list(table.shape), data_type=DT.INT32), table))
        keys.append(full)
    sl = g.tensor(name="sl", dim=[b, 1, 1, 1], data_type=DT.INT32)
    one = g.tensor(name="one", dim=[b, 1, 1, 1], data_type=DT.INT32)
    o, _ = g.sdpa(
        q,
        caches[0][0],
        caches[1][0],
        attn_scale=0.125,
        use_padding_mask=True,
        seq_len_q=one,
        seq_len_kv=sl,
        paged_attention_k_table=tables[0][0],
        paged_attention_v_table=tables[1][0],
        paged_attention_max_seq_len_kv=max(lens),
    )
    o.set_output(True)
    g.build(handle)
    qv = rng.standard_normal((b, h, 1, d)).astype(np.float32)
    out = np.full((b, h, 1, d), np.nan, np.float32)
    vp: dict[Any, Any] = {t: a for t, a in (*caches, *tables)}
    vp.update({q: qv, o: out, sl: np.array(lens, np.int32).reshape(b, 1, 1, 1), one: np.ones((b, 1, 1, 1), np.int32)})
    g.execute(handle, vp, np.empty(g.get_workspace_size(), np.uint8))
    for i in range(b):
        ref, _, _ = ref_forward(qv[i].astype(np.float64), keys[0][i], keys[1][i], 0.125, None)
        np.testing.assert_allclose(out[i], ref, atol=2e-6, rtol=0)
