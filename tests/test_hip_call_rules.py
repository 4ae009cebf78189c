"""The GPU engine's per-call rules (engines/hip/src/sdpa_call_rules.h), checked on the host with no GPU.

The header is plain C++: what every kernel of engines 201 and 202 assumes of a call (head dims up to 128,
bases aligned to their elements, written tensors whose elements have distinct addresses, and the 16-byte
row path of the tensor-core kernels). The engine applies these rules to the declared graph when it plans
and to every call's effective shapes and pointers before it launches anything; here a small g++ driver
reads cases on stdin and prints what the header decides, and hypothesis draws the layouts. The plugin
itself needs nvcc or HIP's clang to build; this part needs only g++.
"""

from __future__ import annotations

import itertools
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
HEADER_DIR = ROOT / "engines" / "hip" / "src"

DRIVER = r"""
#include "sdpa_call_rules.h"
#include <cstdio>
#include <iostream>
#include <string>

// One case a line, one answer a line:
//   head D any|mult8                        -> the rule's text, or "ok"
//   overlaps d0 d1 d2 d3 s0 s1 s2 s3        -> 0 / 1
//   tensor ADDR ELEM WRITTEN d0..d3 s0..s3  -> tensor_rules of that one tensor, or "ok"
//   vec16 SB SH SS SD ADDR                  -> 0 / 1
int main()
{
    std::string op;
    while(std::cin >> op)
    {
        if(op == "head")
        {
            long long d;
            std::string kind;
            std::cin >> d >> kind;
            const std::string why = hipdnn_hip::head_dim_rule(
                d, kind == "any" ? hipdnn_hip::HeadDims::Any : hipdnn_hip::HeadDims::Multiple8);
            std::printf("%s\n", why.empty() ? "ok" : why.c_str());
        }
        else if(op == "overlaps")
        {
            int64_t d[4], s[4];
            for(auto& x : d)
                std::cin >> x;
            for(auto& x : s)
                std::cin >> x;
            std::printf("%d\n", hipdnn_hip::layout_overlaps(d, s) ? 1 : 0);
        }
        else if(op == "tensor")
        {
            hipdnn_hip::RuleTensor t;
            t.name = "o";
            unsigned long long addr;
            int written;
            std::cin >> addr >> t.elem_bytes >> written;
            t.addr = static_cast<uintptr_t>(addr);
            t.written = written != 0;
            for(auto& x : t.d)
                std::cin >> x;
            for(auto& x : t.s)
                std::cin >> x;
            const std::string why = hipdnn_hip::tensor_rules(&t, 1);
            std::printf("%s\n", why.empty() ? "ok" : why.c_str());
        }
        else if(op == "vec16")
        {
            long long sb, sh, ss, sd;
            unsigned long long addr;
            std::cin >> sb >> sh >> ss >> sd >> addr;
            std::printf("%d\n", hipdnn_hip::rows_vec16(sb, sh, ss, sd, reinterpret_cast<const void*>(addr)) ? 1 : 0);
        }
        else
            return 2;
        std::fflush(stdout);
    }
    return 0;
}
"""


class Driver:
    """The compiled driver, kept running: one line in, one line out."""

    def __init__(self, exe: Path) -> None:
        self.proc = subprocess.Popen([str(exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(self, line: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        assert self.proc.wait(timeout=30) == 0


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Driver]:
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    work = tmp_path_factory.mktemp("call_rules")
    src, exe = work / "driver.cpp", work / "driver"
    src.write_text(DRIVER)
    subprocess.run(
        [cxx, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", f"-I{HEADER_DIR}", str(src), "-o", str(exe)],
        check=True,
    )
    d = Driver(exe)
    yield d
    d.close()


def test_head_dims_up_to_128_are_served(driver: Driver) -> None:
    """The portable kernels (engine 201, and every call) take any head dim from 1 to 128; engine 202
    plans for multiples of 8 up to 128 (16-byte rows). 0, negatives and anything above 128 (no kernel
    is compiled there) are refused with the range."""
    for d in [*range(1, 140), 192, 256, 0, -8]:
        any_answer = driver.ask(f"head {d} any")
        mult8_answer = driver.ask(f"head {d} mult8")
        if 1 <= d <= 128:
            assert any_answer == "ok", d
        else:
            assert any_answer == f"head dim {d} not served (1-128)"
        if 1 <= d <= 128 and d % 8 == 0:
            assert mult8_answer == "ok", d
        else:
            assert mult8_answer == f"head dim {d} not served (8-128 in steps of 8)"


def collides(dims: list[int], strides: list[int]) -> bool:
    """Brute force: two distinct indices at one offset."""
    seen: set[int] = set()
    for idx in itertools.product(*(range(n) for n in dims)):
        off = sum(i * s for i, s in zip(idx, strides))
        if off in seen:
            return True
        seen.add(off)
    return False


def overlaps(driver: Driver, dims: list[int], strides: list[int]) -> bool:
    return driver.ask("overlaps " + " ".join(map(str, dims + strides))) == "1"


def padded(dims: list[int], outer_first: list[int], gaps: list[int]) -> list[int]:
    """Strides of [B, H, S, D] laid out with axes in ``outer_first`` order, each axis stepping past the
    ones inside it by ``gaps[axis]`` extra elements (a padded, permuted layout: never overlapping)."""
    strides = [0] * 4
    span = 1
    for ax in reversed(outer_first):
        strides[ax] = span + gaps[ax]
        span = strides[ax] * dims[ax]
    return strides


AXIS_ORDERS = list(itertools.permutations(range(4)))


@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    dims=st.lists(st.integers(1, 5), min_size=4, max_size=4),
    order=st.sampled_from(AXIS_ORDERS),
    gaps=st.lists(st.sampled_from([0, 0, 0, 1, 3, 8]), min_size=4, max_size=4),
)
def test_padded_and_permuted_layouts_never_overlap(
    driver: Driver, dims: list[int], order: tuple[int, ...], gaps: list[int]
) -> None:
    strides = padded(dims, list(order), gaps)
    assert not collides(dims, strides)
    assert not overlaps(driver, dims, strides), (dims, strides)


@settings(max_examples=600, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    dims=st.lists(st.integers(1, 4), min_size=4, max_size=4),
    strides=st.lists(st.integers(1, 40), min_size=4, max_size=4),
)
def test_a_collision_is_never_missed(driver: Driver, dims: list[int], strides: list[int]) -> None:
    """The test is sufficient, not exact: it may refuse an interleaved layout that never collides,
    but every layout in which two elements share an address is reported."""
    if collides(dims, strides):
        assert overlaps(driver, dims, strides), (dims, strides)


@pytest.mark.parametrize(
    ("dims", "strides", "overlap"),
    [
        ([2, 4, 37, 64], [4 * 37 * 64, 37 * 64, 64, 1], False),  # BHSD
        ([2, 4, 37, 64], [37 * 4 * 64, 64, 4 * 64, 1], False),  # BSHD
        ([2, 4, 37, 64], [37 * 3 * 4 * 64, 64, 3 * 4 * 64, 1], False),  # one of packed [B, S, 3, H, D]
        ([2, 4, 37, 64], [4 * 40 * 72, 40 * 72, 72, 1], False),  # padded rows and lengths
        ([2, 4, 1, 64], [4 * 64, 64, 7, 1], False),  # Sq = 1: that axis's stride places nothing
        ([1, 1, 5, 1], [3, 9, 1, 1000], False),  # stats-like [B, H, S, 1]
        ([2, 4, 37, 64], [4 * 37 * 64, 37 * 64, 32, 1], True),  # rows closer than their length
        ([2, 4, 37, 64], [4 * 37 * 64, 64, 64, 1], True),  # heads and rows on one stride
        ([2, 4, 37, 64], [1, 37 * 64, 64, 1], True),  # batch stride 1
    ],
)
def test_layout_examples(driver: Driver, dims: list[int], strides: list[int], overlap: bool) -> None:
    """The layouts a user brings, spelled out."""
    assert overlaps(driver, dims, strides) == overlap


def test_tensor_rules_name_the_tensor_and_the_rule(driver: Driver) -> None:
    bhsd = "1 2 8 64 1024 512 64 1"
    assert driver.ask(f"tensor 4096 2 1 {bhsd}") == "ok"
    assert driver.ask(f"tensor 4098 2 1 {bhsd}") == "ok"  # 2-byte elements: any even address
    assert driver.ask(f"tensor 4097 2 0 {bhsd}") == "o at address 0x1001 is not aligned to its 2-byte elements"
    assert driver.ask("tensor 4098 4 1 1 2 8 1 16 8 1 1") == "o at address 0x1002 is not aligned to its 4-byte elements"
    # an input may alias itself (a broadcast read); a written tensor may not
    assert driver.ask("tensor 4096 2 0 1 2 8 64 1024 512 32 1") == "ok"
    why = driver.ask("tensor 4096 2 1 1 2 8 64 1024 512 32 1")
    assert why == "o [1,2,8,64] with strides [1024,512,32,1] writes some element address twice (its strides overlap)"
    assert driver.ask("tensor 0 2 1 " + bhsd) == "ok"  # planning: no pointer yet


@pytest.mark.parametrize(
    ("strides", "addr", "vec16"),
    [
        ([4096, 512, 64, 1], 1 << 20, True),
        ([4096, 512, 64, 1], (1 << 20) + 2, False),  # base not 16-byte aligned
        ([4096, 512, 64, 1], (1 << 20) + 16, True),
        ([4096, 512, 72, 1], 1 << 20, True),  # padded rows, still whole 16-byte chunks
        ([4096, 512, 68, 1], 1 << 20, False),  # row stride of 136 bytes
        ([4100, 512, 64, 1], 1 << 20, False),  # batch stride not a multiple of 8 elements
        ([4096, 512, 128, 2], 1 << 20, False),  # head dim not contiguous
    ],
)
def test_the_tensor_core_row_path(driver: Driver, strides: list[int], addr: int, vec16: bool) -> None:
    """Calls outside it run engine 202's portable kernels (correct, slower), not a refusal."""
    assert driver.ask("vec16 " + " ".join(map(str, strides)) + f" {addr}") == ("1" if vec16 else "0")
