"""The documented opt-in fallback (``hipdnn.torch.set_fallback``): calls the engines refuse run torch's
own SDPA with one warning per reason; mistakes, hipdnn-only options and everything else still raise.
And the plan cache's memory of refusals: a kind no engine builds is not rebuilt on every call."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="hipdnn.torch needs PyTorch (pip install 'hipdnn[torch]')")

import hipdnn.torch as ht  # noqa: E402
from hipdnn.frontend import ErrorCode, HipdnnError  # noqa: E402
from hipdnn.torch import attention, plans  # noqa: E402


@pytest.fixture
def fallback() -> Iterator[None]:
    ht.set_fallback(True)
    attention._warned.clear()
    yield
    ht.set_fallback(False)
    attention._warned.clear()


def rand(*shape: int, seed: int = 0, dtype: Any = None) -> Any:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=dtype or torch.float32)


def test_fallback_is_off_by_default() -> None:
    assert not ht.fallback_enabled()
    q = rand(1, 2, 5, 8, dtype=torch.float64)
    with pytest.raises(HipdnnError, match="float64 is not served") as err:
        ht.scaled_dot_product_attention(q, q, q)
    assert err.value.code == ErrorCode.GRAPH_NOT_SUPPORTED


def test_refused_calls_run_torch_with_one_warning_per_reason(fallback: None) -> None:
    q, k, v = (rand(2, 3, 37, 16, seed=s, dtype=torch.float64) for s in (1, 2, 3))
    mask = rand(2, 1, 37, 37, seed=4) > 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            got = ht.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            torch.testing.assert_close(
                got, torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask), rtol=0, atol=0
            )
        # dropout: another reason, another (single) warning; torch's own dropout, same seed, same values
        torch.manual_seed(7)
        got = ht.scaled_dot_product_attention(q, k, v, dropout_p=0.25)
        torch.manual_seed(7)
        want = torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=0.25)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        ht.scaled_dot_product_attention(q.float(), k.float(), v.float(), dropout_p=0.25)
    fallbacks = [w for w in caught if issubclass(w.category, ht.HipdnnFallbackWarning)]
    assert len(fallbacks) == 2, [str(w.message) for w in fallbacks]
    assert "float64" in str(fallbacks[0].message) and "dropout" in str(fallbacks[1].message)
    assert fallbacks[0].filename == __file__  # points at the caller's line


def test_gradients_flow_through_the_fallback(fallback: None) -> None:
    q, k, v = (rand(1, 2, 9, 8, seed=s, dtype=torch.float64).requires_grad_(True) for s in (1, 2, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ht.HipdnnFallbackWarning)
        ht.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
    assert q.grad is not None and k.grad is not None and v.grad is not None


def test_mistakes_and_hipdnn_extras_still_raise(fallback: None) -> None:
    q = rand(1, 2, 5, 8, dtype=torch.float64)
    with pytest.raises(HipdnnError, match="last dim"):  # INVALID_VALUE: never handed to torch
        ht.scaled_dot_product_attention(q, rand(1, 2, 5, 4, dtype=torch.float64), q)
    with pytest.raises(HipdnnError, match="not served"):  # torch's function has no return_lse
        ht.scaled_dot_product_attention(q, q, q, return_lse=True)
    with pytest.raises(HipdnnError, match="not served"):  # nor lengths
        ht.scaled_dot_product_attention(q, q, q, seq_len_kv=torch.tensor([3]))
    with pytest.raises(HipdnnError, match="not served"):  # nor a mask and is_causal together
        ht.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(5, 5, dtype=torch.bool), is_causal=True)


def test_a_refused_kind_is_not_rebuilt_on_every_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache remembers that no engine built a kind at a capacity: later calls needing that much
    or more are refused at once (same message); a call that fits a smaller capacity asks the engines
    again (a refusal may be about size)."""
    cache = ht.plan_cache()
    cache.clear()
    attempts: list[dict[str, int]] = []

    def refusing_plan(handle: Any, kind: Any, caps: dict[str, int], floors: Any, number: int) -> Any:
        attempts.append(dict(caps))
        raise HipdnnError(ErrorCode.GRAPH_NOT_SUPPORTED, "engine 999: nothing served")

    monkeypatch.setattr(plans, "Plan", refusing_plan)
    try:
        big = rand(1, 2, 40, 8)
        for _ in range(3):
            with pytest.raises(HipdnnError, match="engine 999: nothing served"):
                ht.scaled_dot_product_attention(big, big, big)
        assert len(attempts) == 1
        with pytest.raises(HipdnnError, match="engine 999"):
            ht.scaled_dot_product_attention(rand(1, 2, 64, 8), rand(1, 2, 64, 8), rand(1, 2, 64, 8))
        assert len(attempts) == 1  # capacity 64 again: known
        small = rand(1, 2, 5, 8)
        with pytest.raises(HipdnnError, match="engine 999"):
            ht.scaled_dot_product_attention(small, small, small)
        assert len(attempts) == 2 and attempts[1]["SQ"] < attempts[0]["SQ"]
    finally:
        cache.clear()


def test_transformers_backend_falls_back_for_engine_refusals_only(fallback: None) -> None:
    """Through the transformers backend: an engine refusal (dropout in training mode) runs torch's
    SDPA; options transformers' own SDPA function would silently ignore (attention sinks) stay
    refusals, and softcap, which torch's SDPA would ignore too, is served by hipdnn, never fallen back."""
    q, k, v = torch.randn(1, 4, 5, 16), torch.randn(1, 2, 5, 16), torch.randn(1, 2, 5, 16)
    module = torch.nn.Module()
    with pytest.raises(HipdnnError, match="attention sinks"):
        ht.hipdnn_attention_forward(module, q, k, v, None, s_aux=torch.zeros(4))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ht.HipdnnFallbackWarning)
        capped, _ = ht.hipdnn_attention_forward(module, q, k, v, None, softcap=0.5)
        plain, _ = ht.hipdnn_attention_forward(module, q, k, v, None)
    assert (capped - plain).abs().max().item() > 1e-3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ht.HipdnnFallbackWarning)
        torch.manual_seed(3)
        out, _ = ht.hipdnn_attention_forward(module, q, k, v, None, dropout=0.5)
    torch.manual_seed(3)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=0.5, is_causal=True, enable_gqa=True)
    torch.testing.assert_close(out, want.transpose(1, 2), rtol=0, atol=0)
