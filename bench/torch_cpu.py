"""hipdnn.torch against torch's own SDPA on CPU tensors, as a model calls them: one attention call at
decode shapes (Sq = 1, BSHD views, fp32), the whole call's wall time per call (hipdnn.torch's host
work and the CPU engine's kernel), interleaved round by round with torch's, best round of each.
Writes JSON to --out (bench/results/torch_cpu.json).

    python bench/torch_cpu.py --out bench/results
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import hipdnn.torch as ht


def best_us(fns: dict[str, Callable[[], Any]], calls: int, rounds: int) -> dict[str, float]:
    best = dict.fromkeys(fns, float("inf"))
    for r in range(rounds + 1):  # round 0 warms up
        for name, fn in fns.items():
            time.sleep(0.05)  # every round starts from a settled machine
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            took = (time.perf_counter() - t0) / calls
            if r:
                best[name] = min(best[name], took)
    return {name: t * 1e6 for name, t in best.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--skvs", default="256,1024,4096")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args()
    torch.manual_seed(0)
    rows = []
    for hq, hk, d in ((8, 8, 64), (32, 8, 128)):
        for skv in (int(x) for x in args.skvs.split(",")):
            q = torch.randn(1, 1, hq, d).transpose(1, 2)
            k = torch.randn(1, skv, hk, d).transpose(1, 2)
            v = torch.randn(1, skv, hk, d).transpose(1, 2)
            gqa = hq != hk
            want = torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)
            got = ht.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)
            err = ((got - want).abs().max() / want.abs().max()).item()
            times = best_us(
                {
                    "hipdnn": lambda q=q, k=k, v=v, g=gqa: ht.scaled_dot_product_attention(q, k, v, enable_gqa=g),
                    "torch": lambda q=q, k=k, v=v, g=gqa: torch.nn.functional.scaled_dot_product_attention(
                        q, k, v, enable_gqa=g
                    ),
                },
                args.calls,
                args.rounds,
            )
            row = {"heads": hq, "kv_heads": hk, "head_dim": d, "sq": 1, "skv": skv, "rel_err_vs_torch": err}
            row.update({f"{name}_us": t for name, t in times.items()})
            row["hipdnn_over_torch"] = times["hipdnn"] / times["torch"]
            print(json.dumps(row), flush=True)
            rows.append(row)
    result = {
        "command": "python " + " ".join(sys.argv),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()},
        "torch": torch.__version__,
        "method": "wall time per call, best of interleaved rounds (a 50 ms settle before each), fp32, B = 1",
        "rows": rows,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "torch_cpu.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
