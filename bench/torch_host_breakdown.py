"""Where the host time of one hipdnn.torch attention call goes on a CUDA machine, beside torch's SDPA
(flash): thread CPU time per call of the whole call and of its parts (the bound call alone, the
output allocation, the stream query), at a decode shape (Sq = 1, 32/8 heads, D 128, bf16, BSHD
views), with the GPU kept busy so that no launch waits. Prints JSON rows; --out writes them.

    python3 bench/torch_host_breakdown.py --out bench/results
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

import hipdnn.torch as ht
from hipdnn.torch import kernels
from hipdnn.torch.plans import current_stream


def host_us_each(fns: dict[str, Callable[[], Any]], calls: int, rounds: int = 20) -> dict[str, float]:
    """Per function, the best of ``rounds`` rounds of thread CPU microseconds per call, the functions
    interleaved round by round and the GPU kept ahead by a sleep kernel. Rounds are short (``calls``
    of a few hundred) so that the launch queue never fills: a full queue makes every launch spin on
    the host, which would be counted as the call's time. Names starting with ``sdpa_flash`` run with
    torch's SDPA pinned to flash, the pinning outside the timed loop."""
    best = dict.fromkeys(fns, float("inf"))
    for r in range(rounds + 1):  # round 0 warms up
        for name, fn in fns.items():
            pin = sdpa_kernel([SDPBackend.FLASH_ATTENTION]) if name.startswith("sdpa_flash") else nullcontext()
            with pin:
                torch.cuda._sleep(100_000_000)
                t0 = time.thread_time()
                for _ in range(calls):
                    fn()
                took = (time.thread_time() - t0) / calls
                torch.cuda.synchronize()
            if r:
                best[name] = min(best[name], took)
    return {name: t * 1e6 for name, t in best.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--skv", type=int, default=1056)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    q = torch.randn(1, 1, 32, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    k = torch.randn(1, args.skv, 8, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    v = torch.randn_like(k)
    ht.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    (plan,) = kernels.CACHE.plans()
    o = torch.empty_permuted((1, 32, 1, 128), (0, 2, 1, 3), dtype=q.dtype, device=q.device)
    values = [q, k, v, o]
    ptrs = [t.data_ptr() for t in values]
    shapes = [t.shape for t in values]
    strides = [t.stride() for t in values]
    ws = torch.empty(max(plan.workspace_size, 1), dtype=torch.uint8, device="cuda")
    times = host_us_each(
        {
            "sdpa_flash": lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True),
            "hipdnn": lambda: ht.scaled_dot_product_attention(q, k, v, enable_gqa=True),
            "bound_call": lambda: plan.bound(ptrs, ws.data_ptr(), shapes, strides),
            "empty_permuted": lambda: torch.empty_permuted(
                (1, 32, 1, 128), (0, 2, 1, 3), dtype=q.dtype, device=q.device
            ),
            "current_stream": lambda: current_stream(0),
            "torch_empty": lambda: torch.empty(4096, dtype=torch.uint8, device="cuda"),
        },
        args.calls,
    )
    row: dict[str, Any] = {"skv": args.skv, **{f"{name}_us": t for name, t in times.items()}}
    prof = cProfile.Profile()
    for _ in range(10):
        torch.cuda._sleep(100_000_000)
        prof.enable()
        for _ in range(args.calls):
            ht.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        prof.disable()
        torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(15)
    print(json.dumps(row), flush=True)
    print(text.getvalue())
    if args.out:
        row["profile"] = text.getvalue()
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "torch_host_breakdown.json").write_text(json.dumps(row, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
