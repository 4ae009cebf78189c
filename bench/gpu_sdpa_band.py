"""Bias tensors, sliding windows, ALiBi and score softcapping on the GPU engine (202): each option timed
beside the same call without it, in one run on one card (issue 27). ``--set band`` (the default) times
the bias and window rows, ``--set score`` ALiBi and softcap (with a bias row as a check that the
window / bias build kept its speed), ``--set all`` both.

bf16, D = 128 (and 64 for a few rows), BHSD. Forward and backward (dQ, dK, dV; o and stats from our own
forward with the same options), and decode (Sq = 1 against a long cache, the split-KV path). GPU time
per call by CUDA events around back-to-back calls queued behind a spin kernel (bench/gpu_sdpa.py's
gpu_ms). Each row gives the option's time, the base time and their ratio, and for windows the fraction
of the base's score tiles the window keeps (what an ideal kernel's ratio would be).

    python bench/gpu_sdpa_band.py [--plugin PATH] [--out bench/results] [--tag gpu_sdpa_band] [--set band|score|all]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import hipdnn  # noqa: E402
from bench.gpu_sdpa import gpu_ms  # noqa: E402
from tests.gpu.hip_support import TENSOR_CORE, compact, find_plugin, gpu_graph, workspace_for  # noqa: E402

BF16 = hipdnn.DataType.BFLOAT16


def graph(
    kind: str, b: int, hq: int, hk: int, sq: int, skv: int, d: int, opts: dict[str, Any], bias_dims: list[int] | None
) -> tuple[Any, dict[str, Any]]:
    g = gpu_graph(f"band_{kind}", BF16, overridable=False, engine=TENSOR_CORE)
    qd, kd = [b, hq, sq, d], [b, hk, skv, d]
    t: dict[str, Any] = {}
    for n, dims in (("q", qd), ("k", kd), ("v", kd)) + ((("o", qd), ("dO", qd)) if kind == "bwd" else ()):
        t[n] = g.tensor(name=n, dim=dims, stride=compact(dims), data_type=BF16)
    kw = dict(opts)
    if bias_dims is not None:
        t["bias"] = g.tensor(name="bias", dim=bias_dims, stride=compact(bias_dims), data_type=BF16)
        kw["bias"] = t["bias"]
    sd = [b, hq, sq, 1]
    if kind == "fwd":
        o, st = g.sdpa(t["q"], t["k"], t["v"], attn_scale=0.08, generate_stats=True, **kw)
        o.set_output(True).set_stride(compact(qd))
        assert st is not None
        st.set_output(True)
        t["out"], t["stats"] = o, st
    else:
        t["stats"] = g.tensor(name="stats", dim=sd, stride=compact(sd), data_type=hipdnn.DataType.FLOAT)
        dq, dk, dv = g.sdpa_backward(t["q"], t["k"], t["v"], t["o"], t["dO"], t["stats"], attn_scale=0.08, **kw)
        for x, dims in ((dq, qd), (dk, kd), (dv, kd)):
            x.set_output(True).set_stride(compact(dims))
        t["dQ"], t["dK"], t["dV"] = dq, dk, dv
    return g, t


def time_case(
    handle: Any, b: int, hq: int, hk: int, sq: int, skv: int, d: int, opts: dict[str, Any], bias: list[int] | None
) -> dict[str, float]:
    """Forward and (for sq > 16) backward ms of one option set."""
    gen = torch.Generator(device="cuda").manual_seed(0)

    def rnd(*dims: int) -> Any:
        return torch.randn(*dims, generator=gen, device="cuda").to(torch.bfloat16)

    q, k, v = rnd(b, hq, sq, d), rnd(b, hk, skv, d), rnd(b, hk, skv, d)
    bt = rnd(*bias) if bias is not None else None
    g, t = graph("fwd", b, hq, hk, sq, skv, d, opts, bias)
    g.build(handle)
    o = torch.empty(b, hq, sq, d, device="cuda", dtype=torch.bfloat16)
    st = torch.empty(b, hq, sq, 1, device="cuda", dtype=torch.float32)
    pack = {t["q"]: q.data_ptr(), t["k"]: k.data_ptr(), t["v"]: v.data_ptr(), t["out"]: o.data_ptr(), t["stats"]: st}
    if bt is not None:
        pack[t["bias"]] = bt.data_ptr()
    ws = workspace_for(g)
    out = {"fwd_ms": gpu_ms(lambda: g.execute(handle, pack, ws), reps=10)}
    if sq > 16:
        gb, tb = graph("bwd", b, hq, hk, sq, skv, d, opts, bias)
        gb.build(handle)
        do = rnd(b, hq, sq, d)
        grads = [torch.empty_like(x) for x in (q, k, v)]
        bp = {tb[n]: x.data_ptr() for n, x in (("q", q), ("k", k), ("v", v), ("o", o), ("dO", do))}
        bp[tb["stats"]] = st
        bp.update({tb[n]: x.data_ptr() for n, x in zip(("dQ", "dK", "dV"), grads)})
        if bt is not None:
            bp[tb["bias"]] = bt.data_ptr()
        wsb = workspace_for(gb)
        out["bwd_ms"] = gpu_ms(lambda: gb.execute(handle, bp, wsb), reps=5)
    return out


def tile_fraction(sq: int, skv: int, causal: bool, left: int | None, bn: int = 128) -> float:
    """Score tiles (bn x bn) a window keeps, as a fraction of those the base (causal or not) walks."""
    nq, nk = (sq + bn - 1) // bn, (skv + bn - 1) // bn
    base = kept = 0
    for i in range(nq):
        hi = min(nk - 1, ((i + 1) * bn - 1) // bn) if causal else nk - 1
        lo = max(0, (i * bn - left + 1) // bn) if left is not None else 0
        base += hi + 1
        kept += hi - lo + 1
    return kept / base


def score_rows() -> list[tuple[str, tuple[int, ...], dict[str, Any], None, dict[str, Any], None]]:
    """ALiBi and softcapping beside the same call without them (Gemma 2's cap is 50)."""
    causal: dict[str, Any] = {"use_causal_mask": True}
    rows: list[tuple[str, tuple[int, ...], dict[str, Any], None, dict[str, Any], None]] = []
    for d in (128, 64):
        rows += [
            ("softcap 50, causal", (4, 16, 16, 8192, 8192, d), {**causal, "softcap": 50.0}, None, causal, None),
            ("alibi, causal", (4, 16, 16, 8192, 8192, d), {**causal, "use_alibi_mask": True}, None, causal, None),
            ("softcap 50 + alibi, causal", (4, 16, 16, 8192, 8192, d),
             {**causal, "softcap": 50.0, "use_alibi_mask": True}, None, causal, None),
        ]  # fmt: skip
    rows += [
        ("decode: softcap 50, Skv=64k", (8, 32, 8, 1, 65536, 128), {"softcap": 50.0}, None, {}, None),
        ("decode: alibi, Skv=64k", (8, 32, 8, 1, 65536, 128), {"use_alibi_mask": True}, None, {}, None),
    ]
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--plugin", default=None)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--tag", default="gpu_sdpa_band")
    ap.add_argument("--set", choices=["band", "score", "all"], default="band")
    args = ap.parse_args()
    plugin = Path(args.plugin) if args.plugin else find_plugin()
    assert plugin is not None, "no built HIP engine plugin"
    handle = hipdnn.Handle(plugin_paths=[plugin], plugin_loading_mode=hipdnn.PluginLoadingMode.ABSOLUTE)
    causal = {"use_causal_mask": True}
    rows: list[tuple[str, tuple[int, ...], dict[str, Any], list[int] | None, dict[str, Any], list[int] | None]] = []
    if args.set in ("score", "all"):
        rows += score_rows()
    if args.set == "score":
        rows += [("bias [1,1,S,S], causal", (4, 16, 16, 8192, 8192, 128), causal, [1, 1, 8192, 8192], causal, None)]
    for d in (128, 64) if args.set != "score" else ():
        rows += [
            ("window 1024, causal", (4, 16, 16, 8192, 8192, d), {**causal, "diagonal_band_left_bound": 1024}, None,
             causal, None),
            ("bias [1,1,S,S]", (4, 16, 16, 8192, 8192, d), {}, [1, 1, 8192, 8192], {}, None),
            ("bias [B,H,S,S]", (2, 16, 16, 4096, 4096, d), {}, [2, 16, 4096, 4096], {}, None),
            ("bias [1,1,S,S], causal", (4, 16, 16, 8192, 8192, d), causal, [1, 1, 8192, 8192], causal, None),
        ]  # fmt: skip
    rows += [] if args.set == "score" else [
        ("window 4096, causal, S=32k", (1, 16, 16, 32768, 32768, 128), {**causal, "diagonal_band_left_bound": 4096},
         None, causal, None),
        ("right bound 512 (no causal)", (4, 16, 16, 8192, 8192, 128), {"diagonal_band_right_bound": 512}, None,
         {}, None),
        ("decode: window 4096 bottom-right, Skv=64k", (8, 32, 8, 1, 65536, 128),
         {"diagonal_band_left_bound": 4096, "diagonal_alignment": hipdnn.DiagonalAlignment.BOTTOM_RIGHT}, None,
         {}, None),
        ("decode: bias [B,H,1,Skv], Skv=64k", (8, 32, 8, 1, 65536, 128), {}, [8, 32, 1, 65536], {}, None),
    ]  # fmt: skip
    results = []
    for name, shape, opts, bias, base_opts, base_bias in rows:
        b, hq, hk, sq, skv, d = shape
        with_opt = time_case(handle, b, hq, hk, sq, skv, d, opts, bias)
        base = time_case(handle, b, hq, hk, sq, skv, d, base_opts, base_bias)
        row: dict[str, Any] = {"name": name, "shape": dict(zip(["b", "hq", "hk", "sq", "skv", "d"], shape))}
        for key in with_opt:
            row[key] = with_opt[key]
            row[key.replace("_ms", "_base_ms")] = base[key]
            row[key.replace("_ms", "_ratio")] = with_opt[key] / base[key]
        if "diagonal_band_left_bound" in opts and sq > 16:
            row["tile_fraction"] = tile_fraction(
                sq, skv, bool(opts.get("use_causal_mask")), opts["diagonal_band_left_bound"]
            )
        results.append(row)
        print(json.dumps(row), flush=True)
    out = Path(args.out) / f"{args.tag}.json"
    meta = {"date": _dt.datetime.now().isoformat(), "device": torch.cuda.get_device_name()}
    out.write_text(json.dumps({**meta, "rows": results}, indent=1))


if __name__ == "__main__":
    main()
