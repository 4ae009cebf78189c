"""The ``hipdnn`` command line (also ``python -m hipdnn``)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict

import numpy as np

import hipdnn
from hipdnn import reference


def _plugins(args: argparse.Namespace) -> int:
    handle = hipdnn.Handle()
    loaded = handle.loaded_plugins()
    skipped = handle.skipped_plugins()
    if args.json:
        print(json.dumps(
            {
                "search_paths": [str(p) for p in handle.plugin_search_paths],
                "loaded": [asdict(p) for p in loaded],
                "skipped": [{"path": str(s.path), "reason": s.reason} for s in skipped],
            },
            indent=2,
        ))
        return 0
    print("search paths: " + (", ".join(str(p) for p in handle.plugin_search_paths) or "(none)"))
    for p in loaded:
        optional = ", ".join(e.removeprefix("hipdnnPlugin").removeprefix("hipdnnEnginePlugin") for e in p.optional_entries)
        print(f"loaded  {p.name} {p.version} (api {p.api_version}) engines {list(p.engine_ids)}")
        print(f"        {p.path}")
        print(f"        optional entries: {optional or 'none'}; sha256 {p.fingerprint.sha256[:16]}")
    for s in skipped:
        print(f"skipped {s.path}: {s.reason}")
    print(f"{len(loaded)} loaded, {len(skipped)} skipped")
    return 0


def _sdpa_graph(b: int, h: int, s: int, d: int, causal: bool, overridable: bool) -> tuple[hipdnn.Graph, dict[str, hipdnn.TensorAttributes]]:
    g = hipdnn.Graph(
        name="demo_sdpa",
        io_data_type=hipdnn.DataType.FLOAT,
        intermediate_data_type=hipdnn.DataType.FLOAT,
        compute_data_type=hipdnn.DataType.FLOAT,
        is_override_shape_enabled=overridable,
    )
    dims, strides = [b, h, s, d], [h * s * d, s * d, d, 1]
    q = g.tensor(name="q", dim=dims, stride=strides, data_type=hipdnn.DataType.FLOAT)
    k = g.tensor(name="k", dim=dims, stride=strides, data_type=hipdnn.DataType.FLOAT)
    v = g.tensor(name="v", dim=dims, stride=strides, data_type=hipdnn.DataType.FLOAT)
    o, _ = g.sdpa(q, k, v, attn_scale=1.0 / np.sqrt(d), use_causal_mask=causal, name="attention")
    o.set_output(True)
    return g, {"q": q, "k": k, "v": v, "o": o}


def _demo(args: argparse.Namespace) -> int:
    """Build an SDPA graph, run it on the CPU engine, check it against float64 numpy."""
    rng = np.random.default_rng(0)
    handle = hipdnn.Handle()
    names = [p.name for p in handle.loaded_plugins()]
    print(f"plugins loaded: {', '.join(names) or 'none'}")
    b, h, d, s_max = 1, 4, 64, args.max_seq_len
    t0 = time.perf_counter()
    g, t = _sdpa_graph(b, h, s_max, d, causal=True, overridable=True)
    g.build(handle)
    build_ms = (time.perf_counter() - t0) * 1e3
    print(f"built causal SDPA graph at B={b} H={h} S={s_max} D={d} in {build_ms:.1f} ms "
          f"on engine {g.get_engine_id()}; workspace {g.get_workspace_size()} bytes")
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
        g.execute(handle, {t["q"]: q, t["k"]: k, t["v"]: v, t["o"]: o}, workspace,
                  overrides={t[n]: hipdnn.OverrideEntry(shape=[b, h, s, d], stride=compact) for n in "qkvo"})
        run_ms = (time.perf_counter() - t0) * 1e3
        expected, _ = reference.sdpa(q, k, v, 1.0 / np.sqrt(d), causal=True)
        err = reference.relative_error(o, expected)
        worst = max(worst, err)
        print(f"  S={s:5d}: one plan, overridden shape, {run_ms:7.2f} ms, relative error vs float64 {err:.2e}")
    ok = worst < 1e-5
    print(("OK" if ok else "FAILED") + f": every sequence length served by one plan; worst relative error {worst:.2e}")
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hipdnn", description=hipdnn.__doc__.splitlines()[0] if hipdnn.__doc__ else "")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plugins", help="what loaded, versions, optional entries, engines, what was skipped and why")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_plugins)
    d = sub.add_parser("demo", help="run an SDPA graph on the CPU engine at several sequence lengths")
    d.add_argument("--max-seq-len", type=int, default=512)
    d.add_argument("--seq-lens", type=int, nargs="+", default=[1, 37, 129, 512])
    d.set_defaults(func=_demo)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except hipdnn.HipdnnError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
