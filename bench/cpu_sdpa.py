"""SDPA forward and backward on the CPU: hipdnn's CPU engine vs PyTorch's CPU SDPA vs numpy, per ISA path.

    python bench/cpu_sdpa.py                      # full sweep, writes bench/results/cpu_sdpa.{json,png}
    python bench/cpu_sdpa.py --quick              # S = 512, 1024 only (and fewer decode rows)
    python bench/cpu_sdpa.py --backward-only      # backward rows at S = 512, 1024, 2048: cpu_sdpa_bwd.{json,png}
    python bench/cpu_sdpa.py --dtype bfloat16 --seqs 512,1024,2048 --out bench/results/cpu_sdpa_bf16
                                                  # bf16 forward and backward vs torch on bf16 tensors
                                                  # (--dtype float16: the same in fp16)
    python bench/cpu_sdpa.py --engine-dir DIR     # the CPU engine built in DIR (e.g. an older commit's)
    python bench/cpu_sdpa.py --isa avx2,avx512 --no-backward --seqs 512,1024,2048 --out bench/results/cpu_sdpa_isa
                                                  # each ISA build of the kernels (HIPDNN_CPU_ISA), in one run

fp32 (or bf16, ``--dtype``), B=1, H=8, D in (64, 128), S in (512 ... 4096), causal and not. Each case is
built once through ``hipdnn.Graph`` and executed repeatedly; the three implementations are timed interleaved (one run of
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

Decode rows (Sq = 1, Skv 256 ... 4096, B = 1, H in 8 and 32, D in 64 and 128; ``--no-decode`` skips
them) time three calls on the same data, interleaved: a whole ``Graph.execute`` (variant pack of numpy
arrays), a bound call (``Graph.bind``, pointers), and ``torch.nn.functional.scaled_dot_product_attention``.
A round times ``--decode-calls`` calls of each back to back (after the settle sleep) and the best round's
mean is kept, in microseconds.

bf16, fp16. ``--dtype bfloat16`` (or ``float16``) runs the forward and backward rows with q, k, v, o, dO and
the gradients in that type (stats fp32) against torch's SDPA on tensors holding the same bits, forward and
autograd backward (numpy and the decode rows are fp32 only and are skipped). Each row also has both
implementations' error against a float64 reference on the values those inputs hold (``rel_err_vs_f64``,
``torch_rel_err_vs_f64``, max abs error over max abs reference; the backward's reference is torch's autograd
in float64); an output's own rounding is 2^-9 relative in bf16 (both sit near 2e-3), 2^-12 in fp16.

ISA. ``--isa`` (comma-separated: baseline, avx2, avx512, avx512_bf16, amx; default: the engine's own choice, the widest
the CPU has) runs every row once per ISA, each on its own handle with ``HIPDNN_CPU_ISA`` set while its
plans are built; the ISA reported is the one the engine's plan description names (logged at INFO when
a plan's context is made), not the one asked for.

Peak. The fraction of peak is against a measured peak of the ISA that ran: cores x the GFLOP/s of a
register-only loop of independent FMAs on one core (24 zmm chains for AVX-512, 12 ymm for AVX2; 14 SSE
mulps + 14 addps for the baseline, which the x86-64-v2 build compiles to), best of 5, compiled here
with ``cc``; the loop on every core at once is recorded beside it (on a shared machine it is the first
to lose to other processes). ``--no-probe``, or no compiler, falls back to cores x 2 FMA pipes x lanes
x 2 x ``--fma-ghz`` (default 2.75, the measured FMA clock of the Xeon the earlier results came from).
On a CPU with AVX512_BF16 the probe also records ``bf16_dot``, 24 zmm ``vdpbf16ps`` chains (64 flops
each): not an engine ISA (bf16 rows run the fp32 kernels and are measured against their ISA's fp32
peak), only the ceiling a bf16 dot-product kernel would have.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import hipdnn  # noqa: E402
from hipdnn.plugins.discovery import PluginLoadingMode  # noqa: E402

F32 = hipdnn.DataType.FLOAT
Row = dict[str, Any]
Impls = dict[str, Callable[[], object]]


ISAS = ("baseline", "avx2", "avx512", "avx512_bf16", "amx")
LANES = {"baseline": 4, "avx2": 8, "avx512": 16, "avx512_bf16": 16, "amx": 16}


def bf16_np() -> Any:
    """numpy's bfloat16 (ml_dtypes), or None without it."""
    try:
        import ml_dtypes  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


BF16_NP = bf16_np()


def to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 (round to nearest even), as numpy's bfloat16."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16).view(BF16_NP)


def bf16_to_f32(x: np.ndarray) -> np.ndarray:
    return (np.asarray(x).view(np.uint16).astype(np.uint32) << 16).view(np.float32)


@dataclass(frozen=True)
class Low:
    """A 16-bit float type the rows can run in (``--dtype``): hipdnn's, numpy's and torch's names for it,
    and whether an AMX plan runs it on the tiles (its rows are then measured against the tile peak)."""

    name: str
    hipdnn_type: hipdnn.DataType
    tiles: bool

    @property
    def np_type(self) -> Any:
        return BF16_NP if self.tiles else np.dtype(np.float16)

    def encode(self, x: np.ndarray) -> np.ndarray:
        """float32 -> this type (nearest even)."""
        return to_bf16(x) if self.tiles else np.ascontiguousarray(x, dtype=np.float32).astype(np.float16)

    def decode(self, x: np.ndarray) -> np.ndarray:
        return bf16_to_f32(x) if self.tiles else np.asarray(x).view(np.float16).astype(np.float32)

    def torch_view(self, torch: Any, x: np.ndarray) -> Any:
        """A torch tensor of this type holding x's bits."""
        return torch.from_numpy(np.ascontiguousarray(x).view(np.int16)).view(getattr(torch, self.name))


LOWS = {
    "bfloat16": Low("bfloat16", hipdnn.DataType.BFLOAT16, tiles=True),
    "float16": Low("float16", hipdnn.DataType.HALF, tiles=False),
}


# Register-only FLOP loops, one per ISA, run on N threads at once; prints GFLOP/s.
PROBE_C = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
static long iters; static int kind; static pthread_barrier_t bar;
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
#define Z(i) "vfmadd231ps %%zmm30, %%zmm31, %%zmm" #i "\n"
#define Y(i) "vfmadd231ps %%ymm14, %%ymm15, %%ymm" #i "\n"
#define B(i) "vdpbf16ps %%zmm30, %%zmm31, %%zmm" #i "\n"
#define M(i) "mulps %%xmm14, %%xmm" #i "\n"
#define A(i) "addps %%xmm15, %%xmm" #i "\n"
#define T(c) "tdpbf16ps %%tmm6, %%tmm4, %%tmm" #c "\n"
static void loop(long n) {
  if (kind == 4) {  /* AMX-BF16: 4 independent 16x16 accumulators, 16x16x32 bf16 products each */
    struct { unsigned char palette, start, rsv[14]; unsigned short colsb[16]; unsigned char rows[16]; }
      __attribute__((aligned(64))) cfg = {0};
    cfg.palette = 1;
    for (int i = 0; i < 8; ++i) { cfg.rows[i] = 16; cfg.colsb[i] = 64; }
    __asm__ volatile("ldtilecfg %1\n tilezero %%tmm0\n tilezero %%tmm1\n tilezero %%tmm2\n tilezero %%tmm3\n"
      " tilezero %%tmm4\n tilezero %%tmm6\n 1:\n" T(0) T(1) T(2) T(3) T(0) T(1) T(2) T(3)
      "dec %0\n jnz 1b\n tilerelease\n" : "+r"(n) : "m"(cfg) : "memory");
  } else if (kind == 3)
    __asm__ volatile("vxorps %%xmm30, %%xmm30, %%xmm30\n vxorps %%xmm31, %%xmm31, %%xmm31\n 1:\n"
      B(0) B(1) B(2) B(3) B(4) B(5) B(6) B(7) B(8) B(9) B(10) B(11)
      B(12) B(13) B(14) B(15) B(16) B(17) B(18) B(19) B(20) B(21) B(22) B(23)
      "dec %0\n jnz 1b\n" : "+r"(n) :: "memory");
  else if (kind == 2)
    __asm__ volatile("vxorps %%xmm30, %%xmm30, %%xmm30\n vxorps %%xmm31, %%xmm31, %%xmm31\n 1:\n"
      Z(0) Z(1) Z(2) Z(3) Z(4) Z(5) Z(6) Z(7) Z(8) Z(9) Z(10) Z(11)
      Z(12) Z(13) Z(14) Z(15) Z(16) Z(17) Z(18) Z(19) Z(20) Z(21) Z(22) Z(23)
      "dec %0\n jnz 1b\n" : "+r"(n) :: "memory");
  else if (kind == 1)
    __asm__ volatile("vxorps %%xmm14, %%xmm14, %%xmm14\n vxorps %%xmm15, %%xmm15, %%xmm15\n 1:\n"
      Y(0) Y(1) Y(2) Y(3) Y(4) Y(5) Y(6) Y(7) Y(8) Y(9) Y(10) Y(11)
      "dec %0\n jnz 1b\n" : "+r"(n) :: "memory");
  else
    __asm__ volatile("xorps %%xmm14, %%xmm14\n xorps %%xmm15, %%xmm15\n 1:\n"
      M(0) A(7) M(1) A(8) M(2) A(9) M(3) A(10) M(4) A(11) M(5) A(12) M(6) A(13)
      M(0) A(7) M(1) A(8) M(2) A(9) M(3) A(10) M(4) A(11) M(5) A(12) M(6) A(13)
      "dec %0\n jnz 1b\n" : "+r"(n) :: "memory");
}
static void* run(void* a) { (void)a; pthread_barrier_wait(&bar); loop(iters); pthread_barrier_wait(&bar); return 0; }
int main(int argc, char** argv) {
  kind = atoi(argv[1]); int nt = atoi(argv[2]); iters = atol(argv[3]);
  double per_iter = kind == 4 ? 8 * 16384.0 : kind == 3 ? 24 * 64 : kind == 2 ? 24 * 32 : kind == 1 ? 12 * 16 : 28 * 4;
  if (kind == 4 && syscall(SYS_arch_prctl, 0x1023, 18) != 0) return 1;  /* ARCH_REQ_XCOMP_PERM, XTILEDATA */
  pthread_t th[256]; pthread_barrier_init(&bar, 0, nt + 1);
  for (int i = 0; i < nt; ++i) pthread_create(&th[i], 0, run, 0);
  pthread_barrier_wait(&bar); double t0 = now(); pthread_barrier_wait(&bar); double t = now() - t0;
  for (int i = 0; i < nt; ++i) pthread_join(th[i], 0);
  printf("%.3f\n", nt * iters * per_iter / t / 1e9);
  return 0;
}
"""


def cpu_flags_model() -> tuple[str, float | None, set[str]]:
    model: str = "unknown"
    mhz: float | None = None
    flags: set[str] = set()
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
    return model, mhz, flags


def measure_peaks(cores: int, flags: set[str]) -> dict[str, dict[str, float]] | None:
    """GFLOP/s of each ISA's register-only loop on 1 core and on every core (best of 3), or None."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        return None
    kinds = {"baseline": 0}
    if {"avx2", "fma"} <= flags:
        kinds["avx2"] = 1
    if "avx512f" in flags:
        kinds["avx512"] = 2
    if "avx512_bf16" in flags:
        # the ceiling of a vdpbf16ps kernel (32 bf16 products into 16 fp32 lanes): the bf16 rows of an
        # avx512_bf16 plan, whose dot-product panels serve them, are measured against it
        kinds["bf16_dot"] = 3
    if {"amx_tile", "amx_bf16"} <= flags:
        kinds["amx"] = 4  # the tile unit: bf16 rows on an AMX plan are measured against it
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "probe.c", Path(tmp) / "probe"
        src.write_text(PROBE_C)
        if subprocess.run([cc, "-O2", "-pthread", str(src), "-o", str(exe)], capture_output=True).returncode:
            return None
        peaks: dict[str, dict[str, float]] = {}
        for isa, kind in kinds.items():
            row = {}
            for nt in sorted({1, cores}):
                best = 0.0
                for _ in range(5):
                    out = subprocess.run([str(exe), str(kind), str(nt), "20000000"], capture_output=True, text=True)
                    with contextlib.suppress(ValueError):
                        best = max(best, float(out.stdout.strip()))
                row["1_core" if nt == 1 else "all_cores"] = best
            row.setdefault("all_cores", row["1_core"])
            peaks[isa] = row
    return peaks


def cpu_info(fma_ghz: float, probe: bool) -> Row:
    model, mhz, flags = cpu_flags_model()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    peaks = measure_peaks(cores, flags) if probe else None
    clock_ghz = fma_ghz if fma_ghz > 0 else (mhz or 0.0) / 1e3
    formula = {
        isa: cores * 2 * LANES[isa] * 2 * clock_ghz if clock_ghz else None
        for isa in ISAS
        if isa == "baseline" or (isa == "avx2" and "avx2" in flags) or (isa == "avx512" and "avx512f" in flags)
    }
    return {
        "model": model,
        "cpu_mhz_from_proc_cpuinfo": mhz,
        "cores": cores,
        "isa_flags": sorted(f for f in flags if f.startswith(("avx", "amx", "fma", "f16c"))),
        "peak_gflops_measured": peaks,
        "peak_gflops_formula": formula,
        "peak_clock_ghz_formula": clock_ghz or None,
        "peak_method": "measured: register-only loops (24 zmm FMA chains; 12 ymm; 14 SSE mulps + 14 addps; "
        "bf16_dot: 24 zmm vdpbf16ps chains, 64 flops each; amx: 4 tile accumulators, tdpbf16ps 16x16x32) on one "
        "core and on every core at once, best of 5; the peak used is cores x the one-core figure"
        if peaks
        else "formula: cores x 2 FMA pipes x fp32 lanes x 2 flops x clock ("
        + ("--fma-ghz" if fma_ghz > 0 else "cpu MHz from /proc/cpuinfo")
        + ")",
    }


def peak_for(info: Row, isa: str, bf16: bool = False) -> float | None:
    """The machine's peak for isa: cores x the best one-core figure (on a shared machine the all-cores run
    is the first to lose to other processes, and a peak below the kernel's own speed means nothing). bf16
    rows use it too (their kernel widens bf16 to fp32 and runs fp32 FMAs), except on an AMX plan, whose
    tile kernels serve them: the tile unit's peak, and on an avx512_bf16 plan, whose dot-product kernels
    serve them: the vdpbf16ps loop's; the fp32 rows of both run the AVX-512 kernels."""
    if isa in ("amx", "avx512_bf16") and not bf16:
        isa = "avx512"
    elif isa == "avx512_bf16":
        isa = "bf16_dot"
    measured = info["peak_gflops_measured"]
    if measured and isa in measured:
        return float(info["cores"] * measured[isa]["1_core"])
    formula: float | None = info["peak_gflops_formula"].get(isa)
    return formula


@contextlib.contextmanager
def isa_env(isa: str | None) -> Iterator[None]:
    """HIPDNN_CPU_ISA=isa while plans are built (None: leave the environment alone)."""
    if isa is None:
        yield
        return
    old = os.environ.get("HIPDNN_CPU_ISA")
    os.environ["HIPDNN_CPU_ISA"] = isa
    try:
        yield
    finally:
        if old is None:
            del os.environ["HIPDNN_CPU_ISA"]
        else:
            os.environ["HIPDNN_CPU_ISA"] = old


class _Described(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.isas: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        m = re.search(r"isa (\w+)", record.getMessage())
        if m:
            self.isas.append(m.group(1))


def make_handle(args: argparse.Namespace) -> hipdnn.Handle:
    if args.engine_dir:
        return hipdnn.Handle(plugin_paths=[args.engine_dir], plugin_loading_mode=PluginLoadingMode.ABSOLUTE)
    return hipdnn.Handle()


def engine_isa(args: argparse.Namespace, isa: str | None) -> str:
    """The ISA the engine's plans run under HIPDNN_CPU_ISA=isa, read from its plan description."""
    rec = _Described()
    lg = logging.getLogger("hipdnn")
    old_level = lg.level
    lg.setLevel(logging.INFO)
    lg.addHandler(rec)
    try:
        with isa_env(isa):
            h = make_handle(args)
            g = hipdnn.Graph(name="isa_probe", io_data_type=F32)
            t = g.tensor(name="q", dim=[1, 1, 8, 16], data_type=F32)
            o, _ = g.sdpa(t, t, t, attn_scale=0.25)
            o.set_output(True)
            g.build(h)
            h.close()
    finally:
        lg.removeHandler(rec)
        lg.setLevel(old_level)
    return rec.isas[-1] if rec.isas else "unknown (the engine did not describe its plan)"


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
        low: Low | None = None,
    ) -> None:
        io = low.hipdnn_type if low else F32
        g = hipdnn.Graph(name="bench", io_data_type=io, intermediate_data_type=F32, compute_data_type=F32)
        dims, strides = [b, h, s, d], [h * s * d, s * d, d, 1]
        tq = g.tensor(name="q", dim=dims, stride=strides, data_type=io)
        tk = g.tensor(name="k", dim=dims, stride=strides, data_type=io)
        tv = g.tensor(name="v", dim=dims, stride=strides, data_type=io)
        o, st = g.sdpa(tq, tk, tv, attn_scale=1.0 / math.sqrt(d), use_causal_mask=causal, generate_stats=True)
        assert st is not None
        o.set_output(True).set_data_type(io)
        st.set_output(True).set_data_type(F32)
        g.build(handle)
        self.g, self.handle, self.low = g, handle, low
        self.out = np.empty((b, h, s, d), low.np_type if low else np.float32)
        self.stats = np.empty((b, h, s, 1), np.float32)
        self.ws = np.empty(max(1, g.get_workspace_size()), np.uint8)
        self.pack = {tq: q, tk: k, tv: v, o: self.out, st: self.stats}

    def __call__(self) -> np.ndarray:
        self.g.execute(self.handle, self.pack, self.ws)
        return self.out


class EngineBwd:
    """sdpa_backward at the case's shape, fed o and stats from the forward engine."""

    def __init__(
        self,
        handle: hipdnn.Handle,
        fwd: Engine,
        shape: tuple[int, int, int, int, bool],
        qkv: tuple[np.ndarray, np.ndarray, np.ndarray],
        do: np.ndarray,
    ) -> None:
        b, h, s, d, causal = shape
        q, k, v = qkv
        io = fwd.low.hipdnn_type if fwd.low else F32
        g = hipdnn.Graph(name="bench_bwd", io_data_type=io, intermediate_data_type=F32, compute_data_type=F32)
        dims, strides = [b, h, s, d], [h * s * d, s * d, d, 1]
        t = {n: g.tensor(name=n, dim=dims, stride=strides, data_type=io) for n in ("q", "k", "v", "o", "do")}
        ts = g.tensor(name="stats", dim=[b, h, s, 1], stride=[h * s, s, 1, 1], data_type=F32)
        dq, dk, dv = g.sdpa_backward(
            t["q"], t["k"], t["v"], t["o"], t["do"], ts, attn_scale=1.0 / math.sqrt(d), use_causal_mask=causal
        )
        for x in (dq, dk, dv):
            x.set_output(True).set_stride(strides)
        g.build(handle)
        self.g, self.handle = g, handle
        self.grads = tuple(np.empty((b, h, s, d), fwd.low.np_type if fwd.low else np.float32) for _ in range(3))
        self.ws = np.empty(max(1, g.get_workspace_size()), np.uint8)
        fwd()
        self.pack = {t["q"]: q, t["k"]: k, t["v"]: v, t["o"]: fwd.out.copy(), t["do"]: do, ts: fwd.stats.copy()}
        self.pack.update({dq: self.grads[0], dk: self.grads[1], dv: self.grads[2]})

    def __call__(self) -> tuple[np.ndarray, ...]:
        self.g.execute(self.handle, self.pack, self.ws)
        return self.grads


def numpy_sdpa_bwd(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, do: np.ndarray, causal: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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
    out: np.ndarray = np.matmul(s, v)
    return out


def sdpa_f64(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> np.ndarray:
    """The float64 reference (per head, to keep the S x S scores small)."""
    out = np.empty(q.shape, np.float64)
    n = q.shape[-2]
    for bi in range(q.shape[0]):
        for hi in range(q.shape[1]):
            sc = q[bi, hi].astype(np.float64) @ k[bi, hi].astype(np.float64).T / math.sqrt(q.shape[-1])
            if causal:
                sc[np.triu_indices(n, 1)] = -np.inf
            p = np.exp(sc - sc.max(-1, keepdims=True))
            out[bi, hi] = (p / p.sum(-1, keepdims=True)) @ v[bi, hi].astype(np.float64)
    return out


def time_interleaved(impls: Impls, rounds: int, seconds: float, settle: float = 0.0) -> dict[str, float]:
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


def row_of(best: dict[str, float], name: str, fl: float, peak: float | None, base: Row) -> Row:
    """One result row for implementation ``name`` of ``best`` (seconds), with torch / numpy beside it."""
    row = dict(base)
    t = best[name]
    row["hipdnn_ms"] = t * 1e3
    row["hipdnn_gflops"] = fl / t / 1e9
    for other in ("torch", "numpy"):
        if other in best:
            row[f"{other}_ms"] = best[other] * 1e3
            row[f"{other}_gflops"] = fl / best[other] / 1e9
            row[f"ratio_vs_{other}"] = best[other] / t
    if peak:
        row["peak_gflops"] = peak
        row["hipdnn_fraction_of_peak"] = row["hipdnn_gflops"] / peak
    return row


def show(prefix: str, row: Row) -> None:
    print(
        f"{prefix} D={row['D']:3d} S={row['S']:5d} causal={int(row['causal'])} [{row['isa']:>8}]"
        f"  hipdnn {row['hipdnn_gflops']:6.1f} GF/s"
        + (f"  torch {row['torch_gflops']:6.1f}  x{row['ratio_vs_torch']:.2f}" if "torch_gflops" in row else "")
        + (f"  numpy {row['numpy_gflops']:6.1f}" if "numpy_gflops" in row else "")
        + (f"  peak {row['hipdnn_fraction_of_peak']:.0%}" if "hipdnn_fraction_of_peak" in row else "")
        + (f"  err {row['rel_err_vs_ref']:.1e}" if row.get("rel_err_vs_ref") is not None else "")
        + (
            f"  vs f64: hipdnn {row['rel_err_vs_f64']:.1e} torch {row['torch_rel_err_vs_f64']:.1e}"
            if row.get("torch_rel_err_vs_f64") is not None
            else ""
        ),
        flush=True,
    )


def bench_backward(
    handle: hipdnn.Handle,
    eng: Engine,
    shape: tuple[int, int, int, int, bool],
    qkv: tuple[np.ndarray, np.ndarray, np.ndarray],
    rng: np.random.Generator,
    torch: Any,
    args: argparse.Namespace,
    isa: str,
    peak: float | None,
) -> Row:
    b, h, s, d, causal = shape
    q, k, v = qkv
    do = rng.standard_normal((b, h, s, d)).astype(np.float32)
    if eng.low:
        # q, k, v are the forward's bf16 / fp16 arrays; torch gets the same bits
        return bench_backward_low(handle, eng, eng.low, shape, qkv, eng.low.encode(do), torch, args, isa, peak)
    with isa_env(args.isa_asked.get(isa)):
        ours = EngineBwd(handle, eng, shape, qkv, do)
    impls: Impls = {"hipdnn": ours}
    ref: Callable[[], tuple[np.ndarray, ...]] | None = None
    if torch is not None:
        tq, tk, tv = (torch.from_numpy(x.copy()).requires_grad_(True) for x in (q, k, v))
        to = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
        tdo = torch.from_numpy(do)

        def run_torch() -> Any:
            return torch.autograd.grad(to, (tq, tk, tv), tdo, retain_graph=True)

        def torch_grads() -> tuple[np.ndarray, ...]:
            return tuple(x.numpy() for x in run_torch())

        impls["torch"] = run_torch
        ref = torch_grads
    if s <= args.no_numpy_bwd_above:

        def numpy_grads() -> tuple[np.ndarray, ...]:
            return numpy_sdpa_bwd(q, k, v, do, causal)

        impls["numpy"] = numpy_grads
        ref = ref or numpy_grads
    err = None
    if ref is not None:
        mine, theirs = ours(), ref()
        err = max(float(np.abs(a - r).max() / max(1e-30, float(np.abs(r).max()))) for a, r in zip(mine, theirs))
    best = time_interleaved(impls, args.rounds, args.seconds, args.settle)
    fl = bwd_flops(b, h, s, d, causal)
    base = {"B": b, "H": h, "S": s, "D": d, "causal": causal, "isa": isa, "flops": fl, "rel_err_vs_ref": err}
    row = row_of(best, "hipdnn", fl, peak, base)
    show("  bwd", row)
    return row


def bench_backward_low(
    handle: hipdnn.Handle,
    eng: Engine,
    low: Low,
    shape: tuple[int, int, int, int, bool],
    qkv: tuple[np.ndarray, np.ndarray, np.ndarray],
    do: np.ndarray,
    torch: Any,
    args: argparse.Namespace,
    isa: str,
    peak: float | None,
) -> Row:
    """The bf16 / fp16 backward beside torch's backward on the same bits; both against float64 gradients
    of the values those bits hold (torch's autograd in float64)."""
    b, h, s, d, causal = shape
    with isa_env(args.isa_asked.get(isa)):
        ours = EngineBwd(handle, eng, shape, qkv, do)
    impls: Impls = {"hipdnn": ours}
    row_extra: Row = {}
    if torch is not None:

        def as_torch(x: np.ndarray) -> Any:
            return low.torch_view(torch, x)

        tq, tk, tv = (as_torch(x).requires_grad_(True) for x in qkv)
        to = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
        tdo = as_torch(do)

        def run_torch() -> Any:
            return torch.autograd.grad(to, (tq, tk, tv), tdo, retain_graph=True)

        impls["torch"] = run_torch
        q64, k64, v64 = (torch.from_numpy(low.decode(x).astype(np.float64)).requires_grad_(True) for x in qkv)
        o64 = torch.nn.functional.scaled_dot_product_attention(q64, k64, v64, is_causal=causal)
        do64 = torch.from_numpy(low.decode(do)).double()
        want = [x.numpy() for x in torch.autograd.grad(o64, (q64, k64, v64), do64)]

        def err(got: tuple[np.ndarray, ...]) -> float:
            return max(float(np.abs(g - w).max() / float(np.abs(w).max())) for g, w in zip(got, want))

        row_extra["rel_err_vs_f64"] = err(tuple(low.decode(x) for x in ours()))
        row_extra["torch_rel_err_vs_f64"] = err(tuple(x.float().numpy() for x in run_torch()))
    best = time_interleaved(impls, args.rounds, args.seconds, args.settle)
    fl = bwd_flops(b, h, s, d, causal)
    base = {"B": b, "H": h, "S": s, "D": d, "causal": causal, "isa": isa, "dtype": low.name, "flops": fl}
    row = row_of(best, "hipdnn", fl, peak, {**base, **row_extra})
    show("  bwd", row)
    return row


class Decode:
    """One decode case (Sq = 1) on one handle: a whole execute and a bound call on the same arrays."""

    def __init__(
        self, handle: hipdnn.Handle, h: int, skv: int, d: int, q: np.ndarray, k: np.ndarray, v: np.ndarray
    ) -> None:
        g = hipdnn.Graph(name="decode", io_data_type=F32, intermediate_data_type=F32, compute_data_type=F32)
        tq = g.tensor(name="q", dim=[1, h, 1, d], stride=[h * d, d, d, 1], data_type=F32)
        tk = g.tensor(name="k", dim=[1, h, skv, d], stride=[h * skv * d, skv * d, d, 1], data_type=F32)
        tv = g.tensor(name="v", dim=[1, h, skv, d], stride=[h * skv * d, skv * d, d, 1], data_type=F32)
        o, _ = g.sdpa(tq, tk, tv, attn_scale=1.0 / math.sqrt(d))
        o.set_output(True)
        g.build(handle)
        self.out = np.empty((1, h, 1, d), np.float32)
        self.ws = np.empty(max(1, g.get_workspace_size()), np.uint8)
        self.g, self.handle = g, handle
        self.pack = {tq: q, tk: k, tv: v, o: self.out}
        self.bound = g.bind(handle, [tq, tk, tv, o])
        self.ptrs = [x.ctypes.data for x in (q, k, v, self.out)]
        self.wsp = self.ws.ctypes.data

    def execute(self) -> None:
        self.g.execute(self.handle, self.pack, self.ws)

    def call(self) -> None:
        self.bound(self.ptrs, self.wsp)


def bench_decode(
    handles: dict[str, hipdnn.Handle], torch: Any, args: argparse.Namespace, rng: np.random.Generator
) -> list[Row]:
    rows: list[Row] = []
    hs = (8,) if args.quick else (8, 32)
    skvs = (256, 1024, 4096) if args.quick else (256, 512, 1024, 2048, 4096)
    n = args.decode_calls
    for h in hs:
        for d in (64, 128):
            for skv in skvs:
                q = rng.standard_normal((1, h, 1, d)).astype(np.float32)
                k = rng.standard_normal((1, h, skv, d)).astype(np.float32)
                v = rng.standard_normal((1, h, skv, d)).astype(np.float32)
                impls: Impls = {}
                errs = {}
                want = numpy_sdpa(q, k, v, False)
                for isa, handle in handles.items():
                    with isa_env(args.isa_asked.get(isa)):
                        dec = Decode(handle, h, skv, d, q, k, v)
                    dec.execute()
                    errs[isa] = float(np.abs(dec.out - want).max() / max(1e-30, float(np.abs(want).max())))

                    def many(fn: Callable[[], None] = dec.execute) -> None:
                        for _ in range(n):
                            fn()

                    def many_bound(fn: Callable[[], None] = dec.call) -> None:
                        for _ in range(n):
                            fn()

                    impls[f"execute[{isa}]"] = many
                    impls[f"bound[{isa}]"] = many_bound
                if torch is not None:
                    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))

                    def many_torch(tq: Any = tq, tk: Any = tk, tv: Any = tv) -> None:
                        with torch.no_grad():
                            for _ in range(n):
                                torch.nn.functional.scaled_dot_product_attention(tq, tk, tv)

                    impls["torch"] = many_torch
                best = time_interleaved(impls, args.rounds, args.seconds, args.settle)
                for isa in handles:
                    row = {
                        "B": 1,
                        "H": h,
                        "Sq": 1,
                        "Skv": skv,
                        "D": d,
                        "isa": isa,
                        "calls_per_round": n,
                        "execute_us": best[f"execute[{isa}]"] / n * 1e6,
                        "bound_us": best[f"bound[{isa}]"] / n * 1e6,
                        "rel_err_vs_numpy": errs[isa],
                    }
                    if "torch" in best:
                        row["torch_us"] = best["torch"] / n * 1e6
                        row["execute_over_torch"] = row["execute_us"] / row["torch_us"]
                        row["bound_over_torch"] = row["bound_us"] / row["torch_us"]
                    rows.append(row)
                    print(
                        f"decode H={h:2d} D={d:3d} Skv={skv:5d} [{isa:>8}]  execute {row['execute_us']:8.1f} us"
                        f"  bound {row['bound_us']:8.1f} us"
                        + (
                            f"  torch {row['torch_us']:8.1f} us  execute/torch {row['execute_over_torch']:.2f}"
                            if "torch_us" in row
                            else ""
                        )
                        + f"  err {errs[isa]:.1e}",
                        flush=True,
                    )
    return rows


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
    ap.add_argument("--no-prefill", action="store_true", help="decode rows only")
    ap.add_argument("--no-decode", action="store_true")
    ap.add_argument("--decode-calls", type=int, default=200, help="decode calls per timed round")
    ap.add_argument(
        "--backward-only",
        action="store_true",
        help="time only the backward (S = 512, 1024, 2048 unless --seqs); writes bench/results/cpu_sdpa_bwd",
    )
    ap.add_argument("--engine-dir", default=None, help="load the CPU engine from this directory only")
    ap.add_argument(
        "--isa", default=None, help="comma-separated ISA builds to run (baseline, avx2, avx512, avx512_bf16, amx)"
    )
    ap.add_argument(
        "--dtype",
        choices=("float32", "bfloat16", "float16"),
        default="float32",
        help="q, k, v, o (and dO and the gradients) of the forward and backward rows (bfloat16, float16: "
        "against torch on tensors of that type; the decode rows are fp32 only and are skipped)",
    )
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--seqs", default=None, help="comma-separated S values (default 512..4096)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "cpu_sdpa"))
    ap.add_argument("--no-probe", action="store_true", help="do not measure the peaks (use the formula)")
    ap.add_argument(
        "--fma-ghz",
        type=float,
        default=2.75,
        help="clock of the FMA units for the formula peak (0: /proc/cpuinfo's cpu MHz)",
    )
    args = ap.parse_args()
    if args.backward_only:
        args.no_decode = True
    low = LOWS.get(args.dtype)
    bf16 = low is not None and low.tiles  # (rows the tiles serve: measured against their peak)
    if low is not None:
        if BF16_NP is None and low.tiles:
            sys.exit("--dtype bfloat16 needs ml_dtypes (numpy's bfloat16)")
        args.no_decode = True  # (the decode rows are fp32)

    info = cpu_info(args.fma_ghz, probe=not args.no_probe)
    torch: Any = None
    torch_version = None
    try:
        import torch as torch_module

        torch = torch_module
        torch.set_num_threads(info["cores"])
        torch_version = torch.__version__
    except ImportError:
        pass

    # One handle per ISA (its own plan caches), each ISA named as the engine reports it.
    asked = [x.strip() for x in args.isa.split(",")] if args.isa else [None]
    handles: dict[str, hipdnn.Handle] = {}
    args.isa_asked = {}
    for want in asked:
        got = engine_isa(args, want)
        if want is not None and got != want:
            sys.exit(f"asked for ISA {want}, the engine runs {got}")
        args.isa_asked[got] = want
        handles[got] = make_handle(args)
    print(
        "ISA paths: "
        + ", ".join(
            f"{isa} (peak {peak_for(info, isa, bf16) or float('nan'):.0f} GFLOP/s on {info['cores']} cores)"
            for isa in handles
        ),
        flush=True,
    )

    b, h = 1, 8
    seqs: tuple[int, ...] = (
        (512, 1024) if args.quick else (512, 1024, 2048) if args.backward_only else (512, 1024, 2048, 4096)
    )
    if args.seqs:
        seqs = tuple(int(x) for x in args.seqs.split(","))
    rows: list[Row] = []
    brows: list[Row] = []
    rng = np.random.default_rng(0)

    def backward(
        engs: dict[str, Engine],
        shape: tuple[int, int, int, int, bool],
        qkv: tuple[np.ndarray, np.ndarray, np.ndarray],
    ) -> None:
        for isa, eng in engs.items():
            brows.append(
                bench_backward(handles[isa], eng, shape, qkv, rng, torch, args, isa, peak_for(info, isa, bf16))
            )

    for d in () if args.no_prefill else (int(x) for x in args.dims.split(",")):
        for causal in (False, True):
            for s in seqs:
                q, k, v = (rng.standard_normal((b, h, s, d)).astype(np.float32) for _ in range(3))
                # bf16: the engine and torch get the same bf16 bits; errors of both against a float64
                # reference on the values those bits hold
                qb, kb, vb = (low.encode(q), low.encode(k), low.encode(v)) if low else (q, k, v)
                engs: dict[str, Engine] = {}
                for isa, handle in handles.items():
                    with isa_env(args.isa_asked[isa]):
                        engs[isa] = Engine(handle, b, h, s, d, causal, qb, kb, vb, low=low)
                if args.backward_only:
                    backward(engs, (b, h, s, d, causal), (qb, kb, vb))
                    del engs
                    continue
                impls: Impls = {f"hipdnn[{isa}]": eng for isa, eng in engs.items()}
                if torch is not None:
                    if low:
                        tq, tk, tv = (low.torch_view(torch, x) for x in (qb, kb, vb))
                    else:
                        tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))

                    def run_torch(tq: Any = tq, tk: Any = tk, tv: Any = tv, causal: bool = causal) -> Any:
                        with torch.no_grad():
                            return torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)

                    impls["torch"] = run_torch
                if s <= args.no_numpy_above and not low:

                    def run_numpy(
                        q: np.ndarray = q, k: np.ndarray = k, v: np.ndarray = v, causal: bool = causal
                    ) -> np.ndarray:
                        return numpy_sdpa(q, k, v, causal)

                    impls["numpy"] = run_numpy
                # correctness of the engine against torch (or numpy) on this very case
                ref = impls.get("torch", impls.get("numpy"))
                f64: np.ndarray | None = None
                torch_err64 = None
                if not low:
                    r = np.asarray(ref()) if ref is not None else None
                else:
                    r = None if ref is None else low.decode(ref().view(torch.int16).numpy())  # type: ignore[attr-defined]
                    f64 = sdpa_f64(low.decode(qb), low.decode(kb), low.decode(vb), causal)
                    if r is not None:
                        torch_err64 = float(np.abs(r - f64).max() / float(np.abs(f64).max()))
                best = time_interleaved(impls, args.rounds, args.seconds, args.settle)
                fl = flops(b, h, s, d, causal)
                for isa, eng in engs.items():
                    mine = low.decode(eng()) if low else eng()
                    err = None if r is None else float(np.abs(mine - r).max() / max(1e-30, float(np.abs(r).max())))
                    one = {n: t for n, t in best.items() if n in ("torch", "numpy")}
                    one["hipdnn"] = best[f"hipdnn[{isa}]"]
                    base = {"B": b, "H": h, "S": s, "D": d, "causal": causal, "isa": isa, "flops": fl}
                    base["dtype"] = args.dtype
                    extra: Row = {"rel_err_vs_ref": err}
                    if f64 is not None:
                        extra["rel_err_vs_f64"] = float(np.abs(mine - f64).max() / float(np.abs(f64).max()))
                        extra["torch_rel_err_vs_f64"] = torch_err64
                    row = row_of(one, "hipdnn", fl, peak_for(info, isa, bf16), {**base, **extra})
                    rows.append(row)
                    show("", row)
                if not args.no_backward:
                    backward(engs, (b, h, s, d, causal), (qb, kb, vb))
                del engs, impls
    drows = [] if args.no_decode else bench_decode(handles, torch, args, rng)

    result = {
        "command": "python " + " ".join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {
            **info,
            "platform": platform.platform(),
            "python": platform.python_version(),
            "numpy": np.__version__,
            "torch": torch_version,
            "torch_threads": torch.get_num_threads() if torch is not None else None,
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "loadavg_at_end": os.getloadavg() if hasattr(os, "getloadavg") else None,
        },
        "engine_plugins": [p.name for h_ in handles.values() for p in h_.loaded_plugins()][:1],
        "engine_paths": sorted({str(p.path) for h_ in handles.values() for p in h_.loaded_plugins()}),
        "isa_paths": {isa: {"asked": args.isa_asked[isa], "peak_gflops": peak_for(info, isa, bf16)} for isa in handles},
        "dtype": args.dtype,
        "isa_env": {
            k: os.environ[k]
            for k in ("HIPDNN_CPU_ISA", "HIPDNN_CPU_ENGINE_BASELINE", "HIPDNN_CPU_ENGINE_NO_AVX512")
            if k in os.environ
        },
        "method": "best of interleaved rounds (every ISA's engine, torch and numpy in the same round), each call "
        "after a settle sleep (seconds: settle); GFLOP/s = 4*B*H*S*S*D (x0.5 causal) / time; fraction of peak: "
        "against the measured peak of the row's ISA on every core",
        "settle": args.settle,
        "results": rows,
        "backward_method": "best of interleaved rounds (settle sleep as above); "
        "GFLOP/s = 2.5 x forward flops = 10*B*H*S*S*D (x0.5 causal) "
        "/ time; torch = torch.autograd.grad of a retained scaled_dot_product_attention graph (backward only); "
        "numpy materialises P",
        "backward_results": brows,
        "decode_method": "Sq=1, B=1, fp32, no mask; per round, decode_calls back-to-back calls of each of: a whole "
        "Graph.execute (numpy variant pack), a bound call (Graph.bind, pointers), torch's "
        "scaled_dot_product_attention (no_grad), interleaved, each after the settle sleep; best round's mean per call",
        "decode_results": drows,
    }
    out = Path(args.out)
    if args.backward_only and out == ROOT / "bench" / "results" / "cpu_sdpa":
        out = out.with_name("cpu_sdpa_bwd")
    if args.quick and out.parent == ROOT / "bench" / "results" and out.name in ("cpu_sdpa", "cpu_sdpa_bwd"):
        out = out.with_name(out.name + "_quick")  # a quick run never replaces the full results
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1))
    print("wrote", out.with_suffix(".json"))
    for h_ in handles.values():
        h_.close()
    if not rows and not brows:
        return
    try:
        import matplotlib  # type: ignore[import-not-found, unused-ignore]

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # type: ignore[import-not-found, unused-ignore]
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
        for isa in handles:
            sel = [r for r in src if r["D"] == d and r["causal"] == causal and r["isa"] == isa]
            xs = [r["S"] for r in sel]
            ax.plot(xs, [r["hipdnn_gflops"] for r in sel], "o-", label=f"hipdnn {isa}")
            if peak_for(info, isa, bf16):
                ax.axhline(peak_for(info, isa, bf16), color="gray", lw=0.8, ls="-.")
        sel = [r for r in src if r["D"] == d and r["causal"] == causal and r["isa"] == next(iter(handles))]
        xs = [r["S"] for r in sel]
        for name, style in (("torch", "s--"), ("numpy", "^:")):
            ys = [r.get(f"{name}_gflops") for r in sel]
            if any(y is not None for y in ys):
                ax.plot(
                    [x for x, y in zip(xs, ys) if y is not None], [y for y in ys if y is not None], style, label=name
                )
        ax.set_xscale("log", base=2)
        ax.set_title(f"{kind} D={d} {'causal' if causal else 'no mask'}")
        ax.set_xlabel("S")
        ax.grid(alpha=0.3)
    for r_i in range(nrow):
        axes2[r_i][0].set_ylabel(f"GFLOP/s ({'bf16 in' if bf16 and kinds[r_i][0] == 'forward' else 'fp32'})")
    axes2[0][0].legend()
    fig.suptitle(
        f"SDPA forward / backward {args.dtype}, B=1 H=8, {info['cores']} cores of {info['model']} (dash-dot: peaks)"
    )
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=90)
    print("wrote", out.with_suffix(".png"))


if __name__ == "__main__":
    main()
