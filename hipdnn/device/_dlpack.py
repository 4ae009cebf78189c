"""DLPack export of device memory: a legacy ``dltensor`` capsule built with ctypes.

Each export owns a DLManagedTensor (and its shape and strides) kept in ``_exports`` under its address,
together with a reference to the buffer so the memory outlives every consumer. The consumer's call of
the deleter drops that entry; a capsule nobody consumed drops it from its own destructor.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from hipdnn.backend.dlpack_abi import DLDataType, DLDevice, DLManagedTensor
from hipdnn.backend.errors import ErrorCode, HipdnnError

KDL_CUDA = 2
KDL_ROCM = 10

_NAME = b"dltensor"


@dataclass
class _Export:
    managed: DLManagedTensor
    shape: Any
    strides: Any
    owner: object  # the buffer: its memory must outlive the consumer


_exports: dict[int, _Export] = {}
_lock = threading.Lock()


def _release(address: int | None) -> None:
    if address:
        with _lock:
            _exports.pop(address, None)


# C-callable trampolines. CFUNCTYPE takes the GIL itself, so a consumer may call the deleter from C
# without holding it. Module-level: they must live as long as any capsule.
_deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(_release)
_DELETER_ADDRESS = ctypes.cast(_deleter, ctypes.c_void_p).value

# Own prototypes (not ctypes.pythonapi's shared function objects, whose argtypes other code may set).
# The capsule arrives as a bare address: converting a dying object to py_object would revive it.
_capsule_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi)
)
_capsule_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi)
)


def _destroy_capsule(capsule: int | None) -> None:
    # Still named "dltensor": nobody consumed it, so the capsule owns the tensor.
    if capsule and _capsule_is_valid(capsule, _NAME):
        _release(_capsule_get_pointer(capsule, _NAME))


_destructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(_destroy_capsule)
_DESTRUCTOR_ADDRESS = ctypes.cast(_destructor, ctypes.c_void_p).value


def dl_dtype(dtype: np.dtype[Any]) -> tuple[int, int]:
    """(DLPack type code, bits) of a numpy dtype (bfloat16 through ml_dtypes)."""
    if dtype.name == "bfloat16":
        return 4, 16
    codes = {"f": 2, "i": 0, "u": 1, "b": 6}
    if dtype.kind not in codes:
        raise HipdnnError(ErrorCode.INVALID_VALUE, f"dtype {dtype} has no DLPack type")
    return codes[dtype.kind], dtype.itemsize * 8


def export(
    owner: object,
    ptr: int,
    device: tuple[int, int],
    shape: tuple[int, ...],
    strides: tuple[int, ...],
    dtype: np.dtype[Any],
) -> object:
    """A ``dltensor`` capsule over ``ptr``; ``strides`` in elements."""
    code, bits = dl_dtype(dtype)
    ndim = len(shape)
    shape_arr = (ctypes.c_int64 * max(ndim, 1))(*shape)
    strides_arr = (ctypes.c_int64 * max(ndim, 1))(*strides)
    managed = DLManagedTensor()
    t = managed.dl_tensor
    t.data = ptr
    t.device = DLDevice(device[0], device[1])
    t.ndim = ndim
    t.dtype = DLDataType(code, bits, 1)
    t.shape = ctypes.addressof(shape_arr)
    t.strides = ctypes.addressof(strides_arr)
    t.byte_offset = 0
    managed.manager_ctx = None
    managed.deleter = _DELETER_ADDRESS
    address = ctypes.addressof(managed)
    with _lock:
        _exports[address] = _Export(managed, shape_arr, strides_arr, owner)
    try:
        return _capsule_new(address, _NAME, _DESTRUCTOR_ADDRESS)
    except BaseException:
        _release(address)
        raise


def live_exports() -> int:
    """How many exported tensors are still held by a consumer or an unconsumed capsule (for tests)."""
    with _lock:
        return len(_exports)
