"""The scale and mask options shared by SDPA forward and backward, and their wire mapping.

Both nodes carry the same attributes (``attn_scale``, ``use_causal_mask``, ``diagonal_alignment``,
the band bounds, padding with ``seq_len_q``/``seq_len_kv``, ``bias``, ``use_alibi_mask``) and both wire
tables the same fields, so the mapping lives here once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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
