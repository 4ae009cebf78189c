"""Scaled dot-product attention, backward: (dq, dk, dv) from q, k, v, o, do and the forward's stats."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hipdnn.frontend.ops.attention_options import (
    SdpaAttributes,
    check_options,
    check_ragged,
    read_backward_options,
    write_backward_options,
)
from hipdnn.frontend.ops.base import Operation, register
from hipdnn.frontend.ops.sdpa_fp8_backward import (
    Fp8BackwardScaling,
    check_fp8_backward,
    read_fp8_backward,
    write_fp8_backward,
)
from hipdnn.frontend.ops.shape_rules import ShapeRules
from hipdnn.frontend.tensor import TensorAttributes
from hipdnn.frontend.types import DataType
from hipdnn.wire.NodeAttributes import NodeAttributes
from hipdnn.wire.SdpaBackwardAttributes import SdpaBackwardAttributesT


@register
class SdpaBackwardNode(Operation):
    """q [B, Hq, Sq, D], k [B, Hk, Skv, D], v [B, Hk, Skv, Dv], o and do [B, Hq, Sq, Dv], stats
    [B, Hq, Sq, 1] (the forward's natural-log log-sum-exp; -inf marks an empty row) -> dq, dk, dv with
    the dims of q, k, v. Masks and options mean what they mean for the forward (SdpaNode). With
    ``fp8`` (Graph.sdpa_fp8_backward) the FP8 backward: its factors are inputs, the four amax outputs
    (hipdnn/frontend/ops/sdpa_fp8_backward.py)."""

    wire_type = NodeAttributes.SdpaBackwardAttributes
    kind = "sdpa_backward"

    def __init__(
        self,
        name: str,
        compute_data_type: DataType,
        q: TensorAttributes,
        k: TensorAttributes,
        v: TensorAttributes,
        o: TensorAttributes,
        do: TensorAttributes,
        stats: TensorAttributes,
        dq: TensorAttributes,
        dk: TensorAttributes,
        dv: TensorAttributes,
        options: SdpaAttributes,
        fp8: Fp8BackwardScaling | None = None,
    ) -> None:
        super().__init__(name, compute_data_type)
        self.q, self.k, self.v, self.o, self.do, self.stats = q, k, v, o, do, stats
        self.dq, self.dk, self.dv = dq, dk, dv
        #: scale and mask options (hipdnn.SdpaAttributes), as checked by the graph or read from the wire
        self.options = options
        #: the FP8 backward's factors and amax outputs (None: a plain SDPA backward)
        self.fp8 = fp8

    def inputs(self) -> list[TensorAttributes]:
        offsets = [off for t in self.ragged_roles() if (off := t.get_ragged_offset()) is not None]
        scaling = self.fp8.inputs() if self.fp8 is not None else []
        tensors = [self.q, self.k, self.v, self.o, self.do, self.stats] + [t for _, t in self.options.tensors()]
        return tensors + scaling + offsets

    def ragged_roles(self) -> list[TensorAttributes]:
        return [self.q, self.k, self.v, self.o, self.do, self.stats, self.dq, self.dk, self.dv]

    def outputs(self) -> list[TensorAttributes]:
        return [self.dq, self.dk, self.dv] + (self.fp8.outputs() if self.fp8 is not None else [])

    def infer_and_validate(self, io_data_type: DataType, intermediate_data_type: DataType) -> None:
        roles = {"q": self.q, "k": self.k, "v": self.v, "o": self.o, "do": self.do, "stats": self.stats}
        for role, t in roles.items():
            self.require_rank(t, role, rank=4)
        self._check_shapes({r: t.get_dim() for r, t in roles.items()}, {r: t.is_dynamic() for r, t in roles.items()})
        check_options(self, self.q, self.k)
        for out, src, role in ((self.dq, self.q, "dq"), (self.dk, self.k, "dk"), (self.dv, self.v, "dv")):
            self.fill_output(out, src.get_dim(), io_data_type, order_reference=src.get_stride())
            self.check_output_dims(out, role, src.get_dim())
        if self.fp8 is not None:
            check_fp8_backward(self, io_data_type)
        check_ragged(self, [(r, t) for r, t in roles.items()] + [("dq", self.dq), ("dk", self.dk), ("dv", self.dv)])

    def _check_shapes(self, dims: Mapping[str, Sequence[int]], dynamic: dict[str, bool] | None = None) -> None:
        dyn = dynamic or {}

        def skip(*roles: str) -> bool:
            return any(dyn.get(r, False) for r in roles)

        b, hq, sq, d = dims["q"]
        bk, hk, skv, dk = dims["k"]
        bv, hv, skv_v, dv = dims["v"]
        if not skip("q", "k", "v") and not (b == bk == bv):
            raise self.fail(f"batch sizes differ: q {b}, k {bk}, v {bv}")
        if not skip("q", "k") and d != dk:
            raise self.fail(f"q head dim {d} differs from k head dim {dk}")
        if not skip("k", "v") and (skv != skv_v or hk != hv):
            raise self.fail(f"k {list(dims['k'])} and v {list(dims['v'])} differ in heads or sequence length")
        if not skip("q", "k") and hq % hk != 0:
            raise self.fail(f"q heads {hq} are not a multiple of kv heads {hk}")
        for role, want in (("o", [b, hq, sq, dv]), ("do", [b, hq, sq, dv]), ("stats", [b, hq, sq, 1])):
            if not skip(role, "q", "v") and list(dims[role]) != want:
                raise self.fail(f"{role} has dims {list(dims[role])}, expected {want} from q and v")

    def shape_rules(self, rules: ShapeRules) -> None:
        q, k, v, r = self.q, self.k, self.v, rules
        r.equal([r.dim(q, 0), r.dim(k, 0), r.dim(v, 0)], "batch sizes differ: q {0}, k {1}, v {2}")
        r.equal([r.dim(q, 3), r.dim(k, 3)], "q head dim {0} differs from k head dim {1}")
        kv_message = "k {s0} and v {s1} differ in heads or sequence length"
        r.equal([r.dim(k, 2), r.dim(v, 2)], kv_message, [k, v])
        r.equal([r.dim(k, 1), r.dim(v, 1)], kv_message, [k, v])
        r.multiple(r.dim(q, 1), r.dim(k, 1), "q heads {0} are not a multiple of kv heads {1}")
        rows = [r.ref(r.dim(q, 0)), r.ref(r.dim(q, 1)), r.ref(r.dim(q, 2))]
        for role, t, last in (
            ("o", self.o, r.ref(r.dim(v, 3))),
            ("do", self.do, r.ref(r.dim(v, 3))),
            ("stats", self.stats, r.const(1)),
        ):
            r.produce(t, rows + [last], role + " has dims {s0}, expected {want} from q and v", [t])
        for out, src in ((self.dq, q), (self.dk, k), (self.dv, v)):
            r.produce(out, [r.ref(d) for d in r.dims(src)])
        for amax in self.fp8.outputs() if self.fp8 is not None else []:
            r.produce(amax, [r.const(1)] * 4)

    def to_wire(self) -> Any:
        t = SdpaBackwardAttributesT()
        t.qTensorUid, t.kTensorUid, t.vTensorUid = self.q.get_uid(), self.k.get_uid(), self.v.get_uid()
        t.oTensorUid, t.doTensorUid, t.statsTensorUid = self.o.get_uid(), self.do.get_uid(), self.stats.get_uid()
        t.dqTensorUid, t.dkTensorUid, t.dvTensorUid = self.dq.get_uid(), self.dk.get_uid(), self.dv.get_uid()
        write_backward_options(self.options, t)
        if self.fp8 is not None:
            write_fp8_backward(self.fp8, t)
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
            do=tensor(table.doTensorUid),
            stats=tensor(table.statsTensorUid),
            dq=tensor(table.dqTensorUid),
            dk=tensor(table.dkTensorUid),
            dv=tensor(table.dvTensorUid),
            options=read_backward_options(table, tensor),
            fp8=read_fp8_backward(table, tensor),
        )
