"""Phase 2 (spec section 6): dynamic tensors — wildcard dims and stride order declared at build.
One test group per category of spec section 9.5."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from pathlib import Path

import flatbuffers
import numpy as np
import pytest

import hipdnn
from hipdnn.backend import (
    AttributeName,
    AttributeType,
    BackendError,
    OperationGraphDescriptor,
    Status,
    TensorDescriptor,
)
from hipdnn.wire.Graph import GraphT

F32 = hipdnn.DataType.FLOAT
DYN = hipdnn.DYNAMIC_DIM
DATA = Path(__file__).parent / "data"


def dynamic_sdpa_graph(h: int = 2, d: int = 8, flag: bool = True) -> tuple[hipdnn.Graph, list[hipdnn.TensorAttributes]]:
    """q/k/v/o declared [-1, H, -1, D] with BHSD order (B outermost, D innermost)."""
    g = hipdnn.Graph(name="dyn_sdpa", io_data_type=F32, is_override_shape_enabled=flag)
    order = [3, 2, 1, 0]
    q, k, v = (g.tensor(name=n, dim=[DYN, h, DYN, d], stride=order, data_type=F32).mark_dynamic() for n in "qkv")
    o, _ = g.sdpa(q, k, v, attn_scale=0.5, use_causal_mask=True)
    o.set_output(True)
    return g, [q, k, v, o]


def bhsd(b: int, h: int, s: int, d: int) -> list[int]:
    return [h * s * d, s * d, d, 1]


def strided_view(shape: list[int], stride: list[int], base: np.ndarray) -> np.ndarray:
    """A view of the flat float32 ``base`` stating ``shape`` and element strides ``stride``: what a sized
    value for an overridden tensor must state (issue #26)."""
    assert sum((d - 1) * s for d, s in zip(shape, stride)) + 1 <= base.size
    return np.lib.stride_tricks.as_strided(base, shape=shape, strides=[4 * s for s in stride])


def views(pack: dict, overrides: dict) -> dict:
    """``pack`` (flat arrays) with each overridden tensor's array replaced by a view stating its override."""
    return {
        t: strided_view(overrides[t].shape, overrides[t].stride, a) if t in overrides else a for t, a in pack.items()
    }


# -- round trips of is_dynamic -----------------------------------------------------------------
def test_mark_dynamic_chains_and_round_trips_through_the_wire() -> None:
    g, (q, k, v, o) = dynamic_sdpa_graph()
    assert q.mark_dynamic() is q and q.is_dynamic()
    g2 = hipdnn.Graph.deserialize(g.serialize())
    flags = {t.get_name(): t.is_dynamic() for t in g2.tensors}
    assert flags == {"q": True, "k": True, "v": True, o.get_name(): True}
    assert [t.get_dim() for t in g2.tensors][:3] == [[DYN, 2, DYN, 8]] * 3


def test_is_dynamic_defaults_false_everywhere() -> None:
    g = hipdnn.Graph(name="static", io_data_type=F32)
    a = g.tensor(name="a", dim=[2, 3], stride=[3, 1], data_type=F32)
    b = g.tensor(name="b", dim=[3, 4], stride=[4, 1], data_type=F32)
    g.matmul(a, b).set_output(True)
    wire = GraphT.InitFromPackedBuf(g.serialize(), 0)
    assert all(t.isDynamic is False for t in wire.tensors)
    assert not any(t.is_dynamic() for t in hipdnn.Graph.deserialize(g.serialize()).tensors)


def test_backend_tensor_attribute_round_trip(fake_handle_factory) -> None:  # type: ignore[no-untyped-def]
    """descriptor -> serialize -> deserialize -> read back, for dynamic and (default) static tensors."""
    descs = []
    for uid, dynamic in ((1, True), (2, None)):
        d = TensorDescriptor()
        d.set_attribute(AttributeName.TENSOR_UNIQUE_ID, AttributeType.INT64, uid)
        d.set_attribute(AttributeName.TENSOR_DATA_TYPE, AttributeType.DATA_TYPE, int(F32))
        d.set_attribute(AttributeName.TENSOR_DIMENSIONS, AttributeType.INT64, [DYN, 4] if dynamic else [3, 4])
        d.set_attribute(AttributeName.TENSOR_STRIDES, AttributeType.INT64, [1, 0] if dynamic else [4, 1])
        if dynamic is not None:
            d.set_attribute(AttributeName.TENSOR_IS_DYNAMIC_EXT, AttributeType.BOOLEAN, dynamic)
        d.finalize()
        descs.append(d)
    graph = GraphT()
    graph.name = "tensors only"
    graph.tensors = [d.to_wire() for d in descs]
    builder = flatbuffers.Builder(256)
    builder.Finish(graph.Pack(builder))
    op_graph = OperationGraphDescriptor(bytes(builder.Output()))
    op_graph.set_attribute(
        AttributeName.OPERATIONGRAPH_HANDLE, AttributeType.HANDLE, fake_handle_factory("fake_override_v120").backend
    )
    op_graph.finalize()
    back = {d.get_attribute(AttributeName.TENSOR_UNIQUE_ID): d for d in op_graph.tensor_descriptors()}
    assert back[1].get_attribute(AttributeName.TENSOR_IS_DYNAMIC_EXT) is True
    assert back[1].get_attribute(AttributeName.TENSOR_DIMENSIONS) == [DYN, 4]
    assert back[2].get_attribute(AttributeName.TENSOR_IS_DYNAMIC_EXT) is False
    assert str(op_graph.required_api_version) == "1.2.0"


def test_backend_tensor_descriptor_rules() -> None:
    d = TensorDescriptor()
    d.set_attribute(AttributeName.TENSOR_UNIQUE_ID, AttributeType.INT64, 1)
    d.set_attribute(AttributeName.TENSOR_DATA_TYPE, AttributeType.DATA_TYPE, int(F32))
    d.set_attribute(AttributeName.TENSOR_DIMENSIONS, AttributeType.INT64, [DYN, 4])
    d.set_attribute(AttributeName.TENSOR_STRIDES, AttributeType.INT64, [4, 1])
    with pytest.raises(BackendError) as err:  # static with -1
        d.finalize()
    assert err.value.status == Status.BAD_PARAM
    d.set_attribute(AttributeName.TENSOR_IS_DYNAMIC_EXT, AttributeType.BOOLEAN, True)
    with pytest.raises(BackendError, match="axis order"):  # dynamic strides must be an order
        d.finalize()


# -- authoring rules ---------------------------------------------------------------------------
def test_dynamic_tensor_requires_the_override_flag() -> None:
    g, _ = dynamic_sdpa_graph(flag=False)
    with pytest.raises(hipdnn.HipdnnError) as err:
        g.validate()
    assert err.value.code == hipdnn.ErrorCode.INVALID_VALUE
    assert "'q'" in err.value.message and "set_override_shape_enabled" in err.value.message


def test_static_tensor_with_wildcard_is_rejected_at_build() -> None:
    g = hipdnn.Graph(name="bad", io_data_type=F32, is_override_shape_enabled=True)
    a = g.tensor(name="a_static", dim=[DYN, 3], stride=[3, 1], data_type=F32)
    b = g.tensor(name="b", dim=[3, 4], stride=[4, 1], data_type=F32)
    g.matmul(a, b).set_output(True)
    with pytest.raises(hipdnn.HipdnnError) as err:
        g.validate()
    assert err.value.code == hipdnn.ErrorCode.INVALID_VALUE and "a_static" in err.value.message
    assert "mark_dynamic" in err.value.message


@pytest.mark.parametrize("strides", [[3, 2, 1, 1], [4, 3, 2, 1], [0, 1, 2, 4]])
def test_dynamic_strides_must_be_an_axis_order(strides: list[int]) -> None:
    g = hipdnn.Graph(name="bad_order", io_data_type=F32, is_override_shape_enabled=True)
    x = g.tensor(name="x_dyn", dim=[DYN, 2, 3, 4], stride=strides, data_type=F32).mark_dynamic()
    g.pointwise(hipdnn.PointwiseMode.RELU_FWD, x).set_output(True)
    with pytest.raises(hipdnn.HipdnnError) as err:
        g.validate()
    assert "x_dyn" in err.value.message and "axis order" in err.value.message


# -- validation relaxation ---------------------------------------------------------------------
def test_sdpa_dynamic_operand_bypasses_value_checks_but_concrete_bad_value_fails() -> None:
    g = hipdnn.Graph(name="relaxed", io_data_type=F32, is_override_shape_enabled=True)
    q = g.tensor(name="q", dim=[DYN, 2, DYN, 8], stride=[3, 2, 1, 0], data_type=F32).mark_dynamic()
    k = g.tensor(name="k", dim=[1, 2, 16, 4], stride=[128, 64, 4, 1], data_type=F32)  # head dim 4 != 8
    v = g.tensor(name="v", dim=[1, 2, 16, 4], stride=[128, 64, 4, 1], data_type=F32)
    o, _ = g.sdpa(q, k, v)
    o.set_output(True)
    g.validate()  # q is dynamic: the q/k head-dim check is deferred to execute
    assert o.is_dynamic() and o.get_dim() == [DYN, 2, DYN, 4]

    g2 = hipdnn.Graph(name="strict", io_data_type=F32, is_override_shape_enabled=True)
    q2 = g2.tensor(name="q", dim=[1, 2, 16, 8], stride=[256, 128, 8, 1], data_type=F32)
    k2 = g2.tensor(name="k", dim=[1, 2, 16, 4], stride=[128, 64, 4, 1], data_type=F32)
    v2 = g2.tensor(name="v", dim=[1, 2, 16, 4], stride=[128, 64, 4, 1], data_type=F32)
    g2.sdpa(q2, k2, v2)[0].set_output(True)
    with pytest.raises(hipdnn.HipdnnError, match="head dim"):
        g2.validate()


def test_rank_is_still_enforced_for_dynamic_operands() -> None:
    g = hipdnn.Graph(name="rank", io_data_type=F32, is_override_shape_enabled=True)
    q = g.tensor(name="q3", dim=[DYN, 2, 8], stride=[2, 1, 0], data_type=F32).mark_dynamic()
    k = g.tensor(name="k", dim=[1, 2, 16, 8], stride=[256, 128, 8, 1], data_type=F32)
    v = g.tensor(name="v", dim=[1, 2, 16, 8], stride=[256, 128, 8, 1], data_type=F32)
    g.sdpa(q, k, v)[0].set_output(True)
    with pytest.raises(hipdnn.HipdnnError, match="rank 4"):
        g.validate()


def test_matmul_and_pointwise_relaxation_and_wildcard_propagation() -> None:
    g = hipdnn.Graph(name="mm", io_data_type=F32, is_override_shape_enabled=True)
    a = g.tensor(name="a", dim=[DYN, DYN, 16], stride=[2, 1, 0], data_type=F32).mark_dynamic()
    b = g.tensor(name="b", dim=[1, 32, 8], stride=[256, 8, 1], data_type=F32)  # K 32 != 16: deferred
    c = g.matmul(a, b)
    bias = g.tensor(name="bias", dim=[DYN, 1, 5], stride=[2, 1, 0], data_type=F32).mark_dynamic()  # 5 vs 8
    y = g.pointwise(hipdnn.PointwiseMode.ADD, c, bias)
    y.set_output(True)
    g.validate()
    assert c.get_dim() == [DYN, DYN, 8] and c.is_dynamic() and c.get_is_virtual()
    assert y.is_dynamic() and y.get_stride() == [2, 1, 0]


# -- per-graph plugin version filter -----------------------------------------------------------
def test_dynamic_graphs_need_api_1_2_0(fakes, fake_handle_factory) -> None:  # type: ignore[no-untyped-def]
    h = fake_handle_factory("fake_override_v110", "fake_override_v120")
    g, _ = dynamic_sdpa_graph()
    g.build(h)
    assert g.get_engine_id() == 9008
    assert "api 1.1.0 < required 1.2.0" in g.plugin_report()
    assert fakes["fake_override_v110"].calls("GetApplicableEngineIds") == []

    # the 1.1.0 plugin still serves Phase 1 graphs
    g1 = hipdnn.Graph(name="phase1", io_data_type=F32, is_override_shape_enabled=True, preferred_engine_id=9001)
    x = g1.tensor(name="x", dim=[4, 4], stride=[4, 1], data_type=F32)
    g1.pointwise(hipdnn.PointwiseMode.RELU_FWD, x).set_output(True)
    g1.build(h)
    assert g1.get_engine_id() == 9001

    only_old = fake_handle_factory("fake_override_v110")
    g2, _ = dynamic_sdpa_graph()
    with pytest.raises(hipdnn.HipdnnError) as err:
        g2.build(only_old)
    assert err.value.code == hipdnn.ErrorCode.GRAPH_NOT_SUPPORTED and "required 1.2.0" in err.value.message


# -- execute-time rules for dynamic tensors ----------------------------------------------------
def test_dynamic_tensors_need_overrides_and_wildcards_are_unbounded(fakes, fake_handle_factory) -> None:  # type: ignore[no-untyped-def]
    h = fake_handle_factory("fake_override_v120")
    g, t = dynamic_sdpa_graph()
    g.build(h)
    b, s = 3, 5000  # far beyond anything declared: wildcards have no upper bound
    dims = [b, 2, s, 8]
    arrays = [np.zeros(dims, np.float32) for _ in t]
    vp = dict(zip(t, arrays))
    with pytest.raises(hipdnn.HipdnnError, match="needs an override"):
        g.execute(h, vp)
    g.execute(h, vp, overrides={x: hipdnn.OverrideEntry(dims, bhsd(*dims)) for x in t})
    rec = fakes["fake_override_v120"].calls("ExecuteOpGraphWithOverrides")[-1]
    assert rec["override_shapes"] == [dims] * 4
    # concrete dims keep the max-shape rule
    too_many_heads = [b, 3, s, 8]
    with pytest.raises(hipdnn.HipdnnError, match="rule 7"):
        g.execute(h, vp, overrides={x: hipdnn.OverrideEntry(too_many_heads, bhsd(*too_many_heads)) for x in t})


def test_stride_order_accepts_consistent_layouts_and_rejects_others(fakes, fake_handle_factory) -> None:  # type: ignore[no-untyped-def]
    """Declared order {3, 2, 1, 0} (B outermost): BHSD and padded BHSD strides pass; BSHD (S outside H)
    contradicts the order and is refused."""
    h = fake_handle_factory("fake_override_v120")
    g, t = dynamic_sdpa_graph()
    g.build(h)
    dims = [2, 2, 7, 8]
    arrays = [np.zeros(4096, np.float32) for _ in t]
    vp = dict(zip(t, arrays))
    for strides in (bhsd(*dims), [2 * 7 * 16, 7 * 16, 16, 1]):
        ov = {x: hipdnn.OverrideEntry(dims, strides) for x in t}
        g.execute(h, views(vp, ov), overrides=ov)
    bshd = [7 * 2 * 8, 8, 2 * 8, 1]
    ov = {x: hipdnn.OverrideEntry(dims, bshd) for x in t}
    with pytest.raises(hipdnn.HipdnnError) as err:
        g.execute(h, views(vp, ov), overrides=ov)
    assert "rule 8" in err.value.message


def test_static_strides_that_look_like_an_axis_order_are_element_strides(
    fakes,
    fake_handle_factory,
) -> None:
    """A static tensor whose strides happen to be small distinct numbers is still read as element
    strides: rule 8 compares element strides."""
    h = fake_handle_factory("fake_override_v120")
    g = hipdnn.Graph(name="static_lookalike", io_data_type=F32, is_override_shape_enabled=True)
    x = g.tensor(name="x", dim=[2, 3], stride=[1, 2], data_type=F32)  # column-major: looks like an order
    y = g.pointwise(hipdnn.PointwiseMode.RELU_FWD, x)
    y.set_output(True).set_stride([1, 2])
    g.build(h)
    pack = {x: np.zeros(6, np.float32), y: np.zeros(6, np.float32)}
    ov = {x: hipdnn.OverrideEntry([2, 2], [1, 2]), y: hipdnn.OverrideEntry([2, 2], [1, 2])}
    g.execute(h, views(pack, ov), overrides=ov)
    ov = {x: hipdnn.OverrideEntry([2, 2], [2, 1]), y: hipdnn.OverrideEntry([2, 2], [1, 2])}
    with pytest.raises(hipdnn.HipdnnError, match="rule 8"):
        g.execute(h, views(pack, ov), overrides=ov)


def test_broadcast_of_dynamic_operands_is_checked_at_execute(fakes, fake_handle_factory) -> None:  # type: ignore[no-untyped-def]
    h = fake_handle_factory("fake_override_v120")
    g = hipdnn.Graph(name="bcast", io_data_type=F32, is_override_shape_enabled=True)
    x = g.tensor(name="x", dim=[DYN, 8], stride=[1, 0], data_type=F32).mark_dynamic()
    bias = g.tensor(name="bias", dim=[DYN, 8], stride=[1, 0], data_type=F32).mark_dynamic()
    y = g.pointwise(hipdnn.PointwiseMode.ADD, x, bias)
    y.set_output(True)
    g.build(h)
    arrays = {t: np.zeros(64, np.float32) for t in (x, bias, y)}
    ok = {
        x: hipdnn.OverrideEntry([4, 8], [8, 1]),
        bias: hipdnn.OverrideEntry([1, 8], [8, 1]),
        y: hipdnn.OverrideEntry([4, 8], [8, 1]),
    }
    g.execute(h, views(arrays, ok), overrides=ok)
    bad = dict(ok)
    bad[bias] = hipdnn.OverrideEntry([3, 8], [8, 1])  # 3 vs 4: neither equal nor 1
    with pytest.raises(hipdnn.HipdnnError) as err:
        g.execute(h, views(arrays, bad), overrides=bad)
    assert err.value.code == hipdnn.ErrorCode.INVALID_VALUE and "broadcast" in err.value.message


# -- cross-version compatibility ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("golden", "flag"), [("golden_graph_v0_pre_overrides.bin", False), ("golden_graph_v1_overrides.bin", True)]
)
def test_old_buffers_read_with_new_fields_at_defaults(golden: str, flag: bool) -> None:
    g = hipdnn.Graph.deserialize((DATA / golden).read_bytes())
    assert g.is_override_shape_enabled() is flag
    assert [t.get_name() for t in g.tensors] == ["q", "k", "v", "o", "a", "b", "c"]
    assert not any(t.is_dynamic() for t in g.tensors)
    assert [n.name for n in g.nodes] == ["attention", "mm"]


def _old_readers(tmp_path: Path, schema_dir: str, package: str) -> object:
    flatc = shutil.which("flatc")
    if flatc is None:
        pytest.skip("flatc not installed")
    fbs = sorted(str(p) for p in (DATA / schema_dir).glob("*.fbs"))
    subprocess.run([flatc, "--python", "-o", str(tmp_path), *fbs], check=True)
    sys.path.insert(0, str(tmp_path))
    try:
        return importlib.import_module(f"{package}.wire.Graph")
    finally:
        sys.path.remove(str(tmp_path))


@pytest.mark.parametrize(
    ("schema_dir", "package"),
    [("schema_v0_pre_overrides", "golden_v0_pre_overrides"), ("schema_v1_overrides", "golden_v1_overrides")],
)
def test_new_buffers_are_readable_by_old_readers(tmp_path: Path, schema_dir: str, package: str) -> None:
    g = hipdnn.Graph(name="new writer", io_data_type=F32, is_override_shape_enabled=True)
    q = g.tensor(name="q", dim=[DYN, 2, DYN, 8], stride=[3, 2, 1, 0], data_type=F32).mark_dynamic()
    k = g.tensor(name="k", dim=[1, 2, 16, 8], stride=[256, 128, 8, 1], data_type=F32)
    v = g.tensor(name="v", dim=[1, 2, 16, 8], stride=[256, 128, 8, 1], data_type=F32)
    g.sdpa(q, k, v, attn_scale=0.5)[0].set_output(True)
    blob = g.serialize()
    module = _old_readers(tmp_path, schema_dir, package)
    old = module.Graph.GetRootAs(blob, 0)  # type: ignore[attr-defined]
    assert old.Name() == b"new writer"
    names = [old.Tensors(i).Name() for i in range(old.TensorsLength())]
    assert names[:3] == [b"q", b"k", b"v"]
    assert [old.Tensors(1).Dims(j) for j in range(4)] == [1, 2, 16, 8]
    assert old.NodesLength() == 1 and old.Nodes(0).AttributesType() == 12
