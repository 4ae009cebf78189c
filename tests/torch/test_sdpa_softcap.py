"""``softcap=`` on hipdnn.torch.scaled_dot_product_attention and through the transformers backend:
values and gradients against an eager float64 torch reference that caps the scaled scores with tanh
before adding the mask (transformers' Gemma 2 eager attention, written out), the plan cache key,
refusals, torch.compile, and a tiny random-weight Gemma 2 generating the same greedy tokens with
attn_implementation "hipdnn" as with "eager" (nothing downloaded)."""

from __future__ import annotations

import math
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="hipdnn.torch needs PyTorch (pip install 'hipdnn[torch]')")

import hipdnn  # noqa: E402
import hipdnn.torch as ht  # noqa: E402


def eager(
    q: Any, k: Any, v: Any, cap: float | None, mask: Any = None, causal: bool = False, scale: float | None = None
) -> Any:
    """float64 attention with Gemma 2's order: s = scale q k^T; s = cap tanh(s / cap); s += mask; softmax."""
    q, k, v = (t.double() for t in (q, k, v))
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    s = q @ k.transpose(-1, -2) * (scale if scale is not None else q.shape[-1] ** -0.5)
    if cap is not None:
        s = torch.tanh(s / cap) * cap
    if mask is not None:
        s = s + (mask.double() if mask.dtype != torch.bool else torch.where(mask, 0.0, -math.inf).double())
    if causal:
        sq, skv = s.shape[-2:]
        s = s.masked_fill(~torch.ones(sq, skv, dtype=torch.bool).tril(), -math.inf)
    return torch.softmax(s, dim=-1) @ v


def data(b: int, hq: int, hk: int, sq: int, skv: int, d: int = 16, seed: int = 0, layout: str = "bhsd"):
    g = torch.Generator().manual_seed(seed)
    if layout == "bshd":  # the views transformers passes
        return (
            torch.randn(b, sq, hq, d, generator=g).transpose(1, 2) * 2,
            torch.randn(b, skv, hk, d, generator=g).transpose(1, 2) * 2,
            torch.randn(b, skv, hk, d, generator=g).transpose(1, 2),
        )
    return (
        torch.randn(b, hq, sq, d, generator=g) * 2,
        torch.randn(b, hk, skv, d, generator=g) * 2,
        torch.randn(b, hk, skv, d, generator=g),
    )


CASES = {
    "plain": dict(b=1, hq=2, hk=2, sq=37, skv=37),
    "causal_gqa_bshd": dict(b=2, hq=4, hk=2, sq=37, skv=37, causal=True, layout="bshd"),
    "decode": dict(b=2, hq=4, hk=1, sq=1, skv=129),
    "bool_mask": dict(b=2, hq=2, hk=2, sq=29, skv=129, mask="bool"),
    "float_mask": dict(b=1, hq=2, hk=1, sq=37, skv=37, mask="float"),
    "odd_129": dict(b=1, hq=2, hk=2, sq=129, skv=129, causal=True),
}


def make_mask(kind: str | None, b: int, sq: int, skv: int) -> Any:
    g = torch.Generator().manual_seed(9)
    if kind == "bool":
        m = torch.rand(b, 1, sq, skv, generator=g) > 0.3
        m[..., 0] = True  # every row sees a key
        return m
    if kind == "float":
        return torch.randn(b, 1, sq, skv, generator=g)
    return None


@pytest.mark.parametrize("cap", [0.5, 5.0, 50.0])
@pytest.mark.parametrize("name", list(CASES))
def test_values_match_the_eager_reference(name: str, cap: float) -> None:
    c = dict(CASES[name])
    mask_kind, causal, layout = c.pop("mask", None), c.pop("causal", False), c.pop("layout", "bhsd")
    q, k, v = data(**c, layout=layout)
    mask = make_mask(mask_kind, c["b"], c["sq"], c["skv"])
    got = ht.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=c["hq"] != c["hk"], softcap=cap
    )
    want = eager(q, k, v, cap, mask, causal)
    assert (got.double() - want).abs().max().item() < 3e-5
    if cap < 10:  # the cap bites: the uncapped result differs
        assert (eager(q, k, v, None, mask, causal) - want).abs().max().item() > 1e-2


@pytest.mark.parametrize("name", ["plain", "causal_gqa_bshd", "float_mask", "decode"])
def test_gradients_match_the_eager_reference(name: str) -> None:
    c = dict(CASES[name])
    mask_kind, causal, layout = c.pop("mask", None), c.pop("causal", False), c.pop("layout", "bhsd")
    cap = 2.0
    q, k, v = (t.detach().requires_grad_() for t in data(**c, seed=3, layout=layout))
    mask = make_mask(mask_kind, c["b"], c["sq"], c["skv"])
    go = torch.randn(c["b"], c["hq"], c["sq"], 16, generator=torch.Generator().manual_seed(4))
    out = ht.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=c["hq"] != c["hk"], softcap=cap
    )
    got = torch.autograd.grad(out, (q, k, v), go)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    want = torch.autograd.grad(eager(q64, k64, v64, cap, mask, causal), (q64, k64, v64), go.double())
    plain = torch.autograd.grad(eager(q64, k64, v64, None, mask, causal), (q64, k64, v64), go.double())
    for name_, g_, w in zip("qkv", got, want):
        scale = max(1.0, w.abs().max().item())
        assert (g_.double() - w).abs().max().item() < 1e-4 * scale, name_
        assert g_.stride() == (q, k, v)["qkv".index(name_)].stride()  # in its input's layout
    assert (plain[0] - want[0]).abs().max().item() > 1e-2  # the derivative of the cap matters


def test_bf16_values() -> None:
    q, k, v = (t.bfloat16() for t in data(1, 2, 2, 37, 37, seed=5))
    got = ht.scaled_dot_product_attention(q, k, v, is_causal=True, softcap=3.0)
    want = eager(q, k, v, 3.0, causal=True)
    assert got.dtype == torch.bfloat16 and (got.double() - want).abs().max().item() < 3e-2


def test_softcap_is_part_of_the_plan_key() -> None:
    q, k, v = data(1, 2, 2, 16, 16, seed=6)
    cache = ht.plan_cache()
    ht.scaled_dot_product_attention(q, k, v, softcap=7.0)
    built = cache.stats().builds
    a = ht.scaled_dot_product_attention(q, k, v, softcap=7.0)
    assert cache.stats().builds == built  # the same cap: the same plan
    b = ht.scaled_dot_product_attention(q, k, v, softcap=3.0)
    assert cache.stats().builds == built + 1  # another cap: another plan
    c = ht.scaled_dot_product_attention(q, k, v)
    assert (a - b).abs().max().item() > 1e-4 and (a - c).abs().max().item() > 1e-4
    # 0 means off: the uncapped plan, the uncapped values
    z = ht.scaled_dot_product_attention(q, k, v, softcap=0.0)
    assert torch.equal(z, c)


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf, True, "30", torch.tensor(30.0)])
def test_bad_softcap_is_refused(bad: Any) -> None:
    q, k, v = data(1, 2, 2, 8, 8)
    with pytest.raises(hipdnn.HipdnnError, match="softcap must be None or a"):
        ht.scaled_dot_product_attention(q, k, v, softcap=bad)


def test_softcap_under_torch_compile_forward_and_backward() -> None:
    q, k, v = (t.detach().requires_grad_() for t in data(1, 2, 1, 17, 33, seed=8))

    def f(q: Any, k: Any, v: Any) -> Any:
        return ht.scaled_dot_product_attention(q, k, v, enable_gqa=True, softcap=1.5)

    torch._dynamo.reset()
    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    out = compiled(q, k, v)
    want = eager(q, k, v, 1.5)
    assert (out.double() - want).abs().max().item() < 3e-5
    go = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), go)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = torch.autograd.grad(eager(q64, k64, v64, 1.5), (q64, k64, v64), go.double())
    for g_, w in zip(got, ref):
        assert (g_.double() - w).abs().max().item() < 1e-4 * max(1.0, w.abs().max().item())


def test_the_fallback_never_serves_softcap(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's SDPA has no softcap: with the fallback on, a refused softcap call still raises."""
    ht.set_fallback(True)
    try:
        q, k, v = data(1, 2, 2, 8, 8)
        with pytest.raises(hipdnn.HipdnnError, match="dropout"):
            ht.scaled_dot_product_attention(q, k, v, dropout_p=0.5, softcap=3.0)
    finally:
        ht.set_fallback(False)


# ------------------------------------------------------------------------------------ transformers
transformers = pytest.importorskip("transformers", reason="the transformers backend test needs transformers")


def test_transformers_backend_passes_softcap() -> None:
    module = torch.nn.Module()
    q, k, v = data(1, 4, 2, 5, 5, seed=10, layout="bshd")
    out, _ = ht.hipdnn_attention_forward(module, q, k, v, None, softcap=0.7, scaling=0.25)
    want = eager(q, k, v, 0.7, causal=True, scale=0.25)
    assert (out.double() - want.transpose(1, 2)).abs().max().item() < 3e-5


CAP = 2.0


@pytest.fixture(scope="module")
def gemma2() -> Any:
    ht.register_transformers()
    torch.manual_seed(0)
    config = transformers.Gemma2Config(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=256,
        sliding_window=8,  # layer 0 slides, layer 1 is global
        attn_logit_softcapping=CAP,
        final_logit_softcapping=30.0,
        query_pre_attn_scalar=16,
    )
    m = transformers.Gemma2ForCausalLM(config).eval()
    # random weights give scores near 0, where tanh is the identity: scale q and k up so that the cap bites
    with torch.no_grad():
        for layer in m.model.layers:
            layer.self_attn.q_proj.weight.mul_(12.0)
            layer.self_attn.k_proj.weight.mul_(12.0)
    return m


@pytest.mark.parametrize(("batch", "pad"), [(1, False), (2, True)])
def test_gemma2_greedy_tokens_match_eager(gemma2: Any, batch: int, pad: bool) -> None:
    ids = torch.randint(0, 128, (batch, 11), generator=torch.Generator().manual_seed(batch))
    mask = torch.ones_like(ids)
    if pad:
        mask[-1, :3] = 0
    out = {}
    for impl in ("eager", "hipdnn"):
        gemma2.set_attn_implementation(impl)
        with torch.no_grad():
            out[impl] = gemma2.generate(ids, attention_mask=mask, max_new_tokens=12, do_sample=False, pad_token_id=0)
    assert torch.equal(out["hipdnn"], out["eager"]), (out["hipdnn"].tolist(), out["eager"].tolist())


def test_gemma2_logits_match_eager_and_depend_on_the_cap(gemma2: Any) -> None:
    ids = torch.randint(0, 128, (2, 19), generator=torch.Generator().manual_seed(3))
    logits = {}
    for impl in ("eager", "hipdnn"):
        gemma2.set_attn_implementation(impl)
        with torch.no_grad():
            logits[impl] = gemma2(ids).logits
    assert (logits["hipdnn"] - logits["eager"]).abs().max().item() < 1e-4
    # the cap reaches the attention: without it the eager logits move
    gemma2.config.attn_logit_softcapping = None
    for layer in gemma2.model.layers:
        layer.self_attn.attn_logit_softcapping = None
    try:
        gemma2.set_attn_implementation("eager")
        with torch.no_grad():
            uncapped = gemma2(ids).logits
    finally:
        gemma2.config.attn_logit_softcapping = CAP
        for layer in gemma2.model.layers:
            layer.self_attn.attn_logit_softcapping = CAP
    assert (uncapped - logits["eager"]).abs().max().item() > 1e-2
