"""The ``hipdnn`` command line (also ``python -m hipdnn``)."""

from __future__ import annotations

import argparse
import ctypes.util
import json
import shutil
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from enum import Enum, IntEnum
from pathlib import Path
from typing import Any, TextIO

import numpy as np

import hipdnn
from hipdnn import reference
from hipdnn.backend.graph_summary import summarize
from hipdnn.plugins import printable, required_api_version
from hipdnn.wire.Graph import GraphT


def _shown(value: object) -> str:
    """A plugin string or a path, with control characters escaped (JSON output escapes its own)."""
    return printable(str(value))


def _plugins(args: argparse.Namespace) -> int:
    handle = hipdnn.Handle()
    loaded = handle.loaded_plugins()
    skipped = handle.skipped_plugins()
    if args.json:
        print(
            json.dumps(
                {
                    "search_paths": [str(p) for p in handle.plugin_search_paths],
                    "loaded": [asdict(p) for p in loaded],
                    "skipped": [{"path": str(s.path), "reason": s.reason} for s in skipped],
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


def _demo(args: argparse.Namespace) -> int:
    """Build an SDPA graph, run it on the CPU engine, check it against float64 numpy."""
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
    worst = 0.0
    for s in args.seq_lens:
        if s > s_max:
            print(f"  S={s}: skipped (above the built maximum {s_max})")
            continue
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
        run_ms = (time.perf_counter() - t0) * 1e3
        expected, _ = reference.sdpa(q, k, v, 1.0 / np.sqrt(d), causal=True)
        err = reference.relative_error(o, expected)
        worst = max(worst, err)
        print(f"  S={s:5d}: one plan, overridden shape, {run_ms:7.2f} ms, relative error vs float64 {err:.2e}")
    ok = worst < 1e-5
    print(("OK" if ok else "FAILED") + f": every sequence length served by one plan; worst relative error {worst:.2e}")
    return 0 if ok else 1


#: GPU demo element types: (graph data type, numpy dtype name, worst relative error accepted). The
#: kernels round P to the input type before P V and the output to it: a few ulps of the type.
_GPU_DTYPES = {"fp16": (hipdnn.DataType.HALF, "float16", 4e-3), "bf16": (hipdnn.DataType.BFLOAT16, "bfloat16", 1.6e-2)}
_GPU_ENGINES = (202, 201)  # the HIP engine's tensor-core and portable engines, in order of preference


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
            engine = next((e for e in _GPU_ENGINES if e in offered), None)
            if engine is None:
                print("error: the HIP engine (201/202) is not loaded: " + _skipped_text(handle), file=sys.stderr)
                return 2
            b, h, d, s_max = 1, 4, 64, args.max_seq_len
            t0 = time.perf_counter()
            g, t = _sdpa_graph(b, h, s_max, d, causal=True, overridable=True, io=io, preferred_engine_id=engine)
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
            worst = 0.0
            for s in args.seq_lens:
                if s > s_max:
                    print(f"  S={s}: skipped (above the built maximum {s_max})")
                    continue
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


@contextmanager
def progress(what: str, stream: TextIO = sys.stderr) -> Iterator[None]:
    """Say what is happening when it takes more than a second (a ticking line on stderr)."""
    done = threading.Event()
    start = time.perf_counter()

    def tick() -> None:
        if done.wait(1.0):
            return
        while not done.wait(0.5):
            stream.write(f"\r{what}... {time.perf_counter() - start:5.1f} s")
            stream.flush()
        stream.write(f"\r{what}: done in {time.perf_counter() - start:.1f} s\n")
        stream.flush()

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def _json_value(value: Any) -> Any:
    if isinstance(value, hipdnn.TensorAttributes):
        return {"uid": value.get_uid(), "name": value.get_name()}
    if isinstance(value, Enum):
        return value.name
    return value


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
    blob = Path(args.file).read_bytes()
    stop = Stage[args.emit.upper()]
    out: dict[str, Any] = {"file": args.file, "bytes": len(blob), "stage": stop.name.lower()}
    if stop == Stage.PARSED:
        wire = GraphT.InitFromPackedBuf(blob, 0) if len(blob) >= 8 else None
        if wire is None:
            raise hipdnn.HipdnnError(hipdnn.ErrorCode.INVALID_VALUE, "buffer too short to hold a graph")
        out["graph"] = graph_to_dict(hipdnn.Graph._from_wire(wire))
    else:
        g = hipdnn.Graph.deserialize(blob)  # parses and validates
        out["graph"] = graph_to_dict(g)
        if stop >= Stage.LOWERED:
            summary = summarize(blob)
            out["lowered"] = {
                "required_plugin_api_version": str(
                    required_api_version(
                        is_override_shape_enabled=summary.is_override_shape_enabled,
                        has_dynamic_tensors=summary.has_dynamic_tensors,
                    )
                ),
                "nodes": summary.node_count,
                "tensors": len(summary.tensors),
            }
        if stop >= Stage.PLANNED:
            handle = hipdnn.Handle()
            try:
                with progress("building a plan"):
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
        )
    for n in graph["nodes"]:
        tensors = {k: v["uid"] for k, v in n["attributes"].items() if isinstance(v, dict)}
        print(f"  node {n['name']!r} ({n['kind']}): {tensors}")
    for section in ("lowered", "planned"):
        if section in out:
            print(f"  {section}: " + ", ".join(f"{k}={v}" for k, v in out[section].items()))
    return 0


def _doctor(args: argparse.Namespace) -> int:
    """Check the environment: compilers, GPU runtime, plugin directories and what loads."""
    problems = 0

    def report(level: str, what: str) -> None:
        nonlocal problems
        if level == "FAIL":
            problems += 1
        print(f"[{level:4}] {what}")

    for tool, why in (
        ("cc", "C compiler (builds plugins)"),
        ("c++", "C++ compiler (builds the CPU engine)"),
        ("cmake", "CMake (builds plugins)"),
        ("flatc", "flatc (regenerates wire code)"),
        ("nvcc", "nvcc (builds the HIP engine on NVIDIA)"),
        ("hipcc", "hipcc (builds the HIP engine on AMD)"),
    ):
        found_tool = shutil.which(tool)
        report("OK" if found_tool else "WARN", f"{why}: {found_tool or 'not found'}")
    for lib, why in (("libcudart.so", "CUDA runtime"), ("libamdhip64.so", "HIP runtime")):
        found = ctypes.util.find_library(lib.removeprefix("lib").removesuffix(".so"))
        report("OK" if found else "WARN", f"{why}: {found or 'not found (GPU engines will not load)'}")
    _report_gpus(report)
    handle = hipdnn.Handle()
    for path in handle.plugin_search_paths:
        shown = _shown(path)
        if not path.exists():
            report("WARN", f"plugin path {shown} does not exist")
            continue
        mode = path.stat().st_mode
        if mode & (stat.S_IWGRP | stat.S_IWOTH):
            report("FAIL", f"plugin path {shown} is writable by group or others: chmod go-w {shown}")
        else:
            report("OK", f"plugin path {shown}")
    for p in handle.loaded_plugins():
        report("OK", f"plugin {_shown(p.name)} {_shown(p.version)} (api {p.api_version}) engines {list(p.engine_ids)}")
    for s in handle.skipped_plugins():
        report("FAIL", f"plugin {_shown(s.path)} skipped: {_shown(s.reason)}")
    if not handle.loaded_plugins():
        report("FAIL", "no engine plugin loaded: install the package (pip install .) or set HIPDNN_PLUGIN_DIR")
    handle.close()
    print("no problems found" if problems == 0 else f"{problems} problem(s) found")
    return 0 if problems == 0 else 1


def _report_gpus(report: Callable[[str, str], None]) -> None:
    """The GPUs hipdnn.device sees (cuda-bindings or hip-python), or plainly that there is none."""
    import hipdnn.device as hd

    try:
        rt = hd.runtime()
        gpus = hd.devices()
    except hipdnn.HipdnnError as exc:
        report("WARN", f"GPU devices: none listed ({exc.message})")
        return
    if not gpus:
        report("WARN", f"GPU devices: none ({rt.package}: {rt.device_count()[1] or 'device count 0'})")
    for g in gpus:
        report(
            "OK",
            f"GPU {g.index}: {g.name} ({g.arch or 'arch unknown'}, {g.total_memory / 2**30:.0f} GiB) via {rt.package}",
        )


def _bench(args: argparse.Namespace) -> int:
    """Run the benchmarks of a source checkout (they are not installed with the package)."""
    bench_dir = Path(args.repo) / "bench"
    scripts = [bench_dir / f"{name}.py" for name in args.which]
    missing = [str(s) for s in scripts if not s.is_file()]
    if missing:
        print(
            f"error: benchmark scripts not found: {', '.join(missing)} (run from a source checkout or pass --repo)",
            file=sys.stderr,
        )
        return 2
    status = 0
    for script in scripts:
        with progress(f"running {script.name}"):
            result = subprocess.run([sys.executable, str(script), *(["--quick"] if args.quick else [])])
        status = status or result.returncode
    return status


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="hipdnn", description=hipdnn.__doc__.splitlines()[0] if hipdnn.__doc__ else ""
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plugins", help="what loaded, versions, optional entries, engines, what was skipped and why")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_plugins)
    d = sub.add_parser("demo", help="run an SDPA graph on the CPU engine (or the GPU) at several sequence lengths")
    d.add_argument("--max-seq-len", type=int, default=512)
    d.add_argument("--seq-lens", type=int, nargs="+", default=[1, 37, 129, 512])
    d.add_argument(
        "--device", choices=["cpu", "gpu"], default="cpu", help="gpu: the HIP engine through hipdnn.device, no torch"
    )
    d.add_argument("--dtype", choices=sorted(_GPU_DTYPES), default="fp16", help="element type of the GPU demo")
    d.set_defaults(func=_demo)
    i = sub.add_parser("inspect", help="show a serialized graph as text or JSON, stopping at a pipeline stage")
    i.add_argument("file")
    i.add_argument("--emit", choices=[s.name.lower() for s in Stage], default="validated")
    i.add_argument("--json", action="store_true")
    i.set_defaults(func=_inspect)
    doc = sub.add_parser("doctor", help="check compilers, GPU runtime, plugin directories and what loads")
    doc.set_defaults(func=_doctor)
    b = sub.add_parser("bench", help="run the benchmarks of a source checkout")
    b.add_argument("which", nargs="*", default=["serving", "cpu_sdpa"])
    b.add_argument("--repo", default=".")
    b.add_argument("--quick", action="store_true")
    b.set_defaults(func=_bench)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except hipdnn.HipdnnError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
