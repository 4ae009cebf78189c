"""RMS and layer normalization, forward, over the trailing axes of x.

    rmsnorm:   y = x * inv_rms * scale + bias,              inv_rms = 1 / sqrt(mean(x^2) + eps)
    layernorm: y = (x - mean) * inv_variance * scale + bias, inv_variance = 1 / sqrt(var + eps)

The normalized axes are the trailing ``normalized_dim_count`` axes of x when given, else every axis
from the first one where scale (or bias), right-aligned against x, is not 1; with neither, the last
axis. scale and bias are optional and broadcast over x's normalized axes (1 elsewhere); the
statistics have x's dims with 1 on every normalized axis."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from hipdnn.frontend.args import check_float
from hipdnn.frontend.ops.base import Operation, register
from hipdnn.frontend.ops.shape_rules import ShapeRules
from hipdnn.frontend.tensor import DYNAMIC_DIM, TensorAttributes
from hipdnn.frontend.types import DataType, NormFwdPhase
from hipdnn.wire.LayernormAttributes import LayernormAttributesT
from hipdnn.wire.NodeAttributes import NodeAttributes
from hipdnn.wire.RMSNormAttributes import RMSNormAttributesT


class _NormNode(Operation):
    #: names of the statistics outputs, in order
    stat_roles: ClassVar[tuple[str, ...]]

    def __init__(
        self,
        name: str,
        compute_data_type: DataType,
        x: TensorAttributes,
        scale: TensorAttributes | None,
        bias: TensorAttributes | None,
        epsilon: float | TensorAttributes,
        y: TensorAttributes,
        stats: Sequence[TensorAttributes | None],
        phase: NormFwdPhase,
        normalized_dim_count: int | None,
    ) -> None:
        super().__init__(name, compute_data_type)
        self.x, self.scale, self.bias, self.epsilon, self.y = x, scale, bias, epsilon, y
        self.stats = list(stats)
        self.phase = NormFwdPhase(phase)
        self.normalized_dim_count = normalized_dim_count

    def inputs(self) -> list[TensorAttributes]:
        opt = [self.scale, self.bias] + ([self.epsilon] if isinstance(self.epsilon, TensorAttributes) else [])
        return [self.x] + [t for t in opt if t is not None]

    def outputs(self) -> list[TensorAttributes]:
        return [self.y] + [t for t in self.stats if t is not None]

    def norm_count(
        self, x_dims: Sequence[int], scale_dims: Sequence[int] | None, bias_dims: Sequence[int] | None
    ) -> int:
        rank = len(x_dims)
        if self.normalized_dim_count is not None:
            n = int(self.normalized_dim_count)
            if not 1 <= n <= rank:
                raise self.fail(f"normalized_dim_count {n} must be in 1..{rank} (the rank of x)")
            return n
        n = 0
        for dims in (scale_dims, bias_dims):
            if dims is None:
                continue
            offset = rank - len(dims)
            for i, d in enumerate(dims):
                if d != 1:
                    n = max(n, rank - (offset + i))
        return max(n, 1)

    def _shapes(
        self, x: Sequence[int], scale: Sequence[int] | None, bias: Sequence[int] | None, check: bool
    ) -> tuple[list[int], list[int]]:
        rank = len(x)
        n = self.norm_count(x, scale, bias)
        for role, dims in (("scale", scale), ("bias", bias)):
            if dims is None or not check:
                continue
            if len(dims) > rank:
                raise self.fail(f"{role} has dims {list(dims)}, more axes than x {list(x)}")
            offset = rank - len(dims)
            for i, d in enumerate(dims):
                axis = offset + i
                if d == 1:
                    continue
                if axis < rank - n:
                    raise self.fail(
                        f"{role} {list(dims)} varies along axis {axis}, which is not normalized "
                        f"(the last {n} axes of x {list(x)} are)"
                    )
                if d != x[axis] and DYNAMIC_DIM not in (d, x[axis]):
                    raise self.fail(f"{role} {list(dims)} does not broadcast to x {list(x)}")
        stat = [d if i < rank - n else 1 for i, d in enumerate(x)]
        return list(x), stat

    def infer_and_validate(self, io_data_type: DataType, intermediate_data_type: DataType) -> None:
        self.require_rank(self.x, "x")
        if isinstance(self.epsilon, float):
            check_float(self.epsilon, f"{self.kind} node {self.name!r}: epsilon")
            if self.epsilon < 0:
                raise self.fail(f"epsilon {self.epsilon} must be a non-negative number")
        elif self.epsilon.get_dim() and any(d != 1 for d in self.epsilon.get_dim()):
            raise self.fail(f"the epsilon tensor must hold one element, has dims {self.epsilon.get_dim()}")
        if self.phase == NormFwdPhase.TRAINING and any(t is None for t in self.stats):
            raise self.fail("TRAINING needs the statistics outputs")
        check = not self.any_dynamic(self.x, self.scale, self.bias)
        y_dims, stat_dims = self._shapes(
            self.x.get_dim(),
            self.scale.get_dim() if self.scale else None,
            self.bias.get_dim() if self.bias else None,
            check,
        )
        dt = intermediate_data_type if self.y.get_is_virtual() else io_data_type
        self.fill_output(self.y, y_dims, dt, order_reference=self.x.get_stride())
        self.check_output_dims(self.y, "y", y_dims)
        for role, t in zip(self.stat_roles, self.stats):
            if t is not None:
                self.fill_output(t, stat_dims, DataType.FLOAT)
                self.check_output_dims(t, role, stat_dims)

    def shape_rules(self, rules: ShapeRules) -> None:
        # The normalized axes follow from the dims frozen at build; on the others, scale and bias were
        # declared 1, which rule 7 (max shape) keeps at 1 under any override.
        x, r = self.x, rules
        rank = x.get_rank()
        n = self.norm_count(
            x.get_dim(), self.scale.get_dim() if self.scale else None, self.bias.get_dim() if self.bias else None
        )
        for role, t in (("scale", self.scale), ("bias", self.bias)):
            if t is None:
                continue
            offset = rank - t.get_rank()
            for i in range(t.get_rank()):
                if offset + i >= rank - n:
                    r.one_or_equal(
                        r.dim(t, i), r.dim(x, offset + i), role + " {s0} does not broadcast to x {s1}", [t, x]
                    )
        r.produce(self.y, [r.ref(d) for d in r.dims(x)])
        stat = [r.const(1) if i >= rank - n else r.ref(r.dim(x, i)) for i in range(rank)]
        for t in self.stats:
            if t is not None:
                r.produce(t, stat)

    def _fill_wire(self, t: Any) -> Any:
        t.forwardPhase = int(self.phase)
        t.xTensorUid, t.yTensorUid = self.x.get_uid(), self.y.get_uid()
        t.scaleTensorUid = self.scale.get_uid() if self.scale is not None else None
        t.biasTensorUid = self.bias.get_uid() if self.bias is not None else None
        if isinstance(self.epsilon, TensorAttributes):
            t.epsilonTensorUid = self.epsilon.get_uid()
        else:
            t.epsilonValue = float(self.epsilon)
        t.normalizedDimCount = self.normalized_dim_count
        return t

    @staticmethod
    def _epsilon(table: Any, tensor: Callable[[int | None], Any]) -> float | TensorAttributes:
        eps = tensor(table.epsilonTensorUid)
        if eps is None:
            eps = float(table.epsilonValue) if table.epsilonValue is not None else 1e-5
        return eps  # type: ignore[no-any-return]


@register
class RMSNormNode(_NormNode):
    wire_type = NodeAttributes.RMSNormAttributes
    kind = "rmsnorm"
    stat_roles = ("inv_rms",)

    def to_wire(self) -> Any:
        t = self._fill_wire(RMSNormAttributesT())
        t.invRmsTensorUid = self.stats[0].get_uid() if self.stats[0] is not None else None
        return t

    @classmethod
    def from_wire(
        cls, name: str, compute_data_type: DataType, table: Any, tensor: Callable[[int | None], Any]
    ) -> Operation:
        return cls(
            name,
            compute_data_type,
            tensor(table.xTensorUid),
            tensor(table.scaleTensorUid),
            tensor(table.biasTensorUid),
            cls._epsilon(table, tensor),
            tensor(table.yTensorUid),
            [tensor(table.invRmsTensorUid)],
            NormFwdPhase(table.forwardPhase),
            table.normalizedDimCount,
        )


@register
class LayerNormNode(_NormNode):
    wire_type = NodeAttributes.LayernormAttributes
    kind = "layernorm"
    stat_roles = ("mean", "inv_variance")

    def to_wire(self) -> Any:
        t = self._fill_wire(LayernormAttributesT())
        t.meanTensorUid = self.stats[0].get_uid() if self.stats[0] is not None else None
        t.invVarianceTensorUid = self.stats[1].get_uid() if self.stats[1] is not None else None
        return t

    @classmethod
    def from_wire(
        cls, name: str, compute_data_type: DataType, table: Any, tensor: Callable[[int | None], Any]
    ) -> Operation:
        return cls(
            name,
            compute_data_type,
            tensor(table.xTensorUid),
            tensor(table.scaleTensorUid),
            tensor(table.biasTensorUid),
            cls._epsilon(table, tensor),
            tensor(table.yTensorUid),
            [tensor(table.meanTensorUid), tensor(table.invVarianceTensorUid)],
            NormFwdPhase(table.forwardPhase),
            table.normalizedDimCount,
        )
