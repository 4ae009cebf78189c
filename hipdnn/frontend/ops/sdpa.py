"""Scaled dot-product attention, forward: o = softmax(scale * q @ k^T + masks) @ v."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hipdnn.frontend.ops.attention_options import (
    SdpaAttributes,
    check_options,
    check_ragged,
    is_paged,
    read_options,
    write_options,
)
from hipdnn.frontend.ops.base import Operation, register
from hipdnn.frontend.ops.sdpa_fp8 import Fp8Scaling, check_fp8, read_fp8, write_fp8
from hipdnn.frontend.ops.shape_rules import ShapeRules
from hipdnn.frontend.tensor import TensorAttributes
from hipdnn.frontend.types import DataType
from hipdnn.wire.NodeAttributes import NodeAttributes
from hipdnn.wire.SdpaAttributes import SdpaAttributesT


@register
class SdpaNode(Operation):
    """q [B, Hq, Sq, D], k [B, Hk, Skv, D], v [B, Hk, Skv, Dv] -> o [B, Hq, Sq, Dv] and, with
    ``generate_stats``, stats [B, Hq, Sq, 1] (natural-log log-sum-exp of each row's scores). With
    ``fp8`` (Graph.sdpa_fp8) the FP8 forward: its factors are inputs, amax_s and amax_o outputs
    (hipdnn/frontend/ops/sdpa_fp8.py)."""

    wire_type = NodeAttributes.SdpaAttributes
    kind = "sdpa"

    def __init__(
        self,
        name: str,
        compute_data_type: DataType,
        q: TensorAttributes,
        k: TensorAttributes,
        v: TensorAttributes,
        o: TensorAttributes,
        stats: TensorAttributes | None,
        options: SdpaAttributes,
        fp8: Fp8Scaling | None = None,
    ) -> None:
        super().__init__(name, compute_data_type)
        self.q, self.k, self.v, self.o, self.stats = q, k, v, o, stats
        #: scale and mask options (hipdnn.SdpaAttributes), as checked by the graph or read from the wire
        self.options = options
        #: the FP8 forward's factors and amax outputs (None: a plain SDPA)
        self.fp8 = fp8

    def inputs(self) -> list[TensorAttributes]:
        offsets = [off for t in self.ragged_roles() if (off := t.get_ragged_offset()) is not None]
        scaling = self.fp8.inputs() if self.fp8 is not None else []
        return [self.q, self.k, self.v] + [t for _, t in self.options.tensors()] + scaling + offsets

    def ragged_roles(self) -> list[TensorAttributes]:
        return [self.q, self.k, self.v, self.o] + ([self.stats] if self.stats is not None else [])

    def outputs(self) -> list[TensorAttributes]:
        amax = self.fp8.outputs() if self.fp8 is not None else []
        return [self.o] + ([self.stats] if self.stats is not None else []) + amax

    def infer_and_validate(self, io_data_type: DataType, intermediate_data_type: DataType) -> None:
        q, k, v = self.q, self.k, self.v
        for role, t in (("q", q), ("k", k), ("v", v)):
            self.require_rank(t, role, rank=4)
        # Value-dependent checks are skipped when an operand they involve is dynamic (spec 6.5);
        # execute checks them again with the real shapes (shape_rules).
        self._check_shapes(
            q.get_dim(),
            k.get_dim(),
            v.get_dim(),
            dynamic={"q": q.is_dynamic(), "k": k.is_dynamic(), "v": v.is_dynamic()},
        )
        check_options(self, q, k)
        if self.fp8 is not None:
            check_fp8(self, io_data_type)
        o_dims, stats_dims = self._output_dims(q.get_dim(), v.get_dim())
        self.fill_output(self.o, o_dims, io_data_type, order_reference=q.get_stride())
        self.check_output_dims(self.o, "o", o_dims)
        if self.stats is not None:
            self.fill_output(self.stats, stats_dims, DataType.FLOAT)
            self.check_output_dims(self.stats, "stats", stats_dims)
        roles = [("q", q), ("k", k), ("v", v), ("o", self.o), ("stats", self.stats)]
        check_ragged(self, roles)

    def _check_shapes(self, q: list[int], k: list[int], v: list[int], dynamic: dict[str, bool] | None = None) -> None:
        dyn = dynamic or {}

        def involved(*roles: str) -> bool:
            return any(dyn.get(r, False) for r in roles)

        b, hq, _, d = q
        bk, hk, skv, dk = k
        bv, hv, skv_v, _ = v
        if is_paged(self.options):
            # k and v are caches [num_blocks, Hk, block_size, D]: their batch and length are the
            # tables' (check_paged)
            if d != dk:
                raise self.fail(f"q head dim {d} differs from k head dim {dk}")
            if hk != hv:
                raise self.fail(f"k has {hk} heads but v has {hv}")
            if hq % hk != 0:
                raise self.fail(f"q heads {hq} are not a multiple of kv heads {hk}")
            return
        if not involved("q", "k", "v") and not (b == bk == bv):
            raise self.fail(f"batch sizes differ: q {b}, k {bk}, v {bv}")
        if not involved("q", "k") and d != dk:
            raise self.fail(f"q head dim {d} differs from k head dim {dk}")
        if not involved("k", "v") and skv != skv_v:
            raise self.fail(f"k sequence length {skv} differs from v sequence length {skv_v}")
        if not involved("k", "v") and hk != hv:
            raise self.fail(f"k has {hk} heads but v has {hv}")
        if not involved("q", "k") and hq % hk != 0:
            raise self.fail(f"q heads {hq} are not a multiple of kv heads {hk}")

    @staticmethod
    def _output_dims(q: list[int], v: list[int]) -> tuple[list[int], list[int]]:
        b, hq, sq, _ = q
        dv = v[3]
        return [b, hq, sq, dv], [b, hq, sq, 1]

    def shape_rules(self, rules: ShapeRules) -> None:
        q, k, v, r = self.q, self.k, self.v, rules
        kt, vt = self.options.paged_attention_k_table, self.options.paged_attention_v_table
        if kt is not None and vt is not None:
            # paged: the tables carry the batch; the caches' block counts and sizes are their own
            r.equal([r.dim(q, 0), r.dim(kt, 0), r.dim(vt, 0)], "batch sizes differ: q {0}, page tables {1}, {2}")
        else:
            r.equal([r.dim(q, 0), r.dim(k, 0), r.dim(v, 0)], "batch sizes differ: q {0}, k {1}, v {2}")
            r.equal([r.dim(k, 2), r.dim(v, 2)], "k sequence length {0} differs from v sequence length {1}")
        r.equal([r.dim(q, 3), r.dim(k, 3)], "q head dim {0} differs from k head dim {1}")
        r.equal([r.dim(k, 1), r.dim(v, 1)], "k has {0} heads but v has {1}")
        r.multiple(r.dim(q, 1), r.dim(k, 1), "q heads {0} are not a multiple of kv heads {1}")
        rows = [r.ref(r.dim(q, 0)), r.ref(r.dim(q, 1)), r.ref(r.dim(q, 2))]
        r.produce(self.o, rows + [r.ref(r.dim(v, 3))])
        if self.stats is not None:
            r.produce(self.stats, rows + [r.const(1)])
        for amax in self.fp8.outputs() if self.fp8 is not None else []:
            r.produce(amax, [r.const(1)] * 4)

    def to_wire(self) -> Any:
        t = SdpaAttributesT()
        t.qTensorUid, t.kTensorUid = self.q.get_uid(), self.k.get_uid()
        t.vTensorUid, t.oTensorUid = self.v.get_uid(), self.o.get_uid()
        t.statsTensorUid = self.stats.get_uid() if self.stats is not None else None
        t.generateStats = self.stats is not None
        write_options(self.options, t)
        if self.fp8 is not None:
            write_fp8(self.fp8, t)
        return t

    @classmethod
    def from_wire(
        cls, name: str, compute_data_type: DataType, table: Any, tensor: Callable[[int | None], Any]
    ) -> Operation:
        return cls(
            name,
            compute_data_type,
            q=tensor(table.qTensorUid),
            k=tensor(table.kTensorUid),
            v=tensor(table.vTensorUid),
            o=tensor(table.oTensorUid),
            stats=tensor(table.statsTensorUid),
            options=read_options(table, tensor),
            fp8=read_fp8(table, tensor),
        )
