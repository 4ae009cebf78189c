"""The HIP engine with dynamic tensors (plugin API 1.2.0) on a GPU, through the public API.

q, k, v are declared [-1, H, -1, D] with an axis order instead of strides; o and stats are inferred
dynamic. One plan, built once with no size at all, is executed at several batch sizes and lengths,
each call's shapes and strides given only by its overrides. Outputs are NaN-poisoned inside guarded
buffers and checked against the float32 torch reference, as in test_hip_engine.py. Skipped where
torch, a CUDA/HIP device or the built plugin is missing (test_hip_dynamic_abi.py covers the graph
rules without a GPU)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA/HIP device visible to torch", allow_module_level=True)

import hipdnn  # noqa: E402
from tests.gpu.hip_support import PORTABLE, TENSOR_CORE, dynamic_sdpa_graph  # noqa: E402
from tests.gpu.test_hip_engine import BF16, HALF, run_case, skip_unless_here  # noqa: E402

ENGINES = pytest.mark.parametrize("engine", [TENSOR_CORE, PORTABLE], ids=["tc202", "portable201"])


@pytest.fixture(scope="module")
def handle(hip_plugin: Path) -> Iterator[hipdnn.Handle]:
    h = hipdnn.Handle(plugin_paths=[hip_plugin], plugin_loading_mode=hipdnn.PluginLoadingMode.ABSOLUTE)
    if not any(p.name == "hipdnn_hip_engine" and p.api_version == "1.4.0" for p in h.loaded_plugins()):
        pytest.fail(f"the HIP engine at API 1.4.0 did not load: {h.loaded_plugins()} {h.skipped_plugins()}")
    yield h
    h.close()


@ENGINES
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_one_dynamic_plan_serves_every_batch_and_length(
    handle: hipdnn.Handle, engine: int, d: int, layout: str, causal: bool
) -> None:
    """[-1, 4, -1, D] q and [-1, 2, -1, D] k/v (GQA), bf16: (B, S) = (1, 1), (2, 37), (1, 1000), (1, 4097)."""
    skip_unless_here(handle, engine)
    hq, hk, scale = 4, 2, 0.9 / math.sqrt(d)
    g, t = dynamic_sdpa_graph(BF16, hq, hk, d, layout, causal=causal, scale=scale, engine=engine)
    g.build(handle)
    assert g.get_engine_id() == engine
    # engine 202 asks for scratch for its split-KV decode path, a general bound for dynamic shapes (none under
    # a top-left mask: a short query sees only its first keys)
    assert (g.get_workspace_size() > 0) == (engine == TENSOR_CORE and not causal)
    gen = torch.Generator(device="cuda").manual_seed(d + 17 * causal)
    for b, s in ((1, 1), (2, 37), (1, 1000), (1, 4097)):
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
            scale=scale,
            causal_tl=causal,
            causal_br=False,
            gen=gen,
            override=True,
        )


@ENGINES
def test_wildcard_heads_and_independent_lengths(handle: hipdnn.Handle, engine: int) -> None:
    """Heads left to the call too ([-1, -1, -1, 128], fp16, BSHD order), Sq != Skv, MQA and MHA."""
    skip_unless_here(handle, engine)
    dyn = hipdnn.DYNAMIC_DIM
    g, t = dynamic_sdpa_graph(HALF, dyn, dyn, 128, "bshd", scale=0.1, engine=engine)
    g.build(handle)
    gen = torch.Generator(device="cuda").manual_seed(23)
    for b, hq, hk, sq, skv in ((1, 8, 1, 1, 300), (2, 4, 4, 129, 64), (1, 2, 2, 300, 300)):
        run_case(
            handle,
            g,
            t,
            HALF,
            "bshd",
            b,
            hq,
            hk,
            sq,
            skv,
            128,
            scale=0.1,
            causal_tl=False,
            causal_br=False,
            gen=gen,
            override=True,
        )


def test_a_dynamic_graph_with_a_wildcard_head_dim_is_not_supported(handle: hipdnn.Handle) -> None:
    dyn = hipdnn.DYNAMIC_DIM
    g, _ = dynamic_sdpa_graph(BF16, 4, 4, dyn, "bhsd")
    with pytest.raises(hipdnn.HipdnnError) as info:
        g.build(handle)
    assert info.value.code == hipdnn.ErrorCode.GRAPH_NOT_SUPPORTED
