"""The SDPA forward's fp32 panel kernel at each panel width of the AVX-512 builds.

``HIPDNN_CPU_SDPA_PANEL_VECTORS`` (3 or 4, read each time a plan is built) sets the widest panel, in
vectors of 16 queries: 4 (a 6-row x 4-vector micro kernel) by default on CPUs that issue two 512-bit FMAs
a cycle (Intel's AVX-512 cores, AMD's from Zen 5), 3 (8 x 3) on Zen 4. Either width, and the narrower
panels a block's last queries may take (3 or 2 vectors), must give the float64 reference's results and
the same bits where no band cuts the tiles: only which queries share a micro kernel changes, never the
order of any sum.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hipdnn
from tests.cpu.test_sdpa_isa import AMD, HAVE, cpuinfo_field, described_isas, tiny_sdpa, workspace_sizes
from tests.cpu.test_sdpa_modes import BASE, DT, Case, cases, run_case

pytestmark = pytest.mark.skipif("avx512" not in HAVE, reason="this CPU has no AVX-512 build")

ENV = "HIPDNN_CPU_SDPA_PANEL_VECTORS"
# Two 512-bit FMAs a cycle: every Intel AVX-512 core, AMD's from family 1Ah (26, Zen 5)
FAMILY = int(cpuinfo_field("cpu family") or 0)
DEFAULT = 4 if not AMD or FAMILY >= 26 else 3


class Handles:
    """Lazily built plans need the environment when they are built, so each run sets it again."""

    def __init__(self) -> None:
        self.by_width = {3: hipdnn.Handle(), 4: hipdnn.Handle()}

    def run(self, width: int, c: Case, seed: int) -> np.ndarray:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("HIPDNN_CPU_ISA", "avx512")
            mp.setenv(ENV, str(width))
            return run_case(self.by_width[width], c, seed)

    def close(self) -> None:
        for h in self.by_width.values():
            h.close()


@pytest.fixture(scope="module")
def handles() -> Iterator[Handles]:
    hs = Handles()
    yield hs
    hs.close()


def both_widths(hs: Handles, c: Case, seed: int) -> None:
    """Case c at 3- and 4-vector panels: each against float64 (run_case), and alike: bit for bit
    without a band. (Under a causal mask or a window, which keys of a tile a panel scores, and whether
    it takes the masked softmax, depend on its width, so a row's running max may rise in other steps.)"""
    o3 = hs.run(3, c, seed)
    o4 = hs.run(4, c, seed)
    if not c.causal and c.left is None and c.right is None:
        np.testing.assert_array_equal(o3, o4)
    else:
        # fp32 results a few ulps apart, which an fp16 / bf16 output may round one ulp of its own apart
        ulp = {DT.HALF: 2.0**-10, DT.BFLOAT16: 2.0**-7}.get(c.dt, 1e-6)
        np.testing.assert_allclose(o3, o4, rtol=0, atol=ulp * max(1.0, float(np.nanmax(np.abs(o3)))))


@pytest.mark.parametrize("vectors", [3, 4])
def test_description_names_the_width(
    vectors: int, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(ENV, f" {vectors}\n")  # blanks around the value are not part of it
    described = described_isas(caplog)
    assert described and all(f"sdpa panels of up to {vectors} vectors" in m for m in described), described


def test_default_width_follows_the_fma_pipes(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv(ENV, raising=False)
    described = described_isas(caplog)
    assert described and all(f"sdpa panels of up to {DEFAULT} vectors" in m for m in described), described


@pytest.mark.parametrize("value", ["2", "5", "four", "3.0", "34"])
def test_other_values_are_refused(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, value)
    h = hipdnn.Handle()
    try:
        with pytest.raises(hipdnn.HipdnnError) as e:
            tiny_sdpa().build(h)
        assert e.value.code == hipdnn.ErrorCode.GRAPH_NOT_SUPPORTED
        assert f"{ENV}='{value}' is not 3 or 4" in str(e.value)
    finally:
        h.close()


def test_workspace_does_not_depend_on_the_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scratch is sized for the widest panel of every build, whichever width the plan takes."""
    sizes = workspace_sizes(monkeypatch, ENV, ["3", "4"])
    assert len(sizes) == 1, sizes


# Blocks are 4 panels: 256 queries in 4-vector panels, 192 in 3-vector ones. The last block's panels
# narrow where that leaves clearly fewer lanes empty: 304 ends in 48 queries (one 3-vector panel),
# 272 in 16 (a 2-vector one), 416 in 160 (2-vector panels), 37 and 129 take 3-vector panels throughout.
LENGTHS = [17, 37, 63, 64, 65, 129, 191, 192, 193, 255, 256, 257, 272, 304, 416, 1000]


@pytest.mark.parametrize("sq", LENGTHS)
def test_lengths_and_tails(handles: Handles, sq: int) -> None:
    both_widths(handles, replace(BASE, hq=2, hk=1, sq=sq, skv=sq + 11, d=64, dv=48), seed=sq)


OPTIONS = {
    "causal_tl": replace(BASE, sq=304, skv=304, d=128, dv=128, causal=True),
    "causal_br_gqa": replace(BASE, hq=4, hk=2, sq=272, skv=400, d=64, dv=64, causal=True, bottom_right=True),
    "window": replace(BASE, sq=416, skv=416, d=37, dv=19, left=70, right=5),
    "padding_empty_rows": replace(
        BASE, b=3, sq=257, skv=129, d=64, dv=64, padding=True, seq_q=[257, 200, 0], seq_kv=[129, 37, 5]
    ),
    "bias_alibi": replace(BASE, hq=2, hk=1, sq=193, skv=129, d=64, dv=64, bias="full", alibi=True),
    "bias_queries_fastest": replace(BASE, sq=129, skv=200, d=32, dv=32, bias="kt"),
    "bshd": replace(BASE, b=2, sq=300, skv=129, d=128, dv=128, layout="bshd"),
    "padded_layout": replace(BASE, sq=255, skv=255, d=37, dv=37, layout="padded", causal=True),
    "dim_stride": replace(BASE, sq=129, skv=300, d=24, dv=24, layout="dstride"),
    "fp16_widened": replace(BASE, dt=DT.HALF, sq=304, skv=129, d=64, dv=64),
    "bf16_widened": replace(BASE, dt=DT.BFLOAT16, sq=272, skv=129, d=64, dv=64, causal=True),
    "next_tile_prefetch": replace(BASE, hq=2, hk=1, sq=200, skv=2100, d=64, dv=64, causal=True, bottom_right=True),
}


@pytest.mark.parametrize("name", list(OPTIONS))
def test_options(handles: Handles, name: str) -> None:
    both_widths(handles, OPTIONS[name], seed=len(name))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    c=cases(dts=(DT.FLOAT, DT.FLOAT, DT.HALF), sq=(17, 420), skv=(1, 300), ds=(8, 13, 32, 64, 128)),
    seed=st.integers(0, 2**16),
)
def test_generated(handles: Handles, c: Case, seed: int) -> None:
    both_widths(handles, c, seed)


@pytest.mark.skipif("amx" not in HAVE, reason="this CPU has no AMX build")
def test_amx_plans_fp32_rows_take_the_width() -> None:
    """An AMX plan's fp32 calls run the AVX-512 panel kernel at the plan's width."""
    c = replace(BASE, sq=304, skv=200, d=64, dv=64, causal=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HIPDNN_CPU_ISA", "amx")
        outs = []
        for vectors in (3, 4):
            mp.setenv(ENV, str(vectors))
            h = hipdnn.Handle()
            outs.append(run_case(h, c, seed=5))
            h.close()
    np.testing.assert_array_equal(outs[0], outs[1])
