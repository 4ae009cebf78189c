"""Graph construction, validation, serialization and build time against graph size (issue #16).

    python bench/graph_construction.py [--quick] [--before FILE]

A pointwise chain x -> relu -> relu -> ... of n nodes, for n in 1k, 10k, 20k, 50k (--quick: 1k, 5k,
10k). Each stage is timed on its own, best of a few runs:

  construct    Graph() and n g.pointwise(...) calls
  validate     g.validate() (topology, per-node rules, shape inference, uids)
  serialize    g.serialize() (validates again, then packs the FlatBuffer)
  deserialize  Graph.deserialize(blob) (unpacks and validates)
  build        g.build(handle) on the CPU engine, plan cache cleared: validate, serialize, the
               backend's read of the buffer, the plugin's applicability, plan and context

Linear stages grow by about 5x from 10k to 50k nodes; the quadratic construction this replaced grew
by about 29x (1.5 s to 43 s, issue #16). The target: construct + validate of 50k nodes under 1 s on
the 2-core CI machine. ``--before FILE`` embeds another run's results (say, of the previous commit)
for comparison. Writes bench/results/graph_construction.json (graph_construction_quick.json with
--quick) and, when matplotlib is installed, a log-log plot beside it.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hipdnn

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
STAGES = ("construct", "validate", "serialize", "deserialize", "build")
TARGET_S = 1.0  # construct + validate at 50k nodes


def chain(n: int) -> hipdnn.Graph:
    g = hipdnn.Graph(name=f"chain{n}", io_data_type=hipdnn.DataType.FLOAT)
    t = g.tensor(name="x", dim=[1, 8], stride=[8, 1], data_type=hipdnn.DataType.FLOAT)
    for _ in range(n):
        t = g.pointwise(hipdnn.PointwiseMode.RELU_FWD, t)
    t.set_output(True)
    return g


def best_of(runs: int, fn: Callable[[], Any]) -> tuple[float, float]:
    """(wall, CPU) seconds of the best run. CPU time is this process's: on a shared machine the wall
    clock also counts the time other processes held the cores."""
    best = (float("inf"), float("inf"))
    for _ in range(runs):
        gc.collect()
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        best = min(best, (time.perf_counter() - w0, time.process_time() - c0))
    return best


def measure(n: int, handle: hipdnn.Handle | None, runs: int) -> tuple[dict[str, float], dict[str, float]]:
    """Wall and CPU seconds per stage for a chain of n nodes (best of ``runs``)."""
    # the cheap stages get more runs: the best of five is steadier on a shared machine
    stages: dict[str, tuple[float, float]] = {"construct": best_of(max(runs, 5), lambda: chain(n))}
    g = chain(n)
    stages["validate"] = best_of(max(runs, 5), g.validate)
    blob = g.serialize()
    stages["serialize"] = best_of(runs, g.serialize)
    stages["deserialize"] = best_of(runs, lambda: hipdnn.Graph.deserialize(blob))
    if handle is not None:

        def build() -> None:
            handle.backend.plan_cache.clear()  # every build is cold
            g.build(handle)

        stages["build"] = best_of(max(1, runs - 1), build)
    return {k: v[0] for k, v in stages.items()}, {k: v[1] for k, v in stages.items()}


def plot(result: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    ns = [row["n"] for row in result["rows"]]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for stage in STAGES:
        ys = [row["seconds"].get(stage) for row in result["rows"]]
        if all(y is not None for y in ys):
            ax.plot(ns, ys, "o-", label=stage)
    before = result.get("before")
    if before:
        bns = [row["n"] for row in before["rows"]]
        ax.plot(bns, [row["seconds"]["construct"] for row in before["rows"]], "x--", label="construct (before)")
    first = result["rows"][0]["seconds"]["validate"]
    ax.plot(ns, [first * n / ns[0] for n in ns], ":", color="gray", label="linear (validate at the first n, scaled)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("nodes in a pointwise chain")
    ax.set_ylabel("seconds (best of runs)")
    ax.set_title("Graph construction, validation, serialization, build")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return True


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="sizes 1k, 5k, 10k")
    parser.add_argument("--no-build", action="store_true", help="skip the build stage (no engine needed)")
    parser.add_argument("--before", type=Path, help="a previous run's JSON to embed for comparison")
    parser.add_argument("--out", type=Path, help="where to write the JSON (default: bench/results/)")
    args = parser.parse_args()
    sizes = [1000, 5000, 10000] if args.quick else [1000, 10000, 20000, 50000]
    handle = None if args.no_build else hipdnn.Handle()
    rows = []
    for n in sizes:
        seconds, cpu = measure(n, handle, runs=3 if n <= 10000 else 2)
        rows.append({"n": n, "seconds": seconds, "cpu_seconds": cpu})
        print(f"n={n:6d}  " + "  ".join(f"{k} {v:7.3f}s ({cpu[k]:.3f} cpu)" for k, v in seconds.items()), flush=True)
    by_n = {row["n"]: row["seconds"] for row in rows}
    small, large = (10000, 50000) if 50000 in by_n else (1000, 10000)
    cpu_by_n = {row["n"]: row["cpu_seconds"] for row in rows}
    growth = {stage: by_n[large][stage] / by_n[small][stage] for stage in by_n[large] if by_n[small].get(stage)}
    cpu_growth = {
        stage: cpu_by_n[large][stage] / cpu_by_n[small][stage]
        for stage in cpu_by_n[large]
        if cpu_by_n[small].get(stage)
    }
    for label, ratios in (("wall", growth), ("CPU", cpu_growth)):
        print(
            f"growth {large // 1000}k / {small // 1000}k, {label} (linear: {large / small:.0f}x): "
            + "  ".join(f"{k} {v:.1f}x" for k, v in ratios.items())
        )
    result: dict[str, Any] = {
        "command": "python bench/graph_construction.py" + (" --quick" if args.quick else ""),
        "graph": "pointwise chain x -> RELU_FWD -> ... (n nodes, n + 1 tensors of dims [1, 8]), CPU engine",
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_average_at_end": os.getloadavg(),
        },
        "rows": rows,
        "growth": {
            "from_n": small,
            "to_n": large,
            "linear_ratio": large / small,
            "ratios": growth,
            "cpu_ratios": cpu_growth,
        },
    }
    if 50000 in by_n:
        total = by_n[50000]["construct"] + by_n[50000]["validate"]
        cpu_50k = next(row["cpu_seconds"] for row in rows if row["n"] == 50000)
        total_cpu = cpu_50k["construct"] + cpu_50k["validate"]
        result["target"] = {
            "construct_plus_validate_50k_s": total,
            "construct_plus_validate_50k_cpu_s": total_cpu,
            "under_s": TARGET_S,
            "met": total < TARGET_S,
        }
        print(f"construct + validate at 50k: {total:.3f}s wall, {total_cpu:.3f}s CPU (target < {TARGET_S}s)")
    if args.before:
        result["before"] = json.loads(args.before.read_text())
    out = args.out or RESULTS / ("graph_construction_quick.json" if args.quick else "graph_construction.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    plotted = plot(result, out.with_suffix(".png"))
    print(f"wrote {out}" + (f" and {out.with_suffix('.png')}" if plotted else " (no plot: matplotlib not installed)"))
    if handle is not None:
        handle.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
