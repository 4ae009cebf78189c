"""The conveniences of cudnn-frontend's Python API: tensor_like, default strides, pointwise shortcuts,
read-only tensor properties, OverrideEntry without strides."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import hipdnn
from hipdnn import DataType, ErrorCode, Graph, HipdnnError, OverrideEntry, PointwiseMode
from hipdnn.frontend.ops import PointwiseNode
from hipdnn.frontend.shortcuts import POINTWISE_SHORTCUTS, BinaryShortcut, UnaryShortcut

F32 = DataType.FLOAT


# -- tensor_like -----------------------------------------------------------------------------
def test_tensor_like_reads_a_numpy_array() -> None:
    g = Graph()
    t = g.tensor_like(np.zeros((2, 3, 4), np.float32), name="x")
    assert (t.get_name(), t.get_dim(), t.get_stride(), t.get_data_type()) == ("x", [2, 3, 4], [12, 4, 1], F32)
    view = g.tensor_like(np.zeros((4, 6), np.float16)[:, ::2].T, name="v")  # strided and transposed
    assert (view.get_dim(), view.get_stride(), view.get_data_type()) == ([3, 4], [2, 6], DataType.HALF)


def test_tensor_like_reads_array_interfaces_and_dlpack() -> None:
    g = Graph()
    base = np.zeros((5, 2), np.float32)
    iface = SimpleNamespace(__array_interface__=base.__array_interface__)
    assert g.tensor_like(iface).get_dim() == [5, 2]
    cuda = SimpleNamespace(
        __cuda_array_interface__={
            "data": (0x1000, False),
            "shape": (3, 4),
            "strides": (32, 4),
            "typestr": "<f4",
            "version": 3,
        }
    )
    t = g.tensor_like(cuda)
    assert (t.get_dim(), t.get_stride(), t.get_data_type()) == ([3, 4], [8, 1], F32)

    class DL:  # numpy's own DLPack export, behind an object that is nothing else
        def __init__(self, a: np.ndarray[Any, Any]) -> None:
            self.a = a

        def __dlpack__(self, **kw: Any) -> object:
            return self.a.__dlpack__(**kw)

        def __dlpack_device__(self) -> tuple[int, int]:
            return self.a.__dlpack_device__()

    assert g.tensor_like(DL(np.zeros((2, 7), np.int32))).get_data_type() == DataType.INT32


def test_tensor_like_reads_torch_tensors() -> None:
    torch = pytest.importorskip("torch")
    t = Graph().tensor_like(torch.zeros(2, 8, dtype=torch.bfloat16).t())
    assert (t.get_dim(), t.get_stride(), t.get_data_type()) == ([8, 2], [1, 8], DataType.BFLOAT16)


def test_tensor_like_copies_a_tensor_of_any_graph() -> None:
    other = Graph()
    src = other.tensor(name="q", dim=[1, 2, 8, 4], stride=[64, 4, 8, 1], data_type=DataType.BFLOAT16)
    g = Graph()
    t = g.tensor_like(src)
    assert (t.get_name(), t.get_dim(), t.get_stride(), t.get_data_type()) == (
        "q",
        [1, 2, 8, 4],
        [64, 4, 8, 1],
        DataType.BFLOAT16,
    )
    assert g.tensor_like(src, name="k", data_type=F32).get_data_type() == F32


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("text", "str is not a buffer"),
        (np.zeros(3, np.complex64), "'complex64' has no hipdnn DataType"),
        (np.float32(1.0), "numpy scalar"),
    ],
)
def test_tensor_like_refuses_what_it_cannot_read(value: object, fragment: str) -> None:
    with pytest.raises(HipdnnError) as err:
        Graph().tensor_like(value, name="bad")
    assert err.value.code == ErrorCode.INVALID_VALUE and fragment in err.value.message
    assert "tensor_like('bad')" in err.value.message


def test_tensor_like_takes_a_data_type_for_unknown_element_types() -> None:
    t = Graph().tensor_like(np.zeros(3, np.complex64), data_type=DataType.INT64)
    assert t.get_data_type() == DataType.INT64


# -- default strides -------------------------------------------------------------------------
def test_strides_default_to_compact_row_major() -> None:
    g = Graph()
    x = g.tensor(name="x", dim=[2, 3, 4], data_type=F32)
    assert x.get_stride() == [12, 4, 1] and not x.has_stride()
    x.set_dim([5, 6])  # strides never given follow the dims
    assert x.get_stride() == [6, 1]
    x.set_stride([1, 5])
    x.set_dim([5, 6])
    assert x.get_stride() == [1, 5]  # given strides stay


def test_an_output_with_dims_only_still_follows_its_input_order() -> None:
    g = Graph()
    dims = [1, 2, 8, 4]
    q, k, v = (g.tensor(name=n, dim=dims, stride=[64, 4, 8, 1], data_type=F32) for n in "qkv")  # BSHD memory
    o, _ = g.sdpa(q, k, v)
    o.set_output(True).set_dim(dims)
    assert o.get_stride() == [64, 32, 4, 1]  # before inference: the compact default
    g.validate()
    assert o.get_stride() == [64, 4, 8, 1]  # inferred in q's axis order, as before defaults existed


def test_a_dynamic_tensor_without_strides_gets_the_row_major_axis_order() -> None:
    t = Graph().tensor(name="d", dim=[-1, 8, -1, 64], data_type=F32).mark_dynamic()
    assert t.get_stride() == [3, 2, 1, 0]


def test_a_graph_without_strides_runs() -> None:
    with hipdnn.Handle(device="cpu") as h:
        g = Graph(name="nostrides", io_data_type=F32)
        a = g.tensor(name="a", dim=[3, 4], data_type=F32)
        b = g.tensor(name="b", dim=[3, 4], data_type=F32)
        out = g.relu(g.sub(a, b)).set_output(True)
        g.build(h)
        av, bv = np.arange(12, dtype=np.float32).reshape(3, 4), np.full((3, 4), 5, np.float32)
        ov = np.empty((3, 4), np.float32)
        g.execute(h, {a: av, b: bv, out: ov}, np.empty(g.get_workspace_size(), np.uint8))
        assert (ov == np.maximum(av - bv, 0)).all()


# -- pointwise shortcuts ---------------------------------------------------------------------
def test_every_shortcut_in_the_table_is_a_graph_method_and_back() -> None:
    on_graph = {k for k, v in vars(Graph).items() if isinstance(v, (UnaryShortcut, BinaryShortcut))}
    assert on_graph == set(POINTWISE_SHORTCUTS)
    for key, (mode, _) in POINTWISE_SHORTCUTS.items():
        assert f"PointwiseMode.{mode.name}" in (getattr(Graph, key).__doc__ or "")


@pytest.mark.parametrize("key", sorted(POINTWISE_SHORTCUTS))
def test_each_shortcut_builds_its_pointwise_node(key: str) -> None:
    g = Graph()
    x = g.tensor(name="x", dim=[2, 3], data_type=F32)
    y = g.tensor(name="y", dim=[2, 3], data_type=F32)
    method = getattr(g, key)
    out = method(x, name="n") if isinstance(vars(Graph)[key], UnaryShortcut) else method(y, x, name="n")
    node = g._nodes[-1]
    assert isinstance(node, PointwiseNode)
    assert node.mode == POINTWISE_SHORTCUTS[key][0] and node.name == "n" and node.outputs() == [out]
    assert node.inputs() == ([x] if isinstance(vars(Graph)[key], UnaryShortcut) else [y, x])


def test_shortcuts_keep_the_old_positional_name_and_pass_compute_type() -> None:
    g = Graph()
    a = g.tensor(name="a", dim=[2], data_type=F32)
    g.add(a, a, "sum")
    g.relu(a, compute_data_type=F32)
    assert g._nodes[0].name == "sum" and g._nodes[1].compute_data_type == F32


def test_scale_multiplies_by_a_tensor() -> None:
    g = Graph()
    x = g.tensor(name="x", dim=[2, 3], data_type=F32)
    s = g.tensor(name="s", dim=[1, 1], data_type=F32)
    g.scale(x, s)
    node = g._nodes[-1]
    assert isinstance(node, PointwiseNode) and node.mode == PointwiseMode.MUL


def test_unknown_pointwise_mode_is_a_hipdnn_error() -> None:
    g = Graph()
    x = g.tensor(name="x", dim=[2], data_type=F32)
    with pytest.raises(HipdnnError) as err:
        g.pointwise(999, x)  # type: ignore[arg-type]
    assert err.value.code == ErrorCode.INVALID_VALUE and "not a PointwiseMode" in err.value.message


# -- read-only properties --------------------------------------------------------------------
def test_tensor_properties_mirror_the_getters_and_refuse_assignment() -> None:
    g = Graph()
    t = g.tensor(name="q", dim=[2, 4], data_type=DataType.HALF, uid=7)
    assert (t.name, t.dim, t.stride, t.data_type, t.uid) == ("q", [2, 4], [4, 1], DataType.HALF, 7)
    t.dim.append(99)  # a copy: the tensor is unchanged
    assert t.dim == [2, 4]
    for attribute, value in (("dim", [1]), ("stride", [1]), ("data_type", F32), ("uid", 3), ("name", "k")):
        with pytest.raises(AttributeError, match=f"set_{attribute}"):
            setattr(t, attribute, value)


# -- OverrideEntry ---------------------------------------------------------------------------
def test_override_entry_without_stride_is_compact() -> None:
    assert OverrideEntry(shape=[1, 2, 3, 4]).stride == [24, 12, 4, 1]
    assert OverrideEntry(shape=np.array([2, 3])).stride == [3, 1]  # type: ignore[arg-type]
    assert OverrideEntry(shape=[2, 3], stride=[1, 2]).stride == [1, 2]
    assert OverrideEntry(shape=[2, "x"]).stride == []  # type: ignore[list-item]  # left to execute, which names the tensor


def override_graph(h: hipdnn.Handle) -> tuple[Graph, Any, Any]:
    g = Graph(name="ov", io_data_type=F32, is_override_shape_enabled=True)
    x = g.tensor(name="x", dim=[4, 8], data_type=F32)
    y = g.relu(x).set_output(True)
    g.build(h)
    return g, x, y


def test_execute_takes_override_entries_without_strides() -> None:
    with hipdnn.Handle(device="cpu") as h:
        g, x, y = override_graph(h)
        xv = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
        yv = np.empty((2, 3), np.float32)
        g.execute(h, {x: xv, y: yv}, None, {x: OverrideEntry(shape=[2, 3]), y: OverrideEntry(shape=[2, 3])})
        assert (yv == np.maximum(xv, 0)).all()


def test_an_override_stride_of_the_wrong_length_names_the_tensor() -> None:
    with hipdnn.Handle(device="cpu") as h:
        g, x, y = override_graph(h)
        xv, yv = np.zeros((2, 3), np.float32), np.zeros((2, 3), np.float32)
        with pytest.raises(HipdnnError) as err:
            g.execute(h, {x: xv, y: yv}, None, {x: OverrideEntry([2, 3], [1]), y: OverrideEntry([2, 3])})
        assert err.value.code == ErrorCode.INVALID_VALUE
        assert "rule 4" in err.value.message and "tensor 'x'" in err.value.message
