"""The backend descriptor API used directly, and the value readers fed lying interfaces.

Regressions (each failed before its fix):

* ``set_attribute`` read an array attribute with ``list(values)``: an endless ``__iter__`` grew memory
  without bound, and a huge ``__len__`` raised MemoryError from the allocation it sized;
* integer attributes kept int subclasses, whose own comparisons decided the range checks (a
  pointer of -5 or 2**80 was accepted);
* a name that is not an AttributeName raised AttributeError / ValueError instead of BAD_PARAM;
* ``__array_interface__`` shape and strides were read unbounded (an endless iterator, a rank in the
  tens of thousands made the reader quadratic) and a NULL data pointer for a non-empty shape was
  handed to the plugin.

The DLPack cases (capsules built with ctypes) pass both ways: kept as the strongest cases found.
"""

from __future__ import annotations

import ctypes
import gc
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import hipdnn
from hipdnn import DataType, ErrorCode, Graph, HipdnnError, PointwiseMode
from hipdnn.backend import values
from hipdnn.backend.descriptors import MAX_ATTRIBUTE_ELEMENTS, TensorDescriptor, VariantPackDescriptor
from hipdnn.backend.dlpack_abi import DLManagedTensor
from hipdnn.backend.enums import AttributeName as A
from hipdnn.backend.enums import AttributeType as T
from hipdnn.backend.enums import BackendError, Status

ROOT = Path(__file__).resolve().parents[2]

PACK = ErrorCode.INVALID_VARIANT_PACK


# -- (A) descriptors ---------------------------------------------------------------------------
class Endless(Sequence[int]):
    """Claims three items; iterates forever (stopped by an assertion past the bound)."""

    def __init__(self) -> None:
        self.read = 0

    def __len__(self) -> int:
        return 3

    def __getitem__(self, i: Any) -> Any:
        return 1

    def __iter__(self) -> Iterator[int]:
        while True:
            self.read += 1
            assert self.read <= MAX_ATTRIBUTE_ELEMENTS + 1, "read past the bound"
            yield 1


class HugeLen(Sequence[int]):
    def __len__(self) -> int:
        return 1 << 62

    def __getitem__(self, i: Any) -> Any:
        raise IndexError

    def __iter__(self) -> Iterator[int]:
        return iter([2, 3])


class Liar(int):
    """An int whose comparisons always say yes."""

    def __lt__(self, other: object) -> bool:
        return True

    __le__ = __gt__ = __ge__ = __lt__


def test_an_endless_sequence_is_refused_after_a_bounded_read() -> None:
    seq = Endless()
    with pytest.raises(BackendError) as info:
        TensorDescriptor().set_attribute(A.TENSOR_DIMENSIONS, T.INT64, seq)
    assert info.value.status == Status.BAD_PARAM and "TENSOR_DIMENSIONS" in str(info.value)
    assert seq.read <= MAX_ATTRIBUTE_ELEMENTS + 1


def test_a_lying_len_sizes_nothing() -> None:
    d = TensorDescriptor()
    d.set_attribute(A.TENSOR_DIMENSIONS, T.INT64, HugeLen())
    assert d._get(A.TENSOR_DIMENSIONS) == [2, 3]


@pytest.mark.parametrize(
    ("name", "attr_type", "value"),
    [
        (A.VARIANT_PACK_DATA_POINTERS, T.VOID_PTR, [Liar(-5)]),
        (A.VARIANT_PACK_WORKSPACE, T.VOID_PTR, Liar(1 << 80)),
        (A.VARIANT_PACK_UNIQUE_IDS, T.INT64, [Liar(1 << 70)]),
    ],
)
def test_int_subclasses_do_not_decide_their_own_range(name: A, attr_type: T, value: Any) -> None:
    with pytest.raises(BackendError) as info:
        VariantPackDescriptor().set_attribute(name, attr_type, value)
    assert info.value.status == Status.BAD_PARAM and name.name in str(info.value)


def test_int_subclasses_are_stored_as_ints() -> None:
    d = TensorDescriptor()
    d.set_attribute(A.TENSOR_UNIQUE_ID, T.INT64, Liar(7))
    d.set_attribute(A.TENSOR_DIMENSIONS, T.INT64, [Liar(4), 3])
    assert type(d._get(A.TENSOR_UNIQUE_ID)) is int
    assert [type(v) for v in d._get(A.TENSOR_DIMENSIONS)] == [int, int]


@pytest.mark.parametrize("name", [12345, "TENSOR_UNIQUE_ID", None, 1.5])
def test_a_name_that_is_no_attribute_is_bad_param(name: Any) -> None:
    with pytest.raises(BackendError) as info:
        TensorDescriptor().set_attribute(name, T.INT64, 1)
    assert info.value.status == Status.BAD_PARAM
    d = TensorDescriptor()
    d.finalized = True
    with pytest.raises(BackendError):
        d.get_attribute(name)


def test_an_unknown_attribute_type_is_bad_param() -> None:
    with pytest.raises(BackendError) as info:
        TensorDescriptor().set_attribute(A.TENSOR_UNIQUE_ID, 9999, 1)  # type: ignore[arg-type]
    assert info.value.status == Status.BAD_PARAM


def test_a_plain_int_name_still_works() -> None:
    d = TensorDescriptor()
    d.set_attribute(int(A.TENSOR_UNIQUE_ID), T.INT64, 3)  # type: ignore[arg-type]
    assert d._get(A.TENSOR_UNIQUE_ID) == 3


# -- (B) array interfaces ----------------------------------------------------------------------
class Iface:
    def __init__(self, d: dict[str, Any], attr: str = "__array_interface__") -> None:
        setattr(self, attr, d)


def iface(ptr: int, shape: Any, **kw: Any) -> dict[str, Any]:
    return {"data": (ptr, False), "shape": shape, "typestr": "<f4", "version": 3, **kw}


class EndlessDims:
    def __init__(self) -> None:
        self.read = 0

    def __iter__(self) -> Iterator[int]:
        while True:
            self.read += 1
            assert self.read <= 1000, "read past the bound"  # the test's own stop: unbounded before the fix
            yield 1


@pytest.mark.parametrize("field", ["shape", "strides"])
def test_endless_interface_dims_are_read_boundedly(field: str) -> None:
    a = np.zeros(4, np.float32)
    dims = EndlessDims()
    d = iface(a.ctypes.data, dims if field == "shape" else (4,))
    if field == "strides":
        d["strides"] = dims
    with pytest.raises(HipdnnError) as info:
        values.resolve(Iface(d), "tensor 'x'")
    assert info.value.code is PACK and "more than 64 dimensions" in info.value.message
    assert dims.read <= 65


def test_a_rank_past_64_is_refused() -> None:
    a = np.zeros(4, np.float32)
    with pytest.raises(HipdnnError) as info:
        values.resolve(Iface(iface(a.ctypes.data, (1,) * 65)), "tensor 'x'")
    assert "more than 64 dimensions" in info.value.message
    assert values.resolve(Iface(iface(a.ctypes.data, (1,) * 64)), "x").shape == (1,) * 64


@pytest.mark.parametrize("attr", ["__array_interface__", "__cuda_array_interface__"])
def test_a_null_data_pointer_is_refused_unless_empty(attr: str) -> None:
    with pytest.raises(HipdnnError) as info:
        values.resolve(Iface(iface(0, (4,)), attr), "tensor 'x'")
    assert info.value.code is PACK and "NULL" in info.value.message
    assert values.resolve(Iface(iface(0, (0, 4)), attr), "x").high == 0


@pytest.fixture(scope="module")
def relu(cpu_handle: hipdnn.Handle) -> Any:
    g = Graph(name="relu", io_data_type=DataType.FLOAT)
    x = g.tensor(name="x", dim=[4, 8], stride=[8, 1], data_type=DataType.FLOAT)
    y = g.pointwise(PointwiseMode.RELU_FWD, x, name="relu")
    y.set_name("y").set_output(True)
    g.build(cpu_handle)
    return cpu_handle, g, x, y


@pytest.mark.parametrize("role", ["x", "y"])
def test_a_null_interface_never_reaches_the_engine(relu: Any, role: str) -> None:
    h, g, x, y = relu
    null = Iface(iface(0, (4, 8)))
    ones, out = np.ones((4, 8), np.float32), np.zeros((4, 8), np.float32)
    pack = {x: null, y: out} if role == "x" else {x: ones, y: null}
    with pytest.raises(HipdnnError) as info:
        g.execute(h, pack)
    assert info.value.code is PACK, str(info.value)  # the host refuses, not the plugin
    assert f"tensor '{role}'" in info.value.message


# -- (B) DLPack capsules built with ctypes ---------------------------------------------------
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi)
)
_Deleter = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)
_KEEP: list[Any] = []
_DELETED: list[int] = []


def _count(p: int) -> None:
    _DELETED.append(p)


def _boom(p: int) -> None:
    raise RuntimeError("deleter raises")


COUNT, BOOM = _Deleter(_count), _Deleter(_boom)


def capsule(a: np.ndarray, name: bytes = b"dltensor", device: int = 1, offset: int = 0, deleter: Any = None) -> Any:
    m = DLManagedTensor()
    t = m.dl_tensor
    t.data, t.device.device_type, t.ndim = a.ctypes.data, device, a.ndim
    t.dtype.code, t.dtype.bits, t.dtype.lanes = 2, 32, 1
    shape = (ctypes.c_int64 * a.ndim)(*a.shape)
    t.shape, t.byte_offset = ctypes.addressof(shape), offset
    m.deleter = ctypes.cast(deleter, ctypes.c_void_p).value if deleter is not None else None
    label = ctypes.create_string_buffer(name)
    _KEEP.extend([m, shape, label, a])
    return _capsule_new(ctypes.addressof(m), label, None)


class Producer:
    def __init__(self, cap: Any, device: tuple[int, int] = (1, 0)) -> None:
        self.cap, self.device = cap, device

    def __dlpack__(self, stream: Any = None, max_version: Any = None) -> Any:
        return self.cap

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device


@pytest.mark.parametrize(
    ("make", "expect"),
    [
        (lambda a: Producer(capsule(a, name=b"dltensorX")), "is named"),
        (lambda a: Producer(capsule(a, device=2)), "__dlpack_device__ said"),
        (lambda a: Producer(capsule(a, device=2), device=(2, 0)), "device memory"),
        (lambda a: Producer(capsule(a, offset=(1 << 64) - 4)), "outside the address space"),
    ],
    ids=["wrong-name", "device-lie", "cuda-on-cpu", "offset-overflow"],
)
def test_lying_capsules_are_refused(relu: Any, make: Any, expect: str) -> None:
    h, g, x, y = relu
    out = np.zeros((4, 8), np.float32)
    with pytest.raises(HipdnnError) as info:
        g.execute(h, {x: make(np.ones((4, 8), np.float32)), y: out})
    assert expect in info.value.message and "tensor 'x'" in info.value.message
    assert not out.any()


def test_a_consumed_capsule_is_refused_and_deleters_run_once(relu: Any) -> None:
    h, g, x, y = relu
    a, out = np.full((4, 8), -1.0, np.float32), np.zeros((4, 8), np.float32)
    cap = capsule(a, deleter=COUNT)
    _DELETED.clear()
    g.execute(h, {x: Producer(cap), y: out})
    assert len(_DELETED) == 1
    with pytest.raises(HipdnnError) as info:
        g.execute(h, {x: Producer(cap), y: out})
    assert "used_dltensor" in info.value.message
    del cap
    gc.collect()
    assert len(_DELETED) == 1


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_raising_or_null_deleter_leaves_the_call_intact(relu: Any) -> None:
    h, g, x, y = relu
    a = np.arange(32, dtype=np.float32).reshape(4, 8) - 16
    for deleter in (BOOM, None):
        out = np.zeros((4, 8), np.float32)
        g.execute(h, {x: Producer(capsule(a, deleter=deleter)), y: out})
        np.testing.assert_array_equal(out, np.maximum(a, 0))


# -- endless iterables reaching the compiled core ----------------------------------------------------

_ENDLESS_SCRIPT = r"""
import itertools, os, resource, sys, time
if "libasan" not in os.environ.get("LD_PRELOAD", ""):  # ASan reserves terabytes of address space
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
import numpy as np
import hipdnn

DT = hipdnn.DataType
h = hipdnn.Handle(device="cpu")
g = hipdnn.Graph(name="a", io_data_type=DT.FLOAT, is_override_shape_enabled=True)
x = g.tensor(name="x", dim=[2, 4], stride=[4, 1], data_type=DT.FLOAT)
y = g.tensor(name="y", dim=[2, 4], stride=[4, 1], data_type=DT.FLOAT)
z = g.add(x, y)
z.set_output(True).set_stride([4, 1])
g.build(h)
a = {x: np.ones((2, 4), np.float32), y: np.ones((2, 4), np.float32), z: np.zeros((2, 4), np.float32)}
ws = np.empty(g.get_workspace_size(), np.uint8)
which = sys.argv[1]
start = time.monotonic()
try:
    if which == "shapes":
        g.execute(h, a, ws, override_uids=[x], override_shapes=[itertools.repeat(1)], override_strides=[[4, 1]])
    elif which == "uids":
        g.execute(h, a, ws, override_uids=itertools.repeat(x), override_shapes=[[2, 4]], override_strides=[[4, 1]])
    else:
        bound = g.bind(h, [x, y, z], override_uids=[x])
        bound([a[x].ctypes.data, a[y].ctypes.data, a[z].ctypes.data], 0, [itertools.repeat(1)], [[4, 1]])
    print("accepted")
except hipdnn.HipdnnError as exc:
    print(f"refused {time.monotonic() - start:.3f} {exc.message}")
"""


@pytest.mark.parametrize("which", ["shapes", "uids", "bound"])
def test_an_endless_iterable_is_refused_at_a_bound(which: str) -> None:
    """An override list given as an endless iterator (itertools.repeat): the core's snapshot copied it
    with PySequence_Tuple, growing memory until the process ran out (a 2 GiB cap: MemoryError after
    seconds; none: the whole machine). It now reads at most 2**20 items and refuses the rest."""
    proc = subprocess.run(
        [sys.executable, "-c", _ENDLESS_SCRIPT, which], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout.strip().splitlines()[-1]
    assert out.startswith("refused") and "has more than 1048576 items" in out, out
