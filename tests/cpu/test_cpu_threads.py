"""``hipdnn.Handle(cpu_threads=N)``: the CPU engine's CPU_THREADS knob, handed only to engines that
declare it. Plans built on such a handle size their workspace for N threads and compute the same
values (float64 references, NaN-filled outputs, odd shapes); bad values are refused naming the
argument; engines without knobs are given configs without them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import hipdnn
from hipdnn import reference
from hipdnn.backend.placement import read_knob_ids, serialized_engine_config
from hipdnn.wire.EngineConfig import EngineConfig

F32 = hipdnn.DataType.FLOAT


def compact(dims: list[int]) -> list[int]:
    out = [1] * len(dims)
    for i in range(len(dims) - 2, -1, -1):
        out[i] = out[i + 1] * dims[i + 1]
    return out


def attention(handle: hipdnn.Handle, s: int) -> tuple[hipdnn.Graph, list[Any]]:
    g = hipdnn.Graph(name="attn", io_data_type=F32)
    dims = [2, 3, s, 24]
    ts = [g.tensor(name=n, dim=dims, stride=compact(dims), data_type=F32) for n in "qkv"]
    o, _ = g.sdpa(*ts, attn_scale=0.2, use_causal_mask=True)
    o.set_output(True)
    g.build(handle)
    return g, [*ts, o]


@pytest.mark.parametrize("threads", [1, 3, 8])
@pytest.mark.parametrize("s", [1, 37, 129])
def test_values_for_any_thread_count(threads: int, s: int) -> None:
    rng = np.random.default_rng(threads * 1000 + s)
    with hipdnn.Handle(device="cpu", cpu_threads=threads) as h:
        g, (q, k, v, o) = attention(h, s)
        arrays = {t: rng.standard_normal((2, 3, s, 24)).astype(np.float32) for t in (q, k, v)}
        arrays[o] = np.full((2, 3, s, 24), np.nan, np.float32)
        g.execute(h, arrays, np.empty(max(g.get_workspace_size(), 1), np.uint8))
        want, _ = reference.sdpa(*(arrays[t].astype(np.float64) for t in (q, k, v)), 0.2, causal=True)
        assert reference.relative_error(arrays[o], want) < 1e-5


def test_workspace_holds_one_scratch_slice_per_thread() -> None:
    sizes = {}
    for threads in (1, 2, 5):
        with hipdnn.Handle(device="cpu", cpu_threads=threads) as h:
            g, _ = attention(h, 64)
            sizes[threads] = g.get_workspace_size()
    assert sizes[2] - sizes[1] > 0 and sizes[5] - sizes[2] == 3 * (sizes[2] - sizes[1])


@pytest.mark.parametrize("value", [0, -1, 1025, 2.0, True, "2"])
def test_bad_values_are_refused(value: Any) -> None:
    with pytest.raises(hipdnn.HipdnnError, match="Handle: cpu_threads") as err:
        hipdnn.Handle(device="cpu", cpu_threads=value)
    assert err.value.code is hipdnn.ErrorCode.INVALID_VALUE


def test_only_engines_declaring_the_knob_get_it() -> None:
    """The config carries a knob only when the engine's details declare it (the GPU engine and
    third-party plugins declare none, and the SDK refuses knobs an engine does not have)."""
    with hipdnn.Handle(device="cpu") as h:
        plugin = h._backend.engine_to_plugin[101]
        g, _ = attention(h, 16)
        details = plugin.engine_details(101, g.serialize())
    assert read_knob_ids(details) == ("CPU_THREADS", "CPU_THREADING")
    assert read_knob_ids(b"") == ()
    bare = EngineConfig.GetRootAs(serialized_engine_config(202), 0)
    assert bare.EngineId() == 202 and bare.KnobsLength() == 0
    knobbed = EngineConfig.GetRootAs(serialized_engine_config(101, [("CPU_THREADS", 4)]), 0)
    assert knobbed.KnobsLength() == 1 and knobbed.Knobs(0).KnobId() == b"CPU_THREADS"
