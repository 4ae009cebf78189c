"""Variant-pack values as Python objects, for code that inspects them outside an execute call.

``Graph.execute`` does not use this module: the compiled execute core reads values itself (and
``hipdnn.backend.values.resolve`` for the kinds it does not read natively). These helpers expose
the same reading and the same buffer rule: ``to_buffer`` reduces a value to a :class:`Buffer`,
``check_buffer`` raises unless it can back a tensor. Bare int pointers cannot be checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hipdnn.backend import execute_core, values
from hipdnn.frontend.types import DataType, ErrorCode, HipdnnError

#: bytes per element of each data type
ITEMSIZE: dict[DataType, int] = {DataType(k): v for k, v in execute_core.ITEMSIZE.items()}

_NUMPY_NAMES: dict[DataType, str] = {
    DataType.FLOAT: "float32",
    DataType.HALF: "float16",
    DataType.DOUBLE: "float64",
    DataType.INT32: "int32",
    DataType.INT64: "int64",
    DataType.INT8: "int8",
    DataType.UINT8: "uint8",
    DataType.BFLOAT16: "bfloat16",
}


def numpy_dtype(data_type: DataType) -> np.dtype[Any]:
    """The numpy dtype for ``data_type`` (bfloat16 through ml_dtypes when installed); raises
    HipdnnError when numpy has none."""
    name = _NUMPY_NAMES.get(DataType(data_type))
    if name == "bfloat16":
        try:
            import ml_dtypes

            return np.dtype(ml_dtypes.bfloat16)  # type: ignore[no-any-return, unused-ignore]
        except ImportError:
            name = None
    if name is None:
        raise HipdnnError(ErrorCode.INVALID_VALUE, f"no numpy dtype for {DataType(data_type).name}")
    return np.dtype(name)


@dataclass(slots=True)
class Buffer:
    """A variant-pack value reduced to what execute needs."""

    ptr: int
    #: bytes addressable around ``ptr``: [low, high); None for a bare int pointer
    low: int | None = None
    high: int | None = None
    dtype: np.dtype[Any] | None = None
    shape: tuple[int, ...] | None = None
    strides_elems: tuple[int, ...] | None = None
    contiguous: bool = False
    on_device: bool = False
    itemsize: int | None = None
    #: the resolved record the execute core checks (None for a bare pointer)
    resolved: tuple[Any, ...] | None = None


def to_buffer(value: Any, what: str) -> Buffer:
    """Reduce a variant-pack value to a :class:`Buffer` (HipdnnError when it is not one)."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        ptr = int(value)
        if ptr <= 0 or ptr >= 1 << 64:
            raise HipdnnError(ErrorCode.INVALID_VARIANT_PACK, f"{what}: pointer {ptr} is not a valid address")
        return Buffer(ptr)
    r = values.resolve(value, what)
    try:
        dtype: np.dtype[Any] | None = np.dtype(r.dtype_name) if r.dtype_name else None
    except TypeError:
        dtype = None
    return Buffer(
        r.ptr, r.low, r.high, dtype, tuple(r.shape), r.strides, r.contiguous, r.on_device, r.itemsize, tuple(r)
    )


def check_buffer(
    buf: Buffer,
    *,
    where: str,
    data_type: DataType,
    dims: Sequence[int],
    strides: Sequence[int],
    overridden: bool,
) -> None:
    """Raise INVALID_VALUE unless ``buf`` can back the tensor at ``dims``/``strides``: the exact
    element type, a matching layout (or, with an override, a contiguous backing store), and every
    addressed byte inside the buffer. The rule is the execute core's own."""
    execute_core.check_buffer(buf.resolved, where, int(data_type), dims, strides, overridden)
