"""The contract every operation module fulfils, and the registry that maps wire union types to them."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeVar

from hipdnn.frontend.tensor import TensorAttributes, compact_strides
from hipdnn.frontend.types import DataType, ErrorCode, HipdnnError


class Operation(ABC):
    """One node of a graph. Subclasses are small: their attributes, their validation rules and
    their shape inference, and the mapping to and from their wire table."""

    #: the NodeAttributes union type id of the wire table
    wire_type: ClassVar[int]
    #: a short name used in messages and default node names
    kind: ClassVar[str]

    def __init__(self, name: str, compute_data_type: DataType) -> None:
        self.name = name
        self.compute_data_type = compute_data_type

    @abstractmethod
    def inputs(self) -> list[TensorAttributes]:
        """Tensors read by the node (optional ones omitted when absent)."""

    @abstractmethod
    def outputs(self) -> list[TensorAttributes]:
        """Tensors written by the node."""

    @abstractmethod
    def infer_and_validate(self, io_data_type: DataType, intermediate_data_type: DataType) -> None:
        """Check the node's rules and fill in unset output dims, strides and data types."""

    @abstractmethod
    def to_wire(self) -> Any:
        """The node's attributes as a generated object-API table (``...AttributesT``)."""

    @classmethod
    @abstractmethod
    def from_wire(
        cls, name: str, compute_data_type: DataType, table: Any, tensor: Callable[[int | None], Any]
    ) -> Operation:
        """Rebuild the node from its wire table; ``tensor(uid)`` resolves uids (None stays None)."""

    # -- helpers shared by operations --------------------------------------------------------
    def fail(self, message: str) -> HipdnnError:
        return HipdnnError(ErrorCode.INVALID_VALUE, f"{self.kind} node {self.name!r}: {message}")

    def require_rank(self, tensor: TensorAttributes, role: str, rank: int | None = None, min_rank: int = 1) -> None:
        r = tensor.get_rank()
        if rank is not None and r != rank:
            raise self.fail(f"{role} {tensor.get_name()!r} must have rank {rank}, has dims {tensor.get_dim()}")
        if r < min_rank:
            raise self.fail(f"{role} {tensor.get_name()!r} must have rank >= {min_rank}, has dims {tensor.get_dim()}")

    @staticmethod
    def fill_output(
        tensor: TensorAttributes,
        dims: Sequence[int],
        default_data_type: DataType,
        strides: Sequence[int] | None = None,
    ) -> None:
        """Give an output its inferred dims (and compact or given strides, and a data type) where the
        user did not set them; a user-set shape must agree with the inferred one."""
        if not tensor.get_dim():
            tensor.set_dim(list(dims))
        if not tensor.get_stride():
            tensor.set_stride(list(strides) if strides is not None else compact_strides(tensor.get_dim()))
        if tensor.get_data_type() == DataType.NOT_SET:
            tensor.set_data_type(default_data_type)

    def check_output_dims(self, tensor: TensorAttributes, role: str, dims: Sequence[int]) -> None:
        if tensor.get_dim() != list(dims):
            raise self.fail(f"{role} {tensor.get_name()!r} has dims {tensor.get_dim()}, inferred {list(dims)}")


def broadcast_shapes(shapes: Sequence[Sequence[int]]) -> list[int] | None:
    """numpy-style broadcast of ``shapes`` (right-aligned; 1 stretches); None when incompatible."""
    rank = max(len(s) for s in shapes)
    out = [1] * rank
    for shape in shapes:
        offset = rank - len(shape)
        for i, d in enumerate(shape):
            j = offset + i
            if out[j] == 1:
                out[j] = d
            elif d not in (1, out[j]):
                return None
    return out


def strides_in_order_of(reference_strides: Sequence[int], dims: Sequence[int]) -> list[int]:
    """Compact strides for ``dims`` with the axis order of ``reference_strides`` (outermost = largest)."""
    order = sorted(range(len(dims)), key=lambda i: (-reference_strides[i], i))
    strides = [0] * len(dims)
    step = 1
    for axis in reversed(order):
        strides[axis] = step
        step *= max(int(dims[axis]), 1)
    return strides


OP = TypeVar("OP", bound=type[Operation])
OPERATIONS: dict[int, type[Operation]] = {}


def register(cls: OP) -> OP:
    """Class decorator: make an operation known to deserialization."""
    if cls.wire_type in OPERATIONS:
        raise RuntimeError(f"wire type {cls.wire_type} registered twice")
    OPERATIONS[cls.wire_type] = cls
    return cls
