"""``hipdnn.torch.scaled_dot_product_attention``: torch's signature and semantics, on hipdnn's engines.

The arguments are brought to hipdnn's form with torch operations (so autograd and ``torch.compile``
see them): batch dimensions flattened into one, broadcasting resolved, boolean masks made additive;
then one of three paths runs the same computation (hipdnn/torch/kernels.py): the custom op under
``torch.compile``, the autograd Function when a gradient is wanted, the computation itself otherwise.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import warnings
import weakref
from collections.abc import Sequence
from typing import Literal

import torch
import torch.nn.functional as F

from hipdnn.frontend import ErrorCode, HipdnnError
from hipdnn.torch.kernels import attention_forward, cached_forward
from hipdnn.torch.masks import additive_bias, expand_batch, flatten_batch, pad_rank, to4d
from hipdnn.torch.ops import apply_attention, forward_op
from hipdnn.torch.plans import ATTENTION_DTYPES, Masking, dispatches

Alignment = Literal["top_left", "bottom_right"]

#: whether calls hipdnn cannot serve run torch's own SDPA instead (``set_fallback``); the environment
#: variable HIPDNN_TORCH_FALLBACK=1 turns it on for the process
_fallback = os.environ.get("HIPDNN_TORCH_FALLBACK", "").strip() not in ("", "0")
#: the refusals already warned about (one warning each)
_warned: set[str] = set()
_warned_lock = threading.Lock()


class HipdnnFallbackWarning(UserWarning):
    """A call hipdnn's engines refused ran on torch's own SDPA instead (``set_fallback``)."""


def set_fallback(enabled: bool = True) -> None:
    """Opt in (or back out) of falling back to ``torch.nn.functional.scaled_dot_product_attention``
    for calls hipdnn's engines refuse (``GRAPH_NOT_SUPPORTED``: a dtype, an option or a mask an engine
    does not serve, dropout), with one ``HipdnnFallbackWarning`` per distinct reason. Off by default:
    refusals raise ``HipdnnError``. Mistakes (``INVALID_VALUE``: shapes that do not match, wrong
    types) always raise, as do calls using hipdnn's extras (lengths, bands, bottom-right alignment,
    ``return_lse``), which torch's function does not take, and calls under ``torch.compile`` (where
    the refusal comes from the compiled graph's custom op at run time). ``HIPDNN_TORCH_FALLBACK=1``
    in the environment turns it on at import."""
    global _fallback
    _fallback = bool(enabled)


def fallback_enabled() -> bool:
    """Whether ``set_fallback`` (or HIPDNN_TORCH_FALLBACK) turned the fallback on."""
    return _fallback


def warn_fallback(reason: str) -> None:
    """One HipdnnFallbackWarning per distinct reason, for the whole process."""
    with _warned_lock:
        if reason in _warned:
            return
        _warned.add(reason)
    warnings.warn(
        f"hipdnn.torch: running torch's scaled_dot_product_attention instead: {reason}",
        HipdnnFallbackWarning,
        stacklevel=3,
    )


ALIGNMENTS: tuple[str, ...] = ("top_left", "bottom_right")
SEQ_LEN_DTYPES = (torch.int32, torch.int64)


def _fail(message: str, code: ErrorCode = ErrorCode.INVALID_VALUE) -> HipdnnError:
    return HipdnnError(code, "hipdnn.torch.scaled_dot_product_attention: " + message)


def _bound(value: object, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _fail(f"{name} must be None or an int >= 0, not {value!r}")
    return value


def _softcap(value: object) -> float | None:
    """``softcap``: None, or a finite number >= 0 (0 means off, as None)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(f"softcap must be None or a number >= 0, not {value!r}")
    c = float(value)
    if not math.isfinite(c) or c < 0:
        raise _fail(f"softcap must be None or a finite number >= 0 (0: off), not {value!r}")
    return c if c != 0.0 else None


def _scale(value: object, head_dim: int) -> float:
    """``scale`` as a float: ``1 / sqrt(E)`` when None (1 for E = 0, where every score is 0 anyway),
    else a finite number (NaN or infinite scales make every score NaN: refused, not computed)."""
    if value is None:
        return 1.0 / math.sqrt(head_dim) if head_dim > 0 else 1.0
    try:
        if isinstance(value, (str, bytes)):
            raise TypeError
        s = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise _fail(f"scale must be None or a number, not {value!r}") from None
    if not math.isfinite(s):
        raise _fail(f"scale must be None or a finite number, not {value!r}")
    return s


def _check_tensors(query: object, key: object, value: object) -> tuple[torch.Size, torch.Size, torch.Size]:
    """Refuse what torch refuses (and dtypes no engine takes); the three shapes."""
    if not (isinstance(query, torch.Tensor) and isinstance(key, torch.Tensor) and isinstance(value, torch.Tensor)):
        kinds = ", ".join(type(t).__name__ for t in (query, key, value))
        raise _fail(f"query, key and value must be torch.Tensors, not {kinds}")
    dtype = query.dtype
    if key.dtype != dtype or value.dtype != dtype:
        raise _fail(f"query, key and value must have one dtype, have {dtype}, {key.dtype} and {value.dtype}")
    device = query.device
    if key.device != device or value.device != device:
        raise _fail(f"query, key and value are on different devices: {device}, {key.device}, {value.device}")
    qs, ks, vs = query.shape, key.shape, value.shape
    if len(qs) < 2 or len(ks) < 2 or len(vs) < 2:
        raise _fail(f"query, key and value need at least 2 dims (..., L, E), have {list(qs)}, {list(ks)}, {list(vs)}")
    if qs[-1] != ks[-1]:
        raise _fail(f"query's last dim {qs[-1]} differs from key's {ks[-1]}")
    if ks[-2] != vs[-2]:
        raise _fail(f"key's sequence length {ks[-2]} differs from value's {vs[-2]}")
    if dtype not in ATTENTION_DTYPES:  # after the mistakes: a refusal may fall back to torch
        names = ", ".join(str(d).replace("torch.", "") for d in ATTENTION_DTYPES)
        raise _fail(f"dtype {dtype} is not served (hipdnn's engines take {names})", ErrorCode.GRAPH_NOT_SUPPORTED)
    return qs, ks, vs


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
    *,
    causal_alignment: Alignment = "top_left",
    seq_len_q: torch.Tensor | None = None,
    seq_len_kv: torch.Tensor | None = None,
    left_bound: int | None = None,
    right_bound: int | None = None,
    return_lse: bool = False,
    softcap: float | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Attention as ``torch.nn.functional.scaled_dot_product_attention`` computes it, run by a
    cached hipdnn plan: ``softmax(query @ key^T * scale + mask) @ value``.

    ``query`` is ``(..., Hq, L, E)``, ``key`` ``(..., H, S, E)``, ``value`` ``(..., H, S, Ev)``; batch
    dims broadcast; with ``enable_gqa`` (or H == 1) each key/value head serves ``Hq / H`` query heads
    without being repeated. Any strides are read in place when the last dim is contiguous (BHSD,
    BSHD views as transformers passes them, slices of a KV cache, views of a packed QKV tensor);
    other layouts (and expanded, stride-0 axes) are copied first.
    ``attn_mask``: boolean (True takes part) or additive float (query's dtype or float32),
    broadcastable to ``(..., Hq, L, S)``; with ``is_causal`` too, both apply. Rows left with no key
    give zeros, as torch's do. ``dropout_p`` must be 0 (hipdnn has no dropout): anything else is a
    ``HipdnnError``, never ignored.

    hipdnn's extras (keyword-only):

    - ``causal_alignment="bottom_right"``: the causal diagonal (and the band below) ends at the last
      key, as for a query appended to a KV cache (key j visible to query i when j <= i + S - L).
    - ``seq_len_q`` / ``seq_len_kv``: integer tensors ``[B]`` (B: the batch dims flattened), each
      sequence's true lengths (right padding): keys at or past ``seq_len_kv[b]`` are masked, and query
      rows at or past ``seq_len_q[b]`` give zeros. One given alone means the other is full length;
      lengths outside ``[0, L]`` / ``[0, S]`` count as the nearest end. Under bottom-right alignment
      the diagonal ends at each sequence's own last key.
    - ``left_bound`` / ``right_bound``: a sliding window around the (aligned) diagonal: key j is
      visible to query i when ``i - left_bound < j <= i + right_bound``, so ``left_bound=w`` keeps
      the ``w`` keys ending at the diagonal (with ``is_causal``: Mistral-style windows).
    - ``softcap``: score softcapping (Gemma 2's ``attn_logit_softcapping``, FlashAttention's
      ``softcap``): with c > 0, each score ``s = scale * query @ key^T`` is replaced by
      ``c * tanh(s / c)`` BEFORE ``attn_mask``, the causal mask and every other mask are applied
      (Gemma 2's order in transformers); the backward multiplies dS by ``1 - tanh(s / c)^2``. None or
      0: off; negative, NaN or infinite values are refused. Part of the plan cache key.
    - ``return_lse``: also return the natural-log log-sum-exp of each row's scores, ``(..., Hq, L)``
      float32 (``-inf`` for rows with no visible key); no gradient flows through it.

    Returns the output ``(..., Hq, L, Ev)`` in query's dtype and layout order (a BSHD query gives a
    BSHD output), or ``(output, lse)``. Gradients flow to query, key and value through hipdnn's
    ``sdpa_backward``; a mask that requires grad is refused. What the engines refuse raises
    ``HipdnnError`` (``GRAPH_NOT_SUPPORTED``, with each engine's reason), unless ``set_fallback``
    opted in to running torch's own function for it."""
    if (
        (attn_mask is None or type(attn_mask) is torch.Tensor)
        and seq_len_q is None
        and seq_len_kv is None
        and left_bound is None
        and right_bound is None
        and not return_lse
        and softcap is None
        and dropout_p == 0.0
        and (causal_alignment == "top_left" or causal_alignment == "bottom_right")
    ):
        fast = cached_forward(
            query, key, value, bool(is_causal), scale, enable_gqa, causal_alignment == "bottom_right", attn_mask
        )  # fmt: skip
        if fast is not None:
            return fast
    try:
        with _no_function_modes():
            return _serve(
                query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
                causal_alignment, seq_len_q, seq_len_kv, left_bound, right_bound, return_lse, softcap,
            )  # fmt: skip
    except HipdnnError as exc:
        extras = (
            seq_len_q is not None
            or seq_len_kv is not None
            or left_bound is not None
            or right_bound is not None
            or return_lse
            or softcap is not None  # torch's function has no softcap: falling back would ignore it
            or (is_causal and causal_alignment != "top_left")
            or (is_causal and attn_mask is not None)  # torch's function takes one or the other
        )
        if (
            exc.code != ErrorCode.GRAPH_NOT_SUPPORTED
            or extras
            or not fallback_enabled()
            or torch.compiler.is_compiling()
        ):
            raise
        warn_fallback(exc.message)
        return torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa
        )


def _no_function_modes() -> contextlib.AbstractContextManager[object]:
    """Where a torch function mode is active, a context that turns modes off for the general path: a
    mode sees every accessor and torch call the path makes, and its code could change a tensor
    between two of them (free the keys while the query's strides are read). torch's own function keeps
    its internals out of the modes' sight too; dispatch modes (which see only ops) stay on."""
    if torch._C._is_torch_function_mode_enabled():
        return torch._C.DisableTorchFunction()
    return contextlib.nullcontext()


def _serve(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None,
    dropout_p: float,
    is_causal: bool,
    scale: float | None,
    enable_gqa: bool,
    causal_alignment: Alignment,
    seq_len_q: torch.Tensor | None,
    seq_len_kv: torch.Tensor | None,
    left_bound: int | None,
    right_bound: int | None,
    return_lse: bool,
    softcap: float | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """``scaled_dot_product_attention`` on hipdnn's engines, every case (the short path aside)."""
    qs, ks, vs = _check_tensors(query, key, value)
    cap = _softcap(softcap)
    if dropout_p != 0.0:
        raise _fail(
            f"dropout_p={dropout_p!r}: hipdnn's engines have no dropout; pass dropout_p=0.0 "
            "(transformers does in eval mode)",
            ErrorCode.GRAPH_NOT_SUPPORTED,
        )
    if causal_alignment == "top_left":
        bottom_right = False
    elif causal_alignment == "bottom_right":
        bottom_right = True
    else:
        raise _fail(f"causal_alignment must be one of {ALIGNMENTS}, not {causal_alignment!r}")
    if left_bound is not None or right_bound is not None:
        left_bound, right_bound = _bound(left_bound, "left_bound"), _bound(right_bound, "right_bound")
    elif not is_causal:
        bottom_right = False  # the alignment means something only with a causal mask or a band
    masking = Masking(
        _scale(scale, qs[-1]),
        bool(is_causal),
        bottom_right,
        left_bound,
        right_bound,
        cap,
    )

    batch: tuple[int, ...]
    if (
        len(qs) == 4
        and len(ks) == 4
        and len(vs) == 4
        and qs[0] == ks[0] == vs[0]
        and ks[1] == vs[1]
        and (qs[1] == ks[1] or (enable_gqa and ks[1] > 0 and qs[1] % ks[1] == 0))
    ):
        q, k, v, mode, batch = query, key, value, "4d", (qs[0],)  # the common cases (GQA too), checked
    else:
        q, k, v, mode, batch = _normalize(query, key, value, enable_gqa)
    if q.shape[3] == 0:  # no features: every score is 0 (torch's result), which the engines compute from one
        q, k = F.pad(q, (0, 1)), F.pad(k, (0, 1))
    b, hq, sq = q.shape[:3]
    skv = k.shape[2]
    bias = None
    if attn_mask is not None:
        bias = _bias(attn_mask, query, max(len(qs), len(ks), len(vs)), mode, batch, hq, sq, skv)
    slq = slkv = None
    if seq_len_q is not None or seq_len_kv is not None:
        slq, slkv = _lengths(seq_len_q, seq_len_kv, query.device, b, sq, skv)

    grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    o: torch.Tensor
    stats: torch.Tensor | None
    if (
        torch.compiler.is_compiling()
        or q.device.type == "meta"
        or _dispatching(q, k, v, bias, slq, slkv)
    ):  # fmt: skip
        # the custom op, which FakeTensor, __torch_dispatch__ subclasses and meta tensors see as an op
        o, stats = forward_op(
            q, k, v, bias, slq, slkv, masking.scale, masking.causal, masking.bottom_right,
            masking.left_bound, masking.right_bound, return_lse or grad, masking.softcap,
        )  # fmt: skip
    elif grad:
        o, stats = apply_attention(q, k, v, bias, slq, slkv, masking)
    else:
        o, stats = attention_forward(q, k, v, bias, slq, slkv, masking, return_lse)
    if mode == "4d":
        if not return_lse:
            return o
        assert stats is not None
        return o, stats.view(b, hq, sq)
    lead = () if mode == "2d" else batch if mode == "batch3" else (hq,) if mode == "heads3" else (*batch, hq)
    output = o.reshape(*lead, sq, o.shape[-1])
    if not return_lse:
        return output
    assert stats is not None
    return output, stats.reshape(*lead, sq)


def _dispatching(*tensors: torch.Tensor | None) -> bool:
    """Whether a tensor is a ``__torch_dispatch__`` subclass (``plans.dispatches``)."""
    return any(t is not None and dispatches(t) for t in tensors)


def _normalize(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, enable_gqa: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, str, tuple[int, ...]]:
    """q, k, v as [B, H, S, E] (batch dims broadcast and flattened, a query head broadcast over key
    heads expanded), how the caller's shapes map to them (``mode``), and the broadcast batch dims."""
    q, k, v = query, key, value
    four = q.dim() == 4 and k.dim() == 4 and v.dim() == 4 and q.shape[0] == k.shape[0] == v.shape[0]
    rank = max(q.dim(), k.dim(), v.dim())
    if four:
        mode = "4d"
    else:
        q, k, v = (pad_rank(t, rank) for t in (q, k, v))
        # rank 3, (N, L, E): N is a batch dim, unless the inputs' differ (grouped or broadcast heads)
        mode = (
            "nd"
            if rank >= 4
            else "2d"
            if rank == 2
            else "batch3"
            if q.shape[0] == k.shape[0] == v.shape[0]
            else "heads3"
        )
        q, k, v = (to4d(t, mode) for t in (q, k, v))
    hq, hk, hv = q.shape[-3], k.shape[-3], v.shape[-3]
    if hk != hv:
        raise _fail(f"key has {hk} heads but value has {hv}")
    if hq != hk:
        if enable_gqa:
            if hk == 0 or hq % hk != 0:
                raise _fail(f"enable_gqa: the key/value heads ({hk}) must divide the query heads ({hq})")
        elif hk != 1:  # torch broadcasts heads like batch dims; one key head is grouped-query attention
            if hq != 1:
                raise _fail(
                    f"query has {hq} heads and key/value {hk}: pass enable_gqa=True for grouped-query attention"
                )
            q = q.expand(*q.shape[:-3], hk, *q.shape[-2:])
    if four:
        return q, k, v, mode, (q.shape[0],)
    sizes: list[int] = []
    for dims in zip(q.shape[:-3], k.shape[:-3], v.shape[:-3]):
        size = 1
        for d in dims:
            if d != 1:
                if size != 1 and size != d:
                    raise _fail(
                        f"batch dims do not broadcast: query {list(query.shape)}, key {list(key.shape)}, "
                        f"value {list(value.shape)}"
                    )
                size = d
        sizes.append(size)
    batch = tuple(sizes)
    q, k, v = (flatten_batch(expand_batch(t, batch)) for t in (q, k, v))
    return q, k, v, mode, batch


class _MaskEntry:
    """One boolean mask's additive bias and what it was made for. The bias is dropped as soon as the
    mask dies (the weak reference's callback), so a long-context mask's bias does not outlive it."""

    def __init__(self, mask: torch.Tensor, key: tuple[object, ...], bias: torch.Tensor) -> None:
        self.source = weakref.ref(mask, self._drop)
        self.key = key
        self.bias: torch.Tensor | None = bias

    def _drop(self, _ref: object) -> None:
        self.bias = None


class _BoolMaskMemo(threading.local):
    """The additive bias each thread last made from a boolean ``attn_mask``, handed out again while
    that same tensor comes back unmodified for the same call shape: transformers gives one mask to
    every layer of a forward, and converting it per layer cost more than the conversion (B = 4, H =
    8, S = 512, D = 64 on the CPU: 8.7 ms a call against 6.5 with the bias made once; the engine's
    second core waits for the lines the calling thread just wrote). The mask's version counter
    (bumped by every in-place change) is part of the key; a weak reference, so a dead mask is
    never matched by a new tensor at its address."""

    entry: _MaskEntry | None = None


_bool_masks = _BoolMaskMemo()


def _bias(
    mask: torch.Tensor, query: torch.Tensor, rank: int, mode: str, batch: Sequence[int], hq: int, sq: int, skv: int
) -> torch.Tensor:
    """:func:`additive_bias`, reusing the bias last made from the same boolean mask (``_BoolMaskMemo``).
    Not for inference tensors (they keep no version counter), nor while torch.compile traces (its
    tensors are fakes) or a CUDA graph is being captured (a replay must convert the mask's values of
    that replay)."""
    memo = (
        not torch.compiler.is_compiling()  # (first: dynamo cannot trace is_inference)
        and type(mask) is torch.Tensor
        and mask.dtype == torch.bool
        and not mask.is_inference()  # (no version counter to watch)
        and not (mask.is_cuda and torch.cuda.is_current_stream_capturing())
    )
    if not memo:
        return additive_bias(mask, query, rank, mode, batch, hq, sq, skv)
    # (on a GPU the stream too: the bias was made in one stream's order, and another may run ahead of it)
    stream = torch.cuda.current_stream(mask.device).stream_id if mask.is_cuda else 0
    key = (
        mask._version, mask.data_ptr(), tuple(mask.shape), mask.stride(), mask.device, stream,
        query.dtype, query.device, rank, mode, tuple(batch), hq, sq, skv,
    )  # fmt: skip
    entry = _bool_masks.entry
    if entry is not None and entry.bias is not None and entry.source() is mask and entry.key == key:
        return entry.bias
    bias = additive_bias(mask, query, rank, mode, batch, hq, sq, skv)
    _bool_masks.entry = _MaskEntry(mask, key, bias)
    return bias


def _lengths(
    seq_len_q: torch.Tensor | None, seq_len_kv: torch.Tensor | None, device: torch.device, b: int, sq: int, skv: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Both sequence-length tensors as contiguous int32 [B] (one not given: full length). int64
    lengths are clamped to their range first (outside it they mean the nearest end anyway), so none
    wraps in the conversion: the engines take INT32."""
    out: list[torch.Tensor] = []
    for name, t, full in (("seq_len_q", seq_len_q, sq), ("seq_len_kv", seq_len_kv, skv)):
        if t is None:
            t = torch.full((b,), full, dtype=torch.int32, device=device)
        elif not isinstance(t, torch.Tensor) or t.dtype not in SEQ_LEN_DTYPES:
            raise _fail(f"{name} must be an int32 or int64 tensor of shape [{b}]")
        elif t.device != device:
            raise _fail(f"{name} is on {t.device}, query on {device}")
        if t.numel() not in (1, b) or t.dim() > 1 and any(d != 1 for d in t.shape[1:]):
            raise _fail(f"{name} must hold one length per batch entry ([{b}]), has shape {list(t.shape)}")
        if t.dtype != torch.int32:
            t = t.clamp(0, full).to(torch.int32)
        out.append(t.reshape(-1).expand(b).contiguous())
    return out[0], out[1]


__all__ = [
    "HipdnnFallbackWarning",
    "fallback_enabled",
    "scaled_dot_product_attention",
    "set_fallback",
]
