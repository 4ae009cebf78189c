"""SDPA forward and backward on the CPU: hipdnn's CPU engine vs PyTorch's CPU SDPA vs numpy.

    python bench/cpu_sdpa.py                      # full sweep, writes bench/results/cpu_sdpa.{json,png}
    python bench/cpu_sdpa.py --quick              # S = 512, 1024 only
    python bench/cpu_sdpa.py --backward-only      # backward rows at S = 512, 1024, 2048: cpu_sdpa_bwd.{json,png}
    python bench/cpu_sdpa.py --engine-dir DIR     # the CPU engine built in DIR (e.g. an older commit's)

fp32, B=1, H=8, D in (64, 128), S in (512 ... 4096), causal and not. Each case is built once through
``hipdnn.Graph`` and executed repeatedly; the three implementations are timed interleaved (one run of
each per round) so that load from other processes on a shared machine hits all of them alike, and the
best round of each is kept. Every timed call starts after a short sleep (``--settle``, 0.15 s): numpy's
OpenBLAS threads keep spinning for ~0.1 s after a matmul returns, and without the sleep whichever
implementation came next in the round (hipdnn's) lost 20-45 % of the 2 cores to them. GFLOP/s counts
4*B*H*S*S*D flops, half of that under a causal mask (the work a causal kernel must do). The backward is
timed in the same run on the same inputs: hipdnn's ``sdpa_backward`` graph (fed o and stats from the
engine's forward), PyTorch autograd of ``scaled_dot_product_attention`` (``torch.autograd.grad`` of a
retained forward graph, so only the backward is timed) and a numpy version that materialises P. Backward
flops are counted as 2.5x the forward's (five S x S x D products -- the recomputed scores Q K^T, dP = dO
V^T, dV = P^T dO, dQ = dS K and dK = dS^T Q -- against the forward's two), i.e. 10*B*H*S*S*D, halved
under a causal mask (the engine's single pass does exactly these five; its earlier two-pass kernel did 7
and got no credit for the extra two). ``--backward-only`` still runs the forward once per case (the
backward needs its o and stats) but times only the backward. PyTorch is optional (the engine and numpy
still run without it); it is a benchmark-only dependency, never a runtime or test one.

The fraction of peak uses the cores' fp32 FMA peak: cores x 2 FMA pipes x 8 lanes (AVX2; 16 where the
CPU has AVX-512) x 2 flops x the clock the FMA units run at. Under a hypervisor /proc/cpuinfo's "cpu MHz"
is the nominal clock (2100 on the sessions' Xeon), below the sustained turbo clock, which made fractions
above 100 %; so the clock is ``--fma-ghz`` (default 2.75: measured on that Xeon with a register-only loop
of 24 independent zmm FMA chains, 173-176 GFLOP/s per core = 2.75 GHz x 64 flops a cycle, 336-347 on
both cores, and a dependent imul chain timed at 2.73-2.77 GHz). ``--fma-ghz 0`` uses /proc/cpuinfo's
clock. The peak is an upper bound for these kernels: the hypervisor's neighbours can lower the clock
(2.5 GHz was seen under load).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import hipdnn  # noqa: E402
from hipdnn.plugins.discovery import PluginLoadingMode  # noqa: E402

F32 = hipdnn.DataType.FLOAT


def cpu_info(fma_ghz: float) -> dict:
    model, mhz, flags = "unknown", None, set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, val = line.partition(":")
            key, val = key.strip(), val.strip()
            if key == "model name" and model == "unknown":
                model = val
            elif key == "cpu MHz" and mhz is None:
                mhz = float(val)
            elif key == "flags" and not flags:
                flags = set(val.split())
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    lanes = 16 if "avx512f" in flags else 8 if "avx2" in flags else 4
    fma_pipes = 2
    clock_ghz = fma_ghz if fma_ghz > 0 else (mhz or 0.0) / 1e3
    peak = cores * fma_pipes * lanes * 2 * clock_ghz if clock_ghz else None
    return {
        "model": model,
        "cpu_mhz_from_proc_cpuinfo": mhz,
        "cores": cores,
        "fp32_lanes": lanes,
        "fma_pipes_per_core_assumed": fma_pipes,
        "peak_gflops": peak,
        "peak_clock_ghz": clock_ghz or None,
        "peak_formula": "cores x fma_pipes x fp32_lanes x 2 flops x clock ("
        + ("--fma-ghz: measured FMA clock" if fma_ghz > 0 else "cpu MHz from /proc/cpuinfo")
        + ")",
    }


def flops(b: int, h: int, s: int, d: int, causal: bool) -> float:
    return 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)


def bwd_flops(b: int, h: int, s: int, d: int, causal: bool) -> float:
    return 2.5 * flops(b, h, s, d, causal)


class Engine:
    """One graph, built once at the case's shape, executed repeatedly."""

    def __init__(
        self,
        handle: hipdnn.Handle,
        b: int,
        h: int,
        s: int,
        d: int,
        causal: bool,
        q: np.ndarray,
        k: np.ndarray,
        v: np.ndarray,
    ) -> None:
        g = hipdnn.Graph(name="bench", io_data_type=F32, intermediate_data_type=F32, compute_data_type=F32)
        dims, strides = [b, h, s, d], [h * s * d, s * d, d, 1]
        tq = g.tensor(name="q", dim=dims, stride=strides, data_type=F32)
        tk = g.tensor(name="k", dim=dims, stride=strides, data_type=F32)
        tv = g.tensor(name="v", dim=dims, stride=strides, data_type=F32)
        o, st = g.sdpa(tq, tk, tv, attn_scale=1.0 / math.sqrt(d), use_causal_mask=causal, generate_stats=True)
        o.set_output(True)
        st.set_output(True).set_data_type(F32)
        g.build(handle)
        self.g, self.handle = g, handle
        self.out = np.empty((b, h, s, d), np.float32)
        self.stats = np.empty((b, h, s, 1), np.float32)
        self.ws = np.empty(max(1, g.get_workspace_size()), np.uint8)
        self.pack = {tq: q, tk: k, tv: v, o: self.out, st: self.stats}

    def __call__(self) -> np.ndarray:
        self.g.execute(self.handle, self.pack, self.ws)
        return self.out


class EngineBwd:
    """sdpa_backward at the case's shape, fed o and stats from the forward engine."""

    def __init__(self, handle: hipdnn.Handle, fwd: Engine, b, h, s, d, causal, q, k, v, do) -> None:
        g = hipdnn.Graph(name="bench_bwd", io_data_type=F32, intermediate_data_type=F32, compute_data_type=F32)
        dims, strides = [b, h, s, d], [h * s * d, s * d, d, 1]
        t = {n: g.tensor(name=n, dim=dims, stride=strides, data_type=F32) for n in ("q", "k", "v", "o", "do")}
        ts = g.tensor(name="stats", dim=[b, h, s, 1], stride=[h * s, s, 1, 1], data_type=F32)
        dq, dk, dv = g.sdpa_backward(
            t["q"], t["k"], t["v"], t["o"], t["do"], ts, attn_scale=1.0 / math.sqrt(d), use_causal_mask=causal
        )
        for x in (dq, dk, dv):
            x.set_output(True).set_stride(strides)
        g.build(handle)
        self.g, self.handle = g, handle
        self.grads = tuple(np.empty((b, h, s, d), np.float32) for _ in range(3))
        self.ws = np.empty(max(1, g.get_workspace_size()), np.uint8)
        fwd()
        self.pack = {t["q"]: q, t["k"]: k, t["v"]: v, t["o"]: fwd.out.copy(), t["do"]: do, ts: fwd.stats.copy()}
        self.pack.update({dq: self.grads[0], dk: self.grads[1], dv: self.grads[2]})

    def __call__(self):
        self.g.execute(self.handle, self.pack, self.ws)
        return self.grads


def numpy_sdpa_bwd(q, k, v, do, causal: bool):
    scale = np.float32(1.0 / math.sqrt(q.shape[-1]))
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
    if causal:
        n = q.shape[-2]
        iu = np.triu_indices(n, 1)
        s[..., iu[0], iu[1]] = -np.inf
    s -= s.max(axis=-1, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(axis=-1, keepdims=True)  # P
    o = np.matmul(s, v)
    dv = np.matmul(np.swapaxes(s, -1, -2), do)
    dp = np.matmul(do, np.swapaxes(v, -1, -2))
    delta = (do * o).sum(axis=-1, keepdims=True)
    dp -= delta
    dp *= s  # dS
    dq = np.matmul(dp, k) * scale
    dk = np.matmul(np.swapaxes(dp, -1, -2), q) * scale
    return dq, dk, dv


def numpy_sdpa(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> np.ndarray:
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * np.float32(1.0 / math.sqrt(q.shape[-1]))
    if causal:
        n = q.shape[-2]
        s[..., np.triu_indices(n, 1)[0], np.triu_indices(n, 1)[1]] = -np.inf
    s -= s.max(axis=-1, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(axis=-1, keepdims=True)
    return np.matmul(s, v)


def time_interleaved(impls: dict, rounds: int, seconds: float, settle: float = 0.0) -> dict:
    """Best time of each implementation over interleaved rounds. ``settle`` seconds of sleep before every
    call let the previous implementation's worker threads go idle: OpenBLAS's (numpy's matmul) keep
    spinning for ~0.1 s after a call returns and took 20-45 % of the 2 cores from whatever ran next."""
    best = {name: float("inf") for name in impls}
    t_case = time.perf_counter()
    for rnd in range(rounds):
        for name, fn in impls.items():
            if settle > 0:
                time.sleep(settle)
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
        if rnd >= 2 and time.perf_counter() - t_case > seconds:
            break
    return best


def bench_backward(handle, eng, b, h, s, d, causal, q, k, v, rng, torch, args, info) -> dict:
    do = rng.standard_normal((b, h, s, d)).astype(np.float32)
    ours = EngineBwd(handle, eng, b, h, s, d, causal, q, k, v, do)
    impls = {"hipdnn": ours}
    ref = None
    if torch is not None:
        tq, tk, tv = (torch.from_numpy(x.copy()).requires_grad_(True) for x in (q, k, v))
        to = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
        tdo = torch.from_numpy(do)

        def run_torch():
            return torch.autograd.grad(to, (tq, tk, tv), tdo, retain_graph=True)

        impls["torch"] = run_torch
        ref = lambda: tuple(x.numpy() for x in run_torch())  # noqa: E731
    if s <= args.no_numpy_bwd_above:
        impls["numpy"] = lambda: numpy_sdpa_bwd(q, k, v, do, causal)
        ref = ref or impls["numpy"]
    err = None
    if ref is not None:
        mine, theirs = ours(), ref()
        err = max(float(np.abs(a - r).max() / max(1e-30, float(np.abs(r).max()))) for a, r in zip(mine, theirs))
    best = time_interleaved(impls, args.rounds, args.seconds, args.settle)
    fl = bwd_flops(b, h, s, d, causal)
    row = {"B": b, "H": h, "S": s, "D": d, "causal": causal, "flops": fl, "rel_err_vs_ref": err}
    for name, t in best.items():
        row[f"{name}_ms"] = t * 1e3
        row[f"{name}_gflops"] = fl / t / 1e9
    if "torch" in best:
        row["ratio_vs_torch"] = best["torch"] / best["hipdnn"]
    if "numpy" in best:
        row["ratio_vs_numpy"] = best["numpy"] / best["hipdnn"]
    if info["peak_gflops"]:
        row["hipdnn_fraction_of_peak"] = row["hipdnn_gflops"] / info["peak_gflops"]
    print(
        f"  bwd D={d:3d} S={s:5d} causal={int(causal)}  hipdnn {row['hipdnn_gflops']:6.1f} GF/s"
        + (f"  torch {row['torch_gflops']:6.1f}  x{row['ratio_vs_torch']:.2f}" if "torch" in best else "")
        + (f"  numpy {row['numpy_gflops']:6.1f}" if "numpy" in best else "")
        + (f"  peak {row['hipdnn_fraction_of_peak']:.0%}" if info["peak_gflops"] else "")
        + (f"  err {err:.1e}" if err is not None else ""),
        flush=True,
    )
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--seconds", type=float, default=6.0, help="time budget per case (rounds stop early)")
    ap.add_argument(
        "--settle",
        type=float,
        default=0.15,
        help="seconds of sleep before each timed call (lets another library's spinning threads park)",
    )
    ap.add_argument("--no-numpy-above", type=int, default=4096, help="skip numpy for S above this")
    ap.add_argument("--no-numpy-bwd-above", type=int, default=2048, help="skip the numpy backward above this S")
    ap.add_argument("--no-backward", action="store_true")
    ap.add_argument(
        "--backward-only",
        action="store_true",
        help="time only the backward (S = 512, 1024, 2048 unless --seqs); writes bench/results/cpu_sdpa_bwd",
    )
    ap.add_argument("--engine-dir", default=None, help="load the CPU engine from this directory only")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--seqs", default=None, help="comma-separated S values (default 512..4096)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "cpu_sdpa"))
    ap.add_argument(
        "--fma-ghz",
        type=float,
        default=2.75,
        help="clock of the FMA units for the peak (measured on the sessions' Xeon; 0: /proc/cpuinfo's cpu MHz)",
    )
    args = ap.parse_args()

    info = cpu_info(args.fma_ghz)
    try:
        import torch

        torch.set_num_threads(info["cores"])
        torch_version = torch.__version__
    except ImportError:
        torch, torch_version = None, None

    if args.engine_dir:
        handle = hipdnn.Handle(plugin_paths=[args.engine_dir], plugin_loading_mode=PluginLoadingMode.ABSOLUTE)
    else:
        handle = hipdnn.Handle()
    b, h = 1, 8
    seqs = (512, 1024) if args.quick else (512, 1024, 2048) if args.backward_only else (512, 1024, 2048, 4096)
    if args.seqs:
        seqs = tuple(int(x) for x in args.seqs.split(","))
    rows, brows = [], []
    rng = np.random.default_rng(0)
    for d in (int(x) for x in args.dims.split(",")):
        for causal in (False, True):
            for s in seqs:
                q, k, v = (rng.standard_normal((b, h, s, d)).astype(np.float32) for _ in range(3))
                eng = Engine(handle, b, h, s, d, causal, q, k, v)
                if args.backward_only:
                    brows.append(bench_backward(handle, eng, b, h, s, d, causal, q, k, v, rng, torch, args, info))
                    del eng
                    continue
                impls = {"hipdnn": eng}
                if torch is not None:
                    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))

                    def run_torch(tq=tq, tk=tk, tv=tv, causal=causal):
                        with torch.no_grad():
                            return torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)

                    impls["torch"] = run_torch
                if s <= args.no_numpy_above:
                    impls["numpy"] = lambda q=q, k=k, v=v, causal=causal: numpy_sdpa(q, k, v, causal)
                # correctness of the engine against torch (or numpy) on this very case
                ref = impls.get("torch", impls.get("numpy"))
                err = None
                if ref is not None:
                    r = np.asarray(ref())
                    err = float(np.abs(eng() - r).max() / max(1e-30, float(np.abs(r).max())))
                best = time_interleaved(impls, args.rounds, args.seconds, args.settle)
                fl = flops(b, h, s, d, causal)
                row = {"B": b, "H": h, "S": s, "D": d, "causal": causal, "flops": fl, "rel_err_vs_ref": err}
                for name, t in best.items():
                    row[f"{name}_ms"] = t * 1e3
                    row[f"{name}_gflops"] = fl / t / 1e9
                if "torch" in best:
                    row["ratio_vs_torch"] = best["torch"] / best["hipdnn"]
                if "numpy" in best:
                    row["ratio_vs_numpy"] = best["numpy"] / best["hipdnn"]
                if info["peak_gflops"]:
                    row["hipdnn_fraction_of_peak"] = row["hipdnn_gflops"] / info["peak_gflops"]
                rows.append(row)
                print(
                    f"D={d:3d} S={s:5d} causal={int(causal)}  hipdnn {row['hipdnn_gflops']:6.1f} GF/s"
                    + (f"  torch {row['torch_gflops']:6.1f}  x{row['ratio_vs_torch']:.2f}" if "torch" in best else "")
                    + (f"  numpy {row['numpy_gflops']:6.1f}" if "numpy" in best else "")
                    + (f"  peak {row['hipdnn_fraction_of_peak']:.0%}" if info["peak_gflops"] else "")
                    + (f"  err {err:.1e}" if err is not None else ""),
                    flush=True,
                )
                if not args.no_backward:
                    brows.append(bench_backward(handle, eng, b, h, s, d, causal, q, k, v, rng, torch, args, info))
                del eng, impls

    result = {
        "command": "python " + " ".join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {
            **info,
            "platform": platform.platform(),
            "python": platform.python_version(),
            "numpy": np.__version__,
            "torch": torch_version,
            "loadavg_at_end": os.getloadavg() if hasattr(os, "getloadavg") else None,
        },
        "engine_plugins": [p.name for p in handle.loaded_plugins()],
        "engine_paths": [str(p.path) for p in handle.loaded_plugins()],
        # the backward's instantiation follows the CPU (AVX-512, else AVX2, else the baseline) unless one of
        # these is set
        "isa_env": {
            k: os.environ[k] for k in ("HIPDNN_CPU_ENGINE_BASELINE", "HIPDNN_CPU_ENGINE_NO_AVX512") if k in os.environ
        },
        "method": "best of interleaved rounds, each call after a settle sleep (seconds: settle); "
        "GFLOP/s = 4*B*H*S*S*D (x0.5 causal) / time",
        "settle": args.settle,
        "results": rows,
        "backward_method": "best of interleaved rounds (settle sleep as above); "
        "GFLOP/s = 2.5 x forward flops = 10*B*H*S*S*D (x0.5 causal) "
        "/ time; torch = torch.autograd.grad of a retained scaled_dot_product_attention graph (backward only); "
        "numpy materialises P",
        "backward_results": brows,
    }
    out = Path(args.out)
    if args.backward_only and out == ROOT / "bench" / "results" / "cpu_sdpa":
        out = out.with_name("cpu_sdpa_bwd")
    if args.quick and out.parent == ROOT / "bench" / "results" and out.name in ("cpu_sdpa", "cpu_sdpa_bwd"):
        out = out.with_name(out.name + "_quick")  # a quick run never replaces the full results
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1))
    print("wrote", out.with_suffix(".json"))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot")
        return
    kinds = [kind for kind in (("forward", rows), ("backward", brows)) if kind[1]]
    nrow = len(kinds)
    fig, axes2 = plt.subplots(nrow, 4, figsize=(18, 4.2 * nrow), sharey=True, squeeze=False)
    for (ax, (d, causal)), (kind, src) in (
        (pair, kind)
        for r_i, kind in enumerate(kinds)
        for pair in zip(axes2[r_i], [(64, False), (64, True), (128, False), (128, True)])
    ):
        sel = [r for r in src if r["D"] == d and r["causal"] == causal]
        xs = [r["S"] for r in sel]
        for name, style in (("hipdnn", "o-"), ("torch", "s--"), ("numpy", "^:")):
            ys = [r.get(f"{name}_gflops") for r in sel]
            if any(y is not None for y in ys):
                ax.plot(
                    [x for x, y in zip(xs, ys) if y is not None], [y for y in ys if y is not None], style, label=name
                )
        if info["peak_gflops"]:
            ax.axhline(info["peak_gflops"], color="gray", lw=0.8, ls="-.", label="FMA peak")
        ax.set_xscale("log", base=2)
        ax.set_title(f"{kind} D={d} {'causal' if causal else 'no mask'}")
        ax.set_xlabel("S")
        ax.grid(alpha=0.3)
    for r_i in range(nrow):
        axes2[r_i][0].set_ylabel("GFLOP/s (fp32)")
    axes2[0][0].legend()
    fig.suptitle(f"SDPA forward / backward fp32, B=1 H=8, {info['cores']} cores of {info['model']}")
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=90)
    print("wrote", out.with_suffix(".png"))


if __name__ == "__main__":
    main()
