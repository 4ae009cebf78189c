"""transformers' attention backend "hipdnn": ``register_transformers()`` adds it to transformers'
``AttentionInterface`` (the attention function) and ``AttentionMaskInterface`` (the mask it is handed:
transformers builds no mask at all for an implementation without one, which would drop padding
silently). The mask is sdpa's: None where ``is_causal`` says everything, else a boolean
``[B, 1, Sq, Skv]`` tensor, which becomes hipdnn's additive bias.

transformers is imported only by ``register_transformers``; this module loads without it."""

from __future__ import annotations

import logging
from typing import Any

import torch

from hipdnn.frontend import ErrorCode, HipdnnError
from hipdnn.torch.attention import scaled_dot_product_attention

#: the name models select: ``model.set_attn_implementation("hipdnn")``
TRANSFORMERS_NAME = "hipdnn"

_log = logging.getLogger("hipdnn.torch")

#: keyword arguments transformers' attention modules pass that change the result, and why hipdnn refuses each
_REFUSED = {
    "s_aux": "attention sinks (s_aux)",
    "position_bias": "a position bias (T5-style relative attention)",
}


def _refuse(what: str) -> HipdnnError:
    return HipdnnError(
        ErrorCode.GRAPH_NOT_SUPPORTED,
        f"attn_implementation={TRANSFORMERS_NAME!r}: {what} is not supported; use attn_implementation='eager'",
    )


def hipdnn_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: query [B, Hq, Sq, D], key/value [B, Hkv, Skv, D]
    (from the cache), returns ``(output [B, Sq, Hq, D], None)`` as ``sdpa_attention_forward`` does.
    Grouped-query attention runs natively (keys and values are never repeated). ``softcap`` (Gemma 2
    style models pass ``attn_logit_softcapping``) is honored: the scaled scores are capped, then the
    mask is added, as transformers' eager attention does."""
    for name, what in _REFUSED.items():
        if kwargs.get(name) is not None:
            raise _refuse(what)  # never a fallback: transformers' sdpa function would ignore it
    if kwargs.get("output_attentions", False):
        _log.warning("attn_implementation=%r returns no attention weights (output_attentions)", TRANSFORMERS_NAME)
    if attention_mask is not None and not isinstance(attention_mask, torch.Tensor):
        raise _refuse(f"a mask of type {type(attention_mask).__name__} (only None or a tensor)")
    if attention_mask is not None and attention_mask.dim() != 4:
        raise _refuse(f"a {attention_mask.dim()}-D attention mask (the mask interface gives 4-D ones)")
    q_length = query.shape[2]
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    # as sdpa_attention_forward: the causal flag stands in for the mask only when there is none
    # (transformers returns None for a plain causal mask) and for more than one query row
    causal = bool(q_length > 1 and attention_mask is None and causal)
    out = scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask=attention_mask,
        dropout_p=dropout,
        is_causal=causal,
        scale=scaling,
        enable_gqa=query.shape[1] != key.shape[1],
        softcap=kwargs.get("softcap"),
    )
    assert isinstance(out, torch.Tensor)
    return out.transpose(1, 2).contiguous(), None


def register_transformers() -> None:
    """Register "hipdnn" with transformers (attention function and mask function); idempotent.
    Raises ImportError when transformers (4.53 or later: ``AttentionMaskInterface``) is missing."""
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    except ImportError as exc:
        raise ImportError(
            "hipdnn.torch.register_transformers needs transformers 4.53 or later (AttentionInterface and "
            "AttentionMaskInterface)"
        ) from exc
    AttentionInterface.register(TRANSFORMERS_NAME, hipdnn_attention_forward)
    AttentionMaskInterface.register(TRANSFORMERS_NAME, sdpa_mask)


__all__ = ["TRANSFORMERS_NAME", "hipdnn_attention_forward", "register_transformers"]
