"""Score softcapping and ALiBi on the HIP engine (engines 201 and 202), forward, decode and backward.

The semantics are the CPU engine's (rfcs/0013-softcap.md, rfcs/0005-cpu-engine.md): the score
s = scale q.k becomes c tanh(s / c) (softcap c > 0), then the bias and ALiBi's slope(h) (j - i) are
added, then the masks apply; the backward multiplies dS by 1 - tanh(s / c)^2. The float64 references
are test_hip_bias_window.py's (``band_reference``, ``gradients``), which follow that order. Every
output is NaN-prefilled inside a guard-banded buffer; one plan per case is built at the maximum shape
and served at smaller ones through overrides. Caps are drawn so that they matter (c near the scores'
spread, where tanh bends) and so that they do not (c = 1e4: the scores must come out uncapped); ALiBi
runs with the other options (bias, windows, causal both ways, padding with empty sequences, GQA).
Skipped where torch, a CUDA/HIP device or the built plugin is missing."""

from __future__ import annotations

import math
import zlib
from dataclasses import replace
from typing import Any

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA/HIP device visible to torch", allow_module_level=True)

import hipdnn  # noqa: E402
from tests.gpu.hip_support import TENSOR_CORE, compact, gpu_graph, workspace_for  # noqa: E402
from tests.gpu.test_hip_bias_window import (  # noqa: E402
    BWD_SHAPES,
    ENGINES,
    PADDED,
    SHAPES,
    Opts,
    Shape,
    band_reference,
    bwd_graph,
    check_backward,
    check_forward,
    fwd_graph,
    handle,
    run_backward,
    run_forward,
    seed_of,
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

__all__ = ["handle"]  # the module-scoped fixture, shared

# (name, options): softcap alone at caps that bend most scores, barely any, or none; ALiBi alone and
# with every other option; both together.
OPTIONS = [
    ("cap_0.5", Opts(softcap=0.5)),
    ("cap_2_scale_0.4", Opts(softcap=2.0, scale=0.4)),
    ("cap_30_causal", Opts(softcap=30.0, causal=True)),
    ("cap_1e4", Opts(softcap=1e4)),
    ("cap_causal_br", Opts(softcap=0.8, causal=True, bottom_right=True)),
    ("cap_bias_window", Opts(softcap=1.5, bias="bh", left=40)),
    ("cap_negative_scale", Opts(softcap=0.7, scale=-0.1)),
    ("alibi", Opts(alibi=True)),
    ("alibi_causal", Opts(alibi=True, causal=True)),
    ("alibi_causal_br_window", Opts(alibi=True, causal=True, bottom_right=True, left=33)),
    ("alibi_bias_inf_rows", Opts(alibi=True, bias="1h", bias_dtype=BF16, inf_rows=True)),
    ("alibi_right_tl", Opts(alibi=True, right=20)),
    ("cap_alibi", Opts(softcap=1.0, alibi=True)),
    ("cap_alibi_bias_window_br", Opts(softcap=0.6, alibi=True, bias="b1", bias_dtype=HALF, left=50, bottom_right=True)),
]


def capped_scores_matter(o: Opts) -> None:
    """The caps below 5 change the answer: a reference without the cap differs from one with it (so a
    kernel that ignored the option could not pass). Larger ones (30, 1e4) bend few scores or none."""
    if o.softcap is None or o.softcap >= 5:
        return
    gen = torch.Generator(device="cuda").manual_seed(1)
    q, k, v = (random_view(d, compact(d), torch.float32, gen) for d in ([1, 4, 16, 64], [1, 2, 16, 64], [1, 2, 16, 64]))
    with_cap, _, _ = band_reference(q, k, v, None, o.scale, o, None, None)
    without, _, _ = band_reference(q, k, v, None, o.scale, replace(o, softcap=None), None, None)
    assert rel_err(without, with_cap) > 0.05


@ENGINES
@pytest.mark.parametrize("dtype", [BF16, HALF], ids=["bf16", "fp16"])
@pytest.mark.parametrize(("name", "opts"), OPTIONS, ids=[n for n, _ in OPTIONS])
def test_forward(handle: Any, engine: int, dtype: hipdnn.DataType, name: str, opts: Opts) -> None:
    skip_unless_here(handle, engine)
    capped_scores_matter(opts)
    check_forward(handle, engine, dtype, opts, SHAPES, seed_of(name))


@ENGINES
@pytest.mark.parametrize(
    ("name", "opts"),
    [o for o in OPTIONS if o[0] in ("cap_causal_br", "alibi_causal_br_window", "cap_alibi_bias_window_br")],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_forward_padded(handle: Any, engine: int, name: str, opts: Opts) -> None:
    """Per-batch lengths, empty sequences included."""
    check_forward(handle, engine, BF16, opts, PADDED, 31, padding=True)


DECODE_OPTIONS = [
    ("cap", Opts(softcap=0.7)),
    ("alibi_window_br", Opts(alibi=True, left=700, bottom_right=True)),
    ("cap_alibi_causal_br_bias", Opts(softcap=1.2, alibi=True, causal=True, bottom_right=True, bias="bh")),
]


@ENGINES
@pytest.mark.parametrize("dtype", [BF16, HALF], ids=["bf16", "fp16"])
@pytest.mark.parametrize(("name", "opts"), DECODE_OPTIONS, ids=[n for n, _ in DECODE_OPTIONS])
def test_decode_long_cache(handle: Any, engine: int, dtype: hipdnn.DataType, name: str, opts: Opts) -> None:
    """Sq 1-16 against a 4097-key cache: engine 202's split-KV decode path (each row's own query head
    gives its ALiBi slope under GQA packing)."""
    skip_unless_here(handle, engine)
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(name.encode()) % 10007 + 3)
    for padding in (False, True):
        g, t = fwd_graph(dtype, opts, engine, padding=padding, max_sq=16, max_skv=4097)
        g.build(handle)
        if padding:
            shapes = [Shape(3, 1, 4097, [1, 0, 1], [4097, 900, 17]), Shape(3, 16, 4000, [16, 3, 9], [3000, 4000, 1])]
        else:
            shapes = [Shape(3, 1, 4097), Shape(2, 16, 4097), Shape(1, 4, 1000), Shape(3, 7, 65), Shape(1, 1, 1)]
        for c in shapes:
            run_forward(handle, g, t, dtype, opts, c, gen)


BWD_OPTIONS = [
    o
    for o in OPTIONS
    if o[0] in ("cap_0.5", "cap_2_scale_0.4", "cap_causal_br", "cap_bias_window", "alibi", "alibi_causal_br_window",
                "alibi_bias_inf_rows", "cap_alibi_bias_window_br")
]  # fmt: skip


@ENGINES
@pytest.mark.parametrize("dtype", [BF16, HALF], ids=["bf16", "fp16"])
@pytest.mark.parametrize(("name", "opts"), BWD_OPTIONS, ids=[n for n, _ in BWD_OPTIONS])
def test_backward(handle: Any, engine: int, dtype: hipdnn.DataType, name: str, opts: Opts) -> None:
    check_backward(handle, engine, dtype, opts, BWD_SHAPES, seed_of(name, 1))


@ENGINES
@pytest.mark.parametrize("name", ["cap_causal_br", "alibi_causal_br_window", "cap_alibi_bias_window_br"])
def test_backward_padded(handle: Any, engine: int, name: str) -> None:
    check_backward(handle, engine, BF16, dict(OPTIONS)[name], PADDED, 29, padding=True)


HEAD_DIMS = [(8, 8), (40, 40), (72, 72), (128, 128), (128, 64), (32, 128)]


@ENGINES
@pytest.mark.parametrize(("d", "dv"), HEAD_DIMS, ids=[f"d{a}_dv{b}" for a, b in HEAD_DIMS])
def test_head_dims(handle: Any, engine: int, d: int, dv: int) -> None:
    """Prefill, decode and backward at padded head dims and d_qk != d_v, cap and ALiBi together."""
    skip_unless_here(handle, engine)
    opts = Opts(softcap=1.0, alibi=True, causal=True, bottom_right=True, d=d, dv=dv, scale=0.9 / math.sqrt(d))
    gen = torch.Generator(device="cuda").manual_seed(d * 1000 + dv)
    g, t = fwd_graph(BF16, opts, engine)
    g.build(handle)
    for b, sq, skv in [(3, 129, 300), (2, 1, 300), (3, 16, 257), (1, 37, 1)]:
        run_forward(handle, g, t, BF16, opts, Shape(b, sq, skv), gen)
    g, t = bwd_graph(HALF, opts, engine)
    g.build(handle)
    for b, sq, skv in [(3, 129, 300), (1, 1, 37)]:
        run_backward(handle, g, t, HALF, opts, Shape(b, sq, skv), gen)


@pytest.mark.parametrize("kernel", ["ws_2wg", "ws_cp", "wg", "serial", "mma"])
def test_forced_kernels_never_ignore_cap_or_alibi(handle: Any, kernel: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """HIPDNN_HIP_202_KERNEL forcing a family without the score transforms: the call is routed to one that
    has them (a negative scale to the portable kernel) and stays exact."""
    skip_unless_here(handle, TENSOR_CORE)
    monkeypatch.setenv("HIPDNN_HIP_202_KERNEL", kernel)
    for scale in (0.9 / 8, -0.1):
        for opts in (Opts(softcap=0.5, scale=scale), Opts(alibi=True, causal=True, scale=scale)):
            g, t = fwd_graph(BF16, opts, TENSOR_CORE)
            g.build(handle)
            gen = torch.Generator(device="cuda").manual_seed(3)
            for b, sq, skv in [(3, 129, 300), (2, 1, 300), (1, 37, 37)]:
                run_forward(handle, g, t, BF16, opts, Shape(b, sq, skv), gen)


@pytest.mark.parametrize("dtype", [BF16, HALF], ids=["bf16", "fp16"])
def test_long_sequence_cap_and_alibi(handle: Any, dtype: hipdnn.DataType) -> None:
    """Sq = Skv = 2000, D = 128, causal, cap and ALiBi on the tensor-core prefill kernel: many tiles per
    row, so the running maximum moves across tiles of capped scores."""
    skip_unless_here(handle, TENSOR_CORE)
    o = Opts(causal=True, softcap=1.0, alibi=True, scale=0.15, d=128, dv=128)
    g = gpu_graph("gpu_sdpa_cap_long", dtype, overridable=False, engine=TENSOR_CORE)
    qd = [1, 4, 2000, 128]
    kd = [1, 2, 2000, 128]
    t: dict[str, Any] = {n: g.tensor(name=n, dim=d, stride=compact(d), data_type=dtype) for n, d in
                         (("q", qd), ("k", kd), ("v", kd))}  # fmt: skip
    out, lse = g.sdpa(t["q"], t["k"], t["v"], attn_scale=o.scale, generate_stats=True, use_causal_mask=True,
                      softcap=o.softcap, use_alibi_mask=True)  # fmt: skip
    out.set_output(True).set_stride(compact(qd))
    assert lse is not None
    lse.set_output(True)
    g.build(handle)
    gen = torch.Generator(device="cuda").manual_seed(5)
    tdt = TORCH[dtype]
    q = random_view(qd, compact(qd), tdt, gen)
    k, v = (random_view(kd, compact(kd), tdt, gen) for _ in range(2))
    o_buf = Guarded(qd, compact(qd), tdt)
    st = Guarded([1, 4, 2000, 1], compact([1, 4, 2000, 1]), torch.float32)
    g.execute(
        handle,
        {t["q"]: value(q, dtype), t["k"]: value(k, dtype), t["v"]: value(v, dtype), out: value(o_buf.view, dtype),
         lse: st.view},
        workspace_for(g),
    )  # fmt: skip
    torch.cuda.synchronize()
    p_o, _, _ = band_reference(q, k, v, None, o.scale, o, None, None)
    assert not torch.isnan(o_buf.view.float()).any() and o_buf.guards_intact() and st.guards_intact()
    assert rel_err(o_buf.view.float(), p_o) < 1.6e-2


def test_ragged_graphs_are_refused_with_the_reason(handle: Any) -> None:
    """The engine declares API 1.4.0, so ragged (packed) graphs of 1.3.0 reach it: it refuses them, naming
    why, rather than reading packed rows as padded ones."""
    here = engines_here(handle)
    if not here:
        pytest.skip("no engine of the plugin runs on this device")
    for engine in here:
        g = gpu_graph("gpu_sdpa_ragged", BF16, overridable=True, engine=engine)
        dims = [2, 4, 64, 64]
        thd = [64 * 4 * 64, 64, 4 * 64, 1]
        off = g.tensor(name="offsets", dim=[3, 1, 1, 1], stride=[1, 1, 1, 1], data_type=hipdnn.DataType.INT32)
        q, k, v = (g.tensor(name=n, dim=dims, stride=thd, data_type=BF16) for n in ("q", "k", "v"))
        for x in (q, k, v):
            x.set_ragged_offset(off)
        i32 = hipdnn.DataType.INT32
        sq = g.tensor(name="seq_q", dim=[2, 1, 1, 1], stride=[1, 1, 1, 1], data_type=i32)
        skv = g.tensor(name="seq_kv", dim=[2, 1, 1, 1], stride=[1, 1, 1, 1], data_type=i32)
        o, _ = g.sdpa(q, k, v, attn_scale=0.125, use_padding_mask=True, seq_len_q=sq, seq_len_kv=skv)
        o.set_output(True).set_stride(thd).set_ragged_offset(off)
        with pytest.raises(hipdnn.HipdnnError, match="ragged"):
            g.build(handle)
