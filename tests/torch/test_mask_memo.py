"""hipdnn.torch reuses the additive bias it made from a boolean attn_mask while the same mask tensor
comes back unmodified (transformers hands one mask to every layer): reused only for that tensor,
at that version and call shape; an in-place change, another tensor, a dead tensor, an inference
tensor or another thread each get their own conversion, and every result is torch's. A dead mask's
bias is released with it."""

from __future__ import annotations

import gc
import threading
import weakref
from typing import Any

import pytest

from tests.torch.support import close, rand

torch = pytest.importorskip("torch", reason="hipdnn.torch needs PyTorch (pip install 'hipdnn[torch]')")
import torch.nn.functional as F  # noqa: E402

import hipdnn.torch as ht  # noqa: E402
from hipdnn.torch import attention  # noqa: E402

ATOL = 5e-6
B, H, SQ, SKV, D = 2, 3, 37, 129, 16


def qkv(seed: int) -> tuple[Any, Any, Any]:
    return rand(B, H, SQ, D, seed=seed), rand(B, H, SKV, D, seed=seed + 1), rand(B, H, SKV, D, seed=seed + 2)


def padding_mask(lengths: list[int]) -> Any:
    """[B, 1, SQ, SKV] bool: batch b sees its first lengths[b] keys (and the diagonal band of a causal LM)."""
    keys = torch.arange(SKV)[None, :] < torch.tensor(lengths)[:, None]
    return (keys[:, None, None, :] & torch.ones(SQ, SKV, dtype=torch.bool).tril(SKV - SQ)).contiguous()


def bias_of(mask: Any, q: Any) -> Any:
    return attention._bias(mask, q, 4, "4d", (B,), H, SQ, SKV)


def check(q: Any, k: Any, v: Any, mask: Any) -> None:
    close(
        ht.scaled_dot_product_attention(q, k, v, attn_mask=mask),
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
        ATOL,
    )


def test_the_same_mask_is_converted_once() -> None:
    q, k, v = qkv(1)
    mask = padding_mask([129, 50])
    first = bias_of(mask, q)
    assert bias_of(mask, q) is first
    for _ in range(3):  # as layers do
        check(q, k, v, mask)
    assert bias_of(mask, q) is first


def test_an_in_place_change_is_seen() -> None:
    q, k, v = qkv(2)
    mask = padding_mask([129, 129])
    check(q, k, v, mask)
    before = bias_of(mask, q)
    mask[1, :, :, 60:] = False  # (bumps the version counter)
    after = bias_of(mask, q)
    assert after is not before
    assert (
        torch.isinf(after[1, 0, :, 60:]).all() and torch.isfinite(before[1, 0, -1, 60:]).all()
    )  # (last row: all keys)
    check(q, k, v, mask)
    view = mask[0]  # an in-place change through a view shares the counter
    view[:, :, :10] = False
    check(q, k, v, mask)


def test_another_tensor_or_call_shape_is_converted_anew() -> None:
    q, k, v = qkv(3)
    mask = padding_mask([100, 7])
    first = bias_of(mask, q)
    twin = mask.clone()
    assert bias_of(twin, q) is not first
    check(q, k, v, twin)
    q2 = rand(B, H, SQ, D, seed=9).double()  # another query dtype: a bias of that dtype
    assert bias_of(twin, q2).dtype == torch.float64  # (the key holds the query's dtype)


def test_a_dead_mask_is_never_matched() -> None:
    q, k, v = qkv(4)
    mask = padding_mask([129, 1])
    check(q, k, v, mask)
    bias = weakref.ref(bias_of(mask, q))
    del mask
    gc.collect()
    entry = attention._bool_masks.entry
    assert entry is not None and entry.source() is None and entry.bias is None
    assert bias() is None, "the bias of a dead mask is released with it"
    fresh = padding_mask([3, 129])  # (may reuse the freed storage's address)
    check(q, k, v, fresh)


def test_inference_tensors_and_threads() -> None:
    q, k, v = qkv(5)
    with torch.inference_mode():
        mask = padding_mask([64, 129])
        got = ht.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        mask[0, :, :, :5] = False
        again = ht.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    close(got, F.scaled_dot_product_attention(q, k, v, attn_mask=padding_mask([64, 129])), ATOL)
    close(again, F.scaled_dot_product_attention(q, k, v, attn_mask=mask.clone()), ATOL)

    errors: list[BaseException] = []

    def worker(lengths: list[int]) -> None:
        try:
            m = padding_mask(lengths)
            for _ in range(20):
                check(q, k, v, m)
                m[0, :, :, lengths[0] - 1] = False
                lengths = [lengths[0] - 1, lengths[1]]
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=([129 - 20 * i, 90 + i],)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
