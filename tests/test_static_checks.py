"""ruff and mypy are part of the suite, so CI fails on lint or type errors (configured in pyproject.toml)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run_tool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=600)


@pytest.mark.skipif(
    shutil.which("ruff") is None and not (Path(sys.prefix) / "bin" / "ruff").exists(), reason="ruff not installed"
)
def test_ruff_lint_and_format() -> None:
    lint = run_tool("ruff", "check", "hipdnn", "tools", "bench", "tests", "engines/hip/tools")
    assert lint.returncode == 0, lint.stdout + lint.stderr
    fmt = run_tool("ruff", "format", "--check", "hipdnn", "tools", "bench", "tests", "engines/hip/tools")
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr


def test_mypy_strict() -> None:
    pytest.importorskip("mypy")
    result = run_tool("mypy")
    assert result.returncode == 0, result.stdout + result.stderr


def test_wgmma_header_is_what_its_generator_writes() -> None:
    """engines/hip/src/sdpa_wgmma.h is generated; a hand edit would be lost on the next run."""
    script = REPO / "engines" / "hip" / "tools" / "gen_wgmma.py"
    gen = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True, timeout=60)
    assert gen.returncode == 0, gen.stdout + gen.stderr


def test_hip_engine_rounds_products_through_the_portability_helper() -> None:
    """HIP's __fmul_rn is contracted into an FMA on AMD (tests/test_amd_build.py): the engine's
    kernels use hip_portability.h's hipdnn_fmul_rn instead."""
    src = REPO / "engines" / "hip" / "src"
    raw = [
        f"{p.name}:{n}"
        for p in sorted(src.iterdir())
        if p.suffix in (".h", ".hip", ".cpp") and p.name != "hip_portability.h"
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if "__fmul_rn" in line
    ]
    assert not raw, raw


def test_cpu_engine_links_wider_isa_files_last() -> None:
    """engines/cpu/CMakeLists.txt lists the files built for wider ISAs after every baseline file,
    narrowest first: the linker keeps the first copy of an inline function several objects emit,
    which must be one every CPU that can call it runs."""
    text = (REPO / "engines" / "cpu" / "CMakeLists.txt").read_text()
    listed = text[text.index("add_library(hipdnn_cpu_engine SHARED") :]
    sources = re.findall(r"src/(\w+)\.cpp", listed[: listed.index(")")])
    level = {"avx2": 1, "avx512": 2, "avx512bf16": 3, "amx": 4}
    levels = [next((v for k, v in level.items() if name.endswith("_" + k)), 0) for name in sources]
    assert levels == sorted(levels), list(zip(sources, levels))
    assert {s for s, lv in zip(sources, levels) if lv} == {
        "sdpa_fwd_avx2", "sdpa_bwd_avx2", "sdpa_fwd_avx512", "sdpa_bwd_avx512", "sdpa_fwd_avx512bf16",
        "sdpa_bwd_avx512bf16", "sdpa_fwd_amx", "sdpa_bwd_amx",
    }  # fmt: skip
