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
    product: NDArray[np.float64] = np.matmul(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
    return product


def sdpa_backward(
    q: NDArray[np.floating],
    k: NDArray[np.floating],
    v: NDArray[np.floating],
    o: NDArray[np.floating],
    d_o: NDArray[np.floating],
    stats: NDArray[np.floating],
    scale: float,
    visible: NDArray[np.bool_] | None = None,
    additive: NDArray[np.floating] | None = None,
    magnitude: bool = False,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """(dq, dk, dv) of o = softmax(s) v with s = scale q k^T + additive, from the definitions:
    P = softmax(s) over the visible keys (0 elsewhere, and on rows whose stats are -inf: the
    forward's empty rows). P is not taken as exp(s - stats): a float32 lse cannot hold log l of a row
    whose scores all sit near a huge mask (-1e9, finfo.min), and that P would be l times too large.
    dV = P^T dO, dP = dO V^T, D = rowsum(dO * O), dS = P * (dP - D), dQ = scale dS K, dK = scale dS^T Q.
    ``visible`` [B|1, Hq|1, Sq, Skv] is the mask, ``additive`` (bias + ALiBi) broadcasts likewise.
    Under GQA / MQA query head h uses kv head h // (Hq / Hk) and dk, dv sum over each group.
    ``magnitude=True`` evaluates the same sums over absolute values (dS = P (|dP| + |D|)): the size of
    the terms that cancel, the right scale for judging rounding error when the gradient is small."""
    q64, k64, v64, o64, do64, st64 = (np.asarray(x, dtype=np.float64) for x in (q, k, v, o, d_o, stats))
    b, hq, sq, _ = q64.shape
    hk = k64.shape[1]
    group = hq // hk
    kk, vv = np.repeat(k64, group, axis=1), np.repeat(v64, group, axis=1)
    s = scale * (q64 @ np.swapaxes(kk, -1, -2))
    if additive is not None:
        s = s + additive
    live = np.isfinite(st64)
    vis = np.broadcast_to(live, s.shape) if visible is None else (np.broadcast_to(visible, s.shape) & live)
    masked = np.where(vis, s, -np.inf)
    top = masked.max(axis=-1, keepdims=True)
    e = np.where(vis, np.exp(masked - np.where(np.isfinite(top), top, 0.0)), 0.0)
    total = e.sum(axis=-1, keepdims=True)
    p = e / np.where(total > 0.0, total, 1.0)
    dv_full = np.swapaxes(p, -1, -2) @ do64
    dp = do64 @ np.swapaxes(vv, -1, -2)
    delta = (do64 * o64).sum(axis=-1, keepdims=True)
    ds = p * (dp - delta)
    if magnitude:
        ds = p * (np.abs(dp) + np.abs(delta))
        kk, q64, do64 = np.abs(kk), np.abs(q64), np.abs(do64)
        dv_full = np.swapaxes(p, -1, -2) @ do64
    dq = scale * (ds @ kk)
    dk_full = scale * (np.swapaxes(ds, -1, -2) @ q64)
    dk = dk_full.reshape(b, hk, group, *dk_full.shape[2:]).sum(axis=2)
    dv = dv_full.reshape(b, hk, group, *dv_full.shape[2:]).sum(axis=2)
    return dq, dk, dv


def norm_axes(rank: int, count: int) -> tuple[int, ...]:
    return tuple(range(rank - count, rank))


def rmsnorm(
    x: NDArray[np.floating],
    count: int,
    eps: float,
    scale: NDArray[np.floating] | None = None,
    bias: NDArray[np.floating] | None = None,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(y, inv_rms): inv_rms = 1 / sqrt(mean(x^2) + eps) over the last ``count`` axes,
    y = x * inv_rms * scale + bias (scale, bias broadcast)."""
    x64 = np.asarray(x, dtype=np.float64)
    axes = norm_axes(x64.ndim, count)
    inv = 1.0 / np.sqrt((x64 * x64).mean(axis=axes, keepdims=True) + eps)
    y = x64 * inv
    if scale is not None:
        y = y * np.asarray(scale, dtype=np.float64)
    if bias is not None:
        y = y + np.asarray(bias, dtype=np.float64)
    return y, inv


def layernorm(
    x: NDArray[np.floating],
    count: int,
    eps: float,
    scale: NDArray[np.floating] | None = None,
    bias: NDArray[np.floating] | None = None,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """(y, mean, inv_variance) over the last ``count`` axes; variance is the biased (1/N) one."""
    x64 = np.asarray(x, dtype=np.float64)
    axes = norm_axes(x64.ndim, count)
    mean = x64.mean(axis=axes, keepdims=True)
    var = ((x64 - mean) ** 2).mean(axis=axes, keepdims=True)
    inv = 1.0 / np.sqrt(var + eps)
    y = (x64 - mean) * inv
    if scale is not None:
        y = y * np.asarray(scale, dtype=np.float64)
    if bias is not None:
        y = y + np.asarray(bias, dtype=np.float64)
    return y, mean, inv


def reduction(x: NDArray[np.floating], mode: int, axes: tuple[int, ...]) -> NDArray[np.float64]:
    """hipDNN's reduction modes (1 ADD, 2 MUL, 3 MIN, 4 MAX, 5 AMAX, 6 AVG, 7 NORM1, 8 NORM2,
    9 MUL_NO_ZEROS) over ``axes``, keeping the rank."""
    x64 = np.asarray(x, dtype=np.float64)
    reducers = {
        1: lambda a: a.sum(axis=axes, keepdims=True),
        2: lambda a: a.prod(axis=axes, keepdims=True),
        3: lambda a: a.min(axis=axes, keepdims=True),
        4: lambda a: a.max(axis=axes, keepdims=True),
        5: lambda a: np.abs(a).max(axis=axes, keepdims=True),
        6: lambda a: a.mean(axis=axes, keepdims=True),
        7: lambda a: np.abs(a).sum(axis=axes, keepdims=True),
        8: lambda a: np.sqrt((a * a).sum(axis=axes, keepdims=True)),
        9: lambda a: np.where(a == 0.0, 1.0, a).prod(axis=axes, keepdims=True),
    }
    if mode in reducers:
        return np.asarray(reducers[mode](x64), dtype=np.float64)
    raise ValueError(f"unknown reduction mode {mode}")


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
