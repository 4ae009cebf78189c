"""SDPA forward on the GPU: the hipdnn HIP engine against PyTorch's flash and cuDNN backends.

bf16, H = 16, B * S = 32768, head dims 64 and 128, causal and not, S from 512 to 16384; each
backend timed on the same card in one run. GPU time is measured with CUDA events around N
back-to-back calls queued behind a spin kernel (so host overhead never idles the GPU); host time
per hipdnn execute (Python frontend + plugin launch) is measured separately. The max-shape penalty
compares a plan built at (B, S) with one plan built at B_max = 64, S_max = 16384 executed through
shape overrides. Results go to bench/results/gpu_sdpa.json (and .png when matplotlib exists).

    python bench/gpu_sdpa.py [--plugin PATH] [--quick] [--out bench/results]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import hipdnn  # noqa: E402
from tests.gpu.hip_support import (  # noqa: E402
    PORTABLE,
    TENSOR_CORE,
    find_plugin,
    flops,
    sdpa_graph,
    workspace_for,
)

H = 16
TOKENS = 32768
S_LIST = [512, 1024, 2048, 4096, 8192, 16384]
S_MAX, B_MAX = 16384, TOKENS // 512


def gpu_ms(fn: Callable[[], Any], reps: int, warm: int = 3) -> float:
    """Median per-call GPU time of reps calls queued behind a spin kernel (ms)."""
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(int(2e8))  # ~0.1 s of spinning while the host queues the calls
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / reps)
    return statistics.median(times)


def host_us(fn: Callable[[], Any], reps: int = 50) -> float:
    """Median host wall time of one call (launch included, no synchronisation), in microseconds."""
    torch.cuda._sleep(int(4e8))
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    return statistics.median(ts) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--plugin", default=None)
    ap.add_argument("--quick", action="store_true", help="fewer sizes and repetitions")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--tag", default="gpu_sdpa")
    ap.add_argument(
        "--variants",
        default="",
        help="also time engine 202 with HIPDNN_HIP_202_KERNEL=each of these (comma-separated: ws, wg, serial, mma)",
    )
    ap.add_argument("--one", default=None, help="D,S,causal(0/1): build and execute once (for a profiler), then exit")
    args = ap.parse_args()

    plugin = Path(args.plugin) if args.plugin else find_plugin()
    assert plugin is not None, "HIP engine plugin not found"
    handle = hipdnn.Handle(plugin_paths=[plugin], plugin_loading_mode=hipdnn.PluginLoadingMode.ABSOLUTE)
    dev = torch.cuda.get_device_properties(0)
    bf = hipdnn.DataType.BFLOAT16
    s_list = [512, 2048, 8192] if args.quick else S_LIST
    variants = [v for v in args.variants.split(",") if v]
    if args.one:
        d1, s1, c1 = (int(x) for x in args.one.split(","))
        b1 = TOKENS // s1
        q, k, v, o = (torch.randn(b1, H, s1, d1, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        g, t = sdpa_graph(
            bf,
            [b1, H, s1, d1],
            [b1, H, s1, d1],
            "bhsd",
            causal=bool(c1),
            stats=False,
            scale=1 / math.sqrt(d1),
            engine=TENSOR_CORE,
        )
        g.build(handle)
        ws1 = workspace_for(g)
        for _ in range(2):
            g.execute(
                handle, {t["q"]: q.data_ptr(), t["k"]: k.data_ptr(), t["v"]: v.data_ptr(), t["o"]: o.data_ptr()}, ws1
            )
        torch.cuda.synchronize()
        return
    results: list[dict[str, Any]] = []
    max_plans: dict[tuple[int, bool], tuple[Any, Any]] = {}

    for d in (64, 128):
        for causal in (False, True):
            g_max, t_max = sdpa_graph(
                bf,
                [B_MAX, H, S_MAX, d],
                [B_MAX, H, S_MAX, d],
                "bhsd",
                causal=causal,
                stats=False,
                overridable=True,
                scale=1 / math.sqrt(d),
                engine=TENSOR_CORE,
            )
            g_max.build(handle)
            ws_max = workspace_for(g_max)
            max_plans[(d, causal)] = (g_max, t_max)
            for s in s_list:
                b = TOKENS // s
                reps = max(3, min(30, int(2e12 / flops(b, H, s, s, d, causal))))
                gen = torch.Generator(device="cuda").manual_seed(s + d)
                q, k, v = (
                    torch.randn(b, H, s, d, device="cuda", generator=gen, dtype=torch.bfloat16) for _ in range(3)
                )
                o = torch.empty_like(q)
                g, t = sdpa_graph(
                    bf,
                    [b, H, s, d],
                    [b, H, s, d],
                    "bhsd",
                    causal=causal,
                    stats=False,
                    scale=1 / math.sqrt(d),
                    engine=TENSOR_CORE,
                )
                g.build(handle)
                ws = workspace_for(g)
                engine_id = g.get_engine_id()
                pack = {t["q"]: q.data_ptr(), t["k"]: k.data_ptr(), t["v"]: v.data_ptr(), t["o"]: o.data_ptr()}
                strides = [H * s * d, s * d, d, 1]
                ov = {t_max[n]: hipdnn.OverrideEntry(shape=[b, H, s, d], stride=strides) for n in ("q", "k", "v", "o")}
                pack_max = {t_max[n]: pack[t[n]] for n in ("q", "k", "v", "o")}

                def ours() -> None:
                    g.execute(handle, pack, ws)

                def ours_max() -> None:
                    g_max.execute(handle, pack_max, ws_max, overrides=ov)

                def flash() -> Any:
                    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

                def cudnn() -> Any:
                    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

                ours()
                ref = flash()
                torch.cuda.synchronize()
                err = float((o.float() - ref.float()).norm() / ref.float().norm())
                o.fill_(float("nan"))
                ours_max()
                torch.cuda.synchronize()
                err_max = float((o.float() - ref.float()).norm() / ref.float().norm())
                fl = flops(b, H, s, s, d, causal)
                row: dict[str, Any] = {
                    "hd": d,
                    "causal": causal,
                    "s": s,
                    "B": b,
                    "H": H,
                    "engine": engine_id,
                    "rel_err_vs_flash": err,
                    "rel_err_override_plan": err_max,
                }

                def variant(kind: str) -> Callable[[], None]:
                    def run() -> None:
                        os.environ["HIPDNN_HIP_202_KERNEL"] = kind
                        try:
                            g.execute(handle, pack, ws)
                        finally:
                            del os.environ["HIPDNN_HIP_202_KERNEL"]

                    return run

                for kind in variants:
                    o.fill_(float("nan"))
                    variant(kind)()
                    torch.cuda.synchronize()
                    row[f"rel_err_{kind}"] = float((o.float() - ref.float()).norm() / ref.float().norm())
                timed = [("ours", ours), ("ours_smax_override", ours_max), ("flash", flash), ("cudnn", cudnn)]
                timed += [(f"ours_{kind}", variant(kind)) for kind in variants]
                for name, fn in timed:
                    try:
                        ms = gpu_ms(fn, reps)
                        row[name + "_ms"] = ms
                        row[name] = fl / (ms * 1e-3) / 1e12
                    except Exception as exc:  # a backend that does not run this shape
                        row[name] = None
                        row[name + "_error"] = f"{type(exc).__name__}: {exc}"[:200]
                row["host_us_execute"] = host_us(ours)
                row["host_us_execute_override"] = host_us(ours_max)
                if row.get("ours") and row.get("flash"):
                    row["ratio_vs_flash"] = row["ours"] / row["flash"]
                if row.get("ours") and row.get("cudnn"):
                    row["ratio_vs_cudnn"] = row["ours"] / row["cudnn"]
                if row.get("ours") and row.get("ours_smax_override"):
                    row["max_shape_penalty"] = row["ours_smax_override_ms"] / row["ours_ms"] - 1.0
                results.append(row)
                print(
                    f"d={d:3d} causal={causal!s:5} S={s:5d} B={b:3d}  ours {row.get('ours') or 0:6.1f}  "
                    f"smax {row.get('ours_smax_override') or 0:6.1f}  flash {row.get('flash') or 0:6.1f}  "
                    f"cudnn {row.get('cudnn') or 0:6.1f} TFLOP/s  err {err:.1e}  host {row['host_us_execute']:.0f} us"
                    + "".join(f"  {k} {row.get('ours_' + k) or 0:6.1f}" for k in variants),
                    flush=True,
                )
                del q, k, v, o, ref

    # The portable engine (201) at one size, for the record.
    portable: dict[str, Any] = {}
    try:
        d, s, b = 128, 2048, 4
        q, k, v = (torch.randn(b, H, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        o = torch.empty_like(q)
        g, t = sdpa_graph(bf, [b, H, s, d], [b, H, s, d], "bhsd", stats=False, scale=1 / math.sqrt(d), engine=PORTABLE)
        g.build(handle)
        pack = {t["q"]: q.data_ptr(), t["k"]: k.data_ptr(), t["v"]: v.data_ptr(), t["o"]: o.data_ptr()}
        ms = gpu_ms(lambda: g.execute(handle, pack, workspace_for(g)), 3, warm=1)
        portable = {
            "engine": g.get_engine_id(),
            "hd": d,
            "s": s,
            "B": b,
            "H": H,
            "causal": False,
            "ms": ms,
            "tflops": flops(b, H, s, s, d, False) / (ms * 1e-3) / 1e12,
        }
        print(f"portable engine 201: d=128 S=2048 B=4: {portable['tflops']:.1f} TFLOP/s")
    except Exception as exc:
        portable = {"error": f"{type(exc).__name__}: {exc}"[:300]}

    out = {
        "command": " ".join([Path(sys.executable).name] + sys.argv),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "device": dev.name,
        "sms": dev.multi_processor_count,
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "plugin": str(plugin),
        "flops": "4*B*H*S*S*D, halved for causal",
        "timing": "CUDA events around N calls queued behind torch.cuda._sleep; median of 3 batches",
        "results": results,
        "portable": portable,
    }
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{args.tag}.json").write_text(json.dumps(out, indent=1))
    print(f"wrote {out_dir / (args.tag + '.json')}")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 4, figsize=(18, 4), sharey=True)
        for ax, (d, causal) in zip(axes, [(64, False), (64, True), (128, False), (128, True)]):
            rows = [r for r in results if r["hd"] == d and r["causal"] == causal]
            xs = [r["s"] for r in rows]
            curves = [
                ("ours", "hipdnn 202 (default: per-shape choice)"),
                ("ours_smax_override", "hipdnn 202, S_max plan + overrides"),
                ("flash", "torch flash"),
                ("cudnn", "torch cuDNN"),
            ]
            curves += [(f"ours_{k}", f"hipdnn 202 ({k})") for k in variants]
            for key, label in curves:
                ax.plot(xs, [r.get(key) or float("nan") for r in rows], marker="o", label=label)
            ax.set_xscale("log", base=2)
            ax.set_title(f"d={d} {'causal' if causal else 'full'}")
            ax.set_xlabel("S (B*S = 32768, H = 16)")
        axes[0].set_ylabel("TFLOP/s (bf16 forward)")
        axes[0].legend(fontsize=7)
        fig.suptitle(f"SDPA forward on {dev.name}")
        fig.tight_layout()
        fig.savefig(out_dir / f"{args.tag}.png", dpi=110)
        print(f"wrote {out_dir / (args.tag + '.png')}")
    except ImportError:
        pass


if __name__ == "__main__":
    main()
