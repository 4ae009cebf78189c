"""Variant-pack values on their way to a plugin: which values are accepted, which are refused (and
how), and that the pointer reaching the plugin is the buffer's own data pointer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from hipdnn import DataType, ErrorCode, Graph, Handle, HipdnnError, PointwiseMode, TensorAttributes

FAKE = "fake_plain_v100"


@pytest.fixture(scope="module")
def _fake_control(fake_plugin_paths):
    # One control for the one fake used here (the shared ``fakes`` fixture loads all nine per test).
    from tests.conftest import FakeControl

    return FakeControl(fake_plugin_paths[FAKE])


@pytest.fixture
def fake(_fake_control):
    _fake_control.reset()
    yield _fake_control
    _fake_control.reset()


@dataclass
class Setup:
    handle: Handle
    graph: Graph
    a: TensorAttributes
    b: TensorAttributes
    mid: TensorAttributes  # virtual
    out: TensorAttributes
    fake: Any

    def arrays(self) -> dict[TensorAttributes, np.ndarray]:
        return {t: np.zeros((4, 3), np.float32) for t in (self.a, self.b, self.out)}

    def executes(self) -> list[dict[str, Any]]:
        return self.fake.calls("ExecuteOpGraph")

    def buffers(self) -> dict[int, int]:
        """uid -> pointer of the last execute the plugin saw."""
        return {uid: ptr for uid, ptr in self.executes()[-1]["buffers"]}


def _graph() -> tuple[Graph, TensorAttributes, TensorAttributes, TensorAttributes, TensorAttributes]:
    g = Graph(name="vp")
    a = g.tensor("a", [4, 3], [3, 1], DataType.FLOAT)
    b = g.tensor("b", [4, 3], [3, 1], DataType.FLOAT, uid=20)
    mid = g.add(a, b, name="add")
    mid.set_name("mid")
    out = g.pointwise(PointwiseMode.RELU_FWD, mid, name="relu").set_output(True).set_name("out")
    return g, a, b, mid, out


@pytest.fixture
def setup(fake, fake_handle_factory) -> Setup:
    handle = fake_handle_factory(FAKE)
    g, a, b, mid, out = _graph()
    g.build(handle)
    assert g.get_engine_id() == 9002
    return Setup(handle, g, a, b, mid, out, fake)


def refused(s: Setup, pack: Any, code: ErrorCode, *fragments: str, workspace: Any = None) -> HipdnnError:
    """execute must raise HipdnnError(code) naming ``fragments`` and never reach the plugin."""
    before = len(s.executes())
    with pytest.raises(HipdnnError) as info:
        s.graph.execute(s.handle, pack, workspace)
    assert info.value.code is code, str(info.value)
    for f in fragments:
        assert f in str(info.value), f"{f!r} not in {info.value}"
    assert len(s.executes()) == before, "the plugin was called despite the error"
    return info.value


# -- accepted values -------------------------------------------------------------------------
def test_numpy_arrays_reach_the_plugin_by_pointer(setup: Setup) -> None:
    arrays = setup.arrays()
    setup.graph.execute(setup.handle, arrays)
    call = setup.executes()[-1]
    assert call["status"] == 0
    assert setup.buffers() == {t.get_uid(): arr.ctypes.data for t, arr in arrays.items()}
    assert setup.mid.get_uid() not in setup.buffers()
    assert call["workspace"] == 0


def test_keys_may_be_uids_or_tensors(setup: Setup) -> None:
    arrays = setup.arrays()
    pack = {setup.a: arrays[setup.a], 20: arrays[setup.b], setup.out.get_uid(): arrays[setup.out]}
    setup.graph.execute(setup.handle, pack)
    assert setup.buffers()[20] == arrays[setup.b].ctypes.data
    assert setup.buffers()[setup.out.get_uid()] == arrays[setup.out].ctypes.data


def test_int_pointers_pass_through(setup: Setup) -> None:
    arrays = setup.arrays()
    pack = {t: arr.ctypes.data for t, arr in arrays.items()}
    pack[setup.b] = np.intp(arrays[setup.b].ctypes.data)  # numpy integers count as pointers too
    setup.graph.execute(setup.handle, pack)
    assert setup.buffers() == {t.get_uid(): arr.ctypes.data for t, arr in arrays.items()}


class ArrayInterfaceOnly:
    def __init__(self, arr: np.ndarray) -> None:
        self._arr = arr
        self.__array_interface__ = dict(arr.__array_interface__)


class DLPackOnly:
    def __init__(self, arr: np.ndarray) -> None:
        self._arr = arr

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        return self._arr.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self) -> Any:
        return self._arr.__dlpack_device__()


@pytest.mark.parametrize("wrap", [ArrayInterfaceOnly, DLPackOnly], ids=["array_interface", "dlpack"])
def test_protocol_objects(setup: Setup, wrap) -> None:
    arrays = setup.arrays()
    pack = {t: wrap(arr) for t, arr in arrays.items()}
    assert not any(isinstance(v, np.ndarray) for v in pack.values())
    setup.graph.execute(setup.handle, pack)
    assert setup.buffers() == {t.get_uid(): arr.ctypes.data for t, arr in arrays.items()}


def test_protocol_objects_are_still_checked(setup: Setup) -> None:
    arrays = setup.arrays()
    arrays[setup.a] = np.zeros((4, 3), np.float64)
    refused(setup, {t: DLPackOnly(x) for t, x in arrays.items()}, ErrorCode.INVALID_VALUE, "'a'", "float64")
    arrays[setup.a] = np.zeros((3, 4), np.float32)
    refused(setup, {t: ArrayInterfaceOnly(x) for t, x in arrays.items()}, ErrorCode.INVALID_VALUE, "'a'")


def test_a_view_with_matching_layout_passes_with_its_own_pointer(setup: Setup) -> None:
    arrays = setup.arrays()
    big = np.zeros((5, 3), np.float32)
    arrays[setup.b] = big[1:]  # offset view, still [4, 3] with strides [3, 1]
    setup.graph.execute(setup.handle, arrays)
    assert setup.buffers()[20] == big.ctypes.data + 3 * 4


# -- refused values --------------------------------------------------------------------------
def test_unknown_uid(setup: Setup) -> None:
    pack: dict[Any, Any] = dict(setup.arrays())
    pack[999] = np.zeros((4, 3), np.float32)
    refused(setup, pack, ErrorCode.INVALID_VARIANT_PACK, "999")


def test_tensor_of_another_graph(setup: Setup) -> None:
    other, oa, *_ = _graph()
    other.validate()
    pack: dict[Any, Any] = dict(setup.arrays())
    pack[oa] = np.zeros((4, 3), np.float32)
    refused(setup, pack, ErrorCode.INVALID_VARIANT_PACK, "'a'", "not a tensor of this graph")


def test_missing_pointer_for_a_non_virtual_tensor(setup: Setup) -> None:
    pack = setup.arrays()
    del pack[setup.b]
    refused(setup, pack, ErrorCode.INVALID_VARIANT_PACK, "'b'", "uid 20")


def test_pointer_for_a_virtual_tensor(setup: Setup) -> None:
    pack = setup.arrays()
    pack[setup.mid] = np.zeros((4, 3), np.float32)
    refused(setup, pack, ErrorCode.INVALID_VARIANT_PACK, "'mid'", "virtual")


def test_same_tensor_twice(setup: Setup) -> None:
    pack: dict[Any, Any] = dict(setup.arrays())
    pack[20] = np.zeros((4, 3), np.float32)  # and pack[setup.b]
    refused(setup, pack, ErrorCode.INVALID_VARIANT_PACK, "20")


@pytest.mark.parametrize(
    "make, fragment",
    [
        (lambda: np.zeros((4, 3), np.float64), "float64"),
        (lambda: np.zeros((4, 3), np.float16), "float16"),
        (lambda: np.zeros((4, 3), np.int32), "int32"),
        (lambda: np.zeros((3, 4), np.float32), "shape"),
        (lambda: np.zeros((12,), np.float32), "shape"),
        (lambda: np.zeros((4, 3, 1), np.float32), "shape"),
        (lambda: np.zeros((3, 4), np.float32).T, "strides"),  # transposed: right shape, wrong layout
        (lambda: np.zeros((4, 6), np.float32)[:, ::2], "strides"),
        (lambda: np.asfortranarray(np.zeros((4, 3), np.float32)), "strides"),
    ],
)
def test_mismatched_arrays(setup: Setup, make, fragment) -> None:
    pack = setup.arrays()
    pack[setup.b] = make()
    refused(setup, pack, ErrorCode.INVALID_VALUE, "'b'", fragment)


def test_read_only_array(setup: Setup) -> None:
    """A read-only array is fine for a tensor the graph only reads, refused for one a node writes."""
    pack = setup.arrays()
    pack[setup.a].flags.writeable = False
    setup.graph.execute(setup.handle, pack)
    assert setup.buffers()[setup.a.get_uid()] == pack[setup.a].ctypes.data
    pack = setup.arrays()
    pack[setup.out].flags.writeable = False
    refused(setup, pack, ErrorCode.INVALID_VARIANT_PACK, "'out'", "read-only")


@pytest.mark.parametrize("wrap", [ArrayInterfaceOnly, DLPackOnly], ids=["array_interface", "dlpack"])
def test_read_only_protocol_objects(setup: Setup, wrap) -> None:
    """A read-only __array_interface__ (data=(ptr, True)) or DLPack capsule (READ_ONLY flag) is
    accepted as an input and refused as an output, naming the tensor."""
    frozen = np.zeros((4, 3), np.float32)
    frozen.flags.writeable = False
    if wrap is ArrayInterfaceOnly:
        assert wrap(frozen).__array_interface__["data"][1] is True
    pack: dict[Any, Any] = dict(setup.arrays())
    pack[setup.a] = wrap(frozen)
    setup.graph.execute(setup.handle, pack)
    assert setup.buffers()[setup.a.get_uid()] == frozen.ctypes.data
    pack = dict(setup.arrays())
    pack[setup.out] = wrap(frozen)
    refused(setup, pack, ErrorCode.INVALID_VARIANT_PACK, "'out'", "read-only")


@pytest.mark.parametrize(
    "value",
    [None, "buffer", b"\x00" * 48, 3.5, True, object(), [0.0] * 12, 0, -8, 1 << 64],
    ids=["None", "str", "bytes", "float", "bool", "object", "list", "null", "negative", "huge"],
)
def test_non_buffer_values(setup: Setup, value) -> None:
    pack: dict[Any, Any] = dict(setup.arrays())
    pack[setup.a] = value
    refused(setup, pack, ErrorCode.INVALID_VARIANT_PACK, "'a'")


class RawInterface:
    def __init__(self, iface: dict[str, Any]) -> None:
        self.__array_interface__ = iface


def _malformed(ptr: int) -> list[Any]:
    data = (ptr, False)
    return [
        RawInterface({"data": data}),  # no typestr, no shape
        RawInterface({"data": data, "typestr": "not a dtype", "shape": (4, 3)}),
        RawInterface({"data": data, "typestr": "<f4", "shape": 12}),
        RawInterface({"data": data, "typestr": "<f4", "shape": (4, 3), "strides": (12,)}),
        RawInterface({"data": None, "typestr": "<f4", "shape": (4, 3)}),
    ]


@pytest.mark.parametrize("index", range(5))
def test_malformed_array_interface(setup: Setup, index: int) -> None:
    pack: dict[Any, Any] = dict(setup.arrays())
    pack[setup.a] = _malformed(pack[setup.a].ctypes.data)[index]
    refused(setup, pack, ErrorCode.INVALID_VARIANT_PACK, "'a'")


def test_malformed_dlpack_device(setup: Setup) -> None:
    class OddDevice(DLPackOnly):
        def __dlpack_device__(self) -> Any:
            return "cpu"

    pack: dict[Any, Any] = dict(setup.arrays())
    pack[setup.a] = OddDevice(pack[setup.a])
    refused(setup, pack, ErrorCode.INVALID_VARIANT_PACK, "'a'")


def test_dlpack_on_a_device(setup: Setup) -> None:
    class OnDevice(DLPackOnly):
        def __dlpack_device__(self) -> Any:
            return (2, 0)  # kDLCUDA

    pack: dict[Any, Any] = dict(setup.arrays())
    pack[setup.a] = OnDevice(np.zeros((4, 3), np.float32))
    refused(setup, pack, ErrorCode.INVALID_VARIANT_PACK, "'a'", "device type 2")


def test_bad_keys_and_pack_type(setup: Setup) -> None:
    refused(setup, [(setup.a, 0)], ErrorCode.INVALID_VARIANT_PACK, "mapping")
    pack: dict[Any, Any] = dict(setup.arrays())
    pack["a"] = np.zeros((4, 3), np.float32)
    refused(setup, pack, ErrorCode.INVALID_VARIANT_PACK, "'a'")


def test_execute_on_another_handle(setup: Setup, fake_handle_factory) -> None:
    other = fake_handle_factory(FAKE)
    before = len(setup.executes())
    with pytest.raises(HipdnnError) as info:
        setup.graph.execute(other, setup.arrays())
    assert info.value.code is ErrorCode.INVALID_VALUE
    assert len(setup.executes()) == before


# -- workspace -------------------------------------------------------------------------------
@pytest.fixture
def ws_setup(fake, fake_handle_factory) -> Setup:
    fake.set_workspace_size(4096)  # before the plan: a context keeps the size it was made with
    handle = fake_handle_factory(FAKE)
    g, a, b, mid, out = _graph()
    g.build(handle)
    return Setup(handle, g, a, b, mid, out, fake)


def test_workspace_size_is_reported(ws_setup: Setup) -> None:
    assert ws_setup.graph.get_workspace_size() == 4096


def test_missing_workspace(ws_setup: Setup) -> None:
    refused(ws_setup, ws_setup.arrays(), ErrorCode.INVALID_VALUE, "4096")
    refused(ws_setup, ws_setup.arrays(), ErrorCode.INVALID_VALUE, "4096", workspace=0)


@pytest.mark.parametrize(
    "make",
    [lambda: np.zeros(4095, np.uint8), lambda: np.zeros(1023, np.float32), lambda: np.zeros(0, np.uint8)],
)
def test_too_small_workspace(ws_setup: Setup, make) -> None:
    refused(ws_setup, ws_setup.arrays(), ErrorCode.INVALID_VALUE, "4096", workspace=make())


@pytest.mark.parametrize("make", [lambda: np.zeros(4096, np.uint8), lambda: np.zeros(2048, np.float32)])
def test_adequate_workspace_reaches_the_plugin(ws_setup: Setup, make) -> None:
    ws = make()
    ws_setup.graph.execute(ws_setup.handle, ws_setup.arrays(), ws)
    call = ws_setup.executes()[-1]
    assert call["status"] == 0 and call["workspace"] == ws.ctypes.data


def test_workspace_as_int_pointer(ws_setup: Setup) -> None:
    ws = np.zeros(4096, np.uint8)
    ws_setup.graph.execute(ws_setup.handle, ws_setup.arrays(), workspace=ws.ctypes.data)
    assert ws_setup.executes()[-1]["workspace"] == ws.ctypes.data


def test_workspace_ignored_when_none_is_needed(setup: Setup) -> None:
    assert setup.graph.get_workspace_size() == 0
    ws = np.zeros(16, np.uint8)
    setup.graph.execute(setup.handle, setup.arrays(), ws)
    assert setup.executes()[-1]["workspace"] == ws.ctypes.data
