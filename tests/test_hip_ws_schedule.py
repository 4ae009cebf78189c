"""The work schedule of engine 202's warp-specialized forward kernel (engines/hip/src/sdpa_ws_schedule.h),
checked on the host: the header is plain C++, compiled here with g++ into a small driver that prints
every unit's two items.

The kernel is persistent: block x of the grid walks units x, x + grid, ... So the schedule must cover every
query block of every head exactly once, and its units must carry equal work: with a unit of half the work,
the blocks whose stride lands on such units would idle (this was measured on the H200 before the middle
blocks of odd counts were paired across heads: D = 64, S = 2048 lost 8%).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEADER_DIR = ROOT / "engines" / "hip" / "src"

DRIVER = r"""
#include "sdpa_ws_schedule.h"
#include <cstdio>
#include <cstdlib>
#include <string>

// Mode "div": the multiply-and-shift division against '/', for divisors 1 .. 70000 and 2^31 - 1 at
// dividends 0 .. 2^31 - 1 (edges, each multiple of the divisor and its neighbours, a random sample).
static int check_divisor()
{
    unsigned long long x = 88172645463325252ull; // xorshift
    long long bad = 0;
    for(uint32_t d = 1; d <= 70001; ++d)
    {
        const uint32_t dd = d == 70001 ? 0x7fffffffu : d;
        const hipdnn_hip::WsDivisor div(dd);
        for(int i = 0; i < 64; ++i)
        {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            uint32_t n = static_cast<uint32_t>(x) & 0x7fffffffu;
            if(i < 8)
                n = i < 4 ? static_cast<uint32_t>(i) : 0x7fffffffu - static_cast<uint32_t>(i - 4);
            else if(i < 40)
            {
                const uint64_t m = (uint64_t(n) / dd) * dd + static_cast<uint64_t>(i % 3) - 1; // a multiple, +-1
                n = static_cast<uint32_t>(m > 0x7fffffffu ? 0x7fffffffu : m);
            }
            if(div.div(n) != n / dd)
            {
                if(bad++ < 5)
                    std::printf("wrong: %u / %u = %u, not %u\n", n, dd, div.div(n), n / dd);
            }
        }
    }
    std::printf("divisor mismatches %lld\n", bad);
    return bad == 0 ? 0 : 1;
}

int main(int argc, char** argv)
{
    if(argc == 2 && std::string(argv[1]) == "div")
        return check_divisor();
    if(argc != 3)
        return 2;
    hipdnn_hip::WsSchedule sc;
    if(!hipdnn_hip::ws_make_schedule(std::atoi(argv[1]), 1, std::atoi(argv[2]), 1, sc))
        return 3;
    std::printf("%d\n", sc.units);
    for(int u = 0; u < sc.units; ++u)
        for(int second = 0; second < 2; ++second)
        {
            int bh = -1, qblock = -1;
            const bool real = hipdnn_hip::ws_unit_item(sc, u, second, bh, qblock);
            std::printf("%d %d %d %d %d\n", u, second, real ? 1 : 0, bh, qblock);
        }
    return 0;
}
"""


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ not installed")
    out = tmp_path_factory.mktemp("ws_schedule")
    src = out / "driver.cpp"
    src.write_text(DRIVER)
    exe = out / "driver"
    cmd = [gxx, "-std=c++17", "-Wall", "-Wextra", "-Werror", "-O1", f"-I{HEADER_DIR}", str(src), "-o", str(exe)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return exe


def schedule(driver: Path, nqb: int, heads: int) -> tuple[int, list[tuple[int, int, bool, int, int]]]:
    out = subprocess.run([str(driver), str(nqb), str(heads)], capture_output=True, text=True, check=True).stdout
    lines = out.split("\n")
    rows = [tuple(int(x) for x in line.split()) for line in lines[1:] if line]
    return int(lines[0]), [(u, second, bool(real), bh, qb) for u, second, real, bh, qb in rows]


@pytest.mark.parametrize("nqb", [0, 1, 2, 3, 4, 5, 11, 16, 85, 128])
@pytest.mark.parametrize("heads", [1, 2, 3, 7, 16, 33])
def test_every_query_block_once_and_units_of_equal_work(driver: Path, nqb: int, heads: int) -> None:
    units, rows = schedule(driver, nqb, heads)
    seen: dict[tuple[int, int], int] = {}
    work_per_unit: dict[int, int] = {}
    items_per_unit: dict[int, int] = {}
    for u, _, real, bh, qb in rows:
        if not real:
            continue
        assert 0 <= bh < heads and 0 <= qb < nqb, (u, bh, qb)
        seen[(bh, qb)] = seen.get((bh, qb), 0) + 1
        # Under a causal mask a query block q sees (q + 1) blocks' worth of keys.
        work_per_unit[u] = work_per_unit.get(u, 0) + qb + 1
        items_per_unit[u] = items_per_unit.get(u, 0) + 1
    assert seen == {(bh, qb): 1 for bh in range(heads) for qb in range(nqb)}
    assert len(items_per_unit) == units
    # Every unit is two items with nqb + 1 blocks of causal work, except one half unit when both the
    # block count and the head count are odd.
    half = [u for u, n in items_per_unit.items() if n != 2]
    assert len(half) == (1 if nqb % 2 == 1 and heads % 2 == 1 else 0)
    # The kernel counts on the half unit being the launch's last, its void item the second: a block walks
    # its items without a branch on voids (sched.last_half / last_owner drop that one item).
    assert half in ([], [units - 1])
    assert [(u, second) for u, second, real, _, _ in rows if not real] == [(u, 1) for u in half]
    for u, w in work_per_unit.items():
        if u not in half:
            assert w == nqb + 1, (u, w)


def test_division_by_multiply_and_shift(driver: Path) -> None:
    """The kernel divides by launch-fixed values (units per head, heads per batch, the GQA group) as a
    multiply-high and a shift prepared on the host; it must agree with '/' for every dividend below 2^31."""
    proc = subprocess.run([str(driver), "div"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout
    assert "mismatches 0" in proc.stdout


@pytest.mark.parametrize(("nqb", "heads"), [(11, 256), (16, 256), (3, 1024), (85, 16)])
def test_units_running_at_once_are_neighbours(driver: Path, nqb: int, heads: int) -> None:
    """Blocks x = 0 .. 131 of a grid of 132 start on units 0 .. 131 together, then 132 .. 263, ...: those
    units belong to a few neighbouring heads (their K and V stay in the L2), at most the heads that 132
    units span plus the two at the edges."""
    units, rows = schedule(driver, nqb, heads)
    grid = 132
    head_of = {u: bh for u, second, real, bh, _ in rows if real and second == 0}
    units_per_head = max(1.0, nqb / 2)
    for start in range(0, units, grid):
        wave = {head_of[u] for u in range(start, min(units, start + grid))}
        assert max(wave) - min(wave) + 1 <= grid / units_per_head + 3, (start, sorted(wave))
