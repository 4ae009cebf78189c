"""torch.compile over hipdnn.torch: the custom ops ``hipdnn::sdpa`` / ``hipdnn::sdpa_backward`` pass
torch.library.opcheck (schema, fake implementation, autograd registration, AOT dispatch), and
``torch.compile(fullgraph=True)`` traces forward and backward without a graph break, with the
aot_eager and inductor backends, with dynamic lengths in one graph."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.torch.support import close

torch = pytest.importorskip("torch", reason="hipdnn.torch needs PyTorch (pip install 'hipdnn[torch]')")
import torch.nn.functional as F  # noqa: E402

import hipdnn.torch as ht  # noqa: E402
from hipdnn.torch.ops import backward_op, forward_op  # noqa: E402

ATOL = 1e-5


def inputs(sq: int = 37, skv: int = 50, grad: bool = True, seed: int = 0) -> list[Any]:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, sq, 4, 16, generator=g).transpose(1, 2)  # BSHD views, as transformers passes them
    k = torch.randn(2, skv, 2, 16, generator=g).transpose(1, 2)
    v = torch.randn(2, skv, 2, 16, generator=g).transpose(1, 2)
    return [t.detach().requires_grad_(grad) for t in (q, k, v)]


def test_ops_are_registered() -> None:
    assert ht.FORWARD_OP == "hipdnn::sdpa" and ht.BACKWARD_OP == "hipdnn::sdpa_backward"
    assert torch.ops.hipdnn.sdpa.default is not None and torch.ops.hipdnn.sdpa_backward.default is not None
    tags = torch.ops.hipdnn.sdpa.default.tags
    assert torch.Tag.needs_exact_strides in tags or torch.Tag.needs_fixed_stride_order in tags


@pytest.mark.parametrize(
    "options",
    [
        (None, None, None, 0.25, True, False, None, None, True),
        ("mask", None, None, 0.25, False, False, 5, None, True),
        (None, [30, 37], [50, 20], 0.3, True, True, None, 2, False),
    ],
)
def test_opcheck_forward(options: tuple[Any, ...]) -> None:
    q, k, v = inputs(grad=options[-1])
    mask, len_q, len_kv, *rest = options
    bias = torch.randn(2, 1, 37, 50) if mask else None
    lengths = [torch.tensor(x) if x is not None else None for x in (len_q, len_kv)]
    result = torch.library.opcheck(forward_op, (q, k, v, bias, *lengths, *rest))
    assert set(result.values()) == {"SUCCESS"}, result


def test_opcheck_backward() -> None:
    q, k, v = inputs(grad=False)
    o, stats = forward_op(q, k, v, None, None, None, 0.25, True, False, None, None, True)
    grad_o = torch.randn(o.shape)
    result = torch.library.opcheck(
        backward_op, (grad_o, q, k, v, o, stats, None, None, None, 0.25, True, False, None, None)
    )
    assert set(result.values()) == {"SUCCESS"}, result


def attention(q: Any, k: Any, v: Any) -> Any:
    return ht.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True) * 2


def reference(q: Any, k: Any, v: Any) -> Any:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True) * 2


def check_compiled(fn: Callable[..., Any], q: Any, k: Any, v: Any) -> None:
    out = fn(q, k, v)
    want = reference(q, k, v)
    close(out, want, ATOL)
    assert out.stride() == attention(q, k, v).stride()  # the fake implementation lays out like the real one
    grad_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(3))
    got = torch.autograd.grad(out, [q, k, v], grad_out)
    for a, b in zip(got, torch.autograd.grad(want, [q, k, v], grad_out)):
        close(a, b, ATOL)


def test_no_graph_breaks() -> None:
    explanation = torch._dynamo.explain(attention)(*inputs())
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_fullgraph_forward_and_backward(backend: str) -> None:
    torch._dynamo.reset()
    fn = torch.compile(attention, backend=backend, fullgraph=True)
    check_compiled(fn, *inputs())
    with torch.no_grad():
        q, k, v = inputs(grad=False, seed=1)
        close(fn(q, k, v), reference(q, k, v), ATOL)


def test_dynamic_lengths_share_one_graph() -> None:
    torch._dynamo.reset()
    counters = torch._dynamo.utils.counters
    counters.clear()

    def masked(q: Any, k: Any, v: Any, mask: Any) -> Any:
        return ht.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True).relu().sum()

    fn = torch.compile(masked, backend="aot_eager", fullgraph=True, dynamic=True)
    for sq in (37, 64, 129):
        q, k, v = inputs(sq, sq + 3, seed=sq)
        mask = torch.rand(2, 1, sq, sq + 3, generator=torch.Generator().manual_seed(sq)) > 0.2
        out = fn(q, k, v, mask)
        want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True).relu().sum()
        close(out, want, 1e-3)
        for a, b in zip(torch.autograd.grad(out, [q, k, v]), torch.autograd.grad(want, [q, k, v])):
            close(a, b, ATOL)
    assert counters["stats"]["unique_graphs"] == 1
    assert not counters["graph_break"]
