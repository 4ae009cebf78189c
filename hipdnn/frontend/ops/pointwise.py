"""Elementwise operations with numpy-style broadcasting of the inputs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hipdnn.frontend.ops.base import Operation, broadcast_shapes, register
from hipdnn.frontend.ops.shape_rules import ShapeRules, right_aligned_broadcast
from hipdnn.frontend.tensor import TensorAttributes
from hipdnn.frontend.types import POINTWISE_ARITY, DataType, PointwiseMode
from hipdnn.wire.NodeAttributes import NodeAttributes
from hipdnn.wire.PointwiseAttributes import PointwiseAttributesT


@register
class PointwiseNode(Operation):
    wire_type = NodeAttributes.PointwiseAttributes
    kind = "pointwise"

    def __init__(
        self,
        name: str,
        compute_data_type: DataType,
        mode: PointwiseMode,
        in_0: TensorAttributes,
        in_1: TensorAttributes | None,
        in_2: TensorAttributes | None,
        out_0: TensorAttributes,
    ) -> None:
        super().__init__(name, compute_data_type)
        self.mode = mode if type(mode) is PointwiseMode else PointwiseMode(mode)
        self.in_0, self.in_1, self.in_2, self.out_0 = in_0, in_1, in_2, out_0

    def inputs(self) -> list[TensorAttributes]:
        return [t for t in (self.in_0, self.in_1, self.in_2) if t is not None]

    def outputs(self) -> list[TensorAttributes]:
        return [self.out_0]

    def infer_and_validate(self, io_data_type: DataType, intermediate_data_type: DataType) -> None:
        inputs = self.inputs()
        arity = POINTWISE_ARITY.get(self.mode, 2)
        if len(inputs) != arity:
            raise self.fail(f"{self.mode.name} takes {arity} input(s), got {len(inputs)}")
        for t in inputs:
            self.require_rank(t, "input")
        if len(inputs) == 1:  # unary: the output has the input's shape (all wildcards when dynamic)
            out = inputs[0].get_dim()
            if inputs[0].is_dynamic():
                out = [-1] * len(out)
        elif self.any_dynamic(*inputs):
            # Broadcast compatibility of dynamic operands is checked at execute (spec 6.5).
            wild = broadcast_shapes([[d if not t.is_dynamic() else -1 for d in t.get_dim()] for t in inputs])
            assert wild is not None  # wildcards are compatible with everything
            out = wild
        else:
            out = self.check_broadcast([t.get_dim() for t in inputs], "input shapes")
        dt = intermediate_data_type if self.out_0.get_is_virtual() else io_data_type
        self.fill_output(self.out_0, out, dt)
        self.check_output_dims(self.out_0, "out_0", out)

    def shape_rules(self, rules: ShapeRules) -> None:
        inputs = self.inputs()
        rank = max(t.get_rank() for t in inputs)
        rules.produce(self.out_0, right_aligned_broadcast(rules, inputs, rank, "input shapes {S} do not broadcast"))

    def to_wire(self) -> Any:
        t = PointwiseAttributesT()
        t.operation = int(self.mode)
        t.in0TensorUid = self.in_0.get_uid()
        t.in1TensorUid = self.in_1.get_uid() if self.in_1 is not None else None
        t.in2TensorUid = self.in_2.get_uid() if self.in_2 is not None else None
        t.out0TensorUid = self.out_0.get_uid()
        return t

    @classmethod
    def from_wire(
        cls, name: str, compute_data_type: DataType, table: Any, tensor: Callable[[int | None], Any]
    ) -> Operation:
        try:
            mode = PointwiseMode(table.operation)
        except ValueError:
            raise ValueError(f"unknown pointwise mode {table.operation}") from None
        return cls(
            name,
            compute_data_type,
            mode,
            tensor(table.in0TensorUid),
            tensor(table.in1TensorUid),
            tensor(table.in2TensorUid),
            tensor(table.out0TensorUid),
        )
