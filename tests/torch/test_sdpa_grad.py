"""Gradients through hipdnn.torch.scaled_dot_product_attention (hipdnn's sdpa_backward, from the
forward's saved log-sum-exp) against float64 autograd of the reference and against torch's own SDPA
backward: BHSD and BSHD views, odd lengths, grouped-query attention, both causal alignments,
windows, masks, sequence lengths, gradients that arrive expanded or transposed, half types."""

from __future__ import annotations

from typing import Any

import pytest

from tests.torch.support import bhsd, bshd, close, reference, visible

torch = pytest.importorskip("torch", reason="hipdnn.torch needs PyTorch (pip install 'hipdnn[torch]')")
import torch.nn.functional as F  # noqa: E402

import hipdnn  # noqa: E402
import hipdnn.torch as ht  # noqa: E402

ATOL = 2e-5  # float32 gradients against float64, values of order 1-10


def leaves(layout: str, b: int, hq: int, hk: int, sq: int, skv: int, d: int = 16, seed: int = 0) -> list[Any]:
    g = torch.Generator().manual_seed(seed)
    if layout == "bshd":
        ts = [bshd(b, sq, hq, d, generator=g), bshd(b, skv, hk, d, generator=g), bshd(b, skv, hk, d, generator=g)]
    else:
        ts = [bhsd(b, hq, sq, d, generator=g), bhsd(b, hk, skv, d, generator=g), bhsd(b, hk, skv, d, generator=g)]
    return [t.detach().requires_grad_() for t in ts]


def grads(out: Any, inputs: list[Any], grad_out: Any) -> list[Any]:
    return list(torch.autograd.grad(out, inputs, grad_out))


def reference_grads(q: Any, k: Any, v: Any, grad_out: Any, **kw: Any) -> tuple[Any, list[Any]]:
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    o, _ = reference(q64, k64, v64, **kw)
    return o, grads(o, [q64, k64, v64], grad_out.double())


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize(("sq", "skv"), [(1, 37), (37, 37), (37, 129), (129, 37)])
@pytest.mark.parametrize(("hq", "hk"), [(4, 4), (4, 2), (4, 1)])
@pytest.mark.parametrize("causal", ["none", "top_left", "bottom_right"])
def test_against_float64(layout: str, sq: int, skv: int, hq: int, hk: int, causal: str) -> None:
    q, k, v = leaves(layout, 2, hq, hk, sq, skv, seed=sq + skv)
    is_causal, br = causal != "none", causal == "bottom_right"
    o = ht.scaled_dot_product_attention(
        q, k, v, is_causal=is_causal, causal_alignment="bottom_right" if br else "top_left", enable_gqa=hq != hk
    )
    grad_out = torch.randn(o.shape, generator=torch.Generator().manual_seed(1))
    got = grads(o, [q, k, v], grad_out)
    want_o, want = reference_grads(q, k, v, grad_out, mask=visible(sq, skv, causal=is_causal, bottom_right=br))
    close(o, want_o, 5e-6, "o")
    for name, g, w, t in zip(("dq", "dk", "dv"), got, want, (q, k, v)):
        close(g, w, ATOL, name)
        same = all(a == b for n, a, b in zip(t.shape, g.stride(), t.stride()) if n > 1)
        assert same, f"{name} is laid out like its input (strides of axes longer than 1)"
    if not br:  # torch's own backward agrees too
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, enable_gqa=hq != hk)
        for name, g, w in zip(("dq", "dk", "dv"), got, grads(ref, [q, k, v], grad_out)):
            close(g, w, ATOL, name + " vs torch")


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_masks(kind: str) -> None:
    q, k, v = leaves("bshd", 2, 4, 2, 37, 129, seed=3)
    g = torch.Generator().manual_seed(4)
    if kind == "bool":
        mask = torch.rand(2, 1, 37, 129, generator=g) > 0.3
        mask[:, :, 5] = False  # an empty row: zero gradients, as torch's
        kw: dict[str, Any] = {"mask": mask}
    else:
        mask = torch.randn(1, 4, 37, 129, generator=g)
        kw = {"bias": mask}
    o = ht.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    grad_out = torch.randn(o.shape, generator=g)
    got = grads(o, [q, k, v], grad_out)
    _, want = reference_grads(q, k, v, grad_out, **kw)
    for name, a, b in zip(("dq", "dk", "dv"), got, want):
        close(a, b, ATOL, name)
    torch_grads = grads(F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True), [q, k, v], grad_out)
    for name, a, b in zip(("dq", "dk", "dv"), got, torch_grads):
        close(a, b, ATOL, name + " vs torch")


@pytest.mark.parametrize(("left", "right", "causal"), [(5, None, True), (8, 3, False), (None, 2, False)])
def test_windows(left: int | None, right: int | None, causal: bool) -> None:
    q, k, v = leaves("bhsd", 2, 2, 2, 37, 70, seed=5)
    o = ht.scaled_dot_product_attention(
        q, k, v, is_causal=causal, causal_alignment="bottom_right", left_bound=left, right_bound=right
    )
    grad_out = torch.randn(o.shape, generator=torch.Generator().manual_seed(6))
    mask = visible(37, 70, causal=causal, bottom_right=True, left=left, right=right)
    _, want = reference_grads(q, k, v, grad_out, mask=mask)
    for name, a, b in zip(("dq", "dk", "dv"), grads(o, [q, k, v], grad_out), want):
        close(a, b, ATOL, name)


def test_sequence_lengths() -> None:
    q, k, v = leaves("bshd", 3, 4, 2, 37, 60, seed=8)
    len_q, len_kv = torch.tensor([30, 37, 1]), torch.tensor([50, 4, 60])
    o = ht.scaled_dot_product_attention(
        q, k, v, is_causal=True, causal_alignment="bottom_right", seq_len_q=len_q, seq_len_kv=len_kv, enable_gqa=True
    )
    grad_out = torch.randn(o.shape, generator=torch.Generator().manual_seed(9))
    got = grads(o, [q, k, v], grad_out)
    for b in range(3):
        mask = visible(37, 60, causal=True, bottom_right=True, len_q=int(len_q[b]), len_kv=int(len_kv[b]))
        _, want = reference_grads(q[b], k[b], v[b], grad_out[b], mask=mask)
        for name, a, w in zip(("dq", "dk", "dv"), got, want):
            close(a[b], w, ATOL, f"{name}[{b}]")


def test_gradient_arriving_expanded_or_transposed() -> None:
    """out.sum() hands the backward a stride-0 gradient; transformers' transpose(1, 2) a BSHD one."""
    q, k, v = leaves("bhsd", 2, 4, 4, 37, 37, seed=10)
    ht.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
    got = [t.grad for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
    for a, t in zip(got, (q, k, v)):
        close(a, t.grad, ATOL)
    q, k, v = leaves("bshd", 2, 4, 2, 37, 50, seed=11)
    out = ht.scaled_dot_product_attention(q, k, v, enable_gqa=True).transpose(1, 2).reshape(2, 37, 64)
    w = torch.randn(64, 3, generator=torch.Generator().manual_seed(12))
    got = torch.autograd.grad((out @ w).square().sum(), [q, k, v])
    ref = F.scaled_dot_product_attention(q, k, v, enable_gqa=True).transpose(1, 2).reshape(2, 37, 64)
    for a, b in zip(got, torch.autograd.grad((ref @ w).square().sum(), [q, k, v])):
        close(a, b, 1e-4)


def test_only_some_inputs_require_grad() -> None:
    q, k, v = leaves("bhsd", 1, 2, 2, 9, 13)
    k = k.detach()
    o = ht.scaled_dot_product_attention(q, k, v)
    dq, dv = torch.autograd.grad(o.sum(), [q, v])
    rq, rv = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v).sum(), [q, v])
    close(dq, rq, ATOL)
    close(dv, rv, ATOL)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_types(dtype: Any) -> None:
    q, k, v = (t.detach().to(dtype).requires_grad_() for t in leaves("bshd", 2, 4, 2, 37, 70, seed=13))
    o = ht.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    grad_out = torch.randn(o.shape, generator=torch.Generator().manual_seed(14)).to(dtype)
    got = grads(o, [q, k, v], grad_out)
    _, want = reference_grads(q, k, v, grad_out, mask=visible(37, 70, causal=True))
    ref = grads(F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True), [q, k, v], grad_out)
    for name, a, r, w in zip(("dq", "dk", "dv"), got, ref, want):
        assert a.dtype == dtype
        err, torch_err = (a.double() - w).abs().max().item(), (r.double() - w).abs().max().item()
        assert err <= max(2 * torch_err, 2e-2), (name, err, torch_err)


def test_lse_carries_no_gradient_and_mask_gradients_are_refused() -> None:
    q, k, v = leaves("bhsd", 1, 2, 2, 9, 13)
    o, lse = ht.scaled_dot_product_attention(q, k, v, return_lse=True)
    assert o.requires_grad and not lse.requires_grad
    bias = torch.zeros(9, 13, requires_grad=True)
    with pytest.raises(hipdnn.HipdnnError, match="no mask gradient"):
        ht.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    with torch.no_grad():  # without autograd a mask that requires grad is only a mask
        ht.scaled_dot_product_attention(q, k, v, attn_mask=bias)
