"""Batched matrix multiply: c[..., M, N] = a[..., M, K] @ b[..., K, N], batch dims broadcast."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hipdnn.frontend.ops.base import Operation, broadcast_shapes, register
from hipdnn.frontend.ops.shape_rules import ShapeRules
from hipdnn.frontend.tensor import DYNAMIC_DIM, TensorAttributes
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
        # K and batch compatibility are value-dependent: skipped for dynamic operands (spec 6.5).
        c_dims = self._c_dims(self.a.get_dim(), self.b.get_dim(), check=not self.any_dynamic(self.a, self.b))
        dt = intermediate_data_type if self.c.get_is_virtual() else io_data_type
        self.fill_output(self.c, c_dims, dt)
        self.check_output_dims(self.c, "c", c_dims)

    def _c_dims(self, a_dims: list[int], b_dims: list[int], check: bool) -> list[int]:
        m, k = a_dims[-2:]
        k2, n = b_dims[-2:]
        if check and k != k2:
            raise self.fail(f"inner dims disagree: a {a_dims} has K={k}, b {b_dims} has K={k2}")
        batch = broadcast_shapes([a_dims[:-2], b_dims[:-2]])
        if batch is None:
            if check:
                raise self.fail(f"batch dims of a {a_dims[:-2]} and b {b_dims[:-2]} do not broadcast")
            batch = [DYNAMIC_DIM] * (max(len(a_dims), len(b_dims)) - 2)
        return batch + [m, n]

    def shape_rules(self, rules: ShapeRules) -> None:
        a, b, r = self.a, self.b, rules
        r.equal([r.dim(a, -1), r.dim(b, -2)], "inner dims disagree: a {s0} has K={0}, b {s1} has K={1}", [a, b])
        ra, rb = a.get_rank() - 2, b.get_rank() - 2
        batch = max(ra, rb)
        message = "batch dims of a {s0} and b {s1} do not broadcast"
        exprs = []
        for axis in range(batch):
            refs = [r.dim(t, axis - (batch - n)) for t, n in ((a, ra), (b, rb)) if axis >= batch - n]
            exprs.append(r.broadcast(refs, message, [a, b]))
        r.produce(self.c, exprs + [r.ref(r.dim(a, -2)), r.ref(r.dim(b, -1))])

    def to_wire(self) -> Any:
        t = MatmulAttributesT()
        t.aTensorUid, t.bTensorUid, t.cTensorUid = self.a.get_uid(), self.b.get_uid(), self.c.get_uid()
        return t

    @classmethod
    def from_wire(
        cls, name: str, compute_data_type: DataType, table: Any, tensor: Callable[[int | None], Any]
    ) -> Operation:
        return cls(
            name, compute_data_type, tensor(table.aTensorUid), tensor(table.bTensorUid), tensor(table.cTensorUid)
        )
