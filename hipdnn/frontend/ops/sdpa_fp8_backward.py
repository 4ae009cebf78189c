"""FP8 scaling of the SDPA backward (cudnn-frontend's ``sdpa_fp8_backward``; rfcs/0014-fp8-attention.md).

q, k, v, o and dO hold FP8 values standing for ``value * descale`` (o may also be FLOAT, HALF or
BFLOAT16, as the FP8 forward can write it); stats is the forward's log-sum-exp. With every factor a
one-element FLOAT tensor and the forward's masks:

    delta   = rowsum(dO * o) * descale_dO * descale_o
    P       = exp(q @ k^T * attn_scale * descale_q * descale_k - stats)      (masked entries 0)
    P8      = fp8(P * scale_s)                          (q's FP8 type)
    dV'     = (P8^T @ dO) * descale_s * descale_dO      amax_dV = max |dV'|;  dV = dV' * scale_dV
    dP      = (dO @ v^T) * descale_dO * descale_v
    dS      = P * (dP - delta) * attn_scale             amax_dP = max |dS|
    dS8     = fp8(dS * scale_dP)                        (dO's FP8 type)
    dQ'     = (dS8 @ k) * descale_dP * descale_k        amax_dQ = max |dQ'|;  dQ = dQ' * scale_dQ
    dK'     = (dS8^T @ q) * descale_dP * descale_q      amax_dK = max |dK'|;  dK = dK' * scale_dK

(with GQA, dK' and dV' of a kv head sum over the query heads that share it). dQ, dK, dV are in their
own data type (the graph's io type where unset): FP8, FLOAT, HALF or BFLOAT16. The node is an SDPA
backward node (SdpaBackwardAttributes' FP8 fields) and needs plugin API 1.6.0
(``hipdnn.plugins.FP8_BACKWARD_API_VERSION``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hipdnn.frontend.ops.sdpa_fp8 import (
    FP8_TYPES,
    check_factors,
    check_qkv,
    check_refused_options,
    effective_type,
    fill_amax,
    read_fields,
    write_fields,
)
from hipdnn.frontend.tensor import TensorAttributes
from hipdnn.frontend.types import DataType

#: the one-element FLOAT inputs, in cudnn-frontend's argument order
BACKWARD_SCALE_ROLES = (
    "descale_q",
    "descale_k",
    "descale_v",
    "descale_o",
    "descale_dO",
    "descale_s",
    "descale_dP",
    "scale_s",
    "scale_dQ",
    "scale_dK",
    "scale_dV",
    "scale_dP",
)

#: the amax outputs, in cudnn-frontend's order
BACKWARD_AMAX_ROLES = ("amax_dQ", "amax_dK", "amax_dV", "amax_dP")

#: what o and the gradients may be besides FP8
_FLOAT_TYPES = (DataType.FLOAT, DataType.HALF, DataType.BFLOAT16)


@dataclass
class Fp8BackwardScaling:
    """The per-tensor factors (inputs) and the four amax outputs of an FP8 SDPA backward."""

    descale_q: TensorAttributes
    descale_k: TensorAttributes
    descale_v: TensorAttributes
    descale_o: TensorAttributes
    descale_dO: TensorAttributes  # noqa: N815 (cudnn-frontend's spelling)
    descale_s: TensorAttributes
    descale_dP: TensorAttributes  # noqa: N815
    scale_s: TensorAttributes
    scale_dQ: TensorAttributes  # noqa: N815
    scale_dK: TensorAttributes  # noqa: N815
    scale_dV: TensorAttributes  # noqa: N815
    scale_dP: TensorAttributes  # noqa: N815
    amax_dQ: TensorAttributes  # noqa: N815
    amax_dK: TensorAttributes  # noqa: N815
    amax_dV: TensorAttributes  # noqa: N815
    amax_dP: TensorAttributes  # noqa: N815

    def inputs(self) -> list[TensorAttributes]:
        return [getattr(self, role) for role in BACKWARD_SCALE_ROLES]

    def outputs(self) -> list[TensorAttributes]:
        return [getattr(self, role) for role in BACKWARD_AMAX_ROLES]


def check_fp8_backward(node: Any, io_data_type: DataType) -> None:
    """The rules of an FP8 backward node, through ``node.fail``: q, k, v in one FP8 type, dO FP8 (its
    type is dS8's), o FP8 or a float type, stats FLOAT, the gradients FP8 or a float type, each factor
    a FLOAT tensor of one element, no option it is not defined with; fills the amax outputs."""
    f: Fp8BackwardScaling = node.fp8
    kind = "sdpa_fp8_backward"
    check_refused_options(node, kind)
    check_qkv(node, io_data_type, kind)
    do_type = effective_type(node.do, io_data_type)
    if do_type not in FP8_TYPES:
        raise node.fail(f"dO {node.do.get_name()!r} has data type {do_type.name}; {kind} takes FP8_E4M3 or FP8_E5M2")
    for role, t in (("o", node.o), ("dQ", node.dq), ("dK", node.dk), ("dV", node.dv)):
        dt = effective_type(t, io_data_type)
        if dt not in FP8_TYPES + _FLOAT_TYPES:
            raise node.fail(f"{role} {t.get_name()!r} has data type {dt.name}; {kind} takes FP8 or FLOAT/HALF/BFLOAT16")
    stats_type = node.stats.get_data_type()
    if stats_type not in (DataType.FLOAT, DataType.NOT_SET):
        raise node.fail(f"stats {node.stats.get_name()!r} must be FLOAT, is {stats_type.name}")
    check_factors(node, {role: getattr(f, role) for role in BACKWARD_SCALE_ROLES})
    fill_amax(node, {role: getattr(f, role) for role in BACKWARD_AMAX_ROLES})


#: every role, with the SdpaBackwardAttributes field (object API) that carries its tensor's uid
BACKWARD_WIRE_FIELDS = {
    "descale_q": "descaleQTensorUid",
    "descale_k": "descaleKTensorUid",
    "descale_v": "descaleVTensorUid",
    "descale_o": "descaleOTensorUid",
    "descale_dO": "descaleDoTensorUid",
    "descale_s": "descaleSTensorUid",
    "descale_dP": "descaleDpTensorUid",
    "scale_s": "scaleSTensorUid",
    "scale_dQ": "scaleDqTensorUid",
    "scale_dK": "scaleDkTensorUid",
    "scale_dV": "scaleDvTensorUid",
    "scale_dP": "scaleDpTensorUid",
    "amax_dQ": "amaxDqTensorUid",
    "amax_dK": "amaxDkTensorUid",
    "amax_dV": "amaxDvTensorUid",
    "amax_dP": "amaxDpTensorUid",
}


def write_fp8_backward(f: Fp8BackwardScaling, table: Any) -> None:
    write_fields(f, table, BACKWARD_WIRE_FIELDS)


def read_fp8_backward(table: Any, tensor: Callable[[int | None], Any]) -> Fp8BackwardScaling | None:
    """The node's FP8 scaling from the wire, or None when it has none (a partial set is refused)."""
    found = read_fields(table, BACKWARD_WIRE_FIELDS, tensor, "an SDPA backward node")
    return None if found is None else Fp8BackwardScaling(**found)
