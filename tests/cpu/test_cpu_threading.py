"""``hipdnn.Handle(cpu_threading=...)``: the CPU engine's CPU_THREADING knob, where the attention
forward's parallel items run: "pool" (the engine's worker pool, the default) or "openmp" (the OpenMP
runtime's team). Both hand out the same items, so the values are the same bit for bit (and checked
against float64 with NaN-filled outputs): the panel kernel, the AMX tile kernel, the rows kernel
with key chunks merged after, ragged batches. Bad values are refused naming the argument, and the
plan says which one it runs on."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pytest

import hipdnn
from hipdnn.backend.placement import read_knob_ids
from tests.cpu.test_sdpa_isa import ALL
from tests.cpu.test_sdpa_modes import run_case

# Each takes several threads' worth of items (cpu_threads=3 below).
CASES = [
    "s1000_fp32_d128",  # panel kernel, 3-vector panels and a 2-vector tail
    "s256_tail_panels_causal_bias",
    "s129_bf16_bias_alibi",  # the AMX tile kernel where the CPU has it
    "decode_mqa_key_chunks",  # rows kernel: one row block, keys split into chunks, merged after
    "decode_chunks_padding_bias_alibi",
    "decode_bf16_mqa_key_chunks_d96",
    "sq16_gqa_rows_blocks",  # rows kernel: several row blocks
    "fp32_padding",
]


@pytest.mark.parametrize("name", CASES)
def test_openmp_team_computes_what_the_pool_does(name: str) -> None:
    got = {}
    for threading in ("pool", "openmp"):
        with hipdnn.Handle(device="cpu", cpu_threads=3, cpu_threading=threading) as h:
            got[threading] = run_case(h, ALL[name], seed=len(name))
    np.testing.assert_array_equal(got["pool"], got["openmp"])


def plan_descriptions(caplog: pytest.LogCaptureFixture, **handle_args: Any) -> list[str]:
    with caplog.at_level(logging.INFO, logger="hipdnn"), hipdnn.Handle(device="cpu", **handle_args) as h:
        run_case(h, ALL["decode_mqa_key_chunks"])
    return [r.getMessage() for r in caplog.records if "execution context" in r.getMessage()]


@pytest.mark.parametrize(
    ("threading", "words"), [(None, "(worker pool)"), ("pool", "(worker pool)"), ("openmp", "(OpenMP team)")]
)
def test_plan_says_where_it_runs(caplog: pytest.LogCaptureFixture, threading: str | None, words: str) -> None:
    described = plan_descriptions(caplog, cpu_threading=threading)
    assert described and all(words in m for m in described), described


@pytest.mark.parametrize("value", ["OpenMP", "omp", "", 1, True, b"pool", ["pool"]])
def test_bad_values_are_refused(value: Any) -> None:
    with pytest.raises(hipdnn.HipdnnError, match="Handle: cpu_threading = .* is not one of pool, openmp") as err:
        hipdnn.Handle(device="cpu", cpu_threading=value)
    assert err.value.code is hipdnn.ErrorCode.INVALID_VALUE


def test_a_str_subclass_is_refused_without_running_its_methods() -> None:
    class Hostile(str):
        def __eq__(self, other: object) -> bool:
            raise AssertionError("__eq__ ran")

        def __hash__(self) -> int:
            raise AssertionError("__hash__ ran")

    with pytest.raises(hipdnn.HipdnnError, match="Handle: cpu_threading"):
        hipdnn.Handle(device="cpu", cpu_threading=Hostile("pool"))


def test_the_engine_declares_the_knob() -> None:
    with hipdnn.Handle(device="cpu") as h:
        plugin = h._backend.engine_to_plugin[101]
        g = hipdnn.Graph(name="probe", io_data_type=hipdnn.DataType.FLOAT)
        q = g.tensor(name="q", dim=[1, 2, 37, 16], data_type=hipdnn.DataType.FLOAT)
        o, _ = g.sdpa(q, q, q, attn_scale=0.25)
        o.set_output(True)
        g.build(h)
        details = plugin.engine_details(101, g.serialize())
    assert read_knob_ids(details) == ("CPU_THREADS", "CPU_THREADING")


@pytest.mark.parametrize("threading_choice", ["pool", "openmp"])
def test_calls_from_several_threads_at_once(threading_choice: str) -> None:
    """Python threads executing one plan at once (each call with its own workspace): on the OpenMP
    team each caller gets a team of its own, on the pool a caller that finds it busy runs alone;
    every call's values are the single-threaded call's."""
    import threading

    f32 = hipdnn.DataType.FLOAT
    rng = np.random.default_rng(5)
    with hipdnn.Handle(device="cpu", cpu_threads=2, cpu_threading=threading_choice) as h:
        g = hipdnn.Graph(name="concurrent", io_data_type=f32)
        dims = {"q": [1, 4, 1, 64], "k": [1, 4, 1500, 64], "v": [1, 4, 1500, 64]}
        ts = {n: g.tensor(name=n, dim=d, data_type=f32) for n, d in dims.items()}
        o, _ = g.sdpa(ts["q"], ts["k"], ts["v"], attn_scale=0.125)
        o.set_output(True)
        g.build(h)
        inputs = {ts[n]: rng.standard_normal(d).astype(np.float32) for n, d in dims.items()}
        size = max(1, g.get_workspace_size())

        def run() -> np.ndarray:
            out = np.full([1, 4, 1, 64], np.nan, np.float32)
            g.execute(h, {**inputs, o: out}, np.empty(size, np.uint8))
            return out

        want = run()
        results: list[np.ndarray] = []
        errors: list[BaseException] = []
        start = threading.Barrier(4)

        def worker() -> None:
            try:
                start.wait()
                for _ in range(20):
                    results.append(run())
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors
    assert len(results) == 80 and all(np.array_equal(r, want) for r in results)
