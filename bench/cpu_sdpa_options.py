"""What each SDPA option costs on the CPU engine: every option's call time over the same call without it,
one dtype and ISA build per run, and the plain call's time cold (after a settle sleep, as
bench/cpu_sdpa.py times every call) beside its time back to back.

    python bench/cpu_sdpa_options.py                                   # fp32, the default ISA
    python bench/cpu_sdpa_options.py --dtype bfloat16 --isa amx --out bench/results/cpu_sdpa_options_bf16_amx

B = 1, H = 8, S = 2048, D = 128 unless --s / --d; scale 1/sqrt(D); standard normal inputs. Options:
causal, a sliding window (256 keys back), ALiBi, softcap 30, a full [B, H, S, S] bias (keys
contiguous; random values), that bias with the first half of every head's rows masked everywhere
by finfo.min (transformers' older masks: the backward recomputes such rows' softmax sums, RFC 0005),
and with -inf above the diagonal (a causal mask handed over as a bias, as transformers' 4-D masks
reach hipdnn.torch: the kernels skip the blocks it masks whole).
Times: best of --calls back-to-back calls after one warm-up; cold: best of --calls calls, each after a
--settle sleep. ``--backward`` times the backward instead (dq, dk, dv from the forward's o and stats
with the same options). Writes <out>.json.

    python bench/cpu_sdpa_options.py --backward --out bench/results/cpu_sdpa_options_bwd
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import hipdnn  # noqa: E402

try:  # optional: torch's CPU SDPA on the same inputs, where it has the option
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover
    torch = None  # type: ignore[assignment]
from bench.cpu_sdpa import BF16_NP, to_bf16  # noqa: E402

DT = hipdnn.DataType
OPTIONS: dict[str, dict[str, Any]] = {
    "none": {},
    "causal": {"use_causal_mask": True},
    "window_256": {"diagonal_band_left_bound": 256, "diagonal_band_right_bound": 0},
    "alibi": {"use_alibi_mask": True},
    "softcap_30": {"softcap": 30.0},
    "bias_full": {"bias": True},
    "bias_half_rows_finfo_min": {"bias": "half_rows_masked"},
    "bias_causal_ninf": {"bias": "causal_ninf"},
}


class Call:
    """One SDPA graph with the given options, built once, executed on fixed inputs."""

    def __init__(
        self, h: hipdnn.Handle, qkv: list[np.ndarray], bf16: bool, options: dict[str, Any], backward: bool = False
    ) -> None:
        io = DT.BFLOAT16 if bf16 else DT.FLOAT
        b, hh, s, d = qkv[0].shape
        kw = dict(options)
        bias = kw.pop("bias", False)
        bias_vals = None
        if bias:
            vals = np.random.default_rng(1).standard_normal((b, hh, s, s), dtype=np.float32)
            if bias == "half_rows_masked":
                vals[:, :, : s // 2] = np.finfo(np.float32).min if not bf16 else -3.3895313892515355e38
            elif bias == "causal_ninf":  # a causal mask handed over as a bias (transformers' 4-D masks)
                vals[:, :, np.triu(np.ones((s, s), bool), 1)] = -np.inf
            bias_vals = to_bf16(vals) if bf16 else vals
        scale = 1.0 / math.sqrt(d)
        self.qkv, self.bf16, self.bias_vals, self.scale, self.backward = qkv, bf16, bias_vals, scale, backward

        def graph(name: str) -> tuple[hipdnn.Graph, list[Any], Any, dict[str, Any]]:
            g = hipdnn.Graph(name=name, io_data_type=io, intermediate_data_type=DT.FLOAT, compute_data_type=DT.FLOAT)
            t = [g.tensor(name=n, dim=[b, hh, s, d], data_type=io) for n in "qkv"]
            extra = dict(kw)
            tb = None
            if bias_vals is not None:
                tb = g.tensor(name="bias", dim=[b, hh, s, s], data_type=io)
                extra["bias"] = tb
            return g, t, tb, extra

        out_np = BF16_NP if bf16 else np.float32
        g, t, tb, extra = graph("options")
        o, stats = g.sdpa(t[0], t[1], t[2], attn_scale=scale, generate_stats=backward, **extra)
        o.set_output(True)
        if stats is not None:
            stats.set_output(True)
        g.build(h)
        self.pack: dict[Any, np.ndarray] = dict(zip(t, qkv))
        if tb is not None and bias_vals is not None:
            self.pack[tb] = bias_vals
        self.pack[o] = np.empty((b, hh, s, d), out_np)
        if stats is not None:
            self.pack[stats] = np.empty((b, hh, s, 1), np.float32)
        self.g, self.h = g, h
        self.ws = np.empty(max(1, g.get_workspace_size()), np.uint8)
        if not backward:
            return
        # The backward on the forward's o and stats, with the same options.
        assert stats is not None
        g.execute(h, self.pack, self.ws)
        fwd_o, fwd_stats = self.pack[o], self.pack[stats]
        gb, tq, tbb, extra = graph("options_bwd")
        to, tdo = (gb.tensor(name=n, dim=[b, hh, s, d], data_type=io) for n in ("o", "dO"))
        ts = gb.tensor(name="stats", dim=[b, hh, s, 1], data_type=DT.FLOAT)
        grads = gb.sdpa_backward(tq[0], tq[1], tq[2], to, tdo, ts, attn_scale=scale, **extra)
        for x in grads:
            x.set_output(True)
        gb.build(h)
        d_o = np.random.default_rng(2).standard_normal((b, hh, s, d), dtype=np.float32)
        self.pack = dict(zip(tq, qkv))
        self.pack.update({to: fwd_o, tdo: to_bf16(d_o) if bf16 else d_o, ts: fwd_stats})
        if tbb is not None and bias_vals is not None:
            self.pack[tbb] = bias_vals
        for x in grads:
            self.pack[x] = np.empty((b, hh, s, d), out_np)
        self.g = gb
        self.ws = np.empty(max(1, gb.get_workspace_size()), np.uint8)

    def torch_call(self, options: dict[str, Any]) -> Any:
        """torch's CPU SDPA on the same inputs and options (the bias as attn_mask), forward or backward as
        this call is, or None where torch is missing or has no such option."""
        if torch is None or set(options) - {"use_causal_mask", "bias"}:
            return None

        def as_torch(x: np.ndarray) -> Any:  # the same bits (bf16 arrays are stored as ml_dtypes')
            return torch.from_numpy(x.view(np.int16)).view(torch.bfloat16) if self.bf16 else torch.from_numpy(x)

        q, k, v = (as_torch(x) for x in self.qkv)
        mask = None if self.bias_vals is None else as_torch(self.bias_vals)
        causal = bool(options.get("use_causal_mask"))
        if not self.backward:
            return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=self.scale)
        # the backward alone: autograd of a retained forward graph
        q, k, v = (x.clone().requires_grad_(True) for x in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=self.scale)
        grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(2), dtype=out.dtype)
        return lambda: torch.autograd.grad(out, (q, k, v), grad, retain_graph=True)

    def best_ms(self, calls: int, settle: float = 0.0, fn: Any = None) -> float:
        run = fn if fn is not None else (lambda: self.g.execute(self.h, self.pack, self.ws))
        run()
        best = math.inf
        for _ in range(calls):
            if settle:
                time.sleep(settle)
            t0 = time.perf_counter()
            run()
            best = min(best, time.perf_counter() - t0)
        return best * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    ap.add_argument("--isa", default=None, help="HIPDNN_CPU_ISA for the plans (default: the widest)")
    ap.add_argument("--s", type=int, default=2048)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--calls", type=int, default=8)
    ap.add_argument("--settle", type=float, default=0.15)
    ap.add_argument("--backward", action="store_true", help="time the backward (dq, dk, dv) instead")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "cpu_sdpa_options"))
    args = ap.parse_args()
    bf16 = args.dtype == "bfloat16"
    if bf16 and BF16_NP is None:
        sys.exit("bfloat16 needs ml_dtypes")
    if args.isa:
        os.environ["HIPDNN_CPU_ISA"] = args.isa
    rng = np.random.default_rng(0)
    qkv = [rng.standard_normal((1, 8, args.s, args.d), dtype=np.float32) for _ in range(3)]
    if bf16:
        qkv = [to_bf16(x) for x in qkv]
    h = hipdnn.Handle()
    rows = []
    base_ms = math.nan
    for name, options in OPTIONS.items():
        call = Call(h, qkv, bf16, options, args.backward)
        ms = call.best_ms(args.calls)
        row: dict[str, Any] = {"option": name, "ms": round(ms, 3)}
        if name == "none":
            base_ms = ms
            flops = 4.0 * 8 * args.s * args.s * args.d * (2.5 if args.backward else 1.0)
            row["gflops"] = round(flops / ms / 1e6, 1)
            cold = call.best_ms(args.calls, args.settle)
            row["cold_ms"] = round(cold, 3)
            row["cold_gflops"] = round(flops / cold / 1e6, 1)
        row["over_none"] = round(ms / base_ms, 3)
        torch_fn = call.torch_call(options)
        if torch_fn is not None:
            row["torch_ms"] = round(call.best_ms(args.calls, fn=torch_fn), 3)
            row["torch_over_hipdnn"] = round(row["torch_ms"] / ms, 3)
        rows.append(row)
        print(json.dumps(row))
    h.close()
    out = {
        "command": "python bench/cpu_sdpa_options.py " + " ".join(sys.argv[1:]),
        "date": _dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S"),
        "dtype": args.dtype,
        "pass": "backward" if args.backward else "forward",
        "isa_env": args.isa,
        "shape": {"B": 1, "H": 8, "S": args.s, "D": args.d},
        "method": f"best of {args.calls} back-to-back calls after a warm-up; cold: best of {args.calls}, "
        f"each after a {args.settle} s sleep; torch_ms: torch's scaled_dot_product_attention on the same "
        "inputs (the bias as attn_mask, causal as is_causal), timed the same way right after (the backward: "
        "torch.autograd.grad of a retained forward graph)",
        "rows": rows,
    }
    Path(args.out + ".json").write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}.json")


if __name__ == "__main__":
    main()
