"""Reading a variant-pack value that is not a plain numpy array or int into one normalized record.

The compiled execute core reads numpy arrays of the standard dtypes and int pointers itself and
hands everything else to :func:`resolve`: numpy arrays of other dtypes (ml_dtypes' bfloat16 and
float8 types among them), torch tensors on the CPU or a GPU, objects with ``__array_interface__``
or ``__cuda_array_interface__``, and DLPack producers. Every refusal is a
``HipdnnError(INVALID_VARIANT_PACK)`` whose message starts with the caller's label; no exception
raised by a foreign object escapes unwrapped.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import math
import operator
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from hipdnn.backend import device_sync
from hipdnn.backend.dlpack_abi import DLManagedTensor, DLManagedTensorVersioned
from hipdnn.backend.enums import ITEMSIZE, DataType
from hipdnn.backend.errors import ErrorCode, HipdnnError

#: dtype_code of an element type the value names but hipdnn does not know
UNKNOWN_DTYPE = -1
#: dtype_code of a value that only tells its item size (duck-typed device tensors)
NO_DTYPE = -2


class Resolved(NamedTuple):
    """One variant-pack value, normalized. The C core unpacks it by position: keep the order."""

    ptr: int  #: address of element [0, ..., 0]
    low: int  #: first byte the value covers
    high: int  #: one past the last byte it covers (low == high == ptr when it holds no element)
    dtype_code: int  #: a DataType value, UNKNOWN_DTYPE or NO_DTYPE
    dtype_name: str  #: the value's own name for its element type ("" with NO_DTYPE)
    itemsize: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]  #: in elements (byte strides that are not whole elements are refused)
    contiguous: bool  #: C-contiguous, starting at ``low``
    on_device: bool  #: GPU memory (host memory when False)
    release: Callable[[], None] | None  #: to call once after the plugin call (a consumed DLPack capsule)
    readonly: bool = False  #: the producer forbids writes: fine for tensors a graph only reads


# -- element types ---------------------------------------------------------------------------
#: canonical element-type names (as numpy, ml_dtypes and torch spell them) -> DataType
_CANONICAL: dict[str, DataType] = {
    "float32": DataType.FLOAT,
    "float16": DataType.HALF,
    "bfloat16": DataType.BFLOAT16,
    "float64": DataType.DOUBLE,
    "int8": DataType.INT8,
    "uint8": DataType.UINT8,
    "int32": DataType.INT32,
    "int64": DataType.INT64,
    "float8_e4m3fn": DataType.FP8_E4M3,
    "float8_e5m2": DataType.FP8_E5M2,
    "float8_e4m3fnuz": DataType.FP8_E4M3_FNUZ,
    "float8_e5m2fnuz": DataType.FP8_E5M2_FNUZ,
    "float8_e8m0fnu": DataType.FP8_E8M0,
}


def _numpy_builtin_codes() -> dict[type, int]:
    """numpy's own scalar types -> DataType. Keyed by scalar type, not by kind and size: ml_dtypes'
    float8_e5m2 has kind 'f' and one byte, and bfloat16 looks like '<V2' from outside."""
    by_kind_size = {
        ("f", 4): DataType.FLOAT,
        ("f", 2): DataType.HALF,
        ("f", 8): DataType.DOUBLE,
        ("i", 1): DataType.INT8,
        ("u", 1): DataType.UINT8,
        ("i", 4): DataType.INT32,
        ("i", 8): DataType.INT64,
    }
    codes: dict[type, int] = {}
    for scalar in set(np.sctypeDict.values()):
        if getattr(scalar, "__module__", None) != "numpy":
            continue  # a type some other package registered
        dt = np.dtype(scalar)
        code = by_kind_size.get((dt.kind, dt.itemsize))
        if code is not None:
            codes[scalar] = int(code)
    return codes


#: numpy scalar type -> dtype code; grows with every other scalar type met (ml_dtypes', unknown ones)
_NUMPY_CODES: dict[type, int] = _numpy_builtin_codes()
_ML_DTYPES_NAMES = ("bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu")


def _numpy_code(dtype: np.dtype[Any]) -> int:
    scalar = dtype.type
    code = _NUMPY_CODES.get(scalar)
    if code is None:
        code = UNKNOWN_DTYPE
        # An ml_dtypes array means ml_dtypes is imported already: look it up, never import it.
        ml = sys.modules.get("ml_dtypes")
        if ml is not None and dtype.fields is None:
            for name in _ML_DTYPES_NAMES:
                if getattr(ml, name, None) is scalar:
                    code = int(_CANONICAL[name])
                    break
        if len(_NUMPY_CODES) < 4096:  # bounded: structured dtypes could otherwise grow it forever
            _NUMPY_CODES[scalar] = code
    return code


#: torch dtype object -> (dtype code, name), filled as dtypes are met
_TORCH_DTYPES: dict[Any, tuple[int, str]] = {}


def _torch_dtype(dtype: Any) -> tuple[int, str]:
    hit = _TORCH_DTYPES.get(dtype)
    if hit is None:
        name = str(dtype)  # "torch.bfloat16"
        code = _CANONICAL.get(name[6:], UNKNOWN_DTYPE) if name.startswith("torch.") else UNKNOWN_DTYPE
        hit = (int(code), name)
        if len(_TORCH_DTYPES) < 1024:
            _TORCH_DTYPES[dtype] = hit
    return hit


def _foreign_dtype(dtype: Any) -> tuple[int, str]:
    """The element type of a duck-typed tensor: a numpy dtype, or a name such as 'torch.float16'
    or 'paddle.bfloat16' whose last dotted part is a canonical name."""
    if isinstance(dtype, np.dtype):
        return _numpy_code(dtype), dtype.name
    name = str(dtype)
    return int(_CANONICAL.get(name.rpartition(".")[2], UNKNOWN_DTYPE)), name


# -- layout ----------------------------------------------------------------------------------
def _layout(ptr: int, shape: Sequence[int], byte_strides: Sequence[int], itemsize: int) -> tuple[int, int, bool]:
    """(low, high, C-contiguous starting at ptr) of a strided view."""
    if 0 in shape:
        return ptr, ptr, True
    low = high = 0
    contiguous = True
    expect = itemsize
    for d, s in zip(reversed(shape), reversed(byte_strides)):
        if d != 1:
            span = (d - 1) * s
            if span < 0:
                low += span
            else:
                high += span
            if s != expect:
                contiguous = False
        expect *= d
    return ptr + low, ptr + high + itemsize, contiguous


def _checked_layout(
    label: str, ptr: int, shape: Sequence[int], byte_strides: Sequence[int], itemsize: int
) -> tuple[int, int, bool, tuple[int, ...]]:
    """_layout and the element strides, refusing what no memory can be: a view reaching outside the
    address space, or byte strides that are not whole elements (engines index by element)."""
    low, high, contiguous = _layout(ptr, shape, byte_strides, itemsize)
    if not (0 <= low <= high < 1 << 64):
        raise _refuse(
            label,
            f"shape {list(shape)} with byte strides {list(byte_strides)} from pointer {ptr:#x} reaches outside "
            "the address space",
        )
    if any(d > 1 and s % itemsize for d, s in zip(shape, byte_strides)):
        raise _refuse(
            label, f"byte strides {list(byte_strides)} are not whole {itemsize}-byte elements; engines index by element"
        )
    return low, high, contiguous, tuple(s // itemsize for s in byte_strides)


def _refuse(label: str, message: str) -> HipdnnError:
    return HipdnnError(ErrorCode.INVALID_VARIANT_PACK, f"{label}: {message}")


def _raised(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _check_itemsize(label: str, code: int, name: str, itemsize: int) -> None:
    """A tensor reports its dtype and its element size separately: they must agree."""
    if code >= 0 and ITEMSIZE[code] != itemsize:
        raise _refuse(label, f"element size {itemsize} disagrees with its dtype {name}")


# -- numpy -----------------------------------------------------------------------------------
def _from_ndarray(arr: np.ndarray[Any, Any], label: str) -> Resolved:
    dtype = arr.dtype
    if not dtype.isnative:
        raise _refuse(label, f"array of dtype {dtype.str!r} is not in the machine's byte order")
    flags = arr.flags
    itemsize = dtype.itemsize
    if itemsize <= 0:
        raise _refuse(label, f"array of dtype {dtype.name} has elements of size 0")
    ptr = arr.__array_interface__["data"][0]
    shape = arr.shape
    byte_strides = arr.strides
    low, high, contiguous, strides = _checked_layout(label, ptr, shape, byte_strides, itemsize)
    return Resolved(
        ptr,
        low,
        high,
        _numpy_code(dtype),
        dtype.name,
        itemsize,
        shape,
        strides,
        contiguous,
        False,
        None,
        not flags.writeable,
    )


# -- torch tensors and look-alikes -----------------------------------------------------------
_TORCH_ACCESSORS = ("data_ptr", "element_size", "stride", "dtype", "device")
#: type -> whether it is a torch tensor type (read through its accessors)
_TORCH_TYPES: dict[type, bool] = {}


def _is_torch_type(value: object) -> bool:
    tp = type(value)
    verdict = _TORCH_TYPES.get(tp)
    if verdict is None:
        # the MRO, not just the type: subclasses of torch.Tensor live in their users' modules
        from_torch = any(
            (mod := getattr(cls, "__module__", None) or "") == "torch" or mod.startswith("torch.") for cls in tp.__mro__
        )
        verdict = from_torch and all(hasattr(value, name) for name in _TORCH_ACCESSORS)
        if len(_TORCH_TYPES) < 4096:
            _TORCH_TYPES[tp] = verdict
    return verdict


def is_torch_tensor(value: object) -> bool:
    """Whether ``value`` is a torch tensor (judged once per type). The compiled execute core asks
    this once per type and then reads such values through their accessors itself. A value whose
    attributes raise is not one here: :func:`resolve` then names what failed."""
    try:
        return _is_torch_type(value)
    except Exception:
        return False


def torch_dtype_info(dtype: Any) -> tuple[int, str, int]:
    """(dtype code, name, item size) of a torch dtype, for the compiled execute core's cache."""
    code, name = _torch_dtype(dtype)
    itemsize = ITEMSIZE.get(code) if code >= 0 else None
    return code, name, int(itemsize if itemsize is not None else getattr(dtype, "itemsize", 0) or 0)


def _from_torch(value: Any, label: str) -> Resolved:
    # accessors, not __cuda_array_interface__: torch refuses that for bfloat16, and CPU tensors lack it
    try:
        device_type = value.device.type
    except Exception as exc:
        raise _refuse(label, f"cannot read the torch tensor's device ({_raised(exc)})") from exc
    if device_type == "cpu":
        on_device = False
    elif device_type == "cuda" or device_type == "hip":
        on_device = True
    else:
        raise _refuse(label, f"torch tensor on device type {device_type!r}: only 'cpu', 'cuda' and 'hip' are read")
    try:
        ptr = value.data_ptr()
        itemsize = value.element_size()
        shape = tuple(map(operator.index, value.shape))
        strides = tuple(map(operator.index, value.stride()))
        code, name = _torch_dtype(value.dtype)
        contiguous = bool(value.is_contiguous())
    except HipdnnError:
        raise
    except Exception as exc:
        raise _refuse(label, f"cannot read the torch tensor ({_raised(exc)})") from exc
    _check_itemsize(label, code, name, itemsize)
    if contiguous:
        low, high = ptr, ptr + math.prod(shape) * itemsize
    else:
        low, high, _, _ = _checked_layout(label, ptr, shape, [s * itemsize for s in strides], itemsize)
    return Resolved(ptr, low, high, code, name, itemsize, shape, strides, contiguous, on_device, None)


def _is_duck_device_tensor(value: object) -> bool:
    """Shaped like a torch GPU tensor without being one (kept for wrappers and tests)."""
    device = getattr(value, "device", None)
    return (
        getattr(device, "type", None) in ("cuda", "hip")
        and callable(getattr(value, "data_ptr", None))
        and callable(getattr(value, "element_size", None))
        and callable(getattr(value, "stride", None))
    )


def _from_duck(value: Any, label: str) -> Resolved:
    try:
        ptr = operator.index(value.data_ptr())
        itemsize = operator.index(value.element_size())
        shape = tuple(map(operator.index, value.shape))
        strides = tuple(map(operator.index, value.stride()))
        dtype = getattr(value, "dtype", None)
        code, name = (NO_DTYPE, "") if dtype is None else _foreign_dtype(dtype)
    except HipdnnError:
        raise
    except Exception as exc:
        raise _refuse(label, f"cannot read the device tensor ({_raised(exc)})") from exc
    if itemsize <= 0:
        raise _refuse(label, f"element size {itemsize} is not positive")
    if len(strides) != len(shape) or any(d < 0 for d in shape):
        raise _refuse(label, f"shape {list(shape)} and strides {list(strides)} do not describe a tensor")
    _check_itemsize(label, code, name, itemsize)
    low, high, contiguous, _ = _checked_layout(label, ptr, shape, [s * itemsize for s in strides], itemsize)
    return Resolved(ptr, low, high, code, name, itemsize, shape, strides, contiguous, True, None)


# -- array interfaces ------------------------------------------------------------------------
def _index(x: Any) -> int:
    if isinstance(x, bool):
        raise TypeError(f"{x!r} is not an integer")
    return operator.index(x)


def _dims(raw: Any, what: str, label: str) -> tuple[int, ...]:
    """At most DL_MAX_NDIM ints of an interface's shape or strides: read through a bounded iterator,
    so an endless one (itertools.repeat) or a huge rank cannot make the reader grow or stall."""
    items = tuple(itertools.islice(iter(raw), DL_MAX_NDIM + 1))
    if len(items) > DL_MAX_NDIM:
        raise _refuse(label, f"array interface {what} has more than {DL_MAX_NDIM} dimensions")
    return tuple(_index(d) for d in items)


def _from_interface(iface: object, on_device: bool, label: str, stream: int) -> Resolved:
    attr = "__cuda_array_interface__" if on_device else "__array_interface__"
    if not isinstance(iface, Mapping):
        raise _refuse(label, f"{attr} is a {type(iface).__name__}, not a dict")
    data = iface.get("data")
    if not isinstance(data, tuple) or not data or isinstance(data[0], bool) or not isinstance(data[0], int):
        raise _refuse(label, "array interface has no data pointer")
    ptr = data[0]
    if not 0 <= ptr < 1 << 64:
        raise _refuse(label, f"array interface data pointer {ptr} is not an address")
    readonly = len(data) > 1 and bool(data[1])
    if iface.get("mask") is not None:
        raise _refuse(label, f"{attr} has a mask: masked arrays cannot be handed to an engine")
    typestr = iface["typestr"]
    if not isinstance(typestr, str):
        raise _refuse(label, f"array interface typestr {typestr!r} is not a string")
    dtype = np.dtype(typestr)
    if not dtype.isnative:
        raise _refuse(label, f"array interface typestr {typestr!r} is not in the machine's byte order")
    itemsize = dtype.itemsize
    if itemsize <= 0:
        raise _refuse(label, f"array interface typestr {typestr!r} has elements of size 0")
    shape = _dims(iface["shape"], "shape", label)
    if any(d < 0 for d in shape):
        raise _refuse(label, f"array interface shape {list(shape)} has a negative dimension")
    raw_strides = iface.get("strides")
    if raw_strides is None:
        byte_strides: tuple[int, ...] = tuple(
            itemsize * math.prod(shape[i + 1 :]) for i in range(len(shape))
        )  # C order, as the protocol says
    else:
        byte_strides = _dims(raw_strides, "strides", label)
    if len(byte_strides) != len(shape):
        raise _refuse(label, f"array interface has {len(shape)} dims but {len(byte_strides)} strides")
    if ptr == 0 and 0 not in shape:
        # as the int and DLPack readers refuse it: no engine may be handed NULL to read or write
        raise _refuse(label, f"array interface data pointer is NULL for shape {list(shape)}")
    if on_device:
        _await_producer(iface, label, stream)
    low, high, contiguous, strides = _checked_layout(label, ptr, shape, byte_strides, itemsize)
    return Resolved(
        ptr, low, high, _numpy_code(dtype), dtype.name, itemsize, shape, strides, contiguous, on_device, None, readonly
    )


def _await_producer(iface: Mapping[str, Any], label: str, stream: int) -> None:
    """CUDA array interface v3: when the producer names its stream, the consumer stream must wait
    for it before any engine reads the memory."""
    producer = iface.get("stream")
    if producer is None:
        return  # the producer asks for no synchronization
    if isinstance(producer, bool) or not isinstance(producer, int):
        raise _refuse(label, f"__cuda_array_interface__ stream {producer!r} is not an integer")
    if producer == 0:
        raise _refuse(label, "__cuda_array_interface__ stream 0 is ambiguous and disallowed by the protocol")
    if producer < 0:
        raise _refuse(label, f"__cuda_array_interface__ stream {producer} is not a stream")
    if device_sync.same_stream(producer, stream):
        return
    try:
        device_sync.wait_for_producer(producer, stream)  # looked up per call: tests replace it
    except HipdnnError as exc:
        raise HipdnnError(exc.code, f"{label}: {exc.message}") from exc
    except Exception as exc:
        raise HipdnnError(
            ErrorCode.GRAPH_EXECUTION_FAILED,
            f"{label}: cannot make stream {stream} wait for the producer's stream {producer} ({_raised(exc)})",
        ) from exc


# -- DLPack ----------------------------------------------------------------------------------
# Own function objects built from prototypes: setting argtypes on ctypes.pythonapi's shared ones
# would change them for every other user in the process.
_capsule_get_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", ctypes.pythonapi))
_capsule_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)
_capsule_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_void_p)(
    ("PyCapsule_SetName", ctypes.pythonapi)
)
# PyCapsule_SetName keeps the pointer, not a copy: these buffers live as long as the module.
_USED_NAMES = {
    b"dltensor": ctypes.create_string_buffer(b"used_dltensor"),
    b"dltensor_versioned": ctypes.create_string_buffer(b"used_dltensor_versioned"),
}
# The deleter runs with the GIL held: producers' deleters may touch Python objects.
_Deleter = ctypes.PYFUNCTYPE(None, ctypes.c_void_p)

DL_HOST_DEVICES = frozenset({1, 3, 11})  # kDLCPU, kDLCUDAHost (pinned), kDLROCMHost
DL_CUDA_DEVICES = frozenset({2, 13})  # kDLCUDA, kDLCUDAManaged
DL_ROCM_DEVICES = frozenset({10})  # kDLROCM
DL_READ_ONLY = 1  # DLPACK_FLAG_BITMASK_READ_ONLY
DL_MAX_NDIM = 64
#: DLPack (type code, bits) -> DataType (codes of dlpack.h v1.1)
_DL_TYPES: dict[tuple[int, int], DataType] = {
    (2, 32): DataType.FLOAT,
    (2, 16): DataType.HALF,
    (2, 64): DataType.DOUBLE,
    (4, 16): DataType.BFLOAT16,
    (0, 8): DataType.INT8,
    (1, 8): DataType.UINT8,
    (0, 32): DataType.INT32,
    (0, 64): DataType.INT64,
    (10, 8): DataType.FP8_E4M3,  # kDLFloat8_e4m3fn
    (11, 8): DataType.FP8_E4M3_FNUZ,  # kDLFloat8_e4m3fnuz
    (12, 8): DataType.FP8_E5M2,  # kDLFloat8_e5m2
    (13, 8): DataType.FP8_E5M2_FNUZ,  # kDLFloat8_e5m2fnuz
    (14, 8): DataType.FP8_E8M0,  # kDLFloat8_e8m0fnu
}
_DL_CODE_NAMES = {
    0: "int",
    1: "uint",
    2: "float",
    3: "opaque",
    4: "bfloat",
    5: "complex",
    6: "bool",
    7: "float8_e3m4",
    8: "float8_e4m3",
    9: "float8_e4m3b11fnuz",
    10: "float8_e4m3fn",
    11: "float8_e4m3fnuz",
    12: "float8_e5m2",
    13: "float8_e5m2fnuz",
    14: "float8_e8m0fnu",
    15: "float6_e2m3fn",
    16: "float6_e3m2fn",
    17: "float4_e2m1fn",
}


def _dl_type_name(code: int, bits: int) -> str:
    base = _DL_CODE_NAMES.get(code)
    if base is None:
        return f"DLPack type code {code} ({bits} bits)"
    if (code == 6 and bits == 8) or code >= 7:
        return base
    return f"{base}{bits}"


class _DLPackRelease:
    """Runs a consumed capsule's deleter once: when called, or when dropped uncalled (a safety net)."""

    __slots__ = ("_capsule", "_deleter", "_managed")

    def __init__(self, capsule: object, managed: int, deleter: int) -> None:
        self._capsule: object = capsule  # kept alive until the deleter ran
        self._managed = managed
        self._deleter = deleter

    def __call__(self) -> None:
        deleter, self._deleter = self._deleter, 0
        if deleter:
            _Deleter(deleter)(self._managed)
        self._capsule = None

    def __del__(self) -> None:
        if self._deleter:
            with contextlib.suppress(Exception):  # a finalizer has no one to report to
                self()


def _dlpack_device(value: Any, label: str) -> int:
    try:
        probe = getattr(value, "__dlpack_device__", None)
        device = probe() if probe is not None else (1, 0)
    except Exception as exc:
        raise _refuse(label, f"cannot read __dlpack_device__ ({_raised(exc)})") from exc
    if (
        not isinstance(device, tuple)
        or len(device) != 2
        or any(isinstance(x, bool) or not isinstance(x, int) for x in device)
    ):
        raise _refuse(label, f"__dlpack_device__ returned {device!r}, not a (device type, device id) tuple of ints")
    return int(device[0])


def _from_dlpack(value: Any, label: str, stream: int) -> Resolved:
    device_type = _dlpack_device(value, label)
    # the stream argument as the Python array API standard defines it per device kind
    dl_stream: int | None
    if device_type in DL_HOST_DEVICES:
        dl_stream = None
    elif device_type in DL_CUDA_DEVICES:
        dl_stream = stream or 1  # 1: the legacy default stream (0 is disallowed for CUDA)
    elif device_type in DL_ROCM_DEVICES:
        dl_stream = stream or 0  # 0: the default stream
    else:
        raise _refuse(label, f"__dlpack__ object lives on device type {device_type}, which hipdnn cannot read")
    try:
        try:
            capsule = value.__dlpack__(stream=dl_stream, max_version=(1, 0))
        except TypeError:  # a producer older than DLPack 1.0 takes no max_version
            capsule = value.__dlpack__(stream=dl_stream)
    except HipdnnError:
        raise
    except Exception as exc:
        raise _refuse(
            label, f"__dlpack__(stream={dl_stream}) of a value on device type {device_type} failed ({_raised(exc)})"
        ) from exc
    return _from_capsule(capsule, label, device_type)


def _from_capsule(capsule: object, label: str, claimed_device: int) -> Resolved:
    """Read a DLPack capsule and consume it. Until the rename at the end nothing is ours: a refused
    capsule is left to its own destructor, which runs the producer's deleter."""
    if type(capsule).__name__ != "PyCapsule":
        raise _refuse(label, f"__dlpack__ returned a {type(capsule).__name__}, not a DLPack capsule")
    name = _capsule_get_name(capsule)
    if name not in _USED_NAMES:
        raise _refuse(label, f"DLPack capsule is named {name!r}, not 'dltensor' or 'dltensor_versioned'")
    managed = _capsule_get_pointer(capsule, name)
    if not managed:
        raise _refuse(label, "DLPack capsule holds a NULL pointer")
    if name == b"dltensor_versioned":
        versioned = DLManagedTensorVersioned.from_address(managed)
        if versioned.version.major != 1:
            # another ABI: nothing past the version may be read
            raise _refuse(
                label, f"DLPack capsule of version {versioned.version.major}.{versioned.version.minor}; 1.x is read"
            )
        readonly = bool(versioned.flags & DL_READ_ONLY)
        tensor = versioned.dl_tensor
        deleter = versioned.deleter or 0
    else:
        legacy = DLManagedTensor.from_address(managed)
        readonly = False
        tensor = legacy.dl_tensor
        deleter = legacy.deleter or 0

    device_type = tensor.device.device_type
    if device_type != claimed_device:
        raise _refuse(
            label,
            f"DLPack capsule holds memory of device type {device_type} but __dlpack_device__ said device type "
            f"{claimed_device}",
        )
    ndim = tensor.ndim
    if not 0 <= ndim <= DL_MAX_NDIM:
        raise _refuse(label, f"DLPack tensor has {ndim} dimensions")
    code, bits, lanes = tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes
    type_name = _dl_type_name(code, bits)
    if lanes != 1:
        raise _refuse(label, f"DLPack element type {type_name} x{lanes} is a vector type")
    if bits == 0 or bits % 8:
        raise _refuse(label, f"DLPack element type {type_name} is not a whole number of bytes")
    itemsize = bits // 8
    if ndim and not tensor.shape:
        raise _refuse(label, "DLPack tensor has a NULL shape")
    shape = tuple((ctypes.c_int64 * ndim).from_address(tensor.shape)) if ndim else ()
    if any(d < 0 for d in shape):
        raise _refuse(label, f"DLPack tensor shape {list(shape)} has a negative dimension")
    if tensor.strides:
        strides = tuple((ctypes.c_int64 * ndim).from_address(tensor.strides)) if ndim else ()
    else:  # NULL: compact row-major
        strides = tuple(math.prod(shape[i + 1 :]) for i in range(ndim))
    data = tensor.data or 0
    if not data and 0 not in shape:
        raise _refuse(label, "DLPack tensor has a NULL data pointer")
    ptr = data + tensor.byte_offset
    low, high, contiguous, _ = _checked_layout(label, ptr, shape, [s * itemsize for s in strides], itemsize)
    dl_type = _DL_TYPES.get((code, bits))

    # consumed from here on: the capsule's destructor no longer frees it, the release does
    if _capsule_set_name(capsule, ctypes.addressof(_USED_NAMES[name])) != 0:
        raise _refuse(label, "DLPack capsule could not be marked as consumed")
    return Resolved(
        ptr,
        low,
        high,
        UNKNOWN_DTYPE if dl_type is None else int(dl_type),
        type_name,
        itemsize,
        shape,
        strides,
        contiguous,
        device_type not in DL_HOST_DEVICES,
        _DLPackRelease(capsule, managed, deleter),
        readonly,
    )


# -- entry points ----------------------------------------------------------------------------
def as_pointer(value: object, label: str) -> int | None:
    """A bare pointer (int or numpy integer, never bool), checked to be an address; None for anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        return None
    ptr = int(value)
    if ptr <= 0 or ptr >= 1 << 64:
        raise _refuse(label, f"pointer {ptr} is not a valid address")
    return ptr


def resolve(value: object, label: str, stream: int = 0) -> Resolved:
    """Read one variant-pack value. ``label`` names the tensor in errors, ``stream`` is the handle's
    GPU stream (0: the legacy default stream), the one a producer's stream must be ordered before."""
    try:
        if _is_torch_type(value):  # first: the hot path for GPU tensors
            return _from_torch(value, label)
        return _resolve(value, label, stream)
    except HipdnnError:
        raise
    except Exception as exc:  # a malformed interface dict, device tuple or hostile object
        raise _refuse(label, f"malformed buffer description ({_raised(exc)})") from exc


def _resolve(value: Any, label: str, stream: int) -> Resolved:
    if isinstance(value, np.ndarray):
        return _from_ndarray(value, label)
    if isinstance(value, bool):
        raise _refuse(label, f"{value!r} is not a buffer")
    if isinstance(value, (int, np.integer)):
        ptr = as_pointer(value, label)
        raise _refuse(
            label, f"bare pointer {ptr:#x} tells neither its size nor its element type; resolve reads only buffers"
        )
    if isinstance(value, np.generic):
        # a numpy scalar's __array_interface__ points into a temporary copy that dies with the dict
        raise _refuse(label, f"numpy scalar {value!r} is not a buffer")
    if _is_duck_device_tensor(value):
        return _from_duck(value, label)
    # A protocol attribute may raise (torch raises for bfloat16's __cuda_array_interface__): remember
    # why and try the next protocol, naming (and chaining) the first failure if none succeeds.
    failures: list[tuple[str, Exception]] = []
    for attr, on_device in (("__cuda_array_interface__", True), ("__array_interface__", False)):
        try:
            iface = getattr(value, attr, None)
        except Exception as exc:
            failures.append((f"cannot read {attr} ({_raised(exc)})", exc))
            continue
        if iface is not None:
            return _from_interface(iface, on_device, label, stream)
    try:
        has_dlpack = hasattr(value, "__dlpack__")
    except Exception as exc:
        failures.append((f"cannot read __dlpack__ ({_raised(exc)})", exc))
        has_dlpack = False
    if has_dlpack:
        return _from_dlpack(value, label, stream)
    if failures:
        message, first = failures[0]
        raise _refuse(label, message) from first
    raise _refuse(
        label,
        f"{type(value).__name__} is not a buffer (numpy array, torch tensor, __cuda_array_interface__, "
        "__array_interface__, __dlpack__ or int pointer)",
    )
