"""The CPU engine's software prefetches are in the machine code.

GCC 12 deleted a nest of loops whose bodies were only ``_mm_prefetch`` calls as if it did nothing: the
rows kernel's K / V prefetch once compiled to no instruction at all, and benchmarks of it measured a
build without it (rfcs/0005, "Decode from DRAM"). The kernels now issue theirs through
``prefetch_l2`` (an ``asm volatile``); this reads the built engine's disassembly and checks that every
ISA build of the kernels that prefetch still holds ``prefetcht1`` instructions.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from hipdnn.plugins.discovery import builtin_engine_dirs

OBJDUMP = shutil.which("objdump")
ISA_NAMESPACES = ("sdpa_base", "sdpa_avx2", "sdpa_avx512", "sdpa_avx512bf16", "sdpa_amx")


ROOT = Path(__file__).resolve().parents[2]


def _engine() -> Path:
    """The CPU engine with its symbols: the build tree's (an editable install's), newest first; the
    installed copy is stripped of all but the plugin entry points."""
    built = sorted(ROOT.glob("build/*/engines/cpu/libhipdnn_cpu_engine.so"), key=lambda p: p.stat().st_mtime)
    if built:
        return built[-1]
    for d in builtin_engine_dirs():
        lib = d / "libhipdnn_cpu_engine.so"
        if lib.is_file():
            return lib
    pytest.skip("no built CPU engine")


@pytest.fixture(scope="module")
def prefetches_by_function() -> dict[str, int]:
    """Demangled function name -> prefetcht1 instructions in its body."""
    if OBJDUMP is None:
        pytest.skip("objdump (binutils) not installed")
    out = subprocess.run(
        [OBJDUMP, "-d", "-C", "--no-show-raw-insn", str(_engine())], capture_output=True, text=True, check=True
    ).stdout
    counts: dict[str, int] = {}
    current = ""
    for line in out.splitlines():
        head = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
        if head:
            current = head.group(1)
            counts.setdefault(current, 0)
        elif "prefetcht1" in line and current:
            counts[current] += 1
    if not any("run_rows_item" in name for name in counts):
        pytest.skip(f"{_engine()} is stripped of its kernels' symbols")
    return counts


def _functions(counts: dict[str, int], pattern: str) -> dict[str, int]:
    return {name: n for name, n in counts.items() if re.search(pattern, name)}


@pytest.mark.parametrize("ns", ISA_NAMESPACES)
def test_rows_kernel_prefetches_k_and_v(prefetches_by_function: dict[str, int], ns: str) -> None:
    found = _functions(prefetches_by_function, rf"hipdnn_cpu::{ns}::run_rows_item\(")
    if not found:
        pytest.skip(f"{ns} not built into this engine")
    # K and V rows (prefetch_kv_rows' two loops), inlined or in an outlined copy of their own
    outlined = _functions(prefetches_by_function, rf"hipdnn_cpu::{ns}::.*prefetch_(kv_rows|l2)")
    assert sum(found.values()) + sum(outlined.values()) >= 2, (found, outlined)


@pytest.mark.parametrize("ns", ("sdpa_base", "sdpa_avx2", "sdpa_avx512", "sdpa_amx"))
def test_fp32_panel_kernel_prefetches_the_next_tile(prefetches_by_function: dict[str, int], ns: str) -> None:
    found = _functions(prefetches_by_function, rf"hipdnn_cpu::{ns}::.*panel_item<\d, false>\(")
    if not found:
        pytest.skip(f"{ns} not built into this engine")
    # the next key tile's K and V rows, after each panel's P V (sdpa_fwd.inl)
    assert all(n >= 2 for n in found.values()), found
