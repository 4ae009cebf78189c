"""Rough throughput of the CPU engine plugin (not a test; run by hand).

    PYTHONPATH=. HIPDNN_CPU_ENGINE_LIB=<build>/engines/cpu/libhipdnn_cpu_engine.so \
        python tests/engine_abi/bench_cpu_engine.py
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import cffi

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from hipdnn.plugins._cdef import sdk_cdef  # noqa: E402
from tests.engine_abi import test_cpu_engine_abi as t  # noqa: E402


def bench(ctx, bufs, flops, reps=5):
    """Best wall time, and GFLOP/s per core from process CPU time (robust on a
    shared machine: time spent preempted is not counted)."""
    ptrs = {u: b.ptr for u, b in bufs.items()}
    assert ctx.execute(ptrs) == t.SUCCESS
    best = best_cpu = float("inf")
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.process_time()
        ctx.execute(ptrs)
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    return best, flops / best / 1e9, flops / max(best_cpu, 1e-9) / 1e9


def main():
    ffi = cffi.FFI()
    ffi.cdef(sdk_cdef())
    lib = ffi.dlopen(os.environ["HIPDNN_CPU_ENGINE_LIB"])
    h = ffi.new("hipdnnEnginePluginHandle_t*")
    assert lib.hipdnnEnginePluginCreate(h) == t.SUCCESS
    handle = h[0]
    for b, hh, s, d in ((1, 8, 1024, 64), (1, 8, 4096, 64), (4, 16, 1, 128))[
        : int(os.environ.get("BENCH_SDPA_CASES", 3))
    ]:
        for mask in (None, "tl"):
            skv = 4096 if s == 1 else s
            case = t.SdpaCase(b, hh, hh, s, skv, d, mask=mask, stats=True)
            tensors, gb = t.sdpa_graph(case)
            ctx = t.make_ctx(ffi, lib, handle, gb)
            bufs = {x.uid: t.make_buf(x.dims, x.strides) for x in tensors}
            frac = 0.5 if mask and s == skv else 1.0
            sec, gf, gfc = bench(ctx, bufs, 4.0 * b * hh * s * skv * d * frac)
            print(
                f"sdpa B={b} H={hh} Sq={s} Skv={skv} D={d} mask={mask}: "
                f"{sec * 1e3:.1f} ms, {gf:.1f} GFLOP/s wall, {gfc:.1f} GFLOP/s per CPU-second"
            )
            ctx.destroy()
    for m, k, n in ((1024, 1024, 1024), (4096, 512, 512)):
        tensors = [t.T(1, [m, k]), t.T(2, [k, n]), t.T(3, [m, n])]
        ctx = t.make_ctx(ffi, lib, handle, t.graph_bytes(tensors, [t.matmul_node(1, 2, 3)]))
        bufs = {x.uid: t.make_buf(x.dims, x.strides) for x in tensors}
        sec, gf, gfc = bench(ctx, bufs, 2.0 * m * k * n)
        print(f"matmul {m}x{k}x{n}: {sec * 1e3:.1f} ms, {gf:.1f} GFLOP/s wall, {gfc:.1f} GFLOP/s per CPU-second")
        ctx.destroy()
    n = 1 << 24
    tensors = [t.T(1, [n]), t.T(2, [n]), t.T(3, [n])]
    ctx = t.make_ctx(ffi, lib, handle, t.graph_bytes(tensors, [t.pw_node(t.PointwiseMode.ADD, 1, 2, 3)]))
    bufs = {x.uid: t.make_buf(x.dims, x.strides) for x in tensors}
    sec, _, _ = bench(ctx, bufs, 0)
    print(f"add 16M fp32: {sec * 1e3:.1f} ms, {3 * 4 * n / sec / 1e9:.1f} GB/s")
    ctx.destroy()
    assert lib.hipdnnEnginePluginDestroy(handle) == t.SUCCESS


if __name__ == "__main__":
    main()
