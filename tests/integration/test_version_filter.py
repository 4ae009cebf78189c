"""Spec 4.5 (per-graph plugin-version filter), 4.6 (dispatch safety net) and the 'no applicable
engines' report, driven through the fake plugins."""

from __future__ import annotations

import pytest

import hipdnn
from hipdnn.backend import AttributeName, AttributeType, BackendError, Status, VariantPackDescriptor
from hipdnn.backend import execute as backend_execute

from .support import (
    ENGINE,
    GRAPH_NOT_SUPPORTED,
    arrays_for,
    backend_plan,
    execute_calls,
    ptr,
    sdpa_graph,
    strided_view,
)

A, T = AttributeName, AttributeType
OVR = dict(override_uids=None, override_shapes=[[1, 2, 4, 4]] * 2, override_strides=[[32, 16, 4, 1]] * 2)


def _with_overrides(ts):
    """q and o of an sdpa_graph ``ts`` = [q, k, v, o] overridden together to S = 4 (k and v keep their
    declared shapes), a shape-consistent override set."""
    q, _, _, o = ts
    return dict(OVR, override_uids=[q.get_uid(), o.get_uid()])


def _override_arrays(ts):
    """arrays_for(ts) with q and o given as views stating _with_overrides' shape and strides (a sized
    value must state the override's, issue #26)."""
    q, _, _, o = ts
    vp = arrays_for(ts)
    for t, shape, stride in zip((q, o), OVR["override_shapes"], OVR["override_strides"]):
        vp[t] = strided_view(shape, stride, base=vp[t])
    return vp


# The spec 4.5 table, one row per fake that loads: (fake, reported api, eligible for override graphs).
# fake_symbol_no_bump exports the override symbol but reports 1.0.0: the filter goes by the version.
# fake_version_liar reports 1.1.0 without the symbol: the filter lets it through (see below).
TABLE = [
    ("fake_no_api_version", "1.0.0", False),
    ("fake_plain_v100", "1.0.0", False),
    ("fake_symbol_no_bump", "1.0.0", False),
    ("fake_override_v110", "1.1.0", True),
    ("fake_override_second", "1.1.0", True),
    ("fake_override_v120", "1.2.0", True),
    ("fake_version_liar", "1.1.0", True),
]


@pytest.mark.parametrize("name,api,_", TABLE, ids=[r[0] for r in TABLE])
def test_reported_api_version(fake_handle_factory, name, api, _):
    h = fake_handle_factory(name)
    (info,) = h.loaded_plugins()
    assert info.name == name and info.api_version == api
    assert info.engine_ids == (ENGINE[name],)
    if name == "fake_no_api_version":
        assert "hipdnnPluginGetApiVersion" not in info.optional_entries


@pytest.mark.parametrize("name,api,_", TABLE, ids=[r[0] for r in TABLE])
def test_every_loaded_plugin_serves_non_override_graphs(fakes, fake_handle_factory, name, api, _):
    h = fake_handle_factory(name)
    g, ts = sdpa_graph(override=False)
    g.build(h)
    assert len(fakes[name].calls("GetApplicableEngineIds")) == 1
    assert g.get_engine_id() == ENGINE[name]
    g.execute(h, arrays_for(ts), None)
    assert [(n, r["entry"]) for n, r in execute_calls(fakes)] == [(name, "ExecuteOpGraph")]


@pytest.mark.parametrize("name,api,eligible", TABLE, ids=[r[0] for r in TABLE])
def test_override_graphs_only_reach_plugins_at_1_1_0_or_later(fakes, fake_handle_factory, name, api, eligible):
    h = fake_handle_factory(name)
    g, ts = sdpa_graph(override=True)
    if eligible:
        g.build(h)
        assert len(fakes[name].calls("GetApplicableEngineIds")) == 1
        assert g.get_engine_id() == ENGINE[name]
    else:
        with pytest.raises(hipdnn.HipdnnError) as e:
            g.build(h)
        assert e.value.code == GRAPH_NOT_SUPPORTED
        assert f"{name} (api {api}): api {api} < required 1.1.0" in e.value.message
        assert fakes[name].calls("GetApplicableEngineIds") == [], "filtered plugin was still asked"
        assert fakes[name].calls("CreateExecutionContext") == []


@pytest.mark.parametrize("name", ["fake_override_v110", "fake_override_v120", "fake_override_second"])
def test_override_capable_plugins_take_the_override_entry(fakes, fake_handle_factory, name):
    h = fake_handle_factory(name)
    g, ts = sdpa_graph(override=True)
    g.build(h)
    g.execute(h, _override_arrays(ts), None, **_with_overrides(ts))
    g.execute(h, arrays_for(ts), None)
    assert [(n, r["entry"]) for n, r in execute_calls(fakes)] == [
        (name, "ExecuteOpGraphWithOverrides"),
        (name, "ExecuteOpGraph"),
    ]


def test_prebaseline_plugin_refused_at_load_and_never_eligible(fakes, fake_handle_factory):
    name = "fake_prebaseline_v001"
    h = fake_handle_factory(name, "fake_plain_v100")
    assert [p.name for p in h.loaded_plugins()] == ["fake_plain_v100"]
    (skipped,) = h.skipped_plugins()
    assert skipped.path.name == f"lib{name}.so"
    assert "0.0.1" in skipped.reason and "major" in skipped.reason
    assert ENGINE[name] not in h.backend.engine_to_plugin

    g, _ = sdpa_graph(override=False, preferred=ENGINE[name])
    with pytest.raises(hipdnn.HipdnnError) as e:  # a preference cannot revive it, nor pick another engine
        g.build(h)
    assert e.value.code == hipdnn.ErrorCode.INVALID_VALUE
    assert f"preferred engine {ENGINE[name]}: no loaded plugin provides it" in e.value.message
    assert f"engine ids loaded: [{ENGINE['fake_plain_v100']}]" in e.value.message
    assert f"skipped at load: lib{name}.so (" in e.value.message and "0.0.1" in e.value.message

    alone = fake_handle_factory(name)
    assert alone.loaded_plugins() == []
    for override in (False, True):
        g, _ = sdpa_graph(override=override)
        with pytest.raises(hipdnn.HipdnnError) as e:
            g.build(alone)
        assert e.value.code == GRAPH_NOT_SUPPORTED
        assert f"lib{name}.so: skipped at load" in e.value.message and "0.0.1" in e.value.message
    assert fakes[name].calls() == [], "a refused plugin must never be created or asked"


def test_preferred_engine_cannot_bypass_the_filter(fakes, fake_handle_factory):
    h = fake_handle_factory("fake_override_v110", "fake_plain_v100")
    g, _ = sdpa_graph(override=True, preferred=ENGINE["fake_plain_v100"])
    with pytest.raises(hipdnn.HipdnnError) as e:  # refused, and 9001 is not chosen in its place
        g.build(h)
    assert e.value.code == GRAPH_NOT_SUPPORTED
    assert f"preferred engine {ENGINE['fake_plain_v100']} (plugin 'fake_plain_v100')" in e.value.message
    assert "reports api 1.0.0 and this graph needs 1.1.0" in e.value.message
    assert fakes["fake_plain_v100"].calls("GetApplicableEngineIds") == []
    assert fakes["fake_override_v110"].calls("CreateExecutionContext") == []


# -- the version liar and the dispatch safety net ----------------------------------------------------
def test_version_liar_passes_filter_then_fails_at_dispatch(fakes, fake_handle_factory):
    name = "fake_version_liar"
    h = fake_handle_factory(name)
    g, ts = sdpa_graph(override=True)
    g.build(h)
    assert len(fakes[name].calls("GetApplicableEngineIds")) == 1
    assert g.get_engine_id() == ENGINE[name]
    vp = arrays_for(ts)

    with pytest.raises(hipdnn.HipdnnError) as e:
        g.execute(h, _override_arrays(ts), None, **_with_overrides(ts))
    assert e.value.code == GRAPH_NOT_SUPPORTED
    assert "NOT_SUPPORTED" in e.value.message
    assert "hipdnnEnginePluginExecuteOpGraphWithOverrides" in e.value.message
    assert execute_calls(fakes) == [], "the safety net must refuse, not fall back to the plain entry"

    g.execute(h, vp, None)
    assert [(n, r["entry"]) for n, r in execute_calls(fakes)] == [(name, "ExecuteOpGraph")]


def _override_pack(buffers, workspace=0, uid=None):
    vp = VariantPackDescriptor()
    vp.set_attribute(A.VARIANT_PACK_UNIQUE_IDS, T.INT64, [u for u, _ in buffers])
    vp.set_attribute(A.VARIANT_PACK_DATA_POINTERS, T.VOID_PTR, [p for _, p in buffers])
    vp.set_attribute(A.VARIANT_PACK_WORKSPACE, T.VOID_PTR, workspace)
    if uid is not None:
        vp.set_attribute(A.VARIANT_PACK_OVERRIDE_UNIQUE_IDS_EXT, T.INT64, [uid])
        vp.set_attribute(A.VARIANT_PACK_OVERRIDE_SHAPES_EXT, T.INT64, [1, 2, 4, 4])
        vp.set_attribute(A.VARIANT_PACK_OVERRIDE_STRIDES_EXT, T.INT64, [32, 16, 4, 1])
        vp.set_attribute(A.VARIANT_PACK_OVERRIDE_LENGTHS_EXT, T.INT64, [4])
    vp.finalize()
    return vp


@pytest.mark.parametrize(
    "name,why",
    [
        ("fake_plain_v100", "< 1.1.0"),
        ("fake_no_api_version", "< 1.1.0"),
        ("fake_symbol_no_bump", "< 1.1.0"),  # has the symbol, but the version check comes first
        ("fake_version_liar", "does not export"),
    ],
)
def test_backend_execute_safety_net_refuses_overrides(fakes, fake_handle_factory, name, why):
    """A plan built straight through the backend for a non-override graph, then a hand-made variant
    pack carrying override attributes: dispatch refuses with NOT_SUPPORTED."""
    h = fake_handle_factory(name)
    g, ts = sdpa_graph(override=False)
    g.validate()
    plan = backend_plan(h, g.serialize())
    assert plan.plugin.name == name
    arrays = arrays_for(ts)
    buffers = [(t.get_uid(), ptr(a)) for t, a in arrays.items()]

    with pytest.raises(BackendError) as e:
        backend_execute(h.backend, plan, _override_pack(buffers, uid=ts[0].get_uid()))
    assert e.value.status == Status.NOT_SUPPORTED
    assert why in e.value.message
    assert execute_calls(fakes) == []

    backend_execute(h.backend, plan, _override_pack(buffers))  # control: the plain pack runs
    assert [(n, r["entry"]) for n, r in execute_calls(fakes)] == [(name, "ExecuteOpGraph")]


# -- no applicable engines ------------------------------------------------------------------------------
def test_no_applicable_engines_lists_every_plugin_and_its_reason(fakes, fake_handle_factory):
    names = ("fake_override_v110", "fake_plain_v100", "fake_no_api_version", "fake_override_v120")
    for c in fakes.values():
        c.set_applicable(False)
    h = fake_handle_factory(*names, "fake_prebaseline_v001")
    g, _ = sdpa_graph(override=True, name="nowhere")
    with pytest.raises(hipdnn.HipdnnError) as e:
        g.build(h)
    msg = e.value.message
    assert e.value.code == GRAPH_NOT_SUPPORTED
    assert "no applicable engines" in msg and "'nowhere'" in msg
    assert "fake_override_v110 (api 1.1.0): not applicable" in msg
    assert "fake_override_v120 (api 1.2.0): not applicable" in msg
    assert "fake_plain_v100 (api 1.0.0): api 1.0.0 < required 1.1.0" in msg
    assert "fake_no_api_version (api 1.0.0): api 1.0.0 < required 1.1.0" in msg
    assert "libfake_prebaseline_v001.so: skipped at load" in msg
    assert len(fakes["fake_override_v110"].calls("GetApplicableEngineIds")) == 1
    assert fakes["fake_plain_v100"].calls("GetApplicableEngineIds") == []

    g2, _ = sdpa_graph(override=False, name="nowhere2")
    with pytest.raises(hipdnn.HipdnnError) as e2:
        g2.build(h)
    assert e2.value.code == GRAPH_NOT_SUPPORTED
    for n in names:
        assert f"{n} (api " in e2.value.message
    assert e2.value.message.count("): not applicable") == len(names)
    assert "< required" not in e2.value.message


def test_applicable_again_after_reset(fakes, fake_handle_factory):
    fakes["fake_override_v110"].set_applicable(False)
    h = fake_handle_factory("fake_override_v110")
    g, _ = sdpa_graph(override=True)
    with pytest.raises(hipdnn.HipdnnError):
        g.build(h)
    fakes["fake_override_v110"].set_applicable(True)
    g.build(h)
    assert g.get_engine_id() == ENGINE["fake_override_v110"]


# -- plugin execute failure --------------------------------------------------------------------------
@pytest.mark.parametrize("with_overrides", [False, True], ids=["plain", "override"])
def test_plugin_execute_failure_surfaces_the_plugin_message(fakes, fake_handle_factory, with_overrides):
    name = "fake_override_v110"
    h = fake_handle_factory(name)
    g, ts = sdpa_graph(override=True)
    g.build(h)
    fakes[name].fail_execute(3, "boom from fake")
    kwargs = _with_overrides(ts) if with_overrides else {}
    with pytest.raises(hipdnn.HipdnnError) as e:
        g.execute(h, _override_arrays(ts) if with_overrides else arrays_for(ts), None, **kwargs)
    assert "boom from fake" in e.value.message
    # an engine failure, not a capability refusal
    assert e.value.code in (hipdnn.ErrorCode.HIPDNN_BACKEND_ERROR, hipdnn.ErrorCode.GRAPH_EXECUTION_FAILED)
    entry = "ExecuteOpGraphWithOverrides" if with_overrides else "ExecuteOpGraph"
    (rec,) = fakes[name].calls(entry)
    assert rec["status"] == 3
    if with_overrides:
        assert rec["override_shapes"] == [[1, 2, 4, 4], [1, 2, 4, 4]]


# -- two override-capable plugins ----------------------------------------------------------------------
def test_two_override_plugins_both_candidates_preference_selects(fakes, fake_handle_factory):
    first, second = "fake_override_v110", "fake_override_second"
    h = fake_handle_factory(first, second, "fake_plain_v100")
    g, ts = sdpa_graph(override=True)
    g.build(h)
    report = g.plugin_report()
    assert f"{first} (api 1.1.0): applicable engines [{ENGINE[first]}]" in report
    assert f"{second} (api 1.1.0): applicable engines [{ENGINE[second]}]" in report
    assert g.get_engine_id() == ENGINE[first]  # load order when nothing is preferred

    gp, tsp = sdpa_graph(override=True, preferred=ENGINE[second])
    gp.build(h)
    assert gp.get_engine_id() == ENGINE[second]
    for c in fakes.values():
        c.reset()
    gp.execute(h, _override_arrays(tsp), None, **_with_overrides(tsp))
    assert [(n, r["entry"]) for n, r in execute_calls(fakes)] == [(second, "ExecuteOpGraphWithOverrides")]


def test_backend_refuses_overrides_on_a_plan_built_without_the_flag(fakes, fake_handle_factory):
    """An override-capable plugin chosen for a fixed-shape graph was never asked about other shapes:
    a hand-made override pack on such a plan is refused before the plugin is called."""
    h = fake_handle_factory("fake_override_v110")
    g, ts = sdpa_graph(override=False)
    g.validate()
    plan = backend_plan(h, g.serialize())
    arrays = arrays_for(ts)
    buffers = [(t.get_uid(), ptr(a)) for t, a in arrays.items()]
    with pytest.raises(BackendError) as e:
        backend_execute(h.backend, plan, _override_pack(buffers, uid=ts[0].get_uid()))
    assert e.value.status == Status.BAD_PARAM
    assert "IS_OVERRIDE_SHAPE_ENABLED_EXT" in e.value.message
    assert execute_calls(fakes) == []
