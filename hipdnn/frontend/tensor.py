"""Graph tensors: chainable attribute objects, as in cudnn-frontend's Python API."""

from __future__ import annotations

from collections.abc import Sequence

from hipdnn.frontend.args import (
    INT64_MAX,
    INT64_MIN,
    as_int,
    bool_arg,
    enum_arg,
    int_arg,
    is_int,
    refuse,
    show,
    str_arg,
)
from hipdnn.frontend.types import DataType


def _int_list(values: Sequence[int], what: str, name: str) -> list[int]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise refuse(f"tensor {name!r}: {what}", f"{show(values)} must be a sequence of ints")
    out = [v if type(v) is int else _element(v, values, what, name) for v in values]
    return out


def _element(v: object, values: Sequence[int], what: str, name: str) -> int:
    if not is_int(v):
        raise refuse(f"tensor {name!r}: {what}", f"{show(list(values))} must hold ints, not {type(v).__name__}")
    return as_int(v)


#: A dim whose value is given at execute time (dynamic tensors only; spec section 6.3).
DYNAMIC_DIM = -1


def compact_strides(dims: Sequence[int]) -> list[int]:
    """Row-major (last dim fastest) strides for ``dims``."""
    strides = [1] * len(dims)
    for i in range(len(dims) - 2, -1, -1):
        strides[i] = strides[i + 1] * max(int(dims[i + 1]), 1)
    return strides


class TensorAttributes:
    """One tensor of a graph. Setters return the tensor so calls chain:
    ``o.set_output(True).set_dim([...]).set_stride([...]).set_uid(4)``."""

    def __init__(
        self,
        name: str = "",
        dim: Sequence[int] | None = None,
        stride: Sequence[int] | None = None,
        data_type: DataType | None = None,
        uid: int | None = None,
        is_virtual: bool = False,
    ) -> None:
        self._name = name if type(name) is str else str_arg(name, "tensor name")
        self._dim: list[int] = _int_list(dim, "dim", name) if dim is not None else []
        self._stride: list[int] = _int_list(stride, "stride", name) if stride is not None else []
        self._data_type = (
            enum_arg(DataType, data_type, f"tensor {name!r}: data_type") if data_type is not None else DataType.NOT_SET
        )
        self._uid: int | None = None
        self._uid_assigned = False
        if uid is not None:
            self.set_uid(uid)
        self._is_virtual = (
            is_virtual if type(is_virtual) is bool else bool_arg(is_virtual, f"tensor {name!r}: is_virtual")
        )
        self._is_dynamic = False

    DYNAMIC_DIM = DYNAMIC_DIM

    # -- setters (chainable) -----------------------------------------------------------------
    def set_name(self, name: str) -> TensorAttributes:
        self._name = str_arg(name, f"tensor {self._name!r}: name")
        return self

    def set_dim(self, dim: Sequence[int]) -> TensorAttributes:
        self._dim = _int_list(dim, "dim", self._name)
        return self

    def set_stride(self, stride: Sequence[int]) -> TensorAttributes:
        self._stride = _int_list(stride, "stride", self._name)
        return self

    def set_data_type(self, data_type: DataType) -> TensorAttributes:
        self._data_type = enum_arg(DataType, data_type, f"tensor {self._name!r}: data_type")
        return self

    def set_uid(self, uid: int) -> TensorAttributes:
        self._uid = int_arg(uid, f"tensor {self._name!r}: uid", INT64_MIN, INT64_MAX)
        self._uid_assigned = False
        return self

    def set_is_virtual(self, is_virtual: bool) -> TensorAttributes:
        self._is_virtual = bool_arg(is_virtual, f"tensor {self._name!r}: is_virtual")
        return self

    def set_is_dynamic(self, is_dynamic: bool) -> TensorAttributes:
        self._is_dynamic = bool_arg(is_dynamic, f"tensor {self._name!r}: is_dynamic")
        return self

    def mark_dynamic(self) -> TensorAttributes:
        """Declare the tensor dynamic (spec section 6): its ``-1`` dims (``hipdnn.DYNAMIC_DIM``) are given
        at execute time through overrides, and its strides are an axis order (0 = innermost) that the
        execute-time strides must respect. The graph must have the override flag set."""
        return self.set_is_dynamic(True)

    def set_output(self, is_output: bool) -> TensorAttributes:
        """An output the user reads: not virtual, so it gets a pointer in the variant pack."""
        return self.set_is_virtual(not bool_arg(is_output, f"tensor {self._name!r}: is_output"))

    # -- getters -----------------------------------------------------------------------------
    def get_name(self) -> str:
        return self._name

    def get_dim(self) -> list[int]:
        return list(self._dim)

    def get_stride(self) -> list[int]:
        return list(self._stride)

    def get_data_type(self) -> DataType:
        return self._data_type

    def get_uid(self) -> int | None:
        return self._uid

    def has_uid(self) -> bool:
        return self._uid is not None and not self._uid_assigned

    def get_is_virtual(self) -> bool:
        return self._is_virtual

    def is_virtual(self) -> bool:
        return self._is_virtual

    def is_dynamic(self) -> bool:
        return self._is_dynamic

    def get_is_dynamic(self) -> bool:
        return self._is_dynamic

    def get_rank(self) -> int:
        return len(self._dim)

    def _infer_layout(self, dims: list[int] | None, strides: list[int] | None) -> None:
        """Dims and strides the graph inferred (lists of ints it built itself: no argument checks)."""
        if dims is not None:
            self._dim = dims
        if strides is not None:
            self._stride = strides

    def _auto_uid(self, uid: int) -> None:
        self._uid = uid
        self._uid_assigned = True

    def __repr__(self) -> str:
        return (
            f"TensorAttributes(name={self._name!r}, uid={self._uid}, dim={self._dim}, stride={self._stride}, "
            f"data_type={self._data_type.name}, virtual={self._is_virtual}, dynamic={self._is_dynamic})"
        )

    # Tensors are variant-pack keys: identity semantics.
    __hash__ = object.__hash__
