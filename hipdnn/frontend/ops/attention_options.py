"""The scale and mask options shared by SDPA forward and backward, and their wire mapping.

Both nodes carry the same attributes (``attn_scale``, ``use_causal_mask``, ``diagonal_alignment``,
the band bounds, padding with ``seq_len_q``/``seq_len_kv``, ``bias``, ``use_alibi_mask``) and both wire
tables the same fields, so the mapping lives here once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hipdnn.frontend.args import INT64_MAX, check_float
from hipdnn.frontend.tensor import TensorAttributes
from hipdnn.frontend.types import DiagonalAlignment


def _uid(t: TensorAttributes | None) -> int | None:
    return t.get_uid() if t is not None else None


def write_options(node: Any, table: Any) -> None:
    """Copy the node's scale and mask options onto its wire table (object API)."""
    if isinstance(node.attn_scale, TensorAttributes):
        table.scaleTensorUid = node.attn_scale.get_uid()
    elif node.attn_scale is not None:
        table.attnScaleValue = float(node.attn_scale)
    # The wire format has one causal flag per alignment; set together they would intersect.
    bottom_right = node.diagonal_alignment == DiagonalAlignment.BOTTOM_RIGHT
    table.causalMask = node.use_causal_mask and not bottom_right
    table.causalMaskBottomRight = node.use_causal_mask and bottom_right
    table.diagonalAlignment = int(node.diagonal_alignment)
    table.leftBound = node.diagonal_band_left_bound
    table.rightBound = node.diagonal_band_right_bound
    table.paddingMask = node.use_padding_mask
    table.seqLenQTensorUid = _uid(node.seq_len_q)
    table.seqLenKvTensorUid = _uid(node.seq_len_kv)
    table.attnMaskTensorUid = _uid(node.bias)
    table.alibiMask = node.use_alibi_mask


def read_options(table: Any, tensor: Callable[[int | None], Any]) -> dict[str, Any]:
    """The node constructor's option keywords, read back from a wire table."""
    alignment = DiagonalAlignment(table.diagonalAlignment)
    if table.causalMaskBottomRight:
        alignment = DiagonalAlignment.BOTTOM_RIGHT
    scale: float | TensorAttributes | None = tensor(table.scaleTensorUid)
    if scale is None and table.attnScaleValue is not None:
        scale = float(table.attnScaleValue)
    return {
        "attn_scale": scale,
        "use_causal_mask": bool(table.causalMask or table.causalMaskBottomRight),
        "diagonal_alignment": alignment,
        "diagonal_band_left_bound": table.leftBound,
        "diagonal_band_right_bound": table.rightBound,
        "use_padding_mask": bool(table.paddingMask),
        "seq_len_q": tensor(table.seqLenQTensorUid),
        "seq_len_kv": tensor(table.seqLenKvTensorUid),
        "bias": tensor(table.attnMaskTensorUid),
        "use_alibi_mask": bool(table.alibiMask),
    }


def check_options(node: Any, q: TensorAttributes, k: TensorAttributes) -> None:
    """Rules on the options shared by SDPA forward and backward; raises through ``node.fail``.

    The option tensors must fit the attention they modify: a scale tensor holds one value, sequence
    lengths are [B, 1, 1, 1], and a bias broadcasts to the scores [B, Hq, Sq, Skv] (each dim equal or 1).
    Shape relations are skipped when a tensor involved is dynamic (spec 6.5)."""
    if isinstance(node.attn_scale, float):
        check_float(node.attn_scale, f"{node.kind} node {node.name!r}: attn_scale")
    for role, bound in (("left", node.diagonal_band_left_bound), ("right", node.diagonal_band_right_bound)):
        if bound is not None and bound < 0:
            raise node.fail(f"diagonal_band_{role}_bound {bound} must be >= 0")
        if bound is not None and bound > INT64_MAX:
            raise node.fail(f"diagonal_band_{role}_bound {bound} is outside the int64 range the wire format stores")
    if node.use_padding_mask and (node.seq_len_q is None or node.seq_len_kv is None):
        raise node.fail("use_padding_mask needs seq_len_q and seq_len_kv tensors")
    b, hq, sq, _ = q.get_dim()
    skv = k.get_dim()[2]
    scale = node.attn_scale
    if isinstance(scale, TensorAttributes) and not scale.is_dynamic() and any(d != 1 for d in scale.get_dim()):
        raise node.fail(f"attn_scale tensor {scale.get_name()!r} must hold one value, has dims {scale.get_dim()}")
    for role, t in (("seq_len_q", node.seq_len_q), ("seq_len_kv", node.seq_len_kv)):
        if t is None or t.is_dynamic() or q.is_dynamic():
            continue
        if t.get_dim() != [b, 1, 1, 1]:
            raise node.fail(f"{role} tensor {t.get_name()!r} must have dims [{b}, 1, 1, 1], has {t.get_dim()}")
    bias = node.bias
    if bias is not None and not (bias.is_dynamic() or q.is_dynamic() or k.is_dynamic()):
        scores = [b, hq, sq, skv]
        dims = bias.get_dim()
        if len(dims) != 4 or any(d not in (1, s) for d, s in zip(dims, scores)):
            raise node.fail(
                f"bias tensor {bias.get_name()!r} with dims {dims} does not broadcast to the scores {scores}"
            )
