"""One SDPA plan built at S=2048 serves every sequence length 1..2048 on the CPU engine, each result
checked against the float64 reference (issue 3's acceptance run).

    python bench/serve_all_lengths.py [--s-max 2048] [--heads 2] [--head-dim 64]

Writes bench/results/serve_all_lengths.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

import hipdnn
from hipdnn import reference

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--s-max", type=int, default=2048)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--stride", type=int, default=1, help="serve every n-th length (1 = all)")
    args = parser.parse_args()
    b, h, d, s_max = 1, args.heads, args.head_dim, args.s_max
    handle = hipdnn.Handle()
    g = hipdnn.Graph(name="serve_all", io_data_type=hipdnn.DataType.FLOAT, is_override_shape_enabled=True)
    dims, strides = [b, h, s_max, d], [h * s_max * d, s_max * d, d, 1]
    q, k, v = (g.tensor(name=n, dim=dims, stride=strides, data_type=hipdnn.DataType.FLOAT) for n in "qkv")
    o, _ = g.sdpa(q, k, v, attn_scale=1 / np.sqrt(d), use_causal_mask=True)
    o.set_output(True)
    t0 = time.perf_counter()
    g.build(handle)
    build_s = time.perf_counter() - t0
    ws = np.empty(max(g.get_workspace_size(), 1), np.uint8)
    rng = np.random.default_rng(0)
    worst, worst_s, served, engine_s = 0.0, 0, 0, 0.0
    for s in range(1, s_max + 1, args.stride):
        shape, st = [b, h, s, d], [h * s * d, s * d, d, 1]
        qa, ka, va = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))
        oa = np.full(shape, np.nan, np.float32)
        t0 = time.perf_counter()
        g.execute(
            handle,
            {q: qa, k: ka, v: va, o: oa},
            ws,
            overrides={t: hipdnn.OverrideEntry(shape, st) for t in (q, k, v, o)},
        )
        engine_s += time.perf_counter() - t0
        want, _ = reference.sdpa(qa, ka, va, 1 / np.sqrt(d), causal=True)
        err = reference.relative_error(oa, want)
        served += 1
        if err > worst:
            worst, worst_s = err, s
        if s % 256 == 0:
            print(f"S={s:5d}: worst relative error so far {worst:.2e} (at S={worst_s})", flush=True)
    result = {
        "command": "python bench/serve_all_lengths.py " + " ".join(sys.argv[1:]),
        "plans_built": 1,
        "build_s": build_s,
        "lengths_served": served,
        "s_max": s_max,
        "heads": h,
        "head_dim": d,
        "causal": True,
        "worst_relative_error": worst,
        "worst_at_s": worst_s,
        "tolerance": 1e-5,
        "all_within_tolerance": worst < 1e-5,
        "execute_total_s": engine_s,
        "plan_cache": vars(handle.backend.plan_cache.stats()),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "serve_all_lengths.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0 if worst < 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
