"""bf16 SDPA forward accuracy on the CPU: each hipdnn ISA build and PyTorch's bf16 SDPA on the same bf16
inputs, against a float64 reference written from the definition.

    python bench/cpu_bf16_accuracy.py                     # writes bench/results/cpu_bf16_accuracy.json
    python bench/cpu_bf16_accuracy.py --isa avx512,amx --shapes 2048x128,1024x64

B = 1, H = 2, S x D per shape, no mask, scale 1/sqrt(D), standard normal inputs rounded to bf16. Per
implementation: max |error| / max |reference| and mean |error|, beside the output's own rounding to
bf16 (the float64 reference rounded to bf16: what an exact kernel with a bf16 output would score).
The AMX build rounds P to bf16 for its P V product, as PyTorch's bf16 kernel does; the AVX-512 build
keeps P in fp32. PyTorch is optional (its columns are left out without it). Not a timing.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

import hipdnn

ROOT = Path(__file__).resolve().parents[1]
DT = hipdnn.DataType


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bits (uint16), round to nearest even."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_value(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def hipdnn_sdpa(isa: str, q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float) -> np.ndarray:
    """o (as float64) of a bf16 SDPA graph built with HIPDNN_CPU_ISA=isa."""
    os.environ["HIPDNN_CPU_ISA"] = isa
    try:
        h = hipdnn.Handle(device="cpu")
        g = hipdnn.Graph(
            name="acc", io_data_type=DT.BFLOAT16, intermediate_data_type=DT.FLOAT, compute_data_type=DT.FLOAT
        )
        tq, tk, tv = (g.tensor(name=n, dim=list(q.shape), data_type=DT.BFLOAT16) for n in "qkv")
        o, _ = g.sdpa(tq, tk, tv, attn_scale=scale)
        o.set_output(True)
        g.build(h)
        out = np.full(q.shape, 0xFFFF, np.uint16)  # NaN until written
        bf = np.dtype(ml_dtypes.bfloat16)
        arrays = {tq: q.view(bf), tk: k.view(bf), tv: v.view(bf), o: out.view(bf)}
        g.execute(h, arrays, np.empty(max(1, g.get_workspace_size()), np.uint8))
        h.close()
    finally:
        del os.environ["HIPDNN_CPU_ISA"]
    return bf16_value(out)


def errors(got: np.ndarray, ref: np.ndarray) -> dict[str, float]:
    e = np.abs(got - ref)
    return {"max_rel": float(e.max() / np.abs(ref).max()), "mean_abs": float(e.mean())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--isa", default="avx512,amx", help="comma-separated HIPDNN_CPU_ISA builds (ones the CPU lacks are skipped)"
    )
    ap.add_argument("--shapes", default="2048x128,1024x64", help="comma-separated SxD")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "cpu_bf16_accuracy.json")
    args = ap.parse_args()
    torch: Any = None
    try:
        import torch as torch_module

        torch = torch_module
    except ImportError:
        pass
    rows = []
    for shape in args.shapes.split(","):
        s, d = (int(x) for x in shape.split("x"))
        rng = np.random.default_rng(args.seed)
        q, k, v = (bf16_bits(rng.standard_normal((1, 2, s, d)).astype(np.float32)) for _ in range(3))
        qf, kf, vf = (bf16_value(x) for x in (q, k, v))
        scale = 1.0 / np.sqrt(d)
        sc = qf @ kf.transpose(0, 1, 3, 2) * scale
        p = np.exp(sc - sc.max(-1, keepdims=True))
        ref = (p / p.sum(-1, keepdims=True)) @ vf
        row: dict[str, Any] = {"S": s, "D": d, "output_rounding": errors(bf16_value(bf16_bits(ref)), ref)}
        for isa in args.isa.split(","):
            try:
                row[f"hipdnn_{isa}"] = errors(hipdnn_sdpa(isa, q, k, v, scale), ref)
            except hipdnn.HipdnnError as exc:
                row[f"hipdnn_{isa}"] = {"skipped": str(exc).splitlines()[0]}
        if torch is not None:
            tq, tk, tv = (torch.from_numpy(x.view(np.int16)).view(torch.bfloat16) for x in (q, k, v))
            to = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, scale=scale)
            row["torch"] = errors(to.float().numpy().astype(np.float64), ref)
        rows.append(row)
        print(json.dumps(row))
    result = {
        "command": "python bench/cpu_bf16_accuracy.py " + f"--isa {args.isa} --shapes {args.shapes} --seed {args.seed}",
        "torch": None if torch is None else torch.__version__,
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print("wrote", args.out)


if __name__ == "__main__":
    main()
