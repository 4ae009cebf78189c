"""The contract every operation module fulfils, and the registry that maps wire union types to them."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeVar

from hipdnn.frontend.ops.shape_rules import ShapeRules
from hipdnn.frontend.tensor import DYNAMIC_DIM, TensorAttributes, compact_strides
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

    def ragged_roles(self) -> list[TensorAttributes]:
        """The tensors of this node that may carry a ragged offset (none, but for SDPA's)."""
        return []

    @abstractmethod
    def infer_and_validate(self, io_data_type: DataType, intermediate_data_type: DataType) -> None:
        """Check the node's rules and fill in unset output dims, strides and data types."""

    @abstractmethod
    def shape_rules(self, rules: ShapeRules) -> None:
        """State, with ``rules``' builders, what must hold between the node's operands and the dims
        each output has, on the concrete shapes of one execute call (overrides and dynamic tensors
        give them). The compiled execute core checks these on every call that changes a shape."""

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
        order_reference: Sequence[int] | None = None,
    ) -> None:
        """Give an output its inferred dims, strides and data type where the user did not set them.
        Strides follow the axis order of ``order_reference`` (an input's strides), else row-major.
        Inferred wildcard dims make the output dynamic, with an axis order for strides (spec 6.3)."""
        have = tensor.get_dim()
        if not have:
            have = [int(d) for d in dims]
            tensor._infer_layout(have, None)
        if DYNAMIC_DIM in have:
            tensor.set_is_dynamic(True)
        if not tensor.has_stride():  # defaulted (compact) strides give way to the inferred order
            if tensor.is_dynamic():
                rank = len(have)
                reference = list(order_reference) if order_reference is not None else list(range(rank, 0, -1))
                tensor._infer_layout(None, axis_order_values(reference))
            elif order_reference is None:
                tensor._infer_layout(None, compact_strides(have))
            else:
                tensor._infer_layout(None, strides_in_order_of(order_reference, have))
        if tensor.get_data_type() == DataType.NOT_SET:
            tensor.set_data_type(default_data_type)

    def check_output_dims(self, tensor: TensorAttributes, role: str, dims: Sequence[int]) -> None:
        """A user-set output shape must agree with the inferred one (wildcards agree with anything)."""
        have = tensor.get_dim()
        if have == dims:
            return
        if len(have) != len(dims) or any(a != b and DYNAMIC_DIM not in (a, b) for a, b in zip(have, dims)):
            raise self.fail(f"{role} {tensor.get_name()!r} has dims {have}, inferred {list(dims)}")

    @staticmethod
    def any_dynamic(*tensors: TensorAttributes | None) -> bool:
        """Value-dependent checks are skipped when an operand involved is dynamic (spec 6.5)."""
        return any(t is not None and t.is_dynamic() for t in tensors)

    def check_broadcast(self, shapes: Sequence[Sequence[int]], what: str) -> list[int]:
        out = broadcast_shapes(shapes)
        if out is None:
            raise self.fail(f"{what} {[list(s) for s in shapes]} do not broadcast")
        return out


def broadcast_shapes(shapes: Sequence[Sequence[int]]) -> list[int] | None:
    """numpy-style broadcast of ``shapes`` (right-aligned; 1 stretches); None when incompatible.
    A wildcard (-1) is compatible with anything; it survives unless a concrete dim > 1 decides."""
    first = shapes[0]
    if all(s == first for s in shapes):
        return list(first)  # the common case, and what the loop below gives for equal shapes
    rank = max(len(s) for s in shapes)
    out = [1] * rank
    for shape in shapes:
        offset = rank - len(shape)
        for i, d in enumerate(shape):
            j = offset + i
            if d == DYNAMIC_DIM:
                if out[j] == 1:
                    out[j] = DYNAMIC_DIM
            elif out[j] == DYNAMIC_DIM:
                if d != 1:
                    out[j] = d
            elif out[j] == 1:
                out[j] = d
            elif d not in (1, out[j]):
                return None
    return out


def axis_order_values(reference_strides: Sequence[int]) -> list[int]:
    """The axis order of ``reference_strides`` written as a dynamic tensor's strides: each axis's
    position counted from the innermost (0), larger reference stride = outer, ties by axis index."""
    rank = len(reference_strides)
    outer_first = sorted(range(rank), key=lambda i: (-reference_strides[i], i))
    order = [0] * rank
    for position, axis in enumerate(outer_first):
        order[axis] = rank - 1 - position
    return order


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
