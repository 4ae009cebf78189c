"""Issue 26, engine choice a user did not ask for: ``preferred_engine_id`` is honoured or refused
with the engine's reason, never replaced by another engine; and an engine that does not declare
where its memory lives never outranks one that does (rfcs/0004-plugin-loading.md, section 9)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import hipdnn
from hipdnn.reference import relative_error
from hipdnn.reference import sdpa as reference_sdpa

from .support import ENGINE, GRAPH_NOT_SUPPORTED, INVALID_VALUE, arrays_for, execute_calls, sdpa_graph

FIRST, SECOND = "fake_override_v110", "fake_override_second"  # engines 9001 and 9007, in load order
CPU_ENGINE = 101
PLAN_FAILED = hipdnn.ErrorCode.GRAPH_EXECUTION_PLAN_CREATION_FAILED
HUGE = 1 << 60  # more than the 2**48 bytes of workspace hipdnn accepts


@pytest.fixture
def two_fakes(fakes: dict[str, Any], fake_handle_factory: Any) -> hipdnn.Handle:
    """A handle over 9001 then 9007: without a preference 9001 (first in load order) is chosen."""
    h: hipdnn.Handle = fake_handle_factory(FIRST, SECOND)
    g, _ = sdpa_graph(override=False)
    g.build(h)
    assert g.get_engine_id() == ENGINE[FIRST]
    for c in fakes.values():
        c.lib.fakePluginResetCallLog()
    return h


# -- the preferred engine: honoured, or a HipdnnError naming it and why ---------------------------
def test_preferred_engine_that_is_applicable_is_used(two_fakes: hipdnn.Handle) -> None:
    g, _ = sdpa_graph(override=False, preferred=ENGINE[SECOND])
    g.build(two_fakes)
    assert g.get_engine_id() == ENGINE[SECOND]


def test_preferred_engine_not_applicable_is_an_error_not_another_engine(
    two_fakes: hipdnn.Handle, fakes: dict[str, Any]
) -> None:
    fakes[SECOND].set_applicable(False)
    g, _ = sdpa_graph(override=False, preferred=ENGINE[SECOND])
    with pytest.raises(hipdnn.HipdnnError) as err:
        g.build(two_fakes)
    assert err.value.code == GRAPH_NOT_SUPPORTED
    message = err.value.message
    assert f"preferred engine {ENGINE[SECOND]}" in message and repr(SECOND) in message
    assert "not applicable" in message
    assert str(ENGINE[FIRST]) not in message.split("plugins consulted")[0]  # no word of a substitute
    with pytest.raises(hipdnn.HipdnnError):
        g.get_engine_id()  # no plan at all, rather than 9001's


def test_preferred_engine_with_an_impossible_workspace_is_an_error(
    two_fakes: hipdnn.Handle, fakes: dict[str, Any]
) -> None:
    fakes[SECOND].set_workspace_size(HUGE)
    g, _ = sdpa_graph(override=False, preferred=ENGINE[SECOND])
    with pytest.raises(hipdnn.HipdnnError) as err:
        g.build(two_fakes)
    assert err.value.code == GRAPH_NOT_SUPPORTED
    message = err.value.message
    assert f"preferred engine {ENGINE[SECOND]}" in message and repr(SECOND) in message
    assert f"reported a workspace of {HUGE} bytes" in message  # the reason, not just "refused"
    assert execute_calls(fakes) == [] and fakes[FIRST].calls("CreateExecutionContext") == []


def test_preferred_engine_whose_plan_fails_to_build_is_an_error(
    two_fakes: hipdnn.Handle, fakes: dict[str, Any]
) -> None:
    """create_execution_plans accepted 9007; its execution context then reports an impossible
    workspace at build_plans: no plan is built from 9001 instead."""
    g, _ = sdpa_graph(override=False, preferred=ENGINE[SECOND])
    g.validate().build_operation_graph(two_fakes).create_execution_plans().check_support()
    fakes[SECOND].set_workspace_size(HUGE)  # captured by the context build_plans creates
    with pytest.raises(hipdnn.HipdnnError) as err:
        g.build_plans()
    assert err.value.code == PLAN_FAILED
    message = err.value.message
    assert f"preferred engine {ENGINE[SECOND]}" in message and repr(SECOND) in message
    assert f"reported a workspace of {HUGE} bytes" in message
    assert fakes[FIRST].calls("CreateExecutionContext") == []
    assert fakes[SECOND].lib.fakePluginGetLiveContextCount() == 0  # the failed context was destroyed


def test_unknown_preferred_engine_lists_the_engines_loaded(two_fakes: hipdnn.Handle, fakes: dict[str, Any]) -> None:
    g, _ = sdpa_graph(override=False, preferred=4242)
    with pytest.raises(hipdnn.HipdnnError) as err:
        g.build(two_fakes)
    assert err.value.code == INVALID_VALUE
    message = err.value.message
    assert "preferred engine 4242" in message and "no loaded plugin" in message
    assert f"{FIRST} [{ENGINE[FIRST]}]" in message and f"{SECOND} [{ENGINE[SECOND]}]" in message
    assert fakes[FIRST].calls("GetApplicableEngineIds") == []  # refused before any plugin is asked


def test_preferred_engine_of_the_cpu_engine_gives_the_engines_own_reason(fake_plugin_paths: dict[str, Path]) -> None:
    """The CPU engine does not serve fp16 compute; asked for by id, its own words say so."""
    with hipdnn.Handle(plugin_paths=[fake_plugin_paths[FIRST]]) as h:
        assert CPU_ENGINE in h.backend.engine_to_plugin, h.skipped_plugins()
        g, _ = sdpa_graph(override=False, preferred=CPU_ENGINE)
        g.compute_data_type = hipdnn.DataType.HALF
        with pytest.raises(hipdnn.HipdnnError) as err:
            g.build(h)
        assert err.value.code == GRAPH_NOT_SUPPORTED
        message = err.value.message
        assert f"preferred engine {CPU_ENGINE}" in message and "'hipdnn_cpu_engine'" in message
        assert "compute data types other than FLOAT are not supported" in message  # the engine's reason


# -- engines that declare no memory location --------------------------------------------------------
@pytest.fixture
def cpu_and_fake(fake_plugin_paths: dict[str, Path], fakes: dict[str, Any]) -> Iterator[hipdnn.Handle]:
    """The shipped engines (the CPU engine, host memory) plus a fake that declares no location."""
    with hipdnn.Handle(plugin_paths=[fake_plugin_paths[FIRST]]) as h:
        memory = h.backend.engine_memory()
        assert memory.get(CPU_ENGINE) == "host" and memory.get(ENGINE[FIRST]) == "unknown", memory
        yield h


def _sdpa_inputs(ts: list[hipdnn.TensorAttributes]) -> dict[Any, np.ndarray]:
    rng = np.random.default_rng(26)
    arrays = {t: rng.standard_normal(t.get_dim()).astype(np.float32) for t in ts[:3]}
    arrays[ts[3]] = np.full(ts[3].get_dim(), np.nan, np.float32)
    return arrays


def test_an_engine_of_unknown_location_does_not_take_fp32_host_sdpa(
    cpu_and_fake: hipdnn.Handle, fakes: dict[str, Any]
) -> None:
    g, ts = sdpa_graph(override=False)
    g.build(cpu_and_fake)
    assert g.get_engine_id() == CPU_ENGINE
    arrays = _sdpa_inputs(ts)
    g.execute(cpu_and_fake, arrays, np.empty(g.get_workspace_size(), np.uint8))
    q, k, v, o = (arrays[t] for t in ts)
    expected, _ = reference_sdpa(q, k, v, attn_scale=0.5)
    assert relative_error(o, expected) < 1e-5
    assert execute_calls(fakes) == []


def test_an_engine_of_unknown_location_serves_when_preferred(
    cpu_and_fake: hipdnn.Handle, fakes: dict[str, Any]
) -> None:
    g, ts = sdpa_graph(override=False, preferred=ENGINE[FIRST])
    g.build(cpu_and_fake)
    assert g.get_engine_id() == ENGINE[FIRST]
    g.execute(cpu_and_fake, arrays_for(ts))
    assert [n for n, _ in execute_calls(fakes)] == [FIRST]


def test_an_engine_of_unknown_location_serves_when_nothing_else_applies(
    cpu_and_fake: hipdnn.Handle, fakes: dict[str, Any]
) -> None:
    g, _ = sdpa_graph(override=False)
    g.compute_data_type = hipdnn.DataType.HALF  # not the CPU engine's
    g.build(cpu_and_fake)
    assert g.get_engine_id() == ENGINE[FIRST]
    assert "hipdnn_cpu_engine (api 1.6.0): not applicable" in g.plugin_report()


def test_without_a_preferred_engine_each_engine_gives_its_reason() -> None:
    """No engine applies: GRAPH_NOT_SUPPORTED carries each engine's own reason, not only the log."""
    with hipdnn.Handle(device="cpu") as h:
        half = hipdnn.DataType.HALF
        g = hipdnn.Graph(name="halfcompute", io_data_type=half, compute_data_type=half)
        q, k, v = (g.tensor(name=n, dim=[1, 2, 8, 16], data_type=half) for n in "qkv")
        o, _ = g.sdpa(q, k, v, attn_scale=0.25)
        o.set_output(True)
        with pytest.raises(hipdnn.HipdnnError) as info:
            g.build(h)
        assert info.value.code == hipdnn.ErrorCode.GRAPH_NOT_SUPPORTED
        assert "engine 101" in info.value.message and "FLOAT" in info.value.message, info.value.message
