"""Backend descriptor level (spec 4.1, 4.3): BAD_PARAM for malformed override attributes on a
hand-made variant pack, read-back of a valid payload, and the graph flag (attribute 609) on the
operation graph and the execution plan."""

from __future__ import annotations

import itertools

import pytest

import hipdnn
from hipdnn.backend import (
    AttributeName,
    AttributeType,
    BackendError,
    ExecutionPlanDescriptor,
    OperationGraphDescriptor,
    Status,
    VariantPackDescriptor,
)

from .support import backend_plan, sdpa_graph

A, T = AttributeName, AttributeType
UIDS = [1, 2, 3]
PTRS = [0x1000, 0x2000, 0x3000]

OVERRIDE_NAMES = (
    A.VARIANT_PACK_OVERRIDE_UNIQUE_IDS_EXT,
    A.VARIANT_PACK_OVERRIDE_SHAPES_EXT,
    A.VARIANT_PACK_OVERRIDE_STRIDES_EXT,
    A.VARIANT_PACK_OVERRIDE_LENGTHS_EXT,
)
# Two overrides, ranks 2 and 3: uid 3 -> [4, 5] / [5, 1]; uid 1 -> [2, 3, 4] / [12, 4, 1].
VALID = {
    A.VARIANT_PACK_OVERRIDE_UNIQUE_IDS_EXT: [3, 1],
    A.VARIANT_PACK_OVERRIDE_SHAPES_EXT: [4, 5, 2, 3, 4],
    A.VARIANT_PACK_OVERRIDE_STRIDES_EXT: [5, 1, 12, 4, 1],
    A.VARIANT_PACK_OVERRIDE_LENGTHS_EXT: [2, 3],
}


def pack(overrides=None, uids=UIDS, ptrs=PTRS, workspace=0x9000):
    vp = VariantPackDescriptor()
    vp.set_attribute(A.VARIANT_PACK_UNIQUE_IDS, T.INT64, uids)
    vp.set_attribute(A.VARIANT_PACK_DATA_POINTERS, T.VOID_PTR, ptrs)
    vp.set_attribute(A.VARIANT_PACK_WORKSPACE, T.VOID_PTR, workspace)
    for name, values in (overrides or {}).items():
        vp.set_attribute(name, T.INT64, values)
    return vp


def with_(**changes):
    d = dict(VALID)
    for key, values in changes.items():
        d[getattr(A, f"VARIANT_PACK_OVERRIDE_{key}_EXT")] = values
    return d


def assert_bad_param(vp):
    with pytest.raises(BackendError) as e:
        vp.finalize()
    assert e.value.status == Status.BAD_PARAM
    assert not vp.finalized
    return e.value


def test_valid_payload_finalizes_and_reads_back():
    vp = pack(VALID)
    vp.finalize()
    for name, values in VALID.items():
        assert vp.get_attribute(name) == values
    assert vp.get_attribute(A.VARIANT_PACK_UNIQUE_IDS) == UIDS
    assert vp.get_attribute(A.VARIANT_PACK_DATA_POINTERS) == PTRS
    assert vp.get_attribute(A.VARIANT_PACK_WORKSPACE) == 0x9000
    assert vp.has_overrides
    assert vp.buffers == list(zip(UIDS, PTRS))
    assert vp.override_uids == [3, 1] and vp.override_lengths == [2, 3]


def test_read_back_before_finalize_is_refused():
    vp = pack(VALID)
    with pytest.raises(BackendError) as e:
        vp.get_attribute(A.VARIANT_PACK_OVERRIDE_UNIQUE_IDS_EXT)
    assert e.value.status == Status.BAD_PARAM_NOT_FINALIZED


def test_pack_without_overrides_finalizes_without_them():
    vp = pack()
    vp.finalize()
    assert not vp.has_overrides
    with pytest.raises(BackendError) as e:
        vp.get_attribute(A.VARIANT_PACK_OVERRIDE_UNIQUE_IDS_EXT)
    assert e.value.status == Status.BAD_PARAM


@pytest.mark.parametrize(
    "overrides",
    [
        with_(LENGTHS=[2, 2]),  # adds to 4, flat arrays hold 5
        with_(LENGTHS=[3, 3]),  # adds to 6
        with_(SHAPES=[4, 5, 2, 3]),  # shapes one short
        with_(STRIDES=[5, 1, 12, 4, 1, 1]),  # strides one long
        with_(SHAPES=[4, 5, 2, 3], STRIDES=[5, 1, 12, 4]),  # both short together
    ],
    ids=["lengths-low", "lengths-high", "shapes-short", "strides-long", "both-short"],
)
def test_lengths_must_add_up_to_the_flat_arrays(overrides):
    assert_bad_param(pack(overrides))


@pytest.mark.parametrize(
    "overrides",
    [with_(LENGTHS=[5]), with_(LENGTHS=[2, 2, 1]), with_(UNIQUE_IDS=[3]), with_(UNIQUE_IDS=[3, 1, 2])],
    ids=["fewer-lengths", "more-lengths", "fewer-uids", "more-uids"],
)
def test_lengths_count_must_equal_uid_count(overrides):
    assert_bad_param(pack(overrides))


@pytest.mark.parametrize("unknown", [[3, 4], [99, 1], [0, 1], [-1, 3]])
def test_override_uid_must_be_in_the_pack(unknown):
    err = assert_bad_param(pack(with_(UNIQUE_IDS=unknown)))
    assert str([u for u in unknown if u not in UIDS]) in err.message


@pytest.mark.parametrize(
    "overrides",
    [
        with_(SHAPES=[4, 0, 2, 3, 4]),
        with_(SHAPES=[4, 5, 2, 3, -4]),
        with_(STRIDES=[5, 1, 0, 4, 1]),
        with_(STRIDES=[-5, 1, 12, 4, 1]),
        with_(LENGTHS=[0, 5]),
        with_(LENGTHS=[-1, 6]),
        with_(UNIQUE_IDS=[3], SHAPES=[], STRIDES=[], LENGTHS=[0]),
    ],
    ids=["shape-0", "shape-neg", "stride-0", "stride-neg", "length-0", "length-neg", "lone-zero-length"],
)
def test_non_positive_values_are_rejected(overrides):
    assert_bad_param(pack(overrides))


SUBSETS = [c for r in (1, 2, 3) for c in itertools.combinations(OVERRIDE_NAMES, r)]


@pytest.mark.parametrize("present", SUBSETS, ids=["+".join(str(int(n)) for n in c) for c in SUBSETS])
def test_override_attributes_come_all_or_nothing(present):
    err = assert_bad_param(pack({n: VALID[n] for n in present}))
    for n in OVERRIDE_NAMES:
        if n not in present:
            assert n.name in err.message


@pytest.mark.parametrize(
    "overrides",
    [
        with_(UNIQUE_IDS=[1, 1]),
        with_(UNIQUE_IDS=[2, 3, 2], LENGTHS=[2, 2, 1]),
    ],
    ids=["pair", "among-three"],
)
def test_duplicate_override_uids_are_rejected(overrides):
    assert_bad_param(pack(overrides))


def test_override_attributes_are_int64_only():
    vp = pack()
    with pytest.raises(BackendError) as e:
        vp.set_attribute(A.VARIANT_PACK_OVERRIDE_UNIQUE_IDS_EXT, T.VOID_PTR, [1])
    assert e.value.status == Status.BAD_PARAM
    with pytest.raises(BackendError) as e:
        vp.set_attribute(A.VARIANT_PACK_OVERRIDE_SHAPES_EXT, T.INT64, [1, 2.5])
    assert e.value.status == Status.BAD_PARAM


def test_finalized_pack_is_frozen():
    vp = pack(VALID)
    vp.finalize()
    with pytest.raises(BackendError) as e:
        vp.set_attribute(A.VARIANT_PACK_OVERRIDE_LENGTHS_EXT, T.INT64, [2, 3])
    assert e.value.status == Status.BAD_PARAM
    assert vp.get_attribute(A.VARIANT_PACK_OVERRIDE_LENGTHS_EXT) == [2, 3]


# -- attribute 609 on the operation graph and the execution plan ----------------------------------
def _blob(flag: bool) -> bytes:
    g, _ = sdpa_graph(override=flag)
    return g.serialize()


@pytest.mark.parametrize(
    "in_buffer,attribute,expected",
    [
        (False, True, True),
        (True, False, False),  # the attribute is authoritative over the serialized graph
        (True, True, True),
        (False, False, False),
        (True, None, True),  # not set: taken from the serialized graph
        (False, None, False),
    ],
)
def test_override_flag_on_operation_graph_and_plan(fakes, fake_handle_factory, in_buffer, attribute, expected):
    assert int(A.OPERATIONGRAPH_IS_OVERRIDE_SHAPE_ENABLED_EXT) == 609
    h = fake_handle_factory("fake_override_v110", "fake_plain_v100")
    og = OperationGraphDescriptor(_blob(in_buffer))
    og.set_attribute(A.OPERATIONGRAPH_HANDLE, T.HANDLE, h.backend)
    if attribute is not None:
        og.set_attribute(A.OPERATIONGRAPH_IS_OVERRIDE_SHAPE_ENABLED_EXT, T.BOOLEAN, attribute)
    og.finalize()
    assert og.get_attribute(A.OPERATIONGRAPH_IS_OVERRIDE_SHAPE_ENABLED_EXT) is expected
    # what plugins read: the flag inside the buffer they receive agrees with the attribute
    assert hipdnn.Graph.deserialize(og.serialized_graph).is_override_shape_enabled() is expected

    plan = backend_plan(h, _blob(in_buffer), override_flag=attribute)
    assert plan.get_attribute(A.OPERATIONGRAPH_IS_OVERRIDE_SHAPE_ENABLED_EXT) is expected
    # the flag steered the filter: the 1.0.0 fake is asked only about flag-less graphs
    asked = len(fakes["fake_plain_v100"].calls("GetApplicableEngineIds"))
    assert asked == (0 if expected else 1)


def test_plan_override_flag_is_read_only(fake_handle_factory):
    h = fake_handle_factory("fake_override_v110")
    plan = backend_plan(h, _blob(True))
    fresh = ExecutionPlanDescriptor()
    with pytest.raises(BackendError) as e:
        fresh.set_attribute(A.OPERATIONGRAPH_IS_OVERRIDE_SHAPE_ENABLED_EXT, T.BOOLEAN, False)
    assert e.value.status == Status.BAD_PARAM
    assert plan.get_attribute(A.OPERATIONGRAPH_IS_OVERRIDE_SHAPE_ENABLED_EXT) is True


@pytest.mark.parametrize("flag", [True, False])
def test_graph_flag_round_trips_through_serialization(flag):
    g, _ = sdpa_graph(override=flag)
    assert g.is_override_shape_enabled() is flag
    blob = g.serialize()
    g2 = hipdnn.Graph.deserialize(blob)
    assert g2.is_override_shape_enabled() is flag
    assert g2.serialize() == blob


def test_graph_flag_defaults_to_false():
    g = hipdnn.Graph(name="plain", io_data_type=hipdnn.DataType.FLOAT)
    assert g.is_override_shape_enabled() is False
    x = g.tensor(name="x", dim=[2, 3], stride=[3, 1])
    g.pointwise(hipdnn.PointwiseMode.RELU_FWD, x).set_output(True)
    assert hipdnn.Graph.deserialize(g.serialize()).is_override_shape_enabled() is False
    g.set_override_shape_enabled(True)
    assert hipdnn.Graph.deserialize(g.serialize()).is_override_shape_enabled() is True
