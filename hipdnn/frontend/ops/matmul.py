"""Batched matrix multiply: c[..., M, N] = a[..., M, K] @ b[..., K, N], batch dims broadcast."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hipdnn.frontend.ops.base import Operation, broadcast_shapes, register
from hipdnn.frontend.tensor import TensorAttributes
from hipdnn.frontend.types import DataType
from hipdnn.wire.MatmulAttributes import MatmulAttributesT
from hipdnn.wire.NodeAttributes import NodeAttributes


@register
class MatmulNode(Operation):
    wire_type = NodeAttributes.MatmulAttributes
    kind = "matmul"

    def __init__(
        self, name: str, compute_data_type: DataType, a: TensorAttributes, b: TensorAttributes, c: TensorAttributes
    ) -> None:
        super().__init__(name, compute_data_type)
        self.a, self.b, self.c = a, b, c

    def inputs(self) -> list[TensorAttributes]:
        return [self.a, self.b]

    def outputs(self) -> list[TensorAttributes]:
        return [self.c]

    def infer_and_validate(self, io_data_type: DataType, intermediate_data_type: DataType) -> None:
        self.require_rank(self.a, "a", min_rank=2)
        self.require_rank(self.b, "b", min_rank=2)
        a_dims, b_dims = self.a.get_dim(), self.b.get_dim()
        m, k = a_dims[-2:]
        k2, n = b_dims[-2:]
        if k != k2:
            raise self.fail(f"inner dims disagree: a {a_dims} has K={k}, b {b_dims} has K={k2}")
        batch = broadcast_shapes([a_dims[:-2], b_dims[:-2]])
        if batch is None:
            raise self.fail(f"batch dims of a {a_dims[:-2]} and b {b_dims[:-2]} do not broadcast")
        c_dims = batch + [m, n]
        dt = intermediate_data_type if self.c.get_is_virtual() else io_data_type
        self.fill_output(self.c, c_dims, dt)
        self.check_output_dims(self.c, "c", c_dims)

    def to_wire(self) -> Any:
        t = MatmulAttributesT()
        t.aTensorUid, t.bTensorUid, t.cTensorUid = self.a.get_uid(), self.b.get_uid(), self.c.get_uid()
        return t

    @classmethod
    def from_wire(
        cls, name: str, compute_data_type: DataType, table: Any, tensor: Callable[[int | None], Any]
    ) -> Operation:
        return cls(name, compute_data_type, tensor(table.aTensorUid), tensor(table.bTensorUid), tensor(table.cTensorUid))
