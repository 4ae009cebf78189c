"""An ``attn_mask`` as hipdnn's additive bias, and the shape helpers it shares with
``scaled_dot_product_attention``'s argument handling (hipdnn/torch/attention.py). Its own module so
that the plan cache's compiled short path (plans.PlanCache.cpu_calls) converts a boolean mask with
exactly the general path's function."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from hipdnn.frontend import ErrorCode, HipdnnError


def _fail(message: str, code: ErrorCode = ErrorCode.INVALID_VALUE) -> HipdnnError:
    return HipdnnError(code, "hipdnn.torch.scaled_dot_product_attention: " + message)


def pad_rank(t: torch.Tensor, rank: int) -> torch.Tensor:
    while t.dim() < rank:
        t = t.unsqueeze(0)
    return t


def expand_batch(t: torch.Tensor, batch: Sequence[int]) -> torch.Tensor:
    """``t`` with its batch dims (all but the last three) broadcast to ``batch``; a copy is made
    later only if the result has expanded (stride-0) axes."""
    if tuple(t.shape[:-3]) == tuple(batch):
        return t
    return t.expand(*batch, *t.shape[-3:])


def flatten_batch(t: torch.Tensor) -> torch.Tensor:
    """[*batch, H, S, D] -> [prod(batch), H, S, D] (a view where the strides allow, else a copy)."""
    if t.dim() == 4:
        return t
    return t.reshape(-1, *t.shape[-3:])


def to4d(t: torch.Tensor, mode: str) -> torch.Tensor:
    """A tensor padded to the inputs' rank, in hipdnn's [..., H, S, D] form (see ``_normalize``)."""
    if mode == "2d":
        return t.reshape(1, 1, *t.shape)
    if mode == "batch3":
        return t.unsqueeze(1)
    if mode == "heads3":
        return t.unsqueeze(0)
    return t


def unexpanded(t: torch.Tensor) -> torch.Tensor:
    """``t`` with each expanded axis (stride 0, longer than 1) narrowed to length 1: its values are
    equal along that axis, so broadcasting brings them back, and a bool mask is converted, and a batch
    or head axis handed to the engines ([B|1, Hq|1, Sq, Skv]), without a copy of the repeats."""
    if 0 not in t.stride():
        return t
    t = t[tuple(slice(0, 1) if n > 1 and s == 0 else slice(None) for n, s in zip(t.shape, t.stride()))]
    # (a length-1 axis keeps stride 0, which a plan refuses: any positive stride means the same)
    return t.as_strided(t.shape, [s if n > 1 else 1 for n, s in zip(t.shape, t.stride())])


def additive_bias(
    mask: torch.Tensor, query: torch.Tensor, rank: int, mode: str, batch: Sequence[int], hq: int, sq: int, skv: int
) -> torch.Tensor:
    """attn_mask as hipdnn's additive bias [B|1, Hq|1, Sq|1, Skv|1] on the CPU (its engine broadcasts
    every dim of 1) and [B|1, Hq|1, Sq|1, Skv] on a GPU (a broadcast key axis is expanded, and copied
    later: that engine reads keys contiguously). Batch and head axes that were only expanded (stride 0)
    stay length 1."""
    if not isinstance(mask, torch.Tensor):
        raise _fail(f"attn_mask must be a torch.Tensor or None, not {type(mask).__name__}")
    if mask.device != query.device:
        raise _fail(f"attn_mask is on {mask.device}, query on {query.device}")
    if mask.dtype not in (torch.bool, query.dtype, torch.float32):
        raise _fail(f"attn_mask must be bool, float32 or query's dtype {query.dtype}, not {mask.dtype}")
    if mask.requires_grad and torch.is_grad_enabled():
        raise _fail(
            "attn_mask requires grad, and hipdnn's sdpa_backward computes no mask gradient: detach it",
            ErrorCode.GRAPH_NOT_SUPPORTED,
        )
    if mask.dim() > rank:
        raise _fail(f"attn_mask has {mask.dim()} dims, more than the inputs' {rank}")
    shown = list(mask.shape)
    mask = to4d(pad_rank(mask, rank), mode)
    scores = (*batch, hq, sq, skv)
    if mask.dim() != len(scores) or any(m != 1 and m != s for m, s in zip(mask.shape, scores)):
        raise _fail(f"attn_mask of shape {shown} does not broadcast to the attention scores")
    mask = unexpanded(mask)
    if mask.dtype == torch.bool:
        additive = torch.zeros(mask.shape, dtype=query.dtype, device=mask.device)
        mask = additive.masked_fill_(mask.logical_not(), float("-inf"))
    if all(d == 1 for d in mask.shape[:-3]):
        mask = mask.reshape(1, *mask.shape[-3:])
    else:
        mask = flatten_batch(expand_batch(mask, batch))
    # Both engines broadcast a query dim of 1: a key padding mask [B, 1, 1, Skv] is read as one row
    # per batch, not copied to a full [Sq, Skv] plane per call.
    if query.device.type == "cpu" or mask.shape[-1] == skv:
        return mask
    return mask.expand(*mask.shape[:-1], skv)
