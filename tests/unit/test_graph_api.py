"""The user-facing Graph/TensorAttributes contract: chaining, uids, shape inference, validation errors."""

from __future__ import annotations

import flatbuffers
import pytest

from hipdnn import DataType, ErrorCode, Graph, HipdnnError, PointwiseMode, TensorAttributes
from hipdnn.backend.graph_summary import summarize
from hipdnn.frontend.ops import MatmulNode, PointwiseNode, SdpaNode
from hipdnn.wire.Graph import GraphT
from hipdnn.wire.MatmulAttributes import MatmulAttributesT
from hipdnn.wire.Node import NodeT
from hipdnn.wire.NodeAttributes import NodeAttributes
from hipdnn.wire.PointwiseAttributes import PointwiseAttributesT
from hipdnn.wire.TensorAttributes import TensorAttributesT


# -- helpers ---------------------------------------------------------------------------------
def compact(dims: list[int]) -> list[int]:
    strides = [1] * len(dims)
    for i in range(len(dims) - 2, -1, -1):
        strides[i] = strides[i + 1] * dims[i + 1]
    return strides


def bshd(b: int, h: int, s: int, d: int) -> tuple[list[int], list[int]]:
    """Dims in [B, H, S, D] order, laid out in memory as B, S, H, D."""
    return [b, h, s, d], [s * h * d, d, h * d, 1]


def inp(g: Graph, name: str, dims: list[int], **kw) -> TensorAttributes:
    return g.tensor(name, dims, compact(dims), **kw)


def expect_error(code: ErrorCode, *fragments: str):
    """Context manager: a HipdnnError with ``code`` whose message contains every fragment."""

    class _Expect:
        def __enter__(self):
            self.ctx = pytest.raises(HipdnnError)
            self.info = self.ctx.__enter__()
            return self.info

        def __exit__(self, *exc):
            handled = self.ctx.__exit__(*exc)
            err = self.info.value
            assert err.code is code, f"expected {code}, got {err.code}: {err}"
            for f in fragments:
                assert f in str(err), f"{f!r} not in {str(err)!r}"
            return handled

    return _Expect()


def sdpa_graph(q_dims, k_dims, v_dims, name="attn", **kw):
    g = Graph()
    q, k, v = inp(g, "q", q_dims), inp(g, "k", k_dims), inp(g, "v", v_dims)
    o, stats = g.sdpa(q, k, v, name=name, **kw)
    o.set_output(True)
    if stats is not None:
        stats.set_output(True)
    return g, o, stats


def relu_graph(dims=(4, 3)) -> tuple[Graph, TensorAttributes, TensorAttributes]:
    g = Graph()
    x = inp(g, "x", list(dims))
    y = g.pointwise(PointwiseMode.RELU_FWD, x, name="relu")
    y.set_output(True)
    return g, x, y


# -- chaining and uids -----------------------------------------------------------------------
def test_setters_chain_and_return_the_tensor() -> None:
    g = Graph()
    q = g.tensor("q", [1, 2, 3, 4], compact([1, 2, 3, 4]))
    o, stats = g.sdpa(q, inp(g, "k", [1, 2, 5, 4]), inp(g, "v", [1, 2, 5, 4]))
    assert stats is None
    same = o.set_output(True).set_dim([1, 2, 3, 4]).set_stride([24, 12, 4, 1]).set_data_type(DataType.HALF).set_uid(4)
    assert same is o
    assert o.set_name("out") is o and o.set_is_virtual(False) is o
    g.validate()
    assert (o.get_name(), o.get_dim(), o.get_stride(), o.get_data_type(), o.get_uid()) == (
        "out",
        [1, 2, 3, 4],
        [24, 12, 4, 1],
        DataType.HALF,
        4,
    )
    assert not o.is_virtual() and o.has_uid()


def test_set_output_toggles_virtual() -> None:
    t = TensorAttributes("t", is_virtual=True)
    assert t.set_output(True).get_is_virtual() is False
    assert t.set_output(False).get_is_virtual() is True


def test_uids_are_optional_and_auto_assigned_without_collisions() -> None:
    g = Graph()
    a = inp(g, "a", [4, 3], uid=1)
    b = inp(g, "b", [4, 3])
    c = inp(g, "c", [4, 3], uid=3)
    s = g.add(a, b)
    out = g.mul(s, c).set_output(True)
    assert b.get_uid() is None and s.get_uid() is None
    g.validate()
    uids = [t.get_uid() for t in g.tensors]
    assert all(isinstance(u, int) for u in uids)
    assert len(set(uids)) == len(uids)
    assert (a.get_uid(), c.get_uid()) == (1, 3)
    assert b.get_uid() not in (1, 3) and out.get_uid() not in (1, 3)
    assert a.has_uid() and not b.has_uid()  # auto uids are not "set by the user"
    assert g.tensor_by_uid(3) is c


def test_auto_uid_yields_to_an_explicit_uid_set_after_validate() -> None:
    g, x, y = relu_graph()
    g.validate()
    auto = y.get_uid()
    x.set_uid(auto)  # now collides with y's auto uid
    blob = g.serialize()
    assert x.get_uid() == auto and y.get_uid() != auto
    assert sorted(summarize(blob).tensors) == sorted([x.get_uid(), y.get_uid()])
    Graph.deserialize(blob)


def test_serialize_sees_tensor_changes_made_after_validate() -> None:
    g, x, y = relu_graph((4, 3))
    g.validate()
    x.set_dim([5, 3])  # y was inferred as [4, 3]
    with expect_error(ErrorCode.INVALID_VALUE, "relu", "[5, 3]"):
        g.serialize()


def test_uid_must_be_an_int() -> None:
    with expect_error(ErrorCode.INVALID_VALUE, "'t'"):
        TensorAttributes("t").set_uid("3")  # type: ignore[arg-type]
    with expect_error(ErrorCode.INVALID_VALUE):
        TensorAttributes("t").set_uid(True)


def test_dims_must_be_ints() -> None:
    with expect_error(ErrorCode.INVALID_VALUE, "'t'"):
        TensorAttributes("t", dim=[2, 2.5])  # type: ignore[list-item]
    with expect_error(ErrorCode.INVALID_VALUE, "'t'"):
        TensorAttributes("t").set_stride("12")  # type: ignore[arg-type]


# -- sdpa ------------------------------------------------------------------------------------
def test_sdpa_returns_no_stats_by_default() -> None:
    g = Graph()
    o, stats = g.sdpa(inp(g, "q", [1, 1, 2, 4]), inp(g, "k", [1, 1, 2, 4]), inp(g, "v", [1, 1, 2, 4]))
    assert isinstance(o, TensorAttributes) and stats is None
    assert o.get_is_virtual()  # outputs start virtual


@pytest.mark.parametrize(
    "kw, want_stats",
    [
        ({}, False),
        ({"generate_stats": True}, True),
        ({"generate_stats": False}, False),
        ({"is_inference": False}, True),
        ({"is_inference": True}, False),
        ({"generate_stats": True, "is_inference": False}, True),
    ],
)
def test_sdpa_stats_flag(kw, want_stats) -> None:
    g, o, stats = sdpa_graph([1, 1, 2, 4], [1, 1, 2, 4], [1, 1, 2, 4], **kw)
    assert (stats is not None) is want_stats
    g.validate()
    (node,) = g.nodes
    assert isinstance(node, SdpaNode)
    assert len(node.outputs()) == (2 if want_stats else 1)


def test_sdpa_contradictory_stats_flags() -> None:
    g = Graph()
    q, k, v = inp(g, "q", [1, 1, 2, 4]), inp(g, "k", [1, 1, 2, 4]), inp(g, "v", [1, 1, 2, 4])
    with expect_error(ErrorCode.INVALID_VALUE, "attn"):
        g.sdpa(q, k, v, generate_stats=True, is_inference=True, name="attn")


def test_sdpa_shape_inference_bhsd() -> None:
    g, o, stats = sdpa_graph([2, 8, 16, 64], [2, 2, 32, 64], [2, 2, 32, 48], generate_stats=True)
    g.validate()
    assert o.get_dim() == [2, 8, 16, 48]
    assert o.get_stride() == compact([2, 8, 16, 48])
    assert stats.get_dim() == [2, 8, 16, 1]
    assert stats.get_stride() == [8 * 16, 16, 1, 1]
    assert stats.get_data_type() == DataType.FLOAT


def test_sdpa_output_follows_q_axis_order_bshd() -> None:
    g = Graph(io_data_type=DataType.HALF)
    qd, qs = bshd(2, 8, 16, 64)
    kd, ks = bshd(2, 2, 32, 64)
    vd, vs = bshd(2, 2, 32, 48)
    q, k, v = g.tensor("q", qd, qs), g.tensor("k", kd, ks), g.tensor("v", vd, vs)
    o, stats = g.sdpa(q, k, v, is_inference=False)
    o.set_output(True)
    stats.set_output(True)
    g.validate()
    assert o.get_dim() == [2, 8, 16, 48]
    assert o.get_stride() == bshd(2, 8, 16, 48)[1] == [16 * 8 * 48, 48, 8 * 48, 1]
    assert o.get_data_type() == DataType.HALF
    assert stats.get_dim() == [2, 8, 16, 1]
    assert stats.get_data_type() == DataType.FLOAT  # stats stay float whatever the io type


@pytest.mark.parametrize(
    "q, k, v, fragment",
    [
        ([1, 2, 4], [1, 1, 2, 4], [1, 1, 2, 4], "rank 4"),
        ([1, 1, 2, 4], [1, 1, 1, 2, 4], [1, 1, 2, 4], "rank 4"),
        ([1, 1, 2, 4], [1, 1, 2, 4], [1, 2, 4], "rank 4"),
        ([1, 2, 3, 8], [1, 2, 5, 16], [1, 2, 5, 8], "head dim"),
        ([1, 2, 3, 8], [1, 2, 5, 8], [1, 2, 6, 8], "sequence length"),
        ([1, 6, 3, 8], [1, 4, 5, 8], [1, 4, 5, 8], "multiple"),
        ([2, 2, 3, 8], [1, 2, 5, 8], [1, 2, 5, 8], "batch"),
        ([1, 2, 3, 8], [3, 2, 5, 8], [3, 2, 5, 8], "batch"),
        ([1, 4, 3, 8], [1, 2, 5, 8], [1, 1, 5, 8], "heads"),
    ],
)
def test_sdpa_rules(q, k, v, fragment) -> None:
    g, _, _ = sdpa_graph(q, k, v, name="attn")
    with expect_error(ErrorCode.INVALID_VALUE, "attn", fragment):
        g.validate()


def test_sdpa_accepts_grouped_query_attention() -> None:
    g, o, _ = sdpa_graph([1, 6, 3, 8], [1, 3, 5, 8], [1, 3, 5, 8])
    g.validate()
    assert o.get_dim() == [1, 6, 3, 8]


def test_sdpa_user_set_output_dims_must_match() -> None:
    g, o, _ = sdpa_graph([1, 2, 3, 8], [1, 2, 5, 8], [1, 2, 5, 8], name="attn")
    o.set_dim([1, 2, 3, 9]).set_stride(compact([1, 2, 3, 9]))
    with expect_error(ErrorCode.INVALID_VALUE, "attn", "[1, 2, 3, 9]"):
        g.validate()


# -- matmul ----------------------------------------------------------------------------------
def test_matmul_broadcasts_batch_dims() -> None:
    g = Graph()
    a, b = inp(g, "a", [2, 1, 5, 7]), inp(g, "b", [3, 7, 11])
    c = g.matmul(a, b).set_output(True)
    g.validate()
    assert c.get_dim() == [2, 3, 5, 11]
    assert c.get_stride() == compact([2, 3, 5, 11])
    (node,) = g.nodes
    assert isinstance(node, MatmulNode) and node.inputs() == [a, b] and node.outputs() == [c]


def test_matmul_plain_2d_and_data_types() -> None:
    g = Graph(io_data_type=DataType.HALF, intermediate_data_type=DataType.FLOAT)
    a, b, w = inp(g, "a", [5, 7]), inp(g, "b", [7, 3]), inp(g, "w", [3, 2])
    c = g.matmul(a, b)  # virtual intermediate
    d = g.matmul(c, w).set_output(True)
    g.validate()
    assert c.get_dim() == [5, 3] and d.get_dim() == [5, 2]
    assert c.get_data_type() == DataType.FLOAT  # intermediate type
    assert d.get_data_type() == DataType.HALF  # io type
    assert a.get_data_type() == DataType.HALF  # inputs without a type take the io type


@pytest.mark.parametrize(
    "a, b, fragment",
    [
        ([5, 7], [8, 3], "inner dims"),
        ([2, 5, 7], [3, 7, 3], "batch dims"),
        ([4, 2, 5, 7], [3, 7, 3], "batch dims"),
        ([7], [7, 3], "rank"),
    ],
)
def test_matmul_rules(a, b, fragment) -> None:
    g = Graph()
    g.matmul(inp(g, "a", a), inp(g, "b", b), name="mm").set_output(True)
    with expect_error(ErrorCode.INVALID_VALUE, "mm", fragment):
        g.validate()


# -- pointwise -------------------------------------------------------------------------------
def test_pointwise_broadcasting() -> None:
    g = Graph()
    a, b = inp(g, "a", [4, 1, 5]), inp(g, "b", [3, 1])
    out = g.add(a, b).set_output(True)
    g.validate()
    assert out.get_dim() == [4, 3, 5]
    assert out.get_stride() == compact([4, 3, 5])


def test_pointwise_ternary_and_helpers() -> None:
    g = Graph()
    cond, x, y = inp(g, "cond", [2, 3]), inp(g, "x", [2, 3]), inp(g, "y", [1, 3])
    sel = g.pointwise(PointwiseMode.BINARY_SELECT, x, y, cond)
    d = g.div(g.sub(g.mul(sel, x), y), x).set_output(True)
    g.validate()
    assert d.get_dim() == [2, 3]
    modes = [n.mode for n in g.nodes]
    assert modes == [PointwiseMode.BINARY_SELECT, PointwiseMode.MUL, PointwiseMode.SUB, PointwiseMode.DIV]
    assert all(isinstance(n, PointwiseNode) for n in g.nodes)
    assert g.nodes[0].inputs() == [x, y, cond]


@pytest.mark.parametrize(
    "mode, n_inputs, fragment",
    [
        (PointwiseMode.RELU_FWD, 2, "takes 1"),
        (PointwiseMode.ADD, 1, "takes 2"),
        (PointwiseMode.BINARY_SELECT, 2, "takes 3"),
        (PointwiseMode.EXP, 3, "takes 1"),
    ],
)
def test_pointwise_arity(mode, n_inputs, fragment) -> None:
    g = Graph()
    ins = [inp(g, f"in{i}", [2, 3]) for i in range(n_inputs)]
    g.pointwise(mode, *ins, name="pw").set_output(True)
    with expect_error(ErrorCode.INVALID_VALUE, "pw", fragment):
        g.validate()


def test_pointwise_inputs_must_broadcast() -> None:
    g = Graph()
    g.add(inp(g, "a", [4, 3]), inp(g, "b", [4, 2]), name="pw").set_output(True)
    with expect_error(ErrorCode.INVALID_VALUE, "pw", "broadcast"):
        g.validate()


# -- graph-level validation ------------------------------------------------------------------
def test_duplicate_uids() -> None:
    g = Graph()
    g.add(inp(g, "first", [2], uid=7), inp(g, "second", [2], uid=7)).set_output(True)
    with expect_error(ErrorCode.INVALID_VALUE, "7", "first", "second"):
        g.validate()


def test_tensor_from_another_graph() -> None:
    g, other = Graph(), Graph()
    a, foreign = inp(g, "a", [2, 2]), inp(other, "foreign", [2, 2])
    with expect_error(ErrorCode.INVALID_VALUE, "foreign", "another graph", "mm"):
        g.matmul(a, foreign, name="mm")
    with expect_error(ErrorCode.INVALID_VALUE, "foreign", "another graph"):
        g.sdpa(a, a, a, bias=foreign)
    stray = TensorAttributes("stray", [2, 2], [2, 1])
    with expect_error(ErrorCode.INVALID_VALUE, "stray"):
        g.add(a, stray)
    assert g.nodes == []  # nothing half-added


def test_non_tensor_input() -> None:
    g = Graph()
    with expect_error(ErrorCode.INVALID_VALUE, "pw", "in_1"):
        g.pointwise(PointwiseMode.ADD, inp(g, "a", [2]), 3, name="pw")  # type: ignore[arg-type]


def test_orphan_tensor() -> None:
    g, _, _ = relu_graph()
    inp(g, "lonely", [3])
    with expect_error(ErrorCode.INVALID_VALUE, "lonely", "orphan"):
        g.validate()


def test_virtual_tensor_never_read() -> None:
    g, _, stats = sdpa_graph([1, 1, 2, 4], [1, 1, 2, 4], [1, 1, 2, 4], generate_stats=True)
    stats.set_output(False)
    with expect_error(ErrorCode.INVALID_VALUE, stats.get_name(), "never read"):
        g.validate()


def test_virtual_tensor_read_but_never_written() -> None:
    g = Graph()
    ghost = inp(g, "ghost", [2, 2], is_virtual=True)
    g.pointwise(PointwiseMode.ABS, ghost).set_output(True)
    with expect_error(ErrorCode.INVALID_VALUE, "ghost", "no node writes it"):
        g.validate()


def test_output_read_by_earlier_node_is_rejected() -> None:
    g = Graph()
    x = inp(g, "x", [2, 2])
    later = g.tensor("later", is_virtual=True)  # written below, read first
    g.add(x, later, name="early").set_output(True)
    g._add_node(PointwiseNode("writer", DataType.NOT_SET, PointwiseMode.ABS, x, None, None, later))
    with expect_error(ErrorCode.INVALID_VALUE, "early", "later", "topological"):
        g.validate()


def test_two_nodes_writing_one_tensor() -> None:
    g = Graph()
    x = inp(g, "x", [2, 2])
    y = g.pointwise(PointwiseMode.ABS, x, name="one").set_output(True)
    g._add_node(PointwiseNode("two", DataType.NOT_SET, PointwiseMode.NEG, x, None, None, y))
    with expect_error(ErrorCode.INVALID_VALUE, y.get_name(), "one", "two"):
        g.validate()


@pytest.mark.parametrize(
    "dims, strides, code, fragment",
    [
        (None, [3, 1], ErrorCode.ATTRIBUTE_NOT_SET, "no dims"),
        ([4, 3], [1], ErrorCode.INVALID_VALUE, "2 dims but 1 strides"),
        ([4, 3, 2], [6, 2, 1, 1], ErrorCode.INVALID_VALUE, "3 dims but 4 strides"),
        ([4, 0], [1, 1], ErrorCode.INVALID_VALUE, "positive"),
        ([-4, 3], [3, 1], ErrorCode.INVALID_VALUE, "positive"),
        ([4, 3], [3, 0], ErrorCode.INVALID_VALUE, "positive"),
        ([4, 3], [-3, 1], ErrorCode.INVALID_VALUE, "positive"),
        ([1 << 63, 1], [1, 1], ErrorCode.INVALID_VALUE, "int64"),
    ],
)
def test_tensor_shape_checks(dims, strides, code, fragment) -> None:
    g = Graph()
    bad = g.tensor("bad", dims, strides)
    g.pointwise(PointwiseMode.ABS, bad).set_output(True)
    with expect_error(code, "bad", fragment):
        g.validate()


def test_inferred_strides_beyond_int64_are_rejected() -> None:
    g = Graph()
    a = g.tensor("a", [2, 1 << 32, 1 << 32], [1, 1, 1])  # valid itself, compact output is not
    g.pointwise(PointwiseMode.ABS, a, name="pw").set_output(True)
    with expect_error(ErrorCode.INVALID_VALUE, "pw::OUT_0", "int64"):
        g.serialize()


@pytest.mark.parametrize(
    "kw",
    [
        {"attn_scale": 1e300},
        {"diagonal_band_left_bound": 1 << 64, "use_causal_mask": True},
    ],
)
def test_unrepresentable_attributes_raise_hipdnn_error(kw) -> None:
    g, _, _ = sdpa_graph([1, 1, 2, 4], [1, 1, 2, 4], [1, 1, 2, 4], **kw)
    with expect_error(ErrorCode.INVALID_VALUE, "wire format"):
        g.serialize()


def test_user_set_output_rank_mismatch() -> None:
    g, _, y = relu_graph((4, 3))
    y.set_stride([1])
    with expect_error(ErrorCode.INVALID_VALUE, y.get_name()):
        g.validate()


def test_graph_with_no_nodes() -> None:
    g = Graph(name="empty")
    inp(g, "a", [2])
    with expect_error(ErrorCode.INVALID_VALUE, "'empty'", "no nodes"):
        g.validate()
    with expect_error(ErrorCode.INVALID_VALUE, "no nodes"):
        Graph().serialize()


# -- deserialized graphs ---------------------------------------------------------------------
def _wire_tensor(uid: int, name: str, virtual: bool = False) -> TensorAttributesT:
    t = TensorAttributesT()
    t.uid, t.name, t.dataType = uid, name, int(DataType.FLOAT)
    t.dims, t.strides, t.virtual = [4, 3], [3, 1], virtual
    return t


def _wire_relu(name: str, src: int, dst: int) -> NodeT:
    attrs = PointwiseAttributesT()
    attrs.operation = int(PointwiseMode.RELU_FWD)
    attrs.in0TensorUid, attrs.out0TensorUid = src, dst
    n = NodeT()
    n.name, n.attributesType, n.attributes = name, NodeAttributes.PointwiseAttributes, attrs
    return n


def _pack(g: GraphT) -> bytes:
    b = flatbuffers.Builder(256)
    b.Finish(g.Pack(b))
    return bytes(b.Output())


def _chain(nodes: list[NodeT]) -> bytes:
    g = GraphT()
    g.name = "hand made"
    g.tensors = [_wire_tensor(1, "x"), _wire_tensor(2, "mid", virtual=True), _wire_tensor(3, "y")]
    g.nodes = nodes
    return _pack(g)


def test_deserialize_hand_built_graph_in_order() -> None:
    g = Graph.deserialize(_chain([_wire_relu("second", 1, 2), _wire_relu("first", 2, 3)]))
    assert g.name == "hand made"
    assert [n.name for n in g.nodes] == ["second", "first"]
    assert [t.get_uid() for t in g.tensors] == [1, 2, 3]


def test_deserialize_rejects_nodes_out_of_topological_order() -> None:
    # "first" reads uid 2, which "second" (a later node) writes.
    blob = _chain([_wire_relu("first", 2, 3), _wire_relu("second", 1, 2)])
    with expect_error(ErrorCode.INVALID_VALUE, "first", "mid", "topological"):
        Graph.deserialize(blob)


def test_deserialize_rejects_a_cycle() -> None:
    g = GraphT()
    g.tensors = [_wire_tensor(1, "a", virtual=True), _wire_tensor(2, "b", virtual=True)]
    g.nodes = [_wire_relu("n1", 1, 2), _wire_relu("n2", 2, 1)]
    with expect_error(ErrorCode.INVALID_VALUE, "topological"):
        Graph.deserialize(_pack(g))


def test_deserialize_rejects_unknown_uid_and_unknown_node_kind() -> None:
    with expect_error(ErrorCode.INVALID_VALUE, "uid 42"):
        Graph.deserialize(_chain([_wire_relu("a", 1, 2), _wire_relu("b", 42, 3)]))
    g = GraphT()
    g.tensors = [_wire_tensor(1, "x"), _wire_tensor(2, "y")]
    odd = NodeT()
    odd.name, odd.attributesType, odd.attributes = "odd", NodeAttributes.NONE, None
    g.nodes = [odd]
    with expect_error(ErrorCode.UNSUPPORTED_GRAPH_FORMAT, "odd"):
        Graph.deserialize(_pack(g))


def test_deserialize_rejects_duplicate_uids() -> None:
    g = GraphT()
    g.tensors = [_wire_tensor(1, "x"), _wire_tensor(1, "y")]
    mm = MatmulAttributesT()
    mm.aTensorUid, mm.bTensorUid, mm.cTensorUid = 1, 1, 1
    n = NodeT()
    n.name, n.attributesType, n.attributes = "mm", NodeAttributes.MatmulAttributes, mm
    g.nodes = [n]
    with expect_error(ErrorCode.INVALID_VALUE, "uid 1"):
        Graph.deserialize(_pack(g))


# -- override-shape flag ---------------------------------------------------------------------
def test_override_shape_flag_default_setter_and_keyword() -> None:
    g, _, _ = relu_graph()
    assert g.is_override_shape_enabled() is False
    assert g.set_override_shape_enabled(True) is g
    assert g.is_override_shape_enabled() is True
    assert summarize(g.serialize()).is_override_shape_enabled is True
    g.set_override_shape_enabled(False)
    assert g.is_override_shape_enabled() is False
    assert summarize(g.serialize()).is_override_shape_enabled is False
    assert Graph(is_override_shape_enabled=True).is_override_shape_enabled() is True


def test_override_shape_flag_survives_deserialize() -> None:
    g, _, _ = relu_graph()
    g.set_override_shape_enabled(True)
    assert Graph.deserialize(g.serialize()).is_override_shape_enabled() is True
    g.set_override_shape_enabled(False)
    assert Graph.deserialize(g.serialize()).is_override_shape_enabled() is False
