"""Serving benchmarks: host overhead per execute, one plan for K sequence lengths versus K plans,
and build latency cold versus cached. Compared side by side with the anchors in ../shared/anchors.

    python bench/serving.py [--quick]

Writes bench/results/serving.json and, when matplotlib is installed, bench/results/serving.png.
Absolute times are noise on shared machines; the ratios are the result.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import hipdnn  # noqa: E402
from hipdnn.plugins.loader import ffi  # noqa: E402
from tests.fake_abi.fake_build import build_fake_plugins, load_fake  # noqa: E402

RESULTS = REPO / "bench" / "results"
ANCHORS = REPO.parent / "shared" / "anchors"


def per_call_us(fn: Callable[[], Any], calls: int, repeats: int = 5) -> float:
    """Median over repeats of the mean time per call, in microseconds."""
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(samples)


def sdpa_graph(b: int, h: int, s: int, d: int, overridable: bool) -> tuple[hipdnn.Graph, list[hipdnn.TensorAttributes]]:
    g = hipdnn.Graph(
        name=f"sdpa_s{s}",
        io_data_type=hipdnn.DataType.FLOAT,
        intermediate_data_type=hipdnn.DataType.FLOAT,
        compute_data_type=hipdnn.DataType.FLOAT,
        is_override_shape_enabled=overridable,
    )
    dims, strides = [b, h, s, d], [h * s * d, s * d, d, 1]
    q, k, v = (g.tensor(name=n, dim=dims, stride=strides, data_type=hipdnn.DataType.FLOAT) for n in "qkv")
    o, _ = g.sdpa(q, k, v, attn_scale=1.0 / np.sqrt(d), use_causal_mask=True)
    o.set_output(True)
    return g, [q, k, v, o]


def host_overhead(calls: int) -> dict[str, float]:
    """Per-execute host time with a plugin that computes nothing (the recording fake)."""
    build_dir = Path(tempfile.mkdtemp(prefix="hipdnn_bench_fakes_"))
    path = build_fake_plugins(build_dir)["fake_override_v110"]
    _, hooks = load_fake(path)
    handle = hipdnn.Handle(plugin_paths=[path], plugin_loading_mode=hipdnn.PluginLoadingMode.ABSOLUTE)
    g, tensors = sdpa_graph(1, 2, 64, 16, overridable=True)
    g.build(handle)
    arrays = [np.zeros((1, 2, 64, 16), np.float32) for _ in tensors]
    vp = dict(zip(tensors, arrays))
    ptrs = [a.ctypes.data for a in arrays]
    shapes = [[1, 2, 37, 16]] * 4
    strides = [[2 * 37 * 16, 37 * 16, 16, 1]] * 4
    overrides = {t: hipdnn.OverrideEntry(shape=s, stride=st) for t, s, st in zip(tensors, shapes, strides)}
    bound_plain = g.bind(handle, tensors)
    bound_over = g.bind(handle, tensors, override_uids=tensors)

    plan = g._require_plan()
    plugin = plan.plugin
    assert plugin is not None
    bare_fn = plugin.library._entries["hipdnnEnginePluginExecuteOpGraph"]
    bare_buffers = ffi.new("hipdnnPluginDeviceBuffer_t[]", 4)
    for i, (t, p) in enumerate(zip(tensors, ptrs)):
        bare_buffers[i].uid = t.get_uid()
        bare_buffers[i].ptr = ffi.cast("void*", p)

    def reset_every(fn: Callable[[], Any]) -> Callable[[], Any]:
        counter = [0]

        def wrapped() -> Any:
            counter[0] += 1
            if counter[0] % 2000 == 0:  # keep the fake's call log small
                hooks.fakePluginResetCallLog()
            return fn()

        return wrapped

    cases: dict[str, Callable[[], Any]] = {
        "bare_cffi_call": lambda: bare_fn(plugin.handle, plan.context, ffi.NULL, bare_buffers, 4),
        "bound_0_overrides": lambda: bound_plain(ptrs),
        "bound_4_overrides": lambda: bound_over(ptrs, 0, shapes, strides),
        "execute_0_overrides": lambda: g.execute(handle, vp),
        "execute_4_overrides": lambda: g.execute(handle, vp, overrides=overrides),
    }
    out = {name: per_call_us(reset_every(fn), calls) for name, fn in cases.items()}
    handle.close()
    return out


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
    args = parser.parse_args()
    calls = 2000 if args.quick else 20000
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
            "cpus": __import__("os").cpu_count(),
        },
        "host_overhead_us": overhead,
        "ratios": {
            "execute_4_overrides_vs_bare": overhead["execute_4_overrides"] / overhead["bare_cffi_call"],
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


if __name__ == "__main__":
    sys.exit(main())
