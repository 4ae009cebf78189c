"""Spec 9.4: the four-corner matrix (graph flag absent/present x override arguments absent/present),
plus the empty-override cases that must behave exactly like a plain execute."""

from __future__ import annotations

import numpy as np
import pytest

import hipdnn
import hipdnn.backend
from hipdnn.backend import AttributeName, AttributeType, VariantPackDescriptor

from .support import (
    ENGINE,
    INVALID_VALUE,
    OVERRIDE_ATTRIBUTE_IDS,
    arrays_for,
    execute_calls,
    fnv1a64,
    ptr,
    sdpa_graph,
    strided_view,
)

OVERRIDE = "fake_override_v110"
PLAIN = "fake_plain_v100"
NO_API = "fake_no_api_version"
ALL3 = (OVERRIDE, PLAIN, NO_API)


def _applicability_calls(fakes, name):
    return fakes[name].calls("GetApplicableEngineIds")


# -- corner 1: flag absent -----------------------------------------------------------------------
@pytest.mark.parametrize("preferred", [None, ENGINE[PLAIN], ENGINE[NO_API]])
def test_corner1_flag_absent_every_plugin_consulted_and_plain_entry(fakes, fake_handle_factory, preferred):
    h = fake_handle_factory(*ALL3)
    g, ts = sdpa_graph(override=False, preferred=preferred)
    g.build(h)
    blob_hash = fnv1a64(g.serialize())
    for name in ALL3:
        recs = _applicability_calls(fakes, name)
        assert len(recs) == 1, f"{name} was not asked about the flag-less graph"
        assert recs[0]["status"] == 0 and recs[0]["num_engines"] == 1
        assert recs[0]["graph_hash"] == blob_hash  # every plugin saw the same, unmodified graph
    expected = preferred if preferred is not None else ENGINE[OVERRIDE]
    assert g.get_engine_id() == expected
    chosen = next(n for n in ALL3 if ENGINE[n] == expected)

    g.execute(h, arrays_for(ts), None)
    calls = execute_calls(fakes)
    assert [(n, r["entry"]) for n, r in calls] == [(chosen, "ExecuteOpGraph")]
    assert "num_overrides" not in calls[0][1]


# -- corner 2: flag present, no override arguments -----------------------------------------------
def test_corner2_flag_present_no_overrides(fakes, fake_handle_factory, spy):
    h = fake_handle_factory(*ALL3)
    g, ts = sdpa_graph(override=True)
    g.build(h)
    assert len(_applicability_calls(fakes, OVERRIDE)) == 1
    assert _applicability_calls(fakes, PLAIN) == []
    assert _applicability_calls(fakes, NO_API) == []
    assert g.get_engine_id() == ENGINE[OVERRIDE]

    spy.clear()
    g.execute(h, arrays_for(ts), None)
    calls = execute_calls(fakes)
    assert [(n, r["entry"]) for n, r in calls] == [(OVERRIDE, "ExecuteOpGraph")]
    assert fakes[OVERRIDE].calls("ExecuteOpGraphWithOverrides") == []
    assert not (spy.attribute_ids() & OVERRIDE_ATTRIBUTE_IDS)
    assert len(spy.backend_execute) == 1


# -- corner 3: flag present, override arguments --------------------------------------------------
@pytest.mark.parametrize("form", ["parallel", "map"])
def test_corner3_flag_present_with_overrides_full_payload(fakes, fake_handle_factory, spy, form):
    fakes[OVERRIDE].set_workspace_size(256)
    h = fake_handle_factory(*ALL3)
    g, (q, k, v, o) = sdpa_graph(override=True)
    g.build(h)
    assert _applicability_calls(fakes, PLAIN) == [] and _applicability_calls(fakes, NO_API) == []
    assert g.get_workspace_size() == 256

    vp = arrays_for([v, q, o, k])  # an order of our own: buffers must arrive in it
    ws = np.zeros(64, dtype=np.float32)
    # k, q, o overridden (in that order), v left at its declared shape [1, 2, 8, 4]. The set is
    # shape-consistent with that v (k keeps v's heads and sequence length, o = [B, Hq, Sq, Dv]), while
    # every overridden tensor still differs from its declared shape and k and q carry padded strides.
    entries = [
        (k, [1, 2, 8, 3], [64, 32, 4, 1]),
        (q, [1, 2, 5, 3], [48, 24, 4, 1]),
        (o, [1, 2, 5, 4], [40, 20, 4, 1]),
    ]
    # each overridden tensor's value is a view of its array stating the override's shape and strides
    for t, s, st in entries:
        vp[t] = strided_view(s, st, base=vp[t])
    spy.clear()
    if form == "parallel":
        g.execute(
            h,
            vp,
            ws,
            override_uids=[t.get_uid() for t, _, _ in entries],
            override_shapes=[s for _, s, _ in entries],
            override_strides=[st for _, _, st in entries],
        )
    else:
        g.execute(h, vp, ws, overrides={t: hipdnn.OverrideEntry(shape=s, stride=st) for t, s, st in entries})

    calls = execute_calls(fakes)
    assert [(n, r["entry"]) for n, r in calls] == [(OVERRIDE, "ExecuteOpGraphWithOverrides")]
    rec = calls[0][1]
    assert rec["status"] == 0
    assert rec["workspace"] == ptr(ws)
    assert rec["buffers"] == [[t.get_uid(), ptr(a)] for t, a in vp.items()]
    assert rec["num_overrides"] == 3
    assert rec["override_uids"] == [t.get_uid() for t, _, _ in entries]
    assert rec["override_lengths"] == [4, 4, 4]
    assert rec["override_shapes"] == [s for _, s, _ in entries]
    assert rec["override_strides"] == [st for _, _, st in entries]
    assert fakes[OVERRIDE].calls("ExecuteOpGraph") == []

    # Graph.execute goes from the compiled core straight to the plugin: no descriptor per call.
    assert spy.set_attribute == [] and spy.vp_finalize == []

    # The backend descriptor API carries the same overrides flattened in the variant pack (spec 4.3)
    # and delivers the same payload through the same core.
    for c in fakes.values():
        c.reset()
    spy.clear()
    A, T = AttributeName, AttributeType
    vpd = VariantPackDescriptor()
    vpd.set_attribute(A.VARIANT_PACK_UNIQUE_IDS, T.INT64, [t.get_uid() for t in vp])
    vpd.set_attribute(A.VARIANT_PACK_DATA_POINTERS, T.VOID_PTR, [ptr(a) for a in vp.values()])
    vpd.set_attribute(A.VARIANT_PACK_WORKSPACE, T.VOID_PTR, ptr(ws))
    vpd.set_attribute(A.VARIANT_PACK_OVERRIDE_UNIQUE_IDS_EXT, T.INT64, [t.get_uid() for t, _, _ in entries])
    vpd.set_attribute(A.VARIANT_PACK_OVERRIDE_SHAPES_EXT, T.INT64, [d for _, s, _ in entries for d in s])
    vpd.set_attribute(A.VARIANT_PACK_OVERRIDE_STRIDES_EXT, T.INT64, [d for _, _, st in entries for d in st])
    vpd.set_attribute(A.VARIANT_PACK_OVERRIDE_LENGTHS_EXT, T.INT64, [4, 4, 4])
    vpd.finalize()
    hipdnn.backend.execute(h.backend, g._require_plan(), vpd)
    assert spy.attribute_ids("VariantPackDescriptor") >= OVERRIDE_ATTRIBUTE_IDS
    again = execute_calls(fakes)
    assert [(n, r["entry"]) for n, r in again] == [(OVERRIDE, "ExecuteOpGraphWithOverrides")]
    assert {k: v for k, v in again[0][1].items() if k != "seq"} == {k: v for k, v in rec.items() if k != "seq"}


# -- corner 4: override arguments without the flag -----------------------------------------------
def _misuse_calls(q):
    return {
        "parallel": dict(
            override_uids=[q.get_uid()], override_shapes=[[1, 2, 4, 4]], override_strides=[[32, 16, 4, 1]]
        ),
        "parallel_tensor_key": dict(
            override_uids=[q], override_shapes=[[1, 2, 4, 4]], override_strides=[[32, 16, 4, 1]]
        ),
        "map": dict(overrides={q: hipdnn.OverrideEntry(shape=[1, 2, 4, 4], stride=[32, 16, 4, 1])}),
        "map_uid_key": dict(overrides={q.get_uid(): hipdnn.OverrideEntry(shape=[1, 2, 4, 4], stride=[32, 16, 4, 1])}),
    }


@pytest.mark.parametrize("form", ["parallel", "parallel_tensor_key", "map", "map_uid_key"])
def test_corner4_overrides_without_flag_rejected_before_backend(fakes, fake_handle_factory, spy, form):
    h = fake_handle_factory(*ALL3)
    g, ts = sdpa_graph(override=False)
    g.build(h)
    vp = arrays_for(ts)

    # Positive control: the spies do see a legitimate execute.
    spy.clear()
    g.execute(h, vp, None)
    assert spy.backend_execute
    for c in fakes.values():
        c.reset()

    spy.clear()
    with pytest.raises(hipdnn.HipdnnError) as err:
        g.execute(h, vp, None, **_misuse_calls(ts[0])[form])
    assert err.value.code == INVALID_VALUE
    assert "override" in err.value.message.lower()
    assert spy.set_attribute == [], "a backend set_attribute ran before the refusal"
    assert spy.vp_finalize == [], "a variant pack was finalized before the refusal"
    assert spy.backend_execute == [], "backend execute was reached"
    assert execute_calls(fakes) == []


# -- empty overrides == plain execute ------------------------------------------------------------
EMPTY_FORMS = {
    "override_uids=[]": dict(override_uids=[]),
    "all three empty": dict(override_uids=[], override_shapes=[], override_strides=[]),
    "overrides={}": dict(overrides={}),
}


@pytest.mark.parametrize("flag", [True, False], ids=["flag", "noflag"])
@pytest.mark.parametrize("form", list(EMPTY_FORMS))
def test_empty_overrides_behave_as_plain_execute(fakes, fake_handle_factory, spy, form, flag):
    h = fake_handle_factory(*ALL3)
    g, ts = sdpa_graph(override=flag)
    g.build(h)
    vp = arrays_for(ts)

    spy.clear()
    g.execute(h, vp, None)
    plain_attrs = list(spy.set_attribute)
    plain_calls = execute_calls(fakes)
    for c in fakes.values():
        c.reset()

    spy.clear()
    g.execute(h, vp, None, **EMPTY_FORMS[form])
    assert not (spy.attribute_ids() & OVERRIDE_ATTRIBUTE_IDS)
    assert spy.set_attribute == plain_attrs
    assert len(spy.backend_execute) == 1
    calls = execute_calls(fakes)
    assert [(n, r["entry"]) for n, r in calls] == [(n, "ExecuteOpGraph") for n, _ in plain_calls]
    assert [n for n, _ in calls] == [OVERRIDE]
    # same payload as the plain call (the context serial is the same plan's)
    assert calls[0][1] == plain_calls[0][1]
