"""The ``hipdnn`` command line (also ``python -m hipdnn``)."""

from __future__ import annotations

import argparse
import ctypes.util
import dataclasses
import functools
import json
import logging
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from enum import Enum, IntEnum
from pathlib import Path
from typing import Any

import numpy as np

import hipdnn
from hipdnn import reference
from hipdnn.backend.graph_summary import summarize
from hipdnn.plugins import printable


def _shown(value: object) -> str:
    """A plugin string or a path, with control characters escaped (JSON output escapes its own)."""
    return printable(str(value))


def _device_choice(handle: hipdnn.Handle) -> hipdnn.DeviceChoice:
    """Which device ``handle`` runs graphs on and why, with the GPU count hipdnn.device sees (when a
    GPU runtime is installed; without one, the GPU engine's own applicability decides)."""
    import hipdnn.device as hd

    try:
        gpus: int | None = len(hd.devices())
    except hipdnn.HipdnnError:
        gpus = None
    return handle.device_choice(gpus)


def _plugins(args: argparse.Namespace) -> int:
    handle = hipdnn.Handle()
    loaded = handle.loaded_plugins()
    skipped = handle.skipped_plugins()
    choice = _device_choice(handle)
    if args.json:
        print(
            json.dumps(
                {
                    "search_paths": [str(p) for p in handle.plugin_search_paths],
                    "loaded": [asdict(p) for p in loaded],
                    "skipped": [{"path": str(s.path), "reason": s.reason} for s in skipped],
                    "device": asdict(choice),
                },
                indent=2,
            )
        )
        return 0
    # Plugin strings and file names are shown escaped (printable): they must not drive the terminal.
    print("search paths: " + (", ".join(_shown(p) for p in handle.plugin_search_paths) or "(none)"))
    for p in loaded:
        optional = ", ".join(
            e.removeprefix("hipdnnPlugin").removeprefix("hipdnnEnginePlugin") for e in p.optional_entries
        )
        print(f"loaded  {_shown(p.name)} {_shown(p.version)} (api {p.api_version}) engines {list(p.engine_ids)}")
        print(f"        {_shown(p.path)}")
        print(f"        optional entries: {optional or 'none'}; sha256 {p.fingerprint.sha256[:16]}")
    for s in skipped:
        print(f"skipped {_shown(s.path)}: {_shown(s.reason)}")
    print(f"device: hipdnn.Handle() runs graphs on the {choice}")
    print(f"{len(loaded)} loaded, {len(skipped)} skipped")
    return 0


def _sdpa_graph(
    b: int,
    h: int,
    s: int,
    d: int,
    causal: bool,
    overridable: bool,
    io: hipdnn.DataType = hipdnn.DataType.FLOAT,
    preferred_engine_id: int | None = None,
) -> tuple[hipdnn.Graph, dict[str, hipdnn.TensorAttributes]]:
    g = hipdnn.Graph(
        name="demo_sdpa",
        io_data_type=io,
        intermediate_data_type=hipdnn.DataType.FLOAT,
        compute_data_type=hipdnn.DataType.FLOAT,
        is_override_shape_enabled=overridable,
        preferred_engine_id=preferred_engine_id,
    )
    dims, strides = [b, h, s, d], [h * s * d, s * d, d, 1]
    q = g.tensor(name="q", dim=dims, stride=strides, data_type=io)
    k = g.tensor(name="k", dim=dims, stride=strides, data_type=io)
    v = g.tensor(name="v", dim=dims, stride=strides, data_type=io)
    o, _ = g.sdpa(q, k, v, attn_scale=1.0 / np.sqrt(d), use_causal_mask=causal, name="attention")
    o.set_output(True)
    return g, {"q": q, "k": k, "v": v, "o": o}


def _check_seq_lens(args: argparse.Namespace) -> str | None:
    """Why the demo's lengths cannot all be served by its plan, or None."""
    if args.max_seq_len < 1:
        return f"--max-seq-len {args.max_seq_len}: must be at least 1"
    outside = [s for s in args.seq_lens if not 1 <= s <= args.max_seq_len]
    if outside:
        return (
            f"--seq-lens {' '.join(map(str, outside))}: a plan built at --max-seq-len {args.max_seq_len} serves "
            f"lengths 1 to {args.max_seq_len}; pass --max-seq-len {max(max(outside), args.max_seq_len)} to serve them"
        )
    return None


def _demo(args: argparse.Namespace) -> int:
    """Build an SDPA graph, run it on the CPU engine, check it against float64 numpy."""
    problem = _check_seq_lens(args)
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    if args.device == "gpu":
        return _demo_gpu(args)
    rng = np.random.default_rng(0)
    handle = hipdnn.Handle()
    names = [p.name for p in handle.loaded_plugins()]
    print(f"plugins loaded: {', '.join(names) or 'none'}")
    b, h, d, s_max = 1, 4, 64, args.max_seq_len
    t0 = time.perf_counter()
    g, t = _sdpa_graph(b, h, s_max, d, causal=True, overridable=True)
    g.build(handle)
    build_ms = (time.perf_counter() - t0) * 1e3
    print(
        f"built causal SDPA graph at B={b} H={h} S={s_max} D={d} in {build_ms:.1f} ms "
        f"on engine {g.get_engine_id()}; workspace {g.get_workspace_size()} bytes"
    )
    workspace = np.empty(max(g.get_workspace_size(), 1), dtype=np.uint8)

    def run(s: int) -> tuple[list[np.ndarray[Any, Any]], float]:
        q, k, v = (rng.standard_normal((b, h, s, d)).astype(np.float32) for _ in range(3))
        o = np.full((b, h, s, d), np.nan, dtype=np.float32)
        compact = [h * s * d, s * d, d, 1]
        t0 = time.perf_counter()
        g.execute(
            handle,
            {t["q"]: q, t["k"]: k, t["v"]: v, t["o"]: o},
            workspace,
            overrides={t[n]: hipdnn.OverrideEntry(shape=[b, h, s, d], stride=compact) for n in "qkvo"},
        )
        return [q, k, v, o], (time.perf_counter() - t0) * 1e3

    # One untimed call first: the first execute pays one-off costs (thread pool start, page faults)
    # that would otherwise be charged to the first length shown.
    run(args.seq_lens[0])
    worst = 0.0
    for s in args.seq_lens:
        (q, k, v, o), run_ms = run(s)
        expected, _ = reference.sdpa(q, k, v, 1.0 / np.sqrt(d), causal=True)
        err = reference.relative_error(o, expected)
        worst = max(worst, err)
        print(f"  S={s:5d}: one plan, overridden shape, {run_ms:7.2f} ms, relative error vs float64 {err:.2e}")
    ok = worst < 1e-5
    served = ", ".join(map(str, args.seq_lens))
    print(
        ("OK" if ok else "FAILED")
        + f": S = {served} served by one plan built at S={s_max}; worst relative error {worst:.2e}"
    )
    return 0 if ok else 1


#: GPU demo element types: (graph data type, numpy dtype name, worst relative error accepted). The
#: kernels round P to the input type before P V and the output to it: a few ulps of the type.
_GPU_DTYPES = {"fp16": (hipdnn.DataType.HALF, "float16", 4e-3), "bf16": (hipdnn.DataType.BFLOAT16, "bfloat16", 1.6e-2)}
_GPU_ENGINES = (202, 201)  # the HIP engine's tensor-core and portable engines


def _demo_gpu(args: argparse.Namespace) -> int:
    """The same max-shape plan on the HIP engine, with inputs and outputs in hipdnn.device buffers (no
    torch): every length is copied out and checked against float64 numpy on the host."""
    import hipdnn.device as hd  # GPU runtime bindings: only on this path

    io, np_name, tol = _GPU_DTYPES[args.dtype]
    if np_name == "bfloat16":
        try:
            import ml_dtypes
        except ImportError as exc:
            raise hipdnn.HipdnnError(
                hipdnn.ErrorCode.INVALID_VALUE, "--dtype bf16 needs ml_dtypes (pip install ml_dtypes)"
            ) from exc
        np_dtype: np.dtype[Any] = np.dtype(ml_dtypes.bfloat16)
    else:
        np_dtype = np.dtype(np_name)
    gpus = hd.devices()
    if not gpus:
        _, why = hd.runtime().device_count()
        print(f"error: {hd.runtime().package} sees no GPU ({why or 'device count 0'})", file=sys.stderr)
        return 2
    gpu = gpus[0]
    print(f"device 0: {gpu.name} ({gpu.arch}, {gpu.total_memory / 2**30:.0f} GiB) through {gpu.runtime}")
    rng = np.random.default_rng(0)
    with hd.Stream() as stream:
        handle = hipdnn.Handle(stream=stream.handle)
        try:
            offered = {e for p in handle.loaded_plugins() for e in p.engine_ids}
            if not offered & set(_GPU_ENGINES):
                print("error: the HIP engine (201/202) is not loaded: " + _skipped_text(handle), file=sys.stderr)
                return 2
            b, h, d, s_max = 1, 4, 64, args.max_seq_len
            t0 = time.perf_counter()
            # No preferred engine: a preferred one is used or refused, and 202 does not apply on every
            # GPU; device engines rank first, and the check below catches any other choice.
            g, t = _sdpa_graph(b, h, s_max, d, causal=True, overridable=True, io=io)
            g.build(handle)
            build_ms = (time.perf_counter() - t0) * 1e3
            if g.get_engine_id() not in _GPU_ENGINES:
                print(f"error: engine {g.get_engine_id()} took the graph, not the HIP engine", file=sys.stderr)
                return 2
            print(
                f"built causal SDPA graph ({args.dtype}) at B={b} H={h} S={s_max} D={d} in {build_ms:.1f} ms "
                f"on engine {g.get_engine_id()}; workspace {g.get_workspace_size()} bytes"
            )
            workspace = hd.empty(max(g.get_workspace_size(), 1), np.uint8)
            # One untimed call first (module load, first launch), so the first length shown is not charged for it.
            s0 = args.seq_lens[0]
            compact0 = [h * s0 * d, s0 * d, d, 1]
            warm = {n: hd.empty((b, h, s0, d), np_dtype).fill_bytes(0, stream=stream) for n in "qkvo"}
            g.execute(
                handle,
                {t[n]: warm[n] for n in "qkvo"},
                workspace,
                overrides={t[n]: hipdnn.OverrideEntry(shape=[b, h, s0, d], stride=compact0) for n in "qkvo"},
            )
            stream.synchronize()
            for buf in warm.values():
                buf.free()
            worst = 0.0
            for s in args.seq_lens:
                host = {n: rng.standard_normal((b, h, s, d)).astype(np_dtype) for n in "qkv"}
                bufs = {n: hd.to_device(a, stream=stream) for n, a in host.items()}
                bufs["o"] = hd.empty((b, h, s, d), np_dtype).fill_bytes(0xFF, stream=stream)  # NaN until written
                compact = [h * s * d, s * d, d, 1]
                t0 = time.perf_counter()
                g.execute(
                    handle,
                    {t[n]: bufs[n] for n in "qkvo"},
                    workspace,
                    overrides={t[n]: hipdnn.OverrideEntry(shape=[b, h, s, d], stride=compact) for n in "qkvo"},
                )
                out = bufs["o"].to_numpy(stream=stream)  # queued behind the kernel on the handle's stream
                run_ms = (time.perf_counter() - t0) * 1e3
                q64, k64, v64 = (host[n].astype(np.float64) for n in "qkv")
                expected, _ = reference.sdpa(q64, k64, v64, 1.0 / np.sqrt(d), causal=True)
                err = reference.relative_error(out.astype(np.float64), expected)
                worst = max(worst, err)
                print(
                    f"  S={s:5d}: one plan, overridden shape, {run_ms:7.2f} ms with copy-out, relative error {err:.2e}"
                )
                for buf in bufs.values():
                    buf.free()
            workspace.free()
        finally:
            handle.close()
    ok = worst < tol
    print(
        ("OK" if ok else "FAILED")
        + f": every sequence length served by one plan on the GPU; worst relative error {worst:.2e} (limit {tol:.0e})"
    )
    return 0 if ok else 1


def _skipped_text(handle: hipdnn.Handle) -> str:
    skipped = [f"{_shown(s.path)}: {_shown(s.reason)}" for s in handle.skipped_plugins()]
    return "; ".join(skipped) or "no plugin was skipped (was the package built without a GPU compiler?)"


class Stage(IntEnum):
    """Pipeline stages ``inspect --emit`` can stop at, in order."""

    PARSED = 0
    VALIDATED = 1
    LOWERED = 2
    PLANNED = 3


def _json_value(value: Any) -> Any:
    if isinstance(value, hipdnn.TensorAttributes):
        return {"uid": value.get_uid(), "name": value.get_name()}
    if isinstance(value, Enum):
        return value.name
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        # an options object (e.g. the SDPA attributes): its fields, each shown the same way
        return {f.name: _json_value(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return value


def _tensor_uids(attributes: dict[str, Any]) -> dict[str, int]:
    """The tensors a node's attributes name (as _json_value shows them), options objects included."""
    found: dict[str, int] = {}
    for key, value in attributes.items():
        if isinstance(value, dict) and isinstance(value.get("uid"), int):
            found[key] = value["uid"]
        elif isinstance(value, dict):
            found.update(_tensor_uids(value))
    return found


def graph_to_dict(g: hipdnn.Graph) -> dict[str, Any]:
    """A readable, JSON-ready view of a graph."""
    return {
        "name": g.name,
        "io_data_type": g.io_data_type.name,
        "intermediate_data_type": g.intermediate_data_type.name,
        "compute_data_type": g.compute_data_type.name,
        "is_override_shape_enabled": g.is_override_shape_enabled(),
        "preferred_engine_id": g.preferred_engine_id,
        "tensors": [
            {
                "uid": t.get_uid(),
                "name": t.get_name(),
                "data_type": t.get_data_type().name,
                "dim": t.get_dim(),
                "stride": t.get_stride(),
                "virtual": t.get_is_virtual(),
                "dynamic": t.is_dynamic(),
                **({"ragged_offset": off.get_uid()} if (off := t.get_ragged_offset()) is not None else {}),
            }
            for t in g.tensors
        ],
        "nodes": [
            {
                "name": n.name,
                "kind": n.kind,
                "compute_data_type": n.compute_data_type.name,
                "attributes": {k: _json_value(v) for k, v in vars(n).items() if k not in ("name", "compute_data_type")},
            }
            for n in g.nodes
        ],
    }


def _inspect(args: argparse.Namespace) -> int:
    try:
        blob = Path(args.file).read_bytes()
    except OSError as exc:
        print(f"error: cannot read graph file {_shown(args.file)}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    stop = Stage[args.emit.upper()]
    out: dict[str, Any] = {"file": args.file, "bytes": len(blob), "stage": stop.name.lower()}
    if stop == Stage.PARSED:
        out["graph"] = graph_to_dict(hipdnn.Graph._parse(blob))  # decoded, not validated
    else:
        g = hipdnn.Graph.deserialize(blob)  # parses and validates
        out["graph"] = graph_to_dict(g)
        if stop >= Stage.LOWERED:
            summary = summarize(blob)
            out["lowered"] = {
                "required_plugin_api_version": str(summary.required_api_version()),
                "nodes": summary.node_count,
                "tensors": len(summary.tensors),
            }
        if stop >= Stage.PLANNED:
            handle = hipdnn.Handle()
            try:
                g.build(handle)
                out["planned"] = {
                    "engine_id": g.get_engine_id(),
                    "workspace_bytes": g.get_workspace_size(),
                    "plugins": g.plugin_report(),
                }
            except hipdnn.HipdnnError as exc:
                out["planned"] = {"error": exc.message, "code": exc.code.name}
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    graph = out["graph"]
    print(
        f"graph {graph['name']!r}: {len(graph['tensors'])} tensors, {len(graph['nodes'])} nodes, "
        f"override shapes {'on' if graph['is_override_shape_enabled'] else 'off'} ({out['bytes']} bytes)"
    )
    for t in graph["tensors"]:
        flags = ", ".join(f for f, on in (("virtual", t["virtual"]), ("dynamic", t["dynamic"])) if on)
        print(
            f"  tensor {t['uid']:>4} {t['name']!r:24} {t['data_type']:9} dim {t['dim']} stride {t['stride']}"
            + (f" [{flags}]" if flags else "")
            + (f" ragged by uid {t['ragged_offset']}" if "ragged_offset" in t else "")
        )
    for n in graph["nodes"]:
        tensors = _tensor_uids(n["attributes"])
        print(f"  node {n['name']!r} ({n['kind']}): {tensors}")
    for section in ("lowered", "planned"):
        if section in out:
            print(f"  {section}: " + ", ".join(f"{k}={v}" for k, v in out[section].items()))
    return 0


def _doctor(args: argparse.Namespace) -> int:
    """Check the environment: compilers, GPU engine, runtime and devices, plugin directories, what loads.

    Levels: OK; INFO (a fact, nothing to fix); WARN (worth fixing, hipdnn still works); FAIL (broken:
    the exit status is 1). Each line agrees with what actually loaded: a runtime library the loaded
    GPU engine does not need is not reported as missing."""
    counts = {"WARN": 0, "FAIL": 0}

    def report(level: str, what: str) -> None:
        counts[level] = counts.get(level, 0) + 1
        print(f"[{level:4}] {what}")

    handle = hipdnn.Handle()
    try:
        loaded = handle.loaded_plugins()
        skipped = handle.skipped_plugins()
        search_paths = list(handle.plugin_search_paths)
        choice = _device_choice(handle)
        gpu_engine = next((p for p in loaded if set(p.engine_ids) & set(_GPU_ENGINES)), None)
        # "" for each engine of it that can run on this machine, else why not (no GPU, say)
        here = handle.device_engines_here() if gpu_engine else {}
        gpu_here = {e: here.get(e, "") for e in gpu_engine.engine_ids} if gpu_engine else {}
    finally:
        handle.close()

    for tool, why, needed in (
        ("cc", "C compiler (builds plugins, hipdnn.sdk.build_plugin)", True),
        ("c++", "C++ compiler (builds the package from source)", True),
        ("cmake", "CMake (builds the package from source; pip brings its own)", False),
        ("flatc", "flatc (regenerates wire code)", False),
        ("nvcc", "nvcc (builds the GPU engine for NVIDIA)", False),
        ("hipcc", "hipcc (builds the GPU engine for AMD)", False),
    ):
        found_tool = shutil.which(tool)
        report("OK" if found_tool else "WARN" if needed else "INFO", f"{why}: {found_tool or 'not found'}")

    if gpu_engine is not None:
        engine_text = f"{_shown(gpu_engine.name)} {_shown(gpu_engine.version)} engines {list(gpu_engine.engine_ids)}"
        if any(not why for why in gpu_here.values()):
            report("OK", f"GPU engine: {engine_text}")
        else:
            why = next(iter(gpu_here.values()), "")
            report(
                "INFO",
                f"GPU engine: {engine_text} installed but cannot run here ({_shown(why)}): the CPU engine serves",
            )
    else:
        report("INFO", "GPU engine: not installed (GPU users add it: pip install ./engines/hip, see the README)")
    # What the GPU engine needs at run time: the NVIDIA build carries the CUDA runtime inside it and
    # needs the driver (libcuda); the AMD build links libamdhip64, so it cannot have loaded without it.
    for lib, why in (("cuda", "NVIDIA driver (libcuda)"), ("amdhip64", "HIP runtime (libamdhip64)")):
        found = ctypes.util.find_library(lib)
        if found:
            report("OK", f"{why}: {found}")
        elif gpu_engine is not None:
            report("INFO", f"{why}: not found (the loaded GPU engine does not need it to load)")
        else:
            report("INFO", f"{why}: not found (needed only by the GPU engine)")
    _report_gpus(report, gpu_engine is not None)
    report("INFO", f"device: hipdnn.Handle() runs graphs on the {choice}; Handle(device='cpu'|'cuda') chooses")

    for path in search_paths:
        shown = _shown(path)
        if not path.exists():
            report("WARN", f"plugin path {shown} does not exist")
            continue
        mode = path.stat().st_mode
        if mode & (stat.S_IWGRP | stat.S_IWOTH):
            report("FAIL", f"plugin path {shown} is writable by group or others: chmod go-w {shown}")
        else:
            report("OK", f"plugin path {shown}")
    for p in loaded:
        report("OK", f"plugin {_shown(p.name)} {_shown(p.version)} (api {p.api_version}) engines {list(p.engine_ids)}")
    for sk in skipped:
        report("FAIL", f"plugin {_shown(sk.path)} skipped: {_shown(sk.reason)}")
    if not loaded:
        report("FAIL", "no engine plugin loaded: install the package (pip install .) or set HIPDNN_PLUGIN_DIR")
    fails, warns = counts["FAIL"], counts["WARN"]
    if fails:
        print(f"{fails} problem(s) found" + (f", {warns} warning(s)" if warns else ""))
    elif warns:
        print(f"no failures; {warns} warning(s)")
    else:
        print("no problems found")
    return 1 if fails else 0


def _report_gpus(report: Callable[[str, str], None], gpu_engine_loaded: bool) -> None:
    """The GPUs hipdnn.device sees (cuda-bindings or hip-python), or plainly that there is none."""
    import hipdnn.device as hd

    try:
        rt = hd.runtime()
        gpus = hd.devices()
        why = "" if gpus else f"{rt.package}: {rt.device_count()[1] or 'device count 0'}"
    except hipdnn.HipdnnError as exc:
        if gpu_engine_loaded:
            # The engine may still find a GPU; hipdnn.device just cannot list it.
            report("WARN", f"GPUs: not listed ({exc.message}); pip install 'hipdnn[cuda]' or 'hipdnn[rocm]' lists them")
            return
        gpus, why = [], exc.message
    if not gpus:
        tail = "; the GPU engine is installed but has no device to run on" if gpu_engine_loaded else ""
        report("INFO", f"no GPU: the CPU engine serves every graph ({why}{tail})")
        return
    for g in gpus:
        report(
            "OK",
            f"GPU {g.index}: {g.name} ({g.arch or 'arch unknown'}, {g.total_memory / 2**30:.0f} GiB) via {rt.package}",
        )
    if not gpu_engine_loaded:
        report("WARN", "a GPU is present but no GPU engine loaded: pip install ./engines/hip (see the README)")


def _bench(args: argparse.Namespace) -> int:
    """The installed package measured, or the benchmarks of a source checkout when asked for."""
    if args.which or args.repo is not None:
        return _bench_checkout(args)
    return _bench_installed(args)


def _progress_bar(total: int, what: str) -> Any:
    """A progress bar on stderr, drawn only on a terminal: output redirected to a file or a pipe stays
    free of it (tqdm's ``disable=None``)."""
    from tqdm import tqdm

    return tqdm(total=total, desc=what, unit="step", file=sys.stderr, disable=None, leave=False, dynamic_ncols=True)


def _median_us(fn: Callable[[], Any], calls: int, repeats: int = 5) -> float:
    """Median over ``repeats`` of the mean time of one call, in microseconds."""
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
    return sorted(samples)[len(samples) // 2]


def _overhead_handle(tmp: Path) -> tuple[hipdnn.Handle, str]:
    """A handle for measuring host time per execute: the SDK's no-op example engine when a C compiler can
    build it (nothing but hipdnn's own work is timed), else the CPU engine at a tiny shape."""
    from hipdnn import sdk

    try:
        lib = sdk.build_plugin([sdk.example_source("noop")], tmp / "libhipdnn_noop.so")
    except (FileNotFoundError, sdk.PluginBuildError) as exc:
        reason = str(exc).splitlines()[0]
        return hipdnn.Handle(), f"CPU engine (no-op example not built: {reason})"
    handle = hipdnn.Handle(plugin_paths=[lib], plugin_loading_mode=hipdnn.PluginLoadingMode.ABSOLUTE)
    return handle, "no-op example engine (hipdnn.sdk.build_plugin)"


def _bench_installed(args: argparse.Namespace) -> int:
    """Host time per execute with four overrides, then the CPU engine's causal SDPA at several lengths
    served by one plan. Needs nothing but the installed package (a C compiler is optional)."""
    import tempfile

    calls = 200 if args.quick else 2000
    b, h, d = 1, 8, 64
    s_max = 512 if args.quick else 2048
    lens = [1, 128, 512] if args.quick else [1, 128, 512, 2048]
    with (
        _progress_bar(2 + len(lens), "hipdnn bench") as bar,
        tempfile.TemporaryDirectory(prefix="hipdnn-bench-") as tmp,
    ):
        bar.set_postfix_str("building the no-op engine")
        handle, measured_with = _overhead_handle(Path(tmp))
        bar.update()
        try:
            g, t = _sdpa_graph(1, 2, 64, 16, causal=True, overridable=True)
            g.build(handle)
            # arrays of the call's shape: a value states its shape, which must be the overridden one
            vp = {t[n]: np.zeros((1, 2, 37, 16), np.float32) for n in "qkvo"}
            entry = hipdnn.OverrideEntry(shape=[1, 2, 37, 16], stride=[2 * 37 * 16, 37 * 16, 16, 1])
            ws = np.empty(max(g.get_workspace_size(), 1), np.uint8)
            bar.set_postfix_str("host time per execute")
            overhead = _median_us(functools.partial(g.execute, handle, vp, ws, dict.fromkeys(vp, entry)), calls)
        finally:
            handle.close()
        bar.update()
        rows = []
        with hipdnn.Handle() as cpu:
            g, t = _sdpa_graph(b, h, s_max, d, causal=True, overridable=True)
            g.build(cpu)
            ws = np.empty(max(g.get_workspace_size(), 1), np.uint8)
            rng = np.random.default_rng(0)
            for s in lens:
                bar.set_postfix_str(f"SDPA S={s}")
                arrays = {t[n]: rng.standard_normal((b, h, s, d)).astype(np.float32) for n in "qkvo"}
                entry = hipdnn.OverrideEntry(shape=[b, h, s, d], stride=[h * s * d, s * d, d, 1])
                call = functools.partial(g.execute, cpu, arrays, ws, dict.fromkeys(arrays, entry))
                call()  # warm-up, untimed
                # Repeats sized to about 0.2 s per sample, whatever the length.
                once_s = _median_us(call, 1, 1) * 1e-6
                us = _median_us(call, max(1, min(50, int(0.2 / max(once_s, 1e-6)))), 3 if args.quick else 5)
                flops = 4.0 * b * h * s * s * d / 2
                rows.append((s, us, flops / (us * 1e-6) / 1e9))
                bar.update()
    if args.json:
        result = {
            "hipdnn_version": hipdnn.__version__,
            "quick": bool(args.quick),
            "host_overhead": {"us_per_execute": overhead, "overrides": 4, "measured_with": measured_with},
            "cpu_sdpa": {
                "data_type": "FLOAT",
                "causal": True,
                "plan_shape": {"B": b, "H": h, "S": s_max, "D": d},
                "runs": [{"seq_len": s, "ms": us / 1e3, "gflops": gflops} for s, us, gflops in rows],
            },
        }
        print(json.dumps(result, indent=2))
        return 0
    print(f"hipdnn {hipdnn.__version__}: host time per execute, four overrides: {overhead:.2f} us ({measured_with})")
    print(f"CPU engine, causal SDPA fp32, one plan built at B={b} H={h} S={s_max} D={d}, served at:")
    for s, us, gflops in rows:
        print(f"  S={s:5d}: {us / 1e3:9.3f} ms  {gflops:7.2f} GFLOP/s")
    return 0


def _bench_checkout(args: argparse.Namespace) -> int:
    """Run benchmark scripts of a source checkout (they are not installed with the package)."""
    if args.json:
        print(
            "error: --json describes the installed package's measurement (`hipdnn bench --json`); the "
            "checkout's scripts write their own JSON under bench/results/",
            file=sys.stderr,
        )
        return 2
    bench_dir = Path(args.repo or ".") / "bench"
    scripts = [bench_dir / f"{name}.py" for name in (args.which or ["serving", "cpu_sdpa"])]
    missing = [str(s) for s in scripts if not s.is_file()]
    if missing:
        print(
            f"error: benchmark scripts not found: {', '.join(missing)} (run from a source checkout or pass --repo; "
            "`hipdnn bench` alone measures the installed package)",
            file=sys.stderr,
        )
        return 2
    status = 0
    with _progress_bar(len(scripts), "hipdnn bench") as bar:
        for script in scripts:
            bar.set_postfix_str(script.name)
            result = subprocess.run([sys.executable, str(script), *(["--quick"] if args.quick else [])])
            status = status or result.returncode
            bar.update()
    return status


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hipdnn", description=hipdnn.__doc__.splitlines()[0] if hipdnn.__doc__ else ""
    )
    parser.add_argument("--version", action="version", version=f"hipdnn {hipdnn.__version__}")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="also print hipdnn's log (INFO and up, plugins' too) on stderr"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser(
        "plugins",
        help="what loaded, versions, optional entries, engines, what was skipped and why",
        description="List the engine plugins a hipdnn.Handle() loads here, and those it skips with the reason.",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    # The skip reasons are this command's output: the log would say them a second time.
    p.set_defaults(func=_plugins, log_floor=logging.ERROR)
    d = sub.add_parser(
        "demo",
        help="run an SDPA graph on the CPU engine (or the GPU) at several sequence lengths",
        description="Build one causal SDPA plan at --max-seq-len and serve every --seq-lens length from it "
        "through shape overrides, each checked against a float64 numpy reference.",
    )
    d.add_argument(
        "--max-seq-len", type=int, default=512, metavar="S", help="sequence length the plan is built at (the maximum)"
    )
    d.add_argument(
        "--seq-lens",
        type=int,
        nargs="+",
        default=[1, 37, 129, 512],
        metavar="S",
        help="sequence lengths to run through the one plan, each between 1 and --max-seq-len",
    )
    d.add_argument(
        "--device", choices=["cpu", "gpu"], default="cpu", help="gpu: the HIP engine through hipdnn.device, no torch"
    )
    d.add_argument("--dtype", choices=sorted(_GPU_DTYPES), default="fp16", help="element type of the GPU demo")
    d.set_defaults(func=_demo, log_floor=logging.WARNING)
    i = sub.add_parser(
        "inspect",
        help="show a serialized graph as text or JSON, stopping at a pipeline stage",
        description="Read a graph serialized by Graph.serialize() and show it after the stage --emit names.",
    )
    i.add_argument("file", help="a file holding one serialized graph (the bytes of Graph.serialize())")
    i.add_argument(
        "--emit",
        choices=[s.name.lower() for s in Stage],
        default="validated",
        help="stop after parsing, validation, lowering (plugin API version needed) or planning on this machine",
    )
    i.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    i.set_defaults(func=_inspect, log_floor=logging.WARNING)
    doc = sub.add_parser(
        "doctor",
        help="check compilers, GPU runtime, plugin directories and what loads",
        description="Check this machine: compilers, GPU runtimes and devices, plugin directories, what loads. "
        "Exits non-zero when something is broken ([FAIL]).",
    )
    doc.set_defaults(func=_doctor, log_floor=logging.ERROR)
    b = sub.add_parser(
        "bench",
        help="measure this install (or run the benchmarks of a source checkout)",
        description="Without arguments: measure the installed package (host time per execute, the CPU "
        "engine's SDPA across sequence lengths of one plan). With script names or --repo: run those "
        "scripts of a source checkout's bench/ directory.",
    )
    b.add_argument(
        "which",
        nargs="*",
        metavar="SCRIPT",
        help="benchmark scripts of a checkout's bench/ to run, without .py (e.g. serving cpu_sdpa)",
    )
    b.add_argument(
        "--repo",
        default=None,
        metavar="DIR",
        help="source checkout holding bench/ (default: the current directory, when SCRIPT is given)",
    )
    b.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    b.add_argument(
        "--json", action="store_true", help="print one JSON object instead of text (the installed package's run)"
    )
    b.set_defaults(func=_bench, log_floor=logging.WARNING)
    return parser


@contextmanager
def _logging_to_stderr(args: argparse.Namespace) -> Iterator[None]:
    """hipdnn's log on stderr while a command runs: INFO and up with --verbose, else only the levels
    the command does not report itself (``plugins`` and ``doctor`` print every skip reason)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("hipdnn: %(levelname)s: %(message)s"))
    handler.setLevel(logging.INFO if args.verbose else args.log_floor)
    logger = logging.getLogger("hipdnn")
    level = logger.level
    logger.addHandler(handler)
    if args.verbose:
        logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    with _logging_to_stderr(args):
        try:
            return int(args.func(args))
        except hipdnn.HipdnnError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2


def run() -> None:
    """The console script: ``main`` with a reader that went away (``hipdnn plugins | head -1``) ending
    the program quietly, as SIGPIPE ends a C tool."""
    try:
        code = main()
        sys.stdout.flush()  # a closed pipe shows up here when the output was buffered
    except BrokenPipeError:
        # Python's own flush at exit would fail again on the dead pipe: point stdout at devnull first.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        code = 128 + signal.SIGPIPE
    sys.exit(code)


if __name__ == "__main__":
    run()
