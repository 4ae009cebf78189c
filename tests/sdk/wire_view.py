"""The Python side's view of a serialized graph, in the shape reader_driver's `dump` prints."""

from __future__ import annotations

import math
import struct
from typing import Any

from hipdnn.wire.Graph import GraphT

POINTWISE_OPTIONAL_UIDS = ("in_1", "in_2", "axis")
POINTWISE_FLOATS = (
    "relu_lower_clip",
    "relu_upper_clip",
    "relu_lower_clip_slope",
    "swish_beta",
    "elu_alpha",
    "softplus_beta",
)
SDPA_OPTIONAL_UIDS = (
    "attn_mask",
    "scale",
    "seq_len_q",
    "seq_len_kv",
    "seed",
    "offset",
    "dropout_mask",
    "dropout_scale",
    "page_table_k",
    "page_table_v",
    "block_mask",
    "sink_token",
    "descale_q",
    "descale_k",
    "descale_v",
    "descale_s",
    "scale_s",
    "scale_o",
    "stats",
    "max",
    "sum_exp",
    "rng_dump",
    "amax_s",
    "amax_o",
)
SDPA_FLAGS = ("alibi_mask", "padding_mask", "causal_mask", "causal_mask_bottom_right")
SDPA_OPTIONAL_FLOATS = ("dropout_probability", "attn_scale_value")
SDPA_OPTIONAL_INTS = ("left_bound", "right_bound", "max_seq_len_kv")
SDPA_ENUMS = ("diagonal_alignment", "mma_core_mode", "implementation")


def camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def f32_bits(v: float | None) -> int | None:
    if v is None:
        return None
    return int(struct.unpack("<I", struct.pack("<f", v))[0])


def f64_bits(v: float) -> int:
    return int(struct.unpack("<Q", struct.pack("<d", v))[0])


def _hex(s: Any) -> str:
    if s is None:
        return ""
    return (s if isinstance(s, bytes) else s.encode()).hex()


def _signed8(v: int) -> int:
    return v - 256 if v >= 128 else v


def _value(t: Any) -> Any:
    if not t.valueType:
        return None
    if t.valueType > 8:
        return {"type": t.valueType}
    v = t.value.value
    if t.valueType in (1, 2, 3, 6):  # floating kinds
        f = float(v)
        i = int(f) if -9.2e18 < f < 9.2e18 else 0
        return {"type": t.valueType, "double_bits": f64_bits(f), "int64": i}
    i = int(bool(v)) if t.valueType == 8 else int(v)
    return {"type": t.valueType, "double_bits": f64_bits(float(i)), "int64": i}


def _pointwise(a: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"mode": _signed8(a.operation), "in_0": a.in0TensorUid}
    for k in ("in_1", "in_2"):
        out[k] = getattr(a, camel(k + "_tensor_uid"))
    out["out_0"] = a.out0TensorUid
    out["axis"] = a.axisTensorUid
    for k in POINTWISE_FLOATS:
        out[k] = f32_bits(getattr(a, camel(k)))
    return out


def _sdpa(a: Any) -> dict[str, Any]:
    out: dict[str, Any] = {k: getattr(a, camel(k + "_tensor_uid")) for k in ("q", "k", "v", "o")}
    for k in SDPA_OPTIONAL_UIDS:
        out[k] = getattr(a, camel(k + "_tensor_uid"))
    gs = a.generateStats
    out["generate_stats"] = None if gs is None else int(bool(gs))
    for k in SDPA_FLAGS:
        out[k] = int(bool(getattr(a, camel(k))))
    for k in SDPA_OPTIONAL_FLOATS:
        out[k] = f32_bits(getattr(a, camel(k)))
    for k in SDPA_OPTIONAL_INTS:
        out[k] = getattr(a, camel(k))
    for k in SDPA_ENUMS:
        out[k] = _signed8(getattr(a, camel(k)))
    out["softcap"] = f32_bits(a.softcap)
    return out


def wire_view(buf: bytes) -> dict[str, Any]:
    g = GraphT.InitFromPackedBuf(buf, 0)
    view: dict[str, Any] = {
        "ok": 1,
        "name": _hex(g.name),
        "io_data_type": _signed8(g.ioDataType),
        "intermediate_data_type": _signed8(g.intermediateDataType),
        "compute_data_type": _signed8(g.computeDataType),
        "override": int(bool(g.isOverrideShapeEnabled)),
        "preferred_engine_id": g.preferredEngineId,
        "tensors": [],
        "nodes": [],
    }
    for t in g.tensors or []:
        dims = [int(d) for d in (t.dims if t.dims is not None else [])]
        strides = [int(s) for s in (t.strides if t.strides is not None else [])]
        view["tensors"].append(
            {
                "uid": t.uid,
                "name": _hex(t.name),
                "data_type": _signed8(t.dataType),
                "virtual": int(bool(t.virtual)),
                "dynamic": int(bool(getattr(t, "isDynamic", False))),
                "dims": dims,
                "strides": strides,
                "ragged": getattr(t, "raggedOffsetTensorUid", None),
                "value": _value(t),
            }
        )
    for n in g.nodes or []:
        node: dict[str, Any] = {
            "name": _hex(n.name),
            "compute_data_type": _signed8(n.computeDataType),
            "op_type": n.attributesType,
        }
        if n.attributesType == 2:
            node["pointwise"] = _pointwise(n.attributes)
        elif n.attributesType == 9:
            node["matmul"] = {
                "a": n.attributes.aTensorUid,
                "b": n.attributes.bTensorUid,
                "c": n.attributes.cTensorUid,
            }
        elif n.attributesType == 12:
            node["sdpa"] = _sdpa(n.attributes)
        view["nodes"].append(node)
    return view


def same(a: Any, b: Any) -> bool:
    """Equality where two float bit patterns that are both NaN count as equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def nan32(bits: int) -> bool:
    return math.isnan(struct.unpack("<f", struct.pack("<I", bits))[0])
