"""GPU decode attention: engine 202's split-KV decode path against PyTorch flash and cuDNN, one run.

Grid: B in {1, 8, 32, 64}, Skv in {512, 4096, 16384, 65536}, Sq in {1, 4}, (H, Hkv) in {(32, 8),
(32, 32)}, D in {64, 128}; bf16, bottom-right causal (the decode alignment), BHSD. Every hipdnn case
runs through one plan per (H, Hkv, D), built at B = 64, Sq = 16, Skv = 65536 and served through
shape overrides. GPU time per call comes from CUDA-graph replays of 20 calls (host time excluded);
when one call's K/V is small enough to sit in L2, the 20 calls rotate over 20 different K/V sets so
every call streams from device memory. Achieved bandwidth = K+V bytes / time, against a
device-to-device copy measured in the same run. A subset also times a plan built at the exact shape
(the max-shape penalty), and every case checks hipdnn's output against flash's.

    python bench/gpu_decode.py [--plugin PATH] [--quick] [--out bench/results]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import hipdnn  # noqa: E402
from tests.gpu.hip_support import TENSOR_CORE, find_plugin, sdpa_graph, workspace_for  # noqa: E402

B_LIST = [1, 8, 32, 64]
SKV_LIST = [512, 4096, 16384, 65536]
SQ_LIST = [1, 4]
HEADS = [(32, 8), (32, 32)]
D_LIST = [64, 128]
B_MAX, SQ_MAX, SKV_MAX = 64, 16, 65536
CALLS = 20  # calls per captured graph
L2_ROTATE_BYTES = 512 << 20  # below this, a call's K/V could stay cached: rotate over sets


def replay_us(record: Callable[[int], None], stream: torch.cuda.Stream, replays: int = 7) -> float:
    """Median GPU time per call of a CUDA graph of CALLS calls (record(i) enqueues call i)."""
    with torch.cuda.stream(stream):
        for i in range(2):  # warm-up outside the capture (module loads, workspace first touch)
            record(i)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for i in range(CALLS):
            record(i)
    graph.replay()
    torch.cuda.synchronize()
    times = []
    with torch.cuda.stream(stream):  # replay() launches into the current stream: time that one
        for _ in range(replays):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(stream)
            graph.replay()
            end.record(stream)
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) * 1e3 / CALLS)
    return statistics.median(times)


def copy_tbps() -> float:
    """Device-to-device copy bandwidth (bytes read + written per second), 4 GiB."""
    n = 2 << 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    for _ in range(2):
        b.copy_(a)
    torch.cuda.synchronize()
    ts = []
    for _ in range(5):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        b.copy_(a)
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) * 1e-3)
    del a, b
    return 2 * n / statistics.median(ts) / 1e12


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--plugin", default=None)
    ap.add_argument("--quick", action="store_true", help="a corner of the grid")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--tag", default="gpu_decode")
    ap.add_argument("--one", default=None, help="B,Hkv,Skv,Sq,D: build, run three times (for a profiler), exit")
    args = ap.parse_args()

    plugin = Path(args.plugin) if args.plugin else find_plugin()
    assert plugin is not None, "HIP engine plugin not found"
    stream = torch.cuda.Stream()
    handle = hipdnn.Handle(
        plugin_paths=[plugin], plugin_loading_mode=hipdnn.PluginLoadingMode.ABSOLUTE, stream=stream.cuda_stream
    )
    bf = hipdnn.DataType.BFLOAT16
    if args.one:
        b, hkv, skv, sq, d = (int(x) for x in args.one.split(","))
        g, t = sdpa_graph(
            bf, [b, 32, sq, d], [b, hkv, skv, d], "bhsd",
            causal=True, bottom_right=True, stats=False, scale=d**-0.5, engine=TENSOR_CORE,
        )  # fmt: skip
        g.build(handle)
        ws = workspace_for(g)
        q, o = (torch.randn(b, 32, sq, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        k, v = (torch.randn(b, hkv, skv, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        pack = {t["q"]: q.data_ptr(), t["k"]: k.data_ptr(), t["v"]: v.data_ptr(), t["o"]: o.data_ptr()}
        torch.cuda.synchronize()
        for _ in range(3):
            g.execute(handle, pack, None if ws is None else ws.data_ptr())
        torch.cuda.synchronize()
        return
    copy = copy_tbps()
    print(f"device-to-device copy: {copy:.2f} TB/s (read + write)", flush=True)
    b_list, skv_list = ([1, 32], [512, 16384]) if args.quick else (B_LIST, SKV_LIST)
    rows: list[dict[str, Any]] = []

    for hq, hkv in HEADS:
        for d in D_LIST:
            g_max, t_max = sdpa_graph(
                bf, [B_MAX, hq, SQ_MAX, d], [B_MAX, hkv, SKV_MAX, d], "bhsd",
                causal=True, bottom_right=True, stats=False, overridable=True, scale=d**-0.5, engine=TENSOR_CORE,
            )  # fmt: skip
            g_max.build(handle)
            assert g_max.get_engine_id() == TENSOR_CORE
            ws_max_buf = workspace_for(g_max)  # kept alive; passed as a pointer (no stream wait in a capture)
            ws_max = ws_max_buf.data_ptr() if ws_max_buf is not None else None
            kv_elems = max(b_list) * hkv * max(skv_list) * d
            k_all = torch.randn(kv_elems, device="cuda", dtype=torch.bfloat16)
            v_all = torch.randn(kv_elems, device="cuda", dtype=torch.bfloat16)
            for b in b_list:
                for skv in skv_list:
                    for sq in SQ_LIST:
                        case = b * hkv * skv * d
                        kv_bytes = 2 * case * 2
                        sets = max(1, min(CALLS, kv_elems // case)) if kv_bytes < L2_ROTATE_BYTES else 1
                        kv_dims, q_dims = [b, hkv, skv, d], [b, hq, sq, d]
                        kv_str = [hkv * skv * d, skv * d, d, 1]
                        q_str = [hq * sq * d, sq * d, d, 1]
                        ks = [k_all[i * case : (i + 1) * case].view(kv_dims) for i in range(sets)]
                        vs = [v_all[i * case : (i + 1) * case].view(kv_dims) for i in range(sets)]
                        q = torch.randn(q_dims, device="cuda", dtype=torch.bfloat16)
                        o = torch.full(q_dims, float("nan"), device="cuda", dtype=torch.bfloat16)
                        ov = {
                            t_max["q"]: hipdnn.OverrideEntry(shape=q_dims, stride=q_str),
                            t_max["k"]: hipdnn.OverrideEntry(shape=kv_dims, stride=kv_str),
                            t_max["v"]: hipdnn.OverrideEntry(shape=kv_dims, stride=kv_str),
                            t_max["o"]: hipdnn.OverrideEntry(shape=q_dims, stride=q_str),
                        }
                        packs = [
                            {
                                t_max["q"]: q.data_ptr(),
                                t_max["k"]: ks[i].data_ptr(),
                                t_max["v"]: vs[i].data_ptr(),
                                t_max["o"]: o.data_ptr(),
                            }
                            for i in range(sets)
                        ]
                        mask = None
                        if sq > 1:  # bottom-right alignment, as the plan
                            from torch.nn.attention.bias import causal_lower_right

                            mask = causal_lower_right(sq, skv)

                        def ours(i: int, packs: Any = packs, ov: Any = ov, g: Any = g_max, ws: Any = ws_max) -> None:
                            g.execute(handle, packs[i % len(packs)], ws, overrides=ov)

                        def torch_sdpa(
                            backend: Any, i: int, q: Any = q, ks: Any = ks, vs: Any = vs, m: Any = mask
                        ) -> Any:
                            with sdpa_kernel(backend):
                                j = i % len(ks)
                                return F.scaled_dot_product_attention(q, ks[j], vs[j], attn_mask=m, enable_gqa=True)

                        row: dict[str, Any] = {
                            "H": hq, "Hkv": hkv, "D": d, "B": b, "Skv": skv, "Sq": sq,
                            "kv_bytes": kv_bytes, "kv_sets_rotated": sets,
                        }  # fmt: skip
                        torch.cuda.synchronize()  # inputs and the NaN fill were queued on the default stream
                        ours(0)
                        ref = torch_sdpa(SDPBackend.FLASH_ATTENTION, 0)
                        torch.cuda.synchronize()
                        row["rel_err_vs_flash"] = float((o.float() - ref.float()).norm() / ref.float().norm())
                        row["unwritten"] = int(torch.isnan(o).sum())
                        for name, fn in (
                            ("ours", ours),
                            ("flash", lambda i: torch_sdpa(SDPBackend.FLASH_ATTENTION, i)),
                            ("cudnn", lambda i: torch_sdpa(SDPBackend.CUDNN_ATTENTION, i)),
                        ):
                            try:
                                us = replay_us(fn, stream)
                                row[name + "_us"] = us
                                row[name + "_TBps"] = kv_bytes / (us * 1e-6) / 1e12
                            except Exception as exc:  # a backend that does not take this shape
                                torch.cuda.synchronize()
                                row[name + "_us"] = None
                                row[name + "_error"] = f"{type(exc).__name__}: {exc}"[:160]
                        if sq == 1 and hkv == 8 and d == 128:  # the max-shape penalty, on the serving grouping
                            g_ex, t_ex = sdpa_graph(
                                bf, q_dims, kv_dims, "bhsd", causal=True, bottom_right=True, stats=False,
                                scale=d**-0.5, engine=TENSOR_CORE,
                            )  # fmt: skip
                            g_ex.build(handle)
                            ws_ex_buf = workspace_for(g_ex)
                            ws_ex = ws_ex_buf.data_ptr() if ws_ex_buf is not None else None
                            ex_packs = [{t_ex[n]: p[t_max[n]] for n in ("q", "k", "v", "o")} for p in packs]

                            def exact(i: int, ex_packs: Any = ex_packs, g_ex: Any = g_ex, ws_ex: Any = ws_ex) -> None:
                                g_ex.execute(handle, ex_packs[i % len(ex_packs)], ws_ex)

                            row["ours_exact_plan_us"] = replay_us(exact, stream)
                            row["max_shape_penalty"] = row["ours_us"] / row["ours_exact_plan_us"] - 1.0
                        if row.get("ours_us") and row.get("flash_us"):
                            row["speedup_vs_flash"] = row["flash_us"] / row["ours_us"]
                        if row.get("ours_us") and row.get("cudnn_us"):
                            row["speedup_vs_cudnn"] = row["cudnn_us"] / row["ours_us"]
                        row["fraction_of_copy"] = row["ours_TBps"] / copy if row.get("ours_us") else None
                        rows.append(row)
                        print(
                            f"H={hq} Hkv={hkv:2d} D={d:3d} B={b:2d} Skv={skv:5d} Sq={sq}  "
                            f"ours {row['ours_us'] or 0:8.1f} us {row.get('ours_TBps') or 0:4.2f} TB/s  "
                            f"flash {row.get('flash_us') or 0:8.1f}  cudnn {row.get('cudnn_us') or 0:8.1f}  "
                            f"x{row.get('speedup_vs_flash') or 0:4.2f} flash  err {row['rel_err_vs_flash']:.1e}"
                            + (f"  penalty {row['max_shape_penalty']:+.1%}" if "max_shape_penalty" in row else ""),
                            flush=True,
                        )
                        del ks, vs, q, o, ref
            del k_all, v_all
            torch.cuda.empty_cache()
            partial = Path(args.out) / f"{args.tag}.partial.json"
            partial.parent.mkdir(parents=True, exist_ok=True)
            partial.write_text(json.dumps({"copy_TBps": copy, "rows": rows}, indent=1))  # survives a cut-off run

    ratios = [r["speedup_vs_flash"] for r in rows if r.get("speedup_vs_flash")]
    big = [r["fraction_of_copy"] for r in rows if r["kv_bytes"] > 256e6 and r.get("fraction_of_copy")]
    pen = [r["max_shape_penalty"] for r in rows if "max_shape_penalty" in r]
    summary = {
        "min_speedup_vs_flash": min(ratios) if ratios else None,
        "median_speedup_vs_flash": statistics.median(ratios) if ratios else None,
        "min_fraction_of_copy_above_256MB": min(big) if big else None,
        "max_shape_penalty_range": [min(pen), max(pen)] if pen else None,
        "max_rel_err_vs_flash": max(r["rel_err_vs_flash"] for r in rows),
        "unwritten_outputs": sum(r["unwritten"] for r in rows),
    }
    out = {
        "command": " ".join([Path(sys.executable).name] + sys.argv),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "copy_TBps": copy,
        "timing": f"CUDA-graph replay of {CALLS} calls, median of 7 replays; K/V rotated over sets below 512 MB",
        "summary": summary,
        "rows": rows,
    }
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{args.tag}.json").write_text(json.dumps(out, indent=1))
    print(json.dumps(summary, indent=1))
    with contextlib.suppress(ImportError):  # no matplotlib: the JSON alone
        plot(rows, copy, out_dir / f"{args.tag}.png")


def plot(rows: list[dict[str, Any]], copy: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 9), sharey=True)
    for ax, (hkv, d) in zip(axes.flat, [(8, 64), (8, 128), (32, 64), (32, 128)]):
        for b, color in zip(B_LIST, ["tab:blue", "tab:orange", "tab:green", "tab:red"]):
            sel = sorted((r for r in rows if r["Hkv"] == hkv and r["D"] == d and r["B"] == b and r["Sq"] == 1),
                         key=lambda r: r["Skv"])  # fmt: skip
            if not sel:
                continue
            xs = [r["Skv"] for r in sel]
            ax.plot(xs, [r.get("ours_TBps") or 0 for r in sel], "-o", color=color, label=f"hipdnn B={b}")
            ax.plot(xs, [r.get("flash_TBps") or 0 for r in sel], "--x", color=color, label=f"flash B={b}")
        ax.axhline(copy, color="grey", lw=0.8, ls=":", label="d2d copy (read+write)")
        ax.set_xscale("log", base=2)
        ax.set_title(f"H=32, Hkv={hkv}, D={d}, Sq=1, bf16")
        ax.set_xlabel("KV length")
        ax.set_ylabel("K+V bytes / GPU time (TB/s)")
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=7, ncol=2)
    fig.suptitle("Decode attention on the H200: one max-shape hipdnn plan vs PyTorch flash (enable_gqa)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
