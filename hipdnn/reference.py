"""float64 reference implementations written from the definitions, for checking engines.

Deliberately naive: clarity over speed. Layout-agnostic: inputs are numpy arrays in the logical
[B, H, S, D] order (views of any memory layout)."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray


def sdpa(
    q: NDArray[np.floating],
    k: NDArray[np.floating],
    v: NDArray[np.floating],
    attn_scale: float | None = None,
    causal: bool = False,
    bottom_right: bool = False,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(o, stats) of softmax(scale * q k^T + mask) v. GQA/MQA: query head h reads kv head h // (Hq/Hk).
    Causal top-left: query i sees keys j <= i; bottom-right: j <= i + (Skv - Sq). A row that sees no
    key gives o = 0 and stats = -inf. stats is the natural-log log-sum-exp, shape [B, Hq, Sq, 1]."""
    q64, k64, v64 = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    b, hq, sq, d = q64.shape
    hk, skv = k64.shape[1], k64.shape[2]
    group = hq // hk
    k64 = np.repeat(k64, group, axis=1)
    v64 = np.repeat(v64, group, axis=1)
    scale = 1.0 / np.sqrt(d) if attn_scale is None else float(attn_scale)
    scores = scale * (q64 @ np.swapaxes(k64, -1, -2))  # matmul rather than einsum: BLAS-backed
    if causal:
        offset = skv - sq if bottom_right else 0
        i = np.arange(sq)[:, None]
        j = np.arange(skv)[None, :]
        scores = np.where(j <= i + offset, scores, -np.inf)
    row_max = scores.max(axis=-1, keepdims=True)
    empty = ~np.isfinite(row_max)
    safe_max = np.where(empty, 0.0, row_max)
    weights = np.exp(scores - safe_max)
    denom = weights.sum(axis=-1, keepdims=True)
    o = (weights / np.where(empty, 1.0, denom)) @ v64
    o = np.where(empty, 0.0, o)
    stats = np.where(empty, -np.inf, safe_max + np.log(np.where(empty, 1.0, denom)))
    return o, stats


def matmul(a: NDArray[np.floating], b: NDArray[np.floating]) -> NDArray[np.float64]:
    """Batched a @ b with numpy broadcasting of the leading dims."""
    return np.matmul(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))


def relative_error(actual: NDArray[np.floating], expected: NDArray[np.floating]) -> float:
    """max |actual - expected| / max |expected| over finite entries (NaN anywhere -> inf)."""
    actual64 = np.asarray(actual, dtype=np.float64)
    expected64 = np.asarray(expected, dtype=np.float64)
    if np.isnan(actual64).any():
        return float("inf")
    finite = np.isfinite(expected64)
    if not np.array_equal(np.isfinite(actual64), finite):
        return float("inf")
    if not finite.any():
        return 0.0
    scale = max(float(np.abs(expected64[finite]).max()), 1e-30)
    return float(np.abs(actual64[finite] - expected64[finite]).max() / scale)
