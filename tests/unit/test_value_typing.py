"""hipdnn.backend.values.resolve: every kind of variant-pack value the compiled execute core hands
over (numpy arrays of any dtype, array interfaces, torch tensors and look-alikes, DLPack capsules)
reduced to one record, with exact element types, byte ranges and strides; and the stream ordering
of hipdnn.backend.device_sync. Expectations are computed here, never with the module's helpers."""

from __future__ import annotations

import ctypes
import gc
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from hipdnn.backend import device_sync, values
from hipdnn.backend.values import NO_DTYPE, UNKNOWN_DTYPE, Resolved, as_pointer, resolve
from hipdnn.frontend.types import DataType, ErrorCode, HipdnnError

try:  # numpy >= 2
    from numpy.lib.array_utils import byte_bounds
except ImportError:  # numpy 1.x
    byte_bounds = np.byte_bounds  # type: ignore[attr-defined]

LABEL = "tensor 'q' (uid 1)"
RNG = np.random.default_rng(20240607)


def refused(value: Any, *fragments: str, stream: int = 0, code: ErrorCode = ErrorCode.INVALID_VARIANT_PACK) -> str:
    """resolve must raise HipdnnError(code) whose message starts with the label and names ``fragments``."""
    with pytest.raises(HipdnnError) as info:
        resolve(value, LABEL, stream)
    assert info.value.code is code, str(info.value)
    assert info.value.message.startswith(LABEL + ": "), info.value.message
    for f in fragments:
        assert f in info.value.message, f"{f!r} not in {info.value.message!r}"
    return info.value.message


def test_resolved_fields_are_in_the_agreed_order() -> None:
    assert Resolved._fields == (
        "ptr",
        "low",
        "high",
        "dtype_code",
        "dtype_name",
        "itemsize",
        "shape",
        "strides",
        "contiguous",
        "on_device",
        "release",
        "readonly",
    )


# -- numpy arrays: layout ----------------------------------------------------------------------
def _random(shape: tuple[int, ...]) -> Callable[[], np.ndarray]:
    return lambda: RNG.standard_normal(shape).astype(np.float32)


def _views() -> Iterator[tuple[str, Callable[[], np.ndarray]]]:
    for shape in [(1,), (37,), (129,), (3, 37), (2, 5, 129), (1, 1, 37)]:
        yield f"{shape}", _random(shape)
    yield "offset", lambda: RNG.standard_normal((5, 37)).astype(np.float32)[2:, 3:]
    yield "reversed", lambda: RNG.standard_normal(129).astype(np.float32)[::-1]
    yield "reversed_step", lambda: RNG.standard_normal((7, 37)).astype(np.float32)[::-2, 1::3]
    yield "neg_inner", lambda: RNG.standard_normal((4, 37)).astype(np.float16)[:, ::-1]
    yield "transpose", lambda: RNG.standard_normal((37, 5)).astype(np.float64).T
    yield "transpose3", lambda: RNG.standard_normal((2, 3, 129)).astype(np.float32).transpose(2, 0, 1)
    yield "fortran", lambda: np.asfortranarray(RNG.standard_normal((3, 37)).astype(np.float32))
    yield "broadcast_free", lambda: RNG.integers(0, 100, (1, 37), dtype=np.int32)[:, 5:6]
    yield "scalar", lambda: np.array(3.5, np.float32)
    yield "int8_strided", lambda: RNG.integers(-100, 100, 129, dtype=np.int8)[3::4]


@pytest.mark.parametrize("make", [m for _, m in _views()], ids=[n for n, _ in _views()])
def test_numpy_layout(make: Callable[[], np.ndarray]) -> None:
    arr = make()
    r = resolve(arr, LABEL)
    lo, hi = byte_bounds(arr)
    assert r.ptr == arr.ctypes.data
    assert (r.low, r.high) == (lo, hi)
    assert r.shape == arr.shape
    assert r.strides == tuple(s // arr.itemsize for s in arr.strides)
    assert r.itemsize == arr.itemsize
    assert r.contiguous == arr.flags.c_contiguous
    assert not r.on_device and r.release is None
    # independent of byte_bounds: the first and last addressed bytes
    idx_low = tuple(0 if s >= 0 else d - 1 for d, s in zip(arr.shape, arr.strides))
    idx_high = tuple(d - 1 if s >= 0 else 0 for d, s in zip(arr.shape, arr.strides))
    if arr.ndim:
        assert r.low == arr.ctypes.data + sum(i * s for i, s in zip(idx_low, arr.strides))
        assert r.high == arr.ctypes.data + sum(i * s for i, s in zip(idx_high, arr.strides)) + arr.itemsize


def test_exact_bounds_of_a_negative_stride_view() -> None:
    base = np.zeros((6, 10), np.float32)
    view = base[4:0:-2, 7:1:-3]  # rows 4, 2; columns 7, 4
    r = resolve(view, LABEL)
    b = base.ctypes.data
    assert r.ptr == b + (4 * 10 + 7) * 4
    assert r.low == b + (2 * 10 + 4) * 4
    assert r.high == b + (4 * 10 + 7) * 4 + 4
    assert r.strides == (-20, -3)
    assert not r.contiguous


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 129), (2, 0, 5)])
def test_zero_size_arrays_cover_no_bytes(shape: tuple[int, ...]) -> None:
    arr = np.zeros(shape, np.float32)
    r = resolve(arr, LABEL)
    assert r.low == r.high == r.ptr == arr.ctypes.data
    assert r.shape == shape and r.contiguous


def test_byte_strides_that_are_not_whole_elements() -> None:
    """Engines index by element: byte strides that are not whole elements are refused (on axes of size
    > 1; a size-1 axis never steps), through the array and through its interface alike."""
    raw = np.zeros(64, np.uint8)
    arr = np.lib.stride_tricks.as_strided(raw[:8].view(np.float32), shape=(5,), strides=(6,))
    refused(arr, "byte strides [6] are not whole 4-byte elements")
    refused(ArrayInterfaceOnly(arr), "byte strides [6] are not whole 4-byte elements")
    # the same odd stride on a size-1 axis is never taken: accepted, and the strides are never None
    one = np.lib.stride_tricks.as_strided(raw[:32].view(np.float32), shape=(1, 5), strides=(6, 4))
    r = resolve(one, LABEL)
    assert r.strides is not None and len(r.strides) == 2 and r.strides[1] == 1
    assert (r.low, r.high) == (raw.ctypes.data, raw.ctypes.data + 4 * 5)


def test_size_one_dimensions_do_not_spoil_contiguity() -> None:
    arr = np.lib.stride_tricks.as_strided(np.zeros(12, np.float32), shape=(1, 3, 4), strides=(999 * 4, 16, 4))
    r = resolve(arr, LABEL)
    assert r.contiguous and r.low == r.ptr and r.high == r.ptr + 48


# -- numpy arrays: element types ----------------------------------------------------------------
@pytest.mark.parametrize(
    "dtype, code",
    [
        (np.float32, DataType.FLOAT),
        (np.float16, DataType.HALF),
        (np.float64, DataType.DOUBLE),
        (np.int8, DataType.INT8),
        (np.uint8, DataType.UINT8),
        (np.int32, DataType.INT32),
        (np.int64, DataType.INT64),
        (np.intc, DataType.INT32),
        (np.longlong, DataType.INT64),
        ("<f4", DataType.FLOAT),
        ("=f2", DataType.HALF),
    ],
)
def test_standard_numpy_dtypes(dtype: Any, code: DataType) -> None:
    arr = np.ones((3, 5), dtype)
    r = resolve(arr, LABEL)
    assert r.dtype_code == code
    assert r.dtype_name == np.dtype(dtype).name
    assert r.itemsize == np.dtype(dtype).itemsize


@pytest.mark.parametrize(
    "dtype",
    [np.int16, np.uint16, np.bool_, np.complex64, np.complex128, np.uint32, np.uint64, np.longdouble, "V2", "S3"],
)
def test_other_numpy_dtypes_are_named_but_unknown(dtype: Any) -> None:
    arr = np.zeros(7, dtype)
    r = resolve(arr, LABEL)
    assert r.dtype_code == UNKNOWN_DTYPE
    assert r.dtype_name == np.dtype(dtype).name
    assert r.itemsize == np.dtype(dtype).itemsize


@pytest.mark.parametrize("dtype", [np.float16, np.int16, np.uint16, "V2"])
def test_two_byte_dtypes_are_not_bfloat16(dtype: Any) -> None:
    assert resolve(np.zeros(4, dtype), LABEL).dtype_code != DataType.BFLOAT16


def test_dtype_metadata_does_not_change_the_type() -> None:
    arr = np.zeros(4, np.dtype(np.float32, metadata={"unit": "m"}))
    assert resolve(arr, LABEL).dtype_code == DataType.FLOAT


def test_structured_dtype_is_unknown() -> None:
    arr = np.zeros(4, [("a", "<f4"), ("b", "<i4")])
    r = resolve(arr, LABEL)
    assert r.dtype_code == UNKNOWN_DTYPE and r.itemsize == 8


@pytest.mark.parametrize("dtype", [">f4", ">f2", ">i4", ">i8"] if sys.byteorder == "little" else ["<f4", "<i4"])
def test_foreign_byte_order_is_refused(dtype: str) -> None:
    refused(np.zeros(4, dtype), "byte order")


def test_read_only_array_is_reported() -> None:
    """resolve accepts a read-only array and reports it: the core refuses it only for written tensors."""
    arr = np.zeros(4, np.float16)
    assert resolve(arr, LABEL).readonly is False
    arr.flags.writeable = False
    r = resolve(arr, LABEL)
    assert r.readonly is True
    assert (r.ptr, r.shape, r.strides) == (arr.ctypes.data, (4,), (1,))


ML_DTYPES = [
    ("bfloat16", DataType.BFLOAT16, 2),
    ("float8_e4m3fn", DataType.FP8_E4M3, 1),
    ("float8_e5m2", DataType.FP8_E5M2, 1),
    ("float8_e4m3fnuz", DataType.FP8_E4M3_FNUZ, 1),
    ("float8_e5m2fnuz", DataType.FP8_E5M2_FNUZ, 1),
    ("float8_e8m0fnu", DataType.FP8_E8M0, 1),
]


@pytest.mark.parametrize("name, code, size", ML_DTYPES, ids=[n for n, _, _ in ML_DTYPES])
def test_ml_dtypes(name: str, code: DataType, size: int) -> None:
    ml = pytest.importorskip("ml_dtypes")
    if not hasattr(ml, name):
        pytest.skip(f"ml_dtypes {ml.__version__} has no {name}")
    data = RNG.standard_normal((3, 37)).astype(np.float32)
    arr = data.astype(getattr(ml, name))[:, ::-2]
    r = resolve(arr, LABEL)
    assert (r.dtype_code, r.dtype_name, r.itemsize) == (code, name, size)
    assert r.ptr == arr.ctypes.data and (r.low, r.high) == byte_bounds(arr)
    assert r.strides == (37, -2)


def test_ml_dtypes_bfloat16_is_told_by_its_dtype_not_its_typestr() -> None:
    ml = pytest.importorskip("ml_dtypes")
    arr = np.zeros(4, ml.bfloat16)
    assert arr.__array_interface__["typestr"] == "<V2"  # what the interface says: no type at all
    assert resolve(arr, LABEL).dtype_code == DataType.BFLOAT16
    # through the interface alone, bfloat16 cannot be told from any other two bytes
    holder = SimpleNamespace(__array_interface__=dict(arr.__array_interface__))
    assert resolve(holder, LABEL).dtype_code == UNKNOWN_DTYPE


@pytest.mark.parametrize("name", ["float8_e4m3b11fnuz", "int4", "float4_e2m1fn", "float8_e3m4", "uint4"])
def test_other_ml_dtypes_are_unknown(name: str) -> None:
    ml = pytest.importorskip("ml_dtypes")
    if not hasattr(ml, name):
        pytest.skip(f"ml_dtypes {ml.__version__} has no {name}")
    r = resolve(np.zeros(4, getattr(ml, name)), LABEL)
    assert r.dtype_code == UNKNOWN_DTYPE and r.dtype_name == name


# -- array interfaces --------------------------------------------------------------------------
class ArrayInterfaceOnly:
    def __init__(self, arr: np.ndarray) -> None:
        self._arr = arr
        self.__array_interface__ = dict(arr.__array_interface__)


@pytest.mark.parametrize("make", [m for _, m in _views()], ids=[n for n, _ in _views()])
def test_array_interface_matches_the_array(make: Callable[[], np.ndarray]) -> None:
    arr = make()
    r = resolve(ArrayInterfaceOnly(arr), LABEL)
    assert (r.ptr, r.low, r.high) == (arr.ctypes.data, *byte_bounds(arr))
    assert r.shape == arr.shape
    if arr.__array_interface__["strides"] is None:  # C-contiguous: the interface omits them
        assert r.strides == tuple(int(np.prod(arr.shape[i + 1 :])) for i in range(arr.ndim))
    else:
        assert r.strides == tuple(s // arr.itemsize for s in arr.strides)
    assert r.contiguous == arr.flags.c_contiguous
    assert r.dtype_name == arr.dtype.name and not r.on_device


def test_cuda_array_interface_is_on_device() -> None:
    holder = SimpleNamespace(
        __cuda_array_interface__={"data": (0x20000, False), "shape": (4, 8), "strides": None, "typestr": "<f2"}
    )
    r = resolve(holder, LABEL)
    assert r.on_device and r.ptr == r.low == 0x20000 and r.high == 0x20000 + 64
    assert r.dtype_code == DataType.HALF and r.strides == (8, 1) and r.contiguous


def test_cuda_array_interface_with_strides() -> None:
    cai = {"data": (0x40000, False), "shape": (3, 4), "strides": (4, -12), "typestr": "<f4", "version": 3}
    r = resolve(SimpleNamespace(__cuda_array_interface__=cai), LABEL)
    assert (r.ptr, r.low, r.high) == (0x40000, 0x40000 - 36, 0x40000 + 8 + 4)
    assert r.strides == (1, -3) and not r.contiguous


def _cai(**extra: Any) -> SimpleNamespace:
    iface = {"data": (0x10000, False), "shape": (4,), "typestr": "<f4", "version": 3, **extra}
    return SimpleNamespace(__cuda_array_interface__=iface)


def test_cuda_array_interface_mask_is_refused() -> None:
    refused(_cai(mask=SimpleNamespace()), "mask")
    assert resolve(_cai(mask=None), LABEL).on_device


def test_array_interface_mask_is_refused() -> None:
    iface = dict(np.zeros(4, np.float32).__array_interface__, mask=object())
    refused(SimpleNamespace(__array_interface__=iface), "mask")


def _malformed() -> list[tuple[str, dict[str, Any]]]:
    data = (0x10000, False)
    return [
        ("no_typestr", {"data": data}),
        ("bad_typestr", {"data": data, "typestr": "not a dtype", "shape": (4, 3)}),
        ("int_shape", {"data": data, "typestr": "<f4", "shape": 12}),
        ("few_strides", {"data": data, "typestr": "<f4", "shape": (4, 3), "strides": (12,)}),
        ("no_data", {"data": None, "typestr": "<f4", "shape": (4, 3)}),
        ("data_not_tuple", {"data": 0x10000, "typestr": "<f4", "shape": (4, 3)}),
        ("data_bool", {"data": (True, False), "typestr": "<f4", "shape": (4, 3)}),
        ("negative_ptr", {"data": (-16, False), "typestr": "<f4", "shape": (4, 3)}),
        ("negative_dim", {"data": data, "typestr": "<f4", "shape": (4, -3)}),
        ("float_dim", {"data": data, "typestr": "<f4", "shape": (4, 3.0)}),
        ("float_stride", {"data": data, "typestr": "<f4", "shape": (4, 3), "strides": (12, 4.0)}),
        ("typestr_type", {"data": data, "typestr": np.float32, "shape": (4, 3)}),
        ("no_shape", {"data": data, "typestr": "<f4"}),
    ]


@pytest.mark.parametrize("iface", [i for _, i in _malformed()], ids=[n for n, _ in _malformed()])
@pytest.mark.parametrize("attr", ["__array_interface__", "__cuda_array_interface__"])
def test_malformed_array_interfaces(attr: str, iface: dict[str, Any]) -> None:
    refused(SimpleNamespace(**{attr: iface}))


def test_array_interface_that_is_not_a_dict() -> None:
    refused(SimpleNamespace(__array_interface__=[("data", (1, False))]), "not a dict")


@pytest.mark.parametrize("attr", ["__array_interface__", "__cuda_array_interface__"])
def test_read_only_interface_is_reported(attr: str) -> None:
    iface = {"data": (0x10000, True), "typestr": "<f4", "shape": (4,)}
    r = resolve(SimpleNamespace(**{attr: iface}), LABEL)
    assert r.readonly is True and r.ptr == 0x10000 and r.shape == (4,)
    assert r.on_device is (attr == "__cuda_array_interface__")
    writable = {"data": (0x10000, False), "typestr": "<f4", "shape": (4,)}
    assert resolve(SimpleNamespace(**{attr: writable}), LABEL).readonly is False


def test_read_only_array_through_its_interface() -> None:
    frozen = np.zeros((4, 3), np.float32)
    frozen.flags.writeable = False
    r = resolve(ArrayInterfaceOnly(frozen), LABEL)
    assert r.readonly is True and r.ptr == frozen.ctypes.data
    assert resolve(ArrayInterfaceOnly(np.zeros((4, 3), np.float32)), LABEL).readonly is False


def test_interface_typestr_in_foreign_byte_order() -> None:
    iface = {"data": (0x10000, False), "typestr": ">f4" if sys.byteorder == "little" else "<f4", "shape": (4,)}
    refused(SimpleNamespace(__array_interface__=iface), "byte order")


# -- CUDA array interface v3 stream ------------------------------------------------------------
@pytest.fixture
def sync_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(device_sync, "wait_for_producer", lambda producer, consumer: calls.append((producer, consumer)))
    return calls


def test_no_stream_key_no_wait(sync_calls: list[tuple[int, int]]) -> None:
    resolve(_cai(), LABEL, 0x77)
    resolve(_cai(stream=None), LABEL, 0x77)
    assert sync_calls == []


@pytest.mark.parametrize("producer, consumer", [(0x55, 0x55), (1, 0), (1, 1), (2, 2)])
def test_same_stream_no_wait(sync_calls: list[tuple[int, int]], producer: int, consumer: int) -> None:
    assert resolve(_cai(stream=producer), LABEL, consumer).on_device
    assert sync_calls == []


@pytest.mark.parametrize("producer, consumer", [(0x55, 0x77), (0x55, 0), (1, 0x77), (2, 0), (2, 1), (0x55, 1)])
def test_another_stream_waits_once(sync_calls: list[tuple[int, int]], producer: int, consumer: int) -> None:
    r = resolve(_cai(stream=producer), LABEL, consumer)
    assert r.ptr == 0x10000
    assert sync_calls == [(producer, consumer)]


@pytest.mark.parametrize("stream, fragment", [(0, "stream 0"), (-3, "stream -3"), ("1", "'1'"), (True, "True")])
def test_invalid_producer_streams_are_refused(sync_calls: list[tuple[int, int]], stream: Any, fragment: str) -> None:
    refused(_cai(stream=stream), fragment, stream=0x77)
    assert sync_calls == []


def test_stream_is_not_waited_on_for_a_refused_value(sync_calls: list[tuple[int, int]]) -> None:
    refused(_cai(stream=0x55, mask=object()), "mask", stream=0x77)
    refused(_cai(stream=0x55, strides=(4, 4)), "strides", stream=0x77)
    assert sync_calls == []


def test_sync_failure_names_the_tensor(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(producer: int, consumer: int) -> None:
        raise HipdnnError(ErrorCode.GRAPH_EXECUTION_FAILED, "no GPU runtime could be loaded")

    monkeypatch.setattr(device_sync, "wait_for_producer", broken)
    refused(_cai(stream=0x55), "no GPU runtime", stream=0x77, code=ErrorCode.GRAPH_EXECUTION_FAILED)

    def foreign(producer: int, consumer: int) -> None:
        raise AttributeError("cuStreamGetCtx")

    monkeypatch.setattr(device_sync, "wait_for_producer", foreign)
    refused(_cai(stream=0x55), "AttributeError", stream=0x77, code=ErrorCode.GRAPH_EXECUTION_FAILED)


# -- device_sync -------------------------------------------------------------------------------
def test_wait_for_producer_on_one_stream_loads_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_runtime() -> Any:
        raise AssertionError("the runtime was loaded")

    monkeypatch.setattr(device_sync, "runtime", no_runtime)
    device_sync.wait_for_producer(0x55, 0x55)
    device_sync.wait_for_producer(1, 0)


def test_missing_runtime_is_an_error_not_a_silent_skip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(device_sync, "_state", device_sync._State())
    monkeypatch.setattr(device_sync, "CUDA_LIBRARY", "libhipdnn_no_such_cuda.so.1")
    monkeypatch.setattr(device_sync, "HIP_LIBRARIES", ("libhipdnn_no_such_hip.so",))
    for _ in range(2):  # the failure is remembered, and raised again
        with pytest.raises(HipdnnError) as info:
            device_sync.wait_for_producer(0x55, 0x77)
        assert info.value.code is ErrorCode.GRAPH_EXECUTION_FAILED
        assert "libhipdnn_no_such_cuda.so.1" in info.value.message
        assert "libhipdnn_no_such_hip.so" in info.value.message
    # and through resolve, under the tensor's label
    refused(_cai(stream=0x55), "libhipdnn_no_such_cuda", stream=0x77, code=ErrorCode.GRAPH_EXECUTION_FAILED)


class FakeCuda:
    """Stands in for libcuda: records each call with its arguments as plain ints."""

    def __init__(self, ffi: Any, *, current: int = 0xC0, fail: dict[str, int] | None = None) -> None:
        self.ffi, self.current, self.fail = ffi, current, fail or {}
        self.calls: list[tuple[Any, ...]] = []

    def _n(self, p: Any) -> int:
        return int(self.ffi.cast("uintptr_t", p))

    def _ret(self, name: str) -> int:
        return self.fail.get(name, 0)

    def cuGetErrorName(self, err: int, out: Any) -> int:
        self._keep = self.ffi.new("char[]", b"CUDA_ERROR_INVALID_HANDLE")
        out[0] = self._keep
        return 0

    def cuCtxGetCurrent(self, out: Any) -> int:
        self.calls.append(("cuCtxGetCurrent",))
        out[0] = self.ffi.cast("CUcontext", self.current)
        return 0

    def cuStreamGetCtx(self, stream: Any, out: Any) -> int:
        self.calls.append(("cuStreamGetCtx", self._n(stream)))
        out[0] = self.ffi.cast("CUcontext", 0xC7)
        return self._ret("cuStreamGetCtx")

    def cuCtxPushCurrent_v2(self, ctx: Any) -> int:
        self.calls.append(("cuCtxPushCurrent", self._n(ctx)))
        return 0

    def cuCtxPopCurrent_v2(self, out: Any) -> int:
        self.calls.append(("cuCtxPopCurrent",))
        return 0

    def cuEventCreate(self, out: Any, flags: int) -> int:
        self.calls.append(("cuEventCreate", flags))
        out[0] = self.ffi.cast("CUevent", 0xE1)
        return 0

    def cuEventRecord(self, event: Any, stream: Any) -> int:
        self.calls.append(("cuEventRecord", self._n(event), self._n(stream)))
        return self._ret("cuEventRecord")

    def cuStreamWaitEvent(self, stream: Any, event: Any, flags: int) -> int:
        self.calls.append(("cuStreamWaitEvent", self._n(stream), self._n(event), flags))
        return 0

    def cuEventDestroy_v2(self, event: Any) -> int:
        self.calls.append(("cuEventDestroy", self._n(event)))
        return 0


def _with_fake(monkeypatch: pytest.MonkeyPatch, runtime: Any) -> None:
    state = device_sync._State()
    state.runtime = runtime
    monkeypatch.setattr(device_sync, "_state", state)


def test_cuda_wait_between_two_stream_handles(monkeypatch: pytest.MonkeyPatch) -> None:
    ffi = device_sync.cuda_ffi()
    lib = FakeCuda(ffi)
    _with_fake(monkeypatch, device_sync.CudaRuntime(ffi, lib))
    device_sync.wait_for_producer(0x5500, 0x7700)
    assert lib.calls == [
        ("cuStreamGetCtx", 0x5500),  # the producer's context, whatever is current
        ("cuCtxPushCurrent", 0xC7),
        ("cuEventCreate", 0x2),  # CU_EVENT_DISABLE_TIMING
        ("cuEventRecord", 0xE1, 0x5500),
        ("cuStreamWaitEvent", 0x7700, 0xE1, 0),
        ("cuEventDestroy", 0xE1),
        ("cuCtxPopCurrent",),
    ]


def test_cuda_consumer_zero_is_the_legacy_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    ffi = device_sync.cuda_ffi()
    lib = FakeCuda(ffi)
    _with_fake(monkeypatch, device_sync.CudaRuntime(ffi, lib))
    device_sync.wait_for_producer(0x5500, 0)
    assert ("cuStreamWaitEvent", 0x1, 0xE1, 0) in lib.calls


def test_cuda_default_streams_use_the_current_context(monkeypatch: pytest.MonkeyPatch) -> None:
    ffi = device_sync.cuda_ffi()
    lib = FakeCuda(ffi)
    _with_fake(monkeypatch, device_sync.CudaRuntime(ffi, lib))
    device_sync.wait_for_producer(2, 0)  # per-thread default -> legacy default
    assert lib.calls == [
        ("cuCtxGetCurrent",),
        ("cuEventCreate", 0x2),
        ("cuEventRecord", 0xE1, 0x2),
        ("cuStreamWaitEvent", 0x1, 0xE1, 0),
        ("cuEventDestroy", 0xE1),
    ]


def test_cuda_without_a_current_context(monkeypatch: pytest.MonkeyPatch) -> None:
    ffi = device_sync.cuda_ffi()
    lib = FakeCuda(ffi, current=0)
    _with_fake(monkeypatch, device_sync.CudaRuntime(ffi, lib))
    with pytest.raises(HipdnnError, match="no CUDA context"):
        device_sync.wait_for_producer(1, 2)


def test_cuda_failure_names_the_call_and_cleans_up(monkeypatch: pytest.MonkeyPatch) -> None:
    ffi = device_sync.cuda_ffi()
    lib = FakeCuda(ffi, fail={"cuEventRecord": 400})
    _with_fake(monkeypatch, device_sync.CudaRuntime(ffi, lib))
    with pytest.raises(HipdnnError) as info:
        device_sync.wait_for_producer(0x5500, 0x7700)
    assert info.value.code is ErrorCode.GRAPH_EXECUTION_FAILED
    assert "cuEventRecord" in info.value.message and "CUDA_ERROR_INVALID_HANDLE" in info.value.message
    assert lib.calls[-2:] == [("cuEventDestroy", 0xE1), ("cuCtxPopCurrent",)]


class FakeHip:
    def __init__(self, ffi: Any) -> None:
        self.ffi = ffi
        self.calls: list[tuple[Any, ...]] = []

    def _n(self, p: Any) -> int:
        return int(self.ffi.cast("uintptr_t", p))

    def hipGetErrorName(self, err: int) -> Any:
        return self.ffi.NULL

    def hipEventCreateWithFlags(self, out: Any, flags: int) -> int:
        self.calls.append(("hipEventCreateWithFlags", flags))
        out[0] = self.ffi.cast("hipEvent_t", 0xE2)
        return 0

    def hipEventRecord(self, event: Any, stream: Any) -> int:
        self.calls.append(("hipEventRecord", self._n(event), self._n(stream)))
        return 0

    def hipStreamWaitEvent(self, stream: Any, event: Any, flags: int) -> int:
        self.calls.append(("hipStreamWaitEvent", self._n(stream), self._n(event), flags))
        return 0

    def hipEventDestroy(self, event: Any) -> int:
        self.calls.append(("hipEventDestroy", self._n(event)))
        return 0


@pytest.mark.parametrize("producer, consumer, p_handle, c_handle", [(0x5500, 0, 0x5500, 0), (1, 0x7700, 0, 0x7700)])
def test_hip_wait_sequence(
    monkeypatch: pytest.MonkeyPatch, producer: int, consumer: int, p_handle: int, c_handle: int
) -> None:
    ffi = device_sync.hip_ffi()
    lib = FakeHip(ffi)
    _with_fake(monkeypatch, device_sync.HipRuntime(ffi, lib))
    device_sync.wait_for_producer(producer, consumer)
    assert lib.calls == [
        ("hipEventCreateWithFlags", 0x2),
        ("hipEventRecord", 0xE2, p_handle),
        ("hipStreamWaitEvent", c_handle, 0xE2, 0),
        ("hipEventDestroy", 0xE2),
    ]


# -- torch tensors, without torch --------------------------------------------------------------
class FakeDtype:
    def __init__(self, name: str) -> None:
        self.name = name

    def __str__(self) -> str:
        return self.name


class FakeTorchTensor:
    """The accessors of a torch tensor; the class claims to live in torch."""

    def __init__(
        self,
        ptr: int,
        shape: tuple[int, ...],
        strides: tuple[int, ...],
        dtype: str = "torch.float32",
        itemsize: int = 4,
        device: str = "cuda",
        contiguous: bool | None = None,
    ) -> None:
        self.device = SimpleNamespace(type=device, index=0)
        self.dtype = FakeDtype(dtype)
        self.shape = shape
        self._ptr, self._strides, self._itemsize = ptr, strides, itemsize
        if contiguous is None:
            expect, contiguous = 1, True
            for d, s in zip(reversed(shape), reversed(strides)):
                if d != 1 and s != expect:
                    contiguous = False
                expect *= d
        self._contiguous = contiguous

    def data_ptr(self) -> int:
        return self._ptr

    def element_size(self) -> int:
        return self._itemsize

    def stride(self) -> tuple[int, ...]:
        return self._strides

    def is_contiguous(self) -> bool:
        return self._contiguous

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        raise AssertionError("a torch tensor must be read through its accessors")


FakeTorchTensor.__module__ = "torch"


TORCH_DTYPES = [
    ("torch.float32", 4, DataType.FLOAT),
    ("torch.float16", 2, DataType.HALF),
    ("torch.bfloat16", 2, DataType.BFLOAT16),
    ("torch.float64", 8, DataType.DOUBLE),
    ("torch.int8", 1, DataType.INT8),
    ("torch.uint8", 1, DataType.UINT8),
    ("torch.int32", 4, DataType.INT32),
    ("torch.int64", 8, DataType.INT64),
    ("torch.float8_e4m3fn", 1, DataType.FP8_E4M3),
    ("torch.float8_e5m2", 1, DataType.FP8_E5M2),
    ("torch.float8_e4m3fnuz", 1, DataType.FP8_E4M3_FNUZ),
    ("torch.float8_e5m2fnuz", 1, DataType.FP8_E5M2_FNUZ),
    ("torch.float8_e8m0fnu", 1, DataType.FP8_E8M0),
]


@pytest.mark.parametrize("name, size, code", TORCH_DTYPES, ids=[n for n, _, _ in TORCH_DTYPES])
@pytest.mark.parametrize("device, on_device", [("cuda", True), ("hip", True), ("cpu", False)])
def test_torch_dtypes_and_devices(name: str, size: int, code: DataType, device: str, on_device: bool) -> None:
    torch_was_loaded = "torch" in sys.modules
    t = FakeTorchTensor(0x10000, (2, 3, 37), (111, 37, 1), name, size, device)
    r = resolve(t, LABEL)
    assert (r.dtype_code, r.dtype_name, r.itemsize) == (code, name, size)
    assert (r.ptr, r.low, r.high) == (0x10000, 0x10000, 0x10000 + 2 * 3 * 37 * size)
    assert r.shape == (2, 3, 37) and r.strides == (111, 37, 1) and r.contiguous
    assert r.on_device is on_device and r.release is None
    assert ("torch" in sys.modules) == torch_was_loaded  # detected without importing torch


@pytest.mark.parametrize("name", ["torch.int16", "torch.uint16", "torch.bool", "torch.complex64", "torch.qint8"])
def test_other_torch_dtypes_are_unknown(name: str) -> None:
    r = resolve(FakeTorchTensor(0x10000, (4,), (1,), name, 2), LABEL)
    assert r.dtype_code == UNKNOWN_DTYPE and r.dtype_name == name


@pytest.mark.parametrize("device", ["mps", "meta", "xpu", "privateuseone"])
def test_torch_on_an_unknown_device_is_refused(device: str) -> None:
    refused(FakeTorchTensor(0x10000, (4,), (1,), device=device), repr(device))


def test_torch_strided_view_bounds() -> None:
    # a [3, 5] float16 view of a [5, 9] buffer, transposed (strides in elements)
    t = FakeTorchTensor(0x10000 + 2 * 2, (3, 5), (1, 9), "torch.float16", 2)
    r = resolve(t, LABEL)
    assert not r.contiguous
    assert (r.ptr, r.low, r.high) == (0x10004, 0x10004, 0x10004 + (2 * 1 + 4 * 9) * 2 + 2)
    assert r.strides == (1, 9)


def test_torch_zero_size_tensor() -> None:
    r = resolve(FakeTorchTensor(0, (0, 4), (4, 1)), LABEL)
    assert r.low == r.high == r.ptr == 0


def test_torch_element_size_must_match_its_dtype() -> None:
    refused(FakeTorchTensor(0x10000, (4,), (1,), "torch.float32", 2), "element size 2")


def test_torch_subclass_in_a_user_module_is_still_torch() -> None:
    class Mine(FakeTorchTensor):
        pass

    assert Mine.__module__ != "torch"
    r = resolve(Mine(0x10000, (4,), (1,), "torch.bfloat16", 2), LABEL)
    assert r.dtype_code == DataType.BFLOAT16


class FakeCudaTensor:
    """As tests/test_device_buffers.py: torch's accessors without a dtype, outside torch."""

    def __init__(self, ptr: int, shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int = 2) -> None:
        self.device = SimpleNamespace(type="cuda", index=0)
        self.shape = shape
        self._ptr, self._strides, self._itemsize = ptr, strides, itemsize

    def data_ptr(self) -> int:
        return self._ptr

    def element_size(self) -> int:
        return self._itemsize

    def stride(self) -> tuple[int, ...]:
        return self._strides

    def is_contiguous(self) -> bool:
        return True

    @property
    def __cuda_array_interface__(self) -> dict[str, object]:
        raise TypeError("Got unsupported ScalarType BFloat16")


def test_duck_typed_device_tensor_without_a_dtype() -> None:
    r = resolve(FakeCudaTensor(0x10000, (1, 2, 8, 4), (64, 32, 4, 1)), LABEL)
    assert (r.dtype_code, r.dtype_name, r.itemsize) == (NO_DTYPE, "", 2)
    assert r.on_device and (r.ptr, r.low, r.high) == (0x10000, 0x10000, 0x10000 + 128)
    assert r.contiguous and r.strides == (64, 32, 4, 1)


def test_duck_typed_device_tensor_layout_is_computed_not_trusted() -> None:
    r = resolve(FakeCudaTensor(0x10000, (4, 3), (1, 4)), LABEL)  # is_contiguous() says True
    assert not r.contiguous and r.high == 0x10000 + (3 + 2 * 4) * 2 + 2


@pytest.mark.parametrize(
    "dtype, code", [(np.dtype(np.float16), DataType.HALF), ("paddle.bfloat16", DataType.BFLOAT16), ("weird", -1)]
)
def test_duck_typed_device_tensor_with_a_dtype(dtype: Any, code: int) -> None:
    t = FakeCudaTensor(0x10000, (4,), (1,))
    t.dtype = dtype  # type: ignore[attr-defined]
    r = resolve(t, LABEL)
    assert r.dtype_code == code and r.dtype_name == str(getattr(dtype, "name", dtype))


def test_real_torch_cpu_bfloat16() -> None:
    torch = pytest.importorskip("torch")
    t = torch.randn(3, 37, dtype=torch.bfloat16)
    r = resolve(t, LABEL)
    assert (r.dtype_code, r.dtype_name, r.itemsize) == (DataType.BFLOAT16, "torch.bfloat16", 2)
    assert (r.ptr, r.low, r.high) == (t.data_ptr(), t.data_ptr(), t.data_ptr() + 3 * 37 * 2)
    assert not r.on_device and r.contiguous
    v = t.t()[5:]
    r = resolve(v, LABEL)
    assert r.ptr == t.data_ptr() + 5 * 2 and r.strides == (1, 37) and not r.contiguous
    assert r.high == t.data_ptr() + (36 + 2 * 37) * 2 + 2


# -- DLPack: numpy producers --------------------------------------------------------------------
def _capsule_name(capsule: object) -> bytes:
    get_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", ctypes.pythonapi))
    name: bytes = get_name(capsule)
    return name


class DLPackOnly:
    """Hands out the wrapped array's capsules and keeps the last one for inspection."""

    def __init__(self, arr: np.ndarray, device: Any = None) -> None:
        self._arr, self._device = arr, device
        self.capsule: object = None
        self.kwargs: dict[str, Any] = {}

    def __dlpack__(self, **kwargs: Any) -> Any:
        self.kwargs = kwargs
        self.capsule = self._arr.__dlpack__(**kwargs)
        return self.capsule

    def __dlpack_device__(self) -> Any:
        return self._device if self._device is not None else self._arr.__dlpack_device__()


class LegacyDLPack(DLPackOnly):
    """A producer from before DLPack 1.0: no max_version."""

    def __dlpack__(self, *, stream: Any = None) -> Any:  # type: ignore[override]
        self.kwargs = {"stream": stream}
        self.capsule = self._arr.__dlpack__(stream=stream)
        return self.capsule


@pytest.mark.parametrize("wrap, name", [(DLPackOnly, b"used_dltensor_versioned"), (LegacyDLPack, b"used_dltensor")])
@pytest.mark.parametrize("make", [m for _, m in _views()], ids=[n for n, _ in _views()])
def test_numpy_dlpack(wrap: type[DLPackOnly], name: bytes, make: Callable[[], np.ndarray]) -> None:
    arr = make()
    producer = wrap(arr)
    r = resolve(producer, LABEL)
    assert producer.kwargs["stream"] is None
    assert producer.kwargs.get("max_version", (1, 0)) == (1, 0)
    assert (r.ptr, r.low, r.high) == (arr.ctypes.data, *byte_bounds(arr))
    assert r.shape == arr.shape
    if arr.ndim:
        assert r.strides == tuple(s // arr.itemsize for s in arr.strides)
    assert r.dtype_name == arr.dtype.name and r.itemsize == arr.itemsize
    assert not r.on_device and r.contiguous == arr.flags.c_contiguous
    assert _capsule_name(producer.capsule) == name  # consumed
    assert r.release is not None
    r.release()
    r.release()  # harmless


@pytest.mark.parametrize(
    "dtype, code",
    [(np.float32, 1), (np.float16, 2), (np.float64, 4), (np.int8, 7), (np.uint8, 5), (np.int32, 6), (np.int64, 15)],
)
def test_numpy_dlpack_dtypes(dtype: Any, code: int) -> None:
    assert resolve(DLPackOnly(np.zeros(3, dtype)), LABEL).dtype_code == code


@pytest.mark.parametrize("dtype, name", [(np.int16, "int16"), (np.uint16, "uint16"), (np.bool_, "bool")])
def test_numpy_dlpack_unknown_dtypes(dtype: Any, name: str) -> None:
    r = resolve(DLPackOnly(np.zeros(3, dtype)), LABEL)
    assert (r.dtype_code, r.dtype_name) == (UNKNOWN_DTYPE, name)
    assert r.release is not None
    r.release()


def test_read_only_numpy_through_dlpack() -> None:
    frozen = np.zeros(4, np.float32)
    frozen.flags.writeable = False
    producer = DLPackOnly(frozen)
    r = resolve(producer, LABEL)
    assert r.readonly is True and r.ptr == frozen.ctypes.data
    assert _capsule_name(producer.capsule) == b"used_dltensor_versioned"  # consumed: the release frees it
    assert r.release is not None
    r.release()
    assert resolve(DLPackOnly(np.zeros(4, np.float32)), LABEL).readonly is False
    refused(LegacyDLPack(frozen), "BufferError")  # numpy will not hand it out unversioned


def test_dlpack_claiming_a_device_the_producer_cannot_serve() -> None:
    # numpy refuses any stream: the failure still names the device type claimed
    refused(DLPackOnly(np.zeros((4, 3), np.float32), device=(2, 0)), "device type 2")


class StreamIgnoring(DLPackOnly):
    def __dlpack__(self, **kwargs: Any) -> Any:
        self.kwargs = kwargs
        self.capsule = self._arr.__dlpack__(max_version=kwargs.get("max_version"))
        return self.capsule


def test_capsule_device_disagreeing_with_dlpack_device() -> None:
    producer = StreamIgnoring(np.zeros((4, 3), np.float32), device=(2, 0))
    refused(producer, "device type 1", "device type 2")
    assert producer.kwargs["stream"] == 1


@pytest.mark.parametrize("device", ["cpu", (1,), (1, 0, 0), [1, 0], (True, 0), (1.0, 0), None, (1, "0")])
def test_malformed_dlpack_device(device: Any) -> None:
    class Odd(DLPackOnly):
        def __dlpack_device__(self) -> Any:
            return device

    refused(Odd(np.zeros(4, np.float32)))


@pytest.mark.parametrize("device_type", [4, 7, 8, 12, 14, 15, 0, -1])
def test_unsupported_dlpack_devices(device_type: int) -> None:
    refused(DLPackOnly(np.zeros(4, np.float32), device=(device_type, 0)), f"device type {device_type}")


# -- DLPack: hand-built capsules ----------------------------------------------------------------
class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", DELETER)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", DELETER),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi)
)

KDL_CUDA, KDL_CUDA_HOST, KDL_ROCM, KDL_ROCM_HOST, KDL_CUDA_MANAGED = 2, 3, 10, 11, 13
#: A real producer's managed tensor lives until its deleter runs; these test producers own theirs,
#: so they are kept for the session: a release dropped after its producer must not call freed code.
_PRODUCERS: list[Any] = []


class HandMade:
    """A DLPack producer whose capsule is built here with ctypes, claiming any device."""

    def __init__(
        self,
        *,
        device_type: int = KDL_CUDA,
        data: int = 0x7F0000,
        shape: tuple[int, ...] = (2, 3),
        strides: tuple[int, ...] | None = None,
        code: int = 2,
        bits: int = 32,
        lanes: int = 1,
        byte_offset: int = 0,
        versioned: bool = True,
        major: int = 1,
        flags: int = 0,
        ndim: int | None = None,
        name: bytes | None = None,
        null_shape: bool = False,
        claimed: int | None = None,
    ) -> None:
        _PRODUCERS.append(self)
        self.deleted: list[int] = []
        self.deleter = DELETER(self.deleted.append)
        self.shape_arr = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        self.strides_arr = None if strides is None else (ctypes.c_int64 * max(len(strides), 1))(*strides)
        self.managed: DLManagedTensor | DLManagedTensorVersioned
        self.managed = DLManagedTensorVersioned() if versioned else DLManagedTensor()
        if versioned:
            assert isinstance(self.managed, DLManagedTensorVersioned)
            self.managed.version = DLPackVersion(major, 1)
            self.managed.flags = flags
        self.managed.deleter = self.deleter
        t = self.managed.dl_tensor
        t.data = data
        t.device = DLDevice(device_type, 0)
        t.ndim = len(shape) if ndim is None else ndim
        t.dtype = DLDataType(code, bits, lanes)
        if not null_shape:
            t.shape = self.shape_arr
        if self.strides_arr is not None:
            t.strides = self.strides_arr
        t.byte_offset = byte_offset
        self.name = ctypes.create_string_buffer(
            name if name is not None else (b"dltensor_versioned" if versioned else b"dltensor")
        )  # the capsule keeps this pointer: it lives as long as the producer
        self.claimed = device_type if claimed is None else claimed
        self.kwargs: dict[str, Any] = {}
        self.capsule: object = None

    @property
    def address(self) -> int:
        return ctypes.addressof(self.managed)

    def __dlpack__(self, **kwargs: Any) -> Any:
        self.kwargs = kwargs
        self.capsule = _capsule_new(self.address, ctypes.cast(self.name, ctypes.c_char_p), None)
        return self.capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (self.claimed, 0)


@pytest.mark.parametrize("versioned", [True, False])
@pytest.mark.parametrize(
    "device_type, on_device",
    [(KDL_CUDA, True), (KDL_ROCM, True), (KDL_CUDA_MANAGED, True), (KDL_CUDA_HOST, False), (KDL_ROCM_HOST, False)],
)
def test_hand_made_capsule_devices(versioned: bool, device_type: int, on_device: bool) -> None:
    p = HandMade(device_type=device_type, versioned=versioned)
    r = resolve(p, LABEL)
    assert r.on_device is on_device
    assert (r.ptr, r.low, r.high) == (0x7F0000, 0x7F0000, 0x7F0000 + 24)
    assert r.strides == (3, 1) and r.contiguous  # NULL strides: compact row-major
    assert (r.dtype_code, r.dtype_name, r.itemsize) == (DataType.FLOAT, "float32", 4)
    assert _capsule_name(p.capsule) == (b"used_dltensor_versioned" if versioned else b"used_dltensor")
    assert p.deleted == []  # the plugin call has not happened yet
    assert r.release is not None
    r.release()
    assert p.deleted == [p.address]
    r.release()
    assert p.deleted == [p.address]  # exactly once


@pytest.mark.parametrize(
    "device_type, stream, expected",
    [
        (KDL_CUDA, 0, 1),  # legacy default stream
        (KDL_CUDA, 0x5500, 0x5500),
        (KDL_CUDA_MANAGED, 0, 1),
        (KDL_ROCM, 0, 0),  # ROCm's default stream
        (KDL_ROCM, 0x5500, 0x5500),
        (KDL_CUDA_HOST, 0x5500, None),
        (1, 0x5500, None),
    ],
)
def test_dlpack_stream_argument(device_type: int, stream: int, expected: int | None) -> None:
    p = HandMade(device_type=device_type)
    resolve(p, LABEL, stream)
    assert p.kwargs == {"stream": expected, "max_version": (1, 0)}


def test_dlpack_byte_offset_and_negative_strides() -> None:
    p = HandMade(data=0x100000, byte_offset=96, shape=(3, 4), strides=(-4, 1), code=2, bits=16)
    r = resolve(p, LABEL)
    assert r.ptr == 0x100000 + 96
    assert r.low == r.ptr - 2 * 4 * 2 and r.high == r.ptr + 3 * 2 + 2
    assert r.strides == (-4, 1) and not r.contiguous
    assert r.dtype_code == DataType.HALF


def test_dlpack_explicit_strides_with_gaps() -> None:
    p = HandMade(shape=(2, 3, 5), strides=(40, 1, 8), code=0, bits=8)
    r = resolve(p, LABEL)
    assert r.strides == (40, 1, 8) and not r.contiguous
    assert r.high == 0x7F0000 + 40 + 2 + 32 + 1
    assert r.dtype_code == DataType.INT8


def test_dlpack_zero_dim_and_zero_size() -> None:
    r = resolve(HandMade(shape=(), code=2, bits=64), LABEL)
    assert r.shape == () and r.strides == () and r.high == r.low + 8 and r.dtype_code == DataType.DOUBLE
    r = resolve(HandMade(data=0, shape=(0, 3)), LABEL)  # zero-size tensors may have a NULL pointer
    assert r.low == r.high == r.ptr == 0


DL_TYPES = [
    ((2, 32), DataType.FLOAT, "float32"),
    ((2, 16), DataType.HALF, "float16"),
    ((2, 64), DataType.DOUBLE, "float64"),
    ((4, 16), DataType.BFLOAT16, "bfloat16"),
    ((0, 8), DataType.INT8, "int8"),
    ((1, 8), DataType.UINT8, "uint8"),
    ((0, 32), DataType.INT32, "int32"),
    ((0, 64), DataType.INT64, "int64"),
    ((10, 8), DataType.FP8_E4M3, "float8_e4m3fn"),
    ((11, 8), DataType.FP8_E4M3_FNUZ, "float8_e4m3fnuz"),
    ((12, 8), DataType.FP8_E5M2, "float8_e5m2"),
    ((13, 8), DataType.FP8_E5M2_FNUZ, "float8_e5m2fnuz"),
    ((14, 8), DataType.FP8_E8M0, "float8_e8m0fnu"),
    ((0, 16), UNKNOWN_DTYPE, "int16"),
    ((1, 16), UNKNOWN_DTYPE, "uint16"),
    ((6, 8), UNKNOWN_DTYPE, "bool"),
    ((5, 64), UNKNOWN_DTYPE, "complex64"),
    ((1, 32), UNKNOWN_DTYPE, "uint32"),
    ((7, 8), UNKNOWN_DTYPE, "float8_e3m4"),
    ((8, 8), UNKNOWN_DTYPE, "float8_e4m3"),
    ((9, 8), UNKNOWN_DTYPE, "float8_e4m3b11fnuz"),
    ((4, 32), UNKNOWN_DTYPE, "bfloat32"),
    ((99, 8), UNKNOWN_DTYPE, "DLPack type code 99 (8 bits)"),
]


@pytest.mark.parametrize("code_bits, code, name", DL_TYPES, ids=[n for _, _, n in DL_TYPES])
def test_dlpack_dtypes(code_bits: tuple[int, int], code: int, name: str) -> None:
    r = resolve(HandMade(code=code_bits[0], bits=code_bits[1], device_type=KDL_ROCM), LABEL)
    assert (r.dtype_code, r.dtype_name, r.itemsize) == (code, name, code_bits[1] // 8)


def test_read_only_flag_is_reported_and_the_capsule_consumed() -> None:
    p = HandMade(flags=1)
    r = resolve(p, LABEL)
    assert r.readonly is True
    assert _capsule_name(p.capsule) == b"used_dltensor_versioned" and p.deleted == []
    assert r.release is not None
    r.release()
    assert p.deleted == [p.address]  # freed exactly once, by the release
    copied = resolve(HandMade(flags=2), LABEL)  # IS_COPIED alone is not read-only
    assert copied.readonly is False
    assert copied.release is not None
    copied.release()


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"name": b"numpy_array"}, "b'numpy_array'"),
        ({"name": b"used_dltensor", "versioned": False}, "used_dltensor"),
        ({"name": b"dltensor", "versioned": True}, "device type"),  # a versioned struct read as legacy
        ({"ndim": -1}, "-1 dimensions"),
        ({"ndim": 65}, "65 dimensions"),
        ({"null_shape": True}, "NULL shape"),
        ({"data": 0}, "NULL data"),
        ({"lanes": 4}, "x4"),
        ({"bits": 4, "code": 17}, "whole number of bytes"),
        ({"bits": 0}, "whole number of bytes"),
        ({"shape": (2, -3)}, "negative"),
        ({"major": 2}, "version 2.1"),
        ({"claimed": KDL_ROCM}, "device type 2"),
    ],
)
def test_malformed_capsules_are_refused(kwargs: dict[str, Any], fragment: str) -> None:
    p = HandMade(**kwargs)
    refused(p, fragment)
    assert p.deleted == []  # refused capsules are not consumed


@pytest.mark.parametrize("returned", [None, 42, b"dltensor", object()])
def test_dlpack_returning_something_else(returned: Any) -> None:
    class Odd(HandMade):
        def __dlpack__(self, **kwargs: Any) -> Any:
            return returned

    refused(Odd(), "not a DLPack capsule")


def test_dropped_release_still_runs_the_deleter_once() -> None:
    p = HandMade()
    r = resolve(p, LABEL)
    assert p.deleted == []
    del r
    gc.collect()
    assert p.deleted == [p.address]


def test_older_producers_without_max_version() -> None:
    class Old(HandMade):
        def __dlpack__(self, *, stream: Any = None) -> Any:  # type: ignore[override]
            return super().__dlpack__(stream=stream)

    p = Old(versioned=False)
    r = resolve(p, LABEL, 0x5500)
    assert p.kwargs == {"stream": 0x5500} and r.on_device
    assert r.release is not None
    r.release()
    assert p.deleted == [p.address]


# -- values that are not buffers, and hostile objects ---------------------------------------------
@pytest.mark.parametrize(
    "value",
    [None, "buffer", b"\x00" * 48, 3.5, True, False, object(), [0.0] * 12, (1, 2), {"data": 1}, 1j],
    ids=["None", "str", "bytes", "float", "True", "False", "object", "list", "tuple", "dict", "complex"],
)
def test_non_buffer_values(value: Any) -> None:
    refused(value)


@pytest.mark.parametrize("value", [np.True_, np.float32(1.5), np.float16(2), np.complex64(1j)])
def test_numpy_scalars_are_not_buffers(value: Any) -> None:
    # their __array_interface__ points into a temporary copy
    assert "data" in value.__array_interface__
    refused(value, "numpy scalar")


@pytest.mark.parametrize("value", [0, -8, 1 << 64, 0x10000, np.intp(0x10000), np.uint64(8)])
def test_bare_pointers_are_not_resolved(value: Any) -> None:
    refused(value, "pointer")


def test_as_pointer() -> None:
    assert as_pointer(0x10000, LABEL) == 0x10000
    assert as_pointer(np.intp(0x10000), LABEL) == 0x10000
    assert as_pointer(True, LABEL) is None and as_pointer(np.zeros(1), LABEL) is None
    for bad in (0, -8, 1 << 64):
        with pytest.raises(HipdnnError, match="not a valid address") as info:
            as_pointer(bad, LABEL)
        assert info.value.code is ErrorCode.INVALID_VARIANT_PACK


class RaisingInterface:
    @property
    def __array_interface__(self) -> dict[str, Any]:
        raise RuntimeError("the buffer was freed")


def test_array_interface_property_that_raises() -> None:
    refused(RaisingInterface(), "__array_interface__", "RuntimeError", "the buffer was freed")


def test_cuda_array_interface_that_raises_falls_back_to_the_array_interface() -> None:
    arr = np.zeros(5, np.float32)

    class Both:
        __array_interface__ = arr.__array_interface__

        @property
        def __cuda_array_interface__(self) -> dict[str, Any]:
            raise TypeError("not on a GPU")

    r = resolve(Both(), LABEL)
    assert r.ptr == arr.ctypes.data and not r.on_device


@pytest.mark.parametrize("exc", [ValueError("no"), RuntimeError("gone"), KeyError("k"), TypeError("t")])
def test_dlpack_that_raises(exc: Exception) -> None:
    class Raising(DLPackOnly):
        def __dlpack__(self, **kwargs: Any) -> Any:
            raise exc

    refused(Raising(np.zeros(4, np.float32)), type(exc).__name__)


def test_dlpack_device_that_raises() -> None:
    class Raising(DLPackOnly):
        def __dlpack_device__(self) -> Any:
            raise KeyError("device")

    refused(Raising(np.zeros(4, np.float32)), "KeyError")


@pytest.mark.parametrize("accessor", ["data_ptr", "element_size", "stride", "is_contiguous"])
def test_torch_accessor_that_raises(accessor: str) -> None:
    class Broken(FakeTorchTensor):
        pass

    def boom(self: Any) -> Any:
        raise RuntimeError(f"{accessor} exploded")

    setattr(Broken, accessor, boom)
    refused(Broken(0x10000, (4,), (1,)), "RuntimeError", f"{accessor} exploded")


def test_torch_device_that_raises() -> None:
    class Broken(FakeTorchTensor):
        @property
        def device(self) -> Any:
            raise AttributeError("no device")

        @device.setter
        def device(self, value: Any) -> None:
            pass

    refused(Broken(0x10000, (4,), (1,)))


def test_duck_tensor_accessor_that_raises() -> None:
    class Broken(FakeCudaTensor):
        def data_ptr(self) -> int:
            raise RuntimeError("freed")

    refused(Broken(0x10000, (4,), (1,)), "RuntimeError", "freed")


def test_getattr_that_raises_anything() -> None:
    class Hostile:
        def __getattr__(self, name: str) -> Any:
            raise RuntimeError(f"no {name}")

    refused(Hostile(), "RuntimeError")


def test_shape_that_is_not_a_sequence() -> None:
    refused(FakeTorchTensor(0x10000, 4, (1,), contiguous=True))  # type: ignore[arg-type]
    refused(FakeCudaTensor(0x10000, (4, 2), (1,)), "strides")


def test_resolve_does_not_import_ml_dtypes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "ml_dtypes", raising=False)
    monkeypatch.setattr(values, "_NUMPY_CODES", dict(values._NUMPY_CODES))
    r = resolve(np.zeros(3, np.int16), LABEL)
    assert r.dtype_code == UNKNOWN_DTYPE and "ml_dtypes" not in sys.modules


# -- a real GPU, when there is one -----------------------------------------------------------------
_REAL_CDEF = """
typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st* CUcontext;
typedef struct CUstream_st* CUstream;
typedef struct CUevent_st* CUevent;
typedef void (*CUhostFn)(void*);
CUresult cuInit(unsigned int flags);
CUresult cuDeviceGetCount(int* count);
CUresult cuDeviceGet(CUdevice* device, int ordinal);
CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice device);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuStreamCreate(CUstream* stream, unsigned int flags);
CUresult cuStreamDestroy_v2(CUstream stream);
CUresult cuStreamSynchronize(CUstream stream);
CUresult cuCtxSynchronize(void);
CUresult cuEventCreate(CUevent* event, unsigned int flags);
CUresult cuEventRecord(CUevent event, CUstream stream);
CUresult cuEventQuery(CUevent event);
CUresult cuEventDestroy_v2(CUevent event);
CUresult cuLaunchHostFunc(CUstream stream, CUhostFn fn, void* data);
"""
CUDA_ERROR_NOT_READY = 600


@pytest.fixture
def real_cuda() -> Iterator[tuple[Any, Any]]:
    cffi = pytest.importorskip("cffi")
    ffi = cffi.FFI()
    ffi.cdef(_REAL_CDEF)
    try:
        lib = ffi.dlopen("libcuda.so.1")
    except OSError:
        pytest.skip("no CUDA driver")
    count = ffi.new("int*")
    if lib.cuInit(0) != 0 or lib.cuDeviceGetCount(count) != 0 or count[0] == 0:
        pytest.skip("no CUDA device")
    dev, ctx = ffi.new("CUdevice*"), ffi.new("CUcontext*")
    assert lib.cuDeviceGet(dev, 0) == 0 and lib.cuDevicePrimaryCtxRetain(ctx, dev[0]) == 0
    assert lib.cuCtxSetCurrent(ctx[0]) == 0
    yield ffi, lib
    lib.cuCtxSynchronize()


@pytest.mark.parametrize(
    "producer_kind, consumer_kind", [("stream", "stream"), ("stream", "legacy"), ("legacy", "stream")]
)
@pytest.mark.parametrize("through_resolve", [False, True])
def test_real_cuda_consumer_waits_for_producer(
    real_cuda: tuple[Any, Any], producer_kind: str, consumer_kind: str, through_resolve: bool
) -> None:
    """The producer stream is held by a host function until released; the consumer stream must not
    get past the wait before then, and must afterwards."""
    ffi, lib = real_cuda
    monkey_state = device_sync._state
    device_sync._state = device_sync._State()  # the real driver, freshly loaded
    streams = []
    try:

        def new_stream() -> int:
            s = ffi.new("CUstream*")
            assert lib.cuStreamCreate(s, 1) == 0  # CU_STREAM_NON_BLOCKING: no implicit legacy sync
            streams.append(s[0])
            return int(ffi.cast("uintptr_t", s[0]))

        producer = new_stream() if producer_kind == "stream" else 1
        consumer = new_stream() if consumer_kind == "stream" else 0
        gate = threading.Event()

        @ffi.callback("void(void*)")  # type: ignore[untyped-decorator]
        def hold(_: Any) -> None:
            gate.wait(10)

        try:
            assert lib.cuLaunchHostFunc(ffi.cast("CUstream", producer), hold, ffi.NULL) == 0
            if through_resolve:
                holder = _cai(stream=producer)
                assert resolve(holder, LABEL, consumer).on_device
            else:
                device_sync.wait_for_producer(producer, consumer)
            done = ffi.new("CUevent*")
            assert lib.cuEventCreate(done, 2) == 0
            assert lib.cuEventRecord(done[0], ffi.cast("CUstream", consumer or 1)) == 0
            time.sleep(0.2)
            assert lib.cuEventQuery(done[0]) == CUDA_ERROR_NOT_READY  # held behind the producer
        finally:
            gate.set()
        assert lib.cuCtxSynchronize() == 0
        assert lib.cuEventQuery(done[0]) == 0
        lib.cuEventDestroy_v2(done[0])
    finally:
        device_sync._state = monkey_state
        for s in streams:
            lib.cuStreamDestroy_v2(s)


def test_real_cuda_streams_are_independent_without_the_wait(real_cuda: tuple[Any, Any]) -> None:
    """Control for the test above: without the wait, the consumer runs past a held producer."""
    ffi, lib = real_cuda
    a, b = ffi.new("CUstream*"), ffi.new("CUstream*")
    assert lib.cuStreamCreate(a, 1) == 0 and lib.cuStreamCreate(b, 1) == 0
    gate = threading.Event()

    @ffi.callback("void(void*)")  # type: ignore[untyped-decorator]
    def hold(_: Any) -> None:
        gate.wait(10)

    try:
        assert lib.cuLaunchHostFunc(a[0], hold, ffi.NULL) == 0
        done = ffi.new("CUevent*")
        assert lib.cuEventCreate(done, 2) == 0 and lib.cuEventRecord(done[0], b[0]) == 0
        assert lib.cuStreamSynchronize(b[0]) == 0
        assert lib.cuEventQuery(done[0]) == 0
    finally:
        gate.set()
    assert lib.cuCtxSynchronize() == 0
    lib.cuEventDestroy_v2(done[0])
    lib.cuStreamDestroy_v2(a[0])
    lib.cuStreamDestroy_v2(b[0])
