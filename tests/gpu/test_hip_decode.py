"""Engine 202's decode path (split-KV attention with grouped-query packing), through the public API.

Calls whose effective query length is at most 16 take it, from one plan built at a maximum shape and
served through overrides. Every case is checked against the float32 reference on the device, with
NaN-poisoned, guard-banded outputs and the stats (log-sum-exp) compared too: every SDPA option the
prefill path serves (scale, both causal alignments, GQA/MQA, stats, BHSD/BSHD, bf16/fp16, D = 64 and
128), odd and unit KV lengths, lengths that are not a multiple of a split's chunk, and ragged batches
through the padding mask. The split count varies with the call (batch x KV heads against the
device), so small batches exercise the split-and-merge kernels and large ones the direct write."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA/HIP device visible to torch", allow_module_level=True)

import hipdnn  # noqa: E402
from tests.gpu.hip_support import TENSOR_CORE, sdpa_graph  # noqa: E402

if torch.cuda.get_device_capability() != (9, 0):
    pytest.skip("engine 202 (and its decode path) runs on compute capability 9.0 only", allow_module_level=True)

from tests.gpu.test_hip_engine import BF16, HALF, run_case  # noqa: E402


@pytest.fixture(scope="module")
def handle(hip_plugin: Path) -> Iterator[hipdnn.Handle]:
    h = hipdnn.Handle(plugin_paths=[hip_plugin], plugin_loading_mode=hipdnn.PluginLoadingMode.ABSOLUTE)
    yield h
    h.close()


MASKS = {"none": (False, False), "tl": (True, False), "br": (False, True)}
HEADS = [(8, 2), (4, 4), (8, 1), (32, 8)]  # GQA, MHA, MQA, the serving shape's grouping
# (batch, Sq, Skv) served by one plan built at B = 3, Sq = 16, Skv = 4097
CALLS = [(1, 1, 1), (2, 1, 37), (1, 3, 1000), (3, 16, 4097), (3, 4, 129), (1, 1, 4097), (2, 5, 65)]


@pytest.mark.parametrize("dtype", [BF16, HALF], ids=["bf16", "fp16"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize(("hq", "hk"), HEADS, ids=[f"{a}x{b}" for a, b in HEADS])
@pytest.mark.parametrize("mask", list(MASKS))
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_decode_one_plan_every_option(
    handle: hipdnn.Handle, dtype: hipdnn.DataType, d: int, hq: int, hk: int, mask: str, layout: str
) -> None:
    tl, br = MASKS[mask]
    scale = 0.9 / math.sqrt(d)
    g, t = sdpa_graph(
        dtype,
        [3, hq, 16, d],
        [3, hk, 4097, d],
        layout,
        causal=tl or br,
        bottom_right=br,
        overridable=True,
        scale=scale,
        engine=TENSOR_CORE,
    )
    g.build(handle)
    assert g.get_engine_id() == TENSOR_CORE
    # scratch for the splits; a top-left mask lets a short query see only its first keys: nothing to split
    assert (g.get_workspace_size() > 0) == (mask != "tl")
    gen = torch.Generator(device="cuda").manual_seed(d * 31 + hq * 7 + hk)
    for b, sq, skv in CALLS:
        run_case(
            handle, g, t, dtype, layout, b, hq, hk, sq, skv, d,
            scale=scale, causal_tl=tl, causal_br=br, gen=gen, override=True,
        )  # fmt: skip


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("sq", [1, 4])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal_br"])
def test_ragged_batch(handle: hipdnn.Handle, d: int, sq: int, causal: bool) -> None:
    """Per-sequence cache lengths 1, 17, 4095 and 16384 in one batch, through the padding mask."""
    hq, hk, s_max = 8, 2, 16384
    g, t = sdpa_graph(
        BF16,
        [4, hq, 16, d],
        [4, hk, s_max, d],
        "bshd",
        causal=causal,
        bottom_right=True,
        padding=True,
        overridable=True,
        scale=0.125,
        engine=TENSOR_CORE,
    )
    g.build(handle)
    gen = torch.Generator(device="cuda").manual_seed(d + sq)
    run_case(
        handle, g, t, BF16, "bshd", 4, hq, hk, sq, s_max, d,
        scale=0.125, causal_tl=False, causal_br=causal, gen=gen, override=True,
        seq_q=[sq, max(sq - 1, 1), sq, 1], seq_kv=[1, 17, 4095, 16384],
    )  # fmt: skip


@pytest.mark.parametrize(("b", "hk"), [(1, 1), (2, 8), (40, 8), (64, 16)])
def test_split_counts(handle: hipdnn.Handle, b: int, hk: int) -> None:
    """From many splits (one KV head, one sequence) to none (batch x heads filling the device)."""
    hq, d, skv = hk * 4, 128, 3001
    g, t = sdpa_graph(
        BF16, [b, hq, 1, d], [b, hk, skv, d], "bhsd",
        causal=True, bottom_right=True, overridable=True, scale=0.1, engine=TENSOR_CORE,
    )  # fmt: skip
    g.build(handle)
    gen = torch.Generator(device="cuda").manual_seed(b * 100 + hk)
    run_case(
        handle, g, t, BF16, "bhsd", b, hq, hk, 1, skv, d,
        scale=0.1, causal_tl=False, causal_br=True, gen=gen, override=True,
    )  # fmt: skip


def test_negative_scale_and_decode_switch(handle: hipdnn.Handle, monkeypatch: pytest.MonkeyPatch) -> None:
    """A negative scale (no folded-scale shortcut here), and HIPDNN_HIP_DECODE=0 giving the same answer
    through the prefill kernels."""
    g, t = sdpa_graph(
        HALF, [2, 8, 4, 64], [2, 2, 777, 64], "bhsd",
        causal=False, overridable=True, scale=-0.2, engine=TENSOR_CORE,
    )  # fmt: skip
    g.build(handle)
    for flag in ("1", "0"):
        monkeypatch.setenv("HIPDNN_HIP_DECODE", flag)
        gen = torch.Generator(device="cuda").manual_seed(9)
        run_case(
            handle, g, t, HALF, "bhsd", 2, 8, 2, 4, 777, 64,
            scale=-0.2, causal_tl=False, causal_br=False, gen=gen, override=True,
        )  # fmt: skip
