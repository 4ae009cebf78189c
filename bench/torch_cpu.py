"""hipdnn.torch against torch's own SDPA on CPU tensors, as a model calls them: one attention call at
decode shapes (Sq = 1, BSHD views, fp32 and bf16), the whole call's wall time per call (hipdnn.torch's host
work and the CPU engine's kernel), interleaved round by round with torch's, best round of each; and
hipdnn.torch's own host work (``host``: the whole call, its compiled short path, and the bound call's
two forms, beside torch's call); and
calls with an ``attn_mask`` as models pass them (``mask_rows``: an expanded causal mask, key padding
masks, prefill and decode); and decode attention between torch ops, as a model calls it
(``between_ops``: on torch's threads or the engine's worker pool).
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

import hipdnn
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


def host_rows(calls: int, rounds: int) -> dict[str, float]:
    """hipdnn.torch's host work at a decode shape (8 heads, D 64, 256 keys, BSHD), each form with the
    kernel in it: the whole call (``hipdnn_torch``); the compiled short path it takes, called directly
    (``short_path``); the plan's bound call on tensors it reads itself (``call_tensors``); and the bound
    call with pointers, shapes and strides gathered beforehand (``bound_call``: the execute core and
    the engine, no tensor read). ``host_us``: the whole call less the bound call, what hipdnn.torch
    adds to the engine's call; ``torch``: torch's SDPA on the same tensors."""
    q = torch.randn(1, 1, 8, 64).transpose(1, 2)
    k = torch.randn(1, 256, 8, 64).transpose(1, 2)
    cache = ht.plan_cache()
    cache.clear()
    ht.scaled_dot_product_attention(q, k, k)
    (plan,) = cache.plans()
    o = torch.empty_permuted((1, 8, 1, 64), (0, 2, 1, 3))
    values = [q, k, k, o]
    ws = plan.host_workspace()
    bound = plan.bound
    ptrs = [t.data_ptr() for t in values]
    shapes = [tuple(t.shape) for t in values]
    strides = [tuple(t.stride()) for t in values]
    short = cache.cpu_calls
    times = best_us(
        {
            "hipdnn_torch": lambda: ht.scaled_dot_product_attention(q, k, k),
            "short_path": lambda: short(q, k, k, False, None, False, False),
            "call_tensors": lambda: bound.call_tensors(values, ws),
            "bound_call": lambda: bound(ptrs, ws, shapes, strides),
            "torch": lambda: torch.nn.functional.scaled_dot_product_attention(q, k, k),
        },
        calls,
        rounds,
    )
    cache.clear()
    row = {f"{name}_us": t for name, t in times.items()}
    row["host_us"] = times["hipdnn_torch"] - times["bound_call"]
    print(json.dumps(row), flush=True)
    return row


def mask_rows(calls: int, rounds: int) -> list[dict[str, Any]]:
    """Calls with an ``attn_mask`` as models pass them (fp32, B = 4, H = 8, D = 64, BHSD): a causal
    mask [1, 1, S, S] expanded over the batch and a key padding mask [B, 1, 1, S] (batch b has 128 b
    keys padded on the left) at S = 512, and the same padding at decode (Sq = 1, 256 and 2048 keys,
    S / 4 b padded); each as bool and as an additive float mask, the same mask tensor every call as a model's
    layers pass it (hipdnn.torch converts a boolean one on the first call, then reuses the bias)."""
    rows: list[dict[str, Any]] = []
    b, h, d = 4, 8, 64
    shape: tuple[int, ...]
    cases = (("causal_expanded", 512, 512), ("padding", 512, 512), ("padding_decode", 1, 256))
    for case, sq, skv in (*cases, ("padding_decode", 1, 2048)):
        q = torch.randn(b, h, sq, d)
        k, v = torch.randn(b, h, skv, d), torch.randn(b, h, skv, d)
        if case == "causal_expanded":
            src = torch.ones(1, 1, sq, skv, dtype=torch.bool).tril()
            shape = (b, 1, sq, skv)
        else:
            step = 128 if sq > 1 else skv // 4
            src = (torch.arange(skv)[None, :] >= step * torch.arange(b)[:, None])[:, None, None, :]
            shape = tuple(src.shape)
        for kind in ("bool", "float"):
            base = src if kind == "bool" else torch.zeros(src.shape).masked_fill(~src, float("-inf"))
            mask = base.expand(shape)
            want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            got = ht.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            assert isinstance(got, torch.Tensor)
            err = ((got - want).abs().max() / want.abs().max()).item()
            impls: dict[str, Callable[[], Any]] = {
                "hipdnn": lambda q=q, k=k, v=v, m=mask: ht.scaled_dot_product_attention(q, k, v, attn_mask=m),
                "torch": lambda q=q, k=k, v=v, m=mask: torch.nn.functional.scaled_dot_product_attention(
                    q, k, v, attn_mask=m
                ),
            }
            times = best_us(impls, calls, rounds)
            row: dict[str, Any] = {"mask": case, "kind": kind, "batch": b, "heads": h, "head_dim": d}
            row.update({"sq": sq, "skv": skv, "rel_err_vs_torch": err})
            row.update({f"{n}_us": t for n, t in times.items()})
            row["hipdnn_over_torch"] = times["hipdnn"] / times["torch"]
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def bound_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, threading: str) -> Callable[[], Any]:
    """The engine's call on these tensors through a plan of its own built on
    ``Handle(device="cpu", cpu_threading=threading)`` and bound (``Graph.bind``): hipdnn.torch's
    path without its Python, the output allocated per call as hipdnn.torch does."""
    dt = ht.plans.DATA_TYPES[q.dtype]
    handle = hipdnn.Handle(device="cpu", cpu_threading=threading)
    g = hipdnn.Graph(name="between_ops", io_data_type=dt, intermediate_data_type=hipdnn.DataType.FLOAT)
    ts = [g.tensor(name=n, dim=list(x.shape), stride=list(x.stride()), data_type=dt) for n, x in zip("qkv", (q, k, v))]
    gqa = q.shape[1] != k.shape[1]
    o, _ = g.sdpa(*ts, attn_scale=q.shape[-1] ** -0.5)
    o.set_output(True)
    g.build(handle)
    bound = g.bind(handle, [*ts, o])
    ws_tensor = torch.empty(max(1, g.get_workspace_size()), dtype=torch.uint8)
    ws = ws_tensor.data_ptr()
    b, h, sq, _ = q.shape
    dv = v.shape[-1]
    qp, kp, vp = q.data_ptr(), k.data_ptr(), v.data_ptr()

    def call() -> torch.Tensor:
        out = torch.empty(b, h, sq, dv, dtype=q.dtype)
        bound([qp, kp, vp, out.data_ptr()], ws)
        return out

    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)
    assert ((call() - want).float().abs().max() / want.float().abs().max()).item() < 2e-2
    call.keep = (handle, g, bound, ws_tensor)  # type: ignore[attr-defined]  # alive as long as the call
    return call


def between_ops_rows(calls: int, rounds: int) -> list[dict[str, Any]]:
    """Attention as a model calls it: after a torch op (a decode step's projection, [1, 2048] x
    [2048, 2048], run on torch's OpenMP threads, which then spin a while). Each timed step is the
    matmul and one attention call (decode, Sq = 1, BSHD views); attention's time is the step's less
    the matmul's alone (``matmul_us``). Attention by hipdnn.torch as shipped (``hipdnn_torch``: on
    torch's threads where they are the engine's), by the engine's own call bound on a handle with
    each ``cpu_threading`` (``bound_pool``, ``bound_openmp``), and by torch's SDPA."""
    rows: list[dict[str, Any]] = []
    for dtype in (torch.float32, torch.bfloat16):
        a, w = torch.randn(1, 2048).to(dtype), torch.randn(2048, 2048).to(dtype)
        for hq, hk, d, skv in ((8, 8, 64, 256), (8, 8, 128, 1024), (8, 8, 128, 4096), (32, 8, 128, 4096)):
            q = torch.randn(1, 1, hq, d).to(dtype).transpose(1, 2)
            k = torch.randn(1, skv, hk, d).to(dtype).transpose(1, 2)
            v = torch.randn(1, skv, hk, d).to(dtype).transpose(1, 2)
            gqa = hq != hk
            attn: dict[str, Callable[[], Any]] = {
                "hipdnn_torch": lambda q=q, k=k, v=v, g=gqa: ht.scaled_dot_product_attention(q, k, v, enable_gqa=g),
                "bound_pool": bound_attention(q, k, v, "pool"),
                "bound_openmp": bound_attention(q, k, v, "openmp"),
                "torch": lambda q=q, k=k, v=v, g=gqa: torch.nn.functional.scaled_dot_product_attention(
                    q, k, v, enable_gqa=g
                ),
            }
            steps: dict[str, Callable[[], Any]] = {"matmul": lambda a=a, w=w: a @ w}
            for name, fn in attn.items():
                steps[name] = lambda a=a, w=w, fn=fn: (a @ w, fn())
            times = best_us(steps, calls, rounds)
            row: dict[str, Any] = {"dtype": str(dtype).removeprefix("torch."), "heads": hq, "kv_heads": hk}
            row.update({"head_dim": d, "sq": 1, "skv": skv, "matmul_us": times["matmul"]})
            for name in attn:
                row[f"{name}_us"] = times[name] - times["matmul"]
            for name in ("hipdnn_torch", "bound_pool", "bound_openmp"):
                row[f"{name}_over_torch"] = row[f"{name}_us"] / row["torch_us"]
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--skvs", default="256,1024,4096")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args()
    torch.manual_seed(0)
    rows = []
    for dtype, (hq, hk, d) in (
        (dt, shape) for dt in (torch.float32, torch.bfloat16) for shape in ((8, 8, 64), (32, 8, 128))
    ):
        for skv in (int(x) for x in args.skvs.split(",")):
            q = torch.randn(1, 1, hq, d).to(dtype).transpose(1, 2)
            k = torch.randn(1, skv, hk, d).to(dtype).transpose(1, 2)
            v = torch.randn(1, skv, hk, d).to(dtype).transpose(1, 2)
            gqa = hq != hk
            want = torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)
            got = ht.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)
            assert isinstance(got, torch.Tensor)
            err = ((got - want).float().abs().max() / want.float().abs().max()).item()
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
            row = {"dtype": str(dtype).removeprefix("torch."), "heads": hq, "kv_heads": hk, "head_dim": d}
            row.update({"sq": 1, "skv": skv, "rel_err_vs_torch": err})
            row.update({f"{name}_us": t for name, t in times.items()})
            row["hipdnn_over_torch"] = times["hipdnn"] / times["torch"]
            print(json.dumps(row), flush=True)
            rows.append(row)
    result = {
        "host": host_rows(args.calls * 10, args.rounds),
        "mask_rows": mask_rows(max(1, args.calls // 20), args.rounds),
        "between_ops": between_ops_rows(max(1, args.calls // 4), args.rounds),
        "command": "python " + " ".join(sys.argv),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()},
        "torch": torch.__version__,
        "method": "wall time per call, best of interleaved rounds (a 50 ms settle before each), B = 1; rows fp32 "
        "and bf16, mask rows fp32; between_ops: per step a torch matmul then one attention call, attention's time "
        "the step's less the matmul's alone",
        "hipdnn_torch_cpu_threading": ht.plans.cpu_threading(),
        "rows": rows,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "torch_cpu.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
