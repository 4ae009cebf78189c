"""FP8 scaling of the SDPA forward (cudnn-frontend's ``sdpa_fp8``; rfcs/0014-fp8-attention.md).

q, k, v hold FP8 values (E4M3 or E5M2) that stand for ``value * descale``; the node computes, with
every per-tensor factor a one-element FLOAT tensor:

    S      = (q @ k^T) * attn_scale * descale_q * descale_k, then the masks
    P      = softmax(S)                      (stats: its natural-log log-sum-exp, as sdpa's)
    amax_s = max |P|                         over the whole tensor, before scale_s
    P8     = fp8(P * scale_s)                (q's FP8 type; round to nearest even, saturating)
    O'     = (P8 @ v) * descale_s * descale_v
    amax_o = max |O'|                        over the whole tensor, before scale_o
    o      = O' * scale_o                    rounded to o's data type (the graph's io type: FP8)

The node is an SDPA node (the wire's SdpaAttributes table, whose descale / scale / amax uids carry
these tensors) and needs plugin API 1.5.0 (``hipdnn.plugins.FP8_API_VERSION``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hipdnn.frontend.tensor import TensorAttributes
from hipdnn.frontend.types import DataType, ErrorCode, HipdnnError

#: the FP8 element types the node takes for q, k and v
FP8_TYPES = (DataType.FP8_E4M3, DataType.FP8_E5M2)

#: the one-element FLOAT inputs, in cudnn-frontend's argument order
SCALE_ROLES = ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o")

#: the amax outputs, in cudnn-frontend's order
AMAX_ROLES = ("amax_s", "amax_o")


@dataclass
class Fp8Scaling:
    """The per-tensor factors (inputs) and the two amax outputs of an FP8 SDPA forward."""

    descale_q: TensorAttributes
    descale_k: TensorAttributes
    descale_v: TensorAttributes
    descale_s: TensorAttributes
    scale_s: TensorAttributes
    scale_o: TensorAttributes
    amax_s: TensorAttributes
    amax_o: TensorAttributes

    def inputs(self) -> list[TensorAttributes]:
        return [getattr(self, role) for role in SCALE_ROLES]

    def outputs(self) -> list[TensorAttributes]:
        return [getattr(self, role) for role in AMAX_ROLES]


#: options an FP8 node refuses, with what to say (the FP8 forward is defined without them here; ragged
#: tensors are refused too)
_REFUSED_OPTIONS = {
    "bias": "a bias",
    "use_alibi_mask": "ALiBi",
    "softcap": "softcapping",
    "paged_attention_k_table": "paged K/V",
}


def check_refused_options(node: Any, kind: str) -> None:
    """What an FP8 node (forward or backward) is not defined with, refused naming the option."""
    opts = node.options
    for option, what in _REFUSED_OPTIONS.items():
        if getattr(opts, option, None) not in (None, False):
            raise node.fail(f"{what} is not supported with FP8 scaling ({kind})")
    if isinstance(opts.attn_scale, TensorAttributes):
        raise node.fail(f"{kind} takes attn_scale as a number, not a tensor")
    if any(t.get_ragged_offset() is not None for t in node.ragged_roles()):
        raise node.fail(f"ragged tensors (set_ragged_offset) are not supported with FP8 scaling ({kind})")


def effective_type(t: TensorAttributes, io_data_type: DataType) -> DataType:
    dt = t.get_data_type()
    return io_data_type if dt == DataType.NOT_SET else dt


def check_qkv(node: Any, io_data_type: DataType, kind: str) -> DataType:
    """q, k and v in one FP8 type (the graph's io type where unset); returns it."""
    types = {}
    for role in ("q", "k", "v"):
        t: TensorAttributes = getattr(node, role)
        dt = effective_type(t, io_data_type)
        if dt not in FP8_TYPES:
            raise node.fail(f"{role} {t.get_name()!r} has data type {dt.name}; {kind} takes FP8_E4M3 or FP8_E5M2")
        types[role] = dt
    if len(set(types.values())) != 1:
        have = ", ".join(f"{r} {d.name}" for r, d in types.items())
        raise node.fail(f"q, k and v must share one FP8 type, have {have}")
    return types["q"]


def check_factors(node: Any, factors: Mapping[str, TensorAttributes]) -> None:
    """Each factor a FLOAT tensor (set so where unset) of one element."""
    for role, t in factors.items():
        if t.get_data_type() not in (DataType.FLOAT, DataType.NOT_SET):
            raise node.fail(f"{role} {t.get_name()!r} must be FLOAT, is {t.get_data_type().name}")
        if t.get_data_type() == DataType.NOT_SET:
            t.set_data_type(DataType.FLOAT)
        if not t.is_dynamic() and any(d != 1 for d in t.get_dim()):
            raise node.fail(f"{role} {t.get_name()!r} must hold one value, has dims {t.get_dim()}")


def fill_amax(node: Any, outputs: Mapping[str, TensorAttributes]) -> None:
    """Each amax output FLOAT [1, 1, 1, 1]."""
    for role, t in outputs.items():
        node.fill_output(t, [1, 1, 1, 1], DataType.FLOAT)
        node.check_output_dims(t, role, [1, 1, 1, 1])
        if t.get_data_type() != DataType.FLOAT:
            raise node.fail(f"{role} {t.get_name()!r} must be FLOAT, is {t.get_data_type().name}")


def check_fp8(node: Any, io_data_type: DataType) -> None:
    """The rules of an FP8 forward node, through ``node.fail``: q, k, v in one FP8 type (the graph's io
    type where unset), each factor a FLOAT tensor of one element, no option it is not defined with;
    fills the amax outputs (FLOAT [1, 1, 1, 1])."""
    f: Fp8Scaling = node.fp8
    check_refused_options(node, "sdpa_fp8")
    check_qkv(node, io_data_type, "sdpa_fp8")
    check_factors(node, {role: getattr(f, role) for role in SCALE_ROLES})
    fill_amax(node, {role: getattr(f, role) for role in AMAX_ROLES})


#: every role, with the SdpaAttributes field (object API) that carries its tensor's uid
WIRE_FIELDS = {
    "descale_q": "descaleQTensorUid",
    "descale_k": "descaleKTensorUid",
    "descale_v": "descaleVTensorUid",
    "descale_s": "descaleSTensorUid",
    "scale_s": "scaleSTensorUid",
    "scale_o": "scaleOTensorUid",
    "amax_s": "amaxSTensorUid",
    "amax_o": "amaxOTensorUid",
}


def write_fields(scaling: Any, table: Any, fields: Mapping[str, str]) -> None:
    """Each role's tensor uid into its wire field (object API)."""
    for role, field in fields.items():
        setattr(table, field, getattr(scaling, role).get_uid())


def read_fields(
    table: Any, fields: Mapping[str, str], tensor: Callable[[int | None], Any], what: str
) -> dict[str, Any] | None:
    """Each role's tensor from its wire field, or None when none is set. Any of them set makes the node
    an FP8 node, which must then have all: a partial set is refused here, each missing role named."""
    uids = {role: getattr(table, field) for role, field in fields.items()}
    if all(u is None for u in uids.values()):
        return None
    missing = [role for role, u in uids.items() if u is None]
    if missing:
        raise HipdnnError(ErrorCode.INVALID_VALUE, f"{what} with FP8 scaling lacks the {', '.join(missing)} tensor(s)")
    return {role: tensor(u) for role, u in uids.items()}


def write_fp8(f: Fp8Scaling, table: Any) -> None:
    write_fields(f, table, WIRE_FIELDS)


def read_fp8(table: Any, tensor: Callable[[int | None], Any]) -> Fp8Scaling | None:
    """The node's FP8 scaling from the wire, or None when it has none (a partial set is refused)."""
    found = read_fields(table, WIRE_FIELDS, tensor, "an SDPA node")
    return None if found is None else Fp8Scaling(**found)
