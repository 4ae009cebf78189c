"""Reduction of x over chosen axes: y keeps x's rank, with dim 1 on every reduced axis."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from hipdnn.frontend.ops.base import Operation, register
from hipdnn.frontend.ops.shape_rules import ShapeRules
from hipdnn.frontend.tensor import DYNAMIC_DIM, TensorAttributes
from hipdnn.frontend.types import DataType, ReductionMode
from hipdnn.wire.NodeAttributes import NodeAttributes
from hipdnn.wire.ReductionAttributes import ReductionAttributesT


@register
class ReductionNode(Operation):
    """``axes`` (set at construction, or read back from y's dims: the axes where y is 1) are reduced
    with ``mode``: ADD, MUL, MIN, MAX, AMAX (max |x|), AVG, NORM1 (sum |x|), NORM2 (sqrt sum x^2),
    MUL_NO_ZEROS (product of the non-zero elements)."""

    wire_type = NodeAttributes.ReductionAttributes
    kind = "reduction"

    def __init__(
        self,
        name: str,
        compute_data_type: DataType,
        mode: ReductionMode,
        x: TensorAttributes,
        y: TensorAttributes,
        axes: Sequence[int] | None,
    ) -> None:
        super().__init__(name, compute_data_type)
        self.mode = ReductionMode(mode)
        self.x, self.y = x, y
        self.axes = None if axes is None else sorted({int(a) for a in axes})

    def inputs(self) -> list[TensorAttributes]:
        return [self.x]

    def outputs(self) -> list[TensorAttributes]:
        return [self.y]

    def _axes(self, rank: int) -> list[int]:
        if self.axes is not None:
            return [a % rank for a in self.axes]
        y = self.y.get_dim()
        if len(y) == rank:
            return [i for i, d in enumerate(y) if d == 1]
        return list(range(rank))

    def _y_dims(self, x: Sequence[int]) -> list[int]:
        axes = self._axes(len(x))
        return [1 if i in axes else d for i, d in enumerate(x)]

    def infer_and_validate(self, io_data_type: DataType, intermediate_data_type: DataType) -> None:
        self.require_rank(self.x, "x")
        rank = self.x.get_rank()
        if self.axes is not None:
            bad = [a for a in self.axes if not -rank <= a < rank]
            if bad:
                raise self.fail(f"axes {bad} out of range for x of rank {rank}")
            self.axes = sorted({a % rank for a in self.axes})
        elif self.y.get_dim():
            y = self.y.get_dim()
            x = self.x.get_dim()
            if len(y) != rank or any(a not in (b, 1) and DYNAMIC_DIM not in (a, b) for a, b in zip(y, x)):
                raise self.fail(f"y {y} must have x's rank with each dim equal to x's {x} or 1")
        y_dims = self._y_dims(self.x.get_dim())
        dt = intermediate_data_type if self.y.get_is_virtual() else io_data_type
        self.fill_output(self.y, y_dims, dt, order_reference=self.x.get_stride())
        self.check_output_dims(self.y, "y", y_dims)
        if self.axes is None:
            self.axes = self._axes(rank)

    def shape_rules(self, rules: ShapeRules) -> None:
        rank = self.x.get_rank()
        axes = self._axes(rank)
        rules.produce(self.y, [rules.const(1) if i in axes else rules.ref(rules.dim(self.x, i)) for i in range(rank)])

    def to_wire(self) -> Any:
        t = ReductionAttributesT()
        t.mode = int(self.mode)
        t.xTensorUid, t.yTensorUid = self.x.get_uid(), self.y.get_uid()
        return t

    @classmethod
    def from_wire(
        cls, name: str, compute_data_type: DataType, table: Any, tensor: Callable[[int | None], Any]
    ) -> Operation:
        try:
            mode = ReductionMode(table.mode)
        except ValueError:
            raise ValueError(f"unknown reduction mode {table.mode}") from None
        return cls(name, compute_data_type, mode, tensor(table.xTensorUid), tensor(table.yTensorUid), None)
