"""Dynamic tensors (plugin API 1.2.0) for the CPU engine's newer ops: SDPA backward with [-1, H, -1, D]
operands, RMSNorm / LayerNorm with wildcard leading dims, reduction with wildcard non-reduced dims.

Each graph is built once and executed at several sizes through overrides; results are checked against
the float64 definitions in ``hipdnn.reference``, outputs live in NaN-filled buffers with guards (every
element written, nothing outside touched), and the workspace is the one the plan declared at build time
(the kernels size their scratch from tile sizes and declared head dims only)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import hipdnn
from hipdnn import reference
from tests.cpu.test_dynamic_cpu import BHSD, BSHD, Out, bhsd, bshd, compact, data, workspace

F32 = hipdnn.DataType.FLOAT
DYN = hipdnn.DYNAMIC_DIM


@pytest.fixture(scope="module")
def handle() -> Iterator[hipdnn.Handle]:
    h = hipdnn.Handle()
    if not any(p.name == "hipdnn_cpu_engine" for p in h.loaded_plugins()):
        pytest.fail(f"the CPU engine did not load: {h.skipped_plugins()}")
    yield h
    h.close()


def graph(name: str) -> hipdnn.Graph:
    return hipdnn.Graph(
        name=name,
        io_data_type=F32,
        intermediate_data_type=F32,
        compute_data_type=F32,
        is_override_shape_enabled=True,
    )


# ------------------------------------------------------------------------------ SDPA backward
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("order", ["bhsd", "bshd"])
def test_dynamic_sdpa_backward(handle: hipdnn.Handle, causal: bool, order: str) -> None:
    h, hk, d = 4, 2, 32
    scale = 0.2
    axis = BHSD if order == "bhsd" else BSHD
    g = graph("dyn_sdpa_bwd")
    names = ("q", "k", "v", "o", "do")
    heads = {"q": h, "k": hk, "v": hk, "o": h, "do": h}
    t = {n: g.tensor(name=n, dim=[DYN, heads[n], DYN, d], stride=axis, data_type=F32).mark_dynamic() for n in names}
    t["stats"] = g.tensor(name="stats", dim=[DYN, h, DYN, 1], stride=BHSD, data_type=F32).mark_dynamic()
    dq, dk, dv = g.sdpa_backward(*(t[n] for n in names), t["stats"], attn_scale=scale, use_causal_mask=causal)
    for x in (dq, dk, dv):
        x.set_output(True).set_stride(axis)
    g.build(handle)
    ws = workspace(g)
    rng = np.random.default_rng(1 + causal)
    for b, s in ((1, 1), (2, 37), (1, 130), (3, 64)):
        dims = {n: [b, heads[n], s, d] for n in names}
        strides = {n: (bhsd(dims[n]) if order == "bhsd" else bshd(dims[n], pad=3)) for n in names}
        vals = {n: data(rng, dims[n], strides[n]) for n in ("q", "k", "v", "do")}
        o64, lse = reference.sdpa(vals["q"], vals["k"], vals["v"], scale, causal=causal)
        vals["o"] = data(rng, dims["o"], strides["o"])
        vals["o"][...] = o64.astype(np.float32)
        sd = [b, h, s, 1]
        st = np.ascontiguousarray(lse.astype(np.float32).reshape(sd))
        outs = {
            "dq": Out(dims["q"], strides["q"]),
            "dk": Out(dims["k"], strides["k"]),
            "dv": Out(dims["v"], strides["v"]),
        }
        pack = {t[n]: vals[n] for n in names}
        pack[t["stats"]] = st
        pack.update({dq: outs["dq"].view, dk: outs["dk"].view, dv: outs["dv"].view})
        ov = {t[n]: hipdnn.OverrideEntry(dims[n], strides[n]) for n in names}
        ov[t["stats"]] = hipdnn.OverrideEntry(sd, compact(sd))
        for x, src in ((dq, "q"), (dk, "k"), (dv, "v")):
            ov[x] = hipdnn.OverrideEntry(dims[src], strides[src])
        g.execute(handle, pack, ws, overrides=ov)
        i = np.arange(s)
        vis = (i[None, :] <= i[:, None])[None, None] if causal else None
        args = (vals["q"], vals["k"], vals["v"], vals["o"], vals["do"], st, scale)
        want = reference.sdpa_backward(*args, visible=vis)
        # error relative to the size of the terms that cancel (dq is ~0 at S = 1)
        mag = reference.sdpa_backward(*args, visible=vis, magnitude=True)
        for name, w, m in zip(("dq", "dk", "dv"), want, mag):
            got = np.asarray(outs[name].view, np.float64)
            outs[name].check(got)  # every element written, nothing outside touched
            assert np.abs(got - w).max() <= 1e-5 * max(1e-30, float(np.abs(m).max())), name


# -------------------------------------------------------------------------------------- norms
@pytest.mark.parametrize("kind", ["rms", "layer"])
def test_dynamic_norms(handle: hipdnn.Handle, kind: str) -> None:
    n = 48
    eps = 1e-5
    g = graph("dyn_norm")
    x = g.tensor(name="x", dim=[DYN, DYN, n], stride=[2, 1, 0], data_type=F32).mark_dynamic()
    sc = g.tensor(name="scale", dim=[1, 1, n], stride=[n, n, 1], data_type=F32)
    bi = g.tensor(name="bias", dim=[1, 1, n], stride=[n, n, 1], data_type=F32)
    phase = hipdnn.NormFwdPhase.TRAINING
    if kind == "rms":
        y, *stats = g.rmsnorm(x, sc, bi, epsilon=eps, norm_forward_phase=phase)
    else:
        y, *stats = g.layernorm(x, sc, bi, epsilon=eps, norm_forward_phase=phase)
    stats = [s for s in stats if s is not None]
    y.set_output(True)
    for s in stats:
        s.set_output(True)
    g.build(handle)
    ws = workspace(g)
    rng = np.random.default_rng(3)
    scv = rng.standard_normal([1, 1, n]).astype(np.float32)
    biv = rng.standard_normal([1, 1, n]).astype(np.float32)
    for b, m, padded in ((1, 1, False), (2, 33, True), (3, 200, False)):
        xd = [b, m, n]
        xs = compact(xd) if not padded else [m * (n + 5) + 2, n + 5, 1]
        xv = data(rng, xd, xs)
        yo = Out(xd, compact(xd))
        sd = [b, m, 1]
        so = [Out(sd, compact(sd)) for _ in stats]
        pack = {x: xv, sc: scv, bi: biv, y: yo.view}
        ov = {x: hipdnn.OverrideEntry(xd, xs), y: hipdnn.OverrideEntry(xd, compact(xd))}
        for s, o in zip(stats, so):
            pack[s] = o.view
            ov[s] = hipdnn.OverrideEntry(sd, compact(sd))
        g.execute(handle, pack, ws, overrides=ov)
        if kind == "rms":
            want_y, *want_s = reference.rmsnorm(xv, 1, eps, scv, biv)
        else:
            want_y, *want_s = reference.layernorm(xv, 1, eps, scv, biv)
        yo.check(want_y)
        for o, w in zip(so, want_s):
            o.check(w)


# ---------------------------------------------------------------------------------- reduction
@pytest.mark.parametrize("mode", [hipdnn.ReductionMode.ADD, hipdnn.ReductionMode.MAX, hipdnn.ReductionMode.AVG])
def test_dynamic_reduction(handle: hipdnn.Handle, mode: hipdnn.ReductionMode) -> None:
    n = 40
    g = graph("dyn_reduce")
    x = g.tensor(name="x", dim=[DYN, DYN, n], stride=[2, 1, 0], data_type=F32).mark_dynamic()
    y = g.reduction(x, mode, axes=[2])
    y.set_output(True)
    g.build(handle)
    ws = workspace(g)
    rng = np.random.default_rng(int(mode))
    for b, m in ((1, 1), (2, 17), (4, 300)):
        xd, yd = [b, m, n], [b, m, 1]
        xv = data(rng, xd, compact(xd))
        yo = Out(yd, compact(yd))
        g.execute(
            handle,
            {x: xv, y: yo.view},
            ws,
            overrides={x: hipdnn.OverrideEntry(xd, compact(xd)), y: hipdnn.OverrideEntry(yd, compact(yd))},
        )
        yo.check(reference.reduction(xv, int(mode), (2,)))
