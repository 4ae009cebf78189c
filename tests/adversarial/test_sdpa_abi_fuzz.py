"""tools/fuzz/sdpa_abi_fuzz.py, CI-sized: seeded random attention graphs (FP8 forward / backward with
their factors and amax outputs, ragged offsets, paged K/V, padding, GQA, softcap, dynamic tensors,
several nodes) executed through the CPU engine's C ABI with random overrides, every buffer malloc'd
at exactly the bytes its shape spans.

The oracles: no crash (under tools/sanitize.sh the engine is the ASan + UBSan build, so an
out-of-bounds access aborts this file's process and leaves a report), every refusal a status with a
message, no input buffer changed, no byte of an output outside its view (the gaps of its strides)
written. The same seeds every run; HIPDNN_ADVERSARIAL=long runs a hundred times as many.
"""

from __future__ import annotations

import importlib.util
import sys
import time

from tests.adversarial.conftest import TOOLS, budget


def _fuzzer():
    spec = importlib.util.spec_from_file_location("hipdnn_sdpa_abi_fuzz", TOOLS / "sdpa_abi_fuzz.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def _cpu_engine_path(handle) -> str:
    return next(p.path for p in handle.loaded_plugins() if p.name == "hipdnn_cpu_engine")


def test_sdpa_abi_fuzz_seeded(cpu_handle):
    fz = _fuzzer()
    t0 = time.monotonic()
    # Past the seeded range, seeds that found bugs (with this generator): 3148, 6738 and 8565 are
    # forward-then-backward ragged graphs whose backward offsets are refused after the forward node
    # had written o / stats (the offsets are now checked for every node before any node runs).
    stats = fz.run_cases(_cpu_engine_path(cpu_handle), [*range(budget(1200)), 3148, 6738, 8565])
    # The run must reach the kernels, not only the refusals: a generator that drifted into graphs
    # the engine never applies to would test nothing.
    assert stats["executed"] > 300, stats
    assert stats["applicable"] > 300 and stats["not_applicable"] > 300, stats
    assert time.monotonic() - t0 < 600


def test_sdpa_abi_fuzz_generator_is_deterministic():
    fz = _fuzzer()
    for seed in (0, 17, 1234):
        assert fz.graph_bytes(fz.gen_case(seed)) == fz.graph_bytes(fz.gen_case(seed))
