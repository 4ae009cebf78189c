"""The CPU engine's single-pass SDPA backward (issue 14) against float64 gradients derived here from the
definition, independently of hipdnn.reference and of the engine's forward statistics:

    s = scale q k^T (+ masks), P = softmax(s) over the visible keys of each row (0 elsewhere),
    o = P v, and for a loss L with dL/do = dO:
    dV = P^T dO,  dP = dO V^T,  dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik)   (the softmax Jacobian),
    dQ = scale dS K,  dK = scale dS^T Q;  under GQA / MQA each kv head sums over its query heads.

Random data at odd shapes (sequence lengths 1, 37, 129, 1000), GQA / MQA, causal masks in both
alignments, padding with per-sequence lengths, fp32 / fp16 / bf16, and outputs in NaN-filled buffers
with guard regions. The shapes also steer the kernel's dQ strategies: many kv heads (whole heads per work
item, dQ accumulated in place when fp32 or in one fp32 buffer otherwise) and one or two kv heads (key
blocks split over chunks with one accumulator each, summed at the end). Plus a finite-difference check of
one small fp32 case, the ISA instantiations run in subprocesses, and the out-of-memory report.

Tolerances (per dtype, TOL): the largest error of each gradient divided by the largest magnitude of the
terms summed into it (the same sums over absolute values), which is what rounding scales with when
dS = P (dP - delta) cancels. fp32: 5e-6 (measured up to 6e-7 at these shapes); fp16: 1.5e-3 and bf16:
8e-3, about three roundings of the output (2^-11, 2^-8 relative) on top of the fp32 compute (measured
up to 2e-4 and 4e-4).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

import hipdnn
from tests.cpu.test_sdpa_modes import decode, encode, guarded, layout_strides, storage, untouched_outside

DT = hipdnn.DataType
F64 = NDArray[np.float64]
Guarded = tuple[np.ndarray, np.ndarray]  # (base buffer, strided view)
TOL = {DT.FLOAT: 5e-6, DT.HALF: 1.5e-3, DT.BFLOAT16: 8e-3}
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def handle() -> Iterator[hipdnn.Handle]:
    h = hipdnn.Handle()
    yield h
    h.close()


@dataclass
class Bwd:
    b: int = 1
    hq: int = 2
    hk: int = 2
    sq: int = 37
    skv: int = 37
    d: int = 64
    dv: int = 64
    dt: DT = DT.FLOAT
    layout: str = "bhsd"
    causal: bool = False
    bottom_right: bool = False
    seq_q: list[int] = field(default_factory=list)  # padding when given
    seq_kv: list[int] = field(default_factory=list)


def visible_mask(c: Bwd) -> np.ndarray:
    """[B, 1, Sq, Skv]: key j visible to query i."""
    i = np.arange(c.sq)[:, None]
    j = np.arange(c.skv)[None, :]
    vis = np.zeros((c.b, 1, c.sq, c.skv), dtype=bool)
    for bi in range(c.b):
        sqb = min(c.seq_q[bi], c.sq) if c.seq_q else c.sq
        skvb = min(c.seq_kv[bi], c.skv) if c.seq_kv else c.skv
        v = (i < sqb) & (j < skvb)
        if c.causal:
            v &= j <= i + (skvb - sqb if c.bottom_right else 0)
        vis[bi, 0] = v
    return vis


def forward64(q: F64, k: F64, v: F64, scale: float, vis: np.ndarray) -> tuple[F64, F64, F64]:
    """(o, lse, P) in float64; rows without a visible key give o = 0, lse = -inf, P = 0."""
    g = q.shape[1] // k.shape[1]
    kk, vv = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    s = np.where(vis, scale * (q @ np.swapaxes(kk, -1, -2)), -np.inf)
    m = s.max(axis=-1, keepdims=True)
    live = np.isfinite(m)
    e = np.exp(s - np.where(live, m, 0.0))
    den = e.sum(axis=-1, keepdims=True)
    p = e / np.where(live, den, 1.0)
    lse = np.where(live, m + np.log(np.where(live, den, 1.0)), -np.inf)
    return p @ vv, lse, p


def grads64(q: F64, k: F64, v: F64, p: F64, do: F64, scale: float, absolute: bool = False) -> tuple[F64, F64, F64]:
    """(dq, dk, dv) from the softmax Jacobian; absolute=True sums |terms| instead (the magnitude)."""
    hk = k.shape[1]
    g = q.shape[1] // hk
    kk, vv = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    if absolute:
        q, kk, vv, do = np.abs(q), np.abs(kk), np.abs(vv), np.abs(do)
    dv_h = np.swapaxes(p, -1, -2) @ do
    dp = do @ np.swapaxes(vv, -1, -2)
    row = (p * dp).sum(axis=-1, keepdims=True)
    ds = p * (dp + row) if absolute else p * (dp - row)
    dq = scale * (ds @ kk)
    dk_h = scale * (np.swapaxes(ds, -1, -2) @ q)
    b, _, skv, _ = k.shape
    dk = dk_h.reshape(b, hk, g, skv, -1).sum(axis=2)
    dv = dv_h.reshape(b, hk, g, skv, -1).sum(axis=2)
    return dq, dk, dv


class BwdGraph:
    """sdpa_backward for one case, built once; call() runs it on the given inputs into fresh NaN-filled
    guarded outputs and returns (base, view) per gradient."""

    def __init__(self, handle: hipdnn.Handle, c: Bwd, scale: float) -> None:
        self.c, self.handle = c, handle
        self.qd, self.kd, self.vd = [c.b, c.hq, c.sq, c.d], [c.b, c.hk, c.skv, c.d], [c.b, c.hk, c.skv, c.dv]
        self.od = [c.b, c.hq, c.sq, c.dv]
        self.qs, self.ks, self.vs, self.os = (layout_strides(c.layout, x) for x in (self.qd, self.kd, self.vd, self.od))
        g = hipdnn.Graph(name="bwd1", io_data_type=c.dt, intermediate_data_type=DT.FLOAT, compute_data_type=DT.FLOAT)
        self.t = {
            n: g.tensor(name=n, dim=dd, stride=ss, data_type=c.dt)
            for n, dd, ss in (
                ("q", self.qd, self.qs),
                ("k", self.kd, self.ks),
                ("v", self.vd, self.vs),
                ("o", self.od, self.os),
                ("do", self.od, self.os),
            )
        }
        self.t["stats"] = g.tensor(
            name="stats", dim=[c.b, c.hq, c.sq, 1], stride=[c.hq * c.sq, c.sq, 1, 1], data_type=DT.FLOAT
        )
        extra: dict[str, Any] = {}
        self.pack: dict[Any, np.ndarray] = {}
        if c.seq_q:
            tsq = g.tensor(name="seq_q", dim=[c.b, 1, 1, 1], stride=[1, 1, 1, 1], data_type=DT.INT32)
            tskv = g.tensor(name="seq_kv", dim=[c.b, 1, 1, 1], stride=[1, 1, 1, 1], data_type=DT.INT32)
            self.pack[tsq] = np.array(c.seq_q, np.int32).reshape(c.b, 1, 1, 1)
            self.pack[tskv] = np.array(c.seq_kv, np.int32).reshape(c.b, 1, 1, 1)
            extra.update(use_padding_mask=True, seq_len_q=tsq, seq_len_kv=tskv)
        align = hipdnn.DiagonalAlignment
        self.grads = g.sdpa_backward(
            self.t["q"],
            self.t["k"],
            self.t["v"],
            self.t["o"],
            self.t["do"],
            self.t["stats"],
            attn_scale=scale,
            use_causal_mask=c.causal,
            diagonal_alignment=align.BOTTOM_RIGHT if c.bottom_right else align.TOP_LEFT,
            **extra,
        )
        for x, s in zip(self.grads, (self.qs, self.ks, self.vs)):
            x.set_output(True).set_stride(s)
        g.build(handle)
        self.g = g
        self.ws = np.empty(max(1, g.get_workspace_size()), np.uint8)

    def __call__(self, vals: dict[str, F64], stats: F64) -> list[Guarded]:
        pack, outs = self.prepare(vals, stats)
        self.g.execute(self.handle, pack, self.ws)
        return outs

    def prepare(self, vals: dict[str, F64], stats: F64) -> tuple[dict[Any, np.ndarray], list[Guarded]]:
        """(variant pack, [(base, view)] of dq, dk, dv)."""
        c = self.c
        pack = dict(self.pack)
        for n, dd, ss in (
            ("q", self.qd, self.qs),
            ("k", self.kd, self.ks),
            ("v", self.vd, self.vs),
            ("o", self.od, self.os),
            ("do", self.od, self.os),
        ):
            pack[self.t[n]] = guarded(dd, ss, storage(c.dt), encode(vals[n].astype(np.float32), c.dt))[1]
        pack[self.t["stats"]] = stats.astype(np.float32)
        outs: list[Guarded] = []
        for x, dd, ss in zip(self.grads, (self.qd, self.kd, self.vd), (self.qs, self.ks, self.vs)):
            outs.append(guarded(dd, ss, storage(c.dt)))
            pack[x] = outs[-1][1]
        return pack, outs


def inputs(c: Bwd, rng: np.random.Generator, scale: float) -> tuple[dict[str, F64], F64, F64]:
    """Inputs rounded to the case's dtype, o rounded likewise, fp32 stats, and the float64 P."""
    shapes = {"q": [c.b, c.hq, c.sq, c.d], "k": [c.b, c.hk, c.skv, c.d], "v": [c.b, c.hk, c.skv, c.dv]}
    shapes["do"] = [c.b, c.hq, c.sq, c.dv]
    vals = {n: decode(encode(rng.standard_normal(s).astype(np.float32), c.dt), c.dt) for n, s in shapes.items()}
    o, lse, p = forward64(vals["q"], vals["k"], vals["v"], scale, visible_mask(c))
    vals["o"] = decode(encode(o.astype(np.float32), c.dt), c.dt)
    return vals, lse, p


def check(handle: hipdnn.Handle, c: Bwd, seed: int) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    scale = float(np.float32(rng.uniform(0.08, 0.2)))
    vals, lse, p = inputs(c, rng, scale)
    outs = BwdGraph(handle, c, scale)(vals, lse)
    want = grads64(vals["q"], vals["k"], vals["v"], p, vals["do"], scale)
    mags = grads64(vals["q"], vals["k"], vals["v"], p, vals["do"], scale, absolute=True)
    vis = visible_mask(c)
    seen_q = np.broadcast_to(vis.any(axis=-1, keepdims=True), (c.b, c.hq, c.sq, 1))
    seen_k = np.asarray(vis.any(axis=-2))[..., None]  # [B, 1, Skv, 1]
    errs = {}
    for name, (base, view), w, mag in zip(("dq", "dk", "dv"), outs, want, mags):
        got = decode(np.array(view), c.dt)
        assert not np.isnan(got).any(), f"{c}: {name} has unwritten (NaN) elements"
        assert untouched_outside(base, view), f"{c}: {name} wrote outside its view"
        # queries that see no key, and keys no query sees, get exactly zero gradients
        dead: np.ndarray = ~np.broadcast_to(seen_q if name == "dq" else seen_k, got.shape)
        assert (got[dead] == 0).all(), f"{c}: {name} nonzero where nothing is visible"
        errs[name] = float(np.abs(got - w).max()) / max(1e-30, float(mag.max()))
        assert errs[name] < TOL[c.dt], f"{c}: {name} error {errs[name]:.2e} (tolerance {TOL[c.dt]:.0e})"
    return errs


CASES = {
    # sequence length 1, two batches
    "s1": Bwd(b=2, hq=2, hk=1, sq=1, skv=1, d=64, dv=64),
    # 37 rows, GQA 6/2, head dims that fill no whole vector (packed rows, buffered dQ)
    "s37_gqa_causal_tl": Bwd(hq=6, hk=2, sq=37, skv=37, d=40, dv=24, causal=True),
    # MQA (one kv head: key blocks split over chunks), bottom-right causal with Sq > Skv (dead rows)
    "s129_mqa_causal_br": Bwd(hq=4, hk=1, sq=129, skv=37, causal=True, bottom_right=True),
    # many kv heads, fp32, unit last stride: dQ accumulated in place
    "s1000_mha": Bwd(hq=8, hk=8, sq=1000, skv=1000),
    # the same in place, with BSHD rows (dQ row stride H*D)
    "s129_mha_bshd_causal_br": Bwd(b=2, hq=4, hk=4, sq=129, skv=1000, layout="bshd", causal=True, bottom_right=True),
    # GQA 4/2 at 1000, D=128, causal top-left (two chunks per kv head on 2 threads)
    "s1000_gqa_causal_tl_d128": Bwd(hq=4, hk=2, sq=1000, skv=1000, d=128, dv=128, causal=True),
    # padding: per-sequence lengths, one empty key sequence, GQA, bottom-right causal
    "padding_gqa_causal_br": Bwd(
        b=3, hq=4, hk=2, sq=129, skv=1000, causal=True, bottom_right=True, seq_q=[129, 37, 1], seq_kv=[1000, 129, 0]
    ),
    "padding_top_left": Bwd(b=2, hq=2, hk=1, sq=1000, skv=129, causal=True, seq_q=[1000, 37], seq_kv=[37, 129]),
    "fp16_causal_br": Bwd(hq=4, hk=4, sq=129, skv=1000, dt=DT.HALF, causal=True, bottom_right=True),
    "bf16_gqa_causal_tl": Bwd(hq=4, hk=2, sq=1000, skv=129, d=32, dv=32, dt=DT.BFLOAT16, causal=True),
    "fp16_padded_layout": Bwd(hq=3, hk=1, sq=37, skv=129, d=24, dv=40, dt=DT.HALF, layout="padded"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_single_pass_against_float64(handle: hipdnn.Handle, name: str) -> None:
    check(handle, CASES[name], seed=sum(map(ord, name)))


def test_finite_differences(handle: hipdnn.Handle) -> None:
    """L = sum(o * W): the engine's gradients (dO = W) against central differences of L in a few entries of
    q, k and v, L evaluated in float64 on the fp32 inputs. Step 1e-4; the differences are then exact to
    ~1e-8 (truncation h^2 L''' and float64 rounding), so the tolerance (2e-5 of the largest gradient) is
    the engine's fp32 error."""
    c = Bwd(b=1, hq=2, hk=1, sq=5, skv=7, d=4, dv=3, causal=True, bottom_right=True, seq_q=[5], seq_kv=[6])
    rng = np.random.default_rng(7)
    scale = 0.5
    vis = visible_mask(c)
    vals = {
        "q": rng.standard_normal([1, 2, 5, 4]).astype(np.float32).astype(np.float64),
        "k": rng.standard_normal([1, 1, 7, 4]).astype(np.float32).astype(np.float64),
        "v": rng.standard_normal([1, 1, 7, 3]).astype(np.float32).astype(np.float64),
        "do": rng.standard_normal([1, 2, 5, 3]).astype(np.float32).astype(np.float64),  # W
    }
    o, lse, _ = forward64(vals["q"], vals["k"], vals["v"], scale, vis)
    vals["o"] = o.astype(np.float32).astype(np.float64)
    outs = BwdGraph(handle, c, scale)(vals, lse)
    got = {n: np.array(view, dtype=np.float64) for n, (_, view) in zip("qkv", outs)}

    def loss(x: dict[str, F64]) -> float:
        return float((forward64(x["q"], x["k"], x["v"], scale, vis)[0] * vals["do"]).sum())

    h = 1e-4
    top = max(float(np.abs(g).max()) for g in got.values())
    for n in "qkv":
        picks = rng.choice(vals[n].size, size=6, replace=False)
        for flat in picks:
            idx = np.unravel_index(flat, vals[n].shape)
            plus = {m: a.copy() for m, a in vals.items()}
            minus = {m: a.copy() for m, a in vals.items()}
            plus[n][idx] += h
            minus[n][idx] -= h
            fd = (loss(plus) - loss(minus)) / (2 * h)
            assert abs(got[n][idx] - fd) <= 2e-5 * top, f"d{n}{idx}: engine {got[n][idx]:.7g}, differences {fd:.7g}"
    # the padded key (j = 6) and the keys no query sees get exactly zero
    assert (got["k"][0, 0, 6] == 0).all() and (got["v"][0, 0, 6] == 0).all()


ISA_SCRIPT = textwrap.dedent(
    """
    import hipdnn
    from tests.cpu.test_sdpa_backward_single_pass import CASES, check
    h = hipdnn.Handle()
    for name in ("s37_gqa_causal_tl", "s129_mqa_causal_br", "s129_mha_bshd_causal_br", "fp16_padded_layout"):
        check(h, CASES[name], seed=1)
    print("ok")
    """
)


@pytest.mark.parametrize("env", ["HIPDNN_CPU_ENGINE_NO_AVX512", "HIPDNN_CPU_ENGINE_BASELINE"])
def test_other_instantiations(env: str) -> None:
    """The AVX2 and baseline builds of the kernel (the default run takes the widest the CPU has)."""
    run = subprocess.run(
        [sys.executable, "-c", ISA_SCRIPT],
        cwd=ROOT,
        env={**os.environ, env: "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stdout + run.stderr


OOM_SCRIPT = textwrap.dedent(
    """
    import resource
    import numpy as np
    import hipdnn
    from tests.cpu.test_sdpa_backward_single_pass import Bwd, BwdGraph

    DT = hipdnn.DataType
    h = hipdnn.Handle()
    # a small call first: the engine, OpenMP's threads and numpy's buffers are in place before the limit
    small = BwdGraph(h, Bwd(hq=2, hk=2, sq=8, skv=8, dt=DT.HALF), 0.125)
    z = {n: np.zeros([1, 2, 8, 64]) for n in ("q", "k", "v", "o", "do")}
    small(z, np.zeros([1, 2, 8, 1]))
    # fp16 dQ needs an fp32 accumulator: 8 heads x 8192 rows x 64 x 4 bytes = 16 MiB, with 4 MiB to spare
    c = Bwd(hq=8, hk=8, sq=8192, skv=64, dt=DT.HALF)
    g = BwdGraph(h, c, 0.125)
    vals = {n: np.zeros([1, 8, 8192 if n in ("q", "o", "do") else 64, 64]) for n in ("q", "k", "v", "o", "do")}
    pack, _ = g.prepare(vals, np.zeros([1, 8, 8192, 1]))
    del vals
    used = 0
    for line in open("/proc/self/status"):
        if line.startswith("VmSize:"):
            used = int(line.split()[1]) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (used + (4 << 20), resource.RLIM_INFINITY))
    try:
        g.g.execute(h, pack, g.ws)
    except hipdnn.HipdnnError as e:
        print("ERROR", e)
    else:
        print("NO ERROR")
    """
)


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS and /proc/self/status")
def test_accumulator_allocation_failure_is_reported() -> None:
    """Where the call's dQ accumulator cannot be allocated, the execute fails with ALLOC_FAILED naming the
    node and the size, and nothing crashes."""
    # two OpenMP threads, both started by the small call: a thread started under the limit could not get a stack
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    run = subprocess.run(
        [sys.executable, "-c", OOM_SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "ERROR" in run.stdout and "NO ERROR" not in run.stdout, run.stdout + run.stderr
    assert "ALLOC_FAILED" in run.stdout and "cannot allocate" in run.stdout and "sdpa_bwd" in run.stdout, run.stdout
