"""Spec 4.2.1: override input validation, rules 1-8, in both call forms, first failure wins; the
buffer check on overridden tensors (a sized value must state the override's shape and strides,
issue #26); and map/parallel equivalence."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hipdnn

from .support import FLOAT, INVALID_VALUE, arrays_for, attn_shapes, compact, execute_calls, ptr, strided_view

OVERRIDE = "fake_override_v110"
DIMS = [1, 2, 8, 4]
Q, K, V, O = 101, 102, 103, 104  # noqa: E741 - explicit uids so that messages can be checked for them


@pytest.fixture
def attn(fakes, fake_handle_factory):
    """An override-enabled SDPA graph on a handle holding only the override fake; its tensors carry
    uids 101..104 and declared (maximum) dims [1, 2, 8, 4], row-major."""
    h = fake_handle_factory(OVERRIDE)
    g = hipdnn.Graph(name="rules", io_data_type=FLOAT, is_override_shape_enabled=True)
    q = g.tensor(name="q", dim=DIMS, stride=compact(DIMS), uid=Q)
    k = g.tensor(name="k", dim=DIMS, stride=compact(DIMS), uid=K)
    v = g.tensor(name="v", dim=DIMS, stride=compact(DIMS), uid=V)
    o, _ = g.sdpa(q, k, v, attn_scale=0.5)
    o.set_output(True).set_uid(O)
    g.build(h)
    ts = {Q: q, K: k, V: v, O: o}
    return h, g, ts, arrays_for(ts.values())


def with_views(ts, vp, entries):
    """``vp`` with each overridden tensor's array replaced by a view of it stating the override's shape
    and strides (what a sized value must state, issue #26), where the entry can be one: a known uid,
    the tensor's rank, dims and strides >= 1, inside the array. The others keep their array: they break
    one of rules 1-8, which are decided before any buffer is looked at."""
    vp = dict(vp)
    for u, shape, stride in entries:
        t = ts.get(u)
        if t is None:
            continue
        base = vp[t]
        rank = base.ndim
        if len(shape) != rank or len(stride) != rank or min(shape) < 1 or min(stride) < 1:
            continue
        if sum((d - 1) * st for d, st in zip(shape, stride)) + 1 <= base.size:
            vp[t] = strided_view(shape, stride, base=base)
    return vp


def run(attn, entries, form):
    """Execute with ``entries`` = [(uid, shape, stride), ...] in the given call form, each overridden
    tensor's value a view stating the override's shape and strides (:func:`with_views`)."""
    h, g, ts, vp = attn
    vp = with_views(ts, vp, entries)
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


def assert_rejected(excinfo, rule, uid=None):
    err = excinfo.value
    assert err.code == INVALID_VALUE
    assert re.search(rf"\brule {rule}\b", err.message), err.message
    if uid is not None:
        assert re.search(rf"\buid {uid}\b", err.message), err.message


def last_override_call(fakes):
    calls = fakes[OVERRIDE].calls("ExecuteOpGraphWithOverrides")
    assert len(calls) == 1
    return calls[0]


FORMS = ["parallel", "map"]
GOOD_SHAPE, GOOD_STRIDE = [1, 2, 4, 4], [32, 16, 4, 1]
#: o's override matching a q overridden to GOOD_SHAPE (k, v at their declared shapes): execute re-runs
#: the sdpa shape rules on the effective shapes, so an accepted q override needs it alongside.
O_GOOD = (O, GOOD_SHAPE, GOOD_STRIDE)


def heads1(*, o_heads=1):
    """Companion overrides for a q with one head: k and v at one head (compact), o at ``o_heads``."""
    s = attn_shapes(hq=o_heads, hkv=1, sq=8, skv=8, d=4, dv=4)
    return [(K, s["k"], compact(s["k"])), (V, s["v"], compact(s["v"])), (O, s["o"], compact(s["o"]))]


# (id, entries, rule, uid named): each a single-rule violation.
SINGLE = [
    ("r3-unknown", [(999, GOOD_SHAPE, GOOD_STRIDE)], 3, 999),
    ("r3-unknown-after-good", [(Q, GOOD_SHAPE, GOOD_STRIDE), (555, GOOD_SHAPE, GOOD_STRIDE)], 3, 555),
    ("r4-short-shape", [(Q, [2, 8, 4], GOOD_STRIDE)], 4, Q),
    ("r4-short-stride", [(K, GOOD_SHAPE, [16, 4, 1])], 4, K),
    ("r4-long-both", [(V, [1, 1, 2, 4, 4], [32, 32, 16, 4, 1])], 4, V),
    ("r5-zero", [(Q, [1, 0, 4, 4], GOOD_STRIDE)], 5, Q),
    ("r5-negative", [(O, [1, 2, -4, 4], GOOD_STRIDE)], 5, O),
    ("r6-zero", [(K, GOOD_SHAPE, [32, 16, 4, 0])], 6, K),
    ("r6-negative", [(Q, GOOD_SHAPE, [32, -16, 4, 1])], 6, Q),
    ("r7-one-over", [(Q, [1, 2, 9, 4], [36, 18, 4, 1])], 7, Q),
    ("r7-batch-over", [(V, [2, 2, 8, 4], [64, 32, 4, 1])], 7, V),
    ("r8-swapped-inner", [(Q, GOOD_SHAPE, [32, 16, 1, 4])], 8, Q),
    ("r8-swapped-outer", [(K, GOOD_SHAPE, [32, 4, 8, 1])], 8, K),
]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("entries,rule,uid", [c[1:] for c in SINGLE], ids=[c[0] for c in SINGLE])
def test_single_rule_violation(attn, fakes, form, entries, rule, uid):
    with pytest.raises(hipdnn.HipdnnError) as e:
        run(attn, entries, form)
    assert_rejected(e, rule, uid)
    assert execute_calls(fakes) == []


# (id, entries, rule that must be reported): inputs breaking several rules at once.
ORDERING = [
    ("3+4", [(999, [1, 2], [2, 1])], 3),
    ("3+7", [(999, [9, 9, 9, 9], [729, 81, 9, 1])], 3),
    ("4+5", [(Q, [0, 2, 8], [16, 8, 1])], 4),
    ("4+7", [(Q, [1, 2, 99], [198, 99, 1])], 4),
    ("5+6", [(Q, [1, 0, 4, 4], [32, 0, 4, 1])], 5),
    ("5+7", [(Q, [1, 0, 99, 4], GOOD_STRIDE)], 5),
    ("5+8", [(Q, [0, 2, 4, 4], [32, 16, 1, 4])], 5),
    ("6+7", [(Q, [1, 2, 99, 4], [64, -1, 4, 1])], 6),
    ("6+8", [(Q, GOOD_SHAPE, [32, -16, 1, 4])], 6),
    ("7+8", [(Q, [1, 2, 9, 4], [36, 18, 1, 9])], 7),
    ("first entry wins", [(K, GOOD_SHAPE, [32, 16, 1, 4]), (Q, [1, 2, 99, 4], GOOD_STRIDE)], 8),
]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("entries,rule", [c[1:] for c in ORDERING], ids=[c[0] for c in ORDERING])
def test_first_failure_wins(attn, fakes, form, entries, rule):
    with pytest.raises(hipdnn.HipdnnError) as e:
        run(attn, entries, form)
    assert_rejected(e, rule, entries[0][0])
    for other in range(1, 9):
        if other != rule:
            assert not re.search(rf"\brule {other}\b", e.value.message)
    assert execute_calls(fakes) == []


# -- rules 1 and 2 ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "uids,shapes,strides",
    [
        ([Q, K], [GOOD_SHAPE], [GOOD_STRIDE, GOOD_STRIDE]),
        ([Q], [GOOD_SHAPE, GOOD_SHAPE], [GOOD_STRIDE]),
        ([Q], [GOOD_SHAPE], []),
        ([], [GOOD_SHAPE], [GOOD_STRIDE]),
        ([Q], None, None),
        # rule 1 before rule 2 (duplicates) and rule 3 (unknown uid)
        ([Q, Q], [GOOD_SHAPE], [GOOD_STRIDE]),
        ([999, 998, 997], [GOOD_SHAPE], [GOOD_STRIDE]),
    ],
)
def test_rule1_length_consistency_parallel_form(attn, fakes, uids, shapes, strides):
    h, g, _, vp = attn
    with pytest.raises(hipdnn.HipdnnError) as e:
        g.execute(h, vp, None, override_uids=uids, override_shapes=shapes, override_strides=strides)
    assert_rejected(e, 1)
    assert execute_calls(fakes) == []


@pytest.mark.parametrize(
    "entries",
    [
        [(Q, GOOD_SHAPE, GOOD_STRIDE), (Q, GOOD_SHAPE, GOOD_STRIDE)],
        [(K, GOOD_SHAPE, GOOD_STRIDE), (Q, GOOD_SHAPE, GOOD_STRIDE), (K, [1, 2, 2, 4], [16, 8, 4, 1])],
        # rule 2 is checked across all entries before rules 3-8 of any entry
        [(999, GOOD_SHAPE, GOOD_STRIDE), (999, GOOD_SHAPE, GOOD_STRIDE)],
        [(Q, [1, 2, 99], [1, 1, 1]), (Q, GOOD_SHAPE, GOOD_STRIDE)],
    ],
    ids=["pair", "among-three", "dup-unknown", "dup-before-rank"],
)
def test_rule2_duplicates_parallel_form(attn, fakes, entries):
    with pytest.raises(hipdnn.HipdnnError) as e:
        run(attn, entries, "parallel")
    dup = next(u for i, (u, _, _) in enumerate(entries) if u in [x for x, _, _ in entries[:i]])
    assert_rejected(e, 2, dup)
    assert execute_calls(fakes) == []


def test_rule2_parallel_form_tensor_and_uid_is_a_duplicate(attn, fakes):
    h, g, ts, vp = attn
    with pytest.raises(hipdnn.HipdnnError) as e:
        g.execute(
            h,
            vp,
            None,
            override_uids=[ts[Q], Q],
            override_shapes=[GOOD_SHAPE, GOOD_SHAPE],
            override_strides=[GOOD_STRIDE, GOOD_STRIDE],
        )
    assert_rejected(e, 2, Q)


@pytest.mark.parametrize("bad_first", [False, True], ids=["both-valid", "tensor-entry-breaks-rule4"])
def test_rule2_map_form_tensor_and_its_uid(attn, fakes, bad_first):
    """A map cannot repeat a key, but a tensor and its uid are two keys naming one tensor."""
    h, g, ts, vp = attn
    first = hipdnn.OverrideEntry(
        shape=[1, 2, 99] if bad_first else GOOD_SHAPE, stride=[1, 1, 1] if bad_first else GOOD_STRIDE
    )
    with pytest.raises(hipdnn.HipdnnError) as e:
        g.execute(h, vp, None, overrides={ts[K]: first, K: hipdnn.OverrideEntry(shape=GOOD_SHAPE, stride=GOOD_STRIDE)})
    assert_rejected(e, 2, K)
    assert execute_calls(fakes) == []


# -- rule 3 details ----------------------------------------------------------------------------
@pytest.mark.parametrize("form", FORMS)
def test_rule3_tensor_of_another_graph_sharing_the_uid(attn, fakes, form):
    """A tensor object from another graph must not silently override this graph's tensor that
    happens to carry the same uid."""
    h, g, ts, vp = attn
    other = hipdnn.Graph(name="other", io_data_type=FLOAT, is_override_shape_enabled=True)
    x = other.tensor(name="x", dim=DIMS, stride=compact(DIMS), uid=Q)
    y = other.tensor(name="y", dim=DIMS, stride=compact(DIMS), uid=K)
    other.add(x, y).set_output(True)
    other.validate()
    with pytest.raises(hipdnn.HipdnnError) as e:
        if form == "parallel":
            g.execute(h, vp, None, override_uids=[x], override_shapes=[GOOD_SHAPE], override_strides=[GOOD_STRIDE])
        else:
            g.execute(h, vp, None, overrides={x: hipdnn.OverrideEntry(shape=GOOD_SHAPE, stride=GOOD_STRIDE)})
    assert_rejected(e, 3, Q)
    assert execute_calls(fakes) == []


@pytest.mark.parametrize("form", FORMS)
def test_rule3_virtual_tensor_is_not_overridable(fakes, fake_handle_factory, form):
    h = fake_handle_factory(OVERRIDE)
    g = hipdnn.Graph(name="chain", io_data_type=FLOAT, is_override_shape_enabled=True)
    a = g.tensor(name="a", dim=[2, 8, 4], stride=[32, 4, 1], uid=1)
    b = g.tensor(name="b", dim=[2, 4, 8], stride=[32, 8, 1], uid=2)
    c = g.matmul(a, b)  # virtual
    c.set_uid(3)
    d = g.pointwise(hipdnn.PointwiseMode.RELU_FWD, c)
    d.set_output(True).set_uid(4)
    g.build(h)
    vp = arrays_for([a, b, d])
    with pytest.raises(hipdnn.HipdnnError) as e:
        if form == "parallel":
            g.execute(h, vp, None, override_uids=[3], override_shapes=[[2, 4, 4]], override_strides=[[16, 4, 1]])
        else:
            g.execute(h, vp, None, overrides={c: hipdnn.OverrideEntry(shape=[2, 4, 4], stride=[16, 4, 1])})
    assert_rejected(e, 3, 3)
    assert execute_calls(fakes) == []


# -- accepted edge cases -------------------------------------------------------------------------
# Each set is shape-consistent for the sdpa node (execute re-runs its shape rules on the effective
# shapes); the entry each case is about comes first, the companions it needs follow.
ACCEPTED = [
    ("r7-equal-to-max", [(Q, DIMS, compact(DIMS))]),
    ("r7-all-max-all-tensors", [(u, DIMS, compact(DIMS)) for u in (Q, K, V, O)]),
    # compact strides of smaller shapes, down to the all-ones tensor (k) whose strides all tie
    (
        "r8-compact-of-smaller",
        [
            (Q, [1, 2, 4, 1], [8, 4, 1, 1]),
            (K, [1, 1, 1, 1], [1, 1, 1, 1]),
            (V, [1, 1, 1, 4], [4, 4, 4, 1]),
            (O, GOOD_SHAPE, GOOD_STRIDE),
        ],
    ),
    ("r8-padded-same-order", [(Q, GOOD_SHAPE, [60, 30, 5, 1]), O_GOOD]),
    ("r8-size1-axes-ignored", [(Q, [1, 1, 8, 4], [2, 2, 4, 1]), *heads1()]),
    ("r8-size1-inner-ignored", [(O, [1, 2, 8, 1], [16, 8, 1, 1000]), (V, [1, 2, 8, 1], [16, 8, 1, 1])]),
]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("entries", [c[1] for c in ACCEPTED], ids=[c[0] for c in ACCEPTED])
def test_accepted_overrides_reach_the_plugin(attn, fakes, form, entries):
    run(attn, entries, form)
    rec = last_override_call(fakes)
    assert rec["override_uids"] == [u for u, _, _ in entries]
    assert rec["override_shapes"] == [list(s) for _, s, _ in entries]
    assert rec["override_strides"] == [list(t) for _, _, t in entries]


@pytest.mark.parametrize("form", FORMS)
def test_rule8_size1_decides(attn, fakes, form):
    """The same strides are legal when the out-of-order axis has size 1 and illegal otherwise."""
    strides = [64, 2, 4, 1]  # axis 1 claims to be inner to axis 2
    # k and v at one head in both calls, o at q's heads: both sets are shape-consistent, so rule 8 on
    # q is the only thing that differs between them.
    accepted = [(Q, [1, 1, 8, 4], strides), *heads1(o_heads=1)]
    run(attn, accepted, form)
    assert last_override_call(fakes)["override_strides"] == [t for _, _, t in accepted]
    assert last_override_call(fakes)["override_strides"][0] == strides
    with pytest.raises(hipdnn.HipdnnError) as e:
        run(attn, [(Q, [1, 2, 8, 4], strides), *heads1(o_heads=2)], form)
    assert_rejected(e, 8, Q)


@pytest.mark.parametrize("form", FORMS)
def test_rule8_follows_the_declared_layout_not_row_major(fakes, fake_handle_factory, form):
    """x is declared [2, 8, 4] with axis 1 innermost (strides [32, 1, 8]). An override keeping that
    order is accepted; the row-major strides of the same shape reorder it and are rejected."""
    h = fake_handle_factory(OVERRIDE)
    g = hipdnn.Graph(name="layout", io_data_type=FLOAT, is_override_shape_enabled=True)
    x = g.tensor(name="x", dim=[2, 8, 4], stride=[32, 1, 8], uid=7)
    y = g.pointwise(hipdnn.PointwiseMode.RELU_FWD, x)
    y.set_output(True).set_uid(8)
    g.build(h)
    xs, ys = np.zeros(64, np.float32), np.zeros([2, 8, 4], np.float32)

    # y is overridden to x's shape (a unary pointwise node), with its own row-major strides; each value
    # is a view stating its override's shape and strides.
    def go(stride):
        vp = {x: strided_view([2, 4, 4], stride, base=xs), y: strided_view([2, 4, 4], [16, 4, 1], base=ys)}
        if form == "parallel":
            g.execute(
                h,
                vp,
                None,
                override_uids=[7, 8],
                override_shapes=[[2, 4, 4], [2, 4, 4]],
                override_strides=[stride, [16, 4, 1]],
            )
        else:
            g.execute(
                h,
                vp,
                None,
                overrides={
                    x: hipdnn.OverrideEntry(shape=[2, 4, 4], stride=stride),
                    y: hipdnn.OverrideEntry(shape=[2, 4, 4], stride=[16, 4, 1]),
                },
            )

    go([16, 1, 4])
    assert last_override_call(fakes)["override_strides"] == [[16, 1, 4], [16, 4, 1]]
    with pytest.raises(hipdnn.HipdnnError) as e:
        go([16, 4, 1])
    assert_rejected(e, 8, 7)


# -- buffer bounds ---------------------------------------------------------------------------------
# A sized value must state the shape and strides the override gives its tensor (issue #26): a buffer
# smaller than what the override addresses can only be passed as an array of another shape, and that
# is refused, naming the tensor, before anything reaches the plugin.
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(
    "buffer,shape,stride,fragment",
    [
        (np.zeros(16, np.float32), GOOD_SHAPE, GOOD_STRIDE, "buffer shape [16]"),  # needs 32 elements
        (np.zeros(31, np.float32), GOOD_SHAPE, GOOD_STRIDE, "buffer shape [31]"),  # one short
        # padded past the 64-element store: the array cannot be a view of that layout
        (np.zeros(DIMS, np.float32), GOOD_SHAPE, [100, 50, 4, 1], "buffer shape [1, 2, 8, 4]"),
        # a view of the right shape inside it, but with the store's strides, not the override's
        (np.zeros(DIMS, np.float32)[:, :, :4], GOOD_SHAPE, [100, 50, 4, 1], "buffer strides [64, 32, 4, 1]"),
    ],
    ids=["far-too-small", "one-short", "padding-overflows", "padding-overflows-view"],
)
def test_override_addressing_past_the_buffer_is_rejected(attn, fakes, form, buffer, shape, stride, fragment):
    h, g, ts, vp = attn
    # o overridden alongside (to q's shape, a view of its own buffer) keeps the set shape-consistent
    vp = with_views(ts, vp, [(O, GOOD_SHAPE, GOOD_STRIDE)])
    vp[ts[Q]] = buffer
    with pytest.raises(hipdnn.HipdnnError) as e:
        if form == "parallel":
            g.execute(
                h,
                vp,
                None,
                override_uids=[Q, O],
                override_shapes=[shape, GOOD_SHAPE],
                override_strides=[stride, GOOD_STRIDE],
            )
        else:
            g.execute(
                h,
                vp,
                None,
                overrides={
                    Q: hipdnn.OverrideEntry(shape=shape, stride=stride),
                    O: hipdnn.OverrideEntry(shape=GOOD_SHAPE, stride=GOOD_STRIDE),
                },
            )
    assert e.value.code == INVALID_VALUE
    msg = e.value.message
    assert f"tensor 'q' (uid {Q})" in msg and fragment in msg, msg
    assert "(overridden)" in msg, msg
    assert execute_calls(fakes) == []


def _execute_q_at_good_shape(attn, q_value, q_stride=GOOD_STRIDE):
    h, g, ts, vp = attn
    vp = with_views(ts, vp, [(O, GOOD_SHAPE, GOOD_STRIDE)])
    vp[ts[Q]] = q_value
    g.execute(
        h,
        vp,
        None,
        override_uids=[Q, O],
        override_shapes=[GOOD_SHAPE, GOOD_SHAPE],
        override_strides=[q_stride, GOOD_STRIDE],
    )


@pytest.mark.parametrize(
    "buffer,hint",
    [
        (np.zeros(32, np.float32), None),  # flat: no slice of it has the call's rank
        (np.zeros(DIMS, np.float32), "x[:, :, :4]"),
        (np.zeros(1000, np.float32), None),
    ],
    ids=["exact-flat", "declared-max", "much-larger"],
)
def test_larger_contiguous_backing_buffer_is_refused(attn, fakes, buffer, hint):
    """Before issue #26 a contiguous array at least as large as the override addresses was read as a
    compact block at its start; now an array must state the override's shape, so it is refused, naming
    the tensor and (where a slice of it would do) the view to pass instead."""
    with pytest.raises(hipdnn.HipdnnError) as e:
        _execute_q_at_good_shape(attn, buffer)
    msg = e.value.message
    assert e.value.code == INVALID_VALUE
    assert f"tensor 'q' (uid {Q})" in msg, msg
    assert f"buffer shape {list(buffer.shape)} disagrees with the call's (overridden) dims {GOOD_SHAPE}" in msg, msg
    if hint is not None:
        assert f"pass a view of that shape ({hint})" in msg, msg
    assert execute_calls(fakes) == []


@pytest.mark.parametrize(
    "make,stride",
    [
        (lambda: np.zeros(32, np.float32).reshape(GOOD_SHAPE), GOOD_STRIDE),
        (lambda: np.zeros(DIMS, np.float32)[:, :, :4], compact(DIMS)),  # the hint, with the array's strides
        (lambda: np.zeros(1000, np.float32)[:32].reshape(GOOD_SHAPE), GOOD_STRIDE),
        (lambda: strided_view(GOOD_SHAPE, [60, 30, 5, 1], base=np.zeros(1000, np.float32)), [60, 30, 5, 1]),
    ],
    ids=["exact-flat", "declared-max", "much-larger", "padded"],
)
def test_view_of_a_larger_buffer_stating_the_override_is_accepted(attn, fakes, make, stride):
    """The same buffers, passed as views stating the override's shape and strides, reach the plugin at
    the buffer's own address."""
    view = make()
    _execute_q_at_good_shape(attn, view, stride)
    rec = last_override_call(fakes)
    assert [Q, ptr(view)] in rec["buffers"]
    assert rec["override_strides"][0] == stride


def test_bare_int_pointers_are_not_bounds_checked(attn, fakes):
    h, g, ts, vp = attn
    tiny = np.zeros(1, np.float32)
    vp = dict(vp)
    # A bare pointer is trusted to span what its tensor addresses, and an output may not overlap it:
    # this one sits far from the heap where o lives (the fake plugin never dereferences it).
    far = (1 << 64) - (1 << 48)
    vp[ts[Q]] = far
    big_stride = [1 << 40, 1 << 30, 1 << 20, 1]  # would address far beyond any real buffer
    vp = with_views(ts, vp, [(O, GOOD_SHAPE, GOOD_STRIDE)])
    overrides = {
        Q: hipdnn.OverrideEntry(shape=GOOD_SHAPE, stride=big_stride),
        O: hipdnn.OverrideEntry(shape=GOOD_SHAPE, stride=GOOD_STRIDE),  # o to match, in its own buffer
    }
    g.execute(h, vp, None, overrides=overrides)
    rec = last_override_call(fakes)
    assert [Q, far] in rec["buffers"]
    assert rec["override_strides"] == [big_stride, GOOD_STRIDE]
    # a numpy array is sized: one of its real size is refused
    vp[ts[Q]] = tiny
    with pytest.raises(hipdnn.HipdnnError) as e:
        g.execute(h, vp, None, overrides=overrides)
    assert e.value.code == INVALID_VALUE
    assert f"uid {Q}" in e.value.message, e.value.message


# -- map vs parallel equivalence --------------------------------------------------------------------
@st.composite
def valid_overrides(draw):
    """A random subset of q, k, v, o in random order, each with a shape within [1, 2, 8, 4] and
    order-preserving (optionally padded) strides that stay inside the 64-element buffers. The shapes
    form a consistent sdpa set together with the declared shapes of the tensors left out (execute
    re-runs the node's shape rules on the effective shapes)."""
    uids = draw(st.permutations([Q, K, V, O]))
    uids = uids[: draw(st.integers(1, 4))]
    max_b, max_h, max_s, max_d = DIMS

    def free(*roles, top):  # a dim of the named tensors: drawn if all are overridden, else declared
        return draw(st.integers(1, top)) if all(r in uids for r in roles) else top

    hkv = free(K, V, top=max_h)
    # q's heads a multiple of k's and v's (the declared h = 2 is a multiple of any drawn hkv)
    hq = draw(st.sampled_from(list(range(hkv, max_h + 1, hkv)))) if Q in uids and O in uids else max_h
    shapes = attn_shapes(
        b=free(Q, K, V, O, top=max_b),
        hq=hq,
        hkv=hkv,
        sq=free(Q, O, top=max_s),
        skv=free(K, V, top=max_s),
        d=free(Q, K, top=max_d),
        dv=free(V, O, top=max_d),
    )
    out = []
    for u in uids:
        shape = shapes[{Q: "q", K: "k", V: "v", O: "o"}[u]]
        stride = [0] * 4
        step = draw(st.integers(1, 2))
        for axis in (3, 2, 1, 0):
            stride[axis] = step
            step = step * shape[axis] + draw(st.sampled_from([0, 0, 1, 3]))
        need = sum((d - 1) * s for d, s in zip(shape, stride)) + 1
        if need > 64:
            stride = compact(shape)
        out.append((u, shape, stride, draw(st.booleans())))  # last: key by tensor object?
    return out


def test_map_and_parallel_forms_deliver_identical_payloads(attn, fakes):
    h, g, ts, vp = attn

    @settings(max_examples=60, deadline=None, database=None)
    @given(valid_overrides())
    def check(entries):
        key = lambda u, by_tensor: ts[u] if by_tensor else u  # noqa: E731
        fakes[OVERRIDE].reset()
        views = with_views(ts, vp, [(u, s, t) for u, s, t, _ in entries])
        g.execute(
            h,
            views,
            None,
            override_uids=[key(u, b) for u, _, _, b in entries],
            override_shapes=[s for _, s, _, _ in entries],
            override_strides=[t for _, _, t, _ in entries],
        )
        g.execute(
            h,
            views,
            None,
            overrides={key(u, not b): hipdnn.OverrideEntry(shape=s, stride=t) for u, s, t, b in entries},
        )
        recs = fakes[OVERRIDE].calls("ExecuteOpGraphWithOverrides")
        assert len(recs) == 2
        assert recs[0] == recs[1]
        assert recs[0]["override_uids"] == [u for u, _, _, _ in entries]
        assert recs[0]["override_shapes"] == [s for _, s, _, _ in entries]
        assert recs[0]["override_strides"] == [t for _, _, t, _ in entries]

    check()
