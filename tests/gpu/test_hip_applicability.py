"""Engine 202 (and 201) is exact on every call it accepts and refuses the rest with its reason (issue 27).

Hypothesis draws a max-shape plan (batch, query and kv heads, both lengths, the head dims of q / k and
of v / o -- engine 202: 8 .. 128 in steps of 8, engine 201: 1 .. 128, d_qk != d_v now and then --, mask,
padding, scale, each tensor's axis order), builds it once, and serves several calls through overrides,
each drawn within the maxima: Sq from 1 (the decode path) to the maximum, GQA ratios, padding lengths
including empty sequences and lengths past the call's, strides with gaps between rows, heads and
batches, a head-dim stride of 2, and base pointers offset by a few elements (off the 16-byte grid the
tensor-core path needs: such a call runs the portable kernels), and head dims shrunk below the plan's
(any value: one that is not a multiple of 8 runs the portable kernels on engine 202). Head dims 8 .. 256
in steps of 8 are tried at build: up to 128 they build, above it they must be refused with the reason.

Every tensor lives in a NaN-filled buffer with guard bands either side; inputs get their values only
at their own elements (gaps, guards and rows past a padded length stay NaN, so a read of any of them
shows in the result), outputs are checked afterwards: every own element written, every other element
of the buffer still NaN, inputs unchanged. The reference is float64 torch on the device from the
definition (hip_support.forward64 / reference_backward). Skipped where torch, a CUDA/HIP device or the
built plugin is missing; the graph and call refusals are also checked without torch in
test_hip_applicability_abi.py, and the rules themselves on the host in tests/test_hip_call_rules.py.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA/HIP device visible to torch", allow_module_level=True)

import hipdnn  # noqa: E402
from tests.gpu.hip_support import (  # noqa: E402
    PORTABLE,
    TENSOR_CORE,
    alignment,
    forward64,
    gpu_graph,
    reference_backward,
    sdpa_graph,
    seq_len_tensors,
)
from tests.gpu.test_hip_engine import BF16, HALF, TOL_O, TORCH, check_lse, rel_err, skip_unless_here  # noqa: E402

TOL_GRAD = {BF16: 2e-2, HALF: 5e-3}
GUARD = 64
MAX_HEAD_DIM = 128
NAN = float("nan")
ENGINES = pytest.mark.parametrize("engine", [TENSOR_CORE, PORTABLE], ids=["tc202", "portable201"])
#: examples per (engine, test): engine 202 has more paths to cover (decode, copy engine, cp.async, mma)
#: HIPDNN_APPLICABILITY_SCALE=n runs n times as many (a longer run on the device)
SCALE = max(1, int(os.environ.get("HIPDNN_APPLICABILITY_SCALE", "1")))
EXAMPLES = {TENSOR_CORE: 300 * SCALE, PORTABLE: 100 * SCALE}
BWD_EXAMPLES = {TENSOR_CORE: 80 * SCALE, PORTABLE: 30 * SCALE}
#: an example builds a plan and runs up to three calls on the device: slow by hypothesis's measure, as meant
HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example]


@pytest.fixture(scope="module")
def handle(hip_plugin: Path) -> Iterator[hipdnn.Handle]:
    h = hipdnn.Handle(plugin_paths=[hip_plugin], plugin_loading_mode=hipdnn.PluginLoadingMode.ABSOLUTE)
    if not any(p.name == "hipdnn_hip_engine" for p in h.loaded_plugins()):
        pytest.fail(f"the HIP engine did not load: {h.skipped_plugins()}")
    yield h
    h.close()


# ------------------------------------------------------------------------------------- layouts
@dataclass
class Layout:
    """Where one call puts a [B, H, S, D] (or [B, H, S, 1]) tensor in its buffer: the axis order of B, H
    and S (outermost first; the last axis is innermost), extra elements each of them steps past the axes
    inside it, the head-dim stride, and the base's offset in elements."""

    order: tuple[int, int, int] = (0, 1, 2)
    gaps: tuple[int, int, int] = (0, 0, 0)
    dstride: int = 1
    offset: int = 0

    def strides(self, dims: list[int]) -> list[int]:
        s = [0, 0, 0, self.dstride]
        span = (dims[3] - 1) * self.dstride + 1  # last offset the axes taken so far reach, + 1
        for ax in reversed(self.order):
            s[ax] = span + self.gaps[ax]
            span = (dims[ax] - 1) * s[ax] + span
        return s


def extent(dims: list[int], strides: list[int]) -> int:
    return sum((d - 1) * s for d, s in zip(dims, strides)) + 1


class Buf:
    """A NaN-filled buffer with GUARD elements either side; ``view`` is the tensor at its layout."""

    def __init__(self, dims: list[int], lay: Layout, dtype: Any) -> None:
        self.dims, self.strides = dims, lay.strides(dims)
        n = extent(dims, self.strides) + lay.offset + 2 * GUARD
        start = GUARD + lay.offset
        self.base = torch.full((n,), NAN, dtype=dtype, device="cuda")
        self.view = self.base.as_strided(dims, self.strides, start)
        own = torch.zeros(n, dtype=torch.bool, device="cuda")
        own.as_strided(dims, self.strides, start).fill_(True)
        self.own = own

    def outside_untouched(self) -> bool:
        return bool(torch.isnan(self.base[~self.own].float()).all())

    def all_nan(self) -> bool:
        return bool(torch.isnan(self.base.float()).all())


def nan_equal(a: Any, b: Any) -> bool:
    return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())


def value(buf: Buf) -> Any:
    """The variant pack's value: bf16 as the bare pointer (numpy and the frontend have no bfloat16
    dtype check), fp16 / fp32 / int32 as the torch view, whose bounds and layout the frontend checks."""
    return buf.view.data_ptr() if buf.view.dtype == torch.bfloat16 else buf.view


# ------------------------------------------------------------------------------ strategies
def axis_order() -> st.SearchStrategy[tuple[int, int, int]]:
    return st.sampled_from([(0, 1, 2), (0, 2, 1), (1, 0, 2), (2, 0, 1), (1, 2, 0), (2, 1, 0)])


def layout_for(order: tuple[int, int, int], draw: Any, *, rows: bool = True) -> Layout:
    """A call's layout in a plan's axis order: gaps (mostly none), now and then a head-dim stride of 2
    (rows tensors only) and a base offset of a few elements (bf16 / fp16: off the 16-byte grid)."""
    gap = st.sampled_from([0, 0, 0, 0, 1, 3, 8, 64])
    gaps = (draw(gap), draw(gap), draw(gap))
    dstride = draw(st.sampled_from([1, 1, 1, 1, 1, 1, 1, 2])) if rows else 1
    offset = draw(st.sampled_from([0, 0, 0, 0, 0, 1, 3, 8]))
    return Layout(order, gaps, dstride, offset)


def length(draw: Any, top: int) -> int:
    """1 .. top, weighted towards the edges: 1, the decode path's 16 and 17, tile edges, the maximum."""
    edges = [n for n in (1, 2, 15, 16, 17, 63, 64, 65, 127, 128, 129, 191, 192, 193) if n <= top]
    return int(draw(st.one_of(st.sampled_from(edges + [top]), st.integers(1, top))))


def seq_lens(draw: Any, b: int, s: int) -> list[int]:
    """Per-batch lengths: empty, 1, anything up to s, s, and past s (the kernels clamp to s)."""
    return [int(draw(st.one_of(st.sampled_from([0, 1, s, s + 3]), st.integers(0, s)))) for _ in range(b)]


@dataclass
class Plan:
    """A drawn max-shape plan."""

    engine: int
    dtype: hipdnn.DataType
    b: int
    hq: int
    hk: int
    sq: int
    skv: int
    d: int  # of q and k
    dv: int  # of v and o
    mask: str  # none, tl, br
    padding: bool
    scale: float | None  # None: the default, 1/sqrt of each call's head dim
    orders: dict[str, tuple[int, int, int]] = field(default_factory=dict)


@dataclass
class CallShape:
    b: int
    hq: int
    hk: int
    sq: int
    skv: int
    d: int
    dv: int
    lay: dict[str, Layout]
    seq_q: list[int] | None
    seq_kv: list[int] | None

    def dims(self, name: str) -> list[int]:
        if name == "stats":
            return [self.b, self.hq, self.sq, 1]
        d = self.dv if name in ("v", "o", "dO", "dV") else self.d
        if name in ("k", "v", "dK", "dV"):
            return [self.b, self.hk, self.skv, d]
        return [self.b, self.hq, self.sq, d]


def head_dim(draw: Any, engine: int) -> int:
    """A plan's head dim: the ones models use (64, 128, 80, 96, ...), the smallest and largest, and any
    multiple of 8 (engine 202) or any value (engine 201: 1, 37, ...)."""
    common = [64, 128, 8, 16, 32, 40, 72, 80, 96, 112, 120]
    anyd = (
        st.integers(1, MAX_HEAD_DIM) if engine == PORTABLE else st.integers(1, MAX_HEAD_DIM // 8).map(lambda n: 8 * n)
    )
    return int(draw(st.one_of(st.sampled_from(common + ([1, 37] if engine == PORTABLE else [])), anyd)))


def draw_plan(draw: Any, engine: int, names: tuple[str, ...]) -> Plan:
    d = head_dim(draw, engine)
    hk = draw(st.integers(1, 3))
    hq = hk * draw(st.sampled_from([1, 1, 2, 3, 4, 8]))
    plan = Plan(
        engine=engine,
        dtype=draw(st.sampled_from([BF16, HALF])),
        b=draw(st.integers(1, 3)),
        hq=hq,
        hk=hk,
        sq=draw(st.sampled_from([1, 16, 17, 100, 300, 700])),
        skv=draw(st.sampled_from([1, 16, 64, 129, 300, 700])),
        d=d,
        dv=d if draw(st.integers(0, 4)) else head_dim(draw, engine),  # d_qk != d_v now and then
        mask=draw(st.sampled_from(["none", "tl", "br"])),
        padding=draw(st.booleans()),
        scale=draw(st.sampled_from([None, None, 0.07, -0.05])),
    )
    plan.orders = {n: draw(axis_order()) for n in names}
    return plan


def draw_call(draw: Any, p: Plan, names: tuple[str, ...]) -> CallShape:
    hk = draw(st.integers(1, p.hk))
    hq = hk * draw(st.integers(1, p.hq // hk))
    b = draw(st.integers(1, p.b))
    sq, skv = length(draw, p.sq), length(draw, p.skv)

    # head dims: the plan's (mostly), or shrunk: a multiple of 8 (the tensor-core path at a smaller
    # padded width) or any (engine 202 runs the portable kernels for it)
    def shrunk(top: int) -> int:
        smaller = st.one_of(st.integers(1, max(top // 8, 1)).map(lambda n: min(8 * n, top)), st.integers(1, top))
        return int(draw(st.one_of(st.just(top), st.just(top), st.just(top), smaller)))

    d, dv = shrunk(p.d), shrunk(p.dv)
    lay = {n: layout_for(p.orders[n], draw, rows=n != "stats") for n in names}
    seq_q = seq_lens(draw, b, sq) if p.padding else None
    seq_kv = seq_lens(draw, b, skv) if p.padding else None
    return CallShape(b, hq, hk, sq, skv, d, dv, lay, seq_q, seq_kv)


def masks(p: Plan, c: CallShape) -> dict[str, Any]:
    return {"causal_tl": p.mask == "tl", "causal_br": p.mask == "br", "seq_q": c.seq_q, "seq_kv": c.seq_kv}


def call_scale(p: Plan, d: int) -> float:
    return p.scale if p.scale is not None else 1.0 / math.sqrt(d)


def declared(p: Plan, name: str) -> tuple[list[int], list[int]]:
    """A tensor's declared (maximum) dims and strides: compact in its axis order."""
    dims = CallShape(p.b, p.hq, p.hk, p.sq, p.skv, p.d, p.dv, {}, None, None).dims(name)
    return dims, Layout(p.orders[name]).strides(dims)


def fill_input(buf: Buf, gen: Any, c: CallShape, past: list[int] | None) -> None:
    """Random values at the tensor's own elements only; rows past a padded length back to NaN."""
    buf.view.copy_(torch.randn(buf.dims, generator=gen, device="cuda", dtype=torch.float32).to(buf.view.dtype))
    if past is not None:
        for bi, n in enumerate(past):
            buf.view[bi, :, min(n, buf.dims[2]) :] = NAN


# ------------------------------------------------------------------------------------ forward
FWD_INPUTS = ("q", "k", "v")
FWD_NAMES = ("q", "k", "v", "o", "stats")


def forward_graph(p: Plan) -> tuple[hipdnn.Graph, dict[str, Any]]:
    g = gpu_graph("applicability_fwd", p.dtype, overridable=True, engine=p.engine)
    t: dict[str, Any] = {}
    for n in FWD_INPUTS:
        dims, strides = declared(p, n)
        t[n] = g.tensor(name=n, dim=dims, stride=strides, data_type=p.dtype)
    extra: dict[str, Any] = seq_len_tensors(g, p.b) if p.padding else {}
    o, lse = g.sdpa(
        t["q"],
        t["k"],
        t["v"],
        attn_scale=p.scale,
        use_causal_mask=p.mask != "none",
        generate_stats=True,
        diagonal_alignment=alignment(p.mask == "br"),
        use_padding_mask=p.padding,
        **extra,
    )
    assert lse is not None
    o.set_output(True).set_stride(declared(p, "o")[1])
    lse.set_output(True).set_stride(declared(p, "stats")[1])
    t.update(o=o, stats=lse, **extra)
    return g, t


def overrides_of(t: dict[str, Any], c: CallShape, bufs: dict[str, Buf], names: tuple[str, ...]) -> dict[Any, Any]:
    ov = {t[n]: hipdnn.OverrideEntry(shape=bufs[n].dims, stride=bufs[n].strides) for n in names}
    if c.seq_q is not None:
        ov[t["seq_len_q"]] = hipdnn.OverrideEntry(shape=[c.b, 1, 1, 1], stride=[1, 1, 1, 1])
        ov[t["seq_len_kv"]] = hipdnn.OverrideEntry(shape=[c.b, 1, 1, 1], stride=[1, 1, 1, 1])
    return ov


def seq_values(t: dict[str, Any], c: CallShape) -> dict[Any, Any]:
    if c.seq_q is None or c.seq_kv is None:
        return {}
    i32 = torch.int32
    return {
        t["seq_len_q"]: torch.tensor(c.seq_q, dtype=i32, device="cuda").view(c.b, 1, 1, 1),
        t["seq_len_kv"]: torch.tensor(c.seq_kv, dtype=i32, device="cuda").view(c.b, 1, 1, 1),
    }


def workspace(g: hipdnn.Graph) -> Any:
    """The plan's workspace, poisoned (0xFF bytes: NaN as fp32)."""
    size = g.get_workspace_size()
    return torch.full((size,), 0xFF, dtype=torch.uint8, device="cuda") if size else None


def run_forward_call(handle: hipdnn.Handle, g: hipdnn.Graph, t: dict[str, Any], p: Plan, c: CallShape, gen: Any) -> str:
    """One call through the plan; checks everything the module docstring says. Returns what happened."""
    tdt = TORCH[p.dtype]
    bufs = {n: Buf(c.dims(n), c.lay[n], tdt if n != "stats" else torch.float32) for n in FWD_NAMES}
    fill_input(bufs["q"], gen, c, c.seq_q)
    fill_input(bufs["k"], gen, c, c.seq_kv)
    fill_input(bufs["v"], gen, c, c.seq_kv)
    before = {n: bufs[n].base.clone() for n in FWD_INPUTS}
    pack = {t[n]: value(bufs[n]) for n in FWD_NAMES}
    pack.update(seq_values(t, c))
    ov = overrides_of(t, c, bufs, FWD_NAMES)
    g.execute(handle, pack, workspace(g), overrides=ov)
    torch.cuda.synchronize()
    for n in FWD_INPUTS:
        assert nan_equal(bufs[n].base, before[n]), f"{n}: an input was written"
    o, lse = bufs["o"], bufs["stats"]
    assert o.outside_untouched(), "o: a write landed outside its own elements (a gap or a guard band)"
    assert lse.outside_untouched(), "stats: a write landed outside its own elements"
    out = o.view.float()
    assert not torch.isnan(out).any(), "o: an element was not written (or took a NaN from memory it must not read)"
    want_o, want_lse = forward64(bufs["q"].view, bufs["k"].view, bufs["v"].view, call_scale(p, c.d), **masks(p, c))
    err = rel_err(out, want_o) if want_o.norm() > 0 else float(out.abs().max())
    assert err < TOL_O[p.dtype], f"o: relative error {err:.2e}"
    check_lse(lse.view.float(), want_lse.float())
    return "served"


@dataclass
class Tally:
    """Outcomes of one test's calls. A failing call is recorded and the test goes on, so that one run
    on the device counts every wrong call (hypothesis does not shrink here: each example costs builds
    and launches, and the recorded plan and call say enough)."""

    served: int = 0
    refused: int = 0
    failures: list[str] = field(default_factory=list)

    def run(self, what: Any, args: tuple[Any, ...]) -> None:
        """what(*args), args ending in (..., plan, call, generator)."""
        p, c = args[-3], args[-2]
        try:
            outcome = what(*args)
        except (Exception, pytest.fail.Exception) as exc:  # an assertion, pytest.raises unmet, an engine error
            first = (str(exc).splitlines() or [""])[0][:300]
            self.failures.append(f"{type(exc).__name__}: {first}\n    plan {p}\n    call {c}")
            return
        if outcome == "served":
            self.served += 1
        else:
            self.refused += 1

    def report(self, label: str) -> str:
        kinds: dict[str, int] = {}
        for f in self.failures:
            key = re.sub(r"[0-9][0-9.e+-]*", "#", f.splitlines()[0])[:70]  # the kind, without its numbers
            kinds[key] = kinds.get(key, 0) + 1
        lines = [
            f"{label}: {self.served} calls served exactly, {self.refused} refused per call, "
            f"{len(self.failures)} failed {kinds}"
        ]
        lines += self.failures[:12]
        return "\n".join(lines)


NO_SHRINK = [Phase.explicit, Phase.reuse, Phase.generate]


def forward_example(handle: hipdnn.Handle, engine: int, data: st.DataObject, tally: Tally) -> None:
    draw = data.draw
    p = draw_plan(draw, engine, FWD_NAMES)
    g, t = forward_graph(p)
    g.build(handle)
    assert g.get_engine_id() == engine
    gen = torch.Generator(device="cuda").manual_seed(draw(st.integers(0, 2**31 - 1)))
    for _ in range(draw(st.integers(1, 3))):
        c = draw_call(draw, p, FWD_NAMES)
        tally.run(run_forward_call, (handle, g, t, p, c, gen))


def sweep(examples: int) -> Any:
    """The sweeps' hypothesis settings: reproducible draws, every failure counted rather than shrunk."""
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        phases=NO_SHRINK,
        suppress_health_check=HEALTH,
    )


@ENGINES
def test_every_forward_call_is_exact_or_refused(handle: hipdnn.Handle, engine: int) -> None:
    skip_unless_here(handle, engine)
    tally = Tally()

    @sweep(EXAMPLES[engine])
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        forward_example(handle, engine, data, tally)

    check()
    print(tally.report(f"engine {engine} forward"))
    assert not tally.failures, tally.report(f"engine {engine} forward")
    assert tally.served > 0


# ----------------------------------------------------------------------------------- backward
BWD_INPUTS = ("q", "k", "v", "o", "dO", "stats")
BWD_OUTPUTS = ("dQ", "dK", "dV")
BWD_NAMES = BWD_INPUTS + BWD_OUTPUTS


def backward_graph(p: Plan) -> tuple[hipdnn.Graph, dict[str, Any]]:
    g = gpu_graph("applicability_bwd", p.dtype, overridable=True, engine=p.engine)
    t: dict[str, Any] = {}
    for n in BWD_INPUTS:
        dims, strides = declared(p, n)
        t[n] = g.tensor(name=n, dim=dims, stride=strides, data_type=hipdnn.DataType.FLOAT if n == "stats" else p.dtype)
    extra: dict[str, Any] = seq_len_tensors(g, p.b) if p.padding else {}
    dq, dk, dv = g.sdpa_backward(
        t["q"],
        t["k"],
        t["v"],
        t["o"],
        t["dO"],
        t["stats"],
        attn_scale=p.scale,
        use_causal_mask=p.mask != "none",
        diagonal_alignment=alignment(p.mask == "br"),
        use_padding_mask=p.padding,
        **extra,
    )
    for n, x in (("dQ", dq), ("dK", dk), ("dV", dv)):
        x.set_output(True).set_stride(declared(p, n)[1])
        t[n] = x
    t.update(extra)
    return g, t


def run_backward_call(
    handle: hipdnn.Handle, g: hipdnn.Graph, t: dict[str, Any], p: Plan, c: CallShape, gen: Any
) -> str:
    tdt = TORCH[p.dtype]
    bufs = {n: Buf(c.dims(n), c.lay[n], tdt if n != "stats" else torch.float32) for n in BWD_NAMES}
    for n, past in (("q", c.seq_q), ("k", c.seq_kv), ("v", c.seq_kv), ("dO", c.seq_q)):
        fill_input(bufs[n], gen, c, past)
    scale = call_scale(p, c.d)
    m = masks(p, c)
    o64, lse64 = forward64(bufs["q"].view, bufs["k"].view, bufs["v"].view, scale, **m)
    bufs["o"].view.copy_(o64)
    bufs["stats"].view.copy_(lse64)
    if c.seq_q is not None:  # what a caller leaves past the lengths: never read
        for bi, n in enumerate(c.seq_q):
            bufs["o"].view[bi, :, min(n, c.sq) :] = NAN
            bufs["stats"].view[bi, :, min(n, c.sq) :] = NAN
    before = {n: bufs[n].base.clone() for n in BWD_INPUTS}
    pack = {t[n]: value(bufs[n]) for n in BWD_NAMES}
    pack.update(seq_values(t, c))
    ov = overrides_of(t, c, bufs, BWD_NAMES)
    g.execute(handle, pack, workspace(g), overrides=ov)
    torch.cuda.synchronize()
    for n in BWD_INPUTS:
        assert nan_equal(bufs[n].base, before[n]), f"{n}: an input was written"
    want = reference_backward(
        bufs["q"].view, bufs["k"].view, bufs["v"].view, bufs["o"].view, bufs["dO"].view, scale, **m
    )
    for n, ref in zip(BWD_OUTPUTS, want):
        got = bufs[n]
        assert got.outside_untouched(), f"{n}: a write landed outside its own elements (a gap or a guard band)"
        view = got.view.float()
        assert not torch.isnan(view).any(), f"{n}: an element was not written (or took a NaN it must not read)"
        err = rel_err(view, ref) if ref.norm() > 0 else float(view.abs().max())
        assert err < TOL_GRAD[p.dtype], f"{n}: relative error {err:.2e}"
    if c.seq_q is not None and c.seq_kv is not None:
        for bi in range(c.b):
            lq, lkv = min(c.seq_q[bi], c.sq), min(c.seq_kv[bi], c.skv)
            zero = {"dQ": lq if lkv > 0 else 0, "dK": lkv if lq > 0 else 0, "dV": lkv if lq > 0 else 0}
            for n, first in zero.items():
                assert bool((bufs[n].view[bi, :, first:] == 0).all()), f"{n}: batch {bi}, rows from {first}"
    return "served"


@ENGINES
def test_every_backward_call_is_exact_or_refused(handle: hipdnn.Handle, engine: int) -> None:
    skip_unless_here(handle, engine)
    tally = Tally()

    @sweep(BWD_EXAMPLES[engine])
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        draw = data.draw
        p = draw_plan(draw, engine, BWD_NAMES)
        g, t = backward_graph(p)
        g.build(handle)
        assert g.get_engine_id() == engine
        gen = torch.Generator(device="cuda").manual_seed(draw(st.integers(0, 2**31 - 1)))
        for _ in range(draw(st.integers(1, 2))):
            c = draw_call(draw, p, BWD_NAMES)
            tally.run(run_backward_call, (handle, g, t, p, c, gen))

    check()
    print(tally.report(f"engine {engine} backward"))
    assert not tally.failures, tally.report(f"engine {engine} backward")
    assert tally.served > 0


# --------------------------------------------------------------------------------- at build
@ENGINES
@pytest.mark.parametrize("d", list(range(8, 257, 8)))
def test_head_dims_at_build(handle: hipdnn.Handle, engine: int, d: int) -> None:
    """Every head dim models use, 8 .. 256, with the engine preferred: up to 128 they build; above it
    they are refused at build (GRAPH_NOT_SUPPORTED) and the exception gives the plugin's reason."""
    skip_unless_here(handle, engine)
    g, _ = sdpa_graph(BF16, [1, 2, 40, d], [1, 2, 40, d], "bhsd", engine=engine, scale=0.1)
    if d <= MAX_HEAD_DIM:
        g.build(handle)
        assert g.get_engine_id() == engine
        return
    with pytest.raises(hipdnn.HipdnnError) as info:
        g.build(handle)
    assert info.value.code == hipdnn.ErrorCode.GRAPH_NOT_SUPPORTED
    assert f"head dim {d} not served (" in str(info.value), str(info.value)


def test_the_reason_without_a_preferred_engine(handle: hipdnn.Handle) -> None:
    """No engine preferred and none applies: the exception lists each plugin's answer, with each
    engine's own reason (the heuristics ask every engine why, on this error path only)."""
    g, _ = sdpa_graph(BF16, [1, 2, 40, 192], [1, 2, 40, 192], "bhsd", scale=0.1)
    with pytest.raises(hipdnn.HipdnnError) as info:
        g.build(handle)
    assert info.value.code == hipdnn.ErrorCode.GRAPH_NOT_SUPPORTED
    assert "head dim 192 not served (8-128 in steps of 8)" in str(info.value), str(info.value)
    assert "head dim 192 not served (1-128)" in str(info.value), str(info.value)
