"""Deserialize fuzzing (issue #16): damaged graph buffers, then build and execute.

Valid graphs of every op kind (SDPA with its options, matmul, a pointwise chain, the norms, reduction,
SDPA backward, dynamic tensors, overrides enabled) are damaged by bit flips, truncations, splices,
word edits and field-level edits made through the generated FlatBuffers object API (out-of-range
enums, huge and negative dims, overflowing strides, missing fields, dangling and duplicated uids,
cycles, empty vectors, type confusion between node kinds). Each buffer then goes through
``Graph.deserialize -> build -> execute``, through the backend descriptors with raw pointers, and
through the CPU engine's own ABI entries; every outcome must be a success or the layer's own error
(HipdnnError, BackendError, PluginError), and no guard byte around any buffer may change. See
``fuzz_corpus.py`` for the oracle; ``tools/fuzz/`` runs the same cases by the million and under
AddressSanitizer. The raw-buffer phase here also runs a few thousand cases through that sanitizer
build when a compiler can make it.
"""

from __future__ import annotations

import json
import random
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import hipdnn
from hipdnn.backend.graph_summary import GraphDecodeError, summarize
from hipdnn.plugins import PluginError
from tests.adversarial.conftest import budget, fuzz_settings
from tests.adversarial.fuzz_corpus import (
    SEEDS,
    STRATEGIES,
    FuzzFailure,
    Oracle,
    Tally,
    bit_flips,
    field_edit,
    make_case,
    misaligned_dims_graph,
    regression_blobs,
    run_cases,
    seed_blobs,
)

CI_SEED = 2026
BLOBS = seed_blobs()
SANITIZER_ENV = {
    "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:exitcode=86",
    "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1:exitcode=87",
}


@pytest.fixture(scope="module")
def oracle(cpu_handle: hipdnn.Handle) -> Oracle:
    return Oracle(cpu_handle)


def test_every_seed_executes_on_every_path(oracle: Oracle) -> None:
    """The corpus starts from graphs that run: mutations of them reach the planner and the kernels."""
    for name, blob in BLOBS.items():
        tally = Tally()
        oracle.run(blob, tally)
        assert dict(tally.outcomes) == {"frontend:executed": 1, "backend:executed": 1, "abi:applicable": 1}, name


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_mutated_buffers(oracle: Oracle, strategy: str) -> None:
    """A fixed set of cases per mutation strategy (the same every run; any failure names its case,
    replayable with ``tools/fuzz/long_fuzz.py --replay SEED:INDEX``)."""
    k = STRATEGIES.index(strategy)
    cases = budget(500)
    tally = run_cases(oracle, CI_SEED, range(k, k + cases * len(STRATEGIES), len(STRATEGIES)), BLOBS)
    assert tally.cases == cases
    # damaged buffers must be refused somewhere, and some must still get through to the kernels
    refused = sum(n for key, n in tally.outcomes.items() if key.startswith("frontend:") and key[9:].isupper())
    assert refused > 0, tally.outcomes
    if strategy in ("bit_flips", "int64_word", "field_edit"):
        executed = tally.outcomes["frontend:executed"] + tally.outcomes["backend:executed"]
        assert executed > 0.02 * cases, tally.outcomes


@pytest.mark.parametrize("name", sorted(BLOBS))
def test_every_truncation(oracle: Oracle, name: str) -> None:
    blob = BLOBS[name]
    step = 1 if name in ("sdpa_options", "dynamic") else 3  # every length for two seeds, a third of the rest
    tally = Tally()
    for n in range(0, len(blob), step):
        try:
            oracle.run(blob[:n], tally)
        except FuzzFailure as exc:
            raise FuzzFailure(f"{name}[:{n}]: {exc}") from exc
    # a prefix that only drops trailing padding may still be a whole graph; most must be refused
    assert tally.outcomes["frontend:executed"] < 0.05 * tally.cases, tally.outcomes


@fuzz_settings(120)
@given(name=st.sampled_from(sorted(BLOBS)), seed=st.integers(0, 2**32 - 1))
def test_field_edits(oracle: Oracle, name: str, seed: int) -> None:
    """Hostile values written through the object API: the wire stays well formed, the meaning does not."""
    oracle.run(field_edit(BLOBS[name], random.Random(seed)), Tally())


@fuzz_settings(120)
@given(name=st.sampled_from(sorted(BLOBS)), seed=st.integers(0, 2**32 - 1), other=st.sampled_from(sorted(BLOBS)))
def test_field_edits_then_byte_damage(oracle: Oracle, name: str, seed: int, other: str) -> None:
    rng = random.Random(seed)
    blob = bit_flips(field_edit(BLOBS[name], rng), rng)
    cut = rng.randrange(len(blob) + 1) & ~3
    oracle.run(blob[:cut] + BLOBS[other][cut:], Tally())


# -- regressions: what the fuzzing found --------------------------------------------------------
def _graph_with_names(graph: str = "g", tensor: str = "x", node: str = "relu") -> hipdnn.Graph:
    g = hipdnn.Graph(name=graph, io_data_type=hipdnn.DataType.FLOAT)
    x = g.tensor(name=tensor, dim=[4], stride=[1], data_type=hipdnn.DataType.FLOAT)
    g.pointwise(hipdnn.PointwiseMode.RELU_FWD, x, name=node).set_output(True)
    return g


@pytest.mark.parametrize("where", ["graph", "tensor", "node"])
def test_a_nul_in_a_name_builds_runs_and_is_shown_escaped(cpu_handle: hipdnn.Handle, where: str) -> None:
    """Names are any string (the wire carries their length). A NUL inside one made the compiled core's
    argument parsing raise ValueError at build. Found by splicing two graphs."""
    g = _graph_with_names(**{where: "a\x00b"})
    g.build(cpu_handle)
    x, y = g.tensors
    xs = np.array([-1, 2, -3, 4], np.float32)
    ys = np.full(4, np.nan, np.float32)
    g.execute(cpu_handle, {x: xs, y: ys})
    np.testing.assert_array_equal(ys, np.maximum(xs, 0))
    if where == "tensor":
        with pytest.raises(hipdnn.HipdnnError, match=r"'a\\x00b'"):
            g.execute(cpu_handle, {x: np.zeros(3, np.float32), y: ys})


def test_regression_buffers(oracle: Oracle) -> None:
    """Each crafted buffer once made some layer fail in a forbidden way (a ValueError from the
    compiled core, undefined behaviour or a misaligned read in the engine)."""
    for name, blob in regression_blobs().items():
        try:
            oracle.run(blob, Tally())
        except FuzzFailure as exc:
            raise FuzzFailure(f"{name}: {exc}") from exc


def test_dims_and_strides_of_different_lengths_are_refused_by_the_backend() -> None:
    """A virtual tensor's strides are ignored by the CPU engine, which planned the graph; the compiled
    core then refused its tensor table with ValueError. The backend now refuses the buffer first."""
    blob = next(b for name, b in regression_blobs().items() if "1 stride" in name)
    with pytest.raises(GraphDecodeError, match="3 dims but 1 strides"):
        summarize(blob)


def test_misaligned_dims_are_refused_by_the_cpu_engine(oracle: Oracle) -> None:
    """The FlatBuffers verifier checks a vector's length word, not the alignment of its int64
    elements, which the engine then loaded misaligned (undefined behaviour; UBSan stops there)."""
    blob = misaligned_dims_graph()
    assert oracle.cpu.applicable_engine_ids(blob) == []
    with pytest.raises(PluginError, match="8-byte aligned"):
        oracle.cpu.workspace_size(oracle.config, blob)
    # the same graph, aligned, runs
    assert oracle.cpu.applicable_engine_ids(BLOBS["pointwise_chain"]) == [101]


def test_sdpa_backward_checks_o_and_stats_by_role(oracle: Oracle) -> None:
    """A graph naming the stats tensor [B, H, S, 1] as o as well passed the shape check (it compared
    addresses, and both roles pointed at one shape), and the kernel read Dv floats per row of it:
    a heap read past the buffer, which ASan caught."""
    blob = next(b for name, b in regression_blobs().items() if "as o" in name)
    assert oracle.cpu.applicable_engine_ids(blob) == []
    with pytest.raises(PluginError, match=r"o and dO must be \[B,Hq,Sq,Dv\]"):
        oracle.cpu.workspace_size(oracle.config, blob)


def test_declared_dims_past_any_extent_are_refused(oracle: Oracle) -> None:
    """A dynamic tensor's declared dims had no upper bound (its strides are an axis order, so no
    extent is computed at build): an int64-max sequence length overflowed the SDPA tile sizing."""
    blob = next(b for name, b in regression_blobs().items() if "int64-max sequence" in name)
    assert oracle.cpu.applicable_engine_ids(blob) == []
    with pytest.raises(PluginError, match="more than the 281474976710656 elements"):
        oracle.cpu.workspace_size(oracle.config, blob)


@pytest.mark.parametrize("backward", [False, True])
def test_band_bounds_past_any_length_mean_no_bound(cpu_handle: hipdnn.Handle, backward: bool) -> None:
    """int64-max band bounds overflowed the backward kernel's index arithmetic (UBSan); they are the
    same as no bound at all."""
    f32 = hipdnn.DataType.FLOAT
    dims = [1, 2, 6, 8]
    rng = np.random.default_rng(4)
    values = [rng.standard_normal(dims).astype(np.float32) for _ in range(5)]
    stats = rng.standard_normal([1, 2, 6, 1]).astype(np.float32)
    results = []
    for bound in (None, 2**62, 2**63 - 1):
        g = hipdnn.Graph(name="band", io_data_type=f32)
        names = ("q", "k", "v", "o", "do") if backward else ("q", "k", "v")
        ts = [g.tensor(name=n, dim=dims, stride=[96, 48, 8, 1], data_type=f32) for n in names]
        band = {"diagonal_band_left_bound": bound, "diagonal_band_right_bound": bound}
        if backward:
            st_ = g.tensor(name="stats", dim=[1, 2, 6, 1], stride=[12, 6, 1, 1], data_type=f32)
            outs = list(g.sdpa_backward(*ts, st_, attn_scale=0.3, **band))
            pack = {**dict(zip(ts, values)), st_: stats}
        else:
            o, _ = g.sdpa(*ts, attn_scale=0.3, **band)
            outs, pack = [o], dict(zip(ts, values))
        for t in outs:
            t.set_output(True)
        g.build(cpu_handle)
        bufs = [np.full(dims, np.nan, np.float32) for _ in outs]
        g.execute(cpu_handle, {**pack, **dict(zip(outs, bufs))}, np.empty(max(g.get_workspace_size(), 1), np.uint8))
        results.append(bufs)
    for bufs in results[1:]:
        for got, want in zip(bufs, results[0]):
            np.testing.assert_array_equal(got, want)


# -- the raw-buffer phase under AddressSanitizer + UndefinedBehaviorSanitizer ---------------------
def _records(buffers: list[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(b)) + b for b in buffers)


def _run_harness(exe: Path, buffers: list[bytes]) -> dict[str, int]:
    res = subprocess.run([str(exe), "-"], input=_records(buffers), capture_output=True, env=SANITIZER_ENV, timeout=300)
    stderr = res.stderr.decode(errors="replace")
    assert res.returncode == 0, f"the sanitized harness stopped with {res.returncode}:\n{stderr[-6000:]}"
    for marker in ("AddressSanitizer", "LeakSanitizer", "runtime error"):
        assert marker not in stderr, stderr[-6000:]
    counts: dict[str, int] = json.loads(res.stdout.decode().strip().splitlines()[-1])
    return counts


def test_seeds_and_regressions_under_asan(asan_harness: Path) -> None:
    """Each regression buffer stopped this harness before its fix (UBSan: signed overflow in the
    engine's compact strides, in the SDPA kernels' exp2 on NaN scores and in the backward kernel's
    band arithmetic; a misaligned int64 load; ASan: the backward kernel reading past stats)."""
    fixed = list(BLOBS.values()) + list(regression_blobs().values())
    counts = _run_harness(asan_harness, fixed)
    assert counts["records"] == len(fixed)
    assert counts["executed"] >= len(BLOBS)  # every seed ran its kernels on exact-size heap buffers


def test_mutated_buffers_under_asan(asan_harness: Path) -> None:
    n = budget(3000)
    buffers = [make_case(CI_SEED + 1, i, BLOBS)[1] for i in range(n)]
    counts = _run_harness(asan_harness, buffers)
    assert counts["records"] == n
    assert counts["reader_ok"] > 0.1 * n and counts["executed"] > 0.03 * n, counts


def test_garbage_under_asan(asan_harness: Path) -> None:
    rng = np.random.default_rng(5)
    buffers = [b"", b"\x00" * 16, b"\xff" * 64] + [rng.bytes(int(rng.integers(1, 512))) for _ in range(budget(300))]
    assert _run_harness(asan_harness, buffers)["records"] == len(buffers)


def test_case_generation_is_deterministic() -> None:
    """A failure is reported as SEED:INDEX; replaying it must give the same bytes."""
    for i in range(0, 70, 3):
        assert make_case(9, i, BLOBS) == make_case(9, i, seed_blobs())
    assert len(SEEDS) == len(BLOBS) >= 9
