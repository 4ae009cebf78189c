"""Backend descriptor contracts: typed set/get, finalize rules, the operation graph's flag handling,
and the numbering shared with hipDNN's C API."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hipdnn import DataType, Graph, PointwiseMode
from hipdnn.backend import (
    AttributeName,
    AttributeType,
    BackendError,
    BackendHandle,
    DescriptorType,
    EngineHeurDescriptor,
    OperationGraphDescriptor,
    Status,
    TensorDescriptor,
    VariantPackDescriptor,
)
from hipdnn.backend.graph_summary import summarize
from hipdnn.plugins import required_api_version

A = AttributeName
T = AttributeType


@pytest.fixture
def handle() -> Iterator[BackendHandle]:
    h = BackendHandle([])  # no plugins: enough for descriptors that do not ask any
    yield h
    h.close()


def raises_status(status: Status):
    class _Expect:
        def __enter__(self):
            self.ctx = pytest.raises(BackendError)
            self.info = self.ctx.__enter__()
            return self.info

        def __exit__(self, *exc):
            handled = self.ctx.__exit__(*exc)
            assert self.info.value.status is status, f"expected {status.name}, got {self.info.value}"
            assert self.info.value.message
            return handled

    return _Expect()


def tensor_desc(uid=1, dims=(4, 3), strides=(3, 1), data_type=DataType.FLOAT, **extra) -> TensorDescriptor:
    d = TensorDescriptor()
    if uid is not None:
        d.set_attribute(A.TENSOR_UNIQUE_ID, T.INT64, uid)
    if data_type is not None:
        d.set_attribute(A.TENSOR_DATA_TYPE, T.DATA_TYPE, int(data_type))
    if dims is not None:
        d.set_attribute(A.TENSOR_DIMENSIONS, T.INT64, list(dims))
    if strides is not None:
        d.set_attribute(A.TENSOR_STRIDES, T.INT64, list(strides))
    for name, (attr_type, value) in extra.items():
        d.set_attribute(A[name], attr_type, value)
    return d


def serialized(name="g", override=False, preferred=None) -> bytes:
    g = Graph(
        name=name,
        io_data_type=DataType.HALF,
        intermediate_data_type=DataType.FLOAT,
        compute_data_type=DataType.FLOAT,
        is_override_shape_enabled=override,
        preferred_engine_id=preferred,
    )
    x = g.tensor("x", [4, 3], [3, 1])
    g.pointwise(PointwiseMode.RELU_FWD, x).set_output(True)
    return g.serialize()


def op_graph(handle, blob, **attrs) -> OperationGraphDescriptor:
    d = OperationGraphDescriptor(blob)
    d.set_attribute(A.OPERATIONGRAPH_HANDLE, T.HANDLE, handle)
    for name, (attr_type, value) in attrs.items():
        d.set_attribute(A[name], attr_type, value)
    return d


# -- generic set/get rules -------------------------------------------------------------------
def test_tensor_descriptor_round_trip() -> None:
    d = tensor_desc(uid=7, dims=(2, 3, 4), strides=(12, 4, 1), TENSOR_NAME_EXT=(T.CHAR, "x"))
    d.finalize()
    assert d.finalized and d.descriptor_type is DescriptorType.TENSOR_DESCRIPTOR
    assert d.get_attribute(A.TENSOR_UNIQUE_ID) == 7
    assert d.get_attribute(A.TENSOR_DIMENSIONS) == [2, 3, 4]
    assert d.get_attribute(A.TENSOR_STRIDES) == [12, 4, 1]
    assert d.get_attribute(A.TENSOR_DATA_TYPE) == int(DataType.FLOAT)
    assert d.get_attribute(A.TENSOR_NAME_EXT) == "x"
    assert d.get_attribute(A.TENSOR_IS_VIRTUAL) is False  # defaulted at finalize


def test_returned_lists_are_copies() -> None:
    d = tensor_desc()
    d.finalize()
    d.get_attribute(A.TENSOR_DIMENSIONS).append(99)
    assert d.get_attribute(A.TENSOR_DIMENSIONS) == [4, 3]


def test_set_after_finalize_is_bad_param() -> None:
    d = tensor_desc()
    d.finalize()
    with raises_status(Status.BAD_PARAM):
        d.set_attribute(A.TENSOR_UNIQUE_ID, T.INT64, 2)
    assert d.get_attribute(A.TENSOR_UNIQUE_ID) == 1


def test_finalize_twice_is_bad_param() -> None:
    d = tensor_desc()
    d.finalize()
    with raises_status(Status.BAD_PARAM):
        d.finalize()


@pytest.mark.parametrize(
    "name, attr_type, value",
    [
        (A.TENSOR_UNIQUE_ID, T.FLOAT, 1.0),  # declared type differs
        (A.TENSOR_UNIQUE_ID, T.BOOLEAN, True),
        (A.TENSOR_IS_VIRTUAL, T.INT64, 1),
        (A.TENSOR_DIMENSIONS, T.DOUBLE, [1.0]),
        (A.TENSOR_NAME_EXT, T.INT64, 5),
    ],
)
def test_wrong_attribute_type_is_bad_param(name, attr_type, value) -> None:
    d = TensorDescriptor()
    with raises_status(Status.BAD_PARAM):
        d.set_attribute(name, attr_type, value)
    assert not d.has_attribute(name)


@pytest.mark.parametrize(
    "name, attr_type, value",
    [
        (A.TENSOR_UNIQUE_ID, T.INT64, True),  # a bool is not an int64
        (A.TENSOR_UNIQUE_ID, T.INT64, "1"),
        (A.TENSOR_UNIQUE_ID, T.INT64, 1 << 63),  # out of range
        (A.TENSOR_UNIQUE_ID, T.INT64, [1, 2]),  # many values for a scalar
        (A.TENSOR_IS_VIRTUAL, T.BOOLEAN, 1),
        (A.TENSOR_NAME_EXT, T.CHAR, b"bytes"),
        (A.TENSOR_DIMENSIONS, T.INT64, 4),  # scalar for an array
        (A.TENSOR_DIMENSIONS, T.INT64, "43"),
        (A.TENSOR_DIMENSIONS, T.INT64, [4, 3.0]),
    ],
)
def test_wrong_value_is_bad_param(name, attr_type, value) -> None:
    with raises_status(Status.BAD_PARAM):
        TensorDescriptor().set_attribute(name, attr_type, value)


def test_scalar_accepts_a_one_element_list() -> None:
    d = tensor_desc(uid=None)
    d.set_attribute(A.TENSOR_UNIQUE_ID, T.INT64, [5])
    d.finalize()
    assert d.get_attribute(A.TENSOR_UNIQUE_ID) == 5


@pytest.mark.parametrize(
    "desc, name, attr_type, value",
    [
        (TensorDescriptor, A.VARIANT_PACK_UNIQUE_IDS, T.INT64, [1]),
        (TensorDescriptor, A.OPERATIONGRAPH_NAME_EXT, T.CHAR, "x"),
        (VariantPackDescriptor, A.TENSOR_UNIQUE_ID, T.INT64, 1),
        (EngineHeurDescriptor, A.EXECUTION_PLAN_WORKSPACE_SIZE, T.INT64, 0),
    ],
)
def test_attribute_of_another_descriptor_is_bad_param(desc, name, attr_type, value) -> None:
    with raises_status(Status.BAD_PARAM):
        desc().set_attribute(name, attr_type, value)


def test_get_before_finalize_is_not_finalized() -> None:
    d = tensor_desc()
    with raises_status(Status.BAD_PARAM_NOT_FINALIZED):
        d.get_attribute(A.TENSOR_UNIQUE_ID)
    with raises_status(Status.BAD_PARAM_NOT_FINALIZED):
        VariantPackDescriptor().get_attribute(A.VARIANT_PACK_UNIQUE_IDS)


def test_get_of_foreign_attribute_after_finalize_is_bad_param() -> None:
    d = tensor_desc()
    d.finalize()
    with raises_status(Status.BAD_PARAM):
        d.get_attribute(A.VARIANT_PACK_WORKSPACE)


# -- tensor descriptor finalize --------------------------------------------------------------
@pytest.mark.parametrize(
    "kw",
    [
        {"uid": None},
        {"data_type": None},
        {"dims": None},
        {"strides": None},
        {"dims": (4, 3), "strides": (1,)},
        {"dims": (4,), "strides": (3, 1)},
        {"dims": (), "strides": ()},
        {"dims": (4, 0)},
        {"dims": (-4, 3)},
        {"strides": (3, 0)},
        {"strides": (-3, 1)},
    ],
)
def test_tensor_finalize_checks(kw) -> None:
    d = tensor_desc(**kw)
    with raises_status(Status.BAD_PARAM):
        d.finalize()
    assert not d.finalized


# -- operation graph -------------------------------------------------------------------------
def test_operation_graph_needs_a_handle() -> None:
    with raises_status(Status.BAD_PARAM):
        OperationGraphDescriptor(serialized()).finalize()


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b"",
        lambda b: b[:6],
        lambda b: b[: len(b) // 2],
        lambda b: b"\xff" * len(b),
        lambda b: b"\xff\xff\xff\x7f" + b[4:],  # root offset far past the end
    ],
)
def test_operation_graph_with_a_corrupted_buffer_is_bad_param(handle, damage) -> None:
    d = op_graph(handle, damage(serialized()))
    with raises_status(Status.BAD_PARAM):
        d.finalize()
    assert not d.finalized


def test_operation_graph_read_only_attributes(handle) -> None:
    d = op_graph(handle, serialized(name="ops ✓"))
    for name, attr_type, value in [
        (A.OPERATIONGRAPH_NAME_EXT, T.CHAR, "x"),
        (A.OPERATIONGRAPH_IO_DATA_TYPE_EXT, T.DATA_TYPE, 1),
        (A.OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, T.INT64, 3),
    ]:
        with raises_status(Status.BAD_PARAM):
            d.set_attribute(name, attr_type, value)
    d.finalize()
    assert d.get_attribute(A.OPERATIONGRAPH_NAME_EXT) == "ops ✓"
    assert d.get_attribute(A.OPERATIONGRAPH_IO_DATA_TYPE_EXT) == int(DataType.HALF)
    assert d.get_attribute(A.OPERATIONGRAPH_INTERMEDIATE_DATA_TYPE_EXT) == int(DataType.FLOAT)
    assert d.get_attribute(A.OPERATIONGRAPH_COMPUTE_DATA_TYPE_EXT) == int(DataType.FLOAT)
    assert d.get_attribute(A.OPERATIONGRAPH_ENGINE_GLOBAL_COUNT) == 0
    assert d.get_attribute(A.OPERATIONGRAPH_IS_OVERRIDE_SHAPE_ENABLED_EXT) is False
    assert d.get_attribute(A.OPERATIONGRAPH_HANDLE) is handle
    with raises_status(Status.BAD_PARAM):  # never set, and the graph names no preferred engine
        d.get_attribute(A.OPERATIONGRAPH_PREFERRED_ENGINE_ID_EXT)


def test_operation_graph_preferred_engine_from_buffer_and_attribute(handle) -> None:
    d = op_graph(handle, serialized(preferred=9002))
    d.finalize()
    assert d.get_attribute(A.OPERATIONGRAPH_PREFERRED_ENGINE_ID_EXT) == 9002
    d = op_graph(handle, serialized(preferred=9002), OPERATIONGRAPH_PREFERRED_ENGINE_ID_EXT=(T.INT64, 9001))
    d.finalize()
    assert d.get_attribute(A.OPERATIONGRAPH_PREFERRED_ENGINE_ID_EXT) == 9001


def test_override_attribute_true_rewrites_a_false_buffer(handle) -> None:
    blob = serialized(override=False)
    assert summarize(blob).is_override_shape_enabled is False
    d = op_graph(handle, blob, OPERATIONGRAPH_IS_OVERRIDE_SHAPE_ENABLED_EXT=(T.BOOLEAN, True))
    d.finalize()
    assert d.get_attribute(A.OPERATIONGRAPH_IS_OVERRIDE_SHAPE_ENABLED_EXT) is True
    after = summarize(d.serialized_graph)
    assert after.is_override_shape_enabled is True
    before = summarize(blob)
    assert (after.name, after.tensors, after.node_count) == (before.name, before.tensors, before.node_count)
    assert d.required_api_version == required_api_version(is_override_shape_enabled=True)
    assert d.required_api_version > required_api_version(is_override_shape_enabled=False)
    # and the frontend reads the rewritten buffer as the same graph, flag on
    assert Graph.deserialize(d.serialized_graph).is_override_shape_enabled() is True


def test_override_attribute_false_rewrites_a_true_buffer(handle) -> None:
    flag_off = (T.BOOLEAN, False)
    d = op_graph(handle, serialized(override=True), OPERATIONGRAPH_IS_OVERRIDE_SHAPE_ENABLED_EXT=flag_off)
    d.finalize()
    assert d.get_attribute(A.OPERATIONGRAPH_IS_OVERRIDE_SHAPE_ENABLED_EXT) is False
    assert summarize(d.serialized_graph).is_override_shape_enabled is False
    assert d.required_api_version == required_api_version(is_override_shape_enabled=False)


def test_override_flag_from_buffer_when_attribute_unset(handle) -> None:
    blob = serialized(override=True)
    d = op_graph(handle, blob)
    d.finalize()
    assert d.get_attribute(A.OPERATIONGRAPH_IS_OVERRIDE_SHAPE_ENABLED_EXT) is True
    assert d.serialized_graph == blob  # untouched


def test_heuristics_need_a_finalized_graph(handle) -> None:
    heur = EngineHeurDescriptor()
    heur.set_attribute(A.ENGINEHEUR_OPERATION_GRAPH, T.BACKEND_DESCRIPTOR, op_graph(handle, serialized()))
    with raises_status(Status.BAD_PARAM_NOT_FINALIZED):
        heur.finalize()
    heur = EngineHeurDescriptor()
    heur.set_attribute(A.ENGINEHEUR_OPERATION_GRAPH, T.BACKEND_DESCRIPTOR, TensorDescriptor())
    with raises_status(Status.BAD_PARAM):
        heur.finalize()
    with raises_status(Status.BAD_PARAM):
        EngineHeurDescriptor().set_attribute(A.ENGINEHEUR_OPERATION_GRAPH, T.BACKEND_DESCRIPTOR, "graph")


def test_heuristics_without_plugins_find_nothing(handle) -> None:
    g = op_graph(handle, serialized())
    g.finalize()
    heur = EngineHeurDescriptor()
    heur.set_attribute(A.ENGINEHEUR_OPERATION_GRAPH, T.BACKEND_DESCRIPTOR, g)
    heur.finalize()
    assert heur.get_attribute(A.ENGINEHEUR_RESULTS) == []
    with raises_status(Status.BAD_PARAM):
        heur.set_attribute(A.ENGINEHEUR_RESULTS, T.BACKEND_DESCRIPTOR, [])


# -- variant pack ----------------------------------------------------------------------------
def test_variant_pack_checks() -> None:
    vp = VariantPackDescriptor()
    vp.set_attribute(A.VARIANT_PACK_UNIQUE_IDS, T.INT64, [1, 2])
    vp.set_attribute(A.VARIANT_PACK_DATA_POINTERS, T.VOID_PTR, [4096])
    with raises_status(Status.BAD_PARAM):
        vp.finalize()
    vp = VariantPackDescriptor()
    vp.set_attribute(A.VARIANT_PACK_UNIQUE_IDS, T.INT64, [1, 1])
    vp.set_attribute(A.VARIANT_PACK_DATA_POINTERS, T.VOID_PTR, [4096, 8192])
    with raises_status(Status.BAD_PARAM):
        vp.finalize()
    with raises_status(Status.BAD_PARAM):
        VariantPackDescriptor().set_attribute(A.VARIANT_PACK_DATA_POINTERS, T.VOID_PTR, [-1])
    vp = VariantPackDescriptor()
    vp.set_attribute(A.VARIANT_PACK_UNIQUE_IDS, T.INT64, [1])
    vp.set_attribute(A.VARIANT_PACK_DATA_POINTERS, T.VOID_PTR, [4096])
    vp.set_attribute(A.VARIANT_PACK_OVERRIDE_UNIQUE_IDS_EXT, T.INT64, [1])  # the other three missing
    with raises_status(Status.BAD_PARAM):
        vp.finalize()


def test_variant_pack_accepts_a_complete_override_payload() -> None:
    vp = VariantPackDescriptor()
    vp.set_attribute(A.VARIANT_PACK_UNIQUE_IDS, T.INT64, [1, 2])
    vp.set_attribute(A.VARIANT_PACK_DATA_POINTERS, T.VOID_PTR, [4096, 8192])
    vp.set_attribute(A.VARIANT_PACK_WORKSPACE, T.VOID_PTR, 0)
    vp.set_attribute(A.VARIANT_PACK_OVERRIDE_UNIQUE_IDS_EXT, T.INT64, [2])
    vp.set_attribute(A.VARIANT_PACK_OVERRIDE_SHAPES_EXT, T.INT64, [2, 3])
    vp.set_attribute(A.VARIANT_PACK_OVERRIDE_STRIDES_EXT, T.INT64, [3, 1])
    vp.set_attribute(A.VARIANT_PACK_OVERRIDE_LENGTHS_EXT, T.INT64, [2])
    vp.finalize()
    assert vp.buffers == [(1, 4096), (2, 8192)]
    assert vp.has_overrides and vp.override_uids == [2] and vp.override_lengths == [2]
    assert vp.get_attribute(A.VARIANT_PACK_OVERRIDE_SHAPES_EXT) == [2, 3]


# -- numbering -------------------------------------------------------------------------------
def test_status_numbering() -> None:
    assert {s.name: int(s) for s in Status} == {
        "SUCCESS": 0,
        "NOT_INITIALIZED": 1,
        "BAD_PARAM": 2,
        "BAD_PARAM_NULL_POINTER": 3,
        "BAD_PARAM_NOT_FINALIZED": 4,
        "BAD_PARAM_OUT_OF_BOUND": 5,
        "BAD_PARAM_SIZE_INSUFFICIENT": 6,
        "BAD_PARAM_STREAM_MISMATCH": 7,
        "NOT_SUPPORTED": 8,
        "INTERNAL_ERROR": 9,
        "ALLOC_FAILED": 10,
        "INTERNAL_ERROR_HOST_ALLOCATION_FAILED": 11,
        "INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED": 12,
        "EXECUTION_FAILED": 13,
        "PLUGIN_ERROR": 14,
    }


def test_attribute_ids() -> None:
    expected = {
        "OPERATIONGRAPH_HANDLE": 600,
        "OPERATIONGRAPH_OPS": 601,
        "OPERATIONGRAPH_ENGINE_GLOBAL_COUNT": 602,
        "OPERATIONGRAPH_IS_DYNAMIC_SHAPE_ENABLED": 603,
        "OPERATIONGRAPH_COMPUTE_DATA_TYPE_EXT": 604,
        "OPERATIONGRAPH_INTERMEDIATE_DATA_TYPE_EXT": 605,
        "OPERATIONGRAPH_IO_DATA_TYPE_EXT": 606,
        "OPERATIONGRAPH_PREFERRED_ENGINE_ID_EXT": 607,
        "OPERATIONGRAPH_NAME_EXT": 608,
        "OPERATIONGRAPH_IS_OVERRIDE_SHAPE_ENABLED_EXT": 609,
        "VARIANT_PACK_UNIQUE_IDS": 700,
        "VARIANT_PACK_DATA_POINTERS": 701,
        "VARIANT_PACK_INTERMEDIATES": 702,
        "VARIANT_PACK_WORKSPACE": 703,
        "VARIANT_PACK_OVERRIDE_UNIQUE_IDS_EXT": 704,
        "VARIANT_PACK_OVERRIDE_SHAPES_EXT": 705,
        "VARIANT_PACK_OVERRIDE_STRIDES_EXT": 706,
        "VARIANT_PACK_OVERRIDE_LENGTHS_EXT": 707,
        "TENSOR_UNIQUE_ID": 1300,
        "TENSOR_NAME_EXT": 1301,
        "TENSOR_DATA_TYPE": 1302,
        "TENSOR_DIMENSIONS": 1303,
        "TENSOR_STRIDES": 1304,
        "TENSOR_IS_VIRTUAL": 1305,
    }
    for name, value in expected.items():
        assert int(AttributeName[name]) == value, name
    assert AttributeName(609) is AttributeName.OPERATIONGRAPH_IS_OVERRIDE_SHAPE_ENABLED_EXT
    # no two names share an id (an alias would silently merge attributes)
    assert len({int(a) for a in AttributeName}) == len(AttributeName.__members__)


def test_backend_error_carries_status_and_message() -> None:
    err = BackendError(Status.PLUGIN_ERROR, "boom")
    assert err.status is Status.PLUGIN_ERROR and err.message == "boom"
    assert "PLUGIN_ERROR" in str(err) and "boom" in str(err)
