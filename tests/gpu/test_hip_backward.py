"""SDPA backward on the HIP engine (engines 202 tensor cores and 201 portable), through the public API.

Skipped where torch, a CUDA/HIP device or the built plugin is missing (test_hip_backward_abi.py checks
the graph rules on any machine). Each case draws q, k, v and dO at random, computes the forward's o
and natural-log stats in float64 (o rounded to the input type, stats to fp32, as a forward would hand
them over), runs the engine's backward into NaN-poisoned, guard-banded dQ, dK, dV (the workspace is
poisoned too), and compares with float64 gradients written from the definition on the device
(hip_support.reference_backward). Tolerances, on the relative Frobenius error of each gradient:
bf16 2e-2, fp16 5e-3. Rows a padding mask leaves out (dQ past seq_len_q, dK and dV past seq_len_kv)
must be exactly 0.

Coverage: bf16 and fp16; D = 64 and 128; odd (B, Sq, Skv); no mask, top-left and bottom-right causal
with Sq != Skv (rows that see no key); MHA, GQA 8/2 and MQA 4/1; BHSD and BSHD; both engines; padding
with per-sequence lengths (0, and not multiples of 64), and with NaN in every input row past the
lengths (the copy engine reads those rows as they are); one max-shape plan served through overrides;
dynamic tensors (wildcard B and S, and wildcard heads); a plan whose workspace is capped, so that calls
run in several slices; the engine's own forward feeding the backward; the workspace errors."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA/HIP device visible to torch", allow_module_level=True)

import hipdnn  # noqa: E402
from tests.gpu.hip_support import (  # noqa: E402
    PORTABLE,
    TENSOR_CORE,
    bwd_pair_bytes,
    bwd_plan_workspace,
    compact,
    dynamic_sdpa_backward_graph,
    forward64,
    layout_strides,
    reference_backward,
    sdpa_backward_graph,
    sdpa_graph,
)
from tests.gpu.test_hip_engine import (  # noqa: E402
    BF16,
    HALF,
    TORCH,
    Guarded,
    engines_here,
    random_view,
    rel_err,
    skip_unless_here,
    value,
)

TOL_GRAD = {BF16: 2e-2, HALF: 5e-3}
ENGINES = pytest.mark.parametrize("engine", [TENSOR_CORE, PORTABLE], ids=["tc202", "portable201"])
MASKS = {"none": (False, False), "tl": (True, False), "br": (False, True)}


@pytest.fixture(scope="module")
def handle(hip_plugin: Path) -> Iterator[hipdnn.Handle]:
    h = hipdnn.Handle(plugin_paths=[hip_plugin], plugin_loading_mode=hipdnn.PluginLoadingMode.ABSOLUTE)
    if not any(p.name == "hipdnn_hip_engine" for p in h.loaded_plugins()):
        pytest.fail(f"the HIP engine did not load: {h.skipped_plugins()}")
    yield h
    h.close()


@dataclass
class Call:
    """One backward call's shape and options."""

    b: int
    hq: int
    hk: int
    sq: int
    skv: int
    d: int
    layout: str = "bhsd"
    mask: str = "none"
    scale: float = 0.125
    seq_q: list[int] | None = None
    seq_kv: list[int] | None = None

    @property
    def q_dims(self) -> list[int]:
        return [self.b, self.hq, self.sq, self.d]

    @property
    def kv_dims(self) -> list[int]:
        return [self.b, self.hk, self.skv, self.d]

    @property
    def q_strides(self) -> list[int]:
        return layout_strides(self.layout, self.b, self.hq, self.sq, self.d)

    @property
    def kv_strides(self) -> list[int]:
        return layout_strides(self.layout, self.b, self.hk, self.skv, self.d)

    @property
    def masks(self) -> dict[str, Any]:
        tl, br = MASKS[self.mask]
        return {"causal_tl": tl, "causal_br": br, "seq_q": self.seq_q, "seq_kv": self.seq_kv}


def poisoned_workspace(g: hipdnn.Graph) -> Any:
    """The plan's workspace filled with 0xFF bytes (NaN as fp32): the kernels must not read scratch they
    did not write in this call."""
    size = g.get_workspace_size()
    return torch.full((size,), 0xFF, dtype=torch.uint8, device="cuda") if size else None


def inputs(c: Call, dtype: hipdnn.DataType, gen: Any, o_from: Any = None) -> dict[str, Any]:
    """q, k, v, dO at random in their layouts; o and stats from the float64 forward (or ``o_from``:
    a callable (q, k, v) -> (o, stats) that produces them, e.g. the engine's own forward)."""
    tdt = TORCH[dtype]
    t = {
        "q": random_view(c.q_dims, c.q_strides, tdt, gen),
        "k": random_view(c.kv_dims, c.kv_strides, tdt, gen),
        "v": random_view(c.kv_dims, c.kv_strides, tdt, gen),
        "dO": random_view(c.q_dims, c.q_strides, tdt, gen),
    }
    if o_from is not None:
        t["o"], t["stats"] = o_from(t["q"], t["k"], t["v"])
        return t
    o64, lse64 = forward64(t["q"], t["k"], t["v"], c.scale, **c.masks)
    o = torch.empty_strided(c.q_dims, c.q_strides, dtype=tdt, device="cuda")
    o.copy_(o64)
    t["o"], t["stats"] = o, lse64.float().contiguous()
    return t


def run_backward(
    handle: hipdnn.Handle,
    g: hipdnn.Graph,
    t: dict[str, Any],
    dtype: hipdnn.DataType,
    c: Call,
    gen: Any,
    *,
    override: bool = False,
    o_from: Any = None,
    workspace: Any = "poisoned",
    nan_past_lengths: bool = False,
) -> None:
    """Execute the backward at ``c`` and check dQ, dK, dV against the float64 reference. With
    ``nan_past_lengths`` the engine is handed q, o, dO rows past seq_len_q and k, v rows past seq_len_kv
    set to NaN (the reference sees the clean inputs): a padded row must never be read into a product."""
    tdt = TORCH[dtype]
    x = inputs(c, dtype, gen, o_from)
    given = x
    if nan_past_lengths:
        assert c.seq_q is not None and c.seq_kv is not None
        given = dict(x)
        for n in ("q", "k", "v", "o", "dO"):
            given[n] = torch.empty_strided(x[n].shape, x[n].stride(), dtype=x[n].dtype, device="cuda")
            given[n].copy_(x[n])
        for bi in range(c.b):
            for n in ("q", "o", "dO"):
                given[n][bi, :, min(c.seq_q[bi], c.sq) :] = math.nan
            for n in ("k", "v"):
                given[n][bi, :, min(c.seq_kv[bi], c.skv) :] = math.nan
    out = {
        "dQ": Guarded(c.q_dims, c.q_strides, tdt),
        "dK": Guarded(c.kv_dims, c.kv_strides, tdt),
        "dV": Guarded(c.kv_dims, c.kv_strides, tdt),
    }
    pack = {t[n]: value(given[n], dtype) for n in ("q", "k", "v", "o", "dO")}
    pack[t["stats"]] = x["stats"]
    pack.update({t[n]: value(out[n].view, dtype) for n in out})
    st_dims = [c.b, c.hq, c.sq, 1]
    if c.seq_q is not None:
        assert c.seq_kv is not None
        pack[t["seq_len_q"]] = torch.tensor(c.seq_q, dtype=torch.int32, device="cuda").view(c.b, 1, 1, 1)
        pack[t["seq_len_kv"]] = torch.tensor(c.seq_kv, dtype=torch.int32, device="cuda").view(c.b, 1, 1, 1)
    overrides = None
    if override:
        shapes = {n: (c.q_dims, c.q_strides) for n in ("q", "o", "dO", "dQ")}
        shapes.update({n: (c.kv_dims, c.kv_strides) for n in ("k", "v", "dK", "dV")})
        shapes["stats"] = (st_dims, compact(st_dims))
        if c.seq_q is not None:
            shapes["seq_len_q"] = shapes["seq_len_kv"] = ([c.b, 1, 1, 1], [1, 1, 1, 1])
        overrides = {t[n]: hipdnn.OverrideEntry(shape=s, stride=st) for n, (s, st) in shapes.items()}
    ws = poisoned_workspace(g) if isinstance(workspace, str) else workspace
    g.execute(handle, pack, ws, overrides=overrides)
    torch.cuda.synchronize()
    want = reference_backward(x["q"], x["k"], x["v"], x["o"], x["dO"], c.scale, **c.masks)
    for (name, got), ref in zip(out.items(), want):
        view = got.view.float()
        assert not torch.isnan(view).any(), f"{name}: an element was not written"
        assert got.guards_intact(), f"{name}: a write landed outside the tensor"
        err = rel_err(view, ref) if ref.norm() > 0 else float(view.abs().max())
        assert err < TOL_GRAD[dtype], f"{name}: relative error {err:.2e}"
    if c.seq_q is not None and c.seq_kv is not None:
        # exactly 0: dQ past seq_len_q (all of it without keys), dK and dV past seq_len_kv (all without rows)
        for bi in range(c.b):
            lq, lkv = min(c.seq_q[bi], c.sq), min(c.seq_kv[bi], c.skv)
            zero = {"dQ": lq if lkv > 0 else 0, "dK": lkv if lq > 0 else 0, "dV": lkv if lq > 0 else 0}
            for name, first in zero.items():
                assert bool((out[name].view[bi, :, first:] == 0).all()), f"{name}: batch {bi}, rows from {first}"


# ------------------------------------------------------------------ every option, exact-shape plans
CASES = [
    # b, hq, hk, sq, skv, mask, layout
    (1, 2, 2, 1, 1, "none", "bhsd"),
    (2, 4, 4, 37, 129, "tl", "bhsd"),
    (1, 4, 4, 129, 37, "br", "bshd"),  # Sq > Skv bottom-right: the first 92 rows see no key
    (1, 8, 2, 1000, 1000, "tl", "bshd"),  # GQA 8/2
    (3, 4, 1, 65, 200, "br", "bhsd"),  # MQA 4/1, Sq < Skv
    (2, 8, 2, 37, 129, "none", "bshd"),
    (1, 4, 1, 1000, 1000, "none", "bhsd"),
    (3, 2, 2, 65, 200, "tl", "bshd"),
    (1, 2, 2, 129, 37, "none", "bhsd"),
    (2, 2, 2, 129, 37, "tl", "bshd"),
]


@ENGINES
@pytest.mark.parametrize("dtype", [BF16, HALF], ids=["bf16", "fp16"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize(("b", "hq", "hk", "sq", "skv", "mask", "layout"), CASES)
def test_backward_matches_reference(
    handle: hipdnn.Handle,
    engine: int,
    dtype: hipdnn.DataType,
    d: int,
    b: int,
    hq: int,
    hk: int,
    sq: int,
    skv: int,
    mask: str,
    layout: str,
) -> None:
    skip_unless_here(handle, engine)
    c = Call(b, hq, hk, sq, skv, d, layout, mask, scale=0.9 / math.sqrt(d))
    tl, br = MASKS[mask]
    g, t = sdpa_backward_graph(
        dtype, c.q_dims, c.kv_dims, layout, causal=tl or br, bottom_right=br, scale=c.scale, engine=engine
    )
    g.build(handle)
    assert g.get_engine_id() == engine
    assert g.get_workspace_size() == bwd_plan_workspace(b, hq, hk, sq, d)
    gen = torch.Generator(device="cuda").manual_seed(sq * 7919 + skv * 31 + d + hq)
    run_backward(handle, g, t, dtype, c, gen)


def test_default_scale_and_a_negative_one(handle: hipdnn.Handle) -> None:
    """No attn_scale: 1/sqrt(D); and a negative scale."""
    engine = engines_here(handle)[0]
    for scale in (None, -0.2):
        c = Call(2, 4, 2, 77, 91, 64, "bhsd", "br", scale=1 / 8 if scale is None else scale)
        g, t = sdpa_backward_graph(
            BF16, c.q_dims, c.kv_dims, "bhsd", causal=True, bottom_right=True, scale=scale, engine=engine
        )
        g.build(handle)
        run_backward(handle, g, t, BF16, c, torch.Generator(device="cuda").manual_seed(4))


def test_engine_202_is_chosen_for_bf16_backward(hip_plugin: Path) -> None:
    """With every engine found by default (the CPU engine takes the backward too), a bf16 backward on
    an H200 goes to the tensor-core engine."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("engine 202 runs on compute capability 9.0 only")
    h = hipdnn.Handle(plugin_paths=[hip_plugin])
    try:
        g, _ = sdpa_backward_graph(BF16, [2, 8, 256, 128], [2, 2, 256, 128], "bshd", causal=True, scale=0.1)
        g.build(h)
        assert g.get_engine_id() == TENSOR_CORE
    finally:
        h.close()


# ------------------------------------------------------------------ one plan, many shapes
@ENGINES
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("mask", list(MASKS))
def test_one_max_shape_plan_serves_every_call(
    handle: hipdnn.Handle, engine: int, d: int, layout: str, mask: str
) -> None:
    """Built once at B = 3, Hq = 8, Hk = 2 (GQA), Sq = Skv = 1024; executed through overrides at odd
    (B, Sq, Skv), Sq and Skv independently."""
    skip_unless_here(handle, engine)
    tl, br = MASKS[mask]
    g, t = sdpa_backward_graph(
        BF16, [3, 8, 1024, d], [3, 2, 1024, d], layout, causal=tl or br, bottom_right=br, overridable=True,
        scale=0.1, engine=engine,
    )  # fmt: skip
    g.build(handle)
    assert g.get_workspace_size() == bwd_plan_workspace(3, 8, 2, 1024, d)
    gen = torch.Generator(device="cuda").manual_seed(d + len(layout) + len(mask))
    for b, sq, skv in ((1, 1, 1), (2, 37, 129), (1, 129, 37), (3, 1000, 1000), (3, 65, 200), (1, 1024, 1024)):
        run_backward(handle, g, t, BF16, Call(b, 8, 2, sq, skv, d, layout, mask, scale=0.1), gen, override=True)


@ENGINES
@pytest.mark.parametrize("mask", list(MASKS))
@pytest.mark.parametrize("dtype", [BF16, HALF], ids=["bf16", "fp16"])
def test_padding_mask(handle: hipdnn.Handle, engine: int, mask: str, dtype: hipdnn.DataType) -> None:
    """Per-sequence lengths, 0 among them (a batch with no query rows; one with no keys) and none a
    multiple of 64 but the full ones; then the same plan at a smaller overridden shape."""
    skip_unless_here(handle, engine)
    tl, br = MASKS[mask]
    b, hq, hk, s, d = 4, 4, 2, 700, 128
    g, t = sdpa_backward_graph(
        dtype, [b, hq, s, d], [b, hk, s, d], "bhsd", causal=tl or br, bottom_right=br, padding=True,
        overridable=True, scale=0.1, engine=engine,
    )  # fmt: skip
    g.build(handle)
    gen = torch.Generator(device="cuda").manual_seed(3)
    c = Call(b, hq, hk, s, s, d, "bhsd", mask, scale=0.1, seq_q=[700, 0, 333, 65], seq_kv=[650, 129, 0, 700])
    run_backward(handle, g, t, dtype, c, gen)
    c = Call(2, hq, hk, 100, 100, d, "bhsd", mask, scale=0.1, seq_q=[64, 100], seq_kv=[100, 5])
    run_backward(handle, g, t, dtype, c, gen, override=True)


@ENGINES
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("mask", ["none", "br"])
def test_padding_never_reads_past_the_lengths(
    handle: hipdnn.Handle, engine: int, d: int, layout: str, mask: str
) -> None:
    """Rows past each batch's lengths hold NaN in q, o, dO (queries) and k, v (keys); the gradients of the
    rows inside must come out right, and those outside exactly 0. Lengths cross a key block (128) and a
    query tile (64 / 128) mid-way, and one batch has all its rows."""
    skip_unless_here(handle, engine)
    tl, br = MASKS[mask]
    b, hq, hk, s = 3, 4, 2, 300
    g, t = sdpa_backward_graph(
        BF16, [b, hq, s, d], [b, hk, s, d], layout, causal=tl or br, bottom_right=br, padding=True,
        scale=0.1, engine=engine,
    )  # fmt: skip
    g.build(handle)
    gen = torch.Generator(device="cuda").manual_seed(11)
    c = Call(b, hq, hk, s, s, d, layout, mask, scale=0.1, seq_q=[300, 77, 200], seq_kv=[150, 300, 37])
    run_backward(handle, g, t, BF16, c, gen, nan_past_lengths=True)


@ENGINES
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_one_dynamic_plan(handle: hipdnn.Handle, engine: int, d: int, layout: str, causal: bool) -> None:
    """[-1, 4, -1, D] q / o / dO and [-1, 2, -1, D] k / v, built with no size at all: the workspace is the
    cap; executed at several (B, Sq, Skv)."""
    skip_unless_here(handle, engine)
    g, t = dynamic_sdpa_backward_graph(BF16, 4, 2, d, layout, causal=causal, scale=0.1, engine=engine)
    g.build(handle)
    assert g.get_engine_id() == engine
    assert g.get_workspace_size() == bwd_plan_workspace(-1, 4, 2, -1, d)
    gen = torch.Generator(device="cuda").manual_seed(d + 17 * causal)
    mask = "tl" if causal else "none"
    for b, sq, skv in ((1, 1, 1), (2, 37, 129), (1, 1000, 1000), (3, 65, 200)):
        run_backward(handle, g, t, BF16, Call(b, 4, 2, sq, skv, d, layout, mask, scale=0.1), gen, override=True)


@ENGINES
def test_dynamic_heads(handle: hipdnn.Handle, engine: int) -> None:
    """Heads left to the call too ([-1, -1, -1, 128], fp16, BSHD order, bottom-right causal): MQA, MHA
    and GQA from one plan."""
    skip_unless_here(handle, engine)
    dyn = hipdnn.DYNAMIC_DIM
    g, t = dynamic_sdpa_backward_graph(
        HALF, dyn, dyn, 128, "bshd", causal=True, bottom_right=True, scale=0.1, engine=engine
    )
    g.build(handle)
    gen = torch.Generator(device="cuda").manual_seed(23)
    for b, hq, hk, sq, skv in ((1, 8, 1, 1, 300), (2, 4, 4, 129, 64), (1, 8, 2, 300, 300)):
        run_backward(handle, g, t, HALF, Call(b, hq, hk, sq, skv, 128, "bshd", "br", scale=0.1), gen, override=True)


# ------------------------------------------------------------------ drawn shapes (hypothesis)
_DRAWN_PLANS: dict[tuple[int, int, str, str, bool], tuple[hipdnn.Graph, dict[str, hipdnn.TensorAttributes]]] = {}


@st.composite
def drawn_calls(draw: st.DrawFn) -> tuple[int, Call, bool]:
    engine = draw(st.sampled_from([TENSOR_CORE, PORTABLE]))
    d = draw(st.sampled_from([64, 128]))
    mask = draw(st.sampled_from(list(MASKS)))
    layout = draw(st.sampled_from(["bhsd", "bshd"]))
    b = draw(st.integers(1, 3))
    sq = draw(st.integers(1, 300))
    skv = draw(st.integers(1, 300))
    padded = draw(st.booleans())
    seq_q = seq_kv = None
    if padded:
        seq_q = [draw(st.integers(0, sq)) for _ in range(b)]
        seq_kv = [draw(st.integers(0, skv)) for _ in range(b)]
    return engine, Call(b, 8, 2, sq, skv, d, layout, mask, scale=0.11, seq_q=seq_q, seq_kv=seq_kv), padded


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(drawn=drawn_calls())
def test_drawn_shapes_through_one_plan(handle: hipdnn.Handle, drawn: tuple[int, Call, bool]) -> None:
    """Random (B, Sq, Skv), masks, layouts and per-sequence lengths, each served through overrides by the
    one plan (B = 3, Hq = 8, Hk = 2, S = 300) of its engine, head dim, mask, layout and padding."""
    engine, c, padded = drawn
    if engine not in engines_here(handle):
        return
    key = (engine, c.d, c.mask, c.layout, padded)
    if key not in _DRAWN_PLANS:
        tl, br = MASKS[c.mask]
        g, t = sdpa_backward_graph(
            BF16, [3, 8, 300, c.d], [3, 2, 300, c.d], c.layout, causal=tl or br, bottom_right=br,
            overridable=True, scale=c.scale, padding=padded, engine=engine,
        )  # fmt: skip
        g.build(handle)
        _DRAWN_PLANS[key] = (g, t)
    g, t = _DRAWN_PLANS[key]
    gen = torch.Generator(device="cuda").manual_seed(c.b * 100003 + c.sq * 331 + c.skv)
    run_backward(handle, g, t, BF16, c, gen, override=True)


# ------------------------------------------------------------------ workspace slices
def test_capped_workspace_runs_in_slices(handle: hipdnn.Handle) -> None:
    """A plan whose maximum shape needs more than the cap (B = 64, H = 16, S = 4096, D = 128: 1024
    (batch, kv head) pairs of 2.1 MB) reports the cap, 126 pairs a slice: the full call runs in 9 slices,
    a (40, 3000) call in 4, a small one in 1."""
    engine = engines_here(handle)[0]
    g, t = sdpa_backward_graph(
        BF16, [64, 16, 4096, 128], [64, 16, 4096, 128], "bshd", overridable=True, scale=0.09, engine=engine
    )
    g.build(handle)
    assert g.get_workspace_size() == bwd_plan_workspace(64, 16, 16, 4096, 128)  # capped
    gen = torch.Generator(device="cuda").manual_seed(64)
    for b, s in ((64, 4096), (40, 3000), (2, 1000)):
        run_backward(handle, g, t, BF16, Call(b, 16, 16, s, s, 128, "bshd", scale=0.09), gen, override=True)
        torch.cuda.empty_cache()


@ENGINES
def test_one_pair_per_slice_and_a_pair_too_large(handle: hipdnn.Handle, engine: int) -> None:
    """MQA with 64 query heads: a (batch, kv head) pair at Sq = 4096 takes 138 MB, one per slice of the
    capped workspace (3 slices for B = 3); at Sq = 8192 (277 MB) no pair fits and the call is refused
    before anything runs."""
    skip_unless_here(handle, engine)
    g, t = dynamic_sdpa_backward_graph(BF16, 64, 1, 128, "bhsd", causal=True, scale=0.1, engine=engine)
    g.build(handle)
    gen = torch.Generator(device="cuda").manual_seed(8)
    run_backward(handle, g, t, BF16, Call(3, 64, 1, 4096, 4096, 128, "bhsd", "tl", scale=0.1), gen, override=True)
    c = Call(1, 64, 1, 8192, 8192, 128)
    dims = {n: c.q_dims for n in ("q", "o", "dO", "dQ")} | {n: c.kv_dims for n in ("k", "v", "dK", "dV")}
    dims["stats"] = [1, 64, 8192, 1]
    dtypes = {n: torch.float32 if n == "stats" else torch.bfloat16 for n in dims}
    outputs = ("dQ", "dK", "dV")
    bufs = {n: torch.full(dims[n], math.nan if n in outputs else 0.0, dtype=dtypes[n], device="cuda") for n in dims}
    overrides = {t[n]: hipdnn.OverrideEntry(shape=dims[n], stride=compact(dims[n])) for n in dims}
    with pytest.raises(hipdnn.HipdnnError) as info:
        g.execute(handle, {t[n]: value(bufs[n], BF16) for n in dims}, poisoned_workspace(g), overrides=overrides)
    need = bwd_pair_bytes(64, 1, 8192, 128)  # (277 MB)
    assert f"{need} bytes of backward workspace per (batch, kv head) pair" in info.value.message, info.value.message
    assert all(bool(bufs[n].isnan().all()) for n in outputs), "the refused call wrote its outputs"


def test_workspace_none_or_too_small_is_refused(handle: hipdnn.Handle) -> None:
    engine = engines_here(handle)[0]
    c = Call(2, 4, 2, 64, 64, 64)
    g, t = sdpa_backward_graph(BF16, c.q_dims, c.kv_dims, "bhsd", scale=c.scale, engine=engine)
    g.build(handle)
    need = g.get_workspace_size()
    assert need == bwd_plan_workspace(2, 4, 2, 64, 64) > 0
    gen = torch.Generator(device="cuda").manual_seed(1)
    with pytest.raises(hipdnn.HipdnnError) as info:
        run_backward(handle, g, t, BF16, c, gen, workspace=None)
    assert f"needs a workspace of {need} bytes" in info.value.message, info.value.message
    small = torch.empty(need - 1, dtype=torch.uint8, device="cuda")
    with pytest.raises(hipdnn.HipdnnError) as info:
        run_backward(handle, g, t, BF16, c, gen, workspace=small)
    assert f"workspace holds {need - 1} bytes, the plan needs {need}" in info.value.message, info.value.message


# ------------------------------------------------------------------ the engine's own forward feeding it
@ENGINES
@pytest.mark.parametrize(
    ("sq", "skv", "mask", "layout"), [(333, 333, "tl", "bshd"), (129, 37, "br", "bhsd"), (64, 500, "none", "bshd")]
)
def test_backward_of_the_engines_forward(
    handle: hipdnn.Handle, engine: int, sq: int, skv: int, mask: str, layout: str
) -> None:
    """o and stats from the engine's own forward (its -inf stats of rows that see no key included) are
    what its backward takes."""
    skip_unless_here(handle, engine)
    tl, br = MASKS[mask]
    c = Call(2, 8, 2, sq, skv, 128, layout, mask, scale=0.1)
    fwd, ft = sdpa_graph(BF16, c.q_dims, c.kv_dims, layout, causal=tl or br, bottom_right=br, scale=0.1, engine=engine)
    fwd.build(handle)

    def forward(q: Any, k: Any, v: Any) -> tuple[Any, Any]:
        o = torch.empty_strided(c.q_dims, c.q_strides, dtype=torch.bfloat16, device="cuda")
        stats = torch.empty(c.b, c.hq, c.sq, 1, dtype=torch.float32, device="cuda")
        pack = {ft["q"]: q.data_ptr(), ft["k"]: k.data_ptr(), ft["v"]: v.data_ptr(), ft["o"]: o.data_ptr()}
        pack[ft["stats"]] = stats
        size = fwd.get_workspace_size()
        fwd.execute(handle, pack, torch.empty(size, dtype=torch.uint8, device="cuda") if size else None)
        return o, stats

    g, t = sdpa_backward_graph(
        BF16, c.q_dims, c.kv_dims, layout, causal=tl or br, bottom_right=br, scale=0.1, engine=engine
    )
    g.build(handle)
    run_backward(handle, g, t, BF16, c, torch.Generator(device="cuda").manual_seed(sq), o_from=forward)
