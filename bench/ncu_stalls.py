"""Summarize Nsight Compute's source page of one kernel launch: warp-stall samples by opcode, then the
instructions with the most samples and their main stall reasons.

Input: ``ncu -i REPORT --page source --print-source sass --csv > src.csv`` (see bench/run_gpu_stalls.sh,
which records the report). Output: text on stdout, as in bench/results/gpu_sdpa_stalls_*.txt.
"""

from __future__ import annotations

import argparse
import collections
import csv
from pathlib import Path


def number(x: str) -> float:
    try:
        return float(x.replace(",", ""))
    except ValueError:
        return 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("csv", type=Path, help="ncu --page source --print-source sass --csv output")
    ap.add_argument("--top", type=int, default=45, help="instructions to list")
    args = ap.parse_args()
    rows = list(csv.reader(args.csv.open(errors="replace")))
    head_at = next(i for i, r in enumerate(rows) if "Source" in r and "Address" in r)
    head, data = rows[head_at], rows[head_at + 1 :]
    src = head.index("Source")
    samples = head.index("Warp Stall Sampling (All Samples)")
    executed = head.index("Instructions Executed") if "Instructions Executed" in head else None
    stall_cols = [(i, c) for i, c in enumerate(head) if c.startswith("stall_")]
    data = [r for r in data if len(r) > samples]
    total = sum(number(r[samples]) for r in data) or 1.0
    print("total samples", total)
    by_op: collections.defaultdict[str, float] = collections.defaultdict(float)
    by_op_executed: collections.defaultdict[str, float] = collections.defaultdict(float)
    for r in data:
        words = [w for w in r[src].split() if not w.startswith("@")]
        op = (words[0] if words else "?").split(".")[0]
        by_op[op] += number(r[samples])
        if executed is not None:
            by_op_executed[op] += number(r[executed])
    for op, v in sorted(by_op.items(), key=lambda kv: -kv[1])[:25]:
        print(f"{op:12s} samples {100 * v / total:5.1f}%  executed {by_op_executed[op]:.3g}")
    print("--- top instructions")
    for r in sorted(data, key=lambda r: -number(r[samples]))[: args.top]:
        reasons = ",".join(
            f"{c.removeprefix('stall_')}={r[i]}" for i, c in stall_cols if number(r[i]) > 0.08 * number(r[samples])
        )
        print(f"{r[0]:>6} {100 * number(r[samples]) / total:5.2f}% {r[src][:70]:70s} {reasons[:160]}")


if __name__ == "__main__":
    main()
