"""Graph.execute re-runs each node's shape rules on the effective (overridden) shapes: an override set
that contradicts a node is refused with INVALID_VALUE, naming the tensor or node, before anything
reaches the backend or a plugin; a consistent set reaches the plugin's override entry unchanged."""

from __future__ import annotations

import pytest

import hipdnn

from .support import FLOAT, INVALID_VALUE, arrays_for, attn_shapes, compact, execute_calls, strided_view

OVERRIDE = "fake_override_v110"
DIMS = [1, 2, 8, 4]
Q, K, V, O = 201, 202, 203, 204  # noqa: E741  (uids, named for the sdpa roles)
NODE = "attn_node"
FORMS = ["parallel", "map"]


@pytest.fixture
def attn(fakes, fake_handle_factory):
    """An override-enabled SDPA graph (node NODE, tensors q, k, v, o with uids 201..204, all declared
    [1, 2, 8, 4] row-major) built on a handle holding only the override fake."""
    h = fake_handle_factory(OVERRIDE)
    g = hipdnn.Graph(name="effective", io_data_type=FLOAT, is_override_shape_enabled=True)
    q = g.tensor(name="q", dim=DIMS, stride=compact(DIMS), uid=Q)
    k = g.tensor(name="k", dim=DIMS, stride=compact(DIMS), uid=K)
    v = g.tensor(name="v", dim=DIMS, stride=compact(DIMS), uid=V)
    o, _ = g.sdpa(q, k, v, attn_scale=0.5, name=NODE)
    o.set_output(True).set_uid(O)
    g.build(h)
    ts = {Q: q, K: k, V: v, O: o}
    return h, g, ts, arrays_for(ts.values())


def run(attn, entries, form):
    """Execute with ``entries`` = [(uid, shape, stride), ...] in the given call form. Each overridden
    tensor gets a view of its array stating the override's shape and strides (issue #26)."""
    h, g, ts, vp = attn
    vp = dict(vp)
    for u, s, t in entries:
        vp[ts[u]] = strided_view(s, t, base=vp[ts[u]])
    if form == "parallel":
        g.execute(
            h,
            vp,
            None,
            override_uids=[u for u, _, _ in entries],
            override_shapes=[s for _, s, _ in entries],
            override_strides=[t for _, _, t in entries],
        )
    else:
        g.execute(h, vp, None, overrides={u: hipdnn.OverrideEntry(shape=s, stride=t) for u, s, t in entries})


def assert_refused_before_backend(spy, fakes):
    assert spy.nothing_called, "a backend call ran before the refusal"
    assert execute_calls(fakes) == []


@pytest.mark.parametrize("form", FORMS)
def test_q_overridden_with_o_left_at_its_maximum_is_refused(attn, fakes, spy, form):
    """q to S = 5 makes the node produce o [1, 2, 5, 4]; o left at its declared [1, 2, 8, 4] contradicts it."""
    spy.clear()
    with pytest.raises(hipdnn.HipdnnError) as e:
        run(attn, [(Q, [1, 2, 5, 4], compact([1, 2, 5, 4]))], form)
    err = e.value
    assert err.code == INVALID_VALUE
    o_name = attn[2][O].get_name()  # the name sdpa gave its output
    assert f"tensor {o_name!r} (uid {O})" in err.message, err.message
    assert repr(NODE) in err.message, err.message
    assert "[1, 2, 8, 4]" in err.message and "[1, 2, 5, 4]" in err.message, err.message
    assert_refused_before_backend(spy, fakes)


@pytest.mark.parametrize("form", FORMS)
def test_k_and_v_with_different_sequence_lengths_are_refused(attn, fakes, spy, form):
    """Each override is valid on its own (rules 1-8, within the buffers); together k (S = 5) and
    v (S = 6) contradict the node, and q, o are at shapes that would otherwise fit."""
    entries = [
        (K, [1, 2, 5, 4], compact([1, 2, 5, 4])),
        (V, [1, 2, 6, 4], compact([1, 2, 6, 4])),
    ]
    spy.clear()
    with pytest.raises(hipdnn.HipdnnError) as e:
        run(attn, entries, form)
    err = e.value
    assert err.code == INVALID_VALUE
    assert repr(NODE) in err.message, err.message
    assert "sequence length" in err.message and "5" in err.message and "6" in err.message, err.message
    assert_refused_before_backend(spy, fakes)

    # control: the same k with v at the same sequence length goes through
    run(attn, [entries[0], (V, [1, 2, 5, 4], compact([1, 2, 5, 4]))], form)
    assert [r["entry"] for _, r in execute_calls(fakes)] == ["ExecuteOpGraphWithOverrides"]


@pytest.mark.parametrize("form", FORMS)
def test_consistent_full_override_reaches_the_override_entry(attn, fakes, spy, form):
    shapes = attn_shapes(hq=2, hkv=1, sq=5, skv=3, d=4, dv=2)
    entries = [
        (O, shapes["o"], [24, 12, 2, 1]),  # padded
        (Q, shapes["q"], compact(shapes["q"])),
        (V, shapes["v"], compact(shapes["v"])),
        (K, shapes["k"], [20, 20, 5, 1]),  # padded
    ]
    spy.clear()
    run(attn, entries, form)
    assert len(spy.backend_execute) == 1
    calls = execute_calls(fakes)
    assert [(n, r["entry"]) for n, r in calls] == [(OVERRIDE, "ExecuteOpGraphWithOverrides")]
    rec = calls[0][1]
    assert rec["status"] == 0
    assert rec["num_overrides"] == 4
    assert rec["override_uids"] == [u for u, _, _ in entries]
    assert rec["override_lengths"] == [4, 4, 4, 4]
    assert rec["override_shapes"] == [s for _, s, _ in entries]
    assert rec["override_strides"] == [t for _, _, t in entries]
