"""A/B of two CPU engine builds on the SDPA forward, in one process: each build is loaded from its own
directory (``Handle(plugin_paths=[dir], plugin_loading_mode=ABSOLUTE)``), the same fp32 graph is
built on both, and their calls alternate, back to back ("hot") and after a 0.15 s sleep ("cold"), best
of the rounds. The outputs must be equal bit for bit (a change meant to move time, not values).

    python bench/cpu_sdpa_ab.py OLD_DIR NEW_DIR [--cases 2048x128,2048x128c,512x128] [--rounds 12]

A case is SxD, with a trailing "c" for causal (B = 1, H = 8). Each directory holds a
libhipdnn_cpu_engine.so (e.g. a copy of build/.../engines/cpu/ from an older commit); an engine
copied out of site-packages needs scipy-openblas32's lib directory on LD_LIBRARY_PATH. Prints one JSON
line per case and writes them all to --out (bench/results/cpu_sdpa_ab.json) with the command.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import hipdnn


def case_rows(dirs: dict[str, Path], s: int, d: int, causal: bool, rounds: int) -> dict[str, Any]:
    f32 = hipdnn.DataType.FLOAT
    heads = 8
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, heads, s, d)).astype(np.float32) for _ in range(3))
    runs = {}
    for name, path in dirs.items():
        h = hipdnn.Handle(plugin_paths=[path], plugin_loading_mode=hipdnn.PluginLoadingMode.ABSOLUTE)
        g = hipdnn.Graph(name="ab", io_data_type=f32)
        ts = [g.tensor(name=n, dim=[1, heads, s, d], data_type=f32) for n in "qkv"]
        o, _ = g.sdpa(*ts, attn_scale=1 / math.sqrt(d), use_causal_mask=causal)
        o.set_output(True)
        g.build(h)
        out = np.full((1, heads, s, d), np.nan, np.float32)
        ws = np.empty(max(1, g.get_workspace_size()), np.uint8)
        runs[name] = (h, g, {ts[0]: q, ts[1]: k, ts[2]: v, o: out}, ws, out)
    for h, g, pack, ws, _ in runs.values():
        g.execute(h, pack, ws)
    old, new = (r[4] for r in runs.values())
    if not np.array_equal(old, new):
        raise SystemExit(f"S={s} D={d} causal={causal}: the two builds' outputs differ")
    flops = 4 * heads * s * s * d * (0.5 if causal else 1.0)
    row: dict[str, Any] = {"S": s, "D": d, "causal": causal, "B": 1, "H": heads}
    for mode, settle in (("hot", 0.0), ("cold", 0.15)):
        best = dict.fromkeys(runs, math.inf)
        for _ in range(rounds):
            for name, (h, g, pack, ws, _) in runs.items():
                if settle:
                    time.sleep(settle)
                t = time.perf_counter()
                g.execute(h, pack, ws)
                best[name] = min(best[name], time.perf_counter() - t)
        for name, t in best.items():
            row[f"{mode}_{name}_ms"] = t * 1e3
            row[f"{mode}_{name}_gflops"] = flops / t / 1e9
        row[f"{mode}_new_over_old"] = best["new"] / best["old"]
    for h, *_ in runs.values():
        h.close()
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--cases", default="2048x128,2048x64,2048x128c,4096x128,1024x128,512x128")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--out", type=Path, default=Path("bench/results/cpu_sdpa_ab.json"))
    args = ap.parse_args()
    rows = []
    for spec in args.cases.split(","):
        causal = spec.endswith("c")
        s, d = (int(x) for x in spec.rstrip("c").split("x"))
        row = case_rows({"old": args.old, "new": args.new}, s, d, causal, args.rounds)
        print(json.dumps(row), flush=True)
        rows.append(row)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    result = {"command": "python " + " ".join(sys.argv), "date": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": rows}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
