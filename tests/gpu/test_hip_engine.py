"""The HIP engine plugin (engines 201 portable, 202 tensor cores) on a GPU, through the public API.

Skipped where torch, a CUDA/HIP device or the built plugin is missing. Every output is NaN-poisoned
inside a larger buffer whose guard regions must stay NaN; the reference is float32 torch on the
device from the same rounded inputs. bf16 tensors pass as int pointers (numpy has no bfloat16 for the
frontend's dtype check); fp16 tensors pass as torch tensors through __cuda_array_interface__, which
the frontend bounds-checks."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA/HIP device visible to torch", allow_module_level=True)

import hipdnn  # noqa: E402
from tests.gpu.hip_support import (  # noqa: E402
    PORTABLE,
    TENSOR_CORE,
    compact,
    layout_strides,
    reference,
    sdpa_graph,
    workspace_for,
)

BF16, HALF = hipdnn.DataType.BFLOAT16, hipdnn.DataType.HALF
TORCH = {BF16: torch.bfloat16, HALF: torch.float16}
TOL_O = {BF16: 1.6e-2, HALF: 4e-3}
TOL_LSE = 2e-3
GUARD = 4096


@pytest.fixture(scope="module")
def handle(hip_plugin: Path) -> Iterator[hipdnn.Handle]:
    h = hipdnn.Handle(plugin_paths=[hip_plugin], plugin_loading_mode=hipdnn.PluginLoadingMode.ABSOLUTE)
    if not any(p.name == "hipdnn_hip_engine" for p in h.loaded_plugins()):
        pytest.fail(f"the HIP engine did not load: {h.skipped_plugins()}")
    yield h
    h.close()


def engines_here(handle: hipdnn.Handle) -> list[int]:
    cc = torch.cuda.get_device_capability()
    return [TENSOR_CORE, PORTABLE] if cc == (9, 0) else [PORTABLE]


def skip_unless_here(handle: hipdnn.Handle, engine: int) -> None:
    if engine not in engines_here(handle):
        pytest.skip(f"engine {engine} does not run on this device")


def extent(dims: list[int], strides: list[int]) -> int:
    return sum((d - 1) * s for d, s in zip(dims, strides)) + 1


class Guarded:
    """A NaN-filled device buffer with GUARD elements either side, viewed at dims/strides."""

    def __init__(self, dims: list[int], strides: list[int], dtype: Any) -> None:
        n = extent(dims, strides)
        self.base = torch.full((n + 2 * GUARD,), float("nan"), dtype=dtype, device="cuda")
        self.view = self.base.as_strided(dims, strides, GUARD)

    def guards_intact(self) -> bool:
        return bool(torch.isnan(self.base[:GUARD].float()).all() and torch.isnan(self.base[-GUARD:].float()).all())


def random_view(dims: list[int], strides: list[int], dtype: Any, gen: Any) -> Any:
    base = torch.randn(extent(dims, strides), generator=gen, device="cuda", dtype=torch.float32).to(dtype)
    return base.as_strided(dims, strides)


def value(t: Any, dtype: hipdnn.DataType) -> Any:
    """What goes into the variant pack: the tensor (fp16, fp32, int32) or its pointer (bf16)."""
    return t.data_ptr() if t.dtype == torch.bfloat16 else t


def rel_err(out: Any, ref: Any) -> float:
    out, ref = out.double(), ref.double()
    return float((out - ref).norm() / ref.norm().clamp_min(1e-30))


def check_lse(lse: Any, want: Any) -> None:
    finite = torch.isfinite(want)
    assert torch.equal(torch.isfinite(lse), finite), "stats: -inf rows differ"
    assert bool((lse[~finite] == -math.inf).all())
    if finite.any():
        err = ((lse[finite] - want[finite]).abs() / want[finite].abs().clamp_min(1.0)).max().item()
        assert err < TOL_LSE, err


def run_case(
    handle: hipdnn.Handle,
    g: hipdnn.Graph,
    t: dict[str, Any],
    dtype: hipdnn.DataType,
    layout: str,
    b: int,
    hq: int,
    hk: int,
    sq: int,
    skv: int,
    d: int,
    *,
    scale: float,
    causal_tl: bool,
    causal_br: bool,
    gen: Any,
    override: bool = False,
    seq_q: list[int] | None = None,
    seq_kv: list[int] | None = None,
    nan_past_lengths: bool = False,
) -> None:
    tdt = TORCH[dtype]
    qs, kvs = layout_strides(layout, b, hq, sq, d), layout_strides(layout, b, hk, skv, d)
    q = random_view([b, hq, sq, d], qs, tdt, gen)
    k = random_view([b, hk, skv, d], kvs, tdt, gen)
    v = random_view([b, hk, skv, d], kvs, tdt, gen)
    if nan_past_lengths:
        # what a caller leaves in the padding: no kernel may let it reach a result
        assert seq_q is not None and seq_kv is not None
        for bi in range(b):
            q[bi, :, seq_q[bi] :] = float("nan")
            k[bi, :, seq_kv[bi] :] = float("nan")
            v[bi, :, seq_kv[bi] :] = float("nan")
    o = Guarded([b, hq, sq, d], qs, tdt)
    st_strides = compact([b, hq, sq, 1])
    lse = Guarded([b, hq, sq, 1], st_strides, torch.float32)
    pack = {
        t["q"]: value(q, dtype),
        t["k"]: value(k, dtype),
        t["v"]: value(v, dtype),
        t["o"]: value(o.view, dtype),
        t["stats"]: lse.view,
    }
    if seq_q is not None:
        assert seq_kv is not None
        pack[t["seq_len_q"]] = torch.tensor(seq_q, dtype=torch.int32, device="cuda").view(b, 1, 1, 1)
        pack[t["seq_len_kv"]] = torch.tensor(seq_kv, dtype=torch.int32, device="cuda").view(b, 1, 1, 1)
    overrides = None
    if override:
        overrides = {
            t["q"]: hipdnn.OverrideEntry(shape=[b, hq, sq, d], stride=qs),
            t["k"]: hipdnn.OverrideEntry(shape=[b, hk, skv, d], stride=kvs),
            t["v"]: hipdnn.OverrideEntry(shape=[b, hk, skv, d], stride=kvs),
            t["o"]: hipdnn.OverrideEntry(shape=[b, hq, sq, d], stride=qs),
            t["stats"]: hipdnn.OverrideEntry(shape=[b, hq, sq, 1], stride=st_strides),
        }
        if seq_q is not None:
            overrides[t["seq_len_q"]] = hipdnn.OverrideEntry(shape=[b, 1, 1, 1], stride=[1, 1, 1, 1])
            overrides[t["seq_len_kv"]] = hipdnn.OverrideEntry(shape=[b, 1, 1, 1], stride=[1, 1, 1, 1])
    g.execute(handle, pack, workspace_for(g), overrides=overrides)
    torch.cuda.synchronize()
    want_o, want_lse = reference(q, k, v, scale, causal_tl=causal_tl, causal_br=causal_br, seq_q=seq_q, seq_kv=seq_kv)
    out = o.view.float()
    assert not torch.isnan(out).any(), "an output element was not written"
    assert o.guards_intact() and lse.guards_intact(), "a write landed outside the output"
    err = rel_err(out, want_o)
    assert err < TOL_O[dtype], f"relative error {err:.2e}"
    check_lse(lse.view.float(), want_lse)


CASES = [
    # b, hq, hk, sq, skv, d, causal, bottom_right, layout
    (2, 4, 4, 1, 1, 64, False, False, "bhsd"),
    (2, 4, 4, 37, 37, 64, True, False, "bhsd"),
    (1, 8, 2, 1000, 1000, 128, True, False, "bshd"),  # GQA
    (2, 4, 1, 37, 1000, 128, True, True, "bshd"),  # MQA, Sq < Skv, bottom-right
    (1, 2, 2, 1000, 37, 64, False, False, "bhsd"),  # Sq > Skv
    (1, 2, 2, 1000, 300, 128, True, True, "bhsd"),  # bottom-right with fully masked rows
    (1, 2, 1, 4097, 4097, 128, False, False, "bshd"),
    (1, 2, 2, 4097, 4097, 64, True, False, "bhsd"),
]


@pytest.mark.parametrize("dtype", [BF16, HALF], ids=["bf16", "fp16"])
@pytest.mark.parametrize(("b", "hq", "hk", "sq", "skv", "d", "causal", "bottom_right", "layout"), CASES)
@pytest.mark.parametrize("engine", [TENSOR_CORE, PORTABLE], ids=["tc202", "portable201"])
def test_sdpa_matches_reference(
    handle: hipdnn.Handle,
    engine: int,
    dtype: hipdnn.DataType,
    b: int,
    hq: int,
    hk: int,
    sq: int,
    skv: int,
    d: int,
    causal: bool,
    bottom_right: bool,
    layout: str,
) -> None:
    skip_unless_here(handle, engine)
    gen = torch.Generator(device="cuda").manual_seed(sq * 7919 + skv + d)
    scale = 0.9 / math.sqrt(d)
    g, t = sdpa_graph(
        dtype,
        [b, hq, sq, d],
        [b, hk, skv, d],
        layout,
        causal=causal,
        bottom_right=bottom_right,
        scale=scale,
        engine=engine,
    )
    g.build(handle)
    assert g.get_engine_id() == engine
    run_case(
        handle,
        g,
        t,
        dtype,
        layout,
        b,
        hq,
        hk,
        sq,
        skv,
        d,
        scale=scale,
        causal_tl=causal and not bottom_right,
        causal_br=causal and bottom_right,
        gen=gen,
    )


@pytest.mark.parametrize("engine", [TENSOR_CORE, PORTABLE], ids=["tc202", "portable201"])
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_one_plan_serves_every_length(handle: hipdnn.Handle, engine: int, layout: str, causal: bool) -> None:
    """Built once at S_max = 4097 (B_max = 2); executed with overrides at S = 1, 37, 1000, 4097."""
    skip_unless_here(handle, engine)
    b_max, hq, hk, s_max, d = 2, 4, 2, 4097, 128
    dtype = BF16
    g, t = sdpa_graph(
        dtype,
        [b_max, hq, s_max, d],
        [b_max, hk, s_max, d],
        layout,
        causal=causal,
        overridable=True,
        scale=0.125,
        engine=engine,
    )
    g.build(handle)
    # engine 202 asks for scratch for its split-KV decode path (a plan with overrides can decode), except
    # under a top-left mask, where a short query sees only its first keys and nothing is split
    assert (g.get_workspace_size() > 0) == (engine == TENSOR_CORE and not causal)
    gen = torch.Generator(device="cuda").manual_seed(11)
    for b, s in ((1, 1), (2, 37), (1, 1000), (2, 4097), (1, 37)):
        run_case(
            handle,
            g,
            t,
            dtype,
            layout,
            b,
            hq,
            hk,
            s,
            s,
            d,
            scale=0.125,
            causal_tl=causal,
            causal_br=False,
            gen=gen,
            override=True,
        )


def test_decode_and_prefill_from_one_bottom_right_plan(handle: hipdnn.Handle) -> None:
    """Sq and Skv overridden independently: decode (Sq = 1) against a long cache, then prefill."""
    engine = engines_here(handle)[0]
    g, t = sdpa_graph(
        BF16,
        [1, 8, 2048, 64],
        [1, 2, 2048, 64],
        "bshd",
        causal=True,
        bottom_right=True,
        overridable=True,
        scale=0.125,
        engine=engine,
    )
    g.build(handle)
    gen = torch.Generator(device="cuda").manual_seed(5)
    for sq, skv in ((1, 2048), (1, 999), (37, 1000), (2048, 2048), (1000, 37)):
        run_case(
            handle,
            g,
            t,
            BF16,
            "bshd",
            1,
            8,
            2,
            sq,
            skv,
            64,
            scale=0.125,
            causal_tl=False,
            causal_br=True,
            gen=gen,
            override=True,
        )


@pytest.mark.parametrize("engine", [TENSOR_CORE, PORTABLE], ids=["tc202", "portable201"])
@pytest.mark.parametrize("causal", [None, "tl", "br"])
def test_padding_mask(handle: hipdnn.Handle, engine: int, causal: str | None) -> None:
    skip_unless_here(handle, engine)
    b, hq, hk, s, d = 3, 4, 2, 700, 128
    g, t = sdpa_graph(
        HALF,
        [b, hq, s, d],
        [b, hk, s, d],
        "bhsd",
        causal=causal is not None,
        bottom_right=causal == "br",
        padding=True,
        overridable=True,
        scale=0.1,
        engine=engine,
    )
    g.build(handle)
    gen = torch.Generator(device="cuda").manual_seed(3)
    run_case(
        handle,
        g,
        t,
        HALF,
        "bhsd",
        b,
        hq,
        hk,
        s,
        s,
        d,
        scale=0.1,
        causal_tl=causal == "tl",
        causal_br=causal == "br",
        gen=gen,
        seq_q=[700, 1, 333],
        seq_kv=[650, 129, 700],
    )
    # the same plan at a smaller overridden length
    run_case(
        handle,
        g,
        t,
        HALF,
        "bhsd",
        2,
        hq,
        hk,
        100,
        100,
        d,
        scale=0.1,
        causal_tl=causal == "tl",
        causal_br=causal == "br",
        gen=gen,
        override=True,
        seq_q=[64, 100],
        seq_kv=[100, 5],
    )


@pytest.mark.parametrize("d", [136, 192, 256])
def test_head_dims_above_128_are_not_applicable(handle: hipdnn.Handle, d: int) -> None:
    """No kernel is compiled above 128 (head dims 1-128 are served: test_hip_applicability.py)."""
    g, _ = sdpa_graph(BF16, [1, 2, 64, d], [1, 2, 64, d], "bhsd")
    with pytest.raises(hipdnn.HipdnnError) as info:
        g.build(handle)
    assert info.value.code == hipdnn.ErrorCode.GRAPH_NOT_SUPPORTED


def test_float_graph_is_not_applicable(handle: hipdnn.Handle) -> None:
    g, _ = sdpa_graph(hipdnn.DataType.FLOAT, [1, 2, 64, 64], [1, 2, 64, 64], "bhsd")
    with pytest.raises(hipdnn.HipdnnError):
        g.build(handle)


#: GPU clock cycles torch.cuda._sleep spins on the handle's stream: about 0.5 s at H200 clocks, far
#: longer than the host needs to launch the engine and the probe behind it.
SLEEP_CYCLES = 1_000_000_000


def test_runs_on_the_handle_stream(handle: hipdnn.Handle, hip_plugin: Path) -> None:
    """The engine queues its kernel on the handle's stream, behind the work already there, and not on
    the legacy default stream.

    A long sleep is queued on the handle's (non-blocking) stream first. A probe on a third stream then
    copies the output after waiting for everything queued so far on the legacy default stream: it must
    still see the NaN poison, because the kernel sits behind the sleep. A launch on the legacy default
    stream would have raced the sleep and been seen by the probe, which the control with a default-stream
    handle shows. Only the handle's stream is synchronized before the result is read."""
    stream, probe = torch.cuda.Stream(), torch.cuda.Stream()
    default = torch.cuda.default_stream()
    assert default.cuda_stream == 0, "the probe needs torch's default stream to be the legacy default stream"
    b, hq, s, d = 1, 4, 512, 64
    g, t = sdpa_graph(HALF, [b, hq, s, d], [b, hq, s, d], "bhsd", causal=True, scale=0.125)
    gen = torch.Generator(device="cuda").manual_seed(1)
    q, k, v = (torch.randn(b, hq, s, d, generator=gen, device="cuda").half() for _ in range(3))
    want, _ = reference(q, k, v, 0.125, causal_tl=True, causal_br=False)

    def run(h: hipdnn.Handle) -> tuple[Any, Any]:
        """Sleep on the handle's stream, execute, probe after the legacy default stream; returns (probe, o)."""
        g.build(h)
        o = torch.full((b, hq, s, d), float("nan"), dtype=torch.float16, device="cuda")
        stats = torch.full((b, hq, s, 1), float("nan"), dtype=torch.float32, device="cuda")
        pack = {t["q"]: q, t["k"]: k, t["v"]: v, t["o"]: o, t["stats"]: stats}
        ws = workspace_for(g)
        g.execute(h, pack, ws)  # warm-up: the first launch may load modules
        torch.cuda.synchronize()
        o.fill_(float("nan"))
        torch.cuda.synchronize()
        with torch.cuda.stream(stream):
            torch.cuda._sleep(SLEEP_CYCLES)
        g.execute(h, pack, ws)
        probe.wait_stream(default)  # everything queued on the legacy default stream so far
        with torch.cuda.stream(probe):
            seen = o.clone()
        probe.synchronize()
        return seen, o

    h = hipdnn.Handle(
        plugin_paths=[hip_plugin], plugin_loading_mode=hipdnn.PluginLoadingMode.ABSOLUTE, stream=stream.cuda_stream
    )
    try:
        seen, o = run(h)
        assert torch.isnan(seen).all(), "the kernel ran before the handle stream's earlier work finished"
        stream.synchronize()  # this stream only
        assert not torch.isnan(o).any(), "the output was not written on the handle's stream"
        assert rel_err(o.float(), want) < TOL_O[HALF]
    finally:
        h.close()

    # Control: a handle on the legacy default stream launches there, the probe sees the result at once.
    h0 = hipdnn.Handle(plugin_paths=[hip_plugin], plugin_loading_mode=hipdnn.PluginLoadingMode.ABSOLUTE)
    try:
        seen, _ = run(h0)
        assert not torch.isnan(seen).any(), "the probe missed a launch on the legacy default stream"
        assert rel_err(seen.float(), want) < TOL_O[HALF]
    finally:
        stream.synchronize()
        h0.close()


# Engine 202 has six Hopper kernel variants, picked per launch from the shapes ("default") or forced by
# HIPDNN_HIP_202_KERNEL: the warp-specialized wgmma kernel ("ws": a producer warpgroup feeding
# mbarrier rings through the copy engine, consumer warpgroups taking turns: 3 at D = 64, 2 at
# D = 128; "ws_2wg": 2 at D = 64 too; "ws_cp": K and V by cp.async), the wgmma kernel without
# specialization ("wg"), the same without the softmax / P V overlap ("serial"), and the earlier
# mma.sync kernel ("mma").
# Lengths straddle the 64-row warpgroup and 128/192-row block / 128-key tile boundaries, and the
# K/V stage rotations (2-3 stages, several passes round the rings).
KERNEL_CASES = [
    # b, hq, hk, sq, skv, d, causal, bottom_right
    (1, 2, 2, 63, 63, 64, False, False),
    (1, 2, 2, 129, 129, 128, True, False),
    (2, 4, 2, 200, 640, 64, True, True),
    (1, 4, 4, 385, 385, 128, False, False),
    (1, 2, 1, 768, 768, 128, True, False),
    (1, 2, 2, 2049, 2049, 64, False, False),
    (1, 2, 2, 640, 130, 128, True, True),
    (1, 2, 2, 1500, 1500, 128, True, False),
    (1, 2, 1, 1100, 1100, 64, False, False),
]


@pytest.mark.parametrize("kernel", ["default", "ws", "ws_2wg", "ws_cp", "wg", "serial", "mma"])
@pytest.mark.parametrize("dtype", [BF16, HALF], ids=["bf16", "fp16"])
@pytest.mark.parametrize(("b", "hq", "hk", "sq", "skv", "d", "causal", "bottom_right"), KERNEL_CASES)
def test_tensor_core_kernel_variants(
    handle: hipdnn.Handle,
    monkeypatch: pytest.MonkeyPatch,
    kernel: str,
    dtype: hipdnn.DataType,
    b: int,
    hq: int,
    hk: int,
    sq: int,
    skv: int,
    d: int,
    causal: bool,
    bottom_right: bool,
) -> None:
    skip_unless_here(handle, TENSOR_CORE)
    if kernel != "default":
        monkeypatch.setenv("HIPDNN_HIP_202_KERNEL", kernel)
    gen = torch.Generator(device="cuda").manual_seed(sq * 31 + skv * 7 + d)
    scale = 1.1 / math.sqrt(d)
    g, t = sdpa_graph(
        dtype,
        [b, hq, sq, d],
        [b, hk, skv, d],
        "bhsd",
        causal=causal,
        bottom_right=bottom_right,
        scale=scale,
        engine=TENSOR_CORE,
    )
    g.build(handle)
    run_case(
        handle,
        g,
        t,
        dtype,
        "bhsd",
        b,
        hq,
        hk,
        sq,
        skv,
        d,
        scale=scale,
        causal_tl=causal and not bottom_right,
        causal_br=causal and bottom_right,
        gen=gen,
    )


@pytest.mark.parametrize("kernel", ["ws", "ws_2wg", "ws_cp", "wg", "mma"])
@pytest.mark.parametrize("d", [64, 128])
def test_tensor_core_kernels_padding_and_scale(
    handle: hipdnn.Handle, monkeypatch: pytest.MonkeyPatch, kernel: str, d: int
) -> None:
    """Each Hopper kernel with a padding mask (keys past seq_len_kv, rows past seq_len_q), and with
    a negative scale (the launcher routes that to the mma.sync kernel)."""
    skip_unless_here(handle, TENSOR_CORE)
    monkeypatch.setenv("HIPDNN_HIP_202_KERNEL", kernel)
    b, hq, hk, s = 3, 4, 2, 700
    g, t = sdpa_graph(
        HALF,
        [b, hq, s, d],
        [b, hk, s, d],
        "bhsd",
        causal=True,
        bottom_right=True,
        padding=True,
        overridable=True,
        scale=0.1,
        engine=TENSOR_CORE,
    )
    g.build(handle)
    gen = torch.Generator(device="cuda").manual_seed(11 + d)
    run_case(
        handle,
        g,
        t,
        HALF,
        "bhsd",
        b,
        hq,
        hk,
        s,
        s,
        d,
        scale=0.1,
        causal_tl=False,
        causal_br=True,
        gen=gen,
        seq_q=[700, 1, 333],
        seq_kv=[650, 129, 700],
    )
    g2, t2 = sdpa_graph(BF16, [1, 2, 300, d], [1, 2, 300, d], "bhsd", scale=-0.05, engine=TENSOR_CORE)
    g2.build(handle)
    run_case(handle, g2, t2, BF16, "bhsd", 1, 2, 2, 300, 300, d, scale=-0.05, causal_tl=False, causal_br=False, gen=gen)


@pytest.mark.parametrize("kernel", ["default", "ws", "ws_2wg", "ws_cp", "wg", "mma"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("causal", [None, "br"])
def test_padding_never_reads_past_the_lengths(
    handle: hipdnn.Handle, monkeypatch: pytest.MonkeyPatch, kernel: str, d: int, layout: str, causal: str | None
) -> None:
    """NaN in every q row past seq_len_q and every k / v row past seq_len_kv: each Hopper kernel's
    output must match the reference of the valid rows. The copy-engine kernels load whole tiles
    (the tensor's rows, not the batch's), so this is what proves they clear the tail of V."""
    skip_unless_here(handle, TENSOR_CORE)
    if kernel != "default":
        monkeypatch.setenv("HIPDNN_HIP_202_KERNEL", kernel)
    b, hq, hk, s = 4, 4, 2, 517
    g, t = sdpa_graph(
        BF16,
        [b, hq, s, d],
        [b, hk, s, d],
        layout,
        causal=causal is not None,
        bottom_right=causal == "br",
        padding=True,
        scale=0.09,
        engine=TENSOR_CORE,
    )
    g.build(handle)
    gen = torch.Generator(device="cuda").manual_seed(5 + d)
    run_case(
        handle,
        g,
        t,
        BF16,
        layout,
        b,
        hq,
        hk,
        s,
        s,
        d,
        scale=0.09,
        causal_tl=False,
        causal_br=causal == "br",
        gen=gen,
        seq_q=[517, 1, 200, 130],
        seq_kv=[300, 517, 1, 129],
        nan_past_lengths=True,
    )


# Shapes for the warp-specialized kernel's schedule: odd and even counts of query blocks (128 rows
# at D = 128, 192 at D = 64), Sq > Skv and Sq < Skv, bottom-right rows that see no key, GQA, and odd
# counts of both blocks and heads (the launch's last unit is then a lone middle block).
SCHEDULE_CASES = [
    (1, 3, 1, 900, 900, 64, True, False),
    (3, 1, 1, 1100, 1500, 128, False, False),
    # b, hq, hk, sq, skv, d, causal, bottom_right
    (2, 4, 2, 1000, 1000, 64, True, False),
    (1, 2, 2, 1500, 700, 128, True, True),
    (3, 2, 1, 777, 1200, 64, False, False),
    (1, 4, 4, 1100, 1100, 128, True, False),
    (2, 2, 2, 2049, 333, 64, True, True),
]


@pytest.mark.parametrize("pairs", [0, 1, 2, 3, 7])
@pytest.mark.parametrize(("b", "hq", "hk", "sq", "skv", "d", "causal", "bottom_right"), SCHEDULE_CASES)
def test_warp_specialized_schedules(
    handle: hipdnn.Handle,
    monkeypatch: pytest.MonkeyPatch,
    pairs: int,
    b: int,
    hq: int,
    hk: int,
    sq: int,
    skv: int,
    d: int,
    causal: bool,
    bottom_right: bool,
) -> None:
    """The persistent kernel: each block of the grid walks units (pairs of query blocks, or the middle
    blocks of two heads) of different heads and batches back to back, strided by the grid
    (HIPDNN_HIP_202_PAIRS=p sizes the grid for about p units per block; 0: the default, one block per
    multiprocessor): K / V ring and Q buffers carried across items, the consumers' turns handed on
    across items, items with no visible key."""
    skip_unless_here(handle, TENSOR_CORE)
    monkeypatch.setenv("HIPDNN_HIP_202_KERNEL", "ws")
    if pairs:
        monkeypatch.setenv("HIPDNN_HIP_202_PAIRS", str(pairs))
    gen = torch.Generator(device="cuda").manual_seed(sq + skv + d + pairs)
    scale = 0.9 / math.sqrt(d)
    g, t = sdpa_graph(
        BF16,
        [b, hq, sq, d],
        [b, hk, skv, d],
        "bshd",
        causal=causal,
        bottom_right=bottom_right,
        scale=scale,
        engine=TENSOR_CORE,
    )
    g.build(handle)
    run_case(
        handle,
        g,
        t,
        BF16,
        "bshd",
        b,
        hq,
        hk,
        sq,
        skv,
        d,
        scale=scale,
        causal_tl=causal and not bottom_right,
        causal_br=causal and bottom_right,
        gen=gen,
    )


@pytest.mark.parametrize("pairs", [0, 2, 5])
@pytest.mark.parametrize("d", [64, 128])
def test_warp_specialized_schedules_with_padding(
    handle: hipdnn.Handle, monkeypatch: pytest.MonkeyPatch, pairs: int, d: int
) -> None:
    """Several items per block, of different batches, with per-batch lengths and NaN past them (Q rows of a
    later item land while an earlier one is still in its epilogue). Nine heads: at D = 128 (11 query
    blocks) the last unit is a lone middle block."""
    skip_unless_here(handle, TENSOR_CORE)
    if pairs:
        monkeypatch.setenv("HIPDNN_HIP_202_PAIRS", str(pairs))
    b, hq, hk, s = 3, 3, 1, 1400
    g, t = sdpa_graph(
        HALF,
        [b, hq, s, d],
        [b, hk, s, d],
        "bhsd",
        causal=True,
        bottom_right=True,
        padding=True,
        scale=0.1,
        engine=TENSOR_CORE,
    )
    g.build(handle)
    gen = torch.Generator(device="cuda").manual_seed(17 + d + pairs)
    run_case(
        handle,
        g,
        t,
        HALF,
        "bhsd",
        b,
        hq,
        hk,
        s,
        s,
        d,
        scale=0.1,
        causal_tl=False,
        causal_br=True,
        gen=gen,
        seq_q=[1400, 900, 2],
        seq_kv=[1200, 1400, 700],
        nan_past_lengths=True,
    )
