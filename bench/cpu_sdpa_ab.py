"""A/B of two CPU engine builds on the SDPA forward, in one process: each build is loaded from its own
directory (``Handle(plugin_paths=[dir], plugin_loading_mode=ABSOLUTE)``), the same fp32 graph is
built on both, and their calls alternate, back to back ("hot") and after a 0.15 s sleep ("cold"), best
of the rounds. The outputs must be equal bit for bit (a change meant to move time, not values).

    python bench/cpu_sdpa_ab.py OLD_DIR NEW_DIR [--cases 2048x128,2048x128c,512x128] [--rounds 12]
    python bench/cpu_sdpa_ab.py OLD_DIR NEW_DIR --cases d32x4096x64,d8x1024x128 --torch --out ...

A case is SxD, with a trailing "c" for causal (B = 1, H = 8), or dHxSKVxD for decode: one query row
per head (Sq = 1, B = 1) against SKV keys; fp32, or bf16 with --dtype bfloat16. A decode round times
--calls calls of each build back to back after the 0.15 s sleep (mean per call); the row keeps the
best and the median round, and with --torch also torch's scaled_dot_product_attention on the same
arrays, in the same rounds (the builds, then torch, rotated each round so none always runs after
another's threads). With --layers N each timed call goes to the next of N layers, each with its own
arrays, as a model's decode step reads every layer's K and V cache in turn. Each directory holds a
libhipdnn_cpu_engine.so (e.g. a copy of build/.../engines/cpu/ from an older commit); an engine
copied out of site-packages needs scipy-openblas32's lib directory on LD_LIBRARY_PATH. Prints one JSON
line per case and writes them all to --out (bench/results/cpu_sdpa_ab.json) with the command.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import hipdnn


def io_type(bf16: bool) -> Any:
    """The numpy type of the cases' q, k, v and o: ml_dtypes' bfloat16 (a test requirement) or fp32."""
    if not bf16:
        return np.float32
    import ml_dtypes

    return ml_dtypes.bfloat16


def case_rows(dirs: dict[str, Path], s: int, d: int, causal: bool, rounds: int, bf16: bool = False) -> dict[str, Any]:
    io = hipdnn.DataType.BFLOAT16 if bf16 else hipdnn.DataType.FLOAT
    heads = 8
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, heads, s, d)).astype(io_type(bf16)) for _ in range(3))
    runs = {}
    for name, path in dirs.items():
        h = hipdnn.Handle(plugin_paths=[path], plugin_loading_mode=hipdnn.PluginLoadingMode.ABSOLUTE)
        g = hipdnn.Graph(
            name="ab",
            io_data_type=io,
            intermediate_data_type=hipdnn.DataType.FLOAT,
            compute_data_type=hipdnn.DataType.FLOAT,
        )
        ts = [g.tensor(name=n, dim=[1, heads, s, d], data_type=io) for n in "qkv"]
        o, _ = g.sdpa(ts[0], ts[1], ts[2], attn_scale=1 / math.sqrt(d), use_causal_mask=causal)
        o.set_output(True).set_data_type(io)
        g.build(h)
        out = np.full((1, heads, s, d), np.nan, np.float32).astype(q.dtype)
        ws = np.empty(max(1, g.get_workspace_size()), np.uint8)
        runs[name] = (h, g, {ts[0]: q, ts[1]: k, ts[2]: v, o: out}, ws, out)
    for h, g, pack, ws, _ in runs.values():
        g.execute(h, pack, ws)
    old, new = (r[4] for r in runs.values())
    if not np.array_equal(old, new):
        raise SystemExit(f"S={s} D={d} causal={causal}: the two builds' outputs differ")
    flops = 4 * heads * s * s * d * (0.5 if causal else 1.0)
    row: dict[str, Any] = {"dtype": "bfloat16" if bf16 else "float32", "S": s, "D": d, "causal": causal, "B": 1}
    row["H"] = heads
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


def decode_rows(
    dirs: dict[str, Path],
    heads: int,
    skv: int,
    d: int,
    rounds: int,
    calls: int,
    torch: Any,
    bf16: bool = False,
    layers: int = 1,
) -> dict[str, Any]:
    io = hipdnn.DataType.BFLOAT16 if bf16 else hipdnn.DataType.FLOAT
    rng = np.random.default_rng(0)
    qkv = []  # per layer: its own q, K and V (a model's layers each read their own cache)
    for _ in range(layers):
        q = rng.standard_normal((1, heads, 1, d)).astype(io_type(bf16))
        k, v = (rng.standard_normal((1, heads, skv, d)).astype(io_type(bf16)) for _ in range(2))
        qkv.append((q, k, v))
    calls_of: dict[str, Any] = {}
    outs = []
    handles = []
    for name, path in dirs.items():
        h = hipdnn.Handle(plugin_paths=[path], plugin_loading_mode=hipdnn.PluginLoadingMode.ABSOLUTE)
        handles.append(h)
        g = hipdnn.Graph(
            name="ab_decode",
            io_data_type=io,
            intermediate_data_type=hipdnn.DataType.FLOAT,
            compute_data_type=hipdnn.DataType.FLOAT,
        )
        tq = g.tensor(name="q", dim=[1, heads, 1, d], data_type=io)
        tk, tv = (g.tensor(name=n, dim=[1, heads, skv, d], data_type=io) for n in "kv")
        o, _ = g.sdpa(tq, tk, tv, attn_scale=1 / math.sqrt(d))
        o.set_output(True).set_data_type(io)
        g.build(h)
        ws = np.empty(max(1, g.get_workspace_size()), np.uint8)
        bound = g.bind(h, [tq, tk, tv, o])
        layer_outs = []
        layer_ptrs = []
        for q, k, v in qkv:
            out = np.full((1, heads, 1, d), np.nan, np.float32).astype(io_type(bf16))
            layer_ptrs.append([x.ctypes.data for x in (q, k, v, out)])
            bound(layer_ptrs[-1], ws.ctypes.data)
            layer_outs.append(out)
        outs.append(layer_outs)

        # one call of every layer in turn (ws rides in the default too: the bound call takes raw
        # pointers, so the array must outlive it)
        def pass_of(bound: Any = bound, layer_ptrs: list[list[int]] = layer_ptrs, ws: np.ndarray = ws) -> None:
            for ptrs in layer_ptrs:
                bound(ptrs, ws.ctypes.data)

        calls_of[name] = pass_of
    if not all(np.array_equal(a, b) for a, b in zip(*outs)):
        raise SystemExit(f"decode H={heads} Skv={skv} D={d}: the two builds' outputs differ")
    if torch is not None:
        tensors = [
            [torch.from_numpy(x.view(np.int16)).view(torch.bfloat16) if bf16 else torch.from_numpy(x) for x in layer]
            for layer in qkv
        ]

        def torch_call() -> None:
            with torch.no_grad():
                for tq_, tk_, tv_ in tensors:
                    torch.nn.functional.scaled_dot_product_attention(tq_, tk_, tv_)

        calls_of["torch"] = torch_call
    times: dict[str, list[float]] = {name: [] for name in calls_of}
    order = list(calls_of)
    for rnd in range(rounds):
        for name in order[rnd % len(order) :] + order[: rnd % len(order)]:
            fn = calls_of[name]
            time.sleep(0.15)
            fn()
            t = time.perf_counter()
            for _ in range(calls):
                fn()
            times[name].append((time.perf_counter() - t) / (calls * layers))
    row: dict[str, Any] = {"decode": True, "dtype": "bfloat16" if bf16 else "float32", "B": 1, "H": heads}
    row.update({"Sq": 1, "Skv": skv, "D": d, "layers": layers, "calls": calls})
    for name, ts in times.items():
        row[f"{name}_best_us"] = min(ts) * 1e6
        row[f"{name}_median_us"] = float(np.median(ts)) * 1e6
        kv_bytes = 2 * heads * skv * d * (2 if bf16 else 4)  # K and V, read once a call
        row[f"{name}_gb_per_s"] = kv_bytes / float(np.median(ts)) / 1e9
    row["median_new_over_old"] = row["new_median_us"] / row["old_median_us"]
    if torch is not None:
        for name in dirs:
            row[f"median_{name}_over_torch"] = row[f"{name}_median_us"] / row["torch_median_us"]
    for h in handles:
        h.close()
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--cases", default="2048x128,2048x64,2048x128c,4096x128,1024x128,512x128")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--calls", type=int, default=10, help="decode calls per timed round")
    ap.add_argument("--torch", action="store_true", help="time torch's SDPA beside the decode cases")
    ap.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32", help="of every case")
    ap.add_argument(
        "--layers",
        type=int,
        default=1,
        help="decode: each call of a round goes to the next of this many layers, each with its own q, K and V "
        "(as a model's decode step reads every layer's cache in turn); times are per layer call",
    )
    ap.add_argument("--out", type=Path, default=Path("bench/results/cpu_sdpa_ab.json"))
    args = ap.parse_args()
    torch: Any = None
    if args.torch:
        import torch

        torch.set_num_threads(len(os.sched_getaffinity(0)))
    dirs = {"old": args.old, "new": args.new}
    rows = []
    for spec in args.cases.split(","):
        if spec.startswith("d"):
            heads, skv, d = (int(x) for x in spec[1:].split("x"))
            row = decode_rows(
                dirs, heads, skv, d, args.rounds, args.calls, torch, args.dtype == "bfloat16", args.layers
            )
            print(json.dumps(row), flush=True)
            rows.append(row)
            continue
        causal = spec.endswith("c")
        s, d = (int(x) for x in spec.rstrip("c").split("x"))
        row = case_rows(dirs, s, d, causal, args.rounds, args.dtype == "bfloat16")
        print(json.dumps(row), flush=True)
        rows.append(row)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    result = {"command": "python " + " ".join(sys.argv), "date": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": rows}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
