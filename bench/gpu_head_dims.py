"""Head dims other than 64 and 128, and d_qk != d_v, on the GPU: hipdnn against PyTorch flash and cuDNN.

What a user sees: ``hipdnn.torch.scaled_dot_product_attention`` (engine 202: the kernels compiled for
64 / 128, a smaller head dim padded inside them) beside ``torch.nn.functional.scaled_dot_product_attention``
under the flash and cuDNN backends, bf16, H = 16, B * S = 16384, forward and backward (autograd:
``torch.autograd.grad(out, (q, k, v), dO)``), causal and not, in one run. GPU time per call with CUDA
events around calls queued behind a spin kernel (host time never idles the GPU). A backend that does not
serve a shape (flash: d_qk != d_v) is recorded with its error. Each row also checks our output and
gradients against flash's (or the math backend's where flash declines).

    python bench/gpu_head_dims.py [--quick] [--dims 64:64,128:128] [--out bench/results] [--tag gpu_head_dims]

With HIPDNN_PLUGIN_DIR pointing at another build and --dims 64:64,128:128, the same rows measure that
build: how the padded head dims' changes were checked to leave 64 and 128 as fast as before.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import hipdnn.torch as htorch  # noqa: E402
from bench.gpu_sdpa import gpu_ms  # noqa: E402

H = 16
TOKENS = 16384
#: (d_qk, d_v): what models use (Phi 80 / 96, GPT-J 256 is above what is compiled), the tile edges,
#: the two compiled head dims as the reference rows, and d_qk != d_v (MLA-style 192/128 is above 128)
HEAD_DIMS = [(32, 32), (40, 40), (64, 64), (72, 72), (80, 80), (96, 96), (112, 112), (128, 128), (128, 64), (64, 128)]
S_LIST = [1024, 4096]
BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}


def flops(b: int, s: int, d: int, dv: int, causal: bool) -> float:
    """Forward flops: q k^T (2 s^2 d) and P V (2 s^2 dv) per head, halved under a causal mask."""
    f = 2.0 * b * H * s * s * (d + dv)
    return f / 2 if causal else f


def rel(a: Any, b: Any) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))


def row_for(d: int, dv: int, s: int, causal: bool, quick: bool) -> dict[str, Any]:
    b = TOKENS // s
    gen = torch.Generator(device="cuda").manual_seed(d * 7 + dv * 13 + s + causal)

    def randn(*shape: int) -> Any:
        return torch.randn(*shape, device="cuda", generator=gen, dtype=torch.bfloat16)

    q, k, v = randn(b, H, s, d), randn(b, H, s, d), randn(b, H, s, dv)
    do = randn(b, H, s, dv)
    fl = flops(b, s, d, dv, causal)
    reps = max(3, min(10 if quick else 30, int(1e12 / fl)))
    row: dict[str, Any] = {"d_qk": d, "d_v": dv, "s": s, "B": b, "H": H, "causal": causal}

    def ours_fwd() -> Any:
        return htorch.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def torch_fwd(backend: Any) -> Callable[[], Any]:
        def run() -> Any:
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        return run

    fwd: dict[str, Callable[[], Any]] = {"ours": ours_fwd}
    for name, backend in BACKENDS.items():
        try:
            torch_fwd(backend)()
            fwd[name] = torch_fwd(backend)
        except Exception as exc:  # a backend that does not serve this shape
            row[f"{name}_error"] = f"{type(exc).__name__}: {exc}"[:160]
    with sdpa_kernel(SDPBackend.MATH):
        ref = fwd["flash"]() if "flash" in fwd else F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    row["fwd_rel_err_vs_" + ("flash" if "flash" in fwd else "math")] = rel(ours_fwd(), ref)
    for name, fn in fwd.items():
        ms = gpu_ms(fn, reps)
        row[f"fwd_{name}_ms"] = ms
        row[f"fwd_{name}_tflops"] = fl / (ms * 1e-3) / 1e12

    def backward(forward: Callable[[Any, Any, Any], Any]) -> Callable[[], Any]:
        qg, kg, vg = (x.detach().requires_grad_() for x in (q, k, v))
        out = forward(qg, kg, vg)
        return lambda: torch.autograd.grad(out, (qg, kg, vg), do, retain_graph=True)

    def under(backend: Any) -> Callable[[Any, Any, Any], Any]:
        def f(qg: Any, kg: Any, vg: Any) -> Any:
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)

        return f

    bwd: dict[str, Callable[[], Any]] = {
        "ours": backward(lambda qg, kg, vg: htorch.scaled_dot_product_attention(qg, kg, vg, is_causal=causal))
    }
    for name, backend in BACKENDS.items():
        try:
            fn = backward(under(backend))
            fn()
            bwd[name] = fn
        except Exception as exc:
            row[f"bwd_{name}_error"] = f"{type(exc).__name__}: {exc}"[:160]
    want = bwd["flash"]() if "flash" in bwd else backward(under(SDPBackend.MATH))()
    got = bwd["ours"]()
    row["bwd_rel_err_vs_" + ("flash" if "flash" in bwd else "math")] = max(rel(a, w) for a, w in zip(got, want))
    for name, fn in bwd.items():
        ms = gpu_ms(fn, max(3, reps // 2))
        row[f"bwd_{name}_ms"] = ms
        row[f"bwd_{name}_tflops"] = 2.5 * fl / (ms * 1e-3) / 1e12
    for kind in ("fwd", "bwd"):
        for name in BACKENDS:
            if f"{kind}_{name}_ms" in row:
                row[f"{kind}_ours_vs_{name}"] = row[f"{kind}_{name}_ms"] / row[f"{kind}_ours_ms"]
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--tag", default="gpu_head_dims")
    ap.add_argument("--dims", default="", help="d_qk:d_v pairs to run, comma separated (default: the table)")
    args = ap.parse_args()
    pairs = [tuple(int(x) for x in p.split(":")) for p in args.dims.split(",") if p] or HEAD_DIMS
    rows = []
    for d, dv in pairs:
        for s in S_LIST:
            for causal in (False, True):
                r = row_for(d, dv, s, causal, args.quick)
                rows.append(r)
                ratios = {k: round(x, 3) for k, x in r.items() if "_vs_" in k and "err" not in k}
                print(f"d={d} dv={dv} s={s} causal={causal}: {ratios}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = {
        "what": __doc__.split("\n\n")[0],
        "command": "python " + " ".join(sys.argv),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "rows": rows,
    }
    (out / f"{args.tag}.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out / (args.tag + '.json')}")


if __name__ == "__main__":
    main()
