"""The two computations every path ends in: attention forward and backward on 4-D tensors
``[B, H, S, D]`` (any strides), through the plan cache. The eager autograd Function and the
``torch.library`` custom ops (hipdnn/torch/ops.py) both call these, and the ops' fake (meta)
implementations allocate outputs exactly as these do (``forward_outputs``, ``backward_outputs``).

This is the per-call path: the cache key is a flat tuple (op, device, dtypes, heads, head dims, each
tensor's layout code, the mask kind, the options), and the plan's description (``Kind``, its
``Slot``s) is only spelled out when a plan has to be built."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from hipdnn.frontend import ErrorCode, HipdnnError
from hipdnn.torch.plans import LAYOUTS, Kind, Masking, PlanCache, Slot, order_code, plain, readable

#: a slot's dims: per axis a capacity axis name ("B", "SQ", "SKV") or a fixed size
Dims = tuple[int | str, ...]

#: the process's plan cache (``hipdnn.torch.plan_cache()``)
CACHE = PlanCache()


def output_layout(t: torch.Tensor) -> tuple[int, ...]:
    """The layout (axes, outermost first) of an output shaped after ``t``: ``t``'s order of batch,
    heads and sequence, its last axis innermost. It depends on ``t``'s strides alone, so the real
    and the fake implementations lay outputs out alike; a BSHD query gives a BSHD output, which the
    ``o.transpose(1, 2)`` that follows in transformers reads densely."""
    return LAYOUTS[order_code(t.stride())]


def forward_outputs(q: torch.Tensor, v: torch.Tensor, want_stats: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Uninitialized ``o`` [B, Hq, Sq, Dv] in q's layout, and ``stats`` [B, Hq, Sq, 1] float32
    (shape [0] when not wanted)."""
    b, hq, sq, _ = q.shape
    o = torch.empty_permuted((b, hq, sq, v.shape[3]), output_layout(q), dtype=q.dtype, device=q.device)
    stats = torch.empty((b, hq, sq, 1) if want_stats else (0,), dtype=torch.float32, device=q.device)
    return o, stats


def backward_outputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Uninitialized dq, dk, dv, each shaped and laid out like its input."""
    return tuple(torch.empty_permuted(t.shape, output_layout(t), dtype=t.dtype, device=t.device) for t in (q, k, v))


def _slots(
    roles: Sequence[str], values: Sequence[torch.Tensor], dims: Sequence[Dims], outputs: int
) -> tuple[Slot, ...]:
    n = len(values)
    for role, t, d in zip(roles, values, dims):
        if t.dim() != len(d):  # checked before: code run since (a dispatch mode's, at an allocation) changed it
            raise HipdnnError(
                ErrorCode.INVALID_VALUE,
                f"hipdnn.torch: {role} changed while the call was prepared: it is now {list(t.shape)}, not "
                f"{len(d)}-D (code that ran during the call, such as a torch mode's, resized or replaced it)",
            )
    return tuple(
        Slot(role, t.dtype, LAYOUTS[order_code(t.stride())], d, i >= n - outputs)
        for i, (role, t, d) in enumerate(zip(roles, values, dims))
    )


def _options(
    bias: torch.Tensor | None, seq_len_q: torch.Tensor | None, seq_len_kv: torch.Tensor | None, heads: int
) -> tuple[tuple[object, ...], list[torch.Tensor], list[str], list[Dims]]:
    """The option tensors as a plan takes them (bias [B|1, Hq|1, Sq, Skv], sequence lengths viewed
    [B, 1, 1, 1]): their part of the cache key, the tensors, their roles and their dims."""
    key: tuple[object, ...] = ()
    values: list[torch.Tensor] = []
    roles: list[str] = []
    dims: list[Dims] = []
    if bias is not None:
        bias = readable(plain(bias))
        batched, per_head = bias.shape[0] > 1, bias.shape[1] > 1
        values.append(bias)
        roles.append("bias")
        dims.append(("B" if batched else 1, heads if per_head else 1, "SQ", "SKV"))
        key = (bias.dtype, batched, per_head, order_code(bias.stride()))
    if seq_len_q is not None and seq_len_kv is not None:
        for role, t in (("seq_len_q", seq_len_q), ("seq_len_kv", seq_len_kv)):
            values.append(plain(t).reshape(-1, 1, 1, 1))
            roles.append(role)
            dims.append(("B", 1, 1, 1))
        key += (seq_len_q.dtype, seq_len_kv.dtype)
    return key, values, roles, dims


def attention_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor | None,
    seq_len_q: torch.Tensor | None,
    seq_len_kv: torch.Tensor | None,
    masking: Masking,
    want_stats: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(o, stats)`` of attention over 4-D q [B, Hq, Sq, D], k [B, Hk, Skv, D], v [B, Hk, Skv, Dv]
    (Hk divides Hq); ``bias`` [B|1, Hq|1, Sq, Skv] additive; ``seq_len_q``/``seq_len_kv`` [B]
    integer lengths (both or neither). ``o`` comes in q's layout (``output_layout``); ``stats``
    [B, Hq, Sq, 1] float32 when wanted, else None. Rows with no visible key give o = 0 and
    stats = -inf. (The per-call path: shapes and strides are read once.)"""
    if type(q) is not Tensor or type(k) is not Tensor or type(v) is not Tensor:
        q, k, v = plain(q), plain(k), plain(v)  # what a subclass's accessors say is not trusted
    qs, vs = q.shape, v.shape
    b, hq, sq, d = qs
    hk, skv, dv = vs[1], vs[2], vs[3]
    qst, kst, vst = q.stride(), k.stride(), v.stride()
    code = order_code(qst)
    device = q.device
    o = torch.empty_permuted((b, hq, sq, dv), LAYOUTS[code], dtype=q.dtype, device=device)
    stats = torch.empty((b, hq, sq, 1), dtype=torch.float32, device=device) if want_stats else None
    if b == 0 or hq == 0 or sq == 0 or dv == 0:
        return o, stats
    if skv == 0:  # a softmax over no keys: torch gives zeros
        o.zero_()
        if stats is not None:
            stats.fill_(float("-inf"))
        return o, stats
    if qst[3] != 1 or 0 in qst:
        q = readable(q)
        qst = q.stride()
    if kst[3] != 1 or 0 in kst:
        k = readable(k)
        kst = k.stride()
    if vst[3] != 1 or 0 in vst:
        v = readable(v)
        vst = v.stride()
    values = [q, k, v]
    options: tuple[object, ...] = ()
    extra_roles: list[str] = []
    extra_dims: list[Dims] = []
    if bias is not None or seq_len_q is not None:
        options, extra, extra_roles, extra_dims = _options(bias, seq_len_q, seq_len_kv, hq)
        values += extra
    values.append(o)
    if stats is not None:
        values.append(stats)
    # the three inputs' axis orders as one number: LAYOUTS has 6 entries
    codes = code + 6 * order_code(kst) + 36 * order_code(vst)
    key = ("sdpa", device, q.dtype, hq, hk, d, dv, masking, options, want_stats, codes)

    def kind() -> Kind:
        roles = ["q", "k", "v", *extra_roles, "o"] + (["stats"] if stats is not None else [])
        dims: list[Dims] = [("B", hq, "SQ", d), ("B", hk, "SKV", d), ("B", hk, "SKV", dv), *extra_dims]
        dims += [("B", hq, "SQ", dv)] + ([("B", hq, "SQ", 1)] if stats is not None else [])
        slots = _slots(roles, values, dims, 2 if stats is not None else 1)
        return Kind("sdpa", device, hq, hk, d, dv, masking, seq_len_q is not None, slots)

    CACHE.run(key, b, sq, skv, values, kind)
    return o, stats


def cached_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool,
    scale: float | None,
    gqa: bool,
    bottom_right: bool,
    mask: torch.Tensor | None = None,
) -> torch.Tensor | None:
    """The output of the commonest calls, or None to have the general path serve them: plain 4-D
    tensors read in place (last dim contiguous, no stride 0), no lengths, band or statistics, no
    gradient wanted, not under ``torch.compile``, and a plan of this kind already built whose
    capacity holds the call. Everything the general path checks is either checked here or implied by
    the plan's existence (its key holds q's dtype, device, heads, head dims, the mask options and the
    layouts, and only the general path builds plans); both use the same plans.

    Plain CPU tensors take the compiled short path (``PlanCache.cpu_calls``: the same checks and plans
    in one step), which also serves a 4-D ``attn_mask`` (``mask``) as models pass one: additive, read
    in place, or boolean, converted once while the same mask comes back. Tensors on other devices take
    the lines below, without a mask."""
    if torch.compiler.is_compiling():
        return None
    out = CACHE.cpu_calls(q, k, v, causal, scale, gqa, bottom_right, mask)
    if out is not NotImplemented:
        return out  # type: ignore[no-any-return]
    if mask is not None or type(q) is not Tensor or type(k) is not Tensor or type(v) is not Tensor:
        return None
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return None
    qs, ks, vs = q.shape, k.shape, v.shape
    if len(qs) != 4 or len(ks) != 4 or len(vs) != 4:
        return None
    b, hq, sq, d = qs
    _, hk, skv, dv = vs
    dtype, device = q.dtype, q.device
    if (
        k.dtype != dtype
        or v.dtype != dtype
        or k.device != device
        or v.device != device
        or ks[0] != b
        or vs[0] != b
        or ks[1] != hk
        or ks[2] != skv
        or ks[3] != d
        or not (hq == hk or (gqa and hk > 0 and hq % hk == 0))
        or b == 0
        or hq == 0
        or sq == 0
        or skv == 0
        or d == 0
        or dv == 0
        or (scale is not None and type(scale) is not float and type(scale) is not int)
    ):
        return None
    qst, kst, vst = q.stride(), k.stride(), v.stride()
    if qst[3] != 1 or kst[3] != 1 or vst[3] != 1 or 0 in qst or 0 in kst or 0 in vst:
        return None
    masking = Masking(1.0 / math.sqrt(d) if scale is None else float(scale), causal, bottom_right and causal)
    code = order_code(qst)
    key = ("sdpa", device, dtype, hq, hk, d, dv, masking, (), False, code + 6 * order_code(kst) + 36 * order_code(vst))
    plan = CACHE.peek(key)
    if plan is None or b > plan.cap_b or sq > plan.cap_sq or skv > plan.cap_skv:
        return None
    o = torch.empty_permuted((b, hq, sq, dv), LAYOUTS[code], dtype=dtype, device=device)
    if not plan.run([q, k, v, o]):
        return None  # a view wider than the plan's maximum: the general path grows the kind
    counters = CACHE.counters
    counters.hits += 1
    counters.bound_calls += 1
    return o


def attention_backward(
    grad_o: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    stats: torch.Tensor,
    bias: torch.Tensor | None,
    seq_len_q: torch.Tensor | None,
    seq_len_kv: torch.Tensor | None,
    masking: Masking,
) -> tuple[torch.Tensor, ...]:
    """``(dq, dk, dv)`` from the forward's inputs, its output ``o`` and ``stats``, and ``grad_o``;
    under grouped-query attention dk and dv sum over the query heads of each KV head."""
    grad_o, q, k, v, o, stats = (plain(t) for t in (grad_o, q, k, v, o, stats))
    dq, dk, dv = backward_outputs(q, k, v)
    b, hq, sq, d = q.shape
    _, hk, skv, dvd = v.shape
    if dq.numel() == 0 and dk.numel() == 0 and dv.numel() == 0:
        return dq, dk, dv
    if b * hq * sq == 0 or skv == 0 or dvd == 0:
        return dq.zero_(), dk.zero_(), dv.zero_()
    q, k, v, o, grad_o, stats = (readable(t) for t in (q, k, v, o, grad_o, stats))
    roles = ["q", "k", "v", "o", "do", "stats"]
    values = [q, k, v, o, grad_o, stats]
    dims: list[Dims] = [
        ("B", hq, "SQ", d),
        ("B", hk, "SKV", d),
        ("B", hk, "SKV", dvd),
        ("B", hq, "SQ", dvd),
        ("B", hq, "SQ", dvd),
        ("B", hq, "SQ", 1),
    ]
    options: tuple[object, ...] = ()
    if bias is not None or seq_len_q is not None:
        options, extra, extra_roles, extra_dims = _options(bias, seq_len_q, seq_len_kv, hq)
        values += extra
        roles += extra_roles
        dims += extra_dims
    roles += ["dq", "dk", "dv"]
    values += [dq, dk, dv]
    dims += [("B", hq, "SQ", d), ("B", hk, "SKV", d), ("B", hk, "SKV", dvd)]
    key = ("sdpa_backward", q.device, q.dtype, hq, hk, d, dvd, masking, options) + tuple(
        order_code(t.stride()) for t in values
    )

    def kind() -> Kind:
        slots = _slots(roles, values, dims, 3)
        return Kind("sdpa_backward", q.device, hq, hk, d, dvd, masking, seq_len_q is not None, slots)

    CACHE.run(key, b, sq, skv, values, kind)
    return dq, dk, dv


__all__ = [
    "CACHE",
    "attention_backward",
    "attention_forward",
    "cached_forward",
    "backward_outputs",
    "forward_outputs",
    "output_layout",
]
