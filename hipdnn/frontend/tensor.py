"""Graph tensors: chainable attribute objects, as in cudnn-frontend's Python API."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NoReturn

from hipdnn.backend.values import resolve
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
from hipdnn.frontend.types import DataType, ErrorCode, HipdnnError


def _int_list(values: Sequence[int], what: str, name: str) -> list[int]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise refuse(f"tensor {name!r}: {what}", f"{show(values)} must be a sequence of ints")
    out = [v if type(v) is int else _element(v, values, what, name) for v in values]
    return out


def _element(v: object, values: Sequence[int], what: str, name: str) -> int:
    if not is_int(v):
        raise refuse(f"tensor {name!r}: {what}", f"{show(list(values))} must hold ints, not {type(v).__name__}")
    return as_int(v)


def _read_only(attribute: str) -> NoReturn:
    raise AttributeError(
        f"TensorAttributes.{attribute} is read-only: call set_{attribute}(...) (setters return the tensor and chain)"
    )


#: A dim whose value is given at execute time (dynamic tensors only; spec section 6.3).
DYNAMIC_DIM = -1


def layout_of(value: object, what: str, data_type: DataType | None = None) -> tuple[list[int], list[int], DataType]:
    """Dims, strides (in elements) and data type of an array-like value, read the way a variant pack
    reads it (hipdnn.backend.values). Strides of extent-1 axes do not matter and are made compact."""
    try:
        resolved = resolve(value, what)
    except HipdnnError as exc:  # a graph argument, not a variant-pack value
        raise HipdnnError(ErrorCode.INVALID_VALUE, exc.message) from None
    if resolved.release is not None:  # a consumed DLPack capsule: nothing of it is kept
        resolved.release()
    dims = list(resolved.shape)
    if resolved.strides is None:
        raise refuse(what + ":", "the value's byte strides are not whole elements")
    if data_type is not None:
        dt = enum_arg(DataType, data_type, what + ": data_type")
    elif resolved.dtype_code >= 0 and resolved.dtype_code in set(DataType):
        dt = DataType(resolved.dtype_code)
    else:
        name = resolved.dtype_name or "unknown"
        raise refuse(what + ":", f"element type {name!r} has no hipdnn DataType; pass data_type=")
    compact = compact_strides(dims)
    strides = [c if d == 1 else s for d, s, c in zip(dims, resolved.strides, compact, strict=True)]
    return dims, strides, dt


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
        self._ragged_offset: TensorAttributes | None = None

    DYNAMIC_DIM = DYNAMIC_DIM

    # -- setters (chainable) -----------------------------------------------------------------
    def set_name(self, name: str) -> TensorAttributes:
        """The name (in messages and the serialized graph)."""
        self._name = str_arg(name, f"tensor {self._name!r}: name")
        return self

    def set_dim(self, dim: Sequence[int]) -> TensorAttributes:
        """The dims. Strides never given follow them (compact, row-major)."""
        self._dim = _int_list(dim, "dim", self._name)
        return self

    def set_stride(self, stride: Sequence[int]) -> TensorAttributes:
        """The strides, in elements (for a dynamic tensor: an axis order, 0 = innermost)."""
        self._stride = _int_list(stride, "stride", self._name)
        return self

    def set_data_type(self, data_type: DataType) -> TensorAttributes:
        """The element type."""
        self._data_type = enum_arg(DataType, data_type, f"tensor {self._name!r}: data_type")
        return self

    def set_uid(self, uid: int) -> TensorAttributes:
        """The uid (variant packs may use it as the key); unset, validation assigns one."""
        self._uid = int_arg(uid, f"tensor {self._name!r}: uid", INT64_MIN, INT64_MAX)
        self._uid_assigned = False
        return self

    def set_is_virtual(self, is_virtual: bool) -> TensorAttributes:
        """Virtual: an intermediate between nodes, given no buffer (``set_output(True)`` clears it)."""
        self._is_virtual = bool_arg(is_virtual, f"tensor {self._name!r}: is_virtual")
        return self

    def set_is_dynamic(self, is_dynamic: bool) -> TensorAttributes:
        """Whether the tensor is dynamic (see :meth:`mark_dynamic`)."""
        self._is_dynamic = bool_arg(is_dynamic, f"tensor {self._name!r}: is_dynamic")
        return self

    def mark_dynamic(self) -> TensorAttributes:
        """Declare the tensor dynamic (spec section 6): its ``-1`` dims (``hipdnn.DYNAMIC_DIM``) are given
        at execute time through overrides, and its strides are an axis order (0 = innermost) that the
        execute-time strides must respect. The graph must have the override flag set."""
        return self.set_is_dynamic(True)

    def set_ragged_offset(self, ragged_offset: TensorAttributes | None) -> TensorAttributes:
        """Pack the tensor's sequences (cudnn-frontend's ``set_ragged_offset``, rfcs/0012): ``ragged_offset``
        is an INT32 or INT64 tensor ``[B + 1, 1, 1, 1]`` of the graph, given at execute, whose element
        ``b`` is the offset (in elements) at which batch ``b`` starts; it replaces ``b * stride[0]``.
        The tensor keeps its dims ``[B, H, S, D]`` (maxima) and its other strides (THD packing:
        ``[S*H*D, D, H*D, 1]``); the node's ``seq_len_q`` / ``seq_len_kv`` (padding mask) give each
        sequence's length. Served on SDPA's q, k, v, o, stats (and dO, dQ, dK, dV of the backward).
        ``None`` clears it."""
        if ragged_offset is not None and not isinstance(ragged_offset, TensorAttributes):
            raise refuse(
                f"tensor {self._name!r}: ragged_offset", f"must be a tensor or None, not {type(ragged_offset).__name__}"
            )
        if ragged_offset is self:
            raise refuse(f"tensor {self._name!r}: ragged_offset", "cannot be the tensor itself")
        self._ragged_offset = ragged_offset
        return self

    def set_output(self, is_output: bool) -> TensorAttributes:
        """An output the user reads: not virtual, so it gets a pointer in the variant pack."""
        return self.set_is_virtual(not bool_arg(is_output, f"tensor {self._name!r}: is_output"))

    # -- getters -----------------------------------------------------------------------------
    def get_name(self) -> str:
        """The name."""
        return self._name

    def get_dim(self) -> list[int]:
        """The dims (a copy)."""
        return list(self._dim)

    def get_stride(self) -> list[int]:
        """The strides given (or inferred by the node writing the tensor); never given: compact
        row-major strides for the dims (for a dynamic tensor, the row-major axis order)."""
        if self._stride or not self._dim:
            return list(self._stride)
        if self._is_dynamic:
            return list(range(len(self._dim) - 1, -1, -1))
        return compact_strides(self._dim)

    def has_stride(self) -> bool:
        """Whether strides were given (or inferred by a node) rather than defaulted from the dims."""
        return bool(self._stride)

    def get_data_type(self) -> DataType:
        """The element type (NOT_SET until given or inferred at validation)."""
        return self._data_type

    def get_uid(self) -> int | None:
        """The uid given, or assigned at validation; None before either."""
        return self._uid

    def has_uid(self) -> bool:
        """Whether a uid was given (an assigned one does not count)."""
        return self._uid is not None and not self._uid_assigned

    def get_is_virtual(self) -> bool:
        """Whether the tensor is virtual (an intermediate without a buffer)."""
        return self._is_virtual

    def is_virtual(self) -> bool:
        """Whether the tensor is virtual (an intermediate without a buffer)."""
        return self._is_virtual

    def is_dynamic(self) -> bool:
        """Whether the tensor is dynamic (shape given per call)."""
        return self._is_dynamic

    def get_is_dynamic(self) -> bool:
        """Whether the tensor is dynamic (shape given per call)."""
        return self._is_dynamic

    def get_ragged_offset(self) -> TensorAttributes | None:
        """The ragged-offset tensor (:meth:`set_ragged_offset`), or None."""
        return self._ragged_offset

    def get_rank(self) -> int:
        """The number of dims."""
        return len(self._dim)

    # -- read-only views, for code that prints and inspects (assign through the set_* methods) ----
    @property
    def name(self) -> str:
        """The name (read-only view of ``get_name()``)."""
        return self._name

    @name.setter
    def name(self, value: object) -> None:
        _read_only("name")

    @property
    def dim(self) -> list[int]:
        """The dims (read-only view of ``get_dim()``)."""
        return self.get_dim()

    @dim.setter
    def dim(self, value: object) -> None:
        _read_only("dim")

    @property
    def stride(self) -> list[int]:
        """The strides (read-only view of ``get_stride()``)."""
        return self.get_stride()

    @stride.setter
    def stride(self, value: object) -> None:
        _read_only("stride")

    @property
    def data_type(self) -> DataType:
        """The element type (read-only view of ``get_data_type()``; prints as ``DataType.FLOAT``)."""
        return self._data_type

    @data_type.setter
    def data_type(self, value: object) -> None:
        _read_only("data_type")

    @property
    def uid(self) -> int | None:
        """The uid (read-only view of ``get_uid()``)."""
        return self._uid

    @uid.setter
    def uid(self, value: object) -> None:
        _read_only("uid")

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
            f"TensorAttributes(name={self._name!r}, uid={self._uid}, dim={self._dim}, stride={self.get_stride()}, "
            f"data_type={self._data_type.name}, virtual={self._is_virtual}, dynamic={self._is_dynamic})"
        )

    # Tensors are variant-pack keys: identity semantics.
    __hash__ = object.__hash__
