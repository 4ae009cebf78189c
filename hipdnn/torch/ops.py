"""The torch side of the computations in kernels.py: an autograd Function for eager calls, and the
custom ops ``hipdnn::sdpa`` / ``hipdnn::sdpa_backward`` (``torch.library``) with fake
implementations and an autograd registration, which ``torch.compile`` traces as opaque nodes.

Eager calls take the Function (about 6 µs of torch's own overhead) or, with no gradient wanted, the
computation directly; the custom op (about 12-22 µs of dispatch in eager mode) is the path under
``torch.compile``. Both run the same forward and backward."""

from __future__ import annotations

from typing import Any, cast

import torch
from torch._C import _functions as autograd_functions

from hipdnn.frontend import ErrorCode, HipdnnError
from hipdnn.torch.kernels import attention_backward, attention_forward, backward_outputs, forward_outputs
from hipdnn.torch.plans import Masking

#: the custom ops' names (``torch.ops.hipdnn.sdpa``, ``torch.ops.hipdnn.sdpa_backward``)
FORWARD_OP = "hipdnn::sdpa"
BACKWARD_OP = "hipdnn::sdpa_backward"

_FORWARD_SCHEMA = (
    "(Tensor q, Tensor k, Tensor v, Tensor? bias, Tensor? seq_len_q, Tensor? seq_len_kv, float scale, "
    "bool causal, bool bottom_right, int? left_bound, int? right_bound, bool want_stats, float? softcap=None) "
    "-> (Tensor, Tensor)"
)
_BACKWARD_SCHEMA = (
    "(Tensor grad_o, Tensor q, Tensor k, Tensor v, Tensor o, Tensor stats, Tensor? bias, Tensor? seq_len_q, "
    "Tensor? seq_len_kv, float scale, bool causal, bool bottom_right, int? left_bound, int? right_bound, "
    "float? softcap=None) -> (Tensor, Tensor, Tensor)"
)


def _layout_tags() -> list[torch.Tag]:
    """Inductor must hand the ops their inputs with exactly the strides traced: output layouts follow
    the inputs' (kernels.output_layout), and the fake implementation has to agree with the real one."""
    for name in ("needs_exact_strides", "needs_fixed_stride_order"):
        tag = getattr(torch.Tag, name, None)
        if tag is not None:
            return [tag]
    return []


def _no_bias_grad(needs_grad: bool) -> None:
    if needs_grad:
        raise HipdnnError(
            ErrorCode.GRAPH_NOT_SUPPORTED,
            "hipdnn.torch: no gradient with respect to attn_mask (hipdnn's sdpa_backward has no dBias); "
            "detach the mask or compute its gradient elsewhere",
        )


class AttentionFunction(torch.autograd.Function):
    """Eager autograd: the forward keeps the row log-sum-exp (stats) it computes, and the backward
    runs hipdnn's ``sdpa_backward`` from it. Not twice differentiable."""

    @staticmethod
    def forward(
        ctx: Any,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        bias: torch.Tensor | None,
        seq_len_q: torch.Tensor | None,
        seq_len_kv: torch.Tensor | None,
        masking: Masking,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(o, stats)`` of one attention call; saves the inputs, ``o`` and ``stats`` for the backward.
        ``stats`` (the row log-sum-exp) is marked non-differentiable."""
        o, stats = attention_forward(q, k, v, bias, seq_len_q, seq_len_kv, masking, True)
        assert stats is not None
        ctx.save_for_backward(q, k, v, o, stats, bias, seq_len_q, seq_len_kv)
        ctx.masking = masking
        ctx.mark_non_differentiable(stats)
        return o, stats

    @staticmethod
    def backward(ctx: Any, grad_o: torch.Tensor, grad_stats: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
        """``(dq, dk, dv, None, ...)`` from hipdnn's ``sdpa_backward``, each in its input's layout; a mask
        (``bias``) that requires grad is refused (there is no dBias). Under ``create_graph=True`` the
        gradients depend on q, k, v (and grad_o) through a computation autograd cannot see: they come
        back marked so that differentiating them raises, never silently giving zero (``torch``'s
        ``once_differentiable`` looks at grad_o alone, and ``out.sum()`` hands a grad_o that needs none)."""
        _no_bias_grad(bool(ctx.needs_input_grad[3]))
        q, k, v, o, stats, bias, seq_len_q, seq_len_kv = ctx.saved_tensors
        with torch.no_grad():
            dq, dk, dv = attention_backward(grad_o, q, k, v, o, stats, bias, seq_len_q, seq_len_kv, ctx.masking)
        if torch.is_grad_enabled() and any(t.requires_grad for t in (grad_o, q, k, v)):
            dq, dk, dv = _not_twice_differentiable(dq, dk, dv)
        return dq, dk, dv, None, None, None, None


def _not_twice_differentiable(*grads: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """``grads`` with a grad_fn that raises when differentiated (what ``once_differentiable`` does)."""
    fail = autograd_functions.DelayedError(
        b"hipdnn.torch: attention gradients are not differentiable (no double backward: hipdnn's "
        b"sdpa_backward has no derivative); compute gradient penalties and Hessian products with torch's SDPA",
        len(grads),
    )
    return tuple(fail(*(g.detach().requires_grad_(True) for g in grads)))


def apply_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor | None,
    seq_len_q: torch.Tensor | None,
    seq_len_kv: torch.Tensor | None,
    masking: Masking,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``AttentionFunction.apply``, typed."""
    o, stats = AttentionFunction.apply(q, k, v, bias, seq_len_q, seq_len_kv, masking)  # type: ignore[no-untyped-call]
    return cast(torch.Tensor, o), cast(torch.Tensor, stats)


# -- custom ops ---------------------------------------------------------------------------------


def _sdpa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor | None,
    seq_len_q: torch.Tensor | None,
    seq_len_kv: torch.Tensor | None,
    scale: float,
    causal: bool,
    bottom_right: bool,
    left_bound: int | None,
    right_bound: int | None,
    want_stats: bool,
    softcap: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    masking = Masking(scale, causal, bottom_right, left_bound, right_bound, softcap).normalized()
    o, stats = attention_forward(q, k, v, bias, seq_len_q, seq_len_kv, masking, want_stats)
    return o, stats if stats is not None else torch.empty((0,), dtype=torch.float32, device=q.device)


def _sdpa_fake(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor | None,
    seq_len_q: torch.Tensor | None,
    seq_len_kv: torch.Tensor | None,
    scale: float,
    causal: bool,
    bottom_right: bool,
    left_bound: int | None,
    right_bound: int | None,
    want_stats: bool,
    softcap: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    return forward_outputs(q, v, want_stats)


def _sdpa_backward(
    grad_o: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    stats: torch.Tensor,
    bias: torch.Tensor | None,
    seq_len_q: torch.Tensor | None,
    seq_len_kv: torch.Tensor | None,
    scale: float,
    causal: bool,
    bottom_right: bool,
    left_bound: int | None,
    right_bound: int | None,
    softcap: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    masking = Masking(scale, causal, bottom_right, left_bound, right_bound, softcap).normalized()
    dq, dk, dv = attention_backward(grad_o, q, k, v, o, stats, bias, seq_len_q, seq_len_kv, masking)
    return dq, dk, dv


def _sdpa_backward_fake(
    grad_o: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    stats: torch.Tensor,
    bias: torch.Tensor | None,
    seq_len_q: torch.Tensor | None,
    seq_len_kv: torch.Tensor | None,
    scale: float,
    causal: bool,
    bottom_right: bool,
    left_bound: int | None,
    right_bound: int | None,
    softcap: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    dq, dk, dv = backward_outputs(q, k, v)
    return dq, dk, dv


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[torch.Tensor, torch.Tensor]) -> None:
    q, k, v, bias, seq_len_q, seq_len_kv, scale, causal, bottom_right, left, right, want_stats = inputs[:12]
    softcap = inputs[12] if len(inputs) > 12 else None
    o, stats = output
    ctx.save_for_backward(q, k, v, o, stats, bias, seq_len_q, seq_len_kv)
    ctx.options = (scale, causal, bottom_right, left, right, softcap)
    ctx.want_stats = want_stats
    ctx.mark_non_differentiable(stats)


def _backward(ctx: Any, grad_o: torch.Tensor, grad_stats: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
    _no_bias_grad(bool(ctx.needs_input_grad[3]))
    if not ctx.want_stats:
        raise HipdnnError(
            ErrorCode.INVALID_VALUE,
            f"{FORWARD_OP}: backward of a forward run with want_stats=False (it kept no log-sum-exp)",
        )
    q, k, v, o, stats, bias, seq_len_q, seq_len_kv = ctx.saved_tensors
    dq, dk, dv = backward_op(grad_o, q, k, v, o, stats, bias, seq_len_q, seq_len_kv, *ctx.options)
    return dq, dk, dv, None, None, None, None, None, None, None, None, None, None


def _custom_op(name: str, fn: Any, schema: str) -> Any:
    """``torch.library.custom_op`` with the layout tag (torch releases before the ``tags`` argument
    get the op without it)."""
    try:
        return torch.library.custom_op(name, fn, mutates_args=(), schema=schema, tags=_layout_tags() or None)
    except TypeError:
        return torch.library.custom_op(name, fn, mutates_args=(), schema=schema)


forward_op = _custom_op(FORWARD_OP, _sdpa, _FORWARD_SCHEMA)
forward_op.register_fake(_sdpa_fake)
backward_op = _custom_op(BACKWARD_OP, _sdpa_backward, _BACKWARD_SCHEMA)
backward_op.register_fake(_sdpa_backward_fake)
forward_op.register_autograd(_backward, setup_context=_setup_context)

__all__ = ["BACKWARD_OP", "FORWARD_OP", "AttentionFunction", "apply_attention", "backward_op", "forward_op"]
