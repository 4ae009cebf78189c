"""Turning variant-pack values into pointers, and proving a tensor fits inside its buffer.

Accepted values: numpy arrays (and anything with ``__array_interface__``), objects with
``__cuda_array_interface__`` (torch, cupy), objects with ``__dlpack__`` on the CPU, and bare
int pointers. Everything but a bare int tells its size, so the memory the tensor will address
at its effective shape and strides is checked to lie inside it. Bare ints cannot be checked:
the caller vouches for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hipdnn.frontend.types import DataType, ErrorCode, HipdnnError

#: numpy dtype of each element type that numpy can hold (bfloat16 when ml_dtypes is present)
_NUMPY_DTYPES: dict[DataType, tuple[str, ...]] = {
    DataType.FLOAT: ("float32",),
    DataType.HALF: ("float16",),
    DataType.DOUBLE: ("float64",),
    DataType.INT32: ("int32",),
    DataType.INT64: ("int64",),
    DataType.INT8: ("int8",),
    DataType.UINT8: ("uint8",),
    DataType.BFLOAT16: ("bfloat16",),
}
ITEMSIZE: dict[DataType, int] = {
    DataType.FLOAT: 4,
    DataType.HALF: 2,
    DataType.BFLOAT16: 2,
    DataType.DOUBLE: 8,
    DataType.INT32: 4,
    DataType.INT64: 8,
    DataType.INT8: 1,
    DataType.UINT8: 1,
    DataType.FP8_E4M3: 1,
    DataType.FP8_E5M2: 1,
    DataType.FP8_E8M0: 1,
    DataType.FP8_E4M3_FNUZ: 1,
    DataType.FP8_E5M2_FNUZ: 1,
}


def numpy_dtype(data_type: DataType) -> np.dtype[Any]:
    """The numpy dtype for ``data_type`` (raises HipdnnError when numpy has none)."""
    for name in _NUMPY_DTYPES.get(data_type, ()):
        try:
            return np.dtype(name)
        except TypeError:
            continue
    raise HipdnnError(ErrorCode.INVALID_VALUE, f"no numpy dtype for {data_type.name}")


_EXPECTED_DTYPES: dict[DataType, np.dtype[Any] | None] = {}


def _expected_dtype(data_type: DataType) -> np.dtype[Any] | None:
    """numpy_dtype, memoized, None where numpy has no such type."""
    if data_type not in _EXPECTED_DTYPES:
        try:
            _EXPECTED_DTYPES[data_type] = numpy_dtype(data_type)
        except HipdnnError:
            _EXPECTED_DTYPES[data_type] = None
    return _EXPECTED_DTYPES[data_type]


@dataclass(slots=True)
class Buffer:
    """A variant-pack value reduced to what execute needs."""

    ptr: int
    #: bytes addressable from ``ptr`` upward and downward; None for a bare int pointer
    low: int | None = None
    high: int | None = None
    dtype: np.dtype[Any] | None = None
    shape: tuple[int, ...] | None = None
    strides_elems: tuple[int, ...] | None = None
    contiguous: bool = False
    on_device: bool = False
    #: element size in bytes when known without a numpy dtype (e.g. torch bfloat16)
    itemsize: int | None = None


def _extent(ptr: int, shape: Sequence[int], byte_strides: Sequence[int], itemsize: int) -> tuple[int, int]:
    """[low, high) byte addresses covered by an array view."""
    if any(d == 0 for d in shape):
        return ptr, ptr
    low = high = 0
    for d, s in zip(shape, byte_strides):
        span = (d - 1) * s
        if span < 0:
            low += span
        else:
            high += span
    return ptr + low, ptr + high + itemsize


def _from_interface(iface: dict[str, Any], on_device: bool, what: str) -> Buffer:
    data = iface.get("data")
    if not isinstance(data, tuple) or not data or not isinstance(data[0], int):
        raise HipdnnError(ErrorCode.INVALID_VARIANT_PACK, f"{what}: array interface has no data pointer")
    ptr = data[0]
    if len(data) > 1 and data[1]:
        raise HipdnnError(ErrorCode.INVALID_VARIANT_PACK, f"{what}: read-only buffer cannot be handed to an engine")
    dtype = np.dtype(iface["typestr"])
    shape = tuple(int(d) for d in iface["shape"])
    strides = iface.get("strides")
    if strides is None:
        byte_strides = []
        step = dtype.itemsize
        for d in reversed(shape):
            byte_strides.append(step)
            step *= max(d, 1)
        strides = tuple(reversed(byte_strides))
    strides = tuple(int(s) for s in strides)
    if len(strides) != len(shape):
        raise HipdnnError(
            ErrorCode.INVALID_VARIANT_PACK, f"{what}: array interface has {len(shape)} dims but {len(strides)} strides"
        )
    low, high = _extent(ptr, shape, strides, dtype.itemsize)
    elems = tuple(s // dtype.itemsize for s in strides) if all(s % dtype.itemsize == 0 for s in strides) else None
    contiguous = high - low == dtype.itemsize * int(np.prod(shape, dtype=np.int64)) and low == ptr
    return Buffer(ptr, low, high, dtype, shape, elems, contiguous, on_device)


def to_buffer(value: Any, what: str) -> Buffer:
    """Reduce a variant-pack value to a :class:`Buffer`."""
    try:
        return _to_buffer(value, what)
    except (KeyError, IndexError, TypeError, ValueError) as exc:  # a malformed interface dict or device tuple
        raise HipdnnError(
            ErrorCode.INVALID_VARIANT_PACK, f"{what}: malformed buffer description ({type(exc).__name__}: {exc})"
        ) from None


def _from_ndarray(arr: np.ndarray[Any, Any], what: str) -> Buffer:
    """The numpy fast path: read the array's own attributes instead of building its interface dict."""
    flags = arr.flags
    if not flags.writeable:
        raise HipdnnError(ErrorCode.INVALID_VARIANT_PACK, f"{what}: array is read-only")
    ptr = arr.__array_interface__["data"][0]
    dtype = arr.dtype
    itemsize = dtype.itemsize
    shape = arr.shape
    byte_strides = arr.strides
    if flags.c_contiguous:
        low, high = ptr, ptr + arr.nbytes
    else:
        low, high = _extent(ptr, shape, byte_strides, itemsize)
    # element strides, unless a stride is not a whole number of elements (map: no Python call per axis)
    elems = None if any(map(itemsize.__rmod__, byte_strides)) else tuple(map(itemsize.__rfloordiv__, byte_strides))
    return Buffer(ptr, low, high, dtype, shape, elems, flags.c_contiguous, False)


def _is_torch_device_tensor(value: Any) -> bool:
    """A torch tensor on a GPU. Read through its own accessors: torch refuses
    ``__cuda_array_interface__`` for bfloat16, the type attention runs in."""
    device = getattr(value, "device", None)
    return (
        getattr(device, "type", None) in ("cuda", "hip")
        and callable(getattr(value, "data_ptr", None))
        and callable(getattr(value, "element_size", None))
        and callable(getattr(value, "stride", None))
    )


def _from_torch(value: Any) -> Buffer:
    ptr = int(value.data_ptr())
    itemsize = int(value.element_size())
    shape = tuple(int(d) for d in value.shape)
    strides = tuple(int(s) for s in value.stride())
    low, high = _extent(ptr, shape, [s * itemsize for s in strides], itemsize)
    return Buffer(ptr, low, high, None, shape, strides, bool(value.is_contiguous()), True, itemsize)


def _to_buffer(value: Any, what: str) -> Buffer:
    if isinstance(value, bool):
        raise HipdnnError(ErrorCode.INVALID_VARIANT_PACK, f"{what}: {value!r} is not a buffer")
    if isinstance(value, (int, np.integer)):
        ptr = int(value)
        if ptr <= 0 or ptr >= 1 << 64:
            raise HipdnnError(ErrorCode.INVALID_VARIANT_PACK, f"{what}: pointer {ptr} is not a valid address")
        return Buffer(ptr)
    if isinstance(value, np.ndarray):
        return _from_ndarray(value, what)
    if _is_torch_device_tensor(value):
        return _from_torch(value)
    cai = getattr(value, "__cuda_array_interface__", None)
    if cai is not None:
        return _from_interface(dict(cai), True, what)
    ai = getattr(value, "__array_interface__", None)
    if ai is not None:
        return _from_interface(dict(ai), False, what)
    if hasattr(value, "__dlpack__"):
        device = value.__dlpack_device__() if hasattr(value, "__dlpack_device__") else (1, 0)
        if int(device[0]) != 1:  # kDLCPU
            raise HipdnnError(
                ErrorCode.INVALID_VARIANT_PACK,
                f"{what}: __dlpack__ object lives on device type {int(device[0])}; pass it through "
                "__cuda_array_interface__ or as an int pointer",
            )
        try:
            arr = np.from_dlpack(value)
        except Exception as exc:
            raise HipdnnError(ErrorCode.INVALID_VARIANT_PACK, f"{what}: cannot read __dlpack__: {exc}") from None
        return _from_interface(arr.__array_interface__, False, what)
    raise HipdnnError(
        ErrorCode.INVALID_VARIANT_PACK,
        f"{what}: {type(value).__name__} is not a buffer (numpy array, __cuda_array_interface__, "
        "__dlpack__ or int pointer)",
    )


def addressed_bytes(dims: Sequence[int], strides: Sequence[int], itemsize: int) -> int:
    """Bytes from the base pointer to one past the last element a tensor addresses."""
    return (sum((d - 1) * s for d, s in zip(dims, strides)) + 1) * itemsize


def check_buffer(
    buf: Buffer,
    *,
    where: str,
    data_type: DataType,
    dims: Sequence[int],
    strides: Sequence[int],
    overridden: bool,
) -> None:
    """Raise INVALID_VALUE unless ``buf`` can back the tensor at ``dims``/``strides``.

    A buffer whose shape equals the tensor's (effective) dims must also have its strides. With an
    override, the buffer may instead be a larger, contiguous backing store (e.g. allocated at the
    maximum shape). In every case the addressed bytes must lie inside the buffer."""
    if buf.low is None or buf.high is None:
        return  # a bare pointer: unchecked by design
    if buf.dtype is not None:
        expected = _expected_dtype(data_type)
        if expected is not None and buf.dtype != expected:
            raise HipdnnError(
                ErrorCode.INVALID_VALUE, f"{where}: buffer dtype {buf.dtype} disagrees with {data_type.name}"
            )
        if expected is None and buf.dtype.itemsize != ITEMSIZE.get(data_type, buf.dtype.itemsize):
            raise HipdnnError(
                ErrorCode.INVALID_VALUE,
                f"{where}: buffer item size {buf.dtype.itemsize} disagrees with {data_type.name}",
            )
    elif buf.itemsize is not None and buf.itemsize != ITEMSIZE.get(data_type, buf.itemsize):
        raise HipdnnError(
            ErrorCode.INVALID_VALUE, f"{where}: buffer item size {buf.itemsize} disagrees with {data_type.name}"
        )
    shape = buf.shape
    if shape is not None and tuple(shape) == tuple(dims):
        elems = buf.strides_elems
        if elems is not None and any(d > 1 and e != st for d, e, st in zip(dims, elems, strides)):
            raise HipdnnError(
                ErrorCode.INVALID_VALUE,
                f"{where}: buffer strides {list(elems)} disagree with tensor strides {list(strides)}",
            )
    elif not (overridden and buf.contiguous):
        raise HipdnnError(
            ErrorCode.INVALID_VALUE,
            f"{where}: buffer shape {list(shape) if shape is not None else None} disagrees with tensor dims "
            f"{list(dims)}" + ("" if not overridden else " (a differently shaped backing buffer must be contiguous)"),
        )
    itemsize = ITEMSIZE.get(data_type, buf.dtype.itemsize if buf.dtype is not None else (buf.itemsize or 1))
    need = addressed_bytes(dims, strides, itemsize)
    if buf.ptr < buf.low or buf.ptr + need > buf.high:
        raise HipdnnError(
            ErrorCode.INVALID_VALUE,
            f"{where}: addresses {need} bytes at dims {list(dims)} strides {list(strides)}, but the buffer "
            f"holds {buf.high - buf.ptr} bytes from its pointer",
        )
