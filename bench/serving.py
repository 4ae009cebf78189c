"""Serving benchmarks: host overhead per execute, one plan for K sequence lengths versus K plans,
and build latency cold versus cached. Compared side by side with the anchors in ../shared/anchors.

    python bench/serving.py [--quick]        # this machine: no-op plugin, numpy arrays
    python bench/serving.py --gpu [--quick]  # a CUDA machine: GPU engine, torch CUDA tensors

Writes bench/results/serving.json (serving_gpu.json with --gpu) and, when matplotlib is installed,
a plot. Absolute times are noise on shared machines; the ratios are the result: host time per call
against a bare cffi call of getpid() in the same run (this machine), against PyTorch's SDPA call on
the same tensors (GPU). Only the public API is used; the no-op plugin is built from the SDK's
example with hipdnn.sdk.build_plugin.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cffi
import numpy as np

import hipdnn
from hipdnn import sdk

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
ANCHORS = REPO.parent / "shared" / "anchors"

#: issue #11's targets: (absolute us, ratio to the bare cffi call)
TARGETS = {"execute_4_overrides": (15.0, 40.0), "bound_4_overrides": (2.0, 6.0)}


def per_call_us(fn: Callable[[], Any], calls: int, repeats: int = 7) -> float:
    """Median over repeats of the mean time per call, in microseconds."""
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(samples)


def sdpa_graph(
    b: int, h: int, s: int, d: int, overridable: bool, data_type: hipdnn.DataType = hipdnn.DataType.FLOAT
) -> tuple[hipdnn.Graph, list[hipdnn.TensorAttributes]]:
    g = hipdnn.Graph(
        name=f"sdpa_s{s}",
        io_data_type=data_type,
        intermediate_data_type=hipdnn.DataType.FLOAT,
        compute_data_type=hipdnn.DataType.FLOAT,
        is_override_shape_enabled=overridable,
    )
    dims, strides = [b, h, s, d], [h * s * d, s * d, d, 1]
    q, k, v = (g.tensor(name=n, dim=dims, stride=strides, data_type=data_type) for n in "qkv")
    o, _ = g.sdpa(q, k, v, attn_scale=1.0 / np.sqrt(d), use_causal_mask=True)
    o.set_output(True)
    return g, [q, k, v, o]


def bare_cffi_call() -> Callable[[], Any]:
    """The yardstick: one cffi call of an argument-less C function."""
    ffi = cffi.FFI()
    ffi.cdef("int getpid(void);")
    return ffi.dlopen(None).getpid  # type: ignore[no-any-return]


def host_overhead(calls: int) -> dict[str, float]:
    """Per-execute host time with a plugin that computes nothing (the SDK's no-op example)."""
    build_dir = Path(tempfile.mkdtemp(prefix="hipdnn_bench_noop_"))
    path = sdk.build_plugin([sdk.example_source("noop")], build_dir / "libhipdnn_noop.so")
    handle = hipdnn.Handle(plugin_paths=[path], plugin_loading_mode=hipdnn.PluginLoadingMode.ABSOLUTE)
    g, tensors = sdpa_graph(1, 2, 64, 16, overridable=True)
    g.build(handle)
    arrays = [np.zeros((1, 2, 64, 16), np.float32) for _ in tensors]
    vp = dict(zip(tensors, arrays))
    # with overrides, arrays of the call's shape: a value states its shape, which must be the call's
    vp_37 = {t: np.zeros((1, 2, 37, 16), np.float32) for t in tensors}
    ptrs = [int(a.ctypes.data) for a in arrays]
    shapes = [[1, 2, 37, 16]] * 4
    strides = [[2 * 37 * 16, 37 * 16, 16, 1]] * 4
    overrides = {t: hipdnn.OverrideEntry(shape=s, stride=st) for t, s, st in zip(tensors, shapes, strides)}
    bound_plain = g.bind(handle, tensors)
    bound_over = g.bind(handle, tensors, override_uids=tensors)
    cases: dict[str, Callable[[], Any]] = {
        "bare_cffi_call": bare_cffi_call(),
        "bound_0_overrides": lambda: bound_plain(ptrs),
        "bound_4_overrides": lambda: bound_over(ptrs, 0, shapes, strides),
        "execute_0_overrides": lambda: g.execute(handle, vp),
        "execute_4_overrides": lambda: g.execute(handle, vp_37, None, overrides),
        "execute_4_overrides_parallel_form": lambda: g.execute(handle, vp_37, None, tensors, shapes, strides),
    }
    out = {name: per_call_us(fn, calls) for name, fn in cases.items()}
    handle.close()
    return out


def gpu_host_overhead(calls: int) -> dict[str, Any]:
    """Host time per call on a CUDA machine, no synchronization inside the timed loop: the GPU engine
    with torch CUDA tensors and 4 overrides, beside PyTorch's SDPA call on the same tensors."""
    import torch
    import torch.nn.functional as F

    b, h, s_max, d, s = 1, 8, 2048, 64, 37
    stream = torch.cuda.current_stream()
    handle = hipdnn.Handle(stream=stream.cuda_stream)
    g, tensors = sdpa_graph(b, h, s_max, d, overridable=True, data_type=hipdnn.DataType.BFLOAT16)
    g.build(handle)
    engine = g.get_engine_id()
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    o = torch.empty_like(q)
    ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
    dims, strides = [b, h, s, d], [h * s * d, s * d, d, 1]
    vp = dict(zip(tensors, (q, k, v, o)))
    overrides = {t: hipdnn.OverrideEntry(dims, strides) for t in tensors}
    ptrs = [x.data_ptr() for x in (q, k, v, o)]
    bound = g.bind(handle, tensors, override_uids=tensors)
    shapes, stride_list = [dims] * 4, [strides] * 4
    g.execute(handle, vp, ws, overrides)
    torch.cuda.synchronize()
    want = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    err = float((o.float() - want).abs().max())

    def timed(fn: Callable[[], Any], n: int) -> float:
        samples = []
        for _ in range(9):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            samples.append((time.perf_counter() - t0) / n * 1e6)  # host time only: no sync inside
        torch.cuda.synchronize()
        return statistics.median(samples)

    n = min(calls, 200)  # well under the launch queue's depth, so no call waits for the GPU
    tiny = torch.zeros(1, device="cuda")
    bound_plain = g.bind(handle, tensors)
    full_ptrs = [
        x.data_ptr() for x in (torch.empty(b, h, s_max, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    ]
    cases: dict[str, Callable[[], Any]] = {
        "bare_cffi_call": bare_cffi_call(),
        # floors: what one kernel launch costs the host here, through torch and through a bare launch
        "torch_one_kernel_op": lambda: tiny.add_(1),
        "torch_sdpa": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        "execute_4_overrides_torch_tensors": lambda: g.execute(handle, vp, ws, overrides),
        "execute_4_overrides_int_pointers": lambda: g.execute(
            handle, dict(zip(tensors, ptrs)), ws.data_ptr(), overrides
        ),
        "bound_4_overrides": lambda: bound(ptrs, ws.data_ptr(), shapes, stride_list),
        "bound_0_overrides_full_length": lambda: bound_plain(full_ptrs, ws.data_ptr()),
    }
    try:
        import cupy

        empty = cupy.RawKernel(r'extern "C" __global__ void hipdnn_empty() {}', "hipdnn_empty")
        empty((1,), (1,), ())  # compiled and loaded before timing
        cases["cupy_empty_kernel_launch"] = lambda: empty((1,), (1,), ())
    except Exception as exc:  # cupy is optional: the torch floor remains
        print(f"  (no cupy floor: {exc})")
    times = {name: timed(fn, n) for name, fn in cases.items()}
    floor = times.get("cupy_empty_kernel_launch", times["torch_one_kernel_op"])
    handle.close()
    return {
        "engine": engine,
        "shape": {"b": b, "h": h, "s_max": s_max, "s": s, "d": d, "dtype": "bf16", "causal": True},
        "max_abs_error_vs_torch": err,
        "host_us": times,
        "ratios": {
            "execute_torch_tensors_vs_torch_sdpa": times["execute_4_overrides_torch_tensors"] / times["torch_sdpa"],
            "execute_int_pointers_vs_torch_sdpa": times["execute_4_overrides_int_pointers"] / times["torch_sdpa"],
            "bound_vs_torch_sdpa": times["bound_4_overrides"] / times["torch_sdpa"],
        },
        #: host time above one bare kernel launch: what hipdnn itself adds
        "above_launch_floor_us": {
            "execute_4_overrides_torch_tensors": times["execute_4_overrides_torch_tensors"] - floor,
            "bound_4_overrides": times["bound_4_overrides"] - floor,
            "torch_sdpa": times["torch_sdpa"] - floor,
        },
        "targets": {"execute_vs_torch_sdpa": 1.0, "bound_us": 5.0},
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(),
    }


def serving_curve(ks: list[int], s_max: int, h: int, d: int) -> list[dict[str, float]]:
    """Time to serve K distinct sequence lengths: one plan at S_max plus K override executes, versus a
    fresh graph and plan per length (cache cleared so every build is cold) plus K executes."""
    handle = hipdnn.Handle()
    rng = np.random.default_rng(0)
    rows = []
    for k in ks:
        lengths = sorted(rng.choice(np.arange(1, s_max + 1), size=k, replace=False).tolist())
        data = {s: [rng.standard_normal((1, h, s, d)).astype(np.float32) for _ in range(4)] for s in lengths}

        handle.backend.plan_cache.clear()
        t0 = time.perf_counter()
        g, tensors = sdpa_graph(1, h, s_max, d, overridable=True)
        g.build(handle)
        ws = np.empty(max(g.get_workspace_size(), 1), np.uint8)
        for s in lengths:
            dims, strides = [1, h, s, d], [h * s * d, s * d, d, 1]
            g.execute(
                handle,
                dict(zip(tensors, data[s])),
                ws,
                overrides={t: hipdnn.OverrideEntry(dims, strides) for t in tensors},
            )
        one_plan = time.perf_counter() - t0

        handle.backend.plan_cache.clear()
        t0 = time.perf_counter()
        build_total = 0.0
        for s in lengths:
            tb = time.perf_counter()
            gs, ts = sdpa_graph(1, h, s, d, overridable=False)
            gs.build(handle)
            build_total += time.perf_counter() - tb
            ws = np.empty(max(gs.get_workspace_size(), 1), np.uint8)
            gs.execute(handle, dict(zip(ts, data[s])), ws)
        k_plans = time.perf_counter() - t0
        rows.append(
            {
                "K": k,
                "one_plan_s": one_plan,
                "k_plans_s": k_plans,
                "k_plans_build_s": build_total,
                "speedup": k_plans / one_plan,
            }
        )
        print(
            f"  K={k:4d}: one plan {one_plan * 1e3:8.1f} ms, K plans {k_plans * 1e3:8.1f} ms "
            f"(builds {build_total * 1e3:7.1f} ms) -> {k_plans / one_plan:5.2f}x"
        )
    handle.close()
    return rows


def build_latency(repeats: int) -> dict[str, float]:
    handle = hipdnn.Handle()
    cold, cached = [], []
    for i in range(repeats):
        handle.backend.plan_cache.clear()
        g, _ = sdpa_graph(1, 8, 1024 + i, 64, overridable=True)
        t0 = time.perf_counter()
        g.build(handle)
        cold.append((time.perf_counter() - t0) * 1e3)
        g2, _ = sdpa_graph(1, 8, 1024 + i, 64, overridable=True)
        t0 = time.perf_counter()
        g2.build(handle)
        cached.append((time.perf_counter() - t0) * 1e3)
    stats = handle.backend.plan_cache.stats()
    handle.close()
    return {
        "cold_ms": statistics.median(cold),
        "cached_ms": statistics.median(cached),
        "cache_hits": stats.hits,
        "cache_misses": stats.misses,
    }


def plot(result: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows = result["serving_curve"]
    ks = [r["K"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    ax1.plot(ks, [r["one_plan_s"] * 1e3 for r in rows], "o-", label="one plan at S_max + K override executes")
    ax1.plot(ks, [r["k_plans_s"] * 1e3 for r in rows], "s-", label="K graphs + K plans + K executes")
    ax1.set_xscale("log", base=2)
    ax1.set_yscale("log")
    ax1.set_xlabel("distinct sequence lengths served (K)")
    ax1.set_ylabel("total time (ms)")
    ax1.set_title("Serving K sequence lengths, CPU engine")
    ax1.legend(fontsize=8)
    names = list(result["host_overhead_us"])
    ax2.barh(names, [result["host_overhead_us"][n] for n in names])
    anchor = result.get("anchors", {}).get("cudnn_frontend_execute_us")
    if anchor:
        ax2.axvline(anchor, color="red", linestyle="--", label=f"cudnn-frontend pygraph.execute ({anchor} us)")
        ax2.legend(fontsize=8)
    ax2.set_xlabel("host time per execute (us), no-op plugin")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return True


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer calls and sizes")
    parser.add_argument("--gpu", action="store_true", help="host overhead on a CUDA machine (GPU engine, torch)")
    args = parser.parse_args()
    calls = 2000 if args.quick else 20000
    if args.gpu:
        return gpu_main(args.quick)
    ks = [1, 2, 4, 8, 16] if args.quick else [1, 2, 4, 8, 16, 32, 64, 128]
    anchors: dict[str, Any] = {}
    anchor_file = ANCHORS / "h200-cudnn-frontend-2026-11-30.json"
    if anchor_file.exists():
        cf = json.loads(anchor_file.read_text())
        anchors = {
            "cudnn_frontend_execute_us": cf.get("execute_us"),
            "cudnn_frontend_build_ms_first_cold": cf.get("build_ms", [None])[0],
            "cudnn_frontend_build_ms_new_length": statistics.median(cf.get("build_ms", [0])[1:] or [0]),
        }
    print("host overhead per execute (us), no-op plugin:")
    overhead = host_overhead(calls)
    for name, us in overhead.items():
        print(f"  {name:22s} {us:7.2f}")
    print("serving K sequence lengths (CPU engine, causal SDPA, H=4, D=64, S_max=512):")
    curve = serving_curve(ks, 512, 4, 64)
    print("build latency of an SDPA graph:")
    latency = build_latency(5 if args.quick else 15)
    print(f"  cold {latency['cold_ms']:.2f} ms, cached {latency['cached_ms']:.3f} ms")
    result = {
        "command": "python bench/serving.py" + (" --quick" if args.quick else ""),
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
        },
        "host_overhead_us": overhead,
        "targets": {name: {"us": us, "ratio_to_bare_cffi_call": r} for name, (us, r) in TARGETS.items()},
        "met": {
            name: overhead[name] <= us and overhead[name] / overhead["bare_cffi_call"] <= r
            for name, (us, r) in TARGETS.items()
        },
        "ratios": {
            "execute_4_overrides_vs_bare": overhead["execute_4_overrides"] / overhead["bare_cffi_call"],
            "execute_0_overrides_vs_bare": overhead["execute_0_overrides"] / overhead["bare_cffi_call"],
            "bound_4_overrides_vs_bare": overhead["bound_4_overrides"] / overhead["bare_cffi_call"],
            "cudnn_frontend_execute_vs_our_bound_4_overrides": (
                anchors["cudnn_frontend_execute_us"] / overhead["bound_4_overrides"]
            )
            if anchors.get("cudnn_frontend_execute_us")
            else None,
            "cudnn_frontend_new_length_build_vs_our_cold_build": (
                anchors["cudnn_frontend_build_ms_new_length"] / latency["cold_ms"]
            )
            if anchors.get("cudnn_frontend_build_ms_new_length")
            else None,
        },
        "serving_curve": curve,
        "build_latency": latency,
        "anchors": anchors,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = "serving_quick" if args.quick else "serving"  # a quick run never replaces the full results
    (RESULTS / f"{stem}.json").write_text(json.dumps(result, indent=2) + "\n")
    plotted = plot(result, RESULTS / f"{stem}.png")
    print(f"wrote {RESULTS / (stem + '.json')}" + (f" and {RESULTS / (stem + '.png')}" if plotted else " (no plot)"))
    return 0


def gpu_main(quick: bool) -> int:
    result = gpu_host_overhead(200 if quick else 2000)
    quick_flag = " --quick" if quick else ""
    result["command"] = f"bash bench/run_serving_gpu.sh{quick_flag}  (python bench/serving.py --gpu{quick_flag})"
    result["machine"] = {"platform": platform.platform(), "python": platform.python_version()}
    anchor_file = ANCHORS / "h200-cudnn-frontend-2026-11-30.json"
    if anchor_file.exists():
        result["anchors"] = {"cudnn_frontend_execute_us": json.loads(anchor_file.read_text()).get("execute_us")}
    for name, us in result["host_us"].items():
        print(f"  {name:36s} {us:7.2f} us")
    for name, r in result["ratios"].items():
        print(f"  {name:36s} {r:7.2f}x")
    for name, us in result["above_launch_floor_us"].items():
        print(f"  above one launch: {name:36s} {us:7.2f} us")
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = "serving_gpu_quick" if quick else "serving_gpu"
    (RESULTS / f"{stem}.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULTS / (stem + '.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
